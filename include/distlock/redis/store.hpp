// distlock/redis/store.hpp: Redis as a distlock store (single node; several make a
// Redlock quorum through distlock::quorum<redis::store>).
#pragma once

#include <distlock/clock.hpp>
#include <distlock/detail/lifetime.hpp>
#include <distlock/detail/wakeup.hpp>
#include <distlock/error.hpp>
#include <distlock/options.hpp>
#include <distlock/owner_token.hpp>
#include <distlock/redis/config.hpp>
#include <distlock/diagnostics.hpp>
#include <distlock/redis/detail/connection.hpp>
#include <distlock/redis/detail/sha1.hpp>
#include <distlock/redis/detail/subscriber.hpp>
#include <distlock/redis/resp/command.hpp>
#include <distlock/redis/resp/value.hpp>
#include <distlock/redis/scripts.hpp>
#include <distlock/result.hpp>
#include <distlock/store.hpp>

#include <asio/any_io_executor.hpp>
#include <asio/execution_context.hpp>
#include <asio/strand.hpp>

#include <array>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <string_view>
#include <vector>

namespace distlock::redis {

/// A Redis server used as a lock store. One pipelined connection carries every
/// request of every coroutine using the store, and a second one listens for release
/// notifications. Neither is opened before the first request; both reconnect on
/// the next request after a failure.
///
/// Models put_if_absent_store, owner_checked_store, fencing_counter_store and
/// release_notifying_store.
///
/// \par Thread safety
/// Safe to use from several threads: all connection state lives on a strand.
///
/// \par Object lifetimes
/// Every operation owns the connection it uses once started, so the store may be
/// destroyed while one is in flight (it completes with an error). Leases, lock()
/// calls and watchers reach the store through its lifetime (detail/lifetime.hpp):
/// after the store is destroyed they find it closed and report
/// errc::store_unavailable (held leases are reported lost). close() first finishes
/// the releases still pending, then closes both connections, so io.run() returns.
class store {
public:
    using executor_type = asio::any_io_executor;

    /// Fails (throws std::system_error with errc::invalid_argument) only when the TLS
    /// files in `cfg` cannot be loaded; connecting happens on first use.
    store(executor_type ex, config cfg) : ex_{std::move(ex)}, cfg_{std::move(cfg)}
    {
        auto tls = transport::make_tls_context(cfg_.endpoint());
        if (!tls)
            throw std::system_error{tls.error(), "distlock::redis::store: TLS settings"};
        auto strand = asio::make_strand(ex_);
        connection_ = std::make_shared<detail::connection>(strand, cfg_, tls.value());
        subscriber_ = std::make_shared<detail::subscriber>(strand, cfg_, tls.value());
        life_ = distlock::detail::lifetime::make(ex_);
    }

    template <class ExecutionContext>
        requires std::is_convertible_v<ExecutionContext&, asio::execution_context&>
    store(ExecutionContext& ctx, config cfg) : store(executor_type{ctx.get_executor()}, std::move(cfg))
    {}

    ~store()
    {
        life_->shut();
        connection_->close();
        subscriber_->close();
    }
    store(const store&) = delete;
    store& operator=(const store&) = delete;

    executor_type get_executor() const noexcept { return ex_; }
    const config& settings() const noexcept { return cfg_; }

    /// What the core uses to reach the store without outliving it.
    std::shared_ptr<distlock::detail::lifetime> lifetime() const noexcept { return life_; }

    /// The longest a request takes before the store completes it itself (connecting
    /// first, then the request): attempts that surely end before a deadline need no
    /// timer of their own.
    duration operation_timeout() const noexcept { return cfg_.connect_timeout + cfg_.request_timeout; }

    /// Refuses new locks, finishes the releases still pending, ends the leases still
    /// held (reported lost, released), then closes both connections: io.run() can
    /// return afterwards.
    awaitable<void> close()
    {
        co_await life_->close();
        connection_->close();
        subscriber_->close();
    }

    /// Which server process this store reached at its last connect (its run_id, from
    /// INFO server in the handshake), without I/O: nullopt before the first connect,
    /// empty when the server would not tell. A quorum refuses two nodes with one
    /// identity (errc::invalid_argument), whatever their database, prefix or host name.
    std::optional<std::string> known_server_identity() const { return connection_->known_identity(); }

    /// Closes both connections; the next request reconnects. Requests already written
    /// (even in part) complete with errc::outcome_unknown, queued ones with
    /// errc::store_unavailable (the store contract: only those were surely not applied).
    void disconnect()
    {
        connection_->close();
        subscriber_->close();
    }

    // -- Key layout (see scripts.hpp) ---------------------------------------------

    std::string lock_key(std::string_view resource) const { return key(resource, "lock"); }
    std::string fence_key(std::string_view resource) const { return key(resource, "fence"); }
    std::string channel(std::string_view resource) const { return key(resource, "released"); }

    // -- Store primitives (distlock/store.hpp) --------------------------------------

    // Every operation computes what it sends now and hands it, with the connection,
    // to a coroutine that owns both: it never touches the store object again.

    // Each primitive takes an optional diagnostics: a failure's words go there (the
    // server's error reply, or which connection failed how).

    awaitable<result<fence_token>> put_if_absent(std::string_view resource, const owner_token& owner, duration ttl,
                                                 diagnostics* diag = nullptr)
    {
        return replicated(connection_, settings(),
                          acquired(eval(script::acquire, {lock_key(resource), fence_key(resource)},
                                        {owner.to_hex(), millis(ttl)}, diag)),
                          diag);
    }

    /// put_if_absent() that tells how long the holder's lock has left when it is held
    /// (the acquire script returns the PTTL): contention as data.
    awaitable<result<answer>> put_if_absent_answer(std::string_view resource, const owner_token& owner, duration ttl,
                                                   diagnostics* diag = nullptr)
    {
        return replicated(connection_, settings(),
                          answered(eval(script::acquire, {lock_key(resource), fence_key(resource)},
                                        {owner.to_hex(), millis(ttl)}, diag)),
                          diag);
    }

    awaitable<result<void>> extend(std::string_view resource, const owner_token& owner, duration ttl,
                                   diagnostics* diag = nullptr)
    {
        return owned_reply(eval(script::extend, {lock_key(resource)}, {owner.to_hex(), millis(ttl)}, diag));
    }

    awaitable<result<void>> release(std::string_view resource, const owner_token& owner, diagnostics* diag = nullptr)
    {
        return owned_reply(eval(script::release, {lock_key(resource)}, {owner.to_hex(), channel(resource)}, diag));
    }

    awaitable<result<fence_token>> next_fence(std::string_view resource, diagnostics* diag = nullptr)
    {
        return fence_reply(exec_on(connection_, resp::command({"INCR", fence_key(resource)}), diag));
    }

    awaitable<result<fence_token>> raise_fence(std::string_view resource, fence_token floor,
                                               diagnostics* diag = nullptr)
    {
        return fence_reply(eval(script::raise_fence, {fence_key(resource)}, {std::to_string(floor)}, diag));
    }

    /// Reads the lock on `resource` without taking it (inspectable_store): the owner
    /// (shortened), the time left and the fencing counter, in one script.
    awaitable<result<lock_info>> read(std::string_view resource, diagnostics* diag = nullptr)
    {
        return inspected(eval(script::inspect, {lock_key(resource), fence_key(resource)}, {}, diag));
    }

    /// Listens for releases of one resource, until destroyed.
    class watcher {
    public:
        watcher(watcher&& other) noexcept = default;
        watcher& operator=(watcher&&) = delete;
        ~watcher()
        {
            if (subscriber_)
                subscriber_->unsubscribe(channel_, wakeup_);
        }

        /// True when a release was published, false when `until` came first. If the
        /// subscription was lost (connection dropped) it is renewed first.
        awaitable<bool> wait(time_point until)
        {
            if (lost_) {
                const auto ec = co_await subscriber_->subscribe(channel_, wakeup_);
                if (ec) { // still down: wait as a plain timer
                    timer t{co_await asio::this_coro::executor, until};
                    (void)co_await t.async_wait(asio::experimental::as_tuple(asio::use_awaitable));
                    co_return false;
                }
                lost_ = false;
            }
            const bool notified = co_await wakeup_->wait(until);
            co_return notified;
        }

    private:
        friend class store;
        watcher(std::shared_ptr<detail::subscriber> s, std::string channel,
                std::shared_ptr<distlock::detail::wakeup> w, bool lost)
            : subscriber_{std::move(s)}, channel_{std::move(channel)}, wakeup_{std::move(w)}, lost_{lost}
        {}
        std::shared_ptr<detail::subscriber> subscriber_;
        std::string channel_;
        std::shared_ptr<distlock::detail::wakeup> wakeup_;
        bool lost_ = false;
    };

    /// Subscribes to the resource's release channel; completes once Redis confirmed.
    /// If the subscription fails, the watcher still works as a plain timer.
    awaitable<watcher> watch(std::string_view resource) { return watch_on(subscriber_, channel(resource)); }

    /// Channels currently subscribed (they must not accumulate).
    std::size_t subscribed_channels() const { return subscriber_->channels(); }

    // -- Beyond the store concepts -----------------------------------------------

    /// Put-if-absent on several resources in one round trip, all or nothing (a single
    /// Redis node; in a cluster the keys of different resources are in different slots).
    /// Returns one fencing token per resource, in the given order.
    awaitable<result<std::vector<fence_token>>> put_if_absent_all(const std::vector<std::string>& resources,
                                                                  const owner_token& owner, duration ttl,
                                                                  diagnostics* diag = nullptr)
    {
        std::vector<std::string> keys;
        for (const auto& r : resources) {
            keys.push_back(lock_key(r));
            keys.push_back(fence_key(r));
        }
        return replicated(connection_, settings(),
                          acquired_all(eval(script::acquire_all, std::move(keys), {owner.to_hex(), millis(ttl)}, diag),
                                       resources.size()),
                          diag);
    }

    /// Writes `value` under `key` (a hash with fields value and fence) unless a write
    /// with a newer fencing token has already happened: errc::stale_fence then. This
    /// is how data kept in Redis enforces the lease's fencing token atomically.
    /// Tokens are compared as Lua numbers: exact up to 2^53. Arguments in the order of
    /// every fenced write of distlock: where, the token, what.
    awaitable<result<void>> fenced_write(std::string_view key, fence_token fence, std::string_view value,
                                         diagnostics* diag = nullptr)
    {
        return fenced_reply(
            eval(script::fenced_write, {std::string{key}}, {std::string{value}, std::to_string(fence)}, diag));
    }

    /// Reads a value written by fenced_write (nullopt if none).
    awaitable<result<std::optional<std::string>>> fenced_read(std::string_view key, diagnostics* diag = nullptr)
    {
        return read_reply(exec_on(connection_, resp::command({"HGET", key, "value"}), diag));
    }

    /// Runs one command and returns its reply; an error reply becomes
    /// errc::store_unavailable (errc::auth_failed for NOAUTH, WRONGPASS, NOPERM), with
    /// the server's words in `diag` when given.
    awaitable<result<resp::value>> execute(std::initializer_list<std::string_view> args, diagnostics* diag = nullptr)
    {
        return execute_command(resp::command(args), diag);
    }

    /// execute() from the command's name and arguments (strings, string views, string
    /// literals), callable inside co_await on g++ 12: execute("DEL", key1, key2).
    template <class... Args>
        requires(std::is_convertible_v<const Args&, std::string_view> && ...)
    awaitable<result<resp::value>> execute(std::string_view name, const Args&... args)
    {
        return execute_command(resp::command_of(name, args...));
    }

    /// execute() for a command already encoded (resp::command).
    awaitable<result<resp::value>> execute_command(std::string encoded, diagnostics* diag = nullptr)
    {
        return exec_on(connection_, std::move(encoded), diag);
    }

private:
    enum class script { acquire, extend, release, raise_fence, acquire_all, fenced_write, inspect };

    struct script_text {
        std::string_view text;
        std::string sha;
    };

    static const script_text& source(script s)
    {
        static const std::array<script_text, 7> all{
            script_text{scripts::acquire, detail::sha1_hex(scripts::acquire)},
            script_text{scripts::extend, detail::sha1_hex(scripts::extend)},
            script_text{scripts::release, detail::sha1_hex(scripts::release)},
            script_text{scripts::raise_fence, detail::sha1_hex(scripts::raise_fence)},
            script_text{scripts::acquire_all, detail::sha1_hex(scripts::acquire_all)},
            script_text{scripts::fenced_write, detail::sha1_hex(scripts::fenced_write)},
            script_text{scripts::inspect, detail::sha1_hex(scripts::inspect)},
        };
        return all[static_cast<std::size_t>(s)];
    }

    // <prefix>:{#<resource>}:<kind>, with '%', '{' and '}' percent-encoded in both the
    // prefix and the resource. Why: the layout must be injective over (prefix,
    // resource), or two stores with different prefixes could share a lock (prefix "a"
    // with id "b:{#c" and prefix "a:{#b" with id "c" used to give one key). With the
    // braces escaped, the only '{' in the key is the one added here, so a key splits
    // back into its parts at that brace and the next '}', and percent-encoding is
    // itself reversible. It also makes that pair the key's one hash tag (Redis Cluster
    // hashes from the first '{' to the next '}'), never empty thanks to '#'. Ids
    // without those three characters keep the keys they always had.
    std::string key(std::string_view resource, std::string_view kind) const
    {
        std::string k;
        k.reserve(cfg_.key_prefix.size() + resource.size() + kind.size() + 5);
        append_escaped(k, cfg_.key_prefix);
        k.append(":{#");
        append_escaped(k, resource);
        k.append("}:").append(kind);
        return k;
    }

    static void append_escaped(std::string& out, std::string_view part)
    {
        for (const char c : part) {
            switch (c) {
            case '%': out.append("%25"); break;
            case '{': out.append("%7B"); break;
            case '}': out.append("%7D"); break;
            default: out.push_back(c);
            }
        }
    }

    // TTLs go to Redis in whole milliseconds, rounded up: the store never expires a
    // lock before the client's own (shorter) validity ends.
    static std::string millis(duration ttl)
    {
        return std::to_string(std::chrono::ceil<std::chrono::milliseconds>(ttl).count());
    }

    using connection_ptr = std::shared_ptr<detail::connection>;

    // EVALSHA, falling back to EVAL when the server does not know the script (after a
    // restart or SCRIPT FLUSH), which also caches it again.
    awaitable<result<resp::value>> eval(script which, std::vector<std::string> keys, std::vector<std::string> args,
                                        diagnostics* diag) const
    {
        return eval_on(connection_, which, std::move(keys), std::move(args), diag);
    }

    static awaitable<result<resp::value>> eval_on(connection_ptr c, script which, std::vector<std::string> keys,
                                                  std::vector<std::string> args, diagnostics* diag)
    {
        const auto& s = source(which);
        auto reply = co_await run_script(c, "EVALSHA", s.sha, keys, args, diag);
        if (reply && reply.value().is_error() && reply.value().text.starts_with("NOSCRIPT"))
            reply = co_await run_script(c, "EVAL", s.text, keys, args, diag);
        if (!reply)
            co_return reply.error();
        co_return checked(std::move(reply.value()), diag);
    }

    static awaitable<result<resp::value>> run_script(const connection_ptr& c, std::string_view verb,
                                                     std::string_view body, const std::vector<std::string>& keys,
                                                     const std::vector<std::string>& args, diagnostics* diag)
    {
        std::vector<std::string_view> parts;
        const auto numkeys = std::to_string(keys.size());
        parts.reserve(3 + keys.size() + args.size());
        parts.push_back(verb);
        parts.push_back(body);
        parts.push_back(numkeys);
        for (const auto& k : keys)
            parts.push_back(k);
        for (const auto& a : args)
            parts.push_back(a);
        std::string payload;
        resp::append_command_range(payload, parts);
        auto replies = co_await c->exec(std::move(payload), 1, diag);
        if (!replies)
            co_return replies.error();
        co_return std::move(replies.value().front());
    }

    static awaitable<result<resp::value>> exec_on(connection_ptr c, std::string encoded, diagnostics* diag)
    {
        auto replies = co_await c->exec(std::move(encoded), 1, diag);
        if (!replies)
            co_return replies.error();
        co_return checked(std::move(replies.value().front()), diag);
    }

    // Error replies: the request was refused and not applied (READONLY, LOADING,
    // NOAUTH, OOM, BUSY, ...). NOSCRIPT never gets here.
    static result<resp::value> checked(resp::value v, diagnostics* diag)
    {
        if (!v.is_error())
            return v;
        if (diag)
            diag->set_server_message(v.text);
        if (v.text.starts_with("NOAUTH") || v.text.starts_with("WRONGPASS") || v.text.starts_with("NOPERM"))
            return errc::auth_failed;
        return errc::store_unavailable;
    }

    // -- Replies, parsed by coroutines that own the pending request ----------------------

    static result<fence_token> parse_acquire(const resp::value& v, std::optional<duration>* held_for)
    {
        if (v.type != resp::type::array || v.elements.size() != 2 || v.elements[0].type != resp::type::integer ||
            v.elements[1].type != resp::type::integer)
            return errc::protocol_error;
        if (v.elements[0].integer != 1) {
            // {0, pttl}: -1 no TTL, -2 gone since; only a positive one is a time.
            if (held_for && v.elements[1].integer > 0)
                *held_for = std::chrono::milliseconds{v.elements[1].integer};
            return errc::contended;
        }
        if (v.elements[1].integer < 1)
            return errc::protocol_error;
        return static_cast<fence_token>(v.elements[1].integer);
    }

    // A grant is reported once config::wait_replicas replicas acknowledged it (WAIT),
    // else errc::not_replicated, a maybe-applied outcome: the claim gives the lock back
    // by owner token, as after a lost reply. Refusals pass through at once.
    template <class T>
    static awaitable<result<T>> replicated(connection_ptr c, const config& cfg, awaitable<result<T>> pending,
                                           diagnostics* diag)
    {
        auto got = co_await std::move(pending);
        if (cfg.wait_replicas <= 0 || !got)
            co_return got;
        if constexpr (std::is_same_v<T, answer>)
            if (!got.value().is_granted())
                co_return got;
        const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(cfg.wait_timeout).count();
        auto acks = co_await exec_on(c, resp::command_of("WAIT", std::to_string(cfg.wait_replicas), std::to_string(ms)),
                                     diag);
        if (!acks) // the grant stands on the primary at least: maybe applied either way
            co_return acks.error() == condition::maybe_applied ? acks.error() : make_error_code(errc::not_replicated);
        if (acks.value().type != resp::type::integer)
            co_return errc::protocol_error;
        if (acks.value().integer < cfg.wait_replicas) {
            if (diag)
                diag->set_client_message("WAIT: " + std::to_string(acks.value().integer) + " of " +
                                         std::to_string(cfg.wait_replicas) + " replicas acknowledged the grant in " +
                                         std::to_string(ms) + " ms");
            co_return errc::not_replicated;
        }
        co_return got;
    }

    static awaitable<result<fence_token>> acquired(awaitable<result<resp::value>> pending)
    {
        auto reply = co_await std::move(pending);
        if (!reply)
            co_return reply.error();
        co_return parse_acquire(reply.value(), nullptr);
    }

    static awaitable<result<answer>> answered(awaitable<result<resp::value>> pending)
    {
        const auto sent = clock::now();
        auto reply = co_await std::move(pending);
        if (!reply)
            co_return reply.error();
        std::optional<duration> held_for;
        auto fence = parse_acquire(reply.value(), &held_for);
        if (fence)
            co_return answer::granted(fence.value());
        if (fence.error() != errc::contended)
            co_return fence.error();
        // Measured from the request: the holder's lock ends no later than that by our clock.
        if (held_for)
            co_return answer::held(sent + *held_for);
        co_return answer::held();
    }

    static awaitable<result<void>> owned_reply(awaitable<result<resp::value>> pending)
    {
        co_return owned(co_await std::move(pending));
    }

    static awaitable<result<fence_token>> fence_reply(awaitable<result<resp::value>> pending)
    {
        co_return as_fence(co_await std::move(pending));
    }

    static awaitable<result<lock_info>> inspected(awaitable<result<resp::value>> pending)
    {
        auto reply = co_await std::move(pending);
        if (!reply)
            co_return reply.error();
        const auto& v = reply.value();
        if (v.type != resp::type::array || v.elements.size() != 3 || !v.elements[0].is_string() ||
            v.elements[1].type != resp::type::integer || v.elements[2].type != resp::type::integer ||
            v.elements[2].integer < 0)
            co_return errc::protocol_error;
        lock_info info;
        info.fence = static_cast<fence_token>(v.elements[2].integer);
        if (!v.elements[0].text.empty()) {
            info.held = true;
            info.owner = v.elements[0].text.substr(0, 8);
            if (v.elements[1].integer > 0)
                info.remaining = std::chrono::milliseconds{v.elements[1].integer};
        }
        co_return info;
    }

    static awaitable<result<std::vector<fence_token>>> acquired_all(awaitable<result<resp::value>> pending,
                                                                    std::size_t count)
    {
        auto reply = co_await std::move(pending);
        if (!reply)
            co_return reply.error();
        const auto& v = reply.value();
        if (v.type != resp::type::array || v.elements.empty() || v.elements[0].type != resp::type::integer)
            co_return errc::protocol_error;
        if (v.elements[0].integer != 1)
            co_return errc::contended;
        if (v.elements.size() != count + 1)
            co_return errc::protocol_error;
        std::vector<fence_token> fences;
        for (std::size_t i = 1; i < v.elements.size(); ++i) {
            if (v.elements[i].type != resp::type::integer || v.elements[i].integer < 1)
                co_return errc::protocol_error;
            fences.push_back(static_cast<fence_token>(v.elements[i].integer));
        }
        co_return fences;
    }

    static awaitable<result<void>> fenced_reply(awaitable<result<resp::value>> pending)
    {
        auto reply = co_await std::move(pending);
        if (!reply)
            co_return reply.error();
        const auto& v = reply.value();
        if (v.type != resp::type::array || v.elements.size() != 2 || v.elements[0].type != resp::type::integer)
            co_return errc::protocol_error;
        if (v.elements[0].integer != 1)
            co_return errc::stale_fence;
        co_return success();
    }

    static awaitable<result<std::optional<std::string>>> read_reply(awaitable<result<resp::value>> pending)
    {
        auto reply = co_await std::move(pending);
        if (!reply)
            co_return reply.error();
        if (reply.value().is_null())
            co_return std::optional<std::string>{};
        if (!reply.value().is_string())
            co_return errc::protocol_error;
        co_return std::optional<std::string>{std::move(reply.value().text)};
    }

    static awaitable<watcher> watch_on(std::shared_ptr<detail::subscriber> sub, std::string ch)
    {
        auto w = std::make_shared<distlock::detail::wakeup>(co_await asio::this_coro::executor);
        const auto ec = co_await sub->subscribe(ch, w);
        co_return watcher{std::move(sub), std::move(ch), std::move(w), static_cast<bool>(ec)};
    }

    static result<void> owned(const result<resp::value>& reply)
    {
        if (!reply)
            return reply.error();
        if (reply.value().type != resp::type::integer)
            return errc::protocol_error;
        return reply.value().integer == 1 ? result<void>{success()} : result<void>{errc::not_owner};
    }

    static result<fence_token> as_fence(const result<resp::value>& reply)
    {
        if (!reply)
            return reply.error();
        if (reply.value().type != resp::type::integer || reply.value().integer < 0)
            return errc::protocol_error;
        return static_cast<fence_token>(reply.value().integer);
    }

    executor_type ex_;
    config cfg_;
    std::shared_ptr<detail::connection> connection_;
    std::shared_ptr<detail::subscriber> subscriber_;
    std::shared_ptr<distlock::detail::lifetime> life_;
};

static_assert(put_if_absent_store<store>);
static_assert(inspectable_store<store>);
static_assert(owner_checked_store<store>);
static_assert(fencing_counter_store<store>);
static_assert(release_notifying_store<store>);

} // namespace distlock::redis
