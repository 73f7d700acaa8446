// Retry, renewal and ordering policies; custom policies plug in through the concepts.
#include "eventually.hpp"
#include "pending.hpp"
#include "support.hpp"

#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <numeric>

using namespace test;

TEST_CASE("exponential backoff grows, is capped, and stops after max_attempts", "[policy][retry]")
{
    const dl::retry::exponential_backoff b{.initial = 10ms, .max = 1s, .multiplier = 2.0,
                                           .jitter = dl::retry::jitter::none, .max_attempts = 12};
    CHECK(b.next_delay({.number = 1}) == 10ms);
    CHECK(b.next_delay({.number = 2}) == 20ms);
    CHECK(b.next_delay({.number = 4}) == 80ms);
    CHECK(b.next_delay({.number = 8}) == 1s); // 1280ms capped
    CHECK(b.next_delay({.number = 11}) == 1s);
    CHECK_FALSE(b.next_delay({.number = 12}));
}

TEST_CASE("a fractional multiplier's ceiling is initial * multiplier^(n-1)", "[policy][retry]")
{
    const dl::retry::exponential_backoff b{.initial = 10ms, .max = 1h, .multiplier = 1.5,
                                           .jitter = dl::retry::jitter::none};
    CHECK(b.ceiling(1) == 10ms);
    CHECK(b.ceiling(5) == 50625us); // 1.5^4 = 5.0625, exact in binary
    // Against std::pow, over exponents with different bits set.
    const dl::retry::exponential_backoff slow{.initial = 1ms, .max = 1h, .multiplier = 1.0001,
                                              .jitter = dl::retry::jitter::none};
    for (std::size_t n : {2u, 3u, 7u, 64u, 1000u, 4097u, 65535u}) {
        const double expected = 1e6 * std::pow(1.0001, static_cast<double>(n - 1));
        const double got = static_cast<double>(slow.ceiling(n).count());
        INFO("n = " << n);
        CHECK(std::abs(got - expected) <= expected * 1e-9 + 1);
    }
    CHECK(slow.ceiling(1'000'000) == 1h); // 1.0001^999999 is far past the cap
}

TEST_CASE("the jitter generator: SplitMix64's sequence, uniform in a closed range", "[policy][retry]")
{
    // The reference sequence for seed 0 (Steele, Lea and Flood): a seeded simulation
    // replays the same faults wherever it runs.
    dl::util::splitmix64 g{0};
    CHECK(g.next() == 0xe220a8397b1dcdafULL);
    CHECK(g.next() == 0x6e789e6aa1b965f4ULL);
    CHECK(g.next() == 0x06c45d188009454fULL);
    dl::util::splitmix64 a{42}, b{42};
    for (int i = 0; i < 100; ++i)
        REQUIRE(a.next() == b.next());

    CHECK(g.between(5, 5) == 5);
    CHECK(g.between(7, 3) == 7); // an empty range gives its low end
    std::array<int, 4> seen{};
    for (int i = 0; i < 4000; ++i) {
        const auto v = g.between(-2, 1);
        REQUIRE(v >= -2);
        REQUIRE(v <= 1);
        ++seen[static_cast<std::size_t>(v + 2)];
    }
    for (int count : seen)
        CHECK(count > 800); // 1000 expected each
    const auto lowest = std::numeric_limits<std::int64_t>::min(), highest = std::numeric_limits<std::int64_t>::max();
    bool negative = false, positive = false;
    for (int i = 0; i < 64; ++i) {
        const auto v = g.between(lowest, highest);
        negative |= v < 0;
        positive |= v > 0;
    }
    CHECK(negative);
    CHECK(positive);
    CHECK(g.between(highest - 1, highest) >= highest - 1);
    for (int i = 0; i < 1000; ++i) {
        const double u = g.unit();
        REQUIRE(u >= 0.0);
        REQUIRE(u < 1.0);
    }
}

TEST_CASE("jitter stays within its bounds and spreads", "[policy][retry]")
{
    using dl::retry::jitter;
    constexpr int samples = 20000;
    const auto d = 100ms; // ceiling of the 4th retry below
    auto draw = [&](jitter j, dl::duration previous = {}) {
        const dl::retry::exponential_backoff b{.initial = 12500us, .max = 1s, .jitter = j};
        std::vector<dl::duration> out;
        for (int i = 0; i < samples; ++i)
            out.push_back(*b.next_delay({.number = 4, .previous_delay = previous}));
        return out;
    };
    auto mean = [](const std::vector<dl::duration>& v) {
        return std::accumulate(v.begin(), v.end(), dl::duration{}) / v.size();
    };
    SECTION("full: uniform in [0, d]")
    {
        const auto v = draw(jitter::full);
        CHECK(*std::min_element(v.begin(), v.end()) >= 0ms);
        CHECK(*std::max_element(v.begin(), v.end()) <= d);
        CHECK(mean(v) > 45ms);
        CHECK(mean(v) < 55ms);
        CHECK(*std::min_element(v.begin(), v.end()) < 5ms);
        CHECK(*std::max_element(v.begin(), v.end()) > 95ms);
    }
    SECTION("equal: in [d/2, d]")
    {
        const auto v = draw(jitter::equal);
        CHECK(*std::min_element(v.begin(), v.end()) >= 50ms);
        CHECK(*std::max_element(v.begin(), v.end()) <= d);
        CHECK(mean(v) > 70ms);
        CHECK(mean(v) < 80ms);
    }
    SECTION("decorrelated: in [initial, min(max, 3 * previous)]")
    {
        const auto v = draw(jitter::decorrelated, 200ms);
        CHECK(*std::min_element(v.begin(), v.end()) >= 12500us);
        CHECK(*std::max_element(v.begin(), v.end()) <= 600ms);
        CHECK(*std::max_element(v.begin(), v.end()) > 550ms);
        const auto capped = [&] {
            const dl::retry::exponential_backoff b{.initial = 10ms, .max = 50ms, .jitter = jitter::decorrelated};
            dl::duration top{};
            for (int i = 0; i < samples; ++i)
                top = std::max(top, *b.next_delay({.number = 3, .previous_delay = 1s}));
            return top;
        }();
        CHECK(capped <= 50ms);
    }
    SECTION("none: exactly the ceiling")
    {
        const auto v = draw(jitter::none);
        CHECK(*std::min_element(v.begin(), v.end()) == d);
        CHECK(*std::max_element(v.begin(), v.end()) == d);
    }
}

namespace {
// The custom policy from the docs: every 50 ms for five seconds.
struct retry_every_50ms {
    using policy_kind = dl::retry_policy_tag;
    std::optional<dl::duration> next_delay(const dl::attempt& a) const
    {
        return a.elapsed < 5s ? std::optional{50ms} : std::nullopt;
    }
};

// Reverse byte order: any deterministic order works for deadlock freedom.
struct descending {
    using policy_kind = dl::order_policy_tag;
    void arrange(std::vector<std::string>& ids) const
    {
        std::sort(ids.begin(), ids.end(), std::greater<>{});
        ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
    }
};

struct not_a_policy {};
} // namespace

static_assert(dl::retry_policy<retry_every_50ms>);
static_assert(dl::retry_policy<dl::retry::none>);
static_assert(dl::retry_policy<dl::retry::fixed>);
static_assert(dl::retry_policy<dl::retry::exponential_backoff>);
static_assert(!dl::retry_policy<not_a_policy>);
static_assert(dl::renew_policy<dl::renew::watchdog>);
static_assert(dl::order_policy<descending>);
static_assert(!dl::order_policy<retry_every_50ms>);
static_assert(dl::acquire_policy_for<dl::acquire::setnx, dl::memory::store>);
static_assert(dl::acquire_policy_for<dl::acquire::conditional_write, dl::memory::store>);
static_assert(dl::acquire_policy_for<dl::acquire::quorum<>, dl::quorum<dl::memory::store>>);
// Redlock needs a quorum backend; SET NX needs a single store.
static_assert(!dl::acquire_policy_for<dl::acquire::quorum<>, dl::memory::store>);
static_assert(!dl::acquire_policy_for<dl::acquire::setnx, dl::quorum<dl::memory::store>>);

TEST_CASE("policies are picked by kind, in any order, with defaults", "[policy]")
{
    using a = dl::basic_distributed_mutex<dl::memory::store, dl::renew::watchdog, retry_every_50ms>;
    using b = dl::basic_distributed_mutex<dl::memory::store, retry_every_50ms, dl::renew::watchdog>;
    STATIC_REQUIRE(std::is_same_v<a::retry_policy_type, b::retry_policy_type>);
    STATIC_REQUIRE(std::is_same_v<a::renew_policy_type, dl::renew::watchdog>);
    STATIC_REQUIRE(std::is_same_v<a::acquire_policy, dl::acquire::setnx>);
    STATIC_REQUIRE(std::is_same_v<a::observer_type, dl::observe::none>);
    using q = dl::basic_distributed_mutex<dl::quorum<dl::memory::store>>;
    STATIC_REQUIRE(std::is_same_v<q::acquire_policy, dl::acquire::quorum<dl::acquire::setnx>>);
    using plain = dl::basic_distributed_mutex<dl::memory::store>;
    STATIC_REQUIRE(std::is_same_v<plain::retry_policy_type, dl::retry::exponential_backoff>);
    STATIC_REQUIRE(std::is_same_v<plain::renew_policy_type, dl::renew::none>);
}

TEST_CASE("a custom retry policy drives lock()", "[policy][retry]")
{
    dl::manual_clock clock;
    asio::io_context io;
    dl::memory::store store{io};
    recorder rec;
    run(io, [&]() -> asio::awaitable<void> {
        dl::basic_distributed_mutex<dl::memory::store> holder{store, "r", {.ttl = 60s}};
        auto held = co_await holder.lock();
        REQUIRE(held);
        using waiter_mutex = dl::basic_distributed_mutex<dl::memory::store, retry_every_50ms, dl::observe::callback>;
        waiter_mutex waiter{store, "r", {.ttl = 60s}, rec.observer()};
        std::optional<dl::result<dl::lease>> got;
        // The coroutine owns its mutex (no captures): it may outlive this frame.
        asio::co_spawn(
            co_await asio::this_coro::executor,
            [](waiter_mutex m) -> asio::awaitable<dl::result<dl::lease>> { co_return co_await m.lock(); }(waiter),
            [&](std::exception_ptr, dl::result<dl::lease> r) { got = std::move(r); });
        const auto start = clock.now();
        co_await eventually("the waiter's lock() completes", [&] { return got.has_value(); },
                            {.max = 1000, .each = 10ms, .clock = &clock});
        REQUIRE_FALSE(*got);
        // It gave up once 5 s had passed, not before.
        CHECK(clock.now() - start >= 5s);
        // No deadline of its own: the policy gave up (after 5 s); the lock was still held.
        CHECK(got->error() == dl::errc::contended);
        for (const auto& w : rec.of<dl::wait_event>())
            CHECK(w.planned == 50ms);
        CHECK(rec.of<dl::attempt_event>().size() > 90);
    });
}

namespace {
// Records the attempt numbers it is asked about; gives up at the fourth.
struct counting_retry {
    using policy_kind = dl::retry_policy_tag;
    std::shared_ptr<std::vector<std::size_t>> asked = std::make_shared<std::vector<std::size_t>>();
    std::optional<dl::duration> next_delay(const dl::attempt& a) const
    {
        asked->push_back(a.number);
        return a.number < 4 ? std::optional{10ms} : std::nullopt;
    }
};
} // namespace

TEST_CASE("a retry policy's first next_delay sees attempt 1: the try after subscribing is not counted apart",
          "[policy][retry]")
{
    dl::manual_clock clock;
    asio::io_context io;
    dl::memory::store store{io};
    recorder rec;
    run(io, [&]() -> asio::awaitable<void> {
        dl::basic_distributed_mutex<dl::memory::store> holder{store, "r", {.ttl = 60s}};
        auto held = co_await holder.lock();
        REQUIRE(held);
        counting_retry policy;
        dl::basic_distributed_mutex<dl::memory::store, counting_retry, dl::observe::callback> waiter{
            store, "r", {.ttl = 60s}, policy, rec.observer()};
        auto waiting = test::start(co_await asio::this_coro::executor, waiter.lock());
        co_await eventually("the waiter gives up", [&] { return waiting.ready(); },
                            {.max = 1000, .each = 10ms, .clock = &clock});
        REQUIRE_FALSE(waiting.get());
        CHECK(waiting.get().error() == dl::errc::contended);
        CHECK(*policy.asked == std::vector<std::size_t>{1, 2, 3, 4});
        // The observer sees every try: the first, the one after subscribing, then one
        // after each of the three delays.
        const auto attempts = rec.of<dl::attempt_event>();
        REQUIRE(attempts.size() == 5);
        for (std::size_t i = 0; i < attempts.size(); ++i)
            CHECK(attempts[i].number == i + 1);
        CHECK(rec.of<dl::wait_event>().size() == 3);
    });
}

TEST_CASE("the conditional-write acquisition policy takes versioned locks", "[policy][acquire]")
{
    asio::io_context io;
    dl::memory::store store{io};
    run(io, [&]() -> asio::awaitable<void> {
        dl::basic_distributed_mutex<dl::memory::store, dl::acquire::conditional_write> m{store, "row:9"};
        auto a = co_await m.lock();
        REQUIRE(a);
        auto busy = co_await m.try_lock();
        REQUIRE_FALSE(busy);
        CHECK(busy.error() == dl::errc::contended);
        {
            auto outcome = co_await a->unlock();
            REQUIRE(outcome);
        }
        auto b = co_await m.lock();
        REQUIRE(b);
        CHECK(b->fence() == a->fence() + 1);
        // The store-level conditional write with an explicit version.
        auto stale = co_await store.conditional_write("row:9", dl::owner_token::generate(), 1s, dl::fence_token{1});
        REQUIRE_FALSE(stale);
        CHECK(stale.error() == dl::errc::contended);
        auto exact = co_await store.conditional_write("row:9", b->owner(), 1s, b->fence());
        REQUIRE(exact);
        CHECK(exact.value() == b->fence() + 1);
    });
}

TEST_CASE("ordering: byte-wise, duplicates collapsed, custom pluggable", "[policy][order]")
{
    std::vector<std::string> ids{"wallet:7", "wallet:42", std::string{"\xff"}, "wallet:7", "a", std::string{"\x01"}};
    dl::order::by_resource_id{}.arrange(ids);
    CHECK(ids == std::vector<std::string>{std::string{"\x01"}, "a", "wallet:42", "wallet:7", std::string{"\xff"}});
    std::vector<std::string> other{"b", "c", "a", "c"};
    descending{}.arrange(other);
    CHECK(other == std::vector<std::string>{"c", "b", "a"});
}

TEST_CASE("backoff arithmetic stays in range at the extremes of valid settings", "[policy][retry][extremes]")
{
    using dl::retry::jitter;
    constexpr auto many = std::numeric_limits<std::size_t>::max();
    // A multiplier at DBL_MAX overflows the power to infinity at the second retry:
    // the ceiling is the cap, not an out-of-range conversion (UBSan would abort).
    const dl::retry::exponential_backoff steep{.initial = 1ns, .max = dl::max_wait,
                                               .multiplier = std::numeric_limits<double>::max(),
                                               .jitter = jitter::none};
    CHECK(steep.ceiling(1) == 1ns);
    CHECK(steep.ceiling(2) == dl::max_wait);
    CHECK(steep.ceiling(many) == dl::max_wait);
    CHECK(steep.next_delay({.number = many - 1}) == dl::max_wait);
    // A multiplier of 1 never grows, however many retries (a loop over them would
    // not finish).
    const dl::retry::exponential_backoff flat{.initial = 7ms, .max = 1s, .multiplier = 1.0,
                                              .jitter = jitter::none};
    CHECK(flat.ceiling(many) == 7ms);
    // The cap itself at max_wait, the largest initial: still exact.
    const dl::retry::exponential_backoff top{.initial = dl::max_wait, .max = dl::max_wait, .jitter = jitter::none};
    CHECK(top.ceiling(1) == dl::max_wait);
    CHECK(top.ceiling(many) == dl::max_wait);
    // Decorrelated jitter multiplies the previous delay by 3; a caller-supplied previous
    // delay near duration::max() must not overflow.
    const dl::retry::exponential_backoff spread{.initial = 1ms, .max = dl::max_wait,
                                                .jitter = jitter::decorrelated};
    for (int i = 0; i < 1000; ++i) {
        const auto d = spread.next_delay({.number = 5, .previous_delay = dl::duration::max()});
        REQUIRE(d);
        CHECK(*d >= 1ms);
        CHECK(*d <= dl::max_wait);
    }
}

TEST_CASE("settings checks refuse what would spin or overflow", "[policy][extremes]")
{
    // The policies' own checks, without a mutex: what validate() builds on.
    const dl::lock_options ten_seconds{.ttl = 10s};
    CHECK_FALSE(dl::retry_settings_valid(dl::retry::exponential_backoff{.multiplier =
                                                                            std::numeric_limits<double>::infinity()}));
    CHECK_FALSE(dl::retry_settings_valid(dl::retry::exponential_backoff{.multiplier =
                                                                            std::numeric_limits<double>::quiet_NaN()}));
    CHECK_FALSE(dl::retry_settings_valid(dl::retry::exponential_backoff{.multiplier = 0.5}));
    CHECK_FALSE(dl::retry_settings_valid(dl::retry::exponential_backoff{.initial = 0ns}));
    CHECK_FALSE(dl::retry_settings_valid(dl::retry::fixed{.delay = 0ns}));
    CHECK(dl::retry_settings_valid(dl::retry::exponential_backoff{}));
    CHECK(dl::retry_settings_valid(dl::retry::fixed{}));
    CHECK(dl::retry_settings_valid(dl::retry::none{}));
    // A negative interval reaches the check instead of becoming TTL / 3.
    CHECK(dl::renew::watchdog{.every = -1ns}.interval(10s) == std::optional<dl::duration>{-1ns});
    CHECK(dl::renew::watchdog{}.interval(9s) == std::optional<dl::duration>{3s});
    CHECK_FALSE(dl::renew_settings_valid(dl::renew::watchdog{.every = -1ns}, ten_seconds));
    CHECK_FALSE(dl::renew_settings_valid(dl::renew::watchdog{.max_hold = 0ns}, ten_seconds));
    CHECK(dl::renew_settings_valid(dl::renew::watchdog{}, ten_seconds));
    CHECK(dl::renew_settings_valid(dl::renew::none{}, ten_seconds));
    // Deadlines: later than now, at most max_wait ahead, whatever the two instants.
    const auto now = dl::clock::now();
    CHECK(dl::validate_deadline(dl::time_point::max(), now) == dl::errc::invalid_argument);
    CHECK(dl::validate_deadline(dl::time_point::min(), now) == dl::errc::invalid_argument);
    CHECK(dl::validate_deadline(dl::time_point::max(), dl::time_point::min()) == dl::errc::invalid_argument);
    CHECK(dl::validate_deadline(now + dl::max_wait + 1ns, now) == dl::errc::invalid_argument);
    CHECK_FALSE(dl::validate_deadline(now + dl::max_wait, now));
    CHECK_FALSE(dl::validate_deadline(now + 1ns, now));
}

namespace {
// Sleeps until the holder's lock runs out, as the store reported it (contention as data).
struct until_expiry {
    using policy_kind = dl::retry_policy_tag;
    dl::duration deadline = std::chrono::seconds{30};
    std::optional<dl::duration> next_delay(const dl::attempt& a) const
    {
        if (a.held_until)
            return std::max(dl::duration::zero(), *a.held_until - dl::clock::now());
        return std::chrono::milliseconds{10};
    }
};
static_assert(dl::retry_policy<until_expiry>);
} // namespace

TEST_CASE("a held lock is data: a retry policy sees until when the holder's lock runs out", "[policy][retry]")
{
    dl::manual_clock clock;
    asio::io_context io;
    dl::memory::store store{io};
    recorder rec;
    run(io, [&]() -> asio::awaitable<void> {
        // A holder that took the lock for 2 s and vanished (never kept, never released).
        auto crashed = dl::acquire::setnx{}.open(dl::store_ref<dl::memory::store>{store}, {"job", {.ttl = 2s}, {}});
        auto held = co_await crashed.attempt();
        REQUIRE(held);
        REQUIRE(held->is_granted());

        dl::basic_distributed_mutex<dl::memory::store, until_expiry, dl::observe::callback> m{
            store, "job", {.ttl = 2s}, rec.observer()};
        auto waiter = test::start(co_await asio::this_coro::executor, m.lock());
        co_await settle();
        REQUIRE_FALSE(waiter.ready());
        const auto waits = rec.of<dl::wait_event>();
        REQUIRE(waits.size() == 1);
        CHECK(waits.front().planned == 2s); // exactly the holder's time left (manual clock)
        co_await advance(clock, 2100ms, 100ms);
        { const bool came = co_await waiter.wait(); REQUIRE(came); }
        REQUIRE(waiter.get());
        CHECK(waiter.get()->fence() > held->fence());
        CHECK(rec.of<dl::wait_event>().size() == 1); // no polling before the expiry
    });
}
