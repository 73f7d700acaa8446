// distlock/memory/store.hpp: the in-process store. Thread-safe; models every store
// concept; the embedded default for demos and tests, with fault injection so that
// users can test their own failure handling.
#pragma once

#include <distlock/clock.hpp>
#include <distlock/detail/wakeup.hpp>
#include <distlock/options.hpp>
#include <distlock/owner_token.hpp>
#include <distlock/result.hpp>
#include <distlock/store.hpp>

#include <asio/any_io_executor.hpp>
#include <asio/awaitable.hpp>
#include <asio/execution_context.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/this_coro.hpp>
#include <asio/use_awaitable.hpp>

#include <algorithm>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

namespace distlock::memory {

/// A fault the next operations of a memory store suffer.
enum class fault {
    unavailable = 1, ///< Not applied; fails with errc::store_unavailable.
    reply_lost,      ///< Applied, but the reply is lost; fails with errc::outcome_unknown.
    garbage,         ///< Not applied; the "reply" cannot be parsed: errc::protocol_error.
};

/// What the store holds for one resource.
struct lock_state {
    owner_token owner;
    fence_token fence = 0;
    duration remaining{};  ///< Time to live left.
};

namespace detail {

struct string_hash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const noexcept
    {
        return std::hash<std::string_view>{}(s);
    }
};

} // namespace detail

class store {
public:
    using executor_type = asio::any_io_executor;

    explicit store(executor_type ex) : ex_{std::move(ex)} {}

    template <class ExecutionContext>
        requires std::is_convertible_v<ExecutionContext&, asio::execution_context&>
    explicit store(ExecutionContext& ctx) : store(executor_type{ctx.get_executor()})
    {}

    store(const store&) = delete;
    store& operator=(const store&) = delete;

    executor_type get_executor() const noexcept { return ex_; }

    // -- Store primitives (see distlock/store.hpp) ---------------------------------

    awaitable<result<fence_token>> put_if_absent(std::string_view resource, const owner_token& owner,
                                                 duration ttl)
    {
        return perform<fence_token>([this, resource, owner, ttl]() -> result<fence_token> {
            auto& s = slot_for(resource);
            if (live(s))
                return errc::contended;
            grant(s, owner, ttl);
            return s.fence;
        });
    }

    awaitable<result<fence_token>> conditional_write(std::string_view resource,
                                                     const owner_token& owner, duration ttl,
                                                     std::optional<fence_token> expected_version)
    {
        return perform<fence_token>(
            [this, resource, owner, ttl, expected_version]() -> result<fence_token> {
                auto& s = slot_for(resource);
                const bool ok = expected_version ? s.fence == *expected_version : !live(s);
                if (!ok)
                    return errc::contended;
                grant(s, owner, ttl);
                return s.fence;
            });
    }

    awaitable<result<void>> extend(std::string_view resource, const owner_token& owner, duration ttl)
    {
        return perform<void>([this, resource, owner, ttl]() -> result<void> {
            auto* s = find(resource);
            if (!s || !live(*s) || s->owner != owner)
                return errc::not_owner;
            s->expires = clock::now() + ttl;
            return success();
        });
    }

    awaitable<result<void>> release(std::string_view resource, const owner_token& owner)
    {
        return perform<void>([this, resource, owner]() -> result<void> {
            auto* s = find(resource);
            if (!s || !live(*s) || s->owner != owner)
                return errc::not_owner;
            s->held = false;
            notify(*s);
            return success();
        });
    }

    awaitable<result<fence_token>> next_fence(std::string_view resource)
    {
        return perform<fence_token>([this, resource]() -> result<fence_token> {
            return ++slot_for(resource).fence;
        });
    }

    awaitable<result<fence_token>> raise_fence(std::string_view resource, fence_token floor)
    {
        return perform<fence_token>([this, resource, floor]() -> result<fence_token> {
            auto& s = slot_for(resource);
            s.fence = std::max(s.fence, floor);
            return s.fence;
        });
    }

    /// A registration for release notifications of one resource.
    class watcher {
    public:
        watcher(watcher&& other) noexcept
            : store_{std::exchange(other.store_, nullptr)}, resource_{std::move(other.resource_)},
              wakeup_{std::move(other.wakeup_)}
        {}
        watcher& operator=(watcher&&) = delete;
        ~watcher()
        {
            if (store_)
                store_->unwatch(resource_, wakeup_);
        }

        /// True when a release was seen, false when `until` came first or on cancellation.
        awaitable<bool> wait(time_point until) { return wakeup_->wait(until); }

    private:
        friend class store;
        watcher(store* s, std::string resource, std::shared_ptr<distlock::detail::wakeup> w)
            : store_{s}, resource_{std::move(resource)}, wakeup_{std::move(w)}
        {}
        store* store_;
        std::string resource_;
        std::shared_ptr<distlock::detail::wakeup> wakeup_;
    };

    /// Listens for releases of `resource` from now until the watcher is destroyed.
    awaitable<watcher> watch(std::string_view resource) { co_return watch_now(resource); }

    watcher watch_now(std::string_view resource)
    {
        auto w = std::make_shared<distlock::detail::wakeup>(ex_);
        std::lock_guard lock{mutex_};
        slot_for(resource).watchers.push_back(w);
        return watcher{this, std::string{resource}, std::move(w)};
    }

    // -- Fault injection -----------------------------------------------------------

    /// The next `count` operations suffer `f`.
    void fail_next(fault f, std::size_t count = 1)
    {
        std::lock_guard lock{mutex_};
        faults_.insert(faults_.end(), count, f);
    }

    /// Every reply is delayed by `d` after the operation was applied (a slow network).
    /// A caller that stops waiting sees errc::outcome_unknown: the operation happened.
    void set_reply_delay(duration d)
    {
        std::lock_guard lock{mutex_};
        reply_delay_ = d;
    }

    /// While offline, every operation fails with errc::store_unavailable; state is kept.
    void set_online(bool online)
    {
        std::lock_guard lock{mutex_};
        online_ = online;
    }

    /// Forgets every lock and fencing counter, as a store restarted without persistence.
    void lose_state()
    {
        std::lock_guard lock{mutex_};
        for (auto& [name, s] : slots_) {
            s.held = false;
            s.fence = 0;
            notify(s);
        }
    }

    // -- Inspection, for tests -----------------------------------------------------

    /// The live lock on `resource`, if any.
    std::optional<lock_state> inspect(std::string_view resource) const
    {
        std::lock_guard lock{mutex_};
        const auto it = slots_.find(resource);
        if (it == slots_.end() || !live(it->second))
            return std::nullopt;
        return lock_state{it->second.owner, it->second.fence, it->second.expires - clock::now()};
    }

    /// The fencing counter of `resource` (0 if never locked).
    fence_token current_fence(std::string_view resource) const
    {
        std::lock_guard lock{mutex_};
        const auto it = slots_.find(resource);
        return it == slots_.end() ? 0 : it->second.fence;
    }

    /// How many locks are live now.
    std::size_t live_locks() const
    {
        std::lock_guard lock{mutex_};
        return static_cast<std::size_t>(std::count_if(
            slots_.begin(), slots_.end(), [](const auto& kv) { return live(kv.second); }));
    }

    /// How many watchers are registered (they must not accumulate).
    std::size_t watchers() const
    {
        std::lock_guard lock{mutex_};
        std::size_t n = 0;
        for (const auto& [name, s] : slots_)
            n += s.watchers.size();
        return n;
    }

private:
    struct slot {
        owner_token owner;
        time_point expires{};
        fence_token fence = 0;  // survives release: tokens must keep growing
        bool held = false;
        std::vector<std::shared_ptr<distlock::detail::wakeup>> watchers;
    };

    struct gate {
        std::error_code refusal;
        duration delay{};
        bool reply_lost = false;
    };

    static bool live(const slot& s) noexcept { return s.held && clock::now() < s.expires; }

    void grant(slot& s, const owner_token& owner, duration ttl)
    {
        s.owner = owner;
        s.expires = clock::now() + ttl;
        s.held = true;
        ++s.fence;
    }

    static void notify(slot& s)
    {
        // Signalling never runs the waiter inline, so it is safe under the mutex.
        for (auto& w : s.watchers)
            w->signal();
    }

    slot* find(std::string_view resource)
    {
        const auto it = slots_.find(resource);
        return it == slots_.end() ? nullptr : &it->second;
    }

    // Slots stay after release so fencing tokens keep growing: one small entry per
    // resource ever locked.
    slot& slot_for(std::string_view resource)
    {
        if (auto* s = find(resource))
            return *s;
        return slots_.emplace(std::string{resource}, slot{}).first->second;
    }

    void unwatch(const std::string& resource, const std::shared_ptr<distlock::detail::wakeup>& w)
    {
        std::lock_guard lock{mutex_};
        if (auto* s = find(resource))
            std::erase(s->watchers, w);
    }

    // Runs one operation: consults the injected faults, applies `apply` under the
    // mutex, then delivers the reply (late, or not at all, if so injected).
    template <class T, class Apply>
    awaitable<result<T>> perform(Apply apply)
    {
        gate g;
        result<T> r = errc::outcome_unknown;
        {
            std::lock_guard lock{mutex_};
            g.delay = reply_delay_;
            if (!online_) {
                g.refusal = errc::store_unavailable;
            } else if (!faults_.empty()) {
                const auto f = faults_.front();
                faults_.pop_front();
                if (f == fault::unavailable)
                    g.refusal = errc::store_unavailable;
                else if (f == fault::garbage)
                    g.refusal = errc::protocol_error;
                else
                    g.reply_lost = true;
            }
            if (!g.refusal)
                r = apply();
        }
        if (g.refusal)
            co_return g.refusal;
        if (g.delay > duration::zero()) {
            timer t{co_await asio::this_coro::executor, g.delay};
            auto [ec] = co_await t.async_wait(asio::experimental::as_tuple(asio::use_awaitable));
            if (ec)
                co_return errc::outcome_unknown;
        }
        if (g.reply_lost)
            co_return errc::outcome_unknown;
        co_return r;
    }

    executor_type ex_;
    mutable std::mutex mutex_;
    std::unordered_map<std::string, slot, detail::string_hash, std::equal_to<>> slots_;
    std::deque<fault> faults_;
    duration reply_delay_{};
    bool online_ = true;
};

static_assert(put_if_absent_store<store>);
static_assert(owner_checked_store<store>);
static_assert(conditional_write_store<store>);
static_assert(fencing_counter_store<store>);
static_assert(release_notifying_store<store>);

} // namespace distlock::memory
