// distlock/handover.hpp: a lock that a fair queue's release handed straight to its
// head waiter (fair_queue_store in store.hpp), as the waiter's watcher read it from
// the release's message. Apart from store.hpp so that a store's sans-I/O reader of
// that message needs no coroutine support.
#pragma once

#include <distlock/clock.hpp>
#include <distlock/options.hpp>

#include <cstdint>

namespace distlock {

struct handover {
    std::uint64_t try_number = 0; ///< the waiter's try that its place in line was kept by
    fence_token fence = 0;
    duration after_try{}; ///< the store's time from that try to the hand-over, never negative
};

} // namespace distlock
