// Redlock asked of one store: the message says it needs a quorum backend.
#include <distlock/distlock.hpp>
#include <distlock/memory.hpp>

int main()
{
    asio::io_context io;
    distlock::memory::store store{io};
    distlock::basic_distributed_mutex<distlock::memory::store, distlock::acquire::quorum<>> m{store, "r"};
    (void)m;
}
