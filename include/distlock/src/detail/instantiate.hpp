// distlock/src/detail/instantiate.hpp: the list DISTLOCK_INSTANCE_LIST names (a header
// of distlock/instances/), read as explicit instantiation definitions. Read once per
// list, so it has no include guard; the headers of distlock/src/ name a list and
// include it.
#ifndef DISTLOCK_INSTANCE_LIST
#error "name a list of distlock/instances/ in DISTLOCK_INSTANCE_LIST first"
#endif

#include <distlock/detail/push_warnings.hpp>
#define DISTLOCK_INSTANCE(...) template __VA_ARGS__;
#include DISTLOCK_INSTANCE_LIST
#undef DISTLOCK_INSTANCE
#undef DISTLOCK_INSTANCE_LIST
#include <distlock/detail/pop_warnings.hpp>
