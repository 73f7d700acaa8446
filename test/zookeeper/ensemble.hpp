// ZooKeeper servers started by the tests on free loopback ports (Java, from Debian's
// zookeeper package), with their data in a temporary directory, stopped by pid with
// the object: one standalone server, or an ensemble of three. And a small blocking
// client for the harness (the store under test never uses it).
#pragma once

#include "process.hpp"

#include <distlock/zookeeper.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

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

namespace zk_detail {

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

// Reads until `done(in)` or `limit`.
template <class Done>
inline std::string read_until(int fd, Done done, std::chrono::milliseconds limit)
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

} // namespace zk_detail

/// A four-letter command ("ruok", "srvr", "cons"): the server's answer, or "".
inline std::string zk_four_letters(std::uint16_t port, const std::string& word)
{
    const int fd = zk_detail::connect_loopback(port);
    if (fd < 0)
        return {};
    (void)!::write(fd, word.data(), word.size());
    auto in = zk_detail::read_until(fd, [](const std::string&) { return false; }, std::chrono::seconds{2});
    ::close(fd);
    return in;
}

/// The harness's own client: one session, one request at a time.
class zk_client {
public:
    explicit zk_client(std::uint16_t port, std::string credentials = {})
    {
        fd_ = zk_detail::connect_loopback(port);
        if (fd_ < 0)
            throw std::runtime_error{"zk_client: cannot connect"};
        distlock::zookeeper::proto::connect_request c;
        c.timeout_ms = 5000;
        send(distlock::zookeeper::proto::encode(c));
        const auto payload = frame();
        const auto r = payload ? distlock::zookeeper::proto::parse_connect_response(*payload) : std::nullopt;
        if (!r || r->session_id == 0)
            throw std::runtime_error{"zk_client: no session"};
        session_ = r->session_id;
        if (!credentials.empty()) {
            send(distlock::zookeeper::proto::encode_auth("digest", credentials));
            const auto a = reply();
            if (!a || a->err != 0)
                throw std::runtime_error{"zk_client: auth refused"};
        }
    }
    ~zk_client()
    {
        if (fd_ >= 0) {
            send(distlock::zookeeper::proto::encode_close(++xid_));
            (void)reply();
            ::close(fd_);
        }
    }
    zk_client(const zk_client&) = delete;
    zk_client& operator=(const zk_client&) = delete;

    std::int64_t session() const { return session_; }

    /// The children of `path` (unsorted); nullopt when it does not exist.
    std::optional<std::vector<std::string>> children(const std::string& path)
    {
        send(distlock::zookeeper::proto::encode_get_children2(++xid_, path, false));
        const auto r = reply();
        if (!r || r->err != 0)
            return std::nullopt;
        const auto c = distlock::zookeeper::proto::parse_get_children2(r->body);
        if (!c)
            return std::nullopt;
        return c->names;
    }

    std::optional<distlock::zookeeper::proto::stat> stat(const std::string& path)
    {
        send(distlock::zookeeper::proto::encode_exists(++xid_, path, false));
        const auto r = reply();
        if (!r || r->err != 0)
            return std::nullopt;
        return distlock::zookeeper::proto::parse_stat(r->body);
    }

    /// The reply's err (0: deleted).
    int remove(const std::string& path)
    {
        send(distlock::zookeeper::proto::encode_delete(++xid_, path));
        const auto r = reply();
        return r ? r->err : -4;
    }

    /// Creates `path` (persistent unless `flags` say otherwise); the reply's err.
    int create(const std::string& path, std::int32_t flags = 0)
    {
        send(distlock::zookeeper::proto::encode_create2(++xid_, path, {}, flags));
        const auto r = reply();
        return r ? r->err : -4;
    }

private:
    void send(const std::string& bytes) { (void)!::write(fd_, bytes.data(), bytes.size()); }

    std::optional<std::string> frame()
    {
        for (;;) {
            if (buffer_.size() >= 4) {
                distlock::zookeeper::proto::reader r{std::string_view{buffer_}.substr(0, 4)};
                const auto n = static_cast<std::size_t>(r.i32());
                if (buffer_.size() >= 4 + n) {
                    auto payload = buffer_.substr(4, n);
                    buffer_.erase(0, 4 + n);
                    return payload;
                }
            }
            const auto more =
                zk_detail::read_until(fd_, [](const std::string& s) { return !s.empty(); }, std::chrono::seconds{5});
            if (more.empty())
                return std::nullopt;
            buffer_ += more;
        }
    }

    // The next reply that is not a notification.
    std::optional<distlock::zookeeper::proto::reply> reply()
    {
        for (;;) {
            const auto payload = frame();
            if (!payload)
                return std::nullopt;
            auto r = distlock::zookeeper::proto::parse_reply(*payload);
            if (!r)
                return std::nullopt;
            if (r->xid != distlock::zookeeper::proto::xid::notification)
                return r;
        }
    }

    int fd_ = -1;
    std::int32_t xid_ = 0;
    std::int64_t session_ = 0;
    std::string buffer_;
};

/// One ZooKeeper server, or an ensemble of `size`, with tickTime 250 ms: session
/// timeouts between 500 ms and 5 s, containers checked every 500 ms.
class zookeeper_ensemble {
public:
    explicit zookeeper_ensemble(std::size_t size = 1)
    {
        for (std::size_t i = 0; i < size; ++i)
            servers_.push_back(std::make_unique<server>());
        for (int attempt = 0;; ++attempt) {
            try {
                for (std::size_t i = 0; i < size; ++i)
                    launch(i);
                for (std::size_t i = 0; i < size; ++i)
                    if (!wait_serving(i, std::chrono::seconds{40}))
                        throw std::runtime_error{"ZooKeeper did not start serving"};
                return;
            } catch (const std::exception&) {
                if (attempt == 2)
                    throw;
                for (auto& s : servers_) {
                    s->process.reset();
                    s->client_port = free_port();
                    s->quorum_port = free_port();
                    s->election_port = free_port();
                }
            }
        }
    }

    std::size_t size() const { return servers_.size(); }
    std::uint16_t port(std::size_t i = 0) const { return servers_[i]->client_port; }

    distlock::zookeeper::config config(std::string prefix = "/distlock-test") const
    {
        distlock::zookeeper::config c;
        c.servers.clear();
        for (const auto& s : servers_)
            c.servers.push_back({"127.0.0.1", s->client_port});
        c.prefix = std::move(prefix);
        c.session_timeout = std::chrono::seconds{2};
        c.connect_timeout = std::chrono::seconds{2};
        c.request_timeout = std::chrono::seconds{3};
        return c;
    }

    distlock::zookeeper::config config_through(std::uint16_t port, std::string prefix) const
    {
        auto c = config(std::move(prefix));
        c.servers = {{"127.0.0.1", port}};
        return c;
    }

    /// "leader", "follower" or "standalone"; "" when not serving.
    std::string mode(std::size_t i) const
    {
        if (!running(i))
            return {};
        const auto srvr = zk_four_letters(servers_[i]->client_port, "srvr");
        const auto at = srvr.find("Mode: ");
        if (at == std::string::npos)
            return {};
        const auto end = srvr.find('\n', at);
        return srvr.substr(at + 6, end - at - 6);
    }

    std::optional<std::size_t> leader() const
    {
        for (std::size_t i = 0; i < servers_.size(); ++i)
            if (mode(i) == "leader" || mode(i) == "standalone")
                return i;
        return std::nullopt;
    }

    bool wait_serving(std::size_t i, std::chrono::milliseconds limit) const
    {
        const auto deadline = std::chrono::steady_clock::now() + limit;
        while (std::chrono::steady_clock::now() < deadline) {
            if (!running(i))
                return false;
            if (!mode(i).empty())
                return true;
            std::this_thread::sleep_for(std::chrono::milliseconds{50});
        }
        return false;
    }

    void kill(std::size_t i, int sig = SIGKILL)
    {
        servers_[i]->process->kill(sig);
        if (sig == SIGKILL || sig == SIGTERM)
            servers_[i]->process->wait();
    }

    bool running(std::size_t i) const
    {
        return servers_[i]->process && !servers_[i]->process->wait(std::chrono::milliseconds{0});
    }

    void restart(std::size_t i)
    {
        servers_[i]->process.reset();
        launch(i);
        if (!wait_serving(i, std::chrono::seconds{40}))
            throw std::runtime_error{"ZooKeeper did not serve again"};
    }

private:
    struct server {
        temp_dir dir{true};
        std::uint16_t client_port = free_port();
        std::uint16_t quorum_port = free_port();
        std::uint16_t election_port = free_port();
        std::optional<child> process;
    };

    void launch(std::size_t i)
    {
        auto& s = *servers_[i];
        const auto data = s.dir.path() / "data";
        std::filesystem::create_directories(data);
        {
            std::ofstream cfg{s.dir.path() / "zoo.cfg"};
            cfg << "tickTime=250\ninitLimit=20\nsyncLimit=10\n"
                << "dataDir=" << data.string() << "\n"
                << "clientPort=" << s.client_port << "\nclientPortAddress=127.0.0.1\n"
                << "admin.enableServer=false\n4lw.commands.whitelist=*\n"
                << "maxClientCnxns=200\n";
            if (servers_.size() > 1)
                for (std::size_t k = 0; k < servers_.size(); ++k)
                    cfg << "server." << k + 1 << "=127.0.0.1:" << servers_[k]->quorum_port << ":"
                        << servers_[k]->election_port << "\n";
        }
        if (servers_.size() > 1)
            std::ofstream{data / "myid"} << i + 1 << "\n";
        const auto log = (s.dir.path() / "server.log").string();
        const std::string java =
            "exec java -Xmx128m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Xshare:auto "
            "-Dznode.container.checkIntervalMs=500 -Dzookeeper.jmx.log4j.disable=true "
            "-cp /usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar:/usr/share/java/slf4j-api.jar "
            "org.apache.zookeeper.server.quorum.QuorumPeerMain " +
            (s.dir.path() / "zoo.cfg").string() + " >" + log + " 2>&1";
        s.process.emplace(std::vector<std::string>{"bash", "-c", java}, false);
    }

    std::vector<std::unique_ptr<server>> servers_;
};

/// The standalone server the store tests share (started on first use).
inline zookeeper_ensemble& shared_zookeeper()
{
    static zookeeper_ensemble server{1};
    return server;
}

/// A node path no other test uses: "/distlock-test-<pid>-<what>-<n>".
inline std::string fresh_zk_prefix(const std::string& what)
{
    static std::atomic<int> counter{0};
    return "/distlock-test-" + std::to_string(::getpid()) + "-" + what + "-" + std::to_string(++counter);
}

} // namespace test
