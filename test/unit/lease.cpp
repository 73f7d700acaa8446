// Leases: watchdog renewal, loss reporting, max hold, late extensions, unlock results.
#include "support.hpp"

#include <asio/bind_cancellation_slot.hpp>
#include <asio/post.hpp>

using namespace test;
using watched_mutex = dl::basic_distributed_mutex<dl::memory::store, dl::renew::watchdog>;
using plain_mutex = dl::basic_distributed_mutex<dl::memory::store>;

TEST_CASE("the watchdog keeps a lease alive for 10x its TTL, then reports loss when the store goes",
          "[lease][renew]")
{
    dl::manual_clock clock;
    asio::io_context io;
    dl::memory::store store{io};
    recorder rec;
    run(io, [&]() -> asio::awaitable<void> {
        dl::basic_distributed_mutex<dl::memory::store, dl::renew::watchdog, dl::observe::callback> m{
            store, "job", {.ttl = 3s}, rec.observer()};
        auto lease = co_await m.lock();
        REQUIRE(lease);
        const auto first_valid_until = lease->valid_until();

        // Work bound to the lease's loss signal.
        asio::steady_timer work{co_await asio::this_coro::executor, std::chrono::hours{1}};
        bool work_cancelled = false;
        work.async_wait(asio::bind_cancellation_slot(lease->lost_slot(), [&](std::error_code ec) {
            work_cancelled = ec == asio::error::operation_aborted;
        }));

        co_await advance(clock, 30s, 250ms);
        CHECK(lease->valid());
        CHECK(lease->valid_until() > first_valid_until + 25s);
        REQUIRE(store.inspect("job"));
        CHECK(store.inspect("job")->owner == lease->owner());
        CHECK(rec.of<dl::renewal_event>().size() >= 25);
        // Each event reports the validity the extension left.
        CHECK(rec.of<dl::renewal_event>().back().valid_until == lease->valid_until());
        CHECK_FALSE(work_cancelled);

        store.set_online(false);
        co_await advance(clock, 2s, 250ms);
        const auto why = co_await lease->lost();
        CHECK(why == dl::errc::store_unavailable);
        CHECK_FALSE(lease->valid());
        co_await settle();
        CHECK(work_cancelled);
        store.set_online(true);
        auto r = co_await lease->unlock();
        REQUIRE_FALSE(r);
        CHECK(r.error() == dl::errc::lease_lost);
    });
}

TEST_CASE("loss is reported at the local deadline when extensions hang", "[lease][renew]")
{
    dl::manual_clock clock;
    asio::io_context io;
    dl::memory::store store{io};
    run(io, [&]() -> asio::awaitable<void> {
        watched_mutex m{store, "r", {.ttl = 3s}};
        auto lease = co_await m.lock();
        REQUIRE(lease);
        const auto deadline = lease->valid_until();
        store.set_reply_delay(1h); // every extension is stuck in flight
        std::optional<std::error_code> why;
        asio::co_spawn(co_await asio::this_coro::executor,
                       [&]() -> asio::awaitable<void> { why = co_await lease->lost(); }, asio::detached);
        co_await advance(clock, 2900ms, 100ms);
        CHECK_FALSE(why); // not before the deadline
        co_await advance(clock, 200ms, 100ms);
        for (int i = 0; i < 50 && !why; ++i)
            co_await settle(2ms);
        REQUIRE(why);
        CHECK(*why == dl::errc::lease_lost);
        CHECK(clock.now() >= deadline);
        store.set_reply_delay(0ms);
    });
}

TEST_CASE("an extension that succeeds after the local deadline does not revive the lease",
          "[lease][renew]")
{
    dl::manual_clock clock;
    asio::io_context io;
    dl::memory::store store{io};
    run(io, [&]() -> asio::awaitable<void> {
        watched_mutex m{store, "r", {.ttl = 3s, .drift_factor = 0, .drift_floor = 0ms}};
        auto lease = co_await m.lock();
        REQUIRE(lease);
        store.set_reply_delay(2500ms); // applied at once, acknowledged too late
        co_await advance(clock, 3100ms, 100ms);
        CHECK_FALSE(lease->valid());
        {
            auto outcome = co_await lease->lost();
            CHECK(outcome == dl::errc::lease_lost);
        }
        // The store did extend it; the lease stays lost all the same.
        co_await advance(clock, 3s, 100ms);
        CHECK_FALSE(lease->valid());
        store.set_reply_delay(0ms);
        auto r = co_await lease->unlock();
        REQUIRE_FALSE(r);
        CHECK(r.error() == dl::errc::lease_lost);
        CHECK(store.live_locks() == 0); // the release still cleaned up by owner token
    });
}

TEST_CASE("the watchdog stops renewing after max_hold", "[lease][renew]")
{
    dl::manual_clock clock;
    asio::io_context io;
    dl::memory::store store{io};
    run(io, [&]() -> asio::awaitable<void> {
        watched_mutex m{store, "r", {.ttl = 3s}, dl::renew::watchdog{.max_hold = 10s}};
        auto lease = co_await m.lock();
        REQUIRE(lease);
        co_await advance(clock, 9s, 250ms);
        CHECK(lease->valid());
        co_await advance(clock, 5s, 250ms);
        CHECK_FALSE(lease->valid());
        {
            auto outcome = co_await lease->lost();
            CHECK(outcome == dl::errc::lease_lost);
        }
        co_await advance(clock, 1s, 250ms);
        CHECK(store.live_locks() == 0); // the store let it expire too
    });
}

TEST_CASE("no extension reaches the store after the release", "[lease][renew]")
{
    dl::manual_clock clock;
    asio::io_context io;
    dl::memory::store store{io};
    run(io, [&]() -> asio::awaitable<void> {
        watched_mutex m{store, "r", {.ttl = 3s}};
        auto lease = co_await m.lock();
        REQUIRE(lease);
        store.set_reply_delay(50ms);
        clock.advance(1100ms); // the next extension starts now and is in flight...
        co_await settle(10ms);
        std::optional<dl::result<void>> released;
        asio::co_spawn(co_await asio::this_coro::executor,
                       [&]() -> asio::awaitable<void> { released = co_await lease->unlock(); }, asio::detached);
        co_await settle(10ms);
        CHECK_FALSE(released); // ...and unlock waits for its reply before releasing
        co_await advance(clock, 200ms, 10ms);
        REQUIRE(released);
        CHECK(*released);
        store.set_reply_delay(0ms);
        co_await advance(clock, 5s, 250ms);
        CHECK(store.live_locks() == 0);
        // The next holder is not disturbed by anything of the old lease.
        plain_mutex other{store, "r", {.ttl = 3s}};
        auto next = co_await other.lock();
        REQUIRE(next);
        co_await advance(clock, 2s, 250ms);
        CHECK(store.inspect("r")->owner == next->owner());
    });
}

TEST_CASE("unlock reports how the lease ended", "[lease]")
{
    dl::manual_clock clock;
    asio::io_context io;
    dl::memory::store store{io};
    run(io, [&]() -> asio::awaitable<void> {
        plain_mutex m{store, "r", {.ttl = 2s}};
        SECTION("released in time: success; a second unlock: released")
        {
            auto lease = co_await m.lock();
            REQUIRE(lease);
            CHECK(lease->valid());
            {
                auto outcome = co_await lease->unlock();
                CHECK(outcome);
            }
            CHECK_FALSE(lease->valid());
            auto again = co_await lease->unlock();
            REQUIRE_FALSE(again);
            CHECK(again.error() == dl::errc::released);
            {
                auto outcome = co_await lease->lost();
                CHECK(outcome == dl::errc::released);
            }
        }
        SECTION("a released lease is never reported lost")
        {
            auto lease = co_await m.lock();
            REQUIRE(lease);
            {
                auto released = co_await lease->unlock();
                REQUIRE(released);
            }
            asio::steady_timer work{co_await asio::this_coro::executor, std::chrono::hours{1}};
            bool cancelled = false;
            work.async_wait(asio::bind_cancellation_slot(lease->lost_slot(), [&](std::error_code ec) {
                cancelled = ec == asio::error::operation_aborted;
            }));
            const auto why = co_await lease->lost();
            CHECK(why == dl::errc::released);
            co_await advance(clock, 5s, 250ms);
            CHECK_FALSE(cancelled);
            work.cancel();
            co_await settle();
        }
        SECTION("validity ran out before the release: lease_lost")
        {
            auto lease = co_await m.lock();
            REQUIRE(lease);
            clock.advance(1990ms); // past valid_until (ttl - drift), before the store's expiry
            auto r = co_await lease->unlock();
            REQUIRE_FALSE(r);
            CHECK(r.error() == dl::errc::lease_lost);
            CHECK(store.live_locks() == 0);
        }
        SECTION("a lease without renewal still reports its loss to watchers")
        {
            auto lease = co_await m.lock();
            REQUIRE(lease);
            std::optional<std::error_code> why;
            asio::co_spawn(co_await asio::this_coro::executor,
                           [&]() -> asio::awaitable<void> { why = co_await lease->lost(); }, asio::detached);
            co_await advance(clock, 2s, 100ms);
            for (int i = 0; i < 50 && !why; ++i)
                co_await settle(2ms);
            REQUIRE(why);
            CHECK(*why == dl::errc::lease_lost);
        }
        SECTION("a lease that goes out of scope is released in the background")
        {
            {
                auto lease = co_await m.lock();
                REQUIRE(lease);
                CHECK(store.live_locks() == 1);
            }
            co_await settle();
            CHECK(store.live_locks() == 0);
        }
    });
}

TEST_CASE("valid_until is computed from when the attempt started, minus the drift margin", "[lease]")
{
    dl::manual_clock clock;
    asio::io_context io;
    dl::memory::store store{io};
    run(io, [&]() -> asio::awaitable<void> {
        plain_mutex m{store, "r", {.ttl = 10s, .drift_factor = 0.01, .drift_floor = 2ms}};
        const auto start = clock.now();
        auto lease = co_await m.lock();
        REQUIRE(lease);
        CHECK(lease->valid_until() == start + 10s - 100ms - 2ms);
        CHECK(store.inspect("r")->remaining == 10s);
    });
}

TEST_CASE("an unlock() awaited after its lease was dropped and released still completes safely",
          "[lease][lifetime]")
{
    asio::io_context io;
    dl::memory::store store{io};
    run(io, [&]() -> asio::awaitable<void> {
        plain_mutex m{store, "r", {.ttl = 10s}};
        auto lease = co_await m.lock();
        REQUIRE(lease);
        auto pending = lease->unlock(); // not started yet
        *lease = dl::lease{};           // dropped: released in the background
        // Let the background release finish, so that nothing but `pending` refers to
        // the lease's state any more (under ASan, a dangling state would show here).
        for (int i = 0; i < 100; ++i) {
            auto info = co_await store.read("r");
            REQUIRE(info);
            if (!info->held)
                break;
            co_await asio::post(co_await asio::this_coro::executor, asio::use_awaitable);
        }
        auto info = co_await store.read("r");
        REQUIRE(info);
        CHECK_FALSE(info->held);
        auto late = co_await std::move(pending);
        REQUIRE_FALSE(late);
        CHECK(late.error() == dl::errc::released);
    });
}
