// The store conformance suite on Redis: one server with three clients, a Redlock
// quorum of three servers with three clients each made of one store per server, and
// a Redis Cluster of three primaries (one per test run). The clients reach each
// server through a fault proxy, which loses replies on demand.
#include "cluster.hpp"
#include "conformance/suite.hpp"
#include "fault/proxy.hpp"
#include "redis_support.hpp"

#include <algorithm>
#include <array>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <vector>

namespace {

using namespace std::chrono_literals;
namespace dl = distlock;

// Whether `server` holds the lock key of `resource`, asked on a connection of its own.
bool holds(const test::redis_server& server, std::string_view resource)
{
    asio::io_context io;
    dl::redis::store probe{io, server.config()};
    return test::peek(io, server.config(), probe.lock_key(resource)).has_value();
}

// Whether `server` keeps a key of `resource` alone: its lock or a fair queue's keys
// (its fence key is its hash slot's, shared by every resource of the slot).
bool remembers(const test::redis_server& server, std::string_view resource)
{
    asio::io_context io;
    dl::redis::store probe{io, server.config()};
    for (const auto& key : {probe.lock_key(resource), probe.queue_key(resource), probe.offers_key(resource)})
        if (test::exists(io, server.config(), key))
            return true;
    return false;
}

// Deletes the lock key of `resource` on `server`, as if its TTL had run out.
void drop(const test::redis_server& server, std::string_view resource)
{
    asio::io_context io;
    dl::redis::store probe{io, server.config()};
    test::run(io, [&]() -> asio::awaitable<void> {
        auto command = dl::redis::resp::command({"DEL", probe.lock_key(resource)});
        auto r = co_await probe.execute_command(std::move(command));
        REQUIRE(r);
    });
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

struct redis_single {
    static constexpr const char* name = "redis_single";
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
    redis_single() { test::conformance::warm_up(io, clients); }

    backend& client(std::size_t i) { return *clients[i]; }
    bool held(std::string_view resource) const { return holds(server, resource); }
    bool remembers(std::string_view resource) const { return ::remembers(server, resource); }
    void end_lock(const dl::lease& l) { drop(server, l.resource()); }
    // Only the client asking is doing I/O when a test loses a reply.
    void lose_next_reply(std::size_t) { ::lose_next_reply(net); }
    asio::awaitable<void> close(std::size_t i) { return clients[i]->close(); }
    static dl::duration longest_validity(const dl::lock_options& o) { return o.ttl - o.drift(); }
};

// One server, each client with three command connections (config::connections):
// requests of one client take them in turn, so consecutive requests of one lock()
// or one lease go out on different connections.
struct redis_pooled : redis_single {
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

// One server, every mutex through acquire::fair: the store's scripts keep the queue.
// A short queue TTL, so that a waiter that vanished holds up the line briefly.
struct redis_fair : redis_single {
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
            if (holds(s, resource))
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
            drop(s, l.resource());
    }
    // Every node's reply is lost: not one grant is known to the client.
    void lose_next_reply(std::size_t)
    {
        for (auto& net : nets)
            ::lose_next_reply(net);
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
        for (const auto& key : {probe.lock_key(resource), probe.queue_key(resource), probe.offers_key(resource)})
            if (test::exists(probe_io, cluster.config(), key))
                return true;
        return false;
    }
    void end_lock(const dl::lease& l)
    {
        asio::io_context probe_io;
        dl::redis::store probe{probe_io, cluster.config()};
        test::run(probe_io, [&]() -> asio::awaitable<void> {
            auto r = co_await probe.execute("DEL", probe.lock_key(l.resource()));
            REQUIRE(r);
        });
    }
    // The reply lost is the one from the primary of the resource's slot.
    void lose_next_reply(std::size_t, std::string_view resource)
    {
        const auto node = cluster.primary_of(clients[0]->lock_key(resource));
        for (std::size_t i = 0; i < cluster.size(); ++i)
            if (cluster.node(i).port() == node)
                ::lose_next_reply(*nets[i]);
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

} // namespace

DISTLOCK_CONFORMANCE("[redis]", redis_single, redis_pooled, redis_fair, redis_quorum, redis_cluster, redis_cluster_fair)

TEST_CASE("redis: a held lock is data: the answer says until when the holder's lock runs out", "[redis]")
{
    redis_single f;
    test::run(f.io, [&]() -> asio::awaitable<void> {
        auto& store = f.client(0);
        const auto owner = dl::owner_token::generate();
        auto first = co_await store.put_if_absent_answer("data:held", owner, 10s);
        REQUIRE(first);
        REQUIRE(first->is_granted());
        const auto asked = dl::clock::now();
        auto second = co_await store.put_if_absent_answer("data:held", dl::owner_token::generate(), 10s);
        const auto answered = dl::clock::now();
        REQUIRE(second);
        REQUIRE_FALSE(second->is_granted());
        REQUIRE(second->not_before());
        // The holder's PTTL, measured from the request: within the TTL from now.
        CHECK(*second->not_before() > asked + 9s);
        CHECK(*second->not_before() <= answered + 10s);
        auto released = co_await store.release("data:held", owner);
        CHECK(released);
    });
}

TEST_CASE("redis lifetimes: a store destroyed with a lease held and a lock() waiting", "[redis][lifetime]")
{
    test::redis_server server;
    asio::io_context io;
    auto holder_store = std::make_unique<dl::redis::store>(io, server.config());
    auto waiter_store = std::make_unique<dl::redis::store>(io, server.config());
    std::optional<dl::lease> held;
    test::run(io, [&]() -> asio::awaitable<void> {
        dl::basic_distributed_mutex<dl::redis::store, dl::renew::watchdog> m{*holder_store, "life:job", {.ttl = 3s}};
        auto l = co_await m.lock();
        REQUIRE(l);
        held.emplace(std::move(*l));
    });
    std::optional<dl::result<dl::lease>> waited;
    asio::co_spawn(
        io,
        [](dl::redis::store& s, std::optional<dl::result<dl::lease>>& out) -> asio::awaitable<void> {
            dl::basic_distributed_mutex<dl::redis::store> m{
                s, "life:job", {.ttl = 3s}, dl::retry::exponential_backoff{.initial = 20s, .max = 20s, .deadline = 60s}};
            out.emplace(co_await m.lock());
        }(*waiter_store, waited),
        asio::detached);
    for (int i = 0; i < 200 && waiter_store->subscribed_channels() == 0; ++i)
        io.run_for(5ms);
    REQUIRE(waiter_store->subscribed_channels() == 1);
    waiter_store.reset();
    holder_store.reset();
    for (int i = 0; i < 2000 && !waited; ++i)
        io.run_for(5ms);
    REQUIRE(waited);
    REQUIRE_FALSE(*waited);
    CHECK(waited->error() == dl::errc::store_unavailable);
    test::run(io, [&]() -> asio::awaitable<void> {
        const auto why = co_await held->lost();
        CHECK(why == dl::errc::store_unavailable);
    });
    held.reset();
    io.restart();
    for (int i = 0; i < 400 && !io.stopped(); ++i)
        io.run_for(10ms);
    CHECK(io.stopped()); // nothing left running against the destroyed stores
}

TEST_CASE("redis: a quorum made of one server twice is refused, whatever the database or key prefix",
          "[redis][quorum]")
{
    test::redis_server one, other;
    asio::io_context io;
    auto same_db1 = one.config();
    same_db1.database = 1;
    auto same_prefix = one.config();
    same_prefix.key_prefix = "elsewhere";
    for (const auto& twin : {same_db1, same_prefix}) {
        dl::redis::store a{io, one.config()}, b{io, twin}, c{io, other.config()};
        dl::quorum<dl::redis::store> nodes{a, b, c};
        dl::basic_distributed_mutex<dl::quorum<dl::redis::store>, dl::retry::none> m{nodes, "twin:job", {.ttl = 10s}};
        test::run(io, [&]() -> asio::awaitable<void> {
            // The first attempt connects every node; a twin that answers after a
            // majority of distinct nodes decided is found from the next attempt on.
            auto first = co_await m.lock();
            if (first) {
                auto u = co_await first->unlock();
                CHECK(u);
            } else {
                CHECK(first.error() == dl::errc::invalid_argument);
            }
            auto r = co_await m.lock();
            REQUIRE_FALSE(r);
            CHECK(r.error() == dl::errc::invalid_argument);
        });
        // Nothing is left on the server reached twice, nor on the other.
        CHECK_FALSE(holds(one, "twin:job"));
        CHECK_FALSE(holds(other, "twin:job"));
    }
    // With the other server down, one server twice must not make a majority.
    {
        dl::redis::store a{io, one.config()}, b{io, same_prefix};
        auto down = other.config();
        down.port = test::free_port();
        down.connect_timeout = 300ms;
        dl::redis::store c{io, down};
        dl::quorum<dl::redis::store> nodes{a, b, c};
        dl::basic_distributed_mutex<dl::quorum<dl::redis::store>, dl::retry::none> m{nodes, "twin:job", {.ttl = 10s}};
        test::run(io, [&]() -> asio::awaitable<void> {
            // Both twins must grant for a majority here, so they are compared at once.
            auto r = co_await m.lock();
            REQUIRE_FALSE(r);
            CHECK(r.error() == dl::errc::invalid_argument);
        });
        CHECK_FALSE(holds(one, "twin:job"));
    }
    // Three distinct servers still lock.
    test::redis_server third;
    dl::redis::store a{io, one.config()}, b{io, other.config()}, c{io, third.config()};
    dl::quorum<dl::redis::store> nodes{a, b, c};
    dl::basic_distributed_mutex<dl::quorum<dl::redis::store>, dl::retry::none> m{nodes, "twin:job", {.ttl = 10s}};
    test::run(io, [&]() -> asio::awaitable<void> {
        auto r = co_await m.lock();
        REQUIRE(r);
        auto u = co_await r->unlock();
        CHECK(u);
    });
}

TEST_CASE("redis: a server reached through two nodes counts once when a lease is extended", "[redis][quorum]")
{
    test::redis_server one, other;
    asio::io_context io;
    // a and c are one server. The lock is taken by a distinct majority (one node of
    // the twins grants, the other finds the key held), then the other server dies:
    // the twins' two extensions must not make a majority on their own.
    dl::redis::store a{io, one.config()}, b{io, other.config()}, c{io, one.config()};
    dl::quorum<dl::redis::store> nodes{a, b, c};
    dl::basic_distributed_mutex<dl::quorum<dl::redis::store>, dl::renew::watchdog, dl::retry::none> m{
        nodes, "twin:extend", {.ttl = 1500ms}};
    test::run(io, [&]() -> asio::awaitable<void> {
        auto l = co_await m.lock();
        REQUIRE(l);
        other.kill();
        (void)co_await test::eventually("!l->valid()", [&] { return !l->valid(); }, test::conformance::long_enough());
        (void)co_await l->unlock();
        // Released, or gone with its TTL.
        (void)co_await test::eventually("!holds(one)", [&] { return !holds(one, "twin:extend"); },
                                        test::conformance::long_enough());
    });
}
