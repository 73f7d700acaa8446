// test/threads.hpp: what the multi-threaded tests (threads.cpp, threads_sessions.cpp)
// share: running an io_context on four threads, and workers that count their failures
// (Catch's assertions are not thread-safe) for the main thread to assert.
#pragma once

#include "support.hpp"

#include <atomic>
#include <thread>
#include <utility>
#include <vector>

namespace test {

// Runs `io` on four threads until its work is done or `limit` has passed.
inline void run_on_four_threads(asio::io_context& io, dl::duration limit)
{
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t)
        threads.emplace_back([&] { io.run_for(limit); });
    for (auto& t : threads)
        t.join();
}

// `rounds` times: takes `m`, runs `section` under the lease, gives it back. Every
// failure counts in `errors` (Catch's assertions are not thread-safe).
template <class Mutex, class Section>
asio::awaitable<void> lock_rounds(Mutex& m, int rounds, std::atomic<int>& errors, Section& section)
{
    for (int i = 0; i < rounds; ++i) {
        auto lease = co_await m.lock();
        if (!lease) {
            ++errors;
            continue;
        }
        if (!co_await section(*lease))
            ++errors;
        if (!co_await lease->unlock())
            ++errors;
    }
}

// `workers` coroutines, each on a strand of its own, on four threads, sharing `store`:
// each takes its own lock ("odd" or "even") and a shared one `rounds` times, watches
// its own lease (its listener is bound while the session pushes), and runs
// `section(shared lease)` under both; the last one closes the store, so the threads'
// run() returns. Catch's assertions are not thread-safe: the errors are counted and
// returned, with the workers that finished.
template <class Store, class Section>
std::pair<int, int> share_session_store(Store& store, asio::io_context& io, int workers, int rounds, Section section)
{
    using mutex = dl::basic_distributed_mutex<Store, dl::retry::exponential_backoff>;
    std::atomic<int> errors{0}, finished{0};
    for (int w = 0; w < workers; ++w)
        asio::co_spawn(asio::make_strand(io), [&, w]() -> asio::awaitable<void> {
            mutex m{store, w % 2 ? "odd" : "even", {}, dl::retry::exponential_backoff{.deadline = 60s}};
            mutex shared{store, "shared", {}, dl::retry::exponential_backoff{.deadline = 60s}};
            for (int i = 0; i < rounds; ++i) {
                auto own = co_await m.lock();
                auto lease = co_await shared.lock();
                if (!own || !lease) {
                    ++errors;
                    continue;
                }
                asio::co_spawn(co_await asio::this_coro::executor, own->lost(), asio::detached);
                if (!co_await section(*lease))
                    ++errors;
                if (!co_await lease->unlock() || !co_await own->unlock())
                    ++errors;
            }
            if (++finished == workers)
                co_await store.close();
        }, asio::detached);
    run_on_four_threads(io, 90s);
    return {errors.load(), finished.load()};
}

} // namespace test
