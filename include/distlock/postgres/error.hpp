// distlock/postgres/error.hpp: PostgreSQL's answers (SQLSTATE codes) as error codes,
// with the conditions the core decides by.
//
// The code's value is the five-character SQLSTATE packed in base 36, so every state
// the server can send has a code of its own (and compares equal to its name with
// `ec == postgres::sqlstate("40001")`); the category decides the condition by the
// state's class. The server's message goes to the diagnostics beside the code.
#pragma once

#include <distlock/error.hpp>

#include <optional>
#include <string>
#include <string_view>
#include <system_error>

namespace distlock::postgres {

namespace detail {

inline int digit36(char c) noexcept
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'A' && c <= 'Z')
        return c - 'A' + 10;
    return -1;
}

} // namespace detail

/// A SQLSTATE ("40001") packed as an int; nullopt when it is not five digits or
/// upper-case letters.
constexpr std::optional<int> pack_sqlstate(std::string_view state) noexcept
{
    if (state.size() != 5)
        return std::nullopt;
    int v = 0;
    for (const char c : state) {
        const int d = detail::digit36(c);
        if (d < 0)
            return std::nullopt;
        v = v * 36 + d;
    }
    return v;
}

/// The SQLSTATE a packed value stands for.
inline std::string unpack_sqlstate(int value)
{
    std::string s(5, '0');
    for (int i = 4; i >= 0; --i) {
        const int d = value % 36;
        s[static_cast<std::size_t>(i)] = static_cast<char>(d < 10 ? '0' + d : 'A' + d - 10);
        value /= 36;
    }
    return s;
}

class error_category final : public std::error_category {
public:
    const char* name() const noexcept override { return "distlock.postgres"; }

    std::string message(int value) const override
    {
        const auto state = unpack_sqlstate(value);
        const char* what = describe(state);
        return "SQLSTATE " + state + (what ? std::string{" ("} + what + ")" : std::string{});
    }

    // By class (the first two characters), with the states that matter named:
    //  - the transaction was rolled back or cut off (serialization failure, deadlock,
    //    statement timeout, the server shutting down, the connection failing): the
    //    request may have been applied as far as the caller can know, so it cleans up
    //    by owner;
    //  - a lock wait that timed out (lock_timeout): the lock is held;
    //  - credentials and privileges: denied, not retried;
    //  - syntax, undefined objects, bad data: the request is wrong, not retried.
    std::error_condition default_error_condition(int value) const noexcept override
    {
        const auto state = unpack_sqlstate(value);
        const std::string_view cls = std::string_view{state}.substr(0, 2);
        if (state == "55P03")
            return make_error_condition(condition::contended);
        if (state == "42501" || cls == "28")
            return make_error_condition(condition::denied);
        if (cls == "42" || cls == "22" || cls == "0A" || cls == "3D" || cls == "3F")
            return make_error_condition(condition::invalid_argument);
        if (cls == "53") // insufficient resources (too many connections): refused
            return make_error_condition(condition::not_applied);
        return make_error_condition(condition::maybe_applied);
    }

private:
    static const char* describe(std::string_view state) noexcept
    {
        struct named {
            const char* state;
            const char* name;
        };
        static constexpr named names[] = {
            {"40001", "serialization_failure"},     {"40P01", "deadlock_detected"},
            {"57014", "query_canceled"},            {"57P01", "admin_shutdown"},
            {"57P02", "crash_shutdown"},            {"57P03", "cannot_connect_now"},
            {"55P03", "lock_not_available"},        {"42501", "insufficient_privilege"},
            {"42P01", "undefined_table"},           {"42601", "syntax_error"},
            {"42703", "undefined_column"},          {"42883", "undefined_function"},
            {"28P01", "invalid_password"},          {"28000", "invalid_authorization_specification"},
            {"3D000", "invalid_catalog_name"},      {"53300", "too_many_connections"},
            {"08006", "connection_failure"},        {"08001", "sqlclient_unable_to_establish_sqlconnection"},
            {"25006", "read_only_sql_transaction"}, {"22012", "division_by_zero"},
            {"23505", "unique_violation"},          {"21000", "cardinality_violation"},
        };
        for (const auto& n : names)
            if (state == n.state)
                return n.name;
        return nullptr;
    }
};

inline const std::error_category& category() noexcept
{
    static const error_category c;
    return c;
}

/// The error code of a SQLSTATE; a malformed state is distlock::errc::protocol_error.
inline std::error_code sqlstate(std::string_view state) noexcept
{
    if (const auto v = pack_sqlstate(state))
        return {*v, category()};
    return make_error_code(distlock::errc::protocol_error);
}

} // namespace distlock::postgres
