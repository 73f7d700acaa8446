// test/interop/dynamodb.cpp: distlock under dynamodb::dialect::aws and AWS's Java
// lock client (amazon-dynamodb-lock-client) on one dynalite table. The foreign side
// is test/interop/dynamodb/aws_lock_client.py, which sends that client's requests as
// its source writes them (acquireLock with its waiting rule, heartbeats on a thread,
// releaseLock with deleteLockOnRelease). The table is the client's
// (createLockTableInDynamoDB). They exclude each other both ways; a distlock waiter
// takes a killed AWS holder's lock once its record version stayed unchanged for a
// whole lease; a heartbeating AWS holder keeps distlock out for several leases; and
// distlock's fences keep growing across AWS holders. The AWS client has no queue, so
// there is no fairness case.
#include "dynamodb/dynamodb_support.hpp"
#include "eventually.hpp"
#include "pending.hpp"
#include "process.hpp"

#include <csignal>
#include <filesystem>
#include <string>
#include <vector>

namespace {

using namespace test::dynamodb_tests;

constexpr const char* python = "/usr/bin/python3";
constexpr const char* table = "aws_locks";

// The AWS client's lease, heartbeat period and refresh period in these tests.
constexpr auto peer_lease = 1000ms;
constexpr auto peer_heartbeat = 200ms;
constexpr auto peer_refresh = 100ms;

// A distlock waiter's retry step (no release message comes from the AWS client).
constexpr auto distlock_retry = 200ms;

std::string peer_script()
{
    return (std::filesystem::path{__FILE__}.parent_path() / "dynamodb" / "aws_lock_client.py").string();
}

bool python_available() { return std::filesystem::exists(python); }

// The AWS client locking `name`, as owner `owner`.
class aws_peer {
public:
    aws_peer(const test::dynalite_server& server, const std::string& name, const std::string& owner)
        : proc_{{python, peer_script(), "127.0.0.1:" + std::to_string(server.port()), table, name, owner,
                 std::to_string(peer_lease.count()), std::to_string(peer_heartbeat.count()),
                 std::to_string(peer_refresh.count())}}
    {
        const auto line = proc_.read_line(10s);
        REQUIRE(line);
        REQUIRE(*line == "ready");
    }

    // Sends one command; its one answer line.
    std::string ask_now(const std::string& command, std::chrono::milliseconds limit = 10s)
    {
        proc_.write_line(command);
        const auto line = proc_.read_line(limit);
        REQUIRE(line);
        return *line;
    }

    asio::awaitable<std::string> ask(const std::string& command, std::chrono::milliseconds limit = 10s)
    {
        proc_.write_line(command);
        const auto line = co_await proc_.next_line(limit);
        REQUIRE(line);
        co_return *line;
    }

    void kill()
    {
        proc_.kill(SIGKILL);
        (void)proc_.wait();
    }

private:
    test::child proc_;
};

// dynalite with the AWS client's table (made by the client), and distlock on it.
struct aws_table {
    test::dynalite_server server;
    asio::io_context io;
    std::optional<ddb::store> store;

    aws_table()
    {
        aws_peer maker{server, "unused", "maker"};
        REQUIRE(maker.ask_now("create") == "created");
        auto c = server.config(table);
        c.dialect = ddb::dialect::aws;
        c.key_attribute = "key";
        store.emplace(io, c);
    }

    // The item named `name`, as the table has it (null: none).
    nlohmann::json item(const std::string& name) const
    {
        auto got = direct(server, "GetItem",
                          {{"TableName", table}, {"Key", {{"key", {{"S", name}}}}}, {"ConsistentRead", true}});
        REQUIRE(got);
        return got.value().value("Item", nlohmann::json{});
    }
};

using renewed_mutex = dl::basic_distributed_mutex<ddb::store, dl::renew::watchdog, dl::retry::fixed>;

renewed_mutex mutex_on(aws_table& t, const std::string& resource, dl::duration deadline = 10s)
{
    return renewed_mutex{*t.store, resource, {.ttl = peer_lease},
                         dl::retry::fixed{.delay = distlock_retry, .deadline = deadline}};
}

#define DISTLOCK_NEEDS_PYTHON()                                                                                      \
    if (!python_available()) {                                                                                       \
        WARN("/usr/bin/python3 is missing: skipped");                                                                \
        return;                                                                                                      \
    }

} // namespace

TEST_CASE("dynamodb interop: an AWS client holds and heartbeats; distlock is kept out, then wakes within one retry "
          "step",
          "[interop][dynamodb]")
{
    DISTLOCK_NEEDS_PYTHON();
    aws_table t;
    const std::string name = "interop/foreign-holds";
    aws_peer peer{t.server, name, "aws-host-1"};
    auto m = mutex_on(t, name);
    test::run(t.io, [&]() -> asio::awaitable<void> {
        { const auto said_ = co_await peer.ask("acquire 1000"); CHECK(said_ == "held"); }
        const auto held = t.item(name);
        CHECK(held["ownerName"]["S"] == "aws-host-1");
        CHECK(held["leaseDuration"]["S"] == "1000");

        auto refused = co_await m.try_lock();
        REQUIRE_FALSE(refused);
        CHECK(refused.error() == dl::condition::contended);

        // Several leases: the AWS client's heartbeats give its item a new version each
        // time, so no waiter ever sees one unchanged for a whole lease.
        auto waiting = test::start(co_await asio::this_coro::executor, m.lock());
        co_await test::settle(3 * peer_lease + 500ms);
        CHECK_FALSE(waiting.ready());
        CHECK(t.item(name)["recordVersionNumber"] != held["recordVersionNumber"]);

        { const auto said_ = co_await peer.ask("release"); CHECK(said_ == "released"); }
        const auto released = std::chrono::steady_clock::now();
        { const bool came_ = co_await waiting.wait(5000ms); REQUIRE(came_); }
        auto& l = waiting.get();
        REQUIRE(l);
        CHECK(std::chrono::steady_clock::now() - released < distlock_retry + 700ms);
        // The AWS layout: its owner token as ownerName, a UUID, the lease in ms as a
        // string, the fence stamped beside them and counted in the fence item.
        const auto ours = t.item(name);
        CHECK(ours["ownerName"]["S"] == l->owner().to_hex());
        CHECK(ours["recordVersionNumber"]["S"].get<std::string>().size() == 36);
        CHECK(ours["leaseDuration"]["S"] == "1000");
        CHECK(ours["fence"]["N"] == std::to_string(l->fence()));
        CHECK(ours["fenceOwner"]["S"] == l->owner().to_hex());
        CHECK(t.item("distlock#fence#" + name)["fence"]["N"] == std::to_string(l->fence()));
        { const auto ok_ = co_await l->unlock(); CHECK(ok_); }
        CHECK(t.item(name).is_null()); // released as the AWS client does: deleted
    });
}

TEST_CASE("dynamodb interop: distlock holds, the AWS client cannot take it until unlock()", "[interop][dynamodb]")
{
    DISTLOCK_NEEDS_PYTHON();
    aws_table t;
    const std::string name = "interop/distlock-holds";
    aws_peer peer{t.server, name, "aws-host-2"};
    auto m = mutex_on(t, name);
    test::run(t.io, [&]() -> asio::awaitable<void> {
        auto l = co_await m.lock();
        REQUIRE(l);
        // The AWS client watches a whole lease (and 300 ms more): distlock's heartbeats
        // keep changing the version, so it gives up.
        { const auto said_ = co_await peer.ask("acquire 300"); CHECK(said_ == "timeout"); }
        CHECK(l->valid());
        { const auto ok_ = co_await l->unlock(); CHECK(ok_); }
        { const auto said_ = co_await peer.ask("acquire 300"); CHECK(said_ == "held"); }
        CHECK(t.item(name)["ownerName"]["S"] == "aws-host-2");
        CHECK_FALSE(t.item(name).contains("fence")); // its PutItem wrote the whole item
        { const auto said_ = co_await peer.ask("release"); CHECK(said_ == "released"); }
    });
}

TEST_CASE("dynamodb interop: an AWS holder killed with SIGKILL: distlock takes the lock after its version stayed "
          "unchanged for a whole lease",
          "[interop][dynamodb]")
{
    DISTLOCK_NEEDS_PYTHON();
    aws_table t;
    const std::string name = "interop/killed";
    aws_peer peer{t.server, name, "aws-host-3"};
    auto m = mutex_on(t, name);
    test::run(t.io, [&]() -> asio::awaitable<void> {
        { const auto said_ = co_await peer.ask("acquire 1000"); CHECK(said_ == "held"); }
        peer.kill();
        const auto killed = std::chrono::steady_clock::now();
        auto l = co_await m.lock();
        REQUIRE(l);
        // Its last heartbeat's version, watched for a whole lease by this lock() call.
        CHECK(std::chrono::steady_clock::now() - killed >= peer_lease);
        CHECK(l->fence() >= 1);
        CHECK(t.item(name)["ownerName"]["S"] == l->owner().to_hex());
        { const auto ok_ = co_await l->unlock(); CHECK(ok_); }
    });
}

TEST_CASE("dynamodb interop: distlock's fences keep growing across AWS holders", "[interop][dynamodb]")
{
    DISTLOCK_NEEDS_PYTHON();
    aws_table t;
    const std::string name = "interop/fences";
    aws_peer peer{t.server, name, "aws-host-4"};
    auto m = mutex_on(t, name);
    test::run(t.io, [&]() -> asio::awaitable<void> {
        dl::fence_token last = 0;
        for (int round = 0; round < 3; ++round) {
            auto l = co_await m.lock();
            REQUIRE(l);
            CHECK(l->fence() > last);
            last = l->fence();
            { const auto ok_ = co_await l->unlock(); CHECK(ok_); }
            // An AWS holder in between: its PutItem replaces the whole item, the fence
            // item stays.
            { const auto said_ = co_await peer.ask("acquire 1000"); CHECK(said_ == "held"); }
            CHECK_FALSE(t.item(name).contains("fence"));
            auto info = co_await t.store->read(name);
            REQUIRE(info);
            CHECK(info->held);
            CHECK(info->owner == "aws-host");
            CHECK(info->fence == last); // the last distlock fence, from the fence item
            { const auto said_ = co_await peer.ask("release"); CHECK(said_ == "released"); }
        }
    });
}
