// distlock/util/os_random.hpp: bytes from the operating system's CSPRNG.
//
// Owner tokens must be unguessable and unique across processes and machines, so they
// come from getrandom(2), never from a counter, a pid or a seeded PRNG. A syscall per
// token would dominate an in-process lock, so each thread reads a block at a time and
// hands it out once. A forked child must never reuse its parent's unread block: a
// pthread_atfork handler bumps a generation number that makes every buffer refill.
#pragma once

#include <pthread.h>
#include <sys/random.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>

namespace distlock::util {

inline std::atomic<unsigned>& fork_generation() noexcept
{
    static std::atomic<unsigned> generation{0};
    return generation;
}

inline void register_fork_handler() noexcept
{
    static const bool registered = [] {
        ::pthread_atfork(nullptr, nullptr, [] { fork_generation().fetch_add(1); });
        return true;
    }();
    (void)registered;
}

/// Fills `out` with bytes from the OS CSPRNG. Aborts if the kernel cannot provide
/// them: a lock client with predictable owner tokens must not run.
inline void fill_from_os(std::span<std::byte> out) noexcept
{
    std::size_t done = 0;
    while (done < out.size()) {
        const auto n = ::getrandom(out.data() + done, out.size() - done, 0);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            std::abort();
        }
        done += static_cast<std::size_t>(n);
    }
}

/// Copies `out.size()` fresh OS-random bytes, served from a per-thread block.
inline void os_random_bytes(std::span<std::byte> out) noexcept
{
    constexpr std::size_t block_size = 4096;
    struct block {
        std::array<std::byte, block_size> bytes;
        std::size_t used = block_size;
        unsigned generation = 0;
    };
    thread_local block buffer;
    register_fork_handler();

    const auto generation = fork_generation().load(std::memory_order_relaxed);
    if (out.size() > block_size) {
        fill_from_os(out);
        return;
    }
    if (buffer.generation != generation || block_size - buffer.used < out.size()) {
        fill_from_os(buffer.bytes);
        buffer.used = 0;
        buffer.generation = generation;
    }
    std::memcpy(out.data(), buffer.bytes.data() + buffer.used, out.size());
    // Served bytes are wiped so a later copy of this memory cannot reveal them.
    std::memset(buffer.bytes.data() + buffer.used, 0, out.size());
    buffer.used += out.size();
}

/// Eight bytes of os_random_bytes() as one number.
inline std::uint64_t os_random_u64() noexcept
{
    std::uint64_t value = 0;
    os_random_bytes(std::as_writable_bytes(std::span{&value, 1}));
    return value;
}

} // namespace distlock::util
