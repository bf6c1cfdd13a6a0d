#include "reference/cross_entropy.h"

#include <cmath>

#include "core/error.h"
#include "reference/softmax.h"

namespace seqbench::ref {

namespace {
// The smoothed target distribution p of one row: `target_weight` at the target and `other_weight`
// elsewhere (both conventions have this form).
struct SmoothedTarget {
  double target_weight;
  double other_weight;
};

SmoothedTarget smoothed_target(const CrossEntropyConfig& config, Index vocab) {
  const double s = config.smoothing;
  const auto v = static_cast<double>(vocab);
  switch (config.convention) {
    case SmoothingConvention::paper:
      return {1.0 - s + s / v, s / v};
    case SmoothingConvention::fairseq:
      // V = 1 with ε = 0 is legal (nothing to spread); ε > 0 needs V >= 2, checked in require_args.
      return {1.0 - s, vocab > 1 ? s / (v - 1.0) : 0.0};
  }
  SEQBENCH_FAIL("unknown smoothing convention " << static_cast<int>(config.convention));
}

bool ignored(const CrossEntropyConfig& config, std::int32_t target) {
  return config.ignore_index.has_value() && target == *config.ignore_index;
}

void require_args(const Matrix& logits, const TargetVector& targets, const CrossEntropyConfig& config,
                  const char* what) {
  SEQBENCH_REQUIRE(logits.cols() >= 1, what << ": vocabulary size " << logits.cols() << " must be >= 1");
  SEQBENCH_REQUIRE(targets.size() == logits.rows(),
                   what << ": " << targets.size() << " targets for " << logits.rows() << " logits rows");
  SEQBENCH_REQUIRE(config.smoothing >= 0.0 && config.smoothing <= 1.0,
                   what << ": smoothing " << config.smoothing << " outside [0, 1]");
  SEQBENCH_REQUIRE(
      config.convention != SmoothingConvention::fairseq || config.smoothing == 0.0 || logits.cols() >= 2,
      what << ": fairseq smoothing spreads ε over V-1 classes, needs vocabulary >= 2, got " << logits.cols());
  for (Index r = 0; r < targets.size(); ++r) {
    if (ignored(config, targets[r])) continue;
    SEQBENCH_REQUIRE(targets[r] >= 0 && targets[r] < logits.cols(),
                     what << ": target " << targets[r] << " of row " << r << " outside [0, vocab "
                          << logits.cols() << ")");
  }
}
}  // namespace

const char* smoothing_convention_name(SmoothingConvention convention) {
  switch (convention) {
    case SmoothingConvention::paper:
      return "paper";
    case SmoothingConvention::fairseq:
      return "fairseq";
  }
  return "?";
}

CrossEntropyForward cross_entropy_forward(const Matrix& logits, const TargetVector& targets,
                                          const CrossEntropyConfig& config) {
  require_args(logits, targets, config, "cross_entropy_forward");
  const SmoothedTarget p = smoothed_target(config, logits.cols());
  const Matrix log_q = log_softmax(logits);
  CrossEntropyForward out;
  out.loss = Vector::Zero(logits.rows());
  out.nll = Vector::Zero(logits.rows());
  for (Index r = 0; r < logits.rows(); ++r) {
    if (ignored(config, targets[r])) continue;
    const double nll = -log_q(r, targets[r]);
    const double smooth = -log_q.row(r).sum();
    // -Σ p_j log q_j split as (p_t - p_other)·nll + p_other·smooth, the fairseq form. A -inf
    // logit makes smooth infinite; without smoothing (p_other = 0) its term is 0 · log 0 = 0,
    // the limit of p log q, not 0 · inf = NaN.
    out.nll[r] = nll;
    const double smooth_term = p.other_weight == 0.0 ? 0.0 : p.other_weight * smooth;
    // Likewise with equal weights (a uniform target: paper α = 1, fairseq ε = (V-1)/V) and a -inf
    // target logit: the loss is the smooth term's +inf, not 0 · inf + inf = NaN.
    const double target_coefficient = p.target_weight - p.other_weight;
    const double nll_term = target_coefficient == 0.0 ? 0.0 : target_coefficient * nll;
    out.loss[r] = nll_term + smooth_term;
  }
  out.loss_sum = out.loss.sum();
  out.nll_sum = out.nll.sum();
  return out;
}

Matrix cross_entropy_backward(const Matrix& logits, const TargetVector& targets,
                              const CrossEntropyConfig& config, const Vector& grad_loss) {
  require_args(logits, targets, config, "cross_entropy_backward");
  SEQBENCH_REQUIRE(grad_loss.size() == logits.rows(), "cross_entropy_backward: grad_loss has "
                                                          << grad_loss.size() << " entries for "
                                                          << logits.rows() << " rows");
  const SmoothedTarget p = smoothed_target(config, logits.cols());
  // std::exp, not Eigen's vectorized .exp(), which clamps and gives ~5.6e-309 for -inf (and any
  // log-probability below about -708) where q is 0 (reference/softmax.cpp says the same).
  const Matrix q = log_softmax(logits).unaryExpr([](double t) { return std::exp(t); });
  Matrix dlogits = Matrix::Zero(logits.rows(), logits.cols());
  for (Index r = 0; r < logits.rows(); ++r) {
    if (ignored(config, targets[r])) continue;
    dlogits.row(r) = q.row(r).array() - p.other_weight;
    dlogits(r, targets[r]) = q(r, targets[r]) - p.target_weight;
    dlogits.row(r) *= grad_loss[r];
  }
  return dlogits;
}

Matrix cross_entropy_backward(const Matrix& logits, const TargetVector& targets,
                              const CrossEntropyConfig& config, double grad_loss_sum) {
  return cross_entropy_backward(logits, targets, config, Vector::Constant(logits.rows(), grad_loss_sum));
}

}  // namespace seqbench::ref
