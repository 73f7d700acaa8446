// distlock/error.hpp: the error codes every distlock operation reports.
#pragma once

#include <string>
#include <system_error>

namespace distlock {

/// Errors reported by distlock operations, in the `distlock` category.
/// Zero is never an error. Each message says what happened and what to do.
enum class errc {
    contended = 1,       ///< Another owner holds the lock; retry later or wait.
    timeout,             ///< The deadline passed before the lock was acquired.
    lease_lost,          ///< The lease ended before it was released: an extension failed or its validity ran out.
    not_owner,           ///< The store does not hold this lock for this owner (expired or taken by another).
    quorum_not_reached,  ///< Fewer than a majority of the quorum's stores granted the request in time.
    store_unavailable,   ///< The store could not be reached or refused service.
    outcome_unknown,     ///< A request was sent but no reply came: it may or may not have been applied.
    protocol_error,      ///< The store replied with something this client cannot interpret.
    invalid_argument,    ///< An argument was rejected before any I/O (empty id, non-positive TTL, ...).
    cancelled,           ///< The operation was cancelled; nothing it acquired is left held.
    released,            ///< The lease was already released by its holder.
    validity_exhausted,  ///< The lock was granted but too late: no validity was left, so it was given back.
    stale_fence,         ///< A fenced write carried an older token than one already accepted.
    auth_failed,         ///< The store rejected the credentials (user name, password, certificate).
    session_lost,        ///< The store session that kept the lock ended (expired, closed, or in doubt).
    not_replicated,      ///< Granted by the primary, but fewer replicas than asked acknowledged it in time: given back.
    lock_delayed,        ///< The resource is in its lock-delay after an unplanned loss: no grant before the time diagnostics::lock_delay_until() says.
};

/// What the core decides by. Every store's own error codes (distlock's errc, or a
/// store category: SQLSTATEs, HTTP statuses, gRPC or ZooKeeper codes) map onto these
/// conditions through their category's equivalence, so the core never needs to know
/// a store's codes: `if (ec == distlock::condition::maybe_applied) ...`.
enum class condition {
    contended = 1,    ///< The store answered no: another owner holds the lock.
    not_applied,      ///< The request surely had no effect (refused, unreachable): retrying is safe.
    maybe_applied,    ///< The request may have had effect (no reply, garbled reply): clean up by owner token.
    not_owner,        ///< The store does not hold this lock for this owner.
    session_lost,     ///< The store session that kept the lock ended or cannot be vouched for.
    lease_lost,       ///< The lease ended before its holder released it.
    invalid_argument, ///< Rejected before any I/O.
    timeout,          ///< A deadline passed.
    cancelled,        ///< The caller cancelled.
    denied,           ///< The store refused the credentials or the permission.
};

namespace detail {

class condition_category final : public std::error_category {
public:
    const char* name() const noexcept override { return "distlock.condition"; }
    std::string message(int value) const override
    {
        switch (static_cast<condition>(value)) {
        case condition::contended:
            return "held by another owner";
        case condition::not_applied:
            return "the request was not applied";
        case condition::maybe_applied:
            return "the request may have been applied";
        case condition::not_owner:
            return "not the owner of the lock";
        case condition::session_lost:
            return "the store session ended";
        case condition::lease_lost:
            return "the lease was lost";
        case condition::invalid_argument:
            return "invalid argument";
        case condition::timeout:
            return "deadline passed";
        case condition::cancelled:
            return "cancelled";
        case condition::denied:
            return "credentials or permission refused";
        }
        return "unknown distlock condition";
    }
};

} // namespace detail

/// The category of distlock::condition (one instance, also in header-only use).
inline const std::error_category& condition_category() noexcept
{
    static const detail::condition_category instance;
    return instance;
}

inline std::error_condition make_error_condition(condition c) noexcept
{
    return {static_cast<int>(c), condition_category()};
}

namespace detail {

class error_category final : public std::error_category {
public:
    const char* name() const noexcept override { return "distlock"; }

    // Each errc is one condition (or none, for the few the core never decides by).
    std::error_condition default_error_condition(int value) const noexcept override
    {
        switch (static_cast<errc>(value)) {
        case errc::contended:
        case errc::lock_delayed: // held back for a while: try again then
            return make_error_condition(condition::contended);
        case errc::store_unavailable:
        case errc::quorum_not_reached:
            return make_error_condition(condition::not_applied);
        case errc::outcome_unknown:
        case errc::protocol_error:
        case errc::not_replicated: // applied on the primary: given back by owner token
            return make_error_condition(condition::maybe_applied);
        case errc::not_owner:
            return make_error_condition(condition::not_owner);
        case errc::session_lost:
            return make_error_condition(condition::session_lost);
        case errc::lease_lost:
        case errc::validity_exhausted:
            return make_error_condition(condition::lease_lost);
        case errc::invalid_argument:
            return make_error_condition(condition::invalid_argument);
        case errc::timeout:
            return make_error_condition(condition::timeout);
        case errc::cancelled:
            return make_error_condition(condition::cancelled);
        case errc::auth_failed:
            return make_error_condition(condition::denied);
        default:
            return {value, *this};
        }
    }

    std::string message(int value) const override
    {
        switch (static_cast<errc>(value)) {
        case errc::contended:
            return "lock is held by another owner";
        case errc::timeout:
            return "deadline passed before the lock could be acquired";
        case errc::lease_lost:
            return "lease lost: it could not be extended, or its validity ran out; "
                   "work done under it since then is not protected";
        case errc::not_owner:
            return "the store does not hold this lock for this owner";
        case errc::quorum_not_reached:
            return "a majority of the quorum's stores did not grant the request in time";
        case errc::store_unavailable:
            return "store unavailable: it could not be reached or refused service";
        case errc::outcome_unknown:
            return "request sent but no reply received: it may have been applied";
        case errc::protocol_error:
            return "the store sent a reply this client cannot interpret";
        case errc::invalid_argument:
            return "invalid argument (check the resource id, TTL, deadline and policy settings)";
        case errc::cancelled:
            return "operation cancelled; nothing it acquired is left held";
        case errc::released:
            return "the lease was already released";
        case errc::validity_exhausted:
            return "lock granted too late to be useful: no validity was left, so it was released";
        case errc::stale_fence:
            return "write rejected: a newer fencing token has already written";
        case errc::auth_failed:
            return "the store rejected the credentials: check user name, password or certificate";
        case errc::session_lost:
            return "the store session that kept the lock ended (expired, closed or in doubt): "
                   "the lock is gone or cannot be vouched for";
        case errc::not_replicated:
            return "granted by the primary, but fewer replicas than asked acknowledged it in time: "
                   "a failover could lose it, so it was given back";
        case errc::lock_delayed:
            return "the resource is in its lock-delay: its last holder was lost without releasing it, and no "
                   "grant is made before the delay has passed (the diagnostics say until when)";
        }
        return "unknown distlock error";
    }
};

} // namespace detail

/// The `distlock` error category (one instance, also in header-only use).
inline const std::error_category& error_category() noexcept
{
    static const detail::error_category instance;
    return instance;
}

inline std::error_code make_error_code(errc e) noexcept
{
    return {static_cast<int>(e), error_category()};
}

} // namespace distlock

template <>
struct std::is_error_code_enum<distlock::errc> : std::true_type {};
template <>
struct std::is_error_condition_enum<distlock::condition> : std::true_type {};

// After the specialisation above, so that errc compares with std::error_code.
namespace distlock::detail {
/// The store's error contract (store.hpp): after these, the request may have been
/// applied, so whatever it may have taken is given back by owner token.
inline bool maybe_applied(const std::error_code& ec) noexcept
{
    return ec == condition::maybe_applied;
}
} // namespace distlock::detail
