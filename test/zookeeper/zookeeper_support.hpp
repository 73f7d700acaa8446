// Shared by the ZooKeeper tests and fixtures: a resource's waiter nodes as the
// harness's own client sees them, and the mutexes and waits the tests use.
#pragma once

#include "eventually.hpp"
#include "pending.hpp"
#include "support.hpp"
#include "zookeeper_server.hpp"

#include <distlock/zookeeper.hpp>

#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

namespace test::zookeeper_tests {

namespace dl = distlock;
namespace zk = distlock::zookeeper;

using patient_mutex = dl::basic_distributed_mutex<zk::store, dl::retry::exponential_backoff>;

/// A retry delay longer than a test: only a watch wakes a waiter in time.
inline dl::retry::fixed patient()
{
    return {.delay = std::chrono::seconds{20}, .deadline = std::chrono::seconds{60}};
}

/// A resource's waiter nodes on the shared server (its children with a sequence
/// number, whoever made them), lowest sequence first, as the harness's own client
/// sees them.
inline std::vector<std::string> queue_of(const std::string& prefix, std::string_view resource)
{
    zk_client c{shared_zookeeper().port()};
    auto names = c.children(zk::detail::resource_node(prefix, resource)).value_or(std::vector<std::string>{});
    std::erase_if(names, [](const std::string& n) { return !zk::detail::parse_waiter(n); });
    std::sort(names.begin(), names.end(), [](const std::string& a, const std::string& b) {
        return zk::detail::parse_waiter(a)->sequence < zk::detail::parse_waiter(b)->sequence;
    });
    return names;
}

} // namespace test::zookeeper_tests
