// The distlock command line: every bad input is a usage error found without a store.
#include <cli/options.hpp>

#include <catch2/catch.hpp>

#include <string>
#include <variant>
#include <vector>

namespace cli = distlock::cli;
using namespace std::chrono_literals;

namespace {

cli::parsed parse(std::vector<std::string> args) { return cli::parse(args); }

std::string error_of(std::vector<std::string> args)
{
    auto p = parse(std::move(args));
    REQUIRE(std::holds_alternative<std::string>(p));
    return std::get<std::string>(p);
}

} // namespace

TEST_CASE("cli: durations are a whole number and a unit, above zero, within max_wait", "[cli]")
{
    CHECK(cli::parse_duration("500ms") == distlock::duration{500ms});
    CHECK(cli::parse_duration("30s") == distlock::duration{30s});
    CHECK(cli::parse_duration("2m") == distlock::duration{2min});
    CHECK(cli::parse_duration("1h") == distlock::duration{1h});
    for (const auto* bad : {"", "0s", "-1s", "30", "s", "1.5s", "10d", "1 s", "99999999999999h", "9223372036854775807ms"})
        CHECK_FALSE(cli::parse_duration(bad));
}

TEST_CASE("cli: a full run command", "[cli]")
{
    auto p = parse({"run", "--store", "redis://a:1", "--store", "redis://b:2", "--ttl", "10s", "--wait", "2m",
                    "--max-hold", "1h", "--grace", "500ms", "-v", "b", "a", "--", "sh", "-c", "echo --ttl"});
    REQUIRE(std::holds_alternative<cli::options>(p));
    const auto& o = std::get<cli::options>(p);
    CHECK(o.what == cli::verb::run);
    CHECK(o.stores == std::vector<std::string>{"redis://a:1", "redis://b:2"});
    CHECK(o.ttl == distlock::duration{10s});
    CHECK(o.wait == distlock::duration{2min});
    CHECK(o.max_hold == distlock::duration{1h});
    CHECK(o.grace == distlock::duration{500ms});
    CHECK(o.verbose);
    CHECK(o.resources == std::vector<std::string>{"b", "a"});
    // Everything after "--" is the command's, options included.
    CHECK(o.command == std::vector<std::string>{"sh", "-c", "echo --ttl"});
    CHECK_FALSE(o.create_table);

    auto d = parse({"try", "--store", "dynamodb://h:8000?table=t", "--create-table", "x"});
    REQUIRE(std::holds_alternative<cli::options>(d));
    CHECK(std::get<cli::options>(d).create_table);
    CHECK(std::get<cli::options>(d).stores == std::vector<std::string>{"dynamodb://h:8000?table=t"});
}

TEST_CASE("cli: every store the library reads a URL for, and --store-timeout", "[cli]")
{
    for (const auto* url : {"redis://h:1", "rediss://h:1", "unix:///run/redis.sock", "redis+cluster://h:1,h:2",
                            "rediss+cluster://h:1", "redis+sentinel://h:26379/p", "rediss+sentinel://h:1/p",
                            "dynamodb://h:8000?table=t", "dynamodbs://h", "postgres://u@h/db", "postgresql://h/db",
                            "etcd://h:2379", "etcds://h", "zk://h:2181/chroot"}) {
        INFO(url);
        CHECK(cli::store_kind_of(url));
        CHECK(std::holds_alternative<cli::options>(parse({"status", "--store", url, "x"})));
    }
    CHECK_FALSE(cli::store_kind_of("zookeeper://h"));
    CHECK_FALSE(cli::store_kind_of("http://h"));
    // Several stores are a quorum of single Redis servers, nothing else.
    CHECK(std::holds_alternative<cli::options>(parse({"try", "--store", "redis://a:1", "--store", "unix:///r", "x"})));
    CHECK(error_of({"try", "--store", "etcd://a", "--store", "etcd://b", "x"}).find("stands alone") !=
          std::string::npos);
    CHECK(error_of({"try", "--store", "redis://a:1", "--store", "redis+cluster://b:1", "x"}).find("stands alone") !=
          std::string::npos);

    auto defaults = parse({"try", "x"});
    REQUIRE(std::holds_alternative<cli::options>(defaults));
    CHECK(std::get<cli::options>(defaults).store_timeout == distlock::duration{60s});
    auto bounded = parse({"run", "--store-timeout", "5s", "x", "--", "true"});
    REQUIRE(std::holds_alternative<cli::options>(bounded));
    CHECK(std::get<cli::options>(bounded).store_timeout == distlock::duration{5s});
    CHECK(error_of({"run", "--store-timeout", "0s", "x", "--", "true"}).find("bad duration") != std::string::npos);
}

TEST_CASE("cli: bad command lines say what is wrong", "[cli]")
{
    CHECK(error_of({}).find("no command") != std::string::npos);
    CHECK(error_of({"lock", "x"}).find("unknown command 'lock'") != std::string::npos);
    CHECK(error_of({"run", "x"}).find("need a command after '--'") != std::string::npos);
    CHECK(error_of({"elect", "x"}).find("need a command after '--'") != std::string::npos);
    CHECK(error_of({"elect", "a", "b", "--", "true"}).find("one election name") != std::string::npos);
    CHECK(error_of({"elect", "--store", "redis://h:1", "--store", "redis://h:2", "x", "--", "true"})
              .find("elect needs one store") != std::string::npos);
    CHECK(error_of({"run", "--value", "v", "x", "--", "true"}).find("only elect takes --value") != std::string::npos);
    CHECK(error_of({"elect", "--value", std::string(64 * 1024 + 1, 'v'), "x", "--", "true"}).find("--value is at most") !=
          std::string::npos);
    CHECK(error_of({"run", "--ttl", "1s", "--lock-delay", "2s", "x", "--", "true"}).find("at most the --ttl") !=
          std::string::npos);
    CHECK(error_of({"try", "--lock-delay", "1s", "x"}).find("only run and elect take --lock-delay") !=
          std::string::npos);
    CHECK(error_of({"run", "--", "true"}).find("no resource") != std::string::npos);
    CHECK(error_of({"run", "--ttl", "0s", "x", "--", "true"}).find("bad duration '0s'") != std::string::npos);
    CHECK(error_of({"run", "--ttl"}).find("needs a duration") != std::string::npos);
    CHECK(error_of({"run", "--bogus", "x", "--", "true"}).find("unknown option '--bogus'") != std::string::npos);
    CHECK(error_of({"run", "--store", "ftp://x", "x", "--", "true"}).find("unknown store") != std::string::npos);
    CHECK(error_of({"run", "--store", "memory", "--store", "redis://h:1", "x", "--", "true"}).find("stands alone") !=
          std::string::npos);
    CHECK(error_of({"run", "", "--", "true"}).find("1 to 1024 bytes") != std::string::npos);
    CHECK(error_of({"run", std::string(1025, 'x'), "--", "true"}).find("1 to 1024 bytes") != std::string::npos);
    CHECK(error_of({"try", "x", "--", "true"}).find("only run and elect take a command") != std::string::npos);
    CHECK(error_of({"status", "a", "b"}).find("one resource") != std::string::npos);
    CHECK(error_of({"release", "a"}).find("needs --owner") != std::string::npos);
    CHECK(error_of({"try", "--owner", "ab", "a"}).find("only release and revoke take --owner") != std::string::npos);
}

TEST_CASE("cli: help, and a resource of exactly 1024 bytes", "[cli]")
{
    auto help = parse({"--help"});
    REQUIRE(std::holds_alternative<cli::options>(help));
    CHECK(std::get<cli::options>(help).what == cli::verb::help);
    auto longest = parse({"try", std::string(1024, 'x')});
    REQUIRE(std::holds_alternative<cli::options>(longest));
    CHECK(std::get<cli::options>(longest).resources[0].size() == 1024);
}

TEST_CASE("cli: list takes an optional prefix; revoke one resource and one of --fence or --owner", "[cli]")
{
    const auto all = parse({"list", "--store", "redis://a:1"});
    REQUIRE(std::holds_alternative<cli::options>(all));
    CHECK(std::get<cli::options>(all).what == cli::verb::list);
    CHECK(std::get<cli::options>(all).resources.empty());
    const auto some = parse({"list", "--json", "jobs:"});
    REQUIRE(std::holds_alternative<cli::options>(some));
    CHECK(std::get<cli::options>(some).resources == std::vector<std::string>{"jobs:"});
    CHECK(std::get<cli::options>(some).json);
    CHECK(error_of({"list", "a", "b"}) == "list takes at most one prefix");

    const auto by_fence = parse({"revoke", "--fence", "42", "job"});
    REQUIRE(std::holds_alternative<cli::options>(by_fence));
    CHECK(std::get<cli::options>(by_fence).what == cli::verb::revoke);
    CHECK(std::get<cli::options>(by_fence).fence == std::optional<distlock::fence_token>{42});
    const auto by_owner = parse({"revoke", "--owner", "ABCDEF01", "job"});
    REQUIRE(std::holds_alternative<cli::options>(by_owner));
    CHECK(std::get<cli::options>(by_owner).owner == "ABCDEF01");

    const std::string one_of = "revoke needs one of --fence N or --owner ID (as `distlock list` shows them)";
    CHECK(error_of({"revoke", "job"}) == one_of);
    CHECK(error_of({"revoke", "--fence", "1", "--owner", "abcdef01", "job"}) == one_of);
    for (const std::string bad : {"0", "-1", "1x", "", "18446744073709551616"})
        CHECK(error_of({"revoke", "--fence", bad, "job"}) ==
              "--fence needs the grant's fencing token, a whole number above zero");
    for (const std::string& bad : {std::string{"abc"}, std::string{"abcdefg!"}, std::string(33, 'a')})
        CHECK(error_of({"revoke", "--owner", bad, "job"}) ==
              "--owner must be 8 to 32 hex digits of an owner id (`distlock list` shows 8)");
    CHECK(error_of({"revoke", "--fence", "1", "a", "b"}) == "status, release and revoke take one resource");
    CHECK(error_of({"try", "--fence", "1", "job"}) == "only revoke takes --fence");
    CHECK(error_of({"status", "--owner", "abcdef01", "job"}) == "only release and revoke take --owner");
}

TEST_CASE("cli: --shared and --permits N take one resource, for run and try", "[cli]")
{
    const auto reader = parse({"run", "--shared", "catalog", "--", "true"});
    REQUIRE(std::holds_alternative<cli::options>(reader));
    CHECK(std::get<cli::options>(reader).shared);
    const auto permit = parse({"try", "--permits", "4", "exports"});
    REQUIRE(std::holds_alternative<cli::options>(permit));
    CHECK(std::get<cli::options>(permit).permits == std::optional<std::uint32_t>{4});
    const std::string count = "--permits needs a count from 1 to " + std::to_string(distlock::max_permits);
    for (const std::string& bad : {std::string{"0"}, std::string{"-1"}, std::string{"4097"}, std::string{"2x"}})
        CHECK(error_of({"try", "--permits", bad, "x"}) == count);
    CHECK(error_of({"try", "--shared", "a", "b"}) == "--shared and --permits take one resource");
    CHECK(error_of({"status", "--shared", "a"}) == "only run and try take --shared and --permits");
    CHECK(error_of({"try", "--shared", "--permits", "2", "a"}).starts_with("--shared (a reader) and --permits"));
}
