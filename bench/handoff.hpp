// Hand-off across separate processes, for the session stores' benchmarks: copies of
// the benchmark started as workers (or a reference client's program printing the
// same lines) each take one lock in a loop and print every critical section as
// "held ACQUIRED_NS RELEASED_NS UNLOCKED_NS" on the machine's one monotonic clock; the
// time from one process's release to the next process's grant is the hand-off,
// compared with one round trip of the floor client of the same run. The release's own
// time (unlock() called to returned) is reported beside it: what of the hand-off is
// the releasing request.
#pragma once

#include "process.hpp"
#include "report.hpp"

#include <distlock/distlock.hpp>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/io_context.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <unistd.h>

namespace bench {

inline std::int64_t now_ns()
{
    return std::chrono::duration_cast<std::chrono::nanoseconds>(steady::now().time_since_epoch()).count();
}

/// A worker's body: `rounds` critical sections of 1 ms on "contended" through `store`,
/// each printed as "held ACQUIRED_NS RELEASED_NS UNLOCKED_NS" once all are done. With
/// `start_ns` (an instant of the monotonic clock, start_at()), the first lock() waits
/// for it, so that the workers contend from the same instant whatever each took to
/// start and connect, as the reference clients' programs do.
template <class Store>
int handoff_worker(asio::io_context& io, Store& store, int rounds, std::int64_t start_ns = 0)
{
    using namespace std::chrono_literals;
    int status = 1;
    std::vector<std::array<std::int64_t, 3>> held;
    asio::co_spawn(io, [&]() -> distlock::awaitable<void> {
        distlock::basic_distributed_mutex<Store, distlock::retry::exponential_backoff> m{
            store, "contended", {}, distlock::retry::exponential_backoff{.deadline = 60s}};
        // Connected first, as the reference clients' programs are: one lock of a
        // resource of its own taken and released. Else the first lock() of each process
        // connects, which takes tens of milliseconds and more for some than others, and
        // the first to connect runs its sections alone meanwhile.
        {
            distlock::basic_distributed_mutex<Store, distlock::retry::none> warm{
                store, "warm:" + std::to_string(static_cast<long long>(::getpid()))};
            auto l = co_await warm.lock();
            if (!l || !co_await l->unlock())
                co_return;
        }
        if (const auto wait = start_ns - now_ns(); start_ns > 0 && wait > 0 && wait < 60'000'000'000) {
            distlock::timer t{co_await asio::this_coro::executor, std::chrono::nanoseconds{wait}};
            co_await t.async_wait(asio::use_awaitable);
        }
        for (int i = 0; i < rounds; ++i) {
            auto l = co_await m.lock();
            if (!l)
                co_return;
            const auto acquired = now_ns();
            distlock::timer t{co_await asio::this_coro::executor, 1ms};
            co_await t.async_wait(asio::use_awaitable);
            const auto released = now_ns();
            if (!co_await l->unlock())
                co_return;
            held.push_back({acquired, released, now_ns()});
        }
        status = 0;
        co_await store.close();
    }, asio::detached);
    io.run_for(120s);
    for (const auto& [a, r, u] : held)
        std::printf("held %lld %lld %lld\n", static_cast<long long>(a), static_cast<long long>(r),
                    static_cast<long long>(u));
    std::fflush(stdout);
    return status;
}

/// A hand-off's two rows: release to the next process's grant, and the release alone.
struct handoff_rows {
    result_row handoff, release;
};

/// Runs `processes` workers (`worker_argv` each; `who` names their client in the rows),
/// prints the hand-off row with its share of critical sections that changed hands and
/// its p50 in round trips of `rtt`, and the release's row; with `base` (a reference
/// client's rows of the same run), each with its ratio to the reference's. `out`
/// receives the rows. Returns the number of critical sections that overlapped another
/// (0 when the lock held), or -1 when a worker failed.
inline long handoffs(const std::vector<std::string>& worker_argv, int processes, result_row& rtt,
                     const std::string& who = "distlock", handoff_rows* base = nullptr, handoff_rows* out = nullptr)
{
    std::vector<std::unique_ptr<test::child>> workers;
    for (int i = 0; i < processes; ++i)
        workers.push_back(std::make_unique<test::child>(worker_argv));
    struct section {
        std::int64_t acquired, released, unlocked;
        int process;
    };
    std::vector<section> sections;
    for (int i = 0; i < processes; ++i) {
        while (auto line = workers[i]->read_line(std::chrono::seconds{120})) {
            long long a = 0, r = 0, u = 0;
            if (std::sscanf(line->c_str(), "held %lld %lld %lld", &a, &r, &u) == 3)
                sections.push_back({a, r, u, i});
        }
        if (workers[i]->wait(std::chrono::seconds{30}) != std::optional<int>{0}) {
            std::fprintf(stderr, "%s: a worker failed\n", who.c_str());
            return -1;
        }
    }
    std::sort(sections.begin(), sections.end(), [](const auto& x, const auto& y) { return x.acquired < y.acquired; });
    result_row handoff{who + ": hand-off across " + std::to_string(processes) + " processes (release -> grant)"};
    result_row release{who.starts_with("distlock") ? std::string{"  of which the release: unlock() called to returned"}
                                         : "  of which the release: " + who + ", unlock called to returned"};
    for (const auto& s : sections)
        release.us.push_back(static_cast<double>(s.unlocked - s.released) / 1000.0);
    release.operations = release.us.size();
    std::size_t changed = 0, overlaps = 0;
    for (std::size_t i = 1; i < sections.size(); ++i) {
        if (sections[i].acquired < sections[i - 1].released)
            ++overlaps;
        if (sections[i].process != sections[i - 1].process) {
            ++changed;
            handoff.us.push_back(static_cast<double>(sections[i].acquired - sections[i - 1].released) / 1000.0);
        }
    }
    handoff.operations = handoff.us.size();
    handoff.seconds = sections.empty() ? 0
                                       : static_cast<double>(sections.back().released - sections.front().acquired) / 1e9;
    const double changed_share = sections.size() > 1 ? static_cast<double>(changed) / (sections.size() - 1) : 0;
    const double round_trips = rtt.pct(0.5) > 0 ? handoff.pct(0.5) / rtt.pct(0.5) : 0;
    handoff.extra = ",\"changed_hands\":" + std::to_string(changed_share) + ",\"p50_round_trips\":" +
                    std::to_string(round_trips) + ",\"overlaps\":" + std::to_string(overlaps);
    release.seconds = handoff.seconds;
    if (base && (base->handoff.operations == 0 || base->release.operations == 0))
        base = nullptr;
    print(handoff, base ? &base->handoff : nullptr);
    print(release, base ? &base->release : nullptr);
    std::printf("  %zu critical sections, %.1f %% changed hands, hand-off p50 = %.2f round trips, %zu overlaps\n",
                sections.size(), 100 * changed_share, round_trips, overlaps);
    if (out)
        *out = {handoff, release};
    return static_cast<long>(overlaps);
}

} // namespace bench
