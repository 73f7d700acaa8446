// Redis at scale: a Redis Cluster (slots, redirects, migration, failover, sharded
// pub/sub) and a primary with a replica behind Sentinels, all on real servers. The
// conformance suite runs on the cluster too (test/conformance/redis.cpp).
#include "redis_cluster.hpp"
#include "eventually.hpp"
#include "pending.hpp"
#include "redis_support.hpp"

#include <distlock/basic_leader_election.hpp>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>

#include <csignal>
#include <map>
#include <optional>
#include <set>

using namespace test;
using one_shot = dl::basic_distributed_mutex<dl::redis::store, dl::retry::none>;
using patient_mutex = dl::basic_distributed_mutex<dl::redis::store, dl::retry::fixed>;
using observed_fair = dl::basic_distributed_mutex<dl::redis::store, dl::acquire::fair, dl::retry::exponential_backoff,
                                                  dl::observe::callback>;
namespace detail = dl::redis::detail;

namespace {

// A waiter that only a notification wakes in time: its own retry comes after 20 s.
dl::retry::fixed patient() { return {.delay = 20s, .deadline = 60s}; }

// Whether the server on `port` itself has `key`, asked with ASKING first so that a
// node importing the slot answers too (redirects come back as errors, not "1").
bool node_has(std::uint16_t port, const std::string& key)
{
    return shell("printf 'ASKING\\nEXISTS %s\\n' '" + key + "' | redis-cli -h 127.0.0.1 -p " + std::to_string(port)) ==
           "OK\n1\n";
}

} // namespace

TEST_CASE("redis cluster: hash slots as the spec defines them, CRC16 of the hash tag", "[redis][cluster][unit]")
{
    // Values from the Redis Cluster specification.
    CHECK(detail::crc16("123456789") == 0x31C3);
    CHECK(detail::hash_slot("foo") == 12182);
    CHECK(detail::hash_slot("{user1000}.following") == detail::hash_slot("{user1000}.followers"));
    CHECK(detail::hash_slot("foo{}{bar}") == detail::hash_slot("foo{}{bar}")); // empty tag: the whole key
    CHECK(detail::hash_slot("foo{}{bar}") != detail::hash_slot("bar"));
    CHECK(detail::hash_slot("foo{{bar}}zap") == detail::hash_slot("{bar"));
    CHECK(detail::hash_slot("foo{bar}{zap}") == detail::hash_slot("bar"));
}

TEST_CASE("redis cluster: redirects, slot maps and Sentinel answers are parsed or refused", "[redis][cluster][unit]")
{
    const dl::redis::node_address here{"10.0.0.1", 7000};
    auto moved = detail::parse_redirect("MOVED 3999 127.0.0.1:6381", here);
    REQUIRE(moved);
    CHECK(moved->kind == detail::redirect::kind::moved);
    CHECK(moved->slot == 3999);
    CHECK(moved->to == dl::redis::node_address{"127.0.0.1", 6381});
    auto ask = detail::parse_redirect("ASK 1 [::1]:7001", here);
    REQUIRE(ask);
    CHECK(ask->kind == detail::redirect::kind::ask);
    CHECK(ask->to == dl::redis::node_address{"::1", 7001});
    auto unnamed = detail::parse_redirect("MOVED 12 :7002", here); // the answering node's host
    REQUIRE(unnamed);
    CHECK(unnamed->to == dl::redis::node_address{"10.0.0.1", 7002});
    for (const char* bad : {"MOVED", "MOVED 16384 h:1", "MOVED x h:1", "MOVED 1 h", "MOVED 1 h:0", "MOVED 1 h:70000",
                            "ERR MOVED 1 h:1", "ASK -1 h:1", "MOVED 1 :", ""})
        CHECK_FALSE(detail::parse_redirect(bad, here));
    CHECK(detail::is_transient_refusal("TRYAGAIN Multiple keys request during rehashing of slot"));
    CHECK(detail::is_transient_refusal("CLUSTERDOWN The cluster is down"));
    CHECK(detail::is_transient_refusal("READONLY You can't write against a read only replica."));
    CHECK_FALSE(detail::is_transient_refusal("ERR unknown command"));

    namespace resp = dl::redis::resp;
    const auto parse = [](std::string_view bytes) {
        const auto r = resp::parse(bytes);
        REQUIRE(r.status == resp::status::complete);
        return r.value;
    };
    // Two ranges on one primary ("" host: the node asked), one on another.
    const auto slots = parse("*2\r\n"
                             "*3\r\n:0\r\n:99\r\n*3\r\n$0\r\n\r\n:7000\r\n$2\r\nid\r\n"
                             "*4\r\n:100\r\n:16383\r\n*3\r\n$9\r\n127.0.0.2\r\n:7001\r\n$3\r\nid2\r\n"
                             "*2\r\n$9\r\n127.0.0.3\r\n:7002\r\n");
    auto map = detail::parse_cluster_slots(slots, here);
    REQUIRE(map);
    REQUIRE(map->primaries.size() == 2);
    CHECK(*map->node_for(0) == dl::redis::node_address{"10.0.0.1", 7000});
    CHECK(*map->node_for(99) == dl::redis::node_address{"10.0.0.1", 7000});
    CHECK(*map->node_for(100) == dl::redis::node_address{"127.0.0.2", 7001});
    CHECK(map->identity() == "id,id2");
    map->move(5, {"127.0.0.9", 9});
    CHECK(*map->node_for(5) == dl::redis::node_address{"127.0.0.9", 9});
    // A map naming as many nodes as there are slots, one idle: a redirect to one
    // more node makes the map forget the idle ones, and every slot keeps its owner.
    {
        detail::slot_map full;
        for (std::uint32_t s = 0; s < detail::slot_count; ++s) {
            full.primaries.push_back({"n", static_cast<std::uint16_t>(s + 1)});
            full.primary_ids.push_back(std::to_string(s));
            full.owner[s] = static_cast<std::int16_t>(s == 7 ? 6 : s); // node 7 serves nothing
        }
        full.move(9, {"new", 1});
        CHECK(full.primaries.size() == detail::slot_count - 1);
        CHECK(full.primary_ids.size() == full.primaries.size());
        CHECK(*full.node_for(9) == dl::redis::node_address{"new", 1});
        CHECK(*full.node_for(7) == dl::redis::node_address{"n", 7});
        CHECK(*full.node_for(8) == dl::redis::node_address{"n", 9});
        CHECK(*full.node_for(16383) == dl::redis::node_address{"n", 16384});
        CHECK(full.identity().find(",7,") == std::string::npos); // node 7's id went with it
    }
    for (const char* bad : {"*0\r\n", "+OK\r\n", "*1\r\n*3\r\n:5\r\n:4\r\n*2\r\n$1\r\na\r\n:1\r\n\r\n",
                            "*1\r\n*3\r\n:0\r\n:16384\r\n*2\r\n$1\r\na\r\n:1\r\n",
                            "*1\r\n*3\r\n:0\r\n:1\r\n*2\r\n$1\r\na\r\n:0\r\n", "*1\r\n*2\r\n:0\r\n:1\r\n"})
        CHECK_FALSE(detail::parse_cluster_slots(parse(bad), here));

    auto primary = detail::parse_master_address(parse("*2\r\n$9\r\n127.0.0.1\r\n$4\r\n6380\r\n"));
    REQUIRE(primary);
    CHECK(*primary == dl::redis::node_address{"127.0.0.1", 6380});
    CHECK(detail::parse_master_address(parse("*-1\r\n")).error() == dl::errc::store_unavailable);
    CHECK(detail::parse_master_address(parse("*2\r\n$1\r\na\r\n$1\r\nx\r\n")).error() == dl::errc::protocol_error);
}

TEST_CASE("redis cluster: URLs and settings for clusters and Sentinels, checked before any I/O",
          "[redis][cluster][unit]")
{
    auto c = dl::redis::config::from_url("redis+cluster://u:p@127.0.0.1:7000,[::1]:7001");
    REQUIRE(c);
    CHECK(c->topology() == dl::redis::topology::cluster);
    REQUIRE(c->cluster_nodes.size() == 2);
    CHECK(c->cluster_nodes[1] == dl::redis::node_address{"::1", 7001});
    CHECK(c->username == "u");
    CHECK(c->password == "p");
    CHECK_FALSE(c->validate());
    auto s = dl::redis::config::from_url("rediss+sentinel://127.0.0.1:26379,127.0.0.1:26380/mymaster/2");
    REQUIRE(s);
    CHECK(s->topology() == dl::redis::topology::sentinel);
    CHECK(s->sentinels.size() == 2);
    CHECK(s->sentinel_master == "mymaster");
    CHECK(s->database == 2);
    CHECK(s->tls);
    for (const char* bad : {"redis+cluster://", "redis+cluster://h", "redis+cluster://h:1,", "redis+cluster://h:1/2",
                            "redis+sentinel://h:1", "redis+sentinel://h:1/", "redis+cluster://h:0"})
        CHECK_FALSE(dl::redis::config::from_url(bad));

    dl::redis::config both;
    both.cluster_nodes = {{"127.0.0.1", 7000}};
    both.sentinels = {{"127.0.0.1", 26379}};
    both.sentinel_master = "m";
    CHECK(both.validate() == dl::errc::invalid_argument);
    dl::redis::config db;
    db.cluster_nodes = {{"127.0.0.1", 7000}};
    db.database = 1; // a cluster has one database
    CHECK(db.validate() == dl::errc::invalid_argument);
    dl::redis::config nameless;
    nameless.sentinels = {{"127.0.0.1", 26379}};
    CHECK(nameless.validate() == dl::errc::invalid_argument);
    dl::redis::config portless;
    portless.cluster_nodes = {{"127.0.0.1", 0}};
    CHECK(portless.validate() == dl::errc::invalid_argument);

    // A store with such settings answers with the error and never connects.
    asio::io_context io;
    dl::redis::store store{io, db};
    run(io, [&]() -> asio::awaitable<void> {
        auto r = co_await store.put_if_absent("x", dl::owner_token::generate(), 10s);
        REQUIRE_FALSE(r);
        CHECK(r.error() == dl::errc::invalid_argument);
    });
}

TEST_CASE("redis cluster: hash tags of the ids' own, when asked for, put resources on one slot; keys stay apart",
          "[redis][cluster][unit]")
{
    asio::io_context io;
    auto cfg = dl::redis::config{};
    cfg.cluster_nodes = {{"127.0.0.1", 1}};
    dl::redis::store plain{io, cfg};
    cfg.hash_tags = true;
    dl::redis::store tagged{io, cfg};
    const std::vector<std::string> order{"{order:7}:payment", "{order:7}:stock"};
    CHECK_FALSE(plain.batchable(order)); // each id is its own tag by default
    CHECK(tagged.batchable(order));
    CHECK(detail::hash_slot(tagged.lock_key(order[0])) == detail::hash_slot(tagged.fence_key(order[1])));
    CHECK(tagged.lock_key(order[0]) != tagged.lock_key(order[1]));
    // Untagged ids keep their keys; a tagged key never equals an untagged one.
    CHECK(tagged.lock_key("plain") == plain.lock_key("plain"));
    CHECK(tagged.lock_key("{t}x") != plain.lock_key("{t}x"));
    CHECK(tagged.lock_key("{}x") == plain.lock_key("{}x")); // an empty tag is no tag
    std::set<std::string> keys;
    for (const auto* id : {"{a}b", "{a}b:lock", "{a}", "a{a}", "{@a}b", "{a:}b", "{a}:b"})
        CHECK(keys.insert(tagged.lock_key(id)).second);
    CHECK(tagged.batchable({"only-one"}));
}

TEST_CASE("redis cluster: each lock goes to its slot's primary and agrees with the server's slots",
          "[redis][cluster]")
{
    redis_cluster cluster;
    asio::io_context io;
    dl::redis::store store{io, cluster.config()};
    std::set<std::uint16_t> used;
    run(io, [&]() -> asio::awaitable<void> {
        std::vector<std::string> ids;
        for (int i = 0; i < 24; ++i)
            ids.push_back("spread:" + std::to_string(i));
        ids.push_back(std::string{"bin\0\xff{x}", 8});
        for (const auto& id : ids) {
            one_shot m{store, id, {.ttl = 10s}};
            auto l = co_await m.lock();
            REQUIRE(l);
            const auto key = store.lock_key(id);
            auto slot = co_await store.execute("CLUSTER", "KEYSLOT", key);
            REQUIRE(slot);
            CHECK(slot->integer == detail::hash_slot(key));
            const auto primary = cluster.primary_of(key);
            CHECK(store.node_of(id) == dl::redis::node_address{"127.0.0.1", primary});
            used.insert(primary);
            // The key is on that primary itself, not behind a redirect.
            auto owner = co_await store.execute("GET", key);
            REQUIRE(owner);
            CHECK(owner->text == test::lock_value(*l));
            const auto u = co_await l->unlock();
            CHECK(u);
        }
    });
    CHECK(used.size() == 3);
    // One cluster, one identity: the primaries' node ids.
    const auto id = store.known_server_identity();
    REQUIRE(id);
    CHECK(id->find(cluster.id_of(*used.begin())) != std::string::npos);
}

TEST_CASE("redis cluster: a fair release hands the lock to the head through its shard channel",
          "[redis][cluster][fair]")
{
    redis_cluster cluster;
    asio::io_context io;
    auto cfg = cluster.config();
    cfg.queue_ttl = 60s; // no renewal of the waiter's place within the case
    dl::redis::store a{io, cfg}, b{io, cfg};
    const dl::retry::exponential_backoff patient{.initial = 5s, .max = 5s, .deadline = 30s};
    run(io, [&]() -> asio::awaitable<void> {
        dl::basic_distributed_mutex<dl::redis::store, dl::acquire::fair, dl::retry::exponential_backoff> holder{
            a, "fair-slot", {.ttl = 30s}, patient};
        auto first = co_await holder.lock();
        REQUIRE(first);
        test::recorder rec;
        observed_fair waiter{b, "fair-slot", {.ttl = 30s}, patient, rec.observer()};
        auto waiting = start(co_await asio::this_coro::executor, waiter.lock());
        (void)co_await eventually("the waiter waiting in line", [&] { return !rec.of<dl::wait_event>().empty(); });
        { const auto ok_ = co_await first->unlock(); CHECK(ok_); }
        { const bool came_ = co_await waiting.wait(); REQUIRE(came_); }
        auto& second = waiting.get();
        REQUIRE(second);
        CHECK(second->fence() > first->fence());
        // Woken by the release's message (SPUBLISH on the slot's primary, which SHARDNUMSUB
        // found listening), not by its 5 s timer, and granted by it: no try after the two
        // that found the lock held.
        const auto wakes = rec.of<dl::wake_event>();
        REQUIRE(wakes.size() == 1);
        CHECK(wakes[0].notified);
        CHECK(rec.of<dl::attempt_event>().size() == 3);
        auto held_by = co_await b.execute("GET", b.lock_key("fair-slot"));
        REQUIRE(held_by);
        CHECK(held_by->text == test::lock_value(*second));

        // A third waiter in line, so that every key of the resource's queue exists.
        dl::redis::store c{io, cfg};
        test::recorder rec3;
        observed_fair third{c, "fair-slot", {.ttl = 30s}, patient, rec3.observer()};
        auto third_waiting = start(co_await asio::this_coro::executor, third.lock());
        (void)co_await eventually("the third waiting in line", [&] { return !rec3.of<dl::wait_event>().empty(); });

        // The slot migrating, all its keys already moved: the release (a PING ahead of
        // its script in the same write) reaches them through ASK, with ASKING right
        // before the script. The head listens on the source, so the lock is left free.
        const auto key = b.lock_key("fair-slot");
        const auto slot = detail::hash_slot(key);
        const auto from = cluster.primary_of(key);
        const auto to = cluster.other_primary(from);
        cluster.begin_move(slot, from, to);
        cluster.move_keys(slot, from, to);
        REQUIRE(node_has(to, key));
        { const auto ok_ = co_await second->unlock(); CHECK(ok_); }
        CHECK_FALSE(node_has(to, key));
        // Migration done: the head, unsubscribed by the source, asks where the slot went.
        cluster.finish_move(slot, to);
        { const bool came_ = co_await third_waiting.wait(); REQUIRE(came_); }
        auto& third_lease = third_waiting.get();
        REQUIRE(third_lease);
        CHECK(third_lease->fence() > second->fence());
        CHECK(node_has(to, key));
        { const auto ok_ = co_await third_lease->unlock(); CHECK(ok_); }
    });
}

TEST_CASE("redis cluster: a held lock's slot migrates to another primary; ASK and MOVED are followed, the lock is "
          "neither lost nor duplicated, and a waiter follows its channel",
          "[redis][cluster][migration]")
{
    redis_cluster cluster;
    asio::io_context io;
    dl::redis::store holder{io, cluster.config()}, contender{io, cluster.config()}, waiter_store{io, cluster.config()};
    const std::string id = "migrating:seat";
    const auto key = holder.lock_key(id);
    const auto slot = detail::hash_slot(key);
    const auto from = cluster.primary_of(key);
    const auto to = cluster.other_primary(from);
    std::optional<dl::result<dl::lease>> waited;
    run(io, [&]() -> asio::awaitable<void> {
        one_shot a{holder, id, {.ttl = 30s}};
        auto held = co_await a.lock();
        REQUIRE(held);
        one_shot b{contender, id, {.ttl = 30s}};
        // A waiter subscribed on the slot's shard before anything moves.
        asio::co_spawn(
            io,
            [](dl::redis::store& s, std::string id, std::optional<dl::result<dl::lease>>& out) -> asio::awaitable<void> {
                patient_mutex m{s, id, {.ttl = 30s}, patient()};
                out.emplace(co_await m.lock());
            }(waiter_store, id, waited),
            asio::detached);
        (void)co_await eventually("the waiter subscribed", [&] { return waiter_store.subscribed_channels() == 1; });

        // Migration under way, keys moved: the source answers ASK for them.
        cluster.begin_move(slot, from, to);
        cluster.move_keys(slot, from, to);
        REQUIRE(node_has(to, key));
        REQUIRE_FALSE(node_has(from, key));
        auto during = co_await b.lock();
        REQUIRE_FALSE(during);
        CHECK(during.error() == dl::errc::contended); // the holder's lock, found through ASK
        auto extended = co_await holder.extend(id, held->owner(), 30s);
        CHECK(extended);

        // Migration done: every node says the slot is the target's; MOVED from the source.
        cluster.finish_move(slot, to);
        auto after = co_await b.lock();
        REQUIRE_FALSE(after);
        CHECK(after.error() == dl::errc::contended);
        CHECK(contender.node_of(id) == dl::redis::node_address{"127.0.0.1", to});
        CHECK(!waited.has_value()); // still waiting, not granted while held

        // Released on the target: the waiter, subscribed again where the slot went, is
        // woken by the release long before its own 20 s retry.
        const auto fence = held->fence();
        const auto u = co_await held->unlock();
        REQUIRE(u);
        (void)co_await eventually("the waiter acquired", [&] { return waited.has_value(); });
        REQUIRE(*waited);
        CHECK((*waited)->fence() > fence); // the counter moved with the slot
        CHECK(node_has(to, key));
        const auto w = co_await (*waited)->unlock();
        CHECK(w);
    }, 60s);
}

TEST_CASE("redis cluster: a primary killed, its replica promoted: with WAIT the lock survives; without, it is "
          "granted twice, with a larger fence",
          "[redis][cluster][failover]")
{
    redis_cluster cluster;
    asio::io_context io;
    auto waiting = cluster.config();
    waiting.wait_replicas = 1;
    waiting.wait_timeout = 500ms;
    waiting.connect_timeout = 500ms;
    auto plain = cluster.config();
    plain.connect_timeout = 500ms;
    dl::redis::store safe{io, waiting}, unsafe{io, plain}, other{io, plain};

    // With WAIT: the grant is on the replica before lock() returns.
    const std::string kept = "failover:kept";
    const auto first = cluster.primary_of(safe.lock_key(kept));
    const auto promoted = cluster.replica_of(first);
    std::optional<dl::lease> survivor;
    run(io, [&]() -> asio::awaitable<void> {
        one_shot m{safe, kept, {.ttl = 60s}};
        dl::diagnostics diag;
        auto l = co_await m.lock(diag);
        INFO(diag.to_string());
        REQUIRE(l);
        survivor.emplace(std::move(*l));
    });
    cluster.at(first).kill();
    wait_until("the replica to take over", [&] { return cluster.primary_of(safe.lock_key(kept)) == promoted; },
               30s);
    run(io, [&]() -> asio::awaitable<void> {
        one_shot m{other, kept, {.ttl = 60s}};
        dl::diagnostics diag;
        auto r = co_await m.lock(diag);
        INFO(diag.to_string());
        REQUIRE_FALSE(r);
        CHECK(r.error() == dl::errc::contended); // the promoted replica has the lock
        CHECK(other.node_of(kept) == dl::redis::node_address{"127.0.0.1", promoted});
        const auto u = co_await survivor->unlock(); // the holder finds the new primary too
        CHECK(u);
    }, 60s);

    // Without WAIT: a grant the replica never received is gone after the failover.
    std::string lost;
    for (int i = 0; lost.empty(); ++i) {
        auto candidate = "failover:lost:" + std::to_string(i);
        const auto p = cluster.primary_of(unsafe.lock_key(candidate));
        if (p != promoted)
            lost = std::move(candidate);
    }
    const auto second = cluster.primary_of(unsafe.lock_key(lost));
    const auto behind = cluster.replica_of(second);
    ::kill(cluster.at(behind).pid(), SIGSTOP); // the replica hears nothing more
    (void)cli(second, "client kill type replica");
    dl::fence_token lost_fence = 0;
    run(io, [&]() -> asio::awaitable<void> {
        one_shot m{unsafe, lost, {.ttl = 60s}};
        auto l = co_await m.lock();
        REQUIRE(l); // granted by the primary alone
        lost_fence = l->fence();
        cluster.at(second).kill();
        ::kill(cluster.at(behind).pid(), SIGCONT);
    });
    wait_until("the stale replica to take over", [&] { return cluster.primary_of(unsafe.lock_key(lost)) == behind; },
               40s);
    run(io, [&]() -> asio::awaitable<void> {
        one_shot m{other, lost, {.ttl = 60s}};
        dl::diagnostics diag;
        auto again = co_await m.lock(diag);
        INFO(diag.to_string());
        // Granted a second time while the first holder still believes it holds it:
        // exclusion is lost (this is what WAIT, or Redlock over independent primaries,
        // is for). The fence is not: it comes from the new primary's clock, past the
        // lost one, so the protected data still rejects the first holder's writes.
        REQUIRE(again);
        CHECK(again->fence() > lost_fence);
        const auto u = co_await again->unlock();
        CHECK(u);
    }, 60s);
}

TEST_CASE("redis cluster: a multi-lock over several slots takes them one by one; one tag, one script",
          "[redis][cluster]")
{
    redis_cluster cluster;
    asio::io_context io;
    auto cfg = cluster.config();
    cfg.hash_tags = true;
    dl::redis::store store{io, cfg};
    run(io, [&]() -> asio::awaitable<void> {
        auto spread = dl::resources("multi:a", "multi:b", "multi:c", "multi:d");
        REQUIRE_FALSE(store.batchable(spread));
        auto all = co_await dl::lock_all(store, spread, {.ttl = 10s});
        REQUIRE(all);
        CHECK(all->size() == 4);
        const auto u = co_await all->unlock();
        CHECK(u);

        auto together = dl::resources("{cart:9}:items", "{cart:9}:total", "{cart:9}:coupon");
        REQUIRE(store.batchable(together));
        auto one = co_await dl::lock_all(store, together, {.ttl = 10s});
        REQUIRE(one);
        // One script: every lease has the same owner token (the batch path's), and the
        // set's one fencing token, which the next set exceeds.
        CHECK(one->leases()[0].owner() == one->leases()[2].owner());
        CHECK(one->leases()[0].fence() == one->leases()[2].fence());
        const auto first = one->fences();
        const auto v = co_await one->unlock();
        CHECK(v);
        auto two = co_await dl::lock_all(store, together, {.ttl = 10s});
        REQUIRE(two);
        const auto second = two->fences();
        REQUIRE(second.size() == first.size());
        for (std::size_t i = 0; i < second.size(); ++i)
            CHECK(second[i] > first[i]);
        const auto w = co_await two->unlock();
        CHECK(w);
    });
}

TEST_CASE("redis sentinel: the store finds the primary, follows a failover while a lock is held and while "
          "another waits",
          "[redis][sentinel][failover]")
{
    redis_sentinels set;
    asio::io_context io;
    auto cfg = set.config();
    cfg.wait_replicas = 1;
    cfg.wait_timeout = 500ms;
    cfg.connect_timeout = 500ms;
    // The waiter asks for no WAIT: after the failover the new primary has no replica
    // left, and every grant with WAIT would be refused as not replicated.
    auto waiter_cfg = set.config();
    waiter_cfg.connect_timeout = 500ms;
    dl::redis::store holder{io, cfg}, waiter_store{io, waiter_cfg};
    const auto old_primary = set.primary().port();
    std::optional<dl::result<dl::lease>> waited;
    std::optional<dl::lease> held;
    run(io, [&]() -> asio::awaitable<void> {
        dl::basic_distributed_mutex<dl::redis::store, dl::retry::none, dl::renew::watchdog> m{holder, "sentinel:job",
                                                                                             {.ttl = 10s}};
        dl::diagnostics diag;
        auto l = co_await m.lock(diag);
        INFO(diag.to_string());
        REQUIRE(l);
        CHECK(holder.node_of("sentinel:job") == dl::redis::node_address{"127.0.0.1", old_primary});
        held.emplace(std::move(*l));
        asio::co_spawn(
            io,
            [](dl::redis::store& s, std::optional<dl::result<dl::lease>>& out) -> asio::awaitable<void> {
                patient_mutex m{s, "sentinel:job", {.ttl = 10s}, patient()};
                out.emplace(co_await m.lock());
            }(waiter_store, waited),
            asio::detached);
        (void)co_await eventually("the waiter subscribed", [&] { return waiter_store.subscribed_channels() == 1; });
    });
    set.primary().kill();
    // The watchdog keeps extending through the failover (each extension finds the
    // new primary once the Sentinels name it); the lease, 10 s long, outlives the
    // failover (1 s to be seen down, then an election).
    const auto fence = held->fence();
    run(io, [&]() -> asio::awaitable<void> {
        (void)co_await eventually("the Sentinels to promote the replica",
                                  [&] { return set.current_primary() == set.replica().port(); },
                                  {.max = 1500, .each = 20ms});
        (void)co_await eventually(
            "the holder to reach the new primary",
            [&] { return holder.node_of("sentinel:job") == dl::redis::node_address{"127.0.0.1", set.replica().port()}; },
            {.max = 1500, .each = 20ms});
        CHECK(held->valid());
        CHECK(!waited.has_value());
        const auto u = co_await held->unlock();
        REQUIRE(u);
        (void)co_await eventually("the waiter acquired", [&] { return waited.has_value(); }, {.max = 1500, .each = 20ms});
        REQUIRE(*waited);
        CHECK((*waited)->fence() > fence);
        const auto w = co_await (*waited)->unlock();
        CHECK(w);
    }, 90s);
}

TEST_CASE("redis sentinel: an election through the Sentinels: the value on the primary they name, observers woken "
          "by the release",
          "[redis][sentinel][election]")
{
    redis_sentinels set;
    asio::io_context io;
    dl::redis::store leader_store{io, set.config()}, observer_store{io, set.config()};
    run(io, [&]() -> asio::awaitable<void> {
        using election = dl::basic_leader_election<dl::redis::store, dl::retry::exponential_backoff>;
        const dl::election_options opts{.term = {.ttl = 10s}, .poll = 5s};
        election a{leader_store, "sentinel:vote", opts};
        election watcher{observer_store, "sentinel:vote", opts};
        auto t = co_await a.campaign("primary-side");
        REQUIRE(t);
        { const auto said_ = co_await leader_store.execute("GET", leader_store.leader_key("sentinel:vote"));
          REQUIRE(said_);
          CHECK(said_.value().text == std::to_string(t->epoch()) + ":primary-side"); }
        auto seen = co_await watcher.observe();
        REQUIRE(seen);
        CHECK(seen->epoch == t->epoch());
        CHECK(seen->value == "primary-side");
        // The resignation's release notification wakes the observer long before its poll.
        const auto resigned = dl::clock::now();
        { const auto ok_ = co_await t->resign(); CHECK(ok_); }
        auto gone = co_await watcher.observe_until(dl::clock::now() + 20s);
        REQUIRE(gone);
        CHECK_FALSE(*gone);
        CHECK(dl::clock::now() - resigned < 4s);
    }, 60s);
}

namespace {

// How many SCAN calls the server on `port` answered since CONFIG RESETSTAT.
long long scan_calls_on(std::uint16_t port)
{
    const auto stats = cli(port, "info commandstats");
    const auto line = stats.find("cmdstat_scan:calls=");
    return line == std::string::npos ? 0 : std::stoll(stats.substr(line + 19));
}

} // namespace

TEST_CASE("redis cluster: list() scans every primary page after page; revoke() frees a lock on each primary",
          "[redis][cluster][list][revoke]")
{
    redis_cluster cluster{3, 0};
    asio::io_context io;
    dl::redis::store store{io, cluster.config()};
    // One resource per primary, to revoke there.
    std::map<std::uint16_t, std::string> on_primary;
    for (int i = 0; on_primary.size() < 3 && i < 1000; ++i) {
        const auto id = "spread:" + std::to_string(i);
        on_primary.emplace(cluster.primary_of(store.lock_key(id)), id);
    }
    REQUIRE(on_primary.size() == 3);
    std::map<std::string, dl::fence_token> granted;
    run(io, [&]() -> asio::awaitable<void> {
        const auto owner = dl::owner_token::generate();
        std::vector<std::string> ids;
        // Over three primaries, each holds more keys than one SCAN page looks at.
        for (int i = 0; i < 1000; ++i)
            ids.push_back("spread:" + std::to_string(i));
        ids.push_back(std::string{"bin\0\xff{x}", 8});
        for (const auto& id : ids) {
            auto fence = co_await store.put_if_absent(id, owner, 60s);
            REQUIRE(fence);
            granted[id] = fence.value();
        }
    });
    for (const auto& [port, id] : on_primary)
        REQUIRE(cli(port, "config resetstat").find("OK") != std::string::npos);
    run(io, [&]() -> asio::awaitable<void> {
        dl::diagnostics diag;
        auto listed = co_await store.list("", &diag);
        INFO(diag.to_string());
        REQUIRE(listed);
        REQUIRE(listed->size() == granted.size());
        auto expected = granted.begin();
        for (const auto& l : *listed) {
            CHECK(l.resource == expected->first);
            CHECK(l.lock.fence == expected->second);
            CHECK(l.waiters == std::optional<std::size_t>{0});
            ++expected;
        }
        for (const auto& [port, id] : on_primary) {
            INFO("primary " << port);
            CHECK(scan_calls_on(port) >= 2);
        }
        auto narrower = co_await store.list("spread:1");
        REQUIRE(narrower);
        CHECK(narrower->size() == 111); // 1, 10-19, 100-199

        for (const auto& [port, id] : on_primary) {
            auto revoked = co_await store.revoke(id, granted[id]);
            CHECK(revoked);
            auto again = co_await store.revoke(id, granted[id]);
            REQUIRE_FALSE(again);
            CHECK(again.error() == dl::errc::not_owner);
            CHECK_FALSE(node_has(port, store.lock_key(id)));
        }
        auto after = co_await store.list("");
        REQUIRE(after);
        CHECK(after->size() == granted.size() - 3);
    });
}

TEST_CASE("redis sentinel: list() and revoke() reach the primary the Sentinels name, before and after a failover",
          "[redis][sentinel][failover][list][revoke]")
{
    redis_sentinels set;
    asio::io_context io;
    // Grants and the revoke wait for the replica, so that the failover loses none.
    auto cfg = set.config();
    cfg.wait_replicas = 1;
    cfg.wait_timeout = 500ms;
    cfg.connect_timeout = 500ms;
    dl::redis::store holder{io, cfg};
    auto operator_cfg = set.config();
    operator_cfg.connect_timeout = 500ms;
    dl::redis::store operator_store{io, operator_cfg};
    std::map<std::string, dl::fence_token> granted;
    run(io, [&]() -> asio::awaitable<void> {
        const auto owner = dl::owner_token::generate();
        for (const auto* id : {"sentinel:a", "sentinel:b", "sentinel:c"}) {
            auto fence = co_await holder.put_if_absent(id, owner, 60s);
            REQUIRE(fence);
            granted[id] = fence.value();
        }
        auto listed = co_await operator_store.list("sentinel:");
        REQUIRE(listed);
        CHECK(listed->size() == 3);
        { const auto ok_ = co_await operator_store.revoke("sentinel:a", granted["sentinel:a"]); REQUIRE(ok_); }
        auto replicated = co_await operator_store.execute("WAIT", "1", "500");
        REQUIRE(replicated);
        CHECK(replicated->integer == 1);
    });
    set.primary().kill();
    run(io, [&]() -> asio::awaitable<void> {
        (void)co_await eventually("the Sentinels to promote the replica",
                                  [&] { return set.current_primary() == set.replica().port(); },
                                  {.max = 1500, .each = 20ms});
        // The first listings may still meet the old primary, gone: they fail, and the
        // next one asks the Sentinels again.
        std::optional<dl::result<std::vector<dl::lock_listing>>> listed;
        for (int i = 0; i < 300; ++i) {
            listed = co_await operator_store.list("sentinel:");
            if (*listed && operator_store.node_of("sentinel:b") == dl::redis::node_address{"127.0.0.1", set.replica().port()})
                break;
            co_await settle(50ms);
        }
        REQUIRE(*listed);
        CHECK(operator_store.node_of("sentinel:b") == dl::redis::node_address{"127.0.0.1", set.replica().port()});
        REQUIRE((*listed)->size() == 2);
        CHECK((**listed)[0].resource == "sentinel:b");
        CHECK((**listed)[0].lock.fence == granted["sentinel:b"]);
        CHECK((**listed)[1].resource == "sentinel:c");
        { const auto ok_ = co_await operator_store.revoke("sentinel:b", granted["sentinel:b"]); REQUIRE(ok_); }
        auto left = co_await operator_store.list("sentinel:");
        REQUIRE(left);
        REQUIRE(left->size() == 1);
        CHECK(left->front().resource == "sentinel:c");
    }, 90s);
}

TEST_CASE("redis sentinel: shared grants on the primary the Sentinels name; replicated, they outlive a failover",
          "[redis][sentinel][failover][shared]")
{
    using shared_mutex = dl::basic_distributed_shared_mutex<dl::redis::store, dl::retry::none>;
    using semaphore = dl::basic_distributed_semaphore<dl::redis::store, dl::retry::none>;
    redis_sentinels set;
    asio::io_context io;
    // The holder's grants wait for the replica (WAIT), so that the failover keeps them;
    // the other client asks for no WAIT: the new primary has no replica left.
    auto cfg = set.config();
    cfg.wait_replicas = 1;
    cfg.wait_timeout = 500ms;
    cfg.connect_timeout = 500ms;
    auto other_cfg = set.config();
    other_cfg.connect_timeout = 500ms;
    dl::redis::store holder{io, cfg}, other{io, other_cfg};
    std::optional<dl::lease> permit, reader;
    run(io, [&]() -> asio::awaitable<void> {
        semaphore s{holder, "sentinel:pool", {.permits = 1, .lease = {.ttl = 60s}}};
        shared_mutex m{holder, "sentinel:doc", {.ttl = 60s}};
        auto p = co_await s.acquire();
        REQUIRE(p);
        CHECK(p->slot() == 0u);
        permit.emplace(std::move(*p));
        auto r = co_await m.lock_shared();
        REQUIRE(r);
        reader.emplace(std::move(*r));
        CHECK(holder.node_of("sentinel:doc") == dl::redis::node_address{"127.0.0.1", set.primary().port()});
        semaphore s2{other, "sentinel:pool", {.permits = 1, .lease = {.ttl = 60s}}};
        auto full = co_await s2.try_acquire();
        REQUIRE_FALSE(full);
        CHECK(full.error() == dl::errc::contended);
    });
    set.primary().kill();
    run(io, [&]() -> asio::awaitable<void> {
        (void)co_await eventually("the Sentinels to promote the replica",
                                  [&] { return set.current_primary() == set.replica().port(); },
                                  {.max = 1500, .each = 20ms});
        // The first tries may still meet the old primary, gone: they fail, and the
        // next one asks the Sentinels again. On the new primary the permit and the
        // reader are still held.
        semaphore s2{other, "sentinel:pool", {.permits = 1, .lease = {.ttl = 60s}}};
        shared_mutex m2{other, "sentinel:doc", {.ttl = 60s}};
        std::optional<dl::result<dl::lease>> full;
        for (int i = 0; i < 300; ++i) {
            full = co_await s2.try_acquire();
            if (!*full && (*full).error() == dl::errc::contended)
                break;
            co_await settle(50ms);
        }
        REQUIRE_FALSE(*full);
        CHECK((*full).error() == dl::errc::contended);
        CHECK(other.node_of("sentinel:pool") == dl::redis::node_address{"127.0.0.1", set.replica().port()});
        // A reader comes in beside the one held (before a writer asks: a refused
        // writer's intent keeps readers out until its withdrawal, in the background).
        auto beside = co_await m2.try_lock_shared();
        REQUIRE(beside);
        CHECK(beside->fence() > reader->fence());
        { const auto ok_ = co_await beside->unlock(); CHECK(ok_); }
        auto writer = co_await m2.try_lock();
        REQUIRE_FALSE(writer);
        CHECK(writer.error() == dl::errc::contended);
        // The holder reaches the new primary too, and gives both back there.
        dl::result<void> back = dl::errc::store_unavailable;
        for (int i = 0; i < 300 && !back; ++i) {
            back = co_await holder.release_shared("sentinel:pool", permit->owner());
            if (!back)
                co_await settle(50ms);
        }
        REQUIRE(back);
        { const auto ok_ = co_await holder.release_shared("sentinel:doc", reader->owner()); REQUIRE(ok_); }
        // The leases learn they are over (their owners' grants are gone): no release
        // is left to run in the background.
        (void)co_await permit->unlock();
        (void)co_await reader->unlock();
        auto next = co_await s2.try_acquire();
        REQUIRE(next);
        CHECK(next->fence() > permit->fence());
        auto w = co_await m2.try_lock();
        REQUIRE(w);
        CHECK(w->fence() > reader->fence());
        { const auto ok_ = co_await next->unlock(); CHECK(ok_); }
        { const auto ok_ = co_await w->unlock(); CHECK(ok_); }
    }, 90s);
}
