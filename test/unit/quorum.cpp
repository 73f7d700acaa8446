// Redlock over several in-process stores: majority, failure cleanup, fencing across
// restarts, votes reported.
#include "support.hpp"

using namespace test;
using quorum_store = dl::quorum<dl::memory::store>;
using redlock = dl::basic_distributed_mutex<quorum_store, dl::acquire::quorum<dl::acquire::setnx>,
                                            dl::observe::callback, dl::retry::none>;

namespace {
struct five_nodes {
    asio::io_context io;
    dl::memory::store n1{io}, n2{io}, n3{io}, n4{io}, n5{io};
    quorum_store nodes{n1, n2, n3, n4, n5};
    std::array<dl::memory::store*, 5> all{&n1, &n2, &n3, &n4, &n5};
    std::size_t holding(std::string_view resource) const
    {
        return static_cast<std::size_t>(
            std::count_if(all.begin(), all.end(), [&](auto* s) { return s->inspect(resource).has_value(); }));
    }
};
} // namespace

TEST_CASE("quorum: 2 of 5 stores down still locks; 3 of 5 down fails cleanly", "[quorum]")
{
    five_nodes q;
    recorder rec;
    redlock m{q.nodes, "job:nightly", {.ttl = 30s}, rec.observer()};

    SECTION("2 down")
    {
        q.n2.set_online(false);
        q.n5.set_online(false);
        run(q.io, [&]() -> asio::awaitable<void> {
            auto lease = co_await m.lock();
            REQUIRE(lease);
            CHECK(q.holding("job:nightly") == 3);
            CHECK(rec.of<dl::vote_event>().size() >= 3);
            // Extensions count with a majority too.
            {
                auto outcome = co_await lease->unlock();
                REQUIRE(outcome);
            }
            CHECK(q.holding("job:nightly") == 0);
        });
    }
    SECTION("3 down: quorum_not_reached, and the two grants are given back")
    {
        q.n1.set_online(false);
        q.n2.set_online(false);
        q.n3.set_online(false);
        run(q.io, [&]() -> asio::awaitable<void> {
            auto lease = co_await m.lock();
            REQUIRE_FALSE(lease);
            CHECK(lease.error() == dl::errc::quorum_not_reached);
        });
        CHECK(q.holding("job:nightly") == 0);
    }
    SECTION("held by another on a majority: contended")
    {
        run(q.io, [&]() -> asio::awaitable<void> {
            auto first = co_await m.lock();
            REQUIRE(first);
            auto second = co_await m.try_lock();
            REQUIRE_FALSE(second);
            CHECK(second.error() == dl::errc::contended);
            CHECK(q.holding("job:nightly") == 5);
        });
    }
}

TEST_CASE("quorum: a slow node's late grant is released, not left held", "[quorum]")
{
    five_nodes q;
    q.n4.set_reply_delay(100ms);
    q.n5.set_reply_delay(100ms);
    redlock m{q.nodes, "r", {.ttl = 30s}, dl::observe::callback{}};
    run(q.io, [&]() -> asio::awaitable<void> {
        auto lease = co_await m.lock();
        REQUIRE(lease); // decided by the three fast nodes
        {
            auto outcome = co_await lease->unlock();
            REQUIRE(outcome);
        }
        co_await settle(300ms); // the slow nodes answer
        CHECK(q.holding("r") == 0);
    });
}

TEST_CASE("quorum: unlock() is done once a majority released; a failure waits for every node", "[quorum]")
{
    five_nodes q;
    redlock m{q.nodes, "r", {.ttl = 30s}, dl::observe::callback{}};

    SECTION("two nodes that answer in an hour hold up neither lock() nor unlock()")
    {
        q.n4.set_reply_delay(1h);
        q.n5.set_reply_delay(1h);
        run(q.io, [&]() -> asio::awaitable<void> {
            auto lease = co_await m.lock();
            REQUIRE(lease);
            auto outcome = co_await lease->unlock(); // run() fails the test if this waits for n4 and n5
            REQUIRE(outcome);
        });
        // The slow nodes applied the release when it reached them; only their replies wait.
        CHECK(q.holding("r") == 0);
    }
    SECTION("a slow node's release runs on as its store's background work: close() waits for it")
    {
        q.n5.set_reply_delay(200ms);
        run(q.io, [&]() -> asio::awaitable<void> {
            auto lease = co_await m.lock();
            REQUIRE(lease);
            auto outcome = co_await lease->unlock();
            REQUIRE(outcome);
            // Its replies (the grant's, the release's) are still on their way: counted.
            CHECK(q.n5.lifetime()->background_work() >= 1);
            co_await q.n5.close();
            CHECK(q.n5.lifetime()->background_work() == 0);
        });
    }
    SECTION("the only node that released is the slowest: still a success")
    {
        run(q.io, [&]() -> asio::awaitable<void> {
            auto lease = co_await m.lock();
            REQUIRE(lease);
            for (auto* s : {&q.n1, &q.n2, &q.n3, &q.n4})
                s->set_online(false);
            q.n5.set_reply_delay(100ms);
            auto outcome = co_await lease->unlock();
            CHECK(outcome);
        });
        CHECK(q.holding("r") == 4); // the offline nodes kept theirs until their TTL
    }
}

TEST_CASE("quorum: fencing tokens keep growing when a minority restarts empty", "[quorum][fencing]")
{
    five_nodes q;
    redlock m{q.nodes, "r", {.ttl = 30s}, dl::observe::callback{}};
    run(q.io, [&]() -> asio::awaitable<void> {
        dl::fence_token last = 0;
        for (int round = 0; round < 10; ++round) {
            // Two nodes miss this acquisition...
            q.all[round % 5]->set_online(false);
            q.all[(round + 1) % 5]->set_online(false);
            auto lease = co_await m.lock();
            REQUIRE(lease);
            CHECK(lease->fence() > last);
            last = lease->fence();
            {
                auto outcome = co_await lease->unlock();
                REQUIRE(outcome);
            }
            q.all[round % 5]->set_online(true);
            q.all[(round + 1) % 5]->set_online(true);
            // ...and another restarts empty.
            q.all[(round + 3) % 5]->lose_state();
        }
    });
}

TEST_CASE("quorum: a majority restarting empty can make tokens go back (documented limit)",
          "[quorum][fencing]")
{
    five_nodes q;
    redlock m{q.nodes, "r", {.ttl = 30s}, dl::observe::callback{}};
    run(q.io, [&]() -> asio::awaitable<void> {
        auto first = co_await m.lock();
        REQUIRE(first);
        const auto token = first->fence();
        {
            auto outcome = co_await first->unlock();
            REQUIRE(outcome);
        }
        q.n1.set_online(false);
        q.n2.set_online(false);
        for (auto* s : {&q.n3, &q.n4, &q.n5})
            s->lose_state();
        auto second = co_await m.lock();
        REQUIRE(second);
        CHECK(second->fence() <= token); // the violation this limit allows
    });
}

TEST_CASE("quorum: the same store twice is refused before any I/O", "[quorum]")
{
    asio::io_context io;
    dl::memory::store a{io}, b{io};
    quorum_store twice{a, a, b};
    run(io, [&]() -> asio::awaitable<void> {
        redlock m{twice, "job", {.ttl = 10s}};
        a.fail_next(dl::memory::fault::unavailable); // still pending afterwards: nothing was sent
        auto r = co_await m.lock();
        REQUIRE_FALSE(r);
        CHECK(r.error() == dl::errc::invalid_argument);
        CHECK(a.live_locks() == 0);
        CHECK(b.live_locks() == 0);
        auto probe = co_await a.put_if_absent("probe", dl::owner_token::generate(), 1s);
        CHECK_FALSE(probe); // the injected fault was still there
    });
}
