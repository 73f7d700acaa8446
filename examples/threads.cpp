// Thread-based code: distributed locks as std::scoped_lock takes std::mutexes. Four
// worker threads move money between two accounts through the same pair of
// dl::blocking objects (members of one service, as std::mutex members would be);
// the store's work runs on a dl::io_thread. Each thread's lock holds a lease of its
// own, so the threads exclude each other through the store as separate processes
// would, and every write carries that lease's fencing token.
// Exits non-zero if money appears or vanishes, a write is refused, or a lock is left.
#include <distlock/distlock.hpp>
#include <distlock/memory.hpp>

#include <atomic>
#include <cstdio>
#include <mutex>
#include <thread>
#include <vector>

namespace dl = distlock;
using namespace std::chrono_literals;

using account_mutex = dl::basic_distributed_mutex<dl::memory::store, dl::retry::fixed>;

struct bank {
    explicit bank(dl::io_thread& io, dl::memory::store& store)
        : checking_lock{io, store, "account:checking", {.ttl = 10s}, dl::retry::fixed{.delay = 1ms}},
          savings_lock{io, store, "account:savings", {.ttl = 10s}, dl::retry::fixed{.delay = 1ms}}
    {}

    // Both locks, in whichever order the caller names them: std::scoped_lock avoids
    // the deadlock (it backs off with try_lock), the ordering policy is not needed.
    bool move(long cents, bool to_savings)
    {
        std::scoped_lock both(to_savings ? checking_lock : savings_lock, to_savings ? savings_lock : checking_lock);
        auto& from = to_savings ? checking : savings;
        auto& to = to_savings ? savings : checking;
        auto& from_lock = to_savings ? checking_lock : savings_lock;
        auto& to_lock = to_savings ? savings_lock : checking_lock;
        return from.write(from_lock.fence(), from.read() - cents) && to.write(to_lock.fence(), to.read() + cents);
    }

    dl::blocking<account_mutex> checking_lock, savings_lock;
    // The database that owns the balances: it refuses writes with an older token.
    dl::memory::fenced_register<long> checking{10'000}, savings{10'000};
};

int main()
{
    dl::io_thread io;
    dl::memory::store store{io.context()};
    bank b{io, store};
    std::atomic<int> refused{0};
    std::vector<std::thread> workers;
    for (int t = 0; t < 4; ++t)
        workers.emplace_back([&, t] {
            for (int i = 0; i < 50; ++i)
                if (!b.move(1 + (i % 5), (t + i) % 2 == 0))
                    ++refused;
        });
    for (auto& w : workers)
        w.join();
    // The io_thread runs the store: close it from here before both go (a network
    // store's releases then finish and its connections close).
    io.run_sync(store.close());
    const long total = b.checking.read() + b.savings.read();
    std::printf("checking %ld, savings %ld, total %ld; %d writes refused; %zu locks left\n", b.checking.read(),
                b.savings.read(), total, refused.load(), store.live_locks());
    const bool ok = total == 20'000 && refused == 0 && store.live_locks() == 0;
    std::printf("%s 200 transfers from 4 threads, no money created or lost\n", ok ? "[ok]  " : "[FAIL]");
    return ok ? 0 : 1;
}
