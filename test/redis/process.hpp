// Child processes for the Redis tests: redis-server instances on free loopback ports
// in temporary directories, and copies of this test binary acting as lock clients.
// Everything started here is stopped by pid when its owner goes out of scope.
#pragma once

#include <distlock/redis.hpp>

#include <asio/steady_timer.hpp>
#include <asio/this_coro.hpp>
#include <asio/use_awaitable.hpp>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace test {

/// This test binary, to start worker copies of it.
inline std::string self_path()
{
    char buf[4096];
    const auto n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
    return std::string(buf, n > 0 ? static_cast<std::size_t>(n) : 0);
}

/// A loopback TCP port that was free a moment ago.
inline std::uint16_t free_port()
{
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    socklen_t len = sizeof addr;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
    ::close(fd);
    return ntohs(addr.sin_port);
}

inline bool port_accepts(std::uint16_t port)
{
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(port);
    const bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
    ::close(fd);
    return ok;
}

/// A temporary directory, removed with its contents. In memory (/dev/shm, when there
/// is one) if asked: servers that fsync every write (etcd, ZooKeeper) are slow on a
/// shared machine's disk.
class temp_dir {
public:
    explicit temp_dir(bool in_memory = false)
    {
        const bool shm = in_memory && std::filesystem::is_directory("/dev/shm");
        const auto base = shm ? std::filesystem::path{"/dev/shm"} : std::filesystem::temp_directory_path();
        std::string pattern = (base / "distlock-test-XXXXXX").string();
        if (!::mkdtemp(pattern.data()))
            throw std::runtime_error{"mkdtemp failed"};
        path_ = pattern;
    }
    ~temp_dir()
    {
        std::error_code ignored;
        std::filesystem::remove_all(path_, ignored);
    }
    const std::filesystem::path& path() const { return path_; }

private:
    std::filesystem::path path_;
};

/// A child process with pipes to its stdin and stdout.
class child {
public:
    explicit child(std::vector<std::string> argv, bool pipes = true)
    {
        int in[2] = {-1, -1}, out[2] = {-1, -1};
        if (pipes && (::pipe(in) != 0 || ::pipe(out) != 0))
            throw std::runtime_error{"pipe failed"};
        pid_ = ::fork();
        if (pid_ < 0)
            throw std::runtime_error{"fork failed"};
        if (pid_ == 0) {
            // Die with the test process, even if it crashes: no orphaned servers.
            ::prctl(PR_SET_PDEATHSIG, SIGKILL);
            if (pipes) {
                ::dup2(in[0], 0);
                ::dup2(out[1], 1);
                ::close(in[1]);
                ::close(out[0]);
            } else {
                const int devnull = ::open("/dev/null", O_RDWR);
                ::dup2(devnull, 0);
                ::dup2(devnull, 1);
                ::dup2(devnull, 2);
            }
            std::vector<char*> args;
            for (auto& a : argv)
                args.push_back(a.data());
            args.push_back(nullptr);
            ::execvp(args[0], args.data());
            ::_exit(127);
        }
        if (pipes) {
            ::close(in[0]);
            ::close(out[1]);
            to_child_ = in[1];
            from_child_ = out[0];
        }
    }
    child(const child&) = delete;
    child& operator=(const child&) = delete;
    ~child()
    {
        kill(SIGKILL);
        wait();
        if (to_child_ >= 0)
            ::close(to_child_);
        if (from_child_ >= 0)
            ::close(from_child_);
    }

    pid_t pid() const { return pid_; }

    void kill(int sig)
    {
        if (pid_ > 0 && !exit_status_)
            ::kill(pid_, sig);
    }

    /// Waits for exit (at most `limit`), returns the exit status if it exited.
    std::optional<int> wait(std::chrono::milliseconds limit = std::chrono::seconds{10})
    {
        if (exit_status_ || pid_ <= 0)
            return exit_status_;
        const auto deadline = std::chrono::steady_clock::now() + limit;
        for (;;) {
            int status = 0;
            const auto r = ::waitpid(pid_, &status, WNOHANG);
            if (r == pid_) {
                exit_status_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
                return exit_status_;
            }
            if (std::chrono::steady_clock::now() >= deadline)
                return std::nullopt;
            std::this_thread::sleep_for(std::chrono::milliseconds{5});
        }
    }

    void write_line(const std::string& line)
    {
        const std::string data = line + "\n";
        (void)!::write(to_child_, data.data(), data.size());
    }

    /// One line of the child's stdout, or nullopt after `limit`.
    std::optional<std::string> read_line(std::chrono::milliseconds limit = std::chrono::seconds{10})
    {
        const auto deadline = std::chrono::steady_clock::now() + limit;
        for (;;) {
            if (const auto nl = buffer_.find('\n'); nl != std::string::npos) {
                auto line = buffer_.substr(0, nl);
                buffer_.erase(0, nl + 1);
                return line;
            }
            const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                deadline - std::chrono::steady_clock::now());
            if (left.count() <= 0)
                return std::nullopt;
            pollfd p{from_child_, POLLIN, 0};
            if (::poll(&p, 1, static_cast<int>(left.count())) <= 0)
                continue;
            char chunk[512];
            const auto n = ::read(from_child_, chunk, sizeof chunk);
            if (n <= 0)
                return std::nullopt;
            buffer_.append(chunk, static_cast<std::size_t>(n));
        }
    }

    /// The same, waited for without blocking the calling coroutine's thread: a store
    /// on that thread (a ZooKeeper session, an etcd lease) keeps its keepalives going
    /// while the child takes its time, as a slow machine's child may.
    asio::awaitable<std::optional<std::string>> next_line(std::chrono::milliseconds limit = std::chrono::seconds{10})
    {
        const auto deadline = std::chrono::steady_clock::now() + limit;
        asio::steady_timer pause{co_await asio::this_coro::executor};
        for (;;) {
            // 2 ms: read_line() looks at the pipe only with a whole millisecond left.
            if (auto line = read_line(std::chrono::milliseconds{2}))
                co_return line;
            if (std::chrono::steady_clock::now() >= deadline)
                co_return std::nullopt;
            pause.expires_after(std::chrono::milliseconds{5});
            co_await pause.async_wait(asio::use_awaitable);
        }
    }

private:
    pid_t pid_ = -1;
    int to_child_ = -1, from_child_ = -1;
    std::optional<int> exit_status_;
    std::string buffer_;
};

/// A redis-server on a free loopback port, in a temporary directory, without
/// persistence unless asked. Stopped by pid when destroyed.
class redis_server {
public:
    explicit redis_server(std::vector<std::string> extra = {}, bool tls = false)
        : extra_{std::move(extra)}, tls_{tls}, port_{free_port()}
    {
        start();
    }

    std::uint16_t port() const { return port_; }
    const std::filesystem::path& dir() const { return dir_.path(); }
    pid_t pid() const { return process_ ? process_->pid() : -1; }

    distlock::redis::config config() const
    {
        distlock::redis::config c;
        c.port = port_;
        c.connect_timeout = std::chrono::seconds{2};
        c.request_timeout = std::chrono::seconds{2};
        return c;
    }

    void start()
    {
        std::vector<std::string> argv{"redis-server", "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                                      "--dir", dir_.path().string(), "--daemonize", "no",
                                      "--logfile", (dir_.path() / "redis.log").string()};
        if (tls_) {
            argv.insert(argv.end(), {"--port", "0", "--tls-port", std::to_string(port_)});
        } else {
            argv.insert(argv.end(), {"--port", std::to_string(port_)});
        }
        argv.insert(argv.end(), extra_.begin(), extra_.end());
        process_.emplace(argv, false);
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds{10};
        while (!port_accepts(port_)) {
            if (std::chrono::steady_clock::now() > deadline || process_->wait(std::chrono::milliseconds{0}))
                throw std::runtime_error{"redis-server did not start on port " + std::to_string(port_)};
            std::this_thread::sleep_for(std::chrono::milliseconds{10});
        }
    }

    /// SIGKILL: the server vanishes mid-operation; its memory is gone.
    void kill()
    {
        process_.reset();
    }

    /// Kill and start again on the same port, empty.
    void restart()
    {
        kill();
        start();
    }

    void pause() { process_->kill(SIGSTOP); }
    void resume() { process_->kill(SIGCONT); }

private:
    temp_dir dir_;
    std::vector<std::string> extra_;
    bool tls_;
    std::uint16_t port_;
    std::optional<child> process_;
};

} // namespace test
