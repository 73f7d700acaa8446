// distlock/memory/session_store.hpp: the in-process model of a session store (etcd
// leases, ZooKeeper sessions): sessions with a TTL kept alive by keepalives, one
// queue entry per waiter ordered by creation, the oldest entry holding the lock,
// waiters watching their predecessor, fence = creation sequence, a session's expiry
// deleting its entries, and an in-doubt state when keepalives go unanswered. With
// fault injection and the manual clock, so tests and the simulation can drive it
// exactly.
//
// Two objects, as with a real server: a session_server (what the server keeps,
// shared by several clients) and session_store (one client: its session, its
// keepalive, its faults).
#pragma once

#include <distlock/claim.hpp>
#include <distlock/backend.hpp>
#include <distlock/util/splitmix.hpp>
#include <distlock/backend/strand.hpp>
#include <distlock/backend/wakeup.hpp>
#include <distlock/memory/store.hpp>
#include <distlock/policy/queue.hpp>
#include <distlock/policy/shared.hpp>

#include <asio/any_io_executor.hpp>
#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/post.hpp>
#include <asio/strand.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/use_awaitable.hpp>

#include <algorithm>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace distlock::memory {

/// One entry of a resource's queue, as the server shows it.
struct queue_entry {
    fence_token sequence = 0;
    owner_token owner;
    std::uint64_t session = 0;
    lock_mode mode = lock_mode::exclusive;
    std::uint32_t permits = 0;          ///< a semaphore's count (shared entries)
    std::optional<std::uint32_t> slot;  ///< a permit's number, once it holds
    std::optional<std::string> value;   ///< what an election's leader proclaimed with this entry
};

/// What a session server keeps. Thread-safe. It must outlive its clients.
/// Sessions expire by distlock::clock (the manual clock in tests), checked on every
/// request and whenever a client's waiter wakes.
template <class Unused>
class basic_session_store;

class session_server {
public:
    session_server() = default;
    session_server(const session_server&) = delete;
    session_server& operator=(const session_server&) = delete;

    // -- Faults and inspection, for tests --------------------------------------------

    /// Ends a session now, as if its TTL had run out: its entries go.
    void expire(std::uint64_t session)
    {
        std::lock_guard lock{mutex_};
        drop_session(session);
    }

    /// The oldest entry of `resource` (its owner holds the lock), if any.
    std::optional<queue_entry> holder(std::string_view resource)
    {
        std::lock_guard lock{mutex_};
        reap();
        const auto it = queues_.find(std::string{resource});
        if (it == queues_.end() || it->second.empty())
            return std::nullopt;
        return it->second.begin()->second;
    }

    /// Entries queued for `resource` (the holder included).
    std::size_t entries(std::string_view resource)
    {
        std::lock_guard lock{mutex_};
        reap();
        const auto it = queues_.find(std::string{resource});
        return it == queues_.end() ? 0 : it->second.size();
    }

    /// Entries of every resource.
    std::size_t total_entries()
    {
        std::lock_guard lock{mutex_};
        reap();
        std::size_t n = 0;
        for (const auto& [name, q] : queues_)
            n += q.size();
        return n;
    }

    std::size_t live_sessions()
    {
        std::lock_guard lock{mutex_};
        reap();
        return sessions_.size();
    }

    /// Waiters watching an entry (they must not accumulate).
    std::size_t watches()
    {
        std::lock_guard lock{mutex_};
        std::size_t n = 0;
        for (const auto& [key, ws] : watches_)
            n += ws.size();
        return n;
    }

private:
    template <class>
    friend class basic_session_store;

    struct session {
        duration ttl{};
        time_point expires{};
    };

    // -- What clients ask (under the server's mutex) ------------------------------------

    std::uint64_t open_session(duration ttl)
    {
        std::lock_guard lock{mutex_};
        reap();
        const auto id = ++next_session_;
        sessions_[id] = session{ttl, clock::now() + ttl};
        return id;
    }

    /// The session's new expiry, or nullopt when it is gone.
    std::optional<time_point> keepalive(std::uint64_t id)
    {
        std::lock_guard lock{mutex_};
        reap();
        const auto it = sessions_.find(id);
        if (it == sessions_.end())
            return std::nullopt;
        it->second.expires = clock::now() + it->second.ttl;
        return it->second.expires;
    }

    void close_session(std::uint64_t id)
    {
        std::lock_guard lock{mutex_};
        drop_session(id);
    }

    result<queue_place> enqueue(std::string_view resource, const owner_token& owner, std::uint64_t id)
    {
        std::lock_guard lock{mutex_};
        reap();
        if (!sessions_.count(id))
            return errc::session_lost;
        auto& q = queues_[std::string{resource}];
        auto mine = std::find_if(q.begin(), q.end(), [&](const auto& kv) { return kv.second.owner == owner; });
        if (mine != q.end() && mine->second.session != id) {
            // The entry belongs to an earlier session of this client (one it gave up as
            // in doubt): that session expires on its own, and the entry with it, so it
            // cannot hold a lock for the current session. Queue again, at the back.
            const auto seq = mine->first;
            q.erase(mine);
            gone(std::string{resource}, seq);
            mine = q.end();
        }
        if (mine == q.end()) {
            const auto seq = ++revision_;
            mine = q.emplace(seq, queue_entry{seq, owner, id, lock_mode::exclusive, 0, std::nullopt, std::nullopt}).first;
        }
        queue_place place{mine->first, mine == q.begin(), std::nullopt};
        if (!place.first)
            place.predecessor = std::prev(mine)->first;
        else if (const auto until = tombstone(std::string{resource})) {
            place.first = false; // it holds once the delay has passed
            place.delayed_until = until;
        }
        return place;
    }

    /// enqueue() for shared grants (shared_queue_store): the entry holds by the rules
    /// of its mode, a permit with the lowest number no other holder has.
    result<shared_place> enqueue_shared(std::string_view resource, const owner_token& owner, std::uint64_t id,
                                        lock_mode mode, std::uint32_t permits)
    {
        std::lock_guard lock{mutex_};
        reap();
        if (!sessions_.count(id))
            return errc::session_lost;
        auto& q = queues_[std::string{resource}];
        // Every shared entry of a resource agrees on the count (0: a shared mutex).
        for (const auto& [seq, e] : q)
            if (e.owner != owner && (e.mode == lock_mode::shared || e.permits > 0) &&
                (mode == lock_mode::shared || permits > 0) && e.permits != permits)
                return errc::invalid_argument;
        auto mine = std::find_if(q.begin(), q.end(), [&](const auto& kv) { return kv.second.owner == owner; });
        if (mine != q.end() && mine->second.session != id) {
            // An earlier session's entry (see enqueue()): queue again, at the back.
            const auto seq = mine->first;
            q.erase(mine);
            gone(std::string{resource}, seq);
            mine = q.end();
        }
        if (mine == q.end()) {
            const auto seq = ++revision_;
            mine = q.emplace(seq, queue_entry{seq, owner, id, mode, permits, std::nullopt, std::nullopt}).first;
        }
        shared_place place{mine->first, holds(q, mine), std::nullopt};
        if (place.granted)
            if (const auto until = tombstone(std::string{resource})) {
                place.granted = false;
                place.delayed_until = until;
                return place;
            }
        if (place.granted && permits > 0) {
            if (!mine->second.slot) {
                std::uint32_t n = 0;
                while (std::any_of(q.begin(), q.end(), [&](const auto& kv) { return kv.second.slot == n; }))
                    ++n;
                mine->second.slot = n;
            }
            place.slot = mine->second.slot;
        }
        return place;
    }

    /// Registers `w` to be woken when any entry of `resource` goes (a waiter of shared
    /// grants may be let in by any of the entries before it); says when the first of
    /// their sessions expires, so the waiter looks again by then.
    void watch_resource(const std::string& resource, const std::shared_ptr<distlock::backend::wakeup>& w,
                        time_point& expires)
    {
        std::lock_guard lock{mutex_};
        reap();
        expires = time_point::max();
        if (const auto it = queues_.find(resource); it != queues_.end())
            for (const auto& [seq, e] : it->second)
                expires = std::min(expires, sessions_.at(e.session).expires);
        resource_watches_[resource].push_back(w);
    }

    void unwatch_resource(const std::string& resource, const std::shared_ptr<distlock::backend::wakeup>& w)
    {
        std::lock_guard lock{mutex_};
        const auto it = resource_watches_.find(resource);
        if (it == resource_watches_.end())
            return;
        std::erase(it->second, w);
        if (it->second.empty())
            resource_watches_.erase(it);
    }

    /// Whether entry `seq` of `resource` holds now (false when it is gone).
    bool entry_holds(const std::string& resource, fence_token seq)
    {
        std::lock_guard lock{mutex_};
        reap();
        const auto it = queues_.find(resource);
        if (it == queues_.end())
            return false;
        const auto e = it->second.find(seq);
        return e != it->second.end() && holds(it->second, e);
    }

    result<void> dequeue(std::string_view resource, const owner_token& owner)
    {
        std::lock_guard lock{mutex_};
        reap();
        const auto it = queues_.find(std::string{resource});
        if (it == queues_.end())
            return errc::not_owner;
        auto& q = it->second;
        const auto mine = std::find_if(q.begin(), q.end(), [&](const auto& kv) { return kv.second.owner == owner; });
        if (mine == q.end())
            return errc::not_owner;
        const auto seq = mine->first;
        q.erase(mine);
        gone(std::string{resource}, seq);
        if (const auto mark = delay_marks_.find(it->first); mark != delay_marks_.end() && mark->second.entry == seq)
            delay_marks_.erase(mark); // released: no lock-delay
        if (q.empty())
            queues_.erase(it);
        return success();
    }

    /// Registers `w` to be woken when the entry goes; false when it is gone already.
    /// Also says when the entry's session expires, so the waiter re-checks by then.
    bool watch(const std::string& resource, fence_token seq, const std::shared_ptr<distlock::backend::wakeup>& w,
               time_point& expires)
    {
        std::lock_guard lock{mutex_};
        reap();
        const auto it = queues_.find(resource);
        if (it == queues_.end())
            return false;
        const auto e = it->second.find(seq);
        if (e == it->second.end())
            return false;
        expires = sessions_.at(e->second.session).expires;
        watches_[{resource, seq}].push_back(w);
        return true;
    }

    void unwatch(const std::string& resource, fence_token seq, const std::shared_ptr<distlock::backend::wakeup>& w)
    {
        std::lock_guard lock{mutex_};
        const auto it = watches_.find({resource, seq});
        if (it == watches_.end())
            return;
        std::erase(it->second, w);
        if (it->second.empty())
            watches_.erase(it);
    }

    lock_info read(const std::string& resource)
    {
        std::lock_guard lock{mutex_};
        reap();
        lock_info info;
        info.fence = revision_;
        const auto it = queues_.find(resource);
        if (it == queues_.end() || it->second.empty())
            return info;
        const auto& first = it->second.begin()->second;
        info.held = true;
        info.owner = first.owner.to_hex().substr(0, 8);
        info.fence = first.sequence;
        info.version = first.sequence;
        info.remaining = sessions_.at(first.session).expires - clock::now();
        return info;
    }

    /// Marks `owner`'s holding entry `seq` for a lock-delay of `delay`.
    result<void> arm_delay(const std::string& resource, const owner_token& owner, fence_token seq, duration delay)
    {
        std::lock_guard lock{mutex_};
        reap();
        const auto it = queues_.find(resource);
        if (it == queues_.end() || it->second.empty())
            return errc::not_owner;
        const auto& first = it->second.begin()->second;
        if (first.owner != owner || first.sequence != seq || first.mode != lock_mode::exclusive)
            return errc::not_owner;
        delay_marks_[resource] = delay_mark{seq, delay};
        return success();
    }

    /// Stores an election's value with `owner`'s entry `epoch` while it holds (the
    /// queue's oldest); else errc::not_owner.
    result<void> proclaim(const std::string& resource, const owner_token& owner, fence_token epoch,
                          std::string value)
    {
        std::lock_guard lock{mutex_};
        reap();
        const auto it = queues_.find(resource);
        if (it == queues_.end() || it->second.empty())
            return errc::not_owner;
        auto& first = it->second.begin()->second;
        if (first.owner != owner || first.sequence != epoch)
            return errc::not_owner;
        first.value = std::move(value);
        return success();
    }

    /// The queue's oldest entry and the value it proclaimed.
    leader_info leader(const std::string& resource)
    {
        std::lock_guard lock{mutex_};
        reap();
        leader_info info;
        const auto it = queues_.find(resource);
        if (it == queues_.end() || it->second.empty())
            return info;
        const auto& first = it->second.begin()->second;
        info.epoch = first.sequence;
        info.owner = first.owner.to_hex().substr(0, 8);
        info.value = first.value;
        info.remaining = sessions_.at(first.session).expires - clock::now();
        return info;
    }

    /// The locks held now under `prefix`, sorted by resource id: each queue's oldest
    /// entry, and how many wait behind it.
    std::vector<lock_listing> list(std::string_view prefix)
    {
        std::lock_guard lock{mutex_};
        reap();
        std::vector<lock_listing> out;
        for (auto it = queues_.lower_bound(std::string{prefix}); it != queues_.end(); ++it) {
            if (!std::string_view{it->first}.starts_with(prefix))
                break; // the map is sorted: past the prefix, nothing more starts with it
            if (it->second.empty())
                continue;
            const auto& first = it->second.begin()->second;
            lock_listing l{.resource = it->first, .lock = {}, .waiters = it->second.size() - 1};
            l.lock.held = true;
            l.lock.owner = first.owner.to_hex().substr(0, 8);
            l.lock.fence = first.sequence;
            l.lock.version = first.sequence;
            l.lock.remaining = sessions_.at(first.session).expires - clock::now();
            out.push_back(std::move(l));
        }
        return out;
    }

    /// Deletes the holder's entry if it is entry `seq`; a waiter's entry, or one gone,
    /// is not a grant to revoke.
    result<void> revoke(std::string_view resource, fence_token seq)
    {
        std::lock_guard lock{mutex_};
        reap();
        const auto it = queues_.find(std::string{resource});
        if (it == queues_.end())
            return errc::not_owner;
        const auto e = it->second.find(seq);
        if (e == it->second.end() || !holds(it->second, e))
            return errc::not_owner;
        it->second.erase(e);
        gone(it->first, seq);
        ended_unreleased(it->first, seq, clock::now());
        if (it->second.empty())
            queues_.erase(it);
        return success();
    }

    /// Whether entry `seq` of `resource` is still queued.
    bool has_entry(const std::string& resource, fence_token seq)
    {
        std::lock_guard lock{mutex_};
        reap();
        const auto it = queues_.find(resource);
        return it != queues_.end() && it->second.count(seq) > 0;
    }

    bool session_alive(std::uint64_t id)
    {
        std::lock_guard lock{mutex_};
        reap();
        return sessions_.count(id) > 0;
    }

    // -- Under the mutex ----------------------------------------------------------------

    void reap()
    {
        const auto now = clock::now();
        std::vector<std::uint64_t> expired;
        for (const auto& [id, s] : sessions_)
            if (now >= s.expires)
                expired.push_back(id);
        for (const auto id : expired)
            drop_session(id);
    }

    void drop_session(std::uint64_t id)
    {
        // When the session ended: its expiry, or now when it is ended early.
        const auto found = sessions_.find(id);
        const auto ended = found == sessions_.end() ? clock::now() : std::min(found->second.expires, clock::now());
        sessions_.erase(id);
        for (auto it = queues_.begin(); it != queues_.end();) {
            auto& q = it->second;
            for (auto e = q.begin(); e != q.end();) {
                if (e->second.session == id) {
                    gone(it->first, e->first);
                    ended_unreleased(it->first, e->first, ended);
                    e = q.erase(e);
                } else {
                    ++e;
                }
            }
            it = q.empty() ? queues_.erase(it) : std::next(it);
        }
    }

    // A marked holder's entry went without a release (its session ended, it was
    // revoked): the resource refuses grants until `ended` plus the delay.
    void ended_unreleased(const std::string& resource, fence_token seq, time_point ended)
    {
        const auto mark = delay_marks_.find(resource);
        if (mark == delay_marks_.end() || mark->second.entry != seq)
            return;
        tombstones_[resource] = ended + mark->second.delay;
        delay_marks_.erase(mark);
    }

    // Until when `resource` is in its lock-delay, if it is; a passed one goes.
    std::optional<time_point> tombstone(const std::string& resource)
    {
        const auto it = tombstones_.find(resource);
        if (it == tombstones_.end())
            return std::nullopt;
        if (clock::now() >= it->second) {
            tombstones_.erase(it);
            return std::nullopt;
        }
        return it->second;
    }

    // Whether entry `e` of queue `q` holds, by the rules of its mode.
    static bool holds(const std::map<fence_token, queue_entry>& q, std::map<fence_token, queue_entry>::const_iterator e)
    {
        if (e->second.mode == lock_mode::exclusive)
            return e == q.begin();
        std::size_t older = 0;
        for (auto it = q.begin(); it != e; ++it, ++older)
            if (e->second.permits == 0 && it->second.mode == lock_mode::exclusive)
                return false;
        return e->second.permits == 0 || older < e->second.permits;
    }

    void gone(const std::string& resource, fence_token seq)
    {
        if (const auto all = resource_watches_.find(resource); all != resource_watches_.end()) {
            for (auto& w : all->second)
                w->signal();
            resource_watches_.erase(all);
        }
        const auto it = watches_.find({resource, seq});
        if (it == watches_.end())
            return;
        for (auto& w : it->second)
            w->signal(); // never runs the waiter inline
        watches_.erase(it);
    }

    std::mutex mutex_;
    std::uint64_t next_session_ = 0;
    fence_token revision_ = 0;
    std::unordered_map<std::uint64_t, session> sessions_;
    std::map<std::string, std::map<fence_token, queue_entry>> queues_;
    // Lock-delays: the holder entry marked per resource, and the tombstones its
    // unreleased end left (until when the resource refuses grants).
    struct delay_mark {
        fence_token entry = 0;
        duration delay{};
    };
    std::map<std::string, delay_mark> delay_marks_;
    std::map<std::string, time_point> tombstones_;
    std::map<std::pair<std::string, fence_token>, std::vector<std::shared_ptr<distlock::backend::wakeup>>> watches_;
    std::map<std::string, std::vector<std::shared_ptr<distlock::backend::wakeup>>> resource_watches_;
};

/// Settings of a session store client.
struct session_config {
    /// How long the server keeps the session without a keepalive.
    duration session_ttl = std::chrono::seconds{10};
    /// How often the keepalive is sent; zero: session_ttl / 3.
    duration keepalive_every{};
    /// Safety margin subtracted from the session's validity (clock drift, scheduling).
    duration drift = std::chrono::milliseconds{2};

    /// Checks the settings: TTL within [min_ttl, max_ttl], keepalive within (0, ttl),
    /// drift within [0, ttl).
    std::error_code validate() const noexcept
    {
        if (session_ttl < min_ttl || session_ttl > max_ttl)
            return errc::invalid_argument;
        if (keepalive_every < duration::zero() || keepalive_every >= session_ttl)
            return errc::invalid_argument;
        if (drift < duration::zero() || drift >= session_ttl)
            return errc::invalid_argument;
        return {};
    }
};

/// Checks a session config: TTL within [min_ttl, max_ttl], keepalive within (0, ttl),
/// drift within [0, ttl).
inline std::error_code validate(const session_config& c) noexcept
{
    return c.validate();
}

/// One client of a session_server: one session (opened on first use, renewed by one
/// keepalive for all its locks), and the fault injection of its link.
///
/// Models session_queue_store; its default acquisition is acquire::session_queue, so
/// `basic_distributed_mutex<memory::session_store>` queues fairly, needs no watchdog,
/// and its leases end when the session does.
///
/// Session states a lease hears of: held (each answered keepalive moves its validity
/// to send time + TTL - drift), in doubt (a keepalive went unanswered: the client
/// cannot tell whether the session lives; the leases are lost), lost (the server
/// says the session is gone). A refused keepalive (unavailable) is retried within the
/// remaining validity; when the validity runs out first, the leases are in doubt.
///
/// \par Object lifetimes
/// As memory::store: operations own the client's state; the server must outlive
/// the client. close() finishes pending releases, ends the session (its entries go)
/// and stops the keepalive, so io.run() can return; the destructor stops the
/// keepalive and leaves the session to expire on the server.
// Used as memory::session_store (backend::store_shell).
template <class Unused = void>
class basic_session_store : public backend::store_base<session_config> {
    struct core;
    using base = backend::store_base<session_config>;

public:
    using default_acquire_policy = acquire::session_queue;
    using default_shared_acquire_policy = acquire::shared_queue;

    /// Throws std::system_error (errc::invalid_argument) for an invalid config.
    basic_session_store(executor_type ex, session_server& server, session_config cfg = {});

    /// No bound: the link's injected faults include requests never answered
    /// (blackholed), so every attempt keeps a timer of its own.
    duration operation_timeout() const noexcept { return duration::max(); }

    /// How long the server keeps a session it hears nothing from.
    duration session_ttl() const noexcept { return core_->cfg.session_ttl; }

    // -- session_queue_store ---------------------------------------------------------

    awaitable<result<queue_place>> enqueue(std::string_view resource, const owner_token& owner)
    {
        return send<queue_place>(core_, [c = core_.get(), r = std::string{resource}, owner]() -> result<queue_place> {
            const auto id = c->session_id();
            if (!id)
                return errc::store_unavailable;
            auto place = c->server.enqueue(r, owner, id);
            if (!place && place.error() == errc::session_lost)
                c->session_ended(id, session_state::lost);
            return place;
        });
    }

    awaitable<result<void>> dequeue(std::string_view resource, const owner_token& owner)
    {
        return send<void>(core_, [c = core_.get(), r = std::string{resource}, owner]() -> result<void> {
            return c->server.dequeue(r, owner);
        });
    }

    awaitable<bool> wait_gone(std::string_view resource, fence_token entry, time_point until)
    {
        return wait_entry(core_, std::string{resource}, entry, until);
    }

    // -- shared_queue_store ----------------------------------------------------------

    awaitable<result<shared_place>> enqueue_shared(std::string_view resource, const owner_token& owner,
                                                   lock_mode mode, std::uint32_t permits)
    {
        return send<shared_place>(
            core_, [c = core_.get(), r = std::string{resource}, owner, mode, permits]() -> result<shared_place> {
                const auto id = c->session_id();
                if (!id)
                    return errc::store_unavailable;
                auto place = c->server.enqueue_shared(r, owner, id, mode, permits);
                if (!place && place.error() == errc::session_lost)
                    c->session_ended(id, session_state::lost);
                return place;
            });
    }

    /// True once an entry of `resource` went (any may let `entry` hold), or when
    /// `entry` holds; false at `until`.
    awaitable<bool> wait_turn(std::string_view resource, fence_token entry, time_point until)
    {
        return wait_resource(core_, std::string{resource}, entry, until);
    }

    /// Reads the lock on `resource` without taking it (inspectable_store): the oldest
    /// entry, and its session's time left.
    awaitable<result<lock_info>> read(std::string_view resource)
    {
        return send<lock_info>(core_, [c = core_.get(), r = std::string{resource}]() -> result<lock_info> {
            return c->server.read(r);
        });
    }

    /// The locks held now under `prefix`, with their waiters (enumerable_store).
    awaitable<result<std::vector<lock_listing>>> list(std::string_view prefix)
    {
        return send<std::vector<lock_listing>>(
            core_, [c = core_.get(), p = std::string{prefix}]() -> result<std::vector<lock_listing>> {
                return c->server.list(p);
            });
    }

    /// Marks `owner`'s holding entry `fence` on `resource` for a lock-delay of `delay`
    /// (lock_delay_store): if its session ends or it is revoked, the resource refuses
    /// grants until that end plus `delay`.
    awaitable<result<void>> arm_delay(std::string_view resource, const owner_token& owner, fence_token fence,
                                      duration delay)
    {
        return send<void>(core_, [c = core_.get(), r = std::string{resource}, owner, fence, delay]() -> result<void> {
            return c->server.arm_delay(r, owner, fence, delay);
        });
    }

    /// Stores `value` with `owner`'s entry `epoch` while it holds (electing_store).
    awaitable<result<void>> proclaim(std::string_view resource, const owner_token& owner, fence_token epoch,
                                     std::string_view value)
    {
        return send<void>(core_, [c = core_.get(), r = std::string{resource}, owner, epoch,
                                  v = std::string{value}]() mutable -> result<void> {
            return c->server.proclaim(r, owner, epoch, std::move(v));
        });
    }

    /// The holder of `resource` and the value it proclaimed (electing_store).
    awaitable<result<leader_info>> leader(std::string_view resource)
    {
        return send<leader_info>(core_, [c = core_.get(), r = std::string{resource}]() -> result<leader_info> {
            return c->server.leader(r);
        });
    }

    /// Deletes the holder's entry if it is still entry `fence` (revocable_store). Its
    /// lease hears of it at its session's next keepalive.
    awaitable<result<void>> revoke(std::string_view resource, fence_token fence)
    {
        return send<void>(core_, [c = core_.get(), r = std::string{resource}, fence]() -> result<void> {
            return c->server.revoke(r, fence);
        });
    }

    std::optional<time_point> bind(std::string_view resource, fence_token entry,
                                   std::weak_ptr<session_listener> listener)
    {
        return core_->bind(std::string{resource}, entry, std::move(listener));
    }

    // -- Faults and inspection, for tests -------------------------------------------

    /// While unreachable, requests and keepalives go unanswered (a blackholed link):
    /// they fail with errc::outcome_unknown, and the server hears nothing.
    void set_reachable(bool reachable)
    {
        std::lock_guard lock{core_->mutex};
        core_->reachable = reachable;
    }

    /// The next `count` requests or keepalives suffer `f` (see memory::fault).
    void fail_next(fault f, std::size_t count = 1)
    {
        std::lock_guard lock{core_->mutex};
        core_->faults.insert(core_->faults.end(), count, f);
    }

    /// Every reply (requests and keepalives) is delayed by `d` after the request was
    /// applied, as memory::store's set_reply_delay() (a slow network); random delays
    /// (set_random_faults()) come on top.
    void set_reply_delay(duration d)
    {
        std::lock_guard lock{core_->mutex};
        core_->reply_delay = d;
    }

    /// Random faults on every request and keepalive, from a seeded source (so a
    /// simulation replays): refused (not applied), reply lost (applied), and replies
    /// delayed uniformly in [0, max_delay] (a caller that stops waiting sees
    /// errc::outcome_unknown: the request was applied).
    struct random_faults {
        double refuse = 0;
        double lose_reply = 0;
        duration max_delay{};
        std::uint64_t seed = 1;
    };
    void set_random_faults(const random_faults& f)
    {
        std::lock_guard lock{core_->mutex};
        core_->chances = f;
        core_->random.seed(f.seed);
    }

    /// The session now open (0: none yet, or it ended).
    std::uint64_t session_id() const
    {
        std::lock_guard lock{core_->mutex};
        return core_->session;
    }

    /// Keepalives sent so far (one per interval for all the client's locks).
    std::size_t keepalives_sent() const
    {
        std::lock_guard lock{core_->mutex};
        return core_->keepalives;
    }

private:
    struct core : std::enable_shared_from_this<core> {
        core(asio::any_io_executor e, session_server& s, session_config c)
            : ex{distlock::backend::make_strand(e)}, server{s}, cfg{c}, tick{ex}
        {}

        asio::any_io_executor ex; // a strand: the keepalive loop and its timer live on it
        session_server& server;
        session_config cfg;
        mutable std::mutex mutex;
        std::uint64_t session = 0;
        time_point valid_until{};
        bool keeping = false;
        bool stopped = false;
        bool reachable = true;
        std::deque<fault> faults;
        random_faults chances;
        duration reply_delay{};
        distlock::util::splitmix64 random{1};
        std::size_t keepalives = 0;
        // The leases bound to the session, by the entry each holds: a keepalive also
        // finds the entries deleted behind their holders' backs (revoked).
        struct binding {
            std::string resource;
            fence_token entry = 0;
            std::weak_ptr<session_listener> listener;
            bool expired() const noexcept { return listener.expired(); }
        };
        std::vector<binding> listeners;
        timer tick; // the keepalive loop sleeps on it (touched on the strand only)

        duration every() const
        {
            return cfg.keepalive_every > duration::zero() ? cfg.keepalive_every : cfg.session_ttl / 3;
        }

        // The open session, opened now if there is none (and the keepalive started).
        std::uint64_t session_id()
        {
            std::unique_lock lock{mutex};
            if (stopped)
                return 0;
            if (session)
                return session;
            const auto sent = clock::now();
            session = server.open_session(cfg.session_ttl);
            valid_until = sent + cfg.session_ttl - cfg.drift;
            const auto id = session;
            if (!keeping) {
                keeping = true;
                lock.unlock();
                asio::co_spawn(ex, keep(this->shared_from_this()), asio::detached);
            }
            return id;
        }

        std::optional<time_point> bind(std::string resource, fence_token entry, std::weak_ptr<session_listener> l)
        {
            std::lock_guard lock{mutex};
            if (!session || clock::now() >= valid_until)
                return std::nullopt;
            std::erase_if(listeners, [](const auto& b) { return b.expired(); });
            listeners.push_back({std::move(resource), entry, std::move(l)});
            return valid_until;
        }

        // The session `id` ended (lost) or cannot be vouched for (in doubt): every lease
        // bound to it hears so; the next lock opens a new session.
        void session_ended(std::uint64_t id, session_state why)
        {
            std::vector<binding> told;
            {
                std::lock_guard lock{mutex};
                if (session != id)
                    return;
                session = 0;
                told.swap(listeners);
            }
            // In doubt, the old session may live on at the server until its TTL; its
            // entries go with it, or when their leases are released.
            for (auto& b : told)
                if (auto l = b.listener.lock())
                    l->session_changed(why, time_point{});
        }

        void stop(bool end_session)
        {
            std::uint64_t id = 0;
            std::vector<binding> told;
            {
                std::lock_guard lock{mutex};
                stopped = true;
                id = std::exchange(session, 0);
                told.swap(listeners);
            }
            if (end_session && id)
                server.close_session(id);
            asio::post(ex, [self = this->shared_from_this()] { self->tick.cancel(); });
            for (auto& b : told)
                if (auto l = b.listener.lock())
                    l->session_changed(session_state::lost, time_point{});
        }

        enum class fate { delivered, refused_unavailable, refused_garbage, reply_lost, blackholed };

        // What the link does to the next request.
        fate gate()
        {
            duration ignored{};
            return gate(ignored);
        }

        fate gate(duration& delay)
        {
            std::lock_guard lock{mutex};
            if (!reachable)
                return fate::blackholed;
            delay = reply_delay;
            if (chances.max_delay > duration::zero())
                delay = saturating_add(delay, duration{random.between(0, chances.max_delay.count())});
            if (faults.empty()) {
                if (chances.refuse > 0 && random.unit() < chances.refuse)
                    return fate::refused_unavailable;
                if (chances.lose_reply > 0 && random.unit() < chances.lose_reply)
                    return fate::reply_lost;
                return fate::delivered;
            }
            const auto f = faults.front();
            faults.pop_front();
            if (f == fault::unavailable)
                return fate::refused_unavailable;
            if (f == fault::garbage)
                return fate::refused_garbage;
            return fate::reply_lost;
        }

        // One keepalive loop per client serves all its leases.
        static awaitable<void> keep(std::shared_ptr<core> self)
        {
            for (;;) {
                std::uint64_t id = 0;
                time_point valid{};
                {
                    std::lock_guard lock{self->mutex};
                    if (self->stopped || !self->session) {
                        self->keeping = false;
                        co_return;
                    }
                    id = self->session;
                    valid = self->valid_until;
                }
                self->tick.expires_after(self->every());
                (void)co_await self->tick.async_wait(distlock::backend::as_tuple_awaitable<Unused>());
                if (self->tick_stopped())
                    continue;
                co_await self->renew(id, valid);
            }
        }

        bool tick_stopped()
        {
            std::lock_guard lock{mutex};
            return stopped;
        }

        awaitable<void> renew(std::uint64_t id, time_point valid)
        {
            // A refused keepalive is tried again, at shorter intervals, while the
            // session's validity lasts.
            for (;;) {
                const auto sent = clock::now();
                const auto f = gate();
                {
                    std::lock_guard lock{mutex};
                    ++keepalives;
                }
                if (f == fate::reply_lost)
                    (void)server.keepalive(id); // renewed, but the client never hears so
                if (f == fate::reply_lost || f == fate::blackholed) {
                    // Unanswered: the client cannot tell whether the session lives.
                    session_ended(id, session_state::in_doubt);
                    co_return;
                }
                if (f == fate::delivered) {
                    const auto expires = server.keepalive(id);
                    if (!expires) {
                        session_ended(id, session_state::lost);
                        co_return;
                    }
                    announce(id, sent + cfg.session_ttl - cfg.drift);
                    co_return;
                }
                if (clock::now() + every() / 4 >= valid) {
                    session_ended(id, session_state::in_doubt);
                    co_return;
                }
                tick.expires_after(every() / 4);
                (void)co_await tick.async_wait(distlock::backend::as_tuple_awaitable<Unused>());
                if (tick_stopped())
                    co_return;
            }
        }

        // A keepalive was answered: the session lives until `valid`. The same exchange
        // finds the bound entries that are gone although the session lives (revoked):
        // their leases are lost, the others held.
        void announce(std::uint64_t id, time_point valid)
        {
            std::vector<binding> bound;
            {
                std::lock_guard lock{mutex};
                if (session != id)
                    return;
                valid_until = valid;
                std::erase_if(listeners, [](const auto& b) { return b.expired(); });
                bound = listeners;
            }
            std::vector<binding> gone;
            std::erase_if(bound, [&](const binding& b) {
                if (server.has_entry(b.resource, b.entry))
                    return false;
                gone.push_back(b);
                return true;
            });
            if (!gone.empty()) {
                std::lock_guard lock{mutex};
                std::erase_if(listeners, [&](const binding& b) {
                    return std::any_of(gone.begin(), gone.end(), [&](const binding& g) {
                        return g.entry == b.entry && g.resource == b.resource;
                    });
                });
            }
            for (auto& b : gone)
                if (auto l = b.listener.lock())
                    l->session_changed(session_state::lost, time_point{});
            for (auto& b : bound)
                if (auto l = b.listener.lock())
                    l->session_changed(session_state::held, valid);
        }
    };

    // A request over the client's link: refused, applied, applied with its reply lost,
    // or never delivered (blackholed). The last two look the same to the client.
    template <class T, class Apply>
    static awaitable<result<T>> send(std::shared_ptr<core> c, Apply apply)
    {
        duration delay{};
        const auto fate = c->gate(delay);
        if (delay > duration::zero() && fate != core::fate::blackholed) {
            // Applied on arrival; the reply takes `delay` (refusals come back late too).
            result<T> r = errc::outcome_unknown;
            if (fate == core::fate::delivered || fate == core::fate::reply_lost)
                r = apply();
            timer t{co_await asio::this_coro::executor, delay};
            auto [ec] = co_await t.async_wait(distlock::backend::as_tuple_awaitable<Unused>());
            if (ec || fate == core::fate::reply_lost)
                co_return errc::outcome_unknown;
            if (fate == core::fate::refused_unavailable)
                co_return errc::store_unavailable;
            if (fate == core::fate::refused_garbage)
                co_return errc::protocol_error;
            co_return r;
        }
        switch (fate) {
        case core::fate::refused_unavailable:
            co_return errc::store_unavailable;
        case core::fate::refused_garbage:
            co_return errc::protocol_error;
        case core::fate::reply_lost:
            (void)apply();
            co_return errc::outcome_unknown;
        case core::fate::blackholed:
            co_return errc::outcome_unknown;
        case core::fate::delivered:
            break;
        }
        co_return apply();
    }

    static awaitable<bool> wait_resource(std::shared_ptr<core> c, std::string resource, fence_token entry,
                                         time_point until)
    {
        auto w = std::make_shared<distlock::backend::wakeup>(co_await asio::this_coro::executor);
        time_point expires{};
        c->server.watch_resource(resource, w, expires);
        // Registered first, then looked: a change in between still wakes it.
        if (c->server.entry_holds(resource, entry)) {
            c->server.unwatch_resource(resource, w);
            co_return true;
        }
        // A session before this entry may expire before anyone deletes its entry: look
        // again by then.
        const bool woken = co_await w->wait(std::min(until, expires));
        c->server.unwatch_resource(resource, w);
        co_return woken || c->server.entry_holds(resource, entry);
    }

    static awaitable<bool> wait_entry(std::shared_ptr<core> c, std::string resource, fence_token entry,
                                      time_point until)
    {
        auto w = std::make_shared<distlock::backend::wakeup>(co_await asio::this_coro::executor);
        time_point expires{};
        if (!c->server.watch(resource, entry, w, expires))
            co_return true;
        // The entry's session may expire before anyone deletes it: look again by then.
        const bool woken = co_await w->wait(std::min(until, expires));
        c->server.unwatch(resource, entry, w);
        if (woken)
            co_return true;
        // Woken by time: the entry is gone if its session expired.
        time_point again{};
        auto probe = std::make_shared<distlock::backend::wakeup>(co_await asio::this_coro::executor);
        const bool still = c->server.watch(resource, entry, probe, again);
        if (still)
            c->server.unwatch(resource, entry, probe);
        co_return !still;
    }

protected:
    ~basic_session_store() = default;
    // Destruction stops the keepalive and leaves the session to expire on the server;
    // close() ends it there first.
    void stop() noexcept;
    awaitable<void> finish();

private:
    std::shared_ptr<core> core_;
};

template <class Unused>
basic_session_store<Unused>::basic_session_store(executor_type ex, session_server& server, session_config cfg)
    : base{std::move(ex), cfg, "distlock::memory::session_store"}, core_{std::make_shared<core>(ex_, server, cfg)}
{}

template <class Unused>
void basic_session_store<Unused>::stop() noexcept
{
    core_->stop(false);
}

template <class Unused>
awaitable<void> basic_session_store<Unused>::finish()
{
    core_->stop(true);
    co_return;
}

/// One client of a session_server: see basic_session_store.
using session_store = backend::store_shell<basic_session_store<>>;

static_assert(session_queue_store<session_store>);
static_assert(enumerable_store<session_store>);
static_assert(revocable_store<session_store>);
static_assert(shared_queue_store<session_store>);
static_assert(inspectable_store<session_store>);

} // namespace distlock::memory
