// distlock/zookeeper.hpp: ZooKeeper (its native client protocol, spoken on Asio) as a
// distlock store (link distlock::zookeeper: OpenSSL, for the shared transport).
#pragma once

#include <distlock/detail/push_warnings.hpp>

#include <distlock/util/config.hpp>
#include <distlock/distlock.hpp>
#include <distlock/zookeeper/config.hpp>
#include <distlock/zookeeper/error.hpp>
#include <distlock/zookeeper/store.hpp>

// Separate compilation (README.md): these are compiled in the one file that includes
// distlock/src/, which leaves these declarations out (they would follow the definitions).
#if defined(DISTLOCK_SEPARATE_COMPILATION) && !defined(DISTLOCK_INSTANTIATING)
#include <distlock/distlock.hpp>
#define DISTLOCK_INSTANCE(...) extern template __VA_ARGS__;
#include <distlock/instances/core.hpp>
#include <distlock/instances/transport.hpp>
#include <distlock/instances/zookeeper.hpp>
#undef DISTLOCK_INSTANCE
#endif

#include <distlock/detail/pop_warnings.hpp>
