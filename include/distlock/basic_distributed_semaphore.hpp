// distlock/basic_distributed_semaphore.hpp: N permits on one resource of a store,
// each a lease with a fence of its own.
#pragma once

#include <distlock/basic_distributed_shared_mutex.hpp>
#include <distlock/policy/shared.hpp>

#include <cstdint>
#include <string>
#include <utility>

namespace distlock {

/// How many permits a semaphore has, and the settings of each permit's lease.
struct semaphore_options {
    std::uint32_t permits = 1;
    lock_options lease{};
};

/// N permits on one resource, shaped by the mutex's policies (basic_distributed_mutex);
/// its acquisition must take shared grants (acquire::shared_setnx, the default, or a
/// store's own).
///
/// - `acquire()` takes one permit, with the `_until`, `try_` and completion-token
///   forms of the mutex's lock(). A permit is a lease: renewed as the renewal policy
///   says, `lost()` and `lost_slot()` when it goes, back to the store at `unlock()`, or
///   after its TTL (or with its session) when its holder died.
/// - A permit has a number, `slot()`, from 0 to N - 1: no two live permits share one,
///   and each grant's fence exceeds every earlier grant's of the resource. A data store
///   that keeps the largest fence it accepted per slot refuses a stalled holder whose
///   permit was handed on (docs/shared.md).
/// - The store keeps N with the resource while any permit is held: a client that asks
///   with another N is refused (errc::invalid_argument, the store's N in the
///   diagnostics), never given a permit of a mixed count.
/// - One permit per call: taking k at once is not offered (k calls can deadlock two
///   clients that each hold some; take them one by one with a deadline, or size N).
template <store Backend, class... Policies>
class basic_distributed_semaphore {
    static_assert(!detail::is_quorum<Backend>::value,
                  "a semaphore is not offered on a Redlock quorum (distlock::quorum<Store>): permits counted by "
                  "different majorities could exceed N; use one store (a Redis Cluster, etcd, ZooKeeper, "
                  "PostgreSQL or DynamoDB replicate themselves)");
    using mutex_type = detail::mode_mutex_t<Backend, Policies...>;

public:
    using backend_type = Backend;
    using acquire_policy = typename mutex_type::acquire_policy;

    static_assert(requires(acquire_policy a) {
        a.mode = lock_mode::shared;
        a.permits = std::uint32_t{1};
    }, "a semaphore needs an acquisition that takes shared grants with a count (acquire::shared_setnx on a "
       "shared_lease_store, or the store's own)");

    template <class... P>
    explicit basic_distributed_semaphore(Backend& backend, std::string resource, semaphore_options options = {},
                                         P&&... policies)
        : permits_{options.permits},
          mutex_{backend, std::move(resource), options.lease, policies..., with_permits(options.permits, policies...)}
    {}

    Backend& backend() const noexcept { return mutex_.backend(); }
    const std::string& resource() const noexcept { return mutex_.resource(); }
    std::uint32_t permits() const noexcept { return permits_; }

    awaitable<result<lease>> acquire() { return checked(mutex_.lock()); }
    awaitable<result<lease>> acquire_until(time_point deadline) { return checked(mutex_.lock_until(deadline)); }
    awaitable<result<lease>> try_acquire() { return checked(mutex_.try_lock()); }
    awaitable<result<lease>> acquire(diagnostics& diag) { return checked(mutex_.lock(diag), &diag); }
    awaitable<result<lease>> acquire_until(time_point deadline, diagnostics& diag)
    {
        return checked(mutex_.lock_until(deadline, diag), &diag);
    }
    awaitable<result<lease>> try_acquire(diagnostics& diag) { return checked(mutex_.try_lock(diag), &diag); }

    template <class CompletionToken>
    auto async_acquire(CompletionToken&& token)
    {
        return detail::initiate<lease>(
            backend().get_executor(), [this] { return acquire(); }, std::forward<CompletionToken>(token));
    }
    template <class CompletionToken>
    auto async_try_acquire(CompletionToken&& token)
    {
        return detail::initiate<lease>(
            backend().get_executor(), [this] { return try_acquire(); }, std::forward<CompletionToken>(token));
    }

    /// The mutex that takes the permits' grants.
    const mutex_type& mutex() const noexcept { return mutex_; }

private:
    template <class... P>
    static acquire_policy with_permits(std::uint32_t permits, const P&... policies)
    {
        auto a = detail::acquisition_among<acquire_policy>(policies...);
        a.mode = lock_mode::shared;
        a.permits = permits;
        return a;
    }

    // A count out of range is refused before any I/O.
    awaitable<result<lease>> checked(awaitable<result<lease>> op, diagnostics* diag = nullptr) const
    {
        return checked_impl(permits_, std::move(op), diag);
    }
    static awaitable<result<lease>> checked_impl(std::uint32_t permits, awaitable<result<lease>> op,
                                                 diagnostics* diag)
    {
        if (permits == 0 || permits > max_permits) {
            if (diag)
                diag->set_client_message("a semaphore has 1 to " + std::to_string(max_permits) + " permits, not " +
                                         std::to_string(permits));
            co_return errc::invalid_argument;
        }
        co_return co_await std::move(op);
    }

    std::uint32_t permits_;
    mutex_type mutex_;
};

} // namespace distlock
