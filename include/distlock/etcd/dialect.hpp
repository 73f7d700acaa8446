// distlock/etcd/dialect.hpp: how a resource id becomes the key prefix of its queue,
// in a header of its own so that the key layout (detail/keys.hpp) needs nothing else.
#pragma once

#include <optional>
#include <string_view>

namespace distlock::etcd {

/// The id-to-key mapping of a store (config::dialect; docs/etcd.md: the key layout).
/// Both write the queue etcd's concurrency.Mutex uses (Go's clientv3/concurrency,
/// `etcdctl lock`): keys `<queue prefix>/<...>` ordered by create revision, the oldest
/// holding. They differ in the queue prefix a resource id gets.
enum class key_dialect {
    /// `<prefix><escaped id>`: every id of up to 1024 bytes; the bytes outside
    /// [A-Za-z0-9._:-] are written %XX. The default.
    distlock,
    /// `<prefix><id>`, the id verbatim: `concurrency.NewMutex(session, prefix + id)`
    /// and `etcdctl lock <prefix><id>` are the same lock as the resource `id`. An id
    /// holding a '/' is refused (errc::invalid_argument, before any request): its
    /// queue would lie inside another id's.
    concurrency,
};

/// The dialect named `text` in a URL ("distlock", "concurrency"); nullopt for another.
inline std::optional<key_dialect> dialect_named(std::string_view text) noexcept
{
    if (text == "distlock")
        return key_dialect::distlock;
    if (text == "concurrency")
        return key_dialect::concurrency;
    return std::nullopt;
}

} // namespace distlock::etcd
