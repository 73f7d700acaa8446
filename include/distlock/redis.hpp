// distlock/redis.hpp: Redis as a distlock store (needs OpenSSL for TLS: link
// distlock::redis, or OpenSSL::SSL).
#pragma once

// See distlock/distlock.hpp: g++ 12 false positives on coroutine frames
// (-Wmaybe-uninitialized) and Asio's frame allocator (-Wmismatched-new-delete,
// reported where a Redis stream coroutine frees its frame),
// contained for the library's own code so that users need not turn them off.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif

#include <distlock/detail/config.hpp>
#include <distlock/redis/config.hpp>
#include <distlock/redis/resp/command.hpp>
#include <distlock/redis/resp/parser.hpp>
#include <distlock/redis/resp/value.hpp>
#include <distlock/redis/scripts.hpp>
#include <distlock/redis/store.hpp>

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
