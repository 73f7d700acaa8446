// Built by a compiler mode without C++20 coroutines: the first error says what is needed.
#include <distlock/distlock.hpp>

int main() {}
