// BaselineEncoderLayer: the eager-like baseline of EncoderLayer (LightSeq2 §V-C, Fig. 19 and
// Fig. 20: "the same layer in PyTorch"). The math is EncoderLayer's exactly (layers/encoder_layer.h,
// reference/transformer_layer.h), with the same parameter views (EncoderLayerWeights/Grads), the
// same dropout streams (seed; offsets base+0 probabilities, base+1 attention output, base+2 FFN
// activation, base+3 FFN output, flat element index), the same 1/√d as the scores GEMM's alpha and
// the same key-length and causal masks, so that both layers match the reference and each other
// up to rounding. What differs is how it runs, the way PyTorch eager runs
// fairseq's TransformerEncoderLayer:
//
//   - One op per kernel: the kernels' unfused baselines (kernels/*.h) in place of the fused ones.
//     nn.Linear is a plain GEMM (layers/gemm.h, no epilogue) and a separate launch_bias_add;
//     the head split is one launch_strided_copy per projection (kernels::heads_strided_copy), the
//     merge one more; LayerNorm and softmax are the decomposed launch_*_unfused; dropout is
//     launch_dropout_mask_u8 + launch_dropout_apply_u8 (the uint8 mask is stored, as eager
//     stores it, and applied again in backward); residual adds are launch_residual_add; bias
//     gradients are launch_column_sum; the activation is launch_activation_fwd/bwd. A dropout of
//     p = 0 is skipped (ATen's dropout returns its input for p = 0), as the fused layer skips it.
//   - Every tensor is allocated through the caller's DeviceAllocator when it is produced (in
//     practice a CachingAllocator, layers/caching_allocator.h) and freed when autograd would free
//     it: a forward intermediate that no backward formula reads is freed as soon as its consumer
//     has run; the tensors the backward reads (LayerNorm inputs or outputs and statistics, Q, K,
//     V, the probabilities and their dropout output, the masks, the activation input, the GEMM
//     inputs) are kept until the backward step that last reads them. Kernel workspaces are
//     temporaries of the op that uses them.
//   - The GEMM workspace (cuBLAS's, kGemmWorkspaceBytes) is allocated once, at construction,
//     through the same allocator (PyTorch allocates cuBLAS's workspace through its caching
//     allocator, once per handle).
//
// The attention and FFN sub-layers are the eager sub-layers shared with BaselineDecoderLayer
// (layers/baseline_sublayers.h).
//
// Op sequence, pre-LN (post-LN moves each LayerNorm after its residual add and keeps the
// residual sum for its backward instead of the LayerNorm input):
//   forward   ln(4 kernels) → qkv GEMM → bias_add → 3 strided copies (Q, K, V heads) → scores
//             GEMM (alpha 1/√d) → softmax(≤5) → [mask_u8 → apply_u8] → context GEMM → merge copy →
//             out GEMM → bias_add → [mask_u8 → apply_u8] → residual_add → ln → fc1 GEMM → bias_add
//             → activation → [mask_u8 → apply_u8] → fc2 GEMM → bias_add → [mask_u8 → apply_u8] →
//             residual_add
//   backward  apply_u8 → column_sum → fc2 dX, dW GEMMs → apply_u8 → activation_bwd → column_sum →
//             fc1 dX, dW → ln_bwd(7) → residual_add → apply_u8 → column_sum → out dX, dW → split
//             copy → dV, dP GEMMs → apply_u8 → softmax_bwd(4) → dQ, dK GEMMs → 3 merge copies →
//             column_sum → qkv dX, dW → ln_bwd → residual_add
//
// Limits and contract as EncoderLayer's (config.validate(), non-null parameters, the batch within
// config's maxima through check_batch, y not overlapping x, the parameter-view overlap rules,
// backward after a forward on the same x). backward(..., retain_graph = false) frees what it read, as
// autograd does; a second backward then needs a new forward. retain_graph = true keeps the saved tensors
// (PyTorch's retain_graph=True), so a benchmark can time repeated backwards of one forward. A new forward
// frees the previous forward's saved tensors first. One stream: the caching allocator reuses a
// freed block for later work, which is safe in one stream's order. Not thread-safe.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>

#include "layers/config.h"
#include "layers/device_allocator.h"
#include "layers/encoder_layer.h"
#include "layers/gemm.h"

namespace seqbench::layers {

struct BaselineEncoderLayerOptions {
  bool causal = false;
  std::size_t gemm_workspace_bytes = kGemmWorkspaceBytes;
  // A caller's Gemm (not owned; shared by a stack's layers), or null for the layer's own, with a
  // workspace of gemm_workspace_bytes allocated through the layer's allocator.
  Gemm* gemm = nullptr;
};

class BaselineEncoderLayer {
 public:
  // Validates config, weights and grads (throwing seqbench::Error naming the field before any
  // CUDA call) and, without options.gemm, allocates the GEMM workspace through `allocator` (which
  // must outlive the layer).
  BaselineEncoderLayer(const LayerConfig& config, const EncoderLayerWeights& weights,
                       const EncoderLayerGrads& grads, DeviceAllocator& allocator,
                       BaselineEncoderLayerOptions options = {});
  ~BaselineEncoderLayer();
  BaselineEncoderLayer(const BaselineEncoderLayer&) = delete;
  BaselineEncoderLayer& operator=(const BaselineEncoderLayer&) = delete;

  // As EncoderLayer::forward.
  void forward(void* y, const void* x, std::size_t batch_size, std::size_t seq_len,
               const std::int32_t* key_lengths, std::uint64_t seed, std::uint64_t base_offset,
               cudaStream_t stream);

  // As EncoderLayer::backward (dx may alias dy; every parameter gradient written), then frees the
  // saved tensors unless retain_graph.
  void backward(void* dx, const void* dy, const void* x, cudaStream_t stream, bool retain_graph = false);

  // Frees the saved tensors (the graph is dropped); backward then needs a new forward.
  void release();

  // Bytes of the tensors held for the backward now (0 after release or a non-retaining backward).
  std::size_t saved_bytes() const;

  const LayerConfig& config() const { return config_; }

 private:
  struct Impl;

  LayerConfig config_;
  BaselineEncoderLayerOptions options_;
  EncoderLayerWeights weights_;
  EncoderLayerGrads grads_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace seqbench::layers
