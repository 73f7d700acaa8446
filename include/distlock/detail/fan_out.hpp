// distlock/detail/fan_out.hpp: run one operation on every node of a quorum in
// parallel and decide as soon as the replies so far settle the question.
//
// Design note. Each node's operation runs as its own detached coroutine on that
// node's executor and owns copies of its arguments, because it may outlive the
// caller: a slow or blackholed node answers after the decision, or after the caller
// was cancelled. Such a straggler's reply goes to `on_late`, which is how a late
// grant gets released instead of staying held until its TTL. Replies are collected
// under a mutex because nodes may run on different threads; the caller waits on an
// auto_reset_event, which is safe to set from any thread and honours the caller's
// cancellation.
#pragma once

#include <distlock/clock.hpp>
#include <distlock/backend/auto_reset_event.hpp>
#include <distlock/backend/deferred.hpp>
#include <distlock/result.hpp>
#include <distlock/store.hpp>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/this_coro.hpp>

#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

namespace distlock::detail {

/// One node's answer and how long it took.
template <class T>
struct reply {
    result<T> value = errc::outcome_unknown;
    duration latency{};
};

template <class T>
using replies = std::vector<std::optional<reply<T>>>;

/// What the caller decided, for replies that arrive after it decided: a late grant is
/// kept when the caller's operation succeeded (it is part of the lease) and released
/// when it failed. Replies that arrive before the caller concluded are parked.
class late_verdict {
public:
    void on_late(std::function<void()> release)
    {
        std::unique_lock lock{mutex_};
        if (!keep_) {
            parked_.push_back(std::move(release));
            return;
        }
        const bool keep = *keep_;
        lock.unlock();
        if (!keep)
            release();
    }

    void conclude(bool keep)
    {
        std::vector<std::function<void()>> parked;
        {
            std::lock_guard lock{mutex_};
            keep_ = keep;
            parked.swap(parked_);
        }
        if (!keep)
            for (auto& release : parked)
                release();
    }

private:
    std::mutex mutex_;
    std::optional<bool> keep_;
    std::vector<std::function<void()>> parked_;
};

// The node store's count of work in flight (backend::lifetime::track()), shared so
// that a parked late reply keeps it; empty for nodes that do not count.
template <class Node>
std::shared_ptr<void> in_flight_on(const Node& node)
{
    if constexpr (requires { node.track(); }) {
        using work = decltype(node.track());
        return std::make_shared<work>(node.track());
    } else {
        return nullptr;
    }
}

inline awaitable<void> still_counted(std::shared_ptr<void> counted, awaitable<void> work)
{
    co_await std::move(work);
    counted.reset();
}

/// Runs `op(node, i)` on every node (`nodes.node(i)` is copied into each node's
/// coroutine: a reference such as store_ref, never the store itself), returns the replies received when `settled(replies)`
/// first holds (or all have answered, or the caller was cancelled: then `cancelled` is
/// set). Replies arriving later are passed to `on_late(node, i, reply)`, a coroutine:
/// at once, or, with a `verdict`, once the caller concluded that they are to be released.
template <class T, class Nodes, class Op, class Settled, class OnLate>
awaitable<replies<T>> fan_out(Nodes& nodes, Op op, Settled settled, OnLate on_late,
                              bool* cancelled = nullptr, std::shared_ptr<late_verdict> verdict = nullptr)
{
    struct shared {
        std::mutex mutex;
        replies<T> got;
        std::size_t answered = 0;
        bool decided = false;
        backend::auto_reset_event done;
        shared(asio::any_io_executor ex, std::size_t n) : got(n), done{std::move(ex)} {}
    };
    const auto n = nodes.size();
    auto state = std::make_shared<shared>(co_await asio::this_coro::executor, n);

    for (std::size_t i = 0; i < n; ++i) {
        // A copy of the node's reference: a straggler may outlive `nodes`.
        auto node = nodes.node(i);
        using node_type = decltype(node);
        asio::co_spawn(
            node.get_executor(),
            [](std::shared_ptr<shared> state, node_type node, std::size_t i, Op op,
               Settled settled, OnLate on_late, std::shared_ptr<late_verdict> verdict) -> awaitable<void> {
                // Counted by the node's store until the reply and what follows from it
                // (a late grant's release) are done: its close() waits for them.
                auto counted = in_flight_on(node);
                const auto start = clock::now();
                reply<T> r{co_await op(node, i), clock::now() - start};
                bool late = false;
                {
                    std::lock_guard lock{state->mutex};
                    late = state->decided;
                    if (!late) {
                        state->got[i] = r;
                        ++state->answered;
                        if (state->answered == state->got.size() || settled(state->got)) {
                            state->decided = true;
                            state->done.set();
                        }
                    }
                }
                if (!late)
                    co_return;
                if (!verdict) {
                    co_await on_late(node, i, std::move(r));
                    co_return;
                }
                verdict->on_late([node, i, on_late, r, counted = std::move(counted)] {
                    asio::co_spawn(node.get_executor(), still_counted(counted, on_late(node, i, r)), asio::detached);
                });
            }(state, node, i, op, settled, on_late, verdict),
            asio::detached);
    }

    // The event's async_wait rather than its wait(): one coroutine frame less per
    // quorum operation.
    bool woken = state->done.try_take();
    if (!woken) {
        (void)co_await state->done.async_wait(time_point::max(), backend::as_tuple_awaitable<T>());
        woken = state->done.try_take();
    }
    std::lock_guard lock{state->mutex};
    if (!woken) {
        // Cancelled: whatever answers later is a straggler.
        state->decided = true;
        if (cancelled)
            *cancelled = true;
    }
    co_return state->got;
}

} // namespace distlock::detail
