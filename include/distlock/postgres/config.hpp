// distlock/postgres/config.hpp: how to reach a PostgreSQL server, and which table.
#pragma once

#include <distlock/backend/url.hpp>
#include <distlock/clock.hpp>
#include <distlock/error.hpp>
#include <distlock/options.hpp>
#include <distlock/result.hpp>

#include <libpq-fe.h>

#include <chrono>
#include <cstdint>
#include <limits>
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

/// How an advisory lock's key is made from the resource id (docs/postgres.md,
/// "Advisory keys"): distlock's own hash, or the key another client of the same
/// database takes for the same resource.
enum class advisory_key_function {
    /// The first 64 bits of the id's SHA-256 (with advisory_namespace: the namespace
    /// and 32 of them). Any id.
    sha256,
    /// hashtext(id), PostgreSQL's 32-bit text hash, sign-extended to the 64-bit key
    /// (pg_advisory_lock(hashtext('name'))). The id is UTF-8 text without NUL.
    hashtext,
    /// The id is the key: a decimal signed 64-bit integer ("-42", pg_advisory_lock(-42)).
    bigint,
    /// The id is the two-int32 key: two decimal signed 32-bit integers with a comma
    /// between ("12,34", pg_advisory_lock(12, 34)).
    int4pair,
};

/// The name of `f` in URLs (`?advisory_key=`).
constexpr std::string_view advisory_key_name(advisory_key_function f) noexcept
{
    switch (f) {
    case advisory_key_function::sha256:
        return "sha256";
    case advisory_key_function::hashtext:
        return "hashtext";
    case advisory_key_function::bigint:
        return "bigint";
    case advisory_key_function::int4pair:
        return "int4pair";
    }
    return "?";
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
    /// Creates the table and its shared holders' table, `table`_holders (CREATE TABLE
    /// IF NOT EXISTS), before the store's first statement. Off when the tables are
    /// made by migrations and the store's role may not create tables.
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
    /// Advisory mode: how a resource id becomes its lock's key. Other than sha256, the
    /// key is the one a foreign client of the same database locks for that id, and
    /// ids that do not name a key are refused (errc::invalid_argument) before any I/O,
    /// as are semaphores (their permits would need keys of their own in the foreign
    /// clients' key space). Not with advisory_namespace.
    advisory_key_function advisory_key = advisory_key_function::sha256;

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
        if (!advisory_key_problem().empty())
            return errc::invalid_argument;
        if (!conninfo_problem().empty())
            return errc::invalid_argument;
        return {};
    }

    /// What is wrong with settings that validate() refuses, in words (libpq's about
    /// the conninfo; empty when there is nothing more to say than the error code).
    std::string problem() const
    {
        if (auto words = advisory_key_problem(); !words.empty())
            return words;
        return conninfo_problem();
    }

    /// What is wrong with the advisory key settings (empty when nothing is).
    std::string advisory_key_problem() const
    {
        switch (advisory_key) {
        case advisory_key_function::sha256:
            return {};
        case advisory_key_function::hashtext:
        case advisory_key_function::bigint:
        case advisory_key_function::int4pair:
            if (advisory_namespace)
                return "advisory_namespace goes with advisory_key=sha256 only: advisory_key=" +
                       std::string{advisory_key_name(advisory_key)} + " takes the key a foreign client takes";
            return {};
        }
        return "advisory_key is none of sha256, hashtext, bigint, int4pair";
    }

    /// What is wrong with `conninfo` (empty when nothing is): longer than 8192 bytes, a
    /// NUL byte, what libpq says when it cannot parse it, or a port that is not a
    /// decimal number from 1 to 65535 (libpq itself would only find out when
    /// connecting).
    std::string conninfo_problem() const
    {
        if (conninfo.size() > 8192)
            return "the connection string is longer than 8192 bytes";
        if (conninfo.find('\0') != std::string::npos)
            return "the connection string has a NUL byte";
        char* error = nullptr;
        PQconninfoOption* parsed = PQconninfoParse(conninfo.c_str(), &error);
        std::string words = error ? error : "";
        if (error)
            PQfreemem(error);
        while (!words.empty() && (words.back() == '\n' || words.back() == ' '))
            words.pop_back();
        if (!parsed)
            return words.empty() ? "libpq cannot parse the connection string" : words;
        for (const PQconninfoOption* o = parsed; o->keyword && words.empty(); ++o) {
            if (std::string_view{o->keyword} != "port" || !o->val)
                continue;
            // One port, or one per host ("5432,5433"); an empty one is libpq's default.
            std::string_view ports{o->val};
            while (words.empty()) {
                const auto comma = ports.find(',');
                const auto one = ports.substr(0, comma);
                if (!one.empty() && !backend::decimal<std::uint16_t>(one, 1, 65535))
                    words = "port " + backend::quoted(one) + " is not a decimal number from 1 to 65535";
                if (comma == std::string_view::npos)
                    break;
                ports.remove_prefix(comma + 1);
            }
        }
        PQconninfoFree(parsed);
        return words;
    }

    /// What postgres:// and postgresql:// URLs may hold (distlock/backend/url.hpp):
    /// libpq's URI form, with distlock's own query parameters among libpq's. For a
    /// program with parameters of its own in the same URL, which it takes out
    /// (backend::take_query()) before from_parsed_url().
    static backend::url_rules url_rules()
    {
        backend::url_rules rules;
        rules.schemes = {"postgres", "postgresql"};
        rules.default_port = 5432;
        rules.several_hosts = true;
        rules.host_optional = true; // postgres:///db: libpq's local socket
        rules.userinfo = true;
        rules.path = true; // the database
        rules.query_keys = {"table", "channel", "pool", "advisory_namespace", "advisory_key"};
        rules.other_query_keys = true; // libpq's
        return rules;
    }

    /// A `postgres://` or `postgresql://` URI as libpq reads it, plus distlock's own
    /// query parameters, taken out before libpq sees the rest: `table`, `channel`,
    /// `pool` (1-64), `advisory_namespace` (an int32), `advisory_key` (sha256, hashtext,
    /// bigint or int4pair). distlock reads the URL by the
    /// grammar of distlock/backend/url.hpp (hosts, ports from 1 to 65535, each key once)
    /// and decodes nothing; libpq then decodes percent escapes in what it reads. A URL
    /// that either refuses, or whose settings fail validate(), is errc::invalid_argument,
    /// with `*why` (when not null) saying what is wrong and where.
    static result<config> from_url(std::string_view url, std::string* why = nullptr)
    {
        auto parsed = backend::parse_url(url, url_rules(), why);
        if (!parsed)
            return parsed.error();
        return from_parsed_url(std::move(parsed).value(), why);
    }

    /// from_url() for a URL already parsed by url_rules(), from which the caller may
    /// have taken parameters of its own.
    static result<config> from_parsed_url(backend::parsed_url url, std::string* why = nullptr)
    {
        config c;
        if (const auto table = backend::take_query(url, "table")) {
            if (!valid_identifier(table->value, true))
                return backend::refused(why, "table " + backend::quoted(table->value) +
                                                 ": expected a name of letters, digits and '_' (not starting with "
                                                 "a digit, at most 63 bytes), optionally schema-qualified");
            c.table = table->value;
        }
        if (const auto channel = backend::take_query(url, "channel")) {
            if (!valid_identifier(channel->value, false))
                return backend::refused(why, "channel " + backend::quoted(channel->value) +
                                                 ": expected a name of letters, digits and '_' (not starting with "
                                                 "a digit, at most 63 bytes)");
            c.channel = channel->value;
        }
        if (const auto pool = backend::take_query(url, "pool")) {
            const auto n = backend::query_number<std::size_t>(*pool, 1, 64, why);
            if (!n)
                return n.error();
            c.pool_size = *n;
        }
        if (const auto ns = backend::take_query(url, "advisory_namespace")) {
            const auto n = backend::query_number(*ns, std::numeric_limits<std::int32_t>::min(),
                                                 std::numeric_limits<std::int32_t>::max(), why);
            if (!n)
                return n.error();
            c.advisory_namespace = *n;
        }
        if (const auto key = backend::take_query(url, "advisory_key")) {
            bool known = false;
            for (const auto f : {advisory_key_function::sha256, advisory_key_function::hashtext,
                                 advisory_key_function::bigint, advisory_key_function::int4pair})
                if (key->value == advisory_key_name(f)) {
                    c.advisory_key = f;
                    known = true;
                }
            if (!known)
                return backend::refused(why, "advisory_key " + backend::quoted(key->value) +
                                                 ": expected sha256, hashtext, bigint or int4pair");
        }
        if (const auto problem = c.advisory_key_problem(); !problem.empty())
            return backend::refused(why, problem);
        c.conninfo = url.text();
        if (const auto problem = c.conninfo_problem(); !problem.empty())
            return backend::refused(why, "libpq: " + problem);
        if (c.validate())
            return backend::refused(why, "the settings fail config::validate()");
        return c;
    }
};

} // namespace distlock::postgres
