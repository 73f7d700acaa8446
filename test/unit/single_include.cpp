// This translation unit sees only the generated single header.
#include <distlock/distlock.hpp> // single_include/distlock/distlock.hpp: the only distlock path here

#include <catch2/catch.hpp>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/io_context.hpp>

TEST_CASE("the single header is complete on its own", "[single_include]")
{
    namespace dl = distlock;
    asio::io_context io;
    dl::memory::store store{io};
    dl::basic_distributed_mutex<dl::memory::store, dl::renew::watchdog> m{store, "single"};
    dl::fence_token fence = 0;
    asio::co_spawn(io, [&]() -> asio::awaitable<void> {
        auto lease = co_await m.lock();
        if (lease) {
            fence = lease->fence();
            (void)co_await lease->unlock();
        }
    }, asio::detached);
    io.run();
    CHECK(fence == 1);
    CHECK(store.live_locks() == 0);
}
