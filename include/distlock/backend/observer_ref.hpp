// distlock/backend/observer_ref.hpp: a non-owning, type-erased reference to an observer,
// so that acquisition policies can report events without being templates over it.
#pragma once

#include <distlock/observe.hpp>

namespace distlock::backend {

class observer_ref {
public:
    observer_ref() = default;
    template <observer O>
    explicit observer_ref(const O& o) noexcept
        : object_{&o}, call_{[](const void* obj, const event& e) { (*static_cast<const O*>(obj))(e); }}
    {}
    // An observer that throws must not break a lock's bookkeeping (a grant left
    // unreleased, a keeper that stopped): its exception ends here.
    void operator()(const event& e) const noexcept
    {
        if (!call_)
            return;
        try {
            call_(object_, e);
        } catch (...) {
        }
    }

private:
    const void* object_ = nullptr;
    void (*call_)(const void*, const event&) = nullptr;
};

} // namespace distlock::backend
