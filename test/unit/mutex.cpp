// basic_distributed_mutex on the in-process store: exclusion, expiry, fencing,
// deadlines, cancellation, unknown outcomes, wake-up on release.
#include "support.hpp"

#include "eventually.hpp"
#include "pending.hpp"

#include <distlock/testing.hpp>

#include <asio/bind_cancellation_slot.hpp>
#include <asio/cancellation_signal.hpp>
#include <asio/experimental/awaitable_operators.hpp>
#include <asio/post.hpp>

#include <atomic>
#include <thread>

using namespace test;
using memory_mutex = dl::basic_distributed_mutex<dl::memory::store>;
using fixed_retry_mutex = dl::basic_distributed_mutex<dl::memory::store, dl::retry::fixed>;
using one_shot_mutex = dl::basic_distributed_mutex<dl::memory::store, dl::retry::none>;

namespace {
// A read-modify-write with a suspension in the middle: without exclusion, concurrent
// coroutines overwrite each other's increments.
asio::awaitable<void> slow_increment(long& counter)
{
    const long seen = counter;
    co_await asio::post(co_await asio::this_coro::executor, asio::use_awaitable);
    co_await asio::post(co_await asio::this_coro::executor, asio::use_awaitable);
    counter = seen + 1;
}
} // namespace

TEST_CASE("many contending coroutines never lose an update", "[mutex]")
{
    asio::io_context io;
    dl::memory::store store{io};
    constexpr int workers = 16, rounds = 25;

    SECTION("with the lock: every increment lands")
    {
        long counter = 0;
        int finished = 0;
        for (int w = 0; w < workers; ++w)
            asio::co_spawn(io, [&]() -> asio::awaitable<void> {
                memory_mutex m{store, "wallet:1", {.ttl = 10s},
                               dl::retry::exponential_backoff{.initial = 100us, .max = 2ms}};
                for (int i = 0; i < rounds; ++i) {
                    auto lease = co_await m.lock();
                    REQUIRE(lease);
                    co_await slow_increment(counter);
                    {
                        auto outcome = co_await lease->unlock();
                        REQUIRE(outcome);
                    }
                }
                ++finished;
            }, asio::detached);
        io.run_for(60s);
        CHECK(finished == workers);
        CHECK(counter == workers * rounds);
        CHECK(store.current_fence("wallet:1") == static_cast<dl::fence_token>(workers * rounds));
    }
    SECTION("without it the same workload loses updates (the check can fail)")
    {
        long counter = 0;
        for (int w = 0; w < workers; ++w)
            asio::co_spawn(io, [&]() -> asio::awaitable<void> {
                for (int i = 0; i < rounds; ++i)
                    co_await slow_increment(counter);
            }, asio::detached);
        io.run_for(60s);
        CHECK(counter < workers * rounds);
    }
}

TEST_CASE("fencing tokens strictly increase across holders", "[mutex][fencing]")
{
    asio::io_context io;
    dl::memory::store store{io};
    run(io, [&]() -> asio::awaitable<void> {
        dl::fence_token last = 0;
        for (int i = 0; i < 50; ++i) {
            memory_mutex m{store, "job"}; // a new mutex object each time: the store counts
            auto lease = co_await m.lock();
            REQUIRE(lease);
            CHECK(lease->fence() > last);
            last = lease->fence();
            {
                auto outcome = co_await lease->unlock();
                REQUIRE(outcome);
            }
        }
        CHECK(last == 50);
    });
}

TEST_CASE("a lock whose holder vanished frees itself when its TTL runs out", "[mutex][ttl]")
{
    dl::manual_clock clock;
    asio::io_context io;
    dl::memory::store store{io};
    run(io, [&]() -> asio::awaitable<void> {
        memory_mutex a{store, "seat:12", {.ttl = 10s}};
        auto held = co_await a.lock();
        REQUIRE(held);
        // The holder "crashes": its release never reaches the store.
        store.set_online(false);
        {
            auto outcome = co_await held->unlock();
            CHECK_FALSE(outcome);
        }
        store.set_online(true);
        REQUIRE(store.inspect("seat:12"));

        one_shot_mutex b{store, "seat:12", {.ttl = 10s}};
        auto early = co_await b.lock();
        REQUIRE_FALSE(early);
        CHECK(early.error() == dl::errc::contended);

        clock.advance(10s);
        auto late = co_await b.lock();
        REQUIRE(late);
        CHECK(late->fence() == held->fence() + 1);
    });
}

TEST_CASE("a stalled holder's late write is rejected by its fencing token", "[mutex][fencing]")
{
    dl::manual_clock clock;
    asio::io_context io;
    dl::memory::store store{io};
    dl::memory::fenced_register<long> balance{100};
    run(io, [&]() -> asio::awaitable<void> {
        memory_mutex m{store, "wallet:7", {.ttl = 1s}};
        auto first = co_await m.lock();
        REQUIRE(first);
        const long seen = balance.read();

        clock.advance(2s); // the first holder stalls past its TTL
        CHECK_FALSE(first->valid());

        auto second = co_await m.lock();
        REQUIRE(second);
        CHECK(second->fence() > first->fence());
        REQUIRE(balance.write(second->fence(), balance.read() - 30));

        auto stale = balance.write(first->fence(), seen - 50);
        REQUIRE_FALSE(stale);
        CHECK(stale.error() == dl::errc::stale_fence);
        CHECK(balance.read() == 70);

        // Owner safety: the stale holder's release must not remove the new lock.
        auto r = co_await first->unlock();
        REQUIRE_FALSE(r);
        CHECK(r.error() == dl::errc::lease_lost);
        REQUIRE(store.inspect("wallet:7"));
        CHECK(store.inspect("wallet:7")->owner == second->owner());
        {
            auto outcome = co_await second->unlock();
            CHECK(outcome);
        }
    });
}

TEST_CASE("the deadline is honoured to within one timer tick", "[mutex][deadline]")
{
    dl::manual_clock clock;
    asio::io_context io;
    dl::memory::store store{io};
    run(io, [&]() -> asio::awaitable<void> {
        memory_mutex holder{store, "r", {.ttl = 60s}};
        auto held = co_await holder.lock();
        REQUIRE(held);

        memory_mutex waiter{store, "r", {.ttl = 60s},
                            dl::retry::exponential_backoff{.initial = 300ms, .max = 700ms, .deadline = 2s}};
        const auto start = clock.now();
        std::optional<dl::result<dl::lease>> got;
        asio::co_spawn(co_await asio::this_coro::executor,
                       [&]() -> asio::awaitable<void> { got = co_await waiter.lock(); }, asio::detached);
        const auto tick = 50ms;
        while (!got && clock.now() - start < 10s)
            co_await advance(clock, tick, tick);
        REQUIRE(got);
        REQUIRE_FALSE(*got);
        CHECK(got->error() == dl::errc::timeout);
        // Time stands still between ticks, so when lock() gave up tells exactly how far
        // past the deadline it waited.
        CHECK(clock.now() - start >= 2s);
        CHECK(clock.now() - start <= 2s + tick);
    });
}

TEST_CASE("a waiter wakes on release, before its backoff runs out", "[mutex][notify]")
{
    dl::manual_clock clock; // time stands still: only a notification can wake the waiter
    asio::io_context io;
    dl::memory::store store{io};
    recorder rec;
    run(io, [&]() -> asio::awaitable<void> {
        memory_mutex holder{store, "job"};
        auto held = co_await holder.lock();
        REQUIRE(held);
        dl::basic_distributed_mutex<dl::memory::store, dl::observe::callback> waiter{
            store, "job", {}, dl::retry::exponential_backoff{.initial = 1s, .max = 1s, .jitter = dl::retry::jitter::none},
            rec.observer()};
        std::optional<dl::result<dl::lease>> got;
        asio::co_spawn(co_await asio::this_coro::executor,
                       [&]() -> asio::awaitable<void> { got = co_await waiter.lock(); }, asio::detached);
        co_await settle(20ms);
        CHECK_FALSE(got);
        CHECK(store.watchers() == 1);
        {
            auto outcome = co_await held->unlock();
            REQUIRE(outcome);
        }
        for (int i = 0; i < 100 && !got; ++i)
            co_await settle(2ms);
        REQUIRE(got);
        REQUIRE(*got);
        const auto wakes = rec.of<dl::wake_event>();
        REQUIRE_FALSE(wakes.empty());
        CHECK(wakes.back().notified);
        CHECK(store.watchers() == 0); // unsubscribed when the waiter left
    });
}

TEST_CASE("cancellation leaves nothing held", "[mutex][cancel]")
{
    using namespace asio::experimental::awaitable_operators;
    asio::io_context io;
    dl::memory::store store{io};

    SECTION("cancelled while waiting for a held lock")
    {
        run(io, [&]() -> asio::awaitable<void> {
            memory_mutex holder{store, "r"};
            auto held = co_await holder.lock();
            REQUIRE(held);
            memory_mutex waiter{store, "r"};
            asio::cancellation_signal cancel;
            std::optional<dl::result<dl::lease>> got;
            asio::co_spawn(co_await asio::this_coro::executor, waiter.lock(),
                           asio::bind_cancellation_slot(cancel.slot(), [&](std::exception_ptr, dl::result<dl::lease> r) {
                               got = std::move(r);
                           }));
            co_await settle(10ms);
            cancel.emit(asio::cancellation_type::terminal);
            for (int i = 0; i < 100 && !got; ++i)
                co_await settle(2ms);
            REQUIRE(got);
            REQUIRE_FALSE(*got);
            CHECK(got->error() == dl::errc::cancelled);
            {
                auto outcome = co_await held->unlock();
                REQUIRE(outcome);
            }
            CHECK(store.live_locks() == 0);
            CHECK(store.watchers() == 0);
        });
    }
    SECTION("cancelled while the grant is in flight: the grant is released")
    {
        run(io, [&]() -> asio::awaitable<void> {
            store.set_reply_delay(200ms);
            memory_mutex m{store, "r"};
            asio::cancellation_signal cancel;
            std::optional<dl::result<dl::lease>> got;
            asio::co_spawn(co_await asio::this_coro::executor, m.lock(),
                           asio::bind_cancellation_slot(cancel.slot(), [&](std::exception_ptr, dl::result<dl::lease> r) {
                               got = std::move(r);
                           }));
            co_await settle(20ms);
            REQUIRE(store.live_locks() == 1); // applied; the reply is on its way
            store.set_reply_delay(0ms);
            cancel.emit(asio::cancellation_type::terminal);
            for (int i = 0; i < 200 && !got; ++i)
                co_await settle(2ms);
            REQUIRE(got);
            REQUIRE_FALSE(*got);
            CHECK(got->error() == dl::errc::cancelled);
            CHECK(store.live_locks() == 0);
        });
    }
    SECTION("lock() racing a timer with ||: the loser leaves nothing")
    {
        run(io, [&]() -> asio::awaitable<void> {
            memory_mutex holder{store, "r"};
            auto held = co_await holder.lock();
            REQUIRE(held);
            memory_mutex waiter{store, "r"};
            asio::steady_timer t{co_await asio::this_coro::executor, 20ms};
            auto first = co_await (waiter.lock() || t.async_wait(asio::use_awaitable));
            CHECK(first.index() == 1);
            {
                auto outcome = co_await held->unlock();
                REQUIRE(outcome);
            }
            CHECK(store.live_locks() == 0);
        });
    }
}

TEST_CASE("an acquisition whose reply was lost is cleaned up by owner token", "[mutex][unknown]")
{
    asio::io_context io;
    dl::memory::store store{io};
    run(io, [&]() -> asio::awaitable<void> {
        SECTION("try_lock reports outcome_unknown and leaves nothing")
        {
            store.fail_next(dl::memory::fault::reply_lost);
            memory_mutex m{store, "r"};
            auto r = co_await m.try_lock();
            REQUIRE_FALSE(r);
            CHECK(r.error() == dl::errc::outcome_unknown);
            CHECK(store.live_locks() == 0);
            CHECK(store.current_fence("r") == 1); // it had been applied
        }
        SECTION("lock retries after cleaning up and then holds exactly one lock")
        {
            store.fail_next(dl::memory::fault::reply_lost);
            fixed_retry_mutex m{store, "r", {}, dl::retry::fixed{.delay = 1ms}};
            auto r = co_await m.lock();
            REQUIRE(r);
            CHECK(r->fence() == 2);
            CHECK(store.live_locks() == 1);
            CHECK(store.inspect("r")->owner == r->owner());
        }
        SECTION("a garbage reply is a protocol error and is also cleaned up")
        {
            store.fail_next(dl::memory::fault::garbage);
            memory_mutex m{store, "r"};
            auto r = co_await m.try_lock();
            REQUIRE_FALSE(r);
            CHECK(r.error() == dl::errc::protocol_error);
            CHECK(store.live_locks() == 0);
        }
        SECTION("an unavailable store is retried until it comes back")
        {
            store.fail_next(dl::memory::fault::unavailable, 3);
            fixed_retry_mutex m{store, "r", {}, dl::retry::fixed{.delay = 1ms}};
            auto r = co_await m.lock();
            REQUIRE(r);
            CHECK(r->fence() == 1);
        }
        SECTION("a store that stays down: the store's error, not a timeout")
        {
            store.set_online(false);
            fixed_retry_mutex m{store, "r", {}, dl::retry::fixed{.delay = 1ms, .max_attempts = 3}};
            auto r = co_await m.lock();
            REQUIRE_FALSE(r);
            CHECK(r.error() == dl::errc::store_unavailable);
        }
    });
}

TEST_CASE("a grant that arrives with no validity left is given back", "[mutex][validity]")
{
    asio::io_context io;
    dl::memory::store store{io};
    run(io, [&]() -> asio::awaitable<void> {
        store.set_reply_delay(60ms);
        one_shot_mutex m{store, "r", {.ttl = 50ms, .drift_factor = 0.0, .drift_floor = 0ms}};
        auto r = co_await m.lock();
        REQUIRE_FALSE(r);
        CHECK(r.error() == dl::errc::validity_exhausted);
        store.set_reply_delay(0ms);
        CHECK(store.live_locks() == 0);
    });
}

TEST_CASE("waiters of one process are served in arrival order", "[mutex][fairness]")
{
    // Each worker releases and asks again at once. Without the local line the
    // releaser would win almost every time; with it the lock goes round.
    asio::io_context io;
    dl::memory::store store{io};
    constexpr int workers = 6, rounds = 30;
    std::vector<int> order;
    int finished = 0;
    for (int w = 0; w < workers; ++w)
        asio::co_spawn(io, [&, w]() -> asio::awaitable<void> {
            memory_mutex m{store, "turns", {.ttl = 10s}, dl::retry::exponential_backoff{.initial = 1ms, .max = 5ms}};
            for (int i = 0; i < rounds; ++i) {
                auto lease = co_await m.lock();
                if (!lease)
                    break;
                order.push_back(w);
                co_await asio::post(co_await asio::this_coro::executor, asio::use_awaitable);
                auto released = co_await lease->unlock();
                if (!released)
                    break;
            }
            ++finished;
        }, asio::detached);
    io.run_for(60s);
    REQUIRE(finished == workers);
    REQUIRE(order.size() == static_cast<std::size_t>(workers * rounds));
    std::size_t changes = 0;
    for (std::size_t i = 1; i < order.size(); ++i)
        changes += order[i] != order[i - 1];
    CHECK(changes >= order.size() * 9 / 10);
}

TEST_CASE("a waiter cancelled while queued behind others passes its turn on", "[mutex][fairness][cancel]")
{
    asio::io_context io;
    dl::memory::store store{io};
    run(io, [&]() -> asio::awaitable<void> {
        memory_mutex holder{store, "r"};
        auto held = co_await holder.lock();
        REQUIRE(held);
        memory_mutex m{store, "r"};
        std::optional<dl::result<dl::lease>> first, second, third;
        asio::cancellation_signal cancel_second;
        auto ex = co_await asio::this_coro::executor;
        asio::co_spawn(ex, [&]() -> asio::awaitable<void> { first = co_await m.lock(); }, asio::detached);
        co_await settle(5ms);
        asio::co_spawn(ex, m.lock(), asio::bind_cancellation_slot(cancel_second.slot(),
                                                                  [&](std::exception_ptr, dl::result<dl::lease> r) {
                                                                      second = std::move(r);
                                                                  }));
        co_await settle(5ms);
        asio::co_spawn(ex, [&]() -> asio::awaitable<void> { third = co_await m.lock(); }, asio::detached);
        co_await settle(5ms);
        cancel_second.emit(asio::cancellation_type::terminal);
        co_await settle(5ms);
        REQUIRE(second);
        CHECK(second->error() == dl::errc::cancelled);
        {
            auto released = co_await held->unlock();
            REQUIRE(released);
        }
        for (int i = 0; i < 200 && !first; ++i)
            co_await settle(2ms);
        REQUIRE(first);
        REQUIRE(*first);
        CHECK_FALSE(third); // still queued behind the first
        {
            auto released = co_await (*first)->unlock();
            REQUIRE(released);
        }
        for (int i = 0; i < 200 && !third; ++i)
            co_await settle(2ms);
        REQUIRE(third);
        CHECK(*third);
    });
}

TEST_CASE("named locks: one configured object locks any resource named per call", "[mutex][named]")
{
    dl::manual_clock clock;
    asio::io_context io;
    dl::memory::store store{io};
    run(io, [&]() -> asio::awaitable<void> {
        using seat_locks = dl::basic_named_locks<dl::memory::store, dl::retry::fixed, dl::observe::callback>;
        recorder rec;
        auto seats = std::make_unique<seat_locks>(store, dl::lock_options{.ttl = 30s},
                                                  dl::retry::fixed{.delay = 10ms, .deadline = 1s}, rec.observer());
        auto seven = co_await seats->try_lock("seat:7");
        REQUIRE(seven);
        CHECK(seven->resource() == "seat:7");
        auto eight = co_await seats->try_lock("seat:8"); // another resource: not contended
        REQUIRE(eight);
        CHECK(eight->fence() != 0);
        auto again = co_await seats->try_lock("seat:7");
        REQUIRE_FALSE(again);
        CHECK(again.error() == dl::errc::contended);
        dl::diagnostics why;
        auto bad = co_await seats->try_lock(std::string{}, why);
        REQUIRE_FALSE(bad);
        CHECK(bad.error() == dl::errc::invalid_argument);
        CHECK(store.live_locks() == 2);
        // The settings and policies are the object's: the observer saw the attempts.
        CHECK(rec.of<dl::attempt_event>().size() >= 3);

        // A waiting call owns its mutex: the object may go while it waits.
        auto waiting = test::start(co_await asio::this_coro::executor, seats->lock("seat:7"));
        seats.reset();
        co_await settle();
        CHECK_FALSE(waiting.ready());
        { const auto ok_ = co_await seven->unlock(); CHECK(ok_); }
        co_await eventually("the waiter gets seat 7", [&] { return waiting.ready(); },
                            {.max = 200, .each = 10ms, .clock = &clock});
        REQUIRE(waiting.get());
        CHECK(waiting.get()->fence() > seven->fence());

        // Several at once, sorted, all or nothing.
        seat_locks more{store, {.ttl = 30s}, dl::retry::fixed{.delay = 10ms, .deadline = 1s}};
        auto none = co_await more.try_lock_all(dl::resources("seat:9", "seat:8"));
        REQUIRE_FALSE(none);
        CHECK(none.error() == dl::errc::contended);
        CHECK(store.live_locks() == 2); // seat 9 was given back
        { const auto ok_ = co_await eight->unlock(); CHECK(ok_); }
        auto both = co_await more.lock_all(dl::resources("seat:9", "seat:8"));
        REQUIRE(both);
        CHECK(both->size() == 2);
        CHECK(both->fence("seat:8").has_value());
        { const auto ok_ = co_await both->unlock(); CHECK(ok_); }
        { const auto ok_ = co_await waiting.get()->unlock(); CHECK(ok_); }
        CHECK(store.live_locks() == 0);
    });
}

TEST_CASE("the manual clock: one per process, never backwards, never past its end; testing::advance runs what "
          "falls due",
          "[clock][input]")
{
    dl::manual_clock clock;
    CHECK_THROWS_AS(dl::manual_clock{}, std::logic_error);
    const auto before = clock.now();
    CHECK_THROWS_AS(clock.advance(-1ns), std::invalid_argument);
    CHECK_THROWS_AS(clock.advance(dl::duration::max()), std::overflow_error);
    CHECK(clock.now() == before); // refused advances moved nothing
    clock.advance(0ns);
    CHECK(clock.now() == before);

    // Code under test that waits on dl::timer follows the clock: a lock held by a
    // holder that vanished is taken over once its TTL has run out, and not before.
    asio::io_context io;
    dl::memory::store store{io};
    std::optional<dl::result<dl::lease>> crashed, got;
    asio::co_spawn(io, [&]() -> asio::awaitable<void> {
        memory_mutex holder{store, "job", {.ttl = 10s}};
        crashed = co_await holder.lock();
        fixed_retry_mutex waiter{store, "job", {.ttl = 10s}, dl::retry::fixed{.delay = 100ms, .deadline = 60s}};
        got = co_await waiter.lock();
    }, asio::detached);
    dl::testing::advance(clock, io, 9s, 10ms);
    REQUIRE(crashed);
    REQUIRE(*crashed);
    CHECK_FALSE(got.has_value());
    // The holder's lease object is still alive but never renewed: at 10 s its lock
    // expires in the store, and the waiter's next try (every 100 ms) takes it.
    dl::testing::advance(clock, io, 1200ms, 10ms);
    REQUIRE(got.has_value());
    REQUIRE(*got);
    CHECK((*got)->fence() > (*crashed)->fence());
    CHECK(clock.now() - before >= 10s);
}
