// distlock/claims/ttl_claim.hpp: the claim of every acquisition over TTL primitives
// (acquire::setnx, acquire::fair, acquire::conditional_write, a store's own TTL
// policy): each attempt puts the lock with a fresh owner token and a TTL; the lease
// extends and releases it by that token.
#pragma once

#include <distlock/backend/contract.hpp>
#include <distlock/backend/deferred.hpp>
#include <distlock/backend/helpers.hpp>
#include <distlock/backend/lifetime.hpp>
#include <distlock/backend/observer_ref.hpp>
#include <distlock/backend/store_ref.hpp>
#include <distlock/claim.hpp>
#include <distlock/diagnostics.hpp>
#include <distlock/error.hpp>

#include <asio/experimental/as_tuple.hpp>
#include <asio/this_coro.hpp>
#include <asio/use_awaitable.hpp>

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace distlock {

struct acquire_policy_tag {};

/// TTL primitives: take the lock for an owner, extend and release it by that owner.
/// What acquire::setnx and acquire::conditional_write provide, and what
/// acquire::quorum<Inner> runs on every node. The awaitables they return may refer
/// to `r` and `s`, which the caller keeps alive until they complete.
template <class P, class S>
concept ttl_acquisition_for = requires(const P& p, S& s, const lock_request& r, backend::observer_ref obs) {
    { p.acquire(s, r, obs) } -> std::same_as<awaitable<result<fence_token>>>;
    { p.extend(s, r) } -> std::same_as<awaitable<result<void>>>;
    { p.release(s, r) } -> std::same_as<awaitable<result<void>>>;
};

/// An acquisition policy opens a claim on backend B for each lock() call.
template <class P, class B>
concept acquire_policy_for = std::same_as<typename P::policy_kind, acquire_policy_tag> &&
                             requires(const P& p, const store_ref<B>& b, claim_request r) {
                                 { p.open(b, std::move(r)) } -> claim;
                             };

namespace detail {
using backend::observer_ref;
using backend::connection_error;
using backend::release_by_owner;
using backend::sleep_until;

// The watcher a store hands out, or a placeholder for stores without notifications.
template <class S>
struct watcher_of {
    using type = int;
};
template <release_notifying_store S>
struct watcher_of<S> {
    using type = typename backend::awaited<decltype(std::declval<S&>().watch(std::string_view{}))>::type;
};

/// A lease on one store, kept by owner token.
template <class Inner, class S>
class ttl_hold {
public:
    ttl_hold(Inner policy, store_ref<S> store, std::string resource, owner_token owner, duration ttl)
        : policy_{std::move(policy)}, store_{std::move(store)}, resource_{std::move(resource)}, owner_{owner},
          ttl_{ttl}
    {}
    ttl_hold(ttl_hold&& o) noexcept
        : policy_{std::move(o.policy_)}, store_{std::move(o.store_)}, resource_{std::move(o.resource_)},
          owner_{o.owner_}, ttl_{o.ttl_}
    {}

    awaitable<result<void>> extend() { return extend_impl(this); }
    // The request lives in release_by_owner's frame (by value), so the store's
    // operation may refer to it.
    awaitable<result<void>> release() { return backend::release_by_owner(policy_, store_, {resource_, owner_, ttl_}); }
    const owner_token& owner() const noexcept { return owner_; }
    void spawn(awaitable<void> work) const { store_.spawn(std::move(work)); }
    bool listen(std::weak_ptr<backend::closing_listener> l) const { return store_.listen(std::move(l)); }

private:
    // The request lives in the frame, so the store's operation may refer to it.
    static awaitable<result<void>> extend_impl(ttl_hold* self)
    {
        const lock_request r{self->resource_, self->owner_, self->ttl_};
        co_return co_await self->store_.call([&](S& s) { return self->policy_.extend(s, r); });
    }
    Inner policy_;
    store_ref<S> store_;
    std::string resource_;
    owner_token owner_;
    duration ttl_;
};

// What a policy keeps between the attempts of one lock() call (Inner::claim_memo),
// handed to its try_acquire(s, r, observe, memo); nothing for most policies. A store
// that cannot take over a lock by time alone (DynamoDB's record versions) remembers
// what it saw there, and when.
template <class Inner>
struct claim_memo_of {
    struct type {};
};
template <class Inner>
    requires requires { typename Inner::claim_memo; }
struct claim_memo_of<Inner> {
    using type = typename Inner::claim_memo;
};

/// One lock() call's claim on one store through TTL primitives.
template <class Inner, class S>
class ttl_claim {
    using memo_type = typename claim_memo_of<Inner>::type;

public:
    // A policy whose store queues waiters (acquire::fair) needs no local line.
    static constexpr bool fair = requires { requires Inner::queues_waiters; };

    ttl_claim(Inner policy, store_ref<S> store, claim_request r)
        : policy_{std::move(policy)}, store_{std::move(store)}, resource_{std::move(r.resource)},
          ttl_{r.options.ttl}, observe_{r.observe}, diag_{r.diag}, owner_{owner_token::generate()}, waits_{r.waits}
    {}

    // The policy's try_acquire() answers "held" as data (with or without a memo).
    static constexpr bool answers_as_data =
        requires(const Inner& p, S& s, const lock_request& r, observer_ref o, typename claim_memo_of<Inner>::type& m) {
            p.try_acquire(s, r, o, m);
        } || requires(const Inner& p, S& s, const lock_request& r, observer_ref o) { p.try_acquire(s, r, o); };

    // Every attempt has its own owner token. A release that cleans up after a failed
    // attempt may reach the store late (a reordering network, a reconnect); with a
    // shared token it would remove the grant of a later attempt of the same call.
    awaitable<result<answer>> attempt()
    {
        // A release that handed the lock to this call's place in the store's queue
        // said so in the wake-up: nothing to ask.
        if constexpr (requires { policy_.handed_over(*watcher_, memo_); }) {
            if (watcher_)
                if (auto handed = policy_.handed_over(*watcher_, memo_)) {
                    owner_ = handed->holder();
                    in_flight_ = true;
                    co_return *handed;
                }
        }
        // A waiting call whose store already listens for this resource (it did for
        // an earlier call) listens before its first try: that try can then take a
        // place in line at once, and no second try is needed after subscribing.
        if constexpr (requires(S& s) { policy_.listens_early(s, resource_, memo_); }) {
            if (attempts_ == 0 && waits_ && !watcher_ &&
                store_.with([&](S& s) { return policy_.listens_early(s, resource_, memo_); }).value_or(false))
                (void)co_await listen();
        }
        if (attempts_++ > 0)
            owner_ = owner_token::generate();
        // Unsettled until the answer is known: if the attempt is cut off, abandon()
        // gives back whatever it may have taken.
        in_flight_ = true;
        const lock_request r{resource_, owner_, ttl_, diag_};
        std::error_code ec;
        if constexpr (answers_as_data) {
            // The store answers with data (held, until when); a policy with a memo
            // also keeps what it learnt there for the next attempt of this call.
            auto got = co_await store_.call([&](S& s) {
                if constexpr (requires { policy_.try_acquire(s, r, observe_, memo_); })
                    return policy_.try_acquire(s, r, observe_, memo_);
                else
                    return policy_.try_acquire(s, r, observe_);
            });
            if (got) {
                if (!got.value().is_granted())
                    in_flight_ = false;
                else if (got.value().counted_from()) // handed over: held as the queue's place
                    owner_ = got.value().holder();
                co_return got;
            }
            ec = got.error();
        } else {
            auto got = co_await store_.call([&](S& s) { return policy_.acquire(s, r, observe_); });
            if (got)
                co_return answer::granted(got.value());
            ec = got.error();
        }
        in_flight_ = false;
        if (!maybe_applied(ec)) {
            if (ec == condition::contended)
                co_return answer::held();
            co_return ec;
        }
        // It may have been applied: give it back now, unless the call was cut off
        // (then abandon() does it as background work).
        maybe_granted_.push_back(owner_);
        const auto cs = co_await asio::this_coro::cancellation_state;
        if (cs.cancelled() == asio::cancellation_type::none)
            co_await settle();
        co_return ec;
    }

    awaitable<bool> listen()
    {
        if constexpr (release_notifying_store<S>) {
            if (watcher_)
                co_return false;
            auto start = store_.with([&](S& s) {
                if constexpr (requires { policy_.watch(s, resource_, memo_); })
                    return policy_.watch(s, resource_, memo_); // only what concerns this waiter
                else
                    return s.watch(resource_);
            });
            if (!start)
                co_return false;
            watcher_.emplace(co_await std::move(*start));
            co_return true;
        } else {
            co_return false;
        }
    }

    awaitable<bool> wait(time_point until)
    {
        // A waiter that must ask again to keep its place in the store's queue wakes
        // in time to.
        if constexpr (requires(S& s) { policy_.ask_again_within(s); }) {
            if (const auto within = store_.with([&](S& s) { return policy_.ask_again_within(s); }))
                until = std::min(until, clock::now() + *within);
        } else if constexpr (requires(S& s) { policy_.ask_again_within(s, memo_); }) {
            // Only while this call keeps something in the store that runs out (a
            // writer's intent).
            const auto within = store_.with([&](S& s) { return policy_.ask_again_within(s, memo_); });
            if (within && *within)
                until = std::min(until, clock::now() + **within);
        }
        if constexpr (release_notifying_store<S>) {
            if (watcher_)
                co_return co_await watcher_->wait(until);
        }
        co_await backend::sleep_until(until);
        co_return false;
    }

    /// Gives back what this call may still hold, as work that owns its arguments.
    awaitable<void> abandon()
    {
        auto owners = maybe_granted_;
        if (in_flight_)
            owners.push_back(owner_);
        return give_back(policy_, store_, resource_, std::move(owners), memo_);
    }

    ttl_hold<Inner, S> hold()
    {
        in_flight_ = false;
        if constexpr (requires { memo_.settle(); })
            memo_.settle(); // the grant took this waiter out of the store's queue
        return ttl_hold<Inner, S>{policy_, store_, resource_, owner_, ttl_};
    }

    bool unsettled() const noexcept
    {
        if constexpr (requires { memo_.unsettled(); })
            if (memo_.unsettled())
                return true;
        return in_flight_ || !maybe_granted_.empty();
    }

private:
    awaitable<void> settle()
    {
        auto pending = maybe_granted_;
        for (const auto& owner : pending) {
            auto rel = co_await backend::release_by_owner(policy_, store_, {resource_, owner, ttl_});
            if (rel || rel.error() == condition::not_owner)
                std::erase(maybe_granted_, owner);
        }
    }

    static awaitable<void> give_back(Inner policy, store_ref<S> store, std::string resource,
                                     std::vector<owner_token> owners, memo_type memo)
    {
        for (const auto& owner : owners) {
            const lock_request r{resource, owner, {}};
            (void)co_await backend::release_by_owner(policy, store, r);
        }
        // A place in the store's queue, if this call took one, is given up too.
        if constexpr (requires { policy.leave(store, resource, memo); })
            co_await policy.leave(store, resource, memo);
    }

    Inner policy_;
    store_ref<S> store_;
    std::string resource_;
    duration ttl_;
    observer_ref observe_;
    diagnostics* diag_;
    owner_token owner_;
    bool waits_ = true;
    std::size_t attempts_ = 0;
    // The current attempt's owner may hold the lock: sent, answer not yet known (or a
    // grant not yet turned into a hold). Kept apart from maybe_granted_ so that an
    // uncontended lock() allocates nothing for it.
    bool in_flight_ = false;
    // Earlier attempts' owners whose answer was lost (maybe applied), not yet given back.
    std::vector<owner_token> maybe_granted_;
    std::optional<typename watcher_of<S>::type> watcher_;
    [[no_unique_address]] memo_type memo_{};
};

} // namespace detail

/// The claim a TTL policy opens for each lock() call (policies written outside the
/// library open it too).
using detail::ttl_claim;

} // namespace distlock
