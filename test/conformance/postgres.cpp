// The store conformance suite on PostgreSQL, in both modes (lease table, advisory
// locks): three clients of one private cluster (test/support/postgres_server.hpp),
// reaching it through a fault proxy that loses replies on demand. The store's own
// tests are in test/postgres/.
#include "conformance/suite.hpp"
#include "fault/proxy.hpp"
#include "postgres/postgres_support.hpp"
#include "workers.hpp"

#include <array>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace {

using namespace std::chrono_literals;
using namespace test::postgres_tests;

// Three clients of one table behind a fault proxy, each connected (a lock taken and
// released) so that a test's next request is its own.
template <class Backend>
struct postgres_clients {
    using backend = Backend;
    static constexpr bool advisory = std::is_same_v<Backend, pg::advisory_store>;
    static constexpr const char* mode = advisory ? "advisory" : "table";
    static constexpr bool notifies = true; // NOTIFY, or the server's own lock queue
    static constexpr bool quorum = false;
    std::string table = test::fresh_table(advisory ? "adv" : "lease");
    fault::proxy net{test::shared_postgres().port()};
    asio::io_context io;
    std::array<std::unique_ptr<backend>, 3> clients;
    probe look{table};

    postgres_clients()
    {
        for (auto& c : clients)
            c = std::make_unique<backend>(io, test::shared_postgres().config(table, net.port()));
        test::conformance::warm_up(io, clients);
    }

    backend& client(std::size_t i) { return *clients[i]; }
    bool held(std::string_view resource) { return advisory ? look.advisory_held(resource) : look.lease_held(resource); }
    // As if the lease had run out now: its expiry moves to the server's now (a shared
    // grant's into the past, in the holders table), so that a lock-delay mark it
    // carries starts its tombstone from this moment, as a natural expiry would; or
    // (advisory) the server session holding its lock (a permit's: its slot's) ends.
    void end_lock(const dl::lease& l)
    {
        if constexpr (advisory) {
            if (l.slot())
                look.terminate_permit_holder(l.resource(), *l.slot());
            else
                look.terminate_advisory_holder(l.resource());
        } else if (l.shared()) {
            look.expire_holder(l.resource(), l.owner());
        } else {
            look.expire_lease(l.resource());
        }
    }
    // Only the client asking is doing I/O when a test loses a reply.
    void lose_next_reply(std::size_t) { net.set(fault::direction::to_client, {.close_after = 0}); }
    void hold_replies(bool on) { net.set(fault::direction::to_client, {.blackhole = on}); }
    asio::awaitable<void> close(std::size_t i) { return clients[i]->close(); }
    static dl::duration longest_validity(const dl::lock_options& o)
    {
        if constexpr (advisory)
            return test::shared_postgres().config("x").in_doubt_after;
        else
            return o.ttl - o.drift();
    }

    // The server stops (fast shutdown) and starts again with its data: lease rows
    // stay, advisory locks go with their sessions.
    void stop_server() { test::shared_postgres().stop(); }
    void start_server() { test::shared_postgres().start(); }

    std::unique_ptr<test::child> holder_process(const std::string& resource, const std::string& grant = "exclusive")
    {
        return std::make_unique<test::child>(std::vector<std::string>{
            test::self_path(), "--worker", "pg-hold", std::to_string(test::shared_postgres().port()), table, mode,
            resource, "1500", grant});
    }

    static constexpr int counter_processes = 6;
    static constexpr int counter_rounds = 10;
    bool counter_made = false;
    std::unique_ptr<test::child> counter_process(const std::filesystem::path& dir, int rounds, int processes)
    {
        if (!counter_made) {
            look.query("CREATE TABLE \"" + table + "_counter\" (id int PRIMARY KEY, n bigint NOT NULL)");
            look.query("INSERT INTO \"" + table + "_counter\" VALUES (1, 0)");
            counter_made = true;
        }
        std::vector<std::string> argv{test::self_path(), "--worker", "pg-count",
                                      std::to_string(test::shared_postgres().port()), table, mode};
        const auto more = test::conformance::counting{dir, rounds, processes}.args();
        argv.insert(argv.end(), more.begin(), more.end());
        return std::make_unique<test::child>(std::move(argv));
    }
    long counter_value(const std::filesystem::path&)
    {
        return static_cast<long>(look.query("SELECT n FROM \"" + table + "_counter\" WHERE id = 1").integer(0, 0).value_or(-1));
    }

    using settings = pg::config;
    static settings settings_at(std::uint16_t port)
    {
        settings c;
        c.conninfo = "hostaddr=127.0.0.1 port=" + std::to_string(port) + " user=postgres dbname=postgres sslmode=disable";
        return c;
    }
    static std::vector<test::conformance::bad_setting<settings>> bad_settings()
    {
        return {{"a connection string libpq refuses", [](settings& c) { c.conninfo = "hostaddr=127.0.0.1 nosuchkey=1"; }},
                {"a table name that is SQL", [](settings& c) { c.table = "t\"; DROP TABLE x; --"; }},
                {"in_doubt_after 0", [](settings& c) { c.in_doubt_after = 0s; }}};
    }
    static constexpr bool settings_refused_at_construction = true;
};

struct postgres_table : postgres_clients<pg::store> {
    static constexpr const char* name = "postgres_table";
    // The fence lives in the resource's row: one more per grant, kept by a release.
    static constexpr bool counts_fences = true;
    static constexpr bool keeps_fence = true;
    // A killed holder's lease is kept until its TTL runs out by the server's clock.
    static constexpr test::conformance::after_kill killed_holder_lock{.held_for = 300ms};
};
struct postgres_advisory : postgres_clients<pg::advisory_store> {
    static constexpr const char* name = "postgres_advisory";
    // The server ends a killed holder's session, and its lock, with its connection.
    static constexpr test::conformance::after_kill killed_holder_lock{.freed_at_once = true};
};

// The workers' settings: the cluster at PORT, table TABLE.
pg::config worker_config(const std::string& port, const std::string& table)
{
    pg::config c;
    c.conninfo = "hostaddr=127.0.0.1 port=" + port + " user=postgres dbname=postgres sslmode=disable";
    c.table = table;
    c.connect_timeout = 5s;
    c.statement_timeout = 5s;
    return c;
}

// pg-hold PORT TABLE MODE RESOURCE TTL_MS GRANT: the suite's holder process (MODE
// "table": a lease renewed at a third of the TTL; "advisory"; GRANT as
// hold_until_lost's mode).
int hold_worker(const std::vector<std::string>& args)
{
    if (args.size() != 6)
        return 2;
    asio::io_context io;
    const auto hold = [&](auto& store) {
        return test::conformance::hold_until_lost(io, store, args[3], std::chrono::milliseconds{std::stoi(args[4])},
                                                  args[5]);
    };
    if (args[2] == "advisory") {
        pg::advisory_store store{io, worker_config(args[0], args[1])};
        return hold(store);
    }
    pg::store store{io, worker_config(args[0], args[1])};
    return hold(store);
}

// The counter of the suite's counting processes: a row of TABLE_counter, written with
// the fence checked in the same statement.
template <class Store>
struct counter_row {
    Store& store;
    std::string counter;

    asio::awaitable<dl::result<long>> read()
    {
        auto read = co_await store.execute("SELECT n FROM " + counter + " WHERE id = 1");
        if (!read)
            co_return read.error();
        if (!read->integer(0, 0))
            co_return dl::errc::protocol_error;
        co_return static_cast<long>(*read->integer(0, 0));
    }
    asio::awaitable<dl::result<void>> write(const dl::lease& l, long n)
    {
        std::vector<pg::param> params{pg::param::number(n)};
        auto wrote = co_await store.fenced_execute(
            l.resource(), l.fence(), "UPDATE " + counter + " SET n = $1 WHERE id = 1 AND " + store.fence_condition(2, 3),
            std::move(params));
        if (!wrote)
            co_return wrote.error();
        co_return dl::success();
    }
};

// pg-count PORT TABLE MODE DIR ROUNDS PROCESSES: the suite's counting process.
int count_worker(const std::vector<std::string>& args)
{
    const auto how = test::conformance::counting::from(args, 3);
    if (!how)
        return 2;
    asio::io_context io;
    const auto count = [&](auto& store) {
        counter_row<std::remove_reference_t<decltype(store)>> counter{store, "\"" + args[1] + "_counter\""};
        return test::conformance::count_under_lock(io, store, counter, *how);
    };
    if (args[2] == "advisory") {
        pg::advisory_store store{io, worker_config(args[0], args[1])};
        return count(store);
    }
    pg::store store{io, worker_config(args[0], args[1])};
    return count(store);
}

[[maybe_unused]] const bool suite_workers_registered =
    test::register_worker("pg-hold", hold_worker) && test::register_worker("pg-count", count_worker);

[[maybe_unused]] const bool suite_registered =
    test::conformance::register_suite<postgres_table, postgres_advisory>("[postgres]");

} // namespace
