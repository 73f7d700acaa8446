// The simulation's clients and driver (see sim.hpp).
#include "sim.hpp"

#include <asio/experimental/as_tuple.hpp>

#include <algorithm>
#include <optional>
#include <sstream>

namespace fault::sim {

namespace {

dl::awaitable<void> sleep_for(dl::duration d)
{
    dl::timer t{co_await asio::this_coro::executor};
    t.expires_after(d);
    co_await t.async_wait(asio::experimental::as_tuple(asio::use_awaitable));
}

/// One simulated process: what it holds now, for the observer's records.
struct process_state {
    int id = 0;
    bool done = false;
    bool crashed = false;
    bool unlocking = false;
    std::vector<const dl::lease*> leases;
    std::vector<std::unique_ptr<link>> links;
    std::unique_ptr<dl::memory::session_store> session; ///< acquisition::session: this client

    const dl::lease* holding(std::string_view resource) const
    {
        for (auto* l : leases)
            if (*l && l->resource() == resource)
                return l;
        return nullptr;
    }
};

dl::observe::callback observer_for(world& w, process_state& me)
{
    return dl::observe::callback{[&w, &me](const dl::event& e) {
        if (const auto* r = std::get_if<dl::renewal_event>(&e); r && !r->error) {
            auto* lease = me.holding(r->resource);
            if (!lease || w.cfg.defects.validity_from_reply)
                return;
            const auto t = now_ns();
            w.record(op{.process = me.id, .kind = kind::extend, .resource = lease->resource(),
                        .invoke = t - r->latency.count(), .complete = t, .result = outcome::ok,
                        .fence = lease->fence(), .valid_until = r->valid_until.time_since_epoch().count()});
        }
        if (const auto* r = std::get_if<dl::release_event>(&e); r && !me.unlocking && r->error) {
            auto* lease = me.holding(r->resource);
            if (!lease)
                return;
            const auto t = now_ns();
            w.record(op{.process = me.id, .kind = kind::lost, .resource = lease->resource(), .invoke = t,
                        .complete = t, .result = outcome::ok, .fence = lease->fence(), .detail = r->error.message()});
        }
    }};
}

/// A multi-lock with the policies of `m` (renewal and acquisition default-constructed,
/// as in the mutexes the simulation builds).
template <class Backend, class... Policies>
auto multi_lock_like(const dl::basic_distributed_mutex<Backend, Policies...>& m, std::vector<std::string> ids)
{
    return dl::basic_multi_lock<Backend, Policies...>{m.backend(), std::move(ids), m.options(), m.retry(),
                                                      m.observer()};
}

/// Work under `leases`: usually short, sometimes a stall past the TTL, then a fenced
/// write to each resource. False when the process crashed in it instead.
dl::awaitable<bool> critical_section(world& w, process_state& me, const std::vector<const dl::lease*>& held,
                                     std::map<std::string, dl::memory::fenced_register<int>>& data)
{
    const auto& cfg = w.cfg;
    const bool stall = w.chance(cfg.faults.pause);
    const auto hold = stall ? cfg.ttl + w.uniform(cfg.ttl) : w.uniform(cfg.ttl / 3);
    if (stall)
        ++w.faults_injected;
    if (w.chance(cfg.faults.crash)) {
        co_await sleep_for(w.uniform(hold));
        // Dies holding the leases: nothing it sends arrives any more.
        ++w.faults_injected;
        for (auto& l : me.links)
            l->cut();
        if (me.session)
            me.session->set_reachable(false); // its session expires at the server
        for (const auto* l : held)
            w.record(op{.process = me.id, .kind = kind::crash, .resource = l->resource(), .invoke = now_ns(),
                        .complete = now_ns(), .fence = l->fence()});
        me.leases.clear();
        me.crashed = true;
        co_return false;
    }
    // A stalled process sends nothing, keepalives included.
    if (stall && me.session)
        me.session->set_reachable(false);
    co_await sleep_for(hold);
    if (stall && me.session)
        me.session->set_reachable(true);
    for (const auto* lp : held) {
        const auto& l = *lp;
        // A reader writes nothing; a permit writes to the register of its number, whose
        // fences grow as that number is handed on.
        if (l.shared() && !l.slot())
            continue;
        const auto key = l.slot() ? l.resource() + "#" + std::to_string(*l.slot()) : l.resource();
        const auto write_at = now_ns();
        auto written = data[key].write(l.fence(), me.id);
        w.record(op{.process = me.id, .kind = kind::write, .resource = key, .invoke = write_at,
                    .complete = write_at, .result = written ? outcome::ok : outcome::fail, .fence = l.fence()});
    }
    co_return true;
}

template <class Mutex>
dl::awaitable<void> client(world& w, process_state& me, Mutex prototype,
                           std::map<std::string, dl::memory::fenced_register<int>>& data)
{
    const auto& cfg = w.cfg;
    for (int round = 0; round < cfg.rounds; ++round) {
        // One resource, or (sometimes) every resource at once with a sorted multi-lock.
        std::vector<std::string> resources;
        const bool several = cfg.resources > 1 && w.chance(cfg.multi);
        if (several)
            for (int r = cfg.resources - 1; r >= 0; --r)
                resources.push_back("r" + std::to_string(r));
        else
            resources.push_back("r" + std::to_string(std::uniform_int_distribution<int>{0, cfg.resources - 1}(w.random)));

        const auto invoke = now_ns();
        std::optional<dl::multi_lease> set; // several resources...
        std::vector<dl::lease> one;         // ...or one
        std::error_code failure;
        if (several) {
            auto multi = multi_lock_like(prototype, resources);
            auto got = co_await multi.lock();
            if (got)
                set = std::move(*got);
            else
                failure = got.error();
        } else {
            auto m = prototype.with_resource(resources.front());
            auto got = co_await m.lock();
            if (got)
                one.push_back(std::move(*got));
            else
                failure = got.error();
        }
        const std::vector<dl::lease>& leases = set ? set->leases() : one;
        if (leases.empty()) {
            for (const auto& r : resources)
                w.record(op{.process = me.id, .kind = kind::acquire, .resource = r, .invoke = invoke,
                            .complete = now_ns(), .result = outcome::fail, .detail = failure.message()});
            co_await sleep_for(w.uniform(20ms));
            continue;
        }

        const auto granted = now_ns();
        std::vector<op> releases; // filled in once unlocked: the leases are gone by then
        std::vector<dl::owner_token> owners;
        me.leases.clear();
        for (const auto& l : leases) {
            auto valid = l.valid_until().time_since_epoch().count();
            if (cfg.defects.validity_from_reply)
                valid = granted + cfg.ttl.count();
            w.holders[l.owner()] = {me.id, l.fence()};
            w.record(op{.process = me.id, .kind = kind::acquire, .resource = l.resource(), .invoke = invoke,
                        .complete = granted, .result = outcome::ok, .fence = l.fence(), .valid_until = valid});
            releases.push_back(op{.process = me.id, .kind = kind::release, .resource = l.resource(), .fence = l.fence()});
            owners.push_back(l.owner());
            me.leases.push_back(&l);
        }
        std::vector<const dl::lease*> held;
        for (const auto& l : leases)
            held.push_back(&l);
        const bool alive = co_await critical_section(w, me, held, data);
        if (!alive)
            break;

        me.unlocking = true;
        const auto release_at = now_ns();
        dl::result<void> released = dl::errc::outcome_unknown;
        if (set)
            released = co_await set->unlock();
        else
            released = co_await one.front().unlock();
        me.unlocking = false;
        me.leases.clear();
        for (std::size_t i = 0; i < releases.size(); ++i) {
            if (released)
                w.released.push_back(owners[i]);
            auto& o = releases[i];
            o.invoke = release_at;
            o.complete = now_ns();
            o.result = released ? outcome::ok : outcome::fail;
            o.detail = released ? "" : released.error().message();
            w.record(std::move(o));
        }
        co_await sleep_for(w.uniform(10ms));
    }
    me.done = true;
}

/// Takes one grant of a shared mutex (`read`: shared, else exclusive) or one permit of
/// a semaphore on `resource`, through a primitive made for the call.
using take_fn = std::function<dl::awaitable<dl::result<dl::lease>>(std::string resource, bool read)>;

/// Rounds of a shared mutex's readers and writers, or of a semaphore's permits, one
/// resource at a time.
dl::awaitable<void> shared_client(world& w, process_state& me, take_fn take,
                                  std::map<std::string, dl::memory::fenced_register<int>>& data)
{
    const auto& cfg = w.cfg;
    for (int round = 0; round < cfg.rounds; ++round) {
        const auto resource =
            "r" + std::to_string(std::uniform_int_distribution<int>{0, cfg.resources - 1}(w.random));
        const bool read = cfg.primitive == primitive::shared_mutex && w.chance(cfg.reads);
        const auto invoke = now_ns();
        auto got = co_await take(resource, read);
        if (!got) {
            w.record(op{.process = me.id, .kind = kind::acquire, .resource = resource, .invoke = invoke,
                        .complete = now_ns(), .result = outcome::fail, .detail = got.error().message()});
            co_await sleep_for(w.uniform(20ms));
            continue;
        }
        std::vector<dl::lease> one;
        one.push_back(std::move(got).value());
        const auto& l = one.front();
        w.holders[l.owner()] = {me.id, l.fence()};
        w.record(op{.process = me.id, .kind = kind::acquire, .resource = resource, .invoke = invoke,
                    .complete = now_ns(), .result = outcome::ok, .fence = l.fence(),
                    .valid_until = l.valid_until().time_since_epoch().count(), .shared = l.shared(),
                    .permits = cfg.primitive == primitive::semaphore ? cfg.permits : 0,
                    .slot = l.slot().value_or(0)});
        const auto owner = l.owner();
        const auto fence = l.fence();
        me.leases = {&l};
        const std::vector<const dl::lease*> held{&one.front()}; // (no braced list inside co_await: g++ 12)
        if (!co_await critical_section(w, me, held, data))
            break;
        me.unlocking = true;
        const auto release_at = now_ns();
        auto released = co_await one.front().unlock();
        me.unlocking = false;
        me.leases.clear();
        if (released)
            w.released.push_back(owner);
        w.record(op{.process = me.id, .kind = kind::release, .resource = resource, .invoke = release_at,
                    .complete = now_ns(), .result = released ? outcome::ok : outcome::fail, .fence = fence,
                    .detail = released ? "" : released.error().message()});
        co_await sleep_for(w.uniform(10ms));
    }
    me.done = true;
}

/// Rounds of an election's terms through lead(): the critical section is the leader's
/// work (a stall past the TTL cancels it when the watchdog reports the loss; a crash
/// leaves the term to its TTL). The term's release is recorded as starting when the
/// work returned: lead() gives the term up only then, which the removal the store
/// records (its own time) shows.
template <class Election>
dl::awaitable<void> election_client(world& w, process_state& me, Election election,
                                    std::map<std::string, dl::memory::fenced_register<int>>& data)
{
    const auto& cfg = w.cfg;
    for (int round = 0; round < cfg.rounds; ++round) {
        const auto invoke = now_ns();
        dl::fence_token epoch = 0;
        bool alive = true;
        std::optional<nanos> work_ended;
        auto led = co_await election.lead(std::to_string(me.id), [&](dl::term& t) -> dl::awaitable<void> {
            epoch = t.epoch();
            const auto& l = t.held();
            w.holders[l.owner()] = {me.id, epoch};
            w.record(op{.process = me.id, .kind = kind::acquire, .resource = l.resource(), .invoke = invoke,
                        .complete = now_ns(), .result = outcome::ok, .fence = epoch,
                        .valid_until = l.valid_until().time_since_epoch().count()});
            me.leases = {&l};
            const std::vector<const dl::lease*> held{&l}; // (no braced list inside co_await: g++ 12)
            alive = co_await critical_section(w, me, held, data);
            me.leases.clear();
            if (!alive)
                co_return;
            const auto t1 = now_ns();
            work_ended = t1;
            w.record(op{.process = me.id, .kind = kind::work_end, .resource = l.resource(), .invoke = t1,
                        .complete = t1, .result = outcome::ok, .fence = epoch});
        });
        if (!alive)
            break;
        if (epoch == 0) {
            w.record(op{.process = me.id, .kind = kind::acquire, .resource = election.name(), .invoke = invoke,
                        .complete = now_ns(), .result = outcome::fail, .detail = led.error().message()});
            co_await sleep_for(w.uniform(20ms));
            continue;
        }
        if (work_ended)
            w.record(op{.process = me.id, .kind = kind::release, .resource = election.name(), .invoke = *work_ended,
                        .complete = now_ns(), .result = led ? outcome::ok : outcome::fail, .fence = epoch,
                        .detail = led ? "" : led.error().message()});
        co_await sleep_for(w.uniform(10ms));
    }
    me.done = true;
}

dl::awaitable<void> restarts(world& w, const std::vector<std::unique_ptr<process_state>>& processes)
{
    auto running = [&] {
        for (const auto& p : processes)
            if (!p->done && !p->crashed)
                return true;
        return false;
    };
    while (running()) {
        co_await sleep_for(1ms);
        if (!w.chance(w.cfg.faults.restart))
            continue;
        ++w.faults_injected;
        auto& node = *w.nodes[std::uniform_int_distribution<std::size_t>{0, w.nodes.size() - 1}(w.random)];
        if (w.cfg.faults.restart_after > dl::duration::zero()) {
            node.set_online(false);
            co_await sleep_for(w.cfg.faults.restart_after);
        }
        node.lose_state();
        node.set_online(true);
    }
}

void drain(asio::io_context& io) { (void)dl::testing::run_due(io); }

template <class Backend, class Acquire, class Renew>
using sim_mutex = dl::basic_distributed_mutex<Backend, Acquire, seeded_backoff, Renew, dl::observe::callback>;

template <class Backend, class Renew>
using sim_shared_mutex = dl::basic_distributed_shared_mutex<Backend, seeded_backoff, Renew, dl::observe::callback>;
template <class Backend, class Renew>
using sim_semaphore = dl::basic_distributed_semaphore<Backend, seeded_backoff, Renew, dl::observe::callback>;

// A shared mutex's or a semaphore's grant on `backend`, for shared_client().
template <class Backend, class Renew>
take_fn taking(world& w, process_state& me, Backend& backend)
{
    return [&w, &me, &backend](std::string resource, bool read) -> dl::awaitable<dl::result<dl::lease>> {
        const dl::lock_options options{.ttl = w.cfg.ttl};
        const seeded_backoff retry{.w = &w};
        if (w.cfg.primitive == primitive::semaphore) {
            sim_semaphore<Backend, Renew> s{backend, resource, {.permits = w.cfg.permits, .lease = options}, retry,
                                            observer_for(w, me)};
            co_return co_await s.acquire();
        }
        sim_shared_mutex<Backend, Renew> m{backend, resource, options, retry, observer_for(w, me)};
        if (read)
            co_return co_await m.lock_shared();
        co_return co_await m.lock();
    };
}

template <class Renew>
void spawn_clients(world& w, std::vector<std::unique_ptr<process_state>>& processes,
                   std::vector<std::unique_ptr<dl::quorum<link>>>& quorums,
                   std::map<std::string, dl::memory::fenced_register<int>>& data)
{
    const auto& cfg = w.cfg;
    const dl::lock_options options{.ttl = cfg.ttl};
    for (auto& p : processes) {
        seeded_backoff retry{.w = &w};
        if (cfg.primitive == primitive::election) {
            // Each process campaigns in the election "r0" (one resource).
            if (cfg.how == acquisition::session) {
                dl::basic_leader_election<dl::memory::session_store, seeded_backoff, Renew, dl::observe::callback> e{
                    *p->session, "r0", {.term = options}, retry, observer_for(w, *p)};
                asio::co_spawn(w.io, election_client(w, *p, std::move(e), data), asio::detached);
            } else {
                dl::basic_leader_election<link, seeded_backoff, Renew, dl::observe::callback> e{
                    *p->links[0], "r0", {.term = options}, retry, observer_for(w, *p)};
                asio::co_spawn(w.io, election_client(w, *p, std::move(e), data), asio::detached);
            }
            continue;
        }
        if (cfg.primitive != primitive::mutex) {
            auto take = cfg.how == acquisition::session ? taking<dl::memory::session_store, Renew>(w, *p, *p->session)
                                                        : taking<link, Renew>(w, *p, *p->links[0]);
            asio::co_spawn(w.io, shared_client(w, *p, std::move(take), data), asio::detached);
            continue;
        }
        switch (cfg.how) {
        case acquisition::setnx: {
            sim_mutex<link, dl::acquire::setnx, Renew> m{*p->links[0], "", options, retry, observer_for(w, *p)};
            asio::co_spawn(w.io, client(w, *p, m, data), asio::detached);
            break;
        }
        case acquisition::conditional_write: {
            sim_mutex<link, dl::acquire::conditional_write, Renew> m{*p->links[0], "", options, retry,
                                                                     observer_for(w, *p)};
            asio::co_spawn(w.io, client(w, *p, m, data), asio::detached);
            break;
        }
        case acquisition::session: {
            dl::basic_distributed_mutex<dl::memory::session_store, seeded_backoff, dl::observe::callback> m{
                *p->session, "", options, retry, observer_for(w, *p)};
            asio::co_spawn(w.io, client(w, *p, m, data), asio::detached);
            break;
        }
        case acquisition::quorum: {
            std::vector<link*> nodes;
            for (auto& l : p->links)
                nodes.push_back(l.get());
            quorums.push_back(std::make_unique<dl::quorum<link>>(std::span<link* const>{nodes}));
            sim_mutex<dl::quorum<link>, dl::acquire::quorum<dl::acquire::setnx>, Renew> m{
                *quorums.back(), "", options, retry, observer_for(w, *p)};
            asio::co_spawn(w.io, client(w, *p, m, data), asio::detached);
            break;
        }
        }
    }
}

} // namespace

outcome_of_run run(const config& c)
{
    world w{c};
    const auto start = now_ns();
    std::map<std::string, dl::memory::fenced_register<int>> data;
    std::vector<std::unique_ptr<process_state>> processes;
    std::vector<std::unique_ptr<dl::quorum<link>>> quorums;
    for (int i = 0; i < c.clients; ++i) {
        auto p = std::make_unique<process_state>();
        p->id = i + 1;
        for (int n = 0; n < c.nodes; ++n)
            p->links.push_back(std::make_unique<link>(w, p->id, static_cast<std::size_t>(n)));
        if (c.how == acquisition::session) {
            p->session = std::make_unique<dl::memory::session_store>(w.io, w.sessions,
                                                                     dl::memory::session_config{.session_ttl = c.ttl});
            p->session->set_random_faults({.refuse = c.faults.drop_request,
                                           .lose_reply = c.faults.drop_reply,
                                           .max_delay = c.faults.max_delay,
                                           .seed = c.seed * 1000 + static_cast<std::uint64_t>(p->id)});
        }
        processes.push_back(std::move(p));
    }
    if (c.watchdog)
        spawn_clients<dl::renew::watchdog>(w, processes, quorums, data);
    else
        spawn_clients<dl::renew::none>(w, processes, quorums, data);
    if (c.faults.restart > 0)
        asio::co_spawn(w.io, restarts(w, processes), asio::detached);

    auto finished = [&] {
        for (const auto& p : processes)
            if (!p->done && !p->crashed)
                return false;
        return true;
    };
    // Bounded: every lock() has a deadline, so clients finish long before this.
    const auto limit = dl::clock::now() + std::chrono::seconds{c.rounds * 10};
    drain(w.io);
    while (!finished() && dl::clock::now() < limit) {
        w.clock.advance(1ms);
        drain(w.io);
    }
    // A lease released successfully leaves nothing on a single store, at once (on a
    // quorum, a release succeeds when any node had the lock: others may keep theirs
    // until the TTL when their release was lost).
    outcome_of_run out;
    if (c.nodes == 1) {
        const auto t = now_ns();
        for (int r = 0; r < c.resources; ++r) {
            const auto resource = "r" + std::to_string(r);
            std::optional<dl::owner_token> holder;
            if (c.how == acquisition::session) {
                if (const auto e = w.sessions.holder(resource))
                    holder = e->owner;
            } else if (const auto held = w.nodes[0]->inspect(resource)) {
                holder = held->owner;
            }
            bool left = holder && std::find(w.released.begin(), w.released.end(), *holder) != w.released.end();
            if (c.how != acquisition::session)
                for (const auto& sharer : w.nodes[0]->shared_holders(resource))
                    left = left || std::find(w.released.begin(), w.released.end(), sharer) != w.released.end();
            w.record(op{.kind = kind::probe, .resource = resource, .invoke = t, .complete = t,
                        .result = left ? outcome::fail : outcome::ok,
                        .detail = left ? "a released lease's lock is still held" : ""});
        }
    }

    // Let late replies land, background releases finish and every TTL run out.
    const auto settle_until = dl::clock::now() + c.ttl * 2 + c.faults.timeout + c.faults.max_delay * 2 +
                              c.faults.restart_after;
    while (dl::clock::now() < settle_until) {
        w.clock.advance(1ms);
        drain(w.io);
    }

    const auto probe_at = now_ns();
    if (!finished())
        w.record(op{.kind = kind::probe, .resource = "clients", .invoke = probe_at, .complete = probe_at,
                    .result = outcome::fail, .detail = "a client did not finish"});
    for (int r = 0; r < c.resources; ++r)
        for (std::size_t n = 0; n < w.nodes.size(); ++n) {
            const auto resource = "r" + std::to_string(r);
            const bool left = c.how == acquisition::session ? w.sessions.entries(resource) > 0
                                                            : w.nodes[n]->inspect(resource).has_value() ||
                                                                  !w.nodes[n]->shared_holders(resource).empty();
            std::string what = "held on node " + std::to_string(n);
            if (left && c.how == acquisition::session)
                if (const auto e = w.sessions.holder(resource)) {
                    const auto h = w.holders.find(e->owner);
                    what = "an entry of session " + std::to_string(e->session) + " (sequence " +
                           std::to_string(e->sequence) + ", " +
                           (h != w.holders.end() ? "the grant of process " + std::to_string(h->second.first)
                                                 : std::string{"never granted"}) +
                           ")";
                }
            w.record(op{.kind = kind::probe, .resource = resource, .invoke = probe_at, .complete = probe_at,
                        .result = left ? outcome::fail : outcome::ok, .detail = left ? what : ""});
        }
    // No renewal timer, retry or release may still be pending in the clients (a
    // session client's keepalive stops with the client).
    for (auto& p : processes)
        p->session.reset();
    w.io.restart();
    w.io.poll();
    const bool idle = w.io.stopped();
    w.record(op{.kind = kind::probe, .resource = "io", .invoke = probe_at, .complete = probe_at,
                .result = idle ? outcome::ok : outcome::fail, .detail = idle ? "" : "work still pending"});

    check_options options;
    options.fences_grow = c.check_fences.value_or(c.faults.restart == 0);
    // A watched lease (the watchdog's keeper runs) is told of its end by its validity;
    // the simulated clock moves in 1 ms steps.
    if (c.watchdog)
        options.loss_report_slack = std::chrono::nanoseconds{1ms}.count();
    out.checked = check(w.history, options);
    out.faults_injected = w.faults_injected;
    std::ostringstream digest;
    for (auto o : w.history) {
        o.invoke -= start;
        o.complete -= start;
        if (o.valid_until)
            o.valid_until -= start;
        digest << to_line(o) << '\n';
    }
    out.digest = digest.str();
    out.history = std::move(w.history);
    return out;
}

} // namespace fault::sim
