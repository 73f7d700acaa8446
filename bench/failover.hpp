// Leader fail-over across separate processes: a leader process holds a term of an
// election; a candidate process campaigns behind it; the leader is SIGKILLed, and the
// fail-over is the time from the kill to the line in which the candidate says its
// work started. Both sides are processes printing lines, so a reference client's
// election (etcd's Go concurrency.Election) is measured by the same harness, in the
// same run. The row's ratio is against the term's TTL (or the session timeout): what
// the store must wait out before it may elect again.
#pragma once

#include "process.hpp"
#include "report.hpp"

#include <distlock/distlock.hpp>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/io_context.hpp>

#include <csignal>
#include <functional>
#include <thread>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace bench {

/// A worker's body: campaigns in `name` through `store` and, once leading, prints
/// "leading EPOCH" and keeps the term until killed (role "leader"), or prints
/// "campaigning" first and "leading EPOCH" when elected, then resigns (role
/// "candidate").
template <class Store>
int election_worker(asio::io_context& io, Store& store, const std::string& role, const std::string& name,
                    distlock::duration ttl)
{
    using namespace std::chrono_literals;
    int status = 1;
    asio::co_spawn(io, [&]() -> distlock::awaitable<void> {
        distlock::basic_leader_election<Store, distlock::retry::exponential_backoff> election{
            store, name, {.term = {.ttl = ttl}},
            distlock::retry::exponential_backoff{.initial = 5ms, .max = 50ms}};
        if (role == "candidate") {
            std::printf("campaigning\n");
            std::fflush(stdout);
        }
        auto led = co_await election.lead(role, [&](distlock::term& t) -> distlock::awaitable<void> {
            std::printf("leading %llu\n", static_cast<unsigned long long>(t.epoch()));
            std::fflush(stdout);
            if (role == "leader") // until killed, or the term is lost
                (void)co_await t.lost();
        });
        status = led ? 0 : 1;
        co_await store.close();
    }, asio::detached);
    io.run_for(std::chrono::minutes{2});
    return status;
}

/// `rounds` fail-overs with leader and candidate processes made by `process(role,
/// name)`: appends each fail-over time (µs) to `row`. Returns how many rounds did not
/// complete in time.
inline int failovers(result_row& row,
                     const std::function<std::vector<std::string>(const std::string&, const std::string&)>& process,
                     int rounds, std::chrono::milliseconds wait_out)
{
    using namespace std::chrono_literals;
    int failed = 0;
    const auto start = steady::now();
    for (int round = 0; round < rounds && steady::now() - start < 120s; ++round) {
        const std::string name = "failover-" + std::to_string(round);
        test::child leader{process("leader", name)};
        const auto led = leader.read_line(20s);
        if (!led || !led->starts_with("leading")) {
            ++failed;
            continue;
        }
        test::child candidate{process("candidate", name)};
        if (candidate.read_line(20s) != std::optional<std::string>{"campaigning"}) {
            ++failed;
            continue;
        }
        // The candidate's campaign is under way (queued, or retrying) before the kill.
        std::this_thread::sleep_for(300ms);
        const auto killed = steady::now();
        leader.kill(SIGKILL);
        const auto next = candidate.read_line(std::chrono::duration_cast<std::chrono::milliseconds>(wait_out * 4 + 10s));
        if (!next || !next->starts_with("leading")) {
            ++failed;
            continue;
        }
        row.us.push_back(micros(steady::now() - killed));
        (void)leader.wait(5s);
        (void)candidate.wait(10s);
    }
    row.operations = row.us.size();
    row.seconds += std::chrono::duration<double>(steady::now() - start).count();
    return failed;
}

/// Prints a fail-over row, its median as a multiple of `wait_out` in its JSON line,
/// and its ratio to `peer` (a reference client's row of the same run) when given.
inline void print_failover(result_row& row, std::chrono::milliseconds wait_out, result_row* peer = nullptr)
{
    const double bound = static_cast<double>(std::chrono::duration_cast<std::chrono::microseconds>(wait_out).count());
    row.extra = ",\"wait_out_us\":" + std::to_string(bound) +
                ",\"p50_of_wait_out\":" + std::to_string(row.pct(0.5) / bound);
    print(row, peer);
    std::printf("%-58s %.2f of the wait-out (%lld ms)\n", "", row.pct(0.5) / bound,
                static_cast<long long>(wait_out.count()));
}

} // namespace bench
