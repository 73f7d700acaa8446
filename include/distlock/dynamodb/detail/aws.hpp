// distlock/dynamodb/detail/aws.hpp: the items of dialect::aws (AWS's Java lock client,
// amazon-dynamodb-lock-client): lock names, the fence item's name, record versions,
// and what a GetItem or Scan of such a table says. Pure functions (no I/O, no Asio).
//
// Design note. The AWS client keys a lock by a String partition key (attribute
// `key` by default) and writes ownerName (S), recordVersionNumber (S, a random UUID),
// leaseDuration (S, decimal milliseconds: the client converts its time unit before
// writing), isReleased (S "1"; its reader counts the attribute's presence) and data
// (B). distlock names a lock by any bytes, so:
//  - an id that is valid UTF-8 and does not start with the reserved prefix
//    `distlock#` is the lock's name as it is (an AWS client locking "orders/42" and
//    distlock locking "orders/42" meet on one item);
//  - any other id is `distlock#b64#` followed by its base64, so every id has a name
//    and no two ids share one;
//  - the fence counter of a lock named N is the item named `distlock#fence#N`.
// AWS clients must not lock names starting with `distlock#` (docs/dynamodb.md). A
// foreign record is read leniently: an attribute of another type than the AWS
// client writes counts as absent (a held item with no version it can watch stays
// held), never as an error; a reply whose JSON is not DynamoDB's shape is
// errc::protocol_error.
#pragma once

#include <distlock/backend/json.hpp>
#include <distlock/diagnostics.hpp>
#include <distlock/error.hpp>
#include <distlock/options.hpp>
#include <distlock/util/base64.hpp>
#include <distlock/util/result_type.hpp>

#include <nlohmann/json.hpp>

#include <charconv>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace distlock::dynamodb::detail::aws {

/// Lock names starting with this are distlock's own: encoded ids and fence items.
inline constexpr std::string_view reserved_prefix = "distlock#";
inline constexpr std::string_view encoded_prefix = "distlock#b64#";
inline constexpr std::string_view fence_prefix = "distlock#fence#";

/// The attribute names the AWS client writes (AmazonDynamoDBLockClient's constants),
/// and the two distlock adds to an item it holds.
inline constexpr const char* owner_name = "ownerName";
inline constexpr const char* record_version_number = "recordVersionNumber";
inline constexpr const char* lease_duration = "leaseDuration";
inline constexpr const char* is_released = "isReleased";
inline constexpr const char* released_value = "1";
inline constexpr const char* fence = "fence";
inline constexpr const char* fence_owner = "fenceOwner";
/// The AWS client's payload (B), which its getLock returns: an election's value.
inline constexpr const char* data = "data";
/// The fence of the grant that proclaimed `data` (N), written by distlock beside it.
inline constexpr const char* leader_epoch = "leaderEpoch";
/// A distlock grant's lock-delay mark (N, ms), which the AWS client keeps as an
/// attribute it does not know and ignores; distlock's own dialect names it alike.
inline constexpr const char* lock_delay = "lockDelay";

/// Whether `text` is well-formed UTF-8 (no overlong forms, no surrogates, nothing
/// above U+10FFFF): what DynamoDB accepts in a String.
inline bool valid_utf8(std::string_view text) noexcept
{
    std::size_t i = 0;
    while (i < text.size()) {
        const auto c = static_cast<unsigned char>(text[i]);
        std::size_t extra = 0;
        std::uint32_t code = 0;
        if (c < 0x80) {
            ++i;
            continue;
        }
        if (c >= 0xC2 && c <= 0xDF) {
            extra = 1;
            code = c & 0x1F;
        } else if (c >= 0xE0 && c <= 0xEF) {
            extra = 2;
            code = c & 0x0F;
        } else if (c >= 0xF0 && c <= 0xF4) {
            extra = 3;
            code = c & 0x07;
        } else {
            return false;
        }
        if (i + extra >= text.size())
            return false;
        for (std::size_t k = 1; k <= extra; ++k) {
            const auto d = static_cast<unsigned char>(text[i + k]);
            if ((d & 0xC0) != 0x80)
                return false;
            code = (code << 6) | (d & 0x3F);
        }
        if ((extra == 2 && (code < 0x800 || (code >= 0xD800 && code <= 0xDFFF))) ||
            (extra == 3 && (code < 0x10000 || code > 0x10FFFF)))
            return false;
        i += extra + 1;
    }
    return true;
}

/// The lock name of the resource id `resource` (the design note's rule).
inline std::string lock_name(std::string_view resource)
{
    if (valid_utf8(resource) && !resource.starts_with(reserved_prefix))
        return std::string{resource};
    return std::string{encoded_prefix} + util::base64(resource);
}

/// The name of the item that counts `resource`'s fences.
inline std::string fence_name(std::string_view resource) { return std::string{fence_prefix} + lock_name(resource); }

/// The resource id a lock name stands for; nullopt for a fence item, or a reserved
/// name that is none of distlock's.
inline std::optional<std::string> resource_of(std::string_view name)
{
    if (name.starts_with(encoded_prefix))
        return util::from_base64(name.substr(encoded_prefix.size()));
    if (name.starts_with(reserved_prefix))
        return std::nullopt;
    return std::string{name};
}

/// A record version as the AWS client writes one (a random UUID, version 4, in its
/// canonical text), from 32 random hex digits.
inline std::string uuid_from_hex(std::string_view hex)
{
    std::string h{hex.substr(0, 32)};
    h.resize(32, '0');
    h[12] = '4';                                     // version 4: random
    h[16] = "89ab"[std::string_view{"0123456789abcdef"}.find(h[16]) & 3]; // variant 10xx
    return h.substr(0, 8) + '-' + h.substr(8, 4) + '-' + h.substr(12, 4) + '-' + h.substr(16, 4) + '-' + h.substr(20);
}

/// The first 16 hex digits of a record version (its dashes skipped), as a number:
/// lock_info's version. nullopt when it has fewer.
inline std::optional<std::uint64_t> version_number(std::string_view version)
{
    std::string digits;
    for (const char c : version) {
        if (c == '-')
            continue;
        digits.push_back(c);
        if (digits.size() == 16)
            break;
    }
    std::uint64_t n = 0;
    if (digits.size() < 16)
        return std::nullopt;
    const auto [end, ec] = std::from_chars(digits.data(), digits.data() + 16, n, 16);
    if (ec != std::errc{} || end != digits.data() + 16)
        return std::nullopt;
    return n;
}

/// A lock item of the AWS layout, as far as it can be read.
struct lock_record {
    std::optional<std::string> owner;          ///< ownerName
    std::optional<std::string> version;        ///< recordVersionNumber
    std::optional<std::uint64_t> lease_ms;     ///< leaseDuration, when it is decimal milliseconds
    bool released = false;                     ///< isReleased is there (the AWS reader's rule)
    bool released_as_written = false;          ///< ... and is the AWS client's "1"
    std::optional<std::uint64_t> fence;        ///< stamped by a distlock holder
    std::optional<std::string> fence_owner;    ///< whose fence it is
    std::optional<std::uint64_t> lock_delay_ms; ///< a distlock grant's lock-delay mark
    std::string whole;                         ///< the item's JSON: a version for items without one

    /// The fence of the holder that stamped it, if the holder now is that one (an
    /// AWS client that updates items in place leaves a stamp that is not its own).
    std::optional<std::uint64_t> holder_fence() const
    {
        if (fence && fence_owner && owner && *fence_owner == *owner)
            return fence;
        return std::nullopt;
    }

    /// What a waiter watches: the record version, or (a record without one) the
    /// whole item, which cannot be taken over by its version and so stays held.
    std::string watched_version() const { return version ? *version : "item " + whole; }
};

/// The String attribute `name` of `item`; nullopt when absent or of another type.
inline std::optional<std::string> text_attribute(const backend::json_reader& item, std::string_view name)
{
    const auto attribute = item.optional_object(name);
    if (!attribute.present() || !item.ok())
        return std::nullopt;
    const auto text = attribute.field("S");
    if (!text.is_string())
        return std::nullopt;
    return text.as_string();
}

/// A decimal unsigned number held in the String or Number attribute `name`; nullopt
/// when absent, of another type, or not such a number.
inline std::optional<std::uint64_t> decimal_attribute(const backend::json_reader& item, std::string_view name)
{
    const auto attribute = item.optional_object(name);
    if (!attribute.present() || !item.ok())
        return std::nullopt;
    for (const char* type : {"S", "N"}) {
        const auto value = attribute.field(type);
        if (!value.is_string())
            continue;
        const auto text = value.as_string();
        std::uint64_t n = 0;
        const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
        if (!text.empty() && ec == std::errc{} && end == text.data() + text.size())
            return n;
        return std::nullopt;
    }
    return std::nullopt;
}

/// The lock attributes of the item `item` (only a member that is not a typed value is
/// a problem, recorded in its reply).
inline lock_record read_lock_record(const backend::json_reader& item, const nlohmann::json& whole)
{
    lock_record out;
    out.owner = text_attribute(item, owner_name);
    out.version = text_attribute(item, record_version_number);
    out.lease_ms = decimal_attribute(item, lease_duration);
    out.released = item.has(is_released);
    out.released_as_written = text_attribute(item, is_released) == std::string{released_value};
    out.fence = decimal_attribute(item, fence);
    out.fence_owner = text_attribute(item, fence_owner);
    out.lock_delay_ms = decimal_attribute(item, lock_delay);
    // A mark is at most a TTL long: a longer one was not written by distlock, and is
    // not honoured (the AWS client honours none).
    if (out.lock_delay_ms &&
        *out.lock_delay_ms > static_cast<std::uint64_t>(
                                 std::chrono::duration_cast<std::chrono::milliseconds>(max_wait).count()))
        out.lock_delay_ms.reset();
    out.whole = whole.dump(-1, ' ', true, nlohmann::json::error_handler_t::replace);
    return out;
}

/// The lock record of a GetItem answer; nullopt when the table has no such item.
inline result<std::optional<lock_record>> decode_lock_record(const nlohmann::json& answer, diagnostics* diag)
{
    auto reply = backend::json_reply::view(answer, backend::json_null::is_malformed);
    auto root = reply.root();
    std::optional<lock_record> out;
    if (root.expect_object()) {
        const auto item = root.optional_object("Item");
        if (item.present()) {
            const auto whole = answer.find("Item");
            out = read_lock_record(item, *whole);
        }
    }
    if (!reply.ok())
        return reply.fail(diag, "DynamoDB GetItem answer");
    return out;
}

/// A lock item as leader() reads it: the record, its `data`, and the fence of the grant
/// that proclaimed it.
struct leader_record {
    std::optional<lock_record> lock;          ///< nullopt: no such item
    std::optional<std::string> data;          ///< the value's bytes (absent: an empty value, or none)
    std::optional<std::uint64_t> leader_epoch; ///< leaderEpoch, when it is a decimal number

    /// The value proclaimed for the grant that holds now (its stamped fence), if any.
    bool proclaimed() const
    {
        const auto holder = lock ? lock->holder_fence() : std::nullopt;
        return holder && leader_epoch == holder;
    }
};

/// The lock record of a GetItem answer with the election's attributes. The value of a
/// distlock grant (leaderEpoch = its stamped fence) must be a Binary of at most
/// `max_value` bytes, else errc::protocol_error; a foreign holder's `data` is read as
/// leniently as the rest of its record (another type, or longer: none).
inline result<leader_record> decode_leader_record(const nlohmann::json& answer, std::size_t max_value,
                                                  diagnostics* diag)
{
    auto reply = backend::json_reply::view(answer, backend::json_null::is_malformed);
    auto root = reply.root();
    leader_record out;
    if (root.expect_object()) {
        const auto item = root.optional_object("Item");
        if (item.present()) {
            out.lock = read_lock_record(item, *answer.find("Item"));
            out.leader_epoch = decimal_attribute(item, leader_epoch);
            const auto value = item.optional_object(data);
            if (reply.ok() && value.present()) {
                if (out.proclaimed()) {
                    out.data = value.base64("B");
                    if (reply.ok() && out.data->size() > max_value)
                        item.report(data, "at most " + std::to_string(max_value) + " bytes");
                } else if (const auto bytes = value.field("B"); bytes.is_string()) {
                    out.data = util::from_base64(bytes.as_string());
                    if (out.data && out.data->size() > max_value)
                        out.data.reset();
                }
            }
        }
    }
    if (!reply.ok())
        return reply.fail(diag, "DynamoDB GetItem answer");
    return out;
}

/// The counter of a fence item as a GetItem answer has it; 0 when there is none.
inline result<std::uint64_t> decode_fence_item(const nlohmann::json& answer, diagnostics* diag)
{
    auto reply = backend::json_reply::view(answer, backend::json_null::is_malformed);
    auto root = reply.root();
    std::uint64_t n = 0;
    if (root.expect_object()) {
        const auto item = root.optional_object("Item");
        if (item.present()) {
            const auto attribute = item.optional_object(fence);
            if (attribute.present())
                n = attribute.uint64("N", backend::json_integer::decimal_string);
        }
    }
    if (!reply.ok())
        return reply.fail(diag, "DynamoDB GetItem answer (fence item)");
    return n;
}

/// The fence a draw (UpdateItem `ADD fence :one`, ReturnValues UPDATED_NEW) gave: the
/// new `fence`, above 0.
inline result<std::uint64_t> decode_fence_draw(const nlohmann::json& answer, diagnostics* diag)
{
    auto reply = backend::json_reply::view(answer, backend::json_null::is_malformed);
    auto root = reply.root();
    std::uint64_t n = 0;
    if (root.expect_object()) {
        const auto attributes = root.object("Attributes");
        const auto attribute = attributes.object(fence);
        n = attribute.uint64("N", backend::json_integer::decimal_string);
        if (reply.ok() && n == 0)
            attributes.report(fence, "a fence above 0");
    }
    if (!reply.ok())
        return reply.fail(diag, "DynamoDB UpdateItem answer (fence draw)");
    return n;
}

/// One item of a Scan page of an AWS-layout table: its lock name and record.
struct scanned_record {
    std::string name;
    lock_record record;
};

/// One page of a Scan answer, and the ExclusiveStartKey of the next.
struct scan_page {
    std::vector<scanned_record> items;
    std::optional<nlohmann::json> next_start;
};

/// A Scan answer of an AWS-layout table keyed by the String attribute `key`.
inline result<scan_page> decode_scan_page(const nlohmann::json& answer, std::string_view key, diagnostics* diag)
{
    auto reply = backend::json_reply::view(answer, backend::json_null::is_malformed);
    auto root = reply.root();
    scan_page page;
    if (root.expect_object()) {
        const auto items = root.array("Items");
        const auto raw = answer.find("Items");
        std::size_t index = 0;
        for (const auto entry : items) {
            if (!entry.expect_object())
                break;
            auto name = entry.object(key).string("S");
            auto record = read_lock_record(entry, (*raw)[index++]);
            if (!reply.ok())
                break;
            page.items.push_back({std::move(name), std::move(record)});
        }
        const auto next = root.optional_object("LastEvaluatedKey");
        if (reply.ok() && next.present()) {
            (void)next.object(key).string("S");
            if (reply.ok())
                page.next_start = reply.take(next);
        }
    }
    if (!reply.ok())
        return reply.fail(diag, "DynamoDB Scan answer");
    return page;
}

} // namespace distlock::dynamodb::detail::aws
