// The store conformance suite on ZooKeeper: three clients (three sessions) of one
// server the tests start (test/support/zookeeper_server.hpp), each reaching it
// through a fault proxy of its own that loses replies, or all traffic, on demand, in
// the default dialect (Curator's node names). The fixture takes the dialect as a
// parameter (its workers too); the other dialects differ only in the names they write,
// which the store tests and the interop tests cover. The store's own tests are in
// test/zookeeper/.
#include "conformance/suite.hpp"
#include "fault/proxy.hpp"
#include "workers.hpp"
#include "zookeeper/zookeeper_support.hpp"

#include <array>
#include <cinttypes>
#include <cstdio>
#include <fstream>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using namespace std::chrono_literals;
using namespace test::zookeeper_tests;

// The settings of every client of a fixture in dialect D.
template <zk::dialect D>
zk::config in_dialect(zk::config c)
{
    c.dialect = D;
    return c;
}

template <zk::dialect D>
struct zookeeper_clients {
    static constexpr const char* name = D == zk::dialect::curator ? "zookeeper" : "zookeeper (kazoo names)";
    using backend = zk::store;
    static constexpr bool notifies = true; // each waiter watches its predecessor
    static constexpr bool quorum = false;
    std::string prefix = test::fresh_zk_prefix("conf");
    std::array<std::unique_ptr<fault::proxy>, 3> nets;
    asio::io_context io;
    std::array<std::unique_ptr<backend>, 3> clients;

    zookeeper_clients()
    {
        for (std::size_t i = 0; i < clients.size(); ++i) {
            nets[i] = std::make_unique<fault::proxy>(test::shared_zookeeper().port());
            clients[i] = std::make_unique<backend>(
                io, in_dialect<D>(test::shared_zookeeper().config_through(nets[i]->port(), prefix)));
        }
        test::conformance::warm_up(io, clients);
    }
    ~zookeeper_clients()
    {
        test::conformance::close_all(io, clients);
        // No waiter node is left behind by any test.
        try {
            test::zk_client c{test::shared_zookeeper().port()};
            for (const auto& resource : c.children(prefix).value_or(std::vector<std::string>{})) {
                INFO(resource);
                CHECK(c.children(prefix + "/" + resource).value_or(std::vector<std::string>{}).empty());
            }
        } catch (const std::exception& e) { // the server does not answer: said, not thrown from here
            FAIL_CHECK(e.what());
        }
    }

    backend& client(std::size_t i) { return *clients[i]; }
    bool held(std::string_view resource) { return !queue_of(prefix, resource).empty(); }
    std::size_t waiters(std::string_view resource) { return queue_of(prefix, resource).size(); }
    // Another client, with a session of its own, straight to the server.
    std::unique_ptr<backend> make_client()
    {
        return std::make_unique<backend>(io, in_dialect<D>(test::shared_zookeeper().config(prefix)));
    }
    // As if the store had dropped the lock behind the holder's back: its node is deleted.
    void end_lock(const dl::lease& l)
    {
        test::zk_client c{test::shared_zookeeper().port()};
        const auto parent = zk::detail::resource_node(prefix, l.resource());
        for (const auto& name : queue_of(prefix, l.resource()))
            if (zk::detail::parse_waiter(name)->owner == l.owner().to_hex())
                (void)c.remove(parent + "/" + name);
    }
    void lose_next_reply(std::size_t i) { nets[i]->set(fault::direction::to_client, {.close_after = 0}); }
    // Replies late by 400 ms rather than held: an acquisition here is several requests
    // (parent nodes, then its own), each waiting for the one before, and only the last
    // one's reply must still be on its way when the test closes the store. Short enough
    // that pings answered that late keep the 2 s session (in doubt after 2/3 of it).
    void hold_replies(bool on)
    {
        for (auto& net : nets)
            net->set(fault::direction::to_client, {.latency = on ? std::chrono::milliseconds{400}
                                                                 : std::chrono::milliseconds{0}});
    }
    asio::awaitable<void> close(std::size_t i) { return clients[i]->close(); }
    static dl::duration longest_validity(const dl::lock_options&)
    {
        return test::shared_zookeeper().config().session_timeout;
    }

    // A client's session ends the way ZooKeeper ends sessions: the server hears
    // nothing from it for the session timeout (2 s) and expires it. Its traffic is
    // blackholed until the server has closed the session, then flows again.
    static constexpr dl::duration session_end_within = 4s;
    asio::awaitable<void> end_session(std::size_t i)
    {
        char sid[32];
        std::snprintf(sid, sizeof sid, "sid=0x%" PRIx64, static_cast<std::uint64_t>(clients[i]->session_id()));
        REQUIRE(clients[i]->session_id() != 0);
        nets[i]->set(fault::direction::to_server, {.blackhole = true});
        nets[i]->set(fault::direction::to_client, {.blackhole = true});
        (void)co_await test::eventually("the server closed the session", [&] {
            return test::zk_four_letters(test::shared_zookeeper().port(), "cons").find(sid) == std::string::npos;
        }, test::steps{.max = 500, .each = 20ms});
        nets[i]->set(fault::direction::to_server, {});
        nets[i]->set(fault::direction::to_client, {});
    }

    // The server stops, and starts again with its data: sessions and their nodes are
    // there, and expire unless their clients come back in time.
    void stop_server() { test::shared_zookeeper().stop(0); }
    void start_server() { test::shared_zookeeper().start(0); }

    std::unique_ptr<test::child> holder_process(const std::string& resource, const std::string& mode = "exclusive")
    {
        return std::make_unique<test::child>(std::vector<std::string>{
            test::self_path(), "--worker", "zookeeper-hold", std::to_string(test::shared_zookeeper().port()), prefix,
            resource, mode, std::string{zk::name_of(D)}});
    }

    std::unique_ptr<test::child> counter_process(const std::filesystem::path& dir, int rounds, int processes)
    {
        std::vector<std::string> argv{test::self_path(), "--worker", "zookeeper-count",
                                      std::to_string(test::shared_zookeeper().port()), prefix,
                                      std::string{zk::name_of(D)}};
        const auto more = test::conformance::counting{dir, rounds, processes}.args();
        argv.insert(argv.end(), more.begin(), more.end());
        return std::make_unique<test::child>(std::move(argv));
    }
    long counter_value(const std::filesystem::path& dir) const
    {
        long n = -1;
        std::ifstream{dir / "counter"} >> n;
        return n;
    }

    using settings = zk::config;
    static settings settings_at(std::uint16_t port)
    {
        settings c;
        c.servers = {{"127.0.0.1", port}};
        return c;
    }
    static std::vector<test::conformance::bad_setting<settings>> bad_settings()
    {
        return {{"no servers", [](settings& c) { c.servers.clear(); }},
                {"port 0", [](settings& c) { c.servers[0].port = 0; }},
                {"session_timeout 0", [](settings& c) { c.session_timeout = 0s; }},
                {"session_timeout < 0", [](settings& c) { c.session_timeout = -1s; }},
                {"session_timeout max", [](settings& c) { c.session_timeout = dl::duration::max(); }},
                {"session_timeout not in whole milliseconds",
                 [](settings& c) { c.session_timeout = std::chrono::microseconds{1500500}; }},
                {"drift = session_timeout", [](settings& c) { c.drift = c.session_timeout; }},
                {"request_timeout 0", [](settings& c) { c.request_timeout = 0s; }},
                {"connect_timeout max", [](settings& c) { c.connect_timeout = dl::duration::max(); }},
                {"prefix with NUL", [](settings& c) { c.prefix = std::string{"/a\0b", 4}; }},
                {"prefix not ASCII", [](settings& c) { c.prefix = "/a\xc3\xa9"; }},
                {"chroot /", [](settings& c) { c.chroot = "/"; }},
                {"password without user", [](settings& c) { c.password = "p"; }},
                {"user with ':'", [](settings& c) { c.username = "a:b"; }}};
    }
    static constexpr bool settings_refused_at_construction = true;
};

// The settings of the workers below: the server at PORT, nodes under PREFIX, named in
// DIALECT (as the URL key reads it).
zk::config worker_config(const std::string& port, const std::string& prefix, const std::string& dialect,
                         dl::duration session_timeout)
{
    auto cfg = zk::config::from_url("zk://127.0.0.1:" + port + "?dialect=" + dialect);
    if (!cfg)
        throw std::invalid_argument{"a worker's dialect: " + dialect};
    cfg->prefix = prefix;
    cfg->session_timeout = session_timeout;
    return *cfg;
}

// zookeeper-hold PORT PREFIX RESOURCE MODE DIALECT: the suite's holder process (MODE
// as hold_until_lost's).
int hold_worker(const std::vector<std::string>& args)
{
    if (args.size() != 5)
        return 2;
    asio::io_context io;
    zk::store store{io, worker_config(args[0], args[1], args[4], 2s)};
    return test::conformance::hold_until_lost(io, store, args[2], std::chrono::seconds{10}, args[3]);
}

// The counter of the suite's counting processes: a file beside the suite's fencing
// register (ZooKeeper itself has no fenced write); others wait when the resource's
// queue has more nodes than the holder's.
struct counter_file {
    std::filesystem::path file;
    test::zk_client queue_client;
    std::string queue;

    asio::awaitable<dl::result<long>> read()
    {
        long n = 0;
        std::ifstream{file} >> n;
        co_return n;
    }
    asio::awaitable<dl::result<void>> write(const dl::lease&, long n)
    {
        std::ofstream{file, std::ios::trunc} << n << '\n';
        co_return dl::success();
    }
    asio::awaitable<bool> others_waiting()
    {
        co_return queue_client.children(queue).value_or(std::vector<std::string>{}).size() > 1;
    }
};

// zookeeper-count PORT PREFIX DIALECT DIR ROUNDS PROCESSES: the suite's counting process.
int count_worker(const std::vector<std::string>& args)
{
    const auto how = test::conformance::counting::from(args, 3);
    if (!how)
        return 2;
    const auto port = static_cast<std::uint16_t>(std::stoi(args[0]));
    asio::io_context io;
    zk::store store{io, worker_config(args[0], args[1], args[2], 4s)};
    counter_file counter{how->dir / "counter", test::zk_client{port}, zk::detail::resource_node(args[1], "conf:counter")};
    return test::conformance::count_under_lock(io, store, counter, *how);
}

[[maybe_unused]] const bool suite_workers_registered =
    test::register_worker("zookeeper-hold", hold_worker) && test::register_worker("zookeeper-count", count_worker);

// The default dialect (Curator's names). kazoo's and the earlier names differ only in
// the names written, which every dialect reads alike: test/zookeeper/store.cpp checks
// them, and test/interop/zookeeper.cpp runs kazoo and Curator beside distlock.
[[maybe_unused]] const bool suite_registered =
    test::conformance::register_suite<zookeeper_clients<zk::dialect::curator>>("[zookeeper]");

} // namespace
