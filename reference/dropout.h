// Dropout (Srivastava et al. 2014, "inverted" form as in PyTorch nn.Dropout): kept elements are
// scaled by 1/(1-p) at training time so that inference needs no rescaling.
//
// The mask is an explicit input: the forward and backward of every fused op take the same
// KeepMask, and the gradient check holds it fixed (the mask is sampled, not differentiated).
// make_dropout_mask() draws it exactly as the CUDA kernels do, from Philox, so a kernel and its
// reference agree on which elements drop.
#pragma once

#include <cstdint>

#include "reference/tensor.h"

namespace seqbench::ref {

// keep[r, c] = philox_keep(seed, offset, r * cols + c, float(p)): the flat C-order element index
// is the dropout draw index (16-bit draws, core/philox.h), and p is compared in float because that
// is what the kernels do. An element drops with probability dropout_drop_probability(p), within
// 2^-16 above p; the scale below stays 1/(1-p).
// Requires 0 <= p <= 1.
KeepMask make_dropout_mask(Index rows, Index cols, double p, std::uint64_t seed, std::uint64_t offset);

// The factor applied to kept elements: 1/(1-p), or 0 when p = 1 (everything is dropped, so the
// output is 0 rather than 0 * inf = NaN). Requires 0 <= p <= 1.
double dropout_scale(double p);

// y = x ⊙ keep / (1-p). Requires keep to have x's shape and 0 <= p <= 1.
Matrix dropout_forward(const Matrix& x, const KeepMask& keep, double p);

// dx = dy ⊙ keep / (1-p): dropout is linear in x for a fixed mask, so it is its own transpose.
Matrix dropout_backward(const Matrix& dy, const KeepMask& keep, double p);

// Shape/probability validation shared by every op that takes a dropout mask; `what` names the
// tensor in the error message.
void require_dropout_args(const KeepMask& keep, Index rows, Index cols, double p, const char* what);

}  // namespace seqbench::ref
