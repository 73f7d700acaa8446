// distlock/basic_distributed_shared_mutex.hpp: a read-write lock on one resource of a
// store: readers share it, a writer holds it alone, and every grant is fenced.
#pragma once

#include <distlock/basic_distributed_mutex.hpp>
#include <distlock/policy/shared.hpp>

#include <optional>
#include <string>
#include <type_traits>
#include <utility>

namespace distlock {

namespace detail {

// The acquisition a user named among `P`, or A{} when none was.
template <class A, class... P>
A acquisition_among(const P&... policies)
{
    A a{};
    (
        [&](const auto& p) {
            if constexpr (std::is_same_v<std::remove_cvref_t<decltype(p)>, A>)
                a = p;
        }(policies),
        ...);
    return a;
}

// What a shared mutex or a semaphore on a quorum holds instead of mutexes: nothing
// (their static assertion says why), so that the refusal is the only error.
struct refused_on_quorum {
    using acquire_policy = acquire::shared_setnx;
    template <class... A>
    explicit refused_on_quorum(A&&...)
    {}
};

template <class Backend, class... Policies>
struct mode_mutex {
    using type = std::conditional_t<
        (count_kind<acquire_policy_tag, Policies...> == 1), basic_distributed_mutex<Backend, Policies...>,
        basic_distributed_mutex<Backend, default_shared_acquire_policy<Backend>, Policies...>>;
};
template <class S, class... Policies>
struct mode_mutex<distlock::quorum<S>, Policies...> {
    using type = refused_on_quorum;
};

// The mutex type that takes one mode's grants: the policies given, with the shared
// acquisition added when none was named.
template <class Backend, class... Policies>
using mode_mutex_t = typename mode_mutex<Backend, Policies...>::type;


} // namespace detail

/// A lock on one resource that readers share and a writer holds alone, shaped by the
/// mutex's policies (basic_distributed_mutex); its acquisition must take shared
/// grants (acquire::shared_setnx, the default, or a store's own).
///
/// - `lock()` (exclusive) and `lock_shared()`, with the `_until`, `try_` and
///   completion-token forms of the mutex, each returning a lease with its renewal,
///   `lost()`, `lost_slot()` and `unlock()`.
/// - **Writers are not starved**: a writer that waits keeps new readers out until it
///   is granted or gives up (docs/shared.md says how each store orders writers).
/// - **Fencing**: every grant, shared or exclusive, takes the next value of the
///   resource's one counter, so a writer's fence exceeds that of every grant
///   completed before it asked, and a reader's fence exceeds that of every writer
///   before it. A data store refuses writes below the largest fence it accepted, and
///   may refuse reads below the last writer's (docs/shared.md).
/// - `downgrade(lease)`: the writer holds on as a reader, no writer between, where
///   the store can do it in one step. There is no upgrade: two readers that both
///   wanted to write would wait for each other forever; release and `lock()` instead.
template <store Backend, class... Policies>
class basic_distributed_shared_mutex {
    static_assert(!detail::is_quorum<Backend>::value,
                  "a shared mutex is not offered on a Redlock quorum (distlock::quorum<Store>): a reader counted by a "
                  "majority and a writer by another could both hold; use one store (a Redis Cluster, etcd, "
                  "ZooKeeper, PostgreSQL or DynamoDB replicate themselves)");
    using mutex_type = detail::mode_mutex_t<Backend, Policies...>;

public:
    using backend_type = Backend;
    using acquire_policy = typename mutex_type::acquire_policy;

    static_assert(requires(acquire_policy a) {
        a.mode = lock_mode::shared;
        { a.shared() } -> std::convertible_to<bool>;
    }, "a shared mutex needs an acquisition that takes shared grants (acquire::shared_setnx on a "
       "shared_lease_store, or the store's own): this one has no mode");

    template <class... P>
    explicit basic_distributed_shared_mutex(Backend& backend, std::string resource, lock_options options = {},
                                            P&&... policies)
        : writer_{backend, resource, options, policies..., with_mode(lock_mode::exclusive, policies...)},
          reader_{backend, std::move(resource), options, policies..., with_mode(lock_mode::shared, policies...)}
    {}

    Backend& backend() const noexcept { return writer_.backend(); }
    const std::string& resource() const noexcept { return writer_.resource(); }
    const lock_options& options() const noexcept { return writer_.options(); }

    // -- Exclusive -------------------------------------------------------------------

    awaitable<result<lease>> lock() { return writer_.lock(); }
    awaitable<result<lease>> lock_until(time_point deadline) { return writer_.lock_until(deadline); }
    awaitable<result<lease>> try_lock() { return writer_.try_lock(); }
    awaitable<result<lease>> lock(diagnostics& diag) { return writer_.lock(diag); }
    awaitable<result<lease>> lock_until(time_point deadline, diagnostics& diag)
    {
        return writer_.lock_until(deadline, diag);
    }
    awaitable<result<lease>> try_lock(diagnostics& diag) { return writer_.try_lock(diag); }
    template <class CompletionToken>
    auto async_lock(CompletionToken&& token)
    {
        return writer_.async_lock(std::forward<CompletionToken>(token));
    }
    template <class CompletionToken>
    auto async_try_lock(CompletionToken&& token)
    {
        return writer_.async_try_lock(std::forward<CompletionToken>(token));
    }

    // -- Shared ----------------------------------------------------------------------

    awaitable<result<lease>> lock_shared() { return reader_.lock(); }
    awaitable<result<lease>> lock_shared_until(time_point deadline) { return reader_.lock_until(deadline); }
    awaitable<result<lease>> try_lock_shared() { return reader_.try_lock(); }
    awaitable<result<lease>> lock_shared(diagnostics& diag) { return reader_.lock(diag); }
    awaitable<result<lease>> lock_shared_until(time_point deadline, diagnostics& diag)
    {
        return reader_.lock_until(deadline, diag);
    }
    awaitable<result<lease>> try_lock_shared(diagnostics& diag) { return reader_.try_lock(diag); }
    template <class CompletionToken>
    auto async_lock_shared(CompletionToken&& token)
    {
        return reader_.async_lock(std::forward<CompletionToken>(token));
    }
    template <class CompletionToken>
    auto async_try_lock_shared(CompletionToken&& token)
    {
        return reader_.async_try_lock(std::forward<CompletionToken>(token));
    }

    /// The writer that holds `held` (a lease of this mutex's lock()) holds on in shared
    /// mode, in one step on the store: no writer is granted in between. The lease keeps
    /// its fence, renewal and loss signal, and is shared() from then on. Fails with
    /// errc::invalid_argument for a lease of another resource or one already shared,
    /// errc::not_owner when the store no longer has it (it was lost).
    awaitable<result<void>> downgrade(lease& held)
        requires requires(Backend& b, std::string_view r, const owner_token& o) {
            { b.downgrade(r, o) } -> std::same_as<awaitable<result<void>>>;
        }
    {
        return downgrade_held(writer_.backend(), resource(), held);
    }

    /// The mutex that takes the writers' grants, and the readers'.
    const mutex_type& exclusive() const noexcept { return writer_; }
    const mutex_type& shared() const noexcept { return reader_; }

private:
    template <class... P>
    static acquire_policy with_mode(lock_mode mode, const P&... policies)
    {
        auto a = detail::acquisition_among<acquire_policy>(policies...);
        a.mode = mode;
        return a;
    }

    static awaitable<result<void>> downgrade_held(Backend& backend, std::string resource, lease& held)
    {
        if (!held || held.resource() != resource || held.shared())
            co_return errc::invalid_argument;
        if (!held.valid())
            co_return errc::lease_lost;
        const store_ref<Backend> store{backend};
        const auto owner = held.owner();
        auto done = co_await store.call([&](Backend& s) { return s.downgrade(resource, owner); });
        if (done)
            held.mark_shared();
        co_return done;
    }

    mutex_type writer_;
    mutex_type reader_;
};

} // namespace distlock
