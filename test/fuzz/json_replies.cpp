// libFuzzer target: every JSON reply decoder of etcd and DynamoDB, given arbitrary
// bytes, and given the input's own document (when it is JSON) with values at random
// paths replaced by other types, removed, or added under the names the decoders read,
// must return a value or an error code: never throw, crash, or quote more of the reply
// than its bound. The mutations are drawn from the input's bytes, so the fuzzer steers
// them as it steers the text.
#include <distlock/backend/json.hpp>
#include <distlock/dynamodb/detail/aws.hpp>
#include <distlock/dynamodb/detail/replies.hpp>
#include <distlock/etcd/detail/replies.hpp>
#include <distlock/options.hpp>

#include <nlohmann/json.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <string_view>

namespace {

namespace dl = distlock;
namespace etcd_replies = distlock::etcd::detail;
namespace dynamo_replies = distlock::dynamodb::detail;
using json = nlohmann::json;

// The keys a presence check asked about (as the seed etcd_presence_failed does).
const std::array<etcd_replies::bound_key, 3> checked_keys{
    etcd_replies::bound_key{"locks/a/0123456789abcdef0123456789abcdef", 40},
    etcd_replies::bound_key{"locks/b/00000000000000000000000000000001", 41},
    etcd_replies::bound_key{"locks/c/fedcba9876543210fedcba9876543210", 43}};

// What a protocol error may quote of a reply: the excerpt, its size, and a few words.
constexpr std::size_t max_quote = dl::backend::json_reply::excerpt_bytes + 64;

[[noreturn]] void fail(const char* decoder, const char* what)
{
    std::fprintf(stderr, "%s: %s\n", decoder, what);
    std::abort();
}

// Runs one decoder: no exception may leave it, and a problem the reader found (its
// words say what was expected) comes with a bounded excerpt of the reply. (An error
// answer quotes the server's own message, whatever its length.)
template <class Decode>
void run(const char* name, Decode decode)
{
    dl::diagnostics diag;
    try {
        const auto got = decode(&diag);
        const bool reader_problem = !got && got.error() == dl::errc::protocol_error &&
                                    diag.client_message().find(", found ") != std::string_view::npos;
        if (reader_problem && diag.server_message().size() > max_quote)
            fail(name, "a protocol error quoted more of the reply than its bound");
    } catch (const std::exception& e) {
        fail(name, e.what());
    } catch (...) {
        fail(name, "an exception that is not a std::exception");
    }
}

void decode_text(std::string_view text, int status)
{
    run("etcd decode_answer", [&](dl::diagnostics* d) { return etcd_replies::decode_answer(status, text, d); });
    run("etcd decode_watch_line", [&](dl::diagnostics* d) { return etcd_replies::decode_watch_line(text, d); });
    run("dynamodb decode_response", [&](dl::diagnostics* d) { return dynamo_replies::decode_response(status, text, d); });
}

void decode_document(const json& doc)
{
    run("etcd decode_range", [&](dl::diagnostics* d) { return etcd_replies::decode_range(doc, d); });
    run("etcd decode_revision", [&](dl::diagnostics* d) { return etcd_replies::decode_revision(doc, d); });
    run("etcd decode_txn", [&](dl::diagnostics* d) { return etcd_replies::decode_txn(doc, d); });
    run("etcd decode_txn (ranges)", [&](dl::diagnostics* d) { return etcd_replies::decode_txn(doc, d, {1}, {0, 1}); });
    run("etcd decode_deleted", [&](dl::diagnostics* d) { return etcd_replies::decode_deleted(doc, d); });
    run("etcd decode_listing", [&](dl::diagnostics* d) { return etcd_replies::decode_listing(doc, "locks/", "", d); });
    run("etcd decode_listing (prefix)",
        [&](dl::diagnostics* d) { return etcd_replies::decode_listing(doc, "locks/", "seat/", d); });
    run("etcd decode_presence",
        [&](dl::diagnostics* d) { return etcd_replies::decode_presence(doc, checked_keys, d); });
    run("etcd decode_leader", [&](dl::diagnostics* d) { return etcd_replies::decode_leader(doc, "locks/a/", d); });
    run("etcd decode_lease_grant", [&](dl::diagnostics* d) { return etcd_replies::decode_lease_grant(doc, d); });
    run("etcd decode_keepalive", [&](dl::diagnostics* d) { return etcd_replies::decode_keepalive(doc, d); });
    run("etcd decode_time_to_live", [&](dl::diagnostics* d) { return etcd_replies::decode_time_to_live(doc, d); });
    run("etcd decode_auth_token", [&](dl::diagnostics* d) { return etcd_replies::decode_auth_token(doc, d); });
    run("dynamodb decode_granted_fence", [&](dl::diagnostics* d) { return dynamo_replies::decode_granted_fence(doc, d); });
    run("dynamodb decode_lock_item", [&](dl::diagnostics* d) { return dynamo_replies::decode_lock_item(doc, d); });
    run("dynamodb decode_table_status", [&](dl::diagnostics* d) { return dynamo_replies::decode_table_status(doc, d); });
    run("dynamodb decode_scan_page", [&](dl::diagnostics* d) { return dynamo_replies::decode_scan_page(doc, d); });
    run("dynamodb decode_shared_item", [&](dl::diagnostics* d) { return dynamo_replies::decode_shared_item(doc, d); });
    run("dynamodb decode_leader_item",
        [&](dl::diagnostics* d) { return dynamo_replies::decode_leader_item(doc, dl::max_leader_value_size, d); });
    run("dynamodb aws decode_leader_record", [&](dl::diagnostics* d) {
        return dynamo_replies::aws::decode_leader_record(doc, dl::max_leader_value_size, d);
    });
    try {
        (void)etcd_replies::integer(doc, "TTL");
        (void)etcd_replies::read_range(doc);
        (void)etcd_replies::header_revision(doc);
    } catch (...) {
        fail("etcd readers without diagnostics", "an exception");
    }
}

// The input's bytes, last first and round after round, each round salted so that a
// short input still makes different choices.
class choices {
public:
    explicit choices(std::string_view in) : in_{in} {}
    unsigned next()
    {
        if (in_.empty())
            return 0;
        const auto round = static_cast<unsigned>(taken_ / in_.size());
        const auto b = static_cast<unsigned char>(in_[in_.size() - 1 - taken_ % in_.size()]);
        ++taken_;
        return b ^ (round * 0x9Du);
    }

private:
    std::string_view in_;
    std::size_t taken_ = 0;
};

// The names the decoders read: added where they were not, they reach fields that the
// seeds leave out.
constexpr std::array<const char*, 49> field_names{
    "result", "error",     "code",          "grpc_code",   "message",  "Message",       "header",
    "revision", "count",   "kvs",           "key",         "value",    "create_revision", "mod_revision",
    "lease",  "succeeded", "responses",     "response_range", "deleted", "TTL",        "token",
    "created", "canceled", "compact_revision", "events",   "type",     "kv",            "__type",
    "Attributes", "Item",  "fence",         "owner",       "recordVersion", "N",        "S",
    "Table", "sharers",   "permits",       "intent",      "slot",     "waiter",        "revision",
    "M",      "leaderValue", "leaderEpoch", "B",          "data",     "ownerName",     "fenceOwner"};

// A value of some type, often one a decoder would accept somewhere (a decimal string,
// base64, an attribute), so that the paths behind it are reached too.
json some_value(choices& c)
{
    switch (c.next() % 20) {
    case 0: return nullptr;
    case 1: return true;
    case 2: return false;
    case 3: return 0;
    case 4: return -1;
    case 5: return 7;
    case 6: return 18446744073709551615ULL;
    case 7: return 1.5;
    case 8: return "";
    case 9: return "x!";
    case 10: return "42";
    case 11: return "-9223372036854775809";
    case 12: return "DELETE";
    case 13: return dl::util::base64("locks/a/0123+held");
    case 14: return json::array();
    case 15: return json::array({json::object()});
    case 16: return json::object();
    case 17: return json{{"N", "5"}};
    case 18: return json{{"S", "0123456789abcdef"}};
    default: return json{{"response_range", json::object()}};
    }
}

// One mutation at a random path: walk down (each step into a random member or
// element), then replace the value there, remove it, or add a member under a name the
// decoders read.
void mutate(json& doc, choices& c)
{
    json* at = &doc;
    json* parent = nullptr;
    std::size_t index_in_parent = 0;
    for (int depth = 0; depth < 64; ++depth) {
        if (!at->is_structured() || at->empty() || c.next() % 4 == 0)
            break;
        const std::size_t i = c.next() % at->size();
        parent = at;
        index_in_parent = i;
        if (at->is_array()) {
            at = &(*at)[i];
        } else {
            auto it = at->begin();
            for (std::size_t k = 0; k < i; ++k)
                ++it;
            at = &it.value();
        }
    }
    switch (c.next() % 4) {
    case 0: // removed
        if (parent && parent->is_array()) {
            parent->erase(index_in_parent);
            return;
        }
        if (parent && parent->is_object()) {
            auto it = parent->begin();
            for (std::size_t k = 0; k < index_in_parent; ++k)
                ++it;
            parent->erase(it);
            return;
        }
        *at = nullptr;
        return;
    case 1: // a member added (or replaced) under a known name
        if (at->is_object()) {
            (*at)[field_names[c.next() % field_names.size()]] = some_value(c);
            return;
        }
        [[fallthrough]];
    default: // replaced by a value of some type
        *at = some_value(c);
        return;
    }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    const std::string_view in{reinterpret_cast<const char*>(data), size};
    static constexpr std::array<int, 6> statuses{200, 400, 404, 429, 500, 503};
    choices c{in};
    decode_text(in, statuses[c.next() % statuses.size()]);

    // The input as a document (parsed as the stores parse replies: its depth bounded).
    auto reply = dl::backend::json_reply::parse(in, dl::backend::json_null::means_absent);
    if (!reply.ok())
        return 0;
    const json doc = reply.take(reply.root());
    decode_document(doc);
    for (int round = 0; round < 8; ++round) {
        json mutated = doc;
        const int mutations = 1 + static_cast<int>(c.next() % 3);
        for (int m = 0; m < mutations; ++m)
            mutate(mutated, c);
        decode_document(mutated);
        decode_text(mutated.dump(-1, ' ', false, json::error_handler_t::replace), statuses[c.next() % statuses.size()]);
    }
    return 0;
}
