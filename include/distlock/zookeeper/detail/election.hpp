// distlock/zookeeper/detail/election.hpp: what a holder's node's data says, as pure
// functions (no I/O), unit-tested and fuzzed on their own.
//
// Layout: the holder's node (its ephemeral sequential node, paths.hpp) carries in its
// data either its holder's mark alone, or the mark, a newline and the value an
// election's leader proclaimed with that grant:
//
//   "held"               the node holds the lock (set by its client once it holds)
//   "held\n" <value>     the same, and the value proclaimed (any bytes, up to
//                        max_leader_value_size)
//
// Either counts only at data version 1 or more: a node's data at its create (version
// 0) is its creator's (Curator writes its host's address there, kazoo an identifier),
// and says nothing of a grant. The value lives in the grant's own node, so it goes
// with the grant; a later grant is another node, whose data never carries it.
// Older readers of the mark took only "held" exactly: to them a node that proclaimed
// is unmarked, so their waiter behind it reads the queue again when it goes (one more
// read, the same outcome).
//
// A Curator LeaderLatch participant's node (`..latch-<seq>`, paths.hpp: latch_entry(),
// written by Curator or by this store in the latch dialect) is read otherwise: its
// data, whatever its version, is the participant's id, which is the leader's value
// (Curator's getLeader() reads the lowest node's data so). Such a node is never
// marked nor written after its create.
#pragma once

#include <distlock/options.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace distlock::zookeeper::detail {

/// The data a holder's mark sets on its node.
inline constexpr std::string_view holder_mark = "held";
/// What comes between the mark and a proclaimed value.
inline constexpr char value_separator = '\n';

/// The data of a holder's node that proclaimed `value`.
inline std::string proclaimed_data(std::string_view value)
{
    std::string out;
    out.reserve(holder_mark.size() + 1 + value.size());
    out.append(holder_mark).append(1, value_separator).append(value);
    return out;
}

/// Whether a node's data at `version` is its holder's mark (with or without a value).
inline bool marks_holder(std::string_view data, std::int32_t version)
{
    if (version <= 0 || !data.starts_with(holder_mark))
        return false;
    return data.size() == holder_mark.size() || data[holder_mark.size()] == value_separator;
}

/// What a holder's node's data says of an election's value.
struct leader_value {
    /// The data is marked as proclaimed and cannot be: a value longer than any
    /// proclaim writes.
    bool unreadable = false;
    /// The value proclaimed with this node's grant; nullopt when it has proclaimed none.
    std::optional<std::string> value;
};

/// The value a LeaderLatch participant's node (latch_entry()) carries: its data as it
/// is, refused only when longer than any value this store keeps.
inline leader_value latch_value_of(std::string_view data)
{
    if (data.size() > max_leader_value_size)
        return {true, std::nullopt};
    return {false, std::string{data}};
}

/// The value a holder's node's data (at `version`) carries. Data that is no mark, or
/// the mark alone, carries none; nothing a node holds is refused but an oversized
/// value.
inline leader_value value_of(std::string_view data, std::int32_t version)
{
    if (!marks_holder(data, version) || data.size() == holder_mark.size())
        return {};
    const auto value = data.substr(holder_mark.size() + 1);
    if (value.size() > max_leader_value_size)
        return {true, std::nullopt};
    return {false, std::string{value}};
}

} // namespace distlock::zookeeper::detail
