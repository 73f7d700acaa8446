// distlock/src/postgres.hpp: the PostgreSQL stores compiled once. In a program built with
// DISTLOCK_SEPARATE_COMPILATION defined in every file, include it in exactly one
// file (README.md, "Separate compilation"); every other file then compiles the
// declarations only.
#pragma once

// The core first: it defines DISTLOCK_INSTANTIATING, so the store's entry header
// leaves out its extern declarations (here they would follow the definitions).
#include <distlock/src/core.hpp>
#include <distlock/postgres.hpp>

#define DISTLOCK_INSTANCE_LIST <distlock/instances/postgres.hpp>
#include <distlock/src/detail/instantiate.hpp>
