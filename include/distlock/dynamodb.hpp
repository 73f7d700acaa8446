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

#include <distlock/detail/pop_warnings.hpp>
