// The GEMM problems of the Transformer layers, in row-major terms (layers/gemm.h): the three
// products of an nn.Linear (weight W [out, in]) and the per-(batch, head) products of attention.
// Shared by every layer so that the encoder and the decoder build exactly the same problems.
#pragma once

#include <cstdint>

#include "layers/gemm.h"

namespace seqbench::layers {

// Row-major nn.Linear products (W [out_f, in_f]), no bias (the layers add it in fused kernels):
//   forward  out[rows, out_f] = in[rows, in_f] · Wᵀ
//   dX       dx[rows, in_f]   = dy[rows, out_f] · W
//   dW       dw[out_f, in_f]  = dyᵀ · in      (written: beta = 0)
GemmProblem linear_forward(const void* in, const void* w, void* out, std::int64_t rows, std::int64_t out_f,
                           std::int64_t in_f);
GemmProblem linear_dx(const void* dy, const void* w, void* dx, std::int64_t rows, std::int64_t out_f,
                      std::int64_t in_f);
GemmProblem linear_dw(const void* dy, const void* in, void* dw, std::int64_t rows, std::int64_t out_f,
                      std::int64_t in_f);

// One product per (batch, head): D_i = alpha · op(A_i) · op(B_i), i < count, with every operand a
// packed [rows, cols] matrix per head (stride rows·cols) as stored, before the op.
GemmProblem per_head(GemmOp op_a, const void* a, std::int64_t a_rows, std::int64_t a_cols, GemmOp op_b,
                     const void* b, std::int64_t b_rows, std::int64_t b_cols, void* d, std::int64_t count,
                     float alpha);

}  // namespace seqbench::layers
