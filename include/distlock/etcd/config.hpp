// distlock/etcd/config.hpp: how to reach an etcd cluster (native gRPC, or its JSON
// gateway), and the session the store keeps there.
#pragma once

#include <distlock/backend/url.hpp>
#include <distlock/clock.hpp>
#include <distlock/etcd/dialect.hpp>
#include <distlock/error.hpp>
#include <distlock/options.hpp>
#include <distlock/result.hpp>
#include <distlock/transport/stream.hpp>

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace distlock::etcd {

/// One member's client URL (host and port).
using member = backend::server_address<2379>;

/// How the store speaks to the members (both on the client URL's port).
enum class api {
    grpc,    ///< etcd's native gRPC over HTTP/2: the default, and the faster
    gateway, ///< etcd's JSON gateway over HTTP/1.1, where only HTTP/1.1 gets through
};

struct config {
    /// The cluster's members, tried in order: a request that could not be sent to one
    /// goes to the next, and the store stays with the one that answered.
    std::vector<member> members{member{}};
    /// Every key the store writes starts with this (docs/etcd.md: the key layout). It
    /// must not be empty, so that a user limited to this prefix can run it.
    std::string prefix = "distlock/";
    /// How a resource id becomes its queue's key prefix (dialect.hpp): escaped (the
    /// default), or verbatim for etcd's concurrency.Mutex on `prefix + id`.
    key_dialect dialect = key_dialect::distlock;
    /// gRPC, or the JSON gateway.
    etcd::api api = etcd::api::grpc;
    /// The session's lease TTL: whole seconds, at least 2 (etcd's floor; a shorter
    /// grant comes back as 2 s, and the store uses the TTL the server granted). A
    /// crashed holder's lock is freed within this time.
    duration session_ttl = std::chrono::seconds{10};
    /// How often the keepalive is sent; zero: session_ttl / 3.
    duration keepalive_every{};
    /// Subtracted from the session's validity (scheduling, clock rate error).
    duration drift = std::chrono::milliseconds{10};
    /// Bounds connecting (and the TLS handshake). In (0, distlock::max_wait].
    duration connect_timeout = std::chrono::seconds{2};
    /// A request without an answer after this long is errc::outcome_unknown, and the
    /// next request goes to the next member. etcd fsyncs every write and needs about
    /// a second to elect a new leader. In (0, distlock::max_wait].
    duration request_timeout = std::chrono::seconds{3};
    /// With auth enabled on the cluster: the user the store authenticates as (its
    /// token is sent with every request and renewed when the server says it expired).
    std::string username;
    std::string password;
    /// HTTPS to every member (certificate and host name verified).
    bool tls = false;
    std::string tls_ca_file;   ///< trusted CAs (PEM); empty: the system's
    std::string tls_cert_file; ///< client certificate (PEM), for --client-cert-auth
    std::string tls_key_file;  ///< its key

    duration keepalive_interval() const noexcept
    {
        return keepalive_every > duration::zero() ? keepalive_every : session_ttl / 3;
    }

    /// errc::invalid_argument for settings that cannot work: no member, a member
    /// without host or port, an empty prefix or one with a NUL byte, a TTL that is not
    /// whole seconds in [2 s, 1 day], a dialect that is none of key_dialect's, a
    /// keepalive not within (0, TTL), a drift not within [0, TTL), timeouts outside
    /// (0, max_wait], a password without a user, a user name or password with control
    /// characters (they travel in JSON, but a NUL would cut them short in etcd's own
    /// tools).
    std::error_code validate() const noexcept
    {
        const auto in_range = [](duration d) { return d > duration::zero() && d <= max_wait; };
        if (members.empty())
            return errc::invalid_argument;
        for (const auto& m : members)
            if (m.host.empty() || m.port == 0)
                return errc::invalid_argument;
        if (prefix.empty() || prefix.size() > 512 || prefix.find('\0') != std::string::npos)
            return errc::invalid_argument;
        if (dialect != key_dialect::distlock && dialect != key_dialect::concurrency)
            return errc::invalid_argument;
        if (api != etcd::api::grpc && api != etcd::api::gateway)
            return errc::invalid_argument;
        if (session_ttl < std::chrono::seconds{2} || session_ttl > std::chrono::hours{24} ||
            session_ttl % std::chrono::seconds{1} != duration::zero())
            return errc::invalid_argument;
        if (keepalive_every < duration::zero() || keepalive_every >= session_ttl)
            return errc::invalid_argument;
        if (drift < duration::zero() || drift >= session_ttl)
            return errc::invalid_argument;
        if (!in_range(connect_timeout) || !in_range(request_timeout))
            return errc::invalid_argument;
        if (username.empty() && !password.empty())
            return errc::invalid_argument;
        for (const auto* s : {&username, &password})
            for (const char c : *s)
                if (static_cast<unsigned char>(c) < 0x20)
                    return errc::invalid_argument;
        return {};
    }

    transport::endpoint endpoint(std::size_t i) const
    {
        return {.host = members[i].host,
                .port = members[i].port,
                .unix_socket = {},
                .tls = tls,
                .tls_ca_file = tls_ca_file,
                .tls_verify_peer = true,
                .tls_server_name = {},
                .tls_cert_file = tls_cert_file,
                .tls_key_file = tls_key_file,
                .connect_timeout = connect_timeout};
    }

    /// Parses
    /// `etcd://[user[:password]@]host[:port][,host[:port]...][?prefix=P&ttl=SECONDS&dialect=D&api=A]`
    /// (port 2379 by default; D is `distlock` or `concurrency`, dialect.hpp; A is
    /// `grpc`, the default, or `gateway`), or
    /// `etcds://` for HTTPS, which also takes `ca=PATH` (the trusted CAs). The grammar is in distlock/backend/url.hpp: IPv6 hosts in
    /// brackets, nothing percent-decoded. A URL that is malformed or whose settings fail
    /// validate() is errc::invalid_argument, with `*why` (when not null) saying what is
    /// wrong and where.
    static result<config> from_url(std::string_view url, std::string* why = nullptr)
    {
        backend::url_rules rules;
        rules.schemes = {"etcd", "etcds"};
        rules.default_port = 2379;
        rules.several_hosts = true;
        rules.userinfo = true;
        rules.query_keys = {"prefix", "ttl", "dialect", "api", "ca"};
        auto parsed = backend::parse_url(url, rules, why);
        if (!parsed)
            return parsed.error();
        config c;
        c.tls = parsed->scheme == "etcds";
        c.members.clear();
        for (const auto& h : parsed->hosts)
            c.members.push_back(member{h.host, h.port});
        c.username = parsed->user;
        if (parsed->password)
            c.password = *parsed->password;
        if (c.username.empty() && !c.password.empty())
            return backend::refused(why, "a password without a user name (user:password@)");
        for (const auto& pair : parsed->query) {
            if (pair.key == "prefix") {
                if (pair.value.empty() || pair.value.size() > 512)
                    return backend::refused(why, backend::quoted("prefix=" + pair.value) +
                                                     ": the key prefix must be 1 to 512 bytes");
                c.prefix = pair.value;
            } else if (pair.key == "ttl") {
                // etcd's floor is 2 s; a day bounds a crashed holder's lock.
                auto ttl = backend::query_duration(pair, std::chrono::seconds{2}, std::chrono::seconds{86400}, why);
                if (!ttl)
                    return ttl.error();
                c.session_ttl = *ttl;
            } else if (pair.key == "dialect") {
                const auto d = dialect_named(pair.value);
                if (!d)
                    return backend::refused(why, backend::quoted("dialect=" + pair.value) +
                                                     ": the dialect is 'distlock' or 'concurrency'");
                c.dialect = *d;
            } else if (pair.key == "api") {
                if (pair.value == "grpc")
                    c.api = etcd::api::grpc;
                else if (pair.value == "gateway")
                    c.api = etcd::api::gateway;
                else
                    return backend::refused(why, backend::quoted("api=" + pair.value) +
                                                     ": the API is 'grpc' or 'gateway'");
            } else if (!c.tls) {
                return backend::refused(why, "'ca=' is for etcds:// URLs (HTTPS)");
            } else {
                c.tls_ca_file = pair.value;
            }
        }
        if (c.validate())
            return backend::refused(why, "the settings fail config::validate()");
        return c;
    }
};

} // namespace distlock::etcd
