// The etcd store against a member the tests start (test/support/etcd_server.hpp),
// beyond the conformance suite: resource ids escaped into keys, gateway answers and
// gRPC codes, the key layout of the queue, marks, lost sessions, fenced puts, watches
// cut and compacted, a holder blackholed, listing and revoking.
#include "etcd/etcd_support.hpp"
#include "fault/proxy.hpp"

#include <algorithm>
#include <array>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

using namespace std::chrono_literals;
using namespace test::etcd_tests;

// -- Pure functions ------------------------------------------------------------------

TEST_CASE("etcd: resource ids are escaped into keys injectively; no id's queue holds another id's keys",
          "[etcd][input]")
{
    using etcd::detail::escape;
    using etcd::detail::unescape;
    const std::vector<std::string> ids{"a", "a/b", "a%2Fb", "a0", "a/", "/", "%", "seat:12", std::string{"\0\xff/", 3},
                                       std::string(1024, '/')};
    for (const auto& id : ids) {
        const auto e = escape(id);
        CHECK(e.find('/') == std::string::npos);
        REQUIRE(unescape(e));
        CHECK(*unescape(e) == id);
        for (const auto& other : ids)
            if (other != id) {
                CHECK(escape(other) != e);
                // The queue range of `id` never contains a key of `other`.
                const auto q = etcd::detail::queue_prefix("p/", id);
                const auto key = etcd::detail::queue_prefix("p/", other) + "0123";
                CHECK_FALSE((key >= q && key < etcd::detail::range_end(q)));
            }
    }
    CHECK(escape("seat:12_A-b.c") == "seat:12_A-b.c");
    CHECK(escape("a/b c") == "a%2Fb%20c");
    CHECK_FALSE(unescape("%2"));
    CHECK_FALSE(unescape("%2f"));   // not what escape() writes
    CHECK_FALSE(unescape("%41"));   // 'A' is written plain
    CHECK_FALSE(unescape("a/b"));
    CHECK(etcd::detail::range_end("p/x/") == "p/x0");
}

TEST_CASE("etcd: a listing's range holds the keys of exactly the ids that begin with its prefix; keys parse "
          "back to ids",
          "[etcd][input]")
{
    const std::string owner = "0123456789abcdef0123456789abcdef";
    const std::vector<std::string> ids{"a", "a/b", "a%2Fb", "a0", "a/", "/", "%", "%2", "ab", "b",
                                       std::string{"a\0", 2}, std::string{"\xff"}, std::string{"\xff\xff/"},
                                       "seat:12", "seat:1", "seat:"};
    for (const auto& id : ids) {
        const auto key = etcd::detail::queue_prefix("p/", id) + owner;
        const auto parsed = etcd::detail::parse_queue_key("p/", key);
        REQUIRE(parsed);
        CHECK(parsed->resource == id);
        CHECK(parsed->owner == owner);
        for (const auto& prefix : ids) {
            const auto from = "p/" + etcd::detail::escape(prefix);
            const auto to = etcd::detail::prefix_end(from);
            INFO(key << " for the prefix " << prefix);
            CHECK((key >= from && key < to) == id.starts_with(prefix));
        }
        // Every id begins with the empty prefix: the whole store prefix.
        CHECK((key >= "p/" && key < etcd::detail::prefix_end("p/")));
    }
    const auto request = etcd::detail::listing_request("p/", "a/");
    CHECK(request["key"] == b64("p/a%2F"));
    CHECK(request["range_end"] == b64("p/a%2G"));
    CHECK(request["keys_only"] == true);
    CHECK(etcd::detail::prefix_end("a\xff\xff") == "b");
    CHECK(etcd::detail::prefix_end("\xff") == std::string(1, '\0'));

    // Keys under the prefix that this layout does not write are no locks.
    const std::vector<std::string> others{"p/counter",      "p/data/wallet",
                                          "p/a/0123",       "p/a/" + owner + "0",
                                          "p//" + owner,    "p/a/0123456789ABCDEF0123456789ABCDEF",
                                          "p/%zz/" + owner, "p/%41/" + owner,
                                          "q/a/" + owner,   "p/a/b/" + owner};
    for (const auto& other : others)
        CHECK_FALSE(etcd::detail::parse_queue_key("p/", other));

    // A concurrency.Mutex's key: its owner is its lease ID in hex (1 to 16 digits, no
    // leading zero).
    for (const auto& [key, owner_part] : std::vector<std::pair<std::string, std::string>>{
             {"p/a/1", "1"}, {"p/a/694d8d6d1e2f3a4b", "694d8d6d1e2f3a4b"}, {"p/a/abc", "abc"}}) {
        const auto parsed = etcd::detail::parse_queue_key("p/", key);
        REQUIRE(parsed);
        CHECK(parsed->resource == "a");
        CHECK(parsed->owner == owner_part);
    }
    for (const auto* other : {"p/a/0", "p/a/0abc", "p/a/694d8d6d1e2f3a4b5", "p/a/ABC"})
        CHECK_FALSE(etcd::detail::parse_queue_key("p/", other));
}

TEST_CASE("etcd: the concurrency dialect writes ids verbatim; an id holding a '/' has no queue there",
          "[etcd][input]")
{
    using etcd::key_dialect;
    const std::string owner = "0123456789abcdef0123456789abcdef";
    for (const auto& id : {std::string{"job@42"}, std::string{"a b%c"}, std::string{"seat:12"},
                           std::string{"\0\xff", 2}}) {
        INFO(id);
        CHECK(etcd::detail::id_fits_dialect(id, key_dialect::concurrency));
        const auto q = etcd::detail::queue_prefix("locks/", id, key_dialect::concurrency);
        CHECK(q == "locks/" + id + "/"); // the range concurrency.NewMutex(s, "locks/" + id) locks
        const auto parsed = etcd::detail::parse_queue_key("locks/", q + owner, key_dialect::concurrency);
        REQUIRE(parsed);
        CHECK(parsed->resource == id);
        const auto go = etcd::detail::parse_queue_key("locks/", q + "694d8d6d1e2f3a4b", key_dialect::concurrency);
        REQUIRE(go);
        CHECK(go->resource == id);
    }
    for (const auto* id : {"a/b", "/", "a/", "/a"}) {
        CHECK_FALSE(etcd::detail::id_fits_dialect(id, key_dialect::concurrency));
        CHECK(etcd::detail::id_fits_dialect(id, key_dialect::distlock));
    }
    CHECK(etcd::detail::queue_prefix("locks/", "job@42") == "locks/job%4042/"); // the default
    const auto request = etcd::detail::listing_request("p/", "job@", key_dialect::concurrency);
    CHECK(request["key"] == b64("p/job@"));
    CHECK(request["range_end"] == b64("p/jobA"));
    CHECK(etcd::dialect_named("distlock") == key_dialect::distlock);
    CHECK(etcd::dialect_named("concurrency") == key_dialect::concurrency);
    CHECK_FALSE(etcd::dialect_named("Concurrency"));
    CHECK_FALSE(etcd::dialect_named(""));
}

TEST_CASE("etcd: URLs are checked before any I/O", "[etcd][input]")
{
    auto url = etcd::config::from_url("etcd://u:p%w@127.0.0.1:2379,[::1]:2380,localhost?prefix=locks/&ttl=5");
    REQUIRE(url);
    CHECK(url->members.size() == 3);
    CHECK(url->members[0].port == 2379);
    CHECK(url->members[1].host == "::1");
    CHECK(url->members[1].port == 2380);
    CHECK(url->members[2].host == "localhost");
    CHECK(url->members[2].port == 2379);
    CHECK(url->prefix == "locks/");
    CHECK(url->session_ttl == 5s);
    CHECK(url->username == "u");
    CHECK(url->password == "p%w");
    CHECK_FALSE(url->tls);
    auto tls = etcd::config::from_url("etcds://h:1/?ca=/etc/ca.pem");
    REQUIRE(tls);
    CHECK(tls->tls);
    CHECK(tls->tls_ca_file == "/etc/ca.pem");
    CHECK(url->dialect == etcd::key_dialect::distlock);
    auto go = etcd::config::from_url("etcd://h?prefix=locks/&dialect=concurrency");
    REQUIRE(go);
    CHECK(go->dialect == etcd::key_dialect::concurrency);
    CHECK(etcd::config::from_url("etcd://h?dialect=distlock")->dialect == etcd::key_dialect::distlock);
    for (const char* bad : {"", "http://h:1", "etcd://", "etcd://h:0", "etcd://h:65536", "etcd://h:x", "etcd://[::1",
                            "etcd://h:1?ttl=1", "etcd://h:1?ttl=0", "etcd://h:1?ttl=-3", "etcd://h:1?prefix=",
                            "etcd://h:1?what=1", "etcd://h:1?ca=x", "etcd://,h:1", "etcd://:pw@h:1",
                            "etcd://h:1?dialect=", "etcd://h:1?dialect=go",
                            "etcd://h:1?dialect=distlock&dialect=concurrency"}) {
        INFO(bad);
        CHECK(etcd::config::from_url(bad).error() == dl::errc::invalid_argument);
    }
    std::string why;
    CHECK_FALSE(etcd::config::from_url("etcd://h:1?dialect=curator", &why));
    CHECK(why.find("dialect=curator") != std::string::npos);
    CHECK(why.find("'distlock' or 'concurrency'") != std::string::npos);
    etcd::config out_of_range;
    out_of_range.dialect = static_cast<etcd::key_dialect>(2);
    CHECK(out_of_range.validate() == dl::errc::invalid_argument);
}

TEST_CASE("etcd: gateway answers are read strictly: int64 strings, base64, missing fields", "[etcd][input]")
{
    using etcd::detail::integer;
    CHECK(integer(json{{"n", "42"}}, "n") == 42);
    CHECK(integer(json{{"n", 7}}, "n") == 7);
    CHECK(integer(json::object(), "n") == 0); // a default value is omitted
    CHECK_FALSE(integer(json{{"n", "4x"}}, "n"));
    CHECK_FALSE(integer(json{{"n", ""}}, "n"));
    CHECK_FALSE(integer(json{{"n", "99999999999999999999"}}, "n"));
    CHECK_FALSE(integer(json{{"n", true}}, "n"));
    const json good = {{"count", "2"},
                       {"kvs", json::array({json{{"key", b64("k")}, {"create_revision", "5"}, {"mod_revision", "5"}}})}};
    const auto r = etcd::detail::read_range(good);
    REQUIRE(r);
    CHECK(r->count == 2);
    REQUIRE(r->kvs.size() == 1);
    CHECK(r->kvs[0].key == "k");
    CHECK(r->kvs[0].create_revision == 5);
    CHECK_FALSE(etcd::detail::read_range(json{{"count", "0"}, {"kvs", json::array({json{{"key", "!!"}}})}}));
    CHECK_FALSE(etcd::detail::read_range(json{{"count", "0"}, {"kvs", json::array({json{{"key", b64("k")}}})}}));
    CHECK_FALSE(etcd::detail::read_range(json{{"kvs", "x"}}));
    CHECK_FALSE(etcd::detail::read_range(json::array()));
    CHECK_FALSE(etcd::detail::header_revision(json{{"header", json::object()}}));
}

namespace {
// A server on a free loopback port that answers every connection with `reply` and
// closes it: what a member that does not speak the store's API looks like.
class canned_server {
public:
    explicit canned_server(asio::io_context& io, std::string reply)
        : acceptor_{io, {asio::ip::make_address("127.0.0.1"), 0}}, reply_{std::move(reply)}
    {
        asio::co_spawn(io, serve(), asio::detached);
    }
    std::uint16_t port() const { return acceptor_.local_endpoint().port(); }
    void stop() { acceptor_.close(); }

private:
    asio::awaitable<void> serve()
    {
        for (;;) {
            auto [ec, socket] = co_await acceptor_.async_accept(asio::experimental::as_tuple(asio::use_awaitable));
            if (ec)
                co_return;
            char first[256];
            (void)co_await socket.async_read_some(asio::buffer(first), asio::experimental::as_tuple(asio::use_awaitable));
            (void)co_await asio::async_write(socket, asio::buffer(reply_), asio::experimental::as_tuple(asio::use_awaitable));
            socket.close();
        }
    }
    asio::ip::tcp::acceptor acceptor_;
    std::string reply_;
};
} // namespace

TEST_CASE("etcd over gRPC: a member that does not speak HTTP/2 is a protocol error quoting its words; the same "
          "member over the gateway is read as HTTP/1.1",
          "[etcd][input]")
{
    asio::io_context io;
    canned_server http1{io, "HTTP/1.1 400 Bad Request\r\nContent-Length: 11\r\nConnection: close\r\n\r\nnot for you"};
    etcd::config cfg;
    cfg.members = {{"127.0.0.1", http1.port()}};
    cfg.request_timeout = 2s;
    auto gateway = cfg;
    gateway.api = etcd::api::gateway;
    etcd::store grpc_store{io, cfg}, gateway_store{io, gateway};
    test::run(io, [&]() -> asio::awaitable<void> {
        dl::basic_distributed_mutex<etcd::store, dl::retry::none> m{grpc_store, "r"};
        dl::diagnostics diag;
        auto r = co_await m.lock(diag);
        REQUIRE_FALSE(r);
        CHECK(r.error() == dl::errc::protocol_error);
        INFO(diag.to_string());
        CHECK(diag.to_string().find("does not speak HTTP/2") != std::string::npos);
        CHECK(diag.to_string().find("HTTP/1.1 400") != std::string::npos);

        dl::basic_distributed_mutex<etcd::store, dl::retry::none> g{gateway_store, "r"};
        dl::diagnostics words;
        auto over_gateway = co_await g.lock(words);
        REQUIRE_FALSE(over_gateway);
        CHECK(over_gateway.error() == dl::errc::protocol_error); // an HTTP answer, but not etcd's
        http1.stop();
        co_await grpc_store.close();
        co_await gateway_store.close();
    });
}

TEST_CASE("etcd: gRPC codes map to conditions", "[etcd][input]")
{
    CHECK(etcd::from_grpc(5) == dl::condition::session_lost);
    CHECK(etcd::from_grpc(7) == dl::condition::denied);
    CHECK(etcd::from_grpc(16) == dl::condition::denied);
    CHECK(etcd::from_grpc(3) == dl::condition::invalid_argument);
    CHECK(etcd::from_grpc(14) == dl::condition::maybe_applied);
    CHECK(etcd::from_grpc(4) == dl::condition::maybe_applied);
    CHECK(etcd::from_grpc(8) == dl::condition::not_applied);
    CHECK(etcd::from_grpc(0) == dl::errc::protocol_error);
    CHECK(etcd::from_grpc(17) == dl::errc::protocol_error);
    CHECK(etcd::from_grpc(5).category().name() == std::string{"distlock.etcd"});
    CHECK_FALSE(etcd::from_grpc(14).message().empty());
}

TEST_CASE("etcd: queue entries state their mode in the value; a value of no known form is a foreign exclusive entry",
          "[etcd][input]")
{
    using etcd::detail::entry_kind;
    using etcd::detail::parse_entry_value;
    const std::string owner = "0123456789abcdef0123456789abcdef";
    CHECK(etcd::detail::entry_value(owner, dl::lock_mode::exclusive, 0) == owner); // the mutex's value
    CHECK(etcd::detail::entry_value(owner, dl::lock_mode::shared, 0) == owner + "+read");
    CHECK(etcd::detail::entry_value(owner, dl::lock_mode::shared, 3) == owner + "+permits=3");
    CHECK(etcd::detail::permit_value(owner, 3, 2) == owner + "+permits=3+slot=2");
    for (const auto& [value, kind, permits, slot] :
         std::vector<std::tuple<std::string, entry_kind, std::uint32_t, std::optional<std::uint32_t>>>{
             {owner, entry_kind::exclusive, 0, std::nullopt},
             {owner + "+held", entry_kind::exclusive, 0, std::nullopt},
             {owner + "+read", entry_kind::reader, 0, std::nullopt},
             {owner + "+permits=3", entry_kind::permit, 3, std::nullopt},
             {owner + "+permits=4294967295+slot=0", entry_kind::permit, 4294967295u, 0},
             {owner + "+permits=10+slot=9", entry_kind::permit, 10, 9}}) {
        INFO(value);
        const auto m = parse_entry_value(value);
        REQUIRE(m);
        CHECK(m->kind == kind);
        CHECK(m->permits == permits);
        CHECK(m->slot == slot);
    }
    for (const auto& bad :
         std::vector<std::string>{std::string{}, owner.substr(1), "0123456789ABCDEF0123456789ABCDEF", owner + "+",
                                  owner + "+read+held", owner + "+held+read", owner + "+permits=",
                                  owner + "+permits=0", owner + "+permits=03", owner + "+permits=-1",
                                  owner + "+permits=4294967296", owner + "+permits=3+slot=",
                                  owner + "+permits=3+slot=01", owner + "+permits=3+slot=1x",
                                  owner + "+permits=3+held", owner + "+slot=1", owner + " ", "x" + owner}) {
        INFO(bad);
        CHECK_FALSE(parse_entry_value(bad));
        const auto foreign = etcd::detail::entry_mode_of(bad);
        CHECK(foreign.foreign);
        CHECK(foreign.kind == entry_kind::exclusive);
    }
    CHECK_FALSE(etcd::detail::entry_mode_of(owner + "+read").foreign);
    // A concurrency.Mutex's key is never marked.
    CHECK(etcd::detail::carries_mark(etcd::detail::kv{"p/r/" + owner, owner + "+held", 1, 1, 1}));
    CHECK_FALSE(etcd::detail::carries_mark(etcd::detail::kv{"k", "", 1, 1, 1}));
}

namespace {

etcd::detail::kv entry(const std::string& name, std::int64_t created, const std::string& suffix)
{
    const std::string owner = "0123456789abcdef0123456789abcdef";
    return {"p/r/" + name, owner + suffix, created, created, 7};
}

} // namespace

TEST_CASE("etcd: a shared entry holds by the rules of its mode; a permit takes the lowest slot no entry wrote",
          "[etcd][input]")
{
    using etcd::detail::decide_shared;
    std::vector<etcd::detail::kv> q;
    // Any order in: decided oldest first.
    q = {entry("r2", 12, "+read"), entry("w", 10, ""), entry("r1", 11, "+read")};
    for (const auto* name : {"p/r/r1", "p/r/r2"}) {
        const auto d = decide_shared(q, name, nullptr);
        REQUIRE(d);
        CHECK_FALSE(d->granted);
        CHECK_FALSE(d->other_count);
    }
    q = {entry("r1", 11, "+read"), entry("r2", 12, "+read"), entry("w", 13, ""), entry("r3", 14, "+read")};
    CHECK(decide_shared(q, "p/r/r1", nullptr)->granted);
    CHECK(decide_shared(q, "p/r/r2", nullptr)->granted);
    CHECK(decide_shared(q, "p/r/r2", nullptr)->entry == 12);
    CHECK_FALSE(decide_shared(q, "p/r/w", nullptr)->granted);  // a writer waits for everyone before it
    CHECK_FALSE(decide_shared(q, "p/r/r3", nullptr)->granted); // a reader for the writers before it
    q = {entry("m", 9, "+held"), entry("w", 13, "")};
    CHECK(decide_shared(q, "p/r/m", nullptr)->granted);
    CHECK_FALSE(decide_shared(q, "p/r/w", nullptr)->granted);

    // Permits of 3: the first three hold; slots 0 and 2 are written, 1 is free.
    q = {entry("a", 10, "+permits=3+slot=0"), entry("b", 11, "+permits=3"), entry("c", 12, "+permits=3+slot=2"),
         entry("d", 13, "+permits=3")};
    const auto b = decide_shared(q, "p/r/b", nullptr);
    REQUIRE(b);
    CHECK(b->granted);
    CHECK(b->slot == 1u);
    CHECK(b->write_slot);
    CHECK(b->mode.permits == 3);
    const auto c = decide_shared(q, "p/r/c", nullptr);
    CHECK(c->granted);
    CHECK(c->slot == 2u);
    CHECK_FALSE(c->write_slot);
    CHECK_FALSE(decide_shared(q, "p/r/d", nullptr)->granted);
    q = {entry("c", 12, "+permits=3+slot=2"), entry("d", 13, "+permits=3+slot=0"), entry("e", 14, "+permits=3")};
    CHECK(decide_shared(q, "p/r/e", nullptr)->slot == 1u);

    // Another count: the newer entry is refused, whichever it is.
    q = {entry("a", 10, "+permits=3"), entry("b", 11, "+permits=2"), entry("r", 12, "+read")};
    CHECK_FALSE(decide_shared(q, "p/r/a", nullptr)->other_count);
    CHECK(decide_shared(q, "p/r/b", nullptr)->other_count);
    CHECK(decide_shared(q, "p/r/r", nullptr)->other_count);
    q = {entry("m", 10, ""), entry("a", 11, "+permits=1")}; // exclusive entries count no permits
    const auto after_mutex = decide_shared(q, "p/r/a", nullptr);
    CHECK_FALSE(after_mutex->other_count);
    CHECK_FALSE(after_mutex->granted);

    // Foreign entries (a concurrency.Mutex's "", any value of no known form) are
    // exclusive: a reader or a permit behind one waits; one behind a permit waits.
    const etcd::detail::kv go_key{"p/r/694d8d6d1e2f3a4b", "", 10, 10, 8};
    q = {go_key, entry("r", 11, "+read"), entry("x", 12, "+what")};
    CHECK(decide_shared(q, "p/r/694d8d6d1e2f3a4b", nullptr)->granted); // the oldest: it holds
    CHECK_FALSE(decide_shared(q, "p/r/r", nullptr)->granted);
    CHECK_FALSE(decide_shared(q, "p/r/x", nullptr)->granted);
    CHECK(decide_shared(q, "p/r/x", nullptr)->mode.foreign);
    q = {go_key, entry("a", 11, "+permits=3")};
    CHECK_FALSE(decide_shared(q, "p/r/a", nullptr)->granted);
    CHECK_FALSE(decide_shared(q, "p/r/a", nullptr)->other_count);
    q = {entry("a", 11, "+permits=3"), entry("x", 12, "+what")};
    CHECK(decide_shared(q, "p/r/a", nullptr)->granted);
    q = {entry("r", 11, "+read"), entry("x", 13, "+what"), entry("r2", 14, "+read")};
    CHECK(decide_shared(q, "p/r/r", nullptr)->granted);
    CHECK_FALSE(decide_shared(q, "p/r/r2", nullptr)->granted); // a reader never passes a foreign waiter

    // Malformed: a protocol error naming the key; an entry missing from its own read too.
    q = {entry("a", 10, "+permits=3"), entry("x", 0, "+read")};
    dl::diagnostics diag;
    CHECK(decide_shared(q, "p/r/a", &diag).error() == dl::errc::protocol_error);
    CHECK(diag.client_message().find("p/r/x") != std::string_view::npos);
    q = {entry("a", 0, "+read")};
    CHECK(decide_shared(q, "p/r/a", nullptr).error() == dl::errc::protocol_error);
    q = {entry("a", 10, "+read")};
    CHECK(decide_shared(q, "p/r/b", nullptr).error() == dl::errc::protocol_error);
}

TEST_CASE("etcd: a waiting entry watches the keys whose going may let it hold", "[etcd][input]")
{
    using etcd::detail::turn_keys;
    const auto names = [](const etcd::detail::turn_wait& t) {
        std::vector<std::string> out;
        for (const auto& k : t.keys)
            out.push_back(k.key);
        return out;
    };
    std::vector<etcd::detail::kv> q = {entry("w1", 10, ""), entry("r1", 11, "+read"), entry("w2", 12, "+held"),
                                       entry("r2", 13, "+read"), entry("w3", 14, "")};
    CHECK(names(*turn_keys(q, 13, nullptr)) == std::vector<std::string>{"p/r/w2"}); // the newest writer before
    CHECK(names(*turn_keys(q, 14, nullptr)) == std::vector<std::string>{"p/r/r2"}); // the predecessor
    CHECK(names(*turn_keys(q, 11, nullptr)) == std::vector<std::string>{"p/r/w1"});
    CHECK(turn_keys(q, 10, nullptr)->keys.empty()); // holds
    CHECK(turn_keys(q, 10, nullptr)->present);
    CHECK_FALSE(turn_keys(q, 99, nullptr)->present);
    const auto w2 = turn_keys(q, 14, nullptr)->keys.front();
    CHECK(w2.entry == 13);

    q = {entry("a", 10, "+permits=2+slot=0"), entry("b", 11, "+permits=2+slot=1"), entry("c", 12, "+permits=2"),
         entry("d", 13, "+permits=2")};
    // The holders: while both stay, two entries are older than c and d.
    CHECK(names(*turn_keys(q, 13, nullptr)) == std::vector<std::string>{"p/r/a", "p/r/b"});
    CHECK(names(*turn_keys(q, 12, nullptr)) == std::vector<std::string>{"p/r/a", "p/r/b"});
    CHECK(turn_keys(q, 11, nullptr)->keys.empty());
    // A foreign entry: newer ones change nothing before it; a permit or a reader
    // behind it watches it.
    q.push_back(etcd::detail::kv{"p/r/1f", "", 14, 14, 8});
    CHECK(names(*turn_keys(q, 13, nullptr)) == std::vector<std::string>{"p/r/a", "p/r/b"});
    q.push_back(entry("e", 15, "+permits=2"));
    q.push_back(entry("r", 16, "+read"));
    CHECK(names(*turn_keys(q, 15, nullptr)) == std::vector<std::string>{"p/r/1f"});
    CHECK(names(*turn_keys(q, 16, nullptr)) == std::vector<std::string>{"p/r/1f"});
    CHECK(names(*turn_keys(q, 14, nullptr)) == std::vector<std::string>{"p/r/d"});
    q.push_back(entry("x", 0, "+read"));
    CHECK(turn_keys(q, 13, nullptr).error() == dl::errc::protocol_error);
}

// -- Against a real member -------------------------------------------------------------

TEST_CASE("etcd: the key layout: one key per waiter with its session's lease, fence = create revision",
          "[etcd]")
{
    auto& server = test::shared_etcd();
    const auto prefix = test::fresh_prefix("layout");
    asio::io_context io;
    etcd::store a{io, server.config(prefix)}, b{io, server.config(prefix)};
    test::run(io, [&]() -> asio::awaitable<void> {
        dl::basic_distributed_mutex<etcd::store> ma{a, "seat/7"};
        patient_mutex mb{b, "seat/7", {}, dl::retry::exponential_backoff{.deadline = 20s}};
        auto first = co_await ma.lock();
        REQUIRE(first);
        auto waiting = test::start(co_await asio::this_coro::executor, mb.lock());
        (void)co_await test::eventually("two keys", [&] { return queue_of(server, prefix, "seat/7").size() == 2; },
                                        test::long_enough());
        const auto keys = queue_of(server, prefix, "seat/7");
        REQUIRE(keys.size() == 2);
        CHECK(keys[0].key == prefix + "seat%2F7/" + first->owner().to_hex());
        CHECK(keys[0].value == first->owner().to_hex());
        CHECK(keys[0].lease == a.session_lease());
        CHECK(keys[1].lease == b.session_lease());
        CHECK(a.session_lease() != b.session_lease());
        CHECK(static_cast<dl::fence_token>(keys[0].create_revision) == first->fence());
        { const auto ok_ = co_await first->unlock(); CHECK(ok_); }
        { const bool came_ = co_await waiting.wait(); REQUIRE(came_); }
        auto& second = waiting.get();
        REQUIRE(second);
        CHECK(second->fence() == static_cast<dl::fence_token>(keys[1].create_revision));
        CHECK(second->fence() > first->fence());
        { const auto ok_ = co_await second->unlock(); CHECK(ok_); }
        CHECK(queue_of(server, prefix, "seat/7").empty());
        const std::array<std::int64_t, 2> leases{a.session_lease(), b.session_lease()};
        co_await a.close();
        co_await b.close();
        // close() revoked both sessions' leases.
        for (const auto id : leases)
            CHECK(etcd::detail::integer(server.call("lease/timetolive", {{"ID", std::to_string(id)}}), "TTL") == -1);
    });
}

TEST_CASE("etcd: a waiter that comes to hold the lock marks its key, so the one behind it is told that it "
          "waits for the holder",
          "[etcd]")
{
    auto& server = test::shared_etcd();
    const auto prefix = test::fresh_prefix("mark");
    asio::io_context io;
    etcd::store a{io, server.config(prefix)}, b{io, server.config(prefix)}, c{io, server.config(prefix)};
    test::run(io, [&]() -> asio::awaitable<void> {
        dl::basic_distributed_mutex<etcd::store> ma{a, "r"};
        patient_mutex mb{b, "r", {}, dl::retry::exponential_backoff{.deadline = 20s}};
        patient_mutex mc{c, "r", {}, dl::retry::exponential_backoff{.deadline = 20s}};
        auto first = co_await ma.lock();
        REQUIRE(first);
        auto second = test::start(co_await asio::this_coro::executor, mb.lock());
        (void)co_await test::eventually("two keys", [&] { return queue_of(server, prefix, "r").size() == 2; },
                                        test::long_enough());
        auto third = test::start(co_await asio::this_coro::executor, mc.lock());
        (void)co_await test::eventually("three keys", [&] { return queue_of(server, prefix, "r").size() == 3; },
                                        test::long_enough());
        const auto keys = queue_of(server, prefix, "r");
        REQUIRE(keys.size() == 3);
        // Taken at the first try: whoever queues later sees it as the holder, no mark.
        CHECK(keys[0].value == first->owner().to_hex());
        { const auto ok_ = co_await first->unlock(); CHECK(ok_); }
        { const bool came_ = co_await second.wait(); REQUIRE(came_); }
        REQUIRE(second.get());
        const auto value_of = [&](const std::string& key) -> std::string {
            for (const auto& k : queue_of(server, prefix, "r"))
                if (k.key == key)
                    return k.value;
            return "(gone)";
        };
        // b held the lock after waiting: it marks its key for c. The mark keeps the
        // create revision (the fence) and the owner at the front of the value.
        const auto marked = second.get()->owner().to_hex() + "+held";
        (void)co_await test::eventually("b's mark", [&] { return value_of(keys[1].key) == marked; },
                                        test::long_enough());
        const auto after = queue_of(server, prefix, "r");
        REQUIRE(after.size() == 2);
        CHECK(after[0].create_revision == keys[1].create_revision);
        CHECK(after[0].lease == b.session_lease());
        CHECK(second.get()->fence() == static_cast<dl::fence_token>(keys[1].create_revision));
        {
            const auto info = co_await c.read("r");
            REQUIRE(info);
            CHECK(info->held);
            CHECK(info->owner == second.get()->owner().to_hex().substr(0, 8));
        }
        CHECK_FALSE(third.ready());
        { const auto ok_ = co_await second.get()->unlock(); CHECK(ok_); }
        { const bool came_ = co_await third.wait(); REQUIRE(came_); }
        auto& got = third.get();
        REQUIRE(got);
        CHECK(got->fence() == static_cast<dl::fence_token>(keys[2].create_revision));
        CHECK(got->fence() > second.get()->fence());
        (void)co_await test::eventually("c's mark",
                                        [&] { return value_of(keys[2].key) == got->owner().to_hex() + "+held"; },
                                        test::long_enough());
        { const auto ok_ = co_await got->unlock(); CHECK(ok_); }
        CHECK(queue_of(server, prefix, "r").empty());
        co_await a.close();
        co_await b.close();
        co_await c.close();
    });
}

TEST_CASE("etcd: a lost session ends its leases; a session lost before binding is not reused", "[etcd]")
{
    auto& server = test::shared_etcd();
    const auto prefix = test::fresh_prefix("lost");
    asio::io_context io;
    etcd::store a{io, server.config(prefix)};
    test::run(io, [&]() -> asio::awaitable<void> {
        dl::basic_distributed_mutex<etcd::store> m{a, "r"};
        auto l = co_await m.lock();
        REQUIRE(l);
        const auto first_lease = a.session_lease();
        auto lost = test::start(co_await asio::this_coro::executor, l->lost());
        (void)server.call("lease/revoke", {{"ID", std::to_string(first_lease)}});
        // The next keepalive hears that the lease is gone.
        { const bool came_ = co_await lost.wait(); REQUIRE(came_); }
        CHECK_FALSE(l->valid());
        auto stale = co_await l->unlock();
        CHECK_FALSE(stale);
        // The next lock opens a new session.
        auto again = co_await m.lock();
        REQUIRE(again);
        CHECK(a.session_lease() != first_lease);
        CHECK(again->fence() > l->fence());
        { const auto ok_ = co_await again->unlock(); CHECK(ok_); }
        co_await a.close();
    });
}

TEST_CASE("etcd: fenced writes: a holder whose lock ended writes nothing", "[etcd]")
{
    auto& server = test::shared_etcd();
    const auto prefix = test::fresh_prefix("fenced");
    asio::io_context io;
    etcd::store a{io, server.config(prefix)}, b{io, server.config(prefix)};
    test::run(io, [&]() -> asio::awaitable<void> {
        dl::basic_distributed_mutex<etcd::store> ma{a, "wallet"}, mb{b, "wallet"};
        auto first = co_await ma.lock();
        REQUIRE(first);
        const auto data = prefix + "data/wallet";
        { const auto ok_ = co_await a.fenced_put(data, *first, "90"); REQUIRE(ok_); }
        // A's session ends behind its back (a long pause); B takes the lock and writes.
        for (const auto& k : queue_of(server, prefix, "wallet"))
            (void)server.call("lease/revoke", {{"ID", std::to_string(k.lease)}});
        auto second = co_await mb.lock();
        REQUIRE(second);
        { const auto ok_ = co_await b.fenced_put(data, *second, "80"); REQUIRE(ok_); }
        auto stale = co_await a.fenced_put(data, *first, "40");
        REQUIRE_FALSE(stale);
        CHECK(stale.error() == dl::errc::stale_fence);
        const auto value = server.call("kv/range", etcd::detail::range_request(data));
        const auto r = etcd::detail::read_range(value);
        REQUIRE(r);
        REQUIRE(r->kvs.size() == 1);
        CHECK(r->kvs[0].value == "80");
        auto bad = co_await a.fenced_put("", *second, "x");
        CHECK(bad.error() == dl::errc::invalid_argument);
        { const auto ok_ = co_await second->unlock(); CHECK(ok_); }
        co_await a.close();
        co_await b.close();
    });
}

TEST_CASE("etcd: a watch stream cut mid-wait is opened again; the release still wakes the waiter",
          "[etcd][fault]")
{
    auto& server = test::shared_etcd();
    const auto prefix = test::fresh_prefix("cut");
    fault::proxy net{server.port()};
    asio::io_context io;
    etcd::store holder{io, server.config(prefix)}, waiter{io, server.config_through(net.port(), prefix)};
    test::recorder rec;
    test::run(io, [&]() -> asio::awaitable<void> {
        dl::basic_distributed_mutex<etcd::store> mh{holder, "r"};
        dl::basic_distributed_mutex<etcd::store, dl::observe::callback, dl::retry::fixed> mw{
            waiter, "r", {}, rec.observer(), patient()};
        auto held = co_await mh.lock();
        REQUIRE(held);
        auto waiting = test::start(co_await asio::this_coro::executor, mw.lock());
        (void)co_await test::eventually("waiting", [&] { return !rec.of<dl::wait_event>().empty(); },
                                        test::long_enough());
        co_await test::settle(200ms); // the watch is open
        for (int cut = 0; cut < 3; ++cut) {
            net.reset_all(); // every connection through the proxy is cut
            co_await test::settle(150ms);
        }
        CHECK_FALSE(waiting.ready());
        { const auto ok_ = co_await held->unlock(); CHECK(ok_); }
        { const bool came_ = co_await waiting.wait(); REQUIRE(came_); }
        auto& got = waiting.get();
        REQUIRE(got);
        REQUIRE_FALSE(rec.of<dl::wake_event>().empty());
        CHECK(rec.of<dl::wake_event>().back().notified);
        { const auto ok_ = co_await got->unlock(); CHECK(ok_); }
        co_await holder.close();
        co_await waiter.close();
    });
}

TEST_CASE("etcd: a watch from a compacted revision recovers by reading the key", "[etcd][fault]")
{
    auto& server = test::shared_etcd();
    const auto prefix = test::fresh_prefix("compact");
    asio::io_context io;
    auto client = std::make_shared<etcd::detail::client>(io.get_executor(), server.config(prefix));
    const auto put = [&](const std::string& k) {
        const auto r = server.call("kv/put", {{"key", b64(k)}, {"value", b64("v")}});
        return etcd::detail::header_revision(r).value_or(0);
    };
    const auto alive = prefix + "alive", gone = prefix + "gone";
    const auto alive_rev = put(alive);
    const auto gone_rev = put(gone);
    (void)server.call("kv/deleterange", etcd::detail::range_request(gone));
    const auto now = put(prefix + "filler");
    REQUIRE(server.call("kv/compaction", {{"revision", std::to_string(now)}}).is_object());
    test::run(io, [&]() -> asio::awaitable<void> {
        // Deleted before the compaction that erased the event: seen as gone.
        {
            const auto w = co_await etcd::detail::client::wait_deleted(client, gone, gone_rev, gone_rev,
                                                                       dl::clock::now() + 10s);
            CHECK(w.deleted);
            CHECK_FALSE(w.marked);
        }
        // Still there: watched again from now on; a put that marks it as the holder's
        // is noted, and its deletion is seen.
        auto waiting = test::start(co_await asio::this_coro::executor,
                                   etcd::detail::client::wait_deleted(client, alive, alive_rev, alive_rev,
                                                                      dl::clock::now() + 20s));
        co_await test::settle(300ms);
        CHECK_FALSE(waiting.ready());
        // A mark is the key's owner (its last part) followed by "+held".
        (void)server.call("kv/put", {{"key", b64(alive)}, {"value", b64("alive+held")}});
        co_await test::settle(300ms);
        CHECK_FALSE(waiting.ready());
        (void)server.call("kv/deleterange", etcd::detail::range_request(alive));
        { const bool came_ = co_await waiting.wait(); REQUIRE(came_); }
        CHECK(waiting.get().deleted);
        CHECK(waiting.get().marked);
        // Not deleted: not deleted at the deadline, and never marked.
        const auto kept = prefix + "kept";
        const auto kept_rev = put(kept);
        {
            const auto w = co_await etcd::detail::client::wait_deleted(client, kept, kept_rev, kept_rev + 1,
                                                                       dl::clock::now() + 300ms);
            CHECK_FALSE(w.deleted);
            CHECK_FALSE(w.marked);
        }
        client->close();
    });
}

TEST_CASE("etcd: a blackholed holder hears of its loss at its own deadline, before the server frees the lock",
          "[etcd][fault]")
{
    auto& server = test::shared_etcd();
    const auto prefix = test::fresh_prefix("blackhole");
    fault::proxy net{server.port()};
    asio::io_context io;
    auto cfg = server.config_through(net.port(), prefix);
    cfg.drift = 500ms; // room for a loaded machine's scheduling between loss and the server's expiry
    cfg.request_timeout = 1s;
    etcd::store holder{io, cfg}, other{io, server.config(prefix)};
    test::run(io, [&]() -> asio::awaitable<void> {
        dl::basic_distributed_mutex<etcd::store> mh{holder, "r"};
        auto held = co_await mh.lock();
        REQUIRE(held);
        auto lost = test::start(co_await asio::this_coro::executor, held->lost());
        net.set(fault::direction::to_server, {.blackhole = true});
        { const bool came_ = co_await lost.wait(); REQUIRE(came_); }
        // Reported while the server still keeps the key: the holder stops first.
        CHECK_FALSE(queue_of(server, prefix, "r").empty());
        CHECK_FALSE(held->valid());
        // Then the server's TTL runs out and another session takes the lock.
        patient_mutex mo{other, "r", {}, dl::retry::exponential_backoff{.deadline = 20s}};
        auto next = co_await mo.lock();
        REQUIRE(next);
        CHECK(next->fence() > held->fence());
        { const auto ok_ = co_await next->unlock(); CHECK(ok_); }
        net.set(fault::direction::to_server, {});
        co_await holder.close();
        co_await other.close();
    });
}

TEST_CASE("etcd: a session granted late, or kept alive late, sends its next keepalive while validity remains",
          "[etcd][fault]")
{
    auto& server = test::shared_etcd();
    const auto prefix = test::fresh_prefix("late-grant");
    fault::proxy net{server.port()};
    asio::io_context io;
    auto cfg = server.config_through(net.port(), prefix);
    cfg.session_ttl = 5s;
    cfg.keepalive_every = 3500ms; // longer than what a late grant leaves of the validity
    cfg.drift = 100ms;
    cfg.request_timeout = 10s;    // the held-back answers below are late, not lost
    etcd::store holder{io, cfg};
    test::run(io, [&]() -> asio::awaitable<void> {
        const auto ex = co_await asio::this_coro::executor;
        const auto pause = [&](dl::duration d) -> asio::awaitable<void> {
            asio::steady_timer t{ex, d};
            co_await t.async_wait(asio::use_awaitable);
        };
        // The session's grant is answered 3.8 s late: 1.1 s of its 4.9 s validity is
        // left, less than one keepalive interval.
        net.set(fault::direction::to_client, {.blackhole = true});
        dl::basic_distributed_mutex<etcd::store, dl::retry::none> m{holder, "r"};
        auto locking = test::start(ex, m.lock());
        co_await pause(3800ms);
        net.set(fault::direction::to_client, {});
        { const bool came_ = co_await locking.wait(); REQUIRE(came_); }
        auto& held = locking.get();
        REQUIRE(held);
        // Past the validity the grant gave: a keepalive went out in time and was answered.
        co_await pause(2s);
        CHECK(holder.keepalives_sent() >= 1);
        CHECK(held->valid());

        // A keepalive's answer held back 1.5 s (within its bound): the next one still
        // goes while the validity that answer gave lasts.
        const auto before = holder.keepalives_sent();
        net.set(fault::direction::to_client, {.blackhole = true});
        (void)co_await test::eventually("a keepalive sent", [&] { return holder.keepalives_sent() > before; },
                                        test::long_enough());
        co_await pause(1500ms);
        net.set(fault::direction::to_client, {});
        co_await pause(4s);
        CHECK(held->valid());
        CHECK(holder.keepalives_sent() >= before + 2);
        // The server agrees: the key is still there under the session's lease.
        CHECK(queue_of(server, prefix, "r").size() == 1);
        { const auto ok_ = co_await held->unlock(); CHECK(ok_); }
        co_await holder.close();
    });
}

TEST_CASE("etcd: stores of one process whose key prefixes nest are refused; the same prefix is shared",
          "[etcd][input]")
{
    using etcd::detail::nests;
    CHECK(nests("app/", "app/a/"));
    CHECK(nests("app/a/", "app/"));
    CHECK(nests("app", "apple/")); // "app" + the escaped id "le" + "/" is "apple/"
    CHECK_FALSE(nests("app/", "app/"));
    CHECK_FALSE(nests("app/", "apple/"));

    auto& server = test::shared_etcd();
    const auto prefix = test::fresh_prefix("nest");
    asio::io_context io;
    std::optional<etcd::store> outer{std::in_place, io, server.config(prefix)};
    etcd::store same{io, server.config(prefix)}; // several clients of one namespace
    try {
        etcd::store inner{io, server.config(prefix + "a/")};
        FAIL("a nested prefix was accepted");
    } catch (const std::system_error& e) {
        CHECK(e.code() == dl::errc::invalid_argument);
        CHECK(std::string_view{e.what()}.find("nests with") != std::string_view::npos);
    }
    CHECK_THROWS_AS((etcd::store{io, server.config(prefix.substr(0, prefix.size() - 1))}), std::system_error);
    // Another member (here the same server through a proxy: a store cannot tell) is
    // not compared.
    fault::proxy net{server.port()};
    etcd::store elsewhere{io, server.config_through(net.port(), prefix + "a/")};
    // Once the outer store is gone, the inner prefix is free to use... while `same`
    // lives, it is still refused.
    outer.reset();
    CHECK_THROWS_AS((etcd::store{io, server.config(prefix + "a/")}), std::system_error);
}

// -- Listing and revoking ----------------------------------------------------------------

TEST_CASE("etcd: revoking a waiter's entry is refused and leaves the queue as it was; the holder's frees the lock "
          "for the waiter",
          "[etcd]")
{
    auto& server = test::shared_etcd();
    const auto prefix = test::fresh_prefix("revoke");
    asio::io_context io;
    etcd::store a{io, server.config(prefix)}, b{io, server.config(prefix)}, operator_store{io, server.config(prefix)};
    test::run(io, [&]() -> asio::awaitable<void> {
        dl::basic_distributed_mutex<etcd::store> ma{a, "r"};
        patient_mutex mb{b, "r", {}, dl::retry::exponential_backoff{.deadline = 20s}};
        auto held = co_await ma.lock();
        REQUIRE(held);
        auto waiting = test::start(co_await asio::this_coro::executor, mb.lock());
        (void)co_await test::eventually("two keys", [&] { return queue_of(server, prefix, "r").size() == 2; },
                                        test::long_enough());
        const auto before = queue_of(server, prefix, "r");
        REQUIRE(before.size() == 2);
        const auto waiter_entry = static_cast<dl::fence_token>(before[1].create_revision);

        const auto refused = [&](std::string_view resource, dl::fence_token fence) -> asio::awaitable<bool> {
            auto r = co_await operator_store.revoke(resource, fence);
            co_return !r && r.error() == dl::errc::not_owner;
        };
        CHECK(co_await refused("r", waiter_entry));      // a waiter holds nothing
        CHECK(co_await refused("r", held->fence() + 1)); // no grant carries it
        CHECK(co_await refused("r", 0));
        CHECK(co_await refused("r", dl::fence_token{1} << 63));
        CHECK(co_await refused("elsewhere", held->fence()));
        const auto no_id = co_await operator_store.revoke("", held->fence());
        CHECK(no_id.error() == dl::errc::invalid_argument);
        const auto after = queue_of(server, prefix, "r");
        REQUIRE(after.size() == 2);
        for (std::size_t i = 0; i < 2; ++i) {
            CHECK(after[i].key == before[i].key);
            CHECK(after[i].create_revision == before[i].create_revision);
            CHECK(after[i].mod_revision == before[i].mod_revision);
        }
        co_await test::settle(50ms);
        CHECK_FALSE(waiting.ready());
        CHECK(held->valid());

        { const auto ok_ = co_await operator_store.revoke("r", held->fence()); REQUIRE(ok_); }
        { const bool came_ = co_await waiting.wait(); REQUIRE(came_); }
        auto& next = waiting.get();
        REQUIRE(next);
        CHECK(next->fence() == waiter_entry);
        { const auto ok_ = co_await next->unlock(); CHECK(ok_); }
        co_await a.close();
        co_await b.close();
        co_await operator_store.close();
    });
}

TEST_CASE("etcd: a revoked lock is lost at its session's next keepalive; the session's other locks stay valid, "
          "and released ones are no longer checked",
          "[etcd]")
{
    auto& server = test::shared_etcd();
    const auto prefix = test::fresh_prefix("revoked");
    asio::io_context io;
    etcd::store a{io, server.config(prefix)}, operator_store{io, server.config(prefix)};
    test::run(io, [&]() -> asio::awaitable<void> {
        const auto ex = co_await asio::this_coro::executor;
        dl::basic_distributed_mutex<etcd::store> m1{a, "r1"}, m2{a, "r2"}, m3{a, "r3"};
        auto one = co_await m1.lock();
        auto two = co_await m2.lock();
        auto three = co_await m3.lock();
        REQUIRE(one);
        REQUIRE(two);
        REQUIRE(three);
        CHECK(a.session_bindings() == 3);
        { const auto ok_ = co_await three->unlock(); CHECK(ok_); }
        CHECK(a.session_bindings() == 2); // a released lease is forgotten
        const auto session = a.session_lease();
        auto lost_one = test::start(ex, one->lost());
        auto lost_two = test::start(ex, two->lost());

        { const auto ok_ = co_await operator_store.revoke("r1", one->fence()); REQUIRE(ok_); }
        { const bool came_ = co_await lost_one.wait(std::chrono::milliseconds{15000}); REQUIRE(came_); }
        CHECK(lost_one.get() == dl::condition::lease_lost);
        CHECK_FALSE(one->valid());
        CHECK(a.session_bindings() == 1);

        // Two more checks: the other lock is untouched.
        const auto checked = a.key_checks_sent();
        (void)co_await test::eventually("two more checks", [&] { return a.key_checks_sent() >= checked + 2; },
                                        test::long_enough());
        co_await test::settle(200ms); // the second one's answer
        CHECK_FALSE(lost_two.ready());
        CHECK(two->valid());
        CHECK(a.session_lease() == session);
        { const auto ok_ = co_await a.fenced_put(prefix + "data", *two, "2"); CHECK(ok_); }
        const auto stale = co_await a.fenced_put(prefix + "data", *one, "1");
        CHECK(stale.error() == dl::errc::stale_fence);
        // The revoked lock's resource is free for anyone, this store included.
        auto again = co_await m1.lock();
        REQUIRE(again);
        CHECK(again->fence() > one->fence());
        { const auto ok_ = co_await again->unlock(); CHECK(ok_); }
        { const auto ok_ = co_await two->unlock(); CHECK(ok_); }
        CHECK(a.session_bindings() == 0);
        co_await a.close();
        co_await operator_store.close();
    }, std::chrono::seconds{60});
}

TEST_CASE("etcd: listing many resources: every held lock under the prefix, sorted by id, each with its holder; "
          "the session checks them all",
          "[etcd]")
{
    auto& server = test::shared_etcd();
    const auto prefix = test::fresh_prefix("many");
    asio::io_context io;
    etcd::store a{io, server.config(prefix)}, b{io, server.config(prefix)};
    // More than one presence check's worth of keys (etcd::detail::max_txn_ops), and ids
    // whose escaped keys sort in another order than the ids.
    std::vector<std::string> ids;
    for (int i = 0; i < 300; ++i)
        ids.push_back("many/" + std::to_string(i));
    for (const auto& odd :
         std::vector<std::string>{"many/%", "many/\xc3\xbc", "many/a b", "many/~", std::string{"many/\0", 6}})
        ids.push_back(odd);
    test::run(io, [&]() -> asio::awaitable<void> {
        std::vector<std::unique_ptr<dl::basic_distributed_mutex<etcd::store>>> mutexes;
        std::vector<dl::lease> leases;
        for (const auto& id : ids) {
            mutexes.push_back(std::make_unique<dl::basic_distributed_mutex<etcd::store>>(a, id));
            auto l = co_await mutexes.back()->lock();
            REQUIRE(l);
            leases.push_back(std::move(*l));
        }
        // A key of no queue under the store prefix is not listed.
        (void)server.call("kv/put", {{"key", b64(prefix + "many/data")}, {"value", b64("x")}});

        auto listed = co_await b.list("many/");
        REQUIRE(listed);
        REQUIRE(listed->size() == ids.size());
        auto sorted = ids;
        std::sort(sorted.begin(), sorted.end());
        for (std::size_t i = 0; i < sorted.size(); ++i) {
            const auto& l = (*listed)[i];
            INFO(l.resource);
            CHECK(l.resource == sorted[i]);
            const auto at = std::find(ids.begin(), ids.end(), l.resource) - ids.begin();
            REQUIRE(at < static_cast<std::ptrdiff_t>(leases.size()));
            const auto& lease = leases[static_cast<std::size_t>(at)];
            CHECK(l.lock.held);
            CHECK(l.lock.fence == lease.fence());
            CHECK(l.lock.version == std::optional{lease.fence()});
            CHECK(l.lock.owner == lease.owner().to_hex().substr(0, 8));
            CHECK(l.waiters == std::optional<std::size_t>{0});
        }
        auto ones = co_await b.list("many/1");
        REQUIRE(ones);
        CHECK(ones->size() == 111); // 1, 10-19, 100-199
        CHECK(std::all_of(ones->begin(), ones->end(), [](const auto& l) { return l.resource.starts_with("many/1"); }));
        auto percent = co_await b.list("many/%");
        REQUIRE(percent);
        REQUIRE(percent->size() == 1);
        CHECK((*percent)[0].resource == "many/%");
        const auto count = [&](std::string_view p) -> asio::awaitable<std::size_t> {
            auto got = co_await b.list(p);
            REQUIRE(got);
            co_return got->size();
        };
        CHECK(co_await count("many") == ids.size());
        CHECK(co_await count("") == ids.size());
        CHECK(co_await count("many/x") == 0);
        CHECK(co_await count(std::string(2000, 'm')) == 0); // longer than any id

        // One revoked among them: only its lease hears of it.
        const auto victim = static_cast<std::size_t>(std::find(ids.begin(), ids.end(), "many/150") - ids.begin());
        auto lost = test::start(co_await asio::this_coro::executor, leases[victim].lost());
        { const auto ok_ = co_await b.revoke("many/150", leases[victim].fence()); REQUIRE(ok_); }
        { const bool came_ = co_await lost.wait(std::chrono::milliseconds{15000}); REQUIRE(came_); }
        // Six txns more (a check of 304 keys is three): at least one whole check ran
        // after the loss, and no other lease heard of it.
        const auto checked = a.key_checks_sent();
        (void)co_await test::eventually("a check more", [&] { return a.key_checks_sent() >= checked + 6; },
                                        test::long_enough());
        co_await test::settle(300ms);
        for (std::size_t i = 0; i < leases.size(); ++i)
            if (i != victim && !leases[i].valid())
                FAIL("the lease on " << ids[i] << " was lost");
        CHECK(a.session_bindings() == ids.size() - 1);
        CHECK(co_await count("many/") == ids.size() - 1);
        for (std::size_t i = 0; i < leases.size(); ++i)
            if (i != victim) {
                const auto ok_ = co_await leases[i].unlock();
                CHECK(ok_);
            }
        CHECK(co_await count("") == 0);
        co_await a.close();
        co_await b.close();
    }, std::chrono::seconds{120});
}

TEST_CASE("etcd: a store closed or destroyed while its session checks the bound keys leaves nothing behind",
          "[etcd][fault]")
{
    auto& server = test::shared_etcd();
    for (const bool closed : {true, false}) {
        DYNAMIC_SECTION((closed ? "closed" : "destroyed")) {
            const auto prefix = test::fresh_prefix("check-end");
            fault::proxy net{server.port()};
            asio::io_context io;
            auto store = std::make_unique<etcd::store>(io, server.config_through(net.port(), prefix));
            std::optional<dl::lease> held;
            test::run(io, [&]() -> asio::awaitable<void> {
                dl::basic_distributed_mutex<etcd::store> m{*store, "r"};
                auto l = co_await m.lock();
                REQUIRE(l);
                held.emplace(std::move(*l));
                // Answers come 300 ms late: a check just sent is still waiting for
                // its answer when the store goes.
                net.set(fault::direction::to_client, {.latency = 300ms});
                const auto sent = store->key_checks_sent();
                (void)co_await test::eventually("a check sent", [&] { return store->key_checks_sent() > sent; },
                                                test::long_enough());
                if (closed)
                    co_await store->close();
            });
            if (!closed)
                store.reset();
            CHECK_FALSE(held->valid());
            if (closed) {
                // Nothing is left to run: io.run() returns.
                io.run_for(10s);
                CHECK(io.stopped());
            } else {
                io.run_for(1s);
            }
            held.reset();
            store.reset();
        }
    }
}

TEST_CASE("etcd: shared grants are entries of the mutex's queue: a mutex and a shared mutex's writer exclude "
          "each other, readers share, permits write their slots",
          "[etcd]")
{
    auto& server = test::shared_etcd();
    const auto prefix = test::fresh_prefix("shared");
    asio::io_context io;
    etcd::store a{io, server.config(prefix)}, b{io, server.config(prefix)};
    test::run(io, [&]() -> asio::awaitable<void> {
        dl::basic_distributed_mutex<etcd::store> mutex{a, "doc"};
        dl::basic_distributed_shared_mutex<etcd::store> shared{b, "doc"};
        auto m = co_await mutex.lock();
        REQUIRE(m);
        auto refused = co_await shared.try_lock();
        REQUIRE_FALSE(refused);
        CHECK(refused.error() == dl::condition::contended);
        auto not_read = co_await shared.try_lock_shared();
        REQUIRE_FALSE(not_read);
        CHECK(not_read.error() == dl::condition::contended);
        // Refused tries leave nothing queued (their entries go in the background).
        (void)co_await test::eventually("one key", [&] { return queue_of(server, prefix, "doc").size() == 1; },
                                        test::long_enough());
        { const auto ok_ = co_await m->unlock(); CHECK(ok_); }

        auto w = co_await shared.lock();
        REQUIRE(w);
        CHECK(w->fence() > m->fence());
        auto mutex_refused = co_await mutex.try_lock();
        REQUIRE_FALSE(mutex_refused);
        CHECK(mutex_refused.error() == dl::condition::contended);
        { const auto ok_ = co_await w->unlock(); CHECK(ok_); }

        auto r1 = co_await shared.lock_shared();
        auto r2 = co_await shared.lock_shared();
        REQUIRE(r1);
        REQUIRE(r2);
        auto keys = queue_of(server, prefix, "doc");
        REQUIRE(keys.size() == 2);
        CHECK(keys[0].key == prefix + "doc/" + r1->owner().to_hex());
        CHECK(keys[0].value == r1->owner().to_hex() + "+read");
        CHECK(keys[0].lease == b.session_lease());
        CHECK(static_cast<dl::fence_token>(keys[1].create_revision) == r2->fence());
        auto behind = co_await mutex.try_lock();
        CHECK_FALSE(behind);
        { const auto ok_ = co_await r1->unlock(); CHECK(ok_); }
        { const auto ok_ = co_await r2->unlock(); CHECK(ok_); }

        dl::basic_distributed_semaphore<etcd::store> pool{a, "pool", {.permits = 2}};
        auto p0 = co_await pool.acquire();
        auto p1 = co_await pool.acquire();
        REQUIRE(p0);
        REQUIRE(p1);
        CHECK(p0->slot() == 0u);
        CHECK(p1->slot() == 1u);
        keys = queue_of(server, prefix, "pool");
        REQUIRE(keys.size() == 2);
        CHECK(keys[0].value == p0->owner().to_hex() + "+permits=2+slot=0");
        CHECK(keys[1].value == p1->owner().to_hex() + "+permits=2+slot=1");
        // Writing the slot keeps the create revision: the fence.
        CHECK(static_cast<dl::fence_token>(keys[1].create_revision) == p1->fence());
        { const auto ok_ = co_await p0->unlock(); CHECK(ok_); }
        auto p2 = co_await pool.acquire();
        REQUIRE(p2);
        CHECK(p2->slot() == 0u);
        { const auto ok_ = co_await p1->unlock(); CHECK(ok_); }
        { const auto ok_ = co_await p2->unlock(); CHECK(ok_); }
        CHECK(queue_of(server, prefix, "pool").empty());
        co_await a.close();
        co_await b.close();
    });
}

TEST_CASE("etcd: permits waiting for a full semaphore are woken by any holder's release, each with a free slot",
          "[etcd]")
{
    auto& server = test::shared_etcd();
    const auto prefix = test::fresh_prefix("permits");
    asio::io_context io;
    etcd::store a{io, server.config(prefix)}, b{io, server.config(prefix)};
    test::run(io, [&]() -> asio::awaitable<void> {
        const auto ex = co_await asio::this_coro::executor;
        const dl::semaphore_options three{.permits = 3, .lease = {}};
        dl::basic_distributed_semaphore<etcd::store, dl::retry::fixed> holders{a, "pool", three, patient()};
        // What the waiters did, said when one is late.
        auto seen = std::make_shared<std::vector<std::string>>();
        const auto t0 = dl::clock::now();
        const dl::observe::callback log{[seen, t0](const dl::event& e) {
            const auto ms = [](dl::duration d) {
                return std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(d).count()) + "ms";
            };
            std::string line = ms(dl::clock::now() - t0) + ": ";
            if (const auto* a = std::get_if<dl::attempt_event>(&e))
                line += "attempt " + std::to_string(a->number) + " took " + ms(a->latency) + ": " +
                        (a->error ? a->error.message() : "granted");
            else if (const auto* w = std::get_if<dl::wait_event>(&e))
                line += "waits up to " + ms(w->planned);
            else if (const auto* k = std::get_if<dl::wake_event>(&e))
                line += "woke after " + ms(k->waited) + (k->notified ? ", notified" : "");
            else
                return;
            seen->push_back(std::move(line));
        }};
        dl::basic_distributed_semaphore<etcd::store, dl::observe::callback, dl::retry::fixed> waiters{
            b, "pool", three, log, patient()};
        std::vector<dl::lease> held;
        for (int i = 0; i < 3; ++i) {
            auto p = co_await holders.acquire();
            REQUIRE(p);
            held.push_back(std::move(p).value());
        }
        // One after the other: two calls in flight may be applied in either order, and the
        // test needs to know which entry is older.
        auto first = test::start(ex, waiters.acquire());
        (void)co_await test::eventually("four entries", [&] { return queue_of(server, prefix, "pool").size() == 4; },
                                        test::long_enough());
        auto second = test::start(ex, waiters.acquire());
        (void)co_await test::eventually("five entries", [&] { return queue_of(server, prefix, "pool").size() == 5; },
                                        test::long_enough());
        // Not the oldest holder: only a watch of every holder wakes a waiter in time
        // (the retry delay is longer than the test).
        const auto freed = *held[2].slot();
        { const auto ok_ = co_await held[2].unlock(); CHECK(ok_); }
        {
            const bool came_ = co_await first.wait(10000ms);
            if (!came_)
                for (const auto& line : *seen)
                    UNSCOPED_INFO(line);
            REQUIRE(came_);
        }
        REQUIRE(first.get());
        CHECK(first.get()->slot() == freed);
        CHECK_FALSE(second.ready());
        const auto freed_too = *held[1].slot();
        { const auto ok_ = co_await held[1].unlock(); CHECK(ok_); }
        { const bool came_ = co_await second.wait(10000ms); REQUIRE(came_); }
        REQUIRE(second.get());
        CHECK(second.get()->slot() == freed_too);
        CHECK(second.get()->fence() > first.get()->fence());
        { const auto ok_ = co_await first.get()->unlock(); CHECK(ok_); }
        { const auto ok_ = co_await second.get()->unlock(); CHECK(ok_); }
        { const auto ok_ = co_await held[0].unlock(); CHECK(ok_); }
        co_await a.close();
        co_await b.close();
    });
}

TEST_CASE("etcd: the concurrency dialect: the id verbatim in the key, ids holding '/' refused before any request, "
          "a concurrency.Mutex's key listed, read and waited for as a holder",
          "[etcd]")
{
    auto& server = test::shared_etcd();
    const auto prefix = test::fresh_prefix("dialect");
    asio::io_context io;
    auto cfg = server.config(prefix);
    cfg.dialect = etcd::key_dialect::concurrency;
    auto nowhere = cfg;
    nowhere.prefix = test::fresh_prefix("nowhere");
    nowhere.members = {{"127.0.0.1", 1}}; // nothing listens: any request would fail otherwise
    etcd::store a{io, cfg}, b{io, cfg}, unreachable{io, nowhere};
    test::run(io, [&]() -> asio::awaitable<void> {
        {
            dl::basic_distributed_mutex<etcd::store> slash{unreachable, "orders/42"};
            dl::diagnostics diag;
            auto refused = co_await slash.lock(diag);
            REQUIRE_FALSE(refused);
            CHECK(refused.error() == dl::errc::invalid_argument);
            CHECK(diag.to_string().find("holds a '/'") != std::string::npos);
            auto not_read = co_await unreachable.read("orders/42");
            CHECK(not_read.error() == dl::errc::invalid_argument);
            auto listed = co_await unreachable.list("orders/");
            REQUIRE(listed);
            CHECK(listed->empty()); // no id holds a '/'
        }

        const std::string id = "job@42";
        dl::basic_distributed_mutex<etcd::store> ma{a, id};
        auto mine = co_await ma.lock();
        REQUIRE(mine);
        auto keys = queue_of(server, prefix, id, 0, etcd::key_dialect::concurrency);
        REQUIRE(keys.size() == 1);
        CHECK(keys[0].key == prefix + "job@42/" + mine->owner().to_hex());
        CHECK(keys[0].value == mine->owner().to_hex());
        { const auto ok_ = co_await mine->unlock(); CHECK(ok_); }

        // A concurrency.Mutex's key as Go writes it: <name>/<lease in hex>, valued "",
        // with its session's lease, created only if absent.
        const auto granted = server.call("lease/grant", {{"TTL", "30"}});
        const auto lease = std::stoll(granted["ID"].get<std::string>());
        std::ostringstream hex;
        hex << std::hex << lease;
        const auto go_key = prefix + id + "/" + hex.str();
        (void)server.call("kv/put", {{"key", b64(go_key)}, {"value", ""}, {"lease", std::to_string(lease)}});
        const auto go_keys = queue_of(server, prefix, id, 0, etcd::key_dialect::concurrency);
        REQUIRE(go_keys.size() == 1);
        const auto go_fence = static_cast<dl::fence_token>(go_keys[0].create_revision);

        auto info = co_await a.read(id);
        REQUIRE(info);
        CHECK(info->held);
        CHECK(info->fence == go_fence);
        CHECK(info->owner == hex.str().substr(0, 8));
        auto listing = co_await a.list("job");
        REQUIRE(listing);
        REQUIRE(listing->size() == 1);
        CHECK(listing->front().resource == id);
        CHECK(listing->front().lock.fence == go_fence);

        dl::basic_distributed_shared_mutex<etcd::store> reader{a, id};
        auto refused = co_await reader.try_lock_shared();
        REQUIRE_FALSE(refused);
        CHECK(refused.error() == dl::condition::contended);
        // The refused reader's entry is deleted before the refusal returns.
        CHECK(queue_of(server, prefix, id, 0, etcd::key_dialect::concurrency).size() == 1);
        dl::basic_distributed_semaphore<etcd::store> permits{a, id, {.permits = 3}};
        auto no_permit = co_await permits.try_acquire();
        REQUIRE_FALSE(no_permit);
        CHECK(no_permit.error() == dl::condition::contended);

        patient_mutex mb{b, id, {}, dl::retry::exponential_backoff{.deadline = 20s}};
        auto waiting = test::start(co_await asio::this_coro::executor, mb.lock());
        (void)co_await test::eventually(
            "two keys",
            [&] { return queue_of(server, prefix, id, 0, etcd::key_dialect::concurrency).size() == 2; },
            test::long_enough());
        CHECK_FALSE(waiting.ready());
        (void)server.call("lease/revoke", {{"ID", std::to_string(lease)}}); // the Go session ends
        { const bool came_ = co_await waiting.wait(); REQUIRE(came_); }
        REQUIRE(waiting.get());
        CHECK(waiting.get()->fence() > go_fence);
        { const auto ok_ = co_await waiting.get()->unlock(); CHECK(ok_); }
        co_await a.close();
        co_await b.close();
        co_await unreachable.close();
    });
}

// -- Elections -------------------------------------------------------------------------

TEST_CASE("etcd: elections: the value's layout in the leader's entry, read back in either dialect; hostile "
          "leader reads are protocol errors",
          "[etcd][input]")
{
    using etcd::key_dialect;
    const std::string owner = "0123456789abcdef0123456789abcdef";
    const std::string value{"a\0+held", 7};
    const auto written = etcd::detail::proclaimed_entry_value(owner, value, key_dialect::distlock);
    CHECK(written == owner + "+elect=" + value + "+held");
    CHECK(etcd::detail::proclaimed_entry_value(owner, value, key_dialect::concurrency) == value);
    // Every reader of entry values reads it as the holder's exclusive entry, marked.
    const auto mode = etcd::detail::parse_entry_value(written);
    REQUIRE(mode);
    CHECK(mode->kind == etcd::detail::entry_kind::exclusive);
    CHECK(etcd::detail::carries_mark(etcd::detail::kv{"p/r/" + owner, written, 1, 1, 1}));
    CHECK(etcd::detail::parse_entry_value(owner + "+elect=+held"));
    CHECK_FALSE(etcd::detail::parse_entry_value(owner + "+elect=x"));
    CHECK_FALSE(etcd::detail::parse_entry_value(owner + "+elect+held"));
    // The mark is the owner's: a value another program writes never carries it.
    CHECK_FALSE(etcd::detail::carries_mark(etcd::detail::kv{"p/r/694d7c8a1b2c3d4e", "x+held", 1, 1, 1}));
    CHECK_FALSE(etcd::detail::carries_mark(etcd::detail::kv{"p/r/" + owner, "+held", 1, 1, 1}));

    using etcd::detail::proclaimed_in;
    CHECK(proclaimed_in(owner, written) == value);
    CHECK(proclaimed_in(owner, owner + "+elect=+held") == std::string{});
    CHECK(proclaimed_in(owner, owner) == std::nullopt);           // not proclaimed yet
    CHECK(proclaimed_in(owner, owner + "+held") == std::nullopt); // marked, not proclaimed
    CHECK(proclaimed_in(owner, value) == value);                  // the concurrency dialect's form
    CHECK(proclaimed_in(owner, "") == std::string{});
    CHECK(proclaimed_in("694d7c8a1b2c3d4e", "") == std::string{}); // a Mutex's key
    CHECK(proclaimed_in("694d7c8a1b2c3d4e", owner) == owner);      // a Go candidate's value, whatever it is
    // Another owner's elect form in this owner's key is no proclaimed value of it.
    CHECK(proclaimed_in(owner, "fedcba9876543210fedcba9876543210+elect=v+held") == std::nullopt);
    CHECK(etcd::detail::reads_as_entry_value(owner));
    CHECK(etcd::detail::reads_as_entry_value(owner + "+anything"));
    CHECK_FALSE(etcd::detail::reads_as_entry_value(owner + "x"));
    CHECK_FALSE(etcd::detail::reads_as_entry_value("0123456789ABCDEF0123456789ABCDEF"));
    CHECK_FALSE(etcd::detail::reads_as_entry_value("leader-1"));

    const std::string queue = "p/r/";
    const auto request = etcd::detail::proclaim_request(queue, queue + owner, 42, written);
    REQUIRE(request["compare"].size() == 2);
    CHECK(request["compare"][0] == etcd::detail::create_compare(queue + owner, 42));
    CHECK(request["compare"][1] == etcd::detail::created_since_compare(queue, 42));
    const auto& put = request["success"][0]["request_put"];
    CHECK(put["key"] == b64(queue + owner));
    CHECK(put["value"] == b64(written));
    CHECK(put["ignore_lease"] == true);
    CHECK_FALSE(put.contains("lease"));

    const auto one = [&](json k) { return json{{"kvs", json::array({std::move(k)})}, {"count", "1"}}; };
    const json good = {{"key", b64(queue + owner)}, {"value", b64(written)}, {"create_revision", "42"},
                       {"lease", "7"}};
    {
        const auto l = etcd::detail::decode_leader(one(good), queue, nullptr);
        REQUIRE(l);
        CHECK(l->held);
        CHECK(l->owner == owner);
        CHECK(l->entry == 42);
        CHECK(l->lease == 7);
        CHECK(l->value == value);
        const auto empty = etcd::detail::decode_leader(json::object(), queue, nullptr);
        REQUIRE(empty);
        CHECK_FALSE(empty->held);
    }
    auto outside = good;
    outside["key"] = b64("p/other/" + owner);
    auto bare = good;
    bare["key"] = b64(queue);
    auto unborn = good;
    unborn["create_revision"] = "0";
    auto negative = good;
    negative["lease"] = "-3";
    auto not_text = good;
    not_text["value"] = 12;
    json two = one(good);
    two["kvs"].push_back(good);
    two["count"] = "2";
    for (const auto& hostile : std::vector<json>{one(outside), one(bare), one(unborn), one(negative), one(not_text),
                                                 two, json::array(), json{{"kvs", "x"}}, json{{"count", "x"}}}) {
        INFO(hostile.dump());
        dl::diagnostics diag;
        const auto l = etcd::detail::decode_leader(hostile, queue, &diag);
        REQUIRE_FALSE(l);
        CHECK(l.error() == dl::errc::protocol_error);
        CHECK_FALSE(diag.to_string().empty());
    }
}

TEST_CASE("etcd: elections: the value lives in the leader's entry, written only while it holds; a new grant "
          "reports none until it proclaims; bad values refused before any request",
          "[etcd]")
{
    auto& server = test::shared_etcd();
    const auto prefix = test::fresh_prefix("elect");
    asio::io_context io;
    auto go_cfg = server.config(prefix);
    go_cfg.dialect = etcd::key_dialect::concurrency;
    auto nowhere = server.config(test::fresh_prefix("nowhere"));
    nowhere.members = {{"127.0.0.1", 1}}; // nothing listens: any request would fail
    auto nowhere_go = nowhere;
    nowhere_go.prefix = test::fresh_prefix("nowhere");
    nowhere_go.dialect = etcd::key_dialect::concurrency;
    etcd::store a{io, server.config(prefix)}, b{io, server.config(prefix)}, go{io, go_cfg},
        unreachable{io, nowhere}, unreachable_go{io, nowhere_go};
    test::run(io, [&]() -> asio::awaitable<void> {
        const auto someone = dl::owner_token::generate();
        {
            auto big = co_await unreachable.proclaim("e", someone, 5, std::string(dl::max_leader_value_size + 1, 'x'));
            REQUIRE_FALSE(big);
            CHECK(big.error() == dl::errc::invalid_argument);
            dl::diagnostics diag;
            auto shaped = co_await unreachable_go.proclaim("e", someone, 5, someone.to_hex() + "+read", &diag);
            REQUIRE_FALSE(shaped);
            CHECK(shaped.error() == dl::errc::invalid_argument);
            CHECK(diag.to_string().find("32 hex digits") != std::string::npos);
        }

        dl::basic_leader_election<etcd::store> ea{a, "e"}, eb{b, "e"};
        const std::string with_nul{"a\0b", 3};
        auto ta = co_await ea.campaign(with_nul);
        REQUIRE(ta);
        auto keys = queue_of(server, prefix, "e");
        REQUIRE(keys.size() == 1);
        CHECK(keys[0].key == prefix + "e/" + ta->owner().to_hex());
        CHECK(keys[0].value == ta->owner().to_hex() + "+elect=" + with_nul + "+held");
        CHECK(keys[0].lease == a.session_lease());
        CHECK(static_cast<dl::fence_token>(keys[0].create_revision) == ta->epoch());
        {
            auto seen = co_await b.leader("e");
            REQUIRE(seen);
            CHECK(seen->epoch == ta->epoch());
            CHECK(seen->owner == ta->owner().to_hex().substr(0, 8));
            CHECK(seen->value == with_nul);
            CHECK(seen->remaining);
        }
        const std::string largest(dl::max_leader_value_size, '\0');
        { const auto ok_ = co_await ea.proclaim(*ta, largest); REQUIRE(ok_); }
        {
            auto seen = co_await b.leader("e");
            REQUIRE(seen);
            CHECK(seen->value == largest);
        }
        // Only the holder's own key, created at its epoch.
        { const auto no_ = co_await b.proclaim("e", someone, ta->epoch(), "x"); CHECK(no_.error() == dl::errc::not_owner); }
        { const auto no_ = co_await a.proclaim("e", ta->owner(), ta->epoch() + 1, "x"); CHECK(no_.error() == dl::errc::not_owner); }

        // A waiter that comes to lead marks its key in the background: the mark never
        // overwrites the value it proclaims.
        auto next = test::start(co_await asio::this_coro::executor, eb.campaign("B"));
        (void)co_await test::eventually("two keys", [&] { return queue_of(server, prefix, "e").size() == 2; },
                                        test::long_enough());
        const auto old_epoch = ta->epoch();
        const auto old_owner = ta->owner();
        { const auto ok_ = co_await ta->resign(); CHECK(ok_); }
        { const bool came_ = co_await next.wait(); REQUIRE(came_); }
        auto& tb = next.get();
        REQUIRE(tb);
        co_await dl::backend::sleep_until(dl::clock::now() + 300ms);
        keys = queue_of(server, prefix, "e");
        REQUIRE(keys.size() == 1);
        CHECK(keys[0].value == tb->owner().to_hex() + "+elect=B+held");
        // The term that ended writes nothing.
        { const auto no_ = co_await a.proclaim("e", old_owner, old_epoch, "late"); CHECK(no_.error() == dl::errc::not_owner); }
        { const auto ok_ = co_await tb->resign(); CHECK(ok_); }
        {
            auto seen = co_await a.leader("e");
            REQUIRE(seen);
            CHECK(seen->epoch == 0);
            CHECK_FALSE(seen->value);
        }

        // A grant that has not proclaimed has no value, whatever an earlier one said.
        dl::basic_distributed_mutex<etcd::store> mb{b, "e"};
        auto held = co_await mb.lock();
        REQUIRE(held);
        {
            auto seen = co_await a.leader("e");
            REQUIRE(seen);
            CHECK(seen->epoch == held->fence());
            CHECK_FALSE(seen->value);
        }
        { const auto ok_ = co_await b.proclaim("e", held->owner(), held->fence(), ""); REQUIRE(ok_); }
        {
            auto seen = co_await a.leader("e");
            REQUIRE(seen);
            CHECK(seen->value == std::string{});
        }
        { const auto ok_ = co_await held->unlock(); CHECK(ok_); }

        // The concurrency dialect: the value is the key's whole value, as etcd's
        // concurrency.Election writes a candidate's, and read so by every dialect.
        dl::basic_leader_election<etcd::store> eg{go, "e"};
        auto tg = co_await eg.campaign("10.0.0.7:80");
        REQUIRE(tg);
        keys = queue_of(server, prefix, "e", 0, etcd::key_dialect::concurrency);
        REQUIRE(keys.size() == 1);
        CHECK(keys[0].value == "10.0.0.7:80");
        CHECK(keys[0].lease == go.session_lease());
        {
            auto seen = co_await a.leader("e"); // "e" needs no escaping: one queue for both dialects
            REQUIRE(seen);
            CHECK(seen->epoch == tg->epoch());
            CHECK(seen->value == "10.0.0.7:80");
        }
        { const auto ok_ = co_await tg->resign(); CHECK(ok_); }
        co_await a.close();
        co_await b.close();
        co_await go.close();
        co_await unreachable.close();
        co_await unreachable_go.close();
    });
}

// -- Lock-delays -----------------------------------------------------------------------

TEST_CASE("etcd: lock-delay marks lie outside every queue in both dialects; hostile mark values are refused",
          "[etcd][input]")
{
    const std::string owner = "0123456789abcdef0123456789abcdef";
    const std::vector<std::string> ids{"a", "a!lock-delay", "a!lock-delay!lock-delay", "ab", "a0", "b", "a.b"};
    for (const auto dialect : {etcd::key_dialect::distlock, etcd::key_dialect::concurrency})
        for (const auto& id : ids) {
            const auto mark = etcd::detail::delay_mark_key(etcd::detail::queue_prefix("p/", id, dialect));
            CHECK(mark == "p/" + etcd::detail::id_in_key(id, dialect) + "!lock-delay");
            // No queue's range (ours, or a concurrency.Mutex's on <prefix><id>) holds it,
            // and a listing does not read it as a lock.
            for (const auto& other : ids) {
                const auto q = etcd::detail::queue_prefix("p/", other, dialect);
                CHECK_FALSE((mark >= q && mark < etcd::detail::range_end(q)));
                if (other != id)
                    CHECK(mark != etcd::detail::delay_mark_key(q));
            }
            CHECK_FALSE(etcd::detail::parse_queue_key("p/", mark, dialect));
        }

    const auto value = etcd::detail::delay_mark_value(owner, 42, 1500);
    CHECK(value == R"({"delay_ms":"1500","fence":"42","holder":")" + owner + R"("})");
    const auto parsed = etcd::detail::parse_delay_mark(value);
    REQUIRE(parsed);
    CHECK(parsed->holder == owner);
    CHECK(parsed->fence == 42);
    CHECK(parsed->delay_ms == 1500);
    const std::vector<std::string> hostiles{"", "null", "[]", "{}", "not json", R"({"delay_ms":1500,"fence":"42","holder":"abc"})",
          R"({"delay_ms":"1500","fence":42,"holder":"abc"})", R"({"delay_ms":"0","fence":"42","holder":"abc"})",
          R"({"delay_ms":"-5","fence":"42","holder":"abc"})", R"({"delay_ms":"015","fence":"42","holder":"abc"})",
          R"({"delay_ms":"9000000000001","fence":"42","holder":"abc"})",
          R"({"delay_ms":"99999999999999999999999","fence":"42","holder":"abc"})",
          R"({"delay_ms":"1500","fence":"0","holder":"abc"})", R"({"delay_ms":"1500","fence":"42","holder":""})",
          R"({"delay_ms":"1500","fence":"42","holder":"0abc"})", R"({"delay_ms":"1500","fence":"42","holder":"XYZ"})",
          R"({"delay_ms":"1500","fence":"42","holder":"a/b"})", std::string{"{\"holder\":\"\xff\"}"},
          std::string{"\0\0", 2}};
    for (const auto& hostile : hostiles)
        CHECK_FALSE(etcd::detail::parse_delay_mark(hostile));
    // A concurrency.Mutex's lease ID names its key too.
    CHECK(etcd::detail::parse_delay_mark(R"({"delay_ms":"1","fence":"7","holder":"694d7a1f5c3b2a01"})"));
}

namespace {

using single_try = dl::basic_distributed_mutex<etcd::store, dl::retry::none>;

std::optional<etcd::detail::kv> mark_of(const std::string& prefix, const std::string& resource,
                                        etcd::key_dialect dialect = etcd::key_dialect::distlock)
{
    const auto key = etcd::detail::delay_mark_key(etcd::detail::queue_prefix(prefix, resource, dialect));
    const auto r = etcd::detail::read_range(test::shared_etcd().call("kv/range", etcd::detail::range_request(key)));
    REQUIRE(r);
    if (r->kvs.empty())
        return std::nullopt;
    return r->kvs.front();
}

void end_session_of(etcd::store& s)
{
    const auto lease = s.session_lease();
    REQUIRE(lease != 0);
    (void)test::shared_etcd().call("lease/revoke", {{"ID", std::to_string(lease)}});
}

} // namespace

TEST_CASE("etcd: lock-delay: the mark is put only for the grant that holds, beside the queue, without a lease; a "
          "release deletes it in the same txn",
          "[etcd]")
{
    auto& server = test::shared_etcd();
    const auto prefix = test::fresh_prefix("delay-mark");
    asio::io_context io;
    etcd::store a{io, server.config(prefix)}, b{io, server.config(prefix)};
    test::run(io, [&]() -> asio::awaitable<void> {
        dl::basic_distributed_mutex<etcd::store> ma{a, "r/1", {.ttl = 10s, .lock_delay = 1500ms}};
        single_try mb{b, "r/1", {.ttl = 10s}};
        auto held = co_await ma.lock();
        REQUIRE(held);
        const auto mark = mark_of(prefix, "r/1");
        REQUIRE(mark);
        CHECK(mark->key == prefix + "r%2F1!lock-delay");
        CHECK(mark->lease == 0);
        const auto parsed = etcd::detail::parse_delay_mark(mark->value);
        REQUIRE(parsed);
        CHECK(parsed->holder == held->owner().to_hex());
        CHECK(static_cast<dl::fence_token>(parsed->fence) == held->fence());
        CHECK(parsed->delay_ms == 1500);
        // The queue holds one key, and a listing one lock without waiters.
        CHECK(queue_of(server, prefix, "r/1").size() == 1);
        {
            const auto locks = co_await b.list("");
            REQUIRE(locks);
            REQUIRE(locks->size() == 1);
            CHECK(locks->front().resource == "r/1");
            CHECK(locks->front().waiters == 0);
        }
        // Owner- and fence-checked: another owner, or another fence, marks nothing.
        {
            const auto other = co_await b.arm_delay("r/1", dl::owner_token::generate(), held->fence(), 1s);
            REQUIRE_FALSE(other);
            CHECK(other.error() == dl::errc::not_owner);
            const auto stale = co_await b.arm_delay("r/1", held->owner(), held->fence() + 1, 1s);
            REQUIRE_FALSE(stale);
            CHECK(stale.error() == dl::errc::not_owner);
            const auto free = co_await b.arm_delay("r/free", held->owner(), held->fence(), 1s);
            REQUIRE_FALSE(free);
            CHECK(free.error() == dl::errc::not_owner);
            CHECK_FALSE(mark_of(prefix, "r/free"));
            CHECK(mark_of(prefix, "r/1")->mod_revision == mark->mod_revision);
        }
        { const auto ok_ = co_await held->unlock(); CHECK(ok_); }
        CHECK_FALSE(mark_of(prefix, "r/1"));
        auto next = co_await mb.try_lock();
        REQUIRE(next);
        { const auto ok_ = co_await next->unlock(); CHECK(ok_); }
        co_await a.close();
        co_await b.close();
    });
}

TEST_CASE("etcd: lock-delay: the head that finds a lost holder's mark makes it a tombstone on a lease of the delay "
          "rounded up; it expires by itself; a waiter's leaving keeps it",
          "[etcd]")
{
    auto& server = test::shared_etcd();
    const auto prefix = test::fresh_prefix("delay-tomb");
    asio::io_context io;
    etcd::store a{io, server.config(prefix)}, b{io, server.config(prefix)}, c{io, server.config(prefix)};
    test::run(io, [&]() -> asio::awaitable<void> {
        dl::basic_distributed_mutex<etcd::store> ma{a, "r", {.ttl = 10s, .lock_delay = 2300ms}};
        single_try mb{b, "r", {.ttl = 10s}};
        patient_mutex mc{c, "r", {.ttl = 10s}, dl::retry::exponential_backoff{.deadline = 20s}};
        auto held = co_await ma.lock();
        REQUIRE(held);
        // A waiter that leaves (its deadline comes) deletes its own key only.
        {
            auto gave_up = co_await mc.lock_until(dl::clock::now() + 300ms);
            REQUIRE_FALSE(gave_up);
            REQUIRE(mark_of(prefix, "r"));
        }
        end_session_of(a);
        (void)co_await test::eventually("the holder's key went", [&] { return queue_of(server, prefix, "r").empty(); },
                                        test::long_enough());
        const auto mark = mark_of(prefix, "r");
        REQUIRE(mark); // no lease: it outlived the session
        CHECK(mark->lease == 0);
        dl::diagnostics diag;
        const auto asked = dl::clock::now();
        auto refused = co_await mb.try_lock(diag);
        REQUIRE_FALSE(refused);
        CHECK(refused.error() == dl::errc::lock_delayed);
        REQUIRE(diag.lock_delay_until());
        // 2.3 s rounded up to 3 s (etcd's minimum TTL is below that here).
        CHECK(*diag.lock_delay_until() > asked + 2500ms);
        CHECK(*diag.lock_delay_until() <= dl::clock::now() + 3s);
        const auto tomb = mark_of(prefix, "r");
        REQUIRE(tomb);
        CHECK(tomb->value == mark->value);
        CHECK(tomb->lease > 0);
        const auto ttl = etcd::detail::integer(server.call("lease/timetolive", {{"ID", std::to_string(tomb->lease)}}),
                                               "TTL");
        REQUIRE(ttl);
        CHECK(*ttl >= 2);
        CHECK(*ttl <= 3);
        // The refused try leaves nothing queued, and another client is refused until the
        // same time (it reads the tombstone's lease).
        (void)co_await test::eventually("the refused entry left",
                                        [&] { return queue_of(server, prefix, "r").empty(); }, test::long_enough());
        dl::diagnostics other;
        auto also = co_await single_try{c, "r", {.ttl = 10s}}.try_lock(other);
        REQUIRE_FALSE(also);
        CHECK(also.error() == dl::errc::lock_delayed);
        REQUIRE(other.lock_delay_until());
        CHECK(*other.lock_delay_until() <= *diag.lock_delay_until() + 200ms);
        CHECK(mark_of(prefix, "r")->mod_revision == tomb->mod_revision); // one tombstone
        // Nobody asks: the tombstone goes with its lease.
        (void)co_await test::eventually("the tombstone expired", [&] { return !mark_of(prefix, "r"); },
                                        test::steps{.max = 200, .each = 50ms});
        CHECK(dl::clock::now() >= *diag.lock_delay_until() - 100ms);
        auto after = co_await mb.try_lock();
        REQUIRE(after);
        { const auto ok_ = co_await after->unlock(); CHECK(ok_); }
        co_await a.close();
        co_await b.close();
        co_await c.close();
    });
}

TEST_CASE("etcd: lock-delay: a mark of no known form is a protocol error naming it, for exclusive and shared "
          "grants; a waiter and a listing are not disturbed",
          "[etcd]")
{
    auto& server = test::shared_etcd();
    const auto prefix = test::fresh_prefix("delay-hostile");
    asio::io_context io;
    etcd::store a{io, server.config(prefix)};
    test::run(io, [&]() -> asio::awaitable<void> {
        const auto key = etcd::detail::delay_mark_key(etcd::detail::queue_prefix(prefix, "r"));
        single_try m{a, "r", {.ttl = 10s}};
        dl::basic_distributed_shared_mutex<etcd::store, dl::retry::none> sm{a, "r", {.ttl = 10s}};
        for (const auto& hostile : {std::string{"garbage"}, std::string{R"({"holder":"x"})"},
                                          std::string{"\xff\xfe"}}) {
            (void)server.call("kv/put", {{"key", b64(key)}, {"value", b64(hostile)}});
            dl::diagnostics diag;
            auto r = co_await m.try_lock(diag);
            REQUIRE_FALSE(r);
            CHECK(r.error() == dl::errc::protocol_error);
            CHECK(diag.to_string().find("!lock-delay") != std::string::npos);
            // A reply the store could not read leaves the try's entry in doubt: it is
            // deleted as work of the store after the call returned, so that over gRPC
            // the delete and the next try may be applied in either order.
            (void)co_await test::eventually("the refused try's entry gone",
                                            [&] { return queue_of(server, prefix, "r").empty(); });
            auto s = co_await sm.try_lock_shared();
            REQUIRE_FALSE(s);
            CHECK(s.error() == dl::errc::protocol_error);
            (void)co_await test::eventually("the refused reader's entry gone",
                                            [&] { return queue_of(server, prefix, "r").empty(); });
            const auto locks = co_await a.list("");
            REQUIRE(locks);
            CHECK(locks->empty());
        }
        // A tombstone whose lease is gone holds nothing back.
        const auto grant = server.call("lease/grant", {{"TTL", "60"}});
        const auto id = etcd::detail::integer(grant, "ID");
        REQUIRE(id);
        (void)server.call("kv/put", {{"key", b64(key)},
                                     {"value", b64(etcd::detail::delay_mark_value(std::string(32, 'a'), 5, 60000))},
                                     {"lease", std::to_string(*id)}});
        auto delayed = co_await m.try_lock();
        REQUIRE_FALSE(delayed);
        CHECK(delayed.error() == dl::errc::lock_delayed);
        // The delayed try's entry is deleted before the refusal returns.
        CHECK(queue_of(server, prefix, "r").empty());
        (void)server.call("lease/revoke", {{"ID", std::to_string(*id)}});
        auto free = co_await m.try_lock();
        REQUIRE(free);
        { const auto ok_ = co_await free->unlock(); CHECK(ok_); }
        co_await a.close();
    });
}
