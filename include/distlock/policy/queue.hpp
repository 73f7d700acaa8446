// distlock/policy/queue.hpp: the claim of a session store with a fair queue (etcd,
// ZooKeeper, the memory session store).
//
// One entry per lock() call, created on the first attempt and kept across attempts
// (a new entry per attempt would queue again at the back). The entry's creation
// sequence is its place and its fencing token. The oldest entry holds the lock; a
// waiter watches only its predecessor (no herd when the holder goes). The lease is
// bound to the store session, which reports loss; releasing deletes the entry. A
// lock() that gives up or is cancelled leaves the queue as background work owned by
// the store.
#pragma once

#include <distlock/claim.hpp>
#include <distlock/diagnostics.hpp>
#include <distlock/backend/lifetime.hpp>
#include <distlock/policy/acquire.hpp>
#include <distlock/store.hpp>

#include <algorithm>
#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace distlock {
namespace detail {

/// Deletes `owner`'s entry of `resource` until it is gone. An entry left behind in a
/// live session would stay in the queue for as long as the session lives: holding the
/// lock, or waiting to, ahead of everyone behind it. A connection error is tried again
/// at growing intervals (up to half a second) while the store is open, for as long as
/// the session could live unheard from (the store's session_ttl(), a minute for a
/// store that does not say): by then the deletion went through, or the session
/// expired and took the entry. Closing the store ends the session, and the entry.
template <class S>
awaitable<void> dequeue_until_gone(store_ref<S> store, std::string resource, owner_token owner)
{
    using namespace std::chrono_literals;
    duration outlives = 60s;
    if constexpr (requires(const S& s) { { s.session_ttl() } -> std::convertible_to<duration>; })
        outlives = store.with([](S& s) { return duration{s.session_ttl()}; }).value_or(outlives);
    const auto give_up = saturating_add(clock::now(), outlives);
    duration pause = 20ms;
    for (;;) {
        auto r = co_await store.call([&](S& s) { return s.dequeue(resource, owner); });
        if (r || !backend::connection_error(r.error()) || !store.open() || clock::now() >= give_up)
            co_return;
        co_await backend::sleep_until(clock::now() + pause);
        pause = std::min<duration>(pause * 2, 500ms);
    }
}

/// A lease kept by the store session: its entry in the queue of its resource.
template <class S>
class session_entry_hold {
public:
    session_entry_hold(store_ref<S> store, std::string resource, owner_token owner, fence_token entry)
        : store_{std::move(store)}, resource_{std::move(resource)}, owner_{owner}, entry_{entry}
    {}

    /// The session keeps the lease; there is nothing to extend per lease.
    awaitable<result<void>> extend() { return kept(); }
    awaitable<result<void>> release() { return release_entry(store_, resource_, owner_); }
    const owner_token& owner() const noexcept { return owner_; }
    void spawn(awaitable<void> work) const { store_.spawn(std::move(work)); }
    bool listen(std::weak_ptr<backend::closing_listener> l) const { return store_.listen(std::move(l)); }

    std::optional<time_point> bind(std::weak_ptr<session_listener> l)
    {
        auto bound = store_.with([&](S& s) { return s.bind(resource_, entry_, l); });
        return bound ? *bound : std::nullopt;
    }

private:
    static awaitable<result<void>> kept() { co_return success(); }

    // Deleting an entry is idempotent by owner: a connection error is tried once more,
    // then (the release reports its failure) again in the background until the entry
    // is gone.
    static awaitable<result<void>> release_entry(store_ref<S> store, std::string resource, owner_token owner)
    {
        auto first = co_await store.call([&](S& s) { return s.dequeue(resource, owner); });
        if (first || !backend::connection_error(first.error()))
            co_return first;
        auto second = co_await store.call([&](S& s) { return s.dequeue(resource, owner); });
        if (!second && second.error() == condition::not_owner)
            co_return success();
        if (!second && backend::connection_error(second.error()))
            store.spawn(dequeue_until_gone(store, std::move(resource), owner));
        co_return second;
    }

    store_ref<S> store_;
    std::string resource_;
    owner_token owner_;
    fence_token entry_;
};

/// One lock() call's place in a session store's queue.
template <class S>
class session_queue_claim {
public:
    /// The store serves waiters in creation order: no local line is needed.
    static constexpr bool fair = true;

    session_queue_claim(store_ref<S> store, claim_request r)
        : store_{std::move(store)}, resource_{std::move(r.resource)}, diag_{r.diag}, owner_{owner_token::generate()},
          candidate_{std::move(r.candidate)}
    {}

    awaitable<result<answer>> attempt()
    {
        // From the first try on, an entry may exist (a lost reply included): abandon()
        // deletes it unless the lease takes it over.
        queued_ = true;
        place_ = {}; // a failed attempt leaves no predecessor to wait for
        auto got = co_await store_.call([&](S& s) { return entered(s); });
        if (!got)
            co_return got.error();
        place_ = got.value();
        if (place_.delayed_until)
            co_return answer::delayed(*place_.delayed_until);
        if (place_.first)
            co_return answer::granted(place_.entry);
        co_return answer::held();
    }

    awaitable<bool> listen() { co_return false; }

    /// True when wait() watches the entry before this one: it returns as soon as this
    /// call's turn may have come, so a longer wait costs nothing.
    bool waits_for_turn() const noexcept { return place_.predecessor.has_value(); }

    /// Watches the predecessor only.
    awaitable<bool> wait(time_point until)
    {
        if (place_.predecessor) {
            auto watch = store_.with([&](S& s) { return s.wait_gone(resource_, *place_.predecessor, until); });
            if (watch)
                co_return co_await std::move(*watch);
        }
        co_await backend::sleep_until(until);
        co_return false;
    }

    bool unsettled() const noexcept { return queued_; }

    awaitable<void> abandon() { return leave(store_, resource_, owner_); }

    session_entry_hold<S> hold()
    {
        queued_ = false;
        return {store_, resource_, owner_, place_.entry};
    }

private:
    // The entry, made with the campaign's value where the store writes one with it
    // (enqueue_candidate: the value is in the entry from its create).
    awaitable<result<queue_place>> entered(S& s)
    {
        if constexpr (candidate_queue_store<S>) {
            if (candidate_)
                return DISTLOCK_DETAIL_DIAGNOSED(diag_, s.enqueue_candidate, resource_, owner_,
                                                 std::string_view{*candidate_});
        }
        return DISTLOCK_DETAIL_DIAGNOSED(diag_, s.enqueue, resource_, owner_);
    }

    static awaitable<void> leave(store_ref<S> store, std::string resource, owner_token owner)
    {
        return dequeue_until_gone(std::move(store), std::move(resource), owner);
    }

    store_ref<S> store_;
    std::string resource_;
    diagnostics* diag_;
    owner_token owner_;
    std::optional<std::string> candidate_;
    queue_place place_{};
    bool queued_ = false;
};

} // namespace detail

namespace acquire {

/// A place in a session store's fair queue; the lease is bound to the session. The
/// default acquisition of session stores.
struct session_queue {
    using policy_kind = acquire_policy_tag;

    template <class S>
        requires session_queue_store<S>
    detail::session_queue_claim<S> open(const store_ref<S>& s, claim_request r) const
    {
        return {s, std::move(r)};
    }
};

} // namespace acquire
} // namespace distlock
