// distlock/claims/quorum_claim.hpp: the claim of acquire::quorum (Redlock): a TTL
// policy run on every node of a distlock::quorum in parallel, held when a majority
// grants it, with one fencing token across the nodes.
#pragma once

#include <distlock/backend/contract.hpp>
#include <distlock/backend/deferred.hpp>
#include <distlock/backend/helpers.hpp>
#include <distlock/backend/lifetime.hpp>
#include <distlock/backend/observer_ref.hpp>
#include <distlock/backend/store_ref.hpp>
#include <distlock/claim.hpp>
#include <distlock/claims/ttl_claim.hpp>
#include <distlock/detail/fan_out.hpp>
#include <distlock/quorum.hpp>
#include <distlock/diagnostics.hpp>
#include <distlock/error.hpp>

#include <asio/experimental/as_tuple.hpp>
#include <asio/this_coro.hpp>
#include <asio/use_awaitable.hpp>

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace distlock {

namespace detail {

// Per-node steps of the quorum policy. They are function objects rather than lambdas
// because each runs in a detached coroutine that may outlive the caller: every
// argument is owned by value, and the node is reached through its store_ref.

// Each node's words go to its own entry of `words` (when the caller wants them):
// a late node writes only its own, which nobody reads once the decision is made.
template <class Inner, class S>
struct acquire_on_node {
    Inner policy;
    std::string resource;
    owner_token owner;
    duration ttl;
    std::shared_ptr<std::vector<diagnostics>> words;
    awaitable<result<fence_token>> operator()(const store_ref<S>& node, std::size_t i) const
    {
        return run(policy, node, resource, owner, ttl, words, i);
    }
    static awaitable<result<fence_token>> run(Inner p, store_ref<S> node, std::string res, owner_token owner,
                                              duration ttl, std::shared_ptr<std::vector<diagnostics>> words,
                                              std::size_t i)
    {
        // A node whose store is closing takes no new lock, and a grant that comes back
        // while it closes is given back here, before its close() can finish (the
        // node's count of work in flight, fan_out(), covers this whole call).
        if (!node.open())
            co_return errc::store_unavailable;
        const lock_request r{res, owner, ttl, words ? &(*words)[i] : nullptr};
        auto got = co_await node.call([&](S& s) { return p.acquire(s, r, {}); });
        if (got && !node.open()) {
            const lock_request back{res, owner, {}};
            (void)co_await node.call([&](S& s) { return p.release(s, back); });
            co_return errc::store_unavailable;
        }
        co_return got;
    }
};

template <class Inner, class S>
struct extend_on_node {
    Inner policy;
    std::string resource;
    owner_token owner;
    duration ttl;
    awaitable<result<bool>> operator()(const store_ref<S>& node, std::size_t) const
    {
        return run(policy, node, resource, owner, ttl);
    }
    static awaitable<result<bool>> run(Inner p, store_ref<S> node, std::string res, owner_token owner,
                                       duration ttl)
    {
        const lock_request r{res, owner, ttl};
        BOOST_OUTCOME_CO_TRY(co_await node.call([&](S& s) { return p.extend(s, r); }));
        co_return true;
    }
};

template <class Inner, class S>
struct release_on_node {
    Inner policy;
    std::string resource;
    owner_token owner;
    std::optional<fence_token> floor = std::nullopt; // a lease's token, raised to as it goes
    awaitable<result<bool>> operator()(const store_ref<S>& node, std::size_t) const
    {
        return run(policy, node, resource, owner, floor);
    }
    static awaitable<result<bool>> run(Inner p, store_ref<S> node, std::string res, owner_token owner,
                                       std::optional<fence_token> floor)
    {
        // The release may run on after unlock() returned (done at a majority): the
        // node's store counts it, so that its close() lets it finish.
        const auto counted = node.track();
        const lock_request r{res, owner, {}, nullptr, floor};
        BOOST_OUTCOME_CO_TRY(co_await node.call([&](S& s) { return p.release(s, r); }));
        co_return true;
    }
};

// Raises a granting node's fencing counter to the lease's token.
template <class S>
struct raise_on_node {
    std::string resource;
    fence_token top;
    std::vector<std::optional<fence_token>> granted;
    awaitable<result<fence_token>> operator()(const store_ref<S>& node, std::size_t i) const
    {
        return run(node, resource, top, granted[i]);
    }
    static awaitable<result<fence_token>> run(store_ref<S> node, std::string res, fence_token top,
                                              std::optional<fence_token> mine)
    {
        if (!mine)
            co_return fence_token{0};
        if (*mine >= top)
            co_return *mine;
        co_return co_await node.call([&](S& s) { return s.raise_fence(res, top); });
    }
};

// A grant (or a maybe-grant) that arrives after the decision belongs to no lease:
// give it back now rather than leave it held until its TTL.
template <class Inner, class S>
struct release_late_grant {
    Inner policy;
    std::string resource;
    owner_token owner;
    awaitable<void> operator()(const store_ref<S>& node, std::size_t, reply<fence_token> got) const
    {
        return run(policy, node, resource, owner, got.value ? std::error_code{} : got.value.error());
    }
    static awaitable<void> run(Inner p, store_ref<S> node, std::string res, owner_token owner, std::error_code ec)
    {
        if (ec != condition::contended) {
            const lock_request r{res, owner, {}};
            (void)co_await node.call([&](S& s) { return p.release(s, r); });
        }
    }
};

struct ignore_late {
    template <class N, class T>
    awaitable<void> operator()(const N&, std::size_t, T) const
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

// Settled once a majority succeeded; a failure waits for every node.
struct majority_succeeded {
    std::size_t need;
    template <class T>
    bool operator()(const replies<T>& got) const
    {
        return static_cast<std::size_t>(std::count_if(got.begin(), got.end(), [](const auto& g) {
                   return g && g->value;
               })) >= need;
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

/// The nodes of a quorum as the core reaches them.
template <class S>
struct node_refs {
    std::vector<store_ref<S>> refs;
    std::size_t size() const noexcept { return refs.size(); }
    std::size_t majority() const noexcept { return refs.size() / 2 + 1; }
    const store_ref<S>& node(std::size_t i) const noexcept { return refs[i]; }
};

template <class S>
node_refs<S> refs_of(const store_ref<distlock::quorum<S>>& q)
{
    node_refs<S> out;
    if (auto* nodes = q.get()) {
        out.refs.reserve(nodes->size());
        for (std::size_t i = 0; i < nodes->size(); ++i)
            out.refs.emplace_back(nodes->node(i));
    }
    return out;
}

// Success when at least `need` nodes succeeded; otherwise the most telling error.
inline result<void> settle_votes(const replies<bool>& got, std::size_t need)
{
    std::size_t ok = 0, not_owner = 0, answered = 0;
    for (const auto& g : got) {
        if (!g)
            continue;
        ++answered;
        if (g->value)
            ++ok;
        else if (g->value.error() == condition::not_owner)
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

// One server reached through two nodes (another database, prefix or host name of
// it) counts once: its successes beyond the first are dropped from `got`. Identities
// are known once a node has connected, which it has when it answered.
template <class S>
void count_each_server_once(replies<bool>& got, const node_refs<S>& nodes)
{
    if constexpr (identified_store<S>) {
        std::vector<std::string> seen;
        for (std::size_t i = 0; i < got.size(); ++i) {
            if (!got[i] || !got[i]->value)
                continue;
            const auto id = nodes.node(i).with([](S& s) { return s.known_server_identity(); });
            if (!id || !*id || (*id)->empty())
                continue;
            if (std::find(seen.begin(), seen.end(), **id) != seen.end())
                got[i].reset();
            else
                seen.push_back(**id);
        }
    }
}

template <class Inner, class S>
awaitable<void> release_everywhere(Inner policy, node_refs<S> nodes, std::string resource, owner_token owner)
{
    const release_on_node<Inner, S> rel{policy, std::move(resource), owner};
    (void)co_await fan_out<bool>(nodes, rel, all_settled{}, ignore_late{});
}

/// A lease on a quorum: extended when a majority extends, released on every node.
/// On clock-fenced nodes the release also raises each node's token to the lease's
/// (`floor`), which the grant left to it (see quorum_claim::try_nodes()).
template <class Inner, class S>
class quorum_hold {
public:
    quorum_hold(Inner policy, node_refs<S> nodes, std::string resource, owner_token owner, duration ttl,
                std::optional<fence_token> floor = std::nullopt)
        : policy_{std::move(policy)}, nodes_{std::move(nodes)}, resource_{std::move(resource)}, owner_{owner},
          ttl_{ttl}, floor_{floor}
    {}

    awaitable<result<void>> extend() { return extend_on(policy_, nodes_, resource_, owner_, ttl_); }
    awaitable<result<void>> release() { return release_on(policy_, nodes_, resource_, owner_, floor_); }
    const owner_token& owner() const noexcept { return owner_; }
    // On the first node whose store still takes work: a release spawned on a node
    // already closed would be dropped, and the others would keep the lock to its TTL.
    void spawn(awaitable<void> work) const
    {
        for (const auto& n : nodes_.refs)
            if (n.takes_work()) {
                n.spawn(std::move(work));
                return;
            }
    }
    bool listen(std::weak_ptr<backend::closing_listener> l) const
    {
        bool open = true;
        for (const auto& n : nodes_.refs)
            open = n.listen(l) && open;
        return open;
    }

private:
    static awaitable<result<void>> extend_on(Inner p, node_refs<S> nodes, std::string res, owner_token owner,
                                             duration ttl)
    {
        const extend_on_node<Inner, S> ext{p, std::move(res), owner, ttl};
        auto got = co_await fan_out<bool>(nodes, ext, majority_settled{nodes.size(), nodes.majority()},
                                          ignore_late{});
        count_each_server_once(got, nodes);
        co_return settle_votes(got, nodes.majority());
    }
    static awaitable<result<void>> release_on(Inner p, node_refs<S> nodes, std::string res, owner_token owner,
                                              std::optional<fence_token> floor)
    {
        // Done once a majority released: no majority can then be held for this lease.
        // The other nodes' releases, sent or queued, run on in the background, each
        // counted by its node's store until it ends (its close() waits for it). A
        // release that fails somewhere waits for every node, so that it still succeeds
        // when any node released.
        const release_on_node<Inner, S> rel{p, std::move(res), owner, floor};
        auto got = co_await fan_out<bool>(nodes, rel, majority_succeeded{nodes.majority()}, ignore_late{});
        co_return settle_votes(got, 1);
    }

    Inner policy_;
    node_refs<S> nodes_;
    std::string resource_;
    owner_token owner_;
    duration ttl_;
    std::optional<fence_token> floor_;
};

/// One lock() call's claim on a quorum (Redlock); see acquire::quorum.
template <class Inner, class S>
class quorum_claim {
public:
    static constexpr bool fair = false;

    quorum_claim(Inner policy, node_refs<S> nodes, claim_request r)
        : policy_{std::move(policy)}, nodes_{std::move(nodes)}, resource_{std::move(r.resource)},
          ttl_{r.options.ttl}, observe_{r.observe}, diag_{r.diag}, owner_{owner_token::generate()}
    {}

    awaitable<result<answer>> attempt()
    {
        if (attempts_++ > 0)
            owner_ = owner_token::generate();
        auto got = co_await try_nodes();
        if (got)
            co_return answer::granted(got.value());
        if (got.error() == condition::contended)
            co_return answer::held();
        co_return got.error();
    }

    awaitable<bool> listen() { co_return false; }

    awaitable<bool> wait(time_point until)
    {
        co_await backend::sleep_until(until);
        co_return false;
    }

    awaitable<void> abandon()
    {
        return give_back(policy_, nodes_, resource_, unsettled_);
    }

    quorum_hold<Inner, S> hold()
    {
        std::optional<fence_token> floor;
        if constexpr (clock_fenced_store<S>)
            floor = top_;
        return {policy_, nodes_, resource_, owner_, ttl_, floor};
    }
    bool unsettled() const noexcept { return !unsettled_.empty(); }

private:
    awaitable<result<fence_token>> try_nodes()
    {
        const auto n = nodes_.size(), need = nodes_.majority();
        // Identities already known (from earlier connects): refused before any I/O.
        if (granted_by_one_server_twice(std::vector<std::optional<fence_token>>(n, fence_token{0})))
            co_return errc::invalid_argument;
        const auto words = diag_ ? std::make_shared<std::vector<diagnostics>>(n) : nullptr;
        const acquire_on_node<Inner, S> ask{policy_, resource_, owner_, ttl_, words};
        const release_late_grant<Inner, S> late{policy_, resource_, owner_};
        const auto verdict = std::make_shared<late_verdict>();
        bool cancelled = false;
        auto votes = co_await fan_out<fence_token>(nodes_, ask, majority_settled{n, need}, late, &cancelled, verdict);

        std::size_t granted = 0, contended = 0;
        fence_token top = 0;
        std::vector<std::optional<fence_token>> fences(n);
        for (std::size_t i = 0; i < n; ++i) {
            if (!votes[i])
                continue;
            const auto& v = *votes[i];
            observe_(vote_event{resource_, i, v.latency, v.value ? std::error_code{} : v.value.error()});
            if (v.value) {
                ++granted;
                fences[i] = v.value.value();
                top = std::max(top, v.value.value());
            } else if (v.value.error() == condition::contended) {
                ++contended;
            }
        }
        if (granted_by_one_server_twice(fences)) {
            verdict->conclude(false);
            co_await release_everywhere(policy_, nodes_, resource_, owner_);
            co_return errc::invalid_argument;
        }
        if (cancelled) {
            // Cut off (cancelled, or the deadline): the release on every node runs as
            // background work after lock() returned.
            verdict->conclude(false);
            unsettled_.push_back(owner_);
            co_return errc::cancelled;
        }
        if (granted < need) {
            verdict->conclude(false);
            if (words)
                gather(votes, *words);
            co_await release_everywhere(policy_, nodes_, resource_, owner_);
            // Any node that says "held" makes this contention; otherwise the nodes failed.
            co_return contended > 0 ? errc::contended : errc::quorum_not_reached;
        }

        // Bring lagging counters of the granting nodes up to the lease's token, so that
        // the next lease's token, from whichever majority, is larger. Clock-fenced
        // nodes whose tokens are all within half a TTL of the top need not be raised
        // now: the release raises them (hold()); without a release, the lock is free
        // again only once each granting node's key expired, a TTL later by its clock,
        // when its clock, and so its next token, has passed the top (as long as the
        // servers' clocks agree within half a TTL: docs/guarantees.md).
        const bool lagging = std::any_of(fences.begin(), fences.end(), [top](const auto& f) { return f && *f < top; });
        top_ = top;
        if (lagging && !close_enough(fences, top)) {
            const raise_on_node<S> raise{resource_, top, fences};
            auto raised = co_await fan_out<fence_token>(nodes_, raise, all_settled{}, ignore_late{});
            std::size_t at_top = 0;
            for (std::size_t i = 0; i < n; ++i)
                if (fences[i] && raised[i] && raised[i]->value && raised[i]->value.value() >= top)
                    ++at_top;
            if (at_top < need) {
                verdict->conclude(false);
                co_await release_everywhere(policy_, nodes_, resource_, owner_);
                co_return errc::quorum_not_reached;
            }
        }
        // Grants that arrive from here on are part of this lease (extended and released
        // with it on every node).
        verdict->conclude(true);
        co_return top;
    }

    // Clock-fenced nodes whose grants all lie within half a TTL of `top`, in the
    // nodes' clock ticks; never for other stores (their counters do not move with
    // time, so only a raise keeps the next token above this one).
    bool close_enough(const std::vector<std::optional<fence_token>>& fences, fence_token top) const
    {
        if constexpr (clock_fenced_store<S>) {
            const double ticks = std::chrono::duration<double>(ttl_).count() *
                                 static_cast<double>(S::fence_ticks_per_second) / 2.0;
            return std::all_of(fences.begin(), fences.end(), [&](const std::optional<fence_token>& f) {
                return !f || static_cast<double>(top - *f) < ticks;
            });
        } else {
            (void)fences;
            (void)top;
            return false;
        }
    }

    static awaitable<void> give_back(Inner policy, node_refs<S> nodes, std::string resource,
                                     std::vector<owner_token> owners)
    {
        for (const auto& owner : owners)
            co_await release_everywhere(policy, nodes, resource, owner);
    }

    // The words of the nodes that settled with a failure, "node i: ..." each, into the
    // caller's diagnostics. Only settled nodes' entries are read: a late node may
    // still be writing its own.
    void gather(const replies<fence_token>& votes, const std::vector<diagnostics>& words) const
    {
        std::string server, client;
        const auto add = [](std::string& to, std::size_t i, std::string_view what) {
            if (what.empty())
                return;
            if (!to.empty())
                to += "; ";
            to += "node " + std::to_string(i) + ": ";
            to += what;
        };
        for (std::size_t i = 0; i < votes.size(); ++i) {
            if (!votes[i] || votes[i]->value)
                continue;
            add(server, i, words[i].server_message());
            add(client, i, words[i].client_message());
        }
        diag_->set_server_message(std::move(server));
        diag_->set_client_message(std::move(client));
    }

    // Nodes that granted have connected, so they know their server's identity. (A
    // node whose first connect completes after the decision is compared from the next
    // attempt on.)
    bool granted_by_one_server_twice(const std::vector<std::optional<fence_token>>& fences) const
    {
        if constexpr (identified_store<S>) {
            std::vector<std::string> seen;
            for (std::size_t i = 0; i < fences.size(); ++i) {
                if (!fences[i])
                    continue;
                const auto id = nodes_.node(i).with([](S& s) { return s.known_server_identity(); });
                if (!id || !*id || (*id)->empty())
                    continue;
                if (std::find(seen.begin(), seen.end(), **id) != seen.end())
                    return true;
                seen.push_back(**id);
            }
        }
        return false;
    }

    Inner policy_;
    node_refs<S> nodes_;
    std::string resource_;
    duration ttl_;
    observer_ref observe_;
    diagnostics* diag_;
    owner_token owner_;
    fence_token top_ = 0; // the granted lease's token
    std::size_t attempts_ = 0;
    std::vector<owner_token> unsettled_;
};

} // namespace detail

} // namespace distlock
