// distlock/redis/store.hpp: Redis as a distlock store: one server, a Redis Cluster, or
// a primary with replicas found through Sentinel (config::topology()). Several
// independent stores make a Redlock quorum through distlock::quorum<redis::store>.
#pragma once

#include <distlock/backend.hpp>
#include <distlock/backend/strand.hpp>
#include <distlock/backend/wakeup.hpp>
#include <distlock/backend/when_all.hpp>
#include <distlock/redis/config.hpp>
#include <distlock/redis/detail/cluster.hpp>
#include <distlock/redis/detail/handover.hpp>
#include <distlock/redis/detail/keys.hpp>
#include <distlock/redis/detail/replies.hpp>
#include <distlock/redis/detail/router.hpp>
#include <distlock/redis/detail/sha1.hpp>
#include <distlock/redis/detail/subscriber.hpp>
#include <distlock/redis/resp/command.hpp>
#include <distlock/redis/resp/value.hpp>
#include <distlock/redis/scripts.hpp>

#include <asio/any_io_executor.hpp>
#include <asio/execution_context.hpp>
#include <asio/strand.hpp>

#include <algorithm>
#include <functional>
#include <array>
#include <charconv>
#include <chrono>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <string_view>
#include <utility>
#include <vector>

namespace distlock::redis {

/// A Redis server used as a lock store. One pipelined connection carries every
/// request of every coroutine using the store, and a second one listens for release
/// notifications. Neither is opened before the first request; both reconnect on
/// the next request after a failure.
///
/// In a Redis Cluster (config::cluster_nodes) the store keeps such a pair per primary
/// and sends each lock to its slot's primary, following MOVED and ASK; releases are
/// published with SPUBLISH on the slot's shard. Behind Sentinels (config::sentinels)
/// it talks to the primary they name and asks again after a failover. Every key of a
/// resource shares one hash slot, so each script stays atomic on one node.
///
/// Under config::dialect = redis::dialect::plain a lock is the Redlock recipe's that
/// node-redlock, go-redsync and redis-py's Lock follow (the id as the key, the owner
/// as its value), so that distlock and those clients exclude each other; distlock's
/// token lives beside it (scripts.hpp, docs/redis.md). That layout takes exclusive
/// locks only: fair queues, shared grants and sets in one step are refused,
/// errc::invalid_argument before any I/O.
///
/// Models put_if_absent_store, owner_checked_store, fencing_counter_store,
/// release_notifying_store, inspectable_store, enumerable_store, revocable_store,
/// shared_lease_store (a shared mutex's readers and writers, a semaphore's permits,
/// on one server, in a cluster and behind Sentinels alike), electing_store (an
/// election's value beside its lock, in every layout and topology) and
/// lock_delay_store (a mark beside the lock, in every layout and topology; not
/// through distlock::quorum: docs/redis.md, Lock-delay).
///
/// \par Thread safety
/// Safe to use from several threads: all connection state lives on a strand.
///
/// \par Object lifetimes
/// Every operation owns the connection it uses once started, so the store may be
/// destroyed while one is in flight (it completes with an error). Leases, lock()
/// calls and watchers reach the store through its lifetime (backend/lifetime.hpp):
/// after the store is destroyed they find it closed and report
/// errc::store_unavailable (held leases are reported lost). close() first finishes
/// the releases still pending, then closes both connections, so io.run() returns.
// Used through backend::store_shell (see there why stores are templates).
template <class Unused = void>
class basic_store : public backend::store_base<config> {
    using base = backend::store_base<config>;
    using router_ptr = std::shared_ptr<detail::router>;

public:
    /// Fails (throws std::system_error with errc::invalid_argument) only when the TLS
    /// files in `cfg` cannot be loaded; connecting happens on first use.
    basic_store(executor_type ex, config cfg);

    /// The longest a request takes before the store completes it itself (connecting
    /// first, then the request): attempts that surely end before a deadline need no
    /// timer of their own.
    /// In a cluster or behind Sentinels that includes following redirects and
    /// learning the servers' layout again (detail/router.hpp).
    duration operation_timeout() const noexcept { return router_->operation_timeout(); }

    /// Which server process this store reached at its last connect (its run_id, from
    /// INFO server in the handshake), without I/O: nullopt before the first connect,
    /// empty when the server would not tell. A quorum refuses two nodes with one
    /// identity (errc::invalid_argument), whatever their database, prefix or host name.
    /// A cluster is named by its primaries' node ids; behind Sentinels, the primary's.
    std::optional<std::string> known_server_identity() const { return router_->identity(); }

    /// Where requests on `resource` go now, without I/O: nullopt when not known yet
    /// (before the first request in a cluster or behind Sentinels).
    std::optional<node_address> node_of(std::string_view resource) const
    {
        return router_->node_of(detail::hash_slot(lock_key(resource)));
    }

    /// Closes both connections; the next request reconnects. Requests already written
    /// (even in part) complete with errc::outcome_unknown, queued ones with
    /// errc::store_unavailable (the store contract: only those were surely not applied).
    void disconnect() { router_->close(); }

    // -- Key layout (see scripts.hpp) ---------------------------------------------

    /// The key of a resource's lock: under redis::dialect::plain the resource id itself.
    std::string lock_key(std::string_view resource) const { return keys_.lock_key(resource); }
    /// The key holding the last fencing token granted to a resource of `resource`'s
    /// hash slot: shared by every resource of the slot, in the slot (scripts.hpp). At
    /// most 16,384 per prefix, whatever the number of resources ever locked.
    std::string fence_key(std::string_view resource) const { return keys_.fence_key_of_slot(slot_of(resource)); }
    std::string channel(std::string_view resource) const
    {
        return keys_.plain() ? keys_.beside(resource, "released") : keys_.key(resource, "released");
    }
    /// redis::dialect::plain: the key that says a lock is distlock's grant, and its
    /// fencing token ("<owner>:<token>"), beside the lock in its slot (scripts.hpp).
    std::string holder_key(std::string_view resource) const { return keys_.beside(resource, "holder"); }
    /// The shared holders of a resource (readers, permits) and a waiting writer's
    /// intent (layout in redis/scripts.hpp): beside its lock key, in its slot.
    std::string sharers_key(std::string_view resource) const { return keys_.key(resource, "sharers"); }
    std::string intent_key(std::string_view resource) const { return keys_.key(resource, "intent"); }
    /// Where an election on `resource` keeps its leader's value ("<token>:<value>"),
    /// in its lock key's slot in either layout (scripts.hpp).
    std::string leader_key(std::string_view resource) const { return keys_.leader_key(resource); }
    /// Where a lock-delay's mark of a grant on `resource`, then its tombstone, lives
    /// (scripts.hpp), in its lock key's slot in either layout.
    std::string delay_key(std::string_view resource) const { return keys_.delay_key(resource); }

    // -- Store primitives (distlock/store.hpp) --------------------------------------

    // Every operation computes what it sends now and hands it, with the connection,
    // to a coroutine that owns both: it never touches the store object again.

    // Each primitive takes an optional diagnostics: a failure's words go there (the
    // server's error reply, or which connection failed how).

    awaitable<result<fence_token>> put_if_absent(std::string_view resource, const owner_token& owner, duration ttl,
                                                 diagnostics* diag = nullptr)
    {
        if (keys_.plain()) {
            if (const auto ec = refused_id(resource, diag))
                return backend::failed<fence_token>(ec);
            return replicated(resource,
                              decoded(eval(script::acquire_plain, plain_keys(resource),
                                           strings(owner.to_hex(), millis(ttl), delay_key(resource)), diag),
                                      [](const resp::value& v) { return detail::replies::acquired(v); }),
                              diag);
        }
        return replicated(resource,
                          decoded(eval(script::acquire, lock_and_fence_keys(resource),
                                       strings(owner.to_hex(), millis(ttl), delay_key(resource)), diag),
                                  [](const resp::value& v) { return detail::replies::acquired(v); }),
                          diag);
    }

    /// put_if_absent() that tells how long the holder's lock has left when it is held
    /// (the acquire script returns the PTTL): contention as data.
    awaitable<result<answer>> put_if_absent_answer(std::string_view resource, const owner_token& owner, duration ttl,
                                                   diagnostics* diag = nullptr)
    {
        if (keys_.plain() && refused_id(resource, diag))
            return backend::failed<answer>(errc::invalid_argument);
        return replicated(resource,
                          decoded(eval(keys_.plain() ? script::acquire_plain : script::acquire,
                                       keys_.plain() ? plain_keys(resource) : lock_and_fence_keys(resource),
                                       strings(owner.to_hex(), millis(ttl), delay_key(resource)), diag),
                                  [sent = clock::now()](const resp::value& v) { return detail::replies::answered(v, sent); }),
                          diag);
    }

    awaitable<result<void>> extend(std::string_view resource, const owner_token& owner, duration ttl,
                                   diagnostics* diag = nullptr)
    {
        if (keys_.plain())
            return decoded(eval(script::extend_plain, strings(lock_key(resource), holder_key(resource)),
                                strings(owner.to_hex(), millis(ttl), delay_key(resource)), diag),
                           &detail::replies::owned);
        return decoded(eval(script::extend, strings(lock_key(resource)),
                            strings(owner.to_hex(), millis(ttl), delay_key(resource)), diag),
                       &detail::replies::owned);
    }

    awaitable<result<void>> release(std::string_view resource, const owner_token& owner, diagnostics* diag = nullptr)
    {
        // A cluster publishes on the slot's shard (SPUBLISH), heard by SSUBSCRIBE.
        if (keys_.plain())
            return decoded(eval(script::release_plain, strings(lock_key(resource), holder_key(resource)),
                                strings(owner.to_hex(), channel(resource), sharded_flag(), delay_key(resource)),
                                diag),
                           &detail::replies::owned);
        return decoded(eval(script::release, strings(lock_key(resource)),
                                strings(owner.to_hex(), channel(resource), sharded_flag(), delay_key(resource)), diag),
                       &detail::replies::owned);
    }

    /// Fencing tokens follow the server's clock: a resource's next token is at least
    /// the server's clock (TIME) in microseconds (clock_fenced_store).
    static constexpr std::uint64_t fence_ticks_per_second = 1'000'000;

    /// release() that also raises the resource's fencing token to at least `floor`
    /// (raise_fence()) in the same step, whether or not `owner` still held the lock:
    /// how a quorum's lease aligns the nodes' tokens without a round trip of its own.
    awaitable<result<void>> release_raising(std::string_view resource, const owner_token& owner, fence_token floor,
                                            diagnostics* diag = nullptr)
    {
        if (floor >= token_limit)
            return backend::failed<void>(errc::invalid_argument);
        if (keys_.plain())
            return decoded(eval(script::release_raising_plain, plain_keys(resource),
                                strings(owner.to_hex(), channel(resource), std::to_string(floor), sharded_flag()),
                                diag),
                           &detail::replies::owned);
        return decoded(eval(script::release_raising, lock_and_fence_keys(resource),
                                strings(owner.to_hex(), channel(resource), std::to_string(floor), sharded_flag()),
                                diag),
                       &detail::replies::owned);
    }

    awaitable<result<fence_token>> next_fence(std::string_view resource, diagnostics* diag = nullptr)
    {
        return decoded(eval(script::next_fence, strings(fence_key(resource)), {}, diag), &detail::replies::fence);
    }

    /// Raises the fencing token of `resource`'s slot to at least `floor`; a floor of
    /// 2^53 or more is errc::invalid_argument, before any I/O (tokens are exact Lua
    /// numbers only below it).
    awaitable<result<fence_token>> raise_fence(std::string_view resource, fence_token floor,
                                               diagnostics* diag = nullptr)
    {
        if (floor >= token_limit)
            return backend::failed<fence_token>(errc::invalid_argument);
        return decoded(
            eval(script::raise_fence, strings(fence_key(resource)), strings(std::to_string(floor)), diag),
            &detail::replies::fence);
    }

    /// Reads the lock on `resource` without taking it (inspectable_store): the owner
    /// (shortened), the time left and the holder's fencing token; when free, the last
    /// token granted to a resource of its slot (fence_key()), which the next grant
    /// exceeds. One script.
    /// Under redis::dialect::plain a lock another Redlock client holds reads as held, its
    /// owner the start of that client's value, its token 0 (it has none).
    awaitable<result<lock_info>> read(std::string_view resource, diagnostics* diag = nullptr)
    {
        if (keys_.plain()) {
            if (const auto ec = refused_id(resource, diag))
                return backend::failed<lock_info>(ec);
            return decoded(eval(script::inspect_plain, plain_keys(resource), {}, diag), &detail::replies::inspected);
        }
        return decoded(eval(script::inspect, lock_and_fence_keys(resource), {}, diag), &detail::replies::inspected);
    }

    /// The locks held now whose resource id begins with `prefix` (every lock for an
    /// empty one), sorted by id (enumerable_store): each with its owner (shortened),
    /// fencing token, time left, and `waiters`, the acquire::fair waiters whose place
    /// in its queue is still kept (0 for a resource no fair lock() waits on: other
    /// waiters poll or listen, and the server does not know them).
    ///
    /// SCAN with MATCH over the lock keys of every server that holds keys (each
    /// primary of a cluster, the primary behind Sentinels), scan_count keys a call, to
    /// the end of the iteration; each page's locks are then read in one script (one
    /// per hash slot in a cluster, sent at once). So a listing is a snapshot made of
    /// many reads, never a lock: a lock taken or released meanwhile may or may not be
    /// in it, and one that went between the SCAN and the read is left out. Keys that
    /// are not a lock of this store's key layout (another prefix, another kind) are
    /// never listed. A prefix longer than max_resource_size is errc::invalid_argument,
    /// before any I/O; a reply that makes no sense is errc::protocol_error, described
    /// in `diag`.
    /// Under redis::dialect::plain the listing finds distlock's grants by their holder
    /// keys: a lock other Redlock clients hold is a key like any other of the
    /// database, and is not listed.
    awaitable<result<std::vector<lock_listing>>> list(std::string_view prefix, diagnostics* diag = nullptr)
    {
        if (prefix.size() > max_resource_size)
            return backend::failed<std::vector<lock_listing>>(errc::invalid_argument);
        return list_on(router_, keys_, std::string{prefix}, diag);
    }

    /// Keys a SCAN call is asked to look at (its COUNT): a page's locks are read in
    /// the round trip after it, so pages stay small enough to read at once.
    static constexpr std::size_t scan_count = 256;
    /// The most SCAN pages a listing follows on one server (with scan_count, far more
    /// keys than a server holds): a server that never ends its SCAN gets an error.
    static constexpr std::size_t max_scan_pages = std::size_t{1} << 20;

    /// Frees the lock on `resource` if it is still the grant that carries `fence`, in
    /// one script (revocable_store): else errc::not_owner, the lock untouched. Waiters
    /// are woken as by release_to_head() (which is a plain release() for a resource
    /// no fair waiter queues for): the head of the fair queue is handed the lock when
    /// it listens. The holder learns of it at its next renewal, whose owner-checked
    /// extend() fails. An empty or oversized resource is errc::invalid_argument,
    /// before any I/O.
    awaitable<result<void>> revoke(std::string_view resource, fence_token fence, diagnostics* diag = nullptr)
    {
        if (validate_resource(resource))
            return backend::failed<void>(errc::invalid_argument);
        if (keys_.plain()) {
            // A foreign holder has no token, so only distlock's grants can be named.
            if (const auto ec = refused_id(resource, diag))
                return backend::failed<void>(ec);
            return explained(eval(script::revoke_plain, plain_keys(resource),
                                  strings(std::to_string(fence), channel(resource), sharded_flag(),
                                          delay_key(resource)),
                                  diag, true),
                             &detail::replies::revoked, diag, "the revoke script answers 1 or 0");
        }
        return explained(eval(script::revoke, fair_queue_keys(resource),
                              strings(std::to_string(fence), channel(resource), sharded_flag(), delay_key(resource)),
                              diag, true),
                         &detail::replies::revoked, diag, "the revoke script answers 1 or 0");
    }

    // -- Lock-delays (lock_delay_store, docs/lock_delay.md) ---------------------------

    /// Marks the grant `owner` holds on `resource` with fencing token `fence` for a
    /// lock-delay of `delay` (its milliseconds, rounded up), in one script: the lock is
    /// checked to be that grant and its mark written under delay_key(), expiring
    /// `delay` after the lock (moved with each extension); else errc::not_owner,
    /// nothing written. A release deletes the mark with the lock; when the lock goes
    /// otherwise (its TTL ran out, a revoke, an eviction), what is left of the mark is
    /// the tombstone, and every acquiring script refuses the resource while it lasts
    /// (answer::delayed, errc::lock_delayed). A delay that is not positive or beyond
    /// max_wait, or an empty or oversized resource, is errc::invalid_argument before
    /// any I/O. A mark that cannot be written (its slot migrating in a Redis Cluster)
    /// is an error reply, errc::store_unavailable: the grant is given back, not handed
    /// out unmarked.
    awaitable<result<void>> arm_delay(std::string_view resource, const owner_token& owner, fence_token fence,
                                      duration delay, diagnostics* diag = nullptr)
    {
        if (const auto ec = validate_resource(resource))
            return backend::failed<void>(ec);
        if (delay <= duration::zero() || delay > max_wait)
            return backend::failed<void>(errc::invalid_argument);
        if (fence == 0 || fence >= token_limit)
            return backend::failed<void>(errc::not_owner);
        if (keys_.plain()) {
            if (const auto ec = refused_id(resource, diag))
                return backend::failed<void>(ec);
            return explained(eval(script::arm_delay_plain, strings(lock_key(resource), holder_key(resource)),
                                  strings(owner.to_hex(), std::to_string(fence), millis(delay), delay_key(resource)),
                                  diag),
                             &detail::replies::owned, diag, "the arm_delay script answers 1 or 0");
        }
        return explained(eval(script::arm_delay, strings(lock_key(resource)),
                              strings(owner.to_hex(), std::to_string(fence), millis(delay), delay_key(resource)), diag),
                         &detail::replies::owned, diag, "the arm_delay script answers 1 or 0");
    }

    // -- Elections (electing_store, basic_leader_election) ---------------------------

    /// Keeps `value` as the value of the grant `owner` holds on `resource` with fencing
    /// token `epoch`, in one script: the lock is checked to be that grant and the value
    /// written under leader_key() tagged with the token, or nothing is written and the
    /// answer is errc::not_owner. A value beyond max_leader_value_size, or an empty or
    /// oversized resource, is errc::invalid_argument before any I/O.
    /// The value has no TTL: one record per election, which the next term's proclaim
    /// overwrites; leader() never reports it for another grant.
    awaitable<result<void>> proclaim(std::string_view resource, const owner_token& owner, fence_token epoch,
                                     std::string_view value, diagnostics* diag = nullptr)
    {
        if (const auto ec = refused_election(resource, value, diag))
            return backend::failed<void>(ec);
        if (keys_.plain())
            return explained(eval(script::proclaim_plain,
                                  strings(lock_key(resource), holder_key(resource), leader_key(resource)),
                                  strings(owner.to_hex(), std::to_string(epoch), value), diag),
                             &detail::replies::owned, diag, "the proclaim script answers 1 or 0");
        return explained(eval(script::proclaim, strings(lock_key(resource), leader_key(resource)),
                              strings(owner.to_hex(), std::to_string(epoch), value), diag),
                         &detail::replies::owned, diag, "the proclaim script answers 1 or 0");
    }

    /// Who holds the lock on `resource`, read as read() reads it (owner shortened,
    /// time left, fencing token as epoch), with the value proclaimed for that very
    /// grant (nullopt until it has), in one script. A free lock is leader_info{}; a
    /// holder without a token (under redis::dialect::plain, another Redlock client's)
    /// has epoch 0 and no value.
    awaitable<result<leader_info>> leader(std::string_view resource, diagnostics* diag = nullptr)
    {
        if (const auto ec = refused_election(resource, {}, diag))
            return backend::failed<leader_info>(ec);
        if (keys_.plain())
            return explained(eval(script::leader_plain,
                                  strings(lock_key(resource), holder_key(resource), leader_key(resource)), {}, diag),
                             &detail::replies::led, diag,
                             "the leader script answers {0} or {1, owner, pttl, token[, value]}");
        return explained(eval(script::leader, strings(lock_key(resource), leader_key(resource)), {}, diag),
                         &detail::replies::led, diag,
                         "the leader script answers {0} or {1, owner, pttl, token[, value]}");
    }

    /// Listens for releases of one resource, until destroyed.
    class watcher {
    public:
        watcher(watcher&& other) noexcept = default;
        watcher& operator=(watcher&&) = delete;
        ~watcher()
        {
            if (subscriber_)
                subscriber_->unsubscribe(channel_, wakeup_);
        }

        /// True when a release was published, false when `until` came first. A
        /// subscription that was lost (connection dropped, the slot moved to another
        /// node) is made again first, where the channel now lives, and the wait ends
        /// at once with true: a release may have gone unheard in between.
        awaitable<bool> wait(time_point until)
        {
            if (lost_ || !subscriber_ || subscriber_->epoch() != epoch_) {
                // Still down: wait as a plain timer, trying to subscribe again every
                // resubscribe_interval (after a failover the channel lives on a server
                // that only a new try can find).
                while (!co_await resubscribe()) {
                    const auto now = clock::now();
                    if (now >= until)
                        co_return false;
                    timer t{co_await asio::this_coro::executor, std::min(until, now + resubscribe_interval)};
                    (void)co_await t.async_wait(distlock::backend::as_tuple_awaitable<Unused>());
                    auto cs = co_await asio::this_coro::cancellation_state;
                    if (cs.cancelled() != asio::cancellation_type::none || clock::now() >= until)
                        co_return false;
                }
                co_return true;
            }
            const bool notified = co_await wakeup_->wait(until);
            co_return notified;
        }

        /// The lock a release handed to this watcher's waiter (acquire::fair), from
        /// the latest message named for it, once; nullopt when none came or it does
        /// not read as one.
        std::optional<handover> take_handover()
        {
            const auto letter = wakeup_->take_letter();
            return letter && takes_handovers_ ? detail::parse_handover(*letter) : std::nullopt;
        }

    private:
        friend class basic_store;
        static constexpr duration resubscribe_interval = std::chrono::seconds{1};

        watcher(router_ptr r, std::uint16_t slot, std::string channel, std::shared_ptr<distlock::backend::wakeup> w,
                bool takes_handovers, duration linger)
            : router_{std::move(r)}, slot_{slot}, channel_{std::move(channel)}, wakeup_{std::move(w)},
              takes_handovers_{takes_handovers}, linger_{linger}
        {}

        // Subscribes on the node that serves the channel now; true when confirmed.
        awaitable<bool> resubscribe()
        {
            auto sub = co_await router_->subscriber_for(slot_);
            if (!sub) {
                lost_ = true;
                co_return false;
            }
            if (subscriber_ && subscriber_ != sub.value())
                subscriber_->unsubscribe(channel_, wakeup_);
            subscriber_ = std::move(sub.value());
            epoch_ = subscriber_->epoch(); // before: a loss during the request shows next time
            const auto ec = co_await subscriber_->subscribe(channel_, wakeup_, linger_);
            lost_ = static_cast<bool>(ec);
            co_return !lost_;
        }

        router_ptr router_;
        std::uint16_t slot_ = 0;
        std::string channel_;
        std::shared_ptr<distlock::backend::wakeup> wakeup_;
        std::shared_ptr<detail::subscriber> subscriber_;
        std::uint64_t epoch_ = 0;
        bool lost_ = false;
        // With config::wait_replicas a handed lock counts only once replicas have it:
        // the waiter then asks, and its answer waits for them (WAIT).
        bool takes_handovers_ = false;
        duration linger_ = duration::zero(); // the channel's, once its last waiter left
    };

    /// Subscribes to the resource's release channel; completes once Redis confirmed.
    /// If the subscription fails, the watcher still works as a plain timer.
    awaitable<watcher> watch(std::string_view resource)
    {
        return watch_on(router_, slot_of(resource), channel(resource));
    }

    /// Channels currently subscribed (they must not accumulate).
    std::size_t subscribed_channels() const { return router_->channels(); }

    // -- The fair queue (fair_queue_store, acquire::fair) ----------------------------

    /// Takes the lock for `owner` only if it is free and no one waits, or `waiter` is
    /// the head of the resource's queue; otherwise, with `join`, takes or keeps
    /// `waiter`'s place in line for config::queue_ttl, and offers to take the lock for
    /// `ttl` from a release that hands it over, heard on this store's channel for the
    /// resource (watch(resource, waiter)). Held locks are answered as data; a lock
    /// handed over, held as owner `waiter`, as answer::handed_over. `try_number`
    /// counts the lock() call's tries from 1, so that a hand-over names the try.
    awaitable<result<answer>> put_if_first(std::string_view resource, const owner_token& waiter,
                                           const owner_token& owner, duration ttl, std::uint64_t try_number,
                                           bool join, diagnostics* diag = nullptr)
    {
        if (keys_.plain())
            return backend::failed<answer>(plain_refusal("a fair queue (acquire::fair)", diag));
        return replicated(resource,
                          decoded(eval(script::acquire_fair, fair_queue_keys(resource),
                                       strings(owner.to_hex(), millis(ttl), waiter.to_hex(), millis(cfg_.queue_ttl),
                                               std::to_string(std::max<std::uint64_t>(try_number, 1)),
                                               join ? "1" : "0", listener_.to_hex(), delay_key(resource)),
                                       diag),
                                  [sent = clock::now(), waiter, ttl](const resp::value& v) {
                                      return detail::replies::answered_fair(v, sent, waiter, ttl);
                                  }),
                          diag);
    }

    /// Releases `owner`'s lock and hands it to the head waiter when the head's store
    /// listens for it, waking the head's lock() call only; else leaves it free for the
    /// head to ask.
    awaitable<result<void>> release_to_head(std::string_view resource, const owner_token& owner,
                                            diagnostics* diag = nullptr)
    {
        if (keys_.plain())
            return backend::failed<void>(plain_refusal("a fair queue (acquire::fair)", diag));
        return decoded(eval(script::release_fair, fair_queue_keys(resource),
                                strings(owner.to_hex(), channel(resource), sharded_flag(), delay_key(resource)), diag,
                                true),
                       &detail::replies::owned);
    }

    /// Gives up `waiter`'s place in line (a lock() that ended without the lock), and
    /// gives back a lock a release handed to it meanwhile.
    awaitable<result<void>> leave_queue(std::string_view resource, const owner_token& waiter,
                                        diagnostics* diag = nullptr)
    {
        if (keys_.plain())
            return backend::failed<void>(plain_refusal("a fair queue (acquire::fair)", diag));
        return decoded(eval(script::leave_queue, fair_queue_keys(resource),
                               strings(waiter.to_hex(), channel(resource), sharded_flag(), delay_key(resource)), diag),
                       &detail::replies::done);
    }

    /// How often a waiter must ask again to keep its place.
    duration queue_refresh() const noexcept { return cfg_.queue_ttl / 3; }

    /// Listens for the release that hands `waiter` the lock (or makes it the head of
    /// the resource's queue), on this store's channel for the resource: a release
    /// wakes the head's process only, and there the head only (the message names
    /// it). The channel stays subscribed for config::listen_linger after its last
    /// waiter left, so that the next lock() of the resource here can join the line
    /// in its first try (listening()).
    awaitable<watcher> watch(std::string_view resource, const owner_token& waiter)
    {
        return watch_on(router_, slot_of(resource), listener_channel(resource), waiter.to_hex(),
                        cfg_.wait_replicas <= 0, cfg_.listen_linger);
    }

    /// Whether this store listens on its channel for `resource` now (no request).
    bool listening(std::string_view resource) const { return router_->listening(listener_channel(resource)); }

    /// The channel on which a release wakes this store's waiters on `resource`: the
    /// resource's channel, ':', the store's listener id (it keeps the resource's hash
    /// tag, so in a Redis Cluster it lives in the resource's slot).
    std::string listener_channel(std::string_view resource) const
    {
        return channel(resource).append(":").append(listener_.to_hex());
    }

    /// The keys of a resource's fair queue (layout in redis/scripts.hpp).
    std::string queue_key(std::string_view resource) const { return keys_.key(resource, "queue"); }
    std::string offers_key(std::string_view resource) const { return keys_.key(resource, "offers"); }

    // -- Shared grants (shared_lease_store, acquire::shared_setnx) --------------------

    // Each is one script over the resource's lock, fence, sharers and intent keys
    // (scripts.hpp), so a decision and its writes are one step on the server; a
    // writer holds the lock key as a mutex's holder does, so read(), list() and
    // revoke() see it. Every grant takes its token from the resource's fence key, as
    // a mutex's grant does.

    /// A shared grant for `owner` for `ttl`: a reader (`permits` 0) unless a writer
    /// holds or its intent lives; a permit of a semaphore of `permits` while fewer
    /// hold, as the lowest number no live holder has. Held answers say until when the
    /// writer's lock, or the first permit, runs out at the latest. Holders that
    /// share another count refuse it: errc::invalid_argument, both counts in `diag`.
    awaitable<result<answer>> put_shared(std::string_view resource, const owner_token& owner, duration ttl,
                                         std::uint32_t permits, diagnostics* diag = nullptr)
    {
        if (keys_.plain())
            return backend::failed<answer>(plain_refusal("a shared grant (a reader, a permit)", diag));
        return replicated(resource,
                          explained(eval(script::put_shared, shared_keys(resource),
                                         strings(owner.to_hex(), millis(ttl), std::to_string(permits),
                                                 delay_key(resource)),
                                         diag),
                                    [sent = clock::now(), permits, diag](const resp::value& v) {
                                        return shared_answer(v, sent, permits, false, diag);
                                    },
                                    diag, "the put_shared script answers {1, fence[, slot]}, {0, pttl}, {3, ms} or {-1, count}"),
                          diag);
    }

    /// An exclusive grant for `owner` when no one holds and no other waiter's intent
    /// lives; otherwise `waiter` takes the resource's writer intent, or renews its
    /// own, for `ttl`: new readers are refused while it lives. A semaphore's holders
    /// refuse it (errc::invalid_argument): it has no writers.
    awaitable<result<answer>> put_exclusive(std::string_view resource, const owner_token& waiter,
                                            const owner_token& owner, duration ttl, diagnostics* diag = nullptr)
    {
        if (keys_.plain())
            return backend::failed<answer>(plain_refusal("a shared mutex's writer", diag));
        return replicated(resource,
                          explained(eval(script::put_exclusive, shared_keys(resource),
                                         strings(waiter.to_hex(), owner.to_hex(), millis(ttl), delay_key(resource)),
                                         diag),
                                    [sent = clock::now(), diag](const resp::value& v) {
                                        return shared_answer(v, sent, 0, true, diag);
                                    },
                                    diag, "the put_exclusive script answers {1, fence}, {0, pttl}, {3, ms} or {-1, count}"),
                          diag);
    }

    /// Extends `owner`'s grant, exclusive or shared, to `ttl` from now.
    awaitable<result<void>> extend_shared(std::string_view resource, const owner_token& owner, duration ttl,
                                          diagnostics* diag = nullptr)
    {
        if (keys_.plain())
            return backend::failed<void>(plain_refusal("a shared grant", diag));
        return explained(eval(script::extend_shared, shared_keys(resource),
                              strings(owner.to_hex(), millis(ttl), delay_key(resource)), diag),
                         &detail::replies::owned, diag, "the extend_shared script answers 1 or 0");
    }

    /// Releases `owner`'s grant, exclusive or shared, and wakes the resource's
    /// watchers (watch(resource)).
    awaitable<result<void>> release_shared(std::string_view resource, const owner_token& owner,
                                           diagnostics* diag = nullptr)
    {
        if (keys_.plain())
            return backend::failed<void>(plain_refusal("a shared grant", diag));
        return explained(eval(script::release_shared, shared_keys(resource),
                              strings(owner.to_hex(), channel(resource), sharded_flag(), delay_key(resource)), diag),
                         &detail::replies::owned, diag, "the release_shared script answers 1 or 0");
    }

    /// Gives up `waiter`'s intent, if it is still there, and wakes the readers it
    /// kept out.
    awaitable<result<void>> withdraw(std::string_view resource, const owner_token& waiter,
                                     diagnostics* diag = nullptr)
    {
        if (keys_.plain())
            return backend::failed<void>(plain_refusal("a shared mutex's writer", diag));
        return explained(eval(script::withdraw, shared_keys(resource),
                              strings(waiter.to_hex(), channel(resource), sharded_flag()), diag),
                         &detail::replies::done, diag, "the withdraw script answers 1");
    }

    /// The writer `owner` holds on as a reader, with its fencing token and its time
    /// left, in one step: no writer comes between; readers waiting are woken.
    awaitable<result<void>> downgrade(std::string_view resource, const owner_token& owner,
                                      diagnostics* diag = nullptr)
    {
        if (keys_.plain())
            return backend::failed<void>(plain_refusal("a shared mutex's downgrade", diag));
        return explained(eval(script::downgrade, shared_keys(resource),
                              strings(owner.to_hex(), channel(resource), sharded_flag(), delay_key(resource)), diag),
                         &detail::replies::owned, diag, "the downgrade script answers 1 or 0");
    }

    // -- Beyond the store concepts -----------------------------------------------

    /// Put-if-absent on several resources in one round trip, all or nothing. Returns
    /// one fencing token per resource, in the given order: the set's one token, granted
    /// to all of them at once. In a cluster the resources must share a hash slot
    /// (batchable()); an empty set, a resource named twice or a set that spans slots is
    /// errc::invalid_argument, before any I/O.
    awaitable<result<std::vector<fence_token>>> put_if_absent_all(const std::vector<std::string>& resources,
                                                                  const owner_token& owner, duration ttl,
                                                                  diagnostics* diag = nullptr)
    {
        if (keys_.plain())
            return backend::failed<std::vector<fence_token>>(plain_refusal("a set in one step", diag));
        if (resources.empty() || !distinct(resources) || !batchable(resources))
            return backend::failed<std::vector<fence_token>>(errc::invalid_argument);
        // The locks, then the fence key of each slot they hash to, once.
        std::vector<std::string> keys;
        std::vector<std::uint16_t> slots;
        keys.reserve(2 * resources.size());
        slots.reserve(resources.size());
        for (const auto& r : resources) {
            keys.push_back(lock_key(r));
            slots.push_back(detail::hash_slot(keys.back()));
        }
        std::sort(slots.begin(), slots.end());
        slots.erase(std::unique(slots.begin(), slots.end()), slots.end());
        for (const auto slot : slots)
            keys.push_back(keys_.fence_key_of_slot(slot));
        auto args = strings(owner.to_hex(), millis(ttl), std::to_string(resources.size()));
        args.reserve(3 + resources.size());
        for (const auto& r : resources)
            args.push_back(delay_key(r));
        return replicated(resources.front(),
                          decoded(eval(script::acquire_all, std::move(keys), std::move(args), diag),
                                  [count = resources.size()](const resp::value& v) {
                                      return detail::replies::acquired_all(v, count);
                                  }),
                          diag);
    }

    /// Releases `owner`'s locks on several resources in one round trip (one script):
    /// for each resource, in the given order, true when released (and announced to
    /// its waiters), false when `owner` did not hold it. In a cluster the resources
    /// must share a hash slot (batchable()); an empty set, a resource named twice or
    /// a set that spans slots is errc::invalid_argument, before any I/O.
    awaitable<result<std::vector<bool>>> release_all(const std::vector<std::string>& resources,
                                                     const owner_token& owner, diagnostics* diag = nullptr)
    {
        if (keys_.plain())
            return backend::failed<std::vector<bool>>(plain_refusal("a set in one step", diag));
        if (resources.empty() || !distinct(resources) || !batchable(resources))
            return backend::failed<std::vector<bool>>(errc::invalid_argument);
        std::vector<std::string> keys;
        std::vector<std::string> args{owner.to_hex(), sharded_flag()};
        keys.reserve(resources.size());
        args.reserve(2 * resources.size() + 2);
        for (const auto& r : resources) {
            keys.push_back(lock_key(r));
            args.push_back(channel(r));
        }
        for (const auto& r : resources)
            args.push_back(delay_key(r));
        return decoded(eval(script::release_all, std::move(keys), std::move(args), diag),
                       [count = resources.size()](const resp::value& v) { return detail::replies::released_all(v, count); });
    }

    /// Writes `value` under `key` (a hash with fields value and fence) unless a write
    /// with a newer fencing token has already happened: errc::stale_fence then. This
    /// is how data kept in Redis enforces the lease's fencing token atomically.
    /// Tokens are compared as Lua numbers: exact up to 2^53. Arguments in the order of
    /// every fenced write of distlock: where, the token, what.
    awaitable<result<void>> fenced_write(std::string_view key, fence_token fence, std::string_view value,
                                         diagnostics* diag = nullptr)
    {
        return decoded(
            eval(script::fenced_write, strings(key), strings(value, std::to_string(fence)), diag),
            &detail::replies::fenced_written);
    }

    /// Reads a value written by fenced_write (nullopt if none).
    awaitable<result<std::optional<std::string>>> fenced_read(std::string_view key, diagnostics* diag = nullptr)
    {
        return decoded(exec_on(router_, detail::hash_slot(key), resp::command({"HGET", key, "value"}), diag),
                       &detail::replies::value_read);
    }

    /// Runs one command and returns its reply; an error reply becomes
    /// errc::store_unavailable (errc::auth_failed for NOAUTH, WRONGPASS, NOPERM), with
    /// the server's words in `diag` when given. In a cluster the command goes to the
    /// primary of its first argument's slot (the key, for most commands).
    awaitable<result<resp::value>> execute(std::initializer_list<std::string_view> args, diagnostics* diag = nullptr)
    {
        return execute_command(resp::command(args), diag);
    }

    /// execute() from the command's name and arguments (strings, string views, string
    /// literals), callable inside co_await on g++ 12: execute("DEL", key1, key2).
    template <class... Args>
        requires(std::is_convertible_v<const Args&, std::string_view> && ...)
    awaitable<result<resp::value>> execute(std::string_view name, const Args&... args)
    {
        return execute_command(resp::command_of(name, args...));
    }

    /// execute() for a command already encoded (resp::command).
    awaitable<result<resp::value>> execute_command(std::string encoded, diagnostics* diag = nullptr)
    {
        const auto slot = slot_of_command(encoded);
        return exec_on(router_, slot, std::move(encoded), diag);
    }

    /// Whether put_if_absent_all() can take these resources in one script: always on
    /// one server; in a cluster, when they share a hash slot (a common hash tag).
    /// Multi-locks take other sets one resource at a time, as they do every set
    /// under redis::dialect::plain (other Redlock clients lock one key at a time).
    bool batchable(const std::vector<std::string>& resources) const
    {
        if (keys_.plain())
            return false;
        if (router_->mode() != topology::cluster || resources.empty())
            return true;
        const auto first = slot_of(resources.front());
        return std::all_of(resources.begin(), resources.end(),
                           [&](const std::string& r) { return slot_of(r) == first; });
    }

private:
    enum class script {
        acquire,
        extend,
        release,
        raise_fence,
        acquire_all,
        fenced_write,
        inspect,
        next_fence,
        acquire_fair,
        release_fair,
        leave_queue,
        release_all,
        release_raising,
        revoke,
        survey,
        put_shared,
        put_exclusive,
        extend_shared,
        release_shared,
        withdraw,
        downgrade,
        acquire_plain,
        extend_plain,
        release_plain,
        release_raising_plain,
        inspect_plain,
        revoke_plain,
        survey_plain,
        proclaim,
        leader,
        proclaim_plain,
        leader_plain,
        arm_delay,
        arm_delay_plain
    };

    struct script_text {
        std::string_view text;
        std::string sha;
    };

    static const script_text& source(script s)
    {
        static const std::array<script_text, 34> all{
            script_text{scripts::acquire(), detail::sha1_hex(scripts::acquire())},
            script_text{scripts::extend(), detail::sha1_hex(scripts::extend())},
            script_text{scripts::release(), detail::sha1_hex(scripts::release())},
            script_text{scripts::raise_fence(), detail::sha1_hex(scripts::raise_fence())},
            script_text{scripts::acquire_all(), detail::sha1_hex(scripts::acquire_all())},
            script_text{scripts::fenced_write(), detail::sha1_hex(scripts::fenced_write())},
            script_text{scripts::inspect(), detail::sha1_hex(scripts::inspect())},
            script_text{scripts::next_fence(), detail::sha1_hex(scripts::next_fence())},
            script_text{scripts::acquire_fair(), detail::sha1_hex(scripts::acquire_fair())},
            script_text{scripts::release_fair(), detail::sha1_hex(scripts::release_fair())},
            script_text{scripts::leave_queue(), detail::sha1_hex(scripts::leave_queue())},
            script_text{scripts::release_all(), detail::sha1_hex(scripts::release_all())},
            script_text{scripts::release_raising(), detail::sha1_hex(scripts::release_raising())},
            script_text{scripts::revoke(), detail::sha1_hex(scripts::revoke())},
            script_text{scripts::survey(), detail::sha1_hex(scripts::survey())},
            script_text{scripts::put_shared(), detail::sha1_hex(scripts::put_shared())},
            script_text{scripts::put_exclusive(), detail::sha1_hex(scripts::put_exclusive())},
            script_text{scripts::extend_shared(), detail::sha1_hex(scripts::extend_shared())},
            script_text{scripts::release_shared(), detail::sha1_hex(scripts::release_shared())},
            script_text{scripts::withdraw(), detail::sha1_hex(scripts::withdraw())},
            script_text{scripts::downgrade(), detail::sha1_hex(scripts::downgrade())},
            script_text{scripts::acquire_plain(), detail::sha1_hex(scripts::acquire_plain())},
            script_text{scripts::extend_plain(), detail::sha1_hex(scripts::extend_plain())},
            script_text{scripts::release_plain(), detail::sha1_hex(scripts::release_plain())},
            script_text{scripts::release_raising_plain(), detail::sha1_hex(scripts::release_raising_plain())},
            script_text{scripts::inspect_plain(), detail::sha1_hex(scripts::inspect_plain())},
            script_text{scripts::revoke_plain(), detail::sha1_hex(scripts::revoke_plain())},
            script_text{scripts::survey_plain(), detail::sha1_hex(scripts::survey_plain())},
            script_text{scripts::proclaim(), detail::sha1_hex(scripts::proclaim())},
            script_text{scripts::leader(), detail::sha1_hex(scripts::leader())},
            script_text{scripts::proclaim_plain(), detail::sha1_hex(scripts::proclaim_plain())},
            script_text{scripts::leader_plain(), detail::sha1_hex(scripts::leader_plain())},
            script_text{scripts::arm_delay(), detail::sha1_hex(scripts::arm_delay())},
            script_text{scripts::arm_delay_plain(), detail::sha1_hex(scripts::arm_delay_plain())},
        };
        return all[static_cast<std::size_t>(s)];
    }

    // A script's keys or arguments, moved in (an initializer list would copy each one).
    template <class... T>
    static std::vector<std::string> strings(T&&... v)
    {
        std::vector<std::string> out;
        out.reserve(sizeof...(T));
        (out.emplace_back(std::forward<T>(v)), ...);
        return out;
    }

    // TTLs go to Redis in whole milliseconds, rounded up: the store never expires a
    // lock before the client's own (shorter) validity ends.
    static std::string millis(duration ttl)
    {
        return std::to_string(std::chrono::ceil<std::chrono::milliseconds>(ttl).count());
    }

    // Fencing tokens are Lua numbers in the scripts: exact below 2^53 (scripts.hpp).
    static constexpr fence_token token_limit = fence_token{1} << 53;

    // A resource's lock key and its slot's fence key (one hash of the lock key).
    std::vector<std::string> lock_and_fence_keys(std::string_view resource) const
    {
        auto lock = lock_key(resource);
        auto fence = keys_.fence_key_of_slot(detail::hash_slot(lock));
        return strings(std::move(lock), std::move(fence));
    }

    // redis::dialect::plain: a resource's lock, its slot's fence key, its holder key (all
    // in the lock key's slot: scripts.hpp).
    std::vector<std::string> plain_keys(std::string_view resource) const
    {
        auto keys = lock_and_fence_keys(resource);
        keys.push_back(holder_key(resource));
        return keys;
    }

    // redis::dialect::plain: an id that would be a key of distlock's own is refused
    // before any I/O (key_layout::reserved), with why in `diag`.
    std::error_code refused_id(std::string_view resource, diagnostics* diag) const
    {
        if (!keys_.reserved(resource))
            return {};
        if (diag)
            diag->set_client_message("dialect plain: resource id " + backend::quoted(resource) +
                                     " begins as distlock's own keys do (key prefix, then \":{\"); choose another "
                                     "id or key_prefix");
        return errc::invalid_argument;
    }

    // An election's request that cannot be sent: an empty or oversized resource, a value
    // beyond max_leader_value_size, or under redis::dialect::plain an id in distlock's
    // own keys. Refused before any I/O, with why in `diag`.
    std::error_code refused_election(std::string_view resource, std::string_view value, diagnostics* diag) const
    {
        if (const auto ec = validate_resource(resource))
            return ec;
        if (value.size() > max_leader_value_size) {
            if (diag)
                diag->set_client_message("an election's value of " + std::to_string(value.size()) +
                                         " bytes is beyond max_leader_value_size (" +
                                         std::to_string(max_leader_value_size) + ")");
            return errc::invalid_argument;
        }
        return keys_.plain() ? refused_id(resource, diag) : std::error_code{};
    }

    // redis::dialect::plain: what the Redlock recipe has no form for is refused before
    // any I/O, with why in `diag`: a client of the recipe would neither see nor
    // respect it.
    static std::error_code plain_refusal(const char* what, diagnostics* diag)
    {
        if (diag)
            diag->set_client_message(std::string{"dialect plain: "} + what +
                                     " is not supported: the Redlock recipe other clients follow has exclusive "
                                     "locks only, one key at a time");
        return errc::invalid_argument;
    }

    // The keys of the fair scripts: a resource's lock and fence keys, then its queue's.
    std::vector<std::string> fair_queue_keys(std::string_view resource) const
    {
        auto keys = lock_and_fence_keys(resource);
        keys.push_back(queue_key(resource));
        keys.push_back(offers_key(resource));
        return keys;
    }

    // The keys of the shared scripts: a resource's lock and fence keys, then its
    // sharers and its writer's intent.
    std::vector<std::string> shared_keys(std::string_view resource) const
    {
        auto keys = lock_and_fence_keys(resource);
        keys.push_back(sharers_key(resource));
        keys.push_back(intent_key(resource));
        return keys;
    }

    // A shared grant's answer (detail::replies::answered_shared). A refusal for
    // another count says in `diag` which counts disagree: a programming error on one
    // of two clients, which the words should name.
    static result<answer> shared_answer(const resp::value& v, time_point sent, std::uint32_t permits, bool writer,
                                        diagnostics* diag)
    {
        std::optional<std::int64_t> held_with;
        auto out = detail::replies::answered_shared(v, sent, permits, &held_with);
        if (held_with && diag) {
            const auto n = *held_with;
            std::string words = "refused: the resource is held ";
            words += n == 0  ? "by a shared mutex's readers"
                     : n < 0 ? "with a count of permits the store does not read"
                             : "as a semaphore of " + std::to_string(n) + " permits";
            words += writer        ? ", which has no writers"
                     : permits == 0 ? ", not by readers"
                                    : ", not as one of " + std::to_string(permits);
            diag->set_client_message(std::move(words));
        }
        return out;
    }

    // '1' when releases publish on shard channels (a Redis Cluster).
    const char* sharded_flag() const { return router_->mode() == topology::cluster ? "1" : "0"; }

    std::uint16_t slot_of(std::string_view resource) const { return detail::hash_slot(lock_key(resource)); }

    // The slot of an encoded command's first argument (RESP: *N, $len name, $len arg).
    static std::uint16_t slot_of_command(std::string_view encoded)
    {
        std::string_view rest = encoded;
        for (int skip = 0; skip < 2; ++skip) { // the array header, then the name
            const auto line = rest.find("\r\n");
            if (line == std::string_view::npos)
                return 0;
            if (skip == 1) {
                std::size_t len = 0;
                const auto [p, ec] = std::from_chars(rest.data() + 1, rest.data() + line, len);
                if (ec != std::errc{} || rest.size() < line + 2 + len + 2)
                    return 0;
                rest.remove_prefix(line + 2 + len + 2);
            } else {
                rest.remove_prefix(line + 2);
            }
        }
        const auto line = rest.find("\r\n");
        std::size_t len = 0;
        if (line == std::string_view::npos || rest.empty() || rest[0] != '$')
            return 0;
        const auto [p, ec] = std::from_chars(rest.data() + 1, rest.data() + line, len);
        if (ec != std::errc{} || rest.size() < line + 2 + len)
            return 0;
        return detail::hash_slot(rest.substr(line + 2, len));
    }

    // EVALSHA, falling back to EVAL when the server does not know the script (after a
    // restart or SCRIPT FLUSH), which also caches it again.
    // `publish_first`: the script's messages should reach their subscribers before
    // this reply reaches the caller (see eval_on).
    awaitable<result<resp::value>> eval(script which, std::vector<std::string> keys, std::vector<std::string> args,
                                        diagnostics* diag, bool publish_first = false) const
    {
        return eval_on(router_, which, std::move(keys), std::move(args), diag, publish_first);
    }

    static awaitable<result<resp::value>> eval_on(router_ptr c, script which, std::vector<std::string> keys,
                                                  std::vector<std::string> args, diagnostics* diag,
                                                  bool publish_first = false)
    {
        const auto& s = source(which);
        // Only a cluster routes by slot: elsewhere the key's CRC16 is not computed.
        const auto slot = keys.empty() || c->mode() != topology::cluster ? std::uint16_t{0}
                                                                          : detail::hash_slot(keys.front());
        // Redis writes its pending replies client by client, the client that got
        // output last first, and a client already waiting to be written keeps its
        // place. A PING in the same write as the script makes the caller's reply
        // pending before the script runs, so what the script publishes goes out
        // first: a release wakes the waiter it hands the lock to before the
        // releaser, which would otherwise run first (and, on a busy machine, on the
        // same core as the server) and delay the message.
        static const std::string ping = resp::command_of("PING");
        auto replies = co_await c->exec(slot, script_command("EVALSHA", s.sha, keys, args), diag,
                                        publish_first ? std::string_view{ping} : std::string_view{});
        if (replies && replies.value().front().is_error() && replies.value().front().text.starts_with("NOSCRIPT"))
            replies = co_await c->exec(slot, script_command("EVAL", s.text, keys, args), diag);
        if (!replies)
            co_return replies.error();
        co_return detail::replies::checked(std::move(replies.value().front()), diag);
    }

    // EVALSHA sha numkeys keys... args... (or EVAL text ...), encoded into one allocation.
    static std::string script_command(std::string_view verb, std::string_view body,
                                      const std::vector<std::string>& keys, const std::vector<std::string>& args)
    {
        char digits[24];
        const char* digits_end = std::to_chars(digits, digits + sizeof digits, keys.size()).ptr;
        const std::string_view numkeys{digits, static_cast<std::size_t>(digits_end - digits)};
        std::size_t bytes = verb.size() + body.size() + numkeys.size() + 4 * resp::framing_bytes;
        for (const auto* part : {&keys, &args})
            for (const auto& p : *part)
                bytes += p.size() + resp::framing_bytes;
        std::string payload;
        payload.reserve(bytes);
        resp::append_array_header(payload, 3 + keys.size() + args.size());
        for (const auto fixed : {verb, body, numkeys})
            resp::append_bulk(payload, fixed);
        for (const auto* part : {&keys, &args})
            for (const auto& p : *part)
                resp::append_bulk(payload, p);
        return payload;
    }

    static awaitable<result<resp::value>> exec_on(router_ptr c, std::uint16_t slot, std::string encoded,
                                                  diagnostics* diag)
    {
        auto replies = co_await c->exec(slot, std::move(encoded), diag);
        if (!replies)
            co_return replies.error();
        co_return detail::replies::checked(std::move(replies.value().front()), diag);
    }

    // -- Replies: a pending request and the pure decoder of its answer (detail/replies.hpp) --

    // The one coroutine between a primitive and its request: awaits the reply and
    // decodes it (errors of the request pass through).
    template <class Decode>
    static auto decoded(awaitable<result<resp::value>> pending, Decode decode)
        -> awaitable<decltype(decode(std::declval<const resp::value&>()))>
    {
        auto reply = co_await std::move(pending);
        if (!reply)
            co_return reply.error();
        co_return decode(reply.value());
    }

    // decoded(), and a reply that makes no sense is described in `diag`: the reply in
    // the server's words, what was `expected` (a literal) in the client's.
    template <class Decode>
    static auto explained(awaitable<result<resp::value>> pending, Decode decode, diagnostics* diag,
                          const char* expected) -> awaitable<decltype(decode(std::declval<const resp::value&>()))>
    {
        auto reply = co_await std::move(pending);
        if (!reply)
            co_return reply.error();
        auto out = decode(reply.value());
        if (!out && out.error() == errc::protocol_error)
            unexpected(reply.value(), diag, expected);
        co_return out;
    }

    static void unexpected(const resp::value& reply, diagnostics* diag, const char* expected)
    {
        if (!diag)
            return;
        diag->set_server_message(detail::replies::described(reply));
        diag->set_client_message(std::string{"unexpected reply: "} + expected);
    }

    // -- Listing: SCAN each primary, read each page's locks ---------------------------

    static awaitable<result<std::vector<lock_listing>>> list_on(router_ptr r, detail::key_layout layout,
                                                                std::string prefix, diagnostics* diag)
    {
        auto nodes = co_await r->primaries(diag);
        if (!nodes)
            co_return nodes.error();
        const auto pattern = layout.plain() ? layout.pattern_beside(prefix, "holder") : layout.pattern(prefix, "lock");
        const auto count = std::to_string(scan_count);
        std::vector<lock_listing> out;
        for (const auto& node : nodes.value()) {
            std::string cursor = "0";
            // A server's SCAN ends (every key is visited once a full iteration is
            // done); one that hands out cursors forever is cut off, not followed.
            std::size_t pages = 0;
            do {
                if (++pages > max_scan_pages) {
                    if (diag)
                        diag->set_client_message("SCAN did not end after " + std::to_string(max_scan_pages) +
                                                 " pages");
                    co_return errc::protocol_error;
                }
                auto sent = co_await detail::router::exec_at(
                    node, resp::command_of("SCAN", cursor, "MATCH", pattern, "COUNT", count), diag);
                auto reply = sent ? detail::replies::checked(std::move(sent.value().front()), diag)
                                  : result<resp::value>{sent.error()};
                if (!reply) {
                    // Not reached, or refused (LOADING, ...): after a failover or a
                    // resharding the keys live elsewhere, which the next listing learns.
                    if (reply.error() == errc::store_unavailable)
                        r->relearn();
                    co_return reply.error();
                }
                auto page = detail::replies::scanned(reply.value());
                if (!page) {
                    unexpected(reply.value(), diag, "SCAN answers [cursor, [key, ...]]");
                    co_return page.error();
                }
                cursor = std::move(page.value().cursor);
                std::vector<std::string> ids;
                for (const auto& key : page.value().keys) {
                    auto id = layout.plain() ? layout.resource_beside(key, "holder") : layout.resource_of(key, "lock");
                    // lock() takes no other ids: a key outside them is not a lock of the library.
                    if (id && id->starts_with(prefix) && !validate_resource(*id))
                        ids.push_back(std::move(*id));
                }
                auto read = co_await survey_on(r, layout, std::move(ids), diag);
                if (!read)
                    co_return read.error();
                std::move(read.value().begin(), read.value().end(), std::back_inserter(out));
            } while (cursor != "0");
        }
        // A SCAN may return a key twice, and a slot migrating between two primaries
        // shows its keys on both.
        std::sort(out.begin(), out.end(),
                  [](const lock_listing& a, const lock_listing& b) { return a.resource < b.resource; });
        out.erase(std::unique(out.begin(), out.end(),
                              [](const lock_listing& a, const lock_listing& b) { return a.resource == b.resource; }),
                  out.end());
        co_return out;
    }

    // Reads the locks of `ids` (one SCAN page): one survey script in all, or in a
    // cluster one per hash slot (a script's keys share a slot), all sent at once so
    // that they share the connection's round trips. Each script has diagnostics of
    // its own (they run at once); the first failure's go to `diag`.
    static awaitable<result<std::vector<lock_listing>>> survey_on(router_ptr r, const detail::key_layout& layout,
                                                                  std::vector<std::string> ids, diagnostics* diag)
    {
        std::vector<std::vector<std::string>> groups;
        if (r->mode() != topology::cluster) {
            if (!ids.empty())
                groups.push_back(std::move(ids));
        } else {
            std::vector<std::pair<std::uint16_t, std::string>> by_slot;
            by_slot.reserve(ids.size());
            for (auto& id : ids) {
                const auto slot = detail::hash_slot(layout.lock_key(id));
                by_slot.emplace_back(slot, std::move(id));
            }
            std::sort(by_slot.begin(), by_slot.end());
            for (std::size_t i = 0; i < by_slot.size(); ++i) {
                if (i == 0 || by_slot[i].first != by_slot[i - 1].first)
                    groups.emplace_back();
                groups.back().push_back(std::move(by_slot[i].second));
            }
        }
        std::vector<diagnostics> words(groups.size());
        std::vector<awaitable<result<std::vector<lock_listing>>>> reads;
        reads.reserve(groups.size());
        for (std::size_t g = 0; g < groups.size(); ++g) {
            std::vector<std::string> keys;
            keys.reserve(3 * groups[g].size());
            for (const auto& id : groups[g]) {
                keys.push_back(layout.lock_key(id));
                if (layout.plain()) {
                    keys.push_back(layout.beside(id, "holder"));
                    continue;
                }
                keys.push_back(layout.key(id, "queue"));
                keys.push_back(layout.key(id, "offers"));
            }
            reads.push_back(explained(eval_on(r, layout.plain() ? script::survey_plain : script::survey, std::move(keys), {},
                                              &words[g]),
                                      [ids = std::move(groups[g])](const resp::value& v) mutable {
                                          return detail::replies::surveyed(v, std::move(ids));
                                      },
                                      &words[g], "the survey script answers one [owner, pttl, token, waiters] or "
                                                 "null per lock"));
        }
        auto done = co_await distlock::backend::when_all(std::move(reads));
        std::vector<lock_listing> out;
        for (std::size_t g = 0; g < done.size(); ++g) {
            if (!done[g]) {
                if (diag)
                    *diag = std::move(words[g]);
                co_return done[g].error();
            }
            std::move(done[g].value().begin(), done[g].value().end(), std::back_inserter(out));
        }
        co_return out;
    }

    // A grant is reported once config::wait_replicas replicas acknowledged it (WAIT),
    // else errc::not_replicated, a maybe-applied outcome: the claim gives the lock back
    // by owner token, as after a lost reply. Refusals pass through at once.
    // Not a coroutine: without config::wait_replicas (the default) the grant's own
    // awaitable is returned as it is, with no frame of its own around it.
    template <class T>
    awaitable<result<T>> replicated(std::string_view resource, awaitable<result<T>> pending, diagnostics* diag) const
    {
        if (cfg_.wait_replicas <= 0)
            return pending;
        return replicated_wait(router_, slot_of(resource), settings(), std::move(pending), diag);
    }

    template <class T>
    static awaitable<result<T>> replicated_wait(router_ptr c, std::uint16_t slot, const config& cfg,
                                                awaitable<result<T>> pending, diagnostics* diag)
    {
        auto got = co_await std::move(pending);
        if (cfg.wait_replicas <= 0 || !got)
            co_return got;
        if constexpr (std::is_same_v<T, answer>)
            if (!got.value().is_granted())
                co_return got;
        const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(cfg.wait_timeout).count();
        auto acks = co_await exec_on(c, slot, resp::command_of("WAIT", std::to_string(cfg.wait_replicas), std::to_string(ms)),
                                     diag);
        if (!acks) // the grant stands on the primary at least: maybe applied either way
            co_return acks.error() == condition::maybe_applied ? acks.error() : make_error_code(errc::not_replicated);
        const auto acknowledged = detail::replies::replicas(acks.value());
        if (!acknowledged)
            co_return acknowledged.error();
        if (acknowledged.value() < cfg.wait_replicas) {
            if (diag)
                diag->set_client_message("WAIT: " + std::to_string(acknowledged.value()) + " of " +
                                         std::to_string(cfg.wait_replicas) + " replicas acknowledged the grant in " +
                                         std::to_string(ms) + " ms");
            co_return errc::not_replicated;
        }
        co_return got;
    }

    // No resource named twice: a set's script takes each one once.
    static bool distinct(const std::vector<std::string>& resources)
    {
        // A multi-lock passes its set sorted and without repeats: one pass says so.
        if (std::adjacent_find(resources.begin(), resources.end(), std::greater_equal<>{}) == resources.end())
            return true;
        std::vector<std::string_view> sorted(resources.begin(), resources.end());
        std::sort(sorted.begin(), sorted.end());
        return std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end();
    }

    static awaitable<watcher> watch_on(router_ptr r, std::uint16_t slot, std::string ch, std::string addressee = {},
                                       bool takes_handovers = false, duration linger = duration::zero())
    {
        auto w = std::make_shared<distlock::backend::wakeup>(co_await asio::this_coro::executor, std::move(addressee));
        watcher out{std::move(r), slot, std::move(ch), std::move(w), takes_handovers, linger};
        (void)co_await out.resubscribe();
        co_return out;
    }

    const owner_token listener_ = owner_token::generate(); // names this store's fair waiter channels
    detail::key_layout keys_{cfg_.key_prefix, cfg_.hash_tags,
                             cfg_.dialect == redis::dialect::plain}; // after cfg_ (a base): built from the settings
    router_ptr router_;

protected:
    ~basic_store() = default;
    void stop() noexcept;
};

template <class Unused>
basic_store<Unused>::basic_store(executor_type ex, config cfg)
    : base{std::move(ex), std::move(cfg), "distlock::redis::store", true}
{
    auto tls = transport::make_tls_context(cfg_.endpoint());
    if (!tls)
        throw std::system_error{tls.error(), "distlock::redis::store: TLS settings"};
    router_ = std::make_shared<detail::router>(distlock::backend::make_strand(ex_), cfg_, tls.value());
    (void)detail::slot_tags::table(); // built here, once per process, not in a first request
}

template <class Unused>
void basic_store<Unused>::stop() noexcept
{
    router_->close();
}

/// The Redis store: one server, a cluster, or one node of a Redlock quorum. See
/// basic_store for its documentation.
using store = backend::store_shell<basic_store<>>;

static_assert(put_if_absent_store<store>);
static_assert(inspectable_store<store>);
static_assert(owner_checked_store<store>);
static_assert(fencing_counter_store<store>);
static_assert(release_notifying_store<store>);
static_assert(batch_release_store<store>);
static_assert(clock_fenced_store<store>);
static_assert(enumerable_store<store>);
static_assert(revocable_store<store>);
static_assert(shared_lease_store<store>);
static_assert(electing_store<store>);
static_assert(lock_delay_store<store>);

} // namespace distlock::redis
