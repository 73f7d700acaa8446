// distlock/quorum.hpp: N independent stores acting as one backend (Redlock).
#pragma once

#include <distlock/util/config.hpp>
#include <distlock/backend/lifetime.hpp>
#include <distlock/backend/store_ref.hpp>
#include <distlock/store.hpp>

#include <asio/any_io_executor.hpp>

#include <cstddef>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace distlock {

/// A store that can tell which server it reached, without I/O (redis::store: the
/// server's run_id learned at connect), so that a quorum never counts one server
/// twice. nullopt: not known yet; empty: the server would not tell.
template <class S>
concept identified_store = requires(const S& s) {
    { s.known_server_identity() } -> std::same_as<std::optional<std::string>>;
};

/// A quorum of independent stores of one type. A lock on it holds when a majority
/// (size/2 + 1) of the stores granted it. The stores are referenced, not owned: they
/// must outlive the quorum and every lease taken through it.
///
/// The nodes must be distinct servers, or one server's grant would count twice (a
/// "majority" from one server while another is down). The same store object twice
/// is refused before any I/O (errc::invalid_argument); stores that know their
/// server's identity (identified_store) are compared once they answered, and a
/// lock granted by two nodes of one identity is given back and refused the same way.
template <store Store>
class quorum {
public:
    using store_type = Store;

    template <class... Stores>
        requires(std::same_as<Stores, Store> && ...)
    explicit quorum(Stores&... nodes) : nodes_{&nodes...}
    {}

    explicit quorum(std::span<Store* const> nodes) : nodes_(nodes.begin(), nodes.end()) {}

    std::size_t size() const noexcept { return nodes_.size(); }
    std::size_t majority() const noexcept { return nodes_.size() / 2 + 1; }
    Store& node(std::size_t i) const noexcept { return *nodes_[i]; }

    /// Counts a lock() call's attempt on every node until the guards are dropped: a
    /// node whose store closes meanwhile waits for it, as one store's close() does,
    /// so that a grant the attempt brings back is given back on every node first.
    std::vector<backend::lifetime::work> track() const
    {
        std::vector<backend::lifetime::work> works;
        works.reserve(nodes_.size());
        for (auto* n : nodes_)
            works.push_back(store_ref<Store>{*n}.track());
        return works;
    }

    /// Every node's store open, none closing: a lease taken now can be kept and
    /// released on each.
    bool open() const
    {
        for (auto* n : nodes_)
            if (!store_ref<Store>{*n}.open())
                return false;
        return true;
    }

    /// The first node's executor; each node's own operations run on its own executor.
    /// An empty quorum has no executor; locking on it fails with invalid_argument.
    asio::any_io_executor get_executor() const
    {
        return nodes_.empty() ? asio::any_io_executor{} : nodes_.front()->get_executor();
    }

private:
    std::vector<Store*> nodes_;
};

} // namespace distlock
