// distlock: run a command under a distributed lock, from a shell.
//
//   distlock run --store redis://127.0.0.1:6379 --ttl 30s job:nightly -- ./nightly.sh
//
// Design note. Everything runs on one io_context thread: the lock, its renewal, the
// child's exit (SIGCHLD through asio::signal_set), the signals to forward and the
// timers for --max-hold and --grace. The child runs in a process group of its own so
// that stopping it reaches everything it started. The lease is watched while the
// child runs; when it is lost (renewal failed, validity ran out), the child's group
// gets SIGTERM and, after --grace, SIGKILL: work done past the loss is not
// protected, so it must stop.
#include "options.hpp"

#include <distlock/backend/url.hpp>
#include <distlock/distlock.hpp>
#include <distlock/dynamodb.hpp>
#include <distlock/etcd.hpp>
#include <distlock/postgres.hpp>
#include <distlock/zookeeper.hpp>
#include <distlock/memory.hpp>
#include <distlock/redis.hpp>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/experimental/awaitable_operators.hpp>
#include <asio/io_context.hpp>
#include <asio/signal_set.hpp>
#include <asio/steady_timer.hpp>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <type_traits>
#include <string>
#include <variant>
#include <vector>

#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

namespace {

namespace dl = distlock;
namespace cli = distlock::cli;
using namespace std::chrono_literals;

std::string json_escape(std::string_view s)
{
    std::string out;
    for (const unsigned char c : s) {
        switch (c) {
        case '"': out += "\\\""; break;
        case '\\': out += "\\\\"; break;
        case '\n': out += "\\n"; break;
        default:
            if (c < 0x20) {
                char buf[8];
                std::snprintf(buf, sizeof buf, "\\u%04x", c);
                out += buf;
            } else {
                out.push_back(static_cast<char>(c));
            }
        }
    }
    return out;
}

long long millis(dl::duration d)
{
    return static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(d).count());
}

// What a failed acquisition means for the exit code.
int acquisition_exit(const std::error_code& ec)
{
    if (ec == dl::condition::contended || ec == dl::condition::timeout)
        return cli::exit_code::not_acquired;
    if (ec == dl::condition::invalid_argument)
        return cli::exit_code::usage;
    return cli::exit_code::store_failed;
}

// Sleeps `d` on the current executor.
dl::awaitable<void> pause(dl::duration d)
{
    asio::steady_timer t{co_await asio::this_coro::executor, d};
    (void)co_await t.async_wait(asio::experimental::as_tuple(asio::use_awaitable));
}

// Starts COMMAND in a process group of its own with the lease's variables.
pid_t spawn(const cli::options& o, const dl::multi_lease& held)
{
    const auto resources = held.resources();
    const auto fences = held.fences();
    const pid_t pid = ::fork();
    if (pid != 0)
        return pid;
    // The child: its own process group, the lease in its environment.
    ::setpgid(0, 0);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::setenv("DISTLOCK_RESOURCE", resources[0].c_str(), 1);
    ::setenv("DISTLOCK_FENCE", std::to_string(fences[0]).c_str(), 1);
    ::setenv("DISTLOCK_COUNT", std::to_string(resources.size()).c_str(), 1);
    if (o.what == cli::verb::elect)
        ::setenv("DISTLOCK_EPOCH", std::to_string(fences[0]).c_str(), 1);
    if (const auto slot = held.leases()[0].slot())
        ::setenv("DISTLOCK_SLOT", std::to_string(*slot).c_str(), 1);
    for (std::size_t i = 0; i < resources.size(); ++i) {
        ::setenv(("DISTLOCK_RESOURCE_" + std::to_string(i)).c_str(), resources[i].c_str(), 1);
        ::setenv(("DISTLOCK_FENCE_" + std::to_string(i)).c_str(), std::to_string(fences[i]).c_str(), 1);
    }
    std::vector<char*> argv;
    for (const auto& a : o.command)
        argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execvp(argv[0], argv.data());
    std::fprintf(stderr, "distlock: cannot run %s: %s\n", argv[0], std::strerror(errno));
    ::_exit(cli::exit_code::spawn_failed);
}

// The child's exit status as a shell reports it.
int shell_status(int status)
{
    if (WIFEXITED(status))
        return WEXITSTATUS(status);
    if (WIFSIGNALED(status))
        return 128 + WTERMSIG(status);
    return 1;
}

// An error and the store's words about it, for a line on stderr.
std::string said(const std::error_code& ec, const dl::diagnostics& diag)
{
    return diag.empty() ? ec.message() : ec.message() + ": " + diag.to_string();
}

template <class Backend>
class session {
public:
    using multi_lock =
        dl::basic_multi_lock<Backend, dl::renew::watchdog, dl::retry::exponential_backoff, dl::observe::callback>;

    session(Backend& backend, const cli::options& o) : backend_{backend}, o_{o} {}

    int exit() const { return exit_; }

    dl::awaitable<void> run()
    {
        switch (o_.what) {
        case cli::verb::run:
        case cli::verb::elect: co_await run_command(); break;
        case cli::verb::try_lock: co_await try_once(); break;
        default: break;
        }
    }

private:
    dl::lock_options lock_options() const { return {.ttl = o_.ttl, .lock_delay = o_.lock_delay.value_or(dl::duration{})}; }

    dl::retry::exponential_backoff retry() const
    {
        // Unbounded --wait: as long as a deadline may be (max_wait), less a margin.
        const auto wait = o_.wait.value_or(dl::max_wait - std::chrono::hours{1});
        return {.initial = 20ms, .max = 1s, .deadline = wait};
    }

    // When the store last answered an attempt (granted, or held by another owner), and
    // the error of the last attempt it did not answer: what --store-timeout is about.
    struct store_health {
        dl::time_point answered = dl::clock::now();
        std::error_code last_failure;
    };

    dl::observe::callback watch_store()
    {
        return {[health = health_](const dl::event& e) {
            const auto* a = std::get_if<dl::attempt_event>(&e);
            if (!a)
                return;
            if (!a->error || a->error == dl::condition::contended) {
                health->answered = dl::clock::now();
                health->last_failure.clear();
            } else {
                health->last_failure = a->error;
            }
        }};
    }

    multi_lock make_set() { return multi_lock{backend_, o_.resources, lock_options(), dl::renew::watchdog{}, retry(), watch_store()}; }

    using shared_mutex =
        dl::basic_distributed_shared_mutex<Backend, dl::renew::watchdog, dl::retry::exponential_backoff, dl::observe::callback>;
    using semaphore =
        dl::basic_distributed_semaphore<Backend, dl::renew::watchdog, dl::retry::exponential_backoff, dl::observe::callback>;
    static constexpr bool is_quorum = dl::detail::is_quorum<Backend>::value;
    template <class B>
    struct election_for {
        using type = void;
    };
    template <class B>
        requires(dl::electing_store<B> && !dl::detail::is_quorum<B>::value)
    struct election_for<B> {
        using type = dl::basic_leader_election<B, dl::renew::watchdog, dl::retry::exponential_backoff,
                                               dl::observe::callback>;
    };
    using election = typename election_for<Backend>::type;

    // The lock the command runs under: every resource exclusively (sorted, all or
    // nothing), or with --shared one resource as a reader, or with --permits N one
    // permit of N. Waits as --wait says, or (`wait` false) tries once.
    dl::awaitable<dl::result<dl::multi_lease>> take(bool wait, dl::diagnostics& diag)
    {
        if (o_.what == cli::verb::elect)
            co_return co_await campaign(diag);
        if constexpr (dl::shared_backend<Backend>) {
            if (o_.shared || o_.permits) {
                dl::result<dl::lease> got{make_error_code(dl::errc::cancelled)};
                if (o_.permits) {
                    semaphore s{backend_, o_.resources[0], {.permits = *o_.permits, .lease = lock_options()},
                                dl::renew::watchdog{}, retry(), watch_store()};
                    // (No co_await in a conditional expression: g++ 12 miscompiles it.)
                    if (wait)
                        got = co_await s.acquire(diag);
                    else
                        got = co_await s.try_acquire(diag);
                } else {
                    shared_mutex m{backend_, o_.resources[0], lock_options(), dl::renew::watchdog{}, retry(),
                                   watch_store()};
                    if (wait)
                        got = co_await m.lock_shared(diag);
                    else
                        got = co_await m.try_lock_shared(diag);
                }
                if (!got)
                    co_return got.error();
                std::vector<dl::lease> one;
                one.push_back(std::move(got).value());
                co_return dl::multi_lease{std::move(one)};
            }
        }
        auto set = make_set();
        if (wait)
            co_return co_await set.lock(diag);
        co_return co_await set.try_lock(diag);
    }

    // elect: waits until this process leads NAME and has proclaimed its value; the
    // term's lease is what the command runs under (its fence is the epoch).
    dl::awaitable<dl::result<dl::multi_lease>> campaign(dl::diagnostics& diag)
    {
        if constexpr (dl::electing_store<Backend> && !is_quorum) {
            election e{backend_, o_.resources[0], {.term = lock_options()}, dl::renew::watchdog{}, retry(),
                       watch_store()};
            std::string value = o_.value ? *o_.value : default_value();
            auto t = co_await e.campaign(std::move(value));
            if (!t)
                co_return t.error();
            std::vector<dl::lease> one;
            one.push_back(std::move(t->held()));
            co_return dl::multi_lease{std::move(one)};
        } else {
            diag.set_client_message("elections need one store that keeps a value with a grant, not a Redlock quorum");
            co_return dl::errc::invalid_argument;
        }
    }

    static std::string default_value()
    {
        char host[256] = {};
        if (::gethostname(host, sizeof host - 1) != 0)
            host[0] = '\0';
        return std::string{host} + ":" + std::to_string(::getpid());
    }

    // Ends when the store has not answered for --store-timeout and its last attempt
    // failed (it never ends while the store answers, even that the lock is held: that
    // is --wait's business). An attempt is bounded by the store's own timeouts, so a
    // store that hangs is a failed attempt too.
    dl::awaitable<void> store_silent()
    {
        for (;;) {
            co_await pause(100ms);
            if (dl::clock::now() - health_->answered >= o_.store_timeout && health_->last_failure)
                co_return;
        }
    }

    void report_silent_store(const dl::diagnostics& diag) const
    {
        std::fprintf(stderr, "distlock: the store did not answer for %llds (--store-timeout): %s\n",
                     static_cast<long long>(millis(o_.store_timeout) / 1000), said(health_->last_failure, diag).c_str());
    }

    // While waiting for the lock, once a second: a progress line on stderr when it is
    // a terminal, with who holds the first resource when the store can say. Runs until
    // the lock is taken (it is cancelled then).
    dl::awaitable<void> progress()
    {
        const bool terminal = ::isatty(STDERR_FILENO);
        const auto started = dl::clock::now();
        for (;;) {
            co_await pause(1s);
            if (!terminal)
                continue;
            const auto waited = std::chrono::duration_cast<std::chrono::seconds>(dl::clock::now() - started);
            std::string holder;
            if constexpr (dl::inspectable_store<Backend>) {
                auto info = co_await backend_.read(o_.resources[0]);
                if (info && info->held) {
                    holder = "; held by " + info->owner + "...";
                    if (info->remaining)
                        holder += " (" + std::to_string(millis(*info->remaining) / 1000) + " s left)";
                }
            }
            // Which of the two it waits for: the lock (the store answers that it is
            // held), or the store itself (it does not answer).
            const bool store_down = health_->last_failure && dl::clock::now() - health_->answered >= 1s;
            if (store_down)
                std::fprintf(stderr, "\r\033[Kdistlock: waiting for the store (%s): %llds",
                             health_->last_failure.message().c_str(), static_cast<long long>(waited.count()));
            else
                std::fprintf(stderr, "\r\033[Kdistlock: waiting for %s: %llds%s", o_.resources[0].c_str(),
                             static_cast<long long>(waited.count()), holder.c_str());
            std::fflush(stderr);
        }
    }

    dl::awaitable<void> try_once()
    {
        dl::diagnostics diag;
        auto got = co_await take(false, diag);
        const bool acquired = static_cast<bool>(got);
        if (acquired) {
            (void)co_await got->unlock();
            exit_ = 0;
        } else {
            exit_ = acquisition_exit(got.error());
        }
        const auto delay_left = [&]() -> std::optional<long long> {
            if (acquired || got.error() != dl::errc::lock_delayed || !diag.lock_delay_until())
                return std::nullopt;
            return std::max<long long>(0, millis(*diag.lock_delay_until() - dl::clock::now()));
        }();
        if (o_.json) {
            std::printf("{\"acquired\":%s,\"held\":%s", acquired ? "true" : "false",
                        exit_ == cli::exit_code::not_acquired ? "true" : "false");
            if (delay_left)
                std::printf(",\"lock_delay_ms\":%lld", *delay_left);
            if (!acquired && exit_ != cli::exit_code::not_acquired) {
                std::printf(",\"error\":\"%s\"", json_escape(got.error().message()).c_str());
                if (!diag.empty())
                    std::printf(",\"diagnostics\":\"%s\"", json_escape(diag.to_string()).c_str());
            }
            std::printf("}\n");
        } else if (delay_left) {
            std::fprintf(stderr, "distlock: in its lock-delay for %lld ms more (its last holder was lost without "
                                 "releasing it)\n", *delay_left);
        } else if (!acquired) {
            std::fprintf(stderr, "distlock: %s\n",
                         exit_ == cli::exit_code::not_acquired ? "held by another owner" : said(got.error(), diag).c_str());
        }
    }

    dl::awaitable<void> run_command()
    {
        auto ex = co_await asio::this_coro::executor;
        // Registered before the child exists, so that its exit cannot be missed.
        asio::signal_set signals{ex, SIGCHLD, SIGINT, SIGTERM};
        signals.add(SIGHUP);

        dl::diagnostics diag;
        // Waiting for the lock ends early on SIGINT/SIGTERM/SIGHUP, or when the store
        // has not answered for --store-timeout: nothing is left held.
        using namespace asio::experimental::awaitable_operators;
        auto first = co_await (take(true, diag) ||
                               signals.async_wait(asio::experimental::as_tuple(asio::use_awaitable)) || progress() ||
                               store_silent());
        if (::isatty(STDERR_FILENO))
            std::fprintf(stderr, "\r\033[K");
        if (first.index() == 1) {
            const auto [ec, sig] = std::get<1>(first);
            exit_ = ec ? cli::exit_code::store_failed : 128 + sig;
            co_return;
        }
        if (first.index() == 2) // progress() never ends on its own
            co_return;
        if (first.index() == 3) {
            report_silent_store(diag);
            exit_ = cli::exit_code::store_failed;
            co_return;
        }
        auto& got = std::get<0>(first);
        if (!got) {
            std::fprintf(stderr, "distlock: not acquired: %s\n", said(got.error(), diag).c_str());
            exit_ = acquisition_exit(got.error());
            co_return;
        }
        auto held = std::move(got.value());
        if (o_.verbose && o_.what == cli::verb::elect)
            std::fprintf(stderr, "distlock: leading %s, epoch %llu\n", o_.resources[0].c_str(),
                         static_cast<unsigned long long>(held.leases()[0].fence()));
        else if (o_.verbose)
            for (const auto& l : held.leases())
                std::fprintf(stderr, "distlock: holding %s, fence %llu, owner %s\n", l.resource().c_str(),
                             static_cast<unsigned long long>(l.fence()), l.owner().to_hex().c_str());

        const pid_t child = spawn(o_, held);
        if (child < 0) {
            std::fprintf(stderr, "distlock: fork failed: %s\n", std::strerror(errno));
            (void)co_await held.unlock();
            exit_ = cli::exit_code::spawn_failed;
            co_return;
        }
        ::setpgid(child, child); // also in the parent: whichever runs first

        const auto started = dl::clock::now();
        std::optional<int> status;
        std::optional<int> stopped_because; // exit code when distlock stopped the child
        std::optional<dl::time_point> kill_at;
        const auto stop = [&](int why) {
            if (stopped_because)
                return;
            stopped_because = why;
            ::kill(-child, SIGTERM);
            kill_at = dl::clock::now() + o_.grace;
        };
        // One loop on the io thread: the child's exit, signals to forward, the lease,
        // --max-hold and the grace period, looked at every 50 ms at most.
        bool waiting_signal = false;
        std::optional<int> arrived;
        while (!status) {
            if (!waiting_signal) {
                waiting_signal = true;
                signals.async_wait([&](std::error_code ec, int sig) {
                    waiting_signal = false;
                    if (!ec)
                        arrived = sig;
                });
            }
            co_await pause(50ms);
            if (arrived) {
                const int sig = *arrived;
                arrived.reset();
                if (sig != SIGCHLD)
                    ::kill(-child, sig); // forwarded; the child decides, its exit ends the run
            }
            int st = 0;
            if (::waitpid(child, &st, WNOHANG) == child) {
                status = st;
                break;
            }
            if (!held.valid())
                stop(cli::exit_code::lease_lost);
            if (o_.max_hold && dl::clock::now() - started >= *o_.max_hold)
                stop(cli::exit_code::max_hold);
            if (kill_at && dl::clock::now() >= *kill_at) {
                ::kill(-child, SIGKILL);
                kill_at.reset();
            }
        }
        signals.cancel();
        const bool kept = held.valid();
        auto released = co_await held.unlock();
        if (stopped_because) {
            std::fprintf(stderr, "distlock: %s: the command was stopped\n",
                         *stopped_because == cli::exit_code::lease_lost ? "the lease was lost" : "--max-hold passed");
            exit_ = *stopped_because;
        } else if (!kept || (!released && released.error() == dl::condition::lease_lost)) {
            // The command finished, but not all of it ran under the lease.
            std::fprintf(stderr, "distlock: the lease was lost before the command finished\n");
            exit_ = cli::exit_code::lease_lost;
        } else {
            exit_ = shell_status(*status);
        }
    }

    Backend& backend_;
    const cli::options& o_;
    int exit_ = 1;
    // Shared with the observer, which the lock's background work may call.
    std::shared_ptr<store_health> health_ = std::make_shared<store_health>();
};

// Closes every store, so that io.run() returns (open connections keep it going).
template <class Store>
dl::awaitable<void> close_all(std::vector<Store*> nodes)
{
    for (auto* n : nodes)
        co_await n->close();
}

// A store's read(), with its words when it can give them.
template <class Store>
dl::awaitable<dl::result<dl::lock_info>> read_lock(Store& s, const std::string& resource, dl::diagnostics& diag)
{
    if constexpr (requires { s.read(resource, &diag); })
        co_return co_await s.read(resource, &diag);
    else
        co_return co_await s.read(resource);
}

// Frees `owner`'s lock (a session store: its entry in the resource's queue).
template <class Store>
dl::awaitable<dl::result<void>> release_lock(Store& s, const std::string& resource, const dl::owner_token& owner,
                                            dl::diagnostics& diag)
{
    if constexpr (requires { s.release(resource, owner, &diag); })
        co_return co_await s.release(resource, owner, &diag);
    else if constexpr (requires { s.release(resource, owner); })
        co_return co_await s.release(resource, owner);
    else
        co_return co_await s.dequeue(resource, owner, &diag);
}

// status: what the store says about the lock, without taking it.
template <class Store>
int status(asio::io_context& io, std::vector<Store*> nodes, const cli::options& o)
{
    int rc = 0;
    std::vector<std::string> lines;
    asio::co_spawn(
        io,
        [&]() -> dl::awaitable<void> {
            for (std::size_t i = 0; i < nodes.size(); ++i) {
                dl::diagnostics diag;
                auto info = co_await read_lock(*nodes[i], o.resources[0], diag);
                if (!info) {
                    rc = cli::exit_code::store_failed;
                    lines.push_back(o.json ? "{\"node\":" + std::to_string(i) + ",\"error\":\"" +
                                                 json_escape(said(info.error(), diag)) + "\"}"
                                           : "node " + std::to_string(i) + ": " + said(info.error(), diag));
                    continue;
                }
                const auto& v = info.value();
                const auto left = v.remaining ? millis(*v.remaining) : -1;
                if (o.json) {
                    std::string line = "{\"node\":" + std::to_string(i) + ",\"held\":" + (v.held ? "true" : "false") +
                                       ",\"fence\":" + std::to_string(v.fence);
                    if (v.held)
                        line += ",\"owner\":\"" + json_escape(v.owner) + "\",\"remaining_ms\":" + std::to_string(left);
                    lines.push_back(line + "}");
                } else {
                    std::string line = (nodes.size() > 1 ? "node " + std::to_string(i) + ": " : std::string{}) +
                                       (v.held ? "held" : "free") + ", fence " + std::to_string(v.fence);
                    if (v.held)
                        line += ", owner " + v.owner + "..., " + (left >= 0 ? std::to_string(left) + " ms left" : "no TTL");
                    lines.push_back(line);
                }
            }
            co_await close_all(nodes);
        },
        asio::detached);
    io.run();
    for (const auto& l : lines)
        std::printf("%s\n", l.c_str());
    return rc;
}

// release --owner: an operator's clean-up of a lock whose holder is gone.
template <class Store>
int release(asio::io_context& io, std::vector<Store*> nodes, const cli::options& o)
{
    const auto owner = dl::owner_token::from_hex(o.owner);
    if (owner.is_nil()) {
        std::fprintf(stderr, "distlock: --owner must be the 32 hex digits of an owner id\n");
        return cli::exit_code::usage;
    }
    int released = 0, failed = 0;
    asio::co_spawn(
        io,
        [&]() -> dl::awaitable<void> {
            for (auto* n : nodes) {
                dl::diagnostics diag;
                auto r = co_await release_lock(*n, o.resources[0], owner, diag);
                if (r)
                    ++released;
                else if (r.error() != dl::condition::not_owner) {
                    ++failed;
                    std::fprintf(stderr, "distlock: %s\n", said(r.error(), diag).c_str());
                }
            }
            co_await close_all(nodes);
        },
        asio::detached);
    io.run();
    if (failed > 0)
        return cli::exit_code::store_failed;
    if (released == 0) {
        std::fprintf(stderr, "distlock: that owner does not hold %s\n", o.resources[0].c_str());
        return cli::exit_code::not_acquired;
    }
    return 0;
}

template <class Backend, class Store>
int perform_lock(asio::io_context& io, Backend& backend, std::vector<Store*> nodes, const cli::options& o);

// A store's list() and revoke(), with their words when it can give them.
template <class Store>
dl::awaitable<dl::result<std::vector<dl::lock_listing>>> list_locks(Store& s, const std::string& prefix,
                                                                     dl::diagnostics& diag)
{
    if constexpr (requires { s.list(prefix, &diag); })
        co_return co_await s.list(prefix, &diag);
    else
        co_return co_await s.list(prefix);
}
template <class Store>
dl::awaitable<dl::result<void>> revoke_lock(Store& s, const std::string& resource, dl::fence_token fence,
                                           dl::diagnostics& diag)
{
    if constexpr (requires { s.revoke(resource, fence, &diag); })
        co_return co_await s.revoke(resource, fence, &diag);
    else
        co_return co_await s.revoke(resource, fence);
}

// A resource id as a line of a listing shows it: bytes outside printable ASCII and
// the backslash as \xNN, so that a line is one lock and binary ids stay readable.
std::string shown_id(const std::string& id)
{
    constexpr const char* hex = "0123456789abcdef";
    std::string out;
    for (const char c : id) {
        const auto byte = static_cast<unsigned char>(c);
        if (byte < 0x20 || byte >= 0x7f || byte == '\\') {
            out += "\\x";
            out += hex[byte >> 4];
            out += hex[byte & 0xf];
        } else {
            out += c;
        }
    }
    return out;
}

// list: the locks held now, one line each (one JSON object per line with --json).
template <class Store>
int list(asio::io_context& io, std::vector<Store*> nodes, const cli::options& o)
{
    int rc = 0;
    std::vector<std::string> lines;
    const std::string prefix = o.resources.empty() ? std::string{} : o.resources[0];
    asio::co_spawn(
        io,
        [&]() -> dl::awaitable<void> {
            for (std::size_t i = 0; i < nodes.size(); ++i) {
                dl::diagnostics diag;
                auto got = co_await list_locks(*nodes[i], prefix, diag);
                const std::string node = nodes.size() > 1 ? "node " + std::to_string(i) + ": " : std::string{};
                if (!got) {
                    rc = cli::exit_code::store_failed;
                    std::fprintf(stderr, "distlock: %s%s\n", node.c_str(), said(got.error(), diag).c_str());
                    continue;
                }
                for (const auto& l : got.value()) {
                    const auto left = l.lock.remaining ? millis(*l.lock.remaining) : -1;
                    if (o.json) {
                        std::string line = "{\"node\":" + std::to_string(i) + ",\"resource\":\"" +
                                           json_escape(l.resource) + "\",\"fence\":" + std::to_string(l.lock.fence) +
                                           ",\"owner\":\"" + json_escape(l.lock.owner) + "\"";
                        if (l.lock.remaining)
                            line += ",\"remaining_ms\":" + std::to_string(left);
                        if (l.waiters)
                            line += ",\"waiters\":" + std::to_string(*l.waiters);
                        lines.push_back(line + "}");
                    } else {
                        std::string line = node + shown_id(l.resource) + "  fence " + std::to_string(l.lock.fence) +
                                           "  owner " + l.lock.owner + "...";
                        if (l.lock.remaining)
                            line += "  " + std::to_string(left) + " ms left";
                        if (l.waiters)
                            line += "  " + std::to_string(*l.waiters) + " waiting";
                        lines.push_back(line);
                    }
                }
            }
            co_await close_all(nodes);
        },
        asio::detached);
    io.run();
    for (const auto& l : lines)
        std::printf("%s\n", l.c_str());
    return rc;
}

// revoke: takes a lock back, only while it is still the grant named by --fence, or
// by --owner (read first: the holder's fence then names the grant, so a lock that
// changed hands between the read and the revoke is not touched). On several nodes
// (a Redlock quorum), on every node where that grant holds it.
template <class Store>
int revoke(asio::io_context& io, std::vector<Store*> nodes, const cli::options& o)
{
    int revoked = 0, failed = 0;
    std::vector<std::string> lines;
    const auto& resource = o.resources[0];
    std::string owner = o.owner.substr(0, 8);
    std::transform(owner.begin(), owner.end(), owner.begin(), [](unsigned char c) { return std::tolower(c); });
    asio::co_spawn(
        io,
        [&]() -> dl::awaitable<void> {
            for (std::size_t i = 0; i < nodes.size(); ++i) {
                dl::diagnostics diag;
                std::optional<dl::fence_token> fence = o.fence;
                if (!fence) {
                    auto info = co_await read_lock(*nodes[i], resource, diag);
                    if (!info) {
                        ++failed;
                        std::fprintf(stderr, "distlock: %s\n", said(info.error(), diag).c_str());
                        continue;
                    }
                    if (!info->held || info->owner != owner)
                        continue; // not that owner's lock on this node
                    fence = info->fence;
                }
                auto r = co_await revoke_lock(*nodes[i], resource, *fence, diag);
                if (r) {
                    ++revoked;
                    lines.push_back(o.json ? "{\"node\":" + std::to_string(i) + ",\"resource\":\"" +
                                                 json_escape(resource) + "\",\"revoked\":true,\"fence\":" +
                                                 std::to_string(*fence) + "}"
                                           : "revoked " + shown_id(resource) + " (fence " + std::to_string(*fence) +
                                                 (nodes.size() > 1 ? ", node " + std::to_string(i) : std::string{}) +
                                                 ")");
                } else if (r.error() != dl::condition::not_owner) {
                    ++failed;
                    std::fprintf(stderr, "distlock: %s\n", said(r.error(), diag).c_str());
                }
            }
            co_await close_all(nodes);
        },
        asio::detached);
    io.run();
    for (const auto& l : lines)
        std::printf("%s\n", l.c_str());
    if (failed > 0)
        return cli::exit_code::store_failed;
    if (revoked == 0) {
        std::fprintf(stderr, "distlock: %s is not held by that grant (free, or another's): nothing revoked\n",
                     shown_id(resource).c_str());
        return cli::exit_code::not_acquired;
    }
    return 0;
}

// Every verb: the ones that read or change one lock on each of `nodes`, the lock
// itself on `backend` (the nodes' quorum, or the one store). A verb the store cannot
// do is refused before any I/O, saying why.
template <class Backend, class Store>
int perform(asio::io_context& io, Backend& backend, std::vector<Store*> nodes, const cli::options& o)
{
    constexpr bool reads = dl::inspectable_store<Store>;
    constexpr bool lists = dl::enumerable_store<Store>;
    constexpr bool revokes = dl::revocable_store<Store> && reads;
    const auto cannot = [&](const char* what) {
        if constexpr (std::is_same_v<Store, dl::postgres::advisory_store>)
            std::fprintf(stderr, "distlock: %s need the lease table: leave out mode=advisory (an advisory lock "
                                 "belongs to the session that holds it, and the server keeps only its 64-bit key, "
                                 "not the resource id)\n", what);
        else
            std::fprintf(stderr, "distlock: this store cannot %s\n", what);
        return cli::exit_code::usage;
    };
    if constexpr (!dl::lock_delay_store<Backend>) {
        if (o.lock_delay) {
            std::fprintf(stderr, "distlock: --lock-delay: this store keeps no lock-delay (docs/lock_delay.md "
                                 "lists the stores that do)\n");
            return cli::exit_code::usage;
        }
    }
    if constexpr (!dl::shared_backend<Backend>) {
        if (o.shared || o.permits) {
            std::fprintf(stderr, "distlock: --shared and --permits: not on a Redlock quorum (a reader counted by one "
                                 "majority and a writer by another could both hold); use one store "
                                 "(docs/shared.md)\n");
            return cli::exit_code::usage;
        }
    }
    switch (o.what) {
    case cli::verb::status:
        if constexpr (reads)
            return status(io, nodes, o);
        else
            return cannot("status and release");
    case cli::verb::release:
        if constexpr (reads)
            return release(io, nodes, o);
        else
            return cannot("status and release");
    case cli::verb::list:
        if constexpr (lists)
            return list(io, nodes, o);
        else
            return cannot("list and revoke");
    case cli::verb::revoke:
        if constexpr (revokes)
            return revoke(io, nodes, o);
        else
            return cannot("list and revoke");
    default: return perform_lock(io, backend, nodes, o);
    }
}

template <class Backend, class Store>
int perform_lock(asio::io_context& io, Backend& backend, std::vector<Store*> nodes, const cli::options& o)
{
    session<Backend> s{backend, o};
    asio::co_spawn(
        io,
        [&]() -> dl::awaitable<void> {
            co_await s.run();
            co_await close_all(nodes);
        },
        asio::detached);
    io.run();
    return s.exit();
}

// A store URL its store refused: the URL (whole, control bytes escaped) and what is
// wrong with it, then the usage; a usage error, found before any store is touched.
int bad_store_url(const std::string& url, const std::string& why)
{
    const auto shown = dl::backend::quoted(url, url.size());
    std::fprintf(stderr, "distlock: bad store URL %s: %s\n%s", shown.c_str(), why.c_str(), cli::usage_text);
    return cli::exit_code::usage;
}

// One DynamoDB table (a quorum of tables is not offered: DynamoDB replicates itself).
int with_dynamodb(asio::io_context& io, const cli::options& o)
{
    if (o.stores.size() != 1) {
        std::fprintf(stderr, "distlock: one DynamoDB store at a time\n%s", cli::usage_text);
        return cli::exit_code::usage;
    }
    std::string why;
    auto cfg = dl::dynamodb::config::from_url(o.stores[0], &why);
    if (!cfg)
        return bad_store_url(o.stores[0], why);
    dl::dynamodb::store store{io, std::move(cfg.value())};
    std::vector<dl::dynamodb::store*> nodes{&store};
    if (o.create_table) {
        dl::diagnostics diag;
        dl::result<void> made{make_error_code(dl::errc::cancelled)};
        asio::co_spawn(
            io,
            [&]() -> dl::awaitable<void> {
                made = co_await store.create_table(std::chrono::seconds{60}, &diag);
                // io.run() below would otherwise wait for the server to close the idle
                // connection (dynalite: after 5 s); the verb connects again.
                store.disconnect();
            },
            asio::detached);
        io.run();
        io.restart();
        if (!made) {
            std::fprintf(stderr, "distlock: creating the table failed: %s%s%s\n", made.error().message().c_str(),
                         diag.empty() ? "" : ": ", diag.to_string().c_str());
            return cli::exit_code::store_failed;
        }
    }
    return perform(io, store, nodes, o);
}

// A store that stands alone (one object, whatever its servers): every verb it can do.
template <class Store, class Config>
int with_store(asio::io_context& io, const cli::options& o, Config cfg)
{
    Store store{io, std::move(cfg)};
    std::vector<Store*> nodes{&store};
    return perform(io, store, nodes, o);
}

template <class Store>
int with_url(asio::io_context& io, const cli::options& o)
{
    std::string why;
    auto cfg = Store::config_type::from_url(o.stores[0], &why);
    if (!cfg)
        return bad_store_url(o.stores[0], why);
    return with_store<Store>(io, o, std::move(cfg.value()));
}

// One PostgreSQL database: its lease table, or with `mode=advisory` in the URL
// (taken out here, before libpq sees the rest; `mode=table` is the default)
// session-level advisory locks held by the distlock process's connection for as long
// as the command runs.
int with_postgres(asio::io_context& io, const cli::options& o)
{
    if (o.stores.size() != 1) {
        std::fprintf(stderr, "distlock: one PostgreSQL store at a time\n%s", cli::usage_text);
        return cli::exit_code::usage;
    }
    const auto& url = o.stores[0];
    std::string why;
    auto parsed = dl::backend::parse_url(url, dl::postgres::config::url_rules(), &why);
    if (!parsed)
        return bad_store_url(url, why);
    bool advisory = false;
    if (const auto mode = dl::backend::take_query(*parsed, "mode")) {
        const auto which = dl::backend::query_choice(*mode, {"table", "advisory"}, &why);
        if (!which)
            return bad_store_url(url, why);
        advisory = *which == 1;
    }
    auto cfg = dl::postgres::config::from_parsed_url(std::move(parsed).value(), &why);
    if (!cfg)
        return bad_store_url(url, why);
    if (advisory)
        return with_store<dl::postgres::advisory_store>(io, o, std::move(cfg.value()));
    return with_store<dl::postgres::store>(io, o, std::move(cfg.value()));
}

} // namespace

namespace {
int run_main(const cli::options& o);
}

int main(int argc, char** argv)
{
    std::vector<std::string> args(argv + 1, argv + argc);
    auto parsed = cli::parse(args);
    if (const auto* message = std::get_if<std::string>(&parsed)) {
        std::fprintf(stderr, "distlock: %s\n%s", message->c_str(), cli::usage_text);
        return cli::exit_code::usage;
    }
    const auto& o = std::get<cli::options>(parsed);
    if (o.what == cli::verb::help) {
        std::fputs(cli::usage_text, stdout);
        return 0;
    }
    // The signals run() waits for must not kill distlock before it can forward them.
    sigset_t blocked;
    sigemptyset(&blocked);
    sigaddset(&blocked, SIGPIPE);
    ::sigprocmask(SIG_BLOCK, &blocked, nullptr);

    // A store refuses settings it cannot use when it is made (an etcd prefix nesting
    // with another, TLS files that cannot be read): said as such, not as a crash.
    try {
        return run_main(o);
    } catch (const std::system_error& e) {
        std::fprintf(stderr, "distlock: %s\n", e.what());
        return e.code() == dl::condition::invalid_argument ? cli::exit_code::usage : cli::exit_code::store_failed;
    }
}

namespace {
int run_main(const cli::options& o)
{
    asio::io_context io;
    if (o.stores.empty() || o.stores[0] == "memory") {
        dl::memory::store store{io};
        std::vector<dl::memory::store*> nodes{&store};
        return perform(io, store, nodes, o);
    }
    const auto kind = cli::store_kind_of(o.stores[0]);
    if (kind == cli::store_kind::dynamodb)
        return with_dynamodb(io, o);
    if (kind == cli::store_kind::postgres)
        return with_postgres(io, o);
    if (o.create_table) {
        std::fprintf(stderr, "distlock: --create-table is for DynamoDB stores\n%s", cli::usage_text);
        return cli::exit_code::usage;
    }
    if (kind == cli::store_kind::etcd)
        return with_url<dl::etcd::store>(io, o);
    if (kind == cli::store_kind::zookeeper)
        return with_url<dl::zookeeper::store>(io, o);
    if (kind == cli::store_kind::redis_cluster) // a Cluster or a Sentinel-watched primary: one store
        return with_url<dl::redis::store>(io, o);
    std::vector<std::unique_ptr<dl::redis::store>> owned;
    for (const auto& url : o.stores) {
        std::string why;
        auto cfg = dl::redis::config::from_url(url, &why);
        if (!cfg)
            return bad_store_url(url, why);
        owned.push_back(std::make_unique<dl::redis::store>(io, std::move(cfg.value())));
    }
    std::vector<dl::redis::store*> nodes;
    for (auto& s : owned)
        nodes.push_back(s.get());
    if (nodes.size() == 1)
        return perform(io, *nodes[0], nodes, o);
    dl::quorum<dl::redis::store> quorum{std::span<dl::redis::store* const>{nodes}};
    return perform(io, quorum, nodes, o);
}
} // namespace
