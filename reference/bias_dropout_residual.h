// The fused residual epilogue after the attention-output and second FFN GEMMs (LightSeq2 fuses
// the bias add, dropout and residual add into one kernel):
//   y = residual + dropout(x + bias)
#pragma once

#include "reference/tensor.h"

namespace seqbench::ref {

// x, residual, keep: [rows, H]; bias: [H]; 0 <= p <= 1.
Matrix bias_dropout_residual_forward(const Matrix& x, const Vector& bias, const Matrix& residual,
                                     const KeepMask& keep, double p);

struct BiasDropoutResidualGrads {
  Matrix dx;         // dy ⊙ keep / (1-p)
  Vector dbias;      // Σ_rows dx
  Matrix dresidual;  // dy: the residual path is the identity
};

// Depends on neither x nor residual: the op is affine in both for a fixed mask.
BiasDropoutResidualGrads bias_dropout_residual_backward(const Matrix& dy, const KeepMask& keep, double p);

}  // namespace seqbench::ref
