// The suite registry is not part of the simt build: its suites time kernels (CUDA graphs, events),
// which the simt runtime does not emulate. suites/dump.cpp (linked for the check families'
// dump_array) names it in `seqbench dump`'s code path, which no simt test reaches; these
// definitions satisfy the linker and refuse, by name, if anything ever calls them.
#include "core/error.h"
#include "suites/experiment.h"

namespace seqbench {

std::vector<SuiteSpec> all_suites(const SuiteOptions&) {
  SEQBENCH_FAIL("all_suites: the suite registry is not in the simt build (tests/simt/no_suites.cpp)");
}

const SuiteSpec& find_suite(const std::vector<SuiteSpec>&, const std::string& name) {
  SEQBENCH_FAIL("find_suite(" << name << "): the suite registry is not in the simt build");
}

}  // namespace seqbench
