// distlock/zookeeper/proto/jute.hpp: ZooKeeper's serialization (jute): big-endian
// int32 and int64, one-byte booleans, length-prefixed buffers and strings (length -1:
// null), count-prefixed vectors. Bytes only, no I/O.
//
// The reader never reads past its input and never allocates more than the input
// could hold: a length larger than the bytes left, or negative where null is not
// allowed, makes it fail, and every later read then fails too. Callers check ok()
// once, at the end.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace distlock::zookeeper::proto {

class writer {
public:
    writer() = default;
    /// Reserves room for `size` bytes (the encoders know a frame's size up front).
    explicit writer(std::size_t size) { out_.reserve(size); }

    writer& i32(std::int32_t v) { return big_endian<4>(static_cast<std::uint32_t>(v)); }
    writer& i64(std::int64_t v) { return big_endian<8>(static_cast<std::uint64_t>(v)); }
    writer& boolean(bool v)
    {
        out_ += static_cast<char>(v ? 1 : 0);
        return *this;
    }
    /// A buffer or a ustring (the same on the wire).
    writer& bytes(std::string_view v)
    {
        i32(static_cast<std::int32_t>(v.size()));
        out_.append(v);
        return *this;
    }
    writer& null_bytes() { return i32(-1); }
    writer& strings(const std::vector<std::string>& v)
    {
        i32(static_cast<std::int32_t>(v.size()));
        for (const auto& s : v)
            bytes(s);
        return *this;
    }

    const std::string& data() const noexcept { return out_; }
    std::string take() { return std::move(out_); }
    /// The bytes written, as a frame: the first four bytes written (a placeholder) set
    /// to the length of the rest.
    std::string take_frame()
    {
        const auto n = static_cast<std::uint32_t>(out_.size() - 4);
        for (int i = 0; i < 4; ++i)
            out_[static_cast<std::size_t>(i)] = static_cast<char>((n >> (24 - 8 * i)) & 0xFF);
        return std::move(out_);
    }

private:
    template <int Bytes, class Unsigned>
    writer& big_endian(Unsigned u)
    {
        char b[Bytes];
        for (int i = 0; i < Bytes; ++i)
            b[i] = static_cast<char>((u >> (8 * (Bytes - 1 - i))) & 0xFF);
        out_.append(b, Bytes);
        return *this;
    }

    std::string out_;
};

class reader {
public:
    explicit reader(std::string_view in) noexcept : in_{in} {}

    std::int32_t i32() noexcept { return static_cast<std::int32_t>(static_cast<std::uint32_t>(unsigned_of(4))); }
    std::int64_t i64() noexcept { return static_cast<std::int64_t>(unsigned_of(8)); }
    bool boolean() noexcept
    {
        const auto b = unsigned_of(1);
        if (b > 1)
            ok_ = false;
        return b == 1;
    }
    /// A buffer or ustring; nullopt for null (length -1), or on failure.
    std::optional<std::string> bytes()
    {
        const auto n = i32();
        if (!ok_ || n == -1)
            return std::nullopt;
        if (n < 0 || static_cast<std::size_t>(n) > in_.size() - at_) {
            ok_ = false;
            return std::nullopt;
        }
        std::string out{in_.substr(at_, static_cast<std::size_t>(n))};
        at_ += static_cast<std::size_t>(n);
        return out;
    }
    /// A string that must not be null.
    std::string text()
    {
        auto s = bytes();
        if (!s)
            ok_ = false;
        return s ? std::move(*s) : std::string{};
    }
    std::vector<std::string> strings()
    {
        std::vector<std::string> out;
        const auto n = i32();
        if (!ok_ || n == -1)
            return out;
        // Each element takes at least its 4-byte length: a count the input cannot hold fails.
        if (n < 0 || static_cast<std::size_t>(n) > (in_.size() - at_) / 4) {
            ok_ = false;
            return out;
        }
        out.reserve(static_cast<std::size_t>(n));
        for (std::int32_t i = 0; i < n && ok_; ++i)
            out.push_back(text());
        return out;
    }

    bool ok() const noexcept { return ok_; }
    bool at_end() const noexcept { return at_ == in_.size(); }
    std::size_t left() const noexcept { return in_.size() - at_; }

private:
    std::uint64_t unsigned_of(std::size_t n) noexcept
    {
        if (!ok_ || in_.size() - at_ < n) {
            ok_ = false;
            return 0;
        }
        std::uint64_t v = 0;
        for (std::size_t i = 0; i < n; ++i)
            v = (v << 8) | static_cast<unsigned char>(in_[at_ + i]);
        at_ += n;
        return v;
    }

    std::string_view in_;
    std::size_t at_ = 0;
    bool ok_ = true;
};

} // namespace distlock::zookeeper::proto
