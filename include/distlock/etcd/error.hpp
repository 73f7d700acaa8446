// distlock/etcd/error.hpp: etcd's error answers (a gRPC status code with the HTTP
// status the gateway gives it) as error codes, with the conditions the core decides by.
#pragma once

#include <distlock/error.hpp>

#include <string>
#include <system_error>

namespace distlock::etcd {

/// gRPC status codes, as etcd's gateway reports them in `{"code": N}`.
enum class errc {
    canceled = 1,
    unknown = 2,
    invalid_argument = 3,
    deadline_exceeded = 4,
    not_found = 5, ///< "requested lease not found": the session's lease is gone
    already_exists = 6,
    permission_denied = 7, ///< outside the user's granted key range
    resource_exhausted = 8,
    failed_precondition = 9,
    aborted = 10,
    out_of_range = 11, ///< "mvcc: required revision has been compacted"
    unimplemented = 12,
    internal = 13,
    unavailable = 14, ///< no leader, leader changed, request timed out
    data_loss = 15,
    unauthenticated = 16, ///< the auth token is missing, wrong or expired
};

class error_category final : public std::error_category {
public:
    const char* name() const noexcept override { return "distlock.etcd"; }

    std::string message(int value) const override
    {
        switch (static_cast<errc>(value)) {
        case errc::canceled: return "etcd cancelled the request";
        case errc::unknown: return "etcd failed the request (unknown)";
        case errc::invalid_argument: return "etcd rejected the request as invalid";
        case errc::deadline_exceeded: return "etcd did not finish the request in time";
        case errc::not_found: return "the etcd lease was not found";
        case errc::already_exists: return "already exists in etcd";
        case errc::permission_denied: return "etcd denied the permission";
        case errc::resource_exhausted: return "etcd is out of a resource (quota, request rate)";
        case errc::failed_precondition: return "etcd refused the request (failed precondition)";
        case errc::aborted: return "etcd aborted the request";
        case errc::out_of_range: return "the etcd revision has been compacted";
        case errc::unimplemented: return "etcd does not implement the request";
        case errc::internal: return "etcd failed the request (internal error)";
        case errc::unavailable: return "etcd is unavailable (no leader, or the request timed out)";
        case errc::data_loss: return "etcd reported data loss";
        case errc::unauthenticated: return "etcd refused the auth token";
        }
        return "unknown etcd error";
    }

    // Whatever may have gone through raft before it failed is maybe applied (the
    // caller cleans up by owner): a timed-out or cancelled proposal, an internal
    // error, a leader lost mid-request. A refusal that etcd decides before proposing
    // is not applied. A lease that is not found means the session is gone.
    std::error_condition default_error_condition(int value) const noexcept override
    {
        switch (static_cast<errc>(value)) {
        case errc::canceled:
        case errc::unknown:
        case errc::deadline_exceeded:
        case errc::internal:
        case errc::unavailable:
        case errc::data_loss: return make_error_condition(condition::maybe_applied);
        case errc::invalid_argument:
        case errc::unimplemented: return make_error_condition(condition::invalid_argument);
        case errc::not_found: return make_error_condition(condition::session_lost);
        case errc::permission_denied:
        case errc::unauthenticated: return make_error_condition(condition::denied);
        case errc::already_exists:
        case errc::resource_exhausted:
        case errc::failed_precondition:
        case errc::aborted:
        case errc::out_of_range: return make_error_condition(condition::not_applied);
        }
        return {value, *this};
    }
};

inline const std::error_category& category() noexcept
{
    static const error_category c;
    return c;
}

inline std::error_code make_error_code(errc e) noexcept { return {static_cast<int>(e), category()}; }

/// The error of an answer with gRPC code `code` (1..16); anything else is a protocol error.
inline std::error_code from_grpc(long long code) noexcept
{
    if (code < 1 || code > 16)
        return distlock::errc::protocol_error;
    return make_error_code(static_cast<errc>(code));
}

} // namespace distlock::etcd

template <>
struct std::is_error_code_enum<distlock::etcd::errc> : std::true_type {};
