// A stream that plays a script instead of a network: the transport engine's tests
// drive it step by step, and inject an error at any step in turn.
//
// A script is a list of steps: connect, bytes the client must write, bytes the
// server sends. Writes may arrive in pieces or joined (the engine pipelines); a read
// is answered once every write before it has arrived. Past the end of the script
// the server is silent: reads wait until close(). A step marked to fail fails the
// operation that reaches it (connect refused, write or read reset), and the stream
// stays broken until it connects again.
#pragma once

#include <distlock/clock.hpp>
#include <distlock/transport/codec.hpp>

#include <asio/buffer.hpp>
#include <asio/error.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/this_coro.hpp>
#include <asio/use_awaitable.hpp>

#include <catch2/catch.hpp>

#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

namespace test::transport {

namespace dl = distlock;

struct step {
    enum kind_t { connect, write, read } kind;
    std::string bytes;
};

struct script {
    std::vector<step> steps;
    std::optional<std::size_t> fail_at; ///< the step whose operation fails
    std::size_t at = 0;                 ///< the next step
    std::size_t written = 0;            ///< bytes of the current write step already written
    bool broken = false;
    /// How many bytes a try_write() takes at most (0: none, it would block).
    std::size_t try_limit = std::string::npos;
    std::size_t tried_bytes = 0; ///< bytes taken by try_write()
    std::size_t tries = 0;       ///< calls of try_write()
    std::vector<dl::timer*> readers; // reads waiting for their step

    bool failing() const { return fail_at && *fail_at == at; }
    void wake()
    {
        for (auto* t : readers)
            t->cancel();
    }
};

class scripted_stream {
public:
    /// The next connect plays `s`.
    void play(std::shared_ptr<script> s) { next_ = std::move(s); }

    asio::awaitable<std::error_code> connect()
    {
        close();
        s_ = std::move(next_);
        REQUIRE(s_);
        REQUIRE(s_->at < s_->steps.size());
        REQUIRE(s_->steps[s_->at].kind == step::connect);
        if (s_->failing()) {
            s_->broken = true;
            co_return make_error_code(asio::error::connection_refused);
        }
        ++s_->at;
        open_ = true;
        co_return std::error_code{};
    }

    bool is_open() const noexcept { return open_; }

    void close() noexcept
    {
        open_ = false;
        if (s_)
            s_->wake();
    }

    asio::awaitable<std::tuple<std::error_code, std::size_t>> write(asio::const_buffer b)
    {
        const auto s = s_;
        if (!open_ || !s || s->broken)
            co_return std::tuple{make_error_code(asio::error::not_connected), std::size_t{0}};
        if (auto ec = arrive(*s, {static_cast<const char*>(b.data()), b.size()}))
            co_return std::tuple{ec, std::size_t{0}};
        co_return std::tuple{std::error_code{}, b.size()};
    }

    /// As a non-blocking socket: takes up to the script's try_limit bytes at once.
    std::size_t try_write(asio::const_buffer b, std::error_code& ec)
    {
        ec.clear();
        const auto s = s_;
        if (!open_ || !s || s->broken) {
            ec = make_error_code(asio::error::not_connected);
            return 0;
        }
        ++s->tries;
        const auto n = std::min(b.size(), s->try_limit);
        if (n == 0) {
            ec = make_error_code(asio::error::would_block);
            return 0;
        }
        // A socket reports the bytes it took; an error comes only when it took none.
        std::size_t took = 0;
        if ((ec = arrive(*s, {static_cast<const char*>(b.data()), n}, &took)) && took == 0)
            return 0;
        ec.clear();
        s->tried_bytes += took;
        return took;
    }

    asio::awaitable<std::tuple<std::error_code, std::size_t>> read_some(asio::mutable_buffer b)
    {
        const auto s = s_;
        for (;;) {
            if (!open_ || !s || s != s_)
                co_return std::tuple{make_error_code(asio::error::operation_aborted), std::size_t{0}};
            if (s->broken)
                co_return std::tuple{make_error_code(asio::error::connection_reset), std::size_t{0}};
            if (s->at < s->steps.size() && s->steps[s->at].kind == step::read) {
                if (s->failing()) {
                    s->broken = true;
                    co_return std::tuple{make_error_code(asio::error::connection_reset), std::size_t{0}};
                }
                auto& bytes = s->steps[s->at].bytes;
                const auto n = std::min(bytes.size(), b.size());
                std::copy_n(bytes.data(), n, static_cast<char*>(b.data()));
                bytes.erase(0, n);
                if (bytes.empty())
                    ++s->at;
                co_return std::tuple{std::error_code{}, n};
            }
            dl::timer t{co_await asio::this_coro::executor, dl::time_point::max()};
            s->readers.push_back(&t);
            (void)co_await t.async_wait(asio::experimental::as_tuple(asio::use_awaitable));
            std::erase(s->readers, &t);
        }
    }

private:
    // Bytes reach the server: they must be the script's next write steps.
    static std::error_code arrive(script& s, std::string_view data, std::size_t* took = nullptr)
    {
        while (!data.empty()) {
            REQUIRE(s.at < s.steps.size());
            auto& st = s.steps[s.at];
            REQUIRE(st.kind == step::write);
            if (s.failing()) {
                s.broken = true;
                s.wake();
                return make_error_code(asio::error::connection_reset);
            }
            const auto n = std::min(data.size(), st.bytes.size() - s.written);
            CHECK(data.substr(0, n) == std::string_view{st.bytes}.substr(s.written, n));
            data.remove_prefix(n);
            if (took)
                *took += n;
            s.written += n;
            if (s.written == st.bytes.size()) {
                s.written = 0;
                ++s.at;
            }
        }
        s.wake();
        return {};
    }

    std::shared_ptr<script> next_;
    std::shared_ptr<script> s_;
    bool open_ = false;
};

/// A protocol of lines: each message ends with '\n'; a line starting with '>' is a
/// push; a line starting with '!' is not the protocol.
struct line_codec {
    using message = std::string;

    dl::transport::decoded<std::string> decode(std::string_view bytes) const
    {
        const auto end = bytes.find('\n');
        if (end == std::string_view::npos)
            return {dl::transport::decode_status::need_more, 0, {}};
        if (bytes.starts_with('!'))
            return {dl::transport::decode_status::malformed, 0, {}};
        return {dl::transport::decode_status::complete, end + 1, std::string{bytes.substr(0, end)}};
    }

    bool is_push(const std::string& m) const noexcept { return m.starts_with('>'); }
};

static_assert(dl::transport::codec<line_codec>);

} // namespace test::transport
