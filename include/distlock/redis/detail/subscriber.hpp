// distlock/redis/detail/subscriber.hpp: the pub/sub connection that wakes waiters
// when a lock is released.
//
// Design note. One subscriber connection per store, shared by every waiter. A channel
// is subscribed when its first waiter arrives and unsubscribed when its last leaves,
// so subscriptions do not accumulate. subscribe() completes only once Redis confirmed
// the subscription: the waiter's next try happens after that, so a release published
// between the try and the wait reaches it. If the connection drops, every waiter is
// woken (it retries, which is always safe) and channels are subscribed again on the
// next wait. All state lives on the store's strand. The connection is the shared
// transport engine with the RESP codec in subscribed mode: every message is a push.
//
// Acknowledgements are matched by count, not by name: after SUBSCRIBE, UNSUBSCRIBE,
// SUBSCRIBE on one channel (a waiter left and another came before Redis answered),
// the first "subscribe" acknowledgement is not the current subscription's, and a
// release published between the server's UNSUBSCRIBE and its second SUBSCRIBE would
// be missed. Redis answers each command on a channel in order, so a channel is
// confirmed by the acknowledgement that leaves none of its commands unanswered.
//
// In a Redis Cluster the subscriber is sharded: SSUBSCRIBE on the node that serves the
// channel's slot (the lock's), so a release is published on that shard only. When the
// slot moves, the node unsubscribes the channel by itself (an unasked "sunsubscribe"),
// and a SSUBSCRIBE sent to the wrong node is refused (MOVED): both forget the
// subscriptions concerned and wake their waiters, who subscribe again where the slot
// now is. epoch() counts such losses, so that a watcher can tell its subscription
// went away without asking the strand.
//
// A lingering channel (a fair queue's, on which the store's waiters hear that they
// were handed a lock) stays subscribed for a while after its last waiter left: a
// process that locks the same resource again soon needs no SUBSCRIBE, and its next
// waiter can take a place in line in its first try. At most max_lingering such idle
// channels stay, each for `linger` at most, swept by one timer: still bounded.
// listening() tells, from any thread and without a request, whether a channel is
// subscribed and confirmed now.
#pragma once

#include <distlock/clock.hpp>
#include <distlock/backend/deferred.hpp>
#include <distlock/backend/on_strand.hpp>
#include <distlock/backend/strand.hpp>
#include <distlock/backend/wakeup.hpp>
#include <distlock/redis/config.hpp>
#include <distlock/redis/detail/handshake.hpp>
#include <distlock/redis/resp/codec.hpp>
#include <distlock/redis/resp/command.hpp>
#include <distlock/transport/engine.hpp>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/dispatch.hpp>
#include <asio/post.hpp>
#include <asio/strand.hpp>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace distlock::redis::detail {

// A template only to be compiled where it is used (backend/store_shell.hpp says why).
template <class Unused = void>
class basic_subscriber : public std::enable_shared_from_this<basic_subscriber<Unused>> {
public:
    using strand_type = asio::any_io_executor; // distlock::backend::make_strand()
    using waiter = std::shared_ptr<distlock::backend::wakeup>;

    /// `sharded`: SSUBSCRIBE, SUNSUBSCRIBE and smessage (Redis Cluster, Redis 7).
    basic_subscriber(strand_type strand, config cfg, std::shared_ptr<asio::ssl::context> tls, bool sharded = false)
        : strand_{std::move(strand)}, cfg_{std::move(cfg)}, tls_{std::move(tls)}, sharded_{sharded}
    {
        cfg_.database = 0; // pub/sub ignores the database
        engine_ = std::make_shared<engine_type>(
            strand_, resp::codec{.subscribed = true},
            engine_type::options{cfg_.request_timeout, cfg_.endpoint().describe()},
            [cfg = cfg_, tls = tls_](transport::stream& s, std::string& diagnostic) -> awaitable<std::error_code> {
                // The same handshake as the command connection, without SELECT (pub/sub
                // ignores the database) and without INFO.
                hello unused;
                co_return co_await handshake(s, cfg, tls.get(), false, false, unused, diagnostic);
            });
    }
    basic_subscriber(const basic_subscriber&) = delete;
    basic_subscriber& operator=(const basic_subscriber&) = delete;

    /// Idle lingering channels kept at most; beyond, the one idle longest goes.
    static constexpr std::size_t max_lingering = 64;

    /// Registers `w` for `channel` and returns once the subscription is confirmed.
    /// With a `linger` above zero, the channel stays subscribed that long after its
    /// last waiter left (see the design note).
    awaitable<std::error_code> subscribe(std::string channel, waiter w, duration linger = duration::zero())
    {
        return distlock::backend::on_strand(
            strand_, subscribe_on_strand(this->shared_from_this(), std::move(channel), std::move(w), linger));
    }

    /// Whether `channel` is subscribed, and confirmed, now (from any thread).
    bool listening(const std::string& channel) const
    {
        std::lock_guard lock{live_mutex_};
        return live_.contains(channel);
    }

    /// Removes `w`; the channel is unsubscribed when it was the last waiter.
    void unsubscribe(std::string channel, waiter w)
    {
        // Posted, not dispatched: a waiter leaves as its lock() returns with the lock,
        // and the UNSUBSCRIBE need not be written before the caller's first request.
        asio::post(strand_, [self = this->shared_from_this(), channel = std::move(channel), w = std::move(w)] {
            auto it = self->channels_.find(channel);
            if (it == self->channels_.end())
                return;
            std::erase(it->second.waiters, w);
            self->notify_change(); // its subscribe(), if still waiting, returns
            if (!it->second.waiters.empty())
                return;
            if (it->second.linger > duration::zero() && it->second.confirmed && self->ready_) {
                it->second.idle_since = clock::now();
                self->linger_idle();
                return;
            }
            self->remove(it);
        });
    }

    void close()
    {
        asio::dispatch(strand_, [self = this->shared_from_this()] {
            self->sweeper_.cancel();
            self->sweeping_ = false;
            self->drop();
        });
    }

    /// Channels subscribed, lingering ones included (they must not accumulate).
    std::size_t channels() const { return channel_count_.load(); }

    /// Grows whenever subscriptions were lost (connection down, a slot moved, a
    /// subscription refused): a waiter subscribed at an older epoch subscribes again.
    std::uint64_t epoch() const noexcept { return epoch_.load(std::memory_order_acquire); }

    /// Called (on the strand) when a node refused a subscription: the slot map the
    /// channel was routed by is out of date.
    void on_refused(std::function<void()> f) { on_refused_ = std::move(f); }

private:
    struct channel_state {
        std::vector<waiter> waiters;
        bool requested = false;
        bool confirmed = false;
        duration linger = duration::zero();
        time_point idle_since{}; // lingering without waiters since then
    };
    using channel_map = std::unordered_map<std::string, channel_state>;

    static awaitable<std::error_code> subscribe_on_strand(std::shared_ptr<basic_subscriber> self, std::string channel,
                                                          waiter w, duration linger)
    {
        co_await asio::this_coro::throw_if_cancelled(false);
        if (auto ec = self->cfg_.validate())
            co_return ec;
        if (auto ec = co_await self->ensure_connected())
            co_return ec;
        {
            auto& ch = self->channels_[channel];
            if (std::find(ch.waiters.begin(), ch.waiters.end(), w) == ch.waiters.end())
                ch.waiters.push_back(w);
            ch.linger = std::max(ch.linger, linger);
            self->channel_count_ = self->channels_.size();
            if (!ch.requested) {
                ch.requested = true;
                self->send_on(channel, self->sharded_ ? "SSUBSCRIBE" : "SUBSCRIBE");
            }
        }
        const auto deadline = clock::now() + self->cfg_.request_timeout;
        for (;;) {
            auto it = self->channels_.find(channel);
            if (!self->ready_)
                co_return make_error_code(errc::store_unavailable);
            if (it == self->channels_.end() || std::find(it->second.waiters.begin(), it->second.waiters.end(), w) ==
                                                   it->second.waiters.end())
                co_return make_error_code(errc::cancelled); // unsubscribed while waiting for the answer
            if (!it->second.requested) // refused or moved away before it was confirmed
                co_return make_error_code(errc::store_unavailable);
            if (it->second.confirmed)
                co_return std::error_code{};
            if (clock::now() >= deadline) {
                self->drop();
                co_return make_error_code(errc::store_unavailable);
            }
            co_await self->wait_for_change(deadline);
            auto cs = co_await asio::this_coro::cancellation_state;
            if (cs.cancelled() != asio::cancellation_type::none)
                co_return make_error_code(errc::cancelled);
        }
    }

    awaitable<std::error_code> ensure_connected()
    {
        if (ready_)
            co_return std::error_code{};
        if (!wired_) {
            // Weak: the engine must not keep its subscriber alive.
            std::weak_ptr<basic_subscriber> weak = this->shared_from_this();
            engine_->on_push([weak](resp::value v) {
                if (auto self = weak.lock())
                    self->on_message(v);
            });
            engine_->on_down([weak] {
                if (auto self = weak.lock())
                    self->forget();
            });
            wired_ = true;
        }
        auto ec = co_await engine_->connect();
        if (!ec)
            ready_ = engine_->ready();
        if (!ec && !ready_) // dropped (close()) as soon as it connected
            ec = make_error_code(errc::store_unavailable);
        notify_change();
        co_return ec;
    }

    // Each waiter sleeps on a timer of its own, so that waking one never disturbs
    // another; a change (confirmation, connection up or down) wakes them all.
    awaitable<void> wait_for_change(time_point until)
    {
        timer t{strand_, until};
        waiting_.push_back(&t);
        (void)co_await t.async_wait(distlock::backend::as_tuple_awaitable<Unused>());
        std::erase(waiting_, &t);
    }

    void notify_change()
    {
        for (auto* t : waiting_)
            t->cancel();
    }

    // Forgets a channel and unsubscribes it (on the strand).
    void remove(typename channel_map::iterator it)
    {
        const auto channel = it->first;
        const bool was_subscribed = it->second.requested;
        channels_.erase(it);
        channel_count_ = channels_.size();
        set_live(channel, false);
        if (was_subscribed && ready_)
            send_on(channel, sharded_ ? "SUNSUBSCRIBE" : "UNSUBSCRIBE");
    }

    void set_live(const std::string& channel, bool live)
    {
        std::lock_guard lock{live_mutex_};
        if (live)
            live_.insert(channel);
        else
            live_.erase(channel);
    }

    // Unsubscribes idle lingering channels whose time is up, and the ones idle longest
    // beyond max_lingering; then sets the sweeper for the next one due.
    void linger_idle()
    {
        const auto now = clock::now();
        std::vector<typename channel_map::iterator> idle;
        for (auto it = channels_.begin(); it != channels_.end(); ++it)
            if (it->second.waiters.empty() && it->second.linger > duration::zero())
                idle.push_back(it);
        std::sort(idle.begin(), idle.end(), [](const auto& a, const auto& b) {
            return a->second.idle_since < b->second.idle_since;
        });
        std::size_t kept = idle.size();
        auto next = time_point::max();
        for (auto& it : idle) {
            const auto due = it->second.idle_since + it->second.linger;
            if (due <= now || kept > max_lingering) {
                --kept;
                remove(it);
            } else {
                next = std::min(next, due);
            }
        }
        if (next == time_point::max() || (sweeping_ && next >= sweep_at_))
            return;
        sweep_at_ = next;
        sweeping_ = true;
        sweeper_.expires_at(next);
        // Weak: a pending sweep must not keep the subscriber alive.
        sweeper_.async_wait([weak = this->weak_from_this()](std::error_code ec) {
            auto self = weak.lock();
            if (!self || ec == asio::error::operation_aborted)
                return;
            self->sweeping_ = false;
            self->linger_idle();
        });
    }

    // SUBSCRIBE or UNSUBSCRIBE of one channel: one acknowledgement owed.
    void send_on(const std::string& channel, std::string_view verb)
    {
        ++unanswered_[channel];
        engine_->send(resp::command({verb, channel}));
    }

    void on_message(const resp::value& v)
    {
        if (v.is_error()) {
            // A subscription refused (MOVED: not this node's slot; or an ACL). Which
            // channel it was for cannot be told from the reply: start afresh.
            if (on_refused_)
                on_refused_();
            drop();
            return;
        }
        if (!v.is_aggregate() || v.elements.size() < 3 || !v.elements[0].is_string() || !v.elements[1].is_string())
            return;
        const auto& kind = v.elements[0].text;
        const auto& name = v.elements[1].text;
        const bool subscribed = kind == "subscribe" || kind == "ssubscribe";
        if (subscribed || kind == "unsubscribe" || kind == "sunsubscribe") {
            const auto owed = unanswered_.find(name);
            if (owed == unanswered_.end()) {
                if (kind == "sunsubscribe")
                    moved_away(name); // the node let go of the channel's slot
                return; // otherwise not a command of this connection's: ignore
            }
            if (--owed->second > 0)
                return; // an earlier command's answer: a later one is still on its way
            unanswered_.erase(owed);
            const auto it = channels_.find(name);
            if (subscribed && it != channels_.end() && it->second.requested) {
                it->second.confirmed = true;
                set_live(name, true);
                notify_change();
            }
            return;
        }
        const auto it = channels_.find(name);
        if (it == channels_.end())
            return;
        if (kind == "message" || kind == "smessage") {
            // A fair queue's release names its head, and may carry the lock it handed
            // the head: only that waiter wakes, with the message.
            const std::string_view text = v.elements.size() > 2 && v.elements[2].is_string()
                                              ? std::string_view{v.elements[2].text}
                                              : std::string_view{"released"};
            for (auto& w : it->second.waiters)
                if (w->wants(text))
                    w->signal(text);
        }
    }

    // The server unsubscribed `name` by itself: its waiters subscribe again.
    void moved_away(const std::string& name)
    {
        const auto it = channels_.find(name);
        if (it == channels_.end())
            return;
        it->second.requested = it->second.confirmed = false;
        set_live(name, false);
        epoch_.fetch_add(1, std::memory_order_acq_rel);
        for (auto& w : it->second.waiters)
            w->signal();
        if (it->second.waiters.empty())
            channels_.erase(it); // lingering: no one to subscribe it again
        channel_count_ = channels_.size();
        notify_change();
    }

    // Closes the connection; forget() follows from the engine.
    void drop()
    {
        engine_->close();
        forget();
    }

    // The connection is gone: wake everyone, forget subscriptions.
    void forget()
    {
        ready_ = false;
        epoch_.fetch_add(1, std::memory_order_acq_rel);
        unanswered_.clear();
        {
            std::lock_guard lock{live_mutex_};
            live_.clear();
        }
        // Lingering channels without waiters go: no one would subscribe them again.
        std::erase_if(channels_, [](const auto& entry) { return entry.second.waiters.empty(); });
        channel_count_ = channels_.size();
        for (auto& [name, ch] : channels_) {
            ch.requested = ch.confirmed = false;
            for (auto& w : ch.waiters)
                w->signal();
        }
        notify_change();
    }

    using engine_type = transport::engine<resp::codec>;

    strand_type strand_;
    config cfg_;
    std::shared_ptr<asio::ssl::context> tls_;
    bool sharded_ = false;
    std::shared_ptr<engine_type> engine_;
    std::function<void()> on_refused_;
    std::atomic<std::uint64_t> epoch_{0};
    bool wired_ = false; // the engine's push and down handlers are set
    bool ready_ = false;
    channel_map channels_;
    std::unordered_map<std::string, std::size_t> unanswered_; // SUBSCRIBE/UNSUBSCRIBE sent, not acknowledged
    std::atomic<std::size_t> channel_count_{0};
    std::vector<timer*> waiting_;
    mutable std::mutex live_mutex_;
    std::unordered_set<std::string> live_; // confirmed channels, for listening()
    timer sweeper_{strand_};               // the next lingering channel due to go
    time_point sweep_at_{};
    bool sweeping_ = false;
};

/// See basic_subscriber.
using subscriber = basic_subscriber<>;

} // namespace distlock::redis::detail
