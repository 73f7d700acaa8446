// distlock/redis/detail/handover.hpp: reads the lock a fair release handed to its
// head waiter, from the message the release published on the waiter's channel
// (redis/scripts.hpp, give_turn): "<id>:<try>:<token>:<us since the try>". The
// subscriber strips "<id>:"; this reads the rest. Sans-I/O, so that it can be fuzzed.
#pragma once

#include <distlock/handover.hpp>

#include <charconv>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string_view>

namespace distlock::redis::detail {

/// "<try>:<token>:<us>", each a decimal integer: try and token from 1, token and us
/// below 2^53 (the scripts' exact integers). Anything else is no hand-over: the
/// waiter then asks, and the store's answer tells it.
inline std::optional<handover> parse_handover(std::string_view text) noexcept
{
    constexpr std::uint64_t limit = std::uint64_t{1} << 53;
    std::uint64_t fields[3] = {};
    const char* at = text.data();
    const char* const end = text.data() + text.size();
    for (int i = 0; i < 3; ++i) {
        if (i > 0) {
            if (at == end || *at != ':')
                return std::nullopt;
            ++at;
        }
        if (at == end || *at < '0' || *at > '9') // from_chars would take a sign
            return std::nullopt;
        const auto [next, ec] = std::from_chars(at, end, fields[i]);
        if (ec != std::errc{} || fields[i] >= limit)
            return std::nullopt;
        at = next;
    }
    if (at != end || fields[0] == 0 || fields[1] == 0)
        return std::nullopt;
    return handover{fields[0], fields[1], std::chrono::microseconds{static_cast<std::int64_t>(fields[2])}};
}

} // namespace distlock::redis::detail
