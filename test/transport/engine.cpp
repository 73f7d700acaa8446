// The transport engine over a scripted stream: pipelining, pushes, and what each
// request learns when an error is injected at every step in turn.
#include "transport/scripted_stream.hpp"
#include "eventually.hpp"
#include "pending.hpp"
#include "support.hpp"

#include <distlock/backend/strand.hpp>
#include <distlock/transport/engine.hpp>

#include <asio/bind_cancellation_slot.hpp>
#include <asio/strand.hpp>
#include <asio/thread_pool.hpp>

#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace std::chrono_literals;
namespace dl = distlock;
using test::transport::line_codec;
using test::transport::script;
using test::transport::scripted_stream;
using test::transport::step;
using engine_type = dl::transport::engine<line_codec, scripted_stream>;

struct rig {
    asio::io_context io;
    std::vector<std::shared_ptr<script>> scripts; // played by the connects, in order
    std::size_t connects = 0;
    std::vector<std::string> pushes;
    std::size_t downs = 0;
    std::shared_ptr<engine_type> engine;

    // The engine runs on a strand over a type-erased executor (the fallback of
    // backend::make_strand(), which the stores' tests do not reach), or with
    // `store_strand` on the one backend::make_strand() gives the stores.
    explicit rig(dl::duration request_timeout = 10s, dl::duration idle_timeout = {}, bool store_strand = false)
    {
        const asio::any_io_executor ex = io.get_executor();
        engine = std::make_shared<engine_type>(
            store_strand ? dl::backend::make_strand(ex) : asio::any_io_executor{asio::make_strand(ex)}, line_codec{},
            engine_type::options{request_timeout, "scripted", idle_timeout},
            [this](scripted_stream& s, std::string& diagnostic) -> asio::awaitable<std::error_code> {
                REQUIRE(connects < scripts.size());
                s.play(scripts[connects++]);
                auto ec = co_await s.connect();
                if (ec) {
                    diagnostic = "refused";
                    co_return make_error_code(dl::errc::store_unavailable);
                }
                co_return std::error_code{};
            });
        engine->on_push([this](std::string m) { pushes.push_back(std::move(m)); });
        engine->on_down([this] { ++downs; });
    }
    ~rig()
    {
        engine->close();
        io.poll();
    }

    std::shared_ptr<script> add(std::vector<step> steps, std::optional<std::size_t> fail_at = {})
    {
        scripts.push_back(std::make_shared<script>(script{.steps = std::move(steps), .fail_at = fail_at}));
        return scripts.back();
    }
};

} // namespace

TEST_CASE("transport engine: pipelined requests share one write and get their own replies in order",
          "[transport]")
{
    rig r;
    r.add({{step::connect, {}}, {step::write, "a\nb\nc\n"}, {step::read, "A\n>p\nB1\nB2\nC\n"}});
    test::run(r.io, [&]() -> asio::awaitable<void> {
        const auto ex = co_await asio::this_coro::executor;
        auto a = test::start(ex, r.engine->exec("a\n", 1));
        auto b = test::start(ex, r.engine->exec("b\n", 2));
        auto c = test::start(ex, r.engine->exec("c\n", 1));
        { const bool came_ = co_await c.wait(); REQUIRE(came_); }
        { const bool came_ = co_await a.wait(); REQUIRE(came_); }
        { const bool came_ = co_await b.wait(); REQUIRE(came_); }
        REQUIRE(a.get());
        CHECK(*a.get() == std::vector<std::string>{"A"});
        REQUIRE(b.get());
        CHECK(*b.get() == std::vector<std::string>{"B1", "B2"});
        REQUIRE(c.get());
        CHECK(*c.get() == std::vector<std::string>{"C"});
    });
    CHECK(r.pushes == std::vector<std::string>{">p"});
    CHECK(r.connects == 1);
}

TEST_CASE("transport engine: an idle connection writes a request at once; what the socket did not take goes "
          "out through the writer, before the next request",
          "[transport]")
{
    struct socket_case {
        const char* what;
        std::size_t try_limit;     // what the socket takes of one try_write()
        std::size_t taken_at_once; // bytes written at once, not by the writer
    };
    // "b\n" finds "hello\n" in flight, alone, and is written at once too when the socket
    // took all of "hello\n"; else it waits behind its rest, and goes through the writer.
    for (const auto& c : {socket_case{"the socket takes all of it", std::string::npos, 8},
                          socket_case{"the socket takes part of it: \"llo\\n\" follows, then \"b\\n\"", 2, 2},
                          socket_case{"the socket would block", 0, 0}}) {
        INFO(c.what);
        rig r;
        auto played = r.add({{step::connect, {}}, {step::write, "hello\nb\n"}, {step::read, "H\nB\n"}});
        played->try_limit = c.try_limit;
        test::run(r.io, [&]() -> asio::awaitable<void> {
            const auto ex = co_await asio::this_coro::executor;
            { const auto up_ = co_await r.engine->connect(); REQUIRE_FALSE(up_); }
            auto a = test::start(ex, r.engine->exec("hello\n", 1));
            auto b = test::start(ex, r.engine->exec("b\n", 1));
            { const bool came_ = co_await a.wait(); REQUIRE(came_); }
            { const bool came_ = co_await b.wait(); REQUIRE(came_); }
            REQUIRE(a.get());
            CHECK(*a.get() == std::vector<std::string>{"H"});
            REQUIRE(b.get());
            CHECK(*b.get() == std::vector<std::string>{"B"});
        });
        CHECK(played->tried_bytes == c.taken_at_once);
        CHECK(played->at == played->steps.size());
    }
}

TEST_CASE("transport engine: a lone request is written at once beside one request in flight; beside two, the "
          "writer batches",
          "[transport]")
{
    rig r;
    auto played = r.add({{step::connect, {}}, {step::write, "a\nb\nc\nd\n"}, {step::read, "A\nB\nC\nD\n"}});
    test::run(r.io, [&]() -> asio::awaitable<void> {
        const auto ex = co_await asio::this_coro::executor;
        { const auto up_ = co_await r.engine->connect(); REQUIRE_FALSE(up_); }
        // "a" on an idle connection, "b" beside "a" (a Redlock node still answering the
        // operation before): both at once. "c" and "d" find two in flight: the writer.
        auto a = test::start(ex, r.engine->exec("a\n", 1));
        auto b = test::start(ex, r.engine->exec("b\n", 1));
        auto c = test::start(ex, r.engine->exec("c\n", 1));
        auto d = test::start(ex, r.engine->exec("d\n", 1));
        for (auto* p : {&a, &b, &c, &d}) {
            const bool came = co_await p->wait();
            REQUIRE(came);
            REQUIRE(p->get());
        }
        CHECK(*a.get() == std::vector<std::string>{"A"});
        CHECK(*b.get() == std::vector<std::string>{"B"});
        CHECK(*c.get() == std::vector<std::string>{"C"});
        CHECK(*d.get() == std::vector<std::string>{"D"});
    });
    CHECK(played->tried_bytes == 4);
    CHECK(played->tries == 2);
    CHECK(played->at == played->steps.size());
}

TEST_CASE("transport engine: a request the socket took in part when the connection failed may have been applied",
          "[transport]")
{
    // One payload of two requests: the socket takes the first whole ("a\n") and the
    // connection fails before the writer sends the rest. The server may have applied
    // "a": never "not sent".
    rig r;
    r.add({{step::connect, {}}, {step::write, "a\n"}, {step::write, "b\n"}, {step::read, "A\nB\n"}}, 2);
    test::run(r.io, [&]() -> asio::awaitable<void> {
        { const auto up_ = co_await r.engine->connect(); REQUIRE_FALSE(up_); }
        auto both = co_await r.engine->exec("a\nb\n", 2);
        REQUIRE_FALSE(both);
        CHECK(both.error() == dl::errc::outcome_unknown);
    });
    CHECK(r.scripts[0]->tried_bytes == 2);
}

TEST_CASE("transport engine: an error at every step in turn: each request learns what may have happened",
          "[transport]")
{
    // connect, write, read of the first request; then the engine must connect again
    // for the second and succeed.
    // The first request goes out at once on the idle connection (try_write), or, when
    // the socket would block, through the writer.
    const std::vector<step> steps{{step::connect, {}}, {step::write, "a\n"}, {step::read, "A\n"}};
    for (const bool at_once : {true, false})
    for (std::size_t fail_at = 0; fail_at <= steps.size(); ++fail_at) {
        INFO("error injected at step " << fail_at << (at_once ? ", written at once" : ", written by the writer"));
        rig r;
        r.add(steps, fail_at < steps.size() ? std::optional{fail_at} : std::nullopt)->try_limit =
            at_once ? std::string::npos : 0;
        r.add({{step::connect, {}}, {step::write, "b\n"}, {step::read, "B\n"}});
        test::run(r.io, [&]() -> asio::awaitable<void> {
            dl::diagnostics diag;
            auto first = co_await r.engine->exec("a\n", 1, &diag);
            if (fail_at == 0) {
                // Never connected: nothing was sent.
                REQUIRE_FALSE(first);
                CHECK(first.error() == dl::errc::store_unavailable);
                CHECK(diag.client_message() == "refused");
            } else if (fail_at == 1 && at_once) {
                // The socket took none of it: not sent, and the connection is gone.
                REQUIRE_FALSE(first);
                CHECK(first.error() == dl::errc::store_unavailable);
                CHECK(diag.client_message().find("write to scripted failed") != std::string_view::npos);
            } else if (fail_at < steps.size()) {
                // Written (even if the write failed part-way) or its reply lost: it may
                // have been applied.
                REQUIRE_FALSE(first);
                CHECK(first.error() == dl::errc::outcome_unknown);
                CHECK(diag.client_message().find(fail_at == 1 ? "write to scripted failed" : "connection to scripted lost") !=
                      std::string_view::npos);
            } else {
                REQUIRE(first);
                CHECK(*first == std::vector<std::string>{"A"});
                CHECK(diag.empty());
            }
            if (fail_at == steps.size()) {
                // No failure: the same connection carries the next request; the
                // second script is for a reconnect that does not happen.
                r.scripts[0]->steps.push_back({step::write, "b\n"});
                r.scripts[0]->steps.push_back({step::read, "B\n"});
            }
            auto second = co_await r.engine->exec("b\n", 1);
            REQUIRE(second);
            CHECK(*second == std::vector<std::string>{"B"});
        });
        CHECK(r.connects == (fail_at == steps.size() ? 1u : 2u));
        CHECK(r.downs == (fail_at == 1 || fail_at == 2 ? 1u : 0u));
    }
}

TEST_CASE("transport engine: a failure fails written requests as outcome_unknown and queued ones as not sent",
          "[transport]")
{
    rig r;
    // The first two requests are written together; the reply to the first comes,
    // then the connection resets before the second's.
    r.add({{step::connect, {}}, {step::write, "a\nb\n"}, {step::read, "A\n"}, {step::read, "B\n"}}, 3);
    test::run(r.io, [&]() -> asio::awaitable<void> {
        const auto ex = co_await asio::this_coro::executor;
        auto a = test::start(ex, r.engine->exec("a\n", 1));
        auto b = test::start(ex, r.engine->exec("b\n", 1));
        { const bool came_ = co_await a.wait(); REQUIRE(came_); }
        { const bool came_ = co_await b.wait(); REQUIRE(came_); }
        REQUIRE(a.get());
        CHECK(*a.get() == std::vector<std::string>{"A"});
        REQUIRE_FALSE(b.get());
        CHECK(b.get().error() == dl::errc::outcome_unknown);
    });
    CHECK(r.downs == 1);
}

TEST_CASE("transport engine: close() with a request in flight", "[transport]")
{
    rig r;
    r.add({{step::connect, {}}, {step::write, "a\n"}}); // the server never answers
    test::run(r.io, [&]() -> asio::awaitable<void> {
        const auto ex = co_await asio::this_coro::executor;
        auto a = test::start(ex, r.engine->exec("a\n", 1));
        (void)co_await test::eventually("written", [&] { return r.scripts[0]->at == 2; });
        r.engine->close();
        { const bool came_ = co_await a.wait(); REQUIRE(came_); }
        REQUIRE_FALSE(a.get());
        CHECK(a.get().error() == dl::errc::outcome_unknown);
    });
    CHECK(r.downs == 1);
}

TEST_CASE("transport engine: bytes that are not the protocol and replies nobody asked for", "[transport]")
{
    SECTION("malformed")
    {
        rig r;
        r.add({{step::connect, {}}, {step::write, "a\n"}, {step::read, "!garbage\n"}});
        test::run(r.io, [&]() -> asio::awaitable<void> {
            dl::diagnostics diag;
            auto a = co_await r.engine->exec("a\n", 1, &diag);
            REQUIRE_FALSE(a);
            CHECK(a.error() == dl::errc::protocol_error);
            CHECK(diag.client_message().find("unparseable") != std::string_view::npos);
        });
    }
    SECTION("a reply without a request")
    {
        rig r;
        r.add({{step::connect, {}}, {step::write, "a\n"}, {step::read, "A\nextra\n"}});
        test::run(r.io, [&]() -> asio::awaitable<void> {
            auto a = co_await r.engine->exec("a\n", 1);
            REQUIRE(a);
            CHECK(*a == std::vector<std::string>{"A"});
            (void)co_await test::eventually("dropped", [&] { return r.downs == 1; });
        });
    }
}

TEST_CASE("transport engine: an abandoned request's reply is read and dropped; the next gets its own",
          "[transport]")
{
    rig r;
    r.add({{step::connect, {}}, {step::write, "a\n"}, {step::write, "b\n"}, {step::read, "A\nB\n"}});
    test::run(r.io, [&]() -> asio::awaitable<void> {
        const auto ex = co_await asio::this_coro::executor;
        asio::cancellation_signal cancel;
        std::optional<dl::result<std::vector<std::string>>> abandoned;
        asio::co_spawn(ex, r.engine->exec("a\n", 1),
                       asio::bind_cancellation_slot(cancel.slot(), [&](std::exception_ptr, auto res) {
                           abandoned.emplace(std::move(res));
                       }));
        (void)co_await test::eventually("written", [&] { return r.scripts[0]->at == 2; });
        cancel.emit(asio::cancellation_type::all);
        (void)co_await test::eventually("abandoned", [&] { return abandoned.has_value(); });
        REQUIRE_FALSE(*abandoned);
        CHECK(abandoned->error() == dl::errc::outcome_unknown); // it had been written
        auto b = co_await r.engine->exec("b\n", 1);
        REQUIRE(b);
        CHECK(*b == std::vector<std::string>{"B"});
    });
    CHECK(r.downs == 0);
}

TEST_CASE("transport engine: a connect whose caller was cancelled while connecting does not hold up the callers "
          "behind it",
          "[transport][cancel]")
{
    // The first connect hangs until its caller is cancelled; a second caller waits
    // for that attempt meanwhile. Once the first is cut off, the second connects by
    // itself instead of waiting for an attempt nobody will finish.
    asio::io_context io;
    auto played = std::make_shared<script>(script{.steps = {{step::connect, {}}}});
    int connects = 0;
    auto engine = std::make_shared<engine_type>(
        asio::make_strand(asio::any_io_executor{io.get_executor()}), line_codec{},
        engine_type::options{10s, "scripted", {}},
        [&](scripted_stream& s, std::string&) -> asio::awaitable<std::error_code> {
            if (connects++ == 0) {
                asio::steady_timer forever{co_await asio::this_coro::executor, 1h};
                co_await forever.async_wait(asio::use_awaitable); // throws when cancelled
            }
            s.play(played);
            co_return co_await s.connect();
        });
    test::run(io, [&]() -> asio::awaitable<void> {
        const auto ex = co_await asio::this_coro::executor;
        asio::cancellation_signal cancel;
        bool first_ended = false;
        asio::co_spawn(ex, engine->connect(),
                       asio::bind_cancellation_slot(cancel.slot(), [&](std::exception_ptr, auto) { first_ended = true; }));
        (void)co_await test::eventually("the first connect under way", [&] { return connects == 1; });
        std::optional<std::error_code> second;
        asio::co_spawn(ex, engine->connect(), [&](std::exception_ptr e, std::error_code ec) {
            second = e ? make_error_code(dl::errc::store_unavailable) : ec;
        });
        co_await test::settle();
        CHECK_FALSE(second); // it waits for the attempt under way
        cancel.emit(asio::cancellation_type::all);
        (void)co_await test::eventually("the second connect done", [&] { return second.has_value(); });
        CHECK(first_ended);
        CHECK(*second == std::error_code{});
        CHECK(connects == 2);
        CHECK(engine->ready());
        engine->close();
    });
}

TEST_CASE("transport engine: a request without a reply within the timeout drops the connection", "[transport]")
{
    rig r{50ms};
    r.add({{step::connect, {}}, {step::write, "a\n"}});
    r.add({{step::connect, {}}, {step::write, "b\n"}, {step::read, "B\n"}});
    test::run(r.io, [&]() -> asio::awaitable<void> {
        dl::diagnostics diag;
        auto a = co_await r.engine->exec("a\n", 1, &diag);
        REQUIRE_FALSE(a);
        CHECK(a.error() == dl::errc::outcome_unknown);
        CHECK(diag.client_message() == "no reply from scripted within the request timeout");
        auto b = co_await r.engine->exec("b\n", 1);
        REQUIRE(b);
    });
    CHECK(r.downs == 1);
    CHECK(r.connects == 2);
}

TEST_CASE("transport engine: a streaming response: the head answers the request, the events come as pushes",
          "[transport]")
{
    // As an etcd watch runs: one long-lived request on a connection of its own; the
    // server's first message answers it, every later one is an event, until the
    // stream ends.
    rig r;
    r.add({{step::connect, {}},
           {step::write, "watch k\n"},
           {step::read, "watching\n>put k 1\n"},
           {step::read, ">put k 2\n>delete k\n"},
           {step::read, {}}},
          4); // the server ends the stream
    test::run(r.io, [&]() -> asio::awaitable<void> {
        auto head = co_await r.engine->exec("watch k\n", 1);
        REQUIRE(head);
        CHECK(*head == std::vector<std::string>{"watching"});
        (void)co_await test::eventually("stream ended", [&] { return r.downs == 1; });
    });
    CHECK(r.pushes == std::vector<std::string>{">put k 1", ">put k 2", ">delete k"});
}

TEST_CASE("transport engine: a connection idle past idle_timeout is replaced before the next request",
          "[transport]")
{
    rig r{10s, 20ms};
    r.add({{step::connect, {}}, {step::write, "a\n"}, {step::read, "A\n"}});
    r.add({{step::connect, {}}, {step::write, "b\n"}, {step::read, "B\n"}});
    test::run(r.io, [&]() -> asio::awaitable<void> {
        auto a = co_await r.engine->exec("a\n", 1);
        REQUIRE(a);
        co_await test::settle(60ms); // idle for longer than 20 ms
        auto b = co_await r.engine->exec("b\n", 1);
        REQUIRE(b);
        CHECK(*b == std::vector<std::string>{"B"});
    });
    CHECK(r.connects == 2);
    CHECK(r.downs == 1);
}

TEST_CASE("transport engine: a request the socket took in part and whose caller stopped waiting still leaves "
          "whole; the next request gets its own reply",
          "[transport]")
{
    // The socket takes "he" of "hello\n" at once; the caller gives up before the
    // writer sends the rest. Dropping the rest would put "b\n" right after "he".
    rig r;
    auto played = r.add({{step::connect, {}}, {step::write, "hello\nb\n"}, {step::read, "H\nB\n"}});
    played->try_limit = 2;
    test::run(r.io, [&]() -> asio::awaitable<void> {
        const auto ex = co_await asio::this_coro::executor;
        { const auto up_ = co_await r.engine->connect(); REQUIRE_FALSE(up_); }
        asio::cancellation_signal cancel;
        std::optional<dl::result<std::vector<std::string>>> abandoned;
        asio::co_spawn(ex, r.engine->exec("hello\n", 1),
                       asio::bind_cancellation_slot(cancel.slot(), [&](std::exception_ptr, auto res) {
                           abandoned.emplace(std::move(res));
                       }));
        // exec() has run up to its wait: "he" left at once, the writer is yet to run.
        CHECK(played->tried_bytes == 2);
        cancel.emit(asio::cancellation_type::all);
        (void)co_await test::eventually("abandoned", [&] { return abandoned.has_value(); });
        REQUIRE_FALSE(*abandoned);
        CHECK(abandoned->error() == dl::errc::outcome_unknown); // part of it had left
        auto b = co_await r.engine->exec("b\n", 1);
        REQUIRE(b);
        CHECK(*b == std::vector<std::string>{"B"});
    });
    CHECK(played->at == played->steps.size());
    CHECK(r.downs == 0);
}

TEST_CASE("transport engine: callers answered by one read resume in order; one that closes the connection as it "
          "resumes leaves the others their replies",
          "[transport]")
{
    rig r;
    r.add({{step::connect, {}}, {step::write, "a\nb\nc\n"}, {step::read, "A\nB\nC\n"}});
    std::vector<std::string> order;
    // Named: a coroutine lambda reads its captures through the closure, which must outlive it.
    auto closing = [&]() -> asio::awaitable<dl::result<std::vector<std::string>>> {
        auto got = co_await r.engine->exec("a\n", 1);
        order.push_back("a");
        r.engine->close(); // as the callers of one read are handed their replies
        co_return got;
    };
    auto noting = [&]() -> asio::awaitable<dl::result<std::vector<std::string>>> {
        auto got = co_await r.engine->exec("b\n", 1);
        order.push_back("b");
        co_return got;
    };
    test::run(r.io, [&]() -> asio::awaitable<void> {
        const auto ex = co_await asio::this_coro::executor;
        auto a = test::start(ex, closing());
        auto b = test::start(ex, noting());
        auto c = test::start(ex, r.engine->exec("c\n", 1));
        { const bool came_ = co_await c.wait(); REQUIRE(came_); }
        { const bool came_ = co_await b.wait(); REQUIRE(came_); }
        { const bool came_ = co_await a.wait(); REQUIRE(came_); }
        REQUIRE(a.get());
        CHECK(*a.get() == std::vector<std::string>{"A"});
        REQUIRE(b.get());
        CHECK(*b.get() == std::vector<std::string>{"B"});
        REQUIRE(c.get());
        CHECK(*c.get() == std::vector<std::string>{"C"});
    });
    CHECK(order == std::vector<std::string>{"a", "b"});
    CHECK(r.downs == 1);
}

TEST_CASE("transport engine: an io_context destroyed while a request waits lets go of its caller and the engine",
          "[transport][lifetime]")
{
    // The request keeps its caller's frames, which keep the engine, which keeps the
    // request: the io_context's shutdown must break the cycle, as it does for Asio's
    // own pending operations. Under ASan a leak would also be reported at exit.
    auto played = std::make_shared<script>(script{.steps = {{step::connect, {}}, {step::write, "a\n"}}});
    std::weak_ptr<engine_type> engine_left;
    bool resumed = false;
    {
        asio::io_context io;
        auto engine = std::make_shared<engine_type>(
            asio::make_strand(asio::any_io_executor{io.get_executor()}), line_codec{},
            engine_type::options{10s, "scripted", {}},
            [played](scripted_stream& s, std::string&) -> asio::awaitable<std::error_code> {
                s.play(played);
                co_return co_await s.connect();
            });
        engine_left = engine;
        asio::co_spawn(
            io,
            [](std::shared_ptr<engine_type> e, bool& resumed) -> asio::awaitable<void> {
                (void)co_await e->exec("a\n", 1); // the server never answers
                resumed = true;
            }(std::move(engine), resumed),
            asio::detached);
        for (int i = 0; i < 1000 && played->at < played->steps.size(); ++i)
            io.poll();
        REQUIRE(played->at == played->steps.size()); // written, waiting for its reply
        CHECK_FALSE(engine_left.expired());
    }
    CHECK(engine_left.expired());
    CHECK_FALSE(resumed);
}

TEST_CASE("transport engine: the next requests of callers answered by one read leave together, in one write at "
          "once",
          "[transport]")
{
    // Three callers, answered by one read, each send their next request as they resume:
    // the reader writes the three in one try_write() when the last has queued its own,
    // instead of one write each or a hand-off to the writer.
    rig r;
    auto played = r.add({{step::connect, {}},
                         {step::write, "a1\nb1\nc1\n"},
                         {step::read, "A1\nB1\nC1\n"},
                         {step::write, "a2\nb2\nc2\n"},
                         {step::read, "A2\nB2\nC2\n"}});
    played->try_limit = 0; // the first requests go through the writer, together
    auto twice = [&](std::string name) -> asio::awaitable<std::vector<std::string>> {
        std::vector<std::string> got;
        for (const char* n : {"1", "2"}) {
            auto reply = co_await r.engine->exec(name + n + "\n", 1);
            got.push_back(reply ? reply->front() : reply.error().message());
            if (*n == '1')
                played->try_limit = std::string::npos; // the socket takes all from now on
        }
        co_return got;
    };
    test::run(r.io, [&]() -> asio::awaitable<void> {
        const auto ex = co_await asio::this_coro::executor;
        { const auto up_ = co_await r.engine->connect(); REQUIRE_FALSE(up_); }
        auto a = test::start(ex, twice("a"));
        auto b = test::start(ex, twice("b"));
        auto c = test::start(ex, twice("c"));
        for (auto* p : {&a, &b, &c}) {
            const bool came = co_await p->wait();
            REQUIRE(came);
        }
        CHECK(a.get() == std::vector<std::string>{"A1", "A2"});
        CHECK(b.get() == std::vector<std::string>{"B1", "B2"});
        CHECK(c.get() == std::vector<std::string>{"C1", "C2"});
    });
    CHECK(played->at == played->steps.size());
    CHECK(played->tried_bytes == 9); // "a2\nb2\nc2\n", at once
    CHECK(played->tries == 2);       // a1, refused (the socket took nothing), then the three together
}

TEST_CASE("transport engine: a caller on a strand of its own resumes on that strand",
          "[transport]")
{
    rig r;
    r.add({{step::connect, {}}, {step::write, "a\n"}, {step::read, "A\n"}});
    const asio::any_io_executor own = asio::make_strand(r.io);
    bool on_own = false;
    // Named: a coroutine lambda reads its captures through the closure, which must outlive it.
    auto caller = [&]() -> asio::awaitable<dl::result<std::vector<std::string>>> {
        auto got = co_await r.engine->exec("a\n", 1);
        // Dispatched to its strand (which may run it at once, nested in the engine's),
        // never called directly from the engine's.
        on_own = own.target<asio::strand<asio::io_context::executor_type>>()->running_in_this_thread();
        co_return got;
    };
    test::run(r.io, [&]() -> asio::awaitable<void> {
        auto a = test::start(own, caller());
        { const bool came_ = co_await a.wait(); REQUIRE(came_); }
        REQUIRE(a.get());
        CHECK(*a.get() == std::vector<std::string>{"A"});
    });
    CHECK(on_own);
}

TEST_CASE("backend::make_strand: over the io_context's executor type when given one, else over the executor given",
          "[transport]")
{
    asio::io_context io;
    const auto fast = dl::backend::make_strand(asio::any_io_executor{io.get_executor()});
    // (Asio 1.22's own target() does not check the type: target_of() does.)
    CHECK(dl::backend::target_of<asio::strand<asio::io_context::executor_type>>(fast) != nullptr);
    CHECK(dl::backend::target_of<asio::strand<asio::any_io_executor>>(fast) == nullptr);
    CHECK(dl::backend::inner_executor(fast) == asio::any_io_executor{io.get_executor()});

    // Any other executor (here a thread pool's) gets the strand over itself, which still
    // runs one piece of work at a time: two threads posting through it lose no update.
    asio::thread_pool pool{2};
    const asio::any_io_executor pool_ex = pool.get_executor();
    const auto other = dl::backend::make_strand(pool_ex);
    REQUIRE(dl::backend::target_of<asio::strand<asio::any_io_executor>>(other) != nullptr);
    CHECK(dl::backend::target_of<asio::strand<asio::io_context::executor_type>>(other) == nullptr);
    CHECK(dl::backend::inner_executor(other) == pool_ex);
    int count = 0; // not atomic: the strand alone keeps the increments apart
    constexpr int each = 2000;
    auto post_all = [&] {
        for (int i = 0; i < each; ++i)
            asio::post(other, [&count] { ++count; });
    };
    std::thread a{post_all}, b{post_all};
    a.join();
    b.join();
    pool.join();
    CHECK(count == 2 * each);

    // Neither a strand nor an executor to wrap: inner_executor() answers the executor itself.
    CHECK(dl::backend::inner_executor(pool_ex) == pool_ex);
}

TEST_CASE("transport engine: on the strand backend::make_strand gives, replies resume their callers in order",
          "[transport]")
{
    rig r{10s, {}, true};
    REQUIRE(dl::backend::target_of<asio::strand<asio::io_context::executor_type>>(r.engine->strand()) != nullptr);
    r.add({{step::connect, {}}, {step::write, "a\nb\n"}, {step::read, "A\nB1\nB2\n"}});
    test::run(r.io, [&]() -> asio::awaitable<void> {
        const auto ex = co_await asio::this_coro::executor;
        auto a = test::start(ex, r.engine->exec("a\n", 1));
        auto b = test::start(ex, r.engine->exec("b\n", 2));
        { const bool came_ = co_await a.wait(); REQUIRE(came_); }
        { const bool came_ = co_await b.wait(); REQUIRE(came_); }
        REQUIRE(a.get());
        REQUIRE(b.get());
        CHECK(*a.get() == std::vector<std::string>{"A"});
        CHECK(*b.get() == std::vector<std::string>{"B1", "B2"});
    });
}
