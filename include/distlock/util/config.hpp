// distlock/util/config.hpp: what distlock needs of the compiler, checked first, so
// that a compiler without it gets one message saying so rather than errors from deep
// inside distlock and Asio.
#pragma once

#include <asio/detail/config.hpp>

// Asio's own verdict, as it is the one that decides whether asio::awaitable exists
// (clang 14 has coroutines, but Asio does not use them there with libstdc++).
#if !defined(__cpp_impl_coroutine) || __cpp_impl_coroutine < 201902L || !defined(ASIO_HAS_CO_AWAIT)
#error "distlock needs C++20 coroutines that Asio supports (ASIO_HAS_CO_AWAIT): compile with -std=c++20 on g++ 11 or later; clang 14 is not enough"
// A header that does not exist: the compiler stops here (a fatal error naming what
// is missing), instead of adding hundreds of errors from the headers that follow.
#include <distlock-needs-cpp20-coroutines>
#endif
