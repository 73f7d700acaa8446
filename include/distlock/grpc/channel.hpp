// distlock/grpc/channel.hpp: gRPC calls on one HTTP/2 connection shared by many
// coroutines: unary calls, and streams whose messages arrive as they come (a watch).
//
// Design note. The transport engine owns the socket: it connects (through the
// connector, to which the channel adds HTTP/2's handshake), writes what it is given
// and hands every read to the channel, on its strand, as a push (http2::byte_codec).
// The channel keeps the HTTP/2 session (http2/session.hpp) on that strand: a call
// opens a stream there, its request leaves with the session's next output, and the
// replies, in whatever order the server sends them, reach their streams. A unary
// call keeps its caller's completion handler (backend/waiting_caller.hpp), as the
// engine's requests do; the reply that finishes it resumes the caller at once from
// the read, when the caller's executor is the strand's own, without a trip through the
// scheduler. A streaming call's messages go to its inbox, which its reader waits on.
//
// Failures follow the engine's rules. A call that could not be sent (no connection,
// or a stream the server refused before processing it: REFUSED_STREAM, or beyond a
// GOAWAY's last stream) is errc::store_unavailable; one sent and not answered (the
// connection lost, the stream reset, no reply within the request timeout, which drops
// the connection as the engine does) is errc::outcome_unknown. gRPC's status is the
// caller's to read: a call that got one, OK or not, returns it in its answer. The
// server's frames that break HTTP/2 or gRPC are errc::protocol_error.
#pragma once

#include <distlock/backend/cut_off.hpp>
#include <distlock/backend/deferred.hpp>
#include <distlock/backend/waiting_caller.hpp>
#include <distlock/backend/wakeup.hpp>
#include <distlock/clock.hpp>
#include <distlock/diagnostics.hpp>
#include <distlock/error.hpp>
#include <distlock/grpc/framing.hpp>
#include <distlock/http2/session.hpp>
#include <distlock/result.hpp>
#include <distlock/transport/engine.hpp>

#include <asio/async_result.hpp>
#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/dispatch.hpp>
#include <asio/use_awaitable.hpp>

#include <algorithm>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace distlock::grpc {

/// A call's end as the server said it: its status and the messages before it.
struct answer {
    int status = 0;             ///< grpc-status: 0 is OK
    std::string status_message; ///< grpc-message, decoded
    std::vector<std::string> messages;
};

/// A header field sent with a call beside gRPC's own (metadata: an auth token).
struct metadata_entry {
    std::string name; ///< lower case
    std::string value;
};

/// A streaming call's messages as they arrive, then its end. Filled on the channel's
/// strand, read by one waiter on any thread.
class stream_inbox {
public:
    explicit stream_inbox(asio::any_io_executor ex) : wake_{std::move(ex)} {}

    /// The messages that arrived since the last take, and whether the stream ended.
    struct batch {
        std::deque<std::string> messages;
        bool ended = false;
        std::optional<answer> end; ///< the server's status, when it gave one
        std::error_code error;     ///< why it ended without one
    };

    batch take()
    {
        std::lock_guard lock{mutex_};
        batch b;
        b.messages.swap(messages_);
        b.ended = ended_;
        b.end = end_;
        b.error = error_;
        return b;
    }

    /// Waits for a message or the end (true), or `until` (false).
    template <class Unused = void>
    awaitable<bool> wait(time_point until)
    {
        return wake_.wait<Unused>(until);
    }

    // The channel's side.
    void put(std::string m)
    {
        std::lock_guard lock{mutex_};
        messages_.push_back(std::move(m));
        wake_.signal();
    }
    void finish(std::optional<answer> end, std::error_code error)
    {
        std::lock_guard lock{mutex_};
        if (ended_)
            return;
        ended_ = true;
        end_ = std::move(end);
        error_ = error;
        wake_.signal();
    }

    std::int32_t stream = 0; ///< on the channel's strand only

private:
    std::mutex mutex_;
    std::deque<std::string> messages_;
    bool ended_ = false;
    std::optional<answer> end_;
    std::error_code error_;
    distlock::backend::wakeup wake_;
};

template <class Stream = transport::stream>
class basic_channel : public std::enable_shared_from_this<basic_channel<Stream>>,
                      private distlock::backend::holds_waiting_callers {
public:
    using engine_type = transport::engine<http2::byte_codec, Stream>;
    /// Connects the stream (TCP, TLS with ALPN "h2"); the channel then runs HTTP/2's
    /// handshake on it.
    using connector = typename engine_type::connector;

    struct options {
        /// A unary call without its answer after this long is errc::outcome_unknown and
        /// the connection is dropped (a server that stops answering answers no stream).
        duration request_timeout = std::chrono::seconds{3};
        std::string peer;      ///< "host:port", for diagnostics
        std::string authority; ///< the :authority of every request
        bool tls = false;      ///< the :scheme, https or http
    };

    /// A channel on the strand `strand` (backend::make_strand); it connects when first
    /// used, and again after a connection is lost.
    static std::shared_ptr<basic_channel> make(asio::any_io_executor strand, options opts, connector connect)
    {
        std::shared_ptr<basic_channel> self{new basic_channel{strand, std::move(opts)}};
        std::weak_ptr<basic_channel> weak = self;
        self->engine_ = std::make_shared<engine_type>(
            strand, http2::byte_codec{},
            typename engine_type::options{self->options_.request_timeout, self->options_.peer, duration::zero()},
            [weak, connect = std::move(connect)](Stream& s, std::string& words) -> awaitable<std::error_code> {
                if (auto ec = co_await connect(s, words))
                    co_return ec;
                auto self = weak.lock();
                if (!self)
                    co_return make_error_code(errc::store_unavailable);
                co_return co_await self->handshake(s, words);
            });
        self->engine_->on_push([weak](std::string bytes) {
            if (auto self = weak.lock())
                self->received(bytes);
        });
        self->engine_->on_down([weak] {
            if (auto self = weak.lock())
                self->down();
        });
        return self;
    }

    /// Calls `path` (/package.Service/Method) with `message`, and returns the
    /// server's status and messages. A failure's words go to `diag` when given.
    awaitable<result<answer>> unary(std::string path, std::string message, std::vector<metadata_entry> metadata,
                                    diagnostics* diag = nullptr)
    {
        auto c = std::make_shared<call>(this, std::move(path), frame(message), std::move(metadata), nullptr);
        starter start{this->shared_from_this(), std::move(c)};
        auto [r, words] = co_await asio::async_initiate<const asio::use_awaitable_t<>&, void(outcome)>(
            std::move(start), asio::use_awaitable);
        if (!r && diag)
            diag->set_client_message(std::move(words));
        co_return std::move(r);
    }

    /// Opens a stream on `path` and sends `message` on it, the request left open; its
    /// messages then arrive in the inbox until the server ends it or cancel().
    awaitable<result<std::shared_ptr<stream_inbox>>> open(std::string path, std::string message,
                                                          std::vector<metadata_entry> metadata)
    {
        auto inbox = std::make_shared<stream_inbox>(co_await asio::this_coro::executor);
        auto c = std::make_shared<call>(this, std::move(path), frame(message), std::move(metadata), inbox);
        starter start{this->shared_from_this(), std::move(c)};
        auto [r, words] = co_await asio::async_initiate<const asio::use_awaitable_t<>&, void(outcome)>(
            std::move(start), asio::use_awaitable);
        if (!r)
            co_return r.error();
        co_return inbox;
    }

    /// Ends a stream open() opened (RST_STREAM); its inbox ends. From any thread.
    void cancel(std::shared_ptr<stream_inbox> inbox)
    {
        asio::dispatch(strand_, [self = this->shared_from_this(), inbox = std::move(inbox)] {
            auto it = self->streams_.find(inbox->stream);
            if (inbox->stream == 0 || it == self->streams_.end() || it->second->inbox != inbox)
                return;
            it->second->abandoned = it->second->done = true;
            inbox->finish(std::nullopt, make_error_code(errc::cancelled));
            if (self->session_) {
                self->session_->cancel(inbox->stream);
                self->settle(false);
            }
        });
    }

    /// Closes the connection for good... until the next call, which connects again.
    /// Calls in flight fail as described above.
    void close() { engine_->close(); }

    const asio::any_io_executor& strand() const noexcept { return strand_; }

private:
    using outcome = std::pair<result<answer>, std::string>;
    using completion = distlock::backend::waiting_caller<outcome>;

    struct call final : http2::stream_listener {
        call(basic_channel* o, std::string p, std::string b, std::vector<metadata_entry> m,
             std::shared_ptr<stream_inbox> in)
            : owner{o}, path{std::move(p)}, body{std::move(b)}, metadata{std::move(m)}, inbox{std::move(in)}
        {}

        void on_header(std::string_view name, std::string_view value, bool) override
        {
            if (name == ":status")
                http_status = parse_status(value).value_or(-1);
            else if (name == "grpc-status")
                status = parse_status(value).value_or(-1);
            else if (name == "grpc-message")
                status_message = percent_decoded(value);
        }

        void on_data(std::string_view bytes) override
        {
            if (local_error)
                return;
            in.append(bytes);
            for (;;) {
                std::string m;
                std::string why;
                const auto s = in.next(m, why);
                if (s == deframer::status::need_more)
                    return;
                if (s == deframer::status::malformed) {
                    local_error = make_error_code(errc::protocol_error);
                    words = owner->options_.peer + " sent " + why;
                    owner->session_->cancel(stream);
                    return;
                }
                if (inbox)
                    inbox->put(std::move(m));
                else
                    replies.push_back(std::move(m));
            }
        }

        void on_close(std::uint32_t error_code) override { owner->closed(*this, error_code); }

        basic_channel* owner; // outlives the call's stream: the session goes first (down())
        std::string path;
        std::string body;
        std::vector<metadata_entry> metadata;
        std::shared_ptr<stream_inbox> inbox; // a streaming call's; null for a unary one

        std::int32_t stream = 0;
        bool submitted = false;
        bool done = false;
        bool abandoned = false;
        time_point deadline = time_point::max();
        int http_status = 0;
        std::optional<int> status;
        std::string status_message;
        deframer in;
        std::vector<std::string> replies;
        std::optional<answer> answered;
        std::error_code local_error; // a reply this client could not read
        std::error_code error;
        std::string words;
        completion caller;
    };

    using starter = distlock::backend::start_request<basic_channel, call>;
    friend starter;

    basic_channel(asio::any_io_executor strand, options opts)
        : strand_{std::move(strand)}, inner_{distlock::backend::inner_executor(strand_)}, options_{std::move(opts)},
          sweep_{strand_}
    {}

    // HTTP/2's handshake on a connected stream, on the strand: the client's preface and
    // SETTINGS, then the server's SETTINGS read (a server that does not speak HTTP/2
    // is told apart here, with its words).
    awaitable<std::error_code> handshake(Stream& s, std::string& words)
    {
        auto session = std::make_unique<http2::client_session>();
        std::string hello; // nghttp2 writes the client's preface (its magic) itself
        session->output(hello);
        auto exchange = [](Stream& s, http2::client_session& session, std::string hello,
                           std::string& words) -> awaitable<std::error_code> {
            auto [wec, written] = co_await s.write(asio::buffer(hello));
            if (wec)
                co_return make_error_code(errc::store_unavailable);
            char chunk[4096];
            std::string seen; // the first bytes the server sent, for the words of a refusal
            while (!session.peer_settled()) {
                auto [rec, n] = co_await s.read_some(asio::buffer(chunk));
                if (rec) {
                    if (seen.empty())
                        co_return make_error_code(errc::store_unavailable);
                    // It answered, then closed, without HTTP/2's SETTINGS.
                    words = "the server answered '" + seen + "' and closed the connection";
                    co_return make_error_code(errc::protocol_error);
                }
                if (seen.size() < 64)
                    seen.append(chunk, std::min<std::size_t>(n, 64 - seen.size()));
                if (!session.receive(std::string_view{chunk, n}, words)) {
                    words += ": the server answered '" + seen + "'";
                    co_return make_error_code(errc::protocol_error);
                }
            }
            co_return std::error_code{};
        };
        auto r = co_await distlock::backend::within(exchange(s, *session, std::move(hello), words),
                                                    distlock::backend::after(options_.request_timeout));
        if (!r) {
            words = "no HTTP/2 handshake from " + options_.peer + " within the request timeout";
            co_return make_error_code(errc::store_unavailable);
        }
        if (*r) {
            if (*r == errc::protocol_error)
                words = options_.peer + " does not speak HTTP/2 (gRPC): " + words;
            co_return *r;
        }
        // What the session has to send now (its SETTINGS acknowledgement) leaves with
        // the first request.
        session_ = std::move(session);
        const auto generation = ++generation_;
        asio::co_spawn(strand_, sweeper(this->shared_from_this(), generation), asio::detached);
        co_return std::error_code{};
    }

    // On the strand: the call's stream is opened, connecting first when needed.
    void begin(std::shared_ptr<call> c)
    {
        if (c->done) // abandoned before it reached the strand
            return;
        if (!registered_) {
            registered_ = true;
            distlock::backend::hold_until_shutdown(strand_, {this->shared_from_this(), this});
        }
        if (engine_->ready() && session_ && !session_->accepting()) {
            last_words_ = options_.peer + ": " + session_->goaway();
            engine_->close(); // the server takes no new streams here: a new connection
        }
        if (engine_->ready() && session_) {
            submit(std::move(c));
            return;
        }
        asio::co_spawn(strand_, connect_then_submit(this->shared_from_this(), std::move(c)), asio::detached);
    }

    static awaitable<void> connect_then_submit(std::shared_ptr<basic_channel> self, std::shared_ptr<call> c)
    {
        diagnostics d;
        const auto ec = co_await self->engine_->connect(&d);
        if (c->done)
            co_return;
        if (!ec && !(self->engine_->ready() && self->session_)) {
            c->error = make_error_code(errc::store_unavailable);
            c->words = "connection to " + self->options_.peer + " lost before the call was sent";
        } else if (ec) {
            c->error = ec;
            c->words = std::string{d.client_message()};
        } else {
            self->submit(std::move(c));
            co_return;
        }
        c->done = true;
        self->deliver(*c, false);
    }

    void submit(std::shared_ptr<call> c)
    {
        std::vector<http2::header> headers{
            {":method", "POST"},
            {":scheme", options_.tls ? "https" : "http"},
            {":path", c->path},
            {":authority", options_.authority},
            {"content-type", "application/grpc"},
            {"te", "trailers"},
        };
        for (const auto& m : c->metadata)
            headers.push_back({m.name, m.value});
        const bool streaming = c->inbox != nullptr;
        const auto id = session_->submit(headers, std::move(c->body), !streaming, c.get());
        if (id <= 0) {
            c->error = make_error_code(errc::store_unavailable);
            c->words = "no new stream on the connection to " + options_.peer + " (" + nghttp2_strerror(id) +
                       "): the request was not sent";
            c->done = true;
            deliver(*c, false);
            engine_->close(); // out of stream IDs, or told to go away: the next call connects again
            return;
        }
        c->stream = id;
        c->submitted = true;
        if (streaming) {
            c->inbox->stream = id;
            c->done = true; // the caller is told the stream is open; the inbox hears the rest
            streams_.emplace(id, c);
            deliver(*c, false);
        } else {
            c->deadline = clock::now() + options_.request_timeout;
            streams_.emplace(id, std::move(c));
        }
        settle(false);
    }

    // Writes what the session has to send, then hands the calls that ended to their
    // callers: at once when `here` (the reader, between two reads), else queued.
    void settle(bool here)
    {
        if (session_) {
            std::string out;
            if (!session_->output(out)) {
                last_words_ = "HTTP/2 session with " + options_.peer + " failed";
                engine_->close();
            } else if (!out.empty()) {
                engine_->send(std::move(out));
            }
        }
        auto ended = std::move(finished_);
        finished_.clear();
        for (auto& c : ended)
            deliver(*c, here);
    }

    // A read, handed on by the engine's reader.
    void received(const std::string& bytes)
    {
        if (!session_)
            return;
        std::string why;
        if (!session_->receive(bytes, why)) {
            last_words_ = options_.peer + ": " + why;
            protocol_failure_ = true;
            engine_->close();
            return;
        }
        settle(true);
    }

    // A stream ended (from inside the session).
    void closed(call& c, std::uint32_t error_code)
    {
        auto it = streams_.find(c.stream);
        if (it == streams_.end())
            return;
        auto keep = std::move(it->second);
        streams_.erase(it);
        if (c.abandoned)
            return;
        std::optional<answer> got;
        std::error_code ec;
        if (c.local_error) {
            ec = c.local_error;
        } else if (error_code == NGHTTP2_REFUSED_STREAM) {
            ec = make_error_code(errc::store_unavailable);
            c.words = options_.peer + " refused the stream before processing it";
        } else if (error_code != NGHTTP2_NO_ERROR) {
            ec = make_error_code(errc::outcome_unknown);
            c.words = "stream reset by " + options_.peer + " (HTTP/2 error " + std::to_string(error_code) + ")";
        } else if (c.status && *c.status >= 0) {
            got = answer{*c.status, std::move(c.status_message), std::move(c.replies)};
        } else if (c.http_status != 200 && c.http_status > 0) {
            got = answer{status_of_http(c.http_status),
                         "HTTP " + std::to_string(c.http_status) + " from " + options_.peer, {}};
        } else {
            ec = make_error_code(errc::protocol_error);
            c.words = options_.peer + " ended a gRPC call without a valid grpc-status";
        }
        if (c.inbox) {
            c.inbox->finish(std::move(got), ec);
            return;
        }
        c.done = true;
        if (ec)
            c.error = ec;
        else
            c.answered = std::move(got);
        finished_.push_back(std::move(keep));
    }

    // The connection went (failure or close()): its calls end with it.
    void down()
    {
        ++generation_;
        sweep_.cancel();
        session_.reset(); // first: its streams' listeners hear nothing more
        std::string why = last_words_.empty() ? "connection to " + options_.peer + " lost" : std::move(last_words_);
        last_words_.clear();
        const auto failure = protocol_failure_ ? errc::protocol_error : errc::outcome_unknown;
        protocol_failure_ = false;
        auto streams = std::move(streams_);
        streams_.clear();
        for (auto& [id, c] : streams) {
            if (c->abandoned)
                continue;
            if (c->inbox) {
                c->inbox->finish(std::nullopt, make_error_code(failure));
                continue;
            }
            c->done = true;
            c->error = make_error_code(failure);
            c->words = why;
            deliver(*c, false);
        }
        auto ended = std::move(finished_); // answered before the failure: their answers stand
        finished_.clear();
        for (auto& c : ended)
            deliver(*c, false);
    }

    void abandon(const std::shared_ptr<call>& c)
    {
        if (c->done)
            return;
        c->abandoned = true;
        c->done = true;
        c->error = make_error_code(c->submitted ? errc::outcome_unknown : errc::cancelled);
        deliver(*c, false);
        if (c->submitted && session_) {
            session_->cancel(c->stream);
            settle(false);
        }
    }

    void deliver(call& c, bool here)
    {
        if (!c.caller)
            return;
        if (c.error)
            c.caller.resume(outcome{c.error, std::move(c.words)}, here ? &inner_ : nullptr);
        else
            c.caller.resume(outcome{std::move(c.answered).value_or(answer{}), std::string{}}, here ? &inner_ : nullptr);
    }

    // Drops the connection when a unary call is past its deadline.
    static awaitable<void> sweeper(std::shared_ptr<basic_channel> self, std::uint64_t generation)
    {
        co_await asio::this_coro::throw_if_cancelled(false);
        const auto tick = std::clamp<duration>(self->options_.request_timeout / 10, std::chrono::milliseconds{10},
                                               std::chrono::milliseconds{250});
        while (self->generation_ == generation) {
            self->sweep_.expires_after(tick);
            (void)co_await self->sweep_.async_wait(distlock::backend::as_tuple_awaitable<Stream>());
            if (self->generation_ != generation)
                co_return;
            const auto now = clock::now();
            const bool late = std::any_of(self->streams_.begin(), self->streams_.end(), [now](const auto& s) {
                return !s.second->done && s.second->deadline <= now;
            });
            if (late) {
                self->last_words_ = "no reply from " + self->options_.peer + " within the request timeout";
                self->engine_->close();
                co_return;
            }
        }
    }

    // The io_context shuts down: waiting callers go without being resumed.
    void drop_waiting_callers() noexcept override
    {
        auto keep = this->shared_from_this();
        session_.reset();
        auto streams = std::move(streams_);
        auto ended = std::move(finished_);
        for (auto& [id, c] : streams)
            c->caller = completion{};
        for (auto& c : ended)
            c->caller = completion{};
    }

    asio::any_io_executor strand_;
    asio::any_io_executor inner_;
    options options_;
    std::shared_ptr<engine_type> engine_;
    std::unique_ptr<http2::client_session> session_; // the connection's, made by its handshake
    std::unordered_map<std::int32_t, std::shared_ptr<call>> streams_;
    std::vector<std::shared_ptr<call>> finished_; // answered, handed over after the read
    std::uint64_t generation_ = 0;
    std::string last_words_; // why the connection is being dropped
    bool protocol_failure_ = false;
    bool registered_ = false;
    timer sweep_;
};

using channel = basic_channel<>;

} // namespace distlock::grpc
