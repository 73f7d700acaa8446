// acquire::fair on a real redis-server: the queue the scripts keep, what happens to
// a waiter that vanished, and which waiters a release wakes. The order of waiters of
// separate clients is the conformance suite's (queue_order, on redis_fair).
#include "eventually.hpp"
#include "pending.hpp"
#include "redis_support.hpp"

#include <csignal>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

using namespace test;

namespace {

using fair_mutex = dl::basic_distributed_mutex<dl::redis::store, dl::acquire::fair, dl::retry::exponential_backoff>;
using fair_once = dl::basic_distributed_mutex<dl::redis::store, dl::acquire::fair, dl::retry::none>;

dl::retry::exponential_backoff slow_backoff()
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
        fair_mutex holder{a, "line", {.ttl = 10s}, slow_backoff()};
        auto first = co_await holder.lock();
        REQUIRE(first);
        fair_once probe{b, "line"};
        auto refused = co_await probe.lock();
        REQUIRE_FALSE(refused);
        CHECK(refused.error() == dl::errc::contended);
        CHECK(in_line(server, "line") == 0);

        fair_mutex waiter{b, "line", {.ttl = 10s}, slow_backoff()};
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
        fair_mutex holder{store, "line", {.ttl = 10s}, slow_backoff()};
        auto first = co_await holder.lock();
        REQUIRE(first);
        // A waiter that queues once and is never heard of again (a crashed process,
        // whose store no longer listens).
        const auto ghost = dl::owner_token::generate();
        dl::redis::store gone{io, cfg};
        auto queued = co_await gone.put_if_first("line", ghost, dl::owner_token::generate(), 10s, 2, true);
        gone.disconnect();
        REQUIRE(queued);
        CHECK_FALSE(queued.value().is_granted());
        test::recorder rec;
        dl::basic_distributed_mutex<dl::redis::store, dl::acquire::fair, dl::retry::exponential_backoff,
                                    dl::observe::callback>
            waiter{store, "line", {.ttl = 10s}, slow_backoff(), rec.observer()};
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
        fair_mutex holder{*stores[0], "line", {.ttl = 10s}, slow_backoff()};
        auto first = co_await holder.lock();
        REQUIRE(first);
        std::vector<test::recorder> recs(3);
        std::vector<std::unique_ptr<observed>> waiters;
        std::vector<test::pending<dl::result<dl::lease>>> pending;
        asio::cancellation_signal cancel_head;
        std::optional<dl::result<dl::lease>> head_result;
        for (std::size_t i = 0; i < 3; ++i) {
            waiters.push_back(std::make_unique<observed>(*stores[i + 1], "line", dl::lock_options{.ttl = 10s},
                                                         slow_backoff(), recs[i].observer()));
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

namespace {

// How many scripts the server has run to the end (EVAL and EVALSHA, less the calls
// that failed: an EVALSHA of a script not loaded yet), asked on a connection of its own.
long long command_calls(const redis_server& server, std::initializer_list<std::string_view> commands)
{
    asio::io_context io;
    dl::redis::store probe{io, server.config()};
    long long calls = -1;
    run(io, [&]() -> asio::awaitable<void> {
        auto r = co_await probe.execute("INFO", "commandstats");
        REQUIRE(r);
        const std::string& text = r.value().text;
        const auto field = [&](std::size_t line, std::string_view name) {
            const auto at = text.find(name, line);
            REQUIRE(at != std::string::npos);
            return std::stoll(text.substr(at + name.size()));
        };
        calls = 0;
        for (const std::string_view command : commands) {
            const auto line = text.find("cmdstat_" + std::string{command} + ":");
            if (line != std::string::npos)
                calls += field(line, "calls=") - field(line, "failed_calls=");
        }
    });
    return calls;
}

long long scripts_run(const redis_server& server)
{
    return command_calls(server, {"eval", "evalsha"});
}

} // namespace

TEST_CASE("redis fair: a release hands the lock to a listening head, which reads it from the wake-up",
          "[redis][fair]")
{
    redis_server server;
    asio::io_context io;
    dl::redis::store store{io, server.config()};
    run(io, [&]() -> asio::awaitable<void> {
        const auto holder = dl::owner_token::generate(), waiter = dl::owner_token::generate();
        auto held = co_await store.put_if_first("hand", holder, holder, 10s, 1, false);
        REQUIRE(held);
        REQUIRE(held.value().is_granted());
        auto listening = co_await store.watch("hand", waiter);
        auto queued = co_await store.put_if_first("hand", waiter, dl::owner_token::generate(), 20s, 2, true);
        REQUIRE(queued);
        REQUIRE_FALSE(queued.value().is_granted());
        CHECK_FALSE(listening.take_handover());

        { const auto ok_ = co_await store.release_to_head("hand", holder); REQUIRE(ok_); }
        // Granted in the release's own step, to the waiter's id, for the TTL it offered.
        auto value = co_await store.execute("GET", store.lock_key("hand"));
        REQUIRE(value);
        auto pttl = co_await store.execute("PTTL", store.lock_key("hand"));
        REQUIRE(pttl);
        CHECK(pttl.value().integer > 10'000);
        CHECK(in_line(server, "hand") == 0);
        auto offers = co_await store.execute("EXISTS", store.offers_key("hand"));
        REQUIRE(offers);
        CHECK(offers.value().integer == 0);

        const bool woke = co_await listening.wait(dl::clock::now() + 10s);
        REQUIRE(woke);
        const auto handed = listening.take_handover();
        REQUIRE(handed);
        CHECK(handed->try_number == 2);
        CHECK(handed->fence > held.value().fence());
        CHECK(handed->after_try >= dl::duration::zero());
        CHECK(value.value().text == lock_value(waiter, handed->fence));
        CHECK_FALSE(listening.take_handover()); // read once

        // A later try of the waiter is answered with the lock it was handed.
        const auto asked = dl::clock::now();
        auto again = co_await store.put_if_first("hand", waiter, dl::owner_token::generate(), 20s, 3, true);
        REQUIRE(again);
        REQUIRE(again.value().is_granted());
        CHECK(again.value().fence() == handed->fence);
        CHECK(again.value().holder() == waiter);
        REQUIRE(again.value().counted_from());
        CHECK(*again.value().counted_from() <= asked); // the lock has run since the hand-over

        // It is kept and given back by the waiter's id.
        { const auto ok_ = co_await store.extend("hand", waiter, 20s); CHECK(ok_); }
        { const auto ok_ = co_await store.release_to_head("hand", waiter); CHECK(ok_); }
        auto gone = co_await store.execute("EXISTS", store.lock_key("hand"));
        REQUIRE(gone);
        CHECK(gone.value().integer == 0);
    });
}

TEST_CASE("redis fair: a head that does not listen is not handed the lock; a waiter that left passes a handed lock on",
          "[redis][fair]")
{
    redis_server server;
    asio::io_context io;
    dl::redis::store store{io, server.config()}, other{io, server.config()};
    run(io, [&]() -> asio::awaitable<void> {
        const auto holder = dl::owner_token::generate(), deaf = dl::owner_token::generate(),
                   first = dl::owner_token::generate(), second = dl::owner_token::generate();
        auto held = co_await store.put_if_first("pass", holder, holder, 10s, 1, false);
        REQUIRE(held);
        REQUIRE(held.value().is_granted());
        // In line: one whose store never listens (its process is gone), then two of
        // a store that does, on one channel.
        auto q0 = co_await other.put_if_first("pass", deaf, dl::owner_token::generate(), 10s, 2, true);
        REQUIRE(q0);
        auto w1 = co_await store.watch("pass", first);
        auto q1 = co_await store.put_if_first("pass", first, dl::owner_token::generate(), 10s, 2, true);
        REQUIRE(q1);
        auto w2 = co_await store.watch("pass", second);
        auto q2 = co_await store.put_if_first("pass", second, dl::owner_token::generate(), 10s, 2, true);
        REQUIRE(q2);
        CHECK(in_line(server, "pass") == 3);

        // The head does not listen: the lock is left free, and no one skips it.
        { const auto ok_ = co_await store.release_to_head("pass", holder); REQUIRE(ok_); }
        auto free = co_await store.execute("EXISTS", store.lock_key("pass"));
        REQUIRE(free);
        CHECK(free.value().integer == 0);
        CHECK(in_line(server, "pass") == 3);

        // It leaves the line as the head of a free lock: the next head, which listens,
        // is handed the lock.
        { const auto ok_ = co_await store.leave_queue("pass", deaf); REQUIRE(ok_); }
        const bool woke1 = co_await w1.wait(dl::clock::now() + 10s);
        REQUIRE(woke1);
        const auto to_first = w1.take_handover();
        REQUIRE(to_first);
        CHECK(to_first->fence > held.value().fence());
        CHECK_FALSE(w2.take_handover()); // the message names the head: the other waiter keeps nothing
        CHECK(in_line(server, "pass") == 1);

        // Its lock() ended before it read that (it leaves the line): the lock it was
        // handed goes on to the next, with a newer token.
        { const auto ok_ = co_await store.leave_queue("pass", first); REQUIRE(ok_); }
        auto value = co_await store.execute("GET", store.lock_key("pass"));
        REQUIRE(value);
        const bool woke2 = co_await w2.wait(dl::clock::now() + 10s);
        REQUIRE(woke2);
        const auto to_second = w2.take_handover();
        REQUIRE(to_second);
        CHECK(to_second->fence > to_first->fence);
        CHECK(value.value().text == lock_value(second, to_second->fence));
        CHECK(in_line(server, "pass") == 0);
        { const auto ok_ = co_await store.release_to_head("pass", second); CHECK(ok_); }
    });
    other.disconnect();
}

TEST_CASE("redis fair: the head of the line takes a handed lock without a request of its own", "[redis][fair]")
{
    redis_server server;
    asio::io_context io;
    auto cfg = server.config();
    cfg.queue_ttl = 60s; // no refresh of the waiter's place within the case
    dl::redis::store a{io, cfg}, b{io, cfg};
    run(io, [&]() -> asio::awaitable<void> {
        fair_mutex holder{a, "line", {.ttl = 30s}, slow_backoff()};
        auto first = co_await holder.lock();
        REQUIRE(first);
        test::recorder rec;
        dl::basic_distributed_mutex<dl::redis::store, dl::acquire::fair, dl::retry::exponential_backoff,
                                    dl::observe::callback>
            waiter{b, "line", {.ttl = 30s}, slow_backoff(), rec.observer()};
        auto waiting = start(co_await asio::this_coro::executor, waiter.lock());
        (void)co_await eventually("the waiter in line", [&] { return in_line(server, "line") == 1; });

        const auto before = scripts_run(server);
        { const auto ok_ = co_await first->unlock(); CHECK(ok_); }
        { const bool came_ = co_await waiting.wait(); REQUIRE(came_); }
        auto& second = waiting.get();
        REQUIRE(second);
        // One script ran between the two: the release, which granted the lock.
        CHECK(scripts_run(server) - before == 1);
        // Woken once, by the release, after the two tries that found it held.
        const auto wakes = rec.of<dl::wake_event>();
        REQUIRE(wakes.size() == 1);
        CHECK(wakes[0].notified);
        CHECK(rec.of<dl::attempt_event>().size() == 3);
        CHECK(second->fence() > first->fence());
        CHECK(second->valid_until() <= dl::clock::now() + 30s);
        auto held_by = co_await b.execute("GET", b.lock_key("line"));
        REQUIRE(held_by);
        CHECK(held_by.value().text == lock_value(*second));
        { const auto ok_ = co_await second->unlock(); CHECK(ok_); }
        auto gone = co_await b.execute("EXISTS", b.lock_key("line"));
        REQUIRE(gone);
        CHECK(gone.value().integer == 0);
    });
}

TEST_CASE("redis fair: with wait_replicas a handed lock counts only once a replica has it", "[redis][fair][replication]")
{
    redis_server primary;
    redis_server replica{{"--replicaof", "127.0.0.1", std::to_string(primary.port())}};
    auto cfg = primary.config();
    cfg.wait_replicas = 1;
    cfg.wait_timeout = 200ms;
    asio::io_context io;
    dl::redis::store a{io, cfg}, b{io, cfg};
    run(io, [&]() -> asio::awaitable<void> {
        for (int i = 0; i < 400; ++i) { // online once its first synchronisation is done
            auto info = co_await a.execute("INFO", "replication");
            if (info && info->text.find("state=online") != std::string::npos)
                break;
            co_await settle(25ms);
        }
        fair_mutex holder{a, "replicated", {.ttl = 10s}, slow_backoff()};
        auto first = co_await holder.lock();
        REQUIRE(first);
        fair_mutex waiter{b, "replicated", {.ttl = 10s},
                          dl::retry::exponential_backoff{.initial = 50ms, .max = 50ms, .deadline = 1500ms}};
        auto waiting = start(co_await asio::this_coro::executor, waiter.lock());
        (void)co_await eventually("the waiter in line", [&] { return in_line(primary, "replicated") == 1; });
        // The replica stops answering: the release hands the lock over on the primary,
        // but the waiter's grant is never acknowledged, so it is never reported.
        ::kill(replica.pid(), SIGSTOP);
        { const auto ok_ = co_await first->unlock(); CHECK(ok_); }
        { const bool came_ = co_await waiting.wait(); REQUIRE(came_); }
        ::kill(replica.pid(), SIGCONT);
        auto& refused = waiting.get();
        REQUIRE_FALSE(refused);
        INFO(refused.error().message());
        // The lock it was handed is given back when its lock() gives up.
        (void)co_await eventually("the handed lock given back", [&] {
            asio::io_context probe;
            return !exists(probe, primary.config(), a.lock_key("replicated"));
        });
    });
}

TEST_CASE("redis fair: a store still listening for a resource joins the line in the first try; the channel then goes",
          "[redis][fair]")
{
    redis_server server;
    asio::io_context io;
    auto cfg = server.config();
    cfg.queue_ttl = 60s;       // no refresh of the waiter's place within the case
    cfg.listen_linger = 1500ms; // outlasts the middle of the case
    dl::redis::store h{io, cfg}, w{io, cfg};
    run(io, [&]() -> asio::awaitable<void> {
        const auto ex = co_await asio::this_coro::executor;
        fair_mutex holder{h, "again", {.ttl = 30s}, slow_backoff()};
        test::recorder rec;
        dl::basic_distributed_mutex<dl::redis::store, dl::acquire::fair, dl::retry::exponential_backoff,
                                    dl::observe::callback>
            waiter{w, "again", {.ttl = 30s}, slow_backoff(), rec.observer()};
        CHECK_FALSE(w.listening("again"));

        // The store does not listen yet: the first try only asks, and the waiter joins
        // in its second, once subscribed. The release hands it the lock.
        auto first = co_await holder.lock();
        REQUIRE(first);
        auto one = start(ex, waiter.lock());
        (void)co_await eventually("the waiter in line", [&] { return in_line(server, "again") == 1; });
        { const auto ok_ = co_await first->unlock(); CHECK(ok_); }
        { const bool came_ = co_await one.wait(); REQUIRE(came_); }
        REQUIRE(one.get());
        const auto round_one = rec.of<dl::attempt_event>().size();
        CHECK(round_one == 3);
        { const auto ok_ = co_await one.get()->unlock(); CHECK(ok_); }
        // Its lock() is over, and the store still listens.
        CHECK(w.listening("again"));
        CHECK(w.subscribed_channels() == 1);

        // The next lock() here joins in its first try: one script, no SUBSCRIBE.
        auto second = co_await holder.lock();
        REQUIRE(second);
        const auto scripts = scripts_run(server), subscribes = command_calls(server, {"subscribe"});
        auto two = start(ex, waiter.lock());
        (void)co_await eventually("the waiter in line again", [&] { return in_line(server, "again") == 1; });
        CHECK(scripts_run(server) - scripts == 1);
        CHECK(command_calls(server, {"subscribe"}) == subscribes);
        { const auto ok_ = co_await second->unlock(); CHECK(ok_); }
        { const bool came_ = co_await two.wait(); REQUIRE(came_); }
        REQUIRE(two.get());
        CHECK(two.get()->fence() > second->fence());
        CHECK(rec.of<dl::attempt_event>().size() - round_one == 2); // the join, and the hand-over
        const auto wakes = rec.of<dl::wake_event>();
        REQUIRE(wakes.size() == 2);
        CHECK(wakes[1].notified);

        // A try_lock() leaves nothing behind, listening or not.
        fair_once other{w, "again", {.ttl = 30s}};
        auto tried = co_await other.try_lock();
        REQUIRE_FALSE(tried);
        CHECK(tried.error() == dl::condition::contended);
        CHECK(in_line(server, "again") == 0);
        { const auto ok_ = co_await two.get()->unlock(); CHECK(ok_); }

        // Once no lock() of the store has waited for the resource for the linger, the
        // channel goes.
        const test::steps linger_and_more{.max = 2000, .each = 5ms};
        (void)co_await eventually("the channel went after its linger",
                                  [&] { return w.subscribed_channels() == 0 && !w.listening("again"); },
                                  linger_and_more);
        CHECK(listening(server, "again").waiter_channels == 0);
    });
}

TEST_CASE("redis fair: at most 64 idle channels linger, the oldest going first; with no linger a channel goes at once",
          "[redis][fair]")
{
    redis_server server;
    asio::io_context io;
    auto cfg = server.config();
    cfg.listen_linger = 60s;
    auto none = server.config();
    none.listen_linger = dl::duration::zero();
    dl::redis::store store{io, cfg}, at_once{io, none};
    run(io, [&]() -> asio::awaitable<void> {
        // Waiters of 70 resources come and go, one after the other.
        for (int i = 0; i < 70; ++i) {
            auto w = co_await store.watch("r" + std::to_string(i), dl::owner_token::generate());
            (void)w;
        }
        (void)co_await eventually("64 left", [&] { return store.subscribed_channels() == 64; });
        CHECK_FALSE(store.listening("r0"));
        CHECK_FALSE(store.listening("r5"));
        CHECK(store.listening("r6"));
        CHECK(store.listening("r69"));
        (void)co_await eventually("r0 unsubscribed on the server",
                                  [&] { return listening(server, "r0").waiter_channels == 0; });
        CHECK(listening(server, "r69").waiter_channels == 1);

        {
            auto w = co_await at_once.watch("r0", dl::owner_token::generate());
            CHECK(at_once.listening("r0"));
        }
        (void)co_await eventually("gone at once", [&] { return at_once.subscribed_channels() == 0; });
        CHECK_FALSE(at_once.listening("r0"));
    });
}

TEST_CASE("redis fair: revoke() hands the lock to a listening head as a release does; list() counts the waiters whose "
          "place is kept",
          "[redis][fair][revoke][list]")
{
    redis_server server;
    asio::io_context io;
    dl::redis::store store{io, server.config()};
    auto lapsing_cfg = server.config();
    lapsing_cfg.queue_ttl = 200ms;
    dl::redis::store gone{io, lapsing_cfg};
    run(io, [&]() -> asio::awaitable<void> {
        const auto holder = dl::owner_token::generate(), ghost = dl::owner_token::generate(),
                   waiter = dl::owner_token::generate(), last = dl::owner_token::generate();
        auto held = co_await store.put_if_first("hand", holder, holder, 10s, 1, false);
        REQUIRE(held);
        REQUIRE(held.value().is_granted());
        // First in line, a waiter that stops asking: its place lapses after 200 ms.
        auto lapsing = co_await gone.put_if_first("hand", ghost, dl::owner_token::generate(), 10s, 2, true);
        REQUIRE(lapsing);
        REQUIRE_FALSE(lapsing.value().is_granted());
        gone.disconnect();
        auto listening = co_await store.watch("hand", waiter);
        for (const auto& w : {waiter, last}) {
            auto queued = co_await store.put_if_first("hand", w, dl::owner_token::generate(), 20s, 2, true);
            REQUIRE(queued);
            REQUIRE_FALSE(queued.value().is_granted());
        }
        co_await settle(300ms);
        auto listed = co_await store.list("hand");
        REQUIRE(listed);
        REQUIRE(listed->size() == 1);
        CHECK(listed->front().lock.fence == held.value().fence());
        REQUIRE(listed->front().waiters);
        CHECK(*listed->front().waiters == 2);
        CHECK(in_line(server, "hand") == 3); // the lapsed one is still there, dropped when it comes first

        // In the revoke's own step: the lapsed head dropped, the next one handed the lock.
        { const auto ok_ = co_await store.revoke("hand", held.value().fence()); REQUIRE(ok_); }
        auto value = co_await store.execute("GET", store.lock_key("hand"));
        REQUIRE(value);
        CHECK(in_line(server, "hand") == 1);
        const bool woke = co_await listening.wait(dl::clock::now() + 10s);
        REQUIRE(woke);
        const auto handed = listening.take_handover();
        REQUIRE(handed);
        CHECK(handed->fence > held.value().fence());
        CHECK(value.value().text == lock_value(waiter, handed->fence));
        auto renewed = co_await store.extend("hand", holder, 10s);
        REQUIRE_FALSE(renewed);
        CHECK(renewed.error() == dl::errc::not_owner);

        auto after = co_await store.list("hand");
        REQUIRE(after);
        REQUIRE(after->size() == 1);
        CHECK(after->front().lock.fence == handed->fence);
        CHECK(after->front().lock.owner == waiter.to_hex().substr(0, 8));
        CHECK(after->front().waiters == std::optional<std::size_t>{1});
        { const auto ok_ = co_await store.release_to_head("hand", waiter); CHECK(ok_); }
    });
}
