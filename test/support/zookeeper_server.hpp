// ZooKeeper servers started by the tests on free loopback ports (Java, from Debian's
// zookeeper package; server.hpp), with their data in a temporary directory: one
// standalone server, or an ensemble of three. And a small blocking client for the
// harness (the store under test never uses it).
#pragma once

#include "server.hpp"

#include <distlock/zookeeper.hpp>

#include <unistd.h>

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

/// A four-letter command ("ruok", "srvr", "cons"): the server's answer, or "".
inline std::string zk_four_letters(std::uint16_t port, const std::string& word)
{
    return exchange(port, word, std::chrono::seconds{2}).value_or(std::string{});
}

/// The harness's own client: one session, one request at a time.
class zk_client {
public:
    explicit zk_client(std::uint16_t port, std::string credentials = {})
    {
        fd_ = connect_loopback(port);
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
                read_until(fd_, [](const std::string& s) { return !s.empty(); }, std::chrono::seconds{5});
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

/// One ZooKeeper server of an ensemble (its group says who the others are), with
/// tickTime 250 ms: session timeouts between 500 ms and 5 s, containers checked every
/// 500 ms.
class zookeeper_server : public server_process {
public:
    explicit zookeeper_server(std::size_t index) : server_process{"ZooKeeper", true}, index_{index} {}

    std::uint16_t quorum_port() const { return quorum_port_; }
    std::uint16_t election_port() const { return election_port_; }
    std::string url() const override { return "zk://" + address(); }

    /// The ensemble's "server.N=127.0.0.1:QUORUM:ELECTION" lines (none: standalone).
    void join(std::string servers) { servers_ = std::move(servers); }

    /// "leader", "follower" or "standalone"; "" when not serving.
    std::string mode() const
    {
        if (!running())
            return {};
        const auto srvr = zk_four_letters(port(), "srvr");
        const auto at = srvr.find("Mode: ");
        if (at == std::string::npos)
            return {};
        const auto end = srvr.find('\n', at);
        return srvr.substr(at + 6, end - at - 6);
    }

protected:
    std::vector<std::string> command() const override
    {
        const auto data = dir() / "data";
        std::filesystem::create_directories(data);
        {
            std::ofstream cfg{dir() / "zoo.cfg"};
            cfg << "tickTime=250\ninitLimit=20\nsyncLimit=10\n"
                << "dataDir=" << data.string() << "\n"
                << "clientPort=" << port() << "\nclientPortAddress=127.0.0.1\n"
                << "admin.enableServer=false\n4lw.commands.whitelist=*\n"
                << "maxClientCnxns=200\n" << servers_;
        }
        if (!servers_.empty())
            std::ofstream{data / "myid"} << index_ + 1 << "\n";
        const std::string java =
            "exec java -Xmx128m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Xshare:auto "
            "-Dznode.container.checkIntervalMs=500 -Dzookeeper.jmx.log4j.disable=true "
            "-cp /usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar:/usr/share/java/slf4j-api.jar "
            "org.apache.zookeeper.server.quorum.QuorumPeerMain " +
            (dir() / "zoo.cfg").string() + " >" + (dir() / "server.log").string() + " 2>&1";
        return {"bash", "-c", java};
    }
    /// Serving: it answers "srvr" with its mode (a port that accepts is not enough).
    bool ready() const override { return !mode().empty(); }
    std::chrono::milliseconds ready_limit() const override { return std::chrono::seconds{40}; }
    void choose_ports() override
    {
        server_process::choose_ports();
        quorum_port_ = free_port();
        election_port_ = free_port();
    }

private:
    std::size_t index_;
    std::uint16_t quorum_port_ = free_port();
    std::uint16_t election_port_ = free_port();
    std::string servers_;
};

static_assert(launcher<zookeeper_server>);

/// One ZooKeeper server, or an ensemble of `size`, started at once.
class zookeeper_ensemble : public server_group<zookeeper_server> {
public:
    explicit zookeeper_ensemble(std::size_t size = 1)
    {
        for (std::size_t i = 0; i < size; ++i)
            members_.push_back(std::make_unique<zookeeper_server>(i));
        start_all([&] {
            std::string servers;
            if (members_.size() > 1)
                for (std::size_t k = 0; k < members_.size(); ++k)
                    servers += "server." + std::to_string(k + 1) + "=127.0.0.1:" +
                               std::to_string(members_[k]->quorum_port()) + ":" +
                               std::to_string(members_[k]->election_port()) + "\n";
            for (auto& m : members_)
                m->join(servers);
        });
    }

    distlock::zookeeper::config config(std::string prefix = "/distlock-test") const
    {
        distlock::zookeeper::config c;
        c.servers.clear();
        for (const auto& s : members_)
            c.servers.push_back({"127.0.0.1", s->port()});
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
    std::string mode(std::size_t i) const { return members_[i]->mode(); }

    std::optional<std::size_t> leader() const
    {
        for (std::size_t i = 0; i < members_.size(); ++i)
            if (mode(i) == "leader" || mode(i) == "standalone")
                return i;
        return std::nullopt;
    }
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
    const auto suffix = unique_suffix(); // "<pid>-<n>"
    const auto dash = suffix.find('-');
    return "/distlock-test-" + suffix.substr(0, dash) + "-" + what + suffix.substr(dash);
}

} // namespace test
