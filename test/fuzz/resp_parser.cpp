// libFuzzer target for the sans-I/O RESP parser (clang: -fsanitize=fuzzer,address,undefined).
// Besides "no crash, no sanitizer report, no unbounded allocation", it checks:
//  - a complete reply never claims more bytes than it was given;
//  - parsing is deterministic and depends only on the reply's own bytes: the consumed
//    prefix parses again to the same length, and with trailing bytes appended too;
//  - every strict prefix of a complete reply asks for more (never malformed/complete).
// Run by `./dev test` for a bounded time; longer runs: see docs/architecture.md.
#include <distlock/redis/resp/parser.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace resp = distlock::redis::resp;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    const std::string_view in{reinterpret_cast<const char*>(data), size};
    const auto r = resp::parse(in);
    if (r.status != resp::status::complete)
        return 0;
    if (r.consumed == 0 || r.consumed > size)
        __builtin_trap();
    const auto reply = in.substr(0, r.consumed);
    const auto again = resp::parse(reply);
    if (again.status != resp::status::complete || again.consumed != r.consumed)
        __builtin_trap();
    const auto more = resp::parse(std::string{reply} + "+trailing\r\n");
    if (more.status != resp::status::complete || more.consumed != r.consumed)
        __builtin_trap();
    // Strict prefixes (a sample, to keep each run fast).
    for (std::size_t cut = r.consumed - 1; cut + 64 > r.consumed && cut > 0; --cut)
        if (resp::parse(reply.substr(0, cut)).status != resp::status::need_more)
            __builtin_trap();
    return 0;
}
