#include <algorithm>
#include <cstdint>
#include <limits>

#include "core/cuda_check.h"
#include "core/nvtx.h"
#include "kernels/dropout_mask.h"
#include "kernels/fast_divmod.h"
#include "kernels/packed.h"
#include "kernels/qkv_reshape.h"

namespace seqbench::kernels {

using namespace dropout_detail;

namespace {

// ---------------------------------------------------------------------------------------------
// The fused kernels: one template for both directions over the row-tiled skeleton.

template <class T>
struct HeadsArgs {
  T* out = nullptr;
  const T* in = nullptr;
  const T* bias = nullptr;    // [cols], read when kBias
  float* partials = nullptr;  // [row_blocks, cols], written when kReduce
  std::int64_t rows = 0;      // B·L
  std::int64_t cols = 0;      // P·H
  std::int64_t ld = 0;        // the projected matrix's row stride (>= cols)
  std::int64_t len = 0;       // L
  std::int64_t hidden = 0;    // H
  std::int64_t heads = 0;     // N
  std::int64_t head_dim = 0;  // d
  std::int64_t rows_per_block = 0;
  bool vector_path = false;  // d % K == 0, ld % K == 0 and every pointer 16-byte aligned
};

// One column to the right in the heads layout: element j + 1 of head h, or element 0 of head
// h + 1, or head 0 of the next projection; `off` is the heads-layout offset.
__device__ __forceinline__ void step_column(std::int64_t& off, std::int64_t& h, std::int64_t& j,
                                            std::int64_t d, std::int64_t heads, std::int64_t next_head,
                                            std::int64_t next_proj) {
  if (++j < d) {
    ++off;
    return;
  }
  j = 0;
  if (++h < heads) {
    off += next_head;
    return;
  }
  h = 0;
  off += next_proj;
}

// The kernel. kToHeads: in is the projected matrix [rows, cols] (row stride ld) and out the heads layout
// [P, B, N, L, d] (the split); otherwise the reverse (the merge). kBias adds bias[c] in float
// (split only); kReduce sums the moved values per column into partials (merge only), in the
// order of kernels/dropout_mask.h's row_tile_kernel: each thread's rows in increasing order,
// then the 8 row lanes in order. Pure moves copy T values as they are (bitwise).
//
// Heads-layout address of projected element (r, c), with r = b·L + l and c = p·H + h·d + j:
//   (((p·B + b)·N + h)·L + l)·d + j = p·rows·H + h·L·d + j  +  b·L·H + l·d
// The first part depends on the column only (computed once per thread for its first column;
// the scalar path steps from there to the others), the second on the row only.
template <class T, bool kToHeads, bool kBias, bool kReduce>
__global__ void __launch_bounds__(kTileThreads) heads_tile_kernel(const HeadsArgs<T> a) {
  static_assert(kToHeads || !kBias, "the bias is added on the split only");
  static_assert(!kToHeads || !kReduce, "the column sum is taken on the merge only");
  constexpr int K = Packed<T>::kSize;
  T* __restrict__ out = a.out;
  const T* __restrict__ in = a.in;
  const std::int64_t cols = a.cols;
  // blockDim.x (== kTileCols), not the constant: with the constant, nvcc 13.0 emitted a whole
  // vector's store as K separate st.global (4 of 4 bytes or 8 of 2 bytes: seen in the PTX and the
  // SASS) instead of one 16-byte st.global.v4, while the loads stayed 16 bytes wide; likely because
  // the address's low bits were then known and its store vectorizer no longer matched the K
  // offsets. The cpu test kernels_ptx_vector_stores (tools/ptx_vector_check.py) checks the PTX.
  const std::int64_t col0 = (static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * K;
  const int count = col0 < cols ? static_cast<int>(cols - col0 < K ? cols - col0 : K) : 0;
  const bool whole = a.vector_path && count == K;
  const std::int64_t d = a.head_dim;
  const std::int64_t len = a.len;
  const std::int64_t batch_stride = len * a.hidden;  // b·L·H

  // The heads-layout offset of the thread's first column, and where that column sits in its
  // head (element j0 of head h0), so that the scalar path can step through the next K - 1
  // columns with additions: +1 within a head, next_head to element 0 of the next head,
  // next_proj to head 0 of the next projection.
  const std::int64_t proj_stride = a.rows * a.hidden, head_stride = len * d;
  const std::int64_t next_head = head_stride - (d - 1);
  const std::int64_t next_proj = proj_stride - (a.heads - 1) * head_stride - (d - 1);
  std::int64_t col_off0 = 0, h0 = 0, j0 = 0;
  if (count > 0) {
    const std::int64_t p = col0 / a.hidden, rem = col0 - (col0 / a.hidden) * a.hidden;
    h0 = rem / d;
    j0 = rem - h0 * d;
    col_off0 = p * proj_stride + h0 * head_stride + j0;
  }

  float bias[K];
#pragma unroll
  for (int k = 0; k < K; ++k) bias[k] = 0.0f;
  if constexpr (kBias) {
    if (count > 0) load_floats<T, K>(a.bias + col0, bias, count, whole);
  }

  float acc[K];
#pragma unroll
  for (int k = 0; k < K; ++k) acc[k] = 0.0f;

  const std::int64_t row_begin = static_cast<std::int64_t>(blockIdx.y) * a.rows_per_block;
  const std::int64_t row_end = a.rows - row_begin < a.rows_per_block ? a.rows : row_begin + a.rows_per_block;
  if (count > 0) {
    std::int64_t r = row_begin + threadIdx.y;
    std::int64_t b = r / len, l = r - (r / len) * len;  // len >= 1 whenever rows > 0
#pragma unroll 2
    for (; r < row_end; r += kTileRows) {
      const std::int64_t flat = r * a.ld + col0;  // projected (row stride ld)
      const std::int64_t row_off = b * batch_stride + l * d;
      if constexpr (kToHeads) {
        if (whole) {
          Packed<T> v = Packed<T>::load(in + flat);
          if constexpr (kBias) {
#pragma unroll
            for (int k = 0; k < K; ++k) v.v[k] = from_float<T>(to_float(v.v[k]) + bias[k]);
          }
          v.store(out + col_off0 + row_off);
        } else {
          std::int64_t off = col_off0 + row_off, h = h0, j = j0;
#pragma unroll
          for (int k = 0; k < K; ++k) {
            if (k < count) {
              if constexpr (kBias) {
                out[off] = from_float<T>(to_float(in[flat + k]) + bias[k]);
              } else {
                out[off] = in[flat + k];
              }
            }
            step_column(off, h, j, d, a.heads, next_head, next_proj);
          }
        }
      } else {
        if (whole) {
          const Packed<T> v = Packed<T>::load(in + col_off0 + row_off);
          v.store(out + flat);
          if constexpr (kReduce) {
#pragma unroll
            for (int k = 0; k < K; ++k) acc[k] += to_float(v.v[k]);
          }
        } else {
          std::int64_t off = col_off0 + row_off, h = h0, j = j0;
#pragma unroll
          for (int k = 0; k < K; ++k) {
            if (k < count) {
              const T v = in[off];
              out[flat + k] = v;
              if constexpr (kReduce) acc[k] += to_float(v);
            }
            step_column(off, h, j, d, a.heads, next_head, next_proj);
          }
        }
      }
      // The next row of this thread: kTileRows further, carried into b.
      l += kTileRows;
      if (l >= len) {
        if (len >= kTileRows) {
          l -= len;
          ++b;
        } else {
          b += l / len;
          l -= (l / len) * len;
        }
      }
    }
  }

  if constexpr (kReduce) write_column_partials<K>(acc, a.partials, cols);  // row_tile_kernel's order
}

template <class T, bool kToHeads, bool kBias, bool kReduce>
void launch_heads_tile(HeadsArgs<T> a, cudaStream_t stream) {
  constexpr int K = Packed<T>::kSize;
  const RowTilePlan plan = make_row_tile_plan(a.rows, a.cols);
  if (plan.row_blocks == 0) return;
  a.rows_per_block = plan.rows_per_block;
  a.vector_path = a.head_dim % K == 0 && a.ld % K == 0 && is_vector_aligned(a.out) &&
                  is_vector_aligned(a.in) && is_vector_aligned_or_null(a.bias);
  const std::int64_t col_tiles = (a.cols + kTileCols * K - 1) / (kTileCols * K);
  const dim3 grid(static_cast<unsigned>(col_tiles), static_cast<unsigned>(plan.row_blocks));
  heads_tile_kernel<T, kToHeads, kBias, kReduce><<<grid, dim3(kTileCols, kTileRows), 0, stream>>>(a);
  SEQBENCH_CUDA_CHECK_LAUNCH();
}

template <class T>
HeadsArgs<T> make_heads_args(const HeadsShape& s) {
  HeadsArgs<T> a;
  a.rows = s.rows();
  a.cols = s.cols();
  a.ld = s.ld();
  a.len = s.len;
  a.hidden = s.hidden;
  a.heads = s.heads;
  a.head_dim = s.head_dim();
  return a;
}

// The bytes of the heads side (packed) and of the projected side (its span, row stride ld).
template <class T>
std::size_t tensor_bytes(const HeadsShape& s) {
  return static_cast<std::size_t>(s.elements()) * sizeof(T);
}
template <class T>
std::size_t projected_bytes(const HeadsShape& s) {
  return static_cast<std::size_t>(s.projected_span()) * sizeof(T);
}

// out = move(in) over the shape: both non-null and disjoint; kToHeads: in is the projected side.
template <class T, bool kToHeads>
void require_move(const char* op, const T* out, const char* out_name, const T* in, const char* in_name,
                  const HeadsShape& s) {
  require_non_null(out, op, out_name);
  require_non_null(in, op, in_name);
  const std::size_t heads = tensor_bytes<T>(s), projected = projected_bytes<T>(s);
  require_disjoint(out, kToHeads ? heads : projected, in, kToHeads ? projected : heads, op, out_name,
                   in_name);
}

// ---------------------------------------------------------------------------------------------
// The unfused baseline's strided copy: the shape of PyTorch eager's non-contiguous elementwise
// launch (128-thread blocks, each thread kStridedCopyUnroll<T> elements kStridedCopyThreads apart,
// every index decomposed through precomputed divisors), so that the baseline is as fast as the
// eager code it stands for, not slower.

constexpr int kStridedCopyThreads = 128;
constexpr std::int64_t kStridedCopyMaxBlocks = std::int64_t{1} << 20;  // then grid-stride over tiles
// Elements per thread: 4 for 2-byte types, 2 for 4-byte ones (eager's unroll factor).
template <class T>
constexpr int kStridedCopyUnroll = sizeof(T) >= 4 ? 2 : 4;

// The 32-bit path (element count and every offset <= 2^31 - 1) divides through FastDivmod; the
// 64-bit one, for copies beyond that, through the divide instruction.
struct StridedIndex32 {
  FastDivmod dims[3];  // dims[1..3]: the index is decomposed innermost first
  std::uint32_t out_stride[4];
  std::uint32_t in_stride[4];
};

struct StridedIndex64 {
  std::int64_t dims[4];
  std::int64_t out_stride[4];
  std::int64_t in_stride[4];
};

__device__ __forceinline__ void strided_offsets(const StridedIndex32& s, std::uint32_t i, std::uint32_t& out,
                                                std::uint32_t& in) {
  std::uint32_t rest = i, q = 0, r = 0;
  out = 0;
  in = 0;
  SEQBENCH_DEVICE_UNROLL
  for (int k = 3; k >= 1; --k) {
    s.dims[k - 1].divmod(rest, q, r);
    out += r * s.out_stride[k];
    in += r * s.in_stride[k];
    rest = q;
  }
  out += rest * s.out_stride[0];
  in += rest * s.in_stride[0];
}

__device__ __forceinline__ void strided_offsets(const StridedIndex64& s, std::int64_t i, std::int64_t& out,
                                                std::int64_t& in) {
  std::int64_t rest = i;
  out = 0;
  in = 0;
  SEQBENCH_DEVICE_UNROLL
  for (int k = 3; k >= 1; --k) {
    const std::int64_t r = rest % s.dims[k];
    rest /= s.dims[k];
    out += r * s.out_stride[k];
    in += r * s.in_stride[k];
  }
  out += rest * s.out_stride[0];
  in += rest * s.in_stride[0];
}

// Thread mapping: block b takes tiles of kStridedCopyThreads·U consecutive linear indices (tile
// t, t + gridDim.x, ...); thread x copies indices tile_start + x + u·kStridedCopyThreads,
// u < U, each one scalar load and one scalar store; indices >= n are skipped (the tail).
template <class T, class Index, class Strides>
__global__ void __launch_bounds__(kStridedCopyThreads)
    strided_copy_kernel(T* __restrict__ out, const T* __restrict__ in, const Strides s, Index n) {
  constexpr int U = kStridedCopyUnroll<T>;
  constexpr Index tile = static_cast<Index>(kStridedCopyThreads) * U;
  const Index step = static_cast<Index>(gridDim.x) * tile;
  for (Index start = static_cast<Index>(blockIdx.x) * tile; start < n; start += step) {
    SEQBENCH_DEVICE_UNROLL
    for (int u = 0; u < U; ++u) {
      const Index i = start + static_cast<Index>(threadIdx.x) + static_cast<Index>(u) * kStridedCopyThreads;
      if (i < n) {
        Index out_off, in_off;
        strided_offsets(s, i, out_off, in_off);
        out[out_off] = in[in_off];
      }
    }
  }
}

template <class T, class Index, class Strides>
void launch_strided_copy_kernel(T* out, const T* in, const Strides& s, std::int64_t n, cudaStream_t stream) {
  constexpr std::int64_t tile = std::int64_t{kStridedCopyThreads} * kStridedCopyUnroll<T>;
  const std::int64_t blocks = std::min<std::int64_t>((n + tile - 1) / tile, kStridedCopyMaxBlocks);
  strided_copy_kernel<T, Index, Strides>
      <<<static_cast<unsigned>(blocks), kStridedCopyThreads, 0, stream>>>(out, in, s, static_cast<Index>(n));
  SEQBENCH_CUDA_CHECK_LAUNCH();
}

constexpr std::int64_t kMaxElements = std::int64_t{1} << 62;
// Four terms sum below 2^60, so that a span in bytes, (offset + 1)·sizeof(T), fits in 64 bits.
constexpr std::int64_t kMaxOffsetTerm = std::int64_t{1} << 58;

// The largest element offset Σ (dims[k] - 1)·stride[k] (dims all >= 1), checked against overflow.
std::int64_t max_offset(const StridedCopy4& c, const std::int64_t (&stride)[4], const char* op,
                        const char* which) {
  std::int64_t total = 0;
  for (int k = 0; k < 4; ++k) {
    const std::int64_t extent = c.dims[k] - 1;
    SEQBENCH_REQUIRE(extent == 0 || stride[k] <= kMaxOffsetTerm / extent,
                     op << ": " << which << " offset (dims[" << k << "] - 1)·stride = " << extent << "·"
                        << stride[k] << " exceeds 2^58 elements");
    total += extent * stride[k];
  }
  return total;
}

}  // namespace

void require_heads_shape(const HeadsShape& s, const char* op) {
  SEQBENCH_REQUIRE(s.batch >= 0 && s.len >= 0,
                   op << ": batch " << s.batch << " and len " << s.len << " must be >= 0");
  SEQBENCH_REQUIRE(s.heads >= 1, op << ": heads " << s.heads << " must be >= 1 (hidden " << s.hidden << ")");
  SEQBENCH_REQUIRE(s.hidden >= 0 && s.hidden % s.heads == 0,
                   op << ": hidden " << s.hidden << " is not a non-negative multiple of heads " << s.heads);
  SEQBENCH_REQUIRE(s.projections >= 1 && s.projections <= kMaxProjections,
                   op << ": projections " << s.projections << " is outside [1, " << kMaxProjections << "]");
  SEQBENCH_REQUIRE(s.hidden <= std::numeric_limits<std::int32_t>::max(),
                   op << ": hidden " << s.hidden << " > " << std::numeric_limits<std::int32_t>::max());
  SEQBENCH_REQUIRE(s.len == 0 || s.batch <= kMaxElements / s.len,
                   op << ": batch·len = " << s.batch << "·" << s.len << " exceeds 2^62 rows");
  require_matrix_shape(s.rows(), s.cols(), op);
  if (s.projected_ld != 0) {
    SEQBENCH_REQUIRE(s.projected_ld >= s.cols(), op << ": projected_ld " << s.projected_ld
                                                    << " is below the row length P·H = " << s.cols()
                                                    << " (0 means packed)");
    require_matrix_shape(s.rows(), s.projected_ld, op);
  }
}

StridedCopy4 heads_strided_copy(const HeadsShape& s, bool to_heads) {
  const std::int64_t d = s.head_dim(), L = s.len, N = s.heads;
  const std::int64_t heads_stride[4] = {N * L * d, L * d, d, 1};  // [B, N, L, d] contiguous
  const std::int64_t ld = s.ld();                                 // projected's row pitch
  const std::int64_t proj_stride[4] = {L * ld, d, ld, 1};         // a column block of projected
  const std::int64_t dims[4] = {s.batch, N, L, d};
  StridedCopy4 c;
  for (int k = 0; k < 4; ++k) {
    c.dims[k] = dims[k];
    c.out_stride[k] = to_heads ? heads_stride[k] : proj_stride[k];
    c.in_stride[k] = to_heads ? proj_stride[k] : heads_stride[k];
  }
  return c;
}

std::size_t qkv_bias_split_bwd_workspace_bytes(const HeadsShape& shape) {
  require_heads_shape(shape, "qkv_bias_split_bwd_workspace_bytes");
  return bias_grad_workspace_bytes(shape.rows(), shape.cols());
}

template <class T>
void launch_qkv_bias_split_fwd(T* heads_out, const T* projected, const T* bias, const HeadsShape& shape,
                               cudaStream_t stream) {
  SEQBENCH_NVTX_RANGE("qkv_bias_split_fwd");
  constexpr const char* op = "qkv_bias_split_fwd";
  require_heads_shape(shape, op);
  if (shape.elements() == 0) return;
  require_move<T, true>(op, heads_out, "heads_out", projected, "projected", shape);
  require_non_null(bias, op, "bias");
  require_disjoint(heads_out, tensor_bytes<T>(shape), bias,
                   static_cast<std::size_t>(shape.cols()) * sizeof(T), op, "heads_out", "bias");
  HeadsArgs<T> a = make_heads_args<T>(shape);
  a.out = heads_out;
  a.in = projected;
  a.bias = bias;
  launch_heads_tile<T, true, true, false>(a, stream);
}

template <class T>
void launch_qkv_bias_split_bwd(T* d_projected, T* dbias, const T* d_heads, const HeadsShape& shape,
                               void* workspace, std::size_t workspace_bytes, cudaStream_t stream) {
  SEQBENCH_NVTX_RANGE("qkv_bias_split_bwd");
  constexpr const char* op = "qkv_bias_split_bwd";
  require_heads_shape(shape, op);
  const std::int64_t rows = shape.rows(), cols = shape.cols();
  const std::size_t need = bias_grad_workspace_bytes(rows, cols);
  require_workspace(workspace, workspace_bytes, need, op);
  if (cols == 0) return;
  require_non_null(dbias, op, "dbias");
  if (rows > 0) {
    const std::size_t bytes = tensor_bytes<T>(shape), pbytes = projected_bytes<T>(shape),
                      bias_bytes = static_cast<std::size_t>(cols) * sizeof(T);
    require_move<T, false>(op, d_projected, "d_projected", d_heads, "d_heads", shape);
    require_disjoint(d_projected, pbytes, workspace, need, op, "d_projected", "workspace");
    require_disjoint(dbias, bias_bytes, d_projected, pbytes, op, "dbias", "d_projected");
    require_disjoint(dbias, bias_bytes, d_heads, bytes, op, "dbias", "d_heads");
    require_disjoint(dbias, bias_bytes, workspace, need, op, "dbias", "workspace");
    // The partials are written while other blocks still read d_heads.
    require_disjoint(workspace, need, d_heads, bytes, op, "workspace", "d_heads");
    HeadsArgs<T> a = make_heads_args<T>(shape);
    a.out = d_projected;
    a.in = d_heads;
    a.partials = static_cast<float*>(workspace);
    launch_heads_tile<T, false, false, true>(a, stream);
  }
  launch_bias_grad_reduce<T>(dbias, static_cast<const float*>(workspace), rows, cols, stream);
}

template <class T>
void launch_merge_heads(T* projected, const T* heads_in, const HeadsShape& shape, cudaStream_t stream) {
  SEQBENCH_NVTX_RANGE("merge_heads");
  constexpr const char* op = "merge_heads";
  require_heads_shape(shape, op);
  if (shape.elements() == 0) return;
  require_move<T, false>(op, projected, "projected", heads_in, "heads_in", shape);
  HeadsArgs<T> a = make_heads_args<T>(shape);
  a.out = projected;
  a.in = heads_in;
  launch_heads_tile<T, false, false, false>(a, stream);
}

template <class T>
void launch_split_heads(T* heads_out, const T* projected, const HeadsShape& shape, cudaStream_t stream) {
  SEQBENCH_NVTX_RANGE("split_heads");
  constexpr const char* op = "split_heads";
  require_heads_shape(shape, op);
  if (shape.elements() == 0) return;
  require_move<T, true>(op, heads_out, "heads_out", projected, "projected", shape);
  HeadsArgs<T> a = make_heads_args<T>(shape);
  a.out = heads_out;
  a.in = projected;
  launch_heads_tile<T, true, false, false>(a, stream);
}

template <class T>
void launch_strided_copy(T* out, const T* in, const StridedCopy4& copy, cudaStream_t stream) {
  SEQBENCH_NVTX_RANGE("strided_copy");
  constexpr const char* op = "strided_copy";
  std::int64_t n = 1;
  for (int k = 0; k < 4; ++k) {
    SEQBENCH_REQUIRE(copy.dims[k] >= 0 && copy.out_stride[k] >= 0 && copy.in_stride[k] >= 0,
                     op << ": dims[" << k << "] = " << copy.dims[k] << ", out_stride[" << k
                        << "] = " << copy.out_stride[k] << ", in_stride[" << k << "] = " << copy.in_stride[k]
                        << ": each must be >= 0");
  }
  for (int k = 0; k < 4; ++k) {
    if (copy.dims[k] == 0) return;  // nothing to copy
  }
  for (int k = 0; k < 4; ++k) {
    SEQBENCH_REQUIRE(n <= kMaxElements / copy.dims[k], op << ": dims " << copy.dims[0] << "x" << copy.dims[1]
                                                          << "x" << copy.dims[2] << "x" << copy.dims[3]
                                                          << " exceed 2^62 elements");
    n *= copy.dims[k];
  }
  const std::int64_t max_out = max_offset(copy, copy.out_stride, op, "out");
  const std::int64_t max_in = max_offset(copy, copy.in_stride, op, "in");
  // Distinct indices must write distinct elements: with the dims of extent > 1 sorted by output
  // stride (stably, so that the message names a fixed axis), each stride must exceed the largest
  // offset the smaller ones reach.
  int order[4] = {0, 1, 2, 3};
  std::stable_sort(order, order + 4, [&](int x, int y) { return copy.out_stride[x] < copy.out_stride[y]; });
  std::int64_t span = 0;
  for (const int k : order) {
    if (copy.dims[k] == 1) continue;
    SEQBENCH_REQUIRE(copy.out_stride[k] > span,
                     op << ": out_stride[" << k << "] = " << copy.out_stride[k]
                        << " makes distinct indices write the same element (needs > " << span << ")");
    span += (copy.dims[k] - 1) * copy.out_stride[k];
  }
  require_non_null(out, op, "out");
  require_non_null(in, op, "in");
  require_disjoint(out, static_cast<std::size_t>(max_out + 1) * sizeof(T), in,
                   static_cast<std::size_t>(max_in + 1) * sizeof(T), op, "out", "in");
  constexpr std::int64_t kMax32 = std::numeric_limits<std::int32_t>::max();
  if (n <= kMax32 && max_out <= kMax32 && max_in <= kMax32) {
    // Every dim is then <= 2^31 - 1, and so is every stride of a dim of extent >= 2; the stride of
    // an extent-1 dim (unbounded) is always multiplied by a zero index, whatever its truncation.
    StridedIndex32 s;
    for (int k = 1; k < 4; ++k) s.dims[k - 1] = FastDivmod(copy.dims[k]);
    for (int k = 0; k < 4; ++k) {
      s.out_stride[k] = static_cast<std::uint32_t>(copy.out_stride[k]);
      s.in_stride[k] = static_cast<std::uint32_t>(copy.in_stride[k]);
    }
    launch_strided_copy_kernel<T, std::uint32_t>(out, in, s, n, stream);
  } else {
    StridedIndex64 s;
    for (int k = 0; k < 4; ++k) {
      s.dims[k] = copy.dims[k];
      s.out_stride[k] = copy.out_stride[k];
      s.in_stride[k] = copy.in_stride[k];
    }
    launch_strided_copy_kernel<T, std::int64_t>(out, in, s, n, stream);
  }
}

// The explicit instantiations, in one place.
#define SEQBENCH_QKV_RESHAPE_INSTANTIATE(T)                                                            \
  template void launch_qkv_bias_split_fwd<T>(T*, const T*, const T*, const HeadsShape&, cudaStream_t); \
  template void launch_qkv_bias_split_bwd<T>(T*, T*, const T*, const HeadsShape&, void*, std::size_t,  \
                                             cudaStream_t);                                            \
  template void launch_merge_heads<T>(T*, const T*, const HeadsShape&, cudaStream_t);                  \
  template void launch_split_heads<T>(T*, const T*, const HeadsShape&, cudaStream_t);                  \
  template void launch_strided_copy<T>(T*, const T*, const StridedCopy4&, cudaStream_t);

SEQBENCH_QKV_RESHAPE_INSTANTIATE(float)
SEQBENCH_QKV_RESHAPE_INSTANTIATE(__half)
SEQBENCH_QKV_RESHAPE_INSTANTIATE(__nv_bfloat16)

#undef SEQBENCH_QKV_RESHAPE_INSTANTIATE

}  // namespace seqbench::kernels
