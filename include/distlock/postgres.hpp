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

#ifdef DISTLOCK_SEPARATE_COMPILATION // compiled in the file that includes distlock/src/ (README.md)
#include <distlock/distlock.hpp>
#define DISTLOCK_INSTANCE(...) extern template __VA_ARGS__;
#include <distlock/instances/core.hpp>
#include <distlock/instances/postgres.hpp>
#undef DISTLOCK_INSTANCE
#endif

#include <distlock/detail/pop_warnings.hpp>
