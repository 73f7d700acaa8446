// distlock/transport/codec.hpp: what the engine needs from a protocol. A codec is
// sans-I/O: it turns bytes into messages and says which messages are pushes (sent
// by the server on its own: pub/sub messages, watch events, keepalive answers) and
// which answer the oldest request in flight. Codecs are fuzzed on their own.
#pragma once

#include <concepts>
#include <cstddef>
#include <string_view>
#include <utility>

namespace distlock::transport {

enum class decode_status {
    complete,  ///< one message, `consumed` bytes long
    need_more, ///< a prefix of a message: read more
    malformed, ///< not the protocol: the connection cannot go on
};

template <class Message>
struct decoded {
    decode_status status = decode_status::need_more;
    std::size_t consumed = 0;
    Message message{};
};

/// A protocol the engine can speak: decode() reads one message from the front of
/// `bytes` (never more than `bytes`), is_push() tells pushes from replies.
template <class C>
concept codec = std::movable<C> && requires(C& c, const C& cc, std::string_view bytes,
                                            const typename C::message& m) {
    { c.decode(bytes) } -> std::same_as<decoded<typename C::message>>;
    { cc.is_push(m) } -> std::convertible_to<bool>;
};

} // namespace distlock::transport
