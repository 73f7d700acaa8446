// distlock/redis/resp/parser.hpp: RESP2/RESP3 reply parser. A plain function over
// bytes: no I/O, no coroutines, no Asio, so it can be unit-tested and fuzzed.
//
// Every size it reads is checked against limits before anything is allocated, and
// nesting is bounded, so malformed, truncated, oversized or deeply nested input gives
// `malformed` or `need_more`, never a crash or an unbounded allocation.
#pragma once

#include <distlock/redis/resp/value.hpp>

#include <algorithm>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string_view>
#include <utility>

namespace distlock::redis::resp {

/// Bounds on what the parser accepts.
struct limits {
    std::size_t max_depth = 16;                   ///< Nesting of aggregates.
    std::size_t max_string = 16 * 1024 * 1024;    ///< Bytes in one string.
    std::size_t max_elements = 1024 * 1024;       ///< Elements in one aggregate.
};

enum class status {
    complete,  ///< One reply was parsed; `consumed` bytes belong to it.
    need_more, ///< The input ends inside a reply: read more and parse again.
    malformed, ///< Not RESP, or beyond the limits: the connection cannot continue.
};

struct parse_result {
    resp::status status = status::need_more;
    std::size_t consumed = 0;
    resp::value value;
};

namespace detail {

class parser {
public:
    parser(std::string_view in, const limits& lim) noexcept : in_{in}, limits_{lim} {}

    parse_result run()
    {
        parse_result r;
        r.status = parse(r.value, 0);
        if (r.status == status::complete)
            r.consumed = pos_;
        return r;
    }

private:
    // Reads up to CRLF; need_more if no CRLF yet, malformed on a bare CR or LF.
    status line(std::string_view& out)
    {
        const auto end = in_.find("\r\n", pos_);
        if (end == std::string_view::npos) {
            // Lines are short; a long run of bytes without CRLF is not RESP.
            if (in_.size() - pos_ > limits_.max_string + 64)
                return status::malformed;
            return status::need_more;
        }
        out = in_.substr(pos_, end - pos_);
        pos_ = end + 2;
        return status::complete;
    }

    static bool to_int(std::string_view s, std::int64_t& out) noexcept
    {
        if (s.empty())
            return false;
        const char* first = s.data();
        if (*first == '+') // from_chars does not take a leading '+'
            ++first;
        const auto [ptr, ec] = std::from_chars(first, s.data() + s.size(), out);
        return ec == std::errc{} && ptr == s.data() + s.size();
    }

    // Reads `n` bytes plus CRLF.
    status blob(std::size_t n, std::string& out)
    {
        if (in_.size() - pos_ < n + 2)
            return status::need_more;
        if (in_[pos_ + n] != '\r' || in_[pos_ + n + 1] != '\n')
            return status::malformed;
        out.assign(in_.data() + pos_, n);
        pos_ += n + 2;
        return status::complete;
    }

    status parse(value& v, std::size_t depth)
    {
        if (depth > limits_.max_depth)
            return status::malformed;
        if (pos_ >= in_.size())
            return status::need_more;
        const char marker = in_[pos_++];
        std::string_view text;
        if (const auto s = line(text); s != status::complete)
            return s;
        switch (marker) {
        case '+':
            v.type = type::simple_string;
            v.text.assign(text);
            return status::complete;
        case '-':
            v.type = type::error;
            v.text.assign(text);
            return status::complete;
        case ':':
            v.type = type::integer;
            return to_int(text, v.integer) ? status::complete : status::malformed;
        case '_':
            v.type = type::null;
            return text.empty() ? status::complete : status::malformed;
        case '#':
            v.type = type::boolean;
            if (text == "t" || text == "f") {
                v.integer = text == "t";
                return status::complete;
            }
            return status::malformed;
        case ',':
            v.type = type::double_number;
            v.text.assign(text);
            return text.empty() ? status::malformed : status::complete;
        case '(':
            v.type = type::big_number;
            v.text.assign(text);
            return text.empty() ? status::malformed : status::complete;
        case '$':
        case '!':
        case '=':
            return string_body(marker, text, v);
        case '*':
        case '%':
        case '~':
        case '>':
        case '|':
            return aggregate(marker, text, v, depth);
        default:
            return status::malformed;
        }
    }

    status string_body(char marker, std::string_view length, value& v)
    {
        std::int64_t n = 0;
        if (!to_int(length, n) || n < -1)
            return status::malformed;
        if (n == -1) {
            if (marker != '$')
                return status::malformed;
            v.type = type::null;
            return status::complete;
        }
        if (static_cast<std::uint64_t>(n) > limits_.max_string)
            return status::malformed;
        v.type = marker == '!' ? type::error : marker == '=' ? type::verbatim : type::bulk_string;
        if (const auto s = blob(static_cast<std::size_t>(n), v.text); s != status::complete)
            return s;
        if (marker == '=') { // "txt:" prefix names the format
            if (v.text.size() < 4 || v.text[3] != ':')
                return status::malformed;
            v.text.erase(0, 4);
        }
        return status::complete;
    }

    status aggregate(char marker, std::string_view length, value& v, std::size_t depth)
    {
        std::int64_t n = 0;
        if (!to_int(length, n) || n < -1)
            return status::malformed;
        if (n == -1) {
            if (marker != '*')
                return status::malformed;
            v.type = type::null;
            return status::complete;
        }
        std::uint64_t count = static_cast<std::uint64_t>(n);
        if (marker == '%' || marker == '|') // key and value per entry
            count *= 2;
        if (count > limits_.max_elements)
            return status::malformed;
        v.type = marker == '%' ? type::map : marker == '~' ? type::set : marker == '>' ? type::push : type::array;
        // Each element needs at least 3 bytes, so never reserve more than the input holds.
        v.elements.reserve(std::min<std::size_t>(static_cast<std::size_t>(count), (in_.size() - pos_) / 3));
        for (std::uint64_t i = 0; i < count; ++i) {
            v.elements.emplace_back();
            if (const auto s = parse(v.elements.back(), depth + 1); s != status::complete)
                return s;
        }
        if (marker == '|') { // an attribute precedes the real reply: skip it
            value real;
            v.elements.clear();
            const auto s = parse(real, depth);
            if (s == status::complete)
                v = std::move(real);
            return s;
        }
        return status::complete;
    }

    std::string_view in_;
    std::size_t pos_ = 0;
    const limits& limits_;
};

} // namespace detail

/// Parses one reply from the start of `in`.
inline parse_result parse(std::string_view in, const limits& lim = {})
{
    return detail::parser{in, lim}.run();
}

} // namespace distlock::redis::resp
