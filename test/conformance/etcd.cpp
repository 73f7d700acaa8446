// The store conformance suite on etcd: three clients (three sessions) of one member
// the tests start (test/support/etcd_server.hpp), reaching it through a fault proxy
// that loses replies on demand. The store's own tests are in test/etcd/, the
// concurrency.Mutex beside it in test/interop/etcd.cpp.
#include "conformance/suite.hpp"
#include "etcd/etcd_support.hpp"
#include "fault/proxy.hpp"
#include "workers.hpp"

#include <array>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace {

using namespace std::chrono_literals;
using namespace test::etcd_tests;

const char* dialect_name(etcd::key_dialect d)
{
    return d == etcd::key_dialect::concurrency ? "concurrency" : "distlock";
}

// The API the clients speak: gRPC, or the JSON gateway when DISTLOCK_ETCD_API is
// "gateway" (the ctest entry stores_conformance_etcd_gateway runs the suite so: one
// build of the suite for both).
etcd::api suite_api()
{
    const char* api = std::getenv("DISTLOCK_ETCD_API");
    return api && std::string_view{api} == "gateway" ? etcd::api::gateway : etcd::api::grpc;
}

template <etcd::key_dialect Dialect>
struct etcd_clients {
    static constexpr const char* name =
        Dialect == etcd::key_dialect::concurrency ? "etcd, concurrency dialect" : "etcd";
    using backend = etcd::store;
    static constexpr bool notifies = true; // each waiter watches its predecessor
    static constexpr bool quorum = false;
    std::string prefix = test::fresh_prefix("conf");
    fault::proxy net{test::shared_etcd().port()};
    asio::io_context io;
    std::array<std::unique_ptr<backend>, 3> clients;

    static etcd::config in_dialect(etcd::config c)
    {
        c.dialect = Dialect;
        c.api = suite_api();
        return c;
    }

    etcd_clients()
    {
        for (auto& c : clients)
            c = std::make_unique<backend>(io, in_dialect(test::shared_etcd().config_through(net.port(), prefix)));
        test::conformance::warm_up(io, clients);
    }
    ~etcd_clients() { test::conformance::close_all(io, clients); }

    backend& client(std::size_t i) { return *clients[i]; }
    std::vector<etcd::detail::kv> queue(std::string_view resource)
    {
        return queue_of(test::shared_etcd(), prefix, resource, 0, Dialect);
    }
    bool held(std::string_view resource) { return !queue(resource).empty(); }
    std::size_t waiters(std::string_view resource) { return queue(resource).size(); }
    // Another client, with a session of its own, straight to the member.
    std::unique_ptr<backend> make_client()
    {
        return std::make_unique<backend>(io, in_dialect(test::shared_etcd().config(prefix)));
    }
    // As an unplanned loss ends the grant: the session that keeps its entry's key
    // (whatever its mode: the owner names the key) ends, its lease revoked on the
    // server, which deletes every key bound to it (a lock-delay mark has no lease: it
    // stays, for the next head to find). The holder hears of it at its next keepalive.
    void end_lock(const dl::lease& l)
    {
        const auto key = etcd::detail::queue_prefix(prefix, l.resource(), Dialect) + l.owner().to_hex();
        const auto r = etcd::detail::read_range(test::shared_etcd().call("kv/range", etcd::detail::range_request(key)));
        REQUIRE(r);
        REQUIRE(r->kvs.size() == 1);
        REQUIRE(r->kvs.front().lease > 0);
        (void)test::shared_etcd().call("lease/revoke", {{"ID", std::to_string(r->kvs.front().lease)}});
    }
    void lose_next_reply(std::size_t) { net.set(fault::direction::to_client, {.close_after = 0}); }
    void hold_replies(bool on) { net.set(fault::direction::to_client, {.blackhole = on}); }
    asio::awaitable<void> close(std::size_t i) { return clients[i]->close(); }
    static dl::duration longest_validity(const dl::lock_options&) { return test::shared_etcd().config().session_ttl; }

    // A client's session ends at once: its lease is revoked on the server.
    static constexpr dl::duration session_end_within = 0s;
    asio::awaitable<void> end_session(std::size_t i)
    {
        const auto lease = clients[i]->session_lease();
        REQUIRE(lease != 0);
        (void)test::shared_etcd().call("lease/revoke", {{"ID", std::to_string(lease)}});
        co_return;
    }

    // The member stops, and starts again with its data: the keys are there, their
    // leases run again from their full TTL.
    void stop_server() { test::shared_etcd().stop(0); }
    void start_server()
    {
        test::shared_etcd().start(0);
        if (!test::shared_etcd().wait_writable())
            throw std::runtime_error{"etcd took no write after its restart"};
    }

    std::unique_ptr<test::child> holder_process(const std::string& resource, const std::string& mode = "exclusive")
    {
        return std::make_unique<test::child>(std::vector<std::string>{
            test::self_path(), "--worker", "etcd-hold", std::to_string(test::shared_etcd().port()), prefix, resource,
            mode, dialect_name(Dialect)});
    }

    // A releaser that asks again queues behind the waiters: while others wait, the
    // lock goes to another process (the last process to finish may hold it a few
    // times in a row once the others are done).
    static constexpr int counter_handoffs_percent = 90;
    std::unique_ptr<test::child> counter_process(const std::filesystem::path& dir, int rounds, int processes)
    {
        std::vector<std::string> argv{test::self_path(), "--worker", "etcd-count",
                                      std::to_string(test::shared_etcd().port()), prefix, dialect_name(Dialect)};
        const auto more = test::conformance::counting{dir, rounds, processes}.args();
        argv.insert(argv.end(), more.begin(), more.end());
        return std::make_unique<test::child>(std::move(argv));
    }
    long counter_value(const std::filesystem::path&) const
    {
        const auto r = etcd::detail::read_range(
            test::shared_etcd().call("kv/range", etcd::detail::range_request(prefix + "counter")));
        REQUIRE(r);
        REQUIRE(r->kvs.size() == 1);
        return std::stol(r->kvs[0].value);
    }

    using settings = etcd::config;
    static settings settings_at(std::uint16_t port)
    {
        settings c;
        c.members = {{"127.0.0.1", port}};
        c.dialect = Dialect;
        return c;
    }
    static std::vector<test::conformance::bad_setting<settings>> bad_settings()
    {
        return {{"no members", [](settings& c) { c.members.clear(); }},
                {"port 0", [](settings& c) { c.members[0].port = 0; }},
                {"session_ttl 0", [](settings& c) { c.session_ttl = 0s; }},
                {"session_ttl 1 s", [](settings& c) { c.session_ttl = 1s; }},
                {"session_ttl not in whole seconds", [](settings& c) { c.session_ttl = 2500ms; }},
                {"session_ttl max", [](settings& c) { c.session_ttl = dl::duration::max(); }},
                {"keepalive_every = session_ttl", [](settings& c) { c.keepalive_every = c.session_ttl; }},
                {"keepalive_every < 0", [](settings& c) { c.keepalive_every = -1ms; }},
                {"drift < 0", [](settings& c) { c.drift = -1ms; }},
                {"request_timeout 0", [](settings& c) { c.request_timeout = 0s; }},
                {"connect_timeout max", [](settings& c) { c.connect_timeout = dl::duration::max(); }},
                {"prefix with NUL", [](settings& c) { c.prefix = std::string{"a\0b", 3}; }},
                {"password without user", [](settings& c) { c.password = "p"; }},
                {"dialect out of range", [](settings& c) { c.dialect = static_cast<etcd::key_dialect>(7); }},
                {"password with newline", [](settings& c) {
                     c.username = "u";
                     c.password = "p\n";
                 }}};
    }
    static constexpr bool settings_refused_at_construction = true;
};

// The settings of the workers below: the member at PORT, keys under PREFIX, in the
// dialect named DIALECT.
etcd::config worker_config(const std::string& port, const std::string& prefix, const std::string& dialect,
                           dl::duration session_ttl)
{
    etcd::config cfg;
    cfg.members = {{"127.0.0.1", static_cast<std::uint16_t>(std::stoi(port))}};
    cfg.prefix = prefix;
    cfg.dialect = etcd::dialect_named(dialect).value_or(etcd::key_dialect::distlock);
    cfg.session_ttl = session_ttl;
    return cfg;
}

// etcd-hold PORT PREFIX RESOURCE MODE DIALECT: the suite's holder process (MODE as
// hold_until_lost's).
int hold_worker(const std::vector<std::string>& args)
{
    if (args.size() != 5)
        return 2;
    asio::io_context io;
    etcd::store store{io, worker_config(args[0], args[1], args[4], 3s)};
    return test::conformance::hold_until_lost(io, store, args[2], std::chrono::seconds{10}, args[3]);
}

// The counter of the suite's counting processes: a key under the prefix, written with
// fenced puts; others wait when the resource's queue has more than the holder's key.
struct fenced_key {
    etcd::store& store;
    std::string prefix;
    std::string key = prefix + "counter";

    asio::awaitable<dl::result<long>> read()
    {
        auto read = co_await store.execute("kv/range", etcd::detail::range_request(key));
        if (!read)
            co_return read.error();
        const auto r = etcd::detail::read_range(read.value());
        if (!r)
            co_return dl::errc::protocol_error;
        co_return r->kvs.empty() ? 0L : std::stol(r->kvs.front().value);
    }
    asio::awaitable<dl::result<void>> write(const dl::lease& l, long n)
    {
        return store.fenced_put(key, l, std::to_string(n));
    }
    asio::awaitable<bool> others_waiting()
    {
        const auto q = etcd::detail::queue_prefix(prefix, "conf:counter");
        auto read = co_await store.execute("kv/range", etcd::detail::range_request(q, etcd::detail::range_end(q)));
        const auto r = read ? etcd::detail::read_range(read.value()) : std::nullopt;
        co_return r && r->kvs.size() > 1;
    }
};

// etcd-count PORT PREFIX DIALECT DIR ROUNDS PROCESSES: the suite's counting process.
int count_worker(const std::vector<std::string>& args)
{
    const auto how = test::conformance::counting::from(args, 3);
    if (!how || args.size() < 3)
        return 2;
    asio::io_context io;
    etcd::store store{io, worker_config(args[0], args[1], args[2], 5s)};
    fenced_key counter{store, args[1]};
    return test::conformance::count_under_lock(io, store, counter, *how);
}

[[maybe_unused]] const bool suite_workers_registered =
    test::register_worker("etcd-hold", hold_worker) && test::register_worker("etcd-count", count_worker);

// The default dialect. The concurrency dialect differs only in the queue prefix an id
// gets (and refuses ids with '/', which the listing behaviour locks): its layout is
// tested in test/etcd/store.cpp, and against etcdctl in test/interop/etcd.cpp.
[[maybe_unused]] const bool suite_registered =
    test::conformance::register_suite<etcd_clients<etcd::key_dialect::distlock>>("[etcd]");

} // namespace
