// Scaffold: the qkv_reshape experiments and GPU checks (issue #3) are being written on their own branch.
#include "suites/operators/operators.h"

namespace seqbench::operators {

void add_qkv_reshape_experiments(SuiteSpec&, const SuiteOptions&) {}

std::vector<CheckResult> qkv_reshape_gpu_checks(std::uint64_t) {
  return {};
}

}  // namespace seqbench::operators
