// distlock/dynamodb/store.hpp: DynamoDB as a distlock store, through conditional
// writes (expiry-time mode).
//
// Design note. One item per resource in the table, keyed by the resource id as a
// Binary attribute (any bytes, no escaping, no collisions):
//   resource (B, key)   owner (S, hex, absent when free)   expiresAt (N, ms since
//   the Unix epoch, absent when free)   fence (N)
// Acquiring is one UpdateItem, `SET #o = :o, expiresAt = :e ADD fence :one`, under
// `attribute_not_exists(#o) OR expiresAt < :now` (:now less the skew margin), with
// ReturnValues ALL_NEW: the incremented fence is the token, so it grows with every
// acquisition. Releasing clears owner and expiry under `#o = :o` and never deletes
// the item (after a delete the counter would start again at 1). Extending sets a
// new expiry under `#o = :o AND expiresAt >= :now`, so an expired lock is never
// revived. `owner` is a reserved word: it goes through ExpressionAttributeNames.
// JSON is built and read with nlohmann::json, never by concatenation.
//
// Expiry-time mode trusts the clients' wall clocks to within clock_skew_margin.
// Every request goes over the transport engine (HTTP/1.1, keep-alive, reconnect),
// signed with SigV4; a response's x-amz-crc32, when present, is checked.
#pragma once

#include <distlock/aws/sigv4.hpp>
#include <distlock/clock.hpp>
#include <distlock/detail/lifetime.hpp>
#include <distlock/diagnostics.hpp>
#include <distlock/dynamodb/config.hpp>
#include <distlock/dynamodb/error.hpp>
#include <distlock/error.hpp>
#include <distlock/http/parser.hpp>
#include <distlock/options.hpp>
#include <distlock/owner_token.hpp>
#include <distlock/policy/acquire.hpp>
#include <distlock/result.hpp>
#include <distlock/store.hpp>
#include <distlock/transport/engine.hpp>

#include <nlohmann/json.hpp>

#include <asio/any_io_executor.hpp>
#include <asio/strand.hpp>

#include <array>
#include <chrono>
#include <ctime>
#include <memory>
#include <string>
#include <string_view>

namespace distlock::dynamodb {

namespace detail {

inline std::string base64(std::string_view in)
{
    static constexpr char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    std::string out;
    out.reserve((in.size() + 2) / 3 * 4);
    std::size_t i = 0;
    for (; i + 3 <= in.size(); i += 3) {
        const auto n = (static_cast<unsigned char>(in[i]) << 16) | (static_cast<unsigned char>(in[i + 1]) << 8) |
                       static_cast<unsigned char>(in[i + 2]);
        out += {alphabet[(n >> 18) & 63], alphabet[(n >> 12) & 63], alphabet[(n >> 6) & 63], alphabet[n & 63]};
    }
    if (const auto rest = in.size() - i; rest > 0) {
        const auto n = (static_cast<unsigned char>(in[i]) << 16) |
                       (rest == 2 ? static_cast<unsigned char>(in[i + 1]) << 8 : 0);
        out += {alphabet[(n >> 18) & 63], alphabet[(n >> 12) & 63], rest == 2 ? alphabet[(n >> 6) & 63] : '=', '='};
    }
    return out;
}

/// CRC-32 (IEEE 802.3, as x-amz-crc32 carries it).
inline std::uint32_t crc32(std::string_view data)
{
    static const auto table = [] {
        std::array<std::uint32_t, 256> t{};
        for (std::uint32_t i = 0; i < 256; ++i) {
            std::uint32_t c = i;
            for (int k = 0; k < 8; ++k)
                c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
            t[i] = c;
        }
        return t;
    }();
    std::uint32_t c = 0xFFFFFFFFu;
    for (const unsigned char b : data)
        c = table[(c ^ b) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

/// X-Amz-Date for `t` (UTC).
inline std::string amz_date(std::chrono::system_clock::time_point t)
{
    const std::time_t secs = std::chrono::system_clock::to_time_t(t);
    std::tm utc{};
    gmtime_r(&secs, &utc);
    char buf[17];
    std::strftime(buf, sizeof buf, "%Y%m%dT%H%M%SZ", &utc);
    return buf;
}

inline std::int64_t epoch_ms(std::chrono::system_clock::time_point t)
{
    return std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
}

// A number attribute ({"N": "123"}) as an unsigned value.
inline std::optional<std::uint64_t> number(const nlohmann::json& item, const char* name)
{
    const auto a = item.find(name);
    if (a == item.end() || !a->is_object())
        return std::nullopt;
    const auto n = a->find("N");
    if (n == a->end() || !n->is_string())
        return std::nullopt;
    const auto& s = n->get_ref<const std::string&>();
    std::uint64_t v = 0;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc{} || end != s.data() + s.size())
        return std::nullopt;
    return v;
}

inline std::optional<std::string> string(const nlohmann::json& item, const char* name)
{
    const auto a = item.find(name);
    if (a == item.end() || !a->is_object())
        return std::nullopt;
    const auto s = a->find("S");
    if (s == a->end() || !s->is_string())
        return std::nullopt;
    return s->get<std::string>();
}

} // namespace detail

/// A DynamoDB table used as a lock store. Models conditional_write_store,
/// owner_checked_store and inspectable_store; its default acquisition policy is
/// acquire::conditional_write.
///
/// \par Thread safety
/// Safe to use from several threads: the connection's state lives on a strand.
///
/// \par Object lifetimes
/// Every operation owns the connection it uses once started, so the store may be
/// destroyed while one is in flight (it completes with an error). Leases and lock()
/// calls reach the store through its lifetime: after it is destroyed they find it
/// closed and report errc::store_unavailable. close() finishes the releases still
/// pending, then closes the connection, so io.run() returns.
class store {
public:
    using executor_type = asio::any_io_executor;
    using default_acquire_policy = acquire::conditional_write;

    /// Throws std::system_error (errc::invalid_argument) when the TLS settings cannot
    /// be loaded; connecting happens on first use.
    store(executor_type ex, config cfg) : ex_{std::move(ex)}, cfg_{std::move(cfg)}
    {
        if (cfg_.credentials.empty())
            cfg_.credentials = credentials::from_environment();
        region_ = cfg_.effective_region();
        auto tls = transport::make_tls_context(cfg_.endpoint());
        if (!tls)
            throw std::system_error{tls.error(), "distlock::dynamodb::store: TLS settings"};
        engine_ = std::make_shared<engine_type>(
            asio::make_strand(ex_), http::codec{},
            // Node (dynalite) closes idle keep-alive sockets after 5 s; AWS after longer.
            engine_type::options{cfg_.request_timeout, cfg_.endpoint().describe(), std::chrono::seconds{4}},
            [endpoint = cfg_.endpoint(), ctx = tls.value()](transport::stream& s,
                                                            std::string& diagnostic) -> awaitable<std::error_code> {
                co_return co_await s.connect(endpoint, ctx.get(), diagnostic);
            });
        life_ = distlock::detail::lifetime::make(ex_);
    }

    template <class ExecutionContext>
        requires std::is_convertible_v<ExecutionContext&, asio::execution_context&>
    store(ExecutionContext& ctx, config cfg) : store(executor_type{ctx.get_executor()}, std::move(cfg))
    {}

    ~store()
    {
        life_->shut();
        engine_->close();
    }
    store(const store&) = delete;
    store& operator=(const store&) = delete;

    executor_type get_executor() const noexcept { return ex_; }
    const config& settings() const noexcept { return cfg_; }
    std::shared_ptr<distlock::detail::lifetime> lifetime() const noexcept { return life_; }
    duration operation_timeout() const noexcept { return cfg_.connect_timeout + cfg_.request_timeout; }

    /// Refuses new locks, finishes the releases still pending, then closes the
    /// connection: io.run() can return afterwards.
    awaitable<void> close()
    {
        co_await life_->close();
        engine_->close();
    }

    /// Closes the connection; the next request connects again.
    void disconnect() { engine_->close(); }

    // -- Store primitives (distlock/store.hpp) --------------------------------------

    /// Takes the lock when it is free or expired (or, with `expected_version`, when
    /// the item still carries that fence); the new fence is the token.
    awaitable<result<fence_token>> conditional_write(std::string_view resource, const owner_token& owner,
                                                     duration ttl, std::optional<fence_token> expected_version,
                                                     diagnostics* diag = nullptr)
    {
        if (auto ec = check(resource, ttl))
            return failed<fence_token>(ec);
        const auto now = std::chrono::system_clock::now();
        nlohmann::json values = {
            {":o", {{"S", owner.to_hex()}}},
            {":e", {{"N", std::to_string(detail::epoch_ms(now) + millis(ttl))}}},
            {":one", {{"N", "1"}}},
        };
        std::string condition;
        if (expected_version) {
            condition = "fence = :v";
            values[":v"] = {{"N", std::to_string(*expected_version)}};
        } else {
            condition = "attribute_not_exists(#o) OR expiresAt < :now";
            values[":now"] = {{"N", std::to_string(detail::epoch_ms(now - cfg_.clock_skew_margin))}};
        }
        nlohmann::json body = {
            {"TableName", cfg_.table},
            {"Key", key(resource)},
            {"UpdateExpression", "SET #o = :o, expiresAt = :e ADD fence :one"},
            {"ConditionExpression", condition},
            {"ExpressionAttributeNames", {{"#o", "owner"}}},
            {"ExpressionAttributeValues", std::move(values)},
            {"ReturnValues", "ALL_NEW"},
        };
        return acquired(call("UpdateItem", std::move(body), diag));
    }

    awaitable<result<void>> extend(std::string_view resource, const owner_token& owner, duration ttl,
                                   diagnostics* diag = nullptr)
    {
        if (auto ec = check(resource, ttl))
            return failed<void>(ec);
        const auto now = detail::epoch_ms(std::chrono::system_clock::now());
        nlohmann::json body = {
            {"TableName", cfg_.table},
            {"Key", key(resource)},
            {"UpdateExpression", "SET expiresAt = :e"},
            {"ConditionExpression", "#o = :o AND expiresAt >= :now"},
            {"ExpressionAttributeNames", {{"#o", "owner"}}},
            {"ExpressionAttributeValues",
             {{":o", {{"S", owner.to_hex()}}},
              {":e", {{"N", std::to_string(now + millis(ttl))}}},
              {":now", {{"N", std::to_string(now)}}}}},
        };
        return owned(call("UpdateItem", std::move(body), diag));
    }

    /// Clears owner and expiry if `owner` holds the lock; the item and its fence stay.
    awaitable<result<void>> release(std::string_view resource, const owner_token& owner, diagnostics* diag = nullptr)
    {
        if (auto ec = check(resource))
            return failed<void>(ec);
        nlohmann::json body = {
            {"TableName", cfg_.table},
            {"Key", key(resource)},
            {"UpdateExpression", "REMOVE #o, expiresAt"},
            {"ConditionExpression", "#o = :o"},
            {"ExpressionAttributeNames", {{"#o", "owner"}}},
            {"ExpressionAttributeValues", {{":o", {{"S", owner.to_hex()}}}}},
        };
        return owned(call("UpdateItem", std::move(body), diag));
    }

    /// Reads the lock without taking it (a strongly consistent GetItem).
    awaitable<result<lock_info>> read(std::string_view resource, diagnostics* diag = nullptr)
    {
        if (auto ec = check(resource))
            return failed<lock_info>(ec);
        nlohmann::json body = {{"TableName", cfg_.table}, {"Key", key(resource)}, {"ConsistentRead", true}};
        return inspected(call("GetItem", std::move(body), diag));
    }

    /// Creates the table (on-demand capacity) if it does not exist, and waits until
    /// it is ACTIVE (bounded by `within`). For tests and first use; production tables
    /// are usually made by infrastructure code.
    awaitable<result<void>> create_table(duration within = std::chrono::seconds{30}, diagnostics* diag = nullptr)
    {
        if (auto ec = cfg_.validate())
            co_return ec;
        nlohmann::json create = {
            {"TableName", cfg_.table},
            {"AttributeDefinitions", {{{"AttributeName", "resource"}, {"AttributeType", "B"}}}},
            {"KeySchema", {{{"AttributeName", "resource"}, {"KeyType", "HASH"}}}},
            {"BillingMode", "PAY_PER_REQUEST"},
        };
        diagnostics words;
        auto made = co_await request(engine_, signer(), std::string{"CreateTable"}, create.dump(), &words);
        const bool exists = words.server_message().find("ResourceInUseException") != std::string_view::npos;
        if (!made && !exists) {
            if (diag)
                *diag = std::move(words);
            co_return made.error();
        }
        const auto until = clock::now() + within;
        // Built outside the co_await: g++ 12 cannot compile a braced list inside one.
        nlohmann::json describe;
        describe["TableName"] = cfg_.table;
        const auto describe_body = describe.dump();
        for (;;) {
            auto described = co_await request(engine_, signer(), std::string{"DescribeTable"}, describe_body, diag);
            if (!described)
                co_return described.error();
            const auto status =
                described.value().value(nlohmann::json::json_pointer{"/Table/TableStatus"}, std::string{});
            if (status == "ACTIVE") {
                if (diag)
                    diag->clear();
                co_return success();
            }
            if (clock::now() >= until)
                co_return distlock::errc::timeout;
            timer t{co_await asio::this_coro::executor, std::chrono::milliseconds{50}};
            (void)co_await t.async_wait(transport::as_tuple(asio::use_awaitable));
        }
    }

    /// One DynamoDB API call (`operation` is "GetItem", "Query", ...) on the store's
    /// connection, signed; the response's JSON. Error answers are errors, with the
    /// server's words in `diag` (a failed condition is distlock::errc::contended).
    awaitable<result<nlohmann::json>> execute(std::string_view operation, nlohmann::json body,
                                              diagnostics* diag = nullptr)
    {
        if (auto ec = cfg_.validate())
            return failed<nlohmann::json>(ec);
        return request(engine_, signer(), std::string{operation}, body.dump(), diag);
    }

private:
    using engine_type = transport::engine<http::codec>;
    using engine_ptr = std::shared_ptr<engine_type>;

    // What signing needs, copied into each request's coroutine.
    struct signing {
        std::string host_header;
        std::string region;
        dynamodb::credentials creds;
    };

    signing signer() const
    {
        const bool default_port = cfg_.tls ? cfg_.port == 443 : cfg_.port == 80;
        return {default_port ? cfg_.host : cfg_.host + ":" + std::to_string(cfg_.port), region_, cfg_.credentials};
    }

    static std::int64_t millis(duration d) { return std::chrono::ceil<std::chrono::milliseconds>(d).count(); }

    // Bad input is refused before any I/O.
    std::error_code check(std::string_view resource) const
    {
        if (auto ec = cfg_.validate())
            return ec;
        if (resource.empty() || resource.size() > max_resource_size)
            return distlock::errc::invalid_argument;
        return {};
    }
    std::error_code check(std::string_view resource, duration ttl) const
    {
        if (ttl <= duration::zero() || ttl > max_wait)
            return distlock::errc::invalid_argument;
        return check(resource);
    }

    template <class T>
    static awaitable<result<T>> failed(std::error_code ec)
    {
        co_return ec;
    }

    static nlohmann::json key(std::string_view resource)
    {
        return {{"resource", {{"B", detail::base64(resource)}}}};
    }

    awaitable<result<nlohmann::json>> call(const char* operation, const nlohmann::json& body, diagnostics* diag) const
    {
        return request(engine_, signer(), operation, body.dump(), diag);
    }

    // One signed POST; the response's JSON, or the error its status and __type say
    // (ConditionalCheckFailedException is errc::contended: the caller decides what
    // "the condition did not hold" means).
    static awaitable<result<nlohmann::json>> request(engine_ptr engine, signing s, std::string operation,
                                                     std::string payload, diagnostics* diag)
    {
        aws::request r{.method = "POST",
                       .path = "/",
                       .query = {},
                       .headers = {{"Host", s.host_header},
                                   {"Content-Type", "application/x-amz-json-1.0"},
                                   {"X-Amz-Date", detail::amz_date(std::chrono::system_clock::now())},
                                   {"X-Amz-Target", "DynamoDB_20120810." + operation}},
                       .payload = std::move(payload)};
        if (!s.creds.session_token.empty())
            r.headers.emplace_back("X-Amz-Security-Token", s.creds.session_token);
        const aws::scope scope{r.headers[2].second, s.region, "dynamodb"};
        auto headers = r.headers;
        headers.emplace_back("Authorization",
                             aws::authorization(r, s.creds.access_key_id, s.creds.secret_access_key, scope));
        auto bytes = http::encode_request("POST", "/", headers, r.payload);
        auto got = co_await engine->exec(std::move(bytes), 1, diag);
        if (!got)
            co_return got.error();
        auto& response = got.value().front();
        if (response.closes())
            engine->close(); // the server said so: the next request connects again
        if (const auto crc = response.header("x-amz-crc32")) {
            std::uint32_t expected = 0;
            const auto [end, ec] = std::from_chars(crc->data(), crc->data() + crc->size(), expected);
            if (ec != std::errc{} || end != crc->data() + crc->size() || detail::crc32(response.body) != expected) {
                if (diag)
                    diag->set_client_message("x-amz-crc32 does not match the response body");
                co_return make_error_code(errc::bad_checksum);
            }
        }
        auto json = nlohmann::json::parse(response.body, nullptr, false);
        if (response.status == 200) {
            if (json.is_discarded() || !json.is_object())
                co_return make_error_code(distlock::errc::protocol_error);
            co_return json;
        }
        std::string type, message;
        if (json.is_object()) {
            type = json.value("__type", std::string{});
            message = json.value("message", json.value("Message", std::string{}));
        }
        if (diag)
            diag->set_server_message(type.empty() ? response.body : type + ": " + message);
        if (response.status == 400 && type.ends_with("ConditionalCheckFailedException"))
            co_return make_error_code(distlock::errc::contended);
        if (response.status < 500 && type.empty())
            co_return make_error_code(distlock::errc::protocol_error);
        co_return classify(response.status, type);
    }

    static awaitable<result<fence_token>> acquired(awaitable<result<nlohmann::json>> pending)
    {
        auto got = co_await std::move(pending);
        if (!got)
            co_return got.error();
        const auto attributes = got.value().find("Attributes");
        if (attributes == got.value().end())
            co_return distlock::errc::protocol_error;
        const auto fence = detail::number(*attributes, "fence");
        if (!fence || *fence == 0)
            co_return distlock::errc::protocol_error;
        co_return *fence;
    }

    static awaitable<result<void>> owned(awaitable<result<nlohmann::json>> pending)
    {
        auto got = co_await std::move(pending);
        if (!got)
            co_return got.error() == distlock::errc::contended ? make_error_code(distlock::errc::not_owner)
                                                              : got.error();
        co_return success();
    }

    static awaitable<result<lock_info>> inspected(awaitable<result<nlohmann::json>> pending)
    {
        auto got = co_await std::move(pending);
        if (!got)
            co_return got.error();
        lock_info info;
        const auto item = got.value().find("Item");
        if (item == got.value().end())
            co_return info; // never locked
        if (!item->is_object())
            co_return distlock::errc::protocol_error;
        info.fence = detail::number(*item, "fence").value_or(0);
        const auto owner = detail::string(*item, "owner");
        const auto expires = detail::number(*item, "expiresAt");
        const auto now = detail::epoch_ms(std::chrono::system_clock::now());
        if (owner && expires && static_cast<std::int64_t>(*expires) >= now) {
            info.held = true;
            info.owner = owner->substr(0, 8);
            info.remaining = std::chrono::milliseconds{static_cast<std::int64_t>(*expires) - now};
        }
        co_return info;
    }

    executor_type ex_;
    config cfg_;
    std::string region_;
    engine_ptr engine_;
    std::shared_ptr<distlock::detail::lifetime> life_;
};

} // namespace distlock::dynamodb
