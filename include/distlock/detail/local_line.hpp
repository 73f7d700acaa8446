// distlock/detail/local_line.hpp: waiters of one process for one resource of one
// store, served in arrival order.
//
// Design note. Without it, a holder that releases and asks again at once nearly
// always wins: its next request is already on the wire while a waiter still has to
// be told of the release and send its own. So the coroutines of one process that
// wait for the same resource on the same store queue up here: only the head of the
// line tries the store (and listens for releases); the others sleep until they reach
// the head. A lock() that finds others already waiting joins the back of the line
// instead of trying first. Between processes the store decides, as before. The check
// on the uncontended path is one relaxed atomic load.
#pragma once

#include <distlock/clock.hpp>
#include <distlock/backend/wakeup.hpp>

#include <algorithm>
#include <atomic>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>

namespace distlock::detail {

class local_line {
public:
    static local_line& instance()
    {
        static local_line line;
        return line;
    }

    /// Whether anyone waits for `resource` of `store` in this process.
    bool busy(const void* store, std::string_view resource)
    {
        if (waiting_.load(std::memory_order_relaxed) == 0)
            return false;
        std::lock_guard lock{mutex_};
        return lines_.find(key{store, std::string{resource}}) != lines_.end();
    }

    /// A place in the line; leaving (destruction) hands the head to the next.
    class ticket {
    public:
        ticket() = default;
        ticket(const ticket&) = delete;
        ticket& operator=(const ticket&) = delete;
        ~ticket() { leave(); }

        bool joined() const noexcept { return wakeup_ != nullptr; }

        void join(const void* store, std::string_view resource, asio::any_io_executor ex)
        {
            if (joined())
                return;
            store_ = store;
            resource_ = std::string{resource};
            wakeup_ = std::make_shared<backend::wakeup>(std::move(ex));
            instance().enter(store_, resource_, wakeup_);
        }

        bool at_head() const { return joined() && instance().head(store_, resource_) == wakeup_.get(); }

        /// Sleeps until this ticket may be at the head, or until `until`.
        // A template only to be compiled where it is used (backend/store_shell.hpp says why).
        template <class Unused = void>
        awaitable<void> wait(time_point until)
        {
            (void)co_await wakeup_->wait(until);
        }

        void leave()
        {
            if (joined())
                instance().exit(store_, resource_, wakeup_);
            wakeup_.reset();
        }

    private:
        const void* store_ = nullptr;
        std::string resource_;
        std::shared_ptr<backend::wakeup> wakeup_;
    };

private:
    using key = std::pair<const void*, std::string>;

    void enter(const void* store, const std::string& resource, const std::shared_ptr<backend::wakeup>& w)
    {
        std::lock_guard lock{mutex_};
        lines_[key{store, resource}].push_back(w);
        waiting_.fetch_add(1, std::memory_order_relaxed);
    }

    const backend::wakeup* head(const void* store, const std::string& resource)
    {
        std::lock_guard lock{mutex_};
        const auto it = lines_.find(key{store, resource});
        return it == lines_.end() || it->second.empty() ? nullptr : it->second.front().get();
    }

    void exit(const void* store, const std::string& resource, const std::shared_ptr<backend::wakeup>& w)
    {
        std::lock_guard lock{mutex_};
        const auto it = lines_.find(key{store, resource});
        if (it == lines_.end())
            return;
        auto& line = it->second;
        const bool was_head = !line.empty() && line.front() == w;
        line.erase(std::remove(line.begin(), line.end(), w), line.end());
        waiting_.fetch_sub(1, std::memory_order_relaxed);
        if (line.empty())
            lines_.erase(it);
        else if (was_head)
            line.front()->signal();
    }

    std::mutex mutex_;
    std::map<key, std::deque<std::shared_ptr<backend::wakeup>>> lines_;
    std::atomic<std::size_t> waiting_{0};
};

} // namespace distlock::detail
