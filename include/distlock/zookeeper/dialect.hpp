// distlock/zookeeper/dialect.hpp: whose names the store gives its waiter nodes, in a
// header of its own (no Asio, no coroutines) so that the node layout
// (detail/paths.hpp) and the key-layout fuzzer need nothing else.
#pragma once

#include <string_view>

namespace distlock::zookeeper {

/// Whose names the store gives its waiter nodes (docs/zookeeper.md, the node layout).
/// Whatever the dialect, the store reads every sequential child of a resource's node
/// as a waiter, ordered by its sequence number, so clients of every dialect (and of
/// Apache Curator and kazoo) queue together on one resource.
enum class dialect {
    /// Apache Curator's: `_c_<owner as a UUID>-lock-<seq>` for a mutex (as
    /// InterProcessMutex in protected mode writes it), `__WRIT__` and `__READ__` in place
    /// of `lock-` for a shared mutex's writer and reader (InterProcessReadWriteLock's).
    curator,
    /// kazoo's: `<owner hex>__lock__<seq>` for a mutex and a writer (Lock, WriteLock),
    /// `<owner hex>__rlock__<seq>` for a reader (ReadLock).
    kazoo,
    /// This store's names before dialects: `<owner hex>-<seq>`, `<owner hex>-__WRIT__<seq>`,
    /// `<owner hex>-__READ__<seq>`, the only ones clients of that release read.
    distlock,
    /// Apache Curator's LeaderLatch: a mutex's entry (an election's campaign among
    /// them) is `_c_<owner as a UUID>-latch-<seq>`, as LeaderLatch in protected mode
    /// names its participants, and carries a campaign's value as its data from its
    /// create (a latch participant's id), so that Curator's getLeader() reads it.
    /// Entries are never written after their create (a setData would spend the data
    /// watch of the LeaderLatch participant behind, which then misses the deletion):
    /// no holder's mark, a proclaim only of the value the entry was made with, and no
    /// lock-delay (Curator's latch would not honour it). Shared entries are named as
    /// in the curator dialect.
    latch,
};

/// The dialect's name in URLs ("curator", "kazoo", "distlock", "latch").
constexpr std::string_view name_of(dialect d) noexcept
{
    switch (d) {
    case dialect::curator:
        return "curator";
    case dialect::kazoo:
        return "kazoo";
    case dialect::distlock:
        return "distlock";
    case dialect::latch:
        return "latch";
    }
    return "?";
}

/// The dialect a config names unless told otherwise: Apache Curator's names.
inline constexpr dialect default_dialect = dialect::curator;

} // namespace distlock::zookeeper
