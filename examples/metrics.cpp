// Lock activity as Prometheus metrics (distlock/metrics/prometheus.hpp): the
// registry is served on a loopback port, locks run on the in-process store (granted,
// contended, waited for, released, one lost), and the program scrapes its own
// /metrics as Prometheus would and prints distlock's lines. With --serve SECONDS it
// then keeps serving that long, for a real Prometheus to scrape.
// Exits non-zero if the counts do not match what the locks did.
#include <distlock/distlock.hpp>
#include <distlock/memory.hpp>
#include <distlock/metrics/prometheus.hpp>

#include <prometheus/exposer.h>
#include <prometheus/registry.h>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/read.hpp>
#include <asio/steady_timer.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/write.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>

namespace dl = distlock;
using namespace std::chrono_literals;

using observed_mutex = dl::basic_distributed_mutex<dl::memory::store, dl::retry::fixed, dl::metrics::prometheus_observer>;

namespace {

// GET /metrics over HTTP/1.0 (the server closes after the body): the body.
std::string scrape(std::uint16_t port)
{
    asio::io_context io;
    asio::ip::tcp::socket s{io};
    s.connect({asio::ip::make_address("127.0.0.1"), port});
    const std::string request = "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
    asio::write(s, asio::buffer(request));
    std::string response;
    std::error_code ec;
    asio::read(s, asio::dynamic_buffer(response), ec);
    const auto body = response.find("\r\n\r\n");
    return body == std::string::npos ? std::string{} : response.substr(body + 4);
}

// The value of the sample "series value", if the text has it.
std::optional<double> sample(const std::string& text, const std::string& series)
{
    std::istringstream lines{text};
    for (std::string line; std::getline(lines, line);)
        if (line.starts_with(series + " "))
            return std::stod(line.substr(series.size() + 1));
    return std::nullopt;
}

asio::awaitable<void> pause(std::chrono::milliseconds d)
{
    asio::steady_timer t{co_await asio::this_coro::executor, d};
    co_await t.async_wait(asio::use_awaitable);
}

// Three locks taken and released; a try refused while a holder holds; a lock() that
// waits for that holder's release; that lease then dropped by the store and run out.
asio::awaitable<void> workload(dl::memory::store& store, dl::metrics::prometheus_metrics& metrics, bool& done)
{
    const auto quick = dl::retry::fixed{.delay = 5ms, .deadline = 10s};
    observed_mutex a{store, "report", {.ttl = 10s}, quick, metrics.observer("memory")};
    observed_mutex b{store, "report", {.ttl = 300ms}, quick, metrics.observer("memory")};
    for (int i = 0; i < 3; ++i) {
        auto l = co_await a.lock();
        if (l)
            (void)co_await l->unlock();
    }
    auto held = co_await a.lock();
    (void)co_await b.try_lock(); // refused: held
    std::optional<dl::result<dl::lease>> waited;
    asio::co_spawn(
        co_await asio::this_coro::executor, [&]() -> asio::awaitable<void> { waited = co_await b.lock(); },
        asio::detached);
    co_await pause(30ms);
    if (held)
        (void)co_await held->unlock();
    while (!waited)
        co_await pause(5ms);
    if (*waited) {
        store.expire("report"); // the holder does not know: its 300 ms run out
        (void)co_await (*waited)->lost();
    }
    co_await store.close();
    done = true;
}

} // namespace

int main(int argc, char** argv)
{
    const int serve_seconds = argc == 3 && std::string{argv[1]} == "--serve" ? std::atoi(argv[2]) : 0;

    prometheus::Exposer exposer{"127.0.0.1:0"};
    auto registry = std::make_shared<prometheus::Registry>();
    dl::metrics::prometheus_metrics metrics{*registry};
    exposer.RegisterCollectable(registry);
    const auto port = static_cast<std::uint16_t>(exposer.GetListeningPorts().front());

    asio::io_context io;
    dl::memory::store store{io};
    bool done = false;
    asio::co_spawn(io, workload(store, metrics, done), asio::detached);
    io.run();

    const auto text = scrape(port);
    std::istringstream lines{text};
    for (std::string line; std::getline(lines, line);)
        if (line.starts_with("distlock_") && line.find("_bucket") == std::string::npos)
            std::printf("%s\n", line.c_str());

    // Prometheus writes a series' labels in name order.
    const std::string memory = "store=\"memory\"";
    const auto contended = sample(text, "distlock_attempts_total{outcome=\"contended\"," + memory + "}").value_or(0);
    const bool ok = done && sample(text, "distlock_grants_total{" + memory + "}") == 5.0 &&
                    sample(text, "distlock_attempts_total{outcome=\"ok\"," + memory + "}") == 5.0 && contended >= 2 &&
                    sample(text, "distlock_waits_total{" + memory + "}").value_or(0) >= 1 &&
                    sample(text, "distlock_releases_total{outcome=\"ok\"," + memory + "}") == 4.0 &&
                    sample(text, "distlock_releases_total{outcome=\"lease_lost\"," + memory + "}") == 1.0 &&
                    sample(text, "distlock_hold_seconds_count{" + memory + "}") == 5.0 &&
                    sample(text, "distlock_acquire_seconds_count{" + memory + "}") == 5.0 &&
                    sample(text, "distlock_attempt_seconds_count{" + memory + "}") == 5.0 + contended &&
                    text.find("report") == std::string::npos; // no resource id among the labels
    std::printf("%s /metrics on 127.0.0.1:%u counts 5 grants, %g contended attempts, 4 releases, 1 loss\n",
                ok ? "[ok]  " : "[FAIL]", static_cast<unsigned>(port), contended);
    if (serve_seconds > 0) {
        std::printf("serving http://127.0.0.1:%u/metrics for %d s\n", static_cast<unsigned>(port), serve_seconds);
        std::this_thread::sleep_for(std::chrono::seconds{serve_seconds});
    }
    return ok ? 0 : 1;
}
