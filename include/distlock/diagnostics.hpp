// distlock/diagnostics.hpp: the words beside an error code.
#pragma once

#include <distlock/clock.hpp>

#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace distlock {

/// What a store said about one failed operation, beside its std::error_code: the
/// server's own words (an error reply, a database message) and the client's (which
/// server, what timed out, what was lost). The caller owns it and passes it to the
/// operation (`co_await m.lock(diag)`, `store.execute(..., &diag)`); the operation
/// fills it when it fails and leaves it alone when it succeeds. Nothing the
/// operation leaves running in the background writes to it.
///
/// \par Object lifetimes
/// Must outlive the operation it was passed to (until its co_await returns).
/// Not shared between operations running at once: use one per operation.
class diagnostics {
public:
    /// The server's words, verbatim (empty when the server said nothing).
    std::string_view server_message() const noexcept { return server_; }
    /// The client's words: connection, timeout, protocol (empty when none).
    std::string_view client_message() const noexcept { return client_; }
    /// Both, for a log line: "server: ...; client: ...", or the one there is.
    std::string to_string() const
    {
        if (server_.empty())
            return client_;
        if (client_.empty())
            return server_;
        return "server: " + server_ + "; client: " + client_;
    }
    bool empty() const noexcept { return server_.empty() && client_.empty(); }

    /// For errc::lock_delayed: when the resource's lock-delay ends, by this process's
    /// clock (distlock::clock), as the store said.
    std::optional<time_point> lock_delay_until() const noexcept { return delay_until_; }

    void clear() noexcept
    {
        server_.clear();
        client_.clear();
        delay_until_.reset();
    }

    // Set by stores.
    void set_server_message(std::string words) { server_ = std::move(words); }
    void set_client_message(std::string words) { client_ = std::move(words); }
    void set_lock_delay_until(time_point until) noexcept { delay_until_ = until; }

    friend bool operator==(const diagnostics&, const diagnostics&) = default;

private:
    std::string server_;
    std::string client_;
    std::optional<time_point> delay_until_;
};

namespace detail {

/// Calls `op(diag)` when the operation takes diagnostics (a store primitive with a
/// trailing `diagnostics*`), `op()` otherwise. `op` is a generic lambda whose return
/// type names the call, so that a store without the parameter is told apart:
///   [&](auto*... d) -> decltype(s.release(r, o, d...)) { return s.release(r, o, d...); }
template <class Op>
decltype(auto) diagnosed(diagnostics* diag, Op&& op)
{
    if constexpr (requires { op(diag); })
        return op(diag);
    else
        return op();
}

} // namespace detail

} // namespace distlock

/// detail::diagnosed() for a call `CALL(args...)`: passes DIAG as a trailing
/// argument when CALL takes one.
#define DISTLOCK_DETAIL_DIAGNOSED(DIAG, CALL, ...)                                                              \
    ::distlock::detail::diagnosed(DIAG, [&](auto*... diag_) -> decltype(CALL(__VA_ARGS__ __VA_OPT__(, ) diag_...)) { \
        return CALL(__VA_ARGS__ __VA_OPT__(, ) diag_...);                                                        \
    })
