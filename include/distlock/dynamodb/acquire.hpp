// distlock/dynamodb/acquire.hpp: how the DynamoDB store's locks are taken.
#pragma once

#include <distlock/claim.hpp>
#include <distlock/clock.hpp>
#include <distlock/claims/ttl_claim.hpp>
#include <distlock/policy/acquire.hpp>
#include <distlock/policy/shared.hpp>

#include <optional>
#include <string>
#include <vector>

namespace distlock::dynamodb {

/// What a waiter saw of another owner's lock in lease_mode::record_version, and
/// when: the lock may be taken over once the same version has been seen for a whole
/// lease duration on this client's monotonic clock, and, when its grant was marked
/// for a lock-delay, for that delay more (the tombstone).
struct sighting {
    std::string version; ///< the record version number seen
    time_point seen_at;  ///< when it was first seen (after the read that saw it)
    duration lease{};    ///< the lease duration its holder wrote
    duration delay{};    ///< the lock-delay its grant was marked with (0: none)
};

/// The DynamoDB store's acquisition (its default policy): a conditional write per
/// attempt, and in record_version mode a read when it is refused, whose sighting the
/// claim keeps for the next attempt of the same lock() call. Extends and releases by
/// owner.
struct acquire_item : acquire::owner_checked {
    using policy_kind = acquire_policy_tag;
    using claim_memo = std::optional<sighting>;

    template <class S>
    awaitable<result<answer>> try_acquire(S& s, const lock_request& r, distlock::backend::observer_ref,
                                          claim_memo& seen) const
    {
        return s.take(r.resource, r.owner, r.ttl, seen, r.diag);
    }

    template <class S>
    ttl_claim<acquire_item, S> open(const store_ref<S>& s, claim_request r) const
    {
        return {*this, s, std::move(r)};
    }
};

/// The DynamoDB store's acquisition of shared grants (the default of a shared mutex
/// and a semaphore on it): acquire::shared_setnx's intent, waiting and renewal, each
/// attempt a read of the item and one conditional write (detail/shared.hpp). In
/// record_version mode the claim keeps the versions it saw of the grants and the
/// intent in its way, and when: one whose holder stopped renewing is dropped only
/// once this lock() call has seen it unchanged for its lease duration, as the
/// mutex's lock is taken over.
struct acquire_shared_item : acquire::shared_setnx {
    /// A writer's identity as a waiter, and what this call saw in the item.
    struct claim_memo : acquire::shared_setnx::claim_memo {
        std::vector<sighting> seen;
    };

    template <class S>
    awaitable<result<answer>> try_acquire(S& s, const lock_request& r, distlock::backend::observer_ref,
                                          claim_memo& m) const
    {
        if (shared())
            return s.take_shared(r.resource, r.owner, r.ttl, permits, m.seen, r.diag);
        if (m.waiter.is_nil())
            m.waiter = owner_token::generate();
        m.ttl = r.ttl;
        m.intent = true;
        return s.take_exclusive(r.resource, m.waiter, r.owner, r.ttl, m.seen, r.diag);
    }

    template <class S>
    ttl_claim<acquire_shared_item, S> open(const store_ref<S>& s, claim_request r) const
    {
        return {*this, s, std::move(r)};
    }
};

} // namespace distlock::dynamodb
