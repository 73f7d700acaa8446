// distlock/redis.hpp: Redis as a distlock store (needs OpenSSL for TLS: link
// distlock::redis, or OpenSSL::SSL).
#pragma once

#include <distlock/detail/push_warnings.hpp>

#include <distlock/util/config.hpp>
#include <distlock/redis/config.hpp>
#include <distlock/redis/resp/command.hpp>
#include <distlock/redis/resp/parser.hpp>
#include <distlock/redis/resp/value.hpp>
#include <distlock/redis/scripts.hpp>
#include <distlock/redis/store.hpp>

// Separate compilation (README.md): these are compiled in the one file that includes
// distlock/src/, which leaves these declarations out (they would follow the definitions).
#if defined(DISTLOCK_SEPARATE_COMPILATION) && !defined(DISTLOCK_INSTANTIATING)
#include <distlock/distlock.hpp>
#define DISTLOCK_INSTANCE(...) extern template __VA_ARGS__;
#include <distlock/instances/core.hpp>
#include <distlock/instances/transport.hpp>
#include <distlock/instances/redis.hpp>
#undef DISTLOCK_INSTANCE
#endif

#include <distlock/detail/pop_warnings.hpp>
