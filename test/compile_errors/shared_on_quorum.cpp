// A shared mutex asked of a Redlock quorum: refused with one message that says so.
#include <distlock/distlock.hpp>
#include <distlock/memory.hpp>

#include <span>

int main()
{
    asio::io_context io;
    distlock::memory::store a{io}, b{io}, c{io};
    distlock::memory::store* nodes[] = {&a, &b, &c};
    distlock::quorum<distlock::memory::store> q{std::span<distlock::memory::store* const>{nodes}};
    distlock::basic_distributed_shared_mutex<distlock::quorum<distlock::memory::store>> m{q, "r"};
    (void)m;
}
