// distlock/testing.hpp: driving code that uses distlock under a manual clock, in a
// user's own unit tests.
//
//     distlock::manual_clock clock;
//     asio::io_context io;
//     distlock::memory::store store{io};
//     asio::co_spawn(io, code_under_test(store), asio::detached);
//     distlock::testing::advance(clock, io, 30s);  // 30 s pass; everything due runs
//
// Only distlock::timer follows the manual clock: code under test that waits must
// wait on it (asio::steady_timer would wait real time).
#pragma once

#include <distlock/util/config.hpp>
#include <distlock/clock.hpp>

#include <asio/io_context.hpp>

#include <algorithm>
#include <chrono>
#include <cstddef>

namespace distlock::testing {

/// Runs on `io` everything that is due at the clock's current time: ready handlers
/// and every timer expired by then, and what those start in turn, until nothing due
/// is left. Returns the handlers it ran. Call from the thread that runs `io` (or with
/// nobody else running it).
///
/// Why a probe timer: under a manual clock distlock timers are looked at every real
/// millisecond. A timer set to the clock's epoch is the earliest in the queue, so the
/// reactor looks at the queue at once, and every other timer already due fires in the
/// same pass; when the probe runs alone, nothing due is left.
inline std::size_t run_due(asio::io_context& io)
{
    std::size_t total = 0;
    for (;;) {
        bool fired = false;
        timer probe{io};
        probe.expires_at(time_point{});
        probe.async_wait([&](std::error_code) { fired = true; });
        std::size_t ran = 0;
        while (!fired) {
            if (io.stopped())
                io.restart();
            ran += io.run_one();
        }
        if (io.stopped())
            io.restart();
        ran += io.poll();
        total += ran - 1;
        if (ran <= 1) // the probe alone
            return total;
    }
}

/// Advances `clock` by `by` in steps of `step`, running everything due after each
/// step (run_due): a lease's renewals, a retry's delays, a TTL's expiry happen in
/// order, as they would in real time. A `step` of zero or less is taken as 1 ms.
/// Returns the handlers it ran.
inline std::size_t advance(manual_clock& clock, asio::io_context& io, duration by,
                           duration step = std::chrono::milliseconds{1})
{
    if (step <= duration::zero())
        step = std::chrono::milliseconds{1};
    std::size_t total = run_due(io);
    for (duration done{}; done < by;) {
        const auto d = std::min(step, by - done);
        clock.advance(d);
        done += d;
        total += run_due(io);
    }
    return total;
}

} // namespace distlock::testing
