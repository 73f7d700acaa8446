// distlock/observe.hpp: events a lock reports, for the user's own metrics and logs.
// The library itself prints nothing.
#pragma once

#include <distlock/clock.hpp>
#include <distlock/options.hpp>

#include <cstddef>
#include <concepts>
#include <functional>
#include <string_view>
#include <system_error>
#include <variant>

namespace distlock {

struct observer_policy_tag {};

/// One acquisition attempt finished.
struct attempt_event {
    std::string_view resource;
    std::size_t number;        ///< 1 for the first attempt of a lock() call.
    duration latency;          ///< Time the attempt took.
    std::error_code error;     ///< Empty when the lock was acquired.
    fence_token fence;         ///< The token granted, when acquired.
};

/// lock() is about to wait before its next attempt.
struct wait_event {
    std::string_view resource;
    duration planned;          ///< How long it will wait at most.
};

/// lock() woke up before its next attempt.
struct wake_event {
    std::string_view resource;
    duration waited;           ///< How long it actually waited.
    bool notified;             ///< True when a release notification woke it.
};

/// A watchdog extension finished.
struct renewal_event {
    std::string_view resource;
    duration lag;              ///< How late the extension started against its schedule.
    duration latency;          ///< Round trip of the extension.
    std::error_code error;
    time_point valid_until;    ///< The lease's validity after it (unchanged when it failed or came too late).
};

/// A lease ended: released by its holder, or lost.
struct release_event {
    std::string_view resource;
    duration remaining_validity; ///< Local validity left when it ended (negative: overrun).
    std::error_code error;       ///< Why it ended, when lost; the release's error otherwise.
};

/// One node of a quorum answered an acquisition attempt.
struct vote_event {
    std::string_view resource;
    std::size_t node;
    duration latency;
    std::error_code error;     ///< Empty when the node granted the lock.
};

using event = std::variant<attempt_event, wait_event, wake_event, renewal_event, release_event,
                           vote_event>;

/// An observer names its kind and accepts every event type, called on a const object
/// (a mutex's observer is shared by its calls, so it keeps its own state behind a
/// pointer or a std::function, as observe::callback does).
template <class O>
concept observer = std::same_as<typename O::policy_kind, observer_policy_tag> &&
                   requires(const O& o, const event& e) { o(e); };

namespace observe {

/// Sees nothing; costs nothing.
struct none {
    using policy_kind = observer_policy_tag;
    void operator()(const event&) const noexcept {}
};

/// Calls a function with every event. Events reference data that lives only for the
/// call: copy what you keep.
struct callback {
    using policy_kind = observer_policy_tag;
    std::function<void(const event&)> fn;
    void operator()(const event& e) const
    {
        if (fn)
            fn(e);
    }
};

} // namespace observe
} // namespace distlock
