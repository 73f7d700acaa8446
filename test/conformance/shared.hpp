// The conformance behaviours of the shared mutex and the semaphore, written once and
// run on every fixture whose store takes shared grants (included by suite.hpp, which
// registers them).
#pragma once

#include "eventually.hpp"
#include "pending.hpp"
#include "support.hpp"

#include <distlock/basic_distributed_semaphore.hpp>
#include <distlock/basic_distributed_shared_mutex.hpp>
#include <distlock/multi_lock.hpp>

#include <algorithm>
#include <chrono>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace test::conformance {

/// The fixture's store takes shared grants: a shared mutex and a semaphore work on it.
/// A fixture whose store refuses them by a setting (a dialect whose reference client has
/// no shared grants) says so with `static constexpr bool shares = false;`.
template <class F>
struct shares : std::bool_constant<requires(typename dl::default_shared_acquire_policy<typename F::backend> a) {
    a.mode = dl::lock_mode::shared;
    requires dl::acquire_policy_for<decltype(a), typename F::backend>;
} && !requires { requires !F::shares; }> {};

template <class F>
using shared_mutex_of = dl::basic_distributed_shared_mutex<typename F::backend, dl::observe::callback, dl::retry::fixed>;

template <class F>
using waiting_shared_mutex_of =
    dl::basic_distributed_shared_mutex<typename F::backend, dl::observe::callback, dl::retry::exponential_backoff>;

template <class F>
using semaphore_of = dl::basic_distributed_semaphore<typename F::backend, dl::observe::callback, dl::retry::fixed>;

/// Readers share the lock and a writer holds it alone; every grant takes a larger fence
/// than every grant before it, so a writer's exceeds the readers' it waited for.
template <class F>
void shared_readers_exclusive_writer()
{
    F f;
    test::run(f.io, [&]() -> asio::awaitable<void> {
        const std::string resource = "conf:rw";
        shared_mutex_of<F> a{f.client(0), resource, {.ttl = 10s}, dl::observe::callback{}, quick()};
        shared_mutex_of<F> b{f.client(1), resource, {.ttl = 10s}, dl::observe::callback{}, quick()};
        shared_mutex_of<F> c{f.client(2), resource, {.ttl = 10s}, dl::observe::callback{}, quick()};
        auto first = co_await a.lock();
        REQUIRE(first);
        CHECK_FALSE(first->shared());
        auto refused = co_await b.try_lock_shared();
        REQUIRE_FALSE(refused);
        CHECK(refused.error() == dl::condition::contended);
        { const auto ok_ = co_await first->unlock(); CHECK(ok_); }

        auto r1 = co_await a.lock_shared();
        auto r2 = co_await b.try_lock_shared();
        REQUIRE(r1);
        REQUIRE(r2);
        CHECK(r1->shared());
        CHECK(r1->fence() > first->fence());
        CHECK(r2->fence() > r1->fence());
        auto writer = co_await c.try_lock();
        REQUIRE_FALSE(writer);
        CHECK(writer.error() == dl::condition::contended);
        { const auto ok_ = co_await r1->unlock(); CHECK(ok_); }
        auto still = co_await c.try_lock();
        REQUIRE_FALSE(still); // one reader holds on
        { const auto ok_ = co_await r2->unlock(); CHECK(ok_); }
        auto w = co_await c.lock();
        REQUIRE(w);
        CHECK(w->fence() > r2->fence());
        auto late = co_await a.try_lock_shared();
        CHECK_FALSE(late);
        { const auto ok_ = co_await w->unlock(); CHECK(ok_); }
        // Nothing is left: a writer gets it at once.
        auto again = co_await a.try_lock();
        REQUIRE(again);
        CHECK(again->fence() > w->fence());
        { const auto ok_ = co_await again->unlock(); CHECK(ok_); }
    });
}

/// A waiting writer keeps new readers out; it is granted when the readers before it
/// are gone, and the readers refused meanwhile come in after it.
template <class F>
void shared_writer_not_starved()
{
    F f;
    test::run(f.io, [&]() -> asio::awaitable<void> {
        const auto ex = co_await asio::this_coro::executor;
        const std::string resource = "conf:rw-starve";
        shared_mutex_of<F> a{f.client(0), resource, {.ttl = 10s}, dl::observe::callback{}, quick()};
        waiting_shared_mutex_of<F> w{f.client(1), resource, {.ttl = 10s}, dl::observe::callback{}, for_a_minute()};
        waiting_shared_mutex_of<F> b{f.client(2), resource, {.ttl = 10s}, dl::observe::callback{}, for_a_minute()};
        auto reader = co_await a.lock_shared();
        REQUIRE(reader);
        auto writing = test::start(ex, w.lock());
        // Its first try, refused, leaves its intent.
        co_await test::settle(200ms);
        CHECK_FALSE(writing.ready());
        auto kept_out = co_await a.try_lock_shared();
        REQUIRE_FALSE(kept_out);
        CHECK(kept_out.error() == dl::condition::contended);
        auto reading = test::start(ex, b.lock_shared());
        co_await test::settle(100ms);
        CHECK_FALSE(reading.ready());
        { const auto ok_ = co_await reader->unlock(); CHECK(ok_); }
        REQUIRE(co_await writing.wait(30000ms));
        auto& wl = writing.get();
        REQUIRE(wl);
        CHECK(wl->fence() > reader->fence());
        CHECK_FALSE(reading.ready());
        { const auto ok_ = co_await wl->unlock(); CHECK(ok_); }
        REQUIRE(co_await reading.wait(30000ms));
        auto& rl = reading.get();
        REQUIRE(rl);
        CHECK(rl->fence() > wl->fence());
        { const auto ok_ = co_await rl->unlock(); CHECK(ok_); }
    });
}

/// A writer that gives up waiting takes its hold on the readers with it: readers come
/// in at once, not after its intent ran out.
template <class F>
void shared_writer_gives_up()
{
    F f;
    test::run(f.io, [&]() -> asio::awaitable<void> {
        const std::string resource = "conf:rw-give-up";
        shared_mutex_of<F> a{f.client(0), resource, {.ttl = 30s}, dl::observe::callback{}, quick()};
        shared_mutex_of<F> w{f.client(1), resource, {.ttl = 30s}, dl::observe::callback{}, quick()};
        auto reader = co_await a.lock_shared();
        REQUIRE(reader);
        auto gave_up = co_await w.lock_until(dl::clock::now() + 300ms);
        REQUIRE_FALSE(gave_up);
        // Its withdrawal runs as the store's background work, right after: well
        // before its intent (30 s) would run out.
        bool in = false;
        for (int i = 0; i < 200 && !in; ++i) {
            auto r = co_await a.try_lock_shared();
            if (r) {
                in = true;
                { const auto ok_ = co_await r->unlock(); CHECK(ok_); }
            } else {
                co_await test::settle(10ms);
            }
        }
        CHECK(in);
        { const auto ok_ = co_await reader->unlock(); CHECK(ok_); }
    });
}

/// A downgraded writer holds on as a reader: other readers come in beside it, a
/// writer does not.
template <class F>
void shared_downgrade()
{
    F f;
    test::run(f.io, [&]() -> asio::awaitable<void> {
        const std::string resource = "conf:rw-downgrade";
        shared_mutex_of<F> a{f.client(0), resource, {.ttl = 10s}, dl::observe::callback{}, quick()};
        shared_mutex_of<F> b{f.client(1), resource, {.ttl = 10s}, dl::observe::callback{}, quick()};
        auto w = co_await a.lock();
        REQUIRE(w);
        // Any mutex object of the resource may downgrade its writer's lease.
        auto down = co_await b.downgrade(*w);
        REQUIRE(down);
        CHECK(w->shared());
        auto twice = co_await a.downgrade(*w);
        REQUIRE_FALSE(twice);
        CHECK(twice.error() == dl::condition::invalid_argument);
        auto beside = co_await b.try_lock_shared();
        REQUIRE(beside);
        CHECK(beside->fence() > w->fence());
        auto writer = co_await b.try_lock();
        CHECK_FALSE(writer);
        { const auto ok_ = co_await w->unlock(); CHECK(ok_); }
        { const auto ok_ = co_await beside->unlock(); CHECK(ok_); }
        auto after = co_await b.try_lock();
        REQUIRE(after);
        { const auto ok_ = co_await after->unlock(); CHECK(ok_); }
    });
}

/// N permits: N holders at once, each with its own slot; the next waits; a released
/// slot goes to the next holder with a larger fence; another count is refused.
template <class F>
void semaphore_permits()
{
    F f;
    test::run(f.io, [&]() -> asio::awaitable<void> {
        const auto ex = co_await asio::this_coro::executor;
        const std::string resource = "conf:sem";
        const dl::semaphore_options three{.permits = 3, .lease = {.ttl = 10s}};
        semaphore_of<F> s0{f.client(0), resource, three, dl::observe::callback{}, quick()};
        semaphore_of<F> s1{f.client(1), resource, three, dl::observe::callback{}, quick()};
        semaphore_of<F> s2{f.client(2), resource, three, dl::observe::callback{}, quick()};
        std::vector<dl::lease> held;
        for (auto* s : {&s0, &s1, &s2}) {
            auto p = co_await s->try_acquire();
            REQUIRE(p);
            CHECK(p->shared());
            REQUIRE(p->slot());
            held.push_back(std::move(p).value());
        }
        std::set<std::uint32_t> slots;
        for (const auto& p : held)
            slots.insert(*p.slot());
        CHECK(slots == std::set<std::uint32_t>{0, 1, 2});
        CHECK(held[1].fence() > held[0].fence());
        CHECK(held[2].fence() > held[1].fence());

        auto full = co_await s0.try_acquire();
        REQUIRE_FALSE(full);
        CHECK(full.error() == dl::condition::contended);

        // A client that counts differently is told so, never given a permit.
        semaphore_of<F> two{f.client(1), resource, {.permits = 2, .lease = {.ttl = 10s}}, dl::observe::callback{},
                            quick()};
        dl::diagnostics diag;
        auto mixed = co_await two.try_acquire(diag);
        REQUIRE_FALSE(mixed);
        CHECK(mixed.error() == dl::condition::invalid_argument);

        // A waiter gets the slot that was given back, with a larger fence.
        semaphore_of<F> waiting{f.client(2), resource, three, dl::observe::callback{},
                                dl::retry::fixed{.delay = 20ms, .deadline = 30s}};
        auto next = test::start(ex, waiting.acquire());
        co_await test::settle(100ms);
        CHECK_FALSE(next.ready());
        const auto freed = *held[1].slot();
        { const auto ok_ = co_await held[1].unlock(); CHECK(ok_); }
        REQUIRE(co_await next.wait(30000ms));
        auto& got = next.get();
        REQUIRE(got);
        CHECK(*got->slot() == freed);
        CHECK(got->fence() > held[2].fence());
        { const auto ok_ = co_await got->unlock(); CHECK(ok_); }
        for (auto& p : held)
            if (p.valid())
                (void)co_await p.unlock();
        // Bad counts are refused before any I/O.
        semaphore_of<F> none{f.client(0), resource, {.permits = 0}, dl::observe::callback{}, quick()};
        auto refused = co_await none.try_acquire();
        REQUIRE_FALSE(refused);
        CHECK(refused.error() == dl::condition::invalid_argument);
    });
}

/// A permit whose holder vanished (its lease neither renewed nor released) comes back
/// after its TTL.
template <class F>
void semaphore_permit_comes_back()
{
    F f;
    test::run(f.io, [&]() -> asio::awaitable<void> {
        const std::string resource = "conf:sem-back";
        const dl::semaphore_options one{.permits = 1, .lease = {.ttl = 1s}};
        semaphore_of<F> s0{f.client(0), resource, one, dl::observe::callback{}, quick()};
        semaphore_of<F> s1{f.client(1), resource, one, dl::observe::callback{},
                           dl::retry::fixed{.delay = 50ms, .deadline = 30s}};
        auto held = co_await s0.acquire();
        REQUIRE(held);
        f.end_lock(*held); // the store forgets it as if its holder had died
        auto next = co_await s1.acquire();
        REQUIRE(next);
        CHECK(next->fence() > held->fence());
        CHECK(*next->slot() == 0);
        { const auto ok_ = co_await next->unlock(); CHECK(ok_); }
    });
}

/// A set with modes: one resource read, one written, in one sorted all-or-nothing call.
/// Readers still come in beside the shared one; nobody else writes either; a set that
/// cannot have one resource leaves the others untaken.
template <class F>
void shared_set_with_modes()
{
    F f;
    test::run(f.io, [&]() -> asio::awaitable<void> {
        using set_of = dl::basic_multi_shared_lock<typename F::backend, dl::observe::callback, dl::retry::fixed>;
        set_of transfer{f.client(0),
                        dl::resources(dl::shared("conf:acct:7"), dl::exclusive("conf:acct:42"),
                                      dl::shared("conf:acct:42")), // named twice: taken once, exclusively
                        {.ttl = 10s}, dl::observe::callback{}, quick()};
        const auto order = transfer.ordered_resources();
        REQUIRE(order.size() == 2);
        CHECK(order[0].resource == "conf:acct:42");
        CHECK(order[0].mode == dl::lock_mode::exclusive);
        CHECK(order[1].mode == dl::lock_mode::shared);
        auto both = co_await transfer.lock();
        REQUIRE(both);
        REQUIRE(both->leases().size() == 2);
        CHECK(both->leases()[0].resource() == "conf:acct:42");
        CHECK_FALSE(both->leases()[0].shared());
        CHECK(both->leases()[1].shared());
        const auto read_fence = both->leases()[1].fence();

        shared_mutex_of<F> seven{f.client(1), "conf:acct:7", {.ttl = 10s}, dl::observe::callback{}, quick()};
        shared_mutex_of<F> forty_two{f.client(1), "conf:acct:42", {.ttl = 10s}, dl::observe::callback{}, quick()};
        auto reader = co_await seven.try_lock_shared();
        REQUIRE(reader); // read beside the set's reader
        CHECK(reader->fence() > read_fence);
        { const auto ok_ = co_await reader->unlock(); CHECK(ok_); }
        auto writer = co_await seven.try_lock();
        REQUIRE_FALSE(writer);
        CHECK(writer.error() == dl::condition::contended);
        auto other_reader = co_await forty_two.try_lock_shared();
        REQUIRE_FALSE(other_reader);
        CHECK(other_reader.error() == dl::condition::contended);

        // All or nothing: a second transfer reads "conf:acct:10" (first in order), then
        // cannot write the account the first one writes; it leaves no reader behind.
        set_of second{f.client(2), dl::resources(dl::shared("conf:acct:10"), dl::exclusive("conf:acct:42")),
                      {.ttl = 10s}, dl::observe::callback{}, quick()};
        auto refused = co_await second.try_lock();
        REQUIRE_FALSE(refused);
        CHECK(refused.error() == dl::condition::contended);
        shared_mutex_of<F> ten{f.client(1), "conf:acct:10", {.ttl = 10s}, dl::observe::callback{}, quick()};
        auto alone = co_await ten.try_lock();
        REQUIRE(alone); // no reader was left on it
        { const auto ok_ = co_await alone->unlock(); CHECK(ok_); }
        { const auto ok_ = co_await both->unlock(); CHECK(ok_); }
        auto after = co_await seven.try_lock();
        REQUIRE(after);
        CHECK(after->fence() > read_fence);
        { const auto ok_ = co_await after->unlock(); CHECK(ok_); }

        // The free function, with a set of one.
        auto one = co_await dl::lock_all(f.client(2), dl::resources(dl::shared("conf:acct:42")), {.ttl = 10s});
        REQUIRE(one);
        CHECK(one->leases().front().shared());
        { const auto ok_ = co_await one->unlock(); CHECK(ok_); }
    });
}

/// The fixture's holder processes take shared grants too (hold_until_lost's modes).
template <class F>
struct kills_shared_holders : std::bool_constant<requires(F& f) {
    { f.holder_process(std::string{}, std::string{}) } -> std::same_as<std::unique_ptr<test::child>>;
}> {};

/// A holder process's grant, from its "locked FENCE [SLOT]" line.
struct process_grant {
    dl::fence_token fence = 0;
    std::optional<std::uint32_t> slot;
};

inline process_grant started_holder(test::child& holder)
{
    const auto line = holder.read_line(std::chrono::seconds{20});
    REQUIRE(line);
    REQUIRE(line->starts_with("locked "));
    std::istringstream words{line->substr(7)};
    process_grant g;
    words >> g.fence;
    if (std::uint32_t slot = 0; words >> slot)
        g.slot = slot;
    return g;
}

/// A reader in another process is killed while a writer waits: the writer is granted
/// once the reader's lease ends (its TTL or its session), with a larger fence.
template <class F>
void shared_killed_reader()
{
    F f;
    auto reader = f.holder_process("conf:killed-reader", "shared");
    const auto dead = started_holder(*reader);
    test::run(f.io, [&]() -> asio::awaitable<void> {
        const auto ex = co_await asio::this_coro::executor;
        waiting_shared_mutex_of<F> writer_m{f.client(0), "conf:killed-reader", {.ttl = 10s}, dl::observe::callback{},
                                            dl::retry::exponential_backoff{.deadline = 40s}};
        auto writer = test::start(ex, writer_m.lock());
        co_await test::settle(300ms);
        CHECK_FALSE(writer.ready()); // the reader holds
        reader->kill(SIGKILL);
        REQUIRE(reader->wait());
        { const bool came_ = co_await writer.wait(std::chrono::seconds{45}); REQUIRE(came_); }
        auto& got = writer.get();
        REQUIRE(got);
        CHECK(got->fence() > dead.fence);
        { const auto ok_ = co_await got->unlock(); CHECK(ok_); }
    });
}

/// A crashed process's permits come back: two processes hold both permits of a
/// semaphore of 2 and are killed; both permits are granted again, numbers 0 and 1,
/// with larger fences.
template <class F>
void semaphore_killed_holders()
{
    F f;
    auto first = f.holder_process("conf:killed-permits", "permit:2");
    const auto one = started_holder(*first);
    auto second = f.holder_process("conf:killed-permits", "permit:2");
    const auto two = started_holder(*second);
    REQUIRE(one.slot);
    REQUIRE(two.slot);
    CHECK(*one.slot != *two.slot);
    first->kill(SIGKILL);
    second->kill(SIGKILL);
    REQUIRE(first->wait());
    REQUIRE(second->wait());
    test::run(f.io, [&]() -> asio::awaitable<void> {
        using patient_semaphore =
            dl::basic_distributed_semaphore<typename F::backend, dl::observe::callback, dl::retry::exponential_backoff>;
        const dl::semaphore_options two_permits{.permits = 2, .lease = {.ttl = 10s}};
        patient_semaphore a{f.client(0), "conf:killed-permits", two_permits, dl::observe::callback{},
                            dl::retry::exponential_backoff{.deadline = 40s}};
        patient_semaphore b{f.client(1), "conf:killed-permits", two_permits, dl::observe::callback{},
                            dl::retry::exponential_backoff{.deadline = 40s}};
        auto p = co_await a.acquire();
        auto q = co_await b.acquire();
        REQUIRE(p);
        REQUIRE(q);
        CHECK(std::set<std::uint32_t>{*p->slot(), *q->slot()} == std::set<std::uint32_t>{0, 1});
        CHECK(std::min(p->fence(), q->fence()) > std::max(one.fence, two.fence));
        { const auto ok_ = co_await p->unlock(); CHECK(ok_); }
        { const auto ok_ = co_await q->unlock(); CHECK(ok_); }
    });
}

/// A waiting writer whose session is lost ends with an error and keeps no reader out:
/// a reader refused while the writer waited comes in beside the reader that holds.
template <class F>
void shared_writer_session_lost()
{
    F f;
    test::run(f.io, [&]() -> asio::awaitable<void> {
        const auto ex = co_await asio::this_coro::executor;
        const std::string resource = "conf:lost-writer";
        waiting_shared_mutex_of<F> a{f.client(0), resource, {.ttl = 10s}, dl::observe::callback{}, for_a_minute()};
        waiting_shared_mutex_of<F> b{f.client(1), resource, {.ttl = 10s}, dl::observe::callback{}, for_a_minute()};
        shared_mutex_of<F> c{f.client(2), resource, {.ttl = 10s}, dl::observe::callback{}, quick()};
        auto reading = co_await a.lock_shared();
        REQUIRE(reading);
        auto writer = test::start(ex, b.lock_until(dl::clock::now() + F::session_end_within + 3s));
        (void)co_await test::eventually("the writer waits", [&] { return f.waiters(resource) == 2; }, long_enough());
        auto refused = co_await c.try_lock_shared();
        REQUIRE_FALSE(refused); // a writer queued before it
        CHECK(refused.error() == dl::condition::contended);

        co_await f.end_session(1);
        { const bool came_ = co_await writer.wait(std::chrono::seconds{30}); REQUIRE(came_); }
        REQUIRE_FALSE(writer.get());
        co_await background_done(f.client(1));
        auto beside = co_await c.try_lock_shared();
        REQUIRE(beside); // the lost writer left nothing that keeps readers out
        CHECK(reading->valid());
        CHECK(beside->fence() > reading->fence());
        { const auto ok_ = co_await beside->unlock(); CHECK(ok_); }
        { const auto ok_ = co_await reading->unlock(); CHECK(ok_); }
    });
}

/// Registers the shared mutex's and the semaphore's behaviours on fixture F.
template <class F>
void register_shared_behaviours(const std::string& tags, void (*add)(const char*, void (*)(), const std::string&,
                                                                       const Catch::SourceLineInfo&))
{
    if constexpr (shares<F>::value) {
        add("conformance: shared mutex: readers share, a writer holds alone, fences grow across both",
            &shared_readers_exclusive_writer<F>, tags, CATCH_INTERNAL_LINEINFO);
        add("conformance: shared mutex: a waiting writer keeps new readers out and is not starved",
            &shared_writer_not_starved<F>, tags, CATCH_INTERNAL_LINEINFO);
        add("conformance: shared mutex: a writer that gives up lets readers in at once", &shared_writer_gives_up<F>,
            tags, CATCH_INTERNAL_LINEINFO);
        if constexpr (requires(typename F::backend& b, std::string_view r, const dl::owner_token& o) {
                          b.downgrade(r, o);
                      })
            add("conformance: shared mutex: a downgraded writer holds on as a reader, no writer between",
                &shared_downgrade<F>, tags, CATCH_INTERNAL_LINEINFO);
        add("conformance: shared mutex: lock_all takes a set with modes, sorted, all or nothing",
            &shared_set_with_modes<F>, tags, CATCH_INTERNAL_LINEINFO);
        add("conformance: semaphore: N permits with distinct slots; the next waits; another count is refused",
            &semaphore_permits<F>, tags, CATCH_INTERNAL_LINEINFO);
        add("conformance: semaphore: a vanished holder's permit comes back", &semaphore_permit_comes_back<F>, tags,
            CATCH_INTERNAL_LINEINFO);
        if constexpr (ends_sessions<F>::value)
            add("conformance: shared mutex: a waiting writer whose session is lost ends with an error and keeps no "
                "reader out",
                &shared_writer_session_lost<F>, tags, CATCH_INTERNAL_LINEINFO);
        if constexpr (kills_shared_holders<F>::value) {
            add("conformance: shared mutex: a reader SIGKILLed while a writer waits: the writer is granted, with a "
                "larger fence",
                &shared_killed_reader<F>, tags, CATCH_INTERNAL_LINEINFO);
            add("conformance: semaphore: a crashed process's permits come back, numbers and fences as promised",
                &semaphore_killed_holders<F>, tags, CATCH_INTERNAL_LINEINFO);
        }
    }
}

} // namespace test::conformance
