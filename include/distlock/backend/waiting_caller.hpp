// distlock/backend/waiting_caller.hpp: the caller of an asynchronous operation that a
// connection answers later, kept as its completion handler, and the io_context
// service that lets such callers go when the io_context shuts down.
//
// Used by the connections that many coroutines share (transport/engine.hpp,
// postgres/detail/connection.hpp): a request keeps its caller's handler instead of a
// coroutine spawned per request waiting on a timer, so a reply resumes its caller
// without a trip through the scheduler.
#pragma once

#include <asio/associated_cancellation_slot.hpp>
#include <asio/associated_executor.hpp>
#include <asio/cancellation_type.hpp>
#include <asio/dispatch.hpp>
#include <asio/execution/outstanding_work.hpp>
#include <asio/execution/context.hpp>
#include <asio/execution_context.hpp>
#include <asio/query.hpp>
#include <asio/any_io_executor.hpp>
#include <asio/post.hpp>
#include <asio/prefer.hpp>

#include <memory>
#include <mutex>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

namespace distlock::backend {

/// A caller waiting for an `Outcome`: its completion handler, type-erased because the
/// request that keeps it may outlive the frame that made it (an abandoned request
/// waits for its reply in the connection's queue). Keeps outstanding work on the
/// caller's executor, so that its io_context does not run out of work meanwhile.
template <class Outcome>
class waiting_caller {
public:
    waiting_caller() = default;
    template <class Handler>
    explicit waiting_caller(Handler h) : impl_{std::make_unique<model<Handler>>(std::move(h))}
    {}
    explicit operator bool() const noexcept { return impl_ != nullptr; }

    /// Resumes the caller with `o` on its executor. `running` null: queued there (the
    /// call that started the operation never resumes its caller). Otherwise `running`
    /// is an executor that runs on this thread now (the connection's reader, between
    /// two reads, passes its strand's inner executor): a caller on that very executor
    /// is resumed at once, as dispatch would, without dispatch's type-erased detour;
    /// any other is dispatched to its own.
    void resume(Outcome o, const asio::any_io_executor* running)
    {
        auto impl = std::move(impl_);
        impl->resume(std::move(o), running);
    }

    /// resume() with `error` and its `words`, or with `value` when there is no error.
    template <class Value>
    void resume_with(std::error_code error, std::string& words, Value& value, const asio::any_io_executor* running)
    {
        if (error)
            resume(Outcome{error, std::move(words)}, running);
        else
            resume(Outcome{std::move(value), std::string{}}, running);
    }

private:
    struct base {
        virtual ~base() = default;
        virtual void resume(Outcome o, const asio::any_io_executor* running) = 0;
    };
    template <class Handler>
    struct model final : base {
        explicit model(Handler h)
            : handler{std::move(h)}, home{asio::get_associated_executor(handler)},
              work{asio::prefer(home, asio::execution::outstanding_work.tracked)}
        {}
        void resume(Outcome o, const asio::any_io_executor* running) override
        {
            if (running && home == *running) {
                std::move(handler)(std::move(o));
                return;
            }
            auto run = [h = std::move(handler), o = std::move(o)]() mutable { std::move(h)(std::move(o)); };
            if (running)
                asio::dispatch(work, std::move(run));
            else
                asio::post(work, std::move(run));
        }
        Handler handler;
        asio::any_io_executor home; // the caller's executor
        asio::any_io_executor work; // the same, keeping it from running out of work
    };
    std::unique_ptr<base> impl_;
};

/// The initiation of a connection's exec(), run by the caller's coroutine as it
/// suspends: the request keeps the caller's handler; the caller's cancellation is
/// relayed to the connection's strand (acting on it here would touch the strand's
/// state from the caller's thread); the request reaches the strand by dispatch, at
/// once when the strand is free and its executor runs on this thread.
///
/// `Connection` has `strand()`, `begin(std::shared_ptr<Request>)` and
/// `abandon(const std::shared_ptr<Request>&)` (both run on the strand; it names this
/// type a friend when they are private); `Request` has a `caller`, a waiting_caller.
template <class Connection, class Request>
struct start_request {
    std::shared_ptr<Connection> self;
    std::shared_ptr<Request> req;

    template <class Handler>
    void operator()(Handler handler)
    {
        auto slot = asio::get_associated_cancellation_slot(handler);
        if (slot.is_connected())
            slot.assign([self = self, req = req](asio::cancellation_type) {
                asio::dispatch(self->strand(), [self, req] { self->abandon(req); });
            });
        req->caller = decltype(req->caller){std::move(handler)};
        auto strand = self->strand();
        asio::dispatch(strand, [self = std::move(self), req = std::move(req)]() mutable {
            self->begin(std::move(req));
        });
    }
};

/// What holds waiting callers: told to let them go when the io_context that runs it
/// shuts down.
class holds_waiting_callers {
public:
    virtual void drop_waiting_callers() noexcept = 0;

protected:
    ~holds_waiting_callers() = default;
};

/// A service of the io_context: the holders of waiting callers, told at shutdown.
///
/// Why: a request keeps its caller's completion handler, and through it the caller's
/// coroutine frames, which keep the connection alive that keeps the request: a cycle.
/// A reply or a failure ends it; an io_context destroyed with a request still waiting
/// must end it too, as Asio's own services do for operations they hold: the handlers
/// are destroyed without being called, and the frames with them.
class waiting_callers : public asio::execution_context::service {
public:
    using key_type = waiting_callers;
    static inline asio::execution_context::id id;

    explicit waiting_callers(asio::execution_context& context) : service{context} {}

    /// Called once per holder, from any thread.
    void add(std::weak_ptr<holds_waiting_callers> holder)
    {
        const std::lock_guard lock{mutex_};
        std::erase_if(holders_, [](const auto& h) { return h.expired(); });
        holders_.push_back(std::move(holder));
    }

private:
    void shutdown() override
    {
        std::vector<std::shared_ptr<holds_waiting_callers>> live;
        {
            const std::lock_guard lock{mutex_};
            for (auto& h : holders_)
                if (auto p = h.lock())
                    live.push_back(std::move(p));
            holders_.clear();
        }
        for (auto& p : live)
            p->drop_waiting_callers();
    }

    std::mutex mutex_;
    std::vector<std::weak_ptr<holds_waiting_callers>> holders_;
};

/// Registers `holder` with the waiting_callers of the io_context that runs `ex`.
template <class Executor>
void hold_until_shutdown(const Executor& ex, std::shared_ptr<holds_waiting_callers> holder)
{
    asio::use_service<waiting_callers>(asio::query(ex, asio::execution::context)).add(std::move(holder));
}

} // namespace distlock::backend
