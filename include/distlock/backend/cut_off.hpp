// distlock/backend/cut_off.hpp: an operation cut off at a point in time, and a result
// carried out of a coroutine of another type.
//
// Why a race of its own rather than Asio's `op || timer`: the operator instantiates a
// parallel group, a co_spawn per side, a variant of their results and their handlers
// in every file that locks (bench/README.md, compile cost), and it runs the timer's wait as a coroutine of its own. Here the operation is one
// co_spawn and the deadline a plain timer wait, both ending in one shared state that
// completes the caller's wait once both are done. Every deadline of the library goes
// through the one void form, with the result written through a reference, so a
// translation unit compiles one race whatever its result types.
#pragma once

#include <distlock/clock.hpp>
#include <distlock/backend/deferred.hpp>
#include <distlock/result.hpp>

#include <asio/associated_cancellation_slot.hpp>
#include <asio/associated_executor.hpp>
#include <asio/async_result.hpp>
#include <asio/bind_cancellation_slot.hpp>
#include <asio/cancellation_signal.hpp>
#include <asio/co_spawn.hpp>
#include <asio/dispatch.hpp>
#include <asio/use_awaitable.hpp>

#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <system_error>
#include <utility>

namespace distlock::backend {

/// Awaits `op` and keeps its result in `out` (which outlives the await).
template <class T>
awaitable<void> keep_result(awaitable<T> op, std::optional<T>& out)
{
    out.emplace(co_await std::move(op));
}

// One race between an operation and its deadline, alive until both have ended: the
// spawned operation's completion and the timer's wait each hold it. It holds the
// caller's completion handler (and so the caller's coroutine) until then; an
// io_context destroyed during the race destroys both pending sides and with them the
// race and the caller, as for any Asio operation.
template <class Handler>
class deadline_race {
public:
    deadline_race(Handler handler, const asio::any_io_executor& ex, time_point until)
        : handler_{std::move(handler)}, deadline_{ex, until}
    {}

    static void start(Handler handler, awaitable<void> op, time_point until)
    {
        const auto ex = asio::get_associated_executor(handler);
        auto self = std::make_shared<deadline_race>(std::move(handler), ex, until);
        // The caller's cancellation reaches both sides, as it reaches both sides of
        // `op || timer`.
        auto slot = asio::get_associated_cancellation_slot(self->handler_);
        if (slot.is_connected()) {
            self->caller_slot_ = slot;
            slot.template emplace<forward_cancellation>(self.get());
        }
        self->deadline_.async_wait([self](std::error_code) { self->ended(side::deadline, nullptr); });
        asio::co_spawn(ex, std::move(op),
                       asio::bind_cancellation_slot(self->stop_op_.slot(), [self](std::exception_ptr e) {
                           self->ended(side::op, std::move(e));
                       }));
    }

private:
    enum class side { op, deadline };

    // The caller's cancellation counts as the deadline coming first, unless the
    // operation had already ended: the caller then learns that it was cut off, never
    // a result that its own cancellation produced.
    struct forward_cancellation {
        deadline_race* race;
        void operator()(asio::cancellation_type_t type) const
        {
            std::lock_guard lock{race->mutex_};
            if (!race->first_)
                race->first_ = side::deadline;
            if (!race->op_ended_)
                race->stop_op_.emit(type);
            if (!race->deadline_ended_)
                race->deadline_.cancel();
        }
    };

    void ended(side which, std::exception_ptr failure)
    {
        std::unique_lock lock{mutex_};
        if (which == side::op) {
            op_ended_ = true;
            failure_ = std::move(failure);
        } else {
            deadline_ended_ = true;
        }
        if (!first_) {
            // The first to end decides; the other is ended now (its completion comes
            // through the executor, never inline).
            first_ = which;
            if (which == side::op && !deadline_ended_)
                deadline_.cancel();
            else if (which == side::deadline && !op_ended_)
                stop_op_.emit(asio::cancellation_type::all);
        }
        if (!op_ended_ || !deadline_ended_)
            return;
        lock.unlock();
        if (caller_slot_.is_connected())
            caller_slot_.clear();
        // An exception from an operation that was cut off is dropped, as `op || timer`
        // drops the loser's: it is most often the cancellation's own (Asio throws at
        // the next co_await of a cancelled coroutine), and the caller is told that
        // the operation was cut off.
        const bool won = *first_ == side::op;
        if (!won)
            failure_ = nullptr;
        const auto ex = asio::get_associated_executor(handler_);
        asio::dispatch(ex, [handler = std::move(handler_), failure = std::move(failure_), won]() mutable {
            std::move(handler)(std::move(failure), won);
        });
    }

    Handler handler_;
    timer deadline_;
    asio::cancellation_signal stop_op_;
    asio::cancellation_slot caller_slot_;
    std::mutex mutex_;
    std::optional<side> first_;
    bool op_ended_ = false;
    bool deadline_ended_ = false;
    std::exception_ptr failure_;
};

struct start_deadline_race {
    template <class Handler>
    void operator()(Handler&& handler, awaitable<void> op, time_point until) const
    {
        deadline_race<std::decay_t<Handler>>::start(std::forward<Handler>(handler), std::move(op), until);
    }
};

/// True when `op` completed before `until`; else `op` was cancelled, and awaited until
/// it completed, before this returns false (the same as `op || timer`). The caller's
/// cancellation is passed on to `op` and answers false as `until` would, unless `op`
/// had ended before it. An exception from `op` is rethrown here when `op` came first.
// A template so that it is compiled only where it is used (see backend/deferred.hpp).
template <class Unused = void>
awaitable<bool> finished_before(awaitable<void> op, time_point until)
{
    typename deferred_type<asio::use_awaitable_t<>, Unused>::type token;
    return asio::async_initiate<decltype(token), void(std::exception_ptr, bool)>(start_deadline_race{}, token,
                                                                                  std::move(op), until);
}

/// The time point `timeout` from now, the clock's end when that is past it.
inline time_point after(duration timeout) noexcept
{
    const auto now = clock::now();
    return timeout > time_point::max() - now ? time_point::max() : now + timeout;
}

/// `op`'s result, or nullopt when `until` came first (`op` then was cancelled and
/// awaited, which a store's operation ends at once; a result it still produced is
/// dropped, as `op || timer` drops it).
template <class T>
awaitable<std::optional<T>> within(awaitable<T> op, time_point until)
{
    std::optional<T> out;
    if (!co_await finished_before(keep_result(std::move(op), out), until))
        co_return std::nullopt;
    co_return std::move(out);
}

} // namespace distlock::backend
