// distlock/backend/url.hpp: the one reading of store URLs, shared by every store's
// config::from_url() and by the command line.
//
// Why one parser: a URL is where a typing mistake meets the network, and a store that
// reads its URL with string slicing of its own agrees with the others on the easy
// cases only. At the edges (text after a bracketed IPv6 host, a trailing comma, a
// second port, a control byte in a host name) one store refused what another accepted
// with a meaning nobody intended, and every refusal said only "invalid argument". Here
// the grammar is written once; each store states what its URLs may hold (url_rules)
// and reads the parts it is given; and every refusal says what is wrong and where, in
// words a person can act on.
//
// The grammar, for every scheme:
//
//   scheme://[user[:password]@]host[:port][,host[:port]...][/path][?key=value[&key=value...]]
//   scheme://socket-path[?key=value...]        (url_rules::socket_path: unix:///run/redis.sock)
//
// - Nothing is percent-decoded: every part is taken as written, '%' included. (A
//   postgres:// URL is then read by libpq, which decodes its escapes itself.)
// - A URL is printable text: a control byte (below 0x20, or 0x7f) anywhere is refused.
// - The query begins at the first '?', in the schemes that take one; elsewhere '?' is an
//   ordinary character (a password may hold it).
// - Before the query, the user information ends at the last '@', so that a password may
//   hold '@', ':' and '/'; the user name ends at its first ':'. The host list ends at the
//   first '/' after that, where the path begins.
// - A host is a name (letters, digits, '-', '.', '_', '~' and %XX escapes, at most 255
//   bytes) or an IPv6 address in brackets, followed by nothing else or by ':' and a
//   decimal port from 1 to 65535. A host without a port takes the scheme's default
//   port, or is refused when the scheme has none. "host:1:2" and an IPv6 address
//   without brackets are refused: a host has one port.
// - Lists (hosts, query parameters) refuse empty entries: a ',' or '&' at either end or
//   two in a row.
// - Each query key appears once, and is one the scheme knows (or, with
//   url_rules::other_query_keys, one it hands on to another reader).
//
// Pure functions over text: no I/O, no Asio, no exceptions of its own, so that it is
// fuzzed on its own (test/fuzz/url_parser.cpp).
#pragma once

#include <distlock/error.hpp>
#include <distlock/util/result_type.hpp>

#include <charconv>
#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <ratio>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

namespace distlock::backend {

/// One server of a URL's host list.
struct host_port {
    std::string host;       ///< A host name, or an IPv6 address without its brackets; as written.
    std::uint16_t port = 0; ///< 1 to 65535: as written, or the scheme's default port.

    friend bool operator==(const host_port&, const host_port&) = default;
};

/// One `key=value` parameter of a URL's query, as written (the value may hold '=').
struct query_pair {
    std::string key;
    std::string value;

    friend bool operator==(const query_pair&, const query_pair&) = default;
};

/// What the URLs of one kind may hold: a store states its rules, and parse_url()
/// refuses anything else, saying which rule the URL broke.
struct url_rules {
    /// The schemes these rules read, without "://" ("redis", "rediss"). Compared
    /// exactly: schemes are written in lower case.
    std::vector<std::string_view> schemes;
    /// The port of a host written without one; 0: every host must name its port.
    std::uint16_t default_port = 0;
    /// A comma-separated list of hosts (the members of a cluster); else one host.
    bool several_hosts = false;
    /// The host list may be left empty (`postgres:///db`: libpq's local socket).
    bool host_optional = false;
    /// `user[:password]@` before the hosts.
    bool userinfo = false;
    /// A path after the hosts (`/db`), handed to the store as written. Without it, a
    /// lone '/' after the hosts is allowed and means nothing.
    bool path = false;
    /// The text after "//" (up to the query) is the path of a Unix socket, not hosts:
    /// `unix:///run/redis.sock`. It is in parsed_url::path, and must not be empty.
    bool socket_path = false;
    /// The query keys these URLs take. With none (and no other_query_keys), the URLs
    /// have no query, and '?' is an ordinary character.
    std::vector<std::string_view> query_keys;
    /// Keys beyond query_keys are accepted and left in parsed_url::query, for another
    /// reader (a postgres:// URL's libpq parameters).
    bool other_query_keys = false;

    /// Whether '?' begins a query in these URLs.
    bool takes_query() const noexcept { return !query_keys.empty() || other_query_keys; }
};

/// A URL that parse_url() accepted, in parts, each as written.
struct parsed_url {
    std::string scheme;                  ///< One of url_rules::schemes.
    std::string user;                    ///< Before the first ':' of the user information; empty without it.
    std::optional<std::string> password; ///< After that ':'; none when the user information has no ':'.
    std::vector<host_port> hosts;        ///< In the order written; empty only by host_optional or socket_path.
    std::string path;                    ///< From the '/' after the hosts (or the socket path); empty when none.
    std::vector<query_pair> query;       ///< In the order written; no key twice.
    std::string before_query;            ///< The URL as written up to its query ('?' left out).

    /// The URL as written, with the query parameters now in `query`, in their order:
    /// how a store hands on a URL whose own parameters it has taken out (take_query()).
    std::string text() const
    {
        std::string out = before_query;
        char separator = '?';
        for (const auto& [key, value] : query) {
            out += separator;
            out += key;
            out += '=';
            out += value;
            separator = '&';
        }
        return out;
    }
};

/// A server's address in a store's settings: a host name or IP address and a port,
/// `DefaultPort` unless given (etcd::member, zookeeper::server).
template <std::uint16_t DefaultPort>
struct server_address {
    std::string host = "127.0.0.1";
    std::uint16_t port = DefaultPort;
};

/// `host[:port]` as an HTTP Host header or an authority writes it: an IPv6 address
/// in brackets, the port left out when it is the scheme's default.
inline std::string authority(std::string_view host, std::uint16_t port, bool default_port = false)
{
    std::string out;
    const bool v6 = host.find(':') != std::string_view::npos;
    if (v6)
        out += '[';
    out += host;
    if (v6)
        out += ']';
    if (!default_port)
        out += ":" + std::to_string(port);
    return out;
}

/// `text` in single quotes, for a message: bytes outside printable ASCII are written as
/// a backslash, 'x' and two hex digits, and text over `most` bytes is cut short with
/// "..." (a message quotes the part it is about, not a whole page).
inline std::string quoted(std::string_view text, std::size_t most = 120)
{
    constexpr const char* hex = "0123456789abcdef";
    std::string out = "'";
    for (std::size_t i = 0; i < text.size() && i < most; ++i) {
        const auto byte = static_cast<unsigned char>(text[i]);
        if (byte < 0x20 || byte >= 0x7f) {
            out += "\\x";
            out += hex[byte >> 4];
            out += hex[byte & 0xf];
        } else {
            out += static_cast<char>(byte);
        }
    }
    if (text.size() > most)
        out += "...";
    out += '\'';
    return out;
}

/// How a URL is refused: `message` goes to `*why` when the caller asked for it (`why`
/// not null), and the error is errc::invalid_argument. A store's from_url() refuses
/// its own way through this too, so that every refusal carries its words.
inline std::error_code refused(std::string* why, std::string message)
{
    if (why)
        *why = std::move(message);
    return make_error_code(errc::invalid_argument);
}

/// The scheme of `text`: what comes before its first "://", when that is shaped like a
/// scheme (a letter, then letters, digits, '+', '-' and '.'); else empty. So that a store
/// with several kinds of URL picks the rules to parse it with.
inline std::string_view url_scheme(std::string_view text) noexcept
{
    const auto end = text.find("://");
    if (end == std::string_view::npos || end == 0)
        return {};
    const auto letter = [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); };
    for (std::size_t i = 0; i < end; ++i) {
        const char c = text[i];
        if (!(letter(c) || (i > 0 && ((c >= '0' && c <= '9') || c == '+' || c == '-' || c == '.'))))
            return {};
    }
    return text.substr(0, end);
}

/// `text` as a whole decimal number from `least` to `most`: digits only, with a leading
/// '-' for a negative number; no sign '+', no spaces. None otherwise (out of range
/// included).
template <std::integral T>
    requires(!std::same_as<T, bool>)
std::optional<T> decimal(std::string_view text, T least, T most) noexcept
{
    const std::size_t digits_from = text.starts_with('-') ? 1 : 0;
    if (text.size() == digits_from)
        return std::nullopt;
    for (std::size_t i = digits_from; i < text.size(); ++i)
        if (text[i] < '0' || text[i] > '9')
            return std::nullopt;
    T value{};
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (ec != std::errc{} || end != text.data() + text.size() || value < least || value > most)
        return std::nullopt;
    return value;
}

namespace detail {

inline std::string list_of(const std::vector<std::string_view>& items, std::string_view suffix = {})
{
    std::string out;
    for (const auto& item : items) {
        if (!out.empty())
            out += ", ";
        out += item;
        out += suffix;
    }
    return out;
}

inline bool is_hex(char c) noexcept
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

// RFC 3986's unreserved characters: what a host name and an IPv6 zone are made of.
inline bool is_unreserved(char c) noexcept
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '.' ||
           c == '_' || c == '~';
}

// Four decimal numbers from 0 to 255 joined by '.', each of 1 to 3 digits.
inline bool is_ipv4(std::string_view s) noexcept
{
    for (int part = 0; part < 4; ++part) {
        if (part > 0) {
            if (!s.starts_with('.'))
                return false;
            s.remove_prefix(1);
        }
        std::size_t digits = 0;
        unsigned value = 0;
        while (digits < s.size() && digits < 4 && s[digits] >= '0' && s[digits] <= '9')
            value = value * 10 + static_cast<unsigned>(s[digits++] - '0');
        if (digits == 0 || digits > 3 || value > 255)
            return false;
        s.remove_prefix(digits);
    }
    return s.empty();
}

// An IPv6 address as RFC 4291 writes it: eight groups of 1 to 4 hex digits, one run of
// zero groups shortened to "::" at most once, the last two groups possibly written as
// an IPv4 address; then optionally '%' and a zone (an interface name).
inline bool is_ipv6(std::string_view s) noexcept
{
    if (const auto percent = s.find('%'); percent != std::string_view::npos) {
        const auto zone = s.substr(percent + 1);
        if (zone.empty())
            return false;
        for (const char c : zone)
            if (!is_unreserved(c))
                return false;
        s = s.substr(0, percent);
    }
    std::size_t groups = 0;
    bool shortened = false;
    if (s.starts_with("::")) {
        shortened = true;
        s.remove_prefix(2);
    } else if (s.empty() || s.starts_with(':')) {
        return false;
    }
    while (!s.empty()) {
        std::size_t digits = 0;
        while (digits < s.size() && is_hex(s[digits]))
            ++digits;
        if (digits < s.size() && s[digits] == '.') { // the IPv4 tail: the last 32 bits
            if (!is_ipv4(s))
                return false;
            groups += 2;
            break;
        }
        if (digits == 0 || digits > 4)
            return false;
        ++groups;
        s.remove_prefix(digits);
        if (s.empty())
            break;
        if (s[0] != ':')
            return false;
        s.remove_prefix(1);
        if (s.starts_with(':')) {
            if (shortened)
                return false;
            shortened = true;
            s.remove_prefix(1);
        } else if (s.empty()) {
            return false; // a single ':' at the end
        }
    }
    return shortened ? groups <= 7 : groups == 8;
}

// One entry of a host list: "name[:port]" or "[v6][:port]".
inline result<host_port> parse_host(std::string_view entry, const url_rules& rules, std::string* why)
{
    constexpr std::size_t longest_name = 255; // DNS's limit on a whole name
    host_port out;
    std::string_view name, port;
    bool has_port = false;
    if (entry.starts_with('[')) {
        const auto close = entry.find(']');
        if (close == std::string_view::npos)
            return refused(why, "unclosed '[' in " + backend::quoted(entry) + " (an IPv6 address goes in brackets: [::1]:port)");
        name = entry.substr(1, close - 1);
        const auto after = entry.substr(close + 1);
        if (!after.empty() && !after.starts_with(':'))
            return refused(why, "text after the bracketed host " + backend::quoted(entry.substr(0, close + 1)) + ": " +
                                    backend::quoted(after));
        if (name.empty())
            return refused(why, "empty host in " + backend::quoted(entry));
        if (!is_ipv6(name))
            return refused(why, backend::quoted(name) + " in brackets is not an IPv6 address");
        if (!after.empty()) {
            has_port = true;
            port = after.substr(1);
        }
    } else {
        const auto colon = entry.find(':');
        if (colon != std::string_view::npos && entry.find(':', colon + 1) != std::string_view::npos)
            return refused(why, backend::quoted(entry) + " has more than one ':' (a host has one port; an IPv6 address " +
                                    "goes in brackets: [::1]:port)");
        name = entry.substr(0, colon);
        if (colon != std::string_view::npos) {
            has_port = true;
            port = entry.substr(colon + 1);
        }
        if (name.empty())
            return refused(why, "no host before the port in " + backend::quoted(entry));
        if (name.size() > longest_name)
            return refused(why, "host " + backend::quoted(name) + " is longer than 255 bytes");
        for (std::size_t i = 0; i < name.size(); ++i) {
            if (name[i] == '%') {
                if (i + 2 >= name.size() || !is_hex(name[i + 1]) || !is_hex(name[i + 2]))
                    return refused(why, "host " + backend::quoted(name) + " has a '%' not followed by two hex digits");
                i += 2;
            } else if (!is_unreserved(name[i])) {
                return refused(why, "host " + backend::quoted(name) + " has a character a host name cannot have: " +
                                        backend::quoted(name.substr(i, 1)) +
                                        " (letters, digits, '-', '.', '_', '~' and %XX escapes)");
            }
        }
    }
    out.host = std::string{name};
    if (has_port) {
        const auto number = decimal<std::uint16_t>(port, 1, 65535);
        if (port.empty())
            return refused(why, "no port after ':' in " + backend::quoted(entry));
        if (!number)
            return refused(why, "port " + backend::quoted(port) + " of " + backend::quoted(entry) +
                                    " is not a decimal number from 1 to 65535");
        out.port = *number;
    } else if (rules.default_port == 0) {
        return refused(why, backend::quoted(entry) + " has no port (host:port)");
    } else {
        out.port = rules.default_port;
    }
    return out;
}

template <class Period>
constexpr const char* unit_name() noexcept
{
    if constexpr (std::same_as<Period, std::nano>)
        return "nanoseconds";
    else if constexpr (std::same_as<Period, std::micro>)
        return "microseconds";
    else if constexpr (std::same_as<Period, std::milli>)
        return "milliseconds";
    else if constexpr (std::same_as<Period, std::ratio<1>>)
        return "seconds";
    else if constexpr (std::same_as<Period, std::ratio<60>>)
        return "minutes";
    else if constexpr (std::same_as<Period, std::ratio<3600>>)
        return "hours";
    else
        return "units";
}

} // namespace detail

/// Reads `text` by `rules` (the grammar is at the top of this header). A URL that breaks
/// a rule is errc::invalid_argument, with `*why` (when not null) saying what is wrong
/// and where, such as "text after the bracketed host '[::1]': 'junk'". The messages
/// quote the parts they are about but never the user information, which may hold a
/// password.
inline result<parsed_url> parse_url(std::string_view text, const url_rules& rules, std::string* why = nullptr)
{
    constexpr std::size_t longest_url = 8192;
    if (text.size() > longest_url)
        return refused(why, "longer than 8192 bytes");
    for (std::size_t i = 0; i < text.size(); ++i) {
        const auto byte = static_cast<unsigned char>(text[i]);
        if (byte < 0x20 || byte == 0x7f)
            return refused(why, "control byte " + backend::quoted(text.substr(i, 1)) + " at byte " + std::to_string(i) +
                                    " (a URL is printable text)");
    }
    const auto expected = detail::list_of(rules.schemes, "://");
    const auto scheme = url_scheme(text);
    if (scheme.empty())
        return refused(why, "no scheme: expected " + expected);
    const auto scheme_end = scheme.size();
    parsed_url url;
    url.scheme = std::string{scheme};
    bool known = false;
    for (const auto& s : rules.schemes)
        known = known || s == url.scheme;
    if (!known)
        return refused(why, "scheme " + backend::quoted(url.scheme) + " is not one of " + expected);
    const std::string what = url.scheme + "://";
    std::string_view rest = text.substr(scheme_end + 3);

    std::string_view query;
    bool has_query = false;
    if (const auto q = rest.find('?'); rules.takes_query() && q != std::string_view::npos) {
        query = rest.substr(q + 1);
        rest = rest.substr(0, q);
        has_query = true;
    }
    url.before_query = std::string{text.substr(0, scheme_end + 3 + rest.size())};

    if (rules.socket_path) {
        if (rest.empty())
            return refused(why, "no socket path after " + backend::quoted(what));
        url.path = std::string{rest};
    } else {
        if (const auto at = rest.rfind('@'); at != std::string_view::npos) {
            if (!rules.userinfo)
                return refused(why, what + " URLs take no user name or password (the text before '@')");
            const auto userinfo = rest.substr(0, at);
            const auto colon = userinfo.find(':');
            url.user = std::string{userinfo.substr(0, colon)};
            if (colon != std::string_view::npos)
                url.password = std::string{userinfo.substr(colon + 1)};
            rest.remove_prefix(at + 1);
        }
        std::string_view hosts = rest;
        if (const auto slash = rest.find('/'); slash != std::string_view::npos) {
            hosts = rest.substr(0, slash);
            const auto path = rest.substr(slash);
            if (rules.path)
                url.path = std::string{path};
            else if (path != "/")
                return refused(why, what + " URLs take no path: " + backend::quoted(path));
        }
        if (hosts.empty() && !rules.host_optional)
            return refused(why, "no host: expected host[:port] after " + backend::quoted(what) +
                                    (url.user.empty() && !url.password ? "" : " and the user information"));
        if (!rules.several_hosts && hosts.find(',') != std::string_view::npos)
            return refused(why, backend::quoted(hosts) + ": " + what + " URLs name one host");
        const auto host_list = hosts;
        while (!hosts.empty()) {
            const auto comma = hosts.find(',');
            const auto entry = hosts.substr(0, comma);
            if (entry.empty() || (comma != std::string_view::npos && comma + 1 == hosts.size()))
                return refused(why, "empty entry in the host list " + backend::quoted(host_list) +
                                        " (a ',' at either end, or two in a row)");
            auto host = detail::parse_host(entry, rules, why);
            if (!host)
                return host.error();
            url.hosts.push_back(std::move(host).value());
            hosts = comma == std::string_view::npos ? std::string_view{} : hosts.substr(comma + 1);
        }
    }

    if (has_query && !query.empty()) {
        const auto known_keys = detail::list_of(rules.query_keys);
        while (true) {
            const auto amp = query.find('&');
            const auto pair = query.substr(0, amp);
            if (pair.empty() || (amp != std::string_view::npos && amp + 1 == query.size()))
                return refused(why, "empty parameter in the query (a '&' at either end, or two in a row)");
            const auto eq = pair.find('=');
            if (eq == std::string_view::npos)
                return refused(why, "query parameter " + backend::quoted(pair) + " has no '=' (key=value)");
            if (eq == 0)
                return refused(why, "query parameter " + backend::quoted(pair) + " has no key before '='");
            query_pair p{std::string{pair.substr(0, eq)}, std::string{pair.substr(eq + 1)}};
            for (const auto& earlier : url.query)
                if (earlier.key == p.key)
                    return refused(why, "query key " + backend::quoted(p.key) + " is given twice");
            bool listed = false;
            for (const auto& k : rules.query_keys)
                listed = listed || k == p.key;
            if (!listed && !rules.other_query_keys)
                return refused(why, "unknown query key " + backend::quoted(p.key) + " (" + what + " URLs take " +
                                        known_keys + ")");
            url.query.push_back(std::move(p));
            if (amp == std::string_view::npos)
                break;
            query.remove_prefix(amp + 1);
        }
    }
    return url;
}

/// Takes the parameter `key` out of `url`'s query: its pair, or none when the URL has
/// no such key. What stays is for parsed_url::text() (the parameters a store hands on).
inline std::optional<query_pair> take_query(parsed_url& url, std::string_view key)
{
    for (auto it = url.query.begin(); it != url.query.end(); ++it) {
        if (it->key == key) {
            auto out = std::move(*it);
            url.query.erase(it);
            return out;
        }
    }
    return std::nullopt;
}

/// The value of `pair` as a whole decimal number from `least` to `most` (decimal());
/// else errc::invalid_argument, `*why` naming the parameter and the range.
template <std::integral T>
    requires(!std::same_as<T, bool>)
result<T> query_number(const query_pair& pair, T least, T most, std::string* why = nullptr)
{
    if (const auto n = decimal(pair.value, least, most))
        return *n;
    return refused(why, backend::quoted(pair.key + "=" + pair.value) + ": expected a whole decimal number from " +
                            std::to_string(least) + " to " + std::to_string(most));
}

/// The value of `pair` as a whole number of `Duration`'s unit ("ttl=10" with
/// std::chrono::seconds is 10 s) from `least` to `most`; else errc::invalid_argument,
/// `*why` naming the parameter, the unit and the range.
template <class Rep, class Period>
result<std::chrono::duration<Rep, Period>> query_duration(const query_pair& pair,
                                                          std::chrono::duration<Rep, Period> least,
                                                          std::chrono::duration<Rep, Period> most,
                                                          std::string* why = nullptr)
{
    if (const auto n = decimal<Rep>(pair.value, least.count(), most.count()))
        return std::chrono::duration<Rep, Period>{*n};
    return refused(why, backend::quoted(pair.key + "=" + pair.value) + ": expected a whole number of " +
                            detail::unit_name<Period>() + " from " + std::to_string(least.count()) + " to " +
                            std::to_string(most.count()));
}

/// The value of `pair` as a truth value: "true" or "1", "false" or "0"; else
/// errc::invalid_argument, `*why` naming the parameter.
inline result<bool> query_bool(const query_pair& pair, std::string* why = nullptr)
{
    if (pair.value == "true" || pair.value == "1")
        return true;
    if (pair.value == "false" || pair.value == "0")
        return false;
    return refused(why, backend::quoted(pair.key + "=" + pair.value) + ": expected true or false");
}

/// The value of `pair` as one of `choices`: its index; else errc::invalid_argument,
/// `*why` naming the parameter and the choices.
inline result<std::size_t> query_choice(const query_pair& pair, std::initializer_list<std::string_view> choices,
                                        std::string* why = nullptr)
{
    std::size_t index = 0;
    for (const auto& choice : choices) {
        if (pair.value == choice)
            return index;
        ++index;
    }
    return refused(why, backend::quoted(pair.key + "=" + pair.value) + ": expected one of " +
                            detail::list_of(std::vector<std::string_view>{choices}));
}

} // namespace distlock::backend
