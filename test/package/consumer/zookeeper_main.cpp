// The ZooKeeper headers in a user's translation unit, with -Wall -Wextra -Werror -O2.
// Nothing listens on the servers' ports: a lock attempt must report the store
// unavailable, after trying every server.
#include <distlock/zookeeper.hpp>

#include <asio.hpp>

#include <chrono>
#include <optional>

namespace dl = distlock;
namespace zk = distlock::zookeeper;
using namespace std::chrono_literals;

int main()
{
    asio::io_context io;
    auto cfg = zk::config::from_url("zk://127.0.0.1:1,127.0.0.1:2/app?prefix=/locks&timeout=2000");
    if (!cfg)
        return 1;
    zk::store ensemble{io, *cfg};
    std::optional<std::error_code> got;
    asio::co_spawn(io, [&]() -> asio::awaitable<void> {
        dl::basic_distributed_mutex<zk::store, dl::retry::none> m{ensemble, "wallet:42"};
        auto lease = co_await m.lock();
        got = lease ? std::error_code{} : lease.error();
        auto set = co_await dl::lock_all(ensemble, dl::resources("a", "b"), {}, dl::retry::none{});
        (void)set;
        auto info = co_await ensemble.read("wallet:42");
        (void)info;
        co_await ensemble.close();
    }, asio::detached);
    io.run_for(20s);
    return got && *got == dl::errc::store_unavailable ? 0 : 2;
}
