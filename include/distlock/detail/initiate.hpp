// distlock/detail/initiate.hpp: turn a coroutine into an Asio initiating function that
// accepts any completion token (use_awaitable, use_future, a callback, ...).
#pragma once

#include <distlock/result.hpp>

#include <asio/any_io_executor.hpp>
#include <asio/associated_cancellation_slot.hpp>
#include <asio/associated_executor.hpp>
#include <asio/async_result.hpp>
#include <asio/awaitable.hpp>
#include <asio/bind_cancellation_slot.hpp>
#include <asio/bind_executor.hpp>
#include <asio/co_spawn.hpp>

#include <exception>
#include <system_error>
#include <type_traits>
#include <utility>

namespace distlock::detail {

template <class T>
struct completion_signature {
    using type = void(std::error_code, T);
};
template <>
struct completion_signature<void> {
    using type = void(std::error_code);
};

/// Runs `make()` (returning awaitable<result<T>>) on `ex` and completes `token` with
/// (error_code, T), or (error_code) for T = void. The handler runs on its associated
/// executor, never inside this call, and its cancellation slot cancels the operation.
template <class T, class Make, class Token>
auto initiate(asio::any_io_executor ex, Make make, Token&& token)
{
    return asio::async_initiate<Token, typename completion_signature<T>::type>(
        [](auto handler, asio::any_io_executor ex, Make make) {
            auto slot = asio::get_associated_cancellation_slot(handler);
            auto handler_ex = asio::get_associated_executor(handler, ex);
            asio::co_spawn(
                ex, make(),
                asio::bind_cancellation_slot(
                    slot, asio::bind_executor(handler_ex, [h = std::move(handler)](
                                                              std::exception_ptr e,
                                                              result<T> r) mutable {
                        if (e) // only bad_alloc can get here
                            r = std::make_error_code(std::errc::not_enough_memory);
                        if constexpr (std::is_void_v<T>) {
                            std::move(h)(r ? std::error_code{} : r.error());
                        } else {
                            if (r)
                                std::move(h)(std::error_code{}, std::move(r).value());
                            else
                                std::move(h)(r.error(), T{});
                        }
                    })));
        },
        token, std::move(ex), std::move(make));
}

} // namespace distlock::detail
