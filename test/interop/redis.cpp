// test/interop/redis.cpp: distlock under redis::dialect::plain and node-redlock
// (5.0.0-beta.2 on ioredis, the reference Redlock client) on one resource: one
// server, a Redlock quorum of three servers, and a Redis Cluster. They exclude
// each other both ways, a waiter of either wakes once the other lets go, a killed
// node-redlock holder's lock ends with its TTL, and distlock's fences keep growing
// across node-redlock holders. Redlock has no queue, so there is no fairness case.
// node-redlock runs as test/interop/redis/redlock_lock.mjs, one line per event.
#include "eventually.hpp"
#include "pending.hpp"
#include "process.hpp"
#include "redis/redis_support.hpp"
#include "redis_cluster.hpp"

#include <array>
#include <csignal>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

namespace {

using namespace std::chrono_literals;
namespace dl = distlock;

#ifdef DISTLOCK_REDLOCK_DIR
constexpr const char* redlock_dir = DISTLOCK_REDLOCK_DIR;
#else
constexpr const char* redlock_dir = "";
#endif

// Where redlock_lock.mjs is: beside this file.
std::string redlock_script()
{
    return (std::filesystem::path{__FILE__}.parent_path() / "redis" / "redlock_lock.mjs").string();
}

bool redlock_installed()
{
    return *redlock_dir && std::filesystem::exists(std::filesystem::path{redlock_dir} / "node_modules" / "redlock") &&
           std::system("node --version > /dev/null 2>&1") == 0;
}

dl::redis::config plain(dl::redis::config c)
{
    c.dialect = dl::redis::dialect::plain;
    return c;
}

// node-redlock's retry step in these tests (no jitter).
constexpr auto peer_retry = 100ms;

// node-redlock on `ports` (one Redlock node each, or a cluster's seeds), taking
// `resource` for `ttl` when told.
class redlock_peer {
public:
    redlock_peer(const std::vector<std::uint16_t>& ports, const std::string& resource, std::chrono::milliseconds ttl,
                 bool cluster = false)
        : proc_{argv(ports, resource, ttl, cluster)}
    {}

    // Waits for "ready": node has started and connected.
    asio::awaitable<void> started()
    {
        const auto line = co_await proc_.next_line(20s);
        REQUIRE(line);
        REQUIRE(*line == "ready");
    }

    // Sends one command and returns its one answer line.
    asio::awaitable<std::string> ask(const std::string& command, std::chrono::milliseconds limit = 10s)
    {
        proc_.write_line(command);
        const auto line = co_await proc_.next_line(limit);
        REQUIRE(line);
        co_return *line;
    }

    void kill() { proc_.kill(SIGKILL); }
    bool running() const { return proc_.running(); }

private:
    static std::vector<std::string> argv(const std::vector<std::uint16_t>& ports, const std::string& resource,
                                         std::chrono::milliseconds ttl, bool cluster)
    {
        std::string list;
        for (const auto p : ports)
            list += (list.empty() ? "" : ",") + std::to_string(p);
        std::vector<std::string> out{"node",   redlock_script(),        redlock_dir,
                                     list,     resource,                std::to_string(ttl.count()),
                                     std::to_string(peer_retry.count())};
        if (cluster)
            out.emplace_back("cluster");
        return out;
    }

    test::child proc_;
};

// One Redis server; distlock locks it as one store under the plain layout.
struct one_server {
    using backend = dl::redis::store;
    test::redis_server server;
    asio::io_context io;
    dl::redis::store store{io, plain(server.config())};

    backend& distlock() { return store; }
    std::vector<std::uint16_t> ports() const { return {server.port()}; }
    // The lock's value on the server (nullopt: no lock).
    std::optional<std::string> value(const std::string& resource) { return test::peek(io, server.config(), resource); }
};

// Three servers: node-redlock's Redlock over all three, and distlock's quorum of one
// store per server, each under the plain layout.
struct three_servers {
    using backend = dl::quorum<dl::redis::store>;
    std::array<test::redis_server, 3> servers;
    asio::io_context io;
    std::array<std::unique_ptr<dl::redis::store>, 3> nodes{std::make_unique<dl::redis::store>(io, plain(servers[0].config())),
                                                           std::make_unique<dl::redis::store>(io, plain(servers[1].config())),
                                                           std::make_unique<dl::redis::store>(io, plain(servers[2].config()))};
    backend quorum{*nodes[0], *nodes[1], *nodes[2]};

    backend& distlock() { return quorum; }
    std::vector<std::uint16_t> ports() const { return {servers[0].port(), servers[1].port(), servers[2].port()}; }
    // The value on the first server (every node of a grant holds the same).
    std::optional<std::string> value(const std::string& resource)
    {
        return test::peek(io, servers[0].config(), resource);
    }
};

template <class F>
using waiting_mutex = dl::basic_distributed_mutex<typename F::backend, dl::retry::fixed>;

// A distlock waiter's retry step: it polls a foreign holder at this pace, as no
// release message comes from node-redlock.
constexpr auto distlock_retry = 300ms;

template <class F>
waiting_mutex<F> mutex_on(F& f, const std::string& resource, dl::duration ttl = 10s)
{
    return waiting_mutex<F>{f.distlock(), resource, {.ttl = ttl},
                            dl::retry::fixed{.delay = distlock_retry, .deadline = 8s}};
}

#define DISTLOCK_NEEDS_REDLOCK()                                                                                     \
    if (!redlock_installed()) {                                                                                      \
        WARN("node-redlock is not installed (DISTLOCK_REDLOCK_DIR) or node is missing: skipped");                    \
        return;                                                                                                      \
    }

} // namespace

TEMPLATE_TEST_CASE("redis interop: node-redlock holds, distlock is refused, then wakes within one retry step",
                   "[interop][redis]", one_server, three_servers)
{
    DISTLOCK_NEEDS_REDLOCK();
    TestType f;
    const std::string resource = "interop:foreign-holds";
    redlock_peer peer{f.ports(), resource, 10000ms};
    auto m = mutex_on(f, resource);
    test::run(f.io, [&]() -> asio::awaitable<void> {
        co_await peer.started();
        { const auto said_ = co_await peer.ask("acquire 1000"); CHECK(said_ == "held"); }
        const auto token = co_await peer.ask("value");
        CHECK(f.value(resource) == token); // node-redlock's own key and value

        auto refused = co_await m.try_lock();
        REQUIRE_FALSE(refused);
        CHECK(refused.error() == dl::condition::contended);

        // A lock() waits (node-redlock's lock has 10 s left), then takes it once
        // node-redlock released it: no message comes, its next try finds it free.
        auto waiting = test::start(co_await asio::this_coro::executor, m.lock());
        co_await test::settle(2 * distlock_retry);
        CHECK_FALSE(waiting.ready());
        { const auto said_ = co_await peer.ask("release"); CHECK(said_ == "released"); }
        const auto released = std::chrono::steady_clock::now();
        { const bool came_ = co_await waiting.wait(5000ms); REQUIRE(came_); }
        const auto after = std::chrono::steady_clock::now() - released;
        auto& l = waiting.get();
        REQUIRE(l);
        // One retry step, and time for the try itself on a loaded machine.
        CHECK(after < distlock_retry + 700ms);
        CHECK(f.value(resource) == l->owner().to_hex());
        { const auto ok_ = co_await l->unlock(); CHECK(ok_); }
        CHECK_FALSE(f.value(resource));
    });
}

TEMPLATE_TEST_CASE("redis interop: distlock holds, node-redlock cannot take it until unlock()", "[interop][redis]",
                   one_server, three_servers)
{
    DISTLOCK_NEEDS_REDLOCK();
    TestType f;
    const std::string resource = "interop:distlock-holds";
    redlock_peer peer{f.ports(), resource, 10000ms};
    auto m = mutex_on(f, resource);
    test::run(f.io, [&]() -> asio::awaitable<void> {
        co_await peer.started();
        auto l = co_await m.lock();
        REQUIRE(l);
        // node-redlock's key is distlock's lock key, its value the owner token.
        CHECK(f.value(resource) == l->owner().to_hex());
        { const auto said_ = co_await peer.ask("acquire 400"); CHECK(said_ == "timeout"); }
        // A node-redlock release of a lock it does not hold leaves distlock's.
        { const auto said_ = co_await peer.ask("release"); CHECK(said_ == "not-released"); }
        CHECK(f.value(resource) == l->owner().to_hex());
        CHECK(l->valid());
        // Waiting (one try per 100 ms), it takes the lock once distlock let go.
        auto waiting = test::start(co_await asio::this_coro::executor, peer.ask("acquire 5000"));
        co_await test::settle(250ms);
        CHECK_FALSE(waiting.ready());
        { const auto ok_ = co_await l->unlock(); CHECK(ok_); }
        { const bool came_ = co_await waiting.wait(5000ms); REQUIRE(came_); }
        CHECK(waiting.get() == "held");
        { const auto said_ = co_await peer.ask("release"); CHECK(said_ == "released"); }
    });
}

TEMPLATE_TEST_CASE("redis interop: a killed node-redlock holder's lock ends with its TTL", "[interop][redis]",
                   one_server, three_servers)
{
    DISTLOCK_NEEDS_REDLOCK();
    TestType f;
    const std::string resource = "interop:killed";
    constexpr auto ttl = 1500ms;
    redlock_peer peer{f.ports(), resource, ttl};
    auto m = mutex_on(f, resource);
    test::run(f.io, [&]() -> asio::awaitable<void> {
        co_await peer.started();
        { const auto said_ = co_await peer.ask("acquire 1000"); CHECK(said_ == "held"); }
        const auto taken = std::chrono::steady_clock::now();
        peer.kill();
        auto refused = co_await m.try_lock();
        REQUIRE_FALSE(refused);
        CHECK(refused.error() == dl::condition::contended);
        auto l = co_await m.lock();
        REQUIRE(l);
        const auto after = std::chrono::steady_clock::now() - taken;
        // Not before node-redlock's TTL (counted from before its reply), and soon
        // after it: the waiter looks again when the lock's PTTL said it ends.
        CHECK(after >= ttl - 300ms);
        CHECK(after < ttl + distlock_retry + 700ms);
        { const auto ok_ = co_await l->unlock(); CHECK(ok_); }
    });
}

TEMPLATE_TEST_CASE("redis interop: fences keep growing across a node-redlock holder", "[interop][redis]", one_server,
                   three_servers)
{
    DISTLOCK_NEEDS_REDLOCK();
    TestType f;
    const std::string resource = "interop:fences";
    redlock_peer peer{f.ports(), resource, 10000ms};
    auto m = mutex_on(f, resource);
    test::run(f.io, [&]() -> asio::awaitable<void> {
        co_await peer.started();
        auto first = co_await m.lock();
        REQUIRE(first);
        const auto f1 = first->fence();
        { const auto ok_ = co_await first->unlock(); CHECK(ok_); }
        { const auto said_ = co_await peer.ask("acquire 1000"); CHECK(said_ == "held"); }
        // A waiter behind node-redlock, then node-redlock again between two grants.
        auto waiting = test::start(co_await asio::this_coro::executor, m.lock());
        co_await test::settle(distlock_retry);
        { const auto said_ = co_await peer.ask("release"); CHECK(said_ == "released"); }
        { const bool came_ = co_await waiting.wait(5000ms); REQUIRE(came_); }
        auto& second = waiting.get();
        REQUIRE(second);
        CHECK(second->fence() > f1);
        const auto f2 = second->fence();
        { const auto ok_ = co_await second->unlock(); CHECK(ok_); }
        { const auto said_ = co_await peer.ask("acquire 1000"); CHECK(said_ == "held"); }
        { const auto said_ = co_await peer.ask("release"); CHECK(said_ == "released"); }
        auto third = co_await m.lock();
        REQUIRE(third);
        CHECK(third->fence() > f2);
        { const auto ok_ = co_await third->unlock(); CHECK(ok_); }
    });
}

TEST_CASE("redis interop: node-redlock and distlock exclude each other on a Redis Cluster", "[interop][redis]")
{
    DISTLOCK_NEEDS_REDLOCK();
    test::redis_cluster cluster{3, 0};
    asio::io_context io;
    dl::redis::store store{io, plain(cluster.config())};
    std::vector<std::uint16_t> seeds;
    for (const auto& n : cluster.config().cluster_nodes)
        seeds.push_back(n.port);
    // An id with a hash tag of its own, and one without: distlock's keys beside the
    // lock land in its slot either way.
    for (const std::string resource : {"{order:7}:payment", "interop:cluster"}) {
        redlock_peer peer{seeds, resource, 10000ms, true};
        dl::basic_distributed_mutex<dl::redis::store, dl::retry::fixed> m{
            store, resource, {.ttl = 10s}, dl::retry::fixed{.delay = distlock_retry, .deadline = 8s}};
        test::run(io, [&]() -> asio::awaitable<void> {
            co_await peer.started();
            { const auto said_ = co_await peer.ask("acquire 1000"); CHECK(said_ == "held"); }
            auto refused = co_await m.try_lock();
            REQUIRE_FALSE(refused);
            CHECK(refused.error() == dl::condition::contended);
            auto waiting = test::start(co_await asio::this_coro::executor, m.lock());
            co_await test::settle(distlock_retry);
            { const auto said_ = co_await peer.ask("release"); CHECK(said_ == "released"); }
            { const bool came_ = co_await waiting.wait(5000ms); REQUIRE(came_); }
            auto& l = waiting.get();
            REQUIRE(l);
            { const auto said_ = co_await peer.ask("acquire 300"); CHECK(said_ == "timeout"); }
            { const auto ok_ = co_await l->unlock(); CHECK(ok_); }
            { const auto said_ = co_await peer.ask("acquire 2000"); CHECK(said_ == "held"); }
            { const auto said_ = co_await peer.ask("release"); CHECK(said_ == "released"); }
        });
    }
}
