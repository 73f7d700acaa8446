// etcd with its own members: auth (a role limited to the lock prefix, wrong
// passwords, tokens that expire), and a three-member cluster that loses its leader
// while a lock is held and waiters queue, and loses the member a store talks to.
#include "conformance/suite.hpp"
#include "etcd/cluster.hpp"

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace std::chrono_literals;
namespace dl = distlock;
namespace etcd = distlock::etcd;
using json = nlohmann::json;
using patient_mutex = dl::basic_distributed_mutex<etcd::store, dl::retry::exponential_backoff>;

std::string b64(std::string_view s) { return dl::detail::base64(s); }

bool answered(const json& j) { return j.is_object() && j.contains("header") && !j.contains("error"); }

std::size_t queued(const test::etcd_cluster& c, const std::string& prefix, std::string_view resource)
{
    const auto q = etcd::detail::queue_prefix(prefix, resource);
    for (std::size_t m = 0; m < c.size(); ++m) {
        if (!c.running(m))
            continue;
        const auto r = etcd::detail::read_range(
            c.call("kv/range", etcd::detail::range_request(q, etcd::detail::range_end(q)), m));
        if (r)
            return r->kvs.size();
    }
    return 0;
}

} // namespace

TEST_CASE("etcd auth: a user limited to the lock prefix locks; wrong passwords and foreign keys are clear errors",
          "[etcd][auth]")
{
    // Tokens expire after 2 s idle here (300 s by default), so renewal is exercised.
    test::etcd_cluster server{1, {"--auth-token-ttl", "2"}};
    const std::string prefix = "locks/";
    const auto end = etcd::detail::range_end(prefix);
    for (const auto& [path, body] : std::vector<std::pair<std::string, json>>{
             {"auth/user/add", {{"name", "root"}, {"password", "rootpw"}}},
             {"auth/role/add", {{"name", "root"}}},
             {"auth/user/grant", {{"user", "root"}, {"role", "root"}}},
             {"auth/role/add", {{"name", "locker"}}},
             {"auth/role/grant",
              {{"name", "locker"}, {"perm", {{"key", b64(prefix)}, {"range_end", b64(end)}, {"permType", "READWRITE"}}}}},
             {"auth/user/add", {{"name", "locker"}, {"password", "s3cret"}}},
             {"auth/user/grant", {{"user", "locker"}, {"role", "locker"}}},
             {"auth/enable", json::object()}})
        REQUIRE(answered(server.call(path, body)));

    asio::io_context io;
    auto good = server.config(prefix);
    good.username = "locker";
    good.password = "s3cret";
    auto wrong = good;
    wrong.password = "guess";
    auto nobody = server.config(prefix);
    etcd::store a{io, good}, bad{io, wrong}, anonymous{io, nobody};
    test::run(io, [&]() -> asio::awaitable<void> {
        dl::basic_distributed_mutex<etcd::store> m{a, "seat:1"};
        dl::diagnostics diag;
        auto l = co_await m.lock(diag);
        INFO(diag.to_string());
        REQUIRE(l);
        { const auto ok_ = co_await a.fenced_put(prefix + "data/seat:1", "taken", *l); CHECK(ok_); }
        auto outside = co_await a.fenced_put("elsewhere", "x", *l);
        REQUIRE_FALSE(outside);
        CHECK(outside.error() == dl::condition::denied);
        CHECK(outside.error() == etcd::errc::permission_denied);
        // The token expires while the lock is held; the keepalives and the release
        // authenticate again.
        co_await test::settle(3500ms);
        CHECK(l->valid());
        { const auto ok_ = co_await l->unlock(); CHECK(ok_); }
        auto again = co_await m.lock();
        REQUIRE(again);
        CHECK(again->fence() > l->fence());
        { const auto ok_ = co_await again->unlock(); CHECK(ok_); }

        for (auto* s : {&bad, &anonymous}) {
            dl::basic_distributed_mutex<etcd::store, dl::retry::none> refused{*s, "seat:1"};
            dl::diagnostics words;
            auto r = co_await refused.lock(words);
            REQUIRE_FALSE(r);
            CHECK(r.error() == dl::errc::auth_failed);
            CHECK(r.error() == dl::condition::denied);
            CHECK_FALSE(words.server_message().empty());
        }
        co_await a.close();
        co_await bad.close();
        co_await anonymous.close();
    });
    CHECK(queued(server, prefix, "seat:1") == 0);
}

namespace {

test::etcd_cluster& three()
{
    static test::etcd_cluster cluster{3};
    return cluster;
}

} // namespace

TEST_CASE("etcd cluster: the leader killed while a lock is held and waiters queue: the holder keeps it or is told, "
          "waiters keep their order",
          "[etcd][cluster]")
{
    auto& cluster = three();
    const auto prefix = test::fresh_prefix("leader");
    asio::io_context io;
    auto cfg = cluster.config(prefix);
    cfg.session_ttl = 4s;
    etcd::store holder{io, cfg}, first{io, cfg}, second{io, cfg};
    std::optional<std::size_t> killed;
    test::run(io, [&]() -> asio::awaitable<void> {
        patient_mutex mh{holder, "r", {}, dl::retry::exponential_backoff{.deadline = 30s}};
        patient_mutex m1{first, "r", {}, dl::retry::exponential_backoff{.deadline = 60s}};
        patient_mutex m2{second, "r", {}, dl::retry::exponential_backoff{.deadline = 60s}};
        auto held = co_await mh.lock();
        REQUIRE(held);
        auto lost = test::start(co_await asio::this_coro::executor, held->lost());
        auto w1 = test::start(co_await asio::this_coro::executor, m1.lock());
        (void)co_await test::eventually("first queued", [&] { return queued(cluster, prefix, "r") == 2; },
                                        test::conformance::long_enough());
        auto w2 = test::start(co_await asio::this_coro::executor, m2.lock());
        (void)co_await test::eventually("second queued", [&] { return queued(cluster, prefix, "r") == 3; },
                                        test::conformance::long_enough());
        killed = cluster.leader();
        REQUIRE(killed);
        cluster.kill(*killed);
        REQUIRE(cluster.wait_writable());
        co_await test::settle(1500ms); // keepalives go through the new leader
        CHECK_FALSE(w1.ready());
        CHECK_FALSE(w2.ready());
        // Either the holder still holds (its release succeeds) or it was told.
        if (held->valid()) {
            auto released = co_await held->unlock();
            CHECK((released || lost.ready()));
        } else {
            CHECK(lost.ready());
        }
        { const bool came_ = co_await w1.wait(std::chrono::seconds{30}); REQUIRE(came_); }
        auto& one = w1.get();
        REQUIRE(one);
        CHECK(one->fence() > held->fence());
        CHECK_FALSE(w2.ready()); // served after the first waiter
        { const auto ok_ = co_await one->unlock(); CHECK(ok_); }
        { const bool came_ = co_await w2.wait(std::chrono::seconds{30}); REQUIRE(came_); }
        auto& two = w2.get();
        REQUIRE(two);
        CHECK(two->fence() > one->fence());
        { const auto ok_ = co_await two->unlock(); CHECK(ok_); }
        co_await holder.close();
        co_await first.close();
        co_await second.close();
    });
    if (killed)
        cluster.restart(*killed);
    CHECK(cluster.wait_writable());
}

TEST_CASE("etcd cluster: a store whose member stops answering goes on with the next one", "[etcd][cluster]")
{
    auto& cluster = three();
    const auto prefix = test::fresh_prefix("failover");
    asio::io_context io;
    etcd::store s{io, cluster.config(prefix)};
    std::optional<std::size_t> stopped;
    test::run(io, [&]() -> asio::awaitable<void> {
        patient_mutex m{s, "r", {}, dl::retry::exponential_backoff{.deadline = 30s}};
        auto l = co_await m.lock();
        REQUIRE(l);
        { const auto ok_ = co_await l->unlock(); CHECK(ok_); }
        stopped = s.member_in_use();
        cluster.kill(*stopped);
        REQUIRE(cluster.wait_writable());
        dl::diagnostics diag;
        auto again = co_await m.lock(diag);
        INFO(diag.to_string());
        REQUIRE(again);
        CHECK(s.member_in_use() != *stopped);
        CHECK(again->fence() > l->fence());
        { const auto ok_ = co_await again->unlock(); CHECK(ok_); }
        co_await s.close();
    });
    if (stopped)
        cluster.restart(*stopped);
    CHECK(cluster.wait_writable());
}

TEST_CASE("etcd: one store shared by coroutines on several threads", "[etcd][concurrency]")
{
    // Catch's assertions are not thread-safe: workers count, the main thread asserts.
    auto& server = test::shared_etcd();
    const auto prefix = test::fresh_prefix("threads");
    auto cfg = server.config(prefix);
    cfg.keepalive_every = 200ms; // keepalives (and their pushes to the leases) run among the locks
    asio::io_context io;
    etcd::store store{io, cfg};
    constexpr int workers = 8, rounds = 10;
    std::atomic<int> errors{0}, finished{0};
    const auto counter = prefix + "n";
    for (int w = 0; w < workers; ++w)
        asio::co_spawn(asio::make_strand(io), [&, w]() -> asio::awaitable<void> {
            patient_mutex m{store, w % 2 ? "odd" : "even", {}, dl::retry::exponential_backoff{.deadline = 60s}};
            patient_mutex shared{store, "shared", {}, dl::retry::exponential_backoff{.deadline = 60s}};
            for (int i = 0; i < rounds; ++i) {
                auto own = co_await m.lock();
                auto lease = co_await shared.lock();
                if (!own || !lease) {
                    ++errors;
                    continue;
                }
                // A watched lease: its listener is bound while the keepalive pushes.
                asio::co_spawn(co_await asio::this_coro::executor, own->lost(), asio::detached);
                auto got = co_await store.execute("kv/range", etcd::detail::range_request(counter));
                const auto r = got ? etcd::detail::read_range(got.value()) : std::nullopt;
                const long n = r && !r->kvs.empty() ? std::stol(r->kvs.front().value) : 0;
                if (!r || !co_await store.fenced_put(counter, std::to_string(n + 1), *lease))
                    ++errors;
                if (!co_await lease->unlock() || !co_await own->unlock())
                    ++errors;
            }
            if (++finished == workers)
                co_await store.close(); // lets the threads' run() return
        }, asio::detached);
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t)
        threads.emplace_back([&] { io.run_for(90s); });
    for (auto& t : threads)
        t.join();
    CHECK(errors == 0);
    CHECK(finished == workers);
    const auto r = etcd::detail::read_range(server.call("kv/range", etcd::detail::range_request(counter)));
    REQUIRE(r);
    REQUIRE(r->kvs.size() == 1);
    CHECK(std::stol(r->kvs.front().value) == workers * rounds);
    CHECK(store.keepalives_sent() > 0);
}
