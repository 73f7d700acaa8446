// The distlock command line, parsed without touching any store: what to do, on
// which stores, for which resources, and the child command. Pure functions, so the
// unit tests check every bad input's message and exit code.
#pragma once

#include <distlock/clock.hpp>
#include <distlock/options.hpp>

#include <charconv>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace distlock::cli {

enum class verb { run, elect, try_lock, status, release, list, revoke, help };

/// Exit codes. The child's own code is passed through by `run` when nothing else
/// happened.
namespace exit_code {
inline constexpr int usage = 2;           ///< bad command line; no store was touched
inline constexpr int not_acquired = 3;    ///< held by another owner until --wait ran out (or `try`: held;
                                          ///< `release`, `revoke`: that owner or grant does not hold it)
inline constexpr int store_failed = 4;    ///< the store could not be used (unreachable, refused)
inline constexpr int lease_lost = 5;      ///< the lease was lost while the command ran: it was stopped
inline constexpr int max_hold = 6;        ///< the command ran past --max-hold: it was stopped
inline constexpr int spawn_failed = 127;  ///< the command could not be started (as a shell does)
} // namespace exit_code

struct options {
    verb what = verb::help;
    std::vector<std::string> stores;      ///< --store URL, in order; none: memory
    duration ttl = std::chrono::seconds{30};
    std::optional<duration> wait;         ///< --wait; none: as long as max_wait allows
    std::optional<duration> max_hold;
    std::optional<duration> lock_delay;   ///< run/elect --lock-delay D: no grant for D after an unplanned loss
    /// --store-timeout: how long the store may go without answering (unreachable,
    /// refusing) before run or try gives up with exit 4; apart from --wait, which is
    /// how long to wait for the lock while the store answers that it is held.
    duration store_timeout = std::chrono::seconds{60};
    duration grace = std::chrono::seconds{10};
    bool json = false;
    bool verbose = false;
    bool create_table = false;            ///< --create-table (DynamoDB)
    std::string owner;                    ///< release/revoke --owner ID (hex)
    std::optional<fence_token> fence;     ///< revoke --fence N
    bool shared = false;                  ///< run/try --shared: a reader of a shared mutex
    std::optional<std::uint32_t> permits; ///< run/try --permits N: a permit of a semaphore of N
    std::optional<std::string> value;     ///< elect --value V: what the leader proclaims
    std::vector<std::string> resources;
    std::vector<std::string> command;     ///< after "--"
};

/// "500ms", "30s", "2m", "1h" (a whole number and a unit). nullopt for anything else,
/// zero, or a value beyond distlock::max_wait.
inline std::optional<duration> parse_duration(std::string_view text)
{
    std::int64_t n = 0;
    const auto* begin = text.data();
    const auto* end = text.data() + text.size();
    const auto [rest, ec] = std::from_chars(begin, end, n);
    if (ec != std::errc{} || rest == begin || n <= 0)
        return std::nullopt;
    const std::string_view unit{rest, static_cast<std::size_t>(end - rest)};
    std::int64_t per_unit_ms = 0;
    if (unit == "ms")
        per_unit_ms = 1;
    else if (unit == "s")
        per_unit_ms = 1000;
    else if (unit == "m")
        per_unit_ms = 60'000;
    else if (unit == "h")
        per_unit_ms = 3'600'000;
    else
        return std::nullopt;
    const auto limit_ms = std::chrono::duration_cast<std::chrono::milliseconds>(max_wait).count();
    if (n > limit_ms / per_unit_ms)
        return std::nullopt;
    return std::chrono::milliseconds{n * per_unit_ms};
}

/// The stores the tool speaks, by URL scheme.
enum class store_kind { redis, redis_cluster, dynamodb, postgres, etcd, zookeeper };

inline constexpr const char* known_stores =
    "memory, redis://, rediss://, unix://, redis+cluster://, redis+sentinel:// (rediss+ for TLS), dynamodb://, "
    "dynamodbs://, postgres://, postgresql://, etcd://, etcds://, zk://";

inline std::optional<store_kind> store_kind_of(std::string_view url)
{
    for (const char* p : {"redis://", "rediss://", "unix://"})
        if (url.starts_with(p))
            return store_kind::redis;
    for (const char* p : {"redis+cluster://", "rediss+cluster://", "redis+sentinel://", "rediss+sentinel://"})
        if (url.starts_with(p))
            return store_kind::redis_cluster; // one store object, whatever the topology
    if (url.starts_with("dynamodb://") || url.starts_with("dynamodbs://"))
        return store_kind::dynamodb;
    if (url.starts_with("postgres://") || url.starts_with("postgresql://"))
        return store_kind::postgres;
    if (url.starts_with("etcd://") || url.starts_with("etcds://"))
        return store_kind::etcd;
    if (url.starts_with("zk://"))
        return store_kind::zookeeper;
    return std::nullopt;
}

/// An owner id as an operator gives it to revoke: the 8 hex digits a listing shows,
/// up to the whole 32.
inline bool owner_prefix_ok(std::string_view id)
{
    if (id.size() < 8 || id.size() > 32)
        return false;
    for (const char c : id)
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')))
            return false;
    return true;
}

/// What parsing found: the options, or the message for a usage error.
using parsed = std::variant<options, std::string>;

inline parsed parse(const std::vector<std::string>& args)
{
    options o;
    if (args.empty())
        return std::string{"no command given (run, elect, try, status, list, release, revoke)"};
    const auto& first = args[0];
    if (first == "--help" || first == "-h" || first == "help") {
        o.what = verb::help;
        return o;
    }
    if (first == "run")
        o.what = verb::run;
    else if (first == "elect")
        o.what = verb::elect;
    else if (first == "try")
        o.what = verb::try_lock;
    else if (first == "status")
        o.what = verb::status;
    else if (first == "release")
        o.what = verb::release;
    else if (first == "list")
        o.what = verb::list;
    else if (first == "revoke")
        o.what = verb::revoke;
    else
        return "unknown command '" + first + "' (run, elect, try, status, list, release, revoke)";

    std::size_t i = 1;
    const auto value = [&](std::string_view flag) -> std::optional<std::string> {
        if (i + 1 >= args.size())
            return std::nullopt;
        (void)flag;
        return args[++i];
    };
    const auto duration_of = [&](std::string_view flag, std::optional<duration>& out) -> std::optional<std::string> {
        auto v = value(flag);
        if (!v)
            return std::string{flag} + " needs a duration (500ms, 30s, 2m, 1h)";
        out = parse_duration(*v);
        if (!out)
            return "bad duration '" + *v + "' for " + std::string{flag} + " (500ms, 30s, 2m, 1h; above zero)";
        return std::nullopt;
    };
    for (; i < args.size(); ++i) {
        const auto& a = args[i];
        if (a == "--") {
            o.command.assign(args.begin() + static_cast<std::ptrdiff_t>(i) + 1, args.end());
            break;
        }
        if (a == "--store") {
            auto v = value(a);
            if (!v)
                return std::string{"--store needs a URL (memory, redis://..., etcd://..., zk://..., ...)"};
            o.stores.push_back(*v);
        } else if (a == "--ttl") {
            std::optional<duration> d;
            if (auto e = duration_of(a, d))
                return *e;
            o.ttl = *d;
        } else if (a == "--wait") {
            if (auto e = duration_of(a, o.wait))
                return *e;
        } else if (a == "--lock-delay") {
            if (auto e = duration_of(a, o.lock_delay))
                return *e;
        } else if (a == "--max-hold") {
            if (auto e = duration_of(a, o.max_hold))
                return *e;
        } else if (a == "--store-timeout") {
            std::optional<duration> d;
            if (auto e = duration_of(a, d))
                return *e;
            o.store_timeout = *d;
        } else if (a == "--grace") {
            std::optional<duration> d;
            if (auto e = duration_of(a, d))
                return *e;
            o.grace = *d;
        } else if (a == "--owner") {
            auto v = value(a);
            if (!v)
                return std::string{"--owner needs the owner id"};
            o.owner = *v;
        } else if (a == "--fence") {
            auto v = value(a);
            fence_token n = 0;
            const auto* end = v ? v->data() + v->size() : nullptr;
            if (!v || v->empty() || std::from_chars(v->data(), end, n).ptr != end || n == 0)
                return std::string{"--fence needs the grant's fencing token, a whole number above zero"};
            o.fence = n;
        } else if (a == "--shared") {
            o.shared = true;
        } else if (a == "--permits") {
            auto v = value(a);
            std::uint32_t n = 0;
            const auto* end = v ? v->data() + v->size() : nullptr;
            if (!v || v->empty() || std::from_chars(v->data(), end, n).ptr != end || n == 0 || n > max_permits)
                return "--permits needs a count from 1 to " + std::to_string(max_permits);
            o.permits = n;
        } else if (a == "--value") {
            auto v = value(a);
            if (!v)
                return std::string{"--value needs the value the leader proclaims"};
            if (v->size() > max_leader_value_size)
                return "--value is at most " + std::to_string(max_leader_value_size) + " bytes";
            o.value = *v;
        } else if (a == "--json") {
            o.json = true;
        } else if (a == "--verbose" || a == "-v") {
            o.verbose = true;
        } else if (a == "--create-table") {
            o.create_table = true;
        } else if (a.size() > 1 && a.starts_with("--")) {
            return "unknown option '" + a + "'";
        } else {
            o.resources.push_back(a);
        }
    }

    if (o.what == verb::list) {
        // An optional prefix; none lists every lock.
        if (o.resources.size() > 1)
            return std::string{"list takes at most one prefix"};
        if (!o.resources.empty() && o.resources[0].size() > max_resource_size)
            return "a prefix is at most " + std::to_string(max_resource_size) + " bytes";
    } else if (o.resources.empty()) {
        return std::string{"no resource given"};
    }
    for (const auto& r : o.resources)
        if (o.what != verb::list && (r.empty() || r.size() > max_resource_size))
            return "resource ids must be 1 to " + std::to_string(max_resource_size) + " bytes";
    for (const auto& s : o.stores)
        if (!(s == "memory" || store_kind_of(s)))
            return "unknown store '" + s + "' (" + known_stores + ")";
    if (o.stores.size() > 1)
        for (const auto& s : o.stores)
            if (store_kind_of(s) != store_kind::redis)
                return std::string{"several --store make a Redlock quorum of single Redis servers (redis://, "
                                   "rediss://, unix://); every other store stands alone"};
    if ((o.what == verb::run || o.what == verb::elect) && o.command.empty())
        return std::string{"run and elect need a command after '--'"};
    if (o.what != verb::run && o.what != verb::elect && !o.command.empty())
        return std::string{"only run and elect take a command"};
    if (o.what == verb::elect && o.resources.size() != 1)
        return std::string{"elect takes one election name"};
    if (o.what == verb::elect && o.stores.size() > 1)
        return std::string{"elect needs one store: an election's value is kept by no majority of a quorum"};
    if (o.what != verb::elect && o.value)
        return std::string{"only elect takes --value"};
    if (o.lock_delay && o.what != verb::run && o.what != verb::elect)
        return std::string{"only run and elect take --lock-delay"};
    if (o.lock_delay && *o.lock_delay > o.ttl)
        return std::string{"--lock-delay is at most the --ttl"};
    if ((o.what == verb::status || o.what == verb::release || o.what == verb::revoke) && o.resources.size() != 1)
        return std::string{"status, release and revoke take one resource"};
    if (o.what == verb::release && o.owner.empty())
        return std::string{"release needs --owner ID (the id `distlock run --verbose` printed)"};
    if (o.what == verb::revoke && o.owner.empty() == !o.fence.has_value())
        return std::string{"revoke needs one of --fence N or --owner ID (as `distlock list` shows them)"};
    if (o.what == verb::revoke && !o.owner.empty() && !owner_prefix_ok(o.owner))
        return std::string{"--owner must be 8 to 32 hex digits of an owner id (`distlock list` shows 8)"};
    if (o.what != verb::release && o.what != verb::revoke && !o.owner.empty())
        return std::string{"only release and revoke take --owner"};
    if (o.what != verb::revoke && o.fence)
        return std::string{"only revoke takes --fence"};
    if ((o.shared || o.permits) && o.what != verb::run && o.what != verb::try_lock)
        return std::string{"only run and try take --shared and --permits"};
    if (o.shared && o.permits)
        return std::string{"--shared (a reader) and --permits (a semaphore's permit) are two kinds of lock: one of them"};
    if ((o.shared || o.permits) && o.resources.size() != 1)
        return std::string{"--shared and --permits take one resource"};
    return o;
}

inline constexpr const char* usage_text =
    R"(usage: distlock run [--store URL]... [--create-table] [--ttl D] [--wait D] [--store-timeout D] [--max-hold D] [--lock-delay D] [--grace D] [-v] RESOURCE... -- COMMAND [ARGS...]
       distlock run|try ... (--shared | --permits N) RESOURCE ...
       distlock elect [--store URL] [--ttl D] [--value V] [--lock-delay D] [--grace D] [-v] NAME -- COMMAND [ARGS...]
       distlock try [--store URL]... [--ttl D] [--store-timeout D] [--json] RESOURCE...
       distlock status [--store URL]... [--json] RESOURCE
       distlock list [--store URL]... [--json] [PREFIX]
       distlock revoke [--store URL]... (--fence N | --owner ID) [--json] RESOURCE
       distlock release [--store URL]... --owner ID RESOURCE

Runs COMMAND while holding a distributed lock on every RESOURCE (sorted, all or
nothing), with DISTLOCK_RESOURCE and DISTLOCK_FENCE in its environment (and
DISTLOCK_RESOURCE_<i>, DISTLOCK_FENCE_<i> for each of several). The lease is renewed
while the command runs; if it is lost, the command's process group gets SIGTERM,
then SIGKILL after --grace, and distlock exits with 5.

--shared takes RESOURCE as one of its readers (a shared mutex: readers share it, a
writer, without --shared, holds it alone and waiting writers keep new readers out);
--permits N as one of N permits (a semaphore), with DISTLOCK_SLOT, the permit's
number, in the command's environment. Both on every store but a Redlock quorum.

elect campaigns in the election NAME and runs COMMAND while it leads, with
DISTLOCK_EPOCH (the term's epoch: a fencing token larger than every earlier
leader's; pass it with every write), DISTLOCK_RESOURCE (NAME) and DISTLOCK_FENCE
(the epoch) in its environment; --value (default host:pid) is what observers are
told. The term is renewed while the command runs and given up when it exits; if the
term is lost, the command is stopped as run stops it, and distlock exits with 5.
Every store but a Redlock quorum.

--lock-delay D (run, elect): when this holder is lost without releasing (killed,
its lease run out), the store grants the lock to nobody for D after that, so that
its writes in flight land first; a normal exit releases at once (docs/lock_delay.md).

list shows the locks held now (every one, or those whose id starts with PREFIX):
resource, fence, owner (8 hex digits), time left, waiters where the store queues.
revoke takes a lock back only if it is still the grant with that fence (or, with
--owner, the grant of that owner): never a blind delete. Its holder finds out at its
next renewal and stops (`run` stops the command); a holder that does not renew acts
on until its validity ends, which its fence makes harmless to fenced data.
PostgreSQL advisory locks cannot be listed or revoked (the server keeps only their
64-bit keys).

Stores: memory (this process only), redis://[user:pass@]host:port[/db],
rediss://... (TLS), unix:///path; several --store make a Redlock quorum;
redis+cluster://host:port[,host:port...] (a Redis Cluster),
redis+sentinel://host:port[,...]/primary-name[/db] (through Sentinels);
etcd://[user:pass@]host[:port][,...][?prefix=P&ttl=SECONDS] (etcds:// for HTTPS);
zk://host[:port][,...][/chroot][?prefix=/P&timeout=MS] (ZooKeeper);
dynamodb://host:port?table=T&region=R&mode=record_version|expiry_time (dynamodbs://
for HTTPS; credentials from AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY), with
--create-table to make the table first if it does not exist;
postgres://[user[:pass]@]host:port/db[?libpq options&table=T&mode=advisory]: a lease
table (made if missing), or with mode=advisory a session-level advisory lock.
Durations: 500ms, 30s, 2m, 1h. Defaults: --ttl 30s, --grace 10s, --wait unbounded,
--store-timeout 60s: --wait bounds the wait for a lock the store says is held;
--store-timeout how long the store may go without answering (down, unreachable,
refusing) before distlock gives up with exit 4 and the store's words.

Exit codes: the command's own; 2 usage; 3 not acquired (held; revoke, release:
not that grant's lock); 4 store failed;
5 lease lost; 6 past --max-hold; 127 command not started.
)";

} // namespace distlock::cli
