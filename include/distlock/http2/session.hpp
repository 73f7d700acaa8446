// distlock/http2/session.hpp: the client side of one HTTP/2 connection, sans-I/O: a
// thin owner of an nghttp2 session fed with the bytes read and drained of the bytes
// to write, and the codec that hands the engine's reads to it.
//
// Design note. HTTP/2 is a state machine per connection (HPACK's dynamic tables,
// flow-control windows, stream states, SETTINGS, PING and GOAWAY), which nghttp2
// implements without doing any I/O of its own: the transport engine keeps owning the
// socket (connecting, TLS, writing, reading, failing), and this session turns its
// reads into per-stream events and its streams into bytes. nghttp2 answers PINGs and
// SETTINGS and replenishes the receive windows by itself; those frames leave with the
// next output(). The windows this client opens are large (a lock's replies are small,
// and a stalled window would stall a watch), so WINDOW_UPDATEs are rare.
//
// Not thread-safe: one strand uses a session (the grpc channel's).
#pragma once

#include <distlock/transport/codec.hpp>

#include <nghttp2/nghttp2.h>
#include <sys/types.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace distlock::http2 {

/// What one stream hears, on the session's strand.
class stream_listener {
public:
    /// A header field of the response (`trailer`: after its data).
    virtual void on_header(std::string_view name, std::string_view value, bool trailer) = 0;
    /// Bytes of the response's body, in order.
    virtual void on_data(std::string_view bytes) = 0;
    /// The stream is over; no call follows. `error_code` is HTTP/2's: 0 when it ended
    /// normally, NGHTTP2_REFUSED_STREAM when the server did not process it (a GOAWAY
    /// naming an older stream, or a refusal), another code when it was reset.
    virtual void on_close(std::uint32_t error_code) = 0;

protected:
    ~stream_listener() = default;
};

struct header {
    std::string_view name; ///< lower case, as HTTP/2 requires
    std::string_view value;
};

/// The receive windows a client session opens.
struct session_settings {
    std::uint32_t stream_window = 1u << 24;     ///< each stream's
    std::uint32_t connection_window = 1u << 26; ///< the connection's
};

/// A client connection's protocol state.
class client_session {
public:
    client_session() : client_session(session_settings{}) {}
    explicit client_session(session_settings s)
    {
        nghttp2_session_callbacks* cbs = nullptr;
        if (nghttp2_session_callbacks_new(&cbs) != 0)
            throw std::bad_alloc{};
        nghttp2_session_callbacks_set_on_header_callback(cbs, &client_session::header_cb);
        nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, &client_session::data_cb);
        nghttp2_session_callbacks_set_on_stream_close_callback(cbs, &client_session::close_cb);
        nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, &client_session::frame_cb);
        const int rv = nghttp2_session_client_new(&session_, cbs, this);
        nghttp2_session_callbacks_del(cbs);
        if (rv != 0)
            throw std::bad_alloc{};
        const nghttp2_settings_entry iv[] = {
            {NGHTTP2_SETTINGS_ENABLE_PUSH, 0},
            {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, s.stream_window},
        };
        nghttp2_submit_settings(session_, NGHTTP2_FLAG_NONE, iv, std::size(iv));
        nghttp2_session_set_local_window_size(session_, NGHTTP2_FLAG_NONE, 0,
                                              static_cast<std::int32_t>(s.connection_window));
    }
    ~client_session() { nghttp2_session_del(session_); }
    client_session(const client_session&) = delete;
    client_session& operator=(const client_session&) = delete;

    /// Opens a stream with `headers` and sends `body` on it; with `end_stream` the
    /// request ends there, else more may follow (send_data()). `listener` hears the
    /// response until its on_close(). The stream's ID, or a negative nghttp2 error (no
    /// stream IDs left, or the server said GOAWAY: the connection takes no more).
    std::int32_t submit(std::span<const header> headers, std::string body, bool end_stream, stream_listener* listener)
    {
        std::vector<nghttp2_nv> nva;
        nva.reserve(headers.size());
        for (const auto& h : headers)
            nva.push_back(nghttp2_nv{reinterpret_cast<std::uint8_t*>(const_cast<char*>(h.name.data())),
                                     reinterpret_cast<std::uint8_t*>(const_cast<char*>(h.value.data())),
                                     h.name.size(), h.value.size(), NGHTTP2_NV_FLAG_NONE});
        auto out = std::make_unique<outgoing>();
        out->bytes = std::move(body);
        out->end = end_stream;
        nghttp2_data_provider provider{};
        provider.source.ptr = out.get();
        provider.read_callback = &client_session::read_cb;
        const auto id = nghttp2_submit_request(session_, nullptr, nva.data(), nva.size(), &provider, listener);
        if (id > 0)
            outgoing_[id] = std::move(out);
        return id;
    }

    /// More of an open stream's body; `end` ends the request. False when the stream
    /// is not open for sending.
    bool send_data(std::int32_t stream, std::string_view bytes, bool end)
    {
        auto it = outgoing_.find(stream);
        if (it == outgoing_.end() || it->second->end)
            return false;
        it->second->bytes.append(bytes);
        it->second->end = end;
        if (it->second->deferred) {
            it->second->deferred = false;
            nghttp2_session_resume_data(session_, stream);
        }
        return true;
    }

    /// Resets the stream (RST_STREAM, CANCEL): the caller stopped waiting for it. Its
    /// listener hears on_close() during a later output() or receive().
    void cancel(std::int32_t stream) { nghttp2_submit_rst_stream(session_, NGHTTP2_FLAG_NONE, stream, NGHTTP2_CANCEL); }

    /// Feeds bytes read from the connection. False when they break the protocol or
    /// end the connection (a GOAWAY with no stream left to finish): `why` then says
    /// so, with the peer's words when it sent any.
    bool receive(std::string_view bytes, std::string& why)
    {
        const auto n = nghttp2_session_mem_recv(session_, reinterpret_cast<const std::uint8_t*>(bytes.data()),
                                                bytes.size());
        if (n < 0) {
            why = std::string{"HTTP/2: "} + nghttp2_strerror(static_cast<int>(n));
            return false;
        }
        if (!nghttp2_session_want_read(session_) && !nghttp2_session_want_write(session_)) {
            why = goaway_.empty() ? "HTTP/2: the connection was ended" : goaway_;
            return false;
        }
        return true;
    }

    /// Appends every byte the session has to send to `out`. False on a fatal error.
    bool output(std::string& out)
    {
        for (;;) {
            const std::uint8_t* data = nullptr;
            const auto n = nghttp2_session_mem_send(session_, &data);
            if (n < 0)
                return false;
            if (n == 0)
                return true;
            out.append(reinterpret_cast<const char*>(data), static_cast<std::size_t>(n));
        }
    }

    /// Whether the connection takes new streams: no GOAWAY either way (after one, the
    /// streams it let finish still do).
    bool accepting() const noexcept
    {
        return goaway_.empty() && (nghttp2_session_want_read(session_) || nghttp2_session_want_write(session_));
    }

    /// Why the connection takes no new streams (the server's GOAWAY), or empty.
    const std::string& goaway() const noexcept { return goaway_; }

    /// Whether the server's SETTINGS have arrived (its connection preface).
    bool peer_settled() const noexcept { return peer_settings_; }

private:
    struct outgoing {
        std::string bytes;
        std::size_t offset = 0;
        bool end = true;
        bool deferred = false;
    };

    static client_session& self(void* user) { return *static_cast<client_session*>(user); }

    static stream_listener* listener_of(nghttp2_session* s, std::int32_t stream)
    {
        return static_cast<stream_listener*>(nghttp2_session_get_stream_user_data(s, stream));
    }

    static ssize_t read_cb(nghttp2_session*, std::int32_t, std::uint8_t* buf, std::size_t length,
                           std::uint32_t* flags, nghttp2_data_source* source, void*)
    {
        auto& out = *static_cast<outgoing*>(source->ptr);
        const auto n = std::min(length, out.bytes.size() - out.offset);
        std::memcpy(buf, out.bytes.data() + out.offset, n);
        out.offset += n;
        if (out.offset == out.bytes.size()) {
            out.bytes.clear();
            out.offset = 0;
            if (out.end) {
                *flags |= NGHTTP2_DATA_FLAG_EOF;
            } else if (n == 0) {
                out.deferred = true;
                return NGHTTP2_ERR_DEFERRED;
            }
        }
        return static_cast<ssize_t>(n);
    }

    static int header_cb(nghttp2_session* s, const nghttp2_frame* frame, const std::uint8_t* name,
                         std::size_t namelen, const std::uint8_t* value, std::size_t valuelen, std::uint8_t, void*)
    {
        if (frame->hd.type != NGHTTP2_HEADERS)
            return 0;
        if (auto* l = listener_of(s, frame->hd.stream_id))
            l->on_header({reinterpret_cast<const char*>(name), namelen},
                         {reinterpret_cast<const char*>(value), valuelen},
                         frame->headers.cat == NGHTTP2_HCAT_HEADERS);
        return 0;
    }

    static int data_cb(nghttp2_session* s, std::uint8_t, std::int32_t stream, const std::uint8_t* data,
                       std::size_t len, void*)
    {
        if (auto* l = listener_of(s, stream))
            l->on_data({reinterpret_cast<const char*>(data), len});
        return 0;
    }

    static int close_cb(nghttp2_session* s, std::int32_t stream, std::uint32_t error_code, void* user)
    {
        self(user).outgoing_.erase(stream);
        if (auto* l = listener_of(s, stream)) {
            nghttp2_session_set_stream_user_data(s, stream, nullptr);
            l->on_close(error_code);
        }
        return 0;
    }

    static int frame_cb(nghttp2_session*, const nghttp2_frame* frame, void* user)
    {
        auto& me = self(user);
        if (frame->hd.type == NGHTTP2_SETTINGS && (frame->hd.flags & NGHTTP2_FLAG_ACK) == 0)
            me.peer_settings_ = true;
        if (frame->hd.type == NGHTTP2_GOAWAY) {
            const auto& g = frame->goaway;
            me.goaway_ = "HTTP/2 GOAWAY from the server (error " + std::to_string(g.error_code) + ")";
            if (g.opaque_data_len > 0)
                me.goaway_ += ": " + std::string{reinterpret_cast<const char*>(g.opaque_data), g.opaque_data_len};
        }
        return 0;
    }

    nghttp2_session* session_ = nullptr;
    std::unordered_map<std::int32_t, std::unique_ptr<outgoing>> outgoing_;
    std::string goaway_;
    bool peer_settings_ = false;
};

/// The engine's codec for an HTTP/2 connection: every read is handed on whole, as a
/// push, to the session (which keeps the protocol's state across reads).
struct byte_codec {
    using message = std::string;
    transport::decoded<message> decode(std::string_view bytes) const
    {
        if (bytes.empty())
            return {};
        return {transport::decode_status::complete, bytes.size(), std::string{bytes}};
    }
    bool is_push(const message&) const noexcept { return true; }
};

} // namespace distlock::http2
