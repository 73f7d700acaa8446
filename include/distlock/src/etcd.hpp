// distlock/src/etcd.hpp: the etcd store compiled once. In a program built with
// DISTLOCK_SEPARATE_COMPILATION defined in every file, include it in exactly one
// file (README.md, "Separate compilation"); every other file then compiles the
// declarations only.
#pragma once

// The core first: it defines DISTLOCK_INSTANTIATING, so the store's entry header
// leaves out its extern declarations (here they would follow the definitions).
#include <distlock/src/core.hpp>
#include <distlock/etcd.hpp>

#include <distlock/src/detail/transport.hpp>
#include <distlock/src/detail/http.hpp>
#define DISTLOCK_INSTANCE_LIST <distlock/instances/etcd.hpp>
#include <distlock/src/detail/instantiate.hpp>
