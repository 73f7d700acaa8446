// distlock/redis/resp/value.hpp: a parsed RESP reply.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace distlock::redis::resp {

/// The RESP2 and RESP3 reply types.
enum class type : std::uint8_t {
    simple_string, ///< `+OK`
    error,         ///< `-ERR ...` (and RESP3 blob errors)
    integer,       ///< `:42`
    bulk_string,   ///< `$3\r\nabc`
    null,          ///< `$-1`, `*-1`, `_`
    array,         ///< `*N`
    map,           ///< `%N` (elements hold key, value, key, value, ...)
    set,           ///< `~N`
    push,          ///< `>N` (RESP3 out-of-band data)
    boolean,       ///< `#t` / `#f` (in `integer`)
    double_number, ///< `,3.14` (text kept as sent)
    big_number,    ///< (123... (text kept as sent)
    verbatim,      ///< =N txt:... (text without the format prefix)
};

/// One reply. Aggregates own their elements.
struct value {
    resp::type type = resp::type::null;
    std::string text;          ///< strings, errors, doubles, big numbers
    std::int64_t integer = 0;  ///< integers and booleans
    std::vector<value> elements;

    bool is_error() const noexcept { return type == resp::type::error; }
    bool is_null() const noexcept { return type == resp::type::null; }
    bool is_aggregate() const noexcept
    {
        return type == resp::type::array || type == resp::type::map || type == resp::type::set ||
               type == resp::type::push;
    }
    /// Strings of any kind (simple, bulk, verbatim).
    bool is_string() const noexcept
    {
        return type == resp::type::simple_string || type == resp::type::bulk_string ||
               type == resp::type::verbatim;
    }
};

} // namespace distlock::redis::resp
