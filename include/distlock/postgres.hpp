// distlock/postgres.hpp: PostgreSQL as a distlock store, lease table and advisory
// locks (link distlock::postgres: libpq).
#pragma once

// As in distlock/distlock.hpp: g++ 12 false positives on coroutine frames, contained
// for the library's own code so that users need not turn them off.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif

#include <distlock/detail/config.hpp>
#include <distlock/distlock.hpp>
#include <distlock/postgres/advisory.hpp>
#include <distlock/postgres/config.hpp>
#include <distlock/postgres/error.hpp>
#include <distlock/postgres/store.hpp>

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
