// distlock/redis/detail/connection.hpp: the store's command connection: the shared
// transport engine speaking RESP, connected by the Redis handshake (AUTH, SELECT,
// INFO server for the server's identity). See transport/engine.hpp for how requests
// are pipelined and what a failure means for each of them.
#pragma once

#include <distlock/redis/config.hpp>
#include <distlock/redis/detail/handshake.hpp>
#include <distlock/redis/resp/codec.hpp>
#include <distlock/transport/engine.hpp>

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace distlock::redis::detail {

// A template only to be compiled where it is used (backend/store_shell.hpp says why).
template <class Unused = void>
class basic_connection {
public:
    using engine_type = transport::engine<resp::codec>;
    using strand_type = engine_type::strand_type;

    basic_connection(strand_type strand, config cfg, std::shared_ptr<asio::ssl::context> tls)
        : identity_{std::make_shared<learned_identity>()},
          engine_{std::make_shared<engine_type>(std::move(strand), resp::codec{},
                                                engine_type::options{cfg.request_timeout, cfg.endpoint().describe()},
                                                connector(cfg, std::move(tls), identity_))}
    {}

    /// Sends `payload` (holding `count` commands) and returns their replies. Error
    /// replies are values, not errors: the caller interprets them. A failure's words
    /// go to `diag` when given.
    awaitable<result<std::vector<resp::value>>> exec(std::string payload, std::size_t count,
                                                     diagnostics* diag = nullptr)
    {
        return engine_->exec(std::move(payload), count, diag);
    }

    /// Closes the connection; written requests (even in part) fail with
    /// errc::outcome_unknown, queued ones with errc::store_unavailable.
    void close() { engine_->close(); }

    /// The identity (run_id) of the server reached at the last successful connect,
    /// without I/O; nullopt when never connected, empty when the server would not tell.
    std::optional<std::string> known_identity() const
    {
        std::lock_guard lock{identity_->mutex};
        return identity_->value;
    }

    const strand_type& strand() const noexcept { return engine_->strand(); }

private:
    struct learned_identity {
        mutable std::mutex mutex;
        std::optional<std::string> value; // kept across reconnects
    };

    static engine_type::connector connector(config cfg, std::shared_ptr<asio::ssl::context> tls,
                                            std::shared_ptr<learned_identity> identity)
    {
        return [cfg = std::move(cfg), tls = std::move(tls),
                identity = std::move(identity)](transport::stream& s,
                                                std::string& diagnostic) -> awaitable<std::error_code> {
            // Out-of-range timeouts are refused before any I/O (config::validate()).
            if (auto ec = cfg.validate())
                co_return ec;
            hello learned;
            if (auto ec = co_await handshake(s, cfg, tls.get(), true, true, learned, diagnostic))
                co_return ec;
            std::lock_guard lock{identity->mutex};
            identity->value = std::move(learned.identity);
            co_return std::error_code{};
        };
    }

    std::shared_ptr<learned_identity> identity_;
    std::shared_ptr<engine_type> engine_;
};

/// See basic_connection.
using connection = basic_connection<>;

} // namespace distlock::redis::detail
