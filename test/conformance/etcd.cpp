// The store conformance suite on etcd: three clients (three sessions) of one member
// the tests start (test/etcd/cluster.hpp), reaching it through a fault proxy that
// loses replies on demand; and what only this store does: the queue served in
// creation order, the key layout, watches cut and compacted, sessions expiring while
// blackholed, SIGKILLed holders, auth, a three-member cluster losing its leader.
#include "conformance/suite.hpp"
#include "etcd/cluster.hpp"
#include "fault/proxy.hpp"
#include "workers.hpp"

#include <algorithm>
#include <array>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace {

using namespace std::chrono_literals;
namespace dl = distlock;
namespace etcd = distlock::etcd;
using json = nlohmann::json;

using patient_mutex = dl::basic_distributed_mutex<etcd::store, dl::retry::exponential_backoff>;

std::string b64(std::string_view s) { return dl::util::base64(s); }

// The keys of a resource's queue, oldest first, as the harness's own client sees them.
std::vector<etcd::detail::kv> queue_of(const test::etcd_cluster& c, const std::string& prefix,
                                       std::string_view resource, std::size_t member = 0)
{
    const auto q = etcd::detail::queue_prefix(prefix, resource);
    auto r = etcd::detail::range_request(q, etcd::detail::range_end(q));
    r["sort_target"] = "CREATE";
    r["sort_order"] = "ASCEND";
    const auto answer = c.call("kv/range", r, member);
    REQUIRE(answer.is_object());
    const auto range = etcd::detail::read_range(answer);
    REQUIRE(range);
    return range->kvs;
}

struct etcd_clients {
    static constexpr const char* name = "etcd";
    using backend = etcd::store;
    static constexpr bool notifies = true; // each waiter watches its predecessor
    static constexpr bool quorum = false;
    std::string prefix = test::fresh_prefix("conf");
    fault::proxy net{test::shared_etcd().port()};
    asio::io_context io;
    std::array<std::unique_ptr<backend>, 3> clients;

    etcd_clients()
    {
        for (auto& c : clients)
            c = std::make_unique<backend>(io, test::shared_etcd().config_through(net.port(), prefix));
        test::conformance::warm_up(io, clients);
    }
    ~etcd_clients() { test::conformance::close_all(io, clients); }

    backend& client(std::size_t i) { return *clients[i]; }
    bool held(std::string_view resource) { return !queue_of(test::shared_etcd(), prefix, resource).empty(); }
    std::size_t waiters(std::string_view resource) { return queue_of(test::shared_etcd(), prefix, resource).size(); }
    std::unique_ptr<test::child> holder_process(const std::string& resource)
    {
        return std::make_unique<test::child>(std::vector<std::string>{
            test::self_path(), "--worker", "etcd-hold", std::to_string(test::shared_etcd().port()), prefix, resource});
    }
    // Another client, with a session of its own, straight to the member.
    std::unique_ptr<backend> make_client() { return std::make_unique<backend>(io, test::shared_etcd().config(prefix)); }
    // As if the holder's session had expired: its lease is revoked on the server.
    void end_lock(const dl::lease& l)
    {
        for (const auto& k : queue_of(test::shared_etcd(), prefix, l.resource()))
            if (k.value == l.owner().to_hex())
                (void)test::shared_etcd().call("lease/revoke", {{"ID", std::to_string(k.lease)}});
    }
    void lose_next_reply(std::size_t) { net.set(fault::direction::to_client, {.close_after = 0}); }
    asio::awaitable<void> close(std::size_t i) { return clients[i]->close(); }
    static dl::duration longest_validity(const dl::lock_options&) { return test::shared_etcd().config().session_ttl; }
};

} // namespace

DISTLOCK_CONFORMANCE("[etcd]", etcd_clients)

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

TEST_CASE("etcd: settings and URLs are checked before any I/O", "[etcd][input]")
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
    etcd::config c;
    CHECK_FALSE(c.validate());
    const auto refused = [](auto change) {
        etcd::config c;
        change(c);
        return c.validate() == dl::errc::invalid_argument;
    };
    CHECK(refused([](etcd::config& c) { c.members.clear(); }));
    CHECK(refused([](etcd::config& c) { c.members[0].port = 0; }));
    CHECK(refused([](etcd::config& c) { c.session_ttl = 1s; }));
    CHECK(refused([](etcd::config& c) { c.session_ttl = 2500ms; }));
    CHECK(refused([](etcd::config& c) { c.session_ttl = dl::duration::max(); }));
    CHECK(refused([](etcd::config& c) { c.keepalive_every = c.session_ttl; }));
    CHECK(refused([](etcd::config& c) { c.keepalive_every = -1ms; }));
    CHECK(refused([](etcd::config& c) { c.drift = -1ms; }));
    CHECK(refused([](etcd::config& c) { c.request_timeout = 0s; }));
    CHECK(refused([](etcd::config& c) { c.connect_timeout = dl::duration::max(); }));
    CHECK(refused([](etcd::config& c) { c.prefix = std::string{"a\0b", 3}; }));
    CHECK(refused([](etcd::config& c) { c.password = "p"; }));
    CHECK(refused([](etcd::config& c) {
        c.username = "u";
        c.password = "p\n";
    }));
    asio::io_context io;
    etcd::config zero;
    zero.session_ttl = 0s;
    CHECK_THROWS_AS((etcd::store{io, zero}), std::system_error);
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
                                        test::conformance::long_enough());
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
                                        test::conformance::long_enough());
        auto third = test::start(co_await asio::this_coro::executor, mc.lock());
        (void)co_await test::eventually("three keys", [&] { return queue_of(server, prefix, "r").size() == 3; },
                                        test::conformance::long_enough());
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
                                        test::conformance::long_enough());
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
                                        test::conformance::long_enough());
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
            waiter, "r", {}, rec.observer(), test::conformance::patient()};
        auto held = co_await mh.lock();
        REQUIRE(held);
        auto waiting = test::start(co_await asio::this_coro::executor, mw.lock());
        (void)co_await test::eventually("waiting", [&] { return !rec.of<dl::wait_event>().empty(); },
                                        test::conformance::long_enough());
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

namespace {

// etcd-hold PORT PREFIX RESOURCE: takes the lock, prints "locked FENCE", holds it
// until killed (the conformance suite's killed_holder).
int hold_worker(const std::vector<std::string>& args)
{
    if (args.size() != 3)
        return 2;
    asio::io_context io;
    etcd::config cfg;
    cfg.members = {{"127.0.0.1", static_cast<std::uint16_t>(std::stoi(args[0]))}};
    cfg.prefix = args[1];
    cfg.session_ttl = 3s;
    etcd::store store{io, cfg};
    return test::conformance::hold_until_lost(io, store, args[2]);
}

// etcd-increment PORT PREFIX ROUNDS PROCESSES: once PROCESSES workers are ready (each
// puts PREFIX"ready/"PID), ROUNDS critical sections that read PREFIX"counter" and
// write it back one higher with a fenced put; prints "handoffs N": how many of its
// locks were last held by another process (the counter's value says who wrote last).
int increment_worker(const std::vector<std::string>& args)
{
    if (args.size() != 4)
        return 2;
    asio::io_context io;
    etcd::config cfg;
    cfg.members = {{"127.0.0.1", static_cast<std::uint16_t>(std::stoi(args[0]))}};
    cfg.prefix = args[1];
    cfg.session_ttl = 5s;
    etcd::store store{io, cfg};
    const int rounds = std::stoi(args[2]);
    const auto me = std::to_string(::getpid());
    int status = 1;
    asio::co_spawn(io, [&]() -> asio::awaitable<void> {
        // All processes contend from the first round on: a start-up delay (an
        // ASan-instrumented process takes a while) must not count as unfairness.
        const auto ready = args[1] + "ready/";
        json mark = {{"key", b64(ready + me)}, {"value", b64("1")}};
        if (!co_await store.execute("kv/put", std::move(mark)))
            co_return;
        const auto others = etcd::detail::range_request(ready, etcd::detail::range_end(ready));
        for (int wait = 0;; ++wait) {
            auto seen = co_await store.execute("kv/range", others);
            const auto r = seen ? etcd::detail::read_range(seen.value()) : std::nullopt;
            if (r && r->count >= std::stoi(args[3]))
                break;
            if (wait == 3000)
                co_return;
            dl::timer t{co_await asio::this_coro::executor, 20ms};
            co_await t.async_wait(asio::use_awaitable);
        }
        const auto counter = args[1] + "counter";
        int handoffs = 0;
        for (int i = 0; i < rounds; ++i) {
            patient_mutex m{store, "counter", {}, dl::retry::exponential_backoff{.deadline = 60s}};
            auto lease = co_await m.lock();
            if (!lease)
                co_return;
            auto read = co_await store.execute("kv/range", etcd::detail::range_request(counter));
            if (!read)
                co_return;
            const auto r = etcd::detail::read_range(read.value());
            if (!r)
                co_return;
            long n = 0;
            std::string last_writer;
            if (!r->kvs.empty()) {
                const auto& v = r->kvs.front().value;
                const auto space = v.find(' ');
                n = std::stol(v.substr(0, space));
                last_writer = space == std::string::npos ? "" : v.substr(space + 1);
            }
            if (!last_writer.empty() && last_writer != me)
                ++handoffs;
            if (!co_await store.fenced_put(counter, *lease, std::to_string(n + 1) + " " + me))
                co_return;
            if (!co_await lease->unlock())
                co_return;
        }
        std::printf("handoffs %d\n", handoffs);
        std::fflush(stdout);
        status = 0;
        co_await store.close();
    }, asio::detached);
    io.run();
    return status;
}

const bool workers_registered =
    test::register_worker("etcd-hold", hold_worker) && test::register_worker("etcd-increment", increment_worker);

} // namespace

TEST_CASE("etcd: processes incrementing one counter with fenced puts lose nothing; releases change hands",
          "[etcd][process]")
{
    REQUIRE(workers_registered);
    auto& server = test::shared_etcd();
    const auto prefix = test::fresh_prefix("counter");
    constexpr int processes = 4, rounds = 15;
    std::vector<std::unique_ptr<test::child>> workers;
    for (int i = 0; i < processes; ++i)
        workers.push_back(std::make_unique<test::child>(std::vector<std::string>{
            test::self_path(), "--worker", "etcd-increment", std::to_string(server.port()), prefix,
            std::to_string(rounds), std::to_string(processes)}));
    int handoffs = 0;
    for (auto& w : workers) {
        const auto line = w->read_line(std::chrono::seconds{120});
        REQUIRE(line);
        REQUIRE(line->starts_with("handoffs "));
        handoffs += std::stoi(line->substr(9));
        CHECK(w->wait(std::chrono::seconds{30}) == std::optional<int>{0});
    }
    const auto value = server.call("kv/range", etcd::detail::range_request(prefix + "counter"));
    const auto r = etcd::detail::read_range(value);
    REQUIRE(r);
    REQUIRE(r->kvs.size() == 1);
    CHECK(std::stol(r->kvs[0].value) == processes * rounds);
    // A releaser that asks again queues behind the waiters: while others wait, the
    // lock goes to another process (the last process to finish may hold it a few
    // times in a row once the others are done).
    INFO("hand-offs: " << handoffs << " of " << processes * rounds - 1);
    CHECK(handoffs >= (processes * rounds - 1) * 9 / 10);
}
