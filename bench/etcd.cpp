// distlock on etcd, next to its floor in the same run, against a member it starts
// (test/support/etcd_server.hpp, data in /dev/shm):
//  - uncontended acquire + release: the floor is a minimal blocking gRPC client sending
//    the requests the recipe needs (the creating txn with its range, the delete) over
//    one HTTP/2 connection, with a session lease granted beforehand as distlock's
//    session is;
//  - contended hand-off across separate processes (copies of this binary started
//    with --worker): every process takes the lock on one key in a loop; the time
//    from one process's release to the next process's grant, on the machine's one
//    monotonic clock, compared with one round trip of the floor client;
//  - the shared workloads (bench/shared_workloads.hpp: eight readers beside a writer,
//    a semaphore of 4 over 8 processes);
//  - the `peers` group (bench/peer.hpp): etcd's Go concurrency.Mutex
//    (bench/peers/etcd-go, built by ./dev bench) in the same two mutex workloads,
//    pairs on fresh keys in rounds alternating with distlock's, and its hand-off
//    across 4 processes before distlock's, each of distlock's rows with its ratio to
//    the Go client's; skipped when DISTLOCK_ETCD_GO names no program.
// Every workload is bounded in count and time. Prints a table; appends JSON lines to
// the file named by the first argument.
#include <distlock/distlock.hpp>
#include <distlock/etcd.hpp>

#include "etcd_server.hpp"
#include "failover.hpp"
#include "handoff.hpp"
#include "peer.hpp"
#include "report.hpp"
#include "shared_workloads.hpp"

#include <asio/connect.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/write.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <unistd.h>
#include <vector>

namespace dl = distlock;
namespace etcd = distlock::etcd;
using namespace std::chrono_literals;
using bench::micros;
using bench::result_row;
using bench::steady;
using json = nlohmann::json;

namespace {

// One gRPC call at a time on a blocking socket, through the HTTP/2 session and the
// message schema the store uses but none of its engine, channel or lock logic: the
// floor.
class raw_client {
public:
    explicit raw_client(std::uint16_t port) : authority_{"127.0.0.1:" + std::to_string(port)}, socket_{io_}
    {
        socket_.connect({asio::ip::make_address("127.0.0.1"), port});
        socket_.set_option(asio::ip::tcp::no_delay{true});
        flush();
    }

    // The answer's JSON; {"error": ..., "code": N} for a status that is not OK; null
    // when there is no answer.
    json call(const std::string& path, const json& body)
    {
        const auto* rpc = etcd::detail::messages::rpc_at(path);
        const auto request = rpc ? dl::protobuf::encode(*rpc->request, body) : dl::result<std::string>{dl::errc::invalid_argument};
        if (!request)
            return nullptr;
        const std::vector<dl::http2::header> headers{{":method", "POST"},          {":scheme", "http"},
                                                      {":path", rpc->grpc_path},     {":authority", authority_},
                                                      {"content-type", "application/grpc"}, {"te", "trailers"}};
        answer a;
        if (session_.submit(headers, dl::grpc::frame(request.value()), true, &a) <= 0)
            return nullptr;
        flush();
        while (!a.closed) {
            char chunk[16384];
            const auto n = socket_.read_some(asio::buffer(chunk));
            std::string why;
            if (!session_.receive({chunk, n}, why))
                return nullptr;
            flush();
        }
        if (a.status != 0)
            return json{{"error", a.message}, {"code", a.status}};
        std::string message;
        std::string why;
        if (a.body.next(message, why) != dl::grpc::deframer::status::message)
            return nullptr;
        auto doc = dl::protobuf::decode(*rpc->response, message);
        return doc ? std::move(doc.value()) : json{};
    }

private:
    struct answer final : dl::http2::stream_listener {
        void on_header(std::string_view name, std::string_view value, bool) override
        {
            if (name == "grpc-status")
                status = dl::grpc::parse_status(value).value_or(-1);
            else if (name == "grpc-message")
                message = value;
        }
        void on_data(std::string_view bytes) override { body.append(bytes); }
        void on_close(std::uint32_t) override { closed = true; }
        dl::grpc::deframer body;
        int status = -1;
        std::string message;
        bool closed = false;
    };

    void flush()
    {
        std::string out;
        session_.output(out);
        if (!out.empty())
            asio::write(socket_, asio::buffer(out));
    }

    std::string authority_;
    asio::io_context io_;
    asio::ip::tcp::socket socket_;
    dl::http2::client_session session_;
};

// --worker PORT PREFIX ROUNDS [START_NS]: ROUNDS critical sections of 1 ms on "contended", each
// printed as "held ACQUIRED_NS RELEASED_NS".
int worker(int argc, char** argv)
{
    if (argc != 5 && argc != 6)
        return 2;
    etcd::config cfg;
    cfg.members = {{"127.0.0.1", static_cast<std::uint16_t>(std::atoi(argv[2]))}};
    cfg.prefix = argv[3];
    const int rounds = std::atoi(argv[4]);
    asio::io_context io;
    etcd::store store{io, cfg};
    return bench::handoff_worker(io, store, rounds, argc > 5 ? std::atoll(argv[5]) : 0);
}

// --elect ROLE PORT PREFIX NAME: a participant of the fail-over rounds, its session
// TTL that of the Go election.
constexpr int election_ttl_seconds = 2;
int elect(int argc, char** argv)
{
    if (argc != 6)
        return 2;
    etcd::config cfg;
    cfg.members = {{"127.0.0.1", static_cast<std::uint16_t>(std::atoi(argv[3]))}};
    cfg.prefix = argv[4];
    cfg.session_ttl = std::chrono::seconds{election_ttl_seconds};
    asio::io_context io;
    etcd::store store{io, cfg};
    return bench::election_worker(io, store, argv[2], argv[5], cfg.session_ttl);
}

// --shared-worker ROLE PORT PREFIX ROUNDS: a worker of the shared workloads.
int shared_worker(int argc, char** argv)
{
    if (argc != 6)
        return 2;
    etcd::config cfg;
    cfg.members = {{"127.0.0.1", static_cast<std::uint16_t>(std::atoi(argv[3]))}};
    cfg.prefix = argv[4];
    asio::io_context io;
    etcd::store store{io, cfg};
    return bench::shared_worker(io, store, argv[2], std::atoi(argv[5]));
}

// etcd's Go client (bench/peers/etcd-go), the reference client of the election and
// mutex rows: the program DISTLOCK_ETCD_GO names, built by ./dev bench; empty when
// there is none.
std::string go_peer()
{
    const char* path = std::getenv("DISTLOCK_ETCD_GO");
    return path && *path && ::access(path, X_OK) == 0 ? path : "";
}

// 50 timed lock() + unlock() pairs of `m`, recorded in `row` when `record`; false
// when one failed.
template <class Mutex>
dl::awaitable<bool> timed_pairs(Mutex& m, result_row& row, bool record)
{
    bool ok = true;
    for (int i = 0; i < 50; ++i) {
        const auto t0 = steady::now();
        auto l = co_await m.lock();
        if (!l || !co_await l->unlock())
            ok = false;
        if (record)
            row.us.push_back(micros(steady::now() - t0));
    }
    co_return ok;
}

} // namespace

int main(int argc, char** argv)
{
    if (argc > 1 && std::strcmp(argv[1], "--shared-worker") == 0)
        return shared_worker(argc, argv);
    if (argc > 1 && std::strcmp(argv[1], "--worker") == 0)
        return worker(argc, argv);
    if (argc > 1 && std::strcmp(argv[1], "--elect") == 0)
        return elect(argc, argv);
    bench::json.open(argc > 1 ? argv[1] : "bench/results.jsonl", std::ios::app);
    std::printf("%-58s %8s %10s %9s %9s %9s %10s\n", "workload (etcd: one member on loopback, tmpfs)", "ops", "ops/s",
                "p50 us", "p90 us", "p99 us", "max us");
    test::etcd_cluster server{1};
    const std::string prefix = "bench/";
    const auto go = go_peer();
    const auto endpoint = "127.0.0.1:" + std::to_string(server.port());
    // Leader fail-over, next to etcd's Go election (bench/peers/etcd-go, built by
    // ./dev bench) with the same session TTL, rounds alternating between the two.
    const auto failover_rows = [&] {
        int missed = 0;
        const auto port = std::to_string(server.port());
        result_row ours_row{"distlock: election fail-over, leader SIGKILLed (us)"};
        result_row go_row{"etcd Go concurrency.Election: fail-over (us)"};
        const auto wait_out = std::chrono::milliseconds{election_ttl_seconds * 1000};
        for (int round = 0; round < 3; ++round) {
            missed += bench::failovers(
                ours_row,
                [&](const std::string& role, const std::string& name) {
                    return std::vector<std::string>{test::self_path(), "--elect", role, port, prefix + "elections/",
                                                    name + "-" + std::to_string(round)};
                },
                2, wait_out);
            if (!go.empty())
                missed += bench::failovers(
                    go_row,
                    [&](const std::string& role, const std::string& name) {
                        return std::vector<std::string>{go, "elect", endpoint, name + "-" + std::to_string(round),
                                                        role, std::to_string(election_ttl_seconds)};
                    },
                    2, wait_out);
        }
        if (!go.empty()) {
            bench::print_failover(go_row, wait_out);
            bench::print_failover(ours_row, wait_out, &go_row);
        } else {
            bench::print_failover(ours_row, wait_out);
            std::printf("(etcd's Go election not measured: DISTLOCK_ETCD_GO names no program)\n");
        }
        return missed;
    };
    if (bench::only("failover"))
        return failover_rows() != 0 ? 1 : 0;
    constexpr std::size_t count = 1000, warmup = 100;
    constexpr auto limit = 40s;
    const bool peers_only = bench::only("peers");

    raw_client raw{server.port()};
    result_row rtt{"floor: one kv/range round trip"};
    if (peers_only) {
        // The round trip alone: the hand-offs are counted in it.
        const auto absent = etcd::detail::range_request(prefix + "bench:absent");
        const auto start = steady::now();
        for (std::size_t i = 0; i < warmup + count && steady::now() - start < limit; ++i) {
            const auto t0 = steady::now();
            (void)raw.call("kv/range", absent);
            if (i >= warmup)
                rtt.us.push_back(micros(steady::now() - t0));
        }
        rtt.seconds = std::chrono::duration<double>(steady::now() - start).count();
        rtt.operations = rtt.us.size();
        bench::print(rtt);
    } else {
        const auto granted = raw.call("lease/grant", json{{"TTL", "30"}});
        const auto lease = granted.is_object() ? granted.value("ID", std::string{}) : std::string{};
        if (lease.empty()) {
            std::fprintf(stderr, "no lease granted\n");
            return 1;
        }
        // The recipe's requests for an uncontended lock, as the store sends them.
        const auto floor_request = [&](const dl::owner_token& owner) {
            const auto queue = etcd::detail::queue_prefix(prefix, "bench:floor");
            const auto key = queue + owner.to_hex();
            const json txn = {
                {"compare", json::array({etcd::detail::create_compare(key, 0)})},
                {"success", json::array({json{{"request_put",
                                               {{"key", dl::util::base64(key)},
                                                {"value", dl::util::base64(owner.to_hex())},
                                                {"lease", lease}}}},
                                         json{{"request_range", etcd::detail::queue_request(queue, "DESCEND", 2)}}})},
                {"failure", json::array({json{{"request_range", etcd::detail::range_request(key)}},
                                         json{{"request_range", etcd::detail::queue_request(queue, "ASCEND", 1)}}})}};
            return std::pair{txn, etcd::detail::range_request(key)};
        };

        // Alternating rounds of the two, so that a noisy neighbour hits both alike.
        result_row floor{"floor: raw client, txn create + deleterange"};
        result_row lock{"distlock: lock() + unlock()"};
        result_row lock_gateway{"distlock over the JSON gateway (api=gateway)"};
        asio::io_context io;
        etcd::store store{io, server.config(prefix)};
        auto gateway_config = server.config(prefix);
        gateway_config.api = etcd::api::gateway;
        etcd::store gateway_store{io, gateway_config};
        dl::basic_distributed_mutex<etcd::store, dl::retry::none> m{store, "bench:lock"};
        dl::basic_distributed_mutex<etcd::store, dl::retry::none> m_gateway{gateway_store, "bench:lock-gateway"};
        bool failed = false;
        const auto start = steady::now();
        asio::co_spawn(io, [&]() -> dl::awaitable<void> {
            for (std::size_t round = 0; round < (warmup + count) / 50 && steady::now() - start < limit; ++round) {
                for (int i = 0; i < 50; ++i) {
                    const auto [create, remove] = floor_request(dl::owner_token::generate());
                    const auto t0 = steady::now();
                    const auto a = raw.call("kv/txn", create);
                    const auto r = raw.call("kv/deleterange", remove);
                    if (!a.is_object() || !a.value("succeeded", false) || !r.is_object() || r.contains("error"))
                        failed = true;
                    if (round * 50 >= warmup)
                        floor.us.push_back(micros(steady::now() - t0));
                    const auto t1 = steady::now();
                    (void)raw.call("kv/range", remove);
                    if (round * 50 >= warmup)
                        rtt.us.push_back(micros(steady::now() - t1));
                }
                const bool past_warmup = round * 50 >= warmup;
                if (!co_await timed_pairs(m, lock, past_warmup))
                    failed = true;
                if (!co_await timed_pairs(m_gateway, lock_gateway, past_warmup))
                    failed = true;
            }
            co_await store.close();
            co_await gateway_store.close();
        }, asio::detached);
        io.run();
        if (failed) {
            std::fprintf(stderr, "a request failed\n");
            return 1;
        }
        floor.seconds = lock.seconds = lock_gateway.seconds = rtt.seconds =
            std::chrono::duration<double>(steady::now() - start).count() / 3;
        floor.operations = floor.us.size();
        lock.operations = lock.us.size();
        lock_gateway.operations = lock_gateway.us.size();
        rtt.operations = rtt.us.size();
        bench::print(floor);
        bench::print(lock, &floor);
        bench::print(lock_gateway, &lock);
        bench::print(rtt);
    }

    // The Go Mutex beside distlock: pairs on fresh keys in alternating rounds, then
    // its hand-off, before distlock's.
    bench::handoff_rows go_handoff;
    long peer_bad = 0;
    if (go.empty()) {
        std::printf("peers: etcd's Go client not built (DISTLOCK_ETCD_GO names no program); its rows are skipped\n");
    } else {
        constexpr std::size_t per_round = 300;
        const bool paired = bench::pairs_beside_peer(
            "peer Go concurrency.Mutex: Lock + Unlock, fresh keys",
            [&](int) { return std::vector<std::string>{go, "pair", endpoint, std::to_string(per_round)}; },
            "distlock: lock() + unlock(), fresh keys",
            [&](int round) {
                return bench::fresh_pairs<etcd::store>(server.config(prefix),
                                                       "peer-pairs:" + std::to_string(round) + ":", per_round);
            },
            3);
        if (!paired) {
            std::fprintf(stderr, "a request failed\n");
            return 1;
        }
        const std::vector<std::string> contender{go, "contend", endpoint, "/bench/peer-contended", "50",
                                                 bench::start_in(2s)};
        peer_bad = bench::peer_outcome("peer Go concurrency.Mutex",
                                       bench::handoffs(contender, 4, rtt, "peer Go concurrency.Mutex", nullptr,
                                                       &go_handoff));
    }

    // Contended hand-off across processes.
    const std::vector<std::string> worker{test::self_path(), "--worker", std::to_string(server.port()),
                                          prefix + "contended/", "50", bench::start_in(1s)};
    const long handed = bench::handoffs(worker, 4, rtt, "distlock", go.empty() ? nullptr : &go_handoff);
    if (peers_only)
        return handed == 0 && peer_bad == 0 ? 0 : 1;
    const auto ours = [&](const char* role, int rounds) {
        return std::vector<std::string>{test::self_path(), "--shared-worker", role, std::to_string(server.port()),
                                        prefix + "shared/", std::to_string(rounds)};
    };
    long bad = bench::readers_and_writer("distlock", ours("reader", 40), 8, ours("writer", 20), rtt);

    bad += failover_rows();
    bad += bench::semaphore_handoffs("distlock", ours("permit:4", 30), 8, 4, rtt);
    if (bad != 0)
        std::fprintf(stderr, "a shared workload failed or broke its lock (%ld)\n", bad);
    return bad == 0 && handed == 0 && peer_bad == 0 ? 0 : 1;
}
