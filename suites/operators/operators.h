// The operator suite (LightSeq2 Fig. 16 and 17, plus the other fused kernels): one file per kernel
// family adds that family's experiments, each a fused variant against its unfused baseline.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "core/check_result.h"
#include "suites/experiment.h"

namespace seqbench::operators {

// The shapes of one axis for the options' tier: tiny (SuiteOptions::tiny), quick, or full.
template <class T>
std::vector<T> shapes(const SuiteOptions& options, std::vector<T> tiny, std::vector<T> quick,
                      std::vector<T> full) {
  return options.tiny ? std::move(tiny) : options.quick ? std::move(quick) : std::move(full);
}

void add_layernorm_experiments(SuiteSpec& suite, const SuiteOptions& options);
void add_softmax_experiments(SuiteSpec& suite, const SuiteOptions& options);
void add_dropout_experiments(SuiteSpec& suite, const SuiteOptions& options);
void add_bias_act_dropout_experiments(SuiteSpec& suite, const SuiteOptions& options);
void add_bias_dropout_residual_experiments(SuiteSpec& suite, const SuiteOptions& options);
void add_cross_entropy_experiments(SuiteSpec& suite, const SuiteOptions& options);
void add_embedding_experiments(SuiteSpec& suite, const SuiteOptions& options);
void add_qkv_reshape_experiments(SuiteSpec& suite, const SuiteOptions& options);

// Each family's kernels against reference/, over random shapes (odd ones included) and all three
// dtypes, outputs poisoned first. `seqbench check` and the family's gtest both run these.
std::vector<CheckResult> layernorm_gpu_checks(std::uint64_t seed);
std::vector<CheckResult> softmax_gpu_checks(std::uint64_t seed);
std::vector<CheckResult> dropout_gpu_checks(std::uint64_t seed);
std::vector<CheckResult> bias_act_dropout_gpu_checks(std::uint64_t seed);
std::vector<CheckResult> bias_dropout_residual_gpu_checks(std::uint64_t seed);
std::vector<CheckResult> cross_entropy_gpu_checks(std::uint64_t seed);
std::vector<CheckResult> embedding_gpu_checks(std::uint64_t seed);
std::vector<CheckResult> qkv_reshape_gpu_checks(std::uint64_t seed);

}  // namespace seqbench::operators

namespace seqbench {

SuiteSpec operators_suite(const SuiteOptions& options);

}  // namespace seqbench
