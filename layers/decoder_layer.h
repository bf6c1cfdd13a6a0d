// DecoderLayer: LightSeq2's Transformer decoder layer (Wang et al. 2022, §IV-A; LightSeq's
// LSTransformerDecoderLayer) on the GPU, forward and backward: causal self-attention over the
// target, cross-attention over the encoder output, FFN, each a shared sub-layer
// (layers/attention_sublayer.h, layers/ffn_sublayer.h). The math is exactly
// reference/transformer_layer.h's decoder_layer_forward / decoder_layer_backward:
//
//   pre-LN   x1 = x  + dropout_h(self_attention(LN_self(x)))            (causal, target lengths)
//            x2 = x1 + dropout_h(cross_attention(LN_cross(x1), enc))     (source lengths)
//            y  = x2 + dropout_h(fc2(dropout_a(act(fc1(LN_ffn(x2))))))
//   post-LN  each LayerNorm moves after its residual add (x1 = LN_self(x + ...), ...).
//
// Cross-attention: the queries come from x1 (LN'd for pre-LN) through a Q-only projection [H, H];
// the keys and values from the encoder output enc [B·S, H] through a K/V projection [2H, H] (K
// rows first), split with projections = 2 into [2, B, N, S, d]; the scores are [B·N·L, S], masked
// by the source lengths (no causal mask). S may differ from L; both obey max_seq_len, and B·S
// max_batch_tokens (check_batch). The scores are planned at max_score_elements(config)·N, which
// bounds B·L·S as well as B·L².
//
// Dropout: one Philox stream per site under the caller's seed, offsets base+0 (self-attention
// probabilities [B·N·L, L]), base+1 (self-attention output [T, H]), base+2 (cross-attention
// probabilities [B·N·L, S]), base+3 (cross-attention output), base+4 (FFN activation [T, ffn]),
// base+5 (FFN output): exactly ref::decoder_layer_dropout_masks(seed) when base = 0. A training
// loop advances base by kDecoderLayerDropoutOffsets per layer and step.
//
// Parameters: device pointers of config.dtype (views into the caller's parameter buffer), in
// nn.Linear layout [out, in], in the order of for_each_decoder_tensor (the names say the shapes):
//   self_ln_gamma/beta [H], self_qkv_weight [3H, H] (Q, K, V rows), self_qkv_bias [3H],
//   self_out_weight [H, H], self_out_bias [H], cross_ln_gamma/beta [H], cross_q_weight [H, H],
//   cross_q_bias [H], cross_kv_weight [2H, H] (K, V rows), cross_kv_bias [2H], cross_out_weight
//   [H, H], cross_out_bias [H], ffn_ln_gamma/beta [H], fc1_weight [ffn, H], fc1_bias [ffn],
//   fc2_weight [H, ffn], fc2_bias [H].
// backward() WRITES every parameter gradient, dx, and this layer's d_encoder_out [B·S, H] (not
// accumulated: a stack sums d_encoder_out over its layers).
//
// External K/V (options.external_kv; LightSeq2 §IV-A's layer-batched cross-attention K/V, see
// layers/cross_kv.h): the layer does NOT project the encoder output. forward_kv() takes the
// cross-attention K/V heads [2, B, N, S, d] (K block first, the projection bias already added)
// from the caller, backward_kv() WRITES their gradient dK/dV into the caller's [2, B, N, S, d]
// and forms neither d_encoder_out nor the K/V weight and bias gradients: cross_kv_weight/bias
// must then be null in weights and grads (they live in CrossAttentionKV), forward()/backward()
// are refused, and the dry run has no cross.kv_raw, kv_heads, d_kv_heads, d_kv, kv ops or
// workspace (externals "kv_heads", "d_kv_heads" instead of "encoder_out", "d_encoder_out").
// The default (external_kv = false) is unchanged.
//
// Memory: the layer's own dry run (decoder_layer_lifetimes) at the config's maxima, planned in one
// block allocated once at construction; forward() and backward() allocate nothing; every op
// announces its step (checking mode). Externals: "x", "y", "dy", "dx", "encoder_out",
// "d_encoder_out".
//
// Limits and contract: config.validate(); every parameter and gradient pointer non-null; x, y
// [B·L, H], encoder_out [B·S, H] non-null, y overlapping neither input; target_lengths,
// source_lengths null (no padding) or device int32 [B] (values outside [0, L] / [0, S] are clamped
// by the softmax); backward() needs the last forward()'s x and encoder_out, unchanged;
// d_encoder_out overlaps none of dx, dy, x, encoder_out. No gradient view shares a byte with
// another view; y, dx and d_encoder_out overlap no view, x, encoder_out, dy and the lengths no
// gradient (layers/parameter_ranges.h). Every check happens before any CUDA call.
// Not thread-safe; one stream at a time.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "layers/config.h"
#include "layers/device_allocator.h"
#include "layers/gemm.h"
#include "layers/layer_run.h"
#include "layers/memory_planner.h"
#include "layers/parameter_ranges.h"

namespace seqbench::layers {

// The dropout offsets one forward uses (base + 0 .. base + 5).
inline constexpr std::uint64_t kDecoderLayerDropoutOffsets = 6;

template <class P>
struct DecoderLayerTensors {
  P self_ln_gamma{}, self_ln_beta{};       // [H]
  P self_qkv_weight{}, self_qkv_bias{};    // [3H, H], [3H]
  P self_out_weight{}, self_out_bias{};    // [H, H], [H]
  P cross_ln_gamma{}, cross_ln_beta{};     // [H]
  P cross_q_weight{}, cross_q_bias{};      // [H, H], [H]
  P cross_kv_weight{}, cross_kv_bias{};    // [2H, H], [2H]
  P cross_out_weight{}, cross_out_bias{};  // [H, H], [H]
  P ffn_ln_gamma{}, ffn_ln_beta{};         // [H]
  P fc1_weight{}, fc1_bias{};              // [ffn, H], [ffn]
  P fc2_weight{}, fc2_bias{};              // [H, ffn], [H]
};
using DecoderLayerWeights = DecoderLayerTensors<const void*>;
using DecoderLayerGrads = DecoderLayerTensors<void*>;

// Calls fn(name, pointer_ref) for each of the twenty tensors, in the order of the struct.
template <class Tensors, class Fn>
void for_each_decoder_tensor(Tensors& t, Fn&& fn) {
  fn("self_ln_gamma", t.self_ln_gamma);
  fn("self_ln_beta", t.self_ln_beta);
  fn("self_qkv_weight", t.self_qkv_weight);
  fn("self_qkv_bias", t.self_qkv_bias);
  fn("self_out_weight", t.self_out_weight);
  fn("self_out_bias", t.self_out_bias);
  fn("cross_ln_gamma", t.cross_ln_gamma);
  fn("cross_ln_beta", t.cross_ln_beta);
  fn("cross_q_weight", t.cross_q_weight);
  fn("cross_q_bias", t.cross_q_bias);
  fn("cross_kv_weight", t.cross_kv_weight);
  fn("cross_kv_bias", t.cross_kv_bias);
  fn("cross_out_weight", t.cross_out_weight);
  fn("cross_out_bias", t.cross_out_bias);
  fn("ffn_ln_gamma", t.ffn_ln_gamma);
  fn("ffn_ln_beta", t.ffn_ln_beta);
  fn("fc1_weight", t.fc1_weight);
  fn("fc1_bias", t.fc1_bias);
  fn("fc2_weight", t.fc2_weight);
  fn("fc2_bias", t.fc2_bias);
}

using DecoderTensorShape = ParameterShape;
// The shape of each tensor, in the order of for_each_decoder_tensor.
std::vector<DecoderTensorShape> decoder_layer_parameter_shapes(const LayerConfig& config);
// Adds the views' byte ranges to `ranges` (layers/parameter_ranges.h); null views (external-K/V
// mode's cross_kv) are skipped.
void add_decoder_parameter_ranges(ParameterRanges& ranges, const LayerConfig& config,
                                  const DecoderLayerWeights& weights, const DecoderLayerGrads& grads);

struct DecoderLayerOptions {
  std::string prefix = "dec0.";  // the planned tensors' names: "<prefix>cross.probs", ...
  // GEMMs: a caller's Gemm (not owned), or null for one the layer makes, with a workspace of
  // gemm_workspace_bytes planned in its block.
  Gemm* gemm = nullptr;
  std::size_t gemm_workspace_bytes = kGemmWorkspaceBytes;
  // The cross-attention K/V heads come from the caller (forward_kv/backward_kv; see the header).
  bool external_kv = false;
  // What the forward keeps for the backward (layers/layer_run.h): with pointwise, neither
  // attention's dropped probabilities nor the FFN activation; the results are bitwise the same.
  Recompute recompute = Recompute::pointwise;
  // Whether backward() leaves what the forward kept intact, so that backward() (or backward_kv()) may run
  // again on the same forward (PyTorch's retain_graph): those tensors then stay live to the end of the
  // backward (planned_lifetimes, layers/layer_run.h), which costs their bytes in the block. By
  // default a backward consumes its forward (its temporaries reuse those bytes) and a second
  // backward without a new forward is refused. The layer suite's backward timing, which
  // repeats a backward on one forward, sets it.
  bool retain_forward = false;
};

// The layer's dry run: its ops in execution order (forward, then backward) and every temporary's
// lifetime at the config's maximum shapes. Host only; validates the config.
std::vector<TensorLifetime> decoder_layer_lifetimes(const LayerConfig& config,
                                                    const DecoderLayerOptions& options = {},
                                                    std::vector<std::string>* ops = nullptr,
                                                    int* forward_ops = nullptr);

class CrossAttentionKV;  // layers/cross_kv.h

class DecoderLayer {
 public:
  // Validates config, weights, grads and options (throwing seqbench::Error naming the field
  // before any CUDA call), plans the temporaries and allocates the one block through `allocator`
  // (which must outlive the layer).
  DecoderLayer(const LayerConfig& config, const DecoderLayerWeights& weights, const DecoderLayerGrads& grads,
               DeviceAllocator& allocator, DecoderLayerOptions options = {});
  ~DecoderLayer();
  DecoderLayer(const DecoderLayer&) = delete;
  DecoderLayer& operator=(const DecoderLayer&) = delete;

  // y = layer(x, encoder_out). x, y: [batch_size·target_len, H]; encoder_out:
  // [batch_size·source_len, H]; lengths: device int32 [batch_size] or null.
  void forward(void* y, const void* x, const void* encoder_out, std::size_t batch_size,
               std::size_t target_len, std::size_t source_len, const std::int32_t* target_lengths,
               const std::int32_t* source_lengths, std::uint64_t seed, std::uint64_t base_offset,
               cudaStream_t stream);

  // dx, d_encoder_out and every parameter gradient (all written) from dy, for the last forward()
  // (same x and encoder_out pointers, contents unchanged). dx may alias dy.
  void backward(void* dx, void* d_encoder_out, const void* dy, const void* x, const void* encoder_out,
                cudaStream_t stream);

  // External K/V mode (options.external_kv): y = layer(x, K/V heads). kv_heads: [2,
  // batch_size, N, source_len, d] of config.dtype (K then V, bias included), e.g.
  // CrossAttentionKV::kv_heads(i); it must stay unchanged until backward_kv. Same other
  // arguments and checks as forward(); kv_heads must not overlap y or the layer's block.
  void forward_kv(void* y, const void* x, const void* kv_heads, std::size_t batch_size,
                  std::size_t target_len, std::size_t source_len, const std::int32_t* target_lengths,
                  const std::int32_t* source_lengths, std::uint64_t seed, std::uint64_t base_offset,
                  cudaStream_t stream);
  // External K/V mode: dx, every parameter gradient but the K/V projection's, and d_kv_heads
  // [2, B, N, S, d] (written: dK then dV) from dy, for the last forward_kv (same x and kv_heads).
  // d_kv_heads overlaps none of dx, dy, x, kv_heads or the layer's block. dx may alias dy.
  void backward_kv(void* dx, void* d_kv_heads, const void* dy, const void* x, const void* kv_heads,
                   cudaStream_t stream);

  // External K/V mode with the heads of a CrossAttentionKV (layers/cross_kv.h), its layer `layer`:
  // forward_kv above on kv.kv_heads(layer) with kv.batch_size() and kv.source_len(), so the shape
  // cannot disagree with the one the heads were formed for. kv must have this layer's hidden,
  // heads and dtype, and outlive the backward.
  void forward_kv(void* y, const void* x, const CrossAttentionKV& kv, int layer, std::size_t target_len,
                  const std::int32_t* target_lengths, const std::int32_t* source_lengths, std::uint64_t seed,
                  std::uint64_t base_offset, cudaStream_t stream);
  // backward_kv for that forward_kv: writes kv.d_kv_heads(layer) and marks it written
  // (kv.backward() requires every layer's mark). Refused for another object or layer than the
  // forward_kv's, and once kv has run forward() or backward() since (the heads read are gone).
  void backward_kv(void* dx, CrossAttentionKV& kv, int layer, const void* dy, const void* x,
                   cudaStream_t stream);

  const LayerConfig& config() const { return config_; }
  const MemoryManager& memory() const;
  std::size_t block_bytes() const;

 private:
  struct Impl;
  void run_forward(const char* where, void* y, const void* x, const void* kv_source, std::size_t batch_size,
                   std::size_t target_len, std::size_t source_len, const std::int32_t* target_lengths,
                   const std::int32_t* source_lengths, std::uint64_t seed, std::uint64_t base_offset,
                   cudaStream_t stream);
  void run_backward(const char* where, void* dx, void* d_kv_source, const void* dy, const void* x,
                    const void* kv_source, cudaStream_t stream);

  LayerConfig config_;
  DecoderLayerOptions options_;
  DecoderLayerWeights weights_;
  DecoderLayerGrads grads_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace seqbench::layers
