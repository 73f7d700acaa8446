// distlock/src/detail/http.hpp: the HTTP/1.1 engine compiled once, for every store of
// the file that speaks it (DynamoDB, etcd's JSON gateway). Included after the store's
// entry header.
#pragma once

#define DISTLOCK_INSTANCE_LIST <distlock/instances/http.hpp>
#include <distlock/src/detail/instantiate.hpp>
