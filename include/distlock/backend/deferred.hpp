// distlock/backend/deferred.hpp: completion tokens whose type depends on a template
// parameter, for the coroutine templates of the headers.
//
// Why: g++ resolves a call whose arguments do not depend on a template parameter
// where the template is defined, not where it is used, and Asio's initiating
// functions deduce their return type from their body. So `t.async_wait(use_awaitable)`
// in a coroutine template that no translation unit calls still instantiates the whole
// awaitable operation (its handler, async_result and frame code) in every file that includes the header. A
// token of a dependent type defers all of it to the first use; headers that are
// included but unused then cost little more than their parsing.
#pragma once

#include <asio/awaitable.hpp>

#include <asio/experimental/as_tuple.hpp>
#include <asio/use_awaitable.hpp>

namespace distlock::backend {

template <class T, class Dependent>
struct deferred_type {
    using type = T;
};

/// asio::experimental::as_tuple(asio::use_awaitable), of a type that depends on
/// `Dependent` (any template parameter in scope; its value does not matter).
template <class Dependent>
constexpr auto as_tuple_awaitable() noexcept
{
    return asio::experimental::as_tuple(typename deferred_type<asio::use_awaitable_t<>, Dependent>::type{});
}

/// The value an awaitable completes with: `awaited<asio::awaitable<T>>::type` is T.
template <class A>
struct awaited;
template <class T>
struct awaited<asio::awaitable<T>> {
    using type = T;
};

} // namespace distlock::backend
