// distlock/dynamodb/detail/shared.hpp: the shared grants kept in a resource's item (a
// shared mutex's readers and writer, a semaphore's permits): the step from the state
// read to the state written, and the write that makes it. Pure functions (no I/O),
// unit-tested on their own.
//
// Design note. Beside the exclusive holder's attributes (store.hpp), which a shared
// mutex's writer uses as a mutex does, the item keeps
//   sharers (M)    owner (hex) -> {slot (N), and the mode's lease: expiresAt (N), or
//                  recordVersion (S) and leaseDuration (N)}
//   permits (N)    the count every sharer agrees on (0: a shared mutex's readers),
//                  meaningful while any sharer holds
//   intent (M)     a waiting writer's: waiter (S, hex) and the mode's lease
//   revision (N)   one more with every change of sharers, permits or intent
//   lockDelay (N), delayUntil (N): the exclusive holder's lock-delay mark (store.hpp)
// A grant, an intent and a downgrade are steps: the store reads the item (consistent
// GetItem), computes the next state here, and writes it with one UpdateItem whose
// condition is the state it read, so that nothing changed in between: the revision,
// and the exclusive holder's owner, fence and lease attributes (which the mutex's own
// writes and revoke() change without a revision). A write refused because the item
// changed meanwhile is computed again from a new read. A sharer's renewal and release
// and a writer's withdrawal touch one entry each: one conditional UpdateItem that
// also adds 1 to the revision.
//
// When a grant or an intent is over is the mode's rule, as for the mutex: in
// expiry_time mode once its expiresAt is before the acquirer's clock less
// clock_skew_margin; in record_version mode once this lock() call has seen the same
// version for its whole lease duration on its monotonic clock (the sightings it keeps
// across its attempts). A step drops what is over in the write it makes. A marked
// exclusive grant that is over leaves its tombstone (tombstone_until): every grant is
// refused with answer::delayed until it is over too.
#pragma once

#include <distlock/claim.hpp>
#include <distlock/clock.hpp>
#include <distlock/dynamodb/acquire.hpp>
#include <distlock/dynamodb/config.hpp>
#include <distlock/dynamodb/detail/replies.hpp>
#include <distlock/error.hpp>
#include <distlock/options.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace distlock::dynamodb::detail {

/// What a step knows of time.
struct step_clock {
    lease_mode mode = lease_mode::record_version;
    std::int64_t wall_ms = 0;        ///< the client's clock of day, ms since the Unix epoch (after the read)
    std::int64_t skew_margin_ms = 0; ///< expiry_time: clock_skew_margin, in ms
    time_point now{};                ///< the client's monotonic clock, after the read
    duration own_ttl{};              ///< the lease of a record that declares none
};

/// The lease attributes of the exclusive holder of `item`.
inline lease_record holder_lease(const lock_item& item)
{
    return {item.expires_at, item.record_version, item.lease_duration};
}

/// The version a record is watched by in record_version mode: its record version, or
/// for a record written in expiry_time mode (a misconfigured client) its role, its
/// holder and its expiry, which stand in for it.
inline std::string watched_version(std::string_view role, std::string_view holder, const lease_record& lease)
{
    if (lease.record_version)
        return *lease.record_version;
    return std::string{role} + " " + std::string{holder} + " until " + std::to_string(lease.expires_at.value_or(0));
}

/// How long a record's holder declared its lease (record_version mode); `own_ttl`
/// for a record that declares none.
inline duration declared_lease(const lease_record& lease, duration own_ttl)
{
    if (!lease.lease_duration)
        return own_ttl;
    const auto ms = static_cast<std::int64_t>(std::min<std::uint64_t>(*lease.lease_duration, std::uint64_t{1} << 40));
    return std::min<duration>(std::chrono::milliseconds{ms}, max_wait);
}

/// The lock-delay a record's grant was marked with (0: none).
inline duration marked_delay(const lock_item& lock)
{
    return lock.lock_delay ? duration{std::chrono::milliseconds{static_cast<std::int64_t>(*lock.lock_delay)}}
                           : duration::zero();
}

/// The version the exclusive side of `lock` is watched by: its holder's, or, for a
/// marked grant revoked (no holder, the mark kept), the tombstone's.
inline std::string holder_version(const lock_item& lock)
{
    return lock.owner ? watched_version("owner", *lock.owner, holder_lease(lock))
                      : watched_version("tombstone", "", holder_lease(lock));
}

/// Remembers, in record_version mode, the version of every grant and intent of `item`
/// (its first sighting at `now`; one seen before keeps its first sighting) and
/// forgets those no longer there. The holder's sighting carries its lock-delay, and a
/// marked grant's tombstone (a revocation leaves one without a holder) is watched as
/// a holder is.
inline void watch(std::vector<sighting>& seen, const shared_item& item, time_point now, duration own_ttl)
{
    std::vector<sighting> next;
    const auto see = [&](std::string version, const lease_record& lease, duration delay) {
        const auto before = std::find_if(seen.begin(), seen.end(), [&](const sighting& s) { return s.version == version; });
        const auto first = before == seen.end() ? now : before->seen_at;
        next.push_back({std::move(version), first, declared_lease(lease, own_ttl), delay});
    };
    if (item.lock.owner || item.lock.lock_delay)
        see(holder_version(item.lock), holder_lease(item.lock), marked_delay(item.lock));
    for (const auto& s : item.sharers)
        see(watched_version("sharer", s.owner, s.lease), s.lease, duration::zero());
    if (item.intent)
        see(watched_version("intent", item.intent->waiter, item.intent->lease), item.intent->lease, duration::zero());
    seen = std::move(next);
}

/// Until when the tombstone of a marked grant of `lock` keeps the resource from every
/// client, by this client's monotonic clock; nullopt when there is none (unmarked, or
/// over). Only meaningful once the grant itself is over, as the mode says:
///  - expiry_time: until delayUntil (its expiresAt + lockDelay) is before the clock less
///    clock_skew_margin, as the acquisitions' condition says;
///  - record_version: until the version has been seen unchanged for its lease and the
///    delay (`seen`, as watch() keeps it).
inline std::optional<time_point> tombstone_until(const lock_item& lock, const step_clock& c,
                                                 const std::vector<sighting>& seen)
{
    if (!lock.lock_delay)
        return std::nullopt;
    if (c.mode == lease_mode::expiry_time) {
        if (!lock.delay_until) // a mark without its end: the conditions never free it either
            return c.now + max_wait;
        constexpr std::int64_t far = std::int64_t{1} << 40;
        const auto left = static_cast<std::int64_t>(*lock.delay_until) + 1 - (c.wall_ms - c.skew_margin_ms);
        if (left <= 0)
            return std::nullopt;
        return c.now + std::chrono::milliseconds{std::min(left, far)};
    }
    const auto version = holder_version(lock);
    for (const auto& s : seen)
        if (s.version == version) {
            const auto until = s.seen_at + s.lease + s.delay;
            return until > c.now ? std::optional{until} : std::nullopt;
        }
    return c.now + declared_lease(holder_lease(lock), c.own_ttl) + marked_delay(lock); // not watched yet
}

/// When a record counts as over for this client: at or before `c.now`, it is;
/// nullopt when this client cannot tell that it ever will (an expiry_time record
/// without an expiry, as the mutex reads one).
inline std::optional<time_point> over_at(std::string_view role, std::string_view holder, const lease_record& lease,
                                         const step_clock& c, const std::vector<sighting>& seen)
{
    if (c.mode == lease_mode::expiry_time) {
        constexpr std::int64_t far = std::int64_t{1} << 40;
        if (!lease.expires_at || *lease.expires_at > static_cast<std::uint64_t>(far) * 1024)
            return std::nullopt;
        // Over once the expiry is before the clock less the margin (the mutex's takeover).
        const auto left = static_cast<std::int64_t>(*lease.expires_at) + 1 - (c.wall_ms - c.skew_margin_ms);
        return c.now + std::chrono::milliseconds{std::clamp(left, -far, far)};
    }
    const auto version = watched_version(role, holder, lease);
    for (const auto& s : seen)
        if (s.version == version)
            return s.seen_at + s.lease;
    return c.now + declared_lease(lease, c.own_ttl); // not watched yet: a whole lease from now
}

inline bool is_over(std::string_view role, std::string_view holder, const lease_record& lease, const step_clock& c,
                    const std::vector<sighting>& seen)
{
    const auto at = over_at(role, holder, lease, c, seen);
    return at && *at <= c.now;
}

/// `item` without what is over: the exclusive holder (its fence stays), a tombstone,
/// the sharers, the permit count when no sharer is left, the intent.
inline shared_item without_over(shared_item item, const step_clock& c, const std::vector<sighting>& seen)
{
    const bool tombstone = tombstone_until(item.lock, c, seen).has_value();
    if (item.lock.owner && is_over("owner", *item.lock.owner, holder_lease(item.lock), c, seen)) {
        item.lock.owner.reset();
        item.lock.record_version.reset();
        item.lock.expires_at.reset();
        item.lock.lease_duration.reset();
    }
    if (!item.lock.owner && !tombstone) { // a tombstone that is over goes with the write
        item.lock.lock_delay.reset();
        item.lock.delay_until.reset();
    }
    std::erase_if(item.sharers, [&](const sharer_entry& s) { return is_over("sharer", s.owner, s.lease, c, seen); });
    if (item.sharers.empty())
        item.permits.reset();
    if (item.intent && is_over("intent", item.intent->waiter, item.intent->lease, c, seen))
        item.intent.reset();
    return item;
}

/// What a step does: the state to write first, if any, and the answer once it is
/// written (or at once, without a write).
struct shared_step {
    result<answer> reply = answer::held();
    std::optional<shared_item> next;
    std::string refusal; ///< what a refusal (reply an error) says
};

/// A new lease of `ttl_ms` in the mode of `c`: an expiry, or `new_version` (random,
/// the caller's) and the duration.
inline lease_record new_lease(const step_clock& c, std::int64_t ttl_ms, const std::string& new_version)
{
    lease_record out;
    if (c.mode == lease_mode::expiry_time) {
        out.expires_at = static_cast<std::uint64_t>(std::max<std::int64_t>(c.wall_ms, 0) + ttl_ms);
    } else {
        out.record_version = new_version;
        out.lease_duration = static_cast<std::uint64_t>(ttl_ms);
    }
    return out;
}

namespace shared_detail {

// The earliest time any of the live records in the way of `live` may be over.
struct earliest {
    std::optional<time_point> at;
    void add(std::optional<time_point> t)
    {
        if (t && (!at || *t < *at))
            at = t;
    }
};

inline answer held_until(const earliest& e) { return answer::held(e.at); }

// Two clients that disagree on the count: said, never mixed.
inline std::string counts_differ(std::uint32_t held, std::uint32_t asked)
{
    const auto what = [](std::uint32_t n) {
        return n == 0 ? std::string{"a shared mutex's readers"} : "a semaphore of " + std::to_string(n) + " permits";
    };
    return "the resource is held by " + what(held) + ", asked as " + what(asked);
}

inline std::optional<time_point> holder_over_at(const shared_item& live, const step_clock& c,
                                                const std::vector<sighting>& seen)
{
    return over_at("owner", *live.lock.owner, holder_lease(live.lock), c, seen);
}

// The grant's step on `live`: the fence one above the counter, the revision one more.
inline void advance(shared_item& live)
{
    live.lock.fence = live.lock.fence.value_or(0) + 1;
    live.revision = live.revision.value_or(0) + 1;
}

} // namespace shared_detail

/// A shared grant for `owner` (hex): a reader (`permits` 0) unless a writer holds or
/// waits; a permit of `permits` while fewer hold, as the lowest slot no live holder
/// has. Another count than the live sharers' is errc::invalid_argument.
inline shared_step step_shared(const shared_item& item, const std::string& owner, std::uint32_t permits,
                               std::int64_t ttl_ms, const std::string& new_version, const step_clock& c,
                               const std::vector<sighting>& seen)
{
    using namespace shared_detail;
    const auto tombstone = tombstone_until(item.lock, c, seen);
    auto live = without_over(item, c, seen);
    shared_step out;
    if (!live.sharers.empty() && live.permits != permits) {
        out.reply = distlock::make_error_code(distlock::errc::invalid_argument);
        out.refusal = counts_differ(live.permits.value_or(0), permits);
        return out;
    }
    if (live.lock.owner) {
        out.reply = answer::held(holder_over_at(live, c, seen));
        return out;
    }
    if (tombstone) {
        out.reply = answer::delayed(*tombstone);
        return out;
    }
    if (permits == 0 && live.intent) {
        out.reply = answer::held(over_at("intent", live.intent->waiter, live.intent->lease, c, seen));
        return out;
    }
    std::uint32_t slot = 0;
    if (permits > 0) {
        if (live.sharers.size() >= permits) {
            earliest first_out;
            for (const auto& s : live.sharers)
                first_out.add(over_at("sharer", s.owner, s.lease, c, seen));
            out.reply = held_until(first_out);
            return out;
        }
        while (std::any_of(live.sharers.begin(), live.sharers.end(),
                           [&](const sharer_entry& s) { return s.slot == slot; }))
            ++slot;
    }
    std::erase_if(live.sharers, [&](const sharer_entry& s) { return s.owner == owner; });
    live.sharers.push_back({owner, slot, new_lease(c, ttl_ms, new_version)});
    live.permits = permits;
    advance(live);
    out.reply = permits > 0 ? answer::granted(*live.lock.fence, slot) : answer::granted(*live.lock.fence);
    out.next = std::move(live);
    return out;
}

/// An exclusive grant for `owner` (hex) when nobody holds and no other waiter's intent
/// is live; else `waiter` (hex) takes or renews the intent, unless another's is live.
/// Live permits of a semaphore are errc::invalid_argument: it has no writers.
inline shared_step step_exclusive(const shared_item& item, const std::string& waiter, const std::string& owner,
                                  std::int64_t ttl_ms, const std::string& new_version, const step_clock& c,
                                  const std::vector<sighting>& seen)
{
    using namespace shared_detail;
    const auto tombstone = tombstone_until(item.lock, c, seen);
    auto live = without_over(item, c, seen);
    shared_step out;
    if (!live.sharers.empty() && live.permits != 0u) {
        out.reply = distlock::make_error_code(distlock::errc::invalid_argument);
        out.refusal = counts_differ(live.permits.value_or(0), 0);
        return out;
    }
    if (!live.lock.owner && live.sharers.empty() && tombstone) {
        out.reply = answer::delayed(*tombstone);
        return out;
    }
    const bool other_waits = live.intent && live.intent->waiter != waiter;
    earliest in_way;
    if (live.lock.owner)
        in_way.add(holder_over_at(live, c, seen));
    for (const auto& s : live.sharers)
        in_way.add(over_at("sharer", s.owner, s.lease, c, seen));
    if (other_waits)
        in_way.add(over_at("intent", live.intent->waiter, live.intent->lease, c, seen));
    if (!other_waits && !live.lock.owner && live.sharers.empty()) {
        auto lease = new_lease(c, ttl_ms, new_version);
        live.lock.owner = owner;
        live.lock.expires_at = lease.expires_at;
        live.lock.record_version = lease.record_version;
        live.lock.lease_duration = lease.lease_duration;
        live.lock.lock_delay.reset(); // a new grant, marked only if its lock() asks
        live.lock.delay_until.reset();
        live.intent.reset(); // its own, or one that is over
        advance(live);
        out.reply = answer::granted(*live.lock.fence);
        out.next = std::move(live);
        return out;
    }
    out.reply = held_until(in_way);
    if (!other_waits) {
        live.intent = writer_intent{waiter, new_lease(c, ttl_ms, new_version)};
        live.revision = live.revision.value_or(0) + 1;
        out.next = std::move(live);
    }
    return out;
}

/// The exclusive holder `owner` (hex) holds on as a sharer of a shared mutex, with its
/// fence and its lease as they are; errc::not_owner when it does not hold (in
/// expiry_time mode: its expiry passed by this client's clock, as extend() reads it).
inline shared_step step_downgrade(const shared_item& item, const std::string& owner, const step_clock& c)
{
    shared_step out;
    const auto& lock = item.lock;
    const bool holds =
        lock.owner == owner &&
        (c.mode == lease_mode::record_version ||
         (lock.expires_at && *lock.expires_at <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()) &&
          static_cast<std::int64_t>(*lock.expires_at) >= c.wall_ms));
    if (!holds) {
        out.reply = distlock::make_error_code(distlock::errc::not_owner);
        return out;
    }
    auto next = item;
    std::erase_if(next.sharers, [&](const sharer_entry& s) { return s.owner == owner; });
    next.sharers.push_back({owner, 0, holder_lease(lock)});
    next.permits = 0;
    next.lock.owner.reset();
    next.lock.record_version.reset();
    next.lock.expires_at.reset();
    next.lock.lease_duration.reset();
    // Given up by its holder, as a release is: its mark goes, no tombstone follows.
    next.lock.lock_delay.reset();
    next.lock.delay_until.reset();
    next.revision = next.revision.value_or(0) + 1;
    out.reply = answer::granted(lock.fence.value_or(0));
    out.next = std::move(next);
    return out;
}

namespace shared_detail {

inline nlohmann::json number_value(std::uint64_t n) { return {{"N", std::to_string(n)}}; }
inline nlohmann::json string_value(const std::string& s) { return {{"S", s}}; }

inline void put_lease(nlohmann::json& m, const lease_record& lease)
{
    if (lease.expires_at)
        m["expiresAt"] = number_value(*lease.expires_at);
    if (lease.record_version)
        m["recordVersion"] = string_value(*lease.record_version);
    if (lease.lease_duration)
        m["leaseDuration"] = number_value(*lease.lease_duration);
}

} // namespace shared_detail

/// The UpdateItem (without TableName and Key) that turns the item from `read` into
/// `next`, conditional on the item still being `read`: its revision and the exclusive
/// holder's owner, fence and lease attributes each equal, or absent as they were.
inline nlohmann::json shared_update(const shared_item& read, const shared_item& next)
{
    using namespace shared_detail;
    nlohmann::json names = {{"#o", "owner"},   {"#f", "fence"},   {"#e", "expiresAt"},
                            {"#v", "recordVersion"}, {"#l", "leaseDuration"}, {"#n", "revision"},
                            {"#s", "sharers"}, {"#p", "permits"}, {"#i", "intent"},
                            {"#d", "lockDelay"}, {"#du", "delayUntil"}};
    nlohmann::json values = nlohmann::json::object();
    std::vector<std::string> conditions, sets, removes;
    const auto compare = [&](const char* name, const char* placeholder, std::optional<nlohmann::json> was) {
        if (was) {
            conditions.push_back(std::string{name} + " = " + placeholder);
            values[placeholder] = std::move(*was);
        } else {
            conditions.push_back(std::string{"attribute_not_exists("} + name + ")");
        }
    };
    const auto assign = [&](const char* name, const char* placeholder, std::optional<nlohmann::json> value) {
        if (value) {
            sets.push_back(std::string{name} + " = " + placeholder);
            values[placeholder] = std::move(*value);
        } else {
            removes.push_back(name);
        }
    };
    const auto as_number = [](const std::optional<std::uint64_t>& n) {
        return n ? std::optional<nlohmann::json>{number_value(*n)} : std::nullopt;
    };
    const auto as_string = [](const std::optional<std::string>& s) {
        return s ? std::optional<nlohmann::json>{string_value(*s)} : std::nullopt;
    };

    compare("#o", ":was_o", as_string(read.lock.owner));
    compare("#f", ":was_f", as_number(read.lock.fence));
    compare("#e", ":was_e", as_number(read.lock.expires_at));
    compare("#v", ":was_v", as_string(read.lock.record_version));
    compare("#l", ":was_l", as_number(read.lock.lease_duration));
    compare("#n", ":was_n", as_number(read.revision));
    compare("#d", ":was_d", as_number(read.lock.lock_delay));
    compare("#du", ":was_du", as_number(read.lock.delay_until));

    assign("#o", ":o", as_string(next.lock.owner));
    assign("#f", ":f", as_number(next.lock.fence));
    assign("#e", ":e", as_number(next.lock.expires_at));
    assign("#v", ":v", as_string(next.lock.record_version));
    assign("#l", ":l", as_number(next.lock.lease_duration));
    assign("#n", ":n", as_number(next.revision));
    assign("#d", ":d", as_number(next.lock.lock_delay));
    assign("#du", ":du", as_number(next.lock.delay_until));
    std::optional<nlohmann::json> sharers, permits, intent;
    if (!next.sharers.empty()) {
        nlohmann::json map = nlohmann::json::object();
        for (const auto& s : next.sharers) {
            nlohmann::json entry = {{"slot", number_value(s.slot)}};
            put_lease(entry, s.lease);
            map[s.owner] = {{"M", std::move(entry)}};
        }
        sharers = nlohmann::json{{"M", std::move(map)}};
        permits = number_value(next.permits.value_or(0));
    }
    if (next.intent) {
        nlohmann::json entry = {{"waiter", string_value(next.intent->waiter)}};
        put_lease(entry, next.intent->lease);
        intent = nlohmann::json{{"M", std::move(entry)}};
    }
    assign("#s", ":s", std::move(sharers));
    assign("#p", ":p", std::move(permits));
    assign("#i", ":i", std::move(intent));

    const auto joined = [](const std::vector<std::string>& parts, const char* separator) {
        std::string out;
        for (const auto& p : parts) {
            if (!out.empty())
                out += separator;
            out += p;
        }
        return out;
    };
    std::string update = "SET " + joined(sets, ", ");
    if (!removes.empty())
        update += " REMOVE " + joined(removes, ", ");
    return {{"UpdateExpression", std::move(update)},
            {"ConditionExpression", joined(conditions, " AND ")},
            {"ExpressionAttributeNames", std::move(names)},
            {"ExpressionAttributeValues", std::move(values)}};
}

} // namespace distlock::dynamodb::detail
