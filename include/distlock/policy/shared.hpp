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
#include <distlock/policy/queue.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

namespace distlock {

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

/// One lock() call's entry in a session store's queue, in its mode: the entry is kept
/// across attempts, holds by the rules of shared_queue_store, and its lease is the
/// session's (session_entry_hold, as a mutex's).
template <class S>
class shared_queue_claim {
public:
    /// The store orders the entries: no local line is needed.
    static constexpr bool fair = true;

    shared_queue_claim(store_ref<S> store, claim_request r, lock_mode mode, std::uint32_t permits)
        : store_{std::move(store)}, resource_{std::move(r.resource)}, diag_{r.diag}, owner_{owner_token::generate()},
          mode_{mode}, permits_{permits}
    {}

    awaitable<result<answer>> attempt()
    {
        queued_ = true; // from the first try on an entry may exist
        waiting_ = false;
        auto got = co_await store_.call([&](S& s) {
            return DISTLOCK_DETAIL_DIAGNOSED(diag_, s.enqueue_shared, resource_, owner_, mode_, permits_);
        });
        if (!got)
            co_return got.error();
        entry_ = got.value().entry;
        if (const auto until = got.value().delayed_until)
            co_return answer::delayed(*until);
        if (!got.value().granted) {
            waiting_ = true;
            co_return answer::held();
        }
        if (const auto slot = got.value().slot)
            co_return answer::granted(entry_, *slot);
        co_return answer::granted(entry_);
    }

    awaitable<bool> listen() { co_return false; }

    /// wait() returns as soon as this call's turn may have come.
    bool waits_for_turn() const noexcept { return waiting_; }

    awaitable<bool> wait(time_point until)
    {
        if (waiting_) {
            auto watch = store_.with([&](S& s) { return s.wait_turn(resource_, entry_, until); });
            if (watch)
                co_return co_await std::move(*watch);
        }
        co_await backend::sleep_until(until);
        co_return false;
    }

    bool unsettled() const noexcept { return queued_; }

    awaitable<void> abandon() { return leave(store_, resource_, owner_); }

    session_entry_hold<S> hold()
    {
        queued_ = false;
        return {store_, resource_, owner_, entry_};
    }

private:
    static awaitable<void> leave(store_ref<S> store, std::string resource, owner_token owner)
    {
        return dequeue_until_gone(std::move(store), std::move(resource), owner);
    }

    store_ref<S> store_;
    std::string resource_;
    diagnostics* diag_;
    owner_token owner_;
    lock_mode mode_;
    std::uint32_t permits_;
    fence_token entry_ = 0;
    bool queued_ = false;
    bool waiting_ = false;
};

} // namespace detail

namespace acquire {

/// Shared and exclusive entries in a session store's fair queue (etcd, ZooKeeper, the
/// memory session store): a reader waits only for earlier writers, a writer for
/// everyone earlier, a permit for fewer than N earlier entries; waiters are served in
/// the order they queued, so neither readers nor writers starve. Leases are the
/// session's, as the mutex's on these stores.
struct shared_queue {
    using policy_kind = acquire_policy_tag;

    lock_mode mode = lock_mode::exclusive;
    std::uint32_t permits = 0;

    bool shared() const noexcept { return mode == lock_mode::shared; }

    template <class S>
        requires shared_queue_store<S>
    detail::shared_queue_claim<S> open(const store_ref<S>& s, claim_request r) const
    {
        return {s, std::move(r), mode, permits};
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

/// A backend on which a shared mutex and a semaphore work with their default
/// acquisition (its store takes shared grants).
template <class Backend>
concept shared_backend = acquire_policy_for<default_shared_acquire_policy<Backend>, Backend>;

} // namespace distlock
