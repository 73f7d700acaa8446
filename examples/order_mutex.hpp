// examples/order_mutex.hpp: the mutex type of a service whose many source files lock
// orders, compiled once (in order_mutex.cpp) rather than in every file that locks.
//
// `extern template` tells each file that includes this header that the mutex's
// acquisition loop is compiled elsewhere, so the file only calls it. The type must be
// spelled out in full (an explicit instantiation cannot name an alias), and the
// explicit instantiation in order_mutex.cpp must name the same type.
#pragma once

#include <distlock/distlock.hpp>
#include <distlock/memory.hpp>

namespace shop {

using order_mutex = distlock::basic_distributed_mutex<distlock::memory::store, distlock::retry::exponential_backoff>;

} // namespace shop

extern template class distlock::basic_distributed_mutex<distlock::memory::store, distlock::retry::exponential_backoff>;
