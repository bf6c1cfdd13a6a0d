// The reshapes between the attention projections and the per-head attention (LightSeq2 §IV-A:
// bias_add_transform_20314 and transform4d_0213), fused with the projection bias and its
// gradient, and the unfused PyTorch-eager-like baseline. Semantics: reference/attention.h
// split_heads / merge_heads, with the bias added before the split.
//
// Shapes (HeadsShape): B = batch, L = len, N = heads, H = hidden = N·d (the width of one
// projection), P = projections ∈ {1, 2, 3}, rows = B·L token rows (row = b·L + l), ld = the
// projected matrix's row stride (projected_ld; 0 means packed, ld = P·H).
//   projected  [rows, P·H]       the fused projection GEMM's output (row r at element r·ld; the
//                                ld - P·H elements between rows are neither read nor written,
//                                so it may be a column block of a wider matrix); column p·H + h·d + j is
//                                projection p (0 = Q, 1 = K, 2 = V for P = 3), head h, element j
//   heads      [P, B, N, L, d]   one tensor, projection p's [B, N, L, d] block at element p·rows·H
//                                (LightSeq's layout; P = 3 self-attention QKV, P = 2 the
//                                cross-attention K/V of the encoder output, P = 1 a lone Q or the
//                                attention context)
//   bias/dbias [P·H]
// So heads[p, b, h, l, j] = projected[(b·L + l)·ld + p·H + h·d + j]: the split; the merge is its
// inverse.
//
// Launchers (T ∈ {float, __half, __nv_bfloat16}; fp32 arithmetic, one rounding per output):
//   launch_qkv_bias_split_fwd  heads = split(projected + bias): fl_T(fl32(x + b)) per element
//   launch_qkv_bias_split_bwd  d_projected = merge(d_heads) (bitwise copy) and
//                              dbias[c] = Σ_r d_projected[r, c] (deterministic, no atomics)
//   launch_merge_heads         projected = merge(heads) (transform 0213; bitwise copy). The
//                              attention context [B, N, L, d] -> [B·L, H] with P = 1; its backward
//                              is launch_split_heads.
//   launch_split_heads         heads = split(projected) (bitwise copy), no bias
//
// Thread mapping (all four): the row-tiled skeleton of kernels/dropout_mask.h over the
// projected matrix [rows, cols = P·H]. A block is 32 x 8 threads; threadIdx.x owns one vector
// of K = 16/sizeof(T) consecutive columns (so a block spans 32·K columns), threadIdx.y walks
// every 8th row of the block's row range; grid = (ceil(cols / (32K)), row_blocks) with
// rows_per_block from make_row_tile_plan (a function of the shape only). Each thread works out
// once where its columns land in the heads layout (projection, head, element) and keeps its K
// bias values in registers; per row only the (b, l) part of the address changes. Reads and
// writes of the projected matrix are coalesced along columns; the heads side is coalesced
// along d within a head (a warp touches 32K/d heads, each a contiguous run of d elements).
// Vector path (one 16-byte Packed<T> load and store per thread per row) when d % K == 0,
// ld % K == 0 and every pointer is 16-byte aligned, so a vector never straddles a head and every
// row of the projected side starts aligned; otherwise K scalar
// accesses, each column addressed on its own, every tail guarded: any H, any d, any B and L.
//
// Deterministic bias gradient: the backward sums each thread's columns over its rows in row
// order, then the 8 row lanes in order, into column partials [row_blocks, cols] floats (a caller
// workspace), which the fixed-order reduction of kernels/dropout_mask.h adds up. The order is
// exactly that of launch_column_sum (kernels/bias_act_dropout.h) on the merged gradient, so the
// fused dbias equals the unfused baseline's bitwise, and is the same on every GPU.
//
// Traffic (s = sizeof(T), n = rows·P·H): split fwd reads n·s + P·H·s (the bias), writes n·s;
// split bwd reads n·s, writes n·s + P·H·s, plus the float partials (row_blocks·P·H·4 bytes
// written and read, <= 1/8 of n·s at Transformer shapes); merge and split read and write n·s.
//
// Limits (checked; seqbench::Error names the value and the limit): batch, len >= 0, heads >= 1,
// hidden >= 0 with hidden % heads == 0, 1 <= projections <= 3, P·H <= 2^31 - 1, rows·P·H <=
// 2^62; projected_ld = 0 or P·H <= projected_ld <= 2^31 - 1 with rows·ld <= 2^62; pointers
// non-null when their tensor is non-empty; outputs overlap no input (the projected side's whole
// span counts, gaps included; no in-place: a permutation cannot run in place element by element). An empty
// tensor launches nothing, except that the backward with rows = 0 still writes dbias = 0.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace seqbench::kernels {

struct HeadsShape {
  std::int64_t batch = 0;
  std::int64_t len = 0;
  std::int64_t heads = 1;
  std::int64_t hidden = 0;       // H = heads·d, one projection's width
  std::int64_t projections = 1;  // P: 1 (Q, or the context), 2 (cross-attention K/V), 3 (QKV)
  // The projected matrix's row stride in elements: 0 = packed (cols()), else >= cols(), so that
  // the projected side can be a column block of a wider matrix (layers/cross_kv.h: one layer's
  // K/V columns of the layer-batched [rows, layers·2H] projection). The heads side is packed.
  std::int64_t projected_ld = 0;

  std::int64_t rows() const { return batch * len; }
  std::int64_t cols() const { return projections * hidden; }  // P·H
  std::int64_t head_dim() const { return heads > 0 ? hidden / heads : 0; }
  std::int64_t elements() const { return rows() * cols(); }  // of each side
  std::int64_t ld() const { return projected_ld == 0 ? cols() : projected_ld; }
  // The elements the projected matrix spans: (rows - 1)·ld + cols (= elements() when packed).
  std::int64_t projected_span() const {
    return rows() == 0 || cols() == 0 ? 0 : (rows() - 1) * ld() + cols();
  }
};

inline constexpr std::int64_t kMaxProjections = 3;

// Throws seqbench::Error (prefixed with `op`) unless `shape` is within the limits above.
void require_heads_shape(const HeadsShape& shape, const char* op);

// ---------------------------------------------------------------------------------------------
// Fused.
//
// launch_qkv_bias_split_fwd<T>(heads_out, projected, bias, shape, stream)
//   heads_out[p, b, h, l, j] = fl_T(projected[b·L + l, p·H + h·d + j] + bias[p·H + h·d + j]),
//   the add in fp32. heads_out [P, B, N, L, d]; projected [rows, P·H]; bias [P·H].
//
// launch_qkv_bias_split_bwd<T>(d_projected, dbias, d_heads, shape, workspace, workspace_bytes,
//                              stream)
//   d_projected[b·L + l, p·H + h·d + j] = d_heads[p, b, h, l, j] (bitwise);
//   dbias[c] = Σ_r d_projected[r, c], summed in fp32 in the fixed order above, rounded once.
//   Workspace: qkv_bias_split_bwd_workspace_bytes(shape) bytes, 4-byte aligned, contents on
//   entry irrelevant. rows = 0 gives dbias = 0.
//
// launch_merge_heads<T>(projected, heads_in, shape, stream)
//   projected[b·L + l, p·H + h·d + j] = heads_in[p, b, h, l, j] (bitwise); transform 0213.
//
// launch_split_heads<T>(heads_out, projected, shape, stream)
//   heads_out[p, b, h, l, j] = projected[b·L + l, p·H + h·d + j] (bitwise); the backward of
//   launch_merge_heads (and the merge the backward of the split).
template <class T>
void launch_qkv_bias_split_fwd(T* heads_out, const T* projected, const T* bias, const HeadsShape& shape,
                               cudaStream_t stream);

std::size_t qkv_bias_split_bwd_workspace_bytes(const HeadsShape& shape);

template <class T>
void launch_qkv_bias_split_bwd(T* d_projected, T* dbias, const T* d_heads, const HeadsShape& shape,
                               void* workspace, std::size_t workspace_bytes, cudaStream_t stream);

template <class T>
void launch_merge_heads(T* projected, const T* heads_in, const HeadsShape& shape, cudaStream_t stream);

template <class T>
void launch_split_heads(T* heads_out, const T* projected, const HeadsShape& shape, cudaStream_t stream);

// ---------------------------------------------------------------------------------------------
// Unfused baseline, as PyTorch eager runs
//   q, k, v = (x @ W.T + b).split(H, dim=-1); q = q.view(B, L, N, d).transpose(1, 2).contiguous() ...
// Forward: launch_bias_add (kernels/bias_act_dropout.h) over [rows, P·H], then one
// launch_strided_copy per projection (the `.contiguous()` of a transposed column slice).
// Backward: one launch_strided_copy per projection into its column slice of d_projected, then
// launch_column_sum for dbias. Merge: one launch_strided_copy (`.transpose(1, 2).reshape()`).
//
// launch_strided_copy<T>(out, in, copy, stream)
//   out[Σ_k i_k·out_stride[k]] = in[Σ_k i_k·in_stride[k]] for every index (i_0, .., i_3) <
//   dims: PyTorch's copy_ between two strided views (TensorIterator's non-contiguous path).
//   Thread mapping, eager's non-contiguous launch (TensorIterator's legacy path, as of PyTorch
//   2.x): 128-thread blocks, each thread copying 4 elements (2-byte T) or 2 (4-byte T) that lie
//   128 linear indices apart, one scalar load and store each, the linear index decomposed over
//   dims[3] (innermost) .. dims[0]. When the element count and every offset fit in 31 bits the
//   index math is 32-bit and divides by multiply-high (kernels/fast_divmod.h, as eager's offset
//   calculator does), otherwise it is 64-bit with divide instructions. Not mirrored: eager's
//   ordering of the outer dims by output stride (the merge iterates l inside n where eager takes
//   n inside l; both keep the output's unit stride innermost, so a warp touches the same runs of
//   d elements) and its coalescing of adjacent dims (possible here only with one head, N = 1).
//   Limits: dims >= 0, strides >= 0, product of dims <= 2^62, (dims[k] - 1)·stride[k] <= 2^58;
//   the output strides must give distinct elements distinct addresses (checked: sorted by
//   stride, each stride exceeds the span of the smaller ones); in and out spans disjoint.
struct StridedCopy4 {
  std::int64_t dims[4] = {0, 0, 0, 0};
  std::int64_t out_stride[4] = {0, 0, 0, 0};  // elements
  std::int64_t in_stride[4] = {0, 0, 0, 0};   // elements
};

template <class T>
void launch_strided_copy(T* out, const T* in, const StridedCopy4& copy, cudaStream_t stream);

// The baseline's per-projection copy (host only): to_heads = true gives the StridedCopy4 of
// `.view(B, L, N, d).transpose(1, 2).contiguous()` of one column block of projected [rows, P·H]
// (row pitch shape.ld()) into [B, N, L, d] (dims (b, n, l, j)); to_heads = false its inverse. Projection p's
// copy starts at projected + p·H and at heads + p·rows·H (the layout of the fused kernels' [P, B, N, L, d]).
StridedCopy4 heads_strided_copy(const HeadsShape& shape, bool to_heads);

}  // namespace seqbench::kernels
