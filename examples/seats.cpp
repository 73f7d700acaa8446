// Seat booking: a service whose every request locks a different resource (the seat
// it books), through one configured object, basic_named_locks. Eight "servers"
// (coroutines, each with the same locks object, as request handlers of a service
// would share it) take 200 requests for 40 seats; each seat must be sold exactly once.
//   seats                          in-process store
//   seats --redis redis://127.0.0.1:6379
// The seat map stands for the database that owns the data: each seat is a fenced
// register, so a booking written by a holder whose lease ran out would be refused.
// Exits non-zero if a seat is sold twice, a sale is lost, or a lock is left behind.
#include <distlock/distlock.hpp>
#include <distlock/memory.hpp>
#include <distlock/redis.hpp>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/io_context.hpp>
#include <asio/use_awaitable.hpp>

#include <cstdio>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace dl = distlock;
using namespace std::chrono_literals;
using asio::awaitable;

namespace {

constexpr int seat_count = 40, servers = 8, requests_per_server = 25;

struct booking_result {
    int sold = 0, taken = 0, busy = 0, errors = 0;
};

// One seat's row: who bought it (empty: free), written only with a valid fence.
using seat_row = dl::memory::fenced_register<std::string>;

template <class Store>
using seat_locks = dl::basic_named_locks<Store, dl::retry::exponential_backoff>;

// A request: customer `who` wants seat `seat`. One lock call per request, on the seat.
template <class Store>
awaitable<void> book(seat_locks<Store>& seats, std::map<int, seat_row>& rows, int seat, std::string who,
                     booking_result& out)
{
    auto held = co_await seats.lock("seat:" + std::to_string(seat));
    if (!held) {
        ++(held.error() == dl::errc::timeout ? out.busy : out.errors);
        co_return;
    }
    auto& row = rows.at(seat);
    if (!row.read().empty()) {
        ++out.taken; // sold already: the customer is told so
    } else if (row.write(held->fence(), who)) {
        ++out.sold;
    } else {
        ++out.errors; // a newer holder wrote first: this lease had run out
    }
    if (!co_await held->unlock())
        ++out.errors;
}

template <class Store>
awaitable<void> serve(seat_locks<Store>& seats, std::map<int, seat_row>& rows, int server, booking_result& out)
{
    for (int r = 0; r < requests_per_server; ++r) {
        // Requests spread over the seats, several servers asking for the same one.
        const int seat = (server * 7 + r * 3) % seat_count;
        co_await book(seats, rows, seat, "customer " + std::to_string(server) + "." + std::to_string(r), out);
    }
}

template <class Store>
int play(asio::io_context& io, Store& store, const char* where)
{
    std::printf("Booking %d seats from %d servers on the %s\n", seat_count, servers, where);
    std::map<int, seat_row> rows;
    for (int s = 0; s < seat_count; ++s)
        rows.try_emplace(s);
    booking_result out;
    int done = 0;
    asio::co_spawn(io, [&]() -> awaitable<void> {
        seat_locks<Store> seats{store, {.ttl = 10s}, dl::retry::exponential_backoff{.initial = 1ms, .max = 20ms,
                                                                                   .deadline = 10s}};
        auto ex = co_await asio::this_coro::executor;
        for (int s = 0; s < servers; ++s)
            asio::co_spawn(ex, [&, s]() -> awaitable<void> {
                co_await serve(seats, rows, s, out);
                ++done;
            }, asio::detached);
        while (done < servers) {
            dl::timer t{ex, 5ms};
            co_await t.async_wait(asio::use_awaitable);
        }
        co_await store.close(); // lets io.run() return
    }, asio::detached);
    io.run();

    int booked = 0;
    for (auto& [seat, row] : rows)
        booked += row.read().empty() ? 0 : 1;
    std::printf("  %d sold, %d refused as taken, %d gave up, %d errors; %d of %d seats booked\n", out.sold,
                out.taken, out.busy, out.errors, booked, seat_count);
    const bool ok = out.errors == 0 && out.busy == 0 && out.sold == booked &&
                    out.sold + out.taken == servers * requests_per_server;
    std::printf("  %s every seat sold at most once, no sale lost\n", ok ? "[ok]  " : "[FAIL]");
    return ok ? 0 : 1;
}

} // namespace

int main(int argc, char** argv)
{
    asio::io_context io;
    if (argc == 3 && std::string{argv[1]} == "--redis") {
        auto cfg = dl::redis::config::from_url(argv[2]);
        if (!cfg) {
            std::fprintf(stderr, "bad Redis URL %s\n", argv[2]);
            return 2;
        }
        dl::redis::store store{io, *cfg};
        return play(io, store, "Redis server");
    }
    if (argc != 1) {
        std::fprintf(stderr, "usage: seats [--redis URL]\n");
        return 2;
    }
    dl::memory::store store{io};
    return play(io, store, "in-process store");
}
