// The sans-I/O RESP parser and command encoding: no socket, just bytes.
#include "support.hpp"

#include <distlock/redis/detail/handover.hpp>
#include <distlock/redis/detail/sha1.hpp>
#include <distlock/redis/resp/command.hpp>
#include <distlock/redis/resp/parser.hpp>

namespace resp = distlock::redis::resp;

TEST_CASE("resp: every reply type parses", "[resp]")
{
    auto one = [](std::string_view in) {
        auto r = resp::parse(in);
        REQUIRE(r.status == resp::status::complete);
        CHECK(r.consumed == in.size());
        return r.value;
    };
    CHECK(one("+OK\r\n").text == "OK");
    CHECK(one("-ERR bad\r\n").is_error());
    CHECK(one(":-42\r\n").integer == -42);
    CHECK(one("$5\r\na\r\nb!\r\n").text == "a\r\nb!"); // binary-safe
    CHECK(one("$0\r\n\r\n").text.empty());
    CHECK(one("$-1\r\n").is_null());
    CHECK(one("*-1\r\n").is_null());
    CHECK(one("_\r\n").is_null());
    CHECK(one("#t\r\n").integer == 1);
    CHECK(one(",3.5\r\n").text == "3.5");
    CHECK(one("(12345678901234567890\r\n").text == "12345678901234567890");
    CHECK(one("=7\r\ntxt:abc\r\n").text == "abc");
    CHECK(one("!3\r\nbad\r\n").is_error());
    const auto arr = one("*3\r\n:1\r\n*1\r\n+x\r\n$-1\r\n");
    REQUIRE(arr.elements.size() == 3);
    CHECK(arr.elements[1].elements[0].text == "x");
    CHECK(one("%1\r\n+k\r\n:1\r\n").elements.size() == 2);
    CHECK(one(">3\r\n+message\r\n+ch\r\n+p\r\n").type == resp::type::push);
    CHECK(one("|1\r\n+key\r\n+meta\r\n:7\r\n").integer == 7); // attribute skipped
}

TEST_CASE("resp: every truncation of a valid reply asks for more", "[resp]")
{
    const std::string full = "*3\r\n$5\r\nhello\r\n:42\r\n*2\r\n+a\r\n$-1\r\n";
    REQUIRE(resp::parse(full).status == resp::status::complete);
    for (std::size_t n = 0; n < full.size(); ++n)
        CHECK(resp::parse(std::string_view{full}.substr(0, n)).status == resp::status::need_more);
    // Two replies back to back: the first is consumed exactly.
    const auto two = resp::parse(full + ":1\r\n");
    CHECK(two.consumed == full.size());
}

TEST_CASE("resp: malformed, oversized and deeply nested input is rejected", "[resp][input]")
{
    for (std::string_view bad : {"?\r\n", ":abc\r\n", ":\r\n", "$-2\r\n", "$3\r\nabcd\r\n", "*-5\r\n", "#x\r\n",
                                 "_x\r\n", "=3\r\nabc\r\n", "%-1\r\n", ":99999999999999999999\r\n"})
        CHECK(resp::parse(bad).status == resp::status::malformed);
    CHECK(resp::parse("$999999999\r\n").status == resp::status::malformed);    // beyond max_string
    CHECK(resp::parse("*99999999999\r\n").status == resp::status::malformed);  // beyond max_elements
    std::string deep;
    for (int i = 0; i < 100; ++i)
        deep += "*1\r\n";
    deep += ":1\r\n";
    CHECK(resp::parse(deep).status == resp::status::malformed);
    // A huge declared aggregate with little data does not allocate for the declared size.
    CHECK(resp::parse("*1000000\r\n:1\r\n").status == resp::status::need_more);
    // Tight limits are honoured.
    resp::limits small{.max_depth = 2, .max_string = 4, .max_elements = 2};
    CHECK(resp::parse("$5\r\nhello\r\n", small).status == resp::status::malformed);
    CHECK(resp::parse("*3\r\n:1\r\n:2\r\n:3\r\n", small).status == resp::status::malformed);
}

TEST_CASE("resp: commands are encoded binary-safe", "[resp]")
{
    const std::string id{"a\0\r\n", 4};
    const auto encoded = resp::command({"SET", id, "v"});
    CHECK(encoded == std::string{"*3\r\n$3\r\nSET\r\n$4\r\na\0\r\n\r\n$1\r\nv\r\n", 30});
    // What we encode, Redis-style, parses back as the same array.
    const auto back = resp::parse(encoded);
    REQUIRE(back.status == resp::status::complete);
    REQUIRE(back.value.elements.size() == 3);
    CHECK(back.value.elements[1].text == id);
}

TEST_CASE("sha1 names scripts the way Redis does", "[resp]")
{
    CHECK(distlock::redis::detail::sha1_hex("abc") == "a9993e364706816aba3e25717850c26c9cd0d89d");
    CHECK(distlock::redis::detail::sha1_hex("") == "da39a3ee5e6b4b0d3255bfef95601890afd80709");
    CHECK(distlock::redis::detail::sha1_hex(std::string(1000, 'a')) == "291e9a6c66994949b57ba5e650361e98fc36b1ba");
}

TEST_CASE("resp: the variadic command_of encodes as the braced form does, binary-safe", "[resp]")
{
    const std::string key = std::string{"k\0\r\n", 4};
    const std::string_view field = "f";
    CHECK(resp::command_of("HSET", key, field, "v") == resp::command({"HSET", key, field, "v"}));
    CHECK(resp::command_of("PING") == "*1\r\n$4\r\nPING\r\n");
    CHECK(resp::command_of("DEL", key) == std::string{"*2\r\n$3\r\nDEL\r\n$4\r\n"} + key + "\r\n");
}

TEST_CASE("redis fair: a hand-over message reads as try, token and time, or not at all", "[resp][fair]")
{
    using distlock::redis::detail::parse_handover;
    const auto h = parse_handover("2:1733400000123456:1500");
    REQUIRE(h);
    CHECK(h->try_number == 2);
    CHECK(h->fence == 1733400000123456u);
    CHECK(h->after_try == std::chrono::microseconds{1500});
    CHECK(parse_handover("7:1:0"));
    for (const std::string_view bad :
         {"", "2", "2:5", "2:5:", ":5:1", "0:5:1", "2:0:1", "2:5:-1", "-2:5:1", "2:+5:1", "2:5:1:", "2:5:1 ",
          " 2:5:1", "2:5:1x", "2:9007199254740992:1", "2:5:9007199254740992", "2:5:99999999999999999999999",
          "2::1", "a:b:c", "released"})
        CHECK_FALSE(parse_handover(bad));
}
