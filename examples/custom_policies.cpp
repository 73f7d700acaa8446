// Writing policies: one of each kind, plugged into basic_distributed_mutex next to
// the built-in ones (docs/policies.md walks through them). On the in-process store:
//  - a retry policy that waits 5, 10, 20 ms and gives up at its fourth failure;
//  - an observer that counts what lock() does;
//  - a renewal policy that extends every quarter of the TTL for at most a minute;
//  - an ordering policy for multi-locks (descending ids);
//  - an acquisition policy that delegates to SET NX on a tenant's own key space.
// Exits non-zero if a policy is not used as documented.
#include <distlock/distlock.hpp>
#include <distlock/memory.hpp>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/io_context.hpp>
#include <asio/use_awaitable.hpp>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace dl = distlock;
using namespace std::chrono_literals;
using asio::awaitable;

// A retry policy: "how long until the next attempt?", or nullopt to give up.
// attempt.number is 1 at the first call; a deadline member bounds the whole lock().
struct three_steps {
    using policy_kind = dl::retry_policy_tag;
    dl::duration deadline = 5s;
    std::optional<dl::duration> next_delay(const dl::attempt& a) const
    {
        if (a.number > 3)
            return std::nullopt; // lock() fails with the last attempt's error
        return 5ms * (1 << (a.number - 1));
    }
};

// An observer is called on a const object, for every event: its state lives behind
// a pointer, so that copies of the mutex (one per call) count into the same place.
struct event_counter {
    using policy_kind = dl::observer_policy_tag;
    struct counts {
        std::atomic<int> attempts{0}, waits{0}, renewals{0}, releases{0};
    };
    std::shared_ptr<counts> seen = std::make_shared<counts>();
    void operator()(const dl::event& e) const
    {
        if (std::holds_alternative<dl::attempt_event>(e))
            ++seen->attempts;
        else if (std::holds_alternative<dl::wait_event>(e))
            ++seen->waits;
        else if (std::holds_alternative<dl::renewal_event>(e))
            ++seen->renewals;
        else if (std::holds_alternative<dl::release_event>(e))
            ++seen->releases;
    }
};

// A renewal policy: how often to extend a held lease (nullopt: never), and for how
// long at most (nullopt: as long as it is held).
struct every_quarter {
    using policy_kind = dl::renew_policy_tag;
    std::optional<dl::duration> interval(dl::duration ttl) const { return ttl / 4; }
    std::optional<dl::duration> max_hold_time() const { return 1min; }
};

// An ordering policy: the order in which a multi-lock takes its resources. Any fixed
// order prevents deadlock, if every process uses the same one; duplicates collapse.
struct descending {
    using policy_kind = dl::order_policy_tag;
    void arrange(std::vector<std::string>& ids) const
    {
        std::sort(ids.begin(), ids.end(), std::greater<>{});
        ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
    }
};

// An acquisition policy opens a claim per lock() call; this one delegates to SET NX
// on the tenant's own name for the resource.
struct tenant_setnx {
    using policy_kind = dl::acquire_policy_tag;
    std::string tenant;
    template <class Store>
    auto open(const dl::store_ref<Store>& store, dl::claim_request r) const
    {
        r.resource = tenant + "/" + r.resource;
        return dl::acquire::setnx{}.open(store, std::move(r));
    }
};

using job_mutex = dl::basic_distributed_mutex<dl::memory::store, three_steps, event_counter, every_quarter>;
using tenant_mutex = dl::basic_distributed_mutex<dl::memory::store, tenant_setnx, dl::retry::none>;

namespace {

int failures = 0;

void verdict(bool ok, const char* what)
{
    std::printf("  %s %s\n", ok ? "[ok]  " : "[FAIL]", what);
    if (!ok)
        ++failures;
}

awaitable<void> pause(dl::duration d)
{
    dl::timer t{co_await asio::this_coro::executor, d};
    co_await t.async_wait(asio::use_awaitable);
}

awaitable<void> play(dl::memory::store& store)
{
    std::puts("A retry policy and an observer: a lock held by another owner for good.");
    event_counter counter;
    job_mutex holder{store, "job", {.ttl = 2s}};
    auto held = co_await holder.lock();
    verdict(held.has_value(), "the holder takes the lock");
    job_mutex waiter{store, "job", {.ttl = 2s}, counter};
    auto refused = co_await waiter.lock();
    verdict(!refused && refused.error() == dl::errc::contended, "the waiter gives up after its policy's steps");
    // The first try, the one made at once after subscribing to releases, then one
    // after each of the three delays.
    verdict(counter.seen->attempts == 5 && counter.seen->waits == 3, "5 attempts and 3 waits observed");

    std::puts("A renewal policy: a 200 ms lease held for 400 ms stays valid.");
    job_mutex renewed{store, "report", {.ttl = 200ms}, counter};
    auto report = co_await renewed.lock();
    co_await pause(400ms);
    verdict(report && report->valid(), "still valid after twice its TTL");
    verdict(counter.seen->renewals >= 4, "extended every 50 ms");
    if (report)
        (void)co_await report->unlock();
    verdict(counter.seen->releases >= 1, "the release is observed");
    if (held)
        (void)co_await held->unlock();

    std::puts("An ordering policy: lock_all takes the resources in its order.");
    auto both = co_await dl::lock_all(store, dl::resources("a", "c", "b", "c"), {.ttl = 2s}, descending{});
    verdict(both && both->resources() == std::vector<std::string>{"c", "b", "a"}, "taken as c, b, a");
    if (both)
        (void)co_await both->unlock();

    std::puts("An acquisition policy: two tenants lock the same name independently.");
    tenant_mutex blue{store, "invoice:1", {.ttl = 2s}, tenant_setnx{"blue"}};
    tenant_mutex green{store, "invoice:1", {.ttl = 2s}, tenant_setnx{"green"}};
    auto b = co_await blue.lock();
    auto g = co_await green.lock();
    verdict(b && g, "both hold invoice:1, each in its own key space");
    verdict(store.inspect("blue/invoice:1").has_value() && store.inspect("green/invoice:1").has_value() &&
                !store.inspect("invoice:1").has_value(),
            "the store holds blue/invoice:1 and green/invoice:1");
    auto again = co_await blue.lock();
    verdict(!again && again.error() == dl::errc::contended, "within a tenant the lock still excludes");
    if (b)
        (void)co_await b->unlock();
    if (g)
        (void)co_await g->unlock();
    verdict(store.live_locks() == 0, "nothing left held");
    co_await store.close();
}

} // namespace

int main()
{
    asio::io_context io;
    dl::memory::store store{io};
    asio::co_spawn(io, play(store), asio::detached);
    io.run();
    return failures == 0 ? 0 : 1;
}
