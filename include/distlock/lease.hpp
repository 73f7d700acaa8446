// distlock/lease.hpp: what a successful lock() returns.
#pragma once

#include <distlock/util/config.hpp>
#include <distlock/clock.hpp>
#include <distlock/detail/initiate.hpp>
#include <distlock/detail/lease_state.hpp>
#include <distlock/options.hpp>
#include <distlock/owner_token.hpp>
#include <distlock/result.hpp>

#include <asio/awaitable.hpp>
#include <asio/cancellation_signal.hpp>
#include <asio/system_executor.hpp>

#include <memory>
#include <string>
#include <system_error>

namespace distlock {

template <class Unused = void>
class basic_multi_lease;

template <store Backend, class... Policies>
class basic_distributed_shared_mutex;

/// Exclusive use of a resource until valid_until(), as far as the store can promise.
///
/// A lease is not a guarantee: a holder that stalls (GC pause, swapped out, a slow
/// disk) can go on past valid_until() without knowing. Pass fence() to the store that
/// owns the protected data and have it reject writes with an older token: that, not
/// the lock, keeps the data safe.
///
/// Move-only. Destroying a held lease releases it in the background; call unlock() to
/// release it and learn whether it stayed valid to the end.
///
/// \par Thread safety
/// Distinct leases: safe. One lease: its members may be called from any thread, one
/// at a time. Renewal and loss detection run on a strand of the store's executor;
/// work bound to lost_slot() must run on that executor (or a single-threaded one).
class lease {
public:
    /// An empty lease (what a failed async_lock() hands its callback).
    lease() = default;
    explicit lease(std::shared_ptr<detail::lease_state> state) noexcept : state_{std::move(state)} {}

    lease(lease&&) noexcept = default;
    lease& operator=(lease&& other) noexcept
    {
        if (this != &other) {
            drop();
            state_ = std::move(other.state_);
        }
        return *this;
    }
    ~lease() { drop(); }

    /// False for an empty (default-constructed or moved-from) lease.
    explicit operator bool() const noexcept { return state_ != nullptr; }

    const std::string& resource() const { return state_->resource(); }
    const owner_token& owner() const { return state_->owner(); }

    /// The fencing token: larger than that of every earlier lease on this resource.
    fence_token fence() const { return state_->fence(); }

    /// A semaphore's permit: its number, from 0 to the count less one. Each number's
    /// fences grow, so a data store that keeps the last fence per permit number
    /// refuses a stalled holder whose permit was handed on (docs/shared.md).
    std::optional<std::uint32_t> slot() const { return state_->slot(); }

    /// Held in shared mode: a reader of a shared mutex (a downgraded writer included),
    /// or a semaphore's permit.
    bool shared() const { return state_->shared(); }

    /// Until when the lease is exclusive by this client's clock, computed from when the
    /// acquisition started, minus the safety margin for clock drift.
    time_point valid_until() const { return state_->valid_until(); }

    /// Time left before valid_until() (negative when passed).
    duration remaining() const { return valid_until() - clock::now(); }

    /// True while not released, not known lost, and before valid_until().
    bool valid() const
    {
        return state_ && !state_->released() && !state_->lost() && clock::now() < valid_until();
    }

    /// A slot that is emitted (cancellation_type::all) when the lease is lost: bind work
    /// to it with asio::bind_cancellation_slot so that the work stops when the lease goes.
    asio::cancellation_slot lost_slot() { return state_->lost_slot(); }

    /// Completes when the lease ends: errc::lease_lost (or the store error that ended
    /// it) when lost, errc::released when unlock() ran first.
    awaitable<std::error_code> lost() { return state_->wait_ended(); }

    /// Releases the lease in the store. errc::lease_lost when it had not stayed valid
    /// to the end (the work done under it was not protected throughout);
    /// errc::released when it was released before.
    /// \par Per-Operation Cancellation
    /// None: once started, the release completes (bounded by the store's timeouts).
    awaitable<result<void>> unlock()
    {
        // Not a coroutine itself: the state's unlock() is the only frame (it starts
        // when awaited, like any awaitable).
        return state_ ? state_->unlock() : unlock_state(nullptr);
    }

    /// unlock() with any completion token; signature void(std::error_code).
    template <class CompletionToken>
    auto async_unlock(CompletionToken&& token)
    {
        auto state = state_;
        // An empty lease completes on the system executor with errc::released.
        auto ex = state ? state->executor() : asio::any_io_executor{asio::system_executor{}};
        return detail::initiate<void>(
            std::move(ex), [state] { return unlock_state(state); }, std::forward<CompletionToken>(token));
    }

private:
    // A set taken in one step is released in one step, through the states' halves.
    template <class>
    friend class basic_multi_lease;
    // A downgraded writer's lease is shared from then on.
    template <store Backend, class... Policies>
    friend class basic_distributed_shared_mutex;
    void mark_shared() noexcept { state_->mark_shared(); }

    // A coroutine that owns what it uses (a capturing lambda coroutine would not).
    static awaitable<result<void>> unlock_state(std::shared_ptr<detail::lease_state> state)
    {
        if (!state)
            co_return errc::released;
        co_return co_await state->unlock();
    }

    void drop() noexcept
    {
        if (state_ && !state_->released())
            state_->release_detached();
        state_.reset();
    }

    std::shared_ptr<detail::lease_state> state_;
};

} // namespace distlock
