// Shared by the PostgreSQL tests and fixtures: statements run behind the clients'
// backs on a store of their own (a lease row, an advisory lock, their expiry).
#pragma once

#include "eventually.hpp"
#include "pending.hpp"
#include "postgres_server.hpp"
#include "support.hpp"

#include <distlock/postgres.hpp>

#include <string>
#include <string_view>
#include <vector>

namespace test::postgres_tests {

namespace dl = distlock;
namespace pg = distlock::postgres;

// Statements behind the clients' backs, on a store and event loop of their own.
class probe {
public:
    explicit probe(const std::string& table) : store_{io_, shared_postgres().config(table)}, table_{table} {}

    pg::rows query(std::string sql, std::vector<pg::param> params = {})
    {
        dl::result<pg::rows> out{make_error_code(dl::errc::store_unavailable)};
        dl::diagnostics diag;
        io_.restart();
        test::run(io_, [&]() -> asio::awaitable<void> {
            out = co_await store_.execute(std::move(sql), std::move(params), &diag);
        });
        INFO(diag.to_string());
        REQUIRE(out);
        return std::move(out.value());
    }

    std::string table() const { return "\"" + table_ + "\""; }

    bool lease_held(std::string_view resource)
    {
        auto r = query("SELECT count(*) FROM " + table() +
                           " WHERE resource = $1 AND owner IS NOT NULL AND expires_at > clock_timestamp()",
                       {pg::param::bytes(resource)});
        return r.integer(0, 0).value_or(0) > 0;
    }

    static std::string advisory_key() { return "('x' || substr(encode(sha256($1::bytea), 'hex'), 1, 16))::bit(64)::bigint"; }

    bool advisory_held(std::string_view resource)
    {
        auto r = query("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 1 AND "
                       "((classid::bigint << 32) | objid::bigint) = " +
                           advisory_key(),
                       {pg::param::bytes(resource)});
        return r.integer(0, 0).value_or(0) > 0;
    }

    // Ends the server session that holds `resource`'s advisory lock.
    void terminate_advisory_holder(std::string_view resource)
    {
        auto r = query("SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' AND granted AND "
                       "objsubid = 1 AND ((classid::bigint << 32) | objid::bigint) = " +
                           advisory_key(),
                       {pg::param::bytes(resource)});
        REQUIRE(r.count() == 1);
    }

    // The key of a semaphore's permit `slot` (detail/sql.hpp), without a namespace.
    static std::string permit_key()
    {
        return "('x' || substr(encode(sha256($1::bytea || int4send($2::int)), 'hex'), 17, 16))::bit(64)::bigint";
    }

    // Ends the server session that holds permit `slot` of `resource`.
    void terminate_permit_holder(std::string_view resource, std::uint32_t slot)
    {
        auto r = query("SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' AND granted AND "
                       "objsubid = 1 AND ((classid::bigint << 32) | objid::bigint) = " +
                           permit_key(),
                       {pg::param::bytes(resource), pg::param::number(slot)});
        REQUIRE(r.count() == 1);
    }

    // The shared holders' table beside the lease table.
    std::string holders() const { return pg::detail::quoted(pg::detail::holders_table(table_)); }

    // As if a shared grant (a reader's, a permit's) had run out: its expiry moves
    // into the past.
    void expire_holder(std::string_view resource, const dl::owner_token& owner)
    {
        auto r = query("UPDATE " + holders() + " SET expires_at = clock_timestamp() - interval '1 second' "
                                               "WHERE resource = $1 AND owner = $2 AND mode = 's'",
                       {pg::param::bytes(resource), pg::param::text(owner.to_hex())});
        REQUIRE(r.affected() == 1);
    }

    // As if the lease had run out at this moment (a lock-delay mark stays, as after a
    // natural expiry: its tombstone begins now).
    void expire_lease(std::string_view resource)
    {
        auto r = query("UPDATE " + table() + " SET expires_at = least(expires_at, clock_timestamp()) "
                                             "WHERE resource = $1 AND owner IS NOT NULL",
                       {pg::param::bytes(resource)});
        REQUIRE(r.affected() == 1);
    }

    pg::store& store() { return store_; }
    asio::io_context& io() { return io_; }

private:
    asio::io_context io_;
    pg::store store_;
    std::string table_;
};

} // namespace test::postgres_tests
