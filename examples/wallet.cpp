// The wallet demo: the classic scenarios of distributed locking, played with real
// time on the in-process store, or on Redis:
//   wallet                                   in-process store
//   wallet --redis redis://127.0.0.1:6379    one Redis server
//   wallet --redis URL --redis URL ...       a Redlock quorum of several
//   wallet --dynamodb dynamodb://127.0.0.1:8000?table=wallet_locks
//                                            one DynamoDB table (made if missing)
//   wallet --postgres postgres://user@127.0.0.1:5432/db
//   wallet --etcd etcd://127.0.0.1:2379
//   wallet --zookeeper zk://127.0.0.1:2181
//                                            a PostgreSQL lease table, and the
//                                            wallet itself in a SQL table, its writes
//                                            fenced in the same statement
// Each "server" is a coroutine with its own mutex object; the wallet balance lives in
// a fenced register, standing for the database that owns the data. Exits non-zero if
// a scenario does not turn out as described.
#include <distlock/distlock.hpp>
#include <distlock/dynamodb.hpp>
#include <distlock/memory.hpp>
#include <distlock/etcd.hpp>
#include <distlock/postgres.hpp>
#include <distlock/redis.hpp>
#include <distlock/zookeeper.hpp>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/io_context.hpp>
#include <asio/post.hpp>
#include <asio/steady_timer.hpp>
#include <asio/use_awaitable.hpp>

#include <atomic>
#include <cstdio>
#include <memory>
#include <optional>
#include <span>
#include <thread>
#include <vector>
#include <string>

namespace dl = distlock;
using namespace std::chrono_literals;
using asio::awaitable;

namespace {

int failures = 0;

void verdict(bool ok, const char* what)
{
    std::printf("  %s %s\n", ok ? "[ok]  " : "[FAIL]", what);
    if (!ok)
        ++failures;
}

awaitable<void> pause(dl::duration d)
{
    asio::steady_timer t{co_await asio::this_coro::executor, d};
    co_await t.async_wait(asio::use_awaitable);
}

template <class Store>
using wallet_mutex = dl::basic_distributed_mutex<Store, dl::retry::exponential_backoff, dl::renew::watchdog>;

// Reads the balance, "thinks" for a while (a network call), writes balance - cents.
awaitable<void> debit_unlocked(dl::memory::fenced_register<long>& wallet, long cents)
{
    const long seen = wallet.read();
    co_await pause(20ms);
    (void)wallet.write(0, seen - cents);
}

template <class Store>
awaitable<void> debit_locked(Store& store, dl::memory::fenced_register<long>& wallet, long cents)
{
    wallet_mutex<Store> m{store, "wallet:42", {.ttl = 2s},
                   dl::retry::exponential_backoff{.initial = 5ms, .max = 100ms, .deadline = 5s}};
    auto lease = co_await m.lock();
    if (!lease) {
        std::printf("  lock failed: %s\n", lease.error().message().c_str());
        ++failures;
        co_return;
    }
    const long seen = wallet.read();
    co_await pause(20ms);
    auto written = wallet.write(lease->fence(), seen - cents);
    std::printf("  server debits %ld with fencing token %llu: %s\n", cents,
                static_cast<unsigned long long>(lease->fence()), written ? "written" : "rejected");
    (void)co_await lease->unlock();
}

template <class Store>
awaitable<void> lost_update(Store& store)
{
    std::puts("\n1. Two servers debit one wallet of 100: 30 and 50.");
    dl::memory::fenced_register<long> plain{100};
    auto ex = co_await asio::this_coro::executor;
    int done = 0;
    for (long cents : {30L, 50L})
        asio::co_spawn(ex, [&, cents]() -> awaitable<void> { co_await debit_unlocked(plain, cents); ++done; }, asio::detached);
    while (done < 2)
        co_await pause(5ms);
    std::printf("  without a lock the balance ends at %ld: one debit was lost\n", plain.read());
    verdict(plain.read() != 20, "without a lock, an update is lost");

    dl::memory::fenced_register<long> guarded{100};
    done = 0;
    for (long cents : {30L, 50L})
        asio::co_spawn(ex, [&, cents]() -> awaitable<void> { co_await debit_locked(store, guarded, cents); ++done; }, asio::detached);
    while (done < 2)
        co_await pause(5ms);
    std::printf("  with the lock the balance ends at %ld\n", guarded.read());
    verdict(guarded.read() == 20, "with the lock, both debits land");
}

template <class Store>
awaitable<void> stalled_holder(Store& store)
{
    std::puts("\n2. A holder stalls (a GC pause) past its 200 ms TTL, then writes.");
    dl::memory::fenced_register<long> wallet{100};
    dl::basic_distributed_mutex<Store> m{store, "wallet:7", {.ttl = 200ms}};
    auto first = co_await m.lock();
    if (!first)
        co_return verdict(false, "first holder locks");
    const long seen = wallet.read();
    std::printf("  server A holds the lock with token %llu and pauses...\n",
                static_cast<unsigned long long>(first->fence()));
    co_await pause(300ms);
    auto second = co_await m.lock();
    if (!second)
        co_return verdict(false, "second holder locks after the TTL");
    std::printf("  server B takes the expired lock with token %llu and debits 10\n",
                static_cast<unsigned long long>(second->fence()));
    (void)wallet.write(second->fence(), wallet.read() - 10);
    auto late = wallet.write(first->fence(), seen - 50);
    std::printf("  server A wakes up and writes with token %llu: %s\n",
                static_cast<unsigned long long>(first->fence()),
                late ? "accepted" : late.error().message().c_str());
    verdict(!late && wallet.read() == 90, "the stale write is rejected by its fencing token");
    auto released = co_await first->unlock();
    verdict(!released && released.error() == dl::errc::lease_lost,
            "A's unlock reports that its lease had been lost, and does not remove B's lock");
    auto b_released = co_await second->unlock();
    verdict(b_released.has_value(), "B still held the lock until its own release");
}

template <class Store>
awaitable<void> transfers(Store& store)
{
    std::puts("\n3. Transfers 42->7 and 7->42 at the same time, 50 each way.");
    dl::memory::fenced_register<long> w42{500}, w7{500};
    auto ex = co_await asio::this_coro::executor;
    int done = 0;
    auto transfer = [&](std::string from, std::string to) -> awaitable<void> {
        for (int i = 0; i < 50; ++i) {
            auto ids = dl::resources(from, to); // locked in sorted order, whatever the order here
            auto both = co_await dl::lock_all(store, ids, {.ttl = 2s},
                                              dl::retry::exponential_backoff{.initial = 1ms, .max = 20ms});
            if (!both) {
                ++failures;
                break;
            }
            auto& src = from == "wallet:42" ? w42 : w7;
            auto& dst = from == "wallet:42" ? w7 : w42;
            const long s = src.read(), d = dst.read();
            co_await asio::post(ex, asio::use_awaitable);
            (void)src.write(*both->fence(from), s - 1);
            (void)dst.write(*both->fence(to), d + 1);
            (void)co_await both->unlock();
        }
        ++done;
    };
    asio::co_spawn(ex, transfer("wallet:42", "wallet:7"), asio::detached);
    asio::co_spawn(ex, transfer("wallet:7", "wallet:42"), asio::detached);
    for (int i = 0; i < 2000 && done < 2; ++i)
        co_await pause(5ms);
    std::printf("  balances: wallet:42 = %ld, wallet:7 = %ld\n", w42.read(), w7.read());
    verdict(done == 2, "both directions finish: sorted multi-lock cannot deadlock");
    verdict(w42.read() == 500 && w7.read() == 500, "no money created or lost");
}

template <class Store>
awaitable<void> crashed_holder(Store& store)
{
    std::puts("\n4. A holder crashes while holding the lock (its release never arrives).");
    dl::basic_distributed_mutex<Store> m{store, "job:nightly", {.ttl = 300ms},
                                         dl::retry::exponential_backoff{.initial = 10ms, .max = 50ms, .deadline = 2s}};
    // The crashed server took the lock the way the mutex does, then vanished: no
    // release will ever come for its owner token.
    // One attempt of the mutex's own acquisition, whose holder never keeps or releases it.
    using acquisition = typename dl::basic_distributed_mutex<Store>::acquire_policy;
    auto crashed = acquisition{}.open(dl::store_ref<Store>{store}, {"job:nightly", {.ttl = 300ms}, {}});
    auto held = co_await crashed.attempt();
    if (!held || !held->is_granted())
        co_return verdict(false, "the first holder locks");
    const auto start = dl::clock::now();
    auto next = co_await m.lock();
    const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(dl::clock::now() - start);
    std::printf("  another server waited %lld ms and got the lock with token %llu\n",
                static_cast<long long>(waited.count()),
                next ? static_cast<unsigned long long>(next->fence()) : 0ULL);
    verdict(next.has_value() && waited >= 200ms, "the lock freed itself when the TTL ran out");
    if (next)
        (void)co_await next->unlock();
}

// Only where the lock and the data share a database.
template <class Store>
awaitable<void> fenced_sql(Store&)
{
    co_return;
}

awaitable<void> fenced_sql(dl::postgres::store& db)
{
    namespace pg = dl::postgres;
    std::puts("\n5. The wallet is a SQL row; a stalled holder's UPDATE checks its token in the same statement.");
    const std::vector<pg::param> none;
    if (!co_await db.execute("CREATE TABLE IF NOT EXISTS distlock_demo_wallet (id int PRIMARY KEY, balance bigint)",
                             none) ||
        !co_await db.execute("INSERT INTO distlock_demo_wallet VALUES (1, 100) ON CONFLICT (id) DO UPDATE SET "
                             "balance = 100",
                             none))
        co_return verdict(false, "the wallet table is made");
    const std::string debit = "UPDATE distlock_demo_wallet SET balance = balance - $1 WHERE id = 1 AND " +
                              db.fence_condition(2, 3);
    const auto amount = [](long cents) { return std::vector<pg::param>{pg::param::number(cents)}; };
    dl::basic_distributed_mutex<pg::store> m{db, "wallet:sql", {.ttl = 200ms}};
    auto first = co_await m.lock();
    if (!first)
        co_return verdict(false, "first holder locks");
    std::printf("  server A holds the lock with token %llu and pauses past its TTL...\n",
                static_cast<unsigned long long>(first->fence()));
    co_await pause(300ms);
    auto second = co_await m.lock();
    if (!second)
        co_return verdict(false, "second holder locks after the TTL");
    auto b = co_await db.fenced_execute("wallet:sql", second->fence(), debit, amount(10));
    std::printf("  server B debits 10 with token %llu: %s\n", static_cast<unsigned long long>(second->fence()),
                b ? "1 row updated" : b.error().message().c_str());
    auto a = co_await db.fenced_execute("wallet:sql", first->fence(), debit, amount(50));
    std::printf("  server A wakes up and debits 50 with token %llu: %s\n",
                static_cast<unsigned long long>(first->fence()), a ? "updated" : a.error().message().c_str());
    auto balance = co_await db.execute("SELECT balance FROM distlock_demo_wallet WHERE id = 1", none);
    const auto left = balance ? balance->integer(0, 0) : std::nullopt;
    std::printf("  balance: %lld\n", static_cast<long long>(left.value_or(-1)));
    verdict(b && !a && a.error() == dl::errc::stale_fence && left == 90,
            "the database itself refused the stale holder's UPDATE");
    (void)co_await first->unlock();
    (void)co_await second->unlock();
}

// On etcd a lock lives as long as its holder's session: a pause does not end it, the
// session's expiry does (its keepalives stop while the process is stalled). Here the
// expiry that a long enough stall brings is made at once, by revoking the session.
awaitable<void> stalled_holder(dl::etcd::store& store)
{
    std::puts("\n2. A holder stalls (a GC pause) until its etcd session expires, then writes.");
    dl::memory::fenced_register<long> wallet{100};
    dl::etcd::store other{co_await asio::this_coro::executor, store.settings()};
    dl::basic_distributed_mutex<dl::etcd::store> a{store, "wallet:7"}, b{other, "wallet:7"};
    auto first = co_await a.lock();
    if (!first)
        co_return verdict(false, "first holder locks");
    const long seen = wallet.read();
    std::printf("  server A holds the lock with token %llu and pauses; its session expires...\n",
                static_cast<unsigned long long>(first->fence()));
    nlohmann::json revoke;
    revoke["ID"] = std::to_string(store.session_lease());
    (void)co_await store.execute("lease/revoke", std::move(revoke));
    auto second = co_await b.lock();
    if (!second)
        co_return verdict(false, "second holder locks after the session expired");
    std::printf("  server B takes the freed lock with token %llu and debits 10\n",
                static_cast<unsigned long long>(second->fence()));
    (void)wallet.write(second->fence(), wallet.read() - 10);
    auto late = wallet.write(first->fence(), seen - 50);
    std::printf("  server A wakes up and writes with token %llu: %s\n",
                static_cast<unsigned long long>(first->fence()),
                late ? "accepted" : late.error().message().c_str());
    verdict(!late && wallet.read() == 90, "the stale write is rejected by its fencing token");
    auto in_etcd = co_await store.fenced_put(store.settings().prefix + "data/wallet:7", *first, "40");
    verdict(!in_etcd && in_etcd.error() == dl::errc::stale_fence,
            "etcd itself refuses A's fenced put: its lock key is gone");
    auto released = co_await first->unlock();
    verdict(!released, "A's unlock reports that its lease had been lost, and does not remove B's lock");
    auto b_released = co_await second->unlock();
    verdict(b_released.has_value(), "B still held the lock until its own release");
    co_await other.close();
}

// On ZooKeeper a lock lives as long as its holder's session, which the holder keeps by
// pinging. Here the holder really stalls: its store runs on a thread of its own that
// sleeps (a GC pause) for longer than the session timeout, so its pings stop and the
// ensemble expires the session.
awaitable<void> stalled_holder(dl::zookeeper::store& store)
{
    std::puts("\n2. A holder stalls (a GC pause) until its ZooKeeper session expires, then writes.");
    dl::memory::fenced_register<long> wallet{100};
    auto settings = store.settings();
    settings.session_timeout = 1s;
    asio::io_context paused_io;
    std::atomic<int> stage{0}; // 1: A holds, 2: B wrote, 3: A wrote
    std::atomic<dl::fence_token> a_fence{0};
    std::atomic<bool> late_accepted{false};
    std::thread paused{[&] {
        dl::zookeeper::store a_store{paused_io, settings};
        asio::co_spawn(paused_io, [&]() -> awaitable<void> {
            dl::basic_distributed_mutex<dl::zookeeper::store> a{a_store, "wallet:7"};
            auto first = co_await a.lock();
            if (!first) {
                stage = -1;
                co_return;
            }
            const long seen = wallet.read();
            a_fence = first->fence();
            stage = 1;
            std::this_thread::sleep_for(3s); // the pause: nothing of this thread runs, pings included
            while (stage.load() < 2)
                co_await pause(20ms);
            late_accepted = wallet.write(first->fence(), seen - 50).has_value();
            stage = 3;
            (void)co_await first->unlock();
            co_await a_store.close();
        }, asio::detached);
        paused_io.run();
    }};
    while (stage.load() == 0)
        co_await pause(20ms);
    if (stage.load() < 0) {
        paused.join();
        co_return verdict(false, "first holder locks");
    }
    std::printf("  server A holds the lock with token %llu and pauses; its session expires...\n",
                static_cast<unsigned long long>(a_fence.load()));
    dl::basic_distributed_mutex<dl::zookeeper::store, dl::retry::exponential_backoff> b{
        store, "wallet:7", {}, dl::retry::exponential_backoff{.initial = 20ms, .max = 200ms, .deadline = 20s}};
    auto second = co_await b.lock();
    if (!second) {
        stage = 2;
        paused.join();
        co_return verdict(false, "second holder locks after the session expired");
    }
    std::printf("  server B takes the freed lock with token %llu and debits 10\n",
                static_cast<unsigned long long>(second->fence()));
    (void)wallet.write(second->fence(), wallet.read() - 10);
    stage = 2;
    while (stage.load() < 3)
        co_await pause(20ms);
    paused.join();
    std::printf("  server A wakes up and writes with token %llu: %s\n", static_cast<unsigned long long>(a_fence.load()),
                late_accepted ? "accepted" : "rejected (stale fence)");
    verdict(!late_accepted && wallet.read() == 90, "the stale write is rejected by its fencing token");
    auto b_released = co_await second->unlock();
    verdict(b_released.has_value(), "B still held the lock until its own release");
}

// A session store's crashed holder: its store goes without a release or a goodbye, and
// its session expires on the server. `settings` are the crashed holder's.
template <class SessionStore, class Config>
awaitable<void> crashed_session_holder(SessionStore& store, Config settings, const char* timeout_words)
{
    std::puts("\n4. A holder crashes while holding the lock (its release never arrives).");
    auto crashed = std::make_unique<SessionStore>(co_await asio::this_coro::executor, settings);
    dl::basic_distributed_mutex<SessionStore> c{*crashed, "job:nightly"};
    auto held = co_await c.lock();
    if (!held)
        co_return verdict(false, "the first holder locks");
    // The crash: the holder's store goes without a release (the lease, still in scope,
    // finds it closed), and its keepalives or pings stop.
    crashed.reset();
    dl::basic_distributed_mutex<SessionStore, dl::retry::exponential_backoff> m{
        store, "job:nightly", {}, dl::retry::exponential_backoff{.initial = 10ms, .max = 50ms, .deadline = 10s}};
    const auto start = dl::clock::now();
    auto next = co_await m.lock();
    const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(dl::clock::now() - start);
    std::printf("  another server waited %lld ms (%s) and got the lock with token %llu\n",
                static_cast<long long>(waited.count()), timeout_words,
                next ? static_cast<unsigned long long>(next->fence()) : 0ULL);
    verdict(next.has_value() && next->fence() > held->fence() && waited >= 500ms,
            "the lock went with the crashed holder's session");
    if (next)
        (void)co_await next->unlock();
}

awaitable<void> crashed_holder(dl::etcd::store& store)
{
    auto settings = store.settings();
    settings.session_ttl = 2s;
    return crashed_session_holder(store, settings, "the session TTL is 2 s");
}

awaitable<void> crashed_holder(dl::zookeeper::store& store)
{
    auto settings = store.settings();
    settings.session_timeout = 2s;
    return crashed_session_holder(store, settings, "the session timeout is 2 s");
}

template <class Store>
int play(asio::io_context& io, Store& store, const char* where)
{
    std::printf("distlock wallet demo (%s)\n", where);
    asio::co_spawn(io, [&]() -> awaitable<void> {
        co_await lost_update(store);
        co_await stalled_holder(store);
        co_await transfers(store);
        co_await crashed_holder(store);
        co_await fenced_sql(store);
        if constexpr (requires { store.close(); })
            co_await store.close();
        else if constexpr (requires { store.disconnect(); })
            store.disconnect();
        if constexpr (requires { store.node(0).disconnect(); })
            for (std::size_t i = 0; i < store.size(); ++i)
                store.node(i).disconnect();
    }, [](std::exception_ptr e) {
        if (e) {
            std::puts("unexpected exception");
            ++failures;
        }
    });
    io.run();
    std::printf("\n%s\n", failures == 0 ? "all scenarios behaved as described" : "SOME SCENARIOS FAILED");
    return failures == 0 ? 0 : 1;
}

} // namespace

int main(int argc, char** argv)
{
    std::vector<dl::redis::config> redis;
    std::optional<dl::dynamodb::config> dynamodb;
    std::optional<dl::postgres::config> postgres;
    std::optional<dl::etcd::config> etcd;
    std::optional<dl::zookeeper::config> zookeeper;
    const char* usage = "usage: wallet [--redis URL]... | wallet --dynamodb URL | wallet --postgres URL | "
                        "wallet --etcd URL | wallet --zookeeper URL\n";
    for (int i = 1; i < argc; ++i) {
        const std::string arg = argv[i];
        if (arg == "--zookeeper" && i + 1 < argc && !zookeeper) {
            auto cfg = dl::zookeeper::config::from_url(argv[++i]);
            if (!cfg) {
                std::fprintf(stderr, "bad ZooKeeper URL %s (zk://host:port[,host:port...][/chroot])\n", argv[i]);
                return 2;
            }
            zookeeper = *cfg;
            continue;
        }
        if (arg == "--etcd" && i + 1 < argc && !etcd) {
            auto cfg = dl::etcd::config::from_url(argv[++i]);
            if (!cfg) {
                std::fprintf(stderr, "bad etcd URL %s (etcd://host:port[,host:port...])\n", argv[i]);
                return 2;
            }
            etcd = *cfg;
            continue;
        }
        if (arg == "--postgres" && i + 1 < argc && !postgres) {
            auto cfg = dl::postgres::config::from_url(argv[++i]);
            if (!cfg) {
                std::fprintf(stderr, "bad PostgreSQL URL %s (postgres://user@host:port/db)\n", argv[i]);
                return 2;
            }
            postgres = *cfg;
            continue;
        }
        if (arg == "--dynamodb" && i + 1 < argc && !dynamodb) {
            auto cfg = dl::dynamodb::config::from_url(argv[++i]);
            if (!cfg) {
                std::fprintf(stderr, "bad DynamoDB URL %s (dynamodb://host:port?table=NAME)\n", argv[i]);
                return 2;
            }
            dynamodb = *cfg;
        } else if (arg == "--redis" && i + 1 < argc) {
            auto cfg = dl::redis::config::from_url(argv[++i]);
            if (!cfg) {
                std::fprintf(stderr, "bad Redis URL %s (redis://host:port, rediss://..., unix:///path)\n", argv[i]);
                return 2;
            }
            redis.push_back(*cfg);
        } else {
            std::fprintf(stderr, "%s", usage);
            return 2;
        }
    }
    asio::io_context io;
    if (zookeeper) {
        if (!redis.empty() || dynamodb || postgres || etcd) {
            std::fprintf(stderr, "%s", usage);
            return 2;
        }
        dl::zookeeper::store store{io, *zookeeper};
        return play(io, store, "ZooKeeper sessions");
    }
    if (etcd) {
        if (!redis.empty() || dynamodb || postgres) {
            std::fprintf(stderr, "%s", usage);
            return 2;
        }
        dl::etcd::store store{io, *etcd};
        return play(io, store, "etcd sessions");
    }
    if (postgres) {
        if (!redis.empty() || dynamodb) {
            std::fprintf(stderr, "%s", usage);
            return 2;
        }
        dl::postgres::store store{io, *postgres};
        return play(io, store, "PostgreSQL lease table");
    }
    if (dynamodb) {
        if (!redis.empty()) {
            std::fprintf(stderr, "%s", usage);
            return 2;
        }
        dl::dynamodb::store store{io, *dynamodb};
        dl::diagnostics diag;
        dl::result<void> made{make_error_code(dl::errc::cancelled)};
        asio::co_spawn(io, [&]() -> awaitable<void> { made = co_await store.create_table(30s, &diag); },
                       asio::detached);
        io.run();
        io.restart();
        if (!made) {
            std::fprintf(stderr, "the DynamoDB table cannot be made: %s %s\n", made.error().message().c_str(),
                         diag.to_string().c_str());
            return 1;
        }
        return play(io, store, "DynamoDB, record versions");
    }
    if (redis.empty()) {
        dl::memory::store store{io};
        return play(io, store, "in-process store");
    }
    std::vector<std::unique_ptr<dl::redis::store>> stores;
    for (auto& cfg : redis)
        stores.push_back(std::make_unique<dl::redis::store>(io, cfg));
    if (stores.size() == 1)
        return play(io, *stores.front(), "Redis");
    std::vector<dl::redis::store*> nodes;
    for (auto& s : stores)
        nodes.push_back(s.get());
    dl::quorum<dl::redis::store> quorum{std::span<dl::redis::store* const>{nodes}};
    return play(io, quorum, "Redlock quorum of Redis servers");
}
