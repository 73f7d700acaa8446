// The conformance behaviours of the leader election, written once and run on every
// fixture whose store keeps a value with a grant (included by suite.hpp, which
// registers them).
#pragma once

#include "eventually.hpp"
#include "support.hpp"

#include <distlock/basic_leader_election.hpp>

#include <asio/co_spawn.hpp>
#include <asio/steady_timer.hpp>

#include <chrono>
#include <csignal>
#include <optional>
#include <string>
#include <vector>

namespace test::conformance {

/// The fixture's store keeps a value with a grant (electing_store). A fixture whose
/// setting refuses it says so with `static constexpr bool elects = false;`.
template <class F>
struct elects : std::bool_constant<dl::electing_store<typename F::backend> && !requires { requires !F::elects; }> {
};

template <class F>
using election_of = dl::basic_leader_election<typename F::backend, typename acquisition_of<F>::type,
                                              dl::retry::exponential_backoff>;

inline dl::retry::exponential_backoff campaigning()
{
    return {.initial = std::chrono::milliseconds{10}, .max = std::chrono::milliseconds{200}};
}

/// Three participants with different values: one leads at a time; each resignation
/// elects one of the others with a larger epoch; an observer that does not campaign
/// sees every leader, in epoch order, with its value.
template <class F>
void election_one_leader()
{
    F f;
    test::run(f.io, [&]() -> asio::awaitable<void> {
        const std::string name = "conf:election";
        const dl::election_options opts{.term = {.ttl = 10s}, .poll = 50ms};
        election_of<F> a{f.client(0), name, opts, campaigning()};
        election_of<F> b{f.client(1), name, opts, campaigning()};
        election_of<F> c{f.client(2), name, opts, campaigning()};
        election_of<F> watcher{f.client(2), name, opts, campaigning()};
        auto ex = co_await asio::this_coro::executor;

        auto first = co_await a.campaign("alpha");
        REQUIRE(first);
        CHECK(first->value() == "alpha");
        CHECK(f.held(name));
        auto seen = co_await watcher.observe();
        REQUIRE(seen);
        CHECK(seen->epoch == first->epoch());
        CHECK(seen->value == "alpha");

        // Two more campaign while alpha leads; nobody else is elected meanwhile.
        int leading = 1;
        int most = 1;
        std::optional<dl::result<dl::term>> tb, tc;
        auto campaign = [&](election_of<F>& e, std::string value, std::optional<dl::result<dl::term>>& out) {
            asio::co_spawn(ex, e.campaign(std::move(value)),
                           [&out, &leading, &most](std::exception_ptr, dl::result<dl::term> r) {
                               if (r) {
                                   ++leading;
                                   most = std::max(most, leading);
                               }
                               out.emplace(std::move(r));
                           });
        };
        campaign(b, "bravo", tb);
        campaign(c, "charlie", tc);
        co_await test::settle(300ms);
        CHECK_FALSE(tb);
        CHECK_FALSE(tc);

        // Proclaim changes the value, not the epoch; the observer sees it.
        { const auto ok_ = co_await a.proclaim(*first, "alpha-2"); CHECK(ok_); }
        seen = co_await watcher.observe();
        REQUIRE(seen);
        CHECK(seen->epoch == first->epoch());
        CHECK(seen->value == "alpha-2");

        std::vector<dl::fence_token> epochs{first->epoch()};
        --leading;
        { const auto ok_ = co_await first->resign(); CHECK(ok_); }
        bool used_b = false;
        bool used_c = false;
        for (int round = 0; round < 2; ++round) {
            (void)co_await test::eventually("one more participant leads", [&] {
                return (tb && !used_b) || (tc && !used_c);
            }, long_enough());
            const bool pick_b = tb && !used_b;
            (pick_b ? used_b : used_c) = true;
            auto& won = pick_b ? *tb : *tc;
            REQUIRE(won);
            CHECK(won->epoch() > epochs.back());
            epochs.push_back(won->epoch());
            // The observer reports the new leader with its value.
            seen = co_await watcher.observe();
            REQUIRE(seen);
            CHECK(seen->epoch == won->epoch());
            CHECK(seen->value == won->value());
            CHECK(seen->value == (pick_b ? "bravo" : "charlie"));
            --leading;
            { const auto ok_ = co_await won->resign(); CHECK(ok_); }
        }
        CHECK(most == 1);
        // A resigned term cannot proclaim.
        auto stale = co_await a.proclaim(*first, "late");
        CHECK_FALSE(stale);
        (void)co_await test::eventually("nobody leads", [&] { return !f.held(name); }, long_enough());
        auto none = co_await watcher.current();
        REQUIRE(none);
        CHECK_FALSE(*none);
    });
}

/// lead(): the work runs while leading and is over before the term is given up, so
/// the next leader's term begins after it; a term the store dropped cancels the work,
/// and its proclaim is refused.
template <class F>
void election_lead_bounds_work()
{
    F f;
    test::run(f.io, [&]() -> asio::awaitable<void> {
        const std::string name = "conf:election-lead";
        const dl::election_options opts{.term = {.ttl = 2s}, .poll = 50ms};
        election_of<F> a{f.client(0), name, opts, campaigning()};
        election_of<F> b{f.client(1), name, opts, campaigning()};
        auto ex = co_await asio::this_coro::executor;

        // 1. The work returns by itself; the next leader is elected only after that.
        bool a_done = false;
        bool b_saw_a_done = false;
        std::optional<dl::result<void>> led_a, led_b;
        asio::co_spawn(ex,
                       a.lead("a", [&](dl::term& t) -> asio::awaitable<void> {
                           CHECK(t.value() == "a");
                           co_await test::settle(300ms);
                           a_done = true;
                       }),
                       [&](std::exception_ptr, dl::result<void> r) { led_a.emplace(r); });
        (void)co_await test::eventually("a leads", [&] { return f.held(name); }, long_enough());
        asio::co_spawn(ex,
                       b.lead("b", [&](dl::term&) -> asio::awaitable<void> {
                           b_saw_a_done = a_done;
                           co_return;
                       }),
                       [&](std::exception_ptr, dl::result<void> r) { led_b.emplace(r); });
        (void)co_await test::eventually("both led", [&] { return led_a && led_b; }, long_enough());
        CHECK(*led_a);
        CHECK(*led_b);
        CHECK(b_saw_a_done);

        // 2. The store drops the term: the work is cancelled, lead() says the term was
        // lost, and the term's proclaim is refused.
        bool cancelled = false;
        std::optional<dl::result<void>> lost;
        dl::term* held = nullptr;
        asio::co_spawn(ex,
                       a.lead("a2", [&](dl::term& t) -> asio::awaitable<void> {
                           held = &t;
                           asio::steady_timer forever{co_await asio::this_coro::executor, std::chrono::hours{1}};
                           auto [ec] = co_await forever.async_wait(asio::experimental::as_tuple(asio::use_awaitable));
                           cancelled = ec == asio::error::operation_aborted;
                           CHECK_FALSE(t.valid());
                           auto late = co_await a.proclaim(t, "late");
                           CHECK_FALSE(late);
                       }),
                       [&](std::exception_ptr, dl::result<void> r) { lost.emplace(r); });
        (void)co_await test::eventually("a leads again", [&] { return held != nullptr; }, long_enough());
        f.end_lock(held->held());
        (void)co_await test::eventually("the lost term's lead() returned", [&] { return lost.has_value(); },
                                        long_enough());
        CHECK(cancelled);
        REQUIRE_FALSE(*lost);
        CHECK(lost->error() == dl::condition::lease_lost);

        // 3. Cancelling lead() cancels the work, then gives the term up.
        asio::cancellation_signal stop;
        bool stopped = false;
        std::optional<dl::result<void>> ended;
        bool working = false;
        asio::co_spawn(ex,
                       b.lead("b2", [&](dl::term&) -> asio::awaitable<void> {
                           working = true;
                           asio::steady_timer forever{co_await asio::this_coro::executor, std::chrono::hours{1}};
                           auto [ec] = co_await forever.async_wait(asio::experimental::as_tuple(asio::use_awaitable));
                           stopped = ec == asio::error::operation_aborted;
                       }),
                       asio::bind_cancellation_slot(stop.slot(), [&](std::exception_ptr, dl::result<void> r) {
                           ended.emplace(r);
                       }));
        (void)co_await test::eventually("b leads", [&] { return working; }, long_enough());
        stop.emit(asio::cancellation_type::terminal);
        (void)co_await test::eventually("b's lead() returned", [&] { return ended.has_value(); }, long_enough());
        CHECK(stopped);
        REQUIRE_FALSE(*ended);
        CHECK(ended->error() == dl::condition::cancelled);
        (void)co_await test::eventually("b gave the term up", [&] { return !f.held(name); }, long_enough());

        // Values beyond the limit are refused before any I/O.
        auto huge = co_await a.campaign(std::string(dl::max_leader_value_size + 1, 'x'));
        REQUIRE_FALSE(huge);
        CHECK(huge.error() == dl::condition::invalid_argument);
        CHECK_FALSE(f.held(name));
    });
}

/// A SIGKILLed leader is replaced once its TTL or session runs out, by a term with a
/// larger epoch that an observer sees.
template <class F>
void election_killed_leader()
{
    F f;
    auto holder = f.holder_process("conf:election-killed");
    const auto line = holder->read_line(std::chrono::seconds{20});
    REQUIRE(line);
    REQUIRE(line->starts_with("locked "));
    const dl::fence_token dead = std::stoull(line->substr(7));
    holder->kill(SIGKILL);
    REQUIRE(holder->wait());
    test::run(f.io, [&]() -> asio::awaitable<void> {
        const dl::election_options opts{.term = {.ttl = 10s}, .poll = 50ms};
        election_of<F> next{f.client(0), "conf:election-killed", opts, campaigning()};
        election_of<F> watcher{f.client(1), "conf:election-killed", opts, campaigning()};
        auto t = co_await next.campaign_until(dl::clock::now() + 60s, "next");
        REQUIRE(t);
        CHECK(t->epoch() > dead);
        auto seen = co_await watcher.observe_until(dl::clock::now() + 20s);
        REQUIRE(seen);
        CHECK(seen->epoch == t->epoch());
        CHECK(seen->value == "next");
        { const auto ok_ = co_await t->resign(); CHECK(ok_); }
    });
}

template <class F>
void register_election_behaviours(const std::string& tags,
                                  void (*add)(const char*, void (*)(), const std::string&, const Catch::SourceLineInfo&))
{
    if constexpr (elects<F>::value) {
        add("conformance: election: one leader at a time, epochs grow, observers see each leader and value in order",
            &election_one_leader<F>, tags, CATCH_INTERNAL_LINEINFO);
        add("conformance: election: lead() ends the work before the term is given up; a lost term cancels it",
            &election_lead_bounds_work<F>, tags, CATCH_INTERNAL_LINEINFO);
        if constexpr (kills_holders<F>::value)
            add("conformance: election: a SIGKILLed leader is replaced by a term with a larger epoch",
                &election_killed_leader<F>, tags, CATCH_INTERNAL_LINEINFO);
    }
}

} // namespace test::conformance
