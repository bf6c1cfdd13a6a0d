// Operator-suite experiments and GPU checks for the softmax kernel family (to be filled in).
#include "suites/operators/operators.h"

namespace seqbench::operators {

void add_softmax_experiments(SuiteSpec&, const SuiteOptions&) {}
std::vector<CheckResult> softmax_gpu_checks(std::uint64_t) {
  return {};
}

}  // namespace seqbench::operators
