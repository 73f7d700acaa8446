// Testing code that uses distlock, with time under the test's control: a manual
// clock, the in-process store and its fault injection, and distlock::testing to run
// what falls due. The code under test is a nightly job that must run once even if
// the server that took it first crashed; 30 s of its life pass in milliseconds.
// Written as a plain program (any test framework works the same way); exits non-zero
// when an expectation fails.
#include <distlock/distlock.hpp>
#include <distlock/memory.hpp>
#include <distlock/testing.hpp>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/io_context.hpp>
#include <asio/use_awaitable.hpp>

#include <cstdio>
#include <optional>

namespace dl = distlock;
using namespace std::chrono_literals;
using asio::awaitable;

// -- The code under test -----------------------------------------------------------

using job_mutex = dl::basic_distributed_mutex<dl::memory::store, dl::retry::fixed, dl::renew::watchdog>;

// Runs the nightly job under its lock; the lock's TTL covers a crashed runner. Waits
// on dl::timer (never asio::steady_timer), so a manual clock drives it.
awaitable<dl::result<dl::fence_token>> run_nightly(dl::memory::store& store, dl::duration work)
{
    job_mutex m{store, "job:nightly", {.ttl = 10s}, dl::retry::fixed{.delay = 500ms, .deadline = 60s}};
    auto lease = co_await m.lock();
    if (!lease)
        co_return lease.error();
    dl::timer t{co_await asio::this_coro::executor, work};
    co_await t.async_wait(asio::use_awaitable);
    if (auto released = co_await lease->unlock(); !released)
        co_return released.error();
    co_return lease->fence();
}

// -- The test ------------------------------------------------------------------------

namespace {

int failures = 0;

void expect(bool ok, const char* what)
{
    std::printf("%s %s\n", ok ? "[ok]  " : "[FAIL]", what);
    if (!ok)
        ++failures;
}

} // namespace

int main()
{
    dl::manual_clock clock; // one per process; every dl::timer follows it
    asio::io_context io;
    dl::memory::store store{io};

    // A runner took the job, then its process crashed: its lock stays until the TTL.
    std::optional<dl::result<dl::lease>> crashed;
    asio::co_spawn(io, [&]() -> awaitable<void> {
        dl::basic_distributed_mutex<dl::memory::store> first{store, "job:nightly", {.ttl = 10s}};
        crashed = co_await first.lock();
        store.set_online(false); // the crashed runner can no longer release or renew
    }, asio::detached);
    dl::testing::run_due(io);
    expect(crashed && *crashed, "the first runner took the job");
    store.set_online(true);

    // The second runner waits, retrying every 500 ms, and runs the job once the lock
    // has expired: at 10 s, not before.
    std::optional<dl::result<dl::fence_token>> second;
    asio::co_spawn(io, [&]() -> awaitable<void> { second = co_await run_nightly(store, 15s); }, asio::detached);
    dl::testing::advance(clock, io, 9s, 100ms);
    expect(!second, "at 9 s the second runner still waits");
    dl::testing::advance(clock, io, 2s, 100ms);
    expect(!second, "at 11 s it runs the job (15 s of work, the watchdog keeping its lease)");
    dl::testing::advance(clock, io, 16s, 100ms);
    expect(second && *second, "the job finished and its lock was released");
    expect(second && *second && **second > (*crashed)->fence(), "its fencing token is newer than the crashed one's");
    expect(store.live_locks() == 0, "nothing is left held");
    return failures == 0 ? 0 : 1;
}
