// The layers suite (LightSeq2 Fig. 19 and 20): one file per layer adds that layer's experiments,
// each the managed fused layer against its eager-like baseline (unfused kernels, a caching
// allocator), and its GPU checks. suites/suite_layers.h is the public face; this header is the
// suite's inside.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/check_result.h"
#include "core/dtype.h"
#include "layers/criterion_layer.h"
#include "layers/embedding_layer.h"
#include "suites/dump.h"
#include "suites/experiment.h"
#include "suites/suite_layers.h"

namespace seqbench::layer_experiments {

// Seeds shared by the layer experiments (parameters, inputs, dropout streams).
inline constexpr std::uint64_t kParamSeed = 0x1a7e5, kInputSeed = 0x1a7e6, kDropoutSeed = 0xd50;

void add_encoder_experiments(SuiteSpec& suite, const SuiteOptions& options);
void add_decoder_experiments(SuiteSpec& suite, const SuiteOptions& options);

// The cuBLASLt fused epilogues against a plain GEMM plus the separate kernel, at the
// transformer-big FFN and projection shapes (suites/layers/gemm_epilogue.cu).
void add_gemm_epilogue_experiments(SuiteSpec& suite, const SuiteOptions& options);

// Fig. 20's memory loop (see suites/suite_layers.h), f16 and bf16: over the encoder layer
// (encoder.cu) and over the decoder layer (decoder.cu); the loop itself is layer_timing.h's.
std::vector<CheckResult> encoder_memory_checks(const LayersSuiteShapes& shapes, std::uint64_t seed);
std::vector<CheckResult> decoder_memory_checks(const LayersSuiteShapes& shapes, std::uint64_t seed);
// ... and over transformer-big's encoder as a stack of kEncoderStackLayers (encoder_stack.cu):
// EncoderStack (one block) against BaselineEncoderStack (eager layers chained through a caching
// allocator).
inline constexpr int kEncoderStackLayers = 6;
std::vector<CheckResult> encoder_stack_memory_checks(const LayersSuiteShapes& shapes, std::uint64_t seed);

// What the memory loop measured of one layer (layer_timing.h run_memory_loop).
struct LoopStats {
  std::size_t peak_bytes = 0;           // managed: the counter's peak; baseline: peak allocated
  std::size_t peak_reserved_bytes = 0;  // device bytes held at the peak (the counter's peak)
  std::uint64_t setup_allocations = 0;  // device allocations before the loop (construction)
  std::uint64_t loop_allocations = 0;   // device allocations during the loop
  std::uint64_t late_allocations = 0;   // ... during its second half
  // Device memory taken during the loop's second half, as cudaMemGetInfo's free bytes saw it: what
  // the counting allocator cannot see (cuBLASLt, CUB, CUDA's lazy module loading) included.
  std::int64_t late_device_bytes = 0;
};

// The layers whose memory loop the suite checks, in check order: "encoder", "decoder",
// "encoder_stack".
std::vector<std::string> memory_loop_layers();

// The memory checks' name prefix: "layers/memory/<dtype>/" for the encoder (its names from before
// the decoder's were added), "layers/memory/<layer>/<dtype>/" for any other layer.
std::string memory_check_prefix(const std::string& layer, DType dtype);

// Every memory check name the suite's gpu_checks produce, in their order: for each layer of
// memory_loop_layers(), each dtype (f16, bf16): <prefix>peak_ratio, <prefix>steady_state_allocations.
std::vector<std::string> memory_check_names();

// The two checks of one layer's loop from its measurements (host only; `model` names the layer's
// shapes in the details, LayersSuiteShapes::model): "peak_ratio" passes when
// managed.peak_bytes / eager.peak_bytes <= kMemoryRatioTarget (eager: the baseline; a baseline
// peak of 0 fails),
// "steady_state_allocations" when managed.loop_allocations == 0; the details give the shapes, the
// seed and every number of both layers. `kept` (optional) is the same loop's managed layer with
// Recompute::none: its peak and ratio are reported in peak_ratio's detail, not checked (the check
// is the default's), so that one run measures what the recomputation saves.
std::vector<CheckResult> memory_loop_checks(const std::string& model, const std::string& layer, DType dtype,
                                            std::uint64_t seed, int tokens, int max_len,
                                            const std::vector<std::pair<std::int64_t, std::int64_t>>& shapes,
                                            const LoopStats& managed, const LoopStats& eager,
                                            const LoopStats* kept = nullptr);

// --- the embedding and criterion layers (embedding.cu, criterion.cu) ----------------------------

// The token-level settings the embedding and criterion experiments share (fairseq's): vocabulary
// (the full and quick shapes'; LayersSuiteShapes::vocab), padding index, the share of padding at
// sentence tails, the criterion's label smoothing.
inline constexpr int kLayersSuiteVocab = 32000;
inline constexpr int kLayersSuitePaddingIdx = 1;
inline constexpr double kLayersSuitePadFraction = 0.1;
inline constexpr double kLayersSuiteEpsilon = 0.1;

// The suite's embedding layer: the shapes' vocab (32000) and hidden (transformer-big's), padding_idx 1,
// sinusoidal positions by non-padding count from offset padding_idx + 1 (fairseq), scale
// sqrt(hidden), dropout the layer config's hidden_dropout (transformer-big: 0.3; fairseq applies
// args.dropout to the embedding output, LightSeq2's embedding layer its config's dropout).
layers::EmbeddingLayerConfig layers_suite_embedding_config(const LayersSuiteShapes& shapes, DType dtype,
                                                           int max_batch_tokens, int max_seq_len);
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
