// examples/order_mutex.cpp: the one file that compiles shop::order_mutex (see
// order_mutex.hpp), and the library's own templates for the in-process store: the
// program is built with DISTLOCK_SEPARATE_COMPILATION (README.md, "Separate
// compilation"). Link it into every program that includes the header.
#include "order_mutex.hpp"

#include <distlock/src/memory.hpp>

template class distlock::basic_distributed_mutex<distlock::memory::store, distlock::retry::exponential_backoff>;
