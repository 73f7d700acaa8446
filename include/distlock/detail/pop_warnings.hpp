// distlock/detail/pop_warnings.hpp: closes what detail/push_warnings.hpp opened. No
// include guard: every entry header pushes and pops its own.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
