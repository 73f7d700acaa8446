// distlock/memory.hpp: the in-process store and fenced register.
#pragma once

#include <distlock/detail/push_warnings.hpp>

#include <distlock/util/config.hpp>
#include <distlock/memory/fenced_register.hpp>
#include <distlock/memory/session_store.hpp>
#include <distlock/memory/store.hpp>

#ifdef DISTLOCK_SEPARATE_COMPILATION // compiled in the file that includes distlock/src/ (README.md)
#include <distlock/distlock.hpp>
#define DISTLOCK_INSTANCE(...) extern template __VA_ARGS__;
#include <distlock/instances/core.hpp>
#include <distlock/instances/memory.hpp>
#undef DISTLOCK_INSTANCE
#endif

#include <distlock/detail/pop_warnings.hpp>
