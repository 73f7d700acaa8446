// The store conformance suite on Redis: one server with three clients, and a Redlock
// quorum of three servers with three clients each made of one store per server.
#include "conformance/suite.hpp"
#include "redis_support.hpp"

#include <array>
#include <memory>
#include <vector>

namespace {

using namespace std::chrono_literals;
namespace dl = distlock;

// Whether `server` holds the lock key of `resource`, asked on a connection of its own.
bool holds(const test::redis_server& server, std::string_view resource)
{
    asio::io_context io;
    dl::redis::store probe{io, server.config()};
    return test::peek(io, server.config(), probe.lock_key(resource)).has_value();
}

// Deletes the lock key of `resource` on `server`, as if its TTL had run out.
void drop(const test::redis_server& server, std::string_view resource)
{
    asio::io_context io;
    dl::redis::store probe{io, server.config()};
    test::run(io, [&]() -> asio::awaitable<void> {
        auto command = dl::redis::resp::command({"DEL", probe.lock_key(resource)});
        auto r = co_await probe.execute_command(std::move(command));
        REQUIRE(r);
    });
}

struct redis_single {
    using backend = dl::redis::store;
    static constexpr bool notifies = true;
    static constexpr bool quorum = false;
    test::redis_server server;
    asio::io_context io;
    std::array<std::unique_ptr<dl::redis::store>, 3> clients{std::make_unique<dl::redis::store>(io, server.config()),
                                                             std::make_unique<dl::redis::store>(io, server.config()),
                                                             std::make_unique<dl::redis::store>(io, server.config())};

    backend& client(std::size_t i) { return *clients[i]; }
    bool held(std::string_view resource) const { return holds(server, resource); }
    void end_lock(const dl::lease& l) { drop(server, l.resource()); }
    static dl::duration longest_validity(const dl::lock_options& o) { return o.ttl - o.drift(); }
};

struct redis_quorum {
    using backend = dl::quorum<dl::redis::store>;
    static constexpr bool notifies = false;
    static constexpr bool quorum = true;
    std::array<test::redis_server, 3> servers;
    asio::io_context io;
    std::vector<std::unique_ptr<dl::redis::store>> stores;
    std::vector<std::unique_ptr<backend>> quorums;

    redis_quorum()
    {
        for (int c = 0; c < 3; ++c) {
            std::vector<dl::redis::store*> nodes;
            for (auto& s : servers) {
                stores.push_back(std::make_unique<dl::redis::store>(io, s.config()));
                nodes.push_back(stores.back().get());
            }
            quorums.push_back(std::make_unique<backend>(std::span<dl::redis::store* const>{nodes}));
        }
    }

    backend& client(std::size_t i) { return *quorums[i]; }
    bool held(std::string_view resource) const
    {
        for (const auto& s : servers)
            if (holds(s, resource))
                return true;
        return false;
    }
    void end_lock(const dl::lease& l)
    {
        for (const auto& s : servers)
            drop(s, l.resource());
    }
    static dl::duration longest_validity(const dl::lock_options& o) { return o.ttl - o.drift(); }
};

} // namespace

DISTLOCK_CONFORMANCE("[redis]", redis_single, redis_quorum)
