// Shared by the etcd tests and fixtures: a resource's queue as the harness's own
// client sees it, and the mutexes and waits the tests use.
#pragma once

#include "etcd_server.hpp"
#include "eventually.hpp"
#include "pending.hpp"
#include "support.hpp"

#include <distlock/etcd.hpp>

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>
#include <vector>

namespace test::etcd_tests {

namespace dl = distlock;
namespace etcd = distlock::etcd;
using json = nlohmann::json;

using patient_mutex = dl::basic_distributed_mutex<etcd::store, dl::retry::exponential_backoff>;

/// A retry delay longer than a test: only a watch wakes a waiter in time.
inline dl::retry::fixed patient()
{
    return {.delay = std::chrono::seconds{20}, .deadline = std::chrono::seconds{60}};
}

inline std::string b64(std::string_view s) { return dl::util::base64(s); }

/// The keys of a resource's queue, oldest first, as the harness's own client sees them.
inline std::vector<etcd::detail::kv> queue_of(const etcd_cluster& c, const std::string& prefix,
                                              std::string_view resource, std::size_t member = 0,
                                              etcd::key_dialect dialect = etcd::key_dialect::distlock)
{
    const auto q = etcd::detail::queue_prefix(prefix, resource, dialect);
    auto r = etcd::detail::range_request(q, etcd::detail::range_end(q));
    r["sort_target"] = "CREATE";
    r["sort_order"] = "ASCEND";
    const auto answer = c.call("kv/range", r, member);
    REQUIRE(answer.is_object());
    const auto range = etcd::detail::read_range(answer);
    REQUIRE(range);
    return range->kvs;
}

} // namespace test::etcd_tests
