// distlock/detail/observer_ref.hpp: a non-owning, type-erased reference to an observer,
// so that acquisition policies can report events without being templates over it.
#pragma once

#include <distlock/observe.hpp>

namespace distlock::detail {

class observer_ref {
public:
    observer_ref() = default;
    template <observer O>
    explicit observer_ref(const O& o) noexcept
        : object_{&o}, call_{[](const void* obj, const event& e) { (*static_cast<const O*>(obj))(e); }}
    {}
    void operator()(const event& e) const
    {
        if (call_)
            call_(object_, e);
    }

private:
    const void* object_ = nullptr;
    void (*call_)(const void*, const event&) = nullptr;
};

} // namespace distlock::detail
