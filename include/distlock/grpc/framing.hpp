// distlock/grpc/framing.hpp: gRPC over HTTP/2, the parts without I/O: messages in
// their length-prefixed frames, a response's status from its header fields, and the
// request's header fields. Pure, fuzzed with the protobuf reader.
#pragma once

#include <charconv>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace distlock::grpc {

/// gRPC's status codes that this client decides by (the others are passed on as
/// numbers: the store that called says what they mean).
enum class code : int {
    ok = 0,
    cancelled = 1,
    unknown = 2,
    internal = 13,
    unavailable = 14,
    unauthenticated = 16,
};

/// The largest message this client reads (a reply larger than this is refused, not
/// buffered: a lock's replies are small).
inline constexpr std::size_t max_message_bytes = 16u << 20;

/// `message` in its frame: not compressed, its length in four bytes, big-endian.
inline std::string frame(std::string_view message)
{
    std::string out;
    out.reserve(5 + message.size());
    const auto n = static_cast<std::uint32_t>(message.size());
    out.push_back('\0');
    out.push_back(static_cast<char>(n >> 24));
    out.push_back(static_cast<char>(n >> 16));
    out.push_back(static_cast<char>(n >> 8));
    out.push_back(static_cast<char>(n));
    out.append(message);
    return out;
}

/// Splits a response body, as its bytes arrive, into messages.
class deframer {
public:
    enum class status { message, need_more, malformed };

    void append(std::string_view bytes) { buffer_.append(bytes); }

    /// The next whole message into `out`; malformed for a compressed one (this client
    /// asks for none) or one larger than max_message_bytes, with `why`.
    status next(std::string& out, std::string& why)
    {
        const std::string_view rest = std::string_view{buffer_}.substr(offset_);
        if (rest.size() < 5)
            return compact(), status::need_more;
        if (rest[0] != '\0') {
            why = "a compressed message (none was asked for)";
            return status::malformed;
        }
        const auto b = [&](std::size_t i) { return static_cast<std::uint32_t>(static_cast<unsigned char>(rest[i])); };
        const std::size_t n = (b(1) << 24) | (b(2) << 16) | (b(3) << 8) | b(4);
        if (n > max_message_bytes) {
            why = "a message of " + std::to_string(n) + " bytes";
            return status::malformed;
        }
        if (rest.size() - 5 < n)
            return compact(), status::need_more;
        out.assign(rest.substr(5, n));
        offset_ += 5 + n;
        return status::message;
    }

    /// Bytes of a message not yet whole.
    bool partial() const noexcept { return offset_ < buffer_.size(); }

private:
    void compact()
    {
        if (offset_ > 0) {
            buffer_.erase(0, offset_);
            offset_ = 0;
        }
    }
    std::string buffer_;
    std::size_t offset_ = 0;
};

/// A grpc-status value: a decimal code; nullopt for anything else.
inline std::optional<int> parse_status(std::string_view value)
{
    int v = 0;
    auto [p, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
    if (ec != std::errc{} || p != value.data() + value.size() || value.empty() || v < 0)
        return std::nullopt;
    return v;
}

/// grpc-message's text: percent-encoded bytes decoded; a '%' not followed by two hex
/// digits is kept as it is.
inline std::string percent_decoded(std::string_view in)
{
    std::string out;
    out.reserve(in.size());
    for (std::size_t i = 0; i < in.size(); ++i) {
        unsigned byte = 0;
        if (in[i] == '%' && i + 2 < in.size()) {
            const auto digits = in.substr(i + 1, 2);
            const auto [end, ec] = std::from_chars(digits.data(), digits.data() + 2, byte, 16);
            if (ec == std::errc{} && end == digits.data() + 2) {
                out.push_back(static_cast<char>(byte));
                i += 2;
                continue;
            }
        }
        out.push_back(in[i]);
    }
    return out;
}

/// The status gRPC gives a response whose HTTP status is not 200 (an intermediary's,
/// or a server that is not gRPC): gRPC's own mapping of HTTP codes.
inline int status_of_http(int http_status) noexcept
{
    switch (http_status) {
    case 400:
        return static_cast<int>(code::internal);
    case 401:
        return static_cast<int>(code::unauthenticated);
    case 403:
        return 7; // PERMISSION_DENIED
    case 404:
        return 12; // UNIMPLEMENTED
    case 429:
    case 502:
    case 503:
    case 504:
        return static_cast<int>(code::unavailable);
    default:
        return static_cast<int>(code::unknown);
    }
}

} // namespace distlock::grpc
