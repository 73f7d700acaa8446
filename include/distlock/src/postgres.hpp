// distlock/src/postgres.hpp: the PostgreSQL stores compiled once. In a program built with
// DISTLOCK_SEPARATE_COMPILATION defined in every file, include it in exactly one
// file (README.md, "Separate compilation"); every other file then compiles the
// declarations only.
#pragma once

// From here on the entry headers leave out their extern declarations: in this file
// they would follow the definitions.
#define DISTLOCK_INSTANTIATING

#include <distlock/postgres.hpp>
#include <distlock/src/core.hpp>

#define DISTLOCK_INSTANCE_LIST <distlock/instances/postgres.hpp>
#include <distlock/src/detail/instantiate.hpp>
