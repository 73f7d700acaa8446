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

#ifdef DISTLOCK_SEPARATE_COMPILATION // compiled in the file that includes distlock/src/ (README.md)
#include <distlock/distlock.hpp>
#define DISTLOCK_INSTANCE(...) extern template __VA_ARGS__;
#include <distlock/instances/core.hpp>
#include <distlock/instances/transport.hpp>
#include <distlock/instances/http.hpp>
#include <distlock/instances/dynamodb.hpp>
#undef DISTLOCK_INSTANCE
#endif

#include <distlock/detail/pop_warnings.hpp>
