// Built against an installed distlock: locks, checks the fence, unlocks.
#include <distlock/distlock.hpp>
#include <distlock/memory.hpp>

#include <asio/co_spawn.hpp>
#include <asio/io_context.hpp>

int main()
{
    asio::io_context io;
    distlock::memory::store store{io};
    distlock::basic_distributed_mutex<distlock::memory::store> m{store, "package-test"};
    int status = 1;
    asio::co_spawn(io, [&]() -> asio::awaitable<void> {
        auto lease = co_await m.lock();
        if (!lease || lease->fence() != 1)
            co_return;
        auto released = co_await lease->unlock();
        status = released ? 0 : 2;
    }, [](std::exception_ptr) {});
    io.run();
    return status;
}
