// distlock/blocking.hpp: distlock for code that is not coroutine-based.
#pragma once

#include <distlock/util/config.hpp>
#include <distlock/error.hpp>
#include <distlock/lease.hpp>
#include <distlock/options.hpp>

#include <asio/co_spawn.hpp>
#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>
#include <asio/use_future.hpp>

#include <map>
#include <mutex>
#include <string>
#include <system_error>
#include <thread>
#include <utility>

namespace distlock {

/// An io_context running on a thread of its own, for blocking callers.
class io_thread {
public:
    io_thread() : work_{asio::make_work_guard(io_)}, thread_{[this] { io_.run(); }} {}
    ~io_thread()
    {
        work_.reset();
        io_.stop();
        thread_.join();
    }
    io_thread(const io_thread&) = delete;
    io_thread& operator=(const io_thread&) = delete;

    asio::io_context& context() noexcept { return io_; }
    asio::io_context::executor_type get_executor() noexcept { return io_.get_executor(); }

    /// Runs `op` on this thread and waits for it from the calling thread:
    /// `io.run_sync(store.close())` closes a network store whose work runs here
    /// (before the io_thread is destroyed, so that its releases finish and its
    /// connections close cleanly). An exception from `op` is rethrown here. From this
    /// io_thread's own thread it would wait for itself: std::system_error
    /// (resource_deadlock_would_occur) instead.
    template <class T>
    T run_sync(awaitable<T> op)
    {
        if (io_.get_executor().running_in_this_thread())
            throw std::system_error{std::make_error_code(std::errc::resource_deadlock_would_occur),
                                    "distlock::io_thread::run_sync called from the io_thread itself"};
        return asio::co_spawn(io_, std::move(op), asio::use_future).get();
    }

private:
    asio::io_context io_;
    asio::executor_work_guard<asio::io_context::executor_type> work_;
    std::thread thread_;
};

/// A Lockable (std::scoped_lock, std::unique_lock) over a distributed mutex whose
/// operations run on an io_thread. lock() blocks until acquired and throws
/// std::system_error on failure; try_lock() returns false when the lock is held
/// elsewhere. Must not be called from the io_thread itself.
///
/// \par Thread safety
/// Shared between threads as a std::mutex is: each thread's lock() takes a lease of
/// its own (the threads exclude each other through the store, as separate processes
/// would), and unlock() releases the calling thread's lease. A thread that locks
/// again before unlocking gets std::errc::resource_deadlock_would_occur, never a
/// second lease; unlock() by a thread that holds nothing does nothing.
template <class Mutex>
class blocking {
public:
    template <class... Policies>
    blocking(io_thread& thread, typename Mutex::backend_type& backend, std::string resource,
             lock_options options = {}, Policies&&... policies)
        : thread_{thread}, mutex_{backend, std::move(resource), options, std::forward<Policies>(policies)...}
    {}

    void lock()
    {
        auto& s = enter();
        s.held = get(asio::co_spawn(thread_.get_executor(), mutex_.lock(), asio::use_future).get());
    }

    bool try_lock()
    {
        auto& s = enter();
        auto r = asio::co_spawn(thread_.get_executor(), mutex_.try_lock(), asio::use_future).get();
        if (!r && r.error() == errc::contended)
            return false;
        s.held = get(std::move(r));
        return true;
    }

    /// Shared mode, over a shared mutex (a SharedLockable: std::shared_lock): as
    /// lock() and try_lock(), and unlock_shared() as unlock(). A thread holds one lease
    /// at a time, shared or not.
    void lock_shared()
        requires requires(Mutex& m) { m.lock_shared(); }
    {
        auto& s = enter();
        s.held = get(asio::co_spawn(thread_.get_executor(), mutex_.lock_shared(), asio::use_future).get());
    }

    bool try_lock_shared()
        requires requires(Mutex& m) { m.try_lock_shared(); }
    {
        auto& s = enter();
        auto r = asio::co_spawn(thread_.get_executor(), mutex_.try_lock_shared(), asio::use_future).get();
        if (!r && r.error() == errc::contended)
            return false;
        s.held = get(std::move(r));
        return true;
    }

    void unlock_shared() noexcept
        requires requires(Mutex& m) { m.lock_shared(); }
    {
        unlock();
    }

    /// Releases the calling thread's lease; never throws (it runs in destructors). The
    /// outcome is kept in last_unlock_error(): errc::lease_lost means the lease did not
    /// stay valid throughout the critical section.
    void unlock() noexcept
    {
        auto* s = find();
        if (!s || !s->held)
            return;
        try {
            auto r = asio::co_spawn(thread_.get_executor(), s->held.unlock(), asio::use_future).get();
            s->last_unlock_error = r ? std::error_code{} : r.error();
        } catch (...) {
            s->last_unlock_error = make_error_code(errc::outcome_unknown);
        }
        s->held = lease{};
    }

    /// The calling thread's lease while it holds the lock (empty otherwise).
    const lease& current() const noexcept
    {
        static const lease none;
        const auto* s = find();
        return s ? s->held : none;
    }
    fence_token fence() const { return current().fence(); }
    /// How the calling thread's last unlock() went.
    std::error_code last_unlock_error() const noexcept
    {
        const auto* s = find();
        return s ? s->last_unlock_error : std::error_code{};
    }
    Mutex& mutex() noexcept { return mutex_; }

private:
    // One thread's use of the lock. Only that thread touches its slot; the map (whose
    // nodes never move) is guarded for the threads that add theirs.
    struct slot {
        lease held;
        std::error_code last_unlock_error;
    };

    slot& enter()
    {
        if (thread_.get_executor().running_in_this_thread())
            throw std::system_error{std::make_error_code(std::errc::resource_deadlock_would_occur),
                                    "distlock::blocking used from its own io_thread"};
        slot* s = nullptr;
        {
            std::lock_guard guard{slots_mutex_};
            s = &slots_[std::this_thread::get_id()];
        }
        if (s->held)
            throw std::system_error{std::make_error_code(std::errc::resource_deadlock_would_occur),
                                    "distlock::blocking is already locked by this thread"};
        return *s;
    }

    slot* find() const noexcept
    {
        std::lock_guard guard{slots_mutex_};
        const auto it = slots_.find(std::this_thread::get_id());
        return it == slots_.end() ? nullptr : &it->second;
    }

    static lease get(result<lease> r)
    {
        if (!r)
            throw std::system_error{r.error(), "distlock lock"};
        return std::move(r).value();
    }

    io_thread& thread_;
    Mutex mutex_;
    mutable std::mutex slots_mutex_;
    mutable std::map<std::thread::id, slot> slots_;
};

} // namespace distlock
