// distlock/detail/wakeup.hpp: the signal a release notification delivers to one waiter.
//
// A concurrent channel with room for one message: safe to signal from any thread, and
// a signal sent before the waiter starts waiting is kept, so a release that happens
// between a failed attempt and the wait is not lost. Signalling never runs the waiter
// inline (the channel posts its completion), so a store may signal under its own lock.
#pragma once

#include <distlock/clock.hpp>
#include <distlock/detail/cut_off.hpp>
#include <distlock/detail/deferred.hpp>
#include <distlock/result.hpp>

#include <asio/any_io_executor.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/experimental/concurrent_channel.hpp>
#include <asio/this_coro.hpp>
#include <asio/use_awaitable.hpp>

#include <string>
#include <string_view>
#include <system_error>

namespace distlock::detail {

class wakeup {
public:
    /// `addressee`: the waiter's id in a fair queue; a message naming another waiter
    /// is not for it (empty: every message is).
    explicit wakeup(asio::any_io_executor ex, std::string addressee = {})
        : channel_{std::move(ex), 1}, addressee_{std::move(addressee)}
    {}

    /// Whether a release message with this text should wake the waiter: one for
    /// everyone, or one naming it.
    bool wants(std::string_view message) const noexcept
    {
        return addressee_.empty() || message == addressee_ || message == "released";
    }

    /// Wakes the waiter (or the next wait, if none is waiting now).
    void signal() { channel_.try_send(std::error_code{}, true); }

    /// Takes a signal sent since the last wait or take, without waiting: true if
    /// there was one.
    bool try_take()
    {
        bool taken = false;
        (void)channel_.try_receive([&](std::error_code, bool) { taken = true; });
        return taken;
    }

    /// True when signalled, false when `until` came first or on cancellation.
    // A template so that it is compiled only where it is used (see
    // detail/lease_state.hpp).
    template <class Unused = void>
    awaitable<bool> wait(time_point until)
    {
        bool signalled = false;
        (void)co_await finished_before(receive(channel_, signalled), until);
        co_return signalled;
    }

private:
    using channel = asio::experimental::concurrent_channel<void(std::error_code, bool)>;

    template <class Unused = void>
    static awaitable<void> receive(channel& from, bool& signalled)
    {
        auto [ec, unused] = co_await from.async_receive(as_tuple_awaitable<Unused>());
        signalled = !ec;
    }

    // (error_code, bool) rather than (error_code): Asio 1.22's channel traits cannot
    // tell the single-argument form apart.
    channel channel_;
    const std::string addressee_;
};

} // namespace distlock::detail
