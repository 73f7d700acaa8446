// distlock/redis/scripts.hpp: the Lua scripts distlock runs on Redis. Keys and
// arguments are always passed as script parameters, never spliced into the text.
//
// Key layout for resource R under key prefix P (binary-safe), where E(x) is x with
// '%', '{' and '}' percent-encoded (%25, %7B, %7D) and every other byte kept:
//   E(P):{#E(R)}:lock      the lock: a string holding the owner token (32 hex chars), with a TTL
//   E(P):{#E(R)}:fence     the fencing counter: an integer that only grows, no TTL
//   E(P):{#E(R)}:released  the pub/sub channel a release publishes on (a shard channel
//                          in a Redis Cluster, in the same slot)
// The keys are built by the client (redis::store) and passed in; the scripts never
// build or parse them. The only '{' of a key is the one before '#', so a key maps
// back to exactly one (P, R): two stores with different prefixes never share a key.
// {#E(R)} is the key's one hash tag, so all keys of a resource live in one Redis
// Cluster slot; the '#' keeps it from ever being empty. With config::hash_tags, an id
// R with a tag of its own T (between its first '{' and the next '}', not empty) uses
// E(P):{@E(T)}E(R):<kind>: resources sharing T share a slot.
#pragma once

#include <string_view>

namespace distlock::redis::scripts {

/// KEYS: lock, fence. ARGV: owner, ttl ms.
/// {1, fence} when acquired; {0, pttl} when held by another.
inline constexpr std::string_view acquire = R"lua(
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return {1, redis.call('INCR', KEYS[2])}
end
return {0, redis.call('PTTL', KEYS[1])}
)lua";

/// KEYS: lock. ARGV: owner, ttl ms. 1 when extended, 0 when not the owner.
inline constexpr std::string_view extend = R"lua(
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
)lua";

/// KEYS: lock. ARGV: owner, channel. 1 when released (and published), 0 when not the owner.
inline constexpr std::string_view release = R"lua(
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.call('PUBLISH', ARGV[2], 'released')
  return 1
end
return 0
)lua";

/// release for a Redis Cluster: the channel is a shard channel (SPUBLISH), in the
/// lock's slot, heard by SSUBSCRIBE on the slot's primary only.
inline constexpr std::string_view release_sharded = R"lua(
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.call('SPUBLISH', ARGV[2], 'released')
  return 1
end
return 0
)lua";

/// KEYS: fence. ARGV: floor. Raises the counter to at least floor; returns its value.
inline constexpr std::string_view raise_fence = R"lua(
local current = tonumber(redis.call('GET', KEYS[1]) or '0')
local floor = tonumber(ARGV[1])
if current < floor then
  redis.call('SET', KEYS[1], ARGV[1])
  return floor
end
return current
)lua";

/// KEYS: lock1, fence1, lock2, fence2, ... ARGV: owner, ttl ms.
/// All or nothing: {1, fence1, fence2, ...}, or {0, index of the held one (1-based), pttl}.
inline constexpr std::string_view acquire_all = R"lua(
for i = 1, #KEYS, 2 do
  if redis.call('EXISTS', KEYS[i]) == 1 then
    return {0, (i + 1) / 2, redis.call('PTTL', KEYS[i])}
  end
end
local out = {1}
for i = 1, #KEYS, 2 do
  redis.call('SET', KEYS[i], ARGV[1], 'PX', ARGV[2])
  out[#out + 1] = redis.call('INCR', KEYS[i + 1])
end
return out
)lua";

/// KEYS: data. ARGV: value, fence. Writes the hash {value, fence} unless a newer
/// fence has written: {1, previous fence} when written, {0, newest fence} when rejected.
inline constexpr std::string_view fenced_write = R"lua(
local last = tonumber(redis.call('HGET', KEYS[1], 'fence') or '0')
if tonumber(ARGV[2]) < last then
  return {0, last}
end
redis.call('HSET', KEYS[1], 'fence', ARGV[2], 'value', ARGV[1])
return {1, last}
)lua";

/// KEYS: lock, fence. {owner or "", pttl, fence}: read without taking the lock.
inline constexpr std::string_view inspect = R"lua(
local owner = redis.call('GET', KEYS[1])
local fence = tonumber(redis.call('GET', KEYS[2]) or '0')
if not owner then
  return {'', -2, fence}
end
return {owner, redis.call('PTTL', KEYS[1]), fence}
)lua";

} // namespace distlock::redis::scripts
