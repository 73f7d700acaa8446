// distlock/backend/json.hpp: reading a JSON reply field by field without ever
// throwing, for the stores whose servers speak JSON (etcd's gateway, DynamoDB).
//
// Design note. A reply is the server's data: anything may be in it, and nothing in it
// may make a call throw (operations report failures as error codes). nlohmann::json's
// convenient accessors throw on a type they did not expect (`value(key, default)` when
// the key holds another type, `get<T>()`, `at()`, `operator[]` on a non-object,
// iteration over a scalar), so stores never use them on server data. They read through
// a json_reader instead, whose getters look at each value's type before touching it.
// A getter that finds something other than what it needs records the problem (where,
// what was expected, what came) and returns an empty value, so a decoder reads every
// field it needs straight through and checks once at the end. Only the first problem
// is kept: it is the one that explains the others. json_reply::fail() then turns it
// into errc::protocol_error with the words a user needs in the diagnostics: which
// field, what was expected, what came, and the start of the reply.
//
// Protocols differ on two points, and the reader is told which way each goes:
//  - What a null means: proto3's JSON mapping (etcd's gateway) reads a null as the
//    field's default, the same as an absent field; DynamoDB never sends one, so there
//    a null is a malformed value.
//  - How an integer is written: as a JSON number, as a decimal string (proto3 writes
//    64-bit integers so; DynamoDB's number attributes are strings), or either.
//
// A parsed reply refuses documents nested deeper than a bound (256 levels by default,
// far beyond any reply of the supported servers): nlohmann::json copies, compares and
// prints recursively, so a reply nested a million levels deep would exhaust the stack.
//
// Pure: no Asio and no I/O, so the decoders built on it are unit-tested and fuzzed on
// their own.
#pragma once

#include <distlock/diagnostics.hpp>
#include <distlock/error.hpp>
#include <distlock/util/base64.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>

namespace distlock::backend {

/// What a JSON null stands for in a protocol.
enum class json_null {
    means_absent, ///< The field's default, as if it were absent (proto3's JSON mapping: etcd).
    is_malformed, ///< A value of the wrong type (a protocol that never sends null: DynamoDB).
};

/// How a protocol writes an integer field.
enum class json_integer {
    number,                   ///< A JSON number without a fraction: `42`.
    decimal_string,           ///< A string of decimal digits: `"42"` (DynamoDB's number attributes).
    number_or_decimal_string, ///< Either (proto3's 64-bit integers, which some servers send as numbers).
};

/// What a reply got wrong: the first problem a reader found in it.
struct json_problem {
    std::string path;     ///< Where: `header.revision`, `kvs[2].key`; empty for the reply as a whole.
    std::string expected; ///< What belongs there: `a string`, `an object`.
    std::string found;    ///< What was there: `an array`, `nothing`, `the string "4x"`.

    /// `header.revision: expected ..., found an array`; without the path for the
    /// reply as a whole.
    std::string to_string() const
    {
        std::string out;
        if (!path.empty())
            out = path + ": ";
        out += "expected " + expected + ", found " + found;
        return out;
    }
};

class json_reply;
class json_array;

/// A view of one value of a json_reply (or of its absence), with typed getters for
/// the members of an object. It never throws on the reply's content: a getter that
/// finds a value of another type, or no value where one is required, records the
/// problem in the reply and returns an empty value (an absent reader, an empty array,
/// nullopt, zero, an empty string). Check json_reply::ok() (or ok() here) once the
/// fields are read.
///
/// Getters named after a type require the member (absent, or null where nulls are
/// malformed, is a problem); `optional_` getters accept its absence. Reading a member
/// of a value that is not an object is a problem at that value; reading one of an
/// absent value finds nothing.
///
/// \par Object lifetimes
/// Refers to its reply, which must outlive it.
class json_reader {
public:
    /// Whether there is a value here (not absent, and not a null that means absent).
    bool present() const noexcept { return value_ != nullptr; }
    /// Whether the value here is an object (no problem recorded when it is not).
    bool is_object() const noexcept { return value_ && value_->is_object(); }
    /// Whether the value here is a string (no problem recorded when it is not).
    bool is_string() const noexcept { return value_ && value_->is_string(); }
    /// Whether the value here is an array (no problem recorded when it is not).
    bool is_array() const noexcept { return value_ && value_->is_array(); }
    /// Where this value is in the reply: `responses[1].response_range`; empty for the root.
    const std::string& path() const noexcept { return path_; }
    /// Whether the reply has no problem so far.
    bool ok() const noexcept;

    /// True when the value here is an object; records a problem otherwise.
    bool expect_object() const
    {
        if (is_object())
            return true;
        record(path_, "an object", describe(value_));
        return false;
    }

    /// The value here as a string; records a problem (and gives "") when it is not one.
    std::string as_string() const
    {
        if (is_string())
            return value_->get_ref<const std::string&>();
        record(path_, "a string", describe(value_));
        return {};
    }

    /// Whether the object here has a member `name`, null or not (a value that is not
    /// an object has none; no problem is recorded).
    bool has(std::string_view name) const { return is_object() && value_->find(std::string{name}) != value_->end(); }

    /// The member `name`, whatever its type; absent when there is none.
    json_reader field(std::string_view name) const { return {effective(member(name)), join(name), reply_}; }

    /// The member `name`, which must be an object; an absent reader (and a problem)
    /// otherwise.
    json_reader object(std::string_view name) const { return object_member(name, true); }
    /// The member `name` if it is an object; absent when there is none; a problem (and
    /// an absent reader) when it is of another type.
    json_reader optional_object(std::string_view name) const { return object_member(name, false); }

    /// The member `name`, which must be an array; empty (and a problem) otherwise.
    json_array array(std::string_view name) const;
    /// The member `name` if it is an array; empty when there is none; a problem (and
    /// empty) when it is of another type.
    json_array optional_array(std::string_view name) const;

    /// The string member `name` (required).
    std::string string(std::string_view name) const
    {
        return get<std::string>(name, true, "a string", [](const nlohmann::json& v) { return string_of(v); })
            .value_or(std::string{});
    }
    /// The string member `name`; nullopt when absent.
    std::optional<std::string> optional_string(std::string_view name) const
    {
        return get<std::string>(name, false, "a string", [](const nlohmann::json& v) { return string_of(v); });
    }

    /// The boolean member `name` (required).
    bool boolean(std::string_view name) const
    {
        return get<bool>(name, true, "a boolean", [](const nlohmann::json& v) { return boolean_of(v); })
            .value_or(false);
    }
    /// The boolean member `name`; nullopt when absent.
    std::optional<bool> optional_boolean(std::string_view name) const
    {
        return get<bool>(name, false, "a boolean", [](const nlohmann::json& v) { return boolean_of(v); });
    }

    /// The signed 64-bit integer member `name`, written as `form` says (required).
    std::int64_t int64(std::string_view name, json_integer form = json_integer::number) const
    {
        return get<std::int64_t>(name, true, integer_expected(form, true),
                                 [form](const nlohmann::json& v) { return integer_of<std::int64_t>(v, form); })
            .value_or(0);
    }
    /// The signed 64-bit integer member `name`; nullopt when absent.
    std::optional<std::int64_t> optional_int64(std::string_view name, json_integer form = json_integer::number) const
    {
        return get<std::int64_t>(name, false, integer_expected(form, true),
                                 [form](const nlohmann::json& v) { return integer_of<std::int64_t>(v, form); });
    }

    /// The unsigned 64-bit integer member `name`, written as `form` says (required).
    std::uint64_t uint64(std::string_view name, json_integer form = json_integer::number) const
    {
        return get<std::uint64_t>(name, true, integer_expected(form, false),
                                  [form](const nlohmann::json& v) { return integer_of<std::uint64_t>(v, form); })
            .value_or(0);
    }
    /// The unsigned 64-bit integer member `name`; nullopt when absent.
    std::optional<std::uint64_t> optional_uint64(std::string_view name, json_integer form = json_integer::number) const
    {
        return get<std::uint64_t>(name, false, integer_expected(form, false),
                                  [form](const nlohmann::json& v) { return integer_of<std::uint64_t>(v, form); });
    }

    /// The bytes of the member `name`, written as padded base64 text (RFC 4648), as
    /// JSON APIs carry bytes (required).
    std::string base64(std::string_view name) const
    {
        return get<std::string>(name, true, "base64 text", [](const nlohmann::json& v) { return bytes_of(v); })
            .value_or(std::string{});
    }
    /// The bytes of the base64 member `name`; nullopt when absent.
    std::optional<std::string> optional_base64(std::string_view name) const
    {
        return get<std::string>(name, false, "base64 text", [](const nlohmann::json& v) { return bytes_of(v); });
    }

    /// Records that the value here is not what the protocol allows (a rule beyond its
    /// type: "a positive TTL"). `expected` says what would have been.
    void report(std::string_view expected) const { record(path_, std::string{expected}, describe(value_)); }
    /// Records that the member `name` is not what the protocol allows.
    void report(std::string_view name, std::string_view expected) const
    {
        record(join(name), std::string{expected}, describe(member(name)));
    }

private:
    friend class json_reply;
    friend class json_array;

    json_reader(const nlohmann::json* value, std::string path, json_reply* reply) noexcept
        : value_{value}, path_{std::move(path)}, reply_{reply}
    {}

    std::string join(std::string_view name) const
    {
        std::string out = path_;
        if (!out.empty())
            out += '.';
        out += name;
        return out;
    }

    void record(std::string path, std::string expected, std::string found) const;
    const nlohmann::json* effective(const nlohmann::json* member) const noexcept;

    // The member as it is (a null included), nullptr when there is none. Asking a value
    // that is not an object for a member is a problem at that value.
    const nlohmann::json* member(std::string_view name) const
    {
        if (!value_)
            return nullptr;
        if (!value_->is_object()) {
            record(path_, "an object", describe(value_));
            return nullptr;
        }
        const auto it = value_->find(std::string{name});
        return it == value_->end() ? nullptr : &*it;
    }

    template <class T, class Convert>
    std::optional<T> get(std::string_view name, bool required, std::string_view expected, Convert convert) const
    {
        const auto* raw = member(name);
        const auto* value = effective(raw);
        if (!value) {
            if (required)
                record(join(name), std::string{expected}, describe(raw));
            return std::nullopt;
        }
        auto out = convert(*value);
        if (!out)
            record(join(name), std::string{expected}, describe(value));
        return out;
    }

    json_reader object_member(std::string_view name, bool required) const
    {
        const auto* raw = member(name);
        const auto* value = effective(raw);
        if (value && value->is_object())
            return {value, join(name), reply_};
        if (value || required)
            record(join(name), "an object", describe(raw));
        return {nullptr, join(name), reply_};
    }

    json_array array_member(std::string_view name, bool required) const;

    static std::optional<std::string> string_of(const nlohmann::json& v)
    {
        if (!v.is_string())
            return std::nullopt;
        return v.get_ref<const std::string&>();
    }

    static std::optional<bool> boolean_of(const nlohmann::json& v)
    {
        if (!v.is_boolean())
            return std::nullopt;
        return v.get<bool>();
    }

    static std::optional<std::string> bytes_of(const nlohmann::json& v)
    {
        if (!v.is_string())
            return std::nullopt;
        return util::from_base64(v.get_ref<const std::string&>());
    }

    static std::string integer_expected(json_integer form, bool is_signed)
    {
        std::string out = is_signed ? "a signed 64-bit integer" : "an unsigned 64-bit integer";
        switch (form) {
        case json_integer::number:
            return out + " as a JSON number";
        case json_integer::decimal_string:
            return out + " as a decimal string";
        case json_integer::number_or_decimal_string:
            break;
        }
        return out + " (a JSON number or a decimal string)";
    }

    // Range-checked: a JSON number is kept by nlohmann::json as a signed or an unsigned
    // 64-bit integer (or a double, which is not an integer here), and a decimal string
    // is parsed with from_chars, which refuses signs where T has none, overflow, and
    // anything after the digits.
    template <class T>
    static std::optional<T> integer_of(const nlohmann::json& v, json_integer form)
    {
        const bool numbers = form != json_integer::decimal_string;
        const bool strings = form != json_integer::number;
        if (numbers && v.is_number_unsigned()) {
            const auto n = v.get<std::uint64_t>();
            if (n > static_cast<std::uint64_t>(std::numeric_limits<T>::max()))
                return std::nullopt;
            return static_cast<T>(n);
        }
        if (numbers && v.is_number_integer()) { // stored signed: negative when parsed, any sign when built in code
            const auto n = v.get<std::int64_t>();
            if (n < 0 && !std::numeric_limits<T>::is_signed)
                return std::nullopt;
            return static_cast<T>(n);
        }
        if (strings && v.is_string()) {
            const auto& s = v.get_ref<const std::string&>();
            T n{};
            const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), n);
            if (s.empty() || ec != std::errc{} || end != s.data() + s.size())
                return std::nullopt;
            return n;
        }
        return std::nullopt;
    }

    // What a value is, for a problem's "found ...": its type, and a scalar's value
    // (strings cut short: a problem names a value, it does not carry it).
    static std::string describe(const nlohmann::json* v)
    {
        if (!v)
            return "nothing";
        switch (v->type()) {
        case nlohmann::json::value_t::null:
            return "null";
        case nlohmann::json::value_t::boolean:
            return v->get<bool>() ? "the boolean true" : "the boolean false";
        case nlohmann::json::value_t::number_integer:
        case nlohmann::json::value_t::number_unsigned:
        case nlohmann::json::value_t::number_float:
            return "the number " + v->dump();
        case nlohmann::json::value_t::string: {
            std::string out = "the string ";
            quote(v->get_ref<const std::string&>(), out, 48);
            return out;
        }
        case nlohmann::json::value_t::array:
            return v->empty() ? "an empty array" : "an array";
        case nlohmann::json::value_t::object:
            return v->empty() ? "an empty object" : "an object";
        case nlohmann::json::value_t::binary:
            return "binary data";
        case nlohmann::json::value_t::discarded:
            break;
        }
        return "nothing";
    }

public:
    /// Appends `text` as a JSON string literal, escaped, its escaped contents cut at
    /// `max_bytes` bytes (then closed with `..."`), never in the middle of a UTF-8
    /// sequence.
    static void quote(std::string_view text, std::string& out, std::size_t max_bytes);

private:
    const nlohmann::json* value_; // nullptr: absent
    std::string path_;
    json_reply* reply_;
};

/// The elements of a JSON array, each as a json_reader (path `name[i]`); empty when
/// the array is absent or was of another type.
class json_array {
public:
    /// Iterates the elements as readers.
    class iterator {
    public:
        using value_type = json_reader;
        using difference_type = std::ptrdiff_t;

        /// The element here, as a reader.
        json_reader operator*() const { return array_->at(index_); }
        /// The next element.
        iterator& operator++() noexcept
        {
            ++index_;
            return *this;
        }
        /// The next element (this one returned).
        iterator operator++(int) noexcept
        {
            auto before = *this;
            ++index_;
            return before;
        }
        /// Whether both are at the same element (of the same array).
        friend bool operator==(const iterator& a, const iterator& b) noexcept { return a.index_ == b.index_; }

    private:
        friend class json_array;
        iterator(const json_array* array, std::size_t index) noexcept : array_{array}, index_{index} {}
        const json_array* array_;
        std::size_t index_;
    };

    /// How many elements there are (0 when the array is absent).
    std::size_t size() const noexcept { return value_ ? value_->size() : 0; }
    /// Whether there are none.
    bool empty() const noexcept { return size() == 0; }
    /// The element at `index`; an absent reader (path `name[index]`) beyond the end.
    json_reader at(std::size_t index) const
    {
        std::string path = path_ + "[" + std::to_string(index) + "]";
        if (index >= size())
            return {nullptr, std::move(path), reply_};
        return {&(*value_)[index], std::move(path), reply_};
    }
    /// The first element.
    iterator begin() const noexcept { return {this, 0}; }
    /// Past the last element.
    iterator end() const noexcept { return {this, size()}; }

private:
    friend class json_reader;
    json_array(const nlohmann::json* value, std::string path, json_reply* reply) noexcept
        : value_{value}, path_{std::move(path)}, reply_{reply}
    {}

    const nlohmann::json* value_; // an array, or nullptr
    std::string path_;
    json_reply* reply_;
};

/// A JSON reply being read: its document (parsed here, or parsed before and viewed),
/// how its protocol writes nulls, and the first problem its readers found.
///
/// \par Object lifetimes
/// Neither copied nor moved (its readers point into it): made where it is used,
/// `auto reply = json_reply::parse(body, json_null::means_absent);`. A view's document
/// must outlive the reply.
class json_reply {
public:
    /// Replies nested deeper are refused (see the design note).
    static constexpr std::size_t default_max_depth = 256;
    /// How much of a reply the diagnostics quote.
    static constexpr std::size_t excerpt_bytes = 200;

    /// Parses `text`. Text that is not one JSON document, or is nested deeper than
    /// `max_depth`, is the reply's problem; its root is then absent.
    static json_reply parse(std::string_view text, json_null nulls, std::size_t max_depth = default_max_depth)
    {
        return json_reply{text, nulls, max_depth};
    }

    /// Reads `document`, parsed before; the reply refers to it.
    static json_reply view(const nlohmann::json& document, json_null nulls) { return json_reply{document, nulls}; }

    /// Not copied (nor moved): its readers point into it.
    json_reply(const json_reply&) = delete;
    /// Not assigned: its readers point into it.
    json_reply& operator=(const json_reply&) = delete;

    /// The document's root (absent when the text was not JSON).
    json_reader root() { return {document_, std::string{}, this}; }

    /// Whether no problem was found so far.
    bool ok() const noexcept { return !problem_; }
    /// The first problem found; meaningful when !ok().
    const json_problem& problem() const noexcept { return problem_ ? *problem_ : no_problem(); }
    /// What a null stands for in this reply.
    json_null nulls() const noexcept { return nulls_; }

    /// The value `at` (a reader of this reply) as a document of its own: moved out of
    /// a parsed reply (which should not be read there afterwards), copied from a view.
    /// Null when `at` is absent.
    nlohmann::json take(const json_reader& at)
    {
        if (!at.value_)
            return nullptr;
        if (owns_document_) // the reply's own document, never const: moving out of it is allowed
            return std::move(*const_cast<nlohmann::json*>(at.value_));
        return *at.value_;
    }

    /// The start of the reply as the diagnostics quote it: at most excerpt_bytes of its
    /// text (control bytes escaped, "..." and the full size when cut), or of the viewed
    /// document written out as JSON.
    std::string excerpt() const
    {
        std::string out;
        if (!owns_document_) {
            if (document_)
                write_bounded(*document_, out, excerpt_bytes);
            if (out.size() >= excerpt_bytes) {
                cut_utf8(out, excerpt_bytes);
                out += "...";
            }
            return out;
        }
        if (text_size_ == 0)
            return "(an empty body)";
        const auto written = append_escaped(text_start_, out, excerpt_bytes, escaping::text);
        if (written < text_size_)
            out += "... (" + std::to_string(text_size_) + " bytes)";
        return out;
    }

    /// errc::protocol_error, with the words in `diag` (when given): the client's,
    /// `context` and the problem ("etcd range answer: kvs[0].key: expected base64 text,
    /// found the number 5"), and the server's, the reply's excerpt().
    std::error_code fail(diagnostics* diag, std::string_view context) const
    {
        if (diag) {
            std::string words{context};
            if (problem_)
                words += (words.empty() ? "" : ": ") + problem_->to_string();
            diag->set_client_message(std::move(words));
            diag->set_server_message(excerpt());
        }
        return make_error_code(errc::protocol_error);
    }

private:
    friend class json_reader;

    json_reply(std::string_view text, json_null nulls, std::size_t max_depth)
        : nulls_{nulls}, owns_document_{true}, text_size_{text.size()}
    {
        text_start_ = std::string{text.substr(0, excerpt_bytes)};
        cut_utf8(text_start_, excerpt_bytes);
        if (nests_deeper_than(text, max_depth)) {
            problem_ = json_problem{{}, "JSON nested at most " + std::to_string(max_depth) + " levels deep",
                                    "deeper nesting"};
            return;
        }
        owned_ = nlohmann::json::parse(text.data(), text.data() + text.size(), nullptr, false);
        if (owned_.is_discarded()) {
            owned_ = nullptr;
            problem_ = json_problem{{}, "a JSON document", text.empty() ? "an empty body" : "text that is not JSON"};
            return;
        }
        document_ = &owned_;
    }

    json_reply(const nlohmann::json& document, json_null nulls) : document_{&document}, nulls_{nulls} {}

    void record(std::string path, std::string expected, std::string found)
    {
        if (!problem_)
            problem_ = json_problem{std::move(path), std::move(expected), std::move(found)};
    }

    static const json_problem& no_problem() noexcept
    {
        static const json_problem none;
        return none;
    }

    // Whether `text` opens more than `limit` arrays or objects inside one another
    // (brackets inside strings do not count). Text that is not JSON is left to the parser.
    static bool nests_deeper_than(std::string_view text, std::size_t limit) noexcept
    {
        std::size_t depth = 0;
        bool in_string = false, escaped = false;
        for (const char c : text) {
            if (in_string) {
                if (escaped)
                    escaped = false;
                else if (c == '\\')
                    escaped = true;
                else if (c == '"')
                    in_string = false;
            } else if (c == '"') {
                in_string = true;
            } else if (c == '[' || c == '{') {
                if (++depth > limit)
                    return true;
            } else if ((c == ']' || c == '}') && depth > 0) {
                --depth;
            }
        }
        return false;
    }

    enum class escaping {
        text,        // control bytes as \\xNN: a body quoted as it came
        json_string, // as in a JSON string literal: quotes, backslashes, control bytes as \\u00NN
    };

    // Appends `text` escaped as `how` says, as long as the appended bytes stay within
    // `max_bytes` (escapes included: the bound is on what is written), never ending in
    // the middle of a UTF-8 sequence. Returns how many bytes of `text` were written.
    static std::size_t append_escaped(std::string_view text, std::string& out, std::size_t max_bytes, escaping how)
    {
        static constexpr char hex[] = "0123456789abcdef";
        const auto start = out.size();
        std::size_t taken = 0;
        for (; taken < text.size(); ++taken) {
            const char c = text[taken];
            const auto b = static_cast<unsigned char>(c);
            char piece[6];
            std::size_t n = 0;
            if (how == escaping::json_string && (c == '"' || c == '\\')) {
                piece[n++] = '\\';
                piece[n++] = c;
            } else if (b < 0x20 || b == 0x7F) {
                piece[n++] = '\\';
                if (how == escaping::json_string) {
                    piece[n++] = 'u';
                    piece[n++] = '0';
                    piece[n++] = '0';
                } else {
                    piece[n++] = 'x';
                }
                piece[n++] = hex[b >> 4];
                piece[n++] = hex[b & 0xF];
            } else {
                piece[n++] = c;
            }
            if (out.size() - start + n > max_bytes)
                break;
            out.append(piece, n);
        }
        if (taken < text.size()) { // cut: not in the middle of a UTF-8 sequence
            const auto before = out.size();
            cut_utf8(out, out.size());
            taken -= before - out.size();
        }
        return taken;
    }

    // Drops a UTF-8 sequence that `s` (cut to at most `max` bytes) ends in the middle of.
    static void cut_utf8(std::string& s, std::size_t max)
    {
        if (s.size() > max)
            s.resize(max);
        std::size_t back = 0; // continuation bytes at the end
        while (back < s.size() && back < 3 && (static_cast<unsigned char>(s[s.size() - 1 - back]) & 0xC0) == 0x80)
            ++back;
        if (back == s.size())
            return;
        const auto lead = static_cast<unsigned char>(s[s.size() - 1 - back]);
        const std::size_t length = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
        if (length > 1 && back + 1 < length)
            s.resize(s.size() - 1 - back);
    }

    // Writes `v` as JSON into `out` until `out` holds `limit` bytes. Each level writes
    // a bracket before descending, so the recursion is no deeper than `limit`.
    static void write_bounded(const nlohmann::json& v, std::string& out, std::size_t limit)
    {
        if (out.size() >= limit)
            return;
        switch (v.type()) {
        case nlohmann::json::value_t::object: {
            out += '{';
            bool first = true;
            for (auto it = v.begin(); it != v.end() && out.size() < limit; ++it) {
                if (!first)
                    out += ',';
                first = false;
                json_reader::quote(it.key(), out, limit - std::min(limit, out.size()));
                out += ':';
                write_bounded(it.value(), out, limit);
            }
            out += '}';
            return;
        }
        case nlohmann::json::value_t::array: {
            out += '[';
            for (std::size_t i = 0; i < v.size() && out.size() < limit; ++i) {
                if (i > 0)
                    out += ',';
                write_bounded(v[i], out, limit);
            }
            out += ']';
            return;
        }
        case nlohmann::json::value_t::string:
            json_reader::quote(v.get_ref<const std::string&>(), out, limit - out.size());
            return;
        case nlohmann::json::value_t::discarded:
        case nlohmann::json::value_t::binary:
            return;
        default: // null, booleans and numbers: a few bytes, and dump() cannot fail on them
            out += v.dump();
            return;
        }
    }

    nlohmann::json owned_;
    const nlohmann::json* document_ = nullptr; // nullptr: the text was not JSON
    json_null nulls_;
    bool owns_document_ = false;
    std::string text_start_; // the first excerpt_bytes of a parsed text
    std::size_t text_size_ = 0;
    std::optional<json_problem> problem_;
};

inline bool json_reader::ok() const noexcept { return reply_->ok(); }

inline void json_reader::record(std::string path, std::string expected, std::string found) const
{
    reply_->record(std::move(path), std::move(expected), std::move(found));
}

inline const nlohmann::json* json_reader::effective(const nlohmann::json* member) const noexcept
{
    if (member && member->is_null() && reply_->nulls_ == json_null::means_absent)
        return nullptr;
    return member;
}

inline json_array json_reader::array_member(std::string_view name, bool required) const
{
    const auto* raw = member(name);
    const auto* value = effective(raw);
    if (value && value->is_array())
        return {value, join(name), reply_};
    if (value || required)
        record(join(name), "an array", describe(raw));
    return {nullptr, join(name), reply_};
}

inline json_array json_reader::array(std::string_view name) const { return array_member(name, true); }
inline json_array json_reader::optional_array(std::string_view name) const { return array_member(name, false); }

inline void json_reader::quote(std::string_view text, std::string& out, std::size_t max_bytes)
{
    out += '"';
    if (json_reply::append_escaped(text, out, max_bytes, json_reply::escaping::json_string) < text.size())
        out += "...";
    out += '"';
}

} // namespace distlock::backend
