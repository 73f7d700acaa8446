// distlock/dynamodb/detail/replies.hpp: what DynamoDB answers, decoded into the values
// the store acts on. Pure functions (no I/O, no Asio), unit-tested and fuzzed on their
// own.
//
// Design note. DynamoDB's JSON protocol (x-amz-json-1.0) answers 200 with an object,
// and an error with its type in `__type` ("com.amazonaws.dynamodb.v20120810#...") and
// its words in `message` (some errors spell it `Message`). Item attributes are typed
// values: {"S": "text"}, {"N": "123"} (numbers as decimal strings). DynamoDB never
// sends null, so a null is a malformed value here; a field of another type, an
// attribute of another kind, or a number that is not an unsigned integer is
// errc::protocol_error naming the field (backend/json.hpp), never an exception. An
// error answer whose body is not JSON at all (a proxy's page) keeps what its HTTP
// status says.
#pragma once

#include <distlock/backend/json.hpp>
#include <distlock/options.hpp>
#include <distlock/util/result_type.hpp>
#include <distlock/diagnostics.hpp>
#include <distlock/dynamodb/error.hpp>
#include <distlock/error.hpp>

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace distlock::dynamodb::detail {

/// The lock item of the store's table as GetItem returns it (the store's design
/// note in store.hpp names the attributes).
struct lock_item {
    std::optional<std::string> owner;            ///< absent: free
    std::optional<std::string> record_version;   ///< record_version mode
    std::optional<std::uint64_t> fence;          ///< the last acquisition's fence
    std::optional<std::uint64_t> expires_at;     ///< expiry_time mode, ms since the Unix epoch
    std::optional<std::uint64_t> lease_duration; ///< record_version mode, ms
    /// The grant's lock-delay (ms), armed by arm_delay(): its unreleased end leaves a
    /// tombstone. Kept after the grant ends (an expiry, a revocation) as that tombstone.
    std::optional<std::uint64_t> lock_delay;
    /// expiry_time mode: when the tombstone of a marked grant ends, ms since the Unix
    /// epoch (its expiresAt + lockDelay, kept by every extension).
    std::optional<std::uint64_t> delay_until;
};

/// The longest lock-delay an item may carry, in ms: a delay is at most a TTL, which is
/// at most distlock::max_wait.
inline std::uint64_t longest_lock_delay_ms()
{
    return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(max_wait).count());
}

/// The string attribute `name` ({"S": "..."}) of the item `item`; nullopt when the
/// item has none.
inline std::optional<std::string> string_attribute(const backend::json_reader& item, std::string_view name)
{
    const auto attribute = item.optional_object(name);
    if (!attribute.present())
        return std::nullopt;
    auto text = attribute.string("S");
    if (!item.ok())
        return std::nullopt;
    return text;
}

/// The number attribute `name` ({"N": "123"}) of the item `item`, an unsigned integer;
/// nullopt when the item has none.
inline std::optional<std::uint64_t> number_attribute(const backend::json_reader& item, std::string_view name)
{
    const auto attribute = item.optional_object(name);
    if (!attribute.present())
        return std::nullopt;
    const auto n = attribute.uint64("N", backend::json_integer::decimal_string);
    if (!item.ok())
        return std::nullopt;
    return n;
}

/// The answer to a request, HTTP status `status` and body `body`: the document of a
/// 200, else the error its status and `__type` say, with the server's words in `diag`
/// (ConditionalCheckFailedException, and a TransactionCanceledException whose
/// CancellationReasons include ConditionalCheckFailed, are distlock::errc::contended:
/// the caller decides what "the condition did not hold" means).
inline result<nlohmann::json> decode_response(int status, std::string_view body, diagnostics* diag)
{
    auto reply = backend::json_reply::parse(body, backend::json_null::is_malformed);
    auto root = reply.root();
    const auto context = "DynamoDB answered HTTP " + std::to_string(status);
    if (status == 200) {
        if (!root.expect_object())
            return reply.fail(diag, context);
        return reply.take(root);
    }
    std::string type, message;
    bool condition_failed = false; // a cancelled transaction's reasons name a failed condition
    if (root.is_object()) {
        type = root.optional_string("__type").value_or(std::string{});
        if (const auto lower = root.optional_string("message"))
            message = *lower;
        else
            message = root.optional_string("Message").value_or(std::string{});
        for (const auto reason : root.optional_array("CancellationReasons"))
            if (reason.is_object() && reason.optional_string("Code") == "ConditionalCheckFailed")
                condition_failed = true;
        if (!reply.ok())
            return reply.fail(diag, context);
    }
    if (diag)
        diag->set_server_message(type.empty() ? std::string{body} : type + ": " + message);
    if (status == 400 && type.ends_with("ConditionalCheckFailedException"))
        return distlock::make_error_code(distlock::errc::contended);
    // A transaction is all or nothing: cancelled, none of it was applied. Cancelled by
    // a failed condition, it is that condition's answer; otherwise (a conflict with
    // another transaction, throttling) it may be sent again.
    if (status == 400 && type.ends_with("TransactionCanceledException"))
        return condition_failed ? distlock::make_error_code(distlock::errc::contended) : make_error_code(errc::refused);
    if (status < 500 && type.empty()) {
        if (diag)
            diag->set_client_message(context + " without an error type (__type)");
        return distlock::make_error_code(distlock::errc::protocol_error);
    }
    return classify(status, type);
}

/// The fence an acquisition's UpdateItem (ReturnValues ALL_NEW) gave the item: its
/// `fence` attribute, above 0.
inline result<std::uint64_t> decode_granted_fence(const nlohmann::json& answer, diagnostics* diag)
{
    auto reply = backend::json_reply::view(answer, backend::json_null::is_malformed);
    auto root = reply.root();
    std::uint64_t fence = 0;
    if (root.expect_object()) {
        const auto attributes = root.object("Attributes");
        const auto got = number_attribute(attributes, "fence");
        if (reply.ok() && !got)
            attributes.report("fence", "a number attribute");
        else if (reply.ok() && *got == 0)
            attributes.report("fence", "a fence above 0");
        fence = got.value_or(0);
    }
    if (!reply.ok())
        return reply.fail(diag, "DynamoDB UpdateItem answer");
    return fence;
}

/// The lock attributes of the item `item` (problems recorded in its reply).
inline lock_item read_lock_item(const backend::json_reader& item)
{
    lock_item out;
    out.owner = string_attribute(item, "owner");
    out.record_version = string_attribute(item, "recordVersion");
    out.fence = number_attribute(item, "fence");
    out.expires_at = number_attribute(item, "expiresAt");
    out.lease_duration = number_attribute(item, "leaseDuration");
    out.lock_delay = number_attribute(item, "lockDelay");
    out.delay_until = number_attribute(item, "delayUntil");
    // A mark longer than any TTL was not written by arm_delay(): honoured, it would keep
    // the resource from every client for longer than any grant could have lasted.
    if (item.ok() && out.lock_delay && *out.lock_delay > longest_lock_delay_ms())
        item.report("lockDelay", "a lock-delay of at most " + std::to_string(longest_lock_delay_ms()) + " ms");
    if (item.ok() && out.delay_until && *out.delay_until > (std::uint64_t{1} << 50))
        item.report("delayUntil", "a time in ms since the Unix epoch");
    return out;
}

/// The lock item of a GetItem answer; nullopt when the table has none (the resource
/// was never locked).
inline result<std::optional<lock_item>> decode_lock_item(const nlohmann::json& answer, diagnostics* diag)
{
    auto reply = backend::json_reply::view(answer, backend::json_null::is_malformed);
    auto root = reply.root();
    std::optional<lock_item> out;
    if (root.expect_object()) {
        const auto item = root.optional_object("Item");
        if (item.present())
            out = read_lock_item(item);
    }
    if (!reply.ok())
        return reply.fail(diag, "DynamoDB GetItem answer");
    return out;
}

/// A lock item as leader() reads it: the lock, and the value an election's leader
/// proclaimed with the fence of the grant it was proclaimed for (store.hpp, Elections).
struct leader_item {
    lock_item lock;
    std::optional<std::string> value;        ///< leaderValue (B); absent for an empty value
    std::optional<std::uint64_t> value_epoch; ///< leaderEpoch (N): the fence it was proclaimed with
};

/// The lock item of a GetItem answer with its election attributes; the empty item when
/// the table has none. An owner without a fence above 0, a value without its epoch, a
/// value longer than `max_value` bytes, or an attribute of another type is
/// errc::protocol_error: leader() reports nothing it cannot tell the grant of.
inline result<leader_item> decode_leader_item(const nlohmann::json& answer, std::size_t max_value,
                                              diagnostics* diag)
{
    auto reply = backend::json_reply::view(answer, backend::json_null::is_malformed);
    auto root = reply.root();
    leader_item out;
    if (root.expect_object()) {
        const auto item = root.optional_object("Item");
        if (item.present()) {
            out.lock = read_lock_item(item);
            out.value_epoch = number_attribute(item, "leaderEpoch");
            const auto value = item.optional_object("leaderValue");
            if (reply.ok() && value.present())
                out.value = value.base64("B");
            if (reply.ok() && out.lock.owner && out.lock.fence.value_or(0) == 0)
                item.report("fence", "a fence above 0 beside an owner");
            else if (reply.ok() && out.value && !out.value_epoch)
                item.report("leaderEpoch", "a number attribute beside leaderValue");
            else if (reply.ok() && out.value && out.value->size() > max_value)
                item.report("leaderValue", "at most " + std::to_string(max_value) + " bytes");
        }
    }
    if (!reply.ok())
        return reply.fail(diag, "DynamoDB GetItem answer");
    return out;
}

/// The lease of a shared grant or a writer's intent: the mode's attributes, as the
/// exclusive holder's (store.hpp).
struct lease_record {
    std::optional<std::uint64_t> expires_at;     ///< expiry_time mode, ms since the Unix epoch
    std::optional<std::string> record_version;   ///< record_version mode
    std::optional<std::uint64_t> lease_duration; ///< record_version mode, ms
};

/// One shared holder of a resource (a reader of a shared mutex, a permit of a
/// semaphore): an entry of the item's `sharers` map, keyed by its owner.
struct sharer_entry {
    std::string owner; ///< owner token, hex
    std::uint32_t slot = 0;
    lease_record lease;
};

/// A waiting writer's intent, which keeps new readers out while it lasts.
struct writer_intent {
    std::string waiter; ///< the waiting lock() call's token, hex
    lease_record lease;
};

/// The whole of a resource's item as the shared grants read it (detail/shared.hpp
/// says how the attributes are used): the exclusive holder and the fence, the sharers,
/// the permit count they agree on, a writer's intent, and the revision every change of
/// those three raises.
struct shared_item {
    lock_item lock;
    std::vector<sharer_entry> sharers; ///< in the order the map lists them
    std::optional<std::uint32_t> permits;
    std::optional<writer_intent> intent;
    std::optional<std::uint64_t> revision;
};

/// The map attribute `name` ({"M": {...}}) of `item`: a reader of its members; absent
/// when the item has none.
inline backend::json_reader map_attribute(const backend::json_reader& item, std::string_view name)
{
    const auto attribute = item.optional_object(name);
    if (!attribute.present())
        return attribute;
    return attribute.object("M");
}

/// The lease attributes of the map `m` (problems recorded in its reply).
inline lease_record read_lease_record(const backend::json_reader& m)
{
    lease_record out;
    out.expires_at = number_attribute(m, "expiresAt");
    out.record_version = string_attribute(m, "recordVersion");
    out.lease_duration = number_attribute(m, "leaseDuration");
    return out;
}

/// The number attribute `name` of `item` as a count or a slot (below 2^32); nullopt
/// when absent.
inline std::optional<std::uint32_t> count_attribute(const backend::json_reader& item, std::string_view name)
{
    const auto n = number_attribute(item, name);
    if (!item.ok() || !n)
        return std::nullopt;
    if (*n > std::numeric_limits<std::uint32_t>::max()) {
        item.report(name, "a number below 2^32");
        return std::nullopt;
    }
    return static_cast<std::uint32_t>(*n);
}

/// The item of a GetItem answer with the shared grants' attributes: `sharers` (a map
/// of owner -> map of slot and the mode's lease attributes), `permits` (required
/// beside sharers), `intent` (a map of waiter and lease attributes) and `revision`.
/// A resource never locked has the empty state.
inline result<shared_item> decode_shared_item(const nlohmann::json& answer, diagnostics* diag)
{
    auto reply = backend::json_reply::view(answer, backend::json_null::is_malformed);
    auto root = reply.root();
    shared_item out;
    if (root.expect_object()) {
        const auto item = root.optional_object("Item");
        if (item.present()) {
            out.lock = read_lock_item(item);
            out.permits = count_attribute(item, "permits");
            out.revision = number_attribute(item, "revision");
            const auto sharers = map_attribute(item, "sharers");
            // The reader has no walk over an object's members: its names are read from
            // a copy, each member through the reader, so that problems name their path.
            const auto names = reply.ok() && sharers.present() ? reply.take(sharers) : nlohmann::json::object();
            for (auto it = names.begin(); reply.ok() && it != names.end(); ++it) {
                const auto entry = sharers.object(it.key()).object("M");
                sharer_entry sharer{it.key(), 0, read_lease_record(entry)};
                const auto slot = count_attribute(entry, "slot");
                if (reply.ok() && !slot)
                    entry.report("slot", "a number attribute");
                if (reply.ok() && it.key().empty())
                    sharers.report("a map keyed by owner tokens");
                if (!reply.ok())
                    break;
                sharer.slot = *slot;
                out.sharers.push_back(std::move(sharer));
            }
            if (reply.ok() && !out.sharers.empty() && !out.permits)
                item.report("permits", "a number attribute beside sharers");
            const auto intent = map_attribute(item, "intent");
            if (reply.ok() && intent.present()) {
                auto waiter = string_attribute(intent, "waiter");
                auto lease = read_lease_record(intent);
                if (reply.ok() && (!waiter || waiter->empty()))
                    intent.report("waiter", "a string attribute naming the waiter");
                if (reply.ok())
                    out.intent = writer_intent{std::move(*waiter), std::move(lease)};
            }
        }
    }
    if (!reply.ok())
        return reply.fail(diag, "DynamoDB GetItem answer");
    return out;
}

/// One item of a Scan page: its resource id (the Binary key) and lock attributes.
struct scanned_lock {
    std::string resource;
    lock_item item;
};

/// One page of a Scan answer: its items, and the key to send back as the next page's
/// ExclusiveStartKey (its LastEvaluatedKey), absent on the last page.
struct scan_page {
    std::vector<scanned_lock> items;
    std::optional<nlohmann::json> next_start;
};

/// A Scan answer of the lock table: `Items`, each keyed by a non-empty Binary
/// `resource`, and an optional `LastEvaluatedKey` of the same key.
inline result<scan_page> decode_scan_page(const nlohmann::json& answer, diagnostics* diag)
{
    auto reply = backend::json_reply::view(answer, backend::json_null::is_malformed);
    auto root = reply.root();
    scan_page page;
    const auto resource_of = [](const backend::json_reader& item) {
        const auto key = item.object("resource");
        auto id = key.base64("B");
        if (item.ok() && id.empty())
            key.report("B", "a non-empty id");
        return id;
    };
    if (root.expect_object()) {
        for (const auto entry : root.array("Items")) {
            if (!entry.expect_object())
                break;
            auto id = resource_of(entry);
            auto item = read_lock_item(entry);
            if (!reply.ok())
                break;
            page.items.push_back({std::move(id), std::move(item)});
        }
        const auto next = root.optional_object("LastEvaluatedKey");
        if (reply.ok() && next.present()) {
            (void)resource_of(next);
            if (reply.ok())
                page.next_start = reply.take(next);
        }
    }
    if (!reply.ok())
        return reply.fail(diag, "DynamoDB Scan answer");
    return page;
}

/// The status of a DescribeTable answer ("CREATING", "ACTIVE", ...); empty when it
/// states none.
inline result<std::string> decode_table_status(const nlohmann::json& answer, diagnostics* diag)
{
    auto reply = backend::json_reply::view(answer, backend::json_null::is_malformed);
    auto root = reply.root();
    std::string status;
    if (root.expect_object())
        status = root.optional_object("Table").optional_string("TableStatus").value_or(std::string{});
    if (!reply.ok())
        return reply.fail(diag, "DynamoDB DescribeTable answer");
    return status;
}

// -- Without diagnostics -------------------------------------------------------------
// For callers that need only a value or its absence (tests, harnesses).

/// The number attribute `name` of `item` as an unsigned value; nullopt when absent or
/// malformed.
inline std::optional<std::uint64_t> number(const nlohmann::json& item, const char* name)
{
    auto reply = backend::json_reply::view(item, backend::json_null::is_malformed);
    const auto n = number_attribute(reply.root(), name);
    return reply.ok() ? n : std::nullopt;
}

/// The string attribute `name` of `item`; nullopt when absent or malformed.
inline std::optional<std::string> string(const nlohmann::json& item, const char* name)
{
    auto reply = backend::json_reply::view(item, backend::json_null::is_malformed);
    auto text = string_attribute(reply.root(), name);
    return reply.ok() ? text : std::nullopt;
}

} // namespace distlock::dynamodb::detail
