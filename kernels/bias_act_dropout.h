// The fused feed-forward epilogue y = dropout(act(x + bias)) (LightSeq2 §IV-A: bias add,
// activation and dropout in one kernel after the first FFN GEMM, the bias gradient reduced in the
// backward), and its unfused PyTorch-eager-like baseline. Semantics: reference/bias_act_dropout.h.
//
// Shapes: x, y, dy, dx: [rows, cols] row-major (rows = batch tokens, cols = hidden or FFN size);
// bias, dbias: [cols]. The dropout mask is drawn as in kernels/dropout.h from the flat index
// r·cols + c, so it equals reference/dropout.h make_dropout_mask(rows, cols, p, seed, offset).
// Types: T ∈ {float, __half, __nv_bfloat16}, float arithmetic, one rounding to T per output.
//
// What backward needs, and why nothing is saved: the derivative act'(z) needs the
// pre-activation z = x + bias. The forward stores neither z nor the mask; the backward reads x
// (the first FFN GEMM's output, which the caller keeps anyway, [rows, cols] like z would be) and
// the bias (cols elements), recomputes z with one add, and redraws the mask from (seed, offset).
// Storing z instead would cost one extra [rows, cols] write in the forward and save nothing in
// the backward (z is read instead of x); storing the mask would cost 1/8 to 1 byte per element.
//
// Thread mapping (both fused kernels and every unfused kernel but the dropout ones): the
// row-tiled skeleton of kernels/dropout_mask.h. A block is 32 x 8 threads; threadIdx.x owns one
// vector of K = 16/sizeof(T) consecutive columns (Packed<T> loads when cols % K == 0 and every
// pointer is 16-byte aligned, K scalar accesses otherwise, so any cols and any alignment work) and
// keeps its K bias values in registers; threadIdx.y walks every 8th row of the block's row range.
// grid = (ceil(cols / (32K)), row_blocks) with rows_per_block from make_row_tile_plan (a
// function of the shape only). A whole vector's K keep bits come from one Philox call.
//
// Deterministic bias gradient (no float atomics): the backward kernel sums its float dx over the
// block's rows (each thread in row order, then the 8 row lanes in order) into a caller workspace
// of column partials [row_blocks, cols] floats, and a second kernel adds the partials of each
// column in a fixed order (block 32 x 16: lane y sums row blocks y, y+16, ..., then the 16 lanes
// in order). The result is bitwise reproducible for a given shape, on any GPU.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "kernels/dropout.h"

namespace seqbench::kernels {

enum class Activation {
  relu,       // max(z, 0), NaN kept; derivative 0 for z <= 0, else 1 (NaN too), as PyTorch
  gelu_erf,   // 0.5 z (1 + erf(z/√2))
  gelu_tanh,  // 0.5 z (1 + tanh(√(2/π) (z + 0.044715 z³)))
};

const char* activation_name(Activation act);

// ---------------------------------------------------------------------------------------------
// Fused.
//
// launch_bias_act_dropout_fwd<T>(y, x, bias, rows, cols, act, dropout, stream)
//   What: y[r, c] = act(x[r, c] + bias[c]) · (keep(r·cols + c) ? 1/(1-p) : 0).
//   Traffic: x read, bias read once per thread column, y written; nothing saved for backward.
//
// launch_bias_act_dropout_bwd<T>(dx, dbias, dy, x, bias, rows, cols, act, dropout, workspace,
//                                workspace_bytes, stream)
//   What: dx[r, c] = dy[r, c] · (keep ? 1/(1-p) : 0) · act'(x[r, c] + bias[c]);
//         dbias[c] = Σ_r dx[r, c], summed in float from the unrounded float dx values.
//   `dropout` must be the forward's (same p, seed, offset): the mask is redrawn from it.
//   Workspace: bias_act_dropout_bwd_workspace_bytes(rows, cols) bytes, 4-byte aligned; its
//   contents on entry do not matter. rows = 0 gives dbias = 0.
//   In place: dx may be dy itself (dx == dy), and the result is bitwise the out-of-place one. Each
//   element is read and then written by the one thread that owns it; the in-place instance
//   declares no pointer __restrict__, so it never reads dy through the non-coherent read-only
//   path (kernels/dropout_mask.h, row_tile_kernel). A layer's FFN backward uses it so that the activation's
//   gradient and fc1's output gradient ([rows, ffn] each) share one buffer (layers/ffn_sublayer.h).
//
// Limits (both): rows, cols >= 0, cols <= 2^31 - 1, rows·cols <= 2^62; 0 <= p <= 1; pointers
// non-null when their tensor is non-empty; outputs overlap no input, except the backward's
// dx == dy (a partial overlap of dx and dy is refused too).
template <class T>
void launch_bias_act_dropout_fwd(T* y, const T* x, const T* bias, std::int64_t rows, std::int64_t cols,
                                 Activation act, const DropoutConfig& dropout, cudaStream_t stream);

std::size_t bias_act_dropout_bwd_workspace_bytes(std::int64_t rows, std::int64_t cols);

template <class T>
void launch_bias_act_dropout_bwd(T* dx, T* dbias, const T* dy, const T* x, const T* bias, std::int64_t rows,
                                 std::int64_t cols, Activation act, const DropoutConfig& dropout,
                                 void* workspace, std::size_t workspace_bytes, cudaStream_t stream);

// ---------------------------------------------------------------------------------------------
// Unfused baseline: one op per kernel, as PyTorch eager runs `dropout(act(x + bias))` and its
// autograd. Forward: launch_bias_add (z), launch_activation_fwd (a = act(z)),
// launch_dropout_mask_u8 + launch_dropout_apply_u8 (y), saving z and the uint8 mask. Backward:
// launch_dropout_apply_u8 (da = dy · mask/(1-p)), launch_activation_bwd (dz = da · act'(z)),
// launch_column_sum (dbias = Σ_r dz); dx is dz itself (the bias add passes its gradient through).
// The same kernels serve the bias + dropout + residual baseline. Same limits as above.
//
// launch_bias_add<T>(z, x, bias, rows, cols): z[r, c] = x[r, c] + bias[c].
// launch_activation_fwd<T>(a, z, rows, cols, act): a = act(z).
// launch_activation_bwd<T>(dz, da, z, rows, cols, act): dz = da · act'(z).
// launch_column_sum<T>(sum, x, rows, cols, workspace, workspace_bytes): sum[c] = Σ_r x[r, c],
//   deterministic as the fused backward's dbias (the same two kernels, without the dx output);
//   workspace: column_sum_workspace_bytes(rows, cols).
template <class T>
void launch_bias_add(T* z, const T* x, const T* bias, std::int64_t rows, std::int64_t cols,
                     cudaStream_t stream);

template <class T>
void launch_activation_fwd(T* a, const T* z, std::int64_t rows, std::int64_t cols, Activation act,
                           cudaStream_t stream);

template <class T>
void launch_activation_bwd(T* dz, const T* da, const T* z, std::int64_t rows, std::int64_t cols,
                           Activation act, cudaStream_t stream);

std::size_t column_sum_workspace_bytes(std::int64_t rows, std::int64_t cols);

template <class T>
void launch_column_sum(T* sum, const T* x, std::int64_t rows, std::int64_t cols, void* workspace,
                       std::size_t workspace_bytes, cudaStream_t stream);

}  // namespace seqbench::kernels
