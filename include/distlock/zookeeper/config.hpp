// distlock/zookeeper/config.hpp: how to reach a ZooKeeper ensemble, and the session
// the store keeps there.
#pragma once

#include <distlock/backend/url.hpp>
#include <distlock/clock.hpp>
#include <distlock/error.hpp>
#include <distlock/options.hpp>
#include <distlock/result.hpp>
#include <distlock/transport/stream.hpp>
#include <distlock/zookeeper/dialect.hpp>

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace distlock::zookeeper {

/// One server's client port.
using server = backend::server_address<2181>;

struct config {
    /// The ensemble's servers. The session starts on the first that answers and moves
    /// to the next when its server stops answering (it stays the same session).
    std::vector<server> servers{server{}};
    /// Prepended to every path the store uses ("" or "/app"): the client's view of the
    /// tree starts there, as ZooKeeper's own clients' chroot does.
    std::string chroot;
    /// The node under the chroot that holds one child per resource (docs/zookeeper.md:
    /// the node layout).
    std::string prefix = "/distlock";
    /// The names this store gives its nodes. Every dialect reads the others' nodes, so
    /// a fleet may mix them; a semaphore's permits are named the same way in each
    /// (`__PERM_<N>__` before the sequence number), a layout only distlock speaks.
    zookeeper::dialect dialect = default_dialect;
    /// The session timeout asked for. The server clamps it into its own range (2 to 20
    /// ticks by default) and the store uses the timeout the server granted: a crashed
    /// holder's lock is freed within it, and a holder cut off from the ensemble is told
    /// its lease is in doubt after 2/3 of it.
    duration session_timeout = std::chrono::seconds{10};
    /// Subtracted from the session's validity (scheduling, clock rate error).
    duration drift = std::chrono::milliseconds{10};
    /// Bounds connecting to one server and its handshake. In (0, distlock::max_wait].
    duration connect_timeout = std::chrono::seconds{2};
    /// A request without its reply after this long is errc::outcome_unknown and the
    /// connection is dropped (the session moves to the next server). In (0, max_wait].
    duration request_timeout = std::chrono::seconds{3};
    /// Digest authentication ("digest" scheme, user:password) sent on every connection.
    /// With credentials, the nodes the store creates carry the creator's ACL: only
    /// sessions authenticated as the same user can lock under them.
    std::string username;
    std::string password;

    /// errc::invalid_argument for settings that cannot work: no server, a server
    /// without host or port, a chroot or prefix that is not a valid absolute path
    /// ("/a/b": printable ASCII, no empty, "." or ".." component, no trailing
    /// '/'; the chroot may be empty), a prefix at or under /zookeeper, a session
    /// timeout outside [100 ms, 1 h] or not whole milliseconds, a drift not within
    /// [0, timeout), timeouts outside (0, max_wait], a password without a user, a user
    /// name with ':' or either with control characters, a dialect that is none of the
    /// enum's.
    std::error_code validate() const noexcept
    {
        if (dialect != zookeeper::dialect::curator && dialect != zookeeper::dialect::kazoo &&
            dialect != zookeeper::dialect::distlock && dialect != zookeeper::dialect::latch)
            return errc::invalid_argument;
        const auto in_range = [](duration d) { return d > duration::zero() && d <= max_wait; };
        if (servers.empty())
            return errc::invalid_argument;
        for (const auto& s : servers)
            if (s.host.empty() || s.port == 0)
                return errc::invalid_argument;
        if ((!chroot.empty() && !valid_path(chroot)) || !valid_path(prefix))
            return errc::invalid_argument;
        if (chroot.empty() && (prefix == "/zookeeper" || prefix.starts_with("/zookeeper/")))
            return errc::invalid_argument;
        if (session_timeout < std::chrono::milliseconds{100} || session_timeout > std::chrono::hours{1} ||
            session_timeout % std::chrono::milliseconds{1} != duration::zero())
            return errc::invalid_argument;
        if (drift < duration::zero() || drift >= session_timeout)
            return errc::invalid_argument;
        if (!in_range(connect_timeout) || !in_range(request_timeout))
            return errc::invalid_argument;
        if (username.empty() && !password.empty())
            return errc::invalid_argument;
        if (username.find(':') != std::string::npos)
            return errc::invalid_argument;
        for (const auto* s : {&username, &password})
            for (const char c : *s)
                if (static_cast<unsigned char>(c) < 0x20)
                    return errc::invalid_argument;
        return {};
    }

    /// The path of the node that holds the resources' nodes, as the server sees it.
    std::string root() const { return chroot + prefix; }

    transport::endpoint endpoint(std::size_t i) const
    {
        return {.host = servers[i].host,
                .port = servers[i].port,
                .unix_socket = {},
                .tls = false,
                .tls_ca_file = {},
                .tls_verify_peer = true,
                .tls_server_name = {},
                .tls_cert_file = {},
                .tls_key_file = {},
                .connect_timeout = connect_timeout};
    }

    /// Parses `zk://[user[:password]@]host[:port][,host[:port]...][/chroot][?prefix=/P&timeout=MS&dialect=D]`
    /// (port 2181 by default; a lone '/' is no chroot; D one of curator, kazoo, distlock, latch). The grammar is in
    /// distlock/backend/url.hpp: IPv6 hosts in brackets, nothing percent-decoded. A URL
    /// that is malformed or whose settings fail validate() is errc::invalid_argument,
    /// with `*why` (when not null) saying what is wrong and where.
    static result<config> from_url(std::string_view url, std::string* why = nullptr)
    {
        backend::url_rules rules;
        rules.schemes = {"zk"};
        rules.default_port = 2181;
        rules.several_hosts = true;
        rules.userinfo = true;
        rules.path = true; // the chroot
        rules.query_keys = {"prefix", "timeout", "dialect"};
        auto parsed = backend::parse_url(url, rules, why);
        if (!parsed)
            return parsed.error();
        constexpr const char* path_rule = " is not an absolute path ZooKeeper accepts (\"/a/b\": printable ASCII, "
                                          "no empty, '.' or '..' component, no trailing '/')";
        config c;
        c.servers.clear();
        for (const auto& h : parsed->hosts)
            c.servers.push_back(server{h.host, h.port});
        c.username = parsed->user;
        if (parsed->password)
            c.password = *parsed->password;
        if (c.username.empty() && !c.password.empty())
            return backend::refused(why, "a password without a user name (user:password@)");
        if (parsed->path != "/")
            c.chroot = parsed->path;
        if (!c.chroot.empty() && !valid_path(c.chroot))
            return backend::refused(why, "chroot " + backend::quoted(c.chroot) + path_rule);
        for (const auto& pair : parsed->query) {
            if (pair.key == "prefix") {
                if (!valid_path(pair.value))
                    return backend::refused(why, "prefix " + backend::quoted(pair.value) + path_rule);
                c.prefix = pair.value;
            } else if (pair.key == "dialect") {
                constexpr zookeeper::dialect dialects[] = {zookeeper::dialect::curator, zookeeper::dialect::kazoo,
                                                           zookeeper::dialect::distlock, zookeeper::dialect::latch};
                const auto chosen = backend::query_choice(pair,
                                                          {name_of(dialects[0]), name_of(dialects[1]),
                                                           name_of(dialects[2]), name_of(dialects[3])},
                                                          why);
                if (!chosen)
                    return chosen.error();
                c.dialect = dialects[*chosen];
            } else {
                // The server clamps the timeout into its own range; an hour bounds it here.
                auto timeout = backend::query_duration(pair, std::chrono::milliseconds{100},
                                                       std::chrono::milliseconds{3'600'000}, why);
                if (!timeout)
                    return timeout.error();
                c.session_timeout = *timeout;
            }
        }
        if (c.chroot.empty() && (c.prefix == "/zookeeper" || c.prefix.starts_with("/zookeeper/")))
            return backend::refused(why, "prefix " + backend::quoted(c.prefix) +
                                             " is under /zookeeper, which is ZooKeeper's own");
        if (c.validate())
            return backend::refused(why, "the settings fail config::validate()");
        return c;
    }

    /// An absolute path ZooKeeper accepts, without a trailing '/' (the root "/" is not
    /// one: nodes go under a named node).
    static bool valid_path(std::string_view p) noexcept
    {
        if (p.size() < 2 || p.size() > 1024 || p.front() != '/' || p.back() == '/')
            return false;
        std::string_view rest = p.substr(1);
        while (!rest.empty()) {
            const auto slash = rest.find('/');
            const auto part = rest.substr(0, slash);
            if (part.empty() || part == "." || part == "..")
                return false;
            for (const char ch : part) {
                const auto u = static_cast<unsigned char>(ch);
                if (u < 0x20 || u >= 0x7f)
                    return false;
            }
            rest = slash == std::string_view::npos ? std::string_view{} : rest.substr(slash + 1);
        }
        return true;
    }
};

} // namespace distlock::zookeeper
