// The etcd headers in a user's translation unit, with -Wall -Wextra -Werror -O2.
// Nothing listens on the members' ports: a lock attempt must report the store
// unavailable, after trying every member.
#include <distlock/etcd.hpp>

#include <asio.hpp>

#include <chrono>
#include <optional>

namespace dl = distlock;
namespace etcd = distlock::etcd;
using namespace std::chrono_literals;

int main()
{
    asio::io_context io;
    auto cfg = etcd::config::from_url("etcd://127.0.0.1:1,127.0.0.1:2?prefix=locks/&ttl=5");
    if (!cfg)
        return 1;
    etcd::store cluster{io, *cfg};
    std::optional<std::error_code> got;
    asio::co_spawn(io, [&]() -> asio::awaitable<void> {
        dl::basic_distributed_mutex<etcd::store, dl::retry::none> m{cluster, "wallet:42"};
        auto lease = co_await m.lock();
        got = lease ? std::error_code{} : lease.error();
        if (lease)
            (void)co_await cluster.fenced_put("wallet/42", *lease, "70");
        auto set = co_await dl::lock_all(cluster, dl::resources("a", "b"), {}, dl::retry::none{});
        (void)set;
        co_await cluster.close();
    }, asio::detached);
    io.run_for(20s);
    return got && *got == dl::errc::store_unavailable ? 0 : 2;
}
