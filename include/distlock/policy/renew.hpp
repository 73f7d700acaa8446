// distlock/policy/renew.hpp: whether and how a held lease is extended.
#pragma once

#include <distlock/clock.hpp>
#include <distlock/options.hpp>

#include <concepts>
#include <optional>

namespace distlock {

struct renew_policy_tag {};

/// A renewal policy says how often to extend a lease of a given TTL (nullopt: never)
/// and for how long at most to keep extending it.
template <class P>
concept renew_policy = std::same_as<typename P::policy_kind, renew_policy_tag> &&
                       requires(const P& p, duration ttl) {
                           { p.interval(ttl) } -> std::convertible_to<std::optional<duration>>;
                           { p.max_hold_time() } -> std::convertible_to<std::optional<duration>>;
                       };

namespace renew {

/// The lease lasts its TTL; the holder is still told when its validity runs out.
struct none {
    using policy_kind = renew_policy_tag;
    std::optional<duration> interval(duration) const noexcept { return std::nullopt; }
    std::optional<duration> max_hold_time() const noexcept { return std::nullopt; }
};

/// Extends the lease every `every` (default TTL/3) while it is held. After
/// `max_hold` (if set) it stops extending, so a stuck holder cannot keep a lock
/// forever: the lease then runs out and its holder is told.
struct watchdog {
    using policy_kind = renew_policy_tag;
    duration every{};                   ///< Zero: TTL / 3. Negative: invalid_argument.
    std::optional<duration> max_hold;   ///< Stop extending after this long, in (0, max_wait].

    /// A negative `every` is passed through (not replaced by TTL / 3), so that
    /// validation sees it and refuses it instead of silently renewing on another
    /// schedule than the one asked for.
    std::optional<duration> interval(duration ttl) const noexcept
    {
        return every != duration::zero() ? every : ttl / 3;
    }
    std::optional<duration> max_hold_time() const noexcept { return max_hold; }
};

} // namespace renew

/// Whether a renewal policy's settings make sense for a lock with `options` (which
/// must already be valid, see validate_options()): an interval, if any, in
/// (0, ttl - drift) so that an extension is due while the lease is still valid, and
/// a max_hold, if any, in (0, max_wait].
template <class P>
bool renew_settings_valid(const P& p, const lock_options& options) noexcept
{
    // With valid options, ttl - drift() lies in (0, max_ttl]: no overflow.
    if (const auto every = p.interval(options.ttl))
        if (*every <= duration::zero() || *every >= options.ttl - options.drift())
            return false;
    if (const auto hold = p.max_hold_time())
        if (*hold <= duration::zero() || *hold > max_wait)
            return false;
    return true;
}

} // namespace distlock
