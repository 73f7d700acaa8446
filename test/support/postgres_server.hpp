// A private PostgreSQL cluster for the tests (server.hpp): initdb in a temporary
// directory, the server on a free loopback port, one per test run (shared_postgres()),
// stopped by pid (SIGINT: fast shutdown) at exit and killed with the test process if
// that dies first. PostgreSQL refuses to run as root, so as root both run as the
// `postgres` user (spawn_options::user).
#pragma once

#include "server.hpp"

#include <distlock/postgres.hpp>

#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace test {

inline std::string postgres_bin(const std::string& tool)
{
    for (const char* dir : {"/usr/lib/postgresql/15/bin", "/usr/lib/postgresql/16/bin", "/usr/lib/postgresql/17/bin"})
        if (std::filesystem::exists(std::filesystem::path{dir} / tool))
            return (std::filesystem::path{dir} / tool).string();
    return tool;
}

/// How PostgreSQL's programs run: as `postgres` when the tests run as root, from a
/// directory that user may enter.
inline spawn_options as_postgres() { return {.pipes = false, .user = "postgres", .workdir = "/"}; }

class postgres_server : public server_process {
public:
    postgres_server() : server_process{"postgres", false, SIGINT} // SIGINT: fast shutdown
    {
        const bool root = ::geteuid() == 0;
        const passwd* pw = root ? ::getpwnam("postgres") : nullptr;
        if (root && !pw)
            throw std::runtime_error{"no postgres user (install postgresql-15)"};
        const auto owned = [&](const std::filesystem::path& p) {
            if (pw)
                (void)::chown(p.c_str(), pw->pw_uid, pw->pw_gid);
        };
        owned(dir());
        const auto data = (dir() / "data").string();
        {
            child init{{postgres_bin("initdb"), "-D", data, "-U", "postgres", "-A", "trust", "-E", "UTF8",
                        "--locale=C", "--no-sync", "--no-instructions"},
                       as_postgres()};
            const auto status = init.wait(std::chrono::seconds{120});
            if (!status || *status != 0)
                throw std::runtime_error{"initdb failed"};
        }
        // A self-signed certificate, so that clients may connect with TLS (or not).
        {
            child make_cert{{"openssl", "req", "-new", "-x509", "-days", "2", "-nodes", "-subj", "/CN=127.0.0.1",
                             "-newkey", "rsa:2048", "-keyout", data + "/server.key", "-out", data + "/server.crt"},
                            false};
            const auto status = make_cert.wait(std::chrono::seconds{60});
            if (!status || *status != 0)
                throw std::runtime_error{"openssl could not make the server certificate"};
            ::chmod((data + "/server.key").c_str(), 0600);
            owned(data + "/server.key");
            owned(data + "/server.crt");
        }
        // Trust for every role but `locker`, which must log in with SCRAM (its
        // password is set by the tests that use it).
        {
            std::ofstream hba{std::filesystem::path{data} / "pg_hba.conf", std::ios::trunc};
            hba << "local all all trust\n"
                   "host all locker 127.0.0.1/32 scram-sha-256\n"
                   "host all all 127.0.0.1/32 trust\n";
        }
        start_on_free_ports();
    }
    ~postgres_server() override { stop(); }

    std::string url() const override
    {
        return "postgres://postgres@" + address() + "/postgres?sslmode=disable";
    }
    /// The server's self-signed certificate (its own CA, for sslmode=verify-ca).
    std::string certificate() const { return (dir() / "data" / "server.crt").string(); }

    /// A connection string to this cluster, through `port` (a fault proxy's) if given.
    std::string conninfo(std::optional<std::uint16_t> through = std::nullopt) const
    {
        return "hostaddr=127.0.0.1 port=" + std::to_string(through.value_or(port())) +
               " user=postgres dbname=postgres sslmode=disable";
    }

    /// Store settings with short timeouts, a table of the caller's.
    distlock::postgres::config config(std::string table, std::optional<std::uint16_t> through = std::nullopt) const
    {
        distlock::postgres::config c;
        c.conninfo = conninfo(through);
        c.table = std::move(table);
        c.connect_timeout = std::chrono::seconds{3};
        c.statement_timeout = std::chrono::seconds{3};
        c.keepalive_idle = std::chrono::seconds{1};
        c.keepalive_interval = std::chrono::seconds{1};
        c.keepalive_count = 2;
        c.tcp_user_timeout = std::chrono::seconds{3};
        c.ping_interval = std::chrono::milliseconds{200};
        c.in_doubt_after = std::chrono::seconds{2};
        c.client_check_interval = std::chrono::milliseconds{100};
        return c;
    }

protected:
    std::vector<std::string> command() const override
    {
        return {postgres_bin("postgres"), "-D", (dir() / "data").string(), "-p", std::to_string(port()), "-k",
                dir().string(), "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c",
                "synchronous_commit=off", "-c", "full_page_writes=off", "-c", "max_connections=300", "-c", "ssl=on"};
    }
    spawn_options options() const override { return as_postgres(); }
    /// Serving: the port accepts and pg_isready says so.
    bool ready() const override
    {
        if (!port_accepts(port()))
            return false;
        child probe{{postgres_bin("pg_isready"), "-h", "127.0.0.1", "-p", std::to_string(port()), "-U", "postgres"},
                    false};
        const auto status = probe.wait(std::chrono::seconds{10});
        return status && *status == 0;
    }
    std::chrono::milliseconds ready_limit() const override { return std::chrono::seconds{30}; }
};

static_assert(launcher<postgres_server>);

/// The test run's cluster, started on first use.
inline postgres_server& shared_postgres()
{
    static postgres_server server;
    return server;
}

/// A table name no other test of this run uses.
inline std::string fresh_table(const char* prefix = "t")
{
    auto suffix = unique_suffix();
    std::replace(suffix.begin(), suffix.end(), '-', '_');
    return std::string{prefix} + "_" + suffix;
}

} // namespace test
