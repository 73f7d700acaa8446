// Built against an installed distlock with -Wall -Wextra -Werror -O2: locks, checks
// the fence, unlocks; and uses the rest of the core's surface (renewal, observers,
// completion tokens, multi-locks, a quorum) so that its templates are instantiated
// in a user's translation unit.
#include <distlock/distlock.hpp>
#include <distlock/memory.hpp>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/io_context.hpp>
#include <asio/use_future.hpp>

#include <chrono>
#include <future>

namespace dl = distlock;
using namespace std::chrono_literals;

int main()
{
    asio::io_context io;
    dl::memory::store store{io}, second{io}, third{io};
    dl::quorum<dl::memory::store> nodes{store, second, third};
    dl::basic_distributed_mutex<dl::memory::store> m{store, "package-test"};
    int status = 1;
    asio::co_spawn(io, [&]() -> asio::awaitable<void> {
        auto lease = co_await m.lock();
        if (!lease || lease->fence() != 1)
            co_return;
        auto released = co_await lease->unlock();
        if (!released)
            co_return;
        dl::basic_distributed_mutex<dl::memory::store, dl::renew::watchdog, dl::observe::callback> watched{
            store, "watched", {.ttl = 10s}, dl::observe::callback{[](const dl::event&) {}}};
        // One co_await per statement: g++ 12 mis-handles some co_await sub-expressions.
        auto w = co_await watched.lock_until(dl::clock::now() + 1s);
        if (!w)
            co_return;
        auto w_released = co_await w->unlock();
        if (!w_released)
            co_return;
        auto set = co_await dl::lock_all(store, dl::resources("a", "b"));
        if (!set)
            co_return;
        auto set_released = co_await set->unlock();
        if (!set_released)
            co_return;
        dl::basic_distributed_mutex<dl::quorum<dl::memory::store>> job{nodes, "job"};
        auto q = co_await job.try_lock();
        if (!q)
            co_return;
        auto q_released = co_await q->unlock();
        if (!q_released)
            co_return;
        status = 2; // the completion-token path below still has to succeed
    }, asio::detached);
    auto future = m.async_lock(asio::use_future);
    io.run();
    if (status != 2)
        return status;
    auto held = future.get();
    return held.fence() == 2 ? 0 : 3;
}
