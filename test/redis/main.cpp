// Test runner for the Redis tests. The binary doubles as a lock client when started
// with --worker, so that tests can use separate processes (killed, paused) as holders.
#include <distlock/distlock.hpp>
#include <distlock/redis.hpp>

#include <asio/co_spawn.hpp>
#include <asio/io_context.hpp>

#include "catch_runner.hpp"
#include "workers.hpp"

#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

namespace dl = distlock;
using namespace std::chrono_literals;

namespace {

dl::redis::config at(const char* port)
{
    dl::redis::config c;
    c.port = static_cast<std::uint16_t>(std::stoi(port));
    return c;
}

// increment PORT ROUNDS: ROUNDS critical sections, each GET counter; SET counter+1.
int increment(const char* port, int rounds)
{
    asio::io_context io;
    dl::redis::store store{io, at(port)};
    using counter_mutex = dl::basic_distributed_mutex<dl::redis::store, dl::retry::exponential_backoff>;
    counter_mutex m{store, "counter", {.ttl = 5s}, dl::retry::exponential_backoff{.initial = 1ms, .max = 20ms, .deadline = 60s}};
    int status = 1;
    asio::co_spawn(io, [&]() -> asio::awaitable<void> {
        for (int i = 0; i < rounds; ++i) {
            auto lease = co_await m.lock();
            if (!lease)
                co_return;
            // The variadic execute(): no braced list inside co_await (g++ 12).
            auto got = co_await store.execute("GET", "counter");
            if (!got)
                co_return;
            const long value = got.value().is_null() ? 0 : std::stol(got.value().text);
            const auto next = std::to_string(value + 1);
            auto set = co_await store.execute("SET", "counter", next);
            if (!set)
                co_return;
            auto released = co_await lease->unlock();
            if (!released)
                co_return;
        }
        status = 0;
        co_await store.close(); // io.run() returns once the store is closed
    }, asio::detached);
    io.run();
    return status;
}

// hold PORT RESOURCE TTL_MS: takes the lock, prints "locked FENCE", waits for a line on
// stdin, then writes "late" to the fenced key "data" and prints the outcome.
int hold(const char* port, const char* resource, int ttl_ms)
{
    asio::io_context io;
    dl::redis::store store{io, at(port)};
    dl::basic_distributed_mutex<dl::redis::store, dl::retry::exponential_backoff> m{
        store, resource, {.ttl = std::chrono::milliseconds{ttl_ms}}};
    dl::lease lease;
    asio::co_spawn(io, [&]() -> asio::awaitable<void> {
        auto got = co_await m.lock();
        if (got)
            lease = std::move(*got);
        store.disconnect();
    }, asio::detached);
    io.run();
    if (!lease)
        return 1;
    std::printf("locked %llu\n", static_cast<unsigned long long>(lease.fence()));
    std::fflush(stdout);
    std::string line;
    std::getline(std::cin, line);
    std::string outcome;
    const bool valid = lease.valid();
    io.restart();
    asio::co_spawn(io, [&]() -> asio::awaitable<void> {
        auto w = co_await store.fenced_write("data", lease.fence(), "late");
        outcome = w ? "ok" : w.error().message();
        store.disconnect();
    }, asio::detached);
    io.run();
    std::printf("valid %d write %s\n", valid ? 1 : 0, outcome.c_str());
    std::fflush(stdout);
    return 0;
}

} // namespace

int main(int argc, char* argv[])
{
    if (argc >= 2 && std::string{argv[1]} == "--worker") {
        const std::string mode = argc >= 3 ? argv[2] : "";
        if (mode == "increment" && argc == 5)
            return increment(argv[3], std::stoi(argv[4]));
        if (mode == "hold" && argc == 6)
            return hold(argv[3], argv[4], std::stoi(argv[5]));
        // Workers of other stores' test files (registered by them, when built).
        if (const auto w = test::worker_registry().find(mode); w != test::worker_registry().end())
            return w->second(std::vector<std::string>(argv + 3, argv + argc));
        std::fprintf(stderr, "unknown worker\n");
        return 2;
    }
    return test::run_catch(argc, argv);
}
