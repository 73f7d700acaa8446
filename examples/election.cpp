// A leader election whose terms fence the leader's writes, and a lock-delay after an
// unplanned loss (README and docs/election.md take their code blocks from this file).
// Runs on the in-process store; exits non-zero if a step does not turn out as the docs
// say.
#include <distlock/basic_leader_election.hpp>
#include <distlock/distlock.hpp>
#include <distlock/memory.hpp>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/io_context.hpp>
#include <asio/steady_timer.hpp>

#include <cstdio>
#include <optional>
#include <string>

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

// The data the leader writes, in a store that keeps the largest epoch it accepted: a
// leader that stalled past its term writes with an older epoch and is refused.
dl::memory::fenced_register<std::string> schedule;

asio::awaitable<void> run_scheduler(dl::fence_token epoch)
{
    auto written = schedule.write(epoch, "jobs planned in term " + std::to_string(epoch));
    expect(written.has_value(), "the leader's write carries its epoch and is accepted");
    asio::steady_timer tick{co_await asio::this_coro::executor, 50ms};
    co_await tick.async_wait(asio::use_awaitable);
}

// -- The structured form: the work is over before the term is given up ----------------

asio::awaitable<void> lead_once(dl::memory::store& store)
{
    dl::basic_leader_election<dl::memory::store> sched{store, "scheduler", {.term = {.ttl = 10s}}};
    dl::fence_token led_with = 0;
    auto done = co_await sched.lead("10.0.0.7:8080", [&](dl::term& t) -> asio::awaitable<void> {
        led_with = t.epoch();
        co_await run_scheduler(t.epoch());               // cancelled when the term is lost
    });                                                  // the term ends after the work did
    expect(done.has_value() && led_with > 0, "lead() ran the work and gave the term up after it");

    // A stale leader's late write is refused: the next term's epoch is larger.
    dl::basic_leader_election<dl::memory::store> next{store, "scheduler"};
    auto term = co_await next.campaign("10.0.0.8:8080");
    expect(term && term->epoch() > led_with, "the next term's epoch is larger");
    (void)schedule.write(term->epoch(), "jobs planned by the next leader");
    expect(!schedule.write(led_with, "late").has_value(), "the earlier leader's late write is refused");
    (void)co_await term->resign();
}

// -- Observers: who leads, as it changes ---------------------------------------------

asio::awaitable<void> observe_leaders(dl::memory::store& store)
{
    dl::basic_leader_election<dl::memory::store> sched{store, "scheduler", {.term = {.ttl = 10s}}};
    dl::basic_leader_election<dl::memory::store> candidate{store, "scheduler"};
    auto mine = co_await candidate.campaign("10.0.0.9:8080");
    auto who = co_await sched.observe();                 // who->epoch, who->value, as it changes
    expect(who && who->epoch == mine->epoch() && who->value == "10.0.0.9:8080",
           "an observer sees the leader's epoch and value");
    (void)co_await candidate.proclaim(*mine, "10.0.0.9:9090");
    who = co_await sched.observe();
    expect(who && who->value == "10.0.0.9:9090" && who->epoch == mine->epoch(),
           "a proclaimed value reaches observers, in the same term");
    (void)co_await mine->resign();
}

// -- Lock-delay: after an unplanned loss, nobody gets the lock for a while ---------------

asio::awaitable<void> ledger(dl::memory::store& store)
{
    dl::basic_distributed_mutex<dl::memory::store> ledger{store, "ledger", {.ttl = 10s, .lock_delay = 2s}};
    auto first = co_await ledger.lock();
    store.expire("ledger");                              // as if the holder stopped renewing
    dl::basic_distributed_mutex<dl::memory::store, dl::retry::none> other{store, "ledger"};
    dl::diagnostics diag;
    auto refused = co_await other.try_lock(diag);
    expect(!refused && refused.error() == dl::errc::lock_delayed && diag.lock_delay_until().has_value(),
           "a lost holder's lock-delay refuses everyone, saying until when");
    auto released = co_await ledger.lock_until(dl::clock::now() + 10s);
    expect(released.has_value() && dl::clock::now() >= *diag.lock_delay_until(),
           "lock() waits exactly until the lock-delay ends");
    (void)co_await released->unlock();
    auto at_once = co_await other.try_lock();
    expect(at_once.has_value(), "a release leaves no lock-delay");
    (void)co_await at_once->unlock();
    (void)first;
}

} // namespace

int main()
{
    asio::io_context io;
    dl::memory::store store{io};
    asio::co_spawn(io, [&]() -> asio::awaitable<void> {
        std::printf("leader election\n");
        co_await lead_once(store);
        co_await observe_leaders(store);
        std::printf("lock-delay\n");
        co_await ledger(store);
        co_await store.close();
    }, asio::detached);
    io.run();
    return failures == 0 ? 0 : 1;
}
