// distlock/postgres/detail/session.hpp: a connection of its own for one advisory
// lock, and what it tells the lease about itself.
//
// Design note. A session-level advisory lock lives exactly as long as the server
// session (the connection) that took it: no TTL, nothing to renew. So each lock()
// call in advisory mode takes a connection for itself (reused after a clean release),
// and the lease is bound to it:
//  - the connection's reader always waits on the socket, so a terminated backend
//    (pg_terminate_backend: FATAL 57P01, then the close), a crash or a restart is
//    seen within milliseconds and the lease hears `lost`;
//  - while the lock is held the connection is pinged every ping_interval; every
//    answered ping moves the lease's validity to (ping sent + in_doubt_after); a ping
//    unanswered for in_doubt_after makes the session `in_doubt` (the server may
//    have ended the session; TCP keepalive and tcp_user_timeout end the connection
//    later) and drops the connection, so the server frees the lock once it notices.
// The ping loop and the loss handler own the session (shared), and end with it.
//
// A session holds one grant, in its mode: a mutex's or a writer's exclusive lock, a
// reader's shared lock of the same key, or a semaphore's permit (the exclusive lock
// of its slot's key and the shared lock of its count's key, detail/sql.hpp). The
// session keeps what it holds (`holding`), so that its release lets go of the right
// locks; the sessions holding a grant are known process-wide (an owner token names one
// grant), so that a writer's downgrade finds its session through any store object.
#pragma once

#include <distlock/claim.hpp>
#include <distlock/clock.hpp>
#include <distlock/backend/deferred.hpp>
#include <distlock/diagnostics.hpp>
#include <distlock/postgres/detail/connection.hpp>
#include <distlock/postgres/detail/keys.hpp>
#include <distlock/postgres/detail/sql.hpp>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/post.hpp>

#include <distlock/postgres/detail/answers.hpp>

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace distlock::postgres::detail {

/// The parameters that name an advisory key in the statements (sql_texts): the
/// resource, then the namespace or the key's integers (bigint, int4pair), for an id
/// the caller checked before any I/O (an id that names none has none: its statement
/// fails in the server).
inline std::vector<param> advisory_key_params(const std::string& resource, std::optional<std::int32_t> ns,
                                              advisory_key_function f)
{
    std::vector<param> p{param::bytes(resource)};
    if (ns)
        p.push_back(param::number(*ns));
    if (const auto numbers = advisory_key_numbers(f, resource))
        for (const auto n : *numbers)
            p.push_back(param::number(n));
    return p;
}

// A template only to be compiled where it is used (backend/store_shell.hpp says why).
template <class Unused = void>
class basic_session : public std::enable_shared_from_this<basic_session<Unused>> {
public:
    struct settings {
        std::shared_ptr<const sql_texts> sql;
        std::optional<std::int32_t> advisory_namespace;
        advisory_key_function key_function = advisory_key_function::sha256;
        duration ping_interval;
        duration in_doubt_after;
        duration statement_timeout;
    };

    /// A grant the session holds: whose, on which resource, in which mode; for a
    /// permit (`permits` N > 0), its slot. Whether its release must take something
    /// out first: the election record a candidate's grant or a proclaim wrote
    /// (`recorded`), a lock-delay mark (`marked`).
    struct holding {
        std::string resource;
        owner_token owner;
        lock_mode mode = lock_mode::exclusive;
        std::uint32_t permits = 0;
        std::uint32_t slot = 0;
        bool recorded = false;
        bool marked = false;
    };

    basic_session(std::shared_ptr<connection> c, settings s) : conn_{std::move(c)}, settings_{std::move(s)} {}

    /// Hooks the connection's loss to the session; once, after construction.
    void start()
    {
        std::weak_ptr<basic_session> weak = this->shared_from_this();
        conn_->on_down([weak](std::error_code ec, const std::string&) {
            if (auto self = weak.lock())
                self->down(ec);
        });
    }

    const std::shared_ptr<connection>& conn() const noexcept { return conn_; }

    /// pg_try_advisory_lock (`mode` exclusive) or pg_try_advisory_lock_shared (a
    /// reader), and the grant decided in the same statement (sql_texts::advisory_try):
    /// one round trip. Granted with the next fence; held when another session holds
    /// the lock (a writer, for a reader: one that holds it or waits for it); delayed
    /// while a tombstone lasts (the lock was given back). An election's `candidate`
    /// (exclusive) is recorded with the grant, under the record's row lock
    /// (advisory_row, advisory_try_recording).
    awaitable<result<answer>> try_lock(std::string resource, const owner_token& owner, lock_mode mode,
                                       diagnostics* diag, const std::optional<std::string>& candidate = std::nullopt)
    {
        std::vector<statement> s;
        if (candidate && mode == lock_mode::exclusive) {
            s.push_back({"dl_adv_row", settings_.sql->advisory_row, {param::bytes(resource)}});
            s.push_back({"dl_adv_try_rec", settings_.sql->advisory_try_recording,
                         key_params(resource, &owner, &*candidate)});
        } else if (mode == lock_mode::exclusive) {
            s.push_back({"dl_adv_try", settings_.sql->advisory_try, key_params(resource)});
        } else {
            s.push_back({"dl_adv_try_sh", settings_.sql->advisory_try_shared, key_params(resource)});
        }
        return decided(conn_->exec(std::move(s), diag));
    }

    /// A permit of a semaphore of `permits`: the lowest free slot and the next fence,
    /// under the lease row's lock, in one round trip (sql_texts::advisory_permit).
    /// Held when every slot is taken; errc::invalid_argument (the words in `diag`)
    /// while holders took another count.
    awaitable<result<answer>> try_permit(std::string resource, std::uint32_t permits, diagnostics* diag)
    {
        if (settings_.sql->advisory_permit.empty()) // refused before I/O by the claim (detail/keys.hpp)
            return backend::failed<answer>(errc::invalid_argument);
        std::vector<statement> s;
        s.push_back({"dl_take_row", settings_.sql->take_row, {param::bytes(resource)}});
        auto p = key_params(resource);
        p.push_back(param::number(permits));
        s.push_back({"dl_adv_permit", settings_.sql->advisory_permit, std::move(p)});
        return permitted(conn_->exec(std::move(s), diag), permits, diag);
    }

    /// pg_advisory_lock (`mode` exclusive) or pg_advisory_lock_shared, waiting in the
    /// server until `until` (lock_timeout), and the grant decided as try_lock()'s in
    /// the same statement (a candidate's in the statements after it): granted,
    /// delayed (the lock given back), or held when the wait timed out. Only after a
    /// try of this session answered held (advisory.hpp says why).
    awaitable<result<answer>> wait_lock(std::string resource, const owner_token& owner, time_point until,
                                        diagnostics* diag, lock_mode mode = lock_mode::exclusive,
                                        const std::optional<std::string>& candidate = std::nullopt)
    {
        const auto left = std::chrono::ceil<std::chrono::milliseconds>(until - clock::now());
        const auto wait = std::max<std::int64_t>(left.count(), 1);
        std::vector<statement> s;
        s.push_back({"", settings_.sql->wait_limits,
                     {param::text(std::to_string(wait) + "ms"), param::text(std::to_string(wait + 2000) + "ms")}});
        const bool exclusive = mode == lock_mode::exclusive;
        if (candidate && exclusive) {
            s.push_back({"dl_adv_wait_plain", settings_.sql->advisory_wait_plain, key_params(resource)});
            s.push_back({"dl_adv_unlimited", settings_.sql->wait_unlimited, {}});
            s.push_back({"dl_adv_row", settings_.sql->advisory_row, {param::bytes(resource)}});
            s.push_back({"dl_adv_granted_rec", settings_.sql->advisory_granted_recording,
                         key_params(resource, &owner, &*candidate)});
        } else {
            s.push_back({exclusive ? "dl_adv_wait" : "dl_adv_wait_sh",
                         exclusive ? settings_.sql->advisory_wait : settings_.sql->advisory_wait_shared,
                         key_params(resource)});
        }
        return waited(conn_->exec(std::move(s), diag, std::chrono::milliseconds{wait} + settings_.statement_timeout));
    }

    /// Marks the exclusive grant this session holds (its fence) for a lock-delay of
    /// `delay_ms`: one update of the lease row, whose fence is that grant's while the
    /// session holds the lock. errc::not_owner when the fence is another. From the
    /// moment it is sent, the release takes the mark out first.
    awaitable<result<void>> arm(std::string resource, fence_token fence, std::int64_t delay_ms, diagnostics* diag)
    {
        bool was_marked = false;
        note([&](holding& h) { was_marked = std::exchange(h.marked, true); });
        std::vector<statement> s;
        s.push_back({"dl_adv_arm", settings_.sql->advisory_arm,
                     {param::bytes(resource), param::number(static_cast<std::int64_t>(fence)),
                      param::number(delay_ms)}});
        return armed(this->shared_from_this(), recorded(conn_->exec(std::move(s), diag)), was_marked);
    }

    /// Keeps `value` with the exclusive grant this session holds (its fence): the
    /// record rewritten while the lease row's fence is that grant's; else
    /// errc::not_owner. From the moment it is sent, the release takes the record's
    /// pid out first.
    awaitable<result<void>> proclaim(std::string resource, const owner_token& owner, fence_token fence,
                                     std::string value, diagnostics* diag)
    {
        note([](holding& h) { h.recorded = true; });
        std::vector<statement> s;
        s.push_back({"dl_adv_proclaim", settings_.sql->advisory_proclaim,
                     {param::bytes(resource), param::number(static_cast<std::int64_t>(fence)),
                      param::bytes(std::move(value)), param::text(owner.to_hex())}});
        return recorded(conn_->exec(std::move(s), diag));
    }

    /// What the session holds from now on (a lock() call's grant, as its lease).
    void record(holding h)
    {
        {
            std::lock_guard lock{mutex_};
            holding_ = std::move(h);
        }
        auto& r = holders();
        std::lock_guard lock{r.mutex};
        std::erase_if(r.sessions, [&](const std::weak_ptr<basic_session>& w) {
            const auto s = w.lock();
            return !s || s.get() == this;
        });
        r.sessions.push_back(this->weak_from_this());
    }

    /// The live session of this process that holds `owner`'s grant on `resource` in
    /// `mode`, if any.
    static std::shared_ptr<basic_session> holding_grant(std::string_view resource, const owner_token& owner,
                                                        lock_mode mode)
    {
        auto& r = holders();
        std::lock_guard lock{r.mutex};
        for (const auto& w : r.sessions)
            if (auto s = w.lock(); s && !s->ended() && s->holds(resource, owner, mode))
                return s;
        return nullptr;
    }

    /// True when the session holds `owner`'s grant on `resource` in `mode`.
    bool holds(std::string_view resource, const owner_token& owner, lock_mode mode) const
    {
        std::lock_guard lock{mutex_};
        return holding_ && holding_->resource == resource && holding_->owner == owner && holding_->mode == mode;
    }

    /// Lets go of what the session holds, by its mode: true when it held it all.
    awaitable<result<bool>> unlock()
    {
        std::optional<holding> h;
        {
            std::lock_guard lock{mutex_};
            h = std::exchange(holding_, std::nullopt);
        }
        forget();
        if (!h)
            return backend::failed<bool>(errc::not_owner);
        std::vector<statement> s;
        auto p = key_params(h->resource);
        if (h->permits > 0) {
            p.push_back(param::number(h->slot));
            p.push_back(param::number(h->permits));
            s.push_back({"dl_adv_unlk_pm", settings_.sql->advisory_unlock_permit, std::move(p)});
        } else if (h->mode == lock_mode::shared) {
            s.push_back({"dl_adv_unlk_sh", settings_.sql->advisory_unlock_shared, std::move(p)});
        } else if (h->marked) {
            s.push_back({"dl_adv_unlk_mk", settings_.sql->advisory_unlock_marked, std::move(p)});
        } else if (h->recorded) {
            s.push_back({"dl_adv_unlk_rec", settings_.sql->advisory_unlock_recorded, std::move(p)});
        } else {
            s.push_back({"dl_adv_unlock", settings_.sql->advisory_unlock, std::move(p)});
        }
        return unlocked(conn_->exec(std::move(s)));
    }

    /// The exclusive holder holds on as a reader: the shared lock of the same key
    /// taken, then the exclusive one let go, in one statement of this session (no
    /// other session comes between, a writer waiting in the server included). The
    /// fence stays. An answer that leaves what the session holds in doubt ends the
    /// session (its lease is lost).
    awaitable<result<void>> downgrade(diagnostics* diag)
    {
        std::string resource;
        bool marked = false;
        {
            std::lock_guard lock{mutex_};
            if (!holding_ || holding_->mode != lock_mode::exclusive || ended_)
                return backend::failed<void>(errc::not_owner);
            resource = holding_->resource;
            marked = holding_->marked;
        }
        std::vector<statement> s;
        if (marked)
            s.push_back({"dl_adv_down_mk", settings_.sql->advisory_downgrade_marked, key_params(resource)});
        else
            s.push_back({"dl_adv_down", settings_.sql->advisory_downgrade, key_params(resource)});
        return downgraded(this->shared_from_this(), conn_->exec(std::move(s), diag));
    }

    /// Binds the lease: from now on it hears of the session's state. Nullopt when
    /// the session is already gone.
    std::optional<time_point> bind(std::weak_ptr<session_listener> l)
    {
        {
            std::lock_guard lock{mutex_};
            if (ended_)
                return std::nullopt;
            listener_ = std::move(l);
            bound_ = true;
            valid_until_ = clock::now() + settings_.in_doubt_after;
        }
        asio::co_spawn(conn_->strand(), pinger(this->shared_from_this()), asio::detached);
        return valid_until_;
    }

    /// Stops the pings; the lease no longer hears of the session (after a release).
    void unbind()
    {
        std::lock_guard lock{mutex_};
        bound_ = false;
        listener_.reset();
        if (ping_timer_)
            asio::post(conn_->strand(), [t = ping_timer_] { t->cancel(); });
    }

    /// Closes the connection: the server frees whatever the session held.
    void discard()
    {
        unbind();
        forget();
        conn_->close();
    }

    bool ended() const
    {
        std::lock_guard lock{mutex_};
        return ended_;
    }

private:
    struct registry {
        std::mutex mutex;
        std::vector<std::weak_ptr<basic_session>> sessions;
    };
    static registry& holders()
    {
        static registry r;
        return r;
    }

    // No longer among the sessions holding a grant.
    void forget()
    {
        auto& r = holders();
        std::lock_guard lock{r.mutex};
        std::erase_if(r.sessions, [&](const std::weak_ptr<basic_session>& w) {
            const auto s = w.lock();
            return !s || s.get() == this;
        });
    }

    // The key's parameters; a candidate's owner and value after them.
    std::vector<param> key_params(const std::string& resource, const owner_token* owner = nullptr,
                                  const std::string* value = nullptr) const
    {
        auto p = advisory_key_params(resource, settings_.advisory_namespace, settings_.key_function);
        if (owner)
            p.push_back(param::text(owner->to_hex()));
        if (value)
            p.push_back(param::bytes(*value));
        return p;
    }

    // Notes on the grant the session holds what its release must take out.
    template <class F>
    void note(F f)
    {
        std::lock_guard lock{mutex_};
        if (holding_)
            f(*holding_);
    }

    static awaitable<result<answer>> decided(awaitable<result<replies>> pending)
    {
        auto got = co_await std::move(pending);
        if (!got)
            co_return got.error();
        co_return answers::acquired(got.value().back(), clock::now(), true);
    }

    static awaitable<result<answer>> waited(awaitable<result<replies>> pending)
    {
        auto got = co_await std::move(pending);
        if (!got) {
            if (got.error() == sqlstate("55P03")) // lock_timeout: still held by another session
                co_return answer::held();
            co_return got.error();
        }
        auto a = answers::acquired(got.value().back(), clock::now(), true);
        // The lock was taken: the answer is a grant, or a tombstone that gave it back.
        if (a && !a.value().is_granted() && !a.value().is_delayed())
            co_return make_error_code(errc::protocol_error);
        co_return a;
    }

    static awaitable<result<void>> recorded(awaitable<result<replies>> pending)
    {
        auto got = co_await std::move(pending);
        if (!got)
            co_return got.error();
        co_return answers::owned(got.value().front());
    }

    // A mark the server refused (an error it sent, or no row: another fence) was not
    // written: the release need not take it out, unless an earlier one was.
    static awaitable<result<void>> armed(std::shared_ptr<basic_session> self, awaitable<result<void>> pending,
                                         bool was_marked)
    {
        auto r = co_await std::move(pending);
        if (!r && (r.error().category() == category() || r.error() == errc::not_owner))
            self->note([&](holding& h) { h.marked = was_marked; });
        co_return r;
    }

    static awaitable<result<answer>> permitted(awaitable<result<replies>> pending, std::uint32_t permits,
                                               diagnostics* diag)
    {
        auto got = co_await std::move(pending);
        if (!got)
            co_return got.error();
        std::optional<std::int64_t> held_with;
        auto out = answers::shared_acquired(got.value().back(), clock::now(), permits, &held_with);
        if (held_with && diag)
            diag->set_client_message(answers::count_refusal(*held_with, permits, false));
        co_return out;
    }

    static awaitable<result<void>> downgraded(std::shared_ptr<basic_session> self, awaitable<result<replies>> pending)
    {
        auto got = co_await std::move(pending);
        if (!got) {
            // An error the server sent comes from the wait for the shared lock (a
            // timeout, a deadlock), before it was taken: the exclusive lock is held as
            // before. Without the server's answer no one can tell what is held.
            if (got.error().category() != category())
                self->conn_->close();
            co_return got.error();
        }
        const auto v = got.value().front().integer(0, 0);
        if (!v || *v != 1) {
            self->conn_->close(); // it holds the shared lock, and not the exclusive one it was known to hold
            co_return make_error_code(errc::protocol_error);
        }
        std::lock_guard lock{self->mutex_};
        if (self->holding_) {
            // The statement took the exclusive grant's record and mark out with it.
            self->holding_->mode = lock_mode::shared;
            self->holding_->recorded = false;
            self->holding_->marked = false;
        }
        co_return success();
    }

    static awaitable<result<bool>> unlocked(awaitable<result<replies>> pending)
    {
        auto got = co_await std::move(pending);
        if (!got)
            co_return got.error();
        const auto v = got.value().front().integer(0, 0);
        if (!v)
            co_return make_error_code(errc::protocol_error);
        co_return *v == 1;
    }

    // The connection went: every lock of the session is gone (or, after unanswered
    // pings, cannot be vouched for).
    void down(std::error_code)
    {
        std::shared_ptr<session_listener> l;
        session_state state = session_state::lost;
        {
            std::lock_guard lock{mutex_};
            if (ended_)
                return;
            ended_ = true;
            if (bound_)
                l = listener_.lock();
            if (pinging_since_ && clock::now() - *pinging_since_ >= settings_.in_doubt_after)
                state = session_state::in_doubt;
        }
        if (l)
            l->session_changed(state, time_point{});
    }

    static awaitable<void> pinger(std::shared_ptr<basic_session> self)
    {
        co_await asio::this_coro::throw_if_cancelled(false);
        auto t = std::make_shared<timer>(self->conn_->strand());
        {
            std::lock_guard lock{self->mutex_};
            self->ping_timer_ = t;
        }
        for (;;) {
            // After ping_interval, but while the validity the last answer gave lasts
            // (a late answer leaves less of it than one interval).
            {
                std::lock_guard lock{self->mutex_};
                t->expires_at(next_keepalive(clock::now(), self->valid_until_, self->settings_.ping_interval));
            }
            (void)co_await t->async_wait(distlock::backend::as_tuple_awaitable<Unused>());
            {
                std::lock_guard lock{self->mutex_};
                if (!self->bound_ || self->ended_)
                    break;
                self->pinging_since_ = clock::now();
            }
            const auto sent = clock::now();
            std::vector<statement> ping;
            ping.push_back({"", "SELECT 1", {}});
            auto answered = co_await self->conn_->exec(std::move(ping), nullptr, self->settings_.in_doubt_after);
            std::shared_ptr<session_listener> l;
            {
                std::lock_guard lock{self->mutex_};
                self->pinging_since_.reset();
                if (!answered || !self->bound_ || self->ended_)
                    break; // a failed ping failed the connection: down() reported it
                self->valid_until_ = sent + self->settings_.in_doubt_after;
                l = self->listener_.lock();
            }
            if (l)
                l->session_changed(session_state::held, sent + self->settings_.in_doubt_after);
        }
        std::lock_guard lock{self->mutex_};
        self->ping_timer_.reset();
    }

    std::shared_ptr<connection> conn_;
    settings settings_;
    mutable std::mutex mutex_;
    std::weak_ptr<session_listener> listener_;
    std::optional<holding> holding_;
    std::shared_ptr<timer> ping_timer_;
    std::optional<time_point> pinging_since_;
    time_point valid_until_{};
    bool bound_ = false;
    bool ended_ = false;
};

/// See basic_session.
using session = basic_session<>;

} // namespace distlock::postgres::detail
