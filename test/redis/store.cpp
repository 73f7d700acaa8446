// The Redis store against a real redis-server: locking, fencing, notifications,
// bad input, one-round-trip multi-lock, fenced writes.
#include "eventually.hpp"
#include "redis_support.hpp"

#include <algorithm>
#include <array>
#include <cstdio>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <span>
#include <tuple>

using namespace test;
using redis_mutex = dl::basic_distributed_mutex<dl::redis::store>;
using one_shot = dl::basic_distributed_mutex<dl::redis::store, dl::retry::none>;

TEST_CASE("redis: lock, contention, fencing, release", "[redis]")
{
    redis_server server;
    asio::io_context io;
    dl::redis::store store{io, server.config()};
    run(io, [&]() -> asio::awaitable<void> {
        one_shot m{store, "seat:12", {.ttl = 10s}};
        // The first token is the server's clock in microseconds (this machine's).
        const auto micros = [] {
            return static_cast<dl::fence_token>(std::chrono::duration_cast<std::chrono::microseconds>(
                                                    std::chrono::system_clock::now().time_since_epoch())
                                                    .count());
        };
        const auto before = micros();
        auto first = co_await m.lock();
        const auto after = micros();
        REQUIRE(first);
        CHECK(first->fence() >= before);
        CHECK(first->fence() <= after);
        auto second = co_await m.try_lock();
        REQUIRE_FALSE(second);
        CHECK(second.error() == dl::errc::contended);
        {
            auto released = co_await first->unlock();
            REQUIRE(released);
        }
        auto third = co_await m.lock();
        REQUIRE(third);
        CHECK(third->fence() > first->fence());
        // The store holds the owner token and the grant's fencing token with a TTL, in
        // the documented key.
        auto get = dl::redis::resp::command({"GET", store.lock_key("seat:12")});
        auto held = co_await store.execute_command(std::move(get));
        REQUIRE(held);
        CHECK(held.value().text == lock_value(*third));
        auto pttl = dl::redis::resp::command({"PTTL", store.lock_key("seat:12")});
        auto left = co_await store.execute_command(std::move(pttl));
        REQUIRE(left);
        CHECK(left.value().integer > 9000);
        CHECK(left.value().integer <= 10000);
        // Owner safety: releasing with another owner token does nothing.
        auto foreign = co_await store.release("seat:12", dl::owner_token::generate());
        REQUIRE_FALSE(foreign);
        CHECK(foreign.error() == dl::errc::not_owner);
        {
            auto released = co_await third->unlock();
            REQUIRE(released);
        }
    });
}

namespace {
// The part of a key Redis Cluster hashes: between the first '{' and the next '}', if
// that is not empty; otherwise the whole key.
std::string hash_tag(const std::string& key)
{
    const auto open = key.find('{');
    if (open == std::string::npos)
        return key;
    const auto close = key.find('}', open + 1);
    if (close == std::string::npos || close == open + 1)
        return key;
    return key.substr(open + 1, close - open - 1);
}
} // namespace

TEST_CASE("redis: a resource's fence key is its hash slot's, in the slot, the same on one server and in a cluster",
          "[redis]")
{
    namespace detail = dl::redis::detail;
    asio::io_context io;
    // Never connect: key layout only.
    dl::redis::store store{io, dl::redis::config{}};
    dl::redis::config in_cluster;
    in_cluster.cluster_nodes = {{"127.0.0.1", 7000}};
    dl::redis::store clustered{io, in_cluster};
    std::set<std::string> fence_keys;
    for (std::string id : {"plain", "with}brace", "{already}tagged", "a{b}c", "}", "{}"}) {
        const auto fence = store.fence_key(id);
        CHECK(fence == clustered.fence_key(id));
        CHECK(detail::hash_slot(store.lock_key(id)) == detail::hash_slot(fence));
        CHECK(hash_tag(fence).starts_with("$"));
        CHECK(fence.starts_with("distlock:{$"));
        CHECK(fence.ends_with("}:fence"));
        fence_keys.insert(fence);
    }
    CHECK(fence_keys.size() == 6); // six ids, six slots here
    CHECK(hash_tag(store.lock_key("plain")) == "#plain");

    // Every slot has a tag of its own, '$' and at most three more, and its fence key
    // hashes to it.
    const auto& tags = detail::slot_tags::table();
    std::set<std::string_view> distinct;
    for (std::uint16_t slot = 0; slot < detail::slot_count; ++slot) {
        const auto tag = tags[slot];
        REQUIRE(tag.size() >= 2);
        REQUIRE(tag.size() <= 4);
        REQUIRE(tag.front() == '$');
        REQUIRE(detail::hash_slot("p:{" + std::string{tag} + "}:fence") == slot);
        distinct.insert(tag);
    }
    CHECK(distinct.size() == detail::slot_count);
    // The whole table is pinned (FNV-1a over the tags): a change to the alphabet or
    // the order of the search would move every fence key between versions.
    std::uint64_t digest = 1469598103934665603ull;
    for (std::uint16_t slot = 0; slot < detail::slot_count; ++slot) {
        for (const char c : std::string{tags[slot]} + ",") {
            digest ^= static_cast<unsigned char>(c);
            digest *= 1099511628211ull;
        }
    }
    CHECK(digest == 0xf4c4c1b207f0290cull);
}

TEST_CASE("redis: resource ids are binary-safe", "[redis][input]")
{
    redis_server server;
    asio::io_context io;
    dl::redis::store store{io, server.config()};
    const std::vector<std::string> ids{std::string{"a\0b", 3}, std::string{"a\0c", 3}, "with space", "new\nline\r\n",
                                       "{braces}", "}{", std::string(dl::max_resource_size, 'x'), "\xff\xfe"};
    run(io, [&]() -> asio::awaitable<void> {
        std::vector<dl::lease> held;
        for (const auto& id : ids) {
            one_shot m{store, id};
            auto l = co_await m.lock();
            REQUIRE(l);
            // Every id has its own lock, holding its owner and its token.
            auto info = co_await store.read(id);
            REQUIRE(info);
            CHECK(info.value().held);
            CHECK(info.value().fence == l->fence());
            CHECK(info.value().owner == l->owner().to_hex().substr(0, 8));
            held.push_back(std::move(*l));
        }
        for (auto& l : held) {
            auto released = co_await l.unlock();
            CHECK(released);
        }
        auto keys = dl::redis::resp::command({"KEYS", "distlock:*:lock"});
        auto left = co_await store.execute_command(std::move(keys));
        REQUIRE(left);
        CHECK(left.value().elements.empty());
    });
}

TEST_CASE("redis: bad TTLs are rejected before any I/O", "[redis][input]")
{
    redis_server server;
    asio::io_context io;
    dl::redis::store store{io, server.config()};
    const std::array<dl::duration, 4> ttls{dl::duration{500us}, dl::duration{0}, dl::duration{-1s}, dl::max_ttl + 1s};
    run(io, [&]() -> asio::awaitable<void> {
        for (auto ttl : ttls) {
            redis_mutex m{store, "r", {.ttl = ttl}};
            auto l = co_await m.lock();
            REQUIRE_FALSE(l);
            CHECK(l.error() == dl::errc::invalid_argument);
        }
        auto keys = dl::redis::resp::command({"DBSIZE"});
        auto size = co_await store.execute_command(std::move(keys));
        REQUIRE(size);
        CHECK(size.value().integer == 0);
    });
}

TEST_CASE("redis: a waiter is woken by the release notification", "[redis][notify]")
{
    redis_server server;
    asio::io_context io;
    dl::redis::store store{io, server.config()};
    recorder rec;
    run(io, [&]() -> asio::awaitable<void> {
        one_shot holder{store, "job", {.ttl = 30s}};
        auto held = co_await holder.lock();
        REQUIRE(held);
        // A backoff far longer than the test: only the notification can wake it in time.
        dl::basic_distributed_mutex<dl::redis::store, dl::observe::callback> waiter{
            store, "job", {.ttl = 30s},
            dl::retry::exponential_backoff{.initial = 20s, .max = 20s, .jitter = dl::retry::jitter::none, .deadline = 25s},
            rec.observer()};
        std::optional<dl::result<dl::lease>> got;
        asio::co_spawn(co_await asio::this_coro::executor,
                       [&]() -> asio::awaitable<void> { got = co_await waiter.lock(); }, asio::detached);
        while (rec.of<dl::wait_event>().empty())
            co_await settle(2ms);
        CHECK(store.subscribed_channels() == 1);
        {
            auto released = co_await held->unlock();
            REQUIRE(released);
        }
        for (int i = 0; i < 500 && !got; ++i)
            co_await settle(2ms);
        REQUIRE(got);
        REQUIRE(*got);
        const auto wakes = rec.of<dl::wake_event>();
        REQUIRE(wakes.size() == 1);
        CHECK(wakes.front().notified);
        co_await settle(20ms);
        CHECK(store.subscribed_channels() == 0); // unsubscribed when the waiter left
    });
}

TEST_CASE("redis: many coroutines on one connection never lose an update", "[redis][mutex]")
{
    redis_server server;
    asio::io_context io;
    dl::redis::store store{io, server.config()};
    constexpr int workers = 8, rounds = 25;
    int finished = 0, errors = 0;
    auto worker = [&]() -> asio::awaitable<void> {
        redis_mutex m{store, "wallet", {.ttl = 10s}, dl::retry::exponential_backoff{.initial = 1ms, .max = 10ms}};
        for (int i = 0; i < rounds; ++i) {
            auto lease = co_await m.lock();
            if (!lease) {
                ++errors;
                continue;
            }
            auto get = dl::redis::resp::command({"GET", "balance"});
            auto got = co_await store.execute_command(std::move(get));
            const long value = got && got.value().is_string() ? std::stol(got.value().text) : 0;
            auto next = std::to_string(value + 1);
            auto set = dl::redis::resp::command({"SET", "balance", next});
            (void)co_await store.execute_command(std::move(set));
            auto written = co_await store.fenced_write("ledger", lease->fence(), next);
            if (!written)
                ++errors;
            auto released = co_await lease->unlock();
            if (!released)
                ++errors;
        }
        ++finished;
    };
    run(io, [&]() -> asio::awaitable<void> {
        for (int w = 0; w < workers; ++w)
            asio::co_spawn(io, worker, asio::detached);
        while (finished < workers)
            co_await settle(5ms);
    }, std::chrono::seconds{120});
    CHECK(errors == 0);
    CHECK(finished == workers);
    CHECK(peek(io, server.config(), "balance") == std::to_string(workers * rounds));
}

TEST_CASE("redis: fenced writes reject older tokens atomically", "[redis][fencing]")
{
    redis_server server;
    asio::io_context io;
    dl::redis::store store{io, server.config()};
    run(io, [&]() -> asio::awaitable<void> {
        {
            auto w = co_await store.fenced_write("row", 5, "v5");
            REQUIRE(w);
        }
        {
            auto same = co_await store.fenced_write("row", 5, "v5b"); // one holder writes twice
            REQUIRE(same);
        }
        {
            auto stale = co_await store.fenced_write("row", 4, "v4");
            REQUIRE_FALSE(stale);
            CHECK(stale.error() == dl::errc::stale_fence);
        }
        auto value = co_await store.fenced_read("row");
        REQUIRE(value);
        CHECK(value.value() == std::optional<std::string>{"v5b"});
        auto none = co_await store.fenced_read("missing");
        REQUIRE(none);
        CHECK_FALSE(none.value().has_value());
    });
}

TEST_CASE("redis: several resources in one round trip, all or nothing", "[redis][multi]")
{
    redis_server server;
    asio::io_context io;
    dl::redis::store store{io, server.config()};
    run(io, [&]() -> asio::awaitable<void> {
        const auto owner = dl::owner_token::generate();
        const auto ids = dl::resources("a", "b", "c");
        auto all = co_await store.put_if_absent_all(ids, owner, 10s);
        REQUIRE(all);
        REQUIRE(all.value().size() == 3);
        for (std::size_t i = 0; i < ids.size(); ++i) { // the set's one token, held by each lock
            CHECK(all.value()[i] == all.value()[0]);
            auto info = co_await store.read(ids[i]);
            REQUIRE(info);
            CHECK(info.value().held);
            CHECK(info.value().fence == all.value()[i]);
        }
        const auto overlapping = dl::resources("c", "d");
        auto busy = co_await store.put_if_absent_all(overlapping, dl::owner_token::generate(), 10s);
        REQUIRE_FALSE(busy);
        CHECK(busy.error() == dl::errc::contended);
        auto d = dl::redis::resp::command({"EXISTS", store.lock_key("d")});
        auto d_exists = co_await store.execute_command(std::move(d));
        REQUIRE(d_exists);
        CHECK(d_exists.value().integer == 0); // nothing taken when one was held
        for (const auto& id : ids) {
            auto r = co_await store.release(id, owner);
            CHECK(r);
        }
    });
}

TEST_CASE("redis: scripts are reloaded after SCRIPT FLUSH", "[redis]")
{
    redis_server server;
    asio::io_context io;
    dl::redis::store store{io, server.config()};
    run(io, [&]() -> asio::awaitable<void> {
        one_shot m{store, "r"};
        auto a = co_await m.lock();
        REQUIRE(a);
        auto flush = dl::redis::resp::command({"SCRIPT", "FLUSH"});
        auto flushed = co_await store.execute_command(std::move(flush));
        REQUIRE(flushed);
        auto released = co_await a->unlock(); // EVALSHA gets NOSCRIPT, EVAL follows
        CHECK(released);
        auto b = co_await m.lock();
        REQUIRE(b);
        CHECK(b->fence() > a->fence());
    });
}

namespace {

// How many times Redis has run `command` (scripts' calls included), from INFO commandstats.
asio::awaitable<long> calls_of(dl::redis::store& store, std::string command)
{
    auto info = dl::redis::resp::command({"INFO", "commandstats"});
    auto reply = co_await store.execute_command(std::move(info));
    const auto& text = reply.value().text;
    const auto field = "cmdstat_" + command + ":calls=";
    const auto at = text.find(field);
    co_return at == std::string::npos ? 0 : std::stol(text.substr(at + field.size()));
}

} // namespace

TEST_CASE("redis: lock_all takes a set on one node in a single round trip", "[redis][multi]")
{
    redis_server server;
    asio::io_context io;
    dl::redis::store store{io, server.config()};
    run(io, [&]() -> asio::awaitable<void> {
        auto evalsha_calls = [&] { return calls_of(store, "evalsha"); };
        const auto before = co_await evalsha_calls();
        auto ids = dl::resources("wallet:7", "wallet:42", "wallet:9");
        auto all = co_await dl::lock_all(store, ids, {.ttl = 10s});
        REQUIRE(all);
        const auto after = co_await evalsha_calls();
        CHECK(after - before == 1);
        CHECK(all->resources() == dl::resources("wallet:42", "wallet:7", "wallet:9"));
        CHECK(all->valid());
        // Contended: the per-resource path waits, then takes them in order.
        auto busy = co_await dl::lock_all(store, ids, {.ttl = 10s}, dl::retry::exponential_backoff{.deadline = 300ms});
        REQUIRE_FALSE(busy);
        CHECK(busy.error() == dl::errc::timeout);
        const auto before_release = co_await evalsha_calls();
        auto released = co_await all->unlock();
        CHECK(released);
        const auto after_release = co_await evalsha_calls();
        CHECK(after_release - before_release == 1); // one script gives the set back
        auto keys = dl::redis::resp::command({"KEYS", "distlock:*:lock"});
        auto left = co_await store.execute_command(std::move(keys));
        REQUIRE(left);
        CHECK(left.value().elements.empty());

        // Leases kept by a watchdog stop renewing first, then go back in one script.
        auto watched = co_await dl::lock_all(store, ids, {.ttl = 3s}, dl::renew::watchdog{});
        REQUIRE(watched);
        for (const auto& id : ids) {
            auto exists = co_await store.execute("EXISTS", store.lock_key(id));
            REQUIRE(exists);
            CHECK(exists.value().integer == 1);
        }
        const auto before_watched = co_await evalsha_calls();
        const auto watched_released = co_await watched->unlock();
        CHECK(watched_released);
        const auto after_watched = co_await evalsha_calls();
        CHECK(after_watched - before_watched == 1);
        auto keys_again = dl::redis::resp::command({"KEYS", "distlock:*:lock"});
        auto gone = co_await store.execute_command(std::move(keys_again));
        REQUIRE(gone);
        CHECK(gone.value().elements.empty());
    });
}

TEST_CASE("redis: release_all gives back what the owner holds, in one script, and says what it did not", "[redis][multi]")
{
    redis_server server;
    asio::io_context io;
    dl::redis::store store{io, server.config()};
    run(io, [&]() -> asio::awaitable<void> {
        const auto owner = dl::owner_token::generate();
        const auto other = dl::owner_token::generate();
        { const auto ok_ = co_await store.put_if_absent("mine-1", owner, 10s); REQUIRE(ok_); }
        auto their_fence = co_await store.put_if_absent("theirs", other, 10s);
        REQUIRE(their_fence);
        { const auto ok_ = co_await store.put_if_absent("mine-2", owner, 10s); REQUIRE(ok_); }
        const auto ids = dl::resources("mine-1", "theirs", "absent", "mine-2");
        auto answers = co_await store.release_all(ids, owner);
        REQUIRE(answers);
        CHECK(answers.value() == std::vector<bool>{true, false, false, true});
        for (const auto* id : {"mine-1", "mine-2"}) {
            auto exists = co_await store.execute("EXISTS", store.lock_key(id));
            REQUIRE(exists);
            CHECK(exists.value().integer == 0);
        }
        auto theirs = co_await store.execute("GET", store.lock_key("theirs"));
        REQUIRE(theirs);
        CHECK(theirs.value().text == lock_value(other, their_fence.value())); // never another owner's lock
        const std::vector<std::string> empty;
        auto none = co_await store.release_all(empty, owner);
        REQUIRE_FALSE(none);
        CHECK(none.error() == dl::errc::invalid_argument);
        const auto twice = dl::resources("mine-1", "mine-1");
        auto doubled = co_await store.release_all(twice, owner);
        REQUIRE_FALSE(doubled);
        CHECK(doubled.error() == dl::errc::invalid_argument);
        auto taken_twice = co_await store.put_if_absent_all(twice, owner, 10s);
        REQUIRE_FALSE(taken_twice);
        CHECK(taken_twice.error() == dl::errc::invalid_argument);
        auto still_free = co_await store.execute("EXISTS", store.lock_key("mine-1"));
        REQUIRE(still_free);
        CHECK(still_free.value().integer == 0); // nothing was sent
    });
}

TEST_CASE("redis: release_all publishes the release where a waiter listens, and only there", "[redis][multi]")
{
    redis_server server;
    asio::io_context io;
    dl::redis::store store{io, server.config()};
    run(io, [&]() -> asio::awaitable<void> {
        auto publishes = [&] { return calls_of(store, "publish"); };
        const auto owner = dl::owner_token::generate();
        const auto ids = dl::resources("set:a", "set:b", "set:c");
        auto taken = co_await store.put_if_absent_all(ids, owner, 10s);
        REQUIRE(taken);
        auto listening = co_await store.watch("set:b"); // confirmed by Redis when this returns
        const auto before = co_await publishes();
        auto answers = co_await store.release_all(ids, owner);
        REQUIRE(answers);
        CHECK(answers.value() == std::vector<bool>{true, true, true});
        const auto after = co_await publishes();
        CHECK(after - before == 1); // set:b's channel; no one listens on the others
        const bool woken = co_await listening.wait(dl::clock::now() + 10s);
        CHECK(woken);
    });
}

TEST_CASE("redis: the wallet demo plays every scenario on Redis and on a Redlock quorum", "[redis][demo]")
{
    redis_server a, b, c;
    const auto url = [](const redis_server& s) { return "redis://127.0.0.1:" + std::to_string(s.port()); };
    {
        child demo{{DISTLOCK_WALLET_PATH, "--redis", url(a)}};
        CHECK(demo.wait(std::chrono::seconds{60}) == std::optional<int>{0});
    }
    {
        child demo{{DISTLOCK_WALLET_PATH, "--redis", url(a), "--redis", url(b), "--redis", url(c)}};
        CHECK(demo.wait(std::chrono::seconds{60}) == std::optional<int>{0});
    }
}

TEST_CASE("redis: the seat-booking example sells every seat once on Redis", "[redis][demo]")
{
    redis_server server;
    child demo{{DISTLOCK_SEATS_PATH, "--redis", "redis://127.0.0.1:" + std::to_string(server.port())}};
    CHECK(demo.wait(std::chrono::seconds{60}) == std::optional<int>{0});
}

TEST_CASE("redis: the README's tour runs its Redis steps on one server and on a quorum of three", "[redis][demo]")
{
    redis_server a, b, c;
    const auto url = [](const redis_server& s) { return "redis://127.0.0.1:" + std::to_string(s.port()); };
    child tour{{DISTLOCK_TOUR_PATH, "--redis", url(a), "--redis", url(b), "--redis", url(c)}};
    CHECK(tour.wait(std::chrono::seconds{60}) == std::optional<int>{0});
}

namespace {

// A listening socket that nobody may connect to: any connection to it is I/O that a
// refusal before any I/O must not make.
struct no_io_listener {
    asio::ip::tcp::acceptor acceptor;
    int accepted = 0;
    explicit no_io_listener(asio::io_context& io) : acceptor{io, {asio::ip::make_address("127.0.0.1"), 0}}
    {
        acceptor.async_accept([this](std::error_code ec, asio::ip::tcp::socket) {
            if (!ec)
                ++accepted;
        });
    }
    std::uint16_t port() const { return acceptor.local_endpoint().port(); }
    // Lets a connection that was started arrive, then says whether any did.
    bool reached(asio::io_context& io)
    {
        for (int i = 0; i < 10; ++i)
            io.poll();
        acceptor.close();
        return accepted != 0;
    }
};

} // namespace

TEST_CASE("redis: out-of-range timeouts are invalid_argument before any I/O", "[redis][input]")
{
    asio::io_context io;
    no_io_listener listener{io};
    const std::array<dl::duration, 6> bad{dl::duration::min(), dl::duration{-1}, dl::duration::zero(),
                                          dl::max_wait + dl::duration{1}, dl::duration::max(), -dl::max_wait};
    for (int which = 0; which < 3; ++which) {
        for (auto d : bad) {
            dl::redis::config cfg;
            cfg.port = listener.port();
            (which == 0 ? cfg.request_timeout : which == 1 ? cfg.connect_timeout : cfg.queue_ttl) = d;
            CHECK(cfg.validate() == dl::errc::invalid_argument);
            dl::redis::store store{io, cfg};
            run(io, [&]() -> asio::awaitable<void> {
                auto command = dl::redis::resp::command({"PING"});
                auto ping = co_await store.execute_command(std::move(command));
                REQUIRE_FALSE(ping);
                CHECK(ping.error() == dl::errc::invalid_argument);
                auto put = co_await store.put_if_absent("r", dl::owner_token::generate(), 1s);
                REQUIRE_FALSE(put);
                CHECK(put.error() == dl::errc::invalid_argument);
                one_shot m{store, "r"};
                auto l = co_await m.lock();
                REQUIRE_FALSE(l);
                CHECK(l.error() == dl::errc::invalid_argument);
                auto w = co_await store.watch("r"); // falls back to a timer, never connects
                (void)co_await w.wait(dl::clock::now());
            });
        }
    }
    // A fair channel's linger may be zero (unsubscribe at once), not negative.
    for (auto d : {dl::duration{-1}, dl::duration::min(), dl::max_wait + dl::duration{1}}) {
        dl::redis::config cfg;
        cfg.listen_linger = d;
        CHECK(cfg.validate() == dl::errc::invalid_argument);
    }
    dl::redis::config no_linger;
    no_linger.listen_linger = dl::duration::zero();
    CHECK_FALSE(no_linger.validate());
    CHECK_FALSE(listener.reached(io));
}

TEST_CASE("redis: a pool of command connections is refused where it cannot hold, before any I/O", "[redis][input]")
{
    asio::io_context io;
    no_io_listener listener{io};
    const auto port = listener.port();
    std::vector<dl::redis::config> refused;
    for (std::size_t n : {std::size_t{0}, std::size_t{65}, std::numeric_limits<std::size_t>::max()}) {
        dl::redis::config c;
        c.port = port;
        c.connections = n;
        refused.push_back(c);
    }
    {
        dl::redis::config c; // WAIT counts the writes of its own connection only
        c.port = port;
        c.connections = 2;
        c.wait_replicas = 1;
        refused.push_back(c);
    }
    {
        dl::redis::config c;
        c.connections = 2;
        c.cluster_nodes = {{"127.0.0.1", port}};
        refused.push_back(c);
    }
    {
        dl::redis::config c;
        c.connections = 2;
        c.sentinels = {{"127.0.0.1", port}};
        c.sentinel_master = "primary";
        refused.push_back(c);
    }
    for (const auto& cfg : refused) {
        CHECK(cfg.validate() == dl::errc::invalid_argument);
        dl::redis::store store{io, cfg};
        run(io, [&]() -> asio::awaitable<void> {
            one_shot m{store, "pool"};
            auto l = co_await m.lock();
            REQUIRE_FALSE(l);
            CHECK(l.error() == dl::errc::invalid_argument);
        });
    }
    CHECK_FALSE(listener.reached(io));
    dl::redis::config most;
    most.connections = 64;
    CHECK_FALSE(most.validate());
}

TEST_CASE("redis: the longest accepted timeouts work and do not overflow", "[redis][input]")
{
    redis_server server;
    asio::io_context io;
    auto cfg = server.config();
    cfg.request_timeout = dl::max_wait;
    cfg.connect_timeout = dl::max_wait;
    cfg.queue_ttl = dl::max_wait;
    CHECK_FALSE(cfg.validate());
    dl::redis::store store{io, cfg};
    run(io, [&]() -> asio::awaitable<void> {
        one_shot m{store, "long-timeouts"};
        auto l = co_await m.lock();
        REQUIRE(l);
        auto w = co_await store.watch("long-timeouts");
        (void)co_await w.wait(dl::clock::now());
        auto r = co_await l->unlock();
        CHECK(r);
    });
    store.disconnect();
}

namespace {
// An id other than `resource` whose keys hash to the same slot, so shares its fence key.
std::string slot_mate(const dl::redis::store& store, const std::string& resource)
{
    for (int i = 0;; ++i) {
        auto id = resource + ":mate:" + std::to_string(i);
        if (store.fence_key(id) == store.fence_key(resource))
            return id;
    }
}

dl::fence_token now_us()
{
    return static_cast<dl::fence_token>(
        std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
            .count());
}
// The text a key holds (GET).
asio::awaitable<std::string> text_at(dl::redis::store& store, const std::string& key)
{
    auto r = co_await store.execute("GET", key);
    REQUIRE(r);
    co_return r.value().text;
}
} // namespace

TEST_CASE("redis: the fence key has no TTL and only grows, for every resource of its slot", "[redis][fencing]")
{
    redis_server server;
    asio::io_context io;
    dl::redis::store store{io, server.config()};
    const auto pttl = [&](const std::string& key) -> asio::awaitable<long long> {
        auto r = co_await store.execute("PTTL", key);
        REQUIRE(r);
        co_return r.value().integer;
    };
    run(io, [&]() -> asio::awaitable<void> {
        one_shot m{store, "kept", {.ttl = 10s}};
        auto l = co_await m.lock();
        REQUIRE(l);
        const auto key = store.fence_key("kept");
        CHECK(co_await text_at(store, key) == std::to_string(l->fence()));
        CHECK(co_await pttl(key) == -1); // no TTL: one key per slot, whatever was locked
        // An extension touches the lock alone.
        auto extended = co_await store.extend("kept", l->owner(), 60s);
        REQUIRE(extended);
        CHECK(co_await pttl(store.lock_key("kept")) > 10'000);
        CHECK(co_await text_at(store, key) == std::to_string(l->fence()));
        { const auto ok_ = co_await l->unlock(); CHECK(ok_); }

        // A token raised above this server's clock (a quorum's, from a node whose clock
        // runs ahead; or a clock stepped back by 100 s) is where the next token of every
        // resource of the slot starts.
        const auto ahead = now_us() + 100'000'000;
        auto raised = co_await store.raise_fence("kept", ahead);
        REQUIRE(raised);
        CHECK(raised.value() == ahead);
        auto lower = co_await store.raise_fence("kept", 5); // never lowered
        REQUIRE(lower);
        CHECK(lower.value() == ahead);
        const auto mate = slot_mate(store, "kept");
        auto next = co_await store.next_fence(mate);
        REQUIRE(next);
        CHECK(next.value() == ahead + 1);
        auto again = co_await m.lock();
        REQUIRE(again);
        CHECK(again->fence() == ahead + 2);
        auto info = co_await store.read(mate);
        REQUIRE(info);
        CHECK_FALSE(info.value().held);
        CHECK(info.value().fence == again->fence()); // a free resource: its slot's last token
        { const auto ok_ = co_await again->unlock(); CHECK(ok_); }
        // Another slot's key is untouched.
        auto elsewhere = co_await store.next_fence("elsewhere");
        REQUIRE(elsewhere);
        CHECK(store.fence_key("elsewhere") != key);
        CHECK(elsewhere.value() < ahead);

        // Floors the scripts could not hold exactly are refused before any I/O.
        for (const auto floor : {dl::fence_token{1} << 53, ~dl::fence_token{0}}) {
            auto too_high = co_await store.raise_fence("kept", floor);
            REQUIRE_FALSE(too_high);
            CHECK(too_high.error() == dl::errc::invalid_argument);
            auto releasing = co_await store.release_raising("kept", dl::owner_token::generate(), floor);
            REQUIRE_FALSE(releasing);
            CHECK(releasing.error() == dl::errc::invalid_argument);
        }
        CHECK(co_await text_at(store, key) == std::to_string(ahead + 2));
    });
}

TEST_CASE("redis: a lost fence key: the next token comes from the server's clock, still larger", "[redis][fencing]")
{
    redis_server server;
    asio::io_context io;
    dl::redis::store store{io, server.config()};
    run(io, [&]() -> asio::awaitable<void> {
        one_shot m{store, "lost"};
        auto first = co_await m.lock();
        REQUIRE(first);
        { const auto ok_ = co_await first->unlock(); CHECK(ok_); }
        auto gone = co_await store.execute("DEL", store.fence_key("lost")); // evicted, or restarted empty
        REQUIRE(gone);
        CHECK(gone.value().integer == 1);
        auto second = co_await m.lock();
        REQUIRE(second);
        CHECK(second->fence() > first->fence());
        { const auto ok_ = co_await second->unlock(); CHECK(ok_); }
    });
}

TEST_CASE("redis: a set's token is above every fence key of its slots, and raises them all, past 1,000 slots",
          "[redis][fencing][multi]")
{
    redis_server server;
    asio::io_context io;
    dl::redis::store store{io, server.config()};
    const auto token_at = [&](const std::string& key) -> asio::awaitable<dl::fence_token> {
        auto r = co_await store.execute("GET", key);
        REQUIRE(r);
        REQUIRE(r.value().is_string());
        co_return std::stoull(r.value().text);
    };
    run(io, [&]() -> asio::awaitable<void> {
        // Two resources of two slots; the second one's slot runs 100 s ahead.
        std::string second = "set:b";
        while (store.fence_key(second) == store.fence_key("set:a"))
            second += "+";
        const auto ahead = now_us() + 100'000'000;
        { const auto ok_ = co_await store.raise_fence(second, ahead); REQUIRE(ok_); }
        const std::vector<std::string> two{"set:a", second};
        auto taken = co_await store.put_if_absent_all(two, dl::owner_token::generate(), 10s);
        REQUIRE(taken);
        CHECK(taken.value()[0] == ahead + 1);
        CHECK(taken.value()[1] == ahead + 1);
        CHECK(co_await token_at(store.fence_key("set:a")) == ahead + 1); // raised with the set
        CHECK(co_await token_at(store.fence_key(second)) == ahead + 1);

        // A set over more than 1,000 slots: the script reads and writes the fence keys
        // in parts (Lua's unpack() has a limit).
        // One of them shares the raised slot, so the set starts above it.
        std::vector<std::string> wide{slot_mate(store, second)};
        std::set<std::string> slots_seen{store.fence_key(second)};
        for (int i = 0; wide.size() < 1200; ++i) {
            auto id = "wide:" + std::to_string(i);
            if (slots_seen.insert(store.fence_key(id)).second)
                wide.push_back(std::move(id));
        }
        std::sort(wide.begin(), wide.end());
        auto all = co_await store.put_if_absent_all(wide, dl::owner_token::generate(), 10s);
        REQUIRE(all);
        for (const auto& key : slots_seen)
            CHECK(co_await token_at(key) == all.value()[0]);
        CHECK(all.value()[0] > ahead + 1); // above the raised slots too
    });
}

TEST_CASE("redis: acquire::fair checks the fence before the head leaves the line", "[redis][fencing][fair]")
{
    redis_server server;
    asio::io_context io;
    dl::redis::store store{io, server.config()};
    run(io, [&]() -> asio::awaitable<void> {
        const auto holder = dl::owner_token::generate(), waiter = dl::owner_token::generate();
        auto held = co_await store.put_if_first("fair-fence", holder, holder, 10s, 1, false);
        REQUIRE(held);
        REQUIRE(held.value().is_granted());
        auto queued = co_await store.put_if_first("fair-fence", waiter, waiter, 10s, 2, true);
        REQUIRE(queued);
        REQUIRE_FALSE(queued.value().is_granted());
        { const auto ok_ = co_await store.release_to_head("fair-fence", holder); REQUIRE(ok_); }
        auto broken = co_await store.execute("SET", store.fence_key("fair-fence"), "broken");
        REQUIRE(broken);
        auto refused = co_await store.put_if_first("fair-fence", waiter, waiter, 10s, 2, true);
        REQUIRE_FALSE(refused);
        CHECK(refused.error() == dl::errc::store_unavailable);
        auto place = co_await store.execute("ZSCORE", store.queue_key("fair-fence"), waiter.to_hex());
        REQUIRE(place);
        CHECK(place.value().is_string()); // still first in line
    });
}

TEST_CASE("redis: a fence key that holds no token below 2^53 fails every script before it writes", "[redis][fencing][input]")
{
    redis_server server;
    asio::io_context io;
    dl::redis::store store{io, server.config()};
    const auto exists = [&](const std::string& key) -> asio::awaitable<bool> {
        auto r = co_await store.execute("EXISTS", key);
        REQUIRE(r);
        co_return r.value().integer == 1;
    };
    run(io, [&]() -> asio::awaitable<void> {
        const std::string id = "broken";
        const auto mate = slot_mate(store, id);
        const auto key = store.fence_key(id);
        // A lock held by another owner on a resource of the slot, to see a release
        // that raises leave it as it was.
        const auto holder = dl::owner_token::generate();
        auto held = co_await store.put_if_absent(mate, holder, 60s);
        REQUIRE(held);
        const auto held_value = lock_value(holder, held.value());
        const std::vector<std::string> not_tokens{"not a number", "inf", "nan", "1e300", "9007199254740992",
                                                  "99999999999999999", "-5", "1.5", " 12", "0x10", "",
                                                  "x\r\n*2\r\n:1\r\n:1\r\n+"}; // a reply forged in the error line
        const std::vector<std::string> just_id{id};
        for (const auto& bad : not_tokens) {
            UNSCOPED_INFO("fence key holds '" << bad << "'");
            auto set = co_await store.execute("SET", key, bad);
            REQUIRE(set);
            const auto fails = [&](const auto& r) {
                REQUIRE_FALSE(r);
                CHECK(r.error() == dl::errc::store_unavailable);
            };
            dl::diagnostics diag;
            fails(co_await store.put_if_absent(id, dl::owner_token::generate(), 10s, &diag));
            CHECK(diag.server_message().find("distlock") != std::string_view::npos);
            fails(co_await store.put_if_absent_all(just_id, dl::owner_token::generate(), 10s));
            fails(co_await store.put_if_first(id, dl::owner_token::generate(), dl::owner_token::generate(), 10s, 2, true));
            fails(co_await store.next_fence(id));
            fails(co_await store.raise_fence(id, 5));
            fails(co_await store.release_raising(mate, holder, 5));
            fails(co_await store.read(id));
            // Nothing written: no lock, no place in line, the holder's lock as it was,
            // the key as it was.
            const bool lock_left = co_await exists(store.lock_key(id));
            const bool queue_left = co_await exists(store.queue_key(id));
            CHECK_FALSE(lock_left);
            CHECK_FALSE(queue_left);
            auto still = co_await store.execute("GET", store.lock_key(mate));
            REQUIRE(still);
            CHECK(still.value().text == held_value);
            auto kept = co_await store.execute("GET", key);
            REQUIRE(kept);
            CHECK(kept.value().text == bad);
        }
        // A fence key of another type fails too, for one resource and for a set whose
        // other fence keys are fine.
        auto gone = co_await store.execute("DEL", key);
        REQUIRE(gone);
        auto hashed = co_await store.execute("HSET", key, "field", "1");
        REQUIRE(hashed);
        std::string elsewhere = "elsewhere";
        while (store.fence_key(elsewhere) == key)
            elsewhere += "+";
        const std::vector<std::string> pair_of{elsewhere, id};
        {
            auto one = co_await store.put_if_absent(id, dl::owner_token::generate(), 10s);
            REQUIRE_FALSE(one);
            CHECK(one.error() == dl::errc::store_unavailable);
            auto both = co_await store.put_if_absent_all(pair_of, dl::owner_token::generate(), 10s);
            REQUIRE_FALSE(both);
            CHECK(both.error() == dl::errc::store_unavailable);
            const bool lock_left = co_await exists(store.lock_key(elsewhere));
            CHECK_FALSE(lock_left);
        }
        auto cleared = co_await store.execute("DEL", key);
        REQUIRE(cleared);
        // Mended by setting a token at least as large as any handed out.
        auto mended = co_await store.execute("SET", key, std::to_string(held.value()));
        REQUIRE(mended);
        auto taken = co_await store.put_if_absent(id, dl::owner_token::generate(), 10s);
        REQUIRE(taken);
        CHECK(taken.value() > held.value());
        auto released = co_await store.release_raising(mate, holder, taken.value());
        CHECK(released);
    });
}

TEST_CASE("redis: a grant reads every fence key the scripts accept, and one token short of 2^53 fails as it was",
          "[redis][fencing][input]")
{
    // A grant's script takes the fence key's next value with INCR, which refuses some
    // texts that are tokens to the other scripts (leading zeros) and takes 2^53 - 1
    // to 2^53: such a key is read as the other scripts read it, and left as it was
    // when the grant is refused.
    redis_server server;
    asio::io_context io;
    dl::redis::store store{io, server.config()};
    run(io, [&]() -> asio::awaitable<void> {
        const std::string id = "padded";
        const auto key = store.fence_key(id);

        // Leading zeros (a token to the scripts' helpers, up to 16 characters, so below
        // the clock): the next token is the clock's, written plainly.
        auto set = co_await store.execute("SET", key, "0000000000000005");
        REQUIRE(set);
        const auto before = now_us();
        auto low = co_await store.put_if_absent(id, dl::owner_token::generate(), 10s);
        REQUIRE(low);
        CHECK(low.value() >= before);
        CHECK(co_await text_at(store, key) == std::to_string(low.value()));
        auto freed = co_await store.execute("DEL", store.lock_key(id));
        REQUIRE(freed);

        // The last token below 2^53: no next one. The grant is refused and the key
        // holds what it held.
        const std::string last = "9007199254740991";
        set = co_await store.execute("SET", key, last);
        REQUIRE(set);
        dl::diagnostics diag;
        auto full = co_await store.put_if_absent(id, dl::owner_token::generate(), 10s, &diag);
        REQUIRE_FALSE(full);
        CHECK(full.error() == dl::errc::store_unavailable);
        CHECK(diag.server_message().find("2^53") != std::string_view::npos);
        CHECK(co_await text_at(store, key) == last);
        auto lock_left = co_await store.execute("EXISTS", store.lock_key(id));
        REQUIRE(lock_left);
        CHECK(lock_left.value().integer == 0);
    });
}

TEST_CASE("redis: read() of a lock written by another client: the owner as stored, the token when it has one",
          "[redis][input]")
{
    redis_server server;
    asio::io_context io;
    dl::redis::store store{io, server.config()};
    run(io, [&]() -> asio::awaitable<void> {
        const auto read_of = [&](const std::string& value) -> asio::awaitable<dl::lock_info> {
            auto set = co_await store.execute("SET", store.lock_key("foreign"), value, "PX", "60000");
            REQUIRE(set);
            auto info = co_await store.read("foreign");
            REQUIRE(info);
            co_return info.value();
        };
        auto old = co_await read_of("0123456789abcdef0123456789abcdef"); // an older client's: the owner alone
        CHECK(old.held);
        CHECK(old.owner == "01234567");
        CHECK(old.fence == 0);
        CHECK(old.remaining.has_value());
        auto bad = co_await read_of("0123456789abcdef0123456789abcdef:12x");
        CHECK(bad.held);
        CHECK(bad.fence == 0);
        auto huge = co_await read_of("0123456789abcdef0123456789abcdef:99999999999999999999");
        CHECK(huge.fence == 0);
        auto bare = co_await read_of(":42"); // no owner, but held
        CHECK(bare.held);
        CHECK(bare.owner.empty());
        CHECK(bare.fence == 42);
    });
}

TEST_CASE("redis: 2,000 distinct resources locked and released leave only their slots' fence keys behind",
          "[redis][fencing]")
{
    redis_server server;
    asio::io_context io;
    dl::redis::store store{io, server.config()};
    run(io, [&]() -> asio::awaitable<void> {
        std::map<std::string, dl::fence_token> last;
        std::vector<dl::lease> expiring;
        for (int i = 0; i < 2000; ++i) {
            auto id = "order:" + std::to_string(i);
            // A TTL that a slow, busy machine's round trip cannot use up (lock() refuses
            // a lease whose validity is gone on arrival), short enough to wait out.
            one_shot m{store, id, {.ttl = 1s}};
            auto l = co_await m.lock();
            REQUIRE(l);
            last[id] = l->fence();
            if (i % 2 == 0) { // half released, half left to expire
                const auto ok_ = co_await l->unlock();
                CHECK(ok_);
            } else {
                expiring.push_back(std::move(*l));
            }
        }
        const auto keys = [&]() -> asio::awaitable<long long> {
            auto r = co_await store.execute("DBSIZE");
            REQUIRE(r);
            co_return r.value().integer;
        };
        std::set<std::string> fence_keys;
        for (const auto& [id, fence] : last)
            fence_keys.insert(store.fence_key(id));
        CHECK(fence_keys.size() < 2000); // slots shared: 2,000 ids fall in fewer slots
        const auto expected = static_cast<long long>(fence_keys.size());
        long long left = -1;
        for (int tries = 0; tries < 500 && left != expected; ++tries) {
            left = co_await keys();
            if (left != expected) {
                asio::steady_timer t{co_await asio::this_coro::executor, 20ms};
                co_await t.async_wait(asio::use_awaitable);
            }
        }
        CHECK(left == expected);
        for (const auto& k : fence_keys) {
            auto fence = co_await store.execute("EXISTS", k);
            REQUIRE(fence);
            CHECK(fence.value().integer == 1);
        }
        // Forgotten, and still each resource's next token is larger.
        for (const auto& [id, fence] : last) {
            one_shot m{store, id};
            auto again = co_await m.lock();
            REQUIRE(again);
            CHECK(again->fence() > fence);
            const auto ok_ = co_await again->unlock();
            CHECK(ok_);
        }
    });
}

namespace {
// The store of one key prefix, for layout checks (never connects).
std::string key_of(asio::io_context& io, const std::string& prefix, const std::string& id, int kind)
{
    dl::redis::config cfg;
    cfg.key_prefix = prefix;
    dl::redis::store s{io, cfg};
    return kind == 0 ? s.lock_key(id) : kind == 1 ? s.fence_key(id) : kind == 2 ? s.channel(id) : s.queue_key(id);
}
} // namespace

TEST_CASE("redis: the key layout, for ids written in place and ids escaped", "[redis][input]")
{
    asio::io_context io;
    // Nothing to escape: written in place at its final size.
    CHECK(key_of(io, "p", "job", 0) == "p:{#job}:lock");
    // A slot's fence key is pinned: every client, of every version, must compute the
    // same one for a resource (the slot of "#job" has the tag "$0IB").
    CHECK(key_of(io, "p", "job", 1) == "p:{$0IB}:fence");
    CHECK(key_of(io, "p", "job", 2) == "p:{#job}:released");
    CHECK(key_of(io, "distlock", std::string(100, 'x'), 0) == "distlock:{#" + std::string(100, 'x') + "}:lock");
    // The prefix escaped once, for both ways of writing the id.
    CHECK(key_of(io, "p{%}", "job", 0) == "p%7B%25%7D:{#job}:lock");
    CHECK(key_of(io, "p{%}", "a%b", 0) == "p%7B%25%7D:{#a%25b}:lock");
    // An id that needs escaping.
    CHECK(key_of(io, "p", "{x}%", 3) == "p:{#%7Bx%7D%25}:queue");
    CHECK(key_of(io, "p{%}", "{x}%", 1) == "p%7B%25%7D:{$kv}:fence");
    CHECK(key_of(io, "p", std::string{"a\0b", 3}, 0) == std::string{"p:{#a\0b}:lock", 13});
}

TEST_CASE("redis: no two prefix and resource pairs share a key", "[redis][input]")
{
    asio::io_context io;
    // The pair from the tracker: both used to be "a:{#b:{#c}:lock".
    for (int kind = 0; kind < 4; ++kind)
        CHECK(key_of(io, "a", "b:{#c", kind) != key_of(io, "a:{#b", "c", kind));

    // Random binary prefixes and ids, over an alphabet made of the layout's own
    // separators and escape characters, so that collisions would be likely.
    const std::string alphabet{"ab:{}#%7BD\0\xff", 12};
    std::mt19937 rng{20261201};
    auto random_text = [&](std::size_t min_size) {
        std::string out;
        const auto n = min_size + rng() % 7;
        for (std::size_t i = 0; i < n; ++i)
            out.push_back(alphabet[rng() % alphabet.size()]);
        return out;
    };
    std::map<std::string, std::tuple<std::string, std::string, int>> seen;
    std::size_t distinct_pairs = 0;
    for (int i = 0; i < 4000; ++i) {
        const auto prefix = random_text(0), id = random_text(1);
        for (int kind = 0; kind < 4; ++kind) {
            const auto k = key_of(io, prefix, id, kind);
            // The fence key is the prefix's: it names the prefix alone.
            const auto named = std::tuple{prefix, kind == 1 ? std::string{} : id, kind};
            const auto [it, fresh] = seen.emplace(k, named);
            if (fresh) {
                ++distinct_pairs;
                continue;
            }
            INFO("prefix " << prefix << " id " << id << " kind " << kind);
            CHECK(it->second == named); // the same pair (or prefix) drawn twice
        }
        // One hash tag per resource, the same for all its keys, and never empty:
        // Redis Cluster hashes from the first '{' to the next '}'.
        const auto lock = key_of(io, prefix, id, 0), channel = key_of(io, prefix, id, 2);
        const auto open = lock.find('{');
        REQUIRE(open != std::string::npos);
        const auto close = lock.find('}', open + 1);
        REQUIRE(close != std::string::npos);
        CHECK(close > open + 1);
        CHECK(lock.substr(open, close - open) == channel.substr(channel.find('{'), close - open));
    }
    CHECK(distinct_pairs > 10000);
}

TEST_CASE("redis: stores with colliding-looking prefixes hold their locks side by side", "[redis][input]")
{
    redis_server server;
    asio::io_context io;
    auto cfg_a = server.config(), cfg_b = server.config();
    cfg_a.key_prefix = "a";
    cfg_b.key_prefix = "a:{#b";
    dl::redis::store a{io, cfg_a}, b{io, cfg_b};
    run(io, [&]() -> asio::awaitable<void> {
        one_shot first{a, "b:{#c"}, second{b, "c"};
        auto one = co_await first.lock();
        REQUIRE(one);
        auto two = co_await second.lock();
        REQUIRE(two); // a different lock, though the texts look alike
        // Each prefix has its own fence key, holding its own last token.
        CHECK(a.fence_key("b:{#c") != b.fence_key("c"));
        auto fence_a = co_await a.execute("GET", a.fence_key("b:{#c"));
        auto fence_b = co_await b.execute("GET", b.fence_key("c"));
        REQUIRE(fence_a);
        REQUIRE(fence_b);
        CHECK(fence_a.value().text == std::to_string(one->fence()));
        CHECK(fence_b.value().text == std::to_string(two->fence()));
        auto held_a = co_await a.read("b:{#c");
        REQUIRE(held_a);
        CHECK(held_a.value().fence == one->fence());
        auto r1 = co_await one->unlock();
        auto r2 = co_await two->unlock();
        CHECK(r1);
        CHECK(r2);
    });
}

TEST_CASE("redis: with wait_replicas a grant is reported once a replica has it; unreplicated, it fails and is given "
          "back",
          "[redis][replication]")
{
    redis_server primary;
    redis_server replica{{"--replicaof", "127.0.0.1", std::to_string(primary.port())}};
    auto cfg = primary.config();
    cfg.wait_replicas = 1;
    cfg.wait_timeout = 300ms;
    {
        auto bad = cfg;
        bad.wait_timeout = bad.request_timeout; // the reply would come after the request timeout
        CHECK(bad.validate() == dl::errc::invalid_argument);
        bad.wait_timeout = 0ms; // WAIT 0 would wait forever
        CHECK(bad.validate() == dl::errc::invalid_argument);
    }
    asio::io_context io;
    dl::redis::store store{io, cfg}, on_replica{io, replica.config()};
    run(io, [&]() -> asio::awaitable<void> {
        // The replica is online once its first synchronisation is done.
        for (int i = 0; i < 400; ++i) {
            auto info = co_await store.execute("INFO", "replication");
            if (info && info->text.find("state=online") != std::string::npos)
                break;
            co_await settle(25ms);
        }
        one_shot m{store, "wallet:1", {.ttl = 10s}};
        dl::diagnostics first_diag;
        auto held = co_await m.lock(first_diag);
        INFO(first_diag.to_string());
        REQUIRE(held);
        // Reported only after the replica acknowledged it: the replica has the key.
        auto copy = co_await on_replica.execute("GET", store.lock_key("wallet:1"));
        REQUIRE(copy);
        CHECK(copy->text == lock_value(*held));
        { const auto ok_ = co_await held->unlock(); REQUIRE(ok_); }

        // A replica that stopped answering: the grant is not acknowledged in time.
        ::kill(replica.pid(), SIGSTOP);
        dl::diagnostics diag;
        auto refused = co_await m.lock(diag);
        ::kill(replica.pid(), SIGCONT);
        REQUIRE_FALSE(refused);
        CHECK(refused.error() == dl::errc::not_replicated);
        CHECK(refused.error() == dl::condition::maybe_applied);
        CHECK(diag.client_message().find("0 of 1 replicas") != std::string_view::npos);
        // Given back by owner token, as after a lost reply.
        std::optional<dl::lock_info> left;
        for (int i = 0; i < 200; ++i) {
            auto r = co_await store.read("wallet:1");
            if (r && !r->held) {
                left = *r;
                break;
            }
            co_await settle(25ms);
        }
        REQUIRE(left);
        CHECK_FALSE(left->held);
        // Afterwards, with the replica back, locks are granted again.
        auto again = co_await m.lock();
        REQUIRE(again);
        CHECK(again->fence() > held->fence());
        { const auto ok_ = co_await again->unlock(); CHECK(ok_); }
        co_await store.close();
        co_await on_replica.close();
    });
}

TEST_CASE("redis: Redlock aligns the nodes' tokens as it releases; a node far behind is raised before the lease",
          "[redis][quorum][fencing]")
{
    redis_server s0, s1, s2;
    asio::io_context io;
    dl::redis::store n0{io, s0.config()}, n1{io, s1.config()}, n2{io, s2.config()};
    dl::redis::store* pointers[] = {&n0, &n1, &n2};
    dl::quorum<dl::redis::store> nodes{std::span<dl::redis::store* const>{pointers}};
    using redlock = dl::basic_distributed_mutex<dl::quorum<dl::redis::store>, dl::observe::callback, dl::retry::none>;
    // Which nodes' grants the decision counted.
    std::vector<std::size_t> voted;
    const dl::observe::callback votes{[&](const dl::event& e) {
        if (const auto* v = std::get_if<dl::vote_event>(&e); v && !v->error)
            voted.push_back(v->node);
    }};
    // Scripts a node has run (EVALSHA, and EVAL after a NOSCRIPT).
    const auto scripts = [](dl::redis::store& s) -> asio::awaitable<long> {
        auto info = co_await s.execute("INFO", "commandstats");
        REQUIRE(info);
        long calls = 0;
        static const std::array<std::string, 2> names{"cmdstat_evalsha:calls=", "cmdstat_eval:calls="};
        for (const auto& name : names) {
            const auto at = info.value().text.find(name);
            if (at != std::string::npos)
                calls += std::stol(info.value().text.substr(at + name.size()));
        }
        co_return calls;
    };
    const auto fence_on = [](dl::redis::store& s, const std::string& resource) -> asio::awaitable<dl::fence_token> {
        auto v = co_await s.execute("GET", s.fence_key(resource));
        REQUIRE(v);
        co_return v.value().is_null() ? 0 : std::stoull(v.value().text);
    };
    const auto now_us = [] {
        return static_cast<dl::fence_token>(
            std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
                .count());
    };
    run(io, [&]() -> asio::awaitable<void> {
        { // connected, scripts loaded
            redlock warm{nodes, "warm-up", {}, votes};
            auto l = co_await warm.lock();
            REQUIRE(l);
            { const auto ok_ = co_await l->unlock(); REQUIRE(ok_); }
        }
        // Nodes 1 and 2 hand out tokens 1 s ahead of node 0's clock (as if their clocks
        // ran ahead): within half the TTL of 10 s. Any majority has one of them.
        for (int round = 0; round < 4; ++round) {
            const std::string resource = "near:" + std::to_string(round);
            const auto ahead = now_us() + 1'000'000;
            { const auto ok_ = co_await n1.raise_fence(resource, ahead); REQUIRE(ok_); }
            { const auto ok_ = co_await n2.raise_fence(resource, ahead); REQUIRE(ok_); }
            std::vector<long> before;
            for (auto* n : pointers)
                before.push_back(co_await scripts(*n));
            redlock m{nodes, resource, {.ttl = 10s}, votes};
            auto l = co_await m.lock();
            REQUIRE(l);
            CHECK(l->fence() > ahead);
            for (std::size_t i = 0; i < 3; ++i) { // the grant alone: no round trip to raise
                const auto now = co_await scripts(*pointers[i]);
                CHECK(now - before[i] == 1);
            }
            const auto behind = co_await fence_on(n0, resource);
            CHECK(behind < l->fence()); // node 0 stays behind until the release
            { const auto ok_ = co_await l->unlock(); REQUIRE(ok_); }
            for (std::size_t i = 0; i < 3; ++i) {
                const auto now = co_await scripts(*pointers[i]);
                CHECK(now - before[i] == 2); // the release raised it in the same script
                const auto fence = co_await fence_on(*pointers[i], resource);
                CHECK(fence >= l->fence());
            }
            auto next = co_await m.lock(); // from any majority, a larger token
            REQUIRE(next);
            CHECK(next->fence() > l->fence());
            { const auto ok_ = co_await next->unlock(); REQUIRE(ok_); }
        }

        // 60 s ahead, beyond half the TTL: when node 0's grant is counted (its reply
        // comes first or second, usually), node 0 is raised before the lease is
        // reported. Each round goes 60 s further: a node's token is shared by every
        // resource, so node 0 is raised to the last round's token.
        int raised_at_once = 0;
        for (int round = 0; round < 12 && raised_at_once < 2; ++round) {
            const std::string resource = "far:" + std::to_string(round);
            const auto far = now_us() + 60'000'000 * static_cast<dl::fence_token>(round + 1);
            { const auto ok_ = co_await n1.raise_fence(resource, far); REQUIRE(ok_); }
            { const auto ok_ = co_await n2.raise_fence(resource, far); REQUIRE(ok_); }
            redlock f{nodes, resource, {.ttl = 10s}, votes};
            voted.clear();
            auto fl = co_await f.lock();
            REQUIRE(fl);
            CHECK(fl->fence() > far);
            if (std::find(voted.begin(), voted.end(), std::size_t{0}) != voted.end()) {
                const auto fence = co_await fence_on(n0, resource);
                CHECK(fence >= fl->fence());
                ++raised_at_once;
            }
            { const auto ok_ = co_await fl->unlock(); REQUIRE(ok_); }
        }
        CHECK(raised_at_once > 0);
    });
}

TEST_CASE("redis: a held lock is data: the answer says until when the holder's lock runs out", "[redis]")
{
    test::redis_server server;
    asio::io_context io;
    dl::redis::store store{io, server.config()};
    test::run(io, [&]() -> asio::awaitable<void> {
        const auto owner = dl::owner_token::generate();
        auto first = co_await store.put_if_absent_answer("data:held", owner, 10s);
        REQUIRE(first);
        REQUIRE(first->is_granted());
        const auto asked = dl::clock::now();
        auto second = co_await store.put_if_absent_answer("data:held", dl::owner_token::generate(), 10s);
        const auto answered = dl::clock::now();
        REQUIRE(second);
        REQUIRE_FALSE(second->is_granted());
        REQUIRE(second->not_before());
        // The holder's PTTL, measured from the request: within the TTL from now.
        CHECK(*second->not_before() > asked + 9s);
        CHECK(*second->not_before() <= answered + 10s);
        auto released = co_await store.release("data:held", owner);
        CHECK(released);
    });
}

TEST_CASE("redis lifetimes: a store destroyed with a lease held and a lock() waiting", "[redis][lifetime]")
{
    test::redis_server server;
    asio::io_context io;
    auto holder_store = std::make_unique<dl::redis::store>(io, server.config());
    auto waiter_store = std::make_unique<dl::redis::store>(io, server.config());
    std::optional<dl::lease> held;
    test::run(io, [&]() -> asio::awaitable<void> {
        dl::basic_distributed_mutex<dl::redis::store, dl::renew::watchdog> m{*holder_store, "life:job", {.ttl = 3s}};
        auto l = co_await m.lock();
        REQUIRE(l);
        held.emplace(std::move(*l));
    });
    std::optional<dl::result<dl::lease>> waited;
    asio::co_spawn(
        io,
        [](dl::redis::store& s, std::optional<dl::result<dl::lease>>& out) -> asio::awaitable<void> {
            dl::basic_distributed_mutex<dl::redis::store> m{
                s, "life:job", {.ttl = 3s}, dl::retry::exponential_backoff{.initial = 20s, .max = 20s, .deadline = 60s}};
            out.emplace(co_await m.lock());
        }(*waiter_store, waited),
        asio::detached);
    for (int i = 0; i < 200 && waiter_store->subscribed_channels() == 0; ++i)
        io.run_for(5ms);
    REQUIRE(waiter_store->subscribed_channels() == 1);
    waiter_store.reset();
    holder_store.reset();
    for (int i = 0; i < 2000 && !waited; ++i)
        io.run_for(5ms);
    REQUIRE(waited);
    REQUIRE_FALSE(*waited);
    CHECK(waited->error() == dl::errc::store_unavailable);
    test::run(io, [&]() -> asio::awaitable<void> {
        const auto why = co_await held->lost();
        CHECK(why == dl::errc::store_unavailable);
    });
    held.reset();
    io.restart();
    for (int i = 0; i < 400 && !io.stopped(); ++i)
        io.run_for(10ms);
    CHECK(io.stopped()); // nothing left running against the destroyed stores
}

namespace {

// How many SCAN calls the server has answered since its statistics were reset.
asio::awaitable<long long> scan_calls(dl::redis::store& store)
{
    auto r = co_await store.execute("INFO", "commandstats");
    REQUIRE(r);
    const std::string& text = r.value().text;
    const auto line = text.find("cmdstat_scan:calls=");
    co_return line == std::string::npos ? 0 : std::stoll(text.substr(line + 19));
}

// Ids that exercise the layout: its separators, its escapes, glob characters, NUL and
// a byte above 0x7f.
std::vector<std::string> awkward_ids()
{
    return {"plain", std::string{"nul\0and\xff", 8}, "100%", "%7B", "{tag}rest", "a{b}c", "}{", "{}", "x}:lock",
            "*?[]\\", "a:{#b", std::string(1024, 'z')};
}

} // namespace

TEST_CASE("redis: a lock key gives its resource id back, and only a lock key of the store's own layout does",
          "[redis][input][list]")
{
    namespace detail = dl::redis::detail;
    for (const bool tags : {false, true}) {
        for (const std::string prefix : {"distlock", "a*b[c]?\\", "p{x}%", ""}) {
            INFO("prefix " << prefix << (tags ? " with hash tags" : ""));
            const detail::key_layout layout{prefix, tags};
            const detail::key_layout other_prefix{prefix + "x", tags};
            const detail::key_layout other_tags{prefix, !tags};
            for (const auto& id : awkward_ids()) {
                const auto key = layout.key(id, "lock");
                CHECK(layout.resource_of(key, "lock") == id);
                CHECK_FALSE(layout.resource_of(key, "queue"));
                CHECK_FALSE(layout.resource_of(layout.key(id, "queue"), "lock"));
                CHECK_FALSE(layout.resource_of(layout.fence_key_of_slot(detail::hash_slot(key)), "lock"));
                CHECK_FALSE(other_prefix.resource_of(key, "lock"));
                // A store with the other hash_tags setting shares the keys of ids
                // without a tag of their own, and only those.
                const auto shared = other_tags.key(id, "lock") == key;
                CHECK(other_tags.resource_of(key, "lock") == (shared ? std::optional<std::string>{id} : std::nullopt));
            }
        }
    }
    const detail::key_layout layout{"distlock", false};
    for (const std::string not_a_lock :
         {"", "distlock", "distlock:", "distlock:{", "distlock:{#", "distlock:{#abc", "distlock:{#abc}", "distlock:{#a}:lockx",
          "distlock:{#a}:lock:", "distlockx:{#a}:lock", "xdistlock:{#a}:lock", "distlock:{@t}a:lock", "distlock:{#a%zz}:lock",
          "distlock:{#a%7}:lock", "distlock:{#a%7b}:lock", "distlock:{#a{b}:lock", "distlock:{$0IB}:fence",
          "distlock:{#a}:lock}:lock"})
        CHECK_FALSE(layout.resource_of(not_a_lock, "lock"));
    const detail::key_layout tagged{"distlock", true};
    CHECK(tagged.resource_of("distlock:{@t}%7Bt%7Dx:lock", "lock") == "{t}x");
    CHECK_FALSE(tagged.resource_of("distlock:{@u}%7Bt%7Dx:lock", "lock")); // not the id's own tag
    CHECK_FALSE(tagged.resource_of("distlock:{@t}x:lock", "lock"));        // an id without that tag
    CHECK_FALSE(tagged.resource_of("distlock:{#%7Bt%7Dx}:lock", "lock"));  // a tagged id keeps its tag
}

TEST_CASE("redis: the listing's SCAN pattern matches the lock keys of its prefixes, glob characters as themselves",
          "[redis][input][list]")
{
    redis_server server;
    asio::io_context io;
    run(io, [&]() -> asio::awaitable<void> {
        dl::redis::store writer{io, server.config()};
        // Prefixes that a glob would read as patterns matching each other's keys.
        const std::vector<std::string> prefixes{"a*b[c]?\\", "aXbc!\\", "a*b[c]?\\\\", "a"};
        const std::vector<std::string> under_jo{"job*1", "job?2", "jo[b]3"};
        const std::vector<std::string> elsewhere{"{t}job4", "other"};
        for (const bool tags : {false, true}) {
            for (const auto& prefix : prefixes) {
                const dl::redis::detail::key_layout layout{prefix, tags};
                for (const auto& ids : {under_jo, elsewhere})
                    for (const auto& id : ids)
                        for (const auto* kind : {"lock", "queue"}) {
                            auto set = co_await writer.execute("SET", layout.key(id, kind), "x");
                            REQUIRE(set);
                        }
            }
            for (const auto& prefix : prefixes) {
                const dl::redis::detail::key_layout layout{prefix, tags};
                const auto pattern = layout.pattern("jo", "lock");
                std::set<std::string> matched;
                std::string cursor = "0";
                do {
                    auto page = co_await writer.execute("SCAN", cursor, "MATCH", pattern, "COUNT", "1000");
                    REQUIRE(page);
                    REQUIRE(page->elements.size() == 2);
                    cursor = page->elements[0].text;
                    for (const auto& k : page->elements[1].elements)
                        matched.insert(k.text);
                } while (cursor != "0");
                // Without hash tags, exactly the lock keys of the ids under "jo"; with
                // them, every lock key of the prefix (an id's place in its key depends
                // on its tag), which resource_of() then sorts out. Never a key of
                // another prefix or kind.
                std::set<std::string> expected;
                for (const auto& id : under_jo)
                    expected.insert(layout.key(id, "lock"));
                if (tags)
                    for (const auto& id : elsewhere)
                        expected.insert(layout.key(id, "lock"));
                INFO("prefix " << prefix << " pattern " << pattern);
                CHECK(matched == expected);
            }
            auto flushed = co_await writer.execute("FLUSHALL");
            REQUIRE(flushed);
        }
    });
}

TEST_CASE("redis: list() on one server: every lock under the prefix once, sorted, past one SCAN page; other keys "
          "left out",
          "[redis][list]")
{
    redis_server server;
    asio::io_context io;
    dl::redis::store store{io, server.config()};
    auto other_cfg = server.config();
    other_cfg.key_prefix = "elsewhere";
    dl::redis::store other{io, other_cfg};
    run(io, [&]() -> asio::awaitable<void> {
        const auto owner = dl::owner_token::generate();
        std::map<std::string, dl::fence_token> granted;
        const auto take = [&](dl::redis::store& s, const std::string& id) -> asio::awaitable<void> {
            auto fence = co_await s.put_if_absent(id, owner, 60s);
            REQUIRE(fence);
            if (&s == &store)
                granted[id] = fence.value();
        };
        // More locks than one SCAN page looks at.
        for (int i = 0; i < 2 * static_cast<int>(dl::redis::store::scan_count) + 100; ++i) {
            char id[16];
            std::snprintf(id, sizeof id, "job:%04d", i);
            co_await take(store, id);
        }
        for (const auto& id : awkward_ids())
            co_await take(store, "job:" + id.substr(0, 1000));
        co_await take(store, "zeta");
        co_await take(other, "job:0001"); // another prefix: another store's lock
        // Beside them: a fair queue's keys, fence keys, keys that only look like locks.
        auto queued = co_await store.put_if_first("job:0001", dl::owner_token::generate(), dl::owner_token::generate(),
                                                  10s, 2, true);
        REQUIRE(queued);
        for (const auto& key : {std::string{"distlock:{#job:fake}:lockx"}, std::string{"distlock:{#job:%zz}:lock"},
                                std::string{"job:0002"}, std::string{"distlock:{@t}job:x:lock"}}) {
            auto set = co_await store.execute("SET", key, "x");
            REQUIRE(set);
        }
        auto reset = co_await store.execute("CONFIG", "RESETSTAT");
        REQUIRE(reset);

        auto listed = co_await store.list("job:");
        REQUIRE(listed);
        const auto pages = co_await scan_calls(store);
        CHECK(pages >= 2);
        std::map<std::string, dl::fence_token> under_job(granted.lower_bound("job:"), granted.lower_bound("job;"));
        REQUIRE(listed->size() == under_job.size());
        CHECK(std::is_sorted(listed->begin(), listed->end(),
                             [](const auto& a, const auto& b) { return a.resource < b.resource; }));
        auto expected = under_job.begin();
        for (const auto& l : *listed) {
            CHECK(l.resource == expected->first);
            CHECK(l.lock.held);
            CHECK(l.lock.fence == expected->second);
            CHECK(l.lock.owner == owner.to_hex().substr(0, 8));
            REQUIRE(l.lock.remaining);
            CHECK(*l.lock.remaining > 50s);
            CHECK(*l.lock.remaining <= 60s);
            REQUIRE(l.waiters);
            CHECK(*l.waiters == (l.resource == "job:0001" ? 1u : 0u));
            ++expected;
        }
        // A narrower prefix, and none.
        auto hundred = co_await store.list("job:00");
        REQUIRE(hundred);
        CHECK(hundred->size() == 100);
        CHECK(hundred->front().resource == "job:0000");
        CHECK(hundred->back().resource == "job:0099");
        auto everything = co_await store.list("");
        REQUIRE(everything);
        CHECK(everything->size() == granted.size());
        CHECK(everything->back().resource == "zeta");
        auto elsewhere = co_await other.list("");
        REQUIRE(elsewhere);
        REQUIRE(elsewhere->size() == 1);
        CHECK(elsewhere->front().resource == "job:0001");
        auto nothing = co_await store.list("no-such-prefix");
        REQUIRE(nothing);
        CHECK(nothing->empty());
    });
}

TEST_CASE("redis: list() shows a lock key that another client wrote: an owner without a token, a key of another type",
          "[redis][list][input]")
{
    redis_server server;
    asio::io_context io;
    dl::redis::store store{io, server.config()};
    run(io, [&]() -> asio::awaitable<void> {
        auto old = co_await store.execute("SET", store.lock_key("old"), "0123456789abcdef0123456789abcdef");
        REQUIRE(old);
        auto hash = co_await store.execute("HSET", store.lock_key("hash"), "f", "v");
        REQUIRE(hash);
        auto huge = co_await store.execute("SET", store.lock_key("huge"), "x:99999999999999999999", "PX", "60000");
        REQUIRE(huge);
        // A queue of another type: the waiters are not known.
        auto held = co_await store.put_if_absent("queue-broken", dl::owner_token::generate(), 60s);
        REQUIRE(held);
        auto broken = co_await store.execute("SET", store.queue_key("queue-broken"), "x");
        REQUIRE(broken);
        auto listed = co_await store.list("");
        REQUIRE(listed);
        REQUIRE(listed->size() == 4);
        const auto& [hashed, huge_one, old_one, queue] = std::tie((*listed)[0], (*listed)[1], (*listed)[2], (*listed)[3]);
        CHECK(hashed.resource == "hash");
        CHECK(hashed.lock.held); // acquire finds a key there, so the resource is taken
        CHECK(hashed.lock.owner.empty());
        CHECK(hashed.lock.fence == 0);
        CHECK_FALSE(hashed.lock.remaining); // no TTL
        CHECK(huge_one.lock.owner == "x");
        CHECK(huge_one.lock.fence == 0);
        CHECK(huge_one.lock.remaining);
        CHECK(old_one.lock.owner == "01234567");
        CHECK(old_one.lock.fence == 0);
        CHECK(queue.resource == "queue-broken");
        CHECK(queue.lock.fence == held.value());
        CHECK_FALSE(queue.waiters);
        // No fence of 0 revokes a lock whose token is unknown.
        auto zero = co_await store.revoke("old", 0);
        REQUIRE_FALSE(zero);
        CHECK(zero.error() == dl::errc::not_owner);
    });
}

TEST_CASE("redis: list() and revoke() refuse bad input before any I/O", "[redis][list][input]")
{
    asio::io_context io;
    dl::redis::config nowhere;
    nowhere.port = 1; // I/O would be store_unavailable
    dl::redis::store store{io, nowhere};
    run(io, [&]() -> asio::awaitable<void> {
        for (const auto& bad : {std::string{}, std::string(dl::max_resource_size + 1, 'x')}) {
            dl::diagnostics diag;
            auto revoked = co_await store.revoke(bad, 1, &diag);
            REQUIRE_FALSE(revoked);
            CHECK(revoked.error() == dl::errc::invalid_argument);
        }
        auto long_prefix = co_await store.list(std::string(dl::max_resource_size + 1, 'x'));
        REQUIRE_FALSE(long_prefix);
        CHECK(long_prefix.error() == dl::errc::invalid_argument);
        // The longest id is one; a prefix as long can still list it.
        auto longest = co_await store.list(std::string(dl::max_resource_size, 'x'));
        REQUIRE_FALSE(longest);
        CHECK(longest.error() == dl::errc::store_unavailable);
    });
    auto broken = nowhere;
    broken.request_timeout = dl::duration::zero();
    dl::redis::store refused{io, broken};
    run(io, [&]() -> asio::awaitable<void> {
        auto listed = co_await refused.list("");
        REQUIRE_FALSE(listed);
        CHECK(listed.error() == dl::errc::invalid_argument);
        auto revoked = co_await refused.revoke("r", 1);
        REQUIRE_FALSE(revoked);
        CHECK(revoked.error() == dl::errc::invalid_argument);
    });
}

TEST_CASE("redis: revoke() frees only the grant with that fence, publishes the release, and the holder's renewal "
          "fails",
          "[redis][revoke]")
{
    redis_server server;
    asio::io_context io;
    dl::redis::store store{io, server.config()}, operator_store{io, server.config()};
    run(io, [&]() -> asio::awaitable<void> {
        const auto holder = dl::owner_token::generate();
        auto fence = co_await store.put_if_absent("job", holder, 60s);
        REQUIRE(fence);
        auto watcher = co_await operator_store.watch("job");
        for (const auto wrong : {fence.value() - 1, fence.value() + 1, dl::fence_token{1} << 53,
                                 std::numeric_limits<dl::fence_token>::max()}) {
            auto refused = co_await operator_store.revoke("job", wrong);
            REQUIRE_FALSE(refused);
            CHECK(refused.error() == dl::errc::not_owner);
        }
        auto still = co_await store.execute("GET", store.lock_key("job"));
        REQUIRE(still);
        CHECK(still->text == lock_value(holder, fence.value()));
        const auto fence_before = co_await store.execute("GET", store.fence_key("job"));
        REQUIRE(fence_before);

        dl::diagnostics diag;
        auto revoked = co_await operator_store.revoke("job", fence.value(), &diag);
        INFO(diag.to_string());
        REQUIRE(revoked);
        // Woken by the release's message, well before this wait's end.
        const auto asked = dl::clock::now();
        const bool heard = co_await watcher.wait(asked + 20s);
        CHECK(heard);
        CHECK(dl::clock::now() - asked < 10s);
        auto gone = co_await store.execute("EXISTS", store.lock_key("job"));
        REQUIRE(gone);
        CHECK(gone->integer == 0);
        // The fence key is the slot's last grant, which the next one exceeds: untouched.
        const auto fence_after = co_await store.execute("GET", store.fence_key("job"));
        REQUIRE(fence_after);
        CHECK(fence_after->text == fence_before->text);
        auto renewed = co_await store.extend("job", holder, 60s);
        REQUIRE_FALSE(renewed);
        CHECK(renewed.error() == dl::errc::not_owner);
        auto twice = co_await operator_store.revoke("job", fence.value());
        REQUIRE_FALSE(twice);
        CHECK(twice.error() == dl::errc::not_owner);
        // A lock written by hand with a token is that grant too.
        auto by_hand = co_await store.execute("SET", store.lock_key(std::string{"by\0hand", 7}), "someone:12345");
        REQUIRE(by_hand);
        auto by_hand_revoked = co_await operator_store.revoke(std::string{"by\0hand", 7}, 12345);
        CHECK(by_hand_revoked);
        auto left = co_await store.list("");
        REQUIRE(left);
        CHECK(left->empty());
    });
}

namespace {
// A resource's shared holders as the store keeps them: field -> entry.
asio::awaitable<std::map<std::string, std::string>> sharers_of(dl::redis::store& store, std::string_view resource)
{
    std::map<std::string, std::string> out;
    auto all = co_await store.execute("HGETALL", store.sharers_key(resource));
    REQUIRE(all);
    REQUIRE(all.value().elements.size() % 2 == 0);
    for (std::size_t i = 0; i + 1 < all.value().elements.size(); i += 2)
        out[all.value().elements[i].text] = all.value().elements[i + 1].text;
    co_return out;
}

asio::awaitable<bool> has_key(dl::redis::store& store, std::string key)
{
    auto r = co_await store.execute("EXISTS", key);
    REQUIRE(r);
    co_return r.value().integer == 1;
}
} // namespace

TEST_CASE("redis: shared grants beside the lock: readers and permits in the sharers hash with their count, a "
          "writer in the lock key, a waiting writer's intent",
          "[redis][shared]")
{
    redis_server server;
    asio::io_context io;
    dl::redis::store store{io, server.config()};
    run(io, [&]() -> asio::awaitable<void> {
        const std::string r = "shared:doc";
        const auto a = dl::owner_token::generate(), b = dl::owner_token::generate(), c = dl::owner_token::generate();
        const auto waiter = dl::owner_token::generate(), writer = dl::owner_token::generate();

        // A reader: its entry "<expiry ms>:<slot>:<token>" and the count 0, expiring
        // with it; the lock key stays free, so read() says no lock is held.
        auto first = co_await store.put_shared(r, a, 10s, 0);
        REQUIRE(first);
        REQUIRE(first->is_granted());
        CHECK_FALSE(first->slot());
        auto kept = co_await sharers_of(store, r);
        CHECK(kept.size() == 2);
        CHECK(kept["permits"] == "0");
        CHECK(kept[a.to_hex()].ends_with(":0:" + std::to_string(first->fence())));
        auto left = co_await store.execute("PTTL", store.sharers_key(r));
        REQUIRE(left);
        CHECK(left->integer > 9000);
        CHECK(left->integer <= 10000);
        auto info = co_await store.read(r);
        REQUIRE(info);
        CHECK_FALSE(info->held);
        CHECK(info->fence == first->fence());

        // A semaphore's count is refused while readers hold, with both counts named.
        dl::diagnostics diag;
        auto mixed = co_await store.put_shared(r, b, 10s, 2, &diag);
        REQUIRE_FALSE(mixed);
        CHECK(mixed.error() == dl::errc::invalid_argument);
        CHECK(diag.client_message().find("readers") != std::string_view::npos);
        CHECK(diag.client_message().find("one of 2") != std::string_view::npos);

        // A writer is refused and leaves its intent, which keeps new readers out
        // until it is withdrawn.
        auto refused = co_await store.put_exclusive(r, waiter, writer, 10s);
        REQUIRE(refused);
        CHECK_FALSE(refused->is_granted());
        auto intent = co_await store.execute("GET", store.intent_key(r));
        REQUIRE(intent);
        CHECK(intent->text == waiter.to_hex());
        auto kept_out = co_await store.put_shared(r, b, 10s, 0);
        REQUIRE(kept_out);
        CHECK_FALSE(kept_out->is_granted());
        { const auto ok_ = co_await store.withdraw(r, waiter); REQUIRE(ok_); }
        CHECK_FALSE(co_await has_key(store, store.intent_key(r)));
        auto beside = co_await store.put_shared(r, b, 10s, 0);
        REQUIRE(beside);
        REQUIRE(beside->is_granted());
        CHECK(beside->fence() > first->fence());

        // The last reader to go takes the count with it: a semaphore may follow.
        { const auto ok_ = co_await store.release_shared(r, a); REQUIRE(ok_); }
        auto twice = co_await store.release_shared(r, a);
        REQUIRE_FALSE(twice);
        CHECK(twice.error() == dl::errc::not_owner);
        { const auto ok_ = co_await store.release_shared(r, b); REQUIRE(ok_); }
        CHECK_FALSE(co_await has_key(store, store.sharers_key(r)));
        auto permit = co_await store.put_shared(r, c, 10s, 2);
        REQUIRE(permit);
        CHECK(permit->slot() == 0u);
        auto no_writer = co_await store.put_exclusive(r, waiter, writer, 10s, &diag);
        REQUIRE_FALSE(no_writer);
        CHECK(no_writer.error() == dl::errc::invalid_argument);
        CHECK(diag.client_message().find("semaphore of 2") != std::string_view::npos);
        { const auto ok_ = co_await store.release_shared(r, c); REQUIRE(ok_); }

        // A writer holds the lock key as a mutex's holder does: read() and revoke()
        // see it; its downgrade keeps its token and time left as a reader's.
        auto w = co_await store.put_exclusive(r, waiter, writer, 10s);
        REQUIRE(w);
        REQUIRE(w->is_granted());
        CHECK(w->fence() > permit->fence());
        auto lock = co_await store.execute("GET", store.lock_key(r));
        REQUIRE(lock);
        CHECK(lock->text == lock_value(writer, w->fence()));
        info = co_await store.read(r);
        REQUIRE(info);
        CHECK(info->held);
        CHECK(info->fence == w->fence());
        { const auto ok_ = co_await store.downgrade(r, writer); REQUIRE(ok_); }
        CHECK_FALSE(co_await has_key(store, store.lock_key(r)));
        kept = co_await sharers_of(store, r);
        CHECK(kept[writer.to_hex()].ends_with(":0:" + std::to_string(w->fence())));
        auto again = co_await store.downgrade(r, writer);
        REQUIRE_FALSE(again);
        CHECK(again.error() == dl::errc::not_owner);
        { const auto ok_ = co_await store.extend_shared(r, writer, 20s); REQUIRE(ok_); }
        left = co_await store.execute("PTTL", store.sharers_key(r));
        REQUIRE(left);
        CHECK(left->integer > 19000);
        { const auto ok_ = co_await store.release_shared(r, writer); REQUIRE(ok_); }
        auto taken = co_await store.put_exclusive(r, waiter, writer, 10s);
        REQUIRE(taken);
        REQUIRE(taken->is_granted());
        { const auto ok_ = co_await store.revoke(r, taken->fence()); REQUIRE(ok_); }
        auto gone = co_await store.release_shared(r, writer);
        REQUIRE_FALSE(gone);
        CHECK(gone.error() == dl::errc::not_owner);
    });
}

TEST_CASE("redis: a permit whose TTL ran out is dropped by the next script, its number handed on; a held answer "
          "says when the first permit runs out",
          "[redis][shared]")
{
    redis_server server;
    asio::io_context io;
    dl::redis::store store{io, server.config()};
    run(io, [&]() -> asio::awaitable<void> {
        const std::string r = "shared:short";
        const auto brief = dl::owner_token::generate(), next = dl::owner_token::generate();
        auto first = co_await store.put_shared(r, brief, 300ms, 1);
        REQUIRE(first);
        REQUIRE(first->is_granted());
        const auto asked = dl::clock::now();
        auto full = co_await store.put_shared(r, next, 10s, 1);
        REQUIRE(full);
        REQUIRE_FALSE(full->is_granted());
        REQUIRE(full->not_before());
        CHECK(*full->not_before() <= asked + 300ms + 50ms);
        co_await settle(400ms);
        auto got = co_await store.put_shared(r, next, 10s, 1);
        REQUIRE(got);
        REQUIRE(got->is_granted());
        CHECK(got->slot() == 0u);
        CHECK(got->fence() > first->fence());
        auto kept = co_await sharers_of(store, r);
        CHECK(kept.size() == 2); // the count and the new holder
        CHECK_FALSE(kept.contains(brief.to_hex()));
        auto late = co_await store.extend_shared(r, brief, 10s);
        REQUIRE_FALSE(late);
        CHECK(late.error() == dl::errc::not_owner);
    });
}

TEST_CASE("redis: a sharers key of another type fails the shared scripts with the server's words, nothing written",
          "[redis][shared][input]")
{
    redis_server server;
    asio::io_context io;
    dl::redis::store store{io, server.config()};
    run(io, [&]() -> asio::awaitable<void> {
        const std::string r = "shared:broken";
        { const auto ok_ = co_await store.execute("SET", store.sharers_key(r), "not a hash"); REQUIRE(ok_); }
        const auto before = co_await store.read(r);
        REQUIRE(before);
        dl::diagnostics diag;
        auto refused = co_await store.put_shared(r, dl::owner_token::generate(), 10s, 0, &diag);
        REQUIRE_FALSE(refused);
        CHECK(refused.error() == dl::errc::store_unavailable);
        CHECK(diag.server_message().find("WRONGTYPE") != std::string_view::npos);
        auto writer = co_await store.put_exclusive(r, dl::owner_token::generate(), dl::owner_token::generate(), 10s);
        REQUIRE_FALSE(writer);
        CHECK(writer.error() == dl::errc::store_unavailable);
        const auto after = co_await store.read(r);
        REQUIRE(after);
        CHECK(after->fence == before->fence);
        CHECK_FALSE(after->held);
    });
}

// -- dialect::plain: the Redlock recipe's keys, shared with other Redis lock clients --

namespace {

dl::redis::config plain_layout(dl::redis::config c)
{
    c.dialect = dl::redis::dialect::plain;
    return c;
}

// The reply of one command (its name, then its arguments), asked outside any lock.
template <class... Args>
asio::awaitable<dl::redis::resp::value> ask(dl::redis::store& s, const Args&... command)
{
    auto r = co_await s.execute(std::string_view{command}...);
    REQUIRE(r);
    co_return r.value();
}

} // namespace

TEST_CASE("redis: ?dialect=plain in every URL form; another value refused with why", "[redis][input][plain]")
{
    using dl::redis::dialect;
    for (const char* url : {"redis://h?dialect=plain", "rediss://u:p@h:7000/2?dialect=plain",
                            "redis+cluster://a:1,b:2?dialect=plain", "redis+sentinel://a:1/primary/3?dialect=plain",
                            "unix:///run/redis.sock?db=2&dialect=plain"}) {
        INFO(url);
        auto c = dl::redis::config::from_url(url);
        REQUIRE(c);
        CHECK(c->dialect == dialect::plain);
    }
    CHECK(dl::redis::config::from_url("redis://h")->dialect == dialect::distlock);
    CHECK(dl::redis::config::from_url("redis://h?dialect=distlock")->dialect == dialect::distlock);
    // A password may still hold a '?': the query begins after the user information.
    auto secret = dl::redis::config::from_url("redis://u:pa?ss@h/1?dialect=plain");
    REQUIRE(secret);
    CHECK(secret->password == "pa?ss");
    CHECK(secret->database == 1);
    CHECK(secret->dialect == dialect::plain);
    for (const char* url : {"redis://h?dialect=Plain", "redis://h?dialect=", "unix:///s.sock?dialect=redlock",
                            "redis+cluster://a:1?dialect=x"}) {
        INFO(url);
        std::string why;
        auto c = dl::redis::config::from_url(url, &why);
        REQUIRE_FALSE(c);
        CHECK(c.error() == dl::errc::invalid_argument);
        CHECK(why.find("expected plain or distlock") != std::string::npos);
    }
    std::string why;
    CHECK_FALSE(dl::redis::config::from_url("redis://h?layout=plain", &why));
    CHECK(why == "unknown query key 'layout' (redis:// URLs take dialect)");
    auto bad = dl::redis::config{};
    bad.dialect = static_cast<dialect>(7);
    CHECK(bad.validate() == dl::errc::invalid_argument);
}

TEST_CASE("redis plain: the lock key is the id itself, and every key beside it lies in its hash slot",
          "[redis][input][plain]")
{
    asio::io_context io;
    dl::redis::config cfg = plain_layout({});
    cfg.key_prefix = "app";
    dl::redis::store store{io, cfg};
    std::vector<std::string> ids{"order:7", "{order:7}:payment", "x{}y", "{", "}{a}", "a{b", "{a}{b}", "%7B{}", "app",
                                 std::string{"bin\0ary\xff", 8}};
    std::mt19937 random{7};
    for (int i = 0; i < 2000; ++i) {
        std::string id(1 + random() % 24, ' ');
        for (auto& c : id)
            c = "ab{}%:*\\x"[random() % 9];
        ids.push_back(std::move(id));
    }
    for (const auto& id : ids) {
        INFO(id);
        const auto lock = store.lock_key(id);
        CHECK(lock == id);
        const auto slot = dl::redis::detail::hash_slot(lock);
        CHECK(dl::redis::detail::hash_slot(store.fence_key(id)) == slot);
        CHECK(dl::redis::detail::hash_slot(store.holder_key(id)) == slot);
        CHECK(dl::redis::detail::hash_slot(store.channel(id)) == slot);
        // The holder key names its resource, and no other.
        const dl::redis::detail::key_layout layout{"app", false, true};
        CHECK(layout.resource_beside(store.holder_key(id), "holder") == id);
        CHECK_FALSE(layout.resource_beside(store.channel(id), "holder"));
        CHECK(store.holder_key(id) != store.channel(id));
    }
    CHECK(store.holder_key("order:7") == "app:{" + std::string{dl::redis::detail::slot_tags::table()[
                                                       dl::redis::detail::hash_slot("order:7")]} +
                                             "}:holder:order:7");
    CHECK(store.holder_key("a{b}%") == store.fence_key("a{b}%").substr(0, store.fence_key("a{b}%").size() - 5) +
                                           "holder:a%7Bb%7D%25");
    // distlock's own keys are no id's: such ids are refused (below), others kept.
    const dl::redis::detail::key_layout layout{"app", false, true};
    CHECK(layout.reserved("app:{$a}:fence"));
    CHECK(layout.reserved("app:{"));
    CHECK_FALSE(layout.reserved("app:x{"));
    CHECK_FALSE(layout.reserved("apps:{x}"));
    CHECK_FALSE(dl::redis::detail::key_layout("app", false, false).reserved("app:{x}"));
    const dl::redis::detail::key_layout bare{"", false, true};
    CHECK(bare.reserved(":{x}"));
    CHECK_FALSE(bare.reserved("x:{y}"));
}

TEST_CASE("redis plain: what a grant writes: the id's key with the owner alone, distlock's holder key and fence "
          "beside it",
          "[redis][plain]")
{
    redis_server server;
    asio::io_context io;
    dl::redis::store store{io, plain_layout(server.config())};
    run(io, [&]() -> asio::awaitable<void> {
        const auto owner = dl::owner_token::generate();
        auto fence = co_await store.put_if_absent("job:7", owner, 10s);
        REQUIRE(fence);
        { const auto said_ = co_await ask(store, "GET", "job:7"); CHECK(said_.text == owner.to_hex()); }
        { const auto said_ = co_await ask(store, "GET", store.holder_key("job:7")); CHECK(said_.text == lock_value(owner, fence.value())); }
        { const auto said_ = co_await ask(store, "GET", store.fence_key("job:7")); CHECK(said_.text == std::to_string(fence.value())); }
        for (const auto& key : {std::string{"job:7"}, store.holder_key("job:7")}) {
            const auto pttl = (co_await ask(store, "PTTL", key)).integer;
            CHECK(pttl > 9000);
            CHECK(pttl <= 10000);
        }
        // Nothing else: no channel key, no queue.
        { const auto said_ = co_await ask(store, "DBSIZE"); CHECK(said_.integer == 3); }
        // Held: refused.
        auto again = co_await store.put_if_absent("job:7", dl::owner_token::generate(), 10s);
        REQUIRE_FALSE(again);
        CHECK(again.error() == dl::errc::contended);
        // Extended: both keys; another owner's extend and release change nothing.
        { const auto ok_ = co_await store.extend("job:7", owner, 30s); CHECK(ok_); }
        { const auto said_ = co_await ask(store, "PTTL", "job:7"); CHECK(said_.integer > 20000); }
        { const auto said_ = co_await ask(store, "PTTL", store.holder_key("job:7")); CHECK(said_.integer > 20000); }
        const auto other = dl::owner_token::generate();
        auto extended = co_await store.extend("job:7", other, 30s);
        CHECK(extended.error() == dl::errc::not_owner);
        auto released = co_await store.release("job:7", other);
        CHECK(released.error() == dl::errc::not_owner);
        // The release is published on the channel beside the lock, and takes both keys.
        auto w = co_await store.watch("job:7");
        { const auto ok_ = co_await store.release("job:7", owner); CHECK(ok_); }
        const bool woke = co_await w.wait(dl::clock::now() + 5s);
        CHECK(woke);
        { const auto said_ = co_await ask(store, "EXISTS", "job:7", store.holder_key("job:7")); CHECK(said_.integer == 0); }
        // The next grant's token is larger; the fence key stays, without a TTL.
        auto next = co_await store.put_if_absent("job:7", owner, 10s);
        REQUIRE(next);
        CHECK(next.value() > fence.value());
        { const auto said_ = co_await ask(store, "PTTL", store.fence_key("job:7")); CHECK(said_.integer == -1); }
        { const auto ok_ = co_await store.release("job:7", owner); CHECK(ok_); }
    });
}

TEST_CASE("redis plain: read(), list() and revoke(): distlock's grants with their token; a foreign holder read "
          "without one, not listed, never revoked",
          "[redis][plain][list]")
{
    redis_server server;
    asio::io_context io;
    dl::redis::store store{io, plain_layout(server.config())};
    run(io, [&]() -> asio::awaitable<void> {
        const auto owner = dl::owner_token::generate();
        auto mine = co_await store.put_if_absent("p:mine", owner, 10s);
        REQUIRE(mine);
        // What node-redlock writes: its random value, with a TTL.
        (void)co_await ask(store, "SET", "p:theirs", "0123456789abcdef0123456789abcdef", "PX", "10000");

        auto read_mine = co_await store.read("p:mine");
        REQUIRE(read_mine);
        CHECK(read_mine->held);
        CHECK(read_mine->fence == mine.value());
        CHECK(read_mine->owner == owner.to_hex().substr(0, 8));
        auto read_theirs = co_await store.read("p:theirs");
        REQUIRE(read_theirs);
        CHECK(read_theirs->held);
        CHECK(read_theirs->fence == 0); // no token: not distlock's grant
        CHECK(read_theirs->owner == "01234567");
        CHECK(read_theirs->remaining);
        auto read_free = co_await store.read("p:free");
        REQUIRE(read_free);
        CHECK_FALSE(read_free->held);
        CHECK(read_free->fence == 0); // no grant in its slot yet

        auto listed = co_await store.list("p:");
        REQUIRE(listed);
        REQUIRE(listed->size() == 1);
        CHECK(listed->front().resource == "p:mine");
        CHECK(listed->front().lock.fence == mine.value());
        CHECK(listed->front().lock.owner == owner.to_hex().substr(0, 8));
        auto none = co_await store.list("q:");
        REQUIRE(none);
        CHECK(none->empty());

        // A foreign holder has no token to name: left as it is.
        for (const dl::fence_token f : {dl::fence_token{0}, dl::fence_token{1}, mine.value()}) {
            auto revoked = co_await store.revoke("p:theirs", f);
            REQUIRE_FALSE(revoked);
            CHECK(revoked.error() == dl::errc::not_owner);
        }
        { const auto said_ = co_await ask(store, "EXISTS", "p:theirs"); CHECK(said_.integer == 1); }
        auto wrong = co_await store.revoke("p:mine", mine.value() + 1);
        CHECK(wrong.error() == dl::errc::not_owner);
        auto w = co_await store.watch("p:mine");
        { const auto ok_ = co_await store.revoke("p:mine", mine.value()); CHECK(ok_); }
        const bool woke = co_await w.wait(dl::clock::now() + 5s);
        CHECK(woke);
        { const auto said_ = co_await ask(store, "EXISTS", "p:mine", store.holder_key("p:mine")); CHECK(said_.integer == 0); }
        auto extended = co_await store.extend("p:mine", owner, 10s);
        CHECK(extended.error() == dl::errc::not_owner);
        // Free now: its slot's last token, which the next grant exceeds.
        auto read_after = co_await store.read("p:mine");
        REQUIRE(read_after);
        CHECK_FALSE(read_after->held);
        CHECK(read_after->fence == mine.value());
    });
}

TEST_CASE("redis plain: a foreign record distlock cannot read is held by someone else, never an error",
          "[redis][plain][input]")
{
    redis_server server;
    asio::io_context io;
    dl::redis::store store{io, plain_layout(server.config())};
    run(io, [&]() -> asio::awaitable<void> {
        const auto owner = dl::owner_token::generate();
        (void)co_await ask(store, "HSET", "odd:hash", "f", "v");
        (void)co_await ask(store, "SET", "odd:forever", "no TTL");
        (void)co_await ask(store, "SET", "odd:colon", owner.to_hex() + ":123", "PX", "10000");
        // A forged holder key beside a foreign lock: its owner is not the lock's.
        (void)co_await ask(store, "SET", "odd:forged", "theirs", "PX", "10000");
        (void)co_await ask(store, "SET", store.holder_key("odd:forged"), "mine:77", "PX", "10000");
        for (const auto* id : {"odd:hash", "odd:forever", "odd:colon", "odd:forged"}) {
            INFO(id);
            auto taken = co_await store.put_if_absent(id, owner, 10s);
            REQUIRE_FALSE(taken);
            CHECK(taken.error() == dl::errc::contended);
            auto info = co_await store.read(id);
            REQUIRE(info);
            CHECK(info->held);
            CHECK(info->fence == 0);
            auto extended = co_await store.extend(id, owner, 10s);
            CHECK(extended.error() == dl::errc::not_owner);
            auto released = co_await store.release(id, owner);
            CHECK(released.error() == dl::errc::not_owner);
            auto revoked = co_await store.revoke(id, 77);
            CHECK(revoked.error() == dl::errc::not_owner);
            { const auto said_ = co_await ask(store, "EXISTS", id); CHECK(said_.integer == 1); }
        }
        // A key without a TTL: held, with no time it ends at.
        auto answer = co_await store.put_if_absent_answer("odd:forever", owner, 10s);
        REQUIRE(answer);
        CHECK_FALSE(answer->is_granted());
        auto info = co_await store.read("odd:hash");
        REQUIRE(info);
        CHECK(info->owner.empty());
        auto listed = co_await store.list("odd:");
        REQUIRE(listed);
        CHECK(listed->empty()); // none of them is distlock's grant
    });
}

TEST_CASE("redis plain: fair queues, shared grants, sets in one step and ids in distlock's own keys are refused "
          "before any I/O, saying why",
          "[redis][plain][input]")
{
    asio::io_context io;
    auto nowhere = plain_layout({});
    nowhere.port = 1; // I/O would be store_unavailable
    dl::redis::store store{io, nowhere};
    const auto owner = dl::owner_token::generate();
    const auto said = [](const dl::diagnostics& d, std::string_view words) {
        return std::string{d.client_message()}.find(words) != std::string::npos;
    };
    run(io, [&]() -> asio::awaitable<void> {
        const auto code = [](const auto& r) { return r ? std::error_code{} : r.error(); };
        const auto refused = [&](std::string_view what, std::error_code ec, const dl::diagnostics& d) {
            INFO(what);
            CHECK(ec == dl::errc::invalid_argument);
            CHECK(said(d, "dialect plain: "));
        };
        dl::diagnostics d1, d2, d3, d4, d5, d6, d7, d8, d9, d10, d11;
        auto r1 = co_await store.put_shared("r", owner, 10s, 0, &d1);
        refused("put_shared", code(r1), d1);
        auto r2 = co_await store.put_exclusive("r", owner, owner, 10s, &d2);
        refused("put_exclusive", code(r2), d2);
        auto r3 = co_await store.extend_shared("r", owner, 10s, &d3);
        refused("extend_shared", code(r3), d3);
        auto r4 = co_await store.release_shared("r", owner, &d4);
        refused("release_shared", code(r4), d4);
        auto r5 = co_await store.withdraw("r", owner, &d5);
        refused("withdraw", code(r5), d5);
        auto r6 = co_await store.downgrade("r", owner, &d6);
        refused("downgrade", code(r6), d6);
        auto r7 = co_await store.put_if_first("r", owner, owner, 10s, 1, true, &d7);
        refused("put_if_first", code(r7), d7);
        auto r8 = co_await store.release_to_head("r", owner, &d8);
        refused("release_to_head", code(r8), d8);
        auto r9 = co_await store.leave_queue("r", owner, &d9);
        refused("leave_queue", code(r9), d9);
        const std::vector<std::string> set{"a", "b"};
        auto r10 = co_await store.put_if_absent_all(set, owner, 10s, &d10);
        refused("put_if_absent_all", code(r10), d10);
        auto r11 = co_await store.release_all(set, owner, &d11);
        refused("release_all", code(r11), d11);
        CHECK(said(d1, "Redlock recipe"));
        CHECK_FALSE(store.batchable(set));
        for (const auto* id : {"distlock:{$abc}:fence", "distlock:{"}) {
            INFO(id);
            dl::diagnostics d;
            auto taken = co_await store.put_if_absent(id, owner, 10s, &d);
            CHECK(taken.error() == dl::errc::invalid_argument);
            CHECK(said(d, "begins as distlock's own keys do"));
            auto answered = co_await store.put_if_absent_answer(id, owner, 10s);
            CHECK(answered.error() == dl::errc::invalid_argument);
            auto info = co_await store.read(id);
            CHECK(info.error() == dl::errc::invalid_argument);
            auto revoked = co_await store.revoke(id, 1);
            CHECK(revoked.error() == dl::errc::invalid_argument);
        }
        // Ids that only look alike go to the server (here: none to reach).
        auto elsewhere = co_await store.put_if_absent("distlock:x{", owner, 10s);
        CHECK(elsewhere.error() == dl::errc::store_unavailable);
        // A fair mutex ends at once with the refusal, not at its deadline.
        dl::basic_distributed_mutex<dl::redis::store, dl::acquire::fair, dl::retry::fixed> fair{
            store, "r", {.ttl = 10s}, dl::acquire::fair{}, dl::retry::fixed{.delay = 10ms, .deadline = 30s}};
        const auto start = std::chrono::steady_clock::now();
        dl::diagnostics why;
        auto l = co_await fair.lock(why);
        REQUIRE_FALSE(l);
        CHECK(l.error() == dl::errc::invalid_argument);
        CHECK(std::chrono::steady_clock::now() - start < 5s);
    });
}

// -- Elections (electing_store): the value beside the lock ---------------------------

TEST_CASE("redis election: proclaim writes \"<token>:<value>\" beside the lock, in its slot, only for the grant "
          "that holds; leader() reads it for that grant only",
          "[redis][election]")
{
    redis_server server;
    asio::io_context io;
    dl::redis::store store{io, server.config()};
    run(io, [&]() -> asio::awaitable<void> {
        const std::string name = "vote:1";
        CHECK(store.leader_key(name) == "distlock:{#vote:1}:leader");
        CHECK(hash_tag(store.leader_key("a{b}%")) == hash_tag(store.lock_key("a{b}%")));
        // Free: nobody leads, nothing to proclaim with.
        auto free = co_await store.leader(name);
        REQUIRE(free);
        CHECK(free->epoch == 0);
        CHECK(free->owner.empty());
        CHECK_FALSE(free->value);
        const auto owner = dl::owner_token::generate();
        auto none = co_await store.proclaim(name, owner, 1, "x");
        CHECK(none.error() == dl::errc::not_owner);
        { const auto said_ = co_await ask(store, "EXISTS", store.leader_key(name)); CHECK(said_.integer == 0); }

        auto fence = co_await store.put_if_absent(name, owner, 10s);
        REQUIRE(fence);
        // Held, not proclaimed yet: the holder without a value.
        auto unsaid = co_await store.leader(name);
        REQUIRE(unsaid);
        CHECK(unsaid->epoch == fence.value());
        CHECK(unsaid->owner == owner.to_hex().substr(0, 8));
        CHECK(unsaid->remaining);
        CHECK_FALSE(unsaid->value);

        // Any bytes, NUL included, up to the limit.
        const std::string binary{"addr\0:10.0.0.7\xff", 15};
        { const auto ok_ = co_await store.proclaim(name, owner, fence.value(), binary); CHECK(ok_); }
        { const auto said_ = co_await ask(store, "GET", store.leader_key(name));
          CHECK(said_.text == std::to_string(fence.value()) + ":" + binary); }
        // One record per election, without a TTL: the lock's TTL is its own.
        { const auto said_ = co_await ask(store, "PTTL", store.leader_key(name)); CHECK(said_.integer == -1); }
        auto said = co_await store.leader(name);
        REQUIRE(said);
        CHECK(said->epoch == fence.value());
        CHECK(said->owner == owner.to_hex().substr(0, 8));
        REQUIRE(said->value);
        CHECK(*said->value == binary);
        CHECK(said->remaining > 9s);
        const std::string largest(dl::max_leader_value_size, 'v');
        { const auto ok_ = co_await store.proclaim(name, owner, fence.value(), largest); CHECK(ok_); }
        said = co_await store.leader(name);
        REQUIRE(said);
        REQUIRE(said->value);
        CHECK(*said->value == largest);
        { const auto ok_ = co_await store.proclaim(name, owner, fence.value(), ""); CHECK(ok_); }
        said = co_await store.leader(name);
        REQUIRE(said);
        CHECK(said->value == std::optional<std::string>{""});

        // Another owner, or this owner with another token: refused, nothing written.
        auto other = co_await store.proclaim(name, dl::owner_token::generate(), fence.value(), "other");
        CHECK(other.error() == dl::errc::not_owner);
        for (const dl::fence_token f : {dl::fence_token{0}, fence.value() - 1, fence.value() + 1}) {
            auto wrong = co_await store.proclaim(name, owner, f, "wrong");
            CHECK(wrong.error() == dl::errc::not_owner);
        }
        { const auto said_ = co_await ask(store, "GET", store.leader_key(name));
          CHECK(said_.text == std::to_string(fence.value()) + ":"); }

        // Released: nobody leads, and the next grant is not told the old value.
        { const auto ok_ = co_await store.release(name, owner); CHECK(ok_); }
        free = co_await store.leader(name);
        REQUIRE(free);
        CHECK(free->epoch == 0);
        CHECK_FALSE(free->value);
        const auto next_owner = dl::owner_token::generate();
        auto next = co_await store.put_if_absent(name, next_owner, 10s);
        REQUIRE(next);
        auto fresh = co_await store.leader(name);
        REQUIRE(fresh);
        CHECK(fresh->epoch == next.value());
        CHECK_FALSE(fresh->value);
        // The earlier grant cannot proclaim over its successor.
        auto late = co_await store.proclaim(name, owner, fence.value(), "late");
        CHECK(late.error() == dl::errc::not_owner);
        { const auto ok_ = co_await store.proclaim(name, next_owner, next.value(), "next"); CHECK(ok_); }
        fresh = co_await store.leader(name);
        REQUIRE(fresh);
        CHECK(fresh->value == std::optional<std::string>{"next"});
        { const auto ok_ = co_await store.release(name, next_owner); CHECK(ok_); }
    });
}

TEST_CASE("redis election: a value beyond the limit, an empty or oversized id are refused before any I/O",
          "[redis][election][input]")
{
    asio::io_context io;
    dl::redis::config nowhere;
    nowhere.port = 1; // nothing listens: any request would fail as unavailable
    for (const auto layout : {dl::redis::dialect::distlock, dl::redis::dialect::plain}) {
        nowhere.dialect = layout;
        dl::redis::store store{io, nowhere};
        run(io, [&]() -> asio::awaitable<void> {
            const auto owner = dl::owner_token::generate();
            dl::diagnostics diag;
            auto huge = co_await store.proclaim("vote", owner, 7, std::string(dl::max_leader_value_size + 1, 'x'), &diag);
            REQUIRE_FALSE(huge);
            CHECK(huge.error() == dl::errc::invalid_argument);
            CHECK(diag.client_message().find("max_leader_value_size") != std::string::npos);
            for (const auto& id : {std::string{}, std::string(dl::max_resource_size + 1, 'r')}) {
                auto said = co_await store.proclaim(id, owner, 7, "v");
                CHECK(said.error() == dl::errc::invalid_argument);
                auto read = co_await store.leader(id);
                CHECK(read.error() == dl::errc::invalid_argument);
            }
        });
    }
    // Under dialect::plain, ids in distlock's own keys too.
    nowhere.dialect = dl::redis::dialect::plain;
    dl::redis::store plain{io, nowhere};
    run(io, [&]() -> asio::awaitable<void> {
        auto said = co_await plain.proclaim("distlock:{x}", dl::owner_token::generate(), 7, "v");
        CHECK(said.error() == dl::errc::invalid_argument);
        auto read = co_await plain.leader("distlock:{x}");
        CHECK(read.error() == dl::errc::invalid_argument);
    });
}

TEST_CASE("redis election: records another client wrote: a value of another form or type is no value; a lock "
          "without a token leads without one; a lock of another type fails with the server's words",
          "[redis][election][input]")
{
    redis_server server;
    asio::io_context io;
    dl::redis::store store{io, server.config()};
    run(io, [&]() -> asio::awaitable<void> {
        const auto owner = dl::owner_token::generate();
        auto fence = co_await store.put_if_absent("vote:2", owner, 10s);
        REQUIRE(fence);
        const auto token = std::to_string(fence.value());
        const auto key = store.leader_key("vote:2");
        for (const std::string& bad : {std::string{"garbage"}, token, token + "0:x", "0" + token + ":x", std::string{":x"},
                                      std::to_string(fence.value() - 1) + ":x"}) {
            INFO(bad);
            (void)co_await ask(store, "SET", key, bad);
            auto read = co_await store.leader("vote:2");
            REQUIRE(read);
            CHECK(read->epoch == fence.value());
            CHECK_FALSE(read->value);
        }
        (void)co_await ask(store, "DEL", key);
        (void)co_await ask(store, "HSET", key, "value", "x");
        auto hashed = co_await store.leader("vote:2");
        REQUIRE(hashed);
        CHECK_FALSE(hashed->value);
        // proclaim overwrites whatever the key held: it is the election's own.
        { const auto ok_ = co_await store.proclaim("vote:2", owner, fence.value(), "mine"); CHECK(ok_); }
        hashed = co_await store.leader("vote:2");
        REQUIRE(hashed);
        CHECK(hashed->value == std::optional<std::string>{"mine"});

        // A lock key another client wrote without a token: held, epoch 0, no value,
        // and no one proclaims with it.
        (void)co_await ask(store, "SET", store.lock_key("vote:3"), "someone-else", "PX", "10000");
        (void)co_await ask(store, "SET", store.leader_key("vote:3"), "0:x");
        auto foreign = co_await store.leader("vote:3");
        REQUIRE(foreign);
        CHECK(foreign->epoch == 0);
        CHECK(foreign->owner == "someone-"); // shortened, as read() does
        CHECK_FALSE(foreign->value);
        auto refused = co_await store.proclaim("vote:3", owner, 0, "v");
        CHECK(refused.error() == dl::errc::not_owner);

        // A lock key of another type: the server's refusal, nothing written.
        (void)co_await ask(store, "HSET", store.lock_key("vote:4"), "f", "v");
        dl::diagnostics diag;
        auto wrong = co_await store.leader("vote:4", &diag);
        REQUIRE_FALSE(wrong);
        CHECK(wrong.error() == dl::errc::store_unavailable);
        CHECK(diag.server_message().find("WRONGTYPE") != std::string::npos);
        auto unwritten = co_await store.proclaim("vote:4", owner, fence.value(), "v");
        CHECK(unwritten.error() == dl::errc::store_unavailable);
        { const auto said_ = co_await ask(store, "EXISTS", store.leader_key("vote:4")); CHECK(said_.integer == 0); }
        { const auto ok_ = co_await store.release("vote:2", owner); CHECK(ok_); }
    });
}

TEST_CASE("redis plain: an election's value beside the id's lock, in its slot; a foreign holder leads no term",
          "[redis][election][plain]")
{
    redis_server server;
    asio::io_context io;
    dl::redis::store store{io, plain_layout(server.config())};
    run(io, [&]() -> asio::awaitable<void> {
        for (const std::string id : {"vote:p", "{tag}x", "a{b}%"}) {
            CHECK(dl::redis::detail::hash_slot(store.leader_key(id)) == dl::redis::detail::hash_slot(id));
            CHECK(dl::redis::detail::key_layout{"distlock", false, true}.resource_beside(store.leader_key(id),
                                                                                       "leader") == id);
        }
        const auto owner = dl::owner_token::generate();
        auto fence = co_await store.put_if_absent("vote:p", owner, 10s);
        REQUIRE(fence);
        { const auto ok_ = co_await store.proclaim("vote:p", owner, fence.value(), std::string{"a\0b", 3}); CHECK(ok_); }
        { const auto said_ = co_await ask(store, "GET", store.leader_key("vote:p"));
          CHECK(said_.text == std::to_string(fence.value()) + ":" + std::string{"a\0b", 3}); }
        auto said = co_await store.leader("vote:p");
        REQUIRE(said);
        CHECK(said->epoch == fence.value());
        CHECK(said->owner == owner.to_hex().substr(0, 8));
        CHECK(said->value == std::optional<std::string>{std::string{"a\0b", 3}});
        auto wrong = co_await store.proclaim("vote:p", owner, fence.value() + 1, "v");
        CHECK(wrong.error() == dl::errc::not_owner);
        { const auto ok_ = co_await store.release("vote:p", owner); CHECK(ok_); }

        // Another Redlock client takes the id: it holds, without a token or a value,
        // and the value distlock's last grant left is not its.
        (void)co_await ask(store, "SET", "vote:p", "0123456789abcdef0123456789abcdef", "PX", "10000");
        auto theirs = co_await store.leader("vote:p");
        REQUIRE(theirs);
        CHECK(theirs->epoch == 0);
        CHECK(theirs->owner == "01234567");
        CHECK(theirs->remaining);
        CHECK_FALSE(theirs->value);
        // Its owner value with distlock's last token is still no grant of distlock's.
        auto posing = co_await store.proclaim("vote:p", dl::owner_token::from_hex("0123456789abcdef0123456789abcdef"),
                                              fence.value(), "v");
        CHECK(posing.error() == dl::errc::not_owner);
    });
}

namespace {
// A key's PTTL on `store`'s server (-2: no such key).
asio::awaitable<std::int64_t> pttl_of(dl::redis::store& store, std::string key)
{
    auto left = co_await store.execute("PTTL", key);
    REQUIRE(left);
    co_return left.value().integer;
}
} // namespace

TEST_CASE("redis lock-delay: the mark beside the lock follows its lease, goes with a release, and is the tombstone "
          "once the lock ran out or was revoked",
          "[redis][lock-delay]")
{
    redis_server server;
    asio::io_context io;
    dl::redis::store store{io, server.config()};
    run(io, [&]() -> asio::awaitable<void> {
        const std::string id = "ledger";
        const auto owner = dl::owner_token::generate();
        const auto other = dl::owner_token::generate();
        // Only the grant itself is marked: not a free lock, another owner, another token.
        auto unheld = co_await store.arm_delay(id, owner, 1, 1s);
        CHECK(unheld.error() == dl::errc::not_owner);
        auto fence = co_await store.put_if_absent(id, owner, 10s);
        REQUIRE(fence);
        auto foreign = co_await store.arm_delay(id, other, fence.value(), 1s);
        CHECK(foreign.error() == dl::errc::not_owner);
        auto stale = co_await store.arm_delay(id, owner, fence.value() - 1, 1s);
        CHECK(stale.error() == dl::errc::not_owner);
        auto zero = co_await store.arm_delay(id, owner, fence.value(), 0s);
        CHECK(zero.error() == dl::errc::invalid_argument);
        const auto no_mark = co_await pttl_of(store, store.delay_key(id));
        CHECK(no_mark == -2);

        // Marked: the mark ends the delay after the lock, and follows an extension.
        auto armed = co_await store.arm_delay(id, owner, fence.value(), 1s);
        REQUIRE(armed);
        auto left = co_await pttl_of(store, store.delay_key(id));
        CHECK(left > 10000);
        CHECK(left <= 11000);
        auto extended = co_await store.extend(id, owner, 600ms);
        REQUIRE(extended);
        left = co_await pttl_of(store, store.delay_key(id));
        CHECK(left > 1000);
        CHECK(left <= 1600);

        // The lock runs out: every acquisition is refused until the delay has passed,
        // answered with its end, by the server's clock.
        (void)co_await eventually("the lock ran out", [&] { return !holds(server, id); }, long_enough());
        const auto asked = dl::clock::now();
        auto delayed = co_await store.put_if_absent_answer(id, other, 10s);
        REQUIRE(delayed);
        CHECK(delayed.value().is_delayed());
        REQUIRE(delayed.value().not_before());
        CHECK(*delayed.value().not_before() > asked);
        CHECK(*delayed.value().not_before() <= asked + 1s);
        auto refused = co_await store.put_if_absent(id, other, 10s);
        CHECK(refused.error() == dl::errc::lock_delayed);
        asio::steady_timer t{co_await asio::this_coro::executor,
                             std::chrono::ceil<std::chrono::milliseconds>(*delayed.value().not_before() -
                                                                          dl::clock::now())};
        co_await t.async_wait(asio::use_awaitable);
        // Measured from the request, the end comes no later than the server's: a try
        // then may be told the few milliseconds left, and is granted after them.
        auto next = co_await store.put_if_absent(id, other, 10s);
        for (int tries = 0; !next && next.error() == dl::errc::lock_delayed && tries < 100; ++tries) {
            CHECK(dl::clock::now() < *delayed.value().not_before() + 500ms);
            asio::steady_timer again{co_await asio::this_coro::executor, 5ms};
            co_await again.async_wait(asio::use_awaitable);
            next = co_await store.put_if_absent(id, other, 10s);
        }
        REQUIRE(next);
        CHECK(next.value() > fence.value());

        // A release deletes the mark with the lock: no delay.
        auto marked = co_await store.arm_delay(id, other, next.value(), 1s);
        REQUIRE(marked);
        auto released = co_await store.release(id, other);
        REQUIRE(released);
        const auto mark_gone = co_await pttl_of(store, store.delay_key(id));
        CHECK(mark_gone == -2);
        auto at_once = co_await store.put_if_absent(id, owner, 10s);
        REQUIRE(at_once);

        // A revoke ends a marked grant as an expiry does: the tombstone, from now.
        auto marked_again = co_await store.arm_delay(id, owner, at_once.value(), 1s);
        REQUIRE(marked_again);
        auto revoked = co_await store.revoke(id, at_once.value());
        REQUIRE(revoked);
        CHECK_FALSE(holds(server, id));
        left = co_await pttl_of(store, store.delay_key(id));
        CHECK(left > 0);
        CHECK(left <= 1000);
        auto after_revoke = co_await store.put_if_absent_answer(id, other, 10s);
        REQUIRE(after_revoke);
        CHECK(after_revoke.value().is_delayed());
    });
}
