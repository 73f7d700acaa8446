// eventually(): waits inside a test coroutine until a condition holds, within a
// bounded budget, instead of a hand-written "spawn, then poll until done" loop.
#pragma once

#include "support.hpp"

#include <algorithm>
#include <chrono>
#include <functional>
#include <sstream>
#include <string_view>

namespace test {

/// How eventually() moves things along between two looks at its condition.
struct steps {
    /// At most this many steps; the condition still false after them fails the test.
    int max = 1000;
    /// With a manual clock: time advanced per step (due timers fire). Without one:
    /// real time waited per step, which only bounds a hang and never makes a timing
    /// claim.
    dl::duration each = std::chrono::milliseconds{2};
    /// Advance this clock per step, or nullptr to wait on real time.
    dl::manual_clock* clock = nullptr;
};

/// Real time enough for a store on a loaded machine (2,500 steps of 2 ms).
inline steps long_enough()
{
    return {.max = 2500};
}

/// Lets the io_context run until `holds()` is true: looks once at once, then after
/// every step, up to `budget.max` steps. Fails the test (REQUIRE-style: the calling
/// coroutine stops) naming `what`, the steps taken and the time they covered.
/// Returns the number of steps it took, for tests that want to bound it.
inline asio::awaitable<int> eventually(std::string_view what, std::function<bool()> holds, steps budget = {})
{
    int taken = 0;
    while (!holds()) {
        if (taken == budget.max) {
            std::ostringstream message;
            message << "eventually: \"" << what << "\" still false after " << taken << " steps of "
                    << std::chrono::duration_cast<std::chrono::microseconds>(budget.each).count() << " us"
                    << (budget.clock ? " (manual clock)" : " (real time)");
            FAIL(message.str());
        }
        if (budget.clock) {
            budget.clock->advance(budget.each);
            // Timers under a manual clock poll every millisecond: give them a few.
            co_await settle(std::chrono::milliseconds{3});
        } else {
            // At least a millisecond, so that a tiny step still lets work run.
            const auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(budget.each);
            co_await settle(std::max(wait, std::chrono::milliseconds{1}));
        }
        ++taken;
    }
    co_return taken;
}

} // namespace test
