// distlock/etcd.hpp: etcd (v3, over native gRPC or its JSON gateway) as a distlock
// store (link distlock::etcd: nlohmann-json, nghttp2, and OpenSSL for TLS).
#pragma once

#include <distlock/detail/push_warnings.hpp>

#include <distlock/util/config.hpp>
#include <distlock/distlock.hpp>
#include <distlock/etcd/config.hpp>
#include <distlock/etcd/error.hpp>
#include <distlock/etcd/store.hpp>

#include <distlock/detail/pop_warnings.hpp>
