// test/catch_runner.hpp: Catch's test runner, compiled once (catch_runner.cpp) and
// linked into every test executable, whose own main() calls it.
#pragma once

namespace test {

/// Runs the test cases linked into this executable with Catch's command line.
int run_catch(int argc, char* argv[]);

} // namespace test
