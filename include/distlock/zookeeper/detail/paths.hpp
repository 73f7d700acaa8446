// distlock/zookeeper/detail/paths.hpp: the node layout, as pure functions (no I/O),
// unit-tested on their own.
//
// Layout: a waiter's node is  <chroot><prefix>/<escaped resource>/<owner token>-<seq>
// where <owner token> is the lock() call's 32 hex digits and <seq> the sequence number
// the server appends (ten digits). The resource's node is a container (deleted by the
// server once its last child is gone); the prefix's node is persistent. Escaping
// (distlock/util/escape.hpp) keeps [A-Za-z0-9._:-] and writes every other byte as
// %XX, so a resource's node is one path component that no other id shares; the names
// ZooKeeper forbids ("." and "..") have their dots escaped too.
#pragma once

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

/// A waiter's node name, taken apart.
struct waiter_name {
    std::string_view owner; ///< 32 hex digits
    std::int64_t sequence = 0;
    std::string_view name;  ///< the whole name
};

/// `name` as a waiter's node; nullopt for a child the store did not make.
inline std::optional<waiter_name> parse_waiter(std::string_view name)
{
    constexpr std::size_t hex = 2 * owner_token::size;
    if (name.size() < hex + 2 || name[hex] != '-')
        return std::nullopt;
    const auto owner = name.substr(0, hex);
    const auto digit = [](char c) { return c >= '0' && c <= '9'; };
    if (!std::all_of(owner.begin(), owner.end(), [&](char c) { return digit(c) || (c >= 'a' && c <= 'f'); }))
        return std::nullopt;
    const auto digits = name.substr(hex + 1);
    // The server writes %010d: ten digits (a negative number after 2^31 creates under
    // one node; the queue order is then undefined, as for ZooKeeper's own recipes).
    if (!std::all_of(digits.begin(), digits.end(), digit))
        return std::nullopt;
    std::int64_t seq = 0;
    const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), seq);
    if (ec != std::errc{} || end != digits.data() + digits.size())
        return std::nullopt;
    return waiter_name{owner, seq, name};
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
