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

} // namespace test
