// The pub/sub subscriber and the handshake against scripted fake servers: what a
// real server does too quickly or too rarely to test (LOADING during the
// handshake, acknowledgements held back).
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
