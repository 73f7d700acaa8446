// test/interop/etcd.cpp: distlock and etcd's own concurrency.Mutex and
// concurrency.Election on one member.
// The Mutex runs in `etcdctl lock NAME -- sh -c ...` (etcdctl 3.4): the command prints
// "held <ETCD_LOCK_KEY> <ETCD_LOCK_REV>" once the Mutex holds, waits for a file to
// appear (not for stdin: etcdctl hands its stdin to the command in non-blocking mode,
// so a read there ends at once) or for etcdctl to die, prints "released" and ends, and
// etcdctl unlocks. Until it holds, etcdctl prints nothing. Under the concurrency
// dialect, the store's resource R and the Mutex on <prefix>R are one lock; under the
// default dialect, the Mutex on <prefix><escaped R> is. `etcdctl elect` (Go's
// Election, keys of the Mutex's layout valued with the candidate's proposal) and a
// distlock election on R under the concurrency dialect elect one leader between them.
#include "etcd/etcd_support.hpp"
#include "process.hpp"

#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace {

using namespace std::chrono_literals;
using namespace test::etcd_tests;

using etcd::key_dialect;

/// `etcdctl lock` holding the Mutex on `name` while its command runs; its session's
/// lease has a TTL of `ttl_seconds`.
class etcdctl_lock {
public:
    etcdctl_lock(const std::string& name, int ttl_seconds = 10)
        : release_file_{std::filesystem::temp_directory_path() /
                        ("distlock-etcdctl-" + std::to_string(::getpid()) + "-" + test::unique_suffix())},
          proc_{std::make_unique<test::child>(std::vector<std::string>{
              "etcdctl", "--endpoints=http://127.0.0.1:" + std::to_string(test::shared_etcd().port()), "lock",
              "--ttl=" + std::to_string(ttl_seconds), name, "--", "sh", "-c",
              "echo \"held $ETCD_LOCK_KEY $ETCD_LOCK_REV\"; "
              "while [ ! -e \"$1\" ] && kill -0 $PPID 2>/dev/null; do sleep 0.02; done; echo released",
              "sh", release_file_.string()})}
    {}
    ~etcdctl_lock()
    {
        proc_.reset();
        std::error_code ignored;
        std::filesystem::remove(release_file_, ignored);
    }
    etcdctl_lock(const etcdctl_lock&) = delete;
    etcdctl_lock& operator=(const etcdctl_lock&) = delete;

    /// Waits for "held KEY REV" (the key and the revision etcdctl exports); false when
    /// it did not come within `limit`.
    asio::awaitable<bool> held(std::chrono::milliseconds limit)
    {
        const auto line = co_await proc_->next_line(limit);
        if (!line)
            co_return false;
        INFO(*line);
        const auto space = line->find(' ', 5);
        REQUIRE(line->starts_with("held "));
        REQUIRE(space != std::string::npos);
        key = line->substr(5, space - 5);
        header_revision = std::stoll(line->substr(space + 1));
        co_return true;
    }

    /// The command ends, and etcdctl unlocks on its way out.
    asio::awaitable<void> release()
    {
        std::ofstream{release_file_} << "go\n";
        const auto line = co_await proc_->next_line(10s);
        REQUIRE(line);
        CHECK(*line == "released");
        CHECK(proc_->wait(10s) == 0);
    }

    void kill() { proc_->kill(SIGKILL); }

    std::string key;                  ///< ETCD_LOCK_KEY: <name>/<lease ID in hex>
    std::int64_t header_revision = 0; ///< ETCD_LOCK_REV: the Lock() answer's header revision, no fence

private:
    std::filesystem::path release_file_;
    std::unique_ptr<test::child> proc_;
};

/// `etcdctl elect NAME PROPOSAL` (Go's concurrency.Election, its session's TTL 60 s):
/// once it leads it prints its key and value, then waits; SIGTERM makes it resign.
/// `etcdctl elect -l NAME` observes: it prints the leader's key and value at each change.
class etcdctl_elect {
public:
    explicit etcdctl_elect(std::vector<std::string> args)
    {
        std::vector<std::string> argv{"etcdctl",
                                      "--endpoints=http://127.0.0.1:" + std::to_string(test::shared_etcd().port()),
                                      "elect"};
        argv.insert(argv.end(), args.begin(), args.end());
        proc_ = std::make_unique<test::child>(std::move(argv));
    }

    /// The next leader it prints (key, value); nullopt when none came within `limit`.
    asio::awaitable<std::optional<std::pair<std::string, std::string>>> next(std::chrono::milliseconds limit)
    {
        auto key = co_await proc_->next_line(limit);
        if (!key)
            co_return std::nullopt;
        auto value = co_await proc_->next_line(5s);
        REQUIRE(value);
        co_return std::pair{std::move(*key), std::move(*value)};
    }

    void signal(int sig) { proc_->kill(sig); }
    std::optional<int> wait(std::chrono::milliseconds limit) const { return proc_->wait(limit); }

private:
    std::unique_ptr<test::child> proc_;
};

/// The create revision of `key` (its Mutex's fence), or 0 when it is gone.
std::int64_t created_at(const std::string& key)
{
    const auto r = etcd::detail::read_range(test::shared_etcd().call("kv/range", etcd::detail::range_request(key)));
    REQUIRE(r);
    return r->kvs.empty() ? 0 : r->kvs.front().create_revision;
}

/// The keys of the resource's queue under the concurrency dialect.
std::vector<etcd::detail::kv> queued_keys(const std::string& prefix);

etcd::config in_concurrency_dialect(const std::string& prefix)
{
    auto c = test::shared_etcd().config(prefix);
    c.dialect = key_dialect::concurrency;
    return c;
}

// An id that the default dialect would escape ('@' is %40): here it is the Mutex's
// name as it is.
const std::string resource = "job@42";

std::vector<etcd::detail::kv> queued_keys(const std::string& prefix)
{
    return queue_of(test::shared_etcd(), prefix, resource, 0, key_dialect::concurrency);
}

} // namespace

TEST_CASE("etcd interop: the Mutex holds: try_lock is refused, lock() gets it at its release", "[interop][etcd]")
{
    const auto prefix = test::fresh_prefix("interop");
    asio::io_context io;
    etcd::store store{io, in_concurrency_dialect(prefix)};
    etcdctl_lock go{prefix + resource};
    test::run(io, [&]() -> asio::awaitable<void> {
        { const bool held_ = co_await go.held(15s); REQUIRE(held_); }
        CHECK(go.key.starts_with(prefix + resource + "/"));
        dl::basic_distributed_mutex<etcd::store> m{store, resource};
        auto refused = co_await m.try_lock();
        REQUIRE_FALSE(refused);
        CHECK(refused.error() == dl::condition::contended);
        patient_mutex waiting_m{store, resource, {}, dl::retry::exponential_backoff{.deadline = 20s}};
        auto waiting = test::start(co_await asio::this_coro::executor, waiting_m.lock());
        (void)co_await test::eventually(
            "two keys", [&] { return queued_keys(prefix).size() == 2; },
            test::long_enough());
        CHECK_FALSE(waiting.ready());
        const auto go_fence = created_at(go.key);
        co_await go.release();
        // The watch on the Mutex's key wakes the waiter: no retry step (20 s) passes.
        { const bool came_ = co_await waiting.wait(5000ms); REQUIRE(came_); }
        auto& l = waiting.get();
        REQUIRE(l);
        CHECK(l->fence() > static_cast<dl::fence_token>(go_fence));
        { const auto ok_ = co_await l->unlock(); CHECK(ok_); }
        co_await store.close();
    });
}

TEST_CASE("etcd interop: distlock holds: the Mutex waits, and holds after unlock()", "[interop][etcd]")
{
    const auto prefix = test::fresh_prefix("interop");
    asio::io_context io;
    etcd::store store{io, in_concurrency_dialect(prefix)};
    test::run(io, [&]() -> asio::awaitable<void> {
        dl::basic_distributed_mutex<etcd::store> m{store, resource};
        auto l = co_await m.lock();
        REQUIRE(l);
        etcdctl_lock go{prefix + resource};
        (void)co_await test::eventually(
            "the Mutex's key queued",
            [&] { return queued_keys(prefix).size() == 2; },
            test::long_enough());
        { const bool held_ = co_await go.held(1000ms); CHECK_FALSE(held_); }
        { const auto ok_ = co_await l->unlock(); CHECK(ok_); }
        { const bool held_ = co_await go.held(5s); REQUIRE(held_); }
        // It waited: the revision etcdctl exports is its Lock()'s answer's, past its
        // key's create revision, which is the fence.
        const auto go_fence = created_at(go.key);
        CHECK(static_cast<dl::fence_token>(go_fence) > l->fence());
        CHECK(go.header_revision > go_fence);
        co_await go.release();
        co_await store.close();
    });
}

TEST_CASE("etcd interop: a Mutex holder SIGKILLed: distlock gets the lock when its session's lease expires",
          "[interop][etcd]")
{
    const auto prefix = test::fresh_prefix("interop");
    asio::io_context io;
    etcd::store store{io, in_concurrency_dialect(prefix)};
    etcdctl_lock go{prefix + resource, 2}; // etcd's floor
    test::run(io, [&]() -> asio::awaitable<void> {
        { const bool held_ = co_await go.held(15s); REQUIRE(held_); }
        const auto go_fence = created_at(go.key);
        patient_mutex m{store, resource, {}, dl::retry::exponential_backoff{.deadline = 20s}};
        auto waiting = test::start(co_await asio::this_coro::executor, m.lock());
        (void)co_await test::eventually(
            "two keys", [&] { return queued_keys(prefix).size() == 2; },
            test::long_enough());
        go.kill();
        const auto killed = std::chrono::steady_clock::now();
        { const bool came_ = co_await waiting.wait(10000ms); REQUIRE(came_); }
        auto& l = waiting.get();
        REQUIRE(l);
        CHECK(std::chrono::steady_clock::now() - killed < 8s);
        CHECK(created_at(go.key) == 0);
        CHECK(l->fence() > static_cast<dl::fence_token>(go_fence));
        { const auto ok_ = co_await l->unlock(); CHECK(ok_); }
        co_await store.close();
    });
}

TEST_CASE("etcd interop: fences grow across distlock grants with a Mutex holder between; the Mutex's fence is its "
          "key's create revision",
          "[interop][etcd]")
{
    const auto prefix = test::fresh_prefix("interop");
    asio::io_context io;
    etcd::store store{io, in_concurrency_dialect(prefix)};
    test::run(io, [&]() -> asio::awaitable<void> {
        dl::basic_distributed_mutex<etcd::store> m{store, resource};
        auto first = co_await m.lock();
        REQUIRE(first);
        { const auto ok_ = co_await first->unlock(); CHECK(ok_); }
        etcdctl_lock go{prefix + resource};
        { const bool held_ = co_await go.held(15s); REQUIRE(held_); }
        const auto go_fence = created_at(go.key);
        CHECK(go.header_revision == go_fence); // taken at once: the same revision
        co_await go.release();
        auto second = co_await m.lock();
        REQUIRE(second);
        CHECK(first->fence() < static_cast<dl::fence_token>(go_fence));
        CHECK(static_cast<dl::fence_token>(go_fence) < second->fence());
        { const auto ok_ = co_await second->unlock(); CHECK(ok_); }
        co_await store.close();
    });
}

TEST_CASE("etcd interop: a queue of distlock and Mutex waiters is served in create-revision order",
          "[interop][etcd]")
{
    const auto prefix = test::fresh_prefix("interop");
    asio::io_context io;
    etcd::store a{io, in_concurrency_dialect(prefix)}, b{io, in_concurrency_dialect(prefix)};
    const auto queued = [&] { return queued_keys(prefix).size(); };
    test::run(io, [&]() -> asio::awaitable<void> {
        dl::basic_distributed_mutex<etcd::store> ma{a, resource};
        patient_mutex mb{b, resource, {}, dl::retry::exponential_backoff{.deadline = 20s}};
        auto holder = co_await ma.lock();
        REQUIRE(holder);
        etcdctl_lock w1{prefix + resource};
        (void)co_await test::eventually("W1 queued", [&] { return queued() == 2; }, test::long_enough());
        auto w2 = test::start(co_await asio::this_coro::executor, mb.lock());
        (void)co_await test::eventually("W2 queued", [&] { return queued() == 3; }, test::long_enough());
        { const auto ok_ = co_await holder->unlock(); CHECK(ok_); }
        { const bool held_ = co_await w1.held(5s); REQUIRE(held_); }
        const auto w1_fence = created_at(w1.key);
        co_await test::settle(200ms);
        CHECK_FALSE(w2.ready()); // behind W1, whatever its own retry would say
        co_await w1.release();
        { const bool came_ = co_await w2.wait(5000ms); REQUIRE(came_); }
        auto& l = w2.get();
        REQUIRE(l);
        CHECK(holder->fence() < static_cast<dl::fence_token>(w1_fence));
        CHECK(static_cast<dl::fence_token>(w1_fence) < l->fence());
        { const auto ok_ = co_await l->unlock(); CHECK(ok_); }
        co_await a.close();
        co_await b.close();
    });
}

TEST_CASE("etcd interop: a distlock reader behind a waiting Mutex waits for it; the Mutex waits for the readers "
          "before it",
          "[interop][etcd]")
{
    const auto prefix = test::fresh_prefix("interop");
    asio::io_context io;
    etcd::store a{io, in_concurrency_dialect(prefix)}, b{io, in_concurrency_dialect(prefix)};
    const auto queued = [&] { return queued_keys(prefix).size(); };
    test::run(io, [&]() -> asio::awaitable<void> {
        dl::basic_distributed_shared_mutex<etcd::store> ra{a, resource};
        dl::basic_distributed_shared_mutex<etcd::store, dl::retry::exponential_backoff> rb{
            b, resource, {}, dl::retry::exponential_backoff{.deadline = 20s}};
        auto first = co_await ra.lock_shared();
        REQUIRE(first);
        etcdctl_lock go{prefix + resource};
        (void)co_await test::eventually("the Mutex queued", [&] { return queued() == 2; }, test::long_enough());
        auto refused = co_await ra.try_lock_shared();
        REQUIRE_FALSE(refused);
        CHECK(refused.error() == dl::condition::contended);
        auto second = test::start(co_await asio::this_coro::executor, rb.lock_shared());
        (void)co_await test::eventually("the reader queued", [&] { return queued() == 3; }, test::long_enough());
        { const bool held_ = co_await go.held(500ms); CHECK_FALSE(held_); }
        { const auto ok_ = co_await first->unlock(); CHECK(ok_); }
        { const bool held_ = co_await go.held(5s); REQUIRE(held_); }
        const auto go_fence = created_at(go.key);
        co_await test::settle(200ms);
        CHECK_FALSE(second.ready());
        co_await go.release();
        { const bool came_ = co_await second.wait(5000ms); REQUIRE(came_); }
        REQUIRE(second.get());
        CHECK(first->fence() < static_cast<dl::fence_token>(go_fence));
        CHECK(static_cast<dl::fence_token>(go_fence) < second.get()->fence());
        { const auto ok_ = co_await second.get()->unlock(); CHECK(ok_); }
        co_await a.close();
        co_await b.close();
    });
}

TEST_CASE("etcd interop: under the default dialect the Mutex on <prefix><escaped id> is the same lock",
          "[interop][etcd]")
{
    const auto prefix = test::fresh_prefix("interop");
    asio::io_context io;
    etcd::store store{io, test::shared_etcd().config(prefix)};
    etcdctl_lock go{prefix + "job%4042"};
    test::run(io, [&]() -> asio::awaitable<void> {
        { const bool held_ = co_await go.held(15s); REQUIRE(held_); }
        dl::basic_distributed_mutex<etcd::store> m{store, resource};
        auto refused = co_await m.try_lock();
        REQUIRE_FALSE(refused);
        CHECK(refused.error() == dl::condition::contended);
        co_await go.release();
        auto l = co_await m.lock();
        REQUIRE(l);
        { const auto ok_ = co_await l->unlock(); CHECK(ok_); }
        co_await store.close();
    });
}

TEST_CASE("etcd interop: `etcdctl elect` leads: a distlock campaign waits and observes its value, and leads once "
          "etcdctl's session ends",
          "[interop][etcd]")
{
    const auto prefix = test::fresh_prefix("interop");
    asio::io_context io;
    etcd::store store{io, in_concurrency_dialect(prefix)}, watcher{io, in_concurrency_dialect(prefix)};
    etcdctl_elect go{{prefix + resource, "go-1"}};
    test::run(io, [&]() -> asio::awaitable<void> {
        const auto led = co_await go.next(15s);
        REQUIRE(led);
        CHECK(led->first.starts_with(prefix + resource + "/"));
        CHECK(led->second == "go-1");
        const auto go_epoch = static_cast<dl::fence_token>(created_at(led->first));
        dl::basic_leader_election<etcd::store> candidate{store, resource}, observer{watcher, resource};
        {
            auto now = co_await observer.current();
            REQUIRE(now);
            CHECK(now->epoch == go_epoch);
            CHECK(now->value == "go-1");
            auto seen = co_await observer.observe_until(dl::clock::now() + 5s);
            REQUIRE(seen);
            CHECK(seen->value == "go-1");
        }
        auto campaign = test::start(co_await asio::this_coro::executor, candidate.campaign("dl-1"));
        (void)co_await test::eventually("two keys", [&] { return queued_keys(prefix).size() == 2; },
                                        test::long_enough());
        CHECK_FALSE(campaign.ready());
        // SIGKILLed, etcdctl resigns nothing: its session's lease ends (revoked here,
        // as its TTL of 60 s would, later).
        const auto go_lease = queued_keys(prefix).front().lease;
        go.signal(SIGKILL);
        (void)test::shared_etcd().call("lease/revoke", {{"ID", std::to_string(go_lease)}});
        { const bool came_ = co_await campaign.wait(5000ms); REQUIRE(came_); }
        auto& t = campaign.get();
        REQUIRE(t);
        CHECK(t->epoch() > go_epoch);
        auto seen = co_await observer.observe_until(dl::clock::now() + 5s);
        REQUIRE(seen);
        CHECK(seen->epoch == t->epoch());
        CHECK(seen->value == "dl-1");
        { const auto ok_ = co_await t->resign(); CHECK(ok_); }
        co_await store.close();
        co_await watcher.close();
    });
}

TEST_CASE("etcd interop: distlock leads: `etcdctl elect -l` prints its values; a waiting `etcdctl elect` leads "
          "after distlock resigns",
          "[interop][etcd]")
{
    const auto prefix = test::fresh_prefix("interop");
    asio::io_context io;
    etcd::store store{io, in_concurrency_dialect(prefix)};
    test::run(io, [&]() -> asio::awaitable<void> {
        dl::basic_leader_election<etcd::store> election{store, resource};
        auto t = co_await election.campaign("dl-V");
        REQUIRE(t);
        etcdctl_elect listener{{"-l", prefix + resource}};
        {
            const auto seen = co_await listener.next(15s);
            REQUIRE(seen);
            CHECK(seen->first == prefix + resource + "/" + t->owner().to_hex());
            CHECK(seen->second == "dl-V");
        }
        { const auto ok_ = co_await election.proclaim(*t, "dl-W"); REQUIRE(ok_); }
        {
            const auto seen = co_await listener.next(5s);
            REQUIRE(seen);
            CHECK(seen->second == "dl-W");
        }
        etcdctl_elect go{{prefix + resource, "go-2"}};
        (void)co_await test::eventually("two keys", [&] { return queued_keys(prefix).size() == 2; },
                                        test::long_enough());
        { const auto early = co_await go.next(500ms); CHECK_FALSE(early); }
        { const auto ok_ = co_await t->resign(); CHECK(ok_); }
        {
            const auto led = co_await go.next(5s);
            REQUIRE(led);
            CHECK(led->second == "go-2");
            CHECK(static_cast<dl::fence_token>(created_at(led->first)) > t->epoch());
        }
        {
            const auto seen = co_await listener.next(5s);
            REQUIRE(seen);
            CHECK(seen->second == "go-2");
        }
        auto now = co_await election.current();
        REQUIRE(now);
        CHECK(now->value == "go-2");
        go.signal(SIGTERM); // resigns
        CHECK(go.wait(5s) == 0);
        CHECK(queued_keys(prefix).empty());
        listener.signal(SIGTERM);
        (void)listener.wait(5s);
        co_await store.close();
    });
}
