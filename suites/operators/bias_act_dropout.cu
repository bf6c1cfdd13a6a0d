// Operator-suite experiments and GPU checks for the bias_act_dropout kernel family (to be filled in).
#include "suites/operators/operators.h"

namespace seqbench::operators {

void add_bias_act_dropout_experiments(SuiteSpec&, const SuiteOptions&) {}
std::vector<CheckResult> bias_act_dropout_gpu_checks(std::uint64_t) {
  return {};
}

}  // namespace seqbench::operators
