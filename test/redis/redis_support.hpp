// Shared by the Redis tests and fixtures: looks at a server's keys outside any lock.
#pragma once

#include "redis_server.hpp"
#include "support.hpp"

#include <distlock/redis.hpp>

#include <unistd.h>

namespace test {

/// Reads a key straight from a server, outside any lock.
inline std::optional<std::string> peek(asio::io_context& io, const dl::redis::config& cfg, std::string key)
{
    std::optional<std::string> out;
    dl::redis::store probe{io, cfg};
    run(io, [&]() -> asio::awaitable<void> {
        auto command = dl::redis::resp::command({"GET", key});
        auto r = co_await probe.execute_command(std::move(command));
        if (r && r.value().is_string())
            out = r.value().text;
    });
    return out;
}

/// Whether a key of any type exists on a server, asked outside any lock.
inline bool exists(asio::io_context& io, const dl::redis::config& cfg, std::string key)
{
    bool out = false;
    dl::redis::store probe{io, cfg};
    run(io, [&]() -> asio::awaitable<void> {
        auto r = co_await probe.execute("EXISTS", key);
        REQUIRE(r);
        out = r.value().integer == 1;
    });
    return out;
}

/// Whether `server` holds the lock key of `resource`, asked on a connection of its own.
inline bool holds(const redis_server& server, std::string_view resource)
{
    asio::io_context io;
    dl::redis::store probe{io, server.config()};
    return peek(io, server.config(), probe.lock_key(resource)).has_value();
}

/// What a lock key holds for a grant (redis/scripts.hpp): "<owner>:<fencing token>".
inline std::string lock_value(const dl::owner_token& owner, dl::fence_token fence)
{
    return owner.to_hex() + ":" + std::to_string(fence);
}

/// The same for a lease.
inline std::string lock_value(const dl::lease& l) { return lock_value(l.owner(), l.fence()); }

} // namespace test
