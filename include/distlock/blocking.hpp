// distlock/blocking.hpp: distlock for code that is not coroutine-based.
#pragma once

#include <distlock/error.hpp>
#include <distlock/lease.hpp>
#include <distlock/options.hpp>

#include <asio/co_spawn.hpp>
#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>
#include <asio/use_future.hpp>

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

private:
    asio::io_context io_;
    asio::executor_work_guard<asio::io_context::executor_type> work_;
    std::thread thread_;
};

/// A Lockable (std::scoped_lock, std::unique_lock) over a distributed mutex whose
/// operations run on an io_thread. lock() blocks until acquired and throws
/// std::system_error on failure; try_lock() returns false when the lock is held
/// elsewhere. Must not be called from the io_thread itself.
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
        check_thread();
        lease_ = get(asio::co_spawn(thread_.get_executor(), mutex_.lock(), asio::use_future).get());
    }

    bool try_lock()
    {
        check_thread();
        auto r = asio::co_spawn(thread_.get_executor(), mutex_.try_lock(), asio::use_future).get();
        if (!r && r.error() == errc::contended)
            return false;
        lease_ = get(std::move(r));
        return true;
    }

    /// Releases the lease; never throws (it runs in destructors). The outcome is kept
    /// in last_unlock_error(): errc::lease_lost means the lease did not stay valid
    /// throughout the critical section.
    void unlock() noexcept
    {
        if (!lease_)
            return;
        try {
            auto r = asio::co_spawn(thread_.get_executor(), lease_.unlock(), asio::use_future).get();
            last_unlock_error_ = r ? std::error_code{} : r.error();
        } catch (...) {
            last_unlock_error_ = make_error_code(errc::outcome_unknown);
        }
        lease_ = lease{};
    }

    /// The lease while locked (empty otherwise).
    const lease& current() const noexcept { return lease_; }
    fence_token fence() const { return lease_.fence(); }
    std::error_code last_unlock_error() const noexcept { return last_unlock_error_; }
    Mutex& mutex() noexcept { return mutex_; }

private:
    void check_thread()
    {
        if (thread_.get_executor().running_in_this_thread())
            throw std::system_error{std::make_error_code(std::errc::resource_deadlock_would_occur),
                                    "distlock::blocking used from its own io_thread"};
        if (lease_)
            throw std::system_error{std::make_error_code(std::errc::resource_deadlock_would_occur),
                                    "distlock::blocking is already locked"};
    }

    static lease get(result<lease> r)
    {
        if (!r)
            throw std::system_error{r.error(), "distlock lock"};
        return std::move(r).value();
    }

    io_thread& thread_;
    Mutex mutex_;
    lease lease_;
    std::error_code last_unlock_error_;
};

} // namespace distlock
