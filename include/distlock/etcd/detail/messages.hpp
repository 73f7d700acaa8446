// distlock/etcd/detail/messages.hpp: the etcd v3 messages the store sends and reads,
// as a schema (protobuf/json_mapping.hpp), and the RPCs it calls: the same requests
// go out as the JSON gateway's documents or as native gRPC messages.
//
// Field names and numbers are etcd's (etcdserverpb/rpc.proto, mvccpb/kv.proto, API
// v3.4). Only the fields the store writes or reads are named: a reader skips the
// others, and nested transactions (RequestOp.request_txn) are not used.
#pragma once

#include <distlock/protobuf/json_mapping.hpp>

#include <array>
#include <string_view>

namespace distlock::etcd::detail::messages {

using protobuf::field;
using protobuf::kind;
using protobuf::message_type;

inline constexpr std::array<std::string_view, 3> sort_order_names{"NONE", "ASCEND", "DESCEND"};
inline constexpr std::array<std::string_view, 5> sort_target_names{"KEY", "VERSION", "CREATE", "MOD", "VALUE"};
inline constexpr std::array<std::string_view, 4> compare_result_names{"EQUAL", "GREATER", "LESS", "NOT_EQUAL"};
inline constexpr std::array<std::string_view, 5> compare_target_names{"VERSION", "CREATE", "MOD", "VALUE", "LEASE"};
inline constexpr std::array<std::string_view, 2> event_type_names{"PUT", "DELETE"};

inline constexpr field response_header_fields[] = {
    {"cluster_id", 1, kind::uint64},
    {"member_id", 2, kind::uint64},
    {"revision", 3, kind::int64},
    {"raft_term", 4, kind::uint64},
};
inline constexpr message_type response_header{"ResponseHeader", response_header_fields};

inline constexpr field key_value_fields[] = {
    {"key", 1, kind::bytes},     {"create_revision", 2, kind::int64}, {"mod_revision", 3, kind::int64},
    {"version", 4, kind::int64}, {"value", 5, kind::bytes},          {"lease", 6, kind::int64},
};
inline constexpr message_type key_value{"KeyValue", key_value_fields};

inline constexpr field range_request_fields[] = {
    {"key", 1, kind::bytes},
    {"range_end", 2, kind::bytes},
    {"limit", 3, kind::int64},
    {"revision", 4, kind::int64},
    {"sort_order", 5, kind::enumeration, false, nullptr, sort_order_names},
    {"sort_target", 6, kind::enumeration, false, nullptr, sort_target_names},
    {"serializable", 7, kind::boolean},
    {"keys_only", 8, kind::boolean},
    {"count_only", 9, kind::boolean},
    {"min_mod_revision", 10, kind::int64},
    {"max_mod_revision", 11, kind::int64},
    {"min_create_revision", 12, kind::int64},
    {"max_create_revision", 13, kind::int64},
};
inline constexpr message_type range_request{"RangeRequest", range_request_fields};

inline constexpr field range_response_fields[] = {
    {"header", 1, kind::message, false, &response_header},
    {"kvs", 2, kind::message, true, &key_value},
    {"more", 3, kind::boolean},
    {"count", 4, kind::int64},
};
inline constexpr message_type range_response{"RangeResponse", range_response_fields};

inline constexpr field put_request_fields[] = {
    {"key", 1, kind::bytes},       {"value", 2, kind::bytes},        {"lease", 3, kind::int64},
    {"prev_kv", 4, kind::boolean}, {"ignore_value", 5, kind::boolean}, {"ignore_lease", 6, kind::boolean},
};
inline constexpr message_type put_request{"PutRequest", put_request_fields};

inline constexpr field put_response_fields[] = {
    {"header", 1, kind::message, false, &response_header},
    {"prev_kv", 2, kind::message, false, &key_value},
};
inline constexpr message_type put_response{"PutResponse", put_response_fields};

inline constexpr field delete_range_request_fields[] = {
    {"key", 1, kind::bytes},
    {"range_end", 2, kind::bytes},
    {"prev_kv", 3, kind::boolean},
};
inline constexpr message_type delete_range_request{"DeleteRangeRequest", delete_range_request_fields};

inline constexpr field delete_range_response_fields[] = {
    {"header", 1, kind::message, false, &response_header},
    {"deleted", 2, kind::int64},
    {"prev_kvs", 3, kind::message, true, &key_value},
};
inline constexpr message_type delete_range_response{"DeleteRangeResponse", delete_range_response_fields};

inline constexpr field request_op_fields[] = {
    {"request_range", 1, kind::message, false, &range_request},
    {"request_put", 2, kind::message, false, &put_request},
    {"request_delete_range", 3, kind::message, false, &delete_range_request},
};
inline constexpr message_type request_op{"RequestOp", request_op_fields};

inline constexpr field response_op_fields[] = {
    {"response_range", 1, kind::message, false, &range_response},
    {"response_put", 2, kind::message, false, &put_response},
    {"response_delete_range", 3, kind::message, false, &delete_range_response},
};
inline constexpr message_type response_op{"ResponseOp", response_op_fields};

inline constexpr field compare_fields[] = {
    {"result", 1, kind::enumeration, false, nullptr, compare_result_names},
    {"target", 2, kind::enumeration, false, nullptr, compare_target_names},
    {"key", 3, kind::bytes},
    {"version", 4, kind::int64},
    {"create_revision", 5, kind::int64},
    {"mod_revision", 6, kind::int64},
    {"value", 7, kind::bytes},
    {"lease", 8, kind::int64},
    {"range_end", 64, kind::bytes},
};
inline constexpr message_type compare{"Compare", compare_fields};

inline constexpr field txn_request_fields[] = {
    {"compare", 1, kind::message, true, &compare},
    {"success", 2, kind::message, true, &request_op},
    {"failure", 3, kind::message, true, &request_op},
};
inline constexpr message_type txn_request{"TxnRequest", txn_request_fields};

inline constexpr field txn_response_fields[] = {
    {"header", 1, kind::message, false, &response_header},
    {"succeeded", 2, kind::boolean},
    {"responses", 3, kind::message, true, &response_op},
};
inline constexpr message_type txn_response{"TxnResponse", txn_response_fields};

inline constexpr field watch_create_request_fields[] = {
    {"key", 1, kind::bytes},
    {"range_end", 2, kind::bytes},
    {"start_revision", 3, kind::int64},
    {"progress_notify", 4, kind::boolean},
    {"prev_kv", 6, kind::boolean},
};
inline constexpr message_type watch_create_request{"WatchCreateRequest", watch_create_request_fields};

inline constexpr field watch_request_fields[] = {
    {"create_request", 1, kind::message, false, &watch_create_request},
};
inline constexpr message_type watch_request{"WatchRequest", watch_request_fields};

inline constexpr field event_fields[] = {
    {"type", 1, kind::enumeration, false, nullptr, event_type_names},
    {"kv", 2, kind::message, false, &key_value},
    {"prev_kv", 3, kind::message, false, &key_value},
};
inline constexpr message_type event{"Event", event_fields};

inline constexpr field watch_response_fields[] = {
    {"header", 1, kind::message, false, &response_header},
    {"watch_id", 2, kind::int64},
    {"created", 3, kind::boolean},
    {"canceled", 4, kind::boolean},
    {"compact_revision", 5, kind::int64},
    {"cancel_reason", 6, kind::string},
    {"fragment", 7, kind::boolean},
    {"events", 11, kind::message, true, &event},
};
inline constexpr message_type watch_response{"WatchResponse", watch_response_fields};

inline constexpr field lease_id_fields[] = {{"ID", 1, kind::int64}};
/// LeaseRevokeRequest and LeaseKeepAliveRequest: the lease's ID alone.
inline constexpr message_type lease_id_request{"LeaseIDRequest", lease_id_fields};

inline constexpr field lease_grant_request_fields[] = {{"TTL", 1, kind::int64}, {"ID", 2, kind::int64}};
inline constexpr message_type lease_grant_request{"LeaseGrantRequest", lease_grant_request_fields};

inline constexpr field lease_grant_response_fields[] = {
    {"header", 1, kind::message, false, &response_header},
    {"ID", 2, kind::int64},
    {"TTL", 3, kind::int64},
    {"error", 4, kind::string},
};
inline constexpr message_type lease_grant_response{"LeaseGrantResponse", lease_grant_response_fields};

inline constexpr field header_only_fields[] = {{"header", 1, kind::message, false, &response_header}};
/// LeaseRevokeResponse: the header alone.
inline constexpr message_type header_only_response{"LeaseRevokeResponse", header_only_fields};

inline constexpr field lease_keep_alive_response_fields[] = {
    {"header", 1, kind::message, false, &response_header},
    {"ID", 2, kind::int64},
    {"TTL", 3, kind::int64},
};
inline constexpr message_type lease_keep_alive_response{"LeaseKeepAliveResponse", lease_keep_alive_response_fields};

inline constexpr field lease_time_to_live_request_fields[] = {{"ID", 1, kind::int64}, {"keys", 2, kind::boolean}};
inline constexpr message_type lease_time_to_live_request{"LeaseTimeToLiveRequest", lease_time_to_live_request_fields};

inline constexpr field lease_time_to_live_response_fields[] = {
    {"header", 1, kind::message, false, &response_header},
    {"ID", 2, kind::int64},
    {"TTL", 3, kind::int64},
    {"grantedTTL", 4, kind::int64},
    {"keys", 5, kind::bytes, true},
};
inline constexpr message_type lease_time_to_live_response{"LeaseTimeToLiveResponse",
                                                          lease_time_to_live_response_fields};

inline constexpr field authenticate_request_fields[] = {{"name", 1, kind::string}, {"password", 2, kind::string}};
inline constexpr message_type authenticate_request{"AuthenticateRequest", authenticate_request_fields};

inline constexpr field authenticate_response_fields[] = {
    {"header", 1, kind::message, false, &response_header},
    {"token", 2, kind::string},
};
inline constexpr message_type authenticate_response{"AuthenticateResponse", authenticate_response_fields};

/// One RPC: the gateway's path (after /v3/), gRPC's method path, and its messages.
struct rpc {
    std::string_view gateway_path;
    std::string_view grpc_path;
    const message_type* request;
    const message_type* response;
};

inline constexpr rpc rpcs[] = {
    {"kv/range", "/etcdserverpb.KV/Range", &range_request, &range_response},
    {"kv/txn", "/etcdserverpb.KV/Txn", &txn_request, &txn_response},
    {"kv/deleterange", "/etcdserverpb.KV/DeleteRange", &delete_range_request, &delete_range_response},
    {"kv/put", "/etcdserverpb.KV/Put", &put_request, &put_response},
    {"lease/grant", "/etcdserverpb.Lease/LeaseGrant", &lease_grant_request, &lease_grant_response},
    {"lease/revoke", "/etcdserverpb.Lease/LeaseRevoke", &lease_id_request, &header_only_response},
    {"lease/keepalive", "/etcdserverpb.Lease/LeaseKeepAlive", &lease_id_request, &lease_keep_alive_response},
    {"lease/timetolive", "/etcdserverpb.Lease/LeaseTimeToLive", &lease_time_to_live_request,
     &lease_time_to_live_response},
    {"auth/authenticate", "/etcdserverpb.Auth/Authenticate", &authenticate_request, &authenticate_response},
    {"watch", "/etcdserverpb.Watch/Watch", &watch_request, &watch_response},
};

/// The RPC the gateway serves at `path`; null for one the store does not call.
inline const rpc* rpc_at(std::string_view gateway_path) noexcept
{
    for (const auto& r : rpcs)
        if (r.gateway_path == gateway_path)
            return &r;
    return nullptr;
}

} // namespace distlock::etcd::detail::messages
