// distlock benchmarks, in-process part: what the library adds on top of the store's
// own primitives. Each workload runs next to its baseline in the same process and the
// ratio is the headline (absolute times drift on shared machines; ratios hold).
// Prints a table and writes one JSON line per workload to bench/results.jsonl (or the
// path given as the first argument). Every loop is bounded in count and time.
#include <distlock/distlock.hpp>
#include <distlock/memory.hpp>

#include "report.hpp"

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/io_context.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

namespace dl = distlock;
using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;

namespace {

struct stats {
    std::string name;
    std::size_t operations = 0;
    double seconds = 0;
    std::vector<double> samples_us; // latency of each operation

    double percentile(double p) { return bench::nearest_rank(samples_us, p); }
    double ops_per_second() const { return seconds > 0 ? static_cast<double>(operations) / seconds : 0; }
    double ns_per_op() const { return operations ? seconds * 1e9 / static_cast<double>(operations) : 0; }
};

// Runs `one()` (a coroutine doing one operation) `warmup` times unrecorded, then up
// to `count` times or until `limit` has passed, recording each latency.
template <class One>
stats measure(asio::io_context& io, const char* name, One one, std::size_t warmup, std::size_t count,
              std::chrono::seconds limit)
{
    stats s{name};
    s.samples_us.reserve(count);
    asio::co_spawn(io, [&]() -> asio::awaitable<void> {
        for (std::size_t i = 0; i < warmup; ++i)
            co_await one();
        const auto start = steady::now();
        const auto stop_at = start + limit;
        for (std::size_t i = 0; i < count && steady::now() < stop_at; ++i) {
            const auto t0 = steady::now();
            co_await one();
            s.samples_us.push_back(std::chrono::duration<double, std::micro>(steady::now() - t0).count());
        }
        s.operations = s.samples_us.size();
        s.seconds = std::chrono::duration<double>(steady::now() - start).count();
    }, asio::detached);
    io.run();
    io.restart();
    return s;
}

void report(std::ofstream& json, stats& s, const stats* baseline)
{
    const double p50 = s.percentile(0.50), p90 = s.percentile(0.90), p99 = s.percentile(0.99),
                 max = s.percentile(1.0);
    std::printf("%-46s %10zu %12.0f %9.0f %8.2f %8.2f %8.2f %9.2f", s.name.c_str(), s.operations,
                s.ops_per_second(), s.ns_per_op(), p50, p90, p99, max);
    if (baseline)
        std::printf("   x%.2f", s.ns_per_op() / baseline->ns_per_op());
    std::printf("\n");
    json << "{\"name\":\"" << s.name << "\",\"operations\":" << s.operations << ",\"seconds\":" << s.seconds
         << ",\"ops_per_s\":" << s.ops_per_second() << ",\"ns_per_op\":" << s.ns_per_op()
         << ",\"p50_us\":" << p50 << ",\"p90_us\":" << p90 << ",\"p99_us\":" << p99 << ",\"max_us\":" << max;
    if (baseline)
        json << ",\"ratio_to_baseline\":" << s.ns_per_op() / baseline->ns_per_op();
    json << "}\n";
}

} // namespace

int main(int argc, char** argv)
{
    const std::string out = argc > 1 ? argv[1] : "bench/results.jsonl";
    std::ofstream json{out};
    constexpr std::size_t warmup = 20'000, count = 500'000;
    constexpr auto limit = 10s;

    std::printf("%-46s %10s %12s %9s %8s %8s %8s %9s\n", "workload", "ops", "ops/s", "ns/op", "p50 us",
                "p90 us", "p99 us", "max us");

    asio::io_context io;
    dl::memory::store store{io};

    // Baseline: the store's own primitives, put-if-absent then compare-and-delete,
    // with no lock library in between.
    const auto owner = dl::owner_token::generate();
    auto baseline = measure(io, "memory store: put_if_absent + release (floor)", [&]() -> asio::awaitable<void> {
        (void)co_await store.put_if_absent("bench:floor", owner, 10s);
        (void)co_await store.release("bench:floor", owner);
    }, warmup, count, limit);
    report(json, baseline, nullptr);

    dl::basic_distributed_mutex<dl::memory::store, dl::retry::none> m{store, "bench:lock", {.ttl = 10s}};
    auto pair = measure(io, "distlock: lock() + unlock(), uncontended", [&]() -> asio::awaitable<void> {
        auto lease = co_await m.lock();
        (void)co_await lease->unlock();
    }, warmup, count, limit);
    report(json, pair, &baseline);

    dl::basic_distributed_mutex<dl::memory::store, dl::retry::none, dl::renew::watchdog> w{
        store, "bench:watchdog", {.ttl = 10s}};
    auto watched = measure(io, "distlock: lock() + unlock() with watchdog", [&]() -> asio::awaitable<void> {
        auto lease = co_await w.lock();
        (void)co_await lease->unlock();
    }, warmup / 10, count / 10, limit);
    report(json, watched, &baseline);

    std::printf("\nJSON lines written to %s\n", out.c_str());
    return 0;
}
