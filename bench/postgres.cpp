// distlock on PostgreSQL, next to its floor in the same run: the same two prepared
// statements (the acquiring upsert, the owner-checked release with its NOTIFY) sent
// by a minimal blocking libpq client with no lock logic in between. Starts its own
// private cluster on loopback. The shared workloads (bench/shared_workloads.hpp: eight
// readers beside a writer, a semaphore of 4 over 8 processes) run on advisory locks,
// beside psycopg2 taking the same advisory locks (bench/peers/psycopg2) in the same
// run. The `peers` group (bench/peer.hpp) sets psycopg2's hand-written locks
// (bench/peers/psycopg2/lock.py) beside distlock's in rounds alternating between the
// two: pg_advisory_lock + pg_advisory_unlock against advisory_store's lock() +
// unlock(), the same with a fence counter incremented in the locking statement (the
// least a fenced advisory lock writes), a one-statement lease upsert and its DELETE
// against the lease table's, each pair on a fresh key; then the hand-off across 4
// processes, psycopg2's waiting in pg_advisory_lock (plain, then fenced) before
// advisory_store's (copies of this binary started with --worker), each of distlock's
// rows with its ratio to psycopg2's; psycopg2's rows are
// skipped when it is missing. Every workload is bounded in count and time. Prints a
// table; appends JSON lines to the file named by the first argument.
#include <distlock/distlock.hpp>
#include <distlock/postgres.hpp>

#include "postgres_server.hpp" // test/support: a private cluster on a free loopback port
#include "failover.hpp"
#include "handoff.hpp"
#include "peer.hpp"
#include "report.hpp"
#include "shared_workloads.hpp"

#include <atomic>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace dl = distlock;
namespace pg = distlock::postgres;
using namespace std::chrono_literals;
using bench::micros;
using bench::result_row;
using bench::steady;

namespace {

// One statement at a time on a blocking libpq connection: the floor.
class raw_client {
public:
    raw_client(const std::string& conninfo, const pg::detail::sql_texts& sql) : conn_{PQconnectdb(conninfo.c_str())}
    {
        ok_ = PQstatus(conn_) == CONNECTION_OK && prepare("a", sql.acquire, 3) && prepare("r", sql.release, 3);
    }
    ~raw_client() { PQfinish(conn_); }
    raw_client(const raw_client&) = delete;
    raw_client& operator=(const raw_client&) = delete;

    bool ok() const { return ok_; }

    // Acquire then release; true when the first granted and the second released.
    bool pair(const std::string& resource, const dl::owner_token& owner)
    {
        const std::string hex = owner.to_hex();
        const char* acquire[] = {resource.data(), hex.c_str(), "10000"};
        const int lengths[] = {static_cast<int>(resource.size()), 0, 0};
        const int formats[] = {1, 0, 0};
        PGresult* a = PQexecPrepared(conn_, "a", 3, acquire, lengths, formats, 0);
        const bool granted = PQresultStatus(a) == PGRES_TUPLES_OK && !PQgetisnull(a, 0, 0);
        PQclear(a);
        const char* release[] = {resource.data(), hex.c_str(), "distlock_release"};
        PGresult* r = PQexecPrepared(conn_, "r", 3, release, lengths, formats, 0);
        const bool released = PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1;
        PQclear(r);
        return granted && released;
    }

private:
    bool prepare(const char* name, const std::string& sql, int n)
    {
        PGresult* r = PQprepare(conn_, name, sql.c_str(), n, nullptr);
        const bool ok = PQresultStatus(r) == PGRES_COMMAND_OK;
        PQclear(r);
        return ok;
    }

    PGconn* conn_;
    bool ok_ = false;
};

// One `SELECT 1` on a blocking libpq connection: the round trip the shared workloads'
// waits are counted in.
result_row round_trips(const std::string& conninfo)
{
    result_row rtt{"floor: one SELECT 1 round trip (raw libpq)"};
    PGconn* conn = PQconnectdb(conninfo.c_str());
    const auto start = steady::now();
    for (int i = 0; i < 600 && PQstatus(conn) == CONNECTION_OK; ++i) {
        const auto t0 = steady::now();
        PQclear(PQexec(conn, "SELECT 1"));
        if (i >= 100)
            rtt.us.push_back(micros(steady::now() - t0));
    }
    rtt.seconds = std::chrono::duration<double>(steady::now() - start).count();
    rtt.operations = rtt.us.size();
    PQfinish(conn);
    return rtt;
}

// --worker PORT TABLE ROUNDS [START_NS]: ROUNDS critical sections of 1 ms on "contended" with
// advisory locks, each printed as "held ACQUIRED_NS RELEASED_NS UNLOCKED_NS".
int worker(int argc, char** argv)
{
    if (argc != 5 && argc != 6)
        return 2;
    pg::config cfg;
    cfg.conninfo = std::string{"hostaddr=127.0.0.1 port="} + argv[2] + " user=postgres dbname=postgres sslmode=disable";
    cfg.table = argv[3];
    asio::io_context io;
    pg::advisory_store store{io, cfg};
    return bench::handoff_worker(io, store, std::atoi(argv[4]), argc > 5 ? std::atoll(argv[5]) : 0);
}

// --shared-worker ROLE PORT TABLE ROUNDS: a worker of the shared workloads on
// advisory locks (bench/shared_workloads.hpp).
int shared_worker(int argc, char** argv)
{
    if (argc != 6)
        return 2;
    pg::config cfg;
    cfg.conninfo = std::string{"hostaddr=127.0.0.1 port="} + argv[3] + " user=postgres dbname=postgres sslmode=disable";
    cfg.table = argv[4];
    asio::io_context io;
    pg::advisory_store store{io, cfg};
    return bench::shared_worker(io, store, argv[2], std::atoi(argv[5]));
}

// psycopg2 (Debian's python3-psycopg2, run by Debian's python3) for the peer rows;
// skipped when missing.
bool have_psycopg2() { return std::system("/usr/bin/python3 -c 'import psycopg2' > /dev/null 2>&1") == 0; }

// The shared workloads, psycopg2's rows then distlock's, with the floor's round trip.
int shared_workloads(const test::postgres_server& cluster, const std::string& table, result_row& rtt)
{
    const auto port = std::to_string(cluster.port());
    const auto ours = [&](const char* role, int rounds) {
        return std::vector<std::string>{test::self_path(), "--shared-worker", role, port, table,
                                        std::to_string(rounds)};
    };
    const std::string peer = DISTLOCK_SOURCE_DIR "/bench/peers/psycopg2/shared.py";
    // The peer's advisory key: any 64-bit number no other workload uses.
    const auto theirs = [&](const char* role, int rounds) {
        return std::vector<std::string>{"/usr/bin/python3", peer, role, port, "424242", std::to_string(rounds)};
    };
    // The reference client first: distlock's rows carry their ratio to its.
    result_row reads, wait, handoff;
    const bool peer_runs = have_psycopg2();
    long bad = 0;
    if (peer_runs)
        bad += bench::peer_outcome("peer psycopg2", bench::readers_and_writer("peer psycopg2", theirs("reader", 40), 8,
                                                                        theirs("writer", 20), rtt, nullptr, nullptr,
                                                                        &reads, &wait));
    else
        std::printf("  (python3-psycopg2 missing: its rows are skipped)\n");
    bad += bench::readers_and_writer("distlock", ours("reader", 40), 8, ours("writer", 20), rtt,
                                     peer_runs ? &reads : nullptr, peer_runs ? &wait : nullptr);
    if (peer_runs)
        bad += bench::peer_outcome("peer psycopg2", bench::semaphore_handoffs("peer psycopg2", theirs("permit:4", 30), 8, 4,
                                                                        rtt, nullptr, &handoff));
    bad += bench::semaphore_handoffs("distlock", ours("permit:4", 30), 8, 4, rtt, peer_runs ? &handoff : nullptr);
    if (bad != 0)
        std::fprintf(stderr, "a shared workload failed or broke its lock (%ld)\n", bad);
    return bad == 0 ? 0 : 1;
}

} // namespace

// --elect ROLE PORT TABLE NAME: a participant of the fail-over rounds, on the lease
// table, with a term's TTL of failover_ttl.
constexpr auto failover_ttl = std::chrono::seconds{2};
int elect(int argc, char** argv)
{
    if (argc != 6)
        return 2;
    pg::config cfg;
    cfg.conninfo = std::string{"hostaddr=127.0.0.1 port="} + argv[3] + " user=postgres dbname=postgres sslmode=disable";
    cfg.table = argv[4];
    asio::io_context io;
    pg::store store{io, cfg};
    return bench::election_worker(io, store, argv[2], argv[5], failover_ttl);
}

int main(int argc, char** argv)
{
    if (argc > 1 && std::strcmp(argv[1], "--elect") == 0)
        return elect(argc, argv);
    if (argc > 1 && std::strcmp(argv[1], "--shared-worker") == 0)
        return shared_worker(argc, argv);
    if (argc > 1 && std::strcmp(argv[1], "--worker") == 0)
        return worker(argc, argv);
    bench::json.open(argc > 1 ? argv[1] : "bench/results.jsonl", std::ios::app);
    std::printf("%-58s %8s %10s %9s %9s %9s %10s\n", "workload (PostgreSQL 15 on loopback)", "ops", "ops/s", "p50 us",
                "p90 us", "p99 us", "max us");
    test::postgres_server cluster;
    auto cfg = cluster.config("bench_locks");
    const pg::detail::sql_texts sql{cfg.table, cfg.channel, false};
    {
        asio::io_context io;
        pg::store s{io, cfg};
        bool made = false;
        asio::co_spawn(io, [&]() -> dl::awaitable<void> {
            made = static_cast<bool>(co_await s.create_table());
            co_await s.close();
        }, asio::detached);
        io.run();
        if (!made) {
            std::fprintf(stderr, "the table could not be made\n");
            return 1;
        }
    }
    // Leader fail-over on the lease table: the term's TTL is what the server waits out.
    const auto failover_rows = [&] {
        result_row failover{"distlock: election fail-over, leader SIGKILLed (us)"};
        const auto port = std::to_string(cluster.port());
        const int missed = bench::failovers(
            failover,
            [&](const std::string& role, const std::string& name) {
                return std::vector<std::string>{test::self_path(), "--elect", role, port, cfg.table, name};
            },
            6, std::chrono::duration_cast<std::chrono::milliseconds>(failover_ttl));
        bench::print_failover(failover, std::chrono::duration_cast<std::chrono::milliseconds>(failover_ttl));
        return missed;
    };
    if (bench::only("failover"))
        return failover_rows() != 0 ? 1 : 0;
    constexpr std::size_t count = 2000, warmup = 100;
    constexpr auto limit = 30s;
    bool failed = false;
    const bool peers_only = bench::only("peers");

    if (!peers_only) {
        // The two alternate pair by pair, so that a noisy neighbour hits both alike.
        result_row floor{"floor: raw libpq, prepared upsert + prepared release"};
        result_row lock{"distlock: lock() + unlock(), lease table"};
        raw_client raw{cluster.conninfo(), sql};
        if (!raw.ok()) {
            std::fprintf(stderr, "the raw client could not connect\n");
            return 1;
        }
        asio::io_context io;
        pg::store store{io, cfg};
        dl::basic_distributed_mutex<pg::store, dl::retry::none> m{store, "bench:lock", {.ttl = 10s}};
        const auto start = steady::now();
        asio::co_spawn(io, [&]() -> dl::awaitable<void> {
            for (std::size_t i = 0; i < warmup + count && steady::now() - start < limit; ++i) {
                const auto owner = dl::owner_token::generate();
                const auto t0 = steady::now();
                if (!raw.pair("bench:floor", owner))
                    failed = true;
                const auto t1 = steady::now();
                auto l = co_await m.lock();
                if (!l || !co_await l->unlock())
                    failed = true;
                const auto t2 = steady::now();
                if (i >= warmup) {
                    floor.us.push_back(micros(t1 - t0));
                    lock.us.push_back(micros(t2 - t1));
                }
            }
            co_await store.close();
        }, asio::detached);
        io.run();
        floor.seconds = lock.seconds = std::chrono::duration<double>(steady::now() - start).count() / 2;
        floor.operations = floor.us.size();
        lock.operations = lock.us.size();
        bench::print(floor);
        bench::print(lock, &floor);
    }

    if (!peers_only) {
        // 64 workers on distinct resources: 64 blocking connections in 64 threads,
        // against 64 coroutines pipelined on one connection of one store.
        constexpr int workers = 64, per_worker = 40;
        result_row floor{"floor: 64 threads x 64 raw libpq connections, pairs/s"};
        result_row lock{"distlock: 64 coroutines pipelined on 1 connection"};
        {
            std::vector<std::unique_ptr<raw_client>> clients;
            for (int w = 0; w < workers; ++w)
                clients.push_back(std::make_unique<raw_client>(cluster.conninfo(), sql));
            std::atomic<bool> bad{false};
            const auto start = steady::now();
            std::vector<std::thread> threads;
            for (int w = 0; w < workers; ++w)
                threads.emplace_back([&, w] {
                    const auto id = "bench:floor:" + std::to_string(w);
                    for (int i = 0; i < per_worker && steady::now() - start < limit; ++i)
                        if (!clients[static_cast<std::size_t>(w)]->pair(id, dl::owner_token::generate()))
                            bad = true;
                });
            for (auto& t : threads)
                t.join();
            floor.seconds = std::chrono::duration<double>(steady::now() - start).count();
            floor.operations = workers * per_worker;
            failed = failed || bad;
        }
        {
            asio::io_context io;
            auto one = cfg;
            one.pool_size = 1;
            pg::store store{io, one};
            int done = 0;
            const auto start = steady::now();
            for (int w = 0; w < workers; ++w)
                asio::co_spawn(io, [&store, &failed, &done, start, limit, w]() -> dl::awaitable<void> {
                    dl::basic_distributed_mutex<pg::store, dl::retry::none> m{
                        store, "bench:pipe:" + std::to_string(w), {.ttl = 10s}};
                    for (int i = 0; i < per_worker && steady::now() - start < limit; ++i) {
                        auto l = co_await m.lock();
                        if (!l || !co_await l->unlock())
                            failed = true;
                    }
                    ++done;
                }, asio::detached);
            asio::co_spawn(io, [&]() -> dl::awaitable<void> {
                while (done < workers) {
                    asio::steady_timer t{io, 1ms};
                    co_await t.async_wait(asio::use_awaitable);
                }
                co_await store.close();
            }, asio::detached);
            io.run();
            lock.seconds = std::chrono::duration<double>(steady::now() - start).count();
            lock.operations = workers * per_worker;
        }
        bench::print(floor);
        bench::print(lock, &floor, true);
    }
    if (failed) {
        std::fprintf(stderr, "a request failed\n");
        return 1;
    }
    auto rtt = round_trips(cluster.conninfo());
    bench::print(rtt);

    // psycopg2 beside distlock: pairs on fresh keys in alternating rounds, advisory
    // locks then the lease table; then its hand-off, before advisory_store's.
    const auto port = std::to_string(cluster.port());
    const std::string psycopg2_lock = DISTLOCK_SOURCE_DIR "/bench/peers/psycopg2/lock.py";
    const bool psycopg2 = have_psycopg2();
    bench::handoff_rows psycopg2_handoff, psycopg2_fenced_handoff;
    long peer_bad = 0;
    if (!psycopg2) {
        std::printf("peers: python3-psycopg2 missing; its rows are skipped\n");
    } else {
        constexpr std::size_t per_round = 500;
        const auto peer = [&](const char* mode) {
            return [&, mode](int) {
                return std::vector<std::string>{"/usr/bin/python3", psycopg2_lock, mode, port,
                                                std::to_string(per_round)};
            };
        };
        const bool paired =
            bench::pairs_beside_peer(
                "peer psycopg2: pg_advisory_lock + pg_advisory_unlock", peer("advisory"),
                "distlock: lock() + unlock(), advisory_store",
                [&](int round) {
                    return bench::fresh_pairs<pg::advisory_store>(
                        cfg, "peer-pairs:advisory:" + std::to_string(round) + ":", per_round);
                },
                3) &&
            // The least any fenced advisory lock writes, from the same client: what of
            // distlock's pair is the fence's write.
            bench::pairs_beside_peer(
                "peer psycopg2: pg_advisory_lock + fence upsert in one statement, unlock", peer("fenced"),
                "distlock: lock() + unlock(), advisory_store",
                [&](int round) {
                    return bench::fresh_pairs<pg::advisory_store>(
                        cfg, "peer-pairs:fenced:" + std::to_string(round) + ":", per_round);
                },
                3) &&
            bench::pairs_beside_peer(
                "peer psycopg2: lease upsert + DELETE, one statement each", peer("lease"),
                "distlock: lock() + unlock(), lease table, fresh keys",
                [&](int round) {
                    return bench::fresh_pairs<pg::store>(cfg, "peer-pairs:lease:" + std::to_string(round) + ":",
                                                         per_round);
                },
                3);
        if (!paired) {
            std::fprintf(stderr, "a request failed\n");
            return 1;
        }
        // The peer's advisory key: any 64-bit number no other workload uses.
        const std::vector<std::string> contender{"/usr/bin/python3", psycopg2_lock, "contend", port, "434343", "50",
                                                 bench::start_in(3s)};
        peer_bad = bench::peer_outcome("peer psycopg2", bench::handoffs(contender, 4, rtt, "peer psycopg2", nullptr,
                                                                        &psycopg2_handoff));
        auto fenced = contender;
        fenced[6] = bench::start_in(3s);
        fenced.push_back("fenced");
        peer_bad += bench::peer_outcome("peer psycopg2, fenced",
                                        bench::handoffs(fenced, 4, rtt, "peer psycopg2, fenced", nullptr,
                                                        &psycopg2_fenced_handoff));
    }
    // Contended hand-off across processes, on advisory locks.
    const std::vector<std::string> worker{test::self_path(), "--worker", port, cfg.table, "50", bench::start_in(1s)};
    bench::handoff_rows ours;
    const long handed =
        bench::handoffs(worker, 4, rtt, "distlock advisory_store", psycopg2 ? &psycopg2_handoff : nullptr, &ours);
    if (psycopg2 && psycopg2_fenced_handoff.handoff.operations > 0 && ours.handoff.operations > 0)
        std::printf("  hand-off p50 x%.2f of psycopg2's fenced grant (the lock and its fence in one statement)\n",
                    ours.handoff.pct(0.5) / psycopg2_fenced_handoff.handoff.pct(0.5));
    if (peers_only)
        return handed == 0 && peer_bad == 0 ? 0 : 1;

    const int shared = shared_workloads(cluster, cfg.table, rtt);

    const int missed = failover_rows();
    return shared != 0 || missed != 0 || handed != 0 || peer_bad != 0 ? 1 : 0;
}
