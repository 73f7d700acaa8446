// The store conformance suite on DynamoDB (dynalite): three clients of one table,
// reaching the server through a fault proxy that loses replies on demand; and what
// only this store does: its item layout, its error mapping, its URL.
#include "conformance/suite.hpp"
#include "dynamodb/dynalite.hpp"
#include "fault/proxy.hpp"

#include <array>
#include <memory>

namespace {

using namespace std::chrono_literals;
namespace dl = distlock;
namespace ddb = distlock::dynamodb;

// Makes the table (once per server) through a store of its own.
void create_table(const test::dynalite_server& server)
{
    asio::io_context io;
    ddb::store s{io, server.config()};
    test::run(io, [&]() -> asio::awaitable<void> {
        dl::diagnostics diag;
        auto made = co_await s.create_table(30s, &diag);
        INFO(diag.to_string());
        REQUIRE(made);
        co_await s.close();
    });
}

// One request on a connection of its own, for the fixture's look behind the clients.
dl::result<nlohmann::json> direct(const test::dynalite_server& server, std::string_view operation, nlohmann::json body)
{
    asio::io_context io;
    ddb::store s{io, server.config()};
    dl::result<nlohmann::json> out{make_error_code(dl::errc::store_unavailable)};
    test::run(io, [&]() -> asio::awaitable<void> {
        out = co_await s.execute(operation, std::move(body));
        co_await s.close();
    });
    return out;
}

nlohmann::json key_of(std::string_view resource)
{
    return {{"resource", {{"B", ddb::detail::base64(resource)}}}};
}

struct dynamodb_expiry {
    static constexpr const char* name = "dynamodb_expiry";
    using backend = ddb::store;
    static constexpr bool notifies = false;
    static constexpr bool quorum = false;
    test::dynalite_server server;
    fault::proxy net{server.port()};
    asio::io_context io;
    std::array<std::unique_ptr<backend>, 3> clients;

    dynamodb_expiry()
    {
        create_table(server);
        auto cfg = server.config();
        cfg.port = net.port();
        for (auto& c : clients)
            c = std::make_unique<backend>(io, cfg);
        // Connected, so that a test's next request is its own (a lost reply is the lock's).
        test::run(io, [&]() -> asio::awaitable<void> {
            for (auto& c : clients) {
                auto r = co_await c->read("conf:warm-up");
                REQUIRE(r);
            }
        });
    }

    backend& client(std::size_t i) { return *clients[i]; }

    bool held(std::string_view resource) const
    {
        auto item = direct(server, "GetItem",
                           {{"TableName", "distlock_test"}, {"Key", key_of(resource)}, {"ConsistentRead", true}});
        REQUIRE(item);
        const auto found = item.value().find("Item");
        return found != item.value().end() && found->contains("owner");
    }

    // As if the lease's TTL had run out: its expiry moves into the past.
    void end_lock(const dl::lease& l)
    {
        auto r = direct(server, "UpdateItem",
                        {{"TableName", "distlock_test"},
                         {"Key", key_of(l.resource())},
                         {"UpdateExpression", "SET expiresAt = :past"},
                         {"ExpressionAttributeValues", {{":past", {{"N", "0"}}}}}});
        REQUIRE(r);
    }

    // Only the client asking is doing I/O when a test loses a reply.
    void lose_next_reply(std::size_t) { net.set(fault::direction::to_client, {.close_after = 0}); }
    asio::awaitable<void> close(std::size_t i) { return clients[i]->close(); }
    static dl::duration longest_validity(const dl::lock_options& o) { return o.ttl - o.drift(); }
};

} // namespace

DISTLOCK_CONFORMANCE("[dynamodb]", dynamodb_expiry)

TEST_CASE("dynamodb: the fence lives in the item and grows across releases; release never deletes it",
          "[dynamodb]")
{
    test::dynalite_server server;
    create_table(server);
    asio::io_context io;
    ddb::store store{io, server.config()};
    test::run(io, [&]() -> asio::awaitable<void> {
        dl::basic_distributed_mutex<ddb::store, dl::retry::none> m{store, "ddb:fence", {.ttl = 10s}};
        dl::fence_token last = 0;
        for (int i = 0; i < 3; ++i) {
            auto l = co_await m.lock();
            REQUIRE(l);
            CHECK(l->fence() == last + 1);
            last = l->fence();
            { const auto ok_ = co_await l->unlock(); REQUIRE(ok_); }
        }
        auto info = co_await store.read("ddb:fence");
        REQUIRE(info);
        CHECK_FALSE(info->held);
        CHECK(info->fence == 3);
        co_await store.close();
    });
}

TEST_CASE("dynamodb: a missing table and a bad request are clear errors with the server's words",
          "[dynamodb][input]")
{
    test::dynalite_server server;
    asio::io_context io;
    ddb::store store{io, server.config("no_such_table")};
    test::run(io, [&]() -> asio::awaitable<void> {
        dl::basic_distributed_mutex<ddb::store> m{store, "ddb:missing", {.ttl = 10s}};
        dl::diagnostics diag;
        auto l = co_await m.lock(diag);
        REQUIRE_FALSE(l);
        CHECK(l.error() == ddb::errc::missing_table);
        CHECK(l.error() == dl::condition::invalid_argument); // not retried until the deadline
        CHECK(diag.server_message().find("ResourceNotFoundException") != std::string_view::npos);

        nlohmann::json no_key; // an UpdateItem without its Key
        no_key["TableName"] = "no_such_table";
        auto bad = co_await store.execute("UpdateItem", std::move(no_key));
        REQUIRE_FALSE(bad);
        CHECK(bad.error() == ddb::errc::validation);
        co_await store.close();
    });
}

TEST_CASE("dynamodb: URLs and settings are checked before any I/O", "[dynamodb][input]")
{
    auto c = ddb::config::from_url("dynamodb://127.0.0.1:8123?table=locks&region=eu-west-1");
    REQUIRE(c);
    CHECK(c->host == "127.0.0.1");
    CHECK(c->port == 8123);
    CHECK(c->table == "locks");
    CHECK(c->region == "eu-west-1");
    CHECK_FALSE(c->tls);
    auto s = ddb::config::from_url("dynamodbs://dynamodb.eu-west-1.amazonaws.com?table=locks");
    REQUIRE(s);
    CHECK(s->tls);
    CHECK(s->port == 443);
    for (const auto* bad : {"redis://x", "dynamodb://", "dynamodb://h:0", "dynamodb://h:99999", "dynamodb://h?table=x",
                            "dynamodb://h?tabel=locks", "dynamodb://h?table", "dynamodb://h?table=bad name"}) {
        INFO(bad);
        auto r = ddb::config::from_url(bad);
        REQUIRE_FALSE(r);
        CHECK(r.error() == dl::errc::invalid_argument);
    }
    ddb::config zero;
    zero.request_timeout = dl::duration::zero();
    CHECK(zero.validate() == dl::errc::invalid_argument);
    ddb::config negative;
    negative.clock_skew_margin = -1s;
    CHECK(negative.validate() == dl::errc::invalid_argument);
}

TEST_CASE("dynamodb: a server answering garbage is a protocol error, not a hang", "[dynamodb][input]")
{
    asio::io_context io;
    asio::ip::tcp::acceptor acceptor{io, {asio::ip::make_address("127.0.0.1"), 0}};
    // Answers every connection with bytes that are not HTTP, then closes it.
    asio::co_spawn(
        io,
        [&]() -> asio::awaitable<void> {
            for (;;) {
                auto [ec, socket] = co_await acceptor.async_accept(asio::experimental::as_tuple(asio::use_awaitable));
                if (ec)
                    co_return;
                char buf[4096];
                (void)co_await socket.async_read_some(asio::buffer(buf), asio::experimental::as_tuple(asio::use_awaitable));
                const std::string garbage = "HTTP/1.1 200 OK\r\nContent-Length: nope\r\n\r\n{}";
                (void)co_await asio::async_write(socket, asio::buffer(garbage),
                                                 asio::experimental::as_tuple(asio::use_awaitable));
            }
        },
        asio::detached);
    ddb::config cfg;
    cfg.port = acceptor.local_endpoint().port();
    cfg.credentials = {"AKIDEXAMPLE", "secret", ""};
    ddb::store store{io, cfg};
    test::run(io, [&]() -> asio::awaitable<void> {
        dl::diagnostics diag;
        auto r = co_await store.read("ddb:garbage", &diag);
        REQUIRE_FALSE(r);
        CHECK(r.error() == dl::errc::protocol_error);
        CHECK(diag.client_message().find("unparseable") != std::string_view::npos);
        co_await store.close();
        acceptor.close();
    });
}

TEST_CASE("dynamodb: the CRC-32 of x-amz-crc32 and the base64 of Binary keys", "[dynamodb]")
{
    CHECK(ddb::detail::crc32("123456789") == 0xCBF43926u); // the standard check value
    CHECK(ddb::detail::crc32("") == 0u);
    CHECK(ddb::detail::base64("") == "");
    CHECK(ddb::detail::base64("a") == "YQ==");
    CHECK(ddb::detail::base64("ab") == "YWI=");
    CHECK(ddb::detail::base64("abc") == "YWJj");
    CHECK(ddb::detail::base64(std::string{"\0\xff\x10", 3}) == "AP8Q");
}
