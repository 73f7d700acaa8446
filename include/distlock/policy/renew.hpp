// distlock/policy/renew.hpp: whether and how a held lease is extended.
#pragma once

#include <distlock/clock.hpp>

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
    duration every{};                   ///< Zero: TTL / 3.
    std::optional<duration> max_hold;   ///< Stop extending after this long.

    std::optional<duration> interval(duration ttl) const noexcept
    {
        return every > duration::zero() ? every : ttl / 3;
    }
    std::optional<duration> max_hold_time() const noexcept { return max_hold; }
};

} // namespace renew
} // namespace distlock
