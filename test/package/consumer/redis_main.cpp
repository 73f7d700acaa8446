// The Redis headers in a user's translation unit, with -Wall -Wextra -Werror -O2.
// Asio and the standard library come first here (the core consumer includes distlock
// first), so the library's warning containment must not depend on include order.
// Nothing listens on the port: a lock attempt must report the store unavailable.
#include <asio.hpp>
#include <memory>

#include <distlock/distlock.hpp>
#include <distlock/redis.hpp>

#include <chrono>
#include <optional>

namespace dl = distlock;
using namespace std::chrono_literals;

int main()
{
    asio::io_context io;
    auto cfg = dl::redis::config::from_url("redis://127.0.0.1:1/0");
    if (!cfg)
        return 1;
    dl::redis::store redis{io, *cfg};
    std::optional<std::error_code> outcome;
    asio::co_spawn(io, [&]() -> asio::awaitable<void> {
        dl::basic_distributed_mutex<dl::redis::store, dl::renew::watchdog> m{redis, "wallet:42", {.ttl = 10s}};
        auto lease = co_await m.try_lock();
        outcome = lease ? std::error_code{} : lease.error();
        if (lease)
            (void)co_await redis.fenced_write("balance:42", lease->fence(), "70");
        auto set = co_await dl::lock_all(redis, dl::resources("a", "b"), {}, dl::retry::none{});
        (void)set;
    }, asio::detached);
    io.run_for(10s);
    return outcome && *outcome == dl::errc::store_unavailable ? 0 : 2;
}
