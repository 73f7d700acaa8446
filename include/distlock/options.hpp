// distlock/options.hpp: what a lock asks of the store, and the limits checked
// before any I/O.
#pragma once

#include <distlock/clock.hpp>
#include <distlock/error.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace distlock {

/// Grows with every acquisition of one resource; the store that owns the protected
/// data rejects writes carrying a token older than one it has accepted.
using fence_token = std::uint64_t;

/// Longest resource id accepted, in bytes. Ids are binary-safe: any bytes, including
/// NUL, spaces, newlines and braces, up to this length.
inline constexpr std::size_t max_resource_size = 1024;

/// Longest TTL accepted. Stores keep TTLs in milliseconds in 32 or 64 bits; one day
/// is far beyond any sensible lease and far below every store's limit.
inline constexpr duration max_ttl = std::chrono::hours{24};

/// Shortest TTL accepted: stores count TTLs in whole milliseconds.
inline constexpr duration min_ttl = std::chrono::milliseconds{1};

/// Longest retry deadline, retry delay or watchdog hold accepted: 366 days. Longer
/// ones are taken for mistakes; near the clock's range (292 years of nanoseconds)
/// "now + duration" would overflow.
inline constexpr duration max_wait = std::chrono::hours{24 * 366};

/// Settings of one lock.
struct lock_options {
    /// How long the store keeps the lock if its holder vanishes.
    duration ttl = std::chrono::seconds{10};

    /// Clock rate error allowed between client and store, as a fraction of the TTL.
    /// The lease is reported valid until attempt start + ttl - (ttl * drift_factor + drift_floor).
    double drift_factor = 0.01;

    /// Fixed part of the safety margin (timer and scheduling slack).
    duration drift_floor = std::chrono::milliseconds{2};

    /// The safety margin subtracted from every validity.
    duration drift() const noexcept
    {
        return std::chrono::duration_cast<duration>(ttl * drift_factor) + drift_floor;
    }
};

/// Checks a resource id: non-empty and at most max_resource_size bytes.
inline std::error_code validate_resource(std::string_view resource) noexcept
{
    if (resource.empty() || resource.size() > max_resource_size)
        return errc::invalid_argument;
    return {};
}

/// Checks lock options: a TTL within [min_ttl, max_ttl], drift_factor in [0, 1),
/// a non-negative drift_floor, and a margin that leaves some validity.
inline std::error_code validate_options(const lock_options& o) noexcept
{
    if (o.ttl < min_ttl || o.ttl > max_ttl)
        return errc::invalid_argument;
    if (!(o.drift_factor >= 0.0 && o.drift_factor < 1.0))
        return errc::invalid_argument;
    if (o.drift_floor < duration::zero() || o.drift() >= o.ttl)
        return errc::invalid_argument;
    return {};
}

} // namespace distlock
