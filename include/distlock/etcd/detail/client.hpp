// distlock/etcd/detail/client.hpp: calls to etcd, over native gRPC (one HTTP/2
// connection per member, grpc/channel.hpp, every call and watch a stream on it) or
// over the JSON gateway (HTTP/1.1: one pipelined connection per member, and a
// connection of its own per watch); fail-over between members, and the auth token.
//
// Design note. Requests are built, and answers read, in one form for both: the JSON
// documents of proto3's mapping, as the gateway takes them (keys.hpp, replies.hpp).
// Over gRPC, messages.hpp's schema turns a request into its protobuf bytes and the
// answer back (protobuf/json_mapping.hpp); the answer's gRPC status means what the
// gateway's {"code": N} does.
//
// Design note. A call goes to the member in use. One that could not be sent there
// (refused connection, queued when it failed: errc::store_unavailable) is sent to the
// next member, each member once; one that was sent and not answered is the caller's
// (errc::outcome_unknown: it may have been applied), and the next call starts at the
// next member. With a user configured, the client authenticates before its first
// call and again when the server refuses the token (a refusal is decided before the
// request is applied, so the call is sent once more). State shared by calls (the
// member in use, the token) is behind a mutex: calls may start on any thread.
#pragma once

#include <distlock/clock.hpp>
#include <distlock/backend/deferred.hpp>
#include <distlock/backend/on_strand.hpp>
#include <distlock/backend/strand.hpp>
#include <distlock/backend/wakeup.hpp>
#include <distlock/diagnostics.hpp>
#include <distlock/error.hpp>
#include <distlock/etcd/config.hpp>
#include <distlock/etcd/detail/keys.hpp>
#include <distlock/etcd/detail/messages.hpp>
#include <distlock/etcd/detail/replies.hpp>
#include <distlock/etcd/error.hpp>
#include <distlock/grpc/channel.hpp>
#include <distlock/http/parser.hpp>
#include <distlock/result.hpp>
#include <distlock/transport/engine.hpp>

#include <asio/strand.hpp>

#include <algorithm>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace distlock::etcd::detail {

// A template only to be compiled where it is used (backend/store_shell.hpp says why).
template <class Unused = void>
class basic_client : public std::enable_shared_from_this<basic_client<Unused>> {
public:
    using unary_engine = transport::engine<http::codec>;
    using stream_engine = transport::engine<http::stream_codec>;
    using channel = grpc::basic_channel<transport::stream>;

    /// Throws std::system_error (errc::invalid_argument) when the TLS files cannot be loaded.
    basic_client(asio::any_io_executor ex, const config& cfg) : ex_{std::move(ex)}, cfg_{cfg}
    {
        if (cfg_.tls) {
            auto tls = transport::make_tls_context(cfg_.endpoint(0));
            if (!tls)
                throw std::system_error{tls.error(), "distlock::etcd::store: TLS settings"};
            tls_ = std::move(tls.value());
            // gRPC needs HTTP/2, which TLS servers choose by ALPN.
            if (cfg_.api == api::grpc)
                transport::offer_http2(*tls_);
        }
        for (std::size_t i = 0; i < cfg_.members.size(); ++i) {
            const auto peer = cfg_.endpoint(i).describe();
            if (cfg_.api == api::grpc)
                channels_.push_back(channel::make(
                    distlock::backend::make_strand(ex_),
                    channel::options{cfg_.request_timeout, peer,
                                     backend::authority(cfg_.members[i].host, cfg_.members[i].port), cfg_.tls},
                    connector(i)));
            else
                engines_.push_back(std::make_shared<unary_engine>(
                    distlock::backend::make_strand(ex_), http::codec{},
                    unary_engine::options{cfg_.request_timeout, peer, std::chrono::seconds{30}}, connector(i)));
        }
    }

    /// The RPC the gateway serves at /v3/<path> ("kv/range", "lease/grant", ...; over
    /// gRPC, one of messages.hpp's) with `body`: the answer's JSON (a streamed
    /// answer's first message), or the error its gRPC code says, with the server's
    /// words in `diag`. After close(), errc::store_unavailable without I/O (a call
    /// would connect again).
    static awaitable<result<json>> call(std::shared_ptr<basic_client> self, std::string path, json body,
                                        diagnostics* diag)
    {
        if (self->is_closed()) // (an error_code: a json converts from the enum too)
            co_return std::error_code{distlock::make_error_code(distlock::errc::store_unavailable)};
        bool token_renewed = false;
        std::size_t tried = 0;
        for (;;) {
            auto [member, token] = self->current();
            if (!self->cfg_.username.empty() && token.empty()) {
                auto got = co_await self->authenticate(member, diag);
                if (!got) {
                    if (got.error() == distlock::errc::store_unavailable && ++tried < self->members()) {
                        self->move_on(member);
                        continue;
                    }
                    co_return got.error();
                }
                token = std::move(got.value());
            }
            auto answer = co_await self->post(member, path, body, token, diag);
            if (!answer) {
                const auto ec = answer.error();
                if (ec == distlock::errc::store_unavailable || ec == distlock::errc::outcome_unknown ||
                    ec == distlock::errc::protocol_error)
                    self->move_on(member);
                if (ec == distlock::errc::store_unavailable && ++tried < self->members())
                    continue; // not sent: the next member
                if (ec == errc::unauthenticated && !self->cfg_.username.empty() && !token_renewed) {
                    token_renewed = true;
                    self->forget_token(token);
                    continue;
                }
                co_return ec;
            }
            co_return std::move(answer.value());
        }
    }

    /// How a wait for a key's deletion ended.
    struct watched {
        bool deleted = false; ///< false: `until` came, or the wait was cancelled
        bool marked = false;  ///< the key was seen carrying its holder's mark
    };

    /// Waits until `key` (the one created at `created`) is deleted or `until`, and notes
    /// whether it was marked as the holder's meanwhile. The watch starts at `revision`,
    /// or, when that is 0, from now: then, once the watch is in place, one read says
    /// whether the key went before it. (A watch from a past revision would not miss
    /// that either, but etcd serves such a watch from its history, catching up only
    /// every 100 ms, which a waiter would pay on every hand-off.) A stream that ends or
    /// breaks is opened again from the last revision it reported; a start revision that
    /// was compacted meanwhile is recovered by reading the key.
    static awaitable<watched> wait_deleted(std::shared_ptr<basic_client> self, std::string key,
                                           std::int64_t created, std::int64_t revision, time_point until)
    {
        auto from = key;
        watched_keys w{std::move(from), {}, {bound_key{std::move(key), created}}};
        return wait_any_deleted(std::move(self), std::move(w), revision, until);
    }

    /// Keys watched together: `keys`, all in the range [from, to), or the one key `from`
    /// when `to` is empty.
    struct watched_keys {
        std::string from;
        std::string to;
        std::vector<bound_key> keys;
    };

    /// wait_deleted() for several keys of one range, on one stream: until one of them
    /// (as created) is deleted, or `until`. A marked key is noted as there.
    static awaitable<watched> wait_any_deleted(std::shared_ptr<basic_client> self, watched_keys w,
                                               std::int64_t revision, time_point until)
    {
        watched out;
        for (;;) {
            if (clock::now() >= until || co_await distlock::backend::cancelled())
                co_return out;
            auto opened = co_await self->watch_once(w, revision, revision == 0, until);
            out.marked = out.marked || opened.marked;
            if (opened.deleted) {
                out.deleted = true;
                co_return out;
            }
            if (opened.compacted) {
                // The history is gone: whether the keys still exist says it all.
                auto look = co_await call(self, "kv/range", range_request(w.from, w.to), nullptr);
                if (look) {
                    const auto r = decode_range(look.value(), nullptr);
                    const auto at = decode_revision(look.value(), nullptr);
                    if (r && at) {
                        const auto found = still_there(r.value(), w);
                        out.marked = out.marked || found.marked;
                        if (found.deleted) {
                            out.deleted = true;
                            co_return out;
                        }
                        revision = at.value() + 1;
                        continue;
                    }
                }
            } else if (opened.progress > 0 && opened.confirmed) {
                revision = opened.progress + 1;
            }
            if (clock::now() >= until || co_await distlock::backend::cancelled())
                co_return out;
            // A member that is down, or a stream cut: look again shortly (bounded by `until`).
            timer pause{co_await asio::this_coro::executor, std::min(until, clock::now() + std::chrono::milliseconds{100})};
            (void)co_await pause.async_wait(distlock::backend::as_tuple_awaitable<Unused>());
        }
    }

    /// Closes every connection for good; calls in flight fail as the engine says.
    void close()
    {
        {
            std::lock_guard lock{mutex_};
            closed_ = true;
        }
        for (auto& e : engines_)
            e->close();
        for (auto& c : channels_)
            c->close();
        std::lock_guard lock{mutex_};
        for (auto& w : watches_)
            if (auto e = w.lock())
                e->close();
        watches_.clear();
    }

    const config& settings() const noexcept { return cfg_; }

    /// The member calls go to now (for tests and diagnostics).
    std::size_t member_in_use() const
    {
        std::lock_guard lock{mutex_};
        return current_;
    }

private:
    unary_engine::connector connector(std::size_t i) const
    {
        return [endpoint = cfg_.endpoint(i), ctx = tls_](transport::stream& s,
                                                         std::string& diagnostic) -> awaitable<std::error_code> {
            co_return co_await s.connect(endpoint, ctx.get(), diagnostic);
        };
    }

    bool is_closed() const
    {
        std::lock_guard lock{mutex_};
        return closed_;
    }

    std::pair<std::size_t, std::string> current() const
    {
        std::lock_guard lock{mutex_};
        return {current_, token_};
    }

    std::size_t members() const noexcept { return cfg_.members.size(); }

    void move_on(std::size_t from)
    {
        std::lock_guard lock{mutex_};
        if (current_ == from)
            current_ = (current_ + 1) % members();
    }

    void forget_token(const std::string& refused)
    {
        std::lock_guard lock{mutex_};
        if (token_ == refused)
            token_.clear();
    }

    std::string request_bytes(std::size_t member, const std::string& path, const std::string& body,
                              const std::string& token) const
    {
        std::vector<std::pair<std::string, std::string>> headers{
            {"Host", backend::authority(cfg_.members[member].host, cfg_.members[member].port)},
            {"Content-Type", "application/json"}};
        if (!token.empty())
            headers.emplace_back("Authorization", token);
        return http::encode_request("POST", "/v3/" + path, headers, body);
    }

    // One call to one member, its answer read.
    awaitable<result<json>> post(std::size_t member, const std::string& path, const json& body,
                                 const std::string& token, diagnostics* diag)
    {
        if (cfg_.api == api::grpc)
            co_return co_await unary(member, path, body, token, diag);
        auto engine = engines_[member];
        auto got = co_await engine->exec(request_bytes(member, path, body.dump(), token), 1, diag);
        if (!got)
            co_return got.error();
        auto& response = got.value().front();
        if (response.closes())
            engine->close();
        co_return read_answer(response, diag);
    }

    // The answer's JSON, or the error it says (replies.hpp).
    static result<json> read_answer(const http::response& response, diagnostics* diag)
    {
        return decode_answer(response.status, response.body, diag);
    }

    // etcd's auth token travels as gRPC metadata.
    static std::vector<grpc::metadata_entry> token_metadata(const std::string& token)
    {
        if (token.empty())
            return {};
        return {grpc::metadata_entry{"token", token}};
    }

    // One gRPC call to one member: the request encoded by the RPC's schema, the
    // answer's first message decoded by it, or the error its status says.
    awaitable<result<json>> unary(std::size_t member, const std::string& path, const json& body,
                                  const std::string& token, diagnostics* diag)
    {
        const auto* rpc = messages::rpc_at(path);
        std::string why;
        auto request =
            rpc ? protobuf::encode(*rpc->request, body, &why) : result<std::string>{distlock::errc::invalid_argument};
        if (!request) {
            if (diag)
                diag->set_client_message(rpc ? "etcd request " + path + ": " + why
                                             : "etcd over gRPC has no call " + path + " (messages.hpp)");
            co_return std::error_code{distlock::make_error_code(distlock::errc::invalid_argument)};
        }
        auto got = co_await channels_[member]->unary(std::string{rpc->grpc_path}, std::move(request.value()),
                                                     token_metadata(token), diag);
        if (!got)
            co_return got.error();
        auto& a = got.value();
        if (a.status != 0)
            co_return status_error(a.status, a.status_message, diag);
        if (a.messages.empty()) {
            if (diag)
                diag->set_client_message(cfg_.endpoint(member).describe() + " answered " + path + " without a message");
            co_return std::error_code{distlock::make_error_code(distlock::errc::protocol_error)};
        }
        auto doc = protobuf::decode(*rpc->response, a.messages.front(), &why);
        if (!doc && diag) {
            diag->set_client_message("etcd answer to " + path + ": " + why);
        }
        co_return doc;
    }

    awaitable<result<std::string>> authenticate(std::size_t member, diagnostics* diag)
    {
        const json credentials = {{"name", cfg_.username}, {"password", cfg_.password}};
        auto got = co_await post(member, "auth/authenticate", credentials, std::string{}, diag);
        if (!got) {
            if (got.error() == errc::invalid_argument || got.error() == errc::failed_precondition)
                co_return distlock::errc::auth_failed; // wrong user or password, or auth not enabled
            co_return got.error();
        }
        auto token = decode_auth_token(got.value(), diag);
        if (!token)
            co_return token.error();
        auto t = std::move(token.value());
        std::lock_guard lock{mutex_};
        token_ = t;
        co_return t;
    }

    // What a read of the watched range says: deleted when a watched key is missing or
    // was made again (another create revision); marked when one carries the mark.
    static watched still_there(const range_answer& r, const watched_keys& w)
    {
        watched out;
        for (const auto& k : w.keys) {
            const auto it = std::find_if(r.kvs.begin(), r.kvs.end(), [&](const kv& x) { return x.key == k.key; });
            if (it == r.kvs.end() || it->create_revision != k.entry)
                out.deleted = true;
            else
                out.marked = out.marked || carries_mark(*it);
        }
        return out;
    }

    static bool watched_key(const watched_keys& w, std::string_view key)
    {
        return std::any_of(w.keys.begin(), w.keys.end(), [&](const bound_key& k) { return k.key == key; });
    }

    struct watch_outcome {
        bool deleted = false;
        bool marked = false;
        bool confirmed = false; // the key was known to exist once the watch stood
        bool compacted = false;
        std::int64_t progress = 0; // the last revision the stream reported
    };

    // A watch stream's responses as they arrive, over either API.
    struct watch_feed {
        virtual ~watch_feed() = default;
        // Appends the responses that arrived since the last take (nullopt for one
        // that cannot be read, or an error: the stream is over); true once it ended.
        virtual bool take(std::vector<std::optional<watch_response>>& out) = 0;
        virtual awaitable<bool> wait(time_point until) = 0;
        virtual void close() = 0;
        // The stream ended because the server refused the auth token.
        bool token_refused = false;
    };

    // The gateway's: a streaming response on a connection of its own, line by line.
    struct gateway_feed final : watch_feed {
        gateway_feed(asio::any_io_executor ex, std::shared_ptr<stream_engine> s) : wake{std::move(ex)}, stream{std::move(s)}
        {}
        bool take(std::vector<std::optional<watch_response>>& out) override
        {
            std::deque<std::string> got;
            bool over = false;
            {
                std::lock_guard lock{mutex};
                got.swap(lines);
                over = ended;
            }
            for (const auto& line : got) {
                auto r = decode_watch_line(line, nullptr); // an error line, too, ends the stream
                out.push_back(r ? std::optional{std::move(r.value())} : std::nullopt);
            }
            return over;
        }
        awaitable<bool> wait(time_point until) override { return wake.wait(until); }
        void close() override { stream->close(); }

        std::mutex mutex;
        std::deque<std::string> lines;
        bool ended = false;
        distlock::backend::wakeup wake;
        std::shared_ptr<stream_engine> stream;
    };

    // gRPC's: a Watch stream on the member's channel.
    struct grpc_feed final : watch_feed {
        grpc_feed(std::shared_ptr<channel> c, std::shared_ptr<grpc::stream_inbox> in)
            : ch{std::move(c)}, inbox{std::move(in)}
        {}
        bool take(std::vector<std::optional<watch_response>>& out) override
        {
            auto b = inbox->take();
            for (const auto& m : b.messages) {
                auto doc = protobuf::decode(messages::watch_response, m);
                auto r = doc ? decode_watch(doc.value(), nullptr) : result<watch_response>{doc.error()};
                out.push_back(r ? std::optional{std::move(r.value())} : std::nullopt);
            }
            if (b.ended && b.end && b.end->status == static_cast<int>(errc::unauthenticated))
                this->token_refused = true;
            return b.ended;
        }
        awaitable<bool> wait(time_point until) override { return inbox->wait(until); }
        void close() override { ch->cancel(inbox); }

        std::shared_ptr<channel> ch;
        std::shared_ptr<grpc::stream_inbox> inbox;
    };

    // Opens a watch on `member` with `request` (a WatchRequest); null when it could
    // not be opened.
    awaitable<std::shared_ptr<watch_feed>> open_watch(std::size_t member, const std::string& token, const json& request)
    {
        if (cfg_.api == api::grpc) {
            auto bytes = protobuf::encode(messages::watch_request, request);
            if (!bytes)
                co_return nullptr;
            auto opened = co_await channels_[member]->open("/etcdserverpb.Watch/Watch", std::move(bytes.value()),
                                                           token_metadata(token));
            if (!opened) {
                move_on(member);
                co_return nullptr;
            }
            co_return std::make_shared<grpc_feed>(channels_[member], std::move(opened.value()));
        }
        auto stream = std::make_shared<stream_engine>(
            distlock::backend::make_strand(ex_), http::stream_codec{},
            stream_engine::options{cfg_.request_timeout, cfg_.endpoint(member).describe(), duration::zero()},
            connector(member));
        auto keep = std::make_shared<gateway_feed>(co_await asio::this_coro::executor, stream);
        // Weak: the feed holds the stream, whose handlers these are.
        stream->on_push([weak = std::weak_ptr<gateway_feed>{keep}](http::stream_message m) {
            auto feed = weak.lock();
            if (!feed)
                return;
            std::lock_guard lock{feed->mutex};
            if (m.what == http::stream_message::kind::line)
                feed->lines.push_back(std::move(m.line));
            else
                feed->ended = true;
            feed->wake.signal();
        });
        stream->on_down([weak = std::weak_ptr<gateway_feed>{keep}] {
            auto feed = weak.lock();
            if (!feed)
                return;
            std::lock_guard lock{feed->mutex};
            feed->ended = true;
            feed->wake.signal();
        });
        {
            std::lock_guard lock{mutex_};
            std::erase_if(watches_, [](const auto& w) { return w.expired(); });
            watches_.push_back(stream);
        }
        auto head = co_await stream->exec(request_bytes(member, "watch", request.dump(), token), 1, nullptr);
        if (!head || head.value().front().head.status != 200 || head.value().front().last) {
            if (!head)
                move_on(member);
            else if (head.value().front().head.status == 401)
                forget_token(token);
            stream->close();
            co_return nullptr;
        }
        co_return keep;
    }

    // One watch stream, until the deletion of a watched key, `until`, or the stream's
    // end. With `confirm`, the keys are read once the watch is created: one gone, or
    // made again, counts as deleted.
    awaitable<watch_outcome> watch_once(const watched_keys& w, std::int64_t revision, bool confirm, time_point until)
    {
        watch_outcome out;
        auto [member, token] = current();
        // Puts are wanted too: the holder's mark is one.
        json create = {{"key", distlock::util::base64(w.from)}};
        if (!w.to.empty())
            create["range_end"] = distlock::util::base64(w.to);
        if (revision != 0)
            create["start_revision"] = std::to_string(revision);
        const json request = {{"create_request", std::move(create)}};
        out.confirmed = !confirm;
        auto feed = co_await open_watch(member, token, request);
        if (!feed)
            co_return out;
        bool look = false;
        std::vector<std::optional<watch_response>> responses;
        for (;;) {
            responses.clear();
            bool ended = feed->take(responses);
            for (const auto& response : responses) {
                if (!response) {
                    ended = true; // an error, or a response this client cannot read: the stream is over
                    break;
                }
                const auto& r = *response;
                if (r.revision > 0)
                    out.progress = std::max(out.progress, r.revision);
                if (r.canceled) {
                    out.compacted = r.compact_revision > 0;
                    ended = true;
                    break;
                }
                if (r.created && !out.confirmed)
                    look = true;
                for (const auto& e : r.events) {
                    // A deletion that does not say of which key may be of a watched one.
                    if (e.deleted && (e.gone.empty() || watched_key(w, e.gone)))
                        out.deleted = true;
                    else if (e.put && carries_mark(*e.put) && watched_key(w, e.put->key))
                        out.marked = true;
                }
                if (out.deleted)
                    break;
            }
            if (feed->token_refused)
                forget_token(token);
            if (look && !out.deleted && !ended) {
                // The watch stands: whatever happens to the keys from now on reaches it.
                // One read says whether one went before.
                look = false;
                auto got = co_await call(this->shared_from_this(), "kv/range", range_request(w.from, w.to), nullptr);
                const auto r = got ? decode_range(got.value(), nullptr) : result<range_answer>{got.error()};
                if (!r) {
                    ended = true; // opened again from now, and looked at again
                } else {
                    const auto found = still_there(r.value(), w);
                    out.deleted = found.deleted;
                    out.confirmed = !found.deleted;
                    out.marked = out.marked || found.marked;
                }
            }
            if (out.deleted || ended || clock::now() >= until || co_await distlock::backend::cancelled())
                break;
            (void)co_await feed->wait(until);
        }
        feed->close();
        co_return out;
    }

    asio::any_io_executor ex_;
    config cfg_;
    std::shared_ptr<asio::ssl::context> tls_;
    std::vector<std::shared_ptr<unary_engine>> engines_; // the gateway's, one per member
    std::vector<std::shared_ptr<channel>> channels_;     // gRPC's, one per member
    mutable std::mutex mutex_;
    std::size_t current_ = 0;
    bool closed_ = false;
    std::string token_;
    std::vector<std::weak_ptr<stream_engine>> watches_;
};

/// See basic_client.
using client = basic_client<>;

} // namespace distlock::etcd::detail
