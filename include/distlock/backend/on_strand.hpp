// distlock/backend/on_strand.hpp: runs a coroutine on a strand and lets the caller's
// cancellation reach it there.
//
// Why not plain co_spawn(strand, op, use_awaitable): Asio 1.22 connects the caller's
// cancellation slot straight to the spawned coroutine, so a cancellation emitted on
// the caller's thread cancels the spawned coroutine's timers and sockets on that
// thread while the strand may be running them on another (a data race: a request
// timer cancelled while the strand destroys it). Here the caller's slot gets a
// handler that dispatches the emission to the strand, in order with the strand's own
// work; the spawned coroutine sees it there.
#pragma once

#include <distlock/backend/cut_off.hpp>
#include <distlock/result.hpp>

#include <asio/bind_cancellation_slot.hpp>
#include <asio/cancellation_signal.hpp>
#include <asio/co_spawn.hpp>
#include <asio/dispatch.hpp>
#include <asio/this_coro.hpp>
#include <asio/use_awaitable.hpp>

#include <memory>
#include <optional>

namespace distlock::backend {

/// Whether the calling coroutine was asked to stop.
// A template only to be compiled where it is used (backend/store_shell.hpp says why).
template <class Unused = void>
awaitable<bool> cancelled()
{
    const auto cs = co_await asio::this_coro::cancellation_state;
    co_return cs.cancelled() != asio::cancellation_type::none;
}

/// Runs `op` on `strand` (any executor that serialises its work), relaying the
/// caller's cancellation there.
// Over awaitable<void> only: co_spawn into use_awaitable instantiates its entry point
// and handlers per result type (see backend/cut_off.hpp); on_strand() below carries a
// result through a reference instead. A template so that it is compiled only where it
// is used.
template <class Strand, class Unused = void>
awaitable<void> run_on_strand(const Strand& strand, awaitable<void> op)
{
    const auto state = co_await asio::this_coro::cancellation_state;
    auto slot = state.slot();
    if (!slot.is_connected()) { // nobody can cancel the caller: nothing to relay
        co_await asio::co_spawn(strand, std::move(op), asio::use_awaitable);
        co_return;
    }
    // Shared with the handler: an emission dispatched just before the call completes
    // still finds its signal (with no handler left: a no-op).
    auto relay = std::make_shared<asio::cancellation_signal>();
    slot.assign([strand, relay](asio::cancellation_type type) {
        asio::dispatch(strand, [relay, type] { relay->emit(type); });
    });
    // The caller's slot is cleared when this completes (Asio does so on resumption).
    co_await asio::co_spawn(strand, std::move(op), asio::bind_cancellation_slot(relay->slot(), asio::use_awaitable));
}

/// `op`'s result, `op` having run on `strand`. The result is written on the strand
/// and read here after the strand's completion has resumed the caller.
template <class Strand, class T>
awaitable<T> on_strand(const Strand& strand, awaitable<T> op)
{
    std::optional<T> out;
    co_await run_on_strand(strand, keep_result(std::move(op), out));
    co_return std::move(*out);
}

} // namespace distlock::backend
