// distlock/etcd/detail/client.hpp: etcd's JSON gateway over HTTP/1.1: unary calls on
// one pipelined connection per member (the transport engine), fail-over between
// members, the auth token, and watches (a streaming response on a connection of its
// own).
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
#include <distlock/etcd/detail/replies.hpp>
#include <distlock/etcd/error.hpp>
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

    /// Throws std::system_error (errc::invalid_argument) when the TLS files cannot be loaded.
    basic_client(asio::any_io_executor ex, const config& cfg) : ex_{std::move(ex)}, cfg_{cfg}
    {
        if (cfg_.tls) {
            auto tls = transport::make_tls_context(cfg_.endpoint(0));
            if (!tls)
                throw std::system_error{tls.error(), "distlock::etcd::store: TLS settings"};
            tls_ = std::move(tls.value());
        }
        for (std::size_t i = 0; i < cfg_.members.size(); ++i)
            engines_.push_back(std::make_shared<unary_engine>(
                distlock::backend::make_strand(ex_), http::codec{},
                unary_engine::options{cfg_.request_timeout, cfg_.endpoint(i).describe(), std::chrono::seconds{30}},
                connector(i)));
    }

    /// POST /v3/<path> with `body`: the answer's JSON (a streamed answer's first
    /// "result"), or the error its gRPC code says, with the server's words in `diag`.
    /// After close(), errc::store_unavailable without I/O (a call would connect again).
    static awaitable<result<json>> call(std::shared_ptr<basic_client> self, std::string path, std::string body,
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
                    if (got.error() == distlock::errc::store_unavailable && ++tried < self->engines_.size()) {
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
                if (ec == distlock::errc::store_unavailable && ++tried < self->engines_.size())
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
                auto look = co_await call(self, "kv/range", range_request(w.from, w.to).dump(), nullptr);
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

    void move_on(std::size_t from)
    {
        std::lock_guard lock{mutex_};
        if (current_ == from)
            current_ = (current_ + 1) % engines_.size();
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

    // One POST to one member, its answer read.
    awaitable<result<json>> post(std::size_t member, const std::string& path, const std::string& body,
                                 const std::string& token, diagnostics* diag)
    {
        auto engine = engines_[member];
        auto got = co_await engine->exec(request_bytes(member, path, body, token), 1, diag);
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

    awaitable<result<std::string>> authenticate(std::size_t member, diagnostics* diag)
    {
        const json credentials = {{"name", cfg_.username}, {"password", cfg_.password}};
        auto got = co_await post(member, "auth/authenticate", credentials.dump(), std::string{}, diag);
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

    // One watch stream on a connection of its own, until the deletion of a watched
    // key, `until`, or the stream's end. With `confirm`, the keys are read once the
    // watch is created: one gone, or made again, counts as deleted.
    awaitable<watch_outcome> watch_once(const watched_keys& w, std::int64_t revision, bool confirm, time_point until)
    {
        struct inbox {
            explicit inbox(asio::any_io_executor ex) : wake{std::move(ex)} {}
            std::mutex mutex;
            std::deque<std::string> lines;
            bool ended = false;
            distlock::backend::wakeup wake;
        };
        watch_outcome out;
        auto [member, token] = current();
        auto box = std::make_shared<inbox>(co_await asio::this_coro::executor);
        auto stream = std::make_shared<stream_engine>(
            distlock::backend::make_strand(ex_), http::stream_codec{},
            stream_engine::options{cfg_.request_timeout, cfg_.endpoint(member).describe(), duration::zero()},
            connector(member));
        stream->on_push([box](http::stream_message m) {
            std::lock_guard lock{box->mutex};
            if (m.what == http::stream_message::kind::line)
                box->lines.push_back(std::move(m.line));
            else
                box->ended = true;
            box->wake.signal();
        });
        stream->on_down([box] {
            std::lock_guard lock{box->mutex};
            box->ended = true;
            box->wake.signal();
        });
        {
            std::lock_guard lock{mutex_};
            std::erase_if(watches_, [](const auto& w) { return w.expired(); });
            watches_.push_back(stream);
        }
        // Puts are wanted too: the holder's mark is one.
        json create = {{"key", distlock::util::base64(w.from)}};
        if (!w.to.empty())
            create["range_end"] = distlock::util::base64(w.to);
        if (revision != 0)
            create["start_revision"] = std::to_string(revision);
        json request = {{"create_request", std::move(create)}};
        out.confirmed = !confirm;
        auto head = co_await stream->exec(request_bytes(member, "watch", request.dump(), token), 1, nullptr);
        if (!head || head.value().front().head.status != 200 || head.value().front().last) {
            if (!head)
                move_on(member);
            else if (head.value().front().head.status == 401)
                forget_token(token);
            stream->close();
            co_return out;
        }
        bool look = false;
        for (;;) {
            std::deque<std::string> lines;
            bool ended = false;
            {
                std::lock_guard lock{box->mutex};
                lines.swap(box->lines);
                ended = box->ended;
            }
            for (const auto& line : lines) {
                const auto response = decode_watch_line(line, nullptr);
                if (!response) {
                    ended = true; // an error line, or one this client cannot read: the stream is over
                    break;
                }
                const auto& r = response.value();
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
            if (look && !out.deleted && !ended) {
                // The watch stands: whatever happens to the keys from now on reaches it.
                // One read says whether one went before.
                look = false;
                auto got = co_await call(this->shared_from_this(), "kv/range", range_request(w.from, w.to).dump(),
                                         nullptr);
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
            (void)co_await box->wake.wait(until);
        }
        stream->close();
        co_return out;
    }

    asio::any_io_executor ex_;
    config cfg_;
    std::shared_ptr<asio::ssl::context> tls_;
    std::vector<std::shared_ptr<unary_engine>> engines_;
    mutable std::mutex mutex_;
    std::size_t current_ = 0;
    bool closed_ = false;
    std::string token_;
    std::vector<std::weak_ptr<stream_engine>> watches_;
};

/// See basic_client.
using client = basic_client<>;

} // namespace distlock::etcd::detail
