// distlock/redis/config.hpp: how to reach one Redis server.
#pragma once

#include <distlock/clock.hpp>
#include <distlock/error.hpp>
#include <distlock/options.hpp>
#include <distlock/result.hpp>
#include <distlock/transport/stream.hpp>

#include <charconv>
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

namespace distlock::redis {

/// Connection settings of one Redis server.
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

    std::string key_prefix = "distlock"; ///< Keys are `<prefix>:{<resource>}:<kind>`.

    /// After a grant, `WAIT wait_replicas wait_timeout`: the lock is reported only once
    /// that many replicas have acknowledged it, else it fails with errc::not_replicated
    /// (and is given back). This narrows, not closes, the window in which a failover
    /// to a replica that never saw the grant loses the lock (docs/redis.md). WAIT holds
    /// the store's one connection while it waits: keep `wait_timeout` short. 0: no WAIT.
    int wait_replicas = 0;
    /// How long a WAIT may take; in (0, request_timeout) when wait_replicas > 0.
    duration wait_timeout = std::chrono::milliseconds{100};

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
        // WAIT's timeout is whole milliseconds (0 would mean "forever"), and its reply
        // must come before the request timeout drops the connection.
        if (wait_replicas > 0 && (wait_timeout < std::chrono::milliseconds{1} || wait_timeout >= request_timeout))
            return errc::invalid_argument;
        return {};
    }

    /// Parses redis://[user:password@]host[:port][/db], rediss:// (TLS) and
    /// unix:///path/to/socket[?db=N]. errc::invalid_argument when malformed.
    static result<config> from_url(std::string_view url)
    {
        config c;
        auto take_number = [](std::string_view s, auto& out) {
            const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
            return ec == std::errc{} && p == s.data() + s.size();
        };
        if (url.starts_with("unix://")) {
            auto rest = url.substr(7);
            const auto q = rest.find("?db=");
            if (q != std::string_view::npos) {
                if (!take_number(rest.substr(q + 4), c.database))
                    return errc::invalid_argument;
                rest = rest.substr(0, q);
            }
            if (rest.empty())
                return errc::invalid_argument;
            c.unix_socket = std::string{rest};
            return c;
        }
        if (url.starts_with("rediss://")) {
            c.tls = true;
            url.remove_prefix(9);
        } else if (url.starts_with("redis://")) {
            url.remove_prefix(8);
        } else {
            return errc::invalid_argument;
        }
        if (const auto at = url.rfind('@'); at != std::string_view::npos) {
            const auto creds = url.substr(0, at);
            url.remove_prefix(at + 1);
            const auto colon = creds.find(':');
            if (colon == std::string_view::npos) {
                c.password = std::string{creds};
            } else {
                c.username = std::string{creds.substr(0, colon)};
                c.password = std::string{creds.substr(colon + 1)};
            }
        }
        if (const auto slash = url.find('/'); slash != std::string_view::npos) {
            const auto db = url.substr(slash + 1);
            if (!db.empty() && !take_number(db, c.database))
                return errc::invalid_argument;
            url = url.substr(0, slash);
        }
        std::string_view host = url;
        if (host.starts_with('[')) { // [::1]:6379
            const auto close = host.find(']');
            if (close == std::string_view::npos)
                return errc::invalid_argument;
            c.host = std::string{host.substr(1, close - 1)};
            host.remove_prefix(close + 1);
            if (host.starts_with(':') && !take_number(host.substr(1), c.port))
                return errc::invalid_argument;
        } else {
            const auto colon = host.rfind(':');
            if (colon != std::string_view::npos) {
                if (!take_number(host.substr(colon + 1), c.port))
                    return errc::invalid_argument;
                host = host.substr(0, colon);
            }
            c.host = std::string{host};
        }
        if (c.host.empty() || c.database < 0)
            return errc::invalid_argument;
        return c;
    }
};

} // namespace distlock::redis
