// backend::auto_reset_event: the flag behind release wake-ups, a store's close() and
// the quorum fan-out. One set is kept until taken, set() never resumes the waiter
// inline, a deadline and the caller's cancellation end a wait, an io_context destroyed
// during a wait ends the waiting coroutine, and sets from other threads are never lost
// (the [concurrency] cases run under TSan). backend::wakeup, the event with a waiter's
// name: which release messages wake it, and what one named for it carries.
#include "support.hpp"

#include <distlock/backend/auto_reset_event.hpp>
#include <distlock/backend/wakeup.hpp>

#include <asio/bind_cancellation_slot.hpp>
#include <asio/cancellation_signal.hpp>
#include <asio/detached.hpp>
#include <asio/experimental/as_tuple.hpp>

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

using namespace test;
using event = dl::backend::auto_reset_event;

namespace {

// Starts a coroutine that waits on `e` until `until` and records the answer in `got`.
void start_wait(asio::io_context& io, event& e, std::optional<bool>& got,
                dl::time_point until = dl::time_point::max())
{
    asio::co_spawn(
        io, [&e, &got, until]() -> asio::awaitable<void> { got = co_await e.wait(until); }, asio::detached);
}

} // namespace

TEST_CASE("auto_reset_event: a set before the wait is kept, and sets collapse into one", "[event]")
{
    asio::io_context io;
    event e{io.get_executor()};
    e.set();
    e.set();
    std::optional<bool> got;
    start_wait(io, e, got);
    io.run();
    REQUIRE(got);
    CHECK(*got);
    CHECK_FALSE(e.try_take()); // the two sets were one

    e.set();
    CHECK(e.try_take());
    CHECK_FALSE(e.try_take());
}

TEST_CASE("auto_reset_event: set() wakes a waiting coroutine through its executor, not inline", "[event]")
{
    asio::io_context io;
    event e{io.get_executor()};
    std::optional<bool> got;
    start_wait(io, e, got);
    io.poll();
    CHECK_FALSE(got); // waiting
    e.set();
    CHECK_FALSE(got); // a store may call set() under its own lock
    io.restart();
    io.run();
    REQUIRE(got);
    CHECK(*got);
    CHECK_FALSE(e.try_take()); // the waiter took the set
}

TEST_CASE("auto_reset_event: the deadline ends a wait, and a later set is kept for the next one", "[event]")
{
    dl::manual_clock clock;
    asio::io_context io;
    event e{io.get_executor()};
    std::optional<bool> got;
    start_wait(io, e, got, dl::clock::now() + 5s);
    io.poll();
    clock.advance(4s);
    io.restart();
    io.run_for(20ms);
    CHECK_FALSE(got); // not before the deadline
    clock.advance(2s);
    io.restart();
    io.run();
    REQUIRE(got);
    CHECK_FALSE(*got);

    e.set();
    got.reset();
    start_wait(io, e, got, dl::clock::now() + 5s);
    io.restart();
    io.run();
    REQUIRE(got);
    CHECK(*got);
}

TEST_CASE("auto_reset_event: async_wait completes on a set, or at once after one, and leaves the set to try_take",
          "[event]")
{
    // The fan-out's form of the wait: the completion says only that the wait ended;
    // the flag, taken afterwards, says whether it was set.
    asio::io_context io;
    event e{io.get_executor()};
    const auto token = asio::experimental::as_tuple(asio::use_awaitable);
    std::vector<bool> taken;
    int completions = 0;
    asio::co_spawn(
        io,
        [&]() -> asio::awaitable<void> {
            e.set(); // before the wait starts: the wait completes at once
            (void)co_await e.async_wait(dl::time_point::max(), token);
            ++completions;
            taken.push_back(e.try_take());
            (void)co_await e.async_wait(dl::clock::now() + 1ms, token); // nothing sets it
            ++completions;
            taken.push_back(e.try_take());
        },
        asio::detached);
    io.run();
    CHECK(completions == 2);
    CHECK(taken == std::vector<bool>{true, false});

    // A set while the wait is pending ends it, and the set is still there to take.
    io.restart();
    std::optional<bool> after;
    asio::co_spawn(
        io,
        [&]() -> asio::awaitable<void> {
            (void)co_await e.async_wait(dl::time_point::max(), token);
            after = e.try_take();
        },
        asio::detached);
    io.poll();
    CHECK_FALSE(after);
    e.set();
    io.run();
    REQUIRE(after);
    CHECK(*after);
}

TEST_CASE("auto_reset_event: the caller's cancellation ends a wait", "[event]")
{
    asio::io_context io;
    event e{io.get_executor()};
    asio::cancellation_signal cancel;
    std::optional<bool> got;
    asio::co_spawn(io, [&]() -> asio::awaitable<void> { got = co_await e.wait(); },
                   asio::bind_cancellation_slot(cancel.slot(), asio::detached));
    io.poll();
    CHECK_FALSE(got);
    cancel.emit(asio::cancellation_type::terminal);
    io.restart();
    io.run();
    REQUIRE(got);
    CHECK_FALSE(*got);

    e.set(); // not taken by the cancelled wait
    CHECK(e.try_take());
}

TEST_CASE("auto_reset_event: an io_context destroyed during a wait destroys the waiting coroutine and the event it owns",
          "[event]")
{
    // The coroutine owns the event it waits on: a cycle (event -> timer's pending wait
    // -> handler -> frame -> event) that only the io_context's shutdown can end.
    struct owned {
        explicit owned(asio::any_io_executor ex) : e{std::move(ex)} {}
        event e;
    };
    std::weak_ptr<owned> watch;
    bool resumed = false;
    {
        asio::io_context io;
        auto o = std::make_shared<owned>(io.get_executor());
        watch = o;
        asio::co_spawn(
            io,
            [](std::shared_ptr<owned> o, bool& resumed) -> asio::awaitable<void> {
                (void)co_await o->e.wait();
                resumed = true;
            }(std::move(o), resumed),
            asio::detached);
        io.poll();
        REQUIRE_FALSE(watch.expired()); // alive while it waits
    }
    CHECK(watch.expired());
    CHECK_FALSE(resumed); // let go without being resumed
}

TEST_CASE("auto_reset_event: a pending wait keeps run() going until another thread sets it",
          "[event][concurrency]")
{
    asio::io_context io;
    event e{io.get_executor()};
    std::optional<bool> got;
    std::thread::id resumed_on;
    std::atomic<bool> waiting = false;
    asio::co_spawn(
        io,
        [&]() -> asio::awaitable<void> {
            waiting = true;
            got = co_await e.wait();
            resumed_on = std::this_thread::get_id();
        },
        asio::detached);
    std::thread setter{[&] {
        while (!waiting)
            std::this_thread::yield();
        std::this_thread::sleep_for(20ms); // run() would have returned by now without the wait's work
        e.set();
    }};
    io.run(); // returns only once the waiter has been resumed
    setter.join();
    REQUIRE(got);
    CHECK(*got);
    CHECK(resumed_on == std::this_thread::get_id()); // on the io thread, not the setter's
}

TEST_CASE("auto_reset_event: sets from other threads racing with cut-off waits are never lost",
          "[event][concurrency]")
{
    // A consumer coroutine waits for `rounds` sets, each wait cut short by a deadline of
    // zero to 2 ms, so that the deadlines race with the producers' sets; two producer
    // threads take turns and set only once the consumer has counted the previous set.
    // A lost set would leave the consumer short of `rounds` when its time runs out.
    constexpr int rounds = 400;
    asio::io_context io;
    event e{io.get_executor()};
    std::atomic<int> counted = 0;
    std::atomic<bool> stop = false;
    auto producer = [&](int parity) {
        for (int next = parity; next < rounds && !stop; next += 2) {
            while (counted.load() != next && !stop)
                std::this_thread::yield();
            e.set();
        }
    };
    std::thread a{producer, 0}, b{producer, 1};
    const auto give_up = dl::clock::now() + 30s;
    run(io, [&]() -> asio::awaitable<void> {
        int cut = 0;
        while (counted.load() < rounds && dl::clock::now() < give_up) {
            const auto limit = std::chrono::microseconds{(counted.load() * 37 + cut * 11) % 2000};
            if (co_await e.wait(dl::clock::now() + limit))
                ++counted;
            else
                ++cut;
        }
    }, 60s);
    stop = true;
    a.join();
    b.join();
    CHECK(counted.load() == rounds);
    CHECK_FALSE(e.try_take()); // no set beyond the rounds
}

TEST_CASE("wakeup: a waiter wakes for messages naming it or everyone, and keeps what one named for it carries",
          "[event]")
{
    asio::io_context io;
    dl::backend::wakeup named{io.get_executor(), "ab12"};
    CHECK(named.wants("released"));
    CHECK(named.wants("ab12"));
    CHECK(named.wants("ab12:2:77:5"));
    CHECK_FALSE(named.wants("ab1"));
    CHECK_FALSE(named.wants("ab123"));
    CHECK_FALSE(named.wants("ab12x:2:77:5"));
    CHECK_FALSE(named.wants("cd34:2:77:5"));
    named.signal("ab12");
    CHECK(named.try_take());
    CHECK_FALSE(named.take_letter()); // its name alone carries nothing
    named.signal("ab12:2:77:5");
    named.signal("ab12:3:78:6"); // the latest one counts
    CHECK(named.try_take());
    CHECK(named.take_letter() == std::optional<std::string>{"3:78:6"});
    CHECK_FALSE(named.take_letter()); // once
    dl::backend::wakeup anyone{io.get_executor()};
    CHECK(anyone.wants("cd34:2:77:5"));
    anyone.signal("cd34:2:77:5");
    CHECK(anyone.try_take());
    CHECK_FALSE(anyone.take_letter()); // a waiter without a name keeps no letters
}

TEST_CASE("wakeup: letters signalled from another thread reach the waiter whole", "[event][concurrency]")
{
    // A producer thread signals numbered letters, each once the consumer has taken the
    // previous one; the consumer must read every number, in order, in one piece.
    constexpr int rounds = 300;
    asio::io_context io;
    dl::backend::wakeup w{io.get_executor(), "id"};
    std::atomic<int> taken = 0;
    std::atomic<bool> stop = false;
    std::thread producer{[&] {
        for (int n = 1; n <= rounds && !stop; ++n) {
            while (taken.load() != n - 1 && !stop)
                std::this_thread::yield();
            w.signal("id:" + std::to_string(n) + ":" + std::string(static_cast<std::size_t>(n % 40), 'x'));
        }
    }};
    const auto give_up = dl::clock::now() + 30s;
    std::vector<std::string> wrong;
    run(io, [&]() -> asio::awaitable<void> {
        while (taken.load() < rounds && dl::clock::now() < give_up) {
            if (!co_await w.wait(dl::clock::now() + 5ms))
                continue;
            const int n = taken.load() + 1;
            const auto letter = w.take_letter();
            if (letter != std::to_string(n) + ":" + std::string(static_cast<std::size_t>(n % 40), 'x'))
                wrong.push_back(letter.value_or("(none)"));
            ++taken;
        }
    }, 60s);
    stop = true;
    producer.join();
    CHECK(taken.load() == rounds);
    CHECK(wrong.empty());
}
