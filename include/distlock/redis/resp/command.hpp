// distlock/redis/resp/command.hpp: encoding commands as RESP arrays of bulk strings.
// Binary-safe: arguments may hold any bytes.
#pragma once

#include <charconv>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <string>
#include <string_view>
#include <type_traits>

namespace distlock::redis::resp {

namespace detail {
inline void append_number(std::string& out, std::size_t n)
{
    char digits[24];
    const auto [end, ec] = std::to_chars(digits, digits + sizeof digits, n);
    out.append(digits, end);
}
} // namespace detail

/// Appends one command (`args[0]` is its name) to `out`.
inline void append_command(std::string& out, std::initializer_list<std::string_view> args)
{
    out.push_back('*');
    detail::append_number(out, args.size());
    out.append("\r\n");
    for (const auto a : args) {
        out.push_back('$');
        detail::append_number(out, a.size());
        out.append("\r\n");
        out.append(a);
        out.append("\r\n");
    }
}

/// Appends a command whose arguments are in a range of string-like values. The
/// command is written in place after one resize (it is encoded for every request).
template <class Range>
void append_command_range(std::string& out, const Range& args)
{
    std::size_t n = 0, bytes = 0;
    for (const auto& a : args) {
        ++n;
        bytes += std::string_view{a}.size();
    }
    constexpr std::size_t header = 1 + 20 + 2; // '*' or '$', a length, CRLF
    const std::size_t start = out.size();
    out.resize(start + header + n * (header + 2) + bytes); // at most this much
    char* p = out.data() + start;
    const auto put_header = [&p](char mark, std::size_t length) {
        *p++ = mark;
        p = std::to_chars(p, p + 20, length).ptr;
        *p++ = '\r';
        *p++ = '\n';
    };
    put_header('*', n);
    for (const auto& a : args) {
        const std::string_view s{a};
        put_header('$', s.size());
        if (!s.empty())
            std::memcpy(p, s.data(), s.size());
        p += s.size();
        *p++ = '\r';
        *p++ = '\n';
    }
    out.resize(static_cast<std::size_t>(p - out.data()));
}

/// A single command as a string.
inline std::string command(std::initializer_list<std::string_view> args)
{
    std::string out;
    append_command(out, args);
    return out;
}

/// A single command from its name and arguments, each anything a std::string_view
/// can be made from: callable inside a co_await expression, where g++ 12 refuses a
/// braced list (command_of("DEL", key1, key2)).
template <class... Args>
    requires(std::is_convertible_v<const Args&, std::string_view> && ...)
std::string command_of(std::string_view name, const Args&... args)
{
    return command({name, std::string_view{args}...});
}

/// Decimal text of an integer, for command arguments.
inline std::string to_arg(std::int64_t v)
{
    char digits[24];
    const auto [end, ec] = std::to_chars(digits, digits + sizeof digits, v);
    return std::string(digits, end);
}

} // namespace distlock::redis::resp
