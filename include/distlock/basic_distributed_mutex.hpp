// distlock/basic_distributed_mutex.hpp: a lock on one resource of a store, assembled
// from policies.
#pragma once

#include <distlock/util/config.hpp>
#include <distlock/clock.hpp>
#include <distlock/backend/auto_reset_event.hpp>
#include <distlock/backend/cut_off.hpp>
#include <distlock/detail/initiate.hpp>
#include <distlock/detail/lease_state.hpp>
#include <distlock/detail/local_line.hpp>
#include <distlock/backend/observer_ref.hpp>
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
#include <asio/this_coro.hpp>
#include <asio/use_awaitable.hpp>

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

namespace distlock {

namespace detail {
template <class B>
struct is_quorum : std::false_type {};
template <class S>
struct is_quorum<distlock::quorum<S>> : std::true_type {};

template <class P>
struct is_quorum_policy : std::false_type {};
template <class Inner>
struct is_quorum_policy<acquire::quorum<Inner>> : std::true_type {};

// A store may say how long any operation can take before it completes it itself
// (its request timeout); an attempt that surely ends before the deadline needs no
// timer of its own.
template <class B>
std::optional<duration> operation_bound(const B& b)
{
    if constexpr (requires { { b.operation_timeout() } -> std::convertible_to<duration>; })
        return b.operation_timeout();
    else
        return std::nullopt;
}
} // namespace detail

/// The acquisition policy used when none is named: Redlock for a quorum, SET NX otherwise.
namespace detail {
template <class B>
struct default_acquire {
    using type = std::conditional_t<is_quorum<B>::value, acquire::quorum<acquire::setnx>, acquire::setnx>;
};
template <class B>
    requires requires { typename B::default_acquire_policy; }
struct default_acquire<B> {
    using type = typename B::default_acquire_policy;
};
} // namespace detail

/// The acquisition policy used when none is named: the backend's own
/// (`Backend::default_acquire_policy`, e.g. a session store's queue), else Redlock for
/// a quorum and SET NX otherwise.
template <class Backend>
using default_acquire_policy = typename detail::default_acquire<Backend>::type;

// An election campaigns through its mutex's private campaign_until().
template <store Backend, class... Policies>
class basic_leader_election;

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
                  "every policy must name its kind with one of: using policy_kind = "
                  "distlock::acquire_policy_tag, distlock::retry_policy_tag, distlock::renew_policy_tag, "
                  "distlock::order_policy_tag or distlock::observer_policy_tag (docs/policies.md)");
    static_assert(detail::count_kind<acquire_policy_tag, Policies...> <= 1, "at most one acquisition policy");
    static_assert(detail::count_kind<retry_policy_tag, Policies...> <= 1, "at most one retry policy");
    static_assert(detail::count_kind<renew_policy_tag, Policies...> <= 1, "at most one renewal policy");
    static_assert(detail::count_kind<order_policy_tag, Policies...> <= 1, "at most one ordering policy");
    static_assert(detail::count_kind<observer_policy_tag, Policies...> <= 1, "at most one observer");
    static_assert(((!detail::has_policy_kind<Policies> || detail::is_kind<acquire_policy_tag, Policies> ||
                    detail::is_kind<retry_policy_tag, Policies> || detail::is_kind<renew_policy_tag, Policies> ||
                    detail::is_kind<order_policy_tag, Policies> || detail::is_kind<observer_policy_tag, Policies>) &&
                   ...),
                  "unknown policy kind: policy_kind must be one of distlock::acquire_policy_tag, retry_policy_tag, "
                  "renew_policy_tag, order_policy_tag, observer_policy_tag");

public:
    using backend_type = Backend;
    using acquire_policy = detail::select_policy_t<acquire_policy_tag, default_acquire_policy<Backend>, Policies...>;
    using retry_policy_type = detail::select_policy_t<retry_policy_tag, retry::exponential_backoff, Policies...>;
    using renew_policy_type = detail::select_policy_t<renew_policy_tag, renew::none, Policies...>;
    using order_policy_type = detail::select_policy_t<order_policy_tag, order::by_resource_id, Policies...>;
    using observer_type = detail::select_policy_t<observer_policy_tag, observe::none, Policies...>;

    static_assert(!detail::is_quorum_policy<acquire_policy>::value || detail::is_quorum<Backend>::value,
                  "acquire::quorum (Redlock) needs a quorum backend: use basic_distributed_mutex<"
                  "distlock::quorum<Store>, ...> over several stores, not a single store");
    static_assert(acquire_policy_for<acquire_policy, Backend> || detail::is_quorum_policy<acquire_policy>::value ||
                      !detail::is_quorum<Backend>::value,
                  "a distlock::quorum<Store> backend takes the quorum acquisition (acquire::quorum<...>), "
                  "the default when none is named; this policy locks a single store");
    static_assert(detail::is_quorum_policy<acquire_policy>::value != detail::is_quorum<Backend>::value ||
                      acquire_policy_for<acquire_policy, Backend>,
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
    const acquire_policy& acquisition() const noexcept { return acquire_; }
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

    /// lock(), lock_until() and try_lock() that also say why they failed: `diag` is
    /// cleared, then receives the words (the server's, the client's) of the last
    /// failed attempt that had any; it stays empty on success. Background clean-up
    /// after the call never writes to it; it must outlive the co_await.
    awaitable<result<lease>> lock(diagnostics& diag) { return acquire_loop(std::nullopt, false, &diag); }
    awaitable<result<lease>> lock_until(time_point deadline, diagnostics& diag)
    {
        return acquire_loop(deadline, false, &diag);
    }
    awaitable<result<lease>> try_lock(diagnostics& diag) { return acquire_loop(std::nullopt, true, &diag); }

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

    /// Wraps a lock that a batch acquisition (multi-locks) took with `fence` by an
    /// attempt that started at `started`, kept by `hold`. The lease is managed like one
    /// from lock(): renewed, watched, released through the hold.
    template <lease_hold Hold>
    lease adopt(Hold hold, fence_token fence, time_point started)
    {
        return make_lease(std::move(hold), fence, started, backend_.get_executor());
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
            // Distinct servers: the same store object twice would count twice.
            for (std::size_t i = 0; i < backend_.size(); ++i)
                for (std::size_t j = i + 1; j < backend_.size(); ++j)
                    if (&backend_.node(i) == &backend_.node(j))
                        return errc::invalid_argument;
        }
        if (!backend_.get_executor())
            return errc::invalid_argument;
        // A lock-delay is kept by the store: one that keeps none cannot honour it.
        if (options_.lock_delay > duration::zero() && !lock_delay_store<Backend>)
            return errc::invalid_argument;
        if (options_.lock_delay > duration::zero() && !lock_delay_refusal().empty())
            return errc::invalid_argument;
        return {};
    }

private:
    template <store B, class... P>
    friend class basic_leader_election;

    // Why the store, as configured, keeps no lock-delay although it is a
    // lock_delay_store (a setting whose foreign clients could not honour one: it says
    // so through lock_delay_refusal()); empty when it keeps them.
    std::string_view lock_delay_refusal() const noexcept
    {
        if constexpr (lock_delay_refusing_store<Backend>)
            return backend_.lock_delay_refusal();
        else
            return {};
    }

    // An election's campaign: lock_until() whose queue entry carries the candidate's
    // value from its create where the store writes one there (claim_request::candidate).
    awaitable<result<lease>> campaign_until(time_point deadline, std::string candidate)
    {
        return acquire_loop(deadline, false, nullptr, std::move(candidate));
    }

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
            static_assert(sizeof(T) == 0, "this argument is none of the mutex's policy types: add its type to "
                                          "the mutex's policy list, basic_distributed_mutex<Store, ..., ThatPolicy>");
    }

    // The mutex takes shared grants (a shared mutex's reader, a semaphore's permit):
    // those are never marked for a lock-delay (docs/lock_delay.md).
    bool shared_grants() const noexcept
    {
        if constexpr (requires { acquire_.mode; })
            return acquire_.mode == lock_mode::shared;
        else
            return false;
    }

    // Failures the store answered: what the claim still holds then (a refused try's
    // queue entry) is given back in one more request, which the call waits for.
    static bool answered(const std::error_code& ec)
    {
        return ec == condition::contended || ec == condition::invalid_argument || ec == condition::denied ||
               ec == condition::not_owner;
    }

    // Sets its event when destroyed: when the work it was given to has ended, or when
    // that work was dropped unstarted (the store closed first). Weak: the event (its
    // timer on the caller's executor) goes with the caller, who may have stopped waiting.
    struct set_on_exit {
        std::weak_ptr<backend::auto_reset_event> event;
        set_on_exit(const std::shared_ptr<backend::auto_reset_event>& e) : event{e} {}
        set_on_exit(set_on_exit&&) noexcept = default; // the moved-from one sets nothing
        set_on_exit(const set_on_exit&) = delete;
        set_on_exit& operator=(const set_on_exit&) = delete;
        set_on_exit& operator=(set_on_exit&&) = delete;
        ~set_on_exit()
        {
            if (const auto e = event.lock())
                e->set();
        }
    };

    // How long a call waits for the clean-up after an answered failure: the store's
    // request timeout (a connection lost meanwhile may keep the clean-up retrying far
    // longer; it goes on as the store's work), never past the caller's deadline.
    static time_point cleanup_until(const store_ref<Backend>& store, std::optional<time_point> deadline)
    {
        // A store that names no timeout answers in process.
        const auto until = clock::now() + store_timeout(store).value_or(std::chrono::seconds{1});
        return deadline ? std::min(until, *deadline) : until;
    }

    // The longest one of the store's requests runs before the store ends it itself
    // (detail::operation_bound), when it names one from zero to max_wait; nullopt
    // when it names none, or the store is gone. Asked through the store's lifetime:
    // the caller may have waited while the store was destroyed.
    static std::optional<duration> store_timeout(const store_ref<Backend>& store)
    {
        const auto asked = store.with([](Backend& b) { return detail::operation_bound(b); });
        if (asked && *asked && **asked >= duration::zero() && **asked <= max_wait)
            return **asked;
        return std::nullopt;
    }

    static awaitable<void> then_set(awaitable<void> work, set_on_exit done)
    {
        co_await std::move(work);
        (void)done;
    }

    static bool is_cancelled(const asio::cancellation_state& cs)
    {
        return cs.cancelled() != asio::cancellation_type::none;
    }

    // Errors after which another attempt may succeed.
    static bool retryable(const std::error_code& ec)
    {
        return ec == condition::contended || ec == condition::not_applied || ec == condition::maybe_applied ||
               ec == condition::session_lost || ec == errc::validity_exhausted;
    }

    // One coroutine frame from lock() to the claim's attempts (each nested frame costs
    // an allocation once Asio's small frame cache is used up). Defined below the class,
    // not inside it: a member defined in the class is inline, and an
    // `extern template class basic_distributed_mutex<...>;` would not keep a
    // translation unit from compiling it again (see "Compile a mutex type once" in
    // README.md).
    awaitable<result<lease>> acquire_loop(std::optional<time_point> deadline, bool single,
                                          diagnostics* diag = nullptr,
                                          std::optional<std::string> candidate = std::nullopt);

    // The deadline an attempt must be cut off at, if the store's own timeout might not
    // end it before. (A store destroyed meanwhile fails the attempt at once, without
    // I/O.)
    static std::optional<time_point> attempt_bound(const store_ref<Backend>& store, std::optional<time_point> deadline)
    {
        if (!deadline)
            return std::nullopt;
        if (const auto bound = store_timeout(store); bound && clock::now() + *bound < *deadline)
            return std::nullopt;
        return deadline;
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
    // A cancellation wins: it cancels the deadline's timer along with the operation, and
    // the timer may be the first to complete.
    static std::error_code give_up(const std::error_code& last, const asio::cancellation_state& cs)
    {
        if (is_cancelled(cs))
            return make_error_code(errc::cancelled);
        return last == condition::contended ? make_error_code(errc::timeout) : last;
    }

    template <lease_hold Hold>
    static awaitable<void> give_back(Hold hold)
    {
        (void)co_await hold.release();
    }

    // `ex`: the store's executor, taken while the store was known to be there.
    template <lease_hold Hold>
    lease make_lease(Hold hold, fence_token fence, time_point started, asio::any_io_executor ex,
                     std::optional<std::uint32_t> slot = std::nullopt)
    {
        using state_type = detail::lease_state_for<Hold, observer_type>;
        constexpr bool by_session = session_hold<Hold>;
        const detail::keep_plan plan{options_.ttl, options_.drift(),
                                     by_session ? std::nullopt : renew_.interval(options_.ttl),
                                     renew_.max_hold_time(), by_session};
        auto state = std::make_shared<state_type>(std::move(hold), observer_, std::move(ex), resource_, fence,
                                                  started, plan);
        // A policy that takes shared grants (a shared mutex's readers, a semaphore's
        // permits) says so; the lease tells its holder.
        if constexpr (requires { { acquire_.shared() } -> std::convertible_to<bool>; })
            state->set_kind(acquire_.shared(), slot);
        if constexpr (by_session) {
            // The session keeps the lease: its validity, not the TTL's, and its loss.
            const auto valid = state->hold().bind(std::weak_ptr<session_listener>{state});
            state->start_session(valid.value_or(started));
        } else if (plan.renew_every) {
            state->activate();
        } else {
            // Passive (nothing to renew): still told when the store closes, so that
            // close() ends it and releases its lock rather than leave it to its TTL.
            state->start_passive();
        }
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

template <store Backend, class... Policies>
awaitable<result<lease>> basic_distributed_mutex<Backend, Policies...>::acquire_loop(std::optional<time_point> deadline,
                                                                                  bool single, diagnostics* diag,
                                                                                  std::optional<std::string> candidate)
{
    if (diag)
        diag->clear();
    if (auto ec = validate()) {
        if (diag && options_.lock_delay > duration::zero() && !lock_delay_store<Backend>)
            diag->set_client_message("this store keeps no lock-delay (lock_delay_store)");
        else if (diag && options_.lock_delay > duration::zero() && !lock_delay_refusal().empty())
            diag->set_client_message(std::string{lock_delay_refusal()});
        co_return ec;
    }
    const auto start = clock::now();
    // A deadline in the past, or beyond max_wait from now (time_point::max()
    // included), is refused before any I/O; checked without overflow.
    if (deadline)
        if (auto ec = validate_deadline(*deadline, start))
            co_return ec;
    if constexpr (requires { retry_.deadline; })
        if (!deadline)
            deadline = start + retry_.deadline;
    // retry::none is one attempt: no waiting in the local line, no second try after
    // listening.
    if constexpr (std::is_same_v<retry_policy_type, retry::none>)
        single = true;

    const store_ref<Backend> store{backend_};
    if (!store.open()) // closed or closing: no new locks
        co_return errc::store_unavailable;

    // The release after a cancelled attempt must still run: turn off Asio's
    // throw-on-cancelled for the duration and restore the caller's setting.
    const bool caller_throws = co_await asio::this_coro::throw_if_cancelled();
    co_await asio::this_coro::throw_if_cancelled(false);
    const auto cs = co_await asio::this_coro::cancellation_state;
    const backend::observer_ref observe{observer_};
    auto claim = acquire_.open(store, claim_request{resource_, options_, observe, diag, !single, std::move(candidate)});
    using claim_type = decltype(claim);
    // What the retry policy is asked about. Its number counts failed attempts; the
    // try made at once after subscribing to release notifications (which closes
    // the window between the first failure and the subscription) belongs to the
    // first attempt, so the policy's first next_delay() sees 1, not 2. `sent`
    // counts every try, for the observer.
    attempt history;
    std::size_t sent = 0;
    bool listened_before_try = false;
    bool confirming = false; // this try is the one made at once after subscribing
    result<lease> r{make_error_code(errc::cancelled)};

    // Coroutines of this process already waiting for this resource go first (unless
    // the store keeps a fair queue of its own).
    detail::local_line::ticket place;
    std::error_code turn;
    if (!claim_type::fair && !single && detail::local_line::instance().busy(&backend_, resource_)) {
        place.join(&backend_, resource_, co_await asio::this_coro::executor);
        turn = co_await wait_for_turn(place, deadline, cs);
    }

    // An attempt in flight is work the store's close() waits for: from before its
    // request is sent until its grant is a lease, given back, or handed to the store
    // as clean-up (below the loop). Without it close() could end the connection under
    // a request the server applies, and the grant would stay held until its TTL.
    // Waiting between attempts is not counted: close() does not wait for waiters (it
    // is bounded by the store's operation timeout, not by a retry policy's delays).
    std::optional<decltype(store.track())> in_flight;

    // Every way out of the attempts sets r and breaks, so that the clean-up below
    // runs (a loop in this frame rather than a coroutine of its own: a frame less
    // on every lock()).
    if (turn)
        r = turn;
    else
        for (;;) {
            if (is_cancelled(cs)) {
                r = errc::cancelled;
                break;
            }
            in_flight.reset();
            in_flight.emplace(store.track());
            // Counted first, then asked: close() either sees the count and waits, or
            // this sees the store closing and sends nothing.
            if (!store.open()) {
                r = errc::store_unavailable;
                break;
            }
            // A lease's validity counts from before its attempt was sent: the first
            // attempt straight after lock() began may count from that (one clock
            // reading less on the uncontended path).
            const auto t0 = sent == 0 && !place.joined() ? start : clock::now();
            std::optional<result<answer>> got;
            if (const auto bound = attempt_bound(store, deadline))
                got = co_await backend::within(claim.attempt(), *bound);
            else // no within(): a frame less on the uncontended path
                got.emplace(co_await claim.attempt());
            const auto t1 = clock::now();
            ++sent;
            if (!confirming)
                ++history.number;
            confirming = false;
            if (!got) { // cut off by the deadline; abandon() gives back what it may have taken
                observe(attempt_event{resource_, sent, t1 - t0, make_error_code(errc::timeout), 0});
                r = give_up(sent > 1 ? history.error : make_error_code(errc::contended), cs);
                break;
            }
            const result<answer>& a = *got;
            std::error_code failure;
            if (a && a.value().is_granted()) {
                const auto fence = a.value().fence();
                observe(attempt_event{resource_, sent, t1 - t0, std::error_code{}, fence});
                // A lock handed over before the attempt counts from its hand-over.
                const auto counted_from = a.value().counted_from().value_or(t0);
                const auto valid_until = counted_from + options_.ttl - options_.drift();
                if (is_cancelled(cs)) {
                    co_await give_back(claim.hold());
                    r = errc::cancelled;
                    break;
                }
                if (!store.open()) { // closing: no lease outlives close()
                    co_await give_back(claim.hold());
                    r = errc::store_unavailable;
                    break;
                }
                if (t1 >= valid_until) {
                    co_await give_back(claim.hold());
                    failure = errc::validity_exhausted;
                } else {
                    auto hold = claim.hold();
                    // With a lock-delay, the grant is marked in the store before it is
                    // handed out: a holder lost from then on leaves a tombstone.
                    std::error_code unarmed;
                    if constexpr (lock_delay_store<Backend>) {
                        if (options_.lock_delay > duration::zero() && !shared_grants()) {
                            auto armed = co_await DISTLOCK_DETAIL_DIAGNOSED(diag, backend_.arm_delay, resource_,
                                                                            hold.owner(), fence, options_.lock_delay);
                            if (!armed)
                                unarmed = armed.error();
                        }
                    }
                    if (!unarmed) {
                        r = make_lease(std::move(hold), fence, counted_from, store.get_executor(), a.value().slot());
                        break;
                    }
                    co_await give_back(std::move(hold));
                    failure = unarmed;
                }
            } else {
                const bool delayed = a && a.value().is_delayed();
                failure = a ? make_error_code(delayed ? errc::lock_delayed : errc::contended) : a.error();
                observe(attempt_event{resource_, sent, t1 - t0, failure, 0});
                history.held_until = a ? a.value().not_before() : std::nullopt;
                if (delayed && diag && history.held_until) {
                    diag->set_lock_delay_until(*history.held_until);
                    diag->set_client_message(
                        "lock-delay until " +
                        std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(*history.held_until -
                                                                                               clock::now())
                                           .count()) +
                        " ms from now: the last holder was lost without releasing");
                }
                if (is_cancelled(cs)) {
                    r = errc::cancelled;
                    break;
                }
            }

            history.error = failure;
            if (single || !retryable(failure)) {
                r = failure;
                break;
            }
            if (!store.open()) { // closed while this call waited: nothing more to try
                r = errc::store_unavailable;
                break;
            }

            // Waiting from now on: close() does not wait for waiters. One that closes
            // the store meanwhile ends the wait (its connections and sessions go); what
            // the claim still has then (a queue entry, a grant in doubt) goes with the
            // session or its TTL, as the clean-up below finds the store closed.
            in_flight.reset();

            // Take a place in this process's line, and if others were there first,
            // let them go first.
            if (!claim_type::fair && failure == condition::contended && !place.joined()) {
                place.join(&backend_, resource_, co_await asio::this_coro::executor);
                if (!place.at_head()) {
                    if (auto ec = co_await wait_for_turn(place, deadline, cs)) {
                        r = ec;
                        break;
                    }
                    continue;
                }
            }

            // Listen before trying again, so a release between the failed try and the
            // wait cannot be missed.
            if (failure == condition::contended) {
                std::optional<bool> began;
                if (deadline)
                    began = co_await backend::within(claim.listen(), *deadline);
                else
                    began.emplace(co_await claim.listen());
                if (!began) {
                    r = give_up(failure, cs);
                    break;
                }
                if (*began && !listened_before_try) {
                    listened_before_try = true;
                    confirming = true;
                    continue;
                }
            }

            history.elapsed = clock::now() - start;
            const auto delay = retry_.next_delay(history);
            if (!delay) { // the policy gave up: report why the last attempt failed
                r = failure;
                break;
            }
            history.previous_delay = *delay;
            // A custom policy's delay is clamped, so that the sum cannot overflow.
            auto until = clock::now() + std::clamp(*delay, duration::zero(), max_wait);
            // A claim told exactly when its turn may come (a fair queue watching the
            // entry before its own) waits for that, not for the retry policy's next
            // step: looking sooner costs requests (on etcd, a new watch stream) and
            // can only find the same place. It still looks again after
            // turn_recheck, in case a notification went missing.
            if constexpr (requires { claim.waits_for_turn(); })
                if (claim.waits_for_turn())
                    until = std::max(until, clock::now() + turn_recheck);
            // The store said when the lock can be taken over at the latest (its TTL,
            // or a record version that must stay unchanged that long): no later.
            if (history.held_until && *history.held_until > clock::now())
                until = std::min(until, *history.held_until);
            // A lock-delay: every try before its end is refused, and the grant can be
            // made at its end: wait exactly that long, or not at all when it ends
            // after the deadline.
            if (failure == errc::lock_delayed && history.held_until) {
                until = std::max(*history.held_until, clock::now());
                if (deadline && until > *deadline) {
                    r = failure;
                    break;
                }
            }
            if (deadline) {
                if (clock::now() >= *deadline) {
                    r = give_up(failure, cs);
                    break;
                }
                until = std::min(until, *deadline);
            }
            observe(wait_event{resource_, until - clock::now()});
            const auto wait_start = clock::now();
            const auto woke = co_await backend::within(claim.wait(until), until);
            const bool notified = woke.value_or(false);
            observe(wake_event{resource_, clock::now() - wait_start, notified});
            if (is_cancelled(cs)) {
                r = errc::cancelled;
                break;
            }
            if (deadline && clock::now() >= *deadline) {
                r = give_up(failure, cs);
                break;
            }
        }
    // What the claim may still hold is given back as work owned by the store, so that
    // the caller's cancellation cannot cut it short. After an answer (a refused try's
    // queue entry, a reader's key that met a writer) this call waits for it to end: the
    // caller's next request must not find the entry still there, and on a store whose
    // calls in flight together may be applied in either order (etcd over gRPC) it could.
    // A grant in doubt (a reply lost or cut off by the deadline) is given back without
    // the caller waiting: the store may be unreachable. The wait is bounded too
    // (cleanup_until).
    if (claim.unsettled()) {
        if (!r && answered(r.error()) && !is_cancelled(cs) && store.takes_work()) {
            auto done = std::make_shared<backend::auto_reset_event>(co_await asio::this_coro::executor);
            store.spawn(then_set(claim.abandon(), set_on_exit{done}));
            // Cancellable: the clean-up goes on without the caller.
            (void)co_await done->wait(cleanup_until(store, deadline));
        } else {
            store.spawn(claim.abandon());
        }
    }
    in_flight.reset();
    if (r && diag)
        diag->clear(); // the words of attempts that failed before one succeeded
    co_await asio::this_coro::throw_if_cancelled(caller_throws);
    co_return r;
}

} // namespace distlock
