// Session-bound leases over the memory session store: a fair queue by creation,
// predecessor watches, one keepalive per session, loss pushed by the session (lost,
// in doubt), waiters that give up leave the queue, lifetimes.
#include "support.hpp"
#include "pending.hpp"
#include "eventually.hpp"

#include <asio/bind_cancellation_slot.hpp>

#include <optional>

using namespace test;
using session_mutex = dl::basic_distributed_mutex<dl::memory::session_store, dl::observe::callback>;
static_assert(std::is_same_v<session_mutex::acquire_policy, dl::acquire::session_queue>);

namespace {
dl::memory::session_config quick_sessions()
{
    return {.session_ttl = 3s};
}
dl::retry::exponential_backoff patient()
{
    return {.initial = 30s, .max = 30s, .deadline = 120s};
}
} // namespace

TEST_CASE("session store: waiters of different clients are served in arrival order, each woken by its predecessor",
          "[session]")
{
    dl::manual_clock clock;
    asio::io_context io;
    dl::memory::session_server server;
    dl::memory::session_store a{io, server, quick_sessions()}, b{io, server, quick_sessions()},
        c{io, server, quick_sessions()};
    recorder rec_b, rec_c;
    run(io, [&]() -> asio::awaitable<void> {
        session_mutex ma{a, "job", {}, dl::observe::callback{}};
        session_mutex mb{b, "job", {}, rec_b.observer(), patient()};
        session_mutex mc{c, "job", {}, rec_c.observer(), patient()};
        auto first = co_await ma.lock();
        REQUIRE(first);
        const auto ex = co_await asio::this_coro::executor;
        auto second = test::start(ex, mb.lock());
        co_await settle();
        auto third = test::start(ex, mc.lock());
        co_await settle();
        CHECK(server.entries("job") == 3);
        CHECK(server.watches() == 2); // each waiter watches one entry: its predecessor

        { const auto ok_ = co_await first->unlock(); REQUIRE(ok_); }
        { const bool came_ = co_await second.wait(); REQUIRE(came_); } auto& l2 = second.get();
        REQUIRE(l2);
        CHECK(l2->fence() > first->fence());
        // B was woken by the watch; C, watching B, was not woken by A's release.
        REQUIRE_FALSE(rec_b.of<dl::wake_event>().empty());
        CHECK(rec_b.of<dl::wake_event>().back().notified);
        CHECK(rec_c.of<dl::wake_event>().empty());

        { const auto ok_ = co_await l2->unlock(); REQUIRE(ok_); }
        { const bool came_ = co_await third.wait(); REQUIRE(came_); } auto& l3 = third.get();
        REQUIRE(l3);
        CHECK(l3->fence() > l2->fence());
        CHECK(rec_c.of<dl::attempt_event>().size() == 2);
        { const auto ok_ = co_await l3->unlock(); REQUIRE(ok_); }
        CHECK(server.total_entries() == 0);
        CHECK(server.watches() == 0);
    });
}

TEST_CASE("session store: one keepalive per session serves all its leases, which stay valid", "[session]")
{
    dl::manual_clock clock;
    asio::io_context io;
    dl::memory::session_server server;
    dl::memory::session_store a{io, server, quick_sessions()};
    run(io, [&]() -> asio::awaitable<void> {
        std::vector<dl::lease> held;
        for (int i = 0; i < 5; ++i) {
            session_mutex m{a, "job:" + std::to_string(i), {.ttl = 1s}, dl::observe::callback{}};
            auto l = co_await m.lock();
            REQUIRE(l);
            held.push_back(std::move(*l));
        }
        co_await advance(clock, 30s, 100ms);
        for (const auto& l : held)
            CHECK(l.valid()); // the TTL option (1 s) does not bound a session lease
        // A keepalive every TTL/3 = 1 s for the one session, not one per lease.
        CHECK(a.keepalives_sent() >= 25);
        CHECK(a.keepalives_sent() <= 31);
        CHECK(server.live_sessions() == 1);
        for (auto& l : held)
            { const auto ok_ = co_await l.unlock(); CHECK(ok_); }
    });
}

TEST_CASE("session store: an expired session ends its leases (lost) and hands the lock on", "[session]")
{
    dl::manual_clock clock;
    asio::io_context io;
    dl::memory::session_server server;
    dl::memory::session_store a{io, server, quick_sessions()}, b{io, server, quick_sessions()};
    run(io, [&]() -> asio::awaitable<void> {
        session_mutex ma{a, "job", {}, dl::observe::callback{}};
        session_mutex mb{b, "job", {}, dl::observe::callback{}, patient()};
        auto first = co_await ma.lock();
        REQUIRE(first);
        const auto ex = co_await asio::this_coro::executor;
        auto second = test::start(ex, mb.lock());
        co_await settle();

        asio::steady_timer work{ex, std::chrono::hours{1}};
        bool stopped = false;
        work.async_wait(asio::bind_cancellation_slot(first->lost_slot(), [&](std::error_code ec) {
            stopped = ec == asio::error::operation_aborted;
        }));
        server.expire(a.session_id());
        { const bool came_ = co_await second.wait(); REQUIRE(came_); } auto& l2 = second.get(); // the entry went with the session
        REQUIRE(l2);
        CHECK(l2->fence() > first->fence());
        co_await advance(clock, 2s, 100ms); // A's next keepalive learns the session is gone
        const auto why = co_await first->lost();
        CHECK(why == dl::errc::lease_lost);
        co_await settle();
        CHECK(stopped);
        CHECK_FALSE(first->valid());
        auto r = co_await first->unlock();
        REQUIRE_FALSE(r);
        CHECK(server.holder("job")->owner == l2->owner()); // A's unlock left B's lock alone
        { const auto ok_ = co_await l2->unlock(); REQUIRE(ok_); }
    });
}

TEST_CASE("session store: an unanswered keepalive puts the leases in doubt; the server expires the session later",
          "[session]")
{
    dl::manual_clock clock;
    asio::io_context io;
    dl::memory::session_server server;
    dl::memory::session_store a{io, server, quick_sessions()}, b{io, server, quick_sessions()};
    run(io, [&]() -> asio::awaitable<void> {
        session_mutex ma{a, "job", {}, dl::observe::callback{}};
        session_mutex mb{b, "job", {}, dl::observe::callback{}, patient()};
        auto first = co_await ma.lock();
        REQUIRE(first);
        const auto before = first->valid_until();
        a.set_reachable(false); // blackholed: keepalives go unanswered
        co_await advance(clock, 1100ms, 100ms);
        const auto why = co_await first->lost();
        CHECK(why == dl::errc::lease_lost);
        CHECK(dl::clock::now() < before); // in doubt is reported before the validity ran out
        // The server still holds A's entry until A's session expires.
        CHECK(server.holder("job")->owner == first->owner());
        const auto ex = co_await asio::this_coro::executor;
        auto second = test::start(ex, mb.lock());
        co_await advance(clock, 3s, 100ms);
        { const bool came_ = co_await second.wait(); REQUIRE(came_); } auto& l2 = second.get();
        REQUIRE(l2);
        CHECK(l2->fence() > first->fence());
        a.set_reachable(true);
        { const auto ok_ = co_await l2->unlock(); REQUIRE(ok_); }
    });
}

TEST_CASE("session store: a lease nobody watches learns its loss from the session at once, reported once",
          "[session]")
{
    dl::manual_clock clock;
    asio::io_context io;
    dl::memory::session_server server;
    dl::memory::session_store a{io, server, quick_sessions()};
    int losses = 0, releases = 0;
    dl::observe::callback count{[&](const dl::event& e) {
        if (const auto* r = std::get_if<dl::release_event>(&e)) {
            if (r->error == dl::errc::lease_lost) {
                ++losses;
            } else {
                ++releases;
            }
        }
    }};
    run(io, [&]() -> asio::awaitable<void> {
        session_mutex m{a, "job", {}, count};
        auto held = co_await m.lock();
        REQUIRE(held);
        // Keepalives move a passive lease's validity on, as they do a watched one's.
        const auto first_validity = held->valid_until();
        co_await advance(clock, 2500ms, 100ms);
        CHECK(held->valid());
        CHECK(held->valid_until() > first_validity);

        a.set_reachable(false); // the next keepalive goes unanswered: in doubt
        co_await advance(clock, 1100ms, 100ms);
        // Nobody watched the lease, and it knows anyway, before its validity ran out.
        CHECK_FALSE(held->valid());
        CHECK(dl::clock::now() < held->valid_until()); // lost, not run out
        CHECK(losses == 1);
        // Watching it now reports the loss at once, and does not report it again.
        const auto why = co_await held->lost();
        CHECK(why == dl::errc::lease_lost);
        const auto unlocked = co_await held->unlock();
        REQUIRE_FALSE(unlocked);
        CHECK(unlocked.error() == dl::errc::lease_lost);
        CHECK(losses == 1);
        CHECK(releases == 0);
        a.set_reachable(true);
    });
}

TEST_CASE("session store: a lease released before its session is lost hears nothing of the loss", "[session]")
{
    dl::manual_clock clock;
    asio::io_context io;
    dl::memory::session_server server;
    dl::memory::session_store a{io, server, quick_sessions()};
    int losses = 0;
    dl::observe::callback count{[&](const dl::event& e) {
        if (const auto* r = std::get_if<dl::release_event>(&e); r && r->error == dl::errc::lease_lost)
            ++losses;
    }};
    run(io, [&]() -> asio::awaitable<void> {
        session_mutex m{a, "job", {}, count};
        auto held = co_await m.lock();
        REQUIRE(held);
        { const auto ok_ = co_await held->unlock(); REQUIRE(ok_); }
        server.expire(a.session_id());
        co_await advance(clock, 2s, 100ms);
        CHECK(losses == 0);
        CHECK_FALSE(held->valid());
    });
}

TEST_CASE("session store: a refused keepalive is retried within the validity", "[session]")
{
    dl::manual_clock clock;
    asio::io_context io;
    dl::memory::session_server server;
    dl::memory::session_store a{io, server, quick_sessions()};
    run(io, [&]() -> asio::awaitable<void> {
        session_mutex m{a, "job", {}, dl::observe::callback{}};
        auto l = co_await m.lock();
        REQUIRE(l);
        a.fail_next(dl::memory::fault::unavailable, 2);
        co_await advance(clock, 10s, 50ms);
        CHECK(l->valid());
        CHECK(a.keepalives_sent() >= 11); // 2 refused, then retried
        { const auto ok_ = co_await l->unlock(); CHECK(ok_); }
    });
}

TEST_CASE("session store: a waiter that gives up or is cancelled leaves the queue", "[session]")
{
    dl::manual_clock clock;
    asio::io_context io;
    dl::memory::session_server server;
    dl::memory::session_store a{io, server, quick_sessions()}, b{io, server, quick_sessions()};
    run(io, [&]() -> asio::awaitable<void> {
        session_mutex ma{a, "job", {}, dl::observe::callback{}};
        session_mutex mb{b, "job", {}, dl::observe::callback{}, patient()};
        auto first = co_await ma.lock();
        REQUIRE(first);
        const auto ex = co_await asio::this_coro::executor;
        auto timed = test::start(ex, mb.lock_until(dl::clock::now() + 2s));
        co_await settle();
        CHECK(server.entries("job") == 2);
        co_await advance(clock, 3s, 100ms);
        { const bool came_ = co_await timed.wait(); REQUIRE(came_); } auto& r = timed.get();
        REQUIRE_FALSE(r);
        CHECK(r.error() == dl::errc::timeout);
        co_await settle();
        CHECK(server.entries("job") == 1);

        asio::cancellation_signal cancel;
        bool done = false;
        asio::co_spawn(ex, mb.lock(), asio::bind_cancellation_slot(cancel.slot(), [&](std::exception_ptr, auto got) {
                           done = true;
                           CHECK_FALSE(got);
                       }));
        co_await settle();
        CHECK(server.entries("job") == 2);
        cancel.emit(asio::cancellation_type::all);
        co_await settle();
        CHECK(done);
        CHECK(server.entries("job") == 1);
        CHECK(server.watches() == 0);
        { const auto ok_ = co_await first->unlock(); REQUIRE(ok_); }
    });
}

TEST_CASE("session store: a lost reply to the enqueue does not queue twice", "[session]")
{
    asio::io_context io;
    dl::memory::session_server server;
    dl::memory::session_store a{io, server, quick_sessions()};
    run(io, [&]() -> asio::awaitable<void> {
        session_mutex m{a, "job", {}, dl::observe::callback{},
                        dl::retry::exponential_backoff{.initial = 10ms, .max = 10ms, .deadline = 5s}};
        a.fail_next(dl::memory::fault::reply_lost);
        auto l = co_await m.lock();
        REQUIRE(l);
        CHECK(server.entries("job") == 1);
        CHECK(server.holder("job")->sequence == l->fence());
        { const auto ok_ = co_await l->unlock(); CHECK(ok_); }
        CHECK(server.entries("job") == 0);
    });
}

TEST_CASE("session store lifetimes: close() ends the session and io.run() returns; destroyed with a lease",
          "[session][lifetime]")
{
    dl::manual_clock clock;
    asio::io_context io;
    dl::memory::session_server server;
    auto a = std::make_unique<dl::memory::session_store>(io, server, quick_sessions());
    std::optional<dl::lease> held;
    run(io, [&]() -> asio::awaitable<void> {
        session_mutex m{*a, "job", {}, dl::observe::callback{}};
        auto l = co_await m.lock();
        REQUIRE(l);
        held.emplace(std::move(*l));
    });
    SECTION("close()")
    {
        run(io, [&]() -> asio::awaitable<void> {
            co_await a->close();
            const auto why = co_await held->lost();
            CHECK(why != dl::errc::released);
            CHECK(server.total_entries() == 0);
            CHECK(server.live_sessions() == 0);
        });
        held.reset();
        io.restart();
        const auto deadline = std::chrono::steady_clock::now() + 5s;
        while (!io.stopped() && std::chrono::steady_clock::now() < deadline)
            io.run_for(20ms);
        CHECK(io.stopped());
    }
    SECTION("destroyed")
    {
        a.reset();
        run(io, [&]() -> asio::awaitable<void> {
            const auto why = co_await held->lost(); // the client is gone: its session cannot be kept
            CHECK(why == dl::errc::store_unavailable);
            auto r = co_await held->unlock();
            CHECK_FALSE(r);
        });
        held.reset();
        clock.advance(5s);
        CHECK(server.total_entries() == 0); // the session expired on the server
    }
}

TEST_CASE("session store: a waiter whose session went in doubt is queued again under its new session", "[session]")
{
    dl::manual_clock clock;
    asio::io_context io;
    dl::memory::session_server server;
    dl::memory::session_store a{io, server, quick_sessions()}, b{io, server, quick_sessions()};
    run(io, [&]() -> asio::awaitable<void> {
        session_mutex ma{a, "job", {}, dl::observe::callback{}};
        session_mutex mb{b, "job", {}, dl::observe::callback{}, patient()};
        auto first = co_await ma.lock();
        REQUIRE(first);
        const auto ex = co_await asio::this_coro::executor;
        auto second = test::start(ex, mb.lock());
        co_await settle();
        const auto old_session = b.session_id();
        REQUIRE(old_session != 0);
        b.fail_next(dl::memory::fault::reply_lost); // B's next keepalive goes unanswered
        co_await advance(clock, 1100ms, 100ms);
        // Given up as in doubt: on the manual clock within the 1.1 s just advanced. On
        // a loaded machine the store's handlers may lag behind the clock's steps (a
        // keepalive due at 1 s may run only after the last one), so the clock keeps
        // moving, in small steps, until B has let the session go. It may already have
        // a new one by then.
        (void)co_await test::eventually("B gives up its session in doubt",
                                        [&] { return b.session_id() != old_session; },
                                        test::steps{.max = 300, .each = 10ms, .clock = &clock});
        { const auto ok_ = co_await first->unlock(); REQUIRE(ok_); }
        { const bool came_ = co_await second.wait(); REQUIRE(came_); }
        auto& l2 = second.get();
        REQUIRE(l2);
        // The lock is held by an entry of B's current session, not the one in doubt.
        const auto holder = server.holder("job");
        REQUIRE(holder);
        CHECK(holder->session == b.session_id());
        CHECK(holder->session != old_session);
        CHECK(holder->sequence == l2->fence());
        CHECK(server.entries("job") == 1);
        { const auto ok_ = co_await l2->unlock(); CHECK(ok_); }
    });
}

TEST_CASE("next_keepalive: after the interval, but always while the validity lasts", "[sessions]")
{
    using namespace std::chrono_literals;
    const dl::time_point t0{std::chrono::seconds{1000}};
    // Plenty of validity left: the interval.
    CHECK(dl::next_keepalive(t0, t0 + 9s, 3s) == t0 + 3s);
    // Less left than an interval (a grant answered late): halfway through what is
    // left, so that the keepalive is sent before the validity ends.
    CHECK(dl::next_keepalive(t0, t0 + 1s, 3s) == t0 + 500ms);
    CHECK(dl::next_keepalive(t0, t0 + 2ns, 3s) == t0 + 1ns);
    // Nothing left, or an interval of zero or less: now.
    CHECK(dl::next_keepalive(t0, t0, 3s) == t0);
    CHECK(dl::next_keepalive(t0, t0 - 1s, 3s) == t0);
    CHECK(dl::next_keepalive(t0, t0 + 9s, -1s) == t0);
    // At the clock's limits, without overflow (UBSan checks this build).
    CHECK(dl::next_keepalive(t0, dl::time_point::max(), dl::duration::max()) > t0);
    CHECK(dl::next_keepalive(dl::time_point::min(), dl::time_point::max(), 1s) == dl::time_point::min() + 1s);
    CHECK(dl::next_keepalive(dl::time_point::min(), dl::time_point::max(), dl::duration::max()) <
          dl::time_point::max());
}
