// Catch's implementation and command line, once per build configuration. Catch's
// single header compiles its whole runner into any file that asks for it, about
// half a minute under the sanitizers; the test executables share this one.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include "catch_runner.hpp"

int test::run_catch(int argc, char* argv[]) { return Catch::Session().run(argc, argv); }
