// distlock/redis/resp/codec.hpp: RESP as a transport codec (transport/codec.hpp).
#pragma once

#include <distlock/redis/resp/parser.hpp>
#include <distlock/transport/codec.hpp>

namespace distlock::redis::resp {

struct codec {
    using message = value;

    /// On a connection in subscribed state (RESP2) every message is a push: the
    /// answers to SUBSCRIBE and UNSUBSCRIBE too, which the subscriber matches itself.
    bool subscribed = false;

    transport::decoded<value> decode(std::string_view bytes) const
    {
        auto r = parse(bytes);
        const auto status = r.status == status::complete    ? transport::decode_status::complete
                            : r.status == status::need_more ? transport::decode_status::need_more
                                                            : transport::decode_status::malformed;
        return {status, r.consumed, std::move(r.value)};
    }

    bool is_push(const value& v) const noexcept { return subscribed || v.type == type::push; }
};

static_assert(transport::codec<codec>);

} // namespace distlock::redis::resp
