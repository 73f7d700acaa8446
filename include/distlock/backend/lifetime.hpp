// distlock/backend/lifetime.hpp: how a store owns the work its leases start, and how
// that work reaches a store without ever touching one that is gone.
//
// Design note. A lease outlives the call that made it, and so does what it starts:
// the watchdog's extensions, a release sent after the lease went out of scope, the
// clean-up of an attempt cut off by its deadline. Each of them needs the store. They
// do not hold `Store&`; they hold a store_ref: a pointer to the store plus shared
// ownership of the store's `lifetime`, the one object that says whether the store is
// still there.
//  - A call through a store_ref enters the lifetime (a short critical section, no
//    suspension inside), checks that the store is open, and starts the operation.
//    Stores that take part keep one rule: an operation, once started, owns what it
//    needs (shared state, copies) and never touches the store object again. So the
//    store may be destroyed while the operation is in flight; it completes against
//    the store's shared state or with an error.
//  - A closed lifetime starts nothing: the call completes with
//    errc::store_unavailable, without I/O.
//  - Background work is spawned through the lifetime, which counts it, or counted
//    while the caller runs it (track(): a quorum's release still running on a node
//    after unlock() returned). The store's
//    async close() waits until that count is zero (so pending releases finish), then
//    ends every lease still kept (they are reported lost and released) and closes.
//  - The store's destructor shuts the lifetime at once: it waits only for calls that
//    are between entering and starting (never for I/O), stops the keepers of held
//    leases (they report loss) and wakes watchers; background work still pending
//    then finds the store closed and touches nothing.
// A store that does not take part (a user's own adapter without `lifetime()`) is
// used through a plain pointer: it must outlive every lease and lock() using it.
// Taking part is all or nothing (managed_store in contract.hpp: lifetime(),
// operation_timeout(), close()); backend::store_shell provides all three.
#pragma once

#include <distlock/clock.hpp>
#include <distlock/backend/auto_reset_event.hpp>
#include <distlock/error.hpp>
#include <distlock/result.hpp>
#include <distlock/backend/deferred.hpp>

#include <asio/any_io_executor.hpp>
#include <asio/awaitable.hpp>
#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>

#include <atomic>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

namespace distlock::backend {

/// Something that must hear when its store closes: a lease keeper, a watcher.
class closing_listener {
public:
    virtual ~closing_listener() = default;
    /// Called once, from the thread that closes the store, outside every store lock.
    /// Must not block; may post work.
    virtual void store_closing() noexcept = 0;
};

// A template only to be compiled where it is used (backend/store_shell.hpp says why).
template <class Unused = void>
class basic_lifetime : public std::enable_shared_from_this<basic_lifetime<Unused>> {
public:
    /// A permission to start one operation on the store; empty when it is closed.
    class entry {
    public:
        entry() = default;
        entry(entry&& o) noexcept : owner_{std::exchange(o.owner_, nullptr)} {}
        entry& operator=(entry&&) = delete;
        ~entry() { reset(); }
        explicit operator bool() const noexcept { return owner_ != nullptr; }
        void reset() noexcept
        {
            if (auto* o = std::exchange(owner_, nullptr))
                o->leave();
        }

    private:
        friend class basic_lifetime;
        explicit entry(basic_lifetime* o) noexcept : owner_{o} {}
        basic_lifetime* owner_ = nullptr;
    };

    static std::shared_ptr<basic_lifetime> make(asio::any_io_executor ex)
    {
        return std::shared_ptr<basic_lifetime>{new basic_lifetime{std::move(ex)}};
    }

    /// Enters the store for one synchronous step (starting an operation).
    // Lock-free, as it runs on every store call: count the entry first, then look at
    // closed_; shut() sets closed_ first, then waits for the count to drain. With
    // sequentially consistent operations on both sides, either the entry sees closed_
    // and backs out, or shut() sees the entry and waits for it.
    entry enter()
    {
        entered_.fetch_add(1);
        if (closed_.load()) {
            leave();
            return entry{};
        }
        return entry{this};
    }

    // open() and closing() are asked on every lock() and read flags that only ever go
    // from false to true, so they read them without the mutex.
    bool open() const { return !closed_.load(std::memory_order_acquire); }

    /// True once close() started: new locks are refused, pending work still runs.
    bool closing() const
    {
        return closing_.load(std::memory_order_acquire) || closed_.load(std::memory_order_acquire);
    }

    /// Background work that the caller runs itself: counted from track() until the
    /// guard is dropped, so that close() waits for it. Empty once the store is shut.
    class work {
    public:
        work() = default;
        work(work&& o) noexcept = default;
        work& operator=(work&&) = delete;
        ~work()
        {
            if (owner_)
                owner_->finished();
        }
        explicit operator bool() const noexcept { return owner_ != nullptr; }

    private:
        friend class basic_lifetime;
        explicit work(std::shared_ptr<basic_lifetime> o) noexcept : owner_{std::move(o)} {}
        std::shared_ptr<basic_lifetime> owner_;
    };

    work track()
    {
        {
            std::lock_guard lock{mutex_};
            if (closed_)
                return {};
            ++background_;
        }
        return work{this->shared_from_this()};
    }

    /// Runs `work` as background work owned by the store (counted until it ends).
    /// Work spawned after shutdown is dropped: it could only find the store closed.
    void spawn(awaitable<void> work)
    {
        {
            std::lock_guard lock{mutex_};
            if (closed_)
                return;
            ++background_;
        }
        asio::co_spawn(ex_, run(this->shared_from_this(), std::move(work)), asio::detached);
    }

    std::size_t background_work() const
    {
        std::lock_guard lock{mutex_};
        return background_;
    }

    /// Registers a listener told when the store closes; returns false if it is closed.
    bool listen(std::weak_ptr<closing_listener> l)
    {
        std::lock_guard lock{mutex_};
        if (closed_)
            return false;
        // Every lease listens: drop the expired ones when the list has doubled since
        // the last sweep, so that a listen costs O(1) amortised.
        if (listeners_.size() >= 2 * swept_size_ + 16) {
            std::erase_if(listeners_, [](const auto& w) { return w.expired(); });
            swept_size_ = listeners_.size();
        }
        listeners_.push_back(std::move(l));
        return true;
    }

    /// The store's async close: refuses new locks, tells the listeners (keepers end
    /// their leases and release them as background work), waits for every piece of
    /// background work to finish, then shuts.
    awaitable<void> close()
    {
        // Held to the end: shut() from the store's destructor wakes this wait, and the
        // resumed coroutine must find its lifetime even if the store has let go of it.
        const auto self = this->shared_from_this();
        std::vector<std::weak_ptr<closing_listener>> told;
        {
            std::lock_guard lock{mutex_};
            if (closed_)
                co_return;
            closing_ = true;
            told.swap(listeners_);
        }
        tell(told);
        for (;;) {
            {
                std::lock_guard lock{mutex_};
                if (background_ == 0)
                    break;
            }
            (void)co_await idle_.wait<Unused>();
        }
        shut();
    }

    /// The store's destructor: closed now; waits only for steps already entered.
    // Defined below the class, as the stores' stop() is (backend/store_shell.hpp says why).
    void shut();

private:
    explicit basic_lifetime(asio::any_io_executor ex) : ex_{ex}, idle_{ex} {}

    static void tell(std::vector<std::weak_ptr<closing_listener>>& listeners)
    {
        for (auto& w : listeners)
            if (auto l = w.lock())
                l->store_closing();
    }

    void leave() noexcept
    {
        if (entered_.fetch_sub(1) == 1 && closed_.load())
            entered_.notify_all(); // shut() may be waiting for the last one
    }

    static awaitable<void> run(std::shared_ptr<basic_lifetime> self, awaitable<void> work)
    {
        try {
            co_await std::move(work);
        } catch (...) {
            // Background work reports through leases and observers; nothing is
            // allowed to escape into the io_context's run().
        }
        self->finished();
    }

    void finished()
    {
        std::lock_guard lock{mutex_};
        if (--background_ == 0)
            idle_.set();
    }

    asio::any_io_executor ex_;
    mutable std::mutex mutex_;
    std::atomic<std::size_t> entered_ = 0;
    std::size_t background_ = 0;
    // Written under mutex_; read without it by open() and closing().
    std::atomic<bool> closing_ = false;
    std::atomic<bool> closed_ = false;
    std::vector<std::weak_ptr<closing_listener>> listeners_;
    std::size_t swept_size_ = 0; // listeners_.size() after the last sweep of expired ones
    auto_reset_event idle_;
};

template <class Unused>
void basic_lifetime<Unused>::shut()
{
    std::vector<std::weak_ptr<closing_listener>> told;
    {
        std::lock_guard lock{mutex_};
        closed_.store(true);
        told.swap(listeners_);
    }
    for (auto n = entered_.load(); n != 0; n = entered_.load())
        entered_.wait(n);
    tell(told);
    idle_.set();
}

using lifetime = basic_lifetime<>;

} // namespace distlock::backend
