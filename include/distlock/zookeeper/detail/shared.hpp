// distlock/zookeeper/detail/shared.hpp: the shared grants of a resource's queue (a
// shared mutex's readers and writers, a semaphore's permits), as pure functions (no
// I/O), unit-tested on their own.
//
// Every entry is a child of the resource's node (paths.hpp names them; a node of any
// other client is an entry too), and the queue is ordered by sequence number, as the
// mutex's. Whether an entry holds follows from
// the children alone: an exclusive one when it is the oldest, a reader when no
// exclusive entry is older, a permit of N when fewer than N entries are older.
//
// A permit also has a number (its slot): the lowest one no other holder has. Holders
// are granted concurrently, each by its own read, so the numbers cannot follow from the
// children: they are recorded in the resource's node's data, one line per holder
// ("<slot> <sequence>\n", by slot), and a holder takes its number with a setData
// conditional on the version it read, so that two holders never take the same one. A
// holder that left keeps its line until the next holder writes the record: a line
// whose entry is not among the children read after the record is dropped then (the
// entry was there when its line was written, and a sequence number is never given
// twice under one resource's node).
#pragma once

#include <distlock/claim.hpp>
#include <distlock/zookeeper/detail/paths.hpp>

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace distlock::zookeeper::detail {

/// Where one shared mutex's or semaphore's entry stands among its resource's children.
struct shared_standing {
    bool found = false;         ///< the entry is among them
    std::int64_t sequence = 0;  ///< its sequence number
    lock_mode mode = lock_mode::exclusive;
    std::uint32_t permits = 0;  ///< its count, for a permit
    bool granted = false;       ///< it holds, by the rules of its mode
    /// When not granted: the entries whose going may let it hold. It cannot hold while
    /// all of them are there: a writer's predecessor, a reader's newest older writer,
    /// a permit's N newest older entries (any N older ones stay older than it, so it
    /// has N older while they are all there).
    std::vector<std::string> waits_for;
    /// An older shared entry that counts permits otherwise (0: a shared mutex's reader),
    /// and its count: every shared entry of a resource must agree.
    std::string disagrees;
    std::uint32_t disagreeing_permits = 0;
    /// A child named as a permit whose count does not read: the queue cannot be judged
    /// with it.
    std::string unreadable;
    /// The sequence numbers of every entry, ordered.
    std::vector<std::int64_t> live;
};

/// Where the entry named `mine` stands among `children` (unsorted, as the server
/// returns them; children without a sequence number are ignored, and every other one
/// is an entry, whoever made it: paths.hpp).
inline shared_standing stand_shared(const std::vector<std::string>& children, std::string_view mine)
{
    shared_standing s;
    std::vector<waiter_name> entries;
    entries.reserve(children.size());
    for (const auto& c : children) {
        auto w = parse_waiter(c);
        if (w && w->unreadable) {
            s.unreadable = c;
            return s;
        }
        if (w)
            entries.push_back(std::move(*w));
    }
    std::sort(entries.begin(), entries.end(),
              [](const waiter_name& a, const waiter_name& b) { return a.sequence < b.sequence; });
    s.live.reserve(entries.size());
    for (const auto& e : entries)
        s.live.push_back(e.sequence);
    const auto at = std::find_if(entries.begin(), entries.end(), [&](const waiter_name& e) { return e.name == mine; });
    if (at == entries.end())
        return s;
    const auto older = static_cast<std::size_t>(at - entries.begin());
    s.found = true;
    s.sequence = at->sequence;
    s.mode = at->mode;
    s.permits = at->permits;
    if (s.mode == lock_mode::shared)
        for (auto it = entries.begin(); it != at; ++it)
            if (it->mode == lock_mode::shared && it->permits != s.permits) {
                s.disagrees = it->name;
                s.disagreeing_permits = it->permits;
                return s;
            }
    if (s.mode == lock_mode::exclusive) {
        s.granted = older == 0;
        if (!s.granted)
            s.waits_for.emplace_back(std::prev(at)->name);
    } else if (s.permits == 0) {
        const auto writer = std::find_if(std::make_reverse_iterator(at), entries.rend(),
                                         [](const waiter_name& e) { return e.mode == lock_mode::exclusive; });
        s.granted = writer == entries.rend();
        if (!s.granted)
            s.waits_for.emplace_back(writer->name);
    } else {
        s.granted = older < s.permits;
        if (!s.granted)
            for (auto it = at - static_cast<std::ptrdiff_t>(s.permits); it != at; ++it)
                s.waits_for.emplace_back(it->name);
    }
    return s;
}

/// One line of the permits' record: the slot the entry `sequence` holds.
struct slot_record {
    std::uint32_t slot = 0;
    std::int64_t sequence = 0;
    friend bool operator==(const slot_record&, const slot_record&) = default;
};

/// The record as the resource's node's data holds it (empty: no line); nullopt for
/// data this store does not write: lines out of order, a slot or an entry twice, or
/// anything but "<slot> <sequence>\n".
inline std::optional<std::vector<slot_record>> parse_slots(std::string_view data)
{
    std::vector<slot_record> out;
    while (!data.empty()) {
        const auto eol = data.find('\n');
        if (eol == std::string_view::npos)
            return std::nullopt;
        const auto line = data.substr(0, eol);
        data.remove_prefix(eol + 1);
        const auto space = line.find(' ');
        if (space == std::string_view::npos)
            return std::nullopt;
        const auto slot = name_parts::number<std::uint32_t>(line.substr(0, space));
        const auto sequence = name_parts::number<std::int64_t>(line.substr(space + 1));
        if (!slot || !sequence || (!out.empty() && out.back().slot >= *slot))
            return std::nullopt;
        if (std::any_of(out.begin(), out.end(), [&](const slot_record& r) { return r.sequence == *sequence; }))
            return std::nullopt;
        out.push_back({*slot, *sequence});
    }
    return out;
}

/// The data of `record` (ordered by slot).
inline std::string encode_slots(const std::vector<slot_record>& record)
{
    std::string out;
    for (const auto& r : record)
        out.append(std::to_string(r.slot)).append(1, ' ').append(std::to_string(r.sequence)).append(1, '\n');
    return out;
}

/// A permit's slot, and the record to write for it.
struct slot_claim {
    std::uint32_t slot = 0;
    /// The record with the slot taken, the lines of entries no longer `live` dropped;
    /// nullopt when the entry's line is there already.
    std::optional<std::string> record;
};

/// The slot of entry `mine` (granted, among `live`): its own line's, else the lowest
/// no line of a live entry has.
inline slot_claim claim_slot(const std::vector<slot_record>& recorded, const std::vector<std::int64_t>& live,
                             std::int64_t mine)
{
    for (const auto& r : recorded)
        if (r.sequence == mine)
            return {r.slot, std::nullopt};
    std::vector<slot_record> kept;
    kept.reserve(recorded.size() + 1);
    for (const auto& r : recorded)
        if (std::binary_search(live.begin(), live.end(), r.sequence))
            kept.push_back(r);
    std::uint32_t slot = 0;
    auto at = kept.begin();
    for (; at != kept.end() && at->slot == slot; ++at)
        ++slot;
    kept.insert(at, slot_record{slot, mine});
    return {slot, encode_slots(kept)};
}

} // namespace distlock::zookeeper::detail
