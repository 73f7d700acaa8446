// distlock/detail/select_policy.hpp: pick, from a pack of policies given in any order,
// the one of each kind, or a default.
#pragma once

#include <type_traits>

namespace distlock::detail {

template <class P>
concept has_policy_kind = requires { typename P::policy_kind; };

// False, not an error, for a type without policy_kind: the mutex reports that once,
// and nothing else then fails because of it.
template <class Tag, class P>
inline constexpr bool is_kind = requires { requires std::is_same_v<typename P::policy_kind, Tag>; };

template <class Tag, class Default, class... Ps>
struct select_policy {
    using type = Default;
};
template <class Tag, class Default, class P, class... Ps>
struct select_policy<Tag, Default, P, Ps...> {
    using type = std::conditional_t<is_kind<Tag, P>, P,
                                    typename select_policy<Tag, Default, Ps...>::type>;
};

template <class Tag, class Default, class... Ps>
using select_policy_t = typename select_policy<Tag, Default, Ps...>::type;

template <class Tag, class... Ps>
inline constexpr int count_kind = (0 + ... + (is_kind<Tag, Ps> ? 1 : 0));

} // namespace distlock::detail
