// distlock/detail/cut_off.hpp: an operation cut off at a point in time, and a result
// carried out of a coroutine of another type.
//
// Why one race over awaitable<void> for the whole library: Asio's `op || timer`
// instantiates a parallel group, a co_spawn per side and their handlers (some 250
// functions) for each result type it is used with, and the same holds for co_spawn
// into use_awaitable. The core's deadlines, the transport's handshake round trips and
// detail::on_strand go through the void forms, with the result written through a
// reference, so a translation unit compiles one of each instead of one per result
// type (the compile cost in bench/README.md).
// The cost at run time is one more coroutine frame, from Asio's recycled frame memory.
#pragma once

#include <distlock/clock.hpp>
#include <distlock/detail/deferred.hpp>
#include <distlock/result.hpp>

#include <asio/experimental/as_tuple.hpp>
#include <asio/experimental/awaitable_operators.hpp>
#include <asio/this_coro.hpp>
#include <asio/use_awaitable.hpp>

#include <optional>
#include <utility>

namespace distlock::detail {

/// Awaits `op` and keeps its result in `out` (which outlives the await).
template <class T>
awaitable<void> keep_result(awaitable<T> op, std::optional<T>& out)
{
    out.emplace(co_await std::move(op));
}

/// True when `op` completed before `until`; else `op` was cancelled, and awaited until
/// it completed, before this returns false (the same as `op || timer`).
// A template so that it is compiled only where it is used (see detail/lease_state.hpp).
template <class Unused = void>
awaitable<bool> finished_before(awaitable<void> op, time_point until)
{
    using namespace asio::experimental::awaitable_operators;
    timer deadline{co_await asio::this_coro::executor, until};
    const auto first =
        co_await (std::move(op) || deadline.async_wait(as_tuple_awaitable<Unused>()));
    co_return first.index() == 0;
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

} // namespace distlock::detail
