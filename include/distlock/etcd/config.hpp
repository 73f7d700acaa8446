// distlock/etcd/config.hpp: how to reach an etcd cluster (its JSON gateway), and the
// session the store keeps there.
#pragma once

#include <distlock/clock.hpp>
#include <distlock/detail/url_query.hpp>
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
struct member {
    std::string host = "127.0.0.1";
    std::uint16_t port = 2379;
};

struct config {
    /// The cluster's members, tried in order: a request that could not be sent to one
    /// goes to the next, and the store stays with the one that answered.
    std::vector<member> members{member{}};
    /// Every key the store writes starts with this (docs/etcd.md: the key layout). It
    /// must not be empty, so that a user limited to this prefix can run it.
    std::string prefix = "distlock/";
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
    /// whole seconds in [2 s, 1 day], a keepalive not within (0, TTL), a drift not within
    /// [0, TTL), timeouts outside (0, max_wait], a password without a user, a user name
    /// or password with control characters (they travel in JSON, but a NUL would cut
    /// them short in etcd's own tools).
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

    /// etcd://[user:password@]host:port[,host:port...][?prefix=P&ttl=SECONDS]
    /// (etcds:// for HTTPS, with `ca=PATH` for the trusted CAs). IPv6 hosts in
    /// brackets. errc::invalid_argument when malformed or when the settings fail
    /// validate().
    static result<config> from_url(std::string_view url)
    {
        config c;
        if (url.starts_with("etcd://")) {
            url.remove_prefix(7);
        } else if (url.starts_with("etcds://")) {
            url.remove_prefix(8);
            c.tls = true;
        } else {
            return errc::invalid_argument;
        }
        std::string_view query;
        if (const auto q = url.find('?'); q != std::string_view::npos) {
            query = url.substr(q + 1);
            url = url.substr(0, q);
        }
        if (url.ends_with('/'))
            url.remove_suffix(1);
        if (const auto at = url.rfind('@'); at != std::string_view::npos) {
            const auto creds = url.substr(0, at);
            url.remove_prefix(at + 1);
            const auto colon = creds.find(':');
            c.username = std::string{creds.substr(0, colon)};
            if (colon != std::string_view::npos)
                c.password = std::string{creds.substr(colon + 1)};
        }
        const auto hosts = distlock::detail::host_list(url, 2379);
        if (!hosts || hosts->empty())
            return errc::invalid_argument;
        c.members.clear();
        for (const auto& h : *hosts)
            c.members.push_back(member{h.host, h.port});
        const auto pairs = distlock::detail::query_pairs(query);
        if (!pairs)
            return errc::invalid_argument;
        for (const auto& [key, value, text] : *pairs) {
            if (key == "prefix") {
                c.prefix = std::string{value};
            } else if (key == "ttl") {
                std::uint32_t seconds = 0;
                if (!distlock::detail::decimal(value, seconds))
                    return errc::invalid_argument;
                c.session_ttl = std::chrono::seconds{seconds};
            } else if (key == "ca" && c.tls) {
                c.tls_ca_file = std::string{value};
            } else {
                return errc::invalid_argument;
            }
        }
        if (auto ec = c.validate())
            return ec;
        return c;
    }
};

} // namespace distlock::etcd
