// BaselineDecoderLayer: the eager-like baseline of DecoderLayer (LightSeq2 §V-C, Fig. 19: "the same
// layer in PyTorch"), as BaselineEncoderLayer is EncoderLayer's. The math is DecoderLayer's exactly
// (layers/decoder_layer.h, reference/transformer_layer.h's decoder_layer_forward/backward): causal
// self-attention over the target (key padding by target_lengths), cross-attention over the
// encoder output with the layer's own Q-only and K/V projections (key padding by
// source_lengths), FFN; pre- or post-LN; relu/gelu/gelu_tanh. Same parameter views
// (DecoderLayerWeights/Grads), the same dropout streams (seed; offsets base+0 self-attention
// probabilities [B·N·L, L], base+1 self-attention output, base+2 cross-attention probabilities
// [B·N·L, S], base+3 cross-attention output, base+4 FFN activation, base+5 FFN output; flat element
// index), the same 1/√d as the scores GEMMs' alpha, so that both layers match the reference and
// each other up to rounding. What differs is how it runs, the way PyTorch eager runs fairseq's
// TransformerDecoderLayer (layers/baseline_sublayers.h, shared with BaselineEncoderLayer):
//
//   - One op per kernel: the kernels' unfused baselines; nn.Linear is a plain GEMM and a
//     separate launch_bias_add; head split/merge are launch_strided_copy; LayerNorm and softmax
//     the decomposed launch_*_unfused; dropout launch_dropout_mask_u8 + launch_dropout_apply_u8
//     with the uint8 mask stored and applied again in backward; residual adds, column sums for
//     bias gradients, launch_activation_fwd/bwd. A dropout of p = 0 is skipped.
//   - Every tensor is allocated through the caller's DeviceAllocator (a CachingAllocator in
//     practice) when produced and freed when autograd would free it; kernel workspaces are
//     temporaries of their op. The GEMM workspace (kGemmWorkspaceBytes) is allocated once, at
//     construction, through the same allocator.
//
// Op sequence, pre-LN: self-attention as BaselineEncoderLayer's attention (qkv GEMM, 3 split
// copies, causal softmax, ...); cross-attention: ln → q GEMM → bias_add → 1 split copy; kv GEMM on
// encoder_out [B·S, 2H] → bias_add → 2 split copies → scores GEMM [L, S] per head → softmax →
// [dropout] → context GEMM → merge copy → out GEMM → bias_add → [dropout] → residual_add; then the
// FFN as the encoder's. The backward runs FFN, cross-attention (its K/V projection's dX written
// into d_encoder_out, then its Q projection's), self-attention.
//
// Limits and contract as DecoderLayer's (config.validate(), non-null parameters, B·L and B·S within
// the config's maxima through check_batch, x, encoder_out, y non-null and y overlapping neither;
// target_lengths / source_lengths null or device int32 [B]; backward needs the last forward's x and
// encoder_out, unchanged; dx, dy, d_encoder_out non-null, d_encoder_out overlapping none of dx, dy,
// x, encoder_out; dx may alias dy; the parameter-view overlap rules). backward(..., retain_graph = false)
// frees what it read, as autograd does; a second backward then needs a new forward. retain_graph = true keeps
// the saved tensors (PyTorch's retain_graph=True), so a benchmark can time repeated backwards of one forward.
// A new forward frees the previous forward's saved tensors first. One stream; not thread-safe. No external
// K/V mode (the layer-batched CrossAttentionKV has no eager baseline).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>

#include "layers/config.h"
#include "layers/decoder_layer.h"
#include "layers/device_allocator.h"
#include "layers/gemm.h"

namespace seqbench::layers {

struct BaselineDecoderLayerOptions {
  std::size_t gemm_workspace_bytes = kGemmWorkspaceBytes;
};

class BaselineDecoderLayer {
 public:
  // Validates config, weights and grads (throwing seqbench::Error naming the field before any
  // CUDA call) and allocates the GEMM workspace through `allocator` (which must outlive the layer).
  BaselineDecoderLayer(const LayerConfig& config, const DecoderLayerWeights& weights,
                       const DecoderLayerGrads& grads, DeviceAllocator& allocator,
                       BaselineDecoderLayerOptions options = {});
  ~BaselineDecoderLayer();
  BaselineDecoderLayer(const BaselineDecoderLayer&) = delete;
  BaselineDecoderLayer& operator=(const BaselineDecoderLayer&) = delete;

  // As DecoderLayer::forward: x, y [batch_size·target_len, H]; encoder_out
  // [batch_size·source_len, H]; lengths device int32 [batch_size] or null.
  void forward(void* y, const void* x, const void* encoder_out, std::size_t batch_size,
               std::size_t target_len, std::size_t source_len, const std::int32_t* target_lengths,
               const std::int32_t* source_lengths, std::uint64_t seed, std::uint64_t base_offset,
               cudaStream_t stream);

  // As DecoderLayer::backward (dx, d_encoder_out and every parameter gradient written; dx may
  // alias dy), then frees the saved tensors unless retain_graph.
  void backward(void* dx, void* d_encoder_out, const void* dy, const void* x, const void* encoder_out,
                cudaStream_t stream, bool retain_graph = false);

  // Frees the saved tensors (the graph is dropped); backward then needs a new forward.
  void release();

  // Bytes of the tensors held for the backward now (0 after release or a non-retaining backward).
  std::size_t saved_bytes() const;

  const LayerConfig& config() const { return config_; }

 private:
  struct Impl;

  LayerConfig config_;
  BaselineDecoderLayerOptions options_;
  DecoderLayerWeights weights_;
  DecoderLayerGrads grads_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace seqbench::layers
