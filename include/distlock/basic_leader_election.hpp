// distlock/basic_leader_election.hpp: one leader at a time among the participants of
// an election, each leadership a term whose epoch is a fencing token.
#pragma once

#include <distlock/basic_distributed_mutex.hpp>
#include <distlock/lease.hpp>

#include <asio/experimental/awaitable_operators.hpp>
#include <asio/this_coro.hpp>

#include <algorithm>
#include <chrono>
#include <concepts>
#include <exception>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>

namespace distlock {

/// Settings of an election.
struct election_options {
    /// The lease of each term: its TTL (how long the store keeps a leader that
    /// vanished) and drift margin. Renewed while the term lasts (renew::watchdog,
    /// unless the election names a renewal policy of its own).
    lock_options term{};
    /// How often observe() reads the leader when nothing wakes it sooner (the store's
    /// release notifications, where it has them, wake it at once).
    duration poll = std::chrono::milliseconds{200};
};

/// One leadership: the lease of the election's lock, and the value the leader
/// proclaimed with it.
///
/// The **epoch** is the lease's fencing token: every later term of the election has a
/// larger one. Pass it with every write the leader makes and have the data store
/// refuse writes older than one it accepted: a leader that stalled past its term
/// (GC, a partition) and goes on believing it leads is then harmless. The value is
/// advisory: what observers are told (an address, an id), not a guarantee.
///
/// Move-only. Destroying a term that still holds gives it up in the background; call
/// resign() to give it up and learn whether it stayed valid to the end.
class term {
public:
    term() = default;
    term(lease held, std::string value) noexcept : lease_{std::move(held)}, value_{std::move(value)} {}

    /// False for an empty (default-constructed or moved-from) term.
    explicit operator bool() const noexcept { return static_cast<bool>(lease_); }

    /// The term's fencing token: larger than every earlier term's.
    fence_token epoch() const { return lease_.fence(); }
    /// What the leader proclaimed last.
    const std::string& value() const noexcept { return value_; }
    /// The election's resource id.
    const std::string& resource() const { return lease_.resource(); }
    const owner_token& owner() const { return lease_.owner(); }
    /// The lease's fence, for fenced writes that take a fence_holder.
    fence_token fence() const { return lease_.fence(); }

    /// True while the term holds by this client's clock (lease::valid()).
    bool valid() const { return lease_.valid(); }
    time_point valid_until() const { return lease_.valid_until(); }

    /// Emitted (cancellation_type::all) when the term is lost: bind the leader's
    /// work to it.
    asio::cancellation_slot lost_slot() { return lease_.lost_slot(); }
    /// Completes when the term ends: errc::lease_lost when lost, errc::released after
    /// resign().
    awaitable<std::error_code> lost() { return lease_.lost(); }

    /// Gives leadership up: the lock is released, and the next participant may lead.
    /// errc::lease_lost when the term had not stayed valid to the end.
    awaitable<result<void>> resign() { return lease_.unlock(); }

    /// The lease underneath (for fenced writes of a store, multi-resource work).
    lease& held() noexcept { return lease_; }
    const lease& held() const noexcept { return lease_; }

private:
    template <store Backend, class... Policies>
    friend class basic_leader_election;

    lease lease_;
    std::string value_;
};

/// Who leads, as observe() reports it.
struct leader {
    fence_token epoch = 0; ///< The term's epoch; 0 when nobody leads.
    std::string value;     ///< What the leader proclaimed.
    std::string owner;     ///< The leader's owner token, shortened (8 hex digits).

    /// True when somebody leads.
    explicit operator bool() const noexcept { return epoch != 0; }
    friend bool operator==(const leader&, const leader&) = default;
};

namespace detail {

template <class... P>
struct policy_list {};

// The election's mutex: the policies given, with renew::watchdog added when none
// renews (a term lasts as long as its leader lives, not one TTL).
template <class Backend, class... Policies>
struct election_mutex {
    using type = std::conditional_t<(count_kind<renew_policy_tag, Policies...> > 0),
                                    basic_distributed_mutex<Backend, Policies...>,
                                    basic_distributed_mutex<Backend, Policies..., renew::watchdog>>;
};

} // namespace detail

/// An election on one resource of a store, shaped by the mutex's policies
/// (basic_distributed_mutex): a leader holds the election's lock; its leadership is a
/// term, whose epoch is the lock's fence. Needs a store that keeps a value with a
/// grant (electing_store: every store of the library, not a Redlock quorum).
///
/// - `campaign(value)` waits until this participant leads, then proclaims `value`
///   with the term, and returns the term (`campaign_until(deadline)` gives up at the
///   deadline with errc::timeout). The term is renewed while it lasts.
/// - `lead(value, work)` is the structured form, the one to prefer: it campaigns, runs
///   `work(term&)` while leading, cancels the work when the term is lost, and gives
///   the term up only after the work has returned, so that two leaders' work never
///   overlaps by this client's doing (the epoch guards against the rest).
/// - `proclaim(term, value)` changes the value without giving up the term;
///   errc::not_owner when the term has ended.
/// - `observe()` tells any participant, leader or not, who leads now: it returns when
///   the leader (epoch and value) differs from what this object last reported, in
///   epoch order (a report never goes back to an older epoch); `current()` reads it
///   once. A leader that has not proclaimed within `poll` (the holder of a plain
///   mutex on the same resource, a foreign client) is reported with an empty value.
///   Reports come from reads of the store, made when a release notification
///   wakes the observer (stores that send them) and every `poll` otherwise, so a
///   leadership shorter than that may go unreported; every reported epoch is larger
///   than the one before.
///
/// The election's lock is the resource's lock: a mutex on the same resource of the
/// same store excludes its leaders, and `distlock list` shows the leader.
template <store Backend, class... Policies>
class basic_leader_election {
    static_assert(!detail::is_quorum<Backend>::value,
                  "an election is not offered on a Redlock quorum (distlock::quorum<Store>): its value would be "
                  "kept by no majority in one step; use one store (a Redis Cluster, etcd, ZooKeeper, PostgreSQL "
                  "or DynamoDB replicate themselves)");
    static_assert(electing_store<Backend>,
                  "an election needs a store that keeps a value with a grant (distlock::electing_store: "
                  "proclaim() and leader())");

public:
    using backend_type = Backend;
    using mutex_type = typename detail::election_mutex<Backend, Policies...>::type;

    template <class... P>
    explicit basic_leader_election(Backend& backend, std::string name, election_options options = {},
                                   P&&... policies)
        : mutex_{backend, std::move(name), options.term, std::forward<P>(policies)...}, poll_{options.poll}
    {}

    Backend& backend() const noexcept { return mutex_.backend(); }
    const std::string& name() const noexcept { return mutex_.resource(); }
    /// The mutex that takes the terms' locks.
    const mutex_type& mutex() const noexcept { return mutex_; }

    /// Waits until this participant leads, then proclaims `value`. Retries contended
    /// and unavailable attempts as the retry policy says, for as long as it takes
    /// (up to max_wait); errors other than the lock being held end it.
    /// \par Per-Operation Cancellation
    /// As the mutex's lock(): a cancelled campaign leaves nothing held.
    awaitable<result<term>> campaign(std::string value)
    {
        return campaign_impl(mutex_, std::move(value), std::nullopt);
    }
    awaitable<result<term>> campaign_until(time_point deadline, std::string value)
    {
        return campaign_impl(mutex_, std::move(value), deadline);
    }

    /// Changes the value of a term of this election that still holds.
    awaitable<result<void>> proclaim(term& t, std::string value)
    {
        return proclaim_impl(mutex_.backend(), t, std::move(value));
    }

    /// Campaigns with `value`, then runs `work(term&)` (a coroutine returning
    /// awaitable<void>) while leading. The work is cancelled (cancellation_type::all:
    /// its awaits fail with operation_aborted) when the term is lost, or when lead()
    /// itself is cancelled; the term is given up after the work has returned, however
    /// it returned. Completes with success when the work returned and the term held to
    /// its end, errc::lease_lost when the term was lost (the work cancelled),
    /// errc::cancelled when lead() was cancelled (the work cancelled, the term given
    /// up), or the campaign's error; an exception thrown by the work is rethrown after
    /// the term is given up.
    template <class Work>
        requires std::invocable<Work&, term&> &&
                 std::same_as<std::invoke_result_t<Work&, term&>, awaitable<void>>
    awaitable<result<void>> lead(std::string value, Work work)
    {
        return lead_impl(mutex_, std::move(value), std::move(work));
    }

    /// Who leads now, read once from the store.
    awaitable<result<leader>> current() { return read_leader(mutex_.backend(), mutex_.resource()); }

    /// Waits until the leader differs from what this object last reported, and
    /// reports it (the first call reports the leader at once, or waits for one if
    /// nobody leads). Epochs only grow from report to report.
    awaitable<result<leader>> observe() { return observe_impl(std::nullopt); }
    /// observe(), giving up at `deadline` with errc::timeout.
    awaitable<result<leader>> observe_until(time_point deadline) { return observe_impl(deadline); }

private:
    static constexpr duration patient = max_wait - std::chrono::hours{24};

    static std::error_code check_value(std::string_view value)
    {
        return value.size() > max_leader_value_size ? make_error_code(errc::invalid_argument) : std::error_code{};
    }

    static awaitable<result<term>> campaign_impl(mutex_type& m, std::string value,
                                                 std::optional<time_point> deadline)
    {
        if (auto ec = check_value(value))
            co_return ec;
        for (;;) {
            // One long wait: a queue store keeps the participant's place throughout.
            // The value goes with the campaign's queue entry where the store writes it
            // there (claim_request::candidate), and is proclaimed once it holds.
            const auto until = deadline ? *deadline : clock::now() + patient;
            auto got = co_await m.campaign_until(until, value);
            if (!got) {
                if (got.error() == errc::timeout && !deadline)
                    continue;
                co_return got.error();
            }
            term t{std::move(*got), std::string{}};
            auto said = co_await proclaim_impl(m.backend(), t, std::move(value));
            if (!said) {
                // Lost before the value was kept: give it back, report why.
                (void)co_await t.resign();
                co_return said.error();
            }
            co_return t;
        }
    }

    static awaitable<result<void>> proclaim_impl(Backend& backend, term& t, std::string value)
    {
        if (!t)
            co_return errc::invalid_argument;
        if (auto ec = check_value(value))
            co_return ec;
        if (!t.valid())
            co_return errc::not_owner;
        auto r = co_await backend.proclaim(t.resource(), t.owner(), t.epoch(), value);
        if (r)
            t.value_ = std::move(value);
        co_return r;
    }

    template <class Work>
    static awaitable<result<void>> lead_impl(mutex_type& m, std::string value, Work work)
    {
        auto elected = co_await campaign_impl(m, std::move(value), std::nullopt);
        if (!elected)
            co_return elected.error();
        term t = std::move(*elected);
        // The term must be given up however the work ends, a cancelled lead() included:
        // turn off Asio's throw-on-cancelled until then, and restore the caller's.
        const bool caller_throws = co_await asio::this_coro::throw_if_cancelled();
        co_await asio::this_coro::throw_if_cancelled(false);
        using namespace asio::experimental::awaitable_operators;
        std::exception_ptr thrown;
        bool lost = false;
        try {
            // Whichever ends first cancels the other, and both have ended when this
            // returns: the work is over before the term is given up.
            auto which = co_await (work(t) || wait_lost(t));
            lost = which.index() == 1;
        } catch (...) {
            thrown = std::current_exception();
        }
        auto given_up = co_await t.resign();
        const auto cs = co_await asio::this_coro::cancellation_state;
        co_await asio::this_coro::throw_if_cancelled(caller_throws);
        if (thrown)
            std::rethrow_exception(thrown);
        if (lost)
            co_return errc::lease_lost;
        if (cs.cancelled() != asio::cancellation_type::none)
            co_return errc::cancelled;
        co_return given_up;
    }

    static awaitable<void> wait_lost(term& t)
    {
        // Ends only when the term does: a cancelled wait (the work returned) ends too.
        (void)co_await t.lost();
    }

    static awaitable<result<leader>> read_leader(Backend& store, const std::string& resource)
    {
        auto r = co_await store.leader(resource);
        if (!r)
            co_return r.error();
        co_return leader{.epoch = r->epoch, .value = r->value.value_or(std::string{}), .owner = std::move(r->owner)};
    }

    awaitable<result<leader>> observe_impl(std::optional<time_point> deadline)
    {
        if (deadline)
            if (auto ec = validate_deadline(*deadline, clock::now()))
                co_return ec;
        if (poll_ <= duration::zero() || poll_ > max_wait)
            co_return errc::invalid_argument;
        auto& store = mutex_.backend();
        const auto& resource = mutex_.resource();
        for (;;) {
            auto cs = co_await asio::this_coro::cancellation_state;
            if (cs.cancelled() != asio::cancellation_type::none)
                co_return errc::cancelled;
            auto seen = co_await store.leader(resource);
            if (!seen)
                co_return seen.error();
            // A new leader is reported with its value: until it has proclaimed (one
            // round trip after its grant) it is not reported, and the wait is short.
            // One that has not proclaimed after a whole poll interval (a holder that
            // is no participant: a plain mutex, a foreign client) is reported as it
            // is, with an empty value.
            bool pending = seen->epoch != 0 && !seen->value;
            if (pending) {
                if (pending_epoch_ != seen->epoch) {
                    pending_epoch_ = seen->epoch;
                    pending_since_ = clock::now();
                } else if (clock::now() - pending_since_ >= poll_) {
                    pending = false;
                }
            }
            if (!pending) {
                leader now{.epoch = seen->epoch, .value = seen->value.value_or(std::string{}),
                           .owner = std::move(seen->owner)};
                // Never back to an older epoch (a read from a lagging replica, or one
                // made before a report that came from a later read).
                const bool older = now.epoch != 0 && now.epoch < reported_.epoch;
                const bool changed = !first_reported_ || now != reported_;
                if (!older && changed && (now.epoch != 0 || first_reported_)) {
                    first_reported_ = true;
                    reported_ = now;
                    co_return now;
                }
            }
            const auto now = clock::now();
            if (deadline && *deadline <= now)
                co_return errc::timeout;
            auto until = now + (pending ? std::min(poll_, duration{std::chrono::milliseconds{5}}) : poll_);
            if (deadline)
                until = std::min(until, *deadline);
            if (!pending && seen->epoch != 0) {
                // Woken by the leader's going where the store says so.
                if constexpr (release_notifying_store<Backend>) {
                    auto w = co_await store.watch(resource);
                    // Listening now: a release between the read and the watch would
                    // be missed without one more read.
                    auto again = co_await store.leader(resource);
                    if (again && again->epoch == seen->epoch)
                        (void)co_await w.wait(until);
                    continue;
                } else if constexpr (session_queue_store<Backend>) {
                    (void)co_await store.wait_gone(resource, seen->epoch, until);
                    continue;
                }
            }
            (void)co_await backend::sleep_until(until);
        }
    }

    mutex_type mutex_;
    duration poll_;
    leader reported_{};
    bool first_reported_ = false;
    fence_token pending_epoch_ = 0; // a leader seen without its value, since pending_since_
    time_point pending_since_{};
};

} // namespace distlock
