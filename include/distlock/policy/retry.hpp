// distlock/policy/retry.hpp: how long lock() waits between attempts, and when it gives up.
#pragma once

#include <distlock/clock.hpp>
#include <distlock/util/os_random.hpp>
#include <distlock/util/splitmix.hpp>
#include <distlock/options.hpp>

#include <algorithm>
#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <system_error>
#include <type_traits>

namespace distlock {

struct retry_policy_tag {};

/// What a retry policy knows when asked for the next delay.
struct attempt {
    /// Failed attempts so far: 1 at the first next_delay(). The try lock() makes at once
    /// after subscribing to release notifications belongs to the first attempt.
    std::size_t number = 0;
    duration elapsed{};          ///< Since lock() started.
    duration previous_delay{};   ///< The delay chosen last time (zero before the first).
    std::error_code error;       ///< Why the last attempt failed.
    /// When the store said the holder's lock runs out, if it said (contention as data).
    /// The mutex never waits past it, whatever the delay: a policy may poll sooner
    /// (a release may come first), or return a long delay to sleep until then.
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
inline distlock::util::splitmix64& jitter_engine() noexcept
{
    // Not security sensitive: it only spreads retries. One engine per thread, seeded
    // once from the system, so processes started together do not retry together.
    thread_local distlock::util::splitmix64 engine{distlock::util::os_random_u64()};
    return engine;
}
inline duration uniform(duration lo, duration hi) noexcept
{
    return duration{jitter_engine().between(lo.count(), hi.count())};
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
    /// initial * multiplier^(n-1) in double, compared with max before it is converted
    /// back: a power that reaches max, overflows to infinity or is NaN (settings that
    /// validation rejects) gives max, never an out-of-range conversion.
    duration ceiling(std::size_t n) const noexcept
    {
        const double cap = static_cast<double>(max.count());
        // The power by squaring (at most 64 steps), not std::pow: <cmath> is a costly
        // header for every file that includes distlock. With a multiplier of at least 1
        // the product only grows, so it stops once it reaches the cap.
        double d = static_cast<double>(initial.count());
        double factor = multiplier;
        for (std::size_t e = n > 0 ? n - 1 : 0; e > 0 && d < cap; e >>= 1) {
            if (e & 1)
                d *= factor;
            factor *= factor;
        }
        if (!(d < cap))
            return max;
        return std::min(max, duration{static_cast<duration::rep>(d)});
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
            // previous_delay comes from the caller: 3 * previous must not overflow.
            const auto spread = previous > duration::max() / 3 ? duration::max() : previous * 3;
            return std::min(max, detail::uniform(initial, spread));
        }
        }
        return d;
    }
};

} // namespace retry

/// Whether a retry policy's settings make sense: a deadline in (0, max_wait]; a
/// fixed delay, and a backoff's initial delay and cap, in (0, max_wait] with
/// initial <= max; a finite multiplier of at least 1; a known jitter.
///
/// A zero delay is refused: it retries the store in a busy loop (and never lets a
/// manual clock move on). A multiplier of +inf or NaN would turn every delay into
/// the cap or into an undefined conversion; below 1 the backoff would shrink.
/// Checks compare the given values with constants only: nothing is computed from
/// them, so no setting can overflow on its way to being refused.
template <class P>
bool retry_settings_valid(const P& p) noexcept
{
    if constexpr (requires { p.deadline; })
        if (p.deadline <= duration::zero() || p.deadline > max_wait)
            return false;
    if constexpr (requires { p.delay; })
        if (p.delay <= duration::zero() || p.delay > max_wait)
            return false;
    if constexpr (requires { p.initial; p.max; })
        if (p.initial <= duration::zero() || p.max < p.initial || p.max > max_wait)
            return false;
    if constexpr (requires { p.multiplier; })
        if (!(p.multiplier >= 1.0 && p.multiplier <= std::numeric_limits<double>::max())) // NaN and +inf fail
            return false;
    if constexpr (requires { p.jitter; })
        if constexpr (std::is_same_v<std::remove_cvref_t<decltype(p.jitter)>, retry::jitter>)
            if (p.jitter != retry::jitter::none && p.jitter != retry::jitter::full &&
                p.jitter != retry::jitter::equal && p.jitter != retry::jitter::decorrelated)
                return false;
    return true;
}

} // namespace distlock
