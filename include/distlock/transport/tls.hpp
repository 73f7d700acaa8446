// distlock/transport/tls.hpp: what the stream (stream.hpp) does with TLS, on Asio's
// SSL layer (OpenSSL). stream.hpp includes it, except in a separately compiled file,
// which compiles none of this; a separately compiled file that uses the stream
// itself includes it.
#pragma once

#include <distlock/transport/stream.hpp>

#include <asio/ssl.hpp>

#include <memory>
#include <string>
#include <system_error>

namespace distlock::transport {

template <class Unused>
result<std::shared_ptr<asio::ssl::context>> make_tls_context(const endpoint& c)
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

template <class Unused>
void offer_http2(asio::ssl::context& ctx)
{
    static constexpr unsigned char h2[] = {2, 'h', '2'};
    SSL_CTX_set_alpn_protos(ctx.native_handle(), h2, sizeof h2);
}

template <class Unused>
struct tls_steps {
    /// The server's name for SNI, and the name its certificate must carry when
    /// `verify`.
    static void name_server(tls_stream& s, const std::string& name, bool verify)
    {
        SSL_set_tlsext_host_name(s.native_handle(), name.c_str());
        if (verify)
            s.set_verify_callback(asio::ssl::host_name_verification{name});
    }

    static awaitable<std::tuple<std::error_code>> handshake(tls_stream& s)
    {
        return s.async_handshake(asio::ssl::stream_base::client, distlock::backend::as_tuple_awaitable<Unused>());
    }
};

template <class Unused>
struct basic_stream<Unused>::socket_set {
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

} // namespace distlock::transport
