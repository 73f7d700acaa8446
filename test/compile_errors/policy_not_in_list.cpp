// A policy instance whose type the mutex was not given: the message says to add it.
#include <distlock/distlock.hpp>
#include <distlock/memory.hpp>

int main()
{
    asio::io_context io;
    distlock::memory::store store{io};
    distlock::basic_distributed_mutex<distlock::memory::store> m{store, "r", {}, distlock::retry::fixed{}};
    (void)m;
}
