// The fused feed-forward epilogue: y = dropout(act(x + bias)), as LightSeq2 fuses it after the
// first FFN GEMM (bias add, activation and dropout in one kernel, the bias gradient reduced in the
// backward one).
#pragma once

#include "reference/tensor.h"

namespace seqbench::ref {

enum class Activation {
  relu,       // max(z, 0), NaN kept; derivative 0 for z <= 0, else 1 (NaN too): PyTorch relu, threshold_backward
  gelu_erf,   // z · Φ(z) = 0.5 z (1 + erf(z/√2)) (Hendrycks & Gimpel 2016; nn.GELU())
  gelu_tanh,  // 0.5 z (1 + tanh(√(2/π) (z + 0.044715 z³))) (same paper; nn.GELU("tanh"), BERT, GPT-2)
};

const char* activation_name(Activation act);

// act(z) and d act/dz, element-wise.
double activate(double z, Activation act);
double activation_derivative(double z, Activation act);

// y = dropout(act(x + bias)) with bias broadcast over rows.
// x: [rows, H]; bias: [H]; keep: [rows, H]; 0 <= p <= 1.
Matrix bias_act_dropout_forward(const Matrix& x, const Vector& bias, const KeepMask& keep, double p,
                                Activation act);

struct BiasActDropoutGrads {
  Matrix dx;     // [rows, H] = dy ⊙ keep/(1-p) ⊙ act'(x + bias)
  Vector dbias;  // [H] = Σ_rows dx, since the bias is broadcast over rows
};

// Recomputes z = x + bias from the inputs, as the fused backward kernel does (it stores no
// activation).
BiasActDropoutGrads bias_act_dropout_backward(const Matrix& dy, const Matrix& x, const Vector& bias,
                                              const KeepMask& keep, double p, Activation act);

}  // namespace seqbench::ref
