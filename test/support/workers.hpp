// Worker processes of the test binaries: a test starts its own binary with
// `--worker NAME ARGS...` to get a lock client it can kill or pause. A test file
// registers its workers by name at static initialisation; the runner's main() looks
// them up, so that a store's workers stay in that store's file.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

namespace test {

using worker_function = std::function<int(const std::vector<std::string>& args)>;

inline std::map<std::string, worker_function>& worker_registry()
{
    static std::map<std::string, worker_function> workers;
    return workers;
}

/// `static const bool registered = test::register_worker("name", fn);`
inline bool register_worker(std::string name, worker_function fn)
{
    worker_registry().emplace(std::move(name), std::move(fn));
    return true;
}

} // namespace test
