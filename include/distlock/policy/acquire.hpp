// distlock/policy/acquire.hpp: how a lock is taken, kept and given back on a backend.
//
// An acquisition policy opens a claim (claim.hpp) for every lock() call. The policies
// here are claims over TTL primitives: each attempt puts the lock with a fresh owner
// token and a TTL; the lease extends and releases it by that token.
#pragma once

#include <distlock/claim.hpp>
#include <distlock/detail/deferred.hpp>
#include <distlock/diagnostics.hpp>
#include <distlock/detail/fan_out.hpp>
#include <distlock/detail/lifetime.hpp>
#include <distlock/detail/observer_ref.hpp>
#include <distlock/error.hpp>
#include <distlock/quorum.hpp>
#include <distlock/store.hpp>

#include <asio/experimental/as_tuple.hpp>
#include <asio/this_coro.hpp>
#include <asio/use_awaitable.hpp>

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace distlock {

struct acquire_policy_tag {};

/// One request against a store: which resource, for which owner, for how long.
struct lock_request {
    std::string_view resource;
    owner_token owner;
    duration ttl{};
    /// Where a failure's words go (the caller's, for the attempt of a lock() given
    /// one), or nullptr. Stores whose primitives take a trailing `diagnostics*` get it.
    diagnostics* diag = nullptr;
    /// For a release on a clock-fenced store (clock_fenced_store): the token the
    /// resource's counter is raised to in the same step (a quorum lease's token).
    std::optional<fence_token> floor = std::nullopt;
};

/// How the core reaches a store (a pointer plus the store's lifetime, so that work
/// left running never touches a store that is gone; see detail/lifetime.hpp).
template <class S>
using store_ref = detail::backend_ref<S>;

/// What a claim is opened for.
struct claim_request {
    std::string resource;
    lock_options options;
    detail::observer_ref observe;
    /// The lock() caller's diagnostics, or nullptr: attempts made while the caller
    /// waits fill it; background work (abandon(), a hold's releases) never does.
    diagnostics* diag = nullptr;
    /// The call waits when the lock is held (lock(), lock_until()); false for
    /// try_lock(), whose one try must leave nothing behind.
    bool waits = true;
};

/// TTL primitives: take the lock for an owner, extend and release it by that owner.
/// What acquire::setnx and acquire::conditional_write provide, and what
/// acquire::quorum<Inner> runs on every node. The awaitables they return may refer
/// to `r` and `s`, which the caller keeps alive until they complete.
template <class P, class S>
concept ttl_acquisition_for = requires(const P& p, S& s, const lock_request& r, detail::observer_ref obs) {
    { p.acquire(s, r, obs) } -> std::same_as<awaitable<result<fence_token>>>;
    { p.extend(s, r) } -> std::same_as<awaitable<result<void>>>;
    { p.release(s, r) } -> std::same_as<awaitable<result<void>>>;
};

/// An acquisition policy opens a claim on backend B for each lock() call.
template <class P, class B>
concept acquire_policy_for = std::same_as<typename P::policy_kind, acquire_policy_tag> &&
                             requires(const P& p, const store_ref<B>& b, claim_request r) {
                                 { p.open(b, std::move(r)) } -> claim;
                             };

namespace detail {

// The watcher a store hands out, or a placeholder for stores without notifications.
template <class S>
struct watcher_of {
    using type = int;
};
template <release_notifying_store S>
struct watcher_of<S> {
    using type = typename awaited<decltype(std::declval<S&>().watch(std::string_view{}))>::type;
};

// A template so that it is compiled only where it is used (see detail/lease_state.hpp).
template <class Unused = void>
awaitable<void> sleep_until(time_point until)
{
    timer t{co_await asio::this_coro::executor, until};
    (void)co_await t.async_wait(distlock::detail::as_tuple_awaitable<Unused>());
}

inline bool connection_error(const std::error_code& ec)
{
    return ec == condition::not_applied || ec == condition::maybe_applied;
}

// Releases `owner`'s lock on `resource`. A connection error (a reset, a restart) may
// mean the release did not arrive; it is idempotent by owner token, so it is tried
// once more (stores reconnect on the next request). "Not the owner" after that means
// the first one did arrive.
template <class Inner, class S>
awaitable<result<void>> release_by_owner(const Inner& policy, const store_ref<S>& store, lock_request r)
{
    auto first = co_await store.call([&](S& s) { return policy.release(s, r); });
    if (first || !connection_error(first.error()))
        co_return first;
    auto second = co_await store.call([&](S& s) { return policy.release(s, r); });
    if (!second && second.error() == condition::not_owner)
        co_return success();
    co_return second;
}

/// A lease on one store, kept by owner token.
template <class Inner, class S>
class ttl_hold {
public:
    ttl_hold(Inner policy, store_ref<S> store, std::string resource, owner_token owner, duration ttl)
        : policy_{std::move(policy)}, store_{std::move(store)}, resource_{std::move(resource)}, owner_{owner},
          ttl_{ttl}
    {}
    ttl_hold(ttl_hold&& o) noexcept
        : policy_{std::move(o.policy_)}, store_{std::move(o.store_)}, resource_{std::move(o.resource_)},
          owner_{o.owner_}, ttl_{o.ttl_}
    {}

    awaitable<result<void>> extend() { return extend_impl(this); }
    // The request lives in release_by_owner's frame (by value), so the store's
    // operation may refer to it.
    awaitable<result<void>> release() { return release_by_owner(policy_, store_, {resource_, owner_, ttl_}); }
    const owner_token& owner() const noexcept { return owner_; }
    void spawn(awaitable<void> work) const { store_.spawn(std::move(work)); }
    bool listen(std::weak_ptr<closing_listener> l) const { return store_.listen(std::move(l)); }

private:
    // The request lives in the frame, so the store's operation may refer to it.
    static awaitable<result<void>> extend_impl(ttl_hold* self)
    {
        const lock_request r{self->resource_, self->owner_, self->ttl_};
        co_return co_await self->store_.call([&](S& s) { return self->policy_.extend(s, r); });
    }
    Inner policy_;
    store_ref<S> store_;
    std::string resource_;
    owner_token owner_;
    duration ttl_;
};

// What a policy keeps between the attempts of one lock() call (Inner::claim_memo),
// handed to its try_acquire(s, r, observe, memo); nothing for most policies. A store
// that cannot take over a lock by time alone (DynamoDB's record versions) remembers
// what it saw there, and when.
template <class Inner>
struct claim_memo_of {
    struct type {};
};
template <class Inner>
    requires requires { typename Inner::claim_memo; }
struct claim_memo_of<Inner> {
    using type = typename Inner::claim_memo;
};

/// One lock() call's claim on one store through TTL primitives.
template <class Inner, class S>
class ttl_claim {
    using memo_type = typename claim_memo_of<Inner>::type;

public:
    // A policy whose store queues waiters (acquire::fair) needs no local line.
    static constexpr bool fair = requires { requires Inner::queues_waiters; };

    ttl_claim(Inner policy, store_ref<S> store, claim_request r)
        : policy_{std::move(policy)}, store_{std::move(store)}, resource_{std::move(r.resource)},
          ttl_{r.options.ttl}, observe_{r.observe}, diag_{r.diag}, owner_{owner_token::generate()}, waits_{r.waits}
    {}

    // The policy's try_acquire() answers "held" as data (with or without a memo).
    static constexpr bool answers_as_data =
        requires(const Inner& p, S& s, const lock_request& r, observer_ref o, typename claim_memo_of<Inner>::type& m) {
            p.try_acquire(s, r, o, m);
        } || requires(const Inner& p, S& s, const lock_request& r, observer_ref o) { p.try_acquire(s, r, o); };

    // Every attempt has its own owner token. A release that cleans up after a failed
    // attempt may reach the store late (a reordering network, a reconnect); with a
    // shared token it would remove the grant of a later attempt of the same call.
    awaitable<result<answer>> attempt()
    {
        // A release that handed the lock to this call's place in the store's queue
        // said so in the wake-up: nothing to ask.
        if constexpr (requires { policy_.handed_over(*watcher_, memo_); }) {
            if (watcher_)
                if (auto handed = policy_.handed_over(*watcher_, memo_)) {
                    owner_ = handed->holder();
                    in_flight_ = true;
                    co_return *handed;
                }
        }
        // A waiting call whose store already listens for this resource (it did for
        // an earlier call) listens before its first try: that try can then take a
        // place in line at once, and no second try is needed after subscribing.
        if constexpr (requires(S& s) { policy_.listens_early(s, resource_, memo_); }) {
            if (attempts_ == 0 && waits_ && !watcher_ &&
                store_.with([&](S& s) { return policy_.listens_early(s, resource_, memo_); }).value_or(false))
                (void)co_await listen();
        }
        if (attempts_++ > 0)
            owner_ = owner_token::generate();
        // Unsettled until the answer is known: if the attempt is cut off, abandon()
        // gives back whatever it may have taken.
        in_flight_ = true;
        const lock_request r{resource_, owner_, ttl_, diag_};
        std::error_code ec;
        if constexpr (answers_as_data) {
            // The store answers with data (held, until when); a policy with a memo
            // also keeps what it learnt there for the next attempt of this call.
            auto got = co_await store_.call([&](S& s) {
                if constexpr (requires { policy_.try_acquire(s, r, observe_, memo_); })
                    return policy_.try_acquire(s, r, observe_, memo_);
                else
                    return policy_.try_acquire(s, r, observe_);
            });
            if (got) {
                if (!got.value().is_granted())
                    in_flight_ = false;
                else if (got.value().counted_from()) // handed over: held as the queue's place
                    owner_ = got.value().holder();
                co_return got;
            }
            ec = got.error();
        } else {
            auto got = co_await store_.call([&](S& s) { return policy_.acquire(s, r, observe_); });
            if (got)
                co_return answer::granted(got.value());
            ec = got.error();
        }
        in_flight_ = false;
        if (!maybe_applied(ec)) {
            if (ec == condition::contended)
                co_return answer::held();
            co_return ec;
        }
        // It may have been applied: give it back now, unless the call was cut off
        // (then abandon() does it as background work).
        maybe_granted_.push_back(owner_);
        const auto cs = co_await asio::this_coro::cancellation_state;
        if (cs.cancelled() == asio::cancellation_type::none)
            co_await settle();
        co_return ec;
    }

    awaitable<bool> listen()
    {
        if constexpr (release_notifying_store<S>) {
            if (watcher_)
                co_return false;
            auto start = store_.with([&](S& s) {
                if constexpr (requires { policy_.watch(s, resource_, memo_); })
                    return policy_.watch(s, resource_, memo_); // only what concerns this waiter
                else
                    return s.watch(resource_);
            });
            if (!start)
                co_return false;
            watcher_.emplace(co_await std::move(*start));
            co_return true;
        } else {
            co_return false;
        }
    }

    awaitable<bool> wait(time_point until)
    {
        // A waiter that must ask again to keep its place in the store's queue wakes
        // in time to.
        if constexpr (requires(S& s) { policy_.ask_again_within(s); }) {
            if (const auto within = store_.with([&](S& s) { return policy_.ask_again_within(s); }))
                until = std::min(until, clock::now() + *within);
        }
        if constexpr (release_notifying_store<S>) {
            if (watcher_)
                co_return co_await watcher_->wait(until);
        }
        co_await sleep_until(until);
        co_return false;
    }

    /// Gives back what this call may still hold, as work that owns its arguments.
    awaitable<void> abandon()
    {
        auto owners = maybe_granted_;
        if (in_flight_)
            owners.push_back(owner_);
        return give_back(policy_, store_, resource_, std::move(owners), memo_);
    }

    ttl_hold<Inner, S> hold()
    {
        in_flight_ = false;
        if constexpr (requires { memo_.settle(); })
            memo_.settle(); // the grant took this waiter out of the store's queue
        return ttl_hold<Inner, S>{policy_, store_, resource_, owner_, ttl_};
    }

    bool unsettled() const noexcept
    {
        if constexpr (requires { memo_.unsettled(); })
            if (memo_.unsettled())
                return true;
        return in_flight_ || !maybe_granted_.empty();
    }

private:
    awaitable<void> settle()
    {
        auto pending = maybe_granted_;
        for (const auto& owner : pending) {
            auto rel = co_await release_by_owner(policy_, store_, {resource_, owner, ttl_});
            if (rel || rel.error() == condition::not_owner)
                std::erase(maybe_granted_, owner);
        }
    }

    static awaitable<void> give_back(Inner policy, store_ref<S> store, std::string resource,
                                     std::vector<owner_token> owners, memo_type memo)
    {
        for (const auto& owner : owners) {
            const lock_request r{resource, owner, {}};
            (void)co_await release_by_owner(policy, store, r);
        }
        // A place in the store's queue, if this call took one, is given up too.
        if constexpr (requires { policy.leave(store, resource, memo); })
            co_await policy.leave(store, resource, memo);
    }

    Inner policy_;
    store_ref<S> store_;
    std::string resource_;
    duration ttl_;
    observer_ref observe_;
    diagnostics* diag_;
    owner_token owner_;
    bool waits_ = true;
    std::size_t attempts_ = 0;
    // The current attempt's owner may hold the lock: sent, answer not yet known (or a
    // grant not yet turned into a hold). Kept apart from maybe_granted_ so that an
    // uncontended lock() allocates nothing for it.
    bool in_flight_ = false;
    // Earlier attempts' owners whose answer was lost (maybe applied), not yet given back.
    std::vector<owner_token> maybe_granted_;
    std::optional<typename watcher_of<S>::type> watcher_;
    [[no_unique_address]] memo_type memo_{};
};

} // namespace detail

namespace acquire {

/// Owner-checked extend and release, shared by the single-store policies.
struct owner_checked {
    template <class S>
        requires owner_checked_store<S>
    awaitable<result<void>> extend(S& s, const lock_request& r) const
    {
        return DISTLOCK_DETAIL_DIAGNOSED(r.diag, s.extend, r.resource, r.owner, r.ttl);
    }
    template <class S>
        requires owner_checked_store<S>
    awaitable<result<void>> release(S& s, const lock_request& r) const
    {
        if constexpr (clock_fenced_store<S>)
            if (r.floor)
                return DISTLOCK_DETAIL_DIAGNOSED(r.diag, s.release_raising, r.resource, r.owner, *r.floor);
        return DISTLOCK_DETAIL_DIAGNOSED(r.diag, s.release, r.resource, r.owner);
    }
};

/// Put-if-absent with a TTL (Redis SET NX PX), owner-checked extend and release.
struct setnx : owner_checked {
    using policy_kind = acquire_policy_tag;

    template <class S>
        requires put_if_absent_store<S> && owner_checked_store<S>
    awaitable<result<fence_token>> acquire(S& s, const lock_request& r, detail::observer_ref) const
    {
        return DISTLOCK_DETAIL_DIAGNOSED(r.diag, s.put_if_absent, r.resource, r.owner, r.ttl);
    }

    /// acquire() that reports a held lock as data, where the store can.
    template <class S>
        requires answering_put_store<S> && owner_checked_store<S>
    awaitable<result<answer>> try_acquire(S& s, const lock_request& r, detail::observer_ref) const
    {
        return DISTLOCK_DETAIL_DIAGNOSED(r.diag, s.put_if_absent_answer, r.resource, r.owner, r.ttl);
    }

    template <class S>
        requires put_if_absent_store<S> && owner_checked_store<S>
    detail::ttl_claim<setnx, S> open(const store_ref<S>& s, claim_request r) const
    {
        return {*this, s, std::move(r)};
    }

    /// The batch path of multi-locks: every resource in one atomic step, all or nothing.
    template <class S>
        requires batch_put_if_absent_store<S> && owner_checked_store<S>
    awaitable<result<std::vector<fence_token>>> acquire_all(const store_ref<S>& s,
                                                            const std::vector<std::string>& resources,
                                                            const owner_token& owner, duration ttl) const
    {
        return s.call([&](S& st) { return st.put_if_absent_all(resources, owner, ttl); });
    }

    /// The batch path's release: every resource of a set taken by acquire_all() in one
    /// atomic step; per resource, whether it was still this owner's.
    template <class S>
        requires batch_release_store<S>
    awaitable<result<std::vector<bool>>> release_all(const store_ref<S>& s, const std::vector<std::string>& resources,
                                                     const owner_token& owner) const
    {
        return s.call([&](S& st) { return st.release_all(resources, owner); });
    }

    /// What a lease taken by acquire_all() keeps for one of its resources.
    template <class S>
        requires owner_checked_store<S>
    detail::ttl_hold<setnx, S> hold(const store_ref<S>& s, std::string resource, const owner_token& owner,
                                    duration ttl) const
    {
        return {*this, s, std::move(resource), owner, ttl};
    }
};

/// Put-if-absent with a TTL behind a fair queue kept by the store (the Redis
/// store's scripts): waiters of every process are served in the order they queued,
/// a release wakes only the head waiter, and a releaser that asks again queues at
/// the back. Each lock() call is one waiter: its first try only asks (a try_lock()
/// leaves nothing behind), later tries take and keep a place in line (a lock() whose
/// store still listens for the resource takes it in its first try); a waiter that
/// stops asking (crashed, partitioned) loses its place after the store's queue TTL,
/// and a lock() that ends without the lock gives its place up. Where the store hands
/// locks over, a release grants the lock to a listening head in the same step and
/// the head takes it from the wake-up, without a request. All clients of a resource
/// must use it: a setnx client ignores the queue.
struct fair : owner_checked {
    using policy_kind = acquire_policy_tag;
    static constexpr bool queues_waiters = true;

    /// What one lock() call keeps across its attempts: its identity in the queue.
    struct claim_memo {
        owner_token waiter = owner_token::generate();
        std::uint64_t tries = 0;
        time_point asked_at{}; ///< when the latest try was sent, by this process's clock
        bool queued = false;   ///< a place in line (or a lock handed to it) may exist
        bool listened_first = false; ///< listening before the first try: it joins
        void settle() noexcept { queued = false; }
        bool unsettled() const noexcept { return queued; }
    };

    template <class S>
        requires fair_queue_store<S>
    awaitable<result<answer>> try_acquire(S& s, const lock_request& r, detail::observer_ref, claim_memo& m) const
    {
        m.asked_at = clock::now();
        const bool join = ++m.tries > 1 || m.listened_first;
        if (join)
            m.queued = true;
        return DISTLOCK_DETAIL_DIAGNOSED(r.diag, s.put_if_first, r.resource, m.waiter, r.owner, r.ttl, m.tries,
                                         join);
    }

    /// Whether a waiting call should listen before its first try: only when the
    /// store listens for the resource already (no request either way), so that an
    /// uncontended lock() pays nothing for it.
    template <class S>
        requires fair_queue_store<S>
    bool listens_early(S& s, std::string_view resource, claim_memo& m) const
    {
        if constexpr (requires { { s.listening(resource) } -> std::same_as<bool>; })
            m.listened_first = s.listening(resource);
        return m.listened_first;
    }

    /// The lock a release handed to this call's place, read from the wake-up, when
    /// the store hands locks over. Only a hand-over for the latest try counts from
    /// it: one made before a later try is answered by that try.
    template <class Watcher>
    std::optional<answer> handed_over(Watcher& w, const claim_memo& m) const
    {
        if constexpr (requires { { w.take_handover() } -> std::same_as<std::optional<handover>>; }) {
            // Counted from no later than now: the hand-over came before its message.
            if (const auto h = w.take_handover(); h && h->try_number == m.tries) {
                const auto since_asked = clock::now() - m.asked_at;
                return answer::handed_over(h->fence, m.asked_at + std::min(h->after_try, since_asked), m.waiter);
            }
        }
        return std::nullopt;
    }

    /// Releases and wakes the head waiter only.
    template <class S>
        requires fair_queue_store<S>
    awaitable<result<void>> release(S& s, const lock_request& r) const
    {
        return DISTLOCK_DETAIL_DIAGNOSED(r.diag, s.release_to_head, r.resource, r.owner);
    }

    template <class S>
        requires fair_queue_store<S>
    auto watch(S& s, std::string_view resource, const claim_memo& m) const
    {
        return s.watch(resource, m.waiter);
    }

    template <class S>
        requires fair_queue_store<S>
    duration ask_again_within(const S& s) const
    {
        return s.queue_refresh();
    }

    /// Gives up a place in line (idempotent; a connection error is tried once more).
    template <class S>
        requires fair_queue_store<S>
    static awaitable<void> leave(const store_ref<S>& store, const std::string& resource, const claim_memo& m)
    {
        if (!m.queued)
            co_return;
        for (int tries = 0; tries < 2; ++tries) {
            auto left = co_await store.call([&](S& s) { return s.leave_queue(resource, m.waiter); });
            if (left || !detail::connection_error(left.error()))
                co_return;
        }
    }

    template <class S>
        requires fair_queue_store<S>
    detail::ttl_claim<fair, S> open(const store_ref<S>& s, claim_request r) const
    {
        return {*this, s, std::move(r)};
    }
};

/// A conditional write that succeeds only if the record is absent or expired
/// (DynamoDB, etcd); the record's new version is the fencing token.
struct conditional_write : owner_checked {
    using policy_kind = acquire_policy_tag;

    template <class S>
        requires conditional_write_store<S> && owner_checked_store<S>
    awaitable<result<fence_token>> acquire(S& s, const lock_request& r, detail::observer_ref) const
    {
        return DISTLOCK_DETAIL_DIAGNOSED(r.diag, s.conditional_write, r.resource, r.owner, r.ttl, std::nullopt);
    }

    template <class S>
        requires conditional_write_store<S> && owner_checked_store<S>
    detail::ttl_claim<conditional_write, S> open(const store_ref<S>& s, claim_request r) const
    {
        return {*this, s, std::move(r)};
    }
};

} // namespace acquire

namespace detail {

// Per-node steps of the quorum policy. They are function objects rather than lambdas
// because each runs in a detached coroutine that may outlive the caller: every
// argument is owned by value, and the node is reached through its store_ref.

// Each node's words go to its own entry of `words` (when the caller wants them):
// a late node writes only its own, which nobody reads once the decision is made.
template <class Inner, class S>
struct acquire_on_node {
    Inner policy;
    std::string resource;
    owner_token owner;
    duration ttl;
    std::shared_ptr<std::vector<diagnostics>> words;
    awaitable<result<fence_token>> operator()(const store_ref<S>& node, std::size_t i) const
    {
        return run(policy, node, resource, owner, ttl, words, i);
    }
    static awaitable<result<fence_token>> run(Inner p, store_ref<S> node, std::string res, owner_token owner,
                                              duration ttl, std::shared_ptr<std::vector<diagnostics>> words,
                                              std::size_t i)
    {
        const lock_request r{res, owner, ttl, words ? &(*words)[i] : nullptr};
        co_return co_await node.call([&](S& s) { return p.acquire(s, r, {}); });
    }
};

template <class Inner, class S>
struct extend_on_node {
    Inner policy;
    std::string resource;
    owner_token owner;
    duration ttl;
    awaitable<result<bool>> operator()(const store_ref<S>& node, std::size_t) const
    {
        return run(policy, node, resource, owner, ttl);
    }
    static awaitable<result<bool>> run(Inner p, store_ref<S> node, std::string res, owner_token owner,
                                       duration ttl)
    {
        const lock_request r{res, owner, ttl};
        BOOST_OUTCOME_CO_TRY(co_await node.call([&](S& s) { return p.extend(s, r); }));
        co_return true;
    }
};

template <class Inner, class S>
struct release_on_node {
    Inner policy;
    std::string resource;
    owner_token owner;
    std::optional<fence_token> floor = std::nullopt; // a lease's token, raised to as it goes
    awaitable<result<bool>> operator()(const store_ref<S>& node, std::size_t) const
    {
        return run(policy, node, resource, owner, floor);
    }
    static awaitable<result<bool>> run(Inner p, store_ref<S> node, std::string res, owner_token owner,
                                       std::optional<fence_token> floor)
    {
        // The release may run on after unlock() returned (done at a majority): the
        // node's store counts it, so that its close() lets it finish.
        const auto counted = node.track();
        const lock_request r{res, owner, {}, nullptr, floor};
        BOOST_OUTCOME_CO_TRY(co_await node.call([&](S& s) { return p.release(s, r); }));
        co_return true;
    }
};

// Raises a granting node's fencing counter to the lease's token.
template <class S>
struct raise_on_node {
    std::string resource;
    fence_token top;
    std::vector<std::optional<fence_token>> granted;
    awaitable<result<fence_token>> operator()(const store_ref<S>& node, std::size_t i) const
    {
        return run(node, resource, top, granted[i]);
    }
    static awaitable<result<fence_token>> run(store_ref<S> node, std::string res, fence_token top,
                                              std::optional<fence_token> mine)
    {
        if (!mine)
            co_return fence_token{0};
        if (*mine >= top)
            co_return *mine;
        co_return co_await node.call([&](S& s) { return s.raise_fence(res, top); });
    }
};

// A grant (or a maybe-grant) that arrives after the decision belongs to no lease:
// give it back now rather than leave it held until its TTL.
template <class Inner, class S>
struct release_late_grant {
    Inner policy;
    std::string resource;
    owner_token owner;
    awaitable<void> operator()(const store_ref<S>& node, std::size_t, reply<fence_token> got) const
    {
        return run(policy, node, resource, owner, got.value ? std::error_code{} : got.value.error());
    }
    static awaitable<void> run(Inner p, store_ref<S> node, std::string res, owner_token owner, std::error_code ec)
    {
        if (ec != condition::contended) {
            const lock_request r{res, owner, {}};
            (void)co_await node.call([&](S& s) { return p.release(s, r); });
        }
    }
};

struct ignore_late {
    template <class N, class T>
    awaitable<void> operator()(const N&, std::size_t, T) const
    {
        co_return;
    }
};

// Settled once a majority succeeded or can no longer succeed.
struct majority_settled {
    std::size_t n, need;
    template <class T>
    bool operator()(const replies<T>& got) const
    {
        std::size_t ok = 0, failed = 0;
        for (const auto& g : got)
            if (g)
                ++(g->value ? ok : failed);
        return ok >= need || failed > n - need;
    }
};

// Settled once a majority succeeded; a failure waits for every node.
struct majority_succeeded {
    std::size_t need;
    template <class T>
    bool operator()(const replies<T>& got) const
    {
        return static_cast<std::size_t>(std::count_if(got.begin(), got.end(), [](const auto& g) {
                   return g && g->value;
               })) >= need;
    }
};

// Waits for every node.
struct all_settled {
    template <class T>
    bool operator()(const replies<T>&) const
    {
        return false;
    }
};

/// The nodes of a quorum as the core reaches them.
template <class S>
struct node_refs {
    std::vector<store_ref<S>> refs;
    std::size_t size() const noexcept { return refs.size(); }
    std::size_t majority() const noexcept { return refs.size() / 2 + 1; }
    const store_ref<S>& node(std::size_t i) const noexcept { return refs[i]; }
};

template <class S>
node_refs<S> refs_of(const store_ref<distlock::quorum<S>>& q)
{
    node_refs<S> out;
    if (auto* nodes = q.get()) {
        out.refs.reserve(nodes->size());
        for (std::size_t i = 0; i < nodes->size(); ++i)
            out.refs.emplace_back(nodes->node(i));
    }
    return out;
}

// Success when at least `need` nodes succeeded; otherwise the most telling error.
inline result<void> settle_votes(const replies<bool>& got, std::size_t need)
{
    std::size_t ok = 0, not_owner = 0, answered = 0;
    for (const auto& g : got) {
        if (!g)
            continue;
        ++answered;
        if (g->value)
            ++ok;
        else if (g->value.error() == condition::not_owner)
            ++not_owner;
    }
    if (ok >= need)
        return success();
    if (answered > 0 && not_owner > got.size() - std::max<std::size_t>(need, (got.size() / 2) + 1))
        return errc::not_owner;
    if (answered > 0 && not_owner == answered)
        return errc::not_owner;
    return errc::quorum_not_reached;
}

// One server reached through two nodes (another database, prefix or host name of
// it) counts once: its successes beyond the first are dropped from `got`. Identities
// are known once a node has connected, which it has when it answered.
template <class S>
void count_each_server_once(replies<bool>& got, const node_refs<S>& nodes)
{
    if constexpr (identified_store<S>) {
        std::vector<std::string> seen;
        for (std::size_t i = 0; i < got.size(); ++i) {
            if (!got[i] || !got[i]->value)
                continue;
            const auto id = nodes.node(i).with([](S& s) { return s.known_server_identity(); });
            if (!id || !*id || (*id)->empty())
                continue;
            if (std::find(seen.begin(), seen.end(), **id) != seen.end())
                got[i].reset();
            else
                seen.push_back(**id);
        }
    }
}

template <class Inner, class S>
awaitable<void> release_everywhere(Inner policy, node_refs<S> nodes, std::string resource, owner_token owner)
{
    const release_on_node<Inner, S> rel{policy, std::move(resource), owner};
    (void)co_await fan_out<bool>(nodes, rel, all_settled{}, ignore_late{});
}

/// A lease on a quorum: extended when a majority extends, released on every node.
/// On clock-fenced nodes the release also raises each node's token to the lease's
/// (`floor`), which the grant left to it (see quorum_claim::try_nodes()).
template <class Inner, class S>
class quorum_hold {
public:
    quorum_hold(Inner policy, node_refs<S> nodes, std::string resource, owner_token owner, duration ttl,
                std::optional<fence_token> floor = std::nullopt)
        : policy_{std::move(policy)}, nodes_{std::move(nodes)}, resource_{std::move(resource)}, owner_{owner},
          ttl_{ttl}, floor_{floor}
    {}

    awaitable<result<void>> extend() { return extend_on(policy_, nodes_, resource_, owner_, ttl_); }
    awaitable<result<void>> release() { return release_on(policy_, nodes_, resource_, owner_, floor_); }
    const owner_token& owner() const noexcept { return owner_; }
    void spawn(awaitable<void> work) const
    {
        if (!nodes_.refs.empty())
            nodes_.refs.front().spawn(std::move(work));
    }
    bool listen(std::weak_ptr<closing_listener> l) const
    {
        bool open = true;
        for (const auto& n : nodes_.refs)
            open = n.listen(l) && open;
        return open;
    }

private:
    static awaitable<result<void>> extend_on(Inner p, node_refs<S> nodes, std::string res, owner_token owner,
                                             duration ttl)
    {
        const extend_on_node<Inner, S> ext{p, std::move(res), owner, ttl};
        auto got = co_await fan_out<bool>(nodes, ext, majority_settled{nodes.size(), nodes.majority()},
                                          ignore_late{});
        count_each_server_once(got, nodes);
        co_return settle_votes(got, nodes.majority());
    }
    static awaitable<result<void>> release_on(Inner p, node_refs<S> nodes, std::string res, owner_token owner,
                                              std::optional<fence_token> floor)
    {
        // Done once a majority released: no majority can then be held for this lease.
        // The other nodes' releases, sent or queued, run on in the background, each
        // counted by its node's store until it ends (its close() waits for it). A
        // release that fails somewhere waits for every node, so that it still succeeds
        // when any node released.
        const release_on_node<Inner, S> rel{p, std::move(res), owner, floor};
        auto got = co_await fan_out<bool>(nodes, rel, majority_succeeded{nodes.majority()}, ignore_late{});
        co_return settle_votes(got, 1);
    }

    Inner policy_;
    node_refs<S> nodes_;
    std::string resource_;
    owner_token owner_;
    duration ttl_;
    std::optional<fence_token> floor_;
};

/// One lock() call's claim on a quorum (Redlock); see acquire::quorum.
template <class Inner, class S>
class quorum_claim {
public:
    static constexpr bool fair = false;

    quorum_claim(Inner policy, node_refs<S> nodes, claim_request r)
        : policy_{std::move(policy)}, nodes_{std::move(nodes)}, resource_{std::move(r.resource)},
          ttl_{r.options.ttl}, observe_{r.observe}, diag_{r.diag}, owner_{owner_token::generate()}
    {}

    awaitable<result<answer>> attempt()
    {
        if (attempts_++ > 0)
            owner_ = owner_token::generate();
        auto got = co_await try_nodes();
        if (got)
            co_return answer::granted(got.value());
        if (got.error() == condition::contended)
            co_return answer::held();
        co_return got.error();
    }

    awaitable<bool> listen() { co_return false; }

    awaitable<bool> wait(time_point until)
    {
        co_await sleep_until(until);
        co_return false;
    }

    awaitable<void> abandon()
    {
        return give_back(policy_, nodes_, resource_, unsettled_);
    }

    quorum_hold<Inner, S> hold()
    {
        std::optional<fence_token> floor;
        if constexpr (clock_fenced_store<S>)
            floor = top_;
        return {policy_, nodes_, resource_, owner_, ttl_, floor};
    }
    bool unsettled() const noexcept { return !unsettled_.empty(); }

private:
    awaitable<result<fence_token>> try_nodes()
    {
        const auto n = nodes_.size(), need = nodes_.majority();
        // Identities already known (from earlier connects): refused before any I/O.
        if (granted_by_one_server_twice(std::vector<std::optional<fence_token>>(n, fence_token{0})))
            co_return errc::invalid_argument;
        const auto words = diag_ ? std::make_shared<std::vector<diagnostics>>(n) : nullptr;
        const acquire_on_node<Inner, S> ask{policy_, resource_, owner_, ttl_, words};
        const release_late_grant<Inner, S> late{policy_, resource_, owner_};
        const auto verdict = std::make_shared<late_verdict>();
        bool cancelled = false;
        auto votes = co_await fan_out<fence_token>(nodes_, ask, majority_settled{n, need}, late, &cancelled, verdict);

        std::size_t granted = 0, contended = 0;
        fence_token top = 0;
        std::vector<std::optional<fence_token>> fences(n);
        for (std::size_t i = 0; i < n; ++i) {
            if (!votes[i])
                continue;
            const auto& v = *votes[i];
            observe_(vote_event{resource_, i, v.latency, v.value ? std::error_code{} : v.value.error()});
            if (v.value) {
                ++granted;
                fences[i] = v.value.value();
                top = std::max(top, v.value.value());
            } else if (v.value.error() == condition::contended) {
                ++contended;
            }
        }
        if (granted_by_one_server_twice(fences)) {
            verdict->conclude(false);
            co_await release_everywhere(policy_, nodes_, resource_, owner_);
            co_return errc::invalid_argument;
        }
        if (cancelled) {
            // Cut off (cancelled, or the deadline): the release on every node runs as
            // background work after lock() returned.
            verdict->conclude(false);
            unsettled_.push_back(owner_);
            co_return errc::cancelled;
        }
        if (granted < need) {
            verdict->conclude(false);
            if (words)
                gather(votes, *words);
            co_await release_everywhere(policy_, nodes_, resource_, owner_);
            // Any node that says "held" makes this contention; otherwise the nodes failed.
            co_return contended > 0 ? errc::contended : errc::quorum_not_reached;
        }

        // Bring lagging counters of the granting nodes up to the lease's token, so that
        // the next lease's token, from whichever majority, is larger. Clock-fenced
        // nodes whose tokens are all within half a TTL of the top need not be raised
        // now: the release raises them (hold()); without a release, the lock is free
        // again only once each granting node's key expired, a TTL later by its clock,
        // when its clock, and so its next token, has passed the top (as long as the
        // servers' clocks agree within half a TTL: docs/guarantees.md).
        const bool lagging = std::any_of(fences.begin(), fences.end(), [top](const auto& f) { return f && *f < top; });
        top_ = top;
        if (lagging && !close_enough(fences, top)) {
            const raise_on_node<S> raise{resource_, top, fences};
            auto raised = co_await fan_out<fence_token>(nodes_, raise, all_settled{}, ignore_late{});
            std::size_t at_top = 0;
            for (std::size_t i = 0; i < n; ++i)
                if (fences[i] && raised[i] && raised[i]->value && raised[i]->value.value() >= top)
                    ++at_top;
            if (at_top < need) {
                verdict->conclude(false);
                co_await release_everywhere(policy_, nodes_, resource_, owner_);
                co_return errc::quorum_not_reached;
            }
        }
        // Grants that arrive from here on are part of this lease (extended and released
        // with it on every node).
        verdict->conclude(true);
        co_return top;
    }

    // Clock-fenced nodes whose grants all lie within half a TTL of `top`, in the
    // nodes' clock ticks; never for other stores (their counters do not move with
    // time, so only a raise keeps the next token above this one).
    bool close_enough(const std::vector<std::optional<fence_token>>& fences, fence_token top) const
    {
        if constexpr (clock_fenced_store<S>) {
            const double ticks = std::chrono::duration<double>(ttl_).count() *
                                 static_cast<double>(S::fence_ticks_per_second) / 2.0;
            return std::all_of(fences.begin(), fences.end(), [&](const std::optional<fence_token>& f) {
                return !f || static_cast<double>(top - *f) < ticks;
            });
        } else {
            (void)fences;
            (void)top;
            return false;
        }
    }

    static awaitable<void> give_back(Inner policy, node_refs<S> nodes, std::string resource,
                                     std::vector<owner_token> owners)
    {
        for (const auto& owner : owners)
            co_await release_everywhere(policy, nodes, resource, owner);
    }

    // The words of the nodes that settled with a failure, "node i: ..." each, into the
    // caller's diagnostics. Only settled nodes' entries are read: a late node may
    // still be writing its own.
    void gather(const replies<fence_token>& votes, const std::vector<diagnostics>& words) const
    {
        std::string server, client;
        const auto add = [](std::string& to, std::size_t i, std::string_view what) {
            if (what.empty())
                return;
            if (!to.empty())
                to += "; ";
            to += "node " + std::to_string(i) + ": ";
            to += what;
        };
        for (std::size_t i = 0; i < votes.size(); ++i) {
            if (!votes[i] || votes[i]->value)
                continue;
            add(server, i, words[i].server_message());
            add(client, i, words[i].client_message());
        }
        diag_->set_server_message(std::move(server));
        diag_->set_client_message(std::move(client));
    }

    // Nodes that granted have connected, so they know their server's identity. (A
    // node whose first connect completes after the decision is compared from the next
    // attempt on.)
    bool granted_by_one_server_twice(const std::vector<std::optional<fence_token>>& fences) const
    {
        if constexpr (identified_store<S>) {
            std::vector<std::string> seen;
            for (std::size_t i = 0; i < fences.size(); ++i) {
                if (!fences[i])
                    continue;
                const auto id = nodes_.node(i).with([](S& s) { return s.known_server_identity(); });
                if (!id || !*id || (*id)->empty())
                    continue;
                if (std::find(seen.begin(), seen.end(), **id) != seen.end())
                    return true;
                seen.push_back(**id);
            }
        }
        return false;
    }

    Inner policy_;
    node_refs<S> nodes_;
    std::string resource_;
    duration ttl_;
    observer_ref observe_;
    diagnostics* diag_;
    owner_token owner_;
    fence_token top_ = 0; // the granted lease's token
    std::size_t attempts_ = 0;
    std::vector<owner_token> unsettled_;
};

} // namespace detail

namespace acquire {

/// Redlock over a distlock::quorum: `Inner` on every node in parallel; held when a
/// majority grants it. If no majority grants it, it is released on every node.
///
/// Fencing across a quorum. Each node keeps its own counter, and they drift apart
/// when nodes miss acquisitions or restart empty, so the largest granted token F is
/// the lease's token, and before the lease is reported every granting node whose
/// counter is below F is raised to F. Any later majority overlaps this one in at
/// least one node whose counter is then >= F, so the next token exceeds F, as long
/// as that node kept its counter: a node restarted empty (without persistence) can
/// make the token go back when it was the only node the two majorities shared.
///
/// On clock-fenced nodes (clock_fenced_store: Redis) the raise waits for the
/// release, which raises every node to F in the same script, when every granting
/// node's token is within half a TTL of F (the nodes' clocks agree); a grant further
/// behind is raised before the lease is reported, as above. Without a release the
/// lock is free again only once each granting node's key has expired, a TTL after its
/// grant by that node's clock, and its next token is then its clock, past F as long as
/// the servers' clocks agree within half a TTL. A lock + unlock is then one round trip
/// each, as on one node.
template <class Inner = setnx>
struct quorum {
    using policy_kind = acquire_policy_tag;
    Inner inner{};

    template <class S>
        requires ttl_acquisition_for<Inner, S> && fencing_counter_store<S>
    detail::quorum_claim<Inner, S> open(const store_ref<distlock::quorum<S>>& q, claim_request r) const
    {
        return {inner, detail::refs_of(q), std::move(r)};
    }
};

} // namespace acquire
} // namespace distlock
