// The PostgreSQL store, in both modes (lease table, advisory locks), against a
// private cluster the tests start (test/support/postgres_server.hpp), beyond the
// conformance suite: one-statement upserts raced, tables created at once, ids as
// bytes, multi-locks in one statement, fenced SQL writes, pipelining, SQLSTATEs,
// URLs, SCRAM and TLS through libpq, terminated backends, blackholed connections,
// restarts, listings by byte prefix, revocation by fence, shared grants (a lease
// table made before them, permits raced, a writer waiting in the server).
#include "fault/proxy.hpp"
#include "postgres/postgres_support.hpp"

#include <distlock/basic_distributed_semaphore.hpp>
#include <distlock/basic_leader_election.hpp>
#include <distlock/basic_distributed_shared_mutex.hpp>

#include <algorithm>
#include <charconv>
#include <limits>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

using namespace std::chrono_literals;
using namespace test::postgres_tests;

TEST_CASE("postgres: concurrent acquirers racing the upsert: exactly one winner", "[postgres]")
{
    const auto table = test::fresh_table();
    asio::io_context io;
    std::vector<std::unique_ptr<pg::store>> stores;
    for (int i = 0; i < 8; ++i)
        stores.push_back(std::make_unique<pg::store>(io, test::shared_postgres().config(table)));
    test::run(io, [&]() -> asio::awaitable<void> {
        for (int round = 0; round < 5; ++round) {
            std::vector<test::pending<dl::result<dl::lease>>> racers;
            std::vector<std::unique_ptr<dl::basic_distributed_mutex<pg::store, dl::retry::none>>> mutexes;
            for (auto& s : stores) {
                mutexes.push_back(std::make_unique<dl::basic_distributed_mutex<pg::store, dl::retry::none>>(
                    *s, "pg:race", dl::lock_options{.ttl = 10s}));
                racers.push_back(test::start(co_await asio::this_coro::executor, mutexes.back()->lock()));
            }
            std::vector<dl::lease> winners;
            for (auto& r : racers) {
                { const bool came_ = co_await r.wait(); REQUIRE(came_); }
                auto& got = r.get();
                if (got)
                    winners.push_back(std::move(*got));
                else
                    CHECK(got.error() == dl::condition::contended);
            }
            REQUIRE(winners.size() == 1);
            { const auto ok_ = co_await winners.front().unlock(); REQUIRE(ok_); }
        }
        for (auto& s : stores)
            co_await s->close();
    });
}

TEST_CASE("postgres: stores creating one table at once all succeed (IF NOT EXISTS races in the catalog)",
          "[postgres]")
{
    asio::io_context io;
    for (int round = 0; round < 6; ++round) {
        const auto table = test::fresh_table("race");
        std::vector<std::unique_ptr<pg::store>> stores;
        for (int i = 0; i < 6; ++i)
            stores.push_back(std::make_unique<pg::store>(io, test::shared_postgres().config(table)));
        io.restart();
        test::run(io, [&]() -> asio::awaitable<void> {
            // Connected first, so that the six CREATE statements reach the server together.
            for (auto& s : stores) {
                const auto up = co_await s->execute("SELECT 1");
                REQUIRE(up);
            }
            std::vector<test::pending<dl::result<void>>> creating;
            for (auto& s : stores)
                creating.push_back(test::start(co_await asio::this_coro::executor, s->create_table()));
            for (auto& c : creating) {
                { const bool came_ = co_await c.wait(); REQUIRE(came_); }
                const bool made = c.get().has_value();
                INFO((made ? std::string{} : c.get().error().message()));
                CHECK(made);
            }
            for (auto& s : stores)
                co_await s->close();
        });
    }
}

TEST_CASE("postgres: ids are bytes: binary, long and SQL-injection-shaped ids are stored verbatim", "[postgres][input]")
{
    const auto table = test::fresh_table();
    probe look{table};
    asio::io_context io;
    pg::store store{io, test::shared_postgres().config(table)};
    const std::vector<std::string> ids{"x'); DROP TABLE " + table + "; --", "\"; SELECT pg_sleep(10); --",
                                       std::string{"\0\x01\xff'\\x00", 8}, std::string(dl::max_resource_size, '\''),
                                       "$1 $2 ::bytea"};
    test::run(io, [&]() -> asio::awaitable<void> {
        for (const auto& id : ids) {
            dl::basic_distributed_mutex<pg::store, dl::retry::none> m{store, id, {.ttl = 10s}};
            auto l = co_await m.lock();
            REQUIRE(l);
            CHECK(look.lease_held(id));
            { const auto ok_ = co_await l->unlock(); REQUIRE(ok_); }
        }
        co_await store.close();
    });
    auto rows = look.query("SELECT resource FROM " + look.table() + " ORDER BY resource");
    REQUIRE(rows.count() == static_cast<int>(ids.size()));
    for (const auto& id : ids) {
        auto one = look.query("SELECT fence FROM " + look.table() + " WHERE resource = $1", {pg::param::bytes(id)});
        CHECK(one.count() == 1);
        CHECK(one.integer(0, 0) == 1);
    }
}

TEST_CASE("postgres: multi-locks are one statement, sorted, all or nothing", "[postgres]")
{
    const auto table = test::fresh_table();
    probe look{table};
    asio::io_context io;
    pg::store a{io, test::shared_postgres().config(table)}, b{io, test::shared_postgres().config(table)};
    test::run(io, [&]() -> asio::awaitable<void> {
        const dl::lock_options opts{.ttl = 10s};
        const dl::retry::none once;
        auto first = co_await dl::lock_all(a, dl::resources("pg:m2", "pg:m1"), opts, once);
        REQUIRE(first);
        CHECK(first->resources() == std::vector<std::string>{"pg:m1", "pg:m2"});
        // m3 is free but m2 is held: nothing is taken (m3's row, if the statement
        // inserted it, was rolled back with it).
        auto second = co_await dl::lock_all(b, dl::resources("pg:m3", "pg:m2"), opts, once);
        REQUIRE_FALSE(second);
        CHECK(second.error() == dl::condition::contended);
        CHECK_FALSE(look.lease_held("pg:m3"));
        CHECK(look.query("SELECT count(*) FROM " + look.table() + " WHERE resource = $1",
                         {pg::param::bytes("pg:m3")})
                  .integer(0, 0) == 0);
        const auto m2_before = first->fence("pg:m2");
        REQUIRE(m2_before);
        { const auto ok_ = co_await first->unlock(); REQUIRE(ok_); }
        auto third = co_await dl::lock_all(b, dl::resources("pg:m3", "pg:m2"), opts, once);
        REQUIRE(third);
        const auto m2_after = third->fence("pg:m2");
        REQUIRE(m2_after);
        CHECK(*m2_after > *m2_before);
        CHECK(third->fence("pg:m3") == 1);
        { const auto ok_ = co_await third->unlock(); REQUIRE(ok_); }
        // The store's batch primitive itself: duplicates are refused before any I/O.
        const std::vector<std::string> twice{"pg:d", "pg:d"};
        auto dup = co_await a.put_if_absent_all(twice, dl::owner_token::generate(), 10s);
        REQUIRE_FALSE(dup);
        CHECK(dup.error() == dl::condition::invalid_argument);
        auto dup_release = co_await a.release_all(twice, dl::owner_token::generate());
        REQUIRE_FALSE(dup_release);
        CHECK(dup_release.error() == dl::condition::invalid_argument);
        // Its batch release: what the owner holds goes, in one statement; another
        // owner's row and an absent one are answered false and left as they were.
        const auto owner = dl::owner_token::generate();
        const auto other = dl::owner_token::generate();
        const auto mine = dl::resources("pg:r1", "pg:r2");
        { const auto ok_ = co_await a.put_if_absent_all(mine, owner, 10s); REQUIRE(ok_); }
        { const auto ok_ = co_await a.put_if_absent("pg:theirs", other, 10s); REQUIRE(ok_); }
        const auto asked = dl::resources("pg:r2", "pg:theirs", "pg:absent", "pg:r1");
        auto answers = co_await a.release_all(asked, owner);
        REQUIRE(answers);
        CHECK(answers.value() == std::vector<bool>{true, false, false, true});
        CHECK_FALSE(look.lease_held("pg:r1"));
        CHECK_FALSE(look.lease_held("pg:r2"));
        CHECK(look.lease_held("pg:theirs"));
        co_await a.close();
        co_await b.close();
    });
}

TEST_CASE("postgres: fenced SQL writes: a stale holder's UPDATE changes nothing", "[postgres]")
{
    const auto table = test::fresh_table();
    probe look{table};
    look.query("CREATE TABLE " + table + "_wallet (id int PRIMARY KEY, balance bigint NOT NULL)");
    look.query("INSERT INTO " + table + "_wallet VALUES (1, 100)");
    asio::io_context io;
    pg::store a{io, test::shared_postgres().config(table)}, b{io, test::shared_postgres().config(table)};
    const std::string update = "UPDATE " + table + "_wallet SET balance = balance + $1 WHERE id = $2 AND ";
    test::run(io, [&]() -> asio::awaitable<void> {
        dl::basic_distributed_mutex<pg::store, dl::retry::none> ma{a, "pg:wallet", {.ttl = 10s}};
        dl::basic_distributed_mutex<pg::store, dl::retry::none> mb{b, "pg:wallet", {.ttl = 10s}};
        auto stale = co_await ma.lock();
        REQUIRE(stale);
        const auto add = [](std::int64_t amount) {
            return std::vector<pg::param>{pg::param::number(amount), pg::param::number(1)};
        };
        auto wrote = co_await a.fenced_execute("pg:wallet", stale->fence(), update + a.fence_condition(3, 4), add(10));
        REQUIRE(wrote);
        CHECK(wrote.value() == 1);
        look.expire_lease("pg:wallet"); // the holder stalls past its TTL...
        auto fresh = co_await mb.lock(); // ...and another takes the lock
        REQUIRE(fresh);
        CHECK(fresh->fence() > stale->fence());
        dl::diagnostics diag;
        auto refused =
            co_await a.fenced_execute("pg:wallet", stale->fence(), update + a.fence_condition(3, 4), add(1000), &diag);
        REQUIRE_FALSE(refused);
        CHECK(refused.error() == dl::errc::stale_fence);
        auto accepted = co_await b.fenced_execute("pg:wallet", fresh->fence(), update + b.fence_condition(3, 4), add(5));
        REQUIRE(accepted);
        { const auto ok_ = co_await fresh->unlock(); REQUIRE(ok_); }
        co_await a.close();
        co_await b.close();
    });
    CHECK(look.query("SELECT balance FROM " + table + "_wallet WHERE id = 1").integer(0, 0) == 115);
}

TEST_CASE("postgres: the patterns of docs/fencing.md: a fence column and a fence table refuse a stale token",
          "[postgres][fencing]")
{
    const auto table = test::fresh_table();
    probe look{table};
    const auto wallet = table + "_wallet", fences = table + "_fences", lines = table + "_lines";
    look.query("CREATE TABLE " + wallet + " (id int PRIMARY KEY, balance bigint NOT NULL, fence bigint NOT NULL "
               "DEFAULT 0)");
    look.query("INSERT INTO " + wallet + " (id, balance) VALUES (3, 100)");
    look.query("CREATE TABLE " + fences + " (resource text PRIMARY KEY, token bigint NOT NULL)");
    look.query("CREATE TABLE " + lines + " (id int PRIMARY KEY, qty int NOT NULL)");
    look.query("INSERT INTO " + lines + " VALUES (1, 0)");
    asio::io_context io;
    pg::store db{io, test::shared_postgres().config(table)};
    test::run(io, [&]() -> asio::awaitable<void> {
        // The fence column: one UPDATE, the WHERE clause is the check.
        const auto column = "UPDATE " + wallet + " SET balance = $1, fence = $2 WHERE id = $3 AND fence <= $2";
        const auto set = [&](std::int64_t balance, std::int64_t token) -> asio::awaitable<std::uint64_t> {
            auto r = co_await db.execute(column, pg::params(pg::param::number(balance), pg::param::number(token),
                                                            pg::param::number(3)));
            co_return r ? r->affected() : 99;
        };
        { const auto n_ = co_await set(90, 7); CHECK(n_ == 1); }  // holder 7
        { const auto n_ = co_await set(80, 7); CHECK(n_ == 1); }  // the same holder again
        { const auto n_ = co_await set(70, 9); CHECK(n_ == 1); }  // the next holder, 9
        { const auto n_ = co_await set(10, 7); CHECK(n_ == 0); }  // 7 wakes up late: refused
        // The fence table: the upsert's WHERE refuses an older token, in the writes' transaction.
        const auto claim = "INSERT INTO " + fences + " (resource, token) VALUES ($1, $2) ON CONFLICT (resource) DO "
                           "UPDATE SET token = EXCLUDED.token WHERE " + fences + ".token <= EXCLUDED.token RETURNING token";
        const auto write = [&](std::int64_t token, std::int64_t qty) -> asio::awaitable<std::size_t> {
            // One statement here (a CTE); in a transaction on a connection of your own, the same
            // upsert first, then the writes, then COMMIT.
            auto r = co_await db.execute("WITH f AS (" + claim + ") UPDATE " + lines + " SET qty = $3 WHERE id = 1 AND "
                                         "EXISTS (SELECT 1 FROM f)",
                                         pg::params(pg::param::text("order:5"), pg::param::number(token),
                                                    pg::param::number(qty)));
            co_return r ? r->affected() : 99;
        };
        { const auto n_ = co_await write(3, 1); CHECK(n_ == 1); }  // the first token makes the row
        { const auto n_ = co_await write(4, 2); CHECK(n_ == 1); }
        { const auto n_ = co_await write(3, 9); CHECK(n_ == 0); }  // stale
        co_await db.close();
    });
    CHECK(look.query("SELECT balance FROM " + wallet + " WHERE id = 3").integer(0, 0) == 70);
    CHECK(look.query("SELECT qty FROM " + lines + " WHERE id = 1").integer(0, 0) == 2);
    CHECK(look.query("SELECT token FROM " + fences + " WHERE resource = 'order:5'").integer(0, 0) == 4);
}

TEST_CASE("postgres: 64 coroutines pipelined on one connection: nothing lost, no result matched to another request",
          "[postgres]")
{
    const auto table = test::fresh_table();
    probe look{table};
    asio::io_context io;
    auto cfg = test::shared_postgres().config(table);
    cfg.pool_size = 1;
    pg::store store{io, cfg};
    constexpr int n = 64;
    test::run(io, [&]() -> asio::awaitable<void> {
        // Each resource locked a different number of times: its fence says how often.
        std::vector<test::pending<dl::result<void>>> work;
        for (int i = 0; i < n; ++i)
            // Parameters, not captures: the coroutine outlives the lambda object.
            work.push_back(test::start(co_await asio::this_coro::executor, [](pg::store& store, int i) -> asio::awaitable<dl::result<void>> {
                const auto id = "pg:pipe:" + std::to_string(i);
                dl::basic_distributed_mutex<pg::store, dl::retry::none> m{store, id, {.ttl = 10s}};
                for (int k = 0; k <= i % 4; ++k) {
                    auto l = co_await m.lock();
                    if (!l)
                        co_return l.error();
                    if (l->fence() != static_cast<dl::fence_token>(k + 1))
                        co_return make_error_code(dl::errc::protocol_error);
                    auto info = co_await store.read(id);
                    if (!info || !info->held || info->owner != l->owner().to_hex().substr(0, 8))
                        co_return make_error_code(dl::errc::protocol_error);
                    if (auto r = co_await l->unlock(); !r)
                        co_return r.error();
                }
                co_return dl::success();
            }(store, i)));
        for (auto& w : work) {
            { const bool came_ = co_await w.wait(); REQUIRE(came_); }
            CHECK(w.get());
        }
        co_await store.close();
    });
    for (int i = 0; i < n; ++i) {
        auto r = look.query("SELECT fence FROM " + look.table() + " WHERE resource = $1",
                            {pg::param::bytes("pg:pipe:" + std::to_string(i))});
        CHECK(r.integer(0, 0) == i % 4 + 1);
    }
}

TEST_CASE("postgres: SQLSTATEs map to conditions, with the server's words", "[postgres][input]")
{
    CHECK(pg::sqlstate("40001") == dl::condition::maybe_applied);
    CHECK(pg::sqlstate("40P01") == dl::condition::maybe_applied);
    CHECK(pg::sqlstate("57P01") == dl::condition::maybe_applied);
    CHECK(pg::sqlstate("57014") == dl::condition::maybe_applied);
    CHECK(pg::sqlstate("55P03") == dl::condition::contended);
    CHECK(pg::sqlstate("42601") == dl::condition::invalid_argument);
    CHECK(pg::sqlstate("42501") == dl::condition::denied);
    CHECK(pg::sqlstate("28P01") == dl::condition::denied);
    CHECK(pg::sqlstate("53300") == dl::condition::not_applied);
    CHECK(pg::sqlstate("4000") == dl::errc::protocol_error);
    CHECK(pg::sqlstate("40001").message() == "SQLSTATE 40001 (serialization_failure)");
    CHECK(pg::unpack_sqlstate(*pg::pack_sqlstate("2BP01")) == "2BP01");

    const auto table = test::fresh_table();
    asio::io_context io;
    auto cfg = test::shared_postgres().config(table);
    cfg.statement_timeout = 200ms;
    pg::store store{io, cfg};
    test::run(io, [&]() -> asio::awaitable<void> {
        dl::diagnostics diag;
        const std::vector<pg::param> none;
        auto syntax = co_await store.execute("SELEC 1", none, &diag);
        REQUIRE_FALSE(syntax);
        CHECK(syntax.error() == pg::sqlstate("42601"));
        CHECK(syntax.error() == dl::condition::invalid_argument);
        CHECK(diag.server_message().find("syntax error") != std::string_view::npos);
        auto slow = co_await store.execute("SELECT pg_sleep(5)", none, &diag);
        REQUIRE_FALSE(slow);
        CHECK(slow.error() == pg::sqlstate("57014")); // statement_timeout
        CHECK(slow.error() == dl::condition::maybe_applied);
        // A statement with a NUL byte would run cut short: refused before any I/O.
        const std::string cut_short{"SELECT 1; \0DROP TABLE x", 23};
        auto cut = co_await store.execute(cut_short, none);
        REQUIRE_FALSE(cut);
        CHECK(cut.error() == dl::errc::invalid_argument);
        // The connection is still usable after both.
        // The parameters built inside the co_await (no braced list on g++ 12).
        auto fine = co_await store.execute("SELECT $1::int + $2::int", pg::params(pg::param::number(41), pg::param::text("1")));
        REQUIRE(fine);
        CHECK(fine->integer(0, 0) == 42);
        co_await store.close();
    });
}

TEST_CASE("postgres: URLs and connection strings are checked before any I/O; a bad one is named", "[postgres][input]")
{
    auto c = pg::config::from_url("postgres://locker@127.0.0.1:5433/app?sslmode=disable&table=locks&pool=4");
    REQUIRE(c);
    CHECK(c->table == "locks");
    CHECK(c->pool_size == 4);
    CHECK(c->conninfo == "postgres://locker@127.0.0.1:5433/app?sslmode=disable");
    auto n = pg::config::from_url("postgresql://127.0.0.1/app?advisory_namespace=-7");
    REQUIRE(n);
    CHECK(n->advisory_namespace == -7);
    for (const auto* bad : {"redis://x", "postgres://h/db?table=bad name", "postgres://h/db?table=a;b",
                            "postgres://h/db?pool=0", "postgres://h/db?pool=x", "postgres://h/db?nosuchoption=1",
                            "postgres://h/db?advisory_namespace=99999999999", "postgres://h/db?table"}) {
        INFO(bad);
        auto r = pg::config::from_url(bad);
        REQUIRE_FALSE(r);
        CHECK(r.error() == dl::errc::invalid_argument);
    }
    // What libpq finds wrong in a connection string is named.
    pg::config bad;
    bad.conninfo = "hostaddr=127.0.0.1 nosuchkey=1";
    CHECK(bad.conninfo_problem().find("nosuchkey") != std::string::npos);
    CHECK(pg::valid_identifier("locks.leases", true));
    CHECK_FALSE(pg::valid_identifier("a.b.c", true));
    CHECK_FALSE(pg::valid_identifier(std::string(64, 'a'), false));
}

TEST_CASE("postgres: a server that is not there is store_unavailable, with libpq's words", "[postgres][input]")
{
    asio::io_context io;
    pg::config cfg;
    cfg.conninfo = "hostaddr=127.0.0.1 port=" + std::to_string(test::free_port()) + " user=postgres";
    pg::store store{io, cfg};
    test::run(io, [&]() -> asio::awaitable<void> {
        dl::basic_distributed_mutex<pg::store, dl::retry::none> m{store, "pg:nobody", {.ttl = 10s}};
        dl::diagnostics diag;
        auto l = co_await m.lock(diag);
        REQUIRE_FALSE(l);
        CHECK(l.error() == dl::condition::not_applied);
        CHECK(diag.client_message().find("cannot connect") != std::string_view::npos);
        co_await store.close();
    });
}

TEST_CASE("postgres advisory: a terminated backend is a lost lease at once, and the next holder gets the lock",
          "[postgres][fault]")
{
    const auto table = test::fresh_table("adv");
    probe look{table};
    asio::io_context io;
    pg::advisory_store a{io, test::shared_postgres().config(table)}, b{io, test::shared_postgres().config(table)};
    test::run(io, [&]() -> asio::awaitable<void> {
        dl::basic_distributed_mutex<pg::advisory_store, dl::retry::none> ma{a, "pg:adv", {.ttl = 10s}};
        auto held = co_await ma.lock();
        REQUIRE(held);
        REQUIRE(look.advisory_held("pg:adv"));
        REQUIRE(a.session_backends().size() == 1);
        look.query("SELECT pg_terminate_backend($1)", {pg::param::number(a.session_backends().front())});
        const auto ended = co_await held->lost();
        CHECK(ended == dl::errc::lease_lost);
        CHECK_FALSE(held->valid());
        dl::basic_distributed_mutex<pg::advisory_store, dl::retry::none> mb{b, "pg:adv", {.ttl = 10s}};
        auto next = co_await mb.lock();
        REQUIRE(next);
        CHECK(next->fence() > held->fence());
        auto stale = co_await held->unlock();
        CHECK_FALSE(stale);
        { const auto ok_ = co_await next->unlock(); REQUIRE(ok_); }
        co_await a.close();
        co_await b.close();
    });
}

TEST_CASE("postgres advisory: a blackholed connection is in doubt, then lost; the server frees the lock",
          "[postgres][fault]")
{
    const auto table = test::fresh_table("adv");
    probe look{table};
    fault::proxy net{test::shared_postgres().port()};
    asio::io_context io;
    pg::advisory_store a{io, test::shared_postgres().config(table, net.port())};
    test::run(io, [&]() -> asio::awaitable<void> {
        test::recorder rec;
        dl::basic_distributed_mutex<pg::advisory_store, dl::observe::callback, dl::retry::none> ma{
            a, "pg:blackhole", {.ttl = 10s}, rec.observer()};
        auto held = co_await ma.lock();
        REQUIRE(held);
        net.set(fault::direction::to_server, {.blackhole = true});
        net.set(fault::direction::to_client, {.blackhole = true});
        const auto ended = co_await held->lost();
        CHECK(ended == dl::errc::lease_lost);
        net.set(fault::direction::to_server, {});
        net.set(fault::direction::to_client, {});
        co_await a.close();
    });
    // The client dropped the connection: the server ends the session and its lock.
    test::run(look.io(), [&]() -> asio::awaitable<void> {
        (void)co_await test::eventually("!advisory_held", [&] { return !look.advisory_held("pg:blackhole"); },
                                        test::long_enough());
    });
}

TEST_CASE("postgres: a server restart: table leases survive it, advisory leases are lost", "[postgres][fault]")
{
    const auto table = test::fresh_table();
    asio::io_context io;
    pg::store leases{io, test::shared_postgres().config(table)};
    pg::advisory_store sessions{io, test::shared_postgres().config(table)};
    test::run(io, [&]() -> asio::awaitable<void> {
        dl::basic_distributed_mutex<pg::store> ml{leases, "pg:restart:lease", {.ttl = 20s}};
        dl::basic_distributed_mutex<pg::advisory_store> ma{sessions, "pg:restart:adv", {.ttl = 20s}};
        auto lease = co_await ml.lock();
        REQUIRE(lease);
        auto adv = co_await ma.lock();
        REQUIRE(adv);
        test::shared_postgres().restart();
        const auto ended = co_await adv->lost();
        CHECK(ended == dl::errc::lease_lost);
        // The row is still there: the holder releases it after the pool reconnects.
        CHECK(lease->valid());
        auto released = co_await lease->unlock();
        CHECK(released);
        auto again = co_await ml.lock();
        REQUIRE(again);
        CHECK(again->fence() == lease->fence() + 1);
        { const auto ok_ = co_await again->unlock(); REQUIRE(ok_); }
        co_await leases.close();
        co_await sessions.close();
    });
}

TEST_CASE("postgres advisory: the two-int32 key space keeps a namespace apart", "[postgres]")
{
    const auto table = test::fresh_table("adv");
    probe look{table};
    asio::io_context io;
    auto spaced = test::shared_postgres().config(table);
    spaced.advisory_namespace = 4242;
    pg::advisory_store a{io, spaced}, plain{io, test::shared_postgres().config(table)};
    test::run(io, [&]() -> asio::awaitable<void> {
        dl::basic_distributed_mutex<pg::advisory_store, dl::retry::none> ma{a, "pg:ns", {.ttl = 10s}};
        dl::basic_distributed_mutex<pg::advisory_store, dl::retry::none> mp{plain, "pg:ns", {.ttl = 10s}};
        auto l = co_await ma.lock();
        REQUIRE(l);
        auto in_ns = look.query("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted AND "
                                "classid = 4242 AND objsubid = 2");
        CHECK(in_ns.integer(0, 0) == 1);
        // The same resource in the 64-bit space is another lock (its fence row is shared).
        auto other = co_await mp.lock();
        REQUIRE(other);
        CHECK(other->fence() > l->fence());
        { const auto ok_ = co_await other->unlock(); REQUIRE(ok_); }
        { const auto ok_ = co_await l->unlock(); REQUIRE(ok_); }
        co_await a.close();
        co_await plain.close();
    });
}

TEST_CASE("postgres: SCRAM passwords through libpq; a wrong one is auth_failed, a missing privilege is denied",
          "[postgres][input]")
{
    const auto table = test::fresh_table();
    probe look{table};
    look.query("DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'locker') THEN "
               "CREATE ROLE locker LOGIN PASSWORD 'correct horse'; END IF; END $$");
    const auto as_locker = [&](const std::string& password) {
        auto cfg = test::shared_postgres().config(table);
        cfg.conninfo = "hostaddr=127.0.0.1 port=" + std::to_string(test::shared_postgres().port()) +
                       " user=locker dbname=postgres sslmode=disable password='" + password + "'";
        return cfg;
    };
    asio::io_context io;
    pg::store wrong{io, as_locker("battery staple")}, right{io, as_locker("correct horse")};
    test::run(io, [&]() -> asio::awaitable<void> {
        dl::diagnostics diag;
        dl::basic_distributed_mutex<pg::store, dl::retry::none> refused{wrong, "pg:auth", {.ttl = 10s}};
        auto no = co_await refused.lock(diag);
        REQUIRE_FALSE(no);
        CHECK(no.error() == dl::errc::auth_failed);
        CHECK(no.error() == dl::condition::denied);
        CHECK(diag.client_message().find("password authentication failed") != std::string_view::npos);
        // Logged in, but PostgreSQL 15 gives others no CREATE on the public schema:
        // the table cannot be made, which is said, not retried.
        dl::basic_distributed_mutex<pg::store> denied{right, "pg:auth", {.ttl = 10s}};
        auto cannot = co_await denied.lock(diag);
        REQUIRE_FALSE(cannot);
        CHECK(cannot.error() == pg::sqlstate("42501"));
        CHECK(cannot.error() == dl::condition::denied);
        CHECK(diag.server_message().find("permission denied") != std::string_view::npos);
        co_await wrong.close();
        co_await right.close();
    });
    // With the table made and the role granted what it needs, the password works.
    look.query("CREATE TABLE IF NOT EXISTS \"" + table + "\" (resource bytea PRIMARY KEY, owner text, "
               "expires_at timestamptz, fence bigint NOT NULL DEFAULT 0)");
    look.query("GRANT SELECT, INSERT, UPDATE ON \"" + table + "\" TO locker");
    auto cfg = as_locker("correct horse");
    cfg.create_table = false;
    pg::store granted{io, cfg};
    io.restart();
    test::run(io, [&]() -> asio::awaitable<void> {
        dl::basic_distributed_mutex<pg::store, dl::retry::none> m{granted, "pg:auth", {.ttl = 10s}};
        dl::diagnostics diag;
        auto l = co_await m.lock(diag);
        INFO(diag.to_string());
        REQUIRE(l);
        { const auto ok_ = co_await l->unlock(); REQUIRE(ok_); }
        co_await granted.close();
    });
}

TEST_CASE("postgres: refused credentials and a missing database are said at once, not retried to the deadline",
          "[postgres][input]")
{
    // The server runs with trust authentication: any role that exists may log in, so
    // a role that does not is refused with SQLSTATE 28000 and nothing else is wrong.
    const auto table = test::fresh_table();
    const auto as = [&](const std::string& user, const std::string& db) {
        auto cfg = test::shared_postgres().config(table);
        cfg.conninfo = "hostaddr=127.0.0.1 port=" + std::to_string(test::shared_postgres().port()) + " user=" +
                       user + " dbname=" + db + " sslmode=disable";
        return cfg;
    };
    asio::io_context io;
    pg::store ghost{io, as("ghost", "postgres")}, nowhere{io, as("postgres", "no_such_database")};
    test::run(io, [&]() -> asio::awaitable<void> {
        // With the default retry policy and a deadline: a refusal that were retried
        // would end in errc::timeout when the deadline passes.
        dl::basic_distributed_mutex<pg::store> as_ghost{ghost, "pg:ghost", {.ttl = 10s}};
        dl::diagnostics diag;
        auto no = co_await as_ghost.lock_until(dl::clock::now() + 20s, diag);
        REQUIRE_FALSE(no);
        CHECK(no.error() == dl::errc::auth_failed);
        CHECK(no.error() == dl::condition::denied);
        INFO(diag.to_string());
        CHECK(diag.to_string().find("28000") != std::string::npos);
        CHECK(diag.to_string().find("ghost") != std::string::npos);
        CHECK(diag.to_string().find("LOCATION") == std::string::npos);

        dl::basic_distributed_mutex<pg::store> in_nowhere{nowhere, "pg:nowhere", {.ttl = 10s}};
        auto none = co_await in_nowhere.lock_until(dl::clock::now() + 20s, diag);
        REQUIRE_FALSE(none);
        CHECK(none.error() == pg::sqlstate("3D000"));
        CHECK(none.error() == dl::condition::invalid_argument);
        INFO(diag.to_string());
        CHECK(diag.to_string().find("no_such_database") != std::string::npos);
        co_await ghost.close();
        co_await nowhere.close();
    });
}

TEST_CASE("postgres: a server that does not answer the connect is store_unavailable within connect_timeout",
          "[postgres][fault]")
{
    fault::proxy net{test::shared_postgres().port()};
    net.set(fault::direction::to_client, {.blackhole = true});
    asio::io_context io;
    auto cfg = test::shared_postgres().config(test::fresh_table(), net.port());
    cfg.connect_timeout = 300ms;
    pg::store store{io, cfg};
    test::run(io, [&]() -> asio::awaitable<void> {
        dl::basic_distributed_mutex<pg::store, dl::retry::none> m{store, "pg:silent", {.ttl = 10s}};
        dl::diagnostics diag;
        auto l = co_await m.lock(diag);
        REQUIRE_FALSE(l);
        CHECK(l.error() == dl::condition::not_applied);
        CHECK(diag.client_message().find("timed out") != std::string_view::npos);
        net.set(fault::direction::to_client, {});
        co_await store.close();
    });
}

TEST_CASE("postgres advisory: a kept connection whose backend was terminated is replaced, not reused",
          "[postgres][fault]")
{
    const auto table = test::fresh_table("adv");
    probe look{table};
    asio::io_context io;
    pg::advisory_store store{io, test::shared_postgres().config(table)};
    test::run(io, [&]() -> asio::awaitable<void> {
        dl::basic_distributed_mutex<pg::advisory_store, dl::retry::fixed> m{
            store, "pg:reuse", {.ttl = 10s}, dl::retry::fixed{.delay = 10ms, .deadline = 10s}};
        auto first = co_await m.lock();
        REQUIRE(first);
        { const auto ok_ = co_await first->unlock(); REQUIRE(ok_); } // its connection is kept for reuse
        REQUIRE(store.session_backends().size() == 1);
        // Terminated while idle, and the next lock() comes at once, before or after
        // the client has seen it go.
        look.query("SELECT pg_terminate_backend($1)", {pg::param::number(store.session_backends().front())});
        auto second = co_await m.lock();
        REQUIRE(second);
        CHECK(second->fence() > first->fence());
        CHECK(second->valid());
        CHECK(look.advisory_held("pg:reuse"));
        { const auto ok_ = co_await second->unlock(); REQUIRE(ok_); }
        co_await store.close();
    });
}

TEST_CASE("postgres: TLS through libpq: the non-blocking connect runs the handshake, the certificate is verified",
          "[postgres][input]")
{
    const auto table = test::fresh_table();
    asio::io_context io;
    const auto tls = [&](const std::string& ssl) {
        auto cfg = test::shared_postgres().config(table);
        cfg.conninfo = "hostaddr=127.0.0.1 port=" + std::to_string(test::shared_postgres().port()) +
                       " user=postgres dbname=postgres " + ssl;
        return cfg;
    };
    pg::store verified{io, tls("sslmode=verify-ca sslrootcert=" + test::shared_postgres().certificate())};
    pg::store unknown_ca{io, tls("sslmode=verify-ca sslrootcert=/dev/null")};
    test::run(io, [&]() -> asio::awaitable<void> {
        dl::basic_distributed_mutex<pg::store, dl::retry::none> m{verified, "pg:tls", {.ttl = 10s}};
        dl::diagnostics diag;
        auto l = co_await m.lock(diag);
        INFO(diag.to_string());
        REQUIRE(l);
        const std::vector<pg::param> none;
        auto ssl = co_await verified.execute("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()", none);
        REQUIRE(ssl);
        CHECK(ssl->integer(0, 0) == 1);
        { const auto ok_ = co_await l->unlock(); REQUIRE(ok_); }
        dl::basic_distributed_mutex<pg::store, dl::retry::none> n{unknown_ca, "pg:tls", {.ttl = 10s}};
        auto refused = co_await n.lock(diag);
        REQUIRE_FALSE(refused);
        CHECK(refused.error() == dl::condition::not_applied);
        CHECK_FALSE(diag.client_message().empty());
        co_await verified.close();
        co_await unknown_ca.close();
    });
}

namespace {

// The ids a listing names, in its order.
std::vector<std::string> ids_of(const std::vector<dl::lock_listing>& listing)
{
    std::vector<std::string> out;
    for (const auto& l : listing)
        out.push_back(l.resource);
    return out;
}

// Rows of text cells (nullopt: NULL), standing in for libpq's result where a decoder
// is given answers no server sends.
struct text_rows {
    std::vector<std::vector<std::optional<std::string>>> cells;

    int count() const { return static_cast<int>(cells.size()); }
    // libpq's rows are all as wide as the result: the first row's width stands for it.
    int columns() const { return cells.empty() ? 0 : static_cast<int>(cells.front().size()); }
    bool null(int row, int col) const
    {
        return row >= count() || col >= static_cast<int>(cells[row].size()) || !cells[row][col];
    }
    std::string_view text(int row, int col) const { return null(row, col) ? std::string_view{} : *cells[row][col]; }
    std::optional<std::int64_t> integer(int row, int col) const
    {
        const auto t = text(row, col);
        std::int64_t v = 0;
        const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
        if (t.empty() || ec != std::errc{} || end != t.data() + t.size())
            return std::nullopt;
        return v;
    }
    std::uint64_t affected() const { return 0; }
};
static_assert(pg::detail::answers::table<text_rows>);

} // namespace

TEST_CASE("postgres: list() compares ids as bytes: % and _ match only themselves, NUL and 0xff sort by value, a "
          "prefix of 0xff bytes runs to the end of the key space",
          "[postgres][input]")
{
    CHECK(pg::detail::prefix_end("ab") == std::optional<std::string>{"ac"});
    CHECK(pg::detail::prefix_end("a\xff\xff") == std::optional<std::string>{"b"});
    CHECK(pg::detail::prefix_end(std::string{"a\0", 2}) == std::optional<std::string>{std::string{"a\x01", 2}});
    CHECK_FALSE(pg::detail::prefix_end("\xff\xff"));
    CHECK_FALSE(pg::detail::prefix_end(""));

    const auto table = test::fresh_table();
    probe look{table};
    asio::io_context io;
    pg::store store{io, test::shared_postgres().config(table)}, other{io, test::shared_postgres().config(table)};
    const std::string ff{"\xff"}, nul{"\0", 1};
    std::vector<std::string> ids{"p%", "p_x", "pa", "pb", "p" + ff, "p" + ff + nul, "p" + ff + ff, ff + ff, nul, "q"};
    test::run(io, [&]() -> asio::awaitable<void> {
        std::vector<dl::lease> held;
        for (const auto& id : ids) {
            dl::basic_distributed_mutex<pg::store, dl::retry::none> m{store, id, {.ttl = 30s}};
            auto l = co_await m.lock();
            REQUIRE(l);
            held.push_back(std::move(*l));
        }
        const auto expect = [](std::initializer_list<std::string> l) { return std::vector<std::string>{l}; };

        auto percent = co_await other.list("p%");
        REQUIRE(percent);
        CHECK(ids_of(*percent) == expect({"p%"}));
        auto underscore = co_await other.list("p_");
        REQUIRE(underscore);
        CHECK(ids_of(*underscore) == expect({"p_x"}));
        auto high = co_await other.list("p" + ff);
        REQUIRE(high);
        CHECK(ids_of(*high) == expect({"p" + ff, "p" + ff + nul, "p" + ff + ff}));
        auto top = co_await other.list(ff);
        REQUIRE(top);
        CHECK(ids_of(*top) == expect({ff + ff}));
        auto bottom = co_await other.list(nul);
        REQUIRE(bottom);
        CHECK(ids_of(*bottom) == expect({nul}));

        auto all = co_await other.list("");
        REQUIRE(all);
        auto sorted = ids;
        std::sort(sorted.begin(), sorted.end());
        CHECK(ids_of(*all) == sorted);
        for (const auto& l : *all) {
            INFO(pg::detail::hex(l.resource));
            const auto lease = std::find_if(held.begin(), held.end(), [&](const auto& h) { return h.resource() == l.resource; });
            REQUIRE(lease != held.end());
            CHECK(l.lock.held);
            CHECK(l.lock.owner == lease->owner().to_hex().substr(0, 8));
            CHECK(l.lock.fence == lease->fence());
            REQUIRE(l.lock.remaining);
            CHECK(*l.lock.remaining > dl::duration::zero());
            CHECK(*l.lock.remaining <= dl::duration{30s});
            CHECK_FALSE(l.lock.version);
            CHECK_FALSE(l.waiters);
        }

        // Released and expired leases keep their rows, and are not listed.
        { const auto ok_ = co_await held[0].unlock(); CHECK(ok_); }
        look.expire_lease("pa");
        auto after = co_await other.list("p");
        REQUIRE(after);
        CHECK(ids_of(*after) == expect({"p_x", "pb", "p" + ff, "p" + ff + nul, "p" + ff + ff}));
        CHECK(look.query("SELECT count(*) FROM " + look.table()).integer(0, 0) == static_cast<std::int64_t>(ids.size()));
        for (auto& l : held)
            (void)co_await l.unlock();
        co_await store.close();
        co_await other.close();
    });
}

TEST_CASE("postgres: revoke() is checked on the fence and on the lease being live, keeps the fence, wakes waiters "
          "by NOTIFY, and the holder's next extension fails",
          "[postgres]")
{
    const auto table = test::fresh_table();
    probe look{table};
    asio::io_context io;
    pg::store holder{io, test::shared_postgres().config(table)}, operator_store{io, test::shared_postgres().config(table)},
        waiter{io, test::shared_postgres().config(table)};
    const auto fence_row = [&] {
        return look.query("SELECT fence FROM " + look.table() + " WHERE resource = $1", {pg::param::bytes("pg:revoke")})
            .integer(0, 0);
    };
    const auto owned_rows = [&] {
        return look
            .query("SELECT count(*) FROM " + look.table() + " WHERE resource = $1 AND owner IS NOT NULL",
                   {pg::param::bytes("pg:revoke")})
            .integer(0, 0);
    };
    test::run(io, [&]() -> asio::awaitable<void> {
        dl::basic_distributed_mutex<pg::store, dl::retry::none> first{holder, "pg:revoke", {.ttl = 30s}};
        auto expired = co_await first.lock();
        REQUIRE(expired);
        // An expired lease is free by the server's clock: nothing to revoke, the row untouched.
        look.expire_lease("pg:revoke");
        auto late = co_await operator_store.revoke("pg:revoke", expired->fence());
        REQUIRE_FALSE(late);
        CHECK(late.error() == dl::condition::not_owner);
        CHECK(owned_rows() == 1);

        dl::basic_distributed_mutex<pg::store, dl::retry::none> second{holder, "pg:revoke", {.ttl = 30s}};
        auto held = co_await second.lock();
        REQUIRE(held);
        REQUIRE(held->fence() == expired->fence() + 1);
        // Fences no grant carries, and an id never locked, are refused alike.
        const std::vector<dl::fence_token> wrong_fences{0, held->fence() - 1, held->fence() + 1,
                                                        std::numeric_limits<dl::fence_token>::max()};
        for (const auto wrong : wrong_fences) {
            auto refused = co_await operator_store.revoke("pg:revoke", wrong);
            REQUIRE_FALSE(refused);
            CHECK(refused.error() == dl::condition::not_owner);
        }
        auto never = co_await operator_store.revoke("pg:revoke-never", 1);
        REQUIRE_FALSE(never);
        CHECK(never.error() == dl::condition::not_owner);
        CHECK(owned_rows() == 1);

        auto listening = co_await waiter.watch("pg:revoke");
        auto revoked = co_await operator_store.revoke("pg:revoke", held->fence());
        REQUIRE(revoked);
        const auto woken = co_await listening.wait(dl::clock::now() + 10s);
        CHECK(woken);
        CHECK(owned_rows() == 0);
        CHECK(fence_row() == static_cast<std::int64_t>(held->fence()));
        auto extended = co_await holder.extend("pg:revoke", held->owner(), 30s);
        REQUIRE_FALSE(extended);
        CHECK(extended.error() == dl::condition::not_owner);

        dl::basic_distributed_mutex<pg::store, dl::retry::none> next{waiter, "pg:revoke", {.ttl = 30s}};
        auto taken = co_await next.lock();
        REQUIRE(taken);
        CHECK(taken->fence() == held->fence() + 1);
        { const auto ok_ = co_await taken->unlock(); CHECK(ok_); }
        co_await holder.close();
        co_await operator_store.close();
        co_await waiter.close();
    });
}

TEST_CASE("postgres answers: list's rows decode in id order; any other shape is a protocol error", "[postgres][input]")
{
    namespace answers = pg::detail::answers;
    const std::nullopt_t null_cell = std::nullopt;
    const auto good = answers::listed(text_rows{{{"7061", "abcdef0123456789", "3", "1500"},
                                                 {"70ff00", "0123", "9", "1"}}});
    REQUIRE(good);
    REQUIRE(good->size() == 2);
    CHECK((*good)[0].resource == "pa");
    CHECK((*good)[0].lock.owner == "abcdef01");
    CHECK((*good)[0].lock.fence == 3);
    CHECK((*good)[0].lock.remaining == dl::duration{1500ms});
    CHECK((*good)[1].resource == std::string{"p\xff\0", 3});
    CHECK((*good)[1].lock.owner == "0123");
    CHECK(answers::listed(text_rows{})->empty());

    const std::vector<std::vector<std::optional<std::string>>> bad_rows{
        {"706", "ab", "1", "5"},        // odd hex
        {"70FF", "ab", "1", "5"},       // not as encode() writes it
        {"zz", "ab", "1", "5"},         // not hex
        {null_cell, "ab", "1", "5"},    // no id
        {"", "ab", "1", "5"},           // an empty id
        {"70", null_cell, "1", "5"},    // no owner
        {"70", "ab", "0", "5"},         // fence 0
        {"70", "ab", null_cell, "5"},   // no fence
        {"70", "ab", "1", "0"},         // no time left
        {"70", "ab", "1", null_cell}};  // not live
    const auto refused = [](const dl::result<std::vector<dl::lock_listing>>& r) {
        return !r && r.error() == dl::errc::protocol_error;
    };
    for (const auto& row : bad_rows) {
        INFO(row[0].value_or("NULL") << " " << row[1].value_or("NULL") << " " << row[2].value_or("NULL") << " "
                                     << row[3].value_or("NULL"));
        CHECK(refused(answers::listed(text_rows{{row}})));
    }
    // Out of order, and twice.
    CHECK(refused(answers::listed(text_rows{{{"71", "ab", "1", "5"}, {"70", "ab", "1", "5"}}})));
    CHECK(refused(answers::listed(text_rows{{{"70", "ab", "1", "5"}, {"70", "cd", "2", "5"}}})));
}

TEST_CASE("postgres answers: shared grants' rows decode; any other shape is a protocol error", "[postgres][input]")
{
    namespace answers = pg::detail::answers;
    const std::nullopt_t null_cell = std::nullopt;
    const auto at = dl::clock::now();
    const auto reader = answers::shared_acquired(text_rows{{{"7", null_cell, null_cell, null_cell}}}, at, 0);
    REQUIRE(reader);
    CHECK(reader->is_granted());
    CHECK(reader->fence() == 7);
    CHECK_FALSE(reader->slot());
    const auto permit = answers::shared_acquired(text_rows{{{"8", "2", null_cell, null_cell}}}, at, 3);
    REQUIRE(permit);
    CHECK(permit->slot() == std::optional<std::uint32_t>{2});
    const auto held = answers::shared_acquired(text_rows{{{null_cell, null_cell, "1500", null_cell}}}, at, 0);
    REQUIRE(held);
    CHECK_FALSE(held->is_granted());
    CHECK(held->not_before() == std::optional<dl::time_point>{at + 1500ms});
    const auto waits = answers::shared_acquired(text_rows{{{null_cell, null_cell, null_cell, null_cell}}}, at, 0);
    REQUIRE(waits);
    CHECK_FALSE(waits->not_before());
    std::optional<std::int64_t> held_with;
    const auto other = answers::shared_acquired(text_rows{{{null_cell, null_cell, null_cell, "3"}}}, at, 2, &held_with);
    REQUIRE_FALSE(other);
    CHECK(other.error() == dl::errc::invalid_argument);
    CHECK(held_with == std::optional<std::int64_t>{3});
    CHECK(answers::count_refusal(3, 2, false).find("semaphore of 3 permits, not as one of 2") != std::string::npos);

    const std::vector<std::pair<std::vector<std::optional<std::string>>, std::uint32_t>> bad{
        {{"0", null_cell, null_cell, null_cell}, 0},        // fence 0
        {{"x", null_cell, null_cell, null_cell}, 0},        // not a number
        {{"7", "0", null_cell, null_cell}, 0},              // a reader with a slot
        {{"7", null_cell, null_cell, null_cell}, 3},        // a permit without one
        {{"7", "3", null_cell, null_cell}, 3},              // a slot out of range
        {{"7", "-1", null_cell, null_cell}, 3},             // a negative slot
        {{null_cell, null_cell, "soon", null_cell}, 0},     // time left not a number
        {{null_cell, null_cell, null_cell, "2"}, 2},        // refused for the count asked
        {{null_cell, null_cell, null_cell, "-1"}, 2}};      // a negative count
    for (const auto& [row, permits] : bad) {
        const auto r = answers::shared_acquired(text_rows{{row}}, at, permits);
        CHECK((!r && r.error() == dl::errc::protocol_error));
    }
    CHECK_FALSE(answers::shared_acquired(text_rows{}, at, 0));
    CHECK_FALSE(answers::shared_acquired(text_rows{{{"1", null_cell, null_cell, null_cell}, {"2", null_cell, null_cell, null_cell}}}, at, 0));

    // The holders table is named after the lease table, never cut back to its name.
    CHECK(pg::detail::holders_table("locks") == "locks_holders");
    CHECK(pg::detail::holders_table("app.locks") == "app.locks_holders");
    const std::string long_a(63, 'a'), long_b = std::string(62, 'a') + "b";
    const auto ha = pg::detail::holders_table(long_a), hb = pg::detail::holders_table(long_b);
    CHECK(ha.size() == 63);
    CHECK(ha != long_a);
    CHECK(ha != hb);
}

TEST_CASE("postgres: a lease table made by an earlier version works unchanged; the holders table is made beside it",
          "[postgres]")
{
    const auto table = test::fresh_table("old");
    probe look{table};
    // The lease table as the versions before shared grants made it, with a fence in use.
    look.query("CREATE TABLE \"" + table + "\" (resource bytea PRIMARY KEY CHECK (octet_length(resource) BETWEEN 1 "
               "AND 1024), owner text, expires_at timestamptz, fence bigint NOT NULL DEFAULT 0)");
    look.query("INSERT INTO \"" + table + "\" (resource, fence) VALUES ('old:rw', 41)");
    const auto columns = [&](const std::string& name) {
        return std::string{look.query("SELECT string_agg(column_name::text, ',' ORDER BY ordinal_position) FROM "
                                      "information_schema.columns WHERE table_name = $1",
                                      {pg::param::text(name)})
                               .text(0, 0)};
    };
    const auto before = columns(table);
    asio::io_context io;
    pg::store store{io, test::shared_postgres().config(table)};
    test::run(io, [&]() -> asio::awaitable<void> {
        dl::basic_distributed_mutex<pg::store, dl::retry::none> m{store, "old:rw", {.ttl = 10s}};
        auto l = co_await m.lock();
        REQUIRE(l);
        CHECK(l->fence() == 42);
        { const auto ok_ = co_await l->unlock(); REQUIRE(ok_); }
        dl::basic_distributed_shared_mutex<pg::store, dl::retry::none> rw{store, "old:rw", {.ttl = 10s}};
        auto r = co_await rw.lock_shared();
        REQUIRE(r);
        CHECK(r->fence() == 43);
        auto w = co_await rw.try_lock();
        REQUIRE_FALSE(w);
        { const auto ok_ = co_await r->unlock(); REQUIRE(ok_); }
        auto again = co_await m.lock();
        REQUIRE(again);
        CHECK(again->fence() > 43);
        // The election's and the lock-delay's columns were added to it: its holder proclaims.
        { const auto ok_ = co_await store.proclaim("old:rw", again->owner(), again->fence(), "v"); CHECK(ok_); }
        auto led = co_await store.leader("old:rw");
        REQUIRE(led);
        CHECK(led->value == std::optional<std::string>{"v"});
        { const auto ok_ = co_await again->unlock(); REQUIRE(ok_); }
        // Made twice (a store that starts again): nothing changes.
        const auto made = co_await store.create_table();
        REQUIRE(made);
        co_await store.close();
    });
    CHECK(columns(table) == before + ",value,value_fence,delay_ms,delay_fence");
    CHECK(columns(pg::detail::holders_table(table)) == "resource,owner,mode,slot,permits,expires_at");
}

TEST_CASE("postgres: permits raced by many stores, in both modes: N holders with distinct slots, the rest refused",
          "[postgres]")
{
    const auto table = test::fresh_table("sem");
    asio::io_context io;
    const auto race = [&]<class Store>(std::type_identity<Store>, const std::string& resource) {
        std::vector<std::unique_ptr<Store>> stores;
        for (int i = 0; i < 8; ++i)
            stores.push_back(std::make_unique<Store>(io, test::shared_postgres().config(table)));
        io.restart();
        test::run(io, [&]() -> asio::awaitable<void> {
            using semaphore = dl::basic_distributed_semaphore<Store, dl::retry::none>;
            std::vector<std::unique_ptr<semaphore>> sems;
            std::vector<test::pending<dl::result<dl::lease>>> racers;
            for (auto& s : stores) {
                sems.push_back(std::make_unique<semaphore>(*s, resource,
                                                           dl::semaphore_options{.permits = 3, .lease = {.ttl = 10s}}));
                racers.push_back(test::start(co_await asio::this_coro::executor, sems.back()->try_acquire()));
            }
            std::vector<dl::lease> held;
            for (auto& r : racers) {
                { const bool came_ = co_await r.wait(); REQUIRE(came_); }
                auto& got = r.get();
                if (got)
                    held.push_back(std::move(*got));
                else
                    CHECK(got.error() == dl::condition::contended);
            }
            REQUIRE(held.size() == 3);
            std::set<std::uint32_t> slots;
            std::set<dl::fence_token> fences;
            for (const auto& p : held) {
                slots.insert(p.slot().value_or(99));
                fences.insert(p.fence());
            }
            CHECK(slots == std::set<std::uint32_t>{0, 1, 2});
            CHECK(fences.size() == 3);
            for (auto& p : held) {
                const auto ok_ = co_await p.unlock();
                CHECK(ok_);
            }
            for (auto& s : stores)
                co_await s->close();
        });
    };
    race(std::type_identity<pg::store>{}, "sem:table");
    race(std::type_identity<pg::advisory_store>{}, "sem:advisory");
}

TEST_CASE("postgres advisory: a writer waiting in the server keeps new readers out; a downgrade goes before it",
          "[postgres]")
{
    const auto table = test::fresh_table("adv");
    probe look{table};
    asio::io_context io;
    pg::advisory_store a{io, test::shared_postgres().config(table)}, b{io, test::shared_postgres().config(table)},
        c{io, test::shared_postgres().config(table)};
    const std::string resource = "adv:rw";
    // Requests on the resource's key in the server's queue, granted or not, in one mode.
    const auto queued = [&](const char* mode, bool granted) {
        return look
            .query("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 1 AND mode = $2 AND "
                   "granted = $3 AND ((classid::bigint << 32) | objid::bigint) = " +
                       probe::advisory_key(),
                   {pg::param::bytes(resource), pg::param::text(mode), pg::param::text(granted ? "t" : "f")})
            .integer(0, 0)
            .value_or(-1);
    };
    test::run(io, [&]() -> asio::awaitable<void> {
        const auto ex = co_await asio::this_coro::executor;
        // Waits in the server that outlast the test: nothing leaves the queue and comes back.
        const dl::retry::fixed patient{.delay = 30s, .deadline = 60s};
        using once = dl::basic_distributed_shared_mutex<pg::advisory_store, dl::retry::none>;
        using waiting = dl::basic_distributed_shared_mutex<pg::advisory_store, dl::retry::fixed>;
        once ra{a, resource, {.ttl = 10s}}, rc{c, resource, {.ttl = 10s}};
        waiting wb{b, resource, {.ttl = 10s}, patient}, wa{a, resource, {.ttl = 10s}, patient},
            rcw{c, resource, {.ttl = 10s}, patient};

        auto reader = co_await ra.lock_shared();
        REQUIRE(reader);
        auto writing = test::start(ex, wb.lock());
        (void)co_await test::eventually("a writer waits in the server",
                                        [&] { return queued("ExclusiveLock", false) == 1; });
        // A reader's try is refused, though only a reader holds.
        auto kept_out = co_await rc.try_lock_shared();
        REQUIRE_FALSE(kept_out);
        CHECK(kept_out.error() == dl::condition::contended);
        // A reader that waits queues behind the writer.
        auto reading = test::start(ex, rcw.lock_shared());
        (void)co_await test::eventually("a reader waits behind it", [&] { return queued("ShareLock", false) == 1; });
        CHECK(queued("ShareLock", true) == 1);
        { const auto ok_ = co_await reader->unlock(); REQUIRE(ok_); }
        { const bool came_ = co_await writing.wait(10000ms); REQUIRE(came_); }
        auto& w = writing.get();
        REQUIRE(w);
        CHECK(w->fence() > reader->fence());
        CHECK_FALSE(reading.ready());

        // Another writer queues behind the reader; the holder downgrades at once, ahead
        // of both (its own session holds the lock), and the queue is served in order:
        // the reader that came first, then the writer.
        auto second = test::start(ex, wa.lock());
        (void)co_await test::eventually("a second writer waits", [&] { return queued("ExclusiveLock", false) == 1; });
        const auto t0 = dl::clock::now();
        auto down = co_await wb.downgrade(*w);
        REQUIRE(down);
        CHECK(dl::clock::now() - t0 < 1s);
        CHECK(w->shared());
        CHECK(w->valid());
        { const bool came_ = co_await reading.wait(10000ms); REQUIRE(came_); }
        auto& r = reading.get();
        REQUIRE(r);
        CHECK(r->fence() > w->fence());
        CHECK(queued("ShareLock", true) == 2);
        CHECK(queued("ExclusiveLock", true) == 0);
        // The second writer still waits: new readers are still kept out.
        auto late = co_await rc.try_lock_shared();
        CHECK_FALSE(late);
        CHECK_FALSE(second.ready());
        { const auto ok_ = co_await w->unlock(); REQUIRE(ok_); }
        { const auto ok_ = co_await r->unlock(); REQUIRE(ok_); }
        { const bool came_ = co_await second.wait(10000ms); REQUIRE(came_); }
        auto& s = second.get();
        REQUIRE(s);
        CHECK(s->fence() > r->fence());
        { const auto ok_ = co_await s->unlock(); REQUIRE(ok_); }
        co_await a.close();
        co_await b.close();
        co_await c.close();
    });
}

TEST_CASE("postgres advisory keys: advisory_key in settings and URLs; a bad value or a namespace beside a foreign key "
          "function is refused, named",
          "[postgres][input]")
{
    CHECK(pg::config{}.advisory_key == pg::advisory_key_function::sha256);
    for (const auto f : {pg::advisory_key_function::sha256, pg::advisory_key_function::hashtext,
                         pg::advisory_key_function::bigint, pg::advisory_key_function::int4pair}) {
        const auto url = "postgres://127.0.0.1/app?advisory_key=" + std::string{pg::advisory_key_name(f)};
        INFO(url);
        auto c = pg::config::from_url(url);
        REQUIRE(c);
        CHECK(c->advisory_key == f);
        CHECK(c->conninfo == "postgres://127.0.0.1/app");
    }
    std::string why;
    auto bad = pg::config::from_url("postgres://127.0.0.1/app?advisory_key=md5", &why);
    REQUIRE_FALSE(bad);
    CHECK(bad.error() == dl::errc::invalid_argument);
    CHECK(why.find("advisory_key 'md5'") != std::string::npos);
    CHECK(why.find("sha256, hashtext, bigint or int4pair") != std::string::npos);
    why.clear();
    auto both = pg::config::from_url("postgres://127.0.0.1/app?advisory_key=bigint&advisory_namespace=3", &why);
    REQUIRE_FALSE(both);
    CHECK(why.find("advisory_namespace goes with advisory_key=sha256 only") != std::string::npos);
    CHECK(pg::config::from_url("postgres://127.0.0.1/app?advisory_key=sha256&advisory_namespace=3"));
    pg::config c;
    c.advisory_key = pg::advisory_key_function::hashtext;
    CHECK_FALSE(c.validate());
    c.advisory_namespace = 1;
    CHECK(c.validate() == dl::errc::invalid_argument);
    CHECK(c.problem().find("advisory_namespace") != std::string::npos);
}

TEST_CASE("postgres advisory keys: which ids name a key under each function, written one way only", "[postgres][input]")
{
    using pg::advisory_key_function;
    using pg::detail::advisory_key_numbers;
    using numbers = std::vector<std::int64_t>;
    // bigint: canonical decimal signed 64-bit integers only.
    CHECK(advisory_key_numbers(advisory_key_function::bigint, "42") == numbers{42});
    CHECK(advisory_key_numbers(advisory_key_function::bigint, "0") == numbers{0});
    CHECK(advisory_key_numbers(advisory_key_function::bigint, "-9223372036854775808") ==
          numbers{std::numeric_limits<std::int64_t>::min()});
    CHECK(advisory_key_numbers(advisory_key_function::bigint, "9223372036854775807") ==
          numbers{std::numeric_limits<std::int64_t>::max()});
    for (const char* bad : {"", "-", "+1", "01", "-0", "-01", " 1", "1 ", "1.0", "1e3", "0x10", "9223372036854775808",
                            "-9223372036854775809", "99999999999999999999", "1,2", "abc"}) {
        INFO(bad);
        CHECK_FALSE(advisory_key_numbers(advisory_key_function::bigint, bad));
    }
    // int4pair: two canonical decimal signed 32-bit integers and one comma.
    CHECK(advisory_key_numbers(advisory_key_function::int4pair, "12,34") == numbers{12, 34});
    CHECK(advisory_key_numbers(advisory_key_function::int4pair, "-2147483648,2147483647") ==
          numbers{-2147483648LL, 2147483647LL});
    for (const char* bad : {"", ",", "1,", ",1", "1, 2", "1,2,3", "2147483648,0", "0,-2147483649", "01,2", "1,+2",
                            "12"}) {
        INFO(bad);
        CHECK_FALSE(advisory_key_numbers(advisory_key_function::int4pair, bad));
    }
    // hashtext: UTF-8 text without NUL; the server computes the key.
    CHECK(advisory_key_numbers(advisory_key_function::hashtext, "orders:42") == numbers{});
    CHECK(advisory_key_numbers(advisory_key_function::hashtext, "caf\xc3\xa9 \xf0\x9f\x94\x92") == numbers{});
    for (const std::string& bad : {std::string{"a\0b", 3}, std::string{"\xff"}, std::string{"\xc0\xaf"},
                                  std::string{"\xed\xa0\x80"}, std::string{"\xf4\x90\x80\x80"}, std::string{"\xe2\x82"}}) {
        INFO(pg::detail::hex(bad));
        CHECK_FALSE(advisory_key_numbers(advisory_key_function::hashtext, bad));
    }
    // sha256: any id.
    CHECK(advisory_key_numbers(advisory_key_function::sha256, std::string{"\0\xff", 2}) == numbers{});

    // The words of a refusal say what an id must be; a semaphore is refused under
    // every foreign key function, whatever the id.
    using pg::detail::advisory_key_problem;
    CHECK(advisory_key_problem(advisory_key_function::bigint, "42", 0).empty());
    CHECK(advisory_key_problem(advisory_key_function::bigint, "+42", 0).find("decimal signed 64-bit integer") !=
          std::string::npos);
    CHECK(advisory_key_problem(advisory_key_function::int4pair, "1;2", 0).find("two decimal signed 32-bit") !=
          std::string::npos);
    CHECK(advisory_key_problem(advisory_key_function::hashtext, "\xff", 0).find("UTF-8") != std::string::npos);
    for (const auto f : {advisory_key_function::hashtext, advisory_key_function::bigint,
                         advisory_key_function::int4pair})
        CHECK(advisory_key_problem(f, f == advisory_key_function::int4pair ? "1,2" : "42", 3).find(
                  "semaphores are not supported") != std::string::npos);
    CHECK(advisory_key_problem(advisory_key_function::sha256, "anything", 3).empty());
}

TEST_CASE("postgres advisory keys: the statements lock the key a foreign client locks", "[postgres][input]")
{
    using pg::advisory_key_function;
    const pg::detail::sql_texts hashed{"t", "c", false, advisory_key_function::hashtext};
    CHECK(hashed.advisory_try.find("pg_try_advisory_lock(hashtext(convert_from($1, 'UTF8'))::bigint)") !=
          std::string::npos);
    CHECK(hashed.advisory_wait_shared.find("pg_advisory_lock_shared(hashtext(convert_from($1, 'UTF8'))::bigint)") !=
          std::string::npos);
    CHECK(hashed.advisory_unlock.find("SELECT pg_advisory_unlock(hashtext(convert_from($1, 'UTF8'))::bigint)") !=
          std::string::npos);
    const pg::detail::sql_texts big{"t", "c", false, advisory_key_function::bigint};
    CHECK(big.advisory_wait.find("pg_advisory_lock($2::bigint)") != std::string::npos);
    CHECK(big.advisory_unlock.find("SELECT pg_advisory_unlock($2::bigint)") != std::string::npos);
    // pg_locks names the key by its lock tag: the bigint's halves with objsubid 1, the
    // pair's two int4 with objsubid 2 (the record's holder is found there).
    CHECK(big.advisory_leader.find("k.classid::bigint = (($2::bigint) >> 32) & 4294967295 AND k.objid::bigint = "
                                   "($2::bigint) & 4294967295 AND k.objsubid = 1") != std::string::npos);
    const pg::detail::sql_texts pair{"t", "c", false, advisory_key_function::int4pair};
    CHECK(pair.advisory_try_shared.find("pg_try_advisory_lock_shared($2::int, $3::int)") != std::string::npos);
    CHECK(pair.advisory_unlock_shared == "SELECT pg_advisory_unlock_shared($2::int, $3::int) WHERE $1::bytea IS NOT "
                                         "NULL");
    CHECK(pair.advisory_downgrade.find("pg_advisory_lock_shared($2::int, $3::int)") != std::string::npos);
    CHECK(pair.advisory_leader.find("k.classid::bigint = ($2::int)::bigint & 4294967295 AND k.objid::bigint = "
                                    "($3::int)::bigint & 4294967295 AND k.objsubid = 2") != std::string::npos);
    // A candidate's owner and value are the parameters after the key's; a plain grant
    // takes none.
    CHECK(pair.advisory_try_recording.find("$4::text, value = $5::bytea") != std::string::npos);
    CHECK(big.advisory_try_recording.find("$3::text, value = $4::bytea") != std::string::npos);
    CHECK(hashed.advisory_try_recording.find("$2::text, value = $3::bytea") != std::string::npos);
    CHECK(pair.advisory_try.find("$4") == std::string::npos);
    CHECK(big.advisory_try.find("$3") == std::string::npos);
    CHECK(hashed.advisory_try.find("$2") == std::string::npos);
    // The fence is the id's row of the lease table, in every function.
    for (const auto* s : {&hashed, &big, &pair}) {
        CHECK(s->advisory_try.find("INSERT INTO \"t\" AS f (resource, fence) SELECT $1, 1") != std::string::npos);
        // No permits: a semaphore is refused before any statement.
        CHECK(s->advisory_permit.empty());
        CHECK(s->advisory_unlock_permit.empty());
    }
    const pg::detail::sql_texts own{"t", "c", false};
    CHECK(own.advisory_try.find("sha256($1)") != std::string::npos);
    CHECK_FALSE(own.advisory_permit.empty());
}

TEST_CASE("postgres advisory keys: an id that names no key, or a semaphore, is refused before any I/O, with why",
          "[postgres][input]")
{
    asio::io_context io;
    // Nothing listens there: any I/O would be store_unavailable.
    const auto nowhere = [](pg::advisory_key_function f) {
        pg::config c;
        c.conninfo = "hostaddr=127.0.0.1 port=" + std::to_string(test::free_port()) + " dbname=postgres";
        c.advisory_key = f;
        return c;
    };
    pg::advisory_store big{io, nowhere(pg::advisory_key_function::bigint)},
        pair{io, nowhere(pg::advisory_key_function::int4pair)}, hashed{io, nowhere(pg::advisory_key_function::hashtext)};
    test::run(io, [&]() -> asio::awaitable<void> {
        const auto refused = [&](auto& primitive, auto op, const char* words) -> asio::awaitable<void> {
            dl::diagnostics diag;
            const auto t0 = dl::clock::now();
            auto r = co_await op(primitive, diag);
            REQUIRE_FALSE(r);
            CHECK(r.error() == dl::errc::invalid_argument);
            CHECK(dl::clock::now() - t0 < 500ms);
            INFO(diag.to_string());
            CHECK(diag.client_message().find(words) != std::string_view::npos);
        };
        const auto lock = [](auto& m, dl::diagnostics& d) { return m.lock(d); };
        dl::basic_distributed_mutex<pg::advisory_store> m1{big, "0042", {.ttl = 10s}};
        co_await refused(m1, lock, "decimal signed 64-bit integer");
        dl::basic_distributed_mutex<pg::advisory_store> m2{pair, "1;2", {.ttl = 10s}};
        co_await refused(m2, lock, "two decimal signed 32-bit integers");
        dl::basic_distributed_mutex<pg::advisory_store> m3{hashed, std::string{"a\0b", 3}, {.ttl = 10s}};
        co_await refused(m3, lock, "UTF-8 text without NUL");
        dl::basic_distributed_shared_mutex<pg::advisory_store> r1{big, "-0", {.ttl = 10s}};
        co_await refused(r1, [](auto& m, dl::diagnostics& d) { return m.lock_shared(d); }, "64-bit");
        const auto acquire = [](auto& s, dl::diagnostics& d) { return s.acquire(d); };
        for (auto* store : {&big, &pair, &hashed}) {
            dl::basic_distributed_semaphore<pg::advisory_store> sem{
                *store, store == &pair ? "1,2" : "42", dl::semaphore_options{.permits = 3, .lease = {.ttl = 10s}}};
            co_await refused(sem, acquire, "semaphores are not supported");
        }
        co_await big.close();
        co_await pair.close();
        co_await hashed.close();
    });
}

TEST_CASE("postgres advisory keys: a fence row a foreign service left unusable is an error with the server's words, "
          "and the key taken in that statement is freed",
          "[postgres][input]")
{
    const auto table = test::fresh_table("adv");
    probe look{table};
    asio::io_context io;
    auto cfg = test::shared_postgres().config(table);
    cfg.advisory_key = pg::advisory_key_function::hashtext;
    pg::advisory_store store{io, cfg};
    const std::string id = "hostile:" + test::unique_suffix();
    const auto key_held = [&] {
        return look
                   .query("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 1 AND "
                          "((classid::bigint << 32) | objid::bigint) = hashtext($1::text)::bigint",
                          {pg::param::text(id)})
                   .integer(0, 0)
                   .value_or(-1) > 0;
    };
    test::run(io, [&]() -> asio::awaitable<void> {
        dl::basic_distributed_mutex<pg::advisory_store, dl::retry::none> m{store, id, {.ttl = 10s}};
        auto first = co_await m.lock();
        REQUIRE(first);
        { const auto ok_ = co_await first->unlock(); REQUIRE(ok_); }
        // A fence that cannot go up: the increment fails the statement after the lock
        // was taken (a session-level advisory lock outlives the failed statement).
        look.query("UPDATE " + look.table() + " SET fence = 9223372036854775807 WHERE resource = $1",
                   {pg::param::bytes(id)});
        dl::diagnostics diag;
        auto full = co_await m.lock(diag);
        REQUIRE_FALSE(full);
        INFO(diag.to_string());
        CHECK(diag.to_string().find("bigint out of range") != std::string::npos);
        (void)co_await test::eventually("the session that took the key is closed", [&] { return !key_held(); },
                                        test::long_enough());
        // A fence that is not a fence (not positive).
        look.query("UPDATE " + look.table() + " SET fence = -5 WHERE resource = $1", {pg::param::bytes(id)});
        auto negative = co_await m.lock();
        REQUIRE_FALSE(negative);
        CHECK(negative.error() == dl::errc::protocol_error);
        (void)co_await test::eventually("and again", [&] { return !key_held(); }, test::long_enough());
        // Repaired, it works again, above the repaired value.
        look.query("UPDATE " + look.table() + " SET fence = 100 WHERE resource = $1", {pg::param::bytes(id)});
        auto again = co_await m.lock();
        REQUIRE(again);
        CHECK(again->fence() == 101);
        { const auto ok_ = co_await again->unlock(); REQUIRE(ok_); }
        co_await store.close();
    });
}

TEST_CASE("postgres answers: leader's row decodes; an earlier grant's value is not the holder's; any other shape is a "
          "protocol error",
          "[postgres][input]")
{
    namespace answers = pg::detail::answers;
    const std::nullopt_t null_cell = std::nullopt;
    const auto free = answers::leader_read(text_rows{});
    REQUIRE(free);
    CHECK(free->epoch == 0);
    CHECK_FALSE(free->value);

    const auto with_value = answers::leader_read(text_rows{{{"abcdef0123456789", "7", "1500", "7", "610062"}}});
    REQUIRE(with_value);
    CHECK(with_value->epoch == 7);
    CHECK(with_value->owner == "abcdef01");
    CHECK(with_value->remaining == std::optional<dl::duration>{1500ms});
    CHECK(with_value->value == std::optional<std::string>{std::string{"a\0b", 3}});
    const auto empty_value = answers::leader_read(text_rows{{{"ab", "7", "5", "7", ""}}});
    REQUIRE(empty_value);
    CHECK(empty_value->value == std::optional<std::string>{""});
    // Never proclaimed, or proclaimed by an earlier grant (whose value the statement
    // leaves out; a reply that sends it anyway is not believed).
    for (const auto& row : std::vector<std::vector<std::optional<std::string>>>{
             {"ab", "7", "5", null_cell, null_cell}, {"ab", "7", "5", "6", null_cell}, {"ab", "7", "5", "6", "6f6c64"}}) {
        const auto pending = answers::leader_read(text_rows{{row}});
        REQUIRE(pending);
        CHECK(pending->epoch == 7);
        CHECK_FALSE(pending->value);
    }

    const std::vector<std::vector<std::optional<std::string>>> bad_rows{
        {null_cell, "7", "5", null_cell, null_cell}, // no owner
        {"", "7", "5", null_cell, null_cell},        // an empty owner
        {"ab", "0", "5", null_cell, null_cell},      // fence 0
        {"ab", "x", "5", null_cell, null_cell},      // a fence that is no number
        {"ab", "7", "0", null_cell, null_cell},      // no time left
        {"ab", "7", null_cell, null_cell, null_cell}, // not live
        {"ab", "7", "5", "8", "61"},                 // a value of a later grant
        {"ab", "7", "5", "0", null_cell},            // a value's fence 0
        {"ab", "7", "5", "seven", "61"},             // a value's fence that is no number
        {"ab", "7", "5", "7", null_cell},            // the grant's fence without a value
        {"ab", "7", "5", "7", "6"},                  // odd hex
        {"ab", "7", "5", "7", "6G"},                 // not hex
        {"ab", "7", "5", "7", std::string(2 * dl::max_leader_value_size + 2, 'a')}}; // too long
    for (const auto& row : bad_rows) {
        INFO(row[0].value_or("NULL") << " " << row[1].value_or("NULL") << " " << row[2].value_or("NULL") << " "
                                     << row[3].value_or("NULL") << " " << row[4].value_or("NULL").substr(0, 16));
        std::string problem;
        const auto r = answers::leader_read(text_rows{{row}}, &problem);
        CHECK((!r && r.error() == dl::errc::protocol_error));
        CHECK(problem.starts_with("PostgreSQL leader answer: "));
    }
    // Two rows for one resource.
    const auto twice = answers::leader_read(text_rows{{{"ab", "7", "5", null_cell, null_cell},
                                                       {"cd", "8", "5", null_cell, null_cell}}});
    CHECK((!twice && twice.error() == dl::errc::protocol_error));
}

TEST_CASE("postgres elections: the value and its grant's fence in the lease row, checked on owner, fence and expiry; "
          "an earlier grant's value is not the next holder's",
          "[postgres]")
{
    const auto table = test::fresh_table("elect");
    probe look{table};
    asio::io_context io;
    pg::store a{io, test::shared_postgres().config(table)};
    pg::store b{io, test::shared_postgres().config(table)};
    test::run(io, [&]() -> asio::awaitable<void> {
        const std::string name{"pg:elect\0x", 10};
        dl::basic_distributed_mutex<pg::store, dl::retry::none> ma{a, name, {.ttl = 10s}};
        dl::basic_distributed_mutex<pg::store, dl::retry::none> mb{b, name, {.ttl = 10s}};
        auto none = co_await b.leader(name);
        REQUIRE(none);
        CHECK(none->epoch == 0);

        auto first = co_await ma.lock();
        REQUIRE(first);
        auto pending = co_await b.leader(name);
        REQUIRE(pending);
        CHECK(pending->epoch == first->fence());
        CHECK(pending->owner == first->owner().to_hex().substr(0, 8));
        CHECK_FALSE(pending->value);

        // Any bytes, NUL included, and the largest value.
        const std::string with_nul{"addr\0:1\xff", 8};
        { const auto ok_ = co_await a.proclaim(name, first->owner(), first->fence(), with_nul); REQUIRE(ok_); }
        auto led = co_await b.leader(name);
        REQUIRE(led);
        CHECK(led->value == std::optional<std::string>{with_nul});
        REQUIRE(led->remaining);
        CHECK(*led->remaining > 5s);
        // What the row holds: the value's bytes and the fence of the grant that wrote it.
        auto row = look.query("SELECT encode(value, 'hex'), value_fence FROM " + look.table() + " WHERE resource = $1",
                              {pg::param::bytes(name)});
        CHECK(row.text(0, 0) == pg::detail::hex(with_nul));
        CHECK(row.integer(0, 1) == std::optional<std::int64_t>{static_cast<std::int64_t>(first->fence())});
        std::string largest(dl::max_leader_value_size, '\0');
        for (std::size_t i = 0; i < largest.size(); ++i)
            largest[i] = static_cast<char>(i * 7);
        { const auto ok_ = co_await a.proclaim(name, first->owner(), first->fence(), largest); REQUIRE(ok_); }
        led = co_await b.leader(name);
        REQUIRE(led);
        CHECK(led->value == std::optional<std::string>{largest});

        // Another owner, another fence: refused, the value untouched.
        const auto stranger = dl::owner_token::generate();
        auto refused = co_await b.proclaim(name, stranger, first->fence(), "x");
        CHECK((!refused && refused.error() == dl::errc::not_owner));
        refused = co_await a.proclaim(name, first->owner(), first->fence() + 1, "x");
        CHECK((!refused && refused.error() == dl::errc::not_owner));
        refused = co_await a.proclaim(name, first->owner(), 0, "x");
        CHECK((!refused && refused.error() == dl::errc::not_owner));

        // The lease runs out by the server's clock: its proclaim is refused, nobody leads.
        look.expire_lease(name);
        refused = co_await a.proclaim(name, first->owner(), first->fence(), "late");
        CHECK((!refused && refused.error() == dl::errc::not_owner));
        auto after = co_await b.leader(name);
        REQUIRE(after);
        CHECK(after->epoch == 0);

        // The next grant is reported without the earlier grant's value (still in the row).
        auto second = co_await mb.lock();
        REQUIRE(second);
        CHECK(second->fence() > first->fence());
        auto next = co_await a.leader(name);
        REQUIRE(next);
        CHECK(next->epoch == second->fence());
        CHECK_FALSE(next->value);
        { const auto ok_ = co_await b.proclaim(name, second->owner(), second->fence(), ""); REQUIRE(ok_); }
        next = co_await a.leader(name);
        REQUIRE(next);
        CHECK(next->value == std::optional<std::string>{""});
        { const auto ok_ = co_await second->unlock(); REQUIRE(ok_); }
        refused = co_await b.proclaim(name, second->owner(), second->fence(), "after");
        CHECK((!refused && refused.error() == dl::errc::not_owner));
        next = co_await a.leader(name);
        REQUIRE(next);
        CHECK(next->epoch == 0);
        co_await a.close();
        co_await b.close();
    });
}

TEST_CASE("postgres elections: a lease table without the election's columns (create_table off) keeps its locks; "
          "proclaim and leader name the missing column",
          "[postgres]")
{
    const auto table = test::fresh_table("old");
    probe look{table};
    look.query("CREATE TABLE \"" + table + "\" (resource bytea PRIMARY KEY CHECK (octet_length(resource) BETWEEN 1 "
               "AND 1024), owner text, expires_at timestamptz, fence bigint NOT NULL DEFAULT 0)");
    auto cfg = test::shared_postgres().config(table);
    cfg.create_table = false;
    asio::io_context io;
    pg::store store{io, cfg};
    test::run(io, [&]() -> asio::awaitable<void> {
        dl::basic_distributed_mutex<pg::store, dl::retry::none> m{store, "old:e", {.ttl = 10s}};
        auto l = co_await m.lock();
        REQUIRE(l);
        dl::diagnostics diag;
        auto said = co_await store.proclaim("old:e", l->owner(), l->fence(), "v", &diag);
        REQUIRE_FALSE(said);
        CHECK(said.error() == dl::condition::invalid_argument);
        CHECK(diag.to_string().find("value") != std::string::npos);
        auto led = co_await store.leader("old:e");
        CHECK((!led && led.error() == dl::condition::invalid_argument));
        { const auto ok_ = co_await l->unlock(); CHECK(ok_); }
        co_await store.close();
    });
}

TEST_CASE("postgres elections: a value too large, a bad id, or an advisory grant through pg::store is refused before "
          "any I/O",
          "[postgres][input]")
{
    const auto table = test::fresh_table("elect");
    asio::io_context io;
    // Nothing listens on the port: any I/O would be store_unavailable.
    auto nowhere = test::shared_postgres().config(table);
    nowhere.conninfo = "hostaddr=127.0.0.1 port=1 user=postgres dbname=postgres sslmode=disable connect_timeout=1";
    pg::store offline{io, nowhere};
    pg::store store{io, test::shared_postgres().config(table)};
    test::run(io, [&]() -> asio::awaitable<void> {
        const auto owner = dl::owner_token::generate();
        auto huge = co_await offline.proclaim("pg:e", owner, 1, std::string(dl::max_leader_value_size + 1, 'x'));
        CHECK((!huge && huge.error() == dl::errc::invalid_argument));
        auto no_id = co_await offline.proclaim("", owner, 1, "x");
        CHECK((!no_id && no_id.error() == dl::errc::invalid_argument));
        auto no_id_read = co_await offline.leader("");
        CHECK((!no_id_read && no_id_read.error() == dl::errc::invalid_argument));
        auto unreachable = co_await offline.leader("pg:e");
        CHECK((!unreachable && unreachable.error() != dl::condition::invalid_argument));

        // An advisory grant taken through pg::store: its session is the lock, and this
        // store's leader() reads the lease table; proclaim says so before any statement
        // (pg::advisory_store elects on advisory locks).
        dl::basic_distributed_mutex<pg::store, pg::advisory, dl::retry::none> m{store, "pg:e-adv", {.ttl = 10s}};
        auto l = co_await m.lock();
        REQUIRE(l);
        dl::diagnostics diag;
        auto adv = co_await store.proclaim("pg:e-adv", l->owner(), l->fence(), "x", &diag);
        CHECK((!adv && adv.error() == dl::errc::invalid_argument));
        CHECK(diag.to_string().find("advisory") != std::string::npos);
        { const auto ok_ = co_await l->unlock(); CHECK(ok_); }
        co_await offline.close();
        co_await store.close();
    });
}

namespace {

// The record of `resource`'s advisory election beside the lease table: (pid, fence,
// owner, value in hex), -1 / "" for NULL; nullopt when there is no row.
struct advisory_record {
    std::int64_t pid, fence;
    std::string owner, value;
};
std::optional<advisory_record> record_of(probe& look, const std::string& table, std::string_view resource)
{
    auto r = look.query("SELECT pid, fence, owner, encode(value, 'hex') FROM " +
                            pg::detail::quoted(pg::detail::advisory_table(table)) + " WHERE resource = $1",
                        {pg::param::bytes(resource)});
    if (r.count() == 0)
        return std::nullopt;
    return advisory_record{r.integer(0, 0).value_or(-1), r.integer(0, 1).value_or(-1), std::string{r.text(0, 2)},
                           std::string{r.text(0, 3)}};
}

// An advisory grant's lock-delay mark in the lease row: (delay_ms, delay_fence, whether
// a tombstone's end is written, that end in microseconds since the epoch as the server
// keeps it), -1 for NULL.
struct advisory_mark {
    std::int64_t delay_ms, delay_fence;
    bool tombstone;
    std::int64_t tombstone_end_us;
};
advisory_mark mark_of(probe& look, std::string_view resource)
{
    auto r = look.query("SELECT delay_ms, delay_fence, expires_at IS NOT NULL, (extract(epoch FROM expires_at) * "
                        "1000000)::bigint FROM " + look.table() + " WHERE resource = $1",
                        {pg::param::bytes(resource)});
    REQUIRE(r.count() == 1);
    return {r.integer(0, 0).value_or(-1), r.integer(0, 1).value_or(-1), r.integer(0, 2).value_or(0) == 1,
            r.integer(0, 3).value_or(-1)};
}

} // namespace

TEST_CASE("postgres advisory elections: a candidate's grant is recorded (pid, fence, owner, value) as it is taken; "
          "proclaim by the holding session only; leader() pairs pg_locks with the record; a holder the record does "
          "not name is pending; plain locks and releases write no record",
          "[postgres][election]")
{
    static_assert(dl::electing_store<pg::advisory_store>);
    const auto table = test::fresh_table("aelect");
    probe look{table};
    asio::io_context io;
    pg::advisory_store store{io, test::shared_postgres().config(table)};
    pg::advisory_store other{io, test::shared_postgres().config(table)};
    auto nowhere = test::shared_postgres().config(table);
    nowhere.conninfo = "hostaddr=127.0.0.1 port=1 user=postgres dbname=postgres sslmode=disable connect_timeout=1";
    nowhere.advisory_key = pg::advisory_key_function::bigint;
    pg::advisory_store offline{io, nowhere};
    const auto adv = pg::detail::quoted(pg::detail::advisory_table(table));
    test::run(io, [&]() -> asio::awaitable<void> {
        // Refused before any I/O: a bad id, an id that names no key, a value too large.
        auto no_id = co_await offline.leader("");
        CHECK((!no_id && no_id.error() == dl::errc::invalid_argument));
        dl::diagnostics why;
        auto no_key = co_await offline.leader("not-a-number", &why);
        CHECK((!no_key && no_key.error() == dl::errc::invalid_argument));
        CHECK_FALSE(why.to_string().empty());
        auto huge = co_await offline.proclaim("42", dl::owner_token::generate(), 1,
                                              std::string(dl::max_leader_value_size + 1, 'x'));
        CHECK((!huge && huge.error() == dl::errc::invalid_argument));

        auto free = co_await store.leader("pa:e");
        REQUIRE(free);
        CHECK(free->epoch == 0);
        // A plain lock writes no record: its holder is pending (the next fence, no
        // value, no owner).
        dl::basic_distributed_mutex<pg::advisory_store, dl::retry::none> m{store, "pa:e", {.ttl = 10s}};
        auto l = co_await m.lock();
        REQUIRE(l);
        REQUIRE(store.session_backends().size() == 1);
        const auto holder_pid = store.session_backends().front();
        CHECK_FALSE(record_of(look, table, "pa:e"));
        auto before = co_await other.leader("pa:e");
        REQUIRE(before);
        CHECK(before->epoch == l->fence() + 1);
        CHECK(before->owner.empty());
        CHECK_FALSE(before->value);

        // Proclaim: only the grant's owner and fence, through the session that holds it.
        auto wrong = co_await other.proclaim("pa:e", dl::owner_token::generate(), l->fence(), "x");
        CHECK((!wrong && wrong.error() == dl::errc::not_owner));
        auto stale = co_await store.proclaim("pa:e", l->owner(), l->fence() - 1, "x");
        CHECK((!stale && stale.error() == dl::errc::not_owner));
        const std::string value{"a\0b", 3};
        { const auto ok_ = co_await other.proclaim("pa:e", l->owner(), l->fence(), value); REQUIRE(ok_); }
        auto rec = record_of(look, table, "pa:e");
        REQUIRE(rec);
        CHECK(rec->pid == holder_pid);
        CHECK(rec->fence == static_cast<std::int64_t>(l->fence()));
        CHECK(rec->owner == l->owner().to_hex());
        auto led = co_await other.leader("pa:e");
        REQUIRE(led);
        CHECK(led->epoch == l->fence());
        CHECK(led->owner == l->owner().to_hex().substr(0, 8));
        CHECK(led->value == std::optional<std::string>{value});
        CHECK_FALSE(led->remaining);

        // A record that does not name the holder: pending, with the next fence and no
        // value. Another pid, a live session that does not hold the lock, or the
        // holder's pid with a fence that is not the lease row's (left by an ended
        // session whose pid a later holder has).
        for (const auto* change : {"pid = NULL", "pid = pg_backend_pid()", "fence = fence - 1"}) {
            look.query("UPDATE " + adv + " SET pid = $2, fence = $3 WHERE resource = $1",
                       {pg::param::bytes("pa:e"), pg::param::number(holder_pid),
                        pg::param::number(static_cast<std::int64_t>(l->fence()))});
            look.query("UPDATE " + adv + " SET " + change + " WHERE resource = $1", {pg::param::bytes("pa:e")});
            auto pending = co_await other.leader("pa:e");
            REQUIRE(pending);
            INFO(change);
            CHECK(pending->epoch == l->fence() + 1);
            CHECK_FALSE(pending->value);
            CHECK(pending->owner.empty());
        }
        // The holder's proclaim writes its record again.
        { const auto ok_ = co_await store.proclaim("pa:e", l->owner(), l->fence(), value); REQUIRE(ok_); }
        led = co_await other.leader("pa:e");
        REQUIRE(led);
        CHECK(led->epoch == l->fence());
        CHECK(led->value == std::optional<std::string>{value});

        // Released: the record's pid goes with the lock; nobody leads; the term's
        // proclaim is refused.
        { const auto ok_ = co_await l->unlock(); CHECK(ok_); }
        CHECK(record_of(look, table, "pa:e")->pid == -1);
        auto none = co_await other.leader("pa:e");
        REQUIRE(none);
        CHECK(none->epoch == 0);
        auto late = co_await store.proclaim("pa:e", l->owner(), l->fence(), "late");
        CHECK((!late && late.error() == dl::errc::not_owner));

        // A campaign's grant is recorded as it is taken, its value with it: leader()
        // names it with no pending step between.
        dl::basic_leader_election<pg::advisory_store> election{store, "pa:e", {.term = {.ttl = 10s}}};
        auto term = co_await election.campaign("cand");
        REQUIRE(term);
        rec = record_of(look, table, "pa:e");
        REQUIRE(rec);
        CHECK(rec->fence == static_cast<std::int64_t>(term->epoch()));
        CHECK(rec->value == "63616e64"); // "cand"
        led = co_await other.leader("pa:e");
        REQUIRE(led);
        CHECK(led->epoch == term->epoch());
        CHECK(led->value == std::optional<std::string>{"cand"});

        // Its session ended: the lock is gone from pg_locks, so nobody leads although
        // the record still names the ended session's pid.
        look.terminate_advisory_holder("pa:e");
        (void)co_await test::eventually("the lock went with its session", [&] { return !look.advisory_held("pa:e"); });
        CHECK(record_of(look, table, "pa:e")->pid != -1);
        none = co_await other.leader("pa:e");
        REQUIRE(none);
        CHECK(none->epoch == 0);
        // A plain lock taken after it is not named by that record (the fence moved on).
        auto next = co_await m.lock();
        REQUIRE(next);
        auto after = co_await other.leader("pa:e");
        REQUIRE(after);
        CHECK(after->epoch == next->fence() + 1);
        CHECK_FALSE(after->value);
        { const auto ok_ = co_await next->unlock(); CHECK(ok_); }
        co_await store.close();
        co_await other.close();
        co_await offline.close();
    });
}

TEST_CASE("postgres lock-delay: the mark in the lease row (delay_ms, delay_fence); a release clears it through the "
          "owner; a tombstone ends by itself; hostile marks are held in range",
          "[postgres][lock-delay]")
{
    const auto table = test::fresh_table("delay");
    probe look{table};
    asio::io_context io;
    pg::store store{io, test::shared_postgres().config(table)};
    const auto mark = [&](std::string_view r) {
        auto row = look.query("SELECT delay_ms, delay_fence FROM " + look.table() + " WHERE resource = $1",
                              {pg::param::bytes(r)});
        return std::pair<std::int64_t, std::int64_t>{row.integer(0, 0).value_or(-1), row.integer(0, 1).value_or(-1)};
    };
    test::run(io, [&]() -> asio::awaitable<void> {
        const auto owner = dl::owner_token::generate();
        auto f = co_await store.put_if_absent("pd:a", owner, 10s);
        REQUIRE(f);
        // Owner- and fence-checked.
        auto wrong = co_await store.arm_delay("pd:a", dl::owner_token::generate(), *f, 1s);
        CHECK((!wrong && wrong.error() == dl::condition::not_owner));
        auto stale = co_await store.arm_delay("pd:a", owner, *f + 1, 1s);
        CHECK((!stale && stale.error() == dl::condition::not_owner));
        auto armed = co_await store.arm_delay("pd:a", owner, *f, 1500ms);
        REQUIRE(armed);
        const auto written = mark("pd:a");
        CHECK(written.first == 1500);
        CHECK(written.second == static_cast<std::int64_t>(*f));
        // A release skips the delay.
        { const auto ok_ = co_await store.release("pd:a", owner); CHECK(ok_); }
        auto next = co_await store.put_if_absent("pd:a", owner, 10s);
        REQUIRE(next);

        // An expiry leaves a tombstone for every acquisition path; it ends by itself.
        // Long enough that the refusals below all fall inside it on a loaded machine
        // (ten statements under the sanitizers); the wait after them is measured from
        // the tombstone's own end.
        { const auto ok_ = co_await store.arm_delay("pd:a", owner, *next, 5s); REQUIRE(ok_); }
        look.expire_lease("pd:a");
        auto refused = co_await store.put_if_absent_answer("pd:a", dl::owner_token::generate(), 10s);
        REQUIRE(refused);
        REQUIRE(refused->is_delayed());
        CHECK(*refused->not_before() <= dl::clock::now() + 5s);
        CHECK(*refused->not_before() > dl::clock::now() + 3s);
        auto fenced = co_await store.put_if_absent("pd:a", owner, 10s);
        CHECK((!fenced && fenced.error() == dl::errc::lock_delayed));
        const std::vector<std::string> one{"pd:a"}, two{"pd:b", "pd:a"};
        auto all = co_await store.put_if_absent_all(one, owner, 10s);
        CHECK((!all && all.error() == dl::errc::lock_delayed));
        auto some = co_await store.put_if_absent_all(two, owner, 10s);
        CHECK((!some && some.error() == dl::errc::lock_delayed));
        CHECK_FALSE(look.lease_held("pd:b"));
        auto reader = co_await store.put_shared("pd:a", dl::owner_token::generate(), 10s, 0);
        CHECK((reader && reader->is_delayed()));
        // The expired holder cannot release its way past the tombstone.
        auto late = co_await store.release("pd:a", owner);
        CHECK((!late && late.error() == dl::condition::not_owner));
        co_await dl::backend::sleep_until(*refused->not_before() + 200ms);
        auto after = co_await store.put_if_absent("pd:a", owner, 10s);
        REQUIRE(after);
        CHECK(*after == *next + 1);
        { const auto ok_ = co_await store.release("pd:a", owner); CHECK(ok_); }

        // A revoke ends a marked grant as an expiry: the tombstone follows.
        auto r = co_await store.put_if_absent("pd:r", owner, 10s);
        REQUIRE(r);
        { const auto ok_ = co_await store.arm_delay("pd:r", owner, *r, 2s); REQUIRE(ok_); }
        { const auto ok_ = co_await store.revoke("pd:r", *r); REQUIRE(ok_); }
        CHECK_FALSE(look.lease_held("pd:r"));
        auto after_revoke = co_await store.put_if_absent_answer("pd:r", dl::owner_token::generate(), 10s);
        CHECK((after_revoke && after_revoke->is_delayed()));

        // Hostile marks: negative, huge, another grant's fence; none stays forever.
        auto h = co_await store.put_if_absent("pd:h", owner, 10s);
        REQUIRE(h);
        look.query("UPDATE " + look.table() + " SET delay_ms = -5000, delay_fence = fence WHERE resource = $1",
                   {pg::param::bytes("pd:h")});
        look.expire_lease("pd:h");
        auto negative = co_await store.put_if_absent("pd:h", owner, 10s);
        REQUIRE(negative);
        look.query("UPDATE " + look.table() + " SET delay_ms = 9223372036854775807, delay_fence = fence - 1 WHERE "
                   "resource = $1",
                   {pg::param::bytes("pd:h")});
        look.expire_lease("pd:h");
        auto other_fence = co_await store.put_if_absent("pd:h", owner, 10s);
        REQUIRE(other_fence);
        look.query("UPDATE " + look.table() + " SET delay_ms = 9223372036854775807, delay_fence = fence WHERE "
                   "resource = $1",
                   {pg::param::bytes("pd:h")});
        look.expire_lease("pd:h");
        auto huge = co_await store.put_if_absent_answer("pd:h", owner, 10s);
        REQUIRE(huge);
        CHECK(huge->is_delayed()); // held within max_wait: the statement still answers
        co_await store.close();
    });
}

TEST_CASE("postgres advisory lock-delay: the mark in the lease row (its fence negated); a release clears it; a "
          "session that ends leaves a tombstone from its first sighting, for tries and waits in the server; it ends by "
          "itself",
          "[postgres][lock-delay]")
{
    static_assert(dl::lock_delay_store<pg::advisory_store>);
    const auto table = test::fresh_table("adelay");
    probe look{table};
    asio::io_context io;
    pg::advisory_store store{io, test::shared_postgres().config(table)};
    pg::advisory_store other{io, test::shared_postgres().config(table)};
    test::run(io, [&]() -> asio::awaitable<void> {
        const dl::lock_options marked{.ttl = 10s, .lock_delay = 1500ms};
        dl::basic_distributed_mutex<pg::advisory_store, dl::retry::none> holder{store, "pa:d", marked};
        dl::basic_distributed_mutex<pg::advisory_store, dl::retry::none> prober{other, "pa:d", {.ttl = 10s}};
        auto l = co_await holder.lock();
        REQUIRE(l);
        auto mk = mark_of(look, "pa:d");
        CHECK(mk.delay_ms == 1500);
        CHECK(mk.delay_fence == -static_cast<std::int64_t>(l->fence()));
        CHECK_FALSE(mk.tombstone);
        CHECK_FALSE(record_of(look, table, "pa:d")); // a plain lock keeps no election record
        // Owner- and fence-checked, through the session that holds the grant.
        auto wrong = co_await store.arm_delay("pa:d", dl::owner_token::generate(), l->fence(), 1s);
        CHECK((!wrong && wrong.error() == dl::condition::not_owner));
        auto stale = co_await store.arm_delay("pa:d", l->owner(), l->fence() + 1, 1s);
        CHECK((!stale && stale.error() == dl::condition::not_owner));
        // A release skips the delay.
        { const auto ok_ = co_await l->unlock(); CHECK(ok_); }
        CHECK(mark_of(look, "pa:d").delay_ms == -1);
        CHECK(mark_of(look, "pa:d").delay_fence == -1);
        auto right_after = co_await prober.try_lock();
        REQUIRE(right_after);
        { const auto ok_ = co_await right_after->unlock(); CHECK(ok_); }
        // A lease table grant's mark (its fence as it is, on a row without an owner once
        // released) is not read as an advisory grant's.
        look.query("UPDATE " + look.table() + " SET delay_ms = 60000, delay_fence = fence WHERE resource = $1",
                   {pg::param::bytes("pa:d")});
        right_after = co_await prober.try_lock();
        REQUIRE(right_after);
        { const auto ok_ = co_await right_after->unlock(); CHECK(ok_); }

        // The marked holder's session ends: nothing is written then (no statement sees
        // it); the first session to take the lock finds the mark and starts the
        // tombstone at that sighting, gives the lock back, and says until when.
        l = co_await holder.lock();
        REQUIRE(l);
        const auto marked_fence = l->fence();
        look.terminate_advisory_holder("pa:d");
        (void)co_await test::eventually("the lock went with its session", [&] { return !look.advisory_held("pa:d"); });
        CHECK_FALSE(mark_of(look, "pa:d").tombstone);
        co_await dl::backend::sleep_until(dl::clock::now() + 500ms);
        dl::diagnostics diag;
        const auto sighted = dl::clock::now();
        auto refused = co_await prober.try_lock(diag);
        REQUIRE_FALSE(refused);
        CHECK(refused.error() == dl::errc::lock_delayed);
        REQUIRE(diag.lock_delay_until());
        const auto until = *diag.lock_delay_until();
        CHECK(until >= sighted + 1400ms);
        CHECK(until <= dl::clock::now() + 1500ms);
        const auto tombstone = mark_of(look, "pa:d");
        CHECK(tombstone.tombstone);
        CHECK(tombstone.delay_fence == -static_cast<std::int64_t>(marked_fence));
        CHECK_FALSE(look.advisory_held("pa:d")); // given back in the same statement
        // Later sightings judge by the same end: the one the server wrote, unchanged
        // (to its microsecond), and on this side the same end to within the replies'
        // way back.
        dl::diagnostics again;
        auto refused_again = co_await prober.try_lock(again);
        REQUIRE_FALSE(refused_again);
        CHECK(refused_again.error() == dl::errc::lock_delayed);
        CHECK(mark_of(look, "pa:d").tombstone_end_us == tombstone.tombstone_end_us);
        REQUIRE(again.lock_delay_until());
        CHECK(*again.lock_delay_until() <= until + 100ms);
        CHECK(*again.lock_delay_until() >= until - 100ms);
        dl::basic_distributed_mutex<pg::advisory_store, dl::retry::fixed> patient{
            other, "pa:d", {.ttl = 10s}, dl::retry::fixed{.delay = 50ms}};
        auto after = co_await patient.lock_until(dl::clock::now() + 10s);
        const auto granted_at = dl::clock::now();
        REQUIRE(after);
        // Not before the end the server wrote: the first sighting came after `sighted`,
        // and the end is that sighting + the delay. `until` itself is no bound from
        // below: it is the first reply's arrival + the server's milliseconds left, late
        // by that reply's way back, which on a loaded machine can be longer than the
        // way back of the grant's reply and of the retry before it.
        CHECK(granted_at >= sighted + 1500ms);
        CHECK(granted_at <= until + 1s);
        CHECK(after->fence() == marked_fence + 1);
        // The mark names a fence that is no longer the row's: it counts no more.
        CHECK(mark_of(look, "pa:d").delay_fence == -static_cast<std::int64_t>(marked_fence));

        // A waiter in the server's queue when a marked holder's session ends: its wait
        // is granted, finds the mark, gives the lock back, and is granted after the
        // delay.
        { const auto ok_ = co_await after->unlock(); CHECK(ok_); }
        l = co_await holder.lock();
        REQUIRE(l);
        dl::basic_distributed_mutex<pg::advisory_store, dl::retry::fixed> waiter{
            other, "pa:d", {.ttl = 10s}, dl::retry::fixed{.delay = 5s}};
        auto waiting = test::start(co_await asio::this_coro::executor, waiter.lock_until(dl::clock::now() + 20s));
        co_await dl::backend::sleep_until(dl::clock::now() + 500ms);
        CHECK_FALSE(waiting.ready());
        const auto ended = dl::clock::now();
        look.terminate_advisory_holder("pa:d");
        { const bool came_ = co_await waiting.wait(); REQUIRE(came_); }
        auto& waited = waiting.get();
        REQUIRE(waited);
        CHECK(dl::clock::now() >= ended + 1400ms);
        CHECK(dl::clock::now() <= ended + 4s);
        { const auto ok_ = co_await waited->unlock(); CHECK(ok_); }

        // Through pg::store with pg::advisory, the grant is marked the same way.
        pg::store table_store{io, test::shared_postgres().config(table)};
        dl::basic_distributed_mutex<pg::store, pg::advisory, dl::retry::none> by_table{table_store, "pa:d2", marked};
        auto t = co_await by_table.lock();
        REQUIRE(t);
        CHECK(mark_of(look, "pa:d2").delay_ms == 1500);
        { const auto ok_ = co_await t->unlock(); CHECK(ok_); }
        co_await table_store.close();
        co_await store.close();
        co_await other.close();
    });
}
