// libFuzzer target: the HTTP/1.1 response parser on arbitrary bytes must never crash,
// read out of bounds or claim more bytes than it was given.
#include <distlock/http/parser.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdlib>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    const std::string_view in{reinterpret_cast<const char*>(data), size};
    const distlock::http::limits small{.max_head = 4096, .max_body = 1 << 16};
    const auto r = distlock::http::parse_response(in, small);
    if (r.status == distlock::transport::decode_status::complete && (r.consumed == 0 || r.consumed > size))
        std::abort();
    if (r.message.body.size() > small.max_body)
        std::abort();
    return 0;
}
