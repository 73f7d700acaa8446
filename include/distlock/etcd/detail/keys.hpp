// distlock/etcd/detail/keys.hpp: the key layout and the JSON of etcd's gateway, as
// pure functions (no I/O), unit-tested on their own.
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

#include <charconv>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

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

/// An int64 field of the gateway's JSON: a string of digits (or a number, as some
/// versions send small ones); absent fields are at their default, zero.
inline std::optional<std::int64_t> integer(const json& j, const char* name)
{
    const auto it = j.find(name);
    if (it == j.end() || it->is_null())
        return std::int64_t{0};
    if (it->is_number_integer())
        return it->get<std::int64_t>();
    if (!it->is_string())
        return std::nullopt;
    const auto& s = it->get_ref<const std::string&>();
    std::int64_t v = 0;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc{} || end != s.data() + s.size() || s.empty())
        return std::nullopt;
    return v;
}

/// A base64 field as bytes; absent: empty.
inline std::optional<std::string> bytes(const json& j, const char* name)
{
    const auto it = j.find(name);
    if (it == j.end() || it->is_null())
        return std::string{};
    if (!it->is_string())
        return std::nullopt;
    return distlock::util::from_base64(it->get_ref<const std::string&>());
}

/// One key-value of a range answer.
struct kv {
    std::string key;
    std::string value;
    std::int64_t create_revision = 0;
    std::int64_t mod_revision = 0;
    std::int64_t lease = 0;
};

/// What a holder appends to its key's value once it holds the lock (the waiter behind
/// it then needs no read when the key goes; see docs/etcd.md).
inline constexpr std::string_view holder_mark = "+held";

inline bool carries_mark(const kv& k) noexcept
{
    return k.value.ends_with(holder_mark);
}

inline std::optional<kv> read_kv(const json& j)
{
    if (!j.is_object())
        return std::nullopt;
    auto key = bytes(j, "key");
    auto value = bytes(j, "value");
    const auto created = integer(j, "create_revision");
    const auto modified = integer(j, "mod_revision");
    const auto lease = integer(j, "lease");
    if (!key || !value || !created || !modified || !lease || key->empty())
        return std::nullopt;
    return kv{std::move(*key), std::move(*value), *created, *modified, *lease};
}

/// A range answer: its keys (nullopt when malformed) and `count`.
struct range_answer {
    std::vector<kv> kvs;
    std::int64_t count = 0;
};

inline std::optional<range_answer> read_range(const json& j)
{
    if (!j.is_object())
        return std::nullopt;
    range_answer out;
    const auto count = integer(j, "count");
    if (!count)
        return std::nullopt;
    out.count = *count;
    if (const auto it = j.find("kvs"); it != j.end()) {
        if (!it->is_array())
            return std::nullopt;
        for (const auto& e : *it) {
            auto one = read_kv(e);
            if (!one)
                return std::nullopt;
            out.kvs.push_back(std::move(*one));
        }
    }
    if (out.count < static_cast<std::int64_t>(out.kvs.size()))
        return std::nullopt;
    return out;
}

/// The revision in an answer's header.
inline std::optional<std::int64_t> header_revision(const json& j)
{
    const auto h = j.find("header");
    if (h == j.end() || !h->is_object())
        return std::nullopt;
    const auto r = integer(*h, "revision");
    if (!r || *r <= 0)
        return std::nullopt;
    return r;
}

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
