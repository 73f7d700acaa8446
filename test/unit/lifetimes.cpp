// Object lifetimes: every destruction order of store, lease, lock() and io_context;
// close() finishing pending work; what a lock() call leaves when cut off by its
// deadline; observers that throw; several operations bound to one lease's loss.
// Run under ASan by ./dev test: a use-after-free here is a crash there.
#include "support.hpp"
#include "pending.hpp"

#include <asio/bind_cancellation_slot.hpp>

#include <memory>
#include <optional>

using namespace test;
using watched_mutex = dl::basic_distributed_mutex<dl::memory::store, dl::renew::watchdog>;
using plain_mutex = dl::basic_distributed_mutex<dl::memory::store>;

namespace {

// Runs the io_context until it has no work left or `limit` passed; true when it ran
// out of work by itself (nothing left running in the background).
bool drains(asio::io_context& io, std::chrono::milliseconds limit = 5000ms)
{
    io.restart();
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < deadline) {
        if (io.run_for(20ms) == 0 && io.stopped())
            return true;
        if (io.stopped())
            return true;
    }
    return false;
}

} // namespace

TEST_CASE("a lease dropped before its store: the background release never touches a destroyed store",
          "[lifetime]")
{
    asio::io_context io;
    auto store = std::make_unique<dl::memory::store>(io);
    std::optional<dl::lease> held;
    run(io, [&]() -> asio::awaitable<void> {
        watched_mutex m{*store, "job", {.ttl = 10s}};
        auto l = co_await m.lock();
        REQUIRE(l);
        held.emplace(std::move(*l));
    });
    REQUIRE(store->live_locks() == 1);
    held.reset();   // the release is now pending on the io_context
    store.reset();  // and the store goes before it runs
    CHECK(drains(io));
}

TEST_CASE("close() finishes the releases of dropped leases, then io.run() returns", "[lifetime]")
{
    dl::manual_clock clock;
    asio::io_context io;
    dl::memory::store store{io};
    run(io, [&]() -> asio::awaitable<void> {
        watched_mutex m{store, "job", {.ttl = 10s}};
        plain_mutex other{store, "other", {.ttl = 10s}};
        {
            auto a = co_await m.lock();
            auto b = co_await other.lock();
            REQUIRE(a);
            REQUIRE(b);
            CHECK(store.live_locks() == 2);
        } // both dropped: their releases run as background work of the store
        co_await store.close();
        CHECK(store.live_locks() == 0);
        CHECK(store.lifetime()->background_work() == 0);
        // A closed store takes no new locks, without I/O.
        auto late = co_await m.lock();
        REQUIRE_FALSE(late);
        CHECK(late.error() == dl::errc::store_unavailable);
    });
    CHECK(drains(io));
}

TEST_CASE("close() with a watched lease held: the lease is reported lost and released", "[lifetime]")
{
    dl::manual_clock clock;
    asio::io_context io;
    dl::memory::store store{io};
    run(io, [&]() -> asio::awaitable<void> {
        watched_mutex m{store, "job", {.ttl = 3s}};
        auto lease = co_await m.lock();
        REQUIRE(lease);
        co_await store.close();
        const auto why = co_await lease->lost();
        CHECK(why == dl::errc::store_unavailable);
        CHECK_FALSE(lease->valid());
        CHECK(store.live_locks() == 0);
        auto r = co_await lease->unlock();
        REQUIRE_FALSE(r);
    });
    // No keeper, timer or watcher is left: the io_context runs out of work.
    CHECK(drains(io));
}

TEST_CASE("a store destroyed with a watched lease held: the lease reports loss, its unlock fails cleanly",
          "[lifetime]")
{
    dl::manual_clock clock;
    asio::io_context io;
    auto store = std::make_unique<dl::memory::store>(io);
    std::optional<dl::lease> held;
    run(io, [&]() -> asio::awaitable<void> {
        watched_mutex m{*store, "job", {.ttl = 3s}};
        auto l = co_await m.lock();
        REQUIRE(l);
        held.emplace(std::move(*l));
    });
    store.reset();
    run(io, [&]() -> asio::awaitable<void> {
        const auto why = co_await held->lost();
        CHECK(why == dl::errc::store_unavailable);
        auto r = co_await held->unlock();
        REQUIRE_FALSE(r);
        co_await advance(clock, 10s, 500ms); // the keeper does not wake up against the store
    });
    held.reset();
    CHECK(drains(io));
}

TEST_CASE("a store destroyed while a lock() waits: lock() ends with store_unavailable", "[lifetime]")
{
    dl::manual_clock clock;
    asio::io_context io;
    auto store = std::make_unique<dl::memory::store>(io);
    std::optional<dl::lease> holder;
    std::optional<dl::result<dl::lease>> waiter;
    run(io, [&]() -> asio::awaitable<void> {
        plain_mutex m{*store, "job", {.ttl = 60s}};
        auto l = co_await m.lock();
        REQUIRE(l);
        holder.emplace(std::move(*l));
    });
    // A waiter with a long backoff, listening for releases.
    asio::co_spawn(
        io,
        [](dl::memory::store& s, std::optional<dl::result<dl::lease>>& out) -> asio::awaitable<void> {
            plain_mutex m{s, "job", {.ttl = 60s},
                          dl::retry::exponential_backoff{.initial = 20s, .max = 20s, .deadline = 300s}};
            out.emplace(co_await m.lock());
        }(*store, waiter),
        asio::detached);
    for (int i = 0; i < 50; ++i)
        io.poll();
    REQUIRE_FALSE(waiter);
    CHECK(store->watchers() == 1);
    store.reset();
    io.restart();
    for (int i = 0; i < 2000 && !waiter; ++i)
        io.run_one_for(5ms);
    REQUIRE(waiter);
    REQUIRE_FALSE(*waiter);
    CHECK(waiter->error() == dl::errc::store_unavailable);
    holder.reset();
    CHECK(drains(io));
}

TEST_CASE("io_context stopped with a lease held, store destroyed, io_context restarted", "[lifetime]")
{
    dl::manual_clock clock;
    asio::io_context io;
    auto store = std::make_unique<dl::memory::store>(io);
    std::optional<dl::lease> held;
    run(io, [&]() -> asio::awaitable<void> {
        watched_mutex m{*store, "job", {.ttl = 3s}};
        auto l = co_await m.lock();
        REQUIRE(l);
        held.emplace(std::move(*l));
    });
    io.stop();
    clock.advance(2s); // an extension is due when the io_context runs again
    store.reset();
    held.reset();
    io.restart();
    CHECK(drains(io));
}

TEST_CASE("lock_until() returns at its deadline when the store answers late, and leaves nothing held",
          "[lifetime][deadline]")
{
    dl::manual_clock clock;
    asio::io_context io;
    dl::memory::store store{io};
    run(io, [&]() -> asio::awaitable<void> {
        plain_mutex m{store, "job", {.ttl = 10s}};
        store.set_reply_delay(3s); // applied at once, answered 3 s later
        const auto start = dl::clock::now();
        auto pending = test::start(co_await asio::this_coro::executor, m.lock_until(start + 300ms));
        co_await advance(clock, 1s, 50ms);
        { const bool came_ = co_await pending.wait(); REQUIRE(came_); } auto& r = pending.get();
        REQUIRE_FALSE(r);
        CHECK(r.error() == dl::errc::timeout);
        // The manual clock moved in 50 ms steps: the call ended at its deadline, not
        // when the store's reply would have come.
        CHECK(dl::clock::now() - start < 3s);
        // The grant that was applied is given back by owner token in the background.
        co_await settle(20ms);
        CHECK(store.live_locks() == 0);
        store.set_reply_delay(dl::duration::zero());
        auto next = co_await m.try_lock();
        CHECK(next);
    });
}

TEST_CASE("retry::none is one attempt: no second try after listening, no wait in the local line",
          "[lifetime][retry]")
{
    asio::io_context io;
    dl::memory::store store{io};
    recorder rec;
    run(io, [&]() -> asio::awaitable<void> {
        plain_mutex holder{store, "job", {.ttl = 10s}};
        auto held = co_await holder.lock();
        REQUIRE(held);
        // Another coroutine of this process waits in the local line.
        auto waiting = test::start(co_await asio::this_coro::executor, holder.lock());
        co_await settle();

        dl::basic_distributed_mutex<dl::memory::store, dl::retry::none, dl::observe::callback> once{
            store, "job", {.ttl = 10s}, rec.observer()};
        auto r = co_await once.lock();
        REQUIRE_FALSE(r);
        CHECK(r.error() == dl::errc::contended);
        CHECK(rec.of<dl::attempt_event>().size() == 1);
        CHECK(rec.of<dl::wait_event>().empty());

        (void)co_await held->unlock();
        { const bool came_ = co_await waiting.wait(); REQUIRE(came_); } auto& second = waiting.get();
        CHECK(second);
    });
}

TEST_CASE("an observer that throws does not stop renewal, the loss signal or the release", "[lifetime][observe]")
{
    dl::manual_clock clock;
    asio::io_context io;
    dl::memory::store store{io};
    int calls = 0;
    run(io, [&]() -> asio::awaitable<void> {
        dl::basic_distributed_mutex<dl::memory::store, dl::renew::watchdog, dl::observe::callback> m{
            store, "job", {.ttl = 3s}, dl::observe::callback{[&calls](const dl::event&) {
                ++calls;
                throw std::runtime_error{"observer failure"};
            }}};
        auto lease = co_await m.lock();
        REQUIRE(lease);
        co_await advance(clock, 10s, 250ms);
        CHECK(lease->valid()); // renewed despite the throwing observer
        CHECK(calls > 3);

        asio::steady_timer work{co_await asio::this_coro::executor, std::chrono::hours{1}};
        bool cancelled = false;
        work.async_wait(asio::bind_cancellation_slot(lease->lost_slot(), [&](std::error_code ec) {
            cancelled = ec == asio::error::operation_aborted;
        }));
        store.set_online(false);
        co_await advance(clock, 4s, 250ms);
        co_await settle();
        CHECK(cancelled);
        store.set_online(true);
        auto r = co_await lease->unlock(); // returns: the keeper did not die
        CHECK_FALSE(r);

        auto again = co_await m.lock();
        REQUIRE(again);
        { const auto ok_ = co_await again->unlock(); CHECK(ok_); }
        CHECK(store.live_locks() == 0);
    });
}

TEST_CASE("lost_slot(): every bound operation is stopped when the lease is lost", "[lifetime][lease]")
{
    dl::manual_clock clock;
    asio::io_context io;
    dl::memory::store store{io};
    run(io, [&]() -> asio::awaitable<void> {
        watched_mutex m{store, "job", {.ttl = 3s}};
        auto lease = co_await m.lock();
        REQUIRE(lease);
        const auto ex = co_await asio::this_coro::executor;
        asio::steady_timer a{ex, std::chrono::hours{1}}, b{ex, std::chrono::hours{1}}, c{ex, std::chrono::hours{1}};
        int stopped = 0;
        auto count = [&](std::error_code ec) { stopped += ec == asio::error::operation_aborted; };
        a.async_wait(asio::bind_cancellation_slot(lease->lost_slot(), count));
        b.async_wait(asio::bind_cancellation_slot(lease->lost_slot(), count));
        c.async_wait(asio::bind_cancellation_slot(lease->lost_slot(), count));
        co_await settle();
        CHECK(stopped == 0);
        store.set_online(false);
        co_await advance(clock, 4s, 250ms);
        co_await settle();
        CHECK(stopped == 3);
    });
}
