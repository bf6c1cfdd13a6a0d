// Operator-suite experiments and GPU checks for the bias_dropout_residual kernel family (to be filled in).
#include "suites/operators/operators.h"

namespace seqbench::operators {

void add_bias_dropout_residual_experiments(SuiteSpec&, const SuiteOptions&) {}
std::vector<CheckResult> bias_dropout_residual_gpu_checks(std::uint64_t) {
  return {};
}

}  // namespace seqbench::operators
