// Many seeded runs of random faults over the in-process stores, each checked. A run
// that breaks a promise prints its seed; replay it alone with
//   DISTLOCK_SIM_SEED=<seed> distlock_fault_tests "<test name>"
// DISTLOCK_SIM_SEEDS sets how many seeds each test runs (default 25);
// DISTLOCK_SIM_HISTORY=<file> keeps the whole history of a failing run.
#include "sim.hpp"
#include "tally.hpp"

#include <catch2/catch.hpp>

#include <cstdlib>
#include <fstream>
#include <iostream>

using namespace fault;
using namespace std::chrono_literals;

namespace {

std::vector<std::uint64_t> seeds(std::uint64_t base)
{
    if (const char* one = std::getenv("DISTLOCK_SIM_SEED"))
        return {std::strtoull(one, nullptr, 10)};
    std::size_t n = 25;
    if (const char* many = std::getenv("DISTLOCK_SIM_SEEDS"))
        n = std::strtoull(many, nullptr, 10);
    std::vector<std::uint64_t> out;
    for (std::size_t i = 0; i < n; ++i)
        out.push_back(base + i);
    return out;
}

// The history of a failing run: its start on stdout, all of it in the file named by
// DISTLOCK_SIM_HISTORY.
void print_history(const sim::outcome_of_run& run)
{
    std::cout << run.digest.substr(0, 6000) << (run.digest.size() > 6000 ? "...\n" : "");
    if (const char* path = std::getenv("DISTLOCK_SIM_HISTORY"))
        std::ofstream{path} << run.digest;
}

/// Runs every seed of a configuration that must keep every promise.
void must_hold(sim::config c, std::uint64_t base)
{
    ++tally::get().scenarios;
    std::size_t grants = 0, faults = 0;
    for (const auto seed : seeds(base)) {
        c.seed = seed;
        const auto run = sim::run(c);
        tally::get().add(run.checked, run.faults_injected);
        grants += run.checked.grants;
        faults += run.faults_injected;
        if (!run.checked.clean()) {
            std::cout << "seed " << seed << " broke a promise: " << run.checked.summary() << "\n";
            print_history(run);
            FAIL("violation with seed " << seed << " (replay with DISTLOCK_SIM_SEED=" << seed << ")");
        }
    }
    // The runs did something: locks changed hands and faults were injected.
    CHECK(grants > 0);
    CHECK(faults > 0);
}

/// Runs seeds of a configuration that breaks a promise until the checker sees it.
report must_break(sim::config c, std::uint64_t base, const std::string& rule)
{
    ++tally::get().scenarios;
    for (const auto seed : seeds(base)) {
        c.seed = seed;
        const auto run = sim::run(c);
        bool found = false;
        for (const auto& v : run.checked.violations)
            found = found || v.starts_with(rule);
        tally::get().add(run.checked, run.faults_injected, true);
        if (found) {
            INFO("seed " << seed << ": " << run.checked.summary());
            CHECK(found);
            return run.checked;
        }
    }
    FAIL("no seed broke " << rule);
    return {};
}

/// Redlock on `nodes` in-process nodes over the faulty network; nodes restart empty
/// with probability `restart` per millisecond, staying down for `down` first.
sim::config redlock(int nodes, double restart = 0, std::chrono::milliseconds down = 0ms);

sim::faults network()
{
    sim::faults f;
    f.max_delay = 15ms;
    f.drop_request = 0.03;
    f.drop_reply = 0.03;
    f.timeout = 40ms;
    // TTL 200 ms, drift margin 200 * 0.01 + 2 = 4 ms: rate errors up to 1.5 % are
    // within the bound the lease's validity allows for.
    f.rate_min = 0.985;
    f.rate_max = 1.015;
    f.crash = 0.05;
    return f;
}

sim::config redlock(int nodes, double restart, std::chrono::milliseconds down)
{
    sim::config c;
    c.how = sim::acquisition::quorum;
    c.nodes = nodes;
    c.faults = network();
    c.faults.restart = restart;
    c.faults.restart_after = down;
    return c;
}

} // namespace

TEST_CASE("simulation: SET NX locks keep their promises under delays, drops, stalls and crashes", "[sim]")
{
    sim::config c;
    c.how = sim::acquisition::setnx;
    c.faults = network();
    must_hold(c, 1000);
}

TEST_CASE("simulation: conditional-write locks keep their promises under the same faults", "[sim]")
{
    sim::config c;
    c.how = sim::acquisition::conditional_write;
    c.faults = network();
    must_hold(c, 2000);
}

TEST_CASE("simulation: session-bound leases (fair queue, predecessor watches) keep their promises under the same "
          "faults, stalls cutting keepalives and crashes ending sessions",
          "[sim][session]")
{
    sim::config c;
    c.how = sim::acquisition::session;
    c.faults = network();
    must_hold(c, 3000);
}

TEST_CASE("simulation regression: an entry of a session given up as in doubt never holds the lock for the next "
          "session",
          "[sim][session]")
{
    // Seed 3012 found it: a waiter's keepalive reply was lost, its client opened a new
    // session, and its old entry (expiring with the old session) was taken as its grant.
    sim::config c;
    c.how = sim::acquisition::session;
    c.faults = network();
    c.seed = 3012;
    const auto run = sim::run(c);
    INFO(run.checked.summary());
    CHECK(run.checked.clean());
    CHECK(run.checked.grants > 0);
}

TEST_CASE("simulation: sorted multi-locks keep their promises under the same faults", "[sim]")
{
    sim::config c;
    c.resources = 3;
    c.multi = 0.5; // half the rounds lock r2, r1, r0 at once (taken in sorted order)
    c.faults = network();
    must_hold(c, 1500);
    c.watchdog = true;
    must_hold(c, 1600);
    auto q = redlock(3);
    q.resources = 3;
    q.multi = 0.5;
    must_hold(q, 1700);
}

TEST_CASE("simulation: renewed leases report loss in time when extensions are late or lost", "[sim]")
{
    sim::config c;
    c.how = sim::acquisition::setnx;
    c.watchdog = true;
    c.faults = network();
    c.faults.max_delay = 40ms; // extensions regularly miss the local deadline
    c.faults.timeout = 90ms;
    must_hold(c, 3000);
}

TEST_CASE("simulation: a Redlock quorum of 5 keeps exclusion and fencing under delays, drops, stalls and crashes",
          "[sim]")
{
    must_hold(redlock(5), 4500);
}

TEST_CASE("simulation: a Redlock quorum of 5 survives delays, drops and nodes restarted after a TTL", "[sim]")
{
    // Restarted empty, but only after its locks expired (TTL 200 ms).
    must_hold(redlock(5, 0.004, 210ms), 4000);
}

TEST_CASE("simulation: liveness after holders crash, on a quiet network", "[sim]")
{
    // Crashes only: waiters must be served within TTL + retry delay of each crash.
    sim::config c;
    c.faults.crash = 0.3;
    c.faults.pause = 0;
    ++tally::get().scenarios;
    for (const auto seed : seeds(5000)) {
        c.seed = seed;
        auto run = sim::run(c);
        const auto bound = std::chrono::duration_cast<std::chrono::nanoseconds>(c.ttl + 40ms).count();
        const auto r = check(run.history, check_options{.liveness_bound = bound});
        tally::get().add(r, run.faults_injected);
        INFO("seed " << seed << ": " << r.summary());
        REQUIRE(r.clean());
    }
}

TEST_CASE("simulation: the same seed replays the same history", "[sim]")
{
    auto c = redlock(3);
    c.watchdog = true;
    c.seed = 77;
    const auto first = sim::run(c);
    const auto second = sim::run(c);
    CHECK(first.history.size() > 20);
    CHECK(first.digest == second.digest);
    c.seed = 78;
    CHECK(sim::run(c).digest != first.digest);
}

// Negative tests: deliberate bugs and documented limits the checker must see.

TEST_CASE("simulation finds: a store clock running fast beyond the drift bound breaks exclusion", "[sim][negative]")
{
    sim::config c;
    c.faults = network();
    c.faults.rate_min = 1.3; // keys expire after 150 ms of the holder's 196 ms
    c.faults.rate_max = 1.4;
    c.faults.pause = 0.3;
    must_break(c, 6000, "exclusion");
}

TEST_CASE("simulation finds: a release without owner check removes the next holder's lock", "[sim][negative]")
{
    sim::config c;
    c.faults = network();
    c.faults.pause = 0.4;
    c.defects.release_without_owner_check = true;
    must_break(c, 7000, "owner safety");
}

TEST_CASE("simulation finds: validity counted from the reply overlaps the next holder", "[sim][negative]")
{
    sim::config c;
    c.faults = network();
    c.faults.max_delay = 30ms;
    c.faults.timeout = 80ms;
    c.faults.pause = 0.5;
    c.defects.validity_from_reply = true;
    must_break(c, 8000, "exclusion");
}

TEST_CASE("simulation finds: a Redlock node restarted empty at once breaks exclusion", "[sim][negative]")
{
    // The documented limit: without persistence, a restarted node must stay down for
    // a TTL. Restarting at once lets a second client win a majority.
    auto c = redlock(3, 0.03);
    c.faults.crash = 0;
    must_break(c, 9000, "exclusion");
}

TEST_CASE("simulation regression: a late cleanup of a failed attempt cannot remove the next attempt's grant", "[sim]")
{
    // Seed 4026 of the quorum run above, found by this simulation: a release sent to
    // clean up after a failed attempt reached one node after the next attempt of the
    // same lock() call had won it. While attempts shared an owner token, that release
    // removed the new grant and a second client won a majority beside the holder.
    // Every attempt now has its own token.
    auto c = redlock(5, 0.004, 210ms);
    c.seed = 4026;
    const auto run = sim::run(c);
    tally::get().add(run.checked, run.faults_injected);
    INFO(run.checked.summary());
    CHECK(run.checked.clean());
}

TEST_CASE("simulation finds: a quorum node restarted empty can make the next token smaller", "[sim][negative]")
{
    // Exclusion holds when a node stays down for a TTL, but its fencing counter is
    // gone: when it was the only node two majorities shared, the token goes back.
    auto c = redlock(3, 0.01, 210ms);
    c.check_fences = true;
    const auto r = must_break(c, 10000, "fencing");
    for (const auto& v : r.violations)
        CHECK_FALSE(v.starts_with("exclusion")); // the delayed restart kept exclusion
}

TEST_CASE("simulation: shared mutexes (readers and writers) keep exclusion and fencing under delays, drops, stalls "
          "and crashes",
          "[sim][shared]")
{
    sim::config c;
    c.how = sim::acquisition::setnx;
    c.primitive = sim::primitive::shared_mutex;
    c.faults = network();
    must_hold(c, 5000);
    c.watchdog = true;
    must_hold(c, 5100);
}

TEST_CASE("simulation: shared mutexes on a session store keep exclusion and fencing under the same faults",
          "[sim][shared][session]")
{
    sim::config c;
    c.how = sim::acquisition::session;
    c.primitive = sim::primitive::shared_mutex;
    c.faults = network();
    must_hold(c, 5200);
}

TEST_CASE("simulation: semaphores hold at most N permits, one per number, and their per-number fences refuse stalled "
          "holders",
          "[sim][shared]")
{
    sim::config c;
    c.how = sim::acquisition::setnx;
    c.primitive = sim::primitive::semaphore;
    c.permits = 2;
    c.faults = network();
    must_hold(c, 5300);
    c.how = sim::acquisition::session;
    must_hold(c, 5400);
}

TEST_CASE("simulation: election terms keep their promises (one leader at a time, epochs grow, the work ends before "
          "its term is given up) under delays, drops, stalls and crashes",
          "[sim][election]")
{
    sim::config c;
    c.how = sim::acquisition::setnx;
    c.primitive = sim::primitive::election;
    c.watchdog = true;
    c.faults = network();
    must_hold(c, 11000);
}

TEST_CASE("simulation: election terms on a session store keep the same promises, stalls cutting keepalives",
          "[sim][election][session]")
{
    sim::config c;
    c.how = sim::acquisition::session;
    c.primitive = sim::primitive::election;
    c.faults = network();
    must_hold(c, 12000);
}
