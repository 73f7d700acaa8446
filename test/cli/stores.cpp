// The distlock tool against the servers of the store tests: the stores the shell test
// (test/cli/run.sh: memory, Redis, a Redlock quorum, DynamoDB, PostgreSQL) does not
// start: etcd, ZooKeeper, a Redis Cluster, a primary found through a Sentinel; elections
// and lock-delays on PostgreSQL's advisory locks; and how the tool fails: a store that does not answer (--store-timeout), a store that refuses
// (the server's words reach the terminal). Each store also lists its locks and has one
// revoked. The tool runs as a child process; its
// output (stdout and stderr together) is read whole.
#include "etcd_server.hpp"
#include "postgres_server.hpp"
#include "process.hpp"
#include "redis_cluster.hpp"
#include "redis_server.hpp"
#include "support.hpp"
#include "zookeeper_server.hpp"

#include <distlock/etcd.hpp>
#include <distlock/zookeeper.hpp>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <optional>
#include <thread>
#include <string>
#include <vector>

namespace {

using namespace std::chrono_literals;
namespace dl = distlock;

std::string quoted_for_shell(const std::string& s)
{
    std::string out = "'";
    for (const char c : s)
        out += c == '\'' ? std::string{"'\\''"} : std::string(1, c);
    return out + "'";
}

struct outcome {
    std::optional<int> exit;
    std::string said; // stdout and stderr
};

// Runs the tool with `args` and waits for it (at most `limit`).
outcome tool(const std::vector<std::string>& args, std::chrono::milliseconds limit = 60s)
{
    std::string command = quoted_for_shell(DISTLOCK_CLI_PATH);
    for (const auto& a : args)
        command += " " + quoted_for_shell(a);
    test::child c{{"/bin/sh", "-c", command + " 2>&1"}};
    outcome o;
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < deadline) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
        auto line = c.read_line(left);
        if (!line)
            break; // end of output (or the limit)
        o.said += *line + "\n";
    }
    o.exit = c.wait(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()));
    return o;
}

// An operator lists the locks and takes one back by its fence: the holder's `run`
// hears of it at its next renewal, stops its command and exits 5.
void list_and_revoke(const std::string& url, const std::string& resource)
{
    INFO(url);
    test::child holder{{"/bin/sh", "-c",
                        quoted_for_shell(DISTLOCK_CLI_PATH) + " run --store " + quoted_for_shell(url) +
                            " --ttl 3s " + quoted_for_shell(resource) + " -- sh -c 'echo holding; sleep 60' 2>&1"}};
    REQUIRE(holder.read_line(20s) == std::optional<std::string>{"holding"});
    const auto listed = tool({"list", "--store", url});
    INFO(listed.said);
    CHECK(listed.exit == std::optional<int>{0});
    CHECK(listed.said.starts_with(resource + "  fence "));
    const auto none = tool({"list", "--store", url, resource + "-not"});
    CHECK(none.said.empty());
    const auto json = tool({"list", "--json", "--store", url, resource});
    INFO(json.said);
    const auto at = json.said.find("\"fence\":");
    REQUIRE(at != std::string::npos);
    const auto fence = std::stoull(json.said.substr(at + 8));
    CHECK(json.said.starts_with("{\"node\":0,\"resource\":\"" + resource + "\",\"fence\":"));
    const auto wrong = tool({"revoke", "--store", url, "--fence", std::to_string(fence + 1), resource});
    CHECK(wrong.exit == std::optional<int>{3});
    const auto revoked = tool({"revoke", "--store", url, "--fence", std::to_string(fence), resource});
    INFO(revoked.said);
    CHECK(revoked.exit == std::optional<int>{0});
    CHECK(revoked.said.starts_with("revoked " + resource + " (fence " + std::to_string(fence) + ")"));
    CHECK(holder.wait(30s) == std::optional<int>{5});
    const auto taken = tool({"try", "--store", url, resource});
    CHECK(taken.exit == std::optional<int>{0});
}

// What every store the tool speaks must do: run a command under the lock with its
// fence in the environment, report the lock free and held, refuse `try` while it is
// held, and free it for an operator who names the holder.
void run_status_try_release(const std::string& url, const std::string& resource)
{
    INFO(url);
    const auto ran = tool({"run", "--store", url, "--ttl", "10s", resource, "--", "sh", "-c",
                           "echo \"fence=$DISTLOCK_FENCE resource=$DISTLOCK_RESOURCE\""});
    INFO(ran.said);
    REQUIRE(ran.exit == std::optional<int>{0});
    CHECK(ran.said.find("fence=") != std::string::npos);
    CHECK(ran.said.find("fence= ") == std::string::npos); // a fence was given
    CHECK(ran.said.find("resource=" + resource) != std::string::npos);

    const auto free_now = tool({"status", "--store", url, resource});
    INFO(free_now.said);
    CHECK(free_now.exit == std::optional<int>{0});
    CHECK(free_now.said.starts_with("free"));

    // A holder in another process: `run -v` prints its owner, then holds until killed.
    test::child holder{{"/bin/sh", "-c",
                        quoted_for_shell(DISTLOCK_CLI_PATH) + " run -v --store " + quoted_for_shell(url) +
                            " --ttl 10s " + quoted_for_shell(resource) + " -- sh -c 'echo holding; sleep 60' 2>&1"}};
    std::string owner;
    for (int i = 0; i < 10 && owner.empty(); ++i) {
        const auto line = holder.read_line(10s);
        REQUIRE(line);
        if (const auto at = line->find("owner "); at != std::string::npos)
            owner = line->substr(at + 6, 32);
    }
    REQUIRE(owner.size() == 32);
    const auto held = tool({"status", "--store", url, resource});
    INFO(held.said);
    CHECK(held.said.starts_with("held"));
    CHECK(held.said.find(owner.substr(0, 8)) != std::string::npos);
    const auto refused = tool({"try", "--store", url, resource});
    CHECK(refused.exit == std::optional<int>{3});
    const auto released = tool({"release", "--store", url, "--owner", owner, resource});
    INFO(released.said);
    CHECK(released.exit == std::optional<int>{0});
    const auto after = tool({"status", "--store", url, resource});
    INFO(after.said);
    CHECK(after.said.starts_with("free"));
    holder.kill(SIGTERM);
    (void)holder.wait(20s);
    list_and_revoke(url, resource);
}

} // namespace

TEST_CASE("cli: run, status, try and release on etcd and on ZooKeeper", "[cli][etcd][zookeeper]")
{
    const auto prefix = test::fresh_prefix("cli");
    run_status_try_release("etcd://127.0.0.1:" + std::to_string(test::shared_etcd().port()) + "?prefix=" + prefix +
                               "&ttl=5",
                           "nightly");
    const auto chroot = test::fresh_zk_prefix("cli");
    run_status_try_release("zk://127.0.0.1:" + std::to_string(test::shared_zookeeper().port()) + "?prefix=" + chroot,
                           "nightly");
}

TEST_CASE("cli: run --lock-delay on ZooKeeper: a holder killed without releasing keeps the lock from everyone for "
          "the delay after its session ended; a normal exit does not",
          "[cli][zookeeper]")
{
    const auto url = "zk://127.0.0.1:" + std::to_string(test::shared_zookeeper().port()) + "?prefix=" +
                     test::fresh_zk_prefix("cli-delay") + "&timeout=2000";
    const auto calm = tool({"run", "--store", url, "--ttl", "5s", "--lock-delay", "2s", "calm", "--", "true"});
    INFO(calm.said);
    CHECK(calm.exit == std::optional<int>{0});
    CHECK(tool({"try", "--store", url, "calm"}).exit == std::optional<int>{0});

    // exec: the SIGKILL below reaches distlock itself, not a shell above it.
    test::child holder{{"/bin/sh", "-c",
                        "exec " + quoted_for_shell(DISTLOCK_CLI_PATH) + " run --store " + quoted_for_shell(url) +
                            " --ttl 5s --lock-delay 2s delayed -- sh -c 'echo holding; exec sleep 61.75' 2>&1"}};
    REQUIRE(holder.read_line(20s) == std::optional<std::string>{"holding"});
    holder.kill(SIGKILL); // distlock dies without releasing: its session ends within its timeout
    (void)holder.wait(10s);
    // Until the session ends the lock is held; then the lock-delay refuses everyone.
    std::optional<outcome> delayed;
    const auto give_up = std::chrono::steady_clock::now() + 20s;
    while (std::chrono::steady_clock::now() < give_up) {
        auto o = tool({"try", "--store", url, "delayed"});
        if (o.said.find("lock-delay") != std::string::npos) {
            delayed = std::move(o);
            break;
        }
        REQUIRE(o.exit == std::optional<int>{3}); // held by the dead holder's session until then
        std::this_thread::sleep_for(200ms);
    }
    REQUIRE(delayed);
    INFO(delayed->said);
    CHECK(delayed->exit == std::optional<int>{3});
    const auto json = tool({"try", "--json", "--store", url, "delayed"});
    INFO(json.said);
    CHECK((json.said.find("\"lock_delay_ms\":") != std::string::npos || json.exit == std::optional<int>{0}));
    // After the delay the lock is free again.
    std::optional<int> last;
    const auto until = std::chrono::steady_clock::now() + 20s;
    while (std::chrono::steady_clock::now() < until) {
        last = tool({"try", "--store", url, "delayed"}).exit;
        if (last == std::optional<int>{0})
            break;
        std::this_thread::sleep_for(200ms);
    }
    CHECK(last == std::optional<int>{0});
    // The sleep the dead holder started goes too.
    (void)std::system("pkill -KILL -f 'sleep 61.75' 2>/dev/null");
}

TEST_CASE("cli: elect and run --lock-delay on PostgreSQL advisory locks: the second campaigner leads once the "
          "first's command exits; a holder killed without releasing keeps the next run out for the delay",
          "[cli][postgres]")
{
    const auto url = test::shared_postgres().url() + "&table=" + test::fresh_table("cli_adv") + "&mode=advisory";
    // The first leader's command runs until the test writes a line to it (its stdin is
    // the child's pipe, through distlock).
    test::child first{{"/bin/sh", "-c",
                       quoted_for_shell(DISTLOCK_CLI_PATH) + " elect --store " + quoted_for_shell(url) +
                           " --value one leader -- sh -c 'echo \"one $DISTLOCK_EPOCH\"; read stop' 2>&1"}};
    const auto one = first.read_line(20s);
    REQUIRE(one);
    REQUIRE(one->starts_with("one "));
    const auto first_epoch = std::stoull(one->substr(4));
    CHECK(first_epoch >= 1);
    test::child second{{"/bin/sh", "-c",
                        quoted_for_shell(DISTLOCK_CLI_PATH) + " elect --store " + quoted_for_shell(url) +
                            " --value two leader -- sh -c 'echo \"two $DISTLOCK_EPOCH\"' 2>&1"}};
    // While the first leads, the second campaigns and prints nothing.
    CHECK_FALSE(second.read_line(1500ms));
    CHECK(second.running());
    first.write_line("stop");
    CHECK(first.wait(20s) == std::optional<int>{0});
    const auto two = second.read_line(20s);
    REQUIRE(two);
    REQUIRE(two->starts_with("two "));
    CHECK(std::stoull(two->substr(4)) > first_epoch);
    CHECK(second.wait(20s) == std::optional<int>{0});

    // A normal exit releases: no delay.
    const auto calm = tool({"run", "--store", url, "--lock-delay", "1s", "calm", "--", "true"});
    INFO(calm.said);
    CHECK(calm.exit == std::optional<int>{0});
    CHECK(tool({"try", "--store", url, "calm"}).exit == std::optional<int>{0});

    // exec: the SIGKILL below reaches distlock itself, not a shell above it. The
    // command prints its pid, so that the sleep left behind can be ended by it.
    test::child holder{{"/bin/sh", "-c",
                        "exec " + quoted_for_shell(DISTLOCK_CLI_PATH) + " run --store " + quoted_for_shell(url) +
                            " --lock-delay 1s delayed -- sh -c 'echo holding $$; exec sleep 60' 2>&1"}};
    const auto holding = holder.read_line(20s);
    REQUIRE(holding);
    REQUIRE(holding->starts_with("holding "));
    const auto sleeper = static_cast<pid_t>(std::stol(holding->substr(8)));
    holder.kill(SIGKILL); // distlock dies without releasing: its connection, and with it its session, ends
    (void)holder.wait(10s);
    // The next run finds the unreleased mark, starts the tombstone at that sighting and
    // waits it out: its command runs about the delay later, not at once.
    const auto started = std::chrono::steady_clock::now();
    const auto next = tool({"run", "--store", url, "--lock-delay", "1s", "delayed", "--", "echo", "ran"}, 30s);
    const auto took = std::chrono::steady_clock::now() - started;
    INFO(next.said);
    CHECK(next.exit == std::optional<int>{0});
    CHECK(next.said.find("ran") != std::string::npos);
    CHECK(took >= 950ms);
    CHECK(took < 8s);
    ::kill(sleeper, SIGKILL);
}

TEST_CASE("cli: run, status, try and release on a Redis Cluster and through a Sentinel", "[cli][redis][cluster]")
{
    test::redis_cluster cluster{3, 0};
    std::string nodes;
    for (std::size_t i = 0; i < cluster.size(); ++i)
        nodes += (i ? ",127.0.0.1:" : "127.0.0.1:") + std::to_string(cluster.port(i));
    run_status_try_release("redis+cluster://" + nodes, "nightly");

    test::redis_server primary;
    test::redis_sentinel sentinel{primary.port(), "cli-primary"};
    run_status_try_release(sentinel.url(), "nightly");
}

TEST_CASE("cli: a store that does not answer ends run after --store-timeout with exit 4 and the reason",
          "[cli][input]")
{
    // Nothing listens on port 1: every attempt is refused at connect. Without
    // --store-timeout, run would wait for the store as long as --wait allows.
    for (const std::string url : {"redis://127.0.0.1:1", "etcd://127.0.0.1:1", "zk://127.0.0.1:1"}) {
        INFO(url);
        const auto r = tool({"run", "--store", url, "--store-timeout", "1s", "job", "--", "true"}, 30s);
        INFO(r.said);
        CHECK(r.exit == std::optional<int>{4});
        CHECK(r.said.find("did not answer") != std::string::npos);
        CHECK(r.said.find("--store-timeout") != std::string::npos);
    }
    // A lock held elsewhere is --wait's business, not --store-timeout's.
    test::redis_server server;
    const auto url = server.url();
    test::child holder{{"/bin/sh", "-c",
                        quoted_for_shell(DISTLOCK_CLI_PATH) + " run --store " + url +
                            " --ttl 10s job -- sh -c 'echo holding; sleep 60'"}};
    REQUIRE(holder.read_line(10s) == std::optional<std::string>{"holding"});
    const auto waited = tool({"run", "--store", url, "--store-timeout", "500ms", "--wait", "2s", "job", "--", "true"});
    INFO(waited.said);
    CHECK(waited.exit == std::optional<int>{3});
    CHECK(waited.said.find("did not answer") == std::string::npos);
    holder.kill(SIGTERM);
    (void)holder.wait(20s);
}

TEST_CASE("cli: the store's own words reach the terminal (a PostgreSQL role that does not exist)", "[cli][postgres]")
{
    const auto url = "postgres://ghost@127.0.0.1:" + std::to_string(test::shared_postgres().port()) +
                     "/postgres?sslmode=disable";
    const auto r = tool({"try", "--store", url, "job"});
    INFO(r.said);
    CHECK(r.exit == std::optional<int>{4});
    CHECK(r.said.find("role \"ghost\" does not exist") != std::string::npos);
    const auto json = tool({"try", "--json", "--store", url, "job"});
    INFO(json.said);
    CHECK(json.said.find("\"diagnostics\":") != std::string::npos);
    CHECK(json.said.find("ghost") != std::string::npos);
}
