// distlock/redis/config.hpp: how to reach one Redis server.
#pragma once

#include <distlock/backend/url.hpp>
#include <distlock/clock.hpp>
#include <distlock/error.hpp>
#include <distlock/options.hpp>
#include <distlock/redis/node_address.hpp>
#include <distlock/result.hpp>
#include <distlock/transport/stream.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace distlock::redis {

/// How the servers behind one store are arranged.
enum class topology {
    single,   ///< One server at host:port (or unix_socket).
    cluster,  ///< A Redis Cluster, learned from config::cluster_nodes.
    sentinel, ///< A primary with replicas, found through config::sentinels.
};

/// Which keys and values a lock is made of (docs/redis.md, "Layouts").
enum class dialect {
    /// distlock's own: the lock key `<prefix>:{#<resource>}:lock` holds
    /// "<owner>:<fencing token>", beside a fair queue and shared holders of its own.
    distlock,
    /// The Redlock recipe of node-redlock, go-redsync, redis-py's Lock and the
    /// Redis documentation: the lock key is the resource id itself, its value the
    /// owner token (32 hex characters), taken with SET NX PX and given back by
    /// compare-and-delete, so that distlock and those clients exclude each other on
    /// one resource. distlock keeps its fencing token in a key of its own in the lock
    /// key's hash slot. Exclusive locks only: fair queues and shared grants are
    /// refused (errc::invalid_argument), as the recipe has neither.
    plain,
};

/// Connection settings of one Redis server, a Redis Cluster or a primary watched by
/// Sentinels. Everything but the addresses applies to every server reached.
struct config {
    std::string host = "127.0.0.1";
    std::uint16_t port = 6379;
    std::string unix_socket;            ///< If set, connect here instead of host:port.

    std::string username;               ///< ACL user (AUTH user password); empty: AUTH password.
    std::string password;               ///< Empty: no AUTH.
    int database = 0;                   ///< SELECT'ed after connecting when not 0.

    bool tls = false;                   ///< TLS over TCP (asio::ssl, OpenSSL).
    std::string tls_ca_file;            ///< Trusted CA certificates (PEM); empty: system defaults.
    bool tls_verify_peer = true;        ///< Verify the server's certificate and host name.
    std::string tls_server_name;        ///< SNI and verified name; empty: `host`.
    std::string tls_cert_file;          ///< Client certificate (PEM) for mutual TLS.
    std::string tls_key_file;           ///< Its private key (PEM).

    /// Bounds connecting and the handshake. Must lie in (0, distlock::max_wait].
    duration connect_timeout = std::chrono::seconds{2};
    /// A request without a reply after this long fails with errc::outcome_unknown and
    /// the connection is dropped (a server that stopped answering). Must lie in
    /// (0, distlock::max_wait].
    duration request_timeout = std::chrono::seconds{2};

    /// Keys are `<prefix>:{#<resource>}:<kind>`, and `<prefix>:{<slot tag>}:fence` for
    /// the fencing tokens of a hash slot's resources (layout in redis/scripts.hpp).
    std::string key_prefix = "distlock";

    /// A resource id's own hash tag, as in "{order:7}:payment", picks the Redis
    /// Cluster slot of its keys: resources sharing a tag live on one node, and a
    /// multi-lock over them is one script. Off: every resource is its own tag (the
    /// default; switching changes every tagged resource's keys, so all clients of a
    /// resource must agree). Layout in redis/scripts.hpp.
    bool hash_tags = false;

    /// The keys and values of a lock: distlock's own (the default), or the plain
    /// Redlock recipe's, shared with other Redis lock clients (redis::dialect::plain:
    /// the lock key is the resource id verbatim, and key_prefix names only distlock's
    /// fence, holder and channel keys beside it; hash_tags has no effect, a key's own
    /// hash tag picks its slot as Redis reads it). All distlock clients of a resource
    /// must use one dialect. URL: `?dialect=plain` or `?dialect=distlock`.
    redis::dialect dialect = redis::dialect::distlock;

    /// Command connections to one server (a single server only). Requests take them
    /// in turn, and each has a strand of its own, so an io_context run on several
    /// threads drives them in parallel, where one connection's requests all pass
    /// through one strand. 1 to 64; more than 1 only without cluster_nodes,
    /// sentinels and wait_replicas (WAIT counts the writes of its own connection).
    /// execute() commands that rely on a connection's state (MULTI, WATCH) need 1.
    std::size_t connections = 1;

    /// acquire::fair: how long a waiter keeps its place in a resource's queue without
    /// asking again. A waiting lock() asks at least every third of it, so a live waiter
    /// never loses its place; a waiter that vanished (crashed, partitioned) holds up the
    /// line at most this long. Must lie in [3 ms, distlock::max_wait].
    duration queue_ttl = std::chrono::seconds{3};

    /// acquire::fair: how long the store keeps listening for a resource's hand-overs
    /// after its last waiter there left. A process that locks the same resource again
    /// within it needs no SUBSCRIBE, and its waiter takes its place in line in the
    /// first try (one script instead of two). Zero: unsubscribe at once. At most 64
    /// idle channels linger per connection. Must lie in [0, distlock::max_wait].
    duration listen_linger = std::chrono::seconds{1};

    /// After a grant, `WAIT wait_replicas wait_timeout`: the lock is reported only once
    /// that many replicas have acknowledged it, else it fails with errc::not_replicated
    /// (and is given back). This narrows, not closes, the window in which a failover
    /// to a replica that never saw the grant loses the lock (docs/redis.md). WAIT holds
    /// the store's one connection while it waits: keep `wait_timeout` short. 0: no WAIT.
    int wait_replicas = 0;
    /// How long a WAIT may take; in (0, request_timeout) when wait_replicas > 0.
    duration wait_timeout = std::chrono::milliseconds{100};

    /// Redis Cluster: a few of its nodes (any: primaries or replicas), to learn the
    /// slot map from. Not empty: each lock goes to the primary of its key's slot,
    /// MOVED and ASK are followed, and host, port and unix_socket are not used.
    std::vector<node_address> cluster_nodes;

    /// Redis Sentinel: the Sentinels to ask, in order, where the primary named
    /// `sentinel_master` is. Not empty: the store talks to that primary only, and
    /// asks again after +switch-master, a refused write (READONLY) or a primary that
    /// cannot be reached. host, port and unix_socket are not used.
    std::vector<node_address> sentinels;
    std::string sentinel_master;   ///< The primary's name in the Sentinels' configuration.
    std::string sentinel_username; ///< ACL user for the Sentinels; empty: AUTH password.
    std::string sentinel_password; ///< Empty: no AUTH to the Sentinels.

    /// Translates an address a cluster or a Sentinel announces into the one to connect
    /// to: servers behind NAT, in containers, through a tunnel. Empty: as announced.
    std::function<node_address(const node_address&)> address_map;

    /// Which arrangement of servers the settings describe.
    redis::topology topology() const noexcept
    {
        if (!cluster_nodes.empty())
            return redis::topology::cluster;
        return sentinels.empty() ? redis::topology::single : redis::topology::sentinel;
    }

    /// The settings of one server of the cluster (or the primary Sentinel named):
    /// these settings at `at`, an address to connect to as it is (a seed, or an
    /// announced address already through address_map).
    config node(const node_address& at) const
    {
        config c = *this;
        c.host = at.host;
        c.port = at.port;
        c.unix_socket.clear();
        c.cluster_nodes.clear();
        c.sentinels.clear();
        c.address_map = nullptr;
        return c;
    }

    /// The settings of one Sentinel: its own credentials, no database, no WAIT.
    config sentinel(const node_address& at) const
    {
        config c = node(at);
        c.username = sentinel_username;
        c.password = sentinel_password;
        c.database = 0;
        c.wait_replicas = 0;
        return c;
    }

    /// Where and how the transport connects.
    transport::endpoint endpoint() const
    {
        return {.host = host,
                .port = port,
                .unix_socket = unix_socket,
                .tls = tls,
                .tls_ca_file = tls_ca_file,
                .tls_verify_peer = tls_verify_peer,
                .tls_server_name = tls_server_name,
                .tls_cert_file = tls_cert_file,
                .tls_key_file = tls_key_file,
                .connect_timeout = connect_timeout};
    }

    /// Checks the settings without I/O: errc::invalid_argument for a timeout outside
    /// (0, distlock::max_wait] (zero would fail every request at once; near the
    /// clock's range "now + timeout" overflows) or a negative database. A store whose
    /// settings fail this answers every request with that error and never connects.
    std::error_code validate() const noexcept
    {
        const auto in_range = [](duration d) { return d > duration::zero() && d <= max_wait; };
        if (!in_range(connect_timeout) || !in_range(request_timeout) || database < 0 || wait_replicas < 0)
            return errc::invalid_argument;
        if (queue_ttl < std::chrono::milliseconds{3} || queue_ttl > max_wait)
            return errc::invalid_argument;
        if (listen_linger < duration::zero() || listen_linger > max_wait)
            return errc::invalid_argument;
        if (dialect != redis::dialect::distlock && dialect != redis::dialect::plain)
            return errc::invalid_argument;
        if (connections < 1 || connections > 64 ||
            (connections > 1 && (!cluster_nodes.empty() || !sentinels.empty() || wait_replicas > 0)))
            return errc::invalid_argument;
        // WAIT's timeout is whole milliseconds (0 would mean "forever"), and its reply
        // must come before the request timeout drops the connection.
        if (wait_replicas > 0 && (wait_timeout < std::chrono::milliseconds{1} || wait_timeout >= request_timeout))
            return errc::invalid_argument;
        // A cluster has one database; a Sentinel setup needs the primary's name. An
        // address without a host or port could never connect.
        const auto unusable = [](const node_address& a) { return a.host.empty() || a.port == 0; };
        if (!cluster_nodes.empty() && (!sentinels.empty() || database != 0))
            return errc::invalid_argument;
        if (!sentinels.empty() && sentinel_master.empty())
            return errc::invalid_argument;
        for (const auto& list : {&cluster_nodes, &sentinels})
            for (const auto& a : *list)
                if (unusable(a))
                    return errc::invalid_argument;
        return {};
    }

    /// Parses a URL (the grammar is in distlock/backend/url.hpp; nothing is
    /// percent-decoded):
    /// - `redis://[user:password@]host[:port][/db]`, port 6379 by default; `rediss://`
    ///   for TLS. User information without ':' is the password alone.
    /// - `unix://path[?db=N]`: a Unix socket (`unix:///run/redis.sock`).
    /// - `redis+cluster://[user:password@]host:port[,host:port...]`: the nodes of a
    ///   Redis Cluster to start from (every port written; no database).
    /// - `redis+sentinel://[user:password@]host:port[,host:port...]/primary-name[/db]`:
    ///   the Sentinels, and the name of the primary they watch (the credentials are the
    ///   data nodes').
    ///
    /// The cluster and Sentinel forms take `rediss+` for TLS. Every form takes
    /// `?dialect=plain` or `?dialect=distlock` (config::dialect). A URL that is malformed
    /// (or names a database outside 0 to 2147483647) is errc::invalid_argument, with
    /// `*why` (when not null) saying what is wrong and where.
    static result<config> from_url(std::string_view url, std::string* why = nullptr)
    {
        const auto scheme = backend::url_scheme(url);
        if (scheme == "unix")
            return from_socket_url(url, why);
        if (scheme == "redis+cluster" || scheme == "rediss+cluster" || scheme == "redis+sentinel" ||
            scheme == "rediss+sentinel")
            return from_multi_url(url, why);
        if (scheme != "redis" && scheme != "rediss")
            return backend::refused(why, (scheme.empty() ? std::string{"no scheme"}
                                                         : "scheme " + backend::quoted(scheme) + " is not Redis's") +
                                             ": expected redis://, rediss://, unix://, redis+cluster://, "
                                             "rediss+cluster://, redis+sentinel:// or rediss+sentinel://");
        backend::url_rules rules;
        rules.schemes = {"redis", "rediss"};
        rules.default_port = 6379;
        rules.userinfo = true;
        rules.path = true; // the database
        std::optional<backend::parsed_url> query;
        if (auto ec = split_query(url, query, why))
            return ec;
        auto parsed = backend::parse_url(url, rules, why);
        if (!parsed)
            return parsed.error();
        config c;
        if (query)
            if (auto ec = c.take_dialect(*query, why))
                return ec;
        c.tls = parsed->scheme == "rediss";
        c.take_credentials(*parsed);
        c.host = parsed->hosts[0].host;
        c.port = parsed->hosts[0].port;
        if (auto ec = c.take_database(parsed->path, why))
            return ec;
        return c;
    }

private:
    // User information without ':' is the password alone (AUTH password).
    void take_credentials(const backend::parsed_url& url)
    {
        if (url.password) {
            username = url.user;
            password = *url.password;
        } else {
            password = url.user;
        }
    }

    // The query of a redis://, rediss://, cluster or Sentinel URL begins at the first
    // '?' after the user information: a password may hold a '?' (it always could),
    // and the user information ends at the last '@'. The query is parsed on its own
    // by the URL grammar's rules (known keys only, each once) into `query`, and `url`
    // keeps what comes before it.
    static std::error_code split_query(std::string_view& url, std::optional<backend::parsed_url>& query,
                                       std::string* why)
    {
        const auto scheme = backend::url_scheme(url);
        auto from = scheme.size() + 3; // "<scheme>://"
        if (const auto at = url.rfind('@'); at != std::string_view::npos && at >= from)
            from = at + 1;
        const auto mark = url.find('?', from);
        if (mark == std::string_view::npos)
            return {};
        backend::url_rules rules;
        rules.schemes = {scheme};
        rules.default_port = 1;
        rules.query_keys = {"dialect"};
        const auto alone = std::string{scheme} + "://query" + std::string{url.substr(mark)};
        auto parsed = backend::parse_url(alone, rules, why);
        if (!parsed)
            return parsed.error();
        query = std::move(parsed).value();
        url = url.substr(0, mark);
        return {};
    }

    // "?dialect=plain" or "?dialect=distlock"; nothing keeps the default.
    std::error_code take_dialect(backend::parsed_url& url, std::string* why)
    {
        const auto pair = backend::take_query(url, "dialect");
        if (!pair)
            return {};
        if (pair->value == "plain")
            dialect = redis::dialect::plain;
        else if (pair->value == "distlock")
            dialect = redis::dialect::distlock;
        else
            return backend::refused(why, "dialect " + backend::quoted(pair->value) + ": expected plain or distlock");
        return {};
    }

    // "/db", "/" or nothing (database 0).
    std::error_code take_database(std::string_view path, std::string* why)
    {
        if (path.starts_with('/'))
            path.remove_prefix(1);
        if (path.empty())
            return {};
        const auto n = backend::decimal(path, 0, std::numeric_limits<int>::max());
        if (!n)
            return backend::refused(why, "database " + backend::quoted(path) +
                                             ": expected a whole decimal number from 0 to 2147483647");
        database = *n;
        return {};
    }

    static result<config> from_socket_url(std::string_view url, std::string* why)
    {
        backend::url_rules rules;
        rules.schemes = {"unix"};
        rules.socket_path = true;
        rules.query_keys = {"db", "dialect"};
        auto parsed = backend::parse_url(url, rules, why);
        if (!parsed)
            return parsed.error();
        config c;
        if (auto ec = c.take_dialect(*parsed, why))
            return ec;
        c.unix_socket = parsed->path;
        if (const auto db = backend::take_query(*parsed, "db")) {
            const auto n = backend::query_number(*db, 0, std::numeric_limits<int>::max(), why);
            if (!n)
                return n.error();
            c.database = *n;
        }
        return c;
    }

    static result<config> from_multi_url(std::string_view url, std::string* why)
    {
        const bool sentinel = backend::url_scheme(url).ends_with("+sentinel");
        backend::url_rules rules;
        rules.schemes = {"redis+cluster", "rediss+cluster", "redis+sentinel", "rediss+sentinel"};
        rules.default_port = 0; // every address names its port
        rules.several_hosts = true;
        rules.userinfo = true;
        rules.path = sentinel; // the primary's name, and the database
        std::optional<backend::parsed_url> query;
        if (auto ec = split_query(url, query, why))
            return ec;
        auto parsed = backend::parse_url(url, rules, why);
        if (!parsed)
            return parsed.error();
        config c;
        if (query)
            if (auto ec = c.take_dialect(*query, why))
                return ec;
        c.tls = parsed->scheme.starts_with("rediss");
        c.take_credentials(*parsed);
        auto& list = sentinel ? c.sentinels : c.cluster_nodes;
        for (const auto& h : parsed->hosts)
            list.push_back(node_address{h.host, h.port});
        if (sentinel) {
            // "/primary-name[/db]"
            std::string_view path = parsed->path;
            if (path.starts_with('/'))
                path.remove_prefix(1);
            const auto slash = path.find('/');
            const auto name = path.substr(0, slash);
            if (name.empty())
                return backend::refused(why, "no primary name after the Sentinels (" + parsed->scheme +
                                                 "://host:port,.../primary-name[/db])");
            c.sentinel_master = std::string{name};
            if (slash != std::string_view::npos)
                if (auto ec = c.take_database(path.substr(slash), why))
                    return ec;
        }
        return c;
    }
};

} // namespace distlock::redis
