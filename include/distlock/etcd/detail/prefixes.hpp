// distlock/etcd/detail/prefixes.hpp: the key prefixes this process's etcd stores use,
// so that two whose prefixes nest are refused.
//
// Design note. A store keeps a resource's queue under prefix + escaped id + "/".
// With stores on "app/" and "app/a/" (or "app" and "apple/"), the first store's queue
// for the resource whose escaped id is "a" ("le") is the range that holds every key
// of the second: their resources would block each other. The same prefix twice is
// the normal case (several clients of one lock namespace). What another process
// uses cannot be seen from here: docs/etcd.md says to keep prefixes from nesting.
#pragma once

#include <cstddef>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace distlock::etcd::detail {

/// True when one prefix is a proper prefix of the other.
inline bool nests(std::string_view a, std::string_view b) noexcept
{
    return a != b && (a.starts_with(b) || b.starts_with(a));
}

/// The prefixes in use in this process, each with the members ("host:port") it is
/// used on. A store holds a prefix_claim for its lifetime.
class prefix_claims {
public:
    struct use {
        std::string prefix;
        std::vector<std::string> members;
    };

    /// The use `prefix` on `members` would nest with, if any; otherwise it is recorded.
    static std::optional<use> claim(const std::string& prefix, const std::vector<std::string>& members)
    {
        std::lock_guard lock{mutex()};
        for (const auto& u : uses())
            if (nests(u.prefix, prefix))
                for (const auto& m : members)
                    for (const auto& theirs : u.members)
                        if (m == theirs)
                            return use{u.prefix, {m}};
        uses().push_back({prefix, members});
        return std::nullopt;
    }

    static void release(const std::string& prefix, const std::vector<std::string>& members)
    {
        std::lock_guard lock{mutex()};
        auto& all = uses();
        for (auto it = all.begin(); it != all.end(); ++it)
            if (it->prefix == prefix && it->members == members) {
                all.erase(it);
                return;
            }
    }

private:
    static std::mutex& mutex()
    {
        static std::mutex m;
        return m;
    }
    static std::vector<use>& uses()
    {
        static std::vector<use> u;
        return u;
    }
};

/// A store's use of its prefix, recorded while it lives.
class prefix_claim {
public:
    prefix_claim() = default;
    prefix_claim(std::string prefix, std::vector<std::string> members)
        : prefix_{std::move(prefix)}, members_{std::move(members)}
    {}
    prefix_claim(const prefix_claim&) = delete;
    prefix_claim& operator=(const prefix_claim&) = delete;
    ~prefix_claim()
    {
        if (!members_.empty())
            prefix_claims::release(prefix_, members_);
    }

private:
    std::string prefix_;
    std::vector<std::string> members_;
};

} // namespace distlock::etcd::detail
