// The tests that run the library on several threads at once: one store shared by
// coroutines on strands of an io_context run by four threads, the in-process store
// and Redis (one server, sets of locks taken and released in one script each, fair
// hand-overs between stores, and a cluster whose slot moves meanwhile);
// threads_sessions.cpp has etcd, ZooKeeper and
// PostgreSQL, and test/unit/async_and_blocking.cpp, in the same executable, the
// blocking adapters and completion tokens from foreign threads. The ThreadSanitizer
// build runs this executable: every other test drives the library from one thread,
// where TSan has nothing to find.
#include "support.hpp"
#include "threads.hpp"
#include "redis_cluster.hpp"
#include "redis/redis_support.hpp"

#include <asio/experimental/awaitable_operators.hpp>
#include <asio/post.hpp>

#include <array>
#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

using namespace test;
using memory_mutex = dl::basic_distributed_mutex<dl::memory::store>;

namespace {

// Reads `key`, adds one and writes it back: a read-modify-write that only a held lock
// keeps exact. False when the write failed.
asio::awaitable<bool> increment(dl::redis::store& store, const std::string& key)
{
    auto get = dl::redis::resp::command({"GET", key});
    auto got = co_await store.execute_command(std::move(get));
    const long n = got && got.value().is_string() ? std::stol(got.value().text) : 0;
    auto put = dl::redis::resp::command({"SET", key, std::to_string(n + 1)});
    auto written = co_await store.execute_command(std::move(put));
    co_return static_cast<bool>(written);
}

} // namespace

TEST_CASE("mutual exclusion holds across threads", "[mutex][concurrency]")
{
    // Catch's assertions are not thread-safe: workers count, the main thread asserts.
    asio::io_context io;
    dl::memory::store store{io};
    constexpr int workers = 8, rounds = 20;
    std::atomic<int> inside{0}, overlaps{0}, finished{0}, errors{0};
    long counter = 0; // guarded only by the distributed lock
    for (int w = 0; w < workers; ++w)
        asio::co_spawn(asio::make_strand(io), [&]() -> asio::awaitable<void> {
            memory_mutex m{store, "shared", {.ttl = 10s},
                           dl::retry::exponential_backoff{.initial = 50us, .max = 1ms}};
            for (int i = 0; i < rounds; ++i) {
                auto lease = co_await m.lock();
                if (!lease) {
                    ++errors;
                    continue;
                }
                if (inside.fetch_add(1) != 0)
                    ++overlaps;
                const long seen = counter;
                co_await asio::post(co_await asio::this_coro::executor, asio::use_awaitable);
                counter = seen + 1;
                inside.fetch_sub(1);
                auto released = co_await lease->unlock();
                if (!released)
                    ++errors;
            }
            ++finished;
        }, asio::detached);
    run_on_four_threads(io, 60s);
    CHECK(errors == 0);
    CHECK(finished == workers);
    CHECK(overlaps == 0);
    CHECK(counter == workers * rounds);
}

TEST_CASE("shared mutex and semaphore: readers overlap, writers never do, permits stay within N, across threads",
          "[shared][concurrency]")
{
    // Coroutines on strands of four threads; the main thread asserts.
    asio::io_context io;
    dl::memory::store store{io};
    dl::memory::session_server server;
    dl::memory::session_store sessions{io, server, {.session_ttl = 10s}};
    constexpr int workers = 8, rounds = 20;
    constexpr std::uint32_t permits = 3;
    // Per store (each is a lock domain of its own), then over both.
    struct domain {
        std::atomic<int> readers{0}, writers{0}, holders{0};
    };
    domain domains[2];
    std::atomic<int> overlaps{0}, too_many{0}, finished{0}, errors{0}, max_readers{0};
    const auto note_max = [&](int now) {
        int seen = max_readers.load();
        while (now > seen && !max_readers.compare_exchange_weak(seen, now)) {
        }
    };
    const auto work = [&](auto& backend, int w, domain& d) -> asio::awaitable<void> {
        using backend_type = std::remove_reference_t<decltype(backend)>;
        const dl::retry::exponential_backoff patient{.initial = 50us, .max = 1ms, .deadline = 60s};
        dl::basic_distributed_shared_mutex<backend_type, dl::retry::exponential_backoff> rw{
            backend, "rw", {.ttl = 10s}, patient};
        dl::basic_distributed_semaphore<backend_type, dl::retry::exponential_backoff> sem{
            backend, "permits", {.permits = permits, .lease = {.ttl = 10s}}, patient};
        for (int i = 0; i < rounds; ++i) {
            const bool write = (i + w) % 4 == 0;
            // No co_await inside a conditional expression: g++ 12 destroys its result early.
            dl::result<dl::lease> lease{make_error_code(dl::errc::cancelled)};
            if (write)
                lease = co_await rw.lock();
            else
                lease = co_await rw.lock_shared();
            if (!lease) {
                ++errors;
                continue;
            }
            if (write) {
                if (d.writers.fetch_add(1) != 0 || d.readers.load() != 0)
                    ++overlaps;
            } else {
                note_max(d.readers.fetch_add(1) + 1);
                if (d.writers.load() != 0)
                    ++overlaps;
            }
            co_await asio::post(co_await asio::this_coro::executor, asio::use_awaitable);
            (write ? d.writers : d.readers).fetch_sub(1);
            if (!co_await lease->unlock())
                ++errors;

            auto permit = co_await sem.acquire();
            if (!permit) {
                ++errors;
                continue;
            }
            if (d.holders.fetch_add(1) >= static_cast<int>(permits))
                ++too_many;
            co_await asio::post(co_await asio::this_coro::executor, asio::use_awaitable);
            d.holders.fetch_sub(1);
            if (!co_await permit->unlock())
                ++errors;
        }
        ++finished;
    };
    for (int w = 0; w < workers; ++w) {
        asio::co_spawn(asio::make_strand(io), work(store, w, domains[0]), asio::detached);
        asio::co_spawn(asio::make_strand(io), work(sessions, w, domains[1]), asio::detached);
    }
    // The session's keepalive runs until the client closes: once the workers are done.
    asio::co_spawn(asio::make_strand(io), [&]() -> asio::awaitable<void> {
        for (int i = 0; i < 12000 && finished < 2 * workers; ++i) {
            asio::steady_timer t{co_await asio::this_coro::executor, 10ms};
            co_await t.async_wait(asio::use_awaitable);
        }
        co_await sessions.close();
    }, asio::detached);
    run_on_four_threads(io, 120s);
    CHECK(errors == 0);
    CHECK(finished == 2 * workers);
    CHECK(overlaps == 0);
    CHECK(too_many == 0);
    CHECK(max_readers > 1); // readers did share
}

TEST_CASE("session store: a session's loss races its leases being watched, released and checked on other threads",
          "[session][concurrency]")
{
    // A session lease nobody watches takes the session's reports in its atomics; one
    // watched meanwhile starts a keeper that must still hear a loss reported just
    // before. Half the workers watch before the loss, half after or while it lands.
    asio::io_context io;
    dl::memory::session_server server;
    dl::memory::session_store store{io, server, {.session_ttl = 300ms}};
    using mutex = dl::basic_distributed_mutex<dl::memory::session_store>;
    constexpr int workers = 16;
    std::atomic<int> held{0}, told_lost{0}, refused_unlock{0}, errors{0}, finished{0};
    for (int w = 0; w < workers; ++w)
        asio::co_spawn(asio::make_strand(io), [&, w]() -> asio::awaitable<void> {
            mutex m{store, "r" + std::to_string(w)};
            auto lease = co_await m.lock();
            if (!lease) {
                ++errors;
                co_return;
            }
            const auto ex = co_await asio::this_coro::executor;
            if (++held == workers)
                server.expire(store.session_id()); // learnt at the next keepalive (100 ms)
            if (w % 2 == 1) { // watches later: before, while or after the loss lands
                asio::steady_timer pause{ex, std::chrono::milliseconds{20 * (w % 8)}};
                (void)co_await pause.async_wait(asio::experimental::as_tuple(asio::use_awaitable));
                (void)lease->valid();
            }
            using namespace asio::experimental::awaitable_operators;
            asio::steady_timer limit{ex, 10s};
            auto ended = co_await (lease->lost() || limit.async_wait(asio::experimental::as_tuple(asio::use_awaitable)));
            if (ended.index() == 0 && std::get<0>(ended) == dl::errc::lease_lost && !lease->valid())
                ++told_lost;
            auto r = co_await lease->unlock();
            if (!r && r.error() == dl::errc::lease_lost)
                ++refused_unlock;
            if (++finished == workers)
                co_await store.close();
        }, asio::detached);
    run_on_four_threads(io, 60s);
    CHECK(errors == 0);
    CHECK(held == workers);
    CHECK(told_lost == workers);
    CHECK(refused_unlock == workers);
}

TEST_CASE("redis: one store shared by coroutines on several threads", "[redis][concurrency]")
{
    // Catch's assertions are not thread-safe: workers count, the main thread asserts.
    redis_server server;
    // One command connection (every request through one strand), then four, each on
    // a strand of its own, driven by the four threads at once.
    for (const std::size_t connections : {std::size_t{1}, std::size_t{4}}) {
        INFO("connections: " << connections);
        asio::io_context io;
        auto cfg = server.config();
        cfg.connections = connections;
        dl::redis::store store{io, cfg};
        const std::string counter = "n" + std::to_string(connections);
        constexpr int workers = 8, rounds = 20;
        std::atomic<int> errors{0}, finished{0};
        for (int w = 0; w < workers; ++w)
            asio::co_spawn(asio::make_strand(io), [&]() -> asio::awaitable<void> {
                dl::basic_distributed_mutex<dl::redis::store, dl::renew::watchdog> m{
                    store, "threads", {.ttl = 5s}, dl::retry::exponential_backoff{.initial = 1ms, .max = 10ms}};
                // Named: a coroutine lambda reads its captures through the closure, which must outlive it.
                auto section = [&](const dl::lease&) -> asio::awaitable<bool> {
                    co_return co_await increment(store, counter);
                };
                co_await lock_rounds(m, rounds, errors, section);
                if (++finished == workers)
                    store.disconnect(); // lets the threads' run() return
            }, asio::detached);
        run_on_four_threads(io, 60s);
        CHECK(errors == 0);
        CHECK(finished == workers);
        asio::io_context probe;
        CHECK(peek(probe, server.config(), counter) == std::to_string(workers * rounds));
    }
}

TEST_CASE("redis fair: locks handed over between stores driven by several threads", "[redis][fair][concurrency]")
{
    // Four stores (as four services would have), two waiters each, on strands of one
    // io_context run by four threads: a release hands the lock to the head through
    // the head's store's subscriber, on whichever thread runs it, and the head takes
    // it from there on its own strand.
    redis_server server;
    asio::io_context io;
    std::vector<std::unique_ptr<dl::redis::store>> stores;
    for (int i = 0; i < 4; ++i)
        stores.push_back(std::make_unique<dl::redis::store>(io, server.config()));
    constexpr int workers = 8, rounds = 15;
    std::atomic<int> errors{0}, finished{0};
    for (int w = 0; w < workers; ++w)
        asio::co_spawn(asio::make_strand(io), [&, w]() -> asio::awaitable<void> {
            auto& store = *stores[static_cast<std::size_t>(w % 4)];
            dl::basic_distributed_mutex<dl::redis::store, dl::acquire::fair, dl::retry::exponential_backoff> m{
                store, "fair-threads", {.ttl = 5s}, dl::retry::exponential_backoff{.initial = 5ms, .max = 50ms}};
            auto section = [&](const dl::lease&) -> asio::awaitable<bool> {
                co_return co_await increment(store, "fair-counter");
            };
            co_await lock_rounds(m, rounds, errors, section);
            if (++finished == workers)
                for (auto& s : stores)
                    s->disconnect(); // lets the threads' run() return
        }, asio::detached);
    run_on_four_threads(io, 60s);
    CHECK(errors == 0);
    CHECK(finished == workers);
    asio::io_context probe;
    CHECK(peek(probe, server.config(), "fair-counter") == std::to_string(workers * rounds));
}

TEST_CASE("redis: sets taken and given back in one script by coroutines on several threads", "[redis][concurrency][multi]")
{
    // Each set's leases are kept by a watchdog (active: their keepers run on strands)
    // and go back in one script; the counter is guarded by the set alone.
    redis_server server;
    asio::io_context io;
    dl::redis::store store{io, server.config()};
    constexpr int workers = 6, rounds = 15;
    std::atomic<int> errors{0}, finished{0};
    for (int w = 0; w < workers; ++w)
        asio::co_spawn(asio::make_strand(io), [&, w]() -> asio::awaitable<void> {
            // Each worker names the set in its own order: the multi-lock sorts them.
            auto ids = w % 2 ? dl::resources("set:c", "set:a", "set:b") : dl::resources("set:a", "set:b", "set:c");
            dl::basic_multi_lock<dl::redis::store, dl::renew::watchdog, dl::retry::exponential_backoff> set{
                store, ids, {.ttl = 5s}, dl::renew::watchdog{},
                dl::retry::exponential_backoff{.initial = 1ms, .max = 10ms, .deadline = 30s}};
            for (int i = 0; i < rounds; ++i) {
                auto held = co_await set.lock();
                if (!held) {
                    ++errors;
                    continue;
                }
                if (!co_await increment(store, "sets"))
                    ++errors;
                auto released = co_await held->unlock();
                if (!released)
                    ++errors;
            }
            if (++finished == workers)
                store.disconnect(); // lets the threads' run() return
        }, asio::detached);
    run_on_four_threads(io, 90s);
    CHECK(errors == 0);
    CHECK(finished == workers);
    asio::io_context probe;
    CHECK(peek(probe, server.config(), "sets") == std::to_string(workers * rounds));
    for (const char* id : {"set:a", "set:b", "set:c"})
        CHECK_FALSE(peek(probe, server.config(), store.lock_key(id))); // nothing left held
}

TEST_CASE("redis cluster: one store shared by threads while a slot migrates under them",
          "[redis][cluster][concurrency]")
{
    // Workers on four threads take two locks that live on different primaries and
    // increment a counter beside each (same hash tag, same slot); meanwhile the main
    // thread migrates one of the slots. The router's map, its nodes and the sharded
    // subscriptions are shared by every thread.
    redis_cluster cluster{3, 0};
    asio::io_context io;
    dl::redis::store store{io, cluster.config()};
    const std::array<std::string, 2> resources{"threads:a", "threads:b"};
    const auto counter = [&](std::size_t r) { return "count:{#" + resources[r] + "}"; };
    REQUIRE(cluster.primary_of(store.lock_key(resources[0])) != cluster.primary_of(store.lock_key(resources[1])));
    constexpr int workers = 8, rounds = 50;
    std::atomic<int> errors{0}, finished{0};
    for (int w = 0; w < workers; ++w)
        asio::co_spawn(asio::make_strand(io), [&, w]() -> asio::awaitable<void> {
            const auto r = static_cast<std::size_t>(w % 2);
            dl::basic_distributed_mutex<dl::redis::store, dl::renew::watchdog> m{
                store, resources[r], {.ttl = 5s}, dl::retry::exponential_backoff{.initial = 1ms, .max = 10ms}};
            for (int i = 0; i < rounds; ++i) {
                auto lease = co_await m.lock();
                if (!lease) {
                    ++errors;
                    continue;
                }
                auto get = dl::redis::resp::command({"GET", counter(r)});
                auto got = co_await store.execute_command(std::move(get));
                const long n = got && got.value().is_string() ? std::stol(got.value().text) : 0;
                auto set = dl::redis::resp::command({"SET", counter(r), std::to_string(n + 1)});
                if (!co_await store.execute_command(std::move(set)))
                    ++errors;
                if (!co_await lease->unlock())
                    ++errors;
            }
            if (++finished == workers)
                store.disconnect();
        }, asio::detached);
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t)
        threads.emplace_back([&] { io.run_for(90s); });
    // Once resource a's counter exists, its slot (lock, fence, counter) moves.
    const auto key = store.lock_key(resources[0]);
    const auto slot = dl::redis::detail::hash_slot(key);
    const auto from = cluster.primary_of(key), to = cluster.other_primary(cluster.primary_of(key));
    wait_until("the first increment", [&] { return cli(from, "exists " + counter(0)).find('1') != std::string::npos; });
    cluster.begin_move(slot, from, to);
    cluster.move_keys(slot, from, to);
    cluster.finish_move(slot, to);
    for (auto& t : threads)
        t.join();
    CHECK(errors == 0);
    CHECK(finished == workers);
    CHECK(cluster.primary_of(key) == to);
    for (std::size_t r = 0; r < resources.size(); ++r) {
        auto got = cli(cluster.primary_of(store.lock_key(resources[r])), "get " + counter(r));
        CHECK(got.substr(0, got.find('\n')) == std::to_string(workers / 2 * rounds));
    }
}

TEST_CASE("redis: requests cancelled on other threads than the connection's keep their replies in order",
          "[redis][concurrency][cancel]")
{
    // Each request races a timer of a few microseconds: many are cancelled from the
    // caller's strand while the connection's strand, on another thread, is sending or
    // reading them. Those that complete must carry their own reply (an abandoned
    // request's reply is read and dropped), and nothing is touched from two threads.
    redis_server server;
    asio::io_context io;
    dl::redis::store store{io, server.config()};
    constexpr int workers = 8, rounds = 200;
    std::atomic<int> mismatched{0}, answered{0}, cancelled{0}, finished{0};
    for (int w = 0; w < workers; ++w)
        asio::co_spawn(asio::make_strand(io), [&, w]() -> asio::awaitable<void> {
            using namespace asio::experimental::awaitable_operators;
            for (int i = 0; i < rounds; ++i) {
                const auto word = std::to_string(w) + ":" + std::to_string(i);
                auto echo = dl::redis::resp::command({"ECHO", word});
                // Mostly a few tens of microseconds (cancelled mid-flight), every tenth
                // round long enough to be answered even on a slow (sanitized) build.
                const auto delay = i % 10 == 9 ? std::chrono::microseconds{100000}
                                               : std::chrono::microseconds{(i % 9) * 40};
                dl::timer soon{co_await asio::this_coro::executor, delay};
                auto first = co_await (store.execute_command(std::move(echo)) ||
                                       soon.async_wait(asio::experimental::as_tuple(asio::use_awaitable)));
                if (first.index() == 1) {
                    ++cancelled;
                    continue;
                }
                const auto& got = std::get<0>(first);
                if (got) {
                    ++answered;
                    if (!got.value().is_string() || got.value().text != word)
                        ++mismatched;
                }
            }
            // After all that, a plain request still gets its own answer.
            auto last_echo = dl::redis::resp::command({"ECHO", "last"});
            auto last = co_await store.execute_command(std::move(last_echo));
            if (!last || last.value().text != "last")
                ++mismatched;
            if (++finished == workers)
                store.disconnect();
        }, asio::detached);
    run_on_four_threads(io, 60s);
    CHECK(finished == workers);
    CHECK(mismatched == 0);
    // Both outcomes happened, or the test did not test the race.
    CHECK(answered > 0);
    CHECK(cancelled > 0);
}
