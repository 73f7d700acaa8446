// distlock/memory.hpp: the in-process store and fenced register.
#pragma once

// See distlock/distlock.hpp: g++ 12 false positives on coroutine frames
// (-Wmaybe-uninitialized) and Asio's frame allocator (-Wmismatched-new-delete),
// contained for the library's own code so that users need not turn them off.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif

#include <distlock/detail/config.hpp>
#include <distlock/memory/fenced_register.hpp>
#include <distlock/memory/session_store.hpp>
#include <distlock/memory/store.hpp>

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
