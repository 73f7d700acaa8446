// The library's templates compiled once (README.md, "Separate compilation"), for the
// program that test/compiled_once/all_stores.cpp locks in: each store whose
// libraries the build has (test/CMakeLists.txt says which).
#include <distlock/src/memory.hpp>
#ifdef DISTLOCK_INSTANCES_REDIS
#include <distlock/src/redis.hpp>
#endif
#ifdef DISTLOCK_INSTANCES_ZOOKEEPER
#include <distlock/src/zookeeper.hpp>
#endif
#ifdef DISTLOCK_INSTANCES_POSTGRES
#include <distlock/src/postgres.hpp>
#endif
#ifdef DISTLOCK_INSTANCES_ETCD
#include <distlock/src/etcd.hpp>
#endif
#ifdef DISTLOCK_INSTANCES_DYNAMODB
#include <distlock/src/dynamodb.hpp>
#endif
