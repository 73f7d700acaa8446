// distlock/zookeeper/detail/watches.hpp: the session's local waiters on exists-watches,
// by path, and the nodes its leases are bound to, with the watch that tells each
// lease of its node's deletion.
//
// A waiter is registered before the request that sets the watch, so a notification
// that overtakes the reply is not missed; one notification wakes every local waiter
// of its path; a lost session wakes them all (their nodes went with it).
//
// A bound node is watched for its lease, so that a lock taken back (revoked, or its
// node deleted by hand) ends the lease. The keeper sets the watch at its next ping
// after the bind, with an exists request that is also the check that the node is
// still there. A watch rather than an exists per lease at every ping: a watch costs
// nothing while nothing happens, and one ping keeps serving every lock of the store
// however many it holds. The server spends a watch on any event of its node, and
// drops the watches of a connection that closes: a change of the node's data (its
// holder's mark) or a new connection puts the node back to "not watched", and the
// next ping sets the watch again, its exists seeing a deletion that came in between.
// So a lease hears of its node's deletion at once when watched, and within one ping
// (a third of the session timeout) otherwise.
#pragma once

#include <distlock/backend/wakeup.hpp>
#include <distlock/claim.hpp>

#include <asio/any_io_executor.hpp>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
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

    /// Adds `w` as a waiter on `path` too: one waiter woken by the first of several
    /// paths' notifications.
    void add(const std::string& path, const std::shared_ptr<watch>& w)
    {
        std::lock_guard lock{mutex_};
        watches_[path].push_back(w);
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

/// How far the server watches a bound node for its lease.
enum class node_watch {
    none,    ///< not watched: the keeper's next ping sets the watch
    setting, ///< the exists that sets it is on its way
    set,     ///< the server tells of the node's deletion
};

/// The nodes that hold a lock for the current session, by path, and the lease bound to
/// each. Not thread-safe: the session guards it with its own mutex.
class grant_registry {
public:
    using listener_ref = std::weak_ptr<session_listener>;

    struct grant {
        std::int64_t czxid = 0;
        std::int64_t session = 0;
        listener_ref listener; ///< empty until bound
        bool bound = false;
        node_watch watch = node_watch::none;
    };

    /// Node `path` (fence `czxid`) holds a lock for session `session`.
    void granted(std::string path, std::int64_t czxid, std::int64_t session)
    {
        erase(czxid);
        erase(path);
        path_of_[czxid] = path;
        grants_[std::move(path)] = grant{czxid, session, {}, false, node_watch::none};
        while (path_of_.size() > max_grants) // grants whose lock() call vanished unbound
            erase(path_of_.begin()->first);
    }

    /// Binds a lease to the grant `czxid` of `session`, whose node is a child of
    /// `parent` (the lease's resource). False, and the grant forgotten, when there is
    /// no such grant.
    bool bind(std::string_view parent, std::int64_t czxid, std::int64_t session, listener_ref l)
    {
        const auto at = path_of_.find(czxid);
        if (at == path_of_.end())
            return false;
        const std::string_view path = at->second;
        auto& g = grants_.at(at->second);
        if (g.session != session || path.size() <= parent.size() || !path.starts_with(parent) ||
            path[parent.size()] != '/' || path.find('/', parent.size() + 1) != std::string_view::npos) {
            erase(czxid);
            return false;
        }
        g.listener = std::move(l);
        g.bound = true;
        return true;
    }

    /// The lease of grant `czxid` needs nothing more (released, or its node deleted by
    /// its own client).
    void erase(std::int64_t czxid)
    {
        const auto at = path_of_.find(czxid);
        if (at == path_of_.end())
            return;
        grants_.erase(at->second);
        path_of_.erase(at);
    }

    /// The same, by the node's path.
    void erase(const std::string& path)
    {
        const auto at = grants_.find(path);
        if (at == grants_.end())
            return;
        path_of_.erase(at->second.czxid);
        grants_.erase(at);
    }

    /// The bound nodes the server does not watch: now being watched (setting). The
    /// keeper sends an exists with a watch for each and reports with watched() or gone().
    std::vector<std::string> due()
    {
        std::vector<std::string> out;
        for (auto& [path, g] : grants_)
            if (g.bound && g.watch == node_watch::none) {
                g.watch = node_watch::setting;
                out.push_back(path);
            }
        return out;
    }

    /// The exists of a due node came back: the watch is set (`set`), or not (a failed
    /// request: due again at the next ping). A watch spent while its request was on
    /// its way stays spent.
    void watched(const std::string& path, bool set)
    {
        const auto at = grants_.find(path);
        if (at != grants_.end() && at->second.watch == node_watch::setting)
            at->second.watch = set ? node_watch::set : node_watch::none;
    }

    /// The node is gone: its grant is forgotten; its lease, if one is bound, is returned
    /// to be told.
    std::optional<listener_ref> gone(const std::string& path)
    {
        const auto at = grants_.find(path);
        if (at == grants_.end())
            return std::nullopt;
        std::optional<listener_ref> told;
        if (at->second.bound)
            told = at->second.listener;
        path_of_.erase(at->second.czxid);
        grants_.erase(at);
        return told;
    }

    /// The server spent the node's watch on another event (a change of its data).
    void spent(const std::string& path)
    {
        if (const auto at = grants_.find(path); at != grants_.end())
            at->second.watch = node_watch::none;
    }

    /// A new connection: the server watches nothing for the session until told again.
    void reconnected()
    {
        for (auto& [path, g] : grants_)
            g.watch = node_watch::none;
    }

    /// The leases bound now.
    std::vector<listener_ref> listeners() const
    {
        std::vector<listener_ref> out;
        for (const auto& [path, g] : grants_)
            if (g.bound && !g.listener.expired())
                out.push_back(g.listener);
        return out;
    }

    /// Forgets every grant (the session is over or in doubt); the leases bound to them.
    std::vector<listener_ref> clear()
    {
        auto out = listeners();
        grants_.clear();
        path_of_.clear();
        return out;
    }

    std::size_t size() const noexcept { return grants_.size(); }
    std::size_t bound() const noexcept
    {
        return static_cast<std::size_t>(
            std::count_if(grants_.begin(), grants_.end(), [](const auto& g) { return g.second.bound; }));
    }
    /// The state of the watch on `path` (none when unknown), for tests.
    node_watch watch_of(const std::string& path) const
    {
        const auto at = grants_.find(path);
        return at == grants_.end() ? node_watch::none : at->second.watch;
    }

private:
    static constexpr std::size_t max_grants = 65536;

    std::map<std::string, grant> grants_;        // by the node's path
    std::map<std::int64_t, std::string> path_of_; // the path of each grant, by czxid
};

} // namespace distlock::zookeeper::detail
