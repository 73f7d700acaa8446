// distlock/instances/core.hpp: the templates of the core that a separately compiled
// program compiles in one file (README.md, "Separate compilation"). Read twice, so it
// has no include guard: as declarations (`extern template`) at the end of the
// umbrella headers when DISTLOCK_SEPARATE_COMPILATION is defined, and as definitions
// by the header in distlock/src/ that the one file includes.
DISTLOCK_INSTANCE(class distlock::detail::basic_lease_keeper<void>)
DISTLOCK_INSTANCE(class distlock::backend::basic_lifetime<void>)
DISTLOCK_INSTANCE(class distlock::basic_multi_lease<void>)
