// distlock/policy/shared.hpp: the acquisition of shared grants: a shared mutex's
// readers and writers, a semaphore's permits.
//
// One policy type, two settings: `mode` (exclusive or shared) and `permits` (0 for a
// shared mutex, N for a semaphore of N). A shared mutex holds two mutexes of the same
// type, one per mode; a semaphore one, in shared mode with N permits. On a TTL store
// (shared_lease_store) the claim is the TTL claim of every other TTL policy: the
// waiting, retrying, lost replies, clean-up and renewal are the mutex's.
#pragma once

#include <distlock/backend/contract.hpp>
#include <distlock/backend/store_ref.hpp>
#include <distlock/claims/ttl_claim.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

namespace distlock {

/// How a grant is held: alone (a writer), or beside other shared holders (a reader,
/// a permit).
enum class lock_mode { exclusive, shared };

namespace acquire {

/// Shared and exclusive grants on a store that keeps shared holders beside the
/// exclusive one (shared_lease_store: the memory store, Redis, ...). A writer's
/// lock() call leaves an intent in the store from its first refused try; while it
/// lasts, new readers are refused, so a stream of readers cannot starve it. The
/// intent is the call's: renewed by each of its tries (at least every third of the
/// TTL), given up when the call ends without the lock, and gone by itself a TTL after
/// its last try when the caller vanished.
struct shared_setnx {
    using policy_kind = acquire_policy_tag;

    lock_mode mode = lock_mode::exclusive;
    /// 0: a shared mutex (readers unbounded, writers exclusive); N: a semaphore of N
    /// permits (shared grants only).
    std::uint32_t permits = 0;

    bool shared() const noexcept { return mode == lock_mode::shared; }

    /// What a writer's lock() call keeps across its tries: its identity as a waiter.
    struct claim_memo {
        owner_token waiter{};
        duration ttl{};
        bool intent = false; ///< the call's intent may be in the store
        void settle() noexcept { intent = false; } // a grant to the waiter ends its intent
        bool unsettled() const noexcept { return intent; }
    };

    template <class S>
        requires shared_lease_store<S>
    awaitable<result<answer>> try_acquire(S& s, const lock_request& r, backend::observer_ref, claim_memo& m) const
    {
        if (mode == lock_mode::shared)
            return DISTLOCK_DETAIL_DIAGNOSED(r.diag, s.put_shared, r.resource, r.owner, r.ttl, permits);
        if (m.waiter.is_nil())
            m.waiter = owner_token::generate();
        m.ttl = r.ttl;
        m.intent = true;
        return DISTLOCK_DETAIL_DIAGNOSED(r.diag, s.put_exclusive, r.resource, m.waiter, r.owner, r.ttl);
    }

    template <class S>
        requires shared_lease_store<S>
    awaitable<result<void>> extend(S& s, const lock_request& r) const
    {
        return DISTLOCK_DETAIL_DIAGNOSED(r.diag, s.extend_shared, r.resource, r.owner, r.ttl);
    }

    template <class S>
        requires shared_lease_store<S>
    awaitable<result<void>> release(S& s, const lock_request& r) const
    {
        return DISTLOCK_DETAIL_DIAGNOSED(r.diag, s.release_shared, r.resource, r.owner);
    }

    /// A waiting writer asks again before its intent runs out.
    template <class S>
        requires shared_lease_store<S>
    std::optional<duration> ask_again_within(const S&, const claim_memo& m) const
    {
        if (!m.intent)
            return std::nullopt;
        return m.ttl / 3;
    }

    /// Gives up a writer's intent (idempotent; a connection error is tried once more).
    template <class S>
        requires shared_lease_store<S>
    static awaitable<void> leave(const store_ref<S>& store, const std::string& resource, const claim_memo& m)
    {
        if (!m.intent)
            co_return;
        for (int tries = 0; tries < 2; ++tries) {
            auto left = co_await store.call([&](S& s) { return s.withdraw(resource, m.waiter); });
            if (left || !detail::connection_error(left.error()))
                co_return;
        }
    }

    template <class S>
        requires shared_lease_store<S>
    detail::ttl_claim<shared_setnx, S> open(const store_ref<S>& s, claim_request r) const
    {
        return {*this, s, std::move(r)};
    }
};

} // namespace acquire

namespace detail {
template <class B>
struct default_shared_acquire {
    using type = acquire::shared_setnx;
};
template <class B>
    requires requires { typename B::default_shared_acquire_policy; }
struct default_shared_acquire<B> {
    using type = typename B::default_shared_acquire_policy;
};
} // namespace detail

/// The acquisition a shared mutex or a semaphore uses when none is named: the
/// backend's own (`Backend::default_shared_acquire_policy`, e.g. a session store's
/// queue), else acquire::shared_setnx.
template <class Backend>
using default_shared_acquire_policy = typename detail::default_shared_acquire<Backend>::type;

} // namespace distlock
