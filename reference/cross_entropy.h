// Label-smoothed cross-entropy fused with log-softmax (Szegedy et al. 2016 §7), over logits [N, V].
//
// With q = softmax(logits[r]), t = targets[r], nll = -log q_t and smooth = Σ_j -log q_j, the loss of
// a row is -Σ_j p_j log q_j for a smoothed target distribution p, in one of two conventions:
//   paper   (Szegedy et al.; the LightSeq2 paper): p = (1-α)·onehot(t) + α/V
//           loss = (1-α)·nll + (α/V)·smooth
//   fairseq (label_smoothed_cross_entropy, and LightSeq's kernels): p_t = 1-ε, p_j = ε/(V-1) (j≠t)
//           loss = (1-ε-ε/(V-1))·nll + (ε/(V-1))·smooth
// Both p sum to 1, so dloss/dlogits = q - p in both:
//   paper:   q_t - α/V - 1 + α at the target, q_j - α/V elsewhere
//   fairseq: q_t - (1-ε) at the target,       q_j - ε/(V-1) elsewhere
// The conventions coincide when α = ε·V/(V-1); for the same ε they differ.
// Rows whose target equals ignore_index (padding) give zero loss, zero nll and zero gradient.
// A -inf logit has probability 0: the loss is finite without smoothing (0·log 0 = 0) and +inf with
// it; nll and the gradient stay finite (see kernels/cross_entropy.h).
#pragma once

#include <cstdint>
#include <optional>

#include "reference/tensor.h"

namespace seqbench::ref {

enum class SmoothingConvention { paper, fairseq };

const char* smoothing_convention_name(SmoothingConvention convention);

struct CrossEntropyConfig {
  double smoothing = 0.0;  // α or ε, in [0, 1]
  SmoothingConvention convention = SmoothingConvention::fairseq;
  std::optional<std::int32_t> ignore_index;  // none: every row counts
};

struct CrossEntropyForward {
  Vector loss;  // [N] per-row smoothed loss (0 on ignored rows)
  Vector nll;   // [N] per-row -log q_t (0 on ignored rows), what fairseq logs as nll_loss
  double loss_sum = 0.0;
  double nll_sum = 0.0;
};

// logits: [N, V] with V >= 1 (V >= 2 for the fairseq convention with ε > 0); targets: [N], each in
// [0, V) unless it equals ignore_index.
CrossEntropyForward cross_entropy_forward(const Matrix& logits, const TargetVector& targets,
                                          const CrossEntropyConfig& config);

// dlogits[r] = grad_loss[r] · (q - p) for counted rows, 0 for ignored rows; grad_loss: [N] is the
// upstream gradient of each row's loss.
Matrix cross_entropy_backward(const Matrix& logits, const TargetVector& targets,
                              const CrossEntropyConfig& config, const Vector& grad_loss);

// The usual case, loss_sum as the objective: dlogits = grad_loss_sum · (q - p) per counted row.
Matrix cross_entropy_backward(const Matrix& logits, const TargetVector& targets,
                              const CrossEntropyConfig& config, double grad_loss_sum);

}  // namespace seqbench::ref
