// A TCP proxy on loopback that injects network faults between a client and a
// server, per direction: added latency with jitter, a blackhole (bytes held, socket
// kept open), replies sliced into 1-3 byte segments, a connection closed after N more
// bytes (the request applied, the reply lost), and connection resets (RST).
//
// It runs on its own thread, so the process under test and the proxy never share an
// event loop; faults can be changed at any moment and apply to live connections.
#pragma once

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/executor_work_guard.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/steady_timer.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/write.hpp>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <thread>
#include <vector>

namespace fault {

enum class direction { to_server = 0, to_client = 1 };

/// What happens to the bytes flowing one way.
struct link_faults {
    std::chrono::milliseconds latency{0};
    std::chrono::milliseconds jitter{0};    ///< extra latency, uniform in [0, jitter]
    bool blackhole = false;                 ///< hold every byte until lifted
    std::size_t slice = 0;                  ///< forward in segments of 1..slice bytes (0: as read)
    /// Forward this many more bytes, then close the connection (once).
    std::optional<std::size_t> close_after;
};

class proxy {
public:
    explicit proxy(std::uint16_t upstream_port)
        : upstream_{asio::ip::make_address("127.0.0.1"), upstream_port},
          acceptor_{io_, {asio::ip::make_address("127.0.0.1"), 0}}, port_{acceptor_.local_endpoint().port()}
    {
        asio::co_spawn(io_, accept(), asio::detached);
        thread_ = std::thread{[this] {
            // Kept running until the destructor stops it, with or without connections.
            auto guard = asio::make_work_guard(io_);
            io_.run();
        }};
    }
    proxy(const proxy&) = delete;
    proxy& operator=(const proxy&) = delete;
    ~proxy()
    {
        on_loop([this] {
            acceptor_.close();
            for (auto& c : live())
                c->close(false);
        });
        io_.stop();
        thread_.join();
    }

    std::uint16_t port() const { return port_; }

    /// Sets the faults of one direction, for live and future connections.
    void set(direction d, link_faults f)
    {
        std::lock_guard lock{mutex_};
        faults_[static_cast<int>(d)] = f;
        if (f.blackhole || f.latency.count() || f.jitter.count() || f.slice || f.close_after)
            ++injected_;
    }

    /// Both directions back to a healthy network.
    void heal()
    {
        set(direction::to_server, {});
        set(direction::to_client, {});
    }

    /// Resets every live connection (RST, not FIN).
    void reset_all()
    {
        ++injected_;
        on_loop([this] {
            for (auto& c : live())
                c->close(true);
        });
    }

    std::size_t connections_accepted() const { return accepted_; }
    std::size_t faults_injected() const { return injected_; }

private:
    using tcp = asio::ip::tcp;

    struct connection {
        connection(tcp::socket c, tcp::socket s) : client{std::move(c)}, server{std::move(s)} {}
        tcp::socket client, server;
        bool closed = false;
        void close(bool reset)
        {
            if (closed)
                return;
            closed = true;
            std::error_code ignored;
            for (auto* s : {&client, &server}) {
                if (reset)
                    s->set_option(asio::socket_base::linger{true, 0}, ignored);
                s->close(ignored);
            }
        }
    };

    // Runs `fn` on the proxy's thread and waits for it.
    template <class Fn>
    void on_loop(Fn fn)
    {
        std::promise<void> done;
        asio::post(io_, [&] {
            fn();
            done.set_value();
        });
        done.get_future().wait();
    }

    std::vector<std::shared_ptr<connection>> live()
    {
        std::vector<std::shared_ptr<connection>> out;
        for (auto& w : connections_)
            if (auto c = w.lock())
                out.push_back(std::move(c));
        return out;
    }

    link_faults faults(direction d)
    {
        std::lock_guard lock{mutex_};
        return faults_[static_cast<int>(d)];
    }

    // Takes `n` bytes from the close-after budget of `d`: how many may pass before
    // the connection closes (n when no budget is set).
    std::size_t budget(direction d, std::size_t n, bool& close)
    {
        std::lock_guard lock{mutex_};
        auto& f = faults_[static_cast<int>(d)];
        close = false;
        if (!f.close_after)
            return n;
        if (*f.close_after >= n) {
            *f.close_after -= n;
            return n;
        }
        const auto pass = *f.close_after;
        f.close_after.reset(); // once
        close = true;
        return pass;
    }

    asio::awaitable<void> accept()
    {
        for (;;) {
            auto [ec, client] = co_await acceptor_.async_accept(asio::experimental::as_tuple(asio::use_awaitable));
            if (ec == asio::error::operation_aborted || !acceptor_.is_open())
                co_return;
            if (ec) { // out of descriptors, a connection reset before accept: keep serving
                asio::steady_timer t{io_};
                co_await pause(t, std::chrono::milliseconds{10});
                continue;
            }
            ++accepted_;
            tcp::socket server{io_};
            auto [cec] = co_await server.async_connect(upstream_, asio::experimental::as_tuple(asio::use_awaitable));
            if (cec)
                continue; // the client sees its connection closed
            std::error_code ignored;
            client.set_option(tcp::no_delay{true}, ignored);
            server.set_option(tcp::no_delay{true}, ignored);
            auto c = std::make_shared<connection>(std::move(client), std::move(server));
            std::erase_if(connections_, [](const auto& w) { return w.expired(); });
            connections_.push_back(c);
            asio::co_spawn(io_, pump(c, direction::to_server), asio::detached);
            asio::co_spawn(io_, pump(c, direction::to_client), asio::detached);
        }
    }

    asio::awaitable<void> pause(asio::steady_timer& t, std::chrono::steady_clock::duration d)
    {
        t.expires_after(d);
        co_await t.async_wait(asio::experimental::as_tuple(asio::use_awaitable));
    }

    asio::awaitable<void> pump(std::shared_ptr<connection> c, direction d)
    {
        auto& from = d == direction::to_server ? c->client : c->server;
        auto& to = d == direction::to_server ? c->server : c->client;
        asio::steady_timer t{io_};
        std::array<char, 16384> buffer;
        auto last_delivery = std::chrono::steady_clock::now();
        while (!c->closed) {
            auto [ec, n] = co_await from.async_read_some(asio::buffer(buffer), asio::experimental::as_tuple(asio::use_awaitable));
            if (ec)
                break;
            const auto arrived = std::chrono::steady_clock::now();
            // A blackhole holds the bytes (and, since this pump stops reading, the
            // kernel buffers the rest) until it is lifted.
            while (!c->closed && faults(d).blackhole)
                co_await pause(t, std::chrono::milliseconds{5});
            const auto f = faults(d);
            if (f.latency.count() || f.jitter.count()) {
                std::uniform_int_distribution<int> extra{0, static_cast<int>(f.jitter.count())};
                const auto due = std::max(last_delivery, arrived + f.latency + std::chrono::milliseconds{extra(random_)});
                if (due > std::chrono::steady_clock::now())
                    co_await pause(t, due - std::chrono::steady_clock::now());
            }
            bool close = false;
            const auto pass = budget(d, n, close);
            std::size_t sent = 0;
            while (!c->closed && sent < pass) {
                std::size_t chunk = pass - sent;
                if (f.slice)
                    chunk = std::min<std::size_t>(chunk, std::uniform_int_distribution<std::size_t>{1, f.slice}(random_));
                auto [wec, written] = co_await asio::async_write(to, asio::buffer(buffer.data() + sent, chunk),
                                                                 asio::experimental::as_tuple(asio::use_awaitable));
                if (wec)
                    break;
                sent += written;
                if (f.slice) // separate segments, so that the reader sees them apart
                    co_await pause(t, std::chrono::microseconds{300});
            }
            last_delivery = std::chrono::steady_clock::now();
            if (close || sent < pass)
                break;
        }
        c->close(false);
    }

    asio::io_context io_;
    tcp::endpoint upstream_;
    tcp::acceptor acceptor_;
    std::uint16_t port_; // read once: the acceptor belongs to the proxy's thread
    std::thread thread_;
    std::mutex mutex_;
    std::array<link_faults, 2> faults_{};
    std::vector<std::weak_ptr<connection>> connections_; // the proxy thread's
    std::mt19937 random_{12345};
    std::atomic<std::size_t> accepted_{0};
    std::atomic<std::size_t> injected_{0};
};

} // namespace fault
