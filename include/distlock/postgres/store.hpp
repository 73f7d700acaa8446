// distlock/postgres/store.hpp: PostgreSQL as a distlock store: a lease table decided
// by the server's clock, and session-bound advisory locks (postgres/advisory.hpp).
//
// Design note. The lease table has one row per resource:
//   resource bytea PRIMARY KEY   owner text (NULL when free)
//   expires_at timestamptz       fence bigint
// Acquiring is one statement (detail/sql.hpp): an upsert that takes the row only if
// it is absent, released or expired by the server's clock, increments the fence and
// returns it, and otherwise returns the holder's time left. Extending and releasing
// are owner-checked updates; releasing keeps the row and its fence (deleting it would
// start the counter again) and sends a NOTIFY in the same transaction, on one channel
// with the resource (hex) as payload. No transaction stays open while a lock is held.
// Listing is one SELECT of a range of the primary key (ids are bytes: no LIKE);
// revoking is release's statement checked on the fence instead of the owner.
//
// Shared grants (a shared mutex, a semaphore) keep their holders in a second table,
// <table>_holders (detail/sql.hpp), one row per reader or permit (owner, slot, the
// count it was taken with, expiry) and per waiting writer's intent; the lease row
// keeps the exclusive holder and the one fence counter of every grant. Each operation
// is one request: a statement that locks the lease row, then the statement that
// decides, whose snapshot is taken under that lock (one transaction, one round trip).
//
// Connections: a small pool of pipelined connections for the lease-table statements
// (each request on the least busy one), one that LISTENs for releases (opened by the
// first waiter), and in advisory mode one per held lock. All of them are libpq's
// (detail/connection.hpp), so TLS, passwords, SCRAM and connection strings are too.
#pragma once

#include <distlock/backend.hpp>
#include <distlock/backend/strand.hpp>
#include <distlock/backend/wakeup.hpp>
#include <distlock/policy/acquire.hpp>
#include <distlock/postgres/config.hpp>
#include <distlock/postgres/detail/answers.hpp>
#include <distlock/postgres/detail/connection.hpp>
#include <distlock/postgres/detail/session.hpp>
#include <distlock/postgres/detail/sql.hpp>
#include <distlock/postgres/error.hpp>

#include <asio/any_io_executor.hpp>
#include <asio/strand.hpp>

#include <algorithm>
#include <atomic>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace distlock::postgres {

/// A statement parameter for execute() and fenced_execute(): text, bytes, or NULL.
using param = detail::param;
/// One statement's result rows.
using rows = detail::rows;

/// Statement parameters from values, callable inside a co_await expression (where g++
/// 12 refuses a braced list): execute(sql, params(param::text("a"), param::number(7))).
template <class... P>
    requires(std::is_convertible_v<P&&, param> && ...)
std::vector<param> params(P&&... p)
{
    std::vector<param> out;
    out.reserve(sizeof...(p));
    (out.emplace_back(std::forward<P>(p)), ...);
    return out;
}

namespace detail {

// Who waits for which resource's release; fed by the listening connection.
class watch_registry {
public:
    void add(const std::string& key, const std::shared_ptr<distlock::backend::wakeup>& w)
    {
        std::lock_guard lock{mutex_};
        waiters_.emplace(key, w);
    }
    void remove(const std::string& key, const std::shared_ptr<distlock::backend::wakeup>& w)
    {
        std::lock_guard lock{mutex_};
        auto [b, e] = waiters_.equal_range(key);
        for (auto it = b; it != e; ++it)
            if (it->second == w) {
                waiters_.erase(it);
                return;
            }
    }
    void notify(std::string_view key)
    {
        std::lock_guard lock{mutex_};
        auto [b, e] = waiters_.equal_range(std::string{key});
        for (auto it = b; it != e; ++it)
            it->second->signal();
    }
    // The listening connection went: releases may have been missed, so every waiter
    // tries again (always safe).
    void wake_all()
    {
        std::lock_guard lock{mutex_};
        downs_.fetch_add(1, std::memory_order_acq_rel);
        for (auto& [k, w] : waiters_)
            w->signal();
    }
    std::size_t size() const
    {
        std::lock_guard lock{mutex_};
        return waiters_.size();
    }
    std::uint64_t downs() const noexcept { return downs_.load(std::memory_order_acquire); }

private:
    mutable std::mutex mutex_;
    std::multimap<std::string, std::shared_ptr<distlock::backend::wakeup>> waiters_;
    std::atomic<std::uint64_t> downs_{0};
};

// Sessions handed out in advisory mode, so that the store can end them when it goes,
// and the idle ones kept for reuse.
struct session_pool {
    std::mutex mutex;
    std::vector<std::weak_ptr<session>> out;
    std::vector<std::shared_ptr<session>> idle;
};

} // namespace detail

/// A PostgreSQL database used as a lock store. Models put_if_absent_store (answering),
/// owner_checked_store, batch_put_if_absent_store, batch_release_store,
/// release_notifying_store, inspectable_store, enumerable_store, revocable_store,
/// electing_store, lock_delay_store (the lease table, the default policy acquire::setnx) and shared_lease_store (its
/// shared grants, acquire::shared_setnx), and the advisory sessions of
/// postgres::advisory (advisory.hpp).
///
/// \par Thread safety
/// Safe to use from several threads: each connection's state lives on its strand.
///
/// \par Object lifetimes
/// Every operation owns the connection it uses once started, so the store may be
/// destroyed while one is in flight (it completes with an error). Leases and lock()
/// calls reach the store through its lifetime. The destructor closes every
/// connection, advisory sessions included (their leases are reported lost and the
/// server frees their locks). close() finishes the releases still pending, then
/// closes the connections, so io.run() returns.
// Used through backend::store_shell (see there why stores are templates).
template <class Unused = void>
class basic_store : public backend::store_base<config> {
    using base = backend::store_base<config>;

public:
    /// Throws std::system_error (errc::invalid_argument) for invalid settings;
    /// connecting happens on first use.
    basic_store(executor_type ex, config cfg);

    duration operation_timeout() const noexcept
    {
        return saturating_add(saturating_add(cfg_.connect_timeout, cfg_.statement_timeout), std::chrono::seconds{1});
    }

    /// Closes the connections; the next request connects again (advisory sessions
    /// end: their leases are reported lost).
    void disconnect() { close_connections(); }

    // -- Lease table (distlock/store.hpp) ------------------------------------------

    awaitable<result<answer>> put_if_absent_answer(std::string_view resource, const owner_token& owner, duration ttl,
                                                   diagnostics* diag = nullptr)
    {
        if (auto ec = check(resource, ttl))
            return backend::failed<answer>(ec);
        return acquired(prepared(), ensure(), statement("dl_acquire", sql_->acquire, resource, owner, ttl), diag);
    }

    awaitable<result<fence_token>> put_if_absent(std::string_view resource, const owner_token& owner, duration ttl,
                                                 diagnostics* diag = nullptr)
    {
        return as_fence(put_if_absent_answer(resource, owner, ttl, diag));
    }

    awaitable<result<void>> extend(std::string_view resource, const owner_token& owner, duration ttl,
                                   diagnostics* diag = nullptr)
    {
        if (auto ec = check(resource, ttl))
            return backend::failed<void>(ec);
        return owned(prepared(), ensure(), statement("dl_extend", sql_->extend, resource, owner, ttl),
                           diag);
    }

    /// Clears the owner and expiry if `owner` holds the lock (the row and its fence
    /// stay), and announces the release to waiters.
    awaitable<result<void>> release(std::string_view resource, const owner_token& owner, diagnostics* diag = nullptr)
    {
        if (auto ec = check(resource))
            return backend::failed<void>(ec);
        detail::statement s{"dl_release", sql_->release,
                            params_of(param::bytes(resource), param::text(owner.to_hex()), param::text(cfg_.channel))};
        return owned(prepared(), ensure(), std::move(s), diag);
    }

    /// Every resource at once, all or nothing, in one statement (one round trip); one
    /// fence per resource, in the given order. Resources must be distinct.
    awaitable<result<std::vector<fence_token>>> put_if_absent_all(const std::vector<std::string>& resources,
                                                                  const owner_token& owner, duration ttl,
                                                                  diagnostics* diag = nullptr)
    {
        if (ttl <= duration::zero() || ttl > max_wait)
            return backend::failed<std::vector<fence_token>>(distlock::errc::invalid_argument);
        std::vector<std::string> keys;
        std::string array;
        if (auto ec = bytea_array(resources, keys, array))
            return backend::failed<std::vector<fence_token>>(ec);
        detail::statement s{"dl_acquire_all", sql_->acquire_all,
                            {param::text(std::move(array)), param::text(owner.to_hex()),
                             param::number(millis(ttl))}};
        return acquired_all(prepared(), ensure(), std::move(s), std::move(keys), diag);
    }

    /// Releases `owner`'s locks on several resources in one statement (one round
    /// trip), announcing each release: per resource, in the given order, true when
    /// released, false when `owner` did not hold it. Resources must be distinct. Rows
    /// are locked in sorted order, as put_if_absent_all() takes them.
    awaitable<result<std::vector<bool>>> release_all(const std::vector<std::string>& resources,
                                                     const owner_token& owner, diagnostics* diag = nullptr)
    {
        std::vector<std::string> keys;
        std::string array;
        if (auto ec = bytea_array(resources, keys, array))
            return backend::failed<std::vector<bool>>(ec);
        detail::statement s{"dl_release_all", sql_->release_all,
                            {param::text(std::move(array)), param::text(owner.to_hex()), param::text(cfg_.channel)}};
        return released_all(prepared(), ensure(), std::move(s), std::move(keys), diag);
    }

    /// Reads the lock without taking it.
    awaitable<result<lock_info>> read(std::string_view resource, diagnostics* diag = nullptr)
    {
        if (auto ec = check(resource))
            return backend::failed<lock_info>(ec);
        detail::statement s{"dl_read", sql_->read, {param::bytes(resource)}};
        return inspected(prepared(), ensure(), std::move(s), diag);
    }

    /// The live locks whose resource id begins with `prefix`, compared byte by byte,
    /// in id order, with the time each has left: one statement, every row judged by one
    /// reading of the server's clock (enumerable_store).
    awaitable<result<std::vector<lock_listing>>> list(std::string_view prefix, diagnostics* diag = nullptr)
    {
        const auto end = detail::prefix_end(prefix);
        detail::statement s{"dl_list", sql_->list,
                            params_of(param::bytes(prefix), end ? param::bytes(*end) : param::none())};
        return enumerated(prepared(), ensure(), std::move(s), diag);
    }

    /// Frees the lock on `resource` if it is still the live grant with `fence`, and
    /// announces it as a release (waiters are woken); else errc::not_owner, the row
    /// untouched (revocable_store). One statement: the check and the update are one
    /// step on the locked row. The row keeps its fence; the holder's next extension
    /// finds no owner of its own and its lease is lost.
    awaitable<result<void>> revoke(std::string_view resource, fence_token fence, diagnostics* diag = nullptr)
    {
        if (auto ec = check(resource))
            return backend::failed<void>(ec);
        // A fence is a bigint above 0: no grant carries any other.
        if (fence == 0 || fence > static_cast<fence_token>(std::numeric_limits<std::int64_t>::max()))
            return backend::failed<void>(distlock::errc::not_owner);
        detail::statement s{"dl_revoke", sql_->revoke,
                            params_of(param::bytes(resource), param::number(static_cast<std::int64_t>(fence)),
                                      param::text(cfg_.channel))};
        return owned(prepared(), ensure(), std::move(s), diag);
    }

    // -- Lock-delays (lock_delay_store) ------------------------------------------------

    /// Marks the live grant of `owner` with fence `fence` on `resource` for a lock-delay
    /// of `delay` (its milliseconds, rounded up, in the row): one update, checked on the
    /// owner, the fence and the expiry by the server's clock; else errc::not_owner. If
    /// the grant then runs out (or is revoked) without a release, every acquisition of
    /// the resource is refused until its expiry plus the delay. An advisory grant
    /// (pg::advisory) is marked by the session that holds it, in the resource's record
    /// beside the lease table: its end without a release is then found by the next
    /// session that takes the lock (docs/postgres.md, Lock-delay).
    awaitable<result<void>> arm_delay(std::string_view resource, const owner_token& owner, fence_token fence,
                                      duration delay, diagnostics* diag = nullptr)
    {
        if (auto ec = check(resource))
            return backend::failed<void>(ec);
        if (delay <= duration::zero() || delay > max_wait)
            return backend::failed<void>(distlock::errc::invalid_argument);
        if (fence == 0 || fence > static_cast<fence_token>(std::numeric_limits<std::int64_t>::max()))
            return backend::failed<void>(distlock::errc::not_owner);
        if (auto held = detail::session::holding_grant(resource, owner, lock_mode::exclusive))
            return held->arm(std::string{resource}, fence, millis(delay), diag);
        detail::statement s{"dl_arm_delay", sql_->arm_delay,
                            params_of(param::bytes(resource), param::text(owner.to_hex()),
                                      param::number(static_cast<std::int64_t>(fence)), param::number(millis(delay)))};
        return owned(prepared(), ensure(), std::move(s), diag);
    }

    // -- Elections (electing_store) ----------------------------------------------------

    /// Keeps `value` (any bytes, at most max_leader_value_size) in the resource's row
    /// with the fence `epoch` of `owner`'s grant, if that grant is still the live one:
    /// one update, checked on the owner, the fence and the expiry by the server's
    /// clock; else errc::not_owner. An advisory grant is refused with
    /// errc::invalid_argument before any I/O: this store's leader() reads the lease
    /// table, so elections on advisory locks are pg::advisory_store's
    /// (docs/postgres.md, Elections).
    awaitable<result<void>> proclaim(std::string_view resource, const owner_token& owner, fence_token epoch,
                                     std::string_view value, diagnostics* diag = nullptr)
    {
        if (auto ec = check(resource))
            return backend::failed<void>(ec);
        if (value.size() > max_leader_value_size)
            return backend::failed<void>(distlock::errc::invalid_argument);
        if (detail::session::holding_grant(resource, owner, lock_mode::exclusive) ||
            detail::session::holding_grant(resource, owner, lock_mode::shared)) {
            if (diag)
                diag->set_client_message("an advisory grant's election value is kept by pg::advisory_store, whose "
                                         "leader() reads it; this store's leader() reads the lease table");
            return backend::failed<void>(distlock::errc::invalid_argument);
        }
        // A fence is a bigint above 0: no grant carries any other.
        if (epoch == 0 || epoch > static_cast<fence_token>(std::numeric_limits<std::int64_t>::max()))
            return backend::failed<void>(distlock::errc::not_owner);
        detail::statement s{"dl_proclaim", sql_->proclaim,
                            params_of(param::bytes(resource), param::text(owner.to_hex()),
                                      param::number(static_cast<std::int64_t>(epoch)), param::bytes(value))};
        return owned(prepared(), ensure(), std::move(s), diag);
    }

    /// The live holder of `resource`'s lock (fence, owner's first 8 hex digits, time
    /// left) and the value its grant proclaimed (nullopt until it has); a default
    /// leader_info when the lock is free. One SELECT of the row.
    awaitable<result<leader_info>> leader(std::string_view resource, diagnostics* diag = nullptr)
    {
        if (auto ec = check(resource))
            return backend::failed<leader_info>(ec);
        detail::statement s{"dl_leader", sql_->leader, {param::bytes(resource)}};
        return led(prepared(), ensure(), std::move(s), diag);
    }

    // -- Shared grants (shared_lease_store) -------------------------------------------

    /// A reader (`permits` 0), unless a writer holds the resource or waits for it; a
    /// permit of a semaphore of `permits`, while fewer hold, as the lowest free slot.
    /// Refused with errc::invalid_argument while live holders took another count.
    awaitable<result<answer>> put_shared(std::string_view resource, const owner_token& owner, duration ttl,
                                         std::uint32_t permits, diagnostics* diag = nullptr)
    {
        if (auto ec = check(resource, ttl))
            return backend::failed<answer>(ec);
        if (permits > max_permits)
            return backend::failed<answer>(distlock::errc::invalid_argument);
        detail::statement decide{"dl_put_shared", sql_->put_shared,
                                 params_of(param::bytes(resource), param::text(owner.to_hex()),
                                           param::number(millis(ttl)), param::number(permits))};
        return shared_granted(prepared(), ensure(), under_row("dl_take_row", sql_->take_row, resource, std::move(decide)), permits,
                              false, diag);
    }

    /// A writer's grant when nobody holds the resource and no other waiter's intent is
    /// live; else `waiter` takes the resource's writer intent (or renews its own) for
    /// `ttl`, which keeps new readers out.
    awaitable<result<answer>> put_exclusive(std::string_view resource, const owner_token& waiter,
                                            const owner_token& owner, duration ttl, diagnostics* diag = nullptr)
    {
        if (auto ec = check(resource, ttl))
            return backend::failed<answer>(ec);
        detail::statement decide{"dl_put_excl", sql_->put_exclusive,
                                 params_of(param::bytes(resource), param::text(waiter.to_hex()),
                                           param::text(owner.to_hex()), param::number(millis(ttl)))};
        return shared_granted(prepared(), ensure(), under_row("dl_take_row", sql_->take_row, resource, std::move(decide)), 0, true,
                              diag);
    }

    /// Extends a live grant of either mode held by `owner`.
    awaitable<result<void>> extend_shared(std::string_view resource, const owner_token& owner, duration ttl,
                                          diagnostics* diag = nullptr)
    {
        if (auto ec = check(resource, ttl))
            return backend::failed<void>(ec);
        return owned_last(prepared(), ensure(),
                          under_row("dl_find_row", sql_->find_row, resource,
                                    statement("dl_extend_sh", sql_->extend_shared, resource, owner, ttl)),
                          diag);
    }

    /// Releases a live grant of either mode held by `owner`, and announces it.
    awaitable<result<void>> release_shared(std::string_view resource, const owner_token& owner,
                                           diagnostics* diag = nullptr)
    {
        if (auto ec = check(resource))
            return backend::failed<void>(ec);
        detail::statement s{"dl_release_sh", sql_->release_shared,
                            params_of(param::bytes(resource), param::text(owner.to_hex()), param::text(cfg_.channel))};
        return owned(prepared(), ensure(), std::move(s), diag);
    }

    /// Gives up `waiter`'s intent, announced as a release: the readers it kept out may
    /// come in. Done also when it had none.
    awaitable<result<void>> withdraw(std::string_view resource, const owner_token& waiter, diagnostics* diag = nullptr)
    {
        if (auto ec = check(resource))
            return backend::failed<void>(ec);
        detail::statement s{"dl_withdraw", sql_->withdraw,
                            params_of(param::bytes(resource), param::text(waiter.to_hex()), param::text(cfg_.channel))};
        return done(prepared(), ensure(), std::move(s), diag);
    }

    /// The writer `owner` holds on as a reader, in one transaction under the lease
    /// row's lock (no writer between), with the expiry it had; announced, so that
    /// readers come in beside it. A writer's advisory lock is downgraded in the
    /// session that holds it (basic_session::downgrade).
    awaitable<result<void>> downgrade(std::string_view resource, const owner_token& owner, diagnostics* diag = nullptr)
    {
        if (auto ec = check(resource))
            return backend::failed<void>(ec);
        if (auto s = detail::session::holding_grant(resource, owner, lock_mode::exclusive))
            return s->downgrade(diag);
        detail::statement decide{"dl_downgrade", sql_->downgrade,
                                 params_of(param::bytes(resource), param::text(owner.to_hex()),
                                           param::text(cfg_.channel))};
        return owned_last(prepared(), ensure(), under_row("dl_find_row", sql_->find_row, resource, std::move(decide)), diag);
    }

    /// Listens for releases of one resource, until destroyed.
    class watcher {
    public:
        watcher(watcher&&) noexcept = default;
        watcher& operator=(watcher&&) = delete;
        ~watcher()
        {
            if (registry_)
                registry_->remove(key_, wakeup_);
        }

        /// True when a release was announced, false at `until`. Listening again first
        /// when the listening connection went meanwhile (a plain timer while it is down).
        awaitable<bool> wait(time_point until)
        {
            if (registry_->downs() != listening_since_ || !listening_) {
                listening_since_ = registry_->downs();
                listening_ = !co_await listener_->connect();
                if (!listening_) {
                    timer t{co_await asio::this_coro::executor, until};
                    (void)co_await t.async_wait(distlock::backend::as_tuple_awaitable<Unused>());
                    co_return false;
                }
            }
            co_return co_await wakeup_->wait(until);
        }

    private:
        friend class basic_store;
        watcher(std::shared_ptr<detail::watch_registry> r, std::shared_ptr<detail::connection> l, std::string key,
                std::shared_ptr<distlock::backend::wakeup> w)
            : registry_{std::move(r)}, listener_{std::move(l)}, key_{std::move(key)}, wakeup_{std::move(w)}
        {}
        std::shared_ptr<detail::watch_registry> registry_;
        std::shared_ptr<detail::connection> listener_;
        std::string key_;
        std::shared_ptr<distlock::backend::wakeup> wakeup_;
        std::uint64_t listening_since_ = 0;
        bool listening_ = false;
    };

    /// Starts listening for the resource's releases; completes once the server
    /// confirmed LISTEN (a release after that wakes the watcher).
    awaitable<watcher> watch(std::string_view resource)
    {
        return watch_on(watchers_, listener_, detail::hex(resource));
    }

    /// Waiters registered now (they must not accumulate).
    std::size_t watchers() const { return watchers_->size(); }

    // -- Fenced writes --------------------------------------------------------------

    /// A condition for the WHERE clause of a statement on the user's own data: true
    /// only while the token in parameter `token_param` is still the fence of the
    /// resource in parameter `resource_param` (no later acquisition), checked in the
    /// same statement and transaction, with the lease row locked until it ends:
    ///   "UPDATE wallet SET balance = $1 WHERE id = $2 AND " + store.fence_condition(3, 4)
    std::string fence_condition(int resource_param, int token_param) const
    {
        return sql_->fence_condition(resource_param, token_param);
    }

    /// Runs `sql` (with $1..$N for `params`) with the lease's resource and token
    /// appended as $N+1 and $N+2, for a statement that uses fence_condition(N+1,
    /// N+2); the rows it changed, or errc::stale_fence when it changed none (a newer
    /// holder exists: the write was refused by the database itself). Arguments in the
    /// order of every fenced write of distlock: where (the lock's resource, whose fence
    /// the statement checks), the token, what.
    awaitable<result<std::uint64_t>> fenced_execute(std::string_view resource, fence_token token, std::string sql,
                                                    std::vector<param> params, diagnostics* diag = nullptr)
    {
        if (auto ec = check(resource))
            return backend::failed<std::uint64_t>(ec);
        if (token == 0 || !statement_text_valid(sql) || params.size() > 65533)
            return backend::failed<std::uint64_t>(distlock::errc::invalid_argument);
        params.push_back(param::bytes(resource));
        params.push_back(param::number(static_cast<std::int64_t>(token)));
        return fenced(prepared(), ensure(), detail::statement{"", std::move(sql), std::move(params)}, diag);
    }

    /// One statement with parameters on a pool connection (never SQL built from
    /// values): its rows.
    awaitable<result<rows>> execute(std::string sql, std::vector<param> params = {}, diagnostics* diag = nullptr)
    {
        if (!statement_text_valid(sql) || params.size() > 65535)
            return backend::failed<rows>(distlock::errc::invalid_argument);
        return executed(prepared(), detail::statement{"", std::move(sql), std::move(params)}, diag);
    }

    /// Creates the lease table and its holders table where they do not exist (the
    /// store does so before its first statement unless config::create_table is false).
    awaitable<result<void>> create_table(diagnostics* diag = nullptr)
    {
        return make_table(prepared(), schema_, sql_->creates(), diag);
    }

    // -- Advisory sessions (advisory.hpp) -----------------------------------------

    /// A connection of its own for one advisory lock (an idle one when there is).
    awaitable<result<std::shared_ptr<detail::session>>> open_session(diagnostics* diag = nullptr)
    {
        {
            std::lock_guard lock{sessions_->mutex};
            while (!sessions_->idle.empty()) {
                auto s = std::move(sessions_->idle.back());
                sessions_->idle.pop_back();
                if (!s->ended())
                    return ready_session(std::move(s));
            }
        }
        auto conn = make_connection(setup(true));
        auto s = std::make_shared<detail::session>(
            conn, detail::session::settings{sql_, cfg_.advisory_namespace, cfg_.advisory_key, cfg_.ping_interval,
                                            cfg_.in_doubt_after, cfg_.statement_timeout});
        s->start();
        {
            std::lock_guard lock{sessions_->mutex};
            std::erase_if(sessions_->out, [](const auto& w) { return w.expired(); });
            sessions_->out.push_back(s);
        }
        return connected_session(ensure(), std::move(s), diag);
    }

    /// A session whose lock was released cleanly, kept for the next lock (at most
    /// pool_size idle ones); others are closed.
    void recycle(std::shared_ptr<detail::session> s)
    {
        s->unbind();
        std::lock_guard lock{sessions_->mutex};
        if (!s->ended() && sessions_->idle.size() < cfg_.pool_size)
            sessions_->idle.push_back(std::move(s));
        else
            s->discard();
    }

    /// The server process ids of the open advisory sessions (for tests and
    /// diagnostics: pg_terminate_backend of one ends its lock).
    std::vector<int> session_backends() const
    {
        std::vector<int> pids;
        std::lock_guard lock{sessions_->mutex};
        for (const auto& w : sessions_->out)
            if (auto s = w.lock(); s && !s->ended())
                pids.push_back(s->conn()->backend_pid());
        return pids;
    }


private:
    std::vector<detail::statement> setup(bool advisory) const
    {
        const auto ms = [](duration d) {
            return std::to_string(std::chrono::ceil<std::chrono::milliseconds>(d).count()) + "ms";
        };
        std::vector<detail::statement> s;
        if (advisory)
            s.push_back({"",
                         "SELECT set_config('statement_timeout', $1, false), set_config('bytea_output', 'hex', false), "
                         "set_config('client_connection_check_interval', $2, false)",
                         {param::text(ms(cfg_.statement_timeout)), param::text(ms(cfg_.client_check_interval))}});
        else
            s.push_back({"", "SELECT set_config('statement_timeout', $1, false), set_config('bytea_output', 'hex', false)",
                         {param::text(ms(cfg_.statement_timeout))}});
        return s;
    }

    std::shared_ptr<detail::connection> make_connection(std::vector<detail::statement> setup_statements) const
    {
        const auto secs = [](duration d) {
            return std::to_string(std::max<long long>(1, std::chrono::ceil<std::chrono::seconds>(d).count()));
        };
        detail::connection::options o;
        // distlock's defaults first: the user's conninfo (expanded from "dbname", last)
        // overrides any of them.
        o.params = {{"connect_timeout", secs(cfg_.connect_timeout)},
                    {"keepalives", "1"},
                    {"keepalives_idle", secs(cfg_.keepalive_idle)},
                    {"keepalives_interval", secs(cfg_.keepalive_interval)},
                    {"keepalives_count", std::to_string(cfg_.keepalive_count)},
                    {"tcp_user_timeout",
                     std::to_string(std::chrono::ceil<std::chrono::milliseconds>(cfg_.tcp_user_timeout).count())},
                    {"application_name", "distlock"},
                    {"dbname", cfg_.conninfo}};
        o.setup = std::move(setup_statements);
        o.connect_timeout = cfg_.connect_timeout;
        o.request_timeout = saturating_add(cfg_.statement_timeout, std::chrono::seconds{1});
        o.peer = peer_;
        return std::make_shared<detail::connection>(distlock::backend::make_strand(ex_), std::move(o));
    }

    // "PostgreSQL at host:port" from the conninfo, for diagnostics.
    static std::string describe_peer(const std::string& conninfo)
    {
        std::string host, port;
        char* error = nullptr;
        if (PQconninfoOption* opts = PQconninfoParse(conninfo.c_str(), &error)) {
            for (auto* o = opts; o->keyword; ++o) {
                if (!o->val)
                    continue;
                const std::string_view k = o->keyword;
                if ((k == "host" && host.empty()) || k == "hostaddr")
                    host = o->val;
                else if (k == "port")
                    port = o->val;
            }
            PQconninfoFree(opts);
        }
        if (error)
            PQfreemem(error);
        return "PostgreSQL at " + (host.empty() ? std::string{"localhost"} : host) + ":" +
               (port.empty() ? std::string{"5432"} : port);
    }

    void close_connections()
    {
        for (auto& c : pool_)
            c->close();
        listener_->close();
        std::vector<std::shared_ptr<detail::session>> live;
        {
            std::lock_guard lock{sessions_->mutex};
            for (auto& w : sessions_->out)
                if (auto s = w.lock())
                    live.push_back(std::move(s));
            sessions_->out.clear();
            sessions_->idle.clear();
        }
        for (auto& s : live)
            s->discard();
    }

    std::shared_ptr<detail::connection> prepared() const
    {
        auto best = pool_.front();
        for (const auto& c : pool_)
            if (c->load() < best->load())
                best = c;
        return best;
    }

    // The table is created before the first statement, once per store.
    struct schema_state {
        std::atomic<bool> ready{false};
        bool create = true;
        std::vector<std::string> sql;
    };
    std::shared_ptr<schema_state> ensure() const { return schema_; }

    static awaitable<std::error_code> ensured(const std::shared_ptr<detail::connection>& c,
                                              const std::shared_ptr<schema_state>& schema, diagnostics* diag)
    {
        if (schema->ready.load(std::memory_order_acquire) || !schema->create)
            co_return std::error_code{};
        auto made = co_await make_table(c, schema, schema->sql, diag);
        co_return made ? std::error_code{} : made.error();
    }

    static awaitable<result<void>> make_table(std::shared_ptr<detail::connection> c,
                                              std::shared_ptr<schema_state> schema, std::vector<std::string> sql,
                                              diagnostics* diag)
    {
        // Two stores creating the table at once: IF NOT EXISTS is checked before the
        // catalog rows are written, so the later one can fail on the other's relation
        // or row type (42P07, 42710, or 23505 on the catalog's index). Run again, the
        // check then sees the committed table (or creates it if the other rolled back).
        // The tables are made in one request: one transaction.
        result<detail::replies> made = std::error_code{};
        for (int attempt = 0; attempt < 3; ++attempt) {
            std::vector<detail::statement> s;
            for (const auto& table : sql)
                s.push_back({"", table, {}});
            made = co_await c->exec(std::move(s), diag);
            if (made || !lost_creation_race(made.error()))
                break;
        }
        if (!made)
            co_return made.error();
        if (diag)
            diag->clear();
        schema->ready.store(true, std::memory_order_release);
        co_return success();
    }

    static bool lost_creation_race(std::error_code ec) noexcept
    {
        return ec == sqlstate("42P07") || ec == sqlstate("42710") || ec == sqlstate("23505");
    }

    detail::statement statement(const char* name, const std::string& sql, std::string_view resource,
                                const owner_token& owner, duration ttl) const
    {
        return {name, sql, params_of(param::bytes(resource), param::text(owner.to_hex()), param::number(millis(ttl)))};
    }

    // A statement's parameters, moved in (an initializer list would copy each one).
    template <class... Params>
    static std::vector<param> params_of(Params... p)
    {
        std::vector<param> out;
        out.reserve(sizeof...(Params));
        (out.push_back(std::move(p)), ...);
        return out;
    }

    static std::int64_t millis(duration d) { return std::chrono::ceil<std::chrono::milliseconds>(d).count(); }

    // The settings were checked by the constructor. A statement's text goes to libpq
    // as a C string: a NUL byte would cut it short without a word.
    static bool statement_text_valid(const std::string& sql) noexcept
    {
        return !sql.empty() && sql.find('\0') == std::string::npos;
    }

    static std::error_code check(std::string_view resource) noexcept { return validate_resource(resource); }
    static std::error_code check(std::string_view resource, duration ttl) noexcept
    {
        if (ttl <= duration::zero() || ttl > max_wait)
            return distlock::errc::invalid_argument;
        return validate_resource(resource);
    }

    // Not a coroutine: once the table is there (nearly always), the request's own
    // frame is the only one between the caller and the connection.
    static awaitable<result<detail::replies>> run(std::shared_ptr<detail::connection> c,
                                                  std::shared_ptr<schema_state> schema, detail::statement s,
                                                  diagnostics* diag)
    {
        std::vector<detail::statement> one;
        one.push_back(std::move(s));
        return run(std::move(c), std::move(schema), std::move(one), diag);
    }

    // Several statements as one request: one transaction, one round trip.
    static awaitable<result<detail::replies>> run(std::shared_ptr<detail::connection> c,
                                                  std::shared_ptr<schema_state> schema,
                                                  std::vector<detail::statement> statements, diagnostics* diag)
    {
        if (schema->ready.load(std::memory_order_acquire) || !schema->create)
            return c->exec(std::move(statements), diag);
        return ensure_then_run(std::move(c), std::move(schema), std::move(statements), diag);
    }

    // A deciding statement after the one that locks the resource's lease row
    // (take_row or find_row), so that it decides on what every earlier holder of the
    // lock left.
    static std::vector<detail::statement> under_row(const char* lock_name, const std::string& lock_sql,
                                                    std::string_view resource, detail::statement decide)
    {
        std::vector<detail::statement> out;
        out.reserve(2);
        out.push_back({lock_name, lock_sql, params_of(param::bytes(resource))});
        out.push_back(std::move(decide));
        return out;
    }

    static awaitable<result<detail::replies>> ensure_then_run(std::shared_ptr<detail::connection> c,
                                                              std::shared_ptr<schema_state> schema,
                                                              std::vector<detail::statement> one, diagnostics* diag)
    {
        if (auto ec = co_await ensured(c, schema, diag))
            co_return ec;
        co_return co_await c->exec(std::move(one), diag);
    }

    static awaitable<result<answer>> acquired(std::shared_ptr<detail::connection> c,
                                              std::shared_ptr<schema_state> schema, detail::statement s,
                                              diagnostics* diag)
    {
        auto got = co_await run(std::move(c), std::move(schema), std::move(s), diag);
        if (!got)
            co_return got.error();
        co_return detail::answers::acquired(got.value().front(), clock::now(), true);
    }

    static awaitable<result<fence_token>> as_fence(awaitable<result<answer>> pending)
    {
        auto got = co_await std::move(pending);
        if (!got)
            co_return got.error();
        co_return detail::answers::granted_fence(got.value());
    }

    // An owner-checked statement: its one row (updated, or selected from the rows it
    // updated) says the owner held the lock.
    static awaitable<result<void>> owned(std::shared_ptr<detail::connection> c, std::shared_ptr<schema_state> schema,
                                         detail::statement s, diagnostics* diag)
    {
        auto got = co_await run(std::move(c), std::move(schema), std::move(s), diag);
        if (!got)
            co_return got.error();
        co_return detail::answers::owned(got.value().front());
    }

    // An owner-checked request whose last statement's one row says the owner held it.
    static awaitable<result<void>> owned_last(std::shared_ptr<detail::connection> c,
                                              std::shared_ptr<schema_state> schema,
                                              std::vector<detail::statement> s, diagnostics* diag)
    {
        auto got = co_await run(std::move(c), std::move(schema), std::move(s), diag);
        if (!got)
            co_return got.error();
        co_return detail::answers::owned(got.value().back());
    }

    // A statement whose answer is only that it ran.
    static awaitable<result<void>> done(std::shared_ptr<detail::connection> c, std::shared_ptr<schema_state> schema,
                                        detail::statement s, diagnostics* diag)
    {
        auto got = co_await run(std::move(c), std::move(schema), std::move(s), diag);
        if (!got)
            co_return got.error();
        co_return success();
    }

    // A shared grant's answer (detail::answers::shared_acquired), from the deciding
    // statement, the request's last; a refusal for another count says which counts
    // disagree.
    static awaitable<result<answer>> shared_granted(std::shared_ptr<detail::connection> c,
                                                    std::shared_ptr<schema_state> schema,
                                                    std::vector<detail::statement> s, std::uint32_t permits,
                                                    bool writer, diagnostics* diag)
    {
        auto got = co_await run(std::move(c), std::move(schema), std::move(s), diag);
        if (!got)
            co_return got.error();
        std::optional<std::int64_t> held_with;
        auto out = detail::answers::shared_acquired(got.value().back(), clock::now(), permits, &held_with, true);
        if (held_with && diag)
            diag->set_client_message(detail::answers::count_refusal(*held_with, permits, writer));
        co_return out;
    }

    // A set of resources as a bytea[] literal of hex escapes, and their hex keys (how
    // the statements name rows in their answers): a non-empty set of at most 1,024
    // valid, distinct ids, else errc::invalid_argument.
    static std::error_code bytea_array(const std::vector<std::string>& resources, std::vector<std::string>& keys,
                                       std::string& array)
    {
        if (resources.empty() || resources.size() > 1024)
            return distlock::errc::invalid_argument;
        array = "{";
        for (const auto& r : resources) {
            if (auto ec = validate_resource(r))
                return ec;
            keys.push_back(detail::hex(r));
            if (array.size() > 1)
                array += ',';
            array += "\"\\\\x" + keys.back() + "\"";
        }
        array += '}';
        auto sorted = keys;
        std::sort(sorted.begin(), sorted.end());
        if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end())
            return distlock::errc::invalid_argument;
        return {};
    }

    static awaitable<result<std::vector<bool>>> released_all(std::shared_ptr<detail::connection> c,
                                                            std::shared_ptr<schema_state> schema,
                                                            detail::statement s, std::vector<std::string> keys,
                                                            diagnostics* diag)
    {
        auto got = co_await run(std::move(c), std::move(schema), std::move(s), diag);
        if (!got)
            co_return got.error();
        co_return detail::answers::released_all(got.value().front(), keys);
    }

    static awaitable<result<std::vector<fence_token>>> acquired_all(std::shared_ptr<detail::connection> c,
                                                                    std::shared_ptr<schema_state> schema,
                                                                    detail::statement s,
                                                                    std::vector<std::string> keys,
                                                                    diagnostics* diag)
    {
        auto got = co_await run(std::move(c), std::move(schema), std::move(s), diag);
        if (!got) {
            if (got.error() == sqlstate("22012")) { // some were held: none were taken
                if (diag)
                    diag->clear();
                co_return make_error_code(distlock::errc::contended);
            }
            if (got.error() == sqlstate("2201E")) { // some were taken, one is in its lock-delay: none were
                if (diag)
                    diag->clear();
                co_return make_error_code(distlock::errc::lock_delayed);
            }
            co_return got.error();
        }
        co_return detail::answers::acquired_all(got.value().front(), keys);
    }

    static awaitable<result<lock_info>> inspected(std::shared_ptr<detail::connection> c,
                                                  std::shared_ptr<schema_state> schema, detail::statement s,
                                                  diagnostics* diag)
    {
        auto got = co_await run(std::move(c), std::move(schema), std::move(s), diag);
        if (!got)
            co_return got.error();
        co_return detail::answers::inspected(got.value().front());
    }

    static awaitable<result<leader_info>> led(std::shared_ptr<detail::connection> c,
                                              std::shared_ptr<schema_state> schema, detail::statement s,
                                              diagnostics* diag)
    {
        auto got = co_await run(std::move(c), std::move(schema), std::move(s), diag);
        if (!got)
            co_return got.error();
        std::string problem;
        auto info = detail::answers::leader_read(got.value().front(), &problem);
        if (!info && diag)
            diag->set_client_message(problem);
        co_return info;
    }

    static awaitable<result<leader_info>> advisory_led(std::shared_ptr<detail::connection> c,
                                                       std::shared_ptr<schema_state> schema,
                                                       std::vector<detail::statement> s, diagnostics* diag)
    {
        auto got = co_await run(std::move(c), std::move(schema), std::move(s), diag);
        if (!got)
            co_return got.error();
        std::string problem;
        auto info = detail::answers::advisory_leader_read(got.value().back(), &problem);
        if (!info && diag)
            diag->set_client_message(problem);
        co_return info;
    }

    static awaitable<result<std::vector<lock_listing>>> enumerated(std::shared_ptr<detail::connection> c,
                                                                   std::shared_ptr<schema_state> schema,
                                                                   detail::statement s, diagnostics* diag)
    {
        auto got = co_await run(std::move(c), std::move(schema), std::move(s), diag);
        if (!got)
            co_return got.error();
        auto listing = detail::answers::listed(got.value().front());
        if (!listing && diag)
            diag->set_client_message("PostgreSQL list answer: not one row of (hex id, owner, fence, time left) per "
                                     "live lock in id order");
        co_return listing;
    }

    static awaitable<result<std::uint64_t>> fenced(std::shared_ptr<detail::connection> c,
                                                   std::shared_ptr<schema_state> schema, detail::statement s,
                                                   diagnostics* diag)
    {
        auto got = co_await run(std::move(c), std::move(schema), std::move(s), diag);
        if (!got)
            co_return got.error();
        co_return detail::answers::fenced(got.value().front());
    }

    static awaitable<result<rows>> executed(std::shared_ptr<detail::connection> c, detail::statement s,
                                            diagnostics* diag)
    {
        std::vector<detail::statement> one;
        one.push_back(std::move(s));
        auto got = co_await c->exec(std::move(one), diag);
        if (!got)
            co_return got.error();
        co_return std::move(got.value().front());
    }

    static awaitable<watcher> watch_on(std::shared_ptr<detail::watch_registry> registry,
                                       std::shared_ptr<detail::connection> listener, std::string key)
    {
        auto w = std::make_shared<distlock::backend::wakeup>(co_await asio::this_coro::executor);
        registry->add(key, w); // before LISTEN is confirmed: nothing after it is missed
        watcher out{registry, listener, std::move(key), std::move(w)};
        out.listening_since_ = registry->downs();
        out.listening_ = !co_await listener->connect();
        co_return out;
    }

    static awaitable<result<std::shared_ptr<detail::session>>> ready_session(std::shared_ptr<detail::session> s)
    {
        co_return s;
    }

    static awaitable<result<std::shared_ptr<detail::session>>> connected_session(
        std::shared_ptr<schema_state> schema, std::shared_ptr<detail::session> s, diagnostics* diag)
    {
        if (auto ec = co_await s->conn()->connect(diag)) {
            s->discard();
            co_return ec;
        }
        if (auto ec = co_await ensured(s->conn(), schema, diag)) {
            s->discard();
            co_return ec;
        }
        co_return s;
    }

    std::shared_ptr<const detail::sql_texts> sql_;
    std::string peer_;
    std::vector<std::shared_ptr<detail::connection>> pool_;
    std::shared_ptr<detail::connection> listener_;
    std::shared_ptr<detail::watch_registry> watchers_;
    std::shared_ptr<detail::session_pool> sessions_;
    std::shared_ptr<schema_state> schema_ = std::make_shared<schema_state>();

protected:
    ~basic_store() = default;

    /// Who leads on `resource`'s advisory lock (pg::advisory_store::leader()): its
    /// record's row locked, then pg_locks and the record read in one statement
    /// (sql_texts::advisory_leader). An id that names no key under the key function is
    /// refused before any I/O.
    awaitable<result<leader_info>> advisory_leader(std::string_view resource, diagnostics* diag)
    {
        if (auto ec = check(resource))
            return backend::failed<leader_info>(ec);
        if (const auto problem = detail::advisory_key_problem(cfg_.advisory_key, resource, 0); !problem.empty()) {
            if (diag)
                diag->set_client_message(problem);
            return backend::failed<leader_info>(distlock::errc::invalid_argument);
        }
        std::vector<detail::statement> s;
        s.push_back({"dl_adv_leader_lock", sql_->advisory_leader_lock, params_of(param::bytes(resource))});
        s.push_back({"dl_adv_leader", sql_->advisory_leader,
                     detail::advisory_key_params(std::string{resource}, cfg_.advisory_namespace, cfg_.advisory_key)});
        return advisory_led(prepared(), ensure(), std::move(s), diag);
    }

    void stop() noexcept;
};

template <class Unused>
basic_store<Unused>::basic_store(executor_type ex, config cfg)
    : base{std::move(ex), std::move(cfg), "distlock::postgres::store"}
{
    sql_ = std::make_shared<const detail::sql_texts>(cfg_.table, cfg_.channel, cfg_.advisory_namespace.has_value(),
                                                     cfg_.advisory_key);
    peer_ = describe_peer(cfg_.conninfo);
    schema_->sql = sql_->creates();
    schema_->create = cfg_.create_table;
    for (std::size_t i = 0; i < cfg_.pool_size; ++i)
        pool_.push_back(make_connection(setup(false)));
    auto listen_setup = setup(false);
    listen_setup.push_back({"", "LISTEN \"" + cfg_.channel + "\"", {}});
    listener_ = make_connection(std::move(listen_setup));
    watchers_ = std::make_shared<detail::watch_registry>();
    listener_->on_notify([w = std::weak_ptr<detail::watch_registry>{watchers_},
                          channel = cfg_.channel](std::string_view ch, std::string_view payload) {
        if (ch != channel)
            return;
        if (auto r = w.lock())
            r->notify(payload);
    });
    listener_->on_down([w = std::weak_ptr<detail::watch_registry>{watchers_}](std::error_code, const std::string&) {
        if (auto r = w.lock())
            r->wake_all();
    });
    sessions_ = std::make_shared<detail::session_pool>();
}

template <class Unused>
void basic_store<Unused>::stop() noexcept
{
    close_connections();
}

/// The PostgreSQL lease-table store. See basic_store for its documentation.
using store = backend::store_shell<basic_store<>>;

static_assert(detail::answers::table<detail::rows>);
static_assert(batch_put_if_absent_store<store>);
static_assert(batch_release_store<store>);
static_assert(enumerable_store<store>);
static_assert(revocable_store<store>);
static_assert(shared_lease_store<store>);
static_assert(electing_store<store>);
static_assert(lock_delay_store<store>);

} // namespace distlock::postgres
