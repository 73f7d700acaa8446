// distlock/redis/detail/handshake.hpp: what every new connection to a Redis server
// does before it is used: connect (TCP, Unix socket or TLS), then AUTH and SELECT,
// and, on the main connection, INFO server to learn which server process answers.
//
// Design note. The main connection and the pub/sub subscriber used to have a copy
// each of this, and the copies disagreed (the subscriber called a LOADING reply
// "auth_failed"). One function, one classification of refusals: credentials
// rejected are errc::auth_failed, anything else the server refuses (LOADING, BUSY,
// ...) errc::store_unavailable, a reply that is not RESP errc::protocol_error.
// Everything is pipelined in one round trip bounded by connect_timeout.
#pragma once

#include <distlock/error.hpp>
#include <distlock/redis/config.hpp>
#include <distlock/redis/resp/codec.hpp>
#include <distlock/transport/engine.hpp>
#include <distlock/redis/resp/command.hpp>

#include <optional>
#include <string>
#include <string_view>

namespace distlock::redis::detail {

/// What a connection learned in its handshake.
struct hello {
    /// The server process's run_id (INFO server), one per process and new at every
    /// start; empty when the server would not say (INFO denied by an ACL, renamed).
    std::string identity;
};

/// How the handshake refuses: credentials rejected, or the server not ready.
inline errc classify_refusal(std::string_view text) noexcept
{
    const bool auth = text.starts_with("WRONGPASS") || text.starts_with("NOAUTH") ||
                      text.find("invalid password") != std::string_view::npos ||
                      text.find("AUTH") != std::string_view::npos;
    return auth ? errc::auth_failed : errc::store_unavailable;
}

/// The run_id line of an INFO server reply; empty if absent.
inline std::string run_id_of(std::string_view info)
{
    constexpr std::string_view field = "run_id:";
    for (std::size_t at = 0; at < info.size();) {
        auto end = info.find('\n', at);
        if (end == std::string_view::npos)
            end = info.size();
        auto line = info.substr(at, end - at);
        if (line.ends_with('\r'))
            line.remove_suffix(1);
        if (line.starts_with(field))
            return std::string{line.substr(field.size())};
        at = end + 1;
    }
    return {};
}

/// Connects `s` and runs the handshake: AUTH when cfg has a password, SELECT when
/// `select_database` and cfg.database is not 0, INFO server when `identify`.
/// `diagnostic` receives the server's or the system's words on failure.
// A template only to be compiled where it is used (backend/store_shell.hpp says why).
template <class Unused = void>
awaitable<std::error_code> handshake(transport::stream& s, const config& cfg, asio::ssl::context* tls,
                                            bool select_database, bool identify, hello& out,
                                            std::string& diagnostic)
{
    if (auto ec = co_await s.connect(cfg.endpoint(), tls, diagnostic))
        co_return ec;
    std::string payload;
    std::size_t count = 0;
    if (!cfg.password.empty()) {
        if (cfg.username.empty())
            resp::append_command(payload, {"AUTH", cfg.password});
        else
            resp::append_command(payload, {"AUTH", cfg.username, cfg.password});
        ++count;
    }
    if (select_database && cfg.database != 0) {
        resp::append_command(payload, {"SELECT", resp::to_arg(cfg.database)});
        ++count;
    }
    if (identify) {
        resp::append_command(payload, {"INFO", "server"});
        ++count;
    }
    if (count == 0)
        co_return std::error_code{};
    auto replies = co_await transport::roundtrip(s, resp::codec{}, payload, count, cfg.connect_timeout);
    if (!replies) {
        diagnostic = "handshake with " + cfg.endpoint().describe() + " failed: " + replies.error().message();
        s.close();
        co_return replies.error() == errc::protocol_error ? make_error_code(errc::protocol_error)
                                                          : make_error_code(errc::store_unavailable);
    }
    const auto& got = replies.value();
    for (std::size_t i = 0; i < got.size(); ++i) {
        const auto& r = got[i];
        const bool is_info = identify && i + 1 == got.size();
        if (is_info && r.is_error() && (r.text.starts_with("NOPERM") || r.text.starts_with("ERR unknown command")))
            continue; // not allowed to ask: the identity stays unknown, the connection works
        if (r.is_error()) {
            diagnostic = r.text;
            s.close();
            co_return make_error_code(classify_refusal(r.text));
        }
        if (is_info) {
            if (!r.is_string()) {
                diagnostic = "unexpected INFO reply from " + cfg.endpoint().describe();
                s.close();
                co_return make_error_code(errc::protocol_error);
            }
            out.identity = run_id_of(r.text);
        }
    }
    co_return std::error_code{};
}

} // namespace distlock::redis::detail
