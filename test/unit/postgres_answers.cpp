// The PostgreSQL store's answer decoders (postgres/detail/answers.hpp), without a
// server: each statement's result decodes to the primitive's result, and any other
// shape is errc::protocol_error. A plain table stands in for libpq's result.
#include <distlock/postgres/detail/answers.hpp>

#include <catch2/catch.hpp>

#include <charconv>
#include <chrono>
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
