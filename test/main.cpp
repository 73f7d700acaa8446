// The main() of the test executables: Catch's runner, or, started as
// `--worker NAME ARGS...`, the worker a test file registered under NAME (a lock
// client in a process of its own, which a test can kill or pause; workers.hpp).
#include "catch_runner.hpp"
#include "workers.hpp"

#include <cstdio>
#include <string>
#include <vector>

int main(int argc, char* argv[])
{
    if (argc >= 2 && std::string{argv[1]} == "--worker") {
        const std::string name = argc >= 3 ? argv[2] : "";
        if (const auto w = test::worker_registry().find(name); w != test::worker_registry().end())
            return w->second(std::vector<std::string>(argv + 3, argv + argc));
        std::fprintf(stderr, "unknown worker %s\n", name.c_str());
        return 2;
    }
    return test::run_catch(argc, argv);
}
