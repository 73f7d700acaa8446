// Helpers for distlock's tests: run a coroutine with a hang guard, let background
// work (keepers, releases) run, wait on real time briefly.
#pragma once

#include <distlock/distlock.hpp>
#include <distlock/memory.hpp>

#include <asio/co_spawn.hpp>
#include <asio/io_context.hpp>
#include <asio/steady_timer.hpp>
#include <asio/use_awaitable.hpp>

#include <catch2/catch.hpp>

#include <chrono>
#include <exception>
#include <functional>
#include <string>
#include <set>
#include <vector>

namespace test {

namespace dl = distlock;
using namespace std::chrono_literals;

/// Runs `body` on `io` until it finishes; a body still running after `limit` (real
/// time) fails the test instead of hanging it.
inline void run(asio::io_context& io, std::function<asio::awaitable<void>()> body,
                std::chrono::seconds limit = std::chrono::seconds{30})
{
    bool done = false;
    std::exception_ptr error;
    asio::co_spawn(io, body(), [&](std::exception_ptr e) {
        done = true;
        error = e;
    });
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (!done && std::chrono::steady_clock::now() < deadline) {
        io.run_one_for(std::chrono::milliseconds{20});
        if (io.stopped())
            io.restart();
    }
    if (error)
        std::rethrow_exception(error);
    REQUIRE(done); // false means the body hung
    // Let detached follow-up work (background releases) finish.
    for (int i = 0; i < 20 && io.poll() > 0; ++i)
        io.restart();
    io.restart();
}

/// Waits a little real time so that timers driven by a manual clock (which poll every
/// millisecond) and posted work get to run. Never used to make a timing claim.
inline asio::awaitable<void> settle(std::chrono::milliseconds d = std::chrono::milliseconds{5})
{
    asio::steady_timer t{co_await asio::this_coro::executor, d};
    co_await t.async_wait(asio::use_awaitable);
}

/// Advances a manual clock in steps, letting timers fire after each one.
inline asio::awaitable<void> advance(dl::manual_clock& clock, dl::duration total,
                                     dl::duration step = std::chrono::milliseconds{100})
{
    for (dl::duration done{}; done < total; done += step) {
        clock.advance(std::min(step, total - done));
        co_await settle(std::chrono::milliseconds{3});
    }
}

/// Collects observer events, for assertions.
struct recorder {
    std::shared_ptr<std::vector<dl::event>> events = std::make_shared<std::vector<dl::event>>();
    dl::observe::callback observer()
    {
        auto sink = events;
        return dl::observe::callback{[sink](const dl::event& e) { sink->push_back(e); }};
    }
    template <class E>
    std::vector<E> of() const
    {
        std::vector<E> out;
        for (const auto& e : *events)
            if (auto* p = std::get_if<E>(&e))
                out.push_back(*p);
        return out;
    }
};

} // namespace test
