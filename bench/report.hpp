// The benchmarks' result rows: latency samples, a printed table line with its ratio
// to a baseline of the same run, and a JSON line per row.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

namespace bench {

using steady = std::chrono::steady_clock;

/// The q-quantile of `samples` by nearest rank, sorted[ceil(q*n) - 1] (q = 0 gives
/// the smallest, 1 the largest): every workload and baseline is read the same way.
/// Sorts `samples`. 0 when there are none.
inline double nearest_rank(std::vector<double>& samples, double q)
{
    if (samples.empty())
        return 0;
    std::sort(samples.begin(), samples.end());
    const auto n = static_cast<double>(samples.size());
    const auto rank = static_cast<std::size_t>(std::ceil(std::clamp(q, 0.0, 1.0) * n));
    return samples[std::max<std::size_t>(rank, 1) - 1];
}

struct result_row {
    std::string name;
    std::size_t operations = 0;
    double seconds = 0;
    std::vector<double> us; // per-operation latency samples
    std::string extra;      // workload-specific JSON fields

    double pct(double p) { return nearest_rank(us, p); }
    double rate() const { return seconds > 0 ? static_cast<double>(operations) / seconds : 0; }
};

/// DISTLOCK_BENCH_ONLY=failover runs only a benchmark's leader fail-over rows, and
/// DISTLOCK_BENCH_ONLY=peers only its reference client's rows with distlock's beside
/// them (bench/peer.hpp); the Redis benchmark knows its own groups by name
/// (bench/redis.cpp).
inline bool only(const char* group)
{
    const char* wanted = std::getenv("DISTLOCK_BENCH_ONLY");
    return wanted && std::string{wanted} == group;
}

inline std::ofstream json; // opened by main() on the results file

inline void print(result_row& r, result_row* base = nullptr, bool by_rate = false)
{
    const double p50 = r.pct(0.5), p90 = r.pct(0.9), p99 = r.pct(0.99), max = r.pct(1.0);
    std::printf("%-58s %8zu %10.0f %9.1f %9.1f %9.1f %10.1f", r.name.c_str(), r.operations, r.rate(), p50, p90,
                p99, max);
    double ratio = 0;
    if (base) {
        ratio = by_rate ? r.rate() / base->rate() : p50 / base->pct(0.5);
        std::printf("   %s x%.2f", by_rate ? "rate" : "p50", ratio);
    }
    std::printf("\n");
    json << "{\"name\":\"" << r.name << "\",\"operations\":" << r.operations << ",\"seconds\":" << r.seconds
         << ",\"ops_per_s\":" << r.rate() << ",\"p50_us\":" << p50 << ",\"p90_us\":" << p90 << ",\"p99_us\":" << p99
         << ",\"max_us\":" << max;
    if (base)
        json << ",\"ratio\":" << ratio << ",\"ratio_of\":\"" << (by_rate ? "ops_per_s" : "p50") << "\"";
    json << r.extra << "}\n";
    json.flush();
}

inline double micros(steady::duration d) { return std::chrono::duration<double, std::micro>(d).count(); }

} // namespace bench
