// distlock/redis/detail/stream.hpp: one byte stream to a Redis server: TCP, a Unix
// socket or TLS over TCP, with connect timeout and the AUTH/SELECT handshake.
#pragma once

#include <distlock/clock.hpp>
#include <distlock/error.hpp>
#include <distlock/redis/config.hpp>
#include <distlock/redis/resp/command.hpp>
#include <distlock/redis/resp/parser.hpp>
#include <distlock/result.hpp>

#include <asio/buffer.hpp>
#include <asio/connect.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/experimental/awaitable_operators.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/local/stream_protocol.hpp>
#include <asio/read.hpp>
#include <asio/ssl.hpp>
#include <asio/this_coro.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/write.hpp>

#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <variant>
#include <vector>

namespace distlock::redis::detail {

using asio::experimental::as_tuple;
using tcp = asio::ip::tcp;
using unix_stream = asio::local::stream_protocol;
using tls_stream = asio::ssl::stream<tcp::socket>;

/// Creates the TLS context a config asks for (nullptr when it does not ask for TLS).
inline result<std::shared_ptr<asio::ssl::context>> make_tls_context(const config& c)
{
    if (!c.tls)
        return std::shared_ptr<asio::ssl::context>{};
    auto ctx = std::make_shared<asio::ssl::context>(asio::ssl::context::tls_client);
    std::error_code ec;
    if (c.tls_ca_file.empty())
        ctx->set_default_verify_paths(ec);
    else
        ctx->load_verify_file(c.tls_ca_file, ec);
    if (!ec && !c.tls_cert_file.empty())
        ctx->use_certificate_chain_file(c.tls_cert_file, ec);
    if (!ec && !c.tls_key_file.empty())
        ctx->use_private_key_file(c.tls_key_file, asio::ssl::context::pem, ec);
    if (ec)
        return errc::invalid_argument;
    ctx->set_verify_mode(c.tls_verify_peer ? asio::ssl::verify_peer : asio::ssl::verify_none);
    return ctx;
}

// Design note: lifetimes. An ssl::stream must outlive every operation started on it:
// Asio's SSL layer goes on using the OpenSSL objects when a read that already
// received data completes after a close. So the socket (TCP, Unix or TLS) lives in a
// shared `socket_set` that every operation holds a reference to until it has
// completed, and close() only closes the lowest layer (which makes outstanding
// operations complete with an error) and lets go of its own reference. A connect()
// after a close() starts a new socket_set; the old one goes away with its last
// operation. Everything runs on the owner's strand.
class stream {
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
    awaitable<std::error_code> connect(const config& cfg, asio::ssl::context* tls, std::string& diagnostic)
    {
        close();
        auto ex = co_await asio::this_coro::executor;
        // Held until the end of this coroutine: the handshake may still be running on
        // it when a close() lets go of sockets_.
        const auto fresh = std::make_shared<socket_set>();
        sockets_ = fresh;
        timer deadline{ex, cfg.connect_timeout};
        using namespace asio::experimental::awaitable_operators;
        std::error_code ec;
        if (!cfg.unix_socket.empty()) {
            auto& s = fresh->s.emplace<unix_stream::socket>(ex);
            auto r = co_await (s.async_connect(unix_stream::endpoint{cfg.unix_socket}, as_tuple(asio::use_awaitable)) ||
                               deadline.async_wait(as_tuple(asio::use_awaitable)));
            ec = r.index() == 0 ? std::get<0>(std::get<0>(r)) : make_error_code(asio::error::timed_out);
        } else {
            tcp::resolver resolver{ex};
            auto [rec, endpoints] =
                co_await resolver.async_resolve(cfg.host, std::to_string(cfg.port), as_tuple(asio::use_awaitable));
            if (rec) {
                diagnostic = "cannot resolve " + cfg.host + ": " + rec.message();
                if (sockets_ == fresh)
                    close();
                co_return make_error_code(errc::store_unavailable);
            }
            if (sockets_ != fresh)
                co_return closed_while_connecting(cfg, diagnostic);
            auto& socket = fresh->s.emplace<tcp::socket>(ex);
            auto r = co_await (asio::async_connect(socket, endpoints, as_tuple(asio::use_awaitable)) ||
                               deadline.async_wait(as_tuple(asio::use_awaitable)));
            ec = r.index() == 0 ? std::get<0>(std::get<0>(r)) : make_error_code(asio::error::timed_out);
            if (!ec && sockets_ != fresh)
                co_return closed_while_connecting(cfg, diagnostic);
            if (!ec) {
                socket.set_option(tcp::no_delay{true}, ec);
                if (cfg.tls) {
                    // No operation is outstanding on the plain socket here, so it can
                    // move into the TLS stream.
                    tcp::socket plain = std::move(socket);
                    auto& s = fresh->s.emplace<tls_stream>(std::move(plain), *tls);
                    const auto& name = cfg.tls_server_name.empty() ? cfg.host : cfg.tls_server_name;
                    SSL_set_tlsext_host_name(s.native_handle(), name.c_str());
                    if (cfg.tls_verify_peer)
                        s.set_verify_callback(asio::ssl::host_name_verification{name});
                    deadline.expires_after(cfg.connect_timeout);
                    auto h = co_await (s.async_handshake(asio::ssl::stream_base::client, as_tuple(asio::use_awaitable)) ||
                                       deadline.async_wait(as_tuple(asio::use_awaitable)));
                    ec = h.index() == 0 ? std::get<0>(std::get<0>(h)) : make_error_code(asio::error::timed_out);
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
            diagnostic = "cannot connect to " + describe(cfg) + ": " + ec.message();
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
            co_return co_await t->async_read_some(b, as_tuple(asio::use_awaitable));
        if (auto* u = std::get_if<unix_stream::socket>(&keep->s))
            co_return co_await u->async_read_some(b, as_tuple(asio::use_awaitable));
        if (auto* p = std::get_if<tcp::socket>(&keep->s))
            co_return co_await p->async_read_some(b, as_tuple(asio::use_awaitable));
        co_return not_open();
    }

    awaitable<std::tuple<std::error_code, std::size_t>> write(asio::const_buffer b)
    {
        const auto keep = sockets_; // as in read_some
        if (!keep)
            co_return not_open();
        if (auto* t = std::get_if<tls_stream>(&keep->s))
            co_return co_await asio::async_write(*t, b, as_tuple(asio::use_awaitable));
        if (auto* u = std::get_if<unix_stream::socket>(&keep->s))
            co_return co_await asio::async_write(*u, b, as_tuple(asio::use_awaitable));
        if (auto* p = std::get_if<tcp::socket>(&keep->s))
            co_return co_await asio::async_write(*p, b, as_tuple(asio::use_awaitable));
        co_return not_open();
    }

    /// Sends `payload` and reads `count` replies, before the connection is shared
    /// (the handshake). Bounded by `timeout`.
    awaitable<result<std::vector<resp::value>>> roundtrip(const std::string& payload, std::size_t count,
                                                        duration timeout)
    {
        using namespace asio::experimental::awaitable_operators;
        timer deadline{co_await asio::this_coro::executor, timeout};
        auto r = co_await (exchange(payload, count) || deadline.async_wait(as_tuple(asio::use_awaitable)));
        if (r.index() == 1) {
            close();
            co_return errc::outcome_unknown;
        }
        co_return std::move(std::get<0>(r));
    }

    /// Reads replies until the stream fails, handing each to `on_reply` (which returns
    /// false for a reply it did not expect). Returns why it stopped: the read error,
    /// errc::protocol_error for a malformed or unexpected reply, or nullopt when
    /// `current()` says a newer connection has taken over (then it touched nothing).
    template <class Current, class OnReply>
    awaitable<std::optional<std::error_code>> read_replies(Current current, OnReply on_reply)
    {
        std::string buffer;
        std::size_t offset = 0;
        std::vector<char> chunk(16 * 1024);
        for (;;) {
            auto [ec, n] = co_await read_some(asio::buffer(chunk));
            if (!current())
                co_return std::nullopt;
            if (ec)
                co_return ec;
            buffer.append(chunk.data(), n);
            for (;;) {
                auto parsed = resp::parse(std::string_view{buffer}.substr(offset));
                if (parsed.status == resp::status::need_more)
                    break;
                if (parsed.status == resp::status::malformed)
                    co_return make_error_code(errc::protocol_error);
                offset += parsed.consumed;
                if (!on_reply(std::move(parsed.value)))
                    co_return make_error_code(errc::protocol_error);
            }
            if (offset == buffer.size()) {
                buffer.clear();
                offset = 0;
            } else if (offset > 64 * 1024) {
                buffer.erase(0, offset);
                offset = 0;
            }
        }
    }

    static std::string describe(const config& cfg)
    {
        return cfg.unix_socket.empty() ? cfg.host + ":" + std::to_string(cfg.port) : cfg.unix_socket;
    }

private:
    struct socket_set {
        std::variant<std::monostate, tcp::socket, unix_stream::socket, tls_stream> s;

        bool is_open() const noexcept
        {
            if (auto* t = std::get_if<tls_stream>(&s))
                return t->lowest_layer().is_open();
            if (auto* u = std::get_if<unix_stream::socket>(&s))
                return u->is_open();
            if (auto* p = std::get_if<tcp::socket>(&s))
                return p->is_open();
            return false;
        }

        // Closes the lowest layer only: outstanding operations complete with an error
        // while the objects they use stay alive.
        void close() noexcept
        {
            std::error_code ignored;
            if (auto* t = std::get_if<tls_stream>(&s))
                t->lowest_layer().close(ignored);
            else if (auto* u = std::get_if<unix_stream::socket>(&s))
                u->close(ignored);
            else if (auto* p = std::get_if<tcp::socket>(&s))
                p->close(ignored);
        }
    };

    static std::tuple<std::error_code, std::size_t> not_open()
    {
        return std::tuple{make_error_code(asio::error::not_connected), std::size_t{0}};
    }

    static std::error_code closed_while_connecting(const config& cfg, std::string& diagnostic)
    {
        diagnostic = "connection to " + describe(cfg) + " closed while connecting";
        return make_error_code(errc::store_unavailable);
    }

    awaitable<result<std::vector<resp::value>>> exchange(const std::string& payload, std::size_t count)
    {
        auto [wec, written] = co_await write(asio::buffer(payload));
        if (wec)
            co_return errc::store_unavailable;
        std::vector<resp::value> replies;
        std::string buffer;
        std::size_t offset = 0;
        char chunk[4096];
        while (replies.size() < count) {
            auto parsed = resp::parse(std::string_view{buffer}.substr(offset));
            if (parsed.status == resp::status::malformed)
                co_return errc::protocol_error;
            if (parsed.status == resp::status::complete) {
                offset += parsed.consumed;
                replies.push_back(std::move(parsed.value));
                continue;
            }
            auto [rec, n] = co_await read_some(asio::buffer(chunk));
            if (rec)
                co_return errc::outcome_unknown;
            buffer.append(chunk, n);
        }
        co_return replies;
    }

    std::shared_ptr<socket_set> sockets_;
};

} // namespace distlock::redis::detail
