// distlock/redis/scripts.hpp: the Lua scripts distlock runs on Redis. Keys and
// arguments are always passed as script parameters, never spliced into the text.
//
// Key layout for resource R under key prefix P (binary-safe), where E(x) is x with
// '%', '{' and '}' percent-encoded (%25, %7B, %7D) and every other byte kept:
//   E(P):{#E(R)}:lock      the lock, with a TTL: "<owner token>:<fencing token>" (the
//                          owner's 32 hex chars, then the grant's token in decimal)
//   E(P):{#E(R)}:released  the pub/sub channel a release publishes on (a shard channel
//                          in a Redis Cluster, in the same slot)
//   E(P):{#E(R)}:released:S  acquire::fair only: the channel of store S (its listener
//                          id in hex), on which a release hands the lock to the head
//                          of the queue when the head is one of S's waiters
//   E(P):{#E(R)}:queue     acquire::fair only: the waiters in line, a sorted set of
//                          waiter ids scored by arrival (the server's clock in us)
//   E(P):{#E(R)}:offers    acquire::fair only: each waiter's place and what it asked
//                          for, a hash of waiter id -> "<deadline ms>:<ttl ms>:<try>:
//                          <server us>:<listener>": past the deadline (server ms) a
//                          waiter that stopped asking loses its place; the rest is
//                          what a release hands the lock to the head with
//   E(P):{#E(R)}:sharers   shared grants only (a shared mutex's readers, a semaphore's
//                          permits): a hash of owner -> "<expiry ms>:<slot>:<token>"
//                          (the server's clock; the permit's number, 0 for a reader;
//                          the grant's fencing token), and the field "permits": the
//                          count N the holders share (0 for readers). It expires with
//                          its last holder, so N is kept exactly while anyone holds
//   E(P):{#E(R)}:intent    shared grants only: a waiting writer's id, with its TTL;
//                          while it lasts new readers are refused
//   E(P):{#E(R)}:leader    an election on R only (basic_leader_election): the value
//                          its leader proclaimed, "<fencing token>:<value>" (the
//                          token of the grant that proclaimed it, in decimal, then
//                          the value's bytes), without a TTL: one record per
//                          election, which each term's proclaim overwrites. It is
//                          read as the leader's value only while the lock is the
//                          grant with that token
//   E(P):{#E(R)}:delay     a lock-delay's mark (lock_options::lock_delay), then its
//                          tombstone: "<owner>:<fencing token>:<delay ms>" of the
//                          grant it marks, expiring the delay after that grant's
//                          lock (delay_lua below). Its name is passed as an
//                          argument, never as a key
//   E(P):{S}:fence         the last fencing token granted to a resource of the slot
//                          whose tag is S (detail::slot_tags: '$' and up to three
//                          letters or digits): an integer that only grows, without a
//                          TTL; one key per slot in use, at most 16,384 per prefix
// The keys are built by the client (redis::store) and passed in; the scripts never
// build or parse them. The only '{' of a key is the one before '#', '@' or '$', so a
// key maps back to exactly one (P, R), or to one slot of P: two stores with different
// prefixes never share a key.
// {#E(R)} is the key's one hash tag, so all keys of a resource, its slot's fence key
// included, live in one Redis Cluster slot; the '#' keeps it from ever being empty. With config::hash_tags, an id
// R with a tag of its own T (between its first '{' and the next '}', not empty) uses
// E(P):{@E(T)}E(R):<kind>: resources sharing T share a slot.
//
// Under redis::dialect::plain (config::dialect), the layout of the Redlock recipe that
// other Redis lock clients (node-redlock, go-redsync, redis-py's Lock) share, with
// S the tag detail::slot_tags gives the hash slot of R as Redis hashes it:
//   R                          the lock, with a TTL: the owner's 32 hex chars alone,
//                              as those clients write their own random value. Taken
//                              only when absent (as SET NX PX), extended and deleted
//                              only by a script that finds that value there
//   E(P):{S}:holder:E(R)       distlock's grants only: "<owner>:<fencing token>",
//                              written, extended and deleted with the lock, so that
//                              read(), list() and revoke() know a distlock holder's
//                              token; a lock with none is a foreign holder's
//   E(P):{S}:released:E(R)     the channel a distlock release publishes on; other
//                              clients publish nothing, so waiters also poll
//   E(P):{S}:delay:E(R)        a lock-delay's mark, as E(P):{#E(R)}:delay above
//                              (other Redlock clients do not honour it)
//   E(P):{S}:leader:E(R)       an election's value, as E(P):{#E(R)}:leader above:
//                              proclaimed only by a distlock grant (its holder key
//                              names its token), so never a foreign holder's
//   E(P):{S}:fence             as above: the slot's last fencing token, shared with
//                              the default layout's grants of the same prefix
// Every one of these keys lies in R's slot, whether or not R has a hash tag of its
// own, and none of them can be an id's lock key: ids that begin with "E(P):{" are
// refused under this layout.
#pragma once

#include <array>
#include <cstddef>
#include <string>
#include <string_view>

namespace distlock::redis::scripts {

namespace detail {

// A script is the Lua helpers it uses (the *_lua texts below), then its own body:
// join() names the pieces at compile time, and the text a server is sent is joined
// from them once, at run time, on its first use (text_of()). Joined at compile time,
// every script's characters were evaluated by the compiler in every file that
// includes this header (bench/README.md, "Compile cost").
template <std::size_t K>
struct pieces {
    std::array<std::string_view, K> parts;

    std::string joined() const
    {
        std::size_t size = 0;
        for (const auto part : parts)
            size += part.size();
        std::string out;
        out.reserve(size);
        for (const auto part : parts)
            out += part;
        return out;
    }
};

template <std::size_t... N>
constexpr pieces<sizeof...(N)> join(const char (&... parts)[N])
{
    return {{std::string_view{parts, N - 1}...}};
}

// The text of a script, joined on its first use and kept for the program's life.
template <const auto& script>
std::string_view text_of()
{
    static const std::string text = script.joined();
    return text;
}

// The fencing token of a new grant: the larger of the server's clock in microseconds
// and the last token stored under the resource's fence key plus one.
//
// Why a fence key per slot and not a counter per resource: a service that locks per
// order id would leave one key per id ever locked. A slot's key is shared by every
// resource that hashes to it (at most 16,384 keys per prefix, whatever was locked),
// and lives in that slot, so each resource's keys share a slot on any server. Every
// grant raises the key, so each resource's tokens grow with it. It has no TTL, so
// tokens keep growing across any step of the server's clock, and the clock keeps
// them growing when the key is lost (a restart without persistence, a failover, an
// eviction). A held lock keeps its own token beside its owner ("<owner>:<token>"),
// which read() answers.
//
// Stored tokens are checked before anything is written: a fence key that holds
// anything but an integer below 2^53 (Lua's exact integers; string.format('%d')
// writes them whole) fails the script with an error reply, and so does a token that
// would reach 2^53 (the clock does in the year 2255). Tokens compared as Lua numbers
// past 2^53 would repeat, and a fence key that breaks fails loudly rather than let
// two holders share a token.
//
// fences_after(keys, now_us): the next token after the tokens in `keys` (read, not
// written), and its text; now_us is the server's clock in us when the script has
// read it already, else nil. store_fences(keys, text): writes it to them.
inline constexpr char fence_lua[] = R"lua(
local token_limit = 9007199254740992
-- Error lines are quoted without control characters: a CR LF would end the line.
local function quoted(text)
  return (string.gsub(string.sub(text, 1, 80), '%c', '?'))
end
-- `where`: the key (or 'floor') named by the error.
local function as_token(text, where)
  if not text then
    return 0
  end
  local token = #text <= 16 and string.match(text, '^%d+$') and tonumber(text)
  if not token or token >= token_limit then
    error({err = 'ERR distlock: ' .. quoted(where) .. ' holds no fencing token below 2^53: ' .. quoted(text)})
  end
  return token
end
local function fences_after(keys, now_us)
  local last = 0
  if #keys == 1 then
    last = as_token(redis.call('GET', keys[1]) or nil, keys[1]) -- a key of another type: WRONGTYPE
  else
    for i = 1, #keys, 1000 do
      local chunk = {unpack(keys, i, math.min(i + 999, #keys))}
      local part = redis.call('MGET', unpack(chunk))
      local strings = 0
      for j = 1, #part do
        if part[j] then
          strings = strings + 1
          last = math.max(last, as_token(part[j], chunk[j]))
        end
      end
      -- MGET reads a key of another type as missing; GET and EXISTS do not.
      if redis.call('EXISTS', unpack(chunk)) ~= strings then
        error({err = 'ERR distlock: a fence key of another type than string among ' .. quoted(chunk[1]) .. '...'})
      end
    end
  end
  if not now_us then
    local clock = redis.call('TIME')
    now_us = clock[1] * 1000000 + clock[2]
  end
  local fence = math.max(last + 1, now_us)
  if fence >= token_limit then
    error({err = 'ERR distlock: fencing tokens have reached 2^53'})
  end
  return fence, string.format('%d', fence)
end
local function store_fences(keys, text)
  if #keys == 1 then
    redis.call('SET', keys[1], text)
    return
  end
  for i = 1, #keys, 500 do
    local args = {}
    for j = i, math.min(i + 499, #keys) do
      args[#args + 1] = keys[j]
      args[#args + 1] = text
    end
    redis.call('MSET', unpack(args))
  end
end
)lua";

// owns(value, owner): whether a lock's value ("<owner>:<token>") is `owner`'s.
inline constexpr char owns_lua[] = R"lua(
local function owns(value, owner)
  return value and string.sub(value, 1, #owner + 1) == owner .. ':'
end
)lua";

// holder_of(value): the owner and the token of a lock's value ("<owner>:<token>"). A
// value without a token (a lock written by an older client) or with a malformed one
// reads as token 0: unknown. After fence_lua (token_limit).
inline constexpr char holder_lua[] = R"lua(
local function holder_of(value)
  local colon = string.find(value, ':', 1, true)
  local token = colon and string.sub(value, colon + 1) or ''
  token = #token <= 16 and string.match(token, '^%d+$') and tonumber(token) or 0
  if token >= token_limit then
    token = 0
  end
  return colon and string.sub(value, 1, colon - 1) or value, token
end
)lua";

// deadline_of(entry): until when (server ms) a waiter's offer keeps its place in line;
// nil for an entry that is missing or does not read as an offer.
inline constexpr char offer_lua[] = R"lua(
local function deadline_of(entry)
  return tonumber(string.match(entry or '', '^(%d+):'))
end
)lua";

// The lock-delay (docs/lock_delay.md). A grant asked for with one is marked right
// after it is made (arm_delay): its mark, "<owner>:<token>:<delay ms>", expires the
// delay after the grant's lock (PEXPIRE with the lock's time left plus the delay,
// moved with each extension), and a release deletes it with the lock. So when the
// lock key is gone without a release (its TTL ran out, it was revoked), what is left
// of the mark is the tombstone, and every acquiring script that finds the lock free
// refuses the grant while it lasts, answering the milliseconds left.
//
// The mark's key is in the lock's slot, but its name is an argument, never one of
// KEYS: while a Redis Cluster slot migrates, a script that declares a key the node
// does not have is refused (TRYAGAIN), and a resource usually has no mark. It is
// read and written through redis.pcall: a node that no longer has it (moved to the
// slot's new node mid-migration) answers an error, which reads as no mark, so a
// tombstone can be missed while its slot migrates.
//
// tombstone_left(mark): the milliseconds left of the tombstone (call it once the
// lock key is known to be gone), nil when none lasts. A mark with more than its
// delay left (or no expiry) belongs to a grant whose lock went before its time
// without a release (deleted by hand, evicted): its tombstone counts from now.
// follow_lease(mark, owner, ttl): `owner`'s mark follows its lock extended to `ttl`
// ms. drop_mark(mark): a release's, with its lock.
inline constexpr char delay_lua[] = R"lua(
local function mark_delay(entry)
  return type(entry) == 'string' and tonumber(string.match(entry, '^%x+:%d+:(%d+)$')) or nil
end
local function tombstone_left(mark)
  if not mark then
    return nil
  end
  local delay = mark_delay(redis.pcall('GET', mark))
  local left = delay and redis.pcall('PTTL', mark)
  if type(left) ~= 'number' or left == -2 then
    return nil
  end
  if left == -1 or left > delay then
    if type(redis.pcall('PEXPIRE', mark, delay)) ~= 'number' then
      return nil
    end
    left = delay
  end
  -- A PTTL of 0 is a key in its last millisecond, which still refuses.
  return math.max(left, 1)
end
local function follow_lease(mark, owner, ttl)
  local entry = redis.pcall('GET', mark)
  local delay = mark_delay(entry)
  if delay and string.sub(entry, 1, #owner + 1) == owner .. ':' then
    redis.pcall('PEXPIRE', mark, tonumber(ttl) + delay)
  end
end
local function drop_mark(mark)
  redis.pcall('DEL', mark)
end
)lua";

// arm(lock_key, mark, owner, token, delay): marks the grant whose lock is `lock_key`
// (checked by the caller) for a lock-delay of `delay` ms; an error reply when the
// mark cannot be written (the slot migrates), so that the grant is given back
// rather than handed out unmarked. After fence_lua (quoted) and delay_lua.
inline constexpr char arm_lua[] = R"lua(
local function arm(lock_key, mark, owner, token, delay)
  local pttl = redis.call('PTTL', lock_key)
  local entry = owner .. ':' .. token .. ':' .. delay
  local written
  if pttl > 0 then
    written = redis.pcall('SET', mark, entry, 'PX', pttl + tonumber(delay))
  else
    written = redis.pcall('SET', mark, entry)
  end
  if type(written) == 'table' and written.err then
    return {err = 'ERR distlock: the lock-delay mark ' .. quoted(mark) .. ' was not written: ' .. quoted(written.err)}
  end
  return 1
end
)lua";

// Commands over many keys of one slot, 1,000 keys a call (Lua's unpack() has a
// limit): how the scripts over a set make a few calls instead of one per key.
inline constexpr char set_lua[] = R"lua(
local function any_exists(keys, n)
  for i = 1, n, 1000 do
    if redis.call('EXISTS', unpack(keys, i, math.min(i + 999, n))) > 0 then
      return true
    end
  end
  return false
end
local function mget(keys)
  local out = {}
  for i = 1, #keys, 1000 do
    local part = redis.call('MGET', unpack(keys, i, math.min(i + 999, #keys)))
    for j = 1, #part do
      out[#out + 1] = part[j]
    end
  end
  return out
end
)lua";

// The grant of one resource and the release of a quorum's lease run on every lock
// and on every node of a Redlock, so they define no helper on their common path:
// Lua makes each function a script defines anew on every call, and making the
// helpers these two scripts join costs the server about what one more redis.call()
// does. The helpers are defined only on the rare paths (a lock-delay mark is there,
// a fence key holds no token), which decide as the helpers always do: the same calls
// in the same order, the same error replies. The grant answers with its token alone,
// an integer: Redis writes an array reply in more steps than an integer.
//
// The grant's common path is five calls. One EXISTS looks for the lock and its
// lock-delay mark together (through pcall: the mark is not one of KEYS, and a node
// that no longer has it answers an error, which takes the path that looks at each).
// INCR reads the fence key as Redis parses integers, which is cheaper than Lua's
// parsing of a 16-digit text, and writes the next token; when the server's clock is
// ahead of it, as it nearly always is, one SET puts the clock's token there. A fence
// key INCR refuses or takes out of range (no integer, negative, at 2^53) is put back
// as it was (DECR) and read by the helpers, which refuse it as before, or accept
// the texts they read and INCR does not (leading zeros): nothing is written before
// a refusal.
inline constexpr auto acquire = join(R"lua(
local token_limit = 9007199254740992
if redis.pcall('EXISTS', KEYS[1], ARGV[3]) ~= 0 then
  if redis.call('EXISTS', KEYS[1]) == 1 then
    return {0, redis.call('PTTL', KEYS[1])}
  end
  if type(redis.pcall('GET', ARGV[3])) == 'string' then
)lua", delay_lua, R"lua(
    local delayed = tombstone_left(ARGV[3])
    if delayed then
      return {3, delayed}
    end
  end
end
local clock = redis.call('TIME')
local now = clock[1] * 1000000 + clock[2]
local fence = redis.pcall('INCR', KEYS[2])
local written = type(fence) == 'number' and fence >= 1 and fence < token_limit
if not written then
  if type(fence) == 'number' then
    redis.call('DECR', KEYS[2])
  end
)lua", fence_lua, R"lua(
  fence = as_token(redis.call('GET', KEYS[2]) or nil, KEYS[2]) + 1
end
if fence < now then
  fence = now
  written = false
end
if fence >= token_limit then
  error({err = 'ERR distlock: fencing tokens have reached 2^53'})
end
local text = string.format('%d', fence)
if not written then
  redis.call('SET', KEYS[2], text)
end
redis.call('SET', KEYS[1], ARGV[1] .. ':' .. text, 'PX', ARGV[2])
return fence
)lua");

// One EXISTS over the set (the per-lock look only when one is held), then one token
// for the whole set, above every fence key the set hashes to, and one write per lock
// plus one MSET of those keys: the locks of a set are granted together, so they share
// their token (each resource's own tokens still grow).
inline constexpr auto acquire_all = join(fence_lua, set_lua, delay_lua, R"lua(
local n = tonumber(ARGV[3])
if any_exists(KEYS, n) then
  for i = 1, n do
    if redis.call('EXISTS', KEYS[i]) == 1 then
      return {0, i, redis.call('PTTL', KEYS[i])}
    end
  end
end
for i = 1, n do
  local delayed = tombstone_left(ARGV[3 + i])
  if delayed then
    return {3, i, delayed}
  end
end
local fence_keys = {}
for i = n + 1, #KEYS do
  fence_keys[#fence_keys + 1] = KEYS[i]
end
local fence, text = fences_after(fence_keys)
local value = ARGV[1] .. ':' .. text
for i = 1, n do
  redis.call('SET', KEYS[i], value, 'PX', ARGV[2])
end
store_fences(fence_keys, text)
return {1, fence}
)lua");

// One MGET of the owners, one DEL of those that are the owner's, one PUBSUB NUMSUB
// of their channels, and a PUBLISH on each channel someone listens to. Most released
// resources have no waiter, and a PUBLISH heard by no one is a call for nothing, made
// once per resource of the set, where one PUBSUB NUMSUB counts the listeners of all.
// A PUBLISH reaches only those subscribed as it runs, and the script runs whole, so
// publishing only where the count finds a listener loses no one (distlock's waiters
// subscribe to the channel itself, never by pattern, which the count would miss).
inline constexpr auto release_all = join(owns_lua, set_lua, delay_lua, R"lua(
local owners = mget(KEYS)
local sharded = ARGV[2] == '1'
local out, mine, channels = {}, {}, {}
for i = 1, #KEYS do
  if owns(owners[i], ARGV[1]) then
    mine[#mine + 1] = KEYS[i]
    channels[#channels + 1] = ARGV[i + 2]
    drop_mark(ARGV[#KEYS + i + 2])
    out[i] = 1
  else
    out[i] = 0
  end
end
for i = 1, #mine, 1000 do
  redis.call('DEL', unpack(mine, i, math.min(i + 999, #mine)))
end
for i = 1, #channels, 1000 do
  local counts = redis.call('PUBSUB', sharded and 'SHARDNUMSUB' or 'NUMSUB',
                            unpack(channels, i, math.min(i + 999, #channels)))
  for j = 2, #counts, 2 do
    if counts[j] > 0 then
      redis.call(sharded and 'SPUBLISH' or 'PUBLISH', counts[j - 1], 'released')
    end
  end
end
return out
)lua");

inline constexpr auto next = join(fence_lua, R"lua(
local fence, text = fences_after({KEYS[1]})
store_fences({KEYS[1]}, text)
return fence
)lua");

inline constexpr auto extend = join(owns_lua, delay_lua, R"lua(
if owns(redis.call('GET', KEYS[1]), ARGV[1]) then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  follow_lease(ARGV[3], ARGV[1], ARGV[2])
  return 1
end
return 0
)lua");

// A Redis Cluster (ARGV[3] '1') publishes on a shard channel in the lock's slot, heard
// by SSUBSCRIBE on the slot's primary only. Without helpers, as acquire (above): owns()
// and drop_mark() written out, the lock and its lock-delay mark deleted in one call
// (through pcall, as drop_mark(): a node that no longer has the mark answers an
// error, and then the lock alone is deleted).
inline constexpr auto release = join(R"lua(
local value = redis.call('GET', KEYS[1])
if value and string.sub(value, 1, #ARGV[1] + 1) == ARGV[1] .. ':' then
  if type(redis.pcall('DEL', KEYS[1], ARGV[4])) ~= 'number' then
    redis.call('DEL', KEYS[1])
  end
  redis.call(ARGV[3] == '1' and 'SPUBLISH' or 'PUBLISH', ARGV[2], 'released')
  return 1
end
return 0
)lua");

// The fair queue's helpers, over KEYS lock, fence, queue, offers, in that order, and
// ARGV channel and sharded ('1' for a Redis Cluster's shard channels) of the resource.
//
// live_head: the head of the line and its entry, once the waiters ahead of it whose
// deadline has passed (they stopped asking: crashed, cancelled without a word,
// partitioned) are dropped. Only the head's deadline matters: a lapsed waiter behind
// it holds no one up, and is dropped when it comes first (or moves to the back when
// it asks again).
//
// next_turn: who comes next once the lock is free, read before anything of the lock
// is written (a fence key that fails fails the script first): the head waiter, and,
// when someone listens at this moment on the channel its offer names (the
// resource's channel, ':', the id of the head's store; the offer also holds its TTL,
// try, and when), the token to hand it the lock with. A head that does not listen
// (its process is gone, or lost its subscription) is not handed a lock it could not
// learn of: it takes its turn by asking, or loses its place at its deadline. Nor is
// a head handed the lock while `mark` (when given) is a lock-delay's tombstone: it
// asks, and hears the delay.
//
// give_turn: hands the lock to that head (as owner: its id), taking it out of line,
// and tells it on its store's channel: "<id>:<try>:<token>:<us since the try>", which
// only its lock() call takes; or, when no one waits, publishes 'released' on the
// resource's channel.
//
// free_lock: what a release does once it may (release_fair, revoke): the lock goes
// to the head when the head listens, else it is deleted; no one waiting, 'released'
// is published for whoever listens on the resource's channel (as the plain release
// does); a head that does not listen is told nothing and takes its turn by asking.
//
// After fence_lua, offer_lua and delay_lua.
inline constexpr char fair_queue_lua[] = R"lua(
local lock_key, fence_key, queue, offers = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local function clock_us()
  local clock = redis.call('TIME')
  return clock[1] * 1000000 + clock[2]
end
local function leave_line(waiters)
  for i = 1, #waiters, 1000 do
    local chunk = {unpack(waiters, i, math.min(i + 999, #waiters))}
    redis.call('ZREM', queue, unpack(chunk))
    redis.call('HDEL', offers, unpack(chunk))
  end
end
local function live_head(now_ms)
  while true do
    local head = redis.call('ZRANGE', queue, 0, 0)[1]
    if not head then
      return nil
    end
    local entry = redis.call('HGET', offers, head)
    local deadline = deadline_of(entry)
    if deadline and deadline > now_ms then
      return head, entry
    end
    leave_line({head})
  end
end
local function next_turn(channel, sharded, now_us, mark)
  local head, entry = live_head(math.floor(now_us / 1000))
  if not head then
    return nil
  end
  local turn = {head = head}
  if tombstone_left(mark) then
    return turn
  end
  local ttl, try, since, listener = string.match(entry, '^%d+:(%d+):(%d+):(%d+):(%x+)$')
  if ttl then
    turn.channel = channel .. ':' .. listener
    local listening = redis.call('PUBSUB', sharded == '1' and 'SHARDNUMSUB' or 'NUMSUB', turn.channel)
    if listening[2] > 0 then
      turn.ttl, turn.try = ttl, try
      turn.after = string.format('%d', math.max(0, now_us - tonumber(since)))
      turn.fence, turn.text = fences_after({fence_key}, now_us)
    end
  end
  return turn
end
local function give_turn(turn, channel, sharded)
  local publish = sharded == '1' and 'SPUBLISH' or 'PUBLISH'
  if not turn then
    redis.call(publish, channel, 'released')
  elseif turn.text then
    redis.call('SET', lock_key, turn.head .. ':' .. turn.text, 'PX', turn.ttl)
    store_fences({fence_key}, turn.text)
    leave_line({turn.head})
    redis.call(publish, turn.channel, turn.head .. ':' .. turn.try .. ':' .. turn.text .. ':' .. turn.after)
  end
end
local function free_lock(channel, sharded)
  local turn = next_turn(channel, sharded, clock_us())
  if not (turn and turn.text) then -- else give_turn writes the lock over
    redis.call('DEL', lock_key)
  end
  give_turn(turn, channel, sharded)
end
)lua";

// A held lock is answered at once, from the lock alone (a waiter's place is kept
// when it joins): the queue is read only when the lock is free. A lock handed to the
// waiter (its id as owner) is answered {2, token, pttl}. A waiter that joins after
// its deadline passed queues again at the back, as one that was forgotten would.
inline constexpr auto acquire_fair = join(fence_lua, owns_lua, offer_lua, delay_lua, fair_queue_lua, R"lua(
local waiter = ARGV[3]
local value = redis.call('GET', lock_key)
if owns(value, waiter) then
  return {2, tonumber(string.sub(value, #waiter + 2)) or 0, redis.call('PTTL', lock_key)}
end
local now_us, delayed
if not value then
  now_us = clock_us()
  local head = live_head(math.floor(now_us / 1000))
  if head == nil or head == waiter then
    delayed = tombstone_left(ARGV[8])
    if not delayed then
      local fence, text = fences_after({fence_key}, now_us)
      if head then
        leave_line({waiter})
      end
      redis.call('SET', lock_key, ARGV[1] .. ':' .. text, 'PX', ARGV[2])
      store_fences({fence_key}, text)
      return {1, fence}
    end
  end
end
if ARGV[6] == '1' then
  now_us = now_us or clock_us()
  local now_ms = math.floor(now_us / 1000)
  local deadline = deadline_of(redis.call('HGET', offers, waiter))
  if not deadline or deadline <= now_ms then
    redis.call('ZADD', queue, now_us, waiter)
  end
  redis.call('HSET', offers, waiter, string.format('%d:%s:%s:%d:%s', now_ms + ARGV[4], ARGV[2], ARGV[5], now_us, ARGV[7]))
  redis.call('PEXPIRE', queue, ARGV[4])
  redis.call('PEXPIRE', offers, ARGV[4])
end
if delayed then
  return {3, delayed}
end
return {0, value and redis.call('PTTL', lock_key) or -2}
)lua");

inline constexpr auto release_fair = join(fence_lua, owns_lua, offer_lua, delay_lua, fair_queue_lua, R"lua(
if not owns(redis.call('GET', lock_key), ARGV[1]) then
  return 0
end
drop_mark(ARGV[4])
free_lock(ARGV[2], ARGV[3])
return 1
)lua");

// The stored token, read as holder_of reads it, is compared in decimal with the given
// fence: exact for every token a grant carries (below 2^53); a token 0 (unknown)
// names no grant, nor does a fence past 2^53. The rest is release_fair's, so that a
// revoked lock's waiters hear exactly what a release tells them: on a resource no one
// queues for, 'released' on its channel. A grant marked for a lock-delay ends as an
// expiry would (its holder may still have writes in flight): its lock goes, its mark
// is left as the tombstone (from now), no one is handed the lock, and the waiters on
// the resource's channel are woken to hear the delay.
inline constexpr auto revoke = join(fence_lua, holder_lua, offer_lua, delay_lua, fair_queue_lua, R"lua(
local value = redis.call('GET', lock_key)
if not value then
  return 0
end
local _, token = holder_of(value)
if token == 0 or string.format('%d', token) ~= ARGV[1] then
  return 0
end
if mark_delay(redis.pcall('GET', ARGV[4])) then
  redis.call('DEL', lock_key)
  tombstone_left(ARGV[4])
  redis.call(ARGV[3] == '1' and 'SPUBLISH' or 'PUBLISH', ARGV[2], 'released')
  return 1
end
free_lock(ARGV[2], ARGV[3])
return 1
)lua");

// A lock handed to the waiter and given back is released: its mark goes with it. A
// head that leaves a free lock in its lock-delay passes nothing on: the next head
// hears of the delay when it asks.
inline constexpr auto leave_queue = join(fence_lua, owns_lua, offer_lua, delay_lua, fair_queue_lua, R"lua(
local waiter = ARGV[1]
local head = redis.call('ZRANGE', queue, 0, 0)[1]
leave_line({waiter})
local value = redis.call('GET', lock_key)
local handed = owns(value, waiter)
if handed or (head == waiter and not value) then
  if handed then
    drop_mark(ARGV[4])
  end
  local turn = next_turn(ARGV[2], ARGV[3], clock_us(), ARGV[4])
  if handed then
    redis.call('DEL', lock_key)
  end
  give_turn(turn, ARGV[2], ARGV[3])
end
return 1
)lua");

// raised(key, floor_text): what the token in `key` becomes when raised to at least
// the floor (both checked, nothing written), and whether it changes.
inline constexpr char raise_fence_lua[] = R"lua(
local function raised(key, floor_text)
  local current = as_token(redis.call('GET', key) or nil, key)
  local floor = as_token(floor_text, 'floor')
  return math.max(current, floor), floor > current
end
)lua";

inline constexpr auto raise = join(fence_lua, raise_fence_lua, R"lua(
local token, higher = raised(KEYS[1], ARGV[1])
if higher then
  redis.call('SET', KEYS[1], ARGV[1])
end
return token
)lua");

// Without helpers on its common path, as acquire (above): raised() and owns() written
// out, as_token() only for a token that does not read as one.
inline constexpr auto release_raising = join(R"lua(
local token_limit = 9007199254740992
local stored = redis.call('GET', KEYS[2])
local current = not stored and 0 or (#stored <= 16 and string.match(stored, '^%d+$') and tonumber(stored))
local floor = #ARGV[3] <= 16 and string.match(ARGV[3], '^%d+$') and tonumber(ARGV[3])
if not current or current >= token_limit or not floor or floor >= token_limit then
)lua", fence_lua, R"lua(
  as_token(stored or nil, KEYS[2])
  as_token(ARGV[3], 'floor')
end
local released = 0
local value = redis.call('GET', KEYS[1])
if value and string.sub(value, 1, #ARGV[1] + 1) == ARGV[1] .. ':' then
  redis.call('DEL', KEYS[1])
  redis.call(ARGV[4] == '1' and 'SPUBLISH' or 'PUBLISH', ARGV[2], 'released')
  released = 1
end
if floor > current then
  redis.call('SET', KEYS[2], ARGV[3])
end
return released
)lua");

// The shared grants' helpers (a shared mutex, a semaphore), over KEYS lock, fence,
// sharers, intent, in that order. The exclusive holder is the lock key of the mutex,
// so that read(), list() and revoke() see a writer as they see a mutex's holder; the
// shared holders are the sharers hash beside it, each with its own expiry, since a
// reader's or a permit's TTL is its own and Redis expires whole keys only.
//
// sharers_at(now_ms): the sharers read, nothing written: `live` (owner -> {expires,
// slot, token}) and their `count`, the count N they hold with (`permits`: -1 when
// the hash does not say), and the entries whose time ran out or that do not read as
// one (`gone`). tidy(s) drops those, or the whole hash once no one is left in it,
// N with it; the scripts call it after the fence key is read (fences_after fails on
// a broken one before anything is written).
//
// keep_until(live): the hash expires with its last holder, so that the holders of a
// resource left alone cost nothing after their TTL.
inline constexpr char shared_lua[] = R"lua(
local lock_key, fence_key, sharers, intent = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local function clock_us()
  local clock = redis.call('TIME')
  return clock[1] * 1000000 + clock[2]
end
local function sharers_at(now_ms)
  local all = redis.call('HGETALL', sharers)
  local s = {live = {}, count = 0, permits = -1, gone = {}, fields = #all / 2}
  for i = 1, #all, 2 do
    local field, entry = all[i], all[i + 1]
    if field == 'permits' then
      s.permits = tonumber(string.match(entry, '^%d+$')) or -1
    else
      local expires, slot, token = string.match(entry, '^(%d+):(%d+):(%d+)$')
      expires = tonumber(expires)
      if expires and expires > now_ms then
        s.live[field] = {expires = expires, slot = tonumber(slot), token = token}
        s.count = s.count + 1
      else
        s.gone[#s.gone + 1] = field
      end
    end
  end
  return s
end
local function tidy(s)
  if s.count == 0 then
    if s.fields > 0 then
      redis.call('DEL', sharers)
    end
    return
  end
  for i = 1, #s.gone, 1000 do
    redis.call('HDEL', sharers, unpack(s.gone, i, math.min(i + 999, #s.gone)))
  end
end
local function entry_of(h)
  return string.format('%d:%d:', h.expires, h.slot) .. h.token
end
local function keep_until(live)
  local latest
  for _, h in pairs(live) do
    latest = math.max(latest or h.expires, h.expires)
  end
  if latest then
    redis.call('PEXPIREAT', sharers, string.format('%d', latest))
  end
end
local function announce(channel, sharded)
  redis.call(sharded == '1' and 'SPUBLISH' or 'PUBLISH', channel, 'released')
end
)lua";

// A count that differs from the holders' is refused first, as data ({-1, N}): two
// clients that disagree on N get an error, never a mix. An owner that holds already
// (a try whose reply was lost, asked again) keeps its permit's number. A reader is
// refused while a writer's intent lives; a permit is not (a semaphore has no writers).
inline constexpr auto put_shared = join(fence_lua, delay_lua, shared_lua, R"lua(
local owner, ttl, permits = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local now_us = clock_us()
local now_ms = math.floor(now_us / 1000)
local s = sharers_at(now_ms)
if s.count > 0 and s.permits ~= permits then
  tidy(s)
  return {-1, s.permits}
end
local pttl = redis.call('PTTL', lock_key)
if pttl ~= -2 then
  tidy(s)
  return {0, pttl}
end
local delayed = tombstone_left(ARGV[4])
if delayed then
  tidy(s)
  return {3, delayed}
end
local slot = 0
if permits == 0 then
  if redis.call('EXISTS', intent) == 1 then
    tidy(s)
    return {0, -2}
  end
elseif s.live[owner] then
  slot = s.live[owner].slot
else
  if s.count >= permits then
    local first_out
    for _, h in pairs(s.live) do
      first_out = math.min(first_out or h.expires, h.expires)
    end
    tidy(s)
    return {0, first_out - now_ms}
  end
  local taken = {}
  for _, h in pairs(s.live) do
    taken[h.slot] = true
  end
  while taken[slot] do
    slot = slot + 1
  end
end
local fence, text = fences_after({fence_key}, now_us)
tidy(s)
s.live[owner] = {expires = now_ms + ttl, slot = slot, token = text}
redis.call('HSET', sharers, owner, entry_of(s.live[owner]), 'permits', ARGV[3])
keep_until(s.live)
store_fences({fence_key}, text)
if permits == 0 then
  return {1, fence}
end
return {1, fence, slot}
)lua");

// Granted when no one holds and no other waiter's intent lives (the waiter's own
// goes with the grant); else the waiter takes the intent, or renews its own, for the
// TTL. A semaphore's holders ({-1, N}) are refused: it has no writers. In the
// resource's lock-delay the waiter takes the intent as when held, answered {3, ms}.
inline constexpr auto put_exclusive = join(fence_lua, delay_lua, shared_lua, R"lua(
local waiter, owner, ttl = ARGV[1], ARGV[2], ARGV[3]
local now_us = clock_us()
local s = sharers_at(math.floor(now_us / 1000))
if s.count > 0 and s.permits ~= 0 then
  tidy(s)
  return {-1, s.permits}
end
local waiting = redis.call('GET', intent)
local other_waits = waiting and waiting ~= waiter
local pttl = redis.call('PTTL', lock_key)
local delayed
if not other_waits and pttl == -2 and s.count == 0 then
  delayed = tombstone_left(ARGV[4])
  if not delayed then
    local fence, text = fences_after({fence_key}, now_us)
    tidy(s)
    if waiting then
      redis.call('DEL', intent)
    end
    redis.call('SET', lock_key, owner .. ':' .. text, 'PX', ttl)
    store_fences({fence_key}, text)
    return {1, fence}
  end
end
tidy(s)
if not other_waits then
  redis.call('SET', intent, waiter, 'PX', ttl)
end
if delayed then
  return {3, delayed}
end
return {0, pttl}
)lua");

inline constexpr auto extend_shared = join(owns_lua, delay_lua, shared_lua, R"lua(
local owner = ARGV[1]
if owns(redis.call('GET', lock_key), owner) then
  redis.call('PEXPIRE', lock_key, ARGV[2])
  follow_lease(ARGV[3], owner, ARGV[2])
  return 1
end
local now_ms = math.floor(clock_us() / 1000)
local s = sharers_at(now_ms)
tidy(s)
local h = s.live[owner]
if not h then
  return 0
end
h.expires = now_ms + tonumber(ARGV[2])
redis.call('HSET', sharers, owner, entry_of(h))
keep_until(s.live)
return 1
)lua");

// The last holder to go takes the count N with it (tidy).
inline constexpr auto release_shared = join(owns_lua, delay_lua, shared_lua, R"lua(
local owner = ARGV[1]
if owns(redis.call('GET', lock_key), owner) then
  redis.call('DEL', lock_key)
  drop_mark(ARGV[4])
  announce(ARGV[2], ARGV[3])
  return 1
end
local s = sharers_at(math.floor(clock_us() / 1000))
local h = s.live[owner]
if h then
  s.live[owner] = nil
  s.count = s.count - 1
  s.gone[#s.gone + 1] = owner
end
tidy(s)
if not h then
  return 0
end
keep_until(s.live)
announce(ARGV[2], ARGV[3])
return 1
)lua");

inline constexpr auto withdraw = join(shared_lua, R"lua(
if redis.call('GET', intent) == ARGV[1] then
  redis.call('DEL', intent)
  announce(ARGV[2], ARGV[3])
end
return 1
)lua");

// The writer becomes a reader with its token and its time left, in one step: no
// writer comes between, and readers waiting are woken to come in beside it. Its
// exclusive grant ends by its owner's act, as by a release: its lock-delay mark goes.
inline constexpr auto downgrade = join(fence_lua, owns_lua, holder_lua, delay_lua, shared_lua, R"lua(
local owner = ARGV[1]
local value = redis.call('GET', lock_key)
if not owns(value, owner) then
  return 0
end
local _, token = holder_of(value)
local pttl = redis.call('PTTL', lock_key)
local now_ms = math.floor(clock_us() / 1000)
local s = sharers_at(now_ms)
tidy(s)
redis.call('DEL', lock_key)
drop_mark(ARGV[4])
s.live[owner] = {expires = now_ms + math.max(pttl, 0), slot = 0, token = string.format('%d', token)}
redis.call('HSET', sharers, owner, entry_of(s.live[owner]), 'permits', '0')
keep_until(s.live)
announce(ARGV[2], ARGV[3])
return 1
)lua");

// A held lock's token is the one stored beside its owner (holder_of).
inline constexpr auto inspect = join(fence_lua, holder_lua, R"lua(
local value = redis.call('GET', KEYS[1])
if not value then
  return {0, '', -2, as_token(redis.call('GET', KEYS[2]) or nil, KEYS[2])}
end
local owner, token = holder_of(value)
return {1, owner, redis.call('PTTL', KEYS[1]), token}
)lua");

// One page of a listing, read in one step. A waiter counts while its offer's deadline
// has not passed, as live_head counts it. Keys of another type than the scripts
// write do not fail the page (a listing is how such a key is found): a lock key of
// another type is listed as held, by an unknown owner with token 0 (acquire finds it
// there and waits), and a queue of another type as waiters -1 (unknown).
inline constexpr auto survey = join(fence_lua, holder_lua, offer_lua, R"lua(
local clock = redis.call('TIME')
local now_ms = clock[1] * 1000 + math.floor(clock[2] / 1000)
local function in_line(queue, offers)
  local line = redis.pcall('ZRANGE', queue, 0, -1)
  if line.err then
    return -1
  end
  local count = 0
  for i = 1, #line, 1000 do
    local entries = redis.pcall('HMGET', offers, unpack(line, i, math.min(i + 999, #line)))
    if entries.err then
      return -1
    end
    for j = 1, #entries do
      local deadline = deadline_of(entries[j])
      if deadline and deadline > now_ms then
        count = count + 1
      end
    end
  end
  return count
end
local out = {}
for i = 1, #KEYS, 3 do
  local value = redis.pcall('GET', KEYS[i])
  if not value then
    out[#out + 1] = false
  else
    if type(value) == 'table' then
      value = ''
    end
    local owner, token = holder_of(value)
    out[#out + 1] = {owner, redis.call('PTTL', KEYS[i]), token, in_line(KEYS[i + 1], KEYS[i + 2])}
  end
end
return out
)lua");


// The plain layout's scripts (redis::dialect::plain), over KEYS lock, fence, holder
// (or lock, holder where no token is made). The lock's value is its owner alone,
// so a foreign client's compare-and-delete works on it as on its own; a lock key
// of another type than string, or a value that is no distlock owner, is someone
// else's lock and is left as it is (GET runs through pcall: a key of another type
// reads as held by another, owner unknown (''), never as an error).
inline constexpr char plain_lua[] = R"lua(
local function lock_value(key)
  local value = redis.pcall('GET', key)
  if type(value) == 'table' then
    return ''
  end
  return value
end
local function holder_token(holder_key, value)
  local entry = redis.pcall('GET', holder_key)
  if type(entry) ~= 'string' or string.sub(entry, 1, #value + 1) ~= value .. ':' then
    return 0
  end
  local _, token = holder_of(entry)
  return token
end
)lua";

inline constexpr auto acquire_plain = join(fence_lua, delay_lua, R"lua(
if redis.call('EXISTS', KEYS[1]) == 1 then
  return {0, redis.call('PTTL', KEYS[1])}
end
local delayed = tombstone_left(ARGV[3])
if delayed then
  return {3, delayed}
end
local fence, text = fences_after({KEYS[2]})
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call('SET', KEYS[3], ARGV[1] .. ':' .. text, 'PX', ARGV[2])
store_fences({KEYS[2]}, text)
return {1, fence}
)lua");

inline constexpr auto extend_plain = join(delay_lua, R"lua(
if redis.pcall('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  redis.call('PEXPIRE', KEYS[2], ARGV[2])
  follow_lease(ARGV[3], ARGV[1], ARGV[2])
  return 1
end
return 0
)lua");

// The holder key goes with the lock: while the lock is the owner's, no other grant
// of distlock can have written it.
inline constexpr auto release_plain = join(delay_lua, R"lua(
if redis.pcall('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1], KEYS[2])
  drop_mark(ARGV[4])
  redis.call(ARGV[3] == '1' and 'SPUBLISH' or 'PUBLISH', ARGV[2], 'released')
  return 1
end
return 0
)lua");

inline constexpr auto release_raising_plain = join(fence_lua, raise_fence_lua, R"lua(
local _, higher = raised(KEYS[2], ARGV[3])
local released = 0
if redis.pcall('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1], KEYS[3])
  redis.call(ARGV[4] == '1' and 'SPUBLISH' or 'PUBLISH', ARGV[2], 'released')
  released = 1
end
if higher then
  redis.call('SET', KEYS[2], ARGV[3])
end
return released
)lua");

// A foreign holder has no token: 0 (unknown), as a lock with none reads in the
// default layout.
inline constexpr auto inspect_plain = join(fence_lua, holder_lua, plain_lua, R"lua(
local value = lock_value(KEYS[1])
if not value then
  return {0, '', -2, as_token(redis.call('GET', KEYS[2]) or nil, KEYS[2])}
end
return {1, value, redis.call('PTTL', KEYS[1]), holder_token(KEYS[3], value)}
)lua");

// Only a distlock grant has a token to name, so a foreign holder is never revoked. A
// marked grant leaves its tombstone, as revoke's does.
inline constexpr auto revoke_plain = join(fence_lua, holder_lua, plain_lua, delay_lua, R"lua(
local value = lock_value(KEYS[1])
if not value then
  return 0
end
local token = holder_token(KEYS[3], value)
if token == 0 or string.format('%d', token) ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1], KEYS[3])
tombstone_left(ARGV[4])
redis.call(ARGV[3] == '1' and 'SPUBLISH' or 'PUBLISH', ARGV[2], 'released')
return 1
)lua");

// One page of a listing: KEYS lock, holder of each resource; the answer as survey's
// (no fair queue under this layout: waiters 0). Only distlock's grants are listed:
// a lock whose holder key does not name its owner (a foreign lock taken after
// distlock's grant ended, a holder key someone else wrote) is left out, as a lock
// gone is.
inline constexpr auto survey_plain = join(fence_lua, holder_lua, plain_lua, R"lua(
local out = {}
for i = 1, #KEYS, 2 do
  local value = lock_value(KEYS[i])
  local token = value and holder_token(KEYS[i + 1], value) or 0
  if token == 0 then
    out[#out + 1] = false
  else
    out[#out + 1] = {value, redis.call('PTTL', KEYS[i]), token, 0}
  end
end
return out
)lua");

// An election's value (basic_leader_election), kept as "<token>:<value>" under the
// leader key: proclaim writes it only while the lock is the owner's grant with that
// token, in the same script; leader reads it only when its token is the holder's.
// So a value an earlier grant left behind is never the current leader's, and needs
// no deleting when its grant ends: the next term's proclaim overwrites it.
//
// proclaimed(key, token): the value kept under `key` for the grant with token
// `token` (1 or more); nil when there is none, when it is an earlier grant's, or
// when the key holds something else (another type: read through pcall, as a
// record someone else wrote, never an error).
inline constexpr char proclaimed_lua[] = R"lua(
local function proclaimed(key, token)
  if token == 0 then
    return nil
  end
  local entry = redis.pcall('GET', key)
  local tag = string.format('%d', token) .. ':'
  if type(entry) ~= 'string' or string.sub(entry, 1, #tag) ~= tag then
    return nil
  end
  return string.sub(entry, #tag + 1)
end
)lua";

inline constexpr auto proclaim = join(fence_lua, owns_lua, holder_lua, R"lua(
local value = redis.call('GET', KEYS[1])
if not owns(value, ARGV[1]) then
  return 0
end
local _, token = holder_of(value)
if token == 0 or string.format('%d', token) ~= ARGV[2] then
  return 0
end
redis.call('SET', KEYS[2], ARGV[2] .. ':' .. ARGV[3])
return 1
)lua");

inline constexpr auto leader = join(fence_lua, holder_lua, proclaimed_lua, R"lua(
local value = redis.call('GET', KEYS[1])
if not value then
  return {0}
end
local owner, token = holder_of(value)
local out = {1, owner, redis.call('PTTL', KEYS[1]), token}
out[5] = proclaimed(KEYS[2], token)
return out
)lua");

// Only a distlock grant proclaims: the lock holds the owner alone and its holder key
// names the token.
inline constexpr auto proclaim_plain = join(fence_lua, holder_lua, plain_lua, R"lua(
local value = lock_value(KEYS[1])
if not value or value ~= ARGV[1] then
  return 0
end
local token = holder_token(KEYS[2], value)
if token == 0 or string.format('%d', token) ~= ARGV[2] then
  return 0
end
redis.call('SET', KEYS[3], ARGV[2] .. ':' .. ARGV[3])
return 1
)lua");

// A foreign holder is read as inspect_plain reads it (token 0), with no value.
inline constexpr auto leader_plain = join(fence_lua, holder_lua, plain_lua, proclaimed_lua, R"lua(
local value = lock_value(KEYS[1])
if not value then
  return {0}
end
local token = holder_token(KEYS[2], value)
local out = {1, value, redis.call('PTTL', KEYS[1]), token}
out[5] = proclaimed(KEYS[3], token)
return out
)lua");

// arm_delay: the lock must be the owner's grant with that token ("<owner>:<token>";
// under the plain layout the lock holds the owner and the holder key the rest).
inline constexpr auto arm_delay = join(fence_lua, delay_lua, arm_lua, R"lua(
if redis.call('GET', KEYS[1]) ~= ARGV[1] .. ':' .. ARGV[2] then
  return 0
end
return arm(KEYS[1], ARGV[4], ARGV[1], ARGV[2], ARGV[3])
)lua");

inline constexpr auto arm_delay_plain = join(fence_lua, delay_lua, arm_lua, R"lua(
if redis.pcall('GET', KEYS[1]) ~= ARGV[1] or redis.pcall('GET', KEYS[2]) ~= ARGV[1] .. ':' .. ARGV[2] then
  return 0
end
return arm(KEYS[1], ARGV[4], ARGV[1], ARGV[2], ARGV[3])
)lua");

// fenced_write (below) uses no helper.
inline constexpr auto fenced_write = join(R"lua(
local last = tonumber(redis.call('HGET', KEYS[1], 'fence') or '0')
if tonumber(ARGV[2]) < last then
  return {0, last}
end
redis.call('HSET', KEYS[1], 'fence', ARGV[2], 'value', ARGV[1])
return {1, last}
)lua");

} // namespace detail

/// KEYS: lock, fence. ARGV: owner, ttl ms, the lock-delay mark's key (delay_lua).
/// The fence (an integer) when acquired; {0, pttl} when held by another; {3, ms} when
/// free but in its lock-delay for ms more (every acquiring script answers those two
/// shapes; the others answer a grant as {1, fence}).
inline std::string_view acquire() { return detail::text_of<detail::acquire>(); }

/// KEYS: fence. The next fencing token, without a lock.
inline std::string_view next_fence() { return detail::text_of<detail::next>(); }

/// KEYS: lock. ARGV: owner, ttl ms, mark. 1 when extended (the owner's lock-delay
/// mark with it), 0 when not the owner.
inline std::string_view extend() { return detail::text_of<detail::extend>(); }

/// KEYS: lock. ARGV: owner, channel, '1' for a shard channel (a Redis Cluster) else '0',
/// mark. 1 when released (and published; its lock-delay mark deleted), 0 when not the
/// owner.
inline std::string_view release() { return detail::text_of<detail::release>(); }

/// KEYS: the locks of a set. ARGV: owner, '1' for shard channels (a Redis Cluster)
/// else '0', then each lock's channel, then each lock's mark. For each lock, in order, 1 when released (and
/// published) and 0 when not the owner: the release script over a set, in one step.
inline std::string_view release_all() { return detail::text_of<detail::release_all>(); }

/// KEYS: fence. ARGV: floor. Raises the token to at least floor (a quorum's lease
/// token, which may come from a node whose clock runs ahead); returns its value.
inline std::string_view raise_fence() { return detail::text_of<detail::raise>(); }

/// KEYS: lock, fence. ARGV: owner, channel, floor, '1' for a shard channel (a Redis
/// Cluster) else '0'. The release of a quorum's lease: release, and in the same step
/// raise_fence to the lease's token (on every node, whether or not it still held the
/// lock). 1 when released.
inline std::string_view release_raising() { return detail::text_of<detail::release_raising>(); }

/// KEYS: lock1 ... lockN, then the fence keys of their slots, each once. ARGV: owner,
/// ttl ms, N, then each lock's mark. All or nothing: {1, fence} (the set's one token),
/// {0, index of the held one (1-based), pttl}, or {3, index of one in its lock-delay,
/// ms}.
inline std::string_view acquire_all() { return detail::text_of<detail::acquire_all>(); }

/// acquire::fair. KEYS: lock, fence, queue, offers. ARGV: owner, ttl ms,
/// waiter id, queue ttl ms, try number (from '1'), join ('1': take a place in line
/// when not granted, or keep it until now + queue ttl, and offer to take the lock
/// for ttl when a release hands it over), listener (hex: the id of the waiter's
/// store, whose channel hears the hand-over), mark. Granted only when the lock is free and
/// no one waits or the waiter is the head: {1, fence}; a lock a release handed to the
/// waiter (held with its id as owner): {2, fence, pttl}; the waiter's turn in the
/// resource's lock-delay: {3, ms} (its place kept when it joins); else {0, pttl}.
inline std::string_view acquire_fair() { return detail::text_of<detail::acquire_fair>(); }

/// acquire::fair. KEYS: lock, fence, queue, offers. ARGV: owner, channel,
/// sharded ('1'), mark. Releases the owner's lock and hands it to the head waiter when the
/// head's store listens on the channel its offer names (channel:listener), telling it
/// there; 1 when released, 0 when not the owner.
inline std::string_view release_fair() { return detail::text_of<detail::release_fair>(); }

/// acquire::fair. KEYS: lock, fence, queue, offers. ARGV: waiter id,
/// channel, sharded, mark. Leaves the line and gives back a lock handed to the waiter; a
/// head that leaves a free lock passes it on to the next waiter. Returns 1.
inline std::string_view leave_queue() { return detail::text_of<detail::leave_queue>(); }

/// KEYS: lock, fence, queue, offers. ARGV: fence, channel, sharded ('1' for a Redis
/// Cluster's shard channels), mark. Frees the lock only while it is the grant with that
/// fencing token (a grant marked for a lock-delay leaves its tombstone, and the lock
/// is handed to no one), else passes it on as release_fair does (a listening head of the
/// queue is handed it; no one queued, 'released' is published): 1 when revoked, 0
/// when the lock is free or another grant's, untouched.
inline std::string_view revoke() { return detail::text_of<detail::revoke>(); }

/// KEYS: lock, queue, offers of each resource, in that order (in a Redis Cluster, of
/// one hash slot). For each resource, in order: null when its lock is gone, else
/// {owner, pttl, token, waiters}: the holder as read() reads it, and how many wait in
/// its queue with their place still kept (-1: the queue is not one).
inline std::string_view survey() { return detail::text_of<detail::survey>(); }

/// shared_lease_store. KEYS (every shared script): lock, fence, sharers, intent; the
/// last ARGV of each is the mark. ARGV: owner, ttl ms, permits (0: a shared mutex's
/// reader; N: a semaphore of N), mark.
/// {1, fence} for a reader, {1, fence, slot} for a permit (the lowest number no live
/// holder has); {0, pttl} held (pttl: the exclusive holder's, or the first permit's
/// to run out; -2 when a writer's intent keeps a reader out); {-1, N} refused: the
/// holders share another count N (-1 when the store does not say); {3, ms} in the
/// resource's lock-delay.
inline std::string_view put_shared() { return detail::text_of<detail::put_shared>(); }

/// ARGV: waiter id, owner, ttl ms, mark. {1, fence} granted; {0, pttl} held (-2: by
/// readers, or by another waiter's intent), or {3, ms} in the resource's lock-delay,
/// the waiter's intent taken or renewed unless another's lives; {-1, N} refused: a
/// semaphore's permits are held.
inline std::string_view put_exclusive() { return detail::text_of<detail::put_exclusive>(); }

/// ARGV: owner, ttl ms, mark. 1 when the owner's grant, exclusive or shared, was extended;
/// 0 when it holds none.
inline std::string_view extend_shared() { return detail::text_of<detail::extend_shared>(); }

/// ARGV: owner, channel, '1' for a shard channel (a Redis Cluster) else '0', mark. 1
/// when the owner's grant, exclusive or shared, was released (and published); 0 when it
/// holds none.
inline std::string_view release_shared() { return detail::text_of<detail::release_shared>(); }

/// ARGV: waiter id, channel, sharded. Drops the waiter's intent when it is still
/// there (and publishes, so readers kept out come in). Returns 1.
inline std::string_view withdraw() { return detail::text_of<detail::withdraw>(); }

/// ARGV: owner, channel, sharded, mark. The exclusive holder becomes a reader with its
/// token and time left (and it is published): 1; 0 when it does not hold.
inline std::string_view downgrade() { return detail::text_of<detail::downgrade>(); }

/// KEYS: data. ARGV: value, fence. Writes the hash {value, fence} unless a newer
/// fence has written: {1, previous fence} when written, {0, newest fence} when rejected.
inline std::string_view fenced_write() { return detail::text_of<detail::fenced_write>(); }

/// KEYS: lock, fence. {held (1 or 0), owner, pttl, token}: read without taking the
/// lock; the token is the holder's when held (0 when the lock does not say), else the
/// last token stored under the fence key.
inline std::string_view inspect() { return detail::text_of<detail::inspect>(); }

/// redis::dialect::plain. KEYS: lock (the resource id), fence, holder. ARGV: owner,
/// ttl ms, mark. {1, fence} when acquired (the lock holds the owner alone); as acquire,
/// {0, pttl} when held, by distlock or another Redlock client.
inline std::string_view acquire_plain() { return detail::text_of<detail::acquire_plain>(); }

/// redis::dialect::plain. KEYS: lock, holder. ARGV: owner, ttl ms, mark. 1 when extended
/// (compare-and-pexpire), 0 when not the owner.
inline std::string_view extend_plain() { return detail::text_of<detail::extend_plain>(); }

/// redis::dialect::plain. KEYS: lock, holder. ARGV: owner, channel, '1' for a shard
/// channel (a Redis Cluster) else '0', mark. Compare-and-delete: 1 when released (and
/// published), 0 when not the owner.
inline std::string_view release_plain() { return detail::text_of<detail::release_plain>(); }

/// redis::dialect::plain. KEYS: lock, fence, holder. ARGV: owner, channel, floor,
/// sharded. release_raising under this layout.
inline std::string_view release_raising_plain() { return detail::text_of<detail::release_raising_plain>(); }

/// redis::dialect::plain. KEYS: lock, fence, holder. As inspect: {held, owner, pttl,
/// token}; the owner is the lock's value (a foreign client's own value; empty for a
/// key that is not a string), the token 0 for a holder that is not distlock's.
inline std::string_view inspect_plain() { return detail::text_of<detail::inspect_plain>(); }

/// redis::dialect::plain. KEYS: lock, fence, holder. ARGV: fence, channel, sharded,
/// mark. As revoke, for distlock's grants only: 1 when revoked, else 0.
inline std::string_view revoke_plain() { return detail::text_of<detail::revoke_plain>(); }

/// redis::dialect::plain. KEYS: lock, holder of each resource. As survey (waiters 0),
/// distlock's grants only: null for a lock its holder key does not name.
inline std::string_view survey_plain() { return detail::text_of<detail::survey_plain>(); }

/// electing_store. KEYS: lock, leader. ARGV: owner, token (decimal), value. Writes
/// "<token>:<value>" under the leader key only while the lock is the owner's grant
/// with that token: 1 when written, 0 when the grant is gone (nothing written).
inline std::string_view proclaim() { return detail::text_of<detail::proclaim>(); }

/// electing_store. KEYS: lock, leader. {0} when the lock is free; else {1, owner,
/// pttl, token} as inspect reads the holder, with a fifth element, the value, when
/// the leader key keeps one for that very token.
inline std::string_view leader() { return detail::text_of<detail::leader>(); }

/// redis::dialect::plain. KEYS: lock, holder, leader. ARGV and answer as proclaim,
/// for distlock's grants only.
inline std::string_view proclaim_plain() { return detail::text_of<detail::proclaim_plain>(); }

/// redis::dialect::plain. KEYS: lock, holder, leader. As leader; the owner is the
/// lock's value, the token 0 (and no value) for a holder that is not distlock's.
inline std::string_view leader_plain() { return detail::text_of<detail::leader_plain>(); }

/// lock_delay_store. KEYS: lock. ARGV: owner, token (decimal), delay ms, mark. Marks
/// the grant when the lock is the owner's with that token: 1; else 0, nothing
/// written. An error reply when the mark cannot be written.
inline std::string_view arm_delay() { return detail::text_of<detail::arm_delay>(); }

/// redis::dialect::plain. KEYS: lock, holder. ARGV and answer as arm_delay.
inline std::string_view arm_delay_plain() { return detail::text_of<detail::arm_delay_plain>(); }

} // namespace distlock::redis::scripts
