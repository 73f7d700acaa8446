// distlock/backend/strand.hpp: the strands the connections and sessions run on.
//
// Why not asio::strand<asio::any_io_executor>: its inner executor is type-erased, and
// Asio 1.22 pays for that on every hand-off. Each execute() on the strand asks the
// inner executor whether it may block, and a type-erased executor answers that query
// with a heap-allocated result; each handler bound to the strand is tracked through
// an any_io_executor holding the strand, and a strand over a type-erased executor
// (48 bytes) does not fit in any_io_executor's inline buffer, so that allocates too.
// A request through a connection paid about ten allocations for this alone. A strand
// over the io_context's own executor type (24 bytes) fits, and its queries are plain
// calls. Any other executor (a thread pool's, a user's wrapper) gets the type-erased
// strand as before.
#pragma once

#include <asio/any_io_executor.hpp>
#include <asio/io_context.hpp>
#include <asio/strand.hpp>

#include <type_traits>
#include <typeinfo>

namespace distlock::backend {

/// `ex`'s target when it is a `T`, else null. Asio 1.22's any_executor::target() does
/// not check the type it is asked for; this does, by RTTI. Without RTTI the type
/// cannot be told, and the answer is always null (the type-erased strand: slower,
/// as correct).
template <class T, class Executor = asio::any_io_executor>
const T* target_of(const std::type_identity_t<Executor>& ex) noexcept
{
#if !defined(ASIO_NO_TYPEID)
    if (ex && ex.target_type() == typeid(T))
        return ex.template target<T>();
#endif
    (void)ex;
    return nullptr;
}

// The functions here are templates (of the executor's type, always any_io_executor)
// so that g++ instantiates what they use (strands and type-erased
// executors of several kinds) only in translation units that call them: as inline
// functions, every includer paid for it (bench/README.md, compile cost).

/// A strand over `ex`, as an any_io_executor: over io_context::executor_type when `ex`
/// is one, else over `ex` itself.
template <class Executor = asio::any_io_executor>
asio::any_io_executor make_strand(const std::type_identity_t<Executor>& ex)
{
    if (const auto* io = target_of<asio::io_context::executor_type>(ex))
        return asio::make_strand(*io);
    return asio::make_strand(ex);
}

/// The executor a strand made by make_strand() runs its work on (`strand` itself for
/// any other executor).
template <class Executor = asio::any_io_executor>
asio::any_io_executor inner_executor(const std::type_identity_t<Executor>& strand)
{
    if (const auto* s = target_of<asio::strand<asio::io_context::executor_type>>(strand))
        return s->get_inner_executor();
    if (const auto* s = target_of<asio::strand<asio::any_io_executor>>(strand))
        return s->get_inner_executor();
    return strand;
}

} // namespace distlock::backend
