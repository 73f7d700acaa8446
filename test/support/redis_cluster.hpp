// Redis Cluster and Sentinel set-ups for the tests: real redis-server processes
// (redis_server.hpp) joined by redis-cli --cluster create, or a primary, a replica and
// three Sentinels. Stopped by pid with their servers.
#pragma once

#include "redis_server.hpp"

#include <distlock/redis.hpp>

#include <algorithm>
#include <array>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace test {

/// Runs redis-cli with `args` against 127.0.0.1:`port` and returns its output.
inline std::string cli(std::uint16_t port, const std::string& args)
{
    return shell("redis-cli -h 127.0.0.1 -p " + std::to_string(port) + " " + args);
}

/// A Redis Cluster of `primaries` primaries with `replicas` replicas each, every
/// node on loopback. cluster-node-timeout is 1 s, so that a killed primary's replica
/// takes over within a few seconds.
class redis_cluster : public server_group<redis_server> {
public:
    explicit redis_cluster(int primaries = 3, int replicas = 1)
    {
        const int count = primaries * (1 + replicas);
        for (int i = 0; i < count; ++i) {
            const auto bus = free_port();
            members_.push_back(std::make_unique<redis_server>(std::vector<std::string>{
                "--cluster-enabled", "yes", "--cluster-port", std::to_string(bus), "--cluster-node-timeout", "1000",
                "--cluster-config-file", "nodes.conf"}));
        }
        std::string create = "--cluster create";
        for (const auto& n : members_)
            create += " 127.0.0.1:" + std::to_string(n->port());
        create += " --cluster-replicas " + std::to_string(replicas) + " --cluster-yes";
        const auto out = cli(members_.front()->port(), create);
        if (out.find("[OK] All 16384 slots covered") == std::string::npos)
            throw std::runtime_error{"redis-cli --cluster create failed: " + out};
        wait_until("the cluster to agree", [&] { return settled(primaries * replicas); });
    }

    /// Every node as a starting point, straight to the servers.
    distlock::redis::config config() const
    {
        distlock::redis::config c;
        for (const auto& n : members_)
            c.cluster_nodes.push_back({"127.0.0.1", n->port()});
        return c;
    }

    /// The port of the primary serving `key`'s slot, as a live node sees it.
    std::uint16_t primary_of(std::string_view key) const
    {
        const auto slot = distlock::redis::detail::hash_slot(key);
        for (const auto& n : members_) {
            if (n->pid() < 0)
                continue;
            const auto nodes = cli(n->port(), "cluster nodes");
            if (nodes.find("myself") != std::string::npos)
                return owner_in(nodes, slot);
        }
        throw std::runtime_error{"no live node"};
    }

    /// The port of a primary other than the one on `port`.
    std::uint16_t other_primary(std::uint16_t port) const
    {
        for (int i = 0; i < 1000; ++i)
            if (const auto p = primary_of("other:" + std::to_string(i)); p != port)
                return p;
        throw std::runtime_error{"one primary only"};
    }

    /// The node id of the server on `port` (CLUSTER MYID).
    std::string id_of(std::uint16_t port) const { return trim(cli(port, "cluster myid")); }

    /// The port of a replica of the primary on `port`.
    std::uint16_t replica_of(std::uint16_t port) const
    {
        const auto id = id_of(port);
        std::istringstream lines{cli(port, "cluster nodes")};
        for (std::string line; std::getline(lines, line);) {
            std::istringstream words{line};
            std::string node_id, addr, flags, master;
            words >> node_id >> addr >> flags >> master;
            if (master == id && flags.find("slave") != std::string::npos)
                return port_in(addr);
        }
        throw std::runtime_error{"no replica of " + std::to_string(port)};
    }

    /// The server on `port`.
    redis_server& at(std::uint16_t port)
    {
        for (auto& n : members_)
            if (n->port() == port)
                return *n;
        throw std::runtime_error{"no node on " + std::to_string(port)};
    }

    /// Moves `slot` from the primary on `from` to the one on `to`, keys included, the
    /// way redis-cli --cluster reshard does: IMPORTING, MIGRATING, MIGRATE, NODE.
    /// Between `begin_move` and `finish_move` the slot is in migration (ASK).
    void begin_move(std::uint16_t slot, std::uint16_t from, std::uint16_t to)
    {
        const auto s = std::to_string(slot);
        expect_ok(cli(to, "cluster setslot " + s + " importing " + id_of(from)));
        expect_ok(cli(from, "cluster setslot " + s + " migrating " + id_of(to)));
    }

    /// MIGRATEs every key of `slot` from `from` to `to`.
    void move_keys(std::uint16_t slot, std::uint16_t from, std::uint16_t to)
    {
        std::istringstream keys{cli(from, "--no-raw cluster getkeysinslot " + std::to_string(slot) + " 1000")};
        std::string list;
        for (std::string line; std::getline(keys, line);) {
            const auto q = line.find('"');
            if (q == std::string::npos)
                continue;
            list += " '" + line.substr(q + 1, line.rfind('"') - q - 1) + "'";
        }
        if (!list.empty())
            expect_ok(cli(from, "migrate 127.0.0.1 " + std::to_string(to) + " \"\" 0 5000 keys" + list));
    }

    void finish_move(std::uint16_t slot, std::uint16_t to)
    {
        const auto id = id_of(to);
        for (const auto& n : members_)
            if (n->pid() >= 0)
                (void)cli(n->port(), "cluster setslot " + std::to_string(slot) + " node " + id);
    }

    /// Every live node says cluster_state:ok and sees the same primaries, each with
    /// `replicas` replicas in all (fewer after a kill is not settled).
    bool settled(int replicas) const
    {
        std::string first_view;
        for (const auto& n : members_) {
            if (n->pid() < 0)
                continue;
            if (cli(n->port(), "cluster info").find("cluster_state:ok") == std::string::npos)
                return false;
            const auto view = primaries_seen(cli(n->port(), "cluster nodes"));
            if (first_view.empty())
                first_view = view;
            else if (view != first_view)
                return false;
        }
        if (replicas > 0) {
            int linked = 0;
            for (const auto& n : members_)
                if (n->pid() >= 0 && cli(n->port(), "info replication").find("master_link_status:up") != std::string::npos)
                    ++linked;
            if (linked < replicas)
                return false;
        }
        return true;
    }

private:
    static std::string trim(std::string s)
    {
        while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' '))
            s.pop_back();
        return s;
    }

    static void expect_ok(const std::string& out)
    {
        if (out.find("OK") == std::string::npos)
            throw std::runtime_error{"redis-cli: " + out};
    }

    static std::uint16_t port_in(const std::string& addr) // 127.0.0.1:7000@17000
    {
        const auto colon = addr.find(':');
        const auto at = addr.find('@');
        return static_cast<std::uint16_t>(std::stoi(addr.substr(colon + 1, at - colon - 1)));
    }

    // The primary whose slot ranges in CLUSTER NODES contain `slot`.
    static std::uint16_t owner_in(const std::string& nodes, std::uint16_t slot)
    {
        std::istringstream lines{nodes};
        for (std::string line; std::getline(lines, line);) {
            std::istringstream words{line};
            std::string id, addr, flags, master, ping, pong, epoch, link, range;
            words >> id >> addr >> flags >> master >> ping >> pong >> epoch >> link;
            if (flags.find("master") == std::string::npos || flags.find("fail") != std::string::npos)
                continue;
            while (words >> range) {
                if (range.starts_with('['))
                    continue; // a slot in migration
                const auto dash = range.find('-');
                const int lo = std::stoi(range.substr(0, dash));
                const int hi = dash == std::string::npos ? lo : std::stoi(range.substr(dash + 1));
                if (slot >= lo && slot <= hi)
                    return port_in(addr);
            }
        }
        throw std::runtime_error{"no primary serves slot " + std::to_string(slot)};
    }

    // "port:ranges" of every primary with slots, sorted: equal on nodes that agree.
    static std::string primaries_seen(const std::string& nodes)
    {
        std::vector<std::string> seen;
        std::istringstream lines{nodes};
        for (std::string line; std::getline(lines, line);) {
            std::istringstream words{line};
            std::string id, addr, flags, master, ping, pong, epoch, link, range, ranges;
            words >> id >> addr >> flags >> master >> ping >> pong >> epoch >> link;
            if (flags.find("master") == std::string::npos || flags.find("fail") != std::string::npos)
                continue;
            while (words >> range)
                ranges += range + ",";
            if (!ranges.empty())
                seen.push_back(std::to_string(port_in(addr)) + ":" + ranges);
        }
        std::sort(seen.begin(), seen.end());
        std::string out;
        for (const auto& s : seen)
            out += s + ";";
        return out;
    }
};

/// A Sentinel (redis-server --sentinel) watching the primary on `primary` as `name`,
/// quorum 2, down-after 1 s, failover timeout 5 s.
class redis_sentinel : public server_process {
public:
    redis_sentinel(std::uint16_t primary, std::string name)
        : server_process{"redis-server --sentinel"}, primary_{primary}, name_{std::move(name)}
    {
        start_on_free_ports();
    }

    std::string url() const override { return "redis+sentinel://" + address() + "/" + name_; }

protected:
    // Sentinel rewrites its configuration file as it learns: a fresh one per start,
    // for the port it starts on.
    std::vector<std::string> command() const override
    {
        const auto conf = dir() / "sentinel.conf";
        std::ofstream{conf} << "port " << port() << "\nbind 127.0.0.1\ndir " << dir().string()
                            << "\nsentinel monitor " << name_ << " 127.0.0.1 " << primary_ << " 2\n"
                            << "sentinel down-after-milliseconds " << name_ << " 1000\n"
                            << "sentinel failover-timeout " << name_ << " 5000\n"
                            << "sentinel parallel-syncs " << name_ << " 1\n";
        return {"redis-server", conf.string(), "--sentinel", "--logfile", (dir() / "sentinel.log").string()};
    }

private:
    std::uint16_t primary_;
    std::string name_;
};

static_assert(launcher<redis_sentinel>);

/// A primary, its replica and three Sentinels watching them as "distlock-primary".
class redis_sentinels {
public:
    static constexpr const char* name = "distlock-primary";

    redis_sentinels() : replica_{{"--replica-announce-ip", "127.0.0.1"}}
    {
        const auto out = cli(replica_.port(), "replicaof 127.0.0.1 " + std::to_string(primary_.port()));
        if (out.find("OK") == std::string::npos)
            throw std::runtime_error{"replicaof failed: " + out};
        wait_until("the replica to sync", [&] {
            return cli(replica_.port(), "info replication").find("master_link_status:up") != std::string::npos;
        });
        for (auto& s : sentinels_)
            s = std::make_unique<redis_sentinel>(primary_.port(), name);
        // Every Sentinel knows the primary, the replica and the other two Sentinels.
        wait_until("the Sentinels to find each other", [&] {
            for (const auto& s : sentinels_) {
                const auto info = cli(s->port(), std::string{"sentinel master "} + name);
                if (info.find("num-other-sentinels\n2") == std::string::npos ||
                    info.find("num-slaves\n1") == std::string::npos)
                    return false;
            }
            return true;
        }, std::chrono::seconds{30});
    }

    redis_server& primary() { return primary_; }
    redis_server& replica() { return replica_; }
    redis_sentinel& sentinel(std::size_t i) { return *sentinels_[i]; }

    distlock::redis::config config() const
    {
        distlock::redis::config c;
        for (const auto& s : sentinels_)
            c.sentinels.push_back({"127.0.0.1", s->port()});
        c.sentinel_master = name;
        return c;
    }

    /// The primary's port according to the first Sentinel that answers.
    std::uint16_t current_primary() const
    {
        for (const auto& s : sentinels_) {
            std::istringstream words{cli(s->port(), std::string{"sentinel get-master-addr-by-name "} + name)};
            std::string host, port;
            if (words >> host >> port)
                return static_cast<std::uint16_t>(std::stoi(port));
        }
        return 0;
    }

private:
    redis_server primary_;
    redis_server replica_;
    std::array<std::unique_ptr<redis_sentinel>, 3> sentinels_;
};

} // namespace test
