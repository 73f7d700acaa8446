// Connection security and transports: AUTH with ACL users, wrong passwords, TLS with a
// self-signed certificate made here, Unix sockets, and a server that replies garbage.
#include "redis_support.hpp"

#include <asio/ip/tcp.hpp>
#include <asio/write.hpp>

#include <cstdlib>
#include <fstream>
#include <random>

using namespace test;
using one_shot = dl::basic_distributed_mutex<dl::redis::store, dl::retry::none>;

namespace {
// Takes and releases one lock; returns the error of the first step that failed.
// Locks and unlocks once; a failure's words go to `diag` when given.
std::error_code lock_once(asio::io_context& io, dl::redis::store& store, dl::diagnostics* diag = nullptr)
{
    std::error_code out;
    dl::diagnostics unused;
    run(io, [&]() -> asio::awaitable<void> {
        one_shot m{store, "secured"};
        auto l = co_await m.lock(diag ? *diag : unused);
        if (!l) {
            out = l.error();
            co_return;
        }
        auto r = co_await l->unlock();
        if (!r)
            out = r.error();
    });
    return out;
}
} // namespace

TEST_CASE("redis: AUTH with an ACL user; a wrong password is a clear error", "[redis][auth]")
{
    redis_server server{{"--user", "default", "off", "--user", "locker", "on", ">s3cret", "~*", "&*", "+@all"}};
    asio::io_context io;
    auto good = server.config();
    good.username = "locker";
    good.password = "s3cret";
    dl::redis::store ok{io, good};
    CHECK_FALSE(lock_once(io, ok));

    auto bad = good;
    bad.password = "wrong";
    dl::redis::store refused{io, bad};
    dl::diagnostics diag;
    CHECK(lock_once(io, refused, &diag) == dl::errc::auth_failed);
    // The handshake's AUTH was refused: the server's words, reported by the client.
    CHECK(diag.to_string().find("WRONGPASS") != std::string::npos);

    dl::redis::store anonymous{io, server.config()};
    CHECK(lock_once(io, anonymous) == dl::errc::auth_failed);
}

TEST_CASE("redis: requirepass with a password only, and SELECT of a database", "[redis][auth]")
{
    redis_server server{{"--requirepass", "pw"}};
    asio::io_context io;
    auto cfg = dl::redis::config::from_url("redis://:pw@127.0.0.1:" + std::to_string(server.port()) + "/3");
    REQUIRE(cfg);
    CHECK(cfg->database == 3);
    dl::redis::store store{io, *cfg};
    CHECK_FALSE(lock_once(io, store));
    run(io, [&]() -> asio::awaitable<void> {
        one_shot m{store, "in-db-3"};
        auto l = co_await m.lock();
        REQUIRE(l);
    });
    // The lock went to database 3, not 0.
    asio::io_context probe_io;
    auto db0 = server.config();
    db0.password = "pw";
    dl::redis::store probe{probe_io, db0};
    CHECK_FALSE(peek(probe_io, db0, probe.lock_key("in-db-3")));
}

TEST_CASE("redis: TLS with a self-signed certificate made for the test", "[redis][tls]")
{
    temp_dir certs;
    const auto key = (certs.path() / "key.pem").string(), cert = (certs.path() / "cert.pem").string();
    const auto make = "openssl req -x509 -newkey rsa:2048 -nodes -keyout " + key + " -out " + cert +
                      " -days 1 -subj /CN=localhost -addext subjectAltName=DNS:localhost,IP:127.0.0.1 2>/dev/null";
    REQUIRE(std::system(make.c_str()) == 0);
    redis_server server{{"--tls-cert-file", cert, "--tls-key-file", key, "--tls-ca-cert-file", cert,
                         "--tls-auth-clients", "no"},
                        true};
    asio::io_context io;
    auto cfg = server.config();
    cfg.tls = true;
    cfg.tls_ca_file = cert;
    cfg.tls_server_name = "localhost";
    dl::redis::store secure{io, cfg};
    CHECK_FALSE(lock_once(io, secure));

    // A client that does not trust the certificate is refused.
    auto untrusting = cfg;
    untrusting.tls_ca_file = cert + ".missing";
    CHECK_THROWS_AS((dl::redis::store{io, untrusting}), std::system_error);
    auto wrong_ca = cfg;
    wrong_ca.tls_ca_file.clear(); // system CAs: do not include our self-signed one
    dl::redis::store distrusting{io, wrong_ca};
    CHECK(lock_once(io, distrusting) == dl::errc::auth_failed);

    // Plain text to a TLS port fails cleanly, without hanging.
    auto plain = server.config();
    plain.request_timeout = 500ms;
    dl::redis::store cleartext{io, plain};
    const auto ec = lock_once(io, cleartext);
    CHECK(ec);
}

TEST_CASE("redis: over a Unix socket", "[redis][unix]")
{
    temp_dir dir;
    const auto path = (dir.path() / "redis.sock").string();
    redis_server server{{"--unixsocket", path, "--unixsocketperm", "700"}};
    asio::io_context io;
    auto cfg = dl::redis::config::from_url("unix://" + path);
    REQUIRE(cfg);
    dl::redis::store store{io, *cfg};
    CHECK_FALSE(lock_once(io, store));
}

TEST_CASE("redis: a server that replies garbage gives protocol_error, never a hang", "[redis][input]")
{
    for (std::string garbage : {std::string{"hello world\r\n"}, std::string{"*2\r\n:1\r\n$-7\r\n"},
                                      std::string{"+OK\r\n"}, std::string(70000, '*'),
                                      std::string{"$999999999999\r\n"}}) {
        // The fake server runs on the test's io_context: it answers whatever arrives on
        // each connection with the garbage.
        asio::io_context io;
        asio::ip::tcp::acceptor acceptor{io, {asio::ip::make_address("127.0.0.1"), 0}};
        dl::redis::config cfg;
        cfg.port = acceptor.local_endpoint().port();
        cfg.request_timeout = 1s;
        asio::co_spawn(io, [&acceptor, garbage]() -> asio::awaitable<void> {
            for (;;) {
                auto [ec, socket] = co_await acceptor.async_accept(asio::experimental::as_tuple(asio::use_awaitable));
                if (ec)
                    co_return;
                asio::co_spawn(acceptor.get_executor(), [](asio::ip::tcp::socket s, std::string reply) -> asio::awaitable<void> {
                    char buf[4096];
                    for (;;) {
                        auto [rec, n] = co_await s.async_read_some(asio::buffer(buf), asio::experimental::as_tuple(asio::use_awaitable));
                        if (rec)
                            co_return;
                        auto [wec, m] = co_await asio::async_write(s, asio::buffer(reply), asio::experimental::as_tuple(asio::use_awaitable));
                        if (wec)
                            co_return;
                    }
                }(std::move(socket), garbage), asio::detached);
            }
        }, asio::detached);
        dl::redis::store store{io, cfg};
        const auto ec = lock_once(io, store);
        // Garbage in answer to the handshake (AUTH/SELECT/INFO, before the lock request
        // is sent) is store_unavailable: nothing was applied. In answer to the request,
        // protocol_error or outcome_unknown: it may have been.
        CHECK((ec == dl::errc::protocol_error || ec == dl::errc::outcome_unknown || ec == dl::errc::store_unavailable));
        CHECK(ec != dl::errc::timeout);
        acceptor.close();
    }
}

TEST_CASE("redis: URLs parse, bad ones are invalid_argument", "[redis][input]")
{
    auto a = dl::redis::config::from_url("redis://user:pw@localhost:7000/2");
    REQUIRE(a);
    CHECK(a->username == "user");
    CHECK(a->password == "pw");
    CHECK(a->host == "localhost");
    CHECK(a->port == 7000);
    CHECK(a->database == 2);
    auto b = dl::redis::config::from_url("rediss://[::1]:6380");
    REQUIRE(b);
    CHECK(b->tls);
    CHECK(b->host == "::1");
    CHECK(b->port == 6380);
    for (auto bad : {"http://x", "redis://", "redis://h:notaport", "redis://h:99999", "redis://h/x", "unix://"}) {
        auto r = dl::redis::config::from_url(bad);
        REQUIRE_FALSE(r);
        CHECK(r.error() == dl::errc::invalid_argument);
    }
}

TEST_CASE("redis: an error reply is store_unavailable with the server's words beside it", "[redis][fault]")
{
    // Out of memory: every write is refused with -OOM.
    redis_server server{{"--maxmemory", "1", "--maxmemory-policy", "noeviction"}};
    asio::io_context io;
    dl::redis::store store{io, server.config()};
    dl::diagnostics diag;
    CHECK(lock_once(io, store, &diag) == dl::errc::store_unavailable);
    CHECK(diag.server_message().find("OOM") != std::string::npos);
    CHECK(diag.client_message().empty());
}

namespace {
struct self_signed {
    temp_dir dir;
    std::string key = (dir.path() / "key.pem").string(), cert = (dir.path() / "cert.pem").string();
    bool make() const
    {
        const auto cmd = "openssl req -x509 -newkey rsa:2048 -nodes -keyout " + key + " -out " + cert +
                         " -days 1 -subj /CN=localhost -addext subjectAltName=DNS:localhost,IP:127.0.0.1 2>/dev/null";
        return std::system(cmd.c_str()) == 0;
    }
};

// One GET of `key` on `store`, its outcome into `out`. Static and by value: it may
// outlive the loop iteration that started it.
asio::awaitable<void> get_into(dl::redis::store& store, std::string key,
                               std::shared_ptr<std::optional<dl::result<dl::redis::resp::value>>> out)
{
    auto command = dl::redis::resp::command({"GET", key});
    *out = co_await store.execute_command(std::move(command));
}

asio::awaitable<void> watch_once(dl::redis::store& store, std::shared_ptr<bool> done)
{
    auto w = co_await store.watch("tls-channel");
    (void)co_await w.wait(dl::clock::now());
    *done = true;
}
} // namespace

TEST_CASE("redis: TLS survives disconnect() at random moments while large replies are read", "[redis][tls][fault]")
{
    self_signed certs;
    REQUIRE(certs.make());
    redis_server server{{"--tls-cert-file", certs.cert, "--tls-key-file", certs.key, "--tls-ca-cert-file",
                         certs.cert, "--tls-auth-clients", "no"},
                        true};
    asio::io_context io;
    auto cfg = server.config();
    cfg.tls = true;
    cfg.tls_ca_file = certs.cert;
    cfg.tls_server_name = "localhost";
    const std::string big(2 << 20, 'v'); // many TLS records per reply
    {
        dl::redis::store writer{io, cfg};
        run(io, [&]() -> asio::awaitable<void> {
            auto set = dl::redis::resp::command({"SET", "big", big});
            auto ok = co_await writer.execute_command(std::move(set));
            REQUIRE(ok);
        });
    }
    dl::redis::store store{io, cfg};
    const auto seed = std::random_device{}();
    INFO("seed " << seed);
    std::mt19937 rng{seed};
    std::size_t whole = 0, unknown = 0, refused = 0;
    constexpr int rounds = 60, in_flight = 3;
    for (int round = 0; round < rounds; ++round) {
        // Some rounds close during the TCP connect or the TLS handshake, most while
        // replies are being read (a 2 MiB reply takes a few milliseconds).
        const auto delay = std::chrono::microseconds{rng() % 8000};
        run(io, [&]() -> asio::awaitable<void> {
            auto ex = co_await asio::this_coro::executor;
            std::vector<std::shared_ptr<std::optional<dl::result<dl::redis::resp::value>>>> got;
            for (int i = 0; i < in_flight; ++i) {
                got.push_back(std::make_shared<std::optional<dl::result<dl::redis::resp::value>>>());
                asio::co_spawn(ex, get_into(store, "big", got.back()), asio::detached);
            }
            auto watched = std::make_shared<bool>(false);
            asio::co_spawn(ex, watch_once(store, watched), asio::detached); // the subscriber too
            asio::steady_timer t{ex, delay};
            co_await t.async_wait(asio::use_awaitable);
            store.disconnect();
            const auto all_done = [&] {
                return *watched && std::all_of(got.begin(), got.end(), [](const auto& g) { return g->has_value(); });
            };
            for (int i = 0; i < 2000 && !all_done(); ++i)
                co_await settle(5ms);
            REQUIRE(all_done());
            for (const auto& g : got) {
                const auto& r = **g;
                if (r) {
                    CHECK(r.value().text == big);
                    ++whole;
                } else if (r.error() == dl::errc::outcome_unknown) {
                    ++unknown;
                } else {
                    CHECK((r.error() == dl::errc::store_unavailable || r.error() == dl::errc::auth_failed));
                    ++refused;
                }
            }
        });
    }
    CHECK(whole + unknown + refused == std::size_t{rounds * in_flight});
    // The store still works after all that.
    CHECK_FALSE(lock_once(io, store));
}
