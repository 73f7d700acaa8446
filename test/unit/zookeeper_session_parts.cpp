// The parts of a ZooKeeper session that decide without I/O: the keeper's schedule and
// verdicts (zookeeper/detail/keeper.hpp) on chosen times, and the registry of local
// watch waiters (zookeeper/detail/watches.hpp).
#include <distlock/zookeeper/detail/keeper.hpp>
#include <distlock/zookeeper/detail/watches.hpp>

#include <asio/io_context.hpp>
#include <catch2/catch.hpp>

#include <chrono>

namespace dl = distlock;
namespace keeper = distlock::zookeeper::detail::keeper;
using namespace std::chrono_literals;

TEST_CASE("zookeeper keeper: a ping is awaited until the session would be in doubt", "[zookeeper_session]")
{
    const dl::time_point t0{std::chrono::seconds{100}};
    const keeper::view live{.timeout = 6s, .heard = t0, .has_session = true, .connected = true};
    CHECK(keeper::ping_deadline(live, t0 + 1s, 30s) == t0 + 4s);
    // Past that already: still a moment for the answer.
    CHECK(keeper::ping_deadline(live, t0 + 5s, 30s) == t0 + 5s + 10ms);
    // Not connected (or no session yet): the time to try every server.
    keeper::view down = live;
    down.connected = false;
    CHECK(keeper::ping_deadline(down, t0 + 1s, 30s) == t0 + 31s);
    // A budget at the clock's limit saturates instead of overflowing.
    CHECK(keeper::ping_deadline(down, t0, dl::duration::max()) == dl::time_point::max());
}

TEST_CASE("zookeeper keeper: unanswered pings mean in doubt at 2/3 of the timeout, expired at all of it",
          "[zookeeper_session]")
{
    const dl::time_point t0{std::chrono::seconds{100}};
    const keeper::view v{.timeout = 6s, .heard = t0, .has_session = true, .connected = true};
    CHECK(keeper::unanswered(v, t0 + 3s, false) == keeper::verdict::waiting);
    CHECK(keeper::unanswered(v, t0 + 4s, false) == keeper::verdict::in_doubt);
    CHECK(keeper::unanswered(v, t0 + 4s, true) == keeper::verdict::waiting); // dropped once already
    CHECK(keeper::unanswered(v, t0 + 6s, true) == keeper::verdict::expired);
    CHECK(keeper::unanswered(v, t0 + 6s, false) == keeper::verdict::expired);
    keeper::view none = v;
    none.has_session = false;
    CHECK(keeper::unanswered(none, t0 + 60s, false) == keeper::verdict::waiting);
}

TEST_CASE("zookeeper keeper: the next ping a third of the timeout after an answered one, sooner after silence",
          "[zookeeper_session]")
{
    const dl::time_point sent{std::chrono::seconds{100}};
    const auto now = sent + 50ms;
    CHECK(keeper::next_ping(true, sent, now, 6s, 0) == sent + 2s);
    CHECK(keeper::next_ping(false, sent, now, 6s, 1) == now + 50ms);
    CHECK(keeper::next_ping(false, sent, now, 6s, 3) == now + 200ms);
    CHECK(keeper::next_ping(false, sent, now, 6s, 30) == now + 800ms); // backs off to 800 ms at most
    CHECK(keeper::next_ping(false, sent, now, 900ms, 30) == now + 300ms); // never later than a third
    CHECK(keeper::next_ping(true, sent, now, 3ms, 0) == sent + 10ms);      // at least 10 ms apart
}

TEST_CASE("zookeeper watches: one notification wakes every waiter of its path; a lost session wakes all",
          "[zookeeper_session]")
{
    asio::io_context io;
    distlock::zookeeper::detail::watch_registry watches;
    auto a1 = watches.add("/distlock/a", io.get_executor());
    auto a2 = watches.add("/distlock/a", io.get_executor());
    auto b = watches.add("/distlock/b", io.get_executor());
    CHECK(watches.paths() == std::vector<std::string>{"/distlock/a", "/distlock/b"});

    watches.fire("/distlock/a", true, false);
    CHECK(a1->fired);
    CHECK(a1->deleted);
    CHECK(a2->fired);
    CHECK_FALSE(b->fired);
    CHECK(watches.paths() == std::vector<std::string>{"/distlock/b"}); // the server's watch is spent

    auto c = watches.add("/distlock/c", io.get_executor());
    watches.remove("/distlock/c", c);
    watches.fire_all();
    CHECK(b->fired);
    CHECK_FALSE(b->deleted);
    CHECK_FALSE(c->fired); // removed before
    CHECK(watches.size() == 0);
}
