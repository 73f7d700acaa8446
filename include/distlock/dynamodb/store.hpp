// distlock/dynamodb/store.hpp: DynamoDB as a distlock store, through conditional
// writes.
//
// Design note. One item per resource in the table, keyed by the resource id as a
// Binary attribute (any bytes, no escaping, no collisions):
//   resource (B, key)   owner (S, hex, absent when free)   fence (N)
//   record_version mode: recordVersion (S, random hex)   leaseDuration (N, ms)
//   expiry_time mode:    expiresAt (N, ms since the Unix epoch)
// Acquiring is one UpdateItem that sets the owner and ADDs 1 to the fence, with
// ReturnValues ALL_NEW: the incremented fence is the token, so it grows with every
// acquisition. Its condition is the mode's:
//  - record_version (the default, AWS's lock client's rule): the item has no owner,
//    or (once this lock() call has seen the same recordVersion for a whole
//    leaseDuration on its own monotonic clock) still carries that version. A refused
//    attempt reads the item (consistent GetItem) and the claim keeps the sighting
//    (acquire.hpp). Heartbeats write a new version. No clock of day is trusted.
//  - expiry_time: the item has no owner or its expiresAt is in the past by the
//    acquirer's clock, less clock_skew_margin.
// Extending is conditional on the owner (owner tokens are unique per acquisition, so
// this is the version check of AWS's client without its flaw: a heartbeat whose
// reply was lost does not make the next one fail); in expiry_time mode also on an
// expiry not yet passed, so that an expired lock is never revived. Releasing clears
// the owner and the mode's attributes under `#o = :o` and never deletes the item
// (after a delete the counter would start again at 1); revoking is the same update
// conditional on the fence instead of the owner. Listing is a consistent Scan
// filtered on an owner and the prefix, read page after page. `owner` is a reserved
// word: names go through ExpressionAttributeNames. JSON is built with nlohmann::json,
// never by concatenation, and replies are read by detail/replies.hpp, where whatever
// the server sends is a value or an error code, never an exception.
//
// Shared grants (a shared mutex's readers, a semaphore's permits) live in the same
// item, beside the exclusive holder, which a shared mutex's writer is: a map of
// sharers, the permit count, a waiting writer's intent and a revision. A grant or an
// intent is a consistent GetItem and one UpdateItem conditional on the state read;
// detail/shared.hpp computes the step and says how.
//
// dialect::aws (detail/aws.hpp names the items): the table is AWS's Java lock
// client's, and distlock follows that client's rules on it, so that both exclude each
// other. Acquiring: one PutItem of the whole item (ownerName = the owner token,
// recordVersionNumber = a new UUID, leaseDuration = the TTL in ms, as a string) under
// `attribute_not_exists(#pk) OR #ir = :ir`, or, once this lock() call has seen one
// record version for a whole leaseDuration on its own monotonic clock, `OR #rvn =
// :seen` (the AWS client's three cases, one condition); a refused attempt reads the
// item and keeps the sighting, as record_version mode does. Then the fence: (1) the
// PutItem takes the item; (2) an UpdateItem ADDs 1 to the resource's fence item,
// ReturnValues UPDATED_NEW, giving f; (3) an UpdateItem stamps f (and fenceOwner) into
// the lock item under `#on = :o AND #rvn = :v`, the owner and version written in (1).
// The grant is returned only when (3) succeeds. Fences stay monotonic among distlock
// grants: a grant that ended before this one began drew its fence before its end,
// which came before our PutItem, which came before our draw; a grant that began after
// our PutItem replaced our item (with its owner and version), so our (3) fails and the
// attempt counts as refused. Heartbeats (extend) write a new UUID and the lease under
// `attribute_exists(#pk) AND #on = :o`; releasing is a DeleteItem under the same
// condition (the AWS client's default release; owner tokens are unique per grant, so
// the owner alone names the grant, and a heartbeat whose reply was lost does not make
// the release fail); revoking is a DeleteItem conditional on the stamped fence and
// fenceOwner = ownerName. Shared grants are refused (the AWS client has none).
//
// Elections: the leader's value lives in the lock item, a Binary (any bytes) beside the
// fence it was proclaimed with (leaderValue, leaderEpoch; under dialect::aws the AWS
// client's `data`, so that its getLock returns it). Proclaiming is one UpdateItem
// conditional on the owner, the fence and a live lease; leader() is a consistent
// GetItem that reports the value only when its epoch is the holder's fence. An
// acquisition, a release and a revocation remove the value: it goes with its grant.
//
// Every request goes over the transport engine (HTTP/1.1, keep-alive, reconnect),
// signed with SigV4; a response's x-amz-crc32, when present, is checked.
#pragma once

#include <distlock/backend.hpp>
#include <distlock/aws/sigv4.hpp>
#include <distlock/util/base64.hpp>
#include <distlock/backend/strand.hpp>
#include <distlock/dynamodb/acquire.hpp>
#include <distlock/dynamodb/config.hpp>
#include <distlock/dynamodb/detail/aws.hpp>
#include <distlock/dynamodb/detail/replies.hpp>
#include <distlock/dynamodb/detail/shared.hpp>
#include <distlock/dynamodb/error.hpp>
#include <distlock/http/parser.hpp>
#include <distlock/policy/acquire.hpp>
#include <distlock/transport/engine.hpp>

#include <nlohmann/json.hpp>

#include <asio/any_io_executor.hpp>
#include <asio/strand.hpp>

#include <algorithm>
#include <array>
#include <charconv>
#include <chrono>
#include <ctime>
#include <functional>
#include <limits>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace distlock::dynamodb {

namespace detail {

using distlock::util::base64;

/// CRC-32 (IEEE 802.3, as x-amz-crc32 carries it).
inline std::uint32_t crc32(std::string_view data)
{
    static const auto table = [] {
        std::array<std::uint32_t, 256> t{};
        for (std::uint32_t i = 0; i < 256; ++i) {
            std::uint32_t c = i;
            for (int k = 0; k < 8; ++k)
                c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
            t[i] = c;
        }
        return t;
    }();
    std::uint32_t c = 0xFFFFFFFFu;
    for (const unsigned char b : data)
        c = table[(c ^ b) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

/// X-Amz-Date for `t` (UTC).
inline std::string amz_date(std::chrono::system_clock::time_point t)
{
    const std::time_t secs = std::chrono::system_clock::to_time_t(t);
    std::tm utc{};
    gmtime_r(&secs, &utc);
    char buf[17];
    std::strftime(buf, sizeof buf, "%Y%m%dT%H%M%SZ", &utc);
    return buf;
}

inline std::int64_t epoch_ms(std::chrono::system_clock::time_point t)
{
    return std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
}

} // namespace detail

/// A DynamoDB table used as a lock store. Models conditional_write_store,
/// owner_checked_store, inspectable_store, enumerable_store, revocable_store,
/// shared_lease_store and electing_store; its default acquisition policy is acquire_item, and that of a
/// shared mutex or a semaphore acquire_shared_item.
///
/// \par Thread safety
/// Safe to use from several threads: the connection's state lives on a strand.
///
/// \par Object lifetimes
/// Every operation owns the connection it uses once started, so the store may be
/// destroyed while one is in flight (it completes with an error). Leases and lock()
/// calls reach the store through its lifetime: after it is destroyed they find it
/// closed and report errc::store_unavailable. close() finishes the releases still
/// pending, then closes the connection, so io.run() returns.
// Used through backend::store_shell (see there why stores are templates).
template <class Unused = void>
class basic_store : public backend::store_base<config> {
    using base = backend::store_base<config>;

public:
    using default_acquire_policy = acquire_item;
    using default_shared_acquire_policy = acquire_shared_item;

    /// Throws std::system_error (errc::invalid_argument) when the TLS settings cannot
    /// be loaded; connecting happens on first use.
    basic_store(executor_type ex, config cfg);

    duration operation_timeout() const noexcept { return saturating_add(cfg_.connect_timeout, cfg_.request_timeout); }

    /// Closes the connection; the next request connects again.
    void disconnect() { engine_->close(); }

    // -- Store primitives (distlock/store.hpp) --------------------------------------

    /// Takes the lock when it is free (in expiry_time mode also when expired; with
    /// `expected_version`, when the item still carries that fence); the new fence is
    /// the token. In record_version mode a lock that is held is never taken over
    /// here: take() does that, after watching it.
    awaitable<result<fence_token>> conditional_write(std::string_view resource, const owner_token& owner,
                                                     duration ttl, std::optional<fence_token> expected_version,
                                                     diagnostics* diag = nullptr)
    {
        if (auto ec = check(resource, ttl))
            return backend::failed<fence_token>(ec);
        if (cfg_.dialect == dialect::aws) {
            // A takeover by fence would bypass the AWS client's rule (a whole lease of
            // watching): not offered.
            if (expected_version)
                return backend::failed<fence_token>(refused_by_dialect(
                    "dialect=aws takes a held lock over only after watching its record version for a whole "
                    "lease (the AWS lock client's rule), never by its fence",
                    diag));
            return aws_acquired(aws_take(resource, owner, ttl, nullptr, diag));
        }
        auto body = grant(resource, owner, ttl);
        auto& values = body["ExpressionAttributeValues"];
        if (expected_version) {
            // A marked grant is not taken over by its fence while its tombstone would
            // outlast it (in record_version mode: at all, nothing here watches it).
            values[":f"] = {{"N", std::to_string(*expected_version)}};
            if (cfg_.mode == lease_mode::expiry_time) {
                body["ConditionExpression"] = "fence = :f AND (attribute_not_exists(lockDelay) OR delayUntil < :now)";
                values[":now"] = {{"N", std::to_string(detail::epoch_ms(wall_now() - cfg_.clock_skew_margin))}};
            } else {
                body["ConditionExpression"] = "fence = :f AND attribute_not_exists(lockDelay)";
            }
        } else {
            set_free_condition(body);
        }
        return answered_fence(
            written_or_refused(engine_, signer(), body.dump(), cfg_.table, std::string{resource}, cfg_.mode,
                               cfg_.wall_clock, cfg_.clock_skew_margin, expected_version, diag),
            diag);
    }

    /// One attempt of acquire_item: takes the lock if free (or taken over by the
    /// mode's rule), else says until when it is held as far as this client knows.
    /// `seen` is the claim's memory of the holder's record version (record_version
    /// mode), updated here; it must outlive the operation.
    awaitable<result<answer>> take(std::string_view resource, const owner_token& owner, duration ttl,
                                   std::optional<sighting>& seen, diagnostics* diag = nullptr)
    {
        if (auto ec = check(resource, ttl))
            return backend::failed<answer>(ec);
        if (cfg_.dialect == dialect::aws)
            return aws_take(resource, owner, ttl, &seen, diag);
        if (cfg_.mode == lease_mode::expiry_time) {
            auto body = grant(resource, owner, ttl);
            set_free_condition(body);
            return written_or_refused(engine_, signer(), body.dump(), cfg_.table, std::string{resource}, cfg_.mode,
                                      cfg_.wall_clock, cfg_.clock_skew_margin, std::nullopt, diag);
        }
        auto body = grant(resource, owner, ttl);
        std::string condition = "(attribute_not_exists(#o) AND attribute_not_exists(lockDelay))";
        if (seen && clock::now() - seen->seen_at >= seen->lease + seen->delay) {
            // Unchanged for a whole lease duration: its holder stopped heartbeating (and,
            // marked, for its lock-delay more: its tombstone is over).
            condition += " OR #v = :seen";
            body["ExpressionAttributeValues"][":seen"] = {{"S", seen->version}};
        }
        body["ConditionExpression"] = std::move(condition);
        return take_or_watch(engine_, signer(), body.dump(), cfg_.table, std::string{resource}, ttl, seen, diag);
    }

    awaitable<result<void>> extend(std::string_view resource, const owner_token& owner, duration ttl,
                                   diagnostics* diag = nullptr)
    {
        if (auto ec = check(resource, ttl))
            return backend::failed<void>(ec);
        if (cfg_.dialect == dialect::aws) {
            // The AWS client's heartbeat (sendHeartbeat): a new version and the lease.
            auto body = aws_by_owner(resource, owner);
            body["UpdateExpression"] = "SET #ld = :ld, #rvn = :newRvn";
            body["ExpressionAttributeNames"]["#ld"] = detail::aws::lease_duration;
            body["ExpressionAttributeNames"]["#rvn"] = detail::aws::record_version_number;
            body["ExpressionAttributeValues"][":ld"] = {{"S", std::to_string(millis(ttl))}};
            body["ExpressionAttributeValues"][":newRvn"] = {{"S", new_record_version()}};
            return owned(call("UpdateItem", std::move(body), diag));
        }
        nlohmann::json body = {
            {"TableName", cfg_.table},
            {"Key", key(resource)},
            {"ExpressionAttributeNames", {{"#o", "owner"}}},
            {"ExpressionAttributeValues", {{":o", {{"S", owner.to_hex()}}}}},
        };
        auto& names = body["ExpressionAttributeNames"];
        auto& values = body["ExpressionAttributeValues"];
        if (cfg_.mode == lease_mode::expiry_time) {
            const auto now = detail::epoch_ms(wall_now());
            // A marked grant's tombstone moves with its expiry (an unmarked one's
            // delayUntil is its expiry, and means nothing without lockDelay).
            body["UpdateExpression"] = "SET expiresAt = :e, delayUntil = if_not_exists(lockDelay, :zero) + :e";
            body["ConditionExpression"] = "#o = :o AND expiresAt >= :now";
            values[":e"] = {{"N", std::to_string(now + millis(ttl))}};
            values[":now"] = {{"N", std::to_string(now)}};
            values[":zero"] = {{"N", "0"}};
        } else {
            // A new version: waiters watching the old one start watching again.
            body["UpdateExpression"] = "SET #v = :v, #l = :l";
            body["ConditionExpression"] = "#o = :o";
            names["#v"] = "recordVersion";
            names["#l"] = "leaseDuration";
            values[":v"] = {{"S", owner_token::generate().to_hex()}};
            values[":l"] = {{"N", std::to_string(millis(ttl))}};
        }
        return owned(call("UpdateItem", std::move(body), diag));
    }

    /// Clears the owner and the mode's attributes if `owner` holds the lock; the item
    /// and its fence stay.
    awaitable<result<void>> release(std::string_view resource, const owner_token& owner, diagnostics* diag = nullptr)
    {
        if (auto ec = check(resource))
            return backend::failed<void>(ec);
        if (cfg_.dialect == dialect::aws) // the AWS client's default release: the item goes
            return owned(call("DeleteItem", aws_by_owner(resource, owner), diag));
        nlohmann::json body = {
            {"TableName", cfg_.table},
            {"Key", key(resource)},
            {"UpdateExpression", "REMOVE #o, expiresAt, #v, #l, leaderValue, leaderEpoch, lockDelay, delayUntil"},
            {"ConditionExpression", "#o = :o"},
            {"ExpressionAttributeNames", {{"#o", "owner"}, {"#v", "recordVersion"}, {"#l", "leaseDuration"}}},
            {"ExpressionAttributeValues", {{":o", {{"S", owner.to_hex()}}}}},
        };
        return owned(call("UpdateItem", std::move(body), diag));
    }

    /// Reads the lock without taking it (a strongly consistent GetItem).
    awaitable<result<lock_info>> read(std::string_view resource, diagnostics* diag = nullptr)
    {
        if (auto ec = check(resource))
            return backend::failed<lock_info>(ec);
        if (cfg_.dialect == dialect::aws)
            return aws_inspected(engine_, signer(), cfg_.table, aws_key(detail::aws::lock_name(resource)),
                                 aws_key(detail::aws::fence_name(resource)), diag);
        nlohmann::json body = {{"TableName", cfg_.table}, {"Key", key(resource)}, {"ConsistentRead", true}};
        return inspected(call("GetItem", std::move(body), diag), cfg_.mode, wall_now(), diag);
    }

    /// The locks held now whose resource id begins with `prefix`, sorted by id
    /// (enumerable_store): a strongly consistent Scan of the table, filtered by the
    /// server on an owner and the prefix, read page after page (LastEvaluatedKey) to
    /// the end; each item is held or not as read() would say. A Scan reads the whole
    /// table whatever the prefix: its cost grows with the table, not the listing.
    awaitable<result<std::vector<lock_listing>>> list(std::string_view prefix, diagnostics* diag = nullptr)
    {
        if (auto ec = settings_valid())
            return backend::failed<std::vector<lock_listing>>(ec);
        if (cfg_.dialect == dialect::aws) {
            // Held: an owner and no isReleased. Names are decoded here (an encoded id
            // has no prefix the server could match), so the prefix is filtered here.
            nlohmann::json body = {
                {"TableName", cfg_.table},
                {"ConsistentRead", true},
                {"ProjectionExpression", "#pk, #on, #rvn, #f, #fo"},
                {"ExpressionAttributeNames",
                 {{"#pk", cfg_.key_attribute},
                  {"#on", detail::aws::owner_name},
                  {"#rvn", detail::aws::record_version_number},
                  {"#f", detail::aws::fence},
                  {"#fo", detail::aws::fence_owner},
                  {"#ir", detail::aws::is_released}}},
                {"FilterExpression", "attribute_exists(#on) AND attribute_not_exists(#ir)"},
            };
            if (cfg_.scan_limit > 0)
                body["Limit"] = cfg_.scan_limit;
            return aws_scanned(engine_, signer(), cfg_.wall_clock, std::move(body), cfg_.key_attribute,
                               std::string{prefix}, diag);
        }
        nlohmann::json body = {
            {"TableName", cfg_.table},
            {"ConsistentRead", true},
            {"ProjectionExpression", "#r, #o, fence, expiresAt, #v"},
            {"ExpressionAttributeNames", {{"#r", "resource"}, {"#o", "owner"}, {"#v", "recordVersion"}}},
            {"FilterExpression", "attribute_exists(#o)"},
        };
        // DynamoDB refuses an empty value, and every id starts with the empty prefix.
        if (!prefix.empty()) {
            body["FilterExpression"] = "attribute_exists(#o) AND begins_with(#r, :p)";
            body["ExpressionAttributeValues"] = {{":p", {{"B", util::base64(prefix)}}}};
        }
        if (cfg_.scan_limit > 0)
            body["Limit"] = cfg_.scan_limit;
        return scanned(engine_, signer(), cfg_.wall_clock, std::move(body), std::string{prefix}, cfg_.mode, diag);
    }

    /// Frees the lock on `resource` if it is still the grant with `fence` and held as
    /// read() says (in expiry_time mode: not expired), as a release does; else
    /// errc::not_owner, the item untouched (revocable_store). One conditional
    /// UpdateItem: the check and the write are one step on the server. The item keeps
    /// its fence; the holder's next heartbeat, conditional on its owner, fails and its
    /// lease is lost. Waiters poll, as after any release.
    awaitable<result<void>> revoke(std::string_view resource, fence_token fence, diagnostics* diag = nullptr)
    {
        if (auto ec = check(resource))
            return backend::failed<void>(ec);
        if (cfg_.dialect == dialect::aws) {
            // The grant's fence, stamped by the holder that holds it now; released
            // items and foreign holders have none.
            nlohmann::json body = {
                {"TableName", cfg_.table},
                {"Key", aws_key(detail::aws::lock_name(resource))},
                {"ConditionExpression",
                 "attribute_exists(#pk) AND attribute_not_exists(#ir) AND #f = :f AND #fo = #on"},
                {"ExpressionAttributeNames",
                 {{"#pk", cfg_.key_attribute},
                  {"#ir", detail::aws::is_released},
                  {"#f", detail::aws::fence},
                  {"#fo", detail::aws::fence_owner},
                  {"#on", detail::aws::owner_name}}},
                {"ExpressionAttributeValues", {{":f", {{"N", std::to_string(fence)}}}}},
            };
            // An unmarked grant goes with its item. A marked one ends as an expiry: its
            // holder's name and fence go (its heartbeats fail), the mark stays, and a new
            // version of no lease is watched by distlock waiters for the delay (an AWS
            // client takes it over at once: it knows no lock-delay).
            auto unmarked = body;
            unmarked["ConditionExpression"] = body["ConditionExpression"].get<std::string>() +
                                              " AND attribute_not_exists(#d)";
            unmarked["ExpressionAttributeNames"]["#d"] = detail::aws::lock_delay;
            auto marked = std::move(body);
            marked["ConditionExpression"] = marked["ConditionExpression"].get<std::string>() + " AND attribute_exists(#d)";
            marked["UpdateExpression"] = "SET #on = :gone, #ld = :zero, #rvn = :v REMOVE #f, #fo, #data, #le";
            auto& names = marked["ExpressionAttributeNames"];
            names["#d"] = detail::aws::lock_delay;
            names["#ld"] = detail::aws::lease_duration;
            names["#rvn"] = detail::aws::record_version_number;
            names["#data"] = detail::aws::data;
            names["#le"] = detail::aws::leader_epoch;
            auto& values = marked["ExpressionAttributeValues"];
            values[":gone"] = {{"S", "revoked " + owner_token::generate().to_hex()}};
            values[":zero"] = {{"S", "0"}};
            values[":v"] = {{"S", new_record_version()}};
            return revoked_either(call("DeleteItem", std::move(unmarked), diag),
                                  call("UpdateItem", std::move(marked), diag), diag);
        }
        // The grant ends as an expiry now would end it: an unmarked one is free at once;
        // a marked one's mark stays as its tombstone (its holder may still have writes
        // in flight), which ends a lock-delay from now, as the mode counts it.
        nlohmann::json body = {
            {"TableName", cfg_.table},
            {"Key", key(resource)},
            {"ConditionExpression", "attribute_exists(#o) AND fence = :f"},
            {"ExpressionAttributeNames", {{"#o", "owner"}, {"#v", "recordVersion"}, {"#l", "leaseDuration"}}},
            {"ExpressionAttributeValues", {{":f", {{"N", std::to_string(fence)}}}}},
        };
        auto& values = body["ExpressionAttributeValues"];
        if (cfg_.mode == lease_mode::expiry_time) {
            const auto now = std::to_string(detail::epoch_ms(wall_now()));
            body["UpdateExpression"] = "REMOVE #o, expiresAt, #v, #l, leaderValue, leaderEpoch SET delayUntil = "
                                       "if_not_exists(lockDelay, :zero) + :now";
            body["ConditionExpression"] = "attribute_exists(#o) AND fence = :f AND expiresAt >= :now";
            values[":now"] = {{"N", now}};
            values[":zero"] = {{"N", "0"}};
        } else {
            // A new version of no lease: waiters watch the tombstone for its delay.
            body["UpdateExpression"] = "REMOVE #o, expiresAt, leaderValue, leaderEpoch SET #v = :v, #l = :zero";
            values[":v"] = {{"S", owner_token::generate().to_hex()}};
            values[":zero"] = {{"N", "0"}};
        }
        return owned(call("UpdateItem", std::move(body), diag));
    }

    // -- Lock-delays (lock_delay_store) ----------------------------------------------------

    /// Marks the exclusive grant `owner` holds on `resource` with fence `fence` for a
    /// lock-delay of `delay` (lock_delay_store): one UpdateItem of the lock item that
    /// sets lockDelay (N, ms) under the owner, the fence and, in expiry_time mode, an
    /// expiry not yet passed, as proclaim() checks. In expiry_time mode it also sets
    /// delayUntil = expiresAt + lockDelay, which extensions move with the expiry; in
    /// record_version mode it writes a new record version, so that a waiter watches the
    /// marked grant afresh, for its lease and the delay. Under dialect::aws the mark is
    /// the same attribute beside the AWS client's, under the owner, the stamped fence
    /// and no isReleased. errc::not_owner when the grant is gone; a delay that is not
    /// in (0, max_wait] is refused before any I/O.
    awaitable<result<void>> arm_delay(std::string_view resource, const owner_token& owner, fence_token fence,
                                      duration delay, diagnostics* diag = nullptr)
    {
        if (auto ec = check(resource, delay))
            return backend::failed<void>(ec);
        if (fence == 0)
            return backend::failed<void>(distlock::errc::invalid_argument);
        const bool aws = cfg_.dialect == dialect::aws;
        nlohmann::json body = {
            {"TableName", cfg_.table},
            {"Key", aws ? aws_key(detail::aws::lock_name(resource)) : key(resource)},
            {"ExpressionAttributeNames", {{"#d", detail::aws::lock_delay}}},
            {"ExpressionAttributeValues",
             {{":o", {{"S", owner.to_hex()}}},
              {":f", {{"N", std::to_string(fence)}}},
              {":d", {{"N", std::to_string(millis(delay))}}}}},
        };
        auto& names = body["ExpressionAttributeNames"];
        auto& values = body["ExpressionAttributeValues"];
        if (aws) {
            // A new version: an AWS client or a distlock waiter watching the old one
            // starts again.
            body["UpdateExpression"] = "SET #d = :d, #rvn = :v";
            body["ConditionExpression"] = "#on = :o AND #fo = :o AND #f = :f AND attribute_not_exists(#ir)";
            names["#rvn"] = detail::aws::record_version_number;
            names["#on"] = detail::aws::owner_name;
            names["#fo"] = detail::aws::fence_owner;
            names["#f"] = detail::aws::fence;
            names["#ir"] = detail::aws::is_released;
            values[":v"] = {{"S", new_record_version()}};
        } else if (cfg_.mode == lease_mode::expiry_time) {
            body["UpdateExpression"] = "SET #d = :d, delayUntil = expiresAt + :d";
            body["ConditionExpression"] = "#o = :o AND fence = :f AND expiresAt >= :now";
            names["#o"] = "owner";
            values[":now"] = {{"N", std::to_string(detail::epoch_ms(wall_now()))}};
        } else {
            body["UpdateExpression"] = "SET #d = :d, #v = :v";
            body["ConditionExpression"] = "#o = :o AND fence = :f";
            names["#o"] = "owner";
            names["#v"] = "recordVersion";
            values[":v"] = {{"S", owner_token::generate().to_hex()}};
        }
        return owned(call("UpdateItem", std::move(body), diag));
    }

    // -- Elections (electing_store) -------------------------------------------------------

    /// Keeps `value` with the grant `owner` holds on `resource` whose fence is `epoch`
    /// (electing_store): one UpdateItem of the lock item that sets leaderValue (B) and
    /// leaderEpoch = epoch under the owner, the fence and, in expiry_time mode, an
    /// expiry not yet passed, as extend() checks; an empty value is leaderValue
    /// removed. Under dialect::aws the value is the AWS client's `data`, under the
    /// owner, the stamped fence and no isReleased. errc::not_owner when the grant is
    /// gone; a value longer than max_leader_value_size is refused before any I/O.
    awaitable<result<void>> proclaim(std::string_view resource, const owner_token& owner, fence_token epoch,
                                     std::string_view value, diagnostics* diag = nullptr)
    {
        if (auto ec = check(resource))
            return backend::failed<void>(ec);
        if (epoch == 0 || value.size() > max_leader_value_size)
            return backend::failed<void>(distlock::errc::invalid_argument);
        const bool aws = cfg_.dialect == dialect::aws;
        nlohmann::json body = {
            {"TableName", cfg_.table},
            {"Key", aws ? aws_key(detail::aws::lock_name(resource)) : key(resource)},
            {"ExpressionAttributeNames", {{"#val", aws ? detail::aws::data : "leaderValue"}, {"#ve", "leaderEpoch"}}},
            {"ExpressionAttributeValues", {{":o", {{"S", owner.to_hex()}}}, {":e", {{"N", std::to_string(epoch)}}}}},
        };
        auto& names = body["ExpressionAttributeNames"];
        auto& values = body["ExpressionAttributeValues"];
        // DynamoDB's Binary carries any bytes (its JSON is base64); an empty value is
        // the attribute's absence, which servers that refuse empty Binaries accept.
        if (value.empty()) {
            body["UpdateExpression"] = "SET #ve = :e REMOVE #val";
        } else {
            body["UpdateExpression"] = "SET #val = :v, #ve = :e";
            values[":v"] = {{"B", util::base64(value)}};
        }
        if (aws) {
            body["ConditionExpression"] = "#on = :o AND #fo = :o AND #f = :e AND attribute_not_exists(#ir)";
            names["#on"] = detail::aws::owner_name;
            names["#fo"] = detail::aws::fence_owner;
            names["#f"] = detail::aws::fence;
            names["#ir"] = detail::aws::is_released;
        } else if (cfg_.mode == lease_mode::expiry_time) {
            body["ConditionExpression"] = "#o = :o AND fence = :e AND expiresAt >= :now";
            names["#o"] = "owner";
            values[":now"] = {{"N", std::to_string(detail::epoch_ms(wall_now()))}};
        } else {
            body["ConditionExpression"] = "#o = :o AND fence = :e";
            names["#o"] = "owner";
        }
        return owned(call("UpdateItem", std::move(body), diag));
    }

    /// Who leads the election on `resource` (electing_store): one consistent GetItem of
    /// the lock item. The holder as read() says, its fence the epoch, and the value
    /// proclaimed with that fence (leaderEpoch); a value of an earlier grant is not
    /// reported. Under dialect::aws a holder that stamped no fence of its own (an AWS
    /// client, or a distlock grant between its PutItem and its stamp) is read with
    /// the fence item's counter as read() does, and its `data` as the value.
    awaitable<result<leader_info>> leader(std::string_view resource, diagnostics* diag = nullptr)
    {
        if (auto ec = check(resource))
            return backend::failed<leader_info>(ec);
        nlohmann::json body = {{"TableName", cfg_.table}, {"ConsistentRead", true}};
        if (cfg_.dialect == dialect::aws) {
            body["Key"] = aws_key(detail::aws::lock_name(resource));
            return aws_led(engine_, signer(), std::move(body), aws_key(detail::aws::fence_name(resource)), diag);
        }
        body["Key"] = key(resource);
        return led(call("GetItem", std::move(body), diag), cfg_.mode, wall_now(), diag);
    }

    // -- Shared grants (shared_lease_store): a shared mutex's readers and writer, a
    //    semaphore's permits ---------------------------------------------------------

    /// A shared grant (shared_lease_store): a reader (`permits` 0) unless a writer holds
    /// or waits; a permit of `permits` while fewer hold, as the lowest free slot. A
    /// consistent read and one write conditional on what it read. In record_version
    /// mode a grant whose holder stopped renewing is not dropped here (nothing is
    /// watched across calls): take_shared() does that.
    awaitable<result<answer>> put_shared(std::string_view resource, const owner_token& owner, duration ttl,
                                         std::uint32_t permits, diagnostics* diag = nullptr)
    {
        if (cfg_.dialect == dialect::aws)
            return backend::failed<answer>(no_shared_grants(diag));
        return shared_attempt(resource, ttl, nullptr, shared_step_of(owner, ttl, permits), diag);
    }

    /// An exclusive grant when nobody holds and no other waiter's intent is live; else
    /// `waiter` takes or renews the intent that keeps new readers out (shared_lease_store).
    /// In record_version mode, as put_shared(): take_exclusive() drops what is over.
    awaitable<result<answer>> put_exclusive(std::string_view resource, const owner_token& waiter,
                                            const owner_token& owner, duration ttl, diagnostics* diag = nullptr)
    {
        if (cfg_.dialect == dialect::aws)
            return backend::failed<answer>(no_shared_grants(diag));
        return shared_attempt(resource, ttl, nullptr, exclusive_step_of(waiter, owner, ttl), diag);
    }

    /// One attempt of acquire_shared_item in shared mode: put_shared(), with `seen` the
    /// claim's memory of the versions in its way (record_version mode), updated here, so
    /// that one unchanged for its lease duration is dropped. `seen` must outlive the
    /// operation.
    awaitable<result<answer>> take_shared(std::string_view resource, const owner_token& owner, duration ttl,
                                          std::uint32_t permits, std::vector<sighting>& seen,
                                          diagnostics* diag = nullptr)
    {
        if (cfg_.dialect == dialect::aws)
            return backend::failed<answer>(no_shared_grants(diag));
        return shared_attempt(resource, ttl, &seen, shared_step_of(owner, ttl, permits), diag);
    }

    /// One attempt of acquire_shared_item in exclusive mode: put_exclusive(), watching
    /// as take_shared() does.
    awaitable<result<answer>> take_exclusive(std::string_view resource, const owner_token& waiter,
                                             const owner_token& owner, duration ttl, std::vector<sighting>& seen,
                                             diagnostics* diag = nullptr)
    {
        if (cfg_.dialect == dialect::aws)
            return backend::failed<answer>(no_shared_grants(diag));
        return shared_attempt(resource, ttl, &seen, exclusive_step_of(waiter, owner, ttl), diag);
    }

    /// Renews a grant of either mode by owner: the sharer's entry (a new expiry, or a
    /// new version, as extend() does for the holder), else the exclusive holder's lock
    /// (extend()). Each is one conditional UpdateItem.
    awaitable<result<void>> extend_shared(std::string_view resource, const owner_token& owner, duration ttl,
                                          diagnostics* diag = nullptr)
    {
        if (auto ec = check(resource, ttl))
            return backend::failed<void>(ec);
        if (cfg_.dialect == dialect::aws)
            return backend::failed<void>(no_shared_grants(diag));
        auto body = sharer_change(resource, owner);
        auto& names = body["ExpressionAttributeNames"];
        auto& values = body["ExpressionAttributeValues"];
        if (cfg_.mode == lease_mode::expiry_time) {
            // An expired entry is not revived: the permit may be another's by now.
            const auto now = detail::epoch_ms(wall_now());
            body["UpdateExpression"] = "SET #s.#me.#e = :e ADD #n :one";
            body["ConditionExpression"] = "attribute_exists(#s.#me) AND #s.#me.#e >= :now";
            names["#e"] = "expiresAt";
            values[":e"] = {{"N", std::to_string(now + millis(ttl))}};
            values[":now"] = {{"N", std::to_string(now)}};
        } else {
            // A new version: waiters watching the old one start watching again.
            body["UpdateExpression"] = "SET #s.#me.#v = :v, #s.#me.#l = :l ADD #n :one";
            body["ConditionExpression"] = "attribute_exists(#s.#me)";
            names["#v"] = "recordVersion";
            names["#l"] = "leaseDuration";
            values[":v"] = {{"S", owner_token::generate().to_hex()}};
            values[":l"] = {{"N", std::to_string(millis(ttl))}};
        }
        return sharer_or_holder(owned(call("UpdateItem", std::move(body), diag)), extend(resource, owner, ttl, diag),
                                diag);
    }

    /// Releases a grant of either mode by owner: removes the sharer's entry, else clears
    /// the exclusive holder (release()). Waiters poll, as after any release.
    awaitable<result<void>> release_shared(std::string_view resource, const owner_token& owner,
                                           diagnostics* diag = nullptr)
    {
        if (auto ec = check(resource))
            return backend::failed<void>(ec);
        if (cfg_.dialect == dialect::aws)
            return backend::failed<void>(no_shared_grants(diag));
        auto body = sharer_change(resource, owner);
        body["UpdateExpression"] = "REMOVE #s.#me ADD #n :one";
        body["ConditionExpression"] = "attribute_exists(#s.#me)";
        return sharer_or_holder(owned(call("UpdateItem", std::move(body), diag)), release(resource, owner, diag),
                                diag);
    }

    /// Gives up `waiter`'s intent, if it is still there (one conditional UpdateItem);
    /// succeeds when it is not.
    awaitable<result<void>> withdraw(std::string_view resource, const owner_token& waiter,
                                     diagnostics* diag = nullptr)
    {
        if (auto ec = check(resource))
            return backend::failed<void>(ec);
        if (cfg_.dialect == dialect::aws)
            return backend::failed<void>(no_shared_grants(diag));
        nlohmann::json body = {
            {"TableName", cfg_.table},
            {"Key", key(resource)},
            {"UpdateExpression", "REMOVE #i ADD #n :one"},
            {"ConditionExpression", "#i.#w = :w"},
            {"ExpressionAttributeNames", {{"#i", "intent"}, {"#w", "waiter"}, {"#n", "revision"}}},
            {"ExpressionAttributeValues", {{":w", {{"S", waiter.to_hex()}}}, {":one", {{"N", "1"}}}}},
        };
        return withdrawn(call("UpdateItem", std::move(body), diag), diag);
    }

    /// The exclusive holder `owner` holds on as a reader, with its fence and lease, in
    /// one conditional write: no writer comes between. errc::not_owner when it does
    /// not hold (in expiry_time mode: its expiry passed).
    awaitable<result<void>> downgrade(std::string_view resource, const owner_token& owner,
                                      diagnostics* diag = nullptr)
    {
        if (auto ec = check(resource))
            return backend::failed<void>(ec);
        if (cfg_.dialect == dialect::aws)
            return backend::failed<void>(no_shared_grants(diag));
        shared_stepper step = [owner = owner.to_hex()](const detail::shared_item& item, const detail::step_clock& c,
                                                       const std::vector<sighting>&, const std::string&) {
            return detail::step_downgrade(item, owner, c);
        };
        // The lease stays as it is: no TTL of its own.
        return downgraded(stepped(engine_, signer(), cfg_.wall_clock, cfg_.table, std::string{resource}, cfg_.mode,
                                  cfg_.clock_skew_margin, duration::zero(), nullptr, std::move(step), diag));
    }

    /// Creates the table (on-demand capacity) if it does not exist, and waits until
    /// it is ACTIVE (bounded by `within`). For tests and first use; production tables
    /// are usually made by infrastructure code.
    awaitable<result<void>> create_table(duration within = std::chrono::seconds{30}, diagnostics* diag = nullptr)
    {
        if (auto ec = settings_valid())
            co_return ec;
        // Looked for first: a table that is there and ACTIVE costs one read, not a
        // CreateTable (a control-plane call AWS rate-limits) refused as in use.
        nlohmann::json describe;
        describe["TableName"] = cfg_.table;
        const auto describe_body = describe.dump();
        {
            diagnostics looked;
            auto described = co_await request(engine_, signer(), std::string{"DescribeTable"}, describe_body, &looked);
            if (described) {
                const auto status = detail::decode_table_status(described.value(), &looked);
                if (status && status.value() == "ACTIVE")
                    co_return success();
            }
        }
        // dialect::aws: the table of the AWS client's createLockTableInDynamoDB (a String
        // hash key, no sort key), billed on demand.
        const bool aws = cfg_.dialect == dialect::aws;
        const std::string key_name = aws ? cfg_.key_attribute : std::string{"resource"};
        nlohmann::json create = {
            {"TableName", cfg_.table},
            {"AttributeDefinitions", {{{"AttributeName", key_name}, {"AttributeType", aws ? "S" : "B"}}}},
            {"KeySchema", {{{"AttributeName", key_name}, {"KeyType", "HASH"}}}},
            {"BillingMode", "PAY_PER_REQUEST"},
        };
        diagnostics words;
        auto made = co_await request(engine_, signer(), std::string{"CreateTable"}, create.dump(), &words);
        const bool exists = words.server_message().find("ResourceInUseException") != std::string_view::npos;
        if (!made && !exists) {
            if (diag)
                *diag = std::move(words);
            co_return made.error();
        }
        const auto until = clock::now() + within;
        for (;;) {
            auto described = co_await request(engine_, signer(), std::string{"DescribeTable"}, describe_body, diag);
            if (!described)
                co_return described.error();
            const auto status = detail::decode_table_status(described.value(), diag);
            if (!status)
                co_return status.error();
            if (status.value() == "ACTIVE") {
                if (diag)
                    diag->clear();
                co_return success();
            }
            if (clock::now() >= until)
                co_return distlock::errc::timeout;
            timer t{co_await asio::this_coro::executor, std::chrono::milliseconds{50}};
            (void)co_await t.async_wait(distlock::backend::as_tuple_awaitable<Unused>());
        }
    }

    /// A write to the user's own item (`table`, `key` in DynamoDB JSON) that only a
    /// holder with a token at least as new as any written before can make: the item
    /// keeps the last token in `fence_attribute`, and the update runs under
    /// `attribute_not_exists(fence) OR fence <= :token`, setting it to the token.
    /// `assignments` is the SET clause's list without the keyword ("balance = :b,
    /// note = :n"), with `names` and `values` as ExpressionAttributeNames/Values (the
    /// helper's own are `#distlock_f` and `:distlock_t`). errc::stale_fence when a newer
    /// holder has written: the data's own store shuts out a holder that lost its
    /// lease without knowing (docs/dynamodb.md).
    awaitable<result<void>> fenced_update(std::string table, nlohmann::json key, fence_token token,
                                          std::string assignments, nlohmann::json names = nlohmann::json::object(),
                                          nlohmann::json values = nlohmann::json::object(),
                                          std::string fence_attribute = "fence", diagnostics* diag = nullptr)
    {
        if (auto ec = settings_valid())
            return backend::failed<void>(ec);
        if (names.is_null()) // `{}` from the caller
            names = nlohmann::json::object();
        if (values.is_null())
            values = nlohmann::json::object();
        if (token == 0 || assignments.empty() || fence_attribute.empty() || !key.is_object() || key.empty() ||
            !names.is_object() || !values.is_object() || names.contains("#distlock_f") ||
            values.contains(":distlock_t"))
            return backend::failed<void>(distlock::errc::invalid_argument);
        names["#distlock_f"] = std::move(fence_attribute);
        values[":distlock_t"] = {{"N", std::to_string(token)}};
        nlohmann::json body = {
            {"TableName", std::move(table)},
            {"Key", std::move(key)},
            {"UpdateExpression", "SET " + assignments + ", #distlock_f = :distlock_t"},
            {"ConditionExpression", "attribute_not_exists(#distlock_f) OR #distlock_f <= :distlock_t"},
            {"ExpressionAttributeNames", std::move(names)},
            {"ExpressionAttributeValues", std::move(values)},
        };
        return fenced(call("UpdateItem", std::move(body), diag));
    }

    /// The stronger fenced write: the update of the user's item (`table`, `key`, as for
    /// fenced_update()) and a check of this store's lock item for `resource`, in one
    /// TransactWriteItems, so that the write is applied only while the lock is held
    /// and its current fence is `token`. A holder whose lock was taken over is shut out
    /// even when its write lands before the new holder's first one (fenced_update()'s
    /// "fence <= token" lets that write in), which a read-modify-write needs; in
    /// expiry_time mode with clocks apart, where two holders can overlap, it is the
    /// check that keeps the data consistent. errc::stale_fence when the check fails.
    /// The item need not carry a fence attribute. Needs real DynamoDB (or a server
    /// with transactions; dynalite has none) and dynamodb:ConditionCheckItem on the
    /// lock table.
    awaitable<result<void>> guarded_update(std::string_view resource, fence_token token, std::string table,
                                           nlohmann::json key, std::string assignments,
                                           nlohmann::json names = nlohmann::json::object(),
                                           nlohmann::json values = nlohmann::json::object(),
                                           diagnostics* diag = nullptr)
    {
        if (auto ec = check(resource))
            return backend::failed<void>(ec);
        if (names.is_null())
            names = nlohmann::json::object();
        if (values.is_null())
            values = nlohmann::json::object();
        if (token == 0 || table.empty() || assignments.empty() || !key.is_object() || key.empty() ||
            !names.is_object() || !values.is_object())
            return backend::failed<void>(distlock::errc::invalid_argument);
        nlohmann::json update = {{"TableName", std::move(table)},
                                 {"Key", std::move(key)},
                                 {"UpdateExpression", "SET " + assignments}};
        if (!names.empty())
            update["ExpressionAttributeNames"] = std::move(names);
        if (!values.empty())
            update["ExpressionAttributeValues"] = std::move(values);
        nlohmann::json lock_check = {
            {"TableName", cfg_.table},
            {"Key", basic_store::key(resource)},
            {"ConditionExpression", "attribute_exists(#o) AND fence = :t"},
            {"ExpressionAttributeNames", {{"#o", "owner"}}},
            {"ExpressionAttributeValues", {{":t", {{"N", std::to_string(token)}}}}},
        };
        if (cfg_.dialect == dialect::aws) {
            lock_check["Key"] = aws_key(detail::aws::lock_name(resource));
            lock_check["ConditionExpression"] = "attribute_exists(#on) AND attribute_not_exists(#ir) AND #f = :t AND "
                                                "#fo = #on";
            lock_check["ExpressionAttributeNames"] = {{"#on", detail::aws::owner_name},
                                                      {"#ir", detail::aws::is_released},
                                                      {"#f", detail::aws::fence},
                                                      {"#fo", detail::aws::fence_owner}};
        }
        nlohmann::json body = {
            {"TransactItems", nlohmann::json::array({{{"ConditionCheck", lock_check}}, {{"Update", std::move(update)}}})}};
        return fenced(call("TransactWriteItems", std::move(body), diag));
    }

    /// One DynamoDB API call (`operation` is "GetItem", "Query", ...) on the store's
    /// connection, signed; the response's JSON. Error answers are errors, with the
    /// server's words in `diag` (a failed condition is distlock::errc::contended).
    awaitable<result<nlohmann::json>> execute(std::string_view operation, nlohmann::json body,
                                              diagnostics* diag = nullptr)
    {
        if (auto ec = settings_valid())
            return backend::failed<nlohmann::json>(ec);
        return request(engine_, signer(), std::string{operation}, body.dump(), diag);
    }

private:
    using engine_type = transport::engine<http::codec>;
    using engine_ptr = std::shared_ptr<engine_type>;

    // What signing needs, copied into each request's coroutine.
    struct signing {
        std::string host_header;
        std::string region;
        dynamodb::credentials creds;
        std::chrono::system_clock::time_point date;
    };

    signing signer() const
    {
        const bool default_port = cfg_.tls ? cfg_.port == 443 : cfg_.port == 80;
        return {backend::authority(cfg_.host, cfg_.port, default_port), region_, cfg_.credentials, wall_now()};
    }

    std::chrono::system_clock::time_point wall_now() const
    {
        return cfg_.wall_clock ? cfg_.wall_clock() : std::chrono::system_clock::now();
    }

    // The UpdateItem of an acquisition, without its condition: owner, the mode's
    // attributes, the fence incremented and returned.
    nlohmann::json grant(std::string_view resource, const owner_token& owner, duration ttl) const
    {
        nlohmann::json body = {
            {"TableName", cfg_.table},
            {"Key", key(resource)},
            {"ExpressionAttributeNames", {{"#o", "owner"}}},
            {"ExpressionAttributeValues", {{":o", {{"S", owner.to_hex()}}}, {":one", {{"N", "1"}}}}},
            {"ReturnValues", "ALL_NEW"},
        };
        auto& names = body["ExpressionAttributeNames"];
        auto& values = body["ExpressionAttributeValues"];
        if (cfg_.mode == lease_mode::expiry_time) {
            body["UpdateExpression"] =
                "SET #o = :o, expiresAt = :e REMOVE leaderValue, leaderEpoch, lockDelay, delayUntil ADD fence :one";
            values[":e"] = {{"N", std::to_string(detail::epoch_ms(wall_now()) + millis(ttl))}};
        } else {
            body["UpdateExpression"] =
                "SET #o = :o, #v = :v, #l = :l REMOVE expiresAt, leaderValue, leaderEpoch, lockDelay, delayUntil ADD "
                "fence :one";
            names["#v"] = "recordVersion";
            names["#l"] = "leaseDuration";
            values[":v"] = {{"S", owner_token::generate().to_hex()}};
            values[":l"] = {{"N", std::to_string(millis(ttl))}};
        }
        return body;
    }

    static std::int64_t millis(duration d) { return std::chrono::ceil<std::chrono::milliseconds>(d).count(); }

    // The condition of an acquisition of a lock that is free by the mode's rule, with no
    // tombstone in the way: record_version mode, no owner and no mark (a marked grant
    // is taken over only by its version, once watched: take()); expiry_time mode, no
    // owner or an expiry past, and no mark or its delayUntil past, each less the clock
    // skew margin.
    void set_free_condition(nlohmann::json& body) const
    {
        if (cfg_.mode == lease_mode::expiry_time) {
            body["ConditionExpression"] = "(attribute_not_exists(#o) OR expiresAt < :now) AND "
                                          "(attribute_not_exists(lockDelay) OR delayUntil < :now)";
            body["ExpressionAttributeValues"][":now"] = {
                {"N", std::to_string(detail::epoch_ms(wall_now() - cfg_.clock_skew_margin))}};
        } else {
            body["ConditionExpression"] = "attribute_not_exists(#o) AND attribute_not_exists(lockDelay)";
        }
    }

    // -- dialect::aws -------------------------------------------------------------------

    nlohmann::json aws_key(std::string name) const { return {{cfg_.key_attribute, {{"S", std::move(name)}}}}; }

    // A write to `resource`'s lock item conditional on its holder being `owner` (the
    // body of a release; a heartbeat adds its update).
    nlohmann::json aws_by_owner(std::string_view resource, const owner_token& owner) const
    {
        return {
            {"TableName", cfg_.table},
            {"Key", aws_key(detail::aws::lock_name(resource))},
            {"ConditionExpression", "attribute_exists(#pk) AND #on = :on"},
            {"ExpressionAttributeNames", {{"#pk", cfg_.key_attribute}, {"#on", detail::aws::owner_name}}},
            {"ExpressionAttributeValues", {{":on", {{"S", owner.to_hex()}}}}},
        };
    }

    static std::string new_record_version() { return detail::aws::uuid_from_hex(owner_token::generate().to_hex()); }

    static std::error_code refused_by_dialect(std::string why, diagnostics* diag)
    {
        if (diag)
            diag->set_client_message(std::move(why));
        return distlock::errc::invalid_argument;
    }

    static std::error_code no_shared_grants(diagnostics* diag)
    {
        return refused_by_dialect("dialect=aws: AWS's lock client has no shared grants (a shared mutex's readers, "
                                  "a semaphore's permits), so none is offered on its table: it would not exclude "
                                  "that client",
                                  diag);
    }

    // What one acquisition of dialect::aws writes, owned by its coroutine.
    struct aws_grant {
        std::string table;
        std::string key_attribute;
        nlohmann::json lock_key;
        nlohmann::json fence_key;
        std::string owner;   ///< ownerName: the owner token, hex
        std::string version; ///< the recordVersionNumber the PutItem writes
        duration own_ttl{};
    };

    // One attempt: the PutItem (the whole item, as the AWS client's acquireLock writes
    // it), then the fence. With `seen` (acquire_item's memory), a refusal reads the
    // item and watches its version; without, it is answered as held.
    awaitable<result<answer>> aws_take(std::string_view resource, const owner_token& owner, duration ttl,
                                       std::optional<sighting>* seen, diagnostics* diag) const
    {
        aws_grant g{cfg_.table,
                    cfg_.key_attribute,
                    aws_key(detail::aws::lock_name(resource)),
                    aws_key(detail::aws::fence_name(resource)),
                    owner.to_hex(),
                    new_record_version(),
                    ttl};
        nlohmann::json item = g.lock_key;
        item[detail::aws::owner_name] = {{"S", g.owner}};
        item[detail::aws::lease_duration] = {{"S", std::to_string(millis(ttl))}};
        item[detail::aws::record_version_number] = {{"S", g.version}};
        nlohmann::json put = {
            {"TableName", cfg_.table},
            {"Item", std::move(item)},
            {"ExpressionAttributeNames", {{"#pk", cfg_.key_attribute}, {"#ir", detail::aws::is_released}}},
            {"ExpressionAttributeValues", {{":ir", {{"S", detail::aws::released_value}}}}},
        };
        // The AWS client's three cases in one condition: no item; a released one; one
        // whose version this call has seen unchanged for its whole lease.
        std::string condition = "attribute_not_exists(#pk) OR #ir = :ir";
        if (seen && *seen && clock::now() - (*seen)->seen_at >= (*seen)->lease + (*seen)->delay) {
            condition += " OR #rvn = :seen";
            put["ExpressionAttributeNames"]["#rvn"] = detail::aws::record_version_number;
            put["ExpressionAttributeValues"][":seen"] = {{"S", (*seen)->version}};
        }
        put["ConditionExpression"] = std::move(condition);
        return aws_acquire(engine_, signer(), std::move(g), put.dump(), seen, diag);
    }

    static awaitable<result<answer>> aws_acquire(engine_ptr engine, signing s, aws_grant g, std::string put,
                                                 std::optional<sighting>* seen, diagnostics* diag)
    {
        namespace aws = detail::aws;
        // (1) The lock item.
        auto wrote = co_await request(engine, s, std::string{"PutItem"}, std::move(put), diag);
        if (!wrote) {
            if (wrote.error() != distlock::errc::contended)
                co_return wrote.error();
            if (diag)
                diag->clear(); // the refusal is the answer, not a failure
            if (!seen)
                co_return answer::held();
            co_return co_await aws_watch(std::move(engine), std::move(s), std::move(g), *seen, diag);
        }
        if (seen)
            seen->reset();
        // It is ours from here: a failure leaves the caller to give it back by owner.
        const auto ours = [diag](std::error_code ec) -> std::error_code {
            if (ec == condition::maybe_applied)
                return ec;
            if (diag)
                diag->set_client_message("dialect=aws: the lock item was written, its fence not: " + ec.message());
            return distlock::errc::outcome_unknown;
        };
        // (2) The fence draw. The fence item is shaped as a released AWS lock, so that
        // the AWS client's scans of the table can read it.
        nlohmann::json draw = {
            {"TableName", g.table},
            {"Key", g.fence_key},
            {"UpdateExpression", "SET #on = :fon, #ld = :fld, #rvn = :frvn, #ir = :ir ADD #f :one"},
            {"ExpressionAttributeNames",
             {{"#on", aws::owner_name},
              {"#ld", aws::lease_duration},
              {"#rvn", aws::record_version_number},
              {"#ir", aws::is_released},
              {"#f", aws::fence}}},
            {"ExpressionAttributeValues",
             {{":fon", {{"S", "distlock fence counter"}}},
              {":fld", {{"S", "0"}}},
              {":frvn", {{"S", "00000000-0000-4000-8000-000000000000"}}},
              {":ir", {{"S", aws::released_value}}},
              {":one", {{"N", "1"}}}}},
            {"ReturnValues", "UPDATED_NEW"},
        };
        auto drawn = co_await request(engine, s, std::string{"UpdateItem"}, draw.dump(), diag);
        if (!drawn)
            co_return ours(drawn.error());
        const auto fence = aws::decode_fence_draw(drawn.value(), diag);
        if (!fence)
            co_return ours(fence.error());
        // (3) The stamp, only on the item (1) wrote.
        nlohmann::json stamp = {
            {"TableName", g.table},
            {"Key", g.lock_key},
            {"UpdateExpression", "SET #f = :f, #fo = :on"},
            {"ConditionExpression", "#on = :on AND #rvn = :rvn"},
            {"ExpressionAttributeNames",
             {{"#f", aws::fence},
              {"#fo", aws::fence_owner},
              {"#on", aws::owner_name},
              {"#rvn", aws::record_version_number}}},
            {"ExpressionAttributeValues",
             {{":f", {{"N", std::to_string(fence.value())}}}, {":on", {{"S", g.owner}}}, {":rvn", {{"S", g.version}}}}},
        };
        auto stamped = co_await request(engine, s, std::string{"UpdateItem"}, stamp.dump(), diag);
        if (!stamped) {
            if (stamped.error() != distlock::errc::contended)
                co_return ours(stamped.error());
            if (diag)
                diag->clear(); // taken over since (1): not granted
            co_return answer::held();
        }
        co_return answer::granted(fence.value());
    }

    // A refused PutItem: the consistent read that says whose version is there,
    // remembered in `seen` (first sighting, or the same version still).
    static awaitable<result<answer>> aws_watch(engine_ptr engine, signing s, aws_grant g,
                                               std::optional<sighting>& seen, diagnostics* diag)
    {
        nlohmann::json look = {{"TableName", g.table}, {"Key", g.lock_key}, {"ConsistentRead", true}};
        auto got = co_await request(std::move(engine), std::move(s), std::string{"GetItem"}, look.dump(), diag);
        if (!got) // the write was refused for certain; the next attempt reads again
            co_return answer::held();
        const auto found = detail::aws::decode_lock_record(got.value(), diag);
        if (!found)
            co_return found.error();
        const auto& record = found.value();
        if (!record || (record->released && record->released_as_written)) {
            seen.reset(); // free since the write was refused: try again at once
            co_return answer::held(clock::now());
        }
        auto version = record->watched_version();
        const auto lease = record->lease_ms ? std::min<duration>(std::chrono::milliseconds{static_cast<std::int64_t>(
                                                                     std::min<std::uint64_t>(*record->lease_ms,
                                                                                             1ULL << 40))},
                                                                 max_wait)
                                            : g.own_ttl;
        const auto delay = record->lock_delay_ms
                               ? duration{std::chrono::milliseconds{static_cast<std::int64_t>(*record->lock_delay_ms)}}
                               : duration::zero();
        if (!seen || seen->version != version)
            seen = sighting{std::move(version), clock::now(), lease, delay};
        else {
            seen->lease = lease;
            seen->delay = delay;
        }
        co_return watched_answer(*seen);
    }

    static awaitable<result<fence_token>> aws_acquired(awaitable<result<answer>> pending)
    {
        auto got = co_await std::move(pending);
        if (!got)
            co_return got.error();
        if (!got.value().is_granted())
            co_return make_error_code(distlock::errc::contended);
        co_return got.value().fence();
    }

    // read(): the lock item, and the fence item when no distlock grant is stamped in it.
    static awaitable<result<lock_info>> aws_inspected(engine_ptr engine, signing s, std::string table,
                                                      nlohmann::json lock_key, nlohmann::json fence_key,
                                                      diagnostics* diag)
    {
        nlohmann::json look = {{"TableName", table}, {"Key", std::move(lock_key)}, {"ConsistentRead", true}};
        auto got = co_await request(engine, s, std::string{"GetItem"}, look.dump(), diag);
        if (!got)
            co_return got.error();
        const auto found = detail::aws::decode_lock_record(got.value(), diag);
        if (!found)
            co_return found.error();
        lock_info info;
        const auto& record = found.value();
        if (record && !record->released) {
            info.held = true;
            info.owner = record->owner.value_or(std::string{}).substr(0, 8);
            if (record->version)
                info.version = detail::aws::version_number(*record->version);
            if (const auto stamped = record->holder_fence()) {
                info.fence = *stamped;
                co_return info;
            }
        }
        look["Key"] = std::move(fence_key);
        auto counter = co_await request(std::move(engine), std::move(s), std::string{"GetItem"}, look.dump(), diag);
        if (!counter)
            co_return counter.error();
        const auto last = detail::aws::decode_fence_item(counter.value(), diag);
        if (!last)
            co_return last.error();
        info.fence = last.value();
        co_return info;
    }

    // leader() on an AWS-layout table: the lock item, and the fence item when the holder
    // stamped no fence of its own.
    static awaitable<result<leader_info>> aws_led(engine_ptr engine, signing s, nlohmann::json look,
                                                  nlohmann::json fence_key, diagnostics* diag)
    {
        auto got = co_await request(engine, s, std::string{"GetItem"}, look.dump(), diag);
        if (!got)
            co_return got.error();
        const auto found = detail::aws::decode_leader_record(got.value(), max_leader_value_size, diag);
        if (!found)
            co_return found.error();
        const auto& record = found.value();
        leader_info info;
        if (!record.lock || record.lock->released)
            co_return info;
        info.owner = record.lock->owner.value_or(std::string{}).substr(0, 8);
        if (const auto stamped = record.lock->holder_fence()) {
            info.epoch = *stamped;
            if (record.proclaimed())
                info.value = record.data.value_or(std::string{});
            co_return info;
        }
        // Not distlock's grant (yet): whatever an AWS client keeps in `data` is its value.
        info.value = record.data;
        look["Key"] = std::move(fence_key);
        auto counter = co_await request(std::move(engine), std::move(s), std::string{"GetItem"}, look.dump(), diag);
        if (!counter)
            co_return counter.error();
        const auto last = detail::aws::decode_fence_item(counter.value(), diag);
        if (!last)
            co_return last.error();
        info.epoch = last.value();
        co_return info;
    }

    // list() on an AWS-layout table: the Scan page after page; names decoded (fence
    // items and reserved names skipped), the prefix kept, sorted at the end.
    static awaitable<result<std::vector<lock_listing>>> aws_scanned(
        engine_ptr engine, signing s, std::function<std::chrono::system_clock::time_point()> wall_clock,
        nlohmann::json body, std::string key_attribute, std::string prefix, diagnostics* diag)
    {
        const auto wall = [&wall_clock] { return wall_clock ? wall_clock() : std::chrono::system_clock::now(); };
        std::vector<lock_listing> out;
        std::set<std::string> starts;
        for (;;) {
            s.date = wall();
            auto got = co_await request(engine, s, std::string{"Scan"}, body.dump(), diag);
            if (!got)
                co_return got.error();
            auto page = detail::aws::decode_scan_page(got.value(), key_attribute, diag);
            if (!page)
                co_return page.error();
            for (auto& found : page.value().items) {
                auto resource = detail::aws::resource_of(found.name);
                if (!resource || !resource->starts_with(prefix) || found.record.released)
                    continue;
                lock_info info;
                info.held = true;
                info.owner = found.record.owner.value_or(std::string{}).substr(0, 8);
                info.fence = found.record.holder_fence().value_or(0);
                if (found.record.version)
                    info.version = detail::aws::version_number(*found.record.version);
                out.push_back({std::move(*resource), std::move(info), std::nullopt});
            }
            if (!page.value().next_start)
                break;
            auto next = std::move(*page.value().next_start);
            if (!starts.insert(next.dump()).second) {
                if (diag) {
                    diag->set_client_message("DynamoDB Scan answer: LastEvaluatedKey names a page already read");
                    diag->set_server_message(next.dump());
                }
                co_return make_error_code(distlock::errc::protocol_error);
            }
            body["ExclusiveStartKey"] = std::move(next);
        }
        std::sort(out.begin(), out.end(),
                  [](const lock_listing& a, const lock_listing& b) { return a.resource < b.resource; });
        const auto twice = std::adjacent_find(out.begin(), out.end(), [](const lock_listing& a, const lock_listing& b) {
            return a.resource == b.resource;
        });
        if (twice != out.end()) {
            if (diag)
                diag->set_client_message("DynamoDB Scan answer: an item on two pages");
            co_return make_error_code(distlock::errc::protocol_error);
        }
        co_return out;
    }

    // One step of the shared grants: the next state of the item from the state read,
    // the time, what this call watched, and a new random version.
    using shared_stepper = std::function<detail::shared_step(const detail::shared_item&, const detail::step_clock&,
                                                             const std::vector<sighting>&, const std::string&)>;

    // How many times a step is computed again when the item changed between its read
    // and its write, before the attempt counts as contended.
    static constexpr int shared_write_tries = 8;

    static shared_stepper shared_step_of(const owner_token& owner, duration ttl, std::uint32_t permits)
    {
        return [owner = owner.to_hex(), ttl_ms = millis(ttl), permits](
                   const detail::shared_item& item, const detail::step_clock& c, const std::vector<sighting>& seen,
                   const std::string& version) {
            return detail::step_shared(item, owner, permits, ttl_ms, version, c, seen);
        };
    }

    static shared_stepper exclusive_step_of(const owner_token& waiter, const owner_token& owner, duration ttl)
    {
        return [waiter = waiter.to_hex(), owner = owner.to_hex(), ttl_ms = millis(ttl)](
                   const detail::shared_item& item, const detail::step_clock& c, const std::vector<sighting>& seen,
                   const std::string& version) {
            return detail::step_exclusive(item, waiter, owner, ttl_ms, version, c, seen);
        };
    }

    awaitable<result<answer>> shared_attempt(std::string_view resource, duration ttl, std::vector<sighting>* seen,
                                             shared_stepper step, diagnostics* diag)
    {
        if (auto ec = check(resource, ttl))
            return backend::failed<answer>(ec);
        return stepped(engine_, signer(), cfg_.wall_clock, cfg_.table, std::string{resource}, cfg_.mode,
                       cfg_.clock_skew_margin, ttl, seen, std::move(step), diag);
    }

    // The UpdateItem of a change to `owner`'s sharer entry, without its expressions.
    nlohmann::json sharer_change(std::string_view resource, const owner_token& owner) const
    {
        return {
            {"TableName", cfg_.table},
            {"Key", key(resource)},
            {"ExpressionAttributeNames", {{"#s", "sharers"}, {"#me", owner.to_hex()}, {"#n", "revision"}}},
            {"ExpressionAttributeValues", {{":one", {{"N", "1"}}}}},
        };
    }

    // Bad input is refused before any I/O. Credentials are checked once resolved
    // (the environment's are read by the constructor).
    std::error_code settings_valid() const
    {
        if (auto ec = cfg_.validate())
            return ec;
        if (cfg_.credentials.empty())
            return errc::no_credentials;
        if (!cfg_.credentials.well_formed())
            return errc::malformed_credentials;
        return {};
    }

    std::error_code check(std::string_view resource) const
    {
        if (auto ec = settings_valid())
            return ec;
        if (resource.empty() || resource.size() > max_resource_size)
            return distlock::errc::invalid_argument;
        return {};
    }
    std::error_code check(std::string_view resource, duration ttl) const
    {
        if (ttl <= duration::zero() || ttl > max_wait)
            return distlock::errc::invalid_argument;
        return check(resource);
    }

    static nlohmann::json key(std::string_view resource)
    {
        return {{"resource", {{"B", util::base64(resource)}}}};
    }

    awaitable<result<nlohmann::json>> call(const char* operation, const nlohmann::json& body, diagnostics* diag) const
    {
        return request(engine_, signer(), operation, body.dump(), diag);
    }

    // One signed POST; the response's JSON, or the error its status and __type say
    // (ConditionalCheckFailedException is errc::contended: the caller decides what
    // "the condition did not hold" means).
    static awaitable<result<nlohmann::json>> request(engine_ptr engine, signing s, std::string operation,
                                                     std::string payload, diagnostics* diag)
    {
        aws::request r{.method = "POST",
                       .path = "/",
                       .query = {},
                       .headers = {{"Host", s.host_header},
                                   {"Content-Type", "application/x-amz-json-1.0"},
                                   {"X-Amz-Date", detail::amz_date(s.date)},
                                   {"X-Amz-Target", "DynamoDB_20120810." + operation}},
                       .payload = std::move(payload)};
        if (!s.creds.session_token.empty())
            r.headers.emplace_back("X-Amz-Security-Token", s.creds.session_token);
        const aws::scope scope{r.headers[2].second, s.region, "dynamodb"};
        auto headers = r.headers;
        headers.emplace_back("Authorization",
                             aws::authorization(r, s.creds.access_key_id, s.creds.secret_access_key, scope));
        auto bytes = http::encode_request("POST", "/", headers, r.payload);
        auto got = co_await engine->exec(std::move(bytes), 1, diag);
        if (!got)
            co_return got.error();
        auto& response = got.value().front();
        if (response.closes())
            engine->close(); // the server said so: the next request connects again
        if (const auto crc = response.header("x-amz-crc32")) {
            std::uint32_t expected = 0;
            const auto [end, ec] = std::from_chars(crc->data(), crc->data() + crc->size(), expected);
            if (ec != std::errc{} || end != crc->data() + crc->size() || detail::crc32(response.body) != expected) {
                if (diag)
                    diag->set_client_message("x-amz-crc32 does not match the response body");
                co_return make_error_code(errc::bad_checksum);
            }
        }
        co_return detail::decode_response(response.status, response.body, diag);
    }

    static awaitable<result<fence_token>> acquired(awaitable<result<nlohmann::json>> pending, diagnostics* diag)
    {
        auto got = co_await std::move(pending);
        if (!got)
            co_return got.error();
        const auto fence = detail::decode_granted_fence(got.value(), diag);
        if (!fence)
            co_return fence.error();
        co_return fence.value();
    }

    // A write that takes the lock when it is free (no watching): granted, or, when
    // refused, the consistent read that says why: held (answer::held), in a tombstone
    // (answer::delayed, until when by this process's clock: the read's reply is the
    // moment its remaining time is counted from), or changed since (held, now: try
    // again). With `expected_version` (a takeover by fence) a refusal is delayed only
    // when that grant is marked. The operation owns its copies of the store's settings.
    static awaitable<result<answer>> written_or_refused(engine_ptr engine, signing s, std::string write,
                                                        std::string table, std::string resource, lease_mode mode,
                                                        std::function<std::chrono::system_clock::time_point()> wall_clock,
                                                        duration skew_margin,
                                                        std::optional<fence_token> expected_version,
                                                        diagnostics* diag)
    {
        const auto wall = [&wall_clock] { return wall_clock ? wall_clock() : std::chrono::system_clock::now(); };
        auto wrote = co_await acquired(request(engine, s, std::string{"UpdateItem"}, std::move(write), diag), diag);
        if (wrote)
            co_return answer::granted(wrote.value());
        if (wrote.error() != distlock::errc::contended)
            co_return wrote.error();
        if (diag)
            diag->clear(); // the refusal is the answer, not a failure
        nlohmann::json look = {{"TableName", std::move(table)}, {"Key", key(resource)}, {"ConsistentRead", true}};
        s.date = wall();
        auto got = co_await request(std::move(engine), std::move(s), std::string{"GetItem"}, look.dump(), diag);
        if (!got) // the write was refused for certain; the next attempt reads again
            co_return answer::held();
        const auto found = detail::decode_lock_item(got.value(), diag);
        if (!found)
            co_return found.error();
        if (!found.value())
            co_return answer::held(clock::now()); // gone since: try again
        const auto& item = *found.value();
        const detail::step_clock c{mode, detail::epoch_ms(wall()), millis(skew_margin), clock::now(), {}};
        if (expected_version) {
            if (item.fence != expected_version || !item.lock_delay)
                co_return answer::held();
            co_return answer::delayed(detail::tombstone_until(item, c, {}).value_or(c.now));
        }
        if (mode == lease_mode::expiry_time) {
            const auto held = item.owner && item.expires_at &&
                              static_cast<std::int64_t>(std::min<std::uint64_t>(*item.expires_at, 1ULL << 50)) >=
                                  c.wall_ms - c.skew_margin_ms;
            if (held)
                co_return answer::held();
            if (const auto until = detail::tombstone_until(item, c, {}))
                co_return answer::delayed(*until);
            co_return answer::held(clock::now());
        }
        if (item.owner)
            co_return answer::held();
        if (item.lock_delay) // a revoked grant's tombstone: only a watching waiter ends it
            co_return answer::delayed(detail::tombstone_until(item, c, {}).value_or(c.now));
        co_return answer::held(clock::now());
    }

    // A fence-answering primitive's result: the fence, or the refusal as an error.
    static awaitable<result<fence_token>> answered_fence(awaitable<result<answer>> pending, diagnostics* diag)
    {
        auto got = co_await std::move(pending);
        if (!got)
            co_return got.error();
        if (got.value().is_granted())
            co_return got.value().fence();
        if (got.value().is_delayed()) {
            if (diag && got.value().not_before())
                diag->set_lock_delay_until(*got.value().not_before());
            co_return make_error_code(distlock::errc::lock_delayed);
        }
        co_return make_error_code(distlock::errc::contended);
    }

    // record_version mode: the conditional write; when refused, the consistent read
    // that says whose version is there, remembered in `seen` (first sighting, or the
    // same version still). The operation owns its copies of the store's settings.
    static awaitable<result<answer>> take_or_watch(engine_ptr engine, signing s, std::string write, std::string table,
                                                   std::string resource, duration own_ttl,
                                                   std::optional<sighting>& seen, diagnostics* diag)
    {
        auto wrote = co_await acquired(request(engine, s, std::string{"UpdateItem"}, std::move(write), diag), diag);
        if (wrote) {
            seen.reset();
            co_return answer::granted(wrote.value());
        }
        if (wrote.error() != distlock::errc::contended)
            co_return wrote.error();
        if (diag)
            diag->clear(); // the refusal is the answer, not a failure
        nlohmann::json look = {{"TableName", std::move(table)}, {"Key", key(resource)}, {"ConsistentRead", true}};
        auto item = co_await request(std::move(engine), std::move(s), std::string{"GetItem"}, look.dump(), diag);
        if (!item) // the write was refused for certain; the next attempt reads again
            co_return answer::held();
        // A reply that cannot be read is the caller's protocol error (it may clean up by
        // owner token, which changes nothing here: the write was refused).
        auto found = detail::decode_lock_item(item.value(), diag);
        if (!found)
            co_return found.error();
        if (!found.value() || (!found.value()->owner && !found.value()->lock_delay)) {
            // released since the write was refused: try again at once
            seen.reset();
            co_return answer::held(clock::now());
        }
        // A marked grant (held, or revoked: its tombstone) is watched for its lease and
        // its lock-delay. An item without a version was written in expiry_time mode (a
        // misconfigured client): its owner and expiry stand in for the version, its
        // lease is ours.
        const auto& record = *found.value();
        auto version = detail::holder_version(record);
        const auto lease = detail::declared_lease(detail::holder_lease(record), own_ttl);
        const auto delay = detail::marked_delay(record);
        if (!seen || seen->version != version)
            seen = sighting{std::move(version), clock::now(), lease, delay};
        else {
            seen->lease = lease;
            seen->delay = delay;
        }
        co_return watched_answer(*seen);
    }

    // What a waiter answers while it watches a version: held for the holder's lease;
    // then, for a marked grant, delayed for its lock-delay (its tombstone).
    static answer watched_answer(const sighting& seen)
    {
        const auto now = clock::now();
        const auto lease_end = seen.seen_at + seen.lease;
        const auto end = lease_end + seen.delay;
        if (now < lease_end || now >= end)
            return answer::held(now < lease_end ? lease_end : end);
        return answer::delayed(end);
    }

    // A shared step: the consistent read, the step computed from it, and its write
    // conditional on the state read; a write refused because the item changed in
    // between is computed again from a new read, up to shared_write_tries times, then
    // the attempt is contended. `seen` is the claim's (nullptr: watched for this call
    // only). The operation owns its copies of the store's settings, and signs each
    // request at its own time.
    static awaitable<result<answer>> stepped(engine_ptr engine, signing s,
                                             std::function<std::chrono::system_clock::time_point()> wall_clock,
                                             std::string table, std::string resource, lease_mode mode,
                                             duration skew_margin, duration ttl, std::vector<sighting>* seen,
                                             shared_stepper step, diagnostics* diag)
    {
        const auto wall = [&wall_clock] { return wall_clock ? wall_clock() : std::chrono::system_clock::now(); };
        std::vector<sighting> this_call_only;
        auto& watched = seen ? *seen : this_call_only;
        const nlohmann::json look = {{"TableName", table}, {"Key", key(resource)}, {"ConsistentRead", true}};
        for (int tries = 0; tries < shared_write_tries; ++tries) {
            s.date = wall();
            auto got = co_await request(engine, s, std::string{"GetItem"}, look.dump(), diag);
            if (!got)
                co_return got.error();
            auto item = detail::decode_shared_item(got.value(), diag);
            if (!item)
                co_return item.error();
            const detail::step_clock c{mode, detail::epoch_ms(wall()), millis(skew_margin), clock::now(), ttl};
            if (mode == lease_mode::record_version)
                detail::watch(watched, item.value(), c.now, ttl);
            auto next = step(item.value(), c, watched, owner_token::generate().to_hex());
            if (!next.reply && diag && !next.refusal.empty())
                diag->set_client_message(next.refusal);
            if (!next.next)
                co_return next.reply;
            auto write = detail::shared_update(item.value(), *next.next);
            write["TableName"] = table;
            write["Key"] = key(resource);
            s.date = wall();
            auto wrote = co_await request(engine, s, std::string{"UpdateItem"}, write.dump(), diag);
            if (wrote)
                co_return next.reply;
            if (wrote.error() != distlock::errc::contended)
                co_return wrote.error();
            if (diag)
                diag->clear(); // changed since the read: read again
        }
        if (diag)
            diag->set_client_message("DynamoDB: the item changed between the read and the write of each of " +
                                     std::to_string(shared_write_tries) + " tries");
        co_return make_error_code(distlock::errc::contended);
    }

    // A grant of either mode, by owner: its sharer entry first, then the exclusive
    // holder (owner tokens are unique: at most one of them is the owner's).
    static awaitable<result<void>> sharer_or_holder(awaitable<result<void>> sharer, awaitable<result<void>> holder,
                                                    diagnostics* diag)
    {
        auto got = co_await std::move(sharer);
        if (got || got.error() != distlock::errc::not_owner)
            co_return got;
        if (diag)
            diag->clear(); // not a sharer: the answer is the holder's
        co_return co_await std::move(holder);
    }

    // A revocation of one of two forms, each conditional on its own: the first, else
    // (its condition failed) the second; not_owner when neither applies.
    static awaitable<result<void>> revoked_either(awaitable<result<nlohmann::json>> first,
                                                  awaitable<result<nlohmann::json>> second, diagnostics* diag)
    {
        auto got = co_await std::move(first);
        if (got)
            co_return success();
        if (got.error() != distlock::errc::contended)
            co_return got.error();
        if (diag)
            diag->clear();
        co_return co_await owned(std::move(second));
    }

    // A withdrawal whose intent is gone already has nothing left to do.
    static awaitable<result<void>> withdrawn(awaitable<result<nlohmann::json>> pending, diagnostics* diag)
    {
        auto got = co_await std::move(pending);
        if (!got && got.error() != distlock::errc::contended)
            co_return got.error();
        if (!got && diag)
            diag->clear();
        co_return success();
    }

    // A downgrade is its step's write; a contended one (the item kept changing) was not
    // applied.
    static awaitable<result<void>> downgraded(awaitable<result<answer>> pending)
    {
        auto got = co_await std::move(pending);
        if (!got)
            co_return got.error() == distlock::errc::contended ? make_error_code(errc::refused) : got.error();
        co_return success();
    }

    static awaitable<result<void>> fenced(awaitable<result<nlohmann::json>> pending)
    {
        auto got = co_await std::move(pending);
        if (!got)
            co_return got.error() == distlock::errc::contended ? make_error_code(distlock::errc::stale_fence)
                                                              : got.error();
        co_return success();
    }

    static awaitable<result<void>> owned(awaitable<result<nlohmann::json>> pending)
    {
        auto got = co_await std::move(pending);
        if (!got)
            co_return got.error() == distlock::errc::contended ? make_error_code(distlock::errc::not_owner)
                                                              : got.error();
        co_return success();
    }

    static awaitable<result<lock_info>> inspected(awaitable<result<nlohmann::json>> pending, lease_mode mode,
                                                  std::chrono::system_clock::time_point wall, diagnostics* diag)
    {
        auto got = co_await std::move(pending);
        if (!got)
            co_return got.error();
        const auto found = detail::decode_lock_item(got.value(), diag);
        if (!found)
            co_return found.error();
        if (!found.value())
            co_return lock_info{}; // never locked
        co_return lock_of(*found.value(), mode, wall);
    }

    static awaitable<result<leader_info>> led(awaitable<result<nlohmann::json>> pending, lease_mode mode,
                                              std::chrono::system_clock::time_point wall, diagnostics* diag)
    {
        auto got = co_await std::move(pending);
        if (!got)
            co_return got.error();
        const auto found = detail::decode_leader_item(got.value(), max_leader_value_size, diag);
        if (!found)
            co_return found.error();
        const auto& item = found.value();
        const auto lock = lock_of(item.lock, mode, wall);
        leader_info info;
        if (!lock.held)
            co_return info;
        info.epoch = lock.fence;
        info.owner = lock.owner;
        info.remaining = lock.remaining;
        if (item.value_epoch == lock.fence)
            info.value = item.value.value_or(std::string{});
        co_return info;
    }

    // What an item says of its lock, by the mode's rule, at `wall` (expiry_time).
    static lock_info lock_of(const detail::lock_item& item, lease_mode mode,
                             std::chrono::system_clock::time_point wall)
    {
        lock_info info;
        info.fence = item.fence.value_or(0);
        const auto& owner = item.owner;
        if (mode == lease_mode::record_version) {
            // Held until a waiter has watched its version for a lease: no time left
            // is known here.
            if (owner) {
                info.held = true;
                info.owner = owner->substr(0, 8);
                if (const auto& v = item.record_version; v && v->size() >= 16) {
                    fence_token n = 0;
                    const auto [end, ec] = std::from_chars(v->data(), v->data() + 16, n, 16);
                    if (ec == std::errc{} && end == v->data() + 16)
                        info.version = n;
                }
            }
            return info;
        }
        const auto& expires = item.expires_at;
        const auto now = detail::epoch_ms(wall);
        if (owner && expires && *expires <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()) &&
            static_cast<std::int64_t>(*expires) >= now) {
            info.held = true;
            info.owner = owner->substr(0, 8);
            info.remaining = std::chrono::milliseconds{
                std::min<std::int64_t>(static_cast<std::int64_t>(*expires) - now, std::int64_t{1} << 40)};
        }
        return info;
    }

    // list(): the Scan, page after page, each page's held locks kept; sorted at the
    // end (a Scan's order is the table's hash order). A page key seen before would
    // loop for ever: a protocol error. The operation owns its copies of the settings,
    // and signs each page at its own time.
    static awaitable<result<std::vector<lock_listing>>> scanned(
        engine_ptr engine, signing s, std::function<std::chrono::system_clock::time_point()> wall_clock,
        nlohmann::json body, std::string prefix, lease_mode mode, diagnostics* diag)
    {
        const auto wall = [&wall_clock] { return wall_clock ? wall_clock() : std::chrono::system_clock::now(); };
        std::vector<lock_listing> out;
        std::set<std::string> starts;
        for (;;) {
            s.date = wall();
            auto got = co_await request(engine, s, std::string{"Scan"}, body.dump(), diag);
            if (!got)
                co_return got.error();
            auto page = detail::decode_scan_page(got.value(), diag);
            if (!page)
                co_return page.error();
            const auto now = wall();
            for (auto& found : page.value().items) {
                // The server's filter is a saving, not the rule: a server may compare
                // binary ids less strictly than byte by byte.
                if (!std::string_view{found.resource}.starts_with(prefix))
                    continue;
                auto info = lock_of(found.item, mode, now);
                if (info.held)
                    out.push_back({std::move(found.resource), std::move(info), std::nullopt});
            }
            if (!page.value().next_start)
                break;
            auto next = std::move(*page.value().next_start);
            if (!starts.insert(next.dump()).second) {
                if (diag) {
                    diag->set_client_message("DynamoDB Scan answer: LastEvaluatedKey names a page already read");
                    diag->set_server_message(next.dump());
                }
                co_return make_error_code(distlock::errc::protocol_error);
            }
            body["ExclusiveStartKey"] = std::move(next);
        }
        std::sort(out.begin(), out.end(),
                  [](const lock_listing& a, const lock_listing& b) { return a.resource < b.resource; });
        // One item per key: an id twice means pages that overlap.
        const auto twice = std::adjacent_find(out.begin(), out.end(), [](const lock_listing& a, const lock_listing& b) {
            return a.resource == b.resource;
        });
        if (twice != out.end()) {
            if (diag)
                diag->set_client_message("DynamoDB Scan answer: an item on two pages");
            co_return make_error_code(distlock::errc::protocol_error);
        }
        co_return out;
    }

    std::string region_;
    engine_ptr engine_;

protected:
    ~basic_store() = default;
    void stop() noexcept;
};

template <class Unused>
basic_store<Unused>::basic_store(executor_type ex, config cfg)
    : base{std::move(ex), std::move(cfg), "distlock::dynamodb::store", true}
{
    if (cfg_.credentials.empty())
        cfg_.credentials = credentials::from_environment();
    region_ = cfg_.effective_region();
    auto tls = transport::make_tls_context(cfg_.endpoint());
    if (!tls)
        throw std::system_error{tls.error(), "distlock::dynamodb::store: TLS settings"};
    engine_ = std::make_shared<engine_type>(
        distlock::backend::make_strand(ex_), http::codec{},
        // Node (dynalite) closes idle keep-alive sockets after 5 s; AWS after longer.
        engine_type::options{cfg_.request_timeout, cfg_.endpoint().describe(), std::chrono::seconds{4}},
        [endpoint = cfg_.endpoint(), ctx = tls.value()](transport::stream& s,
                                                        std::string& diagnostic) -> awaitable<std::error_code> {
            co_return co_await s.connect(endpoint, ctx.get(), diagnostic);
        });
}

template <class Unused>
void basic_store<Unused>::stop() noexcept
{
    engine_->close();
}

/// The DynamoDB store. See basic_store for its documentation.
using store = backend::store_shell<basic_store<>>;

static_assert(conditional_write_store<store>);
static_assert(owner_checked_store<store>);
static_assert(inspectable_store<store>);
static_assert(enumerable_store<store>);
static_assert(revocable_store<store>);
static_assert(shared_lease_store<store>);
static_assert(electing_store<store>);
static_assert(lock_delay_store<store>);

} // namespace distlock::dynamodb
