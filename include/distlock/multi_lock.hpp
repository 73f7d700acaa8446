// distlock/multi_lock.hpp: locks on several resources, all or nothing, never a deadlock.
//
// Every process takes any set of resources in the order of the ordering policy
// (byte-wise by id unless told otherwise), so two processes can never each hold what
// the other waits for. One deadline covers the whole set; if any lock fails, the ones
// already taken are released before the failure is reported.
#pragma once

#include <distlock/util/config.hpp>
#include <distlock/basic_distributed_mutex.hpp>
#include <distlock/basic_distributed_shared_mutex.hpp>
#include <distlock/detail/initiate.hpp>
#include <distlock/backend/when_all.hpp>
#include <distlock/lease.hpp>

#include <asio/this_coro.hpp>

#include <algorithm>
#include <concepts>
#include <initializer_list>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace distlock {

namespace detail {

/// Gives back, in one store request, a set of resources taken in one step under one
/// owner token (the batch path of a multi-lock): per resource, in the given order,
/// whether it was still the owner's.
class set_release {
public:
    virtual ~set_release() = default;
    virtual awaitable<result<std::vector<bool>>> release(std::vector<std::string> resources) const = 0;
};

template <class Policy, class S>
class set_release_for final : public set_release {
public:
    set_release_for(Policy policy, store_ref<S> store, owner_token owner)
        : policy_{std::move(policy)}, store_{std::move(store)}, owner_{owner}
    {}

    // As release_by_owner for one resource: a connection error may mean the request
    // did not arrive, and the release is idempotent by owner token, so it is sent once
    // more; "not the owner" then means the first one did arrive.
    awaitable<result<std::vector<bool>>> release(std::vector<std::string> resources) const override
    {
        auto first = co_await policy_.release_all(store_, resources, owner_);
        if (first || !backend::connection_error(first.error()))
            co_return first;
        auto second = co_await policy_.release_all(store_, resources, owner_);
        if (second)
            std::fill(second.value().begin(), second.value().end(), true);
        co_return second;
    }

private:
    Policy policy_;
    store_ref<S> store_;
    owner_token owner_;
};

} // namespace detail

/// Leases on a set of resources, in the order they were taken. Used as multi_lease.
// A template only to be compiled where it is used (backend/store_shell.hpp says why).
template <class Unused>
class basic_multi_lease {
public:
    basic_multi_lease() = default;
    explicit basic_multi_lease(std::vector<lease> leases) noexcept : leases_{std::move(leases)} {}
    /// Leases taken in one step under one owner token, which `together` gives back in
    /// one request.
    basic_multi_lease(std::vector<lease> leases, std::shared_ptr<const detail::set_release> together) noexcept
        : leases_{std::move(leases)}, together_{std::move(together)}
    {}

    const std::vector<lease>& leases() const noexcept { return leases_; }
    std::size_t size() const noexcept { return leases_.size(); }

    /// The resources, in locking order.
    std::vector<std::string> resources() const
    {
        std::vector<std::string> out;
        for (const auto& l : leases_)
            out.push_back(l.resource());
        return out;
    }

    /// The fencing tokens, in the order of resources().
    std::vector<fence_token> fences() const
    {
        std::vector<fence_token> out;
        for (const auto& l : leases_)
            out.push_back(l.fence());
        return out;
    }

    /// The fencing token of one resource of the set, if it is in the set.
    std::optional<fence_token> fence(std::string_view resource) const
    {
        for (const auto& l : leases_)
            if (l.resource() == resource)
                return l.fence();
        return std::nullopt;
    }

    /// The earliest valid_until() of the set.
    time_point valid_until() const
    {
        auto t = time_point::max();
        for (const auto& l : leases_)
            t = std::min(t, l.valid_until());
        return t;
    }

    bool valid() const
    {
        return !leases_.empty() &&
               std::all_of(leases_.begin(), leases_.end(), [](const lease& l) { return l.valid(); });
    }

    /// Releases every lease, all at once: in one request when the set was taken in one
    /// step (one script on Redis), else every release at once (over a pipelined
    /// connection, in one round trip). Reports the first failure in locking order
    /// (errc::lease_lost if any lease did not stay valid to the end).
    /// \par Per-Operation Cancellation
    /// None: once started, every release completes.
    awaitable<result<void>> unlock()
    {
        if (together_ && leases_.size() > 1)
            co_return co_await unlock_together();
        std::vector<awaitable<result<void>>> releases;
        releases.reserve(leases_.size());
        for (auto& l : leases_)
            releases.push_back(l.unlock());
        const auto outcomes = co_await backend::when_all(std::move(releases));
        leases_.clear();
        for (const auto& r : outcomes)
            if (!r)
                co_return r.error();
        co_return success();
    }

private:
    awaitable<result<void>> unlock_together()
    {
        auto leases = std::move(leases_);
        leases_.clear();
        const auto together = std::move(together_);
        // Each lease stops first (its renewal, its loss detection), so that no
        // extension reaches the store after the release; then one request for those
        // not released before; then each hears its answer.
        std::vector<std::optional<bool>> lost_before;
        std::vector<std::string> ids;
        lost_before.reserve(leases.size());
        for (auto& l : leases) {
            lost_before.push_back(co_await l.state_->begin_shared_release());
            if (lost_before.back())
                ids.push_back(l.resource());
        }
        result<std::vector<bool>> answers = std::vector<bool>{};
        if (!ids.empty())
            answers = co_await together->release(std::move(ids));
        result<void> first = success();
        std::size_t sent = 0;
        for (std::size_t i = 0; i < leases.size(); ++i) {
            result<void> r = errc::released;
            if (lost_before[i]) {
                result<void> answer = success();
                if (!answers)
                    answer = answers.error();
                else if (!answers.value()[sent])
                    answer = errc::not_owner;
                ++sent;
                r = co_await leases[i].state_->finish_shared_release(std::move(answer), *lost_before[i]);
            }
            if (first && !r)
                first = r.error();
        }
        co_return first;
    }

    std::vector<lease> leases_;
    std::shared_ptr<const detail::set_release> together_;
};

/// Leases on a set of resources: see basic_multi_lease.
using multi_lease = basic_multi_lease<>;

namespace detail {

// One resource of a set, within the set's deadline. The set's time can run out
// between resources; then this is a timeout, never invalid_argument. Checking the
// clock here first is not enough: lock_until() reads the clock again and refuses a
// deadline that has passed in between (as it must for a caller's deadline). So its
// invalid_argument is mapped too: every setting was validated before the first
// resource and none changes, so a refusal here can only be the deadline.
template <class Mutex>
awaitable<result<lease>> take_one(Mutex m, std::optional<time_point> deadline, bool single, diagnostics* diag)
{
    diagnostics unused;
    diagnostics& words = diag ? *diag : unused;
    if (single)
        co_return co_await m.try_lock(words);
    if (!deadline)
        co_return co_await m.lock(words);
    if (clock::now() >= *deadline)
        co_return errc::timeout;
    auto got = co_await m.lock_until(*deadline, words);
    if (!got && got.error() == errc::invalid_argument && clock::now() >= *deadline)
        co_return errc::timeout;
    co_return std::move(got);
}

// Takes the mutexes one after another, in the given (locking) order, all or nothing.
template <class Mutex>
awaitable<result<basic_multi_lease<>>> take_in_order(std::vector<Mutex> mutexes, std::optional<time_point> deadline,
                                                     bool single, diagnostics* diag)
{
    for (;;) {
        std::vector<lease> held;
        held.reserve(mutexes.size());
        for (const auto& m : mutexes) {
            auto got = co_await take_one(m, deadline, single, diag);
            if (!got) {
                basic_multi_lease<> partial{std::move(held)};
                (void)co_await partial.unlock();
                co_return got.error();
            }
            held.push_back(std::move(*got));
        }
        // A lease taken early can run out (or be lost) while a later resource is
        // awaited; a set is handed over only if every lease in it is still valid.
        // Otherwise start again, within the same deadline.
        if (std::all_of(held.begin(), held.end(), [](const lease& l) { return l.valid(); }))
            co_return basic_multi_lease<>{std::move(held)};
        basic_multi_lease<> stale{std::move(held)};
        (void)co_await stale.unlock();
        if (single)
            co_return errc::validity_exhausted;
        if (deadline && clock::now() >= *deadline)
            co_return errc::timeout;
    }
}

} // namespace detail

/// Locks on a set of resources of one backend, with the same policies as
/// basic_distributed_mutex<Backend, Policies...>.
template <store Backend, class... Policies>
class basic_multi_lock {
public:
    using mutex_type = basic_distributed_mutex<Backend, Policies...>;

    template <class... P>
    basic_multi_lock(Backend& backend, std::vector<std::string> resources, lock_options options = {},
                     P&&... policies)
        : prototype_{backend, std::string{}, options, std::forward<P>(policies)...},
          resources_{std::move(resources)}
    {}

    /// The resources, with the backend, settings and policies of `prototype` (whose
    /// own resource is ignored).
    basic_multi_lock(mutex_type prototype, std::vector<std::string> resources)
        : prototype_{std::move(prototype)}, resources_{std::move(resources)}
    {}

    /// The resources in locking order, duplicates collapsed.
    std::vector<std::string> ordered_resources() const
    {
        auto ids = resources_;
        prototype_.order().arrange(ids);
        return ids;
    }

    /// Locks every resource in order, within one deadline (the retry policy's).
    /// errc::invalid_argument for an empty set or any invalid id, before any I/O.
    /// \par Per-Operation Cancellation
    /// terminal, partial, total; everything taken so far is released.
    awaitable<result<multi_lease>> lock() { return run(false, nullptr); }

    /// One attempt per resource, no waiting.
    awaitable<result<multi_lease>> try_lock() { return run(true, nullptr); }

    /// lock() and try_lock() that also say why they failed: `diag` is cleared, then
    /// receives the words of the failed attempt on the resource that could not be taken
    /// (as the mutex's lock(diag) does); it must outlive the co_await.
    awaitable<result<multi_lease>> lock(diagnostics& diag) { return run(false, &diag); }
    awaitable<result<multi_lease>> try_lock(diagnostics& diag) { return run(true, &diag); }

    /// lock() with any completion token; signature void(std::error_code, multi_lease).
    template <class CompletionToken>
    auto async_lock(CompletionToken&& token)
    {
        return detail::initiate<multi_lease>(
            prototype_.backend().get_executor(), [this] { return lock(); },
            std::forward<CompletionToken>(token));
    }

private:
    awaitable<result<multi_lease>> run(bool single, diagnostics* diag)
    {
        const bool caller_throws = co_await asio::this_coro::throw_if_cancelled();
        co_await asio::this_coro::throw_if_cancelled(false);
        if (diag)
            diag->clear();
        auto r = co_await take_all(single, diag);
        co_await asio::this_coro::throw_if_cancelled(caller_throws);
        co_return r;
    }

    awaitable<result<multi_lease>> take_all(bool single, diagnostics* diag)
    {
        auto ids = ordered_resources();
        if (ids.empty())
            co_return errc::invalid_argument;
        for (const auto& id : ids) {
            mutex_type m = with_resource(id);
            if (auto ec = m.validate())
                co_return ec;
        }
        std::optional<time_point> deadline;
        if constexpr (requires { prototype_.retry().deadline; })
            deadline = clock::now() + prototype_.retry().deadline;

        if constexpr (has_batch_path) {
            // One round trip for the whole set when nothing is held; under contention,
            // the per-resource path below waits in order.
            // A store may take only some sets in one step (a cluster: one hash slot).
            // A lock-delay marks each grant as the one-resource path takes it.
            bool batchable = prototype_.options().lock_delay == duration::zero();
            if constexpr (requires(const Backend& b) { { b.batchable(ids) } -> std::convertible_to<bool>; })
                batchable = batchable && prototype_.backend().batchable(ids);
            if (ids.size() > 1 && batchable) {
                auto batch = co_await take_batch(ids);
                if (batch || batch.error() != condition::contended)
                    co_return batch;
            }
        }
        std::vector<mutex_type> mutexes;
        mutexes.reserve(ids.size());
        for (const auto& id : ids)
            mutexes.push_back(with_resource(id));
        co_return co_await detail::take_in_order(std::move(mutexes), deadline, single, diag);
    }

    using acquire_policy = typename mutex_type::acquire_policy;

    // The acquisition policy offers a batch path on this store (all resources in one
    // atomic step), e.g. acquire::setnx on a store with put_if_absent_all.
    static constexpr bool has_batch_path =
        requires(const acquire_policy& p, const store_ref<Backend>& s, const std::vector<std::string>& ids,
                 const owner_token& owner, duration ttl) {
            { p.acquire_all(s, ids, owner, ttl) } -> std::same_as<awaitable<result<std::vector<fence_token>>>>;
            p.hold(s, std::string{}, owner, ttl);
        };

    awaitable<result<multi_lease>> take_batch(const std::vector<std::string>& ids)
    {
        const acquire_policy& policy = prototype_.acquisition();
        const store_ref<Backend> store{prototype_.backend()};
        const auto owner = owner_token::generate();
        const auto& options = prototype_.options();
        const auto started = clock::now();
        auto fences = co_await policy.acquire_all(store, ids, owner, options.ttl);
        auto together = release_together(policy, store, owner);
        if (!fences) {
            if (detail::maybe_applied(fences.error()))
                co_await release_all(policy, store, ids, owner, together.get());
            co_return fences.error();
        }
        std::vector<lease> held;
        for (std::size_t i = 0; i < ids.size(); ++i)
            held.push_back(
                with_resource(ids[i]).adopt(policy.hold(store, ids[i], owner, options.ttl), fences.value()[i], started));
        multi_lease set{std::move(held), std::move(together)};
        if (clock::now() >= started + options.ttl - options.drift()) {
            (void)co_await set.unlock();
            co_return errc::validity_exhausted;
        }
        co_return set;
    }

    // How a set taken in one step goes back in one request, where the policy and the
    // store can (nullptr: one release per resource).
    static std::shared_ptr<const detail::set_release> release_together(const acquire_policy& policy,
                                                                       const store_ref<Backend>& store,
                                                                       const owner_token& owner)
    {
        if constexpr (requires(const std::vector<std::string>& ids) {
                          { policy.release_all(store, ids, owner) } -> std::same_as<awaitable<result<std::vector<bool>>>>;
                      })
            return std::make_shared<detail::set_release_for<acquire_policy, Backend>>(policy, store, owner);
        else
            return nullptr;
    }

    static awaitable<void> release_all(const acquire_policy& policy, const store_ref<Backend>& store,
                                       std::vector<std::string> ids, owner_token owner,
                                       const detail::set_release* together)
    {
        if (together) {
            (void)co_await together->release(std::move(ids));
            co_return;
        }
        for (const auto& id : ids) {
            auto hold = policy.hold(store, id, owner, duration{});
            (void)co_await hold.release();
        }
    }

    mutex_type with_resource(const std::string& id) const { return prototype_.with_resource(id); }

    mutex_type prototype_;
    std::vector<std::string> resources_;
};

/// One resource of a set taken with modes, and its mode: dl::shared("account:7"),
/// dl::exclusive("account:42").
struct resource_access {
    std::string resource;
    lock_mode mode = lock_mode::exclusive;
};

/// The resource, to be read: taken in shared mode.
inline resource_access shared(std::string resource) { return {std::move(resource), lock_mode::shared}; }

/// The resource, to be written: taken in exclusive mode.
inline resource_access exclusive(std::string resource) { return {std::move(resource), lock_mode::exclusive}; }

/// Locks on a set of resources of one backend, each in its mode (a transfer reads one
/// account and writes another), with the same policies as
/// basic_distributed_shared_mutex<Backend, Policies...>: sorted by the ordering
/// policy, all or nothing, one deadline, as basic_multi_lock. A resource named twice
/// is taken once, exclusively if either names it so. Each lease says whether it is
/// shared() and carries its own fence.
template <store Backend, class... Policies>
class basic_multi_shared_lock {
public:
    using shared_mutex_type = basic_distributed_shared_mutex<Backend, Policies...>;

    template <class... P>
    basic_multi_shared_lock(Backend& backend, std::vector<resource_access> resources, lock_options options = {},
                            P&&... policies)
        : prototype_{backend, std::string{}, options, std::forward<P>(policies)...}, resources_{std::move(resources)}
    {}

    /// The resources in locking order, duplicates collapsed, each with its mode.
    std::vector<resource_access> ordered_resources() const
    {
        std::map<std::string, lock_mode, std::less<>> strongest;
        std::vector<std::string> ids;
        ids.reserve(resources_.size());
        for (const auto& r : resources_) {
            auto [at, fresh] = strongest.try_emplace(r.resource, r.mode);
            if (!fresh && r.mode == lock_mode::exclusive)
                at->second = lock_mode::exclusive;
            ids.push_back(r.resource);
        }
        prototype_.exclusive().order().arrange(ids);
        std::vector<resource_access> out;
        out.reserve(ids.size());
        for (auto& id : ids) {
            const auto mode = strongest.find(id)->second;
            out.push_back({std::move(id), mode});
        }
        return out;
    }

    /// Locks every resource in its mode, in order, within one deadline (the retry
    /// policy's). errc::invalid_argument for an empty set or any invalid id, before
    /// any I/O. Cancellation as basic_multi_lock::lock().
    awaitable<result<multi_lease>> lock() { return run(false, nullptr); }

    /// One attempt per resource, no waiting.
    awaitable<result<multi_lease>> try_lock() { return run(true, nullptr); }

    /// lock() and try_lock() that also say why they failed, as basic_multi_lock's.
    awaitable<result<multi_lease>> lock(diagnostics& diag) { return run(false, &diag); }
    awaitable<result<multi_lease>> try_lock(diagnostics& diag) { return run(true, &diag); }

    /// lock() with any completion token; signature void(std::error_code, multi_lease).
    template <class CompletionToken>
    auto async_lock(CompletionToken&& token)
    {
        return detail::initiate<multi_lease>(
            prototype_.backend().get_executor(), [this] { return lock(); }, std::forward<CompletionToken>(token));
    }

private:
    awaitable<result<multi_lease>> run(bool single, diagnostics* diag)
    {
        const bool caller_throws = co_await asio::this_coro::throw_if_cancelled();
        co_await asio::this_coro::throw_if_cancelled(false);
        if (diag)
            diag->clear();
        auto r = co_await take_all(single, diag);
        co_await asio::this_coro::throw_if_cancelled(caller_throws);
        co_return r;
    }

    awaitable<result<multi_lease>> take_all(bool single, diagnostics* diag)
    {
        const auto accesses = ordered_resources();
        if (accesses.empty())
            co_return errc::invalid_argument;
        std::vector<mode_mutex> mutexes;
        mutexes.reserve(accesses.size());
        for (const auto& a : accesses) {
            const auto& of_mode = a.mode == lock_mode::shared ? prototype_.shared() : prototype_.exclusive();
            mutexes.push_back(of_mode.with_resource(a.resource));
            if (auto ec = mutexes.back().validate())
                co_return ec;
        }
        std::optional<time_point> deadline;
        if constexpr (requires { prototype_.exclusive().retry().deadline; })
            deadline = clock::now() + prototype_.exclusive().retry().deadline;
        co_return co_await detail::take_in_order(std::move(mutexes), deadline, single, diag);
    }

    using mode_mutex = std::remove_cvref_t<decltype(std::declval<const shared_mutex_type&>().exclusive())>;

    shared_mutex_type prototype_;
    std::vector<resource_access> resources_;
};

/// A set of resource ids from string-like arguments: lock_all(store, resources("a", "b")).
/// (A braced list inside a co_await expression does not compile with g++ 12; a named
/// vector or this helper avoids it.)
template <class... Ids>
std::vector<std::string> resources(Ids&&... ids)
{
    std::vector<std::string> out;
    out.reserve(sizeof...(ids));
    (out.emplace_back(std::forward<Ids>(ids)), ...);
    return out;
}

/// A set of resources with modes: lock_all(store, resources(dl::shared("a"), dl::exclusive("b"))).
template <class... Accesses>
    requires(std::same_as<std::remove_cvref_t<Accesses>, resource_access> && ...)
std::vector<resource_access> resources(Accesses&&... accesses)
{
    std::vector<resource_access> out;
    out.reserve(sizeof...(accesses));
    (out.push_back(std::forward<Accesses>(accesses)), ...);
    return out;
}

/// Locks every resource in `resources` (in the ordering policy's order) and returns
/// them as one multi_lease; see basic_multi_lock.
template <class... Policies, store Backend>
awaitable<result<multi_lease>> lock_all(Backend& backend, std::vector<std::string> resources,
                                        lock_options options = {}, Policies... policies)
{
    basic_multi_lock<Backend, Policies...> set{backend, std::move(resources), options, std::move(policies)...};
    co_return co_await set.lock();
}

/// Locks every resource of `resources` in its mode (in the ordering policy's order)
/// and returns them as one multi_lease; see basic_multi_shared_lock.
template <class... Policies, store Backend, class Accesses>
    requires std::same_as<Accesses, std::vector<resource_access>>
awaitable<result<multi_lease>> lock_all(Backend& backend, Accesses resources, lock_options options = {},
                                        Policies... policies)
{
    basic_multi_shared_lock<Backend, Policies...> set{backend, std::move(resources), options, std::move(policies)...};
    co_return co_await set.lock();
}

/// lock_all() for a braced list: lock_all(store, {dl::shared("a"), dl::exclusive("b")}).
template <class... Policies, store Backend>
awaitable<result<multi_lease>> lock_all(Backend& backend, std::initializer_list<resource_access> resources,
                                        lock_options options = {}, Policies... policies)
{
    basic_multi_shared_lock<Backend, Policies...> set{backend, std::vector<resource_access>(resources), options,
                                                      std::move(policies)...};
    co_return co_await set.lock();
}

} // namespace distlock
