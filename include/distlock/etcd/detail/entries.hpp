// distlock/etcd/detail/entries.hpp: the modes of a resource's queue entries (the
// shared mutex's readers and writers, the semaphore's permits) and what a read of the
// queue says about one entry, as pure functions (no I/O), unit-tested on their own.
//
// Design note. An entry's mode is in its value, after the owner token that the key
// names too, so that the keys keep the mutex's layout (keys.hpp) and any client tells
// a reader from a writer from a permit, and a permit's count, from the read of the
// queue it makes anyway:
//   <owner>                    exclusive: a mutex's entry, a shared mutex's writer
//   <owner>+held               the same, marked as the holder (keys.hpp)
//   <owner>+read               a shared mutex's reader
//   <owner>+permits=N          a permit of a semaphore of N, not granted yet
//   <owner>+permits=N+slot=S   a permit that holds slot S
//   <owner>+elect=V+held       an election's leader (exclusive, holding) that
//                              proclaimed V (keys.hpp: elections)
// (N and S in decimal, without leading zeros). A mutex and a shared mutex's writer on
// one resource are entries of one kind in one queue: they exclude each other, and the
// readers, as two mutexes do. A shared entry never carries the holder's mark: a mark
// tells the waiter behind a key that the key was the oldest, which a reader holding
// beside older readers is not.
//
// Any other value is a foreign entry: etcd's own concurrency.Mutex writes its keys
// valued "" (Go's clientv3/concurrency, `etcdctl lock`), and a value no distlock
// writes is read the same way. A foreign entry is exclusive, the strongest claim: it
// holds when it is the oldest, and a reader behind it waits for it; the Mutex behind
// any entry waits for every older key. It is never a protocol error: an entry is the
// lock's only by its key and create revision, which etcd gives, not by its value. A
// permit waits for every older foreign entry too (a distlock mutex's entry it only
// counts: one primitive per resource, docs/shared.md), so that a semaphore's holders
// and a Mutex's holder never overlap, whichever queued first.
//
// Grants only ever come, never go, while an entry lives: entries queue at the back
// (create revisions only grow), so an entry's older entries only leave. A permit's
// slot must stay its own while it holds and differ from every other holder's, and
// holders come and go: the entries' order alone cannot tell it. So it is written into
// the entry's value once the entry holds: the lowest number no entry of the queue has
// written, by a txn that applies only if no key of the queue was written since the
// read it was chosen from (unwritten_since_compare in keys.hpp). A slot is written only
// where that read saw it free, so two live holders never have the same one; a holder
// whose txn did not apply chooses again from the read the txn returns instead.
#pragma once

#include <distlock/claim.hpp>
#include <distlock/diagnostics.hpp>
#include <distlock/error.hpp>
#include <distlock/etcd/detail/keys.hpp>
#include <distlock/etcd/detail/replies.hpp>
#include <distlock/util/result_type.hpp>

#include <algorithm>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace distlock::etcd::detail {

/// What an entry of a resource's queue is a grant of.
enum class entry_kind {
    exclusive, ///< a mutex's entry, a shared mutex's writer
    reader,    ///< a shared mutex's reader
    permit,    ///< a semaphore's permit
};

/// An entry's value, read.
struct entry_mode {
    entry_kind kind = entry_kind::exclusive;
    std::uint32_t permits = 0;         ///< a permit's count (0 for the other kinds)
    std::optional<std::uint32_t> slot; ///< a permit's slot, once written
    bool foreign = false;              ///< a value of no form above: exclusive (see the note)
};

inline constexpr std::string_view reader_mark = "+read";
inline constexpr std::string_view permits_mark = "+permits=";
inline constexpr std::string_view slot_mark = "+slot=";

/// The value a lock() call's entry is created with: `mode` shared with `permits` 0 is
/// a reader, `permits` N > 0 a permit of N, else exclusive (the mutex's value).
inline std::string entry_value(std::string_view owner_hex, lock_mode mode, std::uint32_t permits)
{
    std::string out{owner_hex};
    if (permits > 0) {
        out += permits_mark;
        out += std::to_string(permits);
    } else if (mode == lock_mode::shared) {
        out += reader_mark;
    }
    return out;
}

/// The value of a permit of `permits` that holds `slot`.
inline std::string permit_value(std::string_view owner_hex, std::uint32_t permits, std::uint32_t slot)
{
    auto out = entry_value(owner_hex, lock_mode::shared, permits);
    out += slot_mark;
    out += std::to_string(slot);
    return out;
}

namespace entries_detail {

// A decimal number as entry_value() writes it, consumed from the front of `text`.
inline std::optional<std::uint32_t> take_number(std::string_view& text)
{
    std::size_t digits = 0;
    while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9')
        ++digits;
    if (digits == 0 || (digits > 1 && text[0] == '0'))
        return std::nullopt;
    std::uint32_t n = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + digits, n);
    if (ec != std::errc{} || end != text.data() + digits)
        return std::nullopt;
    text.remove_prefix(digits);
    return n;
}

inline bool is_owner_hex(std::string_view s)
{
    return s.size() == owner_hex_digits &&
           std::all_of(s.begin(), s.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

} // namespace entries_detail

/// The mode an entry's value states; nullopt for a value of no form above.
inline std::optional<entry_mode> parse_entry_value(std::string_view value)
{
    if (value.size() < owner_hex_digits || !entries_detail::is_owner_hex(value.substr(0, owner_hex_digits)))
        return std::nullopt;
    auto rest = value.substr(owner_hex_digits);
    if (rest.empty() || rest == holder_mark)
        return entry_mode{};
    // A leader's entry with the value it proclaimed (keys.hpp: elections).
    if (rest.size() >= elect_mark.size() + holder_mark.size() && rest.starts_with(elect_mark) &&
        rest.ends_with(holder_mark))
        return entry_mode{};
    if (rest == reader_mark)
        return entry_mode{entry_kind::reader, 0, std::nullopt};
    if (!rest.starts_with(permits_mark))
        return std::nullopt;
    rest.remove_prefix(permits_mark.size());
    const auto permits = entries_detail::take_number(rest);
    if (!permits || *permits == 0)
        return std::nullopt;
    entry_mode out{entry_kind::permit, *permits, std::nullopt};
    if (rest.empty())
        return out;
    if (!rest.starts_with(slot_mark))
        return std::nullopt;
    rest.remove_prefix(slot_mark.size());
    out.slot = entries_detail::take_number(rest);
    if (!out.slot || !rest.empty())
        return std::nullopt;
    return out;
}

/// One entry of a queue read, its value read.
struct queue_entry {
    const kv* at = nullptr;
    entry_mode mode;
};

/// What the entry valued `value` is: its mode, or a foreign exclusive entry for a
/// value of no form above (a concurrency.Mutex's "", anything else).
inline entry_mode entry_mode_of(std::string_view value)
{
    if (auto mode = parse_entry_value(value))
        return *mode;
    entry_mode foreign;
    foreign.foreign = true;
    return foreign;
}

/// The entries of a queue read (every key of the queue, in any order), oldest first;
/// errc::protocol_error naming the key when one has no positive create revision.
inline result<std::vector<queue_entry>> read_queue(std::span<const kv> keys, diagnostics* diag)
{
    std::vector<queue_entry> out;
    out.reserve(keys.size());
    for (const auto& k : keys) {
        if (k.create_revision <= 0) {
            if (diag) {
                diag->set_server_message(k.value);
                diag->set_client_message("etcd queue entry \"" + k.key + "\": no positive create revision");
            }
            return distlock::errc::protocol_error;
        }
        out.push_back(queue_entry{&k, entry_mode_of(k.value)});
    }
    std::stable_sort(out.begin(), out.end(),
                     [](const queue_entry& a, const queue_entry& b) {
                         return a.at->create_revision < b.at->create_revision;
                     });
    return out;
}

/// Where the entry `key` stands in a queue read that holds it.
struct shared_decision {
    std::int64_t entry = 0;            ///< its create revision: its fence
    entry_mode mode;                   ///< its mode, as its value states
    bool other_count = false;          ///< an older shared entry counts permits otherwise
    bool granted = false;              ///< it holds, by the rules of its mode
    std::optional<std::uint32_t> slot; ///< a granted permit's: written, or to write
    bool write_slot = false;           ///< the slot is chosen now: written before the grant
};

/// Decides for the entry `key` of `keys` (a read of its whole queue) by
/// shared_queue_store's rules: an exclusive entry holds when it is the oldest, a reader
/// when no exclusive entry is older, a permit of N when fewer than N entries are
/// older, with its written slot or else the lowest number no entry has written. Its
/// count is checked against the older shared entries only: of two entries, the newer
/// one is refused, since its read was made after the older one was created.
/// errc::protocol_error when `key` is not in the read, or as read_queue().
inline result<shared_decision> decide_shared(std::span<const kv> keys, std::string_view key, diagnostics* diag)
{
    const auto queue = read_queue(keys, diag);
    if (!queue)
        return queue.error();
    const auto& q = queue.value();
    const auto mine = std::find_if(q.begin(), q.end(), [&](const queue_entry& e) { return e.at->key == key; });
    if (mine == q.end()) {
        if (diag)
            diag->set_client_message("etcd queue read without the entry \"" + std::string{key} + "\" it was made with");
        return distlock::errc::protocol_error;
    }
    shared_decision out;
    out.entry = mine->at->create_revision;
    out.mode = mine->mode;
    const auto& m = mine->mode;
    const auto older = q.begin();
    const auto older_count = static_cast<std::size_t>(mine - older);
    if (m.kind != entry_kind::exclusive)
        out.other_count = std::any_of(older, mine, [&](const queue_entry& e) {
            return e.mode.kind != entry_kind::exclusive && e.mode.permits != m.permits;
        });
    if (out.other_count)
        return out;
    switch (m.kind) {
    case entry_kind::exclusive: out.granted = older_count == 0; break;
    case entry_kind::reader:
        out.granted =
            std::none_of(older, mine, [](const queue_entry& e) { return e.mode.kind == entry_kind::exclusive; });
        break;
    case entry_kind::permit:
        out.granted = older_count < m.permits &&
                      std::none_of(older, mine, [](const queue_entry& e) { return e.mode.foreign; });
        break;
    }
    if (!out.granted || m.kind != entry_kind::permit)
        return out;
    if (m.slot) {
        out.slot = m.slot;
        return out;
    }
    std::vector<std::uint32_t> taken;
    for (const auto& e : q)
        if (e.mode.slot)
            taken.push_back(*e.mode.slot);
    std::sort(taken.begin(), taken.end());
    std::uint32_t n = 0;
    for (const auto t : taken) {
        if (t > n)
            break;
        if (t == n)
            ++n;
    }
    out.slot = n;
    out.write_slot = true;
    return out;
}

/// What a waiting entry waits for.
struct turn_wait {
    bool present = false;        ///< the entry is in the queue
    std::vector<bound_key> keys; ///< the keys whose going may let it hold; none: it holds
};

/// The keys whose going may let the entry created at `entry` hold, from a read of its
/// whole queue: for an exclusive entry, the one just before it; for a reader, the
/// newest older exclusive one; for a permit behind a foreign entry, the newest older
/// foreign one; for another permit of N not holding, the N oldest (the holders: while
/// they stay, N entries are older than it, whichever others leave).
/// errc::protocol_error as read_queue().
inline result<turn_wait> turn_keys(std::span<const kv> keys, std::int64_t entry, diagnostics* diag)
{
    const auto queue = read_queue(keys, diag);
    if (!queue)
        return queue.error();
    const auto& q = queue.value();
    const auto mine =
        std::find_if(q.begin(), q.end(), [&](const queue_entry& e) { return e.at->create_revision == entry; });
    turn_wait out;
    if (mine == q.end())
        return out;
    out.present = true;
    const auto watch = [&](const queue_entry& e) { out.keys.push_back(bound_key{e.at->key, e.at->create_revision}); };
    const auto older_count = static_cast<std::size_t>(mine - q.begin());
    switch (mine->mode.kind) {
    case entry_kind::exclusive:
        if (older_count > 0)
            watch(*std::prev(mine));
        break;
    case entry_kind::reader:
        for (auto it = mine; it != q.begin();)
            if ((--it)->mode.kind == entry_kind::exclusive) {
                watch(*it);
                break;
            }
        break;
    case entry_kind::permit:
        for (auto it = mine; it != q.begin();)
            if ((--it)->mode.foreign) {
                watch(*it);
                return out;
            }
        if (older_count >= mine->mode.permits)
            for (auto it = q.begin(); it != q.begin() + mine->mode.permits; ++it)
                watch(*it);
        break;
    }
    return out;
}

} // namespace distlock::etcd::detail
