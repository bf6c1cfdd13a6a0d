// Optimizer steps in double, with PyTorch's update rules (torch.optim, single-tensor "foreach=False"
// path), on flat parameter vectors. Each step updates `param` and `state` in place.
#pragma once

#include <cstdint>

#include "reference/tensor.h"

namespace seqbench::ref {

struct AdamConfig {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
};

// Adam's per-parameter state; m and v start empty and are zero-initialized on the first step.
struct AdamState {
  std::int64_t step = 0;
  Vector m;  // first moment (exp_avg)
  Vector v;  // second moment (exp_avg_sq)
};

// torch.optim.Adam (Kingma & Ba 2015, Algorithm 1) with L2 weight decay folded into the gradient:
//   g = grad + wd·θ;  t += 1
//   m = β1·m + (1-β1)·g;  v = β2·v + (1-β2)·g²
//   θ -= lr · (m / (1-β1^t)) / (sqrt(v / (1-β2^t)) + eps)
// (eps is added after the bias correction of v, as PyTorch does.)
void adam_step(Vector& param, const Vector& grad, AdamState& state, const AdamConfig& config);

// torch.optim.AdamW (Loshchilov & Hutter 2019): decoupled weight decay θ *= 1 - lr·wd first, then
// the Adam update above with g = grad (no L2 term).
void adamw_step(Vector& param, const Vector& grad, AdamState& state, const AdamConfig& config);

struct SgdConfig {
  double lr = 1e-2;
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;  // needs momentum > 0 and dampening = 0, as PyTorch requires
};

struct SgdState {
  std::int64_t step = 0;
  Vector momentum_buffer;  // empty until the first step with momentum (PyTorch's None)
};

// torch.optim.SGD:
//   g = grad + wd·θ
//   if momentum != 0: buf = g on the first step, else buf = μ·buf + (1-dampening)·g;
//                     g = g + μ·buf (nesterov) or g = buf
//   θ -= lr · g
void sgd_step(Vector& param, const Vector& grad, SgdState& state, const SgdConfig& config);

}  // namespace seqbench::ref
