// distlock/etcd/store.hpp: etcd as a distlock store: session leases, a fair queue per
// resource ordered by create revision, the holder key's create revision as the fence.
//
// Design note: the recipe of etcd's own concurrency.Mutex, with the cases its users
// hit made correct.
//  - Each lock() call puts its own key <prefix><escaped id>/<owner token> (keys.hpp)
//    with the session's lease, only if absent (txn compare create_revision == 0).
//    The same txn reads the queue's two newest keys: when the new key is alone it
//    holds the lock (one round trip), else the key before it is its predecessor.
//    When the key exists already (the reply of the create was lost), the txn reads
//    it back and the queue's oldest key instead: never a second queue entry. A call
//    trying again after a wake-up, whose key this session made, reads instead of
//    writing (one read-only txn of two ranges). A key left by an earlier session of this
//    store (one given up as in doubt) is deleted and made again, at the back.
//  - The holder is the key with the lowest create revision. A waiter watches only
//    its predecessor's key, from the revision of the read that found it, for its
//    deletion (one release wakes one waiter), then looks again. The fence is the
//    holder key's create revision: revisions are cluster-wide and only grow, across
//    leaders, so every acquisition of a resource has a larger one.
//  - A lease is bound to the store's session (session.hpp): it is valid while the
//    session's keepalives are answered, and its loss is pushed to it.
//  - Releasing, leaving the queue and cleaning up after a lost reply delete the key
//    by its name (which only this lock() call uses).
//  - Shared grants (the shared mutex, the semaphore: shared_queue_store) are entries of
//    the same queue, one per lock() call, with their mode in the value
//    (entries.hpp): a mutex and a shared mutex's writer on one resource exclude each
//    other. The creating txn reads the whole queue (values too); the entry holds by
//    the rules of its mode. A permit that holds writes its slot into its value before
//    it is granted, in a txn that applies only if the queue is unwritten since the
//    read the slot was chosen from. A waiting entry watches the keys whose going may
//    let it hold: a reader the newest writer before it, a writer its predecessor, a
//    permit of N the queue's N oldest keys (one watch over the queue's range).
//  - Listing is one range over the keys of the ids that begin with the prefix (keys
//    only: the owner is in the key), grouped back by resource. Revoking reads the
//    queue's oldest key, for its name, then deletes it in a txn that holds only while
//    it is still the key created at the fence and no key of the queue is older; the
//    session tells the holder at its next keepalive (session.hpp).
//  - The queue is the one etcd's concurrency.Mutex keeps (Go's clientv3/concurrency,
//    `etcdctl lock`): its keys are <queue prefix><lease ID in hex>, valued "", and it
//    holds when its key is the oldest. Such a key, or any value distlock does not
//    write, is a foreign exclusive entry (entries.hpp): it holds the lock when it is
//    the oldest, a reader waits for it, and the key behind it watches it. config's
//    dialect says which queue prefix a resource id gets (dialect.hpp): the escaped
//    id by default, the id verbatim under key_dialect::concurrency.
//  - Lock-delays (keys.hpp): a holder's mark is a key beside the queue, outside every
//    queue's range, without a lease, put in a txn that checks the holder's key; a
//    release deletes it in its own txn. etcd writes nothing when a lease expires, so
//    the queue's next head, which reads the mark in the txns it sends anyway, turns a
//    mark whose holder is gone into a tombstone bound to a lease of the delay, guarded
//    by the mark's mod revision; the server deletes it when that lease expires.
#pragma once

#include <distlock/backend.hpp>
#include <distlock/etcd/config.hpp>
#include <distlock/etcd/detail/client.hpp>
#include <distlock/etcd/detail/entries.hpp>
#include <distlock/etcd/detail/prefixes.hpp>
#include <distlock/etcd/detail/keys.hpp>
#include <distlock/etcd/detail/replies.hpp>
#include <distlock/etcd/detail/session.hpp>
#include <distlock/etcd/error.hpp>
#include <distlock/policy/queue.hpp>
#include <distlock/policy/shared.hpp>

#include <asio/any_io_executor.hpp>

#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace distlock::etcd {

/// An etcd cluster used as a lock store. Models session_queue_store,
/// shared_queue_store, inspectable_store, enumerable_store, revocable_store,
/// electing_store and lock_delay_store; its default acquisition is acquire::session_queue, so
/// `basic_distributed_mutex<etcd::store>`
/// queues fairly, needs no watchdog, and its leases end with the store's session; a
/// shared mutex's and a semaphore's is acquire::shared_queue, in the same queue.
///
/// \par Thread safety
/// Safe to use from several threads.
///
/// \par Object lifetimes
/// Every operation owns the client and session it uses once started, so the store
/// may be destroyed while one is in flight. close() finishes pending releases,
/// revokes the session's lease (its keys go at once) and closes the connections, so
/// io.run() returns; the destructor stops the keepalive and leaves the lease to
/// expire on the server within its TTL.
// Used through backend::store_shell (see there why stores are templates).
template <class Unused = void>
class basic_store : public backend::store_base<config> {
    using base = backend::store_base<config>;

public:
    using default_acquire_policy = acquire::session_queue;
    using default_shared_acquire_policy = acquire::shared_queue;

    /// Throws std::system_error (errc::invalid_argument) for invalid settings or TLS
    /// files that cannot be loaded; connecting happens on first use.
    /// Also refused: a prefix that nests with one another store of this process uses
    /// on the same member ("app/" and "app/a/"): their resources would block each other.
    basic_store(executor_type ex, config cfg);

    /// The longest one primitive runs: a lease grant, then up to two requests.
    duration operation_timeout() const noexcept
    {
        return saturating_mul(saturating_add(cfg_.connect_timeout, cfg_.request_timeout), 3);
    }

    // -- session_queue_store ---------------------------------------------------------

    awaitable<result<queue_place>> enqueue(std::string_view resource, const owner_token& owner,
                                           diagnostics* diag = nullptr)
    {
        if (auto ec = checked_resource(resource, diag))
            return backend::failed<queue_place>(ec);
        auto queue = queue_of(resource);
        auto key = queue + owner.to_hex();
        return enqueued(client_, session_, life_, std::move(queue), std::move(key), owner.to_hex(), diag);
    }

    awaitable<bool> wait_gone(std::string_view resource, fence_token entry, time_point until)
    {
        return waited(client_, session_, queue_of(resource), entry, until);
    }

    awaitable<result<void>> dequeue(std::string_view resource, const owner_token& owner, diagnostics* diag = nullptr)
    {
        if (auto ec = checked_resource(resource, diag))
            return backend::failed<void>(ec);
        const auto queue = queue_of(resource);
        auto key = queue + owner.to_hex();
        session_->forget(key);
        if (auto mark = session_->armed_mark(key)) // released: its lock-delay mark goes in the same txn
            return released(client_, session_, std::move(key), detail::delay_mark_key(queue), std::move(*mark), diag);
        return deleted(client_, std::move(key), diag);
    }

    std::optional<time_point> bind(std::string_view, fence_token entry, std::weak_ptr<session_listener> listener)
    {
        if (entry > static_cast<fence_token>(INT64_MAX))
            return std::nullopt;
        return session_->bind(static_cast<std::int64_t>(entry), std::move(listener));
    }

    // -- lock_delay_store ----------------------------------------------------------------

    /// Marks the exclusive grant `owner` holds on `resource` (its key created at
    /// `fence`) for a lock-delay of `delay`, rounded up to whole milliseconds: one txn
    /// that puts the mark (keys.hpp: lock-delays) only while that key still exists as
    /// created at `fence`; errc::not_owner otherwise. If the key then goes without a
    /// release (its session ends, it is revoked), the next head of the queue turns the
    /// mark into a tombstone of the delay rounded up to whole seconds (docs/etcd.md).
    awaitable<result<void>> arm_delay(std::string_view resource, const owner_token& owner, fence_token fence,
                                      duration delay, diagnostics* diag = nullptr)
    {
        if (auto ec = checked_resource(resource, diag))
            return backend::failed<void>(ec);
        const auto ms = std::chrono::ceil<std::chrono::milliseconds>(delay).count();
        if (delay <= duration::zero() || ms > detail::max_delay_mark_ms)
            return backend::failed<void>(distlock::errc::invalid_argument);
        if (fence == 0 || fence > static_cast<fence_token>(INT64_MAX)) // no key was created there
            return backend::failed<void>(distlock::errc::not_owner);
        const auto queue = queue_of(resource);
        const auto entry = static_cast<std::int64_t>(fence);
        session_->arming(queue + owner.to_hex(), detail::delay_mark_value(owner.to_hex(), entry, ms));
        return proclaimed(client_, detail::arm_delay_request(queue, owner.to_hex(), entry, ms), diag);
    }

    // -- shared_queue_store ----------------------------------------------------------

    /// Creates the owner's entry in `mode` (with `permits`), or finds it, and says
    /// whether it holds (entries.hpp has the rules and the value layout).
    /// errc::invalid_argument when an older shared entry counts permits otherwise; the
    /// entry is deleted then. A concurrency.Mutex's key is an exclusive entry to
    /// readers and permits alike (entries.hpp); the Mutex waits for every older key.
    awaitable<result<shared_place>> enqueue_shared(std::string_view resource, const owner_token& owner,
                                                   lock_mode mode, std::uint32_t permits, diagnostics* diag = nullptr)
    {
        if (auto ec = checked_resource(resource, diag))
            return backend::failed<shared_place>(ec);
        auto queue = queue_of(resource);
        auto key = queue + owner.to_hex();
        return shared_enqueued(client_, session_, std::move(queue), std::move(key), owner.to_hex(), mode, permits,
                               diag);
    }

    /// True once a key whose going may let the entry created at `entry` hold is gone,
    /// or when it holds or is gone itself; false at `until`.
    awaitable<bool> wait_turn(std::string_view resource, fence_token entry, time_point until)
    {
        return turned(client_, queue_of(resource), entry, until);
    }

    /// Reads the lock on `resource` without taking it: the queue's oldest key (owner,
    /// fence) and its lease's time left; not held: the cluster's revision as the fence
    /// (the next holder's is larger).
    awaitable<result<lock_info>> read(std::string_view resource, diagnostics* diag = nullptr)
    {
        if (auto ec = checked_resource(resource, diag))
            return backend::failed<lock_info>(ec);
        return inspected(client_, queue_of(resource), diag);
    }

    /// The locks held now whose resource ids begin with `prefix` (every lock for an
    /// empty one), sorted by id: each queue's oldest key (owner, fence, version = the
    /// fence) and the keys behind it as waiters; no time left (a lease's would cost a
    /// request per lock). One range request, so one revision's snapshot.
    awaitable<result<std::vector<lock_listing>>> list(std::string_view prefix, diagnostics* diag = nullptr)
    {
        return listed(client_, settings().prefix, std::string{prefix}, settings().dialect, diag);
    }

    /// Frees the lock on `resource` if it is still the grant that carries `fence`
    /// (the queue's oldest key, created at `fence`), else errc::not_owner with the
    /// queue untouched: a waiter's entry is not the lock. The check and the deletion
    /// are one txn; the waiter behind is woken as by a release, and the holder's lease
    /// is lost at its session's next keepalive.
    awaitable<result<void>> revoke(std::string_view resource, fence_token fence, diagnostics* diag = nullptr)
    {
        if (auto ec = checked_resource(resource, diag))
            return backend::failed<void>(ec);
        if (fence == 0 || fence > static_cast<fence_token>(INT64_MAX)) // no key was created there
            return backend::failed<void>(distlock::errc::not_owner);
        return revoked(client_, queue_of(resource), static_cast<std::int64_t>(fence), diag);
    }

    // -- electing_store ----------------------------------------------------------------

    /// Writes `value` into the holder's entry of `resource` (keys.hpp: elections): one
    /// txn that puts it, keeping the key's lease, only while `owner`'s key is the one
    /// created at `epoch` and no key of the queue is older; errc::not_owner otherwise.
    /// errc::invalid_argument before any request for a value over
    /// max_leader_value_size, and under the concurrency dialect for one with the shape
    /// of a distlock entry's value (32 lower-case hex digits, then nothing or '+'),
    /// which would read as no value.
    awaitable<result<void>> proclaim(std::string_view resource, const owner_token& owner, fence_token epoch,
                                     std::string_view value, diagnostics* diag = nullptr)
    {
        if (auto ec = checked_resource(resource, diag))
            return backend::failed<void>(ec);
        if (value.size() > max_leader_value_size) {
            if (diag)
                diag->set_client_message("etcd: a leader's value of " + std::to_string(value.size()) +
                                         " bytes (at most " + std::to_string(max_leader_value_size) + ")");
            return backend::failed<void>(distlock::errc::invalid_argument);
        }
        const auto dialect = settings().dialect;
        if (dialect == key_dialect::concurrency && detail::reads_as_entry_value(value)) {
            if (diag)
                diag->set_client_message("etcd: under the concurrency dialect a leader's value may not begin with "
                                         "32 hex digits and then end or '+': it would read as a queue entry's mode");
            return backend::failed<void>(distlock::errc::invalid_argument);
        }
        if (epoch == 0 || epoch > static_cast<fence_token>(INT64_MAX)) // no key was created there
            return backend::failed<void>(distlock::errc::not_owner);
        const auto queue = queue_of(resource);
        const auto txn = detail::proclaim_request(queue, queue + owner.to_hex(), static_cast<std::int64_t>(epoch),
                                                  detail::proclaimed_entry_value(owner.to_hex(), value, dialect));
        return proclaimed(client_, txn, diag);
    }

    /// The election's leader: the queue's oldest key (one range request), its owner
    /// (the key's last part, shortened), fence and value (keys.hpp: proclaimed_in),
    /// and its lease's time left; a default leader_info when the queue is empty.
    awaitable<result<leader_info>> leader(std::string_view resource, diagnostics* diag = nullptr)
    {
        if (auto ec = checked_resource(resource, diag))
            return backend::failed<leader_info>(ec);
        return led(client_, queue_of(resource), diag);
    }

    // -- Beyond the concepts ----------------------------------------------------------

    /// Writes `value` at `key` only while `holder` still holds its lock: one txn that
    /// compares the holder key's create revision with the lease's fence (etcd's
    /// IsOwner()). errc::stale_fence when the lock has ended (released, expired, its
    /// session lost) even if its holder does not know yet: a stalled holder's write
    /// changes nothing. Arguments in the order of every fenced write of distlock:
    /// where, the token (here the lease that carries it), what.
    template <fence_holder Holder>
    awaitable<result<void>> fenced_put(std::string key, const Holder& holder, std::string value,
                                       diagnostics* diag = nullptr)
    {
        if (key.empty() || key.size() > 1024 * 1024 || value.size() > 1024 * 1024 || holder.fence() == 0 ||
            holder.fence() > static_cast<fence_token>(INT64_MAX) || checked_resource(holder.resource(), nullptr))
            return backend::failed<void>(distlock::errc::invalid_argument);
        const auto lock_key = queue_of(holder.resource()) + holder.owner().to_hex();
        detail::json put = {{"key", distlock::util::base64(key)}, {"value", distlock::util::base64(value)}};
        detail::json txn = {
            {"compare", detail::json::array({detail::create_compare(lock_key, static_cast<std::int64_t>(holder.fence()))})},
            {"success", detail::json::array({detail::json{{"request_put", std::move(put)}}})}};
        return fenced(client_, txn, diag);
    }

    /// One call of etcd's API, named by its JSON gateway path ("kv/range",
    /// "lease/grant", ...), with `body` in proto3's JSON form: the answer's JSON, or
    /// the error its code says. Over gRPC, a call etcd/detail/messages.hpp does not
    /// name is errc::invalid_argument.
    awaitable<result<detail::json>> execute(std::string path, detail::json body, diagnostics* diag = nullptr)
    {
        if (path.empty() || path.find_first_of(" \r\n?#") != std::string::npos)
            return backend::failed<detail::json>(distlock::errc::invalid_argument);
        return detail::client::call(client_, std::move(path), body, diag);
    }

    /// The session's lease now (0: none yet, or it ended), for tests and diagnostics.
    std::int64_t session_lease() const { return session_->current_lease(); }
    /// Keepalives sent so far (one per interval for all the store's locks).
    std::size_t keepalives_sent() const { return session_->keepalives_sent(); }
    /// The index of the member requests go to now.
    std::size_t member_in_use() const { return client_->member_in_use(); }
    /// The leases bound to the session whose keys it checks after each keepalive.
    std::size_t session_bindings() const { return session_->bindings(); }
    /// The checks of those keys sent so far (one txn per 128 keys, after a keepalive).
    std::size_t key_checks_sent() const { return session_->checks_sent(); }

private:
    using json = detail::json;

    // The id's length as every store checks it; under the concurrency dialect, no '/'
    // (dialect.hpp): refused before any request, saying why.
    std::error_code checked_resource(std::string_view resource, diagnostics* diag) const
    {
        if (auto ec = validate_resource(resource))
            return ec;
        if (!detail::id_fits_dialect(resource, settings().dialect)) {
            if (diag)
                diag->set_client_message("etcd: the resource id \"" + std::string{resource} +
                                         "\" holds a '/': under the concurrency dialect its queue would lie inside "
                                         "another id's");
            return distlock::errc::invalid_argument;
        }
        return {};
    }

    std::string queue_of(std::string_view resource) const
    {
        return detail::queue_prefix(settings().prefix, resource, settings().dialect);
    }

    static json put_request(const std::string& key, const std::string& value, std::int64_t lease)
    {
        return {{"key", distlock::util::base64(key)},
                {"value", distlock::util::base64(value)},
                {"lease", std::to_string(lease)}};
    }

    static awaitable<result<queue_place>> enqueued(std::shared_ptr<detail::client> c,
                                                   std::shared_ptr<detail::session> s,
                                                   std::shared_ptr<distlock::backend::lifetime> life, std::string queue,
                                                   std::string key, std::string owner, diagnostics* diag)
    {
        const auto mark_key = detail::delay_mark_key(queue);
        for (int round = 0; round < 2; ++round) {
            auto lease = co_await detail::session::lease(s, diag);
            if (!lease)
                co_return lease.error();
            if (const auto entry = s->promoted(key, lease.value())) {
                // The key before it held the lock and is gone (its watch said so): this
                // one is the oldest, with no read of the queue to confirm it. Only the
                // lock-delay mark is read: the key that went may have left one.
                auto got = co_await detail::client::call(c, "kv/range", detail::range_request(mark_key), diag);
                if (!got)
                    co_return got.error();
                auto mark = detail::decode_range(got.value(), diag);
                if (!mark)
                    co_return mark.error();
                co_return co_await head(c, s, life, key, owner, lease.value(), *entry, mark_key,
                                        std::move(mark.value()), true, diag);
            }
            if (s->made(key, lease.value())) {
                // This call made its key under this session (it is trying again after a
                // wake-up): two reads say where it stands, without a write. They go in one
                // transaction without compares, which etcd serves as a read: one request,
                // and both answers from the same revision.
                const json reads = {
                    {"success", json::array({json{{"request_range", detail::range_request(key)}},
                                             json{{"request_range", detail::queue_request(queue, "ASCEND", 1)}},
                                             json{{"request_range", detail::range_request(mark_key)}}})}};
                auto got = co_await detail::client::call(c, "kv/txn", reads, diag);
                if (!got)
                    co_return got.error();
                const auto read = detail::decode_txn(got.value(), diag, {0, 1, 2});
                if (!read)
                    co_return read.error();
                const auto* mine = read->range(0);
                const auto* oldest = read->range(1);
                if (!mine->kvs.empty() && mine->kvs.front().lease == lease.value() && !oldest->kvs.empty())
                    co_return co_await placed(c, s, life, queue, key, owner, mine->kvs.front(), oldest->kvs.front(),
                                              lease.value(), *read->range(2), diag);
                s->forget(key); // gone: made again below, at the back
            }
            const json txn = {
                {"compare", json::array({detail::create_compare(key, 0)})},
                {"success", json::array({json{{"request_put", put_request(key, owner, lease.value())}},
                                         json{{"request_range", detail::queue_request(queue, "DESCEND", 2)}},
                                         json{{"request_range", detail::range_request(mark_key)}}})},
                {"failure", json::array({json{{"request_range", detail::range_request(key)}},
                                         json{{"request_range", detail::queue_request(queue, "ASCEND", 1)}},
                                         json{{"request_range", detail::range_request(mark_key)}}})}};
            auto got = co_await detail::client::call(c, "kv/txn", txn, diag);
            if (!got) {
                if (got.error() == errc::not_found) { // the lease expired: the session is over
                    s->ended(lease.value(), session_state::lost);
                    co_return distlock::errc::session_lost;
                }
                co_return got.error();
            }
            // Succeeded: the put, then the queue's newest keys; failed: the key, then the
            // oldest; then the lock-delay mark (keys.hpp), in both.
            const auto answer = detail::decode_txn(got.value(), diag, {1, 2}, {0, 1, 2});
            if (!answer)
                co_return answer.error();
            const auto* first_range = answer->range(0);
            const auto* second_range = answer->range(1);
            if (answer->succeeded) {
                // Created: the newest key of the queue is ours, the one after it our predecessor.
                if (!second_range || second_range->kvs.empty() || second_range->kvs.front().key != key)
                    co_return distlock::errc::protocol_error;
                const auto& mine = second_range->kvs.front();
                s->remember(key, lease.value(), mine.create_revision);
                if (second_range->count == 1 || second_range->kvs.size() < 2)
                    co_return co_await head(c, s, life, key, owner, lease.value(), mine.create_revision, mark_key,
                                            *answer->range(2), false, diag);
                // With two keys in the queue, the other one is the oldest: the holder.
                const auto& before = second_range->kvs[1];
                s->remember_predecessor(key, before.create_revision, second_range->count == 2);
                co_return queue_place{static_cast<fence_token>(mine.create_revision), false,
                                      static_cast<fence_token>(before.create_revision)};
            }
            if (!first_range || first_range->kvs.size() != 1 || !second_range || second_range->kvs.empty())
                co_return distlock::errc::protocol_error;
            const auto& mine = first_range->kvs.front();
            if (mine.lease != lease.value()) {
                // Left by an earlier session of this store: it must not hold a lock for
                // this one. Deleted (if still that key) and made again, at the back.
                const json drop = {
                    {"compare", json::array({detail::create_compare(key, mine.create_revision)})},
                    {"success", json::array({json{{"request_delete_range", detail::range_request(key)}}})}};
                auto dropped = co_await detail::client::call(c, "kv/txn", drop, diag);
                if (!dropped)
                    co_return dropped.error();
                continue;
            }
            s->remember(key, lease.value(), mine.create_revision);
            co_return co_await placed(c, s, life, queue, key, owner, mine, second_range->kvs.front(), lease.value(),
                                      *answer->range(2), diag);
        }
        co_return distlock::errc::session_lost;
    }

    // Where the call's key `mine` (made before this attempt) stands, the queue's
    // oldest key being `oldest`.
    static awaitable<result<queue_place>> placed(std::shared_ptr<detail::client> c,
                                                 std::shared_ptr<detail::session> s,
                                                 std::shared_ptr<distlock::backend::lifetime> life, std::string queue,
                                                 std::string key, std::string owner, detail::kv mine,
                                                 detail::kv oldest, std::int64_t lease, detail::range_answer mark,
                                                 diagnostics* diag)
    {
        const auto mark_key = detail::delay_mark_key(queue);
        if (oldest.key == key)
            co_return co_await head(c, s, life, key, owner, lease, mine.create_revision, mark_key, std::move(mark),
                                    true, diag);
        // Waiting: the newest key created before ours; and the lock-delay mark again, in
        // case the keys before ours went meanwhile (one read-only txn).
        auto before = detail::queue_request(queue, "DESCEND", 1);
        before["max_create_revision"] = std::to_string(mine.create_revision - 1);
        const json reads = {{"success", json::array({json{{"request_range", std::move(before)}},
                                                     json{{"request_range", detail::range_request(mark_key)}}})}};
        auto pred = co_await detail::client::call(c, "kv/txn", reads, diag);
        if (!pred)
            co_return pred.error();
        const auto read = detail::decode_txn(pred.value(), diag, {0, 1});
        if (!read)
            co_return read.error();
        const auto* r = read->range(0);
        if (r->kvs.empty()) // the keys before ours went meanwhile
            co_return co_await head(c, s, life, key, owner, lease, mine.create_revision, mark_key, *read->range(1),
                                    true, diag);
        const auto& waits_for = r->kvs.front();
        s->remember_predecessor(key, waits_for.create_revision, waits_for.key == oldest.key);
        co_return queue_place{static_cast<fence_token>(mine.create_revision), false,
                              static_cast<fence_token>(waits_for.create_revision)};
    }

    // The key `key`, created at `entry`, is the oldest of its queue: the lock is this
    // call's unless `mark` (the read of the queue's lock-delay mark) holds it back.
    // `after_waiting`: made in an earlier attempt (see held_after_waiting).
    static awaitable<result<queue_place>> head(std::shared_ptr<detail::client> c, std::shared_ptr<detail::session> s,
                                               std::shared_ptr<distlock::backend::lifetime> life, std::string key,
                                               std::string owner, std::int64_t lease, std::int64_t entry,
                                               std::string mark_key, detail::range_answer mark, bool after_waiting,
                                               diagnostics* diag)
    {
        if (!mark.kvs.empty()) {
            const auto until = co_await delay_of(c, std::move(mark_key), std::move(mark), owner, entry, diag);
            if (!until)
                co_return until.error();
            if (*until) // the entry keeps its place
                co_return queue_place{static_cast<fence_token>(entry), false, std::nullopt, **until};
        }
        if (after_waiting)
            co_return held_after_waiting(c, *s, *life, key, owner, lease, entry);
        s->granted(entry, lease, key);
        co_return queue_place{static_cast<fence_token>(entry), true, std::nullopt};
    }

    // What the queue's lock-delay mark, as `mark` read it (keys.hpp: lock-delays), means
    // for the head entry of the owner `owner_hex` created at `entry`: nullopt when it
    // may hold now, else until when (this process's clock) the resource is delayed.
    //  - No mark, or the mark of this very entry's grant: nullopt.
    //  - A tombstone (the mark with a lease): its lease's time left, in whole seconds,
    //    rounded down by the server (never later than the truth); under a second left,
    //    a short wait and a look again.
    //  - A mark naming another key: that holder went without a release (its key would
    //    be the head otherwise). A lease of the delay rounded up to whole seconds is
    //    granted, and the mark put again bound to it, only if still unchanged since the
    //    read: the first head that finds it starts the tombstone, the others read it.
    // A value that is no mark, or a negative lease, is a protocol_error saying what the
    // server holds.
    static awaitable<result<std::optional<time_point>>> delay_of(std::shared_ptr<detail::client> c,
                                                                 std::string mark_key, detail::range_answer mark,
                                                                 std::string owner_hex, std::int64_t entry,
                                                                 diagnostics* diag)
    {
        for (int tries = 0; tries < 4; ++tries) {
            if (mark.kvs.empty())
                co_return std::optional<time_point>{};
            const auto k = mark.kvs.front();
            const auto parsed = detail::parse_delay_mark(k.value);
            if (mark.kvs.size() != 1 || k.key != mark_key || !parsed || k.lease < 0) {
                if (diag)
                    diag->set_client_message("etcd: the lock-delay mark \"" + mark_key + "\" reads as \"" +
                                             k.key + "\" = \"" + k.value + "\" (lease " + std::to_string(k.lease) +
                                             "), not a mark");
                co_return distlock::errc::protocol_error;
            }
            if (k.lease > 0) {
                const json ask = {{"ID", std::to_string(k.lease)}};
                auto got = co_await detail::client::call(c, "lease/timetolive", ask, diag);
                if (!got && got.error() == errc::not_found) // the lease, and the tombstone with it, is gone
                    co_return std::optional<time_point>{};
                if (!got)
                    co_return got.error();
                const auto now = clock::now();
                const auto left = detail::decode_time_to_live(got.value(), diag);
                if (!left)
                    co_return left.error();
                if (left.value() < 0)
                    co_return std::optional<time_point>{};
                if (left.value() == 0) // under a second left, or expired and not yet deleted
                    co_return std::optional<time_point>{now + tombstone_poll};
                co_return std::optional<time_point>{now + std::chrono::seconds{left.value()}};
            }
            if (parsed->holder == owner_hex && parsed->fence == entry)
                co_return std::optional<time_point>{};
            const auto seconds = (parsed->delay_ms + 999) / 1000;
            const json grant = {{"TTL", std::to_string(seconds)}, {"ID", "0"}};
            auto got = co_await detail::client::call(c, "lease/grant", grant, diag);
            if (!got)
                co_return got.error();
            const auto granted_at = clock::now(); // the lease began before its answer
            const auto lease = detail::decode_granted_lease(got.value(), diag);
            if (!lease)
                co_return lease.error();
            auto put = co_await detail::client::call(
                c, "kv/txn", detail::tombstone_request(mark_key, k.value, k.mod_revision, lease->id), diag);
            if (!put)
                co_return put.error(); // the lease, unused, expires with its TTL
            const auto answer = detail::decode_txn(put.value(), diag, {}, {0});
            if (!answer)
                co_return answer.error();
            if (answer->succeeded)
                // The TTL the server granted: etcd raises one below its minimum.
                co_return std::optional<time_point>{granted_at + std::chrono::seconds{lease->ttl}};
            // Another head was first, or the mark went: what is there now decides.
            const json drop = {{"ID", std::to_string(lease->id)}};
            (void)co_await detail::client::call(c, "lease/revoke", drop, nullptr);
            mark = *answer->range(0);
        }
        if (diag)
            diag->set_client_message("etcd: the lock-delay mark \"" + mark_key + "\" changed under every attempt");
        co_return distlock::errc::protocol_error;
    }

    // How long a head waits before it looks again at a tombstone with under a second left.
    static constexpr auto tombstone_poll = std::chrono::milliseconds{200};

    // Releases the holder key `key` and its lock-delay mark, if still the one this
    // store armed (keys.hpp: release_request), in one txn.
    static awaitable<result<void>> released(std::shared_ptr<detail::client> c, std::shared_ptr<detail::session> s,
                                            std::string key, std::string mark_key, std::string mark_value,
                                            diagnostics* diag)
    {
        auto got = co_await detail::client::call(
            c, "kv/txn", detail::release_request(key, mark_key, mark_value), diag);
        if (!got)
            co_return got.error(); // the mark is remembered still: a dequeue again clears it
        const auto n = detail::decode_txn_deleted(got.value(), 0, diag);
        if (!n)
            co_return n.error();
        s->disarmed(key);
        if (n.value() == 0)
            co_return distlock::errc::not_owner;
        co_return success();
    }

    // The key `key`, created at `entry` in an earlier attempt, is the oldest of its
    // queue: the lock is this call's. Its key is marked for the waiter behind it.
    static queue_place held_after_waiting(const std::shared_ptr<detail::client>& c, detail::session& s,
                                          distlock::backend::lifetime& life, const std::string& key,
                                          const std::string& owner, std::int64_t lease, std::int64_t entry)
    {
        life.spawn(marked(c, key, owner, lease, entry));
        s.granted(entry, lease, key);
        return queue_place{static_cast<fence_token>(entry), true, std::nullopt};
    }

    // A waiter that came to hold the lock marks its key (appends holder_mark to its
    // value, in a txn that changes nothing if the key is no longer this one): the
    // waiter behind it then knows, when the key goes, that it is the oldest, with no
    // read. In the background: the grant does not wait for it, and a mark that fails
    // costs only that read.
    // Its value must still be the one the entry was made with: a leader that
    // proclaimed first keeps its value (which carries the mark already).
    static awaitable<void> marked(std::shared_ptr<detail::client> c, std::string key, std::string owner,
                                  std::int64_t lease, std::int64_t entry)
    {
        const json txn = {
            {"compare", json::array({detail::create_compare(key, entry), detail::value_compare(key, owner)})},
            {"success", json::array({json{
                            {"request_put", put_request(key, owner + std::string{detail::holder_mark}, lease)}}})}};
        (void)co_await detail::client::call(c, "kv/txn", txn, nullptr);
    }

    static awaitable<result<shared_place>> shared_enqueued(std::shared_ptr<detail::client> c,
                                                           std::shared_ptr<detail::session> s, std::string queue,
                                                           std::string key, std::string owner, lock_mode mode,
                                                           std::uint32_t permits, diagnostics* diag)
    {
        const auto value = detail::entry_value(owner, mode, permits);
        const auto entries = detail::queue_entries_request(queue);
        const auto mark = detail::range_request(detail::delay_mark_key(queue));
        for (int round = 0; round < 2; ++round) {
            auto lease = co_await detail::session::lease(s, diag);
            if (!lease)
                co_return lease.error();
            const json txn = {
                {"compare", json::array({detail::create_compare(key, 0)})},
                {"success",
                 json::array({json{{"request_put", put_request(key, value, lease.value())}},
                              json{{"request_range", entries}}, json{{"request_range", mark}}})},
                {"failure", json::array({json{{"request_range", detail::range_request(key)}},
                                         json{{"request_range", entries}}, json{{"request_range", mark}}})}};
            auto got = co_await detail::client::call(c, "kv/txn", txn, diag);
            if (!got) {
                if (got.error() == errc::not_found) { // the lease expired: the session is over
                    s->ended(lease.value(), session_state::lost);
                    co_return distlock::errc::session_lost;
                }
                co_return got.error();
            }
            // Succeeded: the put, then the queue; failed: the key, then the queue; then
            // the lock-delay mark (keys.hpp), in both.
            const auto answer = detail::decode_txn(got.value(), diag, {1, 2}, {0, 1, 2});
            if (!answer)
                co_return answer.error();
            const auto at = detail::decode_revision(got.value(), diag);
            if (!at)
                co_return at.error();
            if (!answer->succeeded) {
                const auto* mine = answer->range(0);
                if (mine->kvs.size() != 1) { // the compare said it exists
                    if (diag)
                        diag->set_client_message("etcd txn read " + std::to_string(mine->kvs.size()) +
                                                 " keys for the existing key \"" + key + "\"");
                    co_return distlock::errc::protocol_error;
                }
                if (mine->kvs.front().lease != lease.value()) {
                    // Left by an earlier session of this store: deleted (if still that
                    // key) and made again, at the back.
                    const json drop = {
                        {"compare", json::array({detail::create_compare(key, mine->kvs.front().create_revision)})},
                        {"success", json::array({json{{"request_delete_range", detail::range_request(key)}}})}};
                    auto dropped = co_await detail::client::call(c, "kv/txn", drop, diag);
                    if (!dropped)
                        co_return dropped.error();
                    continue;
                }
            }
            co_return co_await shared_placed(c, s, queue, key, owner, lease.value(), *answer->range(1), at.value(),
                                             *answer->range(2), diag);
        }
        co_return distlock::errc::session_lost;
    }

    // Where the entry `key` stands by `listing`, the whole queue read at `revision`
    // with the lock-delay mark `mark`; a permit that holds writes its slot first
    // (entries.hpp). An entry that would hold waits out a tombstone first (delay_of).
    static awaitable<result<shared_place>> shared_placed(std::shared_ptr<detail::client> c,
                                                         std::shared_ptr<detail::session> s, std::string queue,
                                                         std::string key, std::string owner, std::int64_t lease,
                                                         detail::range_answer listing, std::int64_t revision,
                                                         detail::range_answer mark, diagnostics* diag)
    {
        const auto mark_key = detail::delay_mark_key(queue);
        // Each write of a slot that does not apply was beaten by a write to the queue:
        // the grant is retried from the read its txn returns, a bounded number of times,
        // then left to the next attempt.
        std::int64_t entry = 0;
        for (int tries = 0; tries < 16; ++tries) {
            if (listing.count != static_cast<std::int64_t>(listing.kvs.size())) { // the read asks for every key
                if (diag)
                    diag->set_client_message("etcd queue read of \"" + queue + "\": " +
                                             std::to_string(listing.kvs.size()) + " keys of " +
                                             std::to_string(listing.count));
                co_return distlock::errc::protocol_error;
            }
            const auto d = detail::decide_shared(listing.kvs, key, diag);
            if (!d)
                co_return d.error();
            entry = d->entry;
            if (d->other_count) {
                // Left at once: a lock() call that is refused leaves nothing queued.
                const json drop = {
                    {"compare", json::array({detail::create_compare(key, entry)})},
                    {"success", json::array({json{{"request_delete_range", detail::range_request(key)}}})}};
                (void)co_await detail::client::call(c, "kv/txn", drop, nullptr);
                s->forget(key);
                if (diag)
                    diag->set_client_message("etcd: the queue of \"" + queue +
                                             "\" holds entries of another permit count");
                co_return distlock::errc::invalid_argument;
            }
            if (!d->granted)
                co_return shared_place{static_cast<fence_token>(entry), false, std::nullopt};
            if (!mark.kvs.empty()) {
                const auto until = co_await delay_of(c, mark_key, std::move(mark), owner, entry, diag);
                if (!until)
                    co_return until.error();
                if (*until) // the entry keeps its place
                    co_return shared_place{static_cast<fence_token>(entry), false, std::nullopt, **until};
                mark = {};
            }
            if (!d->write_slot) {
                s->granted(entry, lease, key);
                co_return shared_place{static_cast<fence_token>(entry), true, d->slot};
            }
            const auto slotted = detail::permit_value(owner, d->mode.permits, *d->slot);
            const json txn = {
                {"compare", json::array({detail::create_compare(key, entry),
                                         detail::unwritten_since_compare(queue, revision)})},
                {"success", json::array({json{{"request_put", put_request(key, slotted, lease)}}})},
                {"failure", json::array({json{{"request_range", detail::queue_entries_request(queue)}},
                                         json{{"request_range", detail::range_request(mark_key)}}})}};
            auto got = co_await detail::client::call(c, "kv/txn", txn, diag);
            if (!got)
                co_return got.error();
            const auto answer = detail::decode_txn(got.value(), diag, {}, {0, 1});
            if (!answer)
                co_return answer.error();
            if (answer->succeeded) {
                s->granted(entry, lease, key);
                co_return shared_place{static_cast<fence_token>(entry), true, d->slot};
            }
            const auto at = detail::decode_revision(got.value(), diag);
            if (!at)
                co_return at.error();
            listing = *answer->range(0);
            mark = *answer->range(1);
            revision = at.value();
            if (std::none_of(listing.kvs.begin(), listing.kvs.end(), [&](const detail::kv& k) {
                    return k.key == key && k.create_revision == entry;
                }))
                co_return shared_place{static_cast<fence_token>(entry), false, std::nullopt}; // gone: wait_turn says so
        }
        co_return shared_place{static_cast<fence_token>(entry), false, std::nullopt};
    }

    // Reads the queue, then watches the keys whose going may let the entry created at
    // `entry` hold (entries.hpp: turn_keys) for the deletion of one.
    static awaitable<bool> turned(std::shared_ptr<detail::client> c, std::string queue, fence_token entry,
                                  time_point until)
    {
        if (entry == 0 || entry > static_cast<fence_token>(INT64_MAX))
            co_return true;
        const auto body = detail::queue_entries_request(queue);
        while (clock::now() < until && !co_await distlock::backend::cancelled()) {
            auto got = co_await detail::client::call(c, "kv/range", body, nullptr);
            const auto r = got ? detail::decode_range(got.value(), nullptr) : result<detail::range_answer>{got.error()};
            if (r) {
                auto turn = detail::turn_keys(r->kvs, static_cast<std::int64_t>(entry), nullptr);
                // Malformed: the next attempt reads the queue again, and says so.
                if (!turn || !turn->present || turn->keys.empty())
                    co_return true;
                auto& keys = turn->keys;
                if (keys.size() == 1) {
                    auto& k = keys.front();
                    const auto w = co_await detail::client::wait_deleted(c, std::move(k.key), k.entry, 0, until);
                    co_return w.deleted;
                }
                auto end = detail::range_end(queue);
                detail::client::watched_keys w{std::move(queue), std::move(end), std::move(keys)};
                const auto any = co_await detail::client::wait_any_deleted(c, std::move(w), 0, until);
                co_return any.deleted;
            }
            // Unreachable for now: look again shortly, within `until`.
            timer pause{co_await asio::this_coro::executor,
                        std::min(until, clock::now() + std::chrono::milliseconds{100})};
            (void)co_await pause.async_wait(distlock::backend::as_tuple_awaitable<Unused>());
        }
        co_return false;
    }

    // Finds the key created at `entry` in the queue, then watches it for its deletion.
    static awaitable<bool> waited(std::shared_ptr<detail::client> c, std::shared_ptr<detail::session> s,
                                  std::string queue, fence_token entry, time_point until)
    {
        if (entry == 0 || entry > static_cast<fence_token>(INT64_MAX))
            co_return true;
        const auto created = static_cast<std::int64_t>(entry);
        auto find = detail::queue_request(queue, "ASCEND", 1);
        find.erase("keys_only"); // its value says whether it holds the lock
        find["min_create_revision"] = std::to_string(created);
        find["max_create_revision"] = std::to_string(created);
        const auto body = find;
        while (clock::now() < until && !co_await distlock::backend::cancelled()) {
            auto got = co_await detail::client::call(c, "kv/range", body, nullptr);
            const auto r = got ? detail::decode_range(got.value(), nullptr) : result<detail::range_answer>{got.error()};
            if (r) {
                if (r->kvs.empty())
                    co_return true;
                if (detail::carries_mark(r->kvs.front()))
                    s->predecessor_marked(queue, created);
                // Watched from now, not from this read's revision: see wait_deleted.
                const auto w = co_await detail::client::wait_deleted(c, r->kvs.front().key, created, 0, until);
                if (w.marked)
                    s->predecessor_marked(queue, created);
                if (w.deleted)
                    s->predecessor_deleted(queue, created);
                co_return w.deleted;
            }
            // Unreachable for now: look again shortly, within `until`.
            timer pause{co_await asio::this_coro::executor,
                        std::min(until, clock::now() + std::chrono::milliseconds{100})};
            (void)co_await pause.async_wait(distlock::backend::as_tuple_awaitable<Unused>());
        }
        co_return false;
    }

    static awaitable<result<void>> deleted(std::shared_ptr<detail::client> c, std::string key, diagnostics* diag)
    {
        auto got = co_await detail::client::call(c, "kv/deleterange", detail::range_request(key), diag);
        if (!got)
            co_return got.error();
        const auto n = detail::decode_deleted(got.value(), diag);
        if (!n)
            co_return n.error();
        if (n.value() == 0)
            co_return distlock::errc::not_owner;
        co_return success();
    }

    static awaitable<result<void>> fenced(std::shared_ptr<detail::client> c, detail::json txn, diagnostics* diag)
    {
        auto got = co_await detail::client::call(c, "kv/txn", std::move(txn), diag);
        if (!got)
            co_return got.error();
        const auto answer = detail::decode_txn(got.value(), diag);
        if (!answer)
            co_return answer.error();
        if (!answer->succeeded)
            co_return distlock::errc::stale_fence;
        co_return success();
    }

    static awaitable<result<void>> proclaimed(std::shared_ptr<detail::client> c, detail::json txn,
                                              diagnostics* diag)
    {
        auto got = co_await detail::client::call(c, "kv/txn", std::move(txn), diag);
        if (!got)
            co_return got.error();
        const auto answer = detail::decode_txn(got.value(), diag);
        if (!answer)
            co_return answer.error();
        if (!answer->succeeded)
            co_return distlock::errc::not_owner;
        co_return success();
    }

    static awaitable<result<leader_info>> led(std::shared_ptr<detail::client> c, std::string queue,
                                              diagnostics* diag)
    {
        auto oldest = detail::queue_request(queue, "ASCEND", 1);
        oldest.erase("keys_only");
        auto got = co_await detail::client::call(c, "kv/range", oldest, diag);
        if (!got)
            co_return got.error();
        auto entry = detail::decode_leader(got.value(), queue, diag);
        if (!entry)
            co_return entry.error();
        leader_info info;
        if (!entry->held)
            co_return info;
        info.epoch = static_cast<fence_token>(entry->entry);
        info.owner = entry->owner.substr(0, 8);
        info.value = std::move(entry->value);
        if (entry->lease == 0)
            co_return info;
        const json ask = {{"ID", std::to_string(entry->lease)}};
        if (auto ttl = co_await detail::client::call(c, "lease/timetolive", ask, nullptr)) {
            // Best effort, as read()'s.
            if (const auto seconds = detail::decode_time_to_live(ttl.value(), nullptr); seconds && seconds.value() >= 0)
                info.remaining = std::chrono::seconds{seconds.value()};
        }
        co_return info;
    }

    static awaitable<result<lock_info>> inspected(std::shared_ptr<detail::client> c, std::string queue,
                                                  diagnostics* diag)
    {
        auto oldest = detail::queue_request(queue, "ASCEND", 1);
        oldest.erase("keys_only");
        auto got = co_await detail::client::call(c, "kv/range", oldest, diag);
        if (!got)
            co_return got.error();
        const auto r = detail::decode_range(got.value(), diag);
        if (!r)
            co_return r.error();
        const auto at = detail::decode_revision(got.value(), diag);
        if (!at)
            co_return at.error();
        lock_info info;
        if (r->kvs.empty()) {
            info.fence = static_cast<fence_token>(at.value());
            co_return info;
        }
        const auto& holder = r->kvs.front();
        info.held = true;
        // The key's last part: a distlock owner token, or a concurrency.Mutex's lease ID.
        info.owner = holder.key.substr(holder.key.rfind('/') + 1, 8);
        info.fence = static_cast<fence_token>(holder.create_revision);
        info.version = info.fence;
        const json ask = {{"ID", std::to_string(holder.lease)}};
        if (auto ttl = co_await detail::client::call(c, "lease/timetolive", ask, nullptr)) {
            // Best effort, as the call: an answer this client cannot read leaves it unknown.
            if (const auto seconds = detail::decode_time_to_live(ttl.value(), nullptr); seconds && seconds.value() >= 0)
                info.remaining = std::chrono::seconds{seconds.value()};
        }
        co_return info;
    }

    static awaitable<result<std::vector<lock_listing>>> listed(std::shared_ptr<detail::client> c,
                                                               std::string store_prefix, std::string prefix,
                                                               key_dialect dialect, diagnostics* diag)
    {
        if (prefix.size() > max_resource_size || !detail::id_fits_dialect(prefix, dialect)) // no id begins with it
            co_return std::vector<lock_listing>{};
        auto got = co_await detail::client::call(c, "kv/range",
                                                 detail::listing_request(store_prefix, prefix, dialect), diag);
        if (!got)
            co_return got.error();
        auto queues = detail::decode_listing(got.value(), store_prefix, prefix, diag, dialect);
        if (!queues)
            co_return queues.error();
        std::vector<lock_listing> out;
        out.reserve(queues->size());
        for (auto& q : queues.value()) {
            lock_listing l{.resource = std::move(q.resource), .lock = {}, .waiters = q.waiters};
            l.lock.held = true;
            l.lock.owner = q.owner.substr(0, 8);
            l.lock.fence = static_cast<fence_token>(q.fence);
            l.lock.version = l.lock.fence;
            out.push_back(std::move(l));
        }
        co_return out;
    }

    static awaitable<result<void>> revoked(std::shared_ptr<detail::client> c, std::string queue, std::int64_t entry,
                                           diagnostics* diag)
    {
        // The holder's key has the owner's name, which the fence does not give: the
        // oldest key of the queue is read first. The txn alone decides.
        auto got = co_await detail::client::call(c, "kv/range", detail::queue_request(queue, "ASCEND", 1), diag);
        if (!got)
            co_return got.error();
        const auto oldest = detail::decode_range(got.value(), diag);
        if (!oldest)
            co_return oldest.error();
        if (oldest->kvs.empty() || oldest->kvs.front().create_revision != entry)
            co_return distlock::errc::not_owner;
        auto done = co_await detail::client::call(
            c, "kv/txn", detail::revoke_request(queue, oldest->kvs.front().key, entry), diag);
        if (!done)
            co_return done.error();
        const auto answer = detail::decode_txn(done.value(), diag);
        if (!answer)
            co_return answer.error();
        if (!answer->succeeded)
            co_return distlock::errc::not_owner;
        co_return success();
    }

    std::optional<detail::prefix_claim> prefix_;
    std::shared_ptr<detail::client> client_;
    std::shared_ptr<detail::session> session_;

protected:
    ~basic_store() = default;
    void stop() noexcept;
    awaitable<void> finish();
};

template <class Unused>
basic_store<Unused>::basic_store(executor_type ex, config cfg)
    : base{std::move(ex), std::move(cfg), "distlock::etcd::store"}
{
    std::vector<std::string> members;
    for (const auto& m : cfg_.members)
        members.push_back(backend::authority(m.host, m.port));
    if (const auto other = detail::prefix_claims::claim(cfg_.prefix, members))
        throw std::system_error{make_error_code(distlock::errc::invalid_argument),
                                "distlock::etcd::store: key prefix \"" + cfg_.prefix + "\" nests with \"" +
                                    other->prefix + "\", used by another store of this process on " +
                                    other->members.front() + ": their resources would block each other"};
    prefix_.emplace(cfg_.prefix, std::move(members));
    client_ = std::make_shared<detail::client>(ex_, cfg_);
    session_ = std::make_shared<detail::session>(ex_, client_, operation_timeout());
}

template <class Unused>
void basic_store<Unused>::stop() noexcept
{
    session_->stop();
    client_->close();
}

template <class Unused>
awaitable<void> basic_store<Unused>::finish()
{
    if (const auto id = session_->stop())
        co_await detail::session::revoke(client_, id);
    client_->close();
}

/// The etcd store. See basic_store for its documentation.
using store = backend::store_shell<basic_store<>>;

static_assert(session_queue_store<store>);
static_assert(shared_queue_store<store>);
static_assert(inspectable_store<store>);
static_assert(enumerable_store<store>);
static_assert(revocable_store<store>);
static_assert(electing_store<store>);
static_assert(lock_delay_store<store>);

} // namespace distlock::etcd
