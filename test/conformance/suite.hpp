// The store conformance suite: each behaviour of the store contract (store.hpp,
// claim.hpp, docs/guarantees.md) written once, as a function template over a fixture,
// and run on every store through its fixtures.
//
// A fixture F provides:
//   static constexpr const char* name;        names its test cases: "<behaviour> - <name>"
//   using backend = ...;                      what the mutex locks on
//   static constexpr bool notifies;           waiters are woken by the store (release
//                                             notification or predecessor watch)
//   static constexpr bool quorum;             several nodes (a release succeeds if any held it)
//   asio::io_context io;
//   backend& client(std::size_t i);           i < 3: independent clients of one store
//   bool held(std::string_view resource);     the store holds a lock on it now
//   void end_lock(const dl::lease& l);        the store drops l's lock (as if its TTL
//                                             or session ran out); l does not know yet
//   static dl::duration longest_validity(const dl::lock_options&);
//                                             the longest validity a lease may report
// and, where the store can, the hooks below. A behaviour that needs a hook runs on
// exactly the fixtures that have it (a test without it would assert nothing); the
// traits further down say which.
//   using acquisition = ...;                  the acquisition of its mutexes (default:
//                                             the backend's)
//   void lose_next_reply(std::size_t client); the next request is applied, its reply
//                                             lost (or lose_next_reply(client, resource),
//                                             for a store whose servers split resources
//                                             among them: the one holding `resource`)
//   void refuse_next(std::size_t client);     the next request is not applied
//   awaitable<void> close(std::size_t client);
//   void hold_replies(bool on);               replies to the fixture's clients are held
//                                             back (requests still reach the server)
//                                             until called with false
//   std::unique_ptr<backend> make_client();   more clients (sessions), and
//   std::size_t waiters(std::string_view);    the holder and waiters of a fair queue
//   bool remembers(std::string_view);         the store keeps anything for the resource
//                                             (a store that forgets ended locks)
//   static constexpr bool counts_fences;      a resource's fences are 1, 2, 3...
//   static constexpr bool keeps_fence;        read() of a free resource says its last fence
//   awaitable<void> end_session(std::size_t client);
//                                             the client's session ends on the server (its
//                                             entries go), and
//   static constexpr dl::duration session_end_within;  how long that takes at most
//   void stop_server(); void start_server();  the server goes down, and comes back with
//                                             what it persists
//   std::unique_ptr<test::child> holder_process(const std::string& resource,
//                                               const std::string& mode = "exclusive");
//                                             a process that takes the lock (in mode:
//                                             see hold_until_lost()), prints "locked
//                                             FENCE" and holds it until killed, and optionally
//   static constexpr after_kill killed_holder_lock;  what becomes of its lock
//   std::unique_ptr<test::child> counter_process(dir, rounds, processes);
//   long counter_value(dir);                  processes counting under the lock with
//                                             fenced writes (count_under_lock()), and
//                                             optionally counter_processes, counter_rounds,
//                                             counter_handoffs_percent (static constexpr int)
//   using settings = ...;                     the store's settings, with
//   static settings settings_at(std::uint16_t port);   valid ones for a server on port
//   static std::vector<bad_setting<settings>> bad_settings();  changes it must refuse
//   static constexpr bool settings_refused_at_construction;  its constructor throws
//
// A fixture file registers its fixtures once: register_suite<F1, F2, ...>("[tag]").
// Real-time stores run on the steady clock: the tests wait for conditions with
// eventually(), never assert on wall-clock durations.
#pragma once

#include "eventually.hpp"
#include "pending.hpp"
#include "process.hpp"
#include "support.hpp"

#include <distlock/basic_distributed_semaphore.hpp>
#include <distlock/basic_distributed_shared_mutex.hpp>

#include <asio/bind_cancellation_slot.hpp>
#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/ip/tcp.hpp>

#include <algorithm>
#include <chrono>
#include <concepts>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <system_error>
#include <vector>

namespace test::conformance {

// -- What the behaviours share ---------------------------------------------------------

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

/// A waiter that waits long: a backoff capped at half a second, for a minute.
template <class F>
using waiting_mutex_of = mutex_with<F, dl::observe::callback, dl::retry::exponential_backoff>;

inline dl::retry::fixed patient()
{
    // A long delay: only a notification wakes a waiter in time.
    return {.delay = std::chrono::seconds{20}, .deadline = std::chrono::seconds{60}};
}

inline dl::retry::fixed quick()
{
    return {.delay = std::chrono::milliseconds{10}, .deadline = std::chrono::seconds{10}};
}

inline dl::retry::exponential_backoff for_a_minute()
{
    return {.initial = std::chrono::milliseconds{10}, .max = std::chrono::milliseconds{500},
            .deadline = std::chrono::seconds{60}};
}

/// The next reply to `client` about `resource` is lost.
template <class F>
void lose_next_reply(F& f, std::size_t client, std::string_view resource)
{
    if constexpr (requires { f.lose_next_reply(client, resource); })
        f.lose_next_reply(client, resource);
    else
        f.lose_next_reply(client);
}

/// What becomes of a SIGKILLed holder's lock (killed_holder): by default the store
/// keeps it until the holder's session ends on the server.
struct after_kill {
    /// The lock outlives the process at least this long (its TTL, or a lease the next
    /// holder must watch whole): an attempt for that long is refused throughout.
    dl::duration held_for{};
    /// The server frees it as soon as the process's connection closes.
    bool freed_at_once = false;
};

template <class F>
constexpr after_kill killed_holder_lock()
{
    if constexpr (requires { F::killed_holder_lock; })
        return F::killed_holder_lock;
    else
        return {};
}

/// A change to valid settings that the store must refuse (checks_settings).
template <class Settings>
struct bad_setting {
    const char* what;
    std::function<void(Settings&)> change;
};

/// The fixture's counter_processes, counter_rounds and counter_handoffs_percent
/// (processes_count), or the defaults.
template <class F>
constexpr int counter_processes()
{
    if constexpr (requires { F::counter_processes; })
        return F::counter_processes;
    else
        return 4;
}
template <class F>
constexpr int counter_rounds()
{
    if constexpr (requires { F::counter_rounds; })
        return F::counter_rounds;
    else
        return 15;
}
template <class F>
constexpr int counter_handoffs_percent()
{
    if constexpr (requires { F::counter_handoffs_percent; })
        return F::counter_handoffs_percent;
    else
        return 0;
}

// -- What a fixture can do: the traits that pick a behaviour's fixtures -------------------

template <class F>
struct any_fixture : std::true_type {};
template <class F>
struct notifies : std::bool_constant<F::notifies> {};
template <class F>
struct loses_replies : std::bool_constant<requires(F& f) { f.lose_next_reply(0); } ||
                                          requires(F& f) { f.lose_next_reply(0, std::string_view{}); }> {};
template <class F>
struct refuses : std::bool_constant<requires(F& f) { f.refuse_next(0); }> {};
template <class F>
struct closes : std::bool_constant<requires(F& f) { f.close(0); }> {};
/// The fixture can hold replies back, and close a client.
template <class F>
struct closes_in_flight : std::bool_constant<closes<F>::value && requires(F& f) { f.hold_replies(true); }> {};
template <class F>
struct inspectable : std::bool_constant<dl::inspectable_store<typename F::backend>> {};
/// The store lists the locks it holds (enumerable_store).
template <class F>
struct lists : std::bool_constant<dl::enumerable_store<typename F::backend>> {};
/// The store takes a lock back by its fence (revocable_store).
template <class F>
struct revokes : std::bool_constant<dl::revocable_store<typename F::backend>> {};
/// The store keeps a fair queue, and the fixture can make more clients (sessions) and
/// count a resource's holder and waiters.
template <class F>
struct queues : std::bool_constant<requires(F& f) {
    { f.make_client() } -> std::same_as<std::unique_ptr<typename F::backend>>;
    { f.waiters(std::string_view{}) } -> std::convertible_to<std::size_t>;
}> {};
/// The store forgets a resource some time after its lock ended, and the fixture can
/// tell whether it still remembers it.
template <class F>
struct forgets : std::bool_constant<requires(F& f) {
    { f.remembers(std::string_view{}) } -> std::convertible_to<bool>;
}> {};
/// Fences are a per-resource count: the first grant's is 1, each next one more.
template <class F>
struct counts_fences : std::bool_constant<requires { requires F::counts_fences; }> {};
/// read() of a free resource reports the fence of its last grant.
template <class F>
struct keeps_fence : std::bool_constant<inspectable<F>::value && requires { requires F::keeps_fence; }> {};
/// The fixture can start a holder in a process of its own (a test::child) and kill it.
template <class F>
struct kills_holders : std::bool_constant<requires(F& f) {
    { f.holder_process(std::string{}) } -> std::same_as<std::unique_ptr<test::child>>;
}> {};
/// The fixture can start processes counting under the lock with fenced writes.
template <class F>
struct counts_in_processes : std::bool_constant<requires(F& f, const std::filesystem::path& dir) {
    { f.counter_process(dir, 1, 1) } -> std::same_as<std::unique_ptr<test::child>>;
    { f.counter_value(dir) } -> std::convertible_to<long>;
}> {};
/// The store's sessions can be ended behind a client's back (a queue store's).
template <class F>
struct ends_sessions : std::bool_constant<queues<F>::value && requires(F& f) {
    { f.end_session(0) } -> std::same_as<asio::awaitable<void>>;
    { F::session_end_within } -> std::convertible_to<dl::duration>;
}> {};
/// The fixture can stop its server and start it again.
template <class F>
struct restarts : std::bool_constant<requires(F& f) {
    f.stop_server();
    f.start_server();
}> {};
/// The fixture names settings its store must refuse, and valid ones to change.
template <class F>
struct checks_settings : std::bool_constant<requires(std::uint16_t port) {
    typename F::settings;
    { F::settings_at(port) } -> std::same_as<typename F::settings>;
    { F::bad_settings() } -> std::same_as<std::vector<bad_setting<typename F::settings>>>;
    { F::settings_refused_at_construction } -> std::convertible_to<bool>;
}> {};

// -- Shared steps ---------------------------------------------------------------------

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

/// Waits until the store's background work for `client` has run (a waiter gives up
/// its place in a fair queue after its lock() returned), where the store counts it.
template <class Backend>
asio::awaitable<void> background_done(Backend& client)
{
    if constexpr (requires { client.lifetime()->background_work(); })
        (void)co_await test::eventually("the client's background work ran",
                                        [&] { return client.lifetime()->background_work() == 0; }, long_enough());
}

/// Starts `m.lock()` with a cancellation slot of the caller's: the result lands in `out`.
template <class Mutex>
void start_cancellable(asio::any_io_executor ex, Mutex& m, asio::cancellation_signal& cancel,
                       std::optional<dl::result<dl::lease>>& out)
{
    asio::co_spawn(std::move(ex), m.lock(),
                   asio::bind_cancellation_slot(cancel.slot(), [&out](std::exception_ptr, dl::result<dl::lease> r) {
                       out.emplace(std::move(r));
                   }));
}

// -- The behaviours ----------------------------------------------------------------------

/// One holder at a time across the clients; each grant's fence is above the last.
template <class F>
void exclusion()
{
    F f;
    test::run(f.io, [&]() -> asio::awaitable<void> {
        dl::fence_token last = 0;
        for (std::size_t round = 0; round < 6; ++round) {
            mutex_of<F> a{f.client(round % 3), "conf:exclusion", {.ttl = 10s}, dl::observe::callback{}};
            mutex_of<F> b{f.client((round + 1) % 3), "conf:exclusion", {.ttl = 10s}, dl::observe::callback{}};
            auto la = co_await a.lock();
            REQUIRE(la);
            CHECK(la->fence() > last);
            last = la->fence();
            CHECK(f.held("conf:exclusion"));
            auto lb = co_await b.try_lock();
            REQUIRE_FALSE(lb);
            CHECK(lb.error() == dl::condition::contended);
            auto r = co_await la->unlock();
            CHECK(r);
        }
        (void)co_await test::eventually("!f.held(\"conf:exclusion\")", [&] { return !f.held("conf:exclusion"); },
                                        long_enough());
    });
}

/// A lease whose lock the store dropped cannot release the next holder's lock.
template <class F>
void stale_release()
{
    F f;
    test::run(f.io, [&]() -> asio::awaitable<void> {
        mutex_of<F> a{f.client(0), "conf:owner", {.ttl = 10s}, dl::observe::callback{}};
        mutex_of<F> b{f.client(1), "conf:owner", {.ttl = 10s}, dl::observe::callback{}, quick()};
        auto first = co_await a.lock();
        REQUIRE(first);
        f.end_lock(*first);
        auto second = co_await b.lock();
        REQUIRE(second);
        CHECK(second->fence() > first->fence());
        auto stale = co_await first->unlock();
        // On one store it was not the owner any more; on a quorum a node that granted
        // late may still have held it for the old owner.
        if constexpr (!F::quorum)
            CHECK_FALSE(stale);
        CHECK(second->valid());
        CHECK(f.held("conf:owner"));
        auto third = co_await a.try_lock();
        CHECK_FALSE(third);
        { const auto ok_ = co_await second->unlock(); CHECK(ok_); }
    });
}

/// A set's unlock gives back every lock of the set and none of another holder's.
template <class F>
void set_release()
{
    using set_of = dl::basic_multi_lock<typename F::backend, typename acquisition_of<F>::type, dl::observe::callback,
                                        dl::retry::fixed>;
    F f;
    test::run(f.io, [&]() -> asio::awaitable<void> {
        const auto ids = dl::resources("conf:set-c", "conf:set-a", "conf:set-b");
        set_of set{mutex_of<F>{f.client(0), "conf:set", {.ttl = 10s}, dl::observe::callback{}}, ids};
        auto first = co_await set.lock();
        REQUIRE(first);
        REQUIRE(first->resources() == dl::resources("conf:set-a", "conf:set-b", "conf:set-c"));
        for (const auto& id : ids)
            CHECK(f.held(id));
        // The store drops b's lock and another client takes it.
        f.end_lock(first->leases()[1]);
        mutex_of<F> other{f.client(1), "conf:set-b", {.ttl = 10s}, dl::observe::callback{}, quick()};
        auto second = co_await other.lock();
        REQUIRE(second);
        const auto fences = first->fences();
        auto stale = co_await first->unlock();
        if constexpr (!F::quorum) {
            REQUIRE_FALSE(stale);
            // The lease was lost, or (session-bound) its session with it.
            CHECK((stale.error() == dl::condition::lease_lost || stale.error() == dl::condition::session_lost));
        }
        CHECK(first->size() == 0);
        CHECK_FALSE(f.held("conf:set-a"));
        CHECK_FALSE(f.held("conf:set-c"));
        CHECK(f.held("conf:set-b"));
        CHECK(second->valid());
        { const auto ok_ = co_await second->unlock(); CHECK(ok_); }
        // Taken again whole, with larger fences, and given back whole.
        auto again = co_await set.lock();
        REQUIRE(again);
        for (std::size_t i = 0; i < fences.size(); ++i)
            CHECK(again->fences()[i] > fences[i]);
        { const auto ok_ = co_await again->unlock(); CHECK(ok_); }
        for (const auto& id : ids)
            CHECK_FALSE(f.held(id));
        auto twice = co_await again->unlock();
        CHECK(twice);
    });
}

/// A lease's validity counts from before its request, minus the drift margin.
template <class F>
void validity()
{
    F f;
    test::run(f.io, [&]() -> asio::awaitable<void> {
        const dl::lock_options options{.ttl = 10s};
        mutex_of<F> a{f.client(0), "conf:validity", options, dl::observe::callback{}};
        const auto before = dl::clock::now();
        auto l = co_await a.lock();
        REQUIRE(l);
        CHECK(l->valid());
        const auto after = dl::clock::now();
        CHECK(l->valid_until() > before);
        CHECK(l->valid_until() <= after + F::longest_validity(options));
        { const auto ok_ = co_await l->unlock(); CHECK(ok_); }
    });
}

/// A waiter with a retry delay longer than the test is woken by the release.
template <class F>
void woken_by_release()
{
    F f;
    test::recorder rec;
    test::run(f.io, [&]() -> asio::awaitable<void> {
        mutex_of<F> a{f.client(0), "conf:notify", {.ttl = 10s}, dl::observe::callback{}};
        mutex_of<F> b{f.client(1), "conf:notify", {.ttl = 10s}, rec.observer(), patient()};
        auto first = co_await a.lock();
        REQUIRE(first);
        auto waiting = test::start(co_await asio::this_coro::executor, b.lock());
        (void)co_await test::eventually("b waits", [&] { return !rec.of<dl::wait_event>().empty(); }, long_enough());
        { const auto ok_ = co_await first->unlock(); CHECK(ok_); }
        { const bool came_ = co_await waiting.wait(); REQUIRE(came_); }
        auto& second = waiting.get();
        REQUIRE(second);
        REQUIRE_FALSE(rec.of<dl::wake_event>().empty());
        CHECK(rec.of<dl::wake_event>().front().notified);
        { const auto ok_ = co_await second->unlock(); CHECK(ok_); }
    });
}

/// A waiter cancelled, and one that timed out, leave nothing: the next lock is
/// granted at once.
template <class F>
void cancel_leaves_nothing()
{
    F f;
    test::run(f.io, [&]() -> asio::awaitable<void> {
        mutex_of<F> a{f.client(0), "conf:cancel", {.ttl = 10s}, dl::observe::callback{}};
        mutex_of<F> b{f.client(1), "conf:cancel", {.ttl = 10s}, dl::observe::callback{}, quick()};
        auto first = co_await a.lock();
        REQUIRE(first);
        asio::cancellation_signal cancel;
        std::optional<dl::result<dl::lease>> got;
        start_cancellable(co_await asio::this_coro::executor, b, cancel, got);
        co_await test::settle(50ms);
        cancel.emit(asio::cancellation_type::all);
        (void)co_await test::eventually("got.has_value()", [&] { return got.has_value(); }, long_enough());
        REQUIRE_FALSE(*got);
        CHECK(got->error() == dl::condition::cancelled);
        auto timed = co_await b.lock_until(dl::clock::now() + 100ms);
        REQUIRE_FALSE(timed);
        CHECK(timed.error() == dl::condition::timeout);
        { const auto ok_ = co_await first->unlock(); CHECK(ok_); }
        // A waiter gives up what it took (a place in a fair queue) as its store's
        // background work after lock() returned: once that has run, nothing of the
        // waiters is left, and the next lock is granted at once.
        co_await background_done(f.client(1));
        (void)co_await test::eventually("!f.held(\"conf:cancel\")", [&] { return !f.held("conf:cancel"); },
                                        long_enough());
        auto next = co_await a.try_lock();
        REQUIRE(next);
        { const auto ok_ = co_await next->unlock(); CHECK(ok_); }
    });
}

/// Many try_lock() calls at once against a held lock: each is refused, and the store
/// holds exactly the holder's lock afterwards (no entry, no other owner), then nothing.
template <class F>
void try_locks_leave_nothing()
{
    constexpr std::size_t tries = 16;
    F f;
    test::run(f.io, [&]() -> asio::awaitable<void> {
        mutex_of<F> holder_m{f.client(0), "conf:tries", {.ttl = 10s}, dl::observe::callback{}};
        auto holder = co_await holder_m.lock();
        REQUIRE(holder);
        std::vector<std::unique_ptr<mutex_of<F>>> mutexes;
        std::vector<test::pending<dl::result<dl::lease>>> tried;
        for (std::size_t i = 0; i < tries; ++i) {
            mutexes.push_back(std::make_unique<mutex_of<F>>(f.client(i % 3), "conf:tries", dl::lock_options{.ttl = 10s},
                                                            dl::observe::callback{}));
            tried.push_back(test::start(co_await asio::this_coro::executor, mutexes.back()->try_lock()));
        }
        for (auto& t : tried) {
            { const bool came_ = co_await t.wait(); REQUIRE(came_); }
            REQUIRE_FALSE(t.get());
            CHECK(t.get().error() == dl::condition::contended);
        }
        // A refused try gives back what it took (an entry in a fair queue) before the
        // refusal returns: the caller's next request cannot find it.
        if constexpr (queues<F>::value)
            CHECK(f.waiters("conf:tries") == 1);
        for (std::size_t i = 0; i < 3; ++i)
            co_await background_done(f.client(i));
        CHECK(f.held("conf:tries"));
        if constexpr (queues<F>::value)
            (void)co_await test::eventually("the holder alone is queued", [&] { return f.waiters("conf:tries") == 1; },
                                            long_enough());
        if constexpr (inspectable<F>::value) {
            auto info = co_await f.client(1).read("conf:tries");
            REQUIRE(info);
            CHECK(info->held);
            CHECK(info->fence == holder->fence());
            CHECK(info->owner == holder->owner().to_hex().substr(0, 8));
        }
        CHECK(holder->valid());
        { const auto ok_ = co_await holder->unlock(); CHECK(ok_); }
        (void)co_await test::eventually("nothing held", [&] { return !f.held("conf:tries"); }, long_enough());
        if constexpr (queues<F>::value)
            CHECK(f.waiters("conf:tries") == 0);
        // Granted at once to a client that tried.
        auto next = co_await mutexes[1]->try_lock();
        REQUIRE(next);
        CHECK(next->fence() > holder->fence());
        { const auto ok_ = co_await next->unlock(); CHECK(ok_); }
    });
}

/// Two lock() calls through one store object on one resource: one holds at a time,
/// the other waits for its release, and the fences grow.
template <class F>
void one_store_two_locks()
{
    F f;
    test::recorder rec_a, rec_b;
    test::run(f.io, [&]() -> asio::awaitable<void> {
        auto& store = f.client(0);
        mutex_of<F> a{store, "conf:same-store", {.ttl = 10s}, rec_a.observer(), quick()};
        mutex_of<F> b{store, "conf:same-store", {.ttl = 10s}, rec_b.observer(), quick()};
        dl::fence_token last = 0;
        for (int round = 0; round < 3; ++round) {
            auto& first_m = round % 2 ? b : a;
            auto& second_m = round % 2 ? a : b;
            auto& second_rec = round % 2 ? rec_a : rec_b;
            auto first = co_await first_m.lock();
            REQUIRE(first);
            CHECK(first->fence() > last);
            const auto refused_before = second_rec.of<dl::attempt_event>().size();
            auto second = test::start(co_await asio::this_coro::executor, second_m.lock());
            // The second call asked and was refused: it waits while the first holds.
            (void)co_await test::eventually("the second call was refused", [&] {
                const auto attempts = second_rec.of<dl::attempt_event>();
                return attempts.size() > refused_before && attempts.back().error;
            }, long_enough());
            CHECK_FALSE(second.ready());
            CHECK(first->valid());
            CHECK(f.held("conf:same-store"));
            { const auto ok_ = co_await first->unlock(); CHECK(ok_); }
            { const bool came_ = co_await second.wait(); REQUIRE(came_); }
            auto& granted = second.get();
            REQUIRE(granted);
            CHECK(granted->fence() > first->fence());
            last = granted->fence();
            { const auto ok_ = co_await granted->unlock(); CHECK(ok_); }
        }
        (void)co_await test::eventually("nothing held", [&] { return !f.held("conf:same-store"); }, long_enough());
        if constexpr (queues<F>::value)
            CHECK(f.waiters("conf:same-store") == 0);
    });
}

/// The fence grows across releases and across locks the store ended (expiry), where
/// the store counts fences by one, and read() of a free resource says the last one
/// where the store keeps it.
template <class F>
void fence_grows()
{
    F f;
    test::run(f.io, [&]() -> asio::awaitable<void> {
        mutex_of<F> m{f.client(0), "conf:fence", {.ttl = 10s}, dl::observe::callback{}, quick()};
        dl::fence_token last = 0;
        for (int round = 0; round < 6; ++round) {
            auto l = co_await m.lock();
            REQUIRE(l);
            CHECK(l->fence() > last);
            if constexpr (counts_fences<F>::value)
                CHECK(l->fence() == last + 1);
            last = l->fence();
            if (round % 2 == 0) {
                { const auto ok_ = co_await l->unlock(); CHECK(ok_); }
                if constexpr (keeps_fence<F>::value) {
                    auto info = co_await f.client(1).read("conf:fence");
                    REQUIRE(info);
                    CHECK_FALSE(info->held);
                    CHECK(info->fence == last);
                }
            } else {
                f.end_lock(*l); // as if it had expired; l does not know
            }
        }
    });
}

/// A request whose reply was lost leaves nothing held: its owner cleans it up.
template <class F>
void lost_reply()
{
    F f;
    test::run(f.io, [&]() -> asio::awaitable<void> {
        single_try_mutex_of<F> a{f.client(0), "conf:lost-reply", {.ttl = 10s}, dl::observe::callback{}};
        lose_next_reply(f, 0, "conf:lost-reply");
        auto r = co_await a.lock();
        REQUIRE_FALSE(r);
        // One store: the caller cannot know. A quorum gave back on every node before
        // it answered: no majority was reached.
        if constexpr (F::quorum)
            CHECK(r.error() == dl::condition::not_applied);
        else
            CHECK(r.error() == dl::condition::maybe_applied);
        (void)co_await test::eventually("!f.held(\"conf:lost-reply\")", [&] { return !f.held("conf:lost-reply"); },
                                        long_enough());
        mutex_of<F> b{f.client(1), "conf:lost-reply", {.ttl = 10s}, dl::observe::callback{}};
        auto next = co_await b.try_lock();
        REQUIRE(next);
        { const auto ok_ = co_await next->unlock(); CHECK(ok_); }
    });
}

/// A request the store refused is retried, and applied once.
template <class F>
void refused()
{
    F f;
    test::run(f.io, [&]() -> asio::awaitable<void> {
        mutex_of<F> a{f.client(0), "conf:refused", {.ttl = 10s}, dl::observe::callback{}, quick()};
        f.refuse_next(0);
        auto r = co_await a.lock();
        REQUIRE(r);
        { const auto ok_ = co_await r->unlock(); CHECK(ok_); }
        CHECK_FALSE(f.held("conf:refused"));
    });
}

/// Bad ids, TTLs and deadlines are refused before any I/O; ids are binary-safe.
template <class F>
void bad_input()
{
    F f;
    test::run(f.io, [&]() -> asio::awaitable<void> {
        const std::string binary{"conf:\0bin\n {x}\r\xff", 17};
        for (const auto& id : {std::string{}, std::string(dl::max_resource_size + 1, 'x')}) {
            mutex_of<F> m{f.client(0), id, {.ttl = 10s}, dl::observe::callback{}};
            auto r = co_await m.lock();
            REQUIRE_FALSE(r);
            CHECK(r.error() == dl::condition::invalid_argument);
        }
        for (const auto ttl : {dl::duration::zero(), dl::duration{-1}, dl::duration::max()}) {
            mutex_of<F> m{f.client(0), binary, {.ttl = ttl}, dl::observe::callback{}};
            auto r = co_await m.lock();
            REQUIRE_FALSE(r);
            CHECK(r.error() == dl::condition::invalid_argument);
        }
        mutex_of<F> m{f.client(0), binary, {.ttl = 10s}, dl::observe::callback{}};
        auto past = co_await m.lock_until(dl::clock::now() - 1s);
        REQUIRE_FALSE(past);
        CHECK(past.error() == dl::condition::invalid_argument);
        CHECK_FALSE(f.held(binary));
        auto l = co_await m.lock();
        REQUIRE(l);
        CHECK(f.held(binary));
        { const auto ok_ = co_await l->unlock(); CHECK(ok_); }
        (void)co_await test::eventually("!f.held(binary)", [&] { return !f.held(binary); }, long_enough());
    });
}

/// Settings the store must refuse are refused before any I/O: validate() says so, and
/// a store made from them refuses at construction or at its first lock(), without
/// connecting to anything.
template <class F>
void settings_refused()
{
    asio::io_context io;
    // Counts the connections it accepts: none may come.
    asio::ip::tcp::acceptor listener{io, {asio::ip::make_address("127.0.0.1"), 0}};
    std::size_t accepted = 0;
    const std::function<void()> accept = [&] {
        listener.async_accept([&](std::error_code ec, asio::ip::tcp::socket) {
            if (ec)
                return;
            ++accepted;
            accept();
        });
    };
    accept();
    const auto good = F::settings_at(listener.local_endpoint().port());
    CHECK_FALSE(good.validate());
    for (const auto& bad : F::bad_settings()) {
        INFO(bad.what);
        auto c = good;
        bad.change(c);
        CHECK(c.validate() == dl::errc::invalid_argument);
        std::optional<typename F::backend> store;
        try {
            store.emplace(io, c);
        } catch (const std::system_error& e) {
            CHECK(e.code() == dl::errc::invalid_argument);
        }
        if constexpr (F::settings_refused_at_construction) {
            CHECK_FALSE(store);
        } else {
            REQUIRE(store);
            test::run(io, [&]() -> asio::awaitable<void> {
                dl::basic_distributed_mutex<typename F::backend, dl::retry::none> m{*store, "conf:settings",
                                                                                    {.ttl = 1s}};
                auto l = co_await m.lock();
                REQUIRE_FALSE(l);
                CHECK(l.error() == dl::errc::invalid_argument);
            });
        }
    }
    // Whatever a store would have sent has had time to arrive.
    for (int i = 0; i < 20; ++i)
        io.run_for(std::chrono::milliseconds{5});
    CHECK(accepted == 0);
}

/// read() reports the holder, its fence and owner, without taking the lock.
template <class F>
void read()
{
    F f;
    test::run(f.io, [&]() -> asio::awaitable<void> {
        auto& store = f.client(1);
        auto before = co_await store.read("conf:read");
        REQUIRE(before);
        CHECK_FALSE(before->held);
        mutex_of<F> a{f.client(0), "conf:read", {.ttl = 10s}, dl::observe::callback{}};
        auto l = co_await a.lock();
        REQUIRE(l);
        auto during = co_await store.read("conf:read");
        REQUIRE(during);
        CHECK(during->held);
        CHECK(during->fence == l->fence());
        CHECK(during->owner == l->owner().to_hex().substr(0, 8));
        // Time left where the store keeps a TTL, else the record's version.
        REQUIRE((during->remaining || during->version));
        if (during->remaining)
            CHECK(*during->remaining > dl::duration::zero());
        CHECK(f.held("conf:read"));
        { const auto ok_ = co_await l->unlock(); CHECK(ok_); }
        auto after = co_await store.read("conf:read");
        REQUIRE(after);
        CHECK_FALSE(after->held);
    });
}

/// list() reports exactly the held locks under a prefix, sorted, each with its holder,
/// fence and time left (and its waiters, on a store that queues); binary ids included.
template <class F>
void listing()
{
    F f;
    const std::string prefix = "conf:list/";
    const std::string binary = prefix + std::string{"b\0\x01\xff\n", 5};
    std::unique_ptr<typename F::backend> waiting_client;
    if constexpr (queues<F>::value)
        waiting_client = f.make_client();
    test::run(f.io, [&]() -> asio::awaitable<void> {
        auto& store = f.client(1);
        auto before = co_await store.list(prefix);
        REQUIRE(before);
        CHECK(before->empty());
        mutex_of<F> a{f.client(0), prefix + "a", {.ttl = 10s}, dl::observe::callback{}};
        mutex_of<F> b{f.client(0), binary, {.ttl = 10s}, dl::observe::callback{}};
        mutex_of<F> beside{f.client(0), "conf:list-beside", {.ttl = 10s}, dl::observe::callback{}};
        auto la = co_await a.lock();
        auto lb = co_await b.lock();
        auto lbeside = co_await beside.lock();
        REQUIRE(la);
        REQUIRE(lb);
        REQUIRE(lbeside);
        std::optional<test::pending<dl::result<dl::lease>>> waiter;
        std::optional<mutex_with<F, dl::retry::exponential_backoff>> waiting;
        if constexpr (queues<F>::value) {
            waiting.emplace(*waiting_client, prefix + "a", dl::lock_options{},
                            dl::retry::exponential_backoff{.deadline = 30s});
            waiter.emplace(test::start(co_await asio::this_coro::executor, waiting->lock()));
            (void)co_await test::eventually("queued", [&] { return f.waiters(prefix + "a") == 2; }, long_enough());
        }
        auto during = co_await store.list(prefix);
        REQUIRE(during);
        REQUIRE(during->size() == 2);
        const auto& first = (*during)[0];
        const auto& second = (*during)[1];
        CHECK(first.resource == prefix + "a");
        CHECK(second.resource == binary);
        CHECK(first.lock.held);
        CHECK(first.lock.fence == la->fence());
        CHECK(first.lock.owner == la->owner().to_hex().substr(0, 8));
        CHECK(second.lock.fence == lb->fence());
        REQUIRE((first.lock.remaining || first.lock.version));
        if (first.lock.remaining)
            CHECK(*first.lock.remaining > dl::duration::zero());
        if constexpr (queues<F>::value) {
            REQUIRE(first.waiters);
            CHECK(*first.waiters == 1);
            REQUIRE(second.waiters);
            CHECK(*second.waiters == 0);
        }
        // Every lock, sorted: the prefix's two and the one beside them among them.
        auto all = co_await store.list("");
        REQUIRE(all);
        CHECK(std::is_sorted(all->begin(), all->end(),
                             [](const auto& x, const auto& y) { return x.resource < y.resource; }));
        const auto listed = [&](const std::string& r) {
            return std::count_if(all->begin(), all->end(), [&](const auto& x) { return x.resource == r; });
        };
        CHECK(listed(prefix + "a") == 1);
        CHECK(listed(binary) == 1);
        CHECK(listed("conf:list-beside") == 1);
        { const auto ok_ = co_await la->unlock(); CHECK(ok_); }
        if (waiter) {
            REQUIRE(co_await waiter->wait());
            auto& next = waiter->get();
            REQUIRE(next);
            { const auto ok_ = co_await next->unlock(); CHECK(ok_); }
            co_await waiting_client->close();
        }
        auto after = co_await store.list(prefix);
        REQUIRE(after);
        REQUIRE(after->size() == 1);
        CHECK((*after)[0].resource == binary);
        { const auto ok_ = co_await lb->unlock(); CHECK(ok_); }
        { const auto ok_ = co_await lbeside->unlock(); CHECK(ok_); }
        auto none = co_await store.list(prefix);
        REQUIRE(none);
        CHECK(none->empty());
    });
}

/// revoke() frees a lock only while it is still the grant with that fence: a waiter
/// gets it with a larger fence, and the revoked holder's lease is lost at its next
/// renewal.
template <class F>
void revoking()
{
    F f;
    test::run(f.io, [&]() -> asio::awaitable<void> {
        const auto ex = co_await asio::this_coro::executor;
        auto& operator_client = f.client(1);
        // Renewed (every second): it learns of the revoke when an extension fails, well
        // before its TTL would have run out (on a session store, with the session's
        // next keepalive).
        mutex_with<F, dl::observe::callback, dl::retry::fixed, dl::renew::watchdog> a{
            f.client(0), "conf:revoke", {.ttl = 3s}, dl::observe::callback{}};
        auto held = co_await a.lock();
        REQUIRE(held);
        auto lost = test::start(ex, held->lost());

        auto wrong = co_await operator_client.revoke("conf:revoke", held->fence() + 1);
        REQUIRE_FALSE(wrong);
        CHECK(wrong.error() == dl::condition::not_owner);
        auto free_one = co_await operator_client.revoke("conf:revoke-free", 1);
        REQUIRE_FALSE(free_one);
        CHECK(free_one.error() == dl::condition::not_owner);
        CHECK(f.held("conf:revoke"));
        CHECK_FALSE(lost.ready());

        waiting_mutex_of<F> b{f.client(2), "conf:revoke", {.ttl = 10s}, dl::observe::callback{}, for_a_minute()};
        auto next = test::start(ex, b.lock());
        co_await test::settle(50ms);
        CHECK_FALSE(next.ready());
        auto revoked = co_await operator_client.revoke("conf:revoke", held->fence());
        REQUIRE(revoked);
        REQUIRE(co_await next.wait(std::chrono::milliseconds{30000}));
        auto& taken = next.get();
        REQUIRE(taken);
        CHECK(taken->fence() > held->fence());
        // The fence names one grant: the next holder's lock is not revoked with the old one.
        auto again = co_await operator_client.revoke("conf:revoke", held->fence());
        REQUIRE_FALSE(again);
        CHECK(again.error() == dl::condition::not_owner);
        CHECK(taken->valid());

        REQUIRE(co_await lost.wait(std::chrono::milliseconds{30000}));
        CHECK(lost.get() == dl::condition::lease_lost);
        CHECK_FALSE(held->valid());
        { const auto ok_ = co_await taken->unlock(); CHECK(ok_); }
        CHECK_FALSE(f.held("conf:revoke"));
    });
}

/// close() finishes the release of a lease dropped without unlock().
template <class F>
void close_finishes_release()
{
    F f;
    test::run(f.io, [&]() -> asio::awaitable<void> {
        {
            mutex_of<F> a{f.client(0), "conf:close", {.ttl = 10s}, dl::observe::callback{}};
            auto l = co_await a.lock();
            REQUIRE(l);
        } // dropped: released in the background
        co_await f.close(0);
        CHECK_FALSE(f.held("conf:close"));
    });
}

/// close() with an acquisition in flight (applied on the server, its reply not back)
/// does not return before that grant is given back: the lock() ends without a lease
/// and nothing is left held until its TTL.
template <class F>
void close_with_acquisition_in_flight()
{
    F f;
    const std::string resource = "conf:close-in-flight";
    test::run(f.io, [&]() -> asio::awaitable<void> {
        const auto ex = co_await asio::this_coro::executor;
        { // connections and sessions open: the request held back below is the lock's own
            single_try_mutex_of<F> warm{f.client(0), "conf:warm-up", {.ttl = 10s}, dl::observe::callback{}};
            auto l = co_await warm.lock();
            REQUIRE(l);
            { const auto ok_ = co_await l->unlock(); REQUIRE(ok_); }
        }
        f.hold_replies(true);
        std::optional<dl::result<dl::lease>> got;
        single_try_mutex_of<F> a{f.client(0), resource, {.ttl = 30s}, dl::observe::callback{}};
        asio::co_spawn(ex, [&]() -> asio::awaitable<void> { got.emplace(co_await a.lock()); }, asio::detached);
        (void)co_await test::eventually("f.held(resource)", [&] { return f.held(resource); }, long_enough());
        bool closed = false;
        asio::co_spawn(
            ex,
            [&]() -> asio::awaitable<void> {
                co_await f.close(0);
                closed = true;
            },
            asio::detached);
        // close() is waiting for the grant's reply; let it come (a fixture that delays
        // rather than holds replies delays them longer than this).
        asio::steady_timer t{ex, 200ms};
        co_await t.async_wait(asio::use_awaitable);
        CHECK_FALSE(got.has_value());
        f.hold_replies(false);
        (void)co_await test::eventually("closed", [&] { return closed; }, long_enough());
        REQUIRE(got.has_value());
        if constexpr (F::quorum) {
            // The client's node stores close one after another: the nodes still open
            // may grant a lease, which ends (and is released) when they close.
            if (*got)
                CHECK_FALSE((*got)->valid());
        } else {
            REQUIRE_FALSE(*got);
            CHECK(got->error() == dl::errc::store_unavailable);
        }
        // Given back before close() returned (a lock left behind would stay for 30 s).
        CHECK_FALSE(f.held(resource));
    });
}

/// Waiters of separate sessions are served in the order they queued; each release
/// wakes one.
template <class F>
void queue_order()
{
    using backend = typename F::backend;
    using mutex = mutex_with<F, dl::retry::exponential_backoff>;
    F f;
    constexpr std::size_t waiters = 5;
    std::vector<std::unique_ptr<backend>> stores;
    for (std::size_t i = 0; i <= waiters; ++i)
        stores.push_back(f.make_client());
    std::vector<std::size_t> served;
    test::run(f.io, [&]() -> asio::awaitable<void> {
        mutex holder_m{*stores[0], "conf:queue"};
        auto holder = co_await holder_m.lock();
        REQUIRE(holder);
        std::vector<std::unique_ptr<mutex>> mutexes;
        std::vector<test::pending<dl::result<dl::lease>>> pending;
        for (std::size_t i = 1; i <= waiters; ++i) {
            mutexes.push_back(std::make_unique<mutex>(*stores[i], "conf:queue", dl::lock_options{},
                                                      dl::retry::exponential_backoff{.deadline = 30s}));
            pending.push_back(test::start(co_await asio::this_coro::executor, mutexes.back()->lock()));
            // Queued one after the other: waiter i is in the queue before i + 1 starts.
            (void)co_await test::eventually("queued", [&] { return f.waiters("conf:queue") == i + 1; }, long_enough());
        }
        { const auto ok_ = co_await holder->unlock(); CHECK(ok_); }
        dl::fence_token last = holder->fence();
        for (std::size_t turn = 0; turn < waiters; ++turn) {
            // Exactly one waiter has the lock; the others still wait.
            std::optional<std::size_t> got;
            (void)co_await test::eventually("one granted", [&] {
                for (std::size_t i = 0; i < waiters; ++i)
                    if (pending[i].ready() && std::find(served.begin(), served.end(), i) == served.end())
                        got = i;
                return got.has_value();
            }, long_enough());
            REQUIRE(got);
            served.push_back(*got);
            auto& lease = pending[*got].get();
            REQUIRE(lease);
            CHECK(lease->fence() > last);
            last = lease->fence();
            std::size_t done = 0;
            for (auto& p : pending)
                done += p.ready();
            CHECK(done == turn + 1);
            { const auto ok_ = co_await lease->unlock(); CHECK(ok_); }
        }
        for (auto& s : stores)
            co_await s->close();
    });
    std::vector<std::size_t> in_order(waiters);
    for (std::size_t i = 0; i < waiters; ++i)
        in_order[i] = i;
    CHECK(served == in_order);
}

/// A waiter cancelled in the middle of the queue leaves it, and the one behind it
/// still waits for the one ahead: nobody is let in while the holder holds.
template <class F>
void cancelled_in_line()
{
    using backend = typename F::backend;
    using mutex = mutex_with<F, dl::retry::exponential_backoff>;
    F f;
    std::vector<std::unique_ptr<backend>> stores;
    for (int i = 0; i < 4; ++i)
        stores.push_back(f.make_client());
    test::run(f.io, [&]() -> asio::awaitable<void> {
        const auto ex = co_await asio::this_coro::executor;
        const auto waiting_mutex = [&](backend& s) {
            return std::make_unique<mutex>(s, "conf:line", dl::lock_options{}, for_a_minute());
        };
        mutex holder_m{*stores[0], "conf:line"};
        auto holder = co_await holder_m.lock();
        REQUIRE(holder);
        auto first_m = waiting_mutex(*stores[1]), middle_m = waiting_mutex(*stores[2]), last_m = waiting_mutex(*stores[3]);
        auto first = test::start(ex, first_m->lock());
        (void)co_await test::eventually("first queued", [&] { return f.waiters("conf:line") == 2; }, long_enough());
        asio::cancellation_signal cancel;
        std::optional<dl::result<dl::lease>> middle;
        start_cancellable(ex, *middle_m, cancel, middle);
        (void)co_await test::eventually("middle queued", [&] { return f.waiters("conf:line") == 3; }, long_enough());
        auto last = test::start(ex, last_m->lock());
        (void)co_await test::eventually("last queued", [&] { return f.waiters("conf:line") == 4; }, long_enough());

        cancel.emit(asio::cancellation_type::all);
        (void)co_await test::eventually("middle ended", [&] { return middle.has_value(); }, long_enough());
        REQUIRE_FALSE(*middle);
        CHECK(middle->error() == dl::condition::cancelled);
        co_await background_done(*stores[2]);
        (void)co_await test::eventually("middle left the line", [&] { return f.waiters("conf:line") == 3; },
                                        long_enough());
        // The one behind it has seen its predecessor go: it must wait for the first.
        co_await test::settle(300ms);
        CHECK_FALSE(first.ready());
        CHECK_FALSE(last.ready());
        CHECK(holder->valid());
        CHECK(f.waiters("conf:line") == 3);

        { const auto ok_ = co_await holder->unlock(); CHECK(ok_); }
        { const bool came_ = co_await first.wait(); REQUIRE(came_); }
        auto& first_lease = first.get();
        REQUIRE(first_lease);
        CHECK(first_lease->fence() > holder->fence());
        co_await test::settle(100ms);
        CHECK_FALSE(last.ready());
        { const auto ok_ = co_await first_lease->unlock(); CHECK(ok_); }
        { const bool came_ = co_await last.wait(); REQUIRE(came_); }
        auto& last_lease = last.get();
        REQUIRE(last_lease);
        CHECK(last_lease->fence() > first_lease->fence());
        { const auto ok_ = co_await last_lease->unlock(); CHECK(ok_); }
        (void)co_await test::eventually("line empty", [&] { return f.waiters("conf:line") == 0; }, long_enough());
        for (auto& s : stores)
            co_await s->close();
    });
}

/// A waiter whose session ends on the server while it waits: its entry goes with the
/// session, its lock() ends with an error and leaves no entry (none under a new
/// session either), the one behind it waits for the holder, and the queue goes on.
template <class F>
void waiter_session_lost()
{
    F f;
    test::run(f.io, [&]() -> asio::awaitable<void> {
        const auto ex = co_await asio::this_coro::executor;
        waiting_mutex_of<F> holder_m{f.client(0), "conf:lost-waiter", {}, dl::observe::callback{}, for_a_minute()};
        waiting_mutex_of<F> lost_m{f.client(1), "conf:lost-waiter", {}, dl::observe::callback{}, for_a_minute()};
        waiting_mutex_of<F> behind_m{f.client(2), "conf:lost-waiter", {}, dl::observe::callback{}, for_a_minute()};
        auto holder = co_await holder_m.lock();
        REQUIRE(holder);
        // Waits for longer than its session takes to end, not for the holder.
        auto lost = test::start(ex, lost_m.lock_until(dl::clock::now() + F::session_end_within + 3s));
        (void)co_await test::eventually("queued", [&] { return f.waiters("conf:lost-waiter") == 2; }, long_enough());
        auto behind = test::start(ex, behind_m.lock());
        (void)co_await test::eventually("behind queued", [&] { return f.waiters("conf:lost-waiter") == 3; },
                                        long_enough());

        CHECK_FALSE(lost.ready()); // still waiting when its session ends
        co_await f.end_session(1);
        (void)co_await test::eventually("the lost session's entry went", [&] {
            return f.waiters("conf:lost-waiter") == 2;
        }, long_enough());
        { const bool came_ = co_await lost.wait(std::chrono::seconds{30}); REQUIRE(came_); }
        REQUIRE_FALSE(lost.get());
        co_await background_done(f.client(1));
        // The holder and the one behind it, nobody else: the lost waiter left nothing.
        CHECK(f.waiters("conf:lost-waiter") == 2);
        CHECK_FALSE(behind.ready());
        CHECK(holder->valid());

        { const auto ok_ = co_await holder->unlock(); CHECK(ok_); }
        { const bool came_ = co_await behind.wait(); REQUIRE(came_); }
        auto& next = behind.get();
        REQUIRE(next);
        CHECK(next->fence() > holder->fence());
        { const auto ok_ = co_await next->unlock(); CHECK(ok_); }
        // The client whose session was lost locks again, under a new one.
        auto again = co_await lost_m.lock();
        REQUIRE(again);
        CHECK(again->fence() > next->fence());
        { const auto ok_ = co_await again->unlock(); CHECK(ok_); }
        (void)co_await test::eventually("nothing left", [&] { return f.waiters("conf:lost-waiter") == 0; },
                                        long_enough());
    });
}

/// A forgotten resource's next fence is still larger, after a release and after an
/// expiry.
template <class F>
void forgotten()
{
    F f;
    test::run(f.io, [&]() -> asio::awaitable<void> {
        single_try_mutex_of<F> m{f.client(0), "conf:forgotten", {.ttl = 300ms}, dl::observe::callback{}};
        auto released = co_await m.lock();
        REQUIRE(released);
        const auto first = released->fence();
        { const auto ok_ = co_await released->unlock(); CHECK(ok_); }
        (void)co_await test::eventually("forgotten after release", [&] { return !f.remembers("conf:forgotten"); },
                                        long_enough());
        CHECK_FALSE(f.remembers("conf:forgotten"));
        auto expired = co_await m.lock();
        REQUIRE(expired);
        CHECK(expired->fence() > first);
        const auto second = expired->fence();
        // Not released: its TTL runs out, then the store forgets it.
        (void)co_await test::eventually("forgotten after expiry", [&] { return !f.remembers("conf:forgotten"); },
                                        long_enough());
        CHECK_FALSE(f.remembers("conf:forgotten"));
        mutex_of<F> other{f.client(1), "conf:forgotten", {.ttl = 10s}, dl::observe::callback{}};
        auto third = co_await other.lock();
        REQUIRE(third);
        CHECK(third->fence() > second);
        { const auto ok_ = co_await third->unlock(); CHECK(ok_); }
    });
}

/// A holder in a process of its own, SIGKILLed while it holds: its lock stays until
/// its session ends (or its TTL runs out, or at once where the server frees it with
/// the connection); the next holder's fence is larger.
template <class F>
void killed_holder()
{
    constexpr auto expect = killed_holder_lock<F>();
    F f;
    auto holder = f.holder_process("conf:killed");
    const auto line = holder->read_line(std::chrono::seconds{20});
    REQUIRE(line);
    REQUIRE(line->starts_with("locked "));
    const dl::fence_token dead = std::stoull(line->substr(7));
    holder->kill(SIGKILL);
    REQUIRE(holder->wait());
    if constexpr (!expect.freed_at_once)
        CHECK(f.held("conf:killed")); // until its session ends on the server
    test::run(f.io, [&]() -> asio::awaitable<void> {
        if constexpr (expect.held_for > dl::duration::zero()) {
            mutex_with<F, dl::retry::fixed> early{f.client(0), "conf:killed", {.ttl = 10s},
                                                  dl::retry::fixed{.delay = 20ms}};
            auto refused = co_await early.lock_until(dl::clock::now() + expect.held_for);
            REQUIRE_FALSE(refused);
            CHECK(refused.error() == dl::errc::timeout);
        }
        mutex_with<F, dl::retry::exponential_backoff> m{f.client(0), "conf:killed", {},
                                                        dl::retry::exponential_backoff{.deadline = 20s}};
        auto taken = co_await m.lock();
        REQUIRE(taken);
        CHECK(taken->fence() > dead);
        { const auto ok_ = co_await taken->unlock(); CHECK(ok_); }
    });
}

/// A holder and a waiter while the server is down past the session timeout, then
/// back: the holder hears of its loss, the waiter gets the lock with a larger fence,
/// and nothing is left once it lets go.
template <class F>
void server_down_and_back()
{
    F f;
    test::run(f.io, [&]() -> asio::awaitable<void> {
        const auto ex = co_await asio::this_coro::executor;
        // A TTL store's holder renews its lease (a session store's session does).
        mutex_with<F, dl::renew::watchdog, dl::retry::exponential_backoff> holder_m{
            f.client(0), "conf:down", {.ttl = 2s}, for_a_minute()};
        mutex_with<F, dl::retry::exponential_backoff> waiter_m{f.client(1), "conf:down", {.ttl = 2s}, for_a_minute()};
        auto held = co_await holder_m.lock();
        REQUIRE(held);
        auto waiting = test::start(ex, waiter_m.lock());
        co_await test::settle(200ms);
        CHECK_FALSE(waiting.ready());

        auto lost = test::start(ex, held->lost());
        f.stop_server();
        { const bool came_ = co_await lost.wait(std::chrono::seconds{20}); REQUIRE(came_); }
        CHECK(lost.get()); // an error: why it was lost
        CHECK_FALSE(held->valid());
        // Down past the session timeout (or the TTL) counted from the loss, later than
        // from the last request the server answered: a session store's clients have
        // given their sessions up, and the server would have expired them. (The server
        // starts on this thread, which its child process must not outlive: the clients'
        // timers wait meanwhile.)
        co_await test::settle(std::chrono::ceil<std::chrono::milliseconds>(F::longest_validity({.ttl = 2s})));
        CHECK_FALSE(waiting.ready());
        f.start_server();

        { const bool came_ = co_await waiting.wait(std::chrono::seconds{45}); REQUIRE(came_); }
        auto& next = waiting.get();
        REQUIRE(next);
        CHECK(next->fence() > held->fence());
        CHECK(next->valid());
        (void)co_await held->unlock(); // fails or finds nothing: it was lost
        CHECK(f.held("conf:down"));
        { const auto ok_ = co_await next->unlock(); CHECK(ok_); }
        (void)co_await test::eventually("nothing held", [&] { return !f.held("conf:down"); }, long_enough());
        if constexpr (queues<F>::value)
            (void)co_await test::eventually("nothing queued", [&] { return f.waiters("conf:down") == 0; },
                                            long_enough());
    }, std::chrono::seconds{90});
}

/// Processes counting under the lock (count_under_lock()): nothing is lost, each
/// holder's fence is above the last one written (a fencing register the holders
/// check), and on a fair queue a release made while another process waits goes to
/// that process.
template <class F>
void processes_count()
{
    constexpr int processes = counter_processes<F>();
    constexpr int rounds = counter_rounds<F>();
    F f;
    // The fixture's own clients sit idle while the processes count (their event loop
    // does not run): closed first, so that their sessions end now rather than expire
    // unattended.
    if constexpr (closes<F>::value)
        test::run(f.io, [&]() -> asio::awaitable<void> {
            for (std::size_t i = 0; i < 3; ++i)
                co_await f.close(i);
        });
    test::temp_dir dir;
    std::vector<std::unique_ptr<test::child>> workers;
    for (int i = 0; i < processes; ++i)
        workers.push_back(f.counter_process(dir.path(), rounds, processes));
    int handoffs = 0, contested = 0, overtaken = 0;
    for (auto& w : workers) {
        const auto line = w->read_line(std::chrono::seconds{120});
        REQUIRE(line);
        INFO(*line);
        std::istringstream words{*line};
        std::string h, c, o;
        int worker_handoffs = -1, worker_contested = -1, worker_overtaken = -1;
        words >> h >> worker_handoffs >> c >> worker_contested >> o >> worker_overtaken;
        REQUIRE((h == "handoffs" && c == "contested" && o == "overtaken" && worker_overtaken >= 0));
        handoffs += worker_handoffs;
        contested += worker_contested;
        overtaken += worker_overtaken;
        CHECK(w->wait(std::chrono::seconds{30}) == std::optional<int>{0});
    }
    CHECK(f.counter_value(dir.path()) == processes * rounds);
    if constexpr (queues<F>::value) {
        // Releases made while nobody else was queued (before the others' first lock()
        // reached the server, after they finished) may go to the releaser again; every
        // other one changes hands. How many found a waiter depends on the machine's
        // load, so the count asked for is a floor that keeps the check from passing
        // empty.
        INFO("hand-offs: " << handoffs << " of " << processes * rounds - 1 << "; releases with a waiter: "
                           << contested);
        CHECK(overtaken == 0);
        CHECK(contested >= (processes * rounds - 1) / 2);
        CHECK(handoffs >= contested);
        // A store whose releaser asks again behind the waiters: nearly every release
        // changes hands.
        if constexpr (counter_handoffs_percent<F>() > 0)
            CHECK(handoffs >= (processes * rounds - 1) * counter_handoffs_percent<F>() / 100);
    }
}

// -- The bodies of the behaviours' worker processes ---------------------------------------

/// The body of a holder process (killed_holder and the shared behaviours' holders):
/// takes `resource` through `store` (renewed by a watchdog where leases have a TTL) in
/// `mode`: "exclusive" (a mutex), "shared" (a shared mutex's reader) or "permit:N" (a
/// permit of a semaphore of N); prints "locked FENCE" (a permit: "locked FENCE SLOT"),
/// and holds it until the lease is lost (exit status 3) or the process is killed.
template <class Store>
int hold_until_lost(asio::io_context& io, Store& store, const std::string& resource,
                    dl::duration ttl = std::chrono::seconds{10}, const std::string& mode = "exclusive")
{
    int status = 1;
    asio::co_spawn(io, [&]() -> asio::awaitable<void> {
        const dl::retry::exponential_backoff patient{.deadline = std::chrono::seconds{30}};
        dl::result<dl::lease> l = dl::errc::invalid_argument;
        if (mode == "exclusive") {
            dl::basic_distributed_mutex<Store, dl::renew::watchdog, dl::retry::exponential_backoff> m{
                store, resource, {.ttl = ttl}, patient};
            l = co_await m.lock();
        } else if constexpr (dl::shared_backend<Store>) {
            if (mode == "shared") {
                dl::basic_distributed_shared_mutex<Store, dl::renew::watchdog, dl::retry::exponential_backoff> m{
                    store, resource, {.ttl = ttl}, patient};
                l = co_await m.lock_shared();
            } else if (mode.starts_with("permit:")) {
                dl::basic_distributed_semaphore<Store, dl::renew::watchdog, dl::retry::exponential_backoff> s{
                    store, resource,
                    {.permits = static_cast<std::uint32_t>(std::stoul(mode.substr(7))), .lease = {.ttl = ttl}},
                    patient};
                l = co_await s.acquire();
            }
        }
        if (!l)
            co_return;
        if (const auto slot = l->slot())
            std::printf("locked %llu %u\n", static_cast<unsigned long long>(l->fence()), static_cast<unsigned>(*slot));
        else
            std::printf("locked %llu\n", static_cast<unsigned long long>(l->fence()));
        std::fflush(stdout);
        co_await l->lost();
        status = 3;
    }, asio::detached);
    io.run();
    return status;
}

/// Where a counting process counts and with how many others (processes_count): the
/// arguments after a fixture's own in `--worker NAME ...`.
struct counting {
    std::filesystem::path dir;
    int rounds = 0;
    int processes = 0;

    std::vector<std::string> args() const { return {dir.string(), std::to_string(rounds), std::to_string(processes)}; }
    /// From args[first...]; nullopt when they are not there.
    static std::optional<counting> from(const std::vector<std::string>& args, std::size_t first)
    {
        if (args.size() != first + 3)
            return std::nullopt;
        return counting{args[first], std::stoi(args[first + 1]), std::stoi(args[first + 2])};
    }
};

/// The body of a counting process (processes_count). Once `how.processes` processes
/// are ready (each makes a file in how.dir/ready: a start-up delay must not count as
/// unfairness), `how.rounds` critical sections on "conf:counter", each of which
///  - checks the lease's fence against the register in how.dir (the fence written
///    last, by whom, and whether another process waited at that release): a fence
///    not above it is printed as "stale" and ends the process;
///  - reads the counter and writes it back one higher with the lease's fence;
///  - writes the register and releases.
/// `counter` is the store's:
///   asio::awaitable<dl::result<long>> read();                    the value (0: none yet)
///   asio::awaitable<dl::result<void>> write(const dl::lease&, long);   fenced with the lease
///   optional: asio::awaitable<bool> others_waiting();            another process is queued
/// Prints "handoffs H contested C overtaken O": locks last held by another process,
/// locks whose previous release had another process waiting, and those of them that
/// came back to the releaser.
template <class Store, class Counter>
int count_under_lock(asio::io_context& io, Store& store, Counter& counter, const counting& how)
{
    const auto me = std::to_string(::getpid());
    {
        const auto ready = how.dir / "ready";
        std::error_code ignored;
        std::filesystem::create_directories(ready, ignored);
        std::ofstream{ready / me} << me;
        for (int wait = 0;; ++wait) {
            std::size_t count = 0;
            for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator{ready, ignored})
                ++count;
            if (static_cast<int>(count) >= how.processes)
                break;
            if (wait == 3000)
                return 1;
            std::this_thread::sleep_for(std::chrono::milliseconds{20});
        }
    }
    const auto fail = [](const std::string& why) {
        std::printf("%s\n", why.c_str());
        std::fflush(stdout);
    };
    const auto registry = how.dir / "register";
    int status = 1;
    asio::co_spawn(io, [&]() -> asio::awaitable<void> {
        int handoffs = 0, contested = 0, overtaken = 0;
        dl::basic_distributed_mutex<Store, dl::retry::exponential_backoff> m{
            store, "conf:counter", {.ttl = std::chrono::seconds{5}},
            dl::retry::exponential_backoff{.initial = std::chrono::milliseconds{2}, .max = std::chrono::milliseconds{50},
                                           .deadline = std::chrono::seconds{60}}};
        for (int i = 0; i < how.rounds; ++i) {
            auto lease = co_await m.lock();
            if (!lease) {
                fail("lock: " + lease.error().message());
                co_return;
            }
            unsigned long long fence = 0;
            std::string writer;
            int others_waited = 0; // at the previous holder's release
            {
                std::ifstream in{registry};
                in >> fence >> writer >> others_waited;
            }
            if (lease->fence() <= fence) {
                fail("stale");
                co_return;
            }
            if (!writer.empty() && writer != me)
                ++handoffs;
            if (others_waited == 1) {
                ++contested;
                if (writer == me)
                    ++overtaken;
            }
            auto n = co_await counter.read();
            if (!n) {
                fail("read: " + n.error().message());
                co_return;
            }
            bool waiting = false;
            if constexpr (requires { counter.others_waiting(); })
                waiting = co_await counter.others_waiting();
            {
                std::ofstream out{registry, std::ios::trunc};
                out << lease->fence() << ' ' << me << ' ' << (waiting ? 1 : 0) << '\n';
            }
            if (auto w = co_await counter.write(*lease, n.value() + 1); !w) {
                fail("write: " + w.error().message());
                co_return;
            }
            if (auto u = co_await lease->unlock(); !u) {
                fail("unlock: " + u.error().message());
                co_return;
            }
        }
        std::printf("handoffs %d contested %d overtaken %d\n", handoffs, contested, overtaken);
        std::fflush(stdout);
        status = 0;
        co_await store.close();
    }, asio::detached);
    io.run();
    return status;
}

} // namespace test::conformance

// The shared mutex's and the semaphore's behaviours, on the helpers above.
#include "shared.hpp"
// The election's and the lock-delay's behaviours.
#include "election.hpp"
#include "lock_delay.hpp"

namespace test::conformance {

// -- Registration -----------------------------------------------------------------------

/// Registers `run` as the test case "<name> - <F::name>".
template <class F>
void add(const char* name, void (*run)(), const std::string& tags, const Catch::SourceLineInfo& line)
{
    Catch::AutoReg{Catch::makeTestInvoker(run), line, Catch::StringRef{},
                   Catch::NameAndTags{std::string{name} + " - " + F::name, tags + "[conformance]"}};
}

#define DISTLOCK_CONFORMANCE_ADD(NAME, BEHAVIOUR) add<F>(NAME, &BEHAVIOUR<F>, tags, CATCH_INTERNAL_LINEINFO)

/// One test case per behaviour that fixture F can run.
template <class F>
void register_behaviours(const std::string& tags)
{
    DISTLOCK_CONFORMANCE_ADD("conformance: one holder at a time, fences grow across clients", exclusion);
    DISTLOCK_CONFORMANCE_ADD("conformance: a lease whose lock the store dropped never removes the next holder's",
                             stale_release);
    DISTLOCK_CONFORMANCE_ADD("conformance: a set's unlock gives back every lock of the set, never the next holder's",
                             set_release);
    DISTLOCK_CONFORMANCE_ADD("conformance: validity counts from the request, minus the margin", validity);
    DISTLOCK_CONFORMANCE_ADD("conformance: a cancelled or timed-out waiter leaves nothing behind",
                             cancel_leaves_nothing);
    DISTLOCK_CONFORMANCE_ADD("conformance: many try_lock() calls against a held lock leave nothing behind",
                             try_locks_leave_nothing);
    DISTLOCK_CONFORMANCE_ADD("conformance: two lock() calls through one store object hold one at a time; fences grow",
                             one_store_two_locks);
    DISTLOCK_CONFORMANCE_ADD("conformance: the fence grows across releases and expiries", fence_grows);
    DISTLOCK_CONFORMANCE_ADD("conformance: bad input is rejected before any I/O; ids are binary-safe", bad_input);
    if constexpr (notifies<F>::value)
        DISTLOCK_CONFORMANCE_ADD("conformance: a waiter is woken by the release, not by its retry delay",
                                 woken_by_release);
    if constexpr (loses_replies<F>::value)
        DISTLOCK_CONFORMANCE_ADD("conformance: a request whose reply was lost is cleaned up by owner", lost_reply);
    if constexpr (refuses<F>::value)
        DISTLOCK_CONFORMANCE_ADD("conformance: a refused request is retried and not applied twice", refused);
    if constexpr (inspectable<F>::value)
        DISTLOCK_CONFORMANCE_ADD("conformance: read() reports the holder without taking the lock", read);
    if constexpr (lists<F>::value)
        DISTLOCK_CONFORMANCE_ADD("conformance: list() reports exactly the held locks under a prefix, sorted",
                                 listing);
    if constexpr (revokes<F>::value)
        DISTLOCK_CONFORMANCE_ADD("conformance: revoke() frees only the grant with that fence; a waiter gets the lock, "
                                 "the holder's lease is lost at its next renewal",
                                 revoking);
    if constexpr (closes<F>::value)
        DISTLOCK_CONFORMANCE_ADD("conformance: close() finishes the release of a dropped lease",
                                 close_finishes_release);
    if constexpr (closes_in_flight<F>::value)
        DISTLOCK_CONFORMANCE_ADD("conformance: close() with an acquisition in flight gives its grant back before it "
                                 "returns",
                                 close_with_acquisition_in_flight);
    if constexpr (queues<F>::value) {
        DISTLOCK_CONFORMANCE_ADD("conformance: waiters of separate sessions are served in the order they queued; "
                                 "each release wakes one",
                                 queue_order);
        DISTLOCK_CONFORMANCE_ADD("conformance: a waiter cancelled in the middle of the queue lets nobody in while "
                                 "the holder holds",
                                 cancelled_in_line);
    }
    if constexpr (ends_sessions<F>::value)
        DISTLOCK_CONFORMANCE_ADD("conformance: a waiter whose session is lost ends with an error and leaves no "
                                 "entry; the queue goes on",
                                 waiter_session_lost);
    if constexpr (forgets<F>::value)
        DISTLOCK_CONFORMANCE_ADD("conformance: a forgotten resource's next fence is still larger, released or expired",
                                 forgotten);
    if constexpr (checks_settings<F>::value)
        DISTLOCK_CONFORMANCE_ADD("conformance: settings the store cannot use are refused before any I/O",
                                 settings_refused);
    if constexpr (kills_holders<F>::value)
        DISTLOCK_CONFORMANCE_ADD("conformance: a SIGKILLed holder's lock is freed with its session; the next fence "
                                 "is larger",
                                 killed_holder);
    if constexpr (restarts<F>::value)
        DISTLOCK_CONFORMANCE_ADD("conformance: the server down past the session timeout, then back: the holder hears "
                                 "of its loss, the waiter gets the lock",
                                 server_down_and_back);
    if constexpr (counts_in_processes<F>::value)
        DISTLOCK_CONFORMANCE_ADD("conformance: processes counting under the lock with fenced writes lose nothing; "
                                 "fences grow",
                                 processes_count);
    register_shared_behaviours<F>(tags, &add<F>);
    register_election_behaviours<F>(tags, &add<F>);
    register_lock_delay_behaviours<F>(tags, &add<F>);
}

#undef DISTLOCK_CONFORMANCE_ADD

/// Registers the suite on fixtures Fs, their test cases tagged `tags` and
/// "[conformance]". Called once per fixture file:
///   const bool registered = test::conformance::register_suite<F1, F2>("[store]");
template <class... Fs>
bool register_suite(const std::string& tags)
{
    (register_behaviours<Fs>(tags), ...);
    return true;
}

} // namespace test::conformance
