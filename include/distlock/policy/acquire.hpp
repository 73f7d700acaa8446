// distlock/policy/acquire.hpp: how a lock is taken, extended and released on a backend.
#pragma once

#include <distlock/detail/fan_out.hpp>
#include <distlock/detail/observer_ref.hpp>
#include <distlock/quorum.hpp>
#include <distlock/store.hpp>

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

namespace distlock {

struct acquire_policy_tag {};

/// One request against a backend: which resource, for which owner, for how long.
struct lock_request {
    std::string_view resource;
    owner_token owner;
    duration ttl{};
};

/// An acquisition policy takes, extends and releases a lock on backend B.
/// `acquire` returns the fencing token of the new lease.
template <class P, class B>
concept acquire_policy_for =
    std::same_as<typename P::policy_kind, acquire_policy_tag> &&
    requires(const P& p, B& b, const lock_request& r, detail::observer_ref obs) {
        { p.acquire(b, r, obs) } -> std::same_as<awaitable<result<fence_token>>>;
        { p.extend(b, r) } -> std::same_as<awaitable<result<void>>>;
        { p.release(b, r) } -> std::same_as<awaitable<result<void>>>;
    };

namespace acquire {

/// Owner-checked extend and release, shared by the single-store policies.
struct owner_checked {
    template <class S>
        requires owner_checked_store<S>
    awaitable<result<void>> extend(S& s, const lock_request& r) const
    {
        return s.extend(r.resource, r.owner, r.ttl);
    }
    template <class S>
        requires owner_checked_store<S>
    awaitable<result<void>> release(S& s, const lock_request& r) const
    {
        return s.release(r.resource, r.owner);
    }
};

/// Put-if-absent with a TTL (Redis SET NX PX), owner-checked extend and release.
struct setnx : owner_checked {
    using policy_kind = acquire_policy_tag;

    template <class S>
        requires put_if_absent_store<S> && owner_checked_store<S>
    awaitable<result<fence_token>> acquire(S& s, const lock_request& r, detail::observer_ref) const
    {
        return s.put_if_absent(r.resource, r.owner, r.ttl);
    }
};

/// A conditional write that succeeds only if the record is absent or expired
/// (DynamoDB, etcd); the record's new version is the fencing token.
struct conditional_write : owner_checked {
    using policy_kind = acquire_policy_tag;

    template <class S>
        requires conditional_write_store<S> && owner_checked_store<S>
    awaitable<result<fence_token>> acquire(S& s, const lock_request& r, detail::observer_ref) const
    {
        return s.conditional_write(r.resource, r.owner, r.ttl, std::nullopt);
    }
};

} // namespace acquire

namespace detail {

// Per-node steps of the quorum policy. They are function objects rather than lambdas
// because each runs in a detached coroutine that may outlive the caller: every
// argument is owned by value.

template <class Inner, class S>
struct acquire_on_node {
    Inner policy;
    std::string resource;
    owner_token owner;
    duration ttl;
    awaitable<result<fence_token>> operator()(S& node, std::size_t) const
    {
        return run(policy, node, resource, owner, ttl);
    }
    static awaitable<result<fence_token>> run(Inner p, S& node, std::string res, owner_token owner,
                                              duration ttl)
    {
        co_return co_await p.acquire(node, lock_request{res, owner, ttl}, {});
    }
};

template <class Inner, class S>
struct extend_on_node {
    Inner policy;
    std::string resource;
    owner_token owner;
    duration ttl;
    awaitable<result<bool>> operator()(S& node, std::size_t) const
    {
        return run(policy, node, resource, owner, ttl);
    }
    static awaitable<result<bool>> run(Inner p, S& node, std::string res, owner_token owner, duration ttl)
    {
        BOOST_OUTCOME_CO_TRY(co_await p.extend(node, lock_request{res, owner, ttl}));
        co_return true;
    }
};

template <class Inner, class S>
struct release_on_node {
    Inner policy;
    std::string resource;
    owner_token owner;
    awaitable<result<bool>> operator()(S& node, std::size_t) const { return run(policy, node, resource, owner); }
    static awaitable<result<bool>> run(Inner p, S& node, std::string res, owner_token owner)
    {
        BOOST_OUTCOME_CO_TRY(co_await p.release(node, lock_request{res, owner, {}}));
        co_return true;
    }
};

// Raises a granting node's fencing counter to the lease's token.
template <class S>
struct raise_on_node {
    std::string resource;
    fence_token top;
    std::vector<std::optional<fence_token>> granted;
    awaitable<result<fence_token>> operator()(S& node, std::size_t i) const
    {
        return run(node, resource, top, granted[i]);
    }
    static awaitable<result<fence_token>> run(S& node, std::string res, fence_token top,
                                              std::optional<fence_token> mine)
    {
        if (!mine)
            co_return fence_token{0};
        if (*mine >= top)
            co_return *mine;
        co_return co_await node.raise_fence(res, top);
    }
};

// A grant (or a maybe-grant) that arrives after the decision belongs to no lease:
// give it back now rather than leave it held until its TTL.
template <class Inner, class S>
struct release_late_grant {
    Inner policy;
    std::string resource;
    owner_token owner;
    awaitable<void> operator()(S& node, std::size_t, reply<fence_token> got) const
    {
        return run(policy, node, resource, owner, got.value ? std::error_code{} : got.value.error());
    }
    static awaitable<void> run(Inner p, S& node, std::string res, owner_token owner, std::error_code ec)
    {
        if (ec != errc::contended)
            (void)co_await p.release(node, lock_request{res, owner, {}});
    }
};

struct ignore_late {
    template <class S, class T>
    awaitable<void> operator()(S&, std::size_t, T) const
    {
        co_return;
    }
};

// Settled once a majority succeeded or can no longer succeed.
struct majority_settled {
    std::size_t n, need;
    template <class T>
    bool operator()(const replies<T>& got) const
    {
        std::size_t ok = 0, failed = 0;
        for (const auto& g : got)
            if (g)
                ++(g->value ? ok : failed);
        return ok >= need || failed > n - need;
    }
};

// Waits for every node.
struct all_settled {
    template <class T>
    bool operator()(const replies<T>&) const
    {
        return false;
    }
};

} // namespace detail

namespace acquire {

/// Redlock over a distlock::quorum: `Inner` on every node in parallel; held when a
/// majority grants it. If no majority grants it, it is released on every node.
///
/// Fencing across a quorum. Each node keeps its own counter, and they drift apart
/// when nodes miss acquisitions or restart empty, so the largest granted token F is
/// the lease's token, and before the lease is reported every granting node whose
/// counter is below F is raised to F. Any later majority overlaps this one in at
/// least one node whose counter is then >= F, so the next token exceeds F, as long
/// as that node kept its counter: a node restarted empty (without persistence) can
/// make the token go back when it was the only node the two majorities shared.
template <class Inner = setnx>
struct quorum {
    using policy_kind = acquire_policy_tag;
    Inner inner{};

    template <class S>
        requires acquire_policy_for<Inner, S> && fencing_counter_store<S>
    awaitable<result<fence_token>> acquire(distlock::quorum<S>& q, const lock_request& r,
                                           detail::observer_ref observe) const
    {
        const auto n = q.size(), need = q.majority();
        const std::string resource{r.resource};
        const owner_token owner = r.owner;

        const detail::acquire_on_node<Inner, S> ask{inner, resource, owner, r.ttl};
        const detail::release_late_grant<Inner, S> late{inner, resource, owner};
        const auto verdict = std::make_shared<detail::late_verdict>();
        bool cancelled = false;
        auto votes = co_await detail::fan_out<fence_token>(q, ask, detail::majority_settled{n, need}, late,
                                                           &cancelled, verdict);

        std::size_t granted = 0, contended = 0;
        fence_token top = 0;
        std::vector<std::optional<fence_token>> fences(n);
        for (std::size_t i = 0; i < n; ++i) {
            if (!votes[i])
                continue;
            const auto& v = *votes[i];
            observe(vote_event{resource, i, v.latency, v.value ? std::error_code{} : v.value.error()});
            if (v.value) {
                ++granted;
                fences[i] = v.value.value();
                top = std::max(top, v.value.value());
            } else if (v.value.error() == errc::contended) {
                ++contended;
            }
        }
        if (cancelled || granted < need) {
            verdict->conclude(false);
            co_await release_everywhere(q, resource, owner);
            if (cancelled)
                co_return errc::cancelled;
            // Any node that says "held" makes this contention; otherwise the nodes failed.
            co_return contended > 0 ? errc::contended : errc::quorum_not_reached;
        }

        // Bring lagging counters of the granting nodes up to the lease's token.
        const bool lagging =
            std::any_of(fences.begin(), fences.end(), [top](const auto& f) { return f && *f < top; });
        if (lagging) {
            const detail::raise_on_node<S> raise{resource, top, fences};
            auto raised = co_await detail::fan_out<fence_token>(q, raise, detail::all_settled{},
                                                                detail::ignore_late{});
            std::size_t at_top = 0;
            for (std::size_t i = 0; i < n; ++i)
                if (fences[i] && raised[i] && raised[i]->value && raised[i]->value.value() >= top)
                    ++at_top;
            if (at_top < need) {
                verdict->conclude(false);
                co_await release_everywhere(q, resource, owner);
                co_return errc::quorum_not_reached;
            }
        }
        // Grants that arrive from here on are part of this lease (extended and released
        // with it on every node).
        verdict->conclude(true);
        co_return top;
    }

    /// Extended when a majority extends; the caller checks it was in time.
    template <class S>
        requires acquire_policy_for<Inner, S>
    awaitable<result<void>> extend(distlock::quorum<S>& q, const lock_request& r) const
    {
        const detail::extend_on_node<Inner, S> ext{inner, std::string{r.resource}, r.owner, r.ttl};
        auto got = co_await detail::fan_out<bool>(q, ext, detail::majority_settled{q.size(), q.majority()},
                                                  detail::ignore_late{});
        co_return settle(got, q.majority());
    }

    /// Released on every node; succeeds if any node still held it.
    template <class S>
        requires acquire_policy_for<Inner, S>
    awaitable<result<void>> release(distlock::quorum<S>& q, const lock_request& r) const
    {
        const detail::release_on_node<Inner, S> rel{inner, std::string{r.resource}, r.owner};
        auto got = co_await detail::fan_out<bool>(q, rel, detail::all_settled{}, detail::ignore_late{});
        co_return settle(got, 1);
    }

private:
    template <class S>
    awaitable<void> release_everywhere(distlock::quorum<S>& q, std::string resource, owner_token owner) const
    {
        const detail::release_on_node<Inner, S> rel{inner, std::move(resource), owner};
        (void)co_await detail::fan_out<bool>(q, rel, detail::all_settled{}, detail::ignore_late{});
    }

    // Success when at least `need` nodes succeeded; otherwise the most telling error.
    static result<void> settle(const detail::replies<bool>& got, std::size_t need)
    {
        std::size_t ok = 0, not_owner = 0, answered = 0;
        for (const auto& g : got) {
            if (!g)
                continue;
            ++answered;
            if (g->value)
                ++ok;
            else if (g->value.error() == errc::not_owner)
                ++not_owner;
        }
        if (ok >= need)
            return success();
        if (answered > 0 && not_owner > got.size() - std::max<std::size_t>(need, (got.size() / 2) + 1))
            return errc::not_owner;
        if (answered > 0 && not_owner == answered)
            return errc::not_owner;
        return errc::quorum_not_reached;
    }
};

} // namespace acquire
} // namespace distlock
