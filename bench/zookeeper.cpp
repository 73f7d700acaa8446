// distlock on ZooKeeper, next to its floor in the same run, against a standalone server
// it starts (test/support/zookeeper_server.hpp):
//  - uncontended acquire + release: the floor is a minimal blocking client sending the
//    requests the recipe needs (the ephemeral sequential create with the read of the
//    children, in one write; the delete) in a session of its own, made beforehand as
//    distlock's session is;
//  - contended hand-off across separate processes (copies of this binary started
//    with --worker): every process takes the lock on one resource in a loop; the time
//    from one process's release to the next process's grant, on the machine's one
//    monotonic clock, compared with one round trip of the floor client;
//  - the shared workloads (bench/shared_workloads.hpp: eight readers beside a writer,
//    a semaphore of 4 over 8 processes), beside kazoo's ReadLock, WriteLock and
//    Semaphore recipes (bench/peers/kazoo, Debian's python3-kazoo) in the same run;
//  - the `peers` group (bench/peer.hpp): kazoo's Lock recipe (bench/peers/kazoo/lock.py)
//    in the same two mutex workloads, pairs on fresh lock paths in rounds alternating
//    with distlock's, and its hand-off across 4 processes before distlock's, each of
//    distlock's rows with its ratio to kazoo's; skipped when kazoo is missing.
// Every workload is bounded in count and time. Prints a table; appends JSON lines to
// the file named by the first argument.
#include <distlock/distlock.hpp>
#include <distlock/zookeeper.hpp>

#include "failover.hpp"
#include "handoff.hpp"
#include "peer.hpp"
#include "report.hpp"
#include "shared_workloads.hpp"
#include "zookeeper_server.hpp"

#include <asio/ip/tcp.hpp>
#include <asio/write.hpp>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace dl = distlock;
namespace zk = distlock::zookeeper;
namespace proto = distlock::zookeeper::proto;
using namespace std::chrono_literals;
using bench::micros;
using bench::result_row;
using bench::steady;

namespace {

// Requests on a blocking socket, in a session of its own: the floor.
class raw_client {
public:
    explicit raw_client(std::uint16_t port) : socket_{io_}
    {
        socket_.connect({asio::ip::make_address("127.0.0.1"), port});
        socket_.set_option(asio::ip::tcp::no_delay{true});
        proto::connect_request c;
        c.timeout_ms = 10000;
        asio::write(socket_, asio::buffer(proto::encode(c)));
        const auto payload = frame();
        const auto r = proto::parse_connect_response(payload);
        if (!r || r->session_id == 0)
            throw std::runtime_error{"no session"};
    }

    std::int32_t next() { return ++xid_; }

    // Sends `bytes` (holding `count` requests) in one write and reads their replies.
    std::vector<proto::reply> exchange(const std::string& bytes, std::size_t count)
    {
        asio::write(socket_, asio::buffer(bytes));
        std::vector<proto::reply> out;
        while (out.size() < count) {
            auto r = proto::parse_reply(frame());
            if (!r)
                throw std::runtime_error{"bad reply"};
            if (r->xid != proto::xid::notification)
                out.push_back(std::move(*r));
        }
        return out;
    }

private:
    std::string frame()
    {
        for (;;) {
            if (buffer_.size() >= 4) {
                proto::reader r{std::string_view{buffer_}.substr(0, 4)};
                const auto n = static_cast<std::size_t>(r.i32());
                if (buffer_.size() >= 4 + n) {
                    auto payload = buffer_.substr(4, n);
                    buffer_.erase(0, 4 + n);
                    return payload;
                }
            }
            char chunk[16384];
            const auto n = socket_.read_some(asio::buffer(chunk));
            buffer_.append(chunk, n);
        }
    }

    asio::io_context io_;
    asio::ip::tcp::socket socket_;
    std::string buffer_;
    std::int32_t xid_ = 0;
};

// --worker PORT PREFIX ROUNDS [START_NS]: ROUNDS critical sections of 1 ms on "contended", each
// printed as "held ACQUIRED_NS RELEASED_NS".
int worker(int argc, char** argv)
{
    if (argc != 5 && argc != 6)
        return 2;
    zk::config cfg;
    cfg.servers = {{"127.0.0.1", static_cast<std::uint16_t>(std::atoi(argv[2]))}};
    cfg.prefix = argv[3];
    const int rounds = std::atoi(argv[4]);
    asio::io_context io;
    zk::store store{io, cfg};
    return bench::handoff_worker(io, store, rounds, argc > 5 ? std::atoll(argv[5]) : 0);
}

// --shared-worker ROLE PORT PREFIX ROUNDS: a worker of the shared workloads.
int shared_worker(int argc, char** argv)
{
    if (argc != 6)
        return 2;
    zk::config cfg;
    cfg.servers = {{"127.0.0.1", static_cast<std::uint16_t>(std::atoi(argv[3]))}};
    cfg.prefix = argv[4];
    asio::io_context io;
    zk::store store{io, cfg};
    return bench::shared_worker(io, store, argv[2], std::atoi(argv[5]));
}

// kazoo (Debian's python3-kazoo, run by Debian's python3) for the peer rows; skipped
// when missing.
bool have_kazoo() { return std::system("/usr/bin/python3 -c 'import kazoo' > /dev/null 2>&1") == 0; }

// The shared workloads: kazoo's rows first, then distlock's with their ratio to them.
long shared_workloads(std::uint16_t server_port, const std::string& prefix, result_row& rtt)
{
    const auto port = std::to_string(server_port);
    const auto ours = [&](const char* role, int rounds) {
        return std::vector<std::string>{test::self_path(), "--shared-worker", role, port, prefix + "/shared",
                                        std::to_string(rounds)};
    };
    const std::string peer = DISTLOCK_SOURCE_DIR "/bench/peers/kazoo/shared.py";
    const auto theirs = [&](const char* role, int rounds) {
        return std::vector<std::string>{"/usr/bin/python3", peer, role, port, "/kazoo", std::to_string(rounds)};
    };
    result_row reads, wait, handoff;
    const bool peer_runs = have_kazoo();
    long bad = 0;
    if (peer_runs)
        bad += bench::peer_outcome("peer kazoo", bench::readers_and_writer("peer kazoo", theirs("reader", 40), 8,
                                                                        theirs("writer", 20), rtt, nullptr, nullptr,
                                                                        &reads, &wait));
    else
        std::printf("  (python3-kazoo missing: its rows are skipped)\n");
    bad += bench::readers_and_writer("distlock", ours("reader", 40), 8, ours("writer", 20), rtt,
                                     peer_runs ? &reads : nullptr, peer_runs ? &wait : nullptr);
    if (peer_runs)
        bad += bench::peer_outcome("peer kazoo", bench::semaphore_handoffs("peer kazoo", theirs("permit:4", 30), 8, 4,
                                                                        rtt, nullptr, &handoff));
    bad += bench::semaphore_handoffs("distlock", ours("permit:4", 30), 8, 4, rtt, peer_runs ? &handoff : nullptr);
    if (bad != 0)
        std::fprintf(stderr, "a shared workload failed or broke its lock (%ld)\n", bad);
    return bad;
}

} // namespace

// --elect ROLE PORT PREFIX NAME: a participant of the fail-over rounds.
constexpr auto election_timeout = std::chrono::seconds{2};
int elect(int argc, char** argv)
{
    if (argc != 6)
        return 2;
    zk::config cfg;
    cfg.servers = {{"127.0.0.1", static_cast<std::uint16_t>(std::atoi(argv[3]))}};
    cfg.prefix = argv[4];
    cfg.session_timeout = election_timeout;
    asio::io_context io;
    zk::store store{io, cfg};
    return bench::election_worker(io, store, argv[2], argv[5], cfg.session_timeout);
}

int main(int argc, char** argv)
{
    if (argc > 1 && std::strcmp(argv[1], "--elect") == 0)
        return elect(argc, argv);
    if (argc > 1 && std::strcmp(argv[1], "--shared-worker") == 0)
        return shared_worker(argc, argv);
    if (argc > 1 && std::strcmp(argv[1], "--worker") == 0)
        return worker(argc, argv);
    bench::json.open(argc > 1 ? argv[1] : "bench/results.jsonl", std::ios::app);
    std::printf("%-58s %8s %10s %9s %9s %9s %10s\n", "workload (ZooKeeper: one server on loopback)", "ops", "ops/s",
                "p50 us", "p90 us", "p99 us", "max us");
    test::zookeeper_ensemble server{1};
    const std::string prefix = "/bench";
    // Leader fail-over: the session timeout is what the ensemble waits out.
    const auto failover_rows = [&] {
        result_row failover{"distlock: election fail-over, leader SIGKILLed (us)"};
        const auto port = std::to_string(server.port());
        const int missed = bench::failovers(
            failover,
            [&](const std::string& role, const std::string& name) {
                return std::vector<std::string>{test::self_path(), "--elect", role, port, prefix + "/elections", name};
            },
            6, std::chrono::duration_cast<std::chrono::milliseconds>(election_timeout));
        bench::print_failover(failover, std::chrono::duration_cast<std::chrono::milliseconds>(election_timeout));
        return missed;
    };
    if (bench::only("failover"))
        return failover_rows() != 0 ? 1 : 0;
    constexpr std::size_t count = 1000, warmup = 100;
    constexpr auto limit = 40s;
    const bool peers_only = bench::only("peers");

    raw_client raw{server.port()};
    const auto parent = zk::detail::resource_node(prefix, "bench:floor");
    {
        // The nodes above the floor's waiters, as the store makes them on first use.
        std::string setup = proto::encode_create2(raw.next(), prefix, {}, proto::create_flags::persistent);
        setup += proto::encode_create2(raw.next(), parent, {}, proto::create_flags::persistent);
        (void)raw.exchange(setup, 2);
    }
    result_row rtt{"floor: one exists round trip"};
    if (peers_only) {
        // The round trip alone: the hand-offs are counted in it.
        const auto start = steady::now();
        for (std::size_t i = 0; i < warmup + count && steady::now() - start < limit; ++i) {
            const auto t0 = steady::now();
            (void)raw.exchange(proto::encode_exists(raw.next(), parent, false), 1);
            if (i >= warmup)
                rtt.us.push_back(micros(steady::now() - t0));
        }
        rtt.seconds = std::chrono::duration<double>(steady::now() - start).count();
        rtt.operations = rtt.us.size();
        bench::print(rtt);
    } else {
        result_row floor{"floor: raw client, create + children, delete"};
        result_row lock{"distlock: lock() + unlock()"};
        asio::io_context io;
        zk::store store{io, server.config(prefix)};
        dl::basic_distributed_mutex<zk::store, dl::retry::none> m{store, "bench:lock"};
        bool failed = false;
        const auto start = steady::now();
        asio::co_spawn(io, [&]() -> dl::awaitable<void> {
            // Alternating rounds of the two, so that a noisy neighbour hits both alike.
            for (std::size_t round = 0; round < (warmup + count) / 50 && steady::now() - start < limit; ++round) {
                for (int i = 0; i < 50; ++i) {
                    const auto owner = dl::owner_token::generate();
                    const auto t0 = steady::now();
                    auto create = proto::encode_create2(
                        raw.next(), parent + "/" + zk::detail::waiter_prefix(owner), {},
                        proto::create_flags::ephemeral | proto::create_flags::sequential);
                    create += proto::encode_get_children2(raw.next(), parent, false);
                    const auto made = raw.exchange(create, 2);
                    const auto created = made[0].err == 0 ? proto::parse_create2(made[0].body) : std::nullopt;
                    if (!created || made[1].err != 0) {
                        failed = true;
                        break;
                    }
                    const auto removed = raw.exchange(proto::encode_delete(raw.next(), created->path), 1);
                    if (removed[0].err != 0)
                        failed = true;
                    if (round * 50 >= warmup)
                        floor.us.push_back(micros(steady::now() - t0));
                    const auto t1 = steady::now();
                    (void)raw.exchange(proto::encode_exists(raw.next(), parent, false), 1);
                    if (round * 50 >= warmup)
                        rtt.us.push_back(micros(steady::now() - t1));
                }
                for (int i = 0; i < 50; ++i) {
                    const auto t0 = steady::now();
                    auto l = co_await m.lock();
                    if (!l || !co_await l->unlock())
                        failed = true;
                    if (round * 50 >= warmup)
                        lock.us.push_back(micros(steady::now() - t0));
                }
            }
            co_await store.close();
        }, asio::detached);
        io.run();
        if (failed) {
            std::fprintf(stderr, "a request failed\n");
            return 1;
        }
        floor.seconds = lock.seconds = rtt.seconds = std::chrono::duration<double>(steady::now() - start).count() / 2;
        floor.operations = floor.us.size();
        lock.operations = lock.us.size();
        rtt.operations = rtt.us.size();
        bench::print(floor);
        bench::print(lock, &floor);
        bench::print(rtt);
    }

    // kazoo's Lock beside distlock: pairs on fresh lock paths in alternating rounds,
    // then its hand-off, before distlock's.
    const auto port = std::to_string(server.port());
    const std::string kazoo_lock = DISTLOCK_SOURCE_DIR "/bench/peers/kazoo/lock.py";
    const bool kazoo = have_kazoo();
    bench::handoff_rows kazoo_handoff;
    long peer_bad = 0;
    if (!kazoo) {
        std::printf("peers: python3-kazoo missing; its rows are skipped\n");
    } else {
        constexpr std::size_t per_round = 300;
        const bool paired = bench::pairs_beside_peer(
            "peer kazoo Lock: acquire + release, fresh paths",
            [&](int) {
                return std::vector<std::string>{"/usr/bin/python3", kazoo_lock, "pair", port, "/kazoo-pairs",
                                                std::to_string(per_round)};
            },
            "distlock: lock() + unlock(), fresh paths",
            [&](int round) {
                return bench::fresh_pairs<zk::store>(server.config(prefix),
                                                     "peer-pairs:" + std::to_string(round) + ":", per_round);
            },
            3);
        if (!paired) {
            std::fprintf(stderr, "a request failed\n");
            return 1;
        }
        const std::vector<std::string> contender{"/usr/bin/python3", kazoo_lock, "contend", port, "/kazoo-contended",
                                                 "50", bench::start_in(3s)};
        peer_bad = bench::peer_outcome("peer kazoo Lock", bench::handoffs(contender, 4, rtt, "peer kazoo Lock",
                                                                          nullptr, &kazoo_handoff));
    }

    // Contended hand-off across processes.
    const std::vector<std::string> worker{test::self_path(), "--worker", port, prefix + "/contended", "50",
                                          bench::start_in(1s)};
    const long handed = bench::handoffs(worker, 4, rtt, "distlock", kazoo ? &kazoo_handoff : nullptr);
    if (peers_only)
        return handed == 0 && peer_bad == 0 ? 0 : 1;
    const int shared = shared_workloads(server.port(), prefix, rtt);

    const int missed = failover_rows();
    return shared == 0 && missed == 0 && handed == 0 && peer_bad == 0 ? 0 : 1;
}
