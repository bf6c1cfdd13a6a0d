// The `trainer` suite (LightSeq2 Fig. 18): one mixed-precision optimizer step over the parameters
// of six real models, Adam and SGD, timed four ways: the Fairseq FP16Optimizer-style per-tensor
// baseline, apex-style multi_tensor_apply, and the fused whole-workspace update without and with an
// fp32 master copy (trainer/).
#pragma once

#include "suites/experiment.h"

namespace seqbench {

SuiteSpec trainer_suite(const SuiteOptions& options);

}  // namespace seqbench
