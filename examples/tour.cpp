// The README's tour, compiled and run: every code block of the README is taken from
// this file (tools/check_snippets.py checks it).
//   tour                          the in-process parts
//   tour --redis URL [URL...]     the Redis parts too (several URLs: a Redlock quorum)
// Exits non-zero if a step does not turn out as the README says.
#include <distlock/distlock.hpp>   // the core: mutexes, leases, policies
#include <distlock/memory.hpp>     // the in-process store
#include <distlock/redis.hpp>      // a network store (its CMake target links OpenSSL)

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/io_context.hpp>
#include <asio/strand.hpp>
#include <asio/use_awaitable.hpp>

#include <cstdio>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>

namespace dl = distlock;
using namespace std::chrono_literals;

namespace {

int failures = 0;

void expect(bool ok, const char* what)
{
    std::printf("  %s %s\n", ok ? "[ok]  " : "[FAIL]", what);
    if (!ok)
        ++failures;
}

// -- Example --------------------------------------------------------------------------

using wallet_mutex = dl::basic_distributed_mutex<
    dl::memory::store,                 // the backend; policies follow in any order
    dl::retry::exponential_backoff,    // full jitter, capped, with a deadline
    dl::renew::watchdog>;              // extends every ttl/3 while held

// `balance` stands for the database that owns the data: it refuses older tokens.
asio::awaitable<dl::result<void>> debit(dl::memory::store& store, dl::memory::fenced_register<long>& balance,
                                        std::string wallet, long cents)
{
    wallet_mutex m{store, "wallet:" + wallet, {.ttl = 10s},
                   dl::retry::exponential_backoff{.initial = 5ms, .max = 200ms, .deadline = 2s}};
    auto lease = co_await m.lock();                  // result<lease>
    if (!lease)
        co_return lease.error();                     // timeout, store unavailable, ...
    // The fencing token goes with the write: a holder that stalled past its lease
    // writes with an older token than the next holder, and is refused.
    auto written = balance.write(lease->fence(), balance.read() - cents);
    if (!written)
        co_return written.error();                   // errc::stale_fence
    co_return co_await lease->unlock();              // or let it go out of scope
}

// -- One object for every resource, several resources at once -------------------------

asio::awaitable<void> named_and_multi(dl::memory::store& store)
{
    dl::basic_named_locks<dl::memory::store> seats{store, {.ttl = 30s}};   // settings once
    auto seat = co_await seats.try_lock("seat:" + std::to_string(17));     // the resource per call
    expect(seat.has_value(), "seat 17 locked through the named locks");

    auto both = co_await dl::lock_all(store, dl::resources("wallet:42", "wallet:7"), {.ttl = 10s});
    if (both)                                          // sorted, all or nothing, one deadline
        std::printf("  wallet:7 fence %llu\n", static_cast<unsigned long long>(*both->fence("wallet:7")));
    expect(both && both->size() == 2, "two wallets locked together");
    if (both)
        (void)co_await both->unlock();
    if (seat)
        (void)co_await seat->unlock();
}

// -- Sharing a store across threads ----------------------------------------------------

void shared_store()
{
    int locked = 0; // guarded by the lock
    {
        asio::io_context io;                        // run by four threads below
        dl::memory::store store{io};                // one store for all of them
        for (int w = 0; w < 8; ++w)
            asio::co_spawn(asio::make_strand(io), [&store, &locked]() -> asio::awaitable<void> {
                dl::basic_distributed_mutex<dl::memory::store> m{store, "shared"}; // one per coroutine
                auto lease = co_await m.lock();
                if (lease) ++locked;
                if (lease) co_await lease->unlock();
            }, asio::detached);
        std::vector<std::jthread> threads;
        for (int t = 0; t < 4; ++t)
            threads.emplace_back([&io] { io.run(); });
    }
    expect(locked == 8, "8 coroutines on 4 threads took the lock in turn");
}

// -- Diagnostics -----------------------------------------------------------------------

asio::awaitable<void> diagnosed(dl::memory::store& store)
{
    store.fail_next(dl::memory::fault::unavailable);
    dl::basic_distributed_mutex<dl::memory::store, dl::retry::none> m{store, "report"};
    dl::diagnostics diag;
    auto lease = co_await m.lock(diag);
    if (!lease)
        std::printf("  lock failed: %s (%s)\n", lease.error().message().c_str(), diag.to_string().c_str());
        // e.g. "store unavailable ... (OOM command not allowed when used memory > 'maxmemory'.)"
        // or, on a quorum: "... (node 1: no reply from 127.0.0.1:6380 within the request timeout)"
    expect(!lease && lease.error() == dl::errc::store_unavailable, "a failure says what happened");
}

// -- Session stores ----------------------------------------------------------------------

asio::awaitable<void> sessions(asio::io_context& io)
{
    dl::memory::session_server server;                         // what etcd or ZooKeeper keeps
    dl::memory::session_store client{io, server, {.session_ttl = 10s}};
    dl::basic_distributed_mutex<dl::memory::session_store> job{client, "job:nightly"};
    auto lease = co_await job.lock();  // queued by creation; woken when its predecessor goes
    // No watchdog: the session's keepalive keeps every lease of the client. lease->lost()
    // completes (and every lost_slot() fires) when the session expires or is in doubt.
    expect(lease && lease->valid(), "a session-bound lease");
    co_await client.close();          // ends the session's keepalive: io.run() can return
}

// -- Redis -------------------------------------------------------------------------------

asio::awaitable<void> redis_tour(asio::io_context& io, const std::vector<std::string>& urls)
{
    dl::redis::store redis{io, *dl::redis::config::from_url(urls.front())};
    dl::basic_distributed_mutex<dl::redis::store, dl::renew::watchdog> m{redis, "wallet:42", {.ttl = 10s}};
    auto lease = co_await m.lock();           // one round trip when free; woken by pub/sub when released
    co_await redis.fenced_write("balance:42", lease->fence(), "70");  // rejected if a newer holder wrote
    auto again = co_await redis.execute("HGET", "balance:42", "value");           // any command
    expect(again && again->text == "70", "the fenced write landed");
    co_await lease->unlock();
    co_await redis.close();                   // io.run() returns once every store is closed

    std::vector<std::unique_ptr<dl::redis::store>> owned;
    for (const auto& url : urls)                     // e.g. five redis:// URLs from a config file
        owned.push_back(std::make_unique<dl::redis::store>(io, *dl::redis::config::from_url(url)));
    std::vector<dl::redis::store*> nodes;
    for (auto& s : owned)
        nodes.push_back(s.get());
    dl::quorum<dl::redis::store> cluster{std::span<dl::redis::store* const>{nodes}};  // copies the pointers
    dl::basic_distributed_mutex<dl::quorum<dl::redis::store>> job{cluster, "job:nightly", {.ttl = 30s}};
    auto nightly = co_await job.lock();
    expect(nightly.has_value(), "Redlock over every URL given");
    if (nightly)
        (void)co_await nightly->unlock();
    for (auto& s : owned)
        co_await s->close();
}

} // namespace

int main(int argc, char** argv)
{
    std::vector<std::string> urls;
    for (int i = 1; i + 1 < argc; i += 2)
        if (std::string{argv[i]} == "--redis")
            urls.push_back(argv[i + 1]);
    if (argc > 1 && urls.size() * 2 + 1 != static_cast<std::size_t>(argc)) {
        std::fprintf(stderr, "usage: tour [--redis URL]...\n");
        return 2;
    }
    for (const auto& url : urls)
        if (!dl::redis::config::from_url(url)) {
            std::fprintf(stderr, "bad Redis URL %s\n", url.c_str());
            return 2;
        }

    std::puts("Example: a debit under a lock, its write fenced");
    asio::io_context io;
    {
        dl::memory::store store{io};
        dl::memory::fenced_register<long> balance{100};
        asio::co_spawn(io, [&]() -> asio::awaitable<void> {
            auto done = co_await debit(store, balance, "42", 30);
            expect(done.has_value() && balance.read() == 70, "debited 30 of 100");
            co_await named_and_multi(store);
            co_await diagnosed(store);
            co_await store.close();
        }, asio::detached);
        io.run();
    }
    std::puts("Sharing a store across threads");
    shared_store();
    std::puts("Session stores");
    io.restart();
    asio::co_spawn(io, sessions(io), asio::detached);
    io.run();
    if (!urls.empty()) {
        std::puts("Redis");
        io.restart();
        asio::co_spawn(io, redis_tour(io, urls), asio::detached);
        io.run();
    }
    return failures == 0 ? 0 : 1;
}
