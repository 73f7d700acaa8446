// distlock/backend/wakeup.hpp: the signal a release notification delivers to one waiter.
//
// An auto_reset_event with the waiter's name: safe to signal from any thread, and a
// signal sent before the waiter starts waiting is kept, so a release that happens
// between a failed attempt and the wait is not lost. Signalling never runs the waiter
// inline (the event posts its completion), so a store may signal under its own lock.
#pragma once

#include <distlock/clock.hpp>
#include <distlock/backend/auto_reset_event.hpp>
#include <distlock/result.hpp>

#include <asio/any_io_executor.hpp>

#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>

namespace distlock::backend {

class wakeup {
public:
    /// `addressee`: the waiter's id in a fair queue; a message naming another waiter
    /// is not for it (empty: every message is).
    explicit wakeup(asio::any_io_executor ex, std::string addressee = {})
        : event_{std::move(ex)}, addressee_{std::move(addressee)}
    {}

    /// Whether a release message with this text should wake the waiter: one for
    /// everyone, or one naming it (alone, or followed by ':' and what the release
    /// left for it).
    bool wants(std::string_view message) const noexcept
    {
        if (addressee_.empty() || message == "released")
            return true;
        return message.starts_with(addressee_) &&
               (message.size() == addressee_.size() || message[addressee_.size()] == ':');
    }

    /// Wakes the waiter (or the next wait, if none is waiting now).
    void signal() { event_.set(); }

    /// Wakes the waiter with a message named for it, and keeps what follows its name
    /// (the latest such message) for take_letter().
    void signal(std::string_view message)
    {
        if (!addressee_.empty() && message.size() > addressee_.size() && wants(message)) {
            std::lock_guard lock{letter_mutex_};
            letter_.assign(message.substr(addressee_.size() + 1));
            has_letter_ = true;
        }
        event_.set();
    }

    /// What the latest message named for the waiter carried after its name, once.
    std::optional<std::string> take_letter()
    {
        std::lock_guard lock{letter_mutex_};
        if (!std::exchange(has_letter_, false))
            return std::nullopt;
        return std::move(letter_);
    }

    /// Takes a signal sent since the last wait or take, without waiting: true if
    /// there was one.
    bool try_take() { return event_.try_take(); }

    /// True when signalled, false when `until` came first or on cancellation.
    // A template so that it is compiled only where it is used (see
    // backend/deferred.hpp).
    template <class Unused = void>
    awaitable<bool> wait(time_point until)
    {
        return event_.wait<Unused>(until);
    }

private:
    auto_reset_event event_;
    const std::string addressee_;
    std::mutex letter_mutex_; // signal() comes from the store's strand, take_letter() from the waiter's
    std::string letter_;
    bool has_letter_ = false;
};

} // namespace distlock::backend
