// distlock/src/core.hpp: the core compiled once. In a program built with
// DISTLOCK_SEPARATE_COMPILATION defined in every file, one file includes the
// header of each store it uses (distlock/src/redis.hpp, ...), each of which
// includes this one; every other file then compiles the declarations only
// (README.md, "Separate compilation").
#pragma once

#ifndef DISTLOCK_SEPARATE_COMPILATION
#error "the headers in distlock/src/ are for programs built with DISTLOCK_SEPARATE_COMPILATION defined in every file"
#endif

// From here on the entry headers leave out their extern declarations: in this file
// they would follow the definitions.
#define DISTLOCK_INSTANTIATING

#include <distlock/distlock.hpp>

#define DISTLOCK_INSTANCE_LIST <distlock/instances/core.hpp>
#include <distlock/src/detail/instantiate.hpp>
