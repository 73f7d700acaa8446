// distlock/util/result_type.hpp: result<T> without Asio or coroutines, so that the
// sans-I/O codecs can return it and still compile (and be fuzzed) on their own.
// Users include <distlock/result.hpp>.
#pragma once

#include <distlock/error.hpp>

#include <boost/outcome/std_result.hpp>
#include <boost/outcome/try.hpp>

#include <type_traits>
#include <utility>

namespace distlock {

namespace outcome = BOOST_OUTCOME_V2_NAMESPACE;

/// A value of type T or the std::error_code saying why there is none: Outcome's
/// std_result, plus `->` and `*` on the value (undefined when there is none, as for
/// std::optional), so that `auto lease = co_await m.lock(); lease->fence()` reads well.
template <class T>
class result : public outcome::std_result<T> {
    using base = outcome::std_result<T>;

public:
    using base::base;
    /// Holds errc::outcome_unknown: nothing is known yet. (Asio's co_spawn needs it.)
    result() : base{make_error_code(errc::outcome_unknown)} {}
    result(const base& b) : base{b} {}
    result(base&& b) : base{std::move(b)} {}

    template <class U = T>
        requires(!std::is_void_v<U>)
    U* operator->() noexcept
    {
        return &this->assume_value();
    }
    template <class U = T>
        requires(!std::is_void_v<U>)
    const U* operator->() const noexcept
    {
        return &this->assume_value();
    }
    template <class U = T>
        requires(!std::is_void_v<U>)
    U& operator*() & noexcept
    {
        return this->assume_value();
    }
    template <class U = T>
        requires(!std::is_void_v<U>)
    const U& operator*() const& noexcept
    {
        return this->assume_value();
    }
};

/// Success without a value.
inline auto success() { return outcome::success(); }

} // namespace distlock
