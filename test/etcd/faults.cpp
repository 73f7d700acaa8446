// etcd with its own members: auth (a role limited to the lock prefix, wrong
// passwords, tokens that expire), and a three-member cluster that loses its leader
// while a lock is held and waiters queue, and loses the member a store talks to.
#include "etcd/etcd_support.hpp"

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace std::chrono_literals;
using namespace test::etcd_tests;

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
        { const auto ok_ = co_await a.fenced_put(prefix + "data/seat:1", *l, "taken"); CHECK(ok_); }
        auto outside = co_await a.fenced_put("elsewhere", *l, "x");
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
                                        test::long_enough());
        auto w2 = test::start(co_await asio::this_coro::executor, m2.lock());
        (void)co_await test::eventually("second queued", [&] { return queued(cluster, prefix, "r") == 3; },
                                        test::long_enough());
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

TEST_CASE("etcd: TLS with the certificate verified, watches included; an untrusted certificate is refused",
          "[etcd][tls]")
{
    test::temp_dir certs;
    const auto key = (certs.path() / "key.pem").string(), cert = (certs.path() / "cert.pem").string();
    const auto make = "openssl req -x509 -newkey rsa:2048 -nodes -keyout " + key + " -out " + cert +
                      " -days 1 -subj /CN=127.0.0.1 -addext subjectAltName=IP:127.0.0.1 2>/dev/null";
    REQUIRE(std::system(make.c_str()) == 0);
    test::etcd_cluster server{1, {}, test::tls_files{cert, key}};
    const auto prefix = test::fresh_prefix("tls");
    auto cfg = server.config(prefix);
    cfg.members = {{"127.0.0.1", server.tls_port()}};
    cfg.tls = true;
    cfg.tls_ca_file = cert;
    auto untrusting = cfg;
    untrusting.tls_ca_file.clear(); // the system's CAs do not know the test's certificate
    auto plain = cfg;
    plain.tls = false; // HTTP to the HTTPS port
    asio::io_context io;
    etcd::store a{io, cfg}, b{io, cfg}, refused{io, untrusting}, confused{io, plain};
    test::recorder rec;
    test::run(io, [&]() -> asio::awaitable<void> {
        dl::basic_distributed_mutex<etcd::store> ma{a, "r"};
        dl::basic_distributed_mutex<etcd::store, dl::observe::callback, dl::retry::fixed> mb{
            b, "r", {}, rec.observer(), patient()};
        dl::diagnostics diag;
        auto first = co_await ma.lock(diag);
        INFO(diag.to_string());
        REQUIRE(first);
        auto waiting = test::start(co_await asio::this_coro::executor, mb.lock());
        (void)co_await test::eventually("waiting", [&] { return !rec.of<dl::wait_event>().empty(); },
                                        test::long_enough());
        co_await test::settle(100ms);
        { const auto ok_ = co_await first->unlock(); CHECK(ok_); }
        { const bool came_ = co_await waiting.wait(); REQUIRE(came_); }
        auto& second = waiting.get();
        REQUIRE(second);
        REQUIRE_FALSE(rec.of<dl::wake_event>().empty());
        CHECK(rec.of<dl::wake_event>().back().notified); // the watch stream ran over TLS
        { const auto ok_ = co_await second->unlock(); CHECK(ok_); }

        dl::basic_distributed_mutex<etcd::store, dl::retry::none> mr{refused, "r"};
        dl::diagnostics words;
        auto r = co_await mr.lock(words);
        REQUIRE_FALSE(r);
        CHECK(r.error() == dl::errc::auth_failed);
        CHECK(words.to_string().find("TLS") != std::string::npos);
        dl::basic_distributed_mutex<etcd::store, dl::retry::none> mc{confused, "r"};
        auto c = co_await mc.lock();
        REQUIRE_FALSE(c);
        CHECK((c.error() == dl::condition::maybe_applied || c.error() == dl::condition::not_applied));
        co_await a.close();
        co_await b.close();
        co_await refused.close();
        co_await confused.close();
    });
}
