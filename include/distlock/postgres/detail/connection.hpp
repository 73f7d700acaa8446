// distlock/postgres/detail/connection.hpp: one libpq connection on Asio, in pipeline
// mode, shared by many coroutines.
//
// Design note. libpq owns the protocol and the socket; this class owns the waiting.
// Connecting is PQconnectStartParams + PQconnectPoll, each step waiting for the socket
// libpq names (it may change between steps) through an Asio descriptor that is
// released, never closed: the socket is libpq's. Once connected the connection enters
// pipeline mode and every request (one or more statements, then a Sync, so that each
// request is its own implicit transaction and an error aborts only its own
// statements) is sent at once from the strand: many coroutines' requests are on the
// wire together and the server answers them in order. One reader waits for the socket
// to be readable, feeds libpq (PQconsumeInput) and hands each result to the oldest
// request in flight; NOTIFY messages go to the notification handler. Statements with a
// name are prepared once per connection (the Parse travels in the same pipeline).
//
// exec() is an asynchronous operation, as the transport engine's is: the request
// keeps the caller's completion handler (backend/waiting_caller.hpp) and is sent from
// the strand, reached by dispatch. After each read the reader resumes the callers it
// answered, one after another, and then flushes the requests they sent meanwhile in
// one write: a sequential caller's next statement leaves before the reader waits
// again, with no trip through the scheduler in between.
//
// Failure and cancellation follow the transport engine (transport/engine.hpp): a
// request without its reply within its timeout drops the connection; when the
// connection fails, requests that were sent complete with errc::outcome_unknown (or
// the SQLSTATE the server gave, such as 57P01 when the backend was terminated), and
// the next request connects again; a caller that stops waiting abandons its request,
// whose results are read and dropped when they come (one not sent yet, waiting for
// the connection, is dropped: errc::cancelled). Everything runs on one strand;
// `generation_` tells the reader of a closed connection to touch nothing of its
// successor.
#pragma once

#include <distlock/clock.hpp>
#include <distlock/backend/cut_off.hpp>
#include <distlock/backend/deferred.hpp>
#include <distlock/backend/on_strand.hpp>
#include <distlock/backend/strand.hpp>
#include <distlock/backend/waiting_caller.hpp>
#include <distlock/diagnostics.hpp>
#include <distlock/error.hpp>
#include <distlock/postgres/detail/answers.hpp>
#include <distlock/postgres/error.hpp>
#include <distlock/result.hpp>

#include <libpq-fe.h>

#include <asio/associated_cancellation_slot.hpp>
#include <asio/async_result.hpp>
#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/dispatch.hpp>
#include <asio/posix/stream_descriptor.hpp>
#include <asio/strand.hpp>
#include <asio/use_awaitable.hpp>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace distlock::postgres::detail {

struct result_deleter {
    void operator()(PGresult* r) const noexcept { PQclear(r); }
};

/// One statement's result (rows, or the command's tag).
class rows {
public:
    rows() = default;
    explicit rows(PGresult* r) : r_{r} {}

    int count() const noexcept { return r_ ? PQntuples(r_.get()) : 0; }
    int columns() const noexcept { return r_ ? PQnfields(r_.get()) : 0; }
    bool null(int row, int col) const noexcept
    {
        return !r_ || row >= count() || col >= columns() || PQgetisnull(r_.get(), row, col);
    }
    /// A value in text format (empty when null).
    std::string_view text(int row, int col) const noexcept
    {
        if (null(row, col))
            return {};
        return {PQgetvalue(r_.get(), row, col), static_cast<std::size_t>(PQgetlength(r_.get(), row, col))};
    }
    /// A bigint or boolean column, nullopt when null or not a number.
    std::optional<std::int64_t> integer(int row, int col) const noexcept
    {
        const auto t = text(row, col);
        if (t.empty())
            return std::nullopt;
        if (t == "t")
            return 1;
        if (t == "f")
            return 0;
        std::int64_t v = 0;
        const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
        if (ec != std::errc{} || end != t.data() + t.size())
            return std::nullopt;
        return v;
    }
    /// Rows changed by an INSERT/UPDATE/DELETE.
    std::uint64_t affected() const noexcept
    {
        if (!r_)
            return 0;
        const char* n = PQcmdTuples(r_.get());
        std::uint64_t v = 0;
        std::from_chars(n, n + std::char_traits<char>::length(n), v);
        return v;
    }

private:
    std::unique_ptr<PGresult, result_deleter> r_;
};

/// A statement parameter: text, bytes (sent in binary: bytea without escaping), or NULL.
struct param {
    std::string value;
    bool binary = false;
    bool null = false;

    static param text(std::string v) { return {std::move(v), false, false}; }
    static param bytes(std::string_view v) { return {std::string{v}, true, false}; }
    static param number(std::int64_t v) { return {std::to_string(v), false, false}; }
    static param none() { return {std::string{}, false, true}; }
};

/// One statement: SQL with $1... placeholders (never user strings), its parameters,
/// and a name under which it is prepared once per connection ("" sends the text each
/// time). distlock's own names are at most 15 characters, so that copying one per
/// request allocates nothing (the string keeps it in its own buffer).
struct statement {
    std::string name;
    std::string sql;
    std::vector<param> params;
};

using replies = std::vector<rows>;

// A template only to be compiled where it is used (backend/store_shell.hpp says why).
template <class Unused = void>
class basic_connection : public std::enable_shared_from_this<basic_connection<Unused>>,
                         private distlock::backend::holds_waiting_callers {
public:
    /// A strand, as distlock::backend::make_strand() makes.
    using strand_type = asio::any_io_executor;

    struct options {
        /// libpq keywords and values, in order (a later one overrides an earlier one;
        /// the user's conninfo goes last as "dbname", which libpq expands).
        std::vector<std::pair<std::string, std::string>> params;
        /// Run once after connecting, before any request (session settings).
        std::vector<statement> setup;
        duration connect_timeout = std::chrono::seconds{5};
        duration request_timeout = std::chrono::seconds{6};
        std::string peer = "PostgreSQL";
    };

    basic_connection(strand_type strand, options opts) : strand_{std::move(strand)}, inner_{distlock::backend::inner_executor(strand_)}, options_{std::move(opts)} {}
    ~basic_connection() { finish(); }
    basic_connection(const basic_connection&) = delete;
    basic_connection& operator=(const basic_connection&) = delete;

    /// Sends `statements` as one request (one implicit transaction) and returns one
    /// result per statement. A statement the server failed is the error of its
    /// SQLSTATE (postgres::category()), with the server's words in `diag`; `timeout`
    /// (zero: the connection's) bounds the wait for the reply.
    awaitable<result<replies>> exec(std::vector<statement> statements, diagnostics* diag = nullptr,
                                    duration timeout = duration::zero())
    {
        auto req = std::make_shared<request>();
        req->statements = std::move(statements);
        req->timeout = timeout;
        return exec_request(starter{this->shared_from_this(), std::move(req)}, diag);
    }

    /// Connects (when not connected) without sending anything.
    awaitable<std::error_code> connect(diagnostics* diag = nullptr)
    {
        auto self = this->shared_from_this();
        auto [ec, words] = co_await distlock::backend::on_strand(
            self->strand_,
            [](std::shared_ptr<basic_connection> self) -> awaitable<std::pair<std::error_code, std::string>> {
                std::string words;
                auto ec = co_await self->ensure_connected(words);
                co_return std::pair{ec, std::move(words)};
            }(self));
        if (ec && diag)
            diag->set_client_message(std::move(words));
        co_return ec;
    }

    /// Receives every NOTIFY (channel, payload); set on the strand before connecting.
    void on_notify(std::function<void(std::string_view, std::string_view)> h) { on_notify_ = std::move(h); }
    /// Told (on the strand) when a ready connection goes away, with why.
    void on_down(std::function<void(std::error_code, const std::string&)> h) { on_down_ = std::move(h); }

    /// Closes the connection; requests in flight fail as described above.
    void close()
    {
        asio::dispatch(strand_, [self = this->shared_from_this()] {
            self->fail(make_error_code(errc::outcome_unknown),
                       "connection to " + self->options_.peer + " closed by the client");
        });
    }

    bool ready() const noexcept { return state_ == state::ready; }
    /// Requests in flight or waiting for the connection (read from any thread).
    std::size_t load() const noexcept { return load_.load(std::memory_order_relaxed); }
    /// Counts connections made (on the strand), so that a caller can tell a new one.
    std::uint64_t generation() const noexcept { return generation_; }
    /// The server process of the current connection (0 when not connected).
    int backend_pid() const noexcept { return conn_ ? PQbackendPID(conn_) : 0; }
    const strand_type& strand() const noexcept { return strand_; }

private:
    using outcome = std::pair<result<replies>, std::string>;
    using completion = distlock::backend::waiting_caller<outcome>;

    struct request {
        std::vector<statement> statements;
        std::size_t items = 0;   // results expected before the Sync (prepares included)
        std::size_t current = 0; // the item whose results come now
        std::vector<int> slot;   // item -> statement index, -1 for a Prepare
        replies results;
        std::error_code error;
        std::string words;
        duration timeout = duration::zero(); // zero: the connection's request timeout
        // When the reply is late: the connection is dropped then (the sweeper checks).
        time_point deadline = time_point::max();
        bool sent = false;
        bool done = false;
        bool abandoned = false;
        bool counted = false; // in load_ until its caller is handed the outcome
        completion caller;
    };

    enum class state { idle, connecting, ready };

    using starter = distlock::backend::start_request<basic_connection, request>;
    friend starter;

    // One coroutine frame per request (the starter owns the connection and the request).
    static awaitable<result<replies>> exec_request(starter start, diagnostics* diag)
    {
        auto [r, words] = co_await asio::async_initiate<const asio::use_awaitable_t<>&, void(outcome)>(
            std::move(start), asio::use_awaitable);
        if (!r && diag) {
            if (r.error().category() == category())
                diag->set_server_message(std::move(words));
            else
                diag->set_client_message(std::move(words));
        }
        co_return std::move(r);
    }

    // On the strand: sends the request, connecting first when there is no connection.
    void begin(std::shared_ptr<request> req)
    {
        if (req->done) // abandoned before it reached the strand
            return;
        // Counted from here (not when exec() is called: an operation never awaited
        // never gets here) until its caller is handed the outcome.
        req->counted = true;
        load_.fetch_add(1, std::memory_order_relaxed);
        if (!registered_) {
            registered_ = true;
            distlock::backend::hold_until_shutdown(strand_, {this->shared_from_this(), this});
        }
        if (state_ == state::ready) {
            start(std::move(req));
            return;
        }
        asio::co_spawn(strand_, connect_then_start(this->shared_from_this(), std::move(req)), asio::detached);
    }

    static awaitable<void> connect_then_start(std::shared_ptr<basic_connection> self, std::shared_ptr<request> req)
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
        self->start(std::move(req));
    }

    // Puts the request in libpq's output buffer and in flight, and flushes (unless the
    // reader is resuming callers: it flushes what they all sent, once, after them).
    void start(std::shared_ptr<request> req)
    {
        if (auto why = send(*req); !why.empty()) {
            fail(make_error_code(errc::outcome_unknown), why);
            req->error = make_error_code(errc::outcome_unknown);
            req->words = std::move(why);
            req->done = true;
            deliver(*req, false);
            return;
        }
        req->sent = true;
        req->deadline = clock::now() + (req->timeout > duration::zero() ? req->timeout : options_.request_timeout);
        in_flight_.push_back(std::move(req));
        if (!delivering_)
            flush();
    }

    // The caller stopped waiting. A request sent keeps its place in flight, so that its
    // results are read (and dropped) in order; one still waiting for the connection is
    // dropped when the connection comes.
    void abandon(const std::shared_ptr<request>& req)
    {
        if (req->done)
            return;
        req->abandoned = true;
        req->done = true;
        req->error = make_error_code(req->sent ? errc::outcome_unknown : errc::cancelled);
        deliver(*req, false);
    }

    // Hands a finished request's outcome to its caller. `here`: the caller may resume
    // at once, nested in the current handler; only the reader asks for it, between two
    // reads. Everywhere else (always in the call that started the request) the caller
    // is queued on its executor.
    void deliver(request& r, bool here)
    {
        if (r.counted) {
            r.counted = false;
            load_.fetch_sub(1, std::memory_order_relaxed);
        }
        if (r.caller)
            r.caller.resume_with(r.error, r.words, r.results, here ? &inner_ : nullptr);
    }

    awaitable<std::error_code> ensure_connected(std::string& words)
    {
        while (state_ == state::connecting) {
            timer t{strand_, time_point::max()};
            connect_waiters_.push_back(&t);
            (void)co_await t.async_wait(distlock::backend::as_tuple_awaitable<Unused>());
            std::erase(connect_waiters_, &t);
        }
        if (state_ == state::ready)
            co_return std::error_code{};
        state_ = state::connecting;
        const auto generation = ++generation_;
        auto ec = co_await open(generation, words);
        if (!ec && generation_ != generation) {
            words = "connection to " + options_.peer + " closed while connecting";
            ec = make_error_code(errc::store_unavailable);
        }
        if (ec) {
            // Whatever was sent meanwhile (the setup, requests that came after it)
            // fails with the connection; the reader of this attempt exits.
            ++generation_;
            state_ = state::idle;
            flushing_ = false;
            finish();
            auto failing = std::move(in_flight_);
            in_flight_.clear();
            for (auto& r : failing)
                if (!r->done) {
                    r->error = make_error_code(errc::outcome_unknown);
                    r->words = words;
                    r->done = true;
                    deliver(*r, false);
                }
            wake_connect_waiters();
            co_return ec;
        }
        wake_connect_waiters();
        co_return std::error_code{};
    }

    // PQconnectStartParams and PQconnectPoll until connected, within the connect
    // timeout; then pipeline mode, the reader, and the setup statements.
    awaitable<std::error_code> open(std::uint64_t generation, std::string& words)
    {
        std::vector<const char*> keys, values;
        for (const auto& [k, v] : options_.params) {
            keys.push_back(k.c_str());
            values.push_back(v.c_str());
        }
        keys.push_back(nullptr);
        values.push_back(nullptr);
        conn_ = PQconnectStartParams(keys.data(), values.data(), 1);
        if (!conn_) {
            words = "libpq could not allocate a connection";
            co_return make_error_code(errc::store_unavailable);
        }
        PQsetNoticeReceiver(conn_, &basic_connection::notice, this);
        // Verbose while connecting: the server's refusal then carries its SQLSTATE,
        // which tells refused credentials (not retried) from a server that is down.
        PQsetErrorVerbosity(conn_, PQERRORS_VERBOSE);
        const auto deadline = clock::now() + options_.connect_timeout;
        auto polled = PGRES_POLLING_WRITING;
        while (polled != PGRES_POLLING_OK) {
            if (PQstatus(conn_) == CONNECTION_BAD || polled == PGRES_POLLING_FAILED) {
                words = "cannot connect to " + options_.peer + ": " + without_location(error_message());
                co_return answers::connect_refusal(words);
            }
            const int fd = PQsocket(conn_);
            if (fd < 0) {
                words = "cannot connect to " + options_.peer + ": no socket";
                co_return make_error_code(errc::store_unavailable);
            }
            const auto ready = co_await wait_socket(fd, polled == PGRES_POLLING_READING, deadline);
            if (generation_ != generation)
                co_return make_error_code(errc::store_unavailable);
            if (!ready) {
                words = "connecting to " + options_.peer + " timed out";
                co_return make_error_code(errc::store_unavailable);
            }
            polled = PQconnectPoll(conn_);
        }
        PQsetErrorVerbosity(conn_, PQERRORS_DEFAULT);
        if (PQsetnonblocking(conn_, 1) != 0 || PQenterPipelineMode(conn_) != 1) {
            words = "cannot enter pipeline mode on " + options_.peer + ": " + error_message();
            co_return make_error_code(errc::store_unavailable);
        }
        socket_.emplace(strand_, PQsocket(conn_));
        prepared_.clear();
        asio::co_spawn(strand_, reader(this->shared_from_this(), generation), asio::detached);
        asio::co_spawn(strand_, sweeper(this->shared_from_this(), generation), asio::detached);
        // The setup runs while the state is still `connecting`: requests wait behind it,
        // and a failure meanwhile (the sweeper's timeout, a lost connection) fails only
        // this attempt, which ensure_connected() cleans up.
        if (!options_.setup.empty()) {
            auto req = std::make_shared<request>();
            req->statements = options_.setup;
            req->timeout = std::max<duration>(deadline - clock::now(), duration::zero()) + std::chrono::seconds{1};
            // Named, not a temporary of the co_await expression (g++ 12 destroys those twice).
            auto send_setup = [this, req](auto handler) mutable {
                req->caller = completion{std::move(handler)};
                start(std::move(req));
            };
            auto [r, why] = co_await asio::async_initiate<const asio::use_awaitable_t<>&, void(outcome)>(
                std::move(send_setup), asio::use_awaitable);
            if (!r) {
                words = "session setup on " + options_.peer + " failed: " + why;
                co_return r.error().category() == category() ? r.error() : make_error_code(errc::store_unavailable);
            }
            if (generation_ != generation)
                co_return make_error_code(errc::store_unavailable);
        }
        state_ = state::ready;
        co_return std::error_code{};
    }

    // Waits until `fd` is readable (or writable), false at the deadline.
    awaitable<bool> wait_socket(int fd, bool readable, time_point deadline)
    {
        asio::posix::stream_descriptor d{strand_, fd};
        connect_wait_ = &d; // close() ends the wait at once
        struct forget {
            asio::posix::stream_descriptor*& d;
            ~forget() { d = nullptr; }
        } forget_{connect_wait_};
        const auto which = readable ? asio::posix::stream_descriptor::wait_read : asio::posix::stream_descriptor::wait_write;
        const auto ready =
            co_await distlock::backend::within(d.async_wait(which, distlock::backend::as_tuple_awaitable<Unused>()), deadline);
        d.release(); // libpq's socket: never closed here
        co_return ready.has_value();
    }

    // Queues the request's statements and its Sync in libpq's output buffer; the
    // words of a failure (the connection is then unusable).
    std::string send(request& req)
    {
        req.results.resize(req.statements.size());
        req.slot.reserve(2 * req.statements.size());
        for (std::size_t i = 0; i < req.statements.size(); ++i) {
            const auto& s = req.statements[i];
            // Kept between requests for their capacity: no allocation per statement.
            auto& values = scratch_values_;
            auto& lengths = scratch_lengths_;
            auto& formats = scratch_formats_;
            values.clear();
            lengths.clear();
            formats.clear();
            for (const auto& p : s.params) {
                values.push_back(p.null ? nullptr : p.value.data());
                lengths.push_back(static_cast<int>(p.value.size()));
                formats.push_back(p.binary ? 1 : 0);
            }
            const int n = static_cast<int>(s.params.size());
            int sent = 0;
            if (s.name.empty()) {
                sent = PQsendQueryParams(conn_, s.sql.c_str(), n, nullptr, values.data(), lengths.data(),
                                         formats.data(), 0);
            } else {
                if (prepared_.insert(s.name).second) {
                    if (!PQsendPrepare(conn_, s.name.c_str(), s.sql.c_str(), n, nullptr))
                        return "cannot send to " + options_.peer + ": " + error_message();
                    req.slot.push_back(-1);
                    ++req.items;
                }
                sent = PQsendQueryPrepared(conn_, s.name.c_str(), n, values.data(), lengths.data(), formats.data(), 0);
            }
            if (!sent)
                return "cannot send to " + options_.peer + ": " + error_message();
            req.slot.push_back(static_cast<int>(i));
            ++req.items;
        }
        if (!PQpipelineSync(conn_))
            return "cannot send to " + options_.peer + ": " + error_message();
        return {};
    }

    // Hands libpq's buffered output to the socket; waits for writability when the
    // socket is full.
    void flush()
    {
        if (flushing_ || !conn_)
            return;
        const int r = PQflush(conn_);
        if (r < 0) {
            fail(make_error_code(errc::outcome_unknown), "write to " + options_.peer + " failed: " + error_message());
            return;
        }
        if (r == 1) {
            flushing_ = true;
            asio::co_spawn(strand_, writer(this->shared_from_this(), generation_), asio::detached);
        }
    }

    static awaitable<void> writer(std::shared_ptr<basic_connection> self, std::uint64_t generation)
    {
        for (;;) {
            auto [ec] = co_await self->socket_->async_wait(asio::posix::stream_descriptor::wait_write,
                                                           distlock::backend::as_tuple_awaitable<Unused>());
            if (self->generation_ != generation)
                co_return;
            if (ec) {
                self->flushing_ = false;
                self->fail(make_error_code(errc::outcome_unknown), "connection to " + self->options_.peer + " lost");
                co_return;
            }
            const int r = PQflush(self->conn_);
            if (r == 0) {
                self->flushing_ = false;
                co_return;
            }
            if (r < 0) {
                self->flushing_ = false;
                self->fail(make_error_code(errc::outcome_unknown),
                           "write to " + self->options_.peer + " failed: " + self->error_message());
                co_return;
            }
        }
    }

    // Drops the connection when a request in flight is past its deadline: a server
    // that stops answering would otherwise hold every request behind it. One timer per
    // connection, not one per request (arming a timer costs a system call each time).
    static awaitable<void> sweeper(std::shared_ptr<basic_connection> self, std::uint64_t generation)
    {
        const auto tick = std::clamp<duration>(self->options_.request_timeout / 10, std::chrono::milliseconds{10},
                                               std::chrono::milliseconds{250});
        timer t{self->strand_};
        for (;;) {
            t.expires_after(tick);
            (void)co_await t.async_wait(distlock::backend::as_tuple_awaitable<Unused>());
            if (self->generation_ != generation)
                co_return;
            const auto now = clock::now();
            for (const auto& r : self->in_flight_)
                if (!r->done && r->deadline <= now) {
                    self->fail(make_error_code(errc::outcome_unknown),
                               "no reply from " + self->options_.peer + " within the request timeout");
                    co_return;
                }
        }
    }

    static awaitable<void> reader(std::shared_ptr<basic_connection> self, std::uint64_t generation)
    {
        std::vector<std::shared_ptr<request>> answered;
        for (;;) {
            auto [ec] = co_await self->socket_->async_wait(asio::posix::stream_descriptor::wait_read,
                                                           distlock::backend::as_tuple_awaitable<Unused>());
            if (self->generation_ != generation)
                co_return;
            if (ec) {
                self->fail(make_error_code(errc::outcome_unknown), "connection to " + self->options_.peer + " lost");
                co_return;
            }
            const bool lost = !PQconsumeInput(self->conn_) || PQstatus(self->conn_) == CONNECTION_BAD;
            self->drain(); // results that did arrive are delivered, even from a lost connection
            if (self->generation_ != generation) // closed by a NOTIFY handler: fail() handed the answered over
                co_return;
            // libpq also gives up on the connection while parsing what came, after
            // results that did arrive (bytes that are not the protocol: it loses
            // synchronization and closes its socket). A connection lost either way fails
            // before its answered callers resume: resumed first, a caller's next request
            // would go to the dead connection, which libpq refuses, and fail as maybe
            // applied though never sent; after the failure it connects again. The
            // answered get their results first, queued, in order.
            if (lost || PQstatus(self->conn_) == CONNECTION_BAD) {
                answered.swap(self->answered_);
                for (auto& r : answered)
                    self->deliver(*r, false);
                answered.clear();
                self->fail_lost();
                co_return;
            }
            // The callers resume here, one after another, each until it waits again
            // (often with its next request sent). One that closes the connection
            // leaves the others' outcomes, complete already, to be handed over here.
            answered.swap(self->answered_);
            self->delivering_ = !answered.empty();
            for (auto& r : answered)
                self->deliver(*r, true);
            answered.clear();
            self->delivering_ = false;
            if (self->generation_ != generation)
                co_return;
            self->flush();
        }
    }

    // Hands every complete result to its request, and every NOTIFY to its handler.
    void drain()
    {
        const auto generation = generation_;
        while (!in_flight_.empty() && conn_ && !PQisBusy(conn_)) {
            PGresult* r = PQgetResult(conn_);
            auto& req = *in_flight_.front();
            if (!r) { // the end of one item's results
                if (req.current < req.items) {
                    ++req.current;
                    continue;
                }
                break; // nothing more until input comes (or the connection is gone)
            }
            const auto status = PQresultStatus(r);
            if (status == PGRES_PIPELINE_SYNC) {
                PQclear(r);
                auto done = std::move(in_flight_.front());
                in_flight_.pop_front();
                if (!done->abandoned) {
                    done->done = true;
                    answered_.push_back(std::move(done)); // the reader hands it over after this read
                }
                continue;
            }
            if (status == PGRES_FATAL_ERROR || status == PGRES_NONFATAL_ERROR) {
                if (!req.error) {
                    const char* state = PQresultErrorField(r, PG_DIAG_SQLSTATE);
                    req.error = state ? sqlstate(state) : make_error_code(errc::protocol_error);
                    req.words = trimmed(PQresultErrorMessage(r));
                    if (req.current < req.slot.size() && req.slot[req.current] < 0) {
                        // A failed Prepare: prepare it again next time.
                        const auto& s = req.statements[static_cast<std::size_t>(req.slot[req.current + 1])];
                        prepared_.erase(s.name);
                    }
                }
                PQclear(r);
                continue;
            }
            if (status == PGRES_PIPELINE_ABORTED || req.current >= req.slot.size() || req.slot[req.current] < 0) {
                PQclear(r);
                continue;
            }
            req.results[static_cast<std::size_t>(req.slot[req.current])] = rows{r};
        }
        if (generation_ != generation || !conn_)
            return;
        while (PGnotify* n = PQnotifies(conn_)) {
            const std::string channel = n->relname ? n->relname : "";
            const std::string payload = n->extra ? n->extra : "";
            PQfreemem(n);
            if (on_notify_)
                on_notify_(channel, payload);
        }
    }

    // The server closed the connection (terminated backend, shutdown, crash): the
    // FATAL message it sent, if any, is the reason.
    void fail_lost()
    {
        std::string why = "connection to " + options_.peer + " lost";
        std::error_code ec = make_error_code(errc::outcome_unknown);
        if (!last_fatal_state_.empty()) {
            ec = sqlstate(last_fatal_state_);
            why += ": " + last_fatal_words_;
        } else if (auto m = error_message(); !m.empty()) {
            why += ": " + m;
        }
        fail(ec, why);
    }

    void fail(std::error_code ec, const std::string& why)
    {
        ++generation_;
        if (connect_wait_) {
            std::error_code ignored; // cancelling a wait on an open descriptor cannot fail
            connect_wait_->cancel(ignored); // a connect in progress sees the new generation and gives up
        }
        const bool was_ready = state_ == state::ready;
        if (state_ != state::connecting)
            state_ = state::idle;
        flushing_ = false;
        if (state_ != state::connecting)
            finish();
        auto failing = std::move(in_flight_);
        in_flight_.clear();
        for (auto& r : failing)
            if (!r->done) {
                // An error the server already gave this request (a SQLSTATE: 57P01 as
                // its backend was terminated, a statement's own error) says more than
                // the loss; libpq's own words about the failing connection do not.
                if (r->error && r->error.category() == category()) {
                    r->words += "; then " + why;
                } else {
                    r->error = ec;
                    r->words = why;
                }
                r->done = true;
                deliver(*r, false);
            }
        auto answered = std::move(answered_); // answered before the failure: their results stand
        answered_.clear();
        for (auto& r : answered)
            deliver(*r, false);
        if (was_ready && on_down_)
            on_down_(ec, why);
    }

    void finish() noexcept
    {
        if (socket_) {
            std::error_code ignored;
            socket_->cancel(ignored);
            (void)socket_->release();
            socket_.reset();
        }
        if (conn_) {
            PQfinish(conn_);
            conn_ = nullptr;
        }
        last_fatal_state_.clear();
        last_fatal_words_.clear();
    }

    // The io_context shuts down (no handler runs any more): the waiting callers' frames
    // go, without being resumed. Moved out first: the last of them may hold the last
    // reference to this connection.
    void drop_waiting_callers() noexcept override
    {
        auto keep = this->shared_from_this();
        auto in_flight = std::move(in_flight_);
        auto answered = std::move(answered_);
        for (auto& r : in_flight)
            r->caller = completion{};
        for (auto& r : answered)
            r->caller = completion{};
    }

    void wake_connect_waiters()
    {
        for (auto* t : connect_waiters_)
            t->cancel();
    }

    // A verbose message without its "LOCATION:" line (the server's source file).
    static std::string without_location(std::string words)
    {
        if (const auto at = words.find("\nLOCATION:"); at != std::string::npos)
            words.erase(at, words.find('\n', at + 1) == std::string::npos ? std::string::npos
                                                                           : words.find('\n', at + 1) - at);
        return words;
    }
    std::string error_message() const { return conn_ ? trimmed(PQerrorMessage(conn_)) : std::string{}; }

    static std::string trimmed(const char* m)
    {
        std::string s = m ? m : "";
        while (!s.empty() && (s.back() == '\n' || s.back() == ' '))
            s.pop_back();
        return s;
    }

    // libpq's notices: a FATAL error that arrives while no request is in flight (the
    // backend was terminated) is kept as the reason the connection went.
    static void notice(void* arg, const PGresult* r)
    {
        auto* self = static_cast<basic_connection*>(arg);
        const char* severity = PQresultErrorField(r, PG_DIAG_SEVERITY_NONLOCALIZED);
        const char* state = PQresultErrorField(r, PG_DIAG_SQLSTATE);
        if (severity && state && (std::string_view{severity} == "FATAL" || std::string_view{severity} == "PANIC")) {
            self->last_fatal_state_ = state;
            self->last_fatal_words_ = trimmed(PQresultErrorMessage(r));
        }
    }

    strand_type strand_;
    asio::any_io_executor inner_; // the strand's: the reader resumes callers on it at once
    options options_;
    PGconn* conn_ = nullptr;
    std::optional<asio::posix::stream_descriptor> socket_;
    state state_ = state::idle;
    std::uint64_t generation_ = 0;
    bool flushing_ = false;
    asio::posix::stream_descriptor* connect_wait_ = nullptr;
    std::atomic<std::size_t> load_{0};
    std::set<std::string> prepared_;
    std::vector<const char*> scratch_values_; // send()'s
    std::vector<int> scratch_lengths_, scratch_formats_;
    std::deque<std::shared_ptr<request>> in_flight_;
    std::vector<std::shared_ptr<request>> answered_; // answered, handed over by the reader after its read
    bool registered_ = false; // with the io_context's waiting_callers
    bool delivering_ = false; // the reader is resuming the callers it answered
    std::vector<timer*> connect_waiters_;
    std::string last_fatal_state_, last_fatal_words_;
    std::function<void(std::string_view, std::string_view)> on_notify_;
    std::function<void(std::error_code, const std::string&)> on_down_;
};

/// See basic_connection.
using connection = basic_connection<>;

} // namespace distlock::postgres::detail
