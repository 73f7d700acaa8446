// distlock/protobuf/json_mapping.hpp: messages described by a schema, translated
// between proto3's JSON form and the wire format.
//
// Design note. A store that speaks a protocol both ways (etcd: its JSON gateway and
// native gRPC) builds its requests once, as documents in proto3's JSON mapping
// (field names as in the .proto file, 64-bit integers as decimal strings, bytes in
// base64, enums by name), and reads its answers in that form too. These functions
// turn such a document into the message's bytes and a message's bytes back into the
// document, by a schema of the few messages the store uses (message_type below),
// written beside the store. The schema is data, not generated code: no protoc step
// in a header-only build, and a reply's reader stays one piece, fuzzed once, for both
// transports.
//
// Encoding writes every field the document has, zeros included (a field of a oneof
// must be written even when zero); a field the schema does not name, or a value of
// the wrong JSON type, is errc::invalid_argument: a request is the store's own.
// Decoding writes every field the bytes carry, as the gateway does (proto3 omits
// zeros, so absent fields read as zero), skips fields the schema does not name, and
// refuses bytes that are not the message: errc::protocol_error with the reason.
#pragma once

#include <distlock/error.hpp>
#include <distlock/protobuf/wire.hpp>
#include <distlock/util/result_type.hpp>
#include <distlock/util/base64.hpp>

#include <nlohmann/json.hpp>

#include <charconv>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace distlock::protobuf {

using json = nlohmann::json;

/// The value types a schema uses (proto3 scalars the stores need, and messages).
enum class kind : std::uint8_t {
    int64,       ///< int64: a decimal string in JSON (a number is accepted too)
    uint64,      ///< uint64: likewise
    boolean,     ///< bool
    enumeration, ///< an enum: its value's name in JSON (a number is accepted too)
    bytes,       ///< bytes: base64 in JSON
    string,      ///< string (UTF-8, not checked)
    message,     ///< an embedded message
};

struct message_type;

struct field {
    std::string_view name; ///< as in the .proto file (the gateway's OrigName form)
    std::uint32_t number = 0;
    kind type = kind::int64;
    bool repeated = false;
    const message_type* message = nullptr;   ///< for kind::message
    std::span<const std::string_view> names{}; ///< for kind::enumeration: the names of 0, 1, ...
};

struct message_type {
    std::string_view name;
    std::span<const field> fields;

    const field* by_number(std::uint32_t n) const noexcept
    {
        for (const auto& f : fields)
            if (f.number == n)
                return &f;
        return nullptr;
    }
    const field* by_name(std::string_view n) const noexcept
    {
        for (const auto& f : fields)
            if (f.name == n)
                return &f;
        return nullptr;
    }
};

namespace detail_mapping {

inline bool integer_of(const json& v, kind k, std::uint64_t& out)
{
    if (v.is_number_integer()) {
        if (k == kind::uint64 && v.is_number_unsigned())
            out = v.get<std::uint64_t>();
        else
            out = static_cast<std::uint64_t>(v.get<std::int64_t>());
        return k == kind::int64 || v.is_number_unsigned() || v.get<std::int64_t>() >= 0;
    }
    if (!v.is_string())
        return false;
    const auto& s = v.get_ref<const std::string&>();
    const char* first = s.data();
    const char* last = s.data() + s.size();
    if (k == kind::int64) {
        std::int64_t x = 0;
        auto [p, ec] = std::from_chars(first, last, x);
        if (ec != std::errc{} || p != last || s.empty())
            return false;
        out = static_cast<std::uint64_t>(x);
        return true;
    }
    std::uint64_t x = 0;
    auto [p, ec] = std::from_chars(first, last, x);
    if (ec != std::errc{} || p != last || s.empty())
        return false;
    out = x;
    return true;
}

inline bool encode_value(std::string& out, const field& f, const json& v, std::string& why, int depth);

inline bool encode_message(std::string& out, const message_type& type, const json& doc, std::string& why,
                           int depth)
{
    if (!doc.is_object()) {
        why = std::string{type.name} + ": not an object";
        return false;
    }
    for (const auto& [key, value] : doc.items()) {
        const field* f = type.by_name(key);
        if (!f) {
            why = std::string{type.name} + " has no field " + key;
            return false;
        }
        if (f->repeated) {
            if (!value.is_array()) {
                why = std::string{type.name} + "." + key + ": not an array";
                return false;
            }
            for (const auto& item : value)
                if (!encode_value(out, *f, item, why, depth))
                    return false;
        } else if (!encode_value(out, *f, value, why, depth)) {
            return false;
        }
    }
    return true;
}

inline bool encode_value(std::string& out, const field& f, const json& v, std::string& why, int depth)
{
    const auto bad = [&](const char* wanted) {
        why = std::string{f.name} + ": " + wanted;
        return false;
    };
    switch (f.type) {
    case kind::int64:
    case kind::uint64: {
        std::uint64_t x = 0;
        if (!integer_of(v, f.type, x))
            return bad("an integer");
        put_varint_field(out, f.number, x);
        return true;
    }
    case kind::boolean:
        if (!v.is_boolean())
            return bad("true or false");
        put_varint_field(out, f.number, v.get<bool>() ? 1 : 0);
        return true;
    case kind::enumeration: {
        if (v.is_number_integer()) {
            put_varint_field(out, f.number, static_cast<std::uint64_t>(v.get<std::int64_t>()));
            return true;
        }
        if (!v.is_string())
            return bad("an enum value's name");
        const auto& name = v.get_ref<const std::string&>();
        for (std::size_t i = 0; i < f.names.size(); ++i)
            if (f.names[i] == name) {
                put_varint_field(out, f.number, i);
                return true;
            }
        return bad("one of the enum's names");
    }
    case kind::bytes: {
        if (!v.is_string())
            return bad("base64 text");
        auto raw = distlock::util::from_base64(v.get_ref<const std::string&>());
        if (!raw)
            return bad("base64 text");
        put_bytes(out, f.number, *raw);
        return true;
    }
    case kind::string:
        if (!v.is_string())
            return bad("a string");
        put_bytes(out, f.number, v.get_ref<const std::string&>());
        return true;
    case kind::message: {
        if (depth > 16)
            return bad("nested too deeply");
        std::string inner;
        if (!encode_message(inner, *f.message, v, why, depth + 1))
            return false;
        put_bytes(out, f.number, inner);
        return true;
    }
    }
    return bad("a known kind");
}

inline bool decode_message(std::string_view bytes, const message_type& type, json& doc, std::string& why,
                           int depth);

inline bool decode_value(reader& r, wire_type wt, const field& f, json& out, std::string& why, int depth)
{
    const auto bad = [&](const char* what) {
        why = std::string{f.name} + ": " + what;
        return false;
    };
    switch (f.type) {
    case kind::int64:
    case kind::uint64:
    case kind::boolean:
    case kind::enumeration: {
        if (wt != wire_type::varint)
            return bad("not a varint");
        std::uint64_t x = 0;
        if (!r.varint(x))
            return bad("truncated varint");
        if (f.type == kind::int64)
            out = std::to_string(static_cast<std::int64_t>(x));
        else if (f.type == kind::uint64)
            out = std::to_string(x);
        else if (f.type == kind::boolean)
            out = x != 0;
        else if (x < f.names.size())
            out = std::string{f.names[static_cast<std::size_t>(x)]};
        else
            out = static_cast<std::int64_t>(x); // a value newer than the schema: its number, as proto3 does
        return true;
    }
    case kind::bytes:
    case kind::string:
    case kind::message: {
        if (wt != wire_type::length_delimited)
            return bad("not length-delimited");
        std::string_view s;
        if (!r.bytes(s))
            return bad("truncated");
        if (f.type == kind::bytes) {
            out = distlock::util::base64(s);
        } else if (f.type == kind::string) {
            out = std::string{s};
        } else {
            if (depth > 16)
                return bad("nested too deeply");
            json inner = json::object();
            if (!decode_message(s, *f.message, inner, why, depth + 1))
                return false;
            out = std::move(inner);
        }
        return true;
    }
    }
    return bad("a known kind");
}

inline bool decode_message(std::string_view bytes, const message_type& type, json& doc, std::string& why,
                           int depth)
{
    reader r{bytes};
    while (!r.at_end()) {
        std::uint32_t number = 0;
        wire_type wt{};
        if (!r.tag(number, wt)) {
            why = std::string{type.name} + ": malformed tag";
            return false;
        }
        const field* f = type.by_number(number);
        if (!f) {
            if (!r.skip(wt)) {
                why = std::string{type.name} + ": malformed unknown field " + std::to_string(number);
                return false;
            }
            continue;
        }
        json value;
        if (!decode_value(r, wt, *f, value, why, depth)) {
            why = std::string{type.name} + "." + why;
            return false;
        }
        const std::string key{f->name};
        if (f->repeated) {
            auto& list = doc[key];
            if (!list.is_array())
                list = json::array();
            list.push_back(std::move(value));
        } else {
            doc[key] = std::move(value); // proto3: the last one wins
        }
    }
    return true;
}

} // namespace detail_mapping

/// The wire bytes of `doc`, a message of `type` in proto3's JSON form;
/// errc::invalid_argument (with the reason in `why`) when it is not one.
inline result<std::string> encode(const message_type& type, const json& doc, std::string* why = nullptr)
{
    std::string out;
    std::string reason;
    if (!detail_mapping::encode_message(out, type, doc, reason, 0)) {
        if (why)
            *why = std::move(reason);
        return errc::invalid_argument;
    }
    return out;
}

/// The JSON form of the message of `type` in `bytes`; errc::protocol_error (with the
/// reason in `why`) for bytes that are not such a message.
inline result<json> decode(const message_type& type, std::string_view bytes, std::string* why = nullptr)
{
    json doc = json::object();
    std::string reason;
    if (!detail_mapping::decode_message(bytes, type, doc, reason, 0)) {
        if (why)
            *why = std::move(reason);
        return std::error_code{make_error_code(errc::protocol_error)}; // (a json converts from the enum too)
    }
    return doc;
}

} // namespace distlock::protobuf
