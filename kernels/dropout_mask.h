// The pieces the three dropout families (dropout, bias+act+dropout, bias+dropout+residual) share,
// so that none of them copies another:
//   1. keep bits: K consecutive keep decisions from K/8 Philox calls (one for K = 4), bit for bit
//      equal to philox_keep() and so to reference/dropout.h make_dropout_mask (host and device), each
//      decided by an integer compare against draw_threshold(p) (core/philox.h);
//   2. the bit-packed mask layout and its host emulation (what a CPU test compares against);
//   3. argument validation shared by the launchers (host);
//   4. the row-tiled [rows, cols] skeleton of the bias epilogues: a kernel template that applies
//      an element function with a per-column bias and an optional dropout mask, and optionally
//      reduces its results over rows into per-block column partials (the deterministic bias
//      gradient), plus the fixed-order kernel that sums the partials (device, .cu files only).
// Not a public API (namespace seqbench::kernels::dropout_detail): include it from kernels/*.cu, the
// families' suites and the tests that emulate the layout.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <type_traits>
#include <vector>

#include "core/byte_range.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/philox.h"
#include "kernels/dropout.h"
#include "kernels/packed.h"

namespace seqbench::kernels::dropout_detail {

// ---------------------------------------------------------------------------------------------
// 1. Keep bits (host and device).

// The factor applied to kept elements, computed once on the host and passed to the kernels:
// 1/(1-p) in float, and 0 for p = 1 (everything dropped: 0, not 0·inf = NaN).
SEQBENCH_HD inline float dropout_keep_scale(float p) {
  return p < 1.0f ? 1.0f / (1.0f - p) : 0.0f;
}

// Keep bits of the `count` (<= 32) consecutive elements first .. first+count-1: bit j is
// philox_keep(seed, offset, first + j, p) for keep = draw_threshold(p). Any `first`: a span that
// straddles Philox groups (8 draws each, core/philox.h) draws each group it touches once (at most
// count/8 + 1 calls).
SEQBENCH_HD inline std::uint32_t dropout_keep_bits(std::uint64_t seed, std::uint64_t offset,
                                                   std::uint64_t first, int count, DrawThreshold keep) {
  std::uint32_t bits = 0;
  std::uint64_t group = first >> 3;
  PhiloxWords words = philox_group(seed, offset, group);
  for (int j = 0; j < count; ++j) {
    const std::uint64_t index = first + static_cast<std::uint64_t>(j);
    if ((index >> 3) != group) {
      group = index >> 3;
      words = philox_group(seed, offset, group);
    }
    if (draw_passes(dropout_draw(words, static_cast<unsigned>(index & 7)), keep)) bits |= 1u << j;
  }
  return bits;
}

// The fast case of dropout_keep_bits for K whole elements (K = 4, or a multiple of 8 up to 32):
// for K >= 8 `first` a multiple of 8, so exactly K/8 Philox calls, each giving the draws of 8
// consecutive elements; for K = 4 (an fp32 vector) `first` a multiple of 4, so one call, of which
// the half that holds elements first .. first+3 is used. The vector paths guarantee the
// alignment (first is a multiple of their vector's K); the host build (simt, the cpu tests)
// aborts on a call that breaks it, which the device would answer with another element's bits.
template <int K>
SEQBENCH_HD inline std::uint32_t dropout_keep_bits_aligned(std::uint64_t seed, std::uint64_t offset,
                                                           std::uint64_t first, DrawThreshold keep) {
  static_assert(K == 4 || (K % 8 == 0 && K <= 32), "K must be 4 or a multiple of 8, at most 32");
#if !defined(__CUDA_ARCH__)
  constexpr std::uint64_t kAlign = K == 4 ? 4 : 8;
  if (first % kAlign != 0) {
    std::fprintf(stderr, "dropout_keep_bits_aligned<%d>: first = %llu is not a multiple of %llu\n", K,
                 static_cast<unsigned long long>(first), static_cast<unsigned long long>(kAlign));
    std::abort();
  }
#endif
  std::uint32_t bits = 0;
  if constexpr (K == 4) {
    const PhiloxWords words = philox_group(seed, offset, first >> 3);
    const bool upper = (first & 4) != 0;  // elements 4..7 of the group: words 2 and 3
    const std::uint32_t lo = upper ? words.w[2] : words.w[0];
    const std::uint32_t hi = upper ? words.w[3] : words.w[1];
    const std::uint32_t draws[4] = {lo & 0xffffu, lo >> 16, hi & 0xffffu, hi >> 16};
    SEQBENCH_DEVICE_UNROLL
    for (int k = 0; k < 4; ++k) bits |= (draw_passes(draws[k], keep) ? 1u : 0u) << k;
  } else {
    SEQBENCH_DEVICE_UNROLL
    for (int q = 0; q < K / 8; ++q) {
      const PhiloxWords words = philox_group(seed, offset, (first >> 3) + static_cast<std::uint64_t>(q));
      SEQBENCH_DEVICE_UNROLL
      for (int k = 0; k < 8; ++k) {
        bits |= (draw_passes(dropout_draw(words, static_cast<unsigned>(k)), keep) ? 1u : 0u) << (8 * q + k);
      }
    }
  }
  return bits;
}

// ---------------------------------------------------------------------------------------------
// 2. The bit-packed layout (kernels/dropout.h): bit i%8 of byte i/8, in whole uint32 words.

SEQBENCH_HD inline bool dropout_mask_bit(const std::uint8_t* mask, std::size_t i) {
  return ((mask[i >> 3] >> (i & 7)) & 1u) != 0;
}

// Host emulation of the packing: keep[i] != 0 becomes bit i; dropout_mask_bytes(n) bytes, the
// padding bits 0. A CPU test packs reference/ masks with this, a GPU test compares the kernel's.
inline std::vector<std::uint8_t> pack_dropout_mask(const std::uint8_t* keep, std::size_t n) {
  std::vector<std::uint8_t> packed(dropout_mask_bytes(n), 0);
  for (std::size_t i = 0; i < n; ++i) {
    if (keep[i] != 0) packed[i >> 3] = static_cast<std::uint8_t>(packed[i >> 3] | (1u << (i & 7)));
  }
  return packed;
}

// ---------------------------------------------------------------------------------------------
// 3. Argument validation (host). Each names the operation, the value and the limit.

inline void require_dropout_probability(float p, const char* op) {
  SEQBENCH_REQUIRE(p >= 0.0f && p <= 1.0f, op << ": dropout probability p = " << p << " is outside [0, 1]");
}

inline void require_non_null(const void* ptr, const char* op, const char* name) {
  SEQBENCH_REQUIRE(ptr != nullptr, op << ": " << name << " is null");
}

// Outputs are written through __restrict__ pointers, so no output may share a byte with an input
// (the two in-place cases, bias_act_dropout_bwd's and dropout_bwd_regenerate's dx == dy, run
// instances without __restrict__ and are checked by their launchers).
inline void require_disjoint(const void* out, std::size_t out_bytes, const void* in, std::size_t in_bytes,
                             const char* op, const char* out_name, const char* in_name) {
  SEQBENCH_REQUIRE(!bytes_overlap(out, out_bytes, in, in_bytes), op << ": output " << out_name
                                                                    << " overlaps input " << in_name
                                                                    << " (in-place is not supported)");
}

// For the launchers that may run in place: out may be in itself, but may not overlap it otherwise.
inline void require_same_or_disjoint(const void* out, const void* in, std::size_t bytes, const char* op,
                                     const char* out_name, const char* in_name) {
  SEQBENCH_REQUIRE(out == in || !bytes_overlap(out, bytes, in, bytes),
                   op << ": output " << out_name << " overlaps input " << in_name
                      << " without being it (in place means " << out_name << " == " << in_name << ")");
}

// [rows, cols] activations: sizes >= 0, cols <= 2^31 - 1 (one grid row of column tiles), and
// rows·cols representable with room to spare (the kernels index in 64 bits).
inline void require_matrix_shape(std::int64_t rows, std::int64_t cols, const char* op) {
  SEQBENCH_REQUIRE(rows >= 0 && cols >= 0, op << ": shape " << rows << "x" << cols << " is negative");
  SEQBENCH_REQUIRE(cols <= std::numeric_limits<std::int32_t>::max(),
                   op << ": cols " << cols << " > " << std::numeric_limits<std::int32_t>::max());
  SEQBENCH_REQUIRE(cols == 0 || rows <= (std::int64_t{1} << 62) / cols,
                   op << ": rows·cols = " << rows << "·" << cols << " exceeds 2^62 elements");
}

inline void require_workspace(const void* workspace, std::size_t have, std::size_t need, const char* op) {
  SEQBENCH_REQUIRE(have >= need, op << ": workspace of " << have << " bytes, needs " << need);
  if (need == 0) return;
  require_non_null(workspace, op, "workspace");
  SEQBENCH_REQUIRE(reinterpret_cast<std::uintptr_t>(workspace) % alignof(float) == 0,
                   op << ": workspace is not " << alignof(float) << "-byte aligned");
}

// ---------------------------------------------------------------------------------------------
// 4. The row-tiled skeleton of the bias epilogues.
//
// A block is kTileCols x kTileRows threads. threadIdx.x picks one vector of K = 16/sizeof(T)
// consecutive columns (so a block spans 32·K columns: 128 fp32 or 256 fp16/bf16); threadIdx.y
// picks every 8th row of the block's row range. grid = (ceil(cols / (32·K)), row_blocks). Each
// thread loads its K bias values once and keeps them in registers for all its rows.
//
// The row-range plan is a function of the shape only (never of the device), so the bias
// gradient's summation order, and with it the bitwise result, is the same on every GPU:
// about kTargetBlocks nominal 256-column blocks, at least kMinRowsPerBlock rows each, and never
// more than kTargetBlocks row blocks (so grid.y stays far below its 65535 limit and the column
// partials stay small next to the data: row_blocks·cols floats).
inline constexpr int kTileCols = 32;
inline constexpr int kTileRows = 8;
inline constexpr int kTileThreads = kTileCols * kTileRows;
inline constexpr std::int64_t kTargetBlocks = 1024;
inline constexpr std::int64_t kMinRowsPerBlock = 32;

// The final bias-gradient reduction's block (see bias_grad_reduce_kernel).
inline constexpr int kReduceCols = 32;
inline constexpr int kReduceRows = 16;

struct RowTilePlan {
  std::int64_t rows_per_block = 0;  // a multiple of kTileRows
  std::int64_t row_blocks = 0;      // grid.y; 0 when rows or cols is 0
};

inline RowTilePlan make_row_tile_plan(std::int64_t rows, std::int64_t cols) {
  RowTilePlan plan;
  if (rows <= 0 || cols <= 0) return plan;
  const auto ceil_div = [](std::int64_t a, std::int64_t b) { return (a + b - 1) / b; };
  const std::int64_t col_groups = ceil_div(cols, 256);
  const std::int64_t want_row_blocks = col_groups >= kTargetBlocks ? 1 : ceil_div(kTargetBlocks, col_groups);
  std::int64_t per_block = ceil_div(ceil_div(rows, want_row_blocks), kTileRows) * kTileRows;
  if (per_block < kMinRowsPerBlock) per_block = kMinRowsPerBlock;
  plan.rows_per_block = per_block;
  plan.row_blocks = ceil_div(rows, per_block);
  return plan;
}

// Bytes of the float column partials [row_blocks, cols] a bias-gradient backward needs.
inline std::size_t bias_grad_workspace_bytes(std::int64_t rows, std::int64_t cols) {
  if (rows <= 0 || cols <= 0) return 0;
  const RowTilePlan plan = make_row_tile_plan(rows, cols);
  return static_cast<std::size_t>(plan.row_blocks) * static_cast<std::size_t>(cols) * sizeof(float);
}

}  // namespace seqbench::kernels::dropout_detail

#if defined(__CUDACC__)

#include "core/cuda_check.h"

namespace seqbench::kernels::dropout_detail {

// The end of a row-tiled reduction: combines each thread's column sums `acc` (its rows, in
// increasing order) over the 8 row lanes in order, and writes one float per column of the block's
// 32·K columns to partials[blockIdx.y, col] (columns past `cols` skipped). Every thread of the
// block must call it (one barrier). This fixed order is the one bias_grad_reduce_kernel's
// partials assume; every deterministic bias gradient (the dropout families, launch_column_sum,
// the QKV split backward) goes through it, so their sums agree bitwise for the same values.
template <int K>
__device__ __forceinline__ void write_column_partials(const float (&acc)[K], float* partials,
                                                      std::int64_t cols) {
  // The block is kTileCols x kTileRows (launch_row_tile), so kTileCols here is blockDim.x, from
  // which row_tile_kernel builds its columns.
  __shared__ float lane_sums[kTileRows][kTileCols * K];
#pragma unroll
  for (int k = 0; k < K; ++k) lane_sums[threadIdx.y][threadIdx.x * K + k] = acc[k];
  __syncthreads();
  const int t = static_cast<int>(threadIdx.y) * kTileCols + static_cast<int>(threadIdx.x);
  for (int c = t; c < kTileCols * K; c += kTileThreads) {
    const std::int64_t col = static_cast<std::int64_t>(blockIdx.x) * kTileCols * K + c;
    if (col >= cols) continue;
    float sum = 0.0f;
#pragma unroll
    for (int y = 0; y < kTileRows; ++y) sum += lane_sums[y][c];
    partials[static_cast<std::int64_t>(blockIdx.y) * cols + col] = sum;
  }
}

// What one row-tiled launch works on. The element function decides what the inputs mean.
template <class T>
struct RowTileArgs {
  T* out = nullptr;           // [rows, cols]; null for a pure reduction (the unfused column sum)
  const T* in0 = nullptr;     // [rows, cols]
  const T* in1 = nullptr;     // [rows, cols], read when kInputs == 2
  const T* bias = nullptr;    // [cols], read when kBias
  float* partials = nullptr;  // [row_blocks, cols], written when kReduce
  std::int64_t rows = 0;
  std::int64_t cols = 0;
  std::int64_t rows_per_block = 0;
  DrawThreshold keep;  // draw_threshold(drop probability), used when kMask
  std::uint64_t seed = 0;
  std::uint64_t offset = 0;
  bool vector_path = false;  // cols % K == 0 and every pointer 16-byte aligned
};

// True when every non-null pointer is 16-byte aligned and rows are whole vectors, so that every
// thread's K columns are one Packed<T> access and start on a multiple of K, as
// dropout_keep_bits_aligned<K> requires.
template <class T>
bool row_tile_vector_ok(const RowTileArgs<T>& a) {
  constexpr int K = Packed<T>::kSize;
  return a.cols % K == 0 && is_vector_aligned_or_null(a.out) && is_vector_aligned_or_null(a.in0) &&
         is_vector_aligned_or_null(a.in1) && is_vector_aligned_or_null(a.bias);
}

// load_floats / store_floats: kernels/packed.h.

// The rows of one thread's column vector, row_begin + threadIdx.y, every kTileRows-th, up to
// row_end: row_tile_kernel runs it once with kWhole true (the vector path, every vector when
// RowTileArgs::vector_path and the thread's K columns are whole) or once with kWhole false (the
// element path), so that the vector loop, the one that moves the data at every shape the suites
// time, holds no branch on the path: before, each row chose its load, keep-bit and store paths
// at run time, and the loop held both, and ptxas recomputed the Philox key schedule and the path
// predicates every row: 27.2 instructions an element in the bf16 ReLU forward's vector path, 19.3
// split (tools/issue_budget.py; kernels/NOTES-dropout-bias.md). Both loops compute what the one
// loop did. The price is registers, hence row_tile_kernel's launch bounds. A function
// with __restrict__ parameters rather than a lambda: capturing the kernel's __restrict__ locals by
// reference lost them, and with them the read-only loads (SASS: LDG.E.128 for LDG.E.128.CONSTANT).
template <bool kWhole, class T, int kInputs, bool kMask, bool kReduce, bool kOutIsIn0, int K, class Fn>
__device__ __forceinline__ void row_tile_rows(
    std::conditional_t<kOutIsIn0, T*, T* __restrict__> out,
    std::conditional_t<kOutIsIn0, const T*, const T* __restrict__> in0,
    std::conditional_t<kOutIsIn0, const T*, const T* __restrict__> in1, const RowTileArgs<T>& args,
    std::int64_t col0, int count, std::int64_t row_begin, std::int64_t row_end, const float (&bias)[K],
    float (&acc)[K], const Fn& fn) {
  const std::int64_t cols = args.cols;
  // Two rows in flight on the vector path; one on the element path (a row's last, partial vector,
  // or every vector of a misaligned call), which holds the general keep-bit loop: unrolled too, it
  // made ptxas spill a register in the unfused GELU-tanh backward's 16-bit instances.
  [[maybe_unused]] constexpr int kUnroll = kWhole ? 2 : 1;  // unused where simt empties the pragma
#pragma unroll kUnroll
  for (std::int64_t r = row_begin + threadIdx.y; r < row_end; r += kTileRows) {
    const std::int64_t first = r * cols + col0;
    float a[K], b[K];
    load_floats<T, K>(in0 + first, a, count, kWhole);
    if constexpr (kInputs == 2) {
      load_floats<T, K>(in1 + first, b, count, kWhole);
    } else {
#pragma unroll
      for (int k = 0; k < K; ++k) b[k] = 0.0f;
    }
    std::uint32_t keep = ~0u;
    if constexpr (kMask) {
      const auto index = static_cast<std::uint64_t>(first);
      if constexpr (kWhole) {
        keep = dropout_keep_bits_aligned<K>(args.seed, args.offset, index, args.keep);
      } else {
        keep = dropout_keep_bits(args.seed, args.offset, index, count, args.keep);
      }
    }
    float result[K];
#pragma unroll
    for (int k = 0; k < K; ++k) result[k] = fn(a[k], b[k], bias[k], ((keep >> k) & 1u) != 0);
    if constexpr (kReduce) {
#pragma unroll
      for (int k = 0; k < K; ++k) acc[k] += result[k];
    }
    if (out != nullptr) store_floats<T, K>(out + first, result, count, kWhole);
  }
}

// out[r, c] = fn(in0[r, c], in1[r, c], bias[c], keep(r·cols + c)) in float, rounded once to T;
// with kReduce, also partials[blockIdx.y, c] = Σ over the block's rows of that float value, in a
// fixed order (each thread's rows in increasing order, then the 8 row lanes in order).
//
// kOutIsIn0: out and in0 are the same array (in place). Each element is read and then written by
// the one thread that owns it, and by no other, so in place is race-free; what changes is that no
// pointer of the instance is __restrict__, so that the compiler may neither load in0 through the
// read-only (non-coherent) path nor move a later row's in0 load above an earlier row's store.
// Every pointer, in1 included: nvcc 13.0 was seen to turn ALL of a kernel's global loads into
// ld.global.nc once ANY one local pointer is __restrict__ (the PTX of an instance that kept in1
// __restrict__ loaded in0 with ld.global.nc). The non-in-place instances are unchanged.
//
// At least 3 blocks an SM (at most 80 registers), which is what ptxas chose for the largest
// instances when the row loop was one: the split loops keep the Philox key schedule in registers,
// and left alone ptxas took up to 104 in some instances (2 blocks an SM) and spilled in another
// (the fused ReLU backward, fp16) at 80. 3 blocks keep 24 warps an SM and, at 2 rows x 16 bytes
// of each input a thread, 24 KB of loads in flight an SM for one input, against the ~16 KB that an
// H200's copy rate asks at 1 µs of latency.
template <class T, int kInputs, bool kBias, bool kMask, bool kReduce, bool kOutIsIn0, class Fn>
__global__ void __launch_bounds__(kTileThreads, 3) row_tile_kernel(const RowTileArgs<T> args, const Fn fn) {
  constexpr int K = Packed<T>::kSize;
  using OutPtr = std::conditional_t<kOutIsIn0, T*, T* __restrict__>;
  using InPtr = std::conditional_t<kOutIsIn0, const T*, const T* __restrict__>;
  OutPtr out = args.out;
  InPtr in0 = args.in0;
  InPtr in1 = args.in1;
  const std::int64_t cols = args.cols;
  // blockDim.x (== kTileCols), not the constant: with the constant, nvcc 13.0 emitted a whole
  // vector's store as K separate st.global (4 of 4 bytes or 8 of 2 bytes: seen in the PTX and the
  // SASS) instead of one 16-byte st.global.v4, while the loads stayed 16 bytes wide; likely because
  // the address's low bits were then known and its store vectorizer no longer matched the K
  // offsets. The cpu test kernels_ptx_vector_stores (tools/ptx_vector_check.py) checks the PTX.
  const std::int64_t col0 = (static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * K;
  const int count = col0 < cols ? static_cast<int>(cols - col0 < K ? cols - col0 : K) : 0;
  const bool whole = args.vector_path && count == K;

  float bias[K];
#pragma unroll
  for (int k = 0; k < K; ++k) bias[k] = 0.0f;
  if constexpr (kBias) {
    if (count > 0) load_floats<T, K>(args.bias + col0, bias, count, whole);
  }

  float acc[K];
#pragma unroll
  for (int k = 0; k < K; ++k) acc[k] = 0.0f;

  const std::int64_t row_begin = static_cast<std::int64_t>(blockIdx.y) * args.rows_per_block;
  const std::int64_t row_end =
      args.rows - row_begin < args.rows_per_block ? args.rows : row_begin + args.rows_per_block;
  // The row loop twice, once with `whole` a constant of each value: see row_tile_rows.
  if (whole) {
    row_tile_rows<true, T, kInputs, kMask, kReduce, kOutIsIn0>(out, in0, in1, args, col0, count, row_begin,
                                                               row_end, bias, acc, fn);
  } else if (count > 0) {
    row_tile_rows<false, T, kInputs, kMask, kReduce, kOutIsIn0>(out, in0, in1, args, col0, count, row_begin,
                                                                row_end, bias, acc, fn);
  }

  if constexpr (kReduce) write_column_partials<K>(acc, args.partials, cols);
}

// kOutIsIn0: see row_tile_kernel; the caller has checked that args.out == args.in0.
template <class T, int kInputs, bool kBias, bool kMask, bool kReduce, bool kOutIsIn0 = false, class Fn>
void launch_row_tile(RowTileArgs<T> args, const Fn& fn, cudaStream_t stream) {
  constexpr int K = Packed<T>::kSize;
  const RowTilePlan plan = make_row_tile_plan(args.rows, args.cols);
  if (plan.row_blocks == 0) return;
  args.rows_per_block = plan.rows_per_block;
  args.vector_path = row_tile_vector_ok(args);
  const std::int64_t col_tiles = (args.cols + kTileCols * K - 1) / (kTileCols * K);
  const dim3 grid(static_cast<unsigned>(col_tiles), static_cast<unsigned>(plan.row_blocks));
  row_tile_kernel<T, kInputs, kBias, kMask, kReduce, kOutIsIn0, Fn>
      <<<grid, dim3(kTileCols, kTileRows), 0, stream>>>(args, fn);
  SEQBENCH_CUDA_CHECK_LAUNCH();
}

// launch_row_tile for the dropout kernels: p = 0 keeps every element (philox_keep keeps u >= p, and
// u >= 0 always; the keep scale is 1), so it runs the kMask = false instance, the same bits without
// the Philox draws (one Philox call per thread-row in both widths, K = 8 or 4, and their integer
// work). Sets args.keep.
template <class T, int kInputs, bool kBias, bool kReduce, bool kOutIsIn0 = false, class Fn>
void launch_row_tile_dropout(RowTileArgs<T> args, float p, const Fn& fn, cudaStream_t stream) {
  args.keep = draw_threshold(p);
  if (p == 0.0f)
    launch_row_tile<T, kInputs, kBias, false, kReduce, kOutIsIn0>(args, fn, stream);
  else
    launch_row_tile<T, kInputs, kBias, true, kReduce, kOutIsIn0>(args, fn, stream);
}

// dbias[c] = Σ_b partials[b, c] over b = 0 .. row_blocks-1 in a fixed order: row lane y sums
// b = y, y+16, ... in increasing order, then the 16 lanes are added in order. Block
// kReduceCols x kReduceRows, one column per threadIdx.x (coalesced across columns).
// row_blocks = 0 writes zeros.

template <class T>
__global__ void __launch_bounds__(kReduceCols* kReduceRows)
    bias_grad_reduce_kernel(T* __restrict__ dbias, const float* __restrict__ partials,
                            std::int64_t row_blocks, std::int64_t cols) {
  __shared__ float lane_sums[kReduceRows][kReduceCols + 1];  // +1: no bank conflicts on the column read
  const std::int64_t col = static_cast<std::int64_t>(blockIdx.x) * kReduceCols + threadIdx.x;
  float sum = 0.0f;
  if (col < cols) {
    for (std::int64_t b = threadIdx.y; b < row_blocks; b += kReduceRows) sum += partials[b * cols + col];
  }
  lane_sums[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y == 0 && col < cols) {
    float total = 0.0f;
#pragma unroll
    for (int y = 0; y < kReduceRows; ++y) total += lane_sums[y][threadIdx.x];
    dbias[col] = from_float<T>(total);
  }
}

template <class T>
void launch_bias_grad_reduce(T* dbias, const float* partials, std::int64_t rows, std::int64_t cols,
                             cudaStream_t stream) {
  if (cols == 0) return;
  const RowTilePlan plan = make_row_tile_plan(rows, cols);
  const std::int64_t blocks = (cols + kReduceCols - 1) / kReduceCols;
  bias_grad_reduce_kernel<T><<<static_cast<unsigned>(blocks), dim3(kReduceCols, kReduceRows), 0, stream>>>(
      dbias, partials, plan.row_blocks, cols);
  SEQBENCH_CUDA_CHECK_LAUNCH();
}

}  // namespace seqbench::kernels::dropout_detail

#endif  // __CUDACC__
