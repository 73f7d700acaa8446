// distlock/basic_distributed_mutex.hpp: a lock on one resource of a store, assembled
// from policies.
#pragma once

#include <distlock/clock.hpp>
#include <distlock/detail/initiate.hpp>
#include <distlock/detail/lease_state.hpp>
#include <distlock/detail/local_line.hpp>
#include <distlock/detail/observer_ref.hpp>
#include <distlock/detail/select_policy.hpp>
#include <distlock/lease.hpp>
#include <distlock/observe.hpp>
#include <distlock/options.hpp>
#include <distlock/policy/acquire.hpp>
#include <distlock/policy/order.hpp>
#include <distlock/policy/renew.hpp>
#include <distlock/policy/retry.hpp>
#include <distlock/quorum.hpp>
#include <distlock/store.hpp>

#include <asio/cancellation_type.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/this_coro.hpp>
#include <asio/use_awaitable.hpp>

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>

namespace distlock {

namespace detail {
template <class B>
struct is_quorum : std::false_type {};
template <class S>
struct is_quorum<distlock::quorum<S>> : std::true_type {};

// The watcher a store hands out, or a placeholder for stores without notifications.
template <class B>
struct watcher_of {
    using type = int;
};
template <release_notifying_store B>
struct watcher_of<B> {
    using type = typename awaited<decltype(std::declval<B&>().watch(std::string_view{}))>::type;
};
} // namespace detail

/// The acquisition policy used when none is named: Redlock for a quorum, SET NX otherwise.
template <class Backend>
using default_acquire_policy =
    std::conditional_t<detail::is_quorum<Backend>::value, acquire::quorum<acquire::setnx>, acquire::setnx>;

/// A lock on one resource of `Backend`, shaped by `Policies` given in any order, at
/// most one of each kind; omitted kinds take defaults:
///  - acquisition (acquire_policy_tag): default_acquire_policy<Backend>
///  - retry (retry_policy_tag): retry::exponential_backoff{}
///  - renewal (renew_policy_tag): renew::none
///  - ordering (order_policy_tag): order::by_resource_id (used by multi-locks)
///  - observer (observer_policy_tag): observe::none
///
/// The mutex holds no lock state itself: each lock() returns a lease, and the mutex
/// may be used again (or destroyed) while leases from it are held. The backend must
/// outlive the mutex and every lease from it.
template <store Backend, class... Policies>
class basic_distributed_mutex {
    static_assert((detail::has_policy_kind<Policies> && ...),
                  "every policy must name its kind: using policy_kind = distlock::..._policy_tag");
    static_assert(detail::count_kind<acquire_policy_tag, Policies...> <= 1, "at most one acquisition policy");
    static_assert(detail::count_kind<retry_policy_tag, Policies...> <= 1, "at most one retry policy");
    static_assert(detail::count_kind<renew_policy_tag, Policies...> <= 1, "at most one renewal policy");
    static_assert(detail::count_kind<order_policy_tag, Policies...> <= 1, "at most one ordering policy");
    static_assert(detail::count_kind<observer_policy_tag, Policies...> <= 1, "at most one observer");
    static_assert(((detail::is_kind<acquire_policy_tag, Policies> || detail::is_kind<retry_policy_tag, Policies> ||
                    detail::is_kind<renew_policy_tag, Policies> || detail::is_kind<order_policy_tag, Policies> ||
                    detail::is_kind<observer_policy_tag, Policies>) && ...),
                  "unknown policy kind");

public:
    using backend_type = Backend;
    using acquire_policy = detail::select_policy_t<acquire_policy_tag, default_acquire_policy<Backend>, Policies...>;
    using retry_policy_type = detail::select_policy_t<retry_policy_tag, retry::exponential_backoff, Policies...>;
    using renew_policy_type = detail::select_policy_t<renew_policy_tag, renew::none, Policies...>;
    using order_policy_type = detail::select_policy_t<order_policy_tag, order::by_resource_id, Policies...>;
    using observer_type = detail::select_policy_t<observer_policy_tag, observe::none, Policies...>;

    static_assert(acquire_policy_for<acquire_policy, Backend>,
                  "this acquisition policy cannot drive this backend: the store lacks a primitive it needs "
                  "(see the unsatisfied requirement below)");
    static_assert(retry_policy<retry_policy_type>, "the retry policy does not satisfy distlock::retry_policy");
    static_assert(renew_policy<renew_policy_type>, "the renewal policy does not satisfy distlock::renew_policy");
    static_assert(order_policy<order_policy_type>, "the ordering policy does not satisfy distlock::order_policy");
    static_assert(observer<observer_type>, "the observer does not satisfy distlock::observer");

    /// `policies` are instances of some of the policy types, in any order, overriding
    /// their default-constructed values.
    template <class... P>
    explicit basic_distributed_mutex(Backend& backend, std::string resource, lock_options options = {},
                                     P&&... policies)
        : backend_{backend}, resource_{std::move(resource)}, options_{options}
    {
        (assign(std::forward<P>(policies)), ...);
    }

    /// The same lock, policies and settings on another resource.
    basic_distributed_mutex with_resource(std::string resource) const
    {
        auto copy = *this;
        copy.resource_ = std::move(resource);
        return copy;
    }

    Backend& backend() const noexcept { return backend_; }
    const std::string& resource() const noexcept { return resource_; }
    const lock_options& options() const noexcept { return options_; }
    const retry_policy_type& retry() const noexcept { return retry_; }
    const order_policy_type& order() const noexcept { return order_; }
    const observer_type& observer() const noexcept { return observer_; }

    /// Acquires the lock, retrying per the retry policy until its deadline.
    /// Fails with errc::timeout (still contended at the deadline), the last attempt's
    /// error when the retry policy gives up (errc::contended, ...), the last store error
    /// (store unavailable, quorum not reached, ...), errc::invalid_argument (before any
    /// I/O) or errc::cancelled.
    /// \par Per-Operation Cancellation
    /// terminal, partial, total. A cancelled lock() leaves nothing held: a grant that
    /// was in flight is released before it completes with errc::cancelled.
    awaitable<result<lease>> lock() { return acquire_loop(std::nullopt, false); }

    /// lock() that gives up at `deadline` (which must not be in the past).
    awaitable<result<lease>> lock_until(time_point deadline) { return acquire_loop(deadline, false); }

    /// One attempt, no waiting: errc::contended when held by another owner.
    awaitable<result<lease>> try_lock() { return acquire_loop(std::nullopt, true); }

    /// lock() with any completion token; signature void(std::error_code, lease).
    template <class CompletionToken>
    auto async_lock(CompletionToken&& token)
    {
        return detail::initiate<lease>(
            backend_.get_executor(), [this] { return lock(); }, std::forward<CompletionToken>(token));
    }

    /// try_lock() with any completion token; signature void(std::error_code, lease).
    template <class CompletionToken>
    auto async_try_lock(CompletionToken&& token)
    {
        return detail::initiate<lease>(
            backend_.get_executor(), [this] { return try_lock(); }, std::forward<CompletionToken>(token));
    }

    /// Wraps a lock that was granted to `owner` with `fence` by an attempt that started
    /// at `started` (for batch acquisitions that bypass lock()). The lease is managed
    /// like one from lock(): renewed, watched, released by its owner token.
    lease adopt(const owner_token& owner, fence_token fence, time_point started)
    {
        return make_lease(lock_request{resource_, owner, options_.ttl}, fence, started);
    }

    /// Checks every setting without I/O; what lock() reports as errc::invalid_argument.
    std::error_code validate() const noexcept
    {
        if (auto ec = validate_resource(resource_))
            return ec;
        if (auto ec = validate_options(options_))
            return ec;
        if (!retry_settings_valid(retry_))
            return errc::invalid_argument;
        // After validate_options(): the renewal bounds are computed from the options.
        if (!renew_settings_valid(renew_, options_))
            return errc::invalid_argument;
        if constexpr (detail::is_quorum<Backend>::value) {
            if (backend_.size() == 0)
                return errc::invalid_argument;
        }
        if (!backend_.get_executor())
            return errc::invalid_argument;
        return {};
    }

private:
    template <class P>
    void assign(P&& p)
    {
        using T = std::remove_cvref_t<P>;
        if constexpr (std::is_same_v<T, acquire_policy>)
            acquire_ = std::forward<P>(p);
        else if constexpr (std::is_same_v<T, retry_policy_type>)
            retry_ = std::forward<P>(p);
        else if constexpr (std::is_same_v<T, renew_policy_type>)
            renew_ = std::forward<P>(p);
        else if constexpr (std::is_same_v<T, order_policy_type>)
            order_ = std::forward<P>(p);
        else if constexpr (std::is_same_v<T, observer_type>)
            observer_ = std::forward<P>(p);
        else
            static_assert(sizeof(T) == 0, "this argument is none of the mutex's policy types");
    }

    static bool is_cancelled(const asio::cancellation_state& cs)
    {
        return cs.cancelled() != asio::cancellation_type::none;
    }

    // Errors after which another attempt may succeed.
    static bool retryable(const std::error_code& ec)
    {
        return ec == errc::contended || ec == errc::store_unavailable || ec == errc::outcome_unknown ||
               ec == errc::quorum_not_reached || ec == errc::validity_exhausted;
    }

    awaitable<result<lease>> acquire_loop(std::optional<time_point> deadline, bool single)
    {
        // The release after a cancelled attempt must still run: turn off Asio's
        // throw-on-cancelled for the duration and restore the caller's setting.
        const bool caller_throws = co_await asio::this_coro::throw_if_cancelled();
        co_await asio::this_coro::throw_if_cancelled(false);
        auto r = co_await attempts(deadline, single);
        co_await asio::this_coro::throw_if_cancelled(caller_throws);
        co_return r;
    }

    awaitable<result<lease>> attempts(std::optional<time_point> deadline, bool single)
    {
        if (auto ec = validate())
            co_return ec;
        const auto start = clock::now();
        // A deadline in the past, or beyond max_wait from now (time_point::max()
        // included), is refused before any I/O; checked without overflow.
        if (deadline)
            if (auto ec = validate_deadline(*deadline, start))
                co_return ec;
        if constexpr (requires { retry_.deadline; })
            if (!deadline)
                deadline = start + retry_.deadline;

        const auto cs = co_await asio::this_coro::cancellation_state;
        lock_request request{resource_, owner_token::generate(), options_.ttl};
        const detail::observer_ref observe{observer_};
        attempt history;

        using watcher_type = typename detail::watcher_of<Backend>::type;
        std::optional<watcher_type> watcher;
        bool listened_before_try = false;

        // Coroutines of this process already waiting for this resource go first.
        detail::local_line::ticket place;
        if (!single && detail::local_line::instance().busy(&backend_, resource_)) {
            place.join(&backend_, resource_, co_await asio::this_coro::executor);
            if (auto ec = co_await wait_for_turn(place, deadline, cs))
                co_return ec;
        }

        for (;;) {
            if (is_cancelled(cs))
                co_return errc::cancelled;
            // Every attempt has its own owner token. A release that cleans up after a
            // failed attempt may reach a node late (after a reordering network, or a
            // reconnect); with a shared token it would remove the grant of a later
            // attempt of the same call, and the lease would hold less than a quorum.
            if (history.number > 0)
                request.owner = owner_token::generate();
            const auto t0 = clock::now();
            auto granted = co_await acquire_.acquire(backend_, request, observe);
            const auto t1 = clock::now();
            ++history.number;
            observe(attempt_event{resource_, history.number, t1 - t0,
                                  granted ? std::error_code{} : granted.error(),
                                  granted ? granted.value() : fence_token{0}});

            std::error_code failure;
            if (granted) {
                const auto valid_until = t0 + options_.ttl - options_.drift();
                if (is_cancelled(cs)) {
                    co_await give_back(request);
                    co_return errc::cancelled;
                }
                if (t1 >= valid_until) {
                    co_await give_back(request);
                    failure = errc::validity_exhausted;
                } else {
                    co_return make_lease(request, granted.value(), t0);
                }
            } else {
                failure = granted.error();
                // The request may have been applied: clean up by owner token.
                if (detail::maybe_applied(failure))
                    co_await give_back(request);
                if (is_cancelled(cs))
                    co_return errc::cancelled;
            }

            history.error = failure;
            if (single || !retryable(failure))
                co_return failure;

            // Waiting from now on: take a place in this process's line, and if others
            // were there first, let them go first.
            if (failure == errc::contended && !place.joined()) {
                place.join(&backend_, resource_, co_await asio::this_coro::executor);
                if (!place.at_head()) {
                    if (auto ec = co_await wait_for_turn(place, deadline, cs))
                        co_return ec;
                    continue;
                }
            }

            // Listen before trying again, so a release between the failed try and the
            // wait cannot be missed.
            if constexpr (release_notifying_store<Backend>) {
                if (!watcher && failure == errc::contended) {
                    watcher.emplace(co_await backend_.watch(resource_));
                    if (!listened_before_try) {
                        listened_before_try = true;
                        continue;
                    }
                }
            }

            history.elapsed = clock::now() - start;
            const auto delay = retry_.next_delay(history);
            if (!delay) // the policy gave up: report why the last attempt failed
                co_return failure;
            history.previous_delay = *delay;
            // A custom policy's delay is clamped, so that the sum cannot overflow.
            auto until = clock::now() + std::clamp(*delay, duration::zero(), max_wait);
            if (deadline) {
                if (clock::now() >= *deadline)
                    co_return give_up(failure);
                until = std::min(until, *deadline);
            }
            observe(wait_event{resource_, until - clock::now()});
            const auto wait_start = clock::now();
            bool notified = false;
            if constexpr (release_notifying_store<Backend>) {
                if (watcher)
                    notified = co_await watcher->wait(until);
                else
                    co_await sleep_until(until);
            } else {
                co_await sleep_until(until);
            }
            observe(wake_event{resource_, clock::now() - wait_start, notified});
            if (is_cancelled(cs))
                co_return errc::cancelled;
            if (deadline && clock::now() >= *deadline)
                co_return give_up(failure);
        }
    }

    // Sleeps until `place` is at the head of this process's line for the resource.
    static awaitable<std::error_code> wait_for_turn(detail::local_line::ticket& place,
                                                    std::optional<time_point> deadline,
                                                    const asio::cancellation_state& cs)
    {
        while (!place.at_head()) {
            if (is_cancelled(cs))
                co_return make_error_code(errc::cancelled);
            const auto now = clock::now();
            if (deadline && now >= *deadline)
                co_return make_error_code(errc::timeout);
            co_await place.wait(deadline.value_or(now + std::chrono::seconds{1}));
        }
        co_return std::error_code{};
    }

    // At the deadline: timeout if the lock was held elsewhere, else the store's error.
    static std::error_code give_up(const std::error_code& last)
    {
        return last == errc::contended ? make_error_code(errc::timeout) : last;
    }

    static awaitable<void> sleep_until(time_point until)
    {
        timer t{co_await asio::this_coro::executor, until};
        (void)co_await t.async_wait(asio::experimental::as_tuple(asio::use_awaitable));
    }

    awaitable<void> give_back(const lock_request& request)
    {
        (void)co_await acquire_.release(backend_, request);
    }

    lease make_lease(const lock_request& request, fence_token fence, time_point started)
    {
        using state_type = detail::lease_state_for<Backend, acquire_policy, observer_type>;
        const detail::keep_plan plan{options_.ttl, options_.drift(), renew_.interval(options_.ttl),
                                     renew_.max_hold_time()};
        auto state = std::make_shared<state_type>(backend_, acquire_, observer_, resource_, request.owner,
                                                  fence, started, plan);
        if (plan.renew_every)
            state->activate();
        return lease{std::move(state)};
    }

    Backend& backend_;
    std::string resource_;
    lock_options options_;
    acquire_policy acquire_{};
    retry_policy_type retry_{};
    renew_policy_type renew_{};
    order_policy_type order_{};
    observer_type observer_{};
};

} // namespace distlock
