// distlock/etcd.hpp: etcd (v3, through its JSON gateway) as a distlock store (link
// distlock::etcd: nlohmann-json, and OpenSSL for TLS).
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
#include <distlock/etcd/config.hpp>
#include <distlock/etcd/error.hpp>
#include <distlock/etcd/store.hpp>

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
