// libFuzzer target for the store URL parser (backend/url.hpp; clang:
// -fsanitize=fuzzer,address,undefined). The stores' config headers need Asio, which
// this target does not compile, so it reads the input by rules shaped like each
// store's, and by one set of rules the input's first byte picks. Besides "no crash, no
// sanitizer report", it checks:
//  - a refusal is errc::invalid_argument with a message;
//  - an accepted URL keeps its rules: a scheme among theirs; hosts present unless they
//    may be left out, one unless a list is allowed; every host non-empty, at most 255
//    bytes, without control bytes, and its port from 1 to 65535; a socket path that is
//    not empty; no query key twice, and only known keys unless others are handed on;
//  - parsed_url::text() reads back to the same parts (what a store hands on, such as a
//    postgres:// URL to libpq, means what was checked);
//  - the query readers take any value, and what they accept lies in their range.
// Run by `./dev test` for a bounded time; longer runs: see docs/architecture.md.
#include <distlock/backend/url.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace backend = distlock::backend;

namespace {

const std::vector<backend::url_rules>& store_like_rules()
{
    static const std::vector<backend::url_rules> rules{
        {.schemes = {"redis", "rediss"}, .default_port = 6379, .userinfo = true, .path = true, .query_keys = {"dialect"}},
        {.schemes = {"unix"}, .socket_path = true, .query_keys = {"db", "dialect"}},
        {.schemes = {"redis+cluster", "rediss+cluster"}, .several_hosts = true, .userinfo = true, .query_keys = {"dialect"}},
        {.schemes = {"redis+sentinel", "rediss+sentinel"}, .several_hosts = true, .userinfo = true, .path = true, .query_keys = {"dialect"}},
        {.schemes = {"etcd", "etcds"},
         .default_port = 2379,
         .several_hosts = true,
         .userinfo = true,
         .query_keys = {"prefix", "ttl", "dialect", "ca"}},
        {.schemes = {"zk"},
         .default_port = 2181,
         .several_hosts = true,
         .userinfo = true,
         .path = true,
         .query_keys = {"prefix", "timeout", "dialect"}},
        {.schemes = {"dynamodb", "dynamodbs"}, .default_port = 8000, .query_keys = {"table", "region", "mode", "dialect", "key_attribute"}},
        {.schemes = {"postgres", "postgresql"},
         .default_port = 5432,
         .several_hosts = true,
         .host_optional = true,
         .userinfo = true,
         .path = true,
         .query_keys = {"table", "channel", "pool", "advisory_namespace", "advisory_key"},
         .other_query_keys = true},
    };
    return rules;
}

// Every combination of the rules' switches, from one byte.
backend::url_rules rules_from(std::uint8_t bits)
{
    backend::url_rules r{.schemes = {"s", "x+y"}};
    r.default_port = (bits & 1) ? 80 : 0;
    r.several_hosts = bits & 2;
    r.host_optional = bits & 4;
    r.userinfo = bits & 8;
    r.path = bits & 16;
    r.socket_path = bits & 32;
    if (bits & 64)
        r.query_keys = {"a", "b"};
    r.other_query_keys = bits & 128;
    return r;
}

bool is_control(char c)
{
    const auto byte = static_cast<unsigned char>(c);
    return byte < 0x20 || byte == 0x7f;
}

void read_values(const backend::query_pair& pair)
{
    if (const auto n = backend::query_number(pair, -5, 70000); n && (*n < -5 || *n > 70000))
        __builtin_trap();
    if (const auto p = backend::query_number<std::uint16_t>(pair, 1, 65535); p && *p == 0)
        __builtin_trap();
    const auto d = backend::query_duration(pair, std::chrono::milliseconds{100}, std::chrono::milliseconds{3'600'000});
    if (d && (*d < std::chrono::milliseconds{100} || *d > std::chrono::hours{1}))
        __builtin_trap();
    (void)backend::query_bool(pair);
    if (const auto c = backend::query_choice(pair, {"table", "advisory"}); c && *c > 1)
        __builtin_trap();
}

void check(std::string_view in, const backend::url_rules& rules)
{
    std::string why;
    auto url = backend::parse_url(in, rules, &why);
    if (!url) {
        if (url.error() != distlock::errc::invalid_argument || why.empty())
            __builtin_trap();
        return;
    }
    bool known_scheme = false;
    for (const auto& s : rules.schemes)
        known_scheme = known_scheme || s == url->scheme;
    if (!known_scheme)
        __builtin_trap();
    if (rules.socket_path) {
        if (url->path.empty() || !url->hosts.empty())
            __builtin_trap();
    } else {
        if (url->hosts.empty() && !rules.host_optional)
            __builtin_trap();
        if (url->hosts.size() > 1 && !rules.several_hosts)
            __builtin_trap();
    }
    for (const auto& h : url->hosts) {
        if (h.host.empty() || h.host.size() > 255 || h.port == 0)
            __builtin_trap();
        for (const char c : h.host)
            if (is_control(c) || c == '/' || c == '@' || c == ',' || c == '[' || c == ']' || c == '?')
                __builtin_trap();
        if (h.host.find(':') == std::string::npos && h.host.find('%') != std::string::npos) {
            // A name's '%' starts an escape of two hex digits.
            for (std::size_t i = h.host.find('%'); i != std::string::npos; i = h.host.find('%', i + 1))
                if (i + 2 >= h.host.size())
                    __builtin_trap();
        }
    }
    for (std::size_t i = 0; i < url->query.size(); ++i) {
        const auto& pair = url->query[i];
        if (pair.key.empty())
            __builtin_trap();
        for (std::size_t j = 0; j < i; ++j)
            if (url->query[j].key == pair.key)
                __builtin_trap();
        bool listed = false;
        for (const auto& k : rules.query_keys)
            listed = listed || k == pair.key;
        if (!listed && !rules.other_query_keys)
            __builtin_trap();
        read_values(pair);
    }
    const auto again = backend::parse_url(url->text(), rules);
    if (!again || again->scheme != url->scheme || again->user != url->user || again->password != url->password ||
        again->hosts != url->hosts || again->path != url->path || again->query != url->query)
        __builtin_trap();
    // Without a parameter, the URL hands on no '?' (what libpq would read as a query).
    if (!url->query.empty()) {
        auto fewer = *url;
        backend::take_query(fewer, fewer.query.front().key);
        const auto without = backend::parse_url(fewer.text(), rules);
        if (!without || without->query.size() + 1 != url->query.size() || without->hosts != url->hosts)
            __builtin_trap();
    }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    const std::string_view in{reinterpret_cast<const char*>(data), size};
    for (const auto& rules : store_like_rules())
        check(in, rules);
    if (size > 0) {
        // The first byte picks the rules; the rest, with a scheme they take, is the URL.
        const auto rules = rules_from(data[0]);
        check("s://" + std::string{in.substr(1)}, rules);
        check(in.substr(1), rules);
    }
    // A scheme is what precedes the first "://".
    if (const auto scheme = backend::url_scheme(in);
        !scheme.empty() && (!in.substr(scheme.size()).starts_with("://") || scheme.find("://") != scheme.npos))
        __builtin_trap();
    (void)backend::quoted(in);
    return 0;
}
