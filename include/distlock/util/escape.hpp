// distlock/util/escape.hpp: resource ids as text that stores with a path or key
// syntax accept (etcd keys, ZooKeeper node names): [A-Za-z0-9._:-] kept, every other
// byte written as %XX (upper-case hex). Injective, never holds a '/', and the
// inverse refuses anything escape() does not write, so one id has one spelling.
#pragma once

#include <charconv>
#include <optional>
#include <string>
#include <string_view>

namespace distlock::util {

inline std::string escape(std::string_view resource)
{
    static constexpr char hex[] = "0123456789ABCDEF";
    std::string out;
    out.reserve(resource.size());
    for (const unsigned char c : resource) {
        const bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                           c == '_' || c == ':' || c == '-';
        if (plain) {
            out += static_cast<char>(c);
        } else {
            out += '%';
            out += hex[c >> 4];
            out += hex[c & 15];
        }
    }
    return out;
}

/// The inverse of escape(); nullopt for text escape() never writes.
inline std::optional<std::string> unescape(std::string_view escaped)
{
    std::string out;
    for (std::size_t i = 0; i < escaped.size(); ++i) {
        const char c = escaped[i];
        if (c != '%') {
            if (escape(std::string_view{&c, 1}).size() != 1)
                return std::nullopt;
            out += c;
            continue;
        }
        if (i + 2 >= escaped.size())
            return std::nullopt;
        unsigned value = 0;
        const auto digits = escaped.substr(i + 1, 2);
        const auto [end, ec] = std::from_chars(digits.data(), digits.data() + 2, value, 16);
        if (ec != std::errc{} || end != digits.data() + 2 || digits.find_first_of("abcdef") != std::string_view::npos)
            return std::nullopt;
        const char byte = static_cast<char>(value);
        if (escape(std::string_view{&byte, 1}).size() == 1) // a plain byte escaped: not canonical
            return std::nullopt;
        out += byte;
        i += 2;
    }
    return out;
}

} // namespace distlock::util
