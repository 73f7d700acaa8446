// acquire::fair on a real redis-server: the queue the scripts keep, what happens to
// a waiter that vanished, and which waiters a release wakes. The order of waiters of
// separate clients is the conformance suite's (queue_order, on redis_fair).
#include "eventually.hpp"
#include "pending.hpp"
#include "redis_support.hpp"

#include <memory>
#include <vector>

using namespace test;

namespace {

using fair_mutex = dl::basic_distributed_mutex<dl::redis::store, dl::acquire::fair, dl::retry::exponential_backoff>;
using fair_once = dl::basic_distributed_mutex<dl::redis::store, dl::acquire::fair, dl::retry::none>;

dl::retry::exponential_backoff patient()
{
    return {.initial = 5s, .max = 5s, .deadline = 30s};
}

// How many wait in line for `resource`, asked on a connection of its own.
long long in_line(const redis_server& server, std::string_view resource)
{
    asio::io_context io;
    dl::redis::store probe{io, server.config()};
    long long n = -1;
    run(io, [&]() -> asio::awaitable<void> {
        auto r = co_await probe.execute("ZCARD", probe.queue_key(resource));
        REQUIRE(r);
        n = r.value().integer;
    });
    return n;
}

// Who listens for releases of `resource`, asked on a connection of its own: the
// subscribers of its channel, and how many waiters' channels have one.
struct listeners {
    long long on_resource_channel = -1;
    long long waiter_channels = -1;
};

listeners listening(const redis_server& server, std::string_view resource)
{
    asio::io_context io;
    dl::redis::store probe{io, server.config()};
    listeners out;
    run(io, [&]() -> asio::awaitable<void> {
        const auto channel = probe.channel(resource);
        auto subs = co_await probe.execute("PUBSUB", "NUMSUB", channel);
        REQUIRE(subs);
        REQUIRE(subs.value().elements.size() == 2);
        out.on_resource_channel = subs.value().elements[1].integer;
        auto waiters = co_await probe.execute("PUBSUB", "CHANNELS", channel + ":*");
        REQUIRE(waiters);
        out.waiter_channels = static_cast<long long>(waiters.value().elements.size());
    });
    return out;
}

} // namespace

TEST_CASE("redis fair: try_lock takes no place in line; a releaser that asks again queues behind the waiter",
          "[redis][fair]")
{
    redis_server server;
    asio::io_context io;
    dl::redis::store a{io, server.config()}, b{io, server.config()};
    run(io, [&]() -> asio::awaitable<void> {
        fair_mutex holder{a, "line", {.ttl = 10s}, patient()};
        auto first = co_await holder.lock();
        REQUIRE(first);
        fair_once probe{b, "line"};
        auto refused = co_await probe.lock();
        REQUIRE_FALSE(refused);
        CHECK(refused.error() == dl::errc::contended);
        CHECK(in_line(server, "line") == 0);

        fair_mutex waiter{b, "line", {.ttl = 10s}, patient()};
        auto waiting = start(co_await asio::this_coro::executor, waiter.lock());
        (void)co_await eventually("the waiter in line", [&] { return in_line(server, "line") == 1; });
        // The holder lets go and asks again at once: the waiter is served first.
        { const auto ok_ = co_await first->unlock(); CHECK(ok_); }
        auto again = start(co_await asio::this_coro::executor, holder.lock());
        { const bool came_ = co_await waiting.wait(); REQUIRE(came_); }
        auto& second = waiting.get();
        REQUIRE(second);
        CHECK_FALSE(again.ready());
        { const auto ok_ = co_await second->unlock(); CHECK(ok_); }
        { const bool came_ = co_await again.wait(); REQUIRE(came_); }
        auto& third = again.get();
        REQUIRE(third);
        CHECK(third->fence() > second->fence());
        CHECK(second->fence() > first->fence());
        { const auto ok_ = co_await third->unlock(); CHECK(ok_); }
        CHECK(in_line(server, "line") == 0);
    });
}

TEST_CASE("redis fair: a waiter that vanished at the head holds up the line until its place expires", "[redis][fair]")
{
    redis_server server;
    asio::io_context io;
    auto cfg = server.config();
    cfg.queue_ttl = 600ms;
    dl::redis::store store{io, cfg};
    run(io, [&]() -> asio::awaitable<void> {
        fair_mutex holder{store, "line", {.ttl = 10s}, patient()};
        auto first = co_await holder.lock();
        REQUIRE(first);
        // A waiter that queues once and is never heard of again (a crashed process).
        const auto ghost = dl::owner_token::generate();
        auto queued = co_await store.put_if_first("line", ghost, dl::owner_token::generate(), 10s, true);
        REQUIRE(queued);
        CHECK_FALSE(queued.value().is_granted());
        test::recorder rec;
        dl::basic_distributed_mutex<dl::redis::store, dl::acquire::fair, dl::retry::exponential_backoff,
                                    dl::observe::callback>
            waiter{store, "line", {.ttl = 10s}, patient(), rec.observer()};
        auto waiting = start(co_await asio::this_coro::executor, waiter.lock());
        (void)co_await eventually("two in line", [&] { return in_line(server, "line") == 2; });
        // The release wakes the ghost, the head, which never comes: the waiter gets
        // the lock once the ghost's place has expired, by asking again in time.
        { const auto ok_ = co_await first->unlock(); CHECK(ok_); }
        { const bool came_ = co_await waiting.wait(); REQUIRE(came_); }
        auto& second = waiting.get();
        REQUIRE(second);
        // It woke by its own clock (a refresh), never by a message meant for the ghost.
        for (const auto& w : rec.of<dl::wake_event>())
            CHECK_FALSE(w.notified);
        { const auto ok_ = co_await second->unlock(); CHECK(ok_); }
        CHECK(in_line(server, "line") == 0);
    });
}

TEST_CASE("redis fair: a release wakes the head waiter only; a cancelled head passes the turn on", "[redis][fair]")
{
    redis_server server;
    asio::io_context io;
    std::vector<std::unique_ptr<dl::redis::store>> stores;
    for (int i = 0; i < 4; ++i)
        stores.push_back(std::make_unique<dl::redis::store>(io, server.config()));
    using observed = dl::basic_distributed_mutex<dl::redis::store, dl::acquire::fair, dl::retry::exponential_backoff,
                                                 dl::observe::callback>;
    run(io, [&]() -> asio::awaitable<void> {
        fair_mutex holder{*stores[0], "line", {.ttl = 10s}, patient()};
        auto first = co_await holder.lock();
        REQUIRE(first);
        std::vector<test::recorder> recs(3);
        std::vector<std::unique_ptr<observed>> waiters;
        std::vector<test::pending<dl::result<dl::lease>>> pending;
        asio::cancellation_signal cancel_head;
        std::optional<dl::result<dl::lease>> head_result;
        for (std::size_t i = 0; i < 3; ++i) {
            waiters.push_back(std::make_unique<observed>(*stores[i + 1], "line", dl::lock_options{.ttl = 10s},
                                                         patient(), recs[i].observer()));
            if (i == 0)
                asio::co_spawn(co_await asio::this_coro::executor, waiters[0]->lock(),
                               asio::bind_cancellation_slot(cancel_head.slot(),
                                                            [&](std::exception_ptr, dl::result<dl::lease> r) {
                                                                head_result.emplace(std::move(r));
                                                            }));
            else
                pending.push_back(start(co_await asio::this_coro::executor, waiters[i]->lock()));
            (void)co_await eventually("queued in order", [&] { return in_line(server, "line") == static_cast<long long>(i + 1); });
        }
        // Each waiter listens on a channel of its own and none on the resource's, so
        // a release reaches the process of the head only.
        const auto three = listening(server, "line");
        CHECK(three.on_resource_channel == 0);
        CHECK(three.waiter_channels == 3);
        // The head leaves while the lock is held; the next in line becomes the head.
        cancel_head.emit(asio::cancellation_type::all);
        (void)co_await eventually("the head gone", [&] { return head_result.has_value(); });
        REQUIRE_FALSE(*head_result);
        (void)co_await eventually("two in line", [&] { return in_line(server, "line") == 2; });
        { const auto ok_ = co_await first->unlock(); CHECK(ok_); }
        { const bool came_ = co_await pending[0].wait(); REQUIRE(came_); }
        REQUIRE(pending[0].get());
        CHECK_FALSE(pending[1].ready());
        // Only the head heard the release: the last waiter has had no notified wake.
        for (const auto& w : recs[2].of<dl::wake_event>())
            CHECK_FALSE(w.notified);
        { const auto ok_ = co_await pending[0].get()->unlock(); CHECK(ok_); }
        { const bool came_ = co_await pending[1].wait(); REQUIRE(came_); }
        REQUIRE(pending[1].get());
        const auto notified = recs[2].of<dl::wake_event>();
        CHECK(std::any_of(notified.begin(), notified.end(), [](const dl::wake_event& w) { return w.notified; }));
        { const auto ok_ = co_await pending[1].get()->unlock(); CHECK(ok_); }
        // The channels went with their waiters.
        (void)co_await eventually("no one listens", [&] { return listening(server, "line").waiter_channels == 0; });
    });
    for (auto& s : stores)
        s->disconnect();
}
