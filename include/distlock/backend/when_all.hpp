// distlock/backend/when_all.hpp: run several coroutines at once and wait for all.
//
// Used to release the leases of a multi-lock together, and by stores to send several
// requests at once: over a pipelined connection they share one round trip instead of
// taking one each. Waiting is not
// cancellable: the coroutines reference objects the caller owns, so the caller must
// not move on before every one of them has finished.
#pragma once

#include <distlock/clock.hpp>
#include <distlock/backend/auto_reset_event.hpp>
#include <distlock/result.hpp>

#include <asio/co_spawn.hpp>
#include <asio/this_coro.hpp>

#include <cstddef>
#include <exception>
#include <memory>
#include <mutex>
#include <vector>

namespace distlock::backend {

template <class T>
awaitable<std::vector<result<T>>> when_all(std::vector<awaitable<result<T>>> operations)
{
    if (operations.empty())
        co_return std::vector<result<T>>{};
    struct shared {
        shared(asio::any_io_executor ex, std::size_t n) : out(n), left{n}, done{std::move(ex)} {}
        std::mutex mutex;
        std::vector<result<T>> out;
        std::size_t left;
        backend::auto_reset_event done;
    };
    auto ex = co_await asio::this_coro::executor;
    auto state = std::make_shared<shared>(ex, operations.size());
    for (std::size_t i = 0; i < operations.size(); ++i)
        asio::co_spawn(ex, std::move(operations[i]), [state, i](std::exception_ptr e, result<T> r) {
            std::lock_guard lock{state->mutex};
            state->out[i] = e ? result<T>{errc::outcome_unknown} : std::move(r);
            if (--state->left == 0)
                state->done.set();
        });
    for (;;) {
        (void)co_await state->done.template wait<T>();
        std::lock_guard lock{state->mutex};
        if (state->left == 0)
            co_return std::move(state->out);
    }
}

} // namespace distlock::backend
