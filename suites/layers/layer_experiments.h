// The layers suite (LightSeq2 Fig. 19 and 20): one file per layer adds that layer's experiments,
// each the managed fused layer against its eager-like baseline (unfused kernels, a caching
// allocator), and its GPU checks. suites/suite_layers.h is the public face; this header is the
// suite's inside.
#pragma once

#include <cstdint>
#include <vector>

#include "core/check_result.h"
#include "suites/experiment.h"

namespace seqbench::layer_experiments {

// Seeds shared by the layer experiments (parameters, inputs, dropout streams).
inline constexpr std::uint64_t kParamSeed = 0x1a7e5, kInputSeed = 0x1a7e6, kDropoutSeed = 0xd50;

void add_encoder_experiments(SuiteSpec& suite, const SuiteOptions& options);
void add_decoder_experiments(SuiteSpec& suite, const SuiteOptions& options);

// The cuBLASLt fused epilogues against a plain GEMM plus the separate kernel, at the
// transformer-big FFN and projection shapes (suites/layers/gemm_epilogue.cu).
void add_gemm_epilogue_experiments(SuiteSpec& suite, const SuiteOptions& options);

// Fig. 20's memory loop over the encoder layer, f16 and bf16 (see suites/suite_layers.h).
std::vector<CheckResult> encoder_memory_checks(bool quick, std::uint64_t seed);

}  // namespace seqbench::layer_experiments
