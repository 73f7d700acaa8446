// distlock/postgres.hpp: PostgreSQL as a distlock store, lease table and advisory
// locks (link distlock::postgres: libpq).
#pragma once

#include <distlock/detail/push_warnings.hpp>

#include <distlock/util/config.hpp>
#include <distlock/distlock.hpp>
#include <distlock/postgres/advisory.hpp>
#include <distlock/postgres/config.hpp>
#include <distlock/postgres/error.hpp>
#include <distlock/postgres/store.hpp>

// Separate compilation (README.md): these are compiled in the one file that includes
// distlock/src/, which leaves these declarations out (they would follow the definitions).
#if defined(DISTLOCK_SEPARATE_COMPILATION) && !defined(DISTLOCK_INSTANTIATING)
#include <distlock/distlock.hpp>
#define DISTLOCK_INSTANCE(...) extern template __VA_ARGS__;
#include <distlock/instances/core.hpp>
#include <distlock/instances/postgres.hpp>
#undef DISTLOCK_INSTANCE
#endif

#include <distlock/detail/pop_warnings.hpp>
