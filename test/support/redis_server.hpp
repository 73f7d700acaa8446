// redis-server on a free loopback port, in a temporary directory, without
// persistence unless asked (a server_process: see server.hpp).
#pragma once

#include "server.hpp"

#include <distlock/redis.hpp>

#include <chrono>
#include <string>
#include <vector>

namespace test {

class redis_server : public server_process {
public:
    /// `extra`: more command-line options. With `tls`, the port serves TLS only.
    explicit redis_server(std::vector<std::string> extra = {}, bool tls = false)
        : server_process{"redis-server"}, extra_{std::move(extra)}, tls_{tls}
    {
        start_on_free_ports();
    }

    std::string url() const override { return (tls_ ? "rediss://" : "redis://") + address(); }

    distlock::redis::config config() const
    {
        distlock::redis::config c;
        c.port = port();
        c.connect_timeout = std::chrono::seconds{2};
        c.request_timeout = std::chrono::seconds{2};
        return c;
    }

protected:
    std::vector<std::string> command() const override
    {
        std::vector<std::string> argv{"redis-server", "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                                      "--dir", dir().string(), "--daemonize", "no",
                                      "--logfile", (dir() / "redis.log").string()};
        if (tls_)
            argv.insert(argv.end(), {"--port", "0", "--tls-port", std::to_string(port())});
        else
            argv.insert(argv.end(), {"--port", std::to_string(port())});
        argv.insert(argv.end(), extra_.begin(), extra_.end());
        return argv;
    }
    std::chrono::milliseconds ready_limit() const override { return std::chrono::seconds{10}; }

private:
    std::vector<std::string> extra_;
    bool tls_;
};

static_assert(launcher<redis_server>);

} // namespace test
