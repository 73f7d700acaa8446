// The PostgreSQL store's answer decoders (postgres/detail/answers.hpp), without a
// server: each statement's result decodes to the primitive's result, and any other
// shape is errc::protocol_error. A plain table stands in for libpq's result.
#include <distlock/postgres/detail/answers.hpp>

#include <catch2/catch.hpp>

#include <charconv>
#include <chrono>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

namespace dl = distlock;
namespace answers = distlock::postgres::detail::answers;

namespace {
// Rows of text cells (nullopt: NULL) and the command's count of changed rows.
struct table {
    std::vector<std::vector<std::optional<std::string>>> cells;
    std::uint64_t changed = 0;

    int count() const { return static_cast<int>(cells.size()); }
    // libpq's rows are all as wide as the result: the first row's width stands for it.
    int columns() const { return cells.empty() ? 0 : static_cast<int>(cells.front().size()); }
    bool null(int row, int col) const
    {
        return row >= count() || col >= static_cast<int>(cells[row].size()) || !cells[row][col];
    }
    std::string_view text(int row, int col) const { return null(row, col) ? std::string_view{} : *cells[row][col]; }
    std::optional<std::int64_t> integer(int row, int col) const
    {
        const auto t = text(row, col);
        std::int64_t v = 0;
        const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
        if (t.empty() || ec != std::errc{} || end != t.data() + t.size())
            return std::nullopt;
        return v;
    }
    std::uint64_t affected() const { return changed; }
};
static_assert(answers::table<table>);
const std::nullopt_t null_cell = std::nullopt;
} // namespace

TEST_CASE("postgres answers: acquire's (fence, null) or (null, left)", "[postgres_answers]")
{
    const auto now = dl::clock::now();
    CHECK(answers::acquired(table{{{"12", null_cell}}}, now).value().fence() == 12);
    const auto held = answers::acquired(table{{{null_cell, "300"}}}, now).value();
    CHECK_FALSE(held.is_granted());
    CHECK(held.not_before() == now + std::chrono::milliseconds{300});
    CHECK_FALSE(answers::acquired(table{{{null_cell, null_cell}}}, now).value().not_before());
    CHECK(answers::acquired(table{{{"0", null_cell}}}, now).error() == dl::errc::protocol_error);
    CHECK(answers::acquired(table{}, now).error() == dl::errc::protocol_error);
    CHECK(answers::acquired(table{{{"1", null_cell}, {"2", null_cell}}}, now).error() == dl::errc::protocol_error);
    CHECK(answers::granted_fence(dl::answer::held()).error() == dl::errc::contended);
    CHECK(answers::granted_fence(dl::answer::granted(4)).value() == 4);
}

TEST_CASE("postgres answers: an advisory try's (fence, null, delay left, unlocked, recorded); a fence or a time "
          "that is no number is not read as held",
          "[postgres_answers]")
{
    using row = std::vector<std::optional<std::string>>;
    const auto now = dl::clock::now();
    const auto decode = [&](row r) { return answers::acquired(table{{std::move(r)}}, now, true); };
    CHECK(decode({"9", null_cell, null_cell, "0", "1"}).value().fence() == 9);
    const auto delayed = decode({null_cell, null_cell, "1500", "1", "1"}).value();
    CHECK(delayed.is_delayed());
    CHECK_FALSE(delayed.is_granted());
    CHECK(delayed.not_before() == now + std::chrono::milliseconds{1500});
    const auto held = decode({null_cell, null_cell, null_cell, "0", "1"}).value();
    CHECK_FALSE(held.is_granted());
    CHECK_FALSE(held.is_delayed());
    CHECK_FALSE(held.not_before());
    // A tombstone that ran out between the statement's reading and its answer: held,
    // to be asked again at once.
    for (const char* gone : {"0", "-3"}) {
        const auto a = decode({null_cell, null_cell, gone, "1", "1"}).value();
        CHECK_FALSE(a.is_delayed());
        CHECK_FALSE(a.not_before());
    }
    // The largest bigint is capped, not added to the clock whole (it would overflow).
    const auto far = decode({null_cell, null_cell, "9223372036854775807", "1", "1"}).value();
    CHECK(far.is_delayed());
    CHECK(far.not_before() == now + std::chrono::milliseconds{std::int64_t{1} << 40});
    const auto far_held = decode({null_cell, "9223372036854775807", null_cell, "0", "0"}).value();
    CHECK(far_held.not_before() == now + std::chrono::milliseconds{std::int64_t{1} << 40});

    const std::vector<row> bad{
        {"0", null_cell, null_cell, "0", "1"},                 // fence 0
        {"-2", null_cell, null_cell, "0", "1"},                // a negative fence
        {"x", null_cell, null_cell, "0", "1"},                 // a fence that is no number
        {"", null_cell, null_cell, "0", "1"},                  // an empty fence
        {"1e3", null_cell, null_cell, "0", "1"},               // not an integer
        {"9223372036854775808", null_cell, null_cell, "0", "1"}, // beyond a bigint
        {null_cell, null_cell, "soon", "1", "1"},              // a delay that is no number
        {null_cell, "soon", null_cell, "0", "1"},              // a time left that is no number
        {null_cell, null_cell},                                // short of the delay column
        {}};                                                   // no columns
    for (const auto& r : bad) {
        INFO(r.size() << " columns, first " << (r.empty() ? "-" : r[0].value_or("NULL")));
        const auto got = decode(r);
        CHECK((!got && got.error() == dl::errc::protocol_error));
    }
    CHECK(answers::acquired(table{}, now, true).error() == dl::errc::protocol_error);
    CHECK(answers::acquired(table{{{"1", null_cell, null_cell, "0", "1"}, {"2", null_cell, null_cell, "0", "1"}}}, now,
                            true)
              .error() == dl::errc::protocol_error);
}

TEST_CASE("postgres answers: advisory leader's (holders, named, fence, owner, value, lease fence): a named holder "
          "leads with its record, an unnamed one is pending with the next fence",
          "[postgres_answers]")
{
    using row = std::vector<std::optional<std::string>>;
    const auto decode = [](row r, std::string* problem = nullptr) {
        return answers::advisory_leader_read(table{{std::move(r)}}, problem);
    };
    // Nobody holds the key: nobody leads, whatever a record left.
    for (const auto& r : std::vector<row>{{"0", "0", null_cell, null_cell, null_cell, null_cell},
                                          {"0", "0", "7", "abcdef0123456789", "61", "7"}}) {
        const auto free = decode(r);
        REQUIRE(free);
        CHECK(free->epoch == 0);
        CHECK(free->owner.empty());
        CHECK_FALSE(free->value);
        CHECK_FALSE(free->remaining);
    }
    // Held, the record not naming the holder: pending, the next fence, no value (a
    // record's value is an earlier grant's).
    const auto first = decode({"1", "0", null_cell, null_cell, null_cell, null_cell});
    REQUIRE(first);
    CHECK(first->epoch == 1);
    const auto pending = decode({"1", "0", "7", "abcdef0123456789", "61", "9"});
    REQUIRE(pending);
    CHECK(pending->epoch == 10);
    CHECK(pending->owner.empty());
    CHECK_FALSE(pending->value);
    const auto last = decode({"1", "0", null_cell, null_cell, null_cell, "9223372036854775806"});
    REQUIRE(last);
    CHECK(last->epoch == dl::fence_token{9223372036854775807ULL});
    // Named: the record's grant leads, with its value once proclaimed.
    const auto named = decode({"1", "1", "7", "abcdef0123456789", null_cell, "8"});
    REQUIRE(named);
    CHECK(named->epoch == 7);
    CHECK(named->owner == "abcdef01");
    CHECK_FALSE(named->value);
    CHECK_FALSE(named->remaining); // the term lasts as long as its session
    const auto with_value = decode({"1", "1", "7", "abcdef0123456789", "610062", "7"});
    REQUIRE(with_value);
    CHECK(with_value->value == std::optional<std::string>{std::string{"a\0b", 3}});
    const auto empty_value = decode({"1", "1", "7", "ab", "", "7"});
    REQUIRE(empty_value);
    CHECK(empty_value->value == std::optional<std::string>{""});
    const auto largest = decode({"1", "1", "9223372036854775807", "ab", std::string(2 * dl::max_leader_value_size, 'f'),
                                 "9223372036854775807"});
    REQUIRE(largest);
    CHECK(largest->epoch == dl::fence_token{9223372036854775807ULL});
    CHECK(largest->value->size() == dl::max_leader_value_size);

    const std::vector<row> bad{
        {"0", "0", null_cell, null_cell, null_cell},                       // five columns
        {"1", "1", "7", "ab", null_cell},                                  // five: the value would read as unproclaimed
        {"1", "0", null_cell, null_cell, null_cell},                       // five: the lease fence would read as none
        {"1", "1", "7", "ab", "61", "7", "extra"},                         // seven columns
        {},                                                                // none
        {null_cell, "0", null_cell, null_cell, null_cell, null_cell},      // no holder count
        {"x", "0", null_cell, null_cell, null_cell, null_cell},            // a count that is no number
        {"-1", "0", null_cell, null_cell, null_cell, null_cell},           // a negative count
        {"2", "0", null_cell, null_cell, null_cell, null_cell},            // two exclusive holders
        {"99999999999999999999", "0", null_cell, null_cell, null_cell, null_cell}, // beyond a bigint
        {"1", null_cell, "7", "ab", null_cell, "7"},                       // no named flag
        {"1", "2", "7", "ab", null_cell, "7"},                             // a flag that is not 0 or 1
        {"1", "-1", "7", "ab", null_cell, "7"},                            // a negative flag
        {"1", "yes", "7", "ab", null_cell, "7"},                           // a flag that is no number
        {"0", "1", "7", "ab", null_cell, "7"},                             // names a holder that is not there
        {"1", "0", null_cell, null_cell, null_cell, "-1"},                 // a negative lease fence
        {"1", "0", null_cell, null_cell, null_cell, "seven"},              // a lease fence that is no number
        {"1", "0", null_cell, null_cell, null_cell, "9223372036854775807"}, // no next fence after it
        {"1", "0", null_cell, null_cell, null_cell, "9223372036854775808"}, // beyond a bigint
        {"1", "1", null_cell, "ab", null_cell, "7"},                       // a named grant without a fence
        {"1", "1", "0", "ab", null_cell, "7"},                             // fence 0
        {"1", "1", "-7", "ab", null_cell, "7"},                            // a negative fence
        {"1", "1", "7x", "ab", null_cell, "7"},                            // a fence that is no number
        {"1", "1", "7.5", "ab", null_cell, "7"},                           // not an integer
        {"1", "1", "18446744073709551615", "ab", null_cell, "7"},          // beyond a bigint
        {"1", "1", "7", null_cell, null_cell, "7"},                        // no owner
        {"1", "1", "7", "", null_cell, "7"},                               // an empty owner
        {"1", "1", "7", "ab", "6", "7"},                                   // odd hex
        {"1", "1", "7", "ab", "6G", "7"},                                  // not hex
        {"1", "1", "7", "ab", "6A", "7"},                                  // not as encode() writes it
        {"1", "1", "7", "ab", std::string(2 * dl::max_leader_value_size + 2, 'a'), "7"}}; // too long
    for (const auto& r : bad) {
        std::string shown;
        for (const auto& cell : r)
            shown += cell.value_or("NULL").substr(0, 24) + " ";
        INFO(r.size() << " columns: " << shown);
        std::string problem;
        const auto got = decode(r, &problem);
        CHECK((!got && got.error() == dl::errc::protocol_error));
        CHECK(problem.starts_with("PostgreSQL advisory leader answer: "));
    }
    // Not one row: none (the statement always answers one), or two.
    std::string problem;
    const auto none = answers::advisory_leader_read(table{}, &problem);
    CHECK((!none && none.error() == dl::errc::protocol_error));
    CHECK(problem.starts_with("PostgreSQL advisory leader answer: "));
    const auto twice = answers::advisory_leader_read(
        table{{{"1", "1", "7", "ab", null_cell, "7"}, {"1", "1", "8", "cd", null_cell, "8"}}});
    CHECK((!twice && twice.error() == dl::errc::protocol_error));
    // Without a place for the words, the same refusal.
    CHECK(decode({"2", "0", null_cell, null_cell, null_cell, null_cell}).error() == dl::errc::protocol_error);
}

TEST_CASE("postgres answers: owner-checked statements and fenced writes count changed rows", "[postgres_answers]")
{
    CHECK(answers::owned(table{{}, 1}));
    CHECK(answers::owned(table{{}, 0}).error() == dl::errc::not_owner);
    CHECK(answers::owned(table{{}, 2}).error() == dl::errc::not_owner);
    CHECK(answers::fenced(table{{}, 1}).value() == 1);
    CHECK(answers::fenced(table{{}, 0}).error() == dl::errc::stale_fence);
}

TEST_CASE("postgres answers: a set's rows name their resources by key", "[postgres_answers]")
{
    const std::vector<std::string> keys{"61", "62"};
    CHECK(answers::acquired_all(table{{{"62", "8"}, {"61", "7"}}}, keys).value() == std::vector<dl::fence_token>{7, 8});
    CHECK(answers::acquired_all(table{}, keys).error() == dl::errc::contended);
    CHECK(answers::acquired_all(table{{{"61", "7"}}}, keys).error() == dl::errc::protocol_error);
    CHECK(answers::acquired_all(table{{{"61", "7"}, {"61", "8"}}}, keys).error() == dl::errc::protocol_error);
    CHECK(answers::acquired_all(table{{{"61", "7"}, {"63", "8"}}}, keys).error() == dl::errc::protocol_error);
    CHECK(answers::acquired_all(table{{{"61", "7"}, {"62", "x"}}}, keys).error() == dl::errc::protocol_error);
    CHECK(answers::released_all(table{{{"62"}}}, keys).value() == std::vector<bool>{false, true});
    CHECK(answers::released_all(table{{{"62"}, {"62"}}}, keys).error() == dl::errc::protocol_error);
    CHECK(answers::released_all(table{{{"99"}}}, keys).error() == dl::errc::protocol_error);
}

TEST_CASE("postgres answers: inspect's (owner, fence, left)", "[postgres_answers]")
{
    const auto info = answers::inspected(table{{{"0123456789", "5", "700"}}}).value();
    CHECK(info.held);
    CHECK(info.owner == "01234567");
    CHECK(info.fence == 5);
    CHECK(info.remaining == std::chrono::milliseconds{700});
    const auto expired = answers::inspected(table{{{"0123456789", "5", "-3"}}}).value();
    CHECK_FALSE(expired.held);
    CHECK(expired.fence == 5);
    CHECK_FALSE(answers::inspected(table{}).value().held);
}

TEST_CASE("postgres answers: a refused connection is told apart by the server's SQLSTATE", "[postgres_answers]")
{
    using dl::errc;
    const auto prefix = std::string{"cannot connect to 127.0.0.1:5432: connection to server at \"127.0.0.1\", "
                                    "port 5432 failed: "};
    CHECK(answers::connect_refusal(prefix + "FATAL:  28000: role \"ghost\" does not exist") == errc::auth_failed);
    CHECK(answers::connect_refusal(prefix + "FATAL:  28P01: password authentication failed for user \"x\"") ==
          errc::auth_failed);
    CHECK(answers::connect_refusal(prefix + "FATAL:  3D000: database \"nope\" does not exist") ==
          distlock::postgres::sqlstate("3D000"));
    CHECK(answers::connect_refusal(prefix + "FATAL:  57P03: the database system is starting up") ==
          errc::store_unavailable);
    CHECK(answers::connect_refusal(prefix + "FATAL:  53300: sorry, too many clients already") ==
          errc::store_unavailable);
    // libpq's own refusal: the server asked for a password and none was given.
    CHECK(answers::connect_refusal(prefix + "fe_sendauth: no password supplied") == errc::auth_failed);
    // Refused, reset, unreachable: no SQLSTATE, retried.
    CHECK(answers::connect_refusal(prefix + "Connection refused\n\tIs the server running on that host?") ==
          errc::store_unavailable);
    CHECK(answers::connect_refusal("") == errc::store_unavailable);
    // A state must be five digits or upper-case letters followed by a colon; a role
    // named like one is not read as one, and a later well-formed state still is.
    CHECK(answers::connect_refusal(prefix + "FATAL:  28P0") == errc::store_unavailable);
    CHECK(answers::connect_refusal(prefix + "FATAL:  role 28000: x") == errc::store_unavailable);
    CHECK(answers::connect_refusal(prefix + "FATAL:  28p01: lower") == errc::store_unavailable);
    CHECK(answers::connect_refusal(prefix + "FATAL:  nope FATAL:  28P01: later") == errc::auth_failed);
}
