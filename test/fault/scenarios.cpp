// Fault scenarios against real redis-server processes: holders that are separate
// processes (paused with SIGSTOP, killed with SIGKILL), servers killed and restarted,
// and the network between them broken by the fault proxy. Every scenario records a
// history (worker processes print theirs) and the checker judges it.
#include "fault_support.hpp"
#include "proxy.hpp"
#include "tally.hpp"

#include <distlock/redis.hpp>

#include <asio/ip/tcp.hpp>
#include <asio/steady_timer.hpp>

#include <signal.h>

#include <functional>
#include <span>
#include <thread>

using namespace test;
using namespace fault;

namespace {

/// The last operation of kind `k` by `process`.
const op* last(const std::vector<op>& h, int process, kind k)
{
    const op* found = nullptr;
    for (const auto& o : h)
        if (o.process == process && o.kind == k)
            found = &o;
    return found;
}

// In-process clients record their own operations.

template <class Mutex>
dl::awaitable<dl::result<dl::lease>> locked(Mutex& m, int process, std::vector<op>& h, bool once = false)
{
    const auto t = now_ns();
    dl::result<dl::lease> got = dl::errc::outcome_unknown;
    if (once)
        got = co_await m.try_lock();
    else
        got = co_await m.lock();
    op o{.process = process, .kind = kind::acquire, .resource = m.resource(), .invoke = t, .complete = now_ns()};
    if (got) {
        o.fence = got->fence();
        o.valid_until = got->valid_until().time_since_epoch().count();
    } else {
        o.result = outcome::fail;
        o.detail = got.error().message();
    }
    h.push_back(o);
    co_return got;
}

dl::awaitable<dl::result<void>> unlocked(dl::lease& l, int process, std::vector<op>& h)
{
    const auto t = now_ns();
    const auto resource = l.resource();
    const auto fence = l.fence();
    auto r = co_await l.unlock();
    h.push_back(op{.process = process, .kind = kind::release, .resource = resource, .invoke = t,
                   .complete = now_ns(), .result = r ? outcome::ok : outcome::fail, .fence = fence});
    co_return r;
}

dl::awaitable<dl::result<void>> written(dl::redis::store& data, const dl::lease& l, int process, std::vector<op>& h)
{
    const auto t = now_ns();
    auto w = co_await data.fenced_write("data:" + l.resource(), l.fence(), std::to_string(process));
    h.push_back(op{.process = process, .kind = kind::write, .resource = l.resource(), .invoke = t,
                   .complete = now_ns(), .result = w ? outcome::ok : outcome::fail, .fence = l.fence()});
    co_return w;
}

/// Process 2 waits for "job", takes it and writes under it.
dl::lease take_over(asio::io_context& io, dl::redis::store& store, std::vector<op>& h)
{
    dl::lease out;
    run(io, [&]() -> asio::awaitable<void> {
        redis_mutex m{store, "job", {.ttl = 5s}, backoff{.initial = 10ms, .max = 50ms, .deadline = 10s}};
        auto got = co_await locked(m, 2, h);
        REQUIRE(got);
        out = std::move(*got);
        auto w = co_await written(store, out, 2, h);
        REQUIRE(w);
    });
    return out;
}

asio::awaitable<void> sleep_for(std::chrono::milliseconds d)
{
    asio::steady_timer t{co_await asio::this_coro::executor, d};
    co_await t.async_wait(asio::use_awaitable);
}

/// Checks a scenario's history, counts it in the summary and fails on a violation.
fault::report judge(const std::vector<op>& h, std::size_t faults, fault::check_options options = {})
{
    auto r = fault::check(h, options);
    fault::tally::get().add(r, faults);
    INFO(r.summary());
    CHECK(r.clean());
    return r;
}

} // namespace

TEST_CASE("faults: a holder paused past its TTL is fenced off, and told on resume", "[fault][process]")
{
    ++fault::tally::get().scenarios;
    redis_server server;
    std::vector<op> h;
    // Process 1 renews with a watchdog: the pause starves it too.
    auto a = worker({"hold", "1", std::to_string(server.port()), "job", "400", "1"});
    REQUIRE(read_until(*a, h, is(kind::acquire)));
    REQUIRE(h.back().result == outcome::ok);
    a->kill(SIGSTOP); // the GC pause

    asio::io_context io;
    dl::redis::store store{io, server.config()};
    dl::lease b = take_over(io, store, h);

    a->kill(SIGCONT);
    REQUIRE(read_until(*a, h, is(kind::lost))); // reported when it runs again
    a->write_line("write");
    REQUIRE(read_until(*a, h, is(kind::write)));
    a->write_line("unlock");
    REQUIRE(read_until(*a, h, is(kind::release)));
    a->write_line("exit");
    CHECK(a->wait() == std::optional<int>{0});
    CHECK(last(h, 1, kind::write)->result == outcome::fail);   // its fence is older
    CHECK(last(h, 1, kind::release)->result == outcome::fail); // lease_lost, nothing removed
    run(io, [&]() -> asio::awaitable<void> {
        auto r = co_await unlocked(b, 2, h);
        CHECK(r.has_value()); // process 1's release left process 2's lock alone
    });
    probe(h, server.config(), "job");
    judge(h, 2);
}

TEST_CASE("faults: a holder killed with SIGKILL is replaced within TTL plus retry delay", "[fault][process]")
{
    ++fault::tally::get().scenarios;
    redis_server server;
    std::vector<op> h;
    constexpr auto ttl = 500ms;
    auto a = worker({"hold", "1", std::to_string(server.port()), "job", "500", "0"});
    REQUIRE(read_until(*a, h, is(kind::acquire)));
    asio::io_context io;
    dl::redis::store store{io, server.config()};
    run(io, [&]() -> asio::awaitable<void> {
        redis_mutex m{store, "job", {.ttl = 2s}, backoff{.initial = 5ms, .max = 50ms, .deadline = 10s}};
        const auto killed = now_ns();
        a->kill(SIGKILL);
        h.push_back(op{.process = 1, .kind = kind::crash, .resource = "job", .invoke = killed, .complete = killed});
        auto got = co_await locked(m, 2, h);
        REQUIRE(got);
        co_await unlocked(*got, 2, h);
    });
    // The bound: TTL, the drift margin, one retry delay, and a second of scheduling
    // slack for a loaded machine (a liveness bound, not a performance claim).
    judge(h, 1, {.liveness_bound = ns(ttl + 50ms + 12ms + 1s)});
}

TEST_CASE("faults: a partitioned holder reports loss at its local deadline, before the store hands the lock on",
          "[fault][process][proxy]")
{
    ++fault::tally::get().scenarios;
    redis_server server;
    fault::proxy net{server.port()};
    std::vector<op> h;
    auto a = worker({"hold", "1", std::to_string(net.port()), "job", "600", "1"});
    REQUIRE(read_until(*a, h, is(kind::acquire)));
    net.set(fault::direction::to_server, {.blackhole = true});
    net.set(fault::direction::to_client, {.blackhole = true});

    asio::io_context io;
    dl::redis::store store{io, server.config()};
    dl::lease b = take_over(io, store, h);
    REQUIRE(read_until(*a, h, is(kind::lost)));
    // The holder's own deadline (its grant or last extension) came before the store
    // could hand the lock on: it had been told to stop trusting the lease in time.
    fault::nanos deadline = 0;
    for (const auto& o : h)
        if (o.process == 1 && (o.kind == kind::acquire || o.kind == kind::extend))
            deadline = std::max(deadline, o.valid_until);
    CHECK(deadline < last(h, 2, kind::acquire)->complete);

    net.heal();
    a->write_line("write");
    REQUIRE(read_until(*a, h, is(kind::write)));
    CHECK(last(h, 1, kind::write)->result == outcome::fail);
    a->write_line("exit");
    CHECK(a->wait().value_or(-1) == 0);
    run(io, [&]() -> asio::awaitable<void> { co_await unlocked(b, 2, h); });
    probe(h, server.config(), "job");
    judge(h, net.faults_injected());
}

TEST_CASE("faults: replies so slow that validity runs out: not acquired, and released on every node",
          "[fault][proxy][redlock]")
{
    ++fault::tally::get().scenarios;
    redis_server s0, s1, s2;
    fault::proxy p0{s0.port()}, p1{s1.port()};
    asio::io_context io;
    dl::redis::store n0{io, via(p0.port())}, n1{io, via(p1.port())}, n2{io, via(s2.port())};
    dl::quorum<dl::redis::store> nodes{n0, n1, n2};
    std::vector<op> h;
    // Connected, with the scripts loaded: from now on every exchange is one slow trip.
    run(io, [&]() -> asio::awaitable<void> {
        redlock warm{nodes, "warm-up"};
        auto got = co_await warm.lock();
        REQUIRE(got);
        co_await got->unlock();
    });
    p0.set(fault::direction::to_client, {.latency = 1500ms});
    p1.set(fault::direction::to_client, {.latency = 1500ms});
    // TTL 120 s with a drift margin of 99 %: 1.2 s of validity, gone when the second
    // grant arrives after 1.5 s, while the keys would live on for two minutes. The
    // TTL is far beyond anything this scenario takes even on a loaded machine, so
    // a probe that finds nothing means the lock was given back, not that it expired.
    const dl::lock_options options{.ttl = 120s, .drift_factor = 0.99};
    run(io, [&]() -> asio::awaitable<void> {
        redlock m{nodes, "job", options};
        auto got = co_await locked(m, 1, h, true);
        REQUIRE_FALSE(got);
        CHECK(got.error() == dl::errc::validity_exhausted);
    });
    // No node still holds the lock: it was given back.
    for (const auto* s : {&s0, &s1, &s2})
        probe(h, s->config(), "job");
    judge(h, 2);
}

namespace {

std::string render(const dl::redis::resp::value& v)
{
    std::string out = std::to_string(static_cast<int>(v.type)) + ":" + v.text + ":" + std::to_string(v.integer);
    for (const auto& e : v.elements)
        out += "[" + render(e) + "]";
    return out;
}

/// Runs a fixed sequence of commands and lock operations; returns what came back.
std::vector<std::string> exercise(asio::io_context& io, dl::redis::store& store, const std::string& tag)
{
    std::vector<std::string> seen;
    run(io, [&]() -> asio::awaitable<void> {
        std::string binary{"a\0b\r\n$5\r\n*1\r\n", 14};
        const std::string big(3000, 'x'); // sent a few bytes at a time
        const std::vector<std::vector<std::string>> commands{
            {"SET", tag + ":bin", binary},
            {"GET", tag + ":bin"},
            {"SET", tag + ":big", big},
            {"GET", tag + ":big"},
            {"RPUSH", tag + ":list", "1", "", "three"},
            {"LRANGE", tag + ":list", "0", "-1"},
            {"HSET", tag + ":hash", "f", "v"},
            {"HGETALL", tag + ":hash"},
            {"INCRBY", tag + ":n", "-42"},
            {"GET", tag + ":missing"},
            {"NOSUCHCOMMAND"},
            {"EVAL", "return {1, {2, 'x'}, redis.status_reply('OK'), false}", "0"},
        };
        for (const auto& c : commands) {
            std::string encoded;
            dl::redis::resp::append_command_range(encoded, c);
            dl::diagnostics diag;
            auto r = co_await store.execute_command(std::move(encoded), &diag);
            seen.push_back(r ? render(r.value()) : "error " + r.error().message() + " " + diag.to_string());
        }
        redis_mutex m{store, tag + ":lock", {.ttl = 5s}};
        for (int i = 0; i < 10; ++i) {
            auto got = co_await m.lock();
            seen.push_back(got ? "locked" : got.error().message());
            if (!got)
                continue;
            auto w = co_await store.fenced_write(tag + ":data", got->fence(), binary);
            seen.push_back(w ? "written" : w.error().message());
            auto released = co_await got->unlock();
            seen.push_back(released ? "released" : released.error().message());
        }
    });
    return seen;
}

} // namespace

TEST_CASE("faults: replies sliced into 1-3 byte segments and delayed are parsed identically", "[fault][proxy]")
{
    ++fault::tally::get().scenarios;
    redis_server server;
    fault::proxy net{server.port()};
    for (auto d : {fault::direction::to_server, fault::direction::to_client})
        net.set(d, {.latency = 1ms, .jitter = 3ms, .slice = 3});
    asio::io_context io;
    dl::redis::store direct{io, server.config()}, sliced{io, via(net.port())};
    const auto expected = exercise(io, direct, "direct");
    const auto got = exercise(io, sliced, "sliced");
    REQUIRE(expected.size() == got.size());
    for (std::size_t i = 0; i < expected.size(); ++i) {
        INFO("step " << i);
        CHECK(got[i] == expected[i]);
    }
    fault::tally::get().faults += 2;
}

TEST_CASE("faults: an extension answered after the local deadline does not revive the lease", "[fault][proxy]")
{
    ++fault::tally::get().scenarios;
    redis_server server;
    fault::proxy net{server.port()};
    asio::io_context io;
    dl::redis::store slow{io, via(net.port())}, direct{io, server.config()};
    std::vector<op> h;
    std::vector<dl::renewal_event> renewals;
    dl::observe::callback observer{[&](const dl::event& e) {
        if (auto* r = std::get_if<dl::renewal_event>(&e))
            renewals.push_back(*r);
    }};
    run(io, [&]() -> asio::awaitable<void> {
        dl::basic_distributed_mutex<dl::redis::store, dl::renew::watchdog, dl::observe::callback> m{
            slow, "job", {.ttl = 600ms}, observer};
        // Connected with every script loaded, so that each exchange below is one trip.
        {
            dl::basic_distributed_mutex<dl::redis::store, dl::renew::watchdog> warm{slow, "warm-up", {.ttl = 90ms}};
            auto w = co_await warm.lock();
            REQUIRE(w);
            co_await sleep_for(100ms); // an extension at 30 and 60 ms
            co_await w->unlock();
        }
        auto got = co_await locked(m, 1, h);
        REQUIRE(got);
        auto lease = std::move(*got);
        // The first extension goes out at 200 ms; its reply will take 900 ms.
        net.set(fault::direction::to_client, {.latency = 900ms});
        const auto why = co_await lease.lost();
        const auto t = now_ns();
        h.push_back(op{.process = 1, .kind = kind::lost, .resource = "job", .invoke = t, .complete = t,
                       .fence = lease.fence()});
        CHECK(why == dl::errc::lease_lost);
        CHECK(renewals.empty()); // lost at the deadline, with the extension still out
        const auto deadline = lease.valid_until();
        // The extension's reply arrives late (the server applied it) ...
        co_await sleep_for(1500ms);
        REQUIRE(renewals.size() >= 1);
        CHECK_FALSE(renewals.front().error);
        // ... and changes nothing: the validity did not move, the lease stays lost.
        CHECK(renewals.front().valid_until == deadline);
        CHECK(lease.valid_until() == deadline);
        CHECK_FALSE(lease.valid());
        auto r = co_await unlocked(lease, 1, h);
        CHECK(r.error() == dl::errc::lease_lost);
        net.heal();

        redis_mutex next{direct, "job", {.ttl = 5s}, backoff{.initial = 10ms, .max = 50ms, .deadline = 10s}};
        auto other = co_await locked(next, 2, h);
        REQUIRE(other);
        co_await unlocked(*other, 2, h);
    });
    probe(h, server.config(), "job");
    judge(h, 1);
}

TEST_CASE("faults: Redlock with 2 of 5 nodes blackholed locks; with 3 it fails and leaves nothing behind",
          "[fault][proxy][redlock]")
{
    ++fault::tally::get().scenarios;
    std::vector<std::unique_ptr<redis_server>> servers;
    std::vector<std::unique_ptr<fault::proxy>> nets;
    asio::io_context io;
    std::vector<std::unique_ptr<dl::redis::store>> stores;
    std::vector<dl::redis::store*> refs;
    for (int i = 0; i < 5; ++i) {
        servers.push_back(std::make_unique<redis_server>());
        nets.push_back(std::make_unique<fault::proxy>(servers.back()->port()));
        stores.push_back(std::make_unique<dl::redis::store>(io, via(nets.back()->port(), 1s)));
        refs.push_back(stores.back().get());
    }
    dl::quorum<dl::redis::store> nodes{std::span<dl::redis::store* const>{refs}};
    auto blackhole = [&](int i) {
        nets[i]->set(fault::direction::to_server, {.blackhole = true});
        nets[i]->set(fault::direction::to_client, {.blackhole = true});
    };
    std::vector<op> h;
    blackhole(0);
    blackhole(1);
    run(io, [&]() -> asio::awaitable<void> {
        redlock m{nodes, "job", {.ttl = 1s}, backoff{.initial = 10ms, .max = 50ms, .deadline = 5s}};
        auto got = co_await locked(m, 1, h);
        REQUIRE(got);
        co_await written(*stores[2], *got, 1, h);
        co_await unlocked(*got, 1, h);
        blackhole(2);
        redlock short_wait{nodes, "job", {.ttl = 1s}, backoff{.initial = 10ms, .max = 50ms, .deadline = 2s}};
        auto refused = co_await locked(short_wait, 2, h);
        REQUIRE_FALSE(refused);
        CHECK((refused.error() == dl::errc::quorum_not_reached || refused.error() == dl::errc::timeout));
    });
    // The nodes that granted the last attempt gave it back at once (well within its TTL).
    probe(h, servers[3]->config(), "job");
    probe(h, servers[4]->config(), "job");
    // The held requests now reach the servers late: whatever they set, nobody tracks,
    // and the TTL must clear it.
    for (auto& n : nets)
        n->heal();
    std::this_thread::sleep_for(1500ms);
    for (auto& s : servers)
        probe(h, s->config(), "job");
    std::size_t faults = 0;
    for (auto& n : nets)
        faults += n->faults_injected();
    judge(h, faults);
}

namespace {

/// A server that answers every command with `-LOADING`, as Redis does while it loads
/// its dataset. Runs on `io`; commands are counted with the library's RESP parser.
void loading_server(asio::io_context& io, asio::ip::tcp::acceptor& acceptor)
{
    asio::co_spawn(io, [&acceptor]() -> asio::awaitable<void> {
        for (;;) {
            auto [ec, socket] = co_await acceptor.async_accept(asio::experimental::as_tuple(asio::use_awaitable));
            if (ec)
                co_return;
            asio::co_spawn(acceptor.get_executor(), [](asio::ip::tcp::socket s) -> asio::awaitable<void> {
                std::string pending;
                char buf[4096];
                for (;;) {
                    auto [rec, n] = co_await s.async_read_some(asio::buffer(buf), asio::experimental::as_tuple(asio::use_awaitable));
                    if (rec)
                        co_return;
                    pending.append(buf, n);
                    std::string replies;
                    for (;;) {
                        const auto r = dl::redis::resp::parse(pending);
                        if (r.status != dl::redis::resp::status::complete)
                            break;
                        pending.erase(0, r.consumed);
                        replies += "-LOADING Redis is loading the dataset in memory\r\n";
                    }
                    auto [wec, m] = co_await asio::async_write(s, asio::buffer(replies), asio::experimental::as_tuple(asio::use_awaitable));
                    if (wec)
                        co_return;
                }
            }(std::move(socket)), asio::detached);
        }
    }, asio::detached);
}

} // namespace

TEST_CASE("faults: Redlock nodes answering READONLY, NOAUTH and LOADING count as refusals", "[fault][redlock]")
{
    ++fault::tally::get().scenarios;
    redis_server h0, h1, h2, master;
    redis_server replica{{"--replicaof", "127.0.0.1", std::to_string(master.port())}};
    redis_server locked_out{{"--requirepass", "secret"}};
    asio::io_context io;
    asio::ip::tcp::acceptor acceptor{io, {asio::ip::make_address("127.0.0.1"), 0}};
    loading_server(io, acceptor);
    dl::redis::store a{io, via(h0.port(), 1s)}, b{io, via(h1.port(), 1s)}, c{io, via(h2.port(), 1s)},
        readonly{io, via(replica.port(), 1s)}, noauth{io, via(locked_out.port(), 1s)},
        loading{io, via(acceptor.local_endpoint().port(), 1s)};
    std::vector<op> h;
    run(io, [&]() -> asio::awaitable<void> {
        dl::quorum<dl::redis::store> three_healthy{a, b, c, readonly, noauth};
        redlock m{three_healthy, "job", {.ttl = 30s}};
        auto got = co_await locked(m, 1, h, true);
        REQUIRE(got);
        co_await unlocked(*got, 1, h);

        dl::quorum<dl::redis::store> two_healthy{a, b, readonly, noauth, loading};
        redlock n{two_healthy, "job", {.ttl = 30s}};
        auto refused = co_await locked(n, 2, h, true);
        REQUIRE_FALSE(refused);
        CHECK(refused.error() == dl::errc::quorum_not_reached);
        // Each refusing node's words, named by its place in the quorum: the replica's
        // and the locked-out server's replies, the loading server's handshake answer.
        dl::diagnostics diag;
        auto again = co_await n.try_lock(diag);
        REQUIRE_FALSE(again);
        const auto words = diag.to_string();
        CHECK(words.find("node 2: READONLY") != std::string::npos);
        CHECK(words.find("node 3: NOAUTH") != std::string::npos);
        CHECK(words.find("node 4: LOADING") != std::string::npos);
    });
    // The two grants were given back at once: the 30 s TTL cannot explain their absence.
    probe(h, h0.config(), "job");
    probe(h, h1.config(), "job");
    judge(h, 3);
    acceptor.close();
}

namespace {

/// Process 1 takes a Redlock lease that holds on nodes 0 and 1 only: while it
/// acquires, process 3 holds the lock on node 2 alone (through `third`, a direct
/// connection to node 2), and lets it go afterwards.
dl::lease bare_majority(asio::io_context& io, dl::quorum<dl::redis::store>& nodes, dl::redis::store& third,
                        std::vector<op>& h, dl::duration ttl)
{
    dl::lease out;
    run(io, [&]() -> asio::awaitable<void> {
        redis_mutex only_node_2{third, "job", {.ttl = 30s}};
        auto blocker = co_await only_node_2.lock();
        REQUIRE(blocker);
        redlock m{nodes, "job", {.ttl = ttl}};
        auto got = co_await locked(m, 1, h, true);
        REQUIRE(got);
        out = std::move(*got);
        // The lease was decided by nodes 0 and 1; node 2's answer may still be on its
        // way. A PING on the same (first in, first out) connection comes back after
        // it: only then is node 2 freed, so that no late grant joins the lease.
        auto ping = dl::redis::resp::command({"PING"});
        auto pong = co_await nodes.node(2).execute_command(std::move(ping));
        REQUIRE(pong);
        auto freed = co_await blocker->unlock();
        REQUIRE(freed);
    });
    return out;
}

} // namespace

TEST_CASE("faults: a Redlock node restarted empty at once lets a second holder in; after a TTL it does not",
          "[fault][redlock][negative]")
{
    ++fault::tally::get().scenarios;
    redis_server s0, s1, s2;
    asio::io_context io;
    dl::redis::store n0{io, via(s0.port(), 1s)}, n1{io, via(s1.port(), 1s)}, n2{io, via(s2.port(), 1s)},
        direct2{io, via(s2.port(), 1s)};
    dl::quorum<dl::redis::store> nodes{n0, n1, n2};

    SECTION("at once: the documented limit, and the checker sees it")
    {
        std::vector<op> h;
        auto first = bare_majority(io, nodes, direct2, h, 10s);
        s1.restart(); // without persistence: node 1 forgets process 1's lock
        run(io, [&]() -> asio::awaitable<void> {
            // (The first try meets the connection the restart broke, and reconnects.)
            redlock m{nodes, "job", {.ttl = 1s}, backoff{.initial = 10ms, .max = 50ms, .deadline = 5s}};
            auto second = co_await locked(m, 2, h);
            INFO((second ? std::string{"acquired"} : second.error().message()));
            CHECK(second.has_value()); // nodes 1 and 2 grant it: two holders
        });
        const auto r = fault::check(h, {.fences_grow = false});
        fault::tally::get().add(r, 2, true);
        bool exclusion = false;
        for (const auto& v : r.violations)
            exclusion = exclusion || v.starts_with("exclusion");
        INFO(r.summary());
        CHECK(exclusion);
    }
    SECTION("after a TTL: no overlap")
    {
        std::vector<op> h;
        auto first = bare_majority(io, nodes, direct2, h, 1s);
        s1.kill();
        // Process 2 tries all along; node 1 comes back empty only after the TTL, so
        // it cannot help process 2 to a majority while process 1's lease is valid.
        std::thread restart{[&] {
            std::this_thread::sleep_for(1100ms);
            s1.start();
        }};
        run(io, [&]() -> asio::awaitable<void> {
            redlock m{nodes, "job", {.ttl = 1s}, backoff{.initial = 10ms, .max = 50ms, .deadline = 5s}};
            auto second = co_await locked(m, 2, h);
            REQUIRE(second);
            co_await unlocked(*second, 2, h);
        });
        restart.join();
        // Fences are not promised across an empty restart (the node's counter is gone).
        judge(h, 2, {.fences_grow = false});
    }
}

TEST_CASE("faults: dozens of processes on one fenced counter lose nothing", "[fault][process][contention]")
{
    ++fault::tally::get().scenarios;
    redis_server server;
    constexpr int processes = 24, rounds = 5;
    std::vector<std::unique_ptr<child>> workers;
    for (int i = 1; i <= processes; ++i)
        workers.push_back(worker({"contend", std::to_string(i), std::to_string(server.port()), "counter", "2000",
                                  std::to_string(rounds)}));
    std::vector<op> h;
    for (auto& w : workers) {
        read_until(*w, h, [](const op&) { return false; }, std::chrono::seconds{120});
        CHECK(w->wait(std::chrono::seconds{10}) == std::optional<int>{0});
    }
    std::size_t writes = 0;
    for (const auto& o : h)
        writes += o.kind == kind::write && o.result == outcome::ok;
    CHECK(writes == processes * rounds);
    asio::io_context io;
    dl::redis::store store{io, server.config()};
    std::optional<std::string> counter;
    run(io, [&]() -> asio::awaitable<void> {
        auto v = co_await store.fenced_read("counter:counter");
        if (v)
            counter = v.value();
    });
    CHECK(counter == std::to_string(processes * rounds));
    probe(h, server.config(), "counter");
    judge(h, 0);
}

TEST_CASE("faults: sorted multi-locks under contention, with a resource held too long and a holder killed",
          "[fault][process][multi]")
{
    ++fault::tally::get().scenarios;
    redis_server server;
    asio::io_context io;
    dl::redis::store store{io, server.config()};
    std::vector<op> h;
    // Process 100 holds r3 for longer than the workers' 3 s deadline: every set that
    // includes r3 fails for a while, and must leave none of its other resources held.
    dl::lease blocker;
    run(io, [&]() -> asio::awaitable<void> {
        redis_mutex m{store, "r3", {.ttl = 10s}};
        auto got = co_await locked(m, 100, h);
        REQUIRE(got);
        blocker = std::move(*got);
    });
    constexpr int processes = 6;
    std::vector<std::unique_ptr<child>> workers;
    for (int i = 1; i <= processes; ++i)
        workers.push_back(worker({"multi", std::to_string(i), std::to_string(server.port()), "1500", "6"}));
    // Kill process 1 once it holds a set.
    REQUIRE(read_until(*workers[0], h, [](const op& o) { return o.kind == kind::acquire && o.result == outcome::ok; }));
    const auto killed = now_ns();
    workers[0]->kill(SIGKILL);
    // What it printed before it died (it may have released that set, and taken another,
    // before the signal landed) is history too: read to the end of its output.
    read_until(*workers[0], h, [](const op&) { return false; }, std::chrono::seconds{5});
    for (const auto r : {"r0", "r1", "r2", "r3"})
        h.push_back(op{.process = 1, .kind = kind::crash, .resource = r, .invoke = killed, .complete = killed});
    std::this_thread::sleep_for(3500ms);
    run(io, [&]() -> asio::awaitable<void> { co_await unlocked(blocker, 100, h); });
    for (int i = 1; i < processes; ++i) {
        read_until(*workers[i], h, [](const op&) { return false; }, std::chrono::seconds{120});
        CHECK(workers[i]->wait(std::chrono::seconds{10}) == std::optional<int>{0});
    }
    std::size_t refused = 0, granted = 0;
    for (const auto& o : h)
        if (o.kind == kind::acquire && o.process != 100)
            (o.result == outcome::ok ? granted : refused) += 1;
    CHECK(refused > 0); // some sets ran into r3
    CHECK(granted > 0);
    // Right after the last worker: the killed holder's TTL ran out long ago, and every
    // other set was released, the failed ones included.
    for (const auto r : {"r0", "r1", "r2", "r3"})
        probe(h, server.config(), r);
    judge(h, 2);
}

namespace {

/// A shared grant's acquire, recorded with its mode for the checker's rules.
void record_grant(std::vector<op>& h, int process, const std::string& resource, nanos invoke,
                  const dl::result<dl::lease>& got, std::uint32_t permits)
{
    op o{.process = process, .kind = kind::acquire, .resource = resource, .invoke = invoke, .complete = now_ns()};
    if (got) {
        o.fence = got->fence();
        o.valid_until = got->valid_until().time_since_epoch().count();
        o.shared = got->shared();
        o.permits = permits;
        o.slot = got->slot().value_or(0);
    } else {
        o.result = outcome::fail;
        o.detail = got.error().message();
    }
    h.push_back(o);
}

} // namespace

TEST_CASE("faults: readers, a writer and permits whose replies are lost: no overlap, no extra permit, nothing left",
          "[fault][proxy][shared]")
{
    ++fault::tally::get().scenarios;
    redis_server server;
    fault::proxy net{server.port()};
    asio::io_context io;
    // Each client on a connection of its own through the proxy; replies that take
    // longer than the request timeout are lost to the client (the server applied them).
    std::vector<std::unique_ptr<dl::redis::store>> clients;
    for (int i = 0; i < 8; ++i)
        clients.push_back(std::make_unique<dl::redis::store>(io, via(net.port(), 300ms)));
    dl::redis::store direct{io, server.config()};
    using rw_lock = dl::basic_distributed_shared_mutex<dl::redis::store, backoff>;
    using permits = dl::basic_distributed_semaphore<dl::redis::store, backoff>;
    const backoff patient{.initial = 5ms, .max = 50ms, .deadline = 30s};
    std::vector<op> h;
    std::size_t faults = 0, grants = 0;
    int running = 0;
    run(io, [&]() -> asio::awaitable<void> {
        const auto ex = co_await asio::this_coro::executor;
        const auto section = [&](int process, bool writer, bool permit) -> asio::awaitable<void> {
            auto& store = *clients[static_cast<std::size_t>(process - 1)];
            rw_lock rw{store, "rw", {.ttl = 2s}, patient};
            permits pool{store, "pool", {.permits = 2, .lease = {.ttl = 2s}}, patient};
            for (int round = 0; round < 12; ++round) {
                const auto t = now_ns();
                dl::result<dl::lease> got = dl::errc::invalid_argument;
                if (permit)
                    got = co_await pool.acquire();
                else if (writer)
                    got = co_await rw.lock();
                else
                    got = co_await rw.lock_shared();
                record_grant(h, process, permit ? "pool" : "rw", t, got, permit ? 2 : 0);
                if (!got)
                    continue;
                ++grants;
                co_await sleep_for(5ms);
                co_await unlocked(*got, process, h);
            }
            --running;
        };
        for (int p = 1; p <= 8; ++p) {
            ++running;
            // Processes 1-3 read, 4 writes, 5-8 take permits of 2.
            asio::co_spawn(ex, section(p, p == 4, p >= 5), asio::detached);
        }
        // Every 40 ms a reply to the clients is held past their timeout, for 1.5 s.
        for (int i = 0; i < 35 && running > 0; ++i) {
            co_await sleep_for(30ms);
            net.set(fault::direction::to_client, {.latency = 400ms});
            co_await sleep_for(10ms);
            net.heal();
            ++faults;
        }
        while (running > 0)
            co_await sleep_for(20ms);
        CHECK(grants > 0);
        // Nothing left behind: a writer and both permits are granted at once, or within
        // a TTL where a grant whose reply was lost is given up by its owner's clean-up.
        rw_lock writer{direct, "rw", {.ttl = 2s}, backoff{.initial = 5ms, .max = 50ms, .deadline = 3s}};
        permits pool{direct, "pool", {.permits = 2, .lease = {.ttl = 2s}},
                     backoff{.initial = 5ms, .max = 50ms, .deadline = 3s}};
        auto w = co_await writer.lock();
        REQUIRE(w);
        auto a = co_await pool.acquire();
        auto b = co_await pool.acquire();
        REQUIRE(a);
        REQUIRE(b);
        for (auto* l : {&*w, &*a, &*b})
            (void)co_await l->unlock();
        for (auto& c : clients)
            co_await c->close();
    });
    judge(h, faults);
}

TEST_CASE("faults: a leader paused past its term is replaced; its work is cancelled before its term is given up; "
          "its late writes are refused",
          "[fault][process][election]")
{
    ++fault::tally::get().scenarios;
    redis_server server;
    std::vector<op> h;
    // Process 1 leads with a 400 ms term and writes with its epoch every 20 ms.
    auto a = worker({"elect", "1", std::to_string(server.port()), "leader", "400"});
    REQUIRE(read_until(*a, h, is(kind::acquire)));
    REQUIRE(h.back().result == outcome::ok);
    REQUIRE(read_until(*a, h, is(kind::write)));
    a->kill(SIGSTOP); // the GC pause, past its term

    // Process 2 is elected with a larger epoch and writes with it.
    asio::io_context io;
    dl::redis::store store{io, server.config()};
    dl::basic_leader_election<dl::redis::store, backoff> election{store, "leader", {.term = {.ttl = 2s}},
                                                                  backoff{.initial = 10ms, .max = 50ms}};
    dl::term second;
    run(io, [&]() -> asio::awaitable<void> {
        const auto t = now_ns();
        auto got = co_await election.campaign_until(dl::clock::now() + 10s, "2");
        REQUIRE(got);
        second = std::move(*got);
        h.push_back(op{.process = 2, .kind = kind::acquire, .resource = "leader", .invoke = t, .complete = now_ns(),
                       .result = outcome::ok, .fence = second.epoch(),
                       .valid_until = second.valid_until().time_since_epoch().count()});
        const auto w0 = now_ns();
        auto w = co_await store.fenced_write("data:leader", second.epoch(), "2");
        h.push_back(op{.process = 2, .kind = kind::write, .resource = "leader", .invoke = w0, .complete = now_ns(),
                       .result = w ? outcome::ok : outcome::fail, .fence = second.epoch()});
        CHECK(w);
    });

    // Process 1 resumes: it hears of the loss, its work is cancelled and returns, and
    // its lead() ends; any write it still made carried the old epoch and was refused.
    a->kill(SIGCONT);
    REQUIRE(read_until(*a, h, is(kind::work_end)));
    read_until(*a, h, [](const op&) { return false; }, std::chrono::seconds{10});
    CHECK(a->wait(std::chrono::seconds{10}) == std::optional<int>{0});
    CHECK(last(h, 1, kind::lost) != nullptr);
    for (const auto& o : h)
        if (o.process == 1 && o.kind == kind::write && o.invoke > last(h, 1, kind::lost)->complete)
            CHECK(o.result == outcome::fail);

    // Process 3 waits for process 2's resignation, leads, and resigns when told.
    auto c = worker({"elect", "3", std::to_string(server.port()), "leader", "2000"});
    run(io, [&]() -> asio::awaitable<void> {
        co_await sleep_for(200ms);
        const auto t = now_ns();
        auto r = co_await second.resign();
        h.push_back(op{.process = 2, .kind = kind::release, .resource = "leader", .invoke = t, .complete = now_ns(),
                       .result = r ? outcome::ok : outcome::fail, .fence = second.epoch()});
        CHECK(r);
    });
    REQUIRE(read_until(*c, h, is(kind::write)));
    CHECK(last(h, 3, kind::acquire)->fence > second.epoch());
    c->write_line("resign");
    REQUIRE(read_until(*c, h, is(kind::release)));
    CHECK(c->wait(std::chrono::seconds{10}) == std::optional<int>{0});
    CHECK(last(h, 3, kind::release)->invoke >= last(h, 3, kind::work_end)->complete);
    probe(h, server.config(), "leader");
    judge(h, 1);
}
