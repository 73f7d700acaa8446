// Test runner for the fault suite. Prints the suite's summary at the end. The binary
// doubles as a lock client when started with --worker (see workers.hpp), so that
// holders are real processes that can be paused and killed.
#include "catch_runner.hpp"
#include "tally.hpp"
#include "workers.hpp"

#include <string>

int main(int argc, char* argv[])
{
    if (argc >= 2 && std::string{argv[1]} == "--worker")
        return fault::worker_main(argc - 2, argv + 2);
    const int failed = test::run_catch(argc, argv);
    fault::tally::get().print();
    return failed;
}
