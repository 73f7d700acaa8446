// The store conformance suite on the in-process stores: the TTL store and the
// session store (the model of etcd and ZooKeeper).
#include "conformance/suite.hpp"

namespace {

using namespace std::chrono_literals;
namespace dl = distlock;

struct memory_ttl {
    static constexpr const char* name = "memory_ttl";
    using backend = dl::memory::store;
    static constexpr bool notifies = true;
    static constexpr bool quorum = false;
    asio::io_context io;
    dl::memory::store store{io};

    // One store object serves every client: it is the server.
    backend& client(std::size_t) { return store; }
    bool held(std::string_view resource) const { return store.inspect(resource).has_value(); }
    void end_lock(const dl::lease& l) { store.expire(l.resource()); }
    void lose_next_reply(std::size_t) { store.fail_next(dl::memory::fault::reply_lost); }
    void refuse_next(std::size_t) { store.fail_next(dl::memory::fault::unavailable); }
    void hold_replies(bool on) { store.set_reply_delay(on ? dl::duration{500ms} : dl::duration::zero()); }
    asio::awaitable<void> close(std::size_t) { return store.close(); }
    static dl::duration longest_validity(const dl::lock_options& o) { return o.ttl - o.drift(); }
};

struct memory_sessions {
    static constexpr const char* name = "memory_sessions";
    using backend = dl::memory::session_store;
    static constexpr bool notifies = true;
    static constexpr bool quorum = false;
    static constexpr dl::duration session_ttl = 3s;
    asio::io_context io;
    dl::memory::session_server server;
    dl::memory::session_store clients[3] = {{io, server, {.session_ttl = session_ttl}},
                                            {io, server, {.session_ttl = session_ttl}},
                                            {io, server, {.session_ttl = session_ttl}}};

    backend& client(std::size_t i) { return clients[i]; }
    bool held(std::string_view resource) { return server.holder(resource).has_value(); }
    std::size_t waiters(std::string_view resource) { return server.entries(resource); }
    std::unique_ptr<backend> make_client()
    {
        return std::make_unique<backend>(io, server, dl::memory::session_config{.session_ttl = session_ttl});
    }
    void end_lock(const dl::lease& l)
    {
        for (auto& c : clients)
            if (server.holder(l.resource()) && server.holder(l.resource())->session == c.session_id())
                server.expire(c.session_id());
    }
    void lose_next_reply(std::size_t i) { clients[i].fail_next(dl::memory::fault::reply_lost); }
    void refuse_next(std::size_t i) { clients[i].fail_next(dl::memory::fault::unavailable); }
    void hold_replies(bool on)
    {
        for (auto& c : clients)
            c.set_reply_delay(on ? dl::duration{500ms} : dl::duration::zero());
    }
    asio::awaitable<void> close(std::size_t i) { return clients[i].close(); }
    static dl::duration longest_validity(const dl::lock_options&) { return session_ttl; }
    // The server ends a client's session at once.
    static constexpr dl::duration session_end_within = 0s;
    asio::awaitable<void> end_session(std::size_t i)
    {
        server.expire(clients[i].session_id());
        co_return;
    }
};

[[maybe_unused]] const bool suite_registered = test::conformance::register_suite<memory_ttl, memory_sessions>("[memory]");

} // namespace
