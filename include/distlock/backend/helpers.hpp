// distlock/backend/helpers.hpp: small operations every store and claim needs: waiting
// until a time, telling a connection error, answering with an error from a coroutine,
// and releasing by owner token.
#pragma once

#include <distlock/backend/deferred.hpp>
#include <distlock/backend/store_ref.hpp>
#include <distlock/clock.hpp>
#include <distlock/error.hpp>
#include <distlock/result.hpp>

#include <asio/this_coro.hpp>

#include <system_error>

namespace distlock::backend {

/// Waits until `until` on the caller's executor (a cancelled wait returns early).
// A template so that it is compiled only where it is used (see backend/coroutines.hpp).
template <class Unused = void>
awaitable<void> sleep_until(time_point until)
{
    timer t{co_await asio::this_coro::executor, until};
    (void)co_await t.async_wait(as_tuple_awaitable<Unused>());
}

/// The request may not have arrived (or its answer was lost): worth one more try of
/// an idempotent request.
inline bool connection_error(const std::error_code& ec)
{
    return ec == condition::not_applied || ec == condition::maybe_applied;
}

/// An awaitable that completes at once with `ec`: how a primitive refuses bad input
/// before any I/O without a frame of its own per call site.
template <class T>
awaitable<result<T>> failed(std::error_code ec)
{
    co_return ec;
}

/// Releases `owner`'s lock on `resource`. A connection error (a reset, a restart) may
/// mean the release did not arrive; it is idempotent by owner token, so it is tried
/// once more (stores reconnect on the next request). "Not the owner" after that means
/// the first one did arrive.
template <class Inner, class S>
awaitable<result<void>> release_by_owner(const Inner& policy, const store_ref<S>& store, lock_request r)
{
    auto first = co_await store.call([&](S& s) { return policy.release(s, r); });
    if (first || !connection_error(first.error()))
        co_return first;
    auto second = co_await store.call([&](S& s) { return policy.release(s, r); });
    if (!second && second.error() == condition::not_owner)
        co_return success();
    co_return second;
}

} // namespace distlock::backend
