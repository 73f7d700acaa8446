// distlock/claim.hpp: what an acquisition policy opens for one lock() call, and what
// a lease keeps.
//
// Design note. The mutex does not run an acquisition itself: for each lock() it asks
// the acquisition policy to open a *claim*, an object that keeps its state across the
// attempts of that call. The mutex decides when to try, how long to wait (the retry
// policy and the deadline) and when to give up; the claim decides what an attempt is
// and what waiting means:
//  - attempt(): one try. The answer is data: granted (with a fencing token) or held
//    (optionally "not before" a time the store reported, such as the holder's
//    remaining TTL). Store failures are errors, decided by condition.
//  - listen(): start listening for a chance (a release notification, a watch on the
//    predecessor). True when listening began just now, so that the caller tries once
//    more before it waits: a release between the failed try and the start of
//    listening cannot be missed.
//  - wait(until): wait for a chance, or until `until` (the mutex bounds it by the
//    retry policy's delay and the deadline).
//  - hold(): after a grant, what the lease keeps: how to extend and release it, or
//    the session it is bound to. Taking it settles the grant.
//  - unsettled(): whether abandon() has anything to do (the common case has not).
//  - abandon(): an awaitable that gives back whatever the claim may still hold:
//    grants whose replies were lost or cut off by the deadline, its place in a
//    queue. It runs as work owned by the store, which the caller's cancellation
//    cannot cut short; after a failure the store answered, lock() waits for it.
// A claim on a store with a fair queue of its own (etcd, ZooKeeper) keeps one entry
// across attempts and says so with `fair`; elsewhere the mutex keeps waiters of one
// process in arrival order (detail/local_line.hpp). A claim whose wait() is woken
// exactly when its turn may have come (it watches the entry before its own) may say
// so with an optional `waits_for_turn()`: while it returns true, the mutex waits up to
// turn_recheck even when the retry policy's step is shorter.
#pragma once

#include <distlock/util/config.hpp>
#include <distlock/clock.hpp>
#include <distlock/lock_mode.hpp>
#include <distlock/options.hpp>
#include <distlock/owner_token.hpp>
#include <distlock/result.hpp>

#include <asio/awaitable.hpp>

#include <concepts>
#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>
#include <utility>

namespace distlock {

/// The answer to one acquisition attempt that the store gave.
class answer {
public:
    /// The lock is held by this claim, with `fence`.
    static answer granted(fence_token fence) noexcept { return answer{true, fence, std::nullopt, std::nullopt, {}}; }
    /// One of a resource's permits is held by this claim: the permit numbered `slot`
    /// (from 0, below the semaphore's count), with `fence`.
    static answer granted(fence_token fence, std::uint32_t slot) noexcept
    {
        answer a{true, fence, std::nullopt, std::nullopt, {}};
        a.slot_ = slot;
        return a;
    }
    /// The lock was granted before this attempt, by another client's release that
    /// handed it to this claim's place in a store's queue (acquire::fair on Redis).
    /// It is held as owner `holder` (the claim's place, not the attempt), and its
    /// validity counts from `counted_from`: a time before the grant by this process's
    /// clock, not the attempt's start.
    static answer handed_over(fence_token fence, time_point counted_from, const owner_token& holder) noexcept
    {
        return answer{true, fence, std::nullopt, counted_from, holder};
    }
    /// Another owner holds the lock; trying before `not_before` (when known) is futile
    /// unless the holder releases early.
    static answer held(std::optional<time_point> not_before = std::nullopt) noexcept
    {
        return answer{false, 0, not_before, std::nullopt, {}};
    }
    /// Nobody holds the lock, but the resource is in its lock-delay: its last holder
    /// was lost without releasing it, and no grant is made before `until`.
    static answer delayed(time_point until) noexcept
    {
        answer a{false, 0, until, std::nullopt, {}};
        a.delayed_ = true;
        return a;
    }

    bool is_granted() const noexcept { return granted_; }
    fence_token fence() const noexcept { return fence_; }
    std::optional<time_point> not_before() const noexcept { return not_before_; }
    /// A grant handed over before the attempt: when its validity began.
    std::optional<time_point> counted_from() const noexcept { return counted_from_; }
    /// A grant handed over before the attempt: the owner it is held as.
    const owner_token& holder() const noexcept { return holder_; }
    /// A permit's number, for a grant of a semaphore's permit.
    std::optional<std::uint32_t> slot() const noexcept { return slot_; }
    /// Refused for the resource's lock-delay, until not_before().
    bool is_delayed() const noexcept { return delayed_; }

private:
    answer(bool g, fence_token f, std::optional<time_point> nb, std::optional<time_point> from,
           const owner_token& holder) noexcept
        : granted_{g}, fence_{f}, not_before_{nb}, counted_from_{from}, holder_{holder}
    {}
    bool granted_;
    fence_token fence_;
    std::optional<time_point> not_before_;
    std::optional<time_point> counted_from_;
    owner_token holder_;
    std::optional<std::uint32_t> slot_;
    bool delayed_ = false;
};

/// How a session store reports the state of the session a lease is bound to.
enum class session_state {
    held,     ///< The session is alive; the lease is valid until the reported time.
    in_doubt, ///< The client cannot tell (disconnected, keepalives unanswered): treated as lost.
    lost,     ///< The session expired or was closed: its locks are gone.
};

/// What a session-bound lease listens to. Calls may come from any thread.
class session_listener {
public:
    virtual ~session_listener() = default;
    virtual void session_changed(session_state state, time_point valid_until) noexcept = 0;
};

/// What a lease keeps after a grant: how to extend it and how to release it. Both
/// return awaitables that own what they use (they run after lock() returned).
template <class H>
concept lease_hold = std::move_constructible<H> && requires(H& h, const H& ch) {
    { h.extend() } -> std::same_as<awaitable<result<void>>>;
    { h.release() } -> std::same_as<awaitable<result<void>>>;
    { ch.owner() } -> std::convertible_to<owner_token>;
};

/// A hold bound to a store session: the session keeps it alive and reports its loss.
/// `bind` registers the lease's listener and returns the current validity (nullopt
/// when the session is already gone).
template <class H>
concept session_hold = lease_hold<H> && requires(H& h, std::weak_ptr<session_listener> l) {
    { h.bind(l) } -> std::same_as<std::optional<time_point>>;
};

/// One lock() call's claim on a resource; see the design note above.
template <class C>
concept claim = requires(C& c, time_point until) {
    { c.attempt() } -> std::same_as<awaitable<result<answer>>>;
    { c.listen() } -> std::same_as<awaitable<bool>>;
    { c.wait(until) } -> std::same_as<awaitable<bool>>;
    { c.abandon() } -> std::same_as<awaitable<void>>;
    { std::as_const(c).unsettled() } -> std::convertible_to<bool>;
    { c.hold() } -> lease_hold;
    { C::fair } -> std::convertible_to<bool>;
};

} // namespace distlock
