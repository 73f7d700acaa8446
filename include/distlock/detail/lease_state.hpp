// distlock/detail/lease_state.hpp: the shared state behind a lease, and its keeper.
//
// Design note: states of a lease.
//  - mode_ passive: nobody watches the lease and nothing renews it. Validity is
//    computed from the clock when asked; unlock() releases directly, with no strand
//    hop, which keeps an uncontended lock/unlock cheap. A session-bound lease stays
//    passive too until someone watches it: the session's reports go straight to the
//    atomics (validity, lost_), so a lock taken and released through a session costs
//    no keeper, strand or timer. A keeper started later picks up a loss reported
//    before it ran (lost_ is written before parts_ready_ is read, and the other way
//    round, both sequentially consistent: one side always sees the other).
//  - mode_ active: a keeper coroutine runs on the lease's strand. It extends the lease
//    on schedule (if renewal is on) and declares it lost when an extension fails or
//    when the local validity runs out before an extension succeeded, whichever is
//    first. An extension runs as its own coroutine so that the keeper can declare the
//    loss at the deadline while the extension is still in flight; a success that
//    arrives after the deadline does not revive the lease.
//  - mode_ released: unlock() ran (or started).
// In active mode every Asio object of the lease (timers, the loss signal) is touched
// only on the strand. unlock() sets stopping_, wakes the keeper, and waits until the
// keeper has exited and no extension is in flight before it sends the release, so no
// extension can reach the store after the release.
#pragma once

#include <distlock/claim.hpp>
#include <distlock/clock.hpp>
#include <distlock/backend/deferred.hpp>
#include <distlock/backend/lifetime.hpp>
#include <distlock/backend/on_strand.hpp>
#include <distlock/backend/strand.hpp>
#include <distlock/observe.hpp>
#include <distlock/options.hpp>
#include <distlock/owner_token.hpp>
#include <distlock/policy/acquire.hpp>
#include <distlock/result.hpp>

#include <asio/any_io_executor.hpp>
#include <asio/awaitable.hpp>
#include <asio/cancellation_signal.hpp>
#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/strand.hpp>
#include <asio/this_coro.hpp>
#include <asio/use_awaitable.hpp>

#include <algorithm>
#include <atomic>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

namespace distlock::detail {

/// How a lease is kept: TTL, safety margin, renewal schedule.
struct keep_plan {
    duration ttl{};
    duration drift{};
    std::optional<duration> renew_every;
    std::optional<duration> max_hold;
    bool session_bound = false; ///< Kept by a store session, which reports its state.
};

/// What a lease (and a set of leases) sees of its state. The data and the accessors
/// live here; the operations are virtual, implemented by basic_lease_keeper.
class lease_state : public std::enable_shared_from_this<lease_state>,
                    public backend::closing_listener,
                    public session_listener {
public:
    virtual ~lease_state() = default;
    lease_state(const lease_state&) = delete;
    lease_state& operator=(const lease_state&) = delete;

    const std::string& resource() const noexcept { return resource_; }
    const owner_token& owner() const noexcept { return owner_; }
    fence_token fence() const noexcept { return fence_; }
    /// The permit's number, for a semaphore's permit.
    std::optional<std::uint32_t> slot() const noexcept { return slot_; }
    /// Held in shared mode (a reader of a shared mutex, a permit of a semaphore).
    bool shared() const noexcept { return shared_.load(std::memory_order_acquire); }
    /// Set before the lease is handed out (the slot only then).
    void set_kind(bool shared, std::optional<std::uint32_t> slot) noexcept
    {
        shared_.store(shared, std::memory_order_release);
        slot_ = slot;
    }
    /// A writer that downgraded holds on in shared mode.
    void mark_shared() noexcept { shared_.store(true, std::memory_order_release); }
    asio::any_io_executor executor() const { return ex_; }

    time_point valid_until() const noexcept
    {
        return time_point{duration{valid_until_ns_.load(std::memory_order_acquire)}};
    }

    bool lost() const noexcept { return lost_.load(); }
    bool released() const noexcept { return mode_.load(std::memory_order_acquire) == released_mode; }

    /// A session-bound lease takes its validity from the session, which reports its
    /// state (session_changed()) and its loss; it stays passive until watched.
    virtual void start_session(time_point valid_until) = 0;

    /// Starts the keeper (renewal and loss detection) if it is not running yet.
    virtual void activate() = 0;

    /// A new slot on every call: all of them are emitted on loss, so binding one
    /// operation never unbinds another.
    virtual asio::cancellation_slot lost_slot() = 0;

    /// Completes when the lease ends: with why it was lost, or errc::released.
    virtual awaitable<std::error_code> wait_ended() = 0;

    /// Releases the lease in the store. Not cancellable once started: it waits for an
    /// in-flight extension, then sends the release (each bounded by the store's own
    /// request timeout). Returns errc::lease_lost if the lease did not stay valid all
    /// the way to the release, errc::released if it was already released. The
    /// operation keeps the state alive until it completes, whoever drops the lease.
    virtual awaitable<result<void>> unlock() = 0;

    /// The first half of a release that someone else sends (a set taken in one step
    /// goes back in one request): stops renewal and loss detection as unlock() does,
    /// and marks the lease released. std::nullopt when it was released before; else
    /// whether it had already been lost. Not cancellable; must be followed by
    /// finish_shared_release() with the store's answer for this lease.
    virtual awaitable<std::optional<bool>> begin_shared_release() = 0;

    /// The second half: reports the store's answer for this lease and ends it.
    /// errc::lease_lost when it did not stay valid to the release (as unlock()).
    virtual awaitable<result<void>> finish_shared_release(result<void> answer, bool lost_before) = 0;

    /// Releases in the background (a lease that went out of scope while held).
    virtual void release_detached() = 0;

protected:
    lease_state(asio::any_io_executor ex, std::string resource, owner_token owner,
                fence_token fence, time_point acquired_at, keep_plan plan)
        : ex_{std::move(ex)}, resource_{std::move(resource)}, owner_{owner}, fence_{fence},
          acquired_at_{acquired_at}, plan_{plan},
          valid_until_ns_{(acquired_at + plan.ttl - plan.drift).time_since_epoch().count()}
    {}

    void set_valid_until(time_point t) noexcept
    {
        valid_until_ns_.store(t.time_since_epoch().count(), std::memory_order_release);
    }

    static constexpr int passive_mode = 0, active_mode = 1, released_mode = 2;

    asio::any_io_executor ex_;
    std::string resource_;
    owner_token owner_;
    fence_token fence_;
    std::optional<std::uint32_t> slot_;
    std::atomic<bool> shared_{false};
    time_point acquired_at_;
    keep_plan plan_;
    std::atomic<time_point::rep> valid_until_ns_;
    std::atomic<int> mode_{passive_mode};
    std::atomic<bool> lost_{false};
    std::atomic<int> passive_end_{0}; // why a passive lease was lost (an errc; 0: not lost while passive)
};

/// The keeper: how a lease is renewed, watched and released (see the design note).
// A template only so that its coroutines are compiled where a lease is made: g++
// emits every coroutine defined in a header as an ordinary inline function in each
// translation unit that includes it, called or not. One instantiation serves every
// kind of lease.
template <class Unused = void>
class basic_lease_keeper : public lease_state {
public:
    basic_lease_keeper(asio::any_io_executor ex, std::string resource, owner_token owner,
                       fence_token fence, time_point acquired_at, keep_plan plan)
        : lease_state{std::move(ex), std::move(resource), owner, fence, acquired_at, plan}
    {}

    void start_session(time_point valid_until) override
    {
        set_valid_until(valid_until);
        // Told when the store closes, as an active lease is (store_closing()).
        listen_closing();
    }

    /// A lease with nothing to renew, nobody watching it yet: told when the store
    /// closes all the same, so that close() ends it and releases its lock.
    void start_passive() { listen_closing(); }

    void activate() override
    {
        int expected = passive_mode;
        mode_.compare_exchange_strong(expected, active_mode, std::memory_order_acq_rel);
        parts();
    }

    asio::cancellation_slot lost_slot() override
    {
        activate();
        auto& p = parts();
        std::lock_guard lock{p.signals_mutex};
        return p.lost_signals.emplace_back().slot();
    }

    awaitable<std::error_code> wait_ended() override
    {
        activate();
        co_return co_await backend::on_strand(
            parts().strand,
            [](std::shared_ptr<basic_lease_keeper> self) -> awaitable<std::error_code> {
                auto& p = self->parts();
                // ended_event never expires (see active_parts); several waiters may
                // wait on it, and end() cancels them all.
                while (!p.ended) {
                    (void)co_await p.ended_event.async_wait(
                        backend::as_tuple_awaitable<Unused>());
                    auto cs = co_await asio::this_coro::cancellation_state;
                    if (cs.cancelled() != asio::cancellation_type::none)
                        co_return errc::cancelled;
                }
                co_return p.end_reason;
            }(self_ptr()));
    }

    awaitable<result<void>> unlock() override { return unlock_keeping(self_ptr()); }

    awaitable<std::optional<bool>> begin_shared_release() override { return begin_shared_keeping(self_ptr()); }

    awaitable<result<void>> finish_shared_release(result<void> answer, bool lost_before) override
    {
        return finish_shared_keeping(self_ptr(), std::move(answer), lost_before);
    }

    void release_detached() override
    {
        spawn_owned([](std::shared_ptr<basic_lease_keeper> self) -> awaitable<void> {
            (void)co_await self->unlock();
        }(self_ptr()));
    }

private:
    std::shared_ptr<basic_lease_keeper> self_ptr()
    {
        return std::static_pointer_cast<basic_lease_keeper>(shared_from_this());
    }

    // `keep`, in the frame, is what keeps the state alive until the release is done.
    awaitable<result<void>> unlock_keeping(std::shared_ptr<basic_lease_keeper> keep)
    {
        int expected = passive_mode;
        if (mode_.compare_exchange_strong(expected, released_mode, std::memory_order_acq_rel)) {
            // Passive: nothing runs on the strand, so the release goes straight out
            // (in this frame: an uncontended unlock costs as few frames as it can).
            const bool expired = lost() || clock::now() >= valid_until();
            auto r = co_await store_release();
            co_return finish_passive(r, expired);
        }
        if (expected == released_mode)
            co_return errc::released;
        co_return co_await backend::on_strand(
            parts().strand,
            [](std::shared_ptr<basic_lease_keeper> self) -> awaitable<result<void>> {
                co_return co_await self->release_active();
            }(std::move(keep)));
    }

    awaitable<std::optional<bool>> begin_shared_keeping(std::shared_ptr<basic_lease_keeper> keep)
    {
        int expected = passive_mode;
        if (mode_.compare_exchange_strong(expected, released_mode, std::memory_order_acq_rel)) {
            released_passively_ = true;
            co_return lost() || clock::now() >= valid_until();
        }
        if (expected == released_mode)
            co_return std::nullopt;
        co_return co_await backend::on_strand(
            parts().strand,
            [](std::shared_ptr<basic_lease_keeper> self) -> awaitable<std::optional<bool>> {
                co_return co_await self->stop_active();
            }(std::move(keep)));
    }

    awaitable<result<void>> finish_shared_keeping(std::shared_ptr<basic_lease_keeper> keep, result<void> answer,
                                                  bool lost_before)
    {
        // Passive until its release began: nothing runs on a strand (parts() was never
        // made, or was made after the release and ended at once).
        if (released_passively_)
            co_return finish_passive(answer, lost_before);
        co_return co_await backend::on_strand(
            parts().strand,
            [](std::shared_ptr<basic_lease_keeper> self, result<void> r, bool lost) -> awaitable<result<void>> {
                co_return self->finish_active(r, lost);
            }(std::move(keep), std::move(answer), lost_before));
    }

    result<void> finish_passive(const result<void>& r, bool expired)
    {
        // A loss reported while passive was its event; the event's clock reading is
        // skipped when nobody listens.
        if (observed_ && !lost())
            report(release_event{resource_, valid_until() - clock::now(), r ? std::error_code{} : r.error()});
        return finish(r, expired);
    }

public:
    // The store closes: the lease cannot be kept. Reported lost, then released as
    // background work the store waits for (close()), or dropped (destructor).
    // The loss is posted first, so it is on the strand before the release.
    void store_closing() noexcept override
    {
        if (!parts_ready()) {
            // Passive (a session-bound lease nobody watches): lost now, released below.
            if (released())
                return;
            passive_loss(errc::store_unavailable);
            release_detached();
            if (!parts_ready())
                return;
        }
        asio::post(parts_->strand, [self = self_ptr()] {
            if (self->parts_->ended)
                return;
            self->end(make_error_code(errc::store_unavailable), true);
            self->parts_->wake.cancel();
        });
        // Counted by the store while it closes (so close() waits for it); dropped
        // when it is already closed (its destructor).
        if (!released())
            release_detached();
    }

    // A session store reports the session this lease is bound to.
    void session_changed(session_state state, time_point valid_until) noexcept override
    {
        if (!parts_ready()) {
            // Passive: the state lives in the atomics. Validity only moves on while the
            // lease stands (a report after the deadline does not revive it).
            if (released())
                return;
            if (state != session_state::held)
                passive_loss(errc::lease_lost);
            else if (!lost() && clock::now() < this->valid_until())
                set_valid_until(valid_until);
            if (!parts_ready())
                return;
            // A keeper started meanwhile: it hears the report too, on its strand.
        }
        asio::post(parts_->strand, [self = self_ptr(), state, valid_until] {
            auto& p = *self->parts_;
            if (p.ended)
                return;
            if (state == session_state::held) {
                // Validity only moves on while the lease stands (a late keepalive does
                // not revive a lease whose deadline passed: the keeper decides that).
                if (clock::now() < self->valid_until())
                    self->set_valid_until(valid_until);
            } else {
                self->end(make_error_code(errc::lease_lost), true);
            }
            p.wake.cancel();
        });
    }

protected:
    const keep_plan& plan() const noexcept { return plan_; }
    virtual awaitable<result<void>> store_extend() = 0;
    virtual awaitable<result<void>> store_release() = 0;
    virtual void report(const event& e) const = 0;
    // False when the observer is observe::none: events need not be built.
    bool observed_ = true;
    virtual void spawn_owned(awaitable<void> work) = 0;
    virtual void listen_closing() = 0;

private:
    struct active_parts {
        explicit active_parts(const asio::any_io_executor& ex)
            : strand{backend::make_strand(ex)}, wake{strand}, quiet{strand}, ended_event{strand, time_point::max()}
        {}
        asio::any_io_executor strand; // backend::make_strand()
        timer wake;         // the keeper sleeps on it
        timer quiet;        // unlock() waits on it for the keeper and extensions to stop
        timer ended_event;  // wait_ended() waits on it
        std::mutex signals_mutex; // lost_slot() may be called from the user's thread
        std::list<asio::cancellation_signal> lost_signals;
        bool keeper_running = false;
        bool stopping = false;
        bool ended = false;
        std::error_code end_reason;
        bool extend_in_flight = false;
        bool extend_done = false;
        bool extend_applied = false;
        result<void> extend_result = success();
        time_point extend_started{};
        time_point extend_finished{};
        time_point next_renew{};
        bool renewing = false;
    };

    bool parts_ready() const noexcept { return parts_ready_.load(); }

    // A loss while passive, from the session's or the store's thread: reported by
    // whoever marks the lease lost first (here, or end() on the keeper's strand).
    void passive_loss(errc why) noexcept
    {
        int none = 0; // the first reason stays: a closing store's, or the session's
        passive_end_.compare_exchange_strong(none, static_cast<int>(why));
        if (!lost_.exchange(true))
            report(release_event{resource_, valid_until() - clock::now(), passive_reason()});
    }
    std::error_code passive_reason() const noexcept
    {
        const int why = passive_end_.load();
        return make_error_code(why != 0 ? static_cast<errc>(why) : errc::lease_lost);
    }

    active_parts& parts()
    {
        std::call_once(parts_once_, [this] {
            parts_ = std::make_unique<active_parts>(ex_);
            if (mode_.load(std::memory_order_acquire) == released_mode) {
                // Released before anyone watched it: nothing to keep, and "lost" only if
                // its loss came first (a closing store releases the leases it ends).
                parts_->ended = true;
                parts_->end_reason = lost() ? passive_reason() : make_error_code(errc::released);
                released_flag_ = true;
                parts_ready_.store(true);
                return;
            }
            parts_->renewing = plan_.renew_every.has_value();
            parts_->next_renew = acquired_at_ + plan_.renew_every.value_or(duration::zero());
            parts_->keeper_running = true;
            parts_ready_.store(true);
            if (!plan_.session_bound) // a session-bound lease listens from the start
                listen_closing();
            asio::co_spawn(parts_->strand, keep(self_ptr()), asio::detached);
        });
        return *parts_;
    }

    // On the strand: the lease is gone for reason `why`.
    void end(std::error_code why, bool by_loss)
    {
        auto& p = *parts_;
        if (p.ended)
            return;
        p.ended = true;
        p.end_reason = why;
        if (by_loss) {
            if (!lost_.exchange(true))
                report(release_event{resource_, valid_until() - clock::now(), why});
            std::vector<asio::cancellation_signal*> signals;
            {
                std::lock_guard lock{p.signals_mutex};
                for (auto& sig : p.lost_signals)
                    signals.push_back(&sig);
            }
            for (auto* sig : signals)
                sig->emit(asio::cancellation_type::all);
        }
        p.ended_event.cancel();
    }

    static awaitable<void> keep(std::shared_ptr<basic_lease_keeper> self)
    {
        co_await asio::this_coro::throw_if_cancelled(false);
        auto& p = *self->parts_;
        const auto& plan = self->plan_;
        for (;;) {
            if (p.stopping || p.ended)
                break;
            if (self->lost()) { // reported while the lease was passive
                self->end(self->passive_reason(), true);
                break;
            }
            if (p.extend_done) {
                p.extend_done = false;
                if (!p.extend_result) {
                    self->end(p.extend_result.error() == condition::not_owner ? make_error_code(errc::lease_lost)
                                                                         : p.extend_result.error(),
                              true);
                    break;
                }
                if (p.extend_applied)
                    p.next_renew = p.extend_started + *plan.renew_every;
            }
            const auto now = clock::now();
            const auto deadline = self->valid_until();
            if (now >= deadline) {
                self->end(errc::lease_lost, true);
                break;
            }
            if (p.renewing && !p.extend_in_flight && now >= p.next_renew) {
                if (plan.max_hold && now - self->acquired_at_ >= *plan.max_hold)
                    p.renewing = false; // a stuck holder must not keep the lock forever
                else
                    self->start_extend(now);
            }
            auto wake_at = deadline;
            if (p.renewing && !p.extend_in_flight)
                wake_at = std::min(wake_at, p.next_renew);
            p.wake.expires_at(wake_at);
            (void)co_await p.wake.async_wait(backend::as_tuple_awaitable<Unused>());
        }
        p.keeper_running = false;
        p.quiet.cancel();
    }

    void start_extend(time_point now)
    {
        auto& p = *parts_;
        p.extend_in_flight = true;
        p.extend_started = now;
        asio::co_spawn(
            p.strand,
            [](std::shared_ptr<basic_lease_keeper> self, duration lag) -> awaitable<void> {
                auto& p = *self->parts_;
                auto r = co_await self->store_extend();
                p.extend_finished = clock::now();
                p.extend_result = r;
                p.extend_in_flight = false;
                p.extend_done = true;
                // Validity moves on only for a success that arrives before the local
                // deadline: a late one does not revive the lease. Applied here, on the
                // strand, so that the event below reports the validity that holds.
                p.extend_applied = r && !p.ended && p.extend_finished < self->valid_until();
                if (p.extend_applied)
                    self->set_valid_until(p.extend_started + self->plan_.ttl - self->plan_.drift);
                self->report(renewal_event{self->resource_, lag, p.extend_finished - p.extend_started,
                                           r ? std::error_code{} : r.error(), self->valid_until()});
                p.wake.cancel();
                p.quiet.cancel();
            }(self_ptr(), now - p.next_renew),
            asio::detached);
    }

    // On the strand.
    awaitable<result<void>> release_active()
    {
        const auto lost_before = co_await stop_active();
        if (!lost_before)
            co_return errc::released;
        auto r = co_await store_release();
        co_return finish_active(r, *lost_before);
    }

    // On the strand: stops the keeper and waits until no extension is in flight, so
    // that none can reach the store after the release. std::nullopt when released
    // before; else whether the lease had been lost.
    awaitable<std::optional<bool>> stop_active()
    {
        co_await asio::this_coro::reset_cancellation_state(
            [](asio::cancellation_type) { return asio::cancellation_type::none; });
        co_await asio::this_coro::throw_if_cancelled(false);
        auto& p = *parts_;
        if (released_flag_)
            co_return std::nullopt;
        released_flag_ = true;
        mode_.store(released_mode, std::memory_order_release);
        p.stopping = true;
        p.wake.cancel();
        while (p.keeper_running || p.extend_in_flight) {
            p.quiet.expires_at(time_point::max());
            (void)co_await p.quiet.async_wait(backend::as_tuple_awaitable<Unused>());
        }
        co_return p.ended || clock::now() >= valid_until();
    }

    // On the strand, with the store's answer to the release.
    result<void> finish_active(const result<void>& r, bool lost_before)
    {
        if (!parts_->ended)
            report(release_event{resource_, valid_until() - clock::now(), r ? std::error_code{} : r.error()});
        end(errc::released, false);
        return finish(r, lost_before);
    }

    static result<void> finish(const result<void>& r, bool lost_before)
    {
        if (lost_before || (!r && r.error() == condition::not_owner))
            return errc::lease_lost;
        return r;
    }

    std::once_flag parts_once_;
    std::atomic<bool> parts_ready_{false};
    std::unique_ptr<active_parts> parts_;
    bool released_flag_ = false; // on the strand
    // begin_shared_release() found the lease passive; read by finish_shared_release(),
    // which the same caller runs after it.
    bool released_passively_ = false;
};

/// The lease state of one kind of hold (what the claim handed over) and observer.
template <lease_hold Hold, class Observer>
class lease_state_for final : public basic_lease_keeper<> {
public:
    lease_state_for(Hold hold, const Observer& observer, asio::any_io_executor ex, std::string resource,
                    fence_token fence, time_point acquired_at, keep_plan plan)
        : basic_lease_keeper{std::move(ex), std::move(resource), hold.owner(), fence, acquired_at, plan},
          hold_{std::move(hold)}, observer_{observer}
    {
        observed_ = !std::is_same_v<Observer, observe::none>;
    }

    Hold& hold() noexcept { return hold_; }

private:
    awaitable<result<void>> store_extend() override { co_return co_await hold_.extend(); }
    awaitable<result<void>> store_release() override { return hold_.release(); }

    // Observers are asked not to throw; one that does must not stop the loss signal,
    // kill the keeper or leak a grant, so its exception ends here.
    void report(const event& e) const override
    {
        try {
            observer_(e);
        } catch (...) {
        }
    }

    void spawn_owned(awaitable<void> work) override
    {
        if constexpr (requires { hold_.spawn(std::move(work)); })
            hold_.spawn(std::move(work));
        else
            asio::co_spawn(executor(), std::move(work), asio::detached);
    }

    void listen_closing() override
    {
        if constexpr (requires { hold_.listen(std::weak_ptr<backend::closing_listener>{}); })
            if (!listening_.exchange(true)) // once: a passive lease that activates asks again
                (void)hold_.listen(std::weak_ptr<backend::closing_listener>{shared_from_this()});
    }

    Hold hold_;
    Observer observer_;
    std::atomic<bool> listening_ = false;
};

} // namespace distlock::detail
