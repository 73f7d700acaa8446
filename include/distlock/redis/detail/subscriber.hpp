// distlock/redis/detail/subscriber.hpp: the pub/sub connection that wakes waiters
// when a lock is released.
//
// Design note. One subscriber connection per store, shared by every waiter. A channel
// is subscribed when its first waiter arrives and unsubscribed when its last leaves,
// so subscriptions do not accumulate. subscribe() completes only once Redis confirmed
// the subscription: the waiter's next try happens after that, so a release published
// between the try and the wait reaches it. If the connection drops, every waiter is
// woken (it retries, which is always safe) and channels are subscribed again on the
// next wait. All state lives on the store's strand.
#pragma once

#include <distlock/clock.hpp>
#include <distlock/detail/wakeup.hpp>
#include <distlock/redis/config.hpp>
#include <distlock/redis/detail/handshake.hpp>
#include <distlock/redis/detail/stream.hpp>
#include <distlock/redis/resp/command.hpp>
#include <distlock/redis/resp/parser.hpp>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/dispatch.hpp>
#include <asio/strand.hpp>

#include <algorithm>
#include <atomic>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace distlock::redis::detail {

class subscriber : public std::enable_shared_from_this<subscriber> {
public:
    using strand_type = asio::strand<asio::any_io_executor>;
    using waiter = std::shared_ptr<distlock::detail::wakeup>;

    subscriber(strand_type strand, config cfg, std::shared_ptr<asio::ssl::context> tls)
        : strand_{std::move(strand)}, cfg_{std::move(cfg)}, tls_{std::move(tls)}
    {
        cfg_.database = 0; // pub/sub ignores the database
    }

    /// Registers `w` for `channel` and returns once the subscription is confirmed.
    awaitable<std::error_code> subscribe(std::string channel, waiter w)
    {
        return asio::co_spawn(strand_, subscribe_on_strand(shared_from_this(), std::move(channel), std::move(w)),
                              asio::use_awaitable);
    }

    /// Removes `w`; the channel is unsubscribed when it was the last waiter.
    void unsubscribe(std::string channel, waiter w)
    {
        asio::dispatch(strand_, [self = shared_from_this(), channel = std::move(channel), w = std::move(w)] {
            auto it = self->channels_.find(channel);
            if (it == self->channels_.end())
                return;
            std::erase(it->second.waiters, w);
            if (!it->second.waiters.empty())
                return;
            const bool was_subscribed = it->second.requested;
            self->channels_.erase(it);
            self->channel_count_ = self->channels_.size();
            if (was_subscribed && self->ready_)
                self->send(resp::command({"UNSUBSCRIBE", channel}));
        });
    }

    void close()
    {
        asio::dispatch(strand_, [self = shared_from_this()] { self->drop(); });
    }

    /// Channels with at least one waiter (they must not accumulate).
    std::size_t channels() const { return channel_count_.load(); }

private:
    struct channel_state {
        std::vector<waiter> waiters;
        bool requested = false;
        bool confirmed = false;
    };

    static awaitable<std::error_code> subscribe_on_strand(std::shared_ptr<subscriber> self, std::string channel,
                                                          waiter w)
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
            self->channel_count_ = self->channels_.size();
            if (!ch.requested) {
                ch.requested = true;
                self->send(resp::command({"SUBSCRIBE", channel}));
            }
        }
        const auto deadline = clock::now() + self->cfg_.request_timeout;
        for (;;) {
            auto it = self->channels_.find(channel);
            if (it == self->channels_.end() || !self->ready_)
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
        while (connecting_)
            co_await wait_for_change(time_point::max());
        if (ready_)
            co_return std::error_code{};
        connecting_ = true;
        const auto generation = ++generation_;
        std::string diagnostic;
        // The same handshake as the main connection, without SELECT (pub/sub ignores
        // the database) and without INFO.
        hello unused;
        auto ec = co_await handshake(stream_, cfg_, tls_.get(), false, false, unused, diagnostic);
        if (!ec && generation_ != generation) // dropped (close()) while connecting
            ec = make_error_code(errc::store_unavailable);
        connecting_ = false;
        if (ec) {
            stream_.close();
            notify_change();
            co_return ec;
        }
        ready_ = true;
        notify_change();
        asio::co_spawn(strand_, reader(shared_from_this(), generation), asio::detached);
        co_return std::error_code{};
    }

    // Each waiter sleeps on a timer of its own, so that waking one never disturbs
    // another; a change (confirmation, connection up or down) wakes them all.
    awaitable<void> wait_for_change(time_point until)
    {
        timer t{strand_, until};
        waiting_.push_back(&t);
        (void)co_await t.async_wait(as_tuple(asio::use_awaitable));
        std::erase(waiting_, &t);
    }

    void notify_change()
    {
        for (auto* t : waiting_)
            t->cancel();
    }

    // Writes are small and rare; chaining them keeps them in order.
    void send(std::string bytes)
    {
        outbox_ += bytes;
        if (!writing_)
            asio::co_spawn(strand_, writer(shared_from_this(), generation_), asio::detached);
    }

    static awaitable<void> writer(std::shared_ptr<subscriber> self, std::uint64_t generation)
    {
        self->writing_ = true;
        while (!self->outbox_.empty() && self->generation_ == generation) {
            std::string batch;
            batch.swap(self->outbox_);
            auto [ec, n] = co_await self->stream_.write(asio::buffer(batch));
            if (self->generation_ != generation)
                break;
            if (ec) {
                self->drop();
                break;
            }
        }
        self->writing_ = false;
    }

    static awaitable<void> reader(std::shared_ptr<subscriber> self, std::uint64_t generation)
    {
        const auto end = co_await self->stream_.read_replies([&] { return self->generation_ == generation; },
                                                             [&](resp::value v) {
                                                                 self->on_message(v);
                                                                 return true;
                                                             });
        if (end)
            self->drop();
    }

    void on_message(const resp::value& v)
    {
        if (!v.is_aggregate() || v.elements.size() < 3 || !v.elements[0].is_string() || !v.elements[1].is_string())
            return;
        const auto& kind = v.elements[0].text;
        const auto it = channels_.find(v.elements[1].text);
        if (it == channels_.end())
            return;
        if (kind == "subscribe") {
            it->second.confirmed = true;
            notify_change();
        } else if (kind == "message") {
            for (auto& w : it->second.waiters)
                w->signal();
        }
    }

    // The connection is gone: wake everyone, forget subscriptions.
    void drop()
    {
        ++generation_;
        ready_ = false;
        stream_.close();
        outbox_.clear();
        for (auto& [name, ch] : channels_) {
            ch.requested = ch.confirmed = false;
            for (auto& w : ch.waiters)
                w->signal();
        }
        notify_change();
    }

    strand_type strand_;
    config cfg_;
    std::shared_ptr<asio::ssl::context> tls_;
    stream stream_;
    bool ready_ = false;
    bool connecting_ = false;
    bool writing_ = false;
    std::uint64_t generation_ = 0;
    std::string outbox_;
    std::unordered_map<std::string, channel_state> channels_;
    std::atomic<std::size_t> channel_count_{0};
    std::vector<timer*> waiting_;
};

} // namespace distlock::redis::detail
