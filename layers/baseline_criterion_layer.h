// BaselineCriterionLayer: the eager-like baseline of CriterionLayer (LightSeq2 Fig. 19's criterion:
// "the same layer in PyTorch"): fairseq's label_smoothed_cross_entropy on log_softmax, run the way
// PyTorch eager runs it. The math is CriterionLayer's exactly (layers/criterion_layer.h,
// reference/cross_entropy.h; same config, conventions, ignore_index); the ops are
// kernels/cross_entropy.h's unfused baseline, one op per kernel, every intermediate a T tensor:
//
//   forward   log_softmax (logp [N, V] in T, saved for the backward) → NLL + smoothing sum
//             (loss, nll [N] fp32) → the totals kernel (loss_sum, nll_sum, tokens, invalid_targets:
//             eager's .sum() and the token count), in launch_cross_entropy_forward_unfused.
//   backward  launch_cross_entropy_backward_unfused (the five launches of autograd from the saved
//             logp: the [N] branch factors, zeros + scatter_add_ of gather's backward, the
//             out-of-place accumulation, log_softmax_backward_data). With a host scalar
//             grad_loss_sum, autograd's ones_like(loss_sum) fill and SumBackward's expand are one
//             launch that materializes the upstream gradient [N] fp32 (launch_scale<float> of a
//             ones buffer: exactly grad_loss_sum per row) before the same five launches.
//
// Memory: every tensor is an EagerTensor (layers/eager_tensor.h) allocated through the caller's
// DeviceAllocator (in practice a CachingAllocator) when produced: forward() allocates loss, nll,
// totals and logp (kept: the outputs until the next forward, logp for the backward); backward()
// allocates its workspace (dlogp, c_t, c_o) and, for the scalar form, the [N] upstream gradient as
// temporaries, and frees logp unless retain_graph. The ones buffer [max_batch_tokens] fp32 (the
// scalar's stand-in) is allocated and uploaded once, at the first forward.
//
// Outputs: as CriterionLayer's, except lse = nullptr (eager's log_softmax keeps logp, not lse),
// and an ignored row with non-finite logits: CriterionLayer never reads it (zero gradient row);
// eager log_softmax does, and its backward gives that row NaN (as PyTorch's). Loss and totals
// agree either way.
// Limits and contract as CriterionLayer's (config.validate(); 1 <= rows <= max_batch_tokens,
// 1 <= vocab <= 2^30, V >= 2 for "fairseq" with ε > 0; logits, targets, dlogits non-null and
// element-aligned; dlogits not overlapping logits; backward() needs the last forward()'s logits and
// targets pointers, contents unchanged, and its graph: backward(..., retain_graph = false) frees
// logp, as autograd does; retain_graph = true keeps it so that a benchmark can time repeated
// backwards). Every check happens before any CUDA call. One stream; not thread-safe.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>

#include "kernels/cross_entropy.h"
#include "layers/criterion_layer.h"
#include "layers/device_allocator.h"

namespace seqbench::layers {

class BaselineCriterionLayer {
 public:
  // Validates the config (throwing seqbench::Error before any CUDA call). Allocates nothing.
  BaselineCriterionLayer(const CriterionLayerConfig& config, DeviceAllocator& allocator);
  ~BaselineCriterionLayer();
  BaselineCriterionLayer(const BaselineCriterionLayer&) = delete;
  BaselineCriterionLayer& operator=(const BaselineCriterionLayer&) = delete;

  // As CriterionLayer::forward (outputs.lse is null). The outputs stay valid until the next
  // forward() or the layer's destruction.
  CriterionOutputs forward(const void* logits, const std::int32_t* targets, std::int64_t rows,
                           std::int64_t vocab, cudaStream_t stream);

  // As CriterionLayer::backward (both forms), then frees logp unless retain_graph.
  void backward(void* dlogits, const void* logits, const std::int32_t* targets, float grad_loss_sum,
                cudaStream_t stream, bool retain_graph = false);
  void backward(void* dlogits, const void* logits, const std::int32_t* targets, const float* grad_loss,
                cudaStream_t stream, bool retain_graph = false);

  // Frees the saved logp (the outputs stay); backward then needs a new forward.
  void release();
  // Bytes held for the backward now (logp).
  std::size_t saved_bytes() const;

  const CriterionLayerConfig& config() const { return config_; }

 private:
  struct Impl;
  void check_backward(const void* dlogits, const void* logits, const std::int32_t* targets) const;
  void run_backward(void* dlogits, const float* grad_loss, cudaStream_t stream, bool retain_graph);

  CriterionLayerConfig config_;
  kernels::CrossEntropyConfig kernel_config_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace seqbench::layers
