// distlock/protobuf/wire.hpp: Protocol Buffers' wire format: varints, tags and
// length-delimited fields, written into a string and read from a view. Pure: no I/O,
// no allocation on the read side; every read checks its bounds (the bytes are a
// server's), so a reader over any bytes ends in a value or in failed(), never past
// the end.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace distlock::protobuf {

/// How a field's value is laid out (the low three bits of its tag).
enum class wire_type : std::uint8_t {
    varint = 0,
    fixed64 = 1,
    length_delimited = 2,
    start_group = 3, ///< deprecated groups: never written by proto3, refused when read
    end_group = 4,
    fixed32 = 5,
};

/// The largest field number the format allows.
inline constexpr std::uint32_t max_field_number = (1u << 29) - 1;

inline void put_varint(std::string& out, std::uint64_t v)
{
    while (v >= 0x80) {
        out.push_back(static_cast<char>((v & 0x7f) | 0x80));
        v >>= 7;
    }
    out.push_back(static_cast<char>(v));
}

inline void put_tag(std::string& out, std::uint32_t field, wire_type type)
{
    put_varint(out, (static_cast<std::uint64_t>(field) << 3) | static_cast<std::uint8_t>(type));
}

/// A length-delimited field: bytes, a string or an embedded message.
inline void put_bytes(std::string& out, std::uint32_t field, std::string_view bytes)
{
    put_tag(out, field, wire_type::length_delimited);
    put_varint(out, bytes.size());
    out.append(bytes);
}

/// An int64, int32, uint64, bool or enum field (proto3 writes negative int64 values
/// as ten-byte varints of their two's complement).
inline void put_varint_field(std::string& out, std::uint32_t field, std::uint64_t v)
{
    put_tag(out, field, wire_type::varint);
    put_varint(out, v);
}

/// Reads fields from the front of a message. After a read that failed (truncated or
/// malformed bytes) failed() is true and every further read fails.
class reader {
public:
    explicit reader(std::string_view bytes) noexcept : rest_{bytes} {}
    /// A reader keeps a view: of a string that outlives it, never of a temporary.
    explicit reader(std::string&&) = delete;

    bool at_end() const noexcept { return rest_.empty(); }
    bool failed() const noexcept { return failed_; }

    /// A varint of at most ten bytes whose value fits 64 bits.
    bool varint(std::uint64_t& v) noexcept
    {
        v = 0;
        for (unsigned shift = 0; shift < 64; shift += 7) {
            if (rest_.empty())
                return fail();
            const auto byte = static_cast<std::uint8_t>(rest_.front());
            rest_.remove_prefix(1);
            if (shift == 63 && byte > 1)
                return fail(); // bits past the 64th
            v |= static_cast<std::uint64_t>(byte & 0x7f) << shift;
            if ((byte & 0x80) == 0)
                return true;
        }
        return fail();
    }

    /// The next field's number and wire type; field 0 and unknown types fail.
    bool tag(std::uint32_t& field, wire_type& type) noexcept
    {
        std::uint64_t t = 0;
        if (!varint(t))
            return false;
        const auto number = t >> 3;
        const auto low = static_cast<std::uint8_t>(t & 7);
        if (number == 0 || number > max_field_number || low == 6 || low == 7)
            return fail();
        field = static_cast<std::uint32_t>(number);
        type = static_cast<wire_type>(low);
        return true;
    }

    /// A length-delimited value, as a view into the message.
    bool bytes(std::string_view& out) noexcept
    {
        std::uint64_t n = 0;
        if (!varint(n))
            return false;
        if (n > rest_.size())
            return fail();
        out = rest_.substr(0, static_cast<std::size_t>(n));
        rest_.remove_prefix(static_cast<std::size_t>(n));
        return true;
    }

    /// Skips a value of `type` (a field this reader does not know: proto3 keeps going).
    bool skip(wire_type type) noexcept
    {
        std::uint64_t v = 0;
        std::string_view s;
        switch (type) {
        case wire_type::varint:
            return varint(v);
        case wire_type::fixed64:
            return advance(8);
        case wire_type::length_delimited:
            return bytes(s);
        case wire_type::fixed32:
            return advance(4);
        default:
            return fail(); // groups
        }
    }

private:
    bool advance(std::size_t n) noexcept
    {
        if (n > rest_.size())
            return fail();
        rest_.remove_prefix(n);
        return true;
    }
    bool fail() noexcept
    {
        failed_ = true;
        rest_ = {};
        return false;
    }

    std::string_view rest_;
    bool failed_ = false;
};

} // namespace distlock::protobuf
