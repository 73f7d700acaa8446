// distlock/util/splitmix.hpp: a small seeded pseudo-random generator for retry
// jitter and the in-process store's fault injection.
//
// Why not <random>: neither use needs its engines' statistical quality, and the
// header with a std::mt19937_64 and its distributions instantiated in inline code
// was among the costliest things every translation unit that includes distlock
// paid (bench/HISTORY.md, compile cost). SplitMix64 (Steele, Lea and Flood, 2014)
// passes BigCrush with one 64-bit word of state; the same seed gives the same
// sequence on every platform, which the seeded simulation's replays rely on.
#pragma once

#include <cstdint>

namespace distlock::util {

class splitmix64 {
public:
    explicit constexpr splitmix64(std::uint64_t seed = 0) noexcept : state_{seed} {}

    constexpr void seed(std::uint64_t s) noexcept { state_ = s; }

    constexpr std::uint64_t next() noexcept
    {
        std::uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
        return z ^ (z >> 31);
    }

    /// Uniform in [lo, hi] (hi < lo gives lo). The remainder of a draw, the draws
    /// below 2^64 mod range refused so that no value is favoured.
    constexpr std::int64_t between(std::int64_t lo, std::int64_t hi) noexcept
    {
        if (hi <= lo)
            return lo;
        const auto span = static_cast<std::uint64_t>(hi) - static_cast<std::uint64_t>(lo);
        if (span == UINT64_MAX)
            return static_cast<std::int64_t>(next());
        const std::uint64_t range = span + 1;
        const std::uint64_t refused_below = (0 - range) % range;
        std::uint64_t x = next();
        while (x < refused_below)
            x = next();
        return static_cast<std::int64_t>(static_cast<std::uint64_t>(lo) + x % range);
    }

    /// Uniform in [0, 1), on the 2^-53 grid.
    constexpr double unit() noexcept { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

private:
    std::uint64_t state_;
};

} // namespace distlock::util
