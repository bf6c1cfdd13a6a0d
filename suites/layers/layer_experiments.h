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
#include "suites/dump.h"
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

// --- `seqbench dump` for the layer experiments (dump.cu) ----------------------------------------
//
// Dropout cannot match torch's RNG, and the layers draw their masks inside fused kernels, so a
// layer experiment's dump does not copy the timed layers: it builds SEPARATE parity instances of
// the managed layer with every dropout ratio 0, at kLayersParityTokens tokens (batch =
// max(1, kLayersParityTokens / L) sentences of the experiment's L; the decoder's S = L), once in the
// experiment's dtype and once in f32 (every layer dispatches f32), runs forward (and backward),
// and dumps inputs and outputs with the same seeds and ranges as the timing experiments. Every
// array's name is "<dtype>.<name>" (e.g. "bf16.x", "f32.d_fc1_weight"); see suites/layers/README.md.
inline constexpr std::int64_t kLayersParityTokens = 1024;

// The parity instance's batch for sequence length L: max(1, kLayersParityTokens / L).
std::int64_t layers_parity_batch(std::int64_t seq_len);

// The arrays a layer experiment's dump writes, from its params (layer, direction, dtype, seq_len):
// names, roles, dtypes and shapes, with empty bytes. Host only (the dump fills the bytes in this
// order). Throws seqbench::Error for a params.layer other than encoder, decoder, embedding, criterion.
std::vector<DumpArray> layer_parity_layout(const nlohmann::json& params);

// Makes `e` (a layer experiment whose params and prepare are set) dump: dump_variant "managed",
// dump_params (parity_dropout 0, parity_batch, parity_seq_len, parity_src_len for the decoder,
// parity_tokens, parity_dtypes), and a prepare that adds PreparedExperiment::dump (the parity run).
void enable_layer_dump(ExperimentSpec& e);

}  // namespace seqbench::layer_experiments
