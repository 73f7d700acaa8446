// distlock/named_locks.hpp: locks on any resource of one store, configured once and
// named per call, for services that lock a different resource on every request
// (seat 17, order 123).
#pragma once

#include <distlock/util/config.hpp>
#include <distlock/basic_distributed_mutex.hpp>
#include <distlock/multi_lock.hpp>

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace distlock {

/// The settings and policies of basic_distributed_mutex<Backend, Policies...>, with
/// the resource named by each call:
///
///     dl::basic_named_locks<dl::redis::store> seats{store, {.ttl = 30s}};
///     auto held = co_await seats.try_lock("seat:" + id);
///
/// Like the mutex, it holds no lock state: each call returns a lease of its own, and
/// the object may be shared by every coroutine of a service (one call's copy of the
/// mutex lives in that call, so the object may be destroyed while calls run). The
/// backend must outlive it and every lease from it.
template <store Backend, class... Policies>
class basic_named_locks {
public:
    using mutex_type = basic_distributed_mutex<Backend, Policies...>;
    using backend_type = Backend;

    /// `policies` are instances of some of the policy types, as for the mutex.
    template <class... P>
    explicit basic_named_locks(Backend& backend, lock_options options = {}, P&&... policies)
        : prototype_{backend, std::string{}, options, std::forward<P>(policies)...}
    {}

    /// mutex_type::lock() on `resource`: retries per the retry policy until its deadline.
    awaitable<result<lease>> lock(std::string resource) { return run(mutex(std::move(resource)), call::lock); }
    /// mutex_type::try_lock() on `resource`: one attempt, errc::contended when held.
    awaitable<result<lease>> try_lock(std::string resource)
    {
        return run(mutex(std::move(resource)), call::try_lock);
    }
    /// mutex_type::lock_until() on `resource`.
    awaitable<result<lease>> lock_until(std::string resource, time_point deadline)
    {
        return run(mutex(std::move(resource)), call::lock, deadline);
    }
    /// The same, saying why they failed in `diag` (which must outlive the co_await).
    awaitable<result<lease>> lock(std::string resource, diagnostics& diag)
    {
        return run(mutex(std::move(resource)), call::lock, std::nullopt, &diag);
    }
    awaitable<result<lease>> try_lock(std::string resource, diagnostics& diag)
    {
        return run(mutex(std::move(resource)), call::try_lock, std::nullopt, &diag);
    }

    /// Every resource of `resources`, sorted, all or nothing, within one deadline
    /// (basic_multi_lock). dl::resources("a", "b") builds the vector inside a co_await.
    awaitable<result<multi_lease>> lock_all(std::vector<std::string> resources)
    {
        return run_all(basic_multi_lock<Backend, Policies...>{prototype_, std::move(resources)}, false);
    }
    awaitable<result<multi_lease>> try_lock_all(std::vector<std::string> resources)
    {
        return run_all(basic_multi_lock<Backend, Policies...>{prototype_, std::move(resources)}, true);
    }

    /// The mutex of one resource, with these settings and policies.
    mutex_type mutex(std::string resource) const { return prototype_.with_resource(std::move(resource)); }

    Backend& backend() const noexcept { return prototype_.backend(); }
    const lock_options& options() const noexcept { return prototype_.options(); }

private:
    enum class call { lock, try_lock };

    // The call owns its mutex: nothing refers to this object once it has started.
    static awaitable<result<lease>> run(mutex_type m, call c, std::optional<time_point> deadline = std::nullopt,
                                        diagnostics* diag = nullptr)
    {
        if (c == call::try_lock) {
            if (diag)
                co_return co_await m.try_lock(*diag);
            co_return co_await m.try_lock();
        }
        if (deadline) {
            if (diag)
                co_return co_await m.lock_until(*deadline, *diag);
            co_return co_await m.lock_until(*deadline);
        }
        if (diag)
            co_return co_await m.lock(*diag);
        co_return co_await m.lock();
    }

    static awaitable<result<multi_lease>> run_all(basic_multi_lock<Backend, Policies...> set, bool single)
    {
        if (single)
            co_return co_await set.try_lock();
        co_return co_await set.lock();
    }

    mutex_type prototype_;
};

} // namespace distlock
