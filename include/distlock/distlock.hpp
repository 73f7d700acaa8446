// distlock/distlock.hpp: the whole core of distlock. Store adapters have headers of
// their own (distlock/memory.hpp, ...).
#pragma once

// g++ 12 at -O2 reports -Wmaybe-uninitialized inside Asio's co_spawn completion
// when it moves a result<lease> out of a coroutine frame (Asio recycles frame
// memory; the value is always constructed): a false positive, reported through
// lease.hpp and result.hpp. -Wmismatched-new-delete is Asio's own: its awaitable
// frames are allocated with ::operator new by its recycling allocator and freed by
// the frame's class operator delete, a matched pair g++ cannot see. Both are
// contained here, for the library's own code, so that users need not turn them
// off; the user's code keeps every warning. (GCC checks the pragma state at each
// inlined location, so this holds whichever of Asio or <memory> came first.)
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif

#include <distlock/detail/config.hpp>
#include <distlock/basic_distributed_mutex.hpp>
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
#include <distlock/quorum.hpp>
#include <distlock/result.hpp>
#include <distlock/store.hpp>

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
