// The `reference` suite: the CPU references' gradient checks and closed-form tests. It has no
// timed experiments; it is what `seqbench run` still does on a machine without a GPU.
#pragma once

#include "suites/experiment.h"

namespace seqbench {

SuiteSpec reference_suite(const SuiteOptions& options);

}  // namespace seqbench
