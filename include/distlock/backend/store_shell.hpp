// distlock/backend/store_shell.hpp: what every store of the library is made of apart
// from its protocol: its executor, its validated settings, its lifetime, close() and
// the order in which its destructor stops things.
//
// Design note. A store class holds its protocol only. It derives from
// store_base<Config>, which keeps the executor, the settings (validated before
// anything else is built from them) and the lifetime (lifetime.hpp), and it says in
// two members how it stops:
//  - `void stop() noexcept`: what destruction does once no call can start any more
//    (close connections, stop keepers, wake waiters): never waits for I/O.
//  - `awaitable<void> finish()`, only where closing does more than stopping: what
//    close() does once the pending releases are done and the leases still held are
//    ended (revoke a session, then stop()). A store without one is stopped.
// The public type is store_shell<Store>, which derives from the store. It is the most
// derived class, so its destructor runs first: it shuts the lifetime (no call enters
// the store any more, held leases are told) and then calls stop(), while every member
// of the store is still alive. Written in each store, that order was six copies of
// the same lines; here it cannot be got wrong.
//
// Why stores are templates (`template <class Unused = void> class basic_store`): g++
// emits a header's non-template coroutines in every translation unit that includes
// it; a class template's members are compiled only where they are used. The same
// reason makes the library's other coroutine helpers templates.
//
// A store defines its constructor, stop() and finish() below its class, not inside
// it. Every program reaches them (through this shell's constructor and destructor),
// and a member defined inside a class is inline: at -O2 g++ compiles it in each
// file that calls it even when the class is declared `extern template` (separate
// compilation, README.md), and with it all it calls: the store's connections,
// engine and sessions. Defined outside, they are compiled in the one file that
// instantiates the store.
#pragma once

#include <distlock/backend/contract.hpp>
#include <distlock/backend/lifetime.hpp>
#include <distlock/clock.hpp>
#include <distlock/error.hpp>

#include <asio/any_io_executor.hpp>
#include <asio/execution_context.hpp>

#include <memory>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>
#include <utility>

namespace distlock::backend {

/// Settings a store can check before any I/O: `validate()` returns
/// errc::invalid_argument (or another code) for settings it refuses.
template <class C>
concept validated_config = std::copy_constructible<C> && requires(const C& c) {
    { c.validate() } -> std::convertible_to<std::error_code>;
};

/// What a store keeps besides its protocol: see the design note above.
template <class Config>
class store_base {
public:
    using executor_type = asio::any_io_executor;
    using config_type = Config;

    store_base(const store_base&) = delete;
    store_base& operator=(const store_base&) = delete;

    executor_type get_executor() const noexcept { return ex_; }
    /// The settings the store was made with (validated).
    const Config& settings() const noexcept { return cfg_; }
    /// What the core reaches the store through, so that nothing outlives it.
    std::shared_ptr<backend::lifetime> lifetime() const noexcept { return life_; }

protected:
    /// Throws std::system_error with the settings' error code (errc::invalid_argument)
    /// and `name` ("distlock::redis::store") when `cfg.validate()` refuses them, unless
    /// `checked_later` (a store that answers every request with the error instead).
    store_base(executor_type ex, Config cfg, std::string_view name, bool checked_later = false)
        : ex_{std::move(ex)}, cfg_{std::move(cfg)}
    {
        if constexpr (validated_config<Config>) {
            if (!checked_later)
                if (auto ec = cfg_.validate())
                    throw std::system_error{ec, std::string{name} + ": " + problem_of(cfg_)};
        }
        life_ = backend::lifetime::make(ex_);
    }
    ~store_base() = default;

    executor_type ex_;
    Config cfg_;
    std::shared_ptr<backend::lifetime> life_;

private:
    static std::string problem_of(const Config& c)
    {
        if constexpr (requires { { c.problem() } -> std::convertible_to<std::string>; }) {
            std::string words = c.problem();
            if (!words.empty())
                return words;
        }
        return "settings";
    }
};

/// Settings for a store that has none.
struct no_settings {};

/// A store's public type: the store class with its destructor's order and close().
/// See the design note above.
template <class Store>
class store_shell final : public Store {
public:
    using executor_type = asio::any_io_executor;
    using config_type = typename Store::config_type;

    /// Makes the store on `ex` with `cfg`. Throws std::system_error for settings the
    /// store refuses (see the store's constructor).
    explicit store_shell(executor_type ex, config_type cfg = {}) : Store(std::move(ex), std::move(cfg)) { check(); }

    /// For stores that take one more argument before their settings (the server of a
    /// memory::session_store).
    template <class Extra>
        requires(!std::is_convertible_v<Extra &&, config_type>)
    store_shell(executor_type ex, Extra&& extra, config_type cfg = {})
        : Store(std::move(ex), std::forward<Extra>(extra), std::move(cfg))
    {
        check();
    }

    /// The same, on an execution context's executor (an asio::io_context).
    template <class ExecutionContext>
        requires std::is_convertible_v<ExecutionContext&, asio::execution_context&>
    explicit store_shell(ExecutionContext& ctx, config_type cfg = {})
        : store_shell(executor_type{ctx.get_executor()}, std::move(cfg))
    {}

    template <class ExecutionContext, class Extra>
        requires std::is_convertible_v<ExecutionContext&, asio::execution_context&> &&
                 (!std::is_convertible_v<Extra &&, config_type>)
    store_shell(ExecutionContext& ctx, Extra&& extra, config_type cfg = {})
        : store_shell(executor_type{ctx.get_executor()}, std::forward<Extra>(extra), std::move(cfg))
    {}

    /// Shuts the lifetime (no call starts on the store any more; held leases hear
    /// that it is gone), then stops the store: never waits for I/O. Leases are left
    /// to expire on the server (close() gives them back first).
    ~store_shell()
    {
        this->life_->shut();
        Store::stop();
    }

    /// Refuses new locks, finishes the releases still pending, ends the leases still
    /// held (reported lost, released), then finishes the store (its session, its
    /// connections): io.run() can return afterwards.
    awaitable<void> close()
    {
        co_await this->life_->close();
        if constexpr (finishes)
            co_await Store::finish();
        else
            Store::stop();
    }

private:
    // Whether closing the store does more than stopping it (the design note above).
    static constexpr bool finishes = requires(store_shell& s) { s.Store::finish(); };

    static void check() noexcept
    {
        static_assert(managed_store<store_shell>, "a store models managed_store: it defines operation_timeout()");
    }
};

} // namespace distlock::backend
