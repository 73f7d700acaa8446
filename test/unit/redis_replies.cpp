// The Redis store's reply decoders (redis/detail/replies.hpp), without a server: each
// script's answer decodes to the primitive's result, and every other shape (a wrong
// type, a missing element, a value out of range) is errc::protocol_error.
#include <distlock/redis/detail/replies.hpp>

#include <catch2/catch.hpp>

#include <chrono>
#include <string>
#include <vector>

namespace dl = distlock;
namespace replies = distlock::redis::detail::replies;
using distlock::redis::resp::type;
using distlock::redis::resp::value;

namespace {
value integer(std::int64_t n) { return {type::integer, {}, n, {}}; }
value bulk(std::string s) { return {type::bulk_string, std::move(s), 0, {}}; }
value array(std::vector<value> e) { return {type::array, {}, 0, std::move(e)}; }
value error(std::string s) { return {type::error, std::move(s), 0, {}}; }
value null() { return {}; }
} // namespace

TEST_CASE("redis replies: an error reply is refused, credentials apart, with the server's words", "[redis_replies]")
{
    dl::diagnostics diag;
    CHECK(replies::checked(error("READONLY You can't write against a read only replica."), &diag).error() ==
          dl::errc::store_unavailable);
    CHECK(diag.server_message() == "READONLY You can't write against a read only replica.");
    CHECK(replies::checked(error("NOAUTH Authentication required."), nullptr).error() == dl::errc::auth_failed);
    CHECK(replies::checked(error("WRONGPASS invalid username-password pair"), nullptr).error() == dl::errc::auth_failed);
    CHECK(replies::checked(integer(1), &diag).value().integer == 1);
}

TEST_CASE("redis replies: the acquire script's fence, the other scripts' {1, fence}, and {0, pttl}", "[redis_replies]")
{
    CHECK(replies::acquired(integer(42)).value() == 42);
    CHECK(replies::acquired(array({integer(1), integer(42)})).value() == 42);
    std::optional<dl::duration> held_for;
    CHECK(replies::acquired(array({integer(0), integer(1500)}), &held_for).error() == dl::errc::contended);
    CHECK(held_for == std::chrono::milliseconds{1500});
    held_for.reset();
    CHECK(replies::acquired(array({integer(0), integer(-2)}), &held_for).error() == dl::errc::contended);
    CHECK_FALSE(held_for); // gone since: no time to tell
    // Shapes no acquire script answers.
    CHECK(replies::acquired(array({integer(1), integer(0)})).error() == dl::errc::protocol_error);
    CHECK(replies::acquired(array({integer(1), bulk("42")})).error() == dl::errc::protocol_error);
    CHECK(replies::acquired(array({integer(1)})).error() == dl::errc::protocol_error);
    CHECK(replies::acquired(integer(0)).error() == dl::errc::protocol_error);
    CHECK(replies::acquired(integer(-1)).error() == dl::errc::protocol_error);
    CHECK(replies::acquired(null()).error() == dl::errc::protocol_error);
}

TEST_CASE("redis replies: an answer measures the holder's time from the request", "[redis_replies]")
{
    const auto sent = dl::clock::now();
    const auto held = replies::answered(array({integer(0), integer(250)}), sent).value();
    CHECK_FALSE(held.is_granted());
    CHECK(held.not_before() == sent + std::chrono::milliseconds{250});
    CHECK(replies::answered(array({integer(1), integer(7)}), sent).value().fence() == 7);
    CHECK(replies::answered(integer(7), sent).value().fence() == 7);
    CHECK(replies::answered(array({bulk("1"), integer(7)}), sent).error() == dl::errc::protocol_error);
}

TEST_CASE("redis replies: a fair answer's hand-over {2, fence, pttl}", "[redis_replies]")
{
    const auto sent = dl::clock::now();
    const auto waiter = dl::owner_token::generate();
    const auto ttl = std::chrono::seconds{10};
    const auto handed = replies::answered_fair(array({integer(2), integer(9), integer(8000)}), sent, waiter, ttl);
    REQUIRE(handed);
    CHECK(handed.value().fence() == 9);
    CHECK(handed.value().holder() == waiter);
    // 8 s left of a 10 s TTL: its validity counts from 2 s before the request.
    CHECK(handed.value().counted_from() == sent - std::chrono::seconds{2});
    CHECK(replies::answered_fair(array({integer(2), integer(0), integer(8000)}), sent, waiter, ttl).error() ==
          dl::errc::protocol_error);
    CHECK(replies::answered_fair(array({integer(2), integer(9), bulk("x")}), sent, waiter, ttl).error() ==
          dl::errc::protocol_error);
    CHECK(replies::answered_fair(array({integer(1), integer(3)}), sent, waiter, ttl).value().fence() == 3);
}

TEST_CASE("redis replies: owner-checked scripts, counters, leave_queue", "[redis_replies]")
{
    CHECK(replies::owned(integer(1)));
    CHECK(replies::owned(integer(0)).error() == dl::errc::not_owner);
    CHECK(replies::owned(bulk("1")).error() == dl::errc::protocol_error);
    CHECK(replies::fence(integer(12)).value() == 12);
    CHECK(replies::fence(integer(-1)).error() == dl::errc::protocol_error);
    CHECK(replies::fence(array({})).error() == dl::errc::protocol_error);
    CHECK(replies::done(integer(1)));
    CHECK(replies::done(integer(0)).error() == dl::errc::protocol_error);
}

TEST_CASE("redis replies: inspect's {held, owner, pttl, token}", "[redis_replies]")
{
    const auto info = replies::inspected(array({integer(1), bulk("0123456789abcdef"), integer(900), integer(5)})).value();
    CHECK(info.held);
    CHECK(info.owner == "01234567");
    CHECK(info.remaining == std::chrono::milliseconds{900});
    CHECK(info.fence == 5);
    const auto free = replies::inspected(array({integer(0), bulk(""), integer(-2), integer(5)})).value();
    CHECK_FALSE(free.held);
    CHECK(free.fence == 5);
    CHECK(replies::inspected(array({integer(2), bulk(""), integer(0), integer(5)})).error() == dl::errc::protocol_error);
    CHECK(replies::inspected(array({integer(1), integer(3), integer(0), integer(5)})).error() == dl::errc::protocol_error);
    CHECK(replies::inspected(array({integer(1), bulk("x"), integer(0)})).error() == dl::errc::protocol_error);
}

TEST_CASE("redis replies: the leader script's {0} and {1, owner, pttl, token[, value]}", "[redis_replies]")
{
    const auto free = replies::led(array({integer(0)})).value();
    CHECK(free.epoch == 0);
    CHECK(free.owner.empty());
    CHECK_FALSE(free.value);
    CHECK_FALSE(free.remaining);
    const auto unsaid = replies::led(array({integer(1), bulk("0123456789abcdef"), integer(900), integer(5)})).value();
    CHECK(unsaid.epoch == 5);
    CHECK(unsaid.owner == "01234567");
    CHECK(unsaid.remaining == std::chrono::milliseconds{900});
    CHECK_FALSE(unsaid.value);
    const std::string binary{"a\0b", 3};
    const auto said =
        replies::led(array({integer(1), bulk("0123456789abcdef"), integer(-1), integer(5), bulk(binary)})).value();
    CHECK(said.value == std::optional<std::string>{binary});
    CHECK_FALSE(said.remaining); // no TTL (-1): none to tell
    // A holder without a token: held by someone, leading no term, with no value.
    const auto foreign = replies::led(array({integer(1), bulk("someone"), integer(900), integer(0)})).value();
    CHECK(foreign.epoch == 0);
    CHECK(foreign.owner == "someone");
    // Every other shape.
    for (const auto& bad : {integer(0), bulk("x"), null(), error("ERR x"), array({}), array({bulk("0")}),
                            array({integer(0), integer(0)}), array({integer(2), bulk("o"), integer(1), integer(5)}),
                            array({integer(-1)}), array({integer(1), bulk("o"), integer(1)}),
                            array({integer(1), integer(3), integer(1), integer(5)}),
                            array({integer(1), bulk("o"), bulk("1"), integer(5)}),
                            array({integer(1), bulk("o"), integer(1), integer(-5)}),
                            array({integer(1), bulk("o"), integer(1), bulk("5")}),
                            array({integer(1), bulk("o"), integer(1), integer(5), integer(7)}),
                            array({integer(1), bulk("o"), integer(1), integer(5), null()}),
                            array({integer(1), bulk("o"), integer(1), integer(0), bulk("v")}),
                            array({integer(1), bulk("o"), integer(1), integer(5), bulk("v"), bulk("w")}),
                            array({integer(1), bulk("o"), integer(1), integer(5), array({bulk("v")})})}) {
        INFO(replies::described(bad));
        CHECK(replies::led(bad).error() == dl::errc::protocol_error);
    }
}

TEST_CASE("redis replies: sets, fenced writes, reads and WAIT", "[redis_replies]")
{
    CHECK(replies::acquired_all(array({integer(1), integer(4)}), 3).value() == std::vector<dl::fence_token>{4, 4, 4});
    CHECK(replies::acquired_all(array({integer(0)}), 3).error() == dl::errc::contended);
    CHECK(replies::acquired_all(array({integer(1)}), 3).error() == dl::errc::protocol_error);
    CHECK(replies::acquired_all(array({}), 3).error() == dl::errc::protocol_error);
    CHECK(replies::released_all(array({integer(1), integer(0)}), 2).value() == std::vector<bool>{true, false});
    CHECK(replies::released_all(array({integer(1)}), 2).error() == dl::errc::protocol_error);
    CHECK(replies::released_all(array({integer(1), integer(2)}), 2).error() == dl::errc::protocol_error);
    CHECK(replies::fenced_written(array({integer(1), integer(3)})));
    CHECK(replies::fenced_written(array({integer(0), integer(3)})).error() == dl::errc::stale_fence);
    CHECK(replies::fenced_written(integer(1)).error() == dl::errc::protocol_error);
    CHECK(replies::value_read(bulk("v")).value() == std::optional<std::string>{"v"});
    CHECK_FALSE(replies::value_read(null()).value());
    CHECK(replies::value_read(integer(1)).error() == dl::errc::protocol_error);
    CHECK(replies::replicas(integer(2)).value() == 2);
    CHECK(replies::replicas(bulk("2")).error() == dl::errc::protocol_error);
}

TEST_CASE("redis replies: shared grants' {1, fence[, slot]}, {0, pttl} and {-1, count}", "[redis_replies]")
{
    const auto sent = dl::clock::now();
    // A reader or a writer: {1, fence}; a permit of 3: {1, fence, slot below 3}.
    const auto reader = replies::answered_shared(array({integer(1), integer(7)}), sent, 0).value();
    CHECK(reader.is_granted());
    CHECK(reader.fence() == 7);
    CHECK_FALSE(reader.slot());
    const auto permit = replies::answered_shared(array({integer(1), integer(8), integer(2)}), sent, 3).value();
    CHECK(permit.fence() == 8);
    CHECK(permit.slot() == 2u);
    // Held: until when, measured from the request; without a time when none is told.
    const auto held = replies::answered_shared(array({integer(0), integer(400)}), sent, 3).value();
    CHECK_FALSE(held.is_granted());
    CHECK(held.not_before() == sent + std::chrono::milliseconds{400});
    CHECK_FALSE(replies::answered_shared(array({integer(0), integer(-2)}), sent, 0).value().not_before());
    // Another count: invalid_argument, and the holders' count.
    std::optional<std::int64_t> held_with;
    CHECK(replies::answered_shared(array({integer(-1), integer(2)}), sent, 3, &held_with).error() ==
          dl::errc::invalid_argument);
    CHECK(held_with == 2);
    held_with.reset();
    CHECK(replies::answered_shared(array({integer(-1), integer(-1)}), sent, 0, &held_with).error() ==
          dl::errc::invalid_argument);
    CHECK(held_with == -1);
    // Shapes no shared script answers: a reader's grant with a slot, a permit's
    // without one or with one out of range, a fence below 1, other codes and types.
    for (const auto& v : {array({integer(1), integer(7), integer(0)}), array({integer(1), integer(0)}),
                          array({integer(1), bulk("7")}), array({integer(0)}), array({integer(0), bulk("1")}),
                          array({integer(-1), integer(-2)}), array({integer(-1)}), array({integer(2), integer(7)}),
                          array({bulk("1"), integer(7)}), array({}), integer(1), null(), bulk("OK")})
        CHECK(replies::answered_shared(v, sent, 0).error() == dl::errc::protocol_error);
    for (const auto& v : {array({integer(1), integer(7)}), array({integer(1), integer(7), integer(3)}),
                          array({integer(1), integer(7), integer(-1)}), array({integer(1), integer(7), bulk("0")}),
                          array({integer(1), integer(7), integer(0), integer(0)})})
        CHECK(replies::answered_shared(v, sent, 3).error() == dl::errc::protocol_error);
}

TEST_CASE("redis replies: a lock-delay's {3, ms} from every acquiring script", "[redis_replies]")
{
    const auto sent = dl::clock::now();
    // The fence-only primitive: errc::lock_delayed, and how long.
    std::optional<dl::duration> delayed_for;
    CHECK(replies::acquired(array({integer(3), integer(1200)}), nullptr, &delayed_for).error() ==
          dl::errc::lock_delayed);
    CHECK(delayed_for == std::chrono::milliseconds{1200});
    // An answer: delayed until the tombstone's end, measured from the request, for a
    // mutex, a fair waiter, a reader and a writer alike.
    const auto owner = dl::owner_token::generate();
    for (const auto& a : {replies::answered(array({integer(3), integer(1200)}), sent),
                          replies::answered_fair(array({integer(3), integer(1200)}), sent, owner, std::chrono::seconds{10}),
                          replies::answered_shared(array({integer(3), integer(1200)}), sent, 0),
                          replies::answered_shared(array({integer(3), integer(1200)}), sent, 2)}) {
        REQUIRE(a);
        CHECK_FALSE(a.value().is_granted());
        CHECK(a.value().is_delayed());
        CHECK(a.value().not_before() == sent + std::chrono::milliseconds{1200});
    }
    // A set: {3, index, ms}, the index within the set.
    CHECK(replies::acquired_all(array({integer(3), integer(2), integer(500)}), 3).error() == dl::errc::lock_delayed);
    // Shapes no script answers: no time left, a time that is not an integer, an extra
    // element; for a set, an index outside it or a missing time.
    for (const auto& v : {array({integer(3), integer(0)}), array({integer(3), integer(-2)}),
                          array({integer(3), bulk("1200")}), array({integer(3), integer(5), integer(1)}),
                          array({integer(3)})}) {
        CHECK(replies::acquired(v).error() == dl::errc::protocol_error);
        CHECK(replies::answered(v, sent).error() == dl::errc::protocol_error);
        CHECK(replies::answered_shared(v, sent, 0).error() == dl::errc::protocol_error);
    }
    for (const auto& v : {array({integer(3), integer(0), integer(500)}), array({integer(3), integer(4), integer(500)}),
                          array({integer(3), integer(1), integer(0)}), array({integer(3), integer(1)}),
                          array({integer(3), integer(1), bulk("500")})})
        CHECK(replies::acquired_all(v, 3).error() == dl::errc::protocol_error);
}
