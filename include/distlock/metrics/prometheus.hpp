// distlock/metrics/prometheus.hpp: lock activity as Prometheus metrics, from the
// observer events (distlock/observe.hpp). Optional: link distlock::prometheus (Debian:
// prometheus-cpp-dev); the core does not depend on it.
//
//   prometheus::Exposer exposer{"127.0.0.1:9464"};
//   auto registry = std::make_shared<prometheus::Registry>();
//   dl::metrics::prometheus_metrics metrics{*registry};
//   exposer.RegisterCollectable(registry);
//   dl::basic_distributed_mutex<dl::redis::store, dl::metrics::prometheus_observer> m{
//       redis, "job", {.ttl = 10s}, metrics.observer("redis")};
//
// Design note. The metric families live in the caller's registry, one set per
// prometheus_metrics; each observer() is a cheap handle (shared state) labelled with
// the store's name, given to any number of mutexes. Events come from whatever thread
// runs a lock's executor: Prometheus' counters and histograms are thread-safe, and
// the few values kept between events (when a lock() began, when a lease was granted,
// per resource) are behind a mutex. Labels are bounded: the store's name and a fixed
// set of outcomes (error conditions, never messages or resource ids), so a busy
// service cannot blow up the series count.
#pragma once

#include <distlock/error.hpp>
#include <distlock/observe.hpp>

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <system_error>
#include <variant>

namespace distlock::metrics {

/// The outcome label of an error: the condition the core decides by ("contended",
/// "not_applied", "maybe_applied", "session_lost", "timeout", ...), "ok" for none.
inline std::string outcome_of(const std::error_code& ec)
{
    if (!ec)
        return "ok";
    for (const auto& [c, name] : {std::pair{condition::contended, "contended"},
                                  std::pair{condition::not_applied, "not_applied"},
                                  std::pair{condition::maybe_applied, "maybe_applied"},
                                  std::pair{condition::not_owner, "not_owner"},
                                  std::pair{condition::session_lost, "session_lost"},
                                  std::pair{condition::lease_lost, "lease_lost"},
                                  std::pair{condition::invalid_argument, "invalid_argument"},
                                  std::pair{condition::timeout, "timeout"},
                                  std::pair{condition::cancelled, "cancelled"},
                                 std::pair{condition::denied, "denied"}})
        if (ec == c)
            return name;
    return "other";
}

class prometheus_metrics;

/// An observer policy (`dl::basic_distributed_mutex<Store, ..., prometheus_observer>`)
/// counting into a prometheus_metrics under one store label. Copies share their state.
class prometheus_observer {
public:
    using policy_kind = observer_policy_tag;

    /// Counts nothing (a mutex's default-constructed observer, before assignment).
    prometheus_observer() = default;

    void operator()(const event& e) const
    {
        if (state_)
            std::visit([this](const auto& ev) { state_->count(ev); }, e);
    }

private:
    friend class prometheus_metrics;

    struct series {
        using histogram = ::prometheus::Histogram;
        using counter = ::prometheus::Counter;
        ::prometheus::Family<counter>* attempts;
        ::prometheus::Family<counter>* renewals;
        ::prometheus::Family<counter>* releases;
        std::string store;
        counter& grants;
        counter& waits;
        counter& woken_by_store;
        histogram& attempt_seconds;
        histogram& acquire_seconds;
        histogram& wait_seconds;
        histogram& hold_seconds;
        std::mutex mutex;
        std::map<std::string, std::chrono::steady_clock::time_point, std::less<>> acquiring;
        std::map<std::string, std::deque<std::chrono::steady_clock::time_point>, std::less<>> holding;

        static double seconds(duration d) { return std::chrono::duration<double>(d).count(); }

        void count(const attempt_event& a)
        {
            attempts->Add({{"store", store}, {"outcome", outcome_of(a.error)}}).Increment();
            attempt_seconds.Observe(seconds(a.latency));
            const auto now = std::chrono::steady_clock::now();
            std::lock_guard lock{mutex};
            if (a.number <= 1)
                acquiring.insert_or_assign(std::string{a.resource}, now - a.latency);
            if (a.error)
                return;
            grants.Increment();
            if (const auto it = acquiring.find(a.resource); it != acquiring.end()) {
                acquire_seconds.Observe(std::chrono::duration<double>(now - it->second).count());
                acquiring.erase(it);
            }
            holding[std::string{a.resource}].push_back(now);
        }
        void count(const wait_event&) { waits.Increment(); }
        void count(const wake_event& w)
        {
            wait_seconds.Observe(seconds(w.waited));
            if (w.notified)
                woken_by_store.Increment();
        }
        void count(const renewal_event& r)
        {
            renewals->Add({{"store", store}, {"outcome", outcome_of(r.error)}}).Increment();
        }
        void count(const release_event& r)
        {
            // Released by its holder ("ok", or "not_owner" when it had already gone)
            // or lost ("lease_lost", "session_lost", ...).
            releases->Add({{"store", store}, {"outcome", outcome_of(r.error)}}).Increment();
            const auto now = std::chrono::steady_clock::now();
            std::lock_guard lock{mutex};
            const auto it = holding.find(r.resource);
            if (it == holding.end())
                return;
            hold_seconds.Observe(std::chrono::duration<double>(now - it->second.front()).count());
            it->second.pop_front();
            if (it->second.empty())
                holding.erase(it);
        }
        void count(const vote_event&) {}
    };

    explicit prometheus_observer(std::shared_ptr<series> s) : state_{std::move(s)} {}
    std::shared_ptr<series> state_;
};

/// The metric families of distlock in a registry (which must outlive this object and
/// every observer made from it):
///  - distlock_attempts_total{store, outcome}: acquisition attempts, by outcome ("ok",
///    "contended", or the error's condition);
///  - distlock_grants_total{store}, distlock_waits_total{store},
///    distlock_woken_by_store_total{store} (waits a release notification ended);
///  - distlock_renewals_total{store, outcome}, distlock_releases_total{store, outcome}
///    (a lease's end: "ok" when released, the loss's condition when lost);
///  - histograms in seconds: distlock_attempt_seconds{store} (one attempt),
///    distlock_acquire_seconds{store} (from a lock()'s first attempt to its grant),
///    distlock_wait_seconds{store} (one wait between attempts), distlock_hold_seconds{store}
///    (from grant to the lease's end).
class prometheus_metrics {
public:
    explicit prometheus_metrics(::prometheus::Registry& registry)
        : attempts_{::prometheus::BuildCounter()
                        .Name("distlock_attempts_total")
                        .Help("Lock acquisition attempts, by outcome")
                        .Register(registry)},
          grants_{::prometheus::BuildCounter().Name("distlock_grants_total").Help("Locks granted").Register(registry)},
          waits_{::prometheus::BuildCounter()
                     .Name("distlock_waits_total")
                     .Help("Waits between acquisition attempts")
                     .Register(registry)},
          woken_{::prometheus::BuildCounter()
                     .Name("distlock_woken_by_store_total")
                     .Help("Waits ended by the store's release notification")
                     .Register(registry)},
          renewals_{::prometheus::BuildCounter()
                        .Name("distlock_renewals_total")
                        .Help("Lease extensions, by outcome")
                        .Register(registry)},
          releases_{::prometheus::BuildCounter()
                        .Name("distlock_releases_total")
                        .Help("Leases ended: released (ok) or lost, by outcome")
                        .Register(registry)},
          attempt_seconds_{::prometheus::BuildHistogram()
                               .Name("distlock_attempt_seconds")
                               .Help("Duration of one acquisition attempt")
                               .Register(registry)},
          acquire_seconds_{::prometheus::BuildHistogram()
                               .Name("distlock_acquire_seconds")
                               .Help("From a lock() call's first attempt to its grant")
                               .Register(registry)},
          wait_seconds_{::prometheus::BuildHistogram()
                            .Name("distlock_wait_seconds")
                            .Help("One wait between acquisition attempts")
                            .Register(registry)},
          hold_seconds_{::prometheus::BuildHistogram()
                            .Name("distlock_hold_seconds")
                            .Help("From a grant to the lease's end")
                            .Register(registry)}
    {}

    /// An observer counting under `store` (a name of the operator's: "redis",
    /// "orders-etcd"). Observers of one name share their series.
    prometheus_observer observer(std::string store)
    {
        const ::prometheus::Labels labels{{"store", store}};
        auto s = std::shared_ptr<prometheus_observer::series>{new prometheus_observer::series{
            &attempts_, &renewals_, &releases_, store, grants_.Add(labels), waits_.Add(labels), woken_.Add(labels),
            attempt_seconds_.Add(labels, fast_buckets()), acquire_seconds_.Add(labels, slow_buckets()),
            wait_seconds_.Add(labels, slow_buckets()), hold_seconds_.Add(labels, slow_buckets()), {}, {}, {}}};
        return prometheus_observer{std::move(s)};
    }

private:
    // One round trip: 100 µs to 5 s. Waiting and holding: 1 ms to 10 min.
    static ::prometheus::Histogram::BucketBoundaries fast_buckets()
    {
        return {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5};
    }
    static ::prometheus::Histogram::BucketBoundaries slow_buckets()
    {
        return {0.001, 0.01, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600};
    }

    ::prometheus::Family<::prometheus::Counter>& attempts_;
    ::prometheus::Family<::prometheus::Counter>& grants_;
    ::prometheus::Family<::prometheus::Counter>& waits_;
    ::prometheus::Family<::prometheus::Counter>& woken_;
    ::prometheus::Family<::prometheus::Counter>& renewals_;
    ::prometheus::Family<::prometheus::Counter>& releases_;
    ::prometheus::Family<::prometheus::Histogram>& attempt_seconds_;
    ::prometheus::Family<::prometheus::Histogram>& acquire_seconds_;
    ::prometheus::Family<::prometheus::Histogram>& wait_seconds_;
    ::prometheus::Family<::prometheus::Histogram>& hold_seconds_;
};

} // namespace distlock::metrics
