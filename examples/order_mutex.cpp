// examples/order_mutex.cpp: the one file that compiles shop::order_mutex (see
// order_mutex.hpp). Link it into every program that includes the header.
#include "order_mutex.hpp"

template class distlock::basic_distributed_mutex<distlock::memory::store, distlock::retry::exponential_backoff>;
