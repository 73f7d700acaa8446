// distlock on DynamoDB (dynalite), next to its floor in the same run: the same two
// UpdateItem requests (acquire, release), signed the same way, sent by a minimal
// blocking client over one keep-alive connection with no lock logic in between.
// Starts its own dynalite on loopback. Every workload is bounded in count and time.
// Prints a table; appends JSON lines to the file named by the first argument.
#include <distlock/distlock.hpp>
#include <distlock/dynamodb.hpp>

#include <cstring>

#include "dynalite_server.hpp" // test/support: dynalite on a free loopback port
#include "failover.hpp"
#include "report.hpp"

#include <asio/connect.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/read.hpp>
#include <asio/write.hpp>

#include <cstdio>
#include <string>

namespace dl = distlock;
namespace ddb = distlock::dynamodb;
using namespace std::chrono_literals;
using bench::micros;
using bench::result_row;
using bench::steady;

namespace {

// One signed DynamoDB request at a time on a blocking socket: the floor.
class raw_client {
public:
    raw_client(const ddb::config& cfg) : cfg_{cfg}, socket_{io_}
    {
        socket_.connect({asio::ip::make_address("127.0.0.1"), cfg.port});
        socket_.set_option(asio::ip::tcp::no_delay{true});
    }

    // The status of the answer to `operation` with `body`.
    int call(const std::string& operation, const std::string& body)
    {
        const auto date = ddb::detail::amz_date(std::chrono::system_clock::now());
        const std::string host = cfg_.host + ":" + std::to_string(cfg_.port);
        dl::aws::request r{.method = "POST",
                           .path = "/",
                           .query = {},
                           .headers = {{"Host", host},
                                       {"Content-Type", "application/x-amz-json-1.0"},
                                       {"X-Amz-Date", date},
                                       {"X-Amz-Target", "DynamoDB_20120810." + operation}},
                           .payload = body};
        const dl::aws::scope scope{date, cfg_.region, "dynamodb"};
        auto headers = r.headers;
        headers.emplace_back("Authorization", dl::aws::authorization(r, cfg_.credentials.access_key_id,
                                                                      cfg_.credentials.secret_access_key, scope));
        asio::write(socket_, asio::buffer(dl::http::encode_request("POST", "/", headers, r.payload)));
        for (;;) {
            const auto got = dl::http::parse_response(buffer_);
            if (got.status == dl::transport::decode_status::malformed)
                return 0;
            if (got.status == dl::transport::decode_status::complete) {
                buffer_.erase(0, got.consumed);
                return got.message.status;
            }
            char chunk[16384];
            const auto n = socket_.read_some(asio::buffer(chunk));
            buffer_.append(chunk, n);
        }
    }

private:
    ddb::config cfg_;
    asio::io_context io_;
    asio::ip::tcp::socket socket_;
    std::string buffer_;
};

std::string acquire_body(const std::string& resource, const dl::owner_token& owner)
{
    nlohmann::json body = {
        {"TableName", "distlock_test"},
        {"Key", {{"resource", {{"B", ddb::detail::base64(resource)}}}}},
        {"UpdateExpression", "SET #o = :o, #v = :v, #l = :l REMOVE expiresAt ADD fence :one"},
        {"ConditionExpression", "attribute_not_exists(#o)"},
        {"ExpressionAttributeNames", {{"#o", "owner"}, {"#v", "recordVersion"}, {"#l", "leaseDuration"}}},
        {"ExpressionAttributeValues",
         {{":o", {{"S", owner.to_hex()}}},
          {":v", {{"S", dl::owner_token::generate().to_hex()}}},
          {":l", {{"N", "10000"}}},
          {":one", {{"N", "1"}}}}},
        {"ReturnValues", "ALL_NEW"},
    };
    return body.dump();
}

std::string release_body(const std::string& resource, const dl::owner_token& owner)
{
    nlohmann::json body = {
        {"TableName", "distlock_test"},
        {"Key", {{"resource", {{"B", ddb::detail::base64(resource)}}}}},
        {"UpdateExpression", "REMOVE #o, expiresAt, #v, #l"},
        {"ConditionExpression", "#o = :o"},
        {"ExpressionAttributeNames", {{"#o", "owner"}, {"#v", "recordVersion"}, {"#l", "leaseDuration"}}},
        {"ExpressionAttributeValues", {{":o", {{"S", owner.to_hex()}}}}},
    };
    return body.dump();
}

} // namespace

// --elect ROLE PORT NAME: a participant of the fail-over rounds (record versions: a
// waiter takes over after a whole lease of an unchanged version).
constexpr auto failover_ttl = std::chrono::seconds{2};
int elect(int argc, char** argv)
{
    if (argc != 5)
        return 2;
    ddb::config cfg;
    cfg.port = static_cast<std::uint16_t>(std::atoi(argv[3]));
    cfg.table = "distlock_test";
    cfg.region = "us-east-1";
    cfg.credentials = {"AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", ""};
    asio::io_context io;
    ddb::store store{io, cfg};
    return bench::election_worker(io, store, argv[2], argv[4], failover_ttl);
}

int main(int argc, char** argv)
{
    if (argc > 1 && std::strcmp(argv[1], "--elect") == 0)
        return elect(argc, argv);
    bench::json.open(argc > 1 ? argv[1] : "bench/results.jsonl", std::ios::app);
    std::printf("%-58s %8s %10s %9s %9s %9s %10s\n", "workload (DynamoDB API: dynalite on loopback)", "ops", "ops/s",
                "p50 us", "p90 us", "p99 us", "max us");
    test::dynalite_server server;
    const auto cfg = server.config();
    {
        asio::io_context io;
        ddb::store s{io, cfg};
        bool made = false;
        asio::co_spawn(io, [&]() -> dl::awaitable<void> {
            made = static_cast<bool>(co_await s.create_table());
            co_await s.close();
        }, asio::detached);
        io.run();
        if (!made) {
            std::fprintf(stderr, "the table could not be made\n");
            return 1;
        }
    }
    // Leader fail-over: a whole lease of an unchanged record version is what a waiter
    // waits out.
    const auto failover_rows = [&] {
        result_row failover{"distlock: election fail-over, leader SIGKILLed (us)"};
        const auto port = std::to_string(cfg.port);
        const int missed = bench::failovers(
            failover,
            [&](const std::string& role, const std::string& name) {
                return std::vector<std::string>{test::self_path(), "--elect", role, port, name};
            },
            6, std::chrono::duration_cast<std::chrono::milliseconds>(failover_ttl));
        bench::print_failover(failover, std::chrono::duration_cast<std::chrono::milliseconds>(failover_ttl));
        return missed;
    };
    if (bench::only("failover"))
        return failover_rows() != 0 ? 1 : 0;
    constexpr std::size_t count = 2000, warmup = 100;
    constexpr auto limit = 30s;

    // Alternating rounds of the two, so that a noisy neighbour hits both alike.
    result_row floor{"floor: raw client, UpdateItem acquire + UpdateItem release"};
    result_row lock{"distlock: lock() + unlock(), record versions"};
    raw_client raw{cfg};
    asio::io_context io;
    ddb::store store{io, cfg};
    dl::basic_distributed_mutex<ddb::store, dl::retry::none> m{store, "bench:lock", {.ttl = 10s}};
    bool failed = false;
    const auto start = steady::now();
    asio::co_spawn(io, [&]() -> dl::awaitable<void> {
        for (std::size_t round = 0; round < (warmup + count) / 100 && steady::now() - start < limit; ++round) {
            for (int i = 0; i < 100; ++i) {
                const auto owner = dl::owner_token::generate();
                const auto t0 = steady::now();
                const int a = raw.call("UpdateItem", acquire_body("bench:floor", owner));
                const int r = raw.call("UpdateItem", release_body("bench:floor", owner));
                if (a != 200 || r != 200)
                    failed = true;
                if (round * 100 >= warmup)
                    floor.us.push_back(micros(steady::now() - t0));
            }
            for (int i = 0; i < 100; ++i) {
                const auto t0 = steady::now();
                auto l = co_await m.lock();
                if (!l || !co_await l->unlock())
                    failed = true;
                if (round * 100 >= warmup)
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
    floor.seconds = lock.seconds = std::chrono::duration<double>(steady::now() - start).count() / 2;
    floor.operations = floor.us.size();
    lock.operations = lock.us.size();
    bench::print(floor);
    bench::print(lock, &floor);

    return failover_rows() == 0 ? 0 : 1;
}
