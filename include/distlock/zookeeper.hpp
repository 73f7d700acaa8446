// distlock/zookeeper.hpp: ZooKeeper (its native client protocol, spoken on Asio) as a
// distlock store (link distlock::zookeeper: OpenSSL, for the shared transport).
#pragma once

// As in distlock/distlock.hpp: g++ 12 false positives on coroutine frames, contained
// for the library's own code so that users need not turn them off.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif

#include <distlock/detail/config.hpp>
#include <distlock/distlock.hpp>
#include <distlock/zookeeper/config.hpp>
#include <distlock/zookeeper/error.hpp>
#include <distlock/zookeeper/store.hpp>

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
