// The one interface of the servers the tests start (redis-server, etcd, ZooKeeper,
// PostgreSQL, dynalite): each runs as a child process on a free loopback port with
// its files in a temporary directory, and is stopped, killed, restarted, paused and
// resumed by pid, with the same verbs whatever the server:
//
//   start()    runs it (again) on its port, with its directory; returns once it serves
//   stop()     its own shutdown (the server's stop signal), SIGKILL if it lingers
//   kill()     SIGKILL: it vanishes mid-operation
//   restart()  stop(), then start(): what it persists it keeps
//   pause()    SIGSTOP: it holds its connections and answers nothing; resume(): SIGCONT
//   port(), address(), url(), pid(), running(), dir()
//
// server_process implements them once; a launcher says how to run its server
// (command()), when it serves (ready()) and what a client's URL to it is (url()).
// server_group holds the members of a cluster or an ensemble, started together.
#pragma once

#include "process.hpp"

#include <signal.h>

#include <chrono>
#include <concepts>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace test {

/// What every server launcher offers (see the top of this file).
template <class S>
concept launcher = requires(S& s, const S& c) {
    { c.port() } -> std::convertible_to<std::uint16_t>;
    { c.address() } -> std::convertible_to<std::string>;
    { c.url() } -> std::convertible_to<std::string>;
    { c.pid() } -> std::convertible_to<pid_t>;
    { c.running() } -> std::convertible_to<bool>;
    { c.dir() } -> std::convertible_to<const std::filesystem::path&>;
    s.start();
    s.stop();
    s.kill();
    s.restart();
    s.pause();
    s.resume();
};

/// One server process (see the top of this file).
class server_process {
public:
    server_process(const server_process&) = delete;
    server_process& operator=(const server_process&) = delete;
    virtual ~server_process() = default; // the child is killed by pid with the object

    std::uint16_t port() const { return port_; }
    std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
    const std::filesystem::path& dir() const { return dir_.path(); }
    pid_t pid() const { return process_ ? process_->pid() : -1; }
    bool running() const { return process_ && process_->running(); }

    /// A client's URL for this server.
    virtual std::string url() const = 0;

    /// Runs the server on its port, with its directory, and waits until it serves.
    void start()
    {
        launch();
        wait_ready();
    }

    /// Stops the server its own way (stop_signal()), SIGKILL if it has not exited
    /// within 20 s.
    void stop()
    {
        if (!process_)
            return;
        process_->kill(stop_signal_);
        if (!process_->wait(std::chrono::seconds{20}))
            process_->kill(SIGKILL);
        process_.reset();
    }

    /// SIGKILL, and waits for the process to go.
    void kill() { process_.reset(); }

    void restart()
    {
        stop();
        start();
    }

    // SIGSTOP lands asynchronously: a test that pauses the server and then sends to it
    // must not race the server still reading. Waits (2 s at most) until the kernel
    // reports the process stopped.
    void pause()
    {
        if (!process_)
            return;
        process_->kill(SIGSTOP);
        const auto stat = "/proc/" + std::to_string(process_->pid()) + "/stat";
        for (int i = 0; i < 2000; ++i) {
            std::ifstream in{stat};
            std::string line;
            std::getline(in, line);
            const auto close = line.rfind(')');
            if (close == std::string::npos || close + 2 >= line.size() || line[close + 2] == 'T' ||
                line[close + 2] == 't')
                return;
            std::this_thread::sleep_for(std::chrono::milliseconds{1});
        }
    }
    void resume()
    {
        if (process_)
            process_->kill(SIGCONT);
    }

    /// New free ports, for a start after one that failed (server_group).
    void new_ports() { choose_ports(); }

    /// Starts the process without waiting for it to serve: the members of a cluster
    /// find each other only once every one runs (server_group).
    void launch() { process_.emplace(command(), options()); }

    /// Waits until the server serves (ready()), at most ready_limit(); throws if it
    /// exits or does not serve in time.
    void wait_ready() const
    {
        const auto deadline = std::chrono::steady_clock::now() + ready_limit();
        while (!ready()) {
            if (!running())
                throw std::runtime_error{what_ + " exited on port " + std::to_string(port_)};
            if (std::chrono::steady_clock::now() > deadline)
                throw std::runtime_error{what_ + " did not serve on port " + std::to_string(port_)};
            std::this_thread::sleep_for(std::chrono::milliseconds{20});
        }
    }

protected:
    /// `what` names the server in errors; `in_memory`: its directory in /dev/shm (a
    /// server that fsyncs every write); `stop_signal`: its own shutdown.
    explicit server_process(std::string what, bool in_memory = false, int stop_signal = SIGTERM)
        : what_{std::move(what)}, stop_signal_{stop_signal}, dir_{in_memory}
    {}

    /// The command line that runs the server on port() in dir().
    virtual std::vector<std::string> command() const = 0;
    /// How it is spawned (by default: no pipes, as the test's user).
    virtual spawn_options options() const { return {.pipes = false}; }
    /// Whether it serves now (by default: its port accepts connections).
    virtual bool ready() const { return port_accepts(port_); }
    virtual std::chrono::milliseconds ready_limit() const { return std::chrono::seconds{20}; }
    /// New free ports, after a start that failed because one was taken meanwhile.
    virtual void choose_ports() { port_ = free_port(); }

    /// The first start: up to three times, on new ports after a failure (a port
    /// chosen free was taken before the server bound it).
    void start_on_free_ports()
    {
        for (int attempt = 0;; ++attempt) {
            try {
                start();
                return;
            } catch (const std::exception&) {
                kill();
                if (attempt == 2)
                    throw;
                choose_ports();
            }
        }
    }

    std::string what_;
    int stop_signal_;
    std::uint16_t port_ = free_port();
    temp_dir dir_;
    std::optional<child> process_;
};

/// The members of a cluster or an ensemble, each a server_process: started together
/// (start_all()), then driven one by one.
template <class Member>
class server_group {
public:
    std::size_t size() const { return members_.size(); }
    Member& node(std::size_t i) { return *members_[i]; }
    const Member& node(std::size_t i) const { return *members_[i]; }
    std::uint16_t port(std::size_t i = 0) const { return members_[i]->port(); }
    bool running(std::size_t i) const { return members_[i]->running(); }
    void kill(std::size_t i) { members_[i]->kill(); }
    void stop(std::size_t i) { members_[i]->stop(); }
    /// Starts a stopped or killed member again, with its data (it rejoins).
    void start(std::size_t i) { members_[i]->start(); }
    void restart(std::size_t i) { members_[i]->restart(); }

protected:
    /// Launches every member, then waits for each to serve; up to three times, all on
    /// new ports after a failure. `before_launch()` runs before each launch (members
    /// that name each other's ports learn them there).
    template <class BeforeLaunch>
    void start_all(BeforeLaunch before_launch)
    {
        for (int attempt = 0;; ++attempt) {
            try {
                before_launch();
                for (auto& m : members_)
                    m->launch();
                for (auto& m : members_)
                    m->wait_ready();
                return;
            } catch (const std::exception&) {
                for (auto& m : members_)
                    m->kill();
                if (attempt == 2)
                    throw;
                for (auto& m : members_)
                    m->new_ports();
            }
        }
    }

    std::vector<std::unique_ptr<Member>> members_;
};

} // namespace test
