// etcd over gRPC, the parts without I/O: protobuf's wire format (protobuf/wire.hpp),
// requests and answers translated by etcd's schema (protobuf/json_mapping.hpp,
// etcd/detail/messages.hpp), gRPC's message frames and statuses (grpc/framing.hpp).
// Every refusal of a server's bytes is errc::protocol_error with a reason.
#include <distlock/etcd/detail/keys.hpp>
#include <distlock/etcd/detail/messages.hpp>
#include <distlock/etcd/detail/replies.hpp>
#include <distlock/grpc/framing.hpp>
#include <distlock/protobuf/json_mapping.hpp>

#include <catch2/catch.hpp>

#include <cstdint>
#include <limits>
#include <string>

namespace dl = distlock;
namespace pb = distlock::protobuf;
namespace msg = distlock::etcd::detail::messages;
namespace etcd = distlock::etcd;
using json = nlohmann::json;
using namespace std::string_literals;
using namespace std::string_view_literals;

namespace {
std::string varint(std::uint64_t v)
{
    std::string out;
    pb::put_varint(out, v);
    return out;
}
} // namespace

TEST_CASE("protobuf wire: varints round-trip at their limits and are refused past them", "[grpc_messages]")
{
    for (std::uint64_t v : {std::uint64_t{0}, std::uint64_t{1}, std::uint64_t{127}, std::uint64_t{128},
                            std::uint64_t{300}, std::uint64_t{1} << 63, std::numeric_limits<std::uint64_t>::max()}) {
        const auto bytes = varint(v);
        pb::reader r{bytes};
        std::uint64_t got = 0;
        REQUIRE(r.varint(got));
        CHECK(got == v);
        CHECK(r.at_end());
    }
    CHECK(varint(300) == "\xac\x02"s);
    CHECK(varint(static_cast<std::uint64_t>(std::int64_t{-1})).size() == 10); // proto3's negative int64

    std::uint64_t v = 0;
    pb::reader truncated{"\x80\x80"sv};
    CHECK_FALSE(truncated.varint(v));
    CHECK(truncated.failed());
    CHECK_FALSE(truncated.varint(v)); // and stays failed
    pb::reader eleven{"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01"sv};
    CHECK_FALSE(eleven.varint(v));
    pb::reader past_64_bits{"\xff\xff\xff\xff\xff\xff\xff\xff\xff\x02"sv};
    CHECK_FALSE(past_64_bits.varint(v));

    std::uint32_t field = 0;
    pb::wire_type type{};
    pb::reader zero_field{"\x00"sv};
    CHECK_FALSE(zero_field.tag(field, type));
    pb::reader type_six{"\x0e"sv};
    CHECK_FALSE(type_six.tag(field, type));
    std::string_view s;
    pb::reader too_long{"\x05" "abc"sv};
    CHECK_FALSE(too_long.bytes(s));
    pb::reader group{"\x0b"sv};
    REQUIRE(group.tag(field, type));
    CHECK_FALSE(group.skip(type));
}

TEST_CASE("protobuf mapping: requests encode as protobuf lays them out", "[grpc_messages]")
{
    // RangeRequest{key: "a"}: field 1, length-delimited, one byte.
    CHECK(pb::encode(msg::range_request, etcd::detail::range_request("a")).value() == "\x0a\x01" "a"s);
    // A compare on create_revision 0 keeps its zero: it is a field of a oneof. (Fields
    // go in the document's order, by name; protobuf readers take any order.)
    const auto compare = pb::encode(msg::compare, etcd::detail::create_compare("k", 0)).value();
    CHECK(compare == "\x28\x00\x1a\x01k\x08\x00\x10\x01"s);
    // Enums by name, int64 from a decimal string or a number, a negative one in ten bytes.
    const auto range = pb::encode(msg::range_request, json{{"sort_order", "DESCEND"}, {"limit", "2"}}).value();
    CHECK(range == "\x18\x02\x28\x02"s);
    CHECK(pb::encode(msg::lease_grant_request, json{{"TTL", 5}}).value() == "\x08\x05"s);
    CHECK(pb::encode(msg::lease_grant_request, json{{"ID", "-1"}}).value().size() == 11);
}

TEST_CASE("protobuf mapping: the store's requests survive a round trip through the wire", "[grpc_messages]")
{
    const auto queue = "distlock/q/"s;
    const std::vector<std::pair<const pb::message_type*, json>> requests{
        {&msg::txn_request, etcd::detail::revoke_request(queue, queue + "00ff", 42)},
        {&msg::txn_request, etcd::detail::proclaim_request(queue, queue + "00ff", 42, "value\x01\xff")},
        {&msg::txn_request, etcd::detail::arm_delay_request(queue, "00ff", 42, 1500)},
        {&msg::txn_request, etcd::detail::release_request(queue + "00ff", "mark", "v")},
        {&msg::range_request, etcd::detail::queue_request(queue, "ASCEND", 1)},
        {&msg::range_request, etcd::detail::listing_request("distlock/", "job")},
        {&msg::lease_grant_request, json{{"TTL", "10"}, {"ID", "0"}}},
        {&msg::authenticate_request, json{{"name", "u"}, {"password", "p w"}}},
    };
    for (const auto& [type, doc] : requests) {
        INFO(doc.dump());
        const auto bytes = pb::encode(*type, doc);
        REQUIRE(bytes);
        const auto back = pb::decode(*type, bytes.value());
        REQUIRE(back);
        CHECK(back.value() == doc);
    }
}

TEST_CASE("protobuf mapping: a request the schema does not describe is refused with its reason", "[grpc_messages]")
{
    std::string why;
    CHECK(pb::encode(msg::range_request, json{{"no_such_field", 1}}, &why).error() == dl::errc::invalid_argument);
    CHECK(why == "RangeRequest has no field no_such_field");
    CHECK(pb::encode(msg::range_request, json{{"key", "not base64!"}}, &why).error() == dl::errc::invalid_argument);
    CHECK(why == "key: base64 text");
    CHECK(pb::encode(msg::range_request, json{{"limit", "12x"}}, &why).error() == dl::errc::invalid_argument);
    CHECK(pb::encode(msg::range_request, json{{"sort_order", "SIDEWAYS"}}, &why).error() == dl::errc::invalid_argument);
    CHECK(pb::encode(msg::txn_request, json{{"compare", json::object()}}, &why).error() == dl::errc::invalid_argument);
    CHECK(why == "TxnRequest.compare: not an array");
    CHECK(pb::encode(msg::range_request, json::array(), &why).error() == dl::errc::invalid_argument);
}

TEST_CASE("protobuf mapping: answers decode as the gateway writes them", "[grpc_messages]")
{
    // TxnResponse{header{revision: 7}, succeeded: true, responses: [{response_range: {kvs: [{key: "k",
    // create_revision: 5, value: "v"}], count: 1}}], plus a field the schema does not name.
    std::string kv;
    pb::put_bytes(kv, 1, "k");
    pb::put_varint_field(kv, 2, 5);
    pb::put_bytes(kv, 5, "v");
    std::string range;
    pb::put_bytes(range, 2, kv);
    pb::put_varint_field(range, 4, 1);
    std::string op;
    pb::put_bytes(op, 1, range);
    std::string header;
    pb::put_varint_field(header, 3, 7);
    std::string txn;
    pb::put_bytes(txn, 1, header);
    pb::put_varint_field(txn, 2, 1);
    pb::put_bytes(txn, 3, op);
    pb::put_varint_field(txn, 99, 12345); // newer than the schema: skipped
    const auto doc = pb::decode(msg::txn_response, txn);
    REQUIRE(doc);
    CHECK(doc.value() == json::parse(R"({"header":{"revision":"7"},"succeeded":true,"responses":[
        {"response_range":{"kvs":[{"key":"aw==","create_revision":"5","value":"dg=="}],"count":"1"}}]})"));
    const auto answer = etcd::detail::decode_txn(doc.value(), nullptr, {0});
    REQUIRE(answer);
    CHECK(answer->succeeded);
    CHECK(etcd::detail::decode_revision(doc.value(), nullptr).value() == 7);

    // A watch response's DELETE event names its type; PUT, the zero, is absent and read as one.
    std::string event;
    pb::put_varint_field(event, 1, 1);
    pb::put_bytes(event, 2, kv);
    std::string watch;
    pb::put_varint_field(watch, 3, 1);
    pb::put_bytes(watch, 11, event);
    const auto w = etcd::detail::decode_watch(pb::decode(msg::watch_response, watch).value(), nullptr);
    REQUIRE(w);
    CHECK(w->created);
    REQUIRE(w->events.size() == 1);
    CHECK(w->events.front().deleted);
    CHECK(w->events.front().gone == "k");

    // An enum value newer than the schema reads as its number, not as one of its names.
    std::string odd_event;
    pb::put_varint_field(odd_event, 1, 7);
    CHECK(pb::decode(msg::event, odd_event).value()["type"] == 7);
}

TEST_CASE("protobuf mapping: bytes that are not the message are a protocol error with a reason", "[grpc_messages]")
{
    std::string why;
    // A known field with the wrong wire type.
    CHECK(pb::decode(msg::range_response, "\x08\x01"s, &why).error() == dl::errc::protocol_error);
    CHECK(why == "RangeResponse.header: not length-delimited");
    // Truncated inside a nested message.
    std::string truncated;
    pb::put_bytes(truncated, 1, "\x18"s); // header{revision: <missing varint>}
    CHECK(pb::decode(msg::range_response, truncated, &why).error() == dl::errc::protocol_error);
    CHECK(why.find("ResponseHeader") != std::string::npos);
    // A length past the end, a malformed tag, an unknown field that cannot be skipped.
    CHECK(pb::decode(msg::range_response, "\x12\x7f"s).error() == dl::errc::protocol_error);
    CHECK(pb::decode(msg::range_response, "\x00"s).error() == dl::errc::protocol_error);
    CHECK(pb::decode(msg::range_response, "\xfb\x06"s).error() == dl::errc::protocol_error); // field 111, group
    // Empty bytes are the empty message.
    CHECK(pb::decode(msg::range_response, ""s).value() == json::object());
}

TEST_CASE("grpc framing: messages in their frames, split anywhere, refused when compressed or huge", "[grpc_messages]")
{
    CHECK(dl::grpc::frame("abc") == "\x00\x00\x00\x00\x03" "abc"s);
    const auto two = dl::grpc::frame("first") + dl::grpc::frame("") + dl::grpc::frame("third");
    for (std::size_t split = 0; split <= two.size(); ++split) {
        dl::grpc::deframer d;
        std::vector<std::string> got;
        std::string m;
        std::string why;
        for (auto part : {two.substr(0, split), two.substr(split)}) {
            d.append(part);
            while (d.next(m, why) == dl::grpc::deframer::status::message)
                got.push_back(m);
        }
        CHECK(got == std::vector<std::string>{"first", "", "third"});
        CHECK_FALSE(d.partial());
    }
    dl::grpc::deframer compressed;
    compressed.append("\x01\x00\x00\x00\x01x"s);
    std::string m;
    std::string why;
    CHECK(compressed.next(m, why) == dl::grpc::deframer::status::malformed);
    CHECK(why == "a compressed message (none was asked for)");
    dl::grpc::deframer huge;
    huge.append("\x00\x7f\xff\xff\xff"s); // refused from its length, nothing buffered for it
    CHECK(huge.next(m, why) == dl::grpc::deframer::status::malformed);
    dl::grpc::deframer partial;
    partial.append("\x00\x00\x00\x00\x05" "ab"s);
    CHECK(partial.next(m, why) == dl::grpc::deframer::status::need_more);
    CHECK(partial.partial());
}

TEST_CASE("grpc framing: statuses and their messages as the server writes them", "[grpc_messages]")
{
    CHECK(dl::grpc::parse_status("0") == 0);
    CHECK(dl::grpc::parse_status("16") == 16);
    for (auto bad : {"", "-1", "1x", " 1", "99999999999"})
        CHECK_FALSE(dl::grpc::parse_status(bad));
    CHECK(dl::grpc::percent_decoded("etcdserver:%20request%20timed%20out") == "etcdserver: request timed out");
    CHECK(dl::grpc::percent_decoded("100%") == "100%");
    CHECK(dl::grpc::percent_decoded("%zz%4") == "%zz%4");
    CHECK(dl::grpc::percent_decoded("%e2%9c%93") == "\xe2\x9c\x93");
    CHECK(dl::grpc::status_of_http(503) == 14);
    CHECK(dl::grpc::status_of_http(401) == 16);
    CHECK(dl::grpc::status_of_http(418) == 2);

    // etcd's statuses mean what the gateway's codes do.
    dl::diagnostics diag;
    CHECK(etcd::detail::status_error(16, "etcdserver: invalid auth token", &diag) == etcd::errc::unauthenticated);
    CHECK(diag.server_message() == "etcdserver: invalid auth token");
    CHECK(etcd::detail::status_error(3, "etcdserver: user name is empty", nullptr) == dl::errc::auth_failed);
    CHECK(etcd::detail::status_error(14, "etcdserver: leader changed", nullptr) == etcd::errc::unavailable);
    CHECK(etcd::detail::status_error(17, "no such code", nullptr) == dl::errc::protocol_error);
}

TEST_CASE("etcd RPCs: every call the store makes has its gRPC method and messages", "[grpc_messages]")
{
    for (auto path : {"kv/range", "kv/txn", "kv/deleterange", "lease/grant", "lease/revoke", "lease/keepalive",
                      "lease/timetolive", "auth/authenticate", "watch"}) {
        const auto* rpc = msg::rpc_at(path);
        REQUIRE(rpc);
        CHECK(rpc->grpc_path.starts_with("/etcdserverpb."));
        CHECK(rpc->request);
        CHECK(rpc->response);
    }
    CHECK(msg::rpc_at("kv/compaction") == nullptr);
}
