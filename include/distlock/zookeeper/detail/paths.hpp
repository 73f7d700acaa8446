// distlock/zookeeper/detail/paths.hpp: the node layout, as pure functions (no I/O),
// unit-tested on their own.
//
// Layout: a waiter's node is  <chroot><prefix>/<escaped resource>/<owner token>-<mark><seq>
// where <owner token> is the lock() call's 32 hex digits, <seq> the sequence number
// the server appends (ten digits) and <mark> says what the entry asks for:
//  - nothing: a mutex's lock (exclusive);
//  - "__WRIT__": a shared mutex's writer (exclusive);
//  - "__READ__": a shared mutex's reader (shared);
//  - "__PERM_<N>__": a permit of a semaphore of N (N from 1, in decimal).
// The marks are Apache Curator's read-write lock markers, just before the sequence
// number as there, so that a client of either can tell readers from writers. A
// mutex's node and a writer's are both exclusive: on one resource they exclude each
// other and every shared entry. A permit's count is in its name, not its data, because
// a node's data is its holder's mark (store.hpp), and so that any reader of the queue
// sees which count every entry agreed to.
// The resource's node is a container (deleted by the server once its last child is
// gone); the prefix's node is persistent. Escaping
// (distlock/util/escape.hpp) keeps [A-Za-z0-9._:-] and writes every other byte as
// %XX, so a resource's node is one path component that no other id shares; the names
// ZooKeeper forbids ("." and "..") have their dots escaped too.
#pragma once

#include <distlock/lock_mode.hpp>
#include <distlock/util/escape.hpp>
#include <distlock/owner_token.hpp>

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

/// The name a waiter asks for (the server appends the sequence number).
inline std::string waiter_prefix(const owner_token& owner) { return owner.to_hex() + "-"; }

/// The marks of the entries of a shared mutex and a semaphore (see the layout above).
inline constexpr std::string_view reader_mark = "__READ__";
inline constexpr std::string_view writer_mark = "__WRIT__";
inline constexpr std::string_view permit_mark = "__PERM_";
inline constexpr std::string_view mark_end = "__";

/// The name an entry of `mode` (with `permits` for a semaphore's permit, else 0) asks
/// for, the sequence number to be appended.
inline std::string entry_prefix(std::string_view owner_hex, lock_mode mode, std::uint32_t permits)
{
    std::string out{owner_hex};
    out += '-';
    if (mode == lock_mode::exclusive)
        out += writer_mark;
    else if (permits == 0)
        out += reader_mark;
    else
        out.append(permit_mark).append(std::to_string(permits)).append(mark_end);
    return out;
}

/// A waiter's node name, taken apart.
struct waiter_name {
    std::string_view owner; ///< 32 hex digits
    std::int64_t sequence = 0;
    std::string_view name;  ///< the whole name
    lock_mode mode = lock_mode::exclusive;
    std::uint32_t permits = 0; ///< a permit's count (shared); 0 otherwise
};

namespace name_parts {
inline bool digits_only(std::string_view s)
{
    return std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
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
} // namespace name_parts

/// Whether `name` starts as an entry of this store does: 32 lower-case hex digits
/// and a dash.
inline bool owned_name(std::string_view name)
{
    constexpr std::size_t hex = 2 * owner_token::size;
    if (name.size() < hex + 1 || name[hex] != '-')
        return false;
    return std::all_of(name.begin(), name.begin() + hex,
                       [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

/// `name` as a waiter's node; nullopt for a child the store did not make.
inline std::optional<waiter_name> parse_waiter(std::string_view name)
{
    constexpr std::size_t hex = 2 * owner_token::size;
    if (!owned_name(name))
        return std::nullopt;
    waiter_name w{name.substr(0, hex), 0, name, lock_mode::exclusive, 0};
    auto rest = name.substr(hex + 1);
    if (rest.starts_with(writer_mark)) {
        rest.remove_prefix(writer_mark.size());
    } else if (rest.starts_with(reader_mark)) {
        rest.remove_prefix(reader_mark.size());
        w.mode = lock_mode::shared;
    } else if (rest.starts_with(permit_mark)) {
        rest.remove_prefix(permit_mark.size());
        const auto end = rest.find(mark_end);
        if (end == std::string_view::npos)
            return std::nullopt;
        const auto n = name_parts::number<std::uint32_t>(rest.substr(0, end));
        if (!n || *n == 0)
            return std::nullopt;
        rest.remove_prefix(end + mark_end.size());
        w.mode = lock_mode::shared;
        w.permits = *n;
    }
    // The server writes %010d: ten digits (a negative number after 2^31 creates under
    // one node; the queue order is then undefined, as for ZooKeeper's own recipes).
    const auto seq = name_parts::number<std::int64_t>(rest);
    if (!seq)
        return std::nullopt;
    w.sequence = *seq;
    return w;
}

/// A child that claims to be a shared mutex's or a semaphore's entry (an owner token,
/// a dash and a mark) and does not read as one: the queue cannot be judged with it.
inline bool unreadable_entry(std::string_view name)
{
    constexpr std::size_t hex = 2 * owner_token::size;
    return owned_name(name) && name.substr(hex + 1).starts_with(mark_end) && !parse_waiter(name);
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

/// Children come back unsorted: ordered by sequence number here, ignoring names the
/// store did not make. The waiter is the child named `exact` when given (a node of an
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

} // namespace distlock::zookeeper::detail
