// The etcd store against a member the tests start (test/support/etcd_server.hpp),
// beyond the conformance suite: resource ids escaped into keys, gateway answers and
// gRPC codes, the key layout of the queue, marks, lost sessions, fenced puts, watches
// cut and compacted, a holder blackholed.
#include "etcd/etcd_support.hpp"
#include "fault/proxy.hpp"

#include <array>
#include <memory>
#include <optional>
#include <string>
#include <vector>

using namespace std::chrono_literals;
using namespace test::etcd_tests;

// -- Pure functions ------------------------------------------------------------------

TEST_CASE("etcd: resource ids are escaped into keys injectively; no id's queue holds another id's keys",
          "[etcd][input]")
{
    using etcd::detail::escape;
    using etcd::detail::unescape;
    const std::vector<std::string> ids{"a", "a/b", "a%2Fb", "a0", "a/", "/", "%", "seat:12", std::string{"\0\xff/", 3},
                                       std::string(1024, '/')};
    for (const auto& id : ids) {
        const auto e = escape(id);
        CHECK(e.find('/') == std::string::npos);
        REQUIRE(unescape(e));
        CHECK(*unescape(e) == id);
        for (const auto& other : ids)
            if (other != id) {
                CHECK(escape(other) != e);
                // The queue range of `id` never contains a key of `other`.
                const auto q = etcd::detail::queue_prefix("p/", id);
                const auto key = etcd::detail::queue_prefix("p/", other) + "0123";
                CHECK_FALSE((key >= q && key < etcd::detail::range_end(q)));
            }
    }
    CHECK(escape("seat:12_A-b.c") == "seat:12_A-b.c");
    CHECK(escape("a/b c") == "a%2Fb%20c");
    CHECK_FALSE(unescape("%2"));
    CHECK_FALSE(unescape("%2f"));   // not what escape() writes
    CHECK_FALSE(unescape("%41"));   // 'A' is written plain
    CHECK_FALSE(unescape("a/b"));
    CHECK(etcd::detail::range_end("p/x/") == "p/x0");
}

TEST_CASE("etcd: URLs are checked before any I/O", "[etcd][input]")
{
    auto url = etcd::config::from_url("etcd://u:p%w@127.0.0.1:2379,[::1]:2380,localhost?prefix=locks/&ttl=5");
    REQUIRE(url);
    CHECK(url->members.size() == 3);
    CHECK(url->members[0].port == 2379);
    CHECK(url->members[1].host == "::1");
    CHECK(url->members[1].port == 2380);
    CHECK(url->members[2].host == "localhost");
    CHECK(url->members[2].port == 2379);
    CHECK(url->prefix == "locks/");
    CHECK(url->session_ttl == 5s);
    CHECK(url->username == "u");
    CHECK(url->password == "p%w");
    CHECK_FALSE(url->tls);
    auto tls = etcd::config::from_url("etcds://h:1/?ca=/etc/ca.pem");
    REQUIRE(tls);
    CHECK(tls->tls);
    CHECK(tls->tls_ca_file == "/etc/ca.pem");
    for (const char* bad : {"", "http://h:1", "etcd://", "etcd://h:0", "etcd://h:65536", "etcd://h:x", "etcd://[::1",
                            "etcd://h:1?ttl=1", "etcd://h:1?ttl=0", "etcd://h:1?ttl=-3", "etcd://h:1?prefix=",
                            "etcd://h:1?what=1", "etcd://h:1?ca=x", "etcd://,h:1", "etcd://:pw@h:1"}) {
        INFO(bad);
        CHECK(etcd::config::from_url(bad).error() == dl::errc::invalid_argument);
    }
}

TEST_CASE("etcd: gateway answers are read strictly: int64 strings, base64, missing fields", "[etcd][input]")
{
    using etcd::detail::integer;
    CHECK(integer(json{{"n", "42"}}, "n") == 42);
    CHECK(integer(json{{"n", 7}}, "n") == 7);
    CHECK(integer(json::object(), "n") == 0); // a default value is omitted
    CHECK_FALSE(integer(json{{"n", "4x"}}, "n"));
    CHECK_FALSE(integer(json{{"n", ""}}, "n"));
    CHECK_FALSE(integer(json{{"n", "99999999999999999999"}}, "n"));
    CHECK_FALSE(integer(json{{"n", true}}, "n"));
    const json good = {{"count", "2"},
                       {"kvs", json::array({json{{"key", b64("k")}, {"create_revision", "5"}, {"mod_revision", "5"}}})}};
    const auto r = etcd::detail::read_range(good);
    REQUIRE(r);
    CHECK(r->count == 2);
    REQUIRE(r->kvs.size() == 1);
    CHECK(r->kvs[0].key == "k");
    CHECK(r->kvs[0].create_revision == 5);
    CHECK_FALSE(etcd::detail::read_range(json{{"count", "0"}, {"kvs", json::array({json{{"key", "!!"}}})}}));
    CHECK_FALSE(etcd::detail::read_range(json{{"count", "0"}, {"kvs", json::array({json{{"key", b64("k")}}})}}));
    CHECK_FALSE(etcd::detail::read_range(json{{"kvs", "x"}}));
    CHECK_FALSE(etcd::detail::read_range(json::array()));
    CHECK_FALSE(etcd::detail::header_revision(json{{"header", json::object()}}));
}

TEST_CASE("etcd: gRPC codes map to conditions", "[etcd][input]")
{
    CHECK(etcd::from_grpc(5) == dl::condition::session_lost);
    CHECK(etcd::from_grpc(7) == dl::condition::denied);
    CHECK(etcd::from_grpc(16) == dl::condition::denied);
    CHECK(etcd::from_grpc(3) == dl::condition::invalid_argument);
    CHECK(etcd::from_grpc(14) == dl::condition::maybe_applied);
    CHECK(etcd::from_grpc(4) == dl::condition::maybe_applied);
    CHECK(etcd::from_grpc(8) == dl::condition::not_applied);
    CHECK(etcd::from_grpc(0) == dl::errc::protocol_error);
    CHECK(etcd::from_grpc(17) == dl::errc::protocol_error);
    CHECK(etcd::from_grpc(5).category().name() == std::string{"distlock.etcd"});
    CHECK_FALSE(etcd::from_grpc(14).message().empty());
}

// -- Against a real member -------------------------------------------------------------

TEST_CASE("etcd: the key layout: one key per waiter with its session's lease, fence = create revision",
          "[etcd]")
{
    auto& server = test::shared_etcd();
    const auto prefix = test::fresh_prefix("layout");
    asio::io_context io;
    etcd::store a{io, server.config(prefix)}, b{io, server.config(prefix)};
    test::run(io, [&]() -> asio::awaitable<void> {
        dl::basic_distributed_mutex<etcd::store> ma{a, "seat/7"};
        patient_mutex mb{b, "seat/7", {}, dl::retry::exponential_backoff{.deadline = 20s}};
        auto first = co_await ma.lock();
        REQUIRE(first);
        auto waiting = test::start(co_await asio::this_coro::executor, mb.lock());
        (void)co_await test::eventually("two keys", [&] { return queue_of(server, prefix, "seat/7").size() == 2; },
                                        test::long_enough());
        const auto keys = queue_of(server, prefix, "seat/7");
        REQUIRE(keys.size() == 2);
        CHECK(keys[0].key == prefix + "seat%2F7/" + first->owner().to_hex());
        CHECK(keys[0].value == first->owner().to_hex());
        CHECK(keys[0].lease == a.session_lease());
        CHECK(keys[1].lease == b.session_lease());
        CHECK(a.session_lease() != b.session_lease());
        CHECK(static_cast<dl::fence_token>(keys[0].create_revision) == first->fence());
        { const auto ok_ = co_await first->unlock(); CHECK(ok_); }
        { const bool came_ = co_await waiting.wait(); REQUIRE(came_); }
        auto& second = waiting.get();
        REQUIRE(second);
        CHECK(second->fence() == static_cast<dl::fence_token>(keys[1].create_revision));
        CHECK(second->fence() > first->fence());
        { const auto ok_ = co_await second->unlock(); CHECK(ok_); }
        CHECK(queue_of(server, prefix, "seat/7").empty());
        const std::array<std::int64_t, 2> leases{a.session_lease(), b.session_lease()};
        co_await a.close();
        co_await b.close();
        // close() revoked both sessions' leases.
        for (const auto id : leases)
            CHECK(etcd::detail::integer(server.call("lease/timetolive", {{"ID", std::to_string(id)}}), "TTL") == -1);
    });
}

TEST_CASE("etcd: a waiter that comes to hold the lock marks its key, so the one behind it is told that it "
          "waits for the holder",
          "[etcd]")
{
    auto& server = test::shared_etcd();
    const auto prefix = test::fresh_prefix("mark");
    asio::io_context io;
    etcd::store a{io, server.config(prefix)}, b{io, server.config(prefix)}, c{io, server.config(prefix)};
    test::run(io, [&]() -> asio::awaitable<void> {
        dl::basic_distributed_mutex<etcd::store> ma{a, "r"};
        patient_mutex mb{b, "r", {}, dl::retry::exponential_backoff{.deadline = 20s}};
        patient_mutex mc{c, "r", {}, dl::retry::exponential_backoff{.deadline = 20s}};
        auto first = co_await ma.lock();
        REQUIRE(first);
        auto second = test::start(co_await asio::this_coro::executor, mb.lock());
        (void)co_await test::eventually("two keys", [&] { return queue_of(server, prefix, "r").size() == 2; },
                                        test::long_enough());
        auto third = test::start(co_await asio::this_coro::executor, mc.lock());
        (void)co_await test::eventually("three keys", [&] { return queue_of(server, prefix, "r").size() == 3; },
                                        test::long_enough());
        const auto keys = queue_of(server, prefix, "r");
        REQUIRE(keys.size() == 3);
        // Taken at the first try: whoever queues later sees it as the holder, no mark.
        CHECK(keys[0].value == first->owner().to_hex());
        { const auto ok_ = co_await first->unlock(); CHECK(ok_); }
        { const bool came_ = co_await second.wait(); REQUIRE(came_); }
        REQUIRE(second.get());
        const auto value_of = [&](const std::string& key) -> std::string {
            for (const auto& k : queue_of(server, prefix, "r"))
                if (k.key == key)
                    return k.value;
            return "(gone)";
        };
        // b held the lock after waiting: it marks its key for c. The mark keeps the
        // create revision (the fence) and the owner at the front of the value.
        const auto marked = second.get()->owner().to_hex() + "+held";
        (void)co_await test::eventually("b's mark", [&] { return value_of(keys[1].key) == marked; },
                                        test::long_enough());
        const auto after = queue_of(server, prefix, "r");
        REQUIRE(after.size() == 2);
        CHECK(after[0].create_revision == keys[1].create_revision);
        CHECK(after[0].lease == b.session_lease());
        CHECK(second.get()->fence() == static_cast<dl::fence_token>(keys[1].create_revision));
        {
            const auto info = co_await c.read("r");
            REQUIRE(info);
            CHECK(info->held);
            CHECK(info->owner == second.get()->owner().to_hex().substr(0, 8));
        }
        CHECK_FALSE(third.ready());
        { const auto ok_ = co_await second.get()->unlock(); CHECK(ok_); }
        { const bool came_ = co_await third.wait(); REQUIRE(came_); }
        auto& got = third.get();
        REQUIRE(got);
        CHECK(got->fence() == static_cast<dl::fence_token>(keys[2].create_revision));
        CHECK(got->fence() > second.get()->fence());
        (void)co_await test::eventually("c's mark",
                                        [&] { return value_of(keys[2].key) == got->owner().to_hex() + "+held"; },
                                        test::long_enough());
        { const auto ok_ = co_await got->unlock(); CHECK(ok_); }
        CHECK(queue_of(server, prefix, "r").empty());
        co_await a.close();
        co_await b.close();
        co_await c.close();
    });
}

TEST_CASE("etcd: a lost session ends its leases; a session lost before binding is not reused", "[etcd]")
{
    auto& server = test::shared_etcd();
    const auto prefix = test::fresh_prefix("lost");
    asio::io_context io;
    etcd::store a{io, server.config(prefix)};
    test::run(io, [&]() -> asio::awaitable<void> {
        dl::basic_distributed_mutex<etcd::store> m{a, "r"};
        auto l = co_await m.lock();
        REQUIRE(l);
        const auto first_lease = a.session_lease();
        auto lost = test::start(co_await asio::this_coro::executor, l->lost());
        (void)server.call("lease/revoke", {{"ID", std::to_string(first_lease)}});
        // The next keepalive hears that the lease is gone.
        { const bool came_ = co_await lost.wait(); REQUIRE(came_); }
        CHECK_FALSE(l->valid());
        auto stale = co_await l->unlock();
        CHECK_FALSE(stale);
        // The next lock opens a new session.
        auto again = co_await m.lock();
        REQUIRE(again);
        CHECK(a.session_lease() != first_lease);
        CHECK(again->fence() > l->fence());
        { const auto ok_ = co_await again->unlock(); CHECK(ok_); }
        co_await a.close();
    });
}

TEST_CASE("etcd: fenced writes: a holder whose lock ended writes nothing", "[etcd]")
{
    auto& server = test::shared_etcd();
    const auto prefix = test::fresh_prefix("fenced");
    asio::io_context io;
    etcd::store a{io, server.config(prefix)}, b{io, server.config(prefix)};
    test::run(io, [&]() -> asio::awaitable<void> {
        dl::basic_distributed_mutex<etcd::store> ma{a, "wallet"}, mb{b, "wallet"};
        auto first = co_await ma.lock();
        REQUIRE(first);
        const auto data = prefix + "data/wallet";
        { const auto ok_ = co_await a.fenced_put(data, *first, "90"); REQUIRE(ok_); }
        // A's session ends behind its back (a long pause); B takes the lock and writes.
        for (const auto& k : queue_of(server, prefix, "wallet"))
            (void)server.call("lease/revoke", {{"ID", std::to_string(k.lease)}});
        auto second = co_await mb.lock();
        REQUIRE(second);
        { const auto ok_ = co_await b.fenced_put(data, *second, "80"); REQUIRE(ok_); }
        auto stale = co_await a.fenced_put(data, *first, "40");
        REQUIRE_FALSE(stale);
        CHECK(stale.error() == dl::errc::stale_fence);
        const auto value = server.call("kv/range", etcd::detail::range_request(data));
        const auto r = etcd::detail::read_range(value);
        REQUIRE(r);
        REQUIRE(r->kvs.size() == 1);
        CHECK(r->kvs[0].value == "80");
        auto bad = co_await a.fenced_put("", *second, "x");
        CHECK(bad.error() == dl::errc::invalid_argument);
        { const auto ok_ = co_await second->unlock(); CHECK(ok_); }
        co_await a.close();
        co_await b.close();
    });
}

TEST_CASE("etcd: a watch stream cut mid-wait is opened again; the release still wakes the waiter",
          "[etcd][fault]")
{
    auto& server = test::shared_etcd();
    const auto prefix = test::fresh_prefix("cut");
    fault::proxy net{server.port()};
    asio::io_context io;
    etcd::store holder{io, server.config(prefix)}, waiter{io, server.config_through(net.port(), prefix)};
    test::recorder rec;
    test::run(io, [&]() -> asio::awaitable<void> {
        dl::basic_distributed_mutex<etcd::store> mh{holder, "r"};
        dl::basic_distributed_mutex<etcd::store, dl::observe::callback, dl::retry::fixed> mw{
            waiter, "r", {}, rec.observer(), patient()};
        auto held = co_await mh.lock();
        REQUIRE(held);
        auto waiting = test::start(co_await asio::this_coro::executor, mw.lock());
        (void)co_await test::eventually("waiting", [&] { return !rec.of<dl::wait_event>().empty(); },
                                        test::long_enough());
        co_await test::settle(200ms); // the watch is open
        for (int cut = 0; cut < 3; ++cut) {
            net.reset_all(); // every connection through the proxy is cut
            co_await test::settle(150ms);
        }
        CHECK_FALSE(waiting.ready());
        { const auto ok_ = co_await held->unlock(); CHECK(ok_); }
        { const bool came_ = co_await waiting.wait(); REQUIRE(came_); }
        auto& got = waiting.get();
        REQUIRE(got);
        REQUIRE_FALSE(rec.of<dl::wake_event>().empty());
        CHECK(rec.of<dl::wake_event>().back().notified);
        { const auto ok_ = co_await got->unlock(); CHECK(ok_); }
        co_await holder.close();
        co_await waiter.close();
    });
}

TEST_CASE("etcd: a watch from a compacted revision recovers by reading the key", "[etcd][fault]")
{
    auto& server = test::shared_etcd();
    const auto prefix = test::fresh_prefix("compact");
    asio::io_context io;
    auto client = std::make_shared<etcd::detail::client>(io.get_executor(), server.config(prefix));
    const auto put = [&](const std::string& k) {
        const auto r = server.call("kv/put", {{"key", b64(k)}, {"value", b64("v")}});
        return etcd::detail::header_revision(r).value_or(0);
    };
    const auto alive = prefix + "alive", gone = prefix + "gone";
    const auto alive_rev = put(alive);
    const auto gone_rev = put(gone);
    (void)server.call("kv/deleterange", etcd::detail::range_request(gone));
    const auto now = put(prefix + "filler");
    REQUIRE(server.call("kv/compaction", {{"revision", std::to_string(now)}}).is_object());
    test::run(io, [&]() -> asio::awaitable<void> {
        // Deleted before the compaction that erased the event: seen as gone.
        {
            const auto w = co_await etcd::detail::client::wait_deleted(client, gone, gone_rev, gone_rev,
                                                                       dl::clock::now() + 10s);
            CHECK(w.deleted);
            CHECK_FALSE(w.marked);
        }
        // Still there: watched again from now on; a put that marks it as the holder's
        // is noted, and its deletion is seen.
        auto waiting = test::start(co_await asio::this_coro::executor,
                                   etcd::detail::client::wait_deleted(client, alive, alive_rev, alive_rev,
                                                                      dl::clock::now() + 20s));
        co_await test::settle(300ms);
        CHECK_FALSE(waiting.ready());
        (void)server.call("kv/put", {{"key", b64(alive)}, {"value", b64("v+held")}});
        co_await test::settle(300ms);
        CHECK_FALSE(waiting.ready());
        (void)server.call("kv/deleterange", etcd::detail::range_request(alive));
        { const bool came_ = co_await waiting.wait(); REQUIRE(came_); }
        CHECK(waiting.get().deleted);
        CHECK(waiting.get().marked);
        // Not deleted: not deleted at the deadline, and never marked.
        const auto kept = prefix + "kept";
        const auto kept_rev = put(kept);
        {
            const auto w = co_await etcd::detail::client::wait_deleted(client, kept, kept_rev, kept_rev + 1,
                                                                       dl::clock::now() + 300ms);
            CHECK_FALSE(w.deleted);
            CHECK_FALSE(w.marked);
        }
        client->close();
    });
}

TEST_CASE("etcd: a blackholed holder hears of its loss at its own deadline, before the server frees the lock",
          "[etcd][fault]")
{
    auto& server = test::shared_etcd();
    const auto prefix = test::fresh_prefix("blackhole");
    fault::proxy net{server.port()};
    asio::io_context io;
    auto cfg = server.config_through(net.port(), prefix);
    cfg.drift = 500ms; // room for a loaded machine's scheduling between loss and the server's expiry
    cfg.request_timeout = 1s;
    etcd::store holder{io, cfg}, other{io, server.config(prefix)};
    test::run(io, [&]() -> asio::awaitable<void> {
        dl::basic_distributed_mutex<etcd::store> mh{holder, "r"};
        auto held = co_await mh.lock();
        REQUIRE(held);
        auto lost = test::start(co_await asio::this_coro::executor, held->lost());
        net.set(fault::direction::to_server, {.blackhole = true});
        { const bool came_ = co_await lost.wait(); REQUIRE(came_); }
        // Reported while the server still keeps the key: the holder stops first.
        CHECK_FALSE(queue_of(server, prefix, "r").empty());
        CHECK_FALSE(held->valid());
        // Then the server's TTL runs out and another session takes the lock.
        patient_mutex mo{other, "r", {}, dl::retry::exponential_backoff{.deadline = 20s}};
        auto next = co_await mo.lock();
        REQUIRE(next);
        CHECK(next->fence() > held->fence());
        { const auto ok_ = co_await next->unlock(); CHECK(ok_); }
        net.set(fault::direction::to_server, {});
        co_await holder.close();
        co_await other.close();
    });
}

TEST_CASE("etcd: a session granted late, or kept alive late, sends its next keepalive while validity remains",
          "[etcd][fault]")
{
    auto& server = test::shared_etcd();
    const auto prefix = test::fresh_prefix("late-grant");
    fault::proxy net{server.port()};
    asio::io_context io;
    auto cfg = server.config_through(net.port(), prefix);
    cfg.session_ttl = 5s;
    cfg.keepalive_every = 3500ms; // longer than what a late grant leaves of the validity
    cfg.drift = 100ms;
    cfg.request_timeout = 10s;    // the held-back answers below are late, not lost
    etcd::store holder{io, cfg};
    test::run(io, [&]() -> asio::awaitable<void> {
        const auto ex = co_await asio::this_coro::executor;
        const auto pause = [&](dl::duration d) -> asio::awaitable<void> {
            asio::steady_timer t{ex, d};
            co_await t.async_wait(asio::use_awaitable);
        };
        // The session's grant is answered 3.8 s late: 1.1 s of its 4.9 s validity is
        // left, less than one keepalive interval.
        net.set(fault::direction::to_client, {.blackhole = true});
        dl::basic_distributed_mutex<etcd::store, dl::retry::none> m{holder, "r"};
        auto locking = test::start(ex, m.lock());
        co_await pause(3800ms);
        net.set(fault::direction::to_client, {});
        { const bool came_ = co_await locking.wait(); REQUIRE(came_); }
        auto& held = locking.get();
        REQUIRE(held);
        // Past the validity the grant gave: a keepalive went out in time and was answered.
        co_await pause(2s);
        CHECK(holder.keepalives_sent() >= 1);
        CHECK(held->valid());

        // A keepalive's answer held back 1.5 s (within its bound): the next one still
        // goes while the validity that answer gave lasts.
        const auto before = holder.keepalives_sent();
        net.set(fault::direction::to_client, {.blackhole = true});
        (void)co_await test::eventually("a keepalive sent", [&] { return holder.keepalives_sent() > before; },
                                        test::long_enough());
        co_await pause(1500ms);
        net.set(fault::direction::to_client, {});
        co_await pause(4s);
        CHECK(held->valid());
        CHECK(holder.keepalives_sent() >= before + 2);
        // The server agrees: the key is still there under the session's lease.
        CHECK(queue_of(server, prefix, "r").size() == 1);
        { const auto ok_ = co_await held->unlock(); CHECK(ok_); }
        co_await holder.close();
    });
}

TEST_CASE("etcd: stores of one process whose key prefixes nest are refused; the same prefix is shared",
          "[etcd][input]")
{
    using etcd::detail::nests;
    CHECK(nests("app/", "app/a/"));
    CHECK(nests("app/a/", "app/"));
    CHECK(nests("app", "apple/")); // "app" + the escaped id "le" + "/" is "apple/"
    CHECK_FALSE(nests("app/", "app/"));
    CHECK_FALSE(nests("app/", "apple/"));

    auto& server = test::shared_etcd();
    const auto prefix = test::fresh_prefix("nest");
    asio::io_context io;
    std::optional<etcd::store> outer{std::in_place, io, server.config(prefix)};
    etcd::store same{io, server.config(prefix)}; // several clients of one namespace
    try {
        etcd::store inner{io, server.config(prefix + "a/")};
        FAIL("a nested prefix was accepted");
    } catch (const std::system_error& e) {
        CHECK(e.code() == dl::errc::invalid_argument);
        CHECK(std::string_view{e.what()}.find("nests with") != std::string_view::npos);
    }
    CHECK_THROWS_AS((etcd::store{io, server.config(prefix.substr(0, prefix.size() - 1))}), std::system_error);
    // Another member (here the same server through a proxy: a store cannot tell) is
    // not compared.
    fault::proxy net{server.port()};
    etcd::store elsewhere{io, server.config_through(net.port(), prefix + "a/")};
    // Once the outer store is gone, the inner prefix is free to use... while `same`
    // lives, it is still refused.
    outer.reset();
    CHECK_THROWS_AS((etcd::store{io, server.config(prefix + "a/")}), std::system_error);
}
