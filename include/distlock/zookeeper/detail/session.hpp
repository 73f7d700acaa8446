// distlock/zookeeper/detail/session.hpp: one ZooKeeper session, its connection, its
// watches, and what the leases bound to it hear.
//
// Design note. A ZooKeeper session outlives connections: the client connects with its
// session id and password (to any server of the ensemble) and the session goes on,
// ephemeral nodes and watches included, as long as the ensemble hears from it within
// the negotiated timeout. Everything here runs on one strand, the connection's
// (transport::engine with proto::codec):
//  - The connector tries the servers in turn, starting with the one in use: the
//    connect request (session id, password, last zxid seen), the digest auth, then,
//    when the session was resumed, SetWatches for the nodes still watched (a deletion
//    while disconnected fires at once). A server that says the session has expired
//    (timeout 0) ends it (below) and a new session is made.
//  - The keeper pings every third of the timeout. The session's validity counts from
//    the sending of the last request that was answered: the ensemble heard from the
//    client no earlier, so it cannot have expired the session before that time plus
//    the timeout. Without an answer for 2/3 of the timeout (the Java client's read
//    timeout) the session is *in doubt*: every bound lease hears so (its holder can no
//    longer know whether another holder exists), the connection is dropped and the
//    next server tried. Without an answer for the whole timeout the session counts as
//    expired even before a server says so (a client only learns of expiry when it
//    reconnects): the id is dropped, every waiter wakes to queue again, and a new
//    session is made.
//  - A lease bound to the session is valid until that validity. A connection lost, or
//    the session in doubt or expired, is pushed to it as its loss. Its node stays
//    until its holder releases the lease (or drops it); a delete that could not be
//    sent (disconnected) is sent again once the session answers, so a resumed session
//    never keeps a node that nobody holds.
//  - A lease is bound to its node by path. Its node deleted by anyone else (a lock
//    revoked) is its loss too: the keeper watches every bound node (watches.hpp says
//    how and why), and the deletion ends the lease (lost) and its binding. A release
//    unbinds its lease before it sends its delete, so its own deletion tells nobody.
//  - A waiter's exists-watch is registered here, before the request that sets it, so a
//    notification that overtakes the reply is not missed; one notification wakes every
//    local waiter of that path.
#pragma once

#include <distlock/claim.hpp>
#include <distlock/clock.hpp>
#include <distlock/backend/auto_reset_event.hpp>
#include <distlock/backend/cut_off.hpp>
#include <distlock/backend/deferred.hpp>
#include <distlock/backend/on_strand.hpp>
#include <distlock/util/os_random.hpp>
#include <distlock/backend/strand.hpp>
#include <distlock/backend/wakeup.hpp>
#include <distlock/diagnostics.hpp>
#include <distlock/error.hpp>
#include <distlock/result.hpp>
#include <distlock/transport/engine.hpp>
#include <distlock/transport/stream.hpp>
#include <distlock/zookeeper/config.hpp>
#include <distlock/zookeeper/detail/handshake.hpp>
#include <distlock/zookeeper/detail/keeper.hpp>
#include <distlock/zookeeper/detail/watches.hpp>
#include <distlock/zookeeper/error.hpp>
#include <distlock/zookeeper/proto/codec.hpp>
#include <distlock/zookeeper/proto/messages.hpp>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/dispatch.hpp>
#include <asio/strand.hpp>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace distlock::zookeeper::detail {

/// One request of a call: its xid and its frame.
struct request {
    std::int32_t xid = 0;
    std::string frame;
};

// A template only to be compiled where it is used (backend/store_shell.hpp says why).
template <class Unused = void>
class basic_session : public std::enable_shared_from_this<basic_session<Unused>> {
public:
    using engine_type = transport::engine<proto::codec>;

    basic_session(asio::any_io_executor ex, config cfg)
        : strand_{distlock::backend::make_strand(ex)}, cfg_{std::move(cfg)}, tick_{strand_},
          negotiated_{cfg_.session_timeout}, keeper_ended_{strand_}
    {}

    basic_session(const basic_session&) = delete;
    basic_session& operator=(const basic_session&) = delete;

    const config& settings() const noexcept { return cfg_; }

    /// Makes the engine (once: it needs shared_from_this()).
    void open()
    {
        engine_ = std::make_shared<engine_type>(
            strand_, proto::codec{},
            engine_type::options{cfg_.request_timeout, "ZooKeeper", duration::zero()},
            [w = this->weak_from_this()](transport::stream& s, std::string& diagnostic) -> awaitable<std::error_code> {
                auto self = w.lock();
                if (!self)
                    co_return distlock::errc::store_unavailable;
                co_return co_await self->handshake(s, diagnostic);
            });
        engine_->on_push([w = this->weak_from_this()](proto::reply r) {
            if (auto self = w.lock())
                self->notified(r);
        });
        engine_->on_down([w = this->weak_from_this()] {
            if (auto self = w.lock())
                self->connection_down();
        });
    }

    std::int32_t next_xid() noexcept
    {
        // Positive and growing; the server only echoes it (negative xids are reserved).
        auto x = xid_.fetch_add(1, std::memory_order_relaxed);
        if (x <= 0 || x == INT32_MAX) {
            xid_.store(2, std::memory_order_relaxed);
            x = 1;
        }
        return x;
    }

    /// Sends `requests` as one write and returns their replies (each checked against
    /// its xid). A reply's `err` is data: the caller decides.
    static awaitable<result<std::vector<proto::reply>>> call(std::shared_ptr<basic_session> self,
                                                             std::vector<request> requests, diagnostics* diag)
    {
        if (self->stopped())
            co_return distlock::errc::store_unavailable;
        self->start();
        std::string payload;
        if (requests.size() == 1) {
            payload = std::move(requests.front().frame);
        } else {
            std::size_t size = 0;
            for (const auto& r : requests)
                size += r.frame.size();
            payload.reserve(size);
            for (const auto& r : requests)
                payload += r.frame;
        }
        const auto sent = clock::now();
        auto got = co_await self->engine_->exec(std::move(payload), requests.size(), diag);
        if (!got)
            co_return got.error();
        auto& replies = got.value();
        if (replies.size() != requests.size())
            co_return distlock::errc::protocol_error;
        std::int64_t zxid = 0;
        for (std::size_t i = 0; i < replies.size(); ++i) {
            if (replies[i].xid != requests[i].xid) {
                if (diag)
                    diag->set_server_message("a ZooKeeper reply with xid " + std::to_string(replies[i].xid) +
                                             " to the request with xid " + std::to_string(requests[i].xid));
                co_return distlock::errc::protocol_error;
            }
            zxid = std::max(zxid, replies[i].zxid);
        }
        self->answered(sent, zxid);
        co_return std::move(replies);
    }

    /// call() for any number of requests: written `batch` at a time, each batch in one
    /// write (its requests pipelined), so that one write and its replies stay bounded
    /// however many there are. The replies of all of them, in order.
    static awaitable<result<std::vector<proto::reply>>> call_batched(std::shared_ptr<basic_session> self,
                                                                     std::vector<request> requests, diagnostics* diag,
                                                                     std::size_t batch = 512)
    {
        std::vector<proto::reply> all;
        all.reserve(requests.size());
        batch = std::max<std::size_t>(batch, 1);
        for (std::size_t from = 0; from < requests.size(); from += batch) {
            const auto to = std::min(requests.size(), from + batch);
            std::vector<request> part(std::make_move_iterator(requests.begin() + static_cast<std::ptrdiff_t>(from)),
                                      std::make_move_iterator(requests.begin() + static_cast<std::ptrdiff_t>(to)));
            auto got = co_await call(self, std::move(part), diag);
            if (!got)
                co_return got.error();
            for (auto& r : got.value())
                all.push_back(std::move(r));
        }
        co_return all;
    }

    /// The session id now (0: none).
    std::int64_t id() const
    {
        std::lock_guard lock{mutex_};
        return id_;
    }

    /// Until when the session is known alive; nullopt when it is not connected.
    std::optional<time_point> valid_until() const
    {
        std::lock_guard lock{mutex_};
        return validity_locked();
    }

    duration negotiated_timeout() const
    {
        std::lock_guard lock{mutex_};
        return negotiated_;
    }

    // -- Nodes made by this client ----------------------------------------------------

    /// What this client knows of a waiter node it made: its name, fence and session.
    struct made_node {
        std::string name;
        std::int64_t czxid = 0;
        std::int64_t session = 0;
        /// The node it waits for (when not first), and whether that one held the lock
        /// then: its deletion, seen by the watch, makes this node the lowest (sequences
        /// only grow, so no node can come before it), with no read to confirm it.
        std::int64_t predecessor = 0;
        bool predecessor_held = false;
        bool promoted = false;
        /// A shared mutex's or semaphore's entry that waits: the names of the nodes
        /// whose going may let it hold (empty: look again at once).
        std::vector<std::string> waits_for{};
        /// The version of the lock-delay mark this node's grant wrote (store.hpp),
        /// which its release deletes with the node; -1: none.
        std::int32_t delay_mark = -1;
    };

    void remember(const std::string& prefix_path, made_node n)
    {
        std::lock_guard lock{mutex_};
        made_[prefix_path] = std::move(n);
        while (made_.size() > 65536) // lock() calls that vanished without leaving
            made_.erase(made_.begin());
    }
    std::optional<made_node> made(const std::string& prefix_path) const
    {
        std::lock_guard lock{mutex_};
        const auto it = made_.find(prefix_path);
        if (it == made_.end())
            return std::nullopt;
        return it->second;
    }
    /// The node this client made under `parent` with fence `czxid`, for the current
    /// session.
    std::optional<made_node> made_entry(const std::string& parent, std::int64_t czxid) const
    {
        std::lock_guard lock{mutex_};
        const auto under = parent + "/";
        for (auto it = made_.lower_bound(under); it != made_.end() && it->first.starts_with(under); ++it)
            if (it->second.czxid == czxid && it->second.session == id_ && id_ != 0)
                return it->second;
        return std::nullopt;
    }

    /// The node `seq` under `parent` is deleted: the waiter whose predecessor held the
    /// lock holds it now.
    void predecessor_deleted(const std::string& parent, std::int64_t seq)
    {
        std::lock_guard lock{mutex_};
        const auto under = parent + "/";
        for (auto it = made_.lower_bound(under); it != made_.end() && it->first.starts_with(under); ++it)
            if (it->second.czxid != 0 && it->second.session == id_ && it->second.predecessor == seq &&
                it->second.predecessor_held)
                it->second.promoted = true;
    }

    /// The node `seq` under `parent` holds the lock (it carries its holder's mark): the
    /// waiter just after it is promoted when it goes, with no read to confirm it.
    void predecessor_marked(const std::string& parent, std::int64_t seq)
    {
        std::lock_guard lock{mutex_};
        const auto under = parent + "/";
        for (auto it = made_.lower_bound(under); it != made_.end() && it->first.starts_with(under); ++it)
            if (it->second.czxid != 0 && it->second.session == id_ && it->second.predecessor == seq)
                it->second.predecessor_held = true;
    }

    void forget(const std::string& prefix_path)
    {
        std::lock_guard lock{mutex_};
        made_.erase(prefix_path);
    }

    /// The name of the node with sequence `seq` under `parent`, as the last look at the
    /// queue saw it (a waiter watches it next).
    void remember_predecessor(const std::string& parent, std::int64_t seq, std::string name)
    {
        std::lock_guard lock{mutex_};
        predecessors_[parent + '\n' + std::to_string(seq)] = std::move(name);
        while (predecessors_.size() > 65536)
            predecessors_.erase(predecessors_.begin());
    }
    std::optional<std::string> predecessor(const std::string& parent, std::int64_t seq) const
    {
        std::lock_guard lock{mutex_};
        const auto it = predecessors_.find(parent + '\n' + std::to_string(seq));
        if (it == predecessors_.end())
            return std::nullopt;
        return it->second;
    }

    /// Remembers that node `czxid` (at `path`) holds a lock for the current session.
    void granted(std::int64_t czxid, std::int64_t session_id, std::string path)
    {
        std::lock_guard lock{mutex_};
        if (session_id != id_ || id_ == 0)
            return;
        grants_.granted(std::move(path), czxid, session_id);
    }

    /// Binds a lease to its node, `czxid` under `parent` (its resource's node): the
    /// session's validity, or nullopt when the session that keeps the node is gone or
    /// cannot be vouched for. The lease also hears of its node's deletion.
    std::optional<time_point> bind(std::string_view parent, std::int64_t czxid, std::weak_ptr<session_listener> l)
    {
        std::lock_guard lock{mutex_};
        const auto valid = validity_locked();
        if (id_ == 0 || !valid || !grants_.bind(parent, czxid, id_, std::move(l))) {
            grants_.erase(czxid);
            return std::nullopt;
        }
        return valid;
    }

    /// A delete of `path` (a node of the current session) could not be sent: it is sent
    /// once the session answers again.
    void delete_later(std::string path, std::int64_t session_id)
    {
        std::lock_guard lock{mutex_};
        if (session_id == id_ && id_ != 0 && pending_deletes_.size() < 65536)
            pending_deletes_.push_back(std::move(path));
    }

    /// The lease of node `czxid` is over (released): nothing to tell it any more.
    void unbind(std::int64_t czxid)
    {
        std::lock_guard lock{mutex_};
        grants_.erase(czxid);
    }

    /// The same, by the node's path (a release that deletes it).
    void unbind(const std::string& path)
    {
        std::lock_guard lock{mutex_};
        grants_.erase(path);
    }

    /// Leases bound now (for tests and diagnostics).
    std::size_t bound() const
    {
        std::lock_guard lock{mutex_};
        return grants_.bound();
    }

    // -- Watches ------------------------------------------------------------------------

    /// The local waiters on exists-watches (watches.hpp).
    watch_registry& watches() noexcept { return watches_; }

    // -- Lifetime -----------------------------------------------------------------------

    /// No more requests; the keeper stops. Returns the session id to close (0: none).
    std::int64_t stop()
    {
        std::int64_t id = 0;
        {
            std::lock_guard lock{mutex_};
            if (stopped_)
                return 0;
            stopped_ = true;
            id = id_;
        }
        asio::dispatch(strand_, [self = this->shared_from_this()] { self->tick_.cancel(); });
        return id;
    }

    /// Closes the session on the server (its ephemeral nodes go at once), then the
    /// connection. Bounded by the request timeout.
    static awaitable<void> close_session(std::shared_ptr<basic_session> self)
    {
        if (self->engine_) {
            bool connected = false;
            {
                std::lock_guard lock{self->mutex_};
                connected = self->id_ != 0 && self->connected_;
            }
            if (connected) {
                const auto x = self->next_xid();
                (void)co_await self->engine_->exec(proto::encode_close(x), 1, nullptr);
            }
            self->engine_->close();
        }
        self->end(session_state::lost);
        // The keeper ends on its own once stopped (its ping fails with the closed
        // engine, its timer was cancelled): close() waits for it, so that nothing of
        // the session is left suspended for the io_context's shutdown to untangle.
        if (self->keeper_running_.load())
            (void)co_await self->keeper_ended_.wait(saturating_add(clock::now(), self->connect_budget()));
    }

    /// Drops the connection (the destructor of the store: no goodbye, the session
    /// expires on the server within its timeout).
    void drop()
    {
        if (engine_)
            engine_->close();
    }

    /// Pings sent so far (one per third of the timeout for every lock of the store).
    std::size_t pings_sent() const noexcept { return pings_.load(std::memory_order_relaxed); }
    /// Sessions made so far (a new one after each expiry).
    std::size_t sessions_made() const noexcept { return sessions_.load(std::memory_order_relaxed); }
    /// The index of the server in use.
    std::size_t server_in_use() const
    {
        std::lock_guard lock{mutex_};
        return server_;
    }

private:
    bool stopped() const
    {
        std::lock_guard lock{mutex_};
        return stopped_;
    }

    std::optional<time_point> validity_locked() const
    {
        if (id_ == 0 || !connected_)
            return std::nullopt;
        const auto until = heard_ + negotiated_ - cfg_.drift;
        if (clock::now() >= until)
            return std::nullopt;
        return until;
    }

    void start()
    {
        if (keeper_started_.exchange(true))
            return;
        keeper_running_.store(true);
        asio::co_spawn(strand_, keep(this->shared_from_this()), asio::detached);
    }

    // A request sent at `sent` was answered: the ensemble heard from this session then
    // or later.
    void answered(time_point sent, std::int64_t zxid)
    {
        std::lock_guard lock{mutex_};
        if (sent > heard_)
            heard_ = sent;
        last_zxid_ = std::max(last_zxid_, zxid);
    }

    // On the strand, as the engine connects: the session's handshake on a fresh stream.
    awaitable<std::error_code> handshake(transport::stream& s, std::string& diagnostic)
    {
        std::size_t first = 0;
        {
            std::lock_guard lock{mutex_};
            if (stopped_) {
                diagnostic = "the ZooKeeper store is closed";
                co_return distlock::errc::store_unavailable;
            }
            first = server_;
        }
        std::error_code last = distlock::errc::store_unavailable;
        for (std::size_t tried = 0; tried < cfg_.servers.size(); ++tried) {
            const auto i = (first + tried) % cfg_.servers.size();
            // An expired session is replaced on the same server: one more round.
            for (int round = 0; round < 2; ++round) {
                std::string words;
                const auto ec = co_await handshake_with(s, i, words);
                if (!ec) {
                    std::lock_guard lock{mutex_};
                    server_ = i;
                    co_return std::error_code{};
                }
                last = ec;
                diagnostic = std::move(words);
                if (ec == condition::denied) // the credentials: another server says the same
                    co_return ec;
                if (ec != zookeeper::errc::session_expired)
                    break;
            }
        }
        co_return last;
    }

    awaitable<std::error_code> handshake_with(transport::stream& s, std::size_t i, std::string& diagnostic)
    {
        const auto endpoint = cfg_.endpoint(i);
        const auto peer = endpoint.host + ":" + std::to_string(endpoint.port);
        if (auto ec = co_await s.connect(endpoint, nullptr, diagnostic))
            co_return ec;
        std::vector<std::string> watched = watches_.paths();
        handshake::known_session known;
        {
            std::lock_guard lock{mutex_};
            known = {id_, password_, last_zxid_};
        }
        const auto req = handshake::request(known, std::chrono::duration_cast<std::chrono::milliseconds>(cfg_.session_timeout));
        const auto sent = clock::now();
        auto got = co_await transport::roundtrip(s, proto::connect_codec{}, proto::encode(req), 1,
                                                 cfg_.connect_timeout);
        if (!got) {
            diagnostic = "no session from ZooKeeper at " + peer + " (it may refuse a client that has seen a "
                         "newer zxid than it has)";
            s.close();
            co_return distlock::errc::store_unavailable;
        }
        const auto& answer = got.value().front();
        const auto outcome = handshake::judge(req, answer);
        if (outcome == handshake::outcome::expired) {
            s.close();
            diagnostic = "the ZooKeeper session expired (said " + peer + ")";
            end(session_state::lost);
            co_return zookeeper::errc::session_expired;
        }
        const bool resumed = outcome == handshake::outcome::resumed;
        if (outcome == handshake::outcome::replaced) // not ours any more: what it held is gone
            end(session_state::lost);
        {
            std::lock_guard lock{mutex_};
            id_ = answer.session_id;
            password_ = answer.password;
            negotiated_ = std::chrono::milliseconds{answer.timeout_ms};
            heard_ = sent;
            connected_ = true;
            grants_.reconnected(); // the server keeps no watch of a closed connection
        }
        if (!resumed) {
            sessions_.fetch_add(1, std::memory_order_relaxed);
            watched.clear(); // a new session has no watches to restore
        }
        // Auth and SetWatches, read on this stream before it is shared: their replies,
        // and any notification SetWatches fires at once.
        std::int64_t relative = 0;
        {
            std::lock_guard lock{mutex_};
            relative = last_zxid_;
        }
        auto setup = handshake::after_connect(cfg_.username, cfg_.password, watched, relative);
        if (setup.replies == 0)
            co_return std::error_code{};
        auto replies = co_await read_setup(s, std::move(setup.payload), setup.replies);
        if (!replies) {
            s.close();
            diagnostic = "the ZooKeeper session's setup at " + peer + " failed";
            co_return replies.error();
        }
        if (auto refused = handshake::setup_refused(replies.value())) {
            s.close();
            diagnostic = "ZooKeeper at " + peer + " refused the digest credentials of user " + cfg_.username;
            co_return refused;
        }
        co_return std::error_code{};
    }

    // Writes `payload` and reads frames until `expected` replies came; notifications
    // in between are handled as pushes.
    awaitable<result<std::vector<proto::reply>>> read_setup(transport::stream& s, std::string payload,
                                                            std::size_t expected)
    {
        auto exchange = [](basic_session& self, transport::stream& s, std::string payload,
                           std::size_t expected) -> awaitable<result<std::vector<proto::reply>>> {
            auto [wec, n] = co_await s.write(asio::buffer(payload));
            if (wec)
                co_return distlock::errc::store_unavailable;
            std::vector<proto::reply> replies;
            std::string buffer;
            std::size_t offset = 0;
            char chunk[4096];
            const proto::codec codec;
            while (replies.size() < expected) {
                auto d = codec.decode(std::string_view{buffer}.substr(offset));
                if (d.status == transport::decode_status::malformed)
                    co_return distlock::errc::protocol_error;
                if (d.status == transport::decode_status::complete) {
                    offset += d.consumed;
                    if (codec.is_push(d.message))
                        self.notified(d.message);
                    else
                        replies.push_back(std::move(d.message));
                    continue;
                }
                auto [rec, got] = co_await s.read_some(asio::buffer(chunk));
                if (rec) // an auth failure closes the connection
                    co_return zookeeper::errc::auth_failed;
                buffer.append(chunk, got);
            }
            co_return replies;
        };
        auto r = co_await distlock::backend::within(exchange(*this, s, std::move(payload), expected),
                                                   distlock::backend::after(cfg_.connect_timeout));
        if (!r)
            co_return distlock::errc::outcome_unknown;
        co_return std::move(*r);
    }

    // On the strand: a notification (xid -1).
    void notified(const proto::reply& r)
    {
        const auto e = proto::parse_event(r.body);
        if (!e)
            return;
        if (e->type == proto::event::none) {
            // A session event; expiry is learnt when connecting, auth failure closes.
            if (e->state == proto::state::expired)
                end(session_state::lost);
            return;
        }
        if (e->type == proto::event::deleted)
            node_gone(e->path);
        else if (e->type == proto::event::data_changed) {
            std::lock_guard lock{mutex_};
            grants_.spent(e->path);
        }
        watches_.fire(e->path, e->type == proto::event::deleted, e->type == proto::event::data_changed);
    }

    // A bound node is gone, deleted by someone else than its lease's release (which
    // unbinds first): the lock was taken back, so its lease is lost.
    void node_gone(const std::string& path)
    {
        std::optional<std::weak_ptr<session_listener>> told;
        {
            std::lock_guard lock{mutex_};
            told = grants_.gone(path);
        }
        if (told)
            if (auto l = told->lock())
                l->session_changed(session_state::lost, time_point{});
    }

    // On the strand: the engine's connection went away. The session may live on (a
    // reconnect within the timeout resumes it), but a holder cannot know that now.
    void connection_down()
    {
        {
            std::lock_guard lock{mutex_};
            connected_ = false;
        }
        end(session_state::in_doubt);
    }

    // The session is over (lost) or cannot be vouched for (in doubt): every bound lease
    // hears so. Lost also drops the id (the next connection makes a new session) and
    // wakes every waiter (its node went with the session: it queues again).
    void end(session_state why)
    {
        std::vector<std::weak_ptr<session_listener>> told;
        {
            std::lock_guard lock{mutex_};
            told = grants_.clear();
            if (why == session_state::lost) {
                id_ = 0;
                password_.clear();
                connected_ = false;
                pending_deletes_.clear(); // those nodes went with the session
                made_.clear();
                predecessors_.clear();
            }
        }
        for (auto& w : told)
            if (auto l = w.lock())
                l->session_changed(why, time_point{});
        if (why == session_state::lost)
            watches_.fire_all();
    }

    // Tells the bound leases how long the session is known alive.
    void tell_held()
    {
        std::vector<std::weak_ptr<session_listener>> told;
        std::optional<time_point> valid;
        {
            std::lock_guard lock{mutex_};
            valid = validity_locked();
            if (!valid)
                return;
            told = grants_.listeners();
        }
        for (auto& w : told)
            if (auto l = w.lock())
                l->session_changed(session_state::held, *valid);
    }

    // The keeper, on the strand: pings, judges the session's health, sends the deletes
    // that could not be sent before once the session answers, and watches the nodes
    // bound since its last ping.
    static awaitable<void> keep(std::shared_ptr<basic_session> self)
    {
        co_await asio::this_coro::throw_if_cancelled(false);
        // Said however the keeper ends (returning, or its frame destroyed).
        struct ended_guard {
            basic_session* session;
            ~ended_guard()
            {
                session->keeper_running_.store(false);
                session->keeper_ended_.set();
            }
        } const ended{self.get()};
        bool doubted = false; // the connection was dropped for silence since the last answer
        int failures = 0;     // pings in a row without an answer
        for (;;) {
            if (self->stopped())
                co_return;
            const auto before = self->keeper_view();
            const auto sent = clock::now();
            const bool answered =
                co_await self->ping_until(keeper::ping_deadline(before, sent, self->connect_budget()));
            const auto now = clock::now();
            if (answered) {
                doubted = false;
                failures = 0;
                self->tell_held();
                co_await self->delete_pending();
                co_await self->watch_bound();
            } else {
                ++failures;
                switch (keeper::unanswered(self->keeper_view(), now, doubted)) {
                case keeper::verdict::expired:
                    // Expired as far as this client can tell: a new session from now on.
                    self->engine_->close();
                    self->end(session_state::lost);
                    doubted = false;
                    break;
                case keeper::verdict::in_doubt:
                    doubted = true;
                    self->move_on();
                    self->engine_->close(); // leases hear "in doubt"; the next ping goes to the next server
                    break;
                case keeper::verdict::waiting:
                    break;
                }
            }
            if (self->stopped()) // stop() may have cancelled the wait before it began
                co_return;
            self->tick_.expires_at(keeper::next_ping(answered, sent, now, self->keeper_view().timeout, failures));
            (void)co_await self->tick_.async_wait(distlock::backend::as_tuple_awaitable<Unused>());
        }
    }

    // The longest a connect (every server, each with its handshake) can take.
    duration connect_budget() const
    {
        return saturating_add(saturating_mul(cfg_.connect_timeout, 2 * static_cast<std::int64_t>(cfg_.servers.size())),
                              cfg_.request_timeout);
    }

    keeper::view keeper_view() const
    {
        std::lock_guard lock{mutex_};
        return {negotiated_, heard_, id_ != 0, connected_};
    }

    awaitable<bool> ping_until(time_point until)
    {
        pings_.fetch_add(1, std::memory_order_relaxed);
        auto self = this->shared_from_this();
        std::vector<request> ping(1, request{proto::xid::ping, proto::encode_ping()});
        const auto got = co_await distlock::backend::within(call(self, std::move(ping), nullptr), until);
        co_return got && *got && got->value().front().err == 0;
    }

    awaitable<void> delete_pending()
    {
        std::vector<std::string> paths;
        {
            std::lock_guard lock{mutex_};
            paths.swap(pending_deletes_);
        }
        if (paths.empty())
            co_return;
        std::vector<request> deletes;
        for (const auto& p : paths) {
            const auto x = next_xid();
            deletes.push_back(request{x, proto::encode_delete(x, p)});
        }
        auto got = co_await call(this->shared_from_this(), std::move(deletes), nullptr);
        if (!got) { // try again after the next answered ping
            std::lock_guard lock{mutex_};
            pending_deletes_.insert(pending_deletes_.end(), paths.begin(), paths.end());
        }
    }

    // Sets the watch of every bound node the server does not watch (bound since the
    // last ping, or its watch spent), one exists each, pipelined. The exists is also
    // the check: a node already gone ends its lease now (the server then keeps a watch
    // for the path's creation, which never fires: a waiter's path is not made again).
    awaitable<void> watch_bound()
    {
        std::vector<std::string> paths;
        {
            std::lock_guard lock{mutex_};
            paths = grants_.due();
        }
        if (paths.empty())
            co_return;
        std::vector<request> checks;
        checks.reserve(paths.size());
        for (const auto& p : paths) {
            const auto x = next_xid();
            checks.push_back(request{x, proto::encode_exists(x, p, true)});
        }
        auto got = co_await call_batched(this->shared_from_this(), std::move(checks), nullptr);
        std::vector<std::string> gone;
        {
            std::lock_guard lock{mutex_};
            for (std::size_t i = 0; i < paths.size(); ++i) {
                const int err = got ? got.value()[i].err : -1;
                if (err == static_cast<int>(zookeeper::errc::no_node))
                    gone.push_back(paths[i]);
                else // set, or due again at the next ping
                    grants_.watched(paths[i], err == 0);
            }
        }
        for (const auto& p : gone)
            node_gone(p);
    }

    void move_on()
    {
        std::lock_guard lock{mutex_};
        server_ = (server_ + 1) % cfg_.servers.size();
    }

    asio::any_io_executor strand_; // distlock::backend::make_strand()
    const config cfg_;
    std::shared_ptr<engine_type> engine_;
    timer tick_;

    mutable std::mutex mutex_;
    std::int64_t id_ = 0;
    std::string password_;
    duration negotiated_;
    std::int64_t last_zxid_ = 0;
    time_point heard_{};
    bool connected_ = false;
    bool stopped_ = false;
    std::size_t server_ = 0;
    grant_registry grants_; // of the current session
    std::map<std::string, made_node> made_;
    std::map<std::string, std::string> predecessors_;
    watch_registry watches_;
    std::vector<std::string> pending_deletes_; // of the current session

    std::atomic<bool> keeper_started_{false};
    std::atomic<bool> keeper_running_{false};
    distlock::backend::auto_reset_event keeper_ended_; // on the strand; set when the keeper ends
    std::atomic<std::int32_t> xid_{1};
    std::atomic<std::size_t> pings_{0};
    std::atomic<std::size_t> sessions_{0};
};

/// See basic_session.
using session = basic_session<>;

} // namespace distlock::zookeeper::detail
