// test/interop/zookeeper.cpp: distlock and the store's reference clients on one server:
// Apache Curator's InterProcessMutex and InterProcessReadWriteLock (a Java program,
// test/interop/zookeeper/CuratorLock.java), Curator's LeaderLatch against distlock's
// elections in the latch dialect (test/interop/zookeeper/CuratorLatch.java) and
// kazoo's Lock (a Python script,
// test/interop/zookeeper/kazoo_lock.py), each a child process that takes commands on
// stdin and prints a line per event. They queue on the node distlock uses for a
// resource: the store's prefix, then the escaped resource id. Both take a 2 s session
// (the test server's ticks allow 0.5-5 s), so a killed holder's lock goes within it.
#include "process.hpp"
#include "zookeeper/zookeeper_support.hpp"

#include <distlock/basic_distributed_shared_mutex.hpp>
#include <distlock/basic_leader_election.hpp>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace {

using namespace std::chrono_literals;
using namespace test::zookeeper_tests;

using quick_mutex = dl::basic_distributed_mutex<zk::store, dl::retry::fixed>;
using quick_shared_mutex = dl::basic_distributed_shared_mutex<zk::store, dl::retry::fixed>;
using election = dl::basic_leader_election<zk::store>;

// lock() waits at most this long; a watch wakes it (the retry delay only bounds a
// missed notification).
dl::retry::fixed quick() { return {.delay = 100ms, .deadline = 15s}; }

constexpr const char* session_ms = "2000";

std::string curator_classpath()
{
#ifdef DISTLOCK_CURATOR_CLASSES
    std::string cp = DISTLOCK_CURATOR_CLASSES;
    for (const char* jar : {"curator-recipes", "curator-framework", "curator-client", "zookeeper", "zookeeper-jute",
                            "guava", "slf4j-api", "slf4j-nop"})
        cp += std::string{":/usr/share/java/"} + jar + ".jar";
    return cp;
#else
    return {};
#endif
}

std::string kazoo_script()
{
    return (std::filesystem::path{__FILE__}.parent_path() / "zookeeper" / "kazoo_lock.py").string();
}

// A reference client holding (or waiting for) one lock, driven line by line.
class foreign {
public:
    // latch: Curator's LeaderLatch (CuratorLatch.java), the others lock recipes.
    enum class kind { curator, kazoo, latch };

    // `lock`: mutex, read or write; for a latch, the participant's id.
    foreign(kind k, const std::string& path, const std::string& lock)
    {
        const auto connect = "127.0.0.1:" + std::to_string(test::shared_zookeeper().port());
        std::vector<std::string> argv;
        if (k == kind::latch)
            argv = {"java", "-Xmx64m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xshare:auto",
                    "-cp", curator_classpath(), "CuratorLatch", connect, path, lock, session_ms};
        else if (k == kind::curator)
            argv = {"java", "-Xmx64m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xshare:auto",
                    "-cp", curator_classpath(), "CuratorLock", connect, path, lock, session_ms};
        else
            argv = {"/usr/bin/python3", kazoo_script(), connect, path, lock, session_ms};
        proc_ = std::make_unique<test::child>(std::move(argv));
    }

    // The next line it prints, read without blocking the io_context (its leases'
    // pings go on meanwhile); "" when none came within `limit`.
    asio::awaitable<std::string> line(std::chrono::milliseconds limit = 20s)
    {
        const auto deadline = std::chrono::steady_clock::now() + limit;
        while (std::chrono::steady_clock::now() < deadline) {
            // Polls for up to a couple of milliseconds (it rounds its budget down to whole ones).
            if (auto l = proc_->read_line(3ms))
                co_return *l;
            co_await test::settle(5ms);
        }
        co_return std::string{};
    }

    void send(const std::string& command) { proc_->write_line(command); }

    asio::awaitable<std::string> ask(const std::string& command, std::chrono::milliseconds limit = 20s)
    {
        send(command);
        return line(limit);
    }

    // Its node's czxid, as the foreign service reads its fence.
    asio::awaitable<dl::fence_token> fence()
    {
        const auto said = co_await ask("fence");
        REQUIRE(said.starts_with("fence "));
        co_return static_cast<dl::fence_token>(std::stoll(said.substr(6)));
    }

    void kill() { proc_->kill(SIGKILL); }

private:
    std::unique_ptr<test::child> proc_;
};

// The Curator cases need the program the build compiles: without it they fail, saying
// what to install (./dev installs both).
bool have_curator()
{
    if (curator_classpath().empty())
        FAIL("DISTLOCK_CURATOR_CLASSES is not defined: the build found no javac or no Curator jars "
             "(default-jdk-headless, libcurator-recipes-java)");
    return true;
}

zk::config settings(const std::string& prefix, zk::dialect d = zk::dialect::curator)
{
    auto c = test::shared_zookeeper().config(prefix);
    c.dialect = d;
    return c;
}

// The node a foreign client passes for `resource`: the prefix, then the escaped id.
std::string node_of(const std::string& prefix, const std::string& resource)
{
    return zk::detail::resource_node(prefix, resource);
}

// Both directions, and fences across a foreign holder: distlock holds, the foreign
// client times out and then waits, gets the lock at distlock's unlock(); then distlock
// is refused and waits, and gets it at the foreign release, with a fence above both.
void excludes_both_ways(foreign::kind k)
{
    const auto prefix = test::fresh_zk_prefix("interop");
    const std::string resource = "orders:42";
    foreign other{k, node_of(prefix, resource), "mutex"};
    asio::io_context io;
    zk::store s{io, settings(prefix, k == foreign::kind::kazoo ? zk::dialect::kazoo : zk::dialect::curator)};
    test::run(io, [&]() -> asio::awaitable<void> {
        { const auto said_ = co_await other.line(); REQUIRE(said_ == "ready"); }
        quick_mutex m{s, resource, {}, quick()};
        auto first = co_await m.lock();
        REQUIRE(first);
        // 2. distlock holds: the foreign client cannot get it, then gets it after unlock().
        { const auto said_ = co_await other.ask("acquire 300"); CHECK(said_ == "timeout"); }
        other.send("acquire 15000");
        (void)co_await test::eventually("the foreign waiter queued", [&] { return queue_of(prefix, resource).size() == 2; },
                                        test::long_enough());
        const auto names = queue_of(prefix, resource);
        if (k == foreign::kind::curator) {
            CHECK(names[0].starts_with("_c_" + zk::detail::owner_uuid(first->owner().to_hex()) + "-lock-"));
            CHECK(names[1].starts_with("_c_"));
            CHECK(names[1].find("-lock-") != std::string::npos);
        } else {
            CHECK(names[0].starts_with(first->owner().to_hex() + "__lock__"));
            CHECK(names[1].find("__lock__") == 32);
        }
        const auto fence_before = first->fence();
        { const auto ok_ = co_await first->unlock(); CHECK(ok_); }
        { const auto said_ = co_await other.line(); CHECK(said_ == "held"); }
        const auto foreign_fence = co_await other.fence();
        CHECK(foreign_fence > fence_before);

        // 1. The foreign client holds: try_lock is refused, lock() waits and gets the
        // lock at the release (its watch on the foreign node wakes it).
        auto refused = co_await m.try_lock();
        REQUIRE_FALSE(refused);
        CHECK(refused.error() == dl::condition::contended);
        auto waiting = test::start(co_await asio::this_coro::executor, m.lock());
        (void)co_await test::eventually("distlock queued", [&] { return queue_of(prefix, resource).size() == 2; },
                                        test::long_enough());
        co_await test::settle(200ms);
        CHECK_FALSE(waiting.ready());
        { const auto said_ = co_await other.ask("release"); CHECK(said_ == "released"); }
        { const bool came_ = co_await waiting.wait(5000ms); REQUIRE(came_); }
        auto& second = waiting.get();
        REQUIRE(second);
        // 4. Fences: above the foreign holder's node, so above every earlier grant.
        CHECK(second->fence() > foreign_fence);
        CHECK(second->fence() > fence_before);
        { const auto ok_ = co_await second->unlock(); CHECK(ok_); }
        CHECK(queue_of(prefix, resource).empty());
        co_await s.close();
    }, 60s);
}

// 3. A foreign holder killed without releasing: its session expires (2 s) and its node
// goes with it; distlock, waiting, gets the lock then.
void survives_a_killed_holder(foreign::kind k)
{
    const auto prefix = test::fresh_zk_prefix("interop-kill");
    const std::string resource = "r";
    foreign other{k, node_of(prefix, resource), "mutex"};
    asio::io_context io;
    zk::store s{io, settings(prefix)};
    test::run(io, [&]() -> asio::awaitable<void> {
        { const auto said_ = co_await other.line(); REQUIRE(said_ == "ready"); }
        { const auto said_ = co_await other.ask("acquire 5000"); CHECK(said_ == "held"); }
        quick_mutex m{s, resource, {}, quick()};
        auto refused = co_await m.try_lock();
        REQUIRE_FALSE(refused);
        CHECK(refused.error() == dl::condition::contended);
        other.kill();
        const auto killed = std::chrono::steady_clock::now();
        auto got = co_await m.lock();
        REQUIRE(got);
        // Within the session timeout and the server's expiry tick, with room for a loaded machine.
        CHECK(std::chrono::steady_clock::now() - killed < 8s);
        { const auto ok_ = co_await got->unlock(); CHECK(ok_); }
        co_await s.close();
    }, 60s);
}

} // namespace

TEST_CASE("zookeeper interop: Curator's InterProcessMutex and distlock exclude each other, fences grow across it",
          "[interop][zookeeper]")
{
    if (have_curator())
        excludes_both_ways(foreign::kind::curator);
}

TEST_CASE("zookeeper interop: a killed Curator holder's lock goes with its session", "[interop][zookeeper]")
{
    if (have_curator())
        survives_a_killed_holder(foreign::kind::curator);
}

TEST_CASE("zookeeper interop: kazoo's Lock and distlock (kazoo dialect) exclude each other, fences grow across it",
          "[interop][zookeeper]")
{
    excludes_both_ways(foreign::kind::kazoo);
}

TEST_CASE("zookeeper interop: a killed kazoo holder's lock goes with its session; the default dialect waits for "
          "kazoo's node too",
          "[interop][zookeeper]")
{
    survives_a_killed_holder(foreign::kind::kazoo);
}

TEST_CASE("zookeeper interop: one fair queue of Curator and distlock waiters is served in order",
          "[interop][zookeeper]")
{
    if (!have_curator())
        return;
    const auto prefix = test::fresh_zk_prefix("interop-fair");
    const std::string resource = "queue";
    foreign w1{foreign::kind::curator, node_of(prefix, resource), "mutex"};
    asio::io_context io;
    zk::store a{io, settings(prefix)}, b{io, settings(prefix)};
    test::run(io, [&]() -> asio::awaitable<void> {
        { const auto said_ = co_await w1.line(); REQUIRE(said_ == "ready"); }
        quick_mutex holder{a, resource, {}, quick()};
        quick_mutex w2{b, resource, {}, quick()};
        auto first = co_await holder.lock();
        REQUIRE(first);
        w1.send("acquire 15000");
        (void)co_await test::eventually("W1 queued", [&] { return queue_of(prefix, resource).size() == 2; },
                                        test::long_enough());
        auto second = test::start(co_await asio::this_coro::executor, w2.lock());
        (void)co_await test::eventually("W2 queued", [&] { return queue_of(prefix, resource).size() == 3; },
                                        test::long_enough());
        { const auto ok_ = co_await first->unlock(); CHECK(ok_); }
        { const auto said_ = co_await w1.line(); CHECK(said_ == "held"); }
        co_await test::settle(300ms);
        CHECK_FALSE(second.ready()); // W2 queued after W1: it waits for W1's release
        { const auto said_ = co_await w1.ask("release"); CHECK(said_ == "released"); }
        { const bool came_ = co_await second.wait(5000ms); REQUIRE(came_); }
        REQUIRE(second.get());
        { const auto ok_ = co_await second.get()->unlock(); CHECK(ok_); }
        co_await a.close();
        co_await b.close();
    }, 60s);
}

TEST_CASE("zookeeper interop: Curator's read-write lock: readers share with distlock's readers, writers exclude "
          "them both ways",
          "[interop][zookeeper]")
{
    if (!have_curator())
        return;
    const auto prefix = test::fresh_zk_prefix("interop-rw");
    const std::string resource = "doc";
    foreign reader{foreign::kind::curator, node_of(prefix, resource), "read"};
    foreign writer{foreign::kind::curator, node_of(prefix, resource), "write"};
    asio::io_context io;
    zk::store s{io, settings(prefix)};
    test::run(io, [&]() -> asio::awaitable<void> {
        { const auto said_ = co_await reader.line(); REQUIRE(said_ == "ready"); }
        { const auto said_ = co_await writer.line(); REQUIRE(said_ == "ready"); }
        quick_shared_mutex rw{s, resource, {}, quick()};
        // A Curator reader and a distlock reader share; a distlock writer waits.
        { const auto said_ = co_await reader.ask("acquire 5000"); CHECK(said_ == "held"); }
        auto shared = co_await rw.try_lock_shared();
        REQUIRE(shared);
        auto no_writer = co_await rw.try_lock();
        REQUIRE_FALSE(no_writer);
        CHECK(no_writer.error() == dl::condition::contended);
        // distlock's reader holds: Curator's writer is kept out until both readers leave.
        { const auto said_ = co_await writer.ask("acquire 300"); CHECK(said_ == "timeout"); }
        { const auto ok_ = co_await shared->unlock(); CHECK(ok_); }
        { const auto said_ = co_await reader.ask("release"); CHECK(said_ == "released"); }
        { const auto said_ = co_await writer.ask("acquire 5000"); CHECK(said_ == "held"); }
        // A Curator writer holds: distlock's readers wait, and get it at its release.
        auto kept_out = co_await rw.try_lock_shared();
        REQUIRE_FALSE(kept_out);
        CHECK(kept_out.error() == dl::condition::contended);
        auto waiting = test::start(co_await asio::this_coro::executor, rw.lock_shared());
        (void)co_await test::eventually("the reader queued", [&] { return queue_of(prefix, resource).size() == 2; },
                                        test::long_enough());
        const auto names = queue_of(prefix, resource);
        CHECK(names[0].find("-__WRIT__") != std::string::npos);
        CHECK(names[1].find("-__READ__") != std::string::npos);
        { const auto said_ = co_await writer.ask("release"); CHECK(said_ == "released"); }
        { const bool came_ = co_await waiting.wait(5000ms); REQUIRE(came_); }
        auto& read_lease = waiting.get();
        REQUIRE(read_lease);
        // And a distlock writer keeps Curator's reader out.
        { const auto ok_ = co_await read_lease->unlock(); CHECK(ok_); }
        auto exclusive = co_await rw.lock();
        REQUIRE(exclusive);
        { const auto said_ = co_await reader.ask("acquire 300"); CHECK(said_ == "timeout"); }
        reader.send("acquire 15000");
        co_await test::settle(100ms);
        { const auto ok_ = co_await exclusive->unlock(); CHECK(ok_); }
        { const auto said_ = co_await reader.line(); CHECK(said_ == "held"); }
        { const auto said_ = co_await reader.ask("release"); CHECK(said_ == "released"); }
        co_await s.close();
    }, 60s);
}

TEST_CASE("zookeeper interop: a node named as before dialects (<hex>-<seq>) is honoured by the default dialect, "
          "and a client in the distlock dialect writes such names",
          "[interop][zookeeper]")
{
    const auto prefix = test::fresh_zk_prefix("interop-old");
    const std::string resource = "old";
    const auto parent = node_of(prefix, resource);
    asio::io_context io;
    zk::store fresh{io, settings(prefix)}, old{io, settings(prefix, zk::dialect::distlock)};
    test::run(io, [&]() -> asio::awaitable<void> {
        quick_mutex m{fresh, resource, {}, quick()};
        quick_mutex legacy{old, resource, {}, quick()};
        // What a client of the release before dialects writes, made by hand.
        test::zk_client c{test::shared_zookeeper().port()};
        REQUIRE(c.create(prefix) == 0);
        REQUIRE(c.create(parent) == 0);
        REQUIRE(c.create(parent + "/" + std::string(32, 'e') + "-", zk::proto::create_flags::sequential) == 0);
        auto refused = co_await m.try_lock();
        REQUIRE_FALSE(refused);
        CHECK(refused.error() == dl::condition::contended);
        auto waiting = test::start(co_await asio::this_coro::executor, m.lock());
        (void)co_await test::eventually("queued", [&] { return queue_of(prefix, resource).size() == 2; },
                                        test::long_enough());
        const auto names = queue_of(prefix, resource);
        CHECK(c.remove(parent + "/" + names[0]) == 0);
        { const bool came_ = co_await waiting.wait(5000ms); REQUIRE(came_); }
        REQUIRE(waiting.get());
        // The distlock dialect: today's names, and it queues behind the default's node.
        auto behind = test::start(co_await asio::this_coro::executor, legacy.lock());
        (void)co_await test::eventually("legacy queued", [&] { return queue_of(prefix, resource).size() == 2; },
                                        test::long_enough());
        const auto queued = queue_of(prefix, resource);
        REQUIRE(queued[1].size() == 32 + 1 + 10);
        CHECK(queued[1][32] == '-');
        CHECK(zk::detail::parse_waiter(queued[1])->owner == queued[1].substr(0, 32));
        { const auto ok_ = co_await waiting.get()->unlock(); CHECK(ok_); }
        { const bool came_ = co_await behind.wait(5000ms); REQUIRE(came_); }
        REQUIRE(behind.get());
        { const auto ok_ = co_await behind.get()->unlock(); CHECK(ok_); }
        co_await fresh.close();
        co_await old.close();
    }, 60s);
}

// -- Curator's LeaderLatch and distlock's elections (the latch dialect) -----------------

namespace {

// A time of CLOCK_MONOTONIC in nanoseconds, as Java's System.nanoTime() reads it on Linux.
std::int64_t monotonic_ns()
{
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

// "windows S:E S:E ..." as CuratorLatch prints them; an open window ends at -1.
std::vector<std::pair<std::int64_t, std::int64_t>> windows_of(const std::string& said)
{
    std::vector<std::pair<std::int64_t, std::int64_t>> out;
    std::istringstream in{said};
    std::string word;
    in >> word;
    REQUIRE(word == "windows");
    while (in >> word) {
        const auto colon = word.find(':');
        REQUIRE(colon != std::string::npos);
        const auto end = word.substr(colon + 1);
        out.emplace_back(std::stoll(word.substr(0, colon)), end == "-" ? -1 : std::stoll(end));
    }
    return out;
}

} // namespace

TEST_CASE("zookeeper interop: Curator's LeaderLatch leads first: distlock's observers read its id, a distlock "
          "campaign (latch dialect) waits and leads once the Curator process is killed, with a larger epoch",
          "[interop][zookeeper]")
{
    if (!have_curator())
        return;
    const auto prefix = test::fresh_zk_prefix("interop-latch");
    const std::string resource = "scheduler";
    foreign java{foreign::kind::latch, node_of(prefix, resource), "java-1"};
    asio::io_context io;
    zk::store s{io, settings(prefix, zk::dialect::latch)};
    test::run(io, [&]() -> asio::awaitable<void> {
        { const auto said_ = co_await java.line(); REQUIRE(said_ == "ready"); }
        { const auto said_ = co_await java.ask("start"); REQUIRE(said_ == "started"); }
        { const auto said_ = co_await java.ask("await 10000"); REQUIRE(said_ == "leader"); }
        const auto java_fence = co_await java.fence();
        election e{s, resource}, watcher{s, resource};
        // The leader's value is the Curator participant's id, its epoch its node's czxid.
        auto now = co_await e.current();
        REQUIRE(now);
        CHECK(now->value == "java-1");
        CHECK(now->epoch == java_fence);
        auto seen = co_await watcher.observe();
        REQUIRE(seen);
        CHECK(seen->value == "java-1");
        auto campaign = test::start(co_await asio::this_coro::executor, e.campaign("cpp-1"));
        (void)co_await test::eventually("distlock queued", [&] { return queue_of(prefix, resource).size() == 2; },
                                        test::long_enough());
        const auto names = queue_of(prefix, resource);
        CHECK(names[1].starts_with("_c_"));
        CHECK(names[1].find("-latch-") == names[1].size() - 17); // "-latch-" + ten digits
        co_await test::settle(300ms);
        CHECK_FALSE(campaign.ready());
        { const auto said_ = co_await java.ask("leader"); CHECK(said_ == "leader-id java-1"); }
        java.kill();
        const auto killed = std::chrono::steady_clock::now();
        { const bool came_ = co_await campaign.wait(10000ms); REQUIRE(came_); }
        auto& led = campaign.get();
        REQUIRE(led);
        CHECK(std::chrono::steady_clock::now() - killed < 8s);
        CHECK(led->epoch() > java_fence);
        auto next = co_await watcher.observe();
        REQUIRE(next);
        CHECK(next->value == "cpp-1");
        CHECK(next->epoch == led->epoch());
        { const auto ok_ = co_await led->resign(); CHECK(ok_); }
        co_await s.close();
    }, 60s);
}

TEST_CASE("zookeeper interop: distlock leads (latch dialect): Curator's LeaderLatch waits and reads distlock's "
          "value as the leader's id, a proclaim of another value is refused with nothing written, and Curator "
          "leads once distlock resigns",
          "[interop][zookeeper]")
{
    if (!have_curator())
        return;
    const auto prefix = test::fresh_zk_prefix("interop-latch2");
    const std::string resource = "scheduler";
    const auto parent = node_of(prefix, resource);
    foreign java{foreign::kind::latch, parent, "java-2"};
    asio::io_context io;
    zk::store s{io, settings(prefix, zk::dialect::latch)};
    test::run(io, [&]() -> asio::awaitable<void> {
        { const auto said_ = co_await java.line(); REQUIRE(said_ == "ready"); }
        election e{s, resource};
        auto t = co_await e.campaign("cpp-leader");
        REQUIRE(t);
        // The node as LeaderLatch names its own, the value its data from the create,
        // never written since (data version 0).
        auto names = queue_of(prefix, resource);
        REQUIRE(names.size() == 1);
        CHECK(names[0].starts_with("_c_" + zk::detail::owner_uuid(t->owner().to_hex()) + "-latch-"));
        test::zk_client zc{test::shared_zookeeper().port()};
        auto st = zc.stat(parent + "/" + names[0]);
        REQUIRE(st);
        CHECK(st->version == 0);
        CHECK(st->data_length == 10);
        CHECK(st->czxid == static_cast<std::int64_t>(t->epoch()));
        { const auto said_ = co_await java.ask("start"); REQUIRE(said_ == "started"); }
        { const auto said_ = co_await java.ask("await 500"); CHECK(said_ == "waiting"); }
        { const auto said_ = co_await java.ask("has"); CHECK(said_ == "has false"); }
        { const auto said_ = co_await java.ask("leader"); CHECK(said_ == "leader-id cpp-leader"); }
        // The value it stands with is confirmed; another is refused (a setData would spend
        // the watch of Curator's participant behind it), and nothing is written.
        { const auto ok_ = co_await e.proclaim(*t, "cpp-leader"); CHECK(ok_); }
        auto other = co_await e.proclaim(*t, "another");
        REQUIRE_FALSE(other);
        CHECK(other.error() == dl::condition::invalid_argument);
        dl::diagnostics why;
        auto direct = co_await s.proclaim(resource, t->owner(), t->epoch(), "another", &why);
        REQUIRE_FALSE(direct);
        CHECK(std::string{why.client_message()}.find("latch") != std::string::npos);
        CHECK(t->value() == "cpp-leader");
        st = zc.stat(parent + "/" + names[0]);
        REQUIRE(st);
        CHECK(st->version == 0);
        { const auto said_ = co_await java.ask("leader"); CHECK(said_ == "leader-id cpp-leader"); }
        const auto epoch = t->epoch();
        { const auto ok_ = co_await t->resign(); CHECK(ok_); }
        // Curator's watch on distlock's node was not spent: the deletion makes it leader.
        { const auto said_ = co_await java.ask("await 5000"); CHECK(said_ == "leader"); }
        { const auto said_ = co_await java.ask("has"); CHECK(said_ == "has true"); }
        auto now = co_await e.current();
        REQUIRE(now);
        CHECK(now->value == "java-2");
        CHECK(now->epoch > epoch);
        { const auto said_ = co_await java.ask("stop"); CHECK(said_ == "closed"); }
        co_await s.close();
    }, 60s);
}

TEST_CASE("zookeeper interop: Curator's LeaderLatch and distlock's elections (latch dialect) never lead at once, "
          "leadership passing back and forth, epochs growing",
          "[interop][zookeeper]")
{
    if (!have_curator())
        return;
    const auto prefix = test::fresh_zk_prefix("interop-latch3");
    const std::string resource = "scheduler";
    foreign java{foreign::kind::latch, node_of(prefix, resource), "java-3"};
    asio::io_context io;
    zk::store s{io, settings(prefix, zk::dialect::latch)};
    test::run(io, [&]() -> asio::awaitable<void> {
        { const auto said_ = co_await java.line(); REQUIRE(said_ == "ready"); }
        election e{s, resource};
        std::vector<std::pair<std::int64_t, std::int64_t>> ours; // distlock's lead windows
        auto t = co_await e.campaign("cpp");
        REQUIRE(t);
        auto began = monotonic_ns();
        dl::fence_token last = t->epoch();
        for (int round = 0; round < 3; ++round) {
            // Curator joins behind distlock's leader and waits.
            { const auto said_ = co_await java.ask("start"); REQUIRE(said_ == "started"); }
            { const auto said_ = co_await java.ask("await 300"); CHECK(said_ == "waiting"); }
            ours.emplace_back(began, monotonic_ns());
            { const auto ok_ = co_await t->resign(); CHECK(ok_); }
            { const auto said_ = co_await java.ask("await 5000"); REQUIRE(said_ == "leader"); }
            const auto java_fence = co_await java.fence();
            CHECK(java_fence > last);
            // distlock campaigns behind Curator's leader, and leads once it closes its latch.
            auto campaign = test::start(co_await asio::this_coro::executor, e.campaign("cpp"));
            (void)co_await test::eventually("distlock queued",
                                            [&] { return queue_of(prefix, resource).size() == 2; },
                                            test::long_enough());
            co_await test::settle(100ms);
            CHECK_FALSE(campaign.ready());
            { const auto said_ = co_await java.ask("stop"); REQUIRE(said_ == "closed"); }
            { const bool came_ = co_await campaign.wait(5000ms); REQUIRE(came_); }
            REQUIRE(campaign.get());
            t = std::move(campaign.get());
            began = monotonic_ns();
            CHECK(t->epoch() > java_fence);
            last = t->epoch();
        }
        ours.emplace_back(began, monotonic_ns());
        { const auto ok_ = co_await t->resign(); CHECK(ok_); }
        const auto theirs = windows_of(co_await java.ask("windows"));
        CHECK(theirs.size() == 3);
        for (const auto& [js, je] : theirs) {
            CHECK(je >= js); // every Curator window ended (closed)
            for (const auto& [cs, ce] : ours) {
                INFO("Curator led " << js << ".." << je << ", distlock " << cs << ".." << ce);
                CHECK((je <= cs || ce <= js));
            }
        }
        co_await s.close();
    }, 90s);
}

TEST_CASE("zookeeper interop: the latch dialect refuses a lock-delay before any I/O, saying why",
          "[interop][zookeeper]")
{
    const auto prefix = test::fresh_zk_prefix("interop-latch-delay");
    asio::io_context io;
    zk::store s{io, settings(prefix, zk::dialect::latch)};
    CHECK(zk::config::from_url("zk://127.0.0.1?dialect=latch")->dialect == zk::dialect::latch);
    test::run(io, [&]() -> asio::awaitable<void> {
        dl::basic_distributed_mutex<zk::store> m{s, "delayed", {.ttl = 10s, .lock_delay = 1s}};
        CHECK(m.validate() == dl::condition::invalid_argument);
        dl::diagnostics why;
        auto refused = co_await m.lock(why);
        REQUIRE_FALSE(refused);
        CHECK(refused.error() == dl::condition::invalid_argument);
        CHECK(std::string{why.client_message()}.find("latch dialect keeps no lock-delay") != std::string::npos);
        test::zk_client zc{test::shared_zookeeper().port()};
        CHECK_FALSE(zc.children(node_of(prefix, "delayed"))); // nothing was made
        // Without a lock-delay the same mutex locks, named as a latch participant.
        dl::basic_distributed_mutex<zk::store> plain{s, "delayed"};
        auto held = co_await plain.lock();
        REQUIRE(held);
        const auto names = queue_of(prefix, "delayed");
        REQUIRE(names.size() == 1);
        CHECK(names[0].find("-latch-") != std::string::npos);
        { const auto ok_ = co_await held->unlock(); CHECK(ok_); }
        co_await s.close();
    }, 30s);
}
