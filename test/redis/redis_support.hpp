// Shared by the Redis tests.
#pragma once

#include "process.hpp"
#include "support.hpp"

#include <distlock/redis.hpp>

#include <unistd.h>

namespace test {

/// This test binary, to start worker copies of it.
inline std::string self_path()
{
    char buf[4096];
    const auto n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
    return std::string(buf, n > 0 ? static_cast<std::size_t>(n) : 0);
}

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
