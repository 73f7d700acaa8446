// The one reading of store URLs (distlock/backend/url.hpp), directly and through every
// store's config::from_url(): what each accepts and means, and that every refusal is
// invalid_argument with words saying what is wrong. The build leaves out the stores
// whose libraries it did not find (DISTLOCK_URL_TEST_NO_STORES: OpenSSL, for
// asio::ssl; DISTLOCK_URL_TEST_NO_POSTGRES: libpq).
#include <distlock/backend/url.hpp>
#ifndef DISTLOCK_URL_TEST_NO_STORES
#include <distlock/dynamodb/config.hpp>
#include <distlock/etcd/config.hpp>
#include <distlock/redis/config.hpp>
#include <distlock/zookeeper/config.hpp>
#endif
#ifndef DISTLOCK_URL_TEST_NO_POSTGRES
#include <distlock/postgres/config.hpp>
#endif

#include <catch2/catch.hpp>

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace dl = distlock;
namespace backend = distlock::backend;
using namespace std::chrono_literals;
using namespace std::string_literals;

namespace {

const backend::url_rules one_host{.schemes = {"s"}, .default_port = 80, .userinfo = true, .path = true};
const backend::url_rules many_hosts{.schemes = {"m", "ms"},
                                    .default_port = 9,
                                    .several_hosts = true,
                                    .userinfo = true,
                                    .query_keys = {"a", "b"}};

// The message of a refusal, after checking that it is one (invalid_argument, with words).
template <class Parse>
std::string refusal(Parse parse, std::string_view url)
{
    std::string why;
    auto r = parse(url, &why);
    INFO(url);
    REQUIRE_FALSE(r);
    CHECK(r.error() == dl::errc::invalid_argument);
    CHECK_FALSE(why.empty());
    return why;
}

std::string parser_refusal(std::string_view url, const backend::url_rules& rules)
{
    return refusal([&](std::string_view u, std::string* why) { return backend::parse_url(u, rules, why); }, url);
}

#ifndef DISTLOCK_URL_TEST_NO_STORES
const auto redis_url = [](std::string_view u, std::string* why) { return dl::redis::config::from_url(u, why); };
const auto etcd_url = [](std::string_view u, std::string* why) { return dl::etcd::config::from_url(u, why); };
const auto zk_url = [](std::string_view u, std::string* why) { return dl::zookeeper::config::from_url(u, why); };
const auto ddb_url = [](std::string_view u, std::string* why) { return dl::dynamodb::config::from_url(u, why); };
#endif
#ifndef DISTLOCK_URL_TEST_NO_POSTGRES
const auto pg_url = [](std::string_view u, std::string* why) { return dl::postgres::config::from_url(u, why); };
#endif

bool contains(const std::string& text, std::string_view part) { return text.find(part) != std::string::npos; }

} // namespace

TEST_CASE("url: the parts of an accepted URL, each as written", "[url]")
{
    auto u = backend::parse_url("s://us%20er:pa:ss@w/rd@example.com:8080/a/b%2F?x", one_host);
    REQUIRE(u);
    CHECK(u->scheme == "s");
    CHECK(u->user == "us%20er");                 // nothing is percent-decoded
    CHECK(u->password == "pa:ss@w/rd");          // up to the last '@': ':', '@' and '/' in a password
    REQUIRE(u->hosts.size() == 1);
    CHECK(u->hosts[0] == backend::host_port{"example.com", 8080});
    CHECK(u->path == "/a/b%2F?x");               // no query in these rules: '?' is ordinary
    CHECK(u->query.empty());
    CHECK(u->text() == "s://us%20er:pa:ss@w/rd@example.com:8080/a/b%2F?x");

    auto v = backend::parse_url("ms://[fe80::1%eth0],h-1.example_2~x:1,[::ffff:10.0.0.1]:7?b=1=2&a=", many_hosts);
    REQUIRE(v);
    CHECK(v->scheme == "ms");
    CHECK(v->user.empty());
    CHECK_FALSE(v->password);
    REQUIRE(v->hosts.size() == 3);
    CHECK(v->hosts[0] == backend::host_port{"fe80::1%eth0", 9}); // the default port
    CHECK(v->hosts[1] == backend::host_port{"h-1.example_2~x", 1});
    CHECK(v->hosts[2] == backend::host_port{"::ffff:10.0.0.1", 7});
    REQUIRE(v->query.size() == 2);
    CHECK(v->query[0] == backend::query_pair{"b", "1=2"});
    CHECK(v->query[1] == backend::query_pair{"a", ""});
    CHECK(v->text() == "ms://[fe80::1%eth0],h-1.example_2~x:1,[::ffff:10.0.0.1]:7?b=1=2&a=");
    CHECK(backend::take_query(*v, "b") == backend::query_pair{"b", "1=2"});
    CHECK_FALSE(backend::take_query(*v, "b"));
    CHECK(v->text() == "ms://[fe80::1%eth0],h-1.example_2~x:1,[::ffff:10.0.0.1]:7?a=");
    CHECK(backend::take_query(*v, "a"));
    CHECK(v->text() == "ms://[fe80::1%eth0],h-1.example_2~x:1,[::ffff:10.0.0.1]:7");

    // A user without ':' has no password; "@" alone is an empty user; a lone '/' is no
    // path where the rules take none; an empty query is no query.
    auto w = backend::parse_url("m://u@h:1/?", many_hosts);
    REQUIRE(w);
    CHECK(w->user == "u");
    CHECK_FALSE(w->password);
    CHECK(w->path.empty());
    CHECK(w->query.empty());
    CHECK(backend::parse_url("s://@h", one_host)->user.empty());
    CHECK(backend::parse_url("s://h:00080", one_host)->hosts[0].port == 80);
    CHECK(backend::parse_url("s://h:65535", one_host)->hosts[0].port == 65535);
    CHECK(backend::parse_url("s://%41%7e", one_host)->hosts[0].host == "%41%7e");

    // IPv6 addresses as RFC 4291 writes them.
    for (const char* v6 : {"::", "::1", "1::", "1:2:3:4:5:6:7:8", "1::8", "1:2:3:4:5:6::8", "::2:3:4:5:6:7:8",
                           "::ffff:1.2.3.4", "1:2:3:4:5:6:1.2.3.4", "fe80::a%en0", "ABCD:ef01::"}) {
        INFO(v6);
        auto r = backend::parse_url("s://["s + v6 + "]:1", one_host);
        REQUIRE(r);
        CHECK(r->hosts[0].host == v6);
    }

    CHECK(backend::url_scheme("redis+cluster://h:1") == "redis+cluster");
    CHECK(backend::url_scheme("redis:h").empty());
    CHECK(backend::url_scheme("://h").empty());
    CHECK(backend::url_scheme("1s://h").empty());
    CHECK(backend::url_scheme("redis//u:secret://@h").empty()); // not a scheme: never quoted
    CHECK(backend::url_scheme("a+b-c.d9://h") == "a+b-c.d9");
}

TEST_CASE("url: every refusal is invalid_argument and says what is wrong, and where", "[url]")
{
    // Text after a bracketed host, an unclosed bracket, an empty or malformed one.
    CHECK(parser_refusal("s://[::1]junk", one_host) == "text after the bracketed host '[::1]': 'junk'");
    CHECK(parser_refusal("s://[::1]junk:80", one_host) == "text after the bracketed host '[::1]': 'junk:80'");
    CHECK(contains(parser_refusal("s://[::1", one_host), "unclosed '[' in '[::1'"));
    CHECK(contains(parser_refusal("s://[::1:80", one_host), "unclosed '['"));
    CHECK(contains(parser_refusal("s://[]:80", one_host), "empty host"));
    for (const char* v6 : {"[1:2:3:4:5:6:7:8:9]", "[1:2:3:4:5:6:7]", "[::1::2]", "[12345::]", "[abc]", "[1.2.3.4]",
                           "[:1]", "[1:]", "[::1%]", "[::g]", "[1::2.3.4]", "[::1.2.3.256]", "[::1%a:b]",
                           "[::1%a b]"}) {
        INFO(v6);
        CHECK(contains(parser_refusal("s://"s + v6 + ":1", one_host), "is not an IPv6 address"));
    }
    CHECK(contains(parser_refusal("s://a]b", one_host), "a character a host name cannot have: ']'"));

    // A control byte anywhere, the NUL byte included: named with its offset.
    CHECK(parser_refusal("s://ho\0st:1"s, one_host) == "control byte '\\x00' at byte 6 (a URL is printable text)");
    CHECK(contains(parser_refusal("s://host\r\nX: y", one_host), "control byte '\\x0d' at byte 8"));
    CHECK(contains(parser_refusal("s://u:p\x7f@h", one_host), "control byte '\\x7f'"));
    CHECK(contains(parser_refusal("m://h?a=\t", many_hosts), "control byte '\\x09'"));

    // One port per host, from 1 to 65535, decimal digits only.
    CHECK(contains(parser_refusal("s://host:1:2", one_host), "'host:1:2' has more than one ':'"));
    CHECK(contains(parser_refusal("s://::1:6379", one_host), "an IPv6 address goes in brackets"));
    for (const char* port :
         {"0", "65536", "99999", "x", "+1", "-1", " 1", "1 ", "0x10", "1e3", "99999999999999999999"}) {
        INFO(port);
        CHECK(contains(parser_refusal("s://h:"s + port, one_host), "is not a decimal number from 1 to 65535"));
    }
    CHECK(contains(parser_refusal("s://h:", one_host), "no port after ':' in 'h:'"));
    CHECK(contains(parser_refusal("s://[::1]:", one_host), "no port after ':'"));
    const backend::url_rules ports_written{.schemes = {"s"}, .several_hosts = true};
    CHECK(parser_refusal("s://h:1,h", ports_written) == "'h' has no port (host:port)");

    // Host names: not empty, letters, digits, - . _ ~ and well-formed %XX, at most 255 bytes.
    CHECK(contains(parser_refusal("s://", one_host), "no host"));
    CHECK(contains(parser_refusal("s://u:secret@/x", one_host), "no host"));
    CHECK(contains(parser_refusal("s://:80", one_host), "no host before the port in ':80'"));
    CHECK(contains(parser_refusal("s://h%4", one_host), "'%' not followed by two hex digits"));
    CHECK(contains(parser_refusal("s://h%zz", one_host), "'%' not followed by two hex digits"));
    CHECK(contains(parser_refusal("s://h\xc3\xa9", one_host), "cannot have: '\\xc3'"));
    CHECK(contains(parser_refusal("s://a b", one_host), "cannot have: ' '"));
    CHECK(contains(parser_refusal("s://" + std::string(256, 'a'), one_host), "longer than 255 bytes"));
    CHECK(backend::parse_url("s://" + std::string(255, 'a'), one_host));

    // Lists refuse empty entries, wherever they are.
    for (const char* list : {"h:1,", ",h:1", "h:1,,h:2", ","}) {
        INFO(list);
        CHECK(contains(parser_refusal("m://"s + list, many_hosts), "empty entry in the host list"));
    }
    CHECK(parser_refusal("s://a,b", one_host) == "'a,b': s:// URLs name one host");

    // The query: key=value pairs, each key once, known keys only; no empty parameter.
    CHECK(parser_refusal("m://h?a=1&a=2", many_hosts) == "query key 'a' is given twice");
    CHECK(parser_refusal("m://h?c=1", many_hosts) == "unknown query key 'c' (m:// URLs take a, b)");
    CHECK(contains(parser_refusal("m://h?a", many_hosts), "query parameter 'a' has no '='"));
    CHECK(contains(parser_refusal("m://h?=1", many_hosts), "has no key"));
    for (const char* query : {"a=1&", "&a=1", "a=1&&b=2", "&"}) {
        INFO(query);
        CHECK(contains(parser_refusal("m://h?"s + query, many_hosts), "empty parameter in the query"));
    }
    const backend::url_rules pass_on{
        .schemes = {"p"}, .default_port = 1, .query_keys = {"a"}, .other_query_keys = true};
    auto kept = backend::parse_url("p://h?x=1&a=2", pass_on);
    REQUIRE(kept);
    CHECK(kept->query.size() == 2);
    CHECK(parser_refusal("p://h?x=1&x=2", pass_on) == "query key 'x' is given twice");

    // Schemes, user information, paths, socket paths.
    CHECK(parser_refusal("h:1", many_hosts) == "no scheme: expected m://, ms://");
    CHECK(parser_refusal("M://h", many_hosts) == "scheme 'M' is not one of m://, ms://");
    CHECK(parser_refusal("m//u:secret://@h", many_hosts) == "no scheme: expected m://, ms://");
    const backend::url_rules bare{.schemes = {"b"}, .default_port = 1};
    CHECK(contains(parser_refusal("b://u@h", bare), "b:// URLs take no user name or password"));
    CHECK(parser_refusal("b://h/x", bare) == "b:// URLs take no path: '/x'");
    CHECK(backend::parse_url("b://h/", bare));
    const backend::url_rules socket{.schemes = {"unix"}, .socket_path = true, .query_keys = {"db"}};
    CHECK(backend::parse_url("unix:///run/x@y.sock?db=1", socket)->path == "/run/x@y.sock");
    CHECK(parser_refusal("unix://?db=1", socket) == "no socket path after 'unix://'");
    CHECK(contains(parser_refusal(std::string(8193, 'a'), bare), "longer than 8192 bytes"));

    // The user information is never quoted: it may hold a password.
    for (const char* url : {"s://u:hunter2@[::1]x", "s://u:hunter2@", "s://u:hunter2@h:0", "b://u:hunter2@h"}) {
        INFO(url);
        const auto why = url[0] == 'b' ? parser_refusal(url, bare) : parser_refusal(url, one_host);
        CHECK_FALSE(contains(why, "hunter2"));
    }
}

TEST_CASE("url: query values are read strictly, each refusal naming the parameter", "[url]")
{
    const backend::query_pair n{"n", "42"};
    CHECK(backend::query_number(n, 1, 64).value() == 42);
    std::string why;
    CHECK(backend::query_number(n, 1, 10, &why).error() == dl::errc::invalid_argument);
    CHECK(why == "'n=42': expected a whole decimal number from 1 to 10");
    for (const char* bad : {"", "-", "+4", "4 ", "0x4", "4.0", "1e2", "99999999999999999999999"}) {
        INFO(bad);
        CHECK_FALSE(backend::query_number(backend::query_pair{"n", bad}, 0, 100));
    }
    CHECK(backend::query_number(backend::query_pair{"n", "-7"}, -10, 10).value() == -7);
    CHECK_FALSE(backend::query_number(backend::query_pair{"n", "-7"}, 0, 10));
    CHECK(backend::query_number<std::uint16_t>(backend::query_pair{"n", "65535"}, 0, 65535).value() == 65535);
    CHECK_FALSE(backend::query_number<std::uint16_t>(backend::query_pair{"n", "65536"}, 0, 65535));
    CHECK(backend::decimal(std::string_view{"0007"}, 0, 10) == 7);

    CHECK(backend::query_duration(backend::query_pair{"ttl", "10"}, 2s, 86400s).value() == 10s);
    CHECK_FALSE(backend::query_duration(backend::query_pair{"ttl", "1"}, 2s, 86400s, &why));
    CHECK(why == "'ttl=1': expected a whole number of seconds from 2 to 86400");
    CHECK_FALSE(backend::query_duration(backend::query_pair{"t", "5s"}, 1ms, 10000ms, &why));
    CHECK(contains(why, "milliseconds"));

    CHECK(backend::query_bool(backend::query_pair{"b", "true"}).value());
    CHECK(backend::query_bool(backend::query_pair{"b", "1"}).value());
    CHECK_FALSE(backend::query_bool(backend::query_pair{"b", "false"}).value());
    CHECK_FALSE(backend::query_bool(backend::query_pair{"b", "0"}).value());
    CHECK_FALSE(backend::query_bool(backend::query_pair{"b", "yes"}, &why));
    CHECK(why == "'b=yes': expected true or false");

    CHECK(backend::query_choice(backend::query_pair{"mode", "b"}, {"a", "b"}).value() == 1u);
    CHECK_FALSE(backend::query_choice(backend::query_pair{"mode", "c"}, {"a", "b"}, &why));
    CHECK(why == "'mode=c': expected one of a, b");

    CHECK(backend::quoted("a\nb") == "'a\\x0ab'");
    CHECK(backend::quoted(std::string(200, 'x')).size() == 2 + 120 + 3);
}

#ifndef DISTLOCK_URL_TEST_NO_STORES
TEST_CASE("url: Redis accepts its forms, with the meanings they had", "[url][redis]")
{
    namespace redis = dl::redis;
    auto a = redis::config::from_url("redis://user:p@ss:w/rd@localhost:7000/2");
    REQUIRE(a);
    CHECK(a->username == "user");
    CHECK(a->password == "p@ss:w/rd");
    CHECK(a->host == "localhost");
    CHECK(a->port == 7000);
    CHECK(a->database == 2);
    CHECK_FALSE(a->tls);
    CHECK(a->topology() == redis::topology::single);

    auto b = redis::config::from_url("rediss://secret?@[::1]");
    REQUIRE(b);
    CHECK(b->tls);
    CHECK(b->username.empty());
    CHECK(b->password == "secret?"); // user information without ':' is the password
    CHECK(b->host == "::1");
    CHECK(b->port == 6379);
    CHECK(b->database == 0);
    CHECK(redis::config::from_url("redis://h/")->database == 0);

    auto s = redis::config::from_url("unix:///run/redis.sock?db=3");
    REQUIRE(s);
    CHECK(s->unix_socket == "/run/redis.sock");
    CHECK(s->database == 3);
    CHECK(redis::config::from_url("unix://relative.sock")->unix_socket == "relative.sock");

    auto c = redis::config::from_url("rediss+cluster://u:p@10.0.0.1:7000,[::1]:7001,node-3:7002/");
    REQUIRE(c);
    CHECK(c->tls);
    CHECK(c->topology() == redis::topology::cluster);
    CHECK(c->cluster_nodes ==
          std::vector<redis::node_address>{{"10.0.0.1", 7000}, {"::1", 7001}, {"node-3", 7002}});
    CHECK(c->username == "u");
    CHECK(c->password == "p");
    CHECK_FALSE(c->validate());

    auto t = redis::config::from_url("redis+sentinel://:pw@h1:26379,h2:26380/mymaster/4");
    REQUIRE(t);
    CHECK_FALSE(t->tls);
    CHECK(t->topology() == redis::topology::sentinel);
    CHECK(t->sentinels == std::vector<redis::node_address>{{"h1", 26379}, {"h2", 26380}});
    CHECK(t->sentinel_master == "mymaster");
    CHECK(t->database == 4);
    CHECK(t->password == "pw");
    CHECK(redis::config::from_url("redis+sentinel://h:1/m/")->database == 0);
    CHECK_FALSE(t->validate());
}

TEST_CASE("url: Redis refuses what the old parsers let through, saying why", "[url][redis]")
{
    CHECK(refusal(redis_url, "redis://[::1]junk") == "text after the bracketed host '[::1]': 'junk'");
    CHECK(contains(refusal(redis_url, "redis://[::1"), "unclosed '['"));
    CHECK(contains(refusal(redis_url, "redis://ho\0st"s), "control byte '\\x00'"));
    CHECK(contains(refusal(redis_url, "redis://host:1:2"), "more than one ':'"));
    CHECK(contains(refusal(redis_url, "redis://[]:6379"), "empty host"));
    CHECK(contains(refusal(redis_url, "unix:///run/redis.sock?db=-1"), "'db=-1': expected a whole decimal number"));
    CHECK(contains(refusal(redis_url, "unix:///s?db=1&db=2"), "given twice"));
    CHECK(contains(refusal(redis_url, "unix:///s?database=1"), "unknown query key 'database'"));
    CHECK(contains(refusal(redis_url, "redis://h/-1"), "database '-1'"));
    CHECK(contains(refusal(redis_url, "redis://h/1/2"), "database '1/2'"));
    CHECK(contains(refusal(redis_url, "redis+cluster://h:1,"), "empty entry in the host list"));
    CHECK(contains(refusal(redis_url, "redis+cluster://h:1,,h:2"), "empty entry in the host list"));
    CHECK(contains(refusal(redis_url, "redis+cluster://::1:7000"), "more than one ':'"));
    CHECK(contains(refusal(redis_url, "redis+cluster://h:1/2"), "take no path"));
    CHECK(contains(refusal(redis_url, "redis+cluster://h"), "'h' has no port"));
    CHECK(contains(refusal(redis_url, "redis+sentinel://h:1"), "no primary name"));
    CHECK(contains(refusal(redis_url, "redis+sentinel://h:1/m/x"), "database 'x'"));
    CHECK(contains(refusal(redis_url, "http://x"), "scheme 'http' is not Redis's"));
    CHECK(contains(refusal(redis_url, "localhost:6379"), "no scheme"));
    // Refused before as now (test/redis/security.cpp, test/redis/cluster.cpp), now with words.
    for (const char* bad : {"redis://", "redis://h:notaport", "redis://h:99999", "redis://h/x", "unix://",
                            "redis+cluster://", "redis+sentinel://h:1/", "redis+cluster://h:0"})
        refusal(redis_url, bad);
    CHECK(dl::redis::config::from_url("redis://h:0").error() == dl::errc::invalid_argument); // no `why` asked
}

TEST_CASE("url: etcd accepts its forms, refuses the rest with words", "[url][etcd]")
{
    auto e = dl::etcd::config::from_url("etcd://u:p%w@127.0.0.1:2379,[::1]:2380,localhost/?prefix=locks/&ttl=5");
    REQUIRE(e);
    REQUIRE(e->members.size() == 3);
    CHECK(e->members[1].host == "::1");
    CHECK(e->members[1].port == 2380);
    CHECK(e->members[2].port == 2379);
    CHECK(e->username == "u");
    CHECK(e->password == "p%w");
    CHECK(e->prefix == "locks/");
    CHECK(e->session_ttl == 5s);
    CHECK_FALSE(e->tls);
    auto s = dl::etcd::config::from_url("etcds://h?ca=/etc/ca.pem");
    REQUIRE(s);
    CHECK(s->tls);
    CHECK(s->tls_ca_file == "/etc/ca.pem");
    CHECK(s->members[0].port == 2379);
    CHECK(e->api == dl::etcd::api::grpc);
    auto g = dl::etcd::config::from_url("etcd://h?api=gateway");
    REQUIRE(g);
    CHECK(g->api == dl::etcd::api::gateway);
    CHECK(dl::etcd::config::from_url("etcd://h?api=grpc")->api == dl::etcd::api::grpc);
    CHECK(contains(refusal(etcd_url, "etcd://h?api=http"), "'api=http': the API is 'grpc' or 'gateway'"));

    CHECK(contains(refusal(etcd_url, "etcd://h:1,"), "empty entry in the host list 'h:1,'"));
    CHECK(contains(refusal(etcd_url, "etcd://h:1,,h:2"), "empty entry"));
    CHECK(contains(refusal(etcd_url, "etcd://h?ttl=5&ttl=6"), "query key 'ttl' is given twice"));
    CHECK(refusal(etcd_url, "etcd://[::1]junk") == "text after the bracketed host '[::1]': 'junk'");
    CHECK(contains(refusal(etcd_url, "etcd://h:1:2"), "more than one ':'"));
    CHECK(contains(refusal(etcd_url, "etcd://::1:2379"), "an IPv6 address goes in brackets"));
    CHECK(contains(refusal(etcd_url, "etcd://h\x01:1"), "control byte"));
    CHECK(contains(refusal(etcd_url, "etcd://h:1?ttl=1"), "'ttl=1': expected a whole number of seconds from 2"));
    CHECK(contains(refusal(etcd_url, "etcd://h:1?ca=x"), "etcds://"));
    CHECK(contains(refusal(etcd_url, "etcd://:pw@h:1"), "a password without a user name"));
    CHECK(contains(refusal(etcd_url, "etcd://h:1?prefix="), "prefix"));
    CHECK(contains(refusal(etcd_url, "etcd://h:1/v3"), "take no path"));
    for (const char* bad : {"", "http://h:1", "etcd://", "etcd://h:0", "etcd://h:65536", "etcd://h:x", "etcd://[::1",
                            "etcd://h:1?ttl=0", "etcd://h:1?ttl=-3", "etcd://h:1?what=1", "etcd://,h:1"})
        refusal(etcd_url, bad);
}

TEST_CASE("url: ZooKeeper accepts its forms, refuses the rest with words", "[url][zookeeper]")
{
    auto z = dl::zookeeper::config::from_url(
        "zk://u:p%w@127.0.0.1:2181,[::1]:2182,localhost/app/x?prefix=/locks&timeout=4000");
    REQUIRE(z);
    REQUIRE(z->servers.size() == 3);
    CHECK(z->servers[1].host == "::1");
    CHECK(z->servers[1].port == 2182);
    CHECK(z->servers[2].port == 2181);
    CHECK(z->chroot == "/app/x");
    CHECK(z->prefix == "/locks");
    CHECK(z->session_timeout == 4s);
    CHECK(z->password == "p%w");
    CHECK(dl::zookeeper::config::from_url("zk://h/")->chroot.empty());

    CHECK(contains(refusal(zk_url, "zk://h:1,"), "empty entry in the host list"));
    CHECK(contains(refusal(zk_url, "zk://h?timeout=1000&timeout=2000"), "given twice"));
    CHECK(refusal(zk_url, "zk://[::1]junk/app") == "text after the bracketed host '[::1]': 'junk'");
    CHECK(contains(refusal(zk_url, "zk://h:1:2"), "more than one ':'"));
    CHECK(contains(refusal(zk_url, "zk://h/a\x01"), "control byte"));
    CHECK(contains(refusal(zk_url, "zk://h\0"s), "control byte '\\x00'"));
    CHECK(contains(refusal(zk_url, "zk://h//a"), "chroot '//a' is not an absolute path"));
    CHECK(contains(refusal(zk_url, "zk://h?prefix=locks"), "prefix 'locks' is not an absolute path"));
    CHECK(contains(refusal(zk_url, "zk://h?prefix=/zookeeper/x"), "under /zookeeper"));
    CHECK(contains(refusal(zk_url, "zk://h?timeout=99"), "milliseconds from 100 to 3600000"));
    for (const char* bad : {"", "etcd://h:1", "zk://", "zk://h:0", "zk://h:65536", "zk://h:x", "zk://[::1",
                            "zk://h/a/", "zk://h/a/../b", "zk://h?prefix=", "zk://h?prefix=/", "zk://h?timeout=0",
                            "zk://h?what=1", "zk://,h", "zk://:pw@h", "zk://u:v:w@h?prefix=/a\x01"})
        refusal(zk_url, bad);
}

TEST_CASE("url: DynamoDB accepts its forms, refuses the rest with words", "[url][dynamodb]")
{
    auto d = dl::dynamodb::config::from_url("dynamodb://127.0.0.1:8123?table=locks&region=eu-west-1&mode=expiry_time");
    REQUIRE(d);
    CHECK(d->host == "127.0.0.1");
    CHECK(d->port == 8123);
    CHECK(d->table == "locks");
    CHECK(d->region == "eu-west-1");
    CHECK(d->mode == dl::dynamodb::lease_mode::expiry_time);
    CHECK_FALSE(d->tls);
    auto s = dl::dynamodb::config::from_url("dynamodbs://dynamodb.eu-west-1.amazonaws.com/?table=locks");
    REQUIRE(s);
    CHECK(s->tls);
    CHECK(s->port == 443);
    CHECK(s->mode == dl::dynamodb::lease_mode::record_version);
    CHECK(dl::dynamodb::config::from_url("dynamodb://localhost")->port == 8000);
    auto v6 = dl::dynamodb::config::from_url("dynamodb://[::1]:8000");
    REQUIRE(v6);
    CHECK(v6->host == "::1"); // without its brackets, as every store has it

    CHECK(refusal(ddb_url, "dynamodb://[::1]junk:80") == "text after the bracketed host '[::1]': 'junk:80'");
    CHECK(contains(refusal(ddb_url, "dynamodb://[::1"), "unclosed '['"));
    CHECK(contains(refusal(ddb_url, "dynamodb://[]:80"), "empty host"));
    CHECK(contains(refusal(ddb_url, "dynamodb://h:1:2"), "more than one ':'"));
    CHECK(contains(refusal(ddb_url, "dynamodb://h\0:80"s), "control byte '\\x00'"));
    CHECK(contains(refusal(ddb_url, "dynamodb://u@h"), "take no user name or password"));
    CHECK(contains(refusal(ddb_url, "dynamodb://h/x"), "take no path"));
    CHECK(contains(refusal(ddb_url, "dynamodb://h,i"), "name one host"));
    CHECK(contains(refusal(ddb_url, "dynamodb://h?table=abc&table=def"), "given twice"));
    CHECK(contains(refusal(ddb_url, "dynamodb://h?table=x"), "table 'x': a DynamoDB table name is 3 to 255"));
    CHECK(contains(refusal(ddb_url, "dynamodb://h?mode=lax"),
                   "'mode=lax': expected one of record_version, expiry_time"));
    CHECK(contains(refusal(ddb_url, "dynamodb://h?region=eu west"), "region 'eu west'"));
    for (const char* bad : {"redis://x", "dynamodb://", "dynamodb://h:0", "dynamodb://h:99999",
                            "dynamodb://h?tabel=locks", "dynamodb://h?table", "dynamodb://h?table=bad name",
                            "dynamodb://h?region="})
        refusal(ddb_url, bad);
}

#endif // DISTLOCK_URL_TEST_NO_STORES

#ifndef DISTLOCK_URL_TEST_NO_POSTGRES
TEST_CASE("url: PostgreSQL hands libpq its URI without distlock's parameters, ports checked", "[url][postgres]")
{
    namespace pg = dl::postgres;
    auto c = pg::config::from_url("postgres://locker@127.0.0.1:5433/app?sslmode=disable&table=locks&pool=4");
    REQUIRE(c);
    CHECK(c->table == "locks");
    CHECK(c->pool_size == 4);
    CHECK(c->conninfo == "postgres://locker@127.0.0.1:5433/app?sslmode=disable");
    auto n = pg::config::from_url("postgresql://127.0.0.1/app?advisory_namespace=-7&channel=ch_1");
    REQUIRE(n);
    CHECK(n->advisory_namespace == -7);
    CHECK(n->channel == "ch_1");
    CHECK(n->conninfo == "postgresql://127.0.0.1/app");
    // libpq's own forms: no host (the local socket), several hosts, percent escapes
    // (which libpq decodes), IPv6.
    CHECK(pg::config::from_url("postgres:///app")->conninfo == "postgres:///app");
    CHECK(pg::config::from_url("postgres://u:p%40ss@/app?host=/tmp")->conninfo == "postgres://u:p%40ss@/app?host=/tmp");
    CHECK(pg::config::from_url("postgresql://h1:5432,h2:5433,[::1]/app?target_session_attrs=read-write"));
    CHECK(pg::config::from_url("postgresql://%2Fvar%2Frun%2Fpostgresql/app"));

    // A port out of range is refused here, not passed on (libpq would accept it).
    CHECK(contains(refusal(pg_url, "postgres://h:99999/db"), "port '99999' of 'h:99999'"));
    CHECK(contains(refusal(pg_url, "postgres://h1:5432,h2:0/db"), "port '0'"));
    CHECK(contains(refusal(pg_url, "postgres://h/db?port=70000"), "libpq: port '70000'"));
    CHECK(contains(refusal(pg_url, "postgres://h1,/db"), "empty entry in the host list"));
    CHECK(refusal(pg_url, "postgres://[::1]junk/db") == "text after the bracketed host '[::1]': 'junk'");
    CHECK(contains(refusal(pg_url, "postgres://h:1:2/db"), "more than one ':'"));
    CHECK(contains(refusal(pg_url, "postgres://h/db?table=a&table=b"), "query key 'table' is given twice"));
    CHECK(contains(refusal(pg_url, "postgres://h/db?sslmode=disable&sslmode=require"), "'sslmode' is given twice"));
    CHECK(contains(refusal(pg_url, "postgres://h/db?pool=0"),
                   "'pool=0': expected a whole decimal number from 1 to 64"));
    CHECK(contains(refusal(pg_url, "postgres://h/db?table=a;b"), "table 'a;b'"));
    CHECK(contains(refusal(pg_url, "postgres://h/db?nosuchoption=1"), "libpq: "));
    CHECK(contains(refusal(pg_url, "postgres://h/db\x1b"), "control byte"));
    for (const char* bad : {"redis://x", "postgres://h/db?table=bad name", "postgres://h/db?pool=x",
                            "postgres://h/db?advisory_namespace=99999999999", "postgres://h/db?table"})
        refusal(pg_url, bad);

    // A program's own parameter, taken out before the store reads the rest.
    auto parsed = backend::parse_url("postgres://h/db?mode=advisory&table=t", pg::config::url_rules());
    REQUIRE(parsed);
    CHECK(backend::take_query(*parsed, "mode")->value == "advisory");
    auto cfg = pg::config::from_parsed_url(std::move(parsed).value());
    REQUIRE(cfg);
    CHECK(cfg->table == "t");
    CHECK(cfg->conninfo == "postgres://h/db");
}
#endif // DISTLOCK_URL_TEST_NO_POSTGRES

TEST_CASE("url: an authority brackets an IPv6 host and leaves out a default port", "[url]")
{
    using distlock::backend::authority;
    CHECK(authority("127.0.0.1", 8000) == "127.0.0.1:8000");
    CHECK(authority("::1", 8000) == "[::1]:8000");
    CHECK(authority("::1", 443, true) == "[::1]");
    CHECK(authority("dynamodb.eu-west-1.amazonaws.com", 443, true) == "dynamodb.eu-west-1.amazonaws.com");
}
