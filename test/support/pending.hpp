// An operation started now whose result a test collects later (co_spawn with
// use_awaitable would start it only when awaited).
#pragma once

#include "support.hpp"

#include <asio/co_spawn.hpp>

#include <memory>
#include <optional>

namespace test {

template <class T>
class pending {
public:
    pending(asio::any_io_executor ex, asio::awaitable<T> op)
    {
        asio::co_spawn(ex, std::move(op), [slot = value_](std::exception_ptr e, T r) {
            if (!e)
                slot->emplace(std::move(r));
        });
    }
    bool ready() const { return value_->has_value(); }
    T& get() { return **value_; }

    /// Waits (real time, bounded) for the result; false if it did not come.
    asio::awaitable<bool> wait(std::chrono::milliseconds limit = std::chrono::milliseconds{10000})
    {
        const auto deadline = std::chrono::steady_clock::now() + limit;
        while (!ready() && std::chrono::steady_clock::now() < deadline)
            co_await settle(std::chrono::milliseconds{2});
        co_return ready();
    }

private:
    std::shared_ptr<std::optional<T>> value_ = std::make_shared<std::optional<T>>();
};

template <class T>
pending<T> start(asio::any_io_executor ex, asio::awaitable<T> op)
{
    return pending<T>{std::move(ex), std::move(op)};
}

} // namespace test
