// distlock/instances/dynamodb.hpp: the templates of the DynamoDB store that a separately compiled
// program compiles in one file (README.md, "Separate compilation"). Read twice, so it
// has no include guard: as declarations (`extern template`) at the end of the
// umbrella headers when DISTLOCK_SEPARATE_COMPILATION is defined, and as definitions
// by the header in distlock/src/ that the one file includes.
DISTLOCK_INSTANCE(class distlock::dynamodb::basic_store<void>)
DISTLOCK_INSTANCE(class distlock::basic_distributed_mutex<distlock::dynamodb::store>)
