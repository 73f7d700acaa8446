// distlock/owner_token.hpp: the random value that says who holds a lock.
#pragma once

#include <distlock/util/os_random.hpp>

#include <array>
#include <compare>
#include <cstddef>
#include <string>
#include <string_view>

namespace distlock {

/// 128 random bits from the OS CSPRNG identifying one acquisition. The store keeps it
/// beside the lock, and release and extend only act when it matches, so a holder that
/// lost its lease can never remove or extend the next holder's lock.
class owner_token {
public:
    static constexpr std::size_t size = 16;

    /// The all-zero token; never produced by generate().
    owner_token() = default;

    /// A fresh token from the OS CSPRNG.
    static owner_token generate() noexcept
    {
        owner_token t;
        do {
            util::os_random_bytes(t.bytes_);
        } while (t.is_nil());
        return t;
    }

    /// Parses the 32-character lowercase or uppercase hex form; nil on malformed input.
    static owner_token from_hex(std::string_view hex) noexcept
    {
        owner_token t;
        if (hex.size() != 2 * size)
            return {};
        for (std::size_t i = 0; i < size; ++i) {
            const int hi = hex_value(hex[2 * i]), lo = hex_value(hex[2 * i + 1]);
            if (hi < 0 || lo < 0)
                return {};
            t.bytes_[i] = static_cast<std::byte>(hi * 16 + lo);
        }
        return t;
    }

    bool is_nil() const noexcept { return *this == owner_token{}; }

    const std::array<std::byte, size>& bytes() const noexcept { return bytes_; }

    /// 32 lowercase hex characters: the form stores keep.
    std::string to_hex() const
    {
        static constexpr char digits[] = "0123456789abcdef";
        std::string out(2 * size, '0');
        for (std::size_t i = 0; i < size; ++i) {
            const auto b = static_cast<unsigned>(bytes_[i]);
            out[2 * i] = digits[b >> 4];
            out[2 * i + 1] = digits[b & 0xf];
        }
        return out;
    }

    friend bool operator==(const owner_token&, const owner_token&) = default;
    friend auto operator<=>(const owner_token&, const owner_token&) = default;

private:
    static int hex_value(char c) noexcept
    {
        if (c >= '0' && c <= '9')
            return c - '0';
        if (c >= 'a' && c <= 'f')
            return c - 'a' + 10;
        if (c >= 'A' && c <= 'F')
            return c - 'A' + 10;
        return -1;
    }

    std::array<std::byte, size> bytes_{};
};

} // namespace distlock
