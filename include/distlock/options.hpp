// distlock/options.hpp: what a lock asks of the store, and the limits checked
// before any I/O.
#pragma once

#include <distlock/clock.hpp>
#include <distlock/error.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string_view>

namespace distlock {

/// Grows with every acquisition of one resource; the store that owns the protected
/// data rejects writes carrying a token older than one it has accepted.
using fence_token = std::uint64_t;

/// Longest resource id accepted, in bytes. Ids are binary-safe: any bytes, including
/// NUL, spaces, newlines and braces, up to this length.
inline constexpr std::size_t max_resource_size = 1024;

/// Longest value an election's leader may proclaim, in bytes (any bytes, NUL included).
inline constexpr std::size_t max_leader_value_size = 64 * 1024;

/// The most permits a semaphore may have.
inline constexpr std::uint32_t max_permits = 4096;

/// Longest TTL accepted. Stores keep TTLs in milliseconds in 32 or 64 bits; one day
/// is far beyond any sensible lease and far below every store's limit.
inline constexpr duration max_ttl = std::chrono::hours{24};

/// Shortest TTL accepted: stores count TTLs in whole milliseconds.
inline constexpr duration min_ttl = std::chrono::milliseconds{1};

/// Longest retry deadline, retry delay or watchdog hold accepted: 366 days. Longer
/// ones are taken for mistakes; near the clock's range (292 years of nanoseconds)
/// "now + duration" would overflow.
inline constexpr duration max_wait = std::chrono::hours{24 * 366};

/// How long a lock() call that waits for its turn in a fair queue (etcd, ZooKeeper, a
/// session store: it watches the entry before its own) goes without looking at its
/// place again, when the retry policy would have it look sooner. The watch wakes it
/// when its turn may have come; the look is a safety net for a lost notification.
inline constexpr duration turn_recheck = std::chrono::seconds{1};

/// Settings of one lock.
struct lock_options {
    /// How long the store keeps the lock if its holder vanishes.
    duration ttl = std::chrono::seconds{10};

    /// Clock rate error allowed between client and store, as a fraction of the TTL.
    /// The lease is reported valid until attempt start + ttl - (ttl * drift_factor + drift_floor).
    double drift_factor = 0.01;

    /// Fixed part of the safety margin (timer and scheduling slack).
    duration drift_floor = std::chrono::milliseconds{2};

    /// Lock-delay: after a grant ends without a release (its TTL ran out, its session
    /// expired, its holder was killed), the resource refuses new grants for this long,
    /// so that what the lost holder still had in flight drains first. Kept in the
    /// store, so every client honours it; unlock() skips it. Zero: none. At most the
    /// TTL. Needs a store that keeps lock-delays (lock_delay_store); exclusive grants
    /// only (docs/lock_delay.md).
    duration lock_delay{};

    /// The safety margin subtracted from every validity: ttl * drift_factor + drift_floor.
    /// Saturates to duration's range, so that even settings that validate_options()
    /// rejects (a NaN or huge factor, a drift_floor near duration::max()) give some
    /// value without a signed overflow.
    duration drift() const noexcept
    {
        // The proportional part, truncated to whole nanoseconds, then the floor added
        // in integers (as duration_cast(ttl * drift_factor) + drift_floor would, for
        // valid settings).
        const double scaled = static_cast<double>(ttl.count()) * drift_factor;
        // 2^63 is exactly representable; anything at or beyond it (or NaN) saturates.
        constexpr double limit = 9223372036854775808.0;
        if (!(scaled < limit))
            return duration::max();
        if (scaled <= -limit)
            return duration::min();
        const auto proportional = static_cast<duration::rep>(scaled);
        const auto floor = drift_floor.count();
        if (floor > 0 && proportional > std::numeric_limits<duration::rep>::max() - floor)
            return duration::max();
        if (floor < 0 && proportional < std::numeric_limits<duration::rep>::min() - floor)
            return duration::min();
        return duration{proportional + floor};
    }
};

/// Checks a resource id: non-empty and at most max_resource_size bytes.
inline std::error_code validate_resource(std::string_view resource) noexcept
{
    if (resource.empty() || resource.size() > max_resource_size)
        return errc::invalid_argument;
    return {};
}

/// Checks lock options: a TTL within [min_ttl, max_ttl], a finite drift_factor in
/// [0, 1), a drift_floor in [0, ttl), a margin that leaves some validity, and a
/// lock_delay in [0, ttl].
/// Every bound is compared before anything is computed from it: a drift_floor near
/// duration::max() must not overflow into a small margin that passes.
inline std::error_code validate_options(const lock_options& o) noexcept
{
    if (o.ttl < min_ttl || o.ttl > max_ttl)
        return errc::invalid_argument;
    // Written so that NaN fails (every comparison with NaN is false); +inf fails < 1.
    if (!(o.drift_factor >= 0.0 && o.drift_factor < 1.0))
        return errc::invalid_argument;
    if (o.drift_floor < duration::zero() || o.drift_floor >= o.ttl)
        return errc::invalid_argument;
    // Both parts are now below ttl <= max_ttl (about 2^46 ns): the sum cannot overflow.
    if (o.drift() >= o.ttl)
        return errc::invalid_argument;
    if (o.lock_delay < duration::zero() || o.lock_delay > o.ttl)
        return errc::invalid_argument;
    return {};
}

/// Checks a deadline given to lock_until() against `now`: later than now, and no
/// more than max_wait after it (a deadline near time_point::max() is taken for a
/// mistake, as a retry deadline beyond max_wait is). No signed overflow for any
/// pair of time points.
inline std::error_code validate_deadline(time_point deadline, time_point now) noexcept
{
    if (deadline <= now)
        return errc::invalid_argument;
    // deadline > now, so the true difference is positive and fits in 64 unsigned
    // bits, where wrap-around is defined; the signed subtraction could overflow
    // (time_point::max() minus a negative now).
    const auto ahead = static_cast<std::uint64_t>(deadline.time_since_epoch().count()) -
                       static_cast<std::uint64_t>(now.time_since_epoch().count());
    if (ahead > static_cast<std::uint64_t>(max_wait.count()))
        return errc::invalid_argument;
    return {};
}

} // namespace distlock
