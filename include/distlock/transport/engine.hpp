// distlock/transport/engine.hpp: one pipelined request/reply connection shared by
// many coroutines, for any protocol with a codec (codec.hpp) over any stream with
// read_some/write/close (stream.hpp, or a scripted stream in tests).
//
// Design note. Everything runs on one strand. A request is queued; the writer sends
// whatever is queued in one write (pipelining) and moves the requests to the
// in-flight list. On a connection that is not busy (the writer waiting, at most one
// request in flight) a stream that can write without waiting (try_write: plain TCP
// and Unix sockets) takes the request at once, and the writer sends only what the
// socket did not take: a lone request leaves without two hand-offs through the
// scheduler, each a wake-up that a sequential caller would pay on every request
// (bench/HISTORY.md), while a busy connection still batches. The one request that
// may be in flight is a Redlock node's answer to the operation before, which the
// quorum did not wait for: the next operation's request to that node leaves with
// those to the other nodes instead of after them. The reader decodes messages,
// hands pushes to the push handler and replies, in order, to the oldest request in
// flight.
//
// exec() is an asynchronous operation, not a coroutine spawned onto the strand: its
// initiation reaches the strand by dispatch (at once when the strand is free on this
// thread) and the request keeps the caller's completion handler. After each read the
// reader resumes the callers it answered, one after another, each until it waits
// again, and then writes the requests they queued meanwhile in one write, at once
// when the writer waits (so a pipelined connection batches without waking the writer,
// and a sequential caller's next request leaves before the reader reads again); every other completion
// (failures, cancellation) is queued on the caller's executor, never run inside the
// call that started the request. So a request and its reply cost no scheduler
// hand-off at all when the strand is free.
//
// A request that times out drops the connection: a server that stops answering
// would otherwise hold every request behind it. When the connection fails or is
// closed, requests that were written, even in part, complete with
// errc::outcome_unknown (they may have been applied: the caller cleans up by owner
// token) and queued ones with errc::store_unavailable (they were not sent); the next
// request connects again through the connector, which also runs the protocol's
// handshake. A caller that stops waiting (cancellation) abandons its request: one
// not yet written is dropped; the reply of one written is read and dropped, keeping
// the order of the others intact. `generation_` tells the reader, writer and sweeper
// of a closed connection to exit without touching the state of its successor.
// Request timeouts are checked by one sweeper per connection (a timer armed per
// request would cost a system call per request, each becoming the reactor's earliest
// deadline).
#pragma once

#include <distlock/clock.hpp>
#include <distlock/backend/cut_off.hpp>
#include <distlock/backend/deferred.hpp>
#include <distlock/backend/on_strand.hpp>
#include <distlock/backend/strand.hpp>
#include <distlock/backend/waiting_caller.hpp>
#include <distlock/diagnostics.hpp>
#include <distlock/error.hpp>
#include <distlock/result.hpp>
#include <distlock/transport/codec.hpp>
#include <distlock/transport/stream.hpp>

#include <asio/associated_cancellation_slot.hpp>
#include <asio/associated_executor.hpp>
#include <asio/async_result.hpp>
#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/dispatch.hpp>
#include <asio/execution/context.hpp>
#include <asio/execution/outstanding_work.hpp>
#include <asio/execution_context.hpp>
#include <asio/post.hpp>
#include <asio/prefer.hpp>
#include <asio/strand.hpp>
#include <asio/use_awaitable.hpp>

#include <algorithm>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace distlock::transport {

/// Sends `payload` on a stream nobody else uses yet (a handshake) and reads `count`
/// replies, within `timeout`. A reply that does not come is errc::outcome_unknown
/// (the stream is closed), bytes that are not the protocol errc::protocol_error.
template <codec Codec, class Stream>
awaitable<result<std::vector<typename Codec::message>>> roundtrip(Stream& s, const Codec& codec,
                                                                const std::string& payload, std::size_t count,
                                                                duration timeout)
{
    using message = typename Codec::message;
    auto exchange = [](Stream& s, Codec codec, const std::string& payload,
                       std::size_t count) -> awaitable<result<std::vector<message>>> {
        auto [wec, written] = co_await s.write(asio::buffer(payload));
        if (wec)
            co_return errc::store_unavailable;
        std::vector<message> replies;
        std::string buffer;
        std::size_t offset = 0;
        char chunk[4096];
        while (replies.size() < count) {
            auto d = codec.decode(std::string_view{buffer}.substr(offset));
            if (d.status == decode_status::malformed)
                co_return errc::protocol_error;
            if (d.status == decode_status::complete) {
                offset += d.consumed;
                replies.push_back(std::move(d.message));
                continue;
            }
            auto [rec, n] = co_await s.read_some(asio::buffer(chunk));
            if (rec)
                co_return errc::outcome_unknown;
            buffer.append(chunk, n);
        }
        co_return replies;
    };
    auto r = co_await distlock::backend::within(exchange(s, codec, payload, count), distlock::backend::after(timeout));
    if (!r) {
        s.close();
        co_return errc::outcome_unknown;
    }
    co_return std::move(*r);
}

template <codec Codec, class Stream = stream>
class engine : public std::enable_shared_from_this<engine<Codec, Stream>>, private distlock::backend::holds_waiting_callers {
public:
    /// Serialises the engine's work: a strand, as distlock::backend::make_strand() makes.
    using strand_type = asio::any_io_executor;
    using message = typename Codec::message;
    /// Connects the stream and runs the protocol's handshake; `diagnostic` receives
    /// the words of a failure. Runs on the engine's strand, before the stream is shared.
    using connector = std::function<awaitable<std::error_code>(Stream&, std::string& diagnostic)>;

    struct options {
        /// A request without its reply after this long fails with errc::outcome_unknown
        /// and the connection is dropped (checked every tenth of it, at least every
        /// 10 ms and at most every 250 ms).
        duration request_timeout = std::chrono::seconds{2};
        /// Names the peer in diagnostics ("host:port").
        std::string peer;
        /// A connection idle for longer than this is replaced before the next request
        /// (servers close idle keep-alive sockets; a request written just as one does
        /// would be lost with an unknown outcome). Zero: never.
        duration idle_timeout = duration::zero();
    };

    engine(strand_type strand, Codec codec, options opts, connector connect)
        : strand_{std::move(strand)}, inner_{distlock::backend::inner_executor(strand_)}, codec_{std::move(codec)}, options_{std::move(opts)},
          connect_{std::move(connect)}, writer_wake_{strand_}, sweep_{strand_}
    {}

    /// Sends `payload` (holding `count` requests) and returns their replies. Error
    /// replies of the protocol are messages, not errors: the caller interprets them.
    /// A failure's words (which server, what happened) go to `diag` when given.
    awaitable<result<std::vector<message>>> exec(std::string payload, std::size_t count, diagnostics* diag = nullptr)
    {
        // Named, not a temporary of the co_await expression (g++ 12 destroys those twice).
        starter start{this->shared_from_this(), std::make_shared<request>(std::move(payload), count)};
        auto [r, words] = co_await asio::async_initiate<const asio::use_awaitable_t<>&, void(outcome)>(
            std::move(start), asio::use_awaitable);
        if (!r && diag)
            diag->set_client_message(std::move(words));
        co_return std::move(r);
    }

    /// Connects (when not connected) without sending anything.
    awaitable<std::error_code> connect(diagnostics* diag = nullptr)
    {
        auto self = this->shared_from_this();
        auto [ec, words] = co_await distlock::backend::on_strand(
            self->strand_,
            [](std::shared_ptr<engine> self) -> awaitable<std::pair<std::error_code, std::string>> {
                std::string words;
                auto ec = co_await self->ensure_connected(words);
                co_return std::pair{ec, std::move(words)};
            }(self));
        if (ec && diag)
            diag->set_client_message(std::move(words));
        co_return ec;
    }

    /// Sends `payload` whose answers, if any, come as pushes; in order with exec()'s
    /// requests. Dropped when the engine is not connected. Call on the strand.
    void send(std::string payload)
    {
        if (state_ != state::ready)
            return;
        queue_.push_back(std::make_shared<request>(std::move(payload), 0));
        if (!written_at_once())
            writer_wake_.cancel();
    }

    /// Receives every push message; call on the strand, before connecting.
    void on_push(std::function<void(message)> handler) { on_push_ = std::move(handler); }
    /// Told when a ready connection goes away (failure or close()); on the strand.
    void on_down(std::function<void()> handler) { on_down_ = std::move(handler); }

    /// Closes the connection; pending requests fail as described above. Runs at once
    /// when called on the strand.
    void close()
    {
        asio::dispatch(strand_, [self = this->shared_from_this()] {
            self->fail("connection to " + self->options_.peer + " closed by the client");
        });
    }

    /// Whether a connection is up (on the strand).
    bool ready() const noexcept { return state_ == state::ready; }

    const strand_type& strand() const noexcept { return strand_; }
    const options& settings() const noexcept { return options_; }

private:
    using outcome = std::pair<result<std::vector<message>>, std::string>;

    // The caller of exec(), waiting for its outcome.
    using completion = distlock::backend::waiting_caller<outcome>;

    struct request {
        explicit request(std::string p, std::size_t n) : payload{std::move(p)}, expected{n} { replies.reserve(n); }
        std::string payload;
        std::size_t expected; // 0: no reply (send())
        std::vector<message> replies;
        std::string words; // why it failed, for the caller's diagnostics
        time_point deadline = time_point::max(); // the sweeper drops the connection then
        bool written = false;
        bool done = false;
        bool abandoned = false;
        std::error_code error;
        completion caller; // empty for send()
    };

    enum class state { idle, connecting, ready };

    using starter = distlock::backend::start_request<engine, request>;
    friend starter;

    // On the strand: queues the request (written at once when the connection is
    // idle), connecting first when there is no connection.
    void begin(std::shared_ptr<request> req)
    {
        if (req->done) // abandoned before it reached the strand
            return;
        if (!registered_) {
            registered_ = true;
            distlock::backend::hold_until_shutdown(strand_, {this->shared_from_this(), this});
        }
        if (state_ == state::ready && queue_.empty() && in_flight_.empty() && options_.idle_timeout > duration::zero() &&
            clock::now() - last_activity_ > options_.idle_timeout)
            fail("connection to " + options_.peer + " idle: replaced");
        if (state_ == state::ready) {
            enqueue(std::move(req));
            return;
        }
        asio::co_spawn(strand_, connect_then_enqueue(this->shared_from_this(), std::move(req)), asio::detached);
    }

    static awaitable<void> connect_then_enqueue(std::shared_ptr<engine> self, std::shared_ptr<request> req)
    {
        std::string words;
        const auto ec = co_await self->ensure_connected(words);
        if (req->done) // abandoned while connecting
            co_return;
        if (ec) {
            req->error = ec;
            req->words = std::move(words);
            req->done = true;
            self->deliver(*req, false);
            co_return;
        }
        self->enqueue(std::move(req));
    }

    void enqueue(std::shared_ptr<request> req)
    {
        req->deadline = clock::now() + options_.request_timeout;
        queue_.push_back(std::move(req));
        if (delivering_) // the reader writes what its callers queue, together, when they are done
            return;
        if (!written_at_once())
            writer_wake_.cancel();
    }

    // The caller stopped waiting. A request not yet written is dropped; one written,
    // even in part, keeps its place, so that the rest of its bytes still leave and its
    // reply is matched (and dropped) in order.
    void abandon(const std::shared_ptr<request>& req)
    {
        if (req->done)
            return;
        req->abandoned = true;
        req->done = true;
        req->error = req->written ? errc::outcome_unknown : errc::cancelled;
        if (!req->written)
            std::erase(queue_, req);
        deliver(*req, false);
    }

    // Hands a finished request's outcome to its caller. `here`: the caller may resume
    // at once, nested in the current handler; only the reader asks for it, between two
    // reads, where none of the engine's state is in use. Everywhere else (always in
    // the call that started the request) the caller is queued on its executor.
    void deliver(request& r, bool here)
    {
        if (r.caller)
            r.caller.resume_with(r.error, r.words, r.replies, here ? &inner_ : nullptr);
    }

    // Writes queued requests at once, from the front, through the stream's non-blocking
    // try_write(), when the writer waits: waking it would cost two hand-offs through
    // the scheduler (and, with the io_context on several threads, a wake-up of another
    // thread) before the bytes leave. `whole_queue` false: only a lone request on a
    // connection that is not busy (at most one request in flight, see the design
    // note), so that a busy connection still batches in the writer; true: everything
    // queued, in one write (the reader, once the callers it resumed have queued their
    // next requests). True when the writer has nothing to do: all of it left, or the
    // socket refused all of it (the connection failed, and the requests, of which
    // nothing was sent, with it). False when the writer must send the rest.
    bool written_at_once(bool whole_queue = false)
    {
        if constexpr (requires(Stream& s, std::error_code& ec) { s.try_write(asio::const_buffer{}, ec); }) {
            if (state_ != state::ready || idle_writer_ != generation_ || queue_.empty())
                return false;
            if (!whole_queue && (in_flight_.size() > 1 || queue_.size() != 1))
                return false;
            const std::string* bytes = &queue_.front()->payload;
            if (queue_.size() > 1) {
                batch_.clear();
                for (const auto& r : queue_)
                    batch_ += r->payload;
                bytes = &batch_;
            }
            std::error_code ec;
            auto n = stream_.try_write(asio::buffer(*bytes), ec);
            if (n == 0) {
                if (!ec || ec == asio::error::would_block || ec == asio::error::try_again)
                    return false;
                fail("write to " + options_.peer + " failed: " + ec.message());
                return true;
            }
            last_activity_ = clock::now();
            while (n > 0 && !queue_.empty()) {
                auto& req = queue_.front();
                req->written = true;
                if (n < req->payload.size()) { // the rest waits for the writer
                    req->payload.erase(0, n);
                    break;
                }
                n -= req->payload.size();
                if (req->expected > 0)
                    in_flight_.push_back(std::move(req));
                queue_.pop_front();
            }
            return queue_.empty();
        } else {
            return false;
        }
    }

    // `diagnostic` receives the words of a failure.
    awaitable<std::error_code> ensure_connected(std::string& diagnostic)
    {
        while (state_ == state::connecting) {
            // Each waiter has its own timer: re-arming a shared one would cancel the others.
            timer t{strand_, time_point::max()};
            connect_waiters_.push_back(&t);
            (void)co_await t.async_wait(distlock::backend::as_tuple_awaitable<Codec>());
            std::erase(connect_waiters_, &t);
        }
        if (state_ == state::ready)
            co_return std::error_code{};

        state_ = state::connecting;
        const auto generation = ++generation_;
        // The callers waiting above wait for this attempt to end. Should it end by an
        // exception instead (its caller cancelled inside connect_), they would wait for
        // ever: the attempt is undone, they wake and one of them connects.
        std::error_code ec;
        try {
            ec = co_await connect_(stream_, diagnostic);
        } catch (...) {
            end_failed_attempt();
            throw;
        }
        if (!ec && generation_ != generation) { // closed while connecting
            diagnostic = "connection to " + options_.peer + " closed while connecting";
            ec = make_error_code(errc::store_unavailable);
        }
        if (ec) {
            end_failed_attempt();
            co_return ec;
        }
        state_ = state::ready;
        last_activity_ = clock::now();
        wake_connect_waiters();
        asio::co_spawn(strand_, reader(this->shared_from_this(), generation), asio::detached);
        asio::co_spawn(strand_, writer(this->shared_from_this(), generation), asio::detached);
        asio::co_spawn(strand_, sweeper(this->shared_from_this(), generation), asio::detached);
        co_return std::error_code{};
    }

    // Drops the connection when a request is past its deadline: a server that stops
    // answering would otherwise hold every request behind it. fail() cancels its
    // timer, so a closed connection's sweeper exits at once.
    static awaitable<void> sweeper(std::shared_ptr<engine> self, std::uint64_t generation)
    {
        co_await asio::this_coro::throw_if_cancelled(false);
        const auto tick = std::clamp<duration>(self->options_.request_timeout / 10, std::chrono::milliseconds{10},
                                               std::chrono::milliseconds{250});
        const auto late = [](const std::deque<std::shared_ptr<request>>& requests, time_point now) {
            return std::any_of(requests.begin(), requests.end(), [now](const std::shared_ptr<request>& r) {
                return !r->done && r->expected > 0 && r->deadline <= now;
            });
        };
        while (self->generation_ == generation) {
            self->sweep_.expires_after(tick);
            (void)co_await self->sweep_.async_wait(distlock::backend::as_tuple_awaitable<Codec>());
            if (self->generation_ != generation)
                co_return;
            const auto now = clock::now();
            if (late(self->in_flight_, now) || late(self->queue_, now)) {
                self->fail("no reply from " + self->options_.peer + " within the request timeout");
                co_return;
            }
        }
    }

    static awaitable<void> writer(std::shared_ptr<engine> self, std::uint64_t generation)
    {
        co_await asio::this_coro::throw_if_cancelled(false);
        std::string batch;
        while (self->generation_ == generation && self->state_ == state::ready) {
            if (self->queue_.empty()) {
                self->writer_wake_.expires_at(time_point::max());
                self->idle_writer_ = generation;
                (void)co_await self->writer_wake_.async_wait(distlock::backend::as_tuple_awaitable<Codec>());
                if (self->idle_writer_ == generation)
                    self->idle_writer_ = 0;
                continue;
            }
            batch.clear();
            while (!self->queue_.empty()) {
                auto req = std::move(self->queue_.front());
                self->queue_.pop_front();
                batch += req->payload;
                req->written = true;
                if (req->expected > 0)
                    self->in_flight_.push_back(std::move(req));
            }
            auto [ec, n] = co_await self->stream_.write(asio::buffer(batch));
            if (self->generation_ != generation)
                co_return;
            self->last_activity_ = clock::now();
            if (ec) {
                self->fail("write to " + self->options_.peer + " failed: " + ec.message());
                co_return;
            }
        }
    }

    static awaitable<void> reader(std::shared_ptr<engine> self, std::uint64_t generation)
    {
        co_await asio::this_coro::throw_if_cancelled(false);
        std::string buffer;
        std::size_t offset = 0;
        std::vector<char> chunk(16 * 1024);
        std::vector<std::shared_ptr<request>> answered;
        for (;;) {
            auto [ec, n] = co_await self->stream_.read_some(asio::buffer(chunk));
            if (self->generation_ != generation)
                co_return; // superseded by a newer connection: touch nothing
            if (ec) {
                self->fail("connection to " + self->options_.peer + " lost: " + ec.message());
                co_return;
            }
            buffer.append(chunk.data(), n);
            self->last_activity_ = clock::now();
            for (;;) {
                auto d = self->codec_.decode(std::string_view{buffer}.substr(offset));
                if (d.status == decode_status::need_more)
                    break;
                if (d.status == decode_status::malformed || !self->accept(std::move(d.message))) {
                    self->fail_with_protocol_error("unparseable or unexpected reply from " + self->options_.peer);
                    co_return;
                }
                offset += d.consumed;
                if (self->generation_ != generation)
                    co_return; // a push handler closed the connection
            }
            // The callers resume here, one after another, each until it waits again
            // (often with its next request written). One that closes the connection
            // leaves the others' outcomes, complete already, to be handed over here.
            answered.swap(self->answered_);
            self->delivering_ = !answered.empty();
            for (auto& r : answered)
                self->deliver(*r, true);
            answered.clear();
            self->delivering_ = false;
            if (self->generation_ != generation)
                co_return;
            if (!self->queue_.empty() && !self->written_at_once(true))
                self->writer_wake_.cancel();
            if (offset == buffer.size()) {
                buffer.clear();
                offset = 0;
            } else if (offset > 64 * 1024) {
                buffer.erase(0, offset);
                offset = 0;
            }
        }
    }

    // A decoded message: a push, or the reply of the oldest request in flight. False
    // for a reply nobody asked for.
    bool accept(message m)
    {
        if (codec_.is_push(m)) {
            if (on_push_)
                on_push_(std::move(m));
            return true;
        }
        if (in_flight_.empty())
            return false;
        auto& req = *in_flight_.front();
        req.replies.push_back(std::move(m));
        if (req.replies.size() < req.expected)
            return true;
        auto done = std::move(in_flight_.front());
        in_flight_.pop_front();
        if (done->abandoned)
            return true;
        done->done = true;
        answered_.push_back(std::move(done)); // the reader hands it over after this read's messages
        return true;
    }

    // A connect attempt that did not end connected: the callers waiting for it wake
    // and one of them tries again.
    void end_failed_attempt()
    {
        stream_.close();
        state_ = state::idle;
        wake_connect_waiters();
    }

    void wake_connect_waiters()
    {
        for (auto* t : connect_waiters_)
            t->cancel();
    }

    void fail_with_protocol_error(const std::string& why)
    {
        for (auto& r : in_flight_)
            if (!r->abandoned) {
                r->error = errc::protocol_error;
                r->words = why;
                r->done = true;
                deliver(*r, false);
            }
        in_flight_.clear();
        fail(why);
    }

    // Drops the connection. A request moves to in_flight_ before its bytes are
    // written, so everything there may have reached the server (even in part):
    // outcome_unknown, never "not applied", or a grant in flight would be left held
    // until its TTL. Queued requests were never sent (store_unavailable), except one
    // whose head an idle connection wrote at once (written_at_once()) and whose rest
    // waits for the writer: its head may hold whole requests, so outcome_unknown.
    //
    // A connect in progress is not reset here: closing the stream makes it fail and
    // it resets the state itself, so that no second connect starts on the stream
    // meanwhile.
    void fail(const std::string& why)
    {
        ++generation_;
        const bool was_ready = state_ == state::ready;
        if (was_ready)
            state_ = state::idle;
        stream_.close();
        for (auto& r : in_flight_)
            if (!r->done) {
                r->error = errc::outcome_unknown;
                r->words = why;
                r->done = true;
                deliver(*r, false);
            }
        in_flight_.clear();
        for (auto& r : queue_)
            if (!r->done) {
                r->error = r->written ? errc::outcome_unknown : errc::store_unavailable;
                r->words = r->written ? why : why + " (the request was not sent)";
                r->done = true;
                deliver(*r, false);
            }
        queue_.clear();
        for (auto& r : answered_) // replied to before the failure: their replies stand
            deliver(*r, false);
        answered_.clear();
        writer_wake_.cancel();
        sweep_.cancel();
        if (was_ready && on_down_)
            on_down_();
    }

    // The io_context shuts down (no handler runs any more): the waiting callers' frames
    // go, without being resumed. Moved out first: the last of them may hold the last
    // reference to this engine.
    void drop_waiting_callers() noexcept override
    {
        auto keep = this->shared_from_this();
        auto queued = std::move(queue_);
        auto in_flight = std::move(in_flight_);
        auto answered = std::move(answered_);
        for (auto* requests : {&queued, &in_flight})
            for (auto& r : *requests)
                r->caller = completion{};
        for (auto& r : answered)
            r->caller = completion{};
    }

    strand_type strand_;
    asio::any_io_executor inner_; // the strand's: the reader resumes callers on it at once
    Codec codec_;
    options options_;
    connector connect_;
    Stream stream_;
    state state_ = state::idle;
    std::uint64_t generation_ = 0;
    std::uint64_t idle_writer_ = 0; // the generation whose writer waits for a request (0: none)
    time_point last_activity_{}; // the last write or read on the connection
    std::deque<std::shared_ptr<request>> queue_;
    std::deque<std::shared_ptr<request>> in_flight_;
    std::vector<std::shared_ptr<request>> answered_; // replied to, handed over by the reader after its read
    bool registered_ = false; // with the io_context's waiting_callers
    bool delivering_ = false; // the reader is resuming the callers it answered
    std::string batch_;       // written_at_once()'s, kept for its capacity
    timer writer_wake_;
    timer sweep_; // the sweeper's; one per engine, re-armed by each connection's sweeper
    std::vector<timer*> connect_waiters_;
    std::function<void(message)> on_push_;
    std::function<void()> on_down_;
};

} // namespace distlock::transport
