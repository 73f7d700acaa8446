// ZooKeeper store faults that need servers of their own: a three-server ensemble
// losing its leader, a standalone server restarted under a held lock.
#include "zookeeper/zookeeper_support.hpp"

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

namespace {

using namespace std::chrono_literals;
using namespace test::zookeeper_tests;

std::size_t waiter_count(const test::zookeeper_ensemble& e, std::size_t server, const std::string& prefix,
                         const std::string& resource)
{
    test::zk_client c{e.port(server)};
    return c.children(zk::detail::resource_node(prefix, resource)).value_or(std::vector<std::string>{}).size();
}

} // namespace

TEST_CASE("zookeeper: an ensemble losing its leader: the session survives on another server, the node stays, "
          "fences keep growing",
          "[zookeeper][fault][ensemble]")
{
    test::zookeeper_ensemble ensemble{3};
    const auto leader = ensemble.leader();
    REQUIRE(leader);
    // The client starts on the leader: losing it moves the session to a follower.
    auto cfg = ensemble.config("/ensemble");
    cfg.session_timeout = 5s; // an election takes a few seconds on a loaded machine
    std::rotate(cfg.servers.begin(), cfg.servers.begin() + static_cast<std::ptrdiff_t>(*leader), cfg.servers.end());
    asio::io_context io;
    zk::store s{io, cfg};
    test::run(io, [&]() -> asio::awaitable<void> {
        dl::basic_distributed_mutex<zk::store> m{s, "r"};
        auto held = co_await m.lock();
        REQUIRE(held);
        const auto session = s.session_id();
        CHECK(s.server_in_use() == 0);
        auto lost = test::start(co_await asio::this_coro::executor, held->lost());
        ensemble.kill(*leader);
        // Disconnected: the holder is told its lease is in doubt.
        { const bool came_ = co_await lost.wait(); REQUIRE(came_); }
        // A new leader; the session is resumed on another server, its node kept.
        (void)co_await test::eventually("new leader", [&] { return ensemble.leader().has_value(); },
                                        test::steps{.max = 1000, .each = 20ms});
        const auto survivor = *ensemble.leader();
        (void)co_await test::eventually("resumed", [&] { return s.valid_session(); }, test::steps{.max = 1000, .each = 20ms});
        CHECK(s.session_id() == session);
        CHECK(s.sessions_made() == 1);
        CHECK(s.server_in_use() != 0);
        CHECK(waiter_count(ensemble, survivor, "/ensemble", "r") == 1);
        // The in-doubt lease is given up by its holder; the next lock has a larger fence.
        CHECK_FALSE(co_await held->unlock());
        CHECK(waiter_count(ensemble, survivor, "/ensemble", "r") == 0);
        auto next = co_await m.lock();
        REQUIRE(next);
        CHECK(next->fence() > held->fence());
        { const auto ok_ = co_await next->unlock(); CHECK(ok_); }
        co_await s.close();
    });
}

TEST_CASE("zookeeper: a server restarted under a held lock: the session resumes within its timeout",
          "[zookeeper][fault]")
{
    test::zookeeper_ensemble server{1};
    auto cfg = server.config("/restart");
    cfg.session_timeout = 5s;
    asio::io_context io;
    zk::store s{io, cfg}, other{io, cfg};
    test::run(io, [&]() -> asio::awaitable<void> {
        dl::basic_distributed_mutex<zk::store> m{s, "r"};
        auto held = co_await m.lock();
        REQUIRE(held);
        const auto session = s.session_id();
        server.restart(0); // stopped (SIGTERM), then started again with its data
        // The server kept the session (its snapshot holds it) and the node.
        (void)co_await test::eventually("resumed", [&] { return s.valid_session(); }, test::steps{.max = 1000, .each = 20ms});
        CHECK(s.session_id() == session);
        CHECK(waiter_count(server, 0, "/restart", "r") == 1);
        // Still held: another client waits.
        dl::basic_distributed_mutex<zk::store, dl::retry::none> mo{other, "r"};
        auto refused = co_await mo.lock();
        REQUIRE_FALSE(refused);
        CHECK(refused.error() == dl::condition::contended);
        (void)co_await held->unlock();
        patient_mutex mp{other, "r", {}, dl::retry::exponential_backoff{.deadline = 20s}};
        auto next = co_await mp.lock();
        REQUIRE(next);
        CHECK(next->fence() > held->fence());
        { const auto ok_ = co_await next->unlock(); CHECK(ok_); }
        co_await s.close();
        co_await other.close();
    });
}
