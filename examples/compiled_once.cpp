// A mutex type compiled once: this file locks orders with shop::order_mutex, whose
// acquisition loop is compiled in order_mutex.cpp, not here (order_mutex.hpp declares
// it `extern template`). Eight coroutines take turns on one order; each checks that no
// one else is inside and that its fencing token is above every token before it.
// Exits non-zero if the lock or its tokens do not behave so.
#include "order_mutex.hpp"

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/io_context.hpp>
#include <asio/steady_timer.hpp>
#include <asio/use_awaitable.hpp>

#include <cstdio>

namespace dl = distlock;
using namespace std::chrono_literals;

struct order_book {
    int inside = 0, overlaps = 0, served = 0, failures = 0;
    dl::fence_token last_fence = 0;
    bool fences_grow = true;
};

asio::awaitable<void> handle_order(dl::memory::store& store, order_book& book)
{
    shop::order_mutex m{store, "order:123", {.ttl = 5s}, dl::retry::exponential_backoff{.deadline = 5s}};
    auto lease = co_await m.lock();
    if (!lease) {
        ++book.failures;
        co_return;
    }
    if (book.inside++ > 0)
        ++book.overlaps;
    book.fences_grow = book.fences_grow && lease->fence() > book.last_fence;
    book.last_fence = lease->fence();
    asio::steady_timer work{co_await asio::this_coro::executor, 1ms};
    co_await work.async_wait(asio::use_awaitable);
    --book.inside;
    ++book.served;
    if (!co_await lease->unlock())
        ++book.failures;
}

int main()
{
    asio::io_context io;
    dl::memory::store store{io};
    order_book book;
    for (int i = 0; i < 8; ++i)
        asio::co_spawn(io, handle_order(store, book), asio::detached);
    io.run();
    std::printf("%d orders served, %d overlaps, %d failures, fences %s\n", book.served, book.overlaps, book.failures,
                book.fences_grow ? "grew" : "did not grow");
    return book.served == 8 && book.overlaps == 0 && book.failures == 0 && book.fences_grow ? 0 : 1;
}
