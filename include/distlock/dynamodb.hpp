// distlock/dynamodb.hpp: DynamoDB as a distlock store (link distlock::dynamodb:
// OpenSSL for SigV4 and TLS, and nlohmann-json).
#pragma once

#include <distlock/detail/push_warnings.hpp>

#include <distlock/util/config.hpp>
#include <distlock/distlock.hpp>
#include <distlock/dynamodb/acquire.hpp>
#include <distlock/dynamodb/config.hpp>
#include <distlock/dynamodb/error.hpp>
#include <distlock/dynamodb/store.hpp>

// Separate compilation (README.md): these are compiled in the one file that includes
// distlock/src/, which leaves these declarations out (they would follow the definitions).
#if defined(DISTLOCK_SEPARATE_COMPILATION) && !defined(DISTLOCK_INSTANTIATING)
#include <distlock/distlock.hpp>
#define DISTLOCK_INSTANCE(...) extern template __VA_ARGS__;
#include <distlock/instances/core.hpp>
#include <distlock/instances/transport.hpp>
#include <distlock/instances/http.hpp>
#include <distlock/instances/dynamodb.hpp>
#undef DISTLOCK_INSTANCE
#endif

#include <distlock/detail/pop_warnings.hpp>
