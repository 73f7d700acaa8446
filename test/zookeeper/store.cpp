// The ZooKeeper store against a server the tests start
// (test/support/zookeeper_server.hpp), beyond the conformance suite: resource ids
// escaped into node names, waiter names, reply codes, the node layout, marks, a lost
// create reply, sessions in doubt, resumed and expiring, digest auth, chroot,
// waiters in separate processes served in order, listing and revoking (with the
// watches that tell a holder its node went), a shared mutex's and a semaphore's
// entries and their permits' record, replies that make no sense, and an election's
// value in its leader's node.
#include "fault/proxy.hpp"
#include "workers.hpp"
#include "zookeeper/zookeeper_support.hpp"
#include "conformance/suite.hpp"

#include <asio/experimental/as_tuple.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/write.hpp>

#include <algorithm>
#include <atomic>
#include <array>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <system_error>
#include <thread>
#include <tuple>
#include <vector>

using namespace std::chrono_literals;
using namespace test::zookeeper_tests;

// -- Pure functions ------------------------------------------------------------------

TEST_CASE("zookeeper: resource ids are escaped into one node name injectively, never '.', '..' or a '/'",
          "[zookeeper][input]")
{
    using zk::detail::component;
    using zk::detail::resource_of;
    const std::vector<std::string> ids{"a",   "a/b", "a%2Fb", ".", "..", "...", "%2E", "zookeeper", "seat:12",
                                       std::string{"\0\xff/", 3}, std::string(1024, '/')};
    for (const auto& id : ids) {
        const auto c = component(id);
        INFO(id);
        CHECK(c.find('/') == std::string::npos);
        CHECK(c != ".");
        CHECK(c != "..");
        REQUIRE(resource_of(c));
        CHECK(*resource_of(c) == id);
        for (const auto& other : ids)
            if (other != id)
                CHECK(component(other) != c);
    }
    CHECK(component("seat:12_A-b.c") == "seat:12_A-b.c");
    CHECK(zk::detail::resource_node("/locks", "a/b") == "/locks/a%2Fb");
    CHECK_FALSE(resource_of("a/b"));
    CHECK_FALSE(resource_of("%2f"));
}

TEST_CASE("zookeeper: every child with a sequence number is a waiter, whoever made it, ordered by sequence, "
          "not by name",
          "[zookeeper][input]")
{
    const std::string a(32, 'a'), b(32, 'b'), c(32, 'c');
    // Unsorted, as the server returns them, with names of other clients and children
    // without a sequence number.
    const std::vector<std::string> children{b + "-0000000010", "foreign", a + "-0000000012", c + "-0000000002",
                                            "lease_holder", c + "-00000000x1", a + "-99999999999999999999"};
    const auto holder = zk::detail::stand(children, c);
    CHECK(holder.found);
    CHECK(holder.first);
    CHECK(holder.queued == 3);
    CHECK(holder.holder == c + "-0000000002");
    const auto second = zk::detail::stand(children, b);
    CHECK(second.found);
    CHECK_FALSE(second.first);
    CHECK(second.predecessor == c + "-0000000002");
    CHECK(second.predecessor_sequence == 2);
    const auto third = zk::detail::stand(children, a);
    CHECK(third.predecessor == b + "-0000000010");
    CHECK(third.sequence == 12);
    CHECK_FALSE(zk::detail::stand(children, std::string(32, 'd')).found);
    // The exact name wins over the owner (a node of an earlier session may linger).
    const std::vector<std::string> twice{a + "-0000000003", b + "-0000000004", a + "-0000000007"};
    CHECK(zk::detail::stand(twice, a, a + "-0000000007").predecessor == b + "-0000000004");
    CHECK(zk::detail::stand(twice, a).first);
    // Curator's, kazoo's and this store's names in one queue: ordered by the number alone.
    const std::string curator_a = "_c_" + zk::detail::owner_uuid(a) + "-lock-0000000005";
    const std::vector<std::string> mixed{curator_a, b + "__lock__0000000003", c + "-0000000004",
                                         "_c_2b5f0b3e-8a53-4d8e-9d57-3f1b0a6c9e11-lock-0000000001"};
    const auto st = zk::detail::stand(mixed, a);
    CHECK(st.found);
    CHECK(st.mine == curator_a);
    CHECK(st.predecessor == c + "-0000000004");
    CHECK(st.holder == "_c_2b5f0b3e-8a53-4d8e-9d57-3f1b0a6c9e11-lock-0000000001");
    CHECK(st.queued == 4);
    // Owners are read from every dialect's names; a name without one is still a waiter.
    CHECK(zk::detail::parse_waiter(curator_a)->owner == a);
    CHECK(zk::detail::parse_waiter(b + "__lock__0000000003")->owner == b);
    CHECK(zk::detail::parse_waiter(b + "__rlock__0000000003")->owner == b);
    CHECK(zk::detail::parse_waiter(c + "-0000000004")->owner == c);
    CHECK(zk::detail::parse_waiter("_c_2b5f0b3e-8a53-4d8e-9d57-3f1b0a6c9e11-lock-0000000001")->owner ==
          "2b5f0b3e8a534d8e9d573f1b0a6c9e11");
    for (const auto& ownerless : std::vector<std::string>{std::string(32, 'A') + "-0000000001",
                                                           "_c_2b5f0b3e8a534d8e-lock-0000000001",
                                                           a.substr(1) + "-0000000001", a + "x0000000001",
                                                           "0000000001"}) {
        INFO(ownerless);
        const auto w = zk::detail::parse_waiter(ownerless);
        REQUIRE(w);
        CHECK(w->owner.empty());
        CHECK(w->mode == dl::lock_mode::exclusive);
        CHECK(w->sequence == 1);
    }
    // No sequence number: no waiter (kazoo skips such children too).
    for (const auto& none : std::vector<std::string>{a + "-", a + "-__READ__", a + "-__READ__12x", "lock-", ""})
        CHECK_FALSE(zk::detail::parse_waiter(none));
    // Past 2^31 the server writes a negative number.
    CHECK(zk::detail::parse_waiter(a + "--000000005")->sequence == -5);
}

TEST_CASE("zookeeper: the dialects' names: Curator's protected names, kazoo's, and this store's before dialects",
          "[zookeeper][input][dialect]")
{
    using dl::lock_mode;
    using zk::dialect;
    using zk::detail::entry_prefix;
    const std::string hex = "0123456789abcdef0123456789abcdef";
    const std::string uuid = "_c_01234567-89ab-cdef-0123-456789abcdef-";
    CHECK(zk::detail::owner_uuid(hex) == "01234567-89ab-cdef-0123-456789abcdef");
    CHECK(zk::detail::waiter_prefix(dl::owner_token::from_hex(hex), dialect::curator) == uuid + "lock-");
    CHECK(entry_prefix(dialect::curator, hex, lock_mode::exclusive, 0) == uuid + "__WRIT__");
    CHECK(entry_prefix(dialect::curator, hex, lock_mode::shared, 0) == uuid + "__READ__");
    CHECK(entry_prefix(dialect::curator, hex, lock_mode::shared, 4) == uuid + "__PERM_4__");
    CHECK(zk::detail::waiter_prefix(dl::owner_token::from_hex(hex), dialect::kazoo) == hex + "__lock__");
    CHECK(entry_prefix(dialect::kazoo, hex, lock_mode::exclusive, 0) == hex + "__lock__");
    CHECK(entry_prefix(dialect::kazoo, hex, lock_mode::shared, 0) == hex + "__rlock__");
    CHECK(entry_prefix(dialect::kazoo, hex, lock_mode::shared, 4) == hex + "__PERM_4__");
    CHECK(zk::detail::waiter_prefix(dl::owner_token::from_hex(hex), dialect::distlock) == hex + "-");
    CHECK(entry_prefix(dialect::distlock, hex, lock_mode::exclusive, 0) == hex + "-__WRIT__");
    CHECK(entry_prefix(dialect::distlock, hex, lock_mode::shared, 0) == hex + "-__READ__");
    CHECK(entry_prefix(dialect::distlock, hex, lock_mode::shared, 4) == hex + "-__PERM_4__");
    // The latch dialect: LeaderLatch's participant names for a mutex, Curator's others.
    CHECK(zk::detail::waiter_prefix(dl::owner_token::from_hex(hex), dialect::latch) == uuid + "latch-");
    CHECK(entry_prefix(dialect::latch, hex, lock_mode::exclusive, 0) == uuid + "__WRIT__");
    CHECK(entry_prefix(dialect::latch, hex, lock_mode::shared, 0) == uuid + "__READ__");
    CHECK(entry_prefix(dialect::latch, hex, lock_mode::shared, 4) == uuid + "__PERM_4__");
    CHECK(zk::detail::latch_entry(uuid + "latch-0000000042"));
    CHECK_FALSE(zk::detail::latch_entry(uuid + "lock-0000000042"));
    CHECK_FALSE(zk::detail::latch_entry(uuid + "latch-"));
    // Every name written reads back as its owner's, mode and count.
    for (const auto d : {dialect::curator, dialect::kazoo, dialect::distlock, dialect::latch})
        for (const auto& [mode, permits, mutex] : {std::tuple{lock_mode::exclusive, 0u, true},
                                                   std::tuple{lock_mode::exclusive, 0u, false},
                                                   std::tuple{lock_mode::shared, 0u, false},
                                                   std::tuple{lock_mode::shared, 7u, false}}) {
            const auto name = entry_prefix(d, hex, mode, permits, mutex) + "0000000042";
            INFO(name);
            const auto w = zk::detail::parse_waiter(name);
            REQUIRE(w);
            CHECK(w->owner == hex);
            CHECK(w->mode == mode);
            CHECK(w->permits == permits);
            CHECK(w->sequence == 42);
            CHECK_FALSE(w->unreadable);
        }
}

TEST_CASE("zookeeper: the dialect in the URL and the settings", "[zookeeper][input][dialect]")
{
    CHECK(zk::config{}.dialect == zk::dialect::curator);
    for (const auto d : {zk::dialect::curator, zk::dialect::kazoo, zk::dialect::distlock, zk::dialect::latch}) {
        const auto c = zk::config::from_url("zk://127.0.0.1/app?dialect=" + std::string{zk::name_of(d)});
        REQUIRE(c);
        CHECK(c->dialect == d);
    }
    CHECK(zk::config::from_url("zk://127.0.0.1")->dialect == zk::dialect::curator);
    for (const std::string bad : {"Curator", "", "zookeeper", "curator,kazoo"}) {
        std::string why;
        const auto c = zk::config::from_url("zk://127.0.0.1?dialect=" + bad, &why);
        INFO(bad);
        REQUIRE_FALSE(c);
        CHECK(c.error() == dl::errc::invalid_argument);
        CHECK(why.find("dialect") != std::string::npos);
    }
    std::string why;
    REQUIRE_FALSE(zk::config::from_url("zk://127.0.0.1?dialect=kazoo&dialect=kazoo", &why));
    zk::config c;
    c.dialect = static_cast<zk::dialect>(7);
    CHECK(c.validate() == dl::errc::invalid_argument);
    asio::io_context io;
    CHECK_THROWS_AS((zk::store{io, c}), std::system_error);
}

TEST_CASE("zookeeper: shared entries carry their mode in their name; the queue alone says who holds and what "
          "a waiter waits for",
          "[zookeeper][input][shared]")
{
    using dl::lock_mode;
    using zk::detail::entry_prefix;
    using zk::detail::parse_waiter;
    using zk::detail::stand_shared;
    const std::string a(32, 'a'), b(32, 'b'), c(32, 'c'), d(32, 'd'), e(32, 'e');
    // The names parsed are views of these.
    const std::string writer_name = a + "-__WRIT__0000000004", reader_name = a + "-__READ__0000000005",
                      permit_name = a + "-__PERM_3__0000000006", plain_name = a + "-0000000007";
    const auto writer = parse_waiter(writer_name);
    REQUIRE(writer);
    CHECK(writer->mode == lock_mode::exclusive);
    CHECK(writer->sequence == 4);
    CHECK(writer->owner == a);
    const auto reader = parse_waiter(reader_name);
    REQUIRE(reader);
    CHECK(reader->mode == lock_mode::shared);
    CHECK(reader->permits == 0);
    const auto permit = parse_waiter(permit_name);
    REQUIRE(permit);
    CHECK(permit->mode == lock_mode::shared);
    CHECK(permit->permits == 3);
    CHECK(permit->sequence == 6);
    const auto plain = parse_waiter(plain_name); // a mutex's: exclusive
    REQUIRE(plain);
    CHECK(plain->mode == lock_mode::exclusive);
    // Named as permits whose count does not read: waiters, exclusive, unreadable.
    for (const auto& bad : {a + "-__PERM_0__0000000001", a + "-__PERM_3_0000000001", a + "-__PERM___0000000001",
                            a + "-__PERM_99999999999__0000000001", a + "__PERM_x__0000000001"}) {
        INFO(bad);
        const auto w = parse_waiter(bad);
        REQUIRE(w);
        CHECK(w->mode == lock_mode::exclusive);
        CHECK(zk::detail::unreadable_entry(bad));
    }
    // Marks this store does not know: exclusive waiters.
    CHECK(parse_waiter(a + "-__SOME__0000000001")->mode == lock_mode::exclusive);
    CHECK_FALSE(zk::detail::unreadable_entry(a + "-__SOME__0000000001"));
    CHECK_FALSE(zk::detail::unreadable_entry("foreign"));
    CHECK_FALSE(zk::detail::unreadable_entry(a + "-0000000001"));
    CHECK_FALSE(zk::detail::unreadable_entry(a + "-x"));
    // Other clients' readers are readers, their writers and mutexes exclusive.
    CHECK(parse_waiter(b + "__rlock__0000000001")->mode == lock_mode::shared);
    CHECK(parse_waiter("_c_" + zk::detail::owner_uuid(b) + "-__READ__0000000001")->mode == lock_mode::shared);
    CHECK(parse_waiter(b + "__lock__0000000001")->mode == lock_mode::exclusive);
    CHECK(parse_waiter("_c_" + zk::detail::owner_uuid(b) + "-__WRIT__0000000001")->mode == lock_mode::exclusive);

    // Unsorted, with a mutex's node and a child without a sequence: r1 w r2 m r3.
    const std::vector<std::string> rw{a + "-__READ__0000000005", "foreign",      c + "-__READ__0000000009",
                                      b + "-__WRIT__0000000003", e + "-0000000007", d + "-__READ__0000000001"};
    const auto r1 = stand_shared(rw, d + "-__READ__0000000001");
    CHECK(r1.found);
    CHECK(r1.granted);
    const auto w = stand_shared(rw, b + "-__WRIT__0000000003");
    CHECK_FALSE(w.granted);
    CHECK(w.waits_for == std::vector<std::string>{d + "-__READ__0000000001"});
    const auto r2 = stand_shared(rw, a + "-__READ__0000000005");
    CHECK_FALSE(r2.granted);
    CHECK(r2.waits_for == std::vector<std::string>{b + "-__WRIT__0000000003"});
    const auto m = stand_shared(rw, e + "-0000000007");
    CHECK_FALSE(m.granted);
    CHECK(m.waits_for == std::vector<std::string>{a + "-__READ__0000000005"});
    const auto r3 = stand_shared(rw, c + "-__READ__0000000009"); // the newest older exclusive: the mutex's
    CHECK_FALSE(r3.granted);
    CHECK(r3.waits_for == std::vector<std::string>{e + "-0000000007"});
    CHECK(r3.live == std::vector<std::int64_t>{1, 3, 5, 7, 9});
    CHECK_FALSE(stand_shared(rw, a + "-__READ__0000000006").found);

    // Three permits, five entries: the three oldest hold, the others wait for their
    // three newest older entries.
    const std::vector<std::string> sem{e + "-__PERM_3__0000000015", a + "-__PERM_3__0000000011",
                                       b + "-__PERM_3__0000000012", d + "-__PERM_3__0000000014",
                                       c + "-__PERM_3__0000000013"};
    CHECK(stand_shared(sem, a + "-__PERM_3__0000000011").granted);
    CHECK(stand_shared(sem, c + "-__PERM_3__0000000013").granted);
    const auto fourth = stand_shared(sem, d + "-__PERM_3__0000000014");
    CHECK_FALSE(fourth.granted);
    CHECK(fourth.waits_for == std::vector<std::string>{a + "-__PERM_3__0000000011", b + "-__PERM_3__0000000012",
                                                       c + "-__PERM_3__0000000013"});
    const auto fifth = stand_shared(sem, e + "-__PERM_3__0000000015");
    CHECK(fifth.waits_for == std::vector<std::string>{b + "-__PERM_3__0000000012", c + "-__PERM_3__0000000013",
                                                      d + "-__PERM_3__0000000014"});

    // Every shared entry agrees on the count; only an older one is held against it.
    const std::vector<std::string> mixed{a + "-__PERM_3__0000000001", b + "-__PERM_2__0000000002",
                                         c + "-__READ__0000000003", d + "-__WRIT__0000000004"};
    CHECK(stand_shared(mixed, a + "-__PERM_3__0000000001").disagrees.empty());
    const auto two = stand_shared(mixed, b + "-__PERM_2__0000000002");
    CHECK(two.disagrees == a + "-__PERM_3__0000000001");
    CHECK(two.disagreeing_permits == 3);
    CHECK(stand_shared(mixed, c + "-__READ__0000000003").disagrees == a + "-__PERM_3__0000000001");
    CHECK(stand_shared(mixed, d + "-__WRIT__0000000004").disagrees.empty());

    // A child named as a permit whose count does not read: the queue is not judged.
    const auto unreadable =
        stand_shared({a + "-__READ__0000000001", b + "-__PERM_x__0000000002"}, a + "-__READ__0000000001");
    CHECK(unreadable.unreadable == b + "-__PERM_x__0000000002");
    CHECK_FALSE(unreadable.found);
    // A foreign reader shares with this store's readers; a foreign writer excludes them.
    const std::vector<std::string> foreign{b + "__rlock__0000000001", "_c_" + zk::detail::owner_uuid(c) +
                                           "-__READ__0000000002", a + "-__READ__0000000003",
                                           d + "__lock__0000000004", e + "-__READ__0000000005"};
    CHECK(stand_shared(foreign, a + "-__READ__0000000003").granted);
    const auto behind = stand_shared(foreign, e + "-__READ__0000000005");
    CHECK_FALSE(behind.granted);
    CHECK(behind.waits_for == std::vector<std::string>{d + "__lock__0000000004"});
}

TEST_CASE("zookeeper: the permits' record: read strictly; a slot is the holder's own or the lowest no live "
          "holder has",
          "[zookeeper][input][shared]")
{
    using zk::detail::claim_slot;
    using zk::detail::parse_slots;
    using zk::detail::slot_record;
    REQUIRE(parse_slots(""));
    CHECK(parse_slots("")->empty());
    const auto read = parse_slots("0 5\n2 9\n");
    REQUIRE(read);
    CHECK(*read == std::vector<slot_record>{{0, 5}, {2, 9}});
    for (const std::string bad : {"0 5", "1 5\n0 6\n", "0 5\n0 6\n", "0 5\n1 5\n", "x 1\n", "0  1\n", "-1 2\n",
                                  "0 -2\n", "4294967296 1\n", "0 1\n\n", " 0 1\n", "held"}) {
        INFO(bad);
        CHECK_FALSE(parse_slots(bad));
    }
    const std::vector<slot_record> recorded{{0, 5}, {1, 7}, {2, 9}};
    // Entry 7 left: its slot is the lowest free, its line dropped.
    const auto claimed = claim_slot(recorded, {5, 9, 11}, 11);
    CHECK(claimed.slot == 1);
    REQUIRE(claimed.record);
    CHECK(*claimed.record == "0 5\n1 11\n2 9\n");
    CHECK(parse_slots(*claimed.record));
    // Its own line: nothing to write.
    const auto own = claim_slot(recorded, {5, 7, 9}, 9);
    CHECK(own.slot == 2);
    CHECK_FALSE(own.record);
    const auto after = claim_slot(recorded, {5, 7, 9, 12}, 12);
    CHECK(after.slot == 3);
    CHECK(*after.record == "0 5\n1 7\n2 9\n3 12\n");
    const auto first = claim_slot({}, {4}, 4);
    CHECK(first.slot == 0);
    CHECK(*first.record == "0 4\n");
    const auto none_left = claim_slot(recorded, {13}, 13);
    CHECK(none_left.slot == 0);
    CHECK(*none_left.record == "0 13\n");
}

TEST_CASE("zookeeper: bound nodes are watched once each, again once a watch is spent; a deletion tells its own "
          "lease only",
          "[zookeeper][input]")
{
    using zk::detail::node_watch;
    struct listener : dl::session_listener {
        void session_changed(dl::session_state, dl::time_point) noexcept override {}
    };
    const auto a = std::make_shared<listener>(), b = std::make_shared<listener>();
    zk::detail::grant_registry g;
    const std::string pa = "/l/r/a-0000000001", pb = "/l/s/b-0000000002", pc = "/l/t/c-0000000003";
    g.granted(pa, 10, 7);
    g.granted(pb, 11, 7);
    g.granted(pc, 12, 7);
    // Bound only under its own resource's node, and for its own session; else forgotten.
    CHECK_FALSE(g.bind("/l/s", 10, 7, a));
    CHECK_FALSE(g.bind("/l/r", 10, 7, a));
    g.granted(pa, 10, 7);
    CHECK_FALSE(g.bind("/l/r", 10, 8, a));
    CHECK_FALSE(g.bind("/l/r", 99, 7, a));
    g.granted(pa, 10, 7);
    REQUIRE(g.bind("/l/r", 10, 7, a));
    REQUIRE(g.bind("/l/s", 11, 7, b));
    CHECK(g.bound() == 2);
    // Only bound nodes are watched (c's lock() call has not bound its lease yet), once.
    CHECK(g.due() == std::vector<std::string>{pa, pb});
    CHECK(g.due().empty());
    // a's watch is spent (its data changed) while the exists that sets it is on its
    // way: it stays to be set again; b's is set.
    g.spent(pa);
    g.watched(pa, true);
    g.watched(pb, true);
    CHECK(g.watch_of(pa) == node_watch::none);
    CHECK(g.watch_of(pb) == node_watch::set);
    CHECK(g.due() == std::vector<std::string>{pa});
    g.watched(pa, false); // the request failed: due again
    CHECK(g.due() == std::vector<std::string>{pa});
    g.watched(pa, true);
    // A new connection: the server watches nothing any more.
    g.reconnected();
    CHECK(g.due() == std::vector<std::string>{pa, pb});
    // b's node went: b is told, a is not; then b is forgotten.
    const auto told = g.gone(pb);
    REQUIRE(told);
    CHECK(told->lock() == b);
    CHECK_FALSE(g.gone(pb));
    CHECK_FALSE(g.gone(pc)); // granted, never bound: nobody to tell
    CHECK(g.bound() == 1);
    // A release unbinds by path or by fence.
    g.erase(pa);
    CHECK(g.bound() == 0);
    CHECK(g.size() == 0);
    g.granted(pa, 10, 7);
    REQUIRE(g.bind("/l/r", 10, 7, a));
    g.erase(std::int64_t{10});
    CHECK(g.size() == 0);
    // The session ends: every bound lease is returned to be told.
    g.granted(pa, 10, 7);
    g.granted(pb, 11, 7);
    REQUIRE(g.bind("/l/r", 10, 7, a));
    REQUIRE(g.bind("/l/s", 11, 7, b));
    CHECK(g.clear().size() == 2);
    CHECK(g.due().empty());
}

TEST_CASE("zookeeper: URLs are checked before any I/O", "[zookeeper][input]")
{
    auto url = zk::config::from_url("zk://u:p%w@127.0.0.1:2181,[::1]:2182,localhost/app/x?prefix=/locks&timeout=4000");
    REQUIRE(url);
    CHECK(url->servers.size() == 3);
    CHECK(url->servers[1].host == "::1");
    CHECK(url->servers[1].port == 2182);
    CHECK(url->servers[2].port == 2181);
    CHECK(url->chroot == "/app/x");
    CHECK(url->prefix == "/locks");
    CHECK(url->root() == "/app/x/locks");
    CHECK(url->session_timeout == 4s);
    CHECK(url->username == "u");
    CHECK(url->password == "p%w");
    CHECK(zk::config::from_url("zk://h/")->chroot.empty());
    for (const char* bad : {"", "etcd://h:1", "zk://", "zk://h:0", "zk://h:65536", "zk://h:x", "zk://[::1",
                            "zk://h//a", "zk://h/a/", "zk://h/a/../b", "zk://h?prefix=", "zk://h?prefix=/",
                            "zk://h?prefix=locks", "zk://h?prefix=/zookeeper", "zk://h?timeout=0",
                            "zk://h?timeout=x", "zk://h?what=1", "zk://,h", "zk://:pw@h", "zk://u:v:w@h?prefix=/a\x01"}) {
        INFO(bad);
        CHECK(zk::config::from_url(bad).error() == dl::errc::invalid_argument);
    }
}

TEST_CASE("zookeeper: reply codes map to conditions", "[zookeeper][input]")
{
    CHECK(zk::from_reply(0) == std::error_code{});
    CHECK(zk::from_reply(-112) == dl::condition::session_lost);
    CHECK(zk::from_reply(-102) == dl::condition::denied);
    CHECK(zk::from_reply(-115) == dl::condition::denied);
    CHECK(zk::from_reply(-4) == dl::condition::maybe_applied);
    CHECK(zk::from_reply(-7) == dl::condition::maybe_applied);
    CHECK(zk::from_reply(-110) == dl::condition::not_applied);
    CHECK(zk::from_reply(-8) == dl::condition::invalid_argument);
    CHECK(zk::from_reply(3) == dl::errc::protocol_error);
    CHECK(zk::from_reply(-1000) == dl::errc::protocol_error);
    CHECK(zk::from_reply(-101).category().name() == std::string{"distlock.zookeeper"});
    CHECK_FALSE(zk::from_reply(-101).message().empty());
}

// -- Against a real server -------------------------------------------------------------

TEST_CASE("zookeeper: the node layout: one ephemeral sequential node per waiter, fence = its czxid",
          "[zookeeper]")
{
    auto& server = test::shared_zookeeper();
    const auto prefix = test::fresh_zk_prefix("layout");
    asio::io_context io;
    zk::store a{io, server.config(prefix)}, b{io, server.config(prefix)};
    test::run(io, [&]() -> asio::awaitable<void> {
        dl::basic_distributed_mutex<zk::store> ma{a, "seat/7"};
        patient_mutex mb{b, "seat/7", {}, dl::retry::exponential_backoff{.deadline = 20s}};
        auto first = co_await ma.lock();
        REQUIRE(first);
        auto waiting = test::start(co_await asio::this_coro::executor, mb.lock());
        (void)co_await test::eventually("two nodes", [&] { return queue_of(prefix, "seat/7").size() == 2; },
                                        test::long_enough());
        const auto nodes = queue_of(prefix, "seat/7");
        REQUIRE(nodes.size() == 2);
        // The default dialect's: Curator's protected mutex node.
        CHECK(nodes[0].starts_with("_c_" + zk::detail::owner_uuid(first->owner().to_hex()) + "-lock-"));
        test::zk_client c{server.port()};
        const auto parent = prefix + "/seat%2F7";
        const auto s0 = c.stat(parent + "/" + nodes[0]);
        const auto s1 = c.stat(parent + "/" + nodes[1]);
        REQUIRE(s0);
        REQUIRE(s1);
        CHECK(s0->ephemeral_owner == a.session_id());
        CHECK(s1->ephemeral_owner == b.session_id());
        CHECK(a.session_id() != b.session_id());
        CHECK(static_cast<dl::fence_token>(s0->czxid) == first->fence());
        // The negotiated timeout is the one the server granted (2 s asked, within 0.5-5 s).
        CHECK(a.negotiated_timeout() == 2s);
        { const auto ok_ = co_await first->unlock(); CHECK(ok_); }
        { const bool came_ = co_await waiting.wait(); REQUIRE(came_); }
        auto& second = waiting.get();
        REQUIRE(second);
        CHECK(second->fence() == static_cast<dl::fence_token>(s1->czxid));
        CHECK(second->fence() > first->fence());
        { const auto ok_ = co_await second->unlock(); CHECK(ok_); }
        CHECK(queue_of(prefix, "seat/7").empty());
        // The resource's node is a container: the server deletes it once emptied.
        (void)co_await test::eventually("container gone", [&] { return !c.stat(parent); },
                                        test::long_enough());
        CHECK_FALSE(c.stat(parent));
        // A lock after that makes it again, with a larger fence.
        auto third = co_await ma.lock();
        REQUIRE(third);
        CHECK(third->fence() > second->fence());
        const auto ids = std::array<std::int64_t, 2>{a.session_id(), b.session_id()};
        co_await a.close();
        co_await b.close();
        // close() ended both sessions on the server: the held node went with a's.
        CHECK(queue_of(prefix, "seat/7").empty());
        CHECK(ids[0] != 0);
    });
}

TEST_CASE("zookeeper: a resource's children of any name: a sequential one is a waiter whoever made it, one "
          "without a sequence number is ignored, a permit whose count does not read is refused with its name",
          "[zookeeper][dialect]")
{
    auto& server = test::shared_zookeeper();
    const auto prefix = test::fresh_zk_prefix("hostile");
    const auto parent = zk::detail::resource_node(prefix, "r");
    test::zk_client c{server.port()};
    REQUIRE(c.create(prefix) == 0);
    REQUIRE(c.create(parent) == 0);
    REQUIRE(c.create(parent + "/lease_holder") == 0); // no sequence number: nobody's waiter
    asio::io_context io;
    zk::store s{io, server.config(prefix)};
    test::run(io, [&]() -> asio::awaitable<void> {
        const auto quick = dl::retry::fixed{.delay = 10ms, .deadline = 10s};
        dl::basic_distributed_mutex<zk::store, dl::retry::fixed> m{s, "r", {}, quick};
        auto free = co_await m.try_lock();
        REQUIRE(free);
        { const auto ok_ = co_await free->unlock(); CHECK(ok_); }
        // A stranger's sequential node, and one named as a permit of no readable count:
        // held by someone else until they go.
        REQUIRE(c.create(parent + "/stranger-", zk::proto::create_flags::sequential) == 0);
        REQUIRE(c.create(parent + "/" + std::string(32, 'c') + "__PERM_x__", zk::proto::create_flags::sequential) == 0);
        auto kept_out = co_await m.try_lock();
        REQUIRE_FALSE(kept_out);
        CHECK(kept_out.error() == dl::condition::contended);
        const auto owner = dl::owner_token::generate();
        dl::diagnostics diag;
        auto permit = co_await s.enqueue_shared("r", owner, dl::lock_mode::shared, 2, &diag);
        REQUIRE_FALSE(permit);
        CHECK(permit.error() == dl::errc::protocol_error);
        CHECK(diag.server_message().find("__PERM_x__") != std::string_view::npos);
        { const auto left_ = co_await s.dequeue("r", owner); CHECK(left_); }
        for (const auto& name : c.children(parent).value_or(std::vector<std::string>{}))
            if (name != "lease_holder")
                CHECK(c.remove(parent + "/" + name) == 0);
        auto again = co_await m.try_lock();
        REQUIRE(again);
        { const auto ok_ = co_await again->unlock(); CHECK(ok_); }
        co_await s.close();
    });
    CHECK(c.remove(parent + "/lease_holder") == 0);
}

TEST_CASE("zookeeper: a shared mutex's and a semaphore's nodes carry their mode; a mutex and a writer on one "
          "resource exclude each other and every reader",
          "[zookeeper][shared]")
{
    auto& server = test::shared_zookeeper();
    const auto prefix = test::fresh_zk_prefix("shared");
    asio::io_context io;
    zk::store a{io, server.config(prefix)}, b{io, server.config(prefix)};
    test::run(io, [&]() -> asio::awaitable<void> {
        // lock() calls wait at most a few seconds (the first one connects and makes the
        // resource's node); try_lock() calls try once.
        const auto quick = dl::retry::fixed{.delay = 10ms, .deadline = 10s};
        dl::basic_distributed_shared_mutex<zk::store, dl::retry::fixed> rw{a, "doc", {}, quick};
        dl::basic_distributed_mutex<zk::store, dl::retry::fixed> mutex{b, "doc", {}, quick};
        auto reader = co_await rw.lock_shared();
        REQUIRE(reader);
        auto nodes = queue_of(prefix, "doc");
        REQUIRE(nodes.size() == 1);
        CHECK(nodes[0].starts_with("_c_" + zk::detail::owner_uuid(reader->owner().to_hex()) + "-__READ__"));
        test::zk_client c{server.port()};
        const auto s0 = c.stat(zk::detail::resource_node(prefix, "doc") + "/" + nodes[0]);
        REQUIRE(s0);
        CHECK(static_cast<dl::fence_token>(s0->czxid) == reader->fence());
        auto kept_out = co_await mutex.try_lock();
        REQUIRE_FALSE(kept_out);
        CHECK(kept_out.error() == dl::condition::contended);
        { const auto ok_ = co_await reader->unlock(); CHECK(ok_); }

        auto held = co_await mutex.lock();
        REQUIRE(held);
        auto no_writer = co_await rw.try_lock();
        REQUIRE_FALSE(no_writer);
        CHECK(no_writer.error() == dl::condition::contended);
        auto no_reader = co_await rw.try_lock_shared();
        REQUIRE_FALSE(no_reader);
        { const auto ok_ = co_await held->unlock(); CHECK(ok_); }

        auto writer = co_await rw.lock();
        REQUIRE(writer);
        nodes = queue_of(prefix, "doc");
        REQUIRE(nodes.size() == 1);
        CHECK(nodes[0].starts_with("_c_" + zk::detail::owner_uuid(writer->owner().to_hex()) + "-__WRIT__"));
        auto no_mutex = co_await mutex.try_lock();
        REQUIRE_FALSE(no_mutex);
        CHECK(no_mutex.error() == dl::condition::contended);
        { const auto ok_ = co_await writer->unlock(); CHECK(ok_); }

        dl::basic_distributed_semaphore<zk::store, dl::retry::fixed> sem{a, "pool", {.permits = 2}, quick};
        auto permit = co_await sem.try_acquire();
        REQUIRE(permit);
        REQUIRE(permit->slot());
        CHECK(*permit->slot() == 0);
        nodes = queue_of(prefix, "pool");
        REQUIRE(nodes.size() == 1);
        CHECK(nodes[0].starts_with("_c_" + zk::detail::owner_uuid(permit->owner().to_hex()) + "-__PERM_2__"));
        { const auto ok_ = co_await permit->unlock(); CHECK(ok_); }
        CHECK(queue_of(prefix, "doc").empty());
        CHECK(queue_of(prefix, "pool").empty());
        co_await a.close();
        co_await b.close();
    });
}

TEST_CASE("zookeeper: a waiter that comes to hold the lock marks its node, so the one behind it is told that "
          "it waits for the holder",
          "[zookeeper]")
{
    auto& server = test::shared_zookeeper();
    const auto prefix = test::fresh_zk_prefix("mark");
    asio::io_context io;
    zk::store a{io, server.config(prefix)}, b{io, server.config(prefix)}, c{io, server.config(prefix)};
    test::run(io, [&]() -> asio::awaitable<void> {
        dl::basic_distributed_mutex<zk::store> ma{a, "r"};
        patient_mutex mb{b, "r", {}, dl::retry::exponential_backoff{.deadline = 20s}};
        patient_mutex mc{c, "r", {}, dl::retry::exponential_backoff{.deadline = 20s}};
        test::zk_client zc{server.port()};
        const auto parent = zk::detail::resource_node(prefix, "r");
        auto first = co_await ma.lock();
        REQUIRE(first);
        auto second = test::start(co_await asio::this_coro::executor, mb.lock());
        (void)co_await test::eventually("two nodes", [&] { return queue_of(prefix, "r").size() == 2; },
                                        test::long_enough());
        auto third = test::start(co_await asio::this_coro::executor, mc.lock());
        (void)co_await test::eventually("three nodes", [&] { return queue_of(prefix, "r").size() == 3; },
                                        test::long_enough());
        const auto nodes = queue_of(prefix, "r");
        REQUIRE(nodes.size() == 3);
        // Taken at the first try: whoever queues later sees it as the holder, no mark.
        const auto s0 = zc.stat(parent + "/" + nodes[0]);
        REQUIRE(s0);
        CHECK(s0->data_length == 0);
        // b queued behind a waiter-free holder; c behind b while b still waited.
        { const auto ok_ = co_await first->unlock(); CHECK(ok_); }
        { const bool came_ = co_await second.wait(); REQUIRE(came_); }
        REQUIRE(second.get());
        const auto mark_of = [&](const std::string& name) {
            const auto st = zc.stat(parent + "/" + name);
            return st ? st->data_length : -1;
        };
        // b held the lock after waiting: it marks its node for c.
        (void)co_await test::eventually("b's mark", [&] { return mark_of(nodes[1]) == 4; },
                                        test::long_enough());
        CHECK_FALSE(third.ready());
        { const auto ok_ = co_await second.get()->unlock(); CHECK(ok_); }
        { const bool came_ = co_await third.wait(); REQUIRE(came_); }
        auto& got = third.get();
        REQUIRE(got);
        const auto s2 = zc.stat(parent + "/" + nodes[2]);
        REQUIRE(s2);
        CHECK(got->fence() == static_cast<dl::fence_token>(s2->czxid));
        CHECK(got->fence() > second.get()->fence());
        (void)co_await test::eventually("c's mark", [&] { return mark_of(nodes[2]) == 4; },
                                        test::long_enough());
        { const auto ok_ = co_await got->unlock(); CHECK(ok_); }
        CHECK(queue_of(prefix, "r").empty());
        co_await a.close();
        co_await b.close();
        co_await c.close();
    });
}

TEST_CASE("zookeeper: a create whose reply was lost is found again, never a second node", "[zookeeper][fault]")
{
    auto& server = test::shared_zookeeper();
    const auto prefix = test::fresh_zk_prefix("lost-create");
    fault::proxy net{server.port()};
    asio::io_context io;
    zk::store holder{io, server.config(prefix)}, waiter{io, server.config_through(net.port(), prefix)};
    test::run(io, [&]() -> asio::awaitable<void> {
        dl::basic_distributed_mutex<zk::store> mh{holder, "r"};
        auto held = co_await mh.lock();
        REQUIRE(held);
        // The waiter's session is open; then its next reply (the create's) is lost.
        { const auto warm_ = co_await waiter.read("other"); REQUIRE(warm_); }
        net.set(fault::direction::to_client, {.close_after = 0});
        patient_mutex mw{waiter, "r", {}, dl::retry::exponential_backoff{.initial = 50ms, .deadline = 20s}};
        auto waiting = test::start(co_await asio::this_coro::executor, mw.lock());
        (void)co_await test::eventually("queued", [&] { return queue_of(prefix, "r").size() == 2; },
                                        test::long_enough());
        net.set(fault::direction::to_client, {});
        co_await test::settle(1s); // the waiter reconnects (same session) and tries again
        CHECK(queue_of(prefix, "r").size() == 2);
        { const auto ok_ = co_await held->unlock(); CHECK(ok_); }
        { const bool came_ = co_await waiting.wait(); REQUIRE(came_); }
        auto& got = waiting.get();
        REQUIRE(got);
        CHECK(queue_of(prefix, "r").size() == 1);
        { const auto ok_ = co_await got->unlock(); CHECK(ok_); }
        CHECK(queue_of(prefix, "r").empty());
        co_await holder.close();
        co_await waiter.close();
    });
}

TEST_CASE("zookeeper: a blackholed holder is in doubt at once, the next waiter gets the lock only after the "
          "session expired",
          "[zookeeper][fault]")
{
    auto& server = test::shared_zookeeper();
    const auto prefix = test::fresh_zk_prefix("blackhole");
    fault::proxy net{server.port()};
    asio::io_context io;
    auto cfg = server.config_through(net.port(), prefix);
    cfg.request_timeout = 1s;
    zk::store holder{io, cfg}, other{io, server.config(prefix)};
    test::run(io, [&]() -> asio::awaitable<void> {
        dl::basic_distributed_mutex<zk::store> mh{holder, "r"};
        auto held = co_await mh.lock();
        REQUIRE(held);
        const auto session = holder.session_id();
        auto lost = test::start(co_await asio::this_coro::executor, held->lost());
        net.set(fault::direction::to_server, {.blackhole = true});
        { const bool came_ = co_await lost.wait(); REQUIRE(came_); }
        // Told while the server still keeps the node: the holder stops first.
        CHECK_FALSE(queue_of(prefix, "r").empty());
        CHECK_FALSE(held->valid());
        patient_mutex mo{other, "r", {}, dl::retry::exponential_backoff{.deadline = 20s}};
        auto next = co_await mo.lock();
        REQUIRE(next);
        CHECK(next->fence() > held->fence());
        net.set(fault::direction::to_server, {});
        // The holder's client makes a new session (the server says the old one expired).
        auto again = co_await holder.read("r");
        REQUIRE(again);
        (void)co_await test::eventually("new session",
                                        [&] { return holder.session_id() != 0 && holder.session_id() != session; },
                                        test::long_enough());
        CHECK(holder.sessions_made() == 2);
        { const auto ok_ = co_await next->unlock(); CHECK(ok_); }
        co_await holder.close();
        co_await other.close();
    });
}

TEST_CASE("zookeeper: a short disconnection resumes the session: waiters keep their place and their watch",
          "[zookeeper][fault]")
{
    auto& server = test::shared_zookeeper();
    const auto prefix = test::fresh_zk_prefix("resume");
    fault::proxy net{server.port()};
    asio::io_context io;
    zk::store holder{io, server.config(prefix)}, waiter{io, server.config_through(net.port(), prefix)};
    test::recorder rec;
    test::run(io, [&]() -> asio::awaitable<void> {
        dl::basic_distributed_mutex<zk::store> mh{holder, "r"};
        dl::basic_distributed_mutex<zk::store, dl::observe::callback, dl::retry::fixed> mw{
            waiter, "r", {}, rec.observer(), patient()};
        auto held = co_await mh.lock();
        REQUIRE(held);
        auto waiting = test::start(co_await asio::this_coro::executor, mw.lock());
        (void)co_await test::eventually("waiting", [&] { return !rec.of<dl::wait_event>().empty(); },
                                        test::long_enough());
        const auto session = waiter.session_id();
        const auto queued = queue_of(prefix, "r");
        REQUIRE(queued.size() == 2);
        net.reset_all(); // the waiter's connection is cut; it reconnects within the timeout
        co_await test::settle(300ms);
        // Released while the waiter may still be reconnecting: SetWatches after the
        // reconnect fires the deletion it missed.
        { const auto ok_ = co_await held->unlock(); CHECK(ok_); }
        { const bool came_ = co_await waiting.wait(); REQUIRE(came_); }
        auto& got = waiting.get();
        REQUIRE(got);
        CHECK(waiter.session_id() == session);
        CHECK(waiter.sessions_made() == 1);
        CHECK(queue_of(prefix, "r") == std::vector<std::string>{queued[1]});
        { const auto ok_ = co_await got->unlock(); CHECK(ok_); }
        co_await holder.close();
        co_await waiter.close();
    });
}

TEST_CASE("zookeeper: digest auth: nodes carry the creator's ACL; another user cannot lock under them",
          "[zookeeper]")
{
    auto& server = test::shared_zookeeper();
    const auto prefix = test::fresh_zk_prefix("auth");
    asio::io_context io;
    auto alice_cfg = server.config(prefix);
    alice_cfg.username = "alice";
    alice_cfg.password = "secret";
    auto mallory_cfg = alice_cfg;
    mallory_cfg.username = "mallory";
    zk::store alice{io, alice_cfg}, alice2{io, alice_cfg}, mallory{io, mallory_cfg};
    test::run(io, [&]() -> asio::awaitable<void> {
        dl::basic_distributed_mutex<zk::store> ma{alice, "r"}, ma2{alice2, "r"};
        auto held = co_await ma.lock();
        REQUIRE(held);
        dl::basic_distributed_mutex<zk::store, dl::retry::none> mm{mallory, "r"};
        dl::diagnostics diag;
        auto refused = co_await mm.lock(diag);
        REQUIRE_FALSE(refused);
        CHECK(refused.error() == dl::condition::denied);
        CHECK(diag.to_string().find("ACL") != std::string::npos);
        // Unauthenticated, the queue cannot even be read, nor the holder's node deleted.
        const auto parent = zk::detail::resource_node(prefix, "r");
        test::zk_client anyone{server.port()}, as_alice{server.port(), "alice:secret"};
        CHECK_FALSE(anyone.children(parent));
        const auto nodes = as_alice.children(parent);
        REQUIRE(nodes);
        REQUIRE(nodes->size() == 1);
        CHECK(anyone.remove(parent + "/" + nodes->front()) == -102);
        { const auto ok_ = co_await held->unlock(); CHECK(ok_); }
        // The same user from another session can.
        auto next = co_await ma2.lock();
        REQUIRE(next);
        { const auto ok_ = co_await next->unlock(); CHECK(ok_); }
        co_await alice.close();
        co_await alice2.close();
        co_await mallory.close();
    });
}

TEST_CASE("zookeeper: chroot: every node is under it", "[zookeeper]")
{
    auto& server = test::shared_zookeeper();
    const auto chroot = test::fresh_zk_prefix("chroot");
    asio::io_context io;
    auto cfg = server.config("/locks");
    cfg.chroot = chroot;
    zk::store s{io, cfg};
    test::run(io, [&]() -> asio::awaitable<void> {
        dl::basic_distributed_mutex<zk::store> m{s, "r"};
        auto held = co_await m.lock();
        REQUIRE(held);
        CHECK(queue_of(chroot + "/locks", "r").size() == 1);
        auto info = co_await s.read("r");
        REQUIRE(info);
        CHECK(info.value().held);
        CHECK(info.value().fence == held->fence());
        CHECK(info.value().owner == held->owner().to_hex().substr(0, 8));
        { const auto ok_ = co_await held->unlock(); CHECK(ok_); }
        co_await s.close();
    });
}

namespace {

// zookeeper-queue PORT PREFIX RESOURCE: prints "queued" once its node is in the queue
// (its lock() is waiting), "locked FENCE" when granted, then releases on a line of
// stdin and exits.
int queue_worker(const std::vector<std::string>& args)
{
    if (args.size() != 3)
        return 2;
    asio::io_context io;
    zk::config cfg;
    cfg.servers = {{"127.0.0.1", static_cast<std::uint16_t>(std::stoi(args[0]))}};
    cfg.prefix = args[1];
    cfg.session_timeout = 4s;
    zk::store store{io, cfg};
    int status = 1;
    asio::co_spawn(io, [&]() -> asio::awaitable<void> {
        test::recorder rec;
        dl::basic_distributed_mutex<zk::store, dl::observe::callback, dl::retry::exponential_backoff> m{
            store, args[2], {}, rec.observer(), dl::retry::exponential_backoff{.deadline = 60s}};
        auto waiting = test::start(co_await asio::this_coro::executor, m.lock());
        for (int step = 0; rec.of<dl::wait_event>().empty() && !waiting.ready() && step < 5000; ++step) {
            dl::timer t{co_await asio::this_coro::executor, 2ms};
            co_await t.async_wait(asio::use_awaitable);
        }
        std::printf("queued\n");
        std::fflush(stdout);
        // Longer than lock()'s deadline: this coroutine must not end (and destroy the
        // mutex) while lock() still runs, however slowly the waiters ahead are served.
        if (!co_await waiting.wait(std::chrono::seconds{90}))
            co_return;
        auto& l = waiting.get();
        if (!l)
            co_return;
        std::printf("locked %llu\n", static_cast<unsigned long long>(l->fence()));
        std::fflush(stdout);
        char line[16];
        if (!std::fgets(line, sizeof line, stdin)) // blocks this process only: nothing else runs here
            co_return;
        if (co_await l->unlock())
            status = 0;
        co_await store.close();
    }, asio::detached);
    io.run();
    return status;
}

[[maybe_unused]] const bool queue_worker_registered = test::register_worker("zookeeper-queue", queue_worker);

} // namespace

TEST_CASE("zookeeper: waiters in separate processes are served in the order they queued", "[zookeeper][process]")
{
    REQUIRE(queue_worker_registered);
    auto& server = test::shared_zookeeper();
    const auto prefix = test::fresh_zk_prefix("process-order");
    asio::io_context io;
    zk::store s{io, server.config(prefix)};
    constexpr int waiters = 4;
    std::vector<std::unique_ptr<test::child>> workers;
    test::run(io, [&]() -> asio::awaitable<void> {
        dl::basic_distributed_mutex<zk::store> m{s, "r"};
        auto held = co_await m.lock();
        REQUIRE(held);
        for (int i = 0; i < waiters; ++i) {
            workers.push_back(std::make_unique<test::child>(std::vector<std::string>{
                test::self_path(), "--worker", "zookeeper-queue", std::to_string(server.port()), prefix, "r"}));
            // Each is in the queue before the next starts. Waited for without blocking
            // this thread: the holder's session (2 s) keeps pinging however long the
            // workers take to start.
            const auto queued = co_await workers.back()->next_line(std::chrono::seconds{30});
            REQUIRE(queued == std::optional<std::string>{"queued"});
        }
        CHECK(queue_of(prefix, "r").size() == waiters + 1);
        { const auto ok_ = co_await held->unlock(); CHECK(ok_); }
        dl::fence_token last = held->fence();
        for (int i = 0; i < waiters; ++i) {
            const auto line = co_await workers[i]->next_line(std::chrono::seconds{30});
            REQUIRE(line);
            REQUIRE(line->starts_with("locked "));
            const dl::fence_token fence = std::stoull(line->substr(7));
            CHECK(fence > last);
            last = fence;
            // The ones behind it still wait.
            for (int k = i + 1; k < waiters; ++k)
                CHECK_FALSE(workers[k]->read_line(std::chrono::milliseconds{20}));
            workers[i]->write_line("release");
            CHECK(workers[i]->wait(std::chrono::seconds{30}) == std::optional<int>{0});
        }
        CHECK(queue_of(prefix, "r").empty());
        co_await s.close();
    }, std::chrono::seconds{180}); // four sanitized processes started and served one after another
}

TEST_CASE("zookeeper: a store whose event loop stood still past its session timeout closes without leaving its "
          "keeper behind",
          "[zookeeper][lifetime]")
{
    // The sessions expire on the server while nothing runs; then the stores close on a
    // loaded machine (two threads spinning, bounded by the close), where the keeper's
    // late ping was still suspended when close() returned, and the io_context's
    // shutdown left it and the engine holding each other (LeakSanitizer, ./dev test).
    auto& server = test::shared_zookeeper();
    const auto prefix = test::fresh_zk_prefix("still");
    for (int round = 0; round < 3; ++round) {
        asio::io_context io;
        std::array<std::unique_ptr<zk::store>, 3> clients;
        std::vector<std::unique_ptr<fault::proxy>> nets;
        for (auto& c : clients) {
            nets.push_back(std::make_unique<fault::proxy>(server.port()));
            c = std::make_unique<zk::store>(io, server.config_through(nets.back()->port(), prefix));
        }
        test::conformance::warm_up(io, clients);
        std::this_thread::sleep_for(std::chrono::milliseconds{2500 + 300 * round}); // nothing runs
        std::atomic<bool> closed{false};
        std::vector<std::thread> load;
        for (int t = 0; t < 2; ++t)
            load.emplace_back([&closed] {
                const auto until = std::chrono::steady_clock::now() + std::chrono::seconds{30};
                while (!closed.load(std::memory_order_relaxed) && std::chrono::steady_clock::now() < until) {
                }
            });
        test::conformance::close_all(io, clients);
        closed = true;
        for (auto& t : load)
            t.join();
    }
}

// -- Listing and revoking -------------------------------------------------------------

TEST_CASE("zookeeper: revoking a waiter's entry is refused and leaves the queue as it was; the holder's frees "
          "the lock for that waiter",
          "[zookeeper][revoke]")
{
    auto& server = test::shared_zookeeper();
    const auto prefix = test::fresh_zk_prefix("revoke-waiter");
    asio::io_context io;
    zk::store a{io, server.config(prefix)}, b{io, server.config(prefix)}, op{io, server.config(prefix)};
    test::run(io, [&]() -> asio::awaitable<void> {
        const auto ex = co_await asio::this_coro::executor;
        dl::basic_distributed_mutex<zk::store> ma{a, "r"};
        patient_mutex mb{b, "r", {}, dl::retry::exponential_backoff{.deadline = 20s}};
        auto held = co_await ma.lock();
        REQUIRE(held);
        auto lost = test::start(ex, held->lost());
        auto waiting = test::start(ex, mb.lock());
        (void)co_await test::eventually("queued", [&] { return queue_of(prefix, "r").size() == 2; },
                                        test::long_enough());
        const auto queued = queue_of(prefix, "r");
        REQUIRE(queued.size() == 2);
        test::zk_client zc{server.port()};
        const auto parent = zk::detail::resource_node(prefix, "r");
        const auto waiter_node = zc.stat(parent + "/" + queued[1]);
        REQUIRE(waiter_node);
        const auto waiter_fence = static_cast<dl::fence_token>(waiter_node->czxid);

        // The waiter's fence names an entry, not the lock: refused, nothing changed.
        dl::diagnostics diag;
        auto refused = co_await op.revoke("r", waiter_fence, &diag);
        REQUIRE_FALSE(refused);
        CHECK(refused.error() == dl::condition::not_owner);
        CHECK(diag.to_string().find(std::to_string(held->fence())) != std::string::npos);
        // Nor does the holder's fence revoke another resource's lock.
        auto elsewhere = co_await op.revoke("r-other", held->fence());
        REQUIRE_FALSE(elsewhere);
        CHECK(elsewhere.error() == dl::condition::not_owner);
        co_await test::settle(300ms);
        CHECK(queue_of(prefix, "r") == queued);
        CHECK(held->valid());
        CHECK_FALSE(lost.ready());
        CHECK_FALSE(waiting.ready());
        auto listed = co_await op.list("r");
        REQUIRE(listed);
        REQUIRE(listed->size() == 1);
        CHECK(listed->front().lock.fence == held->fence());
        CHECK(listed->front().waiters == std::optional<std::size_t>{1});

        // The holder's: the waiter is served, with the fence it queued with.
        auto revoked = co_await op.revoke("r", held->fence());
        REQUIRE(revoked);
        REQUIRE(co_await waiting.wait(std::chrono::milliseconds{20000}));
        auto& next = waiting.get();
        REQUIRE(next);
        CHECK(next->fence() == waiter_fence);
        REQUIRE(co_await lost.wait(std::chrono::milliseconds{20000}));
        CHECK(lost.get() == dl::condition::lease_lost);
        CHECK(queue_of(prefix, "r") == std::vector<std::string>{queued[1]});
        // The revoked lease's unlock finds its node gone; the new holder keeps the lock.
        CHECK_FALSE(co_await held->unlock());
        CHECK(next->valid());
        CHECK(a.leases_bound() == 0);
        { const auto ok_ = co_await next->unlock(); CHECK(ok_); }
        CHECK(b.leases_bound() == 0);
        co_await a.close();
        co_await b.close();
        co_await op.close();
    });
}

TEST_CASE("zookeeper: a lease whose node is deleted by someone else is lost; another lease of the same client "
          "stays valid, and released leases leave no binding",
          "[zookeeper][revoke]")
{
    auto& server = test::shared_zookeeper();
    const auto prefix = test::fresh_zk_prefix("bound-node");
    asio::io_context io;
    zk::store s{io, server.config(prefix)};
    test::run(io, [&]() -> asio::awaitable<void> {
        const auto ex = co_await asio::this_coro::executor;
        // Taken and given back: nothing stays bound.
        dl::basic_distributed_mutex<zk::store> churn{s, "churn"};
        for (int i = 0; i < 20; ++i) {
            auto l = co_await churn.lock();
            REQUIRE(l);
            { const auto ok_ = co_await l->unlock(); CHECK(ok_); }
        }
        CHECK(s.leases_bound() == 0);

        dl::basic_distributed_mutex<zk::store> m1{s, "one"}, m2{s, "two"};
        auto first = co_await m1.lock();
        auto second = co_await m2.lock();
        REQUIRE(first);
        REQUIRE(second);
        CHECK(s.leases_bound() == 2);
        auto first_lost = test::start(ex, first->lost());
        auto second_lost = test::start(ex, second->lost());
        // Past a ping, so that the watches are set (a deletion before would be seen by
        // the exists that sets them).
        co_await test::settle(1s);
        const auto started = std::chrono::steady_clock::now();
        {
            test::zk_client zc{server.port()};
            const auto names = queue_of(prefix, "one");
            REQUIRE(names.size() == 1);
            CHECK(zc.remove(zk::detail::resource_node(prefix, "one") + "/" + names.front()) == 0);
        }
        REQUIRE(co_await first_lost.wait(std::chrono::milliseconds{10000}));
        CHECK(first_lost.get() == dl::condition::lease_lost);
        // Heard of at once (the watch), well within a session timeout (2 s).
        CHECK(std::chrono::steady_clock::now() - started < 2s);
        CHECK_FALSE(first->valid());
        // Several pings later, the other lease of this client is untouched.
        co_await test::settle(1500ms);
        CHECK(second->valid());
        CHECK_FALSE(second_lost.ready());
        CHECK(s.valid_session());
        CHECK(s.leases_bound() == 1);
        CHECK_FALSE(co_await first->unlock());
        { const auto ok_ = co_await second->unlock(); CHECK(ok_); }
        CHECK(s.leases_bound() == 0);
        // The resource is free for the next lock.
        auto again = co_await m1.try_lock();
        REQUIRE(again);
        CHECK(again->fence() > first->fence());
        { const auto ok_ = co_await again->unlock(); CHECK(ok_); }
        co_await s.close();
    });
}

TEST_CASE("zookeeper: a holder that waited first (its node marked) still hears of its revoke", "[zookeeper][revoke]")
{
    auto& server = test::shared_zookeeper();
    const auto prefix = test::fresh_zk_prefix("revoke-marked");
    asio::io_context io;
    zk::store a{io, server.config(prefix)}, b{io, server.config(prefix)};
    test::run(io, [&]() -> asio::awaitable<void> {
        const auto ex = co_await asio::this_coro::executor;
        dl::basic_distributed_mutex<zk::store> ma{a, "r"};
        patient_mutex mb{b, "r", {}, dl::retry::exponential_backoff{.deadline = 20s}};
        auto first = co_await ma.lock();
        REQUIRE(first);
        auto waiting = test::start(ex, mb.lock());
        (void)co_await test::eventually("queued", [&] { return queue_of(prefix, "r").size() == 2; },
                                        test::long_enough());
        const auto nodes = queue_of(prefix, "r");
        { const auto ok_ = co_await first->unlock(); CHECK(ok_); }
        REQUIRE(co_await waiting.wait());
        auto& second = waiting.get();
        REQUIRE(second);
        auto lost = test::start(ex, second->lost());
        // Its mark changes its node's data: a watch set before it is spent, and set
        // again at the next ping.
        test::zk_client zc{server.port()};
        const auto node = zk::detail::resource_node(prefix, "r") + "/" + nodes[1];
        (void)co_await test::eventually("marked", [&] {
            const auto st = zc.stat(node);
            return st && st->data_length > 0;
        }, test::long_enough());
        co_await test::settle(1s);
        CHECK_FALSE(lost.ready());
        auto revoked = co_await a.revoke("r", second->fence());
        REQUIRE(revoked);
        REQUIRE(co_await lost.wait(std::chrono::milliseconds{10000}));
        CHECK(lost.get() == dl::condition::lease_lost);
        CHECK(queue_of(prefix, "r").empty());
        CHECK(b.leases_bound() == 0);
        co_await a.close();
        co_await b.close();
    });
}

TEST_CASE("zookeeper: list() reads many resources in three pipelined round trips, sorted by id, with their "
          "holders, fences and waiters",
          "[zookeeper][list]")
{
    auto& server = test::shared_zookeeper();
    const auto prefix = test::fresh_zk_prefix("list-many");
    fault::proxy slow{server.port()};
    asio::io_context io;
    zk::store holder{io, server.config(prefix)}, waiter{io, server.config(prefix)};
    zk::store reader{io, server.config_through(slow.port(), prefix)};
    constexpr int resources = 60;
    test::run(io, [&]() -> asio::awaitable<void> {
        const auto ex = co_await asio::this_coro::executor;
        std::vector<std::unique_ptr<dl::basic_distributed_mutex<zk::store>>> mutexes;
        std::vector<dl::lease> leases;
        std::map<std::string, dl::fence_token> fences;
        for (int i = 0; i < resources; ++i) {
            const auto id = "many/" + std::to_string(i);
            mutexes.push_back(std::make_unique<dl::basic_distributed_mutex<zk::store>>(holder, id));
            auto l = co_await mutexes.back()->lock();
            REQUIRE(l);
            fences[id] = l->fence();
            leases.push_back(std::move(*l));
        }
        // Waiters behind two of them.
        patient_mutex w3{waiter, "many/3", {}, dl::retry::exponential_backoff{.deadline = 20s}};
        patient_mutex w40{waiter, "many/40", {}, dl::retry::exponential_backoff{.deadline = 20s}};
        auto waiting3 = test::start(ex, w3.lock());
        auto waiting40 = test::start(ex, w40.lock());
        (void)co_await test::eventually("queued", [&] {
            return queue_of(prefix, "many/3").size() == 2 && queue_of(prefix, "many/40").size() == 2;
        }, test::long_enough());
        // Connected first; then every reply comes 150 ms late.
        { const auto warm_ = co_await reader.read("warm"); REQUIRE(warm_); }
        slow.set(fault::direction::to_client, {.latency = 150ms});
        const auto started = std::chrono::steady_clock::now();
        auto all = co_await reader.list("");
        const auto took = std::chrono::steady_clock::now() - started;
        REQUIRE(all);
        // Three round trips; one per resource would take 60 x 2 x 150 ms.
        CHECK(took < 4s);
        REQUIRE(all->size() == static_cast<std::size_t>(resources));
        CHECK(std::is_sorted(all->begin(), all->end(),
                             [](const auto& x, const auto& y) { return x.resource < y.resource; }));
        for (std::size_t i = 0; i < leases.size(); ++i) {
            const auto& l = leases[i];
            const auto it = std::find_if(all->begin(), all->end(),
                                         [&](const auto& x) { return x.resource == l.resource(); });
            REQUIRE(it != all->end());
            CHECK(it->lock.held);
            const auto fence = fences[std::string{l.resource()}];
            CHECK(it->lock.fence == fence);
            CHECK(it->lock.version == std::optional<dl::fence_token>{fence});
            CHECK(it->lock.owner == l.owner().to_hex().substr(0, 8));
            CHECK_FALSE(it->lock.remaining);
            const std::size_t behind = l.resource() == "many/3" || l.resource() == "many/40" ? 1 : 0;
            CHECK(it->waiters == std::optional<std::size_t>{behind});
        }
        slow.set(fault::direction::to_client, {});
        // A prefix: "many/1" and "many/10" to "many/19", not "many/2".
        auto ones = co_await reader.list("many/1");
        REQUIRE(ones);
        CHECK(ones->size() == 11);
        for (const auto& x : *ones)
            CHECK(x.resource.starts_with("many/1"));
        auto none = co_await reader.list("other");
        REQUIRE(none);
        CHECK(none->empty());
        for (auto& l : leases) {
            const auto ok_ = co_await l.unlock();
            CHECK(ok_);
        }
        REQUIRE(co_await waiting3.wait());
        REQUIRE(co_await waiting40.wait());
        REQUIRE(waiting3.get());
        REQUIRE(waiting40.get());
        auto left = co_await reader.list("many/");
        REQUIRE(left);
        REQUIRE(left->size() == 2);
        CHECK((*left)[0].resource == "many/3");
        CHECK((*left)[0].lock.fence == waiting3.get()->fence());
        CHECK((*left)[1].resource == "many/40");
        { const auto ok_ = co_await waiting3.get()->unlock(); CHECK(ok_); }
        { const auto ok_ = co_await waiting40.get()->unlock(); CHECK(ok_); }
        auto after = co_await reader.list("");
        REQUIRE(after);
        CHECK(after->empty());
        co_await holder.close();
        co_await waiter.close();
        co_await reader.close();
    }, std::chrono::seconds{60});
}

TEST_CASE("zookeeper: stores with bound leases are closed, or destroyed without close(), leaving nothing running",
          "[zookeeper][lifetime][revoke]")
{
    auto& server = test::shared_zookeeper();
    const auto prefix = test::fresh_zk_prefix("bound-lifetime");
    for (const bool closed : {true, false}) {
        asio::io_context io;
        auto s = std::make_unique<zk::store>(io, server.config(prefix));
        zk::store op{io, server.config(prefix)};
        std::optional<dl::lease> kept;
        std::optional<test::pending<std::error_code>> lost;
        test::run(io, [&]() -> asio::awaitable<void> {
            {
                dl::basic_distributed_mutex<zk::store> m1{*s, "a"}, m2{*s, "b"};
                auto a = co_await m1.lock();
                auto b = co_await m2.lock();
                REQUIRE(a);
                REQUIRE(b);
                lost.emplace(test::start(co_await asio::this_coro::executor, b->lost()));
                // Revoked while the keeper may be setting the watches: either tells it.
                auto revoked = co_await op.revoke("b", b->fence());
                REQUIRE(revoked);
                REQUIRE(co_await lost->wait());
                kept.emplace(std::move(*a));
            }
            if (closed)
                co_await s->close();
            else
                s.reset(); // the session expires on the server; the lease outlives its store
            co_await op.close();
        });
        CHECK_FALSE(kept->valid());
        kept.reset();
        s.reset();
    }
}

namespace {

// A peer that speaks ZooKeeper's framing but not its sense: it grants a session,
// answers pings and the close, and answers every other request with what `answer`
// gives for its op code and path, so that a test chooses the bytes the store reads.
class scripted_zookeeper {
public:
    using script = std::function<std::string(std::int32_t op, const std::string& path)>;

    scripted_zookeeper(asio::io_context& io, script answer)
        : acceptor_{io, asio::ip::tcp::endpoint{asio::ip::make_address("127.0.0.1"), 0}}, answer_{std::move(answer)}
    {
        asio::co_spawn(io, accept(), asio::detached);
    }

    std::uint16_t port() const { return acceptor_.local_endpoint().port(); }
    void stop()
    {
        asio::error_code ignored;
        acceptor_.close(ignored);
    }

private:
    static constexpr auto as_tuple() { return asio::experimental::as_tuple(asio::use_awaitable); }

    asio::awaitable<void> accept()
    {
        for (;;) {
            auto [ec, socket] = co_await acceptor_.async_accept(as_tuple());
            if (ec)
                co_return;
            asio::co_spawn(acceptor_.get_executor(), serve(std::move(socket)), asio::detached);
        }
    }

    asio::awaitable<void> serve(asio::ip::tcp::socket socket)
    {
        std::string in;
        bool session = false;
        char chunk[4096];
        for (;;) {
            while (in.size() >= 4) {
                zk::proto::reader length{std::string_view{in}.substr(0, 4)};
                const auto n = static_cast<std::size_t>(length.i32());
                if (in.size() < 4 + n)
                    break;
                const std::string payload = in.substr(4, n);
                in.erase(0, 4 + n);
                zk::proto::writer w;
                std::string body;
                if (!session) { // the connect request: a new session
                    session = true;
                    w.i32(0).i32(2000).i64(0x5eed).bytes(std::string(16, 'p')).boolean(false);
                } else {
                    zk::proto::reader r{payload};
                    const auto xid = r.i32();
                    const auto op = r.i32();
                    const auto path = r.bytes().value_or(std::string{});
                    w.i32(xid).i64(++zxid_).i32(0);
                    const bool plain = op == static_cast<std::int32_t>(zk::proto::op::ping) ||
                                       op == static_cast<std::int32_t>(zk::proto::op::close_session);
                    if (!plain)
                        body = answer_(op, path);
                }
                const auto reply = zk::proto::frame(w.take() + body);
                auto [wec, written] = co_await asio::async_write(socket, asio::buffer(reply), as_tuple());
                if (wec)
                    co_return;
            }
            auto [rec, got] = co_await socket.async_read_some(asio::buffer(chunk), as_tuple());
            if (rec)
                co_return;
            in.append(chunk, got);
        }
    }

    asio::ip::tcp::acceptor acceptor_;
    script answer_;
    std::int64_t zxid_ = 0;
};

// A Stat with `czxid`, as the server writes it.
std::string stat_bytes(std::int64_t czxid)
{
    zk::proto::writer w;
    w.i64(czxid).i64(czxid).i64(0).i64(0).i32(0).i32(0).i32(0).i64(0x5eed).i32(0).i32(0).i64(czxid);
    return w.take();
}

std::string children_bytes(const std::vector<std::string>& names)
{
    zk::proto::writer w;
    w.strings(names);
    return w.take() + stat_bytes(1);
}

} // namespace

TEST_CASE("zookeeper: replies that make no sense are protocol errors with the server's bytes in the diagnostics, "
          "never an exception",
          "[zookeeper][input][list][revoke]")
{
    const std::string owner(32, 'a');
    // What the store reads at each step of a listing: the prefix's children, a
    // resource's queue, the holder's node.
    struct case_ {
        const char* name;
        std::string root_children;
        std::string queue;
        std::string holder;
        const char* said; // found in the diagnostics
    };
    const std::vector<case_> cases{
        {"the prefix's children cut short", std::string{"\0\0\0\x09oops", 8}, {}, {}, "oops"},
        {"a count of children no reply can hold", std::string{"\x7f\xff\xff\xff", 4} + stat_bytes(1), {}, {},
         "getChildren2"},
        {"a queue with a trailing byte", children_bytes({"r"}), children_bytes({owner + "-0000000001"}) + "!", {},
         "getChildren2"},
        {"the holder's Stat cut short", children_bytes({"r"}), children_bytes({owner + "-0000000001"}),
         stat_bytes(5).substr(0, 30), "exists"},
        {"the holder's czxid 0", children_bytes({"r"}), children_bytes({owner + "-0000000001"}), stat_bytes(0),
         "exists"},
    };
    for (const auto& c : cases) {
        INFO(c.name);
        asio::io_context io;
        scripted_zookeeper peer{io, [&](std::int32_t op, const std::string& path) -> std::string {
            if (op == static_cast<std::int32_t>(zk::proto::op::get_children2))
                return path == "/locks" ? c.root_children : c.queue;
            return c.holder;
        }};
        zk::config cfg;
        cfg.servers = {{"127.0.0.1", peer.port()}};
        cfg.prefix = "/locks";
        cfg.session_timeout = 2s;
        zk::store s{io, cfg};
        test::run(io, [&]() -> asio::awaitable<void> {
            dl::diagnostics diag;
            auto listed = co_await s.list("", &diag);
            REQUIRE_FALSE(listed);
            CHECK(listed.error() == dl::errc::protocol_error);
            CHECK(diag.server_message().find(c.said) != std::string_view::npos);
            if (!c.queue.empty()) { // the resource's steps: revoke and read read them too
                dl::diagnostics revoke_diag, read_diag;
                auto revoked = co_await s.revoke("r", 5, &revoke_diag);
                REQUIRE_FALSE(revoked);
                CHECK(revoked.error() == dl::errc::protocol_error);
                CHECK(revoke_diag.server_message().find(c.said) != std::string_view::npos);
                auto read = co_await s.read("r", &read_diag);
                REQUIRE_FALSE(read);
                CHECK(read.error() == dl::errc::protocol_error);
            }
            co_await s.close();
            peer.stop();
        });
    }
}

TEST_CASE("zookeeper: a queue with a node named as an entry that reads as none, or a resource's data that is no "
          "permits' record, is a protocol error with the server's words",
          "[zookeeper][input][shared]")
{
    const std::string owner(32, 'b');
    struct case_ {
        const char* name;
        std::string queue_extra; // another child of the resource's node
        std::string record;      // the resource's node's data
        const char* said;
    };
    const std::vector<case_> cases{
        {"an unreadable entry", owner + "-__PERM_x__0000000001", "", "PERM"},
        {"an unreadable record", owner + "-0000000000", "slots!", "slots"},
    };
    for (const auto& c : cases) {
        INFO(c.name);
        asio::io_context io;
        scripted_zookeeper peer{io, [&](std::int32_t op, const std::string& path) -> std::string {
            zk::proto::writer w;
            if (op == static_cast<std::int32_t>(zk::proto::op::create2)) // the call's node, sequence 2
                return w.bytes(path + "0000000002").take() + stat_bytes(7);
            if (op == static_cast<std::int32_t>(zk::proto::op::get_data))
                return w.bytes(c.record).take() + stat_bytes(1);
            if (op == static_cast<std::int32_t>(zk::proto::op::get_children2)) {
                return children_bytes(
                    {c.queue_extra, "_c_" + zk::detail::owner_uuid(std::string(32, 'a')) + "-__PERM_3__0000000002"});
            }
            return stat_bytes(7);
        }};
        zk::config cfg;
        cfg.servers = {{"127.0.0.1", peer.port()}};
        cfg.prefix = "/locks";
        cfg.session_timeout = 2s;
        zk::store s{io, cfg};
        test::run(io, [&]() -> asio::awaitable<void> {
            dl::diagnostics diag;
            auto got = co_await s.enqueue_shared("r", dl::owner_token::from_hex(std::string(32, 'a')),
                                                 dl::lock_mode::shared, 3, &diag);
            REQUIRE_FALSE(got);
            CHECK(got.error() == dl::errc::protocol_error);
            CHECK(diag.server_message().find(c.said) != std::string_view::npos);
            co_await s.close();
            peer.stop();
        });
    }
}

// -- Elections ---------------------------------------------------------------------

TEST_CASE("zookeeper: a holder's node's data: the mark alone, or the mark, a newline and the proclaimed value; "
          "only at data version 1 or more",
          "[zookeeper][input][election]")
{
    namespace zkd = zk::detail;
    const std::string nul_value{"a\0b\n", 4};
    CHECK(zkd::proclaimed_data(nul_value) == std::string{"held\na\0b\n", 9});
    CHECK(zkd::proclaimed_data("") == "held\n");

    CHECK(zkd::marks_holder("held", 1));
    CHECK(zkd::marks_holder("held\n", 1));
    CHECK(zkd::marks_holder(zkd::proclaimed_data(nul_value), 3));
    CHECK_FALSE(zkd::marks_holder("held", 0));      // data as created: its creator's
    CHECK_FALSE(zkd::marks_holder("held\nx", 0));
    CHECK_FALSE(zkd::marks_holder("heldx", 1));     // no separator
    CHECK_FALSE(zkd::marks_holder("hel", 1));
    CHECK_FALSE(zkd::marks_holder("", 1));
    CHECK_FALSE(zkd::marks_holder("10.0.0.1", 1)); // Curator's address
    CHECK_FALSE(zkd::marks_holder("held", -1));

    CHECK_FALSE(zkd::value_of("held", 1).value); // marked, not proclaimed
    CHECK_FALSE(zkd::value_of("held", 1).unreadable);
    CHECK(zkd::value_of("held\n", 1).value == std::string{});
    CHECK(zkd::value_of(zkd::proclaimed_data(nul_value), 2).value == nul_value);
    CHECK_FALSE(zkd::value_of(zkd::proclaimed_data(nul_value), 0).value);
    CHECK_FALSE(zkd::value_of("heldfoo", 5).value);
    const std::string largest(dl::max_leader_value_size, 'v');
    CHECK(zkd::value_of(zkd::proclaimed_data(largest), 1).value == largest);
    const auto oversized = zkd::value_of(zkd::proclaimed_data(largest + "v"), 1);
    CHECK(oversized.unreadable);
    CHECK_FALSE(oversized.value);
    // A LeaderLatch participant's value is its data as created, whatever it holds.
    CHECK(zkd::latch_value_of("").value == std::string{});
    CHECK(zkd::latch_value_of("held").value == "held");
    CHECK(zkd::latch_value_of(nul_value).value == nul_value);
    CHECK(zkd::latch_value_of(largest).value == largest);
    CHECK(zkd::latch_value_of(largest + "v").unreadable);
    CHECK_FALSE(zkd::latch_value_of(largest + "v").value);
}

TEST_CASE("zookeeper: a leader's value lives in its node after the mark, with NUL bytes and up to 64 KiB; a new "
          "grant never reports it; a lost term's proclaim is refused; too large a value is refused before any I/O",
          "[zookeeper][election]")
{
    auto& server = test::shared_zookeeper();
    const auto prefix = test::fresh_zk_prefix("elect");
    asio::io_context io;
    zk::store a{io, server.config(prefix)}, b{io, server.config(prefix)};
    test::run(io, [&]() -> asio::awaitable<void> {
        dl::basic_distributed_mutex<zk::store> ma{a, "e"}, mb{b, "e"};
        test::zk_client zc{server.port()};
        const auto parent = zk::detail::resource_node(prefix, "e");
        auto first = co_await ma.lock();
        REQUIRE(first);
        {
            auto seen = co_await b.leader("e");
            REQUIRE(seen);
            CHECK(seen->epoch == first->fence());
            CHECK(seen->owner == first->owner().to_hex().substr(0, 8));
            CHECK_FALSE(seen->value); // not proclaimed yet
            CHECK_FALSE(seen->remaining);
        }
        std::string value{"\0lead\0", 6};
        value.append(dl::max_leader_value_size - value.size(), 'x');
        { const auto ok_ = co_await a.proclaim("e", first->owner(), first->fence(), value); REQUIRE(ok_); }
        const auto nodes = queue_of(prefix, "e");
        REQUIRE(nodes.size() == 1);
        const auto st = zc.stat(parent + "/" + nodes[0]);
        REQUIRE(st);
        CHECK(st->czxid == static_cast<std::int64_t>(first->fence()));
        CHECK(st->version >= 1);
        CHECK(st->data_length == static_cast<std::int32_t>(5 + value.size())); // "held\n" + value
        {
            auto seen = co_await b.leader("e");
            REQUIRE(seen);
            CHECK(seen->epoch == first->fence());
            CHECK(seen->value == value);
        }
        // Proclaimed again: the node's data is replaced, the grant is the same.
        { const auto ok_ = co_await a.proclaim("e", first->owner(), first->fence(), ""); REQUIRE(ok_); }
        {
            auto seen = co_await a.leader("e");
            REQUIRE(seen);
            CHECK(seen->value == std::string{});
        }
        // Not this grant: another fence, another owner.
        {
            dl::diagnostics diag;
            auto r = co_await a.proclaim("e", first->owner(), first->fence() + 1, "x", &diag);
            REQUIRE_FALSE(r);
            CHECK(r.error() == dl::condition::not_owner);
            auto other = co_await a.proclaim("e", dl::owner_token::generate(), first->fence(), "x");
            REQUIRE_FALSE(other);
            CHECK(other.error() == dl::condition::not_owner);
        }
        // The next grant is another node: the value went with the first.
        auto second = test::start(co_await asio::this_coro::executor, mb.lock());
        { const auto ok_ = co_await first->unlock(); CHECK(ok_); }
        { const bool came_ = co_await second.wait(); REQUIRE(came_); }
        REQUIRE(second.get());
        {
            auto seen = co_await a.leader("e");
            REQUIRE(seen);
            CHECK(seen->epoch == second.get()->fence());
            CHECK(seen->epoch > first->fence());
            CHECK_FALSE(seen->value);
        }
        {
            auto late = co_await a.proclaim("e", first->owner(), first->fence(), "stale");
            REQUIRE_FALSE(late);
            CHECK(late.error() == dl::condition::not_owner);
        }
        // The waiter that came to hold marks its node; a proclaim before or after the
        // mark keeps both (the mark is written only over the data as created).
        { const auto ok_ = co_await b.proclaim("e", second.get()->owner(), second.get()->fence(), "b"); REQUIRE(ok_); }
        (void)co_await test::eventually("b's node settled", [&] {
            const auto s = zc.stat(parent + "/" + queue_of(prefix, "e").at(0));
            return s && s->data_length == 6;
        }, test::long_enough());
        {
            auto seen = co_await a.leader("e");
            REQUIRE(seen);
            CHECK(seen->value == "b");
        }
        { const auto ok_ = co_await second.get()->unlock(); CHECK(ok_); }
        {
            auto seen = co_await a.leader("e");
            REQUIRE(seen);
            CHECK(seen->epoch == 0);
            CHECK(seen->owner.empty());
            CHECK_FALSE(seen->value);
        }
        co_await a.close();
        co_await b.close();
    });

    // Refused before any I/O: nothing listens where this store points.
    asio::io_context io2;
    zk::config nowhere;
    nowhere.servers = {{"127.0.0.1", 1}};
    zk::store lone{io2, nowhere};
    test::run(io2, [&]() -> asio::awaitable<void> {
        dl::diagnostics diag;
        auto r = co_await lone.proclaim("e", dl::owner_token::generate(), 5,
                                        std::string(dl::max_leader_value_size + 1, 'x'), &diag);
        REQUIRE_FALSE(r);
        CHECK(r.error() == dl::errc::invalid_argument);
        CHECK(diag.client_message().find("65536") != std::string_view::npos);
        auto empty_id = co_await lone.leader("");
        REQUIRE_FALSE(empty_id);
        CHECK(empty_id.error() == dl::condition::invalid_argument);
        co_await lone.close();
    });
}

namespace {
// A getData answer: `data`, and a Stat with `czxid` and data version `version`.
std::string node_bytes(const std::string& data, std::int64_t czxid, std::int32_t version)
{
    zk::proto::writer w;
    w.bytes(data);
    w.i64(czxid).i64(czxid).i64(0).i64(0).i32(version).i32(0).i32(0).i64(0x5eed).i32(0).i32(0).i64(czxid);
    return w.take();
}
} // namespace

TEST_CASE("zookeeper: leader() reads any holder's data: a value only when marked as proclaimed after the create; "
          "an unreadable answer or an oversized value is a protocol error with the server's words",
          "[zookeeper][input][election]")
{
    const std::string holder = "_c_" + zk::detail::owner_uuid(std::string(32, 'c')) + "-lock-0000000003";
    struct case_ {
        const char* name;
        std::string data_reply;
        bool error;
        std::optional<std::string> value; // when no error
        const char* said;                 // when an error
    };
    const std::vector<case_> cases{
        {"Curator's address as created", node_bytes("10.0.0.1", 9, 0), false, std::nullopt, ""},
        {"the mark's shape, but as created", node_bytes("held\nv", 9, 0), false, std::nullopt, ""},
        {"the mark alone", node_bytes("held", 9, 1), false, std::nullopt, ""},
        {"a value with NUL bytes", node_bytes(std::string{"held\n\0v", 7}, 9, 2), false, std::string{"\0v", 2}, ""},
        {"data set later by another client", node_bytes("revoke", 9, 1), false, std::nullopt, ""},
        {"a value no proclaim writes", node_bytes("held\n" + std::string(dl::max_leader_value_size + 1, 'v'), 9, 1),
         true, std::nullopt, "leader's value"},
        {"the Stat cut short", node_bytes("held\nv", 9, 1).substr(0, 20), true, std::nullopt, "getData"},
        {"a trailing byte", node_bytes("held\nv", 9, 1) + "!", true, std::nullopt, "getData"},
        {"czxid 0", node_bytes("held\nv", 0, 1), true, std::nullopt, "getData"},
        {"a data length past the answer", std::string{"\x00\x10\x00\x00held", 8}, true, std::nullopt, "getData"},
    };
    for (const auto& c : cases) {
        INFO(c.name);
        asio::io_context io;
        scripted_zookeeper peer{io, [&](std::int32_t op, const std::string&) -> std::string {
            if (op == static_cast<std::int32_t>(zk::proto::op::get_children2))
                return children_bytes({"not-a-waiter", holder, std::string(32, 'd') + "-0000000007"});
            return c.data_reply;
        }};
        zk::config cfg;
        cfg.servers = {{"127.0.0.1", peer.port()}};
        cfg.prefix = "/locks";
        cfg.session_timeout = 2s;
        zk::store s{io, cfg};
        test::run(io, [&]() -> asio::awaitable<void> {
            dl::diagnostics diag;
            auto got = co_await s.leader("r", &diag);
            if (c.error) {
                REQUIRE_FALSE(got);
                CHECK(got.error() == dl::errc::protocol_error);
                CHECK(diag.server_message().find(c.said) != std::string_view::npos);
            } else {
                REQUIRE(got);
                CHECK(got->epoch == 9);
                CHECK(got->owner == "cccccccc");
                CHECK(got->value == c.value);
            }
            co_await s.close();
            peer.stop();
        });
    }
}

// -- Lock-delay --------------------------------------------------------------------

namespace {

// One request on a session of its own, straight to the server: what zk_client does not
// send (getData, setData with data).
std::optional<zk::proto::reply> raw_request(std::uint16_t port, const std::string& frame_bytes)
{
    const int fd = test::connect_loopback(port);
    if (fd < 0)
        return std::nullopt;
    std::string in;
    const auto next = [&]() -> std::optional<std::string> {
        for (;;) {
            if (in.size() >= 4) {
                zk::proto::reader r{std::string_view{in}.substr(0, 4)};
                const auto n = static_cast<std::size_t>(r.i32());
                if (in.size() >= 4 + n) {
                    auto payload = in.substr(4, n);
                    in.erase(0, 4 + n);
                    return payload;
                }
            }
            const auto more = test::read_until(fd, [](const std::string& s) { return !s.empty(); }, 5s);
            if (more.empty())
                return std::nullopt;
            in += more;
        }
    };
    const auto hello = zk::proto::encode(zk::proto::connect_request{});
    (void)!::write(fd, hello.data(), hello.size());
    std::optional<zk::proto::reply> out;
    if (next()) {
        (void)!::write(fd, frame_bytes.data(), frame_bytes.size());
        while (auto p = next()) {
            auto r = zk::proto::parse_reply(*p);
            if (r && r->xid != zk::proto::xid::notification) {
                out = std::move(r);
                break;
            }
        }
        const auto bye = zk::proto::encode_close(2);
        (void)!::write(fd, bye.data(), bye.size());
        (void)next();
    }
    ::close(fd);
    return out;
}

std::optional<zk::proto::node_data> data_at(const std::string& path)
{
    const auto r = raw_request(test::shared_zookeeper().port(), zk::proto::encode_get_data(1, path, false));
    if (!r || r->err != 0)
        return std::nullopt;
    return zk::proto::parse_get_data(r->body);
}

int create_with(const std::string& path, const std::string& data)
{
    const auto r = raw_request(test::shared_zookeeper().port(),
                               zk::proto::encode_create2(1, path, data, zk::proto::create_flags::persistent));
    return r ? r->err : -4;
}

} // namespace

TEST_CASE("zookeeper: the lock-delay mark's data: written and read strictly; no dialect reads its node as a waiter",
          "[zookeeper][input][lock-delay]")
{
    const std::string holder = "_c_" + zk::detail::owner_uuid(std::string(32, 'a')) + "-lock-0000000007";
    const zk::detail::delay_mark m{false, 2000, holder};
    const auto data = zk::detail::delay_data(m);
    CHECK(data == "distlock-delay armed 2000 " + holder);
    const auto back = zk::detail::parse_delay(data);
    REQUIRE(back);
    CHECK_FALSE(back->ended);
    CHECK(back->delay_ms == 2000);
    CHECK(back->holder == holder);
    CHECK(zk::detail::parse_delay("distlock-delay ended 5 " + holder)->ended);
    for (const std::string& bad :
         std::vector<std::string>{"", "distlock-delay armed", "distlock-delay armed 5", "distlock-delay armed x " + holder,
                                  "distlock-delay armed -5 " + holder, "distlock-delay armed 5 foreign",
                                  "distlock-delay armed 99999999999999999999 " + holder,
                                  "distlock-delay armed 5 a/" + holder, "distlock-delay gone 5 " + holder,
                                  std::string{"distlock-delay armed 5 \0", 24} + holder}) {
        INFO(bad);
        CHECK_FALSE(zk::detail::parse_delay(bad));
    }
    // The node: no sequence number, so no waiter in any dialect, and no resource's
    // holder; it sorts after every sequence number by name too.
    CHECK_FALSE(zk::detail::parse_waiter(zk::detail::delay_node));
    const std::vector<std::string> children{std::string{zk::detail::delay_node}, holder};
    CHECK(zk::detail::stand(children, {}, {}).holder == holder);
    CHECK(zk::detail::stand(children, {}, {}).queued == 1);
    CHECK(zk::detail::stand_shared(children, holder).granted);
    CHECK(std::string{zk::detail::delay_node} > "9999999999");
    for (const auto mark : {zk::detail::curator_mutex_mark, zk::detail::kazoo_lock_mark, zk::detail::kazoo_reader_mark,
                            zk::detail::reader_mark, zk::detail::writer_mark, zk::detail::permit_mark})
        CHECK(zk::detail::delay_node.find(mark) == std::string_view::npos);
}

TEST_CASE("zookeeper: lock-delay: the mark names the holder's node; a release deletes it with the node; a lost "
          "session leaves a tombstone from the server's mtime that the next head honours, then removes",
          "[zookeeper][lock-delay]")
{
    auto& server = test::shared_zookeeper();
    const auto prefix = test::fresh_zk_prefix("delay");
    asio::io_context io;
    auto a = std::make_unique<zk::store>(io, server.config(prefix));
    zk::store b{io, server.config(prefix)};
    test::run(io, [&]() -> asio::awaitable<void> {
        const std::string resource = "delay/1";
        const auto parent = zk::detail::resource_node(prefix, resource);
        const auto mark_path = parent + "/" + std::string{zk::detail::delay_node};
        const dl::lock_options delayed{.ttl = 10s, .lock_delay = 1500ms};
        dl::basic_distributed_mutex<zk::store, dl::retry::none> ma{*a, resource, delayed};
        dl::basic_distributed_mutex<zk::store, dl::retry::none> mb{b, resource, {.ttl = 10s}};
        // 1. Marked, then released: the mark goes with the node.
        auto first = co_await ma.lock();
        REQUIRE(first);
        const auto nodes = queue_of(prefix, resource);
        REQUIRE(nodes.size() == 1);
        const auto armed = data_at(mark_path);
        REQUIRE(armed);
        CHECK(armed->data == "distlock-delay armed 1500 " + nodes[0]);
        CHECK(armed->stat.ephemeral_owner == 0); // persistent: it outlives the holder's session
        { const auto ok_ = co_await first->unlock(); CHECK(ok_); }
        CHECK_FALSE(data_at(mark_path));
        // A mutex without a lock-delay writes none.
        auto plain = co_await mb.try_lock();
        REQUIRE(plain);
        CHECK_FALSE(data_at(mark_path));
        { const auto ok_ = co_await plain->unlock(); CHECK(ok_); }

        // 2. The holder's session ends (closed without releasing): the next head turns
        // the mark into a tombstone, and waits.
        auto lost = co_await ma.lock();
        REQUIRE(lost);
        // Dropped without close(): the server expires the session (its timeout, 2 s),
        // and the node goes with it; the lease cannot release it any more.
        a.reset();
        (void)co_await test::eventually("the session expired", [&] { return queue_of(prefix, resource).empty(); },
                                        test::long_enough());
        const auto ended = dl::clock::now();
        REQUIRE(data_at(mark_path));
        CHECK(data_at(mark_path)->data.starts_with("distlock-delay armed 1500 "));
        dl::diagnostics diag;
        auto refused = co_await mb.try_lock(diag);
        REQUIRE_FALSE(refused);
        CHECK(refused.error() == dl::errc::lock_delayed);
        REQUIRE(diag.lock_delay_until());
        CHECK(*diag.lock_delay_until() <= dl::clock::now() + 1500ms + 200ms);
        CHECK(*diag.lock_delay_until() >= ended + 1000ms);
        const auto tomb = data_at(mark_path);
        REQUIRE(tomb);
        CHECK(tomb->data.starts_with("distlock-delay ended 1500 "));
        // The tombstone expires by itself: the next grant after it removes it.
        dl::timer t{co_await asio::this_coro::executor, *diag.lock_delay_until()};
        co_await t.async_wait(asio::use_awaitable);
        auto after = co_await mb.try_lock();
        REQUIRE(after);
        CHECK_FALSE(data_at(mark_path));
        { const auto ok_ = co_await after->unlock(); CHECK(ok_); }
        CHECK(queue_of(prefix, resource).empty());
    });
}

TEST_CASE("zookeeper: lock-delay: a hostile or malformed mark is a protocol error with the server's bytes; a passed "
          "tombstone of any holder is removed by the next grant",
          "[zookeeper][lock-delay][input]")
{
    auto& server = test::shared_zookeeper();
    const auto prefix = test::fresh_zk_prefix("delay-bad");
    asio::io_context io;
    zk::store a{io, server.config(prefix)};
    test::run(io, [&]() -> asio::awaitable<void> {
        const std::string resource = "bad";
        const auto parent = zk::detail::resource_node(prefix, resource);
        const auto mark_path = parent + "/" + std::string{zk::detail::delay_node};
        test::zk_client c{server.port()};
        REQUIRE(c.create(prefix) == 0);
        REQUIRE(c.create(parent) == 0);
        REQUIRE(create_with(mark_path, "garbage\x01") == 0);
        dl::basic_distributed_mutex<zk::store, dl::retry::none> m{a, resource, {.ttl = 10s}};
        dl::diagnostics diag;
        auto r = co_await m.try_lock(diag);
        REQUIRE_FALSE(r);
        CHECK(r.error() == dl::errc::protocol_error);
        CHECK(diag.to_string().find("garbage%01") != std::string::npos);
        REQUIRE(c.remove(mark_path) == 0);
        // A tombstone written long ago (mtime now, delay 0): passed, removed by the grant.
        const std::string ghost = std::string(32, 'f') + "-0000000001";
        REQUIRE(create_with(mark_path, "distlock-delay ended 0 " + ghost) == 0);
        // Past its end and the clocks' margin.
        dl::timer t{co_await asio::this_coro::executor, 300ms};
        co_await t.async_wait(asio::use_awaitable);
        auto g = co_await m.try_lock();
        REQUIRE(g);
        CHECK_FALSE(c.stat(mark_path));
        { const auto ok_ = co_await g->unlock(); CHECK(ok_); }
        // A mark of a node that is gone: a tombstone of its delay, from now.
        REQUIRE(create_with(mark_path, "distlock-delay armed 60000 " + ghost) == 0);
        dl::diagnostics d2;
        auto held_back = co_await m.try_lock(d2);
        REQUIRE_FALSE(held_back);
        CHECK(held_back.error() == dl::errc::lock_delayed);
        REQUIRE(d2.lock_delay_until());
        CHECK(*d2.lock_delay_until() <= dl::clock::now() + 60s + 200ms);
        CHECK(*d2.lock_delay_until() > dl::clock::now() + 50s);
        REQUIRE(c.remove(mark_path) == 0);
    });
}
