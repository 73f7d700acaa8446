// A PostgreSQL server that plays a script instead of a database: enough of the
// frontend/backend protocol (version 3) for libpq, on a loopback port, on a thread of
// its own, so that the PostgreSQL connection (postgres/detail/connection.hpp) can be
// driven step by step, and broken at any step in turn, as the transport engine is
// over its scripted stream (test/transport/scripted_stream.hpp).
//
// What it speaks: the startup packet (an SSLRequest or GSSENCRequest is refused with
// 'N'), AuthenticationOk, ParameterStatus, BackendKeyData, ReadyForQuery; then the
// extended protocol (Parse, Bind, Describe of a statement or a portal, Execute, Sync,
// Flush, Close), the simple one (Query) and Terminate. What an Execute (or a Query)
// returns comes from the test's script: rows under named text columns with a command
// tag, or an ErrorResponse, after which everything up to the next Sync is skipped, as
// a server does. A message the server does not know ends the session with a FATAL
// ErrorResponse (protocol violation).
//
// Steps. Every message the server sends, on any connection, is a step, numbered from
// 0 in the order sent (an 'N' to an SSLRequest counts). The test arms one fault at a
// step: the messages before it are written, and then, instead of that message, the
// server closes the socket; or sends bytes that are not the protocol, in the same
// write as the messages before it (or after the message itself), so that the client
// reads good answers and the bad bytes at once, and then says nothing more; or says
// nothing more (a stall). Having stopped answering, it still reads what comes, and
// notes the requests that reach it, until the client closes. Or it pauses there,
// calls the test back, and goes on when that returns. A fault fires once: the
// connections made after it are served normally.
//
// Replies are written per batch of input, so the connection's pipelining shows in
// the order of steps, and the step count of a run is the same every time for the
// same requests; answer_together() makes the batches themselves the same every time,
// whatever the timing of the requests' arrival. The server notes each Bind's first
// parameter (received()): a test names its requests by it, to tell whether one
// reached the server.
#pragma once

#include <asio/buffer.hpp>
#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/write.hpp>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

namespace test::postgres {

/// A parameter's value as the server received it (bytes; nullopt for NULL).
using value = std::optional<std::string>;

/// What the server answers to one statement's Execute (or a Query).
struct answer {
    std::vector<std::string> columns;         ///< text columns; none: the statement returns no rows
    std::vector<std::vector<value>> rows;     ///< each as many values as columns
    std::string tag;                          ///< CommandComplete's tag; empty: "SELECT <rows>"
    std::string sqlstate;                     ///< not empty: an ErrorResponse instead
    std::string message;                      ///< the ErrorResponse's words
    bool fatal = false;                       ///< a FATAL ErrorResponse, then the session ends

    static answer rows_of(std::vector<std::string> columns, std::vector<std::vector<value>> rows)
    {
        return {std::move(columns), std::move(rows), {}, {}, {}};
    }
    static answer command(std::string tag) { return {{}, {}, std::move(tag), {}, {}}; }
    static answer error(std::string sqlstate, std::string message)
    {
        return {{}, {}, {}, std::move(sqlstate), std::move(message)};
    }
    /// What a terminated backend sends (57P01 from pg_terminate_backend): a FATAL
    /// ErrorResponse, then the socket closes.
    static answer terminated(std::string sqlstate, std::string message)
    {
        return {{}, {}, {}, std::move(sqlstate), std::move(message), true};
    }
    bool failed() const noexcept { return !sqlstate.empty(); }
};

/// The test's script: what a statement's text with these parameters returns. Called on
/// the server's thread (a pure function of its arguments is safe).
using script = std::function<answer(std::string_view sql, const std::vector<value>& params)>;

/// What the server does at the armed step instead of sending its message.
enum class fault {
    close,            ///< closes the socket
    garbage,          ///< sends bytes that are not the protocol instead, then nothing more
    trailing_garbage, ///< sends the message and then bytes that are not the protocol, then nothing more
    stall,            ///< sends nothing more (reads and drops what comes until the client closes)
    pause,            ///< calls the test back (on the server's thread), then sends the message
};

inline const char* name_of(fault f)
{
    switch (f) {
    case fault::close: return "close";
    case fault::garbage: return "garbage";
    case fault::trailing_garbage: return "trailing garbage";
    case fault::stall: return "stall";
    case fault::pause: return "pause";
    }
    return "?";
}

class scripted_server {
public:
    explicit scripted_server(script play) : script_{std::move(play)}
    {
        using asio::ip::tcp;
        acceptor_.emplace(*io_, tcp::endpoint{asio::ip::make_address_v4("127.0.0.1"), 0});
        port_ = acceptor_->local_endpoint().port();
        asio::co_spawn(*io_, accept(), asio::detached);
        thread_ = std::thread{[this] { io_->run(); }};
    }

    ~scripted_server()
    {
        io_->stop();
        thread_.join();
        // The sessions' frames (and their sockets) go with the io_context, before any
        // member they refer to.
        acceptor_.reset();
        io_.reset();
    }

    scripted_server(const scripted_server&) = delete;
    scripted_server& operator=(const scripted_server&) = delete;

    std::uint16_t port() const noexcept { return port_; }

    /// A libpq conninfo for this server: no TLS, no GSSAPI (the server refuses both
    /// anyway), no password (it trusts everyone).
    std::string conninfo() const
    {
        return "host=127.0.0.1 port=" + std::to_string(port_) +
               " user=distlock dbname=distlock sslmode=disable gssencmode=disable";
    }

    /// Arms `what` at step `at` (replacing any fault armed and not fired); `on_pause`
    /// is called for fault::pause with the step, and the server goes on when it returns.
    void inject(fault what, std::size_t at, std::function<void(std::size_t)> on_pause = {})
    {
        const std::lock_guard lock{mutex_};
        armed_ = armed{what, at, std::move(on_pause)};
        fired_ = false;
    }

    /// On the first connection, holds the answers after the first `after` Syncs until
    /// `count` more have come, and sends them in one write: requests the client sends
    /// together are answered together, whatever the timing of their arrival (a fault
    /// among those answers then reaches the client with the answers before it).
    void answer_together(std::size_t after, std::size_t count)
    {
        const std::lock_guard lock{mutex_};
        gather_after_ = after;
        gather_count_ = count;
    }

    /// Messages sent so far (the next step's number), on every connection.
    std::size_t steps() const
    {
        const std::lock_guard lock{mutex_};
        return steps_;
    }
    bool fired() const
    {
        const std::lock_guard lock{mutex_};
        return fired_;
    }
    /// Connections accepted so far, and those still open (from the server's side).
    std::size_t connections() const
    {
        const std::lock_guard lock{mutex_};
        return connections_;
    }
    std::size_t open_sessions() const
    {
        const std::lock_guard lock{mutex_};
        return open_;
    }
    /// Whether any Bind (or Query) reached the server with `v` as its first parameter
    /// (or text): the tests name each request by it, to tell one the server never got.
    bool received(std::string_view v) const
    {
        const std::lock_guard lock{mutex_};
        for (const auto& r : received_)
            if (r == v)
                return true;
        return false;
    }

private:
    using tcp = asio::ip::tcp;
    static constexpr auto tuple = asio::experimental::as_tuple(asio::use_awaitable);

    struct armed {
        fault what;
        std::size_t at;
        std::function<void(std::size_t)> on_pause;
    };

    // What a Bind made: the statement's answer, computed once, for Describe and Execute.
    struct portal {
        answer result;
    };

    struct prepared {
        std::string sql;
        std::size_t param_count = 0;
    };

    class session;

    asio::awaitable<void> accept()
    {
        for (;;) {
            auto [ec, socket] = co_await acceptor_->async_accept(tuple);
            if (ec)
                co_return;
            bool first = false;
            {
                const std::lock_guard lock{mutex_};
                first = ++connections_ == 1;
                ++open_;
            }
            asio::co_spawn(*io_, serve(std::move(socket), first), asio::detached);
        }
    }

    asio::awaitable<void> serve(tcp::socket socket, bool first);

    // The step the next message is, and what to do there.
    struct decision {
        std::size_t step;
        std::optional<fault> what;
        std::function<void(std::size_t)> on_pause;
    };
    decision next_step()
    {
        const std::lock_guard lock{mutex_};
        decision d{steps_++, std::nullopt, {}};
        if (armed_ && armed_->at == d.step) {
            d.what = armed_->what;
            d.on_pause = std::move(armed_->on_pause);
            armed_.reset();
            fired_ = true;
        }
        return d;
    }

    void note_received(std::string v)
    {
        const std::lock_guard lock{mutex_};
        received_.push_back(std::move(v));
    }

    void session_ended()
    {
        const std::lock_guard lock{mutex_};
        --open_;
    }

    script script_;
    std::optional<asio::io_context> io_{std::in_place, 1};
    std::optional<tcp::acceptor> acceptor_;
    std::uint16_t port_ = 0;
    std::thread thread_;
    mutable std::mutex mutex_; // the members below: the test's thread reads them
    std::size_t steps_ = 0;
    std::optional<armed> armed_;
    bool fired_ = false;
    std::size_t connections_ = 0;
    std::size_t open_ = 0;
    std::size_t gather_after_ = 0, gather_count_ = 0;
    std::vector<std::string> received_;
};

// One client connection: reads frontend messages, queues the backend messages that
// answer them, and writes them (with the armed fault) after each batch of input.
class scripted_server::session {
public:
    session(scripted_server& server, tcp::socket socket) : server_{server}, socket_{std::move(socket)} {}

    asio::awaitable<void> run()
    {
        if (!co_await startup())
            co_return;
        for (;;) {
            bool ending = false;
            while (auto m = take_message()) {
                if (m->first == 'S')
                    ++syncs_;
                if (!handle(m->first, m->second)) {
                    ending = true;
                    break;
                }
            }
            if (ending || !holding()) {
                const bool sent = co_await send_queued();
                if (!sent || ending)
                    co_return;
            }
            const bool more = co_await read_more();
            if (!more)
                co_return;
        }
    }

    /// Answers the Syncs after the first `after` ones in one write, once `count` of them
    /// have come (answer_together()).
    void gather(std::size_t after, std::size_t count)
    {
        gather_after_ = after;
        gather_count_ = count;
    }

private:
    // The startup packet (after refusing TLS or GSSAPI encryption, if asked), then the
    // messages of a successful trust authentication.
    asio::awaitable<bool> startup()
    {
        for (;;) {
            while (in_.size() < 4)
                if (!co_await read_more())
                    co_return false;
            const auto length = static_cast<std::size_t>(int32_at(0));
            if (length < 8 || length > 10000)
                co_return false;
            while (in_.size() < length)
                if (!co_await read_more())
                    co_return false;
            const auto code = int32_at(4);
            const std::string body = in_.substr(8, length - 8);
            in_.erase(0, length);
            if (code == 80877103 || code == 80877104) { // SSLRequest, GSSENCRequest: no
                queued_.push_back("N");
                if (!co_await send_queued())
                    co_return false;
                continue;
            }
            if (code != 196608) // protocol 3.0 only (a CancelRequest has nothing to cancel here)
                co_return false;
            break;
        }
        queue('R', int32(0)); // AuthenticationOk
        for (const auto& [name, setting] : {std::pair{"server_version", "15.0"}, std::pair{"client_encoding", "UTF8"},
                                            std::pair{"standard_conforming_strings", "on"},
                                            std::pair{"integer_datetimes", "on"}, std::pair{"DateStyle", "ISO, MDY"}})
            queue('S', cstring(name) + cstring(setting));
        queue('K', int32(4242) + int32(0x5eed)); // BackendKeyData
        queue('Z', "I");
        co_return co_await send_queued();
    }

    bool holding() const noexcept { return syncs_ > gather_after_ && syncs_ < gather_after_ + gather_count_; }

    // One message of the extended or simple protocol; false when the session ends.
    bool handle(char type, std::string_view body)
    {
        if (type == 'X') // Terminate
            return false;
        if (type == 'B') // noted even when skipped: it reached the server
            note_bind(body);
        if (type == 'S') { // Sync: the end of an implicit transaction, failed or not
            skipping_ = false;
            queue('Z', "I");
            return true;
        }
        if (skipping_) // after an error, up to the Sync
            return true;
        switch (type) {
        case 'P': { // Parse: name, text, parameter types
            std::string_view rest = body;
            const auto name = take_cstring(rest);
            const auto sql = take_cstring(rest);
            prepared p{std::string{sql}, 0};
            if (rest.size() >= 2)
                p.param_count = static_cast<std::size_t>(int16_of(rest));
            statements_[std::string{name}] = std::move(p);
            queue('1', {});
            return true;
        }
        case 'B': { // Bind: portal, statement, parameter formats, values, result formats
            std::string_view rest = body;
            const auto portal_name = take_cstring(rest);
            const auto statement_name = take_cstring(rest);
            const auto formats = int16_of(rest);
            rest.remove_prefix(std::min(rest.size(), static_cast<std::size_t>(2 * std::max(0, formats))));
            const auto count = int16_of(rest);
            std::vector<value> params;
            for (int i = 0; i < count && rest.size() >= 4; ++i) {
                const auto length = int32_of(rest);
                if (length < 0) {
                    params.emplace_back(std::nullopt);
                    continue;
                }
                const auto n = std::min(rest.size(), static_cast<std::size_t>(length));
                params.emplace_back(std::string{rest.substr(0, n)});
                rest.remove_prefix(n);
            }
            const auto found = statements_.find(std::string{statement_name});
            if (found == statements_.end())
                return fail("26000", "prepared statement \"" + std::string{statement_name} + "\" does not exist");
            portals_[std::string{portal_name}] = portal{server_.script_(found->second.sql, params)};
            queue('2', {});
            return true;
        }
        case 'D': { // Describe a statement ('S') or a portal ('P')
            std::string_view rest = body;
            const char what = rest.empty() ? '?' : rest.front();
            rest.remove_prefix(std::min<std::size_t>(1, rest.size()));
            const std::string name{take_cstring(rest)};
            if (what == 'S') {
                const auto found = statements_.find(name);
                if (found == statements_.end())
                    return fail("26000", "prepared statement \"" + name + "\" does not exist");
                std::string types = int16(static_cast<int>(found->second.param_count));
                for (std::size_t i = 0; i < found->second.param_count; ++i)
                    types += int32(25); // text
                queue('t', types);
                // The columns, as the script would answer with every parameter NULL.
                describe(server_.script_(found->second.sql,
                                         std::vector<value>(found->second.param_count, std::nullopt)));
                return true;
            }
            const auto found = portals_.find(name);
            if (found == portals_.end())
                return fail("34000", "portal \"" + name + "\" does not exist");
            describe(found->second.result);
            return true;
        }
        case 'E': { // Execute a portal (all its rows)
            std::string_view rest = body;
            const std::string name{take_cstring(rest)};
            const auto found = portals_.find(name);
            if (found == portals_.end())
                return fail("34000", "portal \"" + name + "\" does not exist");
            const auto result = found->second.result;
            if (name.empty()) // the unnamed portal lasts until the next Bind; dropped here for simplicity
                portals_.erase(found);
            if (result.fatal) { // the backend ends here: what is queued goes, then the close
                queue('E', error_fields("FATAL", result.sqlstate, result.message));
                return false;
            }
            execute(result);
            return true;
        }
        case 'Q': { // a simple query: one statement, no parameters, then ReadyForQuery
            std::string_view rest = body;
            const auto sql = take_cstring(rest);
            server_.note_received(std::string{sql});
            if (sql.empty()) {
                queue('I', {}); // EmptyQueryResponse
            } else {
                const auto result = server_.script_(sql, {});
                if (!result.failed())
                    describe(result);
                execute(result);
            }
            skipping_ = false;
            queue('Z', "I");
            return true;
        }
        case 'C': { // Close a statement or a portal
            std::string_view rest = body;
            const char what = rest.empty() ? '?' : rest.front();
            rest.remove_prefix(std::min<std::size_t>(1, rest.size()));
            const std::string name{take_cstring(rest)};
            if (what == 'S')
                statements_.erase(name);
            else
                portals_.erase(name);
            queue('3', {}); // CloseComplete
            return true;
        }
        case 'H': // Flush: everything queued goes after this batch anyway
            return true;
        default:
            queue('E', error_fields("FATAL", "08P01", std::string{"unexpected message type '"} + type + "'"));
            return false;
        }
    }

    void describe(const answer& result)
    {
        if (result.columns.empty()) {
            queue('n', {}); // NoData
            return;
        }
        std::string fields = int16(static_cast<int>(result.columns.size()));
        for (const auto& c : result.columns)
            fields += cstring(c) + int32(0) + int16(0) + int32(25) + int16(-1) + int32(-1) + int16(0); // text
        queue('T', fields);
    }

    void execute(const answer& result)
    {
        if (result.failed()) {
            (void)fail(result.sqlstate, result.message);
            return;
        }
        for (const auto& row : result.rows) {
            std::string values = int16(static_cast<int>(row.size()));
            for (const auto& v : row)
                values += v ? int32(static_cast<std::int32_t>(v->size())) + *v : int32(-1);
            queue('D', values);
        }
        queue('C', cstring(result.tag.empty() ? "SELECT " + std::to_string(result.rows.size()) : result.tag));
    }

    // An ERROR: the rest of the implicit transaction is skipped up to its Sync.
    bool fail(const std::string& sqlstate, const std::string& message)
    {
        queue('E', error_fields("ERROR", sqlstate, message));
        skipping_ = true;
        return true;
    }

    static std::string error_fields(const std::string& severity, const std::string& sqlstate,
                                    const std::string& message)
    {
        return "S" + cstring(severity) + "V" + cstring(severity) + "C" + cstring(sqlstate) + "M" + cstring(message) +
               std::string(1, '\0');
    }

    // Writes the queued messages, one step each, and acts on the armed fault; false
    // when the session is over (closed, or it stopped answering until the client went).
    asio::awaitable<bool> send_queued()
    {
        std::string out;
        auto queued = std::move(queued_);
        queued_.clear();
        for (auto& message : queued) {
            auto step = server_.next_step();
            if (!step.what) {
                out += message;
                continue;
            }
            if (*step.what == fault::garbage || *step.what == fault::trailing_garbage) {
                // In the same write as the good messages before it, so that the client
                // reads them together: a type byte no server sends and a negative
                // length, which libpq cannot frame.
                if (*step.what == fault::trailing_garbage)
                    out += message;
                out.append(16, '\xff');
                const bool written = co_await write(out);
                if (written)
                    co_await drain_until_closed();
                co_return false;
            }
            const bool written = co_await write(out);
            if (!written)
                co_return false;
            out.clear();
            if (*step.what == fault::close) {
                std::error_code ignored;
                socket_.shutdown(tcp::socket::shutdown_both, ignored);
                socket_.close(ignored);
                co_return false;
            }
            if (*step.what == fault::stall) {
                co_await drain_until_closed();
                co_return false;
            }
            // fault::pause: the messages before it are on their way; the test acts, then
            // this one follows.
            if (step.on_pause)
                step.on_pause(step.step);
            out += message;
        }
        co_return co_await write(out);
    }

    asio::awaitable<bool> write(const std::string& bytes)
    {
        if (bytes.empty())
            co_return true;
        auto [ec, n] = co_await asio::async_write(socket_, asio::buffer(bytes), tuple);
        co_return !ec;
    }

    asio::awaitable<bool> read_more()
    {
        char chunk[4096];
        auto [ec, n] = co_await socket_.async_read_some(asio::buffer(chunk), tuple);
        if (ec)
            co_return false;
        in_.append(chunk, n);
        co_return true;
    }

    // A server that stopped answering still takes what the client sends (and notes
    // the requests that reached it).
    asio::awaitable<void> drain_until_closed()
    {
        for (;;) {
            while (auto m = take_message())
                if (m->first == 'B')
                    note_bind(m->second);
            const bool more = co_await read_more();
            if (!more)
                co_return;
        }
    }

    // A Bind's first parameter, for received().
    void note_bind(std::string_view body)
    {
        std::string_view rest = body;
        (void)take_cstring(rest); // portal
        (void)take_cstring(rest); // statement
        const auto formats = int16_of(rest);
        rest.remove_prefix(std::min(rest.size(), static_cast<std::size_t>(2 * std::max(0, formats))));
        const auto count = int16_of(rest);
        std::string first;
        if (count > 0) {
            const auto length = int32_of(rest);
            if (length > 0)
                first = std::string{rest.substr(0, std::min(rest.size(), static_cast<std::size_t>(length)))};
        }
        server_.note_received(std::move(first));
    }

    // The next complete message (type, body), removed from the input.
    std::optional<std::pair<char, std::string>> take_message()
    {
        if (in_.size() < 5)
            return std::nullopt;
        const auto length = int32_at(1);
        if (length < 4) { // not the protocol: the session ends
            in_.clear();
            return std::pair{'\0', std::string{}};
        }
        const auto total = static_cast<std::size_t>(length) + 1;
        if (in_.size() < total)
            return std::nullopt;
        std::pair<char, std::string> m{in_[0], in_.substr(5, total - 5)};
        in_.erase(0, total);
        return m;
    }

    void queue(char type, const std::string& body)
    {
        queued_.push_back(std::string(1, type) + int32(static_cast<std::int32_t>(body.size() + 4)) + body);
    }

    std::int32_t int32_at(std::size_t at) const
    {
        std::uint32_t v = 0;
        for (std::size_t i = 0; i < 4; ++i)
            v = (v << 8) | static_cast<unsigned char>(in_[at + i]);
        return static_cast<std::int32_t>(v);
    }

    static std::string int32(std::int32_t v)
    {
        const auto u = static_cast<std::uint32_t>(v);
        return {static_cast<char>(u >> 24), static_cast<char>(u >> 16), static_cast<char>(u >> 8), static_cast<char>(u)};
    }
    static std::string int16(int v)
    {
        const auto u = static_cast<std::uint16_t>(v);
        return {static_cast<char>(u >> 8), static_cast<char>(u)};
    }
    static std::string cstring(const std::string& s) { return s + '\0'; }

    static std::string_view take_cstring(std::string_view& rest)
    {
        const auto end = rest.find('\0');
        const auto s = rest.substr(0, end);
        rest.remove_prefix(end == std::string_view::npos ? rest.size() : end + 1);
        return s;
    }
    static int int16_of(std::string_view& rest)
    {
        if (rest.size() < 2)
            return 0;
        const auto v = static_cast<std::int16_t>((static_cast<unsigned char>(rest[0]) << 8) |
                                                 static_cast<unsigned char>(rest[1]));
        rest.remove_prefix(2);
        return v;
    }
    static std::int32_t int32_of(std::string_view& rest)
    {
        if (rest.size() < 4)
            return -1;
        std::uint32_t v = 0;
        for (std::size_t i = 0; i < 4; ++i)
            v = (v << 8) | static_cast<unsigned char>(rest[i]);
        rest.remove_prefix(4);
        return static_cast<std::int32_t>(v);
    }

    scripted_server& server_;
    tcp::socket socket_;
    std::string in_;
    std::vector<std::string> queued_;
    std::map<std::string, prepared> statements_;
    std::map<std::string, portal> portals_;
    bool skipping_ = false;
    std::size_t syncs_ = 0; // Syncs received
    std::size_t gather_after_ = 0, gather_count_ = 0;
};

inline asio::awaitable<void> scripted_server::serve(tcp::socket socket, bool first)
{
    // Counted open until the frame ends, however it ends (the client went, a fault).
    struct ended {
        scripted_server& server;
        ~ended() { server.session_ended(); }
    } counted{*this};
    session s{*this, std::move(socket)};
    {
        const std::lock_guard lock{mutex_};
        if (first && gather_count_ > 0)
            s.gather(gather_after_, gather_count_);
    }
    co_await s.run();
}

} // namespace test::postgres
