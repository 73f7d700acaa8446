// distlock/dynamodb/error.hpp: DynamoDB's answers as error codes, with the
// conditions the core decides by.
#pragma once

#include <distlock/error.hpp>

#include <string>
#include <string_view>
#include <system_error>

namespace distlock::dynamodb {

enum class errc {
    throttled = 1,    ///< ProvisionedThroughputExceeded, Throttling, RequestLimitExceeded
    server_error,     ///< HTTP 5xx, InternalServerError, ServiceUnavailable
    validation,       ///< ValidationException, SerializationException: the request is wrong
    missing_table,    ///< ResourceNotFoundException: the table does not exist (yet)
    access_denied,    ///< credentials or signature refused
    refused,          ///< another 4xx answer
    bad_checksum,     ///< the body does not match x-amz-crc32
    no_credentials,   ///< none configured and none in the environment (checked before any I/O)
    malformed_credentials, ///< not shaped like AWS credentials (checked before any I/O)
};

class error_category final : public std::error_category {
public:
    const char* name() const noexcept override { return "distlock.dynamodb"; }

    std::string message(int value) const override
    {
        switch (static_cast<errc>(value)) {
        case errc::throttled: return "DynamoDB throttled the request";
        case errc::server_error: return "DynamoDB failed the request (5xx)";
        case errc::validation: return "DynamoDB rejected the request as invalid";
        case errc::missing_table: return "the DynamoDB table does not exist";
        case errc::access_denied: return "DynamoDB refused the credentials or the signature";
        case errc::refused: return "DynamoDB refused the request";
        case errc::bad_checksum: return "the DynamoDB response does not match its x-amz-crc32";
        case errc::no_credentials:
            return "no AWS credentials: set config.credentials, or AWS_ACCESS_KEY_ID and "
                   "AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN for temporary ones) in the environment";
        case errc::malformed_credentials:
            return "the AWS credentials are malformed: the access key id is letters and digits, the "
                   "secret key and session token printable characters without spaces";
        }
        return "unknown DynamoDB error";
    }

    // Throttling and server errors may have been applied: the caller cleans up by
    // owner. Validation, a missing table and refused credentials are not retried.
    std::error_condition default_error_condition(int value) const noexcept override
    {
        switch (static_cast<errc>(value)) {
        case errc::throttled:
        case errc::server_error:
        case errc::bad_checksum: return make_error_condition(condition::maybe_applied);
        case errc::validation:
        case errc::missing_table:
        case errc::no_credentials:
        case errc::malformed_credentials: return make_error_condition(condition::invalid_argument);
        case errc::access_denied: return make_error_condition(condition::denied);
        case errc::refused: return make_error_condition(condition::not_applied);
        }
        return {value, *this};
    }
};

inline const std::error_category& category() noexcept
{
    static const error_category c;
    return c;
}

inline std::error_code make_error_code(errc e) noexcept { return {static_cast<int>(e), category()}; }

/// The error of an HTTP error answer, from its status and the `__type` of its body
/// ("com.amazonaws.dynamodb.v20120810#ValidationException"). Conditional check
/// failures are not errors here: the store reads them as "held" or "not the owner".
inline std::error_code classify(int status, std::string_view type)
{
    const auto hash = type.rfind('#');
    const auto name = hash == std::string_view::npos ? type : type.substr(hash + 1);
    if (status >= 500)
        return make_error_code(errc::server_error);
    if (name == "ProvisionedThroughputExceededException" || name == "ThrottlingException" ||
        name == "RequestLimitExceeded" || name == "LimitExceededException")
        return make_error_code(errc::throttled);
    if (name == "ValidationException" || name == "SerializationException")
        return make_error_code(errc::validation);
    if (name == "ResourceNotFoundException")
        return make_error_code(errc::missing_table);
    if (name == "UnrecognizedClientException" || name == "AccessDeniedException" ||
        name == "MissingAuthenticationTokenException" || name == "InvalidSignatureException" ||
        name == "IncompleteSignatureException" || name == "ExpiredTokenException" ||
        name == "InvalidClientTokenId" || name == "SignatureDoesNotMatch" || status == 401 || status == 403)
        return make_error_code(errc::access_denied);
    return make_error_code(errc::refused);
}

} // namespace distlock::dynamodb

template <>
struct std::is_error_code_enum<distlock::dynamodb::errc> : std::true_type {};
