// dynalite (the DynamoDB API on node, in memory) started by a test on a free
// loopback port and stopped (SIGKILL) by pid with the object. Installed by the
// build from test/dynamodb/package-lock.json; DISTLOCK_DYNALITE_CLI is its cli.js.
#pragma once

#include "process.hpp"

#include <distlock/dynamodb.hpp>

#include <chrono>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>

namespace test {

class dynalite_server {
public:
    dynalite_server() : port_{free_port()} { start(); }

    std::uint16_t port() const { return port_; }

    /// A store's settings for this server and `table` (fixed test credentials:
    /// dynalite checks that a request is signed, not the signature).
    distlock::dynamodb::config config(std::string table = "distlock_test") const
    {
        distlock::dynamodb::config c;
        c.port = port_;
        c.table = std::move(table);
        c.region = "us-east-1";
        c.credentials = {"AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", ""};
        c.connect_timeout = std::chrono::seconds{2};
        c.request_timeout = std::chrono::seconds{2};
        return c;
    }

    void pause() { process_->kill(SIGSTOP); }
    void resume() { process_->kill(SIGCONT); }

private:
    void start()
    {
        process_.emplace(std::vector<std::string>{"node", DISTLOCK_DYNALITE_CLI, "--host", "127.0.0.1", "--port",
                                                  std::to_string(port_), "--createTableMs", "0"},
                         false);
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds{20};
        while (!port_accepts(port_)) {
            if (std::chrono::steady_clock::now() > deadline || process_->wait(std::chrono::milliseconds{0}))
                throw std::runtime_error{"dynalite did not start on port " + std::to_string(port_)};
            std::this_thread::sleep_for(std::chrono::milliseconds{20});
        }
    }

    std::uint16_t port_;
    std::optional<child> process_;
};

} // namespace test
