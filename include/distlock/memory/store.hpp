// distlock/memory/store.hpp: the in-process store. Thread-safe; models every store
// concept; the embedded default for demos and tests, with fault injection so that
// users can test their own failure handling.
#pragma once

#include <distlock/backend.hpp>
#include <distlock/backend/wakeup.hpp>

#include <asio/any_io_executor.hpp>
#include <asio/awaitable.hpp>
#include <asio/execution_context.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/this_coro.hpp>
#include <asio/use_awaitable.hpp>

#include <algorithm>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

namespace distlock::memory {

/// A fault the next operations of a memory store suffer.
enum class fault {
    unavailable = 1, ///< Not applied; fails with errc::store_unavailable.
    reply_lost,      ///< Applied, but the reply is lost; fails with errc::outcome_unknown.
    garbage,         ///< Not applied; the "reply" cannot be parsed: errc::protocol_error.
};

/// What the store holds for one resource.
struct lock_state {
    owner_token owner;
    fence_token fence = 0;
    duration remaining{};  ///< Time to live left.
};

namespace detail {

struct string_hash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const noexcept
    {
        return std::hash<std::string_view>{}(s);
    }
};

} // namespace detail

/// The in-process store.
///
/// \par Object lifetimes
/// Operations own the store's state once started, so the store may be destroyed
/// while one is in flight: it completes normally. Leases, lock() calls and watchers
/// reach the store through its lifetime (backend/lifetime.hpp): after the store is
/// destroyed they find it closed, report errc::store_unavailable, and held leases are
/// reported lost. close() first finishes the releases still pending.
///
/// \par Thread safety
/// Safe to use from several threads.
// Used as memory::store (backend::store_shell).
template <class Unused = void>
class basic_store : public backend::store_base<backend::no_settings> {
    struct core;
    using base = backend::store_base<backend::no_settings>;

public:
    explicit basic_store(executor_type ex, backend::no_settings = {});

    /// The longest an operation takes before the store completes it (the injected
    /// reply delay): attempts that surely end before a deadline need no timer.
    duration operation_timeout() const
    {
        std::lock_guard lock{core_->mutex};
        return core_->reply_delay;
    }

    // -- Store primitives (see distlock/store.hpp) ---------------------------------

    awaitable<result<fence_token>> put_if_absent(std::string_view resource, const owner_token& owner,
                                                 duration ttl)
    {
        return perform<fence_token>(core_, [c = core_.get(), resource, owner, ttl]() -> result<fence_token> {
            auto& s = c->slot_for(resource);
            if (live(s))
                return errc::contended;
            if (tombstone(s))
                return errc::lock_delayed;
            grant(s, owner, ttl);
            return s.fence;
        });
    }

    /// put_if_absent() that tells until when the holder's lock runs out when held.
    awaitable<result<answer>> put_if_absent_answer(std::string_view resource, const owner_token& owner,
                                                   duration ttl)
    {
        return perform<answer>(core_, [c = core_.get(), resource, owner, ttl]() -> result<answer> {
            auto& s = c->slot_for(resource);
            if (live(s))
                return answer::held(s.expires);
            if (const auto until = tombstone(s))
                return answer::delayed(*until);
            grant(s, owner, ttl);
            return answer::granted(s.fence);
        });
    }

    awaitable<result<fence_token>> conditional_write(std::string_view resource,
                                                     const owner_token& owner, duration ttl,
                                                     std::optional<fence_token> expected_version)
    {
        return perform<fence_token>(
            core_, [c = core_.get(), resource, owner, ttl, expected_version]() -> result<fence_token> {
                auto& s = c->slot_for(resource);
                const bool ok = expected_version ? s.fence == *expected_version : !live(s);
                if (!ok)
                    return errc::contended;
                if (tombstone(s))
                    return errc::lock_delayed;
                grant(s, owner, ttl);
                return s.fence;
            });
    }

    awaitable<result<void>> extend(std::string_view resource, const owner_token& owner, duration ttl)
    {
        return perform<void>(core_, [c = core_.get(), resource, owner, ttl]() -> result<void> {
            auto* s = c->find(resource);
            if (!s || !live(*s) || s->owner != owner)
                return errc::not_owner;
            s->expires = clock::now() + ttl;
            return success();
        });
    }

    awaitable<result<void>> release(std::string_view resource, const owner_token& owner)
    {
        return perform<void>(core_, [c = core_.get(), resource, owner]() -> result<void> {
            auto* s = c->find(resource);
            if (!s || !live(*s) || s->owner != owner)
                return errc::not_owner;
            s->held = false;
            notify(*s);
            return success();
        });
    }

    awaitable<result<fence_token>> next_fence(std::string_view resource)
    {
        return perform<fence_token>(core_, [c = core_.get(), resource]() -> result<fence_token> {
            return ++c->slot_for(resource).fence;
        });
    }

    awaitable<result<fence_token>> raise_fence(std::string_view resource, fence_token floor)
    {
        return perform<fence_token>(core_, [c = core_.get(), resource, floor]() -> result<fence_token> {
            auto& s = c->slot_for(resource);
            s.fence = std::max(s.fence, floor);
            return s.fence;
        });
    }

    /// Reads the lock on `resource` without taking it (inspectable_store).
    awaitable<result<lock_info>> read(std::string_view resource)
    {
        return perform<lock_info>(core_, [c = core_.get(), resource]() -> result<lock_info> {
            lock_info info;
            if (auto* s = c->find(resource)) {
                info.fence = s->fence;
                info.version = s->fence;
                if (live(*s)) {
                    info.held = true;
                    info.owner = s->owner.to_hex().substr(0, 8);
                    info.remaining = s->expires - clock::now();
                }
            }
            return info;
        });
    }

    /// The locks held now whose resource id begins with `prefix`, sorted by id
    /// (enumerable_store).
    awaitable<result<std::vector<lock_listing>>> list(std::string_view prefix)
    {
        return perform<std::vector<lock_listing>>(
            core_, [c = core_.get(), prefix]() -> result<std::vector<lock_listing>> {
                std::vector<lock_listing> out;
                for (const auto& [name, s] : c->slots) {
                    if (!live(s) || !std::string_view{name}.starts_with(prefix))
                        continue;
                    lock_listing l{.resource = name, .lock = {}, .waiters = std::nullopt};
                    l.lock.held = true;
                    l.lock.owner = s.owner.to_hex().substr(0, 8);
                    l.lock.fence = s.fence;
                    l.lock.version = s.fence;
                    l.lock.remaining = s.expires - clock::now();
                    out.push_back(std::move(l));
                }
                std::sort(out.begin(), out.end(),
                          [](const lock_listing& a, const lock_listing& b) { return a.resource < b.resource; });
                return out;
            });
    }

    /// Frees the lock on `resource` if it is still the grant with `fence`; else
    /// errc::not_owner (revocable_store). Waiters are woken as by a release.
    awaitable<result<void>> revoke(std::string_view resource, fence_token fence)
    {
        return perform<void>(core_, [c = core_.get(), resource, fence]() -> result<void> {
            auto* s = c->find(resource);
            if (!s || !live(*s) || s->fence != fence)
                return errc::not_owner;
            // Ended as by an expiry: a holder that does not know yet may still have
            // writes in flight, which a lock-delay it was marked for lets drain.
            s->expires = clock::now();
            notify(*s);
            return success();
        });
    }

    // -- lock_delay_store: a tombstone after an unplanned loss ----------------------

    /// Marks `owner`'s grant of fence `fence` on `resource` for a lock-delay of `delay`.
    awaitable<result<void>> arm_delay(std::string_view resource, const owner_token& owner, fence_token fence,
                                      duration delay)
    {
        return perform<void>(core_, [c = core_.get(), resource, owner, fence, delay]() -> result<void> {
            auto* s = c->find(resource);
            if (!s || !live(*s) || s->owner != owner || s->fence != fence)
                return errc::not_owner;
            s->delay = delay;
            return success();
        });
    }

    // -- electing_store: an election's value beside its lock ------------------------

    /// Stores `value` with `owner`'s grant of fence `epoch` on `resource`, if it still
    /// holds it; else errc::not_owner.
    awaitable<result<void>> proclaim(std::string_view resource, const owner_token& owner, fence_token epoch,
                                     std::string_view value)
    {
        return perform<void>(core_, [c = core_.get(), resource, owner, epoch, value]() -> result<void> {
            auto* s = c->find(resource);
            if (!s || !live(*s) || s->owner != owner || s->fence != epoch)
                return errc::not_owner;
            s->value.assign(value);
            s->value_epoch = epoch;
            return success();
        });
    }

    /// The holder of `resource` and the value proclaimed for its grant.
    awaitable<result<leader_info>> leader(std::string_view resource)
    {
        return perform<leader_info>(core_, [c = core_.get(), resource]() -> result<leader_info> {
            leader_info info;
            auto* s = c->find(resource);
            if (!s || !live(*s))
                return info;
            info.epoch = s->fence;
            info.owner = s->owner.to_hex().substr(0, 8);
            info.remaining = s->expires - clock::now();
            if (s->value_epoch == s->fence)
                info.value = s->value;
            return info;
        });
    }

    // -- shared_lease_store: a shared mutex's readers and writers, a semaphore's permits --

    /// A shared grant: a reader (`permits` 0) unless a writer holds or waits; a permit
    /// of `permits` while fewer hold, as the lowest free number.
    awaitable<result<answer>> put_shared(std::string_view resource, const owner_token& owner, duration ttl,
                                         std::uint32_t permits)
    {
        return perform<answer>(core_, [c = core_.get(), resource, owner, ttl, permits]() -> result<answer> {
            auto& s = c->slot_for(resource);
            const bool shared = s.shared_now();
            if (shared && s.permits != permits)
                return errc::invalid_argument; // two clients disagree on the count
            if (live(s))
                return answer::held(s.expires);
            if (const auto until = tombstone(s))
                return answer::delayed(*until);
            if (permits == 0) {
                if (s.writer_waits(owner_token{}))
                    return answer::held();
                s.sharers.push_back({owner, clock::now() + ttl, 0});
                s.permits = 0;
                return answer::granted(++s.fence);
            }
            if (s.sharers.size() >= permits) {
                auto first_out = s.sharers.front().expires;
                for (const auto& h : s.sharers)
                    first_out = std::min(first_out, h.expires);
                return answer::held(first_out);
            }
            std::uint32_t number = 0;
            while (std::any_of(s.sharers.begin(), s.sharers.end(), [&](const sharer& h) { return h.number == number; }))
                ++number;
            s.sharers.push_back({owner, clock::now() + ttl, number});
            s.permits = permits;
            return answer::granted(++s.fence, number);
        });
    }

    /// An exclusive grant when nobody holds and no other writer waits; else `waiter`
    /// takes (or renews) the writer's intent that keeps new readers out.
    awaitable<result<answer>> put_exclusive(std::string_view resource, const owner_token& waiter,
                                            const owner_token& owner, duration ttl)
    {
        return perform<answer>(core_, [c = core_.get(), resource, waiter, owner, ttl]() -> result<answer> {
            auto& s = c->slot_for(resource);
            const bool shared = s.shared_now();
            if (shared && s.permits != 0)
                return errc::invalid_argument; // a semaphore has no writers
            const bool other_waits = s.writer_waits(waiter);
            if (!live(s) && !shared)
                if (const auto until = tombstone(s))
                    return answer::delayed(*until);
            if (!other_waits && !live(s) && !shared) {
                if (s.intent == waiter)
                    s.intent = owner_token{};
                grant(s, owner, ttl);
                return answer::granted(s.fence);
            }
            if (!other_waits) {
                s.intent = waiter;
                s.intent_expires = clock::now() + ttl;
            }
            return live(s) ? answer::held(s.expires) : answer::held();
        });
    }

    awaitable<result<void>> extend_shared(std::string_view resource, const owner_token& owner, duration ttl)
    {
        return perform<void>(core_, [c = core_.get(), resource, owner, ttl]() -> result<void> {
            auto* s = c->find(resource);
            if (!s)
                return errc::not_owner;
            if (live(*s) && s->owner == owner) {
                s->expires = clock::now() + ttl;
                return success();
            }
            s->shared_now();
            for (auto& h : s->sharers)
                if (h.owner == owner) {
                    h.expires = clock::now() + ttl;
                    return success();
                }
            return errc::not_owner;
        });
    }

    awaitable<result<void>> release_shared(std::string_view resource, const owner_token& owner)
    {
        return perform<void>(core_, [c = core_.get(), resource, owner]() -> result<void> {
            auto* s = c->find(resource);
            if (!s)
                return errc::not_owner;
            if (live(*s) && s->owner == owner) {
                s->held = false;
                notify(*s);
                return success();
            }
            s->shared_now();
            const auto gone = std::erase_if(s->sharers, [&](const sharer& h) { return h.owner == owner; });
            if (gone == 0)
                return errc::not_owner;
            notify(*s);
            return success();
        });
    }

    /// Gives up `waiter`'s intent: the readers it kept out may come in.
    awaitable<result<void>> withdraw(std::string_view resource, const owner_token& waiter)
    {
        return perform<void>(core_, [c = core_.get(), resource, waiter]() -> result<void> {
            auto* s = c->find(resource);
            if (s && s->intent == waiter) {
                s->intent = owner_token{};
                notify(*s);
            }
            return success();
        });
    }

    /// The writer `owner` holds on as a reader, in the same step.
    awaitable<result<void>> downgrade(std::string_view resource, const owner_token& owner)
    {
        return perform<void>(core_, [c = core_.get(), resource, owner]() -> result<void> {
            auto* s = c->find(resource);
            if (!s || !live(*s) || s->owner != owner)
                return errc::not_owner;
            s->held = false;
            s->sharers.push_back({owner, s->expires, 0});
            s->permits = 0;
            notify(*s); // readers may come in beside it
            return success();
        });
    }

    /// A registration for release notifications of one resource. It shares the
    /// store's state, so it may outlive the store (then it only times out).
    class watcher {
    public:
        watcher(watcher&& other) noexcept = default;
        watcher& operator=(watcher&&) = delete;
        ~watcher()
        {
            if (core_)
                core_->unwatch(resource_, wakeup_);
        }

        /// True when a release was seen, false when `until` came first or on cancellation.
        awaitable<bool> wait(time_point until) { return wakeup_->wait(until); }

    private:
        friend class basic_store;
        watcher(std::shared_ptr<core> c, std::string resource, std::shared_ptr<distlock::backend::wakeup> w)
            : core_{std::move(c)}, resource_{std::move(resource)}, wakeup_{std::move(w)}
        {}
        std::shared_ptr<core> core_;
        std::string resource_;
        std::shared_ptr<distlock::backend::wakeup> wakeup_;
    };

    /// Listens for releases of `resource` from now until the watcher is destroyed.
    awaitable<watcher> watch(std::string_view resource) { return ready(watch_now(resource)); }

    watcher watch_now(std::string_view resource)
    {
        auto w = std::make_shared<distlock::backend::wakeup>(ex_);
        std::lock_guard lock{core_->mutex};
        core_->slot_for(resource).watchers.push_back(w);
        return watcher{core_, std::string{resource}, std::move(w)};
    }

    // -- Fault injection -----------------------------------------------------------

    /// The next `count` operations suffer `f`.
    void fail_next(fault f, std::size_t count = 1)
    {
        std::lock_guard lock{core_->mutex};
        core_->faults.insert(core_->faults.end(), count, f);
    }

    /// Every reply is delayed by `d` after the operation was applied (a slow network).
    /// A caller that stops waiting sees errc::outcome_unknown: the operation happened.
    void set_reply_delay(duration d)
    {
        std::lock_guard lock{core_->mutex};
        core_->reply_delay = d;
    }

    /// While offline, every operation fails with errc::store_unavailable; state is kept.
    void set_online(bool online)
    {
        std::lock_guard lock{core_->mutex};
        core_->online = online;
    }

    /// Drops the lock on `resource` as if its TTL had run out now (its fencing counter
    /// stays): the holder does not know yet.
    void expire(std::string_view resource)
    {
        std::lock_guard lock{core_->mutex};
        if (auto* s = core_->find(resource); s && (s->held || !s->sharers.empty())) {
            // An exclusive grant runs out in place, so that a lock-delay it was marked
            // for begins now, as after a real expiry.
            if (s->held && clock::now() < s->expires)
                s->expires = clock::now();
            s->sharers.clear();
            notify(*s);
        }
    }

    /// Forgets every lock and fencing counter, as a store restarted without persistence.
    void lose_state()
    {
        std::lock_guard lock{core_->mutex};
        for (auto& [name, s] : core_->slots) {
            s.held = false;
            s.fence = 0;
            s.sharers.clear();
            s.intent = owner_token{};
            s.value_epoch = 0;
            s.delay = duration::zero();
            notify(s);
        }
    }

    // -- Inspection, for tests -----------------------------------------------------

    /// The live lock on `resource`, if any.
    std::optional<lock_state> inspect(std::string_view resource) const
    {
        std::lock_guard lock{core_->mutex};
        const auto it = core_->slots.find(resource);
        if (it == core_->slots.end() || !live(it->second))
            return std::nullopt;
        return lock_state{it->second.owner, it->second.fence, it->second.expires - clock::now()};
    }

    /// The owners of the live shared grants on `resource` (readers, permits).
    std::vector<owner_token> shared_holders(std::string_view resource) const
    {
        std::lock_guard lock{core_->mutex};
        std::vector<owner_token> out;
        const auto it = core_->slots.find(resource);
        if (it == core_->slots.end())
            return out;
        const auto now = clock::now();
        for (const auto& h : it->second.sharers)
            if (now < h.expires)
                out.push_back(h.owner);
        return out;
    }

    /// The fencing counter of `resource` (0 if never locked).
    fence_token current_fence(std::string_view resource) const
    {
        std::lock_guard lock{core_->mutex};
        const auto it = core_->slots.find(resource);
        return it == core_->slots.end() ? 0 : it->second.fence;
    }

    /// How many locks are live now.
    std::size_t live_locks() const
    {
        std::lock_guard lock{core_->mutex};
        return static_cast<std::size_t>(std::count_if(
            core_->slots.begin(), core_->slots.end(), [](const auto& kv) { return live(kv.second); }));
    }

    /// How many watchers are registered (they must not accumulate).
    std::size_t watchers() const
    {
        std::lock_guard lock{core_->mutex};
        std::size_t n = 0;
        for (const auto& [name, s] : core_->slots)
            n += s.watchers.size();
        return n;
    }

private:
    // A shared holder: a reader of a shared mutex, or a semaphore's permit.
    struct sharer {
        owner_token owner;
        time_point expires{};
        std::uint32_t number = 0; // a permit's slot
    };

    struct slot {
        owner_token owner;
        time_point expires{};
        fence_token fence = 0;  // survives release: tokens must keep growing
        bool held = false;      // held exclusively (a mutex, or a shared mutex's writer)
        std::vector<sharer> sharers;
        std::uint32_t permits = 0;  // a semaphore's count, kept while sharers hold
        owner_token intent;         // a waiting writer's, until intent_expires
        time_point intent_expires{};
        duration delay{};           // the grant's lock-delay, once armed (a tombstone after an expiry)
        std::string value;          // an election's value, proclaimed by the grant of fence value_epoch
        fence_token value_epoch = 0;
        std::vector<std::shared_ptr<distlock::backend::wakeup>> watchers;

        // Drops the sharers whose TTL ran out; true when any holds.
        bool shared_now()
        {
            const auto now = clock::now();
            std::erase_if(sharers, [&](const sharer& h) { return now >= h.expires; });
            return !sharers.empty();
        }
        bool writer_waits(const owner_token& except) const
        {
            return !intent.is_nil() && intent != except && clock::now() < intent_expires;
        }
    };

    // Everything an operation touches, shared by the store, its operations in flight
    // and its watchers.
    struct core {
        mutable std::mutex mutex;
        std::unordered_map<std::string, slot, detail::string_hash, std::equal_to<>> slots;
        std::deque<fault> faults;
        duration reply_delay{};
        bool online = true;

        slot* find(std::string_view resource)
        {
            const auto it = slots.find(resource);
            return it == slots.end() ? nullptr : &it->second;
        }

        // Slots stay after release so fencing tokens keep growing: one small entry per
        // resource ever locked.
        slot& slot_for(std::string_view resource)
        {
            if (auto* s = find(resource))
                return *s;
            return slots.emplace(std::string{resource}, slot{}).first->second;
        }

        void unwatch(const std::string& resource, const std::shared_ptr<distlock::backend::wakeup>& w)
        {
            std::lock_guard lock{mutex};
            if (auto* s = find(resource))
                std::erase(s->watchers, w);
        }

        // A closed store wakes its watchers: their lock() calls then find it closed.
        void wake_all()
        {
            std::lock_guard lock{mutex};
            for (auto& [name, s] : slots)
                notify(s);
        }
    };

    struct gate {
        std::error_code refusal;
        duration delay{};
        bool reply_lost = false;
    };

    static bool live(const slot& s) noexcept { return s.held && clock::now() < s.expires; }

    // A marked grant that ran out without a release leaves the resource refusing
    // grants until its expiry plus the delay: the tombstone is the expired grant
    // itself, so it lies exactly a delay after the expiry and goes by itself.
    static std::optional<time_point> tombstone(const slot& s) noexcept
    {
        if (!s.held || s.delay <= duration::zero())
            return std::nullopt;
        const auto until = s.expires + s.delay;
        return clock::now() < until ? std::optional{until} : std::nullopt;
    }

    static void grant(slot& s, const owner_token& owner, duration ttl)
    {
        s.owner = owner;
        s.expires = clock::now() + ttl;
        s.held = true;
        s.delay = duration::zero();
        ++s.fence;
    }

    static void notify(slot& s)
    {
        // Signalling never runs the waiter inline, so it is safe under the mutex.
        for (auto& w : s.watchers)
            w->signal();
    }

    template <class T>
    static awaitable<T> ready(T value)
    {
        co_return value;
    }

    // Runs one operation: consults the injected faults, applies `apply` under the
    // mutex, then delivers the reply (late, or not at all, if so injected). It holds
    // the store's state, never the store.
    template <class T, class Apply>
    static awaitable<result<T>> perform(std::shared_ptr<core> c, Apply apply)
    {
        gate g;
        result<T> r = errc::outcome_unknown;
        {
            std::lock_guard lock{c->mutex};
            g.delay = c->reply_delay;
            if (!c->online) {
                g.refusal = errc::store_unavailable;
            } else if (!c->faults.empty()) {
                const auto f = c->faults.front();
                c->faults.pop_front();
                if (f == fault::unavailable)
                    g.refusal = errc::store_unavailable;
                else if (f == fault::garbage)
                    g.refusal = errc::protocol_error;
                else
                    g.reply_lost = true;
            }
            if (!g.refusal)
                r = apply();
        }
        if (g.refusal)
            co_return g.refusal;
        if (g.delay > duration::zero()) {
            timer t{co_await asio::this_coro::executor, g.delay};
            auto [ec] = co_await t.async_wait(distlock::backend::as_tuple_awaitable<Unused>());
            if (ec)
                co_return errc::outcome_unknown;
        }
        if (g.reply_lost)
            co_return errc::outcome_unknown;
        co_return r;
    }

protected:
    ~basic_store() = default;
    // Closing wakes the waiters (they find the store closed); nothing else runs.
    void stop() noexcept;

private:
    std::shared_ptr<core> core_;
};

template <class Unused>
basic_store<Unused>::basic_store(executor_type ex, backend::no_settings)
    : base{std::move(ex), {}, "distlock::memory::store"}, core_{std::make_shared<core>()}
{}

template <class Unused>
void basic_store<Unused>::stop() noexcept
{
    core_->wake_all();
}

/// The in-process store: see basic_store.
using store = backend::store_shell<basic_store<>>;

static_assert(put_if_absent_store<store>);
static_assert(owner_checked_store<store>);
static_assert(conditional_write_store<store>);
static_assert(fencing_counter_store<store>);
static_assert(release_notifying_store<store>);
static_assert(inspectable_store<store>);
static_assert(answering_put_store<store>);
static_assert(enumerable_store<store>);
static_assert(shared_lease_store<store>);
static_assert(revocable_store<store>);

} // namespace distlock::memory
