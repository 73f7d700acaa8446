// dynalite (the DynamoDB API on node, in memory) started by a test on a free
// loopback port (server.hpp). Installed by the build from
// test/dynamodb/package-lock.json; DISTLOCK_DYNALITE_CLI is its cli.js. In memory:
// a restart starts empty.
#pragma once

#include "server.hpp"

#include <distlock/dynamodb.hpp>

#include <chrono>
#include <string>
#include <vector>

namespace test {

class dynalite_server : public server_process {
public:
    dynalite_server() : server_process{"dynalite"} { start_on_free_ports(); }

    std::string url() const override { return "dynamodb://" + address() + "?table=distlock_test"; }

    /// A store's settings for this server and `table` (fixed test credentials:
    /// dynalite checks that a request is signed, not the signature).
    distlock::dynamodb::config config(std::string table = "distlock_test") const
    {
        distlock::dynamodb::config c;
        c.port = port();
        c.table = std::move(table);
        c.region = "us-east-1";
        c.credentials = {"AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", ""};
        c.connect_timeout = std::chrono::seconds{2};
        c.request_timeout = std::chrono::seconds{2};
        return c;
    }

protected:
    std::vector<std::string> command() const override
    {
        return {"node", DISTLOCK_DYNALITE_CLI, "--host", "127.0.0.1", "--port", std::to_string(port()),
                "--createTableMs", "0"};
    }
};

static_assert(launcher<dynalite_server>);

} // namespace test
