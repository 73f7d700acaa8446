// distlock/detail/url_query.hpp: the parts of a store URL that the stores'
// config::from_url() share: the key=value pairs of its query string (no
// percent-decoding: values are taken as written) and a list of host:port servers.
#pragma once

#include <charconv>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace distlock::detail {

struct query_pair {
    std::string_view key;
    std::string_view value;
    std::string_view text; ///< "key=value" as written
};

/// The pairs of `query` (the text after '?'), in order; nullopt when one of them has
/// no '='.
inline std::optional<std::vector<query_pair>> query_pairs(std::string_view query)
{
    std::vector<query_pair> out;
    while (!query.empty()) {
        const auto amp = query.find('&');
        const auto pair = query.substr(0, amp);
        query = amp == std::string_view::npos ? std::string_view{} : query.substr(amp + 1);
        const auto eq = pair.find('=');
        if (eq == std::string_view::npos)
            return std::nullopt;
        out.push_back({pair.substr(0, eq), pair.substr(eq + 1), pair});
    }
    return out;
}

/// Whole-text decimal number: the text is `out` and nothing else.
template <class T>
bool decimal(std::string_view s, T& out)
{
    const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
    return ec == std::errc{} && p == s.data() + s.size() && !s.empty();
}

struct host_port {
    std::string host;
    std::uint16_t port = 0;
};

/// "host[:port],host[:port],..." (IPv6 hosts in brackets), each without a port
/// taking `default_port`; nullopt when a host is empty or a port is not in 1..65535.
inline std::optional<std::vector<host_port>> host_list(std::string_view text, std::uint16_t default_port)
{
    std::vector<host_port> out;
    while (!text.empty()) {
        const auto comma = text.find(',');
        auto one = text.substr(0, comma);
        text = comma == std::string_view::npos ? std::string_view{} : text.substr(comma + 1);
        host_port h{{}, default_port};
        std::string_view port;
        if (one.starts_with('[')) {
            const auto close = one.find(']');
            if (close == std::string_view::npos || (close + 1 < one.size() && one[close + 1] != ':'))
                return std::nullopt;
            h.host = std::string{one.substr(1, close - 1)};
            if (close + 1 < one.size())
                port = one.substr(close + 2);
        } else {
            const auto colon = one.rfind(':');
            h.host = std::string{one.substr(0, colon)};
            if (colon != std::string_view::npos)
                port = one.substr(colon + 1);
        }
        if (!port.empty() && !decimal(port, h.port))
            return std::nullopt;
        if (h.host.empty() || h.port == 0)
            return std::nullopt;
        out.push_back(std::move(h));
    }
    return out;
}

} // namespace distlock::detail
