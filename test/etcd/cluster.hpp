// etcd members started by the tests on free loopback ports, with their data in a
// temporary directory (in /dev/shm when there is one: etcd fsyncs every write, and a
// disk on a shared machine makes that slow), stopped by pid with the object. One
// member, or a cluster of three.
#pragma once

#include "process.hpp"

#include <distlock/etcd.hpp>

#include <nlohmann/json.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace test {

/// One blocking HTTP/1.1 exchange with a member, for the harness only (the store
/// under test never uses it): the response body, or nullopt.
inline std::optional<std::string> etcd_http(std::uint16_t port, const std::string& method, const std::string& path,
                                            const std::string& body = {},
                                            std::chrono::milliseconds limit = std::chrono::seconds{3})
{
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return std::nullopt;
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
        ::close(fd);
        return std::nullopt;
    }
    const std::string request = method + " " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n" +
                                "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
    (void)!::write(fd, request.data(), request.size());
    std::string in;
    const auto deadline = std::chrono::steady_clock::now() + limit;
    for (;;) {
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
    ::close(fd);
    auto parsed = distlock::http::parse_response(in);
    if (parsed.status != distlock::transport::decode_status::complete)
        return std::nullopt;
    return parsed.message.body;
}

/// A directory for a member's data, removed with its contents.
struct tls_files {
    std::string cert;
    std::string key;
};

/// A cluster of `size` members (1 or 3), started at once.
class etcd_cluster {
public:
    /// `extra`: more command-line options for every member. With `tls`, every member
    /// also serves clients over HTTPS on a port of its own (tls_port()); the harness
    /// keeps talking plain HTTP.
    explicit etcd_cluster(std::size_t size = 1, std::vector<std::string> extra = {},
                          std::optional<tls_files> tls = std::nullopt)
        : extra_{std::move(extra)}, tls_{std::move(tls)}
    {
        for (std::size_t i = 0; i < size; ++i)
            members_.push_back(std::make_unique<member>());
        static std::atomic<int> counter{0};
        token_ = "distlock-test-" + std::to_string(::getpid()) + "-" + std::to_string(++counter);
        for (int attempt = 0;; ++attempt) {
            try {
                start_all();
                return;
            } catch (const std::exception&) {
                // A port taken between choosing and binding it: again, on new ports.
                if (attempt == 2)
                    throw;
                for (auto& m : members_) {
                    m->process.reset();
                    m->client_port = free_port();
                    m->peer_port = free_port();
                    m->tls_port = free_port();
                    std::error_code ignored;
                    std::filesystem::remove_all(m->dir.path() / "data", ignored);
                }
            }
        }
    }

    std::size_t size() const { return members_.size(); }
    std::uint16_t port(std::size_t i = 0) const { return members_[i]->client_port; }
    std::uint16_t tls_port(std::size_t i = 0) const { return members_[i]->tls_port; }

    /// A store's settings for every member (or the ones given), with `prefix`.
    distlock::etcd::config config(std::string prefix = "distlock-test/") const
    {
        distlock::etcd::config c;
        c.members.clear();
        for (const auto& m : members_)
            c.members.push_back({"127.0.0.1", m->client_port});
        c.prefix = std::move(prefix);
        c.session_ttl = std::chrono::seconds{3};
        c.connect_timeout = std::chrono::seconds{2};
        c.request_timeout = std::chrono::seconds{3};
        return c;
    }

    /// Settings that reach member 0 through `port` (a fault proxy) only.
    distlock::etcd::config config_through(std::uint16_t port, std::string prefix) const
    {
        auto c = config(std::move(prefix));
        c.members = {{"127.0.0.1", port}};
        return c;
    }

    /// The index of the member that leads now, or nullopt (no leader, or no answer).
    std::optional<std::size_t> leader() const
    {
        for (std::size_t i = 0; i < members_.size(); ++i) {
            if (!running(i))
                continue;
            const auto status = etcd_http(members_[i]->client_port, "POST", "/v3/maintenance/status", "{}");
            if (!status)
                continue;
            const auto j = nlohmann::json::parse(*status, nullptr, false);
            if (!j.is_object() || !j.contains("leader") || !j.contains("header"))
                continue;
            const auto lead = j["leader"].get<std::string>();
            for (std::size_t k = 0; k < members_.size(); ++k)
                if (running(k) && member_id(k) == lead)
                    return k;
        }
        return std::nullopt;
    }

    void kill(std::size_t i, int sig = SIGKILL)
    {
        members_[i]->process->kill(sig);
        if (sig == SIGKILL || sig == SIGTERM)
            members_[i]->process->wait();
    }

    bool running(std::size_t i) const
    {
        return members_[i]->process && !members_[i]->process->wait(std::chrono::milliseconds{0});
    }

    /// Starts a stopped member again with its data (it rejoins the cluster).
    void restart(std::size_t i)
    {
        members_[i]->process.reset();
        launch(i, "existing");
        wait_healthy(i, std::chrono::seconds{20});
    }

    /// Waits until a write goes through (a leader is elected), at most `limit`.
    bool wait_writable(std::chrono::milliseconds limit = std::chrono::seconds{20}) const
    {
        const auto deadline = std::chrono::steady_clock::now() + limit;
        const std::string put = R"({"key":"ZGlzdGxvY2stdGVzdC1wcm9iZQ==","value":"eA=="})";
        while (std::chrono::steady_clock::now() < deadline) {
            for (std::size_t i = 0; i < members_.size(); ++i) {
                if (!running(i))
                    continue;
                const auto r = etcd_http(members_[i]->client_port, "POST", "/v3/kv/put", put);
                if (r && r->find("\"header\"") != std::string::npos && r->find("\"error\"") == std::string::npos)
                    return true;
            }
            std::this_thread::sleep_for(std::chrono::milliseconds{50});
        }
        return false;
    }

    /// The member's id as the cluster reports it (a decimal string).
    std::string member_id(std::size_t i) const
    {
        const auto status = etcd_http(members_[i]->client_port, "POST", "/v3/maintenance/status", "{}");
        if (!status)
            return {};
        const auto j = nlohmann::json::parse(*status, nullptr, false);
        if (!j.is_object() || !j.contains("header"))
            return {};
        return j["header"].value("member_id", std::string{});
    }

    /// One gateway call with the harness's own client: the JSON answer (null when
    /// there is none).
    nlohmann::json call(const std::string& path, const nlohmann::json& body, std::size_t member = 0) const
    {
        const auto r = etcd_http(members_[member]->client_port, "POST", "/v3/" + path, body.dump());
        if (!r)
            return nullptr;
        return nlohmann::json::parse(*r, nullptr, false);
    }

private:
    struct member {
        temp_dir dir{true};
        std::uint16_t client_port = free_port();
        std::uint16_t peer_port = free_port();
        std::uint16_t tls_port = free_port();
        std::optional<child> process;
    };

    std::string initial_cluster() const
    {
        std::string out;
        for (std::size_t i = 0; i < members_.size(); ++i) {
            if (i)
                out += ',';
            out += "m";
            out += std::to_string(i);
            out += "=http://127.0.0.1:";
            out += std::to_string(members_[i]->peer_port);
        }
        return out;
    }

    void launch(std::size_t i, const char* state)
    {
        auto& m = *members_[i];
        auto client = "http://127.0.0.1:" + std::to_string(m.client_port);
        if (tls_)
            client += ",https://127.0.0.1:" + std::to_string(m.tls_port);
        const auto peer = "http://127.0.0.1:" + std::to_string(m.peer_port);
        std::vector<std::string> argv{"etcd",
                                                   "--name", "m" + std::to_string(i),
                                                   "--data-dir", (m.dir.path() / "data").string(),
                                                   "--listen-client-urls", client,
                                                   "--advertise-client-urls", client,
                                                   "--listen-peer-urls", peer,
                                                   "--initial-advertise-peer-urls", peer,
                                                   "--initial-cluster", initial_cluster(),
                                                   "--initial-cluster-state", state,
                                                   "--initial-cluster-token", token_,
                                                   // Elections within about a second on a loaded machine.
                                                   "--heartbeat-interval", "100",
                                                   "--election-timeout", "1000",
                                                   "--logger", "zap",
                                                   "--log-level", "error"};
        argv.insert(argv.end(), extra_.begin(), extra_.end());
        if (tls_)
            argv.insert(argv.end(), {"--cert-file", tls_->cert, "--key-file", tls_->key});
        m.process.emplace(std::move(argv), false);
    }

    void wait_healthy(std::size_t i, std::chrono::milliseconds limit) const
    {
        const auto deadline = std::chrono::steady_clock::now() + limit;
        while (!port_accepts(members_[i]->client_port)) {
            if (std::chrono::steady_clock::now() > deadline || !running(i))
                throw std::runtime_error{"etcd did not start on port " + std::to_string(members_[i]->client_port)};
            std::this_thread::sleep_for(std::chrono::milliseconds{20});
        }
    }

    void start_all()
    {
        for (std::size_t i = 0; i < members_.size(); ++i)
            launch(i, "new");
        for (std::size_t i = 0; i < members_.size(); ++i)
            wait_healthy(i, std::chrono::seconds{20});
        if (!wait_writable())
            throw std::runtime_error{"the etcd cluster did not elect a leader"};
    }

    std::vector<std::unique_ptr<member>> members_;
    std::vector<std::string> extra_;
    std::optional<tls_files> tls_;
    std::string token_;
};

/// The test run's single member, started on first use.
inline etcd_cluster& shared_etcd()
{
    static etcd_cluster one{1};
    return one;
}

/// A key prefix no other test of this run uses.
inline std::string fresh_prefix(const char* name = "t")
{
    static std::atomic<int> counter{0};
    return std::string{"distlock-test/"} + name + "-" + std::to_string(::getpid()) + "-" +
           std::to_string(++counter) + "/";
}

} // namespace test
