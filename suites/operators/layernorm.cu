// Operator-suite experiments and GPU checks for the layernorm kernel family (to be filled in).
#include "suites/operators/operators.h"

namespace seqbench::operators {

void add_layernorm_experiments(SuiteSpec&, const SuiteOptions&) {}
std::vector<CheckResult> layernorm_gpu_checks(std::uint64_t) {
  return {};
}

}  // namespace seqbench::operators
