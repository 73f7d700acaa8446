// etcd members started by the tests on free loopback ports (server.hpp), with their
// data in a temporary directory in /dev/shm when there is one (etcd fsyncs every
// write, and a disk on a shared machine makes that slow): one member, or a cluster
// of three. And a blocking HTTP exchange with a member, for the harness.
#pragma once

#include "server.hpp"

#include <distlock/etcd.hpp>

#include <nlohmann/json.hpp>

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
    const std::string request = method + " " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n" +
                                "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
    const auto in = exchange(port, request, limit);
    if (!in)
        return std::nullopt;
    auto parsed = distlock::http::parse_response(*in);
    if (parsed.status != distlock::transport::decode_status::complete)
        return std::nullopt;
    return parsed.message.body;
}

/// A certificate and its key, for members that serve clients over HTTPS too.
struct tls_files {
    std::string cert;
    std::string key;
};

/// One member of an etcd cluster (its group says who the others are).
class etcd_member : public server_process {
public:
    etcd_member(std::size_t index, std::vector<std::string> extra, std::optional<tls_files> tls)
        : server_process{"etcd", true}, name_{"m" + std::to_string(index)}, extra_{std::move(extra)},
          tls_{std::move(tls)}
    {}

    std::uint16_t peer_port() const { return peer_port_; }
    std::uint16_t tls_port() const { return tls_port_; }
    std::string url() const override { return "etcd://" + address(); }

    /// The cluster this member belongs to ("m0=http://127.0.0.1:PEER,..."), its token,
    /// and whether it starts a new cluster or rejoins one with its data.
    void join(std::string initial_cluster, std::string token)
    {
        initial_cluster_ = std::move(initial_cluster);
        token_ = std::move(token);
    }
    void rejoin() { state_ = "existing"; }

protected:
    std::vector<std::string> command() const override
    {
        auto client = "http://" + address();
        if (tls_)
            client += ",https://127.0.0.1:" + std::to_string(tls_port_);
        const auto peer = "http://127.0.0.1:" + std::to_string(peer_port_);
        std::vector<std::string> argv{"etcd",
                                      "--name", name_,
                                      "--data-dir", (dir() / "data").string(),
                                      "--listen-client-urls", client,
                                      "--advertise-client-urls", client,
                                      "--listen-peer-urls", peer,
                                      "--initial-advertise-peer-urls", peer,
                                      "--initial-cluster", initial_cluster_,
                                      "--initial-cluster-state", state_,
                                      "--initial-cluster-token", token_,
                                      // Elections within about a second on a loaded machine.
                                      "--heartbeat-interval", "100",
                                      "--election-timeout", "1000",
                                      "--logger", "zap",
                                      "--log-level", "error"};
        argv.insert(argv.end(), extra_.begin(), extra_.end());
        if (tls_)
            argv.insert(argv.end(), {"--cert-file", tls_->cert, "--key-file", tls_->key});
        return argv;
    }
    void choose_ports() override
    {
        server_process::choose_ports();
        peer_port_ = free_port();
        tls_port_ = free_port();
        std::error_code ignored;
        std::filesystem::remove_all(dir() / "data", ignored);
    }

private:
    std::string name_;
    std::vector<std::string> extra_;
    std::optional<tls_files> tls_;
    std::uint16_t peer_port_ = free_port();
    std::uint16_t tls_port_ = free_port();
    std::string initial_cluster_;
    std::string token_;
    std::string state_ = "new";
};

static_assert(launcher<etcd_member>);

/// A cluster of `size` members (1 or 3), started at once.
class etcd_cluster : public server_group<etcd_member> {
public:
    /// `extra`: more command-line options for every member. With `tls`, every member
    /// also serves clients over HTTPS on a port of its own (tls_port()); the harness
    /// keeps talking plain HTTP.
    explicit etcd_cluster(std::size_t size = 1, std::vector<std::string> extra = {},
                          std::optional<tls_files> tls = std::nullopt)
    {
        for (std::size_t i = 0; i < size; ++i)
            members_.push_back(std::make_unique<etcd_member>(i, extra, tls));
        const auto token = "distlock-test-" + unique_suffix();
        start_all([&] {
            std::string peers;
            for (std::size_t i = 0; i < members_.size(); ++i)
                peers += (i ? ",m" : "m") + std::to_string(i) + "=http://127.0.0.1:" +
                         std::to_string(members_[i]->peer_port());
            for (auto& m : members_)
                m->join(peers, token);
        });
        for (auto& m : members_)
            m->rejoin(); // from now on, a member starts again with its data
        if (!wait_writable())
            throw std::runtime_error{"the etcd cluster did not elect a leader"};
    }

    std::uint16_t tls_port(std::size_t i = 0) const { return members_[i]->tls_port(); }

    /// A store's settings for every member, with `prefix`.
    distlock::etcd::config config(std::string prefix = "distlock-test/") const
    {
        distlock::etcd::config c;
        c.members.clear();
        for (const auto& m : members_)
            c.members.push_back({"127.0.0.1", m->port()});
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
            const auto status = etcd_http(port(i), "POST", "/v3/maintenance/status", "{}");
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

    /// Waits until a write goes through (a leader is elected), at most `limit`.
    bool wait_writable(std::chrono::milliseconds limit = std::chrono::seconds{20}) const
    {
        const auto deadline = std::chrono::steady_clock::now() + limit;
        const std::string put = R"({"key":"ZGlzdGxvY2stdGVzdC1wcm9iZQ==","value":"eA=="})";
        while (std::chrono::steady_clock::now() < deadline) {
            for (std::size_t i = 0; i < members_.size(); ++i) {
                if (!running(i))
                    continue;
                const auto r = etcd_http(port(i), "POST", "/v3/kv/put", put);
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
        const auto status = etcd_http(port(i), "POST", "/v3/maintenance/status", "{}");
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
        const auto r = etcd_http(port(member), "POST", "/v3/" + path, body.dump());
        if (!r)
            return nullptr;
        return nlohmann::json::parse(*r, nullptr, false);
    }
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
    return std::string{"distlock-test/"} + name + "-" + unique_suffix() + "/";
}

} // namespace test
