// Real processes and real failures: a holder paused past its TTL, the server killed
// mid-operation, a connection dropped while waiting, and a Redlock quorum losing
// nodes. (Holders killed and processes counting under the lock: the conformance
// suite, on redis_single.)
#include "redis_support.hpp"
#include "fault/proxy.hpp"
#include "workers.hpp"

#include <signal.h>

#include <cstdio>
#include <iostream>

using namespace test;
using redis_mutex = dl::basic_distributed_mutex<dl::redis::store>;
using one_shot = dl::basic_distributed_mutex<dl::redis::store, dl::retry::none>;

namespace {

// hold PORT RESOURCE TTL_MS: takes the lock, prints "locked FENCE", waits for a line on
// stdin, then writes "late" to the fenced key "data" and prints the outcome.
int hold(const std::vector<std::string>& args)
{
    if (args.size() != 3)
        return 2;
    asio::io_context io;
    dl::redis::config cfg;
    cfg.port = static_cast<std::uint16_t>(std::stoi(args[0]));
    dl::redis::store store{io, cfg};
    dl::basic_distributed_mutex<dl::redis::store, dl::retry::exponential_backoff> m{
        store, args[1], {.ttl = std::chrono::milliseconds{std::stoi(args[2])}}};
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

[[maybe_unused]] const bool fault_workers_registered = register_worker("hold", hold);

} // namespace

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
        auto written = co_await store.fenced_write("data", next->fence(), "new holder");
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
        dl::diagnostics diag;
        auto hung = co_await other.lock(diag);
        REQUIRE_FALSE(hung); // ...and time out as outcome_unknown, cleaned up, reported
        CHECK((hung.error() == dl::errc::outcome_unknown || hung.error() == dl::errc::store_unavailable));
        CHECK(diag.client_message().find("request timeout") != std::string::npos);

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
        // A restarted empty node knows no token, but its clock has moved on: the next
        // token is still larger (docs/guarantees.md).
        CHECK(back->fence() > held->fence());
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

TEST_CASE("redis: a disconnect while an acquisition is in flight leaves no lock behind", "[redis][fault]")
{
    redis_server server;
    fault::proxy net{server.port()};
    asio::io_context io;
    auto via_proxy = server.config();
    via_proxy.port = net.port();
    dl::redis::store store{io, via_proxy};
    dl::redis::store direct{io, server.config()};
    const auto key = store.lock_key("in-flight");
    run(io, [&]() -> asio::awaitable<void> {
        // Connected, and the scripts known to the server (EVALSHA would get NOSCRIPT).
        one_shot warm_up{store, "warm-up"};
        auto warm = co_await warm_up.lock();
        REQUIRE(warm);
        auto warm_released = co_await warm->unlock();
        REQUIRE(warm_released);
        // Requests reach the server; replies are held: the acquisition is applied but
        // its grant never arrives.
        net.set(fault::direction::to_client, {.blackhole = true});
        one_shot m{store, "in-flight", {.ttl = 30s}};
        std::optional<dl::result<dl::lease>> got;
        asio::co_spawn(co_await asio::this_coro::executor,
                       [&]() -> asio::awaitable<void> { got = co_await m.lock(); }, asio::detached);
        bool applied = false;
        for (int i = 0; i < 1000 && !applied; ++i) {
            co_await settle(5ms);
            auto get = dl::redis::resp::command({"GET", key});
            auto held = co_await direct.execute_command(std::move(get));
            applied = held && held.value().is_string();
        }
        REQUIRE(applied);
        REQUIRE_FALSE(got);
        store.disconnect(); // the grant is in flight: its outcome is unknown, not "not applied"
        co_await settle(5ms);
        net.heal(); // the clean-up by owner token can get through
        for (int i = 0; i < 1000 && !got; ++i)
            co_await settle(5ms);
        REQUIRE(got);
        REQUIRE_FALSE(*got);
        CHECK(got->error() == dl::errc::outcome_unknown);

        // Nothing is left: the 30 s TTL cannot explain that, and a second client takes
        // the lock at once instead of waiting against an orphaned one.
        auto get = dl::redis::resp::command({"GET", key});
        auto left = co_await direct.execute_command(std::move(get));
        REQUIRE(left);
        CHECK(left.value().is_null());
        one_shot other{direct, "in-flight", {.ttl = 30s}};
        auto second = co_await other.lock();
        REQUIRE(second);
        auto released = co_await second->unlock();
        CHECK(released);
    });
}

TEST_CASE("redis: on disconnect, a request written in part is outcome_unknown and a queued one store_unavailable",
          "[redis][fault]")
{
    redis_server server;
    asio::io_context io;
    dl::redis::store store{io, server.config()};
    run(io, [&]() -> asio::awaitable<void> {
        auto ping = dl::redis::resp::command({"PING"});
        auto pong = co_await store.execute_command(std::move(ping)); // connected
        REQUIRE(pong);
        // A stopped server reads nothing: a 64 MiB request fills the socket buffers
        // and its write stays unfinished; a request after it waits in the queue.
        server.pause();
        std::optional<dl::result<dl::redis::resp::value>> big, small;
        auto ex = co_await asio::this_coro::executor;
        auto set = dl::redis::resp::command({"SET", "big", std::string(64 << 20, 'x')});
        asio::co_spawn(ex, [&, set]() mutable -> asio::awaitable<void> {
            big = co_await store.execute_command(std::move(set));
        }, asio::detached);
        co_await settle(50ms);
        asio::co_spawn(ex, [&]() -> asio::awaitable<void> {
            auto after = dl::redis::resp::command({"PING"});
            small = co_await store.execute_command(std::move(after));
        }, asio::detached);
        co_await settle(5ms);
        REQUIRE_FALSE(big);
        REQUIRE_FALSE(small);
        store.disconnect();
        for (int i = 0; i < 1000 && !(big && small); ++i)
            co_await settle(5ms);
        server.resume();
        REQUIRE(big);
        REQUIRE(small);
        REQUIRE_FALSE(*big);
        REQUIRE_FALSE(*small);
        CHECK(big->error() == dl::errc::outcome_unknown);
        CHECK(small->error() == dl::errc::store_unavailable);
    });
}
