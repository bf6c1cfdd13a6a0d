// CriterionLayer: LightSeq2's criterion (LightSeq's LSCrossEntropyLayer: max_batch_tokens,
// padding_idx, epsilon, fp16) on the GPU: label-smoothed cross-entropy fused with log-softmax,
// forward and backward, over kernels/cross_entropy.h. The math is exactly reference/cross_entropy.h:
// per row r of logits [N, V] with target t, q = softmax(logits[r]),
//   nll[r] = -log q_t,   loss[r] = -Σ_j p_j log q_j,   dlogits[r] = g_r·(q - p)
// for the smoothed target distribution p of the configured convention, selected by name:
//   "fairseq" (the default, as LightSeq and fairseq's label_smoothed_cross_entropy): p_t = 1 - ε,
//             p_j = ε/(V-1);
//   "paper"   (Szegedy et al., the LightSeq2 paper): p = (1-ε)·onehot(t) + ε/V.
// Rows whose target is padding_idx give zero loss, nll and gradient (ignore_index).
//
// Forward: launch_cross_entropy_forward (one pass over the logits) writes the per-row loss, nll and
// lse (the backward's input) into the layer's planned storage, and the totals kernel the fixed-order
// device sums (loss_sum, nll_sum, tokens = counted rows, invalid_targets): no host synchronization,
// deterministic. The caller reads them from the device pointers forward() returns (valid until the
// next forward()).
// Backward: dlogits = grad·(q - p) per row, with grad either a host float for the objective
// loss_sum (launch_cross_entropy_backward_scalar; 1/tokens for the mean, which the caller knows
// after reading the totals) or a device fp32 [N] upstream gradient per row
// (launch_cross_entropy_backward).
//
// Memory: loss, nll, lse [max_batch_tokens] fp32 and the totals struct are planned tensors of one
// block (MemoryManager), allocated once through the caller's DeviceAllocator at construction;
// forward() and backward() allocate nothing. The sizes do not depend on V (which each call passes:
// LightSeq's layer also reads it from the logits' shape).
//
// Limits and contract: config.validate() (max_batch_tokens positive; epsilon finite in [0, 1];
// convention "paper" or "fairseq"; dtype f32, f16 or bf16); per call 1 <= rows <= max_batch_tokens
// (the rows are B·L padded tokens; both numbers in the message) and 1 <= vocab <= 2^30 (V >= 2 for
// "fairseq" with ε > 0); logits [N, V] of config.dtype and targets int32 [N] non-null, aligned to
// their element, outside the planned block; dlogits likewise and overlapping neither logits nor
// targets. backward() needs the last forward()'s logits and targets (the same pointers, contents
// unchanged). Targets outside [0, V) that are not padding_idx turn their row into NaNs and are
// counted in totals.invalid_targets (kernels/cross_entropy.h). Every check happens before any CUDA
// call. Not thread-safe; one stream at a time.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "kernels/cross_entropy.h"
#include "layers/device_allocator.h"
#include "layers/memory_planner.h"

namespace seqbench::layers {

struct CriterionLayerConfig {
  int max_batch_tokens = 0;                 // rows (B·L padded tokens) per call, at most
  std::optional<std::int32_t> padding_idx;  // targets equal to it are ignored; none: every row counts
  double epsilon = 0.0;                     // label smoothing ε (α for "paper"), in [0, 1]
  std::string convention = "fairseq";       // "fairseq" or "paper" (kernels::parse_cross_entropy_smoothing)
  DType dtype = DType::f16;                 // of logits and dlogits; loss, nll, lse and totals are fp32

  // Throws one seqbench::Error naming every field that breaks a rule.
  void validate() const;
  // The kernels' config (validates the convention's name).
  kernels::CrossEntropyConfig kernel_config() const;
};

// The device outputs of one forward: pointers into the layer's block, valid until the next forward.
struct CriterionOutputs {
  const float* loss = nullptr;  // [rows]
  const float* nll = nullptr;   // [rows]
  const float* lse = nullptr;   // [rows], 0 on ignored rows
  const kernels::CrossEntropyTotals* totals =
      nullptr;  // one struct: loss_sum, nll_sum, tokens, invalid_targets
  std::int64_t rows = 0;
};

// The planned tensors ("<prefix>loss", "<prefix>nll", "<prefix>lse", "<prefix>totals") at the
// maxima, with their lifetimes (forward writes all four; backward reads lse). Host only.
std::vector<TensorLifetime> criterion_layer_lifetimes(const CriterionLayerConfig& config,
                                                      const std::string& prefix = "criterion.");

// The argument checks CriterionLayer and BaselineCriterionLayer share, so that both refuse exactly
// the same inputs with the same messages (`layer`, the class's name, leads each message). Host
// only: each throws seqbench::Error before any CUDA call.
//
// A pointer non-null ("<layer>::<where>: <what> is null") and aligned to its element.
void require_criterion_pointer(const char* layer, const void* p, std::size_t alignment, const char* where,
                               const char* what);
// forward's: rows in [1, config.max_batch_tokens], vocab in [1, kCrossEntropyMaxVocab] and within
// the convention's limits (kernel_config), logits and targets non-null and aligned.
void require_criterion_forward(const char* layer, const CriterionLayerConfig& config,
                               const kernels::CrossEntropyConfig& kernel_config, const void* logits,
                               const std::int32_t* targets, std::int64_t rows, std::int64_t vocab);

class CriterionLayer {
 public:
  // Validates the config (throwing seqbench::Error before any CUDA call), plans the storage and
  // allocates the one block through `allocator` (which must outlive the layer).
  CriterionLayer(const CriterionLayerConfig& config, DeviceAllocator& allocator,
                 std::string prefix = "criterion.");
  ~CriterionLayer();
  CriterionLayer(const CriterionLayer&) = delete;
  CriterionLayer& operator=(const CriterionLayer&) = delete;

  // logits: device [rows, vocab] of config.dtype; targets: device int32 [rows].
  CriterionOutputs forward(const void* logits, const std::int32_t* targets, std::int64_t rows,
                           std::int64_t vocab, cudaStream_t stream);

  // dlogits [rows, vocab] = grad_loss_sum·(q - p): the gradient of grad_loss_sum·loss_sum (a host
  // float, finite; e.g. 1/tokens for the mean over counted tokens).
  void backward(void* dlogits, const void* logits, const std::int32_t* targets, float grad_loss_sum,
                cudaStream_t stream);
  // dlogits[r] = grad_loss[r]·(q - p): grad_loss device fp32 [rows], the upstream gradient of loss[r].
  void backward(void* dlogits, const void* logits, const std::int32_t* targets, const float* grad_loss,
                cudaStream_t stream);

  const CriterionLayerConfig& config() const { return config_; }
  const MemoryManager& memory() const;
  std::size_t block_bytes() const;

 private:
  struct Impl;
  void check_backward(const void* dlogits, const void* logits, const std::int32_t* targets) const;

  CriterionLayerConfig config_;
  kernels::CrossEntropyConfig kernel_config_;
  std::string prefix_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace seqbench::layers
