// distlock/redis/detail/cluster.hpp: what a client of a Redis Cluster computes and
// reads, without I/O: the hash slot of a key, MOVED/ASK redirects, the slot map of
// CLUSTER SLOTS, and Sentinel's answer to get-master-addr-by-name. Fuzzed with the
// RESP parser (test/fuzz/resp_parser.cpp).
#pragma once

#include <distlock/util/result_type.hpp>
#include <distlock/error.hpp>
#include <distlock/redis/node_address.hpp>
#include <distlock/redis/resp/value.hpp>

#include <algorithm>
#include <array>
#include <charconv>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace distlock::redis::detail {

using redis::node_address;
using redis::parse_address;

inline constexpr std::uint16_t slot_count = 16384;

/// CRC16-CCITT of each byte value, for crc16_step: every request hashes its key.
inline constexpr auto crc16_table = [] {
    std::array<std::uint16_t, 256> table{};
    for (unsigned byte = 0; byte < 256; ++byte) {
        auto crc = static_cast<std::uint16_t>(byte << 8);
        for (int bit = 0; bit < 8; ++bit)
            crc = (crc & 0x8000) ? static_cast<std::uint16_t>((crc << 1) ^ 0x1021) : static_cast<std::uint16_t>(crc << 1);
        table[byte] = crc;
    }
    return table;
}();

/// One byte of CRC16-CCITT (below).
constexpr std::uint16_t crc16_step(std::uint16_t crc, char c) noexcept
{
    return static_cast<std::uint16_t>((crc << 8) ^ crc16_table[((crc >> 8) ^ static_cast<unsigned char>(c)) & 0xff]);
}

/// CRC16-CCITT (XMODEM: polynomial 0x1021, initial 0), the checksum Redis Cluster
/// hashes keys with.
constexpr std::uint16_t crc16(std::string_view bytes) noexcept
{
    std::uint16_t crc = 0;
    for (const char c : bytes)
        crc = crc16_step(crc, c);
    return crc;
}

/// The slot of `key`: of its hash tag (between the first '{' and the next '}') when
/// that is not empty, else of the whole key.
constexpr std::uint16_t hash_slot(std::string_view key) noexcept
{
    if (const auto open = key.find('{'); open != std::string_view::npos) {
        const auto close = key.find('}', open + 1);
        if (close != std::string_view::npos && close > open + 1)
            key = key.substr(open + 1, close - open - 1);
    }
    return static_cast<std::uint16_t>(crc16(key) % slot_count);
}

/// A hash tag for every slot: the fence key that serves a slot's resources is
/// "<prefix>:{<tag>}:fence" (redis/scripts.hpp), in their slot, since a script may
/// only touch keys of one slot in a Redis Cluster. Each tag is '$' and one to three
/// letters or digits (the search would go on to four; three cover every slot), '$'
/// keeping fence keys apart from every resource's, whose tags start with '#' or '@'.
/// A slot's tag is the shortest such string that hashes to it, first in alphabet
/// order, so every client computes the same one. Built once per process, on first
/// use (about 250,000 one-byte CRC steps).
class slot_tags {
public:
    static const slot_tags& table()
    {
        static const slot_tags built;
        return built;
    }

    std::string_view operator[](std::uint16_t slot) const noexcept
    {
        return {tags_[slot % slot_count].data(), sizes_[slot % slot_count]};
    }

private:
    static constexpr std::size_t longest = 5; // '$' and up to four characters
    static constexpr std::string_view alphabet = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

    slot_tags()
    {
        std::array<char, longest> tag{'$'};
        const std::uint16_t start = crc16_step(0, '$');
        // Breadth first: every string of one character, then of two, ...: the CRC of
        // a longer string extends its prefix's by one byte step.
        for (std::size_t length = 2; length <= longest && filled_ < slot_count; ++length)
            extend(tag, 1, length, start);
    }

    void extend(std::array<char, longest>& tag, std::size_t at, std::size_t length, std::uint16_t crc)
    {
        for (const char c : alphabet) {
            tag[at] = c;
            const auto next = crc16_step(crc, c);
            if (at + 1 < length) {
                extend(tag, at + 1, length, next);
            } else if (const auto slot = next % slot_count; sizes_[slot] == 0) {
                tags_[slot] = tag;
                sizes_[slot] = static_cast<std::uint8_t>(length);
                ++filled_;
            }
        }
    }

    std::array<std::array<char, longest>, slot_count> tags_{};
    std::array<std::uint8_t, slot_count> sizes_{};
    std::size_t filled_ = 0;
};

/// A redirect a cluster node answers with instead of running the command.
struct redirect {
    enum class kind { moved, ask };
    redirect::kind kind = kind::moved;
    std::uint16_t slot = 0;
    node_address to;
};

/// "MOVED 3999 127.0.0.1:6381" or "ASK 3999 127.0.0.1:6381"; nullopt for any other
/// text. An empty host ("MOVED 3999 :6381") means the node that answered, whose
/// address the caller passes as `answering`.
inline std::optional<redirect> parse_redirect(std::string_view error, const node_address& answering)
{
    redirect r;
    if (error.starts_with("MOVED "))
        error.remove_prefix(6);
    else if (error.starts_with("ASK ")) {
        r.kind = redirect::kind::ask;
        error.remove_prefix(4);
    } else
        return std::nullopt;
    const auto space = error.find(' ');
    if (space == std::string_view::npos)
        return std::nullopt;
    const auto slot = error.substr(0, space);
    const auto [p, ec] = std::from_chars(slot.data(), slot.data() + slot.size(), r.slot);
    if (ec != std::errc{} || p != slot.data() + slot.size() || r.slot >= slot_count)
        return std::nullopt;
    auto where = error.substr(space + 1);
    if (where.starts_with(':')) {
        auto port_only = parse_address("x" + std::string{where});
        if (!port_only)
            return std::nullopt;
        r.to = {answering.host, port_only->port};
        return r;
    }
    auto to = parse_address(where);
    if (!to)
        return std::nullopt;
    r.to = std::move(*to);
    return r;
}

/// Replies that ask the client to try again shortly, the command not run: a slot in
/// the middle of a migration (TRYAGAIN), a cluster without a quorum of primaries or
/// with unserved slots (CLUSTERDOWN), a replica asked to write (READONLY), a server
/// still loading its data (LOADING), a replica not yet promoted (MASTERDOWN).
inline bool is_transient_refusal(std::string_view error) noexcept
{
    return error.starts_with("TRYAGAIN") || error.starts_with("CLUSTERDOWN") || error.starts_with("READONLY") ||
           error.starts_with("LOADING") || error.starts_with("MASTERDOWN");
}

/// Which node serves each slot, and the cluster's identity.
struct slot_map {
    std::vector<node_address> primaries;                // each serves some slots
    std::array<std::int16_t, slot_count> owner{};        // index into primaries, -1 unserved
    std::vector<std::string> primary_ids;               // node ids, as in primaries

    slot_map() { owner.fill(-1); }

    const node_address* node_for(std::uint16_t slot) const
    {
        const auto i = owner[slot % slot_count];
        return i < 0 ? nullptr : &primaries[static_cast<std::size_t>(i)];
    }

    /// The sorted primary node ids joined by ',': one string per cluster layout,
    /// whichever node answered.
    std::string identity() const
    {
        auto ids = primary_ids;
        std::sort(ids.begin(), ids.end());
        std::string out;
        for (const auto& id : ids) {
            if (!out.empty())
                out.push_back(',');
            out += id;
        }
        return out;
    }

    /// Drops the primaries that serve no slot (owner's indexes stay 16 bits however
    /// many redirects name new nodes before the map is learnt again).
    void forget_idle()
    {
        std::vector<std::int16_t> renumbered(primaries.size(), -1);
        std::vector<char> used(primaries.size(), 0);
        for (const auto o : owner)
            if (o >= 0)
                used[static_cast<std::size_t>(o)] = 1;
        std::vector<node_address> kept;
        std::vector<std::string> kept_ids;
        for (std::size_t i = 0; i < primaries.size(); ++i)
            if (used[i]) {
                renumbered[i] = static_cast<std::int16_t>(kept.size());
                kept.push_back(std::move(primaries[i]));
                kept_ids.push_back(std::move(primary_ids[i]));
            }
        for (auto& o : owner)
            if (o >= 0)
                o = renumbered[static_cast<std::size_t>(o)];
        primaries = std::move(kept);
        primary_ids = std::move(kept_ids);
    }

    /// MOVED: `slot` now lives on `to`.
    void move(std::uint16_t slot, const node_address& to)
    {
        slot %= slot_count;
        auto at = std::find(primaries.begin(), primaries.end(), to);
        if (at == primaries.end()) {
            if (primaries.size() >= slot_count) { // room for one more: at most 16383 serve a slot then
                owner[slot] = -1;
                forget_idle();
            }
            primaries.push_back(to);
            primary_ids.emplace_back();
            at = primaries.end() - 1;
        }
        owner[slot] = static_cast<std::int16_t>(at - primaries.begin());
    }
};

/// Parses a CLUSTER SLOTS reply: an array of [first slot, last slot, primary,
/// replicas...], each node [host, port, id, ...]. A primary named "" or "?" is the
/// node that answered (`answering`). errc::protocol_error for anything else.
inline result<slot_map> parse_cluster_slots(const resp::value& v, const node_address& answering)
{
    if (v.type != resp::type::array)
        return errc::protocol_error;
    slot_map map;
    for (const auto& range : v.elements) {
        if (range.type != resp::type::array || range.elements.size() < 3)
            return errc::protocol_error;
        const auto& first = range.elements[0];
        const auto& last = range.elements[1];
        const auto& primary = range.elements[2];
        if (first.type != resp::type::integer || last.type != resp::type::integer || first.integer < 0 ||
            last.integer < first.integer || last.integer >= slot_count)
            return errc::protocol_error;
        if (primary.type != resp::type::array || primary.elements.size() < 2 || !primary.elements[0].is_string() ||
            primary.elements[1].type != resp::type::integer || primary.elements[1].integer <= 0 ||
            primary.elements[1].integer > 65535)
            return errc::protocol_error;
        node_address at{primary.elements[0].text, static_cast<std::uint16_t>(primary.elements[1].integer)};
        if (at.host.empty() || at.host == "?")
            at.host = answering.host;
        std::string id;
        if (primary.elements.size() > 2 && primary.elements[2].is_string())
            id = primary.elements[2].text;
        const auto found = std::find(map.primaries.begin(), map.primaries.end(), at);
        const auto index = static_cast<std::size_t>(found - map.primaries.begin());
        if (found == map.primaries.end()) {
            // Never more primaries than slots (owner's index is 16 bits).
            if (map.primaries.size() >= slot_count)
                return errc::protocol_error;
            map.primaries.push_back(std::move(at));
            map.primary_ids.push_back(std::move(id));
        }
        for (auto s = first.integer; s <= last.integer; ++s)
            map.owner[static_cast<std::size_t>(s)] = static_cast<std::int16_t>(index);
    }
    if (map.primaries.empty())
        return errc::protocol_error;
    return map;
}

/// Parses Sentinel's reply to SENTINEL get-master-addr-by-name: [host, port], or a
/// null when it does not know the name (errc::store_unavailable).
inline result<node_address> parse_master_address(const resp::value& v)
{
    if (v.is_null())
        return errc::store_unavailable;
    if (v.type != resp::type::array || v.elements.size() != 2 || !v.elements[0].is_string() ||
        !v.elements[1].is_string() || v.elements[0].text.empty())
        return errc::protocol_error;
    std::uint16_t port = 0;
    const auto& p = v.elements[1].text;
    const auto [end, ec] = std::from_chars(p.data(), p.data() + p.size(), port);
    if (ec != std::errc{} || end != p.data() + p.size() || port == 0)
        return errc::protocol_error;
    return node_address{v.elements[0].text, port};
}

} // namespace distlock::redis::detail
