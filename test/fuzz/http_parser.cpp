// libFuzzer target: the HTTP/1.1 response parser and the streaming codec (etcd's
// watch responses) on arbitrary bytes must never crash, read out of bounds, claim
// more bytes than they were given, or keep more than their limits allow.
#include <distlock/http/parser.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    const std::string_view in{reinterpret_cast<const char*>(data), size};
    const distlock::http::limits small{.max_head = 4096, .max_body = 1 << 16};
    const auto r = distlock::http::parse_response(in, small);
    if (r.status == distlock::transport::decode_status::complete && (r.consumed == 0 || r.consumed > size))
        std::abort();
    if (r.message.body.size() > small.max_body)
        std::abort();

    // The streaming codec, fed the same bytes in two pieces (split where the first
    // byte says), as the engine feeds it.
    distlock::http::stream_codec codec;
    codec.bounds = small;
    const std::size_t split = size ? data[0] % (size + 1) : 0;
    std::string buffer;
    std::size_t offset = 0;
    for (const auto piece : {in.substr(0, split), in.substr(split)}) {
        buffer.append(piece);
        for (int guard = 0; guard < 100000; ++guard) {
            const auto d = codec.decode(std::string_view{buffer}.substr(offset));
            if (d.status != distlock::transport::decode_status::complete)
                break;
            if (d.consumed > buffer.size() - offset || d.message.line.size() > small.max_body)
                std::abort();
            offset += d.consumed;
        }
    }
    return 0;
}
