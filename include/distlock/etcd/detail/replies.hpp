// distlock/etcd/detail/replies.hpp: what etcd's JSON gateway answers, decoded into the
// values the client, the session and the store act on. Pure functions (no I/O, no
// Asio), unit-tested and fuzzed on their own.
//
// Design note. The gateway writes protobuf messages in proto3's JSON mapping: 64-bit
// integers as decimal strings (some versions send small ones as numbers), bytes as
// base64, and a field at its default (0, false, "", an empty list) left out, a null
// meaning the same. So an absent field reads as its default here, as before, and a
// field of another type is errc::protocol_error naming the field (backend/json.hpp):
// never an exception, and never a guess. Each decoder reads every field it uses, even
// ones the caller may not look at, so that a malformed reply is reported the same way
// whatever path the caller takes.
#pragma once

#include <distlock/backend/json.hpp>
#include <distlock/util/result_type.hpp>
#include <distlock/diagnostics.hpp>
#include <distlock/error.hpp>
#include <distlock/etcd/detail/keys.hpp>
#include <distlock/etcd/error.hpp>

#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace distlock::etcd::detail {

using json = nlohmann::json;

/// How the gateway writes int64 fields.
inline constexpr auto int64_form = backend::json_integer::number_or_decimal_string;

/// One key-value of a range answer or of a watch event.
struct kv {
    std::string key;
    std::string value;
    std::int64_t create_revision = 0;
    std::int64_t mod_revision = 0;
    std::int64_t lease = 0;
};

/// Whether the key's value carries its holder's mark (keys.hpp): distlock's values
/// begin with the owner its key ends in. A concurrency.Mutex's key (valued "") never
/// does, nor a concurrency.Election candidate's, whatever value it campaigns with: the
/// waiter behind it looks at its place again when it goes.
inline bool carries_mark(const kv& k) noexcept
{
    const auto slash = k.key.rfind('/');
    const std::string_view owner = std::string_view{k.key}.substr(slash == std::string::npos ? 0 : slash + 1);
    return !owner.empty() && k.value.size() >= owner.size() + holder_mark.size() && k.value.starts_with(owner) &&
           k.value.ends_with(holder_mark);
}

/// A range answer: its keys and `count` (the number of keys in the range, which may
/// be more than those returned).
struct range_answer {
    std::vector<kv> kvs;
    std::int64_t count = 0;
};

/// A txn answer: whether its compares held, and per response its range answer
/// (nullopt for a put or a delete).
struct txn_answer {
    bool succeeded = false;
    std::vector<std::optional<range_answer>> responses;

    /// The range answer of response `i`; nullptr when there is none.
    const range_answer* range(std::size_t i) const
    {
        return i < responses.size() && responses[i] ? &*responses[i] : nullptr;
    }
};

/// One event of a watch response.
struct watch_event {
    bool deleted = false;  ///< a DELETE (else a PUT: the gateway leaves out the default type)
    std::optional<kv> put; ///< the key-value a PUT wrote, when the event carries it
    std::string gone;      ///< the key a DELETE removed, when the event names it
};

/// One line of a watch stream: one watch response.
struct watch_response {
    std::int64_t revision = 0;         ///< its header's revision (0: not given)
    bool created = false;              ///< the watch now stands
    bool canceled = false;             ///< the server ended the watch
    std::int64_t compact_revision = 0; ///< why, when the start revision was compacted
    std::vector<watch_event> events;
};

/// One resource's queue, as a listing finds it.
struct queue_listing {
    std::string resource;    ///< the resource id, unescaped
    std::string owner;       ///< the holder's owner token (hex), from its key
    std::int64_t fence = 0;  ///< the holder's key's create revision
    std::size_t waiters = 0; ///< the keys queued behind the holder's
};

// -- Fields shared by several replies ---------------------------------------------------

/// The fields of the key-value `at` (an element of kvs, an event's kv): the key must
/// be there, the rest have defaults.
inline kv read_kv_fields(const backend::json_reader& at)
{
    kv out;
    if (!at.expect_object())
        return out;
    out.key = at.base64("key");
    if (out.key.empty() && at.ok())
        at.report("key", "a key (non-empty base64 text)");
    out.value = at.optional_base64("value").value_or(std::string{});
    out.create_revision = at.optional_int64("create_revision", int64_form).value_or(0);
    out.mod_revision = at.optional_int64("mod_revision", int64_form).value_or(0);
    out.lease = at.optional_int64("lease", int64_form).value_or(0);
    return out;
}

/// The fields of the range answer `at`.
inline range_answer read_range_fields(const backend::json_reader& at)
{
    range_answer out;
    if (!at.expect_object())
        return out;
    out.count = at.optional_int64("count", int64_form).value_or(0);
    for (const auto& element : at.optional_array("kvs")) {
        out.kvs.push_back(read_kv_fields(element));
        if (!at.ok())
            return out;
    }
    if (out.count < static_cast<std::int64_t>(out.kvs.size()))
        at.report("count", "at least the number of kvs (" + std::to_string(out.kvs.size()) + ")");
    return out;
}

// The error of an error answer whose root is `root`: {"error": "...", "message": "...",
// "code": N} from a unary call, {"error": {"grpc_code": N, "message": "...", ...}} in a
// stream. The server's message (else the answer itself) goes to the diagnostics.
inline std::error_code error_answer(backend::json_reply& reply, const backend::json_reader& root,
                                    std::string_view body, std::string_view context, diagnostics* diag)
{
    const auto error = root.field("error");
    auto words = root;
    std::string message;
    if (error.is_object()) {
        words = error;
        message = error.optional_string("message").value_or(std::string{});
    } else if (error.is_string()) {
        message = root.optional_string("message").value_or(error.as_string());
    } else {
        error.report("a string or an object");
    }
    const auto code = words.int64(words.field("grpc_code").present() ? "grpc_code" : "code");
    if (!reply.ok())
        return reply.fail(diag, context);
    if (diag)
        diag->set_server_message(message.empty() ? std::string{body} : message);
    if (message.find("user name is empty") != std::string::npos)
        return distlock::make_error_code(distlock::errc::auth_failed); // auth is on and no user was configured
    return from_grpc(code);
}

// -- Decoders ------------------------------------------------------------------------

/// The answer of a call, HTTP status `status` and body `body`: the document to read
/// (a streamed answer's first "result", such as lease/keepalive's), or the error its
/// gRPC code says, with the server's words in `diag`.
inline result<json> decode_answer(int status, std::string_view body, diagnostics* diag)
{
    // A streamed answer is one {"result": ...} line, or an error line.
    if (const auto nl = body.find('\n'); nl != std::string_view::npos)
        body = body.substr(0, nl);
    auto reply = backend::json_reply::parse(body, backend::json_null::means_absent);
    auto root = reply.root();
    const auto context = "etcd answered HTTP " + std::to_string(status);
    if (!root.expect_object())
        return reply.fail(diag, context);
    if (const auto streamed = root.optional_object("result"); streamed.present())
        return reply.take(streamed);
    if (!reply.ok())
        return reply.fail(diag, context);
    if (!root.field("error").present()) {
        if (status == 200)
            return reply.take(root);
        root.report("error", "an error code");
        return reply.fail(diag, context);
    }
    return error_answer(reply, root, body, context, diag);
}

/// A range answer (kv/range, or a txn's response_range).
inline result<range_answer> decode_range(const json& answer, diagnostics* diag)
{
    auto reply = backend::json_reply::view(answer, backend::json_null::means_absent);
    auto out = read_range_fields(reply.root());
    if (!reply.ok())
        return reply.fail(diag, "etcd range answer");
    return out;
}

/// The revision in an answer's header (positive).
inline result<std::int64_t> decode_revision(const json& answer, diagnostics* diag)
{
    auto reply = backend::json_reply::view(answer, backend::json_null::means_absent);
    auto root = reply.root();
    std::int64_t revision = 0;
    if (root.expect_object()) {
        const auto header = root.object("header");
        revision = header.optional_int64("revision", int64_form).value_or(0);
        if (revision <= 0 && reply.ok())
            header.report("revision", "a positive revision");
    }
    if (!reply.ok())
        return reply.fail(diag, "etcd answer header");
    return revision;
}

/// A txn answer. The responses at `success_ranges` (when the compares held) or at
/// `failure_ranges` (when not) must be range answers: the caller's requests there
/// were ranges.
inline result<txn_answer> decode_txn(const json& answer, diagnostics* diag,
                                     std::initializer_list<std::size_t> success_ranges = {},
                                     std::initializer_list<std::size_t> failure_ranges = {})
{
    auto reply = backend::json_reply::view(answer, backend::json_null::means_absent);
    auto root = reply.root();
    txn_answer out;
    if (root.expect_object()) {
        out.succeeded = root.optional_boolean("succeeded").value_or(false);
        const auto responses = root.optional_array("responses");
        for (const auto& response : responses) {
            if (!response.expect_object())
                break;
            const auto range = response.optional_object("response_range");
            if (range.present())
                out.responses.emplace_back(read_range_fields(range));
            else
                out.responses.emplace_back(std::nullopt);
            if (!reply.ok())
                break;
        }
        for (const auto i : out.succeeded ? success_ranges : failure_ranges)
            if (reply.ok() && !out.range(i))
                responses.at(i).report("response_range", "a range answer");
    }
    if (!reply.ok())
        return reply.fail(diag, "etcd txn answer");
    return out;
}

/// The queues of a listing's range answer (listing_request in keys.hpp): the keys
/// under the store prefix `prefix` decoded back to resource ids and owners, grouped by
/// resource, those whose ids do not begin with `resource_prefix` left out, sorted by
/// id. The holder of each is its oldest key. A concurrency.Mutex's key is a lock's
/// too (its owner: the lease ID in hex); keys of another layout under the prefix are
/// no locks and are skipped; a key without a positive create revision, or fewer
/// keys than the answer counts (a listing asks for all of them), is a malformed answer.
inline result<std::vector<queue_listing>> decode_listing(const json& answer, std::string_view prefix,
                                                         std::string_view resource_prefix, diagnostics* diag,
                                                         key_dialect dialect = key_dialect::distlock)
{
    auto reply = backend::json_reply::view(answer, backend::json_null::means_absent);
    auto root = reply.root();
    std::map<std::string, queue_listing> queues;
    if (root.expect_object()) {
        const auto count = root.optional_int64("count", int64_form).value_or(0);
        const auto kvs = root.optional_array("kvs");
        for (const auto& element : kvs) {
            const auto k = read_kv_fields(element);
            if (!reply.ok())
                break;
            if (k.create_revision <= 0) {
                element.report("create_revision", "a positive revision");
                break;
            }
            auto parsed = parse_queue_key(prefix, k.key, dialect);
            if (!parsed || !parsed->resource.starts_with(resource_prefix))
                continue;
            auto [it, first] = queues.try_emplace(parsed->resource);
            auto& q = it->second;
            if (first) {
                q.resource = std::move(parsed->resource);
            } else {
                ++q.waiters;
                if (k.create_revision >= q.fence)
                    continue;
            }
            q.owner = std::string{parsed->owner};
            q.fence = k.create_revision;
        }
        if (reply.ok() && count != static_cast<std::int64_t>(kvs.size()))
            root.report("count", "the number of kvs (" + std::to_string(kvs.size()) + "): a listing reads every key");
    }
    if (!reply.ok())
        return reply.fail(diag, "etcd listing answer");
    std::vector<queue_listing> out;
    out.reserve(queues.size());
    for (auto& [resource, q] : queues)
        out.push_back(std::move(q));
    return out;
}

/// Which of `keys` (a presence check's, presence_request in keys.hpp) still exist
/// with the create revision it compared: all of them when its compares held; else
/// each as the failure branch read it back, one range answer per key.
inline result<std::vector<bool>> decode_presence(const json& answer, std::span<const bound_key> keys,
                                                 diagnostics* diag)
{
    auto reply = backend::json_reply::view(answer, backend::json_null::means_absent);
    auto root = reply.root();
    std::vector<bool> present(keys.size(), true);
    if (root.expect_object()) {
        const bool succeeded = root.optional_boolean("succeeded").value_or(false);
        const auto responses = root.optional_array("responses");
        if (succeeded) {
            if (!responses.empty())
                root.report("responses", "none (the check's compares held)");
        } else if (responses.size() != keys.size()) {
            root.report("responses", "one range answer per key checked (" + std::to_string(keys.size()) + ")");
        } else {
            for (std::size_t i = 0; i < keys.size() && reply.ok(); ++i) {
                const auto range = read_range_fields(responses.at(i).object("response_range"));
                if (reply.ok())
                    present[i] = !range.kvs.empty() && range.kvs.front().create_revision == keys[i].entry;
            }
        }
    }
    if (!reply.ok())
        return reply.fail(diag, "etcd presence check answer");
    return present;
}

/// How many keys a kv/deleterange deleted.
inline result<std::int64_t> decode_deleted(const json& answer, diagnostics* diag)
{
    auto reply = backend::json_reply::view(answer, backend::json_null::means_absent);
    auto root = reply.root();
    std::int64_t deleted = 0;
    if (root.expect_object())
        deleted = root.optional_int64("deleted", int64_form).value_or(0);
    if (!reply.ok())
        return reply.fail(diag, "etcd deleterange answer");
    return deleted;
}

/// The TTL a lease/grant answer states (positive), or nullopt when it states none.
inline result<std::optional<std::int64_t>> decode_lease_grant(const json& answer, diagnostics* diag)
{
    auto reply = backend::json_reply::view(answer, backend::json_null::means_absent);
    auto root = reply.root();
    std::optional<std::int64_t> ttl;
    if (root.expect_object() && root.has("TTL")) {
        ttl = root.optional_int64("TTL", int64_form).value_or(0); // a null TTL is 0
        if (*ttl <= 0 && reply.ok())
            root.report("TTL", "a positive TTL");
    }
    if (!reply.ok())
        return reply.fail(diag, "etcd lease grant answer");
    return ttl;
}

/// A lease the server chose the ID of: its ID and TTL (both positive).
struct granted_lease {
    std::int64_t id = 0;
    std::int64_t ttl = 0;
};

/// The lease a lease/grant answer (of a request that left the ID to the server)
/// states: errc::protocol_error unless both its ID and TTL are positive.
inline result<granted_lease> decode_granted_lease(const json& answer, diagnostics* diag)
{
    auto reply = backend::json_reply::view(answer, backend::json_null::means_absent);
    auto root = reply.root();
    granted_lease out;
    if (root.expect_object()) {
        out.id = root.optional_int64("ID", int64_form).value_or(0);
        out.ttl = root.optional_int64("TTL", int64_form).value_or(0);
        if (reply.ok() && out.id <= 0)
            root.report("ID", "a positive lease ID");
        else if (reply.ok() && out.ttl <= 0)
            root.report("TTL", "a positive TTL");
    }
    if (!reply.ok())
        return reply.fail(diag, "etcd lease grant answer");
    return out;
}

/// How many keys the delete at `index` of a txn's answer deleted.
inline result<std::int64_t> decode_txn_deleted(const json& answer, std::size_t index, diagnostics* diag)
{
    auto reply = backend::json_reply::view(answer, backend::json_null::means_absent);
    auto root = reply.root();
    std::int64_t deleted = 0;
    if (root.expect_object()) {
        const auto responses = root.optional_array("responses");
        const auto response = responses.at(index);
        if (reply.ok() && response.expect_object()) {
            const auto del = response.optional_object("response_delete_range");
            if (reply.ok() && !del.present())
                response.report("response_delete_range", "a delete's answer");
            else if (reply.ok())
                deleted = del.optional_int64("deleted", int64_form).value_or(0);
        }
    }
    if (!reply.ok())
        return reply.fail(diag, "etcd txn answer");
    return deleted;
}

// The TTL of a keepalive or time-to-live answer (0 when absent).
inline result<std::int64_t> decode_ttl(const json& answer, diagnostics* diag, std::string_view context)
{
    auto reply = backend::json_reply::view(answer, backend::json_null::means_absent);
    auto root = reply.root();
    std::int64_t ttl = 0;
    if (root.expect_object())
        ttl = root.optional_int64("TTL", int64_form).value_or(0);
    if (!reply.ok())
        return reply.fail(diag, context);
    return ttl;
}

/// The TTL a lease/keepalive answer gives the lease again; 0 or less (or absent):
/// the lease is gone.
inline result<std::int64_t> decode_keepalive(const json& answer, diagnostics* diag)
{
    return decode_ttl(answer, diag, "etcd lease keepalive answer");
}

/// The seconds a lease has left by lease/timetolive (-1: it has expired).
inline result<std::int64_t> decode_time_to_live(const json& answer, diagnostics* diag)
{
    return decode_ttl(answer, diag, "etcd lease time-to-live answer");
}

/// The token of an auth/authenticate answer: non-empty, and fit for a header line.
inline result<std::string> decode_auth_token(const json& answer, diagnostics* diag)
{
    auto reply = backend::json_reply::view(answer, backend::json_null::means_absent);
    auto root = reply.root();
    std::string token;
    if (root.expect_object()) {
        token = root.string("token");
        if (reply.ok() && (token.empty() || token.find_first_of("\r\n") != std::string::npos))
            root.report("token", "a non-empty token without line breaks");
    }
    if (!reply.ok())
        return reply.fail(diag, "etcd authenticate answer");
    return token;
}

// A watch response's fields (the gateway's line's "result", or a gRPC message).
inline watch_response read_watch_fields(const backend::json_reader& response)
{
    watch_response out;
    out.revision = response.optional_object("header").optional_int64("revision", int64_form).value_or(0);
    out.created = response.optional_boolean("created").value_or(false);
    out.canceled = response.optional_boolean("canceled").value_or(false);
    out.compact_revision = response.optional_int64("compact_revision", int64_form).value_or(0);
    for (const auto& event : response.optional_array("events")) {
        if (!event.expect_object())
            break;
        watch_event e;
        e.deleted = event.optional_string("type").value_or("PUT") == "DELETE";
        // A PUT's key-value is read (it may carry the holder's mark); of a DELETE's,
        // the key, when there (a watch of several keys asks which one went).
        if (const auto written = event.optional_object("kv"); written.present()) {
            if (e.deleted)
                e.gone = written.optional_base64("key").value_or(std::string{});
            else
                e.put = read_kv_fields(written);
        }
        out.events.push_back(std::move(e));
    }
    return out;
}

/// One line of a watch stream: a watch response, or the error of an error line.
inline result<watch_response> decode_watch_line(std::string_view line, diagnostics* diag)
{
    static constexpr std::string_view context = "etcd watch response";
    auto reply = backend::json_reply::parse(line, backend::json_null::means_absent);
    auto root = reply.root();
    if (!root.expect_object())
        return reply.fail(diag, context);
    const auto response = root.optional_object("result");
    if (!response.present()) {
        if (reply.ok() && root.field("error").present())
            return error_answer(reply, root, line, context, diag);
        if (reply.ok())
            root.report("result", "a watch response or an error");
        return reply.fail(diag, context);
    }
    auto out = read_watch_fields(response);
    if (!reply.ok())
        return reply.fail(diag, context);
    return out;
}

/// A watch response in its JSON form (a gRPC stream's message, decoded).
inline result<watch_response> decode_watch(const json& response, diagnostics* diag)
{
    auto reply = backend::json_reply::view(response, backend::json_null::means_absent);
    auto root = reply.root();
    watch_response out;
    if (root.expect_object())
        out = read_watch_fields(root);
    if (!reply.ok())
        return reply.fail(diag, "etcd watch response");
    return out;
}

/// The error of a gRPC call that ended with status `code` (not OK) and `message`,
/// the server's words going to `diag`; as error_answer() says for the gateway.
inline std::error_code status_error(int code, std::string_view message, diagnostics* diag)
{
    if (diag)
        diag->set_server_message(std::string{message});
    if (message.find("user name is empty") != std::string_view::npos)
        return distlock::make_error_code(distlock::errc::auth_failed); // auth is on and no user was configured
    return from_grpc(code);
}

/// The leader of an election as the queue's oldest key says (decode_leader).
struct leader_entry {
    bool held = false;                ///< the queue has a key
    std::string owner;                ///< its key's last part: an owner token, or a lease ID in hex
    std::int64_t entry = 0;           ///< its create revision: the term's epoch
    std::int64_t lease = 0;           ///< its lease (0: none)
    std::optional<std::string> value; ///< what it proclaimed (keys.hpp: proclaimed_in)
};

/// The answer of a read of the queue `queue`'s oldest key with its value (limit 1,
/// sorted by create revision): the leader and its value. errc::protocol_error for
/// more than the one key asked for, a key outside the queue, a create revision that
/// is not positive or a negative lease.
inline result<leader_entry> decode_leader(const json& answer, std::string_view queue, diagnostics* diag)
{
    auto reply = backend::json_reply::view(answer, backend::json_null::means_absent);
    auto root = reply.root();
    const auto r = read_range_fields(root);
    leader_entry out;
    if (reply.ok() && r.kvs.size() > 1)
        root.report("kvs", "at most the one key asked for");
    else if (reply.ok() && !r.kvs.empty()) {
        const auto& k = r.kvs.front();
        const auto at = root.optional_array("kvs").at(0);
        if (k.key.size() <= queue.size() || !k.key.starts_with(queue))
            at.report("key", "a key of the queue \"" + std::string{queue} + "\"");
        else if (k.create_revision <= 0)
            at.report("create_revision", "a positive revision");
        else if (k.lease < 0)
            at.report("lease", "a lease ID (not negative)");
        else {
            out.held = true;
            out.owner = k.key.substr(k.key.rfind('/') + 1);
            out.entry = k.create_revision;
            out.lease = k.lease;
            out.value = proclaimed_in(out.owner, k.value);
        }
    }
    if (!reply.ok())
        return reply.fail(diag, "etcd leader read");
    return out;
}

// -- Without diagnostics -------------------------------------------------------------
// For callers that need only whether a reply is well-formed (tests, harnesses).

/// An int64 field of the gateway's JSON: a string of digits, or a number; absent (or
/// null) fields are at their default, zero. nullopt when malformed.
inline std::optional<std::int64_t> integer(const json& j, const char* name)
{
    auto reply = backend::json_reply::view(j, backend::json_null::means_absent);
    auto root = reply.root();
    const auto n = root.optional_int64(name, int64_form).value_or(0);
    if (!reply.ok())
        return std::nullopt;
    return n;
}

/// A range answer; nullopt when malformed.
inline std::optional<range_answer> read_range(const json& j)
{
    auto r = decode_range(j, nullptr);
    if (!r)
        return std::nullopt;
    return std::move(r.value());
}

/// The revision in an answer's header; nullopt when missing, not positive, or malformed.
inline std::optional<std::int64_t> header_revision(const json& j)
{
    const auto r = decode_revision(j, nullptr);
    if (!r)
        return std::nullopt;
    return r.value();
}

} // namespace distlock::etcd::detail
