// The conformance behaviours of the lock-delay (lock_options::lock_delay), written once
// and run on every fixture whose store keeps lock-delays (included by suite.hpp, which
// registers them).
#pragma once

#include "eventually.hpp"
#include "support.hpp"

#include <distlock/basic_distributed_shared_mutex.hpp>
#include <distlock/basic_leader_election.hpp>

#include <chrono>
#include <optional>
#include <string>

namespace test::conformance {

/// The fixture's store keeps lock-delays (lock_delay_store). A fixture whose setting
/// refuses them says so with `static constexpr bool delays = false;`.
template <class F>
struct delays : std::bool_constant<dl::lock_delay_store<typename F::backend> && !requires { requires !F::delays; }> {
};

/// The delay the cases ask for: whole seconds, which every store keeps exactly.
inline constexpr dl::duration conformance_delay = std::chrono::seconds{2};

/// An unplanned loss (the store drops the grant, as when its TTL or session runs out)
/// holds the next grant back until the delay has passed, for every client, and not
/// longer; a refused try says until when; a release skips the delay.
template <class F>
void lock_delay_after_loss()
{
    F f;
    test::run(f.io, [&]() -> asio::awaitable<void> {
        const std::string resource = "conf:lock-delay";
        const dl::lock_options delayed{.ttl = 10s, .lock_delay = conformance_delay};
        mutex_of<F> holder{f.client(0), resource, delayed, dl::observe::callback{}};
        // The next clients do not ask for a delay themselves: the store keeps it.
        single_try_mutex_of<F> prober{f.client(1), resource, {.ttl = 10s}, dl::observe::callback{}};
        mutex_with<F, dl::retry::fixed> next{f.client(2), resource, {.ttl = 10s}, dl::retry::fixed{.delay = 50ms}};

        // 1. A release skips the delay.
        auto first = co_await holder.lock();
        REQUIRE(first);
        { const auto ok_ = co_await first->unlock(); CHECK(ok_); }
        auto right_after = co_await prober.try_lock();
        REQUIRE(right_after);
        { const auto ok_ = co_await right_after->unlock(); CHECK(ok_); }

        // 2. The store drops the grant: the resource refuses grants until the delay has
        // passed, and says until when.
        auto lost = co_await holder.lock();
        REQUIRE(lost);
        const auto fence = lost->fence();
        f.end_lock(*lost);
        const auto ended = dl::clock::now();
        (void)co_await test::eventually("the store dropped the lock", [&] { return !f.held(resource); },
                                        long_enough());
        dl::diagnostics diag;
        auto refused = co_await prober.try_lock(diag);
        REQUIRE_FALSE(refused);
        CHECK(refused.error() == dl::errc::lock_delayed);
        CHECK(refused.error() == dl::condition::contended);
        REQUIRE(diag.lock_delay_until());
        const auto until = *diag.lock_delay_until();
        INFO(diag.to_string());
        CHECK(until > dl::clock::now());
        // From the end of the grant (as the store saw it, no earlier than the end_lock()
        // call less a second of timer slack): not beyond it by more than the delay.
        CHECK(until <= dl::clock::now() + conformance_delay + 1s);

        // A lock() that gives up before the delay ends returns at once, saying why.
        const auto asked = dl::clock::now();
        auto impatient = co_await next.lock_until(dl::clock::now() + 200ms);
        REQUIRE_FALSE(impatient);
        CHECK(impatient.error() == dl::errc::lock_delayed);
        CHECK(dl::clock::now() - asked < 200ms + 1s);

        // A waiting lock() is granted once the delay has passed: not before the store's
        // time, and not long after it.
        auto taken = co_await next.lock_until(dl::clock::now() + 30s);
        const auto granted_at = dl::clock::now();
        REQUIRE(taken);
        CHECK(granted_at >= until);
        CHECK(granted_at <= until + 2s);
        CHECK(granted_at >= ended + conformance_delay - 1s);
        CHECK(taken->fence() > fence);
        // This grant was not marked: its release leaves nothing, and neither would its
        // loss.
        { const auto ok_ = co_await taken->unlock(); CHECK(ok_); }
        auto free_again = co_await prober.try_lock();
        REQUIRE(free_again);
        { const auto ok_ = co_await free_again->unlock(); CHECK(ok_); }
    });
}

/// A lock-delay beyond the TTL, or negative, is refused before any I/O.
template <class F>
void lock_delay_bounds()
{
    F f;
    test::run(f.io, [&]() -> asio::awaitable<void> {
        single_try_mutex_of<F> longer{f.client(0), "conf:lock-delay-bounds", {.ttl = 2s, .lock_delay = 3s},
                                      dl::observe::callback{}};
        auto r = co_await longer.try_lock();
        REQUIRE_FALSE(r);
        CHECK(r.error() == dl::condition::invalid_argument);
        single_try_mutex_of<F> negative{f.client(0), "conf:lock-delay-bounds", {.ttl = 2s, .lock_delay = -1ms},
                                        dl::observe::callback{}};
        r = co_await negative.try_lock();
        REQUIRE_FALSE(r);
        CHECK(r.error() == dl::condition::invalid_argument);
        CHECK_FALSE(f.held("conf:lock-delay-bounds"));
    });
}

/// Readers honour a writer's tombstone: a shared grant is refused for the lock-delay
/// too (they are never marked themselves).
template <class F>
void lock_delay_holds_readers_back()
{
    F f;
    test::run(f.io, [&]() -> asio::awaitable<void> {
        const std::string resource = "conf:lock-delay-rw";
        dl::basic_distributed_shared_mutex<typename F::backend, dl::observe::callback, dl::retry::none> writer{
            f.client(0), resource, {.ttl = 10s, .lock_delay = conformance_delay}};
        dl::basic_distributed_shared_mutex<typename F::backend, dl::observe::callback, dl::retry::none> reader{
            f.client(1), resource, {.ttl = 10s}};
        auto w = co_await writer.lock();
        REQUIRE(w);
        f.end_lock(*w);
        (void)co_await test::eventually("the store dropped the lock", [&] { return !f.held(resource); },
                                        long_enough());
        dl::diagnostics diag;
        auto r = co_await reader.try_lock_shared(diag);
        REQUIRE_FALSE(r);
        CHECK(r.error() == dl::errc::lock_delayed);
        CHECK(diag.lock_delay_until().has_value());
        // A reader's own grant leaves no tombstone when it goes.
        dl::basic_distributed_shared_mutex<typename F::backend, dl::observe::callback, dl::retry::fixed> patient{
            f.client(1), resource, {.ttl = 10s, .lock_delay = conformance_delay}, dl::retry::fixed{.delay = 50ms}};
        auto later = co_await patient.lock_shared_until(dl::clock::now() + 30s);
        REQUIRE(later);
        f.end_lock(*later);
        (void)co_await test::eventually("the store dropped the reader's grant", [&] { return !f.held(resource); },
                                        long_enough());
        auto after_reader = co_await writer.try_lock();
        REQUIRE(after_reader);
        { const auto ok_ = co_await after_reader->unlock(); CHECK(ok_); }
    });
}

template <class F>
void register_lock_delay_behaviours(const std::string& tags,
                                    void (*add)(const char*, void (*)(), const std::string&,
                                                const Catch::SourceLineInfo&))
{
    if constexpr (delays<F>::value) {
        add("conformance: lock-delay: an unplanned loss holds every client's next grant back by the delay and no "
            "more; a release does not",
            &lock_delay_after_loss<F>, tags, CATCH_INTERNAL_LINEINFO);
        add("conformance: lock-delay: beyond the TTL or negative is refused before any I/O", &lock_delay_bounds<F>,
            tags, CATCH_INTERNAL_LINEINFO);
        if constexpr (shares<F>::value)
            add("conformance: lock-delay: readers honour a writer's tombstone and leave none of their own",
                &lock_delay_holds_readers_back<F>, tags, CATCH_INTERNAL_LINEINFO);
    }
}

} // namespace test::conformance
