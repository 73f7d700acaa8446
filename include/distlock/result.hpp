// distlock/result.hpp: result<T>, a value or a std::error_code, from Boost.Outcome,
// and awaitable<T>, the type of every asynchronous operation.
#pragma once

#include <distlock/util/config.hpp>
#include <distlock/util/result_type.hpp>

#include <asio/awaitable.hpp>

namespace distlock {

/// Every asynchronous distlock operation is a coroutine of this type.
template <class T>
using awaitable = asio::awaitable<T>;

} // namespace distlock
