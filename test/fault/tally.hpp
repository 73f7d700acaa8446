// Counts for the summary the fault suite prints at the end: scenarios run, faults
// injected, operations checked, violations found (and which of them were expected,
// in the negative tests that must find one).
#pragma once

#include "history.hpp"

#include <atomic>
#include <cstddef>
#include <cstdio>

namespace fault {

struct tally {
    std::atomic<std::size_t> scenarios{0};
    std::atomic<std::size_t> runs{0};
    std::atomic<std::size_t> faults{0};
    std::atomic<std::size_t> operations{0};
    std::atomic<std::size_t> violations{0};          ///< in runs that must have none
    std::atomic<std::size_t> expected_violations{0}; ///< in negative tests

    static tally& get()
    {
        static tally t;
        return t;
    }

    /// Adds a checked run; `negative` runs are expected to find violations.
    void add(const report& r, std::size_t faults_injected, bool negative = false)
    {
        ++runs;
        faults += faults_injected;
        operations += r.operations;
        (negative ? expected_violations : violations) += r.violations.size();
    }

    void print() const
    {
        std::printf("fault suite: %zu scenarios, %zu checked runs, %zu faults injected, %zu operations checked, "
                    "%zu violations (%zu more found on purpose by negative tests)\n",
                    scenarios.load(), runs.load(), faults.load(), operations.load(), violations.load(),
                    expected_violations.load());
    }
};

} // namespace fault
