// distlock/redis/detail/sha1.hpp: SHA-1 (FIPS 180-4), only to name Lua scripts for
// EVALSHA the way Redis does. Not used for anything that needs a secure hash.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace distlock::redis::detail {

inline std::string sha1_hex(std::string_view message)
{
    auto rotl = [](std::uint32_t x, int n) { return (x << n) | (x >> (32 - n)); };
    std::array<std::uint32_t, 5> h{0x67452301u, 0xEFCDAB89u, 0x98BADCFEu, 0x10325476u, 0xC3D2E1F0u};

    std::string data{message};
    const std::uint64_t bit_length = static_cast<std::uint64_t>(message.size()) * 8;
    data.push_back(static_cast<char>(0x80));
    while (data.size() % 64 != 56)
        data.push_back('\0');
    for (int i = 7; i >= 0; --i)
        data.push_back(static_cast<char>((bit_length >> (8 * i)) & 0xff));

    for (std::size_t chunk = 0; chunk < data.size(); chunk += 64) {
        std::array<std::uint32_t, 80> w{};
        for (int i = 0; i < 16; ++i)
            for (int b = 0; b < 4; ++b)
                w[i] = (w[i] << 8) | static_cast<unsigned char>(data[chunk + 4 * i + b]);
        for (int i = 16; i < 80; ++i)
            w[i] = rotl(w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16], 1);
        auto [a, b, c, d, e] = h;
        for (int i = 0; i < 80; ++i) {
            std::uint32_t f, k;
            if (i < 20) {
                f = (b & c) | (~b & d);
                k = 0x5A827999u;
            } else if (i < 40) {
                f = b ^ c ^ d;
                k = 0x6ED9EBA1u;
            } else if (i < 60) {
                f = (b & c) | (b & d) | (c & d);
                k = 0x8F1BBCDCu;
            } else {
                f = b ^ c ^ d;
                k = 0xCA62C1D6u;
            }
            const std::uint32_t t = rotl(a, 5) + f + e + k + w[i];
            e = d;
            d = c;
            c = rotl(b, 30);
            b = a;
            a = t;
        }
        h[0] += a;
        h[1] += b;
        h[2] += c;
        h[3] += d;
        h[4] += e;
    }
    static constexpr char digits[] = "0123456789abcdef";
    std::string out;
    for (auto word : h)
        for (int i = 28; i >= 0; i -= 4)
            out.push_back(digits[(word >> i) & 0xf]);
    return out;
}

} // namespace distlock::redis::detail
