// distlock/src/detail/transport.hpp: the transport engine's stream compiled once, for
// every store of the file that speaks through it (Redis, etcd, ZooKeeper, DynamoDB).
// Included after the store's entry header.
#pragma once

// The stream's TLS steps, which separately compiled files do not see.
#include <distlock/transport/tls.hpp>

#define DISTLOCK_INSTANCE_LIST <distlock/instances/transport.hpp>
#include <distlock/src/detail/instantiate.hpp>
