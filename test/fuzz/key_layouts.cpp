// libFuzzer target: the stores' key and path layouts are injective. Two different
// (prefix, resource) pairs never share a Redis key; two different resources never
// share an etcd queue prefix, nor is one's queue prefix a prefix of another's (etcd
// reads a queue as a key range); two different resources never share a ZooKeeper
// node, and a node's name gives its resource back; any child name reads safely as a
// ZooKeeper waiter or as none, and the names every dialect writes read back.
//   clang++ -std=c++20 -g -O1 -fsanitize=fuzzer,address,undefined -Iinclude test/fuzz/key_layouts.cpp
#include <distlock/etcd/detail/keys.hpp>
#include <distlock/redis/detail/keys.hpp>
#include <distlock/zookeeper/detail/paths.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>

namespace {

// Splits the input at 0xff bytes into up to four parts (bytes 0x00-0xfe are data).
struct parts {
    std::string_view p[4];
    bool hash_tags = false;
};

parts split(const std::uint8_t* data, std::size_t size)
{
    parts out;
    std::string_view in{reinterpret_cast<const char*>(data), size};
    if (!in.empty()) {
        out.hash_tags = (in.front() & 1) != 0;
        in.remove_prefix(1);
    }
    for (int i = 0; i < 4; ++i) {
        const auto at = in.find('\xff');
        out.p[i] = in.substr(0, at);
        in = at == std::string_view::npos ? std::string_view{} : in.substr(at + 1);
    }
    return out;
}

void check(bool ok)
{
    if (!ok)
        std::abort();
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    const auto in = split(data, size);
    const auto [prefix_a, resource_a, prefix_b, resource_b] = in.p;
    const bool same = prefix_a == prefix_b && resource_a == resource_b;

    // Redis: one key per (prefix, resource, kind), whatever the bytes.
    using distlock::redis::detail::key_layout;
    const key_layout a{prefix_a, in.hash_tags}, b{prefix_b, in.hash_tags};
    for (const std::string_view kind : {"lock", "queue", "offers", "released", "sharers", "intent", "leader", "delay"})
        check(same == (a.key(resource_a, kind) == b.key(resource_b, kind)));
    check(a.key(resource_a, "lock") != b.key(resource_b, "queue"));
    check(same == (a.leader_key(resource_a) == b.leader_key(resource_b)));
    check(a.leader_key(resource_a) != b.lock_key(resource_b));
    check(same == (a.delay_key(resource_a) == b.delay_key(resource_b)));
    check(a.delay_key(resource_a) != b.lock_key(resource_b));
    // The plain layout's keys beside an id (an election's value among them): one per
    // (prefix, resource, kind), in the id's slot, and never an id distlock takes.
    const key_layout pa{prefix_a, in.hash_tags, true}, pb{prefix_b, in.hash_tags, true};
    for (const std::string_view kind : {"holder", "released", "leader", "delay"})
        check(same == (pa.beside(resource_a, kind) == pb.beside(resource_b, kind)));
    check(same == (pa.leader_key(resource_a) == pb.leader_key(resource_b)));
    check(pa.leader_key(resource_a) != pb.beside(resource_b, "holder"));
    check(pa.reserved(pa.leader_key(resource_a)));
    check(distlock::redis::detail::hash_slot(pa.leader_key(resource_a)) == distlock::redis::detail::hash_slot(resource_a));
    check(pa.resource_beside(pa.leader_key(resource_a), "leader") == std::optional<std::string>{resource_a});
    check(pa.reserved(pa.delay_key(resource_a)));
    check(distlock::redis::detail::hash_slot(pa.delay_key(resource_a)) == distlock::redis::detail::hash_slot(resource_a));

    // etcd: under one prefix, queue prefixes are distinct and none contains another.
    const auto qa = distlock::etcd::detail::queue_prefix(prefix_a, resource_a);
    const auto qb = distlock::etcd::detail::queue_prefix(prefix_a, resource_b);
    if (resource_a != resource_b)
        check(!qa.starts_with(qb) && !qb.starts_with(qa));
    else
        check(qa == qb);

    // ZooKeeper: one node per resource under a root, and back.
    const auto na = distlock::zookeeper::detail::resource_node("/distlock", resource_a);
    const auto nb = distlock::zookeeper::detail::resource_node("/distlock", resource_b);
    check((resource_a == resource_b) == (na == nb));
    if (!resource_a.empty()) { // ids are never empty (refused before any I/O)
        const auto back = distlock::zookeeper::detail::resource_of(distlock::zookeeper::detail::base_name(na));
        check(back && *back == resource_a);
    }

    // ZooKeeper: a child of any name (another client's) is a waiter or not, never a
    // crash; a waiter's owner is 32 hex digits or none, its sequence a server's number.
    namespace zkd = distlock::zookeeper::detail;
    if (const auto w = zkd::parse_waiter(resource_b)) {
        check(w->owner.empty() || w->owner.size() == 32);
        check(w->sequence >= INT32_MIN && w->sequence <= INT32_MAX);
        check(!w->unreadable || w->mode == distlock::lock_mode::exclusive);
    }
    // Every dialect's name, with the input's digits as the sequence, reads back.
    if (resource_a.size() == 10 && resource_a.find_first_not_of("0123456789") == std::string::npos) {
        const std::string owner = "0123456789abcdef0123456789abcdef";
        for (const auto d : {distlock::zookeeper::dialect::curator, distlock::zookeeper::dialect::kazoo,
                             distlock::zookeeper::dialect::distlock, distlock::zookeeper::dialect::latch}) {
            const auto name = zkd::entry_prefix(d, owner, distlock::lock_mode::shared, 0).append(resource_a);
            const auto w = zkd::parse_waiter(name);
            check(!w || (w->owner == owner && w->mode == distlock::lock_mode::shared));
        }
    }
    return 0;
}
