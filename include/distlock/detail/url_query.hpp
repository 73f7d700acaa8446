// distlock/detail/url_query.hpp: the key=value pairs of a store URL's query string,
// as the stores' config::from_url() read them (no percent-decoding: values are taken
// as written).
#pragma once

#include <optional>
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

} // namespace distlock::detail
