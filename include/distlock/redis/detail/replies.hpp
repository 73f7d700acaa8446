// distlock/redis/detail/replies.hpp: what the Redis store's scripts and commands
// answer, decoded without I/O. Each decoder takes one RESP value and returns the
// primitive's result: a reply of another shape than its script returns is
// errc::protocol_error, never an exception or a guess. Unit-tested
// (test/unit/redis_replies.cpp) and run by the RESP fuzz target on every value it
// parses.
#pragma once

#include <distlock/backend/contract.hpp>
#include <distlock/claim.hpp>
#include <distlock/clock.hpp>
#include <distlock/diagnostics.hpp>
#include <distlock/error.hpp>
#include <distlock/options.hpp>
#include <distlock/owner_token.hpp>
#include <distlock/redis/resp/value.hpp>
#include <distlock/util/result_type.hpp>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace distlock::redis::detail::replies {

/// An error reply: the request was refused and not applied (READONLY, LOADING, NOAUTH,
/// OOM, BUSY, ...); refused credentials are errc::auth_failed, the rest
/// errc::store_unavailable. The server's words go to `diag`. Any other reply passes.
inline result<resp::value> checked(resp::value v, diagnostics* diag)
{
    if (!v.is_error())
        return v;
    if (diag)
        diag->set_server_message(v.text);
    if (v.text.starts_with("NOAUTH") || v.text.starts_with("WRONGPASS") || v.text.starts_with("NOPERM"))
        return errc::auth_failed;
    return errc::store_unavailable;
}

/// Element `i` of an array reply is there and an integer.
inline bool integer_at(const resp::value& v, std::size_t i)
{
    return v.elements.size() > i && v.elements[i].type == resp::type::integer;
}

/// An acquiring script: the fence alone (the acquire script) or {1, fence} (the
/// others) granted, {0, pttl} held (pttl: -1 no TTL, -2 gone since; only a positive
/// one says how long, into `held_for`), {3, ms} free but in its lock-delay for ms
/// more (1 or more, into `delayed_for`): errc::lock_delayed.
inline result<fence_token> acquired(const resp::value& v, std::optional<duration>* held_for = nullptr,
                                    std::optional<duration>* delayed_for = nullptr)
{
    if (v.type == resp::type::integer) {
        if (v.integer < 1)
            return errc::protocol_error;
        return static_cast<fence_token>(v.integer);
    }
    if (v.type != resp::type::array || v.elements.size() != 2 || !integer_at(v, 0) ||
        !integer_at(v, 1))
        return errc::protocol_error;
    if (v.elements[0].integer == 3) {
        if (v.elements[1].integer < 1)
            return errc::protocol_error;
        if (delayed_for)
            *delayed_for = std::chrono::milliseconds{v.elements[1].integer};
        return errc::lock_delayed;
    }
    if (v.elements[0].integer != 1) {
        if (held_for && v.elements[1].integer > 0)
            *held_for = std::chrono::milliseconds{v.elements[1].integer};
        return errc::contended;
    }
    if (v.elements[1].integer < 1)
        return errc::protocol_error;
    return static_cast<fence_token>(v.elements[1].integer);
}

/// The acquire script's answer for a request sent at `sent`: granted, or held with
/// when the holder's lock ends at the latest by this client's clock, or delayed until
/// the lock-delay's tombstone ends, both measured from the request, so never later
/// than the server's: whoever is told a time is never granted before it, and a try
/// at that time that comes a little early is answered the little left.
inline result<answer> answered(const resp::value& v, time_point sent)
{
    std::optional<duration> held_for;
    std::optional<duration> delayed_for;
    auto fence = acquired(v, &held_for, &delayed_for);
    if (fence)
        return answer::granted(fence.value());
    if (fence.error() == errc::lock_delayed && delayed_for)
        return answer::delayed(sent + *delayed_for);
    if (fence.error() != errc::contended)
        return fence.error();
    if (held_for)
        return answer::held(sent + *held_for);
    return answer::held();
}

/// acquire_fair's answer: as answered(), or {2, fence, pttl} for a lock a release
/// handed to `waiter`. Its validity counts from when the lock will have run for `ttl`
/// by the time it ends: the request's start plus pttl, less ttl.
inline result<answer> answered_fair(const resp::value& v, time_point sent, const owner_token& waiter, duration ttl)
{
    if (v.type == resp::type::array && v.elements.size() == 3 && integer_at(v, 0) &&
        v.elements[0].integer == 2) {
        if (!integer_at(v, 1) || v.elements[1].integer < 1 || !integer_at(v, 2) ||
            v.elements[2].integer < 1)
            return errc::protocol_error;
        const auto left = std::min<duration>(std::chrono::milliseconds{v.elements[2].integer}, ttl);
        return answer::handed_over(static_cast<fence_token>(v.elements[1].integer), sent + left - ttl, waiter);
    }
    return answered(v, sent);
}

/// put_shared's and put_exclusive's answer for a request sent at `sent`, asked with
/// `permits` (0 for a reader or a writer, whose grant is {1, fence}; N for a permit,
/// granted as {1, fence, slot} with a slot below N): held {0, pttl} as answered()
/// reads it, and so is {3, ms}, the resource's lock-delay; {-1, count} is errc::invalid_argument, the holders' count (-1 when the
/// store does not say) into `held_with`.
inline result<answer> answered_shared(const resp::value& v, time_point sent, std::uint32_t permits,
                                      std::optional<std::int64_t>* held_with = nullptr)
{
    if (v.type != resp::type::array || v.elements.empty() || !integer_at(v, 0))
        return errc::protocol_error;
    const auto code = v.elements[0].integer;
    if (code == 1) {
        if (v.elements.size() != (permits == 0 ? 2u : 3u) || !integer_at(v, 1) || v.elements[1].integer < 1)
            return errc::protocol_error;
        const auto fence = static_cast<fence_token>(v.elements[1].integer);
        if (permits == 0)
            return answer::granted(fence);
        if (!integer_at(v, 2) || v.elements[2].integer < 0 || v.elements[2].integer >= std::int64_t{permits})
            return errc::protocol_error;
        return answer::granted(fence, static_cast<std::uint32_t>(v.elements[2].integer));
    }
    if (v.elements.size() != 2 || !integer_at(v, 1))
        return errc::protocol_error;
    if (code == 0 || code == 3)
        return answered(v, sent);
    if (code != -1 || v.elements[1].integer < -1)
        return errc::protocol_error;
    if (held_with)
        *held_with = v.elements[1].integer;
    return errc::invalid_argument;
}

/// An owner-checked script (extend, release, release_fair, and the shared grants'
/// extend_shared, release_shared, downgrade): 1 done, 0 not the owner.
inline result<void> owned(const resp::value& v)
{
    if (v.type != resp::type::integer)
        return errc::protocol_error;
    return v.integer == 1 ? result<void>{success()} : result<void>{errc::not_owner};
}

/// A script that always answers 1 (leave_queue, withdraw).
inline result<void> done(const resp::value& v)
{
    if (v.type != resp::type::integer || v.integer != 1)
        return errc::protocol_error;
    return success();
}

/// A fence counter's value (next_fence, raise_fence).
inline result<fence_token> fence(const resp::value& v)
{
    if (v.type != resp::type::integer || v.integer < 0)
        return errc::protocol_error;
    return static_cast<fence_token>(v.integer);
}

/// The inspect script: {held, owner, pttl, token}.
inline result<lock_info> inspected(const resp::value& v)
{
    if (v.type != resp::type::array || v.elements.size() != 4 || !integer_at(v, 0) ||
        (v.elements[0].integer != 0 && v.elements[0].integer != 1) || !v.elements[1].is_string() ||
        !integer_at(v, 2) || !integer_at(v, 3) || v.elements[3].integer < 0)
        return errc::protocol_error;
    lock_info info;
    info.fence = static_cast<fence_token>(v.elements[3].integer);
    if (v.elements[0].integer == 1) {
        info.held = true;
        info.owner = v.elements[1].text.substr(0, 8);
        if (v.elements[2].integer > 0)
            info.remaining = std::chrono::milliseconds{v.elements[2].integer};
    }
    return info;
}

/// The leader script (electing_store::leader()): {0} free; {1, owner, pttl, token}
/// held, with the value proclaimed for that grant as a fifth element when there is
/// one. A holder without a token (0: another client's lock) leads no term of its own,
/// so it has no value either; a value beside one makes no sense.
inline result<leader_info> led(const resp::value& v)
{
    if (v.type != resp::type::array || v.elements.empty() || !integer_at(v, 0))
        return errc::protocol_error;
    if (v.elements[0].integer == 0) {
        if (v.elements.size() != 1)
            return errc::protocol_error;
        return leader_info{};
    }
    if (v.elements[0].integer != 1 || (v.elements.size() != 4 && v.elements.size() != 5) ||
        !v.elements[1].is_string() || !integer_at(v, 2) || !integer_at(v, 3) || v.elements[3].integer < 0)
        return errc::protocol_error;
    leader_info info;
    info.epoch = static_cast<fence_token>(v.elements[3].integer);
    info.owner = v.elements[1].text.substr(0, 8);
    if (v.elements[2].integer > 0)
        info.remaining = std::chrono::milliseconds{v.elements[2].integer};
    if (v.elements.size() == 5) {
        if (!v.elements[4].is_string() || info.epoch == 0)
            return errc::protocol_error;
        info.value = v.elements[4].text;
    }
    return info;
}

/// acquire_all: {1, fence} (the set's one token, for each of its `count` resources),
/// {0, ...} held, or {3, index, ms}: the index-th (from 1) is in its lock-delay,
/// errc::lock_delayed.
inline result<std::vector<fence_token>> acquired_all(const resp::value& v, std::size_t count)
{
    if (v.type != resp::type::array || v.elements.empty() || !integer_at(v, 0))
        return errc::protocol_error;
    if (v.elements[0].integer == 3) {
        if (v.elements.size() != 3 || !integer_at(v, 1) || v.elements[1].integer < 1 ||
            static_cast<std::uint64_t>(v.elements[1].integer) > count || !integer_at(v, 2) ||
            v.elements[2].integer < 1)
            return errc::protocol_error;
        return errc::lock_delayed;
    }
    if (v.elements[0].integer != 1)
        return errc::contended;
    if (v.elements.size() != 2 || !integer_at(v, 1) || v.elements[1].integer < 1)
        return errc::protocol_error;
    return std::vector<fence_token>(count, static_cast<fence_token>(v.elements[1].integer));
}

/// release_all: one 1 (released) or 0 (not the owner) per resource, in order.
inline result<std::vector<bool>> released_all(const resp::value& v, std::size_t count)
{
    if (v.type != resp::type::array || v.elements.size() != count)
        return errc::protocol_error;
    std::vector<bool> released;
    released.reserve(count);
    for (const auto& e : v.elements) {
        if (e.type != resp::type::integer || (e.integer != 0 && e.integer != 1))
            return errc::protocol_error;
        released.push_back(e.integer == 1);
    }
    return released;
}

/// fenced_write: {1, ...} written, {0, ...} refused as stale.
inline result<void> fenced_written(const resp::value& v)
{
    if (v.type != resp::type::array || v.elements.size() != 2 || !integer_at(v, 0))
        return errc::protocol_error;
    if (v.elements[0].integer != 1)
        return errc::stale_fence;
    return success();
}

/// HGET of a fenced value: the value, or nullopt when there is none.
inline result<std::optional<std::string>> value_read(const resp::value& v)
{
    if (v.is_null())
        return std::optional<std::string>{};
    if (!v.is_string())
        return errc::protocol_error;
    return std::optional<std::string>{v.text};
}

/// A reply as a line of text, for diagnostics: what the server sent when it made no
/// sense. Bytes that are not printable are written \xNN; long replies are cut.
inline std::string described(const resp::value& v)
{
    constexpr std::size_t longest = 200;
    std::string out;
    const auto text = [&](std::string_view s) {
        static constexpr char hex[] = "0123456789abcdef";
        out.push_back('"');
        for (const char c : s) {
            if (out.size() >= longest)
                break;
            const auto byte = static_cast<unsigned char>(c);
            if (byte < 0x20 || byte >= 0x7f || c == '"' || c == '\\') {
                out.append("\\x").push_back(hex[byte >> 4]);
                out.push_back(hex[byte & 0xf]);
            } else {
                out.push_back(c);
            }
        }
        out.push_back('"');
    };
    const auto one = [&](const auto& self, const resp::value& x, int depth) -> void {
        if (out.size() >= longest)
            return;
        if (x.is_error()) {
            out.append("error ");
            text(x.text);
        } else if (x.is_string() || x.type == resp::type::double_number || x.type == resp::type::big_number) {
            text(x.text);
        } else if (x.type == resp::type::integer || x.type == resp::type::boolean) {
            out.append(std::to_string(x.integer));
        } else if (x.is_null()) {
            out.append("null");
        } else if (depth >= 3) {
            out.append("[...]");
        } else {
            out.push_back('[');
            for (std::size_t i = 0; i < x.elements.size() && out.size() < longest; ++i) {
                if (i > 0)
                    out.append(", ");
                self(self, x.elements[i], depth + 1);
            }
            out.push_back(']');
        }
    };
    one(one, v, 0);
    if (out.size() > longest) {
        out.resize(longest);
        out.append("...");
    }
    return out;
}

/// One page of SCAN: the cursor to go on from ("0": the iteration is over) and the
/// keys it returned.
struct scan_page {
    std::string cursor;
    std::vector<std::string> keys;
};

/// SCAN's reply: [cursor, [key, ...]], the cursor an unsigned number in decimal.
inline result<scan_page> scanned(resp::value v)
{
    if (v.type != resp::type::array || v.elements.size() != 2 || !v.elements[0].is_string() ||
        v.elements[1].type != resp::type::array)
        return errc::protocol_error;
    const auto& cursor = v.elements[0].text;
    if (cursor.empty() || cursor.size() > 20 ||
        !std::all_of(cursor.begin(), cursor.end(), [](char c) { return c >= '0' && c <= '9'; }))
        return errc::protocol_error;
    scan_page page;
    page.cursor = std::move(v.elements[0].text);
    page.keys.reserve(v.elements[1].elements.size());
    for (auto& key : v.elements[1].elements) {
        if (!key.is_string())
            return errc::protocol_error;
        page.keys.push_back(std::move(key.text));
    }
    return page;
}

/// The survey script over `resources`: for each, in order, null when its lock is gone
/// (it is left out), else {owner, pttl, token, waiters}; waiters -1 is not known.
inline result<std::vector<lock_listing>> surveyed(const resp::value& v, std::vector<std::string> resources)
{
    if (v.type != resp::type::array || v.elements.size() != resources.size())
        return errc::protocol_error;
    std::vector<lock_listing> out;
    out.reserve(resources.size());
    for (std::size_t i = 0; i < resources.size(); ++i) {
        const auto& e = v.elements[i];
        if (e.is_null())
            continue;
        if (e.type != resp::type::array || e.elements.size() != 4 || !e.elements[0].is_string() ||
            !integer_at(e, 1) || !integer_at(e, 2) || e.elements[2].integer < 0 || !integer_at(e, 3) ||
            e.elements[3].integer < -1)
            return errc::protocol_error;
        lock_listing listed;
        listed.resource = std::move(resources[i]);
        listed.lock.held = true;
        listed.lock.owner = e.elements[0].text.substr(0, 8);
        listed.lock.fence = static_cast<fence_token>(e.elements[2].integer);
        if (e.elements[1].integer > 0)
            listed.lock.remaining = std::chrono::milliseconds{e.elements[1].integer};
        if (e.elements[3].integer >= 0)
            listed.waiters = static_cast<std::size_t>(e.elements[3].integer);
        out.push_back(std::move(listed));
    }
    return out;
}

/// The revoke script: 1 revoked, 0 not that grant; anything else makes no sense.
inline result<void> revoked(const resp::value& v)
{
    if (v.type != resp::type::integer || (v.integer != 0 && v.integer != 1))
        return errc::protocol_error;
    return v.integer == 1 ? result<void>{success()} : result<void>{errc::not_owner};
}

/// WAIT's count of replicas that acknowledged.
inline result<std::int64_t> replicas(const resp::value& v)
{
    if (v.type != resp::type::integer)
        return errc::protocol_error;
    return v.integer;
}

} // namespace distlock::redis::detail::replies
