// distlock/detail/push_warnings.hpp: opens the warning state of an entry header
// (distlock.hpp, memory.hpp, redis.hpp, ...), which includes detail/pop_warnings.hpp
// last. No include guard: every entry header pushes and pops its own.
//
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
