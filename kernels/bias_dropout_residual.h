// The fused residual epilogue y = residual + dropout(x + bias) (LightSeq2 §IV-A: after the
// attention-output and second FFN GEMMs, bias add, dropout and residual add in one kernel), its
// backward with the deterministic bias gradient, and the unfused PyTorch-eager-like baseline.
// Semantics: reference/bias_dropout_residual.h.
//
// Shapes: x, residual, y, dy, dx: [rows, cols] row-major; bias, dbias: [cols]. Mask as in
// kernels/dropout.h from the flat index r·cols + c (= make_dropout_mask(rows, cols, p, seed, offset)).
// Types: T ∈ {float, __half, __nv_bfloat16}, float arithmetic, one rounding to T per output.
//
// Backward: the op is affine in x and residual for a fixed mask, so the backward reads only dy
// and redraws the mask from (seed, offset): nothing is saved by the forward. dresidual = dy
// exactly (the residual path is the identity): no kernel writes it, the caller uses dy itself,
// as PyTorch autograd does for an add.
//
// Thread mapping: the row-tiled skeleton of kernels/dropout_mask.h, as kernels/bias_act_dropout.h
// describes it: blocks of 32 x 8 threads, threadIdx.x one vector of K = 16/sizeof(T) columns
// (Packed<T> when cols % K == 0 and all pointers 16-byte aligned, else scalar), threadIdx.y
// every 8th row of the block's row range; bias in registers; one Philox call per whole vector.
// The bias gradient goes through float column partials [row_blocks, cols] in a caller workspace
// and a fixed-order reduction kernel: no float atomics, bitwise reproducible for a given shape.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "kernels/dropout.h"

namespace seqbench::kernels {

// launch_bias_dropout_residual_fwd<T>(y, x, bias, residual, rows, cols, dropout, stream)
//   What: y[r, c] = residual[r, c] + (x[r, c] + bias[c]) · (keep(r·cols + c) ? 1/(1-p) : 0).
//   Traffic: x and residual read, bias read once per thread column, y written.
//
// launch_bias_dropout_residual_bwd<T>(dx, dbias, dy, rows, cols, dropout, workspace,
//                                     workspace_bytes, stream)
//   What: dx[r, c] = dy[r, c] · (keep ? 1/(1-p) : 0); dbias[c] = Σ_r dx[r, c] (float sums of
//   the unrounded dx); dresidual = dy (not written, see above). `dropout` must be the forward's.
//   Workspace: bias_dropout_residual_bwd_workspace_bytes(rows, cols) bytes, 4-byte aligned,
//   contents on entry irrelevant. rows = 0 gives dbias = 0.
//
// Limits (both): rows, cols >= 0, cols <= 2^31 - 1, rows·cols <= 2^62; 0 <= p <= 1; pointers
// non-null when their tensor is non-empty; outputs overlap no input (no in-place).
template <class T>
void launch_bias_dropout_residual_fwd(T* y, const T* x, const T* bias, const T* residual, std::int64_t rows,
                                      std::int64_t cols, const DropoutConfig& dropout, cudaStream_t stream);

std::size_t bias_dropout_residual_bwd_workspace_bytes(std::int64_t rows, std::int64_t cols);

template <class T>
void launch_bias_dropout_residual_bwd(T* dx, T* dbias, const T* dy, std::int64_t rows, std::int64_t cols,
                                      const DropoutConfig& dropout, void* workspace,
                                      std::size_t workspace_bytes, cudaStream_t stream);

// Unfused baseline, one op per kernel as PyTorch eager runs `residual + dropout(x + bias)`:
// forward launch_bias_add (z, kernels/bias_act_dropout.h), launch_dropout_mask_u8 +
// launch_dropout_apply_u8 (d, kernels/dropout.h), launch_residual_add (y = residual + d), saving
// the uint8 mask; backward launch_dropout_apply_u8 (dx from dy and the mask) and
// launch_column_sum (dbias); dresidual = dy.
//
// launch_residual_add<T>(y, a, residual, rows, cols, stream): y = a + residual, the row-tiled
//   mapping above without bias or mask. Same limits.
template <class T>
void launch_residual_add(T* y, const T* a, const T* residual, std::int64_t rows, std::int64_t cols,
                         cudaStream_t stream);

}  // namespace seqbench::kernels
