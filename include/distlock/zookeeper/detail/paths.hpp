// distlock/zookeeper/detail/paths.hpp: the node layout, as pure functions (no I/O),
// unit-tested on their own.
//
// Layout: a waiter's node is  <chroot><prefix>/<escaped resource>/<name><seq>
// where <seq> is the sequence number the server appends (ten digits) and <name> is
// written in the store's dialect (config.hpp), from the lock() call's owner token
// (32 hex digits) and what the entry asks for:
//
//   entry              curator                      kazoo             distlock
//   mutex              _c_<uuid>-lock-              <hex>__lock__     <hex>-
//   shared writer      _c_<uuid>-__WRIT__           <hex>__lock__     <hex>-__WRIT__
//   shared reader      _c_<uuid>-__READ__           <hex>__rlock__    <hex>-__READ__
//   permit of N        _c_<uuid>-__PERM_<N>__       <hex>__PERM_<N>__ <hex>-__PERM_<N>__
//
// (<uuid> is the owner token written as a UUID, 8-4-4-4-12 hex digits). Curator's
// InterProcessMutex names its nodes `_c_<uuid>-lock-<seq>` in protected mode and
// InterProcessReadWriteLock `_c_<uuid>-__WRIT__<seq>` / `_c_<uuid>-__READ__<seq>`;
// kazoo's Lock `<uuid hex>__lock__<seq>` and ReadLock `<uuid hex>__rlock__<seq>`.
// The latch dialect writes the curator dialect's names but for a mutex's entry,
// `_c_<uuid>-latch-`, as Curator's LeaderLatch names its participants (their data is
// the participant's id: see election.hpp).
//
// Reading is the same in every dialect, so that clients of all of them (and Curator's
// and kazoo's) queue together: every child whose name ends in a sequence number is a
// waiter, ordered by that number, whoever made it; one whose name ends in `__READ__`
// or `__rlock__` before its number is a reader, one ending in `__PERM_<N>__` a permit
// of N, every other one exclusive. A child without a sequence number was not made by
// a sequential create, so no lock recipe's waiter: it is not read as one. The owner of
// a node is read from the start of its name (`_c_<uuid>-` or 32 hex digits then `-` or
// `__`): this client finds its own nodes by it after a lost reply.
// A permit's count is in its name, not its data, because a node's data is its holder's
// mark (store.hpp), and so that any reader of the queue sees which count every entry
// agreed to.
// The resource's node is a container (deleted by the server once its last child is
// gone); the prefix's node is persistent. Escaping
// (distlock/util/escape.hpp) keeps [A-Za-z0-9._:-] and writes every other byte as
// %XX, so a resource's node is one path component that no other id shares; the names
// ZooKeeper forbids ("." and "..") have their dots escaped too.
#pragma once

#include <distlock/lock_mode.hpp>
#include <distlock/owner_token.hpp>
#include <distlock/util/escape.hpp>
#include <distlock/zookeeper/dialect.hpp>

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace distlock::zookeeper::detail {

/// The one path component that names `resource`.
inline std::string component(std::string_view resource)
{
    if (resource == ".")
        return "%2E";
    if (resource == "..")
        return "%2E%2E";
    return distlock::util::escape(resource);
}

/// The inverse of component(); nullopt for a name component() never writes.
inline std::optional<std::string> resource_of(std::string_view name)
{
    if (name == "%2E")
        return std::string{"."};
    if (name == "%2E%2E")
        return std::string{".."};
    auto id = distlock::util::unescape(name);
    if (!id || id->empty() || *id == "." || *id == "..")
        return std::nullopt;
    return id;
}

/// `parent`/`name``suffix`, made in one allocation (paths are built on every request).
inline std::string child_path(std::string_view parent, std::string_view name, std::string_view suffix = {})
{
    std::string out;
    out.reserve(parent.size() + 1 + name.size() + suffix.size());
    out.append(parent).append(1, '/').append(name).append(suffix);
    return out;
}

/// The node whose children are the waiters for `resource`.
inline std::string resource_node(std::string_view root, std::string_view resource)
{
    return child_path(root, component(resource));
}

/// The marks of the entries (see the layout above).
inline constexpr std::string_view reader_mark = "__READ__";
inline constexpr std::string_view writer_mark = "__WRIT__";
inline constexpr std::string_view curator_mutex_mark = "lock-";
inline constexpr std::string_view curator_latch_mark = "latch-";
inline constexpr std::string_view kazoo_lock_mark = "__lock__";
inline constexpr std::string_view kazoo_reader_mark = "__rlock__";
inline constexpr std::string_view permit_mark = "__PERM_";
inline constexpr std::string_view mark_end = "__";
inline constexpr std::string_view curator_protection = "_c_";

/// The digits the server appends to a sequential node's name (%010d).
inline constexpr std::size_t sequence_digits = 10;

/// `owner_hex` (32 hex digits) as a UUID: 8-4-4-4-12.
inline std::string owner_uuid(std::string_view owner_hex)
{
    std::string out;
    out.reserve(owner_hex.size() + 4);
    for (std::size_t i = 0; i < owner_hex.size(); ++i) {
        if (i == 8 || i == 12 || i == 16 || i == 20)
            out += '-';
        out += owner_hex[i];
    }
    return out;
}

/// The name an entry of `mode` (with `permits` for a semaphore's permit, else 0; a
/// mutex's entry when `mutex`) asks for in dialect `d`, the sequence number to be
/// appended.
inline std::string entry_prefix(dialect d, std::string_view owner_hex, lock_mode mode, std::uint32_t permits,
                                bool mutex = false)
{
    std::string out;
    if (d == dialect::curator || d == dialect::latch)
        out.append(curator_protection).append(owner_uuid(owner_hex)).append(1, '-');
    else
        out.append(owner_hex);
    if (d == dialect::distlock)
        out += '-';
    if (mode == lock_mode::shared && permits > 0)
        return out.append(permit_mark).append(std::to_string(permits)).append(mark_end);
    switch (d) {
    case dialect::curator:
        return out.append(mode == lock_mode::shared ? reader_mark : mutex ? curator_mutex_mark : writer_mark);
    case dialect::latch:
        return out.append(mode == lock_mode::shared ? reader_mark : mutex ? curator_latch_mark : writer_mark);
    case dialect::kazoo:
        return out.append(mode == lock_mode::shared ? kazoo_reader_mark : kazoo_lock_mark);
    case dialect::distlock:
        break;
    }
    return mutex ? out : out.append(mode == lock_mode::shared ? reader_mark : writer_mark);
}

/// The name a mutex's waiter asks for in dialect `d` (the server appends the sequence
/// number).
inline std::string waiter_prefix(const owner_token& owner, dialect d = default_dialect)
{
    return entry_prefix(d, owner.to_hex(), lock_mode::exclusive, 0, true);
}

/// A waiter's node name, taken apart.
struct waiter_name {
    std::string owner;      ///< 32 hex digits; empty when the name carries none this store reads
    std::int64_t sequence = 0;
    std::string_view name;  ///< the whole name
    lock_mode mode = lock_mode::exclusive;
    std::uint32_t permits = 0; ///< a permit's count (shared); 0 otherwise
    /// Named as a permit whose count does not read: a waiter (exclusive, for whoever
    /// queues behind it), but no count can be agreed with it.
    bool unreadable = false;
};

namespace name_parts {
inline bool digits_only(std::string_view s)
{
    return std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

inline bool lower_hex(std::string_view s)
{
    return std::all_of(s.begin(), s.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

template <class Int>
std::optional<Int> number(std::string_view digits)
{
    Int n = 0;
    if (digits.empty() || !digits_only(digits))
        return std::nullopt;
    const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), n);
    if (ec != std::errc{} || end != digits.data() + digits.size())
        return std::nullopt;
    return n;
}

/// The sequence number that ends `name`: ten digits, or a '-' and nine (the server's
/// %010d of a counter that went past 2^31; the queue's order is then undefined, as
/// for ZooKeeper's own recipes).
inline std::optional<std::int32_t> sequence(std::string_view name)
{
    if (name.size() < sequence_digits)
        return std::nullopt;
    auto tail = name.substr(name.size() - sequence_digits);
    bool negative = false;
    if (tail.front() == '-') {
        negative = true;
        tail.remove_prefix(1);
    }
    const auto n = number<std::int64_t>(tail);
    if (!n)
        return std::nullopt;
    const auto value = negative ? -*n : *n;
    if (value > INT32_MAX || value < INT32_MIN)
        return std::nullopt;
    return static_cast<std::int32_t>(value);
}

/// The owner token a name starts with, as 32 hex digits: `_c_<uuid>-` (Curator's
/// protected names), or 32 hex digits followed by `-` or `__`; empty for none.
inline std::string owner(std::string_view stem)
{
    constexpr std::size_t hex = 2 * owner_token::size;
    if (stem.starts_with(curator_protection)) {
        const auto uuid = stem.substr(curator_protection.size());
        if (uuid.size() < hex + 5 || uuid[hex + 4] != '-')
            return {};
        std::string out;
        out.reserve(hex);
        for (std::size_t i = 0; i < hex + 4; ++i) {
            const bool dash = i == 8 || i == 13 || i == 18 || i == 23;
            if (dash != (uuid[i] == '-'))
                return {};
            if (!dash)
                out += uuid[i];
        }
        return lower_hex(out) ? out : std::string{};
    }
    if (stem.size() < hex + 1 || !lower_hex(stem.substr(0, hex)))
        return {};
    const auto rest = stem.substr(hex);
    if (rest.front() == '-' || rest.starts_with(mark_end))
        return std::string{stem.substr(0, hex)};
    return {};
}
} // namespace name_parts

/// `name` as a waiter's node (whoever made it); nullopt for a child without a
/// sequence number.
inline std::optional<waiter_name> parse_waiter(std::string_view name)
{
    const auto seq = name_parts::sequence(name);
    if (!seq)
        return std::nullopt;
    const auto stem = name.substr(0, name.size() - sequence_digits);
    waiter_name w{name_parts::owner(stem), *seq, name, lock_mode::exclusive, 0, false};
    if (stem.ends_with(reader_mark) || stem.ends_with(kazoo_reader_mark)) {
        w.mode = lock_mode::shared;
        return w;
    }
    const auto permit = stem.rfind(permit_mark);
    if (permit == std::string_view::npos)
        return w;
    auto count = stem.substr(permit + permit_mark.size());
    const auto n = count.ends_with(mark_end)
                       ? name_parts::number<std::uint32_t>(count.substr(0, count.size() - mark_end.size()))
                       : std::nullopt;
    if (!n || *n == 0) {
        w.unreadable = true;
        return w;
    }
    w.mode = lock_mode::shared;
    w.permits = *n;
    return w;
}

/// Whether `name` is a Curator LeaderLatch participant's (whoever made it: Curator, or
/// this store in the latch dialect): `latch-` just before its sequence number. Its
/// data as created is the participant's id (election.hpp).
inline bool latch_entry(std::string_view name)
{
    if (!name_parts::sequence(name))
        return false;
    return name.substr(0, name.size() - sequence_digits).ends_with(curator_latch_mark);
}

/// A child named as a permit whose count does not read: the queue's shared entries
/// cannot be judged with it.
inline bool unreadable_entry(std::string_view name)
{
    const auto w = parse_waiter(name);
    return w && w->unreadable;
}

/// The last component of a path.
inline std::string_view base_name(std::string_view path)
{
    const auto slash = path.rfind('/');
    return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

/// Where one waiter stands among a resource's children. The names are views of the
/// children stand() was given.
struct standing {
    bool found = false;            ///< a child of `owner` is among them
    std::string_view mine;         ///< its name
    std::int64_t sequence = 0;     ///< its sequence number
    bool first = false;            ///< it has the lowest sequence: it holds the lock
    std::string_view predecessor;  ///< the name just before it, when not first
    std::int64_t predecessor_sequence = 0;
    std::string_view holder;       ///< the name with the lowest sequence, if any
    std::size_t queued = 0;        ///< the waiters' nodes, the holder's included
};

/// Children come back unsorted: ordered by sequence number here, ignoring children
/// without one. The waiter is the child named `exact` when given (a node of an
/// earlier session with the same owner may linger until the server expires it), else
/// the first child of `owner_hex`.
inline standing stand(const std::vector<std::string>& children, std::string_view owner_hex,
                      std::string_view exact = {})
{
    std::vector<waiter_name> waiters;
    waiters.reserve(children.size());
    for (const auto& c : children)
        if (auto w = parse_waiter(c))
            waiters.push_back(*w);
    std::sort(waiters.begin(), waiters.end(),
              [](const waiter_name& a, const waiter_name& b) { return a.sequence < b.sequence; });
    standing s;
    s.queued = waiters.size();
    if (!waiters.empty())
        s.holder = waiters.front().name;
    for (std::size_t i = 0; i < waiters.size(); ++i) {
        if (exact.empty() ? waiters[i].owner != owner_hex : waiters[i].name != exact)
            continue;
        s.found = true;
        s.mine = waiters[i].name;
        s.sequence = waiters[i].sequence;
        s.first = i == 0;
        if (i > 0) {
            s.predecessor = waiters[i - 1].name;
            s.predecessor_sequence = waiters[i - 1].sequence;
        }
        break;
    }
    return s;
}

/// The child of a resource's node that keeps its lock-delay (store.hpp, "Lock-delay"
/// in docs/zookeeper.md). Persistent and without a sequence number, so that no
/// dialect's reader (nor Curator's or kazoo's, which sort it after every sequence
/// number and never take it as a contender) reads it as a waiter; and a child, so
/// that the container it is in is not reaped while it lasts.
inline constexpr std::string_view delay_node = "__distlock_delay__";

/// What the lock-delay node says: the grant of the node `holder` is marked (ended
/// false: a release deletes the mark; the node gone otherwise ends the grant), or
/// that grant ended without a release (ended true: a tombstone, from the server's
/// mtime of the write that said so, for delay_ms).
struct delay_mark {
    bool ended = false;
    std::int64_t delay_ms = 0;
    std::string holder;
};

/// The longest delay a mark may carry (a lock's TTL is far shorter): larger ones are
/// no mark this store writes.
inline constexpr std::int64_t max_delay_ms = std::int64_t{1} << 40;

inline constexpr std::string_view delay_armed_word = "distlock-delay armed ";
inline constexpr std::string_view delay_ended_word = "distlock-delay ended ";

/// The node's data: "distlock-delay armed|ended <ms> <holder's node name>".
inline std::string delay_data(const delay_mark& m)
{
    std::string out{m.ended ? delay_ended_word : delay_armed_word};
    return out.append(std::to_string(m.delay_ms)).append(1, ' ').append(m.holder);
}

/// The inverse of delay_data(); nullopt for data it never writes (a holder that is no
/// waiter's name, a delay out of range).
inline std::optional<delay_mark> parse_delay(std::string_view data)
{
    delay_mark m;
    if (data.starts_with(delay_armed_word))
        data.remove_prefix(delay_armed_word.size());
    else if (data.starts_with(delay_ended_word)) {
        data.remove_prefix(delay_ended_word.size());
        m.ended = true;
    } else
        return std::nullopt;
    const auto space = data.find(' ');
    if (space == std::string_view::npos)
        return std::nullopt;
    const auto ms = name_parts::number<std::int64_t>(data.substr(0, space));
    const auto holder = data.substr(space + 1);
    const bool plain = std::all_of(holder.begin(), holder.end(), [](char c) { return c > ' ' && c != '/' && c != 0x7f; });
    if (!ms || *ms > max_delay_ms || !plain || !parse_waiter(holder))
        return std::nullopt;
    m.delay_ms = *ms;
    m.holder = std::string{holder};
    return m;
}

/// Whether the lock-delay node is among `children`.
inline bool has_delay_node(const std::vector<std::string>& children)
{
    return std::find(children.begin(), children.end(), delay_node) != children.end();
}

} // namespace distlock::zookeeper::detail
