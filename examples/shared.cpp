// A read-write lock and a semaphore, fenced (docs/shared.md takes its code blocks from
// this file). Runs on the in-process store; exits non-zero if a step does not turn
// out as the docs say.
#include <distlock/basic_distributed_semaphore.hpp>
#include <distlock/basic_distributed_shared_mutex.hpp>
#include <distlock/blocking.hpp>
#include <distlock/distlock.hpp>
#include <distlock/memory.hpp>
#include <distlock/multi_lock.hpp>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/io_context.hpp>

#include <cstdio>
#include <map>
#include <mutex>
#include <shared_mutex>
#include <string>
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

// -- A catalog: many readers, one writer at a time ----------------------------------

using catalog_lock = dl::basic_distributed_shared_mutex<dl::memory::store, dl::renew::watchdog>;

// The store that owns the catalog keeps the largest fence it accepted: a writer that
// stalled past its lease writes with an older fence than the next grant's, and a
// reader may refuse to read data older than the last writer it knows of.
struct catalog_data {
    dl::fence_token newest = 0;
    std::string text = "v1";
};

asio::awaitable<void> catalog(dl::memory::store& store)
{
    catalog_lock lock{store, "catalog", {.ttl = 10s}};
    catalog_data data;

    auto reader = co_await lock.lock_shared();          // many readers at once
    auto other = co_await lock.try_lock_shared();
    expect(reader && other, "two readers hold the catalog at once");
    auto writer = co_await lock.try_lock();              // a writer waits for them
    expect(!writer && writer.error() == dl::condition::contended, "a writer is refused while readers hold");
    (void)co_await reader->unlock();
    (void)co_await other->unlock();

    auto w = co_await lock.lock();                       // one writer
    expect(w && w->fence() > other->fence(), "the writer's fence exceeds every earlier reader's");
    if (w->fence() > data.newest) {                      // the data store's check
        data.newest = w->fence();
        data.text = "v2";
    }
    // Downgrade: go on reading what was just written; no writer comes between.
    auto down = co_await lock.downgrade(*w);
    expect(down && w->shared(), "the writer holds on as a reader");
    auto beside = co_await lock.try_lock_shared();
    expect(beside.has_value(), "another reader comes in beside it");
    (void)co_await w->unlock();
    (void)co_await beside->unlock();
}

// -- Exporters: at most 2 at once, each permit fenced per number ---------------------

using exporters = dl::basic_distributed_semaphore<dl::memory::store>;

asio::awaitable<void> exports(dl::memory::store& store)
{
    exporters pool{store, "exports", {.permits = 2, .lease = {.ttl = 10s}}};
    // The data store keeps the largest fence per permit number.
    std::map<std::uint32_t, dl::fence_token> newest;

    auto first = co_await pool.acquire();                // permit->slot(), ->fence(), ->lost()
    auto second = co_await pool.acquire();
    auto third = co_await pool.try_acquire();
    expect(first && second && !third, "two permits are held, a third is refused");
    expect(*first->slot() != *second->slot(), "each permit has a number of its own");
    for (auto* p : {&*first, &*second})
        newest[*p->slot()] = p->fence();

    const auto freed = *first->slot();
    (void)co_await first->unlock();
    auto next = co_await pool.acquire();                 // the number that was given back
    expect(next && *next->slot() == freed && next->fence() > newest[freed],
           "a permit handed on has a larger fence for its number");

    exporters other_count{store, "exports", {.permits = 3}};
    auto mixed = co_await other_count.try_acquire();
    expect(!mixed && mixed.error() == dl::condition::invalid_argument,
           "a client that counts differently is refused, never mixed in");
    (void)co_await second->unlock();
    (void)co_await next->unlock();
}

// -- A transfer: read one account, write another, in one call -----------------------

asio::awaitable<void> transfer(dl::memory::store& store)
{
    auto both = co_await dl::lock_all(store, dl::resources(dl::shared("account:7"), dl::exclusive("account:42")),
                                      {.ttl = 10s});
    // Sorted by id, all or nothing: both->leases() are account:42 (written), then account:7 (read).
    expect(both && !both->leases()[0].shared() && both->leases()[1].shared(),
           "one call takes the written account alone and the read one shared");
    catalog_lock seven{store, "account:7", {.ttl = 10s}};
    auto audit = co_await seven.try_lock_shared();
    expect(audit.has_value(), "another reader reads the account being read");
    (void)co_await audit->unlock();
    (void)co_await both->unlock();
}

// -- From threads: std::shared_lock and std::unique_lock -----------------------------

void from_threads()
{
    dl::io_thread io;
    dl::memory::store store{io.get_executor()};
    dl::blocking<catalog_lock> lock{io, store, "catalog:threads", {.ttl = 10s}};
    {
        std::shared_lock reading{lock};                  // lock_shared() on this thread
        expect(lock.current().shared(), "std::shared_lock takes a shared lease");
    }
    {
        std::unique_lock writing{lock};                  // lock() on this thread
        expect(!lock.current().shared(), "std::unique_lock takes the exclusive lease");
    }
    io.run_sync(store.close());
}

} // namespace

int main()
{
    asio::io_context io;
    dl::memory::store store{io};
    asio::co_spawn(
        io,
        [&]() -> asio::awaitable<void> {
            std::printf("catalog (shared mutex):\n");
            co_await catalog(store);
            std::printf("exports (semaphore):\n");
            co_await exports(store);
            std::printf("transfer (a set with modes):\n");
            co_await transfer(store);
            co_await store.close();
        },
        asio::detached);
    io.run();
    std::printf("threads:\n");
    from_threads();
    std::printf("%s\n", failures == 0 ? "all as documented" : "SOME STEPS FAILED");
    return failures == 0 ? 0 : 1;
}
