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

#include <distlock/detail/pop_warnings.hpp>
