// distlock/policy/order.hpp: the order in which a multi-lock takes its resources.
//
// Deadlock freedom comes from every process taking any set of locks in one global
// order. The order must be a pure function of the ids: the same on every machine.
#pragma once

#include <algorithm>
#include <concepts>
#include <string>
#include <vector>

namespace distlock {

struct order_policy_tag {};

/// An ordering policy rearranges resource ids into the order they are locked in, and
/// collapses duplicates.
template <class P>
concept order_policy = std::same_as<typename P::policy_kind, order_policy_tag> &&
                       requires(const P& p, std::vector<std::string>& ids) {
                           { p.arrange(ids) } -> std::same_as<void>;
                       };

namespace order {

/// Byte-wise ascending (as memcmp), duplicates collapsed.
struct by_resource_id {
    using policy_kind = order_policy_tag;
    void arrange(std::vector<std::string>& ids) const
    {
        // std::string compares through char_traits<char>, which orders bytes as
        // unsigned char: the same on every platform.
        std::sort(ids.begin(), ids.end());
        ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
    }
};

} // namespace order
} // namespace distlock
