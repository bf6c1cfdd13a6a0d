// Scaffold: the embedding experiments and GPU checks (issue #3) are being written on their own branch.
#include "suites/operators/operators.h"

namespace seqbench::operators {

void add_embedding_experiments(SuiteSpec&, const SuiteOptions&) {}

std::vector<CheckResult> embedding_gpu_checks(std::uint64_t) {
  return {};
}

}  // namespace seqbench::operators
