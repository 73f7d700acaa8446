// The tests that run the library on several threads at once: one store shared by
// coroutines on strands of an io_context run by four threads, the in-process store
// and Redis (test/unit/async_and_blocking.cpp, in the same executable, adds the
// blocking adapters and completion tokens from foreign threads). The ThreadSanitizer
// build runs this executable: every other test drives the library from one thread,
// where TSan has nothing to find.
#include "support.hpp"
#include "redis_support.hpp"

#include <asio/post.hpp>

#include <atomic>
#include <optional>
#include <string>
#include <thread>
#include <vector>

using namespace test;
using memory_mutex = dl::basic_distributed_mutex<dl::memory::store>;

TEST_CASE("mutual exclusion holds across threads", "[mutex][concurrency]")
{
    // Catch's assertions are not thread-safe: workers count, the main thread asserts.
    asio::io_context io;
    dl::memory::store store{io};
    constexpr int workers = 8, rounds = 20;
    std::atomic<int> inside{0}, overlaps{0}, finished{0}, errors{0};
    long counter = 0; // guarded only by the distributed lock
    for (int w = 0; w < workers; ++w)
        asio::co_spawn(asio::make_strand(io), [&]() -> asio::awaitable<void> {
            memory_mutex m{store, "shared", {.ttl = 10s},
                           dl::retry::exponential_backoff{.initial = 50us, .max = 1ms}};
            for (int i = 0; i < rounds; ++i) {
                auto lease = co_await m.lock();
                if (!lease) {
                    ++errors;
                    continue;
                }
                if (inside.fetch_add(1) != 0)
                    ++overlaps;
                const long seen = counter;
                co_await asio::post(co_await asio::this_coro::executor, asio::use_awaitable);
                counter = seen + 1;
                inside.fetch_sub(1);
                auto released = co_await lease->unlock();
                if (!released)
                    ++errors;
            }
            ++finished;
        }, asio::detached);
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t)
        threads.emplace_back([&] { io.run_for(60s); });
    for (auto& t : threads)
        t.join();
    CHECK(errors == 0);
    CHECK(finished == workers);
    CHECK(overlaps == 0);
    CHECK(counter == workers * rounds);
}

TEST_CASE("redis: one store shared by coroutines on several threads", "[redis][concurrency]")
{
    // Catch's assertions are not thread-safe: workers count, the main thread asserts.
    redis_server server;
    asio::io_context io;
    dl::redis::store store{io, server.config()};
    constexpr int workers = 8, rounds = 20;
    std::atomic<int> errors{0}, finished{0};
    for (int w = 0; w < workers; ++w)
        asio::co_spawn(asio::make_strand(io), [&]() -> asio::awaitable<void> {
            dl::basic_distributed_mutex<dl::redis::store, dl::renew::watchdog> m{
                store, "threads", {.ttl = 5s}, dl::retry::exponential_backoff{.initial = 1ms, .max = 10ms}};
            for (int i = 0; i < rounds; ++i) {
                auto lease = co_await m.lock();
                if (!lease) {
                    ++errors;
                    continue;
                }
                auto get = dl::redis::resp::command({"GET", "n"});
                auto got = co_await store.execute_command(std::move(get));
                const long n = got && got.value().is_string() ? std::stol(got.value().text) : 0;
                auto set = dl::redis::resp::command({"SET", "n", std::to_string(n + 1)});
                auto written = co_await store.execute_command(std::move(set));
                if (!written)
                    ++errors;
                auto released = co_await lease->unlock();
                if (!released)
                    ++errors;
            }
            if (++finished == workers)
                store.disconnect(); // lets the threads' run() return
        }, asio::detached);
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t)
        threads.emplace_back([&] { io.run_for(60s); });
    for (auto& t : threads)
        t.join();
    CHECK(errors == 0);
    CHECK(finished == workers);
    asio::io_context probe;
    CHECK(peek(probe, server.config(), "n") == std::to_string(workers * rounds));
}
