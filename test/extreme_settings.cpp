// Every store's duration settings at the limits of their type: the minimum and the
// maximum, zero, a nanosecond below zero and the library's max_wait, with no server
// listening (a loopback port nothing listens on). Each is refused with
// errc::invalid_argument (when the store is made, or at its first request for a
// store that checks per request), or taken, in which case the store's bound on an
// operation is defined (its sums saturate: UBSan fails this test on an overflow) and
// a try_lock() fails without hanging and leaves the store closable.
#include <distlock/distlock.hpp>
#include <distlock/memory.hpp>
#include <distlock/redis.hpp>
#if defined(DISTLOCK_TEST_ETCD)
#include <distlock/etcd.hpp>
#endif
#if defined(DISTLOCK_TEST_ZOOKEEPER)
#include <distlock/zookeeper.hpp>
#endif
#if defined(DISTLOCK_TEST_POSTGRES)
#include <distlock/postgres.hpp>
#endif
#if defined(DISTLOCK_TEST_DYNAMODB)
#include <distlock/dynamodb.hpp>
#endif

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/io_context.hpp>
#include <catch2/catch.hpp>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

namespace dl = distlock;
using namespace std::chrono_literals;

namespace {

// Nothing listens on port 1 of the loopback address (binding it needs privileges that
// no test server here takes): a connection is refused at once.
constexpr std::uint16_t closed_port = 1;

const std::vector<dl::duration> limits{dl::duration::min(), -1ns, dl::duration::zero(), dl::duration::max(),
                                       dl::max_wait};

std::string describe(dl::duration d)
{
    return std::to_string(d.count()) + " ns";
}

// Whether a store's server listens: the in-process session server always does.
enum class server { none, in_process };

// Makes a store with `cfg` (and `extra` before it, for a store that takes one), then
// tries the lock once and closes the store.
template <class Store, class Config, class... Extra>
void try_settings(server there, const Config& cfg, const std::string& field, dl::duration value, Extra&... extra)
{
    INFO(field << " = " << describe(value));
    const bool refused = static_cast<bool>(cfg.validate());
    asio::io_context io;
    std::unique_ptr<Store> store;
    try {
        store = std::make_unique<Store>(io, extra..., cfg);
    } catch (const std::system_error& e) {
        CHECK(e.code() == dl::errc::invalid_argument);
        return;
    }
    if (!refused) // settings it refuses bound nothing: every request fails before any I/O
        CHECK(store->operation_timeout() >= dl::duration::zero());
    std::optional<std::error_code> got;
    asio::co_spawn(io, [&]() -> asio::awaitable<void> {
        dl::basic_distributed_mutex<Store> m{*store, "extreme-settings"};
        auto l = co_await m.try_lock();
        got = l ? std::error_code{} : l.error();
        co_await store->close();
    }, asio::detached);
    io.run_for(60s);
    REQUIRE(got);
    if (refused)
        CHECK(*got == dl::errc::invalid_argument);
    else if (there == server::none)
        CHECK(*got); // the lock cannot have been granted
    CHECK(io.stopped()); // close() left nothing running
}

template <class Store, class Config, class... Extra>
void try_every_field(server there, const Config& base,
                     const std::vector<std::pair<std::string, dl::duration Config::*>>& fields, Extra&... extra)
{
    for (const auto& [name, field] : fields)
        for (const auto value : limits) {
            auto cfg = base;
            cfg.*field = value;
            try_settings<Store>(there, cfg, name, value, extra...);
        }
}

} // namespace

TEST_CASE("extreme settings: memory session store", "[extreme_settings]")
{
    dl::memory::session_server server;
    try_every_field<dl::memory::session_store>(server::in_process, dl::memory::session_config{},
                                               {{"session_ttl", &dl::memory::session_config::session_ttl},
                                                {"keepalive_every", &dl::memory::session_config::keepalive_every},
                                                {"drift", &dl::memory::session_config::drift}},
                                               server);
}

TEST_CASE("extreme settings: Redis", "[extreme_settings]")
{
    dl::redis::config base;
    base.port = closed_port;
    using C = dl::redis::config;
    try_every_field<dl::redis::store>(server::none, base, {{"connect_timeout", &C::connect_timeout},
                                             {"request_timeout", &C::request_timeout},
                                             {"queue_ttl", &C::queue_ttl},
                                             {"listen_linger", &C::listen_linger},
                                             {"wait_timeout", &C::wait_timeout}});
}

#if defined(DISTLOCK_TEST_ETCD)
TEST_CASE("extreme settings: etcd", "[extreme_settings]")
{
    dl::etcd::config base;
    base.members = {dl::etcd::member{"127.0.0.1", closed_port}};
    using C = dl::etcd::config;
    try_every_field<dl::etcd::store>(server::none, base, {{"session_ttl", &C::session_ttl},
                                            {"keepalive_every", &C::keepalive_every},
                                            {"drift", &C::drift},
                                            {"connect_timeout", &C::connect_timeout},
                                            {"request_timeout", &C::request_timeout}});
}
#endif

#if defined(DISTLOCK_TEST_ZOOKEEPER)
TEST_CASE("extreme settings: ZooKeeper", "[extreme_settings]")
{
    dl::zookeeper::config base;
    base.servers = {dl::zookeeper::server{"127.0.0.1", closed_port}};
    using C = dl::zookeeper::config;
    try_every_field<dl::zookeeper::store>(server::none, base, {{"session_timeout", &C::session_timeout},
                                                 {"drift", &C::drift},
                                                 {"connect_timeout", &C::connect_timeout},
                                                 {"request_timeout", &C::request_timeout}});
}
#endif

#if defined(DISTLOCK_TEST_POSTGRES)
TEST_CASE("extreme settings: PostgreSQL", "[extreme_settings]")
{
    dl::postgres::config base;
    base.conninfo = "hostaddr=127.0.0.1 port=" + std::to_string(closed_port) + " dbname=postgres";
    using C = dl::postgres::config;
    try_every_field<dl::postgres::store>(server::none, base, {{"connect_timeout", &C::connect_timeout},
                                                {"statement_timeout", &C::statement_timeout},
                                                {"keepalive_idle", &C::keepalive_idle},
                                                {"keepalive_interval", &C::keepalive_interval},
                                                {"tcp_user_timeout", &C::tcp_user_timeout},
                                                {"ping_interval", &C::ping_interval},
                                                {"in_doubt_after", &C::in_doubt_after},
                                                {"client_check_interval", &C::client_check_interval}});
}
#endif

#if defined(DISTLOCK_TEST_DYNAMODB)
TEST_CASE("extreme settings: DynamoDB", "[extreme_settings]")
{
    dl::dynamodb::config base;
    base.port = closed_port;
    base.credentials = {"AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", {}};
    using C = dl::dynamodb::config;
    try_every_field<dl::dynamodb::store>(server::none, base, {{"connect_timeout", &C::connect_timeout},
                                                {"request_timeout", &C::request_timeout},
                                                {"clock_skew_margin", &C::clock_skew_margin}});
}
#endif
