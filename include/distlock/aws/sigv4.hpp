// distlock/aws/sigv4.hpp: AWS Signature Version 4, as pure functions over strings
// (SHA-256 and HMAC-SHA256 from OpenSSL's libcrypto). No I/O and no clock: the
// caller passes the request time, so each step can be checked against AWS's
// published examples.
//
// The steps, as AWS names them:
//   1. canonical request: method, path, sorted query, sorted lower-case headers,
//      the signed header names, the payload's SHA-256;
//   2. string to sign: algorithm, request time, credential scope, the canonical
//      request's SHA-256;
//   3. signing key: HMAC chain over date, region, service, "aws4_request";
//   4. signature: HMAC of the string to sign with that key.
#pragma once

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace distlock::aws {

using digest = std::array<unsigned char, 32>;

inline digest sha256(std::string_view data)
{
    digest out{};
    unsigned int n = 0;
    EVP_Digest(data.data(), data.size(), out.data(), &n, EVP_sha256(), nullptr);
    return out;
}

inline digest hmac_sha256(std::string_view key, std::string_view data)
{
    digest out{};
    unsigned int n = 0;
    HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), reinterpret_cast<const unsigned char*>(data.data()),
         data.size(), out.data(), &n);
    return out;
}

inline std::string_view as_bytes(const digest& d) noexcept
{
    return {reinterpret_cast<const char*>(d.data()), d.size()};
}

inline std::string hex(std::string_view bytes)
{
    static constexpr char digits[] = "0123456789abcdef";
    std::string out;
    out.reserve(bytes.size() * 2);
    for (const unsigned char c : bytes) {
        out.push_back(digits[c >> 4]);
        out.push_back(digits[c & 0xF]);
    }
    return out;
}

inline std::string hex(const digest& d) { return hex(as_bytes(d)); }

/// Percent-encodes everything but RFC 3986's unreserved characters (and '/' when
/// `keep_slash`), upper-case hex, as SigV4 wants.
inline std::string uri_encode(std::string_view in, bool keep_slash)
{
    static constexpr char digits[] = "0123456789ABCDEF";
    std::string out;
    out.reserve(in.size());
    for (const unsigned char c : in) {
        const bool unreserved = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                                c == '-' || c == '_' || c == '.' || c == '~';
        if (unreserved || (keep_slash && c == '/')) {
            out.push_back(static_cast<char>(c));
        } else {
            out.push_back('%');
            out.push_back(digits[c >> 4]);
            out.push_back(digits[c & 0xF]);
        }
    }
    return out;
}

/// What is signed of an HTTP request. The path and the query are given decoded
/// ("a b" rather than "a%20b"); header names in any case.
struct request {
    std::string method;
    std::string path = "/";
    std::vector<std::pair<std::string, std::string>> query;
    std::vector<std::pair<std::string, std::string>> headers;
    std::string payload;
};

/// The credential scope and time of one signature.
struct scope {
    std::string amz_date; ///< YYYYMMDD'T'HHMMSS'Z', UTC
    std::string region;
    std::string service;

    std::string date() const { return amz_date.substr(0, 8); }
    std::string to_string() const { return date() + "/" + region + "/" + service + "/aws4_request"; }
};

/// Lower-case, sorted header names joined by ';' (the SignedHeaders of the request).
inline std::string signed_headers(const request& r)
{
    std::vector<std::string> names;
    for (const auto& [name, value] : r.headers) {
        std::string lower = name;
        std::transform(lower.begin(), lower.end(), lower.begin(),
                       [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
        names.push_back(std::move(lower));
    }
    std::sort(names.begin(), names.end());
    names.erase(std::unique(names.begin(), names.end()), names.end());
    std::string out;
    for (const auto& n : names) {
        if (!out.empty())
            out.push_back(';');
        out += n;
    }
    return out;
}

/// Step 1.
inline std::string canonical_request(const request& r)
{
    std::string out = r.method + "\n" + uri_encode(r.path, true) + "\n";

    std::vector<std::pair<std::string, std::string>> query;
    for (const auto& [k, v] : r.query)
        query.emplace_back(uri_encode(k, false), uri_encode(v, false));
    std::sort(query.begin(), query.end());
    for (std::size_t i = 0; i < query.size(); ++i) {
        if (i > 0)
            out.push_back('&');
        out += query[i].first + "=" + query[i].second;
    }
    out.push_back('\n');

    // Names lower-cased; values trimmed, inner runs of spaces collapsed to one; the
    // values of a repeated header joined by ',' in their order.
    std::vector<std::pair<std::string, std::string>> headers;
    for (const auto& [name, value] : r.headers) {
        std::string lower = name;
        std::transform(lower.begin(), lower.end(), lower.begin(),
                       [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
        std::string v;
        bool space = false;
        for (const char c : value) {
            if (c == ' ' || c == '\t') {
                space = true;
                continue;
            }
            if (space && !v.empty())
                v.push_back(' ');
            space = false;
            v.push_back(c);
        }
        headers.emplace_back(std::move(lower), std::move(v));
    }
    std::stable_sort(headers.begin(), headers.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    for (std::size_t i = 0; i < headers.size(); ++i) {
        if (i > 0 && headers[i].first == headers[i - 1].first) {
            out.pop_back(); // the previous line's '\n'
            out += "," + headers[i].second + "\n";
            continue;
        }
        out += headers[i].first + ":" + headers[i].second + "\n";
    }
    out.push_back('\n');
    out += signed_headers(r) + "\n";
    out += hex(sha256(r.payload));
    return out;
}

/// Step 2.
inline std::string string_to_sign(const scope& s, std::string_view canonical)
{
    return "AWS4-HMAC-SHA256\n" + s.amz_date + "\n" + s.to_string() + "\n" + hex(sha256(canonical));
}

/// Step 3.
inline digest signing_key(std::string_view secret_access_key, const scope& s)
{
    const auto k_date = hmac_sha256("AWS4" + std::string{secret_access_key}, s.date());
    const auto k_region = hmac_sha256(as_bytes(k_date), s.region);
    const auto k_service = hmac_sha256(as_bytes(k_region), s.service);
    return hmac_sha256(as_bytes(k_service), "aws4_request");
}

/// Step 4.
inline std::string signature(const digest& key, std::string_view to_sign)
{
    return hex(hmac_sha256(as_bytes(key), to_sign));
}

/// The Authorization header's value for `r` (whose headers must already hold every
/// header to sign: host, x-amz-date, and x-amz-security-token with temporary
/// credentials).
inline std::string authorization(const request& r, std::string_view access_key_id,
                                 std::string_view secret_access_key, const scope& s)
{
    const auto to_sign = string_to_sign(s, canonical_request(r));
    return "AWS4-HMAC-SHA256 Credential=" + std::string{access_key_id} + "/" + s.to_string() +
           ", SignedHeaders=" + signed_headers(r) + ", Signature=" + signature(signing_key(secret_access_key, s), to_sign);
}

} // namespace distlock::aws
