// distlock/memory.hpp: the in-process store and fenced register.
#pragma once

#include <distlock/detail/push_warnings.hpp>

#include <distlock/util/config.hpp>
#include <distlock/memory/fenced_register.hpp>
#include <distlock/memory/session_store.hpp>
#include <distlock/memory/store.hpp>

// Separate compilation (README.md): these are compiled in the one file that includes
// distlock/src/, which leaves these declarations out (they would follow the definitions).
#if defined(DISTLOCK_SEPARATE_COMPILATION) && !defined(DISTLOCK_INSTANTIATING)
#include <distlock/distlock.hpp>
#define DISTLOCK_INSTANCE(...) extern template __VA_ARGS__;
#include <distlock/instances/core.hpp>
#include <distlock/instances/memory.hpp>
#undef DISTLOCK_INSTANCE
#endif

#include <distlock/detail/pop_warnings.hpp>
