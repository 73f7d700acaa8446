// distlock/http/parser.hpp: HTTP/1.1 responses, parsed from bytes. A plain function:
// no I/O, no Asio, so it is unit-tested and fuzzed on its own.
//
// Status line, headers, then a body framed by Content-Length or chunked transfer
// coding (a response with neither, other than 1xx/204/304, is refused: the client
// only speaks to APIs that frame their bodies, and reading to the end of the
// connection would make a lost reply look complete). Every size is checked against
// limits before anything is kept, so oversized or malformed input is `malformed`,
// never a crash or an unbounded allocation.
#pragma once

#include <distlock/transport/codec.hpp>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace distlock::http {

struct limits {
    std::size_t max_head = 64 * 1024;        ///< Status line and headers.
    std::size_t max_body = 16 * 1024 * 1024; ///< Body, after transfer decoding.
};

struct response {
    int status = 0;
    std::string reason;
    std::vector<std::pair<std::string, std::string>> headers; ///< names as sent
    std::string body;

    /// The first header named `name` (case-insensitive), if any.
    std::optional<std::string_view> header(std::string_view name) const
    {
        for (const auto& [n, v] : headers)
            if (n.size() == name.size() && std::equal(n.begin(), n.end(), name.begin(), [](char a, char b) {
                    return std::tolower(static_cast<unsigned char>(a)) == std::tolower(static_cast<unsigned char>(b));
                }))
                return std::string_view{v};
        return std::nullopt;
    }

    /// Whether the server will close the connection after this response.
    bool closes() const
    {
        const auto c = header("Connection");
        return c && (c->find("close") != std::string_view::npos || c->find("Close") != std::string_view::npos);
    }
};

namespace detail {

inline bool iequals(std::string_view a, std::string_view b)
{
    return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
               return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
           });
}

inline std::string_view trim(std::string_view s)
{
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t'))
        s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t'))
        s.remove_suffix(1);
    return s;
}

inline bool is_token_char(unsigned char c)
{
    return std::isalnum(c) || std::string_view{"!#$%&'*+-.^_`|~"}.find(static_cast<char>(c)) != std::string_view::npos;
}

using decoded = transport::decoded<response>;
using transport::decode_status;

inline decoded malformed() { return {decode_status::malformed, 0, {}}; }
inline decoded need_more() { return {decode_status::need_more, 0, {}}; }

// The chunked body that starts at `at`: need_more, malformed, or complete with the
// position just past the final CRLF.
inline decode_status chunked(std::string_view in, std::size_t& at, std::string& body, const limits& lim)
{
    for (;;) {
        const auto eol = in.find("\r\n", at);
        if (eol == std::string_view::npos)
            return in.size() - at > 1024 ? decode_status::malformed : decode_status::need_more;
        auto size_field = in.substr(at, eol - at);
        if (const auto semi = size_field.find(';'); semi != std::string_view::npos)
            size_field = size_field.substr(0, semi); // chunk extensions: ignored
        size_field = trim(size_field);
        std::uint64_t size = 0;
        const auto [end, ec] = std::from_chars(size_field.data(), size_field.data() + size_field.size(), size, 16);
        if (ec != std::errc{} || end != size_field.data() + size_field.size() || size_field.empty())
            return decode_status::malformed;
        if (size > lim.max_body - body.size())
            return decode_status::malformed;
        at = eol + 2;
        if (size == 0) {
            // Trailers (ignored) end with an empty line.
            for (;;) {
                const auto line_end = in.find("\r\n", at);
                if (line_end == std::string_view::npos)
                    return in.size() - at > lim.max_head ? decode_status::malformed : decode_status::need_more;
                const bool empty = line_end == at;
                at = line_end + 2;
                if (empty)
                    return decode_status::complete;
            }
        }
        if (in.size() - at < size + 2)
            return decode_status::need_more;
        body.append(in.substr(at, static_cast<std::size_t>(size)));
        at += static_cast<std::size_t>(size);
        if (in.substr(at, 2) != "\r\n")
            return decode_status::malformed;
        at += 2;
    }
}

} // namespace detail

namespace detail {

// A response's status line and headers, and how its body is framed.
struct head {
    response r;
    std::size_t body_start = 0;
    std::optional<std::uint64_t> content_length;
    bool chunked = false;
    bool bodiless() const { return (r.status >= 100 && r.status < 200) || r.status == 204 || r.status == 304; }
};

// need_more, malformed, or complete (then `out` holds the head).
inline decode_status parse_head(std::string_view in, const limits& lim, head& out)
{
    const auto head_end = in.find("\r\n\r\n");
    if (head_end == std::string_view::npos)
        return in.size() > lim.max_head ? decode_status::malformed : decode_status::need_more;
    if (head_end + 4 > lim.max_head)
        return decode_status::malformed;

    auto& r = out.r;
    const auto status_end = in.find("\r\n");
    const auto status_line = in.substr(0, status_end);
    // HTTP/1.x SP 3DIGIT [SP reason]
    if (status_line.size() < 12 || !status_line.starts_with("HTTP/1.") || status_line[8] != ' ')
        return decode_status::malformed;
    const auto code = status_line.substr(9, 3);
    if (!std::all_of(code.begin(), code.end(), [](unsigned char c) { return std::isdigit(c); }))
        return decode_status::malformed;
    r.status = (code[0] - '0') * 100 + (code[1] - '0') * 10 + (code[2] - '0');
    if (status_line.size() > 12) {
        if (status_line[12] != ' ')
            return decode_status::malformed;
        r.reason = std::string{status_line.substr(13)};
    }

    std::size_t at = status_end + 2;
    while (at < head_end + 2) {
        const auto eol = in.find("\r\n", at);
        const auto line = in.substr(at, eol - at);
        at = eol + 2;
        const auto colon = line.find(':');
        if (colon == std::string_view::npos || colon == 0)
            return decode_status::malformed;
        const auto name = line.substr(0, colon);
        if (!std::all_of(name.begin(), name.end(), [](unsigned char c) { return is_token_char(c); }))
            return decode_status::malformed;
        const auto value = trim(line.substr(colon + 1));
        if (value.find_first_of("\r\n") != std::string_view::npos)
            return decode_status::malformed;
        if (iequals(name, "Content-Length")) {
            std::uint64_t n = 0;
            const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
            if (ec != std::errc{} || end != value.data() + value.size() || value.empty())
                return decode_status::malformed;
            if (out.content_length && *out.content_length != n) // conflicting lengths: request smuggling territory
                return decode_status::malformed;
            out.content_length = n;
        } else if (iequals(name, "Transfer-Encoding")) {
            if (!iequals(value, "chunked"))
                return decode_status::malformed; // no other coding is spoken
            out.chunked = true;
        }
        r.headers.emplace_back(std::string{name}, std::string{value});
    }
    out.body_start = head_end + 4;
    if (out.chunked && out.content_length)
        return decode_status::malformed;
    return decode_status::complete;
}

} // namespace detail

/// Parses one response from the front of `in`.
inline transport::decoded<response> parse_response(std::string_view in, const limits& lim = {})
{
    using detail::decode_status;
    detail::head h;
    if (const auto s = detail::parse_head(in, lim, h); s != decode_status::complete)
        return {s, 0, {}};
    auto& r = h.r;
    if (h.bodiless())
        return {decode_status::complete, h.body_start, std::move(r)};
    if (h.chunked) {
        std::size_t end = h.body_start;
        const auto s = detail::chunked(in, end, r.body, lim);
        if (s != decode_status::complete)
            return {s, 0, {}};
        return {decode_status::complete, end, std::move(r)};
    }
    if (!h.content_length)
        return detail::malformed();
    if (*h.content_length > lim.max_body)
        return detail::malformed();
    if (in.size() - h.body_start < *h.content_length)
        return detail::need_more();
    r.body = std::string{in.substr(h.body_start, static_cast<std::size_t>(*h.content_length))};
    return {decode_status::complete, h.body_start + static_cast<std::size_t>(*h.content_length), std::move(r)};
}

/// HTTP/1.1 as a transport codec: every response answers the oldest request.
struct codec {
    using message = response;
    limits bounds{};
    transport::decoded<response> decode(std::string_view bytes) const { return parse_response(bytes, bounds); }
    bool is_push(const response&) const noexcept { return false; }
};

static_assert(transport::codec<codec>);

/// One message of a streaming response (an etcd watch): its head first (status and
/// headers; a response that is not chunked carries its whole body and is `last`),
/// then each newline-terminated line of its chunked body, then its end.
struct stream_message {
    enum class kind { head, line, end };
    kind what = kind::head;
    response head;    ///< kind::head
    std::string line; ///< kind::line, without its newline
    bool last = false;
};

/// A streaming response as a transport codec: the head answers the request, the lines
/// and the end are pushes. Stateful (the body's lines span chunks), so one per
/// connection; a response's chunks are decoded only once they are whole, and nothing
/// is kept from a call that needs more bytes, so a read that splits a chunk anywhere
/// decodes the same.
class stream_codec {
public:
    using message = stream_message;
    limits bounds{};

    transport::decoded<stream_message> decode(std::string_view in)
    {
        using detail::decode_status;
        if (!ready_.empty()) {
            auto m = std::move(ready_.front());
            ready_.pop_front();
            return {decode_status::complete, 0, std::move(m)};
        }
        if (phase_ == phase::done)
            return in.empty() ? decoded{decode_status::need_more, 0, {}} : decoded{decode_status::malformed, 0, {}};
        if (phase_ == phase::head)
            return decode_head(in);
        // Whole chunks, until one of them completes a line or the body ends.
        std::string partial = partial_;
        std::size_t at = 0;
        for (;;) {
            const auto eol = in.find("\r\n", at);
            if (eol == std::string_view::npos)
                return in.size() - at > 1024 ? decoded{decode_status::malformed, 0, {}}
                                             : decoded{decode_status::need_more, 0, {}};
            auto size_field = in.substr(at, eol - at);
            if (const auto semi = size_field.find(';'); semi != std::string_view::npos)
                size_field = size_field.substr(0, semi);
            size_field = detail::trim(size_field);
            std::uint64_t size = 0;
            const auto [end, ec] = std::from_chars(size_field.data(), size_field.data() + size_field.size(), size, 16);
            if (ec != std::errc{} || end != size_field.data() + size_field.size() || size_field.empty())
                return {decode_status::malformed, 0, {}};
            const auto data_at = eol + 2;
            if (size == 0) {
                // Trailers (ignored) end with an empty line.
                auto end_at = data_at;
                for (;;) {
                    const auto line_end = in.find("\r\n", end_at);
                    if (line_end == std::string_view::npos)
                        return in.size() - end_at > bounds.max_head ? decoded{decode_status::malformed, 0, {}}
                                                                    : decoded{decode_status::need_more, 0, {}};
                    const bool empty = line_end == end_at;
                    end_at = line_end + 2;
                    if (empty)
                        break;
                }
                phase_ = phase::done;
                partial_.clear();
                if (!partial.empty())
                    ready_.push_back(line_message(std::move(partial)));
                ready_.push_back(stream_message{stream_message::kind::end, {}, {}, true});
                auto m = std::move(ready_.front());
                ready_.pop_front();
                return {decode_status::complete, end_at, std::move(m)};
            }
            if (size > bounds.max_body)
                return {decode_status::malformed, 0, {}};
            if (in.size() - data_at < size + 2)
                return {decode_status::need_more, 0, {}};
            if (in.substr(data_at + static_cast<std::size_t>(size), 2) != "\r\n")
                return {decode_status::malformed, 0, {}};
            auto data = in.substr(data_at, static_cast<std::size_t>(size));
            at = data_at + static_cast<std::size_t>(size) + 2;
            for (auto nl = data.find('\n'); nl != std::string_view::npos; nl = data.find('\n')) {
                partial.append(data.substr(0, nl));
                if (!partial.empty())
                    ready_.push_back(line_message(std::exchange(partial, std::string{})));
                data.remove_prefix(nl + 1);
            }
            if (partial.size() + data.size() > bounds.max_body) {
                ready_.clear();
                return {decode_status::malformed, 0, {}};
            }
            partial.append(data);
            if (!ready_.empty()) {
                partial_ = std::move(partial);
                auto m = std::move(ready_.front());
                ready_.pop_front();
                return {decode_status::complete, at, std::move(m)};
            }
        }
    }

    bool is_push(const stream_message& m) const noexcept { return m.what != stream_message::kind::head; }

private:
    using decoded = transport::decoded<stream_message>;
    enum class phase { head, chunks, done };

    static stream_message line_message(std::string line)
    {
        stream_message m;
        m.what = stream_message::kind::line;
        m.line = std::move(line);
        return m;
    }

    decoded decode_head(std::string_view in)
    {
        using detail::decode_status;
        detail::head h;
        if (const auto s = detail::parse_head(in, bounds, h); s != decode_status::complete)
            return {s, 0, {}};
        if (h.r.status >= 100 && h.r.status < 200) // never asked for: no Expect is sent
            return {decode_status::malformed, 0, {}};
        if (h.chunked) {
            phase_ = phase::chunks;
            return {decode_status::complete, h.body_start, stream_message{stream_message::kind::head, std::move(h.r), {}, false}};
        }
        // A whole response (an error answer, typically): the stream ends with it.
        auto whole = parse_response(in, bounds);
        if (whole.status != decode_status::complete)
            return {whole.status, 0, {}};
        phase_ = phase::done;
        return {decode_status::complete, whole.consumed,
                stream_message{stream_message::kind::head, std::move(whole.message), {}, true}};
    }

    phase phase_ = phase::head;
    std::string partial_;                 // the body's last line, not yet ended
    std::deque<stream_message> ready_;    // decoded, not yet handed out
};

static_assert(transport::codec<stream_codec>);

/// One request's bytes: the request line, `headers` (Host and Content-Length are the
/// caller's to include or not; Content-Length is added for a body), the body.
inline std::string encode_request(std::string_view method, std::string_view target,
                                  const std::vector<std::pair<std::string, std::string>>& headers,
                                  std::string_view body)
{
    std::string out;
    out.reserve(128 + body.size());
    out.append(method).append(" ").append(target).append(" HTTP/1.1\r\n");
    bool has_length = false;
    for (const auto& [name, value] : headers) {
        has_length = has_length || detail::iequals(name, "Content-Length");
        out.append(name).append(": ").append(value).append("\r\n");
    }
    if (!has_length && (!body.empty() || method == "POST" || method == "PUT"))
        out.append("Content-Length: ").append(std::to_string(body.size())).append("\r\n");
    out.append("\r\n").append(body);
    return out;
}

} // namespace distlock::http
