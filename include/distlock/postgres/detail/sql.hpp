// distlock/postgres/detail/sql.hpp: the statements of the PostgreSQL store, for one
// lease table and notification channel.
//
// Every value is a parameter ($1...): resources travel as bytea in binary (any bytes,
// no escaping), owners as text, durations as milliseconds. The only names in the
// text are the table's and the channel's, checked by config::validate() and quoted.
// Expiry is decided by the server's clock (clock_timestamp(), which moves during a
// transaction, unlike now()).
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace distlock::postgres::detail {

/// `name` (checked by valid_identifier) as a quoted identifier, schema included.
inline std::string quoted(std::string_view name)
{
    std::string out;
    const auto dot = name.find('.');
    if (dot != std::string_view::npos) {
        out += '"';
        out += name.substr(0, dot);
        out += "\".";
        name = name.substr(dot + 1);
    }
    out += '"';
    out += name;
    out += '"';
    return out;
}

inline std::string hex(std::string_view bytes)
{
    static constexpr char digits[] = "0123456789abcdef";
    std::string out;
    out.reserve(bytes.size() * 2);
    for (const unsigned char b : bytes) {
        out += digits[b >> 4];
        out += digits[b & 15];
    }
    return out;
}

/// The smallest id above every id that starts with `prefix` (in bytea's order, byte by
/// byte), for a range scan of the primary key; nullopt when there is none (an empty
/// prefix, or one of 0xff bytes only: every id after it starts with it).
inline std::optional<std::string> prefix_end(std::string_view prefix)
{
    std::string end{prefix};
    while (!end.empty() && static_cast<unsigned char>(end.back()) == 0xff)
        end.pop_back();
    if (end.empty())
        return std::nullopt;
    end.back() = static_cast<char>(static_cast<unsigned char>(end.back()) + 1);
    return end;
}

struct sql_texts {
    sql_texts(std::string_view table, std::string_view channel, bool namespaced)
        : table{detail::quoted(table)}, channel{channel}
    {
        const auto& t = this->table;
        const std::string expiry = "clock_timestamp() + $3::bigint * interval '1 millisecond'";
        create = "CREATE TABLE IF NOT EXISTS " + t +
                 " (resource bytea PRIMARY KEY CHECK (octet_length(resource) BETWEEN 1 AND 1024),"
                 " owner text, expires_at timestamptz, fence bigint NOT NULL DEFAULT 0)";
        // Granted when the row is absent, released or expired; the fence is incremented
        // in the same statement. Refused: the holder's time left, by the server's clock.
        acquire = "WITH granted AS (INSERT INTO " + t + " AS l (resource, owner, expires_at, fence) VALUES ($1, $2, " +
                  expiry +
                  ", 1) ON CONFLICT (resource) DO UPDATE SET owner = excluded.owner, expires_at = "
                  "excluded.expires_at, fence = l.fence + 1 WHERE l.owner IS NULL OR l.expires_at <= "
                  "clock_timestamp() RETURNING l.fence) SELECT (SELECT fence FROM granted), (SELECT "
                  "ceil(extract(epoch FROM h.expires_at - clock_timestamp()) * 1000)::bigint FROM " +
                  t + " h WHERE h.resource = $1 AND h.owner IS NOT NULL)";
        // All or nothing: rows are taken in sorted order (no deadlock between two
        // multi-locks); when only some were granted, the division by zero fails the
        // statement, which rolls all of them back. None granted: no row, no error.
        acquire_all = "WITH granted AS (INSERT INTO " + t + " AS l (resource, owner, expires_at, fence) SELECT r, $2, " +
                      expiry +
                      ", 1 FROM unnest($1::bytea[]) AS w(r) ORDER BY r ON CONFLICT (resource) DO UPDATE SET owner = "
                      "excluded.owner, expires_at = excluded.expires_at, fence = l.fence + 1 WHERE l.owner IS "
                      "NULL OR l.expires_at <= clock_timestamp() RETURNING l.resource, l.fence), counted AS "
                      "(SELECT count(*) AS n FROM granted) SELECT encode(g.resource, 'hex'), CASE WHEN c.n = "
                      "cardinality($1::bytea[]) THEN g.fence ELSE c.n / 0 END FROM granted g, counted c";
        extend = "UPDATE " + t + " SET expires_at = " + expiry +
                 " WHERE resource = $1 AND owner = $2 AND expires_at > clock_timestamp()";
        // Keeps the row and its fence; the notification goes out when it commits.
        release = "WITH freed AS (UPDATE " + t +
                  " SET owner = NULL, expires_at = NULL WHERE resource = $1 AND owner = $2 RETURNING resource) "
                  "SELECT pg_notify($3, encode(resource, 'hex')) FROM freed";
        // A set's release: its rows locked in sorted order first (as acquire_all takes
        // them, so the two never wait on each other in a cycle), then freed and
        // announced; one row per resource released.
        release_all = "WITH mine AS MATERIALIZED (SELECT resource FROM " + t +
                      " WHERE resource = ANY($1::bytea[]) AND owner = $2 ORDER BY resource FOR UPDATE), freed AS "
                      "(UPDATE " + t + " AS l SET owner = NULL, expires_at = NULL FROM mine WHERE l.resource = "
                      "mine.resource AND l.owner = $2 RETURNING l.resource) SELECT encode(resource, 'hex'), "
                      "pg_notify($3, encode(resource, 'hex')) FROM freed";
        read = "SELECT owner, fence, CASE WHEN owner IS NOT NULL THEN ceil(extract(epoch FROM expires_at - "
               "clock_timestamp()) * 1000)::bigint END FROM " +
               t + " WHERE resource = $1";
        // A listing: the live rows of the id range [$1, $2) ($2 NULL: no upper end), in
        // id order. A range of the primary key rather than LIKE, which would need % and _
        // escaped and compares characters, not bytes. One clock reading for every row:
        // a row passes only with time left, so its time left is at least 1 ms.
        list = "SELECT encode(l.resource, 'hex'), l.owner, l.fence, ceil(extract(epoch FROM l.expires_at - "
               "c.now) * 1000)::bigint FROM " +
               t +
               " l, (SELECT clock_timestamp() AS now) c WHERE l.resource >= $1 AND ($2::bytea IS NULL OR "
               "l.resource < $2) AND l.owner IS NOT NULL AND l.expires_at > c.now ORDER BY l.resource";
        // A release checked on the grant's fence instead of its owner, and on the lease
        // being live (an expired one is free: nothing to revoke), announced as a release is.
        revoke = "WITH freed AS (UPDATE " + t +
                 " SET owner = NULL, expires_at = NULL WHERE resource = $1 AND fence = $2 AND owner IS NOT NULL "
                 "AND expires_at > clock_timestamp() RETURNING resource) SELECT pg_notify($3, encode(resource, "
                 "'hex')) FROM freed";
        // Advisory mode: the key is a hash of the resource (SHA-256's first 64 bits, or
        // 32 bits beside a namespace), computed by the server; the fence comes from
        // the same table, in the same statement, only when the lock was taken.
        const std::string key = namespaced ? "$2::int, ('x' || substr(encode(sha256($1), 'hex'), 1, 8))::bit(32)::int"
                                           : "('x' || substr(encode(sha256($1), 'hex'), 1, 16))::bit(64)::bigint";
        const std::string fence_of = " INSERT INTO " + t +
                                     " AS f (resource, fence) SELECT $1, 1 FROM l ON CONFLICT (resource) DO UPDATE "
                                     "SET fence = f.fence + 1 RETURNING f.fence";
        advisory_try = "WITH l AS MATERIALIZED (SELECT pg_try_advisory_lock(" + key + ") AS got)" +
                       " INSERT INTO " + t +
                       " AS f (resource, fence) SELECT $1, 1 FROM l WHERE l.got ON CONFLICT (resource) DO UPDATE "
                       "SET fence = f.fence + 1 RETURNING f.fence";
        advisory_wait = "WITH l AS MATERIALIZED (SELECT pg_advisory_lock(" + key + "))" + fence_of;
        advisory_unlock = "SELECT pg_advisory_unlock(" + key + ")";
        wait_limits = "SELECT set_config('lock_timeout', $1, true), set_config('statement_timeout', $2, true)";
    }

    /// A condition for the WHERE clause of the user's own statement: true only while
    /// `token_param` is the resource's current fence; it locks the lease row (FOR
    /// SHARE) until the statement's transaction ends, so that no acquisition can come
    /// between the check and the write.
    std::string fence_condition(int resource_param, int token_param) const
    {
        return "EXISTS (SELECT 1 FROM " + table + " distlock_f WHERE distlock_f.resource = $" +
               std::to_string(resource_param) + "::bytea AND distlock_f.fence = $" + std::to_string(token_param) +
               "::bigint FOR SHARE)";
    }

    std::string table, channel;
    std::string create, acquire, acquire_all, extend, release, release_all, read, list, revoke;
    std::string advisory_try, advisory_wait, advisory_unlock, wait_limits;
};

} // namespace distlock::postgres::detail
