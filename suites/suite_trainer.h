// The `trainer` suite (LightSeq2 Fig. 18): one mixed-precision optimizer step over the parameters
// of six real models, Adam and SGD, timed five ways: the Fairseq FP16Optimizer-style per-tensor
// baseline, apex-style multi_tensor_apply, and the fused whole-workspace update without and with an
// fp32 master copy and with bf16 stochastic rounding (trainer/); plus the fused step's update launch
// alone, whose difference from the step is the statistics pass. Its CPU checks are the precision drift
// study's (trainer/drift_study.h: drift_study_checks), so the report that times the precision modes also
// records what each costs in accuracy.
#pragma once

#include "suites/experiment.h"

namespace seqbench {

SuiteSpec trainer_suite(const SuiteOptions& options);

}  // namespace seqbench
