// distlock/postgres/detail/answers.hpp: what the PostgreSQL store's statements answer,
// decoded without I/O. Each decoder reads one statement's result through the small
// table interface below (detail::rows over a PGresult in the store; a plain table in
// the unit tests, test/unit/postgres_answers.cpp): a result of another shape than its
// statement returns is errc::protocol_error.
#pragma once

#include <distlock/backend/contract.hpp>
#include <distlock/claim.hpp>
#include <distlock/clock.hpp>
#include <distlock/error.hpp>
#include <distlock/options.hpp>
#include <distlock/postgres/error.hpp>
#include <distlock/result.hpp>

#include <algorithm>
#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace distlock::postgres::detail::answers {

/// What the decoders read of a statement's result. A cell past a row's end reads as
/// NULL, so a decoder that must tell a missing column from a NULL one asks columns().
template <class R>
concept table = requires(const R& r, int row, int col) {
    { r.count() } -> std::convertible_to<int>;
    { r.columns() } -> std::convertible_to<int>;
    { r.null(row, col) } -> std::convertible_to<bool>;
    { r.text(row, col) } -> std::convertible_to<std::string_view>;
    { r.integer(row, col) } -> std::same_as<std::optional<std::int64_t>>;
    { r.affected() } -> std::convertible_to<std::uint64_t>;
};

/// Milliseconds a server counted, as a time of this process's clock from `at`, capped
/// (a hostile count must not overflow the clock).
inline time_point after(time_point at, std::int64_t ms)
{
    return at + std::chrono::milliseconds{std::min<std::int64_t>(ms, std::int64_t{1} << 40)};
}

/// The acquire statement's one row: (fence, null) granted, or (null, milliseconds
/// left) held, counted from `at` (when the reply came). With `delay_column`, a third
/// column: the milliseconds left of the resource's lock-delay tombstone (NULL when
/// none lasts), answered as answer::delayed. A fence or a time that is there but no
/// number is no answer of the statement: it is not read as "no fence" (held).
template <table R>
result<answer> acquired(const R& r, time_point at, bool delay_column = false)
{
    if (r.count() != 1 || r.columns() < (delay_column ? 3 : 2))
        return errc::protocol_error;
    if (!r.null(0, 0)) {
        const auto fence = r.integer(0, 0);
        if (!fence || *fence <= 0)
            return errc::protocol_error;
        return answer::granted(static_cast<fence_token>(*fence));
    }
    if (delay_column && !r.null(0, 2)) {
        const auto delay_left = r.integer(0, 2);
        if (!delay_left)
            return errc::protocol_error;
        // Run out meanwhile: held, to be asked again at once.
        if (*delay_left > 0)
            return answer::delayed(after(at, *delay_left));
    }
    if (r.null(0, 1))
        return answer::held();
    const auto left = r.integer(0, 1);
    if (!left)
        return errc::protocol_error;
    if (*left > 0)
        return answer::held(after(at, *left));
    return answer::held();
}

/// An answer as put_if_absent() reports it: the fence, or errc::contended (or
/// errc::lock_delayed while the resource is in its lock-delay).
inline result<fence_token> granted_fence(const answer& a)
{
    if (!a.is_granted())
        return a.is_delayed() ? errc::lock_delayed : errc::contended;
    return a.fence();
}

/// A shared grant's answer (put_shared, put_exclusive, an advisory permit): one row
/// (fence, slot, milliseconds left, count), asked with `permits` (0 for a reader or a
/// writer, N for a permit). Granted: a positive fence, with a slot below N for a
/// permit and none otherwise. Refused because the holders took another count: that
/// count (0 for readers, else a semaphore's N) into `held_with`, and
/// errc::invalid_argument. Else held, counted from `at` when the time left is known.
/// With `delay_column`, a fifth column: the milliseconds left of the resource's
/// lock-delay tombstone when that is what refused it (answer::delayed).
template <table R>
result<answer> shared_acquired(const R& r, time_point at, std::uint32_t permits,
                               std::optional<std::int64_t>* held_with = nullptr, bool delay_column = false)
{
    if (r.count() != 1)
        return errc::protocol_error;
    if (!r.null(0, 0)) {
        const auto fence = r.integer(0, 0);
        if (!fence || *fence <= 0)
            return errc::protocol_error;
        if (permits == 0)
            return r.null(0, 1) ? result<answer>{answer::granted(static_cast<fence_token>(*fence))}
                                : result<answer>{errc::protocol_error};
        const auto slot = r.integer(0, 1);
        if (!slot || *slot < 0 || *slot >= std::int64_t{permits})
            return errc::protocol_error;
        return answer::granted(static_cast<fence_token>(*fence), static_cast<std::uint32_t>(*slot));
    }
    if (!r.null(0, 3)) {
        const auto count = r.integer(0, 3);
        if (!count || *count < 0 || *count == std::int64_t{permits})
            return errc::protocol_error;
        if (held_with)
            *held_with = *count;
        return errc::invalid_argument;
    }
    if (delay_column && !r.null(0, 4)) {
        const auto delay_left = r.integer(0, 4);
        if (!delay_left)
            return errc::protocol_error;
        if (*delay_left > 0)
            return answer::delayed(after(at, *delay_left));
    }
    if (r.null(0, 2))
        return answer::held();
    const auto left = r.integer(0, 2);
    if (!left)
        return errc::protocol_error;
    if (*left > 0)
        return answer::held(at + std::chrono::milliseconds{std::min<std::int64_t>(*left, std::int64_t{1} << 40)});
    return answer::held();
}

/// Why a shared grant was refused for its count, in words: the holders took `held_with`
/// (0: readers, N: a semaphore's permits), the request was a writer's, a reader's or a
/// permit of `permits`. A programming error on one of two clients, which the words
/// name.
inline std::string count_refusal(std::int64_t held_with, std::uint32_t permits, bool writer)
{
    std::string words = "refused: the resource is held ";
    words += held_with == 0 ? "by a shared mutex's readers" : "as a semaphore of " + std::to_string(held_with) + " permits";
    words += writer         ? ", which has no writers"
             : permits == 0 ? ", not by readers"
                            : ", not as one of " + std::to_string(permits);
    return words;
}

/// An owner-checked statement: its one changed row says the owner held the lock.
template <table R>
result<void> owned(const R& r)
{
    if (r.affected() != 1)
        return errc::not_owner;
    return success();
}

/// release_all: one row per released resource, naming it by its hex key; every key
/// at most once and one of `keys`.
template <table R>
result<std::vector<bool>> released_all(const R& r, const std::vector<std::string>& keys)
{
    std::vector<bool> released(keys.size(), false);
    for (int row = 0; row < r.count(); ++row) {
        const auto at = std::find(keys.begin(), keys.end(), r.text(row, 0));
        if (at == keys.end() || released[static_cast<std::size_t>(at - keys.begin())])
            return errc::protocol_error;
        released[static_cast<std::size_t>(at - keys.begin())] = true;
    }
    return released;
}

/// acquire_all: no row when some were held (none taken), one (NULL, NULL) row when
/// one of them is in its lock-delay (none taken), else one (key, fence) row per
/// resource of `keys`, each with a positive fence.
template <table R>
result<std::vector<fence_token>> acquired_all(const R& r, const std::vector<std::string>& keys)
{
    if (r.count() == 0)
        return errc::contended;
    if (r.count() == 1 && r.null(0, 0) && r.null(0, 1))
        return errc::lock_delayed;
    if (static_cast<std::size_t>(r.count()) != keys.size())
        return errc::protocol_error;
    std::vector<fence_token> fences(keys.size(), 0);
    for (int row = 0; row < r.count(); ++row) {
        const auto fence = r.integer(row, 1);
        const auto at = std::find(keys.begin(), keys.end(), r.text(row, 0));
        if (at == keys.end() || !fence || *fence <= 0)
            return errc::protocol_error;
        fences[static_cast<std::size_t>(at - keys.begin())] = static_cast<fence_token>(*fence);
    }
    if (std::find(fences.begin(), fences.end(), fence_token{0}) != fences.end())
        return errc::protocol_error;
    return fences;
}

/// inspect: no row for a resource never locked, else (owner or null, fence,
/// milliseconds left).
template <table R>
result<lock_info> inspected(const R& r)
{
    lock_info info;
    if (r.count() == 0)
        return info;
    info.fence = static_cast<fence_token>(r.integer(0, 1).value_or(0));
    const auto left = r.integer(0, 2);
    if (!r.null(0, 0) && left && *left > 0) {
        info.held = true;
        info.owner = std::string{r.text(0, 0).substr(0, 8)};
        info.remaining = std::chrono::milliseconds{*left};
    }
    return info;
}

/// The bytes of lower-case hex text, as encode(..., 'hex') writes them; nullopt for
/// anything else.
inline std::optional<std::string> from_hex(std::string_view text)
{
    if (text.size() % 2 != 0)
        return std::nullopt;
    const auto digit = [](char c) -> int {
        if (c >= '0' && c <= '9')
            return c - '0';
        if (c >= 'a' && c <= 'f')
            return c - 'a' + 10;
        return -1;
    };
    std::string out;
    out.reserve(text.size() / 2);
    for (std::size_t i = 0; i < text.size(); i += 2) {
        const int high = digit(text[i]), low = digit(text[i + 1]);
        if (high < 0 || low < 0)
            return std::nullopt;
        out += static_cast<char>(high * 16 + low);
    }
    return out;
}

/// A proclaimed value as the statements keep it (hex, as encode() writes it), at most
/// max_leader_value_size bytes; nullopt with `why` set when it is not one.
inline std::optional<std::string> proclaimed_value(std::string_view hex, const char*& why)
{
    if (hex.size() > 2 * max_leader_value_size) {
        why = "a value longer than an election's values may be";
        return std::nullopt;
    }
    auto value = from_hex(hex);
    if (!value)
        why = "a value that is not hex as encode() writes it";
    return value;
}

/// list: one (hex id, owner, fence, milliseconds left) row per live lock, ids in
/// strictly increasing order; the statement passes only rows with an owner, a fence
/// and time left.
template <table R>
result<std::vector<lock_listing>> listed(const R& r)
{
    std::vector<lock_listing> out;
    out.reserve(static_cast<std::size_t>(std::max(r.count(), 0)));
    for (int row = 0; row < r.count(); ++row) {
        auto id = r.null(row, 0) ? std::nullopt : from_hex(r.text(row, 0));
        const auto fence = r.integer(row, 2);
        const auto left = r.integer(row, 3);
        if (!id || id->empty() || r.null(row, 1) || !fence || *fence <= 0 || !left || *left <= 0)
            return errc::protocol_error;
        if (!out.empty() && !(out.back().resource < *id))
            return errc::protocol_error;
        lock_listing l{.resource = std::move(*id), .lock = {}, .waiters = std::nullopt};
        l.lock.held = true;
        l.lock.owner = std::string{r.text(row, 1).substr(0, 8)};
        l.lock.fence = static_cast<fence_token>(*fence);
        l.lock.remaining = std::chrono::milliseconds{std::min<std::int64_t>(*left, std::int64_t{1} << 40)};
        out.push_back(std::move(l));
    }
    return out;
}

/// leader: no row when nobody holds the lock, else one (owner, fence, milliseconds
/// left, the value's fence, the value in hex or null). The value is this grant's only
/// when its fence is the grant's: a value an earlier grant left is not reported
/// (nullopt: not proclaimed yet), and one tagged with a later fence than the holder's,
/// a grant's fence without its value, or more than max_leader_value_size bytes are
/// replies no statement of the store makes. `problem` says what was wrong.
template <table R>
result<leader_info> leader_read(const R& r, std::string* problem = nullptr)
{
    const auto refuse = [&](const char* why) -> result<leader_info> {
        if (problem)
            *problem = std::string{"PostgreSQL leader answer: "} + why;
        return errc::protocol_error;
    };
    leader_info info;
    if (r.count() == 0)
        return info;
    if (r.count() != 1)
        return refuse("more than one row for one resource");
    const auto fence = r.integer(0, 1);
    const auto left = r.integer(0, 2);
    if (r.null(0, 0) || r.text(0, 0).empty())
        return refuse("a live grant without an owner");
    if (!fence || *fence <= 0)
        return refuse("a live grant without a positive fence");
    if (!left || *left <= 0)
        return refuse("a live grant without time left");
    info.epoch = static_cast<fence_token>(*fence);
    info.owner = std::string{r.text(0, 0).substr(0, 8)};
    info.remaining = std::chrono::milliseconds{std::min<std::int64_t>(*left, std::int64_t{1} << 40)};
    if (r.null(0, 3))
        return info; // never proclaimed on this resource
    const auto value_fence = r.integer(0, 3);
    if (!value_fence || *value_fence <= 0)
        return refuse("a value's fence that is not a positive number");
    if (*value_fence > *fence)
        return refuse("a value proclaimed for a later grant than the holder's");
    if (*value_fence < *fence)
        return info; // an earlier grant's value: this grant has not proclaimed yet
    if (r.null(0, 4))
        return refuse("the holder's grant proclaimed without a value");
    const char* why = nullptr;
    auto value = proclaimed_value(r.text(0, 4), why);
    if (!value)
        return refuse(why);
    info.value = std::move(*value);
    return info;
}

/// advisory_leader: one row of (exclusive holders of the key in pg_locks, 1 when the
/// resource's record names the holder's pid with the lease row's fence, the record's
/// fence, owner and value in hex, the lease row's fence). No holder: nobody leads. A
/// holder the record names: it leads, with the record's fence as its epoch and the
/// value recorded with its grant or proclaimed (nullopt when none was). A holder the
/// record does not name (a plain lock's, a foreign client): pending, with
/// the next fence as its epoch and no value. More than one exclusive holder, a named
/// holder without a positive fence or an owner, or a value no proclaim writes, are
/// replies no statement of the store makes. `problem` says what was wrong.
template <table R>
result<leader_info> advisory_leader_read(const R& r, std::string* problem = nullptr)
{
    const auto refuse = [&](const char* why) -> result<leader_info> {
        if (problem)
            *problem = std::string{"PostgreSQL advisory leader answer: "} + why;
        return errc::protocol_error;
    };
    if (r.count() != 1)
        return refuse("not one row for one resource");
    // A short row would read its missing cells as NULL: a value or a lease row's
    // fence that is not there would pass for one that is NULL.
    if (r.columns() != 6)
        return refuse("not the six columns of the statement");
    const auto holders = r.integer(0, 0);
    const auto named = r.integer(0, 1);
    if (!holders || *holders < 0 || *holders > 1)
        return refuse("not at most one exclusive holder of the key");
    if (!named || (*named != 0 && *named != 1) || (*named == 1 && *holders == 0))
        return refuse("a record that names a holder pg_locks does not show");
    leader_info info;
    if (*holders == 0)
        return info;
    if (*named == 0) {
        const auto last = r.null(0, 5) ? std::optional<std::int64_t>{0} : r.integer(0, 5);
        if (!last || *last < 0 || *last == std::numeric_limits<std::int64_t>::max())
            return refuse("a lease row's fence that is not a number below the largest bigint");
        info.epoch = static_cast<fence_token>(*last) + 1;
        return info;
    }
    const auto fence = r.integer(0, 2);
    if (!fence || *fence <= 0)
        return refuse("a recorded grant without a positive fence");
    if (r.null(0, 3) || r.text(0, 3).empty())
        return refuse("a recorded grant without an owner");
    info.epoch = static_cast<fence_token>(*fence);
    info.owner = std::string{r.text(0, 3).substr(0, 8)};
    if (r.null(0, 4))
        return info; // not proclaimed yet
    const char* why = nullptr;
    auto value = proclaimed_value(r.text(0, 4), why);
    if (!value)
        return refuse(why);
    info.value = std::move(*value);
    return info;
}

/// A fenced write: the rows it changed; none means the token was stale.
template <table R>
result<std::uint64_t> fenced(const R& r)
{
    const auto n = r.affected();
    if (n == 0)
        return errc::stale_fence;
    return n;
}

/// Why a connection attempt failed, from libpq's message. The connection asks libpq
/// for verbose messages while it connects, so that a refusal the server sent carries
/// its SQLSTATE ("FATAL:  28P01: password authentication failed ..."):
///  - class 28 (a role that does not exist, a wrong password, no pg_hba.conf entry)
///    is errc::auth_failed, as are libpq's own refusals to authenticate (no password
///    given where one is required): retrying cannot help;
///  - a database that does not exist (3D000) is that SQLSTATE (condition
///    invalid_argument), also not retried;
///  - anything else (refused, reset, the server starting up or shutting down, too many
///    connections) is errc::store_unavailable, which the retry policy retries.
inline std::error_code connect_refusal(std::string_view words)
{
    for (const std::string_view severity : {"FATAL:  ", "ERROR:  "}) {
        for (auto at = words.find(severity); at != std::string_view::npos; at = words.find(severity, at + 1)) {
            const auto rest = words.substr(at + severity.size());
            if (rest.size() < 6 || rest[5] != ':' || !pack_sqlstate(rest.substr(0, 5)))
                continue;
            const auto state = rest.substr(0, 5);
            if (state.substr(0, 2) == "28")
                return make_error_code(errc::auth_failed);
            if (state == "3D000")
                return sqlstate(state);
            return make_error_code(errc::store_unavailable);
        }
    }
    for (const std::string_view client_side :
         {"no password supplied", "password is required", "authentication method requirement"})
        if (words.find(client_side) != std::string_view::npos)
            return make_error_code(errc::auth_failed);
    return make_error_code(errc::store_unavailable);
}

} // namespace distlock::postgres::detail::answers
