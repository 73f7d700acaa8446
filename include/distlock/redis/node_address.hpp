// distlock/redis/node_address.hpp: host:port of one server of a cluster or a
// Sentinel set, and its parser; no I/O, so that the cluster codecs stay sans-I/O.
#pragma once

#include <charconv>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace distlock::redis {

/// host:port of one server, as a cluster or a Sentinel names it.
struct node_address {
    std::string host;
    std::uint16_t port = 0;

    /// host:port, [v6]:port for IPv6.
    std::string describe() const
    {
        return host.find(':') != std::string::npos ? "[" + host + "]:" + std::to_string(port)
                                                   : host + ":" + std::to_string(port);
    }
    friend bool operator==(const node_address&, const node_address&) = default;
    friend auto operator<=>(const node_address&, const node_address&) = default;
};

/// Parses host:port, [v6]:port or v6:port (the last colon splits). nullopt when the
/// host is empty or the port missing, zero or not a number.
inline std::optional<node_address> parse_address(std::string_view text)
{
    node_address a;
    std::string_view port;
    if (text.starts_with('[')) {
        const auto close = text.find(']');
        if (close == std::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':')
            return std::nullopt;
        a.host = std::string{text.substr(1, close - 1)};
        port = text.substr(close + 2);
    } else {
        const auto colon = text.rfind(':');
        if (colon == std::string_view::npos)
            return std::nullopt;
        a.host = std::string{text.substr(0, colon)};
        port = text.substr(colon + 1);
    }
    const auto [p, ec] = std::from_chars(port.data(), port.data() + port.size(), a.port);
    if (ec != std::errc{} || p != port.data() + port.size() || a.port == 0 || a.host.empty())
        return std::nullopt;
    return a;
}

} // namespace distlock::redis
