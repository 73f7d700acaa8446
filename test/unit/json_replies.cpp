// The JSON reply reader (backend/json.hpp) and the etcd and DynamoDB reply decoders
// built on it: well-formed replies decode to the values the stores act on, and every
// field of every reply, given a value of another type, null, or left out, is either a
// documented default or errc::protocol_error naming the field: never an exception.
#include <distlock/backend/json.hpp>
#include <distlock/dynamodb/detail/replies.hpp>
#include <distlock/etcd/detail/replies.hpp>

#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <functional>
#include <set>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

namespace {

namespace dl = distlock;
namespace etcd = distlock::etcd;
namespace dynamo = distlock::dynamodb;
using json = nlohmann::json;
using dl::backend::json_integer;
using dl::backend::json_null;
using dl::backend::json_reply;

std::string b64(std::string_view s) { return dl::util::base64(s); }

// -- Mutating one field at a time ------------------------------------------------------

// What a field is replaced with: a value of each JSON type, null, or nothing.
enum class kind { string, boolean, number, array, object, null, missing };
const std::vector<kind> every_kind{kind::string, kind::boolean, kind::number, kind::array,
                                   kind::object, kind::null,    kind::missing};

const char* name_of(kind k)
{
    switch (k) {
    case kind::string: return "a string";
    case kind::boolean: return "a boolean";
    case kind::number: return "a number";
    case kind::array: return "an array";
    case kind::object: return "an object";
    case kind::null: return "null";
    case kind::missing: return "nothing";
    }
    return "?";
}

// Neither base64 nor a decimal integer: a string only where any string will do.
json replacement(kind k)
{
    switch (k) {
    case kind::string: return "x!";
    case kind::boolean: return true;
    case kind::number: return 12;
    case kind::array: return json::array({1});
    case kind::object: return json{{"a", 1}};
    case kind::null:
    case kind::missing: break;
    }
    return nullptr;
}

// "/responses/1/response_range/kvs/0/key" as the reader names it:
// "responses[1].response_range.kvs[0].key".
std::string dotted(const std::string& pointer)
{
    std::string out;
    std::size_t at = 1;
    while (at <= pointer.size()) {
        const auto next = std::min(pointer.find('/', at), pointer.size());
        const auto token = pointer.substr(at, next - at);
        if (!token.empty() && token.find_first_not_of("0123456789") == std::string::npos)
            out += "[" + token + "]";
        else
            out += (out.empty() ? "" : ".") + token;
        at = next + 1;
    }
    return out;
}

// A decoder under test: its error (empty when it decoded), with its words in `diag`.
using decoder = std::function<std::error_code(const json&, dl::diagnostics*)>;

struct field {
    std::string pointer;   // where, as a JSON pointer
    std::set<kind> accepts; // the replacements that still decode (defaults, or another valid form)
    std::string named = {}; // what the error must name; the field's path by default
};

// Each replacement of each field of `good`: no exception, and either accepted as the
// field says or errc::protocol_error whose words name the field and quote the reply.
void check_fields(const json& good, const decoder& decode, const std::vector<field>& fields)
{
    {
        dl::diagnostics diag;
        std::error_code ec;
        CHECK_NOTHROW(ec = decode(good, &diag));
        REQUIRE(ec != dl::errc::protocol_error);
    }
    for (const auto& f : fields) {
        const json::json_pointer where{f.pointer};
        for (const auto k : every_kind) {
            json doc = good;
            if (k == kind::missing) {
                auto& parent = doc[where.parent_pointer()];
                if (!parent.is_object())
                    continue; // elements are not left out: the others would move
                parent.erase(where.back());
            } else {
                doc[where] = replacement(k);
            }
            INFO(f.pointer << " given " << name_of(k) << ": " << doc.dump());
            dl::diagnostics diag;
            std::error_code ec;
            CHECK_NOTHROW(ec = decode(doc, &diag));
            if (f.accepts.count(k)) {
                CHECK(ec != dl::errc::protocol_error);
            } else {
                CHECK(ec == dl::errc::protocol_error);
                INFO("client: " << diag.client_message());
                CHECK(diag.client_message().find(f.named.empty() ? dotted(f.pointer) : f.named) !=
                      std::string_view::npos);
                CHECK_FALSE(diag.server_message().empty());
            }
        }
    }
}

template <class T>
std::error_code error_of(const dl::result<T>& r)
{
    return r ? std::error_code{} : r.error();
}

// -- Real-looking replies --------------------------------------------------------------

const json etcd_header = {{"cluster_id", "14841639068965178418"},
                          {"member_id", "10276657743932975437"},
                          {"revision", "42"},
                          {"raft_term", "3"}};

json etcd_kv(std::string_view key, std::string_view value, const char* created, const char* lease)
{
    return {{"key", b64(key)},
            {"create_revision", created},
            {"mod_revision", "41"},
            {"version", "2"},
            {"value", b64(value)},
            {"lease", lease}};
}

const json etcd_range = {
    {"header", etcd_header},
    {"kvs", json::array({etcd_kv("locks/a/0123", "0123+held", "40", "7587862091210413826")})},
    {"count", "2"}};

const json etcd_reads_txn = {
    {"header", etcd_header},
    {"succeeded", true},
    {"responses",
     json::array({json{{"response_range",
                        {{"header", etcd_header},
                         {"kvs", json::array({etcd_kv("locks/a/beef", "beef", "41", "7587862091210413826")})},
                         {"count", "1"}}}},
                  json{{"response_range",
                        {{"header", etcd_header},
                         {"kvs", json::array({etcd_kv("locks/a/0123", "", "40", "7587862091210413825")})},
                         {"count", "3"}}}}})}};

// Owner tokens as the store writes them into keys (32 hex digits).
const std::string owner_a = "0123456789abcdef0123456789abcdef";
const std::string owner_b = "00000000000000000000000000000001";
const std::string owner_c = "fedcba9876543210fedcba9876543210";
const std::string owner_d = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";

json etcd_key_only(std::string_view key, const char* created)
{
    return {{"key", b64(key)}, {"create_revision", created}, {"mod_revision", created}, {"version", "1"},
            {"lease", "7587862091210413826"}};
}

// A listing of the store prefix "locks/", keys only, in key order as etcd sends them:
// the ids "\xff", "seat/12" and "seat/7" (whose holder is its second key by key order
// but its first by creation), and two keys of no queue.
const json etcd_listing = {
    {"header", etcd_header},
    {"kvs", json::array({etcd_key_only("locks/%FF/" + owner_d, "46"), etcd_key_only("locks/counter", "30"),
                         etcd_key_only("locks/data/wallet", "31"), etcd_key_only("locks/seat%2F12/" + owner_c, "45"),
                         etcd_key_only("locks/seat%2F7/" + owner_b, "47"),
                         etcd_key_only("locks/seat%2F7/" + owner_a, "44")})},
    {"count", "6"}};

// A presence check of three keys whose compares failed: the first is there as it was
// bound, the second is gone, the third was made again (another create revision).
const std::vector<etcd::detail::bound_key> etcd_checked{
    {"locks/a/" + owner_a, 40}, {"locks/b/" + owner_b, 41}, {"locks/c/" + owner_c, 43}};
const json etcd_presence_failed = {
    {"header", etcd_header},
    {"responses", json::array({json{{"response_range",
                                     {{"header", etcd_header},
                                      {"kvs", json::array({etcd_key_only("locks/a/" + owner_a, "40")})},
                                      {"count", "1"}}}},
                               json{{"response_range", {{"header", etcd_header}}}},
                               json{{"response_range",
                                     {{"header", etcd_header},
                                      {"kvs", json::array({etcd_key_only("locks/c/" + owner_c, "50")})},
                                      {"count", "1"}}}}})}};

const json etcd_watch_events = {
    {"result",
     {{"header", etcd_header},
      {"events", json::array({json{{"kv", etcd_kv("locks/a/0123", "0123+held", "40", "7587862091210413826")}},
                              json{{"type", "DELETE"}, {"kv", {{"key", b64("locks/a/0123")}, {"mod_revision", "45"}}}}})}}}};

const json etcd_watch_canceled = {{"result",
                                   {{"header", etcd_header},
                                    {"canceled", true},
                                    {"compact_revision", "38"},
                                    {"cancel_reason", "mvcc: required revision has been compacted"}}}};

const json etcd_unary_error = {{"error", "etcdserver: requested lease not found"},
                               {"code", 5},
                               {"message", "etcdserver: requested lease not found"}};

const json etcd_stream_error = {{"error",
                                 {{"grpc_code", 14},
                                  {"http_code", 503},
                                  {"message", "etcdserver: no leader"},
                                  {"http_status", "Service Unavailable"},
                                  {"details", json::array()}}}};

const json dynamo_attributes = {{"resource", {{"B", b64("locks:a")}}},
                                {"owner", {{"S", "0123456789abcdef0123456789abcdef"}}},
                                {"fence", {{"N", "7"}}},
                                {"recordVersion", {{"S", "fedcba9876543210fedcba9876543210"}}},
                                {"leaseDuration", {{"N", "10000"}}}};

const json dynamo_conditional_failed = {
    {"__type", "com.amazonaws.dynamodb.v20120810#ConditionalCheckFailedException"},
    {"message", "The conditional request failed"}};

} // namespace

// -- The reader --------------------------------------------------------------------------

TEST_CASE("json reader: typed getters, with the first problem kept and its path", "[json]")
{
    const json doc = {{"s", "text"},
                      {"b", true},
                      {"n", 42},
                      {"d", "-7"},
                      {"o", {{"inner", {{"deep", json::array({1, json{{"x", "y"}}})}}}}},
                      {"bytes", b64("hi")},
                      {"nil", nullptr}};
    auto reply = json_reply::view(doc, json_null::is_malformed);
    auto root = reply.root();
    CHECK(root.string("s") == "text");
    CHECK(root.boolean("b"));
    CHECK(root.int64("n") == 42);
    CHECK(root.int64("d", json_integer::decimal_string) == -7);
    CHECK(root.base64("bytes") == "hi");
    CHECK_FALSE(root.optional_string("absent"));
    CHECK(root.has("nil"));
    CHECK_FALSE(root.has("absent"));
    const auto deep = root.object("o").object("inner").array("deep");
    REQUIRE(deep.size() == 2);
    CHECK(deep.at(1).string("x") == "y");
    CHECK(reply.ok());

    // The first problem is the one kept; later ones do not replace it.
    CHECK(deep.at(0).string("x").empty());
    CHECK(root.string("n").empty());
    REQUIRE_FALSE(reply.ok());
    CHECK(reply.problem().path == "o.inner.deep[0]");
    CHECK(reply.problem().to_string() == "o.inner.deep[0]: expected an object, found the number 1");

    dl::diagnostics diag;
    CHECK(reply.fail(&diag, "test reply") == dl::errc::protocol_error);
    CHECK(diag.client_message() == "test reply: o.inner.deep[0]: expected an object, found the number 1");
    CHECK(diag.server_message().starts_with("{\""));
}

TEST_CASE("json reader: a null is absent or malformed, as the protocol says", "[json]")
{
    const json doc = {{"n", nullptr}};
    {
        auto reply = json_reply::view(doc, json_null::means_absent);
        auto root = reply.root();
        CHECK_FALSE(root.optional_int64("n"));
        CHECK_FALSE(root.optional_object("n").present());
        CHECK(root.optional_array("n").empty());
        CHECK(reply.ok());
        CHECK(root.int64("n") == 0); // required: a null that means absent is missing
        CHECK(reply.problem().to_string() == "n: expected a signed 64-bit integer as a JSON number, found null");
    }
    {
        auto reply = json_reply::view(doc, json_null::is_malformed);
        auto root = reply.root();
        CHECK_FALSE(root.optional_int64("n"));
        CHECK_FALSE(reply.ok());
        CHECK(reply.problem().found == "null");
    }
}

TEST_CASE("json reader: integers in each form, range-checked", "[json]")
{
    const auto int64_of = [](const json& v, json_integer form) -> std::optional<std::int64_t> {
        const json doc = {{"v", v}};
        auto reply = json_reply::view(doc, json_null::is_malformed);
        const auto n = reply.root().int64("v", form);
        return reply.ok() ? std::optional{n} : std::nullopt;
    };
    const auto uint64_of = [](const json& v, json_integer form) -> std::optional<std::uint64_t> {
        const json doc = {{"v", v}};
        auto reply = json_reply::view(doc, json_null::is_malformed);
        const auto n = reply.root().uint64("v", form);
        return reply.ok() ? std::optional{n} : std::nullopt;
    };
    constexpr auto either = json_integer::number_or_decimal_string;
    CHECK(int64_of(42, either) == 42);
    CHECK(int64_of("42", either) == 42);
    CHECK(int64_of("-9223372036854775808", either) == INT64_MIN);
    CHECK(int64_of("9223372036854775807", either) == INT64_MAX);
    CHECK_FALSE(int64_of("9223372036854775808", either));
    CHECK_FALSE(int64_of(json(9223372036854775808ULL), either));
    CHECK_FALSE(int64_of("99999999999999999999", either));
    CHECK_FALSE(int64_of("", either));
    CHECK_FALSE(int64_of(" 1", either));
    CHECK_FALSE(int64_of("+1", either));
    CHECK_FALSE(int64_of("1.5", either));
    CHECK_FALSE(int64_of("4x", either));
    CHECK_FALSE(int64_of(1.5, either));
    CHECK_FALSE(int64_of(true, either));
    CHECK_FALSE(int64_of("42", json_integer::number));
    CHECK_FALSE(int64_of(42, json_integer::decimal_string));
    CHECK(uint64_of(json(18446744073709551615ULL), json_integer::number) == UINT64_MAX);
    CHECK(uint64_of("18446744073709551615", json_integer::decimal_string) == UINT64_MAX);
    CHECK_FALSE(uint64_of("18446744073709551616", json_integer::decimal_string));
    CHECK_FALSE(uint64_of(-1, json_integer::number));
    CHECK_FALSE(uint64_of("-1", json_integer::decimal_string));
}

TEST_CASE("json reader: text that is not JSON, or nested too deep, is a problem, never a crash", "[json]")
{
    for (const std::string text : {"", "{", "nope", "{\"a\":}", "[1,]", "\"\xff\"", "1e999999"}) {
        INFO(text);
        CHECK_NOTHROW([&] {
            auto reply = json_reply::parse(text, json_null::means_absent);
            CHECK_FALSE(reply.root().present());
            CHECK_FALSE(reply.ok());
            CHECK(reply.root().string("x").empty());
        }());
    }
    const std::string deep(1'000'000, '[');
    auto reply = json_reply::parse(deep + std::string(1'000'000, ']'), json_null::means_absent);
    CHECK_FALSE(reply.ok());
    CHECK(reply.problem().expected == "JSON nested at most 256 levels deep");
    auto shallow = json_reply::parse(std::string(256, '[') + std::string(256, ']'), json_null::means_absent);
    CHECK(shallow.ok());
    // Brackets inside strings are text.
    auto quoted = json_reply::parse("[\"" + std::string(1000, '[') + "\"]", json_null::means_absent);
    CHECK(quoted.ok());
}

TEST_CASE("json reader: the diagnostics quote a bounded, printable start of the reply", "[json]")
{
    std::string body = "{\"message\": \"" + std::string(10000, 'a') + "\"}";
    auto reply = json_reply::parse(body, json_null::means_absent);
    (void)reply.root().int64("message");
    dl::diagnostics diag;
    (void)reply.fail(&diag, "test");
    CHECK(diag.server_message().size() < json_reply::excerpt_bytes + 40);
    CHECK(diag.server_message().ends_with("... (" + std::to_string(body.size()) + " bytes)"));
    CHECK(diag.client_message().size() < 200); // the found value is cut short too

    // Control bytes are escaped; a UTF-8 sequence is not cut in two.
    auto control = json_reply::parse(std::string{"x\r\n\x01y"}, json_null::means_absent);
    CHECK(control.excerpt() == "x\\x0d\\x0a\\x01y");
    // The bound is on what is quoted, escapes included.
    auto zeros = json_reply::parse(std::string(300, '\0'), json_null::means_absent);
    std::string fifty_escaped_zeros;
    for (int i = 0; i < 50; ++i)
        fifty_escaped_zeros += "\\x00";
    CHECK(zeros.excerpt() == fifty_escaped_zeros + "... (300 bytes)");
    const json long_key = {{std::string(100, '\x01'), 1}};
    auto quoted = json_reply::view(long_key, json_null::means_absent);
    CHECK(quoted.excerpt().size() <= json_reply::excerpt_bytes + 3);
    const std::string accents = std::string(json_reply::excerpt_bytes - 1, 'a') + "\xc3\xa9\xc3\xa9";
    auto cut = json_reply::parse(accents, json_null::means_absent);
    CHECK(cut.excerpt().starts_with(std::string(json_reply::excerpt_bytes - 1, 'a') + "..."));

    // A viewed document is written out, as far as the bound.
    json big = json::array();
    for (int i = 0; i < 1000; ++i)
        big.push_back({{"key", "value"}});
    auto viewed = json_reply::view(big, json_null::means_absent);
    CHECK(viewed.excerpt().size() <= json_reply::excerpt_bytes + 3);
    CHECK(viewed.excerpt().starts_with("[{\"key\":\"value\"},{"));
    CHECK(viewed.excerpt().ends_with("..."));
}

TEST_CASE("json reader: take() moves a value out of a parsed reply", "[json]")
{
    auto reply = json_reply::parse(R"({"result": {"TTL": "5"}, "other": 1})", json_null::means_absent);
    const auto inner = reply.root().object("result");
    const auto taken = reply.take(inner);
    CHECK(taken == json{{"TTL", "5"}});
    const json kept = {{"a", 1}};
    auto viewed = json_reply::view(kept, json_null::means_absent);
    CHECK(viewed.take(viewed.root()) == kept);
    CHECK(kept == json{{"a", 1}});
}

// -- etcd ----------------------------------------------------------------------------------

TEST_CASE("etcd replies: well-formed answers decode as the store reads them", "[json][etcd]")
{
    const auto range = etcd::detail::decode_range(etcd_range, nullptr);
    REQUIRE(range);
    CHECK(range->count == 2);
    REQUIRE(range->kvs.size() == 1);
    CHECK(range->kvs[0].key == "locks/a/0123");
    CHECK(range->kvs[0].value == "0123+held");
    CHECK(etcd::detail::carries_mark(range->kvs[0]));
    CHECK(range->kvs[0].create_revision == 40);
    CHECK(range->kvs[0].mod_revision == 41);
    CHECK(range->kvs[0].lease == 7587862091210413826);
    CHECK(etcd::detail::decode_revision(etcd_range, nullptr).value() == 42);

    // Defaults left out: an empty range is its header alone.
    const auto empty = etcd::detail::decode_range(json{{"header", etcd_header}}, nullptr);
    REQUIRE(empty);
    CHECK(empty->count == 0);
    CHECK(empty->kvs.empty());

    // The create txn: the put's response is not a range; a failed txn omits `succeeded`.
    const json created = {{"header", etcd_header},
                          {"succeeded", true},
                          {"responses", json::array({json{{"response_put", {{"header", etcd_header}}}},
                                                     etcd_reads_txn["responses"][1]})}};
    const auto txn = etcd::detail::decode_txn(created, nullptr, {1}, {0, 1});
    REQUIRE(txn);
    CHECK(txn->succeeded);
    CHECK(txn->range(0) == nullptr);
    REQUIRE(txn->range(1));
    CHECK(txn->range(1)->count == 3);
    CHECK(txn->range(2) == nullptr);
    json failed = etcd_reads_txn;
    failed.erase("succeeded");
    const auto refused = etcd::detail::decode_txn(failed, nullptr, {1}, {0, 1});
    REQUIRE(refused);
    CHECK_FALSE(refused->succeeded);
    CHECK(refused->range(0)->kvs[0].key == "locks/a/beef");
    CHECK(etcd::detail::decode_txn(json{{"header", etcd_header}}, nullptr).value().responses.empty());

    CHECK(etcd::detail::decode_deleted(json{{"header", etcd_header}, {"deleted", "1"}}, nullptr).value() == 1);
    CHECK(etcd::detail::decode_deleted(json{{"header", etcd_header}}, nullptr).value() == 0);
    CHECK(etcd::detail::decode_lease_grant(json{{"header", etcd_header}, {"ID", "7"}, {"TTL", "10"}}, nullptr)
              .value() == 10);
    CHECK_FALSE(etcd::detail::decode_lease_grant(json::object(), nullptr).value()); // "already exists": no TTL
    CHECK(etcd::detail::decode_keepalive(json{{"header", etcd_header}, {"ID", "7"}, {"TTL", "10"}}, nullptr)
              .value() == 10);
    CHECK(etcd::detail::decode_keepalive(json{{"header", etcd_header}, {"ID", "7"}}, nullptr).value() == 0);
    CHECK(etcd::detail::decode_time_to_live(json{{"header", etcd_header}, {"ID", "7"}, {"TTL", "-1"}}, nullptr)
              .value() == -1);
    CHECK(etcd::detail::decode_auth_token(json{{"header", etcd_header}, {"token", "sBOvzNfIZzMQPjuy.28"}}, nullptr)
              .value() == "sBOvzNfIZzMQPjuy.28");
    CHECK_FALSE(etcd::detail::decode_auth_token(json{{"token", "a\r\nb"}}, nullptr));
    CHECK_FALSE(etcd::detail::decode_auth_token(json{{"token", ""}}, nullptr));
}

TEST_CASE("etcd replies: a listing decodes keys back to ids, grouped by resource, oldest key holding, sorted by id",
          "[json][etcd]")
{
    const auto all = etcd::detail::decode_listing(etcd_listing, "locks/", "", nullptr);
    REQUIRE(all);
    REQUIRE(all->size() == 3);
    CHECK((*all)[0].resource == "seat/12");
    CHECK((*all)[0].owner == owner_c);
    CHECK((*all)[0].fence == 45);
    CHECK((*all)[0].waiters == 0);
    CHECK((*all)[1].resource == "seat/7");
    CHECK((*all)[1].owner == owner_a); // created first, though second by key
    CHECK((*all)[1].fence == 44);
    CHECK((*all)[1].waiters == 1);
    CHECK((*all)[2].resource == "\xff");
    CHECK((*all)[2].fence == 46);

    // Filtered by id after decoding ("seat/1" begins "seat/12", not "seat/7").
    const auto some = etcd::detail::decode_listing(etcd_listing, "locks/", "seat/1", nullptr);
    REQUIRE(some);
    REQUIRE(some->size() == 1);
    CHECK((*some)[0].resource == "seat/12");
    // Under another store prefix, no key is a lock.
    CHECK(etcd::detail::decode_listing(etcd_listing, "other/", "", nullptr).value().empty());
    CHECK(etcd::detail::decode_listing(json{{"header", etcd_header}}, "locks/", "", nullptr).value().empty());

    // Fewer keys than counted: a listing cut short is not reported as complete.
    dl::diagnostics diag;
    json cut = etcd_listing;
    cut["count"] = "7";
    CHECK(etcd::detail::decode_listing(cut, "locks/", "", &diag).error() == dl::errc::protocol_error);
    CHECK(diag.client_message().find("count") != std::string_view::npos);
    CHECK_FALSE(diag.server_message().empty());
    json no_kvs = etcd_listing;
    no_kvs.erase("kvs");
    CHECK(etcd::detail::decode_listing(no_kvs, "locks/", "", nullptr).error() == dl::errc::protocol_error);
}

TEST_CASE("etcd replies: a presence check says which keys are still there as they were bound", "[json][etcd]")
{
    const auto failed = etcd::detail::decode_presence(etcd_presence_failed, etcd_checked, nullptr);
    REQUIRE(failed);
    CHECK(failed.value() == std::vector<bool>{true, false, false});
    // The compares held: every key is there, and nothing was read back.
    const json held = {{"header", etcd_header}, {"succeeded", true}};
    CHECK(etcd::detail::decode_presence(held, etcd_checked, nullptr).value() == std::vector<bool>{true, true, true});
    CHECK(etcd::detail::decode_presence(json{{"header", etcd_header}}, {}, nullptr).value().empty());

    dl::diagnostics diag;
    json short_answer = etcd_presence_failed;
    short_answer["responses"].erase(2);
    CHECK(etcd::detail::decode_presence(short_answer, etcd_checked, &diag).error() == dl::errc::protocol_error);
    CHECK(diag.client_message().find("responses") != std::string_view::npos);
    json held_with_reads = etcd_presence_failed;
    held_with_reads["succeeded"] = true;
    CHECK(etcd::detail::decode_presence(held_with_reads, etcd_checked, nullptr).error() == dl::errc::protocol_error);
    json succeeded_text = etcd_presence_failed;
    succeeded_text["succeeded"] = "true";
    CHECK(etcd::detail::decode_presence(succeeded_text, etcd_checked, &diag).error() == dl::errc::protocol_error);
    CHECK(diag.client_message().find("succeeded") != std::string_view::npos);
}

TEST_CASE("etcd replies: the answer envelope, errors and streams", "[json][etcd]")
{
    const auto unary = etcd::detail::decode_answer(200, etcd_range.dump(), nullptr);
    REQUIRE(unary);
    CHECK(unary.value() == etcd_range);
    const json keepalive = {{"header", etcd_header}, {"ID", "7587862091210413826"}, {"TTL", "10"}};
    const auto streamed = etcd::detail::decode_answer(200, json{{"result", keepalive}}.dump() + "\n{\"more\":1}\n", nullptr);
    REQUIRE(streamed);
    CHECK(streamed.value() == keepalive);

    dl::diagnostics diag;
    const auto lost = etcd::detail::decode_answer(404, etcd_unary_error.dump(), &diag);
    CHECK(lost.error() == etcd::errc::not_found);
    CHECK(diag.server_message() == "etcdserver: requested lease not found");
    const auto no_leader = etcd::detail::decode_answer(200, etcd_stream_error.dump(), &diag);
    CHECK(no_leader.error() == etcd::errc::unavailable);
    CHECK(diag.server_message() == "etcdserver: no leader");
    const json anonymous = {{"error", "etcdserver: user name is empty"}, {"code", 3}};
    CHECK(etcd::detail::decode_answer(400, anonymous.dump(), nullptr).error() == dl::errc::auth_failed);
    const json bare = {{"error", "etcdserver: too many requests"}, {"code", 8}};
    CHECK(etcd::detail::decode_answer(429, bare.dump(), &diag).error() == etcd::errc::resource_exhausted);
    CHECK(diag.server_message() == "etcdserver: too many requests");
    CHECK(etcd::detail::decode_answer(400, json{{"error", "x"}, {"code", 99}}.dump(), nullptr).error() ==
          dl::errc::protocol_error);

    // Bodies that are not an answer.
    for (const std::string body : {"", "<html>502 Bad Gateway</html>", "[]", "\"text\"", "null", "12"}) {
        INFO(body);
        dl::diagnostics words;
        dl::result<json> got;
        CHECK_NOTHROW(got = etcd::detail::decode_answer(502, body, &words));
        CHECK(got.error() == dl::errc::protocol_error);
        CHECK(words.client_message().starts_with("etcd answered HTTP 502"));
    }
    CHECK(etcd::detail::decode_answer(503, "{}", &diag).error() == dl::errc::protocol_error);
    CHECK(diag.client_message() == "etcd answered HTTP 503: error: expected an error code, found nothing");
}

TEST_CASE("etcd replies: watch lines", "[json][etcd]")
{
    const auto events = etcd::detail::decode_watch_line(etcd_watch_events.dump(), nullptr);
    REQUIRE(events);
    CHECK(events->revision == 42);
    CHECK_FALSE(events->created);
    CHECK_FALSE(events->canceled);
    REQUIRE(events->events.size() == 2);
    CHECK_FALSE(events->events[0].deleted);
    REQUIRE(events->events[0].put);
    CHECK(etcd::detail::carries_mark(*events->events[0].put));
    CHECK(events->events[1].deleted);
    CHECK_FALSE(events->events[1].put);
    CHECK(events->events[1].gone == "locks/a/0123"); // the deleted key, named

    const auto created = etcd::detail::decode_watch_line(
        R"({"result":{"header":{"cluster_id":"1","member_id":"2","revision":"4","raft_term":"2"},"created":true}})",
        nullptr);
    REQUIRE(created);
    CHECK(created->created);
    CHECK(created->revision == 4);
    const auto progress = etcd::detail::decode_watch_line(R"({"result":{"header":{}}})", nullptr);
    REQUIRE(progress);
    CHECK(progress->revision == 0);

    const auto canceled = etcd::detail::decode_watch_line(etcd_watch_canceled.dump(), nullptr);
    REQUIRE(canceled);
    CHECK(canceled->canceled);
    CHECK(canceled->compact_revision == 38);

    CHECK(etcd::detail::decode_watch_line(etcd_stream_error.dump(), nullptr).error() == etcd::errc::unavailable);
    CHECK(etcd::detail::decode_watch_line("{\"result\":", nullptr).error() == dl::errc::protocol_error);
}

TEST_CASE("etcd replies: every field of another type is a protocol error naming it", "[json][etcd]")
{
    constexpr auto number = kind::number, null = kind::null, missing = kind::missing;
    const auto range = [](const json& j, dl::diagnostics* d) { return error_of(etcd::detail::decode_range(j, d)); };
    check_fields(etcd_range, range,
                 {{"/count", {number}},
                  {"/kvs", {null, missing}},
                  {"/kvs/0", {}},
                  {"/kvs/0/key", {}},
                  {"/kvs/0/value", {null, missing}},
                  {"/kvs/0/create_revision", {number, null, missing}},
                  {"/kvs/0/mod_revision", {number, null, missing}},
                  {"/kvs/0/lease", {number, null, missing}},
                  {"/header", {kind::string, kind::boolean, number, kind::array, kind::object, null, missing}}});

    const auto revision = [](const json& j, dl::diagnostics* d) {
        return error_of(etcd::detail::decode_revision(j, d));
    };
    check_fields(etcd_range, revision, {{"/header", {}}, {"/header/revision", {number}}});

    const auto txn = [](const json& j, dl::diagnostics* d) { return error_of(etcd::detail::decode_txn(j, d, {0, 1}, {0, 1})); };
    check_fields(etcd_reads_txn, txn,
                 {{"/succeeded", {kind::boolean, null, missing}},
                  {"/responses", {}},
                  {"/responses/0", {}},
                  {"/responses/0/response_range", {kind::object}}, // a range answer of nothing
                  {"/responses/1/response_range/count", {number}},
                  {"/responses/1/response_range/kvs/0/key", {}},
                  {"/responses/1/response_range/kvs/0/create_revision", {number, null, missing}}});

    const auto listing = [](const json& j, dl::diagnostics* d) {
        return error_of(etcd::detail::decode_listing(j, "locks/", "", d));
    };
    check_fields(etcd_listing, listing,
                 {{"/count", {}}, // every other count, or none, is not the number of kvs
                  {"/kvs/0", {}},
                  {"/kvs/0/key", {}},
                  {"/kvs/0/lease", {number, null, missing}},
                  {"/kvs/5/create_revision", {number}}}); // 0 is no key's revision

    const auto presence = [](const json& j, dl::diagnostics* d) {
        return error_of(etcd::detail::decode_presence(j, etcd_checked, d));
    };
    check_fields(etcd_presence_failed, presence,
                 {{"/responses", {}},
                  {"/responses/0", {}},
                  {"/responses/0/response_range", {kind::object}}, // a range of nothing: the key is gone
                  {"/responses/0/response_range/count", {number}},
                  {"/responses/0/response_range/kvs/0/key", {}},
                  {"/responses/0/response_range/kvs/0/create_revision", {number, null, missing}}});

    const auto deleted = [](const json& j, dl::diagnostics* d) { return error_of(etcd::detail::decode_deleted(j, d)); };
    check_fields(json{{"header", etcd_header}, {"deleted", "1"}}, deleted, {{"/deleted", {number, null, missing}}});

    const json lease = {{"header", etcd_header}, {"ID", "7587862091210413826"}, {"TTL", "10"}};
    const auto grant = [](const json& j, dl::diagnostics* d) { return error_of(etcd::detail::decode_lease_grant(j, d)); };
    check_fields(lease, grant, {{"/TTL", {number, missing}}}); // a null TTL is 0: not a grant
    const auto keepalive = [](const json& j, dl::diagnostics* d) {
        return error_of(etcd::detail::decode_keepalive(j, d));
    };
    check_fields(lease, keepalive, {{"/TTL", {number, null, missing}}}); // 0: the lease is gone
    const auto time_to_live = [](const json& j, dl::diagnostics* d) {
        return error_of(etcd::detail::decode_time_to_live(j, d));
    };
    check_fields(lease, time_to_live, {{"/TTL", {number, null, missing}}});

    const auto token = [](const json& j, dl::diagnostics* d) { return error_of(etcd::detail::decode_auth_token(j, d)); };
    check_fields(json{{"header", etcd_header}, {"token", "sBOvzNfIZzMQPjuy.28"}}, token, {{"/token", {kind::string}}});

    // The envelope, from the text of each body.
    const auto answer_with = [](int status) {
        return [status](const json& j, dl::diagnostics* d) {
            return error_of(etcd::detail::decode_answer(status, j.dump(), d));
        };
    };
    check_fields(etcd_unary_error, answer_with(404),
                 {{"/error", {kind::string}},
                  {"/code", {number}}, // any number is a code; one out of gRPC's range is refused below
                  {"/message", {kind::string, null, missing}}});
    check_fields(etcd_stream_error, answer_with(200),
                 {{"/error/grpc_code", {number}, "code"}, // without it, "code" is read
                  {"/error/message", {kind::string, null, missing}}});
    check_fields(json{{"result", lease}}, answer_with(200),
                 {{"/result", {kind::object, null, missing}}}); // without it, the whole body is the answer

    const auto watch = [](const json& j, dl::diagnostics* d) {
        return error_of(etcd::detail::decode_watch_line(j.dump(), d));
    };
    check_fields(etcd_watch_events, watch,
                 {{"/result", {kind::object}}, // a response of nothing: progress
                  {"/result/header", {kind::object, null, missing}},
                  {"/result/header/revision", {number, null, missing}},
                  {"/result/created", {kind::boolean, null, missing}},
                  {"/result/events", {null, missing}},
                  {"/result/events/0", {kind::object}}, // an event with nothing: a PUT of nothing
                  {"/result/events/0/type", {kind::string, null, missing}},
                  {"/result/events/0/kv", {null, missing}},
                  {"/result/events/0/kv/key", {}},
                  {"/result/events/0/kv/value", {null, missing}},
                  {"/result/events/0/kv/create_revision", {number, null, missing}},
                  {"/result/events/1/type", {kind::string, null, missing}}, // then a PUT of its kv
                  {"/result/events/1/kv", {kind::object, null, missing}}});
    check_fields(etcd_watch_canceled, watch,
                 {{"/result/canceled", {kind::boolean, null, missing}},
                  {"/result/compact_revision", {number, null, missing}}});
    check_fields(etcd_stream_error, watch, {{"/error/grpc_code", {number}, "code"}});
}

TEST_CASE("etcd replies: the readers without diagnostics keep their contract", "[json][etcd]")
{
    using etcd::detail::integer;
    CHECK(integer(json{{"n", "42"}}, "n") == 42);
    CHECK(integer(json{{"n", 7}}, "n") == 7);
    CHECK(integer(json::object(), "n") == 0);
    CHECK(integer(json{{"n", nullptr}}, "n") == 0);
    CHECK_FALSE(integer(json{{"n", "4x"}}, "n"));
    CHECK_FALSE(integer(json{{"n", ""}}, "n"));
    CHECK_FALSE(integer(json{{"n", "99999999999999999999"}}, "n"));
    CHECK_FALSE(integer(json{{"n", true}}, "n"));
    const auto r = etcd::detail::read_range(etcd_range);
    REQUIRE(r);
    CHECK(r->kvs[0].key == "locks/a/0123");
    CHECK_FALSE(etcd::detail::read_range(json{{"count", "0"}, {"kvs", json::array({json{{"key", "!!"}}})}}));
    CHECK_FALSE(etcd::detail::read_range(json{{"count", "0"}, {"kvs", json::array({json{{"key", b64("k")}}})}}));
    CHECK_FALSE(etcd::detail::read_range(json{{"kvs", "x"}}));
    CHECK_FALSE(etcd::detail::read_range(json::array()));
    CHECK(etcd::detail::header_revision(etcd_range) == 42);
    CHECK_FALSE(etcd::detail::header_revision(json{{"header", json::object()}}));
    CHECK_FALSE(etcd::detail::header_revision(json{{"header", "x"}}));
}

// -- DynamoDB ------------------------------------------------------------------------------

TEST_CASE("DynamoDB replies: well-formed answers decode as the store reads them", "[json][dynamodb]")
{
    const json updated = {{"Attributes", dynamo_attributes}};
    const auto response = dynamo::detail::decode_response(200, updated.dump(), nullptr);
    REQUIRE(response);
    CHECK(response.value() == updated);
    CHECK(dynamo::detail::decode_granted_fence(updated, nullptr).value() == 7);

    const auto item = dynamo::detail::decode_lock_item(json{{"Item", dynamo_attributes}}, nullptr);
    REQUIRE(item);
    REQUIRE(item.value());
    CHECK(item.value()->owner == "0123456789abcdef0123456789abcdef");
    CHECK(item.value()->record_version == "fedcba9876543210fedcba9876543210");
    CHECK(item.value()->fence == 7u);
    CHECK(item.value()->lease_duration == 10000u);
    CHECK_FALSE(item.value()->expires_at);
    const auto never = dynamo::detail::decode_lock_item(json::object(), nullptr);
    REQUIRE(never);
    CHECK_FALSE(never.value());
    const json released = {{"Item", {{"resource", {{"B", b64("locks:a")}}}, {"fence", {{"N", "8"}}}}}};
    CHECK_FALSE(dynamo::detail::decode_lock_item(released, nullptr).value()->owner);

    const json described = {{"Table",
                             {{"TableName", "locks"},
                              {"TableStatus", "ACTIVE"},
                              {"KeySchema", json::array({json{{"AttributeName", "resource"}, {"KeyType", "HASH"}}})},
                              {"ItemCount", 0}}}};
    CHECK(dynamo::detail::decode_table_status(described, nullptr).value() == "ACTIVE");
    CHECK(dynamo::detail::decode_table_status(json::object(), nullptr).value().empty());
}

TEST_CASE("DynamoDB replies: error answers by status and __type", "[json][dynamodb]")
{
    dl::diagnostics diag;
    CHECK(dynamo::detail::decode_response(400, dynamo_conditional_failed.dump(), &diag).error() ==
          dl::errc::contended);
    CHECK(diag.server_message() ==
          "com.amazonaws.dynamodb.v20120810#ConditionalCheckFailedException: The conditional request failed");
    const json unrecognized = {{"__type", "com.amazon.coral.service#UnrecognizedClientException"},
                               {"Message", "The security token included in the request is invalid."}};
    CHECK(dynamo::detail::decode_response(400, unrecognized.dump(), &diag).error() == dynamo::errc::access_denied);
    CHECK(diag.server_message() == "com.amazon.coral.service#UnrecognizedClientException: The security token "
                                   "included in the request is invalid.");
    const json throttled = {{"__type", "com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException"},
                            {"message", "slow down"}};
    CHECK(dynamo::detail::decode_response(400, throttled.dump(), nullptr).error() == dynamo::errc::throttled);
    // A proxy's page: the status says it all.
    CHECK(dynamo::detail::decode_response(503, "<html>Service Unavailable</html>", &diag).error() ==
          dynamo::errc::server_error);
    CHECK(diag.server_message() == "<html>Service Unavailable</html>");
    CHECK(dynamo::detail::decode_response(403, "<html>Forbidden</html>", nullptr).error() == dl::errc::protocol_error);
    for (const std::string body : {"", "[]", "\"x\"", "nope", "null"}) {
        INFO(body);
        dl::result<json> got;
        CHECK_NOTHROW(got = dynamo::detail::decode_response(200, body, &diag));
        CHECK(got.error() == dl::errc::protocol_error);
        CHECK(diag.client_message().starts_with("DynamoDB answered HTTP 200"));
    }
}

TEST_CASE("DynamoDB replies: every field of another type is a protocol error naming it", "[json][dynamodb]")
{
    constexpr auto missing = kind::missing;
    const auto response_with = [](int status) {
        return [status](const json& j, dl::diagnostics* d) {
            return error_of(dynamo::detail::decode_response(status, j.dump(), d));
        };
    };
    check_fields(dynamo_conditional_failed, response_with(400),
                 {{"/__type", {kind::string}}, {"/message", {kind::string, missing}}});
    check_fields(json{{"__type", "com.amazon.coral.validate#ValidationException"}, {"Message", "bad"}},
                 response_with(400), {{"/Message", {kind::string, missing}}});

    const auto fence = [](const json& j, dl::diagnostics* d) {
        return error_of(dynamo::detail::decode_granted_fence(j, d));
    };
    check_fields(json{{"Attributes", dynamo_attributes}}, fence,
                 {{"/Attributes", {}},
                  {"/Attributes/fence", {}},
                  {"/Attributes/fence/N", {}}, // a decimal string: a JSON number is refused
                  {"/Attributes/owner", {kind::string, kind::boolean, kind::number, kind::array, kind::object,
                                         kind::null, missing}}}); // not read
    const auto zero = dynamo::detail::decode_granted_fence(json{{"Attributes", {{"fence", {{"N", "0"}}}}}}, nullptr);
    CHECK(zero.error() == dl::errc::protocol_error);

    const auto item = [](const json& j, dl::diagnostics* d) { return error_of(dynamo::detail::decode_lock_item(j, d)); };
    check_fields(json{{"Item", dynamo_attributes}}, item,
                 {{"/Item", {kind::object, missing}},
                  {"/Item/owner", {missing}},
                  {"/Item/owner/S", {kind::string}},
                  {"/Item/fence", {missing}},
                  {"/Item/fence/N", {}},
                  {"/Item/recordVersion", {missing}},
                  {"/Item/recordVersion/S", {kind::string}},
                  {"/Item/leaseDuration/N", {}},
                  {"/Item/expiresAt", {missing}}});

    const auto status = [](const json& j, dl::diagnostics* d) {
        return error_of(dynamo::detail::decode_table_status(j, d));
    };
    check_fields(json{{"Table", {{"TableName", "locks"}, {"TableStatus", "CREATING"}}}}, status,
                 {{"/Table", {kind::object, missing}}, {"/Table/TableStatus", {kind::string, missing}}});
}

TEST_CASE("JSON replies: any document at all, to every decoder, is a value or an error", "[json]")
{
    const std::vector<json> documents = {nullptr, true, 5, -1.5, "x", json::array(), json::object(),
                                         json::array({json::object()}), json{{"result", nullptr}},
                                         json{{"error", json::array()}}, json{{"Item", json::array()}}};
    for (const auto& doc : documents) {
        INFO(doc.dump());
        dl::diagnostics diag;
        const auto text = doc.dump();
        CHECK_NOTHROW((void)etcd::detail::decode_answer(200, text, &diag));
        CHECK_NOTHROW((void)etcd::detail::decode_answer(500, text, &diag));
        CHECK_NOTHROW((void)etcd::detail::decode_watch_line(text, &diag));
        CHECK_NOTHROW((void)etcd::detail::decode_range(doc, &diag));
        CHECK_NOTHROW((void)etcd::detail::decode_revision(doc, &diag));
        CHECK_NOTHROW((void)etcd::detail::decode_txn(doc, &diag, {0}, {0, 1}));
        CHECK_NOTHROW((void)etcd::detail::decode_deleted(doc, &diag));
        CHECK_NOTHROW((void)etcd::detail::decode_lease_grant(doc, &diag));
        CHECK_NOTHROW((void)etcd::detail::decode_keepalive(doc, &diag));
        CHECK_NOTHROW((void)etcd::detail::decode_time_to_live(doc, &diag));
        CHECK_NOTHROW((void)etcd::detail::decode_auth_token(doc, &diag));
        CHECK_NOTHROW((void)dynamo::detail::decode_response(200, text, &diag));
        CHECK_NOTHROW((void)dynamo::detail::decode_response(400, text, &diag));
        CHECK_NOTHROW((void)dynamo::detail::decode_granted_fence(doc, &diag));
        CHECK_NOTHROW((void)dynamo::detail::decode_lock_item(doc, &diag));
        CHECK_NOTHROW((void)dynamo::detail::decode_table_status(doc, &diag));
        CHECK_NOTHROW((void)dynamo::detail::decode_scan_page(doc, &diag));
        CHECK_NOTHROW((void)dynamo::detail::decode_shared_item(doc, &diag));
    }
}
