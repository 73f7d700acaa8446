// The PostgreSQL headers in a user's translation unit, with -Wall -Wextra -Werror
// -O2, both modes. Nothing listens on the port: a lock attempt must report the store
// unavailable.
#include <distlock/postgres.hpp>

#include <asio.hpp>

#include <chrono>
#include <optional>
#include <vector>

namespace dl = distlock;
namespace pg = distlock::postgres;
using namespace std::chrono_literals;

int main()
{
    asio::io_context io;
    auto cfg = pg::config::from_url("postgres://nobody@127.0.0.1:1/db?sslmode=disable&table=locks");
    if (!cfg)
        return 1;
    pg::store table{io, *cfg};
    pg::advisory_store sessions{io, *cfg};
    std::optional<std::error_code> leased, advised;
    asio::co_spawn(io, [&]() -> asio::awaitable<void> {
        dl::basic_distributed_mutex<pg::store, dl::renew::watchdog> m{table, "wallet:42", {.ttl = 10s}};
        auto lease = co_await m.try_lock();
        leased = lease ? std::error_code{} : lease.error();
        if (lease) {
            std::vector<pg::param> values{pg::param::number(70)};
            (void)co_await table.fenced_execute("wallet:42", lease->fence(),
                                                "UPDATE wallet SET balance = $1 WHERE " + table.fence_condition(2, 3),
                                                std::move(values));
        }
        auto set = co_await dl::lock_all(table, dl::resources("a", "b"), {}, dl::retry::none{});
        (void)set;
        dl::basic_distributed_mutex<pg::advisory_store> a{sessions, "job:nightly", {.ttl = 10s}};
        auto held = co_await a.try_lock();
        advised = held ? std::error_code{} : held.error();
        co_await table.close();
        co_await sessions.close();
    }, asio::detached);
    io.run_for(20s);
    return leased && *leased == dl::errc::store_unavailable && advised && *advised == dl::errc::store_unavailable ? 0 : 2;
}
