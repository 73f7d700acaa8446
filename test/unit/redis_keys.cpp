// The Redis store's key layout (redis/detail/keys.hpp), without a server: the keys a
// foreign client or an operator sees, escaping, hash tags and the slot's fence key.
// test/fuzz/key_layouts.cpp checks that the layout is injective.
#include <distlock/redis/detail/keys.hpp>

#include <catch2/catch.hpp>

#include <string>

using distlock::redis::detail::key_layout;

TEST_CASE("redis keys: <prefix>:{#<id>}:<kind>, the id one hash tag", "[redis_keys]")
{
    const key_layout keys{"distlock", false};
    CHECK(keys.key("wallet:1", "lock") == "distlock:{#wallet:1}:lock");
    CHECK(keys.key("wallet:1", "queue") == "distlock:{#wallet:1}:queue");
    // Every kind of one resource hashes to the same slot (one script touches them all).
    CHECK(distlock::redis::detail::hash_slot(keys.key("r", "lock")) ==
          distlock::redis::detail::hash_slot(keys.key("r", "offers")));
}

TEST_CASE("redis keys: '%', '{' and '}' are percent-encoded in the prefix and the id", "[redis_keys]")
{
    CHECK(key_layout{"distlock", false}.key("a%{b}", "queue") == "distlock:{#a%25%7Bb%7D}:queue");
    // Without the escaping, prefix "a" with id "b:{#c" and prefix "a:{#b" with id "c"
    // would share one key.
    const auto one = key_layout{"a", false}.key("b:{#c", "lock");
    const auto other = key_layout{"a:{#b", false}.key("c", "lock");
    CHECK(other == "a:%7B#b:{#c}:lock");
    CHECK(one != other);
}

TEST_CASE("redis keys: with hash_tags, an id's own tag picks the slot and the whole id follows", "[redis_keys]")
{
    const key_layout tagged{"app", true};
    CHECK(tagged.key("{user7}:cart", "lock") == "app:{@user7}%7Buser7%7D:cart:lock");
    CHECK(distlock::redis::detail::hash_slot(tagged.key("{user7}:cart", "lock")) ==
          distlock::redis::detail::hash_slot(tagged.key("{user7}:orders", "lock")));
    // An id without a tag keeps the untagged layout; an empty tag is no tag.
    CHECK(tagged.key("plain", "lock") == "app:{#plain}:lock");
    CHECK(tagged.key("{}x", "lock") == key_layout{"app", false}.key("{}x", "lock"));
    // Without hash_tags the braces are escaped like any other.
    CHECK(key_layout{"app", false}.key("{user7}:cart", "lock") == "app:{#%7Buser7%7D:cart}:lock");
}

TEST_CASE("redis keys: a slot's fence key carries a tag of that slot", "[redis_keys]")
{
    const key_layout keys{"distlock", false};
    for (const std::uint16_t slot : {std::uint16_t{0}, std::uint16_t{1}, std::uint16_t{8191}, std::uint16_t{16383}}) {
        const auto k = keys.fence_key_of_slot(slot);
        CHECK(k.starts_with("distlock:{"));
        CHECK(k.ends_with("}:fence"));
        CHECK(distlock::redis::detail::hash_slot(k) == slot);
    }
}

TEST_CASE("redis keys: a resource's shared holders and writer's intent live beside its lock, in its slot",
          "[redis_keys]")
{
    using distlock::redis::detail::hash_slot;
    for (const bool tags : {false, true}) {
        const key_layout keys{"app", tags};
        for (const std::string id : {"wallet:1", "{user7}:cart", "a%{b}"}) {
            const auto lock = keys.key(id, "lock");
            const auto slot = hash_slot(lock);
            for (const std::string_view kind : {"sharers", "intent"}) {
                const auto k = keys.key(id, kind);
                CHECK(hash_slot(k) == slot);
                // Never the lock, queue or offers key of any id: a listing of locks
                // skips it, and reads it back only as its own kind.
                CHECK_FALSE(keys.resource_of(k, "lock"));
                CHECK_FALSE(keys.resource_of(k, "queue"));
                CHECK_FALSE(keys.resource_of(k, "offers"));
                CHECK(keys.resource_of(k, kind) == id);
            }
            CHECK(hash_slot(keys.fence_key_of_slot(slot)) == slot);
        }
    }
    CHECK(key_layout{"distlock", false}.key("job", "sharers") == "distlock:{#job}:sharers");
    CHECK(key_layout{"distlock", false}.key("job", "intent") == "distlock:{#job}:intent");
}

TEST_CASE("redis keys: an election's value lives beside its lock, in its slot, in both layouts", "[redis_keys]")
{
    using distlock::redis::detail::hash_slot;
    CHECK(key_layout{"distlock", false}.leader_key("vote") == "distlock:{#vote}:leader");
    for (const bool tags : {false, true}) {
        const key_layout keys{"app", tags};
        const key_layout plain{"app", tags, true};
        for (const std::string id : {"vote", "{user7}:cart", "a%{b}", "x{}y"}) {
            const auto k = keys.leader_key(id);
            CHECK(hash_slot(k) == hash_slot(keys.lock_key(id)));
            CHECK(keys.resource_of(k, "leader") == id);
            CHECK_FALSE(keys.resource_of(k, "lock"));
            // Under the plain layout: beside the id's own key, in the id's slot.
            const auto p = plain.leader_key(id);
            CHECK(hash_slot(p) == hash_slot(id));
            CHECK(plain.resource_beside(p, "leader") == id);
            CHECK_FALSE(plain.resource_beside(p, "holder"));
            CHECK(plain.reserved(p)); // no id can be it
        }
    }
}

TEST_CASE("redis keys: a lock-delay's mark lives beside its lock, in its slot, in both layouts", "[redis_keys]")
{
    using distlock::redis::detail::hash_slot;
    CHECK(key_layout{"distlock", false}.delay_key("ledger") == "distlock:{#ledger}:delay");
    for (const bool tags : {false, true}) {
        const key_layout keys{"app", tags};
        const key_layout plain{"app", tags, true};
        for (const std::string id : {"ledger", "{user7}:cart", "a%{b}", "x{}y"}) {
            // The scripts name it in their arguments: only its slot makes it reachable.
            const auto k = keys.delay_key(id);
            CHECK(hash_slot(k) == hash_slot(keys.lock_key(id)));
            CHECK(keys.resource_of(k, "delay") == id);
            CHECK_FALSE(keys.resource_of(k, "lock"));
            const auto p = plain.delay_key(id);
            CHECK(hash_slot(p) == hash_slot(id));
            CHECK(plain.resource_beside(p, "delay") == id);
            CHECK(plain.reserved(p));
        }
    }
}
