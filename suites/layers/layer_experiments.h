// The layers suite (LightSeq2 Fig. 19 and 20): one file per layer adds that layer's experiments,
// each the managed fused layer against its eager-like baseline (unfused kernels, a caching
// allocator), and its GPU checks. suites/suite_layers.h is the public face; this header is the
// suite's inside.
#pragma once

#include <cstdint>
#include <vector>

#include "core/check_result.h"
#include "core/dtype.h"
#include "layers/criterion_layer.h"
#include "layers/embedding_layer.h"
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

// --- the embedding and criterion layers (embedding.cu, criterion.cu) ----------------------------

// The token-level settings the embedding and criterion experiments share (fairseq's): vocabulary,
// padding index, the share of padding at sentence tails, the criterion's label smoothing.
inline constexpr int kLayersSuiteVocab = 32000;
inline constexpr int kLayersSuitePaddingIdx = 1;
inline constexpr double kLayersSuitePadFraction = 0.1;
inline constexpr double kLayersSuiteEpsilon = 0.1;

// The suite's embedding layer: vocab 32000, hidden = transformer-big's, padding_idx 1,
// sinusoidal positions by non-padding count from offset padding_idx + 1 (fairseq), scale
// sqrt(hidden), dropout the layer config's hidden_dropout (transformer-big: 0.3; fairseq applies
// args.dropout to the embedding output, LightSeq2's embedding layer its config's dropout).
layers::EmbeddingLayerConfig layers_suite_embedding_config(DType dtype, int max_batch_tokens,
                                                           int max_seq_len);
// The suite's criterion: fairseq's convention, ε = 0.1, padding targets ignored.
layers::CriterionLayerConfig layers_suite_criterion_config(DType dtype, int max_batch_tokens);

// Kept (non-padding) lengths of `batch` sentences of `len` slots, deterministic from the seed:
// len - p_b with p_b uniform in [0, floor(2·kLayersSuitePadFraction·len)] (mt19937_64, modulo), at
// least 1.
std::vector<std::int64_t> layers_suite_sentence_lengths(std::int64_t batch, std::int64_t len,
                                                        std::uint64_t seed);
// Token ids [batch·len]: uniform in [padding_idx + 1, vocab) (mt19937_64, modulo) for the first
// lengths[b] slots of sentence b, padding_idx after them.
std::vector<std::int32_t> layers_suite_tokens_with_padding(const std::vector<std::int64_t>& lengths,
                                                           std::int64_t len, int vocab, std::uint64_t seed);

void add_embedding_experiments(SuiteSpec& suite, const SuiteOptions& options);
void add_criterion_experiments(SuiteSpec& suite, const SuiteOptions& options);

}  // namespace seqbench::layer_experiments
