// The ZooKeeper store against a server the tests start
// (test/support/zookeeper_server.hpp), beyond the conformance suite: resource ids
// escaped into node names, waiter names, reply codes, the node layout, marks, a lost
// create reply, sessions in doubt, resumed and expiring, digest auth, chroot, and
// waiters in separate processes served in order.
#include "fault/proxy.hpp"
#include "workers.hpp"
#include "zookeeper/zookeeper_support.hpp"
#include "conformance/suite.hpp"

#include <algorithm>
#include <atomic>
#include <array>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

using namespace std::chrono_literals;
using namespace test::zookeeper_tests;

// -- Pure functions ------------------------------------------------------------------

TEST_CASE("zookeeper: resource ids are escaped into one node name injectively, never '.', '..' or a '/'",
          "[zookeeper][input]")
{
    using zk::detail::component;
    using zk::detail::resource_of;
    const std::vector<std::string> ids{"a",   "a/b", "a%2Fb", ".", "..", "...", "%2E", "zookeeper", "seat:12",
                                       std::string{"\0\xff/", 3}, std::string(1024, '/')};
    for (const auto& id : ids) {
        const auto c = component(id);
        INFO(id);
        CHECK(c.find('/') == std::string::npos);
        CHECK(c != ".");
        CHECK(c != "..");
        REQUIRE(resource_of(c));
        CHECK(*resource_of(c) == id);
        for (const auto& other : ids)
            if (other != id)
                CHECK(component(other) != c);
    }
    CHECK(component("seat:12_A-b.c") == "seat:12_A-b.c");
    CHECK(zk::detail::resource_node("/locks", "a/b") == "/locks/a%2Fb");
    CHECK_FALSE(resource_of("a/b"));
    CHECK_FALSE(resource_of("%2f"));
}

TEST_CASE("zookeeper: waiter names are read strictly and ordered by sequence, not by name", "[zookeeper][input]")
{
    const std::string a(32, 'a'), b(32, 'b'), c(32, 'c');
    // Unsorted, as the server returns them, with names the store did not make.
    const std::vector<std::string> children{b + "-0000000010", "foreign", a + "-0000000012", c + "-0000000002",
                                            a.substr(1) + "-0000000001", c + "-00000000x1"};
    const auto holder = zk::detail::stand(children, c);
    CHECK(holder.found);
    CHECK(holder.first);
    CHECK(holder.holder == c + "-0000000002");
    const auto second = zk::detail::stand(children, b);
    CHECK(second.found);
    CHECK_FALSE(second.first);
    CHECK(second.predecessor == c + "-0000000002");
    CHECK(second.predecessor_sequence == 2);
    const auto third = zk::detail::stand(children, a);
    CHECK(third.predecessor == b + "-0000000010");
    CHECK(third.sequence == 12);
    CHECK_FALSE(zk::detail::stand(children, std::string(32, 'd')).found);
    // The exact name wins over the owner (a node of an earlier session may linger).
    const std::vector<std::string> twice{a + "-0000000003", b + "-0000000004", a + "-0000000007"};
    CHECK(zk::detail::stand(twice, a, a + "-0000000007").predecessor == b + "-0000000004");
    CHECK(zk::detail::stand(twice, a).first);
    CHECK_FALSE(zk::detail::parse_waiter(std::string(32, 'A') + "-0000000001")); // upper-case hex
    CHECK_FALSE(zk::detail::parse_waiter(a + "-"));
    CHECK_FALSE(zk::detail::parse_waiter(a + "-99999999999999999999"));
}

TEST_CASE("zookeeper: URLs are checked before any I/O", "[zookeeper][input]")
{
    auto url = zk::config::from_url("zk://u:p%w@127.0.0.1:2181,[::1]:2182,localhost/app/x?prefix=/locks&timeout=4000");
    REQUIRE(url);
    CHECK(url->servers.size() == 3);
    CHECK(url->servers[1].host == "::1");
    CHECK(url->servers[1].port == 2182);
    CHECK(url->servers[2].port == 2181);
    CHECK(url->chroot == "/app/x");
    CHECK(url->prefix == "/locks");
    CHECK(url->root() == "/app/x/locks");
    CHECK(url->session_timeout == 4s);
    CHECK(url->username == "u");
    CHECK(url->password == "p%w");
    CHECK(zk::config::from_url("zk://h/")->chroot.empty());
    for (const char* bad : {"", "etcd://h:1", "zk://", "zk://h:0", "zk://h:65536", "zk://h:x", "zk://[::1",
                            "zk://h//a", "zk://h/a/", "zk://h/a/../b", "zk://h?prefix=", "zk://h?prefix=/",
                            "zk://h?prefix=locks", "zk://h?prefix=/zookeeper", "zk://h?timeout=0",
                            "zk://h?timeout=x", "zk://h?what=1", "zk://,h", "zk://:pw@h", "zk://u:v:w@h?prefix=/a\x01"}) {
        INFO(bad);
        CHECK(zk::config::from_url(bad).error() == dl::errc::invalid_argument);
    }
}

TEST_CASE("zookeeper: reply codes map to conditions", "[zookeeper][input]")
{
    CHECK(zk::from_reply(0) == std::error_code{});
    CHECK(zk::from_reply(-112) == dl::condition::session_lost);
    CHECK(zk::from_reply(-102) == dl::condition::denied);
    CHECK(zk::from_reply(-115) == dl::condition::denied);
    CHECK(zk::from_reply(-4) == dl::condition::maybe_applied);
    CHECK(zk::from_reply(-7) == dl::condition::maybe_applied);
    CHECK(zk::from_reply(-110) == dl::condition::not_applied);
    CHECK(zk::from_reply(-8) == dl::condition::invalid_argument);
    CHECK(zk::from_reply(3) == dl::errc::protocol_error);
    CHECK(zk::from_reply(-1000) == dl::errc::protocol_error);
    CHECK(zk::from_reply(-101).category().name() == std::string{"distlock.zookeeper"});
    CHECK_FALSE(zk::from_reply(-101).message().empty());
}

// -- Against a real server -------------------------------------------------------------

TEST_CASE("zookeeper: the node layout: one ephemeral sequential node per waiter, fence = its czxid",
          "[zookeeper]")
{
    auto& server = test::shared_zookeeper();
    const auto prefix = test::fresh_zk_prefix("layout");
    asio::io_context io;
    zk::store a{io, server.config(prefix)}, b{io, server.config(prefix)};
    test::run(io, [&]() -> asio::awaitable<void> {
        dl::basic_distributed_mutex<zk::store> ma{a, "seat/7"};
        patient_mutex mb{b, "seat/7", {}, dl::retry::exponential_backoff{.deadline = 20s}};
        auto first = co_await ma.lock();
        REQUIRE(first);
        auto waiting = test::start(co_await asio::this_coro::executor, mb.lock());
        (void)co_await test::eventually("two nodes", [&] { return queue_of(prefix, "seat/7").size() == 2; },
                                        test::long_enough());
        const auto nodes = queue_of(prefix, "seat/7");
        REQUIRE(nodes.size() == 2);
        CHECK(nodes[0].starts_with(first->owner().to_hex() + "-"));
        test::zk_client c{server.port()};
        const auto parent = prefix + "/seat%2F7";
        const auto s0 = c.stat(parent + "/" + nodes[0]);
        const auto s1 = c.stat(parent + "/" + nodes[1]);
        REQUIRE(s0);
        REQUIRE(s1);
        CHECK(s0->ephemeral_owner == a.session_id());
        CHECK(s1->ephemeral_owner == b.session_id());
        CHECK(a.session_id() != b.session_id());
        CHECK(static_cast<dl::fence_token>(s0->czxid) == first->fence());
        // The negotiated timeout is the one the server granted (2 s asked, within 0.5-5 s).
        CHECK(a.negotiated_timeout() == 2s);
        { const auto ok_ = co_await first->unlock(); CHECK(ok_); }
        { const bool came_ = co_await waiting.wait(); REQUIRE(came_); }
        auto& second = waiting.get();
        REQUIRE(second);
        CHECK(second->fence() == static_cast<dl::fence_token>(s1->czxid));
        CHECK(second->fence() > first->fence());
        { const auto ok_ = co_await second->unlock(); CHECK(ok_); }
        CHECK(queue_of(prefix, "seat/7").empty());
        // The resource's node is a container: the server deletes it once emptied.
        (void)co_await test::eventually("container gone", [&] { return !c.stat(parent); },
                                        test::long_enough());
        CHECK_FALSE(c.stat(parent));
        // A lock after that makes it again, with a larger fence.
        auto third = co_await ma.lock();
        REQUIRE(third);
        CHECK(third->fence() > second->fence());
        const auto ids = std::array<std::int64_t, 2>{a.session_id(), b.session_id()};
        co_await a.close();
        co_await b.close();
        // close() ended both sessions on the server: the held node went with a's.
        CHECK(queue_of(prefix, "seat/7").empty());
        CHECK(ids[0] != 0);
    });
}

TEST_CASE("zookeeper: a waiter that comes to hold the lock marks its node, so the one behind it is told that "
          "it waits for the holder",
          "[zookeeper]")
{
    auto& server = test::shared_zookeeper();
    const auto prefix = test::fresh_zk_prefix("mark");
    asio::io_context io;
    zk::store a{io, server.config(prefix)}, b{io, server.config(prefix)}, c{io, server.config(prefix)};
    test::run(io, [&]() -> asio::awaitable<void> {
        dl::basic_distributed_mutex<zk::store> ma{a, "r"};
        patient_mutex mb{b, "r", {}, dl::retry::exponential_backoff{.deadline = 20s}};
        patient_mutex mc{c, "r", {}, dl::retry::exponential_backoff{.deadline = 20s}};
        test::zk_client zc{server.port()};
        const auto parent = zk::detail::resource_node(prefix, "r");
        auto first = co_await ma.lock();
        REQUIRE(first);
        auto second = test::start(co_await asio::this_coro::executor, mb.lock());
        (void)co_await test::eventually("two nodes", [&] { return queue_of(prefix, "r").size() == 2; },
                                        test::long_enough());
        auto third = test::start(co_await asio::this_coro::executor, mc.lock());
        (void)co_await test::eventually("three nodes", [&] { return queue_of(prefix, "r").size() == 3; },
                                        test::long_enough());
        const auto nodes = queue_of(prefix, "r");
        REQUIRE(nodes.size() == 3);
        // Taken at the first try: whoever queues later sees it as the holder, no mark.
        const auto s0 = zc.stat(parent + "/" + nodes[0]);
        REQUIRE(s0);
        CHECK(s0->data_length == 0);
        // b queued behind a waiter-free holder; c behind b while b still waited.
        { const auto ok_ = co_await first->unlock(); CHECK(ok_); }
        { const bool came_ = co_await second.wait(); REQUIRE(came_); }
        REQUIRE(second.get());
        const auto mark_of = [&](const std::string& name) {
            const auto st = zc.stat(parent + "/" + name);
            return st ? st->data_length : -1;
        };
        // b held the lock after waiting: it marks its node for c.
        (void)co_await test::eventually("b's mark", [&] { return mark_of(nodes[1]) == 4; },
                                        test::long_enough());
        CHECK_FALSE(third.ready());
        { const auto ok_ = co_await second.get()->unlock(); CHECK(ok_); }
        { const bool came_ = co_await third.wait(); REQUIRE(came_); }
        auto& got = third.get();
        REQUIRE(got);
        const auto s2 = zc.stat(parent + "/" + nodes[2]);
        REQUIRE(s2);
        CHECK(got->fence() == static_cast<dl::fence_token>(s2->czxid));
        CHECK(got->fence() > second.get()->fence());
        (void)co_await test::eventually("c's mark", [&] { return mark_of(nodes[2]) == 4; },
                                        test::long_enough());
        { const auto ok_ = co_await got->unlock(); CHECK(ok_); }
        CHECK(queue_of(prefix, "r").empty());
        co_await a.close();
        co_await b.close();
        co_await c.close();
    });
}

TEST_CASE("zookeeper: a create whose reply was lost is found again, never a second node", "[zookeeper][fault]")
{
    auto& server = test::shared_zookeeper();
    const auto prefix = test::fresh_zk_prefix("lost-create");
    fault::proxy net{server.port()};
    asio::io_context io;
    zk::store holder{io, server.config(prefix)}, waiter{io, server.config_through(net.port(), prefix)};
    test::run(io, [&]() -> asio::awaitable<void> {
        dl::basic_distributed_mutex<zk::store> mh{holder, "r"};
        auto held = co_await mh.lock();
        REQUIRE(held);
        // The waiter's session is open; then its next reply (the create's) is lost.
        { const auto warm_ = co_await waiter.read("other"); REQUIRE(warm_); }
        net.set(fault::direction::to_client, {.close_after = 0});
        patient_mutex mw{waiter, "r", {}, dl::retry::exponential_backoff{.initial = 50ms, .deadline = 20s}};
        auto waiting = test::start(co_await asio::this_coro::executor, mw.lock());
        (void)co_await test::eventually("queued", [&] { return queue_of(prefix, "r").size() == 2; },
                                        test::long_enough());
        net.set(fault::direction::to_client, {});
        co_await test::settle(1s); // the waiter reconnects (same session) and tries again
        CHECK(queue_of(prefix, "r").size() == 2);
        { const auto ok_ = co_await held->unlock(); CHECK(ok_); }
        { const bool came_ = co_await waiting.wait(); REQUIRE(came_); }
        auto& got = waiting.get();
        REQUIRE(got);
        CHECK(queue_of(prefix, "r").size() == 1);
        { const auto ok_ = co_await got->unlock(); CHECK(ok_); }
        CHECK(queue_of(prefix, "r").empty());
        co_await holder.close();
        co_await waiter.close();
    });
}

TEST_CASE("zookeeper: a blackholed holder is in doubt at once, the next waiter gets the lock only after the "
          "session expired",
          "[zookeeper][fault]")
{
    auto& server = test::shared_zookeeper();
    const auto prefix = test::fresh_zk_prefix("blackhole");
    fault::proxy net{server.port()};
    asio::io_context io;
    auto cfg = server.config_through(net.port(), prefix);
    cfg.request_timeout = 1s;
    zk::store holder{io, cfg}, other{io, server.config(prefix)};
    test::run(io, [&]() -> asio::awaitable<void> {
        dl::basic_distributed_mutex<zk::store> mh{holder, "r"};
        auto held = co_await mh.lock();
        REQUIRE(held);
        const auto session = holder.session_id();
        auto lost = test::start(co_await asio::this_coro::executor, held->lost());
        net.set(fault::direction::to_server, {.blackhole = true});
        { const bool came_ = co_await lost.wait(); REQUIRE(came_); }
        // Told while the server still keeps the node: the holder stops first.
        CHECK_FALSE(queue_of(prefix, "r").empty());
        CHECK_FALSE(held->valid());
        patient_mutex mo{other, "r", {}, dl::retry::exponential_backoff{.deadline = 20s}};
        auto next = co_await mo.lock();
        REQUIRE(next);
        CHECK(next->fence() > held->fence());
        net.set(fault::direction::to_server, {});
        // The holder's client makes a new session (the server says the old one expired).
        auto again = co_await holder.read("r");
        REQUIRE(again);
        (void)co_await test::eventually("new session",
                                        [&] { return holder.session_id() != 0 && holder.session_id() != session; },
                                        test::long_enough());
        CHECK(holder.sessions_made() == 2);
        { const auto ok_ = co_await next->unlock(); CHECK(ok_); }
        co_await holder.close();
        co_await other.close();
    });
}

TEST_CASE("zookeeper: a short disconnection resumes the session: waiters keep their place and their watch",
          "[zookeeper][fault]")
{
    auto& server = test::shared_zookeeper();
    const auto prefix = test::fresh_zk_prefix("resume");
    fault::proxy net{server.port()};
    asio::io_context io;
    zk::store holder{io, server.config(prefix)}, waiter{io, server.config_through(net.port(), prefix)};
    test::recorder rec;
    test::run(io, [&]() -> asio::awaitable<void> {
        dl::basic_distributed_mutex<zk::store> mh{holder, "r"};
        dl::basic_distributed_mutex<zk::store, dl::observe::callback, dl::retry::fixed> mw{
            waiter, "r", {}, rec.observer(), patient()};
        auto held = co_await mh.lock();
        REQUIRE(held);
        auto waiting = test::start(co_await asio::this_coro::executor, mw.lock());
        (void)co_await test::eventually("waiting", [&] { return !rec.of<dl::wait_event>().empty(); },
                                        test::long_enough());
        const auto session = waiter.session_id();
        const auto queued = queue_of(prefix, "r");
        REQUIRE(queued.size() == 2);
        net.reset_all(); // the waiter's connection is cut; it reconnects within the timeout
        co_await test::settle(300ms);
        // Released while the waiter may still be reconnecting: SetWatches after the
        // reconnect fires the deletion it missed.
        { const auto ok_ = co_await held->unlock(); CHECK(ok_); }
        { const bool came_ = co_await waiting.wait(); REQUIRE(came_); }
        auto& got = waiting.get();
        REQUIRE(got);
        CHECK(waiter.session_id() == session);
        CHECK(waiter.sessions_made() == 1);
        CHECK(queue_of(prefix, "r") == std::vector<std::string>{queued[1]});
        { const auto ok_ = co_await got->unlock(); CHECK(ok_); }
        co_await holder.close();
        co_await waiter.close();
    });
}

TEST_CASE("zookeeper: digest auth: nodes carry the creator's ACL; another user cannot lock under them",
          "[zookeeper]")
{
    auto& server = test::shared_zookeeper();
    const auto prefix = test::fresh_zk_prefix("auth");
    asio::io_context io;
    auto alice_cfg = server.config(prefix);
    alice_cfg.username = "alice";
    alice_cfg.password = "secret";
    auto mallory_cfg = alice_cfg;
    mallory_cfg.username = "mallory";
    zk::store alice{io, alice_cfg}, alice2{io, alice_cfg}, mallory{io, mallory_cfg};
    test::run(io, [&]() -> asio::awaitable<void> {
        dl::basic_distributed_mutex<zk::store> ma{alice, "r"}, ma2{alice2, "r"};
        auto held = co_await ma.lock();
        REQUIRE(held);
        dl::basic_distributed_mutex<zk::store, dl::retry::none> mm{mallory, "r"};
        dl::diagnostics diag;
        auto refused = co_await mm.lock(diag);
        REQUIRE_FALSE(refused);
        CHECK(refused.error() == dl::condition::denied);
        CHECK(diag.to_string().find("ACL") != std::string::npos);
        // Unauthenticated, the queue cannot even be read, nor the holder's node deleted.
        const auto parent = zk::detail::resource_node(prefix, "r");
        test::zk_client anyone{server.port()}, as_alice{server.port(), "alice:secret"};
        CHECK_FALSE(anyone.children(parent));
        const auto nodes = as_alice.children(parent);
        REQUIRE(nodes);
        REQUIRE(nodes->size() == 1);
        CHECK(anyone.remove(parent + "/" + nodes->front()) == -102);
        { const auto ok_ = co_await held->unlock(); CHECK(ok_); }
        // The same user from another session can.
        auto next = co_await ma2.lock();
        REQUIRE(next);
        { const auto ok_ = co_await next->unlock(); CHECK(ok_); }
        co_await alice.close();
        co_await alice2.close();
        co_await mallory.close();
    });
}

TEST_CASE("zookeeper: chroot: every node is under it", "[zookeeper]")
{
    auto& server = test::shared_zookeeper();
    const auto chroot = test::fresh_zk_prefix("chroot");
    asio::io_context io;
    auto cfg = server.config("/locks");
    cfg.chroot = chroot;
    zk::store s{io, cfg};
    test::run(io, [&]() -> asio::awaitable<void> {
        dl::basic_distributed_mutex<zk::store> m{s, "r"};
        auto held = co_await m.lock();
        REQUIRE(held);
        CHECK(queue_of(chroot + "/locks", "r").size() == 1);
        auto info = co_await s.read("r");
        REQUIRE(info);
        CHECK(info.value().held);
        CHECK(info.value().fence == held->fence());
        CHECK(info.value().owner == held->owner().to_hex().substr(0, 8));
        { const auto ok_ = co_await held->unlock(); CHECK(ok_); }
        co_await s.close();
    });
}

namespace {

// zookeeper-queue PORT PREFIX RESOURCE: prints "queued" once its node is in the queue
// (its lock() is waiting), "locked FENCE" when granted, then releases on a line of
// stdin and exits.
int queue_worker(const std::vector<std::string>& args)
{
    if (args.size() != 3)
        return 2;
    asio::io_context io;
    zk::config cfg;
    cfg.servers = {{"127.0.0.1", static_cast<std::uint16_t>(std::stoi(args[0]))}};
    cfg.prefix = args[1];
    cfg.session_timeout = 4s;
    zk::store store{io, cfg};
    int status = 1;
    asio::co_spawn(io, [&]() -> asio::awaitable<void> {
        test::recorder rec;
        dl::basic_distributed_mutex<zk::store, dl::observe::callback, dl::retry::exponential_backoff> m{
            store, args[2], {}, rec.observer(), dl::retry::exponential_backoff{.deadline = 60s}};
        auto waiting = test::start(co_await asio::this_coro::executor, m.lock());
        for (int step = 0; rec.of<dl::wait_event>().empty() && !waiting.ready() && step < 5000; ++step) {
            dl::timer t{co_await asio::this_coro::executor, 2ms};
            co_await t.async_wait(asio::use_awaitable);
        }
        std::printf("queued\n");
        std::fflush(stdout);
        // Longer than lock()'s deadline: this coroutine must not end (and destroy the
        // mutex) while lock() still runs, however slowly the waiters ahead are served.
        if (!co_await waiting.wait(std::chrono::seconds{90}))
            co_return;
        auto& l = waiting.get();
        if (!l)
            co_return;
        std::printf("locked %llu\n", static_cast<unsigned long long>(l->fence()));
        std::fflush(stdout);
        char line[16];
        if (!std::fgets(line, sizeof line, stdin)) // blocks this process only: nothing else runs here
            co_return;
        if (co_await l->unlock())
            status = 0;
        co_await store.close();
    }, asio::detached);
    io.run();
    return status;
}

[[maybe_unused]] const bool workers_registered = test::register_worker("zookeeper-queue", queue_worker);

} // namespace

TEST_CASE("zookeeper: waiters in separate processes are served in the order they queued", "[zookeeper][process]")
{
    REQUIRE(workers_registered);
        auto& server = test::shared_zookeeper();
    const auto prefix = test::fresh_zk_prefix("process-order");
    asio::io_context io;
    zk::store s{io, server.config(prefix)};
    constexpr int waiters = 4;
    std::vector<std::unique_ptr<test::child>> workers;
    test::run(io, [&]() -> asio::awaitable<void> {
        dl::basic_distributed_mutex<zk::store> m{s, "r"};
        auto held = co_await m.lock();
        REQUIRE(held);
        for (int i = 0; i < waiters; ++i) {
            workers.push_back(std::make_unique<test::child>(std::vector<std::string>{
                test::self_path(), "--worker", "zookeeper-queue", std::to_string(server.port()), prefix, "r"}));
            // Each is in the queue before the next starts. Waited for without blocking
            // this thread: the holder's session (2 s) keeps pinging however long the
            // workers take to start.
            const auto queued = co_await workers.back()->next_line(std::chrono::seconds{30});
            REQUIRE(queued == std::optional<std::string>{"queued"});
        }
        CHECK(queue_of(prefix, "r").size() == waiters + 1);
        { const auto ok_ = co_await held->unlock(); CHECK(ok_); }
        dl::fence_token last = held->fence();
        for (int i = 0; i < waiters; ++i) {
            const auto line = co_await workers[i]->next_line(std::chrono::seconds{30});
            REQUIRE(line);
            REQUIRE(line->starts_with("locked "));
            const dl::fence_token fence = std::stoull(line->substr(7));
            CHECK(fence > last);
            last = fence;
            // The ones behind it still wait.
            for (int k = i + 1; k < waiters; ++k)
                CHECK_FALSE(workers[k]->read_line(std::chrono::milliseconds{20}));
            workers[i]->write_line("release");
            CHECK(workers[i]->wait(std::chrono::seconds{30}) == std::optional<int>{0});
        }
        CHECK(queue_of(prefix, "r").empty());
        co_await s.close();
    }, std::chrono::seconds{180}); // four sanitized processes started and served one after another
}

TEST_CASE("zookeeper: a store whose event loop stood still past its session timeout closes without leaving its "
          "keeper behind",
          "[zookeeper][lifetime]")
{
    // The sessions expire on the server while nothing runs; then the stores close on a
    // loaded machine (two threads spinning, bounded by the close), where the keeper's
    // late ping was still suspended when close() returned, and the io_context's
    // shutdown left it and the engine holding each other (LeakSanitizer, ./dev test).
    auto& server = test::shared_zookeeper();
    const auto prefix = test::fresh_zk_prefix("still");
    for (int round = 0; round < 3; ++round) {
        asio::io_context io;
        std::array<std::unique_ptr<zk::store>, 3> clients;
        std::vector<std::unique_ptr<fault::proxy>> nets;
        for (auto& c : clients) {
            nets.push_back(std::make_unique<fault::proxy>(server.port()));
            c = std::make_unique<zk::store>(io, server.config_through(nets.back()->port(), prefix));
        }
        test::conformance::warm_up(io, clients);
        std::this_thread::sleep_for(std::chrono::milliseconds{2500 + 300 * round}); // nothing runs
        std::atomic<bool> closed{false};
        std::vector<std::thread> load;
        for (int t = 0; t < 2; ++t)
            load.emplace_back([&closed] {
                const auto until = std::chrono::steady_clock::now() + std::chrono::seconds{30};
                while (!closed.load(std::memory_order_relaxed) && std::chrono::steady_clock::now() < until) {
                }
            });
        test::conformance::close_all(io, clients);
        closed = true;
        for (auto& t : load)
            t.join();
    }
}
