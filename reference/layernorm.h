// Layer normalization (Ba, Kiros & Hinton 2016), with the semantics of PyTorch nn.LayerNorm over
// the last axis: biased variance (divide by H, not H-1) and eps inside the square root.
//
//   mean_r = (1/H) Σ_c x[r,c]
//   var_r  = (1/H) Σ_c (x[r,c] - mean_r)²
//   rstd_r = 1 / sqrt(var_r + eps)
//   y[r,c] = (x[r,c] - mean_r) · rstd_r · gamma[c] + beta[c]
#pragma once

#include "reference/tensor.h"

namespace seqbench::ref {

struct LayerNormForward {
  Matrix y;     // [rows, H]
  Vector mean;  // [rows], saved for the backward as the kernels save it
  Vector rstd;  // [rows]
};

struct LayerNormGrads {
  Matrix dx;      // [rows, H]
  Vector dgamma;  // [H] = Σ_r dy[r,c] · x̂[r,c]
  Vector dbeta;   // [H] = Σ_r dy[r,c]
};

// x: [rows, H]; gamma, beta: [H]; eps > 0.
LayerNormForward layernorm_forward(const Matrix& x, const Vector& gamma, const Vector& beta, double eps);

// With x̂ = (x - mean)·rstd and g = dy ⊙ gamma (per row):
//   dx = rstd · (g - mean_c(g) - x̂ · mean_c(g ⊙ x̂))
// the rearranged form LightSeq2 (Wang et al. 2022) computes in its fused LayerNorm backward: the two
// row means are the only reductions, so dx needs one pass once they are known. mean/rstd are the
// forward's.
LayerNormGrads layernorm_backward(const Matrix& dy, const Matrix& x, const Vector& gamma, const Vector& mean,
                                  const Vector& rstd);

}  // namespace seqbench::ref
