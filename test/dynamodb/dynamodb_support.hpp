// Shared by the DynamoDB tests and fixtures: the lock table made on a dynalite server,
// and requests sent behind the clients' backs.
#pragma once

#include "dynalite_server.hpp"
#include "support.hpp"

#include <distlock/dynamodb.hpp>

#include <nlohmann/json.hpp>

#include <string_view>

namespace test::dynamodb_tests {

namespace dl = distlock;
namespace ddb = distlock::dynamodb;
using namespace std::chrono_literals;

// Makes the table (once per server) through a store of its own.
inline void create_table(const dynalite_server& server)
{
    asio::io_context io;
    ddb::store s{io, server.config()};
    test::run(io, [&]() -> asio::awaitable<void> {
        dl::diagnostics diag;
        auto made = co_await s.create_table(30s, &diag);
        INFO(diag.to_string());
        REQUIRE(made);
        co_await s.close();
    });
}

// One request on a connection of its own, for the fixture's look behind the clients.
inline dl::result<nlohmann::json> direct(const dynalite_server& server, std::string_view operation, nlohmann::json body)
{
    asio::io_context io;
    ddb::store s{io, server.config()};
    dl::result<nlohmann::json> out{make_error_code(dl::errc::store_unavailable)};
    test::run(io, [&]() -> asio::awaitable<void> {
        out = co_await s.execute(operation, std::move(body));
        co_await s.close();
    });
    return out;
}

inline nlohmann::json key_of(std::string_view resource)
{
    return {{"resource", {{"B", ddb::detail::base64(resource)}}}};
}

} // namespace test::dynamodb_tests
