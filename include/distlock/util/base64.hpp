// distlock/util/base64.hpp: standard base64 (RFC 4648, with padding), as the JSON
// APIs of DynamoDB (Binary attributes) and etcd (keys and values) carry bytes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace distlock::util {

inline std::string base64(std::string_view in)
{
    static constexpr char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    std::string out;
    out.reserve((in.size() + 2) / 3 * 4);
    std::size_t i = 0;
    for (; i + 3 <= in.size(); i += 3) {
        const auto n = (static_cast<unsigned char>(in[i]) << 16) | (static_cast<unsigned char>(in[i + 1]) << 8) |
                       static_cast<unsigned char>(in[i + 2]);
        out += {alphabet[(n >> 18) & 63], alphabet[(n >> 12) & 63], alphabet[(n >> 6) & 63], alphabet[n & 63]};
    }
    if (const auto rest = in.size() - i; rest > 0) {
        const auto n = (static_cast<unsigned char>(in[i]) << 16) |
                       (rest == 2 ? static_cast<unsigned char>(in[i + 1]) << 8 : 0);
        out += {alphabet[(n >> 18) & 63], alphabet[(n >> 12) & 63], rest == 2 ? alphabet[(n >> 6) & 63] : '=', '='};
    }
    return out;
}

/// The bytes of a padded base64 text; nullopt for anything else (a length that is not
/// a multiple of 4, a character outside the alphabet, padding not at the end, or
/// bits left over that a canonical encoder would not produce).
inline std::optional<std::string> from_base64(std::string_view in)
{
    if (in.size() % 4 != 0)
        return std::nullopt;
    auto value = [](char c) -> int {
        if (c >= 'A' && c <= 'Z')
            return c - 'A';
        if (c >= 'a' && c <= 'z')
            return c - 'a' + 26;
        if (c >= '0' && c <= '9')
            return c - '0' + 52;
        if (c == '+')
            return 62;
        if (c == '/')
            return 63;
        return -1;
    };
    std::string out;
    out.reserve(in.size() / 4 * 3);
    for (std::size_t i = 0; i < in.size(); i += 4) {
        const bool final_group = i + 4 == in.size();
        const int pad = final_group ? (in[i + 3] == '=') + (in[i + 2] == '=') : 0;
        if (pad == 1 && in[i + 2] == '=') // "x=y=" is not padding
            return std::nullopt;
        std::uint32_t n = 0;
        for (int k = 0; k < 4 - pad; ++k) {
            const int v = value(in[i + static_cast<std::size_t>(k)]);
            if (v < 0)
                return std::nullopt;
            n |= static_cast<std::uint32_t>(v) << (18 - 6 * k);
        }
        if ((pad == 1 && (n & 0xFF) != 0) || (pad == 2 && (n & 0xFFFF) != 0))
            return std::nullopt;
        out += static_cast<char>((n >> 16) & 0xFF);
        if (pad < 2)
            out += static_cast<char>((n >> 8) & 0xFF);
        if (pad < 1)
            out += static_cast<char>(n & 0xFF);
    }
    return out;
}

} // namespace distlock::util
