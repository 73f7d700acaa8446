// backend::finished_before and backend::within: the race between an operation and its
// deadline behind every deadline of the library. The first side to end decides, the
// other is ended and awaited before the caller resumes, the caller's cancellation
// reaches the operation, an exception from the operation reaches the caller, and an
// io_context destroyed during the race lets go of everything it held. The
// [concurrency] case runs races on strands of a two-thread io_context (under TSan).
#include "support.hpp"

#include <distlock/backend/cut_off.hpp>

#include <asio/bind_cancellation_slot.hpp>
#include <asio/cancellation_signal.hpp>
#include <asio/detached.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/post.hpp>
#include <asio/strand.hpp>

#include <atomic>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

using namespace test;

namespace {

// What an operation reports about its own end.
struct op_record {
    bool ended = false;
    std::error_code ec; // its timer wait's answer: operation_aborted when cancelled
};

// An operation that ends when its timer expires at `until`, or when cancelled.
asio::awaitable<void> wait_until(dl::time_point until, op_record& rec)
{
    dl::timer t{co_await asio::this_coro::executor, until};
    auto [ec] = co_await t.async_wait(asio::experimental::as_tuple(asio::use_awaitable));
    rec.ec = ec;
    rec.ended = true;
}

asio::awaitable<int> answer_soon(int value)
{
    co_await asio::post(co_await asio::this_coro::executor, asio::use_awaitable);
    co_return value;
}

asio::awaitable<int> fail_soon()
{
    co_await asio::post(co_await asio::this_coro::executor, asio::use_awaitable);
    throw std::runtime_error{"the operation failed"};
}

} // namespace

TEST_CASE("within: an operation that ends first gives its result, and the deadline's wait ends with it", "[race]")
{
    asio::io_context io;
    std::optional<std::optional<int>> got;
    asio::co_spawn(
        io, [&]() -> asio::awaitable<void> { got = co_await dl::backend::within(answer_soon(42), dl::clock::now() + 1h); },
        asio::detached);
    // run() returns only when no work is left: a deadline timer still waiting for its
    // hour would keep it running.
    io.run_for(30s);
    CHECK(io.stopped());
    REQUIRE(got);
    REQUIRE(*got);
    CHECK(**got == 42);
}

TEST_CASE("finished_before: at the deadline the operation is cancelled and awaited before the answer", "[race]")
{
    dl::manual_clock clock;
    asio::io_context io;
    op_record rec;
    std::optional<bool> first;
    bool op_ended_at_answer = false;
    run(io, [&]() -> asio::awaitable<void> {
        asio::co_spawn(
            co_await asio::this_coro::executor,
            [&]() -> asio::awaitable<void> {
                first = co_await dl::backend::finished_before(wait_until(dl::time_point::max(), rec),
                                                             dl::clock::now() + 5s);
                op_ended_at_answer = rec.ended;
            },
            asio::detached);
        co_await settle();
        co_await test::advance(clock, 4s);
        CHECK_FALSE(first); // not before the deadline
        co_await test::advance(clock, 2s);
        co_await settle();
    });
    REQUIRE(first);
    CHECK_FALSE(*first);
    CHECK(op_ended_at_answer);
    CHECK(rec.ec == asio::error::operation_aborted);
}

TEST_CASE("finished_before: the caller's cancellation reaches the operation and ends the race", "[race]")
{
    asio::io_context io;
    asio::cancellation_signal cancel;
    op_record rec;
    std::optional<bool> first;
    bool op_ended_at_answer = false;
    asio::co_spawn(
        io,
        [&]() -> asio::awaitable<void> {
            first = co_await dl::backend::finished_before(wait_until(dl::time_point::max(), rec),
                                                         dl::clock::now() + 1h);
            op_ended_at_answer = rec.ended;
        },
        asio::bind_cancellation_slot(cancel.slot(), asio::detached));
    io.poll();
    CHECK_FALSE(first);
    cancel.emit(asio::cancellation_type::terminal);
    io.restart();
    io.run_for(30s); // the hour's deadline must have been ended too
    CHECK(io.stopped());
    // Cut off, as by the deadline: the operation's own answer to the cancellation is
    // not taken for a result.
    REQUIRE(first);
    CHECK_FALSE(*first);
    CHECK(op_ended_at_answer);
    CHECK(rec.ec == asio::error::operation_aborted);
}

TEST_CASE("within: an exception from the operation reaches the caller", "[race]")
{
    asio::io_context io;
    std::string caught;
    bool returned = false;
    asio::co_spawn(
        io,
        [&]() -> asio::awaitable<void> {
            try {
                (void)co_await dl::backend::within(fail_soon(), dl::clock::now() + 1h);
                returned = true;
            } catch (const std::runtime_error& e) {
                caught = e.what();
            }
        },
        asio::detached);
    io.run_for(30s);
    CHECK(io.stopped());
    CHECK_FALSE(returned);
    CHECK(caught == "the operation failed");
}

TEST_CASE("finished_before: an operation cut off by its deadline may throw on its way out; the caller is told it was cut off",
          "[race]")
{
    // A cancelled coroutine that awaits anything more throws operation_aborted (Asio's
    // throw-on-cancellation, on by default in the spawned operation): that is the
    // cancellation's own doing, not a failure for the caller to catch.
    dl::manual_clock clock;
    asio::io_context io;
    bool threw_inside = false;
    std::optional<bool> first;
    std::string caught;
    run(io, [&]() -> asio::awaitable<void> {
        auto op = [](bool& threw_inside) -> asio::awaitable<void> {
            op_record rec;
            co_await wait_until(dl::time_point::max(), rec);
            try {
                co_await asio::post(co_await asio::this_coro::executor, asio::use_awaitable);
            } catch (const std::system_error&) {
                threw_inside = true;
                throw;
            }
        };
        asio::co_spawn(
            co_await asio::this_coro::executor,
            [&]() -> asio::awaitable<void> {
                try {
                    first = co_await dl::backend::finished_before(op(threw_inside), dl::clock::now() + 1s);
                } catch (const std::exception& e) {
                    caught = e.what();
                }
            },
            asio::detached);
        co_await settle();
        co_await test::advance(clock, 2s);
        co_await settle();
    });
    CHECK(threw_inside);
    CHECK(caught.empty());
    REQUIRE(first);
    CHECK_FALSE(*first);
}

TEST_CASE("finished_before: an io_context destroyed during the race lets go of the caller and the operation",
          "[race]")
{
    // The caller and the operation each own something; neither may be resumed, and
    // both must be destroyed (ASan's leak check sees anything kept).
    struct owned {};
    std::weak_ptr<owned> caller_watch, op_watch;
    bool resumed = false;
    {
        asio::io_context io;
        auto for_caller = std::make_shared<owned>();
        auto for_op = std::make_shared<owned>();
        caller_watch = for_caller;
        op_watch = for_op;
        asio::co_spawn(
            io,
            [](std::shared_ptr<owned> mine, std::shared_ptr<owned> its, bool& resumed) -> asio::awaitable<void> {
                auto op = [](std::shared_ptr<owned> its) -> asio::awaitable<void> {
                    dl::timer t{co_await asio::this_coro::executor, dl::time_point::max()};
                    (void)co_await t.async_wait(asio::experimental::as_tuple(asio::use_awaitable));
                }(std::move(its));
                (void)co_await dl::backend::finished_before(std::move(op), dl::clock::now() + 1h);
                resumed = true;
            }(std::move(for_caller), std::move(for_op), resumed),
            asio::detached);
        io.poll();
        REQUIRE_FALSE(caller_watch.expired());
        REQUIRE_FALSE(op_watch.expired());
    }
    CHECK(caller_watch.expired());
    CHECK(op_watch.expired());
    CHECK_FALSE(resumed);
}

TEST_CASE("finished_before: races whose sides end together, on strands of a two-thread io_context",
          "[race][concurrency]")
{
    // Each worker races an operation of 0-199 µs against a deadline of 0-199 µs, so
    // that either side may end first, and both may end in the same instant. Whatever
    // the answer, the operation must have ended before it; every race must answer.
    // (Which side wins is the single-threaded cases' to check: here it is timing.)
    constexpr int workers = 4, rounds = 150;
    asio::io_context io;
    std::atomic<int> answered = 0, ended_before_answer = 0;
    for (int w = 0; w < workers; ++w)
        asio::co_spawn(
            asio::make_strand(io),
            [&, w]() -> asio::awaitable<void> {
                for (int i = 0; i < rounds; ++i) {
                    op_record rec;
                    const auto now = dl::clock::now();
                    const auto op_ends = now + std::chrono::microseconds{(i * 37 + w * 11) % 200};
                    const auto deadline = now + std::chrono::microseconds{(i * 53 + w * 7) % 200};
                    (void)co_await dl::backend::finished_before(wait_until(op_ends, rec), deadline);
                    if (rec.ended)
                        ++ended_before_answer;
                    ++answered;
                }
            },
            asio::detached);
    std::thread other{[&] { io.run_for(60s); }};
    io.run_for(60s);
    other.join();
    CHECK(answered.load() == workers * rounds);
    CHECK(ended_before_answer.load() == workers * rounds);
}
