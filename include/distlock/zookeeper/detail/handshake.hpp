// distlock/zookeeper/detail/handshake.hpp: what a connection says and hears before it
// is shared, without I/O: the connect request (resuming the session when there is
// one), what the server's answer means for the session, and the setup that follows
// (digest auth, SetWatches for the paths still watched) with its verdict. The session
// (session.hpp) writes and reads these on the new stream; the unit tests
// (test/unit/zookeeper_session_parts.cpp) check them byte for byte.
#pragma once

#include <distlock/error.hpp>
#include <distlock/zookeeper/error.hpp>
#include <distlock/zookeeper/proto/messages.hpp>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <system_error>
#include <vector>

namespace distlock::zookeeper::detail::handshake {

/// The session as the client knows it when it connects.
struct known_session {
    std::int64_t id = 0;          ///< 0: none yet
    std::string password;         ///< its password, when id != 0
    std::int64_t last_zxid = 0;   ///< the newest zxid seen (a server behind it refuses the client)
};

/// The connect request: resumes `s` when it has an id, asks for `timeout` (whole
/// milliseconds, at most what an int32 holds).
inline proto::connect_request request(const known_session& s, std::chrono::milliseconds timeout)
{
    proto::connect_request req;
    req.last_zxid_seen = s.last_zxid;
    req.session_id = s.id;
    if (s.id != 0)
        req.password = s.password;
    req.timeout_ms = static_cast<std::int32_t>(std::clamp<std::int64_t>(timeout.count(), 0, INT32_MAX));
    return req;
}

/// What the server's answer means for the session.
enum class outcome {
    expired,  ///< the session to resume has expired (timeout 0 or no id): it is lost
    resumed,  ///< the same session goes on, its nodes and watches with it
    replaced, ///< a new session instead of the one asked for: what the old one held is gone
    created,  ///< a new session, none asked for
};

inline outcome judge(const proto::connect_request& asked, const proto::connect_response& answer)
{
    if (answer.timeout_ms == 0 || answer.session_id == 0)
        return outcome::expired;
    if (asked.session_id == 0)
        return outcome::created;
    return answer.session_id == asked.session_id ? outcome::resumed : outcome::replaced;
}

/// The requests that follow the connect on the same stream, and how many replies
/// they get: the digest auth when there are credentials, SetWatches (relative to
/// `last_zxid`) when a resumed session still watches paths.
struct setup {
    std::string payload;
    std::size_t replies = 0;
};

inline setup after_connect(const std::string& username, const std::string& password,
                           const std::vector<std::string>& watched, std::int64_t last_zxid)
{
    setup out;
    if (!username.empty()) {
        out.payload += proto::encode_auth("digest", username + ":" + password);
        ++out.replies;
    }
    if (!watched.empty()) {
        // exists() on a node that exists sets a data watch: restored as one.
        out.payload += proto::encode_set_watches(last_zxid, watched, {}, {});
        ++out.replies;
    }
    return out;
}

/// The setup's verdict: zookeeper::errc::auth_failed when the auth reply is an error.
inline std::error_code setup_refused(const std::vector<proto::reply>& replies)
{
    for (const auto& r : replies)
        if (r.xid == proto::xid::auth && r.err != 0)
            return zookeeper::errc::auth_failed;
    return {};
}

} // namespace distlock::zookeeper::detail::handshake
