// distlock on PostgreSQL, next to its floor in the same run: the same two prepared
// statements (the acquiring upsert, the owner-checked release with its NOTIFY) sent
// by a minimal blocking libpq client with no lock logic in between. Starts its own
// private cluster on loopback. Every workload is bounded in count and time. Prints a
// table; appends JSON lines to the file named by the first argument.
#include <distlock/distlock.hpp>
#include <distlock/postgres.hpp>

#include "postgres_server.hpp" // test/support: a private cluster on a free loopback port
#include "report.hpp"

#include <atomic>
#include <cstdio>
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

} // namespace

int main(int argc, char** argv)
{
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
    constexpr std::size_t count = 2000, warmup = 100;
    constexpr auto limit = 30s;
    bool failed = false;

    {
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

    {
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
    return 0;
}
