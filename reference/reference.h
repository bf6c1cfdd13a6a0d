// seqbench::ref — the CPU reference of every seqbench operator, in double precision (Eigen), with
// forward and backward, and the self-checks that hold the backwards to finite differences.
//
// Every CUDA kernel in kernels/ is tested against the function of the same stem here
// (kernels/layernorm.cu against reference/layernorm.h, ...), and `seqbench check` runs
// run_reference_checks() from reference/checks.h.
//
// Conventions (details in reference/tensor.h):
//   * Tensors are row-major Eigen matrices (ref::Matrix) whose data() is the flat C-order buffer a
//     kernel sees: rows = tokens for activations [tokens, hidden]; rows = (b·heads + h)·L + l for
//     per-head tensors [B, heads, L, d]; rows = (b·heads + h)·Lq + i for attention scores
//     [B, heads, Lq, Lk]. Per-feature parameters are column vectors (ref::Vector).
//   * Dropout masks are explicit inputs (ref::KeepMask, 1 = kept), drawn with Philox by
//     make_dropout_mask(rows, cols, p, seed, offset) with flat index r·cols + c, exactly as the
//     kernels draw them; forward and backward take the same mask.
//   * Masking uses -inf, so masked probabilities are exactly 0; a fully-masked attention row is
//     all zeros (not NaN) and gets zero gradient.
//   * Backward functions take the upstream gradient first, then what the forward saved.
//   * Invalid shapes or arguments throw seqbench::Error naming the value and the limit.
//
// Files, one concept each:
//   tensor.h                 types and layout
//   layernorm.h              LayerNorm (PyTorch nn.LayerNorm)
//   softmax.h                attention softmax with masks; log_softmax
//   dropout.h                dropout and its Philox mask
//   bias_act_dropout.h       dropout(act(x + bias)), act ∈ {relu, gelu_erf, gelu_tanh}
//   bias_dropout_residual.h  residual + dropout(x + bias)
//   embedding.h              token·scale + position, padding, dropout
//   cross_entropy.h          label-smoothed cross-entropy, paper and fairseq conventions
//   linear.h                 y = x·Wᵀ + b (PyTorch layout)
//   attention.h              scaled dot-product attention and multi-head attention
//   transformer_layer.h      encoder and decoder layers (pre-/post-LN) composed from the above
//   optimizers.h             Adam, AdamW, SGD (momentum, Nesterov), PyTorch semantics
//   relu_centering.h         an fc1 bias that keeps ReLU pre-activations off the kink (test inputs)
//   gradcheck.h              the finite-difference gradient checker and its tolerance
//   checks.h                 run_reference_checks(): every gradcheck and closed-form test
#pragma once

#include "reference/attention.h"
#include "reference/bias_act_dropout.h"
#include "reference/bias_dropout_residual.h"
#include "reference/checks.h"
#include "reference/cross_entropy.h"
#include "reference/dropout.h"
#include "reference/embedding.h"
#include "reference/gradcheck.h"
#include "reference/layernorm.h"
#include "reference/linear.h"
#include "reference/optimizers.h"
#include "reference/relu_centering.h"
#include "reference/softmax.h"
#include "reference/tensor.h"
#include "reference/transformer_layer.h"
