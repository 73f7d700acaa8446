// One file of a separately compiled program (README.md, "Separate compilation"): it
// locks on every store the build has, while the stores, their connections, the
// engine, the lease keeper and each store's default mutex are compiled in another
// file (test/support/instances.cpp). Linking is most of the test: a template
// missing from the lists of instances is an undefined reference. It then takes and
// releases locks on the in-process stores, checking the fences grow.
#include <distlock/distlock.hpp>
#include <distlock/memory.hpp>
#ifdef DISTLOCK_INSTANCES_REDIS
#include <distlock/redis.hpp>
#endif
#ifdef DISTLOCK_INSTANCES_ZOOKEEPER
#include <distlock/zookeeper.hpp>
#endif
#ifdef DISTLOCK_INSTANCES_POSTGRES
#include <distlock/postgres.hpp>
#endif
#ifdef DISTLOCK_INSTANCES_ETCD
#include <distlock/etcd.hpp>
#endif
#ifdef DISTLOCK_INSTANCES_DYNAMODB
#include <distlock/dynamodb.hpp>
#endif

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/io_context.hpp>

#include <cstdio>
#include <vector>

namespace dl = distlock;

// Takes and releases the lock twice on `store`, recording each fence (0 when refused).
template <class Store>
asio::awaitable<void> take_twice(Store& store, std::vector<dl::fence_token>& fences)
{
    dl::basic_distributed_mutex<Store> m{store, "compiled-once"};
    for (int i = 0; i < 2; ++i) {
        auto l = co_await m.lock();
        fences.push_back(l ? l->fence() : 0);
        if (l && !co_await l->unlock())
            fences.push_back(0);
    }
    co_await store.close();
}

// Each network store's mutex and store operations, referenced from this file: the
// program links only if the other file compiled them.
#ifdef DISTLOCK_INSTANCES_REDIS
template asio::awaitable<void> take_twice(dl::redis::store&, std::vector<dl::fence_token>&);
#endif
#ifdef DISTLOCK_INSTANCES_ZOOKEEPER
template asio::awaitable<void> take_twice(dl::zookeeper::store&, std::vector<dl::fence_token>&);
#endif
#ifdef DISTLOCK_INSTANCES_POSTGRES
template asio::awaitable<void> take_twice(dl::postgres::store&, std::vector<dl::fence_token>&);
template asio::awaitable<void> take_twice(dl::postgres::advisory_store&, std::vector<dl::fence_token>&);
#endif
#ifdef DISTLOCK_INSTANCES_ETCD
template asio::awaitable<void> take_twice(dl::etcd::store&, std::vector<dl::fence_token>&);
#endif
#ifdef DISTLOCK_INSTANCES_DYNAMODB
template asio::awaitable<void> take_twice(dl::dynamodb::store&, std::vector<dl::fence_token>&);
#endif

int main()
{
    asio::io_context io;
    dl::memory::store store{io};
    dl::memory::session_server server;
    dl::memory::session_store sessions{io, server};
    std::vector<dl::fence_token> fences, session_fences;
    asio::co_spawn(io, take_twice(store, fences), asio::detached);
    asio::co_spawn(io, take_twice(sessions, session_fences), asio::detached);
    io.run();
    bool ok = true;
    for (const auto* f : {&fences, &session_fences})
        ok = ok && f->size() == 2 && (*f)[0] > 0 && (*f)[1] > (*f)[0];
    std::printf("separately compiled: fences %llu, %llu; on a session store %llu, %llu: %s\n",
                fences.size() > 0 ? static_cast<unsigned long long>(fences[0]) : 0ULL,
                fences.size() > 1 ? static_cast<unsigned long long>(fences[1]) : 0ULL,
                session_fences.size() > 0 ? static_cast<unsigned long long>(session_fences[0]) : 0ULL,
                session_fences.size() > 1 ? static_cast<unsigned long long>(session_fences[1]) : 0ULL,
                ok ? "ok" : "FAILED");
    return ok ? 0 : 1;
}
