// distlock/redis/resp/command.hpp: encoding commands as RESP arrays of bulk strings.
// Binary-safe: arguments may hold any bytes.
#pragma once

#include <charconv>
#include <cstdint>
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

/// Appends the header of a command of `n` arguments ("*n\r\n").
inline void append_array_header(std::string& out, std::size_t n)
{
    out.push_back('*');
    detail::append_number(out, n);
    out.append("\r\n", 2);
}

/// Appends one argument as a bulk string ("$length\r\n" bytes "\r\n").
inline void append_bulk(std::string& out, std::string_view s)
{
    out.push_back('$');
    detail::append_number(out, s.size());
    out.append("\r\n", 2);
    out.append(s);
    out.append("\r\n", 2);
}

/// The most a header or a bulk string adds to its bytes: reserve with it, so that a
/// command is encoded into one allocation.
inline constexpr std::size_t framing_bytes = 1 + 20 + 2 + 2;

/// Appends one command (`args[0]` is its name) to `out`.
inline void append_command(std::string& out, std::initializer_list<std::string_view> args)
{
    append_array_header(out, args.size());
    for (const auto a : args)
        append_bulk(out, a);
}

/// Appends a command whose arguments are in a range of string-like values.
template <class Range>
void append_command_range(std::string& out, const Range& args)
{
    std::size_t n = 0, bytes = framing_bytes;
    for (const auto& a : args) {
        ++n;
        bytes += std::string_view{a}.size() + framing_bytes;
    }
    out.reserve(out.size() + bytes);
    append_array_header(out, n);
    for (const auto& a : args)
        append_bulk(out, std::string_view{a});
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
