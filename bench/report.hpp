// The benchmarks' result rows: latency samples, a printed table line with its ratio
// to a baseline of the same run, and a JSON line per row.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

namespace bench {

using steady = std::chrono::steady_clock;

struct result_row {
    std::string name;
    std::size_t operations = 0;
    double seconds = 0;
    std::vector<double> us; // per-operation latency samples
    std::string extra;      // workload-specific JSON fields

    double pct(double p)
    {
        if (us.empty())
            return 0;
        std::sort(us.begin(), us.end());
        return us[static_cast<std::size_t>(p * static_cast<double>(us.size() - 1))];
    }
    double rate() const { return seconds > 0 ? static_cast<double>(operations) / seconds : 0; }
};

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
