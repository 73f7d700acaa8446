// distlock/zookeeper/detail/watches.hpp: the session's local waiters on exists-watches,
// by path. A waiter is registered before the request that sets the watch, so a
// notification that overtakes the reply is not missed; one notification wakes every
// local waiter of its path; a lost session wakes them all (their nodes went with it).
#pragma once

#include <distlock/backend/wakeup.hpp>

#include <asio/any_io_executor.hpp>

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace distlock::zookeeper::detail {

/// A local waiter on one path's exists-watch.
struct watch {
    explicit watch(asio::any_io_executor ex) : wake{std::move(ex)} {}
    distlock::backend::wakeup wake;
    std::atomic<bool> fired{false};
    std::atomic<bool> deleted{false}; ///< fired by the node's deletion (not a session's end)
    std::atomic<bool> changed{false}; ///< fired by a change of the node's data (its holder's mark)
};

/// The waiters of one session, by path. Thread-safe; waking happens outside its lock.
class watch_registry {
public:
    std::shared_ptr<watch> add(const std::string& path, asio::any_io_executor ex)
    {
        auto w = std::make_shared<watch>(std::move(ex));
        std::lock_guard lock{mutex_};
        watches_[path].push_back(w);
        return w;
    }

    void remove(const std::string& path, const std::shared_ptr<watch>& w)
    {
        std::lock_guard lock{mutex_};
        const auto it = watches_.find(path);
        if (it == watches_.end())
            return;
        std::erase(it->second, w);
        if (it->second.empty())
            watches_.erase(it);
    }

    /// The paths watched now: what SetWatches restores on a resumed session.
    std::vector<std::string> paths() const
    {
        std::vector<std::string> out;
        std::lock_guard lock{mutex_};
        for (const auto& [path, waiters] : watches_)
            out.push_back(path);
        return out;
    }

    /// A notification for `path`: wakes its waiters (the server's watch is spent).
    void fire(const std::string& path, bool deleted, bool changed)
    {
        std::vector<std::shared_ptr<watch>> woken;
        {
            std::lock_guard lock{mutex_};
            const auto it = watches_.find(path);
            if (it == watches_.end())
                return;
            woken.swap(it->second);
            watches_.erase(it);
        }
        for (auto& w : woken) {
            w->deleted = deleted;
            w->changed = changed;
            w->fired = true;
            w->wake.signal();
        }
    }

    /// The session is lost: every waiter wakes (to queue again in a new session).
    void fire_all()
    {
        std::map<std::string, std::vector<std::shared_ptr<watch>>> woken;
        {
            std::lock_guard lock{mutex_};
            woken.swap(watches_);
        }
        for (auto& [path, ws] : woken)
            for (auto& w : ws) {
                w->fired = true;
                w->wake.signal();
            }
    }

    std::size_t size() const
    {
        std::lock_guard lock{mutex_};
        return watches_.size();
    }

private:
    mutable std::mutex mutex_;
    std::map<std::string, std::vector<std::shared_ptr<watch>>> watches_;
};

} // namespace distlock::zookeeper::detail
