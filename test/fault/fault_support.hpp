// Shared by the fault scenarios against real servers: configs, clocks, worker
// processes and their history lines, and probes for state left behind.
#pragma once

#include "history.hpp"
#include "redis/redis_support.hpp"

#include <distlock/redis.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace fault {

namespace dl = distlock;

using backoff = dl::retry::exponential_backoff;
using redis_mutex = dl::basic_distributed_mutex<dl::redis::store, backoff>;
using redlock = dl::basic_distributed_mutex<dl::quorum<dl::redis::store>, backoff>;

inline nanos now_ns() { return dl::clock::now().time_since_epoch().count(); }
inline nanos ns(dl::duration d) { return std::chrono::duration_cast<std::chrono::nanoseconds>(d).count(); }

/// A client config for a server (or a proxy) on a loopback port.
inline dl::redis::config via(std::uint16_t port, std::chrono::milliseconds request_timeout = std::chrono::seconds{5})
{
    dl::redis::config c;
    c.port = port;
    c.connect_timeout = std::chrono::seconds{2};
    c.request_timeout = request_timeout;
    return c;
}

/// A copy of this binary as a lock client (see workers.hpp).
inline std::unique_ptr<test::child> worker(std::vector<std::string> args)
{
    args.insert(args.begin(), {test::self_path(), "--worker"});
    return std::make_unique<test::child>(std::move(args));
}

/// Reads a worker's history lines into `into` until one satisfies `stop` (true), the
/// worker's output ends or `limit` passes (false).
inline bool read_until(test::child& c, std::vector<op>& into, const std::function<bool(const op&)>& stop,
                       std::chrono::seconds limit = std::chrono::seconds{20})
{
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < deadline) {
        const auto line = c.read_line(std::chrono::duration_cast<std::chrono::milliseconds>(
            deadline - std::chrono::steady_clock::now()));
        if (!line)
            return false;
        if (auto o = from_line(*line)) {
            into.push_back(*o);
            if (stop(*o))
                return true;
        }
    }
    return false;
}

inline std::function<bool(const op&)> is(kind k)
{
    return [k](const op& o) { return o.kind == k; };
}

/// Whether a server still holds lock state for `resource` (read outside any lock).
inline bool lock_left(const dl::redis::config& cfg, const std::string& resource)
{
    asio::io_context io;
    return test::peek(io, cfg, "distlock:{#" + resource + "}:lock").has_value();
}

/// Records whether a server still holds lock state for `resource`.
inline void probe(std::vector<op>& h, const dl::redis::config& cfg, const std::string& resource)
{
    const auto t = now_ns();
    const bool left = lock_left(cfg, resource);
    h.push_back(op{.kind = kind::probe, .resource = resource, .invoke = t, .complete = t,
                   .result = left ? outcome::fail : outcome::ok, .detail = "port " + std::to_string(cfg.port)});
}

} // namespace fault
