// Real processes and real failures: several client processes, a holder killed or
// paused, the server killed mid-operation, a connection dropped while waiting, and a
// Redlock quorum losing nodes.
#include "redis_support.hpp"

#include <signal.h>

using namespace test;
using redis_mutex = dl::basic_distributed_mutex<dl::redis::store>;

TEST_CASE("redis: client processes incrementing with GET/SET lose nothing", "[redis][process]")
{
    redis_server server;
    constexpr int processes = 4, rounds = 40;
    std::vector<std::unique_ptr<child>> workers;
    for (int i = 0; i < processes; ++i)
        workers.push_back(std::make_unique<child>(std::vector<std::string>{
            self_path(), "--worker", "increment", std::to_string(server.port()), std::to_string(rounds)}));
    for (auto& w : workers)
        CHECK(w->wait(std::chrono::seconds{120}) == std::optional<int>{0});
    asio::io_context io;
    CHECK(peek(io, server.config(), "counter") == std::to_string(processes * rounds));
}

TEST_CASE("redis: a holder killed with SIGKILL frees the lock after its TTL", "[redis][process]")
{
    redis_server server;
    child holder{{self_path(), "--worker", "hold", std::to_string(server.port()), "job", "400"}};
    const auto line = holder.read_line();
    REQUIRE(line);
    REQUIRE(line->starts_with("locked "));
    const auto holder_fence = std::stoull(line->substr(7));
    holder.kill(SIGKILL);
    holder.wait();

    asio::io_context io;
    dl::redis::store store{io, server.config()};
    run(io, [&]() -> asio::awaitable<void> {
        dl::basic_distributed_mutex<dl::redis::store, dl::retry::none> now{store, "job"};
        auto early = co_await now.lock();
        REQUIRE_FALSE(early); // the dead holder's lock is still there...
        CHECK(early.error() == dl::errc::contended);
        redis_mutex later{store, "job", {}, dl::retry::exponential_backoff{.initial = 20ms, .max = 100ms, .deadline = 5s}};
        auto got = co_await later.lock(); // ...until its TTL runs out
        REQUIRE(got);
        CHECK(got->fence() > holder_fence);
    });
}

TEST_CASE("redis: a holder paused past its TTL has its late fenced write rejected", "[redis][process][fencing]")
{
    redis_server server;
    child holder{{self_path(), "--worker", "hold", std::to_string(server.port()), "wallet", "300"}};
    const auto line = holder.read_line();
    REQUIRE(line);
    REQUIRE(line->starts_with("locked "));
    holder.kill(SIGSTOP); // the GC pause

    asio::io_context io;
    dl::redis::store store{io, server.config()};
    run(io, [&]() -> asio::awaitable<void> {
        redis_mutex m{store, "wallet", {}, dl::retry::exponential_backoff{.initial = 20ms, .max = 100ms, .deadline = 5s}};
        auto next = co_await m.lock();
        REQUIRE(next);
        auto written = co_await store.fenced_write("data", "new holder", next->fence());
        REQUIRE(written);
    });

    holder.kill(SIGCONT);
    holder.write_line("go");
    const auto outcome = holder.read_line();
    REQUIRE(outcome);
    CHECK(*outcome == "valid 0 write " + make_error_code(dl::errc::stale_fence).message());
    run(io, [&]() -> asio::awaitable<void> {
        auto value = co_await store.fenced_read("data");
        REQUIRE(value);
        CHECK(value.value() == std::optional<std::string>{"new holder"});
    });
}

TEST_CASE("redis: the server killed mid-operation gives clean errors, then recovery", "[redis][fault]")
{
    redis_server server;
    asio::io_context io;
    auto cfg = server.config();
    cfg.request_timeout = 500ms;
    dl::redis::store store{io, cfg};
    run(io, [&]() -> asio::awaitable<void> {
        dl::basic_distributed_mutex<dl::redis::store, dl::renew::watchdog> m{store, "r", {.ttl = 3s}};
        auto held = co_await m.lock();
        REQUIRE(held);

        server.pause(); // requests now hang...
        dl::basic_distributed_mutex<dl::redis::store, dl::retry::none> other{store, "other"};
        auto hung = co_await other.lock();
        REQUIRE_FALSE(hung); // ...and time out as outcome_unknown, cleaned up, reported
        CHECK((hung.error() == dl::errc::outcome_unknown || hung.error() == dl::errc::store_unavailable));
        CHECK_FALSE(store.last_error().empty());

        server.kill(); // ...then the server dies
        auto down = co_await other.lock();
        REQUIRE_FALSE(down);
        CHECK(down.error() == dl::errc::store_unavailable);

        const auto why = co_await held->lost(); // the watchdog cannot extend: lost
        CHECK((why == dl::errc::store_unavailable || why == dl::errc::outcome_unknown ||
               why == dl::errc::lease_lost));

        server.start(); // same port, empty
        auto back = co_await other.lock();
        REQUIRE(back);
        CHECK(back->fence() == 1); // a restarted empty node starts counting again (see docs)
    });
}

TEST_CASE("redis: a waiter whose connections are killed still acquires", "[redis][fault][notify]")
{
    redis_server server;
    asio::io_context io;
    dl::redis::store store{io, server.config()};
    dl::redis::store admin{io, server.config()};
    run(io, [&]() -> asio::awaitable<void> {
        dl::basic_distributed_mutex<dl::redis::store, dl::retry::none> holder{store, "job", {.ttl = 30s}};
        auto held = co_await holder.lock();
        REQUIRE(held);
        redis_mutex waiter{store, "job", {.ttl = 30s},
                           dl::retry::exponential_backoff{.initial = 50ms, .max = 200ms, .deadline = 20s}};
        std::optional<dl::result<dl::lease>> got;
        asio::co_spawn(co_await asio::this_coro::executor,
                       [&]() -> asio::awaitable<void> { got = co_await waiter.lock(); }, asio::detached);
        co_await settle(100ms);
        auto kill = dl::redis::resp::command({"CLIENT", "KILL", "TYPE", "pubsub"});
        auto killed = co_await admin.execute_command(std::move(kill));
        REQUIRE(killed);
        CHECK(killed.value().integer >= 1);
        auto kill_normal = dl::redis::resp::command({"CLIENT", "KILL", "SKIPME", "yes", "TYPE", "normal"});
        auto killed_normal = co_await admin.execute_command(std::move(kill_normal));
        REQUIRE(killed_normal);
        co_await settle(100ms);
        CHECK_FALSE(got);
        auto direct = co_await store.release("job", held->owner()); // the holder lets go
        REQUIRE(direct);
        for (int i = 0; i < 1000 && !got; ++i)
            co_await settle(5ms);
        REQUIRE(got);
        CHECK(*got);
    });
}

namespace {
struct five_servers {
    std::vector<std::unique_ptr<redis_server>> servers;
    asio::io_context io;
    std::vector<std::unique_ptr<dl::redis::store>> stores;
    std::vector<dl::redis::store*> pointers;
    five_servers()
    {
        for (int i = 0; i < 5; ++i) {
            servers.push_back(std::make_unique<redis_server>());
            auto cfg = servers.back()->config();
            cfg.connect_timeout = 300ms;
            cfg.request_timeout = 300ms;
            stores.push_back(std::make_unique<dl::redis::store>(io, cfg));
            pointers.push_back(stores.back().get());
        }
    }
    std::size_t holding(const std::string& resource)
    {
        std::size_t n = 0;
        for (auto& s : servers) {
            if (!port_accepts(s->port()))
                continue;
            asio::io_context probe_io;
            dl::redis::store probe{probe_io, s->config()};
            if (peek(probe_io, s->config(), probe.lock_key(resource)))
                ++n;
        }
        return n;
    }
};
using redlock = dl::basic_distributed_mutex<dl::quorum<dl::redis::store>, dl::retry::none>;
} // namespace

TEST_CASE("redis: Redlock over 5 nodes with 2 killed works, with 3 killed fails cleanly", "[redis][quorum]")
{
    five_servers q;
    dl::quorum<dl::redis::store> nodes{std::span<dl::redis::store* const>{q.pointers}};
    redlock m{nodes, "job:nightly", {.ttl = 10s}};

    SECTION("2 of 5 killed")
    {
        q.servers[1]->kill();
        q.servers[3]->kill();
        run(q.io, [&]() -> asio::awaitable<void> {
            auto lease = co_await m.lock();
            REQUIRE(lease);
            CHECK(lease->valid());
            auto again = co_await m.try_lock();
            REQUIRE_FALSE(again);
            CHECK(again.error() == dl::errc::contended);
            auto released = co_await lease->unlock();
            CHECK(released);
        });
        CHECK(q.holding("job:nightly") == 0);
    }
    SECTION("3 of 5 killed")
    {
        q.servers[0]->kill();
        q.servers[2]->kill();
        q.servers[4]->kill();
        run(q.io, [&]() -> asio::awaitable<void> {
            auto lease = co_await m.lock();
            REQUIRE_FALSE(lease);
            CHECK(lease.error() == dl::errc::quorum_not_reached);
        });
        CHECK(q.holding("job:nightly") == 0); // the two live grants were given back
    }
}

TEST_CASE("redis: Redlock fencing tokens keep growing when a node restarts empty", "[redis][quorum][fencing]")
{
    five_servers q;
    dl::quorum<dl::redis::store> nodes{std::span<dl::redis::store* const>{q.pointers}};
    redlock m{nodes, "r", {.ttl = 10s}};
    run(q.io, [&]() -> asio::awaitable<void> {
        dl::fence_token last = 0;
        for (int round = 0; round < 6; ++round) {
            auto lease = co_await m.lock();
            REQUIRE(lease);
            CHECK(lease->fence() > last);
            last = lease->fence();
            auto released = co_await lease->unlock();
            REQUIRE(released);
            q.servers[static_cast<std::size_t>(round) % 5]->restart(); // empty, at once
        }
    });
}
