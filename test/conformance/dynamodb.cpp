// The store conformance suite on DynamoDB (dynalite), in both lease modes and under
// dialect::aws (AWS's lock client's table and rules): three clients of one table,
// reaching the server through a fault proxy that loses replies on demand. The store's
// own tests are in test/dynamodb/.
#include "conformance/suite.hpp"
#include "dynamodb/dynamodb_support.hpp"
#include "fault/proxy.hpp"
#include "workers.hpp"

#include <array>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace {

using namespace test::dynamodb_tests;

// The item the counting processes count in, in the lock table.
nlohmann::json counter_key(bool aws) { return aws ? nlohmann::json{{"key", {{"S", "data:counter"}}}} : key_of("data:counter"); }

// The lock item of `resource` in a table of the dialect.
nlohmann::json lock_key(bool aws, std::string_view resource)
{
    return aws ? nlohmann::json{{"key", {{"S", ddb::detail::aws::lock_name(resource)}}}} : key_of(resource);
}

// The settings of the dialect: the AWS client's table keys its items by "key".
ddb::config with_dialect(ddb::config c, bool aws)
{
    if (aws) {
        c.dialect = ddb::dialect::aws;
        c.key_attribute = "key";
    }
    return c;
}

// Three clients of one table in `Mode` (and `Dialect`), behind a fault proxy.
template <ddb::lease_mode Mode, ddb::dialect Dialect = ddb::dialect::distlock>
struct dynamodb_clients {
    static constexpr bool aws = Dialect == ddb::dialect::aws;
    using backend = ddb::store;
    static constexpr bool notifies = false;
    static constexpr bool quorum = false;
    test::dynalite_server server;
    fault::proxy net{server.port()};
    asio::io_context io;
    std::array<std::unique_ptr<backend>, 3> clients;

    dynamodb_clients()
    {
        if constexpr (aws) {
            asio::io_context made;
            ddb::store s{made, with_dialect(server.config(), true)};
            test::run(made, [&]() -> asio::awaitable<void> {
                auto ok = co_await s.create_table(30s);
                REQUIRE(ok);
                co_await s.close();
            });
        } else {
            create_table(server);
        }
        auto cfg = with_dialect(server.config(), aws);
        cfg.port = net.port();
        cfg.mode = Mode;
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
                           {{"TableName", "distlock_test"}, {"Key", lock_key(aws, resource)}, {"ConsistentRead", true}});
        REQUIRE(item);
        const auto found = item.value().find("Item");
        if (found == item.value().end())
            return false;
        // As the store's rule counts a lease that ran out (end_lock()): in expiry_time
        // mode an expiry past; in record_version mode a lease duration of zero.
        if constexpr (aws)
            return found->contains("ownerName") && !found->contains("isReleased") &&
                   ddb::detail::string(*found, "leaseDuration") != "0";
        if constexpr (by_version)
            return found->contains("owner") && ddb::detail::number(*found, "leaseDuration") != 0u;
        const auto expires = ddb::detail::number(*found, "expiresAt");
        return found->contains("owner") && expires &&
               static_cast<std::int64_t>(*expires) >= ddb::detail::epoch_ms(std::chrono::system_clock::now());
    }

    // As if the lease had run out: in expiry_time mode its expiry moves into the
    // past; in record_version mode its lease duration becomes zero, so a waiter that
    // sees its version may take it over at once (as one that watched it a whole
    // lease duration would). A shared lease's are those of its entry in the item's
    // sharers. Under dialect::aws the lease duration is a string. In record_version
    // mode a lock whose lease ran out is lost to its holder only when a waiter takes
    // it over, so an exclusive lock also passes to an owner that never renews: the
    // holder's next heartbeat is refused, as after a takeover, and waiters take it
    // over at once. A lock-delay mark stays, as a natural expiry leaves it: in
    // expiry_time mode the expiry becomes "just over" for the clients (now less their
    // clock skew margin) and the mark's end moves with it, so its tombstone lasts the
    // delay from now; in record_version mode the waiters watch it for the delay.
    void end_lock(const dl::lease& l)
    {
        const char* attribute = Mode == ddb::lease_mode::expiry_time ? "expiresAt" : "leaseDuration";
        nlohmann::json request = {{"TableName", "distlock_test"},
                                  {"Key", lock_key(aws, l.resource())},
                                  {"UpdateExpression", "SET #a = :zero"},
                                  {"ExpressionAttributeNames", {{"#a", attribute}}},
                                  {"ExpressionAttributeValues", {{":zero", {{aws ? "S" : "N", "0"}}}}}};
        if (!by_version && !l.shared()) {
            const auto over = ddb::detail::epoch_ms(std::chrono::system_clock::now()) -
                              std::chrono::duration_cast<std::chrono::milliseconds>(ddb::config{}.clock_skew_margin)
                                  .count() -
                              1;
            request["UpdateExpression"] = "SET #a = :zero, delayUntil = if_not_exists(lockDelay, :none) + :zero";
            request["ExpressionAttributeValues"][":zero"] = {{"N", std::to_string(over)}};
            request["ExpressionAttributeValues"][":none"] = {{"N", "0"}};
        }
        if (by_version && !l.shared()) {
            request["UpdateExpression"] = "SET #a = :zero, #o = :gone";
            request["ExpressionAttributeNames"]["#o"] = aws ? "ownerName" : "owner";
            request["ExpressionAttributeValues"][":gone"] = {{"S", dl::owner_token::generate().to_hex()}};
        }
        if (l.shared()) {
            request["UpdateExpression"] = "SET #s.#me.#a = :zero";
            request["ConditionExpression"] = "attribute_exists(#s.#me)";
            request["ExpressionAttributeNames"]["#s"] = "sharers";
            request["ExpressionAttributeNames"]["#me"] = l.owner().to_hex();
        }
        auto r = direct(server, "UpdateItem", std::move(request));
        REQUIRE(r);
    }

    // Only the client asking is doing I/O when a test loses a reply.
    void lose_next_reply(std::size_t) { net.set(fault::direction::to_client, {.close_after = 0}); }
    void hold_replies(bool on) { net.set(fault::direction::to_client, {.blackhole = on}); }
    asio::awaitable<void> close(std::size_t i) { return clients[i]->close(); }
    static dl::duration longest_validity(const dl::lock_options& o) { return o.ttl - o.drift(); }

    // The fence lives in the resource's item (under dialect::aws in its fence item):
    // one more per grant, kept by a release.
    static constexpr bool counts_fences = true;
    static constexpr bool keeps_fence = true;
    // The AWS lock client has no shared grants: the aws dialect refuses them.
    static constexpr bool shares = !aws;

    // A killed holder's lock outlives it: in record_version mode a waiter takes it over
    // only after watching one version for a whole lease (800 ms); in expiry_time mode
    // once its expiry (1.5 s, renewed every 500 ms) has passed.
    static constexpr bool by_version = Mode == ddb::lease_mode::record_version;
    static constexpr test::conformance::after_kill killed_holder_lock{.held_for = 400ms};
    std::unique_ptr<test::child> holder_process(const std::string& resource, const std::string& mode = "exclusive")
    {
        return std::make_unique<test::child>(std::vector<std::string>{
            test::self_path(), "--worker", "ddb-hold", std::to_string(server.port()), worker_mode(),
            resource, by_version ? "800" : "1500", mode});
    }

    static constexpr int counter_processes = 6;
    static constexpr int counter_rounds = 5;
    std::unique_ptr<test::child> counter_process(const std::filesystem::path& dir, int rounds, int processes)
    {
        std::vector<std::string> argv{test::self_path(), "--worker", "ddb-count", std::to_string(server.port()),
                                      worker_mode()};
        const auto more = test::conformance::counting{dir, rounds, processes}.args();
        argv.insert(argv.end(), more.begin(), more.end());
        return std::make_unique<test::child>(std::move(argv));
    }
    static std::string worker_mode() { return aws ? "aws" : by_version ? "version" : "expiry"; }
    long counter_value(const std::filesystem::path&) const
    {
        auto item = direct(server, "GetItem",
                           {{"TableName", "distlock_test"}, {"Key", counter_key(aws)}, {"ConsistentRead", true}});
        REQUIRE(item);
        return std::stol(item.value()["Item"]["n"]["N"].get<std::string>());
    }

    using settings = ddb::config;
    static settings settings_at(std::uint16_t port)
    {
        settings c;
        c.port = port;
        c.credentials = {"AKIDEXAMPLE", "secret", ""};
        return with_dialect(c, aws);
    }
    static std::vector<test::conformance::bad_setting<settings>> bad_settings()
    {
        std::vector<test::conformance::bad_setting<settings>> out{
            {"request_timeout 0", [](settings& c) { c.request_timeout = dl::duration::zero(); }},
            {"clock_skew_margin < 0", [](settings& c) { c.clock_skew_margin = -1s; }}};
        if constexpr (aws) {
            out.push_back({"dialect aws in expiry_time mode", [](settings& c) { c.mode = ddb::lease_mode::expiry_time; }});
            out.push_back({"key_attribute ownerName", [](settings& c) { c.key_attribute = "ownerName"; }});
        }
        return out;
    }
    static constexpr bool settings_refused_at_construction = false; // its requests are
};

struct dynamodb_version : dynamodb_clients<ddb::lease_mode::record_version> {
    static constexpr const char* name = "dynamodb_version";
};
struct dynamodb_expiry : dynamodb_clients<ddb::lease_mode::expiry_time> {
    static constexpr const char* name = "dynamodb_expiry";
};
struct dynamodb_aws : dynamodb_clients<ddb::lease_mode::record_version, ddb::dialect::aws> {
    static constexpr const char* name = "dynamodb_aws";
};

// The workers' settings: dynalite at PORT, the lock table, MODE "version", "expiry"
// or "aws" (record_version mode on the AWS lock client's table).
ddb::config worker_config(const std::string& port, const std::string& mode)
{
    ddb::config c;
    c.port = static_cast<std::uint16_t>(std::stoi(port));
    c.table = "distlock_test";
    c.region = "us-east-1";
    c.credentials = {"AKIDEXAMPLE", "secret", ""};
    c.mode = mode == "expiry" ? ddb::lease_mode::expiry_time : ddb::lease_mode::record_version;
    return with_dialect(c, mode == "aws");
}

// ddb-hold PORT MODE RESOURCE TTL_MS GRANT: the suite's holder process (heartbeats at
// a third of the TTL; GRANT as hold_until_lost's mode).
int hold_worker(const std::vector<std::string>& args)
{
    if (args.size() != 5)
        return 2;
    asio::io_context io;
    ddb::store store{io, worker_config(args[0], args[1])};
    return test::conformance::hold_until_lost(io, store, args[2], std::chrono::milliseconds{std::stoi(args[3])},
                                              args[4]);
}

// The counter of the suite's counting processes: an item of the lock table, written
// with fenced_update.
struct counter_item {
    ddb::store& store;
    bool aws;

    asio::awaitable<dl::result<long>> read()
    {
        nlohmann::json get = {{"TableName", "distlock_test"}, {"Key", counter_key(aws)}, {"ConsistentRead", true}};
        auto item = co_await store.execute("GetItem", std::move(get));
        if (!item)
            co_return item.error();
        co_return static_cast<long>(
            ddb::detail::number(item.value().value("Item", nlohmann::json::object()), "n").value_or(0));
    }
    asio::awaitable<dl::result<void>> write(const dl::lease& l, long n)
    {
        nlohmann::json values = {{":n", {{"N", std::to_string(n)}}}};
        return store.fenced_update("distlock_test", counter_key(aws), l.fence(), std::string{"n = :n"},
                                   nlohmann::json::object(), std::move(values));
    }
};

// ddb-count PORT MODE DIR ROUNDS PROCESSES: the suite's counting process.
int count_worker(const std::vector<std::string>& args)
{
    const auto how = test::conformance::counting::from(args, 2);
    if (!how)
        return 2;
    asio::io_context io;
    ddb::store store{io, worker_config(args[0], args[1])};
    counter_item counter{store, args[1] == "aws"};
    return test::conformance::count_under_lock(io, store, counter, *how);
}

[[maybe_unused]] const bool suite_workers_registered =
    test::register_worker("ddb-hold", hold_worker) && test::register_worker("ddb-count", count_worker);

[[maybe_unused]] const bool suite_registered =
    test::conformance::register_suite<dynamodb_version, dynamodb_expiry, dynamodb_aws>("[dynamodb]");

} // namespace
