// EncoderLayer: LightSeq2's Transformer encoder layer (Wang et al. 2022, §IV-A, Fig. 3; LightSeq's
// LSTransformerEncoderLayer) on the GPU, forward and backward, composed from the fused kernels of
// kernels/ and the cuBLASLt GEMMs of layers/gemm.h, with every temporary in one planned block
// (layers/memory_planner.h). The math is exactly reference/transformer_layer.h's
// encoder_layer_forward / encoder_layer_backward:
//
//   pre-LN   x1 = x + dropout_h(attention(LN_attn(x)))
//            y  = x1 + dropout_h(fc2(dropout_a(act(fc1(LN_ffn(x1))))))
//   post-LN  x1 = LN_attn(x + dropout_h(attention(x)))
//            y  = LN_ffn(x1 + dropout_h(fc2(dropout_a(act(fc1(x1))))))
//
// Forward sequence (pre-LN; T = B·L token rows, N heads of d = H/N):
//   layernorm_fwd → QKV GEMM [T,H]·[3H,H]ᵀ (no bias) → qkv_bias_split (bias + split into
//   [3,B,N,L,d]) → scores = (1/√d)·Q·Kᵀ (strided-batched GEMM, B·N batches) → softmax (key-length
//   and optional causal mask, in place) → dropout on the probabilities (attn_dropout > 0) →
//   context = P·V (strided-batched GEMM) → merge heads → out-proj GEMM → bias_dropout_residual
//   (+ x) → layernorm_fwd → fc1 GEMM → bias_act_dropout → fc2 GEMM → bias_dropout_residual (+ x1).
// Post-LN moves each LayerNorm after its residual add (the GEMMs read x and x1 directly).
// The scale 1/√d is the scores GEMM's alpha (LightSeq's choice: the stored scores are already
// scaled, which keeps fp16 scores in range), so the softmax runs with scale 1 and the backward
// GEMMs dQ = dS·K, dK = dSᵀ·Q carry it as their alpha.
// Backward mirrors it: LayerNorm backward (post-LN first) → bias_dropout_residual_bwd (dbias) →
// dX and dW GEMMs → bias_act_dropout_bwd (dbias) → ... → split heads → dV = P_dropᵀ·dC and
// dP = dC·Vᵀ → dropout backward (mask redrawn) → softmax backward in place → dQ, dK → the QKV
// backward (merge, dbias) → dX and dW GEMMs → LayerNorm backward and the residual gradient add.
// Bias gradients come from the kernels' deterministic column reductions (no bgrad epilogue:
// whether cuBLASLt's beats them is for the layers suite to measure on a GPU).
//
// Dropout: one Philox stream per site under the caller's seed, offsets base+0 (attention
// probabilities [B·N·L, L]), base+1 (attention output [T, H]), base+2 (FFN activation [T, ffn]),
// base+3 (FFN output [T, H]), each indexed by the flat element index: exactly
// ref::encoder_layer_dropout_masks(seed) when base = 0. No mask is stored: every backward kernel
// redraws its mask from the same (seed, offset). A training loop advances base by
// kEncoderLayerDropoutOffsets per layer and step.
//
// Parameters: device pointers of config.dtype, views into the caller's one parameter buffer (as
// LightSeq2 keeps them), in nn.Linear layout [out, in]:
//   attn_ln_gamma, attn_ln_beta [H]; qkv_weight [3H, H] with rows 0..H-1 the query projection,
//   H..2H-1 the key projection, 2H..3H-1 the value projection (the row-wise concatenation of
//   reference MhaParams' q_proj, k_proj, v_proj: one fused QKV GEMM); qkv_bias [3H] likewise;
//   out_weight [H, H], out_bias [H]; ffn_ln_gamma, ffn_ln_beta [H]; fc1_weight [ffn, H],
//   fc1_bias [ffn]; fc2_weight [H, ffn], fc2_bias [H].
// Gradients have the same layout. backward() WRITES every parameter gradient (it does not
// accumulate: beta = 0 in the dW GEMMs, the bias and LayerNorm kernels overwrite); a caller that
// accumulates over micro-batches sums them itself.
//
// Memory: the layer's own dry run (encoder_layer_lifetimes) lists every op of the forward and
// backward in execution order with the tensors it reads and writes, at the largest shapes
// LayerConfig allows (max_batch_tokens tokens, and for the attention scores the largest B·L²
// with B·L <= max_batch_tokens and L <= max_seq_len), kernel workspaces included. The planner
// places them in one block, allocated once through the caller's DeviceAllocator at construction;
// forward() and backward() allocate nothing. Each op announces its step to the MemoryManager
// (checking mode), so a tensor used outside its planned lifetime throws instead of corrupting a
// neighbour. A batch above the planned maxima is refused by LayerConfig::check_batch with both
// numbers in the message. By default (EncoderLayerOptions::recompute = Recompute::pointwise,
// layers/layer_run.h) the forward does not keep the dropped probabilities or the FFN activation
// output: the backward redraws them bitwise, so the results are those of Recompute::none, which
// keeps them as LightSeq2 does.
//
// Limits and contract: config.validate(); every parameter and gradient pointer non-null; x, y
// [T, H] non-null with y not overlapping x; key_lengths null (no padding) or device int32 [B]
// (values outside [0, L] are clamped by the softmax); backward() needs the last forward()'s x,
// unchanged, and runs with that forward's batch shape and dropout stream. No gradient view shares
// a byte with another view; y and dx overlap no view, x, dy and key_lengths no gradient
// (layers/parameter_ranges.h). Every check happens before any CUDA call. Not thread-safe; one stream at a
// time.
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

// The dropout offsets one forward uses (base + 0 .. base + 3).
inline constexpr std::uint64_t kEncoderLayerDropoutOffsets = 4;

// The parameter (P = const void*) or gradient (P = void*) views of one encoder layer.
template <class P>
struct EncoderLayerTensors {
  P attn_ln_gamma{}, attn_ln_beta{};  // [H]
  P qkv_weight{}, qkv_bias{};         // [3H, H], [3H]: query, key, value rows
  P out_weight{}, out_bias{};         // [H, H], [H]
  P ffn_ln_gamma{}, ffn_ln_beta{};    // [H]
  P fc1_weight{}, fc1_bias{};         // [ffn, H], [ffn]
  P fc2_weight{}, fc2_bias{};         // [H, ffn], [H]
};
using EncoderLayerWeights = EncoderLayerTensors<const void*>;
using EncoderLayerGrads = EncoderLayerTensors<void*>;

// Calls fn(name, pointer_ref) for each of the twelve tensors, in the order of the struct.
template <class Tensors, class Fn>
void for_each_encoder_tensor(Tensors& t, Fn&& fn) {
  fn("attn_ln_gamma", t.attn_ln_gamma);
  fn("attn_ln_beta", t.attn_ln_beta);
  fn("qkv_weight", t.qkv_weight);
  fn("qkv_bias", t.qkv_bias);
  fn("out_weight", t.out_weight);
  fn("out_bias", t.out_bias);
  fn("ffn_ln_gamma", t.ffn_ln_gamma);
  fn("ffn_ln_beta", t.ffn_ln_beta);
  fn("fc1_weight", t.fc1_weight);
  fn("fc1_bias", t.fc1_bias);
  fn("fc2_weight", t.fc2_weight);
  fn("fc2_bias", t.fc2_bias);
}

// The shape of each tensor, in the order of for_each_encoder_tensor (rows = 1 for vectors).
using EncoderTensorShape = ParameterShape;
std::vector<EncoderTensorShape> encoder_layer_parameter_shapes(const LayerConfig& config);
// Adds the views' byte ranges to `ranges` (layers/parameter_ranges.h), names led by `label`
// ("layer 2 "). The encoder layers and stacks check their arguments against them.
void add_encoder_parameter_ranges(ParameterRanges& ranges, const LayerConfig& config,
                                  const EncoderLayerWeights& weights, const EncoderLayerGrads& grads,
                                  const std::string& label = "");

struct EncoderLayerOptions {
  bool causal = false;           // mask future keys (a GPT-2 block, LightSeq's mask_future_tokens)
  std::string prefix = "enc0.";  // the planned tensors' names: "<prefix>attn.probs", ...
  // GEMMs: a caller's Gemm (shared between layers, not owned), or null for one the layer makes
  // at its first forward/backward with a workspace of gemm_workspace_bytes planned in its block.
  Gemm* gemm = nullptr;
  std::size_t gemm_workspace_bytes = kGemmWorkspaceBytes;
  // What the forward keeps for the backward (layers/layer_run.h); the results are bitwise the
  // same either way.
  Recompute recompute = Recompute::pointwise;
  // Whether backward() leaves what the forward kept intact, so that backward() may run again on
  // the same forward (PyTorch's retain_graph): those tensors then stay live to the end of the
  // backward (planned_lifetimes, layers/layer_run.h), which costs their bytes in the block. By
  // default a backward consumes its forward (its temporaries reuse those bytes) and a second
  // backward() without a new forward() is refused. The layer suite's backward timing, which
  // repeats a backward on one forward, sets it.
  bool retain_forward = false;
};

// The layer's dry run: its ops in execution order (forward, then backward) and every temporary's
// lifetime at the config's maximum shapes; externals "x", "y", "dy", "dx". Host only; validates
// the config. `forward_ops` (if not null) receives the number of forward steps.
std::vector<TensorLifetime> encoder_layer_lifetimes(const LayerConfig& config,
                                                    const EncoderLayerOptions& options = {},
                                                    std::vector<std::string>* ops = nullptr,
                                                    int* forward_ops = nullptr);

// The largest B·L² with B·L <= max_batch_tokens and 1 <= L <= max_seq_len: the attention
// scores' planned rows·cols per head (max_score_elements of layers/layer_run.h).
std::size_t encoder_layer_max_score_elements(const LayerConfig& config);

class EncoderLayer {
 public:
  // Validates config, weights, grads and options (throwing seqbench::Error naming the field
  // before any CUDA call), plans the temporaries and allocates the one block through `allocator`
  // (which must outlive the layer).
  EncoderLayer(const LayerConfig& config, const EncoderLayerWeights& weights, const EncoderLayerGrads& grads,
               DeviceAllocator& allocator, EncoderLayerOptions options = {});
  ~EncoderLayer();
  EncoderLayer(const EncoderLayer&) = delete;
  EncoderLayer& operator=(const EncoderLayer&) = delete;

  // y = layer(x). x, y: device [batch_size·seq_len, H] of config.dtype, rows b·L + l.
  // key_lengths: device int32 [batch_size], the valid (unpadded) keys of each sentence, or null.
  void forward(void* y, const void* x, std::size_t batch_size, std::size_t seq_len,
               const std::int32_t* key_lengths, std::uint64_t seed, std::uint64_t base_offset,
               cudaStream_t stream);

  // dx = ∂loss/∂x and every parameter gradient (written, see above) from dy = ∂loss/∂y, for the
  // last forward() (same x pointer, contents unchanged). dx may alias dy.
  void backward(void* dx, const void* dy, const void* x, cudaStream_t stream);

  const LayerConfig& config() const { return config_; }
  const MemoryManager& memory() const;
  std::size_t block_bytes() const;

 private:
  struct Impl;

  LayerConfig config_;
  EncoderLayerOptions options_;
  EncoderLayerWeights weights_;
  EncoderLayerGrads grads_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace seqbench::layers
