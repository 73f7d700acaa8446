// Error codes, and bad input rejected before any I/O with no side effect.
#include "eventually.hpp"
#include "support.hpp"

#include <cmath>
#include <cstddef>
#include <limits>

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
    for (int v = 1; v <= static_cast<int>(dl::errc::not_replicated); ++v)
        CHECK(dl::error_category().message(v) != "unknown distlock error");
    // A grant that did not reach the replicas stands on the primary: maybe applied.
    CHECK(std::error_code{dl::errc::not_replicated} == dl::condition::maybe_applied);
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
        const auto start = clock.now();
        co_await eventually("lock_until() completes", [&] { return outcome.has_value(); },
                            {.max = 50, .each = 100ms, .clock = &clock});
        REQUIRE_FALSE(*outcome);
        CHECK(outcome->error() == dl::errc::timeout);
        // It waited out the deadline (clamped, not wrapped to a negative or zero wait).
        CHECK(clock.now() - start >= 2s);
    });
}

// -- Every setting at its extremes ---------------------------------------------------
//
// Each row is one setting at a value that must be refused (or, in the "accepted"
// tables, at the last value that must still work). A refused lock has to fail with
// invalid_argument before any I/O: these tests also run under UBSan
// (-fno-sanitize-recover=all), where an overflow on the way to a refusal aborts.

namespace {
using dl::duration;
using dl::time_point;
constexpr auto not_a_number = std::numeric_limits<double>::quiet_NaN();
constexpr auto infinity = std::numeric_limits<double>::infinity();

template <class Settings>
struct row {
    const char* name;
    Settings settings;
};

// Locks once through lock() and once through try_lock() (or only through
// lock_until(deadline) when one is given) and expects invalid_argument from each,
// with no store operation made: a fault injected beforehand is still pending
// afterwards (an attempt would have used it up), the observer saw no attempt, and
// nothing is held.
template <class... Policies>
void expect_refused_before_io(const dl::lock_options& options, std::optional<time_point> deadline,
                              Policies... policies)
{
    asio::io_context io;
    dl::memory::store store{io};
    recorder rec;
    dl::basic_distributed_mutex<dl::memory::store, Policies..., dl::observe::callback> m{
        store, "r", options, policies..., rec.observer()};
    if (!deadline)
        CHECK(m.validate() == dl::errc::invalid_argument);
    store.fail_next(dl::memory::fault::unavailable);
    run(io, [&]() -> asio::awaitable<void> {
        if (deadline) {
            auto r = co_await m.lock_until(*deadline);
            REQUIRE_FALSE(r);
            CHECK(r.error() == dl::errc::invalid_argument);
        } else {
            auto r = co_await m.lock();
            REQUIRE_FALSE(r);
            CHECK(r.error() == dl::errc::invalid_argument);
            auto t = co_await m.try_lock();
            REQUIRE_FALSE(t);
            CHECK(t.error() == dl::errc::invalid_argument);
        }
        auto probe = co_await store.put_if_absent("probe", dl::owner_token::generate(), 1s);
        REQUIRE_FALSE(probe);
        CHECK(probe.error() == dl::errc::store_unavailable); // the fault was still pending
    });
    CHECK(rec.of<dl::attempt_event>().empty());
    CHECK(rec.of<dl::wait_event>().empty());
    CHECK(store.live_locks() == 0);
    CHECK(store.current_fence("r") == 0);
}

// The boundary values that are still valid: the lock is taken (the resource is free).
template <class... Policies>
void expect_accepted(const dl::lock_options& options, std::optional<time_point> deadline, Policies... policies)
{
    asio::io_context io;
    dl::memory::store store{io};
    dl::basic_distributed_mutex<dl::memory::store, Policies...> m{store, "r", options, policies...};
    if (!deadline)
        CHECK_FALSE(m.validate());
    run(io, [&]() -> asio::awaitable<void> {
        std::optional<dl::result<dl::lease>> r;
        if (deadline)
            r = co_await m.lock_until(*deadline);
        else
            r = co_await m.lock();
        REQUIRE(*r);
        CHECK(store.current_fence("r") == 1);
        auto released = co_await (*r)->unlock();
        CHECK(released);
    });
}
} // namespace

TEST_CASE("lock options at their extremes are refused before any I/O", "[errors][input][extremes]")
{
    // Time stands still: the "margin = ttl - 1ns" row leaves 1 ns of validity, which
    // a real clock would use up before the grant arrives.
    dl::manual_clock clock;
    const duration big = duration::max(), small = duration::min();
    const std::vector<row<dl::lock_options>> refused{
        {"ttl = duration::min()", {.ttl = small}},
        {"ttl = -1ns", {.ttl = -1ns}},
        {"ttl = 0", {.ttl = 0ns}},
        {"ttl = min_ttl - 1ns", {.ttl = dl::min_ttl - 1ns, .drift_factor = 0, .drift_floor = 0ns}},
        {"ttl = max_ttl + 1ns", {.ttl = dl::max_ttl + 1ns}},
        {"ttl = max_wait + 1ns", {.ttl = dl::max_wait + 1ns}},
        {"ttl = duration::max()", {.ttl = big}},
        {"drift_factor = NaN", {.drift_factor = not_a_number}},
        {"drift_factor = +inf", {.drift_factor = infinity}},
        {"drift_factor = -inf", {.drift_factor = -infinity}},
        {"drift_factor = 1", {.drift_factor = 1.0}},
        {"drift_factor = -denormal", {.drift_factor = -std::numeric_limits<double>::denorm_min()}},
        {"drift_factor = DBL_MAX", {.drift_factor = std::numeric_limits<double>::max()}},
        {"drift_factor = lowest", {.drift_factor = std::numeric_limits<double>::lowest()}},
        {"drift_floor = duration::min()", {.drift_floor = small}},
        {"drift_floor = -1ns", {.drift_floor = -1ns}},
        {"drift_floor = ttl", {.ttl = 1s, .drift_factor = 0, .drift_floor = 1s}},
        {"drift_floor = max_wait + 1ns", {.drift_floor = dl::max_wait + 1ns}},
        // ttl * factor + floor overflowed to a negative margin that passed.
        {"drift_floor = duration::max()", {.drift_floor = big}},
        {"drift_floor = duration::max() - ttl * factor",
         {.ttl = 10s, .drift_factor = 0.5, .drift_floor = big - 4s}},
        {"margin = ttl exactly", {.ttl = 10s, .drift_factor = 0.5, .drift_floor = 5s}},
        {"margin = ttl + 1ns", {.ttl = 10s, .drift_factor = 0.5, .drift_floor = 5s + 1ns}},
    };
    for (const auto& r : refused) {
        INFO(r.name);
        expect_refused_before_io(r.settings, std::nullopt);
    }

    const std::vector<row<dl::lock_options>> accepted{
        {"ttl = min_ttl, no margin", {.ttl = dl::min_ttl, .drift_factor = 0, .drift_floor = 0ns}},
        {"ttl = max_ttl", {.ttl = dl::max_ttl}},
        {"margin = ttl - 1ns", {.ttl = 10s, .drift_factor = 0.5, .drift_floor = 5s - 1ns}},
        {"drift_floor = 0", {.drift_floor = 0ns}},
    };
    for (const auto& r : accepted) {
        INFO(r.name);
        expect_accepted(r.settings, std::nullopt);
    }
}

TEST_CASE("lock_options::drift() saturates instead of overflowing", "[errors][input][extremes]")
{
    // Named first: a braced list with commas cannot go inside a Catch macro.
    const dl::lock_options usual{.ttl = 10s, .drift_factor = 0.01, .drift_floor = 2ms};
    const dl::lock_options huge_floor{.drift_floor = duration::max()};
    const dl::lock_options lowest_floor{.drift_floor = duration::min()};
    const dl::lock_options huge_ttl{.ttl = duration::max(), .drift_factor = 2.0};
    const dl::lock_options lowest_ttl{.ttl = duration::min(), .drift_factor = 2.0};
    const dl::lock_options nan_factor{.drift_factor = not_a_number};
    const dl::lock_options below_min{.ttl = duration::min(), .drift_factor = 1.0, .drift_floor = -1ns};
    CHECK(usual.drift() == 102ms);
    CHECK(huge_floor.drift() == duration::max());
    CHECK(lowest_floor.drift() == 100ms + duration::min());
    CHECK(huge_ttl.drift() == duration::max());
    CHECK(lowest_ttl.drift() == duration::min());
    CHECK(nan_factor.drift() == duration::max());
    CHECK(below_min.drift() == duration::min());
}

TEST_CASE("retry::fixed at its extremes is refused before any I/O", "[errors][input][extremes]")
{
    using dl::retry::fixed;
    const std::vector<row<fixed>> refused{
        {"delay = duration::min()", {.delay = duration::min()}},
        {"delay = -1ns", {.delay = -1ns}},
        // A zero delay retries in a busy loop (and never lets a manual clock move).
        {"delay = 0", {.delay = 0ns}},
        {"delay = max_wait + 1ns", {.delay = dl::max_wait + 1ns}},
        {"delay = duration::max()", {.delay = duration::max()}},
        {"deadline = duration::min()", {.deadline = duration::min()}},
        {"deadline = -1ns", {.deadline = -1ns}},
        {"deadline = 0", {.deadline = 0ns}},
        {"deadline = max_wait + 1ns", {.deadline = dl::max_wait + 1ns}},
        {"deadline = duration::max()", {.deadline = duration::max()}},
    };
    for (const auto& r : refused) {
        INFO(r.name);
        expect_refused_before_io({}, std::nullopt, r.settings);
    }
    const std::vector<row<fixed>> accepted{
        {"delay = 1ns", {.delay = 1ns}},
        {"delay = max_wait", {.delay = dl::max_wait}},
        {"deadline = 1ns", {.deadline = 1ns}},
        {"deadline = max_wait", {.deadline = dl::max_wait}},
        {"max_attempts = SIZE_MAX", {.max_attempts = std::numeric_limits<std::size_t>::max()}},
        {"max_attempts = 1", {.max_attempts = 1}},
    };
    for (const auto& r : accepted) {
        INFO(r.name);
        expect_accepted({}, std::nullopt, r.settings);
    }
}

TEST_CASE("retry::exponential_backoff at its extremes is refused before any I/O", "[errors][input][extremes]")
{
    using dl::retry::exponential_backoff;
    using dl::retry::jitter;
    const std::vector<row<exponential_backoff>> refused{
        {"initial = duration::min()", {.initial = duration::min()}},
        {"initial = -1ns", {.initial = -1ns}},
        // Zero grows to zero at any multiplier: a busy loop.
        {"initial = 0", {.initial = 0ns}},
        {"initial = max_wait + 1ns", {.initial = dl::max_wait + 1ns, .max = dl::max_wait + 1ns}},
        {"initial = duration::max()", {.initial = duration::max(), .max = duration::max()}},
        {"max = duration::min()", {.max = duration::min()}},
        {"max = -1ns", {.max = -1ns}},
        {"max = 0", {.max = 0ns}},
        {"max = initial - 1ns", {.initial = 10ms, .max = 10ms - 1ns}},
        {"max = max_wait + 1ns", {.max = dl::max_wait + 1ns}},
        {"max = duration::max()", {.max = duration::max()}},
        {"multiplier = NaN", {.multiplier = not_a_number}},
        {"multiplier = +inf", {.multiplier = infinity}},
        {"multiplier = -inf", {.multiplier = -infinity}},
        {"multiplier = lowest", {.multiplier = std::numeric_limits<double>::lowest()}},
        {"multiplier = -1", {.multiplier = -1.0}},
        {"multiplier = 0", {.multiplier = 0.0}},
        {"multiplier just below 1", {.multiplier = std::nextafter(1.0, 0.0)}},
        {"jitter out of range", {.jitter = static_cast<jitter>(42)}},
        {"jitter negative", {.jitter = static_cast<jitter>(-1)}},
        {"deadline = duration::min()", {.deadline = duration::min()}},
        {"deadline = -1ns", {.deadline = -1ns}},
        {"deadline = 0", {.deadline = 0ns}},
        {"deadline = max_wait + 1ns", {.deadline = dl::max_wait + 1ns}},
        {"deadline = duration::max()", {.deadline = duration::max()}},
    };
    for (const auto& r : refused) {
        INFO(r.name);
        expect_refused_before_io({}, std::nullopt, r.settings);
    }
    const std::vector<row<exponential_backoff>> accepted{
        {"initial = 1ns", {.initial = 1ns}},
        {"initial = max = max_wait", {.initial = dl::max_wait, .max = dl::max_wait}},
        {"multiplier = 1", {.multiplier = 1.0}},
        {"multiplier = DBL_MAX", {.multiplier = std::numeric_limits<double>::max()}},
        {"jitter = decorrelated", {.jitter = jitter::decorrelated}},
        {"max_attempts = SIZE_MAX", {.max_attempts = std::numeric_limits<std::size_t>::max()}},
        {"deadline = max_wait", {.deadline = dl::max_wait}},
    };
    for (const auto& r : accepted) {
        INFO(r.name);
        expect_accepted({}, std::nullopt, r.settings);
    }
}

TEST_CASE("renew::watchdog at its extremes is refused before any I/O", "[errors][input][extremes]")
{
    using dl::renew::watchdog;
    const dl::lock_options ten_seconds{.ttl = 10s}; // margin 102 ms: validity 9898 ms
    const std::vector<row<watchdog>> refused{
        {"every = duration::min()", {.every = duration::min()}},
        // Was taken as "TTL / 3": renewal on another schedule than the one asked for.
        {"every = -1ns", {.every = -1ns}},
        {"every = validity", {.every = 10s - 102ms}},
        {"every = ttl", {.every = 10s}},
        {"every = max_wait + 1ns", {.every = dl::max_wait + 1ns}},
        {"every = duration::max()", {.every = duration::max()}},
        {"max_hold = duration::min()", {.max_hold = duration::min()}},
        {"max_hold = -1ns", {.max_hold = -1ns}},
        {"max_hold = 0", {.max_hold = 0ns}},
        {"max_hold = max_wait + 1ns", {.max_hold = dl::max_wait + 1ns}},
        {"max_hold = duration::max()", {.max_hold = duration::max()}},
    };
    for (const auto& r : refused) {
        INFO(r.name);
        expect_refused_before_io(ten_seconds, std::nullopt, r.settings);
    }
    const std::vector<row<watchdog>> accepted{
        {"every = 0 (ttl / 3)", {.every = 0ns}},
        {"every = validity - 1ns", {.every = 10s - 102ms - 1ns}},
        {"max_hold = 1ns", {.max_hold = 1ns}},
        {"max_hold = max_wait", {.max_hold = dl::max_wait}},
    };
    for (const auto& r : accepted) {
        INFO(r.name);
        expect_accepted(ten_seconds, std::nullopt, r.settings);
    }
}

TEST_CASE("lock_until deadlines at their extremes are refused before any I/O", "[errors][input][extremes]")
{
    // Time stands still, so "now" below is the instant lock_until() checks against.
    dl::manual_clock clock;
    const auto now = clock.now();
    const std::vector<row<time_point>> refused{
        {"time_point::min()", time_point::min()},
        {"now - 1ns", now - 1ns},
        {"now", now},
        {"now + max_wait + 1ns", now + dl::max_wait + 1ns},
        {"time_point::max()", time_point::max()},
    };
    for (const auto& r : refused) {
        INFO(r.name);
        expect_refused_before_io({}, r.settings);
        // The retry policy's own deadline does not matter: lock_until's replaces it.
        expect_refused_before_io({}, r.settings, dl::retry::fixed{.delay = 1ms, .deadline = dl::max_wait});
    }
    const std::vector<row<time_point>> accepted{
        {"now + 1ns", now + 1ns},
        {"now + max_wait", now + dl::max_wait},
    };
    for (const auto& r : accepted) {
        INFO(r.name);
        expect_accepted({}, r.settings);
    }
}

namespace {

// Two stores with the same primitive, one taking diagnostics and one not.
struct talkative_store {
    asio::awaitable<dl::result<dl::fence_token>> put_if_absent(std::string_view, const dl::owner_token&, dl::duration,
                                                               dl::diagnostics* diag = nullptr)
    {
        if (diag)
            diag->set_server_message("refused: read-only");
        co_return dl::errc::store_unavailable;
    }
};
struct quiet_store {
    int calls = 0;
    asio::awaitable<dl::result<dl::fence_token>> put_if_absent(std::string_view, const dl::owner_token&, dl::duration)
    {
        ++calls;
        co_return dl::errc::store_unavailable;
    }
};

} // namespace

TEST_CASE("diagnostics: a primitive that takes them gets the caller's; one that does not is called without",
          "[errors]")
{
    asio::io_context io;
    run(io, [&]() -> asio::awaitable<void> {
        dl::diagnostics diag;
        const auto owner = dl::owner_token::generate();
        talkative_store talkative;
        const dl::lock_request r{"res", owner, std::chrono::seconds{1}, &diag};
        auto a = co_await DISTLOCK_DETAIL_DIAGNOSED(r.diag, talkative.put_if_absent, r.resource, r.owner, r.ttl);
        CHECK(a.error() == dl::errc::store_unavailable);
        CHECK(diag.server_message() == "refused: read-only");
        CHECK(diag.client_message().empty());
        CHECK(diag.to_string() == "refused: read-only");

        quiet_store quiet;
        auto b = co_await DISTLOCK_DETAIL_DIAGNOSED(r.diag, quiet.put_if_absent, r.resource, r.owner, r.ttl);
        CHECK(b.error() == dl::errc::store_unavailable);
        CHECK(quiet.calls == 1);

        diag.set_client_message("no reply from 127.0.0.1:1 within the request timeout");
        CHECK(diag.to_string() == "server: refused: read-only; client: no reply from 127.0.0.1:1 within the request timeout");
        diag.clear();
        CHECK(diag.empty());
    });
}
