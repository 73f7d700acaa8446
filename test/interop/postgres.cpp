// test/interop/postgres.cpp: distlock and the store's reference client on one server.
//
// The reference client is psql (postgresql-client 15), the foreign service a script of
// SQL typed into it: session-level advisory locks on the key the foreign service
// chooses, pg_advisory_lock(hashtext('name')), pg_advisory_lock(42) or
// pg_advisory_lock(12, 34), which distlock takes too under advisory_key=hashtext, bigint
// and int4pair. psql prints the result of each statement, and `\echo word` once the
// statements before it have returned: "held" comes only when pg_advisory_lock does.
// One cluster for the run (test/support/postgres_server.hpp); each case runs once per
// key function, as a section.
#include "postgres/postgres_support.hpp"

#include <distlock/basic_distributed_shared_mutex.hpp>

#include <signal.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace {

using namespace std::chrono_literals;
using namespace test::postgres_tests;

// One key function's view of a resource: distlock's id and the SQL arguments a foreign
// client writes for the same key.
struct key_case {
    const char* name;
    pg::advisory_key_function function;
    std::string id;
    std::string sql_key;
};

std::vector<key_case> key_cases()
{
    // Keys no other case of this run takes.
    static long long cases = 0;
    const auto n = ++cases;
    const auto pid = static_cast<long long>(::getpid());
    const std::string name = "interop:" + std::to_string(pid) + ":" + std::to_string(n);
    const std::string big = std::to_string(-(pid * 1000 + n) * 4096 - 7); // negative: the sign travels too
    const std::string pair_a = std::to_string(-(pid % 100000) - 1), pair_b = std::to_string(n);
    return {{"hashtext", pg::advisory_key_function::hashtext, name, "hashtext('" + name + "')"},
            {"bigint", pg::advisory_key_function::bigint, big, big},
            {"int4pair", pg::advisory_key_function::int4pair, pair_a + "," + pair_b, pair_a + ", " + pair_b}};
}

// A psql session driven through its stdin; what it prints is read line by line.
class psql {
public:
    psql()
        : proc_{{"psql", "-X", "-q", "-A", "-t", "-h", "127.0.0.1", "-p", std::to_string(test::shared_postgres().port()),
                 "-U", "postgres", "postgres"}}
    {}

    // The statement, then `\echo word`: the word comes once the statement returned.
    void run(const std::string& sql, const std::string& word)
    {
        proc_.write_line(sql);
        proc_.write_line("\\echo " + word);
    }

    // Reads lines until `word` (returning the line before it: the statement's result),
    // nullopt after `limit`.
    asio::awaitable<std::optional<std::string>> saw(const std::string& word, std::chrono::milliseconds limit = 10s)
    {
        const auto deadline = std::chrono::steady_clock::now() + limit;
        std::string before;
        for (;;) {
            const auto left =
                std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
            if (left.count() <= 0)
                co_return std::nullopt;
            auto line = co_await proc_.next_line(left);
            if (!line)
                co_return std::nullopt;
            if (*line == word)
                co_return before;
            before = *line;
        }
    }

    // Its server process id (to find its requests in pg_locks).
    asio::awaitable<int> backend_pid()
    {
        run("SELECT pg_backend_pid();", "pid");
        auto pid = co_await saw("pid");
        REQUIRE(pid);
        co_return std::stoi(*pid);
    }

    void kill()
    {
        proc_.kill(SIGKILL);
        (void)proc_.wait(5s);
    }

private:
    test::child proc_;
};

// pg_locks: advisory requests of server process `pid`, granted or waiting.
long long requests_of(probe& look, int pid, bool granted)
{
    return look
        .query("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = $1::int AND granted = $2::bool",
               {pg::param::number(pid), pg::param::text(granted ? "t" : "f")})
        .integer(0, 0)
        .value_or(-1);
}

// Advisory requests waiting in the server, in this database.
long long waiting(probe& look)
{
    return look.query("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted")
        .integer(0, 0)
        .value_or(-1);
}

pg::config config_for(const std::string& table, pg::advisory_key_function f)
{
    auto c = test::shared_postgres().config(table);
    c.advisory_key = f;
    return c;
}

using once = dl::basic_distributed_mutex<pg::advisory_store, dl::retry::none>;
// Waits that outlast each case: a waiter keeps its place in the server's queue.
using patient = dl::basic_distributed_mutex<pg::advisory_store, dl::retry::fixed>;
constexpr dl::retry::fixed patient_retry{.delay = 20s, .deadline = 20s};

} // namespace

TEST_CASE("postgres interop: psql holds the key, distlock is refused, waits, and gets it at psql's unlock",
          "[interop][postgres]")
{
    for (const auto& k : key_cases()) {
        DYNAMIC_SECTION(k.name)
        {
            const auto table = test::fresh_table("iop");
            probe look{table};
            asio::io_context io;
            pg::advisory_store store{io, config_for(table, k.function)};
            test::run(io, [&]() -> asio::awaitable<void> {
                const auto ex = co_await asio::this_coro::executor;
                psql foreign;
                foreign.run("SELECT pg_advisory_lock(" + k.sql_key + ");", "held");
                { const bool seen_ = static_cast<bool>(co_await foreign.saw("held")); REQUIRE(seen_); }
                once m{store, k.id, {.ttl = 10s}};
                auto refused = co_await m.try_lock();
                REQUIRE_FALSE(refused);
                CHECK(refused.error() == dl::condition::contended);

                patient w{store, k.id, {.ttl = 10s}, patient_retry};
                auto waiter = test::start(ex, w.lock());
                (void)co_await test::eventually("distlock waits in the server", [&] { return waiting(look) == 1; },
                                                test::long_enough());
                CHECK_FALSE(waiter.ready());
                foreign.run("SELECT pg_advisory_unlock(" + k.sql_key + ");", "released");
                auto unlocked = co_await foreign.saw("released");
                REQUIRE(unlocked);
                CHECK(*unlocked == "t");
                const auto released_at = dl::clock::now();
                { const bool came_ = co_await waiter.wait(5000ms); REQUIRE(came_); }
                // Granted by the server's queue at the unlock, not at a later retry.
                CHECK(dl::clock::now() - released_at < 1s);
                auto& l = waiter.get();
                REQUIRE(l);
                { const auto ok_ = co_await l->unlock(); REQUIRE(ok_); }
                co_await store.close();
            });
        }
    }
}

TEST_CASE("postgres interop: distlock holds the key, psql is refused and waits until distlock's unlock",
          "[interop][postgres]")
{
    for (const auto& k : key_cases()) {
        DYNAMIC_SECTION(k.name)
        {
            const auto table = test::fresh_table("iop");
            probe look{table};
            asio::io_context io;
            pg::advisory_store store{io, config_for(table, k.function)};
            test::run(io, [&]() -> asio::awaitable<void> {
                once m{store, k.id, {.ttl = 10s}};
                auto l = co_await m.lock();
                REQUIRE(l);
                psql foreign;
                const int pid = co_await foreign.backend_pid();
                foreign.run("SELECT pg_try_advisory_lock(" + k.sql_key + ");", "tried");
                auto tried = co_await foreign.saw("tried");
                REQUIRE(tried);
                CHECK(*tried == "f");
                foreign.run("SELECT pg_advisory_lock(" + k.sql_key + ");", "held");
                (void)co_await test::eventually("psql waits in the server",
                                                [&] { return requests_of(look, pid, false) == 1; },
                                                test::long_enough());
                { const bool seen_ = static_cast<bool>(co_await foreign.saw("held", 200ms)); CHECK_FALSE(seen_); }
                { const auto ok_ = co_await l->unlock(); REQUIRE(ok_); }
                { const bool seen_ = static_cast<bool>(co_await foreign.saw("held", 5s)); CHECK(seen_); }
                CHECK(requests_of(look, pid, true) == 1);
                co_await store.close();
            });
        }
    }
}

TEST_CASE("postgres interop: a psql holder killed without unlocking frees the key with its session",
          "[interop][postgres]")
{
    for (const auto& k : key_cases()) {
        DYNAMIC_SECTION(k.name)
        {
            const auto table = test::fresh_table("iop");
            probe look{table};
            asio::io_context io;
            pg::advisory_store store{io, config_for(table, k.function)};
            test::run(io, [&]() -> asio::awaitable<void> {
                const auto ex = co_await asio::this_coro::executor;
                psql foreign;
                foreign.run("SELECT pg_advisory_lock(" + k.sql_key + ");", "held");
                { const bool seen_ = static_cast<bool>(co_await foreign.saw("held")); REQUIRE(seen_); }
                patient w{store, k.id, {.ttl = 10s}, patient_retry};
                auto waiter = test::start(ex, w.lock());
                (void)co_await test::eventually("distlock waits in the server", [&] { return waiting(look) == 1; },
                                                test::long_enough());
                const auto killed_at = dl::clock::now();
                foreign.kill(); // its connection closes: the server ends the session and its locks
                { const bool came_ = co_await waiter.wait(5000ms); REQUIRE(came_); }
                CHECK(dl::clock::now() - killed_at < 3s);
                auto& l = waiter.get();
                REQUIRE(l);
                { const auto ok_ = co_await l->unlock(); REQUIRE(ok_); }
                co_await store.close();
            });
        }
    }
}

TEST_CASE("postgres interop: fences rise across distlock grants with psql holders between, and with a psql holder "
          "that takes a fence of its own",
          "[interop][postgres]")
{
    for (const auto& k : key_cases()) {
        DYNAMIC_SECTION(k.name)
        {
            const auto table = test::fresh_table("iop");
            probe look{table};
            asio::io_context io;
            pg::advisory_store store{io, config_for(table, k.function)};
            test::run(io, [&]() -> asio::awaitable<void> {
                once m{store, k.id, {.ttl = 10s}};
                auto first = co_await m.lock();
                REQUIRE(first);
                const auto f1 = first->fence();
                { const auto ok_ = co_await first->unlock(); REQUIRE(ok_); }

                psql foreign;
                foreign.run("SELECT pg_advisory_lock(" + k.sql_key + ");", "held");
                { const bool seen_ = static_cast<bool>(co_await foreign.saw("held")); REQUIRE(seen_); }
                foreign.run("SELECT pg_advisory_unlock(" + k.sql_key + ");", "released");
                { const bool seen_ = static_cast<bool>(co_await foreign.saw("released")); REQUIRE(seen_); }
                auto second = co_await m.lock();
                REQUIRE(second);
                const auto f2 = second->fence();
                CHECK(f2 > f1);
                { const auto ok_ = co_await second->unlock(); REQUIRE(ok_); }

                // A foreign holder that takes the next fence from distlock's row while it
                // holds the key (docs/postgres.md): the next distlock grant's is above it,
                // and distlock's fenced writes with f2 are refused from then on.
                foreign.run("SELECT pg_advisory_lock(" + k.sql_key + ");", "held");
                { const bool seen_ = static_cast<bool>(co_await foreign.saw("held")); REQUIRE(seen_); }
                foreign.run("INSERT INTO \"" + table + "\" AS f (resource, fence) VALUES (convert_to('" + k.id +
                                "', 'UTF8'), 1) ON CONFLICT (resource) DO UPDATE SET fence = f.fence + 1 RETURNING "
                                "f.fence;",
                            "fenced");
                auto foreign_fence = co_await foreign.saw("fenced");
                REQUIRE(foreign_fence);
                const auto ff = std::stoull(*foreign_fence);
                CHECK(ff > f2);
                auto stale = look.query("SELECT " + look.store().fence_condition(1, 2),
                                        {pg::param::bytes(k.id), pg::param::number(static_cast<long long>(f2))});
                CHECK(stale.text(0, 0) == "f");
                foreign.run("SELECT pg_advisory_unlock(" + k.sql_key + ");", "released");
                { const bool seen_ = static_cast<bool>(co_await foreign.saw("released")); REQUIRE(seen_); }
                auto third = co_await m.lock();
                REQUIRE(third);
                CHECK(third->fence() > ff);
                { const auto ok_ = co_await third->unlock(); REQUIRE(ok_); }
                co_await store.close();
            });
        }
    }
}

TEST_CASE("postgres interop: the server's queue serves psql and distlock waiters in the order they came",
          "[interop][postgres]")
{
    for (const auto& k : key_cases()) {
        DYNAMIC_SECTION(k.name)
        {
            const auto table = test::fresh_table("iop");
            probe look{table};
            asio::io_context io;
            pg::advisory_store a{io, config_for(table, k.function)}, b{io, config_for(table, k.function)};
            test::run(io, [&]() -> asio::awaitable<void> {
                const auto ex = co_await asio::this_coro::executor;
                once holder{a, k.id, {.ttl = 10s}};
                patient w{b, k.id, {.ttl = 10s}, patient_retry};

                // distlock holds; psql queues first, a distlock waiter second.
                auto held = co_await holder.lock();
                REQUIRE(held);
                psql foreign;
                const int pid = co_await foreign.backend_pid();
                foreign.run("SELECT pg_advisory_lock(" + k.sql_key + ");", "held");
                (void)co_await test::eventually("psql waits", [&] { return requests_of(look, pid, false) == 1; },
                                                test::long_enough());
                auto second = test::start(ex, w.lock());
                (void)co_await test::eventually("distlock waits behind it", [&] { return waiting(look) == 2; },
                                                test::long_enough());
                { const auto ok_ = co_await held->unlock(); REQUIRE(ok_); }
                { const bool seen_ = static_cast<bool>(co_await foreign.saw("held", 5s)); CHECK(seen_); }
                CHECK_FALSE(second.ready());
                foreign.run("SELECT pg_advisory_unlock(" + k.sql_key + ");", "released");
                { const bool seen_ = static_cast<bool>(co_await foreign.saw("released")); REQUIRE(seen_); }
                { const bool came_ = co_await second.wait(5000ms); REQUIRE(came_); }
                auto& s = second.get();
                REQUIRE(s);

                // distlock holds; a distlock waiter queues first, psql second.
                auto first = test::start(ex, w.lock());
                (void)co_await test::eventually("distlock waits", [&] { return waiting(look) == 1; },
                                                test::long_enough());
                foreign.run("SELECT pg_advisory_lock(" + k.sql_key + ");", "held");
                (void)co_await test::eventually("psql waits behind it",
                                                [&] { return requests_of(look, pid, false) == 1; },
                                                test::long_enough());
                { const auto ok_ = co_await s->unlock(); REQUIRE(ok_); }
                { const bool came_ = co_await first.wait(5000ms); REQUIRE(came_); }
                auto& f = first.get();
                REQUIRE(f);
                { const bool seen_ = static_cast<bool>(co_await foreign.saw("held", 200ms)); CHECK_FALSE(seen_); }
                { const auto ok_ = co_await f->unlock(); REQUIRE(ok_); }
                { const bool seen_ = static_cast<bool>(co_await foreign.saw("held", 5s)); CHECK(seen_); }
                co_await a.close();
                co_await b.close();
            });
        }
    }
}

TEST_CASE("postgres interop: shared locks: a psql reader and a distlock reader share the key, a distlock writer "
          "waits for both",
          "[interop][postgres]")
{
    for (const auto& k : key_cases()) {
        DYNAMIC_SECTION(k.name)
        {
            const auto table = test::fresh_table("iop");
            probe look{table};
            asio::io_context io;
            pg::advisory_store a{io, config_for(table, k.function)}, b{io, config_for(table, k.function)};
            test::run(io, [&]() -> asio::awaitable<void> {
                const auto ex = co_await asio::this_coro::executor;
                using shared_once = dl::basic_distributed_shared_mutex<pg::advisory_store, dl::retry::none>;
                using shared_patient = dl::basic_distributed_shared_mutex<pg::advisory_store, dl::retry::fixed>;
                shared_once reader{a, k.id, {.ttl = 10s}};
                shared_patient writer{b, k.id, {.ttl = 10s}, patient_retry};

                psql foreign;
                foreign.run("SELECT pg_advisory_lock_shared(" + k.sql_key + ");", "shared");
                { const bool seen_ = static_cast<bool>(co_await foreign.saw("shared")); REQUIRE(seen_); }
                auto r = co_await reader.lock_shared();
                REQUIRE(r);
                auto refused = co_await writer.try_lock();
                REQUIRE_FALSE(refused);
                CHECK(refused.error() == dl::condition::contended);
                auto writing = test::start(ex, writer.lock());
                (void)co_await test::eventually("the writer waits", [&] { return waiting(look) == 1; },
                                                test::long_enough());
                { const auto ok_ = co_await r->unlock(); REQUIRE(ok_); }
                co_await test::settle(200ms);
                CHECK_FALSE(writing.ready()); // psql still shares it
                foreign.run("SELECT pg_advisory_unlock_shared(" + k.sql_key + ");", "released");
                { const bool seen_ = static_cast<bool>(co_await foreign.saw("released")); REQUIRE(seen_); }
                { const bool came_ = co_await writing.wait(5000ms); REQUIRE(came_); }
                auto& w = writing.get();
                REQUIRE(w);
                CHECK(w->fence() > r->fence());
                // The writer holds: psql's shared try is refused.
                foreign.run("SELECT pg_try_advisory_lock_shared(" + k.sql_key + ");", "tried");
                auto tried = co_await foreign.saw("tried");
                REQUIRE(tried);
                CHECK(*tried == "f");
                { const auto ok_ = co_await w->unlock(); REQUIRE(ok_); }
                co_await a.close();
                co_await b.close();
            });
        }
    }
}

TEST_CASE("postgres interop: the forms that do not conflict: hashtext's key is the sign-extended int4 in the bigint "
          "space, and the two-int4 space is apart from it",
          "[interop][postgres]")
{
    const auto table = test::fresh_table("iop");
    probe look{table};
    asio::io_context io;
    pg::advisory_store big{io, config_for(table, pg::advisory_key_function::bigint)},
        pair{io, config_for(table, pg::advisory_key_function::int4pair)},
        hashed{io, config_for(table, pg::advisory_key_function::hashtext)};
    test::run(io, [&]() -> asio::awaitable<void> {
        const std::string name = "interop:space:" + test::unique_suffix();
        auto h = look.query("SELECT hashtext($1::text)::bigint", {pg::param::text(name)}).integer(0, 0);
        REQUIRE(h);
        // The hashtext holder and the bigint holder of the same (sign-extended) key exclude each other.
        once by_name{hashed, name, {.ttl = 10s}};
        once by_number{big, std::to_string(*h), {.ttl = 10s}};
        auto l = co_await by_name.lock();
        REQUIRE(l);
        auto same = co_await by_number.try_lock();
        REQUIRE_FALSE(same);
        CHECK(same.error() == dl::condition::contended);
        // The bigint key (1 << 32) + 2 is locktag (1, 2, objsubid 1); the pair (1, 2) is
        // objsubid 2: another lock.
        once as_bigint{big, "4294967298", {.ttl = 10s}};
        once as_pair{pair, "1,2", {.ttl = 10s}};
        auto lb = co_await as_bigint.lock();
        REQUIRE(lb);
        auto lp = co_await as_pair.try_lock();
        REQUIRE(lp);
        CHECK(look.query("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted AND classid = 1 AND "
                         "objid = 2")
                  .integer(0, 0) == 2);
        for (auto* lease : {&*l, &*lb, &*lp}) {
            const auto ok_ = co_await lease->unlock();
            REQUIRE(ok_);
        }
        co_await big.close();
        co_await pair.close();
        co_await hashed.close();
    });
}
