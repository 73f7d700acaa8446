// The PostgreSQL connection (postgres/detail/connection.hpp) against a scripted
// server (scripted_server.hpp), with a fault injected at every step in turn: the
// discipline of the transport engine's scripted-stream tests (test/transport/engine.cpp)
// for the one connection that cannot run on the engine.
//
// One run: connect (and the setup statement), three requests at once from three
// coroutines (pipelined: one with a prepared statement, one that the server fails),
// one more sent by the first coroutine as it resumes with its answer (from the
// connection's reader, before the reader reads again), and a last one that must
// succeed whatever happened before. Run once without a fault, it counts the server's
// messages: the steps. Then once per step and per fault (close, garbage instead of
// the message, garbage after it, stall), and once per step with the oldest waiting
// caller cancelled there. Each run ends with the connection closed, and must leave
// nothing behind: no caller left waiting, no coroutine or timer running (the
// io_context runs out of work), no socket open at the server, no reference to the
// connection.
#include "postgres/scripted_server.hpp"

// The entry header first: it keeps g++ 12's false positives on the library's
// coroutines to the library (detail/push_warnings.hpp).
#include <distlock/postgres.hpp>

#include <distlock/backend/strand.hpp>
#include <distlock/postgres/detail/connection.hpp>
#include <distlock/postgres/error.hpp>

#include <asio/bind_cancellation_slot.hpp>
#include <asio/cancellation_signal.hpp>
#include <asio/co_spawn.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/io_context.hpp>
#include <asio/post.hpp>
#include <asio/steady_timer.hpp>
#include <asio/use_awaitable.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <exception>
#include <future>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace std::chrono_literals;
namespace dl = distlock;
namespace pgd = distlock::postgres::detail;
using test::postgres::answer;
using test::postgres::fault;
using test::postgres::scripted_server;
using test::postgres::value;

// Short, so that a stalled server costs little; long enough for a loaded machine to
// answer on loopback well within them.
constexpr dl::duration request_timeout = 400ms;
constexpr dl::duration connect_timeout = 500ms;
// A run not over by then has hung (a stall costs at most the setup's timeout: the
// connect timeout and a second).
constexpr auto run_limit = 10s;

constexpr const char* echo_sql = "SELECT $1::text AS echo";
constexpr const char* bump_sql = "UPDATE counters SET n = n + 1 WHERE id = $1";
constexpr const char* conflict_sql = "SELECT conflict($1)";
constexpr const char* setup_sql = "SELECT set_config('statement_timeout', $1, false)";

// The database the server pretends to be.
answer play(std::string_view sql, const std::vector<value>& params)
{
    const value first = params.empty() ? value{} : params.front();
    if (sql == setup_sql)
        return answer::rows_of({"set_config"}, {{first}});
    if (sql == echo_sql)
        return answer::rows_of({"echo"}, {{first}});
    if (sql == bump_sql)
        return answer::command("UPDATE 1");
    if (sql == conflict_sql)
        return answer::error("40001", "could not serialize access due to concurrent update");
    return answer::error("42601", "syntax error");
}

// One request of a run, named by its first parameter (the server notes it).
struct request_plan {
    std::string tag;
    std::vector<pgd::statement> statements;
    std::vector<std::string> echoes; // per statement: the value echoed, or "" for the UPDATE
    std::string sqlstate;            // the server fails it with this
};

pgd::statement echo(std::string v, std::string name = {})
{
    return {std::move(name), echo_sql, {pgd::param::text(std::move(v))}};
}
pgd::statement bump(std::string v) { return {"", bump_sql, {pgd::param::text(std::move(v))}}; }
pgd::statement conflict(std::string v) { return {"", conflict_sql, {pgd::param::text(std::move(v))}}; }

const std::vector<request_plan>& plans()
{
    static const std::vector<request_plan> all{
        {"a", {echo("a")}, {"a"}, {}},
        // Prepared on first use: its Parse travels in the pipeline with the others.
        {"b", {echo("b", "echo_named"), bump("b")}, {"b", ""}, {}},
        // Failed by the server: the statement after it is skipped up to the Sync.
        {"c", {conflict("c"), echo("c-after")}, {}, "40001"},
        // The prepared statement again: no Parse on the same connection, one on a new one.
        {"d", {echo("d", "echo_named")}, {"d"}, {}},
        // After everything: must succeed.
        {"e", {echo("e")}, {"e"}, {}},
    };
    return all;
}

// One exec() of a run.
struct call {
    const request_plan* plan = nullptr;
    std::optional<dl::result<pgd::replies>> got;
    dl::diagnostics diag;
    asio::cancellation_signal* cancel = nullptr; // its coroutine's
    std::size_t issued = 0;                      // the order exec() was called in (0: not yet)
    bool cancelled = false;                      // the test cancelled it
};

bool answered_as_planned(const call& c)
{
    const auto& plan = *c.plan;
    if (!c.got || !*c.got || !plan.sqlstate.empty())
        return false;
    const auto& replies = **c.got;
    if (replies.size() != plan.statements.size())
        return false;
    for (std::size_t i = 0; i < replies.size(); ++i) {
        if (plan.echoes[i].empty()) {
            if (replies[i].affected() != 1)
                return false;
        } else if (replies[i].count() != 1 || replies[i].text(0, 0) != plan.echoes[i]) {
            return false;
        }
    }
    return true;
}

bool failed_as_planned(const call& c)
{
    return c.got && !*c.got && !c.plan->sqlstate.empty() &&
           c.got->error() == dl::postgres::sqlstate(c.plan->sqlstate) &&
           c.diag.server_message().find("could not serialize") != std::string_view::npos;
}

std::string describe(const call& c)
{
    std::ostringstream s;
    s << "request " << c.plan->tag << ": ";
    if (!c.got)
        s << "no outcome";
    else if (*c.got)
        s << "ok, " << (*c.got)->size() << " results";
    else
        s << c.got->error().message() << " (" << c.diag.to_string() << ")";
    if (c.cancelled)
        s << ", cancelled by the test";
    return s.str();
}

// How a run goes.
enum class shape {
    connect_first,   // connect() (with the setup), then the requests
    requests_connect // the first request connects; the others wait for that connection
};

struct run_record {
    std::optional<std::error_code> connected; // connect()'s outcome (connect_first)
    dl::diagnostics connect_diag;
    std::vector<std::unique_ptr<call>> calls; // in the order issued
    std::size_t steps_before_last = 0;        // the server's steps when "e" is issued
    std::size_t downs = 0;
    bool finished = false;
    bool ran_out_of_work = false;
    bool connection_released = false;
    std::size_t load_at_end = 0;
};

class run {
public:
    run(scripted_server& server, shape how) : server_{server}, how_{how} {}

    // Runs the sequence to its end (or the run limit), then closes the connection and
    // lets the io_context run out of work.
    run_record go()
    {
        {
            asio::io_context io{1};
            io_ = &io;
            pgd::connection::options o;
            o.params = {{"connect_timeout", "1"}, {"application_name", "distlock"}, {"dbname", server_.conninfo()}};
            o.setup = {{"", setup_sql, {pgd::param::text("300ms")}}};
            o.connect_timeout = connect_timeout;
            o.request_timeout = request_timeout;
            o.peer = "scripted PostgreSQL";
            auto conn = std::make_shared<pgd::connection>(dl::backend::make_strand(io.get_executor()), std::move(o));
            conn->on_down([this](std::error_code, const std::string&) { ++record_.downs; });
            std::weak_ptr<pgd::connection> left = conn;
            asio::co_spawn(io, sequence(conn), [this](std::exception_ptr e) {
                record_.finished = true;
                error_ = e;
            });
            io.run_for(run_limit);
            record_.ran_out_of_work = io.stopped();
            record_.load_at_end = conn->load();
            if (!record_.ran_out_of_work) { // hung: let what can end, end
                conn->close();
                io.restart();
                io.run_for(2s);
            }
            conn.reset();
            // A reference still held means a frame or a handler kept it: leaked, or
            // still running.
            record_.connection_released = left.expired();
            io_ = nullptr;
        }
        if (error_)
            std::rethrow_exception(error_);
        return std::move(record_);
    }

    /// From the server's thread (fault::pause): cancels the oldest caller still
    /// waiting, on the io_context's thread, and returns when that is done.
    void cancel_oldest_waiting()
    {
        auto done = std::make_shared<std::promise<void>>();
        auto settled = done->get_future();
        asio::io_context& io = *io_;
        asio::post(io, [this, &io, done] {
            call* oldest = nullptr;
            for (auto& c : record_.calls)
                if (c->issued && !c->got && (!oldest || c->issued < oldest->issued))
                    oldest = c.get();
            if (oldest) {
                oldest->cancelled = true;
                oldest->cancel->emit(asio::cancellation_type::terminal);
            }
            // After what the cancellation queued (the abandon, on the strand).
            asio::post(io, [done] { done->set_value(); });
        });
        (void)settled.wait_for(5s);
    }

private:
    asio::awaitable<void> sequence(std::shared_ptr<pgd::connection> conn)
    {
        const auto& p = plans();
        if (how_ == shape::connect_first)
            record_.connected = co_await conn->connect(&record_.connect_diag);
        // Three coroutines at once; the first sends "d" as soon as it has its answer to
        // "a" (resumed by the connection's reader, before the reader reads again).
        // Named, not braced lists in the co_await expressions (g++ 12 mishandles those).
        const std::vector<std::vector<const request_plan*>> at_once{{&p[0], &p[3]}, {&p[1]}, {&p[2]}}, last{{&p[4]}};
        co_await each_in_turn(conn, at_once);
        record_.steps_before_last = server_.steps();
        co_await each_in_turn(conn, last);
        conn->close();
    }

    // One coroutine per chain, all at once, each sending its requests one after another
    // (the next as it resumes with the answer to the one before); returns when all are
    // done.
    asio::awaitable<void> each_in_turn(std::shared_ptr<pgd::connection> conn,
                                       const std::vector<std::vector<const request_plan*>>& chains)
    {
        const auto ex = co_await asio::this_coro::executor;
        auto left = std::make_shared<std::size_t>(chains.size());
        auto wake = std::make_shared<asio::steady_timer>(ex, asio::steady_timer::time_point::max());
        for (const auto& chain : chains) {
            auto& signal = *signals_.emplace_back(std::make_unique<asio::cancellation_signal>());
            std::vector<call*> calls;
            for (const auto* plan : chain) {
                auto& c = *record_.calls.emplace_back(std::make_unique<call>());
                c.plan = plan;
                c.cancel = &signal;
                calls.push_back(&c);
            }
            asio::co_spawn(ex, in_turn(conn, std::move(calls)),
                           asio::bind_cancellation_slot(signal.slot(), [this, left, wake](std::exception_ptr e) {
                               if (e)
                                   error_ = e;
                               --*left;
                               wake->cancel();
                           }));
        }
        while (*left > 0) {
            wake->expires_at(asio::steady_timer::time_point::max());
            (void)co_await wake->async_wait(asio::experimental::as_tuple(asio::use_awaitable));
        }
    }

    asio::awaitable<void> in_turn(std::shared_ptr<pgd::connection> conn, std::vector<call*> calls)
    {
        // A cancellation is meant for one call: the next ones of the chain go on.
        co_await asio::this_coro::throw_if_cancelled(false);
        for (auto* c : calls) {
            c->issued = ++issued_;
            c->got = co_await conn->exec(c->plan->statements, &c->diag);
            co_await asio::this_coro::reset_cancellation_state();
        }
    }

    scripted_server& server_;
    shape how_;
    std::atomic<asio::io_context*> io_ = nullptr; // read by the server's thread (fault::pause)
    run_record record_;
    std::exception_ptr error_;
    std::vector<std::unique_ptr<asio::cancellation_signal>> signals_; // one per coroutine
    std::size_t issued_ = 0;
};

// What every run must show, fault or not.
void check_clean_end(const run_record& r, const scripted_server& server)
{
    CHECK(r.finished); // false: some exec() never completed
    CHECK(r.ran_out_of_work);
    CHECK(r.connection_released);
    CHECK(r.load_at_end == 0);
    for (const auto& c : r.calls) {
        INFO(describe(*c));
        CHECK(c->got.has_value());
    }
    // The connection closed its socket: the server's side of it ends (bounded wait:
    // the server's thread notices the end of input).
    for (int i = 0; i < 400 && server.open_sessions() > 0; ++i)
        std::this_thread::sleep_for(5ms);
    CHECK(server.open_sessions() == 0);
}

// A request's outcome when a fault may have hit it: its planned answer; maybe applied
// (it was sent, or may have been, when the connection failed); or not sent, which the
// server must confirm.
void check_outcome_under_fault(const call& c, const scripted_server& server, fault kind)
{
    INFO(describe(c));
    REQUIRE(c.got.has_value());
    if (answered_as_planned(c) || failed_as_planned(c))
        return;
    REQUIRE_FALSE(*c.got); // an answer, but not this request's: replies out of order
    const auto e = c.got->error();
    if (e == dl::errc::outcome_unknown) {
        if (kind == fault::stall)
            CHECK(c.diag.client_message().find("within the request timeout") != std::string_view::npos);
        // A server that stopped answering (or sent garbage) still reads what comes: "maybe
        // applied" must be a request that reached it. (One the server closed on may have
        // been lost on the way.)
        if (kind != fault::close)
            CHECK(server.received(c.plan->tag));
        return;
    }
    if (e == dl::errc::store_unavailable) {
        CHECK_FALSE(server.received(c.plan->tag)); // "not sent": the server never had it
        return;
    }
    FAIL("an error that is neither the planned answer, outcome_unknown nor store_unavailable");
}

std::size_t count_steps(shape how)
{
    scripted_server server{play};
    auto r = run{server, how}.go();
    check_clean_end(r, server);
    if (r.connected)
        CHECK(*r.connected == std::error_code{});
    for (const auto& c : r.calls) {
        INFO(describe(*c));
        CHECK((answered_as_planned(*c) || failed_as_planned(*c)));
    }
    CHECK(r.downs == 1); // the close() at the end, only
    CHECK(server.connections() == 1);
    return r.steps_before_last;
}

// One run with a fault: which, where, and the number of steps of its shape.
struct fault_case {
    shape how;
    fault kind;
    std::size_t at;
    std::size_t of;
};

std::string describe(const fault_case& c)
{
    std::ostringstream s;
    s << (c.how == shape::connect_first ? "connect first" : "the first request connects") << ", fault "
      << test::postgres::name_of(c.kind) << " at step " << c.at << " of " << c.of;
    return s.str();
}

// Runs the cases a few at a time, each on a thread of its own with a server and an
// io_context of its own (a stalled run mostly waits for its timeouts), and checks each
// with `check` on the test's thread (Catch's assertions are not thread-safe).
template <class Check>
void run_in_batches(const std::vector<fault_case>& cases, Check check)
{
    constexpr std::size_t width = 4;
    struct one_run {
        fault_case what;
        std::unique_ptr<scripted_server> server;
        run_record record;
        std::exception_ptr error;
    };
    for (std::size_t first = 0; first < cases.size(); first += width) {
        std::vector<one_run> batch;
        for (std::size_t i = first; i < std::min(cases.size(), first + width); ++i) {
            batch.push_back({cases[i], std::make_unique<scripted_server>(play), {}, {}});
            batch.back().server->answer_together(1, 3); // "a", "b" and "c", after the setup
            batch.back().server->inject(cases[i].kind, cases[i].at);
        }
        std::vector<std::thread> threads;
        for (auto& r : batch)
            threads.emplace_back([&r] {
                try {
                    r.record = run{*r.server, r.what.how}.go();
                } catch (...) {
                    r.error = std::current_exception();
                }
            });
        for (auto& t : threads)
            t.join();
        for (auto& r : batch) {
            INFO(describe(r.what));
            if (r.error)
                std::rethrow_exception(r.error);
            check(r.what, *r.server, r.record);
        }
    }
}

} // namespace

TEST_CASE("postgres connection: against the scripted server, pipelined requests get their own answers in order",
          "[postgres_faults]")
{
    for (const auto how : {shape::connect_first, shape::requests_connect}) {
        const auto steps = count_steps(how);
        // The startup (8 messages), the setup (6), "a", "b" (with its Parse), "c" (an
        // error, then the Sync's answer), "d" (no Parse: prepared already): each step is
        // one message.
        CHECK(steps == 8 + 6 + 6 + 10 + 5 + 5);
    }
}

TEST_CASE("postgres connection: a fault at every step in turn: every request completes and learns what may have "
          "happened; the next one reconnects",
          "[postgres_faults]")
{
    const auto kinds = {fault::close, fault::garbage, fault::trailing_garbage, fault::stall};
    std::vector<fault_case> cases;
    for (const auto how : {shape::connect_first, shape::requests_connect}) {
        const auto steps = count_steps(how);
        REQUIRE(steps > 0);
        for (const auto kind : kinds)
            for (std::size_t at = 0; at < steps; ++at)
                cases.push_back({how, kind, at, steps});
    }
    std::size_t checked = 0;
    run_in_batches(cases, [&](const fault_case& what, const scripted_server& server, const run_record& r) {
        ++checked;
        CHECK(server.fired());
        check_clean_end(r, server);
        if (r.connected && *r.connected) {
            // connect() sends no request of the caller's: never "maybe applied".
            CHECK(*r.connected == dl::errc::store_unavailable);
            if (what.kind == fault::stall)
                CHECK((r.connect_diag.client_message().find("timed out") != std::string_view::npos ||
                       r.connect_diag.client_message().find("within the request timeout") != std::string_view::npos));
        }
        for (const auto& c : r.calls)
            check_outcome_under_fault(*c, server, what.kind);
        // The last request came after the fault: it connected again if it had to.
        REQUIRE(r.calls.size() == plans().size());
        INFO(describe(*r.calls.back()));
        CHECK(answered_as_planned(*r.calls.back()));
        CHECK(server.connections() == 2); // the broken one, and the next
    });
    CHECK(checked == cases.size());
}

TEST_CASE("postgres connection: the oldest waiting caller cancelled at every step in turn gets its cancellation; "
          "the others get their own answers on the same connection",
          "[postgres_faults]")
{
    const auto how = shape::requests_connect; // so that a caller waits for the connection too
    const auto steps = count_steps(how);
    REQUIRE(steps > 0);
    std::size_t not_sent = 0, abandoned = 0;
    for (std::size_t at = 0; at < steps; ++at) {
        INFO("the oldest waiting caller cancelled at step " << at << " of " << steps);
        scripted_server server{play};
        run r{server, how};
        server.inject(fault::pause, at, [&r](std::size_t) { r.cancel_oldest_waiting(); });
        auto record = r.go();
        CHECK(server.fired());
        check_clean_end(record, server);
        std::size_t cancelled = 0;
        for (const auto& c : record.calls) {
            INFO(describe(*c));
            REQUIRE(c->got.has_value());
            if (!c->cancelled) {
                // Unaffected: its own answer, in order, on the one connection.
                CHECK((answered_as_planned(*c) || failed_as_planned(*c)));
                continue;
            }
            ++cancelled;
            if (answered_as_planned(*c) || failed_as_planned(*c))
                continue; // its answer came before the cancellation
            if (c->got->error() == dl::errc::cancelled) {
                ++not_sent; // waiting for the connection: dropped
                CHECK_FALSE(server.received(c->plan->tag));
            } else {
                CHECK(c->got->error() == dl::errc::outcome_unknown); // sent: its answer is read and dropped
                ++abandoned;
            }
        }
        CHECK(cancelled == 1);
        CHECK(record.downs == 1); // the close() at the end, only
        CHECK(server.connections() == 1);
    }
    // Every kind of cancellation happened somewhere along the steps.
    CHECK(not_sent > 0);
    CHECK(abandoned > 0);
}

TEST_CASE("postgres connection: a request whose backend is terminated under it gets the server's SQLSTATE; the one "
          "sent behind it may have been applied",
          "[postgres_faults]")
{
    scripted_server server{[](std::string_view sql, const std::vector<value>& params) {
        if (!params.empty() && params.front() == value{"doomed"})
            return answer::terminated("57P01", "terminating connection due to administrator command");
        return play(sql, params);
    }};
    server.answer_together(1, 2); // both requests on the wire before the backend ends
    asio::io_context io{1};
    pgd::connection::options o;
    o.params = {{"connect_timeout", "1"}, {"dbname", server.conninfo()}};
    o.setup = {{"", setup_sql, {pgd::param::text("300ms")}}};
    o.connect_timeout = connect_timeout;
    o.request_timeout = request_timeout;
    o.peer = "scripted PostgreSQL";
    auto conn = std::make_shared<pgd::connection>(dl::backend::make_strand(io.get_executor()), std::move(o));
    std::optional<dl::result<pgd::replies>> doomed, behind;
    dl::diagnostics doomed_diag, behind_diag;
    asio::co_spawn(
        io,
        [&]() -> asio::awaitable<void> {
            const auto connected = co_await conn->connect(nullptr);
            REQUIRE_FALSE(connected);
            const auto ex = co_await asio::this_coro::executor;
            asio::co_spawn(
                ex,
                [&]() -> asio::awaitable<void> {
                    std::vector<pgd::statement> request{echo("doomed")};
                    doomed = co_await conn->exec(std::move(request), &doomed_diag);
                },
                asio::detached);
            asio::co_spawn(
                ex,
                [&]() -> asio::awaitable<void> {
                    std::vector<pgd::statement> request{echo("behind")};
                    behind = co_await conn->exec(std::move(request), &behind_diag);
                },
                asio::detached);
        },
        asio::detached);
    io.run_for(run_limit);
    REQUIRE(doomed.has_value());
    REQUIRE(behind.has_value());
    REQUIRE_FALSE(*doomed);
    INFO(doomed_diag.to_string());
    CHECK(doomed->error() == dl::postgres::sqlstate("57P01"));
    CHECK(doomed->error() == dl::condition::maybe_applied);
    CHECK(doomed_diag.to_string().find("terminating connection") != std::string::npos);
    REQUIRE_FALSE(*behind);
    CHECK(behind->error() == dl::condition::maybe_applied);
    conn->close();
    io.restart();
    io.run_for(2s);
}
