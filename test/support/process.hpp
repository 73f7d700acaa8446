// Processes and ports for the tests, free of any store: copies of the test binary
// and servers started as child processes (stopped by pid with their owner, and
// killed with the test process if that dies first), free loopback ports, blocking
// loopback exchanges for harness clients, temporary directories, and polling waits.
#pragma once

#include <asio/steady_timer.hpp>
#include <asio/this_coro.hpp>
#include <asio/use_awaitable.hpp>

#include <arpa/inet.h>
#include <fcntl.h>
#include <grp.h>
#include <netinet/in.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
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

/// "<pid>-<n>", n counting up in this process: part of a name (a key prefix, a table,
/// a node path) that no other test of this run uses.
inline std::string unique_suffix()
{
    static std::atomic<int> counter{0};
    return std::to_string(::getpid()) + "-" + std::to_string(++counter);
}

// -- Loopback ports ----------------------------------------------------------------

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

/// A blocking TCP connection to 127.0.0.1:`port`, or -1.
inline int connect_loopback(std::uint16_t port)
{
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return -1;
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
        ::close(fd);
        return -1;
    }
    return fd;
}

/// Whether something accepts connections on 127.0.0.1:`port` now.
inline bool port_accepts(std::uint16_t port)
{
    const int fd = connect_loopback(port);
    if (fd >= 0)
        ::close(fd);
    return fd >= 0;
}

/// Reads from `fd` until `done(what was read)`, the peer closes, or `limit` passes.
template <class Done>
std::string read_until(int fd, Done done, std::chrono::milliseconds limit)
{
    std::string in;
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (!done(in)) {
        const auto left =
            std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
        if (left.count() <= 0)
            break;
        pollfd p{fd, POLLIN, 0};
        if (::poll(&p, 1, static_cast<int>(left.count())) <= 0)
            break;
        char chunk[4096];
        const auto n = ::read(fd, chunk, sizeof chunk);
        if (n <= 0)
            break;
        in.append(chunk, static_cast<std::size_t>(n));
    }
    return in;
}

/// Sends `request` on a connection of its own and returns everything the server
/// wrote until it closed (at most `limit`); nullopt when nothing could connect.
inline std::optional<std::string> exchange(std::uint16_t port, const std::string& request,
                                           std::chrono::milliseconds limit = std::chrono::seconds{3})
{
    const int fd = connect_loopback(port);
    if (fd < 0)
        return std::nullopt;
    (void)!::write(fd, request.data(), request.size());
    auto in = read_until(fd, [](const std::string&) { return false; }, limit);
    ::close(fd);
    return in;
}

// -- Waiting ---------------------------------------------------------------------

/// Waits (blocking this thread, in steps of 50 ms) until `done()` or throws after
/// `limit`. For harness set-up only: a test coroutine waits with eventually().
template <class F>
void wait_until(const char* what, F done, std::chrono::milliseconds limit = std::chrono::seconds{20})
{
    const auto deadline = std::chrono::steady_clock::now() + limit;
    const auto holds = [&] {
        try {
            return static_cast<bool>(done());
        } catch (const std::exception&) { // a server mid-failover answers nothing useful
            return false;
        }
    };
    while (!holds()) {
        if (std::chrono::steady_clock::now() > deadline)
            throw std::runtime_error{std::string{"timed out waiting for "} + what};
        std::this_thread::sleep_for(std::chrono::milliseconds{50});
    }
}

/// Runs `command` in a shell and returns what it printed (stdout and stderr).
inline std::string shell(const std::string& command)
{
    std::string out;
    if (FILE* p = ::popen((command + " 2>&1").c_str(), "r")) {
        char buf[4096];
        while (const auto n = std::fread(buf, 1, sizeof buf, p))
            out.append(buf, n);
        ::pclose(p);
    }
    return out;
}

// -- Directories and processes -------------------------------------------------------

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
    temp_dir(const temp_dir&) = delete;
    temp_dir& operator=(const temp_dir&) = delete;
    const std::filesystem::path& path() const { return path_; }

private:
    std::filesystem::path path_;
};

/// How a child process is started.
struct spawn_options {
    /// Its stdin and stdout are pipes to the test (write_line(), read_line()); without,
    /// all three standard streams are /dev/null.
    bool pipes = true;
    /// When the test runs as root, the child runs as this user (a server that refuses
    /// root, PostgreSQL); empty: as the test.
    std::string user;
    /// The child's working directory (one the user can enter); empty: the test's.
    std::string workdir;
};

/// A child process, stopped by pid (SIGKILL) with the object and killed with the
/// test process if that dies first: no orphaned servers or workers. The kernel sends
/// that signal when the *thread* that made the child exits: make children on a
/// thread that outlives them (the test's own).
class child {
public:
    explicit child(std::vector<std::string> argv, bool pipes = true) : child{std::move(argv), spawn_options{.pipes = pipes}} {}

    child(std::vector<std::string> argv, const spawn_options& options)
    {
        // Looked up before fork(): the child only makes system calls.
        const passwd* pw = nullptr;
        if (!options.user.empty() && ::geteuid() == 0) {
            pw = ::getpwnam(options.user.c_str());
            if (!pw)
                throw std::runtime_error{"no user " + options.user};
        }
        const uid_t uid = pw ? pw->pw_uid : 0;
        const gid_t gid = pw ? pw->pw_gid : 0;
        const pid_t parent = ::getpid();
        int in[2] = {-1, -1}, out[2] = {-1, -1};
        if (options.pipes && (::pipe(in) != 0 || ::pipe(out) != 0))
            throw std::runtime_error{"pipe failed"};
        std::vector<char*> args;
        for (auto& a : argv)
            args.push_back(a.data());
        args.push_back(nullptr);
        pid_ = ::fork();
        if (pid_ < 0)
            throw std::runtime_error{"fork failed"};
        if (pid_ == 0) {
            if (pw && (::setgroups(0, nullptr) != 0 || ::setgid(gid) != 0 || ::setuid(uid) != 0))
                ::_exit(126);
            // Set after any change of user, which clears it.
            ::prctl(PR_SET_PDEATHSIG, SIGKILL);
            if (::getppid() != parent) // the test process died before the signal was set
                ::_exit(125);
            if (!options.workdir.empty() && ::chdir(options.workdir.c_str()) != 0)
                ::_exit(124);
            if (options.pipes) {
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
            ::execvp(args[0], args.data());
            ::_exit(127);
        }
        if (options.pipes) {
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

    /// Sends `sig` unless the process has exited.
    void kill(int sig)
    {
        if (pid_ > 0 && !exit_status_)
            ::kill(pid_, sig);
    }

    /// Waits for exit (at most `limit`), returns the exit status if it exited (128 +
    /// the signal when a signal ended it).
    std::optional<int> wait(std::chrono::milliseconds limit = std::chrono::seconds{10}) const
    {
        const auto deadline = std::chrono::steady_clock::now() + limit;
        while (!exit_status_ && pid_ > 0) {
            int status = 0;
            if (::waitpid(pid_, &status, WNOHANG) == pid_) {
                exit_status_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
                break;
            }
            if (std::chrono::steady_clock::now() >= deadline)
                break;
            std::this_thread::sleep_for(std::chrono::milliseconds{5});
        }
        return exit_status_;
    }

    /// Whether it still runs (it has not exited).
    bool running() const { return pid_ > 0 && !wait(std::chrono::milliseconds{0}); }

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
    mutable std::optional<int> exit_status_;
    std::string buffer_;
};

} // namespace test
