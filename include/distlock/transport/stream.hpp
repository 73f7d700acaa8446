// distlock/transport/stream.hpp: one byte stream to a server: TCP, a Unix socket or
// TLS over TCP, with a connect timeout. Protocol-free: the engine (engine.hpp) and the
// stores' handshakes speak through it.
//
// The TLS types are only declared here; what uses them is defined in tls.hpp, which
// this header includes at its end, except in a separately compiled file (README.md,
// "Separate compilation"): such a file compiles none of the stream's members, and
// <asio/ssl.hpp> with OpenSSL's headers is a large part of what it would parse.
// distlock/src/ includes tls.hpp where the members are compiled.
#pragma once

#include <distlock/clock.hpp>
#include <distlock/backend/cut_off.hpp>
#include <distlock/backend/deferred.hpp>
#include <distlock/error.hpp>
#include <distlock/result.hpp>

#include <asio/buffer.hpp>
#include <asio/connect.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/local/stream_protocol.hpp>
#include <asio/read.hpp>
#include <asio/this_coro.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/write.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <variant>
#include <vector>

namespace asio::ssl {
class context;
template <typename Stream>
class stream;
} // namespace asio::ssl

namespace distlock::transport {

using tcp = asio::ip::tcp;
using unix_stream = asio::local::stream_protocol;
using tls_stream = asio::ssl::stream<tcp::socket>;

/// Where a stream connects, and how.
struct endpoint {
    std::string host = "127.0.0.1";
    std::uint16_t port = 0;
    std::string unix_socket;     ///< If set, connect here instead of host:port.
    bool tls = false;            ///< TLS over TCP (asio::ssl, OpenSSL).
    std::string tls_ca_file;     ///< Trusted CA certificates (PEM); empty: system defaults.
    bool tls_verify_peer = true; ///< Verify the server's certificate and host name.
    std::string tls_server_name; ///< SNI and verified name; empty: `host`.
    std::string tls_cert_file;   ///< Client certificate (PEM) for mutual TLS.
    std::string tls_key_file;    ///< Its private key (PEM).
    duration connect_timeout = std::chrono::seconds{2};

    /// host:port or the socket path, for diagnostics.
    std::string describe() const
    {
        return unix_socket.empty() ? host + ":" + std::to_string(port) : unix_socket;
    }
};

/// Creates the TLS context an endpoint asks for (nullptr when it does not ask for TLS);
/// errc::invalid_argument when its files cannot be loaded. Defined in tls.hpp.
template <class Unused = void>
result<std::shared_ptr<asio::ssl::context>> make_tls_context(const endpoint& c);

/// Makes `ctx` offer HTTP/2 by ALPN (a gRPC server over TLS chooses it so). Defined in
/// tls.hpp.
template <class Unused = void>
void offer_http2(asio::ssl::context& ctx);

/// The TLS steps of basic_stream::connect(), defined in tls.hpp.
template <class Unused>
struct tls_steps;

// Design note: lifetimes. An ssl::stream must outlive every operation started on it:
// Asio's SSL layer goes on using the OpenSSL objects when a read that already
// received data completes after a close. So the socket (TCP, Unix or TLS) lives in a
// shared `socket_set` that every operation holds a reference to until it has
// completed, and close() only closes the lowest layer (which makes outstanding
// operations complete with an error) and lets go of its own reference. A connect()
// after a close() starts a new socket_set; the old one goes away with its last
// operation. Everything runs on the owner's strand.
// A template only to be compiled where it is used (backend/store_shell.hpp says why).
template <class Unused = void>
class basic_stream {
public:
    bool is_open() const noexcept { return sockets_ && sockets_->is_open(); }

    void close() noexcept
    {
        if (sockets_)
            sockets_->close();
        sockets_.reset();
    }

    /// Connects within cfg.connect_timeout. `diagnostic` receives the server's or the
    /// system's words when it fails. A close() while connecting makes it fail with
    /// errc::store_unavailable.
    awaitable<std::error_code> connect(const endpoint& cfg, asio::ssl::context* tls, std::string& diagnostic)
    {
        close();
        auto ex = co_await asio::this_coro::executor;
        // Held until the end of this coroutine: the handshake may still be running on
        // it when a close() lets go of sockets_.
        const auto fresh = std::make_shared<socket_set>();
        sockets_ = fresh;
        std::error_code ec;
        if (!cfg.unix_socket.empty()) {
            auto& s = fresh->s.template emplace<unix_stream::socket>(ex);
            ec = co_await within_timeout(
                s.async_connect(unix_stream::endpoint{cfg.unix_socket}, distlock::backend::as_tuple_awaitable<Unused>()),
                cfg.connect_timeout);
        } else {
            tcp::resolver resolver{ex};
            auto [rec, endpoints] =
                co_await resolver.async_resolve(cfg.host, std::to_string(cfg.port), distlock::backend::as_tuple_awaitable<Unused>());
            if (rec) {
                diagnostic = "cannot resolve " + cfg.host + ": " + rec.message();
                if (sockets_ == fresh)
                    close();
                co_return make_error_code(errc::store_unavailable);
            }
            if (sockets_ != fresh)
                co_return closed_while_connecting(cfg, diagnostic);
            auto& socket = fresh->s.template emplace<tcp::socket>(ex);
            ec = co_await within_timeout(
                asio::async_connect(socket, endpoints, distlock::backend::as_tuple_awaitable<Unused>()),
                cfg.connect_timeout);
            if (!ec && sockets_ != fresh)
                co_return closed_while_connecting(cfg, diagnostic);
            if (!ec) {
                socket.set_option(tcp::no_delay{true}, ec);
                if (cfg.tls) {
                    // No operation is outstanding on the plain socket here, so it can
                    // move into the TLS stream.
                    tcp::socket plain = std::move(socket);
                    auto& s = fresh->s.template emplace<tls_stream>(std::move(plain), *tls);
                    const auto& name = cfg.tls_server_name.empty() ? cfg.host : cfg.tls_server_name;
                    tls_steps<Unused>::name_server(s, name, cfg.tls_verify_peer);
                    ec = co_await within_timeout(tls_steps<Unused>::handshake(s), cfg.connect_timeout);
                    if (sockets_ != fresh)
                        co_return closed_while_connecting(cfg, diagnostic);
                    if (ec) {
                        diagnostic = "TLS handshake with " + name + " failed: " + ec.message();
                        close();
                        co_return make_error_code(errc::auth_failed);
                    }
                }
            }
        }
        if (sockets_ != fresh)
            co_return closed_while_connecting(cfg, diagnostic);
        if (ec) {
            diagnostic = "cannot connect to " + cfg.describe() + ": " + ec.message();
            close();
            co_return make_error_code(errc::store_unavailable);
        }
        // try_write() must never block the thread: a full socket says would_block.
        std::error_code nb;
        if (auto* u = std::get_if<unix_stream::socket>(&fresh->s))
            u->non_blocking(true, nb);
        else if (auto* p = std::get_if<tcp::socket>(&fresh->s))
            p->non_blocking(true, nb);
        if (nb) {
            diagnostic = "cannot make the socket to " + cfg.describe() + " non-blocking: " + nb.message();
            close();
            co_return make_error_code(errc::store_unavailable);
        }
        co_return std::error_code{};
    }

    awaitable<std::tuple<std::error_code, std::size_t>> read_some(asio::mutable_buffer b)
    {
        // `keep` holds the socket until this read has completed, even past a close().
        const auto keep = sockets_;
        if (!keep)
            co_return not_open();
        if (auto* t = std::get_if<tls_stream>(&keep->s))
            co_return co_await t->async_read_some(b, distlock::backend::as_tuple_awaitable<Unused>());
        if (auto* u = std::get_if<unix_stream::socket>(&keep->s))
            co_return co_await u->async_read_some(b, distlock::backend::as_tuple_awaitable<Unused>());
        if (auto* p = std::get_if<tcp::socket>(&keep->s))
            co_return co_await p->async_read_some(b, distlock::backend::as_tuple_awaitable<Unused>());
        co_return not_open();
    }

    awaitable<std::tuple<std::error_code, std::size_t>> write(asio::const_buffer b)
    {
        const auto keep = sockets_; // as in read_some
        if (!keep)
            co_return not_open();
        if (auto* t = std::get_if<tls_stream>(&keep->s))
            co_return co_await asio::async_write(*t, b, distlock::backend::as_tuple_awaitable<Unused>());
        if (auto* u = std::get_if<unix_stream::socket>(&keep->s))
            co_return co_await asio::async_write(*u, b, distlock::backend::as_tuple_awaitable<Unused>());
        if (auto* p = std::get_if<tcp::socket>(&keep->s))
            co_return co_await asio::async_write(*p, b, distlock::backend::as_tuple_awaitable<Unused>());
        co_return not_open();
    }

    /// Writes what it can of `b` now, without waiting: the bytes written, 0 with
    /// asio::error::would_block when the socket cannot take any, or 0 with no error
    /// where a write cannot be tried this way (TLS, whose records the asynchronous
    /// writer must send whole).
    std::size_t try_write(asio::const_buffer b, std::error_code& ec)
    {
        ec.clear();
        if (!sockets_) {
            ec = make_error_code(asio::error::not_connected);
            return 0;
        }
        if (auto* u = std::get_if<unix_stream::socket>(&sockets_->s))
            return u->write_some(b, ec);
        if (auto* p = std::get_if<tcp::socket>(&sockets_->s))
            return p->write_some(b, ec);
        return 0;
    }

private:
    // The error code an Asio operation (awaited as a tuple: async_connect adds the
    // endpoint) completes with, or timed_out when `timeout` ends first (the operation
    // is then cancelled and awaited).
    template <class... Results>
    static awaitable<std::error_code> within_timeout(awaitable<std::tuple<std::error_code, Results...>> op,
                                                     duration timeout)
    {
        const auto r = co_await distlock::backend::within(std::move(op), distlock::backend::after(timeout));
        co_return r ? std::get<0>(*r) : make_error_code(asio::error::timed_out);
    }

    // The socket: TCP, Unix or TLS (defined in tls.hpp, which names the TLS type).
    struct socket_set;

    static std::tuple<std::error_code, std::size_t> not_open()
    {
        return std::tuple{make_error_code(asio::error::not_connected), std::size_t{0}};
    }

    static std::error_code closed_while_connecting(const endpoint& cfg, std::string& diagnostic)
    {
        diagnostic = "connection to " + cfg.describe() + " closed while connecting";
        return make_error_code(errc::store_unavailable);
    }

    std::shared_ptr<socket_set> sockets_;
};

/// See basic_stream.
using stream = basic_stream<>;

} // namespace distlock::transport

#if !defined(DISTLOCK_SEPARATE_COMPILATION) || defined(DISTLOCK_INSTANTIATING)
#include <distlock/transport/tls.hpp>
#endif
