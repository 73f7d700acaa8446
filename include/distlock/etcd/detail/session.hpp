// distlock/etcd/detail/session.hpp: the store's session: one etcd lease, kept alive
// at an interval (TTL/3 by default) and never later than halfway through the validity
// left (next_keepalive() in clock.hpp), shared by every lock the store takes.
//
// States, as the core's session support hears them (claim.hpp): held (each answered
// keepalive moves the validity to send time + granted TTL - drift), lost (the server
// says the lease is gone: a keepalive answered without a TTL, "lease not found"), in
// doubt (no keepalive was answered before the validity ran out on the client's
// monotonic clock: the server may already have expired the lease). A refused or
// unanswered keepalive is sent again while the validity lasts. Once a session has
// ended, the next lock grants a new lease; the old one, in doubt, is revoked in the
// background (its keys go at once if the server hears it, else with its TTL).
//
// The lease ID is chosen by the client (random, 63 bits), so a grant whose answer was
// lost is sent again with the same ID, and "lease already exists" says it went through.
//
// A lease's key can go while the session lives (an operator revoked the lock): the
// keepalive keeps the etcd lease, not the key, so nothing would tell the holder.
// Each binding remembers its key and the create revision it had; after each answered
// keepalive, one txn of compares (per max_txn_ops keys) asks whether they all still
// exist, and the leases whose keys are gone hear that they are lost. The check runs
// beside the keepalive loop (never delaying it), one at a time, bounded by the store's
// operation timeout, and stop() cuts it off. It is best effort: a check that fails is
// made again after the next keepalive.
#pragma once

#include <distlock/claim.hpp>
#include <distlock/clock.hpp>
#include <distlock/backend/cut_off.hpp>
#include <distlock/backend/deferred.hpp>
#include <distlock/backend/on_strand.hpp>
#include <distlock/util/os_random.hpp>
#include <distlock/backend/strand.hpp>
#include <distlock/etcd/detail/client.hpp>
#include <distlock/etcd/detail/keys.hpp>
#include <distlock/etcd/detail/replies.hpp>

#include <asio/bind_cancellation_slot.hpp>
#include <asio/cancellation_signal.hpp>
#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/strand.hpp>

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace distlock::etcd::detail {

// A template only to be compiled where it is used (backend/store_shell.hpp says why).
template <class Unused = void>
class basic_session : public std::enable_shared_from_this<basic_session<Unused>> {
public:
    /// `check_timeout` bounds each check of the bound keys (the store's operation timeout).
    basic_session(asio::any_io_executor ex, std::shared_ptr<client> c, duration check_timeout)
        : strand_{distlock::backend::make_strand(ex)}, client_{std::move(c)}, cfg_{client_->settings()}, tick_{strand_},
          check_timeout_{check_timeout}
    {}

    /// The open lease, granted now when there is none (and the keepalive started).
    static awaitable<result<std::int64_t>> lease(std::shared_ptr<basic_session> self, diagnostics* diag)
    {
        {
            std::lock_guard lock{self->mutex_};
            if (self->stopped_)
                co_return distlock::errc::store_unavailable;
            if (self->lease_ && clock::now() < self->valid_until_)
                co_return self->lease_;
        }
        co_return co_await distlock::backend::on_strand(self->strand_, granted(self, diag));
    }

    /// The session `id` is over (lost) or cannot be vouched for (in doubt); every lease
    /// bound to it hears so.
    void ended(std::int64_t id, session_state why)
    {
        std::vector<std::weak_ptr<session_listener>> told;
        {
            std::lock_guard lock{mutex_};
            if (lease_ != id)
                return;
            lease_ = 0;
            granted_.clear();
            made_.clear();
            told = take_bound();
        }
        if (why == session_state::in_doubt)
            asio::co_spawn(strand_, revoke(client_, id), asio::detached);
        for (auto& w : told)
            if (auto l = w.lock())
                l->session_changed(why, time_point{});
    }

    /// Remembers which lease holds the entry that `lease` just created or found, and
    /// its key.
    void granted(std::int64_t entry, std::int64_t lease, std::string key)
    {
        std::lock_guard lock{mutex_};
        if (lease != lease_)
            return;
        granted_[entry] = granted_entry{lease, std::move(key)};
        while (granted_.size() > 4096) // grants of lock() calls that never bound them
            granted_.erase(granted_.begin());
    }

    /// The keys this store made under the session's current lease (a lock() call that
    /// tries again after a wake-up reads its key instead of writing).
    void remember(std::string key, std::int64_t lease, std::int64_t entry)
    {
        std::lock_guard lock{mutex_};
        if (lease == lease_) {
            auto& k = made_[std::move(key)];
            k.entry = entry;
            while (made_.size() > 65536) // lock() calls that vanished without leaving
                made_.erase(made_.begin());
        }
    }
    bool made(const std::string& key, std::int64_t lease) const
    {
        std::lock_guard lock{mutex_};
        return lease == lease_ && made_.count(key) > 0;
    }
    /// The key is being deleted by its lock() call (released, or left): nothing waits
    /// on it any more, and the lease bound to it (released) need not be checked.
    void forget(const std::string& key)
    {
        std::lock_guard lock{mutex_};
        made_.erase(key);
        bound_.erase(key);
    }

    /// The lock-delay mark `value` is being put for the holder key `key`: its release
    /// deletes it in the same txn, if still that mark. Remembered before the put is
    /// sent, so that a put whose answer was lost is cleared by the release too.
    void arming(const std::string& key, std::string value)
    {
        std::lock_guard lock{mutex_};
        armed_[key] = std::move(value);
        while (armed_.size() > 4096) // grants never released through this store
            armed_.erase(armed_.begin());
    }
    /// The mark armed for `key`, if any: its release deletes it too.
    std::optional<std::string> armed_mark(const std::string& key) const
    {
        std::lock_guard lock{mutex_};
        const auto it = armed_.find(key);
        if (it == armed_.end())
            return std::nullopt;
        return it->second;
    }
    /// The release of `key` got its answer: its mark is settled.
    void disarmed(const std::string& key)
    {
        std::lock_guard lock{mutex_};
        armed_.erase(key);
    }

    /// The key `key` waits for the key created at `predecessor`, which held the lock
    /// when it looked if `held`.
    void remember_predecessor(const std::string& key, std::int64_t predecessor, bool held)
    {
        std::lock_guard lock{mutex_};
        if (const auto it = made_.find(key); it != made_.end()) {
            it->second.predecessor = predecessor;
            it->second.predecessor_held = held;
            it->second.promoted = false;
        }
    }

    /// The key created at `predecessor` in `queue` holds the lock (it carries its
    /// holder's mark).
    void predecessor_marked(const std::string& queue, std::int64_t predecessor)
    {
        std::lock_guard lock{mutex_};
        for (auto it = made_.lower_bound(queue); it != made_.end() && it->first.starts_with(queue); ++it)
            if (it->second.predecessor == predecessor)
                it->second.predecessor_held = true;
    }

    /// The key created at `predecessor` in `queue` is gone (a watch saw its deletion).
    /// The key waiting for it is the oldest of its queue if that one held the lock:
    /// create revisions only grow, so no key can come before it.
    void predecessor_deleted(const std::string& queue, std::int64_t predecessor)
    {
        std::lock_guard lock{mutex_};
        for (auto it = made_.lower_bound(queue); it != made_.end() && it->first.starts_with(queue); ++it)
            if (it->second.predecessor == predecessor && it->second.predecessor_held)
                it->second.promoted = true;
    }

    /// The entry (create revision) of `key` when a watch promoted it to the front of
    /// its queue under `lease`: it holds the lock with no read to confirm it.
    std::optional<std::int64_t> promoted(const std::string& key, std::int64_t lease) const
    {
        std::lock_guard lock{mutex_};
        const auto it = made_.find(key);
        if (lease != lease_ || it == made_.end() || !it->second.promoted || it->second.entry == 0)
            return std::nullopt;
        return it->second.entry;
    }

    /// Binds a lease whose entry is `entry` to the session, and to its key: its
    /// validity, or nullopt when the session that keeps the entry is gone.
    std::optional<time_point> bind(std::int64_t entry, std::weak_ptr<session_listener> l)
    {
        std::lock_guard lock{mutex_};
        const auto it = granted_.find(entry);
        const bool ours = it != granted_.end() && it->second.lease == lease_;
        std::string key;
        if (it != granted_.end()) {
            key = std::move(it->second.key);
            granted_.erase(it);
        }
        if (!ours || !lease_ || clock::now() >= valid_until_)
            return std::nullopt;
        // Every lock binds: the expired ones go when the map has doubled since the
        // last sweep, so that a bind costs O(log n) amortised.
        if (bound_.size() >= 2 * swept_size_ + 16) {
            sweep_expired();
            swept_size_ = bound_.size();
        }
        bound_.insert_or_assign(std::move(key), binding{entry, std::move(l)});
        return valid_until_;
    }

    /// The number of bindings kept (for tests).
    std::size_t bindings() const
    {
        std::lock_guard lock{mutex_};
        return bound_.size();
    }

    /// Stops the keepalive; leases bound to the session hear that it is lost. Returns
    /// the lease that was open (0: none), for the caller to revoke.
    std::int64_t stop()
    {
        std::int64_t id = 0;
        std::vector<std::weak_ptr<session_listener>> told;
        {
            std::lock_guard lock{mutex_};
            stopped_ = true;
            id = std::exchange(lease_, 0);
            told = take_bound();
        }
        asio::post(strand_, [self = this->shared_from_this()] {
            self->tick_.cancel();
            if (self->check_stop_)
                self->check_stop_->emit(asio::cancellation_type::terminal);
        });
        for (auto& w : told)
            if (auto l = w.lock())
                l->session_changed(session_state::lost, time_point{});
        return id;
    }

    static awaitable<void> revoke(std::shared_ptr<client> c, std::int64_t id)
    {
        const json body = {{"ID", std::to_string(id)}};
        (void)co_await client::call(std::move(c), "lease/revoke", body, nullptr);
    }

    std::int64_t current_lease() const
    {
        std::lock_guard lock{mutex_};
        return lease_;
    }

    std::size_t keepalives_sent() const
    {
        std::lock_guard lock{mutex_};
        return keepalives_;
    }

    std::size_t checks_sent() const
    {
        std::lock_guard lock{mutex_};
        return checks_;
    }

private:
    // On the strand: one grant at a time; lock() calls that need a lease meanwhile
    // wait for it.
    static awaitable<result<std::int64_t>> granted(std::shared_ptr<basic_session> self, diagnostics* diag)
    {
        while (self->granting_) {
            timer t{self->strand_, time_point::max()};
            self->grant_waiters_.push_back(&t);
            (void)co_await t.async_wait(distlock::backend::as_tuple_awaitable<Unused>());
            std::erase(self->grant_waiters_, &t);
        }
        std::int64_t stale = 0;
        {
            std::lock_guard lock{self->mutex_};
            if (self->stopped_)
                co_return distlock::errc::store_unavailable;
            if (self->lease_ && clock::now() < self->valid_until_)
                co_return self->lease_;
            stale = self->lease_;
        }
        // A session whose validity ran out before its keepalive loop said so: its
        // leases hear that it is in doubt before a new one replaces it.
        if (stale)
            self->ended(stale, session_state::in_doubt);
        self->granting_ = true;
        auto got = co_await self->grant(diag);
        self->granting_ = false;
        for (auto* t : self->grant_waiters_)
            t->cancel();
        co_return got;
    }

    awaitable<result<std::int64_t>> grant(diagnostics* diag)
    {
        const auto id = static_cast<std::int64_t>(distlock::util::os_random_u64() >> 1) | 1; // positive, never 0 (no lease)
        const auto ttl = std::chrono::duration_cast<std::chrono::seconds>(cfg_.session_ttl).count();
        const json body = {{"TTL", std::to_string(ttl)}, {"ID", std::to_string(id)}};
        const auto sent = clock::now();
        auto got = co_await client::call(client_, "lease/grant", body, diag);
        std::int64_t granted_ttl = ttl;
        if (!got && got.error() == distlock::errc::outcome_unknown) {
            // The answer was lost: the same ID again. "Already exists" is our grant.
            got = co_await client::call(client_, "lease/grant", body, diag);
            if (!got && got.error() == errc::failed_precondition) {
                if (diag)
                    diag->clear();
                got = json::object();
            }
        }
        if (!got)
            co_return got.error();
        const auto stated = decode_lease_grant(got.value(), diag);
        if (!stated)
            co_return stated.error(); // the lease may exist: it expires with its TTL
        if (stated.value())
            granted_ttl = *stated.value();
        {
            std::lock_guard lock{mutex_};
            if (stopped_) {
                asio::co_spawn(strand_, revoke(client_, id), asio::detached);
                co_return distlock::errc::store_unavailable;
            }
            lease_ = id;
            ttl_ = std::chrono::seconds{granted_ttl};
            valid_until_ = sent + ttl_ - cfg_.drift;
            granted_.clear();
            made_.clear();
        }
        if (!keeping_) {
            keeping_ = true;
            asio::co_spawn(strand_, keep(this->shared_from_this()), asio::detached);
        }
        co_return id;
    }

    // One keepalive loop per store serves all its leases (on the strand).
    static awaitable<void> keep(std::shared_ptr<basic_session> self)
    {
        for (;;) {
            std::int64_t id = 0;
            time_point valid{};
            duration every{};
            {
                std::lock_guard lock{self->mutex_};
                if (self->stopped_ || !self->lease_) {
                    self->keeping_ = false;
                    co_return;
                }
                id = self->lease_;
                valid = self->valid_until_;
                every = std::min(self->cfg_.keepalive_interval(), self->ttl_ / 3);
            }
            // Never at the validity's end itself: a keepalive must be sent while it
            // lasts, however late the grant or the last keepalive was answered.
            self->tick_.expires_at(next_keepalive(clock::now(), valid, every));
            (void)co_await self->tick_.async_wait(distlock::backend::as_tuple_awaitable<Unused>());
            if (self->is_stopped())
                continue;
            co_await self->renew(id, valid, every);
        }
    }

    bool is_stopped() const
    {
        std::lock_guard lock{mutex_};
        return stopped_;
    }

    awaitable<void> renew(std::int64_t id, time_point valid, duration every)
    {
        const json body = {{"ID", std::to_string(id)}};
        const auto payload = body;
        for (;;) {
            const auto sent = clock::now();
            if (sent >= valid) {
                ended(id, session_state::in_doubt);
                co_return;
            }
            {
                std::lock_guard lock{mutex_};
                ++keepalives_;
            }
            // Bounded by the validity: past it the session is in doubt, answer or not.
            auto r = co_await distlock::backend::within(client::call(client_, "lease/keepalive", payload, nullptr), valid);
            if (!r) {
                ended(id, session_state::in_doubt);
                co_return;
            }
            auto& got = *r;
            // An answer this client cannot read says nothing about the lease: like a
            // refused keepalive, sent again while the validity lasts.
            const auto ttl = got ? decode_keepalive(got.value(), nullptr) : result<std::int64_t>{got.error()};
            if (ttl) {
                if (ttl.value() <= 0) { // answered without a TTL: the lease is gone
                    ended(id, session_state::lost);
                    co_return;
                }
                announce(id, sent + std::chrono::seconds{ttl.value()} - cfg_.drift);
                co_return;
            }
            if (ttl.error() == errc::not_found) {
                ended(id, session_state::lost);
                co_return;
            }
            if (is_stopped())
                co_return;
            // Refused or unanswered: again, sooner, while the validity lasts.
            tick_.expires_at(next_keepalive(clock::now(), valid, every / 4));
            (void)co_await tick_.async_wait(distlock::backend::as_tuple_awaitable<Unused>());
            if (is_stopped())
                co_return;
        }
    }

    void announce(std::int64_t id, time_point valid)
    {
        std::vector<std::weak_ptr<session_listener>> told;
        {
            std::lock_guard lock{mutex_};
            if (lease_ != id)
                return;
            valid_until_ = std::max(valid_until_, valid);
            sweep_expired();
            swept_size_ = bound_.size();
            told.reserve(bound_.size());
            for (const auto& [key, b] : bound_)
                told.push_back(b.listener);
            valid = valid_until_;
        }
        for (auto& w : told)
            if (auto l = w.lock())
                l->session_changed(session_state::held, valid);
        start_check(id);
    }

    // On the strand, after an answered keepalive: checks the bound keys beside the
    // keepalive loop, unless a check still runs or nothing is bound.
    void start_check(std::int64_t id)
    {
        if (checking_)
            return;
        {
            std::lock_guard lock{mutex_};
            if (stopped_ || bound_.empty())
                return;
        }
        checking_ = true;
        // A signal per check: stop() reaches the one that runs, and each lives as long
        // as its check.
        auto stop = std::make_shared<asio::cancellation_signal>();
        check_stop_ = stop;
        asio::co_spawn(strand_, check_bound(this->shared_from_this(), id, stop),
                       asio::bind_cancellation_slot(stop->slot(), asio::detached));
    }

    // `stop` is held only to outlive the check its slot is bound to.
    static awaitable<void> check_bound(std::shared_ptr<basic_session> self, std::int64_t id,
                                       std::shared_ptr<asio::cancellation_signal> stop)
    {
        struct done_when_left {
            basic_session& s;
            ~done_when_left() { s.checking_ = false; }
        } done{*self};
        (void)stop;
        const auto until = distlock::backend::after(self->check_timeout_);
        std::vector<bound_key> keys;
        {
            std::lock_guard lock{self->mutex_};
            if (self->stopped_ || self->lease_ != id)
                co_return;
            keys.reserve(self->bound_.size());
            for (const auto& [key, b] : self->bound_)
                keys.push_back(bound_key{key, b.entry});
        }
        std::vector<bound_key> gone;
        for (std::size_t from = 0; from < keys.size(); from += max_txn_ops) {
            if (self->is_stopped() || co_await distlock::backend::cancelled())
                co_return;
            const auto part = std::span<const bound_key>{keys}.subspan(from, std::min(max_txn_ops, keys.size() - from));
            {
                std::lock_guard lock{self->mutex_};
                ++self->checks_;
            }
            auto got = co_await distlock::backend::within(
                client::call(self->client_, "kv/txn", presence_request(part), nullptr), until);
            if (!got || !*got)
                break; // unanswered or refused: the next keepalive's check asks again
            const auto present = decode_presence(got->value(), part, nullptr);
            if (!present)
                break;
            for (std::size_t i = 0; i < part.size(); ++i)
                if (!present.value()[i])
                    gone.push_back(part[i]);
        }
        self->lost_keys(id, gone);
    }

    // The keys `gone` no longer exist as they were bound: their leases are lost.
    void lost_keys(std::int64_t id, const std::vector<bound_key>& gone)
    {
        std::vector<std::weak_ptr<session_listener>> told;
        {
            std::lock_guard lock{mutex_};
            if (lease_ != id)
                return;
            for (const auto& g : gone) {
                const auto it = bound_.find(g.key);
                if (it != bound_.end() && it->second.entry == g.entry) {
                    told.push_back(std::move(it->second.listener));
                    bound_.erase(it);
                }
            }
        }
        for (auto& w : told)
            if (auto l = w.lock())
                l->session_changed(session_state::lost, time_point{});
    }

    // Under the mutex.
    void sweep_expired()
    {
        std::erase_if(bound_, [](const auto& b) { return b.second.listener.expired(); });
    }

    // Under the mutex: every bound listener, the bindings gone.
    std::vector<std::weak_ptr<session_listener>> take_bound()
    {
        std::vector<std::weak_ptr<session_listener>> out;
        out.reserve(bound_.size());
        for (auto& [key, b] : bound_)
            out.push_back(std::move(b.listener));
        bound_.clear();
        swept_size_ = 0;
        return out;
    }

    asio::any_io_executor strand_; // distlock::backend::make_strand()
    std::shared_ptr<client> client_;
    const config& cfg_; // the client's, which this session keeps alive
    timer tick_;        // on the strand
    bool keeping_ = false;  // on the strand
    bool granting_ = false; // on the strand
    bool checking_ = false; // on the strand
    std::shared_ptr<asio::cancellation_signal> check_stop_; // on the strand: the last check's
    duration check_timeout_;
    std::vector<timer*> grant_waiters_;

    mutable std::mutex mutex_;
    bool stopped_ = false;
    std::int64_t lease_ = 0;
    duration ttl_{};
    time_point valid_until_{};
    std::size_t keepalives_ = 0;
    std::size_t checks_ = 0; // presence checks' txns sent
    struct granted_entry {
        std::int64_t lease = 0;
        std::string key;
    };
    std::map<std::int64_t, granted_entry> granted_; // by entry (create revision)
    struct made_key {
        std::int64_t entry = 0;       // its create revision
        std::int64_t predecessor = 0; // the key it waits for (its create revision)
        bool predecessor_held = false;
        bool promoted = false;
    };
    std::map<std::string, made_key> made_;
    std::map<std::string, std::string> armed_; // holder key -> its lock-delay mark's value
    struct binding {
        std::int64_t entry = 0; // the key's create revision when bound: the lease's fence
        std::weak_ptr<session_listener> listener;
    };
    std::map<std::string, binding> bound_; // by key: one lease per lock() call's key
    std::size_t swept_size_ = 0;            // bound_.size() after the last sweep of expired ones
};

/// See basic_session.
using session = basic_session<>;

} // namespace distlock::etcd::detail
