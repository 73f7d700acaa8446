// A private PostgreSQL cluster for the tests: initdb in a temporary directory owned
// by the `postgres` user, the server on a free loopback port, one per test run
// (shared_cluster()), stopped by pid (SIGINT: fast shutdown) at exit, and killed with
// the test process if that dies first. PostgreSQL refuses to run as root, so as root
// both run as `postgres` (postgres_process).
#pragma once

#include "process.hpp"

#include <distlock/postgres.hpp>

#include <grp.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <pwd.h>
#include <sys/stat.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace test {

inline std::string postgres_bin(const std::string& tool)
{
    for (const char* dir : {"/usr/lib/postgresql/15/bin", "/usr/lib/postgresql/16/bin", "/usr/lib/postgresql/17/bin"})
        if (std::filesystem::exists(std::filesystem::path{dir} / tool))
            return (std::filesystem::path{dir} / tool).string();
    return tool;
}

/// A process run as the `postgres` user when this process is root. The user is
/// switched in the child itself, and the parent-death signal set after that (a
/// change of credentials clears it, which is why setpriv or runuser would leave the
/// server running if the test process died): the server never outlives the tests.
class postgres_process {
public:
    explicit postgres_process(std::vector<std::string> argv)
    {
        const passwd* pw = ::geteuid() == 0 ? ::getpwnam("postgres") : nullptr;
        if (::geteuid() == 0 && !pw)
            throw std::runtime_error{"no postgres user (install postgresql-15)"};
        const uid_t uid = pw ? pw->pw_uid : 0;
        const gid_t gid = pw ? pw->pw_gid : 0;
        const pid_t parent = ::getpid();
        pid_ = ::fork();
        if (pid_ < 0)
            throw std::runtime_error{"fork failed"};
        if (pid_ == 0) {
            if (pw && (::setgroups(0, nullptr) != 0 || ::setgid(gid) != 0 || ::setuid(uid) != 0))
                ::_exit(126);
            ::prctl(PR_SET_PDEATHSIG, SIGKILL);
            if (::getppid() != parent) // the test process died before the signal was set
                ::_exit(125);
            if (::chdir("/") != 0) // the test's directory may be closed to the postgres user
                ::_exit(124);
            const int devnull = ::open("/dev/null", O_RDWR);
            ::dup2(devnull, 0);
            ::dup2(devnull, 1);
            ::dup2(devnull, 2);
            std::vector<char*> args;
            for (auto& a : argv)
                args.push_back(a.data());
            args.push_back(nullptr);
            ::execv(args[0], args.data());
            ::_exit(127);
        }
    }
    postgres_process(const postgres_process&) = delete;
    postgres_process& operator=(const postgres_process&) = delete;
    ~postgres_process()
    {
        kill(SIGKILL);
        wait();
    }

    pid_t pid() const { return pid_; }
    void kill(int sig)
    {
        if (pid_ > 0 && !status_)
            ::kill(pid_, sig);
    }
    /// The exit status, once it exited (waiting at most `limit`).
    std::optional<int> wait(std::chrono::milliseconds limit = std::chrono::seconds{10})
    {
        const auto deadline = std::chrono::steady_clock::now() + limit;
        while (!status_ && pid_ > 0) {
            int st = 0;
            if (::waitpid(pid_, &st, WNOHANG) == pid_) {
                status_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
                break;
            }
            if (std::chrono::steady_clock::now() >= deadline)
                break;
            std::this_thread::sleep_for(std::chrono::milliseconds{5});
        }
        return status_;
    }

private:
    pid_t pid_ = -1;
    std::optional<int> status_;
};

class postgres_cluster {
public:
    postgres_cluster() : port_{free_port()}
    {
        as_postgres_ = ::geteuid() == 0;
        if (as_postgres_) {
            const passwd* pw = ::getpwnam("postgres");
            if (!pw)
                throw std::runtime_error{"no postgres user (install postgresql-15)"};
            ::chown(dir_.path().c_str(), pw->pw_uid, pw->pw_gid);
        }
        const auto data = (dir_.path() / "data").string();
        {
            postgres_process init{{postgres_bin("initdb"), "-D", data, "-U", "postgres", "-A", "trust", "-E", "UTF8",
                                   "--locale=C", "--no-sync", "--no-instructions"}};
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
            if (as_postgres_) {
                const passwd* pw = ::getpwnam("postgres");
                ::chown((data + "/server.key").c_str(), pw->pw_uid, pw->pw_gid);
                ::chown((data + "/server.crt").c_str(), pw->pw_uid, pw->pw_gid);
            }
        }
        // Trust for every role but `locker`, which must log in with SCRAM (its
        // password is set by the tests that use it).
        {
            std::ofstream hba{std::filesystem::path{data} / "pg_hba.conf", std::ios::trunc};
            hba << "local all all trust\n"
                   "host all locker 127.0.0.1/32 scram-sha-256\n"
                   "host all all 127.0.0.1/32 trust\n";
        }
        start();
    }
    ~postgres_cluster() { stop(); }
    postgres_cluster(const postgres_cluster&) = delete;
    postgres_cluster& operator=(const postgres_cluster&) = delete;

    std::uint16_t port() const { return port_; }
    /// The server's self-signed certificate (its own CA, for sslmode=verify-ca).
    std::string certificate() const { return (dir_.path() / "data" / "server.crt").string(); }
    pid_t pid() const { return server_ ? server_->pid() : -1; }

    /// A connection string to this cluster, through `port` (a fault proxy's) if given.
    std::string conninfo(std::optional<std::uint16_t> through = std::nullopt) const
    {
        return "hostaddr=127.0.0.1 port=" + std::to_string(through.value_or(port_)) +
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

    void stop()
    {
        if (!server_)
            return;
        server_->kill(SIGINT); // fast shutdown: backends are terminated, clients see FATAL 57P01
        if (!server_->wait(std::chrono::seconds{20}))
            server_->kill(SIGKILL);
        server_.reset();
    }

    /// Stops and starts the server again, same port and data.
    void restart()
    {
        stop();
        start();
    }

    void pause() { server_->kill(SIGSTOP); }
    void resume() { server_->kill(SIGCONT); }

private:
    void start()
    {
        for (int attempt = 0; attempt < 5; ++attempt) {
            server_.emplace(std::vector<std::string>{
                postgres_bin("postgres"), "-D", (dir_.path() / "data").string(), "-p", std::to_string(port_), "-k",
                dir_.path().string(), "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c",
                "synchronous_commit=off", "-c", "full_page_writes=off", "-c", "max_connections=300", "-c", "ssl=on"});
            const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds{30};
            while (std::chrono::steady_clock::now() < deadline) {
                if (server_->wait(std::chrono::milliseconds{0}))
                    break; // exited: the port was taken, try another
                if (port_accepts(port_) && ready())
                    return;
                std::this_thread::sleep_for(std::chrono::milliseconds{20});
            }
            server_.reset();
            port_ = free_port();
        }
        throw std::runtime_error{"postgres did not start"};
    }

    bool ready() const
    {
        child probe{{postgres_bin("pg_isready"), "-h", "127.0.0.1", "-p", std::to_string(port_), "-U", "postgres"},
                    false};
        const auto status = probe.wait(std::chrono::seconds{10});
        return status && *status == 0;
    }

    temp_dir dir_;
    bool as_postgres_ = false;
    std::uint16_t port_;
    std::optional<postgres_process> server_;
};

/// The test run's cluster, started on first use.
inline postgres_cluster& shared_cluster()
{
    static postgres_cluster cluster;
    return cluster;
}

/// A table name no other test of this run uses.
inline std::string fresh_table(const char* prefix = "t")
{
    static std::atomic<int> counter{0};
    return std::string{prefix} + "_" + std::to_string(::getpid()) + "_" + std::to_string(++counter);
}

} // namespace test
