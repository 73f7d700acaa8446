// Redlock quorums of Redis servers that are one server reached twice: refused when
// locking, counted once when extending.
#include "eventually.hpp"
#include "redis/redis_support.hpp"

namespace {

using namespace std::chrono_literals;
namespace dl = distlock;

// Each node takes shared grants, a quorum does not (refused at compile time): a
// count of permits and a writer's intent need one store's view of the holders, which
// a majority of nodes does not give.
static_assert(dl::shared_lease_store<dl::redis::store>);
static_assert(!dl::shared_lease_store<dl::quorum<dl::redis::store>>);
static_assert(!dl::shared_backend<dl::quorum<dl::redis::store>>);

} // namespace

TEST_CASE("redis: a quorum made of one server twice is refused, whatever the database or key prefix",
          "[redis][quorum]")
{
    test::redis_server one, other;
    asio::io_context io;
    auto same_db1 = one.config();
    same_db1.database = 1;
    auto same_prefix = one.config();
    same_prefix.key_prefix = "elsewhere";
    for (const auto& twin : {same_db1, same_prefix}) {
        dl::redis::store a{io, one.config()}, b{io, twin}, c{io, other.config()};
        dl::quorum<dl::redis::store> nodes{a, b, c};
        dl::basic_distributed_mutex<dl::quorum<dl::redis::store>, dl::retry::none> m{nodes, "twin:job", {.ttl = 10s}};
        test::run(io, [&]() -> asio::awaitable<void> {
            // The first attempt connects every node; a twin that answers after a
            // majority of distinct nodes decided is found from the next attempt on.
            auto first = co_await m.lock();
            if (first) {
                auto u = co_await first->unlock();
                CHECK(u);
            } else {
                CHECK(first.error() == dl::errc::invalid_argument);
            }
            auto r = co_await m.lock();
            REQUIRE_FALSE(r);
            CHECK(r.error() == dl::errc::invalid_argument);
            // Nothing is left on the server reached twice, nor on the other: a quorum
            // gives a majority back at once and the other nodes as their releases,
            // the stores' background work, arrive (well within the 10 s TTL).
            (void)co_await test::eventually("the twin's lock given back on both servers", [&] {
                return !test::holds(one, "twin:job") && !test::holds(other, "twin:job");
            }, test::long_enough());
        });
    }
    // With the other server down, one server twice must not make a majority.
    {
        dl::redis::store a{io, one.config()}, b{io, same_prefix};
        auto down = other.config();
        down.port = test::free_port();
        down.connect_timeout = 300ms;
        dl::redis::store c{io, down};
        dl::quorum<dl::redis::store> nodes{a, b, c};
        dl::basic_distributed_mutex<dl::quorum<dl::redis::store>, dl::retry::none> m{nodes, "twin:job", {.ttl = 10s}};
        test::run(io, [&]() -> asio::awaitable<void> {
            // Both twins must grant for a majority here, so they are compared at once.
            auto r = co_await m.lock();
            REQUIRE_FALSE(r);
            CHECK(r.error() == dl::errc::invalid_argument);
            (void)co_await test::eventually("the twins' grants given back", [&] { return !test::holds(one, "twin:job"); },
                                            test::long_enough());
        });
    }
    // Three distinct servers still lock.
    test::redis_server third;
    dl::redis::store a{io, one.config()}, b{io, other.config()}, c{io, third.config()};
    dl::quorum<dl::redis::store> nodes{a, b, c};
    dl::basic_distributed_mutex<dl::quorum<dl::redis::store>, dl::retry::none> m{nodes, "twin:job", {.ttl = 10s}};
    test::run(io, [&]() -> asio::awaitable<void> {
        auto r = co_await m.lock();
        REQUIRE(r);
        auto u = co_await r->unlock();
        CHECK(u);
    });
}

TEST_CASE("redis: a server reached through two nodes counts once when a lease is extended", "[redis][quorum]")
{
    test::redis_server one, other;
    asio::io_context io;
    // a and c are one server. The lock is taken by a distinct majority (one node of
    // the twins grants, the other finds the key held), then the other server dies:
    // the twins' two extensions must not make a majority on their own.
    dl::redis::store a{io, one.config()}, b{io, other.config()}, c{io, one.config()};
    dl::quorum<dl::redis::store> nodes{a, b, c};
    dl::basic_distributed_mutex<dl::quorum<dl::redis::store>, dl::renew::watchdog, dl::retry::none> m{
        nodes, "twin:extend", {.ttl = 1500ms}};
    test::run(io, [&]() -> asio::awaitable<void> {
        auto l = co_await m.lock();
        REQUIRE(l);
        other.kill();
        (void)co_await test::eventually("!l->valid()", [&] { return !l->valid(); }, test::steps{.max = 2500});
        (void)co_await l->unlock();
        // Released, or gone with its TTL.
        (void)co_await test::eventually("!test::holds(one)", [&] { return !test::holds(one, "twin:extend"); },
                                        test::steps{.max = 2500});
    });
}
