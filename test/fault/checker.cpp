// The checker is tested before it is trusted: each rule on a history that keeps it
// and on one that breaks it.
#include "history.hpp"
#include "tally.hpp"

#include <catch2/catch.hpp>

using namespace fault;

namespace {

constexpr nanos ms = 1'000'000;

op grant(int process, std::uint64_t fence, nanos at, nanos valid_until, std::string resource = "r")
{
    return op{.process = process, .kind = kind::acquire, .resource = std::move(resource), .invoke = at - ms,
              .complete = at, .result = outcome::ok, .fence = fence, .valid_until = valid_until};
}

op of(int process, kind k, std::uint64_t fence, nanos invoke, nanos complete, outcome r = outcome::ok)
{
    return op{.process = process, .kind = k, .resource = "r", .invoke = invoke, .complete = complete, .result = r,
              .fence = fence};
}

bool mentions(const report& r, const std::string& rule)
{
    for (const auto& v : r.violations)
        if (v.starts_with(rule))
            return true;
    return false;
}

} // namespace

TEST_CASE("checker: a clean hand-over has no violation", "[checker]")
{
    const std::vector<op> h{
        grant(1, 1, 10 * ms, 100 * ms),
        of(1, kind::write, 1, 20 * ms, 20 * ms),
        of(1, kind::release, 1, 30 * ms, 31 * ms),
        of(1, kind::removed, 1, 30 * ms, 31 * ms),
        grant(2, 2, 32 * ms, 130 * ms),
        of(2, kind::write, 2, 40 * ms, 40 * ms),
        of(1, kind::write, 1, 50 * ms, 50 * ms, outcome::fail), // stale, rejected
        of(2, kind::release, 2, 60 * ms, 61 * ms),
    };
    const auto r = check(h);
    CHECK(r.clean());
    CHECK(r.grants == 2);
    CHECK(r.operations == h.size());
}

TEST_CASE("checker: overlapping validity is an exclusion violation", "[checker]")
{
    // Process 1 still trusts its lease (valid until 100 ms) when process 2 gets it.
    const auto r = check({grant(1, 1, 10 * ms, 100 * ms), grant(2, 2, 60 * ms, 150 * ms)});
    CHECK(mentions(r, "exclusion"));
    // Ending the first lease by unlock() before the second grant clears it...
    CHECK(check({grant(1, 1, 10 * ms, 100 * ms), of(1, kind::release, 1, 50 * ms, 51 * ms),
                 grant(2, 2, 60 * ms, 150 * ms)})
              .clean());
    // ...and so does a loss reported before it.
    CHECK(check({grant(1, 1, 10 * ms, 100 * ms), of(1, kind::lost, 1, 55 * ms, 55 * ms),
                 grant(2, 2, 60 * ms, 150 * ms)})
              .clean());
    // An extension moves validity forward: now it overlaps.
    auto extended = of(1, kind::extend, 1, 40 * ms, 41 * ms);
    extended.valid_until = 70 * ms;
    CHECK(mentions(check({grant(1, 1, 10 * ms, 50 * ms), extended, grant(2, 2, 60 * ms, 150 * ms)}), "exclusion"));
    // A long lease overlapping a later one, not only the next.
    const auto long_lease = check({grant(1, 1, 10 * ms, 500 * ms), grant(2, 2, 20 * ms, 25 * ms),
                                   of(2, kind::release, 2, 22 * ms, 23 * ms), grant(3, 3, 300 * ms, 350 * ms)});
    REQUIRE(long_lease.violations.size() == 2);
    CHECK(long_lease.violations[1].find("process 3") != std::string::npos);
    // Other resources do not interfere.
    CHECK(check({grant(1, 1, 10 * ms, 100 * ms), grant(2, 1, 60 * ms, 150 * ms, "other")}).clean());
}

TEST_CASE("checker: fences must grow from grant to grant", "[checker]")
{
    const std::vector<op> h{grant(1, 5, 10 * ms, 20 * ms), grant(2, 5, 30 * ms, 40 * ms), grant(3, 4, 50 * ms, 60 * ms)};
    const auto r = check(h);
    CHECK(mentions(r, "fencing"));
    CHECK(r.violations.size() == 3); // each of the three pairs is out of order
    // Calls that overlapped in time may complete in either order.
    auto overlapping = grant(2, 1, 30 * ms, 40 * ms);
    overlapping.invoke = 5 * ms;
    CHECK(check({grant(1, 2, 10 * ms, 20 * ms), overlapping}).clean());
    // Unless the run says the store lost its counters.
    CHECK(check(h, check_options{.fences_grow = false}).clean());
}

TEST_CASE("checker: a stale fenced write accepted after a newer one is a violation", "[checker]")
{
    const auto r = check({of(2, kind::write, 2, 10 * ms, 11 * ms), of(1, kind::write, 1, 20 * ms, 21 * ms)});
    CHECK(mentions(r, "fenced write"));
    // Concurrent writes (the older sent before the newer completed) may land either way.
    CHECK(check({of(2, kind::write, 2, 10 * ms, 30 * ms), of(1, kind::write, 1, 20 * ms, 21 * ms)}).clean());
    // Send times need not follow completion times: B (sent at 5) overlapped C and A.
    CHECK(check({of(1, kind::write, 5, 5 * ms, 60 * ms), of(2, kind::write, 9, 6 * ms, 7 * ms),
                 of(3, kind::write, 9, 10 * ms, 50 * ms)})
              .clean());
    CHECK(mentions(check({of(2, kind::write, 9, 6 * ms, 7 * ms), of(3, kind::write, 9, 10 * ms, 50 * ms),
                          of(1, kind::write, 5, 55 * ms, 60 * ms)}),
                   "fenced write"));
}

TEST_CASE("checker: removing another holder's lock, or extending after a newer grant, breaks owner safety",
          "[checker]")
{
    auto removed = of(1, kind::removed, 1, 50 * ms, 51 * ms);
    removed.foreign = true;
    CHECK(mentions(check({grant(1, 1, 10 * ms, 20 * ms), grant(2, 2, 40 * ms, 90 * ms), removed}), "owner safety"));
    // Removing its own lock (from a node the next holder did not win) is fine...
    removed.foreign = false;
    CHECK(check({grant(1, 1, 10 * ms, 20 * ms), grant(2, 2, 40 * ms, 90 * ms), removed}).clean());
    // ...and so is the store refusing.
    removed.foreign = true;
    removed.result = outcome::fail;
    CHECK(check({grant(1, 1, 10 * ms, 20 * ms), grant(2, 2, 40 * ms, 90 * ms), removed}).clean());

    auto extended = of(1, kind::extend, 1, 50 * ms, 51 * ms);
    extended.valid_until = 30 * ms;
    CHECK(mentions(check({grant(1, 1, 10 * ms, 20 * ms), grant(2, 2, 40 * ms, 90 * ms), extended}), "owner safety"));
    extended.invoke = 30 * ms;
    CHECK(check({grant(1, 1, 10 * ms, 20 * ms), grant(2, 2, 40 * ms, 90 * ms), extended}).clean());
    // Judged by time, not by fence: an older grant with a larger fence (a store that
    // lost its counter) is not "newer".
    extended.invoke = 50 * ms;
    CHECK(check({grant(2, 9, 5 * ms, 8 * ms), grant(1, 1, 10 * ms, 60 * ms), extended},
                check_options{.fences_grow = false})
              .clean());
}

TEST_CASE("checker: state left behind and a stalled hand-over are found", "[checker]")
{
    CHECK(mentions(check({of(0, kind::probe, 0, 10 * ms, 10 * ms, outcome::fail)}), "leak"));
    CHECK(check({of(0, kind::probe, 0, 10 * ms, 10 * ms)}).clean());

    // Process 1 crashes at 100 ms; process 2 waits from 50 ms.
    auto waiting = op{.process = 2, .kind = kind::acquire, .resource = "r", .invoke = 50 * ms, .complete = 900 * ms,
                      .result = outcome::ok, .fence = 2, .valid_until = 1000 * ms};
    const std::vector<op> late{grant(1, 1, 10 * ms, 500 * ms), of(1, kind::crash, 1, 100 * ms, 100 * ms), waiting};
    const check_options bound{.liveness_bound = 600 * ms};
    CHECK(mentions(check(late, bound), "liveness"));
    waiting.complete = 600 * ms;
    CHECK(check({grant(1, 1, 10 * ms, 500 * ms), of(1, kind::crash, 1, 100 * ms, 100 * ms), waiting}, bound).clean());
    // A waiter that gave up at its own deadline, before the bound, was not left waiting.
    waiting.result = outcome::fail;
    waiting.complete = 300 * ms;
    CHECK(check({grant(1, 1, 10 * ms, 500 * ms), of(1, kind::crash, 1, 100 * ms, 100 * ms), waiting}, bound).clean());
}

TEST_CASE("checker: a lease that ran out unreported is a loss-report violation", "[checker]")
{
    const check_options slack{.loss_report_slack = 2 * ms};
    CHECK(mentions(check({grant(1, 1, 10 * ms, 100 * ms)}, slack), "loss report"));
    CHECK(mentions(check({grant(1, 1, 10 * ms, 100 * ms), of(1, kind::lost, 1, 150 * ms, 150 * ms)}, slack),
                   "loss report"));
    CHECK(check({grant(1, 1, 10 * ms, 100 * ms), of(1, kind::lost, 1, 101 * ms, 101 * ms)}, slack).clean());
    CHECK(check({grant(1, 1, 10 * ms, 100 * ms), of(1, kind::release, 1, 50 * ms, 51 * ms)}, slack).clean());
    CHECK(check({grant(1, 1, 10 * ms, 100 * ms), of(1, kind::crash, 0, 50 * ms, 50 * ms)}, slack).clean());
    // Not checked unless asked.
    CHECK(check({grant(1, 1, 10 * ms, 100 * ms)}).clean());
}

TEST_CASE("checker: history lines round-trip", "[checker]")
{
    const auto o = grant(3, 42, 1234567890123, 1234567990123, "wallet");
    const auto line = to_line(o);
    const auto back = from_line(line);
    REQUIRE(back);
    CHECK(to_line(*back) == line);
    CHECK(back->fence == 42);
    CHECK(back->valid_until == o.valid_until);
    CHECK_FALSE(from_line("op 1 nonsense r 1 2 ok 3 4"));
    CHECK_FALSE(from_line("locked 7"));
    CHECK_FALSE(from_line("op 1 acquire r 1 2 maybe 3 4"));
}

namespace {

op shared_grant(int process, std::uint64_t fence, nanos at, nanos valid_until, std::uint32_t permits = 0,
                std::uint32_t slot = 0)
{
    auto o = grant(process, fence, at, valid_until);
    o.shared = true;
    o.permits = permits;
    o.slot = slot;
    return o;
}

} // namespace

TEST_CASE("checker: readers overlap each other, never a writer", "[checker]")
{
    // Two readers at once, then a writer after both.
    CHECK(check({shared_grant(1, 1, 10 * ms, 100 * ms), shared_grant(2, 2, 20 * ms, 100 * ms),
                 grant(3, 3, 110 * ms, 200 * ms)})
              .clean());
    // A writer granted while a reader still holds.
    CHECK(mentions(check({shared_grant(1, 1, 10 * ms, 100 * ms), grant(2, 2, 50 * ms, 150 * ms)}), "exclusion"));
    // A reader granted while a writer still holds, behind an earlier reader that ended.
    CHECK(mentions(check({grant(1, 1, 10 * ms, 100 * ms), shared_grant(2, 2, 50 * ms, 150 * ms)}), "exclusion"));
    CHECK(mentions(check({shared_grant(1, 1, 5 * ms, 8 * ms), grant(2, 2, 10 * ms, 100 * ms),
                          shared_grant(3, 3, 50 * ms, 60 * ms)}),
                   "exclusion"));
    // A reader whose lease was released before the writer's grant leaves none.
    CHECK(check({shared_grant(1, 1, 10 * ms, 100 * ms), of(1, kind::release, 1, 40 * ms, 41 * ms),
                 grant(2, 2, 50 * ms, 150 * ms)})
              .clean());
}

TEST_CASE("checker: at most N permits at once, never one number twice", "[checker]")
{
    CHECK(check({shared_grant(1, 1, 10 * ms, 100 * ms, 2, 0), shared_grant(2, 2, 20 * ms, 100 * ms, 2, 1),
                 shared_grant(3, 3, 110 * ms, 200 * ms, 2, 0)})
              .clean());
    CHECK(mentions(check({shared_grant(1, 1, 10 * ms, 100 * ms, 2, 0), shared_grant(2, 2, 20 * ms, 100 * ms, 2, 1),
                          shared_grant(3, 3, 30 * ms, 200 * ms, 2, 2)}),
                   "permits"));
    CHECK(mentions(check({shared_grant(1, 1, 10 * ms, 100 * ms, 2, 1), shared_grant(2, 2, 20 * ms, 100 * ms, 2, 1)}),
                   "permits"));
    // A permit whose lease ended (lost) frees its number.
    CHECK(check({shared_grant(1, 1, 10 * ms, 100 * ms, 1, 0), of(1, kind::lost, 1, 30 * ms, 30 * ms),
                 shared_grant(2, 2, 40 * ms, 100 * ms, 1, 0)})
              .clean());
}

TEST_CASE("checker: a shared grant's line keeps its mode, count and number", "[checker]")
{
    const auto o = shared_grant(4, 17, 10 * ms, 100 * ms, 3, 2);
    const auto back = from_line(to_line(o));
    REQUIRE(back);
    CHECK(back->shared);
    CHECK(back->permits == 3);
    CHECK(back->slot == 2);
    CHECK(back->fence == 17);
    const auto exclusive = from_line(to_line(grant(1, 1, 10 * ms, 100 * ms)));
    REQUIRE(exclusive);
    CHECK_FALSE(exclusive->shared);
    CHECK_FALSE(from_line(to_line(grant(1, 1, 10 * ms, 100 * ms)) + " sharedd 1 1"));
}

TEST_CASE("checker: readers extend beside each other; a writer's grant ends a reader's right to", "[checker]")
{
    auto extended = of(1, kind::extend, 1, 60 * ms, 61 * ms);
    extended.valid_until = 200 * ms;
    CHECK(check({shared_grant(1, 1, 10 * ms, 100 * ms), shared_grant(2, 2, 20 * ms, 100 * ms), extended}).clean());
    CHECK(mentions(check({shared_grant(1, 1, 10 * ms, 30 * ms), grant(2, 2, 40 * ms, 100 * ms), extended}),
                   "owner safety"));
}

TEST_CASE("checker: a term is given up only after its work returned, which takes its writes with it", "[checker]")
{
    // Term 1 of process 1: work writes, returns, then the term is given up; term 2
    // follows with a larger epoch.
    const std::vector<op> kept{
        grant(1, 1, 10 * ms, 100 * ms),
        of(1, kind::write, 1, 20 * ms, 21 * ms),
        of(1, kind::work_end, 1, 25 * ms, 25 * ms),
        of(1, kind::release, 1, 26 * ms, 27 * ms),
        grant(2, 2, 30 * ms, 130 * ms),
        of(2, kind::work_end, 2, 40 * ms, 40 * ms),
        of(2, kind::release, 2, 41 * ms, 42 * ms),
    };
    CHECK(check(kept).clean());
    // The term given up while its work still ran.
    auto early = kept;
    early[3].invoke = 22 * ms;
    CHECK(mentions(check(early), "terms"));
    // A write of the work that completed after the work had returned.
    auto late = kept;
    late[1].complete = 26 * ms;
    CHECK(mentions(check(late), "terms"));
    // Terms overlapping, and epochs going back, are what the exclusion and fencing
    // rules find for any grant.
    CHECK(mentions(check({grant(1, 2, 10 * ms, 100 * ms), grant(2, 1, 200 * ms, 300 * ms)}), "fencing"));
}
