// The pub/sub subscriber, the handshake and the listing against scripted fake
// servers: what a real server does too quickly or too rarely to test (LOADING during
// the handshake, acknowledgements held back, a key gone between SCAN and its read)
// or never (replies that make no sense).
#include "redis_support.hpp"

#include <asio/ip/tcp.hpp>
#include <asio/write.hpp>

#include <deque>

using namespace test;

namespace {

/// A fake Redis server on the test's io_context. It records every command received,
/// in order, and answers each with `answer(command)` (nothing when empty); the test
/// can also write to the latest connection whenever it likes.
struct fake_server {
    struct state {
        explicit state(asio::io_context& io) : acceptor{io, {asio::ip::make_address("127.0.0.1"), 0}} {}
        asio::ip::tcp::acceptor acceptor;
        std::vector<std::vector<std::string>> received;
        std::shared_ptr<asio::ip::tcp::socket> latest;
        std::function<std::string(const std::vector<std::string>&)> answer;
    };
    std::shared_ptr<state> s;

    explicit fake_server(asio::io_context& io, std::function<std::string(const std::vector<std::string>&)> answer)
        : s{std::make_shared<state>(io)}
    {
        s->answer = std::move(answer);
        asio::co_spawn(io, accept(s), asio::detached);
    }
    ~fake_server()
    {
        std::error_code ignored;
        s->acceptor.close(ignored);
        if (s->latest)
            s->latest->close(ignored);
    }
    std::uint16_t port() const { return s->acceptor.local_endpoint().port(); }

    /// How many commands named `name` (upper case) arrived.
    std::size_t count(const std::string& name) const
    {
        return static_cast<std::size_t>(std::count_if(s->received.begin(), s->received.end(),
                                                      [&](const auto& c) { return !c.empty() && c[0] == name; }));
    }

    static asio::awaitable<void> accept(std::shared_ptr<state> s)
    {
        for (;;) {
            auto [ec, socket] = co_await s->acceptor.async_accept(asio::experimental::as_tuple(asio::use_awaitable));
            if (ec)
                co_return;
            s->latest = std::make_shared<asio::ip::tcp::socket>(std::move(socket));
            asio::co_spawn(s->acceptor.get_executor(), serve(s, s->latest), asio::detached);
        }
    }

    static asio::awaitable<void> serve(std::shared_ptr<state> s, std::shared_ptr<asio::ip::tcp::socket> socket)
    {
        std::string pending;
        char buf[4096];
        for (;;) {
            auto [rec, n] = co_await socket->async_read_some(asio::buffer(buf), asio::experimental::as_tuple(asio::use_awaitable));
            if (rec)
                co_return;
            pending.append(buf, n);
            std::string replies;
            for (;;) {
                const auto r = dl::redis::resp::parse(pending);
                if (r.status != dl::redis::resp::status::complete)
                    break;
                pending.erase(0, r.consumed);
                std::vector<std::string> command;
                for (const auto& e : r.value.elements)
                    command.push_back(e.text);
                if (!command.empty())
                    std::transform(command[0].begin(), command[0].end(), command[0].begin(), ::toupper);
                s->received.push_back(command);
                replies += s->answer(command);
            }
            if (replies.empty())
                continue;
            auto [wec, m] = co_await asio::async_write(*socket, asio::buffer(replies), asio::experimental::as_tuple(asio::use_awaitable));
            if (wec)
                co_return;
        }
    }

    /// Writes raw RESP to the latest connection.
    asio::awaitable<void> say(std::string bytes)
    {
        auto socket = s->latest;
        REQUIRE(socket);
        auto [ec, n] = co_await asio::async_write(*socket, asio::buffer(bytes), asio::experimental::as_tuple(asio::use_awaitable));
        REQUIRE_FALSE(ec);
    }
};

std::string push(const std::string& kind, const std::string& channel, const std::string& last)
{
    return "*3\r\n$" + std::to_string(kind.size()) + "\r\n" + kind + "\r\n$" + std::to_string(channel.size()) + "\r\n" +
           channel + "\r\n" + last;
}
std::string ack(const std::string& kind, const std::string& channel, int count)
{
    return push(kind, channel, ":" + std::to_string(count) + "\r\n");
}
std::string message(const std::string& channel)
{
    return push("message", channel, "$8\r\nreleased\r\n");
}

using subscriber_ptr = std::shared_ptr<dl::redis::detail::subscriber>;
using waiter_ptr = std::shared_ptr<dl::backend::wakeup>;

subscriber_ptr make_subscriber(asio::io_context& io, dl::redis::config cfg)
{
    return std::make_shared<dl::redis::detail::subscriber>(asio::make_strand(asio::any_io_executor{io.get_executor()}),
                                                           std::move(cfg), nullptr);
}

asio::awaitable<void> subscribe_into(subscriber_ptr sub, std::string channel, waiter_ptr w,
                                     std::shared_ptr<std::optional<std::error_code>> out)
{
    *out = co_await sub->subscribe(std::move(channel), std::move(w));
}

asio::awaitable<void> wait_into(waiter_ptr w, std::shared_ptr<bool> out)
{
    *out = co_await w->wait(dl::clock::now() + std::chrono::seconds{20});
}

// Bounded wait for a condition the fake server or the client makes true.
template <class Pred>
asio::awaitable<bool> eventually(Pred pred)
{
    for (int i = 0; i < 2000 && !pred(); ++i)
        co_await settle(std::chrono::milliseconds{2});
    co_return pred();
}

} // namespace

TEST_CASE("redis: LOADING during the handshake is store_unavailable on both connections", "[redis][notify][input]")
{
    asio::io_context io;
    fake_server server{io, [](const std::vector<std::string>&) {
                           return std::string{"-LOADING Redis is loading the dataset in memory\r\n"};
                       }};
    dl::redis::config cfg;
    cfg.port = server.port();
    cfg.password = "pw"; // so that the subscriber has a handshake too
    cfg.connect_timeout = 2s;
    cfg.request_timeout = 2s;
    dl::redis::store store{io, cfg};
    auto sub = make_subscriber(io, cfg);
    run(io, [&]() -> asio::awaitable<void> {
        auto ping = dl::redis::resp::command({"PING"});
        dl::diagnostics diag;
        auto main = co_await store.execute_command(std::move(ping), &diag);
        REQUIRE_FALSE(main);
        CHECK(main.error() == dl::errc::store_unavailable);
        CHECK(diag.client_message().find("LOADING") != std::string::npos); // in the handshake

        auto w = std::make_shared<dl::backend::wakeup>(co_await asio::this_coro::executor);
        const auto ec = co_await sub->subscribe("ch", w);
        CHECK(ec == dl::errc::store_unavailable); // not auth_failed: the password was never judged
    });
    CHECK(server.count("AUTH") >= 2);
    CHECK(server.count("SUBSCRIBE") == 0);
    sub->close();
    store.disconnect();
    io.poll();
}

TEST_CASE("redis: a subscription is confirmed by its own acknowledgement, not an earlier one's",
          "[redis][notify]")
{
    asio::io_context io;
    // Every acknowledgement is held back; the test sends them when it chooses.
    fake_server server{io, [](const std::vector<std::string>&) { return std::string{}; }};
    dl::redis::config cfg;
    cfg.port = server.port();
    cfg.request_timeout = 20s;
    auto sub = make_subscriber(io, cfg);
    run(io, [&]() -> asio::awaitable<void> {
        const auto ex = co_await asio::this_coro::executor;
        // A waiter subscribes and leaves before Redis answered; another one comes.
        auto first = std::make_shared<dl::backend::wakeup>(ex);
        auto first_result = std::make_shared<std::optional<std::error_code>>();
        asio::co_spawn(ex, subscribe_into(sub, "ch", first, first_result), asio::detached);
        { const bool sent_ = co_await eventually([&] { return server.count("SUBSCRIBE") == 1; }); REQUIRE(sent_); }
        sub->unsubscribe("ch", first);
        auto second = std::make_shared<dl::backend::wakeup>(ex);
        auto second_result = std::make_shared<std::optional<std::error_code>>();
        asio::co_spawn(ex, subscribe_into(sub, "ch", second, second_result), asio::detached);
        { const bool sent_ = co_await eventually([&] { return server.count("SUBSCRIBE") == 2; }); REQUIRE(sent_); }
        CHECK(server.count("UNSUBSCRIBE") == 1);

        // The answers to SUBSCRIBE and UNSUBSCRIBE: the channel is not subscribed now.
        co_await server.say(ack("subscribe", "ch", 1) + ack("unsubscribe", "ch", 0));
        co_await settle(50ms);
        CHECK_FALSE(second_result->has_value());

        // The answer to the second SUBSCRIBE confirms it, and a release wakes its waiter.
        co_await server.say(ack("subscribe", "ch", 1));
        { const bool came_ = co_await eventually([&] { return second_result->has_value(); }); REQUIRE(came_); }
        CHECK_FALSE(second_result->value());
        auto woken = std::make_shared<bool>(false);
        asio::co_spawn(ex, wait_into(second, woken), asio::detached);
        co_await server.say(message("ch"));
        { const bool came_ = co_await eventually([&] { return *woken; }); CHECK(came_); }
        // The first waiter left before its answer: its subscribe() promised nothing.
        REQUIRE(first_result->has_value());
        CHECK(first_result->value() == dl::errc::cancelled);
    });
    sub->close();
    io.poll();
}

namespace {

std::string bulk(const std::string& text)
{
    return "$" + std::to_string(text.size()) + "\r\n" + text + "\r\n";
}

// A SCAN reply: the next cursor and the keys.
std::string scan_reply(const std::string& cursor, const std::vector<std::string>& keys)
{
    std::string out = "*2\r\n" + bulk(cursor) + "*" + std::to_string(keys.size()) + "\r\n";
    for (const auto& k : keys)
        out += bulk(k);
    return out;
}

// One lock as the survey script answers it: {owner, pttl, token, waiters}.
std::string surveyed(const std::string& owner, long long pttl, long long token, long long waiters)
{
    return "*4\r\n" + bulk(owner) + ":" + std::to_string(pttl) + "\r\n:" + std::to_string(token) + "\r\n:" +
           std::to_string(waiters) + "\r\n";
}

// A server that answers the handshake's INFO, and SCAN and scripts as the test says.
struct listing_server {
    std::string scan_answer;
    std::string script_answer;
    fake_server server;

    explicit listing_server(asio::io_context& io)
        : server{io, [this](const std::vector<std::string>& command) -> std::string {
              if (command[0] == "INFO")
                  return bulk("run_id:fake");
              if (command[0] == "SCAN")
                  return scan_answer;
              if (command[0] == "EVALSHA" || command[0] == "EVAL")
                  return script_answer;
              return "-ERR unexpected " + command[0] + "\r\n";
          }}
    {}

    dl::redis::config config() const
    {
        dl::redis::config cfg;
        cfg.port = server.port();
        cfg.request_timeout = 5s;
        return cfg;
    }
};

} // namespace

TEST_CASE("redis: list() pages through SCAN to cursor 0, reads only its own lock keys, and leaves out a lock gone "
          "meanwhile",
          "[redis][list]")
{
    asio::io_context io;
    fake_server server{io, [](const std::vector<std::string>& command) -> std::string {
                           if (command[0] == "INFO")
                               return bulk("run_id:fake");
                           if (command[0] == "SCAN" && command[1] == "0")
                               return scan_reply("17", {"distlock:{#b}:lock", "not-ours", "distlock:{#a}:queue"});
                           if (command[0] == "SCAN" && command[1] == "17")
                               return scan_reply("0", {"distlock:{#a}:lock", "distlock:{#gone}:lock",
                                                       std::string{"distlock:{#nul\0}:lock", 21}});
                           if (command[0] == "EVALSHA" && command.size() == 3 + 3) // one lock's three keys
                               return "*1\r\n" + surveyed("0123456789abcdef0123456789abcdef", 5000, 42, 3);
                           if (command[0] == "EVALSHA")
                               return "*3\r\n" + surveyed("fedcba98", 1000, 7, 0) + "$-1\r\n" +
                                      surveyed("01010101", -1, 9, -1);
                           return "-ERR unexpected " + command[0] + "\r\n";
                       }};
    dl::redis::config cfg;
    cfg.port = server.port();
    dl::redis::store store{io, cfg};
    run(io, [&]() -> asio::awaitable<void> {
        dl::diagnostics diag;
        auto listed = co_await store.list("", &diag);
        INFO(diag.to_string());
        REQUIRE(listed);
        REQUIRE(listed->size() == 3);
        CHECK((*listed)[0].resource == "a");
        CHECK((*listed)[0].lock.owner == "fedcba98");
        CHECK((*listed)[0].lock.fence == 7);
        CHECK((*listed)[0].lock.remaining == std::chrono::milliseconds{1000});
        CHECK((*listed)[0].waiters == std::optional<std::size_t>{0});
        CHECK((*listed)[1].resource == "b");
        CHECK((*listed)[1].lock.owner == "01234567");
        CHECK((*listed)[1].lock.fence == 42);
        CHECK((*listed)[1].waiters == std::optional<std::size_t>{3});
        CHECK((*listed)[2].resource == std::string{"nul\0", 4});
        CHECK_FALSE((*listed)[2].lock.remaining); // no TTL
        CHECK_FALSE((*listed)[2].waiters);        // a queue that is not one
    });
    // Two pages, the second from the first's cursor, both with the pattern and a
    // bounded COUNT; each page's own lock keys read in one script, with their queues.
    std::vector<std::vector<std::string>> scans, scripts;
    for (const auto& c : server.s->received) {
        if (c[0] == "SCAN")
            scans.push_back(c);
        if (c[0] == "EVALSHA" || c[0] == "EVAL")
            scripts.push_back(c);
    }
    REQUIRE(scans.size() == 2);
    CHECK(scans[1][1] == "17");
    for (const auto& scan : scans) {
        REQUIRE(scan.size() == 6);
        CHECK(scan[2] == "MATCH");
        CHECK(scan[3] == "distlock:{#*}:lock");
        CHECK(scan[4] == "COUNT");
        CHECK(scan[5] == std::to_string(dl::redis::store::scan_count));
    }
    REQUIRE(scripts.size() == 2);
    CHECK(scripts[0] == std::vector<std::string>{"EVALSHA", scripts[0][1], "3", "distlock:{#b}:lock",
                                                 "distlock:{#b}:queue", "distlock:{#b}:offers"});
    CHECK(scripts[1][2] == "9");
    CHECK(scripts[1][3] == "distlock:{#a}:lock");
    CHECK(scripts[1][6] == "distlock:{#gone}:lock");
    store.disconnect();
    io.poll();
}

TEST_CASE("redis: replies to list() and revoke() that make no sense are protocol_error, described in the diagnostics",
          "[redis][list][revoke][input]")
{
    asio::io_context io;
    listing_server fake{io};
    dl::redis::store store{io, fake.config()};
    const std::string one_lock = scan_reply("0", {"distlock:{#a}:lock"});
    struct hostile {
        std::string scan;
        std::string script;
        std::string words; // in the server message
    };
    const std::vector<hostile> listings{
        {"+OK\r\n", "", "\"OK\""},
        {":12\r\n", "", "12"},
        {"*1\r\n$1\r\n0\r\n", "", "[\"0\"]"},
        {scan_reply("abc", {}), "", "\"abc\""},
        {scan_reply("-1", {}), "", "\"-1\""},
        {scan_reply("123456789012345678901", {}), "", "123456789012345678901"},
        {"*2\r\n$1\r\n0\r\n*1\r\n:5\r\n", "", "[\"0\", [5]]"},
        {"*2\r\n$1\r\n0\r\n$3\r\nkey\r\n", "", "\"key\""},
        {one_lock, ":7\r\n", "7"},
        {one_lock, "*0\r\n", "[]"},
        {one_lock, "*2\r\n$-1\r\n$-1\r\n", "[null, null]"},
        {one_lock, "*1\r\n:1\r\n", "[1]"},
        {one_lock, "*1\r\n*4\r\n:1\r\n:2\r\n:3\r\n:4\r\n", "[[1, 2, 3, 4]]"},
        {one_lock, "*1\r\n*3\r\n$1\r\nx\r\n:2\r\n:3\r\n", "[[\"x\", 2, 3]]"},
        {one_lock, "*1\r\n" + surveyed("x", 1, -5, 0), "-5"},
        {one_lock, "*1\r\n" + surveyed("x", 1, 5, -2), "-2"},
        {one_lock, "*1\r\n*4\r\n$1\r\nx\r\n$1\r\n1\r\n:5\r\n:0\r\n", "[[\"x\", \"1\", 5, 0]]"},
        {one_lock, "*1\r\n" + surveyed(std::string{"\r\n\0\xff", 4}, 1, 5, -3), "\\x0d\\x0a\\x00\\xff"},
    };
    run(io, [&]() -> asio::awaitable<void> {
        for (const auto& h : listings) {
            fake.scan_answer = h.scan;
            fake.script_answer = h.script;
            dl::diagnostics diag;
            auto listed = co_await store.list("", &diag);
            INFO("SCAN answered " << h.scan << ", the script " << h.script << "; " << diag.to_string());
            REQUIRE_FALSE(listed);
            CHECK(listed.error() == dl::errc::protocol_error);
            CHECK(diag.server_message().find(h.words) != std::string_view::npos);
            CHECK(diag.client_message().starts_with("unexpected reply"));
        }
        // Refusals are the server's, in its words.
        fake.scan_answer = "-ERR unknown command 'SCAN'\r\n";
        dl::diagnostics refused;
        auto unknown = co_await store.list("", &refused);
        REQUIRE_FALSE(unknown);
        CHECK(unknown.error() == dl::errc::store_unavailable);
        CHECK(refused.server_message() == "ERR unknown command 'SCAN'");
        fake.scan_answer = one_lock;
        fake.script_answer = "-BUSY a script runs\r\n";
        dl::diagnostics busy;
        auto busy_listing = co_await store.list("", &busy);
        REQUIRE_FALSE(busy_listing);
        CHECK(busy_listing.error() == dl::errc::store_unavailable);
        CHECK(busy.server_message() == "BUSY a script runs");

        for (const auto& [answer, words] : std::vector<std::pair<std::string, std::string>>{
                 {":7\r\n", "7"}, {":-1\r\n", "-1"}, {"$1\r\n1\r\n", "\"1\""}, {"*0\r\n", "[]"}, {"$-1\r\n", "null"},
                 {"*1\r\n:1\r\n", "[1]"}}) {
            fake.script_answer = answer;
            dl::diagnostics diag;
            auto revoked = co_await store.revoke("a", 42, &diag);
            INFO("the script answered " << answer << "; " << diag.to_string());
            REQUIRE_FALSE(revoked);
            CHECK(revoked.error() == dl::errc::protocol_error);
            CHECK(diag.server_message() == words);
        }
        fake.script_answer = ":1\r\n";
        auto revoked = co_await store.revoke("a", 42);
        CHECK(revoked);
        fake.script_answer = ":0\r\n";
        auto not_that_one = co_await store.revoke("a", 42);
        REQUIRE_FALSE(not_that_one);
        CHECK(not_that_one.error() == dl::errc::not_owner);
        fake.script_answer = "-ERR boom\r\n";
        dl::diagnostics boom;
        auto failed = co_await store.revoke("a", 42, &boom);
        REQUIRE_FALSE(failed);
        CHECK(failed.error() == dl::errc::store_unavailable);
        CHECK(boom.server_message() == "ERR boom");
        // Bytes that are not RESP at all: the connection is dropped, nothing thrown.
        fake.scan_answer = "?not resp\r\n";
        dl::diagnostics garbage;
        auto unparsed = co_await store.list("", &garbage);
        REQUIRE_FALSE(unparsed);
        CHECK(unparsed.error() == dl::errc::protocol_error);
    });
    // The revoke script names the lock, its slot's fence key and its queue's keys,
    // then the fence in decimal, the release channel, the channel kind and the
    // lock-delay mark's key (an argument: see docs/redis.md, Lock-delay).
    const auto found = std::find_if(fake.server.s->received.rbegin(), fake.server.s->received.rend(),
                                    [](const auto& c) { return c[0] == "EVALSHA" && c.size() == 11; });
    REQUIRE(found != fake.server.s->received.rend());
    const auto& last_revoke = *found;
    CHECK(last_revoke[2] == "4");
    CHECK(last_revoke[3] == "distlock:{#a}:lock");
    CHECK(last_revoke[4] == store.fence_key("a"));
    CHECK(last_revoke[5] == "distlock:{#a}:queue");
    CHECK(last_revoke[6] == "distlock:{#a}:offers");
    CHECK(last_revoke[7] == "42");
    CHECK(last_revoke[8] == "distlock:{#a}:released");
    CHECK(last_revoke[9] == "0");
    CHECK(last_revoke[10] == store.delay_key("a"));
    store.disconnect();
    io.poll();
}
