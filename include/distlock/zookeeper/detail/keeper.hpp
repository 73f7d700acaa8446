// distlock/zookeeper/detail/keeper.hpp: the session keeper's decisions, without I/O or
// timers: how long a ping may take, what an unanswered ping means, and when the next
// one goes. The session (session.hpp) runs them on its strand; the unit tests
// (test/unit/zookeeper_keeper.cpp) run them on chosen times.
//
// Design note. The session's validity counts from the sending of the last request that
// was answered (`heard`): the ensemble heard from the client no earlier, so it cannot
// have expired the session before heard + timeout. Pings go every third of the
// timeout. Without an answer for 2/3 of the timeout (the Java client's read timeout)
// the session is in doubt; without one for the whole timeout it counts as expired,
// even before a server says so (a client only learns of expiry when it reconnects).
#pragma once

#include <distlock/clock.hpp>

#include <algorithm>
#include <chrono>

namespace distlock::zookeeper::detail::keeper {

/// What the keeper knows of the session when it pings.
struct view {
    duration timeout{};  ///< the negotiated session timeout
    time_point heard{};  ///< when the last answered request was sent
    bool has_session = false;
    bool connected = false;
};

/// Until when a ping sent at `sent` is awaited: over a connection, until the session
/// would be in doubt (the engine's own timeout may be longer), and at least a moment;
/// one that must connect first has `connect_budget`, the time to try every server.
inline time_point ping_deadline(const view& v, time_point sent, duration connect_budget)
{
    if (v.has_session && v.connected)
        return std::max(v.heard + v.timeout * 2 / 3, saturating_add(sent, std::chrono::milliseconds{10}));
    return saturating_add(sent, connect_budget);
}

/// What an unanswered ping means at `now`.
enum class verdict {
    waiting,  ///< nothing to do yet: ping again
    in_doubt, ///< no answer for 2/3 of the timeout: drop the connection, try the next server
    expired,  ///< no answer for the whole timeout: the session is lost
};

/// `doubted`: the connection was already dropped for silence since the last answer.
inline verdict unanswered(const view& v, time_point now, bool doubted)
{
    if (!v.has_session)
        return verdict::waiting;
    if (now >= v.heard + v.timeout)
        return verdict::expired;
    if (!doubted && now >= v.heard + v.timeout * 2 / 3)
        return verdict::in_doubt;
    return verdict::waiting;
}

/// When the next ping goes: a third of the timeout after an answered one was sent;
/// otherwise again shortly, backing off (25 ms doubling up to 800 ms) while nothing
/// answers, and never later than a third of the timeout.
inline time_point next_ping(bool answered, time_point sent, time_point now, duration timeout, int failures)
{
    const auto interval = std::max<duration>(timeout / 3, std::chrono::milliseconds{10});
    if (answered)
        return sent + interval;
    const auto pause = std::min<duration>(std::chrono::milliseconds{25} * (1 << std::clamp(failures, 0, 5)),
                                          std::chrono::milliseconds{800});
    return now + std::min<duration>(pause, interval);
}

} // namespace distlock::zookeeper::detail::keeper
