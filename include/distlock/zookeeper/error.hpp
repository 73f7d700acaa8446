// distlock/zookeeper/error.hpp: ZooKeeper's error codes (the `err` of a reply header)
// as error codes, with the conditions the core decides by.
#pragma once

#include <distlock/error.hpp>

#include <cstdint>
#include <string>
#include <system_error>

namespace distlock::zookeeper {

/// The codes a server puts in a reply header (KeeperException.Code), negated as on
/// the wire.
enum class errc {
    system_error = -1,
    runtime_inconsistency = -2,
    data_inconsistency = -3,
    connection_loss = -4,
    marshalling_error = -5,
    unimplemented = -6,
    operation_timeout = -7,
    bad_arguments = -8,
    unknown_session = -12,
    new_config_no_quorum = -13,
    reconfig_in_progress = -14,
    api_error = -100,
    no_node = -101,
    no_auth = -102, ///< the node's ACL does not let this session do that
    bad_version = -103,
    no_children_for_ephemerals = -108,
    node_exists = -110,
    not_empty = -111,
    session_expired = -112,
    invalid_callback = -113,
    invalid_acl = -114,
    auth_failed = -115, ///< the digest credentials were refused
    session_moved = -118,
    not_read_only = -119,
    ephemeral_on_local_session = -120,
    no_watcher = -121,
    request_timeout = -122,
    quota_exceeded = -125,
    throttled = -127,
};

class error_category final : public std::error_category {
public:
    const char* name() const noexcept override { return "distlock.zookeeper"; }

    std::string message(int value) const override
    {
        switch (static_cast<errc>(value)) {
        case errc::system_error: return "ZooKeeper system error";
        case errc::runtime_inconsistency: return "ZooKeeper runtime inconsistency";
        case errc::data_inconsistency: return "ZooKeeper data inconsistency";
        case errc::connection_loss: return "ZooKeeper connection lost";
        case errc::marshalling_error: return "ZooKeeper could not read the request";
        case errc::unimplemented: return "ZooKeeper does not implement the operation";
        case errc::operation_timeout: return "ZooKeeper operation timed out";
        case errc::bad_arguments: return "ZooKeeper rejected the arguments";
        case errc::unknown_session: return "ZooKeeper does not know the session";
        case errc::new_config_no_quorum: return "ZooKeeper's new configuration has no quorum";
        case errc::reconfig_in_progress: return "ZooKeeper is reconfiguring";
        case errc::api_error: return "ZooKeeper API error";
        case errc::no_node: return "the ZooKeeper node does not exist";
        case errc::no_auth: return "the ZooKeeper node's ACL refuses this session";
        case errc::bad_version: return "the ZooKeeper node's version differs";
        case errc::no_children_for_ephemerals: return "ZooKeeper ephemeral nodes cannot have children";
        case errc::node_exists: return "the ZooKeeper node exists";
        case errc::not_empty: return "the ZooKeeper node has children";
        case errc::session_expired: return "the ZooKeeper session expired";
        case errc::invalid_callback: return "ZooKeeper invalid callback";
        case errc::invalid_acl: return "ZooKeeper rejected the ACL";
        case errc::auth_failed: return "ZooKeeper refused the credentials";
        case errc::session_moved: return "the ZooKeeper session moved to another server";
        case errc::not_read_only: return "the ZooKeeper server is read-only";
        case errc::ephemeral_on_local_session: return "ZooKeeper local sessions cannot own ephemeral nodes";
        case errc::no_watcher: return "ZooKeeper has no such watcher";
        case errc::request_timeout: return "ZooKeeper request timed out";
        case errc::quota_exceeded: return "ZooKeeper quota exceeded";
        case errc::throttled: return "ZooKeeper throttled the request";
        }
        return "unknown ZooKeeper error";
    }

    // A request that may have gone through the ensemble before it failed is maybe
    // applied (a lost connection, a timed-out proposal); one the server refused before
    // proposing is not applied. An expired or unknown session took its nodes with it.
    std::error_condition default_error_condition(int value) const noexcept override
    {
        switch (static_cast<errc>(value)) {
        case errc::system_error:
        case errc::runtime_inconsistency:
        case errc::data_inconsistency:
        case errc::connection_loss:
        case errc::operation_timeout:
        case errc::request_timeout:
        case errc::session_moved: return make_error_condition(condition::maybe_applied);
        case errc::marshalling_error:
        case errc::unimplemented:
        case errc::bad_arguments:
        case errc::invalid_acl:
        case errc::invalid_callback:
        case errc::api_error: return make_error_condition(condition::invalid_argument);
        case errc::session_expired:
        case errc::unknown_session: return make_error_condition(condition::session_lost);
        case errc::no_auth:
        case errc::auth_failed: return make_error_condition(condition::denied);
        case errc::no_node:
        case errc::bad_version:
        case errc::no_children_for_ephemerals:
        case errc::node_exists:
        case errc::not_empty:
        case errc::new_config_no_quorum:
        case errc::reconfig_in_progress:
        case errc::not_read_only:
        case errc::ephemeral_on_local_session:
        case errc::no_watcher:
        case errc::quota_exceeded:
        case errc::throttled: return make_error_condition(condition::not_applied);
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

/// The error of a reply header's `err` (0: none); a code outside the protocol's range
/// is a protocol error.
inline std::error_code from_reply(std::int32_t err) noexcept
{
    if (err == 0)
        return {};
    if (err > -1 || err < -200)
        return distlock::errc::protocol_error;
    return make_error_code(static_cast<errc>(err));
}

} // namespace distlock::zookeeper

template <>
struct std::is_error_code_enum<distlock::zookeeper::errc> : std::true_type {};
