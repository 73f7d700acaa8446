// Seeded, deterministic simulation of clients, networks and stores in one process.
//
// Clients are distlock mutexes on one io_context; each talks to the in-process stores
// through its own simulated link that delays, drops and reorders requests and
// replies, and can scale the TTL the store sees (a store clock running fast or slow
// against the client's). Time is a manual clock that the driver moves forward one
// millisecond at a time, running everything that became due before moving on, so a
// run is a function of its seed: a failing seed replays the same history.
#pragma once

#include "history.hpp"

#include <distlock/basic_distributed_semaphore.hpp>
#include <distlock/basic_distributed_shared_mutex.hpp>
#include <distlock/distlock.hpp>
#include <distlock/memory.hpp>
#include <distlock/testing.hpp>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/io_context.hpp>
#include <asio/use_awaitable.hpp>

#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace fault::sim {

namespace dl = distlock;
using namespace std::chrono_literals;

inline nanos now_ns() { return dl::clock::now().time_since_epoch().count(); }

/// What the network and the stores do wrong, per run.
struct faults {
    dl::duration max_delay = 0ms;   ///< each way, uniform in [0, max_delay]
    double drop_request = 0;        ///< lost before the store: not applied
    double drop_reply = 0;          ///< lost after the store: applied, the client times out
    dl::duration timeout = 40ms;    ///< the client's request timeout
    /// Each node's clock rate against the clients', uniform in [rate_min, rate_max]:
    /// above 1 a node lets keys expire early by the clients' clocks.
    double rate_min = 1.0, rate_max = 1.0;
    double crash = 0;               ///< per critical section: the holder dies instead of unlocking
    double pause = 0.15;            ///< per critical section: the holder stalls past its TTL
    /// Per millisecond: a node restarts empty. `restart_after` is how long it stays down
    /// first (zero: at once, which Redlock cannot survive).
    double restart = 0;
    dl::duration restart_after = 0ms;
};

/// Deliberate bugs, for proving that the checker sees what they break.
struct defects {
    bool release_without_owner_check = false; ///< the store deletes whoever holds the lock
    bool validity_from_reply = false;         ///< validity counted from the reply, not the request
};

/// `session`: clients of a memory session server (the model of etcd and ZooKeeper),
/// queued by creation, their leases bound to their sessions; the session TTL is `ttl`.
enum class acquisition { setnx, conditional_write, quorum, session };

/// What the clients take: a mutex, a shared mutex (readers and writers), a
/// semaphore's permits, or an election's terms (through lead(), the critical section
/// as the leader's work).
enum class primitive { mutex, shared_mutex, semaphore, election };

struct config {
    std::uint64_t seed = 1;
    acquisition how = acquisition::setnx;
    int nodes = 1;
    int clients = 4;
    int rounds = 8;
    int resources = 2;
    double multi = 0;    ///< per round: lock every resource at once with a multi-lock
    bool watchdog = false;
    /// setnx and session only: what is locked. A shared mutex's clients read in
    /// `reads` of their rounds (a reader makes no write); a semaphore has `permits`,
    /// and each permit writes to the register of its number.
    sim::primitive primitive = primitive::mutex;
    double reads = 0.7;
    std::uint32_t permits = 2;
    dl::duration ttl = 200ms;
    sim::faults faults;
    sim::defects defects;
    /// Whether the checker holds fences to growing; by default only in runs where no
    /// node restarts empty (distlock does not promise it there).
    std::optional<bool> check_fences;
};

struct outcome_of_run {
    std::vector<op> history;
    std::size_t faults_injected = 0;
    report checked;
    std::string digest; ///< the history without owner tokens: equal for equal seeds
};

/// Everything a run shares: the clock, the nodes, the random source, the history.
struct world {
    explicit world(const config& c) : cfg{c}, random{c.seed}
    {
        for (int i = 0; i < c.nodes; ++i)
            nodes.push_back(std::make_unique<dl::memory::store>(io));
        for (int i = 0; i < c.nodes; ++i) {
            std::uniform_real_distribution<double> rate{c.faults.rate_min, c.faults.rate_max};
            rates.push_back(rate(random));
        }
    }

    bool chance(double p) { return p > 0 && std::uniform_real_distribution<double>{0, 1}(random) < p; }
    dl::duration uniform(dl::duration hi)
    {
        if (hi <= dl::duration::zero())
            return dl::duration::zero();
        // Whole microseconds keep histories short to print.
        const auto us = std::chrono::duration_cast<std::chrono::microseconds>(hi).count();
        return std::chrono::microseconds{std::uniform_int_distribution<std::int64_t>{0, us}(random)};
    }
    void record(op o) { history.push_back(std::move(o)); }

    const config cfg;
    dl::manual_clock clock;
    asio::io_context io;
    std::mt19937_64 random;
    std::vector<std::unique_ptr<dl::memory::store>> nodes;
    dl::memory::session_server sessions; ///< the server of acquisition::session
    std::vector<double> rates;
    std::vector<op> history;
    std::map<dl::owner_token, std::pair<int, dl::fence_token>> holders; ///< owner -> (process, fence)
    std::vector<dl::owner_token> released; ///< leases whose unlock() succeeded
    std::size_t faults_injected = 0;
};

/// The simulated network between one client and one node; a store in its own right.
class link {
public:
    link(world& w, int process, std::size_t node) : w_{w}, process_{process}, node_{node} {}

    using executor_type = asio::any_io_executor;
    executor_type get_executor() const { return w_.io.get_executor(); }

    /// The client died: nothing it sends arrives any more.
    void cut() { cut_ = true; }

    dl::awaitable<dl::result<dl::fence_token>> put_if_absent(std::string_view resource, const dl::owner_token& owner,
                                                             dl::duration ttl)
    {
        auto& node = *w_.nodes[node_];
        const auto scaled = store_ttl(ttl);
        return exchange<dl::fence_token>([&node, r = std::string{resource}, owner, scaled] {
            return node.put_if_absent(r, owner, scaled);
        });
    }

    dl::awaitable<dl::result<dl::fence_token>> conditional_write(std::string_view resource,
                                                                 const dl::owner_token& owner, dl::duration ttl,
                                                                 std::optional<dl::fence_token> expected)
    {
        auto& node = *w_.nodes[node_];
        const auto scaled = store_ttl(ttl);
        return exchange<dl::fence_token>([&node, r = std::string{resource}, owner, scaled, expected] {
            return node.conditional_write(r, owner, scaled, expected);
        });
    }

    dl::awaitable<dl::result<void>> extend(std::string_view resource, const dl::owner_token& owner, dl::duration ttl)
    {
        auto& node = *w_.nodes[node_];
        const auto scaled = store_ttl(ttl);
        return exchange<void>([&node, r = std::string{resource}, owner, scaled] { return node.extend(r, owner, scaled); });
    }

    dl::awaitable<dl::result<void>> release(std::string_view resource, const dl::owner_token& owner)
    {
        return exchange<void>([this, r = std::string{resource}, owner]() -> dl::awaitable<dl::result<void>> {
            auto& node = *w_.nodes[node_];
            const auto held = node.inspect(r);
            auto as = owner;
            if (held && w_.cfg.defects.release_without_owner_check)
                as = held->owner; // a plain DEL: whoever holds it
            const auto before = now_ns();
            auto removed = co_await node.release(r, as);
            // What the store did, seen at the store: every removal, and whether the
            // lock it removed belonged to another owner.
            if (removed) {
                const auto asking = w_.holders.find(owner);
                const bool foreign = held && held->owner != owner;
                const auto victim = held ? w_.holders.find(held->owner) : w_.holders.end();
                w_.record(op{.process = process_, .kind = kind::removed, .resource = r, .invoke = before,
                             .complete = now_ns(), .result = outcome::ok,
                             .fence = asking != w_.holders.end() ? asking->second.second : 0,
                             .foreign = foreign,
                             .detail = victim != w_.holders.end() && foreign
                                           ? "the lock of process " + std::to_string(victim->second.first)
                                           : ""});
            }
            co_return removed;
        });
    }

    // -- shared_lease_store, as the node has it -------------------------------------

    dl::awaitable<dl::result<dl::answer>> put_shared(std::string_view resource, const dl::owner_token& owner,
                                                     dl::duration ttl, std::uint32_t permits)
    {
        auto& node = *w_.nodes[node_];
        const auto scaled = store_ttl(ttl);
        return exchange<dl::answer>([&node, r = std::string{resource}, owner, scaled, permits] {
            return node.put_shared(r, owner, scaled, permits);
        });
    }

    dl::awaitable<dl::result<dl::answer>> put_exclusive(std::string_view resource, const dl::owner_token& waiter,
                                                        const dl::owner_token& owner, dl::duration ttl)
    {
        auto& node = *w_.nodes[node_];
        const auto scaled = store_ttl(ttl);
        return exchange<dl::answer>([&node, r = std::string{resource}, waiter, owner, scaled] {
            return node.put_exclusive(r, waiter, owner, scaled);
        });
    }

    dl::awaitable<dl::result<void>> extend_shared(std::string_view resource, const dl::owner_token& owner,
                                                  dl::duration ttl)
    {
        auto& node = *w_.nodes[node_];
        const auto scaled = store_ttl(ttl);
        return exchange<void>(
            [&node, r = std::string{resource}, owner, scaled] { return node.extend_shared(r, owner, scaled); });
    }

    dl::awaitable<dl::result<void>> release_shared(std::string_view resource, const dl::owner_token& owner)
    {
        auto& node = *w_.nodes[node_];
        return exchange<void>([&node, r = std::string{resource}, owner] { return node.release_shared(r, owner); });
    }

    dl::awaitable<dl::result<void>> withdraw(std::string_view resource, const dl::owner_token& waiter)
    {
        auto& node = *w_.nodes[node_];
        return exchange<void>([&node, r = std::string{resource}, waiter] { return node.withdraw(r, waiter); });
    }

    dl::awaitable<dl::result<void>> downgrade(std::string_view resource, const dl::owner_token& owner)
    {
        auto& node = *w_.nodes[node_];
        return exchange<void>([&node, r = std::string{resource}, owner] { return node.downgrade(r, owner); });
    }

    // -- electing_store, as the node has it -------------------------------------------

    dl::awaitable<dl::result<void>> proclaim(std::string_view resource, const dl::owner_token& owner,
                                             dl::fence_token epoch, std::string_view value)
    {
        auto& node = *w_.nodes[node_];
        return exchange<void>([&node, r = std::string{resource}, owner, epoch, v = std::string{value}] {
            return node.proclaim(r, owner, epoch, v);
        });
    }

    dl::awaitable<dl::result<dl::leader_info>> leader(std::string_view resource)
    {
        auto& node = *w_.nodes[node_];
        return exchange<dl::leader_info>([&node, r = std::string{resource}] { return node.leader(r); });
    }

    dl::awaitable<dl::result<dl::fence_token>> next_fence(std::string_view resource)
    {
        auto& node = *w_.nodes[node_];
        return exchange<dl::fence_token>([&node, r = std::string{resource}] { return node.next_fence(r); });
    }

    dl::awaitable<dl::result<dl::fence_token>> raise_fence(std::string_view resource, dl::fence_token floor)
    {
        auto& node = *w_.nodes[node_];
        return exchange<dl::fence_token>([&node, r = std::string{resource}, floor] { return node.raise_fence(r, floor); });
    }

private:
    template <class T>
    struct pending {
        explicit pending(asio::any_io_executor ex) : wake{ex} {}
        std::optional<dl::result<T>> reply;
        dl::timer wake;
        bool abandoned = false;
    };

    dl::duration store_ttl(dl::duration ttl) const
    {
        // A node whose clock runs at `rate` times the client's lets the key expire
        // after ttl / rate of the client's time.
        return std::chrono::duration_cast<dl::duration>(ttl / w_.rates[node_]);
    }

    // Sends one request: it travels, is applied (or lost), and its reply travels back
    // (or is lost). The caller waits at most the timeout; a request still in flight
    // then may be applied later, as on a real network.
    template <class T, class Apply>
    dl::awaitable<dl::result<T>> exchange(Apply apply)
    {
        if (cut_)
            co_return dl::errc::store_unavailable;
        auto state = std::make_shared<pending<T>>(w_.io.get_executor());
        const auto there = w_.uniform(w_.cfg.faults.max_delay);
        const auto back = w_.uniform(w_.cfg.faults.max_delay);
        const bool lose_request = w_.chance(w_.cfg.faults.drop_request);
        const bool lose_reply = !lose_request && w_.chance(w_.cfg.faults.drop_reply);
        if (lose_request || lose_reply)
            ++w_.faults_injected;
        if (there + back > w_.cfg.faults.timeout)
            ++w_.faults_injected; // a late reply the client will not wait for
        state->wake.expires_after(w_.cfg.faults.timeout);
        asio::co_spawn(w_.io,
                       deliver<T>(state, std::function<dl::awaitable<dl::result<T>>()>{std::move(apply)}, there, back,
                                  lose_request, lose_reply),
                       asio::detached);
        co_await state->wake.async_wait(asio::experimental::as_tuple(asio::use_awaitable));
        if (state->reply)
            co_return *state->reply;
        state->abandoned = true;
        co_return dl::errc::outcome_unknown;
    }

    template <class T>
    static dl::awaitable<void> deliver(std::shared_ptr<pending<T>> state,
                                       std::function<dl::awaitable<dl::result<T>>()> apply, dl::duration there,
                                       dl::duration back, bool lose_request, bool lose_reply)
    {
        dl::timer wire{co_await asio::this_coro::executor};
        wire.expires_after(there);
        co_await wire.async_wait(asio::experimental::as_tuple(asio::use_awaitable));
        if (lose_request)
            co_return;
        auto reply = co_await apply();
        wire.expires_after(back);
        co_await wire.async_wait(asio::experimental::as_tuple(asio::use_awaitable));
        if (lose_reply || state->abandoned)
            co_return;
        state->reply = std::move(reply);
        state->wake.cancel();
    }

    world& w_;
    int process_;
    std::size_t node_;
    bool cut_ = false;
};

/// Retry with full jitter drawn from the run's seeded source (the library's own
/// jitter is seeded from the OS, which a replay cannot repeat). A custom policy.
struct seeded_backoff {
    using policy_kind = dl::retry_policy_tag;
    world* w;
    dl::duration initial = 2ms;
    dl::duration max = 30ms;
    dl::duration deadline = 2s;
    std::optional<dl::duration> next_delay(const dl::attempt& a) const
    {
        auto ceiling = initial;
        for (std::size_t i = 1; i < a.number && ceiling < max; ++i)
            ceiling *= 2;
        return w->uniform(std::min(ceiling, max));
    }
};

/// Runs one seed to the end and checks its history.
outcome_of_run run(const config& c);

} // namespace fault::sim
