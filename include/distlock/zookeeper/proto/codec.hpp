// distlock/zookeeper/proto/codec.hpp: ZooKeeper frames as transport codecs
// (transport/codec.hpp): the connect response of the handshake, then answers with
// their headers, notifications (xid -1) being pushes.
#pragma once

#include <distlock/transport/codec.hpp>
#include <distlock/zookeeper/proto/messages.hpp>

#include <cstdint>
#include <string_view>

namespace distlock::zookeeper::proto {

/// Frames larger than this are refused (ZooKeeper's own jute.maxbuffer is 1 MiB less
/// a little, by default).
inline constexpr std::size_t default_max_frame = 4 * 1024 * 1024;

namespace detail {

// One frame at the front of `in`: need_more, malformed, or complete with its payload.
inline transport::decode_status frame_at(std::string_view in, std::size_t max, std::string_view& payload,
                                         std::size_t& consumed)
{
    if (in.size() < 4)
        return transport::decode_status::need_more;
    reader r{in.substr(0, 4)};
    const auto n = r.i32();
    if (n < 0 || static_cast<std::size_t>(n) > max)
        return transport::decode_status::malformed;
    if (in.size() - 4 < static_cast<std::size_t>(n))
        return transport::decode_status::need_more;
    payload = in.substr(4, static_cast<std::size_t>(n));
    consumed = 4 + static_cast<std::size_t>(n);
    return transport::decode_status::complete;
}

} // namespace detail

/// The handshake's one answer: the connect response.
struct connect_codec {
    using message = connect_response;
    std::size_t max_frame = default_max_frame;

    transport::decoded<connect_response> decode(std::string_view in) const
    {
        std::string_view payload;
        std::size_t consumed = 0;
        const auto s = detail::frame_at(in, max_frame, payload, consumed);
        if (s != transport::decode_status::complete)
            return {s, 0, {}};
        auto c = parse_connect_response(payload);
        if (!c)
            return {transport::decode_status::malformed, 0, {}};
        return {transport::decode_status::complete, consumed, std::move(*c)};
    }
    bool is_push(const connect_response&) const noexcept { return false; }
};

/// Answers (in the order of the requests) and notifications (pushes).
struct codec {
    using message = reply;
    std::size_t max_frame = default_max_frame;

    transport::decoded<reply> decode(std::string_view in) const
    {
        std::string_view payload;
        std::size_t consumed = 0;
        const auto s = detail::frame_at(in, max_frame, payload, consumed);
        if (s != transport::decode_status::complete)
            return {s, 0, {}};
        auto r = parse_reply(payload);
        if (!r)
            return {transport::decode_status::malformed, 0, {}};
        return {transport::decode_status::complete, consumed, std::move(*r)};
    }
    bool is_push(const reply& r) const noexcept { return r.xid == xid::notification; }
};

static_assert(transport::codec<connect_codec>);
static_assert(transport::codec<codec>);

} // namespace distlock::zookeeper::proto
