// distlock/etcd/detail/keys.hpp: the key layout and the requests of etcd's JSON
// gateway, as pure functions (no I/O), unit-tested on their own. The gateway's
// answers are read in replies.hpp.
//
// Layout: a waiter's key is  <prefix><escaped resource>/<owner token, 32 hex digits>
// with the waiter's session lease attached and its owner token as the value. The
// queue of a resource is the range  [<prefix><escaped>/, <prefix><escaped>0)  ('0' is
// '/' + 1). Escaping keeps [A-Za-z0-9._:-] and writes every other byte as %XX, so it
// is injective and an escaped id never holds a '/': the queue of "a" cannot contain a
// key of "a/b" (that is "a%2Fb/...").
#pragma once

#include <distlock/util/base64.hpp>
#include <distlock/util/escape.hpp>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <string_view>

namespace distlock::etcd::detail {

using json = nlohmann::json;

using distlock::util::escape;
using distlock::util::unescape;

/// Where a resource's waiters queue: <prefix><escaped>/
inline std::string queue_prefix(std::string_view prefix, std::string_view resource)
{
    std::string out{prefix};
    out += escape(resource);
    out += '/';
    return out;
}

/// The end of the range of keys starting with `p` (which ends with '/').
inline std::string range_end(std::string p)
{
    p.back() = static_cast<char>(p.back() + 1);
    return p;
}

/// What a holder appends to its key's value once it holds the lock (the waiter behind
/// it then needs no read when the key goes; see docs/etcd.md).
inline constexpr std::string_view holder_mark = "+held";

// -- Requests --------------------------------------------------------------------------

inline json range_request(std::string_view key, std::string_view end = {})
{
    json r = {{"key", distlock::util::base64(key)}};
    if (!end.empty())
        r["range_end"] = distlock::util::base64(end);
    return r;
}

/// The oldest (ASCEND) or newest (DESCEND) keys of a queue by creation, keys only.
inline json queue_request(const std::string& queue, const char* order, int limit)
{
    auto r = range_request(queue, range_end(queue));
    r["sort_target"] = "CREATE";
    r["sort_order"] = order;
    r["limit"] = std::to_string(limit);
    r["keys_only"] = true;
    return r;
}

inline json create_compare(std::string_view key, std::int64_t revision)
{
    return {{"target", "CREATE"},
            {"result", "EQUAL"},
            {"key", distlock::util::base64(key)},
            {"create_revision", std::to_string(revision)}};
}

} // namespace distlock::etcd::detail
