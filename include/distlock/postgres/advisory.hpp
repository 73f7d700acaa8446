// distlock/postgres/advisory.hpp: session-level advisory locks, bound to the
// connection that took them.
//
// One lock() call takes a connection of its own (detail/session.hpp) and keeps it for
// all its attempts: pg_try_advisory_lock, with the fence taken from the lease table in
// the same statement when the lock is granted. Waiting does not poll: the wait is
// pg_advisory_lock in the server, bounded by lock_timeout (the retry policy's delay
// or the deadline), so the waiter is granted the lock the moment its holder lets go.
// A wait that is cut off (cancellation, the deadline's race) cannot be taken back
// from the server: its connection is closed instead, and the server ends the wait
// within client_connection_check_interval, freeing anything it took. The lease is
// bound to the session: no TTL, no renewal; it ends when the connection does.
//
// Shared grants (postgres::advisory with a mode and a count): a shared mutex's reader
// takes the shared lock of the mutex's key (pg_try_advisory_lock_shared, waiting with
// pg_advisory_lock_shared), its writer the exclusive one. The server's lock manager
// grants a request only when it conflicts neither with a holder nor with an earlier
// waiting request, so a writer waiting in the server keeps new readers out, and the
// waiters are served in order. A wait in the server lasts at least turn_recheck
// (waits_for_turn()): the grant comes the moment it is possible, and a writer that
// left the server's queue between two waits would let readers in. A semaphore's
// permit is the exclusive lock of one of N keys (detail/sql.hpp); it cannot be waited
// for in the server (any of N), so its waits are the retry policy's.
//
// A grant marked for a lock-delay carries its mark in the lease row, beside the fence
// (sql.hpp, advisory_arm): the statement that takes the lock reads that row's latest
// version as it bumps the fence, so a mark still there (its holder ended without a
// release, with its session) starts the tombstone, and the lock is given back. An
// election's grant is recorded beside the lease table (the backend pid of the session
// holding it, its fence, owner and value), under the record's row lock, in the
// transaction that takes the lock; leader() locks the row and reads pg_locks after: a
// holder and its record are seen together or not at all. Plain grants and releases
// write nothing but the fence.
//
// The key is the store's advisory_key function of the resource id (config.hpp): its
// own hash by default, or the key a foreign client of the same database takes, so
// that the two exclude each other. An id that names no key there, or a semaphore's
// permit under a foreign key function, is refused before any I/O.
#pragma once

#include <distlock/claim.hpp>
#include <distlock/backend/lifetime.hpp>
#include <distlock/diagnostics.hpp>
#include <distlock/policy/acquire.hpp>
#include <distlock/policy/shared.hpp>
#include <distlock/postgres/detail/keys.hpp>
#include <distlock/postgres/detail/session.hpp>
#include <distlock/postgres/store.hpp>

#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace distlock::postgres {

namespace detail {

/// A lease on an advisory lock: the session that holds it.
template <class S>
class advisory_hold {
public:
    advisory_hold(store_ref<S> store, std::shared_ptr<session> s, std::string resource, owner_token owner)
        : store_{std::move(store)}, session_{std::move(s)}, resource_{std::move(resource)}, owner_{owner}
    {}

    /// Nothing to extend: the lock lasts as long as the session, which reports itself.
    awaitable<result<void>> extend() { return kept(session_); }
    awaitable<result<void>> release() { return unlock(store_, session_); }
    const owner_token& owner() const noexcept { return owner_; }
    void spawn(awaitable<void> work) const { store_.spawn(std::move(work)); }
    bool listen(std::weak_ptr<distlock::backend::closing_listener> l) const { return store_.listen(std::move(l)); }
    std::optional<time_point> bind(std::weak_ptr<session_listener> l) { return session_->bind(std::move(l)); }

private:
    static awaitable<result<void>> kept(std::shared_ptr<session> s)
    {
        if (s->ended())
            co_return make_error_code(errc::session_lost);
        co_return success();
    }

    // pg_advisory_unlock (of what the session holds, by its mode); a clean release
    // returns the connection for reuse. When the answer is not a clean "unlocked",
    // the connection is closed, which frees the lock in the server all the same.
    static awaitable<result<void>> unlock(store_ref<S> store, std::shared_ptr<session> s)
    {
        s->unbind();
        if (s->ended())
            co_return make_error_code(errc::not_owner);
        auto r = co_await s->unlock();
        if (r && r.value()) {
            if (!store.with([&](S& st) {
                    st.recycle(s);
                    return true;
                }))
                s->discard();
            co_return success();
        }
        s->discard();
        if (r) // this session did not hold it
            co_return make_error_code(errc::not_owner);
        // The connection failed under the release: the server frees the lock with the
        // session, but the lease was not intact until now.
        co_return make_error_code(errc::session_lost);
    }

    store_ref<S> store_;
    std::shared_ptr<session> session_;
    std::string resource_;
    owner_token owner_;
};

/// One lock() call on an advisory lock.
template <class S>
class advisory_claim {
public:
    static constexpr bool fair = false;

    advisory_claim(store_ref<S> store, claim_request r, lock_mode mode = lock_mode::exclusive,
                   std::uint32_t permits = 0)
        : store_{std::move(store)}, resource_{std::move(r.resource)}, diag_{r.diag}, owner_{owner_token::generate()},
          mode_{mode}, permits_{permits}, candidate_{std::move(r.candidate)}
    {
        if (mode_ != lock_mode::exclusive || permits_ > 0)
            candidate_.reset(); // only an exclusive grant leads
    }

    awaitable<result<answer>> attempt()
    {
        if (!session_) {
            // An id that names no key under the store's advisory_key, or a permit
            // there, is refused before any I/O (detail/keys.hpp).
            const auto problem = store_.with([&](S& s) {
                return detail::advisory_key_problem(s.settings().advisory_key, resource_, permits_);
            });
            if (problem && !problem->empty()) {
                if (diag_)
                    diag_->set_client_message(*problem);
                co_return make_error_code(errc::invalid_argument);
            }
        }
        if (session_ && session_->ended()) {
            // Its connection went (and with it whatever it held, a grant of the last
            // wait included): the next try is on a new one.
            session_.reset();
            granted_.reset();
            may_hold_ = false;
        }
        if (!session_) {
            auto opened = co_await store_.call([&](S& s) { return s.open_session(diag_); });
            if (!opened)
                co_return opened.error();
            session_ = std::move(opened.value());
        }
        if (granted_) // taken by the last wait
            co_return answer::granted(*granted_);
        waits_in_server_ = false;
        may_hold_ = true;
        if (permits_ > 0)
            co_return co_await take_permit();
        auto got = co_await session_->try_lock(resource_, owner_, mode_, diag_, candidate_);
        if (!got) {
            // Whether it took the lock cannot be known (a session-level lock outlives
            // the failed transaction that took it): the session goes, and with it
            // whatever it took, so that no later try of it takes the lock twice.
            drop_session();
            co_return got.error();
        }
        may_hold_ = false;
        if (got.value().is_granted()) {
            granted_ = got.value().fence();
            may_hold_ = true;
            co_return got.value();
        }
        // Held: a wait in the server may follow (only then: see wait()). Delayed: the
        // lock was given back; the wait is the tombstone's.
        waits_in_server_ = !got.value().is_delayed();
        co_return got.value();
    }

    awaitable<bool> listen() { co_return false; }

    /// The next wait is in the server's queue for the lock: it ends the moment the
    /// lock can be granted, so it need not end sooner than turn_recheck.
    bool waits_for_turn() const noexcept { return waits_in_server_ && session_ && !session_->ended(); }

    /// Waits in the server (pg_advisory_lock or pg_advisory_lock_shared with
    /// lock_timeout) until `until`; a permit waits for `until`, and so does a claim
    /// whose last try did not answer held on this session (a tombstone's wait is the
    /// retry policy's, and a try that failed closed its session).
    awaitable<bool> wait(time_point until)
    {
        if (permits_ > 0 || !waits_in_server_ || !session_ || session_->ended() || until <= clock::now()) {
            co_await backend::sleep_until(until);
            co_return false;
        }
        may_hold_ = true;
        auto got = co_await session_->wait_lock(resource_, owner_, until, diag_, mode_, candidate_);
        auto cs = co_await asio::this_coro::cancellation_state;
        if (cs.cancelled() != asio::cancellation_type::none)
            co_return false; // cut off: may_hold_ stays, abandon() closes the session
        if (!got) {
            drop_session(); // as a failed try: what it took goes with it
            co_return false; // the next attempt reports what is wrong
        }
        if (!got.value().is_granted()) {
            may_hold_ = false;
            // A tombstone gave the lock back: the next attempt says until when.
            co_return got.value().is_delayed();
        }
        granted_ = got.value().fence();
        co_return true;
    }

    bool unsettled() const noexcept { return session_ != nullptr; }

    awaitable<void> abandon() { return give_back(store_, std::move(session_), may_hold_ || granted_.has_value()); }

    advisory_hold<S> hold()
    {
        session_->record({resource_, owner_, mode_, permits_, slot_, candidate_.has_value()});
        granted_.reset();
        may_hold_ = false;
        return {store_, std::move(session_), resource_, owner_};
    }

private:
    void drop_session()
    {
        session_->discard();
        session_.reset();
        granted_.reset();
        may_hold_ = false;
        waits_in_server_ = false;
    }

    // The lowest free permit (session::try_permit). A refusal for another count took
    // nothing.
    awaitable<result<answer>> take_permit()
    {
        auto got = co_await session_->try_permit(resource_, permits_, diag_);
        if (!got) {
            if (got.error() == make_error_code(errc::invalid_argument))
                may_hold_ = false;
            co_return got.error(); // else it may hold: abandon() closes the session
        }
        if (!got.value().is_granted()) {
            may_hold_ = false;
            co_return got.value();
        }
        granted_ = got.value().fence();
        slot_ = got.value().slot().value_or(0);
        co_return got.value();
    }

    static awaitable<void> give_back(store_ref<S> store, std::shared_ptr<session> s, bool may_hold)
    {
        if (!s)
            co_return;
        if (may_hold || !store.with([&](S& st) {
                st.recycle(s);
                return true;
            }))
            s->discard();
    }

    store_ref<S> store_;
    std::string resource_;
    diagnostics* diag_;
    owner_token owner_;
    lock_mode mode_;
    std::uint32_t permits_;
    std::optional<std::string> candidate_; // an election's value, recorded with the grant
    std::shared_ptr<session> session_;
    std::optional<fence_token> granted_;
    std::uint32_t slot_ = 0;
    bool may_hold_ = false;
    bool waits_in_server_ = false;
};

} // namespace detail

/// PostgreSQL session-level advisory locks: the lease lives as long as the
/// connection that took it (no TTL, no renewal), and its loss (terminated backend,
/// restart, a connection that stopped answering) is reported at once. The fence
/// comes from the lease table. See docs/postgres.md.
///
/// It takes shared grants too: `mode` shared is a shared mutex's reader (the shared
/// advisory lock), `permits` N a semaphore's permit (one of N keys). A shared mutex
/// and a semaphore on an advisory_store use it by default.
struct advisory {
    using policy_kind = acquire_policy_tag;

    lock_mode mode = lock_mode::exclusive;
    /// 0: a mutex or a shared mutex; N: a semaphore of N permits (shared grants only).
    std::uint32_t permits = 0;

    bool shared() const noexcept { return mode == lock_mode::shared; }

    template <class S>
        requires requires(S& s) { s.open_session(); }
    detail::advisory_claim<S> open(const store_ref<S>& s, claim_request r) const
    {
        return {s, std::move(r), mode, mode == lock_mode::shared ? permits : 0};
    }
};

/// The PostgreSQL store with advisory locks as its default acquisition: the same
/// connections and settings, for mutexes that name no acquisition policy. It does not
/// read, list or revoke locks: those statements see the lease table, not the advisory
/// locks. It holds elections and keeps lock-delays on its advisory locks, through each
/// resource's record beside the lease table (docs/postgres.md, Mode 2).
// Used through backend::store_shell (see there why stores are templates).
template <class Unused = void>
class basic_advisory_store : public basic_store<> {
public:
    using default_acquire_policy = advisory;
    using default_shared_acquire_policy = advisory;
    using basic_store<>::basic_store;

    awaitable<result<lock_info>> read(std::string_view, diagnostics* = nullptr) = delete;
    // The server knows an advisory lock by its 64-bit key (pg_locks), a hash of the
    // resource that cannot be turned back into its id.
    awaitable<result<std::vector<lock_listing>>> list(std::string_view, diagnostics* = nullptr) = delete;
    // Only the session holding an advisory lock can unlock it. Ending that session from
    // outside (pg_terminate_backend) is no conditional step: pg_locks is not read in
    // the statement's snapshot, so the fence checked and the session ended could
    // belong to different grants.
    awaitable<result<void>> revoke(std::string_view, fence_token, diagnostics* = nullptr) = delete;

    /// Keeps `value` with the exclusive advisory grant of `owner` whose fence is
    /// `epoch`: the resource's record rewritten by the session that holds the grant
    /// (its pid, the fence, the owner, the value), while the lease row's fence is still
    /// `epoch`. errc::not_owner when no live session of this process holds that grant
    /// (released, lost, or not an advisory grant). An election's campaign records its
    /// value with the grant already (claim_request::candidate).
    awaitable<result<void>> proclaim(std::string_view resource, const owner_token& owner, fence_token epoch,
                                     std::string_view value, diagnostics* diag = nullptr)
    {
        if (resource.empty() || resource.size() > max_resource_size || value.size() > max_leader_value_size)
            return backend::failed<void>(errc::invalid_argument);
        if (epoch == 0 || epoch > static_cast<fence_token>(std::numeric_limits<std::int64_t>::max()))
            return backend::failed<void>(errc::not_owner);
        auto held = detail::session::holding_grant(resource, owner, lock_mode::exclusive);
        if (!held)
            return backend::failed<void>(errc::not_owner);
        return held->proclaim(std::string{resource}, owner, epoch, std::string{value}, diag);
    }

    /// The session that holds `resource`'s advisory lock exclusively now, when the
    /// resource's record names it (its pid, with the lease row's current fence): the
    /// record's fence (its epoch), owner and value. A holder the record does not name
    /// (a plain lock's, a foreign client's) is a pending leader: the next fence, no
    /// value. Free: a default leader_info. One round trip: the record's row locked,
    /// then pg_locks and the record read together.
    awaitable<result<leader_info>> leader(std::string_view resource, diagnostics* diag = nullptr)
    {
        return this->advisory_leader(resource, diag);
    }

protected:
    ~basic_advisory_store() = default;
};

/// The PostgreSQL store with session-bound advisory locks. See basic_advisory_store
/// for its documentation.
using advisory_store = backend::store_shell<basic_advisory_store<>>;

static_assert(!inspectable_store<advisory_store>);
static_assert(!enumerable_store<advisory_store>);
static_assert(!revocable_store<advisory_store>);
static_assert(electing_store<advisory_store>);
static_assert(lock_delay_store<advisory_store>);
static_assert(shared_backend<advisory_store>);

} // namespace distlock::postgres
