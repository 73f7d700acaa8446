// distlock/postgres/detail/keys.hpp: which advisory key a resource id names, under
// each of config::advisory_key's functions, decided without I/O.
//
// Under bigint and int4pair the id *is* the key, written one way only (no sign on a
// positive number, no leading zero, no "-0", no spaces): the fence lives in the lease
// table's row of the id, so two spellings of one key would be one lock with two fence
// counters, and a stale holder of one spelling could still write.
#pragma once

#include <distlock/postgres/config.hpp>

#include <charconv>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace distlock::postgres::detail {

/// True when `text` is well-formed UTF-8 (no overlong forms, no surrogates, nothing
/// above U+10FFFF), as PostgreSQL's convert_from(..., 'UTF8') requires.
inline bool valid_utf8(std::string_view text) noexcept
{
    std::size_t i = 0;
    while (i < text.size()) {
        const auto b = static_cast<unsigned char>(text[i]);
        std::size_t more = 0;
        unsigned char lo = 0x80, hi = 0xbf; // the second byte's range
        if (b < 0x80)
            more = 0;
        else if (b >= 0xc2 && b <= 0xdf)
            more = 1;
        else if (b >= 0xe0 && b <= 0xef) {
            more = 2;
            if (b == 0xe0)
                lo = 0xa0; // no overlong three-byte forms
            else if (b == 0xed)
                hi = 0x9f; // no surrogates
        } else if (b >= 0xf0 && b <= 0xf4) {
            more = 3;
            if (b == 0xf0)
                lo = 0x90; // no overlong four-byte forms
            else if (b == 0xf4)
                hi = 0x8f; // nothing above U+10FFFF
        } else
            return false;
        if (text.size() - i <= more)
            return false;
        for (std::size_t k = 1; k <= more; ++k) {
            const auto c = static_cast<unsigned char>(text[i + k]);
            if (k == 1 ? (c < lo || c > hi) : (c < 0x80 || c > 0xbf))
                return false;
        }
        i += more + 1;
    }
    return true;
}

/// `text` as a decimal integer from `lo` to `hi`, written canonically ("-" only on a
/// negative number, no leading zero, no "-0"); nullopt otherwise.
inline std::optional<std::int64_t> canonical_decimal(std::string_view text, std::int64_t lo, std::int64_t hi) noexcept
{
    std::string_view digits = text;
    if (!digits.empty() && digits.front() == '-')
        digits.remove_prefix(1);
    if (digits.empty() || digits.size() > 19 || (digits.front() == '0' && (digits.size() > 1 || digits != text)))
        return std::nullopt;
    for (const char c : digits)
        if (c < '0' || c > '9')
            return std::nullopt;
    std::int64_t v = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (ec != std::errc{} || end != text.data() + text.size() || v < lo || v > hi)
        return std::nullopt;
    return v;
}

/// The integers of `resource`'s key under `f`: one (bigint), two (int4pair), none
/// (sha256 and hashtext, whose keys the server computes from the id); nullopt when
/// the id names no key.
inline std::optional<std::vector<std::int64_t>> advisory_key_numbers(advisory_key_function f,
                                                                     std::string_view resource)
{
    constexpr auto i32_min = std::numeric_limits<std::int32_t>::min();
    constexpr auto i32_max = std::numeric_limits<std::int32_t>::max();
    switch (f) {
    case advisory_key_function::sha256:
        return std::vector<std::int64_t>{};
    case advisory_key_function::hashtext:
        if (resource.find('\0') != std::string_view::npos || !valid_utf8(resource))
            return std::nullopt;
        return std::vector<std::int64_t>{};
    case advisory_key_function::bigint:
        if (const auto v = canonical_decimal(resource, std::numeric_limits<std::int64_t>::min(),
                                             std::numeric_limits<std::int64_t>::max()))
            return std::vector<std::int64_t>{*v};
        return std::nullopt;
    case advisory_key_function::int4pair: {
        const auto comma = resource.find(',');
        if (comma == std::string_view::npos)
            return std::nullopt;
        const auto a = canonical_decimal(resource.substr(0, comma), i32_min, i32_max);
        const auto b = canonical_decimal(resource.substr(comma + 1), i32_min, i32_max);
        if (!a || !b)
            return std::nullopt;
        return std::vector<std::int64_t>{*a, *b};
    }
    }
    return std::nullopt;
}

/// Why `resource` cannot be locked under `f` by a grant of `permits` (0: a mutex's or
/// a shared mutex's; N: a semaphore's permit); empty when it can.
///
/// A semaphore is refused under every function but sha256: its N permits are locks
/// of keys derived from the id, and under these functions the key space is the
/// foreign clients' own (bigint and int4pair: every key may be one an application
/// chose; hashtext: the same 64-bit space other applications choose keys in), so no
/// derived key is known to be free; and the foreign recipes have no permits to share.
inline std::string advisory_key_problem(advisory_key_function f, std::string_view resource, std::uint32_t permits)
{
    const std::string name{advisory_key_name(f)};
    if (permits > 0 && f != advisory_key_function::sha256)
        return "advisory_key=" + name +
               ": semaphores are not supported (their permits would lock keys derived from the id, in the key "
               "space foreign clients choose their keys in); use advisory_key=sha256 or the lease table";
    if (advisory_key_numbers(f, resource))
        return {};
    switch (f) {
    case advisory_key_function::hashtext:
        return "advisory_key=hashtext: the id must be UTF-8 text without NUL bytes (hashtext hashes text)";
    case advisory_key_function::bigint:
        return "advisory_key=bigint: the id must be the key, a decimal signed 64-bit integer written without '+', "
               "leading zeros or spaces (such as \"42\" or \"-7\")";
    case advisory_key_function::int4pair:
        return "advisory_key=int4pair: the id must be the key, two decimal signed 32-bit integers with a comma "
               "between, without '+', leading zeros or spaces (such as \"12,34\")";
    case advisory_key_function::sha256:
        break;
    }
    return "advisory_key=" + name + ": the id names no key";
}

} // namespace distlock::postgres::detail
