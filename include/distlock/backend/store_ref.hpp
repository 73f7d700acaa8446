// distlock/backend/store_ref.hpp: how the core reaches a store: a pointer plus the
// store's lifetime (lifetime.hpp), so that work left running never touches a store
// that is gone.
#pragma once

#include <distlock/backend/contract.hpp>
#include <distlock/backend/deferred.hpp>
#include <distlock/backend/lifetime.hpp>
#include <distlock/error.hpp>

#include <asio/any_io_executor.hpp>
#include <asio/awaitable.hpp>
#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>

#include <memory>
#include <optional>
#include <utility>

namespace distlock::backend {

/// How the core reaches a store: see the design note above.
/// A backend made of stores (a quorum): it counts a caller's work on every one of them
/// (track(): close() of any waits for it) and is open while all of them are.
template <class S>
concept composite_store = requires(const S& s) {
    s.track();
    { s.open() } -> std::convertible_to<bool>;
};

template <class S>
class store_ref {
public:
    store_ref() = default;
    explicit store_ref(S& s) : store_{&s}
    {
        static_assert(managed_store<S> || !requires { s.lifetime(); },
                      "a store with lifetime() must model distlock::managed_store: operation_timeout() and close() "
                      "too (backend::store_shell provides all three)");
        if constexpr (managed_store<S>)
            life_ = s.lifetime();
    }

    /// Starts `op(store)` (which returns an awaitable<result<T>>) if the store is open;
    /// otherwise the awaitable completes with errc::store_unavailable, without I/O.
    template <class Op>
    auto call(Op&& op) const -> decltype(op(std::declval<S&>()))
    {
        using awaitable_type = decltype(op(std::declval<S&>()));
        if constexpr (managed_store<S>) {
            auto in = life_->enter();
            if (!in)
                return closed_result<awaitable_type>();
            return op(*store_);
        } else {
            return op(*store_);
        }
    }

    /// Runs `fn(store)` synchronously if the store is open: std::nullopt otherwise.
    template <class Fn>
    auto with(Fn&& fn) const -> std::optional<decltype(fn(std::declval<S&>()))>
    {
        if constexpr (managed_store<S>) {
            auto in = life_->enter();
            if (!in || life_->closing())
                return std::nullopt;
            return fn(*store_);
        } else {
            return fn(*store_);
        }
    }

    /// Spawns work owned by the store (on its executor); dropped if it is closed.
    void spawn(awaitable<void> work) const
    {
        if constexpr (managed_store<S>)
            life_->spawn(std::move(work));
        else
            asio::co_spawn(store_->get_executor(), std::move(work), asio::detached);
    }

    /// Counts the caller's own background work on the store until the guard is
    /// dropped (close() waits for it); on each of a composite store's stores; an empty
    /// guard for stores without a lifetime.
    auto track() const
    {
        if constexpr (managed_store<S>)
            return life_->track();
        else if constexpr (composite_store<S>)
            return store_->track();
        else
            return lifetime::work{};
    }

    /// Registers a listener for the store's closing (no-op for stores without one).
    bool listen(std::weak_ptr<closing_listener> l) const
    {
        if constexpr (managed_store<S>)
            return life_->listen(std::move(l));
        else
            return true;
    }

    /// Not closed yet: background work spawned now still runs (it may be closing).
    bool takes_work() const
    {
        if constexpr (managed_store<S>)
            return life_->open();
        else
            return true;
    }

    bool open() const
    {
        if constexpr (managed_store<S>)
            return life_->open() && !life_->closing();
        else if constexpr (composite_store<S>)
            return store_->open();
        else
            return true;
    }

    /// Valid only while the store is open; for identity (the local line's key) and
    /// synchronous use inside call().
    S* get() const noexcept { return store_; }
    asio::any_io_executor get_executor() const { return executor_; }

private:
    template <class A>
    static A closed_result()
    {
        using value = typename backend::awaited<A>::type; // result<T>
        return closed_value<value>();
    }
    template <class R>
    static awaitable<R> closed_value()
    {
        co_return R{make_error_code(errc::store_unavailable)};
    }

    S* store_ = nullptr;
    std::shared_ptr<lifetime> life_;
    asio::any_io_executor executor_ = store_ ? store_->get_executor() : asio::any_io_executor{};
};

} // namespace distlock::backend

namespace distlock {
/// How policies and claims reach a store (backend::store_ref).
template <class S>
using store_ref = backend::store_ref<S>;
} // namespace distlock
