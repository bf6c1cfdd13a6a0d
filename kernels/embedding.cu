#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cub/block/block_scan.cuh>
#include <cub/device/device_radix_sort.cuh>
#include <limits>
#include <optional>
#include <type_traits>

#include "core/cuda_check.h"
#include "core/nvtx.h"
#include "kernels/dropout_mask.h"
#include "kernels/embedding.h"
#include "kernels/vector_atomic.cuh"

namespace seqbench::kernels {

using namespace dropout_detail;

namespace {

constexpr int kWarps = 8;  // slots (tokens) per block in the token-tile kernels; warps per block
constexpr int kThreads = 32 * kWarps;
constexpr std::int64_t kMaxTokens = std::numeric_limits<std::int32_t>::max();
constexpr std::int64_t kMaxRows = std::numeric_limits<std::int32_t>::max() - 1;  // + a sentinel key
constexpr std::int64_t kMaxSinusoidPosition = std::int64_t{1} << 24;             // exact in float
constexpr std::size_t kAlign = 256;

// ---------------------------------------------------------------------------------------------
// Tokens are tiled flat: warp w of block x takes token i = 8x + w of the B·L tokens (b = i / L,
// l = i % L), so no warp idles whatever L is. nonpad_count positions come from the positions
// pre-pass (embedding_positions_kernel) through the caller's workspace.

struct TileArgs {
  const std::int32_t* tokens = nullptr;
  const std::int32_t* positions = nullptr;  // nonpad_count: position(b, l) per token (pre-pass)
  std::uint32_t n = 0, len = 0;             // B·L <= 2^31 - 1
  std::int64_t vocab = 0;
  std::int32_t padding_idx = -1;
  std::int64_t position_offset = 0;
};

struct Slot {
  bool active = false;   // i < B·L
  bool padding = false;  // token == padding_idx
  bool valid = false;    // active, not padding, token in [0, vocab)
  std::int32_t token = 0;
  std::int64_t index = 0;     // b·L + l
  std::int64_t position = 0;  // position(b, l), padding included
};

__device__ __forceinline__ bool is_padding(std::int32_t token, std::int32_t padding_idx) {
  return padding_idx >= 0 && token == padding_idx;
}

// Token i of the flat tiling; inactive past B·L.
template <bool kNonpad>
__device__ __forceinline__ Slot token_slot(const TileArgs& a, std::uint32_t i) {
  Slot s;
  s.index = i;
  s.active = i < a.n;
  if (s.active) {
    s.token = a.tokens[i];
    s.padding = is_padding(s.token, a.padding_idx);
    s.valid = !s.padding && s.token >= 0 && s.token < a.vocab;
    s.position = kNonpad ? static_cast<std::int64_t>(a.positions[i]) : a.position_offset + i % a.len;
  }
  return s;
}

__device__ __forceinline__ std::uint32_t warp_token() {
  return blockIdx.x * static_cast<std::uint32_t>(kWarps) + threadIdx.x / 32;
}

// The positions pre-pass: block b scans row b (256 threads, 4 consecutive slots a thread, 1024
// slots a step; cub::BlockScan of the per-thread non-padding counts) and writes
// positions[b·L + l] = offset + (slot: l | nonpad_count: non-padding tokens before l), padding
// slots included. Traffic: B·L·4 read + B·L·4 written.
struct PositionArgs {
  const std::int32_t* tokens = nullptr;
  std::int32_t* positions = nullptr;
  std::int64_t len = 0;
  std::int32_t padding_idx = -1;
  std::int32_t position_offset = 0;  // offset + L <= 2^31 - 2
};

template <bool kNonpad>
__device__ __forceinline__ void scan_positions(const PositionArgs& a, std::int64_t row_index) {
  constexpr int kPer = 4;
  using Scan = cub::BlockScan<int, kThreads>;
  __shared__ typename Scan::TempStorage scan;
  const std::int64_t row = row_index * a.len;
  const std::int32_t* tokens = a.tokens + row;
  std::int32_t* out = a.positions + row;
  std::int32_t before = 0;  // non-padding tokens before this step
  for (std::int64_t l0 = 0; l0 < a.len; l0 += kThreads * kPer) {
    const std::int64_t l = l0 + static_cast<std::int64_t>(threadIdx.x) * kPer;
    if constexpr (kNonpad) {
      bool nonpad[kPer];
      int count = 0;
#pragma unroll
      for (int q = 0; q < kPer; ++q) {
        nonpad[q] = l + q < a.len && !is_padding(tokens[l + q], a.padding_idx);
        count += nonpad[q] ? 1 : 0;
      }
      int prefix = 0, total = 0;
      Scan(scan).ExclusiveSum(count, prefix, total);
      __syncthreads();  // the scan storage is reused by the next step
      std::int32_t at = a.position_offset + before + prefix;
#pragma unroll
      for (int q = 0; q < kPer; ++q) {
        if (l + q < a.len) out[l + q] = at;
        at += nonpad[q] ? 1 : 0;
      }
      before += total;
    } else {
#pragma unroll
      for (int q = 0; q < kPer; ++q) {
        if (l + q < a.len) out[l + q] = a.position_offset + static_cast<std::int32_t>(l + q);
      }
    }
  }
}

template <bool kNonpad>
__global__ void __launch_bounds__(kThreads) embedding_positions_kernel(const PositionArgs a) {
  scan_positions<kNonpad>(a, blockIdx.x);
}

// Sinusoids. The per-column frequencies f_k = 10000^(-k/(half-1)) (1 for half = 1) are computed
// in double (sinusoid_frequency: once per launch by the forward's pre-pass for the computed
// path, once per column by the pre-pass's table blocks) and kept as two floats hi + lo
// (|f - hi - lo| <= 2^-48·f). The angle θ = position·f (position < 2^24, exact in float) is
// formed as an unevaluated sum θ_hi + θ_lo (θ_hi + e = position·hi exactly by an FMA, θ_lo =
// position·lo + e), reduced by 2π = C1 + C2 (two floats) with n = rint(θ_hi/2π): r = θ_hi - n·C1
// (exact: a multiple of 2^-21 below 8 in magnitude), - n·C2, + θ_lo, and sinf/cosf see |r| < 8,
// their fast accurate path. Error of the value, whatever the position (derived in
// suites/operators/embedding.cu): <= 16·u_f32 absolute, instead of ~24·u_f32·position for θ
// computed in plain float.
struct SinusoidArgs {
  const float2* freq = nullptr;  // [half]: hi, lo (the computed path)
  std::int64_t half = 0;
  double log2_step = 0.0;  // log2 f_k = k·log2_step
  float two_pi_hi = 0.0f, two_pi_lo = 0.0f, inv_two_pi = 0.0f;
};

__device__ __forceinline__ float2 sinusoid_frequency(std::int64_t k, double log2_step) {
  const double f = exp2(static_cast<double>(k) * log2_step);
  const auto hi = static_cast<float>(f);
  return make_float2(hi, static_cast<float>(f - static_cast<double>(hi)));
}

// sin or cos of position·f (f = hi + lo), as described above.
__device__ __forceinline__ float sinusoid_value(float position, float2 f, bool is_sin,
                                                const SinusoidArgs& s) {
  const float theta_hi = position * f.x;
  const float err = fmaf(position, f.x, -theta_hi);  // exact
  const float theta_lo = fmaf(position, f.y, err);
  const float n = rintf(theta_hi * s.inv_two_pi);
  float r = fmaf(-n, s.two_pi_hi, theta_hi);  // exact
  r = fmaf(-n, s.two_pi_lo, r);
  r += theta_lo;
  return is_sin ? sinf(r) : cosf(r);
}

__device__ __forceinline__ float sinusoid(float position, std::int64_t col, const SinusoidArgs& s) {
  if (col >= 2 * s.half) return 0.0f;  // the odd H's last column
  const bool is_sin = col < s.half;
  return sinusoid_value(position, s.freq[is_sin ? col : col - s.half], is_sin, s);
}

// The forward's pre-pass: whatever the lookup needs written before it starts, in one launch of
// three consecutive block ranges (any of them empty):
//   [0, position_blocks): the nonpad_count positions, block b scanning row b as
//     embedding_positions_kernel does;
//   then table_col_blocks × table_row_blocks blocks: the per-launch sinusoid table,
//     table[r, c] = sinusoid(first_position + r, c), the very values the computed path forms per
//     element (bitwise: the same frequency and value functions), a thread per column computing its
//     own frequency (the double exp2 is then shared by its ~kTableRowsPerThread rows), block row y
//     taking rows y, y + table_row_blocks, ... (no index division);
//   then freq_blocks blocks: the computed path's floor(H/2) frequencies, a thread each.
// The jobs are independent and each is a few µs of latency or of sinf, far from filling the GPU:
// in one grid they overlap, and a graph of the forward has one node (and one launch gap) fewer.
constexpr std::int64_t kTableRowsPerThread = 16;
struct FwdPrepassArgs {
  PositionArgs positions;
  std::int64_t position_blocks = 0;
  float* table = nullptr;  // [rows, hidden]
  std::int64_t rows = 0, hidden = 0, first_position = 0;
  std::int64_t table_col_blocks = 0, table_row_blocks = 0;
  float2* freq = nullptr;  // [half]
  std::int64_t freq_blocks = 0;
  SinusoidArgs sinusoid;
  std::int64_t blocks() const { return position_blocks + table_col_blocks * table_row_blocks + freq_blocks; }
};

__global__ void __launch_bounds__(kThreads) embedding_fwd_prepass_kernel(const FwdPrepassArgs a) {
  std::int64_t block = blockIdx.x;
  if (block < a.position_blocks) {
    scan_positions<true>(a.positions, block);
    return;
  }
  block -= a.position_blocks;
  const std::int64_t table_blocks = a.table_col_blocks * a.table_row_blocks;
  if (block < table_blocks) {
    const std::int64_t col = (block % a.table_col_blocks) * kThreads + threadIdx.x;
    if (col >= a.hidden) return;
    const SinusoidArgs& s = a.sinusoid;
    const bool zero = col >= 2 * s.half;  // the odd H's last column
    const bool is_sin = col < s.half;
    const float2 f =
        zero ? make_float2(0.0f, 0.0f) : sinusoid_frequency(is_sin ? col : col - s.half, s.log2_step);
    for (std::int64_t r = block / a.table_col_blocks; r < a.rows; r += a.table_row_blocks)
      a.table[r * a.hidden + col] =
          zero ? 0.0f : sinusoid_value(static_cast<float>(a.first_position + r), f, is_sin, s);
    return;
  }
  const std::int64_t k = (block - table_blocks) * kThreads + threadIdx.x;
  if (k < a.sinusoid.half) a.freq[k] = sinusoid_frequency(k, a.sinusoid.log2_step);
}

// Where the forward's position values come from (see launch_embedding_fwd).
enum class PositionSource { learned, sinusoid_table, sinusoid_computed };

// K floats of a float table row: K / 4 Packed<float> loads when `whole` (the row and column
// 16-byte aligned), else `count` scalar loads (the rest 0).
template <int K>
__device__ __forceinline__ void load_table_floats(const float* src, float (&v)[K], int count, bool whole) {
  if (whole) {
#pragma unroll
    for (int j = 0; j < K; j += 4) {
      const Packed<float> packed = Packed<float>::load(src + j);
#pragma unroll
      for (int k = 0; k < 4; ++k) v[j + k] = packed.v[k];
    }
  } else {
#pragma unroll
    for (int k = 0; k < K; ++k) v[k] = k < count ? src[k] : 0.0f;
  }
}

template <class T>
struct FwdArgs {
  T* y = nullptr;
  const T* token_table = nullptr;
  const T* position_table = nullptr;
  const float* sinusoid_table = nullptr;  // [L, H] rows for positions position_offset + r
  std::int64_t position_offset = 0;
  TileArgs tile;
  SinusoidArgs sinusoid;
  std::int64_t hidden = 0;
  float scale = 1.0f;
  DrawThreshold keep;  // draw_threshold(dropout p)
  float keep_scale = 1.0f;
  std::uint64_t seed = 0, offset = 0;
  bool vector_path = false;  // H % K == 0 and y and the tables (the sinusoid table too) 16-byte aligned
};

// Elements of a row's K-vector at column c0 (c0 >= 0, a multiple of K): K, the tail's H - c0, or
// 0 past the row. kWhole (the vector path: H % K == 0) makes it K or 0, a fact the compiler then
// uses (the same value).
template <int K, bool kWhole = false>
__device__ __forceinline__ int vector_count(std::int64_t c0, std::int64_t hidden) {
  if (c0 >= hidden) return 0;
  return kWhole ? K : static_cast<int>(hidden - c0 < K ? hidden - c0 : K);
}

constexpr int kFwdMinBlocks = 2;  // embedding_fwd_kernel's launch bound (see there)

// A lane's vectors per step: all loads of a step are issued before any use (H <= 4·32·K, i.e.
// 512 fp32 or 1024 16-bit columns, is a single step).
constexpr int kUnroll = 4;

// The row of a valid token (not padding, id in [0, vocab)): y = (token row · scale + position
// row) ⊙ keep · keep_scale, a lane's vectors K·lane + 32·K·j. kWhole: the vector path
// (a.vector_path: H % K == 0 and the tensors 16-byte aligned), where every vector of the row is
// whole, so its loads, keep bits and store take their 16-byte forms with no per-vector test; the
// other instance decides each vector by its count. One instance a path, and the padding and
// invalid rows left to the caller, so that the step ptxas schedules is the straight line the data
// takes. When one body chose per vector, its vector path ran 28.3 instructions an element (bf16,
// sinusoid table) against 18.9 now: zeroed and NaN-filled registers, 64-bit counts and branch
// regions a vector, and a predicated scalar twin of each table load (tools/issue_budget.py; nvcc
// 13.0, sm_90). A function with __restrict__ parameters, not a lambda over the kernel's restrict
// locals, so that the token and position rows keep their read-only loads.
template <class T, PositionSource kSource, bool kWhole>
__device__ __forceinline__ void embedding_fwd_valid_row(const FwdArgs<T>& a, const Slot& s, const int lane,
                                                        T* __restrict__ out, const T* __restrict__ tok_row,
                                                        const T* __restrict__ pos_row,
                                                        const float* __restrict__ sin_row) {
  constexpr int K = Packed<T>::kSize;
  constexpr bool kLearned = kSource == PositionSource::learned;
  constexpr bool kTable = kSource == PositionSource::sinusoid_table;
  const std::int64_t hidden = a.hidden;
  const float position = static_cast<float>(s.position);
  const auto row_first = static_cast<std::uint64_t>(s.index * hidden);
  for (std::int64_t base = static_cast<std::int64_t>(lane) * K; base < hidden; base += kUnroll * 32 * K) {
    // A vector past the row has count 0 and, the vectors being in increasing order, so do the
    // ones after it; its t and q are never read.
    float t[kUnroll][K], q[kUnroll][K];
    int count[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const std::int64_t c0 = base + u * 32 * K;
      count[u] = vector_count<K, kWhole>(c0, hidden);
      if (count[u] > 0) {
        load_floats<T, K>(tok_row + c0, t[u], count[u], kWhole);
        if constexpr (kLearned) load_floats<T, K>(pos_row + c0, q[u], count[u], kWhole);
        if constexpr (kTable) load_table_floats<K>(sin_row + c0, q[u], count[u], kWhole);
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (count[u] == 0) break;  // the later vectors are past the row too
      const std::int64_t c0 = base + u * 32 * K;
      if constexpr (kSource == PositionSource::sinusoid_computed) {
#pragma unroll
        for (int k = 0; k < K; ++k) q[u][k] = k < count[u] ? sinusoid(position, c0 + k, a.sinusoid) : 0.0f;
      }
      // On the vector path first is a multiple of K: one Philox group (8 draws), half of it in fp32.
      const std::uint64_t first = row_first + static_cast<std::uint64_t>(c0);
      const std::uint32_t keep = kWhole ? dropout_keep_bits_aligned<K>(a.seed, a.offset, first, a.keep)
                                        : dropout_keep_bits(a.seed, a.offset, first, count[u], a.keep);
      float v[K];
#pragma unroll
      for (int k = 0; k < K; ++k)
        v[k] = fmaf(t[u][k], a.scale, q[u][k]) * (((keep >> k) & 1u) != 0 ? a.keep_scale : 0.0f);
      store_floats<T, K>(out + c0, v, count[u], kWhole);
    }
  }
}

// One warp a token (warp_token()); the row's lanes as in embedding_fwd_valid_row. A padding
// token's row is zeros; a token outside [0, vocab) gets a row of NaN (never a read out of the
// table), so that it shows.
//
// At least 2 blocks an SM (at most 128 registers): with the row body one instance a path, ptxas
// (nvcc 13.0, sm_90), left to itself, held the fp32 and the computed-sinusoid instances at 80
// registers and spilled 8-24 bytes; with the bound the 16-bit ones take 108-128 (2 blocks an SM, as
// the 97 of the one-body kernel did) and fp32 72-88 (3 or 2 blocks, from 4), no spills. 2 blocks of 8
// warps keep 32-64 KB of row loads in flight an SM (16 B x 4 a lane a tensor).
template <class T, PositionSource kSource, bool kNonpad>
__global__ void __launch_bounds__(kThreads, kFwdMinBlocks) embedding_fwd_kernel(const FwdArgs<T> a) {
  constexpr int K = Packed<T>::kSize;
  constexpr bool kLearned = kSource == PositionSource::learned;
  constexpr bool kTable = kSource == PositionSource::sinusoid_table;
  const Slot s = token_slot<kNonpad>(a.tile, warp_token());
  if (!s.active) return;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const std::int64_t hidden = a.hidden;
  T* const out = a.y + s.index * hidden;
  if (!s.valid) {
    float fill[K];
#pragma unroll
    for (int k = 0; k < K; ++k) fill[k] = s.padding ? 0.0f : __int_as_float(0x7fc00000);  // quiet NaN
    for (std::int64_t c0 = static_cast<std::int64_t>(lane) * K; c0 < hidden; c0 += 32 * K) {
      const int count = vector_count<K>(c0, hidden);
      store_floats<T, K>(out + c0, fill, count, a.vector_path && count == K);
    }
    return;
  }
  const T* const tok_row = a.token_table + static_cast<std::int64_t>(s.token) * hidden;
  const T* const pos_row = kLearned ? a.position_table + s.position * hidden : nullptr;
  const float* const sin_row =
      kTable ? a.sinusoid_table + (s.position - a.position_offset) * hidden : nullptr;
  if (a.vector_path)
    embedding_fwd_valid_row<T, kSource, true>(a, s, lane, out, tok_row, pos_row, sin_row);
  else
    embedding_fwd_valid_row<T, kSource, false>(a, s, lane, out, tok_row, pos_row, sin_row);
}

// ---------------------------------------------------------------------------------------------
// Atomic adds of K floats into T: one vector reduction when whole (kernels/vector_atomic.cuh),
// else `count` scalar atomics.

template <class T, int K>
__device__ __forceinline__ void atomic_add_floats(T* dst, const float (&v)[K], int count, bool whole) {
  static_assert(K == Packed<T>::kSize, "one 16-byte vector");
  if (whole) {
    atomic_add_vector<T>(dst, v);
    return;
  }
#pragma unroll
  for (int k = 0; k < K; ++k) {
    if (k < count) atomicAdd(dst + k, from_float<T>(v[k]));
  }
}

template <class T>
struct BwdArgs {
  T* d_token_table = nullptr;
  T* d_position_table = nullptr;
  const T* dy = nullptr;
  TileArgs tile;
  std::int64_t hidden = 0;
  float scale = 1.0f;
  DrawThreshold keep;  // draw_threshold(dropout p)
  float keep_scale = 1.0f;
  std::uint64_t seed = 0, offset = 0;
  bool vector_path = false;  // H % K == 0, dy and the gradient tables 16-byte aligned
};

// At least 3 blocks an SM (at most 85 registers): left to itself, ptxas (nvcc 13.0, sm_90) gave the
// 16-bit sinusoidal instances 64 registers and an 8-byte spill once their adds became vector
// reductions, and the 16-bit learned one 126 registers (2 blocks an SM); with the bound they take
// 72 and 80 (since the row body is one instance a path), no spills. 3 blocks of 8 warps keep 48 KB
// of dy loads in flight an SM (16 B x 4 a lane), several times what the copy rate needs.
constexpr int kBwdAtomicMinBlocks = 3;

// The row of a valid token: tok_row += scale · (dy ⊙ keep · keep_scale) (and pos_row += the
// unscaled term), a lane's vectors as in the forward. kWhole: the vector path, every vector whole
// (one instance a path, for the forward's reason: embedding_fwd_valid_row).
template <class T, bool kLearned, bool kWhole>
__device__ __forceinline__ void embedding_bwd_atomic_row(const BwdArgs<T>& a, const Slot& s, const int lane,
                                                         const T* __restrict__ dy, T* tok_row, T* pos_row) {
  constexpr int K = Packed<T>::kSize;
  const std::int64_t hidden = a.hidden;
  const auto row_first = static_cast<std::uint64_t>(s.index * hidden);
  for (std::int64_t base = static_cast<std::int64_t>(lane) * K; base < hidden; base += kUnroll * 32 * K) {
    // All of the step's dy loads first, then the atomics. A vector past the row has count 0, as
    // have the ones after it; its g is never read.
    float g[kUnroll][K];
    int count[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const std::int64_t c0 = base + u * 32 * K;
      count[u] = vector_count<K, kWhole>(c0, hidden);
      if (count[u] > 0) load_floats<T, K>(dy + c0, g[u], count[u], kWhole);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (count[u] == 0) break;  // the later vectors are past the row too
      const std::int64_t c0 = base + u * 32 * K;
      const std::uint64_t first = row_first + static_cast<std::uint64_t>(c0);
      const std::uint32_t keep = kWhole ? dropout_keep_bits_aligned<K>(a.seed, a.offset, first, a.keep)
                                        : dropout_keep_bits(a.seed, a.offset, first, count[u], a.keep);
      float sg[K];
#pragma unroll
      for (int k = 0; k < K; ++k) {
        g[u][k] *= ((keep >> k) & 1u) != 0 ? a.keep_scale : 0.0f;
        sg[k] = a.scale * g[u][k];
      }
      atomic_add_floats<T, K>(tok_row + c0, sg, count[u], kWhole);
      if constexpr (kLearned) atomic_add_floats<T, K>(pos_row + c0, g[u], count[u], kWhole);
    }
  }
}

// One warp a token; padding and invalid tokens send no gradient.
template <class T, bool kLearned, bool kNonpad>
__global__ void __launch_bounds__(kThreads, kBwdAtomicMinBlocks)
    embedding_bwd_atomic_kernel(const BwdArgs<T> a) {
  const Slot s = token_slot<kNonpad>(a.tile, warp_token());
  if (!s.valid) return;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const std::int64_t hidden = a.hidden;
  const T* const dy = a.dy + s.index * hidden;
  T* const tok_row = a.d_token_table + static_cast<std::int64_t>(s.token) * hidden;
  T* const pos_row = kLearned ? a.d_position_table + s.position * hidden : nullptr;
  if (a.vector_path)
    embedding_bwd_atomic_row<T, kLearned, true>(a, s, lane, dy, tok_row, pos_row);
  else
    embedding_bwd_atomic_row<T, kLearned, false>(a, s, lane, dy, tok_row, pos_row);
}

// ---------------------------------------------------------------------------------------------
// The sorted backward: keys, then the per-row segmented reduction.

struct KeyArgs {
  TileArgs tile;
  std::uint32_t* token_keys = nullptr;     // (token id | vocab) per slot
  std::int32_t* token_values = nullptr;    // b·L + l
  std::uint32_t* token_touched = nullptr;  // bit r: token row r gets a gradient (zeroed before)
  std::uint32_t* position_keys = nullptr;
  std::int32_t* position_values = nullptr;
  std::uint32_t* position_touched = nullptr;  // with position_keys
  std::int64_t num_positions = 0;
};

// Sets bit `row` of a row bitmap for every lane with `marked`; called by all 32 lanes of the warp.
// Integer ORs, not float atomics: the bitmap is the same whatever the order, so the backward stays
// deterministic. The lanes that name the same 32-row word send one OR between them (its lowest
// such lane, the others' bits gathered by 32 shuffle rounds), so that a word many tokens name
// takes one OR a warp rather than one a token: the consecutive positions of a sentence share a
// word 32 lanes at a time, and the frequent tokens of a frequency-sorted vocabulary (fairseq's)
// crowd its first words (half of Zipf(1.1) tokens fall in word 0).
__device__ __forceinline__ void mark_rows_warp(std::uint32_t* bitmap, std::uint32_t row, bool marked) {
  constexpr std::uint32_t kNoWord = 0xFFFFFFFFu;  // rows < 2^31: no word has this index
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const std::uint32_t word = marked ? row >> 5 : kNoWord, bit = marked ? 1u << (row & 31u) : 0u;
  std::uint32_t bits = 0;
  bool first = marked;
  for (int src = 0; src < 32; ++src) {
    const std::uint32_t other_word = __shfl_sync(0xffffffffu, word, src);
    const std::uint32_t other_bit = __shfl_sync(0xffffffffu, bit, src);
    if (other_word == word) {
      bits |= other_bit;
      first = first && src >= lane;
    }
  }
  if (first) atomicOr(bitmap + word, bits);
}

// One thread per token, whole warps grid-striding (so that every lane takes part in the marking's
// shuffles; lanes past B·L mark nothing). Besides the pairs it marks the rows that will receive a
// gradient, so that the window kernel can zero the others instead of a memset of whole tables.
template <bool kNonpad>
__global__ void __launch_bounds__(kThreads) embedding_keys_kernel(const KeyArgs a) {
  const std::uint32_t stride = gridDim.x * blockDim.x, lane = threadIdx.x % 32;
  for (std::uint32_t i0 = blockIdx.x * blockDim.x + threadIdx.x - lane; i0 < a.tile.n; i0 += stride) {
    const std::uint32_t i = i0 + lane;  // < 2^31 + 31
    const Slot s = token_slot<kNonpad>(a.tile, i);
    if (s.active) {
      a.token_keys[i] =
          s.valid ? static_cast<std::uint32_t>(s.token) : static_cast<std::uint32_t>(a.tile.vocab);
      a.token_values[i] = static_cast<std::int32_t>(i);
    }
    mark_rows_warp(a.token_touched, static_cast<std::uint32_t>(s.token), s.valid);
    if (a.position_keys != nullptr) {
      if (s.active) {
        a.position_keys[i] =
            s.valid ? static_cast<std::uint32_t>(s.position) : static_cast<std::uint32_t>(a.num_positions);
        a.position_values[i] = static_cast<std::int32_t>(i);
      }
      mark_rows_warp(a.position_touched, static_cast<std::uint32_t>(s.position), s.valid);
    }
  }
}

// The forked atomic backward's marks (launch_embedding_bwd_atomic with a StreamFork): bit `token`
// of the token table's bitmap for every valid token, a thread per token, whole warps
// grid-striding as in the key kernel (mark_rows_warp's shuffles need every lane).
__global__ void __launch_bounds__(kThreads)
    embedding_mark_tokens_kernel(const TileArgs tile, std::uint32_t* touched) {
  const std::uint32_t stride = gridDim.x * blockDim.x, lane = threadIdx.x % 32;
  for (std::uint32_t i0 = blockIdx.x * blockDim.x + threadIdx.x - lane; i0 < tile.n; i0 += stride) {
    const Slot s = token_slot<false>(tile, i0 + lane);  // the token alone: no position needed
    mark_rows_warp(touched, static_cast<std::uint32_t>(s.token), s.valid);
  }
}

// Slot-indexed learned positions need no sort: position offset + l receives the entries
// b·L + l, b = 0 .. B-1, in increasing b. Entry j = l·B + b of the "sorted" arrays gets key
// offset + l and value b·L + l, or -1 (skipped by the window kernel) for padding and invalid
// tokens; the keys are non-decreasing, so the window and merge kernels below apply unchanged.
// Every key offset .. offset + L - 1 is then in the array, so the window kernel writes each of
// those rows (zeros for a position only padding holds): the bitmap marks exactly that range,
// a thread per 32-row word, with plain stores.
struct SlotKeyArgs {
  const std::int32_t* tokens = nullptr;
  std::uint32_t* keys = nullptr;
  std::int32_t* values = nullptr;
  std::uint32_t* touched = nullptr;  // ceil(touched_rows / 32) words
  std::uint32_t n = 0, batch = 0, len = 0, position_offset = 0, touched_rows = 0;
  std::int32_t vocab = 0, padding_idx = -1;
};

__global__ void __launch_bounds__(kThreads) embedding_slot_keys_kernel(const SlotKeyArgs a) {
  const std::uint32_t stride = gridDim.x * blockDim.x;
  const std::uint32_t first = blockIdx.x * blockDim.x + threadIdx.x;
  for (std::uint32_t j = first; j < a.n; j += stride) {
    const std::uint32_t l = j / a.batch, b = j - l * a.batch;
    const std::uint32_t i = b * a.len + l;  // < n <= 2^31 - 1
    const std::int32_t tok = a.tokens[i];
    const bool valid = !is_padding(tok, a.padding_idx) && tok >= 0 && tok < a.vocab;
    a.keys[j] = a.position_offset + l;
    a.values[j] = valid ? static_cast<std::int32_t>(i) : -1;
  }
  // Word w holds rows 32w .. 32w + 31; the marked rows are [offset, offset + L) (within the table).
  const std::uint64_t lo = a.position_offset, hi = lo + a.len;
  for (std::uint32_t w = first; w < (a.touched_rows + 31u) / 32u; w += stride) {
    const std::uint64_t row0 = 32ull * w;
    std::uint32_t bits = 0;
    for (std::uint32_t k = 0; k < 32; ++k) bits |= (row0 + k >= lo && row0 + k < hi) ? 1u << k : 0u;
    a.touched[w] = bits;
  }
}

// The chunked segmented reduction over the sorted pairs. The sorted array is cut into windows
// of kChunk consecutive entries (window k: entries k·kChunk .. k·kChunk + kChunk - 1); a piece
// is the part of one segment (equal keys) inside one window. The window kernel sums each piece
// in entry order; a piece that is a whole segment is scaled, rounded once and written to its
// table row; the others (segments that cross a window boundary) go to float partial rows:
// slot 2k for the piece that starts window k, slot 2k + 1 for a piece that starts inside window
// k and runs past its end (at most one). The merge kernel, one warp per window in which such a
// segment starts, adds the segment's partials in window order. Both orders are fixed by the
// sorted keys (stable sort of distinct pairs) and kChunk: bitwise reproducible on any GPU.
// The rows no key names are zeroed by the window kernel's other blocks (the touched bitmap), so
// every table row is written exactly once: by its segment, or with zeros.
constexpr int kChunk = kEmbeddingSortChunk;  // a warp's lanes hold the window's keys and values
static_assert(kChunk == 32, "the window kernel keeps one entry per lane");
constexpr std::uint32_t kNoKey = 0xFFFFFFFFu;  // differs from every key (keys <= 2^31 - 1)
constexpr int kZeroRowsPerWarp = 4;  // the zero blocks' rows a warp: 2 KB of stores a warp at H = 1024 bf16

template <class T>
struct ChunkArgs {
  T* grad = nullptr;                       // [rows, H]: every row written once (a segment's sum, or zeros)
  const std::uint32_t* touched = nullptr;  // bit r: row r is a key (its segment writes it)
  std::int64_t window_blocks = 0;          // window kernel: reduce blocks a tile pass, ceil(windows / 8)
  std::int64_t tile_passes = 0;            // window kernel: tile passes (the tiles grid-stride over them)
  float* partial = nullptr;                // [2·windows, H]
  const T* dy = nullptr;
  const std::uint32_t* keys = nullptr;   // sorted, n; keys >= rows (the sentinel) sort last
  const std::int32_t* values = nullptr;  // dy row of each entry; -1: skip
  std::int64_t n = 0, windows = 0, rows = 0, hidden = 0;
  float out_scale = 1.0f;
  DrawThreshold keep;  // draw_threshold(dropout p)
  float keep_scale = 1.0f;
  std::uint64_t seed = 0, offset = 0;
  bool vector_path = false;  // H % K == 0, dy and grad 16-byte aligned (the partials always are)
};

// Columns of the lane in column tile `tile` (32·K columns a tile): first column, count (0 .. K).
template <int K, bool kWhole = false>
__device__ __forceinline__ int tile_columns(std::int64_t tile, int lane, std::int64_t hidden,
                                            std::int64_t& c0) {
  c0 = tile * (32 * K) + static_cast<std::int64_t>(lane) * K;
  return vector_count<K, kWhole>(c0, hidden);
}

// The zero part of the window kernel (and the zero kernels of the forked launches): warp w of
// zero block z takes rows 8z + w, then every (zero blocks · 8)-th row after it, and writes a row
// of zeros where the bitmap's bit is clear (kMarked false: the rows no gradient reaches) or set
// (kMarked true: the rows the atomic backward then adds into), a warp-uniform branch on one
// broadcast word: 16-byte stores when vector_path, else one element a lane. kStreaming: the
// vector stores are evict-first (st.global.cs), for zeros this launch never reads again, so that
// they do not push out of L2 the lines it does.
template <class T, bool kMarked = false, bool kStreaming = false>
__device__ __forceinline__ void zero_rows(const ChunkArgs<T>& a, std::int64_t zero_block,
                                          std::int64_t zero_blocks, int warp, int lane) {
  constexpr int K = Packed<T>::kSize;
  static_assert(sizeof(Packed<T>) == sizeof(int4), "a 16-byte vector");
  const std::int64_t hidden = a.hidden;
  const T zero = from_float<T>(0.0f);
  Packed<T> zeros;
#pragma unroll
  for (int c = 0; c < K; ++c) zeros.v[c] = zero;
  for (std::int64_t r = zero_block * kWarps + warp; r < a.rows; r += zero_blocks * kWarps) {
    if ((((a.touched[r >> 5] >> (r & 31)) & 1u) != 0) != kMarked) continue;
    T* row = a.grad + r * hidden;
    if (a.vector_path) {
      for (std::int64_t c = static_cast<std::int64_t>(lane) * K; c < hidden; c += 32 * K) {
        if constexpr (kStreaming) {
          SEQBENCH_CHECK_VECTOR_ACCESS(row + c, sizeof(int4));
          __stcs(reinterpret_cast<int4*>(row + c), make_int4(0, 0, 0, 0));  // +0 in every T
        } else {
          zeros.store(row + c);
        }
      }
    } else {
      for (std::int64_t c = lane; c < hidden; c += 32) row[c] = zero;
    }
  }
}

// The column tiles of window k (the window kernel's reduce part, below). kWhole: the vector path
// (a.vector_path), where a lane's columns of a tile are K or none (H % K == 0), so that its
// loads, keep bits and stores take their 16-byte forms with no per-entry test of the count (one
// instance a path, as in embedding_fwd_valid_row).
template <class T, bool kWhole>
__device__ __forceinline__ void window_tiles(const ChunkArgs<T>& a, const std::int64_t first_tile,
                                             const std::int64_t k, const int lane, const int size,
                                             const int used, const std::uint32_t my_key,
                                             const std::int32_t my_value, const std::uint32_t prev,
                                             const std::uint32_t next) {
  constexpr int K = Packed<T>::kSize;
  constexpr int kGroup = 4;  // entries whose dy vectors are loaded before they are added
  const std::int64_t hidden = a.hidden;
  for (std::int64_t tile = first_tile; tile * (32 * K) < hidden; tile += a.tile_passes) {
    std::int64_t c0 = 0;
    const int count = tile_columns<K, kWhole>(tile, lane, hidden, c0);
    float acc[K];
#pragma unroll
    for (int c = 0; c < K; ++c) acc[c] = 0.0f;
    int piece_begin = 0;
    for (int e0 = 0; e0 < used; e0 += kGroup) {
      // Load the group's dy vectors first (independent loads in flight), then add in order.
      float g[kGroup][K];
      std::uint32_t keep[kGroup];
#pragma unroll
      for (int q = 0; q < kGroup; ++q) {
        const int e = e0 + q;
        const std::int32_t i = __shfl_sync(0xffffffffu, my_value, e & 31);
        keep[q] = 0;
        if (e < used && i >= 0 && count > 0) {
          const std::int64_t at = static_cast<std::int64_t>(i) * hidden + c0;
          load_floats<T, K>(a.dy + at, g[q], count, kWhole);
          const auto first = static_cast<std::uint64_t>(at);
          keep[q] = kWhole ? dropout_keep_bits_aligned<K>(a.seed, a.offset, first, a.keep)
                           : dropout_keep_bits(a.seed, a.offset, first, count, a.keep);
        } else {
#pragma unroll
          for (int c = 0; c < K; ++c) g[q][c] = 0.0f;
        }
      }
#pragma unroll
      for (int q = 0; q < kGroup; ++q) {
        const int e = e0 + q;
        const std::uint32_t key = __shfl_sync(0xffffffffu, my_key, e & 31);
        const std::uint32_t after = __shfl_sync(0xffffffffu, my_key, (e + 1) & 31);
        if (e >= used) break;  // uniform over the warp
        const std::int32_t i = __shfl_sync(0xffffffffu, my_value, e & 31);
        if (i >= 0) {
#pragma unroll
          for (int c = 0; c < K; ++c) acc[c] += g[q][c] * (((keep[q] >> c) & 1u) != 0 ? a.keep_scale : 0.0f);
        }
        const std::uint32_t following = e + 1 < size ? after : next;
        if (following == key && e + 1 < size) continue;  // the piece goes on in this window
        // The piece [piece_begin, e] ends: at a segment end or at the window's end.
        const bool starts_segment = piece_begin > 0 || prev != key;
        const bool ends_segment = following != key;
        if (count > 0) {
          if (starts_segment && ends_segment) {
            float out[K];
#pragma unroll
            for (int c = 0; c < K; ++c) out[c] = a.out_scale * acc[c];
            store_floats<T, K>(a.grad + static_cast<std::int64_t>(key) * hidden + c0, out, count, kWhole);
          } else {
            const std::int64_t slot = 2 * k + (piece_begin > 0 ? 1 : 0);
            store_floats<float, K>(a.partial + slot * hidden + c0, acc, count, kWhole);
          }
        }
#pragma unroll
        for (int c = 0; c < K; ++c) acc[c] = 0.0f;
        piece_begin = e + 1;
      }
    }
  }
}

// Blocks an SM the window kernel asks for. ptxas (nvcc 13.0, sm_90), left to itself, gave the
// fp32 instance 71 registers (3 blocks an SM; 61 and 4 blocks before the zero blocks joined the
// grid) and the 16-bit ones 92 (2 blocks); with these bounds they take 61 and 87 (84 since the
// tile loop is one instance a path), no spills.
template <class T>
constexpr int kWindowMinBlocks = sizeof(T) == 4 ? 4 : 2;

// Grid (1D): the first window_blocks · tile_passes blocks reduce, block b taking the windows of
// block column x = b % window_blocks (warp w: window 8x + w) and the column tiles of 32·K columns
// b / window_blocks, + tile_passes, ...; the blocks after them zero the rows that no key names
// (zero_rows), and, coming last in the grid, stream their stores while the reduce
// warps wait on their dy loads. No __syncthreads.
template <class T>
__global__ void __launch_bounds__(kThreads, kWindowMinBlocks<T>)
    embedding_window_kernel(const ChunkArgs<T> a) {
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const std::int64_t block = blockIdx.x, reduce_blocks = a.window_blocks * a.tile_passes;
  if (block >= reduce_blocks) {
    zero_rows(a, block - reduce_blocks, static_cast<std::int64_t>(gridDim.x) - reduce_blocks, warp, lane);
    return;
  }
  // 32-bit division (blocks < 2^31): the 64-bit one is a long call sequence that held registers.
  const auto reduce_block = static_cast<std::uint32_t>(block),
             columns = static_cast<std::uint32_t>(a.window_blocks);
  const std::uint32_t first_tile = reduce_block / columns;
  const std::int64_t k = static_cast<std::int64_t>(reduce_block - first_tile * columns) * kWarps + warp;
  if (k >= a.windows) return;
  const std::int64_t j0 = k * kChunk;
  const int size = static_cast<int>(a.n - j0 < kChunk ? a.n - j0 : kChunk);  // 1 .. kChunk
  const auto rows = static_cast<std::uint32_t>(a.rows);
  const std::uint32_t my_key = lane < size ? a.keys[j0 + lane] : kNoKey;
  const std::int32_t my_value = lane < size ? a.values[j0 + lane] : -1;
  const std::uint32_t prev = j0 > 0 ? a.keys[j0 - 1] : kNoKey;
  const std::uint32_t next = j0 + size < a.n ? a.keys[j0 + size] : kNoKey;
  // Valid keys (< rows) form a prefix of the sorted array: `used` entries of this window.
  const int used = __popc(__ballot_sync(0xffffffffu, my_key < rows));
  if (used == 0) return;
  if (a.vector_path)
    window_tiles<T, true>(a, first_tile, k, lane, size, used, my_key, my_value, prev, next);
  else
    window_tiles<T, false>(a, first_tile, k, lane, size, used, my_key, my_value, prev, next);
}

// The forked launches' zero fills (both backwards with a StreamFork): the window kernel's zero
// blocks as a kernel of their own. On the side stream (kMarked false, kStreaming true) it zeroes
// the rows no gradient reaches, beside the main branch's work: the sorted backward's sort, window
// kernel (then without zero blocks) and merge, or the atomic backward's adds; there the
// launchers give it at most one block an SM, whose 8 warps issue 16-byte stores back to back
// (what an SM's share of the write bandwidth needs), leaving the SMs' other slots to the main
// branch, whose latency the fork is there to hide. On the main stream (kMarked true, plain
// stores, so that the lines stay in L2 for the adds) it zeroes the atomic backward's marked rows.
template <class T, bool kMarked, bool kStreaming>
__global__ void __launch_bounds__(kThreads) embedding_zero_rows_kernel(const ChunkArgs<T> a) {
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  zero_rows<T, kMarked, kStreaming>(a, blockIdx.x, gridDim.x, warp, lane);
}

// Warp w of block x takes window k = 8x + w; it works only when a segment that crosses the end
// of window k starts in window k: its row = its first piece's partial (slot 2k or 2k + 1) + the
// partials 2k' of the following windows k' that start with the same key, added in window order,
// scaled and rounded once.
template <class T>
__global__ void __launch_bounds__(kThreads) embedding_merge_kernel(const ChunkArgs<T> a) {
  constexpr int K = Packed<T>::kSize;
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const std::int64_t k = static_cast<std::int64_t>(blockIdx.x) * kWarps + warp;
  if (k >= a.windows) return;
  const std::int64_t j0 = k * kChunk;
  const std::int64_t last = (a.n - j0 < kChunk ? a.n : j0 + kChunk) - 1;
  const std::uint32_t key = a.keys[last];
  if (key >= static_cast<std::uint32_t>(a.rows) || last + 1 >= a.n || a.keys[last + 1] != key) return;
  if (j0 > 0 && a.keys[j0 - 1] == key) return;  // the segment started in an earlier window
  const std::int64_t first_slot = 2 * k + (a.keys[j0] == key ? 0 : 1);
  std::int64_t end = k + 1;  // windows k+1 .. end-1 continue the segment
  while (end < a.windows && a.keys[end * kChunk] == key) ++end;
  const std::int64_t hidden = a.hidden;
  const bool vector = a.vector_path;
  for (std::int64_t tile = blockIdx.y; tile * (32 * K) < hidden; tile += gridDim.y) {
    std::int64_t c0 = 0;
    const int count = tile_columns<K>(tile, lane, hidden, c0);
    if (count == 0) continue;
    const bool whole = vector && count == K;
    float acc[K];
    load_floats<float, K>(a.partial + first_slot * hidden + c0, acc, count, whole);
    // A frequent token has ~m/32 partials: load 4 before adding them (in window order).
    constexpr int kGroup = 4;
    for (std::int64_t w0 = k + 1; w0 < end; w0 += kGroup) {
      float q[kGroup][K];
#pragma unroll
      for (int g = 0; g < kGroup; ++g) {
        if (w0 + g < end) load_floats<float, K>(a.partial + 2 * (w0 + g) * hidden + c0, q[g], count, whole);
      }
#pragma unroll
      for (int g = 0; g < kGroup; ++g) {
        if (w0 + g >= end) break;
#pragma unroll
        for (int c = 0; c < K; ++c) acc[c] += q[g][c];
      }
    }
#pragma unroll
    for (int c = 0; c < K; ++c) acc[c] *= a.out_scale;
    store_floats<T, K>(a.grad + static_cast<std::int64_t>(key) * hidden + c0, acc, count, whole);
  }
}

// ---------------------------------------------------------------------------------------------
// The baseline's kernels, each as good as PyTorch eager's kernel for the op: the row ops take a
// warp per row (grid-stride over rows; 32-bit column indexing inside a row, no per-element
// divides), moving 16-byte Packed<T> vectors when `vector` (H % K == 0 and every row pointer
// 16-byte aligned), else one element a lane; scale is a vectorized elementwise loop.

__device__ __forceinline__ std::int64_t warp_id_global() {
  return (static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
}
__device__ __forceinline__ std::int64_t warps_in_grid() {
  return static_cast<std::int64_t>(gridDim.x) * blockDim.x / 32;
}

template <class T>
__global__ void __launch_bounds__(kThreads)
    gather_rows_kernel(T* __restrict__ y, const T* __restrict__ table, std::int64_t table_rows,
                       const std::int32_t* __restrict__ index, std::int64_t n, std::int32_t hidden,
                       bool vector) {
  constexpr int K = Packed<T>::kSize;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const T nan = from_float<T>(__int_as_float(0x7fc00000));
  for (std::int64_t i = warp_id_global(); i < n; i += warps_in_grid()) {
    const std::int32_t row = index[i];
    const bool ok = row >= 0 && row < table_rows;
    const T* __restrict__ src = table + static_cast<std::int64_t>(ok ? row : 0) * hidden;
    T* __restrict__ dst = y + i * hidden;
    if (vector) {
      Packed<T> fill;
#pragma unroll
      for (int k = 0; k < K; ++k) fill.v[k] = nan;
      for (std::int64_t c = lane * K; c < hidden; c += 32 * K)
        (ok ? Packed<T>::load(src + c) : fill).store(dst + c);
    } else {
      for (std::int64_t c = lane; c < hidden; c += 32) dst[c] = ok ? src[c] : nan;
    }
  }
}

template <class T>
__global__ void __launch_bounds__(kThreads)
    scale_kernel(T* __restrict__ y, const T* __restrict__ x, std::int64_t count, float scale, bool vector) {
  constexpr int K = Packed<T>::kSize;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  const std::int64_t first = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  const std::int64_t vectors = vector ? count / K : 0;
  for (std::int64_t v = first; v < vectors; v += stride) {
    Packed<T> p = Packed<T>::load(x + v * K);
#pragma unroll
    for (int k = 0; k < K; ++k) p.v[k] = from_float<T>(scale * to_float(p.v[k]));
    p.store(y + v * K);
  }
  for (std::int64_t e = vectors * K + first; e < count; e += stride)
    y[e] = from_float<T>(scale * to_float(x[e]));
}

template <class T>
__global__ void __launch_bounds__(kThreads)
    zero_padding_rows_kernel(T* __restrict__ y, const T* __restrict__ x,
                             const std::int32_t* __restrict__ tokens, std::int64_t n, std::int32_t hidden,
                             std::int32_t padding_idx, bool vector) {
  constexpr int K = Packed<T>::kSize;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const T zero = from_float<T>(0.0f);
  for (std::int64_t i = warp_id_global(); i < n; i += warps_in_grid()) {
    const bool pad = is_padding(tokens[i], padding_idx);
    const T* __restrict__ src = x + i * hidden;
    T* __restrict__ dst = y + i * hidden;
    if (vector) {
      Packed<T> fill;
#pragma unroll
      for (int k = 0; k < K; ++k) fill.v[k] = zero;
      for (std::int64_t c = lane * K; c < hidden; c += 32 * K)
        (pad ? fill : Packed<T>::load(src + c)).store(dst + c);
    } else {
      for (std::int64_t c = lane; c < hidden; c += 32) dst[c] = pad ? zero : src[c];
    }
  }
}

// index_add_: one T atomic per element (as PyTorch's index_add_ kernel), a warp per source row.
template <class T>
__global__ void __launch_bounds__(kThreads)
    scatter_add_rows_kernel(T* grad, std::int64_t grad_rows, const T* __restrict__ src,
                            const std::int32_t* __restrict__ index, const std::int32_t* __restrict__ tokens,
                            std::int32_t padding_idx, std::int64_t n, std::int32_t hidden) {
  const int lane = static_cast<int>(threadIdx.x) % 32;
  for (std::int64_t i = warp_id_global(); i < n; i += warps_in_grid()) {
    const std::int32_t row = index[i];
    if (is_padding(tokens[i], padding_idx) || row < 0 || row >= grad_rows) continue;
    T* dst = grad + static_cast<std::int64_t>(row) * hidden;
    const T* __restrict__ s = src + i * hidden;
    for (std::int64_t c = lane; c < hidden; c += 32) atomicAdd(dst + c, s[c]);
  }
}

// ---------------------------------------------------------------------------------------------
// Host helpers.

template <class T>
std::size_t table_bytes(std::int64_t rows, std::int64_t hidden) {
  return static_cast<std::size_t>(rows) * static_cast<std::size_t>(hidden) * sizeof(T);
}

std::size_t align_up(std::size_t bytes) {
  return (bytes + kAlign - 1) / kAlign * kAlign;
}

// The fused forward's workspace: [nonpad_count positions, B·L int32 | 256-byte aligned] then,
// for sinusoids, either the sinusoid table (L·H float, embedding_fwd_uses_sinusoid_table) or the
// frequencies (floor(H/2) float2) of the computed path. Host only; the shape is validated by the
// caller.
struct FwdWorkspaceLayout {
  std::size_t sinusoid_at = 0;  // where the table or the frequencies start
  std::size_t table_bytes = 0;  // 0: the computed path (frequencies)
  std::size_t total = 0;
};

FwdWorkspaceLayout fwd_workspace_layout(const EmbeddingShape& shape, const EmbeddingConfig& config) {
  FwdWorkspaceLayout l;
  const bool sinusoidal = config.positions == PositionEncoding::sinusoidal;
  l.sinusoid_at = config.indexing == PositionIndexing::nonpad_count
                      ? align_up(static_cast<std::size_t>(shape.tokens()) * sizeof(std::int32_t))
                      : 0;
  const std::size_t freq = sinusoidal ? static_cast<std::size_t>(shape.hidden / 2) * sizeof(float2) : 0;
  const std::size_t table =
      static_cast<std::size_t>(shape.len) * static_cast<std::size_t>(shape.hidden) * sizeof(float);
  if (sinusoidal && shape.hidden >= 2 && shape.batch >= 2 && table <= kEmbeddingSinusoidTableMaxBytes)
    l.table_bytes = table;
  l.total = l.sinusoid_at + (l.table_bytes > 0 ? l.table_bytes : freq);
  return l;
}

// A tensor argument: non-null and aligned to its element (misaligned element accesses fault on
// the device; the kernels' vector paths additionally test 16-byte alignment themselves).
template <class E>
void require_tensor(const E* ptr, const char* op, const char* name) {
  require_non_null(ptr, op, name);
  SEQBENCH_REQUIRE(reinterpret_cast<std::uintptr_t>(ptr) % alignof(E) == 0,
                   op << ": " << name << " (" << static_cast<const void*>(ptr) << ") is not aligned to "
                      << alignof(E) << " bytes");
}

TileArgs make_tile(const std::int32_t* tokens, const std::int32_t* positions, const EmbeddingShape& shape,
                   const EmbeddingConfig& config) {
  TileArgs t;
  t.tokens = tokens;
  t.positions = positions;
  t.n = static_cast<std::uint32_t>(shape.tokens());
  t.len = static_cast<std::uint32_t>(shape.len);
  t.vocab = shape.vocab;
  t.padding_idx = config.padding_idx;
  t.position_offset = config.position_offset;
  return t;
}

// Blocks of 8 warps, a warp per token: ceil(B·L / 8) <= 2^28.
unsigned tile_blocks(const EmbeddingShape& shape) {
  return static_cast<unsigned>((shape.tokens() + kWarps - 1) / kWarps);
}

PositionArgs position_args(std::int32_t* positions, const std::int32_t* tokens, const EmbeddingShape& shape,
                           const EmbeddingConfig& config) {
  PositionArgs a;
  a.tokens = tokens;
  a.positions = positions;
  a.len = shape.len;
  a.padding_idx = config.padding_idx;
  a.position_offset = static_cast<std::int32_t>(config.position_offset);
  return a;
}

// The positions pre-pass into `positions` (B·L int32), one block per row.
void run_positions(std::int32_t* positions, const std::int32_t* tokens, const EmbeddingShape& shape,
                   const EmbeddingConfig& config, cudaStream_t stream) {
  const PositionArgs a = position_args(positions, tokens, shape, config);
  if (config.indexing == PositionIndexing::nonpad_count) {
    embedding_positions_kernel<true><<<static_cast<unsigned>(shape.batch), kThreads, 0, stream>>>(a);
  } else {
    embedding_positions_kernel<false><<<static_cast<unsigned>(shape.batch), kThreads, 0, stream>>>(a);
  }
  SEQBENCH_CUDA_CHECK_LAUNCH();
}

// The forward's pre-pass (nothing when it has no blocks): one launch, or, where its blocks would
// pass the grid's 2^31 - 1 (B near the token limit), the positions and the sinusoid part as two.
void run_fwd_prepass(const FwdPrepassArgs& a, cudaStream_t stream) {
  constexpr std::int64_t kMaxGrid = std::numeric_limits<std::int32_t>::max();
  const std::int64_t blocks = a.blocks();
  if (blocks == 0) return;
  if (blocks <= kMaxGrid) {
    embedding_fwd_prepass_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(a);
    SEQBENCH_CUDA_CHECK_LAUNCH();
    return;
  }
  FwdPrepassArgs positions_only = a, sinusoid_only = a;
  positions_only.table_col_blocks = positions_only.table_row_blocks = positions_only.freq_blocks = 0;
  sinusoid_only.position_blocks = 0;
  run_fwd_prepass(positions_only, stream);
  run_fwd_prepass(sinusoid_only, stream);
}

// Calls fn(std::bool_constant<learned>, std::bool_constant<nonpad>).
template <class Fn>
void dispatch_positions(const EmbeddingConfig& config, Fn&& fn) {
  const bool learned = config.positions == PositionEncoding::learned;
  const bool nonpad = config.indexing == PositionIndexing::nonpad_count;
  if (learned) {
    if (nonpad) return fn(std::true_type{}, std::true_type{});
    return fn(std::true_type{}, std::false_type{});
  }
  if (nonpad) return fn(std::false_type{}, std::true_type{});
  return fn(std::false_type{}, std::false_type{});
}

// A warp per row: ceil(rows / 8) blocks of 8 warps, at most 65536 (then grid-stride).
int row_blocks(std::int64_t rows) {
  const std::int64_t blocks = (rows + kWarps - 1) / kWarps;
  return static_cast<int>(blocks < 65536 ? blocks : 65536);
}

int grid_stride_blocks(std::int64_t total) {
  const std::int64_t blocks = (total + kThreads - 1) / kThreads;
  return static_cast<int>(blocks < 65536 ? blocks : 65536);
}

// Zero blocks over `rows` table rows at kZeroRowsPerWarp rows a warp: the window kernel's, and
// the forked atomic backward's main-stream zero kernel.
std::int64_t zero_blocks_for(std::int64_t rows) {
  return (rows + kWarps * kZeroRowsPerWarp - 1) / (kWarps * kZeroRowsPerWarp);
}

// The grid of a forked launch's side zero kernel over `rows` table rows: at most one block an SM
// (embedding_zero_rows_kernel says why), and no more warps than rows.
unsigned side_zero_blocks(std::int64_t rows) {
  int device = 0, sms = 0;
  SEQBENCH_CUDA_CHECK(cudaGetDevice(&device));
  SEQBENCH_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  return static_cast<unsigned>(std::min<std::int64_t>(sms, (rows + kWarps - 1) / kWarps));
}

// The pointer checks the two backwards share.
template <class T>
void require_bwd_pointers(T* d_token_table, T* d_position_table, const T* dy, const std::int32_t* tokens,
                          const EmbeddingShape& shape, const EmbeddingConfig& config, const char* op) {
  const bool learned = config.positions == PositionEncoding::learned;
  const std::int64_t n = shape.tokens();
  const std::size_t tok_bytes = table_bytes<T>(shape.vocab, shape.hidden);
  const std::size_t pos_bytes = learned ? table_bytes<T>(shape.num_positions, shape.hidden) : 0;
  const std::size_t dy_bytes = table_bytes<T>(n, shape.hidden);
  const std::size_t tokens_bytes = static_cast<std::size_t>(n) * sizeof(std::int32_t);
  require_tensor(d_token_table, op, "d_token_table");
  if (learned && pos_bytes > 0) require_tensor(d_position_table, op, "d_position_table");
  if (n > 0) {
    require_tensor(dy, op, "dy");
    require_tensor(tokens, op, "tokens");
  }
  require_disjoint(d_token_table, tok_bytes, dy, dy_bytes, op, "d_token_table", "dy");
  require_disjoint(d_token_table, tok_bytes, tokens, tokens_bytes, op, "d_token_table", "tokens");
  if (learned) {
    require_disjoint(d_position_table, pos_bytes, dy, dy_bytes, op, "d_position_table", "dy");
    require_disjoint(d_position_table, pos_bytes, tokens, tokens_bytes, op, "d_position_table", "tokens");
    require_disjoint(d_position_table, pos_bytes, d_token_table, tok_bytes, op, "d_position_table",
                     "d_token_table");
  }
}

template <class T>
BwdArgs<T> make_bwd_args(T* d_token_table, T* d_position_table, const T* dy, const std::int32_t* tokens,
                         const std::int32_t* positions, const EmbeddingShape& shape,
                         const EmbeddingConfig& config) {
  BwdArgs<T> a;
  a.d_token_table = d_token_table;
  a.d_position_table = d_position_table;
  a.dy = dy;
  a.tile = make_tile(tokens, positions, shape, config);
  a.hidden = shape.hidden;
  a.scale = config.scale;
  a.keep = draw_threshold(config.dropout.p);
  a.keep_scale = dropout_keep_scale(config.dropout.p);
  a.seed = config.dropout.seed;
  a.offset = config.dropout.offset;
  return a;
}

// CUB's temporary storage for sorting n pairs on `bits` key bits (on the current device).
std::size_t sort_temp_bytes(std::int64_t n, int bits, const char* op) {
  std::size_t bytes = 0;
  const cudaError_t status = cub::DeviceRadixSort::SortPairs(
      nullptr, bytes, static_cast<const std::uint32_t*>(nullptr), static_cast<std::uint32_t*>(nullptr),
      static_cast<const std::int32_t*>(nullptr), static_cast<std::int32_t*>(nullptr), static_cast<int>(n), 0,
      bits);
  SEQBENCH_REQUIRE(status == cudaSuccess, op << ": CUB could not size its sort storage ("
                                             << cudaGetErrorString(status) << "; it needs a CUDA device)");
  return bytes;
}

}  // namespace

void require_embedding_args(const EmbeddingShape& shape, const EmbeddingConfig& config, const char* op) {
  // Every path below branches on these two (the workspace's layout on `positions == sinusoidal`,
  // the launch on `positions == learned`): a value outside the enum would size one path and run
  // another.
  SEQBENCH_REQUIRE(
      config.positions == PositionEncoding::sinusoidal || config.positions == PositionEncoding::learned,
      op << ": unknown position encoding " << static_cast<int>(config.positions)
         << " (expected sinusoidal or learned)");
  SEQBENCH_REQUIRE(
      config.indexing == PositionIndexing::slot || config.indexing == PositionIndexing::nonpad_count,
      op << ": unknown position indexing " << static_cast<int>(config.indexing)
         << " (expected slot or nonpad_count)");
  SEQBENCH_REQUIRE(shape.batch >= 0 && shape.len >= 0,
                   op << ": batch " << shape.batch << " x len " << shape.len << " is negative");
  SEQBENCH_REQUIRE(shape.len == 0 || shape.batch <= kMaxTokens / shape.len,
                   op << ": batch·len = " << shape.batch << "·" << shape.len << " tokens > " << kMaxTokens);
  SEQBENCH_REQUIRE(shape.hidden >= 1, op << ": hidden " << shape.hidden << " must be >= 1");
  SEQBENCH_REQUIRE(shape.vocab >= 1 && shape.vocab <= kMaxRows,
                   op << ": vocab " << shape.vocab << " outside [1, " << kMaxRows << "]");
  require_matrix_shape(shape.tokens(), shape.hidden, op);
  require_matrix_shape(shape.vocab, shape.hidden, op);
  SEQBENCH_REQUIRE(
      config.padding_idx >= -1 && config.padding_idx < shape.vocab,
      op << ": padding_idx " << config.padding_idx << " outside [-1, vocab " << shape.vocab << ")");
  SEQBENCH_REQUIRE(std::isfinite(config.scale), op << ": scale " << config.scale << " is not finite");
  require_dropout_probability(config.dropout.p, op);
  SEQBENCH_REQUIRE(config.position_offset >= 0,
                   op << ": position_offset " << config.position_offset << " must be >= 0");
  SEQBENCH_REQUIRE(config.position_offset <= kMaxRows - shape.len, op << ": position_offset "
                                                                      << config.position_offset << " + len "
                                                                      << shape.len << " > " << kMaxRows);
  const std::int64_t positions_needed = config.position_offset + shape.len;
  if (config.positions == PositionEncoding::learned) {
    SEQBENCH_REQUIRE(shape.num_positions >= positions_needed && shape.num_positions <= kMaxRows,
                     op << ": num_positions " << shape.num_positions << " outside [position_offset + len = "
                        << positions_needed << ", " << kMaxRows << "]");
    require_matrix_shape(shape.num_positions, shape.hidden, op);
  } else {
    SEQBENCH_REQUIRE(positions_needed <= kMaxSinusoidPosition,
                     op << ": position_offset + len = " << positions_needed << " > " << kMaxSinusoidPosition
                        << " (sinusoid positions are computed in float)");
  }
}

template <class T>
void launch_embedding_fwd(T* y, const std::int32_t* tokens, const T* token_table, const T* position_table,
                          const EmbeddingShape& shape, const EmbeddingConfig& config, void* workspace,
                          std::size_t workspace_bytes, cudaStream_t stream) {
  SEQBENCH_NVTX_RANGE("embedding_fwd");
  constexpr const char* op = "embedding_fwd";
  require_embedding_args(shape, config, op);
  const std::int64_t n = shape.tokens();
  if (n == 0) return;
  const bool learned = config.positions == PositionEncoding::learned;
  const std::size_t y_bytes = table_bytes<T>(n, shape.hidden);
  require_tensor(y, op, "y");
  require_tensor(tokens, op, "tokens");
  require_tensor(token_table, op, "token_table");
  if (learned) require_tensor(position_table, op, "position_table");
  require_disjoint(y, y_bytes, tokens, static_cast<std::size_t>(n) * sizeof(std::int32_t), op, "y", "tokens");
  require_disjoint(y, y_bytes, token_table, table_bytes<T>(shape.vocab, shape.hidden), op, "y",
                   "token_table");
  if (learned) {
    require_disjoint(y, y_bytes, position_table, table_bytes<T>(shape.num_positions, shape.hidden), op, "y",
                     "position_table");
  }
  // Workspace (fwd_workspace_layout): [nonpad_count positions] then [sinusoid table] or [frequencies].
  const bool nonpad = config.indexing == PositionIndexing::nonpad_count;
  const std::int64_t half = learned ? 0 : shape.hidden / 2;
  const FwdWorkspaceLayout layout = fwd_workspace_layout(shape, config);
  const std::size_t need = layout.total;
  SEQBENCH_REQUIRE(workspace_bytes >= need,
                   op << ": workspace of " << workspace_bytes << " bytes, needs " << need);
  if (need > 0) {
    require_non_null(workspace, op, "workspace");
    SEQBENCH_REQUIRE(reinterpret_cast<std::uintptr_t>(workspace) % alignof(float2) == 0,
                     op << ": workspace is not " << alignof(float2) << "-byte aligned");
    require_disjoint(y, y_bytes, workspace, need, op, "y", "workspace");
    require_disjoint(workspace, need, tokens, static_cast<std::size_t>(n) * sizeof(std::int32_t), op,
                     "workspace", "tokens");
    // The pre-pass kernels write the workspace before the lookup reads the tables.
    require_disjoint(workspace, need, token_table, table_bytes<T>(shape.vocab, shape.hidden), op, "workspace",
                     "token_table");
    if (learned) {
      require_disjoint(workspace, need, position_table, table_bytes<T>(shape.num_positions, shape.hidden), op,
                       "workspace", "position_table");
    }
  }
  auto* base = static_cast<unsigned char*>(workspace);
  FwdArgs<T> a;
  FwdPrepassArgs pre;
  if (nonpad) {
    pre.positions = position_args(reinterpret_cast<std::int32_t*>(base), tokens, shape, config);
    pre.position_blocks = shape.batch;
  }
  if (half > 0) {
    constexpr double kTwoPi = 6.283185307179586476925286766559;
    a.sinusoid.half = half;
    a.sinusoid.log2_step = half > 1 ? -std::log2(10000.0) / static_cast<double>(half - 1) : 0.0;
    a.sinusoid.two_pi_hi = static_cast<float>(kTwoPi);
    a.sinusoid.two_pi_lo = static_cast<float>(kTwoPi - static_cast<double>(a.sinusoid.two_pi_hi));
    a.sinusoid.inv_two_pi = static_cast<float>(1.0 / kTwoPi);
    pre.sinusoid = a.sinusoid;
    if (layout.table_bytes > 0) {
      pre.table = reinterpret_cast<float*>(base + layout.sinusoid_at);
      pre.rows = shape.len;
      pre.hidden = shape.hidden;
      pre.first_position = config.position_offset;
      pre.table_col_blocks = (shape.hidden + kThreads - 1) / kThreads;
      pre.table_row_blocks = (shape.len + kTableRowsPerThread - 1) / kTableRowsPerThread;
      a.sinusoid_table = pre.table;
      a.position_offset = config.position_offset;
    } else {
      pre.freq = reinterpret_cast<float2*>(base + layout.sinusoid_at);
      pre.freq_blocks = (half + kThreads - 1) / kThreads;
      a.sinusoid.freq = pre.freq;
    }
  }
  run_fwd_prepass(pre, stream);
  const std::int32_t* positions = nonpad ? pre.positions.positions : nullptr;
  a.y = y;
  a.token_table = token_table;
  a.position_table = learned ? position_table : nullptr;
  a.tile = make_tile(tokens, positions, shape, config);
  a.hidden = shape.hidden;
  a.scale = config.scale;
  a.keep = draw_threshold(config.dropout.p);
  a.keep_scale = dropout_keep_scale(config.dropout.p);
  a.seed = config.dropout.seed;
  a.offset = config.dropout.offset;
  // The sinusoid table's rows and vectors are 16-byte aligned when its base is (H % K == 0). The
  // workspace is only required to be 8-byte aligned, and a table that is not takes the whole lookup
  // off the vector path: one flag, so that the vector path's loads are all 16-byte ones with no
  // predicated scalar twin beside each (8 issue slots a vector when the table had a flag of its own).
  a.vector_path = shape.hidden % Packed<T>::kSize == 0 && is_vector_aligned(y) &&
                  is_vector_aligned(token_table) && is_vector_aligned_or_null(a.position_table) &&
                  is_vector_aligned_or_null(a.sinusoid_table);
  const auto launch = [&](auto source_tag) {
    constexpr PositionSource source = decltype(source_tag)::value;
    if (nonpad)
      embedding_fwd_kernel<T, source, true><<<tile_blocks(shape), kThreads, 0, stream>>>(a);
    else
      embedding_fwd_kernel<T, source, false><<<tile_blocks(shape), kThreads, 0, stream>>>(a);
  };
  if (learned)
    launch(std::integral_constant<PositionSource, PositionSource::learned>{});
  else if (a.sinusoid_table != nullptr)
    launch(std::integral_constant<PositionSource, PositionSource::sinusoid_table>{});
  else
    launch(std::integral_constant<PositionSource, PositionSource::sinusoid_computed>{});
  SEQBENCH_CUDA_CHECK_LAUNCH();
}

namespace {

// The atomic backward's workspace: [the nonpad_count positions, B·L int32, when learned with
// nonpad_count indexing | 256-byte aligned] then, for a forked launch, the token table's row
// bitmap (ceil(vocab/32) words). Nothing when B·L == 0 (the launcher then only zeroes the tables).
struct AtomicWorkspaceLayout {
  std::size_t touched = 0, touched_bytes = 0;  // the bitmap (forked only)
  std::size_t total = 0;
};

AtomicWorkspaceLayout atomic_workspace_layout(const EmbeddingShape& shape, const EmbeddingConfig& config,
                                              bool forked) {
  AtomicWorkspaceLayout l;
  const std::int64_t n = shape.tokens();
  if (n == 0) return l;
  const bool prepass =
      config.positions == PositionEncoding::learned && config.indexing == PositionIndexing::nonpad_count;
  const std::size_t positions = prepass ? static_cast<std::size_t>(n) * sizeof(std::int32_t) : 0;
  if (!forked) {
    l.total = positions;
    return l;
  }
  l.touched = align_up(positions);
  l.touched_bytes = static_cast<std::size_t>((shape.vocab + 31) / 32) * sizeof(std::uint32_t);
  l.total = l.touched + l.touched_bytes;
  return l;
}

}  // namespace

template <class T>
void launch_embedding_bwd_atomic(T* d_token_table, T* d_position_table, const T* dy,
                                 const std::int32_t* tokens, const EmbeddingShape& shape,
                                 const EmbeddingConfig& config, void* workspace, std::size_t workspace_bytes,
                                 cudaStream_t stream, const StreamFork* fork) {
  SEQBENCH_NVTX_RANGE("embedding_bwd_atomic");
  constexpr const char* op = "embedding_bwd_atomic";
  require_embedding_args(shape, config, op);
  require_bwd_pointers(d_token_table, d_position_table, dy, tokens, shape, config, op);
  if (fork != nullptr) require_stream_fork(*fork, stream, op);
  const bool learned = config.positions == PositionEncoding::learned;
  const std::int64_t n = shape.tokens();
  // Only a learned position table takes a gradient: sinusoidal positions are never computed here, so
  // nonpad_count indexing needs its pre-pass (and the workspace) for learned positions alone.
  const bool prepass = learned && config.indexing == PositionIndexing::nonpad_count;
  const AtomicWorkspaceLayout layout = atomic_workspace_layout(shape, config, fork != nullptr);
  // Everything is validated before the first CUDA call.
  if (layout.total > 0) {
    const std::size_t need = layout.total;
    require_workspace(workspace, workspace_bytes, need, op);
    require_disjoint(d_token_table, table_bytes<T>(shape.vocab, shape.hidden), workspace, need, op,
                     "d_token_table", "workspace");
    if (learned) {
      require_disjoint(d_position_table, table_bytes<T>(shape.num_positions, shape.hidden), workspace, need,
                       op, "d_position_table", "workspace");
    }
    require_disjoint(workspace, need, tokens, static_cast<std::size_t>(n) * sizeof(std::int32_t), op,
                     "workspace", "tokens");
    // The positions pre-pass and the marks write the workspace before the scatter reads dy.
    require_disjoint(workspace, need, dy, table_bytes<T>(n, shape.hidden), op, "workspace", "dy");
  }
  const bool forked = fork != nullptr && n > 0;
  if (!forked) {
    SEQBENCH_CUDA_CHECK(cudaMemsetAsync(d_token_table, 0, table_bytes<T>(shape.vocab, shape.hidden), stream));
  } else {
    SEQBENCH_CUDA_CHECK(cudaMemsetAsync(static_cast<unsigned char*>(workspace) + layout.touched, 0,
                                        layout.touched_bytes, stream));
  }
  if (learned && shape.num_positions > 0) {
    SEQBENCH_CUDA_CHECK(
        cudaMemsetAsync(d_position_table, 0, table_bytes<T>(shape.num_positions, shape.hidden), stream));
  }
  if (n == 0) return;
  std::int32_t* positions = nullptr;
  if (prepass) {
    positions = static_cast<std::int32_t*>(workspace);
    run_positions(positions, tokens, shape, config, stream);
  }
  // Without a position gradient the kernel is the slot-indexed one (its unused position is offset + l).
  EmbeddingConfig kernel_config = config;
  if (!learned) kernel_config.indexing = PositionIndexing::slot;
  BwdArgs<T> a = make_bwd_args(d_token_table, learned ? d_position_table : nullptr, dy, tokens, positions,
                               shape, kernel_config);
  a.vector_path = shape.hidden % Packed<T>::kSize == 0 && is_vector_aligned(dy) &&
                  is_vector_aligned(d_token_table) && is_vector_aligned_or_null(a.d_position_table);
  const auto scatter = [&] {
    dispatch_positions(kernel_config, [&](auto learned_tag, auto nonpad_tag) {
      embedding_bwd_atomic_kernel<T, decltype(learned_tag)::value, decltype(nonpad_tag)::value>
          <<<tile_blocks(shape), kThreads, 0, stream>>>(a);
    });
    SEQBENCH_CUDA_CHECK_LAUNCH();
  };
  if (!forked) {
    scatter();
    return;
  }
  // Forked: in place of a memset of the whole token table before the adds, a bitmap of the rows
  // that get a gradient; the side stream zeroes the others (evict-first stores, never read here)
  // while the main stream zeroes the marked rows (plain stores: they stay in L2 for the adds) and
  // adds. The branches write disjoint rows; the adds touch only marked rows, zeroed before them on
  // the same stream.
  auto* touched = reinterpret_cast<std::uint32_t*>(static_cast<unsigned char*>(workspace) + layout.touched);
  embedding_mark_tokens_kernel<<<grid_stride_blocks(n), kThreads, 0, stream>>>(a.tile, touched);
  SEQBENCH_CUDA_CHECK_LAUNCH();
  ChunkArgs<T> z;
  z.grad = d_token_table;
  z.rows = shape.vocab;
  z.touched = touched;
  z.hidden = shape.hidden;
  z.vector_path = shape.hidden % Packed<T>::kSize == 0 && is_vector_aligned(d_token_table);
  const unsigned side_blocks = side_zero_blocks(shape.vocab);
  const std::int64_t main_blocks = zero_blocks_for(shape.vocab);
  ForkScope branch(*fork, stream);
  embedding_zero_rows_kernel<T, false, true><<<side_blocks, kThreads, 0, branch.side()>>>(z);
  SEQBENCH_CUDA_CHECK_LAUNCH();
  embedding_zero_rows_kernel<T, true, false><<<static_cast<unsigned>(main_blocks), kThreads, 0, stream>>>(z);
  SEQBENCH_CUDA_CHECK_LAUNCH();
  scatter();
  branch.join();
}

EmbeddingSortLayout embedding_sort_layout(std::int64_t tokens, std::int64_t hidden, std::int64_t vocab,
                                          bool learned, std::int64_t num_positions,
                                          std::size_t sort_temp_bytes) {
  SEQBENCH_REQUIRE(tokens >= 0 && tokens <= kMaxTokens,
                   "embedding_sort_layout: tokens " << tokens << " outside [0, " << kMaxTokens << "]");
  SEQBENCH_REQUIRE(hidden >= 1 && hidden <= std::numeric_limits<std::int32_t>::max(),
                   "embedding_sort_layout: hidden " << hidden << " outside [1, "
                                                    << std::numeric_limits<std::int32_t>::max() << "]");
  SEQBENCH_REQUIRE(vocab >= 1 && vocab <= kMaxRows,
                   "embedding_sort_layout: vocab " << vocab << " outside [1, " << kMaxRows << "]");
  SEQBENCH_REQUIRE(num_positions >= 0 && num_positions <= kMaxRows && (learned || num_positions == 0),
                   "embedding_sort_layout: num_positions " << num_positions << " outside [0, " << kMaxRows
                                                           << "] (0 unless learned)");
  const std::size_t array = align_up(static_cast<std::size_t>(tokens) * sizeof(std::int32_t));
  EmbeddingSortLayout l;
  std::size_t at = 0;
  for (std::size_t* part : {&l.token_keys_in, &l.token_values_in, &l.token_keys_out, &l.token_values_out}) {
    *part = at;
    at += array;
  }
  if (learned) {
    for (std::size_t* part :
         {&l.position_keys_in, &l.position_values_in, &l.position_keys_out, &l.position_values_out}) {
      *part = at;
      at += array;
    }
  }
  if (learned) {
    l.positions = at;  // nonpad_count: the positions pre-pass (unused for slot indexing)
    at += array;
  }
  const auto windows = static_cast<std::size_t>((tokens + kEmbeddingSortChunk - 1) / kEmbeddingSortChunk);
  l.partial = at;
  l.partial_bytes = 2 * windows * static_cast<std::size_t>(hidden) * sizeof(float);
  at += align_up(l.partial_bytes);
  const auto words = [](std::int64_t rows) { return static_cast<std::size_t>((rows + 31) / 32) * 4; };
  l.token_touched = at;
  l.position_touched = at + words(vocab);
  // No pairs, no bitmaps: the launcher then zeroes the tables with memsets and needs no workspace.
  l.touched_bytes = tokens == 0 ? 0 : words(vocab) + (learned ? words(num_positions) : 0);
  at += align_up(l.touched_bytes);
  l.sort_temp = at;
  l.sort_temp_bytes = sort_temp_bytes;
  l.total = at + align_up(sort_temp_bytes);
  return l;
}

int embedding_sort_key_bits(std::int64_t sentinel) {
  SEQBENCH_REQUIRE(sentinel >= 0 && sentinel <= std::numeric_limits<std::uint32_t>::max(),
                   "embedding_sort_key_bits: sentinel " << sentinel << " outside [0, 2^32)");
  return std::max(1, static_cast<int>(std::bit_width(static_cast<std::uint32_t>(sentinel))));
}

bool embedding_fwd_uses_sinusoid_table(const EmbeddingShape& shape, const EmbeddingConfig& config) {
  require_embedding_args(shape, config, "embedding_fwd_uses_sinusoid_table");
  return fwd_workspace_layout(shape, config).table_bytes > 0;
}

std::size_t embedding_fwd_workspace_bytes(const EmbeddingShape& shape, const EmbeddingConfig& config) {
  require_embedding_args(shape, config, "embedding_fwd_workspace_bytes");
  return fwd_workspace_layout(shape, config).total;
}

std::size_t embedding_fwd_workspace_bytes_upto(std::int64_t max_tokens, std::int64_t max_len,
                                               EmbeddingShape dims, const EmbeddingConfig& config) {
  constexpr const char* op = "embedding_fwd_workspace_bytes_upto";
  SEQBENCH_REQUIRE(max_len >= 1 && max_tokens >= max_len, op << ": max_len " << max_len << " and max_tokens "
                                                             << max_tokens
                                                             << " need 1 <= max_len <= max_tokens");
  // For a given L the workspace grows with B (the positions grow, and B >= 2 swaps the frequencies
  // for a table at least as large), so the largest is at B = floor(max_tokens / L) for some L.
  std::size_t largest = 0;
  for (std::int64_t len = 1; len <= max_len; ++len) {
    dims.len = len;
    dims.batch = max_tokens / len;
    require_embedding_args(dims, config, op);
    largest = std::max(largest, fwd_workspace_layout(dims, config).total);
  }
  return largest;
}

std::size_t embedding_bwd_atomic_workspace_bytes(const EmbeddingShape& shape, const EmbeddingConfig& config,
                                                 bool forked) {
  require_embedding_args(shape, config, "embedding_bwd_atomic_workspace_bytes");
  return atomic_workspace_layout(shape, config, forked).total;
}

std::size_t embedding_bwd_sorted_workspace_bytes(const EmbeddingShape& shape, const EmbeddingConfig& config) {
  constexpr const char* op = "embedding_bwd_sorted_workspace_bytes";
  require_embedding_args(shape, config, op);
  const bool learned = config.positions == PositionEncoding::learned;
  const std::int64_t n = shape.tokens();
  // Slot-indexed learned positions are not sorted (their order is known): no CUB storage.
  const bool sort_positions = learned && config.indexing == PositionIndexing::nonpad_count;
  std::size_t temp = 0;
  if (n > 0) {
    temp = sort_temp_bytes(n, embedding_sort_key_bits(shape.vocab), op);
    if (sort_positions) {
      temp = std::max(temp, sort_temp_bytes(n, embedding_sort_key_bits(shape.num_positions), op));
    }
  }
  return embedding_sort_layout(n, shape.hidden, shape.vocab, learned, learned ? shape.num_positions : 0, temp)
      .total;
}

template <class T>
void launch_embedding_bwd_sorted(T* d_token_table, T* d_position_table, const T* dy,
                                 const std::int32_t* tokens, const EmbeddingShape& shape,
                                 const EmbeddingConfig& config, void* workspace, std::size_t workspace_bytes,
                                 cudaStream_t stream, const StreamFork* fork) {
  SEQBENCH_NVTX_RANGE("embedding_bwd_sorted");
  constexpr const char* op = "embedding_bwd_sorted";
  require_embedding_args(shape, config, op);
  require_bwd_pointers(d_token_table, d_position_table, dy, tokens, shape, config, op);
  if (fork != nullptr) require_stream_fork(*fork, stream, op);
  const bool learned = config.positions == PositionEncoding::learned;
  const std::int64_t n = shape.tokens();
  // The layout without the CUB part first: the pointer checks need no device.
  const EmbeddingSortLayout arrays =
      embedding_sort_layout(n, shape.hidden, shape.vocab, learned, learned ? shape.num_positions : 0, 0);
  if (n > 0) {
    require_non_null(workspace, op, "workspace");
    SEQBENCH_REQUIRE(reinterpret_cast<std::uintptr_t>(workspace) % kAlign == 0,
                     op << ": workspace is not " << kAlign << "-byte aligned");
    SEQBENCH_REQUIRE(workspace_bytes >= arrays.total,
                     op << ": workspace of " << workspace_bytes << " bytes, needs at least " << arrays.total);
    const std::size_t tok_bytes = table_bytes<T>(shape.vocab, shape.hidden);
    require_disjoint(d_token_table, tok_bytes, workspace, workspace_bytes, op, "d_token_table", "workspace");
    require_disjoint(workspace, workspace_bytes, dy, table_bytes<T>(n, shape.hidden), op, "workspace", "dy");
    require_disjoint(workspace, workspace_bytes, tokens, static_cast<std::size_t>(n) * sizeof(std::int32_t),
                     op, "workspace", "tokens");
    if (learned) {
      require_disjoint(d_position_table, table_bytes<T>(shape.num_positions, shape.hidden), workspace,
                       workspace_bytes, op, "d_position_table", "workspace");
    }
    const std::size_t need = embedding_bwd_sorted_workspace_bytes(shape, config);
    SEQBENCH_REQUIRE(workspace_bytes >= need,
                     op << ": workspace of " << workspace_bytes << " bytes, needs " << need);
  }
  if (n == 0) {  // no rows with a gradient: the tables are all zeros
    SEQBENCH_CUDA_CHECK(cudaMemsetAsync(d_token_table, 0, table_bytes<T>(shape.vocab, shape.hidden), stream));
    if (learned && shape.num_positions > 0) {
      SEQBENCH_CUDA_CHECK(
          cudaMemsetAsync(d_position_table, 0, table_bytes<T>(shape.num_positions, shape.hidden), stream));
    }
    return;
  }
  const std::size_t temp_bytes = workspace_bytes - arrays.total;
  auto* base = static_cast<unsigned char*>(workspace);
  const auto u32 = [&](std::size_t at) { return reinterpret_cast<std::uint32_t*>(base + at); };
  const auto i32 = [&](std::size_t at) { return reinterpret_cast<std::int32_t*>(base + at); };
  const bool nonpad = config.indexing == PositionIndexing::nonpad_count;
  // Each table row is written once, by its segment or with zeros, in place of a memset of whole
  // tables followed by the segments' rows (16384 tokens x 1024 bf16, a 32000-token vocabulary: 65.5 MB
  // of zeros then 24.2 MB of rows, where 41.3 MB of zeros are needed): the key kernels mark the
  // rows that get a gradient in the bitmaps, which start cleared.
  SEQBENCH_CUDA_CHECK(cudaMemsetAsync(base + arrays.token_touched, 0, arrays.touched_bytes, stream));

  const std::int32_t* positions = nullptr;
  if (learned && nonpad) {
    run_positions(i32(arrays.positions), tokens, shape, config, stream);
    positions = i32(arrays.positions);
  }
  KeyArgs k;
  k.tile = make_tile(tokens, positions, shape, config);
  k.token_keys = u32(arrays.token_keys_in);
  k.token_values = i32(arrays.token_values_in);
  k.token_touched = u32(arrays.token_touched);
  if (learned && nonpad) {
    k.position_keys = u32(arrays.position_keys_in);
    k.position_values = i32(arrays.position_values_in);
    k.position_touched = u32(arrays.position_touched);
    k.num_positions = shape.num_positions;
  }
  if (learned && nonpad) {
    embedding_keys_kernel<true><<<grid_stride_blocks(n), kThreads, 0, stream>>>(k);
  } else {
    embedding_keys_kernel<false><<<grid_stride_blocks(n), kThreads, 0, stream>>>(k);
  }
  SEQBENCH_CUDA_CHECK_LAUNCH();

  ChunkArgs<T> c;
  c.partial = reinterpret_cast<float*>(base + arrays.partial);
  c.dy = dy;
  c.n = n;
  c.windows = (n + kChunk - 1) / kChunk;
  c.hidden = shape.hidden;
  c.keep = draw_threshold(config.dropout.p);
  c.keep_scale = dropout_keep_scale(config.dropout.p);
  c.seed = config.dropout.seed;
  c.offset = config.dropout.offset;
  constexpr std::int64_t kTileCols = 32 * Packed<T>::kSize;
  const std::int64_t tiles = (shape.hidden + kTileCols - 1) / kTileCols;
  const std::int64_t window_blocks = (c.windows + kWarps - 1) / kWarps;  // <= 2^23
  const dim3 grid(static_cast<unsigned>(window_blocks),
                  static_cast<unsigned>(std::min<std::int64_t>(tiles, 65535)));
  // The window kernel's 1D grid: window_blocks x tile_passes reduce blocks (at most 2^30, the tiles
  // grid-striding beyond), then the zero blocks (at most 2^26): below the 2^31 - 1 blocks of a grid.
  c.window_blocks = window_blocks;
  c.tile_passes =
      std::min<std::int64_t>(tiles, std::max<std::int64_t>(1, (std::int64_t{1} << 30) / window_blocks));
  // One table's arguments of the window, merge and zero kernels (the partials are reused).
  const auto table_args = [&](T* grad, std::int64_t rows, float out_scale, const std::uint32_t* keys,
                              const std::int32_t* values, const std::uint32_t* touched) {
    ChunkArgs<T> t = c;
    t.grad = grad;
    t.rows = rows;
    t.out_scale = out_scale;
    t.keys = keys;
    t.values = values;
    t.touched = touched;
    t.vector_path = shape.hidden % Packed<T>::kSize == 0 && is_vector_aligned(dy) && is_vector_aligned(grad);
    return t;
  };
  // The window kernel, with its zero blocks unless the fork's side stream zeroes the table, then
  // the merge kernel.
  const auto reduce_table = [&](const ChunkArgs<T>& t, bool with_zero_blocks) {
    const std::int64_t zero_blocks = with_zero_blocks ? zero_blocks_for(t.rows) : 0;
    const std::int64_t blocks = t.window_blocks * t.tile_passes + zero_blocks;
    embedding_window_kernel<T><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(t);
    SEQBENCH_CUDA_CHECK_LAUNCH();
    embedding_merge_kernel<T><<<grid, kThreads, 0, stream>>>(t);
    SEQBENCH_CUDA_CHECK_LAUNCH();
  };
  const auto sort = [&](std::size_t keys_in, std::size_t values_in, std::size_t keys_out,
                        std::size_t values_out, std::int64_t rows) {
    std::size_t temp = temp_bytes;
    SEQBENCH_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(
        base + arrays.sort_temp, temp, u32(keys_in), u32(keys_out), i32(values_in), i32(values_out),
        static_cast<int>(n), 0, embedding_sort_key_bits(rows), stream));
  };
  const ChunkArgs<T> token_args =
      table_args(d_token_table, shape.vocab, config.scale, u32(arrays.token_keys_out),
                 i32(arrays.token_values_out), u32(arrays.token_touched));
  std::optional<ForkScope> branch;
  if (fork != nullptr) {
    // The token table's bitmap is complete once the key kernel has run: from here its zero fill
    // (most of the bytes at a large vocabulary) runs on the side stream, beside the sort, the
    // window and merge kernels and the position table's work (mostly latency), instead of after
    // the sort. The two branches write disjoint rows. The launch's stream waits for it at the end
    // (or, should a later call throw, when `branch` goes out of scope).
    const unsigned zero_blocks = side_zero_blocks(shape.vocab);
    branch.emplace(*fork, stream);
    embedding_zero_rows_kernel<T, false, true><<<zero_blocks, kThreads, 0, branch->side()>>>(token_args);
    SEQBENCH_CUDA_CHECK_LAUNCH();
  }
  sort(arrays.token_keys_in, arrays.token_values_in, arrays.token_keys_out, arrays.token_values_out,
       shape.vocab);
  reduce_table(token_args, fork == nullptr);
  if (learned) {
    if (nonpad) {
      sort(arrays.position_keys_in, arrays.position_values_in, arrays.position_keys_out,
           arrays.position_values_out, shape.num_positions);
    } else {
      SlotKeyArgs sk;
      sk.tokens = tokens;
      sk.keys = u32(arrays.position_keys_out);
      sk.values = i32(arrays.position_values_out);
      sk.n = static_cast<std::uint32_t>(n);
      sk.batch = static_cast<std::uint32_t>(shape.batch);
      sk.len = static_cast<std::uint32_t>(shape.len);
      sk.position_offset = static_cast<std::uint32_t>(config.position_offset);
      sk.vocab = static_cast<std::int32_t>(shape.vocab);
      sk.padding_idx = config.padding_idx;
      sk.touched = u32(arrays.position_touched);
      sk.touched_rows = static_cast<std::uint32_t>(shape.num_positions);
      embedding_slot_keys_kernel<<<grid_stride_blocks(
                                       std::max<std::int64_t>(n, (shape.num_positions + 31) / 32)),
                                   kThreads, 0, stream>>>(sk);
      SEQBENCH_CUDA_CHECK_LAUNCH();
    }
    reduce_table(table_args(d_position_table, shape.num_positions, 1.0f, u32(arrays.position_keys_out),
                            i32(arrays.position_values_out), u32(arrays.position_touched)),
                 true);
  }
  if (branch) branch->join();
}

// ---------------------------------------------------------------------------------------------
// Baseline.

void launch_embedding_positions(std::int32_t* positions, const std::int32_t* tokens,
                                const EmbeddingShape& shape, const EmbeddingConfig& config,
                                cudaStream_t stream) {
  SEQBENCH_NVTX_RANGE("embedding_positions");
  constexpr const char* op = "embedding_positions";
  require_embedding_args(shape, config, op);
  const std::int64_t n = shape.tokens();
  if (n == 0) return;
  require_tensor(positions, op, "positions");
  require_tensor(tokens, op, "tokens");
  const std::size_t bytes = static_cast<std::size_t>(n) * sizeof(std::int32_t);
  require_disjoint(positions, bytes, tokens, bytes, op, "positions", "tokens");
  run_positions(positions, tokens, shape, config, stream);
}

namespace {
void require_rows(std::int64_t n, std::int64_t hidden, const char* op) {
  SEQBENCH_REQUIRE(n >= 0 && n <= kMaxTokens, op << ": n " << n << " outside [0, " << kMaxTokens << "]");
  SEQBENCH_REQUIRE(hidden >= 1, op << ": hidden " << hidden << " must be >= 1");
  require_matrix_shape(n, hidden, op);
}
}  // namespace

template <class T>
void launch_gather_rows(T* y, const T* table, std::int64_t table_rows, const std::int32_t* index,
                        std::int64_t n, std::int64_t hidden, cudaStream_t stream) {
  SEQBENCH_NVTX_RANGE("gather_rows");
  constexpr const char* op = "gather_rows";
  require_rows(n, hidden, op);
  SEQBENCH_REQUIRE(table_rows >= 1, op << ": table_rows " << table_rows << " must be >= 1");
  require_matrix_shape(table_rows, hidden, op);
  if (n == 0) return;
  require_tensor(y, op, "y");
  require_tensor(table, op, "table");
  require_tensor(index, op, "index");
  const std::size_t bytes = table_bytes<T>(n, hidden);
  require_disjoint(y, bytes, table, table_bytes<T>(table_rows, hidden), op, "y", "table");
  require_disjoint(y, bytes, index, static_cast<std::size_t>(n) * sizeof(std::int32_t), op, "y", "index");
  const bool vector = hidden % Packed<T>::kSize == 0 && is_vector_aligned(y) && is_vector_aligned(table);
  gather_rows_kernel<T><<<row_blocks(n), kThreads, 0, stream>>>(y, table, table_rows, index, n,
                                                                static_cast<std::int32_t>(hidden), vector);
  SEQBENCH_CUDA_CHECK_LAUNCH();
}

template <class T>
void launch_scale(T* y, const T* x, std::size_t count, float scale, cudaStream_t stream) {
  SEQBENCH_NVTX_RANGE("scale");
  constexpr const char* op = "scale";
  SEQBENCH_REQUIRE(count <= (std::size_t{1} << 62), op << ": count " << count << " > 2^62");
  if (count == 0) return;
  require_tensor(y, op, "y");
  require_tensor(x, op, "x");
  require_disjoint(y, count * sizeof(T), x, count * sizeof(T), op, "y", "x");
  const auto total = static_cast<std::int64_t>(count);
  const bool vector = is_vector_aligned(y) && is_vector_aligned(x);
  const std::int64_t threads = vector ? (total + Packed<T>::kSize - 1) / Packed<T>::kSize : total;
  scale_kernel<T><<<grid_stride_blocks(threads), kThreads, 0, stream>>>(y, x, total, scale, vector);
  SEQBENCH_CUDA_CHECK_LAUNCH();
}

template <class T>
void launch_zero_padding_rows(T* y, const T* x, const std::int32_t* tokens, std::int64_t n,
                              std::int64_t hidden, std::int32_t padding_idx, cudaStream_t stream) {
  SEQBENCH_NVTX_RANGE("zero_padding_rows");
  constexpr const char* op = "zero_padding_rows";
  require_rows(n, hidden, op);
  SEQBENCH_REQUIRE(padding_idx >= -1, op << ": padding_idx " << padding_idx << " < -1");
  if (n == 0) return;
  require_tensor(y, op, "y");
  require_tensor(x, op, "x");
  require_tensor(tokens, op, "tokens");
  const std::size_t bytes = table_bytes<T>(n, hidden);
  require_disjoint(y, bytes, x, bytes, op, "y", "x");
  require_disjoint(y, bytes, tokens, static_cast<std::size_t>(n) * sizeof(std::int32_t), op, "y", "tokens");
  const bool vector = hidden % Packed<T>::kSize == 0 && is_vector_aligned(y) && is_vector_aligned(x);
  zero_padding_rows_kernel<T><<<row_blocks(n), kThreads, 0, stream>>>(
      y, x, tokens, n, static_cast<std::int32_t>(hidden), padding_idx, vector);
  SEQBENCH_CUDA_CHECK_LAUNCH();
}

template <class T>
void launch_scatter_add_rows(T* grad, std::int64_t grad_rows, const T* src, const std::int32_t* index,
                             const std::int32_t* tokens, std::int32_t padding_idx, std::int64_t n,
                             std::int64_t hidden, cudaStream_t stream) {
  SEQBENCH_NVTX_RANGE("scatter_add_rows");
  constexpr const char* op = "scatter_add_rows";
  require_rows(n, hidden, op);
  SEQBENCH_REQUIRE(grad_rows >= 1, op << ": grad_rows " << grad_rows << " must be >= 1");
  require_matrix_shape(grad_rows, hidden, op);
  SEQBENCH_REQUIRE(padding_idx >= -1, op << ": padding_idx " << padding_idx << " < -1");
  if (n == 0) return;
  require_tensor(grad, op, "grad");
  require_tensor(src, op, "src");
  require_tensor(index, op, "index");
  require_tensor(tokens, op, "tokens");
  const std::size_t grad_bytes = table_bytes<T>(grad_rows, hidden);
  const std::size_t index_bytes = static_cast<std::size_t>(n) * sizeof(std::int32_t);
  require_disjoint(grad, grad_bytes, src, table_bytes<T>(n, hidden), op, "grad", "src");
  require_disjoint(grad, grad_bytes, index, index_bytes, op, "grad", "index");
  require_disjoint(grad, grad_bytes, tokens, index_bytes, op, "grad", "tokens");
  scatter_add_rows_kernel<T><<<row_blocks(n), kThreads, 0, stream>>>(
      grad, grad_rows, src, index, tokens, padding_idx, n, static_cast<std::int32_t>(hidden));
  SEQBENCH_CUDA_CHECK_LAUNCH();
}

// The explicit instantiations, in one place.
#define SEQBENCH_EMBEDDING_INSTANTIATE(T)                                                                    \
  template void launch_embedding_fwd<T>(T*, const std::int32_t*, const T*, const T*, const EmbeddingShape&,  \
                                        const EmbeddingConfig&, void*, std::size_t, cudaStream_t);           \
  template void launch_embedding_bwd_atomic<T>(T*, T*, const T*, const std::int32_t*, const EmbeddingShape&, \
                                               const EmbeddingConfig&, void*, std::size_t, cudaStream_t,     \
                                               const StreamFork*);                                           \
  template void launch_embedding_bwd_sorted<T>(T*, T*, const T*, const std::int32_t*, const EmbeddingShape&, \
                                               const EmbeddingConfig&, void*, std::size_t, cudaStream_t,     \
                                               const StreamFork*);                                           \
  template void launch_gather_rows<T>(T*, const T*, std::int64_t, const std::int32_t*, std::int64_t,         \
                                      std::int64_t, cudaStream_t);                                           \
  template void launch_scale<T>(T*, const T*, std::size_t, float, cudaStream_t);                             \
  template void launch_zero_padding_rows<T>(T*, const T*, const std::int32_t*, std::int64_t, std::int64_t,   \
                                            std::int32_t, cudaStream_t);                                     \
  template void launch_scatter_add_rows<T>(T*, std::int64_t, const T*, const std::int32_t*,                  \
                                           const std::int32_t*, std::int32_t, std::int64_t, std::int64_t,    \
                                           cudaStream_t);

SEQBENCH_EMBEDDING_INSTANTIATE(float)
SEQBENCH_EMBEDDING_INSTANTIATE(__half)
SEQBENCH_EMBEDDING_INSTANTIATE(__nv_bfloat16)

#undef SEQBENCH_EMBEDDING_INSTANTIATE

}  // namespace seqbench::kernels
