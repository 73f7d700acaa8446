// distlock/dynamodb.hpp: DynamoDB as a distlock store (link distlock::dynamodb:
// OpenSSL for SigV4 and TLS, and nlohmann-json).
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
#include <distlock/dynamodb/acquire.hpp>
#include <distlock/dynamodb/config.hpp>
#include <distlock/dynamodb/error.hpp>
#include <distlock/dynamodb/store.hpp>

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
