// A history of lock operations on one timeline, and the checker of distlock's
// promises over it. No I/O and no Asio: histories come from real processes (one line
// per operation on stdout) or from the in-process simulation, and the checker is
// tested on hand-built histories that break each rule.
//
// Every process on one machine reads the same CLOCK_MONOTONIC, and distlock::clock
// counts nanoseconds since that clock's epoch, so times from different processes (and
// the valid-until the library reports) can be compared directly.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

namespace fault {

using nanos = std::int64_t;

enum class kind {
    acquire,   ///< lock(): ok with fence and valid_until, or fail
    release,   ///< the holder called unlock() on the lease with `fence` (at `invoke`)
    extend,    ///< the store extended the lease with `fence`; valid_until is the new one
    removed,   ///< the store removed a lock (ok) at the request of `process` (lease
               ///< `fence`, 0 for the clean-up of an attempt); `foreign`: not its own
    lost,      ///< the library reported the lease with `fence` lost (at `complete`)
    write,     ///< a fenced write with `fence` to the store that owns the data
    crash,     ///< the process was killed or paused for good at `invoke`
    probe,     ///< the harness looked for lock state left behind: ok means none
    work_end,  ///< a leader's work under its term (the lease with `fence`) returned (at `complete`)
};

enum class outcome { ok, fail, unknown };

struct op {
    int process = 0;
    fault::kind kind = kind::acquire;
    std::string resource;
    nanos invoke = 0;
    nanos complete = 0;
    fault::outcome result = outcome::ok;
    std::uint64_t fence = 0;
    nanos valid_until = 0;   ///< acquire ok: what the library reported
    bool foreign = false;    ///< removed: the lock belonged to another owner token
    std::string detail;      ///< error message or note
    /// acquire ok: a shared grant (a reader, a permit) rather than an exclusive one;
    /// for a semaphore's permit, the count and the permit's number.
    bool shared = false;
    std::uint32_t permits = 0;
    std::uint32_t slot = 0;
};

inline const char* name(kind k)
{
    switch (k) {
    case kind::acquire: return "acquire";
    case kind::release: return "release";
    case kind::extend: return "extend";
    case kind::removed: return "removed";
    case kind::lost: return "lost";
    case kind::write: return "write";
    case kind::crash: return "crash";
    case kind::probe: return "probe";
    case kind::work_end: return "work_end";
    }
    return "?";
}

inline const char* name(outcome o)
{
    return o == outcome::ok ? "ok" : o == outcome::fail ? "fail" : "unknown";
}

/// One line per operation, as worker processes print them (resource ids in the
/// fault suite are plain words):
///   op PROCESS KIND RESOURCE INVOKE COMPLETE RESULT FENCE VALID_UNTIL
inline std::string to_line(const op& o)
{
    std::ostringstream s;
    s << "op " << o.process << ' ' << name(o.kind) << ' ' << o.resource << ' ' << o.invoke << ' ' << o.complete
      << ' ' << name(o.result) << ' ' << o.fence << ' ' << o.valid_until;
    // A shared grant says so after the common fields: "shared PERMITS SLOT".
    if (o.shared)
        s << " shared " << o.permits << ' ' << o.slot;
    return s.str();
}

inline std::optional<op> from_line(const std::string& line)
{
    std::istringstream s{line};
    std::string tag, k, r;
    op o;
    if (!(s >> tag >> o.process >> k >> o.resource >> o.invoke >> o.complete >> r >> o.fence >> o.valid_until) ||
        tag != "op")
        return std::nullopt;
    bool known = false;
    for (auto candidate : {kind::acquire, kind::release, kind::extend, kind::removed, kind::lost, kind::write, kind::crash,
                           kind::probe, kind::work_end})
        if (k == name(candidate)) {
            o.kind = candidate;
            known = true;
        }
    if (!known)
        return std::nullopt;
    if (std::string mode; s >> mode) {
        if (mode != "shared" || !(s >> o.permits >> o.slot))
            return std::nullopt;
        o.shared = true;
    }
    if (r == "ok")
        o.result = outcome::ok;
    else if (r == "fail")
        o.result = outcome::fail;
    else if (r == "unknown")
        o.result = outcome::unknown;
    else
        return std::nullopt;
    return o;
}

/// What the checker found.
struct report {
    std::size_t operations = 0;
    std::size_t grants = 0;
    std::vector<std::string> violations;

    bool clean() const { return violations.empty(); }
    std::string summary() const
    {
        std::ostringstream s;
        s << operations << " operations, " << grants << " grants, " << violations.size() << " violations";
        for (std::size_t i = 0; i < violations.size() && i < 5; ++i)
            s << "\n  " << violations[i];
        return s.str();
    }
};

/// What the checker may assume about a run.
struct check_options {
    /// Fences must grow across every grant of a resource. Off for runs where the
    /// store lost its counters (restart without persistence): distlock does not
    /// promise it there, and the run checks exclusion alone.
    bool fences_grow = true;
    /// After a crash of a holder, a waiter must acquire within this bound (TTL plus
    /// drift plus retry delay); zero: liveness not checked.
    nanos liveness_bound = 0;
    /// A lease its holder did not end (unlock, crash) must be reported lost no later
    /// than this after its validity ran out; negative: not checked.
    nanos loss_report_slack = -1;
};

namespace detail {

/// A lease as the holder saw it: from the grant to the first of reported validity,
/// its release being called, or its loss being reported.
struct held {
    const op* grant;
    nanos from, to;
};

inline std::string ms(nanos n)
{
    std::ostringstream s;
    s.precision(3);
    s << std::fixed << static_cast<double>(n) / 1e6 << " ms";
    return s.str();
}

inline std::string who(const op& o)
{
    return "process " + std::to_string(o.process) + " (fence " + std::to_string(o.fence) + ")";
}

} // namespace detail

/// Checks a history against distlock's promises:
///  - exclusion: an exclusive grant's validity window never overlaps another window of
///    its resource, shared or exclusive (each window runs from the grant to the
///    earliest of valid_until, the call to unlock(), and the reported loss); shared
///    windows of a semaphore of N: at most N at once, and never two of one permit
///    number;
///  - fencing: a grant completed before another acquisition of the resource started
///    has the smaller fence, and a fenced write is never accepted after a write with
///    a newer fence had been accepted;
///  - owner safety: a release removes only the lock of the lease that asked for it,
///    and an extension never succeeds once a newer grant of the resource completed;
///  - no leaks: every probe found nothing left behind;
///  - liveness: after a crash, a waiting process acquires within the bound;
///  - loss reports: a lease neither released nor outlived is reported lost in time;
///  - terms: a leader's term (a grant whose work is recorded, work_end) is released
///    only after its work returned, and no write of the term's work completes after
///    the work returned (with the exclusion and fencing rules above: no two terms'
///    windows overlap, and epochs grow).
inline report check(const std::vector<op>& history, const check_options& options = {})
{
    report out;
    out.operations = history.size();
    std::map<std::string, std::vector<const op*>> grants;
    for (const auto& o : history)
        if (o.kind == kind::acquire && o.result == outcome::ok)
            grants[o.resource].push_back(&o);

    // When each lease stopped being trusted by its holder: its reported validity
    // (moved on by extensions), cut short by unlock() or by a reported loss.
    auto end_of = [&](const op& g) {
        nanos valid = g.valid_until, cut = g.valid_until;
        bool was_cut = false;
        for (const auto& o : history) {
            if (o.process != g.process || o.resource != g.resource || o.fence != g.fence || o.invoke < g.complete)
                continue;
            if (o.kind == kind::extend && o.result == outcome::ok) {
                valid = std::max(valid, o.valid_until);
            } else if (o.kind == kind::release || o.kind == kind::lost) {
                const nanos at = o.kind == kind::release ? o.invoke : o.complete;
                cut = was_cut ? std::min(cut, at) : at;
                was_cut = true;
            }
        }
        return was_cut ? std::min(valid, cut) : valid;
    };

    for (auto& [resource, list] : grants) {
        std::sort(list.begin(), list.end(),
                  [](const op* a, const op* b) { return std::tie(a->complete, a->fence) < std::tie(b->complete, b->fence); });
        out.grants += list.size();
        std::vector<detail::held> windows;
        for (const op* g : list)
            windows.push_back({g, g->complete, end_of(*g)});

        // Exclusion: windows by start. An exclusive window overlaps another when the
        // latest end of the windows before it (any mode) is past its start; a window
        // overlaps an exclusive one when the latest end of the exclusive windows
        // before it is (a long lease may overlap a later one, not just the next).
        std::sort(windows.begin(), windows.end(),
                  [](const detail::held& a, const detail::held& b) { return a.from < b.from; });
        const detail::held* latest = nullptr;
        const detail::held* latest_exclusive = nullptr;
        const auto overlap = [&](const detail::held& before, const detail::held& w) {
            out.violations.push_back("exclusion: " + resource + ": " + detail::who(*before.grant) + " valid until " +
                                     std::to_string(before.to) + " overlaps " + detail::who(*w.grant) +
                                     " granted at " + std::to_string(w.from) + " by " +
                                     detail::ms(before.to - w.from));
        };
        // A semaphore's permits held now: their ends, and who holds each number.
        std::vector<const detail::held*> permits_held;
        for (const auto& w : windows) {
            const bool exclusive = !w.grant->shared;
            if (latest_exclusive && latest_exclusive->to > w.from)
                overlap(*latest_exclusive, w);
            else if (exclusive && latest && latest->to > w.from)
                overlap(*latest, w);
            if (!latest || w.to > latest->to)
                latest = &w;
            if (exclusive && (!latest_exclusive || w.to > latest_exclusive->to))
                latest_exclusive = &w;
            if (w.grant->shared && w.grant->permits > 0) {
                std::erase_if(permits_held, [&](const detail::held* h) { return h->to <= w.from; });
                if (permits_held.size() >= w.grant->permits)
                    out.violations.push_back("permits: " + resource + ": " + detail::who(*w.grant) + " granted at " +
                                             std::to_string(w.from) + " while " +
                                             std::to_string(permits_held.size()) + " of " +
                                             std::to_string(w.grant->permits) + " permits were held");
                for (const auto* h : permits_held)
                    if (h->grant->slot == w.grant->slot)
                        out.violations.push_back("permits: " + resource + ": " + detail::who(*w.grant) +
                                                 " holds permit " + std::to_string(w.grant->slot) +
                                                 " while " + detail::who(*h->grant) + " does");
                permits_held.push_back(&w);
            }
        }

        // Fencing: a grant that completed before another acquisition even started has
        // the smaller token. (Grants whose calls overlapped in time are ordered by the
        // exclusion rule instead: a multi-lock's grant of its first resource happens
        // long before the call returns.)
        if (options.fences_grow)
            for (const op* a : list)
                for (const op* b : list)
                    if (a != b && a->complete < b->invoke && a->fence >= b->fence)
                        out.violations.push_back("fencing: " + resource + ": " + detail::who(*b) +
                                                 " asked after " + detail::who(*a) + " was granted");

        // Owner safety: an extension that succeeded although another lease was granted
        // after this one and before the extension was sent.
        for (const auto& o : history) {
            if (o.resource != resource || o.result != outcome::ok || o.kind != kind::extend)
                continue;
            const op* own = nullptr;
            for (const op* g : list)
                if (g->process == o.process && g->fence == o.fence)
                    own = g;
            if (!own)
                continue;
            // Shared grants that may coexist (two readers; two permits of other numbers)
            // do not end each other.
            const auto conflicts = [&](const op* g) {
                return !g->shared || !own->shared || (g->permits > 0 && g->slot == own->slot);
            };
            for (const op* g : list)
                if (g != own && conflicts(g) && g->complete > own->complete && g->complete < o.invoke) {
                    out.violations.push_back(std::string{"owner safety: "} + resource + ": extension by " +
                                             detail::who(o) + " succeeded after " + detail::who(*g) + " was granted");
                    break;
                }
        }

        // Loss is reported in time: a lease that its holder neither released nor
        // outlived (crash) is reported lost by the end of its validity (plus slack).
        if (options.loss_report_slack >= 0)
            for (const auto& w : windows) {
                const op& g = *w.grant;
                bool ended = false;
                for (const auto& o : history)
                    if (o.process == g.process && o.resource == g.resource && o.invoke >= g.complete &&
                        ((o.kind == kind::release && o.fence == g.fence && o.invoke <= w.to) ||
                         (o.kind == kind::lost && o.fence == g.fence && o.complete <= w.to + options.loss_report_slack) ||
                         (o.kind == kind::crash && o.invoke <= w.to)))
                        ended = true;
                if (!ended)
                    out.violations.push_back("loss report: " + resource + ": " + detail::who(g) +
                                             " was not told its lease ended at " + std::to_string(w.to));
            }
    }

    // Owner safety at the store: a release that removed a lock of another owner.
    // (Judged per store node: a quorum lease's release reaches nodes at different
    // times, and removing its own lock from a node the next holder did not win is fine.)
    for (const auto& o : history)
        if (o.kind == kind::removed && o.result == outcome::ok && o.foreign)
            out.violations.push_back("owner safety: " + o.resource + ": a release by " + detail::who(o) +
                                     " removed another owner's lock" + (o.detail.empty() ? "" : " (" + o.detail + ")"));

    // Fenced writes: an accepted write must not follow (in real time) an accepted
    // write with a newer token.
    std::map<std::string, std::vector<const op*>> accepted;
    for (const auto& o : history)
        if (o.kind == kind::write && o.result == outcome::ok)
            accepted[o.resource].push_back(&o);
    for (auto& [resource, writes] : accepted) {
        // By completion time, with the newest fence among all writes completed so far.
        std::sort(writes.begin(), writes.end(), [](const op* a, const op* b) { return a->complete < b->complete; });
        std::vector<std::uint64_t> newest(writes.size());
        for (std::size_t i = 0; i < writes.size(); ++i)
            newest[i] = std::max(i ? newest[i - 1] : 0, writes[i]->fence);
        for (const op* w : writes) {
            // The writes that completed before this one was sent are ordered before it.
            const auto before = std::lower_bound(writes.begin(), writes.end(), w->invoke,
                                                 [](const op* a, nanos t) { return a->complete < t; }) -
                                writes.begin();
            if (before > 0 && w->fence < newest[before - 1])
                out.violations.push_back("fenced write: " + resource + ": write by " + detail::who(*w) +
                                         " accepted after one with fence " + std::to_string(newest[before - 1]));
        }
    }

    // Terms: the work under a term ends before the term is given up, and takes its
    // writes with it.
    for (const auto& end : history) {
        if (end.kind != kind::work_end)
            continue;
        for (const auto& o : history) {
            if (o.process != end.process || o.resource != end.resource || o.fence != end.fence)
                continue;
            // Its own release, as the holder recorded it or as the store saw it.
            const bool given_up = o.kind == kind::release || (o.kind == kind::removed && !o.foreign);
            if (given_up && o.invoke < end.complete)
                out.violations.push_back("terms: " + end.resource + ": " + detail::who(end) +
                                         " gave its term up at " + std::to_string(o.invoke) +
                                         " before its work returned at " + std::to_string(end.complete));
            if (o.kind == kind::write && o.complete > end.complete)
                out.violations.push_back("terms: " + end.resource + ": a write of " + detail::who(end) +
                                         " completed at " + std::to_string(o.complete) +
                                         " after its work returned at " + std::to_string(end.complete));
        }
    }

    for (const auto& o : history)
        if (o.kind == kind::probe && o.result != outcome::ok)
            out.violations.push_back("leak: " + o.resource + ": lock state left behind at " +
                                     std::to_string(o.invoke) + (o.detail.empty() ? "" : " (" + o.detail + ")"));

    if (options.liveness_bound > 0)
        for (const auto& c : history) {
            if (c.kind != kind::crash)
                continue;
            const nanos limit = c.invoke + options.liveness_bound;
            bool waiting = false, served = false;
            for (const auto& o : history) {
                if (o.kind != kind::acquire || o.resource != c.resource || o.process == c.process)
                    continue;
                // Waiting at some point within the bound, and not given up before it.
                if (o.invoke <= limit && o.complete >= c.invoke && (o.result == outcome::ok || o.complete >= limit))
                    waiting = true;
                if (o.result == outcome::ok && o.complete >= c.invoke && o.complete <= limit)
                    served = true;
            }
            if (waiting && !served)
                out.violations.push_back("liveness: " + c.resource + ": nobody acquired within " +
                                         detail::ms(options.liveness_bound) + " of the crash of process " +
                                         std::to_string(c.process));
        }
    return out;
}

} // namespace fault
