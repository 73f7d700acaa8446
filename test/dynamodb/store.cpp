// The DynamoDB store against dynalite (test/support/dynalite_server.hpp), beyond the
// conformance suite: record-version takeover, heartbeats, clocks that disagree,
// fenced writes, throttling and server errors, its error mapping, its URL, its
// credentials, multi-locks, a grant answered too late, listings read page by page,
// revocation by fence, Scan answers the decoder refuses, shared grants (their steps,
// their decoder, record-version takeover of a dead reader, permits under contention).
#include "dynamodb/dynamodb_support.hpp"
#include "fault/proxy.hpp"

#include <distlock/basic_distributed_semaphore.hpp>

#include <asio/detached.hpp>
#include <asio/read.hpp>
#include <asio/read_until.hpp>
#include <asio/steady_timer.hpp>
#include <asio/write.hpp>

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdlib>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

using namespace test::dynamodb_tests;

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

TEST_CASE("dynamodb: URLs are checked before any I/O", "[dynamodb][input]")
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

namespace {

// A holder whose process dies while it holds `resource`: its store goes away without
// releasing (the lease outlives the store, so its release finds the store closed and
// sends nothing). Returns the dead holder's fence.
dl::fence_token die_holding(const ddb::config& cfg, std::string_view resource, dl::duration ttl)
{
    asio::io_context io;
    std::optional<dl::lease> kept;
    {
        ddb::store dying{io, cfg};
        test::run(io, [&]() -> asio::awaitable<void> {
            dl::basic_distributed_mutex<ddb::store, dl::retry::none> m{dying, std::string{resource}, {.ttl = ttl}};
            auto l = co_await m.lock();
            REQUIRE(l);
            kept.emplace(std::move(*l));
        });
    }
    const auto fence = kept->fence();
    kept.reset();
    io.run();
    return fence;
}

} // namespace

TEST_CASE("dynamodb: record versions: a dead holder's lock is taken over only after a whole lease of watching",
          "[dynamodb]")
{
    test::dynalite_server server;
    create_table(server);
    const auto cfg = server.config();
    REQUIRE(cfg.mode == ddb::lease_mode::record_version); // the default
    const auto dead = die_holding(cfg, "ddb:dead", 800ms);

    asio::io_context io;
    ddb::store waiter{io, cfg};
    test::run(io, [&]() -> asio::awaitable<void> {
        auto info = co_await waiter.read("ddb:dead");
        REQUIRE(info);
        CHECK(info->held); // nobody released it
        CHECK(info->version.has_value());
        CHECK_FALSE(info->remaining.has_value()); // no clock of day is trusted to say

        dl::basic_distributed_mutex<ddb::store, dl::retry::fixed> m{
            waiter, "ddb:dead", {.ttl = 800ms}, dl::retry::fixed{.delay = 20ms}};
        // Watching starts at the first refused attempt, after lock_until() began: a
        // deadline shorter than the dead holder's lease can never be met.
        auto early = co_await m.lock_until(dl::clock::now() + 400ms);
        REQUIRE_FALSE(early);
        CHECK(early.error() == dl::errc::timeout);
        auto later = co_await m.lock();
        REQUIRE(later);
        CHECK(later->fence() > dead);
        { const auto ok_ = co_await later->unlock(); REQUIRE(ok_); }
        co_await waiter.close();
    });
}

TEST_CASE("dynamodb: a live holder's heartbeats keep a watcher out: each writes a new version", "[dynamodb]")
{
    test::dynalite_server server;
    create_table(server);
    asio::io_context io;
    ddb::store holder{io, server.config()}, watcher{io, server.config()};
    test::run(io, [&]() -> asio::awaitable<void> {
        // Heartbeats every 100 ms (a third of the TTL); the watcher tries for over three
        // lease durations and must never see one version for a whole lease.
        dl::basic_distributed_mutex<ddb::store, dl::retry::none, dl::renew::watchdog> a{holder, "ddb:alive",
                                                                                       {.ttl = 300ms}};
        dl::basic_distributed_mutex<ddb::store, dl::retry::fixed> b{
            watcher, "ddb:alive", {.ttl = 300ms}, dl::retry::fixed{.delay = 20ms}};
        auto first = co_await a.lock();
        REQUIRE(first);
        const auto v1 = (co_await watcher.read("ddb:alive"))->version;
        auto second = co_await b.lock_until(dl::clock::now() + 1s);
        const auto v2 = (co_await watcher.read("ddb:alive"))->version;
        if (first->valid()) { // the holder kept up with its heartbeats (a stalled machine may not)
            CHECK_FALSE(second);
            CHECK(v1 != v2);
        }
        if (second)
            (void)co_await second->unlock();
        (void)co_await first->unlock();
        co_await holder.close();
        co_await watcher.close();
    });
}

TEST_CASE("dynamodb: clocks of day ten minutes apart: record versions keep exclusion, expiry times do not",
          "[dynamodb][skew]")
{
    test::dynalite_server server;
    create_table(server);
    for (const auto mode : {ddb::lease_mode::record_version, ddb::lease_mode::expiry_time}) {
        const bool by_version = mode == ddb::lease_mode::record_version;
        INFO((by_version ? "record_version" : "expiry_time"));
        const std::string resource = by_version ? "ddb:skew-version" : "ddb:skew-expiry";
        auto cfg = server.config();
        cfg.mode = mode;
        auto ahead = cfg;
        ahead.wall_clock = [] { return std::chrono::system_clock::now() + 10min; };
        asio::io_context io;
        ddb::store honest{io, cfg}, fast{io, ahead};
        test::run(io, [&]() -> asio::awaitable<void> {
            dl::basic_distributed_mutex<ddb::store, dl::retry::none> a{honest, resource, {.ttl = 30s}};
            dl::basic_distributed_mutex<ddb::store, dl::retry::fixed> b{fast, resource, {.ttl = 30s},
                                                                        dl::retry::fixed{.delay = 20ms}};
            auto first = co_await a.lock();
            REQUIRE(first);
            auto second = co_await b.lock_until(dl::clock::now() + 500ms);
            if (by_version) {
                REQUIRE_FALSE(second);
                CHECK(second.error() == dl::errc::timeout);
                CHECK(first->valid());
                { const auto ok_ = co_await first->unlock(); CHECK(ok_); }
            } else {
                // The documented limit of expiry_time: the fast clock reads the honest
                // holder's expiry as long past, and takes the lock while it is held.
                REQUIRE(second);
                CHECK(first->valid());
                CHECK(second->valid());
                CHECK(second->fence() > first->fence());
                auto stale = co_await first->unlock();
                CHECK_FALSE(stale); // not the owner any more
                { const auto ok_ = co_await second->unlock(); CHECK(ok_); }
            }
            co_await honest.close();
            co_await fast.close();
        });
    }
}

TEST_CASE("dynamodb: fenced_update lets the newest holder write and shuts out an older one", "[dynamodb][fence]")
{
    test::dynalite_server server;
    create_table(server);
    {
        asio::io_context io;
        ddb::store data{io, server.config("wallets")};
        test::run(io, [&]() -> asio::awaitable<void> {
            REQUIRE(co_await data.create_table());
            co_await data.close();
        });
    }
    asio::io_context io;
    ddb::store a_store{io, server.config()}, b_store{io, server.config()};
    const nlohmann::json wallet = {{"resource", {{"B", ddb::detail::base64("wallet-1")}}}};
    const auto debit = [&](ddb::store& s, dl::fence_token token, int balance) {
        nlohmann::json values = {{":b", {{"N", std::to_string(balance)}}}};
        return s.fenced_update("wallets", wallet, token, "balance = :b", nlohmann::json::object(), std::move(values));
    };
    test::run(io, [&]() -> asio::awaitable<void> {
        dl::basic_distributed_mutex<ddb::store, dl::retry::none> a{a_store, "ddb:wallet-1", {.ttl = 10s}};
        dl::basic_distributed_mutex<ddb::store, dl::retry::fixed> b{b_store, "ddb:wallet-1", {.ttl = 10s},
                                                                    dl::retry::fixed{.delay = 20ms}};
        auto first = co_await a.lock();
        REQUIRE(first);
        REQUIRE(co_await debit(a_store, first->fence(), 90));
        // The first holder stalls; its lease runs out (as if it had stopped
        // heartbeating for a lease duration) and the second takes the lock.
        auto r = direct(server, "UpdateItem",
                        {{"TableName", "distlock_test"},
                         {"Key", key_of("ddb:wallet-1")},
                         {"UpdateExpression", "SET leaseDuration = :zero"},
                         {"ExpressionAttributeValues", {{":zero", {{"N", "0"}}}}}});
        REQUIRE(r);
        auto second = co_await b.lock();
        REQUIRE(second);
        REQUIRE(second->fence() > first->fence());
        REQUIRE(co_await debit(b_store, second->fence(), 80));
        REQUIRE(co_await debit(b_store, second->fence(), 70)); // the same token again: allowed
        // The stalled holder wakes up and writes with its old token: refused by the data.
        auto stale = co_await debit(a_store, first->fence(), 0);
        REQUIRE_FALSE(stale);
        CHECK(stale.error() == dl::errc::stale_fence);
        // Built outside the co_await: g++ 12 cannot compile a braced list inside one.
        nlohmann::json get = {{"TableName", "wallets"}, {"Key", wallet}, {"ConsistentRead", true}};
        auto item = co_await a_store.execute("GetItem", std::move(get));
        REQUIRE(item);
        CHECK(item.value()["Item"]["balance"]["N"] == "70");
        CHECK(item.value()["Item"]["fence"]["N"] == std::to_string(second->fence()));

        // Bad input, before any I/O.
        std::vector<dl::result<void>> bad;
        bad.push_back(co_await debit(a_store, 0, 1));
        bad.push_back(co_await a_store.fenced_update("wallets", wallet, 5, std::string{}));
        bad.push_back(co_await a_store.fenced_update("wallets", nlohmann::json::object(), 5, std::string{"x = :x"}));
        nlohmann::json taken_name = {{"#distlock_f", "y"}};
        bad.push_back(co_await a_store.fenced_update("wallets", wallet, 5, std::string{"x = :x"}, taken_name));
        for (const auto& r : bad) {
            REQUIRE_FALSE(r);
            CHECK(r.error() == dl::errc::invalid_argument);
        }
        (void)co_await first->unlock();
        (void)co_await second->unlock();
        co_await a_store.close();
        co_await b_store.close();
    });
}

namespace {

// A DynamoDB endpoint on loopback that answers every request with one HTTP status and
// JSON body, and keeps each request's body, for the tests of error answers that
// dynalite cannot produce.
class scripted_endpoint {
public:
    scripted_endpoint(asio::io_context& io, int status, std::string body)
        : acceptor_{io, {asio::ip::make_address("127.0.0.1"), 0}}, status_{status}, body_{std::move(body)}
    {
        asio::co_spawn(io, accept(), asio::detached);
    }
    std::uint16_t port() const { return acceptor_.local_endpoint().port(); }
    const std::vector<std::string>& requests() const { return requests_; }
    void stop() { acceptor_.close(); }

private:
    asio::awaitable<void> accept()
    {
        for (;;) {
            auto [ec, socket] = co_await acceptor_.async_accept(asio::experimental::as_tuple(asio::use_awaitable));
            if (ec)
                co_return;
            asio::co_spawn(acceptor_.get_executor(), serve(std::move(socket)), asio::detached);
        }
    }
    asio::awaitable<void> serve(asio::ip::tcp::socket socket)
    {
        std::string in;
        for (;;) {
            auto [ec, n] = co_await asio::async_read_until(socket, asio::dynamic_buffer(in), "\r\n\r\n",
                                                           asio::experimental::as_tuple(asio::use_awaitable));
            if (ec)
                co_return;
            std::string head = in.substr(0, n);
            in.erase(0, n);
            std::size_t length = 0;
            for (auto& c : head)
                c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
            if (const auto at = head.find("content-length:"); at != std::string::npos)
                length = std::stoul(head.substr(at + 15));
            if (in.size() < length) {
                auto [rec, got] = co_await asio::async_read(socket, asio::dynamic_buffer(in),
                                                            asio::transfer_exactly(length - in.size()),
                                                            asio::experimental::as_tuple(asio::use_awaitable));
                if (rec)
                    co_return;
            }
            requests_.push_back(in.substr(0, length));
            in.erase(0, length);
            const std::string reply = "HTTP/1.1 " + std::to_string(status_) + " Scripted\r\nContent-Type: "
                                      "application/x-amz-json-1.0\r\nContent-Length: " +
                                      std::to_string(body_.size()) + "\r\n\r\n" + body_;
            auto [wec, w] = co_await asio::async_write(socket, asio::buffer(reply),
                                                       asio::experimental::as_tuple(asio::use_awaitable));
            if (wec)
                co_return;
        }
    }

    asio::ip::tcp::acceptor acceptor_;
    int status_;
    std::string body_;
    std::vector<std::string> requests_;
};

} // namespace

TEST_CASE("dynamodb: throttling and server errors may have been applied: the grant is given back by owner",
          "[dynamodb][fault]")
{
    struct error_answer {
        int status;
        std::string body;
        std::string words;
        ddb::errc code;
    };
    const std::vector<error_answer> answers{
        {400,
         R"({"__type":"com.amazonaws.dynamodb.v20120810#ThrottlingException","message":"Rate of requests exceeds the allowed throughput."})",
         "ThrottlingException", ddb::errc::throttled},
        {400, R"({"__type":"com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException","message":"over"})",
         "ProvisionedThroughputExceededException", ddb::errc::throttled},
        {500, R"({"__type":"com.amazon.coral.availability#ServiceUnavailableException","message":"down"})",
         "ServiceUnavailableException", ddb::errc::server_error}};
    for (const auto& a : answers) {
        INFO(a.words);
        asio::io_context io;
        scripted_endpoint endpoint{io, a.status, a.body};
        ddb::config cfg;
        cfg.port = endpoint.port();
        cfg.table = "distlock_test";
        cfg.credentials = {"AKIDEXAMPLE", "secret", ""};
        ddb::store store{io, cfg};
        test::run(io, [&]() -> asio::awaitable<void> {
            dl::basic_distributed_mutex<ddb::store> m{store, "ddb:throttled", {.ttl = 10s}};
            dl::diagnostics diag;
            auto l = co_await m.try_lock(diag);
            REQUIRE_FALSE(l);
            CHECK(l.error() == a.code);
            CHECK(l.error() == dl::condition::maybe_applied);
            CHECK(diag.server_message().find(a.words) != std::string_view::npos);
            co_await store.close(); // waits for the clean-up still pending
            endpoint.stop();
        });
        // The acquisition, then releases by the same owner (retried, as each answer
        // leaves it unknown whether it arrived).
        const auto& sent = endpoint.requests();
        REQUIRE(sent.size() >= 2);
        const auto acquire = nlohmann::json::parse(sent.front());
        const auto owner = acquire["ExpressionAttributeValues"][":o"]["S"];
        CHECK(acquire["UpdateExpression"].get<std::string>().find("ADD fence") != std::string::npos);
        for (std::size_t i = 1; i < sent.size(); ++i) {
            const auto release = nlohmann::json::parse(sent[i]);
            CHECK(release["UpdateExpression"].get<std::string>().starts_with("REMOVE #o"));
            CHECK(release["ExpressionAttributeValues"][":o"]["S"] == owner);
        }
    }
}

TEST_CASE("dynamodb: guarded_update checks the lock item's fence and writes the item in one transaction",
          "[dynamodb][fence]")
{
    // dynalite has no TransactWriteItems: the request and the reading of its answers
    // are checked against a scripted endpoint (real DynamoDB's answers, as documented).
    struct case_ {
        int status;
        std::string body;
        std::error_code expected;
    };
    const std::vector<case_> cases{
        {200, "{}", {}},
        {400,
         R"({"__type":"com.amazonaws.dynamodb.v20120810#TransactionCanceledException","Message":"Transaction cancelled, please refer cancellation reasons for specific reasons [ConditionalCheckFailed, None]","CancellationReasons":[{"Code":"ConditionalCheckFailed","Message":"The conditional request failed"},{"Code":"None"}]})",
         make_error_code(dl::errc::stale_fence)},
        {400,
         R"({"__type":"com.amazonaws.dynamodb.v20120810#TransactionCanceledException","Message":"Transaction cancelled [None, TransactionConflict]","CancellationReasons":[{"Code":"None"},{"Code":"TransactionConflict"}]})",
         ddb::errc::refused},
        {400,
         R"({"__type":"com.amazonaws.dynamodb.v20120810#TransactionCanceledException","Message":"x","CancellationReasons":"ConditionalCheckFailed"})",
         make_error_code(dl::errc::protocol_error)}};
    for (const auto& c : cases) {
        INFO(c.body);
        asio::io_context io;
        scripted_endpoint endpoint{io, c.status, c.body};
        ddb::config cfg;
        cfg.port = endpoint.port();
        cfg.table = "locks";
        cfg.credentials = {"AKIDEXAMPLE", "secret", ""};
        ddb::store store{io, cfg};
        test::run(io, [&]() -> asio::awaitable<void> {
            const nlohmann::json key = {{"id", {{"S", "wallet-1"}}}};
            const nlohmann::json values = {{":b", {{"N", "70"}}}};
            auto wrote = co_await store.guarded_update("wallet:1", 7, "wallets", key, "balance = :b",
                                                       nlohmann::json::object(), values);
            if (c.expected)
                CHECK(wrote.error() == c.expected);
            else
                CHECK(wrote);
            // Refused before any request: no token, no assignments, an empty resource.
            CHECK((co_await store.guarded_update("wallet:1", 0, "wallets", key, "balance = :b")).error() ==
                  dl::errc::invalid_argument);
            CHECK((co_await store.guarded_update("", 7, "wallets", key, "balance = :b")).error() ==
                  dl::errc::invalid_argument);
            CHECK((co_await store.guarded_update("wallet:1", 7, "wallets", key, "")).error() ==
                  dl::errc::invalid_argument);
            co_await store.close();
            endpoint.stop();
        });
        REQUIRE(endpoint.requests().size() == 1);
        const auto sent = nlohmann::json::parse(endpoint.requests().front());
        const auto& items = sent["TransactItems"];
        REQUIRE(items.size() == 2);
        const auto& lock = items[0]["ConditionCheck"];
        CHECK(lock["TableName"] == "locks");
        CHECK(lock["Key"]["resource"]["B"] == dl::util::base64("wallet:1"));
        CHECK(lock["ConditionExpression"] == "attribute_exists(#o) AND fence = :t");
        CHECK(lock["ExpressionAttributeNames"]["#o"] == "owner");
        CHECK(lock["ExpressionAttributeValues"][":t"]["N"] == "7");
        const auto& update = items[1]["Update"];
        CHECK(update["TableName"] == "wallets");
        CHECK(update["Key"]["id"]["S"] == "wallet-1");
        CHECK(update["UpdateExpression"] == "SET balance = :b");
        CHECK(update["ExpressionAttributeValues"][":b"]["N"] == "70");
    }
}

TEST_CASE("dynamodb: credentials of the wrong shape are refused before any request", "[dynamodb][input]")
{
    // Port 1 is closed: a request that went out would fail as store_unavailable.
    const std::vector<ddb::credentials> bad{{"", "secret", ""},
                                            {"AKIDEXAMPLE", "", ""},
                                            {"AKID EXAMPLE", "secret", ""},
                                            {"AKIDEXAMPLE\r\nX-Injected: 1", "secret", ""},
                                            {"AKIDEXAMPLE", "sec ret", ""},
                                            {"AKIDEXAMPLE", "secret", "token\nX-Injected: 1"},
                                            {std::string(129, 'A'), "secret", ""}};
    for (const auto& creds : bad) {
        INFO(creds.access_key_id << " / " << creds.secret_access_key << " / " << creds.session_token);
        CHECK_FALSE(creds.well_formed());
        asio::io_context io;
        ddb::config cfg;
        cfg.port = 1;
        cfg.credentials = creds;
        if (cfg.credentials.empty()) // the environment would fill empty credentials in
            continue;
        ddb::store store{io, cfg};
        test::run(io, [&]() -> asio::awaitable<void> {
            auto r = co_await store.read("ddb:creds");
            REQUIRE_FALSE(r);
            CHECK(r.error() == ddb::errc::malformed_credentials);
            CHECK(r.error() == dl::condition::invalid_argument);
            dl::basic_distributed_mutex<ddb::store> m{store, "ddb:creds", {.ttl = 1s}};
            auto l = co_await m.lock();
            REQUIRE_FALSE(l);
            CHECK(l.error() == ddb::errc::malformed_credentials);
            co_await store.close();
        });
    }
    CHECK(ddb::credentials{"AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", "IQoJb3JpZ2luX2VjE="}.well_formed());
}

TEST_CASE("dynamodb: no credentials anywhere is said as such, naming where they are looked for",
          "[dynamodb][input]")
{
    // The store reads the environment when the settings carry no credentials.
    struct saved_variable {
        const char* name;
        std::optional<std::string> value;
        explicit saved_variable(const char* n) : name{n}
        {
            if (const char* v = std::getenv(n))
                value = v;
            ::unsetenv(n);
        }
        ~saved_variable()
        {
            if (value)
                ::setenv(name, value->c_str(), 1);
        }
    };
    const saved_variable key{"AWS_ACCESS_KEY_ID"}, secret{"AWS_SECRET_ACCESS_KEY"}, token{"AWS_SESSION_TOKEN"};
    asio::io_context io;
    ddb::config cfg;
    cfg.port = 1; // closed: a request that went out would fail as store_unavailable
    ddb::store store{io, cfg};
    test::run(io, [&]() -> asio::awaitable<void> {
        dl::basic_distributed_mutex<ddb::store> m{store, "ddb:nocreds", {.ttl = 1s}};
        auto l = co_await m.lock();
        REQUIRE_FALSE(l);
        CHECK(l.error() == ddb::errc::no_credentials);
        CHECK(l.error() == dl::condition::invalid_argument);
        const auto said = l.error().message();
        CHECK(said.find("no AWS credentials") != std::string::npos);
        CHECK(said.find("AWS_ACCESS_KEY_ID") != std::string::npos);
        CHECK(said.find("config.credentials") != std::string::npos);
        co_await store.close();
    });
}

TEST_CASE("dynamodb: refused credentials or signatures are access_denied at once, not retried",
          "[dynamodb][input]")
{
    const std::vector<std::pair<int, std::string>> refusals{
        {400, R"({"__type":"com.amazon.coral.service#UnrecognizedClientException","message":"The security token included in the request is invalid."})"},
        {400, R"({"__type":"com.amazon.coral.service#InvalidSignatureException","message":"The request signature we calculated does not match"})"},
        {400, R"({"__type":"com.amazon.coral.service#MissingAuthenticationTokenException","message":"Request is missing Authentication Token"})"},
        {403, R"({"__type":"com.amazon.coral.service#AccessDeniedException","message":"User is not authorized"})"},
        {403, R"({"__type":"com.amazon.coral.service#SomethingNewException","message":"forbidden"})"}};
    for (const auto& [status, body] : refusals) {
        INFO(body);
        asio::io_context io;
        scripted_endpoint endpoint{io, status, body};
        ddb::config cfg;
        cfg.port = endpoint.port();
        cfg.table = "distlock_test";
        cfg.credentials = {"AKIDEXAMPLE", "secret", ""};
        ddb::store store{io, cfg};
        test::run(io, [&]() -> asio::awaitable<void> {
            // The default retry policy: a refusal that were retried would end in
            // errc::timeout at the deadline, after many requests.
            dl::basic_distributed_mutex<ddb::store> m{store, "ddb:denied", {.ttl = 10s}};
            dl::diagnostics diag;
            auto l = co_await m.lock_until(dl::clock::now() + 20s, diag);
            REQUIRE_FALSE(l);
            CHECK(l.error() == ddb::errc::access_denied);
            CHECK(l.error() == dl::condition::denied);
            CHECK(diag.server_message().find("Exception") != std::string_view::npos);
            co_await store.close();
            endpoint.stop();
        });
        CHECK(endpoint.requests().size() == 1);
    }
}

TEST_CASE("dynamodb: multi-locks are sorted and all or nothing", "[dynamodb]")
{
    test::dynalite_server server;
    create_table(server);
    asio::io_context io;
    ddb::store a{io, server.config()}, b{io, server.config()};
    test::run(io, [&]() -> asio::awaitable<void> {
        const dl::lock_options opts{.ttl = 10s};
        const dl::retry::none once;
        auto first = co_await dl::lock_all(a, dl::resources("ddb:m2", "ddb:m1"), opts, once);
        REQUIRE(first);
        CHECK(first->resources() == std::vector<std::string>{"ddb:m1", "ddb:m2"});
        // m3 is free but m2 is held: nothing is taken.
        const dl::retry::fixed briefly{.delay = 20ms, .max_attempts = 0, .deadline = 300ms};
        auto second = co_await dl::lock_all(b, dl::resources("ddb:m3", "ddb:m2"), opts, briefly);
        REQUIRE_FALSE(second);
        auto m3 = co_await b.read("ddb:m3");
        REQUIRE(m3);
        CHECK_FALSE(m3->held);
        const auto m2_before = first->fence("ddb:m2");
        REQUIRE(m2_before);
        { const auto ok_ = co_await first->unlock(); REQUIRE(ok_); }
        auto third = co_await dl::lock_all(b, dl::resources("ddb:m3", "ddb:m2"), opts, once);
        REQUIRE(third);
        const auto m2_after = third->fence("ddb:m2");
        REQUIRE(m2_after);
        CHECK(*m2_after > *m2_before);
        { const auto ok_ = co_await third->unlock(); REQUIRE(ok_); }
        co_await a.close();
        co_await b.close();
    });
}

TEST_CASE("dynamodb: a grant answered after the validity ran out is not a lease, and is given back",
          "[dynamodb][fault]")
{
    test::dynalite_server server;
    create_table(server);
    fault::proxy net{server.port()};
    auto cfg = server.config();
    cfg.port = net.port();
    asio::io_context io;
    ddb::store store{io, cfg};
    test::run(io, [&]() -> asio::awaitable<void> {
        REQUIRE(co_await store.read("ddb:slow")); // connected before the link slows down
        net.set(fault::direction::to_client, {.latency = 500ms});
        dl::basic_distributed_mutex<ddb::store, dl::retry::none> m{store, "ddb:slow", {.ttl = 300ms}};
        auto l = co_await m.lock();
        REQUIRE_FALSE(l);
        CHECK(l.error() == dl::errc::validity_exhausted);
        net.set(fault::direction::to_client, {});
        co_await store.close(); // nothing left pending
    });
    auto item = direct(server, "GetItem", {{"TableName", "distlock_test"}, {"Key", key_of("ddb:slow")}, {"ConsistentRead", true}});
    REQUIRE(item);
    REQUIRE(item.value().contains("Item"));
    CHECK_FALSE(item.value()["Item"].contains("owner")); // granted, then released
    CHECK(item.value()["Item"]["fence"]["N"] == "1");
}

namespace {

// The ids a listing names, in its order.
std::vector<std::string> ids_of(const std::vector<dl::lock_listing>& listing)
{
    std::vector<std::string> out;
    for (const auto& l : listing)
        out.push_back(l.resource);
    return out;
}

} // namespace

TEST_CASE("dynamodb: list() follows LastEvaluatedKey to the last page: 1 MB pages of large items, and one-item "
          "pages the filter leaves empty",
          "[dynamodb]")
{
    test::dynalite_server server;
    create_table(server);
    asio::io_context io;
    ddb::store store{io, server.config()};
    auto one_item = server.config();
    one_item.scan_limit = 1;
    ddb::store small_pages{io, one_item};
    test::run(io, [&]() -> asio::awaitable<void> {
        std::vector<dl::lease> held;
        std::vector<std::string> under_prefix;
        for (int i = 0; i < 16; ++i) {
            // Beside the prefix: ids that share all of it but its last byte.
            const auto id = std::string{i % 2 ? "ddb:page/" : "ddb:pagf/"} + std::to_string(100 - i);
            dl::basic_distributed_mutex<ddb::store, dl::retry::none> m{store, id, {.ttl = 60s}};
            auto l = co_await m.lock();
            REQUIRE(l);
            // 200 KB more per item: five of them fill a page (DynamoDB reads at most
            // 1 MB of items for one, before its filter).
            nlohmann::json pad = {{"TableName", "distlock_test"},
                                  {"Key", key_of(id)},
                                  {"UpdateExpression", "SET #p = :pad"},
                                  {"ExpressionAttributeNames", {{"#p", "padding"}}},
                                  {"ExpressionAttributeValues", {{":pad", {{"S", std::string(200 * 1024, 'x')}}}}}};
            dl::diagnostics diag;
            auto padded = co_await store.execute("UpdateItem", std::move(pad), &diag);
            INFO(diag.to_string());
            REQUIRE(padded);
            if (i % 2)
                under_prefix.push_back(id);
            held.push_back(std::move(*l));
        }
        std::sort(under_prefix.begin(), under_prefix.end());
        {
            // Released: its item stays, without an owner, and is not listed.
            dl::basic_distributed_mutex<ddb::store, dl::retry::none> m{store, "ddb:page/free", {.ttl = 60s}};
            auto l = co_await m.lock();
            REQUIRE(l);
            { const auto ok_ = co_await l->unlock(); REQUIRE(ok_); }
        }
        // The table does take more than one page.
        nlohmann::json scan = {{"TableName", "distlock_test"}, {"ProjectionExpression", "fence"}};
        auto first_page = co_await store.execute("Scan", std::move(scan));
        REQUIRE(first_page);
        CHECK(first_page->contains("LastEvaluatedKey"));

        const std::array<ddb::store*, 2> stores{&store, &small_pages};
        for (ddb::store* s : stores) {
            INFO((s == &store ? "1 MB pages" : "one-item pages"));
            dl::diagnostics diag;
            auto listed = co_await s->list("ddb:page/", &diag);
            INFO(diag.to_string());
            REQUIRE(listed);
            CHECK(ids_of(*listed) == under_prefix);
            for (const auto& l : *listed) {
                const auto lease = std::find_if(held.begin(), held.end(),
                                                [&](const auto& h) { return h.resource() == l.resource; });
                REQUIRE(lease != held.end());
                CHECK(l.lock.held);
                CHECK(l.lock.fence == lease->fence());
                CHECK(l.lock.owner == lease->owner().to_hex().substr(0, 8));
                CHECK(l.lock.version); // record_version mode: a version, no time left
                CHECK_FALSE(l.lock.remaining);
                CHECK_FALSE(l.waiters);
            }
            auto all = co_await s->list("");
            REQUIRE(all);
            CHECK(all->size() == 16);
            CHECK(std::is_sorted(all->begin(), all->end(),
                                 [](const auto& a, const auto& b) { return a.resource < b.resource; }));
        }
        for (auto& l : held) {
            const auto ok_ = co_await l.unlock();
            CHECK(ok_);
        }
        co_await store.close();
        co_await small_pages.close();
    });
}

TEST_CASE("dynamodb: in expiry_time mode list() and revoke() go by the expiry: an expired lock is neither listed "
          "nor revoked",
          "[dynamodb]")
{
    test::dynalite_server server;
    create_table(server);
    asio::io_context io;
    auto cfg = server.config();
    cfg.mode = ddb::lease_mode::expiry_time;
    ddb::store holder{io, cfg}, operator_store{io, cfg};
    const auto item_of = [&](std::string_view id) {
        auto got = direct(server, "GetItem", {{"TableName", "distlock_test"}, {"Key", key_of(id)}, {"ConsistentRead", true}});
        REQUIRE(got);
        return got.value().value("Item", nlohmann::json::object());
    };
    test::run(io, [&]() -> asio::awaitable<void> {
        dl::basic_distributed_mutex<ddb::store, dl::retry::none> live_mutex{holder, "ddb:exp/live", {.ttl = 30s}};
        dl::basic_distributed_mutex<ddb::store, dl::retry::none> old_mutex{holder, "ddb:exp/old", {.ttl = 30s}};
        auto live = co_await live_mutex.lock();
        auto old = co_await old_mutex.lock();
        REQUIRE(live);
        REQUIRE(old);
        // Its holder stopped renewing long ago.
        nlohmann::json expire = {{"TableName", "distlock_test"},
                                 {"Key", key_of("ddb:exp/old")},
                                 {"UpdateExpression", "SET expiresAt = :zero"},
                                 {"ExpressionAttributeValues", {{":zero", {{"N", "0"}}}}}};
        dl::diagnostics diag;
        auto expired_by_hand = co_await holder.execute("UpdateItem", std::move(expire), &diag);
        INFO(diag.to_string());
        REQUIRE(expired_by_hand);

        auto listed = co_await operator_store.list("ddb:exp/");
        REQUIRE(listed);
        REQUIRE(ids_of(*listed) == std::vector<std::string>{"ddb:exp/live"});
        const auto& one = listed->front().lock;
        CHECK(one.fence == live->fence());
        REQUIRE(one.remaining);
        CHECK(*one.remaining > dl::duration::zero());
        CHECK(*one.remaining <= dl::duration{30s});
        CHECK_FALSE(one.version);

        auto expired = co_await operator_store.revoke("ddb:exp/old", old->fence());
        REQUIRE_FALSE(expired);
        CHECK(expired.error() == dl::condition::not_owner);
        CHECK(item_of("ddb:exp/old").contains("owner")); // untouched
        auto wrong = co_await operator_store.revoke("ddb:exp/live", live->fence() + 1);
        REQUIRE_FALSE(wrong);
        CHECK(wrong.error() == dl::condition::not_owner);
        CHECK(item_of("ddb:exp/live").contains("owner"));

        auto revoked = co_await operator_store.revoke("ddb:exp/live", live->fence());
        REQUIRE(revoked);
        const auto freed = item_of("ddb:exp/live");
        CHECK_FALSE(freed.contains("owner"));
        CHECK_FALSE(freed.contains("expiresAt"));
        CHECK(ddb::detail::number(freed, "fence") == live->fence()); // kept: the next grant's is above it
        auto extended = co_await holder.extend("ddb:exp/live", live->owner(), 30s);
        REQUIRE_FALSE(extended);
        CHECK(extended.error() == dl::condition::not_owner);
        auto none = co_await operator_store.list("ddb:exp/");
        REQUIRE(none);
        CHECK(none->empty());
        co_await holder.close();
        co_await operator_store.close();
    });
}

TEST_CASE("dynamodb: Scan answers of another shape are protocol errors naming the field, never exceptions",
          "[dynamodb][input]")
{
    const auto good = ddb::detail::decode_scan_page(
        nlohmann::json::parse(R"({"Items":[{"resource":{"B":"YQ=="},"owner":{"S":"abc"},"fence":{"N":"4"},)"
                              R"("recordVersion":{"S":"0123456789abcdef0123"}}],"Count":1,"ScannedCount":3,)"
                              R"("LastEvaluatedKey":{"resource":{"B":"AP8="}}})"),
        nullptr);
    REQUIRE(good);
    REQUIRE(good->items.size() == 1);
    CHECK(good->items[0].resource == "a");
    CHECK(good->items[0].item.owner == "abc");
    CHECK(good->items[0].item.fence == 4u);
    REQUIRE(good->next_start);
    CHECK((*good->next_start)["resource"]["B"] == "AP8=");
    const auto last = ddb::detail::decode_scan_page(nlohmann::json::parse(R"({"Items":[]})"), nullptr);
    REQUIRE(last);
    CHECK(last->items.empty());
    CHECK_FALSE(last->next_start);

    const std::vector<std::pair<std::string, std::string>> bad{
        {R"([])", "expected an object"},
        {R"({})", "Items"},
        {R"({"Items":{}})", "Items"},
        {R"({"Items":[5]})", "Items[0]"},
        {R"({"Items":[null]})", "Items[0]"},
        {R"({"Items":[{}]})", "Items[0].resource"},
        {R"({"Items":[{"resource":{"S":"a"}}]})", "Items[0].resource.B"},
        {R"({"Items":[{"resource":{"B":"not base64!"}}]})", "Items[0].resource.B"},
        {R"({"Items":[{"resource":{"B":""}}]})", "Items[0].resource.B"},
        {R"({"Items":[{"resource":{"B":"YQ=="},"owner":{"N":"1"}}]})", "Items[0].owner.S"},
        {R"({"Items":[{"resource":{"B":"YQ=="},"fence":{"N":"-1"}}]})", "Items[0].fence.N"},
        {R"({"Items":[{"resource":{"B":"YQ=="}},{"resource":5}]})", "Items[1].resource"},
        {R"({"Items":[],"LastEvaluatedKey":"x"})", "LastEvaluatedKey"},
        {R"({"Items":[],"LastEvaluatedKey":{"resource":{"N":"1"}}})", "LastEvaluatedKey.resource.B"}};
    for (const auto& [text, where] : bad) {
        INFO(text);
        dl::diagnostics diag;
        const auto page = ddb::detail::decode_scan_page(nlohmann::json::parse(text), &diag);
        REQUIRE_FALSE(page);
        CHECK(page.error() == dl::errc::protocol_error);
        CHECK(diag.client_message().find("DynamoDB Scan answer") != std::string_view::npos);
        CHECK(diag.client_message().find(where) != std::string_view::npos);
    }

    // Through the store, from an endpoint that answers so: the listing fails with the
    // server's words; an endpoint that names the same page again and again does not
    // make it loop.
    struct case_ {
        std::string body;
        std::string words;
        std::size_t requests;
    };
    const std::vector<case_> cases{
        {R"({"Items":[{"resource":{"S":"ddb:x"}}],"Count":1})", "Items[0].resource.B", 1},
        {R"({"Items":[],"Count":0,"LastEvaluatedKey":{"resource":{"B":"YQ=="}}})", "a page already read", 2}};
    for (const auto& c : cases) {
        INFO(c.body);
        asio::io_context io;
        scripted_endpoint endpoint{io, 200, c.body};
        ddb::config cfg;
        cfg.port = endpoint.port();
        cfg.table = "locks";
        cfg.credentials = {"AKIDEXAMPLE", "secret", ""};
        ddb::store store{io, cfg};
        test::run(io, [&]() -> asio::awaitable<void> {
            dl::diagnostics diag;
            auto listed = co_await store.list("ddb:", &diag);
            REQUIRE_FALSE(listed);
            CHECK(listed.error() == dl::errc::protocol_error);
            CHECK(diag.client_message().find(c.words) != std::string_view::npos);
            CHECK_FALSE(diag.server_message().empty());
            co_await store.close();
            endpoint.stop();
        });
        REQUIRE(endpoint.requests().size() == c.requests);
        const auto first = nlohmann::json::parse(endpoint.requests().front());
        CHECK(first["TableName"] == "locks");
        CHECK(first["ConsistentRead"] == true);
        CHECK(first["FilterExpression"] == "attribute_exists(#o) AND begins_with(#r, :p)");
        CHECK(first["ExpressionAttributeValues"][":p"]["B"] == dl::util::base64("ddb:"));
        CHECK_FALSE(first.contains("Limit"));
        CHECK_FALSE(first.contains("ExclusiveStartKey"));
        if (c.requests > 1) {
            const auto second = nlohmann::json::parse(endpoint.requests()[1]);
            CHECK(second["ExclusiveStartKey"]["resource"]["B"] == "YQ==");
        }
    }
}

// -- Shared grants: a shared mutex's readers and writer, a semaphore's permits ------------

namespace {

namespace shared = distlock::dynamodb::detail;

// A clock for the pure steps: the clock of day at `wall_ms`, the monotonic one at `now`.
shared::step_clock step_clock_at(ddb::lease_mode mode, std::int64_t wall_ms, dl::time_point now,
                                 std::int64_t margin_ms = 0)
{
    return {mode, wall_ms, margin_ms, now, 1s};
}

shared::lease_record versioned(std::string v, std::uint64_t lease_ms) { return {std::nullopt, std::move(v), lease_ms}; }

} // namespace

TEST_CASE("dynamodb: shared steps: readers, a writer's intent and grant, permits and their slots, as the memory "
          "store's",
          "[dynamodb][shared]")
{
    const auto t0 = dl::time_point{} + 1h;
    const auto c = step_clock_at(ddb::lease_mode::expiry_time, 1'000'000, t0);
    const std::vector<ddb::sighting> none;

    // A reader on a resource never locked: fence 1, its entry, the count 0.
    auto read = shared::step_shared({}, "a", 0, 10'000, "", c, none);
    REQUIRE(read.reply);
    REQUIRE(read.reply.value().is_granted());
    CHECK(read.reply.value().fence() == 1);
    CHECK_FALSE(read.reply.value().slot());
    REQUIRE(read.next);
    REQUIRE(read.next->sharers.size() == 1);
    CHECK(read.next->sharers[0].owner == "a");
    CHECK(read.next->sharers[0].lease.expires_at == 1'010'000u);
    CHECK(read.next->permits == 0u);
    CHECK(read.next->revision == 1u);
    const auto one_reader = *read.next;

    // A writer waits: its intent is written; then new readers are refused, without a write.
    auto wait = shared::step_exclusive(one_reader, "w", "x", 10'000, "", c, none);
    REQUIRE(wait.reply);
    CHECK_FALSE(wait.reply.value().is_granted());
    CHECK(wait.reply.value().not_before() == t0 + 10'001ms); // the reader's expiry
    REQUIRE(wait.next);
    REQUIRE(wait.next->intent);
    CHECK(wait.next->intent->waiter == "w");
    CHECK(wait.next->revision == 2u);
    CHECK(wait.next->lock.fence == 1u); // an intent takes no fence
    const auto waited = *wait.next;
    auto kept_out = shared::step_shared(waited, "b", 0, 10'000, "", c, none);
    REQUIRE(kept_out.reply);
    CHECK_FALSE(kept_out.reply.value().is_granted());
    CHECK_FALSE(kept_out.next);
    // Another writer leaves the intent as it is.
    auto second = shared::step_exclusive(waited, "w2", "y", 10'000, "", c, none);
    CHECK_FALSE(second.reply.value().is_granted());
    CHECK_FALSE(second.next);

    // Another count than the holders' is refused, and says so.
    auto mixed = shared::step_shared(waited, "s", 3, 10'000, "", c, none);
    REQUIRE_FALSE(mixed.reply);
    CHECK(mixed.reply.error() == dl::errc::invalid_argument);
    CHECK(mixed.refusal.find("a semaphore of 3 permits") != std::string::npos);

    // Once the reader's expiry is past (less the margin), the waiter is granted: the
    // reader's entry and the intent go, the fence is one more.
    const auto later = step_clock_at(ddb::lease_mode::expiry_time, 1'010'001, t0 + 10'001ms);
    auto granted = shared::step_exclusive(waited, "w", "x", 10'000, "", later, none);
    REQUIRE(granted.reply.value().is_granted());
    CHECK(granted.reply.value().fence() == 2);
    REQUIRE(granted.next);
    CHECK(granted.next->sharers.empty());
    CHECK_FALSE(granted.next->permits);
    CHECK_FALSE(granted.next->intent);
    CHECK(granted.next->lock.owner == "x");
    CHECK(granted.next->lock.expires_at == 1'020'001u);
    // With a margin for clocks that disagree, not yet.
    const auto skewed = step_clock_at(ddb::lease_mode::expiry_time, 1'010'001, t0, 500);
    CHECK_FALSE(shared::step_exclusive(waited, "w", "x", 10'000, "", skewed, none).reply.value().is_granted());

    // The writer holds: readers wait for its expiry; it downgrades to a reader with its
    // fence and expiry; a downgrade by another owner, or once expired, is refused.
    const auto writer = *granted.next;
    auto behind = shared::step_shared(writer, "r", 0, 10'000, "", later, none);
    CHECK(behind.reply.value().not_before() == t0 + 10'001ms + 10'001ms);
    auto down = shared::step_downgrade(writer, "x", later);
    REQUIRE(down.reply);
    REQUIRE(down.next);
    CHECK_FALSE(down.next->lock.owner);
    CHECK(down.next->lock.fence == 2u);
    REQUIRE(down.next->sharers.size() == 1);
    CHECK(down.next->sharers[0].owner == "x");
    CHECK(down.next->sharers[0].lease.expires_at == 1'020'001u);
    CHECK(down.next->permits == 0u);
    CHECK(shared::step_downgrade(writer, "y", later).reply.error() == dl::errc::not_owner);
    const auto expired = step_clock_at(ddb::lease_mode::expiry_time, 1'020'002, t0);
    CHECK(shared::step_downgrade(writer, "x", expired).reply.error() == dl::errc::not_owner);
    // A reader comes in beside the downgraded writer, a writer does not.
    CHECK(shared::step_shared(*down.next, "r", 0, 10'000, "", later, none).reply.value().fence() == 3);
    CHECK_FALSE(shared::step_exclusive(*down.next, "w3", "z", 10'000, "", later, none).reply.value().is_granted());

    // Permits: three, each the lowest free slot; the fourth waits for the first to run
    // out; a freed slot is given again.
    shared::shared_item sem;
    for (const auto* owner : {"p0", "p1", "p2"}) {
        auto p = shared::step_shared(sem, owner, 3, 10'000, "", c, none);
        REQUIRE(p.reply.value().is_granted());
        sem = *p.next;
    }
    CHECK(sem.sharers[2].slot == 2u);
    sem.sharers[1].lease.expires_at = 1'000'500; // runs out first
    auto full = shared::step_shared(sem, "p3", 3, 10'000, "", c, none);
    CHECK_FALSE(full.reply.value().is_granted());
    CHECK(full.reply.value().not_before() == t0 + 501ms);
    CHECK(shared::step_exclusive(sem, "w", "x", 10'000, "", c, none).reply.error() == dl::errc::invalid_argument);
    std::erase_if(sem.sharers, [](const shared::sharer_entry& s) { return s.owner == "p1"; });
    auto again = shared::step_shared(sem, "p3", 3, 10'000, "", c, none);
    REQUIRE(again.reply.value().is_granted());
    CHECK(again.reply.value().slot() == 1u);
    CHECK(again.reply.value().fence() == 4);
}

TEST_CASE("dynamodb: shared steps in record_version mode: a grant or an intent is dropped only once one version "
          "was watched for its whole lease",
          "[dynamodb][shared]")
{
    const auto t0 = dl::time_point{} + 1h;
    shared::shared_item item;
    item.sharers.push_back({"a", 0, versioned("v1", 1000)});
    item.permits = 0;
    item.revision = 1;
    item.lock.fence = 1;
    const auto at = [](dl::time_point now) { return step_clock_at(ddb::lease_mode::record_version, 0, now); };

    std::vector<ddb::sighting> seen;
    shared::watch(seen, item, t0, 1s);
    REQUIRE(seen.size() == 1);
    auto first = shared::step_exclusive(item, "w", "x", 800, "i1", at(t0), seen);
    CHECK_FALSE(first.reply.value().is_granted());
    CHECK(first.reply.value().not_before() == t0 + 1000ms);
    REQUIRE(first.next); // the intent, with a version of its own
    CHECK(first.next->intent->lease.record_version == "i1");
    CHECK(first.next->intent->lease.lease_duration == 800u);

    // The same version a moment short of its lease: still held.
    shared::watch(seen, item, t0 + 999ms, 1s);
    CHECK_FALSE(shared::step_exclusive(item, "w", "x", 800, "i2", at(t0 + 999ms), seen).reply.value().is_granted());
    // A whole lease: dropped in the grant's write.
    shared::watch(seen, item, t0 + 1000ms, 1s);
    auto taken = shared::step_exclusive(item, "w", "x", 800, "x1", at(t0 + 1000ms), seen);
    REQUIRE(taken.reply.value().is_granted());
    CHECK(taken.reply.value().fence() == 2);
    CHECK(taken.next->sharers.empty());
    CHECK(taken.next->lock.record_version == "x1");
    CHECK(taken.next->lock.lease_duration == 800u);

    // A renewal (a new version) starts the watching again.
    auto renewed = item;
    renewed.sharers[0].lease.record_version = "v2";
    shared::watch(seen, renewed, t0 + 1000ms, 1s);
    CHECK_FALSE(shared::step_exclusive(renewed, "w", "x", 800, "", at(t0 + 1000ms), seen).reply.value().is_granted());
    shared::watch(seen, renewed, t0 + 2000ms, 1s);
    CHECK(shared::step_exclusive(renewed, "w", "x", 800, "", at(t0 + 2000ms), seen).reply.value().is_granted());

    // A dead writer's intent keeps readers out until it too was watched for its lease.
    shared::shared_item waited;
    waited.intent = shared::writer_intent{"w", versioned("i1", 500)};
    std::vector<ddb::sighting> reader;
    shared::watch(reader, waited, t0, 1s);
    CHECK_FALSE(shared::step_shared(waited, "r", 0, 800, "r1", at(t0), reader).reply.value().is_granted());
    shared::watch(reader, waited, t0 + 500ms, 1s);
    auto in = shared::step_shared(waited, "r", 0, 800, "r1", at(t0 + 500ms), reader);
    REQUIRE(in.reply.value().is_granted());
    CHECK_FALSE(in.next->intent);
    CHECK(in.next->sharers[0].lease.record_version == "r1");
}

TEST_CASE("dynamodb: a shared step's write is conditional on the whole state it was computed from",
          "[dynamodb][shared]")
{
    shared::shared_item read;
    read.lock.owner = "x";
    read.lock.fence = 4;
    read.lock.record_version = "v";
    read.lock.lease_duration = 800;
    read.revision = 2;
    auto next = read;
    next.lock = {};
    next.lock.fence = 4;
    next.sharers.push_back({"x", 0, versioned("v", 800)});
    next.permits = 0;
    next.revision = 3;
    const auto u = shared::shared_update(read, next);
    CHECK(u["ConditionExpression"] == "#o = :was_o AND #f = :was_f AND attribute_not_exists(#e) AND #v = :was_v AND "
                                      "#l = :was_l AND #n = :was_n AND attribute_not_exists(#d) AND "
                                      "attribute_not_exists(#du)");
    CHECK(u["ExpressionAttributeValues"][":was_o"] == nlohmann::json{{"S", "x"}});
    CHECK(u["ExpressionAttributeValues"][":was_n"] == nlohmann::json{{"N", "2"}});
    CHECK(u["UpdateExpression"] == "SET #f = :f, #n = :n, #s = :s, #p = :p REMOVE #o, #e, #v, #l, #d, #du, #i");
    CHECK(u["ExpressionAttributeValues"][":s"]["M"]["x"]["M"]["recordVersion"] == nlohmann::json{{"S", "v"}});
    CHECK(u["ExpressionAttributeValues"][":s"]["M"]["x"]["M"]["slot"] == nlohmann::json{{"N", "0"}});

    // From nothing: every attribute must still be absent.
    const auto first = shared::shared_update({}, next);
    CHECK(first["ConditionExpression"] ==
          "attribute_not_exists(#o) AND attribute_not_exists(#f) AND attribute_not_exists(#e) AND "
          "attribute_not_exists(#v) AND attribute_not_exists(#l) AND attribute_not_exists(#n) AND "
          "attribute_not_exists(#d) AND attribute_not_exists(#du)");
}

TEST_CASE("dynamodb: the item's shared attributes decode; of another shape they are protocol errors naming the "
          "field",
          "[dynamodb][shared][input]")
{
    const nlohmann::json good = {
        {"Item",
         {{"resource", {{"B", dl::util::base64("r")}}},
          {"fence", {{"N", "9"}}},
          {"revision", {{"N", "4"}}},
          {"permits", {{"N", "3"}}},
          {"sharers",
           {{"M",
             {{"aa", {{"M", {{"slot", {{"N", "2"}}}, {"expiresAt", {{"N", "1700"}}}}}}},
              {"bb", {{"M", {{"slot", {{"N", "0"}}}, {"recordVersion", {{"S", "v"}}}, {"leaseDuration", {{"N", "800"}}}}}}}}}}},
          {"intent", {{"M", {{"waiter", {{"S", "ww"}}}, {"expiresAt", {{"N", "1800"}}}}}}}}}};
    const auto item = shared::decode_shared_item(good, nullptr);
    REQUIRE(item);
    CHECK(item->lock.fence == 9u);
    CHECK(item->revision == 4u);
    CHECK(item->permits == 3u);
    REQUIRE(item->sharers.size() == 2);
    CHECK(item->sharers[0].owner == "aa");
    CHECK(item->sharers[0].slot == 2u);
    CHECK(item->sharers[0].lease.expires_at == 1700u);
    CHECK(item->sharers[1].lease.record_version == "v");
    CHECK(item->sharers[1].lease.lease_duration == 800u);
    REQUIRE(item->intent);
    CHECK(item->intent->waiter == "ww");
    CHECK(item->intent->lease.expires_at == 1800u);
    const auto never = shared::decode_shared_item(nlohmann::json::object(), nullptr);
    REQUIRE(never);
    CHECK(never->sharers.empty());
    CHECK_FALSE(never->revision);

    struct bad {
        const char* pointer;
        nlohmann::json value; // null: removed
        const char* words;
    };
    const std::vector<bad> cases{
        {"/Item/sharers", {{"S", "x"}}, "Item.sharers.M"},
        {"/Item/sharers/M/aa", {{"S", "x"}}, "Item.sharers.M.aa.M"},
        {"/Item/sharers/M/aa/M/slot", nullptr, "Item.sharers.M.aa.M.slot"},
        {"/Item/sharers/M/aa/M/slot", {{"N", "4294967296"}}, "below 2^32"},
        {"/Item/sharers/M/aa/M/expiresAt", {{"N", "-1"}}, "Item.sharers.M.aa.M.expiresAt.N"},
        {"/Item/permits", nullptr, "Item.permits"},
        {"/Item/permits", {{"S", "3"}}, "Item.permits.N"},
        {"/Item/intent/M/waiter", nullptr, "Item.intent.M.waiter"},
        {"/Item/intent/M", nlohmann::json::array(), "Item.intent.M"},
        {"/Item/revision", {{"N", "x"}}, "Item.revision.N"},
    };
    for (const auto& c : cases) {
        INFO(c.pointer);
        auto doc = good;
        const nlohmann::json::json_pointer at{c.pointer};
        if (c.value.is_null())
            doc[at.parent_pointer()].erase(at.back());
        else
            doc[at] = c.value;
        dl::diagnostics diag;
        const auto got = shared::decode_shared_item(doc, &diag);
        REQUIRE_FALSE(got);
        CHECK(got.error() == dl::errc::protocol_error);
        CHECK(diag.client_message().find(c.words) != std::string_view::npos);
        CHECK_FALSE(diag.server_message().empty()); // the reply's words
    }
}

namespace {

// A reader whose process dies while it holds `resource`: its store goes away without
// releasing. Returns the dead reader's fence.
dl::fence_token die_reading(const ddb::config& cfg, std::string_view resource, dl::duration ttl)
{
    asio::io_context io;
    std::optional<dl::lease> kept;
    {
        ddb::store dying{io, cfg};
        test::run(io, [&]() -> asio::awaitable<void> {
            dl::basic_distributed_shared_mutex<ddb::store, dl::retry::none> m{dying, std::string{resource},
                                                                              {.ttl = ttl}};
            auto l = co_await m.lock_shared();
            REQUIRE(l);
            kept.emplace(std::move(*l));
        });
    }
    const auto fence = kept->fence();
    kept.reset();
    io.run();
    return fence;
}

} // namespace

TEST_CASE("dynamodb: record versions: a dead reader keeps a writer out until its entry was watched for a whole lease",
          "[dynamodb][shared]")
{
    test::dynalite_server server;
    create_table(server);
    const auto cfg = server.config();
    const auto dead = die_reading(cfg, "ddb:dead-reader", 800ms);

    asio::io_context io;
    ddb::store waiter{io, cfg};
    test::run(io, [&]() -> asio::awaitable<void> {
        dl::basic_distributed_shared_mutex<ddb::store, dl::retry::fixed> m{
            waiter, "ddb:dead-reader", {.ttl = 800ms}, dl::retry::fixed{.delay = 20ms}};
        auto early = co_await m.lock_until(dl::clock::now() + 400ms);
        REQUIRE_FALSE(early);
        CHECK(early.error() == dl::errc::timeout);
        // The put without a claim's sightings never drops it: it watches for one call only.
        const auto other = dl::owner_token::generate();
        auto unwatched = co_await waiter.put_exclusive("ddb:dead-reader", other, dl::owner_token::generate(), 800ms);
        REQUIRE(unwatched);
        CHECK_FALSE(unwatched->is_granted());
        auto left = co_await waiter.withdraw("ddb:dead-reader", other); // its intent goes with it
        REQUIRE(left);
        auto later = co_await m.lock();
        REQUIRE(later);
        CHECK(later->fence() > dead);
        { const auto ok_ = co_await later->unlock(); REQUIRE(ok_); }
        co_await waiter.close();
    });
}

TEST_CASE("dynamodb: permits asked for at once by many clients: never more holders than permits, each its own slot",
          "[dynamodb][shared]")
{
    test::dynalite_server server;
    create_table(server);
    for (const auto mode : {ddb::lease_mode::record_version, ddb::lease_mode::expiry_time}) {
        INFO((mode == ddb::lease_mode::record_version ? "record_version" : "expiry_time"));
        auto cfg = server.config();
        cfg.mode = mode;
        const std::string resource = mode == ddb::lease_mode::record_version ? "ddb:sem-v" : "ddb:sem-e";
        asio::io_context io;
        std::array<std::unique_ptr<ddb::store>, 3> stores;
        for (auto& s : stores)
            s = std::make_unique<ddb::store>(io, cfg);
        std::set<std::uint32_t> holding;
        std::size_t most = 0, done = 0, failed = 0;
        bool clash = false;
        const auto one = [&](ddb::store& s) -> asio::awaitable<void> {
            dl::basic_distributed_semaphore<ddb::store, dl::retry::fixed> sem{
                s, resource, {.permits = 2, .lease = {.ttl = 10s}}, dl::retry::fixed{.delay = 10ms, .deadline = 60s}};
            for (int round = 0; round < 3; ++round) {
                auto p = co_await sem.acquire();
                if (!p || !p->slot()) { // checked outside: a detached coroutine cannot fail the test
                    ++failed;
                    co_return;
                }
                clash = clash || !holding.insert(*p->slot()).second;
                most = std::max(most, holding.size());
                co_await test::settle(20ms);
                holding.erase(*p->slot());
                { const auto ok_ = co_await p->unlock(); CHECK(ok_); }
            }
            ++done;
        };
        test::run(io, [&]() -> asio::awaitable<void> {
            const auto ex = co_await asio::this_coro::executor;
            for (int i = 0; i < 6; ++i)
                asio::co_spawn(ex, one(*stores[static_cast<std::size_t>(i) % stores.size()]), asio::detached);
            for (int i = 0; i < 6000 && done + failed < 6; ++i)
                co_await test::settle(10ms);
            for (auto& s : stores)
                co_await s->close();
        });
        CHECK(failed == 0);
        CHECK(done == 6);
        CHECK_FALSE(clash);
        CHECK(most <= 2);
    }
}

TEST_CASE("dynamodb: shared state of another shape is a protocol error with the server's words, never a grant",
          "[dynamodb][shared][input]")
{
    test::dynalite_server server;
    create_table(server);
    auto wrote = direct(server, "PutItem",
                        {{"TableName", "distlock_test"},
                         {"Item", {{"resource", {{"B", ddb::detail::base64("ddb:bad-shared")}}},
                                   {"sharers", {{"S", "not a map"}}}}}});
    REQUIRE(wrote);
    asio::io_context io;
    ddb::store store{io, server.config()};
    test::run(io, [&]() -> asio::awaitable<void> {
        dl::basic_distributed_shared_mutex<ddb::store, dl::retry::none> m{store, "ddb:bad-shared", {.ttl = 10s}};
        dl::diagnostics diag;
        auto r = co_await m.try_lock_shared(diag);
        REQUIRE_FALSE(r);
        CHECK(r.error() == dl::errc::protocol_error);
        CHECK(diag.client_message().find("Item.sharers") != std::string_view::npos);
        CHECK(diag.server_message().find("not a map") != std::string_view::npos);
        co_await store.close();
    });
}

TEST_CASE("dynamodb: a writer's and a reader's leases are renewed past their TTL, in both modes", "[dynamodb][shared]")
{
    test::dynalite_server server;
    create_table(server);
    for (const auto mode : {ddb::lease_mode::record_version, ddb::lease_mode::expiry_time}) {
        INFO((mode == ddb::lease_mode::record_version ? "record_version" : "expiry_time"));
        auto cfg = server.config();
        cfg.mode = mode;
        const std::string resource = mode == ddb::lease_mode::record_version ? "ddb:renew-v" : "ddb:renew-e";
        asio::io_context io;
        ddb::store store{io, cfg}, other{io, cfg};
        test::run(io, [&]() -> asio::awaitable<void> {
            // Renewed every 100 ms (a third of the TTL), held for over three TTLs.
            dl::basic_distributed_shared_mutex<ddb::store, dl::retry::none, dl::renew::watchdog> m{
                store, resource, {.ttl = 300ms}};
            dl::basic_distributed_shared_mutex<ddb::store, dl::retry::none> probe{other, resource, {.ttl = 300ms}};
            // The same, waiting: after a writer that did not keep up (not released, its
            // grant runs out first).
            dl::basic_distributed_shared_mutex<ddb::store, dl::retry::fixed, dl::renew::watchdog> patient{
                store, resource, {.ttl = 300ms}, dl::retry::fixed{.delay = 20ms, .deadline = 5s}};
            auto w = co_await m.lock();
            REQUIRE(w);
            co_await test::settle(1000ms);
            const bool kept_up = w->valid(); // the holder kept up with its renewals (a stalled machine may not)
            if (kept_up) {
                CHECK_FALSE(co_await probe.try_lock_shared());
                { const auto ok_ = co_await w->unlock(); CHECK(ok_); }
            }
            // Two statements, not one conditional expression: g++ 12 destroys a
            // co_await's result in a conditional operator too early.
            std::optional<dl::result<dl::lease>> got;
            if (kept_up)
                got.emplace(co_await m.lock_shared());
            else
                got.emplace(co_await patient.lock_shared());
            auto& r = *got;
            REQUIRE(r);
            co_await test::settle(1000ms);
            if (r->valid()) {
                CHECK_FALSE(co_await probe.try_lock());
                { const auto ok_ = co_await r->unlock(); CHECK(ok_); }
            }
            // The refused try's intent is withdrawn in the background (or runs out).
            dl::basic_distributed_shared_mutex<ddb::store, dl::retry::fixed> next{
                other, resource, {.ttl = 300ms}, dl::retry::fixed{.delay = 20ms, .deadline = 5s}};
            auto after = co_await next.lock();
            REQUIRE(after);
            CHECK(after->fence() > r->fence());
            { const auto ok_ = co_await after->unlock(); CHECK(ok_); }
            co_await store.close();
            co_await other.close();
        });
    }
}

// -- dialect::aws: AWS's lock client's table -------------------------------------------

namespace {

namespace aws = ddb::detail::aws;

// A store of the aws dialect on `server`'s table `table` (made the AWS client's way:
// a String hash key "key").
ddb::config aws_config(const test::dynalite_server& server, const std::string& table = "aws_store")
{
    auto c = server.config(table);
    c.dialect = ddb::dialect::aws;
    c.key_attribute = "key";
    return c;
}

void create_aws_table(const test::dynalite_server& server)
{
    auto made = direct(server, "CreateTable",
                       {{"TableName", "aws_store"},
                        {"KeySchema", {{{"AttributeName", "key"}, {"KeyType", "HASH"}}}},
                        {"AttributeDefinitions", {{{"AttributeName", "key"}, {"AttributeType", "S"}}}},
                        {"ProvisionedThroughput", {{"ReadCapacityUnits", 5}, {"WriteCapacityUnits", 5}}}});
    REQUIRE(made);
}

nlohmann::json aws_item(const test::dynalite_server& server, const std::string& name)
{
    auto got = direct(server, "GetItem",
                      {{"TableName", "aws_store"}, {"Key", {{"key", {{"S", name}}}}}, {"ConsistentRead", true}});
    REQUIRE(got);
    return got.value().value("Item", nlohmann::json{});
}

void put_aws_item(const test::dynalite_server& server, nlohmann::json item)
{
    auto put = direct(server, "PutItem", {{"TableName", "aws_store"}, {"Item", std::move(item)}});
    REQUIRE(put);
}

} // namespace

TEST_CASE("dynamodb aws dialect: URL keys and settings are checked before any I/O", "[dynamodb][input][aws]")
{
    std::string why;
    auto c = ddb::config::from_url("dynamodb://127.0.0.1:8000?table=locks&dialect=aws&key_attribute=LockName", &why);
    REQUIRE(c);
    CHECK(c->dialect == ddb::dialect::aws);
    CHECK(c->key_attribute == "LockName");
    auto plain = ddb::config::from_url("dynamodb://127.0.0.1:8000?dialect=distlock");
    REQUIRE(plain);
    CHECK(plain->dialect == ddb::dialect::distlock);
    CHECK(ddb::config{}.dialect == ddb::dialect::distlock); // the default stays
    const std::pair<const char*, const char*> refused[] = {
        {"dynamodb://h?dialect=curator", "dialect=curator"},
        {"dynamodb://h?key_attribute=LockName", "key_attribute is a setting of dialect=aws"},
        {"dynamodb://h?dialect=aws&mode=expiry_time", "mode=record_version"},
        {"dynamodb://h?dialect=aws&key_attribute=ownerName", "not one of the lock's own attributes"},
        {"dynamodb://h?dialect=aws&key_attribute=", "key_attribute"},
    };
    for (const auto& [url, said] : refused) {
        INFO(url);
        why.clear();
        auto r = ddb::config::from_url(url, &why);
        REQUIRE_FALSE(r);
        CHECK(r.error() == dl::condition::invalid_argument);
        CHECK(why.find(said) != std::string::npos);
    }
    ddb::config bad;
    bad.dialect = ddb::dialect::aws;
    bad.mode = ddb::lease_mode::expiry_time;
    CHECK(bad.validate() == dl::condition::invalid_argument);
    bad.mode = ddb::lease_mode::record_version;
    bad.key_attribute = "fence";
    CHECK(bad.validate() == dl::condition::invalid_argument);
}

TEST_CASE("dynamodb aws dialect: lock names, fence item names, record versions", "[dynamodb][aws]")
{
    CHECK(aws::lock_name("orders/42") == "orders/42");
    CHECK(aws::lock_name("caf\xc3\xa9") == "caf\xc3\xa9");
    // Not UTF-8, or in the reserved space: encoded, so every id has its own name.
    CHECK(aws::lock_name("a\xff") == "distlock#b64#" + ddb::detail::base64("a\xff"));
    CHECK(aws::lock_name("distlock#fence#x") == "distlock#b64#" + ddb::detail::base64("distlock#fence#x"));
    CHECK(aws::fence_name("orders/42") == "distlock#fence#orders/42");
    CHECK(aws::fence_name("distlock#fence#x") != aws::fence_name("x"));
    for (const std::string& id : std::vector<std::string>{"orders/42", "a\xff", "distlock#fence#x", std::string{"\0b", 2}})
        CHECK(aws::resource_of(aws::lock_name(id)) == id);
    CHECK_FALSE(aws::resource_of(aws::fence_name("x")));
    CHECK_FALSE(aws::resource_of("distlock#other"));
    for (const char* bad : {"\xc0\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xe2\x82", "\x80"})
        CHECK_FALSE(aws::valid_utf8(bad));
    CHECK(aws::valid_utf8("\xf0\x9f\x94\x92 \xe2\x82\xac"));
    const auto v = aws::uuid_from_hex(dl::owner_token::generate().to_hex());
    REQUIRE(v.size() == 36);
    CHECK(v[8] == '-');
    CHECK(v[14] == '4');
    CHECK(std::string_view{"89ab"}.find(v[19]) != std::string_view::npos);
    CHECK(aws::version_number("0123abcd-0000-4000-8000-000000000000") == 0x0123abcd00004000ULL);
    CHECK_FALSE(aws::version_number("short"));
}

TEST_CASE("dynamodb aws dialect: foreign records are read leniently; answers of another shape are protocol errors",
          "[dynamodb][aws]")
{
    // Attributes of other types or values: absent, never an error.
    const auto odd = nlohmann::json::parse(R"({"Item": {"key": {"S": "x"}, "ownerName": {"N": "5"},
        "leaseDuration": {"S": "soon"}, "isReleased": {"BOOL": true}, "fence": {"S": "-1"}}})");
    dl::diagnostics diag;
    auto r = aws::decode_lock_record(odd, &diag);
    REQUIRE(r);
    REQUIRE(r.value());
    CHECK_FALSE(r.value()->owner);
    CHECK_FALSE(r.value()->version);
    CHECK_FALSE(r.value()->lease_ms);
    CHECK(r.value()->released);
    CHECK_FALSE(r.value()->released_as_written);
    CHECK_FALSE(r.value()->holder_fence());
    CHECK(r.value()->watched_version().starts_with("item "));
    // A stamp that is not the holder's own is no fence of the holder's.
    const auto stale = nlohmann::json::parse(R"({"Item": {"ownerName": {"S": "aws"}, "recordVersionNumber": {"S": "v"},
        "leaseDuration": {"S": "20000"}, "fence": {"N": "7"}, "fenceOwner": {"S": "abc"}}})");
    auto s = aws::decode_lock_record(stale, nullptr);
    REQUIRE(s);
    CHECK(s.value()->lease_ms == 20000u);
    CHECK_FALSE(s.value()->holder_fence());
    CHECK(aws::decode_lock_record(nlohmann::json::object(), nullptr).value() == std::nullopt);
    for (const char* text : {R"({"Item": "x"})", R"({"Item": {"ownerName": "bare"}})", R"([])"}) {
        INFO(text);
        dl::diagnostics d;
        auto bad = aws::decode_lock_record(nlohmann::json::parse(text), &d);
        REQUIRE_FALSE(bad);
        CHECK(bad.error() == dl::errc::protocol_error);
        CHECK_FALSE(d.to_string().empty());
    }
    CHECK(aws::decode_fence_draw(nlohmann::json::parse(R"({"Attributes": {"fence": {"N": "3"}}})"), nullptr).value() ==
          3u);
    CHECK_FALSE(aws::decode_fence_draw(nlohmann::json::parse(R"({"Attributes": {"fence": {"N": "0"}}})"), nullptr));
    CHECK_FALSE(aws::decode_fence_draw(nlohmann::json::parse(R"({"Attributes": {}})"), nullptr));
}

TEST_CASE("dynamodb aws dialect: shared grants and takeover by fence are refused before any I/O, saying why",
          "[dynamodb][input][aws]")
{
    asio::io_context io;
    ddb::config c;
    c.port = 1; // nothing listens: an attempt to connect would fail otherwise
    c.dialect = ddb::dialect::aws;
    c.credentials = {"AKIDEXAMPLE", "secret", ""};
    ddb::store store{io, c};
    test::run(io, [&]() -> asio::awaitable<void> {
        dl::diagnostics diag;
        auto shared = co_await store.put_shared("r", dl::owner_token::generate(), 10s, 0, &diag);
        REQUIRE_FALSE(shared);
        CHECK(shared.error() == dl::condition::invalid_argument);
        CHECK(diag.to_string().find("no shared grants") != std::string::npos);
        dl::basic_distributed_semaphore<ddb::store> sem{store, "sem", {.permits = 3, .lease = {.ttl = 10s}}};
        auto permit = co_await sem.try_acquire();
        REQUIRE_FALSE(permit);
        CHECK(permit.error() == dl::condition::invalid_argument);
        dl::diagnostics why;
        auto by_fence = co_await store.conditional_write("r", dl::owner_token::generate(), 10s, 3, &why);
        REQUIRE_FALSE(by_fence);
        CHECK(by_fence.error() == dl::condition::invalid_argument);
        CHECK(why.to_string().find("record version") != std::string::npos);
        co_await store.close();
    });
}

TEST_CASE("dynamodb aws dialect: the items written, and hostile foreign records held safely", "[dynamodb][aws]")
{
    test::dynalite_server server;
    create_aws_table(server);
    asio::io_context io;
    ddb::store store{io, aws_config(server)};
    test::run(io, [&]() -> asio::awaitable<void> {
        using fixed_mutex = dl::basic_distributed_mutex<ddb::store, dl::retry::fixed>;
        fixed_mutex m{store, "aws/layout", {.ttl = 1500ms}, dl::retry::fixed{.delay = 50ms}};
        auto l = co_await m.lock();
        REQUIRE(l);
        const auto item = aws_item(server, "aws/layout");
        CHECK(item["ownerName"] == nlohmann::json{{"S", l->owner().to_hex()}});
        CHECK(item["leaseDuration"] == nlohmann::json{{"S", "1500"}});
        CHECK(item["recordVersionNumber"]["S"].get<std::string>().size() == 36);
        CHECK(item["fence"] == nlohmann::json{{"N", std::to_string(l->fence())}});
        CHECK(item["fenceOwner"] == item["ownerName"]);
        CHECK_FALSE(item.contains("isReleased"));
        // The fence item reads as a released AWS lock, so the AWS client's scans parse it.
        const auto counter = aws_item(server, "distlock#fence#aws/layout");
        CHECK(counter["fence"] == nlohmann::json{{"N", std::to_string(l->fence())}});
        CHECK(counter["isReleased"] == nlohmann::json{{"S", "1"}});
        CHECK(counter.contains("ownerName"));
        CHECK(counter.contains("recordVersionNumber"));
        CHECK(counter["leaseDuration"] == nlohmann::json{{"S", "0"}});
        auto listed = co_await store.list("aws/");
        REQUIRE(listed);
        REQUIRE(listed->size() == 1);
        CHECK(listed->front().resource == "aws/layout");
        CHECK(listed->front().lock.fence == l->fence());
        { const auto ok_ = co_await l->unlock(); CHECK(ok_); }
        CHECK(aws_item(server, "aws/layout").is_null());
        auto info = co_await store.read("aws/layout");
        REQUIRE(info);
        CHECK_FALSE(info->held);
        CHECK(info->fence == l->fence());

        // A foreign item without a record version: held (it can never be seen expire).
        put_aws_item(server, {{"key", {{"S", "aws/no-version"}}}, {"ownerName", {{"N", "1"}}}});
        fixed_mutex nv{store, "aws/no-version", {.ttl = 300ms}, dl::retry::fixed{.delay = 50ms}};
        auto refused = co_await nv.lock_until(dl::clock::now() + 900ms);
        REQUIRE_FALSE(refused);
        CHECK(refused.error() == dl::errc::timeout);
        auto seen = co_await store.read("aws/no-version");
        REQUIRE(seen);
        CHECK(seen->held);

        // A lease that is no number: this client's own TTL is watched instead.
        put_aws_item(server, {{"key", {{"S", "aws/odd-lease"}}},
                              {"ownerName", {{"S", "someone"}}},
                              {"recordVersionNumber", {{"S", "fixed"}}},
                              {"leaseDuration", {{"S", "a while"}}}});
        fixed_mutex odd{store, "aws/odd-lease", {.ttl = 400ms}, dl::retry::fixed{.delay = 50ms, .deadline = 5s}};
        auto taken = co_await odd.lock();
        REQUIRE(taken);
        { const auto ok_ = co_await taken->unlock(); CHECK(ok_); }

        // Released the AWS client's way (isReleased "1"): taken at once.
        put_aws_item(server, {{"key", {{"S", "aws/released"}}},
                              {"ownerName", {{"S", "someone"}}},
                              {"recordVersionNumber", {{"S", "r1"}}},
                              {"leaseDuration", {{"S", "60000"}}},
                              {"isReleased", {{"S", "1"}}}});
        fixed_mutex rel{store, "aws/released", {.ttl = 10s}, dl::retry::fixed{.delay = 50ms}};
        auto free_now = co_await rel.try_lock();
        REQUIRE(free_now);
        CHECK_FALSE(aws_item(server, "aws/released").contains("isReleased"));
        { const auto ok_ = co_await free_now->unlock(); CHECK(ok_); }

        // A foreign holder that stamped nothing of ours: read() says held, with the
        // last distlock fence, and revoke() by that fence does not touch it.
        put_aws_item(server, {{"key", {{"S", "aws/layout"}}},
                              {"ownerName", {{"S", "aws-host-9"}}},
                              {"recordVersionNumber", {{"S", "r2"}}},
                              {"leaseDuration", {{"S", "60000"}}},
                              {"fence", {{"N", std::to_string(l->fence())}}},
                              {"fenceOwner", {{"S", l->owner().to_hex()}}}});
        auto foreign = co_await store.read("aws/layout");
        REQUIRE(foreign);
        CHECK(foreign->held);
        CHECK(foreign->owner == "aws-host");
        auto revoked = co_await store.revoke("aws/layout", l->fence());
        REQUIRE_FALSE(revoked);
        CHECK(revoked.error() == dl::condition::not_owner);
        co_await store.close();
    });
}

// -- Elections: the value kept with a grant ------------------------------------------

namespace {

nlohmann::json lock_item_of(const test::dynalite_server& server, std::string_view resource)
{
    auto got = direct(server, "GetItem", {{"TableName", "distlock_test"}, {"Key", key_of(resource)}, {"ConsistentRead", true}});
    REQUIRE(got);
    return got.value().value("Item", nlohmann::json{});
}

} // namespace

TEST_CASE("dynamodb: proclaim keeps the value in the lock item with its grant's fence; leader() reports it only "
          "for that grant",
          "[dynamodb][election]")
{
    const auto mode = GENERATE(ddb::lease_mode::record_version, ddb::lease_mode::expiry_time);
    INFO((mode == ddb::lease_mode::expiry_time ? "expiry_time" : "record_version"));
    test::dynalite_server server;
    create_table(server);
    auto cfg = server.config();
    cfg.mode = mode;
    asio::io_context io;
    ddb::store store{io, cfg};
    test::run(io, [&]() -> asio::awaitable<void> {
        using mutex = dl::basic_distributed_mutex<ddb::store, dl::retry::none>;
        const std::string name = "ddb:elected";
        mutex m{store, name, {.ttl = 10s}};
        auto first = co_await m.try_lock();
        REQUIRE(first);
        // Granted, not proclaimed yet: the leader without a value.
        auto led = co_await store.leader(name);
        REQUIRE(led);
        CHECK(led->epoch == first->fence());
        CHECK(led->owner == first->owner().to_hex().substr(0, 8));
        CHECK_FALSE(led->value);
        CHECK(led->remaining.has_value() == (mode == ddb::lease_mode::expiry_time));

        // Any bytes, NUL included, up to the limit; a Binary attribute tagged with the fence.
        std::string value(dl::max_leader_value_size, 'v');
        value[0] = '\0';
        value[7] = '\xff';
        { const auto ok_ = co_await store.proclaim(name, first->owner(), first->fence(), value); CHECK(ok_); }
        auto item = lock_item_of(server, name);
        CHECK(item["leaderValue"] == nlohmann::json{{"B", ddb::detail::base64(value)}});
        CHECK(item["leaderEpoch"] == nlohmann::json{{"N", std::to_string(first->fence())}});
        led = co_await store.leader(name);
        REQUIRE(led);
        REQUIRE(led->value);
        CHECK(*led->value == value);

        // An empty value is the attribute's absence beside its epoch.
        { const auto ok_ = co_await store.proclaim(name, first->owner(), first->fence(), ""); CHECK(ok_); }
        item = lock_item_of(server, name);
        CHECK_FALSE(item.contains("leaderValue"));
        CHECK(item["leaderEpoch"] == nlohmann::json{{"N", std::to_string(first->fence())}});
        led = co_await store.leader(name);
        REQUIRE(led);
        CHECK(led->value == std::string{});

        // The wrong fence or owner is refused on the server, the item untouched.
        auto wrong = co_await store.proclaim(name, first->owner(), first->fence() + 1, "x");
        REQUIRE_FALSE(wrong);
        CHECK(wrong.error() == dl::condition::not_owner);
        wrong = co_await store.proclaim(name, dl::owner_token::generate(), first->fence(), "x");
        REQUIRE_FALSE(wrong);
        CHECK(wrong.error() == dl::condition::not_owner);
        CHECK_FALSE(lock_item_of(server, name).contains("leaderValue"));

        // Too large: refused before any I/O.
        dl::diagnostics diag;
        auto huge = co_await store.proclaim(name, first->owner(), first->fence(),
                                            std::string(dl::max_leader_value_size + 1, 'x'), &diag);
        REQUIRE_FALSE(huge);
        CHECK(huge.error() == dl::condition::invalid_argument);

        // Released: the value goes with the grant; nobody leads.
        { const auto ok_ = co_await store.proclaim(name, first->owner(), first->fence(), "first"); CHECK(ok_); }
        { const auto ok_ = co_await first->unlock(); CHECK(ok_); }
        item = lock_item_of(server, name);
        CHECK_FALSE(item.contains("leaderValue"));
        CHECK_FALSE(item.contains("leaderEpoch"));
        led = co_await store.leader(name);
        REQUIRE(led);
        CHECK(led->epoch == 0);
        CHECK_FALSE(led->value);
        auto late = co_await store.proclaim(name, first->owner(), first->fence(), "late");
        REQUIRE_FALSE(late);
        CHECK(late.error() == dl::condition::not_owner);

        // A value left by an earlier grant (written behind the store's back, as an
        // expired grant would leave it) is never the new leader's.
        auto second = co_await m.try_lock();
        REQUIRE(second);
        CHECK(second->fence() > first->fence());
        auto stale = direct(server, "UpdateItem",
                            {{"TableName", "distlock_test"},
                             {"Key", key_of(name)},
                             {"UpdateExpression", "SET leaderValue = :v, leaderEpoch = :e"},
                             {"ExpressionAttributeValues",
                              {{":v", {{"B", ddb::detail::base64("stale")}}},
                               {":e", {{"N", std::to_string(first->fence())}}}}}});
        REQUIRE(stale);
        led = co_await store.leader(name);
        REQUIRE(led);
        CHECK(led->epoch == second->fence());
        CHECK_FALSE(led->value);
        // A new grant drops what an earlier one left.
        { const auto ok_ = co_await second->unlock(); CHECK(ok_); }
        (void)direct(server, "UpdateItem",
                     {{"TableName", "distlock_test"},
                      {"Key", key_of(name)},
                      {"UpdateExpression", "SET leaderValue = :v, leaderEpoch = :e"},
                      {"ExpressionAttributeValues",
                       {{":v", {{"B", ddb::detail::base64("stale")}}}, {":e", {{"N", "999"}}}}}});
        auto third = co_await m.try_lock();
        REQUIRE(third);
        item = lock_item_of(server, name);
        CHECK_FALSE(item.contains("leaderValue"));
        CHECK_FALSE(item.contains("leaderEpoch"));
        { const auto ok_ = co_await third->unlock(); CHECK(ok_); }
        co_await store.close();
    });
}

TEST_CASE("dynamodb: proclaim in expiry_time mode is refused once the grant's expiry has passed",
          "[dynamodb][election]")
{
    test::dynalite_server server;
    create_table(server);
    auto cfg = server.config();
    cfg.mode = ddb::lease_mode::expiry_time;
    asio::io_context io;
    ddb::store store{io, cfg};
    test::run(io, [&]() -> asio::awaitable<void> {
        const auto owner = dl::owner_token::generate();
        auto fence = co_await store.conditional_write("ddb:expired-leader", owner, 10s, std::nullopt);
        REQUIRE(fence);
        auto past = direct(server, "UpdateItem",
                           {{"TableName", "distlock_test"},
                            {"Key", key_of("ddb:expired-leader")},
                            {"UpdateExpression", "SET expiresAt = :zero"},
                            {"ExpressionAttributeValues", {{":zero", {{"N", "0"}}}}}});
        REQUIRE(past);
        auto late = co_await store.proclaim("ddb:expired-leader", owner, fence.value(), "late");
        REQUIRE_FALSE(late);
        CHECK(late.error() == dl::condition::not_owner);
        auto led = co_await store.leader("ddb:expired-leader");
        REQUIRE(led);
        CHECK(led->epoch == 0);
        co_await store.close();
    });
}

TEST_CASE("dynamodb: lock items leader() cannot tell the grant of are protocol errors naming the field",
          "[dynamodb][election][input]")
{
    constexpr auto limit = dl::max_leader_value_size;
    const auto ok = ddb::detail::decode_leader_item(
        nlohmann::json::parse(R"({"Item": {"owner": {"S": "ab"}, "fence": {"N": "4"}, "leaderEpoch": {"N": "4"},
            "leaderValue": {"B": "AGE="}}})"),
        limit, nullptr);
    REQUIRE(ok);
    CHECK(ok->value == std::string{"\0a", 2});
    CHECK(ok->value_epoch == 4u);
    CHECK(ddb::detail::decode_leader_item(nlohmann::json::object(), limit, nullptr));
    const std::string too_long = ddb::detail::base64(std::string(limit + 1, 'x'));
    const std::vector<std::pair<std::string, std::string>> hostile{
        {R"({"Item": {"owner": {"S": "ab"}, "fence": {"N": "4"}, "leaderValue": {"S": "text"}, "leaderEpoch": {"N": "4"}}})",
         "leaderValue"},
        {R"({"Item": {"owner": {"S": "ab"}, "fence": {"N": "4"}, "leaderValue": {"B": "***"}, "leaderEpoch": {"N": "4"}}})",
         "leaderValue"},
        {R"({"Item": {"owner": {"S": "ab"}, "fence": {"N": "4"}, "leaderValue": {"B": "eA=="}}})", "leaderEpoch"},
        {R"({"Item": {"owner": {"S": "ab"}, "fence": {"N": "4"}, "leaderEpoch": {"S": "4"}}})", "leaderEpoch"},
        {R"({"Item": {"owner": {"S": "ab"}, "fence": {"N": "-4"}}})", "fence"},
        {R"({"Item": {"owner": {"S": "ab"}}})", "fence"},
        {R"({"Item": {"owner": {"S": "ab"}, "fence": {"N": "0"}}})", "fence"},
        {R"({"Item": {"owner": {"S": "ab"}, "fence": {"N": "4"}, "leaderEpoch": {"N": "4"}, "leaderValue": {"B": ")" +
             too_long + R"("}}})",
         "leaderValue"},
        {R"({"Item": []})", "Item"},
        {R"([])", ""},
    };
    for (const auto& [text, field] : hostile) {
        INFO(text.substr(0, 200));
        dl::diagnostics diag;
        auto bad = ddb::detail::decode_leader_item(nlohmann::json::parse(text), limit, &diag);
        REQUIRE_FALSE(bad);
        CHECK(bad.error() == dl::errc::protocol_error);
        CHECK(diag.client_message().find(field) != std::string_view::npos);
    }

    // Through the store: the server's item is the error's words, nothing is reported.
    test::dynalite_server server;
    create_table(server);
    auto wrote = direct(server, "PutItem",
                        {{"TableName", "distlock_test"},
                         {"Item", {{"resource", {{"B", ddb::detail::base64("ddb:bad-leader")}}},
                                   {"owner", {{"S", "0123456789abcdef"}}},
                                   {"fence", {{"N", "3"}}},
                                   {"leaderEpoch", {{"N", "3"}}},
                                   {"leaderValue", {{"S", "not binary"}}}}}});
    REQUIRE(wrote);
    asio::io_context io;
    ddb::store store{io, server.config()};
    test::run(io, [&]() -> asio::awaitable<void> {
        dl::diagnostics diag;
        auto r = co_await store.leader("ddb:bad-leader", &diag);
        REQUIRE_FALSE(r);
        CHECK(r.error() == dl::errc::protocol_error);
        CHECK(diag.client_message().find("leaderValue") != std::string_view::npos);
        co_await store.close();
    });
}

TEST_CASE("dynamodb: proclaim refuses bad input before any I/O", "[dynamodb][election][input]")
{
    for (const auto dialect : {ddb::dialect::distlock, ddb::dialect::aws}) {
        asio::io_context io;
        ddb::config c;
        c.port = 1; // nothing listens: an attempt to connect would fail otherwise
        c.dialect = dialect;
        c.credentials = {"AKIDEXAMPLE", "secret", ""};
        ddb::store store{io, c};
        test::run(io, [&]() -> asio::awaitable<void> {
            const auto owner = dl::owner_token::generate();
            auto huge = co_await store.proclaim("r", owner, 3, std::string(dl::max_leader_value_size + 1, 'x'));
            REQUIRE_FALSE(huge);
            CHECK(huge.error() == dl::condition::invalid_argument);
            auto no_epoch = co_await store.proclaim("r", owner, 0, "v");
            REQUIRE_FALSE(no_epoch);
            CHECK(no_epoch.error() == dl::condition::invalid_argument);
            auto no_name = co_await store.leader("");
            REQUIRE_FALSE(no_name);
            CHECK(no_name.error() == dl::condition::invalid_argument);
            co_await store.close();
        });
    }
}

TEST_CASE("dynamodb aws dialect: the leader's value is the AWS client's data; a foreign holder's data is its value",
          "[dynamodb][election][aws]")
{
    test::dynalite_server server;
    create_aws_table(server);
    asio::io_context io;
    ddb::store store{io, aws_config(server)};
    test::run(io, [&]() -> asio::awaitable<void> {
        using mutex = dl::basic_distributed_mutex<ddb::store, dl::retry::none>;
        mutex m{store, "aws/elected", {.ttl = 10s}};
        auto l = co_await m.try_lock();
        REQUIRE(l);
        auto led = co_await store.leader("aws/elected");
        REQUIRE(led);
        CHECK(led->epoch == l->fence());
        CHECK_FALSE(led->value);
        const std::string value{"lead\0er", 7};
        { const auto ok_ = co_await store.proclaim("aws/elected", l->owner(), l->fence(), value); CHECK(ok_); }
        // What the AWS client's getLock reads as the lock's data.
        auto item = aws_item(server, "aws/elected");
        CHECK(item["data"] == nlohmann::json{{"B", ddb::detail::base64(value)}});
        CHECK(item["leaderEpoch"] == nlohmann::json{{"N", std::to_string(l->fence())}});
        led = co_await store.leader("aws/elected");
        REQUIRE(led);
        CHECK(led->value == value);
        auto wrong = co_await store.proclaim("aws/elected", l->owner(), l->fence() + 1, "x");
        REQUIRE_FALSE(wrong);
        CHECK(wrong.error() == dl::condition::not_owner);
        { const auto ok_ = co_await l->unlock(); CHECK(ok_); }
        led = co_await store.leader("aws/elected");
        REQUIRE(led);
        CHECK(led->epoch == 0);
        auto late = co_await store.proclaim("aws/elected", l->owner(), l->fence(), "late");
        REQUIRE_FALSE(late);
        CHECK(late.error() == dl::condition::not_owner);

        // An AWS client holding with data (acquireLock withData): it leads with that
        // value, under the last fence drawn; distlock cannot proclaim over it.
        put_aws_item(server, {{"key", {{"S", "aws/elected"}}},
                              {"ownerName", {{"S", "aws-host-1"}}},
                              {"recordVersionNumber", {{"S", "r1"}}},
                              {"leaseDuration", {{"S", "60000"}}},
                              {"data", {{"B", ddb::detail::base64("from aws")}}}});
        led = co_await store.leader("aws/elected");
        REQUIRE(led);
        CHECK(led->epoch == l->fence());
        CHECK(led->owner == "aws-host");
        CHECK(led->value == "from aws");
        late = co_await store.proclaim("aws/elected", l->owner(), l->fence(), "late");
        REQUIRE_FALSE(late);
        // A stamp and a value left by an earlier distlock holder are not the AWS holder's.
        put_aws_item(server, {{"key", {{"S", "aws/elected"}}},
                              {"ownerName", {{"S", "aws-host-2"}}},
                              {"recordVersionNumber", {{"S", "r2"}}},
                              {"leaseDuration", {{"S", "60000"}}},
                              {"fence", {{"N", std::to_string(l->fence())}}},
                              {"fenceOwner", {{"S", l->owner().to_hex()}}},
                              {"leaderEpoch", {{"N", std::to_string(l->fence())}}}});
        led = co_await store.leader("aws/elected");
        REQUIRE(led);
        CHECK(led->owner == "aws-host");
        CHECK_FALSE(led->value);
        // A distlock grant's value of another type is a protocol error.
        put_aws_item(server, {{"key", {{"S", "aws/elected"}}},
                              {"ownerName", {{"S", "abc"}}},
                              {"recordVersionNumber", {{"S", "r3"}}},
                              {"leaseDuration", {{"S", "60000"}}},
                              {"fence", {{"N", "9"}}},
                              {"fenceOwner", {{"S", "abc"}}},
                              {"leaderEpoch", {{"N", "9"}}},
                              {"data", {{"S", "text"}}}});
        dl::diagnostics diag;
        auto bad = co_await store.leader("aws/elected", &diag);
        REQUIRE_FALSE(bad);
        CHECK(bad.error() == dl::errc::protocol_error);
        CHECK(diag.client_message().find("data") != std::string_view::npos);
        co_await store.close();
    });
}

TEST_CASE("dynamodb: lock-delay: arm_delay writes the mark beside the grant, a release clears it, a tombstone "
          "ends by itself",
          "[dynamodb][lock-delay]")
{
    const auto mode = GENERATE(ddb::lease_mode::expiry_time, ddb::lease_mode::record_version);
    INFO((mode == ddb::lease_mode::expiry_time ? "expiry_time" : "record_version"));
    test::dynalite_server server;
    create_table(server);
    auto cfg = server.config();
    cfg.mode = mode;
    cfg.clock_skew_margin = 0s;
    asio::io_context io;
    ddb::store store{io, cfg};
    test::run(io, [&]() -> asio::awaitable<void> {
        const auto owner = dl::owner_token::generate();
        std::optional<ddb::sighting> seen;
        auto first = co_await store.take("ddb:delay", owner, 10s, seen);
        REQUIRE(first);
        REQUIRE(first->is_granted());
        const auto fence = first->fence();
        const auto unarmed = lock_item_of(server, "ddb:delay");
        auto armed = co_await store.arm_delay("ddb:delay", owner, fence, 1500ms);
        REQUIRE(armed);
        auto item = lock_item_of(server, "ddb:delay");
        CHECK(ddb::detail::number(item, "lockDelay") == 1500u);
        if (mode == ddb::lease_mode::expiry_time) {
            CHECK(ddb::detail::number(item, "delayUntil") == *ddb::detail::number(item, "expiresAt") + 1500);
            auto extended = co_await store.extend("ddb:delay", owner, 20s);
            REQUIRE(extended);
            item = lock_item_of(server, "ddb:delay");
            CHECK(ddb::detail::number(item, "delayUntil") == *ddb::detail::number(item, "expiresAt") + 1500);
        } else {
            // A new version: a waiter watching the grant starts again, for lease + delay.
            CHECK(ddb::detail::string(item, "recordVersion") != ddb::detail::string(unarmed, "recordVersion"));
        }
        // Another owner's or another fence's grant is not marked.
        auto wrong = co_await store.arm_delay("ddb:delay", dl::owner_token::generate(), fence, 1s);
        REQUIRE_FALSE(wrong);
        CHECK(wrong.error() == dl::condition::not_owner);
        wrong = co_await store.arm_delay("ddb:delay", owner, fence + 1, 1s);
        REQUIRE_FALSE(wrong);
        CHECK(wrong.error() == dl::condition::not_owner);

        // A release clears the mark in its own write: the next grant is at once.
        dl::diagnostics diag;
        auto released = co_await store.release("ddb:delay", owner, &diag);
        INFO(diag.to_string());
        REQUIRE(released);
        item = lock_item_of(server, "ddb:delay");
        CHECK_FALSE(item.contains("lockDelay"));
        CHECK_FALSE(item.contains("delayUntil"));
        const auto next = dl::owner_token::generate();
        std::optional<ddb::sighting> watched;
        auto again = co_await store.take("ddb:delay", next, 10s, watched);
        REQUIRE(again);
        REQUIRE(again->is_granted());

        // Marked, then revoked: the tombstone refuses grants for the delay, then ends by
        // itself (in record_version mode, for a waiter that watched it that long).
        REQUIRE(co_await store.arm_delay("ddb:delay", next, again->fence(), 1500ms));
        auto revoked = co_await store.revoke("ddb:delay", again->fence(), &diag);
        INFO(diag.to_string());
        REQUIRE(revoked);
        const auto revoked_at = dl::clock::now();
        item = lock_item_of(server, "ddb:delay");
        CHECK_FALSE(item.contains("owner"));
        CHECK(ddb::detail::number(item, "lockDelay") == 1500u);
        auto fenced = co_await store.conditional_write("ddb:delay", dl::owner_token::generate(), 10s, std::nullopt);
        REQUIRE_FALSE(fenced);
        CHECK(fenced.error() == dl::errc::lock_delayed);
        const auto third = dl::owner_token::generate();
        std::optional<ddb::sighting> waiting;
        auto refused = co_await store.take("ddb:delay", third, 10s, waiting);
        REQUIRE(refused);
        REQUIRE(refused->is_delayed());
        REQUIRE(refused->not_before());
        CHECK(*refused->not_before() > dl::clock::now());
        CHECK(*refused->not_before() <= dl::clock::now() + 1500ms + 100ms);
        asio::steady_timer t{io, *refused->not_before() - dl::clock::now() + 20ms};
        co_await t.async_wait(asio::use_awaitable);
        auto taken = co_await store.take("ddb:delay", third, 10s, waiting);
        REQUIRE(taken);
        CHECK(taken->is_granted());
        CHECK(dl::clock::now() - revoked_at >= 1400ms);
        item = lock_item_of(server, "ddb:delay");
        CHECK_FALSE(item.contains("lockDelay")); // the new grant is unmarked
        co_await store.close();
    });
}

TEST_CASE("dynamodb: lock-delay: bad delays are refused before any I/O; marks of another shape are protocol errors",
          "[dynamodb][lock-delay][input]")
{
    asio::io_context io;
    auto cfg = ddb::config{};
    cfg.port = 1; // nothing listens: a request would fail otherwise
    cfg.credentials = {"AKIDEXAMPLE", "secret", ""};
    ddb::store store{io, cfg};
    test::run(io, [&]() -> asio::awaitable<void> {
        const auto owner = dl::owner_token::generate();
        for (const auto bad : {dl::duration::zero(), dl::duration{-1ms}, dl::max_wait + 1ms}) {
            auto r = co_await store.arm_delay("ddb:bad-delay", owner, 3, bad);
            REQUIRE_FALSE(r);
            CHECK(r.error() == dl::errc::invalid_argument);
        }
        auto no_fence = co_await store.arm_delay("ddb:bad-delay", owner, 0, 1s);
        REQUIRE_FALSE(no_fence);
        CHECK(no_fence.error() == dl::errc::invalid_argument);
        co_await store.close();
    });
    for (const auto* hostile : {R"({"Item": {"owner": {"S": "ab"}, "fence": {"N": "1"}, "lockDelay": {"S": "5"}}})",
                                R"({"Item": {"owner": {"S": "ab"}, "fence": {"N": "1"}, "lockDelay": {"N": "-5"}}})",
                                R"({"Item": {"owner": {"S": "ab"}, "fence": {"N": "1"}, "lockDelay": {"N": "1e99"}}})",
                                R"({"Item": {"fence": {"N": "1"}, "lockDelay": {"N": "99999999999999999"}}})",
                                R"({"Item": {"fence": {"N": "1"}, "lockDelay": {"N": "5"}, "delayUntil": {"B": ""}}})"}) {
        INFO(hostile);
        dl::diagnostics diag;
        const auto r = ddb::detail::decode_lock_item(nlohmann::json::parse(hostile), &diag);
        REQUIRE_FALSE(r);
        CHECK(r.error() == dl::errc::protocol_error);
        const auto shared = ddb::detail::decode_shared_item(nlohmann::json::parse(hostile), &diag);
        REQUIRE_FALSE(shared);
        CHECK(shared.error() == dl::errc::protocol_error);
    }
    const auto ok = ddb::detail::decode_lock_item(
        nlohmann::json::parse(R"({"Item": {"fence": {"N": "1"}, "lockDelay": {"N": "2000"}, "delayUntil": {"N": "7"}}})"),
        nullptr);
    REQUIRE(ok);
    REQUIRE(ok.value());
    CHECK(ok.value()->lock_delay == 2000u);
    CHECK(ok.value()->delay_until == 7u);
}

TEST_CASE("dynamodb: lock-delay: tombstones in shared steps: readers and writers are delayed until it ends",
          "[dynamodb][lock-delay][shared]")
{
    ddb::detail::shared_item item;
    item.lock.fence = 4;
    item.lock.owner = "aa";
    item.lock.expires_at = 1000;
    item.lock.lock_delay = 2000;
    item.lock.delay_until = 3000;
    const auto now = dl::clock::now();
    // The grant expired at 1000 (margin 0): its tombstone lasts until 3000.
    const ddb::detail::step_clock c{ddb::lease_mode::expiry_time, 2000, 0, now, 10s};
    const auto reader = ddb::detail::step_shared(item, "bb", 0, 1000, "v", c, {});
    REQUIRE(reader.reply);
    CHECK(reader.reply->is_delayed());
    CHECK(reader.reply->not_before() == now + 1001ms);
    CHECK_FALSE(reader.next);
    const auto writer = ddb::detail::step_exclusive(item, "ww", "cc", 1000, "v", c, {});
    REQUIRE(writer.reply);
    CHECK(writer.reply->is_delayed());
    CHECK_FALSE(writer.next); // no intent taken while the tombstone lasts
    // Once over, the step's write drops the mark with the holder.
    const ddb::detail::step_clock later{ddb::lease_mode::expiry_time, 3001, 0, now, 10s};
    const auto granted = ddb::detail::step_exclusive(item, "ww", "cc", 1000, "v", later, {});
    REQUIRE(granted.reply);
    CHECK(granted.reply->is_granted());
    REQUIRE(granted.next);
    CHECK_FALSE(granted.next->lock.lock_delay);
    CHECK_FALSE(granted.next->lock.delay_until);
    const auto write = ddb::detail::shared_update(item, *granted.next);
    CHECK(write["ConditionExpression"].get<std::string>().find("#d = :was_d") != std::string::npos);
    CHECK(write["UpdateExpression"].get<std::string>().find("#d") != std::string::npos);
}
