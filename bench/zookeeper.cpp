// distlock on ZooKeeper, next to its floor in the same run, against a standalone server
// it starts (test/zookeeper/ensemble.hpp):
//  - uncontended acquire + release: the floor is a minimal blocking client sending the
//    requests the recipe needs (the ephemeral sequential create with the read of the
//    children, in one write; the delete) in a session of its own, made beforehand as
//    distlock's session is;
//  - contended hand-off across separate processes (copies of this binary started
//    with --worker): every process takes the lock on one resource in a loop; the time
//    from one process's release to the next process's grant, on the machine's one
//    monotonic clock, compared with one round trip of the floor client.
// Every workload is bounded in count and time. Prints a table; appends JSON lines to
// the file named by the first argument.
#include <distlock/distlock.hpp>
#include <distlock/zookeeper.hpp>

#include "report.hpp"
#include "zookeeper/ensemble.hpp"

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

std::int64_t now_ns() { return std::chrono::duration_cast<std::chrono::nanoseconds>(steady::now().time_since_epoch()).count(); }

// --worker PORT PREFIX ROUNDS: ROUNDS critical sections of 1 ms on "contended", each
// printed as "held ACQUIRED_NS RELEASED_NS".
int worker(int argc, char** argv)
{
    if (argc != 5)
        return 2;
    zk::config cfg;
    cfg.servers = {{"127.0.0.1", static_cast<std::uint16_t>(std::atoi(argv[2]))}};
    cfg.prefix = argv[3];
    const int rounds = std::atoi(argv[4]);
    asio::io_context io;
    zk::store store{io, cfg};
    int status = 1;
    std::vector<std::pair<std::int64_t, std::int64_t>> held;
    asio::co_spawn(io, [&]() -> dl::awaitable<void> {
        dl::basic_distributed_mutex<zk::store, dl::retry::exponential_backoff> m{
            store, "contended", {}, dl::retry::exponential_backoff{.deadline = 60s}};
        for (int i = 0; i < rounds; ++i) {
            auto l = co_await m.lock();
            if (!l)
                co_return;
            const auto acquired = now_ns();
            dl::timer t{co_await asio::this_coro::executor, 1ms};
            co_await t.async_wait(asio::use_awaitable);
            const auto released = now_ns();
            if (!co_await l->unlock())
                co_return;
            held.emplace_back(acquired, released);
        }
        status = 0;
        co_await store.close();
    }, asio::detached);
    io.run_for(120s);
    for (const auto& [a, r] : held)
        std::printf("held %lld %lld\n", static_cast<long long>(a), static_cast<long long>(r));
    std::fflush(stdout);
    return status;
}

} // namespace

int main(int argc, char** argv)
{
    if (argc > 1 && std::strcmp(argv[1], "--worker") == 0)
        return worker(argc, argv);
    bench::json.open(argc > 1 ? argv[1] : "bench/results.jsonl", std::ios::app);
    std::printf("%-58s %8s %10s %9s %9s %9s %10s\n", "workload (ZooKeeper: one server on loopback)", "ops", "ops/s",
                "p50 us", "p90 us", "p99 us", "max us");
    test::zookeeper_ensemble server{1};
    const std::string prefix = "/bench";
    constexpr std::size_t count = 1000, warmup = 100;
    constexpr auto limit = 40s;

    raw_client raw{server.port()};
    const auto parent = zk::detail::resource_node(prefix, "bench:floor");
    {
        // The nodes above the floor's waiters, as the store makes them on first use.
        std::string setup = proto::encode_create2(raw.next(), prefix, {}, proto::create_flags::persistent);
        setup += proto::encode_create2(raw.next(), parent, {}, proto::create_flags::persistent);
        (void)raw.exchange(setup, 2);
    }
    result_row floor{"floor: raw client, create + children, delete"};
    result_row lock{"distlock: lock() + unlock()"};
    result_row rtt{"floor: one exists round trip"};
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
                auto create = proto::encode_create2(raw.next(), parent + "/" + zk::detail::waiter_prefix(owner), {},
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

    // Contended hand-off across processes.
    constexpr int processes = 4, rounds = 50;
    std::vector<std::unique_ptr<test::child>> workers;
    for (int i = 0; i < processes; ++i)
        workers.push_back(std::make_unique<test::child>(std::vector<std::string>{
            test::self_path(), "--worker", std::to_string(server.port()), prefix + "/contended", std::to_string(rounds)}));
    struct section {
        std::int64_t acquired, released;
        int process;
    };
    std::vector<section> sections;
    for (int i = 0; i < processes; ++i) {
        while (auto line = workers[i]->read_line(std::chrono::seconds{120})) {
            long long a = 0, r = 0;
            if (std::sscanf(line->c_str(), "held %lld %lld", &a, &r) == 2)
                sections.push_back({a, r, i});
        }
        if (workers[i]->wait(std::chrono::seconds{30}) != std::optional<int>{0}) {
            std::fprintf(stderr, "a worker failed\n");
            return 1;
        }
    }
    std::sort(sections.begin(), sections.end(), [](const auto& x, const auto& y) { return x.acquired < y.acquired; });
    result_row handoff{"distlock: hand-off across 4 processes (release -> grant)"};
    std::size_t changed = 0, overlaps = 0;
    for (std::size_t i = 1; i < sections.size(); ++i) {
        if (sections[i].acquired < sections[i - 1].released)
            ++overlaps;
        if (sections[i].process != sections[i - 1].process) {
            ++changed;
            handoff.us.push_back(static_cast<double>(sections[i].acquired - sections[i - 1].released) / 1000.0);
        }
    }
    handoff.operations = handoff.us.size();
    handoff.seconds = sections.empty() ? 0
                                       : static_cast<double>(sections.back().released - sections.front().acquired) / 1e9;
    const double changed_share = sections.size() > 1 ? static_cast<double>(changed) / (sections.size() - 1) : 0;
    const double round_trips = rtt.pct(0.5) > 0 ? handoff.pct(0.5) / rtt.pct(0.5) : 0;
    handoff.extra = ",\"changed_hands\":" + std::to_string(changed_share) + ",\"p50_round_trips\":" +
                    std::to_string(round_trips) + ",\"overlaps\":" + std::to_string(overlaps);
    bench::print(handoff);
    std::printf("  %zu critical sections, %.1f %% changed hands, hand-off p50 = %.2f round trips, %zu overlaps\n",
                sections.size(), 100 * changed_share, round_trips, overlaps);
    return overlaps == 0 ? 0 : 1;
}
