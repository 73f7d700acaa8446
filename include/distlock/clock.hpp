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

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <limits>
#include <stdexcept>

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

/// Sums and multiples of durations that stop at the type's limits instead of
/// overflowing: settings are added before they are checked (an attempt's bound is a
/// connect timeout plus a request timeout), so every such sum must be defined for any
/// value a user can pass.
constexpr duration saturating_add(duration a, duration b) noexcept
{
    duration::rep out{};
    if (__builtin_add_overflow(a.count(), b.count(), &out))
        return b.count() > 0 ? duration::max() : duration::min();
    return duration{out};
}

/// `a` times `n`, stopping at the duration's limits.
constexpr duration saturating_mul(duration a, std::int64_t n) noexcept
{
    duration::rep out{};
    if (__builtin_mul_overflow(a.count(), n, &out))
        return (a.count() < 0) != (n < 0) ? duration::min() : duration::max();
    return duration{out};
}

/// `t + d`, stopping at the time point's limits.
constexpr time_point saturating_add(time_point t, duration d) noexcept
{
    return time_point{saturating_add(t.time_since_epoch(), d)};
}

/// When to send the next keepalive (ping, extension) of something valid until
/// `valid_until`: after `interval`, but never later than halfway through the validity
/// left, so that one is always sent while validity remains, however late the last
/// answer came. A session is then in doubt only when keepalives were sent and not
/// answered in time, never because the client slept through its validity. At
/// `valid_until` or after: now.
constexpr time_point next_keepalive(time_point now, time_point valid_until, duration interval) noexcept
{
    if (now >= valid_until)
        return now;
    // Half the validity left, each halved first: the difference of two halves cannot
    // overflow, whatever the time points (a validity of time_point::max() included).
    const duration half{valid_until.time_since_epoch().count() / 2 - now.time_since_epoch().count() / 2};
    return saturating_add(now, std::clamp(interval, duration::zero(), half));
}

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
/// and every `distlock::timer` in the process follow it (code under test must wait on
/// `distlock::timer`, not `asio::steady_timer`, to follow it). At most one may be
/// alive: a second one throws std::logic_error. distlock/testing.hpp has the helper
/// that advances it and runs what falls due.
///
///     distlock::manual_clock clock;
///     // ... take a lease with ttl 10s
///     clock.advance(11s);   // the lease's local validity has now run out
class manual_clock {
public:
    manual_clock()
    {
        const auto start = std::chrono::duration_cast<duration>(
                               std::chrono::steady_clock::now().time_since_epoch())
                               .count();
        auto expected = detail::no_manual_time;
        if (!detail::manual_time_ns().compare_exchange_strong(expected, start))
            throw std::logic_error{"distlock::manual_clock: another one is alive (at most one per process: "
                                   "the clock it drives is process-wide)"};
    }
    ~manual_clock() { detail::manual_time_ns().store(detail::no_manual_time); }
    manual_clock(const manual_clock&) = delete;
    manual_clock& operator=(const manual_clock&) = delete;

    time_point now() const noexcept { return clock::now(); }

    /// Moves time forward; timers whose expiry is passed fire within a millisecond.
    /// Throws std::invalid_argument for a negative `d` (a monotonic clock never goes
    /// back) and std::overflow_error past the clock's last time point.
    void advance(duration d)
    {
        if (d < duration::zero())
            throw std::invalid_argument{"distlock::manual_clock::advance: a monotonic clock never goes back"};
        auto& t = detail::manual_time_ns();
        auto now = t.load(std::memory_order_acquire);
        do {
            if (d.count() > std::numeric_limits<std::int64_t>::max() - now)
                throw std::overflow_error{"distlock::manual_clock::advance: past the clock's last time point"};
        } while (!t.compare_exchange_weak(now, now + d.count(), std::memory_order_acq_rel));
    }
};

} // namespace distlock
