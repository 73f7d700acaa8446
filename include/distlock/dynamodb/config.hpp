// distlock/dynamodb/config.hpp: how to reach a DynamoDB endpoint, and which table.
#pragma once

#include <distlock/backend/url.hpp>
#include <distlock/clock.hpp>
#include <distlock/error.hpp>
#include <distlock/options.hpp>
#include <distlock/result.hpp>
#include <distlock/transport/stream.hpp>

#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <string>
#include <string_view>

namespace distlock::dynamodb {

/// AWS credentials. Empty: taken from AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and
/// AWS_SESSION_TOKEN when the store is made.
struct credentials {
    std::string access_key_id;
    std::string secret_access_key;
    std::string session_token; ///< temporary credentials (STS) only

    bool empty() const noexcept { return access_key_id.empty() && secret_access_key.empty(); }

    /// Shaped like AWS credentials: a key id of letters and digits, a secret and a
    /// session token of printable characters without spaces (they end up in the
    /// Authorization and X-Amz-Security-Token headers, so a line break would split
    /// the request). Checked before any request is sent.
    bool well_formed() const noexcept
    {
        const auto printable = [](std::string_view v, std::size_t most) {
            if (v.size() > most)
                return false;
            for (const char c : v)
                if (c <= ' ' || c > '~')
                    return false;
            return true;
        };
        if (access_key_id.empty() || access_key_id.size() > 128 || secret_access_key.empty())
            return false;
        for (const char c : access_key_id)
            if (!std::isalnum(static_cast<unsigned char>(c)))
                return false;
        return printable(secret_access_key, 256) && printable(session_token, 8192);
    }

    static credentials from_environment()
    {
        const auto get = [](const char* name) {
            const char* v = std::getenv(name);
            return std::string{v ? v : ""};
        };
        return {get("AWS_ACCESS_KEY_ID"), get("AWS_SECRET_ACCESS_KEY"), get("AWS_SESSION_TOKEN")};
    }
};

/// How a lock that is not released counts as over (docs/dynamodb.md).
enum class lease_mode {
    /// AWS's own lock client's rule, made to fence: every acquire and heartbeat writes
    /// a new random record version; a waiter takes over only after it has seen the
    /// same version for a whole lease duration on its own monotonic clock. No clock
    /// of day is trusted. A waiter always pays one lease duration of watching.
    record_version,
    /// The item carries an absolute expiry (ms since the Unix epoch) that acquirers
    /// compare with their own clock of day: takeover as soon as it passes (less
    /// clock_skew_margin), but clients whose clocks differ by more than the margin
    /// can both hold the lock.
    expiry_time,
};

/// Which clients' items the table holds (docs/dynamodb.md).
enum class dialect {
    /// distlock's own layout: a Binary `resource` key, the fence in the lock's item,
    /// shared grants beside the holder.
    distlock,
    /// The layout and rules of AWS's Java lock client (amazon-dynamodb-lock-client):
    /// a String key attribute (`key_attribute`), ownerName, recordVersionNumber (a
    /// UUID), leaseDuration (a string of milliseconds), isReleased, taken over only
    /// after a whole lease seen unchanged. distlock and that client exclude each
    /// other on one table. The fence counter is an item of its own (the lock's name
    /// under the reserved prefix `distlock#fence#`). Exclusive locks only.
    aws,
};

struct config {
    std::string host = "127.0.0.1";
    std::uint16_t port = 8000;
    bool tls = false;                ///< HTTPS (certificate and host name verified)
    std::string tls_ca_file;         ///< trusted CAs (PEM); empty: the system's
    std::string table = "distlock";  ///< one item per resource, key attribute "resource" (Binary)
    std::string region;              ///< empty: AWS_REGION, then AWS_DEFAULT_REGION, then us-east-1
    dynamodb::credentials credentials;

    /// Bounds connecting (and the TLS handshake). In (0, distlock::max_wait].
    duration connect_timeout = std::chrono::seconds{2};
    /// A request without a response after this long is errc::outcome_unknown and the
    /// connection is dropped. In (0, distlock::max_wait].
    duration request_timeout = std::chrono::seconds{2};
    /// Expiry-time mode trusts the clients' wall clocks: a lock counts as expired
    /// only when its expiry is this far in the past by the acquirer's clock, so
    /// clocks that differ by less than this never let two owners in. In
    /// [0, distlock::max_wait].
    duration clock_skew_margin = std::chrono::seconds{1};
    /// Every client of a table must use the same mode.
    lease_mode mode = lease_mode::record_version;
    /// The table's layout. Every client of a table must use the same one; aws needs
    /// lease_mode::record_version (the AWS client's rule).
    dynamodb::dialect dialect = dialect::distlock;
    /// dialect::aws: the table's partition key attribute (String), as the AWS
    /// client's partitionKeyName ("key" by default). Tables with a sort key are not
    /// supported.
    std::string key_attribute = "key";
    /// The Limit of each Scan request of list(): how many items DynamoDB reads for one
    /// page, before its filter keeps the locks asked for. 0: DynamoDB's own bound (1 MB
    /// of items a page). A smaller page spreads a listing's read capacity over more
    /// requests.
    std::uint32_t scan_limit = 0;
    /// The clock of day the store reads (expiry times in expiry_time mode, request
    /// signing dates). Empty: the system clock. Set in tests, to give clients clocks
    /// that disagree.
    std::function<std::chrono::system_clock::time_point()> wall_clock;

    std::error_code validate() const noexcept
    {
        const auto in_range = [](duration d) { return d > duration::zero() && d <= max_wait; };
        if (!in_range(connect_timeout) || !in_range(request_timeout))
            return errc::invalid_argument;
        if (clock_skew_margin < duration::zero() || clock_skew_margin > max_wait)
            return errc::invalid_argument;
        if (!valid_table_name(table))
            return errc::invalid_argument;
        if (host.empty() || port == 0)
            return errc::invalid_argument;
        if (mode != lease_mode::record_version && mode != lease_mode::expiry_time)
            return errc::invalid_argument;
        if (dialect != dialect::distlock && dialect != dialect::aws)
            return errc::invalid_argument;
        if (dialect == dialect::aws && (mode != lease_mode::record_version || !valid_key_attribute(key_attribute)))
            return errc::invalid_argument;
        return {};
    }

    /// The region requests are signed for.
    std::string effective_region() const
    {
        if (!region.empty())
            return region;
        for (const char* name : {"AWS_REGION", "AWS_DEFAULT_REGION"})
            if (const char* v = std::getenv(name); v && *v)
                return v;
        return "us-east-1";
    }

    transport::endpoint endpoint() const
    {
        return {.host = host,
                .port = port,
                .unix_socket = {},
                .tls = tls,
                .tls_ca_file = tls_ca_file,
                .tls_verify_peer = true,
                .tls_server_name = {},
                .tls_cert_file = {},
                .tls_key_file = {},
                .connect_timeout = connect_timeout};
    }

    /// Parses `dynamodb://host[:port][?table=NAME&region=REGION&mode=record_version|expiry_time
    /// &dialect=distlock|aws&key_attribute=NAME]` (port 8000 by default, DynamoDB Local's), or
    /// `dynamodbs://` for HTTPS (port 443). key_attribute needs dialect=aws.
    /// The grammar is in distlock/backend/url.hpp: an IPv6 host in brackets, nothing
    /// percent-decoded, no user information (credentials come from `credentials` or the
    /// environment). A URL that is malformed or whose settings fail validate() is
    /// errc::invalid_argument, with `*why` (when not null) saying what is wrong and where.
    static result<config> from_url(std::string_view url, std::string* why = nullptr)
    {
        const bool https = backend::url_scheme(url) == "dynamodbs";
        backend::url_rules rules;
        rules.schemes = {"dynamodb", "dynamodbs"};
        rules.default_port = https ? 443 : 8000;
        rules.query_keys = {"table", "region", "mode", "dialect", "key_attribute"};
        auto parsed = backend::parse_url(url, rules, why);
        if (!parsed)
            return parsed.error();
        config c;
        bool key_attribute_given = false;
        c.tls = https;
        c.host = parsed->hosts[0].host;
        c.port = parsed->hosts[0].port;
        for (const auto& pair : parsed->query) {
            if (pair.key == "table") {
                c.table = pair.value;
                if (!valid_table_name(c.table))
                    return backend::refused(why, "table " + backend::quoted(c.table) +
                                                     ": a DynamoDB table name is 3 to 255 letters, digits, '_', "
                                                     "'-' and '.'");
            } else if (pair.key == "region") {
                // It goes into the signature's scope: letters, digits and '-' ("eu-west-1").
                const bool well_formed = !pair.value.empty() && pair.value.size() <= 64 &&
                                         pair.value.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789-") ==
                                             std::string::npos;
                if (!well_formed)
                    return backend::refused(why, "region " + backend::quoted(pair.value) +
                                                     ": expected an AWS region name (lower-case letters, digits "
                                                     "and '-', as in eu-west-1)");
                c.region = pair.value;
            } else if (pair.key == "dialect") {
                const auto chosen = backend::query_choice(pair, {"distlock", "aws"}, why);
                if (!chosen)
                    return chosen.error();
                c.dialect = *chosen == 0 ? dialect::distlock : dialect::aws;
            } else if (pair.key == "key_attribute") {
                if (!valid_key_attribute(pair.value))
                    return backend::refused(why, "key_attribute " + backend::quoted(pair.value) +
                                                     ": a key attribute name is 1 to 255 bytes and not one of the "
                                                     "lock's own attributes (ownerName, recordVersionNumber, "
                                                     "leaseDuration, isReleased, data, fence, fenceOwner, leaderEpoch, "
                                                     "lockDelay)");
                c.key_attribute = pair.value;
                key_attribute_given = true;
            } else {
                const auto mode = backend::query_choice(pair, {"record_version", "expiry_time"}, why);
                if (!mode)
                    return mode.error();
                c.mode = *mode == 0 ? lease_mode::record_version : lease_mode::expiry_time;
            }
        }
        if (key_attribute_given && c.dialect != dialect::aws)
            return backend::refused(why, "key_attribute is a setting of dialect=aws (the distlock dialect's key is "
                                         "the Binary attribute resource)");
        if (c.dialect == dialect::aws && c.mode != lease_mode::record_version)
            return backend::refused(why, "dialect=aws takes locks over by the AWS lock client's rule "
                                         "(mode=record_version), not by expiry times");
        if (c.validate())
            return backend::refused(why, "the settings fail config::validate()");
        return c;
    }

    /// A partition key attribute name for dialect::aws: 1 to 255 bytes, none of the
    /// names the lock item's other attributes use.
    static bool valid_key_attribute(std::string_view name) noexcept
    {
        if (name.empty() || name.size() > 255)
            return false;
        for (const std::string_view taken :
             {"ownerName", "recordVersionNumber", "leaseDuration", "isReleased", "data", "fence", "fenceOwner",
              "leaderEpoch", "lockDelay"})
            if (name == taken)
                return false;
        return true;
    }

    /// A name DynamoDB accepts for a table: 3 to 255 letters, digits, '_', '-' and '.'.
    static bool valid_table_name(std::string_view name) noexcept
    {
        if (name.size() < 3 || name.size() > 255)
            return false;
        for (const char c : name)
            if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.'))
                return false;
        return true;
    }
};

} // namespace distlock::dynamodb
