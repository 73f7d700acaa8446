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
//
// Escaping writes each byte on its own, and no byte's spelling begins another's (a
// kept byte is never '%'), so an id begins with P exactly when its escaped form begins
// with P's: the keys of every id beginning with P are the keys beginning with
// <prefix><escaped P>. It does not keep the order of ids ('%' sorts below the kept
// bytes, whatever byte it spells): a listing sorts the ids once decoded.
//
// Under key_dialect::concurrency (dialect.hpp) the id is written verbatim, so that the
// queue is the one etcd's concurrency.Mutex keeps on <prefix><id>: its keys are
// <prefix><id>/<lease ID in hex>, valued "". An id holding a '/' is refused there: its
// queue would lie inside the queue of the id before that '/', and a holder's mark, a
// permit's count and a listing all read a queue as one resource's. Without '/', the
// same facts as above hold (the identity writes each byte on its own).
#pragma once

#include <distlock/etcd/dialect.hpp>
#include <distlock/util/base64.hpp>
#include <distlock/util/escape.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>

namespace distlock::etcd::detail {

using json = nlohmann::json;

using distlock::util::escape;
using distlock::util::unescape;

/// How `resource` is written in its keys under `dialect`.
inline std::string id_in_key(std::string_view resource, key_dialect dialect)
{
    return dialect == key_dialect::concurrency ? std::string{resource} : escape(resource);
}

/// Whether `resource` has a queue of its own under `dialect` (the length is checked
/// apart, by validate_resource): under the concurrency dialect an id holding a '/'
/// has none (see the note at the top).
inline bool id_fits_dialect(std::string_view resource, key_dialect dialect) noexcept
{
    return dialect != key_dialect::concurrency || resource.find('/') == std::string_view::npos;
}

/// Where a resource's waiters queue: <prefix><escaped>/, or <prefix><id>/ under the
/// concurrency dialect (the prefix a concurrency.Mutex on <prefix><id> ranges over).
inline std::string queue_prefix(std::string_view prefix, std::string_view resource,
                                key_dialect dialect = key_dialect::distlock)
{
    std::string out{prefix};
    out += id_in_key(resource, dialect);
    out += '/';
    return out;
}

/// The end of the range of keys starting with `p` (which ends with '/').
inline std::string range_end(std::string p)
{
    p.back() = static_cast<char>(p.back() + 1);
    return p;
}

/// The end of the range of every key that begins with `p`: `p` with its last byte
/// raised, past the bytes that cannot be raised; "\0" (no end: every key) when none can.
inline std::string prefix_end(std::string p)
{
    while (!p.empty()) {
        if (static_cast<unsigned char>(p.back()) != 0xff) {
            p.back() = static_cast<char>(p.back() + 1);
            return p;
        }
        p.pop_back();
    }
    return std::string(1, '\0');
}

/// The hex digits of an owner token, the last part of a waiter's key.
inline constexpr std::size_t owner_hex_digits = 32;
/// The most hex digits of a concurrency.Mutex's key's last part: its session's lease
/// ID (a positive int64, written %x: lower case, no leading zero).
inline constexpr std::size_t lease_hex_digits = 16;

/// Whether `s` is the last part of a key a lock writes: a distlock owner token (32
/// lower-case hex digits) or a concurrency.Mutex's lease ID.
inline bool is_owner_part(std::string_view s) noexcept
{
    const auto hex = [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); };
    if (s.empty() || !std::all_of(s.begin(), s.end(), hex))
        return false;
    return s.size() == owner_hex_digits || (s.size() <= lease_hex_digits && s.front() != '0');
}

/// What a waiter's key names.
struct queue_key {
    std::string resource;   ///< the resource id, unescaped
    std::string_view owner; ///< the owner token's hex digits (a view into the key)
};

/// The resource and owner of the waiter's key `key` under the store prefix `prefix`
/// (a distlock waiter's, or a concurrency.Mutex's: its owner is then its lease ID in
/// hex); nullopt for a key no lock writes (a fenced write's data, another program's
/// keys), which is then no lock.
inline std::optional<queue_key> parse_queue_key(std::string_view prefix, std::string_view key,
                                                key_dialect dialect = key_dialect::distlock)
{
    if (!key.starts_with(prefix))
        return std::nullopt;
    key.remove_prefix(prefix.size());
    const auto slash = key.find('/'); // an id in a key never holds one
    if (slash == 0 || slash == std::string_view::npos)
        return std::nullopt;
    const auto owner = key.substr(slash + 1);
    if (!is_owner_part(owner))
        return std::nullopt;
    if (dialect == key_dialect::concurrency)
        return queue_key{std::string{key.substr(0, slash)}, owner};
    auto resource = unescape(key.substr(0, slash));
    if (!resource)
        return std::nullopt;
    return queue_key{std::move(*resource), owner};
}

/// What a holder appends to its key's value once it holds the lock (the waiter behind
/// it then needs no read when the key goes; see docs/etcd.md).
inline constexpr std::string_view holder_mark = "+held";

// -- Elections ---------------------------------------------------------------------------
//
// An election's leader is the holder of its queue; the value it proclaims lives in its
// own entry's value, so it goes with the grant (released, expired, revoked) and a new
// grant, a new key, starts without one. Under the default dialect the entry keeps the
// form every reader of entry values knows (entries.hpp), the value between two marks:
//   <owner>+elect=<value>+held
// (only the holder proclaims, so the holder's mark is true, and a waiter that sees the
// put as its predecessor's mark is right). Under key_dialect::concurrency the value is
// the entry's whole value, as etcd's concurrency.Election writes a candidate's key
// (Go's clientv3/concurrency, `etcdctl elect`), so that both read one leader's value.

/// What comes before a proclaimed value in a default-dialect entry's value.
inline constexpr std::string_view elect_mark = "+elect=";

/// Whether `value` has the shape of a distlock entry's value: 32 lower-case hex digits
/// (an owner token), then nothing or a '+'. Such a value is not proclaimed under the
/// concurrency dialect: it would read as an entry's mode, not as a leader's value.
inline bool reads_as_entry_value(std::string_view value) noexcept
{
    if (value.size() < owner_hex_digits || (value.size() > owner_hex_digits && value[owner_hex_digits] != '+'))
        return false;
    return std::all_of(value.begin(), value.begin() + owner_hex_digits,
                       [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

/// The value the holder `owner_hex` writes into its entry to proclaim `value`.
inline std::string proclaimed_entry_value(std::string_view owner_hex, std::string_view value, key_dialect dialect)
{
    if (dialect == key_dialect::concurrency)
        return std::string{value};
    std::string out{owner_hex};
    out += elect_mark;
    out += value;
    out += holder_mark;
    return out;
}

/// The value proclaimed in the entry whose key ends in `owner_part` and whose value is
/// `entry_value`, in either dialect's form (the two dialects share a queue when the id
/// needs no escaping): nullopt while a distlock entry (an owner token's key) has
/// proclaimed none. Another program's entry (a concurrency.Election candidate, a
/// Mutex's key valued "") has its value as its leader's, whatever it is.
inline std::optional<std::string> proclaimed_in(std::string_view owner_part, std::string_view entry_value)
{
    const bool ours = owner_part.size() == owner_hex_digits && is_owner_part(owner_part);
    if (!ours)
        return std::string{entry_value};
    const auto head = std::string{owner_part} + std::string{elect_mark};
    if (entry_value.size() >= head.size() + holder_mark.size() && entry_value.starts_with(head) &&
        entry_value.ends_with(holder_mark))
        return std::string{entry_value.substr(head.size(), entry_value.size() - head.size() - holder_mark.size())};
    if (reads_as_entry_value(entry_value))
        return std::nullopt;
    return std::string{entry_value};
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

/// Every key of a queue with its value (an entry's mode, entries.hpp), oldest first.
inline json queue_entries_request(const std::string& queue)
{
    auto r = range_request(queue, range_end(queue));
    r["sort_target"] = "CREATE";
    r["sort_order"] = "ASCEND";
    return r;
}

inline json create_compare(std::string_view key, std::int64_t revision)
{
    return {{"target", "CREATE"},
            {"result", "EQUAL"},
            {"key", distlock::util::base64(key)},
            {"create_revision", std::to_string(revision)}};
}

/// Holds while the key's value is `value`.
inline json value_compare(std::string_view key, std::string_view value)
{
    return {{"target", "VALUE"},
            {"result", "EQUAL"},
            {"key", distlock::util::base64(key)},
            {"value", distlock::util::base64(value)}};
}

/// Holds when no key of the queue was created before `revision` (etcd applies a
/// compare over a range to every key in it; an empty range compares as one key at
/// revision 0, which fails it).
inline json created_since_compare(const std::string& queue, std::int64_t revision)
{
    return {{"target", "CREATE"},
            {"result", "GREATER"},
            {"key", distlock::util::base64(queue)},
            {"range_end", distlock::util::base64(range_end(queue))},
            {"create_revision", std::to_string(revision - 1)}};
}

/// Holds when no key of the queue was written (created or changed) after `revision`:
/// what a permit's slot is written under (entries.hpp). A key's going is not seen, and
/// need not be: it frees a slot, and takes none.
inline json unwritten_since_compare(const std::string& queue, std::int64_t revision)
{
    return {{"target", "MOD"},
            {"result", "LESS"},
            {"key", distlock::util::base64(queue)},
            {"range_end", distlock::util::base64(range_end(queue))},
            {"mod_revision", std::to_string(revision + 1)}};
}

/// Every waiter's key of the resources whose ids begin with `resource_prefix`, keys
/// only (the owner is in the key): the range of the keys beginning with the prefix as
/// the dialect writes it (see the note at the top).
inline json listing_request(std::string_view prefix, std::string_view resource_prefix,
                            key_dialect dialect = key_dialect::distlock)
{
    std::string from{prefix};
    from += id_in_key(resource_prefix, dialect);
    auto r = range_request(from, prefix_end(from));
    r["keys_only"] = true;
    return r;
}

/// Deletes the holder's key `holder` of `queue` if it is still the key created at
/// `entry` and still the oldest of its queue: both compares and the delete are one
/// step on the server.
inline json revoke_request(const std::string& queue, const std::string& holder, std::int64_t entry)
{
    return {{"compare", json::array({create_compare(holder, entry), created_since_compare(queue, entry)})},
            {"success", json::array({json{{"request_delete_range", range_request(holder)}}})}};
}

/// Writes `entry_value` into the holder's key `holder` of `queue`, keeping its lease,
/// only while it is the key created at `epoch` and no key of the queue is older (it
/// still holds): the check and the put are one step on the server.
inline json proclaim_request(const std::string& queue, const std::string& holder, std::int64_t epoch,
                             std::string_view entry_value)
{
    json put = {{"key", distlock::util::base64(holder)},
                {"value", distlock::util::base64(entry_value)},
                {"ignore_lease", true}};
    return {{"compare", json::array({create_compare(holder, epoch), created_since_compare(queue, epoch)})},
            {"success", json::array({json{{"request_put", std::move(put)}}})}};
}

// -- Lock-delays ---------------------------------------------------------------------------
//
// A holder that asks for a lock-delay puts a mark next to its queue:
//   <queue prefix without its trailing '/'>!lock-delay
// a key with no lease (it outlives the holder's session), valued
//   {"holder":"<the last part of the holder's key>","fence":"<its create revision>","delay_ms":"<delay>"}
// (the key's last part, an owner token's hex digits, names it within the queue, and is
// plain ASCII whatever bytes the id has)
// It lies outside every queue: after the store prefix it holds no '/' (an id in a key
// holds none, in either dialect), and every queue is <prefix><id>/..., so no range or
// watch over a queue (ours, a concurrency.Mutex's or Election's on <prefix><id>) ever
// reads it as a waiter, and a listing skips it as a key of no lock. The suffix is
// fixed, so two ids never share a mark. A release deletes it in the txn that deletes
// the holder's key. The queue's head that finds it naming a key other than its own
// (gone: it would be the head otherwise) puts it again with a fresh lease of the delay,
// rounded up to whole seconds: the tombstone, which the server deletes when its lease
// expires. A mark with a lease is a tombstone.

/// What follows the queue's id in its lock-delay mark's key.
inline constexpr std::string_view delay_mark_suffix = "!lock-delay";

/// The key of the lock-delay mark of the queue `queue` (which ends with '/').
inline std::string delay_mark_key(std::string_view queue)
{
    std::string out{queue.substr(0, queue.empty() ? 0 : queue.size() - 1)};
    out += delay_mark_suffix;
    return out;
}

/// The longest delay a mark may name: etcd's longest lease TTL (9 000 000 000 s).
inline constexpr std::int64_t max_delay_mark_ms = 9'000'000'000'000;

/// What a lock-delay mark (or tombstone) says.
struct delay_mark {
    std::string holder;        ///< the last part of the marked holder's key (its owner token)
    std::int64_t fence = 0;    ///< its create revision
    std::int64_t delay_ms = 0; ///< the lock-delay, in milliseconds (positive)
};

/// The value of the mark of the holder key ending in `holder` (an owner token's hex
/// digits) created at `fence`.
inline std::string delay_mark_value(std::string_view holder, std::int64_t fence, std::int64_t delay_ms)
{
    return json{{"holder", std::string{holder}}, {"fence", std::to_string(fence)}, {"delay_ms", std::to_string(delay_ms)}}
        .dump();
}

/// The mark `value` describes; nullopt when it is not one (any other text, a field
/// missing or out of range): the server's bytes are never trusted to be well-formed.
inline std::optional<delay_mark> parse_delay_mark(std::string_view value)
{
    const auto j = json::parse(value.begin(), value.end(), nullptr, false);
    if (j.is_discarded() || !j.is_object())
        return std::nullopt;
    const auto text = [&](const char* name) -> const std::string* {
        const auto it = j.find(name);
        return it != j.end() && it->is_string() ? &it->get_ref<const std::string&>() : nullptr;
    };
    const auto number = [](const std::string* s, std::int64_t most) -> std::optional<std::int64_t> {
        // At most 18 digits: the sum below cannot overflow.
        if (!s || s->empty() || s->size() > 18 || (s->size() > 1 && s->front() == '0'))
            return std::nullopt;
        std::int64_t n = 0;
        for (const char c : *s) {
            if (c < '0' || c > '9')
                return std::nullopt;
            n = n * 10 + (c - '0');
        }
        if (n <= 0 || n > most)
            return std::nullopt;
        return n;
    };
    const auto* holder = text("holder");
    const auto fence = number(text("fence"), INT64_MAX);
    const auto delay = number(text("delay_ms"), max_delay_mark_ms);
    if (!holder || !is_owner_part(*holder) || !fence || !delay)
        return std::nullopt;
    return delay_mark{*holder, *fence, *delay};
}

/// Marks the holder key `queue` + `owner_hex` created at `fence` for a lock-delay: the
/// mark is put only while that key is still the one created there (it still holds),
/// one txn.
inline json arm_delay_request(const std::string& queue, std::string_view owner_hex, std::int64_t fence,
                              std::int64_t delay_ms)
{
    const auto holder = queue + std::string{owner_hex};
    json put = {{"key", distlock::util::base64(delay_mark_key(queue))},
                {"value", distlock::util::base64(delay_mark_value(owner_hex, fence, delay_ms))}};
    return {{"compare", json::array({create_compare(holder, fence)})},
            {"success", json::array({json{{"request_put", std::move(put)}}})}};
}

/// Releases the holder key `key` and, in the same txn, its mark while the mark is still
/// the one `mark_value` armed (a mark of an earlier holder, lost, must stay: it becomes
/// a tombstone). The key's delete answers first in either branch.
inline json release_request(std::string_view key, std::string_view mark_key, std::string_view mark_value)
{
    return {{"compare", json::array({value_compare(mark_key, mark_value)})},
            {"success", json::array({json{{"request_delete_range", range_request(key)}},
                                     json{{"request_delete_range", range_request(mark_key)}}})},
            {"failure", json::array({json{{"request_delete_range", range_request(key)}}})}};
}

/// Turns the mark last written at `mod_revision` into a tombstone: the same key and
/// value, bound to `lease`. Only the first head that finds the mark does (the compare);
/// the others read what it wrote.
inline json tombstone_request(std::string_view mark_key, std::string_view value, std::int64_t mod_revision,
                              std::int64_t lease)
{
    json put = {{"key", distlock::util::base64(mark_key)},
                {"value", distlock::util::base64(value)},
                {"lease", std::to_string(lease)}};
    return {{"compare", json::array({json{{"target", "MOD"},
                                          {"result", "EQUAL"},
                                          {"key", distlock::util::base64(mark_key)},
                                          {"mod_revision", std::to_string(mod_revision)}}})},
            {"success", json::array({json{{"request_put", std::move(put)}}})},
            {"failure", json::array({json{{"request_range", range_request(mark_key)}}})}};
}

/// A key a lease is bound to, and the create revision it had (the lease's fence).
struct bound_key {
    std::string key;
    std::int64_t entry = 0;
};

/// The most compares, or operations of a branch, one txn may carry (etcd's
/// --max-txn-ops default).
inline constexpr std::size_t max_txn_ops = 128;

/// Whether the keys still exist as they were created: compares only, so that the
/// usual answer (all of them) carries nothing; when one fails, the failure branch
/// reads every key back (keys only) to say which. At most max_txn_ops keys.
inline json presence_request(std::span<const bound_key> keys)
{
    auto compares = json::array();
    auto reads = json::array();
    for (const auto& k : keys) {
        compares.push_back(create_compare(k.key, k.entry));
        auto read = range_request(k.key);
        read["keys_only"] = true;
        reads.push_back(json{{"request_range", std::move(read)}});
    }
    return {{"compare", std::move(compares)}, {"failure", std::move(reads)}};
}

} // namespace distlock::etcd::detail
