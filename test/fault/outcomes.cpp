// Unknown outcomes and restarts against real servers: a request applied whose reply
// is lost, a connection reset mid-request, and a server restarted with and without
// persistence. Also: no file descriptors left behind by a faulty run.
#include "fault_support.hpp"
#include "proxy.hpp"
#include "tally.hpp"

#include <distlock/redis.hpp>

#include <filesystem>
#include <signal.h>
#include <thread>

using namespace test;
using namespace fault;

namespace {

std::size_t open_fds()
{
    std::size_t n = 0;
    for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator{"/proc/self/fd"})
        ++n;
    return n;
}

} // namespace

TEST_CASE("faults: an acquisition whose reply is lost is not a grant, and leaves nothing behind",
          "[fault][proxy][unknown]")
{
    ++fault::tally::get().scenarios;
    redis_server server;
    std::vector<op> h;
    const auto fds_before = open_fds();
    {
        fault::proxy net{server.port()};
        asio::io_context io;
        dl::redis::store store{io, via(net.port(), std::chrono::seconds{2})};
        // Connected and scripts loaded, so that the next request is the acquisition.
        run(io, [&]() -> asio::awaitable<void> {
            redis_mutex warm{store, "warm-up"};
            auto w = co_await warm.lock();
            REQUIRE(w);
            co_await w->unlock();
        });

        // The server applies the acquisition; the connection closes before the reply.
        net.set(fault::direction::to_client, {.close_after = 0});
        run(io, [&]() -> asio::awaitable<void> {
            redis_mutex m{store, "job", {.ttl = 30s}};
            const auto t = now_ns();
            auto got = co_await m.try_lock();
            h.push_back(op{.process = 1, .kind = kind::acquire, .resource = "job", .invoke = t,
                           .complete = now_ns(),
                           .result = got ? outcome::ok : outcome::unknown});
            REQUIRE_FALSE(got);
            CHECK(got.error() == dl::errc::outcome_unknown);
        });
        // It was cleaned up by owner token at once: the 30 s TTL cannot explain this.
        CHECK_FALSE(lock_left(server.config(), "job"));

        // The connection is reset while a lease is held: its release meets the dead
        // connection, is tried again on a new one, and the lock is gone at once.
        run(io, [&]() -> asio::awaitable<void> {
            redis_mutex holder{store, "job", {.ttl = 30s}};
            auto first = co_await holder.lock();
            REQUIRE(first);
            CHECK(first->fence() >= 2); // the lost acquisition used a token too
            net.reset_all();
            auto r = co_await first->unlock();
            CHECK(r.has_value());
        });
        CHECK_FALSE(lock_left(server.config(), "job"));
        CHECK(net.faults_injected() == 2);
        fault::tally::get().faults += net.faults_injected();
    }
    CHECK(open_fds() == fds_before); // sockets, timers and the proxy's thread are gone
    probe(h, server.config(), "job");
    auto report = fault::check(h);
    fault::tally::get().add(report, 0);
    CHECK(report.clean());
}

TEST_CASE("faults: a server restarted with appendfsync always keeps its locks and its fences",
          "[fault][restart][fencing]")
{
    ++fault::tally::get().scenarios;
    redis_server server{{"--appendonly", "yes", "--appendfsync", "always"}};
    std::vector<op> h;
    // A holder process takes the lock, then it and the server are killed together.
    auto holder = worker({"hold", "1", std::to_string(server.port()), "job", "1500", "0"});
    REQUIRE(read_until(*holder, h, is(kind::acquire)));
    REQUIRE(h.back().result == outcome::ok);
    const auto killed = now_ns();
    holder->kill(SIGKILL);
    h.push_back(op{.process = 1, .kind = kind::crash, .resource = "job", .invoke = killed, .complete = killed});
    server.kill(); // SIGKILL, then the same directory: the AOF is replayed
    server.start();

    asio::io_context io;
    dl::redis::store store{io, server.config()};
    run(io, [&]() -> asio::awaitable<void> {
        dl::basic_distributed_mutex<dl::redis::store, dl::retry::none> now{store, "job"};
        auto early = co_await now.lock();
        // A server that accepts connections may still be loading its AOF (LOADING:
        // not applied); ask again until it answers (bounded).
        for (int i = 0; i < 100 && !early && early.error() == dl::errc::store_unavailable; ++i) {
            asio::steady_timer pause{co_await asio::this_coro::executor, std::chrono::milliseconds{20}};
            co_await pause.async_wait(asio::use_awaitable);
            early = co_await now.lock();
        }
        REQUIRE_FALSE(early); // the lock survived the restart...
        CHECK(early.error() == dl::errc::contended);
        redis_mutex later{store, "job", {.ttl = 5s}, backoff{.initial = 20ms, .max = 100ms, .deadline = 10s}};
        const auto t = now_ns();
        auto got = co_await later.lock(); // ...until its TTL ran out
        REQUIRE(got);
        h.push_back(op{.process = 2, .kind = kind::acquire, .resource = "job", .invoke = t,
                       .complete = now_ns(), .result = outcome::ok,
                       .fence = got->fence(), .valid_until = got->valid_until().time_since_epoch().count()});
        co_await got->unlock();
    });
    // The checker's fencing rule covers the counter: the new grant's token is larger.
    auto report = fault::check(h);
    fault::tally::get().add(report, 2);
    INFO(report.summary());
    CHECK(report.clean());
    CHECK(h.back().fence > h.front().fence);
}
