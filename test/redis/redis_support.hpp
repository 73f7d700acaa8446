// Shared by the Redis tests.
#pragma once

#include "process.hpp"
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

/// What a lock key holds for a grant (redis/scripts.hpp): "<owner>:<fencing token>".
inline std::string lock_value(const dl::owner_token& owner, dl::fence_token fence)
{
    return owner.to_hex() + ":" + std::to_string(fence);
}

/// The same for a lease.
inline std::string lock_value(const dl::lease& l) { return lock_value(l.owner(), l.fence()); }

} // namespace test
