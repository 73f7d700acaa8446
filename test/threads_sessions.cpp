// The multi-threaded tests of the session stores (see threads.cpp): one etcd,
// ZooKeeper or PostgreSQL store shared by coroutines on strands of an io_context run
// by four threads, their keepalives, pings and pool working among the locks.
#include "support.hpp"
#include "threads.hpp"
#include "etcd_server.hpp"
#include "zookeeper_server.hpp"
#if defined(DISTLOCK_THREADS_POSTGRES)
#include "postgres_server.hpp"
#endif

#include <atomic>
#include <optional>
#include <string>
#include <vector>

using namespace test;
namespace etcd = distlock::etcd;
namespace zookeeper = distlock::zookeeper;

TEST_CASE("etcd: one store shared by coroutines on several threads", "[etcd][concurrency]")
{
    auto& server = test::shared_etcd();
    const auto prefix = test::fresh_prefix("threads");
    auto cfg = server.config(prefix);
    cfg.keepalive_every = 200ms; // keepalives (and their pushes to the leases) run among the locks
    asio::io_context io;
    etcd::store store{io, cfg};
    constexpr int workers = 8, rounds = 10;
    const auto counter = prefix + "n";
    const auto [errors, finished] = share_session_store(store, io, workers, rounds,
                                                        [&](const dl::lease& lease) -> asio::awaitable<bool> {
        auto got = co_await store.execute("kv/range", etcd::detail::range_request(counter));
        const auto r = got ? etcd::detail::read_range(got.value()) : std::nullopt;
        const long n = r && !r->kvs.empty() ? std::stol(r->kvs.front().value) : 0;
        co_return r && co_await store.fenced_put(counter, lease, std::to_string(n + 1));
    });
    CHECK(errors == 0);
    CHECK(finished == workers);
    const auto r = etcd::detail::read_range(server.call("kv/range", etcd::detail::range_request(counter)));
    REQUIRE(r);
    REQUIRE(r->kvs.size() == 1);
    CHECK(std::stol(r->kvs.front().value) == workers * rounds);
    CHECK(store.keepalives_sent() > 0);
}

TEST_CASE("zookeeper: one store shared by coroutines on several threads", "[zookeeper][concurrency]")
{
    test::zookeeper_ensemble server{1};
    auto cfg = server.config("/threads");
    cfg.session_timeout = 600ms; // pings (and their pushes to the leases) every 200 ms, among the locks
    asio::io_context io;
    zookeeper::store store{io, cfg};
    constexpr int workers = 8, rounds = 10;
    dl::memory::fenced_register<long> counter{0};
    const auto [errors, finished] = share_session_store(store, io, workers, rounds,
                                                        [&](const dl::lease& lease) -> asio::awaitable<bool> {
        const long n = counter.read();
        // Another strand's turn in between, on another thread.
        dl::timer t{co_await asio::this_coro::executor, std::chrono::milliseconds{1}};
        co_await t.async_wait(asio::use_awaitable);
        co_return counter.write(lease.fence(), n + 1).has_value();
    });
    CHECK(errors == 0);
    CHECK(finished == workers);
    CHECK(counter.read() == workers * rounds);
    CHECK(store.pings_sent() > 0);
}

#if defined(DISTLOCK_THREADS_POSTGRES)
TEST_CASE("postgres: one store shared by coroutines on several threads", "[postgres][concurrency]")
{
    // Catch's assertions are not thread-safe: workers count, the main thread asserts.
    test::postgres_server cluster;
    asio::io_context io;
    dl::postgres::store store{io, cluster.config("threads_locks")};
    constexpr int workers = 8, rounds = 10;
    std::atomic<int> errors{0}, finished{0};
    // A read, then a write fenced by the lease, as two requests: another worker's
    // requests on other threads come between them on the pool.
    auto section = [&](const dl::lease& lease) -> asio::awaitable<bool> {
        auto read = co_await store.execute("SELECT n FROM threads_counter WHERE id = 1");
        const auto n = read ? read.value().integer(0, 0) : std::nullopt;
        if (!n)
            co_return false;
        std::vector<dl::postgres::param> next;
        next.push_back(dl::postgres::param::number(*n + 1));
        auto wrote = co_await store.fenced_execute(
            "threads", lease.fence(), "UPDATE threads_counter SET n = $1 WHERE id = 1 AND " + store.fence_condition(2, 3),
            std::move(next));
        co_return wrote && wrote.value() == 1;
    };
    // Named: a coroutine lambda reads its captures through the closure, which must outlive it.
    auto worker = [&]() -> asio::awaitable<void> {
        dl::basic_distributed_mutex<dl::postgres::store> m{
            store, "threads", {.ttl = 5s}, dl::retry::exponential_backoff{.initial = 1ms, .max = 10ms}};
        co_await lock_rounds(m, rounds, errors, section);
        if (++finished == workers)
            co_await store.close(); // lets the threads' run() return
    };
    auto setup = [&]() -> asio::awaitable<void> {
        auto made = co_await store.execute("CREATE TABLE threads_counter (id int PRIMARY KEY, n bigint)");
        auto row = co_await store.execute("INSERT INTO threads_counter VALUES (1, 0)");
        if (!made || !row) {
            ++errors;
            co_await store.close();
            co_return;
        }
        for (int w = 0; w < workers; ++w)
            asio::co_spawn(asio::make_strand(io), worker(), asio::detached);
    };
    asio::co_spawn(io, setup(), asio::detached);
    run_on_four_threads(io, 60s);
    CHECK(errors == 0);
    CHECK(finished == workers);
    std::int64_t total = -1;
    {
        asio::io_context look;
        dl::postgres::store reader{look, cluster.config("threads_locks")};
        test::run(look, [&]() -> asio::awaitable<void> {
            auto r = co_await reader.execute("SELECT n FROM threads_counter WHERE id = 1");
            if (r)
                total = r.value().integer(0, 0).value_or(-1);
            co_await reader.close();
        });
    }
    CHECK(total == workers * rounds);
}
#endif
