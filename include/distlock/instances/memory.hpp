// distlock/instances/memory.hpp: the templates of the in-process stores that a separately compiled
// program compiles in one file (README.md, "Separate compilation"). Read twice, so it
// has no include guard: as declarations (`extern template`) at the end of the
// umbrella headers when DISTLOCK_SEPARATE_COMPILATION is defined, and as definitions
// by the header in distlock/src/ that the one file includes.
DISTLOCK_INSTANCE(class distlock::memory::basic_store<void>)
DISTLOCK_INSTANCE(class distlock::memory::basic_session_store<void>)
DISTLOCK_INSTANCE(class distlock::basic_distributed_mutex<distlock::memory::store>)
DISTLOCK_INSTANCE(class distlock::basic_distributed_mutex<distlock::memory::session_store>)
