// distlock/detail/strand.hpp: the strands the connections and sessions run on.
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

namespace distlock::detail {

/// A strand over `ex`, as an any_io_executor: over io_context::executor_type when `ex`
/// is one, else over `ex` itself.
inline asio::any_io_executor make_strand(const asio::any_io_executor& ex)
{
    if (const auto* io = ex.target<asio::io_context::executor_type>())
        return asio::make_strand(*io);
    return asio::make_strand(ex);
}

/// The executor a strand made by make_strand() runs its work on (`strand` itself for
/// any other executor).
inline asio::any_io_executor inner_executor(const asio::any_io_executor& strand)
{
    if (const auto* s = strand.target<asio::strand<asio::io_context::executor_type>>())
        return s->get_inner_executor();
    if (const auto* s = strand.target<asio::strand<asio::any_io_executor>>())
        return s->get_inner_executor();
    return strand;
}

} // namespace distlock::detail
