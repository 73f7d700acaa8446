// ZooKeeper's wire protocol (jute, frames, the answers a lock reads): bytes only.
#include <distlock/zookeeper/proto/codec.hpp>

#include <catch2/catch.hpp>

#include <string>
#include <vector>

namespace zk = distlock::zookeeper::proto;
using distlock::transport::decode_status;

namespace {

std::string stat_bytes(std::int64_t czxid, std::int64_t owner)
{
    zk::writer w;
    w.i64(czxid).i64(czxid + 1).i64(1700000000000).i64(1700000000001).i32(2).i32(3).i32(4).i64(owner).i32(5).i32(6).i64(
        czxid + 2);
    return w.take();
}

std::string reply_frame(std::int32_t xid, std::int64_t zxid, std::int32_t err, const std::string& body)
{
    zk::writer w;
    w.i32(xid).i64(zxid).i32(err);
    return zk::frame(w.data() + body);
}

} // namespace

TEST_CASE("zookeeper proto: jute values round-trip, big-endian, and a reader never reads past its input",
          "[zookeeper][input]")
{
    zk::writer w;
    w.i32(-2).i64(0x0102030405060708).boolean(true).bytes(std::string{"a\0b", 3}).null_bytes().strings({"x", "", "yz"});
    const auto bytes = w.take();
    CHECK(bytes.substr(0, 4) == std::string{"\xff\xff\xff\xfe", 4});
    CHECK(bytes.substr(4, 8) == std::string{"\x01\x02\x03\x04\x05\x06\x07\x08", 8});
    zk::reader r{bytes};
    CHECK(r.i32() == -2);
    CHECK(r.i64() == 0x0102030405060708);
    CHECK(r.boolean());
    CHECK(r.bytes() == std::string{"a\0b", 3});
    CHECK_FALSE(r.bytes()); // null
    CHECK(r.strings() == std::vector<std::string>{"x", "", "yz"});
    CHECK(r.ok());
    CHECK(r.at_end());
    // Every prefix fails cleanly.
    for (std::size_t n = 0; n < bytes.size(); ++n) {
        zk::reader p{std::string_view{bytes}.substr(0, n)};
        (void)p.i32();
        (void)p.i64();
        (void)p.boolean();
        (void)p.bytes();
        (void)p.bytes();
        (void)p.strings();
        CHECK_FALSE(p.ok());
    }
    // Lengths the input cannot hold, negative lengths, counts beyond the bytes left,
    // a boolean that is neither 0 nor 1.
    for (const std::string& bad : {std::string{"\x00\x00\x00\x09" "abc", 7}, std::string{"\xff\xff\xff\xfe", 4},
                                   std::string{"\x7f\xff\xff\xff", 4}}) {
        zk::reader p{bad};
        (void)p.bytes();
        CHECK_FALSE(p.ok());
        zk::reader q{bad};
        (void)q.strings();
        CHECK_FALSE(q.ok());
    }
    const std::string two{"\x02", 1};
    zk::reader b{two};
    (void)b.boolean();
    CHECK_FALSE(b.ok());
}

TEST_CASE("zookeeper proto: requests are framed as the server reads them", "[zookeeper]")
{
    const auto create = zk::encode_create2(7, "/locks/r/_c_", "owner", zk::create_flags::ephemeral | zk::create_flags::sequential);
    zk::reader r{create};
    CHECK(r.i32() == static_cast<std::int32_t>(create.size() - 4));
    CHECK(r.i32() == 7);
    CHECK(r.i32() == 15);
    CHECK(r.text() == "/locks/r/_c_");
    CHECK(r.bytes() == "owner");
    CHECK(r.i32() == 1);  // one ACL
    CHECK(r.i32() == 31); // all permissions
    CHECK(r.text() == "world");
    CHECK(r.text() == "anyone");
    CHECK(r.i32() == 3); // ephemeral + sequential
    CHECK(r.ok());
    CHECK(r.at_end());

    const auto connect = zk::encode(zk::connect_request{.last_zxid_seen = 9, .timeout_ms = 4000, .session_id = 5,
                                                         .password = std::string(16, 'p'), .read_only = false});
    zk::reader c{connect};
    CHECK(c.i32() == 4 + 8 + 4 + 8 + 4 + 16 + 1);
    CHECK(c.i32() == 0); // protocol version
    CHECK(c.i64() == 9);
    CHECK(c.i32() == 4000);
    CHECK(c.i64() == 5);
    CHECK(c.bytes() == std::string(16, 'p'));
    CHECK_FALSE(c.boolean());
    CHECK(c.at_end());

    const auto ping = zk::encode_ping();
    CHECK(ping == std::string{"\x00\x00\x00\x08\xff\xff\xff\xfe\x00\x00\x00\x0b", 12});
    const auto auth = zk::encode_auth("digest", "u:p");
    zk::reader a{auth};
    (void)a.i32();
    CHECK(a.i32() == -4);
    CHECK(a.i32() == 100);
    CHECK(a.i32() == 0);
    CHECK(a.text() == "digest");
    CHECK(a.bytes() == "u:p");
    const auto watches = zk::encode_set_watches(42, {}, {"/a"}, {});
    zk::reader s{watches};
    (void)s.i32();
    CHECK(s.i32() == -8);
    CHECK(s.i32() == 101);
    CHECK(s.i64() == 42);
    CHECK(s.strings().empty());
    CHECK(s.strings() == std::vector<std::string>{"/a"});
    CHECK(s.strings().empty());
    CHECK(s.at_end());
}

TEST_CASE("zookeeper proto: answers: create2, stat, children, events, connect", "[zookeeper]")
{
    zk::writer w;
    w.bytes("/locks/r/_c_abc-0000000007");
    const auto created = zk::parse_create2(w.data() + stat_bytes(77, 1234));
    REQUIRE(created);
    CHECK(created->path == "/locks/r/_c_abc-0000000007");
    CHECK(created->stat.czxid == 77);
    CHECK(created->stat.ephemeral_owner == 1234);
    CHECK(created->stat.pzxid == 79);
    CHECK_FALSE(zk::parse_create2(w.data() + stat_bytes(77, 1234) + "x")); // trailing bytes
    CHECK_FALSE(zk::parse_create2(w.data()));                              // no stat
    CHECK(zk::parse_stat(stat_bytes(5, 0))->czxid == 5);

    zk::writer kids;
    kids.strings({"b-0000000002", "a-0000000001"});
    const auto c = zk::parse_get_children2(kids.data() + stat_bytes(1, 0));
    REQUIRE(c);
    CHECK(c->names == std::vector<std::string>{"b-0000000002", "a-0000000001"});

    zk::writer ev;
    ev.i32(zk::event::deleted).i32(zk::state::connected).bytes("/locks/r/x");
    const auto e = zk::parse_event(ev.data());
    REQUIRE(e);
    CHECK(e->type == zk::event::deleted);
    CHECK(e->path == "/locks/r/x");

    for (const bool with_flag : {false, true}) {
        zk::writer cr;
        cr.i32(0).i32(4000).i64(99).bytes(std::string(16, 's'));
        if (with_flag)
            cr.boolean(false);
        const auto r = zk::parse_connect_response(cr.data());
        REQUIRE(r);
        CHECK(r->timeout_ms == 4000);
        CHECK(r->session_id == 99);
        CHECK(r->password == std::string(16, 's'));
    }
    zk::writer negative;
    negative.i32(0).i32(-1).i64(99).bytes("x");
    CHECK_FALSE(zk::parse_connect_response(negative.data()));
}

TEST_CASE("zookeeper proto: the codec frames answers, notifications are pushes, bad frames are malformed",
          "[zookeeper][input]")
{
    zk::writer ev;
    ev.i32(zk::event::deleted).i32(zk::state::connected).bytes("/x");
    const auto bytes = reply_frame(3, 100, 0, stat_bytes(9, 0)) + reply_frame(-1, -1, 0, ev.data()) +
                       reply_frame(4, 101, -101, "");
    zk::codec codec;
    std::size_t at = 0;
    std::vector<std::int32_t> xids;
    std::vector<bool> pushes;
    while (at < bytes.size()) {
        const auto d = codec.decode(std::string_view{bytes}.substr(at));
        REQUIRE(d.status == decode_status::complete);
        xids.push_back(d.message.xid);
        pushes.push_back(codec.is_push(d.message));
        at += d.consumed;
    }
    CHECK(xids == std::vector<std::int32_t>{3, -1, 4});
    CHECK(pushes == std::vector<bool>{false, true, false});
    const auto first = codec.decode(bytes);
    CHECK(first.message.zxid == 100);
    CHECK(zk::parse_stat(first.message.body)->czxid == 9);
    for (std::size_t n = 0; n < 4 + 16 + 68; ++n)
        CHECK(codec.decode(std::string_view{bytes}.substr(0, n)).status == decode_status::need_more);
    // A negative length, a frame over the limit, a frame too short for its header.
    CHECK(codec.decode(std::string{"\xff\xff\xff\xff", 4}).status == decode_status::malformed);
    zk::codec small{.max_frame = 8};
    CHECK(small.decode(bytes).status == decode_status::malformed);
    CHECK(codec.decode(zk::frame("short")).status == decode_status::malformed);
    zk::connect_codec cc;
    CHECK(cc.decode(zk::frame("x")).status == decode_status::malformed);
}
