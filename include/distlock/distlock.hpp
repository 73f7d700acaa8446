// distlock/distlock.hpp: the whole core of distlock. Store adapters have headers of
// their own (distlock/memory.hpp, ...).
#pragma once

#include <distlock/detail/push_warnings.hpp>

#include <distlock/util/config.hpp>
#include <distlock/basic_distributed_mutex.hpp>
#include <distlock/basic_distributed_semaphore.hpp>
#include <distlock/basic_distributed_shared_mutex.hpp>
#include <distlock/basic_leader_election.hpp>
#include <distlock/claim.hpp>
#include <distlock/diagnostics.hpp>
#include <distlock/blocking.hpp>
#include <distlock/clock.hpp>
#include <distlock/error.hpp>
#include <distlock/lease.hpp>
#include <distlock/multi_lock.hpp>
#include <distlock/named_locks.hpp>
#include <distlock/observe.hpp>
#include <distlock/options.hpp>
#include <distlock/owner_token.hpp>
#include <distlock/policy/acquire.hpp>
#include <distlock/policy/order.hpp>
#include <distlock/policy/queue.hpp>
#include <distlock/policy/renew.hpp>
#include <distlock/policy/retry.hpp>
#include <distlock/policy/shared.hpp>
#include <distlock/quorum.hpp>
#include <distlock/result.hpp>
#include <distlock/store.hpp>

// Separate compilation (README.md): these are compiled in the one file that includes
// distlock/src/, which leaves these declarations out (they would follow the definitions).
#if defined(DISTLOCK_SEPARATE_COMPILATION) && !defined(DISTLOCK_INSTANTIATING)
#define DISTLOCK_INSTANCE(...) extern template __VA_ARGS__;
#include <distlock/instances/core.hpp>
#undef DISTLOCK_INSTANCE
#endif

#include <distlock/detail/pop_warnings.hpp>
