// distlock/memory/fenced_register.hpp: an in-process value guarded by fencing tokens,
// the way the store that owns the data should guard it.
#pragma once

#include <distlock/error.hpp>
#include <distlock/options.hpp>
#include <distlock/result.hpp>

#include <cstddef>
#include <mutex>
#include <utility>

namespace distlock::memory {

/// A value that accepts a write only when its fencing token is at least the highest
/// one it has accepted. A holder that stalled past its lease writes with an older
/// token than the next holder and is rejected with errc::stale_fence.
/// Thread-safe.
template <class T>
class fenced_register {
public:
    explicit fenced_register(T initial = T{}) : value_{std::move(initial)} {}

    /// Writes `value` if `fence` is not older than the newest accepted token.
    result<void> write(fence_token fence, T value)
    {
        std::lock_guard lock{mutex_};
        if (fence < highest_) {
            ++rejected_;
            return errc::stale_fence;
        }
        highest_ = fence;
        value_ = std::move(value);
        return success();
    }

    /// Applies `update` to the value, with the same check as write().
    template <class F>
    result<void> update(fence_token fence, F&& update)
    {
        std::lock_guard lock{mutex_};
        if (fence < highest_) {
            ++rejected_;
            return errc::stale_fence;
        }
        highest_ = fence;
        value_ = std::forward<F>(update)(std::as_const(value_));
        return success();
    }

    T read() const
    {
        std::lock_guard lock{mutex_};
        return value_;
    }
    fence_token highest_fence() const
    {
        std::lock_guard lock{mutex_};
        return highest_;
    }
    std::size_t rejected() const
    {
        std::lock_guard lock{mutex_};
        return rejected_;
    }

private:
    mutable std::mutex mutex_;
    T value_;
    fence_token highest_ = 0;
    std::size_t rejected_ = 0;
};

} // namespace distlock::memory
