// distlock/policy/acquire.hpp: the acquisition policies: how a lock is taken, kept
// and given back on a backend.
//
// An acquisition policy opens a claim (claim.hpp) for every lock() call. The policies
// here open claims over TTL primitives (claims/ttl_claim.hpp): each attempt puts the
// lock with a fresh owner token and a TTL; the lease extends and releases it by that
// token. acquire::quorum runs one of them on every node of a quorum
// (claims/quorum_claim.hpp).
#pragma once

#include <distlock/backend/contract.hpp>
#include <distlock/backend/store_ref.hpp>
#include <distlock/claims/quorum_claim.hpp>
#include <distlock/claims/ttl_claim.hpp>
#include <distlock/quorum.hpp>

#include <optional>
#include <string>
#include <utility>

namespace distlock {

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
    awaitable<result<fence_token>> acquire(S& s, const lock_request& r, backend::observer_ref) const
    {
        return DISTLOCK_DETAIL_DIAGNOSED(r.diag, s.put_if_absent, r.resource, r.owner, r.ttl);
    }

    /// acquire() that reports a held lock as data, where the store can.
    template <class S>
        requires answering_put_store<S> && owner_checked_store<S>
    awaitable<result<answer>> try_acquire(S& s, const lock_request& r, backend::observer_ref) const
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
    awaitable<result<answer>> try_acquire(S& s, const lock_request& r, backend::observer_ref, claim_memo& m) const
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
    awaitable<result<fence_token>> acquire(S& s, const lock_request& r, backend::observer_ref) const
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
