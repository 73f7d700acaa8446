// distlock/postgres/config.hpp: how to reach a PostgreSQL server, and which table.
#pragma once

#include <distlock/clock.hpp>
#include <distlock/detail/url_query.hpp>
#include <distlock/error.hpp>
#include <distlock/options.hpp>
#include <distlock/result.hpp>

#include <libpq-fe.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace distlock::postgres {

/// A table or channel name: letters, digits and underscores, not starting with a
/// digit, at most 63 bytes (PostgreSQL's limit); the table may be schema-qualified
/// ("locks.leases"). Names are always quoted in SQL, so they are taken verbatim
/// (case included), and anything else is refused rather than escaped.
inline bool valid_identifier(std::string_view name, bool qualified) noexcept
{
    const auto part = [](std::string_view p) {
        if (p.empty() || p.size() > 63 || (p[0] >= '0' && p[0] <= '9'))
            return false;
        for (const char c : p)
            if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_'))
                return false;
        return true;
    };
    if (const auto dot = name.find('.'); qualified && dot != std::string_view::npos)
        return part(name.substr(0, dot)) && part(name.substr(dot + 1));
    return part(name);
}

/// The store's settings. The connection itself is libpq's: `conninfo` is a libpq
/// connection string ("hostaddr=127.0.0.1 port=5432 dbname=app user=locker") or URI
/// ("postgres://locker@127.0.0.1:5432/app?sslmode=verify-full"), with libpq's TLS,
/// password, SCRAM and environment (PGPASSWORD, ~/.pgpass) handling. A host *name*
/// is resolved by libpq itself, which blocks the calling thread: give addresses
/// (`hostaddr=`) where that matters.
struct config {
    std::string conninfo = "hostaddr=127.0.0.1 dbname=postgres";
    /// The lease table (created when missing, see docs/postgres.md for its schema).
    std::string table = "distlock_locks";
    /// Creates the table (CREATE TABLE IF NOT EXISTS) before the store's first
    /// statement. Off when the table is made by migrations and the store's role may
    /// not create tables.
    bool create_table = true;
    /// The NOTIFY channel on which releases are announced (payload: the resource, hex).
    std::string channel = "distlock_release";
    /// Connections shared by the lease-table operations (pipelined; each request on
    /// the least busy one). The advisory mode opens one more per held lock.
    std::size_t pool_size = 2;
    /// Connecting, TLS and authentication included.
    duration connect_timeout = std::chrono::seconds{5};
    /// The server's statement_timeout for the store's statements; a reply that has not
    /// come this long plus a second after the request drops the connection.
    duration statement_timeout = std::chrono::seconds{5};
    /// TCP keepalive and tcp_user_timeout, so that a server that stops answering (a
    /// blackholed connection) is noticed by the kernel even while the socket is idle.
    duration keepalive_idle = std::chrono::seconds{5};
    duration keepalive_interval = std::chrono::seconds{1};
    int keepalive_count = 3;
    duration tcp_user_timeout = std::chrono::seconds{10};
    /// Advisory mode: a held lock's connection is pinged this often while idle.
    duration ping_interval = std::chrono::milliseconds{500};
    /// Advisory mode: a lock whose connection has not answered for this long is in
    /// doubt (its lease reports loss: the server may have ended the session).
    duration in_doubt_after = std::chrono::seconds{3};
    /// Advisory mode: PostgreSQL checks this often whether the client of a waiting
    /// statement is still there (client_connection_check_interval), so that a
    /// waiter that gave up stops waiting in the server soon after.
    duration client_check_interval = std::chrono::milliseconds{500};
    /// Advisory mode: with a value, resources map to the two-int32 key space
    /// (this namespace, a 32-bit hash), apart from other users of advisory locks;
    /// without, to the 64-bit key space (a 64-bit hash). See docs/postgres.md on
    /// collisions.
    std::optional<std::int32_t> advisory_namespace;

    std::error_code validate() const
    {
        if (!valid_identifier(table, true) || !valid_identifier(channel, false))
            return errc::invalid_argument;
        if (pool_size == 0 || pool_size > 64 || keepalive_count <= 0 || keepalive_count > 100)
            return errc::invalid_argument;
        for (const auto d : {connect_timeout, statement_timeout, keepalive_idle, keepalive_interval,
                             tcp_user_timeout, ping_interval, in_doubt_after, client_check_interval})
            if (d < std::chrono::milliseconds{1} || d > std::chrono::hours{24})
                return errc::invalid_argument;
        if (ping_interval >= in_doubt_after)
            return errc::invalid_argument;
        if (conninfo.size() > 8192 || conninfo.find('\0') != std::string::npos)
            return errc::invalid_argument;
        char* error = nullptr;
        PQconninfoOption* parsed = PQconninfoParse(conninfo.c_str(), &error);
        if (error)
            PQfreemem(error);
        if (!parsed)
            return errc::invalid_argument;
        PQconninfoFree(parsed);
        return {};
    }

    /// What is wrong with settings that validate() refuses, in words (libpq's about
    /// the conninfo; empty when there is nothing more to say than the error code).
    std::string problem() const { return conninfo_problem(); }

    /// What libpq would say about `conninfo` (empty when it parses).
    std::string conninfo_problem() const
    {
        char* error = nullptr;
        PQconninfoOption* parsed = PQconninfoParse(conninfo.c_str(), &error);
        std::string words = error ? error : "";
        if (error)
            PQfreemem(error);
        if (parsed)
            PQconninfoFree(parsed);
        while (!words.empty() && (words.back() == '\n' || words.back() == ' '))
            words.pop_back();
        return words;
    }

    /// A `postgres://` or `postgresql://` URI as libpq reads it, plus distlock's own
    /// query parameters, taken out before libpq sees the rest: `table`, `channel`,
    /// `pool` (1-64), `advisory_namespace` (an int32).
    static result<config> from_url(std::string_view url)
    {
        if (!url.starts_with("postgres://") && !url.starts_with("postgresql://"))
            return errc::invalid_argument;
        config c;
        std::string rest{url};
        std::string kept;
        if (const auto q = rest.find('?'); q != std::string::npos) {
            std::string_view query = std::string_view{rest}.substr(q + 1);
            kept = rest.substr(0, q);
            char sep = '?';
            const auto pairs = distlock::detail::query_pairs(query);
            if (!pairs)
                return errc::invalid_argument;
            for (const auto& [key, value, pair] : *pairs) {
                if (key == "table") {
                    c.table = std::string{value};
                } else if (key == "channel") {
                    c.channel = std::string{value};
                } else if (key == "pool") {
                    const auto n = number(value);
                    if (!n || *n < 1 || *n > 64)
                        return errc::invalid_argument;
                    c.pool_size = static_cast<std::size_t>(*n);
                } else if (key == "advisory_namespace") {
                    const auto n = number(value);
                    if (!n || *n < INT32_MIN || *n > INT32_MAX)
                        return errc::invalid_argument;
                    c.advisory_namespace = static_cast<std::int32_t>(*n);
                } else {
                    kept += sep;
                    kept += pair;
                    sep = '&';
                }
            }
        } else {
            kept = std::move(rest);
        }
        c.conninfo = std::move(kept);
        if (auto ec = c.validate())
            return ec;
        return c;
    }

private:
    static std::optional<long long> number(std::string_view v)
    {
        if (v.empty() || v.size() > 12)
            return std::nullopt;
        long long n = 0;
        bool negative = false;
        std::size_t i = 0;
        if (v[0] == '-') {
            negative = true;
            i = 1;
        }
        if (i == v.size())
            return std::nullopt;
        for (; i < v.size(); ++i) {
            if (v[i] < '0' || v[i] > '9')
                return std::nullopt;
            n = n * 10 + (v[i] - '0');
        }
        return negative ? -n : n;
    }
};

} // namespace distlock::postgres
