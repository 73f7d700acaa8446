// distlock benchmarks on Redis, each next to a baseline in the same run: the same
// Redis commands issued by hiredis with no lock library in between. Starts its own
// redis-server processes on loopback. Every workload is bounded in count and time.
// Prints a table; appends JSON lines to the file named by the first argument.
#include <distlock/distlock.hpp>
#include <distlock/redis.hpp>

#include "redis_cluster.hpp" // test/support: a Redis Cluster on loopback
#include "redis_server.hpp" // test/support: redis-server on a free loopback port
#include "report.hpp"
#include "failover.hpp"
#include "shared_workloads.hpp"

#include <hiredis/hiredis.h>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/io_context.hpp>
#include <asio/steady_timer.hpp>

#include <malloc.h>
#include <sys/resource.h>

#include <algorithm>
#include <filesystem>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <fstream>
#include <optional>
#include <sstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

// Live bytes allocated with operator new (the library, Asio and the benchmark; not
// hiredis, which uses malloc), for the memory rows. Counted only in the process that
// measures them (`--memory`, set before anything else runs): a counter shared by
// every allocation would slow the other workloads' allocations, and with two threads
// make its cache line bounce between the cores. Relaxed atomics keep it exact.
namespace {
std::atomic<long long> live_bytes{0};
bool counting_allocations = false;

void* counted_new(std::size_t n, std::size_t align)
{
    void* p = align > alignof(std::max_align_t) ? std::aligned_alloc(align, (n + align - 1) / align * align)
                                                 : std::malloc(n ? n : 1);
    if (!p)
        throw std::bad_alloc{};
    if (counting_allocations)
        live_bytes.fetch_add(static_cast<long long>(malloc_usable_size(p)), std::memory_order_relaxed);
    return p;
}

void counted_delete(void* p) noexcept
{
    if (!p)
        return;
    if (counting_allocations)
        live_bytes.fetch_sub(static_cast<long long>(malloc_usable_size(p)), std::memory_order_relaxed);
    std::free(p);
}
} // namespace

void* operator new(std::size_t n) { return counted_new(n, 0); }
void* operator new[](std::size_t n) { return counted_new(n, 0); }
void* operator new(std::size_t n, std::align_val_t a) { return counted_new(n, static_cast<std::size_t>(a)); }
void* operator new[](std::size_t n, std::align_val_t a) { return counted_new(n, static_cast<std::size_t>(a)); }
void operator delete(void* p) noexcept { counted_delete(p); }
void operator delete[](void* p) noexcept { counted_delete(p); }
void operator delete(void* p, std::size_t) noexcept { counted_delete(p); }
void operator delete[](void* p, std::size_t) noexcept { counted_delete(p); }
void operator delete(void* p, std::align_val_t) noexcept { counted_delete(p); }
void operator delete[](void* p, std::align_val_t) noexcept { counted_delete(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { counted_delete(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { counted_delete(p); }

namespace dl = distlock;
using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;

namespace {

using bench::json;
using bench::micros;
using bench::print;
using bench::result_row;


// -- hiredis baseline -------------------------------------------------------------

const char* release_lua = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0";

// The pair's two commands as hiredis formats them: the key (%b) and, for the
// release, the script's SHA-1 (%s) filled in.
const char* acquire_format = "SET %b owner-token-0123456789abcdef NX PX 10000";
const char* release_format = "EVALSHA %s 1 %b owner-token-0123456789abcdef";

struct hiredis_client {
    redisContext* c;
    std::string release_sha;
    explicit hiredis_client(std::uint16_t port) : c{redisConnect("127.0.0.1", port)}
    {
        auto* r = static_cast<redisReply*>(redisCommand(c, "SCRIPT LOAD %s", release_lua));
        release_sha.assign(r->str, r->len);
        freeReplyObject(r);
    }
    ~hiredis_client() { redisFree(c); }
    // SET NX PX, then the compare-and-delete script: the two round trips of a lock pair.
    bool pair(const std::string& key)
    {
        auto* a = static_cast<redisReply*>(redisCommand(c, acquire_format, key.data(), key.size()));
        const bool ok = a && a->type == REDIS_REPLY_STATUS;
        freeReplyObject(a);
        auto* b = static_cast<redisReply*>(redisCommand(c, release_format, release_sha.c_str(), key.data(), key.size()));
        freeReplyObject(b);
        return ok;
    }
};

result_row baseline_sequential(std::uint16_t port, std::size_t count)
{
    hiredis_client h{port};
    result_row r{"baseline hiredis: SET NX PX + EVALSHA release"};
    for (std::size_t i = 0; i < 1000; ++i)
        h.pair("warm:" + std::to_string(i));
    const auto start = steady::now();
    for (std::size_t i = 0; i < count && steady::now() - start < 20s; ++i) {
        const auto t0 = steady::now();
        h.pair("base:" + std::to_string(i));
        r.us.push_back(micros(steady::now() - t0));
    }
    r.operations = r.us.size();
    r.seconds = std::chrono::duration<double>(steady::now() - start).count();
    return r;
}

// The same pair fanned out as a quorum client must send it: each command written to
// every node first, then every node's reply read (blocking reads, in node order).
// No coroutines, no reactor: a write and a read per node and command, the fewest
// system calls a client can make. Its ratio to the single-node baseline is what the
// fan-out itself costs on this machine (each node a redis-server woken per request,
// all of them sharing the cores with the client), whatever the client.
result_row baseline_fan_out(const std::vector<std::uint16_t>& ports, std::size_t count)
{
    std::vector<std::unique_ptr<hiredis_client>> nodes;
    for (auto port : ports)
        nodes.push_back(std::make_unique<hiredis_client>(port));
    result_row r{"baseline hiredis: the same pair fanned out to " + std::to_string(ports.size()) + " nodes"};
    bool all_granted = true;
    const auto round = [&](const std::string& key, bool release) {
        for (auto& n : nodes) {
            if (release)
                redisAppendCommand(n->c, release_format, n->release_sha.c_str(), key.data(), key.size());
            else
                redisAppendCommand(n->c, acquire_format, key.data(), key.size());
        }
        for (auto& n : nodes)
            for (int done = 0; !done;)
                if (redisBufferWrite(n->c, &done) != REDIS_OK)
                    return false;
        bool ok = true;
        for (auto& n : nodes) {
            void* reply = nullptr;
            if (redisGetReply(n->c, &reply) != REDIS_OK || !reply)
                return false;
            ok = ok && (release || static_cast<redisReply*>(reply)->type == REDIS_REPLY_STATUS);
            freeReplyObject(reply);
        }
        return ok;
    };
    const auto pair = [&](const std::string& key) { return round(key, false) && round(key, true); };
    for (std::size_t i = 0; i < 500; ++i)
        all_granted = pair("fan-warm:" + std::to_string(i)) && all_granted;
    const auto start = steady::now();
    for (std::size_t i = 0; i < count && steady::now() - start < 20s; ++i) {
        const auto t0 = steady::now();
        all_granted = pair("fan:" + std::to_string(i)) && all_granted;
        r.us.push_back(micros(steady::now() - t0));
    }
    r.operations = r.us.size();
    r.seconds = std::chrono::duration<double>(steady::now() - start).count();
    if (!all_granted)
        std::fprintf(stderr, "fan-out baseline: a node refused a fresh key or failed\n");
    return r;
}

// Adds one round's samples, operations and time to a row measured in rounds.
void merge(result_row& into, result_row&& part)
{
    into.us.insert(into.us.end(), part.us.begin(), part.us.end());
    into.operations += part.operations;
    into.seconds += part.seconds;
}

// A peer in the same run: node-redlock (bench/peers/node-redlock, installed by
// `npm ci --prefix bench/peers/node-redlock`). Its rows are skipped when node or the
// package is missing.
std::string peer_dir() { return DISTLOCK_SOURCE_DIR "/bench/peers/node-redlock"; }

bool peer_installed()
{
    return std::filesystem::exists(peer_dir() + "/node_modules/redlock") &&
           std::system("node --version > /dev/null 2>&1") == 0;
}

// node-redlock making the same pair over `ports`, one pair at a time, on `set` keys
// taken together (the caller checked peer_installed()). An empty row when it failed.
result_row peer_node_redlock(const std::vector<std::uint16_t>& ports, std::size_t count, std::size_t set = 1)
{
    result_row r{"peer node-redlock"};
    std::vector<std::string> argv{"node", peer_dir() + "/pair.mjs", std::to_string(count), std::to_string(set)};
    for (auto port : ports)
        argv.push_back(std::to_string(port));
    test::child peer{argv};
    if (auto line = peer.read_line(120s); line && line->starts_with("us ")) {
        std::istringstream samples{line->substr(3)};
        samples >> r.seconds; // the timed pairs' own time, without node's start-up
        for (double us = 0; samples >> us;)
            r.us.push_back(us);
    }
    r.operations = r.us.size();
    const auto status = peer.wait(10s);
    if (r.us.empty())
        std::fprintf(stderr, "node-redlock's run printed no samples (exit status %d)\n", status.value_or(-1));
    return r;
}

// Runs `body(t)` on `threads` threads at once (t = 0, 1, ...), each returning how
// many pairs it made: the row of all of them, timed from the start to the last join.
result_row on_threads(std::string name, int threads, const std::function<std::size_t(int)>& body)
{
    result_row r{std::move(name)};
    std::atomic<std::size_t> total{0};
    std::vector<std::thread> pool;
    const auto start = steady::now();
    for (int t = 0; t < threads; ++t)
        pool.emplace_back([&, t] { total += body(t); });
    for (auto& t : pool)
        t.join();
    r.operations = total;
    r.seconds = std::chrono::duration<double>(steady::now() - start).count();
    return r;
}

result_row baseline_threads(std::uint16_t port, int threads, std::chrono::seconds span)
{
    const auto start = steady::now();
    return on_threads("baseline hiredis: 64 threads x 64 connections, pairs", threads, [&](int t) {
        hiredis_client h{port};
        std::size_t n = 0;
        while (steady::now() - start < span)
            h.pair("thread:" + std::to_string(t) + ":" + std::to_string(n++));
        return n;
    });
}

// The floor of the threads row: 64 pairs in flight from a raw client, on 1 thread
// with one connection or on 2 threads with one connection each (32 in flight each).
// Each connection pipelines its acquires, reads their replies, then pipelines the
// releases: the fewest system calls per pair there can be. Whether a second thread
// adds pairs per second here depends on the machine, not on a lock library: one
// redis-server serves both threads, and the machine has two cores for all three.
result_row baseline_pipelined(std::uint16_t port, int threads, std::chrono::milliseconds span)
{
    const auto start = steady::now();
    return on_threads("baseline hiredis: 64 pairs pipelined, " + std::to_string(threads) + " thread(s)", threads,
                      [&](int t) {
                          hiredis_client h{port};
                          const int depth = 64 / threads;
                          std::vector<std::string> keys(static_cast<std::size_t>(depth));
                          std::size_t n = 0;
                          const auto replies = [&] {
                              bool ok = true;
                              for (int i = 0; i < depth; ++i) {
                                  void* reply = nullptr;
                                  ok = redisGetReply(h.c, &reply) == REDIS_OK && ok;
                                  freeReplyObject(reply);
                              }
                              return ok;
                          };
                          while (steady::now() - start < span) {
                              for (auto& k : keys) {
                                  k = "piped:" + std::to_string(t) + ":" + std::to_string(n++);
                                  redisAppendCommand(h.c, acquire_format, k.data(), k.size());
                              }
                              if (!replies())
                                  break;
                              for (const auto& k : keys)
                                  redisAppendCommand(h.c, release_format, h.release_sha.c_str(), k.data(), k.size());
                              if (!replies())
                                  break;
                          }
                          return n;
                      });
}

// redis-benchmark on the same server: the server's own floor for plain SET, one
// client and 64 clients. Printed for reference next to the hiredis baseline.
void redis_benchmark_reference(std::uint16_t port)
{
    for (int clients : {1, 64}) {
        const auto cmd = "redis-benchmark -h 127.0.0.1 -p " + std::to_string(port) + " -c " +
                         std::to_string(clients) + " -n " + std::to_string(clients == 1 ? 20000 : 200000) +
                         " -t set --csv 2>/dev/null";
        std::FILE* out = ::popen(cmd.c_str(), "r");
        if (!out)
            return;
        char line[512];
        std::string last;
        while (std::fgets(line, sizeof line, out))
            last = line;
        ::pclose(out);
        // "SET","rps","avg_latency_ms","min_latency_ms","p50_latency_ms",...
        std::vector<std::string> fields;
        std::string field;
        for (char c : last) {
            if (c == ',') {
                fields.push_back(field);
                field.clear();
            } else if (c != '"' && c != '\n') {
                field += c;
            }
        }
        fields.push_back(field);
        if (fields.size() < 5 || fields[0] != "SET")
            continue;
        std::printf("%-58s %8s %10.0f %9.1f   (reference: plain SET, no lock)\n",
                    ("redis-benchmark: SET, " + std::to_string(clients) + " client(s)").c_str(), "",
                    std::stod(fields[1]), std::stod(fields[4]) * 1000.0);
        json << "{\"name\":\"redis-benchmark SET " << clients << " clients\",\"ops_per_s\":" << fields[1]
             << ",\"p50_us\":" << std::stod(fields[4]) * 1000.0 << "}\n";
    }
}

// -- distlock workloads -----------------------------------------------------------

template <class Body>
void run_coroutine(asio::io_context& io, Body body)
{
    bool done = false;
    asio::co_spawn(io, body, [&](std::exception_ptr) { done = true; });
    while (!done)
        io.run_one();
    io.restart();
}

template <class Backend>
result_row sequential_pairs(const char* name, asio::io_context& io, Backend& backend, std::size_t count)
{
    result_row r{name};
    run_coroutine(io, [&]() -> asio::awaitable<void> {
        using mutex = dl::basic_distributed_mutex<Backend, dl::retry::none>;
        for (std::size_t i = 0; i < 1000; ++i) {
            mutex m{backend, "warm:" + std::to_string(i)};
            auto l = co_await m.lock();
            (void)co_await l->unlock();
        }
        const auto start = steady::now();
        for (std::size_t i = 0; i < count && steady::now() - start < 20s; ++i) {
            mutex m{backend, "seq:" + std::to_string(i)};
            const auto t0 = steady::now();
            auto l = co_await m.lock();
            if (!l)
                continue;
            (void)co_await l->unlock();
            r.us.push_back(micros(steady::now() - t0));
        }
        r.operations = r.us.size();
        r.seconds = std::chrono::duration<double>(steady::now() - start).count();
    });
    return r;
}

// One coroutine's share of a concurrent workload: lock + unlock pairs on distinct
// keys until `span` has passed since `start`; returns how many.
asio::awaitable<std::size_t> pairs_until(dl::redis::store& store, std::string prefix, steady::time_point start,
                                         steady::duration span)
{
    std::size_t n = 0;
    while (steady::now() - start < span) {
        dl::basic_distributed_mutex<dl::redis::store, dl::retry::none> m{store, prefix + std::to_string(n++)};
        auto l = co_await m.lock();
        if (l)
            (void)co_await l->unlock();
    }
    co_return n;
}

result_row concurrent_pairs(asio::io_context& io, dl::redis::store& store, int coroutines, std::chrono::seconds span)
{
    result_row r{"distlock: 64 coroutines, one connection, pairs"};
    std::size_t total = 0;
    int finished = 0;
    const auto start = steady::now();
    for (int c = 0; c < coroutines; ++c)
        asio::co_spawn(io, pairs_until(store, "co:" + std::to_string(c) + ":", start, span),
                       [&](std::exception_ptr, std::size_t n) {
                           total += n;
                           ++finished;
                       });
    while (finished < coroutines)
        io.run_one();
    io.restart();
    r.operations = total;
    r.seconds = std::chrono::duration<double>(steady::now() - start).count();
    return r;
}

// 64 coroutines on one store whose io_context runs on `threads` threads (the store's
// strand serialises its connection; the coroutines run on any of the threads).
result_row threaded_pairs(const test::redis_server& server, int threads, int coroutines,
                          std::chrono::milliseconds span, std::size_t connections = 1)
{
    result_row r{"distlock: 64 coroutines, one store, " + std::to_string(threads) + " thread(s), pairs"};
    asio::io_context io{threads};
    auto cfg = server.config();
    cfg.connections = connections;
    dl::redis::store store{io, cfg};
    std::atomic<std::size_t> total{0};
    std::atomic<int> finished{0};
    const auto start = steady::now();
    for (int c = 0; c < coroutines; ++c)
        asio::co_spawn(io, pairs_until(store, "thr:" + std::to_string(c) + ":", start, span),
                       [&](std::exception_ptr, std::size_t n) {
                           total += n;
                           if (++finished == coroutines)
                               store.disconnect();
                       });
    std::vector<std::thread> pool;
    for (int t = 1; t < threads; ++t)
        pool.emplace_back([&] { io.run(); });
    io.run();
    for (auto& t : pool)
        t.join();
    r.operations = total;
    r.seconds = std::chrono::duration<double>(steady::now() - start).count();
    return r;
}

// 8 workers on one key; each critical section is a GET/SET increment. Measures time to
// acquire, hand-off (release to the next holder's grant) and how often the lock
// changed hands; verifies that no update was lost.
result_row contended(asio::io_context& io, dl::redis::store& store, std::size_t sections)
{
    result_row r{"distlock: 8 workers, one key, GET/SET increment"};
    std::vector<double> handoff_us;
    std::size_t done = 0, changes = 0;
    int last_worker = -1;
    steady::time_point last_release{};
    int finished = 0;
    const auto start = steady::now();
    for (int w = 0; w < 8; ++w)
        asio::co_spawn(io, [&, w]() -> asio::awaitable<void> {
            dl::basic_distributed_mutex<dl::redis::store> m{
                store, "contended", {.ttl = 10s}, dl::retry::exponential_backoff{.initial = 10ms, .max = 200ms, .deadline = 30s}};
            while (done < sections && steady::now() - start < 30s) {
                const auto t0 = steady::now();
                auto l = co_await m.lock();
                if (!l)
                    break;
                const auto granted = steady::now();
                r.us.push_back(micros(granted - t0));
                if (last_worker != -1 && last_worker != w) {
                    ++changes;
                    handoff_us.push_back(micros(granted - last_release));
                }
                auto get = dl::redis::resp::command({"GET", "counter"});
                auto v = co_await store.execute_command(std::move(get));
                const long n = v && v.value().is_string() ? std::stol(v.value().text) : 0;
                auto set = dl::redis::resp::command({"SET", "counter", std::to_string(n + 1)});
                (void)co_await store.execute_command(std::move(set));
                ++done;
                last_worker = w;
                last_release = steady::now();
                (void)co_await l->unlock();
            }
            ++finished;
        }, asio::detached);
    while (finished < 8)
        io.run_one();
    io.restart();
    r.operations = done;
    r.seconds = std::chrono::duration<double>(steady::now() - start).count();
    long counter = -1;
    run_coroutine(io, [&]() -> asio::awaitable<void> {
        auto get = dl::redis::resp::command({"GET", "counter"});
        auto v = co_await store.execute_command(std::move(get));
        counter = v && v.value().is_string() ? std::stol(v.value().text) : -1;
    });
    const double h50 = bench::nearest_rank(handoff_us, 0.50);
    const double h99 = bench::nearest_rank(handoff_us, 0.99);
    char extra[256];
    std::snprintf(extra, sizeof extra, ",\"handoff_p50_us\":%.1f,\"handoff_p99_us\":%.1f,\"changed_hands\":%zu,\"counter_ok\":%s",
                  h50, h99, changes, counter == static_cast<long>(done) ? "true" : "false");
    r.extra = extra;
    std::printf("    hand-off p50 %.1f us, p99 %.1f us; changed hands %zu of %zu; counter %ld (%s)\n", h50, h99,
                changes, done, counter, counter == static_cast<long>(done) ? "no update lost" : "LOST UPDATES");
    if (counter != static_cast<long>(done))
        std::exit(1);
    return r;
}

// -- Contention across processes ---------------------------------------------------
//
// 8 processes, each with its own store and connection (separate servers, as far as the
// lock can tell), take one key until a shared counter in Redis reaches `sections`;
// each critical section is a GET/SET increment of it. Each prints one line per
// critical section: when it asked, was granted and called unlock(), on the steady
// clock (CLOCK_MONOTONIC, one clock for every process of the machine).

// `woke` is when the last wait of lock() ended (set by the mutex's observer; 0 when
// it did not wait): the fifth number of a line.
template <class Mutex>
asio::awaitable<void> contend(dl::redis::store& store, Mutex& m, long sections, const std::string& counter,
                              const steady::time_point& woke)
{
    const auto start = steady::now();
    const auto stamp = [](steady::time_point t) { return static_cast<long long>(t.time_since_epoch().count()); };
    while (steady::now() - start < 60s) {
        const auto asked = steady::now();
        auto l = co_await m.lock();
        if (!l) {
            std::printf("last %lld %lld\n", stamp(asked), stamp(steady::now()));
            break;
        }
        const auto granted = steady::now();
        auto v = co_await store.execute("GET", counter);
        const long n = v && v.value().is_string() ? std::stol(v.value().text) : 0;
        if (n >= sections) {
            (void)co_await l->unlock();
            // The wait that found the work done counts too: a process that never
            // held the lock before the end waited all along.
            std::printf("last %lld %lld\n", stamp(asked), stamp(granted));
            break;
        }
        (void)co_await store.execute("SET", counter, std::to_string(n + 1));
        const auto released = steady::now();
        (void)co_await l->unlock();
        std::printf("%lld %lld %lld %lld\n", stamp(asked), stamp(granted), stamp(released),
                    woke > asked ? stamp(woke) : 0LL);
    }
    std::printf("done\n");
    std::fflush(stdout);
}

// The body of one contender: argv PORT FAIR SECTIONS RESOURCE.
int contender_main(char** argv)
{
    asio::io_context io;
    dl::redis::config cfg;
    cfg.port = static_cast<std::uint16_t>(std::stoi(argv[0]));
    const bool fair = std::string{argv[1]} == "1";
    const long sections = std::stol(argv[2]);
    const std::string resource = argv[3];
    dl::redis::store store{io, cfg};
    const auto backoff = dl::retry::exponential_backoff{.initial = 10ms, .max = 200ms, .deadline = 60s};
    run_coroutine(io, [&]() -> asio::awaitable<void> {
        (void)co_await store.execute("PING"); // connected before the start
        std::printf("ready\n");
        std::fflush(stdout);
        char go[16];
        if (!std::fgets(go, sizeof go, stdin))
            co_return;
        steady::time_point woke{};
        const dl::observe::callback wakes{[&woke](const dl::event& e) {
            if (std::holds_alternative<dl::wake_event>(e))
                woke = steady::now();
        }};
        if (fair) {
            dl::basic_distributed_mutex<dl::redis::store, dl::acquire::fair, dl::retry::exponential_backoff,
                                        dl::observe::callback>
                m{store, resource, {.ttl = 10s}, backoff, wakes};
            co_await contend(store, m, sections, resource + ":counter", woke);
        } else {
            dl::basic_distributed_mutex<dl::redis::store, dl::retry::exponential_backoff, dl::observe::callback> m{
                store, resource, {.ttl = 10s}, backoff, wakes};
            co_await contend(store, m, sections, resource + ":counter", woke);
        }
    });
    store.disconnect();
    io.run();
    return 0;
}

// The floor of a hand-off across processes: the same processes taking turns with the
// fewest requests a hand-off can take, by hiredis with no lock library. The order is
// fixed (a ring), as a fair queue's is: the holder's release is one script that
// deletes the lock and publishes on the next process's channel, and that process,
// blocked on its subscription, takes the lock with SET NX PX. Critical sections are
// the same GET/SET increment. Prints what contender_main prints; "asked" is the end
// of the process's previous turn. argv PORT INDEX PROCESSES SECTIONS RESOURCE.
int raw_contender_main(char** argv)
{
    const auto port = std::stoi(argv[0]);
    const int index = std::stoi(argv[1]);
    const int processes = std::stoi(argv[2]);
    const long rounds = std::stol(argv[3]) / processes;
    const std::string lock = std::string{argv[4]} + ":lock";
    const std::string counter = std::string{argv[4]} + ":counter";
    const auto turn = [&](int i) { return std::string{argv[4]} + ":turn:" + std::to_string(i); };
    redisContext* cmd = redisConnect("127.0.0.1", port);
    redisContext* sub = redisConnect("127.0.0.1", port);
    if (!cmd || cmd->err || !sub || sub->err)
        return 1;
    const timeval patience{10, 0}; // a turn that never comes ends the process
    redisSetTimeout(sub, patience);
    freeReplyObject(redisCommand(sub, "SUBSCRIBE %s", turn(index).c_str()));
    const std::string next = turn((index + 1) % processes);
    const std::string me = std::to_string(index);
    std::printf("ready\n");
    std::fflush(stdout);
    char go[16];
    if (!std::fgets(go, sizeof go, stdin))
        return 1;
    auto asked = steady::now();
    for (long r = 0; r < rounds; ++r) {
        auto woke = steady::time_point{};
        if (index != 0 || r != 0) {
            void* message = nullptr;
            if (redisGetReply(sub, &message) != REDIS_OK)
                break;
            freeReplyObject(message);
            woke = steady::now();
        }
        auto* got = static_cast<redisReply*>(redisCommand(cmd, "SET %s %s NX PX 10000", lock.c_str(), me.c_str()));
        const bool ok = got && got->type == REDIS_REPLY_STATUS;
        freeReplyObject(got);
        if (!ok)
            break;
        const auto granted = steady::now();
        auto* v = static_cast<redisReply*>(redisCommand(cmd, "GET %s", counter.c_str()));
        const long n = v && v->type == REDIS_REPLY_STRING ? std::stol(v->str) : 0;
        freeReplyObject(v);
        freeReplyObject(redisCommand(cmd, "SET %s %ld", counter.c_str(), n + 1));
        const auto released = steady::now();
        freeReplyObject(redisCommand(cmd,
                                     "EVAL %s 1 %s %s %s",
                                     "if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]); "
                                     "redis.call('PUBLISH', ARGV[2], ARGV[1]) end",
                                     lock.c_str(), me.c_str(), next.c_str()));
        std::printf("%lld %lld %lld %lld\n", static_cast<long long>(asked.time_since_epoch().count()),
                    static_cast<long long>(granted.time_since_epoch().count()),
                    static_cast<long long>(released.time_since_epoch().count()),
                    static_cast<long long>(woke.time_since_epoch().count()));
        asked = steady::now();
    }
    std::printf("done\n");
    std::fflush(stdout);
    redisFree(sub);
    redisFree(cmd);
    return 0;
}

// The server's own time for the scripts of a set of `size` locks: `acquire_all`
// alternating with a plain DEL of the locks, then `release_all` alternating with an
// MSET that puts the locks back, 3,000 of each pipelined on one hiredis connection
// (the same keys every time, as the store's layout names them); INFO commandstats
// separates the scripts (EVALSHA) from the plain commands. Microseconds per call.
std::pair<double, double> script_server_us(std::uint16_t port, std::size_t size)
{
    asio::io_context unused;
    dl::redis::store layout{unused, dl::redis::config{}}; // key names only, never connects
    redisContext* c = redisConnect("127.0.0.1", port);
    const auto load = [&](std::string_view text) {
        auto* r = static_cast<redisReply*>(redisCommand(c, "SCRIPT LOAD %b", text.data(), text.size()));
        std::string sha = r && r->type == REDIS_REPLY_STRING ? r->str : "";
        freeReplyObject(r);
        return sha;
    };
    const auto acquire_sha = load(dl::redis::scripts::acquire_all());
    const auto release_sha = load(dl::redis::scripts::release_all());
    const std::string owner = dl::owner_token::generate().to_hex();
    std::vector<std::string> locks, channels, fences;
    for (std::size_t k = 0; k < size; ++k) {
        const auto id = "script-cost:" + std::to_string(k);
        locks.push_back(layout.lock_key(id));
        channels.push_back(layout.channel(id));
        fences.push_back(layout.fence_key(id));
    }
    std::sort(fences.begin(), fences.end());
    fences.erase(std::unique(fences.begin(), fences.end()), fences.end());
    const auto send = [&](const std::vector<std::string>& args) {
        std::vector<const char*> argv;
        std::vector<std::size_t> lengths;
        for (const auto& a : args) {
            argv.push_back(a.data());
            lengths.push_back(a.size());
        }
        redisAppendCommandArgv(c, static_cast<int>(args.size()), argv.data(), lengths.data());
    };
    const auto evalsha_us = [&](const std::vector<std::string>& script, const std::vector<std::string>& between) {
        freeReplyObject(redisCommand(c, "CONFIG RESETSTAT"));
        constexpr int calls = 3000;
        for (int i = 0; i < calls; ++i) {
            send(script);
            send(between);
        }
        for (int i = 0; i < 2 * calls; ++i) {
            void* reply = nullptr;
            if (redisGetReply(c, &reply) != REDIS_OK)
                return -1.0;
            freeReplyObject(reply);
        }
        auto* info = static_cast<redisReply*>(redisCommand(c, "INFO commandstats"));
        double us = -1;
        if (info && info->type == REDIS_REPLY_STRING) {
            const std::string_view text{info->str, info->len};
            const auto at = text.find("cmdstat_evalsha:");
            const auto field = at == std::string_view::npos ? at : text.find("usec_per_call=", at);
            if (field != std::string_view::npos)
                us = std::strtod(text.data() + field + 14, nullptr);
        }
        freeReplyObject(info);
        return us;
    };
    std::vector<std::string> acquire{"EVALSHA", acquire_sha, std::to_string(size + fences.size())};
    acquire.insert(acquire.end(), locks.begin(), locks.end());
    acquire.insert(acquire.end(), fences.begin(), fences.end());
    acquire.insert(acquire.end(), {owner, "10000", std::to_string(size)});
    std::vector<std::string> del{"DEL"};
    del.insert(del.end(), locks.begin(), locks.end());
    std::vector<std::string> release{"EVALSHA", release_sha, std::to_string(size)};
    release.insert(release.end(), locks.begin(), locks.end());
    release.insert(release.end(), {owner, "0"});
    release.insert(release.end(), channels.begin(), channels.end());
    std::vector<std::string> mset{"MSET"};
    for (const auto& l : locks)
        mset.insert(mset.end(), {l, owner + ":1"});
    const double acquired = evalsha_us(acquire, del);
    const double released = evalsha_us(release, mset);
    redisFree(c);
    return {acquired, released};
}

// One round trip on this server: the p50 of sequential PINGs by hiredis.
double round_trip_us(std::uint16_t port)
{
    redisContext* c = redisConnect("127.0.0.1", port);
    std::vector<double> us;
    for (int i = 0; i < 2000; ++i) {
        const auto t0 = steady::now();
        freeReplyObject(redisCommand(c, "PING"));
        us.push_back(micros(steady::now() - t0));
    }
    redisFree(c);
    return bench::nearest_rank(us, 0.5);
}

enum class contention { raw, setnx, fair, peer };

// The server's commands since the last CONFIG RESETSTAT (INFO commandstats): calls to
// scripts (EVALSHA and EVAL) and their mean time on the server, in microseconds.
struct script_stats {
    long long calls = 0;
    double us_per_call = 0;
};

script_stats scripts_since_reset(std::uint16_t port, bool reset_after)
{
    script_stats out;
    redisContext* c = redisConnect("127.0.0.1", port);
    if (!c || c->err)
        return out;
    auto* info = static_cast<redisReply*>(redisCommand(c, "INFO commandstats"));
    double total_us = 0;
    if (info && info->type == REDIS_REPLY_STRING) {
        const std::string_view text{info->str, info->len};
        for (const std::string_view name : {"cmdstat_evalsha:", "cmdstat_eval:"}) {
            const auto at = text.find(name);
            if (at == std::string_view::npos)
                continue;
            const auto calls = text.find("calls=", at), usec = text.find("usec=", at);
            if (calls != std::string_view::npos && usec != std::string_view::npos) {
                out.calls += std::strtoll(text.data() + calls + 6, nullptr, 10);
                total_us += std::strtod(text.data() + usec + 5, nullptr);
            }
        }
    }
    freeReplyObject(info);
    if (reset_after)
        freeReplyObject(redisCommand(c, "CONFIG RESETSTAT"));
    redisFree(c);
    out.us_per_call = out.calls > 0 ? total_us / static_cast<double>(out.calls) : 0;
    return out;
}

// The servers' work behind a client's pairs: each server's main thread's time on a
// CPU (/proc/<pid>/schedstat, in ns) and its scripts' own time (INFO commandstats),
// summed over the servers. A pair is two script calls on each server (the grant and
// the release, for distlock and node-redlock alike), so the pairs are counted as
// the script calls on all servers over twice the servers: the start-up's and the
// warm-up's work is spread over the pairs the same way for both clients.
struct server_work {
    double cpu_us = 0, script_us = 0;
    long long calls = 0; // script calls on all the servers
    std::size_t servers = 0;

    double per_pair(double total) const
    {
        return calls > 0 ? total / (static_cast<double>(calls) / (2.0 * static_cast<double>(servers))) : 0.0;
    }
    // Another round's work on the same servers.
    void add(const server_work& round)
    {
        servers = round.servers;
        cpu_us += round.cpu_us;
        script_us += round.script_us;
        calls += round.calls;
    }
    // Its two per-pair figures, among a row's JSON fields.
    void record(result_row& row) const
    {
        row.extra += ",\"server_cpu_us_per_pair\":" + std::to_string(per_pair(cpu_us)) +
                     ",\"server_script_us_per_pair\":" + std::to_string(per_pair(script_us));
    }
};

double main_thread_cpu_us(pid_t pid)
{
    std::ifstream in{"/proc/" + std::to_string(pid) + "/schedstat"};
    double ns = 0;
    in >> ns;
    return ns / 1000.0;
}

template <class Client>
server_work servers_behind(const std::vector<test::redis_server*>& servers, Client&& client)
{
    std::vector<double> cpu_before;
    for (auto* s : servers) {
        (void)scripts_since_reset(s->port(), true);
        cpu_before.push_back(main_thread_cpu_us(s->pid()));
    }
    client();
    server_work w;
    w.servers = servers.size();
    for (std::size_t i = 0; i < servers.size(); ++i) {
        const auto stats = scripts_since_reset(servers[i]->port(), false);
        w.cpu_us += main_thread_cpu_us(servers[i]->pid()) - cpu_before[i];
        w.script_us += stats.us_per_call * static_cast<double>(stats.calls);
        w.calls += stats.calls;
    }
    return w;
}

result_row contended_processes(std::uint16_t port, contention how, long sections, double rtt_us,
                               double* handoff_p50 = nullptr)
{
    constexpr int workers = 8;
    const char* names[] = {"baseline hiredis: 8 processes, one key, a ring of turns", "distlock: 8 processes, one key, setnx",
                           "distlock: 8 processes, one key, acquire::fair", "peer node-redlock: 8 processes, one key"};
    const char* resources[] = {"processes:raw", "processes:setnx", "processes:fair", "processes:peer"};
    result_row r{names[static_cast<int>(how)]};
    const std::string resource = resources[static_cast<int>(how)];
    std::vector<std::unique_ptr<test::child>> children;
    for (int w = 0; w < workers; ++w) {
        const auto argv =
            how == contention::raw
                ? std::vector<std::string>{test::self_path(), "--raw-contender", std::to_string(port),
                                           std::to_string(w), std::to_string(workers), std::to_string(sections),
                                           resource}
            : how == contention::peer
                ? std::vector<std::string>{"node", peer_dir() + "/contend.mjs", std::to_string(port),
                                           std::to_string(sections), resource}
                : std::vector<std::string>{test::self_path(), "--contender", std::to_string(port),
                                           how == contention::fair ? "1" : "0", std::to_string(sections), resource};
        children.push_back(std::make_unique<test::child>(argv));
    }
    for (auto& c : children)
        if (c->read_line(10s) != std::optional<std::string>{"ready"})
            return r;
    struct section {
        long long asked, granted, released, woke;
        int worker;
    };
    std::vector<section> all, lasts; // lasts: each process's last wait (asked, granted)
    (void)scripts_since_reset(port, true);
    const auto start = steady::now();
    for (auto& c : children)
        c->write_line("go");
    for (int w = 0; w < workers; ++w)
        while (auto line = children[static_cast<std::size_t>(w)]->read_line(90s)) {
            if (*line == "done")
                break;
            section s{};
            s.worker = w;
            if (std::sscanf(line->c_str(), "last %lld %lld", &s.asked, &s.granted) == 2)
                lasts.push_back(s);
            else if (std::sscanf(line->c_str(), "%lld %lld %lld %lld", &s.asked, &s.granted, &s.released, &s.woke) == 4)
                all.push_back(s);
        }
    r.seconds = std::chrono::duration<double>(steady::now() - start).count();
    for (auto& c : children)
        (void)c->wait(10s);
    const auto scripts = scripts_since_reset(port, false);
    std::sort(all.begin(), all.end(), [](const section& a, const section& b) { return a.granted < b.granted; });
    std::vector<double> handoff_us, to_wake_us, wake_to_grant_us;
    std::size_t changes = 0;
    double held_ns = 0;
    for (std::size_t i = 0; i < all.size(); ++i) {
        r.us.push_back(static_cast<double>(all[i].granted - all[i].asked) / 1000.0);
        held_ns += static_cast<double>(all[i].released - all[i].granted);
        if (i > 0 && all[i].worker != all[i - 1].worker) {
            ++changes;
            handoff_us.push_back(static_cast<double>(all[i].granted - all[i - 1].released) / 1000.0);
            // The hand-off in two: until the next holder woke (the release and its
            // notification), and from then until it held the lock (its acquire).
            if (all[i].woke > all[i - 1].released && all[i].woke <= all[i].granted) {
                to_wake_us.push_back(static_cast<double>(all[i].woke - all[i - 1].released) / 1000.0);
                wake_to_grant_us.push_back(static_cast<double>(all[i].granted - all[i].woke) / 1000.0);
            }
        }
    }
    r.operations = all.size();
    // Each process's last wait (the one that found the work done) is a wait as well.
    for (const auto& s : lasts)
        r.us.push_back(static_cast<double>(s.granted - s.asked) / 1000.0);
    const double section_us = all.empty() ? 0 : held_ns / 1000.0 / static_cast<double>(all.size());
    const double h50 = bench::nearest_rank(handoff_us, 0.50);
    const double worst = r.pct(1.0);
    // The worst wait among the lock() calls made once every process had held the
    // lock: a process's first lock() also pays for its start (the first script load,
    // the first subscription), and all eight start at once. Reported beside the worst
    // of all, never instead of it; -1 when some process first held the lock only at
    // the end (it starved).
    double worst_later = -1;
    {
        std::vector<long long> first(workers, 0);
        for (const auto* part : {&all, &lasts})
            for (const auto& s : *part) {
                auto& f = first[static_cast<std::size_t>(s.worker)];
                f = f == 0 ? s.granted : std::min(f, s.granted);
            }
        const long long everyone = *std::max_element(first.begin(), first.end());
        const bool steady_part = std::count(first.begin(), first.end(), 0LL) == 0 &&
                                 std::any_of(all.begin(), all.end(), [&](const section& s) { return s.asked >= everyone; });
        if (steady_part) {
            worst_later = 0;
            for (const auto* part : {&all, &lasts})
                for (const auto& s : *part)
                    if (s.asked >= everyone)
                        worst_later = std::max(worst_later, static_cast<double>(s.granted - s.asked) / 1000.0);
        }
    }
    if (handoff_p50)
        *handoff_p50 = h50;
    const double to_wake = bench::nearest_rank(to_wake_us, 0.5), wake_to_grant = bench::nearest_rank(wake_to_grant_us, 0.5);
    // Another waiter's turn comes after at most the others' sections: the worst wait
    // is compared with 2 x waiters x (section + hand-off).
    const double bound = 2.0 * (workers - 1) * (section_us + h50);
    const double scripts_per_section =
        all.empty() ? 0 : static_cast<double>(scripts.calls) / static_cast<double>(all.size());
    char extra[640];
    std::snprintf(extra, sizeof extra,
                  ",\"changed_hands\":%zu,\"handoff_p50_us\":%.1f,\"handoff_p50_rtt\":%.2f,\"worst_acquire_us\":%.1f,"
                  "\"worst_vs_bound\":%.2f,\"worst_once_all_held_us\":%.1f,\"worst_once_all_held_vs_bound\":%.2f,"
                  "\"release_to_wake_p50_us\":%.1f,\"wake_to_grant_p50_us\":%.1f,"
                  "\"scripts_per_section\":%.2f,\"script_server_us\":%.1f",
                  changes, h50, rtt_us > 0 ? h50 / rtt_us : 0, worst, bound > 0 ? worst / bound : 0, worst_later,
                  worst_later >= 0 && bound > 0 ? worst_later / bound : -1.0, to_wake, wake_to_grant, scripts_per_section,
                  scripts.us_per_call);
    r.extra = extra;
    std::printf("    changed hands %zu of %zu (%.0f%%); hand-off p50 %.1f us = %.2f round trips (%.1f us); worst "
                "acquire %.0f us = %.2f x the bound 2 x 7 x (section %.0f us + hand-off)\n",
                changes, all.size(), all.empty() ? 0.0 : 100.0 * static_cast<double>(changes) / static_cast<double>(all.size() - 1),
                h50, rtt_us > 0 ? h50 / rtt_us : 0, rtt_us, worst, bound > 0 ? worst / bound : 0, section_us);
    if (worst_later >= 0)
        std::printf("    once every process had held the lock: worst acquire %.0f us = %.2f x the bound\n",
                    worst_later, bound > 0 ? worst_later / bound : 0);
    else
        std::printf("    once every process had held the lock: none (a process first held it at the end)\n");
    if (!to_wake_us.empty())
        std::printf("    of %zu hand-offs to a woken waiter: release to wake-up p50 %.1f us, wake-up to grant p50 %.1f us\n",
                    to_wake_us.size(), to_wake, wake_to_grant);
    std::printf("    scripts on the server: %.2f per critical section, %.1f us each\n", scripts_per_section,
                scripts.us_per_call);
    return r;
}

result_row multi(asio::io_context& io, dl::redis::store& store, std::size_t size, std::size_t count)
{
    result_row r{"distlock: lock_all of " + std::to_string(size) + " + unlock"};
    run_coroutine(io, [&]() -> asio::awaitable<void> {
        const auto start = steady::now();
        for (std::size_t i = 0; i < count && steady::now() - start < 20s; ++i) {
            std::vector<std::string> ids;
            for (std::size_t k = 0; k < size; ++k)
                ids.push_back("multi:" + std::to_string(i) + ":" + std::to_string(k));
            const auto t0 = steady::now();
            auto all = co_await dl::lock_all(store, ids, {.ttl = 10s}, dl::retry::none{});
            if (!all)
                continue;
            (void)co_await all->unlock();
            r.us.push_back(micros(steady::now() - t0));
        }
        r.operations = r.us.size();
        r.seconds = std::chrono::duration<double>(steady::now() - start).count();
    });
    return r;
}

// 10,000 leases held with a watchdog (TTL 3 s: an extension each per second) on one
// connection, for 5 s: the client's CPU share and the commands Redis processed.
result_row watchdog_cost(asio::io_context& io, dl::redis::store& store, std::size_t leases)
{
    result_row r{"distlock: 10,000 held leases renewing (watchdog)"};
    std::vector<dl::lease> held;
    held.reserve(leases);
    run_coroutine(io, [&]() -> asio::awaitable<void> {
        for (std::size_t i = 0; i < leases; ++i) {
            dl::basic_distributed_mutex<dl::redis::store, dl::retry::none, dl::renew::watchdog> m{
                store, "held:" + std::to_string(i), {.ttl = 3s}};
            auto l = co_await m.lock();
            if (l)
                held.push_back(std::move(*l));
        }
    });
    auto commands = [&] {
        long n = 0;
        run_coroutine(io, [&]() -> asio::awaitable<void> {
            auto info = dl::redis::resp::command({"INFO", "stats"});
            auto reply = co_await store.execute_command(std::move(info));
            const auto& text = reply.value().text;
            const auto at = text.find("total_commands_processed:");
            n = at == std::string::npos ? 0 : std::stol(text.substr(at + 25));
        });
        return n;
    };
    auto cpu = [] {
        rusage u{};
        getrusage(RUSAGE_SELF, &u);
        return u.ru_utime.tv_sec + u.ru_stime.tv_sec + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
    };
    const long commands_before = commands();
    const double cpu_before = cpu();
    const auto start = steady::now();
    io.run_for(5s);
    io.restart();
    const double wall = std::chrono::duration<double>(steady::now() - start).count();
    const double cpu_share = (cpu() - cpu_before) / wall * 100.0;
    const long per_second = static_cast<long>(static_cast<double>(commands() - commands_before) / wall);
    std::size_t still_valid = 0;
    for (auto& l : held)
        still_valid += l.valid();
    run_coroutine(io, [&]() -> asio::awaitable<void> {
        for (auto& l : held)
            (void)co_await l.unlock();
    });
    r.operations = held.size();
    r.seconds = wall;
    char extra[160];
    std::snprintf(extra, sizeof extra, ",\"client_cpu_percent\":%.1f,\"redis_commands_per_s\":%ld,\"still_valid\":%zu",
                  cpu_share, per_second, still_valid);
    r.extra = extra;
    std::printf("    client CPU %.1f%% of one core; Redis %ld commands/s; %zu of %zu leases still valid\n", cpu_share,
                per_second, still_valid, held.size());
    return r;
}

// Client memory per held lease (10,000, with and without the watchdog) and per
// waiting lock() (1,000 on one held key), from the live-bytes counter; and whether
// waiting grows with time (retries must not accumulate state).
template <class... Policies>
double bytes_per_held_lease(asio::io_context& io, dl::redis::store& store, std::size_t leases, const char* prefix)
{
    std::vector<dl::lease> held;
    held.reserve(leases);
    const auto before = live_bytes.load();
    run_coroutine(io, [&]() -> asio::awaitable<void> {
        for (std::size_t i = 0; i < leases; ++i) {
            dl::basic_distributed_mutex<dl::redis::store, dl::retry::none, Policies...> m{
                store, prefix + std::to_string(i), {.ttl = 30s}};
            if (auto l = co_await m.lock())
                held.push_back(std::move(*l));
        }
    });
    const auto after = live_bytes.load();
    const auto count = held.size();
    run_coroutine(io, [&]() -> asio::awaitable<void> {
        for (auto& l : held)
            (void)co_await l.unlock();
    });
    return count ? static_cast<double>(after - before) / static_cast<double>(count) : 0;
}

void memory_rows(asio::io_context& io, dl::redis::store& store, const dl::redis::config& cfg)
{
    dl::redis::store other{io, cfg};
    const double plain = bytes_per_held_lease<>(io, store, 10000, "mem:plain:");
    const double watched = bytes_per_held_lease<dl::renew::watchdog>(io, store, 10000, "mem:watched:");

    // 1,000 waiters on a key another store holds; each gives up after 20 s at most.
    constexpr int waiters = 1000;
    std::optional<dl::lease> holder;
    run_coroutine(io, [&]() -> asio::awaitable<void> {
        dl::basic_distributed_mutex<dl::redis::store, dl::retry::none> m{other, "mem:contended", {.ttl = 60s}};
        if (auto l = co_await m.lock())
            holder.emplace(std::move(*l));
    });
    const auto before = live_bytes.load();
    int acquired = 0;
    for (int w = 0; w < waiters; ++w)
        asio::co_spawn(io, [&]() -> asio::awaitable<void> {
            dl::basic_distributed_mutex<dl::redis::store> m{
                store, "mem:contended", {.ttl = 10s},
                dl::retry::exponential_backoff{.initial = 20ms, .max = 50ms, .deadline = 20s}};
            if (auto l = co_await m.lock()) {
                ++acquired;
                (void)co_await l->unlock();
            }
        }, asio::detached);
    io.run_for(1s);
    const auto waiting_1s = live_bytes.load();
    io.run_for(2s); // some 40 more retry delays each
    const auto waiting_3s = live_bytes.load();
    io.restart();
    run_coroutine(io, [&]() -> asio::awaitable<void> { (void)co_await holder->unlock(); });
    const auto until = steady::now() + 30s;
    while (acquired < waiters && steady::now() < until) {
        io.run_for(100ms);
        io.restart();
    }
    const double per_waiter = static_cast<double>(waiting_1s - before) / waiters;
    const double growth = static_cast<double>(waiting_3s - waiting_1s);
    std::printf("%-58s %8s %10s   %.0f B per lease without renewal, %.0f B with the watchdog (target <= 4096)\n",
                "memory: 10,000 held leases", "10000", "", plain, watched);
    std::printf("%-58s %8d %10s   %.0f B per waiter; %+.0f B over 2 s more of retries; %d of %d acquired after\n",
                "memory: 1,000 lock() waiting on one held key", waiters, "", per_waiter, growth, acquired, waiters);
    other.disconnect();
    json << "{\"name\":\"memory per held lease\",\"bytes_plain\":" << plain << ",\"bytes_watchdog\":" << watched
         << "}\n{\"name\":\"memory per waiting lock\",\"bytes_per_waiter\":" << per_waiter
         << ",\"growth_bytes_2s\":" << growth << ",\"acquired\":" << acquired << "}\n";
}

// Keys left on a fresh server after `count` distinct resources were each locked and
// released once (64 coroutines on one store, bounded by count and 120 s), read at once
// and again after the locks' TTL has passed.
void fence_state_row(asio::io_context& io, std::size_t count, const char* name)
{
    test::redis_server server;
    dl::redis::store store{io, server.config()};
    constexpr dl::duration ttl = 1s;
    std::size_t next = 0, done = 0, failed = 0;
    int finished = 0;
    const auto start = steady::now();
    constexpr int coroutines = 64;
    for (int c = 0; c < coroutines; ++c)
        asio::co_spawn(io, [&]() -> asio::awaitable<void> {
            while (next < count && steady::now() - start < 120s) {
                dl::basic_distributed_mutex<dl::redis::store, dl::retry::none> m{
                    store, "order:" + std::to_string(next++), {.ttl = ttl}};
                auto l = co_await m.lock();
                if (l && co_await l->unlock())
                    ++done;
                else
                    ++failed;
            }
            ++finished;
        }, asio::detached);
    while (finished < coroutines)
        io.run_one();
    io.restart();
    const double seconds = std::chrono::duration<double>(steady::now() - start).count();
    const auto ask = [&](const char* what) {
        long long n = -1;
        run_coroutine(io, [&]() -> asio::awaitable<void> {
            auto r = co_await store.execute(what);
            if (r)
                n = r.value().integer;
        });
        return n;
    };
    const auto used_memory = [&] {
        long long bytes = -1;
        run_coroutine(io, [&]() -> asio::awaitable<void> {
            auto r = co_await store.execute("MEMORY", "STATS");
            if (!r || r.value().elements.size() < 2)
                co_return;
            for (std::size_t i = 0; i + 1 < r.value().elements.size(); i += 2)
                if (r.value().elements[i].text == "dataset.bytes")
                    bytes = r.value().elements[i + 1].integer;
        });
        return bytes;
    };
    const auto at_once = ask("DBSIZE");
    const auto bytes_at_once = used_memory();
    // Expired keys go lazily or by Redis's sampling; wait for the count to settle (at
    // most one fence key per hash slot stays).
    const auto settle_until = steady::now() + ttl + 30s;
    auto later = at_once;
    for (std::this_thread::sleep_for(ttl); steady::now() < settle_until; std::this_thread::sleep_for(500ms)) {
        later = ask("DBSIZE");
        if (later <= 16'384)
            break;
    }
    const auto bytes_later = used_memory();
    std::printf("%-58s %8zu %10.0f   keys: %lld at once (%lld B), %lld after the TTL (%lld B); %zu failed\n",
                name, done, static_cast<double>(done) / seconds, at_once, bytes_at_once, later, bytes_later, failed);
    json << "{\"name\":\"" << name << "\",\"resources\":" << done << ",\"keys_at_once\":" << at_once
         << ",\"keys_after\":" << later << ",\"dataset_bytes_at_once\":" << bytes_at_once
         << ",\"dataset_bytes_after\":" << bytes_later << "}\n";
    store.disconnect();
}

// Time to compile (g++ -O2, the median of three) a file that takes and releases one
// lock, against a file with <asio.hpp> and one coroutine awaiting a timer: on the
// in-process store and on Redis, header-only and separately compiled (README.md,
// "Separate compilation": the file defines DISTLOCK_SEPARATE_COMPILATION and another
// file of the program would include distlock/src/).
void compile_cost()
{
    auto time_compile = [](const std::string& source) {
        const auto dir = std::filesystem::temp_directory_path();
        const auto file = dir / "distlock_compile_cost.cpp";
        std::ofstream{file} << source;
        std::vector<double> runs;
        for (int i = 0; i < 3; ++i) {
            const auto t0 = steady::now();
            const auto cmd = "g++ -std=c++20 -O2 -I" DISTLOCK_SOURCE_DIR "/include -c " + file.string() + " -o " +
                             (dir / "distlock_compile_cost.o").string();
            if (std::system(cmd.c_str()) != 0)
                return -1.0;
            runs.push_back(std::chrono::duration<double>(steady::now() - t0).count());
        }
        std::sort(runs.begin(), runs.end());
        return runs[1];
    };
    // What every coroutine service already pays: <asio.hpp> and one coroutine awaiting
    // a timer. Against it, a coroutine that takes and releases a lock.
    const double asio_only = time_compile(
        "#include <asio.hpp>\n"
        "asio::awaitable<void> f() { asio::steady_timer t{co_await asio::this_coro::executor};\n"
        "  co_await t.async_wait(asio::use_awaitable); }\n"
        "int main() { asio::io_context io; asio::co_spawn(io, f(), asio::detached); io.run(); }\n");
    auto locking = [](const std::string& store, const std::string& header, const std::string& make) {
        return "#include <asio.hpp>\n#include <distlock/distlock.hpp>\n#include <distlock/" + header + ">\n" +
               "asio::awaitable<void> f(" + store + "& s) {\n  distlock::basic_distributed_mutex<" + store +
               "> m{s, \"r\"};\n  auto l = co_await m.lock(); if (l) (void)co_await l->unlock(); }\n" +
               "int main() { asio::io_context io; " + make + "\n  asio::co_spawn(io, f(s), asio::detached); io.run(); }\n";
    };
    const std::string separately = "#define DISTLOCK_SEPARATE_COMPILATION\n";
    const auto memory = locking("distlock::memory::store", "memory.hpp", "distlock::memory::store s{io};");
    const auto redis = locking("distlock::redis::store", "redis.hpp",
                               "distlock::redis::store s{io, distlock::redis::config{}};");
    struct row {
        const char* name;
        const char* key;
        double seconds;
    };
    const row rows[] = {
        {"compile -O2: in-process store, header-only", "memory", time_compile(memory)},
        {"compile -O2: in-process store, separately compiled", "memory_separate", time_compile(separately + memory)},
        {"compile -O2: Redis, header-only", "redis", time_compile(redis)},
        {"compile -O2: Redis, separately compiled", "redis_separate", time_compile(separately + redis)},
    };
    json << "{\"name\":\"compile cost\",\"flags\":\"-O2\",\"asio_only_s\":" << asio_only;
    for (const auto& r : rows) {
        std::printf("%-58s %8s %10s   asio + a timer coroutine %.2f s, lock + unlock %.2f s   x%.2f\n", r.name, "", "",
                    asio_only, r.seconds, r.seconds / asio_only);
        json << ",\"" << r.key << "_s\":" << r.seconds << ",\"" << r.key << "_ratio\":" << r.seconds / asio_only;
    }
    json << "}\n";
}

} // namespace

// DISTLOCK_BENCH_ONLY=multi,redlock runs only those groups of workloads (pairs,
// cluster, concurrent, threads, contended, redlock, peers, multi, watchdog, memory,
// fences, compile, failover; processes is the part of contended that runs across processes);
// unset, every group runs.
bool wanted(const char* group)
{
    const char* only = std::getenv("DISTLOCK_BENCH_ONLY");
    if (!only || !*only)
        return true;
    const std::string list = std::string{","} + only + ",";
    return list.find(std::string{","} + group + ",") != std::string::npos;
}

// The body of the process that measures memory: argv PORT RESULTS.
int memory_main(char** argv)
{
    counting_allocations = true;
    json.open(argv[1], std::ios::app);
    asio::io_context io;
    dl::redis::config cfg;
    cfg.port = static_cast<std::uint16_t>(std::stoi(argv[0]));
    dl::redis::store store{io, cfg};
    memory_rows(io, store, cfg);
    store.disconnect();
    io.run();
    return 0;
}

// --shared-worker ROLE PORT ROUNDS: a worker of the shared workloads
// (bench/shared_workloads.hpp).
int shared_worker_main(char** argv)
{
    dl::redis::config cfg;
    cfg.port = static_cast<std::uint16_t>(std::atoi(argv[1]));
    asio::io_context io;
    dl::redis::store store{io, cfg};
    return bench::shared_worker(io, store, argv[0], std::atoi(argv[2]));
}

// The shared workloads against `port`, with hiredis PINGs as the round trip. No peer:
// node-redlock has no read-write lock and no semaphore.
long shared_workloads(std::uint16_t port)
{
    result_row rtt{"floor: one PING round trip (hiredis)"};
    redisContext* c = redisConnect("127.0.0.1", port);
    const auto start = steady::now();
    for (int i = 0; i < 2000; ++i) {
        const auto t0 = steady::now();
        freeReplyObject(redisCommand(c, "PING"));
        rtt.us.push_back(micros(steady::now() - t0));
    }
    redisFree(c);
    rtt.seconds = std::chrono::duration<double>(steady::now() - start).count();
    rtt.operations = rtt.us.size();
    print(rtt);
    const auto ours = [&](const char* role, int rounds) {
        return std::vector<std::string>{test::self_path(), "--shared-worker", role, std::to_string(port),
                                        std::to_string(rounds)};
    };
    std::printf("  (no peer rows: node-redlock has no read-write lock and no semaphore)\n");
    long bad = bench::readers_and_writer("distlock", ours("reader", 40), 8, ours("writer", 20), rtt);
    bad += bench::semaphore_handoffs("distlock", ours("permit:4", 30), 8, 4, rtt);
    if (bad != 0)
        std::fprintf(stderr, "a shared workload failed or broke its lock (%ld)\n", bad);
    return bad;
}

// --elect ROLE PORT NAME: a participant of the fail-over rounds, with a term's TTL
// of failover_ttl.
constexpr auto failover_ttl = std::chrono::seconds{2};
int elect_main(char** argv)
{
    dl::redis::config cfg;
    cfg.port = static_cast<std::uint16_t>(std::atoi(argv[1]));
    asio::io_context io;
    dl::redis::store store{io, cfg};
    return bench::election_worker(io, store, argv[0], argv[2], failover_ttl);
}

// Leader fail-over: the term's TTL is what the server waits out (no peer: node-redlock
// has no election).
int failovers(std::uint16_t port)
{
    result_row row{"distlock: election fail-over, leader SIGKILLed (us)"};
    const int missed = bench::failovers(
        row,
        [&](const std::string& role, const std::string& name) {
            return std::vector<std::string>{test::self_path(), "--elect", role, std::to_string(port), name};
        },
        6, std::chrono::duration_cast<std::chrono::milliseconds>(failover_ttl));
    bench::print_failover(row, std::chrono::duration_cast<std::chrono::milliseconds>(failover_ttl));
    return missed;
}

int main(int argc, char** argv)
{
    if (argc == 5 && std::string{argv[1]} == "--elect")
        return elect_main(argv + 2);
    if (argc == 5 && std::string{argv[1]} == "--shared-worker")
        return shared_worker_main(argv + 2);
    if (argc == 4 && std::string{argv[1]} == "--memory")
        return memory_main(argv + 2);
    if (argc == 6 && std::string{argv[1]} == "--contender")
        return contender_main(argv + 2);
    if (argc == 7 && std::string{argv[1]} == "--raw-contender")
        return raw_contender_main(argv + 2);
    const std::string results = argc > 1 ? argv[1] : "bench/results.jsonl";
    json.open(results, std::ios::app);
    std::printf("%-58s %8s %10s %9s %9s %9s %10s\n", "workload (Redis on loopback)", "ops", "ops/s", "p50 us",
                "p90 us", "p99 us", "max us");
    test::redis_server server;
    asio::io_context io;
    dl::redis::store store{io, server.config()};
    constexpr std::size_t count = 20000;

    result_row seq{"distlock: lock() + unlock(), sequential, distinct keys"};
    result_row base{"baseline hiredis: SET NX PX + EVALSHA release"};
    if (wanted("pairs") || wanted("redlock")) {
        redis_benchmark_reference(server.port());
        base = baseline_sequential(server.port(), count);
        print(base);
        seq = sequential_pairs("distlock: lock() + unlock(), sequential, distinct keys", io, store, count);
        print(seq, &base);
    }

    if (wanted("cluster")) {
        // The same pairs on a Redis Cluster of three primaries: each lock is routed to
        // its slot's primary (one round trip, as on one server); the ratio is the cost
        // of hashing the key and looking up its node. Rounds alternate between the
        // two, so that a drift of the machine's speed falls on both.
        // A fresh server for the single side, as fresh as the cluster's.
        test::redis_cluster cluster{3, 0};
        dl::redis::store routed{io, cluster.config()};
        test::redis_server fresh;
        dl::redis::store direct{io, fresh.config()};
        result_row single{"distlock: one server, in rounds alternating with the cluster"};
        result_row clustered{"distlock: the same on a 3-primary Redis Cluster"};
        for (int round = 0; round < 10; ++round) {
            merge(single, sequential_pairs("", io, direct, count / 10));
            merge(clustered, sequential_pairs("", io, routed, count / 10));
        }
        print(single);
        print(clustered, &single);
        routed.disconnect();
        direct.disconnect();
    }

    if (wanted("concurrent")) {
        auto base64 = baseline_threads(server.port(), 64, 5s);
        print(base64);
        auto co64 = concurrent_pairs(io, store, 64, 5s);
        print(co64, &base64, true);
    }

    if (wanted("threads")) {
        // Alternating rounds, so that a drift in the machine's speed falls on both.
        result_row one{"distlock: 64 coroutines, one store, 1 thread, pairs"};
        result_row two{"distlock: 64 coroutines, one store, 2 threads, pairs"};
        result_row one_pooled{"distlock: the same, 2 connections (config::connections), 1 thread"};
        result_row two_pooled{"distlock: the same, 2 connections, 2 threads"};
        result_row raw_one{"baseline hiredis: 64 pairs pipelined, 1 thread"};
        result_row raw_two{"baseline hiredis: 64 pairs pipelined, 2 threads"};
        const auto add = [](result_row& into, const result_row& part) {
            into.operations += part.operations;
            into.seconds += part.seconds;
        };
        for (int round = 0; round < 3; ++round)
            for (int threads : {1, 2}) {
                add(threads == 1 ? one : two, threaded_pairs(server, threads, 64, 2000ms));
                add(threads == 1 ? one_pooled : two_pooled, threaded_pairs(server, threads, 64, 2000ms, 2));
                add(threads == 1 ? raw_one : raw_two, baseline_pipelined(server.port(), threads, 2000ms));
            }
        print(raw_one);
        print(raw_two, &raw_one, true);
        print(one);
        print(two, &one, true);
        print(one_pooled, &one, true);
        print(two_pooled, &one, true);
    }

    if (wanted("contended")) {
        auto cont = contended(io, store, 2000);
        print(cont);
    }
    if (wanted("contended") || wanted("processes")) {
        const double rtt = round_trip_us(server.port());
        double floor_handoff = 0;
        auto floor = contended_processes(server.port(), contention::raw, 2000, rtt, &floor_handoff);
        print(floor);
        for (const auto how : {contention::setnx, contention::fair, contention::peer}) {
            if (how == contention::peer && !peer_installed())
                continue;
            double handoff = 0;
            auto across = contended_processes(server.port(), how, 2000, rtt, &handoff);
            print(across);
            if (floor_handoff > 0)
                std::printf("    hand-off p50 x%.2f of the ring's\n", handoff / floor_handoff);
        }
    }

    std::vector<std::unique_ptr<test::redis_server>> servers;
    std::vector<std::unique_ptr<dl::redis::store>> stores;
    std::vector<dl::redis::store*> nodes;
    for (int i = 0; i < 5; ++i) {
        servers.push_back(std::make_unique<test::redis_server>());
        stores.push_back(std::make_unique<dl::redis::store>(io, servers.back()->config()));
        nodes.push_back(stores.back().get());
    }
    for (std::size_t n : {3u, 5u}) {
        if (!wanted("redlock"))
            break;
        // The floor first: the raw pair fanned out to the same nodes, against the raw
        // pair on one server.
        std::vector<std::uint16_t> ports;
        for (std::size_t i = 0; i < n; ++i)
            ports.push_back(servers[i]->port());
        auto raw = baseline_fan_out(ports, count / 4);
        print(raw, &base);
        dl::quorum<dl::redis::store> q{std::span<dl::redis::store* const>{nodes.data(), n}};
        auto name = "distlock: Redlock over " + std::to_string(n) + " nodes, sequential";
        auto ql = sequential_pairs(name.c_str(), io, q, count / 4);
        const double to_raw = ql.pct(0.5) / raw.pct(0.5);
        ql.extra += ",\"p50_ratio_to_raw_fan_out\":" + std::to_string(to_raw);
        print(ql, &seq);
        std::printf("  Redlock over %zu nodes: p50 x%.2f of the raw fan-out to the same nodes\n", n, to_raw);
    }

    if (wanted("peers") && !peer_installed()) {
        std::printf("peers: node-redlock not installed (npm ci --prefix bench/peers/node-redlock); skipped\n");
    } else if (wanted("peers")) {
        // distlock against node-redlock over the same 1, 3 and 5 nodes, in rounds that
        // alternate between the two so that a drift of the machine's speed falls on
        // both. Each client's own ratio of n nodes to one is printed too.
        std::vector<result_row> ours, theirs;
        std::vector<server_work> ours_work, theirs_work;
        for (std::size_t n : {1u, 3u, 5u}) {
            std::vector<std::uint16_t> ports;
            std::vector<test::redis_server*> behind;
            for (std::size_t i = 0; i < n; ++i) {
                ports.push_back(servers[i]->port());
                behind.push_back(servers[i].get());
            }
            ours.push_back(result_row{n == 1 ? std::string{"distlock: lock() + unlock(), one node"}
                                             : "distlock: Redlock over " + std::to_string(n) + " nodes"});
            theirs.push_back(result_row{"peer node-redlock: acquire + release over " + std::to_string(n) + " node(s)"});
            ours_work.emplace_back();
            theirs_work.emplace_back();
            dl::quorum<dl::redis::store> q{std::span<dl::redis::store* const>{nodes.data(), n}};
            for (int round = 0; round < 3; ++round) {
                result_row peer;
                theirs_work.back().add(servers_behind(behind, [&] { peer = peer_node_redlock(ports, count / 12); }));
                if (peer.us.empty())
                    break;
                merge(theirs.back(), std::move(peer));
                ours_work.back().add(servers_behind(behind, [&] {
                    merge(ours.back(), n == 1 ? sequential_pairs("", io, *nodes[0], count / 12)
                                              : sequential_pairs("", io, q, count / 12));
                }));
            }
        }
        // Sets of 1 and 32 keys taken together on one node: lock_all's rows.
        for (std::size_t size : {1u, 32u}) {
            ours.push_back(result_row{"distlock: lock_all of " + std::to_string(size) + " + unlock, one node"});
            theirs.push_back(result_row{"peer node-redlock: a set of " + std::to_string(size) + ", one node"});
            for (int round = 0; round < 3; ++round) {
                merge(theirs.back(), peer_node_redlock({servers[0]->port()}, count / 24, size));
                merge(ours.back(), multi(io, *nodes[0], size, count / 24));
            }
        }
        // Each row against the same client's first row of its kind (one node, or a set
        // of one), then distlock against node-redlock.
        for (std::size_t i = 0; i < ours.size(); ++i) {
            const std::size_t first = i < 3 ? 0 : 3;
            if (theirs[i].us.empty() || theirs[first].us.empty()) {
                // A run of node-redlock that printed no samples (it failed).
                std::printf("%s: no samples (the peer's run failed)\n", theirs[i].name.c_str());
                continue;
            }
            if (i < 3) {
                theirs_work[i].record(theirs[i]);
                ours_work[i].record(ours[i]);
            }
            print(theirs[i], i == first ? nullptr : &theirs[first]);
            print(ours[i], i == first ? nullptr : &ours[first]);
            std::printf("    distlock p50 x%.2f of node-redlock's\n", ours[i].pct(0.5) / theirs[i].pct(0.5));
            if (i < 3) {
                std::printf("    the servers' work per pair, summed over the nodes: main thread on a CPU %.1f us against %.1f us "
                            "(x%.2f), of which scripts %.1f us against %.1f us\n",
                            ours_work[i].per_pair(ours_work[i].cpu_us), theirs_work[i].per_pair(theirs_work[i].cpu_us),
                            ours_work[i].per_pair(ours_work[i].cpu_us) / theirs_work[i].per_pair(theirs_work[i].cpu_us),
                            ours_work[i].per_pair(ours_work[i].script_us),
                            theirs_work[i].per_pair(theirs_work[i].script_us));
            }
        }
    }

    if (wanted("multi")) {
        auto one = multi(io, store, 1, count / 4);
        print(one);
        for (std::size_t size : {2u, 8u, 32u}) {
            auto m = multi(io, store, size, count / 4);
            print(m, &one);
        }
    }

    if (wanted("watchdog")) {
        auto watched = watchdog_cost(io, store, 10000);
        print(watched);
    }

    if (wanted("memory")) {
        json.flush();
        test::child measure{std::vector<std::string>{test::self_path(), "--memory", std::to_string(server.port()),
                                                     results}};
        while (auto line = measure.read_line(120s))
            std::printf("%s\n", line->c_str());
        (void)measure.wait(10s);
    }

    if (wanted("scripts")) {
        for (std::size_t size : {1u, 32u}) {
            const auto [acquired, released] = script_server_us(server.port(), size);
            std::printf("%-58s %8s %10s   acquire_all %.1f us, release_all %.1f us (server time per call)\n",
                        ("server: the scripts of a set of " + std::to_string(size)).c_str(), "3000", "", acquired,
                        released);
            json << "{\"name\":\"server time of a set's scripts\",\"size\":" << size << ",\"acquire_all_us\":" << acquired
                 << ",\"release_all_us\":" << released << "}\n";
        }
    }

    if (wanted("fences")) {
        fence_state_row(io, 1'000'000, "fence state: 1,000,000 resources locked and released");
    }

    if (wanted("compile"))
        compile_cost();

    if (wanted("shared") && shared_workloads(server.port()) != 0)
        return 1;

    if (wanted("failover") && failovers(server.port()) != 0)
        return 1;

    store.disconnect();
    for (auto& s : stores)
        s->disconnect();
    io.run();
    return 0;
}
