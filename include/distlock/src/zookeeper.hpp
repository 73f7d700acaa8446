// distlock/src/zookeeper.hpp: the ZooKeeper store compiled once. In a program built with
// DISTLOCK_SEPARATE_COMPILATION defined in every file, include it in exactly one
// file (README.md, "Separate compilation"); every other file then compiles the
// declarations only.
#pragma once

// From here on the entry headers leave out their extern declarations: in this file
// they would follow the definitions.
#define DISTLOCK_INSTANTIATING

#include <distlock/zookeeper.hpp>
#include <distlock/src/core.hpp>

#include <distlock/detail/push_warnings.hpp>
#define DISTLOCK_INSTANCE(...) template __VA_ARGS__;
#ifndef DISTLOCK_TRANSPORT_COMPILED // shared with other stores: once per file
#define DISTLOCK_TRANSPORT_COMPILED
#include <distlock/instances/transport.hpp>
#endif
#include <distlock/instances/zookeeper.hpp>
#undef DISTLOCK_INSTANCE
#include <distlock/detail/pop_warnings.hpp>
