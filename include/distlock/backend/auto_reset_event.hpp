// distlock/backend/auto_reset_event.hpp: a flag that one coroutine waits for and any
// thread sets.
//
// What the library needs from "wake me when X happened": a release notification for a
// waiter, the last piece of background work ending for a store's close(), the replies
// of a fan-out settling, and these guarantees:
//  - set() may be called from any thread, also under the caller's own lock: it never
//    runs the waiter inline, the waiter's completion is posted to its executor;
//  - a set() before the wait starts is kept (one slot), so a signal that comes between
//    a check and the wait is not lost;
//  - the wait honours its caller's cancellation and a deadline, and keeps the waiter's
//    executor from running out of work while it waits;
//  - an io_context destroyed during a wait destroys the waiting coroutine without
//    resuming it, as it does for any Asio operation (the coroutine often owns the
//    event: the cycle must end there).
// Asio's concurrent_channel offers all of this, at the price of its whole machinery in
// every translation unit that includes the core. Here the waiting is a distlock::timer's
// wait, which every coroutine with a deadline instantiates anyway: the timer expires at
// the wait's deadline, set() cancels it, and the waiter then asks the flag. The flag is
// the truth, the timer only the way to sleep: a wait ended by its deadline or its
// caller's cancellation still reports a set() that came first.
//
// The event must outlive its waits (a member of what the waiting coroutine owns). The
// timer is only touched under the event's mutex: Asio's I/O objects are not safe for
// concurrent use, and set() comes from other threads.
#pragma once

#include <distlock/clock.hpp>
#include <distlock/backend/deferred.hpp>
#include <distlock/result.hpp>

#include <asio/any_io_executor.hpp>
#include <asio/async_result.hpp>

#include <mutex>
#include <system_error>
#include <utility>

namespace distlock::backend {

class auto_reset_event {
public:
    explicit auto_reset_event(asio::any_io_executor ex) : timer_{std::move(ex), time_point::max()} {}
    auto_reset_event(const auto_reset_event&) = delete;
    auto_reset_event& operator=(const auto_reset_event&) = delete;

    /// Wakes the waiter, or the next wait if none is waiting now. Sets that come
    /// before a wait takes them collapse into one.
    void set()
    {
        std::lock_guard lock{mutex_};
        signalled_ = true;
        timer_.cancel(); // the wait's completion is posted, never run here
    }

    /// Takes a set() made since the last wait or take, without waiting.
    bool try_take()
    {
        std::lock_guard lock{mutex_};
        return std::exchange(signalled_, false);
    }

    /// True when set (taking the set); false when `until` came first or the caller's
    /// cancellation ended the wait. One waiter at a time.
    // A template so that it is compiled only where it is used (see backend/deferred.hpp).
    template <class Unused = void>
    awaitable<bool> wait(time_point until = time_point::max())
    {
        if (try_take())
            co_return true;
        (void)co_await async_wait(until, as_tuple_awaitable<Unused>());
        co_return try_take();
    }

    /// The wait itself, without taking the set: completes with the timer's signature
    /// when set(), at `until`, or on the caller's cancellation (a set() made before it
    /// started completes it at once); the caller then asks try_take(). For a caller
    /// that is itself a coroutine on a hot path: it saves wait()'s frame.
    template <class Token>
    auto async_wait(time_point until, Token&& token)
    {
        return asio::async_initiate<Token, void(std::error_code)>(start_wait{this, until}, token);
    }

private:
    // Starts the timer's wait under the mutex, so that a set() cannot fall between
    // the check of the flag and the wait.
    struct start_wait {
        auto_reset_event* self;
        time_point until;
        template <class Handler>
        void operator()(Handler&& handler) const
        {
            std::lock_guard lock{self->mutex_};
            self->timer_.expires_at(until);
            self->timer_.async_wait(std::forward<Handler>(handler));
            if (self->signalled_)
                self->timer_.cancel();
        }
    };

    std::mutex mutex_;
    bool signalled_ = false;
    timer timer_;
};

} // namespace distlock::backend
