// distlock/backend/contract.hpp: the store contract: what a store provides, as
// concepts, and the requests the core hands it.
//
// A store models some of these primitives, not necessarily all; each acquisition
// policy names the ones it needs, so a wrong combination fails to compile with the
// name of the missing requirement. Every primitive is a coroutine returning
// asio::awaitable<result<...>>; arguments passed by reference must stay alive until
// the awaitable completes (they do with `co_await`).
//
// Error contract for every primitive:
//  - errc::contended / errc::not_owner: the store answered, and the answer is no.
//  - errc::store_unavailable: the request was not applied (connection refused, ...).
//  - errc::outcome_unknown: the request may have been applied (reply lost or abandoned
//    after cancellation). Callers clean up by owner token.
//  - errc::protocol_error: the reply made no sense; treat like outcome_unknown.
#pragma once

#include <distlock/util/config.hpp>
#include <distlock/backend/deferred.hpp>
#include <distlock/backend/lifetime.hpp>
#include <distlock/backend/observer_ref.hpp>
#include <distlock/diagnostics.hpp>
#include <distlock/claim.hpp>
#include <distlock/clock.hpp>
#include <distlock/handover.hpp>
#include <distlock/options.hpp>
#include <distlock/owner_token.hpp>
#include <distlock/result.hpp>

#include <asio/any_io_executor.hpp>
#include <asio/awaitable.hpp>

#include <concepts>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>
#include <string_view>

namespace distlock {

/// Anything with an executor on which its operations run.
template <class S>
concept store = requires(S& s) {
    { s.get_executor() } -> std::convertible_to<asio::any_io_executor>;
};

/// One request against a store: which resource, for which owner, for how long.
struct lock_request {
    std::string_view resource;
    owner_token owner;
    duration ttl{};
    /// Where a failure's words go (the caller's, for the attempt of a lock() given
    /// one), or nullptr. Stores whose primitives take a trailing `diagnostics*` get it.
    diagnostics* diag = nullptr;
    /// For a release on a clock-fenced store (clock_fenced_store): the token the
    /// resource's counter is raised to in the same step (a quorum lease's token).
    std::optional<fence_token> floor = std::nullopt;
};

/// What a claim is opened for.
struct claim_request {
    std::string resource;
    lock_options options;
    backend::observer_ref observe;
    /// The lock() caller's diagnostics, or nullptr: attempts made while the caller
    /// waits fill it; background work (abandon(), a hold's releases) never does.
    diagnostics* diag = nullptr;
    /// The call waits when the lock is held (lock(), lock_until()); false for
    /// try_lock(), whose one try must leave nothing behind.
    bool waits = true;
    /// The value an election's campaign stands with (nullopt for a plain lock() call),
    /// for a store whose queue entry carries it from its create, where foreign
    /// participants read it (ZooKeeper's Curator LeaderLatch dialect), or whose grant
    /// records it as it is taken (PostgreSQL's advisory locks); other stores keep the
    /// value with the grant once it holds (electing_store::proclaim).
    std::optional<std::string> candidate = std::nullopt;
};

/// What a fenced write needs of the lock it is made under: the resource, the owner
/// token of the grant and its fencing token (a distlock::lease models it), so that a
/// store's fenced writes take the lease without depending on it.
template <class H>
concept fence_holder = requires(const H& h) {
    { h.resource() } -> std::convertible_to<std::string_view>;
    { h.owner() } -> std::convertible_to<const owner_token&>;
    { h.fence() } -> std::convertible_to<fence_token>;
};

/// A store that owns the work its leases start (docs/architecture.md, "Lifetimes"):
/// every store of the library models it, through backend::store_shell.
///  - `lifetime()`: what the core reaches the store through (backend::store_ref), so
///    that work left running never touches a store that is gone.
///  - `operation_timeout()`: the longest one primitive runs before the store completes
///    it itself (connecting included, and whatever the store retries inside one
///    primitive); an attempt that surely ends before the caller's deadline needs no
///    timer of its own. Computed with saturating arithmetic (clock.hpp), so that any
///    setting the store accepted gives a defined bound.
///  - `close()`: refuses new work, finishes the releases still pending, ends the
///    leases still held, then closes the connections, so that io.run() can return.
template <class S>
concept managed_store = store<S> && requires(S& s, const S& cs) {
    { cs.lifetime() } -> std::convertible_to<std::shared_ptr<backend::lifetime>>;
    { cs.operation_timeout() } -> std::convertible_to<duration>;
    { s.close() } -> std::same_as<awaitable<void>>;
};

/// Put-if-absent with a TTL and an owner value, which also gives the resource a new
/// fencing token, above every earlier one, in the same atomic step and returns it
/// (Redis: SET NX PX and the next token in one script).
template <class S>
concept put_if_absent_store = store<S> && requires(S& s, std::string_view resource,
                                                   const owner_token& owner, duration ttl) {
    { s.put_if_absent(resource, owner, ttl) } -> std::same_as<awaitable<result<fence_token>>>;
};

/// put_if_absent that answers with data: granted (fence) or held, with when the
/// holder's lock runs out if the store knows (Redis returns the holder's PTTL), so
/// that waiting strategies need not guess.
template <class S>
concept answering_put_store = store<S> && requires(S& s, std::string_view resource, const owner_token& owner,
                                                   duration ttl) {
    { s.put_if_absent_answer(resource, owner, ttl) } -> std::same_as<awaitable<result<answer>>>;
};

/// Compare-owner-and-extend and compare-owner-and-delete.
template <class S>
concept owner_checked_store = store<S> && requires(S& s, std::string_view resource,
                                                   const owner_token& owner, duration ttl) {
    { s.extend(resource, owner, ttl) } -> std::same_as<awaitable<result<void>>>;
    { s.release(resource, owner) } -> std::same_as<awaitable<result<void>>>;
};

/// A conditional write: succeeds only if the record is absent or expired
/// (expected_version empty) or carries the given version; the new version, one
/// above the old, is the fencing token (DynamoDB ConditionExpression, etcd txn).
template <class S>
concept conditional_write_store =
    store<S> && requires(S& s, std::string_view resource, const owner_token& owner, duration ttl,
                         std::optional<fence_token> expected_version) {
        {
            s.conditional_write(resource, owner, ttl, expected_version)
        } -> std::same_as<awaitable<result<fence_token>>>;
    };

/// A per-resource fencing token that only ever grows (a counter, or the Redis
/// store's clock-derived tokens, which the resources of a hash slot share: raising
/// one raises them all).
template <class S>
concept fencing_counter_store = store<S> && requires(S& s, std::string_view resource,
                                                     fence_token floor) {
    /// Increments and returns the counter.
    { s.next_fence(resource) } -> std::same_as<awaitable<result<fence_token>>>;
    /// Raises the counter to at least `floor`; returns its value afterwards.
    { s.raise_fence(resource, floor) } -> std::same_as<awaitable<result<fence_token>>>;
};

/// A store whose fencing tokens follow its clock: a resource's next token is at least
/// the server's clock, counted in `fence_ticks_per_second` (the Redis store: its
/// TIME in microseconds), so that a token handed out a TTL ago is below any token
/// handed out now, as long as the servers' clocks agree within that. Its release can
/// raise the resource's token to a floor in the same step. A quorum of such stores
/// aligns its nodes' tokens as it releases, with no round trip of its own after a
/// grant (acquire::quorum; docs/guarantees.md says what it assumes).
template <class S>
concept clock_fenced_store =
    owner_checked_store<S> && fencing_counter_store<S> &&
    requires(S& s, std::string_view resource, const owner_token& owner, fence_token floor) {
        { S::fence_ticks_per_second } -> std::convertible_to<std::uint64_t>;
        { s.release_raising(resource, owner, floor) } -> std::same_as<awaitable<result<void>>>;
    };

/// Put-if-absent on several resources in one atomic step (one round trip), all or
/// nothing; one fencing token per resource, in the given order.
template <class S>
concept batch_put_if_absent_store =
    put_if_absent_store<S> && requires(S& s, const std::vector<std::string>& resources, const owner_token& owner,
                                       duration ttl) {
        { s.put_if_absent_all(resources, owner, ttl) } -> std::same_as<awaitable<result<std::vector<fence_token>>>>;
    };

/// Owner-checked release of several resources in one atomic step (one round trip):
/// for each resource, in the given order, true when `owner`'s lock was released,
/// false when `owner` did not hold it (what errc::not_owner says for one). How a
/// set taken in one step goes back in one step.
template <class S>
concept batch_release_store =
    owner_checked_store<S> && requires(S& s, const std::vector<std::string>& resources, const owner_token& owner) {
        { s.release_all(resources, owner) } -> std::same_as<awaitable<result<std::vector<bool>>>>;
    };

/// A store that tells waiters when a lock is released, so they need not poll.
/// `co_await watch(resource)` completes once the store listens (before the caller's
/// next try, so a release between a failed try and the wait is not missed); the
/// watcher's `wait(until)` completes with true when a release was seen, false at
/// `until`. Destroying the watcher stops listening.
template <class S>
concept release_notifying_store = store<S> && requires(S& s, std::string_view resource) {
    typename backend::awaited<decltype(s.watch(resource))>::type;
    requires requires(typename backend::awaited<decltype(s.watch(resource))>::type& w, time_point until) {
        { w.wait(until) } -> std::same_as<awaitable<bool>>;
    };
};

/// A TTL store that keeps a fair queue of waiters per resource (the Redis store's
/// scripts): a lock is granted only to the head of its queue, a release wakes the
/// head only, and a waiter that stops asking loses its place after a bounded time.
/// What acquire::fair runs on. Each lock() call is one waiter (`waiter`, kept across
/// its attempts); each attempt has its own owner token, as with setnx.
///
/// A store may also hand the lock over: a release grants it to the head at once, as
/// owner `waiter`, when the head listens. Its watcher's `take_handover()` then
/// returns the grant (std::optional<handover>), and a later try of the waiter is
/// answered answer::handed_over.
template <class S>
concept fair_queue_store =
    owner_checked_store<S> &&
    requires(S& s, const S& cs, std::string_view resource, const owner_token& waiter, const owner_token& owner,
             duration ttl, std::uint64_t try_number, bool join) {
        /// Granted only if the lock is free and no one waits or `waiter` is the head.
        /// `try_number` counts the tries of the lock() call from 1; with `join`, the
        /// try takes or keeps `waiter`'s place in line (a first try that only asks
        /// does not).
        { s.put_if_first(resource, waiter, owner, ttl, try_number, join) } -> std::same_as<awaitable<result<answer>>>;
        /// Releases by owner and wakes the head waiter only (or hands it the lock).
        { s.release_to_head(resource, owner) } -> std::same_as<awaitable<result<void>>>;
        /// Gives up `waiter`'s place, and a lock handed to it; a head that leaves a
        /// free lock passes it on to the next.
        { s.leave_queue(resource, waiter) } -> std::same_as<awaitable<result<void>>>;
        /// How often a waiter asks again, at the least, to keep its place.
        { cs.queue_refresh() } -> std::convertible_to<duration>;
        /// Listens for releases addressed to `waiter` or to everyone.
        typename backend::awaited<decltype(s.watch(resource, waiter))>::type;
    };

/// A TTL store that keeps, per resource, shared holders beside the exclusive one,
/// each with its own owner and TTL, and one counter for the fences of both: what
/// acquire::shared_setnx runs on (the shared mutex, the semaphore; docs/shared.md).
///  - put_shared(resource, owner, ttl, permits): a shared grant. With `permits` 0 (a
///    shared mutex's reader) granted unless the resource is held exclusively or a
///    writer waits (its intent, below). With `permits` N > 0 (a semaphore of N)
///    granted while fewer than N hold, as the lowest permit number (slot) no live
///    holder has; the store keeps N with the resource while anyone holds it, and a
///    put with another N is refused with errc::invalid_argument, so two clients that
///    disagree on N get an error, never a mix.
///  - put_exclusive(resource, waiter, owner, ttl): granted when nobody holds the
///    resource and no other waiter's intent is live. Otherwise `waiter` (one per
///    lock() call, kept across its tries) takes the resource's writer intent if none
///    is live, or renews its own, for `ttl`: while it lasts new readers are refused,
///    so readers cannot starve a writer.
///  - Every grant, shared or exclusive, takes the next value of the resource's one
///    counter as its fence: an exclusive grant's fence exceeds that of every grant
///    completed before it was asked for.
///  - extend_shared / release_shared(resource, owner): owner-checked, for a holder of
///    either mode; a release wakes the resource's watchers (release_notifying_store).
///  - withdraw(resource, waiter): gives up `waiter`'s intent (a lock() that ended).
///  - downgrade(resource, owner): the exclusive holder `owner` holds on in shared mode,
///    in the same step, so that no writer comes between.
template <class S>
concept shared_lease_store =
    store<S> &&
    requires(S& s, std::string_view resource, const owner_token& owner, const owner_token& waiter, duration ttl,
             std::uint32_t permits) {
        { s.put_shared(resource, owner, ttl, permits) } -> std::same_as<awaitable<result<answer>>>;
        { s.put_exclusive(resource, waiter, owner, ttl) } -> std::same_as<awaitable<result<answer>>>;
        { s.extend_shared(resource, owner, ttl) } -> std::same_as<awaitable<result<void>>>;
        { s.release_shared(resource, owner) } -> std::same_as<awaitable<result<void>>>;
        { s.withdraw(resource, waiter) } -> std::same_as<awaitable<result<void>>>;
        { s.downgrade(resource, owner) } -> std::same_as<awaitable<result<void>>>;
    };

/// What a store says about one resource's lock, read without taking it (for a
/// status command, and for stores that may take over a lock only after seeing it
/// unchanged for a full lease).
struct lock_info {
    bool held = false;                   ///< A live lock exists.
    std::string owner;                   ///< The holder's owner token, shortened (8 hex digits), when held.
    fence_token fence = 0;               ///< The holder's token when held; else the counter's last value.
    std::optional<duration> remaining;   ///< Time left, where the store keeps a TTL.
    std::optional<fence_token> version;  ///< The record's version, where the store versions records.
};

/// A store that can read a resource's lock without taking it.
template <class S>
concept inspectable_store = store<S> && requires(S& s, std::string_view resource) {
    { s.read(resource) } -> std::same_as<awaitable<result<lock_info>>>;
};

/// One held lock, as a store's listing reports it.
struct lock_listing {
    std::string resource;               ///< The resource id, as lock() was given it.
    lock_info lock;                     ///< The holder (owner shortened), its fence, time left or version.
    std::optional<std::size_t> waiters; ///< Entries queued behind the holder, where the store keeps a queue.
};

/// A store that can enumerate the locks it holds: `list(prefix)` returns every lock
/// held now whose resource id begins with `prefix` (every lock for an empty prefix),
/// sorted by resource id. It only reads: nothing is taken, changed or waited for. A
/// listing is a snapshot made of several reads on most stores: a lock taken or
/// released while it is made may or may not be in it.
template <class S>
concept enumerable_store = store<S> && requires(S& s, std::string_view prefix) {
    { s.list(prefix) } -> std::same_as<awaitable<result<std::vector<lock_listing>>>>;
};

/// A store on which an operator can take a lock back: `revoke(resource, fence)` frees
/// the lock only if it is still the grant that carries `fence` (the check and the
/// removal are one atomic step on the server), and answers errc::not_owner, the lock
/// untouched, when it is free or another grant's. Waiters are woken as by a release.
/// The holder hears of it at its next renewal (its lease is lost()); nothing stops a
/// holder that does not renew from acting until its validity ends: fences protect
/// the data.
template <class S>
concept revocable_store = store<S> && requires(S& s, std::string_view resource, fence_token fence) {
    { s.revoke(resource, fence) } -> std::same_as<awaitable<result<void>>>;
};

/// A store that keeps lock-delays (lock_options::lock_delay, docs/lock_delay.md): after
/// an exclusive grant ends without a release, the resource refuses new grants for the
/// delay, whoever asks.
///  - arm_delay(resource, owner, fence, delay): marks the exclusive grant `owner` holds
///    on `resource` (its fence) so that, if it ends without a release (its TTL runs
///    out, its session ends), no grant of the resource is made until `delay` after that
///    end. Owner-checked in one step on the server: errc::not_owner when the grant is
///    gone. The mark lasts as long as the grant (extensions keep it); a release of the
///    grant removes it in the same step; a revoke ends the grant as an expiry does
///    (its holder may still have writes in flight), so the tombstone follows. The
///    tombstone expires by itself.
///  - While a tombstone lasts, every acquisition of the resource (exclusive or shared)
///    answers answer::delayed(until), or errc::lock_delayed from primitives that
///    answer with a fence only; `until` by this process's clock.
template <class S>
concept lock_delay_store = store<S> && requires(S& s, std::string_view resource, const owner_token& owner,
                                                fence_token fence, duration delay) {
    { s.arm_delay(resource, owner, fence, delay) } -> std::same_as<awaitable<result<void>>>;
};

/// A lock_delay_store whose setting may keep none (a dialect whose foreign clients
/// could not honour one): lock_delay_refusal() says why, or is empty when it keeps
/// them. A mutex asked for a lock-delay refuses it before any I/O, with that reason.
template <class S>
concept lock_delay_refusing_store = lock_delay_store<S> && requires(const S& s) {
    { s.lock_delay_refusal() } -> std::convertible_to<std::string_view>;
};

/// Who leads an election now, as a store reads it (electing_store::leader()).
struct leader_info {
    fence_token epoch = 0;             ///< The leader's grant's fence; 0 when nobody holds the lock.
    std::string owner;                 ///< The leader's owner token, shortened (8 hex digits).
    std::optional<std::string> value;  ///< What the leader proclaimed for this grant; nullopt until it has.
    std::optional<duration> remaining; ///< Time left of the grant, where the store keeps a TTL.
};

/// A store that keeps a value with a grant: what an election's terms stand on
/// (basic_leader_election).
///  - proclaim(resource, owner, epoch, value): stores `value` with the grant `owner`
///    holds on `resource`, whose fence is `epoch`; the check that the grant is still
///    held and the write are one atomic step on the server, so that a leader that lost
///    its term never overwrites its successor's value: errc::not_owner then.
///  - leader(resource): the holder of the lock on `resource` now, with the value
///    proclaimed for that very grant (a value left from an earlier grant is never
///    reported as the current leader's).
template <class S>
concept electing_store = store<S> && requires(S& s, std::string_view resource, const owner_token& owner,
                                              fence_token epoch, std::string_view value) {
    { s.proclaim(resource, owner, epoch, value) } -> std::same_as<awaitable<result<void>>>;
    { s.leader(resource) } -> std::same_as<awaitable<result<leader_info>>>;
};

/// Where an entry of a resource's queue stands (see session_queue_store).
struct queue_place {
    fence_token entry = 0;                  ///< The entry's creation sequence: its fencing token.
    bool first = false;                     ///< The oldest entry: its owner holds the lock.
    std::optional<fence_token> predecessor; ///< The entry just before it, when not first.
    /// The oldest entry, which does not hold yet: the resource is in its lock-delay
    /// (lock_delay_store) until then, by this process's clock. The entry keeps its
    /// place; asked again at that time, it holds.
    std::optional<time_point> delayed_until = std::nullopt;
};

/// A store with client sessions and a fair queue per resource (etcd leases and
/// revisions, ZooKeeper sessions and sequential ephemeral nodes): one entry per
/// waiter, bound to the client's session and ordered by creation; the oldest entry
/// holds the lock; an entry goes when its owner deletes it or its session ends. One
/// session (one keepalive) serves every lock of the client.
template <class S>
concept session_queue_store =
    store<S> && requires(S& s, std::string_view resource, const owner_token& owner, fence_token entry,
                         time_point until, std::weak_ptr<session_listener> listener) {
        /// Creates the owner's entry, or finds it if it exists (so a lost reply can be
        /// retried without queueing twice), and says where it stands.
        { s.enqueue(resource, owner) } -> std::same_as<awaitable<result<queue_place>>>;
        /// True once entry `entry` is gone, false at `until`.
        { s.wait_gone(resource, entry, until) } -> std::same_as<awaitable<bool>>;
        /// Deletes the owner's entry: leaves the queue, or releases the lock.
        { s.dequeue(resource, owner) } -> std::same_as<awaitable<result<void>>>;
        /// Binds a lease to the session that keeps `entry`; returns until when the
        /// session is known alive (nullopt: it is gone). The listener hears of every
        /// change of the session's state.
        { s.bind(resource, entry, listener) } -> std::same_as<std::optional<time_point>>;
    };

/// A session queue store whose entries can carry an election candidate's value from
/// their create (claim_request::candidate), for a layout where foreign participants
/// read the value there (ZooKeeper's Curator LeaderLatch dialect). The session queue
/// policy enqueues through it when a campaign names a value.
template <class S>
concept candidate_queue_store =
    session_queue_store<S> && requires(S& s, std::string_view resource, const owner_token& owner, std::string_view value) {
        { s.enqueue_candidate(resource, owner, value) } -> std::same_as<awaitable<result<queue_place>>>;
    };

/// Where an entry of a resource's queue stands when entries take shared grants (see
/// shared_queue_store).
struct shared_place {
    fence_token entry = 0;                 ///< The entry's creation sequence: its fencing token.
    bool granted = false;                  ///< The entry holds, by the rules of its mode.
    std::optional<std::uint32_t> slot;     ///< A granted permit's number.
    /// The entry would hold, but the resource is in its lock-delay until then (see
    /// queue_place); granted is false meanwhile.
    std::optional<time_point> delayed_until = std::nullopt;
};

/// A session store whose queue entries take shared grants too (etcd, ZooKeeper, the
/// memory session store): what acquire::shared_queue runs on.
///  - enqueue_shared(resource, owner, mode, permits): creates the owner's entry in
///    `mode`, or finds it (a lost reply retried queues once), and says whether it
///    holds: an exclusive entry when it is the oldest; a shared one (permits 0) when
///    no exclusive entry is older, so a reader waits only for earlier writers and a
///    writer for everyone earlier; a permit (permits N) when fewer than N entries are
///    older, with the lowest number (slot) no other holder of the resource has. Every
///    entry of a resource must agree on N: another N is refused with
///    errc::invalid_argument.
///  - wait_turn(resource, entry, until): true once an entry whose going may let
///    `entry` hold is gone (for a permit, any older one), false at `until`.
template <class S>
concept shared_queue_store =
    session_queue_store<S> && requires(S& s, std::string_view resource, const owner_token& owner, lock_mode mode,
                                       std::uint32_t permits, fence_token entry, time_point until) {
        { s.enqueue_shared(resource, owner, mode, permits) } -> std::same_as<awaitable<result<shared_place>>>;
        { s.wait_turn(resource, entry, until) } -> std::same_as<awaitable<bool>>;
    };

} // namespace distlock
