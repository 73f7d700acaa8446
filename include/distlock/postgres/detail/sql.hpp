// distlock/postgres/detail/sql.hpp: the statements of the PostgreSQL store, for one
// lease table and notification channel.
//
// Every value is a parameter ($1...): resources travel as bytea in binary (any bytes,
// no escaping), owners as text, durations as milliseconds. The only names in the
// text are the table's and the channel's, checked by config::validate() and quoted.
// Expiry is decided by the server's clock (clock_timestamp(), which moves during a
// transaction, unlike now()).
#pragma once

#include <distlock/postgres/config.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

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

/// A table beside a lease table: its name with `suffix` added, and when that would
/// pass PostgreSQL's 63 bytes (which would cut it back to the lease table's own name),
/// a shortened name with a hash of the whole one, so that two long names still name
/// two tables. Schema-qualified names keep their schema.
inline std::string beside_table(std::string_view table, std::string_view suffix)
{
    std::string schema;
    if (const auto dot = table.find('.'); dot != std::string_view::npos) {
        schema = std::string{table.substr(0, dot + 1)};
        table = table.substr(dot + 1);
    }
    if (table.size() + suffix.size() <= 63)
        return schema + std::string{table} + std::string{suffix};
    std::uint32_t h = 2166136261u; // FNV-1a
    for (const unsigned char c : table)
        h = (h ^ c) * 16777619u;
    static constexpr char digits[] = "0123456789abcdef";
    std::string tag = "_";
    for (int shift = 28; shift >= 0; shift -= 4)
        tag += digits[(h >> shift) & 15];
    return schema + std::string{table.substr(0, 63 - suffix.size() - tag.size())} + tag + std::string{suffix};
}

/// The table of a lease table's shared holders: its name with "_holders" added.
inline std::string holders_table(std::string_view table) { return beside_table(table, "_holders"); }

/// The table beside a lease table that keeps the records of advisory grants (their
/// session, fence, election value and lock-delay): its name with "_advisory" added,
/// shortened as holders_table() does.
inline std::string advisory_table(std::string_view table) { return beside_table(table, "_advisory"); }

struct sql_texts {
    /// The longest lock-delay a mark keeps, in milliseconds (max_wait).
    static constexpr long long max_wait_ms = std::chrono::duration_cast<std::chrono::milliseconds>(max_wait).count();

    sql_texts(std::string_view table, std::string_view channel, bool namespaced,
              advisory_key_function key_function = advisory_key_function::sha256)
        : table{detail::quoted(table)}, holders{detail::quoted(holders_table(table))}, channel{channel},
          advisory{detail::quoted(advisory_table(table))}
    {
        const auto& t = this->table;
        const auto& h = this->holders;
        const std::string expiry = "clock_timestamp() + $3::bigint * interval '1 millisecond'";
        create = "CREATE TABLE IF NOT EXISTS " + t +
                 " (resource bytea PRIMARY KEY CHECK (octet_length(resource) BETWEEN 1 AND 1024),"
                 " owner text, expires_at timestamptz, fence bigint NOT NULL DEFAULT 0, value bytea, value_fence "
                 "bigint, delay_ms bigint, delay_fence bigint)";
        // An election's value (value) and the fence of the grant that proclaimed it
        // (value_fence), added to a lease table made by an earlier version. Looked up
        // in the catalog first, so that a table that has them is not locked by an
        // ALTER at every start; a role that may not alter the table (not its owner)
        // keeps its locks working, and only proclaim() and leader() fail, naming the
        // missing column. The locks' own statements never read these two.
        // The lock-delay mark is added the same way: the marked grant's delay in
        // milliseconds (delay_ms) and its fence (delay_fence). Only arm_delay writes
        // them; the other statements read them through the row as JSON (a missing
        // column reads as NULL), so a table its role may not alter keeps its locks,
        // and only arm_delay fails, naming the column.
        upgrade = "DO $distlock$ BEGIN IF (SELECT count(*) FROM pg_attribute WHERE attrelid = '" + t +
                  "'::regclass AND attname IN ('value', 'value_fence', 'delay_ms', 'delay_fence') AND NOT "
                  "attisdropped) < 4 THEN ALTER TABLE " + t + " ADD COLUMN IF NOT EXISTS value bytea, ADD COLUMN IF "
                  "NOT EXISTS value_fence bigint, ADD COLUMN IF NOT EXISTS delay_ms bigint, ADD COLUMN IF NOT "
                  "EXISTS delay_fence bigint; END IF; "
                  "EXCEPTION WHEN insufficient_privilege THEN NULL; END $distlock$";
        // The delay a row's grant is marked with, as an interval, or NULL: a mark
        // counts only for the grant whose fence it carries (every later grant bumps the
        // fence, and a release clears the owner, so neither needs to erase it), and a
        // mark out of range is held within [0, max_wait], so that a tombstone always
        // ends.
        const auto mark_of = [](const std::string& l) {
            return "(CASE WHEN " + l + ".owner IS NOT NULL AND (to_jsonb(" + l + ") ->> 'delay_fence')::bigint = " +
                   l + ".fence THEN least(greatest((to_jsonb(" + l + ") ->> 'delay_ms')::bigint, 0), " +
                   std::to_string(max_wait_ms) + ") * interval '1 millisecond' END)";
        };
        // A row is free when nobody holds it, or its holder's time ran out and no
        // tombstone lasts: a marked grant that ran out without a release refuses grants
        // until its expiry plus its delay (the tombstone is the expired grant itself).
        const auto free_row = [&](const std::string& l, const std::string& now) {
            return "(" + l + ".owner IS NULL OR (" + l + ".expires_at <= " + now + " AND coalesce(" + l +
                   ".expires_at + " + mark_of(l) + " <= " + now + ", true)))";
        };
        // A row whose tombstone lasts.
        const auto tombstone_of = [&](const std::string& l, const std::string& now) {
            return "(" + l + ".expires_at <= " + now + " AND " + l + ".expires_at + " + mark_of(l) + " > " + now +
                   ")";
        };
        const auto tombstone_end = [&](const std::string& l) { return l + ".expires_at + " + mark_of(l); };
        // Shared holders, beside the lease table (whose row keeps the exclusive holder
        // and the one fence counter): one row per reader or permit ('s', with its slot
        // and the count it was taken with), per waiting writer's intent ('w'), and in
        // advisory mode the count of a semaphore's permits ('n', owner ''). A table of
        // its own, so that a lease table made by an earlier version is used unchanged.
        create_holders = "CREATE TABLE IF NOT EXISTS " + h +
                         " (resource bytea NOT NULL, owner text NOT NULL, mode \"char\" NOT NULL CHECK (mode IN "
                         "('s', 'w', 'n')), slot integer NOT NULL DEFAULT 0, permits integer NOT NULL DEFAULT 0,"
                         " expires_at timestamptz NOT NULL, PRIMARY KEY (resource, owner))";
        // Granted when the row is absent, released or expired (and no tombstone lasts);
        // the fence is incremented and the mark cleared in the same statement. Refused:
        // the holder's time left, or the tombstone's, by the server's clock.
        acquire = "WITH granted AS (INSERT INTO " + t + " AS l (resource, owner, expires_at, fence) VALUES ($1, $2, " +
                  expiry +
                  ", 1) ON CONFLICT (resource) DO UPDATE SET owner = excluded.owner, expires_at = "
                  "excluded.expires_at, fence = l.fence + 1 WHERE " +
                  free_row("l", "clock_timestamp()") +
                  " RETURNING l.fence) SELECT (SELECT fence FROM granted), (SELECT "
                  "ceil(extract(epoch FROM h.expires_at - clock_timestamp()) * 1000)::bigint FROM " +
                  t + " h WHERE h.resource = $1 AND h.owner IS NOT NULL), (SELECT ceil(extract(epoch FROM " +
                  tombstone_end("h") + " - clock_timestamp()) * 1000)::bigint FROM " +
                  t + " h WHERE h.resource = $1 AND " + tombstone_of("h", "clock_timestamp()") + ")";
        // All or nothing: rows are taken in sorted order (no deadlock between two
        // multi-locks); when only some were granted, the division by zero fails the
        // statement, which rolls all of them back. None granted: no row, no error.
        // While one of them is in its lock-delay: one row (NULL, NULL) when none was
        // granted, and when some were, ln(0) fails the statement (2201E) instead.
        acquire_all = "WITH granted AS (INSERT INTO " + t + " AS l (resource, owner, expires_at, fence) SELECT r, $2, " +
                      expiry +
                      ", 1 FROM unnest($1::bytea[]) AS w(r) ORDER BY r ON CONFLICT (resource) DO UPDATE SET owner = "
                      "excluded.owner, expires_at = excluded.expires_at, fence = l.fence + 1 WHERE " +
                      free_row("l", "clock_timestamp()") +
                      " RETURNING l.resource, l.fence), counted AS (SELECT count(*) AS n FROM granted), delayed AS "
                      "(SELECT count(*) AS n FROM " + t + " h WHERE h.resource = ANY($1::bytea[]) AND " +
                      tombstone_of("h", "clock_timestamp()") +
                      ") SELECT encode(g.resource, 'hex'), CASE WHEN c.n = cardinality($1::bytea[]) THEN g.fence "
                      "WHEN d.n > 0 THEN ln((c.n - c.n)::numeric)::bigint ELSE c.n / 0 END FROM granted g, counted "
                      "c, delayed d UNION ALL SELECT NULL, NULL FROM counted c, delayed d WHERE c.n = 0 AND d.n > 0";
        extend = "UPDATE " + t + " SET expires_at = " + expiry +
                 " WHERE resource = $1 AND owner = $2 AND expires_at > clock_timestamp()";
        // Keeps the row and its fence; the notification goes out when it commits.
        // The mark goes with the owner; a marked grant that ran out is no longer its
        // holder's to release (its tombstone stays).
        release = "WITH freed AS (UPDATE " + t +
                  " AS l SET owner = NULL, expires_at = NULL WHERE l.resource = $1 AND l.owner = $2 AND "
                  "(l.expires_at > clock_timestamp() OR " + mark_of("l") + " IS NULL) RETURNING l.resource) "
                  "SELECT pg_notify($3, encode(resource, 'hex')) FROM freed";
        // A set's release: its rows locked in sorted order first (as acquire_all takes
        // them, so the two never wait on each other in a cycle), then freed and
        // announced; one row per resource released.
        release_all = "WITH mine AS MATERIALIZED (SELECT resource FROM " + t +
                      " WHERE resource = ANY($1::bytea[]) AND owner = $2 ORDER BY resource FOR UPDATE), freed AS "
                      "(UPDATE " + t + " AS l SET owner = NULL, expires_at = NULL FROM mine WHERE l.resource = "
                      "mine.resource AND l.owner = $2 AND (l.expires_at > clock_timestamp() OR " + mark_of("l") +
                      " IS NULL) RETURNING l.resource) SELECT encode(resource, 'hex'), "
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
        // A grant marked for a lock-delay ends as an expiry would (its holder may still
        // have writes in flight): it keeps its owner and mark and runs out now, so its
        // tombstone follows.
        revoke = "WITH freed AS (UPDATE " + t + " AS l SET owner = CASE WHEN " + mark_of("l") +
                 " IS NULL THEN NULL ELSE l.owner END, expires_at = CASE WHEN " + mark_of("l") +
                 " IS NULL THEN NULL ELSE clock_timestamp() END WHERE l.resource = $1 AND l.fence = $2 AND l.owner "
                 "IS NOT NULL AND l.expires_at > clock_timestamp() RETURNING l.resource) SELECT pg_notify($3, "
                 "encode(resource, 'hex')) FROM freed";
        // The lock-delay mark ($4 milliseconds) on the live grant of owner $2 and fence
        // $3: the check and the write are one update of the locked row.
        arm_delay = "UPDATE " + t + " SET delay_ms = $4, delay_fence = $3 WHERE resource = $1 AND owner = $2 AND "
                    "fence = $3 AND expires_at > clock_timestamp()";
        // An election's value, kept with the live grant of owner $2 and fence $3: the
        // check and the write are one update of the locked row. The row keeps one
        // value per resource, tagged with the fence of the grant that wrote it.
        proclaim = "UPDATE " + t + " SET value = $4, value_fence = $3 WHERE resource = $1 AND owner = $2 AND fence = $3 "
                   "AND expires_at > clock_timestamp()";
        // The live holder (owner, fence, milliseconds left) and the value's fence,
        // with the value (hex) only when it is this grant's: no row when free.
        leader = "SELECT l.owner, l.fence, ceil(extract(epoch FROM l.expires_at - c.now) * 1000)::bigint, "
                 "l.value_fence, CASE WHEN l.value_fence = l.fence THEN encode(l.value, 'hex') END FROM " + t +
                 " l, (SELECT clock_timestamp() AS now) c WHERE l.resource = $1 AND l.owner IS NOT NULL AND "
                 "l.expires_at > c.now";
        // Shared grants. Every statement that decides on a resource's holders runs
        // after one that locks its lease row, in the same transaction: the deciding
        // statement's snapshot is taken once the lock is held, so it sees every change
        // of the holders made under that lock before. take_row creates the row when it
        // is missing (a grant needs its fence counter); find_row only locks it.
        take_row = "INSERT INTO " + t + " AS l (resource) VALUES ($1) ON CONFLICT (resource) DO UPDATE SET fence = "
                   "l.fence";
        find_row = "SELECT 1 FROM " + t + " WHERE resource = $1 FOR UPDATE";
        // The holders whose time has not run out, by one reading of the server's clock.
        const std::string now_and_live =
            "c AS MATERIALIZED (SELECT clock_timestamp() AS now), live AS MATERIALIZED (SELECT s.owner, s.mode, "
            "s.slot, s.permits, s.expires_at FROM " + h + " s, c WHERE s.resource = $1 AND s.mode IN ('s', 'w') "
            "AND s.expires_at > c.now)";
        const std::string exclusive_until = "(SELECT l.expires_at FROM " + t +
                                            " l, c WHERE l.resource = $1 AND l.owner IS NOT NULL AND l.expires_at > "
                                            "c.now)";
        // The end of the resource's tombstone, when one lasts: no grant of either mode
        // until then.
        const std::string delayed_until = "(SELECT " + tombstone_end("l") + " FROM " + t +
                                          " l, c WHERE l.resource = $1 AND " + tombstone_of("l", "c.now") + ")";
        // Expired holders and other waiters' expired intents go (never the row the
        // statement writes: a row is changed once per statement).
        const std::string expired_go = "gone AS (DELETE FROM " + h +
                                       " s USING c WHERE s.resource = $1 AND s.mode IN ('s', 'w') AND s.expires_at "
                                       "<= c.now AND s.owner <> $2::text)";
        const auto shared_expiry = [](const char* ttl) {
            return std::string{"c.now + "} + ttl + "::bigint * interval '1 millisecond'";
        };
        const std::string time_left = "ceil(extract(epoch FROM %s - c.now) * 1000)::bigint";
        const auto left_of = [&](const std::string& at) {
            auto out = time_left;
            out.replace(out.find("%s"), 2, at);
            return out;
        };
        // One row: (fence, slot, milliseconds left, count). Granted: the next fence and,
        // for a permit, the lowest slot no live holder has. Refused for another count
        // (a live holder took it with another N): that count. Else held: the time the
        // exclusive holder has left, or for a full semaphore the first permit's.
        put_shared = "WITH " + now_and_live +
                     ", v AS MATERIALIZED (SELECT (SELECT min(permits) FROM live WHERE mode = 's' AND permits <> "
                     "$4::int) AS other_count, " + exclusive_until +
                     " AS held_until, EXISTS (SELECT 1 FROM live WHERE mode = 'w') AS writer_waits, (SELECT "
                     "count(*) FROM live WHERE mode = 's') AS sharers, (SELECT min(expires_at) FROM live WHERE "
                     "mode = 's') AS first_out, (SELECT min(n) FROM generate_series(0, $4::int - 1) n WHERE n NOT "
                     "IN (SELECT slot FROM live WHERE mode = 's')) AS free_slot, " + delayed_until +
                     " AS delayed_until), ok AS MATERIALIZED (SELECT v.*, "
                     "v.other_count IS NULL AND v.held_until IS NULL AND v.delayed_until IS NULL AND CASE WHEN $4::int = 0 THEN NOT "
                     "v.writer_waits ELSE v.sharers < $4::int END AS granted FROM v), bump AS (UPDATE " + t +
                     " l SET fence = l.fence + 1 FROM ok WHERE l.resource = $1 AND ok.granted RETURNING l.fence), " +
                     expired_go + ", added AS (INSERT INTO " + h +
                     " (resource, owner, mode, slot, permits, expires_at) SELECT $1::bytea, $2::text, 's', "
                     "coalesce(ok.free_slot, 0), $4::int, " + shared_expiry("$3") +
                     " FROM ok, c WHERE ok.granted) SELECT (SELECT fence FROM bump), CASE WHEN ok.granted AND "
                     "$4::int > 0 THEN ok.free_slot END, CASE WHEN NOT ok.granted AND ok.other_count IS NULL THEN " +
                     left_of("coalesce(ok.held_until, CASE WHEN $4::int > 0 THEN ok.first_out END)") +
                     " END, ok.other_count, CASE WHEN NOT ok.granted AND ok.other_count IS NULL AND ok.held_until IS "
                     "NULL THEN " + left_of("ok.delayed_until") + " END FROM ok, c";
        // Granted when nobody holds and no other waiter's intent is live; else the
        // waiter ($2) takes the intent, or renews its own, unless another's is live. A
        // grant ends the waiter's intent. The answer as put_shared's (no slot).
        put_exclusive = "WITH " + now_and_live +
                        ", v AS MATERIALIZED (SELECT (SELECT min(permits) FROM live WHERE mode = 's' AND permits <> "
                        "0) AS other_count, " + exclusive_until +
                        " AS held_until, " + delayed_until + " AS delayed_until, EXISTS (SELECT 1 FROM live WHERE mode = 'w' AND owner <> $2::text) AS "
                        "other_waits, EXISTS (SELECT 1 FROM live WHERE mode = 's') AS shared), ok AS MATERIALIZED "
                        "(SELECT v.*, v.other_count IS NULL AND NOT v.other_waits AND NOT v.shared AND v.held_until "
                        "IS NULL AND v.delayed_until IS NULL AS granted FROM v), took AS (UPDATE " + t +
                        " l SET owner = $3::text, expires_at = " + shared_expiry("$4") +
                        ", fence = l.fence + 1 FROM ok, c WHERE l.resource = $1 AND ok.granted RETURNING l.fence), " +
                        expired_go + ", settled AS (DELETE FROM " + h +
                        " s USING ok WHERE ok.granted AND s.resource = $1 AND s.owner = $2::text AND s.mode = 'w'), "
                        "intent AS (INSERT INTO " + h +
                        " (resource, owner, mode, slot, permits, expires_at) SELECT $1::bytea, $2::text, 'w', 0, 0, " +
                        shared_expiry("$4") +
                        " FROM ok, c WHERE NOT ok.granted AND ok.other_count IS NULL AND NOT ok.other_waits ON "
                        "CONFLICT (resource, owner) DO UPDATE SET mode = 'w', expires_at = excluded.expires_at) "
                        "SELECT (SELECT fence FROM took), NULL::integer, CASE WHEN NOT ok.granted AND "
                        "ok.other_count IS NULL THEN " + left_of("ok.held_until") + " END, ok.other_count, CASE "
                        "WHEN NOT ok.granted AND ok.other_count IS NULL AND ok.held_until IS NULL THEN " +
                        left_of("ok.delayed_until") + " END FROM ok, c";
        // A live holder of either mode: one row when extended.
        extend_shared = "WITH c AS MATERIALIZED (SELECT clock_timestamp() AS now), mine AS (UPDATE " + t +
                        " l SET expires_at = " + shared_expiry("$3") +
                        " FROM c WHERE l.resource = $1 AND l.owner = $2 AND l.expires_at > c.now RETURNING 1), ours "
                        "AS (UPDATE " + h + " s SET expires_at = " + shared_expiry("$3") +
                        " FROM c WHERE s.resource = $1 AND s.owner = $2 AND s.mode = 's' AND s.expires_at > c.now "
                        "RETURNING 1) SELECT 1 FROM mine UNION ALL SELECT 1 FROM ours";
        // A live holder of either mode goes, announced as a release (one row). It
        // only takes away, so it needs no lock of the row before it: a grant decided
        // without seeing it happened before it.
        release_shared = "WITH c AS MATERIALIZED (SELECT clock_timestamp() AS now), mine AS (UPDATE " + t +
                         " l SET owner = NULL, expires_at = NULL FROM c WHERE l.resource = $1 AND "
                         "l.owner = $2 AND l.expires_at > c.now RETURNING l.resource), ours AS (DELETE FROM " + h +
                         " s USING c WHERE s.resource = $1 AND s.owner = $2 AND s.mode = 's' AND s.expires_at > "
                         "c.now RETURNING s.resource) SELECT pg_notify($3, encode(f.resource, 'hex')) FROM (SELECT "
                         "resource FROM mine UNION ALL SELECT resource FROM ours) f";
        withdraw = "WITH gone AS (DELETE FROM " + h +
                   " s WHERE s.resource = $1 AND s.owner = $2 AND s.mode = 'w' RETURNING s.resource) SELECT "
                   "pg_notify($3, encode(resource, 'hex')) FROM gone";
        // The live exclusive holder becomes a reader with the expiry it had, in the
        // same statement (after find_row): one row when done, announced so that
        // readers come in beside it.
        downgrade = "WITH c AS MATERIALIZED (SELECT clock_timestamp() AS now), held AS MATERIALIZED (SELECT "
                    "l.expires_at FROM " + t +
                    " l, c WHERE l.resource = $1 AND l.owner = $2 AND l.expires_at > c.now), freed AS (UPDATE " + t +
                    " l SET owner = NULL, expires_at = NULL FROM held WHERE l.resource = $1 RETURNING "
                    "held.expires_at), kept AS (INSERT INTO " + h +
                    " (resource, owner, mode, slot, permits, expires_at) SELECT $1::bytea, $2::text, 's', 0, 0, "
                    "expires_at FROM freed RETURNING resource) SELECT pg_notify($3, encode(resource, 'hex')) FROM "
                    "kept";
        // Advisory mode: the key is a hash of the resource (SHA-256's first 64 bits, or
        // 32 bits beside a namespace), computed by the server, or the key a foreign
        // client takes for it (advisory_key_function): hashtext of the id as text
        // (convert_from turns the id's UTF-8 into the database's encoding, as the
        // server does with a client's text), or the integers the id is, as parameters
        // after the resource (detail/keys.hpp). The fence comes from the same table, in
        // the same statement, only when the lock was taken; its row is the id's, so
        // foreign holders, who do not write it, leave it as it was.
        // The key's arguments: one bigint, or two int4 (the namespaced and int4pair
        // forms); `after_key` is the first parameter number after them.
        std::vector<std::string> key_args;
        int after_key = 2;
        switch (key_function) {
        case advisory_key_function::sha256:
            if (namespaced) {
                key_args = {"$2::int", "('x' || substr(encode(sha256($1), 'hex'), 1, 8))::bit(32)::int"};
                after_key = 3;
            } else {
                key_args = {"('x' || substr(encode(sha256($1), 'hex'), 1, 16))::bit(64)::bigint"};
            }
            break;
        case advisory_key_function::hashtext:
            key_args = {"hashtext(convert_from($1, 'UTF8'))::bigint"};
            break;
        case advisory_key_function::bigint:
            key_args = {"$2::bigint"};
            after_key = 3;
            break;
        case advisory_key_function::int4pair:
            key_args = {"$2::int", "$3::int"};
            after_key = 4;
            break;
        }
        const std::string key = key_args.size() == 1 ? key_args[0] : key_args[0] + ", " + key_args[1];
        // The same key as pg_locks shows it: the lock tag's two 32-bit halves (classid,
        // objid) and objsubid 1 for the bigint form, 2 for the two-int4 form, in this
        // database (advisory locks are per database).
        const std::string tag_of_key =
            key_args.size() == 1
                ? "k.classid::bigint = ((" + key + ") >> 32) & 4294967295 AND k.objid::bigint = (" + key +
                      ") & 4294967295 AND k.objsubid = 1"
                : "k.classid::bigint = (" + key_args[0] + ")::bigint & 4294967295 AND k.objid::bigint = (" +
                      key_args[1] + ")::bigint & 4294967295 AND k.objsubid = 2";
        const std::string holders_of_key = "SELECT k.pid FROM pg_locks k WHERE k.locktype = 'advisory' AND "
                                           "k.database = (SELECT oid FROM pg_database WHERE datname = "
                                           "current_database()) AND " + tag_of_key +
                                           " AND k.granted AND k.mode = 'ExclusiveLock'";
        // Every statement names the resource ($1), whose type the server must know even
        // where the key is made without it.
        const std::string id_named = key_function == advisory_key_function::bigint ||
                                             key_function == advisory_key_function::int4pair
                                         ? " WHERE $1::bytea IS NOT NULL"
                                         : "";
        // An advisory grant's lock-delay mark lives in the lease row, beside the fence
        // that every distlock grant bumps there: the marked grant's delay (delay_ms) and
        // its fence negated (delay_fence), so that the lease table's own marks (positive
        // fences, on rows with an owner) and this one are never read for each other.
        // The grant's own session writes it (advisory_arm) and takes it out in its
        // release, before it lets go of the lock; a mark still there when the lock is
        // next taken, with the fence unchanged since, belongs to a grant that ended
        // without a release (with its session). Its tombstone starts then: the first
        // sighting (the server's clock) + the delay, kept in expires_at (which rows
        // without an owner do not otherwise use), so that every later attempt judges by
        // the same end. Read through the row as JSON, as the lease table's marks are: a
        // table without those columns keeps its locks, and only advisory_arm fails.
        const std::string advisory_mark = "(f.owner IS NULL AND (to_jsonb(f) ->> 'delay_fence')::bigint = -f.fence AND "
                                          "(to_jsonb(f) ->> 'delay_ms') IS NOT NULL)";
        const std::string tombstone_until = "coalesce(f.expires_at, (SELECT now FROM c) + least(greatest((to_jsonb(f) "
                                            "->> 'delay_ms')::bigint, 0), " + std::to_string(max_wait_ms) +
                                            ") * interval '1 millisecond')";
        const std::string in_tombstone = "(" + advisory_mark + " AND " + tombstone_until + " > (SELECT now FROM c))";
        // The record of the resource's advisory election (docs/postgres.md, Elections):
        // the backend process that holds the exclusive grant a candidate took
        // (pg_backend_pid()), that grant's fence and owner and the value it proclaimed.
        // A candidate's grant writes it in the transaction that takes the lock, after
        // the statement that locks this row (advisory_row), so that a reader that locks
        // it (advisory_leader_lock) sees the grant's lock and its record together or
        // neither; a proclaim of the holder rewrites it. Plain locks never touch it.
        const auto& a = this->advisory;
        create_advisory = "CREATE TABLE IF NOT EXISTS " + a +
                          " (resource bytea PRIMARY KEY, pid integer, fence bigint, owner text, value bytea)";
        advisory_row = "INSERT INTO " + a + " AS s (resource) VALUES ($1) ON CONFLICT (resource) DO UPDATE SET pid = "
                       "s.pid";
        // A grant, decided in the statement that takes the lock (`got`: a try's
        // answer, or true after a wait): the lease row's next fence, unless that row
        // holds the mark of a grant that ended unreleased and its tombstone lasts;
        // then the lock is given back in this statement and the answer is the time
        // left. The row is read through the upsert, which sees its latest version
        // whatever the statement's snapshot (taken before the lock came): a mark its
        // holder wrote before it ended is found however late it was written. With
        // `recording` (an election's candidate, exclusive only), the grant is also
        // recorded: this session's pid, the fence, the owner ($after_key) and the
        // candidate's value ($after_key + 1). One row: (fence when granted, NULL,
        // milliseconds of the tombstone left, from the same reading of the clock as the
        // decision, so never 0 when the lock was given back).
        // `take` is the statement's first step, one row of `got`: a try's answer, true
        // once a wait in the server has the lock, or true for a grant taken by an
        // earlier statement. After a wait (`waited`), lock_timeout is turned off before
        // anything else locks: the upsert must not time out as if the lock were not
        // taken (the session would hold it while the answer said held).
        const auto decide = [&](const std::string& take, bool exclusive, bool recording, bool waited = false) {
            const std::string unlock = exclusive ? "pg_advisory_unlock(" : "pg_advisory_unlock_shared(";
            std::string s = "WITH l AS MATERIALIZED (" + take + "), c AS MATERIALIZED (SELECT clock_timestamp() AS now" +
                            (waited ? ", set_config('lock_timeout', '0', true) FROM l" : std::string{}) +
                            "), g AS (INSERT INTO " + t +
                            " AS f (resource, fence) SELECT $1, 1 FROM l, c WHERE l.got ON CONFLICT (resource) DO "
                            "UPDATE SET fence = f.fence + CASE WHEN " + in_tombstone + " THEN 0 ELSE 1 END, expires_at = "
                            "CASE WHEN " + in_tombstone + " THEN " + tombstone_until +
                            " ELSE f.expires_at END RETURNING f.fence, " + advisory_mark +
                            " AND f.expires_at IS NOT NULL AS delayed, f.expires_at AS until), u AS MATERIALIZED (SELECT " +
                            unlock + key + ") FROM g WHERE g.delayed)";
            std::string counted = "(SELECT count(*) FROM u)";
            if (recording) {
                s += ", w AS (UPDATE " + a + " s SET pid = pg_backend_pid(), fence = g.fence, owner = $" +
                     std::to_string(after_key) + "::text, value = $" + std::to_string(after_key + 1) +
                     "::bytea FROM g WHERE s.resource = $1 AND NOT g.delayed RETURNING 1)";
                counted += ", (SELECT count(*) FROM w)";
            }
            return s + " SELECT (SELECT fence FROM g WHERE NOT g.delayed), NULL::bigint, (SELECT ceil(extract(epoch "
                       "FROM g.until - c.now) * 1000)::bigint FROM g, c WHERE g.delayed), " + counted;
        };
        const auto tried = [&](const std::string& function) { return "SELECT " + function + "(" + key + ") AS got"; };
        const auto waited_for = [&](const std::string& function) {
            return "SELECT true AS got FROM (SELECT " + function + "(" + key + ")) w";
        };
        advisory_try = decide(tried("pg_try_advisory_lock"), true, false);
        advisory_try_shared = decide(tried("pg_try_advisory_lock_shared"), false, false);
        advisory_try_recording = decide(tried("pg_try_advisory_lock"), true, true);
        // A wait and its grant are one statement: the waiter's grant needs no step
        // after the lock comes but the upsert.
        advisory_wait = decide(waited_for("pg_advisory_lock"), true, false, true);
        advisory_wait_shared = decide(waited_for("pg_advisory_lock_shared"), false, false, true);
        // A candidate's wait is a statement of its own, then the record's row lock, then
        // its grant (decided as after a try, with the lock already taken): the record
        // must be locked before the lock is taken, for leader() to see both or neither.
        advisory_wait_plain = "SELECT pg_advisory_lock(" + key + ")" + id_named;
        advisory_granted_recording = decide("SELECT true AS got", true, true);
        wait_limits = "SELECT set_config('lock_timeout', $1, true), set_config('statement_timeout', $2, true)";
        // After a candidate's wait: the row locks that follow wait without lock_timeout,
        // so that the only lock_not_available the request can answer is the wait's own.
        wait_unlimited = "SELECT set_config('lock_timeout', '0', true)";
        // A release lets go of the lock; a grant that was marked (or recorded) first
        // takes its mark out of the lease row (its pid out of the record), in the same
        // statement, so that the next holder never finds a released grant's mark. A
        // session knows whether it marked or recorded its grant, so plain releases
        // write nothing.
        const std::string unmark = "m AS (UPDATE " + t +
                                   " SET delay_ms = NULL, delay_fence = NULL WHERE resource = $1 AND owner IS NULL AND "
                                   "delay_fence < 0 RETURNING 1)";
        const std::string unrecord = "w AS (UPDATE " + a +
                                     " SET pid = NULL WHERE resource = $1 AND pid = pg_backend_pid() RETURNING 1)";
        advisory_unlock = "SELECT pg_advisory_unlock(" + key + ")" + id_named;
        advisory_unlock_recorded =
            "WITH " + unrecord + " SELECT pg_advisory_unlock(" + key + ") FROM (SELECT count(*) FROM w) x";
        advisory_unlock_marked = "WITH " + unrecord + ", " + unmark + " SELECT pg_advisory_unlock(" + key +
                                 ") FROM (SELECT (SELECT count(*) FROM w) + (SELECT count(*) FROM m)) x";
        advisory_unlock_shared = "SELECT pg_advisory_unlock_shared(" + key + ")" + id_named;
        // The session that holds the lock exclusively takes it shared too, then lets
        // the exclusive one go: a writer waiting in the server waits for the holder,
        // so the holder's request is granted ahead of it, and no writer comes between.
        // The exclusive grant's record and mark go first, as in a release.
        advisory_downgrade = "WITH " + unrecord + ", s AS MATERIALIZED (SELECT pg_advisory_lock_shared(" + key +
                             ") FROM (SELECT count(*) FROM w) x) SELECT pg_advisory_unlock(" + key + ") FROM s";
        advisory_downgrade_marked = "WITH " + unrecord + ", " + unmark +
                                    ", s AS MATERIALIZED (SELECT pg_advisory_lock_shared(" + key +
                                    ") FROM (SELECT (SELECT count(*) FROM w) + (SELECT count(*) FROM m)) x) SELECT "
                                    "pg_advisory_unlock(" + key + ") FROM s";
        // The holder's own session marks its grant ($2 its fence, $3 the delay in
        // milliseconds): while it holds the lock exclusively no other grant bumps the
        // fence, so the fence names the grant. A lease row with an owner belongs to the
        // lease table's own grants, never marked from here.
        advisory_arm = "UPDATE " + t + " SET delay_ms = $3, delay_fence = -$2::bigint, expires_at = NULL WHERE "
                       "resource = $1 AND fence = $2 AND owner IS NULL";
        // The holder's own session keeps its value ($3) in the record with its pid,
        // fence ($2) and owner ($4), while the lease row's fence is still its grant's.
        advisory_proclaim = "INSERT INTO " + a + " AS s (resource, pid, fence, owner, value) SELECT $1, "
                            "pg_backend_pid(), $2, $4, $3 FROM " + t + " f WHERE f.resource = $1 AND f.fence = $2 "
                            "AND f.owner IS NULL ON CONFLICT (resource) DO UPDATE SET pid = excluded.pid, fence = "
                            "excluded.fence, owner = excluded.owner, value = excluded.value";
        // Who leads: the record's row locked first (FOR SHARE: a candidate's grant being
        // recorded is waited for), then, with a snapshot taken after that, the exclusive
        // holders pg_locks shows, the record and the lease row's fence. The record names
        // the holder when its pid is the holder's and its fence still the lease row's
        // (every distlock grant since would have bumped it, so a record left by an
        // ended session is not taken for a later holder that has its pid). One row:
        // (holders, 1 when the record names the holder, the record's fence, owner and
        // value in hex, the lease row's fence).
        advisory_leader_lock = "SELECT 1 FROM " + a + " WHERE resource = $1 FOR SHARE";
        advisory_leader = "WITH h AS MATERIALIZED (" + holders_of_key +
                          "), lf AS MATERIALIZED (SELECT f.fence FROM " + t +
                          " f WHERE f.resource = $1) SELECT (SELECT count(*) FROM h), CASE WHEN s.pid IN (SELECT pid "
                          "FROM h) AND s.fence = (SELECT fence FROM lf) THEN 1 ELSE 0 END, s.fence, s.owner, "
                          "encode(s.value, 'hex'), (SELECT fence FROM lf) FROM (SELECT 1) one LEFT JOIN " + a +
                          " s ON s.resource = $1";
        // A semaphore's permits: permit k of N is the exclusive lock of a key of its own
        // (a hash of the resource and k, from other bits of SHA-256 than the mutex's
        // key), and each holder holds the shared lock of the count's key (the resource
        // and -N) beside it. The count the holders took is kept in the holders table
        // ('n'). A permit is taken under the lease row's lock (take_row first), so takers
        // are one at a time: one with another N than the kept one is refused while
        // anyone holds the kept count's key (tried exclusively, let go at once), and
        // otherwise keeps its own. Slots are tried in order, the first free one taken
        // (a recursive query stops there); the fence is the row's next. One row:
        // (fence, slot, null, the kept count when refused for it).
        // Only under sha256: a permit under the other key functions is refused before
        // any statement (detail/keys.hpp says why), and these stay empty.
        if (key_function != advisory_key_function::sha256)
            return;
        const std::string n = namespaced ? "$3::int" : "$2::int";
        const auto sub_key = [&](const std::string& of) {
            const std::string digest = "encode(sha256($1::bytea || int4send(" + of + ")), 'hex')";
            return namespaced ? "$2::int, ('x' || substr(" + digest + ", 9, 8))::bit(32)::int"
                              : "('x' || substr(" + digest + ", 17, 16))::bit(64)::bigint";
        };
        advisory_permit =
            "WITH RECURSIVE kept AS MATERIALIZED (SELECT (SELECT permits FROM " + h +
            " WHERE resource = $1 AND mode = 'n') AS count), agreed AS MATERIALIZED (SELECT kept.count, CASE WHEN "
            "kept.count IS NULL OR kept.count = " + n + " THEN true WHEN pg_try_advisory_lock(" +
            sub_key("-kept.count") + ") THEN pg_advisory_unlock(" + sub_key("-kept.count") +
            ") ELSE false END AS ok FROM kept), tries(slot, got) AS (SELECT 0, pg_try_advisory_lock(" + sub_key("0") +
            ") FROM agreed WHERE agreed.ok UNION ALL SELECT t.slot + 1, pg_try_advisory_lock(" + sub_key("t.slot + 1") +
            ") FROM tries t WHERE NOT t.got AND t.slot + 1 < " + n +
            "), won AS MATERIALIZED (SELECT slot, pg_advisory_lock_shared(" + sub_key("-" + n) +
            ") FROM tries WHERE got), bump AS (UPDATE " + t +
            " f SET fence = f.fence + 1 FROM won WHERE f.resource = $1 RETURNING f.fence), noted AS (INSERT INTO " + h +
            " (resource, owner, mode, slot, permits, expires_at) SELECT $1::bytea, '', 'n', 0, " + n +
            ", 'infinity' FROM won, agreed WHERE agreed.count IS DISTINCT FROM " + n +
            " ON CONFLICT (resource, owner) DO UPDATE SET permits = excluded.permits) SELECT (SELECT fence FROM bump), "
            "(SELECT slot FROM won), NULL::bigint, CASE WHEN NOT agreed.ok THEN agreed.count END FROM agreed";
        // Both locks of a permit go ($k: its slot, $k+1: its count): true when both were held.
        const std::string slot_param = namespaced ? "$3::int" : "$2::int";
        const std::string count_param = namespaced ? "$4::int" : "$3::int";
        advisory_unlock_permit = "WITH a AS MATERIALIZED (SELECT pg_advisory_unlock(" + sub_key(slot_param) +
                                 ") AS slot_freed), b AS MATERIALIZED (SELECT pg_advisory_unlock_shared(" +
                                 sub_key("-" + count_param) +
                                 ") AS count_freed) SELECT a.slot_freed AND b.count_freed FROM a, b";
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

    /// The tables, in the order they are created.
    std::vector<std::string> creates() const { return {create, upgrade, create_holders, create_advisory}; }

    std::string table, holders, channel;
    std::string create, upgrade, create_holders, acquire, acquire_all, extend, release, release_all, read, list, revoke;
    std::string arm_delay;
    std::string proclaim, leader;
    std::string take_row, find_row, put_shared, put_exclusive, extend_shared, release_shared, withdraw, downgrade;
    std::string advisory;
    std::string create_advisory, advisory_row, wait_unlimited;
    std::string advisory_try_recording, advisory_granted_recording, advisory_wait_plain;
    std::string advisory_arm, advisory_proclaim, advisory_leader_lock, advisory_leader;
    std::string advisory_try, advisory_wait, advisory_unlock, wait_limits;
    std::string advisory_unlock_recorded, advisory_unlock_marked, advisory_downgrade_marked;
    std::string advisory_try_shared, advisory_wait_shared, advisory_unlock_shared, advisory_downgrade;
    std::string advisory_permit, advisory_unlock_permit;
};

} // namespace distlock::postgres::detail
