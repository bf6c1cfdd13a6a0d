// The `layers` suite (LightSeq2 Fig. 19 and Fig. 20): the Transformer-Big encoder and decoder
// layers, forward and backward, each eager-like baseline (layers/baseline_encoder_layer.h,
// layers/baseline_decoder_layer.h: unfused kernels, a caching allocator, stored uint8 masks)
// against its managed layer (EncoderLayer, DecoderLayer: fused kernels, one planned block), over a
// range of sequence lengths at a fixed number of batch tokens; and, as GPU checks, Fig. 20's
// memory loop: peak device memory and device allocation counts of both encoder layers, and of both
// decoder layers, over training steps of variable length.
//
// Experiments: encoder_fwd/<dtype>/B=<b>,L=<l> and encoder_bwd/<dtype>/B=<b>,L=<l>, dtype f16 and
// bf16, L in {32, 64, 128, 256} at 8192 batch tokens (quick: L in {64, 128} at 4096), B = tokens/L;
// variants "baseline" (the speedup reference) and "managed", and for backward experiments
// "managed_keep" (the managed layer with Recompute::none: what recomputing costs). FLOPs are the
// layer's GEMM FLOPs (encoder_layer_gemm_flops); bytes are 0 (a layer is GEMM-bound: GB/s would
// say nothing).
// decoder_fwd/<dtype>/B=<b>,L=<l> and decoder_bwd/...: the same dtypes, lengths, batch tokens and
// variants for the decoder layer (causal self-attention, cross-attention over an encoder output
// of S = L positions with the layer's own K/V projection, FFN; no padding), params as the
// encoder's with layer "decoder" plus src_len; FLOPs decoder_layer_gemm_flops. Forward experiments
// time forward(); backward experiments run one forward in prepare and time backward() (the
// baseline keeps its graph: retain_graph); the decoder's backward writes dx, d_encoder_out and
// every parameter gradient.
//
// Embedding and criterion (suites/layers/embedding.cu, criterion.cu): embedding_fwd|bwd/<dtype>/
// B=<b>,L=<l> and criterion_fwd|bwd/..., same dtypes, lengths and tokens; baseline
// BaselineEmbeddingLayer / BaselineCriterionLayer (unfused kernels, caching allocator) against the
// managed EmbeddingLayer / CriterionLayer; memory-bound: flops 0, bytes the operation's minimal
// traffic (counted in each file), so the runner reports GB/s; tokens and targets padded at
// sentence tails (about 10%), fixed seeds.
//
// Checks (GPU): layers/memory/<dtype>/... (the encoder layer) and layers/memory/decoder/<dtype>/...
// (the decoder layer: BaselineDecoderLayer against DecoderLayer, encoder_out of S = L rows, as long
// as each step's target) and layers/memory/encoder_stack/<dtype>/... (transformer-big's six encoder
// layers: BaselineEncoderStack, eager layers chained through one caching allocator, against
// EncoderStack, one planned block for the stack) for f16 and bf16: a loop of kMemorySteps (quick:
// kMemoryStepsQuick) forward + backward steps (the baseline's backward consumes its graph, as in training)
// with the shapes memory_loop_shapes(seed, ...), both layers on their own counting allocators; "peak_ratio"
// passes when the managed layer's peak device bytes are at most kMemoryRatioTarget times the
// baseline's peak allocated bytes (the baseline's best case: PyTorch's max_memory_allocated, below
// its reserved peak, which the detail also gives); "steady_state_allocations" passes when the
// managed layer made no device allocation during the loop. Both are measured, never assumed. The
// names: layer_experiments::memory_check_names() (suites/layers/layer_experiments.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "layers/config.h"
#include "suites/experiment.h"

namespace seqbench {

inline constexpr double kMemoryRatioTarget = 0.7;
inline constexpr int kMemorySteps = 24;
inline constexpr int kMemoryStepsQuick = 6;
inline constexpr int kMemoryStepsTiny = 3;

// The shapes of the layers suite at one SuiteOptions: the layer (transformer-big's kind: pre-LN,
// ReLU, its dropouts) at `hidden`, `ffn` and `heads`, the batch tokens of every experiment, the
// sequence lengths swept (the last is max_seq_len), the memory loop's steps and the vocabulary of
// the embedding and criterion layers.
//   full   transformer-big (1024, 4096, 16 heads), 8192 tokens, L {32, 64, 128, 256}, 24 steps, 32000
//   quick  transformer-big, 4096 tokens, L {64, 128}, 6 steps, 32000
//   tiny   model "tiny" (tests/simt only, SuiteOptions::tiny): hidden 36, ffn 68, 4 heads (head size
//          9: no width a multiple of 8), 96 tokens, L {13, 24} (13 does not divide 96), 3 steps,
//          vocab 1003: every experiment's and memory loop's code, at sizes CPU fibers can run
struct LayersSuiteShapes {
  std::string model;  // the params' "model"
  int hidden = 0, ffn = 0, heads = 0;
  int tokens = 0;
  std::vector<int> lengths;
  int memory_steps = 0;
  int vocab = 0;
  // Whether the experiments dump (`seqbench dump`): its parity instances (suites/layers/dump.cu)
  // are transformer-big's at vocab 32000, so the tiny shapes' experiments have none.
  bool dumps = true;
};
LayersSuiteShapes layers_suite_shapes(const SuiteOptions& options);

// The layers suite's layer: transformer-big's per-layer config (pre-LN, ReLU, its dropouts) at the
// shapes' hidden, ffn and heads, with the given maxima and dtype.
layers::LayerConfig layers_suite_config(const LayersSuiteShapes& shapes, DType dtype, int max_batch_tokens,
                                        int max_seq_len);

// GEMM FLOPs of one forward of an encoder layer on B sentences of L tokens (T = B·L):
//   2·T·H·(3H + H + 2·ffn)   the QKV, output, fc1 and fc2 projections
//   + 4·B·L²·H               scores Q·Kᵀ and context P·V over all heads (2·B·N·L²·d each)
// The backward does twice as many (dX and dW of every projection, two products per attention
// GEMM): encoder_layer_gemm_flops(..., true) = 2 × the forward's.
double encoder_layer_gemm_flops(const layers::LayerConfig& config, std::int64_t batch, std::int64_t len,
                                bool backward);

// GEMM FLOPs of one forward of a decoder layer on B sentences of L target tokens (T = B·L) over an
// encoder output of S positions per sentence:
//   2·T·H·4H                 self-attention: the QKV (3H) and output (H) projections
//   + 2·T·H·2H               cross-attention: the Q and output projections
//   + 2·B·S·H·2H             cross-attention: the K/V projection of the encoder output
//   + 2·T·H·2·ffn            fc1 and fc2
//   + 4·B·L²·H               self-attention scores and context (2·B·N·L²·d each)
//   + 4·B·L·S·H              cross-attention scores [L, S] and context (2·B·N·L·S·d each)
// The backward does twice as many: decoder_layer_gemm_flops(..., true) = 2 × the forward's.
double decoder_layer_gemm_flops(const layers::LayerConfig& config, std::int64_t batch, std::int64_t len,
                                std::int64_t src_len, bool backward);

// Fig. 20's step shapes (batch, length): deterministic from the seed; the first step is the
// largest (max_seq_len), the others uniform in [8, max_seq_len], batch = tokens / length.
std::vector<std::pair<std::int64_t, std::int64_t>> memory_loop_shapes(std::uint64_t seed, int steps,
                                                                      int tokens, int max_seq_len);

SuiteSpec layers_suite(const SuiteOptions& options);

}  // namespace seqbench
