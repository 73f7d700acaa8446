// Error codes, and bad input rejected before any I/O with no side effect.
#include "support.hpp"

using namespace test;
using memory_mutex = dl::basic_distributed_mutex<dl::memory::store>;

TEST_CASE("error codes have the distlock category and say what happened", "[errors]")
{
    const std::error_code ec = dl::errc::timeout;
    CHECK(ec.category().name() == std::string{"distlock"});
    CHECK(ec.message().find("deadline") != std::string::npos);
    CHECK(ec == dl::errc::timeout);
    CHECK(ec != dl::errc::contended);
    // One category instance, whichever header asked.
    CHECK(&dl::error_category() == &std::error_code{dl::errc::contended}.category());
    for (int v = 1; v <= static_cast<int>(dl::errc::auth_failed); ++v)
        CHECK(dl::error_category().message(v) != "unknown distlock error");
}

namespace {
// Locks `m` once and expects invalid_argument with nothing touched in the store.
void expect_rejected(asio::io_context& io, dl::memory::store& store, auto& m, const std::string& probe)
{
    run(io, [&]() -> asio::awaitable<void> {
        auto r = co_await m.lock();
        REQUIRE_FALSE(r);
        CHECK(r.error() == dl::errc::invalid_argument);
        auto t = co_await m.try_lock();
        REQUIRE_FALSE(t);
        CHECK(t.error() == dl::errc::invalid_argument);
    });
    CHECK(store.live_locks() == 0);
    CHECK(store.current_fence(probe) == 0);
}
} // namespace

TEST_CASE("bad input gives invalid_argument and no side effect", "[errors][input]")
{
    asio::io_context io;
    dl::memory::store store{io};

    SECTION("empty resource id")
    {
        memory_mutex m{store, ""};
        expect_rejected(io, store, m, "");
    }
    SECTION("resource id over the limit")
    {
        memory_mutex m{store, std::string(dl::max_resource_size + 1, 'x')};
        expect_rejected(io, store, m, std::string(dl::max_resource_size + 1, 'x'));
    }
    SECTION("TTL of zero")
    {
        memory_mutex m{store, "r", {.ttl = 0s}};
        expect_rejected(io, store, m, "r");
    }
    SECTION("negative TTL")
    {
        memory_mutex m{store, "r", {.ttl = -5s}};
        expect_rejected(io, store, m, "r");
    }
    SECTION("TTL beyond the maximum")
    {
        memory_mutex m{store, "r", {.ttl = dl::max_ttl + 1ms}};
        expect_rejected(io, store, m, "r");
    }
    SECTION("TTL below one millisecond")
    {
        memory_mutex m{store, "r", {.ttl = 500us}};
        expect_rejected(io, store, m, "r");
    }
    SECTION("drift factor outside [0, 1)")
    {
        memory_mutex a{store, "r", {.ttl = 1s, .drift_factor = 1.0}};
        expect_rejected(io, store, a, "r");
        memory_mutex b{store, "r", {.ttl = 1s, .drift_factor = -0.1}};
        expect_rejected(io, store, b, "r");
    }
    SECTION("safety margin that leaves no validity")
    {
        memory_mutex m{store, "r", {.ttl = 2ms, .drift_factor = 0.01, .drift_floor = 2ms}};
        expect_rejected(io, store, m, "r");
    }
    SECTION("renew interval not below the TTL")
    {
        dl::basic_distributed_mutex<dl::memory::store, dl::renew::watchdog> m{
            store, "r", {.ttl = 1s}, dl::renew::watchdog{.every = 1s}};
        expect_rejected(io, store, m, "r");
    }
    SECTION("retry deadline of zero")
    {
        memory_mutex m{store, "r", {}, dl::retry::exponential_backoff{.deadline = 0s}};
        expect_rejected(io, store, m, "r");
    }
    SECTION("backoff with max below initial")
    {
        memory_mutex m{store, "r", {}, dl::retry::exponential_backoff{.initial = 1s, .max = 1ms}};
        expect_rejected(io, store, m, "r");
    }
    SECTION("durations that would overflow the clock")
    {
        memory_mutex deadline{store, "r", {}, dl::retry::exponential_backoff{.deadline = dl::duration::max()}};
        expect_rejected(io, store, deadline, "r");
        memory_mutex cap{store, "r", {}, dl::retry::exponential_backoff{.max = dl::duration::max()}};
        expect_rejected(io, store, cap, "r");
        dl::basic_distributed_mutex<dl::memory::store, dl::retry::fixed> fixed{
            store, "r", {}, dl::retry::fixed{.delay = dl::max_wait + 1s}};
        expect_rejected(io, store, fixed, "r");
        dl::basic_distributed_mutex<dl::memory::store, dl::renew::watchdog> hold{
            store, "r", {.ttl = 1s}, dl::renew::watchdog{.max_hold = dl::duration::max()}};
        expect_rejected(io, store, hold, "r");
    }
    SECTION("quorum of zero nodes")
    {
        dl::quorum<dl::memory::store> none{std::span<dl::memory::store* const>{}};
        dl::basic_distributed_mutex<dl::quorum<dl::memory::store>> m{none, "r"};
        run(io, [&]() -> asio::awaitable<void> {
            auto r = co_await m.lock();
            REQUIRE_FALSE(r);
            CHECK(r.error() == dl::errc::invalid_argument);
        });
    }
    SECTION("deadline in the past")
    {
        memory_mutex m{store, "r"};
        run(io, [&]() -> asio::awaitable<void> {
            auto r = co_await m.lock_until(dl::clock::now() - 1s);
            REQUIRE_FALSE(r);
            CHECK(r.error() == dl::errc::invalid_argument);
        });
        CHECK(store.live_locks() == 0);
        CHECK(store.current_fence("r") == 0);
    }
    SECTION("empty multi-lock set")
    {
        run(io, [&]() -> asio::awaitable<void> {
            std::vector<std::string> none;
            auto r = co_await dl::lock_all(store, none);
            REQUIRE_FALSE(r);
            CHECK(r.error() == dl::errc::invalid_argument);
        });
    }
    SECTION("multi-lock with one bad id takes nothing")
    {
        run(io, [&]() -> asio::awaitable<void> {
            auto ids = dl::resources("a", "", "c");
            auto r = co_await dl::lock_all(store, ids);
            REQUIRE_FALSE(r);
            CHECK(r.error() == dl::errc::invalid_argument);
        });
        CHECK(store.live_locks() == 0);
        CHECK(store.current_fence("a") == 0);
    }
}

TEST_CASE("resource ids are binary-safe", "[input]")
{
    asio::io_context io;
    dl::memory::store store{io};
    const std::vector<std::string> ids{std::string{"a\0b", 3}, std::string{"a\0c", 3}, "with space",
                                       "new\nline", "{braces}", std::string(dl::max_resource_size, '\xff'),
                                       "\x01\x02\x7f"};
    run(io, [&]() -> asio::awaitable<void> {
        std::vector<dl::lease> held;
        for (const auto& id : ids) {
            memory_mutex m{store, id};
            auto l = co_await m.try_lock();
            REQUIRE(l);
            CHECK(l->resource() == id);
            held.push_back(std::move(*l));
        }
        // Ids that differ only after a NUL byte are distinct locks.
        CHECK(store.live_locks() == ids.size());
        for (auto& l : held)
            {
                auto outcome = co_await l.unlock();
                CHECK(outcome);
            }
    });
    CHECK(store.live_locks() == 0);
}

TEST_CASE("owner tokens are random, 128-bit and round-trip through hex", "[input]")
{
    const auto a = dl::owner_token::generate(), b = dl::owner_token::generate();
    CHECK(a != b);
    CHECK_FALSE(a.is_nil());
    CHECK(a.to_hex().size() == 32);
    CHECK(dl::owner_token::from_hex(a.to_hex()) == a);
    CHECK(dl::owner_token::from_hex("zz").is_nil());
    CHECK(dl::owner_token::from_hex(std::string(32, 'g')).is_nil());
    // No two of many tokens collide (a counter or a reused buffer would).
    std::set<dl::owner_token> seen;
    for (int i = 0; i < 5000; ++i)
        CHECK(seen.insert(dl::owner_token::generate()).second);
}

namespace {
// A custom retry policy that asks for an absurd delay: the loop clamps it rather than
// overflow "now + delay" (UBSan would report the overflow).
struct forever {
    using policy_kind = dl::retry_policy_tag;
    std::optional<dl::duration> next_delay(const dl::attempt&) const { return dl::duration::max(); }
};
} // namespace

TEST_CASE("a custom retry delay near the clock's range is clamped, not overflowed", "[errors][input]")
{
    dl::manual_clock clock;
    asio::io_context io;
    dl::memory::store store{io};
    run(io, [&]() -> asio::awaitable<void> {
        dl::basic_distributed_mutex<dl::memory::store> holder{store, "r"};
        auto held = co_await holder.lock();
        REQUIRE(held);
        dl::basic_distributed_mutex<dl::memory::store, forever> waiter{store, "r"};
        std::optional<dl::result<dl::lease>> outcome;
        asio::co_spawn(
            co_await asio::this_coro::executor,
            [](dl::basic_distributed_mutex<dl::memory::store, forever> m) -> asio::awaitable<dl::result<dl::lease>> {
                co_return co_await m.lock_until(dl::clock::now() + 2s);
            }(waiter),
            [&](std::exception_ptr, dl::result<dl::lease> r) { outcome = std::move(r); });
        co_await test::advance(clock, 2500ms);
        REQUIRE(outcome);
        REQUIRE_FALSE(*outcome);
        CHECK(outcome->error() == dl::errc::timeout);
    });
}
