// The store conformance suite: each behaviour of the store contract (store.hpp,
// claim.hpp, docs/guarantees.md) written once, run on every store through a fixture.
//
// A fixture F provides:
//   using backend = ...;                      what the mutex locks on
//   static constexpr bool notifies;           waiters are woken by the store (release
//                                             notification or predecessor watch)
//   static constexpr bool quorum;             several nodes (a release succeeds if any held it)
//   asio::io_context io;
//   backend& client(std::size_t i);           i < 3: independent clients of one store
//   bool held(std::string_view resource);     the store holds a lock on it now
//   void end_lock(const dl::lease& l);        the store drops l's lock (as if its TTL
//                                             or session ran out); l does not know yet
//   optional: void lose_next_reply(std::size_t client);  applied, reply lost
//             (or lose_next_reply(client, resource), for a store whose servers
//             split resources among them: the one holding `resource` loses it)
//   optional: void refuse_next(std::size_t client);      not applied
//   optional: awaitable<void> close(std::size_t client);
//   optional: using acquisition = ...;  the acquisition policy of its mutexes (default:
//             the backend's)
//   optional: bool remembers(std::string_view resource);  the store keeps anything
//             for the resource (a store that forgets released and expired locks)
// and the suite is instantiated with DISTLOCK_CONFORMANCE("[tag]", F1, F2, ...).
// Real-time stores (Redis) run on the steady clock: the tests wait for conditions with
// eventually(), never assert on wall-clock durations.
#pragma once

#include "eventually.hpp"
#include "support.hpp"
#include "pending.hpp"

#include <asio/bind_cancellation_slot.hpp>
#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/experimental/as_tuple.hpp>

#include <algorithm>
#include <concepts>
#include <csignal>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace test::conformance {

/// Real time enough for a store on a loaded machine (2,500 steps of 2 ms).
inline test::steps long_enough()
{
    return {.max = 2500};
}

/// The acquisition a fixture's mutexes use: F::acquisition when it names one (a
/// store with several modes), else the backend's default.
template <class F>
struct acquisition_of {
    using type = dl::default_acquire_policy<typename F::backend>;
};
template <class F>
    requires requires { typename F::acquisition; }
struct acquisition_of<F> {
    using type = typename F::acquisition;
};

template <class F, class... Policies>
using mutex_with = dl::basic_distributed_mutex<typename F::backend, typename acquisition_of<F>::type, Policies...>;

template <class F>
using mutex_of = mutex_with<F, dl::observe::callback, dl::retry::fixed>;

template <class F>
using single_try_mutex_of = mutex_with<F, dl::observe::callback, dl::retry::none>;

inline dl::retry::fixed patient()
{
    // A long delay: only a notification wakes a waiter in time.
    return {.delay = std::chrono::seconds{20}, .deadline = std::chrono::seconds{60}};
}

inline dl::retry::fixed quick()
{
    return {.delay = std::chrono::milliseconds{10}, .deadline = std::chrono::seconds{10}};
}

// What a fixture can do beyond the required minimum. A behaviour that needs a
// capability runs on exactly the fixtures that have it (a test without it would
// assert nothing).
template <class F>
struct notifies : std::bool_constant<F::notifies> {};
template <class F>
struct loses_replies : std::bool_constant<requires(F& f) { f.lose_next_reply(0); } ||
                                          requires(F& f) { f.lose_next_reply(0, std::string_view{}); }> {};

/// The next reply to `client` about `resource` is lost.
template <class F>
void lose_next_reply(F& f, std::size_t client, std::string_view resource)
{
    if constexpr (requires { f.lose_next_reply(client, resource); })
        f.lose_next_reply(client, resource);
    else
        f.lose_next_reply(client);
}
template <class F>
struct refuses : std::bool_constant<requires(F& f) { f.refuse_next(0); }> {};
template <class F>
struct closes : std::bool_constant<requires(F& f) { f.close(0); }> {};
template <class F>
struct inspectable : std::bool_constant<dl::inspectable_store<typename F::backend>> {};
/// A fixture whose store keeps a fair queue and that can make more clients (sessions)
/// and count a resource's waiters.
template <class F>
struct queues : std::bool_constant<requires(F& f) {
    { f.make_client() } -> std::same_as<std::unique_ptr<typename F::backend>>;
    { f.waiters(std::string_view{}) } -> std::convertible_to<std::size_t>;
}> {};

/// A fixture whose store forgets a resource some time after its lock ended, and can
/// tell whether it still remembers it.
template <class F>
struct forgets : std::bool_constant<requires(F& f) {
    { f.remembers(std::string_view{}) } -> std::convertible_to<bool>;
}> {};

/// A fixture that can start a holder in a process of its own (a test::child, which
/// the suite does not name: the in-process fixtures' tests do not link it): a worker
/// that takes the lock on a resource, prints "locked FENCE" and holds it until killed
/// (hold_until_lost() is its body).
template <class F>
struct kills_holders : std::bool_constant<requires(F& f) { f.holder_process(std::string{}); }> {};

/// The body of a holder process: takes the lock on `resource` through `store`, prints
/// "locked FENCE", and holds it until the lease is lost (exit status 3) or the process
/// is killed.
template <class Store>
int hold_until_lost(asio::io_context& io, Store& store, const std::string& resource)
{
    int status = 1;
    asio::co_spawn(io, [&]() -> asio::awaitable<void> {
        dl::basic_distributed_mutex<Store, dl::retry::exponential_backoff> m{
            store, resource, {}, dl::retry::exponential_backoff{.deadline = std::chrono::seconds{30}}};
        auto l = co_await m.lock();
        if (!l)
            co_return;
        std::printf("locked %llu\n", static_cast<unsigned long long>(l->fence()));
        std::fflush(stdout);
        co_await l->lost();
        status = 3;
    }, asio::detached);
    io.run();
    return status;
}

/// Opens each client's connections and session with a lock taken and released, so
/// that a test's next request is its own (a lost reply is then the test's, not a
/// handshake's).
template <class Clients>
void warm_up(asio::io_context& io, Clients& clients)
{
    test::run(io, [&]() -> asio::awaitable<void> {
        for (auto& c : clients) {
            using backend = std::remove_reference_t<decltype(*c)>;
            dl::basic_distributed_mutex<backend, dl::retry::none> m{*c, "conf:warm-up",
                                                                   {.ttl = std::chrono::seconds{10}}};
            dl::diagnostics diag;
            auto l = co_await m.lock(diag);
            INFO(diag.to_string());
            REQUIRE(l);
            { const auto ok_ = co_await l->unlock(); REQUIRE(ok_); }
        }
    });
}

/// Closes every client after a test (their releases finish, their sessions end).
template <class Clients>
void close_all(asio::io_context& io, Clients& clients)
{
    io.restart();
    test::run(io, [&]() -> asio::awaitable<void> {
        for (auto& c : clients)
            co_await c->close();
    });
}

/// The fixtures among Fs for which Has<F> holds, as a std::tuple type.
template <template <class> class Has, class... Fs>
using having = decltype(std::tuple_cat(
    std::declval<std::conditional_t<Has<Fs>::value, std::tuple<Fs>, std::tuple<>>>()...));

template <class F>
struct any_fixture : std::true_type {};

/// Registers Cases::run<F> as one test case "<name> - <F::name>" per fixture F of the
/// list; a list without fixtures registers none (Catch's own list test cases cannot be
/// empty).
template <class Cases, class... Fs>
int register_cases(std::type_identity<std::tuple<Fs...>>, [[maybe_unused]] const char* name, [[maybe_unused]] const char* tags,
                   [[maybe_unused]] const Catch::SourceLineInfo& line)
{
    (Catch::AutoReg{Catch::makeTestInvoker(&Cases::template run<Fs>), line, Catch::StringRef{},
                    Catch::NameAndTags{std::string{name} + " - " + Fs::name, tags}},
     ...);
    return sizeof...(Fs);
}

} // namespace test::conformance

// One behaviour, run on each fixture of LIST (a test::conformance::having list); the
// body follows, with the fixture type as TestType.
#define DISTLOCK_CONFORMANCE_CASE(ID, NAME, TAG, LIST)                                                                 \
    namespace {                                                                                                        \
    struct conformance_##ID {                                                                                          \
        template <class TestType>                                                                                      \
        static void run();                                                                                             \
    };                                                                                                                 \
    [[maybe_unused]] const int conformance_##ID##_cases = test::conformance::register_cases<conformance_##ID>(         \
        std::type_identity<conformance_fixtures::LIST>{}, NAME, TAG "[conformance]", CATCH_INTERNAL_LINEINFO);         \
    }                                                                                                                  \
    template <class TestType>                                                                                          \
    void conformance_##ID::run()

// Each behaviour runs on every fixture given that has what it needs; a fixture names
// itself with `static constexpr const char* name`. Used once per translation unit.
#define DISTLOCK_CONFORMANCE(TAG, ...)                                                                                 \
    namespace conformance_fixtures {                                                                                   \
    using all = test::conformance::having<test::conformance::any_fixture, __VA_ARGS__>;                                \
    using notifying = test::conformance::having<test::conformance::notifies, __VA_ARGS__>;                             \
    using losing_replies = test::conformance::having<test::conformance::loses_replies, __VA_ARGS__>;                   \
    using refusing = test::conformance::having<test::conformance::refuses, __VA_ARGS__>;                               \
    using closing = test::conformance::having<test::conformance::closes, __VA_ARGS__>;                                 \
    using inspectable = test::conformance::having<test::conformance::inspectable, __VA_ARGS__>;                        \
    using queueing = test::conformance::having<test::conformance::queues, __VA_ARGS__>;                                \
    using killing = test::conformance::having<test::conformance::kills_holders, __VA_ARGS__>;                          \
    using forgetting = test::conformance::having<test::conformance::forgets, __VA_ARGS__>;                             \
    }                                                                                                                  \
    DISTLOCK_CONFORMANCE_CASE(exclusion, "conformance: one holder at a time, fences grow across clients", TAG, all)    \
    {                                                                                                                  \
        using namespace test::conformance;                                                                             \
        TestType f;                                                                                                    \
        test::run(f.io, [&]() -> asio::awaitable<void> {                                                               \
            dl::fence_token last = 0;                                                                                  \
            for (std::size_t round = 0; round < 6; ++round) {                                                          \
                mutex_of<TestType> a{f.client(round % 3), "conf:exclusion", {.ttl = 10s}, dl::observe::callback{}};    \
                mutex_of<TestType> b{f.client((round + 1) % 3), "conf:exclusion", {.ttl = 10s},                        \
                                     dl::observe::callback{}};                                                         \
                auto la = co_await a.lock();                                                                           \
                REQUIRE(la);                                                                                           \
                CHECK(la->fence() > last);                                                                             \
                last = la->fence();                                                                                    \
                CHECK(f.held("conf:exclusion"));                                                                       \
                auto lb = co_await b.try_lock();                                                                       \
                REQUIRE_FALSE(lb);                                                                                     \
                CHECK(lb.error() == dl::condition::contended);                                                         \
                auto r = co_await la->unlock();                                                                        \
                CHECK(r);                                                                                              \
            }                                                                                                          \
            (void)co_await test::eventually("!f.held(\"conf:exclusion\")", [&] { return !f.held("conf:exclusion"); }, long_enough()); \
        });                                                                                                            \
    }                                                                                                                  \
                                                                                                                       \
    DISTLOCK_CONFORMANCE_CASE(stale_release, "conformance: a lease whose lock the store dropped never removes the next holder's", TAG, all) \
    {                                                                                                                  \
        using namespace test::conformance;                                                                             \
        TestType f;                                                                                                    \
        test::run(f.io, [&]() -> asio::awaitable<void> {                                                               \
            mutex_of<TestType> a{f.client(0), "conf:owner", {.ttl = 10s}, dl::observe::callback{}};                    \
            mutex_of<TestType> b{f.client(1), "conf:owner", {.ttl = 10s}, dl::observe::callback{}, quick()};           \
            auto first = co_await a.lock();                                                                            \
            REQUIRE(first);                                                                                            \
            f.end_lock(*first);                                                                                        \
            auto second = co_await b.lock();                                                                           \
            REQUIRE(second);                                                                                           \
            CHECK(second->fence() > first->fence());                                                                   \
            auto stale = co_await first->unlock();                                                                     \
            /* On one store it was not the owner any more; on a quorum a node that */                                  \
            /* granted late may still have held it for the old owner. */                                               \
            if constexpr (!TestType::quorum)                                                                           \
                CHECK_FALSE(stale);                                                                                    \
            CHECK(second->valid());                                                                                    \
            CHECK(f.held("conf:owner"));                                                                               \
            auto third = co_await a.try_lock();                                                                        \
            CHECK_FALSE(third);                                                                                        \
            { const auto ok_ = co_await second->unlock(); CHECK(ok_); }                                                \
        });                                                                                                            \
    }                                                                                                                  \
                                                                                                                       \
    DISTLOCK_CONFORMANCE_CASE(set_release, "conformance: a set's unlock gives back every lock of the set, never the next holder's", TAG, all)\
    {                                                                                                                  \
        using namespace test::conformance;                                                                             \
        using set_of = dl::basic_multi_lock<typename TestType::backend, typename acquisition_of<TestType>::type,       \
                                            dl::observe::callback, dl::retry::fixed>;                                  \
        TestType f;                                                                                                    \
        test::run(f.io, [&]() -> asio::awaitable<void> {                                                               \
            const auto ids = dl::resources("conf:set-c", "conf:set-a", "conf:set-b");                                  \
            set_of set{mutex_of<TestType>{f.client(0), "conf:set", {.ttl = 10s}, dl::observe::callback{}}, ids};       \
            auto first = co_await set.lock();                                                                          \
            REQUIRE(first);                                                                                            \
            REQUIRE(first->resources() == dl::resources("conf:set-a", "conf:set-b", "conf:set-c"));                    \
            for (const auto& id : ids)                                                                                 \
                CHECK(f.held(id));                                                                                     \
            /* The store drops b's lock and another client takes it. */                                                \
            f.end_lock(first->leases()[1]);                                                                            \
            mutex_of<TestType> other{f.client(1), "conf:set-b", {.ttl = 10s}, dl::observe::callback{}, quick()};       \
            auto second = co_await other.lock();                                                                       \
            REQUIRE(second);                                                                                           \
            const auto fences = first->fences();                                                                       \
            auto stale = co_await first->unlock();                                                                     \
            if constexpr (!TestType::quorum) {                                                                         \
                REQUIRE_FALSE(stale);                                                                                  \
                /* The lease was lost, or (session-bound) its session with it. */                                  \
                CHECK((stale.error() == dl::condition::lease_lost || stale.error() == dl::condition::session_lost));\
            }                                                                                                          \
            CHECK(first->size() == 0);                                                                                 \
            CHECK_FALSE(f.held("conf:set-a"));                                                                         \
            CHECK_FALSE(f.held("conf:set-c"));                                                                         \
            CHECK(f.held("conf:set-b"));                                                                               \
            CHECK(second->valid());                                                                                    \
            { const auto ok_ = co_await second->unlock(); CHECK(ok_); }                                                \
            /* Taken again whole, with larger fences, and given back whole. */                                         \
            auto again = co_await set.lock();                                                                          \
            REQUIRE(again);                                                                                            \
            for (std::size_t i = 0; i < fences.size(); ++i)                                                            \
                CHECK(again->fences()[i] > fences[i]);                                                                 \
            { const auto ok_ = co_await again->unlock(); CHECK(ok_); }                                                 \
            for (const auto& id : ids)                                                                                 \
                CHECK_FALSE(f.held(id));                                                                               \
            auto twice = co_await again->unlock();                                                                     \
            CHECK(twice);                                                                                              \
        });                                                                                                            \
    }                                                                                                                  \
                                                                                                                       \
    DISTLOCK_CONFORMANCE_CASE(validity, "conformance: validity counts from the request, minus the margin", TAG, all)   \
    {                                                                                                                  \
        using namespace test::conformance;                                                                             \
        TestType f;                                                                                                    \
        test::run(f.io, [&]() -> asio::awaitable<void> {                                                               \
            const dl::lock_options options{.ttl = 10s};                                                                \
            mutex_of<TestType> a{f.client(0), "conf:validity", options, dl::observe::callback{}};                      \
            const auto before = dl::clock::now();                                                                      \
            auto l = co_await a.lock();                                                                                \
            REQUIRE(l);                                                                                                \
            CHECK(l->valid());                                                                                         \
            const auto after = dl::clock::now();                                                                       \
            CHECK(l->valid_until() > before);                                                                          \
            CHECK(l->valid_until() <= after + TestType::longest_validity(options));                                    \
            { const auto ok_ = co_await l->unlock(); CHECK(ok_); }                                                     \
        });                                                                                                            \
    }                                                                                                                  \
                                                                                                                       \
    DISTLOCK_CONFORMANCE_CASE(woken_by_release, "conformance: a waiter is woken by the release, not by its retry delay", TAG, notifying) \
    {                                                                                                                  \
        using namespace test::conformance;                                                                             \
        TestType f;                                                                                                    \
        test::recorder rec;                                                                                            \
        test::run(f.io, [&]() -> asio::awaitable<void> {                                                               \
            mutex_of<TestType> a{f.client(0), "conf:notify", {.ttl = 10s}, dl::observe::callback{}};                   \
            mutex_of<TestType> b{f.client(1), "conf:notify", {.ttl = 10s}, rec.observer(), patient()};                 \
            auto first = co_await a.lock();                                                                            \
            REQUIRE(first);                                                                                            \
            auto waiting = test::start(co_await asio::this_coro::executor, b.lock());                                  \
            (void)co_await test::eventually("!rec.of<dl::wait_event>().empty()", [&] { return !rec.of<dl::wait_event>().empty(); }, long_enough()); \
            { const auto ok_ = co_await first->unlock(); CHECK(ok_); }                                                 \
            { const bool came_ = co_await waiting.wait(); REQUIRE(came_); } auto& second = waiting.get();              \
            REQUIRE(second);                                                                                           \
            REQUIRE_FALSE(rec.of<dl::wake_event>().empty());                                                           \
            CHECK(rec.of<dl::wake_event>().front().notified);                                                          \
            { const auto ok_ = co_await second->unlock(); CHECK(ok_); }                                                \
        });                                                                                                            \
    }                                                                                                                  \
                                                                                                                       \
    DISTLOCK_CONFORMANCE_CASE(cancel_leaves_nothing, "conformance: a cancelled or timed-out waiter leaves nothing behind", TAG, all) \
    {                                                                                                                  \
        using namespace test::conformance;                                                                             \
        TestType f;                                                                                                    \
        test::run(f.io, [&]() -> asio::awaitable<void> {                                                               \
            mutex_of<TestType> a{f.client(0), "conf:cancel", {.ttl = 10s}, dl::observe::callback{}};                   \
            mutex_of<TestType> b{f.client(1), "conf:cancel", {.ttl = 10s}, dl::observe::callback{}, quick()};          \
            auto first = co_await a.lock();                                                                            \
            REQUIRE(first);                                                                                            \
            asio::cancellation_signal cancel;                                                                          \
            std::optional<dl::result<dl::lease>> got;                                                                  \
            asio::co_spawn(co_await asio::this_coro::executor, b.lock(),                                               \
                           asio::bind_cancellation_slot(cancel.slot(), [&](std::exception_ptr, dl::result<dl::lease> r) { \
                               got.emplace(std::move(r));                                                              \
                           }));                                                                                        \
            co_await test::settle(50ms);                                                                               \
            cancel.emit(asio::cancellation_type::all);                                                                 \
            (void)co_await test::eventually("got.has_value()", [&] { return got.has_value(); }, long_enough());        \
            REQUIRE_FALSE(*got);                                                                                       \
            CHECK(got->error() == dl::condition::cancelled);                                                           \
            auto timed = co_await b.lock_until(dl::clock::now() + 100ms);                                              \
            REQUIRE_FALSE(timed);                                                                                      \
            CHECK(timed.error() == dl::condition::timeout);                                                            \
            { const auto ok_ = co_await first->unlock(); CHECK(ok_); }                                                 \
            /* A waiter gives up what it took (a place in a fair queue) as its store's */                              \
            /* background work after lock() returned: once that has run, nothing of the */                             \
            /* waiters is left, and the next lock is granted at once. */                                               \
            if constexpr (requires { f.client(1).lifetime()->background_work(); })                                     \
                (void)co_await test::eventually("the waiter's give-up ran", [&] {                                      \
                    return f.client(1).lifetime()->background_work() == 0;                                             \
                }, long_enough());                                                                                     \
            (void)co_await test::eventually("!f.held(\"conf:cancel\")", [&] { return !f.held("conf:cancel"); }, long_enough()); \
            auto next = co_await a.try_lock();                                                                         \
            REQUIRE(next);                                                                                             \
            { const auto ok_ = co_await next->unlock(); CHECK(ok_); }                                                  \
        });                                                                                                            \
    }                                                                                                                  \
                                                                                                                       \
    DISTLOCK_CONFORMANCE_CASE(lost_reply, "conformance: a request whose reply was lost is cleaned up by owner", TAG, losing_replies) \
    {                                                                                                                  \
        using namespace test::conformance;                                                                             \
        TestType f;                                                                                                    \
        test::run(f.io, [&]() -> asio::awaitable<void> {                                                               \
            single_try_mutex_of<TestType> a{f.client(0), "conf:lost-reply", {.ttl = 10s},                              \
                                            dl::observe::callback{}};                                                  \
            test::conformance::lose_next_reply(f, 0, "conf:lost-reply");                                              \
            auto r = co_await a.lock();                                                                                \
            REQUIRE_FALSE(r);                                                                                          \
            /* One store: the caller cannot know. A quorum gave back on every node */                                  \
            /* before it answered: no majority was reached. */                                                         \
            if constexpr (TestType::quorum)                                                                            \
                CHECK(r.error() == dl::condition::not_applied);                                                        \
            else                                                                                                       \
                CHECK(r.error() == dl::condition::maybe_applied);                                                      \
            (void)co_await test::eventually("!f.held(\"conf:lost-reply\")", [&] { return !f.held("conf:lost-reply"); }, long_enough()); \
            mutex_of<TestType> b{f.client(1), "conf:lost-reply", {.ttl = 10s}, dl::observe::callback{}};               \
            auto next = co_await b.try_lock();                                                                         \
            REQUIRE(next);                                                                                             \
            { const auto ok_ = co_await next->unlock(); CHECK(ok_); }                                                  \
        });                                                                                                            \
    }                                                                                                                  \
                                                                                                                       \
    DISTLOCK_CONFORMANCE_CASE(refused, "conformance: a refused request is retried and not applied twice", TAG, refusing) \
    {                                                                                                                  \
        using namespace test::conformance;                                                                             \
        TestType f;                                                                                                    \
        test::run(f.io, [&]() -> asio::awaitable<void> {                                                               \
            mutex_of<TestType> a{f.client(0), "conf:refused", {.ttl = 10s}, dl::observe::callback{}, quick()};         \
            f.refuse_next(0);                                                                                          \
            auto r = co_await a.lock();                                                                                \
            REQUIRE(r);                                                                                                \
            { const auto ok_ = co_await r->unlock(); CHECK(ok_); }                                                     \
            CHECK_FALSE(f.held("conf:refused"));                                                                       \
        });                                                                                                            \
    }                                                                                                                  \
                                                                                                                       \
    DISTLOCK_CONFORMANCE_CASE(bad_input, "conformance: bad input is rejected before any I/O; ids are binary-safe", TAG, all) \
    {                                                                                                                  \
        using namespace test::conformance;                                                                             \
        TestType f;                                                                                                    \
        test::run(f.io, [&]() -> asio::awaitable<void> {                                                               \
            const std::string binary{"conf:\0bin\n {x}\r\xff", 17};                                                    \
            for (const auto& id : {std::string{}, std::string(dl::max_resource_size + 1, 'x')}) {                      \
                mutex_of<TestType> m{f.client(0), id, {.ttl = 10s}, dl::observe::callback{}};                          \
                auto r = co_await m.lock();                                                                            \
                REQUIRE_FALSE(r);                                                                                      \
                CHECK(r.error() == dl::condition::invalid_argument);                                                   \
            }                                                                                                          \
            for (const auto ttl : {dl::duration::zero(), dl::duration{-1}, dl::duration::max()}) {                     \
                mutex_of<TestType> m{f.client(0), binary, {.ttl = ttl}, dl::observe::callback{}};                      \
                auto r = co_await m.lock();                                                                            \
                REQUIRE_FALSE(r);                                                                                      \
                CHECK(r.error() == dl::condition::invalid_argument);                                                   \
            }                                                                                                          \
            mutex_of<TestType> m{f.client(0), binary, {.ttl = 10s}, dl::observe::callback{}};                          \
            auto past = co_await m.lock_until(dl::clock::now() - 1s);                                                  \
            REQUIRE_FALSE(past);                                                                                       \
            CHECK(past.error() == dl::condition::invalid_argument);                                                    \
            CHECK_FALSE(f.held(binary));                                                                               \
            auto l = co_await m.lock();                                                                                \
            REQUIRE(l);                                                                                                \
            CHECK(f.held(binary));                                                                                     \
            { const auto ok_ = co_await l->unlock(); CHECK(ok_); }                                                     \
            (void)co_await test::eventually("!f.held(binary)", [&] { return !f.held(binary); }, long_enough());        \
        });                                                                                                            \
    }                                                                                                                  \
                                                                                                                       \
    DISTLOCK_CONFORMANCE_CASE(read, "conformance: read() reports the holder without taking the lock", TAG, inspectable) \
    {                                                                                                                  \
        using namespace test::conformance;                                                                             \
        TestType f;                                                                                                    \
        test::run(f.io, [&]() -> asio::awaitable<void> {                                                               \
            auto& store = f.client(1);                                                                                 \
            auto before = co_await store.read("conf:read");                                                            \
            REQUIRE(before);                                                                                           \
            CHECK_FALSE(before->held);                                                                                 \
            mutex_of<TestType> a{f.client(0), "conf:read", {.ttl = 10s}, dl::observe::callback{}};                     \
            auto l = co_await a.lock();                                                                                \
            REQUIRE(l);                                                                                                \
            auto during = co_await store.read("conf:read");                                                            \
            REQUIRE(during);                                                                                           \
            CHECK(during->held);                                                                                       \
            CHECK(during->fence == l->fence());                                                                        \
            CHECK(during->owner == l->owner().to_hex().substr(0, 8));                                                  \
            /* Time left where the store keeps a TTL, else the record's version. */                                    \
            REQUIRE((during->remaining || during->version));                                                           \
            if (during->remaining)                                                                                     \
                CHECK(*during->remaining > dl::duration::zero());                                                      \
            CHECK(f.held("conf:read"));                                                                                \
            { const auto ok_ = co_await l->unlock(); CHECK(ok_); }                                                     \
            auto after = co_await store.read("conf:read");                                                             \
            REQUIRE(after);                                                                                            \
            CHECK_FALSE(after->held);                                                                                  \
        });                                                                                                            \
    }                                                                                                                  \
                                                                                                                       \
    DISTLOCK_CONFORMANCE_CASE(close_finishes_release, "conformance: close() finishes the release of a dropped lease", TAG, closing) \
    {                                                                                                                  \
        using namespace test::conformance;                                                                             \
        TestType f;                                                                                                    \
        test::run(f.io, [&]() -> asio::awaitable<void> {                                                               \
            {                                                                                                          \
                mutex_of<TestType> a{f.client(0), "conf:close", {.ttl = 10s}, dl::observe::callback{}};                \
                auto l = co_await a.lock();                                                                            \
                REQUIRE(l);                                                                                            \
            } /* dropped: released in the background */                                                                \
            co_await f.close(0);                                                                                       \
            CHECK_FALSE(f.held("conf:close"));                                                                         \
        });                                                                                                            \
    }                                                                                                                  \
                                                                                                                       \
    DISTLOCK_CONFORMANCE_CASE(queue_order, "conformance: waiters of separate sessions are served in the order they queued; each release wakes one", TAG, queueing) \
    {                                                                                                                  \
        using namespace test::conformance;                                                                             \
        using backend = typename TestType::backend;                                                                    \
        using mutex = mutex_with<TestType, dl::retry::exponential_backoff>;                                            \
        TestType f;                                                                                                    \
        constexpr std::size_t waiters = 5;                                                                             \
        std::vector<std::unique_ptr<backend>> stores;                                                                  \
        for (std::size_t i = 0; i <= waiters; ++i)                                                                     \
            stores.push_back(f.make_client());                                                                         \
        std::vector<std::size_t> served;                                                                               \
        test::run(f.io, [&]() -> asio::awaitable<void> {                                                               \
            mutex holder_m{*stores[0], "conf:queue"};                                                                  \
            auto holder = co_await holder_m.lock();                                                                    \
            REQUIRE(holder);                                                                                           \
            std::vector<std::unique_ptr<mutex>> mutexes;                                                               \
            std::vector<test::pending<dl::result<dl::lease>>> pending;                                                 \
            for (std::size_t i = 1; i <= waiters; ++i) {                                                               \
                mutexes.push_back(std::make_unique<mutex>(*stores[i], "conf:queue", dl::lock_options{},                \
                                                          dl::retry::exponential_backoff{.deadline = 30s}));           \
                pending.push_back(test::start(co_await asio::this_coro::executor, mutexes.back()->lock()));            \
                /* Queued one after the other: waiter i is in the queue before i + 1 starts. */                        \
                (void)co_await test::eventually("queued", [&] { return f.waiters("conf:queue") == i + 1; }, long_enough()); \
            }                                                                                                          \
            { const auto ok_ = co_await holder->unlock(); CHECK(ok_); }                                                \
            dl::fence_token last = holder->fence();                                                                    \
            for (std::size_t turn = 0; turn < waiters; ++turn) {                                                       \
                /* Exactly one waiter has the lock; the others still wait. */                                          \
                std::optional<std::size_t> got;                                                                        \
                (void)co_await test::eventually("one granted", [&] {                                                   \
                    for (std::size_t i = 0; i < waiters; ++i)                                                          \
                        if (pending[i].ready() && std::find(served.begin(), served.end(), i) == served.end())          \
                            got = i;                                                                                   \
                    return got.has_value();                                                                            \
                }, long_enough());                                                                                     \
                REQUIRE(got);                                                                                          \
                served.push_back(*got);                                                                                \
                auto& lease = pending[*got].get();                                                                     \
                REQUIRE(lease);                                                                                        \
                CHECK(lease->fence() > last);                                                                          \
                last = lease->fence();                                                                                 \
                std::size_t done = 0;                                                                                  \
                for (auto& p : pending)                                                                                \
                    done += p.ready();                                                                                 \
                CHECK(done == turn + 1);                                                                               \
                { const auto ok_ = co_await lease->unlock(); CHECK(ok_); }                                             \
            }                                                                                                          \
            for (auto& s : stores)                                                                                     \
                co_await s->close();                                                                                   \
        });                                                                                                            \
        std::vector<std::size_t> in_order(waiters);                                                                    \
        for (std::size_t i = 0; i < waiters; ++i)                                                                      \
            in_order[i] = i;                                                                                           \
        CHECK(served == in_order);                                                                                     \
    }                                                                                                                  \
                                                                                                                       \
    DISTLOCK_CONFORMANCE_CASE(forgotten, "conformance: a forgotten resource's next fence is still larger, released or expired", TAG, forgetting) \
    {                                                                                                                  \
        using namespace test::conformance;                                                                             \
        TestType f;                                                                                                    \
        test::run(f.io, [&]() -> asio::awaitable<void> {                                                               \
            single_try_mutex_of<TestType> m{f.client(0), "conf:forgotten", {.ttl = 300ms}, dl::observe::callback{}};   \
            auto released = co_await m.lock();                                                                         \
            REQUIRE(released);                                                                                         \
            const auto first = released->fence();                                                                      \
            { const auto ok_ = co_await released->unlock(); CHECK(ok_); }                                              \
            (void)co_await test::eventually("forgotten after release", [&] { return !f.remembers("conf:forgotten"); }, \
                                            long_enough());                                                            \
            CHECK_FALSE(f.remembers("conf:forgotten"));                                                                \
            auto expired = co_await m.lock();                                                                          \
            REQUIRE(expired);                                                                                          \
            CHECK(expired->fence() > first);                                                                           \
            const auto second = expired->fence();                                                                      \
            /* Not released: its TTL runs out, then the store forgets it. */                                           \
            (void)co_await test::eventually("forgotten after expiry", [&] { return !f.remembers("conf:forgotten"); },  \
                                            long_enough());                                                            \
            CHECK_FALSE(f.remembers("conf:forgotten"));                                                                \
            mutex_of<TestType> other{f.client(1), "conf:forgotten", {.ttl = 10s}, dl::observe::callback{}};            \
            auto third = co_await other.lock();                                                                        \
            REQUIRE(third);                                                                                            \
            CHECK(third->fence() > second);                                                                            \
            { const auto ok_ = co_await third->unlock(); CHECK(ok_); }                                                 \
        });                                                                                                            \
    }                                                                                                                  \
                                                                                                                       \
    DISTLOCK_CONFORMANCE_CASE(killed_holder, "conformance: a SIGKILLed holder's lock is freed with its session; the next fence is larger", TAG, killing) \
    {                                                                                                                  \
        using namespace test::conformance;                                                                             \
        TestType f;                                                                                                    \
        auto holder = f.holder_process("conf:killed");                                                                 \
        const auto line = holder->read_line(std::chrono::seconds{20});                                                 \
        REQUIRE(line);                                                                                                 \
        REQUIRE(line->starts_with("locked "));                                                                         \
        const dl::fence_token dead = std::stoull(line->substr(7));                                                     \
        holder->kill(SIGKILL);                                                                                         \
        REQUIRE(holder->wait());                                                                                       \
        CHECK(f.held("conf:killed")); /* until its session ends on the server */                                       \
        test::run(f.io, [&]() -> asio::awaitable<void> {                                                               \
            mutex_with<TestType, dl::retry::exponential_backoff> m{                                                    \
                f.client(0), "conf:killed", {}, dl::retry::exponential_backoff{.deadline = 20s}};                      \
            auto taken = co_await m.lock();                                                                            \
            REQUIRE(taken);                                                                                            \
            CHECK(taken->fence() > dead);                                                                              \
            { const auto ok_ = co_await taken->unlock(); CHECK(ok_); }                                                 \
        });                                                                                                            \
    }
