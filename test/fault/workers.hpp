// Lock clients as separate processes: the fault suite starts copies of its own binary
// with --worker, so that a holder can really be paused (SIGSTOP) and killed
// (SIGKILL). A worker prints every operation as a history line on stdout (see
// history.hpp) and takes commands on stdin.
//
//   hold ID PORT RESOURCE TTL_MS WATCHDOG   lock, then obey "write" / "unlock" / "exit"
//   contend ID PORT RESOURCE TTL_MS ROUNDS  fenced counter increments under the lock
//   multi ID PORT TTL_MS ROUNDS             lock_all of random subsets of r0..r3
//   elect ID PORT NAME TTL_MS               lead() once: the work writes with the epoch
//                                           every 20 ms until "resign" or the term's loss
#pragma once

#include "history.hpp"

#include <distlock/distlock.hpp>
#include <distlock/redis.hpp>

#include <asio/co_spawn.hpp>
#include <asio/experimental/awaitable_operators.hpp>
#include <asio/steady_timer.hpp>
#include <asio/detached.hpp>
#include <asio/io_context.hpp>
#include <asio/posix/stream_descriptor.hpp>
#include <asio/read_until.hpp>
#include <asio/streambuf.hpp>

#include <unistd.h>

#include <cstdio>
#include <random>
#include <string>

namespace fault {

namespace workers {

namespace dl = distlock;
using namespace std::chrono_literals;

inline nanos now_ns() { return dl::clock::now().time_since_epoch().count(); }
inline nanos ns(dl::time_point t) { return t.time_since_epoch().count(); }

inline void emit(const op& o)
{
    std::printf("%s\n", to_line(o).c_str());
    std::fflush(stdout);
}

inline dl::redis::config at(std::uint16_t port)
{
    dl::redis::config c;
    c.port = port;
    c.connect_timeout = 2s;
    c.request_timeout = 5s;
    return c;
}

using backoff = dl::retry::exponential_backoff;

struct hold_args {
    int id;
    std::uint16_t port;
    std::string resource;
    dl::duration ttl;
    bool watchdog;
};

template <class Mutex>
dl::awaitable<void> hold(hold_args a, dl::redis::store& store, Mutex& mutex, dl::lease*& current, int& status)
{
    const auto invoke = now_ns();
    auto got = co_await mutex.lock();
    if (!got) {
        emit(op{.process = a.id, .kind = kind::acquire, .resource = a.resource, .invoke = invoke,
                .complete = now_ns(), .result = outcome::fail});
        status = 1;
        store.disconnect();
        co_return;
    }
    dl::lease lease = std::move(*got);
    current = &lease;
    emit(op{.process = a.id, .kind = kind::acquire, .resource = a.resource, .invoke = invoke, .complete = now_ns(),
            .result = outcome::ok, .fence = lease.fence(), .valid_until = ns(lease.valid_until())});

    // Loss is printed as soon as the library reports it.
    auto ex = co_await asio::this_coro::executor;
    asio::co_spawn(ex, [](dl::lease& l, hold_args a, dl::fence_token fence) -> dl::awaitable<void> {
        // lost() is asked at once, while the lease is alive; its wait owns what it uses.
        const auto why = co_await l.lost();
        if (why != dl::errc::released) {
            const auto t = now_ns();
            emit(op{.process = a.id, .kind = kind::lost, .resource = a.resource, .invoke = t, .complete = t,
                    .result = outcome::ok, .fence = fence});
        }
    }(lease, a, lease.fence()), asio::detached);

    asio::posix::stream_descriptor input{ex, ::dup(0)};
    asio::streambuf buffer;
    bool unlocked = false;
    for (;;) {
        auto [ec, n] = co_await asio::async_read_until(input, buffer, '\n',
                                                       asio::experimental::as_tuple(asio::use_awaitable));
        if (ec)
            break;
        std::string line(asio::buffers_begin(buffer.data()), asio::buffers_begin(buffer.data()) + n - 1);
        buffer.consume(n);
        if (line == "write") {
            const auto t = now_ns();
            auto w = co_await store.fenced_write("data:" + a.resource, lease.fence(), std::to_string(a.id));
            emit(op{.process = a.id, .kind = kind::write, .resource = a.resource, .invoke = t, .complete = now_ns(),
                    .result = w ? outcome::ok : outcome::fail, .fence = lease.fence()});
        } else if (line == "unlock") {
            const auto t = now_ns();
            unlocked = true;
            auto r = co_await lease.unlock();
            emit(op{.process = a.id, .kind = kind::release, .resource = a.resource, .invoke = t,
                    .complete = now_ns(), .result = r ? outcome::ok : outcome::fail, .fence = lease.fence()});
        } else if (line == "exit") {
            break;
        }
    }
    // Let go before disconnecting: a lease dropped later would reconnect to release
    // itself, and the open connection would keep this process alive.
    if (!unlocked) {
        const auto t = now_ns();
        auto r = co_await lease.unlock();
        emit(op{.process = a.id, .kind = kind::release, .resource = a.resource, .invoke = t, .complete = now_ns(),
                .result = r ? outcome::ok : outcome::fail, .fence = lease.fence()});
    }
    current = nullptr;
    status = 0;
    store.disconnect();
    input.close();
}

inline int run_hold(hold_args a)
{
    asio::io_context io;
    dl::redis::store store{io, at(a.port)};
    dl::lease* current = nullptr;
    // Extensions are history too: each moves the lease's validity on.
    dl::observe::callback observer{[&](const dl::event& e) {
        if (const auto* r = std::get_if<dl::renewal_event>(&e); r && !r->error && current && *current) {
            const auto t = now_ns();
            emit(op{.process = a.id, .kind = kind::extend, .resource = a.resource, .invoke = t - r->latency.count(),
                    .complete = t, .result = outcome::ok, .fence = current->fence(),
                    .valid_until = ns(r->valid_until)});
        }
    }};
    int status = 1;
    const dl::lock_options options{.ttl = a.ttl};
    const backoff retry{.initial = 5ms, .max = 50ms, .deadline = 20s};
    if (a.watchdog) {
        dl::basic_distributed_mutex<dl::redis::store, backoff, dl::renew::watchdog, dl::observe::callback> m{
            store, a.resource, options, retry, observer};
        asio::co_spawn(io, hold(a, store, m, current, status), asio::detached);
        io.run();
    } else {
        dl::basic_distributed_mutex<dl::redis::store, backoff, dl::observe::callback> m{store, a.resource, options,
                                                                                       retry, observer};
        asio::co_spawn(io, hold(a, store, m, current, status), asio::detached);
        io.run();
    }
    return status;
}

/// ROUNDS critical sections, each reading the fenced counter and writing it plus one.
inline int run_contend(int id, std::uint16_t port, std::string resource, dl::duration ttl, int rounds)
{
    asio::io_context io;
    dl::redis::store store{io, at(port)};
    int status = 1;
    asio::co_spawn(io, [&]() -> dl::awaitable<void> {
        dl::basic_distributed_mutex<dl::redis::store, backoff> m{
            store, resource, {.ttl = ttl}, backoff{.initial = 2ms, .max = 50ms, .deadline = 60s}};
        for (int i = 0; i < rounds; ++i) {
            const auto invoke = now_ns();
            auto got = co_await m.lock();
            if (!got) {
                emit(op{.process = id, .kind = kind::acquire, .resource = resource, .invoke = invoke,
                        .complete = now_ns(), .result = outcome::fail});
                co_return;
            }
            auto& lease = *got;
            emit(op{.process = id, .kind = kind::acquire, .resource = resource, .invoke = invoke,
                    .complete = now_ns(), .result = outcome::ok, .fence = lease.fence(),
                    .valid_until = ns(lease.valid_until())});
            const auto t = now_ns();
            auto value = co_await store.fenced_read("counter:" + resource);
            if (!value)
                co_return;
            const long next = value.value() ? std::stol(*value.value()) + 1 : 1;
            auto w = co_await store.fenced_write("counter:" + resource, lease.fence(), std::to_string(next));
            emit(op{.process = id, .kind = kind::write, .resource = resource, .invoke = t, .complete = now_ns(),
                    .result = w ? outcome::ok : outcome::fail, .fence = lease.fence()});
            const auto r0 = now_ns();
            auto released = co_await lease.unlock();
            emit(op{.process = id, .kind = kind::release, .resource = resource, .invoke = r0, .complete = now_ns(),
                    .result = released ? outcome::ok : outcome::fail, .fence = lease.fence()});
        }
        status = 0;
        store.disconnect();
    }, asio::detached);
    io.run();
    return status;
}

/// ROUNDS multi-locks of 2 or 3 of the resources r0..r3, a fenced write to each.
inline int run_multi(int id, std::uint16_t port, dl::duration ttl, int rounds)
{
    asio::io_context io;
    dl::redis::store store{io, at(port)};
    int status = 1;
    asio::co_spawn(io, [&]() -> dl::awaitable<void> {
        std::mt19937 random{static_cast<unsigned>(id)};
        for (int i = 0; i < rounds; ++i) {
            std::vector<std::string> all{"r0", "r1", "r2", "r3"};
            std::shuffle(all.begin(), all.end(), random);
            all.resize(2 + random() % 2);
            const auto invoke = now_ns();
            auto got = co_await dl::lock_all(store, all, {.ttl = ttl},
                                             backoff{.initial = 2ms, .max = 50ms, .deadline = 3s});
            if (!got) {
                for (const auto& r : all)
                    emit(op{.process = id, .kind = kind::acquire, .resource = r, .invoke = invoke,
                            .complete = now_ns(), .result = outcome::fail});
                continue;
            }
            auto& set = *got;
            const auto granted = now_ns();
            for (const auto& l : set.leases())
                emit(op{.process = id, .kind = kind::acquire, .resource = l.resource(), .invoke = invoke,
                        .complete = granted, .result = outcome::ok, .fence = l.fence(),
                        .valid_until = ns(l.valid_until())});
            for (const auto& l : set.leases()) {
                const auto t = now_ns();
                auto w = co_await store.fenced_write("data:" + l.resource(), l.fence(), std::to_string(id));
                emit(op{.process = id, .kind = kind::write, .resource = l.resource(), .invoke = t,
                        .complete = now_ns(), .result = w ? outcome::ok : outcome::fail, .fence = l.fence()});
            }
            const auto r0 = now_ns();
            const auto resources = set.resources();
            const auto fences = set.fences();
            auto released = co_await set.unlock();
            for (std::size_t k = 0; k < resources.size(); ++k)
                emit(op{.process = id, .kind = kind::release, .resource = resources[k], .invoke = r0,
                        .complete = now_ns(), .result = released ? outcome::ok : outcome::fail, .fence = fences[k]});
        }
        status = 0;
        store.disconnect();
    }, asio::detached);
    io.run();
    return status;
}

/// One term of the election NAME through lead(): the work records the term, writes
/// to "data:NAME" with the epoch every 20 ms until "resign" comes on stdin or the term
/// is lost (lead() cancels the work then), and records when it returned. The term's
/// release and loss are recorded as the library reports them (its observer), so the
/// checker sees whether the term was given up before the work returned.
inline int run_elect(int id, std::uint16_t port, std::string name, dl::duration ttl)
{
    asio::io_context io;
    dl::redis::store store{io, at(port)};
    dl::fence_token epoch = 0;
    dl::observe::callback observer{[&](const dl::event& e) {
        const auto t = now_ns();
        if (const auto* r = std::get_if<dl::renewal_event>(&e); r && !r->error && epoch != 0)
            emit(op{.process = id, .kind = kind::extend, .resource = name, .invoke = t - r->latency.count(),
                    .complete = t, .result = outcome::ok, .fence = epoch, .valid_until = ns(r->valid_until)});
        if (const auto* r = std::get_if<dl::release_event>(&e); r && epoch != 0) {
            // Reported once the release has been answered: it was sent no later.
            if (!r->error)
                emit(op{.process = id, .kind = kind::release, .resource = name, .invoke = t, .complete = t,
                        .result = outcome::ok, .fence = epoch});
            else if (r->error == dl::condition::lease_lost || r->error == dl::condition::session_lost)
                emit(op{.process = id, .kind = kind::lost, .resource = name, .invoke = t, .complete = t,
                        .result = outcome::ok, .fence = epoch});
        }
    }};
    int status = 1;
    asio::co_spawn(io, [&]() -> dl::awaitable<void> {
        dl::basic_leader_election<dl::redis::store, backoff, dl::renew::watchdog, dl::observe::callback> election{
            store, name, {.term = {.ttl = ttl}}, backoff{.initial = 5ms, .max = 50ms}, observer};
        const auto invoke = now_ns();
        auto led = co_await election.lead(std::to_string(id), [&](dl::term& t) -> dl::awaitable<void> {
            epoch = t.epoch();
            emit(op{.process = id, .kind = kind::acquire, .resource = name, .invoke = invoke, .complete = now_ns(),
                    .result = outcome::ok, .fence = t.epoch(), .valid_until = ns(t.valid_until())});
            auto ex = co_await asio::this_coro::executor;
            asio::posix::stream_descriptor input{ex, ::dup(0)};
            const auto writing = [&]() -> dl::awaitable<void> {
                for (;;) {
                    asio::steady_timer tick{co_await asio::this_coro::executor, 20ms};
                    auto [ec] = co_await tick.async_wait(asio::experimental::as_tuple(asio::use_awaitable));
                    if (ec)
                        co_return; // cancelled: the term was lost
                    const auto w0 = now_ns();
                    auto w = co_await store.fenced_write("data:" + name, t.epoch(), std::to_string(id));
                    emit(op{.process = id, .kind = kind::write, .resource = name, .invoke = w0,
                            .complete = now_ns(), .result = w ? outcome::ok : outcome::fail, .fence = t.epoch()});
                }
            };
            const auto until_resign = [&]() -> dl::awaitable<void> {
                asio::streambuf buffer;
                for (;;) {
                    auto [ec, n] = co_await asio::async_read_until(input, buffer, '\n',
                                                                   asio::experimental::as_tuple(asio::use_awaitable));
                    if (ec)
                        co_return;
                    std::string line(asio::buffers_begin(buffer.data()), asio::buffers_begin(buffer.data()) + n - 1);
                    buffer.consume(n);
                    if (line == "resign")
                        co_return;
                }
            };
            using namespace asio::experimental::awaitable_operators;
            co_await (writing() || until_resign());
            const auto t1 = now_ns();
            emit(op{.process = id, .kind = kind::work_end, .resource = name, .invoke = t1, .complete = t1,
                    .result = outcome::ok, .fence = t.epoch()});
        });
        if (epoch == 0)
            emit(op{.process = id, .kind = kind::acquire, .resource = name, .invoke = invoke, .complete = now_ns(),
                    .result = outcome::fail});
        status = led || led.error() == dl::condition::lease_lost ? 0 : 1;
        store.disconnect();
    }, asio::detached);
    io.run();
    return status;
}

} // namespace workers

/// The entry point of a worker process; `argv` starts after --worker.
inline int worker_main(int argc, char** argv)
{
    using namespace std::chrono_literals;
    const std::string mode = argc >= 1 ? argv[0] : "";
    auto num = [&](int i) { return std::stoi(argv[i]); };
    auto port = [&](int i) { return static_cast<std::uint16_t>(std::stoi(argv[i])); };
    auto ms = [&](int i) { return std::chrono::duration_cast<distlock::duration>(std::chrono::milliseconds{num(i)}); };
    if (mode == "hold" && argc == 6)
        return workers::run_hold({num(1), port(2), argv[3], ms(4), num(5) != 0});
    if (mode == "contend" && argc == 6)
        return workers::run_contend(num(1), port(2), argv[3], ms(4), num(5));
    if (mode == "multi" && argc == 5)
        return workers::run_multi(num(1), port(2), ms(3), num(4));
    if (mode == "elect" && argc == 5)
        return workers::run_elect(num(1), port(2), argv[3], ms(4));
    std::fprintf(stderr, "unknown worker: %s\n", mode.c_str());
    return 2;
}

} // namespace fault
