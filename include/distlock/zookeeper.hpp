// distlock/zookeeper.hpp: ZooKeeper (its native client protocol, spoken on Asio) as a
// distlock store (link distlock::zookeeper: OpenSSL, for the shared transport).
#pragma once

#include <distlock/detail/push_warnings.hpp>

#include <distlock/util/config.hpp>
#include <distlock/distlock.hpp>
#include <distlock/zookeeper/config.hpp>
#include <distlock/zookeeper/error.hpp>
#include <distlock/zookeeper/store.hpp>

#include <distlock/detail/pop_warnings.hpp>
