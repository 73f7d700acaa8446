// Completion tokens other than coroutines, and the blocking Lockable adapter.
#include "support.hpp"

#include <asio/post.hpp>

#include <atomic>
#include <future>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

using namespace test;
using memory_mutex = dl::basic_distributed_mutex<dl::memory::store>;

TEST_CASE("async_lock accepts a callback and never calls it inline", "[async]")
{
    asio::io_context io;
    dl::memory::store store{io};
    memory_mutex m{store, "r"};
    bool called = false;
    std::error_code got_ec;
    dl::lease got;
    m.async_lock([&](std::error_code ec, dl::lease l) {
        called = true;
        got_ec = ec;
        got = std::move(l);
    });
    CHECK_FALSE(called); // posted, not run from the initiating function
    io.run();
    REQUIRE(called);
    CHECK_FALSE(got_ec);
    REQUIRE(got);
    CHECK(got.fence() == 1);

    bool second_called = false;
    m.async_try_lock([&](std::error_code ec, dl::lease l) {
        second_called = true;
        CHECK(ec == dl::errc::contended);
        CHECK_FALSE(l);
    });
    io.restart();
    io.run();
    CHECK(second_called);

    bool unlocked = false;
    got.async_unlock([&](std::error_code ec) { unlocked = !ec; });
    io.restart();
    io.run();
    CHECK(unlocked);
    CHECK(store.live_locks() == 0);
}

TEST_CASE("async_lock with use_future, from a thread that is not the io thread", "[async][concurrency]")
{
    dl::io_thread worker;
    dl::memory::store store{worker.context()};
    memory_mutex m{store, "r"};
    std::future<dl::lease> f = m.async_lock(asio::use_future);
    dl::lease l = f.get();
    CHECK(l.fence() == 1);
    // Shared: get() keeps the state (and the exception in it) alive on this thread
    // while the handler reads it, instead of leaving its last release to the io thread.
    std::shared_future<dl::lease> busy = m.async_try_lock(asio::use_future).share();
    try {
        busy.get();
        FAIL("a held lock was granted twice");
    } catch (const std::system_error& e) {
        CHECK(e.code() == dl::errc::contended);
    }
    l.async_unlock(asio::use_future).get();
    CHECK(store.live_locks() == 0);
}

TEST_CASE("blocking adapters work with std::scoped_lock across threads", "[blocking][concurrency]")
{
    dl::io_thread worker;
    dl::memory::store store{worker.context()};
    using wallet_mutex = dl::basic_distributed_mutex<dl::memory::store, dl::retry::fixed>;
    dl::memory::fenced_register<long> wallet_a{100}, wallet_b{100};
    std::atomic<int> errors{0}; // Catch's assertions are not thread-safe: count, assert later
    auto move_money = [&](bool forward) {
        dl::blocking<wallet_mutex> a{worker, store, "wallet:42", {.ttl = 10s}, dl::retry::fixed{.delay = 200us}};
        dl::blocking<wallet_mutex> b{worker, store, "wallet:7", {.ttl = 10s}, dl::retry::fixed{.delay = 200us}};
        for (int i = 0; i < 30; ++i) {
            std::scoped_lock both(a, b);
            auto& from = forward ? wallet_a : wallet_b;
            auto& to = forward ? wallet_b : wallet_a;
            const auto f = forward ? a.fence() : b.fence();
            const auto t = forward ? b.fence() : a.fence();
            if (!from.write(f, from.read() - 1) || !to.write(t, to.read() + 1))
                ++errors;
        }
        if (a.last_unlock_error() || b.last_unlock_error())
            ++errors;
    };
    std::thread t1{move_money, true}, t2{move_money, false};
    t1.join();
    t2.join();
    CHECK(errors == 0);
    CHECK(wallet_a.read() == 100);
    CHECK(wallet_b.read() == 100);
    CHECK(store.live_locks() == 0);

    dl::blocking<memory_mutex> c{worker, store, "c"};
    dl::blocking<memory_mutex> c2{worker, store, "c", {}, dl::retry::exponential_backoff{.deadline = 20ms}};
    c.lock();
    CHECK_FALSE(c2.try_lock());
    CHECK_THROWS_AS(c2.lock(), std::system_error);
    c.unlock();
    CHECK(c2.try_lock());
    c2.unlock();
}

TEST_CASE("io_thread::run_sync runs a coroutine on the io thread and waits for it: a store closed from a plain "
          "thread",
          "[blocking][concurrency]")
{
    dl::io_thread worker;
    dl::memory::store store{worker.context()};
    memory_mutex m{store, "run_sync"};
    auto kept = worker.run_sync(m.lock());
    REQUIRE(kept);
    CHECK(worker.run_sync(store.read("run_sync"))->held);
    kept = dl::result<dl::lease>{make_error_code(dl::errc::released)}; // dropped: released in the background
    worker.run_sync(store.close()); // waits for that release
    CHECK(store.live_locks() == 0);
    CHECK(worker.run_sync([]() -> dl::awaitable<int> { co_return 42; }()) == 42);
    // An exception from the coroutine reaches the caller.
    CHECK_THROWS_AS(worker.run_sync([]() -> dl::awaitable<void> {
        throw std::runtime_error{"from the io thread"};
        co_return;
    }()),
                    std::runtime_error);
    // From the io thread itself it would wait for itself: refused.
    std::promise<bool> refused;
    asio::post(worker.context(), [&] {
        try {
            worker.run_sync([]() -> dl::awaitable<void> { co_return; }());
            refused.set_value(false);
        } catch (const std::system_error& e) {
            refused.set_value(e.code() == std::errc::resource_deadlock_would_occur);
        }
    });
    CHECK(refused.get_future().get());
}

TEST_CASE("one blocking mutex is shared between threads as a std::mutex is: each thread's lock has its own lease",
          "[blocking][concurrency]")
{
    dl::io_thread worker;
    dl::memory::store store{worker.context()};
    using wallet_mutex = dl::basic_distributed_mutex<dl::memory::store, dl::retry::fixed>;
    // One pair of objects for every thread, as std::mutex members of a service would be.
    dl::blocking<wallet_mutex> a{worker, store, "wallet:42", {.ttl = 10s}, dl::retry::fixed{.delay = 200us}};
    dl::blocking<wallet_mutex> b{worker, store, "wallet:7", {.ttl = 10s}, dl::retry::fixed{.delay = 200us}};
    dl::memory::fenced_register<long> wallet_a{1000}, wallet_b{1000};
    long moved = 0; // guarded by the two locks
    std::atomic<int> errors{0};
    constexpr int threads = 4, rounds = 25;
    auto move_money = [&](int id) {
        for (int i = 0; i < rounds; ++i) {
            // Alternate the argument order: scoped_lock's deadlock avoidance, over try_lock.
            if ((id + i) % 2 == 0) {
                std::scoped_lock both(a, b);
                if (!a.current() || !b.current() || a.fence() == 0 || b.fence() == 0)
                    ++errors;
                if (!wallet_a.write(a.fence(), wallet_a.read() - 1) || !wallet_b.write(b.fence(), wallet_b.read() + 1))
                    ++errors;
                ++moved;
            } else {
                std::scoped_lock both(b, a);
                if (!wallet_b.write(b.fence(), wallet_b.read() - 1) || !wallet_a.write(a.fence(), wallet_a.read() + 1))
                    ++errors;
                ++moved;
            }
            // Unlocked: this thread holds nothing, whatever the others hold.
            if (a.current() || b.current())
                ++errors;
            if (a.last_unlock_error() || b.last_unlock_error())
                ++errors;
        }
    };
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t)
        pool.emplace_back(move_money, t);
    for (auto& t : pool)
        t.join();
    CHECK(errors == 0);
    CHECK(moved == threads * rounds);
    CHECK(wallet_a.read() + wallet_b.read() == 2000);
    CHECK(store.live_locks() == 0);

    // Locking twice from one thread is refused (never a second lease); another
    // thread's unlock() does not release this thread's lease.
    a.lock();
    CHECK_THROWS_AS(a.lock(), std::system_error);
    CHECK_THROWS_AS(a.try_lock(), std::system_error);
    std::thread{[&] {
        a.unlock(); // holds nothing here: a no-op
        if (a.try_lock()) // the lock is this test thread's
            ++errors;
    }}.join();
    CHECK(errors == 0);
    CHECK(a.current());
    CHECK(store.live_locks() == 1);
    a.unlock();
    CHECK_FALSE(a.current());
    CHECK(store.live_locks() == 0);
}
