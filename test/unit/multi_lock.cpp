// Multi-resource locks: sorted order, all or nothing, no deadlock.
#include "eventually.hpp"
#include "support.hpp"

#include <asio/bind_cancellation_slot.hpp>
#include <asio/cancellation_signal.hpp>

#include <memory>
#include <optional>
#include <variant>

using namespace test;

TEST_CASE("A->B and B->A transfers finish: sorted multi-lock cannot deadlock", "[multi]")
{
    asio::io_context io;
    dl::memory::store store{io};
    dl::memory::fenced_register<long> a{1000}, b{1000};
    int finished = 0;
    auto transfer = [&](std::string from, std::string to) -> asio::awaitable<void> {
        for (int i = 0; i < 40; ++i) {
            auto ids = dl::resources(from, to);
            auto both = co_await dl::lock_all(store, ids, {.ttl = 10s},
                                              dl::retry::exponential_backoff{.initial = 100us, .max = 2ms});
            REQUIRE(both);
            CHECK(both->resources() == dl::resources("wallet:42", "wallet:7")); // byte-wise order
            auto& src = from == "wallet:42" ? a : b;
            auto& dst = from == "wallet:42" ? b : a;
            const long s = src.read(), d = dst.read();
            co_await asio::post(co_await asio::this_coro::executor, asio::use_awaitable);
            REQUIRE(src.write(*both->fence(from), s - 1));
            REQUIRE(dst.write(*both->fence(to), d + 1));
            {
                auto outcome = co_await both->unlock();
                REQUIRE(outcome);
            }
        }
        ++finished;
    };
    asio::co_spawn(io, transfer("wallet:42", "wallet:7"), asio::detached);
    asio::co_spawn(io, transfer("wallet:7", "wallet:42"), asio::detached);
    asio::co_spawn(io, transfer("wallet:42", "wallet:7"), asio::detached);
    io.run_for(60s);
    CHECK(finished == 3);
    CHECK(a.read() + b.read() == 2000);
    CHECK(a.read() == 1000 - 40);
    CHECK(store.live_locks() == 0);
}

TEST_CASE("multi-lock is all or nothing", "[multi]")
{
    asio::io_context io;
    dl::memory::store store{io};
    run(io, [&]() -> asio::awaitable<void> {
        dl::basic_distributed_mutex<dl::memory::store> other{store, "c"};
        auto c = co_await other.lock();
        REQUIRE(c);
        auto ids = dl::resources("c", "a", "b", "a");
        dl::basic_multi_lock<dl::memory::store, dl::retry::none> set{store, ids};
        CHECK(set.ordered_resources() == dl::resources("a", "b", "c"));
        auto r = co_await set.lock();
        REQUIRE_FALSE(r);
        CHECK(r.error() == dl::errc::contended);
        CHECK(store.live_locks() == 1); // only the other holder's "c"
        {
            auto outcome = co_await c->unlock();
            REQUIRE(outcome);
        }
        auto ok = co_await set.lock();
        REQUIRE(ok);
        CHECK(ok->size() == 3);
        CHECK(ok->valid());
        CHECK(ok->fence("b").has_value());
        CHECK_FALSE(ok->fence("zzz").has_value());
        {
            auto outcome = co_await ok->unlock();
            REQUIRE(outcome);
        }
        CHECK(store.live_locks() == 0);
    });
}

TEST_CASE("a multi-lock cancelled while waiting releases what it took", "[multi][cancel]")
{
    asio::io_context io;
    dl::memory::store store{io};
    run(io, [&]() -> asio::awaitable<void> {
        dl::basic_distributed_mutex<dl::memory::store> other{store, "b"};
        auto b = co_await other.lock();
        REQUIRE(b);
        auto ids = dl::resources("a", "b");
        dl::basic_multi_lock<dl::memory::store> set{store, ids};
        asio::cancellation_signal cancel;
        std::optional<dl::result<dl::multi_lease>> got;
        asio::co_spawn(co_await asio::this_coro::executor, set.lock(),
                       asio::bind_cancellation_slot(cancel.slot(), [&](std::exception_ptr, dl::result<dl::multi_lease> r) {
                           got = std::move(r);
                       }));
        co_await eventually("\"a\" is taken while \"b\" is awaited",
                            [&] { return store.inspect("a").has_value(); });
        CHECK_FALSE(got);
        cancel.emit(asio::cancellation_type::terminal);
        co_await eventually("the cancelled multi-lock completes", [&] { return got.has_value(); });
        REQUIRE_FALSE(*got);
        CHECK(got->error() == dl::errc::cancelled);
        CHECK_FALSE(store.inspect("a").has_value());
        {
            auto outcome = co_await b->unlock();
            REQUIRE(outcome);
        }
    });
}

TEST_CASE("one deadline covers the whole set", "[multi][deadline]")
{
    dl::manual_clock clock;
    asio::io_context io;
    dl::memory::store store{io};
    run(io, [&]() -> asio::awaitable<void> {
        dl::basic_distributed_mutex<dl::memory::store> other{store, "b", {.ttl = 60s}};
        auto b = co_await other.lock();
        REQUIRE(b);
        auto ids = dl::resources("a", "b");
        dl::basic_multi_lock<dl::memory::store> set{store, ids, {.ttl = 60s},
                                                   dl::retry::exponential_backoff{.deadline = 1s}};
        const auto start = clock.now();
        std::optional<dl::result<dl::multi_lease>> got;
        asio::co_spawn(co_await asio::this_coro::executor, set.lock(),
                       [&](std::exception_ptr, dl::result<dl::multi_lease> r) { got = std::move(r); });
        co_await eventually("the multi-lock completes", [&] { return got.has_value(); },
                            {.max = 100, .each = 50ms, .clock = &clock});
        REQUIRE_FALSE(*got);
        CHECK(got->error() == dl::errc::timeout);
        CHECK(clock.now() - start <= 1s + 50ms);
        CHECK_FALSE(store.inspect("a").has_value());
    });
}

TEST_CASE("multi-lock never hands over a set whose first lease ran out while it waited for the next", "[multi]")
{
    dl::manual_clock clock;
    asio::io_context io;
    dl::memory::store store{io};
    run(io, [&]() -> asio::awaitable<void> {
        dl::basic_distributed_mutex<dl::memory::store> other{store, "b"};
        auto b = co_await other.lock();
        REQUIRE(b);
        std::optional<dl::result<dl::multi_lease>> outcome;
        asio::co_spawn(
            co_await asio::this_coro::executor,
            [](dl::memory::store& s) -> asio::awaitable<dl::result<dl::multi_lease>> {
                co_return co_await dl::lock_all(s, dl::resources("a", "b"), {.ttl = 1s},
                                                dl::retry::fixed{.delay = 100ms, .deadline = 30s});
            }(store),
            [&](std::exception_ptr, dl::result<dl::multi_lease> r) { outcome = std::move(r); });
        // "a" is taken at once, then its TTL runs out while "b" is still held.
        co_await test::advance(clock, 1500ms);
        CHECK_FALSE(outcome);
        CHECK(store.current_fence("a") == 1);
        co_await b->unlock();
        co_await eventually("the set is taken once \"b\" is free", [&] { return outcome.has_value(); },
                            {.max = 10, .each = 100ms, .clock = &clock});
        REQUIRE(*outcome);
        auto& set = outcome->value();
        CHECK(set.valid());
        CHECK(set.fence("a") == std::optional<dl::fence_token>{2}); // taken again
        co_await set.unlock();
    });
    CHECK(store.live_locks() == 0);
}

namespace {
// Moves a manual clock to the multi-lock's deadline at one precise point: inside the
// lock on the second resource, after the multi-lock checked the time and before the
// mutex reads the clock for its own deadline check. That is where a real clock can
// cross the deadline; a manual clock only moves when told, so this makes it happen
// every time.
//
// The observer primes the jump when "a" is granted; the multi-lock's copy of its
// policies for the next resource ("b") arms it; the next settings check (the mutex
// validates its renewal policy before reading the clock) fires it.
struct clock_jump {
    enum class state { idle, primed, armed, fired };
    dl::manual_clock* clock = nullptr;
    dl::time_point target{};
    state now = state::idle;
};

struct jump_in_validation {
    using policy_kind = dl::renew_policy_tag;
    std::shared_ptr<clock_jump> jump;

    jump_in_validation() = default;
    explicit jump_in_validation(std::shared_ptr<clock_jump> j) : jump{std::move(j)} {}
    jump_in_validation(const jump_in_validation& other) : jump{other.jump}
    {
        if (jump && jump->now == clock_jump::state::primed)
            jump->now = clock_jump::state::armed;
    }
    jump_in_validation& operator=(const jump_in_validation&) = default;

    std::optional<dl::duration> interval(dl::duration) const noexcept
    {
        if (jump && jump->now == clock_jump::state::armed) {
            jump->now = clock_jump::state::fired;
            jump->clock->advance(jump->target - jump->clock->now());
        }
        return std::nullopt; // no renewal
    }
    std::optional<dl::duration> max_hold_time() const noexcept { return std::nullopt; }
};
} // namespace

TEST_CASE("a multi-lock whose deadline passes between resources times out, never invalid_argument",
          "[multi][deadline]")
{
    dl::manual_clock clock;
    asio::io_context io;
    dl::memory::store store{io};
    auto jump = std::make_shared<clock_jump>();
    jump->clock = &clock;
    jump->target = clock.now() + 1s; // the set's deadline: time stands still until the jump
    // Counted as they come: an event's resource is a view into a mutex that is gone
    // by the time the lock completes.
    auto attempts_on_b = std::make_shared<std::size_t>(0);
    dl::observe::callback prime{[jump, attempts_on_b](const dl::event& e) {
        const auto* a = std::get_if<dl::attempt_event>(&e);
        if (!a)
            return;
        if (a->resource == "b")
            ++*attempts_on_b;
        if (a->resource == "a" && !a->error && jump->now == clock_jump::state::idle)
            jump->now = clock_jump::state::primed;
    }};
    run(io, [&]() -> asio::awaitable<void> {
        // "b" is held elsewhere; "a" is free and granted at once, before the deadline.
        dl::basic_distributed_mutex<dl::memory::store> other{store, "b", {.ttl = 60s}};
        auto b = co_await other.lock();
        REQUIRE(b);
        auto ids = dl::resources("a", "b");
        dl::basic_multi_lock<dl::memory::store, dl::retry::exponential_backoff, jump_in_validation,
                             dl::observe::callback>
            set{store, ids, {.ttl = 60s}, dl::retry::exponential_backoff{.deadline = 1s},
                jump_in_validation{jump}, prime};
        auto got = co_await set.lock();
        // The jump happened where it was meant to (else this test shows nothing).
        REQUIRE(jump->now == clock_jump::state::fired);
        REQUIRE_FALSE(got);
        CHECK(got.error() == dl::errc::timeout);
        // "a" was taken and given back; "b" was never tried, its holder keeps it.
        CHECK(store.current_fence("a") == 1);
        CHECK_FALSE(store.inspect("a").has_value());
        CHECK(store.inspect("b").has_value());
        CHECK(*attempts_on_b == 0);
        auto released = co_await b->unlock();
        CHECK(released);
    });
}
