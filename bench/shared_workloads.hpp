// The shared mutex's and the semaphore's workloads, across separate processes, for the
// store benchmarks: copies of the benchmark (or a reference client's script speaking
// the same lines) started as workers, each printing its critical sections on the
// machine's one monotonic clock once all are done:
//   "read ASKED ACQUIRED RELEASED"          a reader of the shared mutex
//   "write ASKED ACQUIRED RELEASED"         its writer
//   "permit SLOT ASKED ACQUIRED RELEASED"   a permit of the semaphore (SLOT -1: none)
// The driver reads them all and reports:
//  - readers and a writer: the readers' throughput (sections per second), the writer's
//    wait (asked to granted), and any section that overlapped a writer's (a violation);
//  - the semaphore: the hand-off (a release to the grant of a process that was
//    waiting for it), the mean and the largest number of permits in use, and any
//    moment with more than N in use (a violation).
// Each hand-off and wait is also given in round trips of the store's floor client of
// the same run.
#pragma once

#include "handoff.hpp"
#include "process.hpp"
#include "report.hpp"

#include <distlock/basic_distributed_semaphore.hpp>
#include <distlock/basic_distributed_shared_mutex.hpp>
#include <distlock/distlock.hpp>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/io_context.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace bench {

/// A worker's body: `rounds` critical sections of 1 ms on "shared" as `role`
/// ("reader", "writer" or "permit:N"), printed once all are done. A writer pauses
/// 5 ms between its sections, so that readers get in between them.
template <class Store>
int shared_worker(asio::io_context& io, Store& store, const std::string& role, int rounds)
{
    using namespace std::chrono_literals;
    int status = 1;
    std::vector<std::array<std::int64_t, 4>> held; // slot, asked, acquired, released
    asio::co_spawn(io, [&]() -> distlock::awaitable<void> {
        const distlock::retry::exponential_backoff patient{.deadline = 60s};
        distlock::basic_distributed_shared_mutex<Store, distlock::retry::exponential_backoff> rw{store, "shared", {},
                                                                                                  patient};
        std::optional<distlock::basic_distributed_semaphore<Store, distlock::retry::exponential_backoff>> permits;
        if (role.starts_with("permit:"))
            permits.emplace(store, "shared",
                            distlock::semaphore_options{.permits = static_cast<std::uint32_t>(std::stoul(role.substr(7)))},
                            patient);
        for (int i = 0; i < rounds; ++i) {
            const auto asked = now_ns();
            distlock::result<distlock::lease> l = distlock::errc::invalid_argument;
            if (permits)
                l = co_await permits->acquire();
            else if (role == "writer")
                l = co_await rw.lock();
            else
                l = co_await rw.lock_shared();
            if (!l)
                co_return;
            const auto acquired = now_ns();
            distlock::timer t{co_await asio::this_coro::executor, 1ms};
            co_await t.async_wait(asio::use_awaitable);
            const auto released = now_ns();
            const auto slot = l->slot() ? static_cast<std::int64_t>(*l->slot()) : -1;
            if (!co_await l->unlock())
                co_return;
            held.push_back({slot, asked, acquired, released});
            if (role == "writer") {
                distlock::timer pause{co_await asio::this_coro::executor, 5ms};
                co_await pause.async_wait(asio::use_awaitable);
            }
        }
        status = 0;
        co_await store.close();
    }, asio::detached);
    io.run_for(std::chrono::seconds{120});
    for (const auto& [slot, asked, acquired, released] : held) {
        if (role.starts_with("permit:"))
            std::printf("permit %lld %lld %lld %lld\n", static_cast<long long>(slot), static_cast<long long>(asked),
                        static_cast<long long>(acquired), static_cast<long long>(released));
        else
            std::printf("%s %lld %lld %lld\n", role == "writer" ? "write" : "read", static_cast<long long>(asked),
                        static_cast<long long>(acquired), static_cast<long long>(released));
    }
    std::fflush(stdout);
    return status;
}

namespace detail {

struct section {
    bool write = false;
    std::int64_t slot = -1;
    std::int64_t asked = 0, acquired = 0, released = 0;
    int process = 0;
};

/// Starts every worker, reads their sections; nullopt when one failed.
inline std::optional<std::vector<section>> run_workers(const std::vector<std::vector<std::string>>& argvs)
{
    std::vector<std::unique_ptr<test::child>> workers;
    for (const auto& argv : argvs)
        workers.push_back(std::make_unique<test::child>(argv));
    std::vector<section> sections;
    bool failed = false;
    for (std::size_t i = 0; i < workers.size(); ++i) {
        while (auto line = workers[i]->read_line(std::chrono::seconds{150})) {
            long long slot = -1, a = 0, g = 0, r = 0;
            char kind[8] = {};
            if (std::sscanf(line->c_str(), "permit %lld %lld %lld %lld", &slot, &a, &g, &r) == 4)
                sections.push_back({false, slot, a, g, r, static_cast<int>(i)});
            else if (std::sscanf(line->c_str(), "%7s %lld %lld %lld", kind, &a, &g, &r) == 4)
                sections.push_back({std::strcmp(kind, "write") == 0, -1, a, g, r, static_cast<int>(i)});
        }
        if (workers[i]->wait(std::chrono::seconds{30}) != std::optional<int>{0})
            failed = true;
    }
    if (failed) {
        std::fprintf(stderr, "a worker failed\n");
        return std::nullopt;
    }
    std::sort(sections.begin(), sections.end(), [](const auto& x, const auto& y) { return x.acquired < y.acquired; });
    return sections;
}

inline double span_seconds(const std::vector<section>& s)
{
    if (s.empty())
        return 0;
    std::int64_t last = 0;
    for (const auto& x : s)
        last = std::max(last, x.released);
    return static_cast<double>(last - s.front().acquired) / 1e9;
}

} // namespace detail

/// `readers` argv run as readers and one as the writer (`who` names the client in the
/// rows). Prints the readers' throughput and the writer's wait; returns the number of
/// sections that overlapped a writer's (0 when the lock held), or -1 when a worker
/// failed. `base` rows (a reference client's, of the same run) make ratio columns.
inline long readers_and_writer(const std::string& who, const std::vector<std::string>& reader_argv, int readers,
                               const std::vector<std::string>& writer_argv, result_row& rtt,
                               result_row* base_reads = nullptr, result_row* base_wait = nullptr,
                               result_row* reads_out = nullptr, result_row* wait_out = nullptr)
{
    if (base_reads && base_reads->operations == 0)
        base_reads = nullptr;
    if (base_wait && base_wait->operations == 0)
        base_wait = nullptr;
    std::vector<std::vector<std::string>> argvs(readers, reader_argv);
    argvs.push_back(writer_argv);
    const auto got = detail::run_workers(argvs);
    if (!got)
        return -1;
    const auto& s = *got;
    result_row reads{who + ": " + std::to_string(readers) + " readers' sections beside a writer"};
    result_row wait{who + ": the writer's wait (asked -> granted)"};
    long overlaps = 0;
    for (std::size_t i = 0; i < s.size(); ++i) {
        if (s[i].write)
            wait.us.push_back(static_cast<double>(s[i].acquired - s[i].asked) / 1000.0);
        else
            reads.us.push_back(static_cast<double>(s[i].released - s[i].acquired) / 1000.0);
        for (std::size_t j = 0; j < s.size(); ++j)
            if (i != j && (s[i].write || s[j].write) && s[j].acquired < s[i].released &&
                s[i].acquired < s[j].released)
                ++overlaps;
    }
    // The most readers holding at one instant: +1 at each grant, -1 at each release.
    std::vector<std::pair<std::int64_t, int>> events;
    for (const auto& x : s)
        if (!x.write) {
            events.emplace_back(x.acquired, +1);
            events.emplace_back(x.released, -1);
        }
    std::sort(events.begin(), events.end()); // a release before a grant at the same instant
    int holding = 0, most_readers = 0;
    for (const auto& e : events) {
        holding += e.second;
        most_readers = std::max(most_readers, holding);
    }
    overlaps /= 2; // each overlapping pair was counted from both sides
    reads.operations = reads.us.size();
    wait.operations = wait.us.size();
    reads.seconds = wait.seconds = detail::span_seconds(s);
    const double wait_round_trips = rtt.pct(0.5) > 0 ? wait.pct(0.5) / rtt.pct(0.5) : 0;
    reads.extra = ",\"most_readers_at_once\":" + std::to_string(most_readers) +
                  ",\"writer_overlaps\":" + std::to_string(overlaps);
    wait.extra = ",\"p50_round_trips\":" + std::to_string(wait_round_trips);
    print(reads, base_reads, true);
    print(wait, base_wait);
    std::printf("  %zu reads (up to %d at once), %zu writes, writer's wait p50 = %.1f round trips, %ld overlaps\n",
                reads.operations, most_readers, wait.operations, wait_round_trips, overlaps);
    if (reads_out)
        *reads_out = reads;
    if (wait_out)
        *wait_out = wait;
    return overlaps;
}

/// `processes` workers holding permits of a semaphore of `permits`. Prints the
/// hand-off and the permits in use; returns the number of moments with more than
/// `permits` in use (0 when the semaphore held), or -1 when a worker failed.
inline long semaphore_handoffs(const std::string& who, const std::vector<std::string>& argv, int processes,
                               int permits, result_row& rtt, result_row* base = nullptr, result_row* out = nullptr)
{
    if (base && base->operations == 0)
        base = nullptr;
    const auto got = detail::run_workers(std::vector<std::vector<std::string>>(processes, argv));
    if (!got)
        return -1;
    const auto& s = *got;
    result_row handoff{who + ": semaphore of " + std::to_string(permits) + ", " + std::to_string(processes) +
                       " processes (release -> waiter's grant)"};
    // Permits in use over time: +1 at each grant, -1 at each release.
    std::vector<std::pair<std::int64_t, int>> events;
    for (const auto& x : s) {
        events.emplace_back(x.acquired, +1);
        events.emplace_back(x.released, -1);
    }
    std::sort(events.begin(), events.end()); // a release before a grant at the same instant
    long over = 0;
    int in_use = 0, most = 0;
    double weighted = 0;
    for (std::size_t i = 0; i < events.size(); ++i) {
        if (i > 0)
            weighted += static_cast<double>(events[i].first - events[i - 1].first) * in_use;
        in_use += events[i].second;
        most = std::max(most, in_use);
        if (in_use > permits)
            ++over;
    }
    const double span = events.empty() ? 0 : static_cast<double>(events.back().first - events.front().first);
    // A grant that waited: the last release by another process between its ask and its
    // grant is what let it in.
    for (const auto& x : s) {
        std::int64_t freed = 0;
        for (const auto& y : s)
            if (y.process != x.process && y.released > x.asked && y.released <= x.acquired)
                freed = std::max(freed, y.released);
        if (freed > 0)
            handoff.us.push_back(static_cast<double>(x.acquired - freed) / 1000.0);
    }
    handoff.operations = handoff.us.size();
    handoff.seconds = detail::span_seconds(s);
    const double mean_in_use = span > 0 ? weighted / span : 0;
    const double round_trips = rtt.pct(0.5) > 0 ? handoff.pct(0.5) / rtt.pct(0.5) : 0;
    handoff.extra = ",\"mean_permits_in_use\":" + std::to_string(mean_in_use) + ",\"most_in_use\":" +
                    std::to_string(most) + ",\"over_permits\":" + std::to_string(over) + ",\"p50_round_trips\":" +
                    std::to_string(round_trips);
    print(handoff, base);
    std::printf("  %zu sections, %zu waited; permits in use: mean %.2f, most %d of %d; hand-off p50 = %.2f round "
                "trips; %ld moments over\n",
                s.size(), handoff.operations, mean_in_use, most, permits, round_trips, over);
    if (out)
        *out = handoff;
    return over;
}

/// A reference client's result: its broken lock counts against the run, a worker of
/// it that did not finish is reported (a peer's failure is a finding, not the
/// benchmark's).
inline long peer_outcome(const char* who, long outcome)
{
    if (outcome < 0) {
        std::printf("  (%s: a worker did not finish its sections within its timeout; its rows are left out)\n", who);
        return 0;
    }
    return outcome;
}

} // namespace bench
