// The single-header distribution as installed (target distlock::single): the core,
// the in-process store and the test helpers, each included by its usual name.
#include <distlock/distlock.hpp>
#include <distlock/memory.hpp>
#include <distlock/testing.hpp>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>

#include <cstdio>
#include <optional>

namespace dl = distlock;
using namespace std::chrono_literals;

int main()
{
    dl::manual_clock clock;
    asio::io_context io;
    dl::memory::store store{io};
    std::optional<dl::result<dl::lease>> first, second;
    asio::co_spawn(io, [&]() -> asio::awaitable<void> {
        dl::basic_named_locks<dl::memory::store, dl::retry::fixed> locks{store, {.ttl = 5s},
                                                                          dl::retry::fixed{.delay = 100ms}};
        first = co_await locks.lock("job");
        second = co_await locks.lock("job"); // taken over once the first one's TTL ran out
    }, asio::detached);
    dl::testing::advance(clock, io, 6s, 50ms);
    const bool ok = first && *first && second && *second && (*second)->fence() > (*first)->fence();
    std::printf("single header: %s\n", ok ? "ok" : "FAILED");
    return ok ? 0 : 1;
}
