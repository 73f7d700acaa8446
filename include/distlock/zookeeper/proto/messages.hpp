// distlock/zookeeper/proto/messages.hpp: the part of ZooKeeper's client protocol a
// lock needs, as frames to send and answers to read. Bytes only, no I/O.
//
// A frame is a big-endian int32 length and that many bytes. The session starts with a
// connect request and its response (no headers); after that every request starts
// with {int xid, int op} and every answer with {int xid, long zxid, int err}. The
// server answers a session's requests in the order it received them; notifications
// (xid -1) come in between.
#pragma once

#include <distlock/zookeeper/proto/jute.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace distlock::zookeeper::proto {

/// Operation codes.
enum class op : std::int32_t {
    create = 1,
    remove = 2, ///< "delete"
    exists = 3,
    get_data = 4,
    set_data = 5,
    get_children = 8,
    ping = 11,
    get_children2 = 12,
    check = 13,
    multi = 14,
    create2 = 15,
    create_container = 19,
    auth = 100,
    set_watches = 101,
    close_session = -11,
};

/// The xids the protocol reserves.
namespace xid {
inline constexpr std::int32_t notification = -1;
inline constexpr std::int32_t ping = -2;
inline constexpr std::int32_t auth = -4;
inline constexpr std::int32_t set_watches = -8;
} // namespace xid

/// Create flags.
namespace create_flags {
inline constexpr std::int32_t persistent = 0;
inline constexpr std::int32_t ephemeral = 1;
inline constexpr std::int32_t sequential = 2;
inline constexpr std::int32_t container = 4; ///< with op::create_container: deleted by the server once emptied
} // namespace create_flags

/// The ACL a created node gets.
enum class acl {
    open,    ///< world:anyone, every permission
    creator, ///< auth:"" (the identities the creating session authenticated as), every permission
};

/// Watch event types and session states, as notifications carry them.
namespace event {
inline constexpr std::int32_t none = -1;
inline constexpr std::int32_t created = 1;
inline constexpr std::int32_t deleted = 2;
inline constexpr std::int32_t data_changed = 3;
inline constexpr std::int32_t children_changed = 4;
} // namespace event
namespace state {
inline constexpr std::int32_t disconnected = 0;
inline constexpr std::int32_t connected = 3;
inline constexpr std::int32_t expired = -112;
inline constexpr std::int32_t auth_failed = 4;
} // namespace state

/// A node's metadata.
struct stat {
    std::int64_t czxid = 0; ///< the zxid of the create: the lock's fence
    std::int64_t mzxid = 0;
    std::int64_t ctime = 0;
    std::int64_t mtime = 0;
    std::int32_t version = 0;
    std::int32_t cversion = 0;
    std::int32_t aversion = 0;
    std::int64_t ephemeral_owner = 0; ///< the session that owns an ephemeral node
    std::int32_t data_length = 0;
    std::int32_t num_children = 0;
    std::int64_t pzxid = 0;
};

inline stat read_stat(reader& r)
{
    stat s;
    s.czxid = r.i64();
    s.mzxid = r.i64();
    s.ctime = r.i64();
    s.mtime = r.i64();
    s.version = r.i32();
    s.cversion = r.i32();
    s.aversion = r.i32();
    s.ephemeral_owner = r.i64();
    s.data_length = r.i32();
    s.num_children = r.i32();
    s.pzxid = r.i64();
    return s;
}

/// The bytes of one frame holding `payload`.
inline std::string frame(std::string_view payload)
{
    writer w{4 + payload.size()};
    w.i32(static_cast<std::int32_t>(payload.size()));
    std::string out = w.take();
    out.append(payload);
    return out;
}

// -- Session ---------------------------------------------------------------------------

struct connect_request {
    std::int64_t last_zxid_seen = 0;
    std::int32_t timeout_ms = 10000;
    std::int64_t session_id = 0;  ///< 0: a new session; else the one to resume
    std::string password = std::string(16, '\0'); ///< the session's password (16 bytes) when resuming
    bool read_only = false;
};

inline std::string encode(const connect_request& c)
{
    writer w;
    w.i32(0).i64(c.last_zxid_seen).i32(c.timeout_ms).i64(c.session_id).bytes(c.password).boolean(c.read_only);
    return frame(w.data());
}

struct connect_response {
    std::int32_t timeout_ms = 0; ///< negotiated; 0: the session to resume has expired
    std::int64_t session_id = 0;
    std::string password;
    bool read_only = false;
};

/// A connect response's payload (the frame's bytes after its length).
inline std::optional<connect_response> parse_connect_response(std::string_view payload)
{
    reader r{payload};
    connect_response c;
    (void)r.i32(); // protocol version
    c.timeout_ms = r.i32();
    c.session_id = r.i64();
    c.password = r.bytes().value_or(std::string{});
    if (r.left() == 1) // servers since 3.4 add the read-only flag
        c.read_only = r.boolean();
    if (!r.ok() || !r.at_end() || c.timeout_ms < 0)
        return std::nullopt;
    return c;
}

// -- Requests ----------------------------------------------------------------------------

// A request's frame up to its header, with room for `body` bytes more; the frame's
// length is set by writer::take_frame().
inline writer header(std::int32_t x, op o, std::size_t body = 0)
{
    writer w{12 + body};
    w.i32(0).i32(x).i32(static_cast<std::int32_t>(o));
    return w;
}

/// create2 (or create_container): the path may carry a sequence suffix added by the
/// server (flags & sequential); the answer is the path created and its Stat.
inline std::string encode_create2(std::int32_t x, std::string_view path, std::string_view data, std::int32_t flags,
                                  acl a = acl::open, op o = op::create2)
{
    const std::string_view scheme = a == acl::open ? "world" : "auth";
    const std::string_view id = a == acl::open ? "anyone" : "";
    auto w = header(x, o, 4 + path.size() + 4 + data.size() + 8 + 4 + scheme.size() + 4 + id.size() + 4);
    w.bytes(path).bytes(data);
    w.i32(1).i32(31); // one ACL entry, permissions ALL
    w.bytes(scheme).bytes(id);
    w.i32(flags);
    return w.take_frame();
}

inline std::string encode_delete(std::int32_t x, std::string_view path, std::int32_t version = -1)
{
    auto w = header(x, op::remove, 4 + path.size() + 4);
    w.bytes(path).i32(version);
    return w.take_frame();
}

/// setData: `data` replaces the node's; the answer is its Stat. Version -1: any.
inline std::string encode_set_data(std::int32_t x, std::string_view path, std::string_view data,
                                   std::int32_t version = -1)
{
    auto w = header(x, op::set_data, 4 + path.size() + 4 + data.size() + 4);
    w.bytes(path).bytes(data).i32(version);
    return w.take_frame();
}

inline std::string encode_exists(std::int32_t x, std::string_view path, bool watch)
{
    auto w = header(x, op::exists, 4 + path.size() + 1);
    w.bytes(path).boolean(watch);
    return w.take_frame();
}

inline std::string encode_get_data(std::int32_t x, std::string_view path, bool watch)
{
    auto w = header(x, op::get_data, 4 + path.size() + 1);
    w.bytes(path).boolean(watch);
    return w.take_frame();
}

inline std::string encode_get_children2(std::int32_t x, std::string_view path, bool watch)
{
    auto w = header(x, op::get_children2, 4 + path.size() + 1);
    w.bytes(path).boolean(watch);
    return w.take_frame();
}

/// One operation of a multi (a transaction: all of them or none). `version` -1: any;
/// `data`, `flags` and `a` are a create's, `data` a setData's too.
struct multi_op {
    op type = op::check;
    std::string path;
    std::int32_t version = -1;
    std::string data{};
    std::int32_t flags = create_flags::persistent;
    acl a = acl::open;
};

/// multi: the operations, each after its header {type, done=false, err=-1}, then the
/// closing header {-1, true, -1}. Only create, delete, setData and check are written.
inline std::string encode_multi(std::int32_t x, const std::vector<multi_op>& ops)
{
    auto w = header(x, op::multi);
    for (const auto& o : ops) {
        w.i32(static_cast<std::int32_t>(o.type)).boolean(false).i32(-1);
        switch (o.type) {
        case op::create: {
            const std::string_view scheme = o.a == acl::open ? "world" : "auth";
            const std::string_view id = o.a == acl::open ? "anyone" : "";
            w.bytes(o.path).bytes(o.data).i32(1).i32(31).bytes(scheme).bytes(id).i32(o.flags);
            break;
        }
        case op::set_data:
            w.bytes(o.path).bytes(o.data).i32(o.version);
            break;
        default: // delete, check
            w.bytes(o.path).i32(o.version);
            break;
        }
    }
    w.i32(-1).boolean(true).i32(-1);
    return w.take_frame();
}

inline std::string encode_ping() { return header(xid::ping, op::ping).take_frame(); }

inline std::string encode_close(std::int32_t x) { return header(x, op::close_session).take_frame(); }

/// Digest auth: `credentials` is "user:password".
inline std::string encode_auth(std::string_view scheme, std::string_view credentials)
{
    auto w = header(xid::auth, op::auth, 4 + 4 + scheme.size() + 4 + credentials.size());
    w.i32(0).bytes(scheme).bytes(credentials);
    return w.take_frame();
}

/// After a reconnect: the watches to set again, relative to the last zxid seen.
inline std::string encode_set_watches(std::int64_t relative_zxid, const std::vector<std::string>& data,
                                      const std::vector<std::string>& exist, const std::vector<std::string>& child)
{
    auto w = header(xid::set_watches, op::set_watches);
    w.i64(relative_zxid).strings(data).strings(exist).strings(child);
    return w.take_frame();
}

// -- Answers -----------------------------------------------------------------------------

/// One answer or notification: its header and the rest of its bytes.
struct reply {
    std::int32_t xid = 0;
    std::int64_t zxid = 0;
    std::int32_t err = 0; ///< 0, or a ZooKeeper error code (-101 no node, ...)
    std::string body;
};

inline std::optional<reply> parse_reply(std::string_view payload)
{
    reader r{payload};
    reply out;
    out.xid = r.i32();
    out.zxid = r.i64();
    out.err = r.i32();
    if (!r.ok())
        return std::nullopt;
    out.body = std::string{payload.substr(16)};
    return out;
}

struct created {
    std::string path; ///< with the sequence suffix the server added
    proto::stat stat;
};

inline std::optional<created> parse_create2(std::string_view body)
{
    reader r{body};
    created c;
    c.path = r.text();
    c.stat = read_stat(r);
    if (!r.ok() || !r.at_end() || c.path.empty())
        return std::nullopt;
    return c;
}

inline std::optional<proto::stat> parse_stat(std::string_view body)
{
    reader r{body};
    auto s = read_stat(r);
    if (!r.ok() || !r.at_end())
        return std::nullopt;
    return s;
}

struct node_data {
    std::string data; ///< empty for a node without data (null on the wire)
    proto::stat stat;
};

inline std::optional<node_data> parse_get_data(std::string_view body)
{
    reader r{body};
    node_data d;
    d.data = r.bytes().value_or(std::string{});
    d.stat = read_stat(r);
    if (!r.ok() || !r.at_end())
        return std::nullopt;
    return d;
}

struct children {
    std::vector<std::string> names; ///< unsorted, as the server keeps them
    proto::stat stat;
};

inline std::optional<children> parse_get_children2(std::string_view body)
{
    reader r{body};
    children c;
    c.names = r.strings();
    c.stat = read_stat(r);
    if (!r.ok() || !r.at_end())
        return std::nullopt;
    return c;
}

/// One operation's outcome in a multi's answer: err 0, or the failing operation's
/// code (the ones the server rolled back answer 0 before it and runtime inconsistency
/// after it); a setData's Stat.
struct multi_result {
    std::int32_t type = 0;
    std::int32_t err = 0;
    std::optional<proto::stat> stat{};
};

/// A multi's answer body: one result per operation, until the closing header. Types
/// it does not know make the whole answer unreadable (nullopt).
inline std::optional<std::vector<multi_result>> parse_multi(std::string_view body)
{
    reader r{body};
    std::vector<multi_result> out;
    for (;;) {
        multi_result m;
        m.type = r.i32();
        const bool done = r.boolean();
        const auto err = r.i32();
        if (!r.ok() || out.size() > 64)
            return std::nullopt;
        if (done)
            break;
        switch (m.type) {
        case -1: // an error result
            m.err = r.i32();
            break;
        case static_cast<std::int32_t>(op::create):
            (void)r.text();
            break;
        case static_cast<std::int32_t>(op::create2):
            (void)r.text();
            m.stat = read_stat(r);
            break;
        case static_cast<std::int32_t>(op::set_data):
            m.stat = read_stat(r);
            break;
        case static_cast<std::int32_t>(op::remove):
        case static_cast<std::int32_t>(op::check):
            m.err = err == -1 ? 0 : err;
            break;
        default:
            return std::nullopt;
        }
        if (!r.ok())
            return std::nullopt;
        out.push_back(m);
    }
    if (!r.ok() || !r.at_end())
        return std::nullopt;
    return out;
}

struct watch_event {
    std::int32_t type = event::none;
    std::int32_t state = state::connected;
    std::string path;
};

inline std::optional<watch_event> parse_event(std::string_view body)
{
    reader r{body};
    watch_event e;
    e.type = r.i32();
    e.state = r.i32();
    e.path = r.bytes().value_or(std::string{});
    if (!r.ok() || !r.at_end())
        return std::nullopt;
    return e;
}

} // namespace distlock::zookeeper::proto
