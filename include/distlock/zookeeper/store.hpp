// distlock/zookeeper/store.hpp: ZooKeeper as a distlock store: one session per store,
// a fair queue per resource of ephemeral sequential nodes, the holder node's czxid as
// the fence.
//
// Design note: the lock recipe ZooKeeper documents and Apache Curator's
// InterProcessMutex made standard, with fencing and the cases its users hit.
//  - Each lock() call creates its own node <root>/<escaped id>/<name><seq>, its name
//    the owner token as the dialect writes it (Curator's, kazoo's or this store's
//    earlier names: paths.hpp), ephemeral (it goes with the session) and sequential
//    (the server appends the next number), and reads the resource's children in the
//    same write: the server answers a session's requests in order, so the read sees
//    the new node and says at once whether it is the lowest (the holder: one round
//    trip). The resource's node is a container the server deletes once emptied; a
//    create that finds it gone makes it again.
//  - Children come back unsorted: the queue is ordered by sequence number, every
//    sequential child a waiter whoever made it, so that Curator's and kazoo's
//    clients and every dialect's queue together and exclude each other. A waiter
//    watches only the node just before its own (getData + watch): one release wakes
//    one waiter, which then reads the children again (its predecessor may have been a
//    waiter that gave up rather than the holder).
//  - The fence is the holder node's czxid, the zxid of its create: zxids are
//    ensemble-wide and only grow, across leaders, so every acquisition of a resource
//    has a larger one than the one before, whatever happened to the resource's node.
//  - The node's name carries the lock() call's owner token, so a create whose reply
//    was lost is found again when the call tries once more (never a second node), and
//    a node left by an earlier session of this client (same owner) is told apart by
//    its ephemeral owner and deleted.
//  - A lease is bound to the session (session.hpp): connected = held, disconnected =
//    in doubt (the loss is pushed), expired = lost. It is bound to its node too: the
//    node deleted by anyone but its release (a revoke) is its loss.
//  - A shared mutex's readers and writers and a semaphore's permits queue the same
//    way, one node per lock() call under the resource's node, the mode in the node's
//    name (paths.hpp), so that every client judges the queue alike from its children
//    (detail/shared.hpp): a reader waits only for older writers, and a mutex and a
//    writer on one resource exclude each other. A permit's number is recorded in the
//    resource's node's data, taken with a write conditional on its version.
//  - Listing reads the prefix's children, then every matching resource's children in
//    one pipelined batch, then every holder's node in another: three round trips
//    however many locks. Revoking deletes the holder's node once its czxid is seen to
//    be the fence: the path names that grant and nothing else (revoked() says why
//    reading first is still exact).
//  - An election's value lives in its leader's node, after the holder's mark
//    (detail/election.hpp): written with a setData conditional on the data version
//    just read of the node found to be the lowest with the term's czxid, so it goes
//    with the grant and a later grant's node never carries it. In the latch dialect
//    (Curator's LeaderLatch) the value is instead the node's data from its create
//    (enqueue_candidate()), and no node is written after it: a write would spend the
//    data watch of the LeaderLatch participant behind, which acts on a deletion only.
#pragma once

#include <distlock/backend.hpp>
#include <distlock/policy/queue.hpp>
#include <distlock/policy/shared.hpp>
#include <distlock/zookeeper/config.hpp>
#include <distlock/zookeeper/detail/election.hpp>
#include <distlock/zookeeper/detail/paths.hpp>
#include <distlock/zookeeper/detail/session.hpp>
#include <distlock/zookeeper/detail/shared.hpp>
#include <distlock/zookeeper/error.hpp>
#include <distlock/zookeeper/proto/messages.hpp>

#include <asio/any_io_executor.hpp>

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace distlock::zookeeper {

/// A ZooKeeper ensemble used as a lock store. Models session_queue_store,
/// shared_queue_store, inspectable_store, enumerable_store, revocable_store and
/// electing_store; its default acquisitions are acquire::session_queue and
/// acquire::shared_queue, so `basic_distributed_mutex<zookeeper::store>` (and its
/// shared mutex and semaphore) queues fairly, needs no watchdog, and its leases end
/// with the store's session.
///
/// \par Thread safety
/// Safe to use from several threads.
///
/// \par Object lifetimes
/// Every operation owns the session it uses once started, so the store may be
/// destroyed while one is in flight. close() finishes pending releases, closes the
/// session on the server (its nodes go at once) and the connection, so io.run()
/// returns; the destructor drops the connection and leaves the session to expire on
/// the server within its timeout.
// Used through backend::store_shell (see there why stores are templates).
template <class Unused = void>
class basic_store : public backend::store_base<config> {
    using base = backend::store_base<config>;

public:
    using default_acquire_policy = acquire::session_queue;
    using default_shared_acquire_policy = acquire::shared_queue;

    /// Throws std::system_error (errc::invalid_argument) for invalid settings;
    /// connecting happens on first use.
    basic_store(executor_type ex, config cfg);

    /// The longest one primitive runs: a connect to each server, then up to four
    /// requests.
    duration operation_timeout() const noexcept
    {
        const auto servers = static_cast<std::int64_t>(cfg_.servers.size());
        return saturating_add(saturating_mul(cfg_.connect_timeout, 2 * servers), saturating_mul(cfg_.request_timeout, 4));
    }

    // -- session_queue_store ---------------------------------------------------------

    awaitable<result<queue_place>> enqueue(std::string_view resource, const owner_token& owner,
                                           diagnostics* diag = nullptr)
    {
        if (auto ec = validate_resource(resource))
            return backend::failed<queue_place>(ec);
        return enqueued(session_, life_, settings().root(), detail::resource_node(settings().root(), resource),
                        owner.to_hex(), settings().dialect, acl(), {}, diag);
    }

    /// enqueue() for an election's campaign standing with `value`. In the latch dialect
    /// the node is made with `value` as its data (a Curator LeaderLatch participant's
    /// id, which Curator's getLeader() reads), and proclaim() then only confirms it; in
    /// the other dialects the node is made empty, as by enqueue(), and the value is
    /// proclaimed once it holds. A value longer than max_leader_value_size is refused
    /// before any I/O (errc::invalid_argument).
    awaitable<result<queue_place>> enqueue_candidate(std::string_view resource, const owner_token& owner,
                                                     std::string_view value, diagnostics* diag = nullptr)
    {
        if (auto ec = validate_resource(resource))
            return backend::failed<queue_place>(ec);
        if (value.size() > max_leader_value_size) {
            if (diag)
                diag->set_client_message("a leader's value is at most " + std::to_string(max_leader_value_size) +
                                         " bytes, not " + std::to_string(value.size()));
            return backend::failed<queue_place>(distlock::errc::invalid_argument);
        }
        const bool latch = settings().dialect == zookeeper::dialect::latch;
        return enqueued(session_, life_, settings().root(), detail::resource_node(settings().root(), resource),
                        owner.to_hex(), settings().dialect, acl(), latch ? std::string{value} : std::string{}, diag);
    }

    /// For this store, `entry` is the sequence number of the node to wait for (the
    /// predecessor enqueue() reported), or a holder's fence (its czxid: what an
    /// election's observer knows of its leader) when no node of the queue has that
    /// sequence number: then the lowest node is waited for if it has that czxid, else
    /// true at once. A predecessor this client saw is taken by its sequence number
    /// first, so a waiter never waits for a node by a fence that happens to be equal.
    awaitable<bool> wait_gone(std::string_view resource, fence_token entry, time_point until)
    {
        if (validate_resource(resource) || entry > static_cast<fence_token>(INT64_MAX))
            return gone_at_once();
        return waited(session_, detail::resource_node(settings().root(), resource),
                      static_cast<std::int64_t>(entry), until);
    }

    awaitable<result<void>> dequeue(std::string_view resource, const owner_token& owner, diagnostics* diag = nullptr)
    {
        if (auto ec = validate_resource(resource))
            return backend::failed<void>(ec);
        return dequeued(session_, detail::resource_node(settings().root(), resource), owner.to_hex(), diag);
    }

    /// Binds a lease to the session and to its node (`entry` is the node's czxid):
    /// the lease hears of the session's states, and of its node's deletion by anyone
    /// but its own release (lost, at once or by the session's next ping).
    std::optional<time_point> bind(std::string_view resource, fence_token entry,
                                   std::weak_ptr<session_listener> listener)
    {
        if (validate_resource(resource) || entry > static_cast<fence_token>(INT64_MAX))
            return std::nullopt;
        return session_->bind(detail::resource_node(settings().root(), resource), static_cast<std::int64_t>(entry),
                              std::move(listener));
    }

    // -- lock_delay_store ------------------------------------------------------------

    /// Marks the grant of the node with czxid `fence` (`owner`'s, the lowest) for a
    /// lock-delay: the resource's lock-delay node (paths.hpp) is created, or set at the
    /// version read, naming that node, in one multi with a check that the node is still
    /// there (errc::not_owner when it is gone). Its release deletes the mark with the
    /// node in one multi; the node gone any other way (its session ended, a revoke)
    /// leaves the mark, which the next queue head turns into a tombstone (see
    /// delay_in_force()). The delay is kept in whole milliseconds, rounded up.
    awaitable<result<void>> arm_delay(std::string_view resource, const owner_token& owner, fence_token fence,
                                      duration delay, diagnostics* diag = nullptr)
    {
        if (auto ec = validate_resource(resource))
            return backend::failed<void>(ec);
        if (!lock_delay_refusal().empty()) {
            if (diag)
                diag->set_client_message(std::string{lock_delay_refusal()});
            return backend::failed<void>(distlock::errc::invalid_argument);
        }
        const auto ms = std::chrono::ceil<std::chrono::milliseconds>(delay).count();
        if (ms < 0 || ms > detail::max_delay_ms) {
            if (diag)
                diag->set_client_message("a lock-delay is at least zero and at most " +
                                         std::to_string(detail::max_delay_ms) + " ms");
            return backend::failed<void>(distlock::errc::invalid_argument);
        }
        if (fence == 0 || fence > static_cast<fence_token>(INT64_MAX)) // no node has that czxid
            return backend::failed<void>(distlock::errc::not_owner);
        return armed(session_, detail::resource_node(settings().root(), resource), owner.to_hex(),
                     static_cast<std::int64_t>(fence), ms, acl(), diag);
    }

    /// Why this store keeps no lock-delay under its settings (the mutex refuses one
    /// before any I/O, saying this); empty when it keeps them. The latch dialect keeps
    /// none: Curator's LeaderLatch would not honour it, and its participants would read
    /// the lock-delay node as one of theirs (getParticipants() lists every child).
    std::string_view lock_delay_refusal() const noexcept
    {
        if (settings().dialect == zookeeper::dialect::latch)
            return "the ZooKeeper store's latch dialect keeps no lock-delay: Curator's LeaderLatch would not "
                   "honour it";
        return {};
    }

    // -- shared_queue_store ----------------------------------------------------------

    /// enqueue() for shared grants: the call's node is named with its mode (paths.hpp),
    /// made with the read of the queue in one write or found again by owner, and holds
    /// by the rules of shared_queue_store (detail/shared.hpp); its fence is its czxid,
    /// as a mutex's node's. A granted permit takes its slot in the permits' record with
    /// a write conditional on the record's version. A node whose count of permits
    /// differs from an older shared node's is deleted, and the call refused
    /// (errc::invalid_argument). An exclusive entry takes no permits.
    awaitable<result<shared_place>> enqueue_shared(std::string_view resource, const owner_token& owner,
                                                   lock_mode mode, std::uint32_t permits,
                                                   diagnostics* diag = nullptr)
    {
        if (auto ec = validate_resource(resource))
            return backend::failed<shared_place>(ec);
        if (mode == lock_mode::exclusive && permits != 0) {
            if (diag)
                diag->set_client_message("an exclusive entry takes no permits");
            return backend::failed<shared_place>(distlock::errc::invalid_argument);
        }
        return enqueued_shared(session_, settings().root(), detail::resource_node(settings().root(), resource),
                               owner.to_hex(), settings().dialect, mode, permits, acl(), diag);
    }

    /// For this store, `entry` is the waiting node's czxid (the fence enqueue_shared()
    /// reported): true once one of the nodes its last look at the queue found in its
    /// way is gone, or at once when this client knows of no such node for it now.
    awaitable<bool> wait_turn(std::string_view resource, fence_token entry, time_point until)
    {
        if (validate_resource(resource) || entry > static_cast<fence_token>(INT64_MAX))
            return gone_at_once();
        return turn_waited(session_, detail::resource_node(settings().root(), resource),
                           static_cast<std::int64_t>(entry), until);
    }

    /// Reads the lock on `resource` without taking it: the lowest node (owner, fence).
    /// Not held: the zxid the server had reached as the fence (the next holder's is
    /// larger). There is no TTL to report: the holder's session keeps it.
    awaitable<result<lock_info>> read(std::string_view resource, diagnostics* diag = nullptr)
    {
        if (auto ec = validate_resource(resource))
            return backend::failed<lock_info>(ec);
        return inspected(session_, detail::resource_node(settings().root(), resource), diag);
    }

    // -- electing_store ----------------------------------------------------------------

    /// Stores an election's `value` in the node of the grant `owner` holds on
    /// `resource` with fence `epoch`, after its holder's mark (detail/election.hpp):
    /// the queue and the node are read (the node must be the lowest, of `owner`, with
    /// czxid `epoch`), then its data is set on the condition that its data version is
    /// still the one read. Its path names that grant and nothing else (revoked() says
    /// why), so the write lands on that grant's node while it holds, or not at all:
    /// errc::not_owner once the node is gone or never was the holder. A value longer
    /// than max_leader_value_size is refused before any I/O (errc::invalid_argument).
    awaitable<result<void>> proclaim(std::string_view resource, const owner_token& owner, fence_token epoch,
                                     std::string_view value, diagnostics* diag = nullptr)
    {
        if (auto ec = validate_resource(resource))
            return backend::failed<void>(ec);
        if (value.size() > max_leader_value_size) {
            if (diag)
                diag->set_client_message("a leader's value is at most " + std::to_string(max_leader_value_size) +
                                         " bytes, not " + std::to_string(value.size()));
            return backend::failed<void>(distlock::errc::invalid_argument);
        }
        if (epoch == 0 || epoch > static_cast<fence_token>(INT64_MAX)) // no node has that czxid
            return backend::failed<void>(distlock::errc::not_owner);
        if (settings().dialect == zookeeper::dialect::latch)
            return proclaimed(session_, detail::resource_node(settings().root(), resource), owner.to_hex(),
                              static_cast<std::int64_t>(epoch), std::string{value}, true, diag);
        return proclaimed(session_, detail::resource_node(settings().root(), resource), owner.to_hex(),
                          static_cast<std::int64_t>(epoch), detail::proclaimed_data(value), false, diag);
    }

    /// The lowest node of `resource`'s queue (its fence, its owner as read() shows it)
    /// and the value its data carries when that node proclaimed one (detail/election.hpp);
    /// default leader_info when nothing is held. No time left is reported: the
    /// holder's session keeps it. A value marked as proclaimed that no proclaim writes
    /// (longer than max_leader_value_size) is errc::protocol_error.
    awaitable<result<leader_info>> leader(std::string_view resource, diagnostics* diag = nullptr)
    {
        if (auto ec = validate_resource(resource))
            return backend::failed<leader_info>(ec);
        return led(session_, detail::resource_node(settings().root(), resource), diag);
    }

    // -- enumerable_store, revocable_store ---------------------------------------------

    /// The locks held now whose resource id begins with `prefix`, sorted by id: each
    /// with its holder's owner (8 hex digits), its fence (the holder node's czxid, also
    /// reported as the version) and the number of waiters queued behind it. No time
    /// left is reported: the holder's session keeps the lock. A snapshot of three
    /// pipelined reads: a resource whose nodes went between them is left out.
    awaitable<result<std::vector<lock_listing>>> list(std::string_view prefix, diagnostics* diag = nullptr)
    {
        return listed(session_, settings().root(), std::string{prefix}, diag);
    }

    /// Frees the lock on `resource` if its holder is still the grant with `fence` (its
    /// node's czxid): deletes that node, as the holder's release would, which wakes the
    /// next waiter. Else errc::not_owner, nothing changed (a waiter's node is never
    /// deleted). The holder's lease is lost once its client hears of the deletion: at
    /// once when its watch is set, else at its session's next ping.
    awaitable<result<void>> revoke(std::string_view resource, fence_token fence, diagnostics* diag = nullptr)
    {
        if (auto ec = validate_resource(resource))
            return backend::failed<void>(ec);
        return revoked(session_, detail::resource_node(settings().root(), resource), fence, diag);
    }

    // -- Beyond the concepts ----------------------------------------------------------

    /// Whether the session is connected and known alive now.
    bool valid_session() const { return session_->valid_until().has_value(); }
    /// The session's id now (0: none yet, or it ended), for tests and diagnostics.
    std::int64_t session_id() const { return session_->id(); }
    /// The session timeout the server granted (before the first connect: the one asked for).
    duration negotiated_timeout() const { return session_->negotiated_timeout(); }
    /// Pings sent so far (one per third of the timeout for all the store's locks).
    std::size_t pings_sent() const { return session_->pings_sent(); }
    /// Sessions made so far (one more after each expiry).
    std::size_t sessions_made() const { return session_->sessions_made(); }
    /// The index of the server the session talks to now.
    std::size_t server_in_use() const { return session_->server_in_use(); }
    /// Leases bound to the session now (a released or lost one is unbound).
    std::size_t leases_bound() const { return session_->bound(); }

private:
    using session = detail::session;
    using request = detail::request;

    template <class T>
    static awaitable<result<T>> failed(std::error_code ec)
    {
        co_return ec;
    }
    static awaitable<bool> gone_at_once() { co_return true; }

    proto::acl acl() const { return settings().username.empty() ? proto::acl::open : proto::acl::creator; }

    // One write of `requests` (a plain call: no braced list inside co_await).
    template <class... Requests>
    static awaitable<result<std::vector<proto::reply>>> send(std::shared_ptr<session> s, diagnostics* diag,
                                                             Requests... requests)
    {
        std::vector<request> all;
        all.reserve(sizeof...(Requests));
        (all.push_back(std::move(requests)), ...);
        return session::call(std::move(s), std::move(all), diag);
    }

    static request create_waiter(session& s, const std::string& prefix_path, proto::acl a, std::string_view data = {})
    {
        const auto x = s.next_xid();
        return {x, proto::encode_create2(x, prefix_path, data, proto::create_flags::ephemeral | proto::create_flags::sequential, a)};
    }
    static request children_of(session& s, const std::string& parent)
    {
        const auto x = s.next_xid();
        return {x, proto::encode_get_children2(x, parent, false)};
    }
    static request data_of(session& s, const std::string& path)
    {
        const auto x = s.next_xid();
        return {x, proto::encode_get_data(x, path, false)};
    }
    static request write_record(session& s, const std::string& path, const std::string& data, std::int32_t version)
    {
        const auto x = s.next_xid();
        return {x, proto::encode_set_data(x, path, data, version)};
    }
    static request remove(session& s, const std::string& path, std::int32_t version = -1)
    {
        const auto x = s.next_xid();
        return {x, proto::encode_delete(x, path, version)};
    }
    static request transaction(session& s, const std::vector<proto::multi_op>& ops)
    {
        const auto x = s.next_xid();
        return {x, proto::encode_multi(x, ops)};
    }
    // Conditional on the data as created (version 0): a value the holder proclaimed
    // meanwhile carries the mark already, and is never overwritten by it.
    static request mark(session& s, const std::string& path)
    {
        const auto x = s.next_xid();
        return {x, proto::encode_set_data(x, path, detail::holder_mark, 0)};
    }
    static request watched_data(session& s, const std::string& path)
    {
        const auto x = s.next_xid();
        return {x, proto::encode_get_data(x, path, true)};
    }
    static request exists(session& s, const std::string& path, bool watch)
    {
        const auto x = s.next_xid();
        return {x, proto::encode_exists(x, path, watch)};
    }

    // The error a reply's err says, with the path in the diagnostics.
    static std::error_code refused(const proto::reply& r, const std::string& path, diagnostics* diag)
    {
        const auto ec = from_reply(r.err);
        if (diag)
            diag->set_server_message(ec.message() + " (" + path + ")");
        return ec;
    }

    // A reply whose body does not read as `what` answers: errc::protocol_error, with
    // the bytes the server sent (their start, escaped) in the diagnostics.
    static std::error_code malformed(const proto::reply& r, std::string_view what, const std::string& path,
                                     diagnostics* diag)
    {
        return unreadable("an unreadable " + std::string{what} + " reply for " + path, r.body, diag);
    }

    // errc::protocol_error, with `what` and the start of `bytes` (escaped, and their
    // length) in the diagnostics.
    static std::error_code unreadable(const std::string& what, std::string_view bytes, diagnostics* diag)
    {
        if (diag) {
            constexpr std::size_t shown = 64;
            diag->set_server_message(what + " (" + std::to_string(bytes.size()) + " bytes: " +
                                     distlock::util::escape(bytes.substr(0, shown)) +
                                     (bytes.size() > shown ? "...)" : ")"));
        }
        return distlock::errc::protocol_error;
    }

    // Where this call's node `mine` stands in `children` (remembered at `prefix_path`).
    static result<queue_place> placed(session& s, const std::string& parent, const std::string& prefix_path,
                                      const std::vector<std::string>& children, const std::string& owner_hex,
                                      session::made_node mine)
    {
        const auto st = detail::stand(children, owner_hex, mine.name);
        if (!st.found)
            return distlock::errc::not_owner; // gone meanwhile: the caller makes it again
        if (st.first)
            return first_place(s, parent, mine);
        s.remember_predecessor(parent, st.predecessor_sequence, std::string{st.predecessor});
        mine.predecessor = st.predecessor_sequence;
        mine.predecessor_held = st.predecessor == st.holder;
        mine.promoted = false;
        s.remember(prefix_path, mine);
        return queue_place{static_cast<fence_token>(mine.czxid), false,
                           static_cast<fence_token>(st.predecessor_sequence)};
    }

    static queue_place first_place(session& s, const std::string& parent, const session::made_node& mine)
    {
        s.granted(mine.czxid, mine.session, detail::child_path(parent, mine.name));
        return queue_place{static_cast<fence_token>(mine.czxid), true, std::nullopt};
    }

    static awaitable<result<queue_place>> enqueued(std::shared_ptr<session> s,
                                                   std::shared_ptr<distlock::backend::lifetime> life, std::string root,
                                                   std::string parent, std::string owner_hex, zookeeper::dialect d,
                                                   proto::acl a, std::string data, diagnostics* diag)
    {
        // A latch participant's node is never written after its create: a setData would
        // spend the data watch of Curator's LeaderLatch participant behind it, which
        // acts on a deletion only and would then miss this node's going.
        const bool marks = d != zookeeper::dialect::latch;
        // This call's node is remembered under its owner, whatever the dialect names it.
        const auto prefix_path = detail::child_path(parent, owner_hex, "-");
        const auto create_path =
            detail::child_path(parent, detail::entry_prefix(d, owner_hex, lock_mode::exclusive, 0, true));
        for (int round = 0; round < 4; ++round) {
            const auto known = s->made(prefix_path);
            const auto sid = s->id();
            if (known && known->czxid != 0 && known->session == sid && sid != 0) {
                // The holder just before it is gone (its watch said so): it holds the lock.
                if (known->promoted) {
                    // No read of the queue, but the lock-delay node's: the holder that
                    // went may have left a mark.
                    auto delayed = co_await delay_in_force(s, parent, std::nullopt, known->name, diag);
                    if (!delayed)
                        co_return delayed.error();
                    if (delayed.value())
                        co_return queue_place{static_cast<fence_token>(known->czxid), false, std::nullopt,
                                              *delayed.value()};
                    if (marks)
                        life->spawn(marked(s, detail::child_path(parent, known->name)));
                    co_return first_place(*s, parent, *known);
                }
                // This call's node, made under this session (it tries again after a
                // wake-up): one read says where it stands.
                auto got = co_await send(s, diag, children_of(*s, parent));
                if (!got)
                    co_return got.error();
                const auto& r = got.value().front();
                if (r.err == 0) {
                    const auto children = proto::parse_get_children2(r.body);
                    if (!children)
                        co_return malformed(r, "getChildren2", parent, diag);
                    auto place = co_await head_placed(s, parent, prefix_path, children->names, owner_hex, *known, diag);
                    if (place && place.value().first && marks)
                        life->spawn(marked(s, detail::child_path(parent, known->name)));
                    if (place || place.error() != condition::not_owner)
                        co_return place;
                } else if (r.err != static_cast<int>(errc::no_node)) {
                    co_return refused(r, parent, diag);
                }
                s->forget(prefix_path); // gone with an earlier session: made again, at the back
                continue;
            }
            if (known) {
                // A create whose reply did not come, or a node of an earlier session:
                // look for it before creating (never a second node of this call).
                auto found = co_await recovered(s, parent, owner_hex, diag);
                if (!found)
                    co_return found.error();
                if (found.value()) {
                    s->remember(prefix_path, *found.value());
                    continue; // now known under this session: placed by the read above
                }
                s->forget(prefix_path);
            }
            // Mark the create as sent before sending it: if its reply is lost, the next
            // try looks before it creates.
            s->remember(prefix_path, session::made_node{});
            auto got = co_await send(s, diag, create_waiter(*s, create_path, a, data), children_of(*s, parent));
            if (!got)
                co_return got.error();
            const auto& created_reply = got.value()[0];
            const auto& children_reply = got.value()[1];
            if (created_reply.err == static_cast<int>(errc::no_node)) {
                s->forget(prefix_path);
                if (auto ec = co_await made_parents(s, root, parent, a, diag))
                    co_return ec;
                continue;
            }
            if (created_reply.err != 0) {
                s->forget(prefix_path);
                co_return refused(created_reply, create_path, diag);
            }
            const auto created = proto::parse_create2(created_reply.body);
            if (!created)
                co_return malformed(created_reply, "create2", create_path, diag);
            session::made_node mine{std::string{detail::base_name(created->path)}, created->stat.czxid,
                                    created->stat.ephemeral_owner};
            const auto name = detail::parse_waiter(mine.name);
            if (mine.czxid <= 0 || !name || name->owner != owner_hex || name->mode != lock_mode::exclusive)
                co_return malformed(created_reply, "create2", create_path, diag);
            s->remember(prefix_path, mine);
            if (children_reply.err != 0)
                continue; // the read failed after the create: read again
            const auto children = proto::parse_get_children2(children_reply.body);
            if (!children)
                co_return malformed(children_reply, "getChildren2", parent, diag);
            auto place = co_await head_placed(s, parent, prefix_path, children->names, owner_hex, mine, diag);
            if (place || place.error() != condition::not_owner)
                co_return place;
            s->forget(prefix_path);
        }
        co_return distlock::errc::session_lost;
    }

    // placed(), and for the head of a queue with a lock-delay node, whether a lock-delay
    // holds it back: then it keeps its place, not holding yet (delayed_until).
    static awaitable<result<queue_place>> head_placed(std::shared_ptr<session> s, std::string parent,
                                                      std::string prefix_path, std::vector<std::string> children,
                                                      std::string owner_hex, session::made_node mine,
                                                      diagnostics* diag)
    {
        if (detail::has_delay_node(children)) {
            const auto st = detail::stand(children, owner_hex, mine.name);
            if (st.found && st.first) {
                auto delayed = co_await delay_in_force(s, parent, children, mine.name, diag);
                if (!delayed)
                    co_return delayed.error();
                if (delayed.value()) {
                    mine.predecessor = 0;
                    mine.predecessor_held = false;
                    s->remember(prefix_path, mine);
                    co_return queue_place{static_cast<fence_token>(mine.czxid), false, std::nullopt,
                                          *delayed.value()};
                }
            }
        }
        co_return placed(*s, parent, prefix_path, children, owner_hex, mine);
    }

    // The margin added to a tombstone's end for clocks of day that disagree a little
    // (docs/zookeeper.md, "Lock-delay").
    static constexpr std::int64_t delay_clock_margin_ms = 100;

    // The end of a tombstone written at the server's `mtime` (ms of the leader's clock
    // of day) for `delay_ms`, by this process's clock, through this host's clock of day.
    // Never later than delay_ms (and the margin) from now: the tombstone was written in
    // the past, whatever a clock ahead of this one says.
    static time_point delay_end(std::int64_t mtime, std::int64_t delay_ms)
    {
        const auto now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                                std::chrono::system_clock::now().time_since_epoch())
                                .count();
        const auto longest = delay_ms + delay_clock_margin_ms;
        // Both within range: a mtime beyond ±2^62 would overflow the difference.
        constexpr std::int64_t bound = std::int64_t{1} << 62;
        std::int64_t left = longest;
        if (mtime > -bound && mtime < bound)
            left = std::min(longest, mtime + longest - now_ms);
        return clock::now() + std::chrono::milliseconds{std::max<std::int64_t>(left, 0)};
    }

    // Whether the lock-delay of `parent` holds its head (the node `mine`) back: nullopt
    // when it may hold, else until when. The lock-delay node's data is read: a mark
    // whose node is gone (not among `children`, the queue as the head read it; read by
    // an exists when not given) ended without a release, and is turned into a tombstone
    // by a setData at the version read (the first head to write wins; the others read
    // it again), whose mtime starts the delay. A passed tombstone is deleted at the
    // version read. A mark of this very node, or of a node still queued, holds nobody
    // back: its grant still stands or was this call's.
    static awaitable<result<std::optional<time_point>>> delay_in_force(std::shared_ptr<session> s, std::string parent,
                                                                       std::optional<std::vector<std::string>> children,
                                                                       std::string mine, diagnostics* diag)
    {
        using until_type = std::optional<time_point>;
        const auto path = detail::child_path(parent, detail::delay_node);
        for (int round = 0; round < 4; ++round) {
            auto got = co_await send(s, diag, data_of(*s, path));
            if (!got)
                co_return got.error();
            const auto& r = got.value().front();
            if (r.err == static_cast<int>(errc::no_node))
                co_return until_type{};
            if (r.err != 0)
                co_return refused(r, path, diag);
            const auto d = proto::parse_get_data(r.body);
            if (!d)
                co_return malformed(r, "getData", path, diag);
            const auto m = detail::parse_delay(d->data);
            if (!m)
                co_return unreadable("the data of " + path + " is no lock-delay mark", d->data, diag);
            if (m->ended) {
                const auto until = delay_end(d->stat.mtime, m->delay_ms);
                if (until > clock::now())
                    co_return until_type{until};
                // Passed: gone with it (a newer mark, written since, stays).
                auto gone = co_await send(s, diag, remove(*s, path, d->stat.version));
                if (!gone)
                    co_return gone.error();
                const auto& g = gone.value().front();
                if (g.err == 0 || g.err == static_cast<int>(errc::no_node))
                    co_return until_type{};
                if (g.err != static_cast<int>(errc::bad_version))
                    co_return refused(g, path, diag);
                continue;
            }
            if (m->holder == mine)
                co_return until_type{};
            bool standing = false;
            if (children) {
                standing = std::find(children->begin(), children->end(), m->holder) != children->end();
            } else {
                const auto holder = detail::child_path(parent, m->holder);
                auto look = co_await send(s, diag, exists(*s, holder, false));
                if (!look)
                    co_return look.error();
                const auto& e = look.value().front();
                if (e.err != 0 && e.err != static_cast<int>(errc::no_node))
                    co_return refused(e, holder, diag);
                standing = e.err == 0;
            }
            if (standing)
                co_return until_type{};
            auto ended = *m;
            ended.ended = true;
            auto wrote = co_await send(s, diag, write_record(*s, path, detail::delay_data(ended), d->stat.version));
            if (!wrote)
                co_return wrote.error();
            const auto& w = wrote.value().front();
            if (w.err == 0) {
                const auto stat = proto::parse_stat(w.body);
                if (!stat)
                    co_return malformed(w, "setData", path, diag);
                co_return until_type{delay_end(stat->mtime, ended.delay_ms)};
            }
            if (w.err != static_cast<int>(errc::bad_version) && w.err != static_cast<int>(errc::no_node))
                co_return refused(w, path, diag);
            // Another head wrote it first, or it went: read it again.
        }
        if (diag)
            diag->set_client_message("the lock-delay node " + path + " kept changing while it was read");
        co_return distlock::errc::store_unavailable;
    }

    // A multi's answer: one result per operation sent (`count`), or the error that
    // refused it whole.
    static result<std::vector<proto::multi_result>> transacted(const proto::reply& r, std::size_t count,
                                                               const std::string& path, diagnostics* diag)
    {
        if (r.err != 0 && r.body.empty())
            return refused(r, path, diag);
        auto results = proto::parse_multi(r.body);
        if (!results || results->size() != count)
            return malformed(r, "multi", path, diag);
        return std::move(*results);
    }

    // The first operation of a multi that failed, and its error; nullopt when all went.
    static std::optional<std::pair<std::size_t, int>> failed_op(const std::vector<proto::multi_result>& results)
    {
        for (std::size_t i = 0; i < results.size(); ++i)
            if (results[i].err != 0 && results[i].err != static_cast<int>(errc::runtime_inconsistency))
                return std::pair<std::size_t, int>{i, results[i].err};
        return std::nullopt;
    }

    static awaitable<result<void>> armed(std::shared_ptr<session> s, std::string parent, std::string owner_hex,
                                         std::int64_t czxid, std::int64_t ms, proto::acl a, diagnostics* diag)
    {
        const auto key = detail::child_path(parent, owner_hex, "-");
        auto mine = s->made(key);
        const auto sid = s->id();
        if (!mine || mine->czxid != czxid || mine->session != sid || sid == 0) {
            // Not this session's node: its release would not know of the mark, so no
            // grant is marked but one this store made.
            if (diag)
                diag->set_client_message("no grant with fence " + std::to_string(czxid) +
                                         " of this owner is known to this store's session");
            co_return distlock::errc::not_owner;
        }
        const auto holder = detail::child_path(parent, mine->name);
        const auto path = detail::child_path(parent, detail::delay_node);
        const auto data = detail::delay_data({false, ms, mine->name});
        std::optional<std::int32_t> over; // the version of a mark found there, else created
        for (int round = 0; round < 4; ++round) {
            std::vector<proto::multi_op> ops;
            ops.push_back({proto::op::check, holder, -1});
            if (over)
                ops.push_back({proto::op::set_data, path, *over, data});
            else
                ops.push_back({proto::op::create, path, -1, data, proto::create_flags::persistent, a});
            auto got = co_await send(s, diag, transaction(*s, ops));
            if (!got)
                co_return got.error();
            auto results = transacted(got.value().front(), ops.size(), path, diag);
            if (!results)
                co_return results.error();
            const auto failed = failed_op(results.value());
            if (!failed) {
                const auto& written = results.value().back();
                if (over && !written.stat)
                    co_return malformed(got.value().front(), "multi", path, diag);
                mine->delay_mark = over ? written.stat->version : 0;
                s->remember(key, *mine);
                co_return success();
            }
            if (failed->first == 0) {
                if (failed->second == static_cast<int>(errc::no_node))
                    co_return distlock::errc::not_owner;
                co_return refused(proto::reply{0, 0, failed->second, {}}, holder, diag);
            }
            if (failed->second == static_cast<int>(errc::node_exists) ||
                failed->second == static_cast<int>(errc::bad_version)) {
                // A mark left there (a passed tombstone): overwritten at its version.
                auto look = co_await send(s, diag, exists(*s, path, false));
                if (!look)
                    co_return look.error();
                const auto& e = look.value().front();
                if (e.err == static_cast<int>(errc::no_node)) {
                    over.reset();
                    continue;
                }
                if (e.err != 0)
                    co_return refused(e, path, diag);
                const auto stat = proto::parse_stat(e.body);
                if (!stat)
                    co_return malformed(e, "exists", path, diag);
                over = stat->version;
                continue;
            }
            if (failed->second == static_cast<int>(errc::no_node) && over) {
                over.reset();
                continue;
            }
            co_return refused(proto::reply{0, 0, failed->second, {}}, path, diag);
        }
        if (diag)
            diag->set_client_message("the lock-delay node " + path + " kept changing while it was written");
        co_return distlock::errc::store_unavailable;
    }

    // A waiter that came to hold the lock marks its node (sets its data): its successor
    // queued while it still waited, so it saw a waiter before it, and would otherwise
    // have to read the queue again when the node goes. The mark's data-changed event (or
    // the mark seen by the successor's exists) tells it that the node before it holds
    // the lock, so its deletion alone promotes the successor. Background work: the
    // grant does not wait for it, and a mark that fails costs only that read.
    static awaitable<void> marked(std::shared_ptr<session> s, std::string path)
    {
        (void)co_await send(s, nullptr, mark(*s, path));
    }

    // This call's node among the children, if it is there and of the current session;
    // one of an earlier session is deleted. The node's record, or nullopt.
    static awaitable<result<std::optional<session::made_node>>> recovered(std::shared_ptr<session> s,
                                                                          std::string parent, std::string owner_hex,
                                                                          diagnostics* diag)
    {
        auto got = co_await send(s, diag, children_of(*s, parent));
        if (!got)
            co_return got.error();
        const auto& r = got.value().front();
        if (r.err == static_cast<int>(errc::no_node))
            co_return std::optional<session::made_node>{};
        if (r.err != 0)
            co_return refused(r, parent, diag);
        const auto children = proto::parse_get_children2(r.body);
        if (!children)
            co_return malformed(r, "getChildren2", parent, diag);
        for (const auto& name : children->names) {
            const auto w = detail::parse_waiter(name);
            if (!w || w->owner != owner_hex)
                continue;
            const auto path = detail::child_path(parent, name);
            auto look = co_await send(s, diag, exists(*s, path, false));
            if (!look)
                co_return look.error();
            const auto& e = look.value().front();
            if (e.err == static_cast<int>(errc::no_node))
                continue;
            if (e.err != 0)
                co_return refused(e, path, diag);
            const auto stat = proto::parse_stat(e.body);
            if (!stat)
                co_return malformed(e, "exists", path, diag);
            if (stat->ephemeral_owner == s->id() && stat->ephemeral_owner != 0)
                co_return std::optional<session::made_node>{session::made_node{name, stat->czxid, stat->ephemeral_owner}};
            // An earlier session's: it must not hold a lock for this one.
            auto dropped = co_await send(s, diag, remove(*s, path));
            if (!dropped)
                co_return dropped.error();
        }
        co_return std::optional<session::made_node>{};
    }

    // Makes every missing node above a resource's node (persistent), then the resource's
    // node (a container). Only the last answer matters: an ancestor that exists may
    // refuse a create for lack of permission on its own parent.
    static awaitable<std::error_code> made_parents(std::shared_ptr<session> s, std::string root, std::string parent,
                                                   proto::acl a, diagnostics* diag)
    {
        std::vector<request> creates;
        for (std::size_t at = root.find('/', 1);; at = root.find('/', at + 1)) {
            const auto path = root.substr(0, at);
            const auto x = s->next_xid();
            creates.push_back({x, proto::encode_create2(x, path, {}, proto::create_flags::persistent, a)});
            if (at == std::string::npos)
                break;
        }
        const auto x = s->next_xid();
        creates.push_back({x, proto::encode_create2(x, parent, {}, proto::create_flags::container, a,
                                                    proto::op::create_container)});
        auto got = co_await session::call(s, std::move(creates), diag);
        if (!got)
            co_return got.error();
        const auto& last = got.value().back();
        if (last.err == 0 || last.err == static_cast<int>(errc::node_exists))
            co_return std::error_code{};
        if (last.err == static_cast<int>(errc::no_node)) // an ancestor could not be made: why
            for (const auto& r : got.value())
                if (r.err != 0 && r.err != static_cast<int>(errc::node_exists))
                    co_return refused(r, root, diag);
        co_return refused(last, parent, diag);
    }

    static awaitable<bool> waited(std::shared_ptr<session> s, std::string parent, std::int64_t seq, time_point until)
    {
        auto name = s->predecessor(parent, seq);
        // Waited for as a holder's fence (an election's observer), not as a predecessor:
        // its going promotes none of this client's waiters.
        bool by_fence = false;
        while (!name && clock::now() < until) {
            // Not seen by this client's last look: find it by its sequence number, else
            // as the holder whose czxid it is.
            auto got = co_await send(s, nullptr, children_of(*s, parent));
            if (got) {
                const auto& r = got.value().front();
                const auto children = r.err == 0 ? proto::parse_get_children2(r.body) : std::nullopt;
                if (r.err == static_cast<int>(errc::no_node))
                    co_return true;
                if (children) {
                    for (const auto& c : children->names)
                        if (const auto w = detail::parse_waiter(c); w && w->sequence == seq)
                            name = c;
                    if (!name) {
                        const auto st = detail::stand(children->names, {}, {});
                        if (st.holder.empty())
                            co_return true; // gone already
                        const auto holder_path = detail::child_path(parent, st.holder);
                        auto look = co_await send(s, nullptr, exists(*s, holder_path, false));
                        const auto stat = look && look.value().front().err == 0
                                              ? proto::parse_stat(look.value().front().body)
                                              : std::nullopt;
                        if (!stat || stat->czxid != seq)
                            co_return true; // gone already, or another grant holds now
                        name = std::string{st.holder};
                        by_fence = true;
                    }
                    break;
                }
            }
            if (co_await distlock::backend::cancelled())
                co_return false;
            co_await pause(until);
        }
        if (!name)
            co_return false;
        const auto path = detail::child_path(parent, *name);
        const auto ex = co_await asio::this_coro::executor;
        while (clock::now() < until && !co_await distlock::backend::cancelled()) {
            // Registered before the request that sets the watch: its notification may
            // come before the reply.
            auto w = s->watches().add(path, ex);
            // Its data, not only its stat: whether it carries the holder's mark.
            auto got = co_await send(s, nullptr, watched_data(*s, path));
            if (got) {
                const auto& r = got.value().front();
                if (r.err == static_cast<int>(errc::no_node)) {
                    s->watches().remove(path, w);
                    if (!by_fence)
                        s->predecessor_deleted(parent, seq);
                    co_return true;
                }
                if (r.err == 0) {
                    if (const auto d = proto::parse_get_data(r.body); d && marks_holder(*d) && !by_fence)
                        s->predecessor_marked(parent, seq);
                    const bool woke = co_await w->wake.wait(until);
                    s->watches().remove(path, w);
                    // Its data changed: a waiter reads it (the holder's mark?) and watches
                    // on; an observer of the holder is told (a new value, most likely).
                    if (w->changed && !w->deleted && !by_fence)
                        continue;
                    if (w->deleted && !by_fence)
                        s->predecessor_deleted(parent, seq);
                    co_return woke || w->fired;
                }
            }
            s->watches().remove(path, w);
            co_await pause(until);
        }
        co_return false;
    }

    // -- Shared grants -----------------------------------------------------------------

    // enqueued() for a shared mutex's or a semaphore's node. The node is remembered
    // under the key a mutex's is (the owner's), so that dequeue() finds it alike; a
    // permit's read of the queue also reads the permits' record, just before the
    // children (detail/shared.hpp says why that order).
    static awaitable<result<shared_place>> enqueued_shared(std::shared_ptr<session> s, std::string root,
                                                           std::string parent, std::string owner_hex,
                                                           zookeeper::dialect d, lock_mode mode, std::uint32_t permits,
                                                           proto::acl a, diagnostics* diag)
    {
        const auto key = detail::child_path(parent, owner_hex, "-");
        const auto prefix_path = detail::child_path(parent, detail::entry_prefix(d, owner_hex, mode, permits));
        const bool counted = permits > 0;
        for (int round = 0; round < 4; ++round) {
            const auto known = s->made(key);
            const auto sid = s->id();
            if (known && known->czxid != 0 && known->session == sid && sid != 0) {
                // This call's node, made under this session: one read says where it stands.
                auto got = co_await queue_read(s, parent, counted, diag);
                if (!got)
                    co_return got.error();
                const auto& r = got.value().back();
                if (r.err == 0) {
                    auto place = co_await shared_placed(s, parent, key, std::move(got).value(), *known, mode,
                                                        permits, diag);
                    if (place || place.error() != condition::not_owner)
                        co_return place;
                } else if (r.err != static_cast<int>(errc::no_node)) {
                    co_return refused(r, parent, diag);
                }
                s->forget(key); // gone with an earlier session: made again, at the back
                continue;
            }
            if (known) {
                // A create whose reply did not come, or a node of an earlier session:
                // look for it before creating (never a second node of this call).
                auto found = co_await recovered(s, parent, owner_hex, diag);
                if (!found)
                    co_return found.error();
                if (found.value()) {
                    s->remember(key, *found.value());
                    continue;
                }
                s->forget(key);
            }
            // Marked as sent before it is sent: if its reply is lost, the next try looks
            // before it creates.
            s->remember(key, session::made_node{});
            auto got = co_await created_with_queue(s, parent, prefix_path, a, counted, diag);
            if (!got)
                co_return got.error();
            auto& replies = got.value();
            const auto& created_reply = replies.front();
            if (created_reply.err == static_cast<int>(errc::no_node)) {
                s->forget(key);
                if (auto ec = co_await made_parents(s, root, parent, a, diag))
                    co_return ec;
                continue;
            }
            if (created_reply.err != 0) {
                s->forget(key);
                co_return refused(created_reply, prefix_path, diag);
            }
            const auto created = proto::parse_create2(created_reply.body);
            if (!created)
                co_return malformed(created_reply, "create2", prefix_path, diag);
            session::made_node mine{std::string{detail::base_name(created->path)}, created->stat.czxid,
                                    created->stat.ephemeral_owner};
            const auto name = detail::parse_waiter(mine.name);
            if (mine.czxid <= 0 || !name || name->owner != owner_hex || name->mode != mode ||
                name->permits != permits)
                co_return malformed(created_reply, "create2", prefix_path, diag);
            s->remember(key, mine);
            if (replies.back().err != 0)
                continue; // the read failed after the create: read again
            replies.erase(replies.begin());
            auto place = co_await shared_placed(s, parent, key, std::move(replies), mine, mode, permits, diag);
            if (place || place.error() != condition::not_owner)
                co_return place;
            s->forget(key);
        }
        co_return distlock::errc::session_lost;
    }

    // The read of a shared node's queue: the permits' record first for a permit, then
    // the children.
    static awaitable<result<std::vector<proto::reply>>> queue_read(std::shared_ptr<session> s,
                                                                   const std::string& parent, bool counted,
                                                                   diagnostics* diag)
    {
        if (counted)
            return send(s, diag, data_of(*s, parent), children_of(*s, parent));
        return send(s, diag, children_of(*s, parent));
    }

    // The create of a shared node, and the read of its queue in the same write.
    static awaitable<result<std::vector<proto::reply>>> created_with_queue(std::shared_ptr<session> s,
                                                                           const std::string& parent,
                                                                           const std::string& prefix_path,
                                                                           proto::acl a, bool counted,
                                                                           diagnostics* diag)
    {
        if (counted)
            return send(s, diag, create_waiter(*s, prefix_path, a), data_of(*s, parent), children_of(*s, parent));
        return send(s, diag, create_waiter(*s, prefix_path, a), children_of(*s, parent));
    }

    // Where this call's node `mine` stands, from the read of the queue (`replies`: the
    // permits' record first for a permit, then the children). errc::not_owner: the node
    // is gone (the caller makes it again).
    static awaitable<result<shared_place>> shared_placed(std::shared_ptr<session> s, std::string parent,
                                                         std::string key, std::vector<proto::reply> replies,
                                                         session::made_node mine, lock_mode mode,
                                                         std::uint32_t permits, diagnostics* diag)
    {
        const auto& r = replies.back();
        const auto children = proto::parse_get_children2(r.body);
        if (!children)
            co_return malformed(r, "getChildren2", parent, diag);
        auto st = detail::stand_shared(children->names, mine.name);
        if (!st.unreadable.empty()) {
            if (diag)
                diag->set_server_message("a node under " + parent + " is named as an entry and reads as none: " +
                                         distlock::util::escape(st.unreadable));
            co_return distlock::errc::protocol_error;
        }
        if (!st.found)
            co_return distlock::errc::not_owner;
        const auto path = detail::child_path(parent, mine.name);
        if (st.mode != mode || st.permits != permits) {
            if (diag)
                diag->set_server_message("the node " + path + " of this lock() call is not of the mode it asked for");
            co_return distlock::errc::protocol_error;
        }
        if (!st.disagrees.empty()) {
            if (diag)
                diag->set_client_message("the resource is queued for as " + counted_as(st.disagreeing_permits) +
                                         " (node " + st.disagrees + "), not as " + counted_as(permits));
            co_return co_await withdrawn(s, key, path, mine.session);
        }
        if (!st.granted) {
            mine.waits_for = std::move(st.waits_for);
            s->remember(key, mine);
            co_return shared_place{static_cast<fence_token>(mine.czxid), false, std::nullopt};
        }
        if (detail::has_delay_node(children->names)) {
            auto delayed = co_await delay_in_force(s, parent, children->names, mine.name, diag);
            if (!delayed)
                co_return delayed.error();
            if (delayed.value()) {
                mine.waits_for.clear();
                s->remember(key, mine);
                co_return shared_place{static_cast<fence_token>(mine.czxid), false, std::nullopt, *delayed.value()};
            }
        }
        std::optional<std::uint32_t> slot;
        if (permits > 0) {
            auto claimed = co_await slot_claimed(s, parent, mine.name, std::move(replies.front()), std::move(st), diag);
            if (!claimed)
                co_return claimed.error();
            if (!claimed.value()) {
                // Other holders wrote the record each time: not granted yet, and no node
                // to wait for (it looks again at once).
                mine.waits_for.clear();
                s->remember(key, mine);
                co_return shared_place{static_cast<fence_token>(mine.czxid), false, std::nullopt};
            }
            slot = claimed.value();
        }
        mine.waits_for.clear();
        s->remember(key, mine);
        s->granted(mine.czxid, mine.session, path);
        co_return shared_place{static_cast<fence_token>(mine.czxid), true, slot};
    }

    static std::string counted_as(std::uint32_t permits)
    {
        return permits == 0 ? std::string{"a shared mutex"} : "a semaphore of " + std::to_string(permits) + " permits";
    }

    // The node just made for a count of permits the resource's queue does not agree
    // with: deleted (later, when the connection failed), and the call refused.
    static awaitable<result<shared_place>> withdrawn(std::shared_ptr<session> s, std::string key, std::string path,
                                                     std::int64_t sid)
    {
        s->forget(key);
        auto gone = co_await send(s, nullptr, remove(*s, path));
        if (!gone && backend::connection_error(gone.error()))
            s->delete_later(path, sid);
        co_return distlock::errc::invalid_argument;
    }

    // The slot of the granted permit `st` (named `name`), from the permits' record read
    // in `record`: its line's, or the lowest free one, written with the record's
    // version. nullopt when another holder wrote the record first twice in a row (the
    // caller looks again). errc::not_owner: the node or its resource's node is gone.
    static awaitable<result<std::optional<std::uint32_t>>> slot_claimed(std::shared_ptr<session> s,
                                                                        std::string parent, std::string name,
                                                                        proto::reply record,
                                                                        detail::shared_standing st, diagnostics* diag)
    {
        for (int round = 0;; ++round) {
            if (record.err == static_cast<int>(errc::no_node))
                co_return distlock::errc::not_owner;
            if (record.err != 0)
                co_return refused(record, parent, diag);
            const auto node = proto::parse_get_data(record.body);
            if (!node)
                co_return malformed(record, "getData", parent, diag);
            const auto recorded = detail::parse_slots(node->data);
            if (!recorded)
                co_return unreadable("the data of " + parent + " is no permits' record", node->data, diag);
            const auto claim = detail::claim_slot(*recorded, st.live, st.sequence);
            if (!claim.record)
                co_return std::optional<std::uint32_t>{claim.slot};
            auto wrote = co_await send(s, diag, write_record(*s, parent, *claim.record, node->stat.version));
            if (!wrote)
                co_return wrote.error();
            const auto& w = wrote.value().front();
            if (w.err == 0)
                co_return std::optional<std::uint32_t>{claim.slot};
            if (w.err == static_cast<int>(errc::no_node))
                co_return distlock::errc::not_owner;
            if (w.err != static_cast<int>(errc::bad_version))
                co_return refused(w, parent, diag);
            if (round > 0)
                co_return std::optional<std::uint32_t>{};
            // Another holder wrote the record first: read it again, then the queue.
            auto again = co_await send(s, diag, data_of(*s, parent), children_of(*s, parent));
            if (!again)
                co_return again.error();
            const auto& c = again.value().back();
            if (c.err == static_cast<int>(errc::no_node))
                co_return distlock::errc::not_owner;
            if (c.err != 0)
                co_return refused(c, parent, diag);
            const auto children = proto::parse_get_children2(c.body);
            if (!children)
                co_return malformed(c, "getChildren2", parent, diag);
            auto now = detail::stand_shared(children->names, name);
            if (!now.found)
                co_return distlock::errc::not_owner;
            st.live = std::move(now.live);
            record = std::move(again.value().front());
        }
    }

    // wait_gone() for a shared node: waits for the first of the nodes in its way to
    // go, one watch on each (set in one write), woken by whichever fires first.
    static awaitable<bool> turn_waited(std::shared_ptr<session> s, std::string parent, std::int64_t czxid,
                                       time_point until)
    {
        const auto mine = s->made_entry(parent, czxid);
        if (!mine || mine->waits_for.empty())
            co_return true; // nothing known to wait for under this session: look again
        std::vector<std::string> paths;
        paths.reserve(mine->waits_for.size());
        for (const auto& name : mine->waits_for)
            paths.push_back(detail::child_path(parent, name));
        const auto ex = co_await asio::this_coro::executor;
        while (clock::now() < until && !co_await distlock::backend::cancelled()) {
            // Registered before the requests that set the watches: a notification may
            // come before their replies.
            auto w = std::make_shared<detail::watch>(ex);
            for (const auto& p : paths)
                s->watches().add(p, w);
            const auto unwatch = [&] {
                for (const auto& p : paths)
                    s->watches().remove(p, w);
            };
            std::vector<request> looks;
            looks.reserve(paths.size());
            for (const auto& p : paths)
                looks.push_back(exists(*s, p, true));
            auto got = co_await session::call(s, std::move(looks), nullptr);
            if (got) {
                const auto& replies = got.value();
                const auto has = [&](int err) {
                    return std::any_of(replies.begin(), replies.end(), [&](const proto::reply& r) { return r.err == err; });
                };
                if (has(static_cast<int>(errc::no_node))) {
                    unwatch();
                    co_return true;
                }
                if (std::all_of(replies.begin(), replies.end(), [](const proto::reply& r) { return r.err == 0; })) {
                    const bool woke = co_await w->wake.wait(until);
                    unwatch();
                    if (w->changed && !w->deleted) // a holder's mark: its node is still there
                        continue;
                    co_return woke || w->fired;
                }
            }
            unwatch();
            co_await pause(until);
        }
        co_return false;
    }

    static awaitable<void> pause(time_point until)
    {
        timer t{co_await asio::this_coro::executor, std::min(until, clock::now() + std::chrono::milliseconds{100})};
        (void)co_await t.async_wait(distlock::backend::as_tuple_awaitable<Unused>());
    }

    static awaitable<result<void>> dequeued(std::shared_ptr<session> s, std::string parent, std::string owner_hex,
                                            diagnostics* diag)
    {
        const auto prefix_path = detail::child_path(parent, owner_hex, "-");
        const auto known = s->made(prefix_path);
        const auto sid = s->id();
        std::vector<std::string> paths;
        if (known && known->czxid != 0 && known->session == sid && sid != 0) {
            paths.push_back(detail::child_path(parent, known->name));
        } else {
            // Not known as made under this session: whatever of this owner is there.
            auto got = co_await send(s, diag, children_of(*s, parent));
            if (!got)
                co_return got.error();
            const auto& r = got.value().front();
            if (r.err == static_cast<int>(errc::no_node)) {
                s->forget(prefix_path);
                co_return distlock::errc::not_owner;
            }
            if (r.err != 0)
                co_return refused(r, parent, diag);
            const auto children = proto::parse_get_children2(r.body);
            if (!children)
                co_return malformed(r, "getChildren2", parent, diag);
            for (const auto& c : children->names)
                if (const auto w = detail::parse_waiter(c); w && w->owner == owner_hex)
                    paths.push_back(detail::child_path(parent, c));
            if (paths.empty()) {
                s->forget(prefix_path);
                co_return distlock::errc::not_owner;
            }
        }
        // Unbound before the delete is sent: the server tells of the deletion before it
        // answers the delete, and a lease that gives its lock back is not losing it.
        std::vector<request> deletes;
        for (const auto& p : paths) {
            s->unbind(p);
            deletes.push_back(remove(*s, p));
        }
        if (known)
            s->unbind(known->czxid);
        if (known && known->delay_mark >= 0 && paths.size() == 1) {
            // A marked grant: the mark goes with the node, in one multi, so that no
            // tombstone follows a release.
            const auto mark = detail::child_path(parent, detail::delay_node);
            std::vector<proto::multi_op> ops;
            ops.push_back({proto::op::remove, mark, known->delay_mark});
            ops.push_back({proto::op::remove, paths.front(), -1});
            auto multi = co_await send(s, diag, transaction(*s, ops));
            if (!multi) {
                if (backend::connection_error(multi.error()))
                    s->delete_later(paths.front(), sid);
                co_return multi.error();
            }
            auto results = transacted(multi.value().front(), ops.size(), mark, diag);
            if (!results)
                co_return results.error();
            const auto failed = failed_op(results.value());
            if (!failed) {
                s->forget(prefix_path);
                co_return success();
            }
            if (failed->first == 1) {
                s->forget(prefix_path);
                if (failed->second == static_cast<int>(errc::no_node))
                    co_return distlock::errc::not_owner; // gone already: its mark stays a tombstone
                co_return refused(proto::reply{0, 0, failed->second, {}}, paths.front(), diag);
            }
            // The mark is not the one written (gone, or rewritten): the node alone.
        }
        auto got = co_await session::call(s, std::move(deletes), diag);
        if (!got) {
            if (backend::connection_error(got.error()))
                for (const auto& p : paths)
                    s->delete_later(p, sid);
            co_return got.error();
        }
        s->forget(prefix_path);
        bool deleted = false;
        for (std::size_t i = 0; i < paths.size(); ++i) {
            const auto& r = got.value()[i];
            if (r.err == 0)
                deleted = true;
            else if (r.err != static_cast<int>(errc::no_node))
                co_return refused(r, paths[i], diag);
        }
        if (!deleted)
            co_return distlock::errc::not_owner;
        co_return success();
    }

    static awaitable<result<lock_info>> inspected(std::shared_ptr<session> s, std::string parent, diagnostics* diag)
    {
        auto got = co_await send(s, diag, children_of(*s, parent));
        if (!got)
            co_return got.error();
        const auto& r = got.value().front();
        lock_info info;
        if (r.err == static_cast<int>(errc::no_node)) {
            info.fence = static_cast<fence_token>(std::max<std::int64_t>(r.zxid, 0));
            co_return info;
        }
        if (r.err != 0)
            co_return refused(r, parent, diag);
        const auto children = proto::parse_get_children2(r.body);
        if (!children)
            co_return malformed(r, "getChildren2", parent, diag);
        const auto st = detail::stand(children->names, {}, {});
        if (st.holder.empty()) {
            info.fence = static_cast<fence_token>(std::max<std::int64_t>(r.zxid, 0));
            co_return info;
        }
        const auto path = detail::child_path(parent, st.holder);
        auto look = co_await send(s, diag, exists(*s, path, false));
        if (!look)
            co_return look.error();
        const auto& e = look.value().front();
        if (e.err == static_cast<int>(errc::no_node)) { // released in between
            info.fence = static_cast<fence_token>(std::max<std::int64_t>(e.zxid, 0));
            co_return info;
        }
        if (e.err != 0)
            co_return refused(e, path, diag);
        const auto stat = proto::parse_stat(e.body);
        if (!stat || stat->czxid <= 0)
            co_return malformed(e, "exists", path, diag);
        info.held = true;
        info.owner = owner_shown(st.holder);
        info.fence = static_cast<fence_token>(stat->czxid);
        info.version = info.fence;
        co_return info;
    }

    static awaitable<result<std::vector<lock_listing>>> listed(std::shared_ptr<session> s, std::string root,
                                                               std::string prefix, diagnostics* diag)
    {
        std::vector<lock_listing> out;
        auto top = co_await send(s, diag, children_of(*s, root));
        if (!top)
            co_return top.error();
        const auto& r = top.value().front();
        if (r.err == static_cast<int>(errc::no_node)) // nothing was ever locked here
            co_return out;
        if (r.err != 0)
            co_return refused(r, root, diag);
        const auto names = proto::parse_get_children2(r.body);
        if (!names)
            co_return malformed(r, "getChildren2", root, diag);

        // A resource by its node: names the store did not write are not resources.
        struct candidate {
            std::string resource;
            std::string node;
            std::string holder;
            std::size_t waiters = 0;
        };
        std::vector<candidate> found;
        for (const auto& name : names->names)
            if (auto id = detail::resource_of(name); id && id->starts_with(prefix))
                found.push_back({std::move(*id), detail::child_path(root, name), {}, 0});

        // Every queue, then every holder's node: one batch each.
        std::vector<request> reads;
        reads.reserve(found.size());
        for (const auto& c : found)
            reads.push_back(children_of(*s, c.node));
        auto queues = co_await session::call_batched(s, std::move(reads), diag);
        if (!queues)
            co_return queues.error();
        std::vector<candidate*> held;
        for (std::size_t i = 0; i < found.size(); ++i) {
            const auto& q = queues.value()[i];
            if (q.err == static_cast<int>(errc::no_node)) // emptied and deleted since the first read
                continue;
            if (q.err != 0)
                co_return refused(q, found[i].node, diag);
            const auto children = proto::parse_get_children2(q.body);
            if (!children)
                co_return malformed(q, "getChildren2", found[i].node, diag);
            const auto st = detail::stand(children->names, {}, {});
            if (st.holder.empty()) // a container left empty: nothing held
                continue;
            found[i].holder = std::string{st.holder};
            found[i].waiters = st.queued - 1;
            held.push_back(&found[i]);
        }
        std::vector<request> looks;
        looks.reserve(held.size());
        for (const auto* c : held)
            looks.push_back(exists(*s, detail::child_path(c->node, c->holder), false));
        auto stats = co_await session::call_batched(s, std::move(looks), diag);
        if (!stats)
            co_return stats.error();
        out.reserve(held.size());
        for (std::size_t i = 0; i < held.size(); ++i) {
            const auto& e = stats.value()[i];
            const auto& c = *held[i];
            if (e.err == static_cast<int>(errc::no_node)) // released since the queue was read
                continue;
            const auto path = detail::child_path(c.node, c.holder);
            if (e.err != 0)
                co_return refused(e, path, diag);
            const auto stat = proto::parse_stat(e.body);
            if (!stat || stat->czxid <= 0)
                co_return malformed(e, "exists", path, diag);
            lock_listing l{.resource = c.resource, .lock = {}, .waiters = c.waiters};
            l.lock.held = true;
            l.lock.owner = owner_shown(c.holder);
            l.lock.fence = static_cast<fence_token>(stat->czxid);
            l.lock.version = l.lock.fence;
            out.push_back(std::move(l));
        }
        std::sort(out.begin(), out.end(),
                  [](const lock_listing& a, const lock_listing& b) { return a.resource < b.resource; });
        co_return out;
    }

    // Why a read, then a delete, is as exact as one conditional step (ZooKeeper has no
    // delete on a czxid): the node's path names one grant. Its name is the lock() call's
    // own owner token and a sequence number the server never gives twice under one
    // resource's node, so no other node has that path while the resource's node stands
    // (and it stands while the node is in it: a container goes only once emptied). And
    // a holder stays the holder until its node is deleted: no node can come before it,
    // sequence numbers only grow. So if the lowest node is the one with czxid `fence`
    // when read, the delete of its path either removes that very grant, still the
    // holder, or finds nothing (released or expired meanwhile): not_owner. The one way
    // to a second node at that path needs, between these two requests, the holder's
    // session to expire, its emptied container to be reaped by the server and the same
    // lock() call to queue again first in a new one (whose numbering starts over).
    static awaitable<result<void>> revoked(std::shared_ptr<session> s, std::string parent, fence_token fence,
                                           diagnostics* diag)
    {
        auto got = co_await send(s, diag, children_of(*s, parent));
        if (!got)
            co_return got.error();
        const auto& r = got.value().front();
        if (r.err == static_cast<int>(errc::no_node))
            co_return distlock::errc::not_owner;
        if (r.err != 0)
            co_return refused(r, parent, diag);
        const auto children = proto::parse_get_children2(r.body);
        if (!children)
            co_return malformed(r, "getChildren2", parent, diag);
        const auto st = detail::stand(children->names, {}, {});
        if (st.holder.empty())
            co_return distlock::errc::not_owner;
        const auto path = detail::child_path(parent, st.holder);
        auto look = co_await send(s, diag, exists(*s, path, false));
        if (!look)
            co_return look.error();
        const auto& e = look.value().front();
        if (e.err == static_cast<int>(errc::no_node))
            co_return distlock::errc::not_owner;
        if (e.err != 0)
            co_return refused(e, path, diag);
        const auto stat = proto::parse_stat(e.body);
        if (!stat || stat->czxid <= 0)
            co_return malformed(e, "exists", path, diag);
        if (static_cast<fence_token>(stat->czxid) != fence) {
            if (diag)
                diag->set_client_message("the lock is held under fence " + std::to_string(stat->czxid) + ", not " +
                                         std::to_string(fence));
            co_return distlock::errc::not_owner;
        }
        auto gone = co_await send(s, diag, remove(*s, path));
        if (!gone)
            co_return gone.error();
        const auto& d = gone.value().front();
        if (d.err == static_cast<int>(errc::no_node))
            co_return distlock::errc::not_owner;
        if (d.err != 0)
            co_return refused(d, path, diag);
        co_return success();
    }

    // The lowest node of `parent`'s queue, and its data: the name, and the getData
    // reply (or an error, or nullopt when nothing is queued). `known` is a node this
    // client expects to be the lowest: its data is read with the queue, in one write.
    struct holder_read {
        std::string name;
        std::optional<proto::node_data> node; ///< nullopt: nothing held, or the holder went meanwhile
    };
    static awaitable<result<holder_read>> holder_of(std::shared_ptr<session> s, std::string parent,
                                                    std::optional<std::string> known, diagnostics* diag)
    {
        std::vector<request> reads;
        reads.push_back(children_of(*s, parent));
        if (known)
            reads.push_back(data_of(*s, detail::child_path(parent, *known)));
        auto got = co_await session::call(s, std::move(reads), diag);
        if (!got)
            co_return got.error();
        const auto& r = got.value().front();
        holder_read out;
        if (r.err == static_cast<int>(errc::no_node))
            co_return out;
        if (r.err != 0)
            co_return refused(r, parent, diag);
        const auto children = proto::parse_get_children2(r.body);
        if (!children)
            co_return malformed(r, "getChildren2", parent, diag);
        const auto st = detail::stand(children->names, {}, {});
        if (st.holder.empty())
            co_return out;
        out.name = std::string{st.holder};
        const auto path = detail::child_path(parent, out.name);
        proto::reply data;
        if (known && *known == out.name) {
            data = std::move(got.value().back());
        } else {
            auto look = co_await send(s, diag, data_of(*s, path));
            if (!look)
                co_return look.error();
            data = std::move(look.value().front());
        }
        if (data.err == static_cast<int>(errc::no_node)) // released in between
            co_return out;
        if (data.err != 0)
            co_return refused(data, path, diag);
        auto node = proto::parse_get_data(data.body);
        if (!node || node->stat.czxid <= 0)
            co_return malformed(data, "getData", path, diag);
        out.node = std::move(*node);
        co_return out;
    }

    // `latch`: the node is a LeaderLatch participant's (the latch dialect), whose data is
    // the value it was made with and is never written: the proclaim succeeds when that
    // is `data` already, and is refused (errc::invalid_argument) otherwise.
    static awaitable<result<void>> proclaimed(std::shared_ptr<session> s, std::string parent, std::string owner_hex,
                                              std::int64_t czxid, std::string data, bool latch, diagnostics* diag)
    {
        std::optional<std::string> known;
        if (const auto mine = s->made_entry(parent, czxid))
            known = mine->name;
        for (int round = 0; round < 4; ++round) {
            auto got = co_await holder_of(s, parent, known, diag);
            if (!got)
                co_return got.error();
            const auto& h = got.value();
            if (!h.node || h.node->stat.czxid != czxid) {
                if (diag)
                    diag->set_client_message(h.node ? "the lock is held under fence " +
                                                          std::to_string(h.node->stat.czxid) + ", not " +
                                                          std::to_string(czxid)
                                                    : std::string{"the lock is not held"});
                co_return distlock::errc::not_owner;
            }
            const auto w = detail::parse_waiter(h.name);
            if (!w || w->owner != owner_hex) {
                if (diag)
                    diag->set_client_message("the lock's holder " + distlock::util::escape(h.name) +
                                             " is not of this owner");
                co_return distlock::errc::not_owner;
            }
            known = h.name;
            const auto path = detail::child_path(parent, h.name);
            if (latch) {
                if (h.node->data == data)
                    co_return success();
                if (diag)
                    diag->set_client_message(
                        "the latch dialect keeps a leader's value as its node was made (Curator's LeaderLatch "
                        "participant id): changing it would spend the watch of the participant queued behind, "
                        "which would then miss the leader's going; campaign again with the new value");
                co_return distlock::errc::invalid_argument;
            }
            auto wrote = co_await send(s, diag, write_record(*s, path, data, h.node->stat.version));
            if (!wrote)
                co_return wrote.error();
            const auto& r = wrote.value().front();
            if (r.err == 0)
                co_return success();
            if (r.err == static_cast<int>(errc::no_node))
                co_return distlock::errc::not_owner;
            if (r.err != static_cast<int>(errc::bad_version))
                co_return refused(r, path, diag);
            // The holder's mark, or another proclaim of this grant, came first: read again.
        }
        if (diag)
            diag->set_client_message("the leader's node kept changing while its value was written");
        co_return distlock::errc::store_unavailable;
    }

    static awaitable<result<leader_info>> led(std::shared_ptr<session> s, std::string parent, diagnostics* diag)
    {
        for (int round = 0; round < 3; ++round) {
            auto got = co_await holder_of(s, parent, std::nullopt, diag);
            if (!got)
                co_return got.error();
            const auto& h = got.value();
            if (h.name.empty())
                co_return leader_info{};
            if (!h.node) // released between the two reads: look again
                continue;
            // A LeaderLatch participant's value is its data as made (its id).
            const bool latch = detail::latch_entry(h.name);
            auto v = latch ? detail::latch_value_of(h.node->data) : detail::value_of(h.node->data, h.node->stat.version);
            if (v.unreadable) {
                if (diag)
                    diag->set_server_message("the data of " + detail::child_path(parent, h.name) +
                                             (latch ? " is a " : " is marked as a ") +
                                             std::to_string(h.node->data.size()) +
                                             "-byte leader's value, longer than any proclaimed");
                co_return distlock::errc::protocol_error;
            }
            leader_info info;
            info.epoch = static_cast<fence_token>(h.node->stat.czxid);
            info.owner = owner_shown(h.name);
            info.value = std::move(v.value);
            co_return info;
        }
        co_return leader_info{};
    }

    // A node's data is its holder's mark only when set after its create (version 1 or
    // more) to the mark, alone or before a proclaimed value (detail/election.hpp):
    // other clients write data when they create their nodes (Curator its host's
    // address, kazoo an identifier) and may set some later (Curator's revocation
    // request), none of which says the node holds the lock.
    static bool marks_holder(const proto::node_data& d) { return detail::marks_holder(d.data, d.stat.version); }

    // The holder's owner as read() and list() report it: the first 8 hex digits of the
    // owner its name carries, else the name's first 8 characters.
    static std::string owner_shown(std::string_view holder)
    {
        const auto w = detail::parse_waiter(holder);
        if (w && !w->owner.empty())
            return w->owner.substr(0, 8);
        return std::string{holder.substr(0, 8)};
    }

    std::shared_ptr<session> session_;

protected:
    ~basic_store() = default;
    void stop() noexcept;
    awaitable<void> finish();
};

template <class Unused>
basic_store<Unused>::basic_store(executor_type ex, config cfg)
    : base{std::move(ex), std::move(cfg), "distlock::zookeeper::store"}
{
    session_ = std::make_shared<detail::session>(ex_, cfg_);
    session_->open();
}

template <class Unused>
void basic_store<Unused>::stop() noexcept
{
    session_->stop();
    session_->drop();
}

template <class Unused>
awaitable<void> basic_store<Unused>::finish()
{
    session_->stop();
    co_await detail::session::close_session(session_);
}

/// The ZooKeeper store. See basic_store for its documentation.
using store = backend::store_shell<basic_store<>>;

static_assert(session_queue_store<store>);
static_assert(shared_queue_store<store>);
static_assert(inspectable_store<store>);
static_assert(enumerable_store<store>);
static_assert(revocable_store<store>);
static_assert(electing_store<store>);
static_assert(lock_delay_store<store>);
static_assert(lock_delay_refusing_store<store>);
static_assert(candidate_queue_store<store>);

} // namespace distlock::zookeeper
