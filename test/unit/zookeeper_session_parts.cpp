// The parts of a ZooKeeper session that decide without I/O: the handshake's requests
// and verdicts (zookeeper/detail/handshake.hpp), the keeper's schedule and verdicts
// (zookeeper/detail/keeper.hpp) on chosen times, and the registry of local watch
// waiters (zookeeper/detail/watches.hpp).
#include <distlock/zookeeper/detail/handshake.hpp>
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

namespace handshake = distlock::zookeeper::detail::handshake;
namespace proto = distlock::zookeeper::proto;

TEST_CASE("zookeeper handshake: a known session is resumed, with its password and last zxid", "[zookeeper_session]")
{
    const auto fresh = handshake::request({}, 10s);
    CHECK(fresh.session_id == 0);
    CHECK(fresh.timeout_ms == 10000);
    const auto again = handshake::request({.id = 77, .password = std::string(16, 'p'), .last_zxid = 9}, 4s);
    CHECK(again.session_id == 77);
    CHECK(again.password == std::string(16, 'p'));
    CHECK(again.last_zxid_seen == 9);
    // A timeout beyond what the protocol's int32 holds is clamped, not wrapped.
    CHECK(handshake::request({}, std::chrono::milliseconds{std::int64_t{1} << 40}).timeout_ms == INT32_MAX);
}

TEST_CASE("zookeeper handshake: what the server's answer means for the session", "[zookeeper_session]")
{
    const auto asked = handshake::request({.id = 77, .password = std::string(16, 'p')}, 4s);
    CHECK(handshake::judge(asked, {.timeout_ms = 4000, .session_id = 77}) == handshake::outcome::resumed);
    CHECK(handshake::judge(asked, {.timeout_ms = 4000, .session_id = 78}) == handshake::outcome::replaced);
    CHECK(handshake::judge(asked, {.timeout_ms = 0, .session_id = 77}) == handshake::outcome::expired);
    CHECK(handshake::judge(asked, {.timeout_ms = 4000, .session_id = 0}) == handshake::outcome::expired);
    CHECK(handshake::judge(handshake::request({}, 4s), {.timeout_ms = 4000, .session_id = 5}) ==
          handshake::outcome::created);
}

TEST_CASE("zookeeper handshake: auth and SetWatches follow the connect; a refused auth fails it",
          "[zookeeper_session]")
{
    CHECK(handshake::after_connect("", "", {}, 0).replies == 0);
    const auto auth = handshake::after_connect("app", "secret", {}, 0);
    CHECK(auth.replies == 1);
    CHECK(auth.payload == proto::encode_auth("digest", "app:secret"));
    const auto both = handshake::after_connect("app", "secret", {"/distlock/a"}, 12);
    CHECK(both.replies == 2);
    CHECK(both.payload == proto::encode_auth("digest", "app:secret") +
                              proto::encode_set_watches(12, {"/distlock/a"}, {}, {}));
    proto::reply refused;
    refused.xid = proto::xid::auth;
    refused.err = -115;
    CHECK(handshake::setup_refused({refused}) == distlock::zookeeper::errc::auth_failed);
    refused.err = 0;
    CHECK_FALSE(handshake::setup_refused({refused}));
}
