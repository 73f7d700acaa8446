// distlock/policy/retry.hpp: how long lock() waits between attempts, and when it gives up.
#pragma once

#include <distlock/clock.hpp>
#include <distlock/options.hpp>

#include <algorithm>
#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <random>
#include <system_error>

namespace distlock {

struct retry_policy_tag {};

/// What a retry policy knows when asked for the next delay.
struct attempt {
    std::size_t number = 0;      ///< Failed attempts so far (1 after the first failure).
    duration elapsed{};          ///< Since lock() started.
    duration previous_delay{};   ///< The delay chosen last time (zero before the first).
    std::error_code error;       ///< Why the last attempt failed.
    /// When the store said the holder's lock runs out, if it said (contention as data:
    /// a policy may sleep until then rather than poll).
    std::optional<time_point> held_until;
};

/// A retry policy names its kind and answers "how long until the next attempt?",
/// or std::nullopt to give up. It may also have a `deadline` member: lock() gives up
/// with errc::timeout once that much time has passed, waiting no longer than it.
template <class P>
concept retry_policy = std::same_as<typename P::policy_kind, retry_policy_tag> &&
                       requires(const P& p, const attempt& a) {
                           { p.next_delay(a) } -> std::convertible_to<std::optional<duration>>;
                       };

namespace retry {

/// One attempt, no waiting (what try_lock() always does).
struct none {
    using policy_kind = retry_policy_tag;
    std::optional<duration> next_delay(const attempt&) const noexcept { return std::nullopt; }
};

/// The same delay between attempts.
struct fixed {
    using policy_kind = retry_policy_tag;
    duration delay = std::chrono::milliseconds{50};
    std::size_t max_attempts = 0;                  ///< 0: bounded by the deadline alone.
    duration deadline = std::chrono::seconds{10};

    std::optional<duration> next_delay(const attempt& a) const noexcept
    {
        if (max_attempts != 0 && a.number >= max_attempts)
            return std::nullopt;
        return delay;
    }
};

/// How a backoff delay is randomised so that waiters do not retry in lockstep.
enum class jitter {
    none,         ///< d = min(max, initial * multiplier^(n-1))
    full,         ///< uniform in [0, d]
    equal,        ///< d/2 + uniform in [0, d/2]
    decorrelated, ///< min(max, uniform in [initial, 3 * previous delay])
};

namespace detail {
inline std::mt19937_64& jitter_engine()
{
    // Not security sensitive: it only spreads retries. One engine per thread, seeded once.
    thread_local std::mt19937_64 engine{std::random_device{}()};
    return engine;
}
inline duration uniform(duration lo, duration hi)
{
    if (hi <= lo)
        return lo;
    std::uniform_int_distribution<duration::rep> pick{lo.count(), hi.count()};
    return duration{pick(jitter_engine())};
}
} // namespace detail

/// Exponential backoff with jitter, a cap on the delay, an optional cap on attempts,
/// and an overall deadline.
struct exponential_backoff {
    using policy_kind = retry_policy_tag;
    duration initial = std::chrono::milliseconds{10};
    duration max = std::chrono::seconds{1};
    double multiplier = 2.0;
    retry::jitter jitter = retry::jitter::full;
    std::size_t max_attempts = 0;                  ///< 0: bounded by the deadline alone.
    duration deadline = std::chrono::seconds{10};

    /// The delay before jitter for the n-th retry (n >= 1), capped at max.
    duration ceiling(std::size_t n) const noexcept
    {
        double d = static_cast<double>(initial.count());
        for (std::size_t i = 1; i < n && d < static_cast<double>(max.count()); ++i)
            d *= multiplier;
        return std::min(max, duration{static_cast<duration::rep>(
                                 std::min(d, static_cast<double>(max.count())))});
    }

    std::optional<duration> next_delay(const attempt& a) const
    {
        if (max_attempts != 0 && a.number >= max_attempts)
            return std::nullopt;
        const auto d = ceiling(std::max<std::size_t>(a.number, 1));
        switch (jitter) {
        case retry::jitter::none:
            return d;
        case retry::jitter::full:
            return detail::uniform(duration::zero(), d);
        case retry::jitter::equal:
            return d / 2 + detail::uniform(duration::zero(), d - d / 2);
        case retry::jitter::decorrelated: {
            const auto previous = a.previous_delay > duration::zero() ? a.previous_delay : initial;
            return std::min(max, detail::uniform(initial, previous * 3));
        }
        }
        return d;
    }
};

} // namespace retry

/// Whether a retry policy's settings make sense: non-negative delays, a positive
/// deadline, a multiplier of at least 1, initial <= max, nothing above max_wait.
template <class P>
bool retry_settings_valid(const P& p) noexcept
{
    if constexpr (requires { p.deadline; })
        if (p.deadline <= duration::zero() || p.deadline > max_wait)
            return false;
    if constexpr (requires { p.delay; })
        if (p.delay < duration::zero() || p.delay > max_wait)
            return false;
    if constexpr (requires { p.initial; p.max; p.multiplier; })
        if (p.initial < duration::zero() || p.max < p.initial || p.max > max_wait || !(p.multiplier >= 1.0))
            return false;
    return true;
}

} // namespace distlock
