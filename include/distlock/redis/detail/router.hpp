// distlock/redis/detail/router.hpp: which server a Redis request goes to.
//
// Design note. The store computes what to send and the hash slot of its keys; the
// router picks the connection. One server: always the same one, with no step in
// between (the request goes straight to the engine). A Redis Cluster: the primary of
// the slot, by a slot map learned with CLUSTER SLOTS from any node that answers. A
// primary watched by Sentinels: the one the Sentinels name.
//
// What a reply or a failure means for routing, and why each is safe to retry:
//  - MOVED slot addr: the slot lives elsewhere now; the map learns it, and the
//    command was not run, so it is sent again there.
//  - ASK slot addr: the slot is being migrated and this key is already on the
//    target: ASKING + the command, there, once; the map is unchanged.
//  - TRYAGAIN, CLUSTERDOWN, READONLY, LOADING, MASTERDOWN: refused, not run; the map
//    (or the primary's address) is learned again and the command sent after a pause.
//  - A connection that could not be made or was down before the request was
//    written (errc::store_unavailable): not run; learned again and sent again.
//  - Anything after the request was written (errc::outcome_unknown): may have run,
//    so it is reported as it is, never sent twice.
// A request takes at most `max_tries` sends, each bounded by the connection's
// timeouts, plus the learning between them: operation_timeout() is that sum.
//
// All nodes' connections share the store's strand, except a single server's extra
// command connections (config::connections), which have one each so that several
// threads drive them in parallel. The map and the node table are
// read by requests from any thread, under a mutex held only to look up or replace.
#pragma once

#include <distlock/clock.hpp>
#include <distlock/backend/deferred.hpp>
#include <distlock/backend/strand.hpp>
#include <distlock/diagnostics.hpp>
#include <distlock/backend/wakeup.hpp>
#include <distlock/error.hpp>
#include <distlock/redis/config.hpp>
#include <distlock/redis/detail/cluster.hpp>
#include <distlock/redis/detail/connection.hpp>
#include <distlock/redis/detail/subscriber.hpp>
#include <distlock/redis/resp/command.hpp>
#include <distlock/result.hpp>

#include <asio/strand.hpp>

#include <algorithm>
#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace distlock::redis::detail {

// A template only to be compiled where it is used (backend/store_shell.hpp says why).
template <class Unused = void>
class basic_router : public std::enable_shared_from_this<basic_router<Unused>> {
public:
    using strand_type = asio::any_io_executor; // distlock::backend::make_strand()
    using replies = result<std::vector<resp::value>>;

    /// One server: its command connection and its subscriber.
    struct node {
        node_address address; // where it is reached (after config::address_map)
        std::shared_ptr<connection> conn;
        std::shared_ptr<subscriber> sub;
    };
    using node_ptr = std::shared_ptr<node>;

    /// Sends per request in a cluster or behind Sentinels: the first, a redirect or a
    /// refusal, and one more to follow a migration (ASK after MOVED) or a failover.
    static constexpr int max_tries = 4;
    /// Pause before sending again after a refusal (a failover in progress).
    static constexpr duration refusal_pause = std::chrono::milliseconds{50};

    basic_router(strand_type strand, config cfg, std::shared_ptr<asio::ssl::context> tls)
        : strand_{std::move(strand)}, cfg_{std::move(cfg)}, tls_{std::move(tls)}, mode_{cfg_.topology()}
    {
        if (mode_ == topology::single) {
            single_ = make_node({cfg_.host, cfg_.port}, cfg_);
            // More command connections, each on a strand of its own (config::connections).
            if (!cfg_.validate())
                for (std::size_t i = 1; i < cfg_.connections; ++i)
                    more_.push_back(std::make_shared<connection>(
                        distlock::backend::make_strand(distlock::backend::inner_executor(strand_)), cfg_, tls_));
        }
        if (mode_ == topology::sentinel)
            switched_ = std::make_shared<distlock::backend::wakeup>(strand_);
    }
    basic_router(const basic_router&) = delete;
    basic_router& operator=(const basic_router&) = delete;

    redis::topology mode() const noexcept { return mode_; }

    /// The longest a request takes, connecting and learning where to send it included.
    duration operation_timeout() const noexcept
    {
        const auto one = saturating_add(cfg_.connect_timeout, cfg_.request_timeout);
        if (mode_ == topology::single)
            return one;
        return saturating_mul(saturating_add(saturating_mul(one, 2), refusal_pause), max_tries);
    }

    /// Sends `payload` (one command on keys of `slot`) and returns its reply.
    /// `ahead`: an encoded command written just before it, in the same write (and
    /// before a cluster's ASKING, which applies to the next command only), whose
    /// reply is dropped.
    awaitable<replies> exec(std::uint16_t slot, std::string payload, diagnostics* diag, std::string_view ahead = {})
    {
        if (mode_ == topology::single) {
            auto& conn = more_.empty() ? single_->conn : pick_connection();
            if (ahead.empty())
                return conn->exec(std::move(payload), 1, diag);
            std::string both{ahead};
            both += payload;
            return replies_after_first(conn->exec(std::move(both), 2, diag));
        }
        return routed(this->shared_from_this(), slot, std::move(payload), diag, std::string{ahead});
    }

    /// The servers that hold the store's keys now, each to be asked by itself (SCAN
    /// has no key to route by): the one server, the primary the Sentinels name, or
    /// every primary that serves a slot of the cluster, learned first when not known.
    /// A cluster with a slot that no node serves is errc::store_unavailable: the keys
    /// of that slot cannot be reached.
    awaitable<result<std::vector<node_ptr>>> primaries(diagnostics* diag)
    {
        return find_primaries(this->shared_from_this(), diag);
    }

    /// Sends `payload` (one command) to node `n` (one of primaries()) itself,
    /// following no redirect: a node that left the layout since fails its requests.
    static awaitable<replies> exec_at(const node_ptr& n, std::string payload, diagnostics* diag)
    {
        return n->conn->exec(std::move(payload), 1, diag);
    }

    /// The next request learns the layout again (cluster, Sentinel): a node that
    /// exec_at() could not reach may be gone from it.
    void relearn() noexcept
    {
        if (mode_ != topology::single)
            stale_ = true;
    }

    /// The subscriber that hears releases published for `slot`.
    awaitable<result<std::shared_ptr<subscriber>>> subscriber_for(std::uint16_t slot)
    {
        return find_subscriber(this->shared_from_this(), slot);
    }

    /// Closes every connection; the next request connects again.
    void close()
    {
        std::vector<node_ptr> all;
        {
            std::lock_guard lock{mutex_};
            if (single_)
                all.push_back(single_);
            for (auto& [at, n] : nodes_)
                all.push_back(n);
            for (auto& [at, n] : sentinel_nodes_)
                all.push_back(n);
        }
        for (auto& n : all) {
            n->conn->close();
            n->sub->close();
        }
        for (auto& c : more_)
            c->close();
    }

    /// Channels subscribed on every node.
    std::size_t channels() const
    {
        std::lock_guard lock{mutex_};
        std::size_t count = single_ ? single_->sub->channels() : 0;
        for (const auto& [at, n] : nodes_)
            count += n->sub->channels();
        return count;
    }

    /// Whether a subscriber of any node listens on `channel` now (confirmed).
    bool listening(const std::string& channel) const
    {
        std::lock_guard lock{mutex_};
        if (single_ && single_->sub->listening(channel))
            return true;
        return std::any_of(nodes_.begin(), nodes_.end(),
                           [&](const auto& entry) { return entry.second->sub->listening(channel); });
    }

    /// Which servers the store reached: the server's run_id (one server, or the
    /// primary a Sentinel named), the cluster's primary node ids; nullopt before the
    /// first connect.
    std::optional<std::string> identity() const
    {
        std::lock_guard lock{mutex_};
        if (single_)
            return single_->conn->known_identity();
        if (mode_ == topology::cluster)
            return map_ ? std::optional<std::string>{map_->identity()} : std::nullopt;
        if (const auto it = nodes_.find(primary_.value_or(node_address{})); it != nodes_.end())
            return it->second->conn->known_identity();
        return std::nullopt;
    }

    /// Where requests for `slot` go now, without I/O (nullopt: not known yet).
    std::optional<node_address> node_of(std::uint16_t slot) const
    {
        std::lock_guard lock{mutex_};
        if (single_)
            return single_->address;
        if (mode_ == topology::sentinel)
            return primary_;
        if (!map_ || !map_->node_for(slot))
            return std::nullopt;
        return reachable(*map_->node_for(slot));
    }

private:
    node_ptr make_node(node_address at, const config& c) const
    {
        auto n = std::make_shared<node>();
        n->address = std::move(at);
        n->conn = std::make_shared<connection>(strand_, c, tls_);
        n->sub = std::make_shared<subscriber>(strand_, c, tls_, mode_ == topology::cluster);
        return n;
    }

    node_address reachable(const node_address& announced) const
    {
        return cfg_.address_map ? cfg_.address_map(announced) : announced;
    }

    // The node at `at` (a reachable address), made on first use. Under mutex_.
    node_ptr node_at_locked(const node_address& at)
    {
        auto& n = nodes_[at];
        if (!n) {
            n = make_node(at, cfg_.node(at));
            std::weak_ptr<basic_router> weak = this->weak_from_this();
            n->sub->on_refused([weak] {
                if (auto self = weak.lock())
                    self->stale_ = true;
            });
        }
        return n;
    }

    node_ptr node_at(const node_address& at)
    {
        std::lock_guard lock{mutex_};
        return node_at_locked(at);
    }

    // Where `slot`'s requests go, if known and the map is not marked stale.
    node_ptr current(std::uint16_t slot)
    {
        std::lock_guard lock{mutex_};
        if (stale_)
            return nullptr;
        if (mode_ == topology::sentinel)
            return primary_ ? node_at_locked(*primary_) : nullptr;
        if (!map_ || !map_->node_for(slot))
            return nullptr;
        return node_at_locked(reachable(*map_->node_for(slot)));
    }

    static awaitable<replies> replies_after_first(awaitable<replies> both)
    {
        auto got = co_await std::move(both);
        if (got)
            got.value().erase(got.value().begin());
        co_return got;
    }

    // The connection of a pool whose turn it is.
    const std::shared_ptr<connection>& pick_connection()
    {
        const auto turn = next_.fetch_add(1, std::memory_order_relaxed) % (more_.size() + 1);
        return turn == 0 ? single_->conn : more_[turn - 1];
    }

    static awaitable<replies> routed(std::shared_ptr<basic_router> self, std::uint16_t slot, std::string payload,
                                     diagnostics* diag, std::string ahead)
    {
        // Settings out of range are refused before any I/O (config::validate()).
        if (auto ec = self->cfg_.validate())
            co_return ec;
        std::optional<node_address> ask; // the one send that follows an ASK
        std::error_code last = errc::store_unavailable;
        for (int attempt = 0; attempt < max_tries; ++attempt) {
            if (self->switched_ && self->switched_->try_take())
                self->stale_ = true; // +switch-master, or the Sentinel connection went down
            node_ptr n = ask ? self->node_at(*ask) : self->current(slot);
            if (!n) {
                if (auto ec = co_await self->learn(diag)) {
                    last = ec;
                    continue;
                }
                n = self->current(slot);
                if (!n) {
                    if (diag)
                        diag->set_client_message("no node of the cluster serves slot " + std::to_string(slot));
                    last = errc::store_unavailable;
                    continue;
                }
            }
            std::string sent = ahead;
            if (ask)
                resp::append_command(sent, {"ASKING"});
            sent += payload;
            const std::size_t dropped = (ahead.empty() ? 0 : 1) + (ask ? 1 : 0);
            auto got = co_await n->conn->exec(std::move(sent), dropped + 1, diag);
            ask.reset();
            if (!got) {
                last = got.error();
                if (got.error() != errc::store_unavailable)
                    co_return got.error(); // written: it may have run
                self->stale_ = true;       // not reached: after a failover it lives elsewhere
                continue;
            }
            // The command ahead's reply and ASKING's +OK.
            got.value().erase(got.value().begin(), got.value().begin() + static_cast<std::ptrdiff_t>(dropped));
            const auto& reply = got.value().front();
            if (!reply.is_error())
                co_return got;
            if (auto r = parse_redirect(reply.text, n->address)) {
                if (r->kind == redirect::kind::ask) {
                    ask = self->reachable(r->to);
                } else {
                    std::lock_guard lock{self->mutex_};
                    if (self->map_)
                        self->map_->move(r->slot, r->to);
                    else
                        self->stale_ = true;
                }
                last = errc::store_unavailable;
                if (diag)
                    diag->set_server_message(reply.text);
                continue;
            }
            if (is_transient_refusal(reply.text)) {
                if (diag)
                    diag->set_server_message(reply.text);
                last = errc::store_unavailable;
                self->stale_ = true;
                timer pause{co_await asio::this_coro::executor, clock::now() + refusal_pause};
                (void)co_await pause.async_wait(distlock::backend::as_tuple_awaitable<Unused>());
                continue;
            }
            co_return got; // any other error reply: the store reads it
        }
        co_return last;
    }

    // Learns the slot map (cluster) or the primary's address (Sentinel) again.
    awaitable<std::error_code> learn(diagnostics* diag)
    {
        if (mode_ == topology::cluster)
            return learn_slots(this->shared_from_this(), diag);
        return learn_primary(this->shared_from_this(), diag);
    }

    static awaitable<std::error_code> learn_slots(std::shared_ptr<basic_router> self, diagnostics* diag)
    {
        // Every primary known, then the configured nodes: any of them can tell.
        std::vector<node_address> ask;
        {
            std::lock_guard lock{self->mutex_};
            if (self->map_)
                for (const auto& p : self->map_->primaries)
                    ask.push_back(self->reachable(p));
        }
        for (const auto& seed : self->cfg_.cluster_nodes)
            if (std::find(ask.begin(), ask.end(), seed) == ask.end())
                ask.push_back(seed);
        const auto give_up =
            saturating_add(clock::now(), saturating_add(self->cfg_.connect_timeout, self->cfg_.request_timeout));
        std::error_code last = errc::store_unavailable;
        for (const auto& at : ask) {
            if (clock::now() >= give_up)
                break;
            auto n = self->node_at(at);
            auto got = co_await n->conn->exec(resp::command_of("CLUSTER", "SLOTS"), 1, diag);
            if (!got) {
                last = got.error() == errc::store_unavailable ? got.error() : make_error_code(errc::store_unavailable);
                continue;
            }
            const auto& reply = got.value().front();
            if (reply.is_error()) {
                if (diag)
                    diag->set_server_message(reply.text);
                last = reply.text.starts_with("NOAUTH") || reply.text.starts_with("NOPERM")
                           ? make_error_code(errc::auth_failed)
                           : make_error_code(errc::store_unavailable);
                continue;
            }
            auto map = parse_cluster_slots(reply, at);
            if (!map) {
                last = map.error();
                continue;
            }
            self->install(std::move(map.value()));
            co_return std::error_code{};
        }
        co_return last;
    }

    // A new slot map: nodes that left it are closed (their waiters subscribe again
    // where their slots went).
    void install(slot_map map)
    {
        std::vector<node_ptr> gone;
        {
            std::lock_guard lock{mutex_};
            std::vector<node_address> keep;
            for (const auto& p : map.primaries)
                keep.push_back(reachable(p));
            for (const auto& seed : cfg_.cluster_nodes)
                keep.push_back(seed);
            for (auto it = nodes_.begin(); it != nodes_.end();) {
                if (std::find(keep.begin(), keep.end(), it->first) == keep.end()) {
                    gone.push_back(it->second);
                    it = nodes_.erase(it);
                } else {
                    ++it;
                }
            }
            map_ = std::move(map);
            stale_ = false;
        }
        for (auto& n : gone) {
            n->conn->close();
            n->sub->close();
        }
    }

    static awaitable<std::error_code> learn_primary(std::shared_ptr<basic_router> self, diagnostics* diag)
    {
        const auto give_up =
            saturating_add(clock::now(), saturating_add(self->cfg_.connect_timeout, self->cfg_.request_timeout));
        std::error_code last = errc::store_unavailable;
        for (const auto& at : self->cfg_.sentinels) {
            if (clock::now() >= give_up)
                break;
            node_ptr s;
            {
                std::lock_guard lock{self->mutex_};
                auto& slot = self->sentinel_nodes_[at];
                if (!slot)
                    slot = self->make_node(at, self->cfg_.sentinel(at));
                s = slot;
            }
            auto got = co_await s->conn->exec(
                resp::command_of("SENTINEL", "get-master-addr-by-name", self->cfg_.sentinel_master), 1, diag);
            if (!got) {
                last = errc::store_unavailable;
                continue;
            }
            const auto& reply = got.value().front();
            if (reply.is_error()) {
                if (diag)
                    diag->set_server_message(reply.text);
                last = errc::store_unavailable;
                continue;
            }
            auto primary = parse_master_address(reply);
            if (!primary) {
                if (diag && primary.error() == errc::store_unavailable)
                    diag->set_client_message("Sentinel " + at.describe() + " knows no primary named " +
                                             self->cfg_.sentinel_master);
                last = primary.error();
                continue;
            }
            // Hear the next failover from this Sentinel. A lost subscription wakes
            // `switched_` too (the subscriber wakes its waiters when it goes down),
            // so the next request asks again rather than trusting an old answer.
            std::shared_ptr<subscriber> previous;
            {
                std::lock_guard lock{self->mutex_};
                if (self->sentinel_sub_ != s->sub)
                    previous = std::exchange(self->sentinel_sub_, s->sub);
            }
            if (previous)
                previous->unsubscribe("+switch-master", self->switched_);
            (void)co_await s->sub->subscribe("+switch-master", self->switched_);
            (void)self->switched_->try_take(); // what this answer already reflects
            self->set_primary(self->reachable(primary.value()));
            co_return std::error_code{};
        }
        co_return last;
    }

    void set_primary(node_address at)
    {
        node_ptr old;
        {
            std::lock_guard lock{mutex_};
            stale_ = false;
            if (primary_ == at)
                return;
            if (primary_) {
                if (const auto it = nodes_.find(*primary_); it != nodes_.end()) {
                    old = it->second;
                    nodes_.erase(it);
                }
            }
            primary_ = std::move(at);
        }
        if (old) { // a demoted primary: its waiters subscribe again on the new one
            old->conn->close();
            old->sub->close();
        }
    }

    static awaitable<result<std::vector<node_ptr>>> find_primaries(std::shared_ptr<basic_router> self,
                                                                   diagnostics* diag)
    {
        if (self->single_)
            co_return std::vector<node_ptr>{self->single_};
        if (auto ec = self->cfg_.validate())
            co_return ec;
        if (self->switched_ && self->switched_->try_take())
            self->stale_ = true;
        auto found = self->serving();
        if (!found) {
            if (auto ec = co_await self->learn(diag))
                co_return ec;
            found = self->serving();
        }
        if (!found) {
            if (diag)
                diag->set_client_message(self->mode_ == topology::cluster
                                             ? "a slot of the cluster is served by no node"
                                             : "the Sentinels named no primary");
            co_return errc::store_unavailable;
        }
        co_return std::move(*found);
    }

    // The primaries of a layout known and not stale, each once; nullopt otherwise, or
    // when a slot of the cluster has no primary.
    std::optional<std::vector<node_ptr>> serving()
    {
        std::lock_guard lock{mutex_};
        if (stale_)
            return std::nullopt;
        if (mode_ == topology::sentinel) {
            if (!primary_)
                return std::nullopt;
            return std::vector<node_ptr>{node_at_locked(*primary_)};
        }
        if (!map_)
            return std::nullopt;
        std::vector<char> used(map_->primaries.size(), 0);
        for (const auto o : map_->owner) {
            if (o < 0)
                return std::nullopt;
            used[static_cast<std::size_t>(o)] = 1;
        }
        std::vector<node_ptr> out;
        for (std::size_t i = 0; i < used.size(); ++i)
            if (used[i])
                out.push_back(node_at_locked(reachable(map_->primaries[i])));
        return out;
    }

    static awaitable<result<std::shared_ptr<subscriber>>> find_subscriber(std::shared_ptr<basic_router> self,
                                                                        std::uint16_t slot)
    {
        if (self->single_)
            co_return self->single_->sub;
        if (auto ec = self->cfg_.validate())
            co_return ec;
        if (self->switched_ && self->switched_->try_take())
            self->stale_ = true;
        auto n = self->current(slot);
        if (!n) {
            if (auto ec = co_await self->learn(nullptr))
                co_return ec;
            n = self->current(slot);
        }
        if (!n)
            co_return errc::store_unavailable;
        co_return n->sub;
    }

    strand_type strand_;
    config cfg_;
    std::shared_ptr<asio::ssl::context> tls_;
    redis::topology mode_;
    node_ptr single_;
    std::vector<std::shared_ptr<connection>> more_; // config::connections beyond the first (single_)
    std::atomic<std::size_t> next_{0};              // the connection of the next request, in turn

    mutable std::mutex mutex_;
    std::map<node_address, node_ptr> nodes_;          // cluster nodes, or the primary
    std::map<node_address, node_ptr> sentinel_nodes_; // the Sentinels asked
    std::optional<slot_map> map_;                     // cluster
    std::optional<node_address> primary_;             // Sentinel: where it is reached
    std::atomic<bool> stale_{false};                  // learn again before the next send

    // Sentinel: woken by +switch-master (and by the loss of its subscription).
    std::shared_ptr<distlock::backend::wakeup> switched_;
    std::shared_ptr<subscriber> sentinel_sub_; // the Sentinel listened to (under mutex_)
};

/// See basic_router.
using router = basic_router<>;

} // namespace distlock::redis::detail
