// distlock/clock.hpp: the monotonic clock every lease is measured on, and a manual
// clock that drives it (and every distlock timer) in tests.
//
// Design note. Asio's timer queue asks `Clock::now()` as a static function, so a clock
// that tests can drive has to be process-wide: `distlock::clock` reads
// `std::chrono::steady_clock` unless a `manual_clock` object is alive, in which case
// time stands still until the test advances it. Only timers of type `distlock::timer`
// follow the manual clock; its wait traits make the reactor poll every millisecond
// while a manual clock is installed, so an advance is seen promptly without sleeping.
#pragma once

#include <asio/basic_waitable_timer.hpp>
#include <asio/wait_traits.hpp>

#include <atomic>
#include <cassert>
#include <chrono>
#include <cstdint>
#include <limits>

namespace distlock {

namespace detail {
// INT64_MIN means "no manual clock installed"; otherwise nanoseconds since the
// steady clock's epoch.
inline constexpr std::int64_t no_manual_time = std::numeric_limits<std::int64_t>::min();
inline std::atomic<std::int64_t>& manual_time_ns() noexcept
{
    static std::atomic<std::int64_t> value{no_manual_time};
    return value;
}
} // namespace detail

/// Monotonic clock of all lease arithmetic: std::chrono::steady_clock, unless a
/// manual_clock is installed.
struct clock {
    using duration = std::chrono::nanoseconds;
    using rep = duration::rep;
    using period = duration::period;
    using time_point = std::chrono::time_point<clock, duration>;
    static constexpr bool is_steady = true;

    static time_point now() noexcept
    {
        const auto manual = detail::manual_time_ns().load(std::memory_order_acquire);
        if (manual != detail::no_manual_time)
            return time_point{duration{manual}};
        return time_point{std::chrono::duration_cast<duration>(
            std::chrono::steady_clock::now().time_since_epoch())};
    }

    static bool is_manual() noexcept
    {
        return detail::manual_time_ns().load(std::memory_order_relaxed) != detail::no_manual_time;
    }
};

using duration = clock::duration;
using time_point = clock::time_point;

/// Wait traits for distlock timers: real waits normally, 1 ms polling under a manual clock.
struct clock_wait_traits {
    static duration to_wait_duration(const duration& d)
    {
        if (clock::is_manual())
            return d > duration::zero() ? duration{std::chrono::milliseconds{1}} : duration::zero();
        return d;
    }
    static duration to_wait_duration(const time_point& t)
    {
        const auto now = clock::now();
        if (t <= now)
            return duration::zero();
        // Subtracting from time_point::max() must not overflow.
        const auto left = t.time_since_epoch().count() - now.time_since_epoch().count() < 0
                              ? duration::max()
                              : t - now;
        return to_wait_duration(left);
    }
};

/// The timer every distlock operation waits on.
using timer = asio::basic_waitable_timer<clock, clock_wait_traits>;

/// A clock that stands still until advanced. While one is alive, `distlock::clock`
/// and every `distlock::timer` in the process follow it. At most one may be alive.
///
///     distlock::manual_clock clock;
///     // ... take a lease with ttl 10s
///     clock.advance(11s);   // the lease's local validity has now run out
class manual_clock {
public:
    manual_clock() noexcept
    {
        const auto start = std::chrono::duration_cast<duration>(
                               std::chrono::steady_clock::now().time_since_epoch())
                               .count();
        [[maybe_unused]] auto previous = detail::manual_time_ns().exchange(start);
        assert(previous == detail::no_manual_time && "only one manual_clock may be alive");
    }
    ~manual_clock() { detail::manual_time_ns().store(detail::no_manual_time); }
    manual_clock(const manual_clock&) = delete;
    manual_clock& operator=(const manual_clock&) = delete;

    time_point now() const noexcept { return clock::now(); }

    /// Moves time forward; timers whose expiry is passed fire within a millisecond.
    void advance(duration d) noexcept
    {
        assert(d >= duration::zero() && "a monotonic clock never goes back");
        detail::manual_time_ns().fetch_add(d.count(), std::memory_order_acq_rel);
    }
};

} // namespace distlock
