// The store conformance suite on Redis: one server with three clients (plain, with a
// pool of connections per client, fair, and under dialect::plain: the Redlock
// recipe's keys), a Redlock quorum of three servers with three clients each made of
// one store per server, and a Redis Cluster of three primaries (one per test run).
// The clients reach each server through a fault proxy, which loses replies on
// demand. The holder and counting processes of the suite run against the plain
// one-server fixture and the dialect::plain one.
#include "conformance/suite.hpp"
#include "fault/proxy.hpp"
#include "redis/redis_support.hpp"
#include "redis_cluster.hpp"
#include "workers.hpp"

#include <algorithm>
#include <array>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <vector>

namespace {

using namespace std::chrono_literals;
namespace dl = distlock;

// Whether `server` keeps a key of `resource` alone: its lock, a fair queue's keys,
// its shared holders and writer's intent, or a lock-delay's mark (its fence key is
// its hash slot's, shared by every resource of the slot).
bool remembers(const test::redis_server& server, std::string_view resource)
{
    asio::io_context io;
    dl::redis::store probe{io, server.config()};
    for (const auto& key : {probe.lock_key(resource), probe.queue_key(resource), probe.offers_key(resource),
                            probe.sharers_key(resource), probe.intent_key(resource), probe.delay_key(resource)})
        if (test::exists(io, server.config(), key))
            return true;
    return false;
}

// Forgets `l` on the store of `probe` as if its TTL had run out: deletes its
// resource's lock key, and its owner's entry among the shared holders (a reader's or
// a permit's lease).
asio::awaitable<void> forget(dl::redis::store& probe, const dl::lease& l)
{
    auto lock = co_await probe.execute("DEL", probe.lock_key(l.resource()));
    REQUIRE(lock);
    auto shared = co_await probe.execute("HDEL", probe.sharers_key(l.resource()), l.owner().to_hex());
    REQUIRE(shared);
}

void drop(const test::redis_server& server, const dl::lease& l)
{
    asio::io_context io;
    dl::redis::store probe{io, server.config()};
    test::run(io, [&]() -> asio::awaitable<void> { co_await forget(probe, l); });
}

// How many wait in a resource's fair queue (acquire::fair), asked on a connection of
// its own.
std::size_t in_line(const dl::redis::config& cfg, std::string_view resource)
{
    asio::io_context io;
    dl::redis::store probe{io, cfg};
    std::size_t n = 0;
    test::run(io, [&]() -> asio::awaitable<void> {
        auto r = co_await probe.execute("ZCARD", probe.queue_key(resource));
        REQUIRE(r);
        n = static_cast<std::size_t>(r.value().integer);
    });
    return n;
}

// A server's address through `net`.
dl::redis::config via(const test::redis_server& server, const fault::proxy& net)
{
    auto c = server.config();
    c.port = net.port();
    c.queue_ttl = 900ms;
    return c;
}

// The next reply from `net`'s server is dropped and its connection closed: the
// request was applied, its client cannot know.
void lose_next_reply(fault::proxy& net)
{
    net.set(fault::direction::to_client, {.close_after = 0});
}

// One server and three clients: what the one-server fixtures share.
struct redis_one_server {
    using backend = dl::redis::store;
    static constexpr bool notifies = true;
    static constexpr bool quorum = false;
    test::redis_server server;
    fault::proxy net{server.port()};
    asio::io_context io;
    std::array<std::unique_ptr<dl::redis::store>, 3> clients{std::make_unique<dl::redis::store>(io, via(server, net)),
                                                             std::make_unique<dl::redis::store>(io, via(server, net)),
                                                             std::make_unique<dl::redis::store>(io, via(server, net))};

    // Connects each store and loads its scripts: the next request of a test is its lock
    // script itself.
    redis_one_server() { test::conformance::warm_up(io, clients); }

    backend& client(std::size_t i) { return *clients[i]; }
    bool held(std::string_view resource) const { return test::holds(server, resource); }
    bool remembers(std::string_view resource) const { return ::remembers(server, resource); }
    void end_lock(const dl::lease& l) { drop(server, l); }
    // Only the client asking is doing I/O when a test loses a reply.
    void lose_next_reply(std::size_t) { ::lose_next_reply(net); }
    void hold_replies(bool on) { net.set(fault::direction::to_client, {.blackhole = on}); }
    asio::awaitable<void> close(std::size_t i) { return clients[i]->close(); }
    static dl::duration longest_validity(const dl::lock_options& o) { return o.ttl - o.drift(); }
    // A free resource's read() says its slot's last token: the last grant's.
    static constexpr bool keeps_fence = true;
    // Down and back empty (no persistence): the next token comes from the server's clock.
    void stop_server() { server.stop(); }
    void start_server() { server.start(); }
};

// The plain one-server fixture, with the suite's hooks that start processes or
// check settings.
struct redis_single : redis_one_server {
    static constexpr const char* name = "redis_single";

    // A holder process's lease (renewed) outlives it by its TTL.
    static constexpr test::conformance::after_kill killed_holder_lock{.held_for = 300ms};
    std::unique_ptr<test::child> holder_process(const std::string& resource, const std::string& mode = "exclusive")
    {
        return std::make_unique<test::child>(std::vector<std::string>{
            test::self_path(), "--worker", "redis-hold", std::to_string(server.port()), resource, "1500", mode});
    }

    static constexpr int counter_rounds = 40;
    std::unique_ptr<test::child> counter_process(const std::filesystem::path& dir, int rounds, int processes)
    {
        std::vector<std::string> argv{test::self_path(), "--worker", "redis-count", std::to_string(server.port())};
        const auto more = test::conformance::counting{dir, rounds, processes}.args();
        argv.insert(argv.end(), more.begin(), more.end());
        return std::make_unique<test::child>(std::move(argv));
    }
    long counter_value(const std::filesystem::path& dir) const { return counter_value_on(server, dir); }
    static long counter_value_on(const test::redis_server& server, const std::filesystem::path&)
    {
        asio::io_context probe_io;
        dl::redis::store probe{probe_io, server.config()};
        long n = -1;
        test::run(probe_io, [&]() -> asio::awaitable<void> {
            auto value = co_await probe.fenced_read("conf:counter-value");
            REQUIRE(value);
            n = value.value() ? std::stol(*value.value()) : 0;
        });
        return n;
    }

    using settings = dl::redis::config;
    static settings settings_at(std::uint16_t port)
    {
        settings c;
        c.port = port;
        return c;
    }
    static std::vector<test::conformance::bad_setting<settings>> bad_settings();
    static constexpr bool settings_refused_at_construction = false; // its lock() is
};

// One server, each client with three command connections (config::connections):
// requests of one client take them in turn, so consecutive requests of one lock()
// or one lease go out on different connections.
struct redis_pooled : redis_one_server {
    static constexpr const char* name = "redis_pooled";
    static dl::redis::config pooled(const test::redis_server& server, const fault::proxy& net)
    {
        auto c = via(server, net);
        c.connections = 3;
        return c;
    }
    // Every connection of every client opened (a lock and its release use two of
    // three; a PING each takes the rest in turn), so that a lost reply is a test's.
    redis_pooled()
    {
        for (auto& c : clients) {
            c->disconnect();
            c = std::make_unique<dl::redis::store>(io, pooled(server, net));
        }
        test::conformance::warm_up(io, clients);
        test::run(io, [&]() -> asio::awaitable<void> {
            for (auto& c : clients)
                for (int i = 0; i < 3; ++i) {
                    const auto pong = co_await c->execute("PING");
                    REQUIRE(pong);
                }
        });
    }
};

// One server under dialect::plain: the Redlock recipe's lock key (the id itself,
// holding the owner alone), distlock's holder key and fence beside it. Exclusive
// locks only: the layout refuses shared grants and fair queues (`shares` below
// leaves the shared mutex's and the semaphore's behaviours out).
dl::redis::config plain(dl::redis::config c)
{
    c.dialect = dl::redis::dialect::plain;
    return c;
}

struct redis_plain : redis_one_server {
    static constexpr const char* name = "redis_plain";
    static constexpr bool shares = false;
    redis_plain()
    {
        for (auto& c : clients) {
            c->disconnect();
            c = std::make_unique<dl::redis::store>(io, plain(via(server, net)));
        }
        test::conformance::warm_up(io, clients);
    }
    bool held(std::string_view resource) const
    {
        asio::io_context io;
        return test::peek(io, server.config(), std::string{resource}).has_value();
    }
    // Its lock (the id's own key) or distlock's holder key beside it; the fence key
    // is its slot's.
    bool remembers(std::string_view resource) const
    {
        asio::io_context io;
        dl::redis::store probe{io, plain(server.config())};
        return test::exists(io, server.config(), std::string{resource}) ||
               test::exists(io, server.config(), probe.holder_key(resource)) ||
               test::exists(io, server.config(), probe.delay_key(resource));
    }
    void end_lock(const dl::lease& l)
    {
        asio::io_context io;
        dl::redis::store probe{io, plain(server.config())};
        test::run(io, [&]() -> asio::awaitable<void> {
            auto gone = co_await probe.execute("DEL", l.resource(), probe.holder_key(l.resource()));
            REQUIRE(gone);
        });
    }
    static constexpr test::conformance::after_kill killed_holder_lock{.held_for = 300ms};
    std::unique_ptr<test::child> holder_process(const std::string& resource, const std::string& mode = "exclusive")
    {
        return std::make_unique<test::child>(std::vector<std::string>{
            test::self_path(), "--worker", "redis-plain-hold", std::to_string(server.port()), resource, "1500", mode});
    }
    static constexpr int counter_rounds = 40;
    std::unique_ptr<test::child> counter_process(const std::filesystem::path& dir, int rounds, int processes)
    {
        std::vector<std::string> argv{test::self_path(), "--worker", "redis-plain-count", std::to_string(server.port())};
        const auto more = test::conformance::counting{dir, rounds, processes}.args();
        argv.insert(argv.end(), more.begin(), more.end());
        return std::make_unique<test::child>(std::move(argv));
    }
    long counter_value(const std::filesystem::path& dir) const
    {
        return redis_single::counter_value_on(server, dir);
    }
    using settings = dl::redis::config;
    static settings settings_at(std::uint16_t port) { return plain(redis_single::settings_at(port)); }
    // The one-server fixture's, and a layout that is neither of the two.
    static std::vector<test::conformance::bad_setting<settings>> bad_settings()
    {
        auto bad = redis_single::bad_settings();
        bad.push_back({"layout", [](settings& c) { c.dialect = static_cast<dl::redis::dialect>(2); }});
        return bad;
    }
    static constexpr bool settings_refused_at_construction = false;
};

// One server, every mutex through acquire::fair: the store's scripts keep the queue.
// A short queue TTL, so that a waiter that vanished holds up the line briefly.
struct redis_fair : redis_one_server {
    static constexpr const char* name = "redis_fair";
    using acquisition = dl::acquire::fair;

    // A client of its own (a session, in the suite's words) for the queue tests.
    std::unique_ptr<dl::redis::store> make_client() { return std::make_unique<dl::redis::store>(io, via(server, net)); }
    // The holder and the waiters in line, as a session store counts its entries.
    std::size_t waiters(std::string_view resource) const
    {
        return (held(resource) ? 1 : 0) + in_line(server.config(), resource);
    }
};

struct redis_quorum {
    static constexpr const char* name = "redis_quorum";
    using backend = dl::quorum<dl::redis::store>;
    static constexpr bool notifies = false;
    static constexpr bool quorum = true;
    std::array<test::redis_server, 3> servers;
    std::array<fault::proxy, 3> nets{fault::proxy{servers[0].port()}, fault::proxy{servers[1].port()},
                                     fault::proxy{servers[2].port()}};
    asio::io_context io;
    std::vector<std::unique_ptr<dl::redis::store>> stores; // client c's node n at 3c + n
    std::vector<std::unique_ptr<backend>> quorums;

    redis_quorum()
    {
        for (int c = 0; c < 3; ++c) {
            std::vector<dl::redis::store*> nodes;
            for (std::size_t n = 0; n < servers.size(); ++n) {
                stores.push_back(std::make_unique<dl::redis::store>(io, via(servers[n], nets[n])));
                nodes.push_back(stores.back().get());
            }
            quorums.push_back(std::make_unique<backend>(std::span<dl::redis::store* const>{nodes}));
        }
        test::conformance::warm_up(io, stores);
    }

    backend& client(std::size_t i) { return *quorums[i]; }
    bool held(std::string_view resource) const
    {
        for (const auto& s : servers)
            if (test::holds(s, resource))
                return true;
        return false;
    }
    bool remembers(std::string_view resource) const
    {
        return std::any_of(servers.begin(), servers.end(),
                           [&](const test::redis_server& s) { return ::remembers(s, resource); });
    }
    void end_lock(const dl::lease& l)
    {
        for (const auto& s : servers)
            drop(s, l);
    }
    // Every node's reply is lost: not one grant is known to the client.
    void lose_next_reply(std::size_t)
    {
        for (auto& net : nets)
            ::lose_next_reply(net);
    }
    void hold_replies(bool on)
    {
        for (auto& net : nets)
            net.set(fault::direction::to_client, {.blackhole = on});
    }
    asio::awaitable<void> close(std::size_t c)
    {
        for (std::size_t n = 0; n < servers.size(); ++n)
            co_await stores[3 * c + n]->close();
    }
    static dl::duration longest_validity(const dl::lock_options& o) { return o.ttl - o.drift(); }
};

// Three primaries and their replicas. The clients start from the proxies and map
// every address the cluster announces to its node's proxy (config::address_map), so
// all their traffic passes the proxies; the fixture's own probe talks to the nodes.
struct redis_cluster {
    static constexpr const char* name = "redis_cluster";
    using backend = dl::redis::store;
    static constexpr bool notifies = true;
    static constexpr bool quorum = false;
    // One cluster for every test case (creating one takes seconds): each test case
    // starts from empty primaries and reaches them through proxies of its own.
    test::redis_cluster& cluster = shared_cluster();
    std::vector<std::unique_ptr<fault::proxy>> nets;
    std::map<std::uint16_t, std::uint16_t> proxy_of; // node port -> its proxy's port
    asio::io_context io;
    std::array<std::unique_ptr<dl::redis::store>, 3> clients;
    dl::redis::config client_config; // through the proxies

    static test::redis_cluster& shared_cluster()
    {
        static test::redis_cluster shared{3, 0};
        return shared;
    }

    redis_cluster()
    {
        for (std::size_t i = 0; i < cluster.size(); ++i)
            REQUIRE(test::cli(cluster.node(i).port(), "flushall").find("OK") != std::string::npos);
        auto c = cluster.config();
        c.queue_ttl = 900ms;
        c.cluster_nodes.clear();
        for (std::size_t i = 0; i < cluster.size(); ++i) {
            const auto port = cluster.node(i).port();
            nets.push_back(std::make_unique<fault::proxy>(port));
            proxy_of[port] = nets.back()->port();
            c.cluster_nodes.push_back({"127.0.0.1", nets.back()->port()});
        }
        std::set<std::uint16_t> proxies;
        for (const auto& n : nets)
            proxies.insert(n->port());
        // Applied to what the cluster announces, once: never to a seed (a proxy here)
        // nor again to an address it already produced.
        c.address_map = [map = proxy_of, proxies](const dl::redis::node_address& a) {
            CHECK_FALSE(proxies.contains(a.port));
            const auto it = map.find(a.port);
            return it == map.end() ? a : dl::redis::node_address{a.host, it->second};
        };
        for (auto& client : clients)
            client = std::make_unique<dl::redis::store>(io, c);
        client_config = c;
        // Each client connects to every primary and loads its scripts there: the next
        // request of a test, whichever node it goes to, is its lock script itself.
        std::vector<std::string> spread; // one resource per primary
        std::vector<std::uint16_t> seen;
        for (int i = 0; seen.size() < 3 && i < 1000; ++i) {
            auto r = "conf:warm-up:" + std::to_string(i);
            const auto node = cluster.primary_of(clients[0]->lock_key(r));
            if (std::find(seen.begin(), seen.end(), node) == seen.end()) {
                seen.push_back(node);
                spread.push_back(std::move(r));
            }
        }
        test::run(io, [&]() -> asio::awaitable<void> {
            for (auto& client : clients)
                for (const auto& r : spread) {
                    dl::basic_distributed_mutex<backend, dl::retry::none> m{*client, r, {.ttl = 10s}};
                    dl::diagnostics diag;
                    auto l = co_await m.lock(diag);
                    INFO(diag.to_string());
                    REQUIRE(l);
                    const auto u = co_await l->unlock();
                    REQUIRE(u);
                }
        });
    }

    backend& client(std::size_t i) { return *clients[i]; }
    bool held(std::string_view resource) const
    {
        asio::io_context probe_io;
        dl::redis::store probe{probe_io, cluster.config()};
        return test::peek(probe_io, cluster.config(), probe.lock_key(resource)).has_value();
    }
    bool remembers(std::string_view resource) const
    {
        asio::io_context probe_io;
        dl::redis::store probe{probe_io, cluster.config()};
        for (const auto& key : {probe.lock_key(resource), probe.queue_key(resource), probe.offers_key(resource),
                                probe.sharers_key(resource), probe.intent_key(resource), probe.delay_key(resource)})
            if (test::exists(probe_io, cluster.config(), key))
                return true;
        return false;
    }
    void end_lock(const dl::lease& l)
    {
        asio::io_context probe_io;
        dl::redis::store probe{probe_io, cluster.config()};
        test::run(probe_io, [&]() -> asio::awaitable<void> { co_await forget(probe, l); });
    }
    // The reply lost is the one from the primary of the resource's slot.
    void lose_next_reply(std::size_t, std::string_view resource)
    {
        const auto node = cluster.primary_of(clients[0]->lock_key(resource));
        for (std::size_t i = 0; i < cluster.size(); ++i)
            if (cluster.node(i).port() == node)
                ::lose_next_reply(*nets[i]);
    }
    void hold_replies(bool on)
    {
        for (auto& net : nets)
            net->set(fault::direction::to_client, {.blackhole = on});
    }
    asio::awaitable<void> close(std::size_t i) { return clients[i]->close(); }
    static dl::duration longest_validity(const dl::lock_options& o) { return o.ttl - o.drift(); }
};

// The cluster, every mutex through acquire::fair (the queue lives in the resource's
// slot; releases wake the head by SPUBLISH).
struct redis_cluster_fair : redis_cluster {
    static constexpr const char* name = "redis_cluster_fair";
    using acquisition = dl::acquire::fair;

    std::unique_ptr<dl::redis::store> make_client() { return std::make_unique<dl::redis::store>(io, client_config); }
    std::size_t waiters(std::string_view resource) const
    {
        return (held(resource) ? 1 : 0) + in_line(cluster.config(), resource);
    }
};

// Timeouts out of range, and pools of command connections where they cannot hold.
std::vector<test::conformance::bad_setting<redis_single::settings>> redis_single::bad_settings()
{
    std::vector<test::conformance::bad_setting<settings>> bad;
    for (const auto d : {dl::duration::min(), dl::duration{-1}, dl::duration::zero(), dl::max_wait + dl::duration{1},
                         dl::duration::max(), -dl::max_wait}) {
        bad.push_back({"request_timeout", [d](settings& c) { c.request_timeout = d; }});
        bad.push_back({"connect_timeout", [d](settings& c) { c.connect_timeout = d; }});
        bad.push_back({"queue_ttl", [d](settings& c) { c.queue_ttl = d; }});
    }
    // A fair channel's linger may be zero (unsubscribe at once), not negative.
    for (const auto d : {dl::duration{-1}, dl::duration::min(), dl::max_wait + dl::duration{1}})
        bad.push_back({"listen_linger", [d](settings& c) { c.listen_linger = d; }});
    for (const std::size_t n : {std::size_t{0}, std::size_t{65}, std::numeric_limits<std::size_t>::max()})
        bad.push_back({"connections", [n](settings& c) { c.connections = n; }});
    // WAIT counts the writes of its own connection only.
    bad.push_back({"connections with wait_replicas", [](settings& c) {
        c.connections = 2;
        c.wait_replicas = 1;
    }});
    bad.push_back({"connections in a cluster", [](settings& c) {
        c.connections = 2;
        c.cluster_nodes = {{"127.0.0.1", c.port}};
    }});
    bad.push_back({"connections through Sentinels", [](settings& c) {
        c.connections = 2;
        c.sentinels = {{"127.0.0.1", c.port}};
        c.sentinel_master = "primary";
    }});
    return bad;
}

// redis-hold PORT RESOURCE TTL_MS MODE: takes the lock in MODE (hold_until_lost's;
// renewed), prints "locked FENCE", holds it until killed (the suite's killed_holder
// and the shared behaviours' holders).
int hold_worker_in(const std::vector<std::string>& args, dl::redis::dialect layout)
{
    if (args.size() != 4)
        return 2;
    asio::io_context io;
    dl::redis::config cfg;
    cfg.dialect = layout;
    cfg.port = static_cast<std::uint16_t>(std::stoi(args[0]));
    dl::redis::store store{io, cfg};
    return test::conformance::hold_until_lost(io, store, args[1], std::chrono::milliseconds{std::stoi(args[2])},
                                              args[3]);
}

// The counter of the suite's counting processes: a fenced key.
struct fenced_key {
    dl::redis::store& store;
    asio::awaitable<dl::result<long>> read()
    {
        auto value = co_await store.fenced_read("conf:counter-value");
        if (!value)
            co_return value.error();
        co_return value.value() ? std::stol(*value.value()) : 0L;
    }
    asio::awaitable<dl::result<void>> write(const dl::lease& l, long n)
    {
        return store.fenced_write("conf:counter-value", l.fence(), std::to_string(n));
    }
};

// redis-count PORT DIR ROUNDS PROCESSES: the suite's counting process.
int count_worker_in(const std::vector<std::string>& args, dl::redis::dialect layout)
{
    const auto how = test::conformance::counting::from(args, 1);
    if (!how)
        return 2;
    asio::io_context io;
    dl::redis::config cfg;
    cfg.dialect = layout;
    cfg.port = static_cast<std::uint16_t>(std::stoi(args[0]));
    dl::redis::store store{io, cfg};
    fenced_key counter{store};
    return test::conformance::count_under_lock(io, store, counter, *how);
}

// redis-plain-hold and redis-plain-count: the same under dialect::plain.
int hold_worker(const std::vector<std::string>& args) { return hold_worker_in(args, dl::redis::dialect::distlock); }
int count_worker(const std::vector<std::string>& args) { return count_worker_in(args, dl::redis::dialect::distlock); }
int plain_hold_worker(const std::vector<std::string>& args) { return hold_worker_in(args, dl::redis::dialect::plain); }
int plain_count_worker(const std::vector<std::string>& args)
{
    return count_worker_in(args, dl::redis::dialect::plain);
}

[[maybe_unused]] const bool suite_workers_registered =
    test::register_worker("redis-hold", hold_worker) && test::register_worker("redis-count", count_worker) &&
    test::register_worker("redis-plain-hold", plain_hold_worker) &&
    test::register_worker("redis-plain-count", plain_count_worker);

[[maybe_unused]] const bool suite_registered =
    test::conformance::register_suite<redis_single, redis_pooled, redis_fair, redis_plain, redis_quorum,
                                      redis_cluster, redis_cluster_fair>("[redis]");

} // namespace

