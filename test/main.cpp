#include "catch_runner.hpp"

int main(int argc, char* argv[]) { return test::run_catch(argc, argv); }
