// distlock/redis/detail/connection.hpp: one pipelined connection shared by many
// coroutines.
//
// Design note. Everything runs on one strand. A request is queued; the writer sends
// whatever is queued in one write (pipelining), and moves the requests to the
// in-flight list; the reader parses replies and hands them out in order. A request
// that times out drops the connection: a server that stops answering would otherwise
// hold every request behind it. When the connection fails or is closed (close(),
// the store's disconnect() or destructor), requests that were written, even in part,
// complete with errc::outcome_unknown (they may have been applied: the caller cleans
// up by owner token) and queued ones with errc::store_unavailable (they were not
// sent); the next request reconnects. A
// caller that stops waiting (cancellation) abandons its request: the reply, when it
// comes, is read and dropped, keeping the order of the others intact.
// `generation_` tells the reader and writer of a closed connection to exit without
// touching the state of its successor.
#pragma once

#include <distlock/clock.hpp>
#include <distlock/error.hpp>
#include <distlock/redis/config.hpp>
#include <distlock/redis/detail/handshake.hpp>
#include <distlock/redis/detail/stream.hpp>
#include <distlock/redis/resp/command.hpp>
#include <distlock/redis/resp/parser.hpp>
#include <distlock/result.hpp>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/strand.hpp>
#include <asio/use_awaitable.hpp>

#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace distlock::redis::detail {

class connection : public std::enable_shared_from_this<connection> {
public:
    using strand_type = asio::strand<asio::any_io_executor>;

    connection(strand_type strand, config cfg, std::shared_ptr<asio::ssl::context> tls)
        : strand_{std::move(strand)}, cfg_{std::move(cfg)}, tls_{std::move(tls)}, writer_wake_{strand_}
    {}

    /// Sends `payload` (holding `count` commands) and returns their replies. Error
    /// replies are values, not errors: the caller interprets them.
    awaitable<result<std::vector<resp::value>>> exec(std::string payload, std::size_t count)
    {
        return asio::co_spawn(strand_, run(shared_from_this(), std::move(payload), count), asio::use_awaitable);
    }

    /// Closes the connection; pending requests fail as described above: written ones
    /// (even in part) with errc::outcome_unknown, queued ones with errc::store_unavailable.
    void close()
    {
        asio::dispatch(strand_, [self = shared_from_this()] { self->fail(); });
    }

    /// Records the server's or the system's words about a failure (diagnostics).
    void note(std::string words)
    {
        std::lock_guard lock{diag_mutex_};
        last_error_ = std::move(words);
    }

    /// The server's or the system's words about the last failure (diagnostics).
    std::string last_error() const
    {
        std::lock_guard lock{diag_mutex_};
        return last_error_;
    }

    /// The identity (run_id) of the server reached at the last successful connect,
    /// without I/O; nullopt when never connected, empty when the server would not tell.
    std::optional<std::string> known_identity() const
    {
        std::lock_guard lock{diag_mutex_};
        return identity_;
    }

    const strand_type& strand() const noexcept { return strand_; }

private:
    struct request {
        explicit request(const strand_type& s, std::string p, std::size_t n)
            : payload{std::move(p)}, expected{n}, done_event{s}
        {}
        std::string payload;
        std::size_t expected;
        std::vector<resp::value> replies;
        bool written = false;
        bool done = false;
        bool abandoned = false;
        std::error_code error;
        timer done_event;
    };

    enum class state { idle, connecting, ready };

    static awaitable<result<std::vector<resp::value>>> run(std::shared_ptr<connection> self, std::string payload,
                                                           std::size_t count)
    {
        co_await asio::this_coro::throw_if_cancelled(false);
        // Out-of-range timeouts are refused before any I/O (config::validate()).
        if (auto ec = self->cfg_.validate())
            co_return ec;
        if (auto ec = co_await self->ensure_connected())
            co_return ec;
        auto req = std::make_shared<request>(self->strand_, std::move(payload), count);
        self->queue_.push_back(req);
        self->writer_wake_.cancel();
        req->done_event.expires_after(self->cfg_.request_timeout);
        while (!req->done) {
            auto [ec] = co_await req->done_event.async_wait(as_tuple(asio::use_awaitable));
            if (req->done)
                break;
            if (!ec) { // the request timed out: the server stopped answering
                self->note("no reply from " + stream::describe(self->cfg_) + " within the request timeout");
                self->fail();
                break;
            }
            auto cs = co_await asio::this_coro::cancellation_state;
            if (cs.cancelled() != asio::cancellation_type::none) {
                req->abandoned = true;
                req->done = true;
                req->error = req->written ? errc::outcome_unknown : errc::cancelled;
                std::erase(self->queue_, req);
                break;
            }
        }
        if (req->error)
            co_return req->error;
        co_return std::move(req->replies);
    }

    awaitable<std::error_code> ensure_connected()
    {
        while (state_ == state::connecting) {
            // Each waiter has its own timer: re-arming a shared one would cancel the others.
            timer t{strand_, time_point::max()};
            connect_waiters_.push_back(&t);
            (void)co_await t.async_wait(as_tuple(asio::use_awaitable));
            std::erase(connect_waiters_, &t);
        }
        if (state_ == state::ready)
            co_return std::error_code{};

        state_ = state::connecting;
        const auto generation = ++generation_;
        std::string diagnostic;
        hello learned;
        auto ec = co_await handshake(stream_, cfg_, tls_.get(), true, true, learned, diagnostic);
        if (!ec && generation_ != generation) { // closed while connecting
            diagnostic = "connection to " + stream::describe(cfg_) + " closed while connecting";
            ec = make_error_code(errc::store_unavailable);
        }
        if (ec) {
            note(std::move(diagnostic));
            stream_.close();
            state_ = state::idle;
            wake_connect_waiters();
            co_return ec;
        }
        {
            std::lock_guard lock{diag_mutex_};
            identity_ = std::move(learned.identity);
        }
        state_ = state::ready;
        wake_connect_waiters();
        asio::co_spawn(strand_, reader(shared_from_this(), generation), asio::detached);
        asio::co_spawn(strand_, writer(shared_from_this(), generation), asio::detached);
        co_return std::error_code{};
    }

    static awaitable<void> writer(std::shared_ptr<connection> self, std::uint64_t generation)
    {
        co_await asio::this_coro::throw_if_cancelled(false);
        std::string batch;
        while (self->generation_ == generation && self->state_ == state::ready) {
            if (self->queue_.empty()) {
                self->writer_wake_.expires_at(time_point::max());
                (void)co_await self->writer_wake_.async_wait(as_tuple(asio::use_awaitable));
                continue;
            }
            batch.clear();
            while (!self->queue_.empty()) {
                auto req = std::move(self->queue_.front());
                self->queue_.pop_front();
                batch += req->payload;
                req->written = true;
                self->in_flight_.push_back(std::move(req));
            }
            auto [ec, n] = co_await self->stream_.write(asio::buffer(batch));
            if (self->generation_ != generation)
                co_return;
            if (ec) {
                self->note("write to " + stream::describe(self->cfg_) + " failed: " + ec.message());
                self->fail();
                co_return;
            }
        }
    }

    static awaitable<void> reader(std::shared_ptr<connection> self, std::uint64_t generation)
    {
        co_await asio::this_coro::throw_if_cancelled(false);
        const auto end = co_await self->stream_.read_replies(
            [&] { return self->generation_ == generation; },
            [&](resp::value v) {
                if (self->in_flight_.empty())
                    return false; // a reply nobody asked for
                self->deliver(std::move(v));
                return true;
            });
        if (!end)
            co_return; // superseded by a newer connection
        if (*end == errc::protocol_error) {
            self->note("unparseable or unexpected reply from " + stream::describe(self->cfg_));
            self->fail_with_protocol_error();
        } else {
            self->note("connection to " + stream::describe(self->cfg_) + " lost: " + end->message());
            self->fail();
        }
    }

    void wake_connect_waiters()
    {
        for (auto* t : connect_waiters_)
            t->cancel();
    }

    void deliver(resp::value v)
    {
        auto& req = *in_flight_.front();
        req.replies.push_back(std::move(v));
        if (req.replies.size() < req.expected)
            return;
        auto done = std::move(in_flight_.front());
        in_flight_.pop_front();
        if (done->abandoned)
            return;
        done->done = true;
        done->done_event.cancel();
    }

    void fail_with_protocol_error()
    {
        for (auto& r : in_flight_)
            if (!r->abandoned) {
                r->error = errc::protocol_error;
                r->done = true;
                r->done_event.cancel();
            }
        in_flight_.clear();
        fail();
    }

    // Drops the connection. A request moves to in_flight_ before its bytes are
    // written, so everything there may have reached the server (even in part):
    // outcome_unknown, never "not applied", or a grant in flight would be left held
    // until its TTL. Queued requests were never sent: store_unavailable.
    //
    // A connect in progress is not reset here: closing the stream makes it fail and
    // it resets the state itself, so that no second connect starts on the stream
    // meanwhile.
    void fail()
    {
        ++generation_;
        if (state_ == state::ready)
            state_ = state::idle;
        stream_.close();
        for (auto& r : in_flight_)
            if (!r->done) {
                r->error = errc::outcome_unknown;
                r->done = true;
                r->done_event.cancel();
            }
        in_flight_.clear();
        for (auto& r : queue_)
            if (!r->done) {
                r->error = errc::store_unavailable;
                r->done = true;
                r->done_event.cancel();
            }
        queue_.clear();
        writer_wake_.cancel();
    }

    strand_type strand_;
    config cfg_;
    std::shared_ptr<asio::ssl::context> tls_;
    stream stream_;
    state state_ = state::idle;
    std::uint64_t generation_ = 0;
    std::deque<std::shared_ptr<request>> queue_;
    std::deque<std::shared_ptr<request>> in_flight_;
    timer writer_wake_;
    std::vector<timer*> connect_waiters_;
    mutable std::mutex diag_mutex_;
    std::string last_error_;
    std::optional<std::string> identity_; // the last server identity learned (kept across reconnects)
};

} // namespace distlock::redis::detail
