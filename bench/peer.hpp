// A store's reference lock client beside distlock in the same run (the `peers` group
// of the etcd, ZooKeeper and PostgreSQL benchmarks): the reference client is a
// program of its own (bench/peers/), started as a child process, that prints what
// the benchmark's own code measures, so that both sides are read the same way:
//  - pairs: "us SECONDS US..." (bench/peers/node-redlock/pair.mjs's line): lock +
//    unlock on fresh keys in one session or connection, after 100 untimed pairs, at
//    most a count and 20 s, against distlock's lock() + unlock() made the same way
//    (fresh_pairs), in alternating rounds;
//  - hand-offs: "held ACQUIRED_NS RELEASED_NS UNLOCKED_NS" lines of workers contending
//    for one key (bench/handoff.hpp).
// The reference client's row is printed first, distlock's after it with its p50 over
// the reference's (distlock ÷ reference).
#pragma once

#include "handoff.hpp"
#include "process.hpp"
#include "report.hpp"

#include <distlock/distlock.hpp>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/io_context.hpp>

#include <chrono>
#include <cstdio>
#include <functional>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace bench {

/// The untimed pairs before the timed ones, and the timed pairs' time bound, the same
/// on both sides (the reference clients' programs use these values too).
inline constexpr std::size_t peer_warmup = 100;
inline constexpr auto peer_limit = std::chrono::seconds{20};

/// A CLOCK_MONOTONIC instant `delay` from now, for a reference client's contending
/// processes: each connects first and starts at that instant, so that an
/// interpreter's start-up does not decide who contends.
inline std::string start_in(std::chrono::milliseconds delay)
{
    return std::to_string(now_ns() + std::chrono::duration_cast<std::chrono::nanoseconds>(delay).count());
}

inline void merge(result_row& into, const result_row& part)
{
    into.us.insert(into.us.end(), part.us.begin(), part.us.end());
    into.operations += part.operations;
    into.seconds += part.seconds;
}

/// One run of a reference client's pair program (`argv`): its samples, and the timed
/// pairs' own time (without the program's start-up). Empty when it failed.
inline result_row peer_pairs(const std::vector<std::string>& argv)
{
    result_row r;
    test::child peer{argv};
    if (auto line = peer.read_line(std::chrono::seconds{120}); line && line->starts_with("us ")) {
        std::istringstream samples{line->substr(3)};
        samples >> r.seconds;
        for (double us = 0; samples >> us;)
            r.us.push_back(us);
    }
    r.operations = r.us.size();
    const auto status = peer.wait(std::chrono::seconds{10});
    if (status != std::optional<int>{0})
        r = result_row{};
    if (r.us.empty())
        std::fprintf(stderr, "%s printed no samples (exit status %d)\n", argv.front().c_str(), status.value_or(-1));
    return r;
}

/// distlock's side of the pair rows: one store (one session, or one pool), `peer_warmup`
/// untimed pairs, then at most `count` timed ones within `peer_limit`, each lock() +
/// unlock() of a mutex made for a fresh resource (`resources` + its number). nullopt
/// when a lock or an unlock failed.
template <class Store, class Config>
std::optional<result_row> fresh_pairs(const Config& cfg, const std::string& resources, std::size_t count)
{
    using namespace std::chrono_literals;
    result_row r;
    bool failed = false;
    asio::io_context io;
    Store store{io, cfg};
    asio::co_spawn(io, [&]() -> distlock::awaitable<void> {
        auto start = steady::now();
        for (std::size_t i = 0; i < peer_warmup + count; ++i) {
            if (i == peer_warmup)
                start = steady::now();
            if (i > peer_warmup && steady::now() - start >= peer_limit)
                break;
            const auto t0 = steady::now();
            distlock::basic_distributed_mutex<Store, distlock::retry::none> m{
                store, resources + std::to_string(i), {.ttl = 10s}};
            auto l = co_await m.lock();
            if (!l || !co_await l->unlock()) {
                failed = true;
                break;
            }
            if (i >= peer_warmup)
                r.us.push_back(micros(steady::now() - t0));
        }
        r.seconds = std::chrono::duration<double>(steady::now() - start).count();
        co_await store.close();
    }, asio::detached);
    io.run();
    if (failed)
        return std::nullopt;
    r.operations = r.us.size();
    return r;
}

/// `rounds` rounds alternating the reference client's pairs (`peer(round)`: its
/// program's argv) with distlock's (`ours(round)`), so that a drift of the machine's
/// speed falls on both; each side's samples are merged into one row. Prints the
/// reference client's row (`theirs_name`), then distlock's (`ours_name`) with its
/// ratio to it; a reference client that failed leaves distlock's row without one.
/// Returns false when distlock's pairs failed.
inline bool pairs_beside_peer(const std::string& theirs_name, const std::function<std::vector<std::string>(int)>& peer,
                              const std::string& ours_name,
                              const std::function<std::optional<result_row>(int)>& ours, int rounds)
{
    result_row theirs{theirs_name}, mine{ours_name};
    bool peer_ok = true;
    for (int round = 0; round < rounds; ++round) {
        if (peer_ok) {
            const auto got = peer_pairs(peer(round));
            peer_ok = !got.us.empty();
            if (peer_ok)
                merge(theirs, got);
        }
        const auto got = ours(round);
        if (!got)
            return false;
        merge(mine, *got);
    }
    if (!peer_ok) {
        std::printf("  (%s: a run printed no samples; its row is left out)\n", theirs_name.c_str());
        print(mine);
        return true;
    }
    print(theirs);
    print(mine, &theirs);
    return true;
}

} // namespace bench
