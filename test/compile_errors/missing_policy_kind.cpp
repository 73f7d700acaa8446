// A retry policy that forgets to name its kind: one error, naming the tags.
#include <distlock/distlock.hpp>
#include <distlock/memory.hpp>

struct every_10ms {
    std::optional<distlock::duration> next_delay(const distlock::attempt&) const
    {
        return std::chrono::milliseconds{10};
    }
};

int main()
{
    asio::io_context io;
    distlock::memory::store store{io};
    distlock::basic_distributed_mutex<distlock::memory::store, every_10ms> m{store, "r"};
    (void)m;
}
