// LayerNorm kernels: fused forward (warp / block / multipass paths, Welford or two-moment
// statistics), fused backward with deterministic dgamma/dbeta, and the unfused eager-like baseline.
// The thread mappings are documented in kernels/layernorm.h.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <type_traits>
#include <vector>

#include "core/byte_range.h"
#include "core/cuda_check.h"
#include "core/error.h"
#include "core/nvtx.h"
#include "kernels/dispatch_items.h"
#include "kernels/eager_map.h"
#include "kernels/layernorm.h"
#include "kernels/packed.h"
#include "kernels/reduce.cuh"

namespace seqbench::kernels {
namespace {

// Blocks of at most this many threads are preferred on the block path: more rows in flight per SM
// and cheaper barriers; 1024 threads are used only when the row needs them.
constexpr int kPreferredBlockThreads = 512;
constexpr int kSliceThreads = 256;  // multipass backward: threads per column slice
// Registers per thread such that the largest block a kernel is launched with fits 64K registers.
constexpr int kBackwardMaxRegisters = 65536 / kLayerNormBackwardTeamThreads;  // 128
constexpr int kForwardMaxRegisters = 65536 / kLayerNormMaxBlockThreads;       // 64
constexpr int kReduceCols = 32;  // column reduce: a 32 x 32 block, 32 columns x 32 chunk slices
constexpr int kUnfusedThreads = 256;
constexpr int kUnfusedPartialRows = 8;  // unfused column partials: a 32 x 8 block
constexpr std::size_t kUnfusedAlign = 256;

// ---------------------------------------------------------------------------------------------
// Statistics primitives, compiled for host and device from this one source so that the host
// emulation (the accuracy study) performs the kernels' arithmetic bit for bit. Every multiply-add
// is an explicit fmaf, an FMA on host and device alike; the library is compiled with --fmad=false
// (kernels/CMakeLists.txt), so the device contracts nothing else that the host would round apart.

// 1/v correctly rounded on host and device alike (__frcp_rn is IEEE round-to-nearest): the
// statistics multiply by it instead of dividing, which is cheaper on the device and just as
// reproducible on the host.
SEQBENCH_HD inline float reciprocal(float v) {
#if defined(__CUDA_ARCH__)
  return __frcp_rn(v);
#else
  return 1.0f / v;
#endif
}

struct WelfordStat {
  float mean = 0.0f;
  float m2 = 0.0f;
  float count = 0.0f;
};

// Welford's update for the n-th element of a thread (n = count + 1, inv_n = fl(1/n)). The mean
// moves by delta * fl(1/n) rather than delta / n: in the register paths n is a compile-time
// constant (a thread's valid elements are a prefix of its unrolled loop), so the caller passes
// 1.0f / n as a constant and the update costs two fmas and two subtractions, no division.
SEQBENCH_HD inline void welford_push(WelfordStat& s, float x, float n, float inv_n) {
  s.count = n;
  const float delta = x - s.mean;
  s.mean = fmaf(delta, inv_n, s.mean);
  s.m2 = fmaf(delta, x - s.mean, s.m2);
}

// Chan, Golub & LeVeque's pairwise combination. Not symmetric in its operands, so callers always
// pass the lower lane first; then both partners of a butterfly step compute identical bits.
SEQBENCH_HD inline WelfordStat welford_merge(const WelfordStat& lo, const WelfordStat& hi) {
  if (hi.count == 0.0f) return lo;
  if (lo.count == 0.0f) return hi;
  const float count = lo.count + hi.count;
  const float w = hi.count * reciprocal(count);  // n_hi / n
  const float delta = hi.mean - lo.mean;
  WelfordStat r;
  r.count = count;
  r.mean = fmaf(delta, w, lo.mean);
  r.m2 = fmaf(delta * delta, lo.count * w, lo.m2 + hi.m2);  // + δ² n_lo n_hi / n
  return r;
}

// inv_h = fl(1/hidden), computed once on the host (the launchers pass it in).
SEQBENCH_HD inline LayerNormRowStats welford_finish(const WelfordStat& s, float inv_h) {
  return {s.mean, s.m2 * inv_h};
}

SEQBENCH_HD inline void moments_push(float& s1, float& s2, float x) {
  s1 += x;
  s2 = fmaf(x, x, s2);
}

// var = E[x²] - mean², clamped at 0 (cancellation can make it negative).
SEQBENCH_HD inline LayerNormRowStats two_moment_finish(float s1, float s2, float inv_h) {
  const float mean = s1 * inv_h;
  return {mean, fmaxf(fmaf(-mean, mean, s2 * inv_h), 0.0f)};
}

// ---------------------------------------------------------------------------------------------
// Team reductions of two sums and of Welford statistics (the teams are kernels/reduce.cuh's).

struct Sum2 {
  float a;
  float b;
};

// Two sums reduced together: one barrier pair instead of two on a block team.
template <bool kWarpTeam>
__device__ __forceinline__ Sum2 team_sum2(Sum2 v) {
  v.a = warp_reduce_sum(v.a);
  v.b = warp_reduce_sum(v.b);
  if constexpr (!kWarpTeam) {
    __shared__ float partial[2][kWarp];
    const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
    const int warps = static_cast<int>(blockDim.x) / kWarp;
    __syncthreads();  // a previous call may still be reading `partial`
    if (lane == 0) {
      partial[0][warp] = v.a;
      partial[1][warp] = v.b;
    }
    __syncthreads();
    v.a = warp_reduce_sum(lane < warps ? partial[0][lane] : 0.0f);
    v.b = warp_reduce_sum(lane < warps ? partial[1][lane] : 0.0f);
  }
  return v;
}

// The backward's reduction. Its blocks are 2-D: blockDim.x = the team (a multiple of 32, so every
// warp lies inside one team), blockDim.y = the teams; no thread index needs a division. A warp
// shuffle, then (block teams) each team adds its own warps' partials. Every thread of the block
// must call it (it uses __syncthreads).
template <bool kWarpTeam>
__device__ __forceinline__ Sum2 teams_sum2(Sum2 v) {
  v.a = warp_reduce_sum(v.a);
  v.b = warp_reduce_sum(v.b);
  if constexpr (!kWarpTeam) {
    __shared__ float partial[2][kWarp];  // by warp of the block (<= 32 warps)
    const int flat = static_cast<int>(threadIdx.y * blockDim.x + threadIdx.x);
    const int lane = flat % kWarp, warp = flat / kWarp;
    const int warps_per_team = static_cast<int>(blockDim.x) / kWarp;
    const int first_warp = static_cast<int>(threadIdx.y) * warps_per_team;
    __syncthreads();  // a previous call may still be reading `partial`
    if (lane == 0) {
      partial[0][warp] = v.a;
      partial[1][warp] = v.b;
    }
    __syncthreads();
    v.a = warp_reduce_sum(lane < warps_per_team ? partial[0][first_warp + lane] : 0.0f);
    v.b = warp_reduce_sum(lane < warps_per_team ? partial[1][first_warp + lane] : 0.0f);
  }
  return v;
}

__device__ __forceinline__ WelfordStat warp_welford(WelfordStat s) {
  const int lane = threadIdx.x % kWarp;
  for (int offset = 16; offset > 0; offset >>= 1) {
    WelfordStat other;
    other.mean = __shfl_xor_sync(0xffffffffu, s.mean, offset);
    other.m2 = __shfl_xor_sync(0xffffffffu, s.m2, offset);
    other.count = __shfl_xor_sync(0xffffffffu, s.count, offset);
    s = (lane & offset) ? welford_merge(other, s) : welford_merge(s, other);
  }
  return s;
}

template <bool kWarpTeam>
__device__ __forceinline__ WelfordStat team_welford(WelfordStat s) {
  s = warp_welford(s);
  if constexpr (!kWarpTeam) {
    __shared__ float partial[3][kWarp];
    const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
    const int warps = static_cast<int>(blockDim.x) / kWarp;
    __syncthreads();
    if (lane == 0) {
      partial[0][warp] = s.mean;
      partial[1][warp] = s.m2;
      partial[2][warp] = s.count;
    }
    __syncthreads();
    WelfordStat w;  // the identity (count 0) for lanes past the last warp
    if (lane < warps) w = WelfordStat{partial[0][lane], partial[1][lane], partial[2][lane]};
    s = warp_welford(w);
  }
  return s;
}

// ---------------------------------------------------------------------------------------------
// Forward

template <class T>
struct ForwardArgs {
  T* y;
  float* mean;
  float* rstd;
  const T* x;
  const T* gamma;
  const T* beta;
  std::int64_t rows;
  int hidden;
  float inv_hidden;  // fl(1/hidden), from the host: no division in the kernels
  float eps;
  LayerNormStats stats;
};

// Register paths. A thread holds vectors j = lane + k * team (k < kItems) of its row.
// __maxnreg__(64) (1024-thread blocks fit) rather than __launch_bounds__(1024): under the launch
// bound ptxas gave the scalar warp-path variants a stack frame and a 4-byte spill.
template <class T, int kVec, int kItems, bool kWarpTeam>
__global__ void __maxnreg__(kForwardMaxRegisters) layernorm_forward_kernel(ForwardArgs<T> a) {
  using V = Packed<T, kVec>;
  using TeamT = Team<kWarpTeam>;
  const int team = TeamT::size(), lane = TeamT::lane();
  const std::int64_t row = static_cast<std::int64_t>(blockIdx.x) * TeamT::per_block() + TeamT::index();
  // Only the warp path's last block can have teams past the end; a warp team uses no block
  // barrier, so whole warps may leave.
  if (row >= a.rows) return;
  const T* __restrict__ xr = a.x + row * a.hidden;

  float v[kItems][kVec];
#pragma unroll
  for (int k = 0; k < kItems; ++k) {
    const int col = (lane + k * team) * kVec;
    if (col < a.hidden) {
      const V p = V::load(xr + col);
#pragma unroll
      for (int i = 0; i < kVec; ++i) v[k][i] = to_float(p.v[i]);
    } else {
#pragma unroll
      for (int i = 0; i < kVec; ++i) v[k][i] = 0.0f;
    }
  }

  LayerNormRowStats st;
  if (a.stats == LayerNormStats::welford) {
    WelfordStat s;
#pragma unroll
    for (int k = 0; k < kItems; ++k) {
      if ((lane + k * team) * kVec < a.hidden) {
#pragma unroll
        for (int i = 0; i < kVec; ++i)
          welford_push(s, v[k][i], static_cast<float>(k * kVec + i + 1),
                       1.0f / static_cast<float>(k * kVec + i + 1));
      }
    }
    st = welford_finish(team_welford<kWarpTeam>(s), a.inv_hidden);
  } else {
    float s1 = 0.0f, s2 = 0.0f;
#pragma unroll
    for (int k = 0; k < kItems; ++k) {
      if ((lane + k * team) * kVec < a.hidden) {
#pragma unroll
        for (int i = 0; i < kVec; ++i) moments_push(s1, s2, v[k][i]);
      }
    }
    const Sum2 s = team_sum2<kWarpTeam>({s1, s2});
    st = two_moment_finish(s.a, s.b, a.inv_hidden);
  }
  const float rstd = rsqrtf(st.var + a.eps);
  if (lane == 0) {
    if (a.mean) a.mean[row] = st.mean;
    if (a.rstd) a.rstd[row] = rstd;
  }

  T* __restrict__ yr = a.y + row * a.hidden;
#pragma unroll
  for (int k = 0; k < kItems; ++k) {
    const int col = (lane + k * team) * kVec;
    if (col < a.hidden) {
      const V g = V::load(a.gamma + col), b = V::load(a.beta + col);
      V out;
#pragma unroll
      for (int i = 0; i < kVec; ++i)
        out.v[i] = from_float<T>(fmaf((v[k][i] - st.mean) * rstd, to_float(g.v[i]), to_float(b.v[i])));
      out.store(yr + col);
    }
  }
}

// Rows too long for registers: one block per row, one pass for the statistics and one for the
// output, both in the register paths' element order (so the emulation covers this path too).
template <class T, int kVec>
__global__ void __launch_bounds__(kLayerNormMultipassThreads)
    layernorm_forward_multipass_kernel(ForwardArgs<T> a) {
  using V = Packed<T, kVec>;
  const int team = blockDim.x, lane = threadIdx.x;
  const std::int64_t row = blockIdx.x;
  const T* __restrict__ xr = a.x + row * a.hidden;

  LayerNormRowStats st;
  if (a.stats == LayerNormStats::welford) {
    WelfordStat s;
    for (int j = lane; j * kVec < a.hidden; j += team) {
      const V p = V::load(xr + j * kVec);
#pragma unroll
      for (int i = 0; i < kVec; ++i)
        welford_push(s, to_float(p.v[i]), s.count + 1.0f, reciprocal(s.count + 1.0f));
    }
    st = welford_finish(team_welford<false>(s), a.inv_hidden);
  } else {
    float s1 = 0.0f, s2 = 0.0f;
    for (int j = lane; j * kVec < a.hidden; j += team) {
      const V p = V::load(xr + j * kVec);
#pragma unroll
      for (int i = 0; i < kVec; ++i) moments_push(s1, s2, to_float(p.v[i]));
    }
    const Sum2 s = team_sum2<false>({s1, s2});
    st = two_moment_finish(s.a, s.b, a.inv_hidden);
  }
  const float rstd = rsqrtf(st.var + a.eps);
  if (lane == 0) {
    if (a.mean) a.mean[row] = st.mean;
    if (a.rstd) a.rstd[row] = rstd;
  }
  T* __restrict__ yr = a.y + row * a.hidden;
  for (int j = lane; j * kVec < a.hidden; j += team) {
    const int col = j * kVec;
    const V p = V::load(xr + col), g = V::load(a.gamma + col), b = V::load(a.beta + col);
    V out;
#pragma unroll
    for (int i = 0; i < kVec; ++i)
      out.v[i] = from_float<T>(fmaf((to_float(p.v[i]) - st.mean) * rstd, to_float(g.v[i]), to_float(b.v[i])));
    out.store(yr + col);
  }
}

// ---------------------------------------------------------------------------------------------
// Backward

template <class T>
struct BackwardArgs {
  T* dx;
  const T* dy;
  const T* x;
  const T* gamma;
  const float* mean;
  const float* rstd;
  float* partial_g;  // [chunks, hidden]: Σ over the chunk's rows of dy·x̂
  float* partial_b;  // [chunks, hidden]: Σ over the chunk's rows of dy
  float2* row_sums;  // [rows]: (mean_c g, mean_c g·x̂), multipass path only
  std::int64_t rows;
  int hidden;
  float inv_hidden;  // fl(1/hidden), from the host
  std::int64_t rows_per_chunk;
};

// Writes a thread's kVec partial sums for columns [col, col + kVec) of one partial row.
template <int kVec>
__device__ __forceinline__ void store_partials(float* dst, const float (&acc)[kVec]) {
  if constexpr (kVec % 4 == 0) {
#pragma unroll
    for (int i = 0; i < kVec; i += 4) {
      Packed<float, 4> p;
#pragma unroll
      for (int q = 0; q < 4; ++q) p.v[q] = acc[i + q];
      p.store(dst + i);
    }
  } else {
#pragma unroll
    for (int i = 0; i < kVec; ++i) dst[i] = acc[i];
  }
}

// Register paths: block p owns chunk p of rows. The block holds `teams` row teams; they walk the
// chunk's rows together (team t takes rows first + t, first + t + teams, ...; every team runs the
// same number of iterations, idle ones included, so the barriers of a block-team reduction stay
// uniform), compute dx, and keep dgamma/dbeta sums for their columns in registers. At the end the
// teams' sums are added in shared memory in team order (when there is more than one team) and the
// block writes one partial row per plane: no atomics, so the result does not depend on timing.
// Dynamic shared memory: 2 * teams * hidden floats when teams > 1.
// __maxnreg__ rather than __launch_bounds__(512): under the launch bound ptxas held the 8-element
// scalar variants to 64 registers and spilled; 128 registers per thread still let any block of at
// most 512 threads (all this kernel is launched with) fit the 64K-register file.
template <class T, int kVec, int kItems, bool kWarpTeam>
__global__ void __maxnreg__(kBackwardMaxRegisters) layernorm_backward_kernel(BackwardArgs<T> a) {
  using V = Packed<T, kVec>;
  extern __shared__ float combine[];
  // A 2-D block: x = the lane in its row team, y = the team.
  const int team = static_cast<int>(blockDim.x), lane = static_cast<int>(threadIdx.x);
  const int teams = static_cast<int>(blockDim.y), team_index = static_cast<int>(threadIdx.y);
  const std::int64_t first = static_cast<std::int64_t>(blockIdx.x) * a.rows_per_chunk;
  const std::int64_t last = min(first + a.rows_per_chunk, a.rows);
  const float inv_h = a.inv_hidden;

  float gam[kItems][kVec], acc_g[kItems][kVec], acc_b[kItems][kVec];
#pragma unroll
  for (int k = 0; k < kItems; ++k) {
    const int col = (lane + k * team) * kVec;
    if (col < a.hidden) {
      const V g = V::load(a.gamma + col);
#pragma unroll
      for (int i = 0; i < kVec; ++i) gam[k][i] = to_float(g.v[i]);
    } else {
#pragma unroll
      for (int i = 0; i < kVec; ++i) gam[k][i] = 0.0f;
    }
#pragma unroll
    for (int i = 0; i < kVec; ++i) acc_g[k][i] = acc_b[k][i] = 0.0f;
  }

  for (std::int64_t base = first; base < last; base += teams) {
    const std::int64_t row = base + team_index;
    const bool active = row < last;  // the chunk's last round may leave teams idle
    const float m = active ? a.mean[row] : 0.0f, r = active ? a.rstd[row] : 0.0f;
    const T* __restrict__ xr = a.x + row * a.hidden;
    const T* __restrict__ dyr = a.dy + row * a.hidden;
    float xh[kItems][kVec], g[kItems][kVec];
    float sg = 0.0f, sgx = 0.0f;
#pragma unroll
    for (int k = 0; k < kItems; ++k) {
      const int col = (lane + k * team) * kVec;
      if (active && col < a.hidden) {
        const V px = V::load(xr + col), pd = V::load(dyr + col);
#pragma unroll
        for (int i = 0; i < kVec; ++i) {
          const float d = to_float(pd.v[i]);
          const float h = (to_float(px.v[i]) - m) * r;
          acc_b[k][i] += d;
          acc_g[k][i] = fmaf(d, h, acc_g[k][i]);
          const float gg = d * gam[k][i];
          sg += gg;
          sgx = fmaf(gg, h, sgx);
          xh[k][i] = h;
          g[k][i] = gg;
        }
      } else {
#pragma unroll
        for (int i = 0; i < kVec; ++i) xh[k][i] = g[k][i] = 0.0f;
      }
    }
    const Sum2 s = teams_sum2<kWarpTeam>({sg, sgx});
    if (!active) continue;
    const float mg = s.a * inv_h, mgx = s.b * inv_h;
    T* __restrict__ dxr = a.dx + row * a.hidden;
#pragma unroll
    for (int k = 0; k < kItems; ++k) {
      const int col = (lane + k * team) * kVec;
      if (col < a.hidden) {
        V out;
#pragma unroll
        for (int i = 0; i < kVec; ++i) out.v[i] = from_float<T>(r * fmaf(-xh[k][i], mgx, g[k][i] - mg));
        out.store(dxr + col);
      }
    }
  }

  float* __restrict__ pg = a.partial_g + static_cast<std::int64_t>(blockIdx.x) * a.hidden;
  float* __restrict__ pb = a.partial_b + static_cast<std::int64_t>(blockIdx.x) * a.hidden;
  if (teams == 1) {  // uniform over the block
#pragma unroll
    for (int k = 0; k < kItems; ++k) {
      const int col = (lane + k * team) * kVec;
      if (col < a.hidden) {
        store_partials<kVec>(pg + col, acc_g[k]);
        store_partials<kVec>(pb + col, acc_b[k]);
      }
    }
    return;
  }
  float* sm_g = combine;                     // [teams][hidden]
  float* sm_b = combine + teams * a.hidden;  // [teams][hidden]
#pragma unroll
  for (int k = 0; k < kItems; ++k) {
    const int col = (lane + k * team) * kVec;
    if (col < a.hidden) {
#pragma unroll
      for (int i = 0; i < kVec; ++i) {
        sm_g[team_index * a.hidden + col + i] = acc_g[k][i];
        sm_b[team_index * a.hidden + col + i] = acc_b[k][i];
      }
    }
  }
  __syncthreads();
  for (int col = team_index * team + lane; col < a.hidden; col += team * teams) {
    float tg = 0.0f, tb = 0.0f;
    for (int t = 0; t < teams; ++t) {
      tg += sm_g[t * a.hidden + col];
      tb += sm_b[t * a.hidden + col];
    }
    pg[col] = tg;
    pb[col] = tb;
  }
}

// Multipass, kernel 1 of 3: one block per row reduces Σg and Σg·x̂ over the row in global memory.
template <class T, int kVec>
__global__ void __launch_bounds__(kLayerNormMultipassThreads)
    layernorm_backward_row_sums_kernel(BackwardArgs<T> a) {
  using V = Packed<T, kVec>;
  const std::int64_t row = blockIdx.x;
  const float m = a.mean[row], r = a.rstd[row];
  const T* __restrict__ xr = a.x + row * a.hidden;
  const T* __restrict__ dyr = a.dy + row * a.hidden;
  float sg = 0.0f, sgx = 0.0f;
  for (int j = threadIdx.x; j * kVec < a.hidden; j += blockDim.x) {
    const int col = j * kVec;
    const V px = V::load(xr + col), pd = V::load(dyr + col), pgm = V::load(a.gamma + col);
#pragma unroll
    for (int i = 0; i < kVec; ++i) {
      const float gg = to_float(pd.v[i]) * to_float(pgm.v[i]);
      sg += gg;
      sgx = fmaf(gg, (to_float(px.v[i]) - m) * r, sgx);
    }
  }
  const Sum2 s = team_sum2<false>({sg, sgx});
  if (threadIdx.x == 0) {
    const float inv_h = a.inv_hidden;
    a.row_sums[row] = make_float2(s.a * inv_h, s.b * inv_h);
  }
}

// Multipass, kernel 2 of 3: a 2-D grid (column slices x chunks). A thread owns one vector of
// columns and walks its chunk's rows: dx, and dgamma/dbeta sums in registers, then one partial row.
template <class T, int kVec>
__global__ void __launch_bounds__(kSliceThreads) layernorm_backward_slice_kernel(BackwardArgs<T> a) {
  using V = Packed<T, kVec>;
  const int col = (static_cast<int>(blockIdx.x) * kSliceThreads + static_cast<int>(threadIdx.x)) * kVec;
  if (col >= a.hidden) return;  // no barriers in this kernel
  const std::int64_t chunk = blockIdx.y;
  const std::int64_t first = chunk * a.rows_per_chunk;
  const std::int64_t last = min(first + a.rows_per_chunk, a.rows);
  const V pgm = V::load(a.gamma + col);
  float acc_g[kVec], acc_b[kVec];
#pragma unroll
  for (int i = 0; i < kVec; ++i) acc_g[i] = acc_b[i] = 0.0f;
#pragma unroll 4
  for (std::int64_t row = first; row < last; ++row) {
    const float m = a.mean[row], r = a.rstd[row];
    const float2 sums = a.row_sums[row];
    const V px = V::load(a.x + row * a.hidden + col), pd = V::load(a.dy + row * a.hidden + col);
    V out;
#pragma unroll
    for (int i = 0; i < kVec; ++i) {
      const float d = to_float(pd.v[i]);
      const float h = (to_float(px.v[i]) - m) * r;
      acc_b[i] += d;
      acc_g[i] = fmaf(d, h, acc_g[i]);
      out.v[i] = from_float<T>(r * fmaf(-h, sums.y, d * to_float(pgm.v[i]) - sums.x));
    }
    out.store(a.dx + row * a.hidden + col);
  }
  store_partials<kVec>(a.partial_g + chunk * a.hidden + col, acc_g);
  store_partials<kVec>(a.partial_b + chunk * a.hidden + col, acc_b);
}

// The last kernel of every backward: out[c] = Σ_p partial[p][c] in a fixed order. A 32 x 32 block
// covers 32 columns; thread (x, y) adds chunks y, y + 32, ... in order, then thread (x, 0) adds the
// 32 slice sums in order. No atomics: the same partials always give the same bits.
template <class T>
__global__ void __launch_bounds__(kReduceCols* kReduceCols)
    layernorm_column_reduce_kernel(T* __restrict__ dgamma, T* __restrict__ dbeta,
                                   const float* __restrict__ pg, const float* __restrict__ pb,
                                   std::int64_t chunks, int hidden) {
  const int col = static_cast<int>(blockIdx.x) * kReduceCols + static_cast<int>(threadIdx.x);
  float g = 0.0f, b = 0.0f;
  if (col < hidden) {
    for (std::int64_t p = threadIdx.y; p < chunks; p += kReduceCols) {
      g += pg[p * hidden + col];
      b += pb[p * hidden + col];
    }
  }
  __shared__ float sg[kReduceCols][kReduceCols + 1];
  __shared__ float sb[kReduceCols][kReduceCols + 1];
  sg[threadIdx.y][threadIdx.x] = g;
  sb[threadIdx.y][threadIdx.x] = b;
  __syncthreads();
  if (threadIdx.y == 0 && col < hidden) {
    float tg = 0.0f, tb = 0.0f;
    for (int y = 0; y < kReduceCols; ++y) {
      tg += sg[y][threadIdx.x];
      tb += sb[y][threadIdx.x];
    }
    dgamma[col] = from_float<T>(tg);
    dbeta[col] = from_float<T>(tb);
  }
}

// ---------------------------------------------------------------------------------------------
// The unfused baseline: one op per kernel, intermediates in T, as eager PyTorch would run a
// decomposed LayerNorm. Row reductions: one block per row; elementwise: eager::launch_map (16-byte
// vectors, one thread per vector).

int unfused_row_threads(int hidden) {
  const int t = (hidden + kWarp - 1) / kWarp * kWarp;
  return t < kUnfusedThreads ? t : kUnfusedThreads;
}

template <class T>
__global__ void unfused_mean_kernel(float* __restrict__ mean, const T* __restrict__ x, int hidden) {
  const T* xr = x + static_cast<std::int64_t>(blockIdx.x) * hidden;
  float s = 0.0f;
  for (int c = threadIdx.x; c < hidden; c += blockDim.x) s += to_float(xr[c]);
  s = block_reduce_sum(s);
  if (threadIdx.x == 0) mean[blockIdx.x] = s / static_cast<float>(hidden);
}

template <class T>
__global__ void unfused_rstd_kernel(float* __restrict__ rstd, const float* __restrict__ mean,
                                    const T* __restrict__ x, int hidden, float eps) {
  const T* xr = x + static_cast<std::int64_t>(blockIdx.x) * hidden;
  const float m = mean[blockIdx.x];
  float s = 0.0f;
  for (int c = threadIdx.x; c < hidden; c += blockDim.x) {
    const float d = to_float(xr[c]) - m;
    s = fmaf(d, d, s);
  }
  s = block_reduce_sum(s);
  if (threadIdx.x == 0) rstd[blockIdx.x] = rsqrtf(s / static_cast<float>(hidden) + eps);
}

// The elementwise ops, as eager::launch_map functors (kernels/eager_map.h: 16-byte vectors, one
// thread per vector, like eager's vectorized elementwise kernel).
struct Normalize {  // x̂ = (x - mean)·rstd
  const float* mean;
  const float* rstd;
  __device__ float operator()(float x, float, std::int64_t row, std::int64_t) const {
    return (x - mean[row]) * rstd[row];
  }
};

template <class T>
struct Affine {  // y = x̂·gamma + beta
  const T* gamma;
  const T* beta;
  __device__ float operator()(float xhat, float, std::int64_t, std::int64_t col) const {
    return fmaf(xhat, to_float(gamma[col]), to_float(beta[col]));
  }
};

template <class T>
struct MulGamma {  // g = dy·gamma
  const T* gamma;
  __device__ float operator()(float dy, float, std::int64_t, std::int64_t col) const {
    return dy * to_float(gamma[col]);
  }
};

struct InputGradient {  // dx = rstd·(g - s.x - x̂·s.y), s = the row sums (Σg, Σg·x̂) / H
  const float* rstd;
  const float2* row_sums;
  __device__ float operator()(float g, float xhat, std::int64_t row, std::int64_t) const {
    const float2 s = row_sums[row];
    return rstd[row] * fmaf(-xhat, s.y, g - s.x);
  }
};

// Column partial sums of a (or of a ⊙ b when b is non-null) over each chunk of rows: a 32 x 8 block
// covers 32 columns of one chunk; thread (x, y) adds rows y, y + 8, ... in order, then thread (x, 0)
// adds the 8 in order.
template <class T>
__global__ void unfused_column_partials_kernel(float* __restrict__ partial, const T* __restrict__ a,
                                               const T* __restrict__ b, std::int64_t rows, int hidden,
                                               std::int64_t rows_per_chunk) {
  const int col = static_cast<int>(blockIdx.x) * kReduceCols + static_cast<int>(threadIdx.x);
  const std::int64_t chunk = blockIdx.y;
  const std::int64_t first = chunk * rows_per_chunk;
  const std::int64_t last = min(first + rows_per_chunk, rows);
  float s = 0.0f;
  if (col < hidden) {
    for (std::int64_t r = first + threadIdx.y; r < last; r += kUnfusedPartialRows) {
      const float v = to_float(a[r * hidden + col]);
      s = b ? fmaf(v, to_float(b[r * hidden + col]), s) : s + v;
    }
  }
  __shared__ float sm[kUnfusedPartialRows][kReduceCols];
  sm[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && col < hidden) {
    float t = 0.0f;
    for (int y = 0; y < kUnfusedPartialRows; ++y) t += sm[y][threadIdx.x];
    partial[chunk * hidden + col] = t;
  }
}

template <class T>
__global__ void unfused_row_sums_kernel(float2* __restrict__ row_sums, const T* __restrict__ g,
                                        const T* __restrict__ xhat, int hidden) {
  const std::int64_t base = static_cast<std::int64_t>(blockIdx.x) * hidden;
  float sg = 0.0f, sgx = 0.0f;
  for (int c = threadIdx.x; c < hidden; c += blockDim.x) {
    const float gg = to_float(g[base + c]);
    sg += gg;
    sgx = fmaf(gg, to_float(xhat[base + c]), sgx);
  }
  sg = block_reduce_sum(sg);
  sgx = block_reduce_sum(sgx);
  if (threadIdx.x == 0) {
    const float inv_h = reciprocal(static_cast<float>(hidden));
    row_sums[blockIdx.x] = make_float2(sg * inv_h, sgx * inv_h);
  }
}

// ---------------------------------------------------------------------------------------------
// Host side: validation, plans, dispatch.

template <class T>
constexpr int vector_size() {
  return Packed<T>::kSize;
}

// One tensor's bytes, named for messages.
struct Range {
  const void* ptr;
  std::size_t bytes;
  const char* name;
};

// Throws "<what>: <a> overlaps <b>" for the first pair that shares a byte, each output against
// every later output and against every input (null or empty ranges take no part): the kernels
// read through __restrict__ pointers, and a kernel writes its outputs (the workspace included)
// while other blocks still read the inputs. None of these launchers works in place.
void require_no_overlap(const char* what, std::initializer_list<Range> outputs,
                        std::initializer_list<Range> inputs) {
  for (auto out = outputs.begin(); out != outputs.end(); ++out) {
    for (auto other = out + 1; other != outputs.end(); ++other)
      SEQBENCH_REQUIRE(!bytes_overlap(out->ptr, out->bytes, other->ptr, other->bytes),
                       what << ": " << out->name << " overlaps " << other->name);
    for (const Range& in : inputs)
      SEQBENCH_REQUIRE(
          !bytes_overlap(out->ptr, out->bytes, in.ptr, in.bytes),
          what << ": " << out->name << " overlaps " << in.name << " (in-place is not supported)");
  }
}

void require_aligned(const char* what, const char* name, const void* ptr, std::size_t alignment) {
  SEQBENCH_REQUIRE(reinterpret_cast<std::uintptr_t>(ptr) % alignment == 0,
                   what << ": " << name << " (" << ptr << ") is not aligned to " << alignment << " bytes");
}

void require_shape(const char* what, std::int64_t rows, int hidden) {
  SEQBENCH_REQUIRE(hidden >= 1 && hidden <= kLayerNormMaxHidden,
                   what << ": hidden " << hidden << " must be in [1, " << kLayerNormMaxHidden << "]");
  SEQBENCH_REQUIRE(rows >= 0 && rows <= kLayerNormMaxRows,
                   what << ": rows " << rows << " must be in [0, " << kLayerNormMaxRows << "]");
}

template <class T>
void require_tensor(const char* what, const char* name, const void* ptr) {
  SEQBENCH_REQUIRE(ptr != nullptr, what << ": " << name << " is null");
  require_aligned(what, name, ptr, alignof(T));
}

// The byte sizes of a call's tensors: [rows, hidden] activations in T, [hidden] parameters in T,
// [rows] float statistics (mean, rstd).
struct LayerNormBytes {
  std::size_t tensor, param, stat;
};
template <class T>
LayerNormBytes layernorm_bytes(std::int64_t rows, int hidden) {
  const auto r = static_cast<std::size_t>(rows), h = static_cast<std::size_t>(hidden);
  return {r * h * sizeof(T), h * sizeof(T), r * sizeof(float)};
}

// The forward launchers' outputs (y, mean and rstd where not null, the unfused one's workspace)
// against each other and the inputs x, gamma, beta.
template <class T>
void require_forward_disjoint(const char* what, const T* y, const float* mean, const float* rstd, const T* x,
                              const T* gamma, const T* beta, std::int64_t rows, int hidden,
                              const void* workspace = nullptr, std::size_t workspace_bytes = 0) {
  const auto [bytes, param_bytes, stat_bytes] = layernorm_bytes<T>(rows, hidden);
  require_no_overlap(what,
                     {{y, bytes, "y"},
                      {mean, stat_bytes, "mean"},
                      {rstd, stat_bytes, "rstd"},
                      {workspace, workspace_bytes, "workspace"}},
                     {{x, bytes, "x"}, {gamma, param_bytes, "gamma"}, {beta, param_bytes, "beta"}});
}

// The backward launchers' tensors (fused and unfused alike, `workspace_needed` being each one's
// workspace size): non-null and aligned where rows > 0, and no output (the workspace included)
// sharing a byte with another tensor.
template <class T>
void require_backward_tensors(const char* what, const T* dx, const T* dgamma, const T* dbeta, const T* dy,
                              const T* x, const T* gamma, const float* mean, const float* rstd,
                              std::int64_t rows, int hidden, const void* workspace,
                              std::size_t workspace_needed) {
  if (rows > 0) {
    require_tensor<T>(what, "dx", dx);
    require_tensor<T>(what, "dy", dy);
    require_tensor<T>(what, "x", x);
    require_tensor<T>(what, "gamma", gamma);
    require_tensor<float>(what, "mean", mean);
    require_tensor<float>(what, "rstd", rstd);
  }
  const auto [bytes, param_bytes, stat_bytes] = layernorm_bytes<T>(rows, hidden);
  require_no_overlap(what,
                     {{dgamma, param_bytes, "dgamma"},
                      {dbeta, param_bytes, "dbeta"},
                      {workspace, workspace_needed, "workspace"},
                      {dx, bytes, "dx"}},
                     {{dy, bytes, "dy"},
                      {x, bytes, "x"},
                      {gamma, param_bytes, "gamma"},
                      {mean, stat_bytes, "mean"},
                      {rstd, stat_bytes, "rstd"}});
}

void require_eps(const char* what, float eps) {
  SEQBENCH_REQUIRE(std::isfinite(eps) && eps > 0.0f, what << ": eps " << eps << " must be finite and > 0");
}

// Calls fn(std::integral_constant<int, kVec>) for the plan's vector width.
template <class T, class Fn>
void with_vector(const LayerNormPlan& plan, Fn&& fn) {
  if (plan.vector == vector_size<T>()) return fn(std::integral_constant<int, vector_size<T>()>{});
  SEQBENCH_REQUIRE(plan.vector == 1,
                   "layernorm: vector width " << plan.vector << " is neither 1 nor " << vector_size<T>());
  fn(std::integral_constant<int, 1>{});
}

dim3 register_grid(const LayerNormPlan& plan, std::int64_t rows) {
  return dim3(static_cast<unsigned>((rows + plan.teams_per_block - 1) / plan.teams_per_block));
}

int block_threads(const LayerNormPlan& plan) {
  return plan.teams_per_block * plan.team_threads;
}

// The workspace layout of the fused backward.
struct BackwardLayout {
  LayerNormBackwardPartition part;
  std::size_t partial_floats = 0;  // per plane
  std::size_t row_sum_bytes = 0;
  std::size_t bytes() const { return 2 * partial_floats * sizeof(float) + row_sum_bytes; }
};

BackwardLayout backward_layout(std::int64_t rows, int hidden) {
  BackwardLayout l;
  l.part = layernorm_backward_partition(rows, hidden);
  l.partial_floats = static_cast<std::size_t>(l.part.chunks) * static_cast<std::size_t>(hidden);
  if (hidden > kLayerNormBackwardMaxRegisterHidden && rows > 0)
    l.row_sum_bytes = static_cast<std::size_t>(rows) * sizeof(float2);
  return l;
}

std::size_t align_up(std::size_t n, std::size_t a) {
  return (n + a - 1) / a * a;
}

struct UnfusedBackwardLayout {
  LayerNormBackwardPartition part;
  std::size_t xhat = 0, g = 0, partial_g = 0, partial_b = 0, row_sums = 0, total = 0;
};

UnfusedBackwardLayout unfused_backward_layout(DType dtype, std::int64_t rows, int hidden) {
  UnfusedBackwardLayout l;
  l.part = layernorm_backward_partition(rows, hidden);
  const std::size_t n = static_cast<std::size_t>(rows) * static_cast<std::size_t>(hidden);
  const std::size_t partial = static_cast<std::size_t>(l.part.chunks) * static_cast<std::size_t>(hidden);
  std::size_t at = 0;
  l.xhat = at;
  at = align_up(at + n * dtype_size(dtype), kUnfusedAlign);
  l.g = at;
  at = align_up(at + n * dtype_size(dtype), kUnfusedAlign);
  l.partial_g = at;
  at = align_up(at + partial * sizeof(float), kUnfusedAlign);
  l.partial_b = at;
  at = align_up(at + partial * sizeof(float), kUnfusedAlign);
  l.row_sums = at;
  at = align_up(at + static_cast<std::size_t>(rows) * sizeof(float2), kUnfusedAlign);
  l.total = rows == 0 ? 0 : at;
  return l;
}

void require_workspace(const char* what, const void* workspace, std::size_t bytes, std::size_t needed,
                       std::size_t alignment) {
  if (needed == 0) return;
  SEQBENCH_REQUIRE(workspace != nullptr, what << ": workspace is null, " << needed << " bytes are needed");
  SEQBENCH_REQUIRE(bytes >= needed,
                   what << ": workspace has " << bytes << " bytes, " << needed << " are needed");
  require_aligned(what, "workspace", workspace, alignment);
}

}  // namespace

// ---------------------------------------------------------------------------------------------

const char* layernorm_stats_name(LayerNormStats stats) {
  return stats == LayerNormStats::welford ? "welford" : "two_moment";
}

const char* layernorm_path_name(LayerNormPath path) {
  switch (path) {
    case LayerNormPath::warp:
      return "warp";
    case LayerNormPath::block:
      return "block";
    case LayerNormPath::multipass:
      return "multipass";
  }
  return "?";
}

LayerNormPlan layernorm_plan(DType dtype, int hidden, bool vectorizable, bool backward) {
  require_shape("layernorm_plan", 0, hidden);
  const int full = kVectorBytes / static_cast<int>(dtype_size(dtype));
  LayerNormPlan plan;
  plan.vector = vectorizable && hidden % full == 0 ? full : 1;
  const int vectors = hidden / plan.vector;
  const int max_items = kLayerNormMaxElemsPerThread / plan.vector;
  if (hidden <= kWarp * kLayerNormMaxElemsPerThread) {
    plan.path = LayerNormPath::warp;
    plan.team_threads = kWarp;
    plan.teams_per_block = backward ? kLayerNormBackwardWarpsPerBlock : kLayerNormWarpsPerBlock;
    plan.items = 1;
    while (plan.items * kWarp < vectors) plan.items *= 2;  // <= max_items: the row fits
    return plan;
  }
  if (hidden <= (backward ? kLayerNormBackwardMaxRegisterHidden : kLayerNormMaxRegisterHidden)) {
    plan.path = LayerNormPath::block;
    const auto threads_for = [&](int items) {
      const int t = (vectors + items - 1) / items;
      return (t + kWarp - 1) / kWarp * kWarp;
    };
    plan.items = 1;
    while (plan.items < max_items && threads_for(plan.items) > kPreferredBlockThreads) plan.items *= 2;
    plan.team_threads = threads_for(plan.items);  // <= 1024: hidden <= 1024 * 8 (backward: 512 * 8)
    plan.teams_per_block = backward ? std::max(1, kLayerNormBackwardTeamThreads / plan.team_threads) : 1;
    return plan;
  }
  plan.path = LayerNormPath::multipass;
  plan.team_threads = kLayerNormMultipassThreads;
  plan.teams_per_block = 1;
  plan.items = 0;
  return plan;
}

LayerNormBackwardPartition layernorm_backward_partition(std::int64_t rows, int hidden) {
  require_shape("layernorm_backward_partition", rows, hidden);
  LayerNormBackwardPartition p;
  if (rows == 0) return p;
  std::int64_t per = (rows + kLayerNormMaxChunks - 1) / kLayerNormMaxChunks;
  if (per < kLayerNormMinRowsPerChunk) per = kLayerNormMinRowsPerChunk;
  std::int64_t cap = static_cast<std::int64_t>(kLayerNormPartialBudgetBytes /
                                               (2 * sizeof(float) * static_cast<std::size_t>(hidden)));
  if (cap < 1) cap = 1;
  if ((rows + per - 1) / per > cap) per = (rows + cap - 1) / cap;
  p.rows_per_chunk = per;
  p.chunks = (rows + per - 1) / per;
  return p;
}

std::size_t layernorm_backward_workspace_bytes(std::int64_t rows, int hidden) {
  require_shape("layernorm_backward_workspace_bytes", rows, hidden);
  return backward_layout(rows, hidden).bytes();
}

std::size_t layernorm_unfused_forward_workspace_bytes(DType dtype, std::int64_t rows, int hidden) {
  require_shape("layernorm_unfused_forward_workspace_bytes", rows, hidden);
  return static_cast<std::size_t>(rows) * static_cast<std::size_t>(hidden) * dtype_size(dtype);
}

std::size_t layernorm_unfused_backward_workspace_bytes(DType dtype, std::int64_t rows, int hidden) {
  require_shape("layernorm_unfused_backward_workspace_bytes", rows, hidden);
  return unfused_backward_layout(dtype, rows, hidden).total;
}

template <class T>
void launch_layernorm_forward(T* y, float* mean, float* rstd, const T* x, const T* gamma, const T* beta,
                              std::int64_t rows, int hidden, float eps, cudaStream_t stream,
                              LayerNormStats stats) {
  SEQBENCH_NVTX_RANGE("layernorm_fwd");
  constexpr const char* kWhat = "layernorm_forward";
  require_shape(kWhat, rows, hidden);
  require_eps(kWhat, eps);
  SEQBENCH_REQUIRE(stats == LayerNormStats::welford || stats == LayerNormStats::two_moment,
                   kWhat << ": unknown statistics method " << static_cast<int>(stats));
  if (rows == 0) return;
  require_tensor<T>(kWhat, "y", y);
  require_tensor<T>(kWhat, "x", x);
  require_tensor<T>(kWhat, "gamma", gamma);
  require_tensor<T>(kWhat, "beta", beta);
  if (mean) require_aligned(kWhat, "mean", mean, alignof(float));
  if (rstd) require_aligned(kWhat, "rstd", rstd, alignof(float));
  require_forward_disjoint<T>(kWhat, y, mean, rstd, x, gamma, beta, rows, hidden);

  const bool vectorizable = hidden % vector_size<T>() == 0 && is_vector_aligned(y) && is_vector_aligned(x) &&
                            is_vector_aligned(gamma) && is_vector_aligned(beta);
  const LayerNormPlan plan = layernorm_plan(DTypeTraits<T>::dtype, hidden, vectorizable);
  const ForwardArgs<T> args{y,   mean, rstd, x, gamma, beta, rows, hidden, 1.0f / static_cast<float>(hidden),
                            eps, stats};
  with_vector<T>(plan, [&](auto vec) {
    constexpr int kVec = decltype(vec)::value;
    if (plan.path == LayerNormPath::multipass) {
      layernorm_forward_multipass_kernel<T, kVec>
          <<<static_cast<unsigned>(rows), kLayerNormMultipassThreads, 0, stream>>>(args);
      return;
    }
    dispatch_items<kVec, kLayerNormMaxElemsPerThread>(plan.items, "layernorm", [&](auto items) {
      constexpr int kItems = decltype(items)::value;
      if (plan.path == LayerNormPath::warp)
        layernorm_forward_kernel<T, kVec, kItems, true>
            <<<register_grid(plan, rows), block_threads(plan), 0, stream>>>(args);
      else
        layernorm_forward_kernel<T, kVec, kItems, false>
            <<<register_grid(plan, rows), block_threads(plan), 0, stream>>>(args);
    });
  });
  SEQBENCH_CUDA_CHECK_LAUNCH();
}

template <class T>
void launch_layernorm_backward(T* dx, T* dgamma, T* dbeta, const T* dy, const T* x, const T* gamma,
                               const float* mean, const float* rstd, std::int64_t rows, int hidden,
                               void* workspace, std::size_t workspace_bytes, cudaStream_t stream) {
  SEQBENCH_NVTX_RANGE("layernorm_bwd");
  constexpr const char* kWhat = "layernorm_backward";
  require_shape(kWhat, rows, hidden);
  require_tensor<T>(kWhat, "dgamma", dgamma);
  require_tensor<T>(kWhat, "dbeta", dbeta);
  const BackwardLayout layout = backward_layout(rows, hidden);
  require_workspace(kWhat, workspace, workspace_bytes, layout.bytes(), kVectorBytes);
  require_backward_tensors<T>(kWhat, dx, dgamma, dbeta, dy, x, gamma, mean, rstd, rows, hidden, workspace,
                              layout.bytes());

  float* partial_g = static_cast<float*>(workspace);
  float* partial_b = partial_g + layout.partial_floats;
  float2* row_sums = reinterpret_cast<float2*>(partial_b + layout.partial_floats);
  const BackwardArgs<T> args{dx,
                             dy,
                             x,
                             gamma,
                             mean,
                             rstd,
                             partial_g,
                             partial_b,
                             row_sums,
                             rows,
                             hidden,
                             1.0f / static_cast<float>(hidden),
                             layout.part.rows_per_chunk};
  if (rows > 0) {
    const bool vectorizable = hidden % vector_size<T>() == 0 && is_vector_aligned(dx) &&
                              is_vector_aligned(dy) && is_vector_aligned(x) && is_vector_aligned(gamma);
    const LayerNormPlan plan = layernorm_plan(DTypeTraits<T>::dtype, hidden, vectorizable, true);
    const auto chunks = static_cast<unsigned>(layout.part.chunks);
    const dim3 block(static_cast<unsigned>(plan.team_threads), static_cast<unsigned>(plan.teams_per_block));
    const std::size_t combine_bytes =
        plan.teams_per_block > 1 ? 2 * sizeof(float) * static_cast<std::size_t>(plan.teams_per_block) * hidden
                                 : 0;
    with_vector<T>(plan, [&](auto vec) {
      constexpr int kVec = decltype(vec)::value;
      if (plan.path == LayerNormPath::multipass) {
        layernorm_backward_row_sums_kernel<T, kVec>
            <<<static_cast<unsigned>(rows), kLayerNormMultipassThreads, 0, stream>>>(args);
        SEQBENCH_CUDA_CHECK_LAUNCH();
        const int vectors = hidden / kVec;
        const dim3 grid(static_cast<unsigned>((vectors + kSliceThreads - 1) / kSliceThreads), chunks);
        layernorm_backward_slice_kernel<T, kVec><<<grid, kSliceThreads, 0, stream>>>(args);
        return;
      }
      dispatch_items<kVec, kLayerNormMaxElemsPerThread>(plan.items, "layernorm", [&](auto items) {
        constexpr int kItems = decltype(items)::value;
        if (plan.path == LayerNormPath::warp)
          layernorm_backward_kernel<T, kVec, kItems, true><<<chunks, block, combine_bytes, stream>>>(args);
        else
          layernorm_backward_kernel<T, kVec, kItems, false><<<chunks, block, combine_bytes, stream>>>(args);
      });
    });
    SEQBENCH_CUDA_CHECK_LAUNCH();
  }
  // With rows == 0 this writes dgamma = dbeta = 0, the empty sum.
  layernorm_column_reduce_kernel<T>
      <<<static_cast<unsigned>((hidden + kReduceCols - 1) / kReduceCols), dim3(kReduceCols, kReduceCols), 0,
         stream>>>(dgamma, dbeta, partial_g, partial_b, layout.part.chunks, hidden);
  SEQBENCH_CUDA_CHECK_LAUNCH();
}

template <class T>
void launch_layernorm_forward_unfused(T* y, float* mean, float* rstd, const T* x, const T* gamma,
                                      const T* beta, std::int64_t rows, int hidden, float eps,
                                      void* workspace, std::size_t workspace_bytes, cudaStream_t stream) {
  SEQBENCH_NVTX_RANGE("layernorm_fwd_unfused");
  constexpr const char* kWhat = "layernorm_forward_unfused";
  require_shape(kWhat, rows, hidden);
  require_eps(kWhat, eps);
  const std::size_t needed = layernorm_unfused_forward_workspace_bytes(DTypeTraits<T>::dtype, rows, hidden);
  require_workspace(kWhat, workspace, workspace_bytes, needed, kUnfusedAlign);
  if (rows == 0) return;
  require_tensor<T>(kWhat, "y", y);
  require_tensor<T>(kWhat, "x", x);
  require_tensor<T>(kWhat, "gamma", gamma);
  require_tensor<T>(kWhat, "beta", beta);
  require_tensor<float>(kWhat, "mean", mean);
  require_tensor<float>(kWhat, "rstd", rstd);
  require_forward_disjoint<T>(kWhat, y, mean, rstd, x, gamma, beta, rows, hidden, workspace, needed);

  T* xhat = static_cast<T*>(workspace);
  const std::int64_t n = rows * hidden;
  const auto grid_rows = static_cast<unsigned>(rows);
  const int threads = unfused_row_threads(hidden);
  unfused_mean_kernel<T><<<grid_rows, threads, 0, stream>>>(mean, x, hidden);
  SEQBENCH_CUDA_CHECK_LAUNCH();
  unfused_rstd_kernel<T><<<grid_rows, threads, 0, stream>>>(rstd, mean, x, hidden, eps);
  SEQBENCH_CUDA_CHECK_LAUNCH();
  eager::launch_map<T, 1>(kWhat, xhat, x, nullptr, n, hidden, Normalize{mean, rstd}, stream);
  eager::launch_map<T, 1>(kWhat, y, xhat, nullptr, n, hidden, Affine<T>{gamma, beta}, stream);
}

template <class T>
void launch_layernorm_backward_unfused(T* dx, T* dgamma, T* dbeta, const T* dy, const T* x, const T* gamma,
                                       const float* mean, const float* rstd, std::int64_t rows, int hidden,
                                       void* workspace, std::size_t workspace_bytes, cudaStream_t stream) {
  SEQBENCH_NVTX_RANGE("layernorm_bwd_unfused");
  constexpr const char* kWhat = "layernorm_backward_unfused";
  require_shape(kWhat, rows, hidden);
  require_tensor<T>(kWhat, "dgamma", dgamma);
  require_tensor<T>(kWhat, "dbeta", dbeta);
  const UnfusedBackwardLayout l = unfused_backward_layout(DTypeTraits<T>::dtype, rows, hidden);
  require_workspace(kWhat, workspace, workspace_bytes, l.total, kUnfusedAlign);
  auto* base = static_cast<unsigned char*>(workspace);
  auto* partial_g = reinterpret_cast<float*>(base + l.partial_g);
  auto* partial_b = reinterpret_cast<float*>(base + l.partial_b);
  require_backward_tensors<T>(kWhat, dx, dgamma, dbeta, dy, x, gamma, mean, rstd, rows, hidden, workspace,
                              l.total);
  if (rows > 0) {
    T* xhat = reinterpret_cast<T*>(base + l.xhat);
    T* g = reinterpret_cast<T*>(base + l.g);
    auto* row_sums = reinterpret_cast<float2*>(base + l.row_sums);
    const std::int64_t n = rows * hidden;
    eager::launch_map<T, 1>(kWhat, xhat, x, nullptr, n, hidden, Normalize{mean, rstd}, stream);
    const dim3 pgrid(static_cast<unsigned>((hidden + kReduceCols - 1) / kReduceCols),
                     static_cast<unsigned>(l.part.chunks));
    const dim3 pblock(kReduceCols, kUnfusedPartialRows);
    unfused_column_partials_kernel<T>
        <<<pgrid, pblock, 0, stream>>>(partial_b, dy, nullptr, rows, hidden, l.part.rows_per_chunk);
    SEQBENCH_CUDA_CHECK_LAUNCH();
    unfused_column_partials_kernel<T>
        <<<pgrid, pblock, 0, stream>>>(partial_g, dy, xhat, rows, hidden, l.part.rows_per_chunk);
    SEQBENCH_CUDA_CHECK_LAUNCH();
    eager::launch_map<T, 1>(kWhat, g, dy, nullptr, n, hidden, MulGamma<T>{gamma}, stream);
    unfused_row_sums_kernel<T>
        <<<static_cast<unsigned>(rows), unfused_row_threads(hidden), 0, stream>>>(row_sums, g, xhat, hidden);
    SEQBENCH_CUDA_CHECK_LAUNCH();
    eager::launch_map<T, 2>(kWhat, dx, g, xhat, n, hidden, InputGradient{rstd, row_sums}, stream);
  }
  layernorm_column_reduce_kernel<T>
      <<<static_cast<unsigned>((hidden + kReduceCols - 1) / kReduceCols), dim3(kReduceCols, kReduceCols), 0,
         stream>>>(dgamma, dbeta, partial_g, partial_b, l.part.chunks, hidden);
  SEQBENCH_CUDA_CHECK_LAUNCH();
}

// ---------------------------------------------------------------------------------------------
// Host emulation of the forward statistics.

namespace {

// One butterfly step over 32 lanes: lane l combines with lane l ^ offset, lower lane first.
template <class S, class Merge>
void emulate_butterfly(std::vector<S>& lanes, Merge merge) {
  for (int offset = 16; offset > 0; offset >>= 1) {
    std::vector<S> next(lanes.size());
    for (std::size_t l = 0; l < lanes.size(); ++l) {
      const std::size_t p = l ^ static_cast<std::size_t>(offset);
      next[l] =
          (l & static_cast<std::size_t>(offset)) ? merge(lanes[p], lanes[l]) : merge(lanes[l], lanes[p]);
    }
    lanes.swap(next);
  }
}

// The team reduction: a butterfly inside each warp, then (team > 32) a butterfly over the warps'
// results in lanes 0..warps-1, identity elsewhere. Returns the value every lane ends with.
template <class S, class Merge>
S emulate_team_reduce(const std::vector<S>& per_thread, const S& identity, Merge merge) {
  const std::size_t warps = per_thread.size() / kWarp;
  std::vector<S> warp_results;
  for (std::size_t w = 0; w < warps; ++w) {
    std::vector<S> lanes(per_thread.begin() + static_cast<std::ptrdiff_t>(w * kWarp),
                         per_thread.begin() + static_cast<std::ptrdiff_t>((w + 1) * kWarp));
    emulate_butterfly(lanes, merge);
    warp_results.push_back(lanes[0]);
  }
  if (warps == 1) return warp_results[0];
  std::vector<S> lanes(kWarp, identity);
  for (std::size_t w = 0; w < warps; ++w) lanes[w] = warp_results[w];
  emulate_butterfly(lanes, merge);
  return lanes[0];
}

}  // namespace

LayerNormRowStats layernorm_emulate_row_stats(const float* x, int hidden, LayerNormStats stats,
                                              const LayerNormPlan& plan) {
  require_shape("layernorm_emulate_row_stats", 1, hidden);
  SEQBENCH_REQUIRE(x != nullptr, "layernorm_emulate_row_stats: x is null");
  const int team = plan.team_threads;
  SEQBENCH_REQUIRE(
      team >= kWarp && team <= kLayerNormMaxBlockThreads && team % kWarp == 0,
      "layernorm_emulate_row_stats: team_threads " << team << " must be a multiple of 32 in [32, 1024]");
  SEQBENCH_REQUIRE(
      plan.vector >= 1 && hidden % plan.vector == 0,
      "layernorm_emulate_row_stats: vector " << plan.vector << " does not divide hidden " << hidden);
  if (plan.path != LayerNormPath::multipass) {
    SEQBENCH_REQUIRE(static_cast<std::int64_t>(team) * plan.items * plan.vector >= hidden,
                     "layernorm_emulate_row_stats: plan holds " << team * plan.items * plan.vector
                                                                << " elements, hidden is " << hidden);
  }
  // Thread t's elements in the kernels' order: vectors t, t + team, ...; within a vector, in order.
  const auto for_thread = [&](int t, auto&& push) {
    for (std::int64_t j = t; j * plan.vector < hidden; j += team)
      for (int i = 0; i < plan.vector; ++i) push(x[j * plan.vector + i]);
  };
  if (stats == LayerNormStats::welford) {
    std::vector<WelfordStat> per_thread(static_cast<std::size_t>(team));
    for (int t = 0; t < team; ++t)
      for_thread(t, [&](float v) {
        welford_push(per_thread[t], v, per_thread[t].count + 1.0f, 1.0f / (per_thread[t].count + 1.0f));
      });
    const WelfordStat s = emulate_team_reduce(
        per_thread, WelfordStat{},
        [](const WelfordStat& lo, const WelfordStat& hi) { return welford_merge(lo, hi); });
    return welford_finish(s, 1.0f / static_cast<float>(hidden));
  }
  std::vector<Sum2> per_thread(static_cast<std::size_t>(team), Sum2{0.0f, 0.0f});
  for (int t = 0; t < team; ++t)
    for_thread(t, [&](float v) { moments_push(per_thread[t].a, per_thread[t].b, v); });
  const Sum2 s = emulate_team_reduce(per_thread, Sum2{0.0f, 0.0f}, [](const Sum2& lo, const Sum2& hi) {
    return Sum2{lo.a + hi.a, lo.b + hi.b};
  });
  return two_moment_finish(s.a, s.b, 1.0f / static_cast<float>(hidden));
}

// ---------------------------------------------------------------------------------------------
// Explicit instantiations: the one place the three element types are named.

#define SEQBENCH_LAYERNORM_INSTANTIATE(T)                                                                    \
  template void launch_layernorm_forward<T>(T*, float*, float*, const T*, const T*, const T*, std::int64_t,  \
                                            int, float, cudaStream_t, LayerNormStats);                       \
  template void launch_layernorm_backward<T>(T*, T*, T*, const T*, const T*, const T*, const float*,         \
                                             const float*, std::int64_t, int, void*, std::size_t,            \
                                             cudaStream_t);                                                  \
  template void launch_layernorm_forward_unfused<T>(T*, float*, float*, const T*, const T*, const T*,        \
                                                    std::int64_t, int, float, void*, std::size_t,            \
                                                    cudaStream_t);                                           \
  template void launch_layernorm_backward_unfused<T>(T*, T*, T*, const T*, const T*, const T*, const float*, \
                                                     const float*, std::int64_t, int, void*, std::size_t,    \
                                                     cudaStream_t);

SEQBENCH_LAYERNORM_INSTANTIATE(float)
SEQBENCH_LAYERNORM_INSTANTIATE(__half)
SEQBENCH_LAYERNORM_INSTANTIATE(__nv_bfloat16)

#undef SEQBENCH_LAYERNORM_INSTANTIATE

}  // namespace seqbench::kernels
