// Label-smoothed cross-entropy kernels: the fused one-pass forward (online log-sum-exp), the
// elementwise backward from the saved lse, the fixed-order totals, and the unfused eager-like
// baseline. Thread mappings and semantics are documented in kernels/cross_entropy.h.
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "core/byte_range.h"
#include "core/cuda_check.h"
#include "core/error.h"
#include "core/nvtx.h"
#include "kernels/cross_entropy.h"
#include "kernels/eager_map.h"
#include "kernels/online_lse.h"
#include "kernels/packed.h"
#include "kernels/reduce.cuh"

namespace seqbench::kernels {
namespace {

constexpr int kUnroll = 4;  // 16-byte loads in flight per thread in the streaming loops
constexpr int kUnfusedRowThreads = 256;
constexpr std::size_t kUnfusedAlign = 256;

// ---------------------------------------------------------------------------------------------
// Device helpers (the teams and their reductions are kernels/reduce.cuh's)

// The elements of a row before its first 16-byte aligned element (0 for scalar access), at most
// vocab. Pointers are aligned to their element (checked on the host).
template <class T, int kVec>
__device__ __forceinline__ int head_elements(const T* row, int vocab) {
  if constexpr (kVec == 1) {
    return 0;
  } else {
    const auto phase = static_cast<int>((reinterpret_cast<std::uintptr_t>(row) / sizeof(T)) % kVec);
    const int head = phase == 0 ? 0 : kVec - phase;
    return head < vocab ? head : vocab;
  }
}

template <class T>
struct ForwardArgs {
  float* loss;  // [rows]
  float* nll;   // [rows] or null
  float* lse;   // [rows] or null
  const T* logits;
  const std::int32_t* targets;
  std::int64_t rows;
  int vocab;
  bool has_ignore;
  std::int32_t ignore_index;
  float w_diff;   // w_t - w_o
  float w_other;  // w_o
};

template <class T>
__device__ __forceinline__ void write_row_results(const ForwardArgs<T>& a, std::int64_t row, float loss,
                                                  float nll, float lse) {
  a.loss[row] = loss;
  if (a.nll) a.nll[row] = nll;
  if (a.lse) a.lse[row] = lse;
}

// At least 4 blocks an SM (at most 32 registers): four 512-thread rows in flight an SM is what the
// byte model of the V = 32000 rows needs (kernels/NOTES-cross-entropy-embedding-qkv.md); with the
// predicated last group below ptxas would otherwise take 40 registers (3 blocks). No spills at 32.
template <class T, bool kWarpTeam>
__global__ void __launch_bounds__(kCrossEntropyMaxBlockTeam, 4)
    cross_entropy_forward_kernel(const ForwardArgs<T> a) {
  constexpr int kVec = Packed<T>::kSize;
  using V = Packed<T>;
  using TeamT = Team<kWarpTeam>;
  const int team = TeamT::size(), lane = TeamT::lane();
  const std::int64_t row = static_cast<std::int64_t>(blockIdx.x) * TeamT::per_block() + TeamT::index();
  if (row >= a.rows) return;  // warp teams of the last block only; uniform per team
  const int vocab = a.vocab;
  const std::int32_t target = a.targets[row];
  if (a.has_ignore && target == a.ignore_index) {  // uniform per team
    if (lane == 0) write_row_results(a, row, 0.0f, 0.0f, 0.0f);
    return;
  }
  if (target < 0 || target >= vocab) {  // the documented error signal; nothing is read
    if (lane == 0) write_row_results(a, row, NAN, NAN, NAN);
    return;
  }
  const T* __restrict__ xr = a.logits + row * vocab;
  // Issued before the row streams, so that its latency overlaps the loop instead of following
  // the reductions at the row's end (the row's own vector load of it later hits L2).
  const float xt = lane == 0 ? to_float(xr[target]) : 0.0f;
  const int head = head_elements<T, kVec>(xr, vocab);
  const int nvec = (vocab - head) / kVec;
  const int tail0 = head + nvec * kVec;

  OnlineLse st;
  if (lane < head) {
    const float v[1] = {to_float(xr[lane])};
    st.absorb(v);
  }
  if (lane < vocab - tail0) {
    const float v[1] = {to_float(xr[tail0 + lane])};
    st.absorb(v);
  }
  const T* __restrict__ body = xr + head;
  int j = lane;
  for (; j + (kUnroll - 1) * team < nvec; j += kUnroll * team) {
    V p[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) p[u] = V::load(body + (j + u * team) * kVec);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      float v[kVec];
#pragma unroll
      for (int k = 0; k < kVec; ++k) v[k] = to_float(p[u].v[k]);
      st.absorb(v);
    }
  }
  // The at most kUnroll - 1 vectors left: one predicated group, every load issued before the first
  // use (a loop here issued them one round trip at a time: the SASS showed one LDG.128 an
  // iteration, each waited for before the next), absorbed in the same order, so the result is
  // bitwise the loop's. The backward keeps its loop: its rows end in stores, not in reductions
  // that wait for the last load, and a predicated group there cost registers (32 -> 40, 40 -> 64).
  if (j < nvec) {
    V p[kUnroll - 1] = {};
#pragma unroll
    for (int u = 0; u < kUnroll - 1; ++u) {
      if (j + u * team < nvec) p[u] = V::load(body + (j + u * team) * kVec);
    }
#pragma unroll
    for (int u = 0; u < kUnroll - 1; ++u) {
      if (j + u * team < nvec) {
        float v[kVec];
#pragma unroll
        for (int k = 0; k < kVec; ++k) v[k] = to_float(p[u].v[k]);
        st.absorb(v);
      }
    }
  }

  const float m = team_max<kWarpTeam>(st.m);
  const float m2 = m * kLog2e;
  // A thread that absorbed nothing has s = 0 and m2 = -inf: 0 · exp2f(-inf) = 0.
  const float s = team_sum<kWarpTeam>(st.s * exp2f(st.m2 - m2));
  const float sx = team_sum<kWarpTeam>(st.sx);
  if (lane == 0) {
    const float lse = online_lse_value(m2, s);
    const float nll = lse - xt;
    const float smooth = fmaf(static_cast<float>(vocab), lse, -sx);  // Σ_j (lse - x_j)
    // Without smoothing the -inf logits' infinite terms carry weight 0 (not 0 · inf = NaN).
    const float smooth_term = a.w_other == 0.0f ? 0.0f : a.w_other * smooth;
    write_row_results(a, row, fmaf(a.w_diff, nll, smooth_term), nll, lse);
  }
}

template <class T>
struct BackwardArgs {
  T* dlogits;
  const T* logits;
  const std::int32_t* targets;
  const float* lse;
  const float* grad;  // [rows] or null (then grad_scale alone)
  float grad_scale;
  std::int64_t rows;
  int vocab;
  bool has_ignore;
  std::int32_t ignore_index;
  float w_target;
  float w_other;
};

// Stores `value` over a whole row with the same head/body/tail layout as the compute loops.
template <class T, int kVec>
__device__ __forceinline__ void fill_row(T* __restrict__ dr, int vocab, int lane, int team, float value) {
  using V = Packed<T, kVec>;
  const int head = head_elements<T, kVec>(dr, vocab);
  const int nvec = (vocab - head) / kVec;
  const int tail0 = head + nvec * kVec;
  const T v = from_float<T>(value);
  if (lane < head) dr[lane] = v;
  if (lane < vocab - tail0) dr[tail0 + lane] = v;
  V p;
#pragma unroll
  for (int k = 0; k < kVec; ++k) p.v[k] = v;
  for (int j = lane; j < nvec; j += team) p.store(dr + head + j * kVec);
}

template <class T, int kVec, bool kWarpTeam>
__global__ void __launch_bounds__(kCrossEntropyMaxBlockTeam)
    cross_entropy_backward_kernel(const BackwardArgs<T> a) {
  using V = Packed<T, kVec>;
  using TeamT = Team<kWarpTeam>;
  const int team = TeamT::size(), lane = TeamT::lane();
  const std::int64_t row = static_cast<std::int64_t>(blockIdx.x) * TeamT::per_block() + TeamT::index();
  if (row >= a.rows) return;
  const int vocab = a.vocab;
  const std::int32_t target = a.targets[row];
  T* __restrict__ dr = a.dlogits + row * vocab;
  if (a.has_ignore && target == a.ignore_index) {
    fill_row<T, kVec>(dr, vocab, lane, team, 0.0f);
    return;
  }
  if (target < 0 || target >= vocab) {
    fill_row<T, kVec>(dr, vocab, lane, team, NAN);
    return;
  }
  const T* __restrict__ xr = a.logits + row * vocab;
  const float g = a.grad_scale * (a.grad ? a.grad[row] : 1.0f);
  const float l2 = a.lse[row] * kLog2e;
  const float wt = a.w_target, wo = a.w_other;
  // dlogits_j = g·(q_j - p_j), q_j = 2^(x_j·log2 e - lse·log2 e).
  const auto grad_at = [&](float x, int col) {
    return g * (exp2f(fmaf(x, kLog2e, -l2)) - (col == target ? wt : wo));
  };
  // Logits and dlogits have the same 16-byte phase when kVec > 1 (checked on the host).
  const int head = head_elements<T, kVec>(dr, vocab);
  const int nvec = (vocab - head) / kVec;
  const int tail0 = head + nvec * kVec;
  if (lane < head) dr[lane] = from_float<T>(grad_at(to_float(xr[lane]), lane));
  if (lane < vocab - tail0)
    dr[tail0 + lane] = from_float<T>(grad_at(to_float(xr[tail0 + lane]), tail0 + lane));
  const T* __restrict__ xb = xr + head;
  T* __restrict__ db = dr + head;
  int j = lane;
  for (; j + (kUnroll - 1) * team < nvec; j += kUnroll * team) {
    V p[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) p[u] = V::load(xb + (j + u * team) * kVec);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int col = head + (j + u * team) * kVec;
      V out;
#pragma unroll
      for (int k = 0; k < kVec; ++k) out.v[k] = from_float<T>(grad_at(to_float(p[u].v[k]), col + k));
      out.store(db + (j + u * team) * kVec);
    }
  }
  for (; j < nvec; j += team) {
    const V p = V::load(xb + j * kVec);
    const int col = head + j * kVec;
    V out;
#pragma unroll
    for (int k = 0; k < kVec; ++k) out.v[k] = from_float<T>(grad_at(to_float(p.v[k]), col + k));
    out.store(db + j * kVec);
  }
}

// Block sum of an int: shuffles, one shared exchange, the same fixed tree as block_reduce_sum.
__device__ __forceinline__ int block_reduce_sum_int(int value) {
  __shared__ int partial[32];
  const int lane = static_cast<int>(threadIdx.x) % kWarp, warp = static_cast<int>(threadIdx.x) / kWarp;
  for (int offset = 16; offset > 0; offset >>= 1) value += __shfl_xor_sync(0xffffffffu, value, offset);
  __syncthreads();
  if (lane == 0) partial[warp] = value;
  __syncthreads();
  const int warps = static_cast<int>(blockDim.x + kWarp - 1) / kWarp;
  value = lane < warps ? partial[lane] : 0;
  for (int offset = 16; offset > 0; offset >>= 1) value += __shfl_xor_sync(0xffffffffu, value, offset);
  return value;
}

// One block: thread i adds rows i, i + blockDim.x, ... in increasing order, then the block tree.
__global__ void __launch_bounds__(kCrossEntropyTotalsThreads)
    cross_entropy_totals_kernel(CrossEntropyTotals* __restrict__ out, const float* __restrict__ loss,
                                const float* __restrict__ nll, const std::int32_t* __restrict__ targets,
                                std::int64_t rows, int vocab, bool has_ignore, std::int32_t ignore_index) {
  float loss_sum = 0.0f, nll_sum = 0.0f;
  int tokens = 0, invalid = 0;
  for (std::int64_t r = threadIdx.x; r < rows; r += blockDim.x) {
    loss_sum += loss[r];
    nll_sum += nll[r];
    const std::int32_t t = targets[r];
    if (has_ignore && t == ignore_index) continue;
    if (t >= 0 && t < vocab)
      ++tokens;
    else
      ++invalid;
  }
  loss_sum = block_reduce_sum(loss_sum);
  nll_sum = block_reduce_sum(nll_sum);
  tokens = block_reduce_sum_int(tokens);
  invalid = block_reduce_sum_int(invalid);
  if (threadIdx.x == 0) {
    out->loss_sum = loss_sum;
    out->nll_sum = nll_sum;
    out->tokens = tokens;
    out->invalid_targets = invalid;
  }
}

// ---------------------------------------------------------------------------------------------
// The unfused baseline: one block of kUnfusedRowThreads per row, scalar coalesced accesses.

// log_softmax: max, Σ exp(x - max), then logp = x - lse rounded to T (expf/logf, as eager).
template <class T>
__global__ void __launch_bounds__(kUnfusedRowThreads)
    unfused_log_softmax_kernel(T* __restrict__ logp, const T* __restrict__ x, int vocab) {
  const std::int64_t row = blockIdx.x;
  const T* xr = x + row * vocab;
  T* lr = logp + row * vocab;
  float m = -INFINITY;
  for (int j = threadIdx.x; j < vocab; j += blockDim.x) m = max_propagate_nan(m, to_float(xr[j]));
  m = block_reduce_max(m);
  float s = 0.0f;
  for (int j = threadIdx.x; j < vocab; j += blockDim.x) s += expf(to_float(xr[j]) - m);
  s = block_reduce_sum(s);
  const float lse = m + logf(s);
  for (int j = threadIdx.x; j < vocab; j += blockDim.x) lr[j] = from_float<T>(to_float(xr[j]) - lse);
}

// nll_loss + the smoothing sum from logp: nll = -logp_t, smooth = -Σ logp, loss combined.
template <class T>
__global__ void __launch_bounds__(kUnfusedRowThreads)
    unfused_nll_smooth_kernel(float* __restrict__ loss, float* __restrict__ nll, const T* __restrict__ logp,
                              const std::int32_t* __restrict__ targets, int vocab, bool has_ignore,
                              std::int32_t ignore_index, float w_diff, float w_other) {
  const std::int64_t row = blockIdx.x;
  const T* lr = logp + row * vocab;
  float s = 0.0f;
  for (int j = threadIdx.x; j < vocab; j += blockDim.x) s += to_float(lr[j]);
  s = block_reduce_sum(s);
  if (threadIdx.x != 0) return;
  const std::int32_t t = targets[row];
  float l = 0.0f, n = 0.0f;
  if (!(has_ignore && t == ignore_index)) {
    if (t >= 0 && t < vocab) {
      n = -to_float(lr[t]);
      l = fmaf(w_diff, n, w_other == 0.0f ? 0.0f : w_other * -s);  // 0, not 0 · inf, unsmoothed
    } else {
      l = n = NAN;
    }
  }
  loss[row] = l;
  if (nll) nll[row] = n;
}

// The unfused backward: what eager autograd runs for fairseq's label_smoothed_nll_loss on logp
// (kernels/cross_entropy.h lists the sequence). Every intermediate is a T tensor, as in eager.

// The [N]-sized steps of both branches, folded into one kernel (eager runs MulBackward,
// MaskedFillBackward and NegBackward per branch, six launches over N elements): the gradient of
// nll = -logp_t is c_t = -(g·w_d) and the gradient of smooth = -Σ logp is c_o = -(g·w_o), each
// rounded once to T; 0 on ignored rows (masked_fill); NaN for an invalid target (the documented
// error signal; eager's gather would trap). One thread per row.
template <class T>
__global__ void __launch_bounds__(kUnfusedRowThreads)
    unfused_grad_coefficients_kernel(T* __restrict__ coef_target, T* __restrict__ coef_other,
                                     const float* __restrict__ grad, const std::int32_t* __restrict__ targets,
                                     std::int64_t rows, int vocab, bool has_ignore, std::int32_t ignore_index,
                                     float w_diff, float w_other) {
  const std::int64_t row = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (row >= rows) return;
  const std::int32_t t = targets[row];
  float ct = 0.0f, co = 0.0f;
  if (!(has_ignore && t == ignore_index)) {
    if (t >= 0 && t < vocab) {
      const float g = grad[row];
      ct = -(g * w_diff);
      co = -(g * w_other);
    } else {
      ct = co = NAN;
    }
  }
  coef_target[row] = from_float<T>(ct);
  coef_other[row] = from_float<T>(co);
}

// scatter_add_ of gather's backward: d[r, t_r] += c_t[r] on the zero-filled d. One thread per row;
// rows own distinct elements (no race). Targets outside [0, V) (an ignore_index such as -100, or
// an invalid target) are skipped: nothing is written out of bounds.
template <class T>
__global__ void __launch_bounds__(kUnfusedRowThreads)
    unfused_scatter_add_kernel(T* __restrict__ d, const T* __restrict__ coef_target,
                               const std::int32_t* __restrict__ targets, std::int64_t rows, int vocab) {
  const std::int64_t row = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (row >= rows) return;
  const std::int32_t t = targets[row];
  if (t < 0 || t >= vocab) return;
  T* p = d + row * vocab + t;
  *p = from_float<T>(to_float(*p) + to_float(coef_target[row]));
}

// Autograd's accumulation of lprobs' two gradients, out of place: out[r, j] = b[r] + a[r, j], with
// b the smooth branch's [N, 1] gradient expanded over the row (SumBackward's expand is a view: b
// is read per element, not materialized) and a the gather branch's dense gradient: an
// eager::launch_map functor (kernels/eager_map.h: 16-byte vectors, as eager's vectorized
// elementwise kernel).
template <class T>
struct AddRowScalar {
  const T* b;
  __device__ float operator()(float a, float, std::int64_t row, std::int64_t) const {
    return to_float(b[row]) + a;
  }
};

// log_softmax_backward_data: dx = dy - exp(logp)·Σ_j dy_j (one fma per element, expf as eager).
// One block per row: the row sum of dy (block_reduce_sum), then a second pass over dy and logp.
template <class T>
__global__ void __launch_bounds__(kUnfusedRowThreads)
    unfused_log_softmax_backward_kernel(T* __restrict__ dx, const T* __restrict__ dy,
                                        const T* __restrict__ logp, int vocab) {
  const std::int64_t row = blockIdx.x;
  const T* dyr = dy + row * vocab;
  const T* lr = logp + row * vocab;
  T* dr = dx + row * vocab;
  float s = 0.0f;
  for (int j = threadIdx.x; j < vocab; j += blockDim.x) s += to_float(dyr[j]);
  s = block_reduce_sum(s);
  for (int j = threadIdx.x; j < vocab; j += blockDim.x)
    dr[j] = from_float<T>(fmaf(-expf(to_float(lr[j])), s, to_float(dyr[j])));
}

// ---------------------------------------------------------------------------------------------
// Host side

struct Span {
  const char* name;
  const void* ptr;
  std::size_t bytes;
};

bool overlaps(const Span& a, const Span& b) {
  return bytes_overlap(a.ptr, a.bytes, b.ptr, b.bytes);
}

// No output may share a byte with an input or with another output.
void require_no_overlap(const char* op, std::initializer_list<Span> outputs,
                        std::initializer_list<Span> inputs) {
  for (auto o = outputs.begin(); o != outputs.end(); ++o) {
    for (const Span& i : inputs)
      SEQBENCH_REQUIRE(!overlaps(*o, i),
                       op << ": output " << o->name << " overlaps input " << i.name << " (no in-place)");
    for (auto p = o + 1; p != outputs.end(); ++p)
      SEQBENCH_REQUIRE(!overlaps(*o, *p), op << ": outputs " << o->name << " and " << p->name << " overlap");
  }
}

template <class U>
void require_tensor(const char* op, const char* name, const U* ptr) {
  SEQBENCH_REQUIRE(ptr != nullptr, op << ": " << name << " is null");
  SEQBENCH_REQUIRE(reinterpret_cast<std::uintptr_t>(ptr) % alignof(U) == 0,
                   op << ": " << name << " (" << static_cast<const void*>(ptr) << ") is not aligned to "
                      << alignof(U) << " bytes");
}

void require_rows(const char* op, std::int64_t rows) {
  SEQBENCH_REQUIRE(rows >= 0 && rows <= kCrossEntropyMaxRows,
                   op << ": rows (N) " << rows << " outside [0, " << kCrossEntropyMaxRows << "]");
}

void require_vocab(const char* op, std::int64_t vocab) {
  SEQBENCH_REQUIRE(vocab >= 1 && vocab <= kCrossEntropyMaxVocab, op << ": vocabulary size (V) " << vocab
                                                                    << " outside [1, "
                                                                    << kCrossEntropyMaxVocab << "]");
}

CrossEntropyWeights weights_for(const char* op, const CrossEntropyConfig& c, std::int64_t vocab) {
  require_vocab(op, vocab);
  SEQBENCH_REQUIRE(std::isfinite(c.smoothing) && c.smoothing >= 0.0f && c.smoothing <= 1.0f,
                   op << ": smoothing " << c.smoothing << " must be finite and in [0, 1]");
  SEQBENCH_REQUIRE(
      c.convention == CrossEntropySmoothing::paper || c.convention == CrossEntropySmoothing::fairseq,
      op << ": unknown smoothing convention " << static_cast<int>(c.convention));
  SEQBENCH_REQUIRE(
      c.convention != CrossEntropySmoothing::fairseq || c.smoothing == 0.0f || vocab >= 2,
      op << ": fairseq smoothing spreads ε over V-1 classes, needs vocabulary >= 2, got " << vocab);
  const double s = c.smoothing, v = static_cast<double>(vocab);
  if (c.convention == CrossEntropySmoothing::paper) return {1.0 - s + s / v, s / v};
  return {1.0 - s, vocab > 1 ? s / (v - 1.0) : 0.0};
}

std::size_t matrix_bytes(std::int64_t rows, std::int64_t vocab, std::size_t element) {
  return static_cast<std::size_t>(rows) * static_cast<std::size_t>(vocab) * element;
}

std::size_t row_bytes(std::int64_t rows, std::size_t element) {
  return static_cast<std::size_t>(rows) * element;
}

// The unfused backward's workspace: dlogp [N, V], then c_t [N] and c_o [N], all T, each segment
// starting on a kUnfusedAlign boundary.
struct UnfusedBackwardLayout {
  std::size_t dlogp = 0, coef_target = 0, coef_other = 0, total = 0;
};

UnfusedBackwardLayout unfused_backward_layout(std::size_t element, std::int64_t rows, std::int64_t vocab) {
  const auto align = [](std::size_t b) { return (b + kUnfusedAlign - 1) / kUnfusedAlign * kUnfusedAlign; };
  UnfusedBackwardLayout l;
  l.coef_target = align(matrix_bytes(rows, vocab, element));
  l.coef_other = l.coef_target + align(row_bytes(rows, element));
  l.total = l.coef_other + align(row_bytes(rows, element));
  return l;
}

unsigned grid_for(const CrossEntropyPlan& plan, std::int64_t rows) {
  return static_cast<unsigned>((rows + plan.rows_per_block - 1) / plan.rows_per_block);
}

void launch_totals(CrossEntropyTotals* totals, const float* loss, const float* nll,
                   const std::int32_t* targets, std::int64_t rows, std::int64_t vocab,
                   const CrossEntropyConfig& config, cudaStream_t stream) {
  cross_entropy_totals_kernel<<<1, kCrossEntropyTotalsThreads, 0, stream>>>(
      totals, loss, nll, targets, rows, static_cast<int>(vocab), config.ignore_index.has_value(),
      config.ignore_index.value_or(0));
  SEQBENCH_CUDA_CHECK_LAUNCH();
}

// Validation shared by the fused and unfused forwards; returns the weights.
template <class T>
CrossEntropyWeights validate_forward(const char* op, const float* loss, const float* nll, const float* lse,
                                     const CrossEntropyTotals* totals, const T* logits,
                                     const std::int32_t* targets, std::int64_t rows, std::int64_t vocab,
                                     const CrossEntropyConfig& config, const void* extra_output,
                                     std::size_t extra_bytes) {
  require_rows(op, rows);
  const CrossEntropyWeights w = weights_for(op, config, vocab);
  SEQBENCH_REQUIRE(totals == nullptr || nll != nullptr,
                   op << ": totals needs nll (nll_sum is reduced from it), nll is null");
  if (totals) require_tensor(op, "totals", totals);
  if (rows == 0) return w;
  require_tensor(op, "loss", loss);
  require_tensor(op, "logits", logits);
  require_tensor(op, "targets", targets);
  if (nll) require_tensor(op, "nll", nll);
  if (lse) require_tensor(op, "lse", lse);
  const std::size_t fr = row_bytes(rows, sizeof(float));
  require_no_overlap(op,
                     {{"loss", loss, fr},
                      {"nll", nll, fr},
                      {"lse", lse, fr},
                      {"totals", totals, sizeof(CrossEntropyTotals)},
                      {"logp", extra_output, extra_bytes}},
                     {{"logits", logits, matrix_bytes(rows, vocab, sizeof(T))},
                      {"targets", targets, row_bytes(rows, sizeof(std::int32_t))}});
  return w;
}

template <class T>
CrossEntropyWeights validate_backward(const char* op, const T* dlogits, const T* input,
                                      const char* input_name, const std::int32_t* targets, const float* lse,
                                      const float* grad, std::int64_t rows, std::int64_t vocab,
                                      const CrossEntropyConfig& config) {
  require_rows(op, rows);
  const CrossEntropyWeights w = weights_for(op, config, vocab);
  if (rows == 0) return w;
  require_tensor(op, "dlogits", dlogits);
  require_tensor(op, input_name, input);
  require_tensor(op, "targets", targets);
  if (lse) require_tensor(op, "lse", lse);
  if (grad) require_tensor(op, "grad_loss", grad);
  const std::size_t fr = row_bytes(rows, sizeof(float));
  require_no_overlap(op, {{"dlogits", dlogits, matrix_bytes(rows, vocab, sizeof(T))}},
                     {{input_name, input, matrix_bytes(rows, vocab, sizeof(T))},
                      {"targets", targets, row_bytes(rows, sizeof(std::int32_t))},
                      {"lse", lse, fr},
                      {"grad_loss", grad, fr}});
  return w;
}

template <class T>
void backward_fused(const char* op, T* dlogits, const T* logits, const std::int32_t* targets,
                    const float* lse, const float* grad, float grad_scale, std::int64_t rows,
                    std::int64_t vocab, const CrossEntropyConfig& config, cudaStream_t stream) {
  const CrossEntropyWeights w =
      validate_backward(op, dlogits, logits, "logits", targets, lse, grad, rows, vocab, config);
  if (rows == 0) return;
  require_tensor(op, "lse", lse);
  const CrossEntropyPlan plan = cross_entropy_plan(DTypeTraits<T>::dtype, vocab);
  const auto phase = [](const T* p) {
    return (reinterpret_cast<std::uintptr_t>(p) / sizeof(T)) % Packed<T>::kSize;
  };
  const bool vectorized = phase(dlogits) == phase(logits);
  const BackwardArgs<T> args{dlogits,
                             logits,
                             targets,
                             lse,
                             grad,
                             grad_scale,
                             rows,
                             static_cast<int>(vocab),
                             config.ignore_index.has_value(),
                             config.ignore_index.value_or(0),
                             static_cast<float>(w.target),
                             static_cast<float>(w.other)};
  const unsigned grid = grid_for(plan, rows);
  const bool warp_team = plan.team_threads == kWarp;
  constexpr int kFull = Packed<T>::kSize;
  if (vectorized) {
    if (warp_team)
      cross_entropy_backward_kernel<T, kFull, true><<<grid, plan.block_threads(), 0, stream>>>(args);
    else
      cross_entropy_backward_kernel<T, kFull, false><<<grid, plan.block_threads(), 0, stream>>>(args);
  } else {
    if (warp_team)
      cross_entropy_backward_kernel<T, 1, true><<<grid, plan.block_threads(), 0, stream>>>(args);
    else
      cross_entropy_backward_kernel<T, 1, false><<<grid, plan.block_threads(), 0, stream>>>(args);
  }
  SEQBENCH_CUDA_CHECK_LAUNCH();
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Configuration

const char* cross_entropy_smoothing_name(CrossEntropySmoothing convention) {
  switch (convention) {
    case CrossEntropySmoothing::paper:
      return "paper";
    case CrossEntropySmoothing::fairseq:
      return "fairseq";
  }
  return "?";
}

CrossEntropySmoothing parse_cross_entropy_smoothing(std::string_view name) {
  if (name == "paper") return CrossEntropySmoothing::paper;
  if (name == "fairseq") return CrossEntropySmoothing::fairseq;
  SEQBENCH_FAIL("cross_entropy: unknown smoothing convention \"" << std::string(name)
                                                                 << "\" (accepted: paper, fairseq)");
}

CrossEntropyWeights cross_entropy_weights(const CrossEntropyConfig& config, std::int64_t vocab) {
  return weights_for("cross_entropy_weights", config, vocab);
}

std::int64_t CrossEntropyPlan::max_thread_rescales(std::int64_t vocab) const {
  const std::int64_t body = vocab / vector;  // whole vectors of the body, at most
  return (body + team_threads - 1) / team_threads + 2;
}

std::int64_t CrossEntropyPlan::max_thread_elements(std::int64_t vocab) const {
  const std::int64_t body = vocab / vector;
  return (body + team_threads - 1) / team_threads * vector + 2;
}

CrossEntropyPlan cross_entropy_plan(DType dtype, std::int64_t vocab) {
  require_vocab("cross_entropy_plan", vocab);
  CrossEntropyPlan p;
  p.vector = kVectorBytes / static_cast<int>(dtype_size(dtype));
  const std::int64_t vectors = (vocab + p.vector - 1) / p.vector;
  if (vectors <= kCrossEntropyWarpTeamMaxVectors) {
    p.team_threads = kWarp;
    p.rows_per_block = kCrossEntropyWarpRowsPerBlock;
    return p;
  }
  p.team_threads = kCrossEntropyMinBlockTeam;
  while (p.team_threads < kCrossEntropyMaxBlockTeam &&
         static_cast<std::int64_t>(p.team_threads) * kCrossEntropyVectorsPerThread < vectors)
    p.team_threads *= 2;
  p.rows_per_block = 1;
  return p;
}

// ---------------------------------------------------------------------------------------------
// Fused launchers

template <class T>
void launch_cross_entropy_forward(float* loss, float* nll, float* lse, CrossEntropyTotals* totals,
                                  const T* logits, const std::int32_t* targets, std::int64_t rows,
                                  std::int64_t vocab, const CrossEntropyConfig& config, cudaStream_t stream) {
  SEQBENCH_NVTX_RANGE("cross_entropy_fwd");
  constexpr const char* op = "cross_entropy_forward";
  const CrossEntropyWeights w =
      validate_forward(op, loss, nll, lse, totals, logits, targets, rows, vocab, config, nullptr, 0);
  if (rows > 0) {
    const CrossEntropyPlan plan = cross_entropy_plan(DTypeTraits<T>::dtype, vocab);
    const ForwardArgs<T> args{loss,
                              nll,
                              lse,
                              logits,
                              targets,
                              rows,
                              static_cast<int>(vocab),
                              config.ignore_index.has_value(),
                              config.ignore_index.value_or(0),
                              static_cast<float>(w.target - w.other),
                              static_cast<float>(w.other)};
    const unsigned grid = grid_for(plan, rows);
    if (plan.team_threads == kWarp)
      cross_entropy_forward_kernel<T, true><<<grid, plan.block_threads(), 0, stream>>>(args);
    else
      cross_entropy_forward_kernel<T, false><<<grid, plan.block_threads(), 0, stream>>>(args);
    SEQBENCH_CUDA_CHECK_LAUNCH();
  }
  if (totals) launch_totals(totals, loss, nll, targets, rows, vocab, config, stream);
}

template <class T>
void launch_cross_entropy_backward(T* dlogits, const T* logits, const std::int32_t* targets, const float* lse,
                                   const float* grad_loss, std::int64_t rows, std::int64_t vocab,
                                   const CrossEntropyConfig& config, cudaStream_t stream) {
  SEQBENCH_NVTX_RANGE("cross_entropy_bwd");
  constexpr const char* op = "cross_entropy_backward";
  if (rows > 0) require_tensor(op, "grad_loss", grad_loss);
  backward_fused(op, dlogits, logits, targets, lse, grad_loss, 1.0f, rows, vocab, config, stream);
}

template <class T>
void launch_cross_entropy_backward_scalar(T* dlogits, const T* logits, const std::int32_t* targets,
                                          const float* lse, float grad_loss_sum, std::int64_t rows,
                                          std::int64_t vocab, const CrossEntropyConfig& config,
                                          cudaStream_t stream) {
  SEQBENCH_NVTX_RANGE("cross_entropy_bwd_scalar");
  constexpr const char* op = "cross_entropy_backward_scalar";
  SEQBENCH_REQUIRE(std::isfinite(grad_loss_sum),
                   op << ": grad_loss_sum " << grad_loss_sum << " must be finite");
  backward_fused(op, dlogits, logits, targets, lse, nullptr, grad_loss_sum, rows, vocab, config, stream);
}

// ---------------------------------------------------------------------------------------------
// Unfused baseline

std::size_t cross_entropy_unfused_logp_bytes(DType dtype, std::int64_t rows, std::int64_t vocab) {
  constexpr const char* op = "cross_entropy_unfused_logp_bytes";
  require_rows(op, rows);
  require_vocab(op, vocab);
  return matrix_bytes(rows, vocab, dtype_size(dtype));
}

template <class T>
void launch_cross_entropy_forward_unfused(float* loss, float* nll, CrossEntropyTotals* totals, T* logp,
                                          std::size_t logp_bytes, const T* logits,
                                          const std::int32_t* targets, std::int64_t rows, std::int64_t vocab,
                                          const CrossEntropyConfig& config, cudaStream_t stream) {
  SEQBENCH_NVTX_RANGE("cross_entropy_fwd_unfused");
  constexpr const char* op = "cross_entropy_forward_unfused";
  require_rows(op, rows);
  require_vocab(op, vocab);
  const std::size_t need = cross_entropy_unfused_logp_bytes(DTypeTraits<T>::dtype, rows, vocab);
  const CrossEntropyWeights w =
      validate_forward(op, loss, nll, nullptr, totals, logits, targets, rows, vocab, config, logp, need);
  if (rows > 0) {
    SEQBENCH_REQUIRE(logp != nullptr, op << ": logp workspace is null, " << need << " bytes are needed");
    SEQBENCH_REQUIRE(logp_bytes >= need,
                     op << ": logp workspace has " << logp_bytes << " bytes, " << need << " are needed");
    SEQBENCH_REQUIRE(reinterpret_cast<std::uintptr_t>(logp) % kUnfusedAlign == 0,
                     op << ": logp workspace is not aligned to " << kUnfusedAlign << " bytes");
    const auto grid = static_cast<unsigned>(rows);
    const int v = static_cast<int>(vocab);
    unfused_log_softmax_kernel<T><<<grid, kUnfusedRowThreads, 0, stream>>>(logp, logits, v);
    SEQBENCH_CUDA_CHECK_LAUNCH();
    unfused_nll_smooth_kernel<T><<<grid, kUnfusedRowThreads, 0, stream>>>(
        loss, nll, logp, targets, v, config.ignore_index.has_value(), config.ignore_index.value_or(0),
        static_cast<float>(w.target - w.other), static_cast<float>(w.other));
    SEQBENCH_CUDA_CHECK_LAUNCH();
  }
  if (totals) launch_totals(totals, loss, nll, targets, rows, vocab, config, stream);
}

std::size_t cross_entropy_unfused_backward_workspace_bytes(DType dtype, std::int64_t rows,
                                                           std::int64_t vocab) {
  constexpr const char* op = "cross_entropy_unfused_backward_workspace_bytes";
  require_rows(op, rows);
  require_vocab(op, vocab);
  return unfused_backward_layout(dtype_size(dtype), rows, vocab).total;
}

template <class T>
void launch_cross_entropy_backward_unfused(T* dlogits, const T* logp, const std::int32_t* targets,
                                           const float* grad_loss, std::int64_t rows, std::int64_t vocab,
                                           const CrossEntropyConfig& config, void* workspace,
                                           std::size_t workspace_bytes, cudaStream_t stream) {
  SEQBENCH_NVTX_RANGE("cross_entropy_bwd_unfused");
  constexpr const char* op = "cross_entropy_backward_unfused";
  if (rows > 0) require_tensor(op, "grad_loss", grad_loss);
  const CrossEntropyWeights w =
      validate_backward(op, dlogits, logp, "logp", targets, nullptr, grad_loss, rows, vocab, config);
  if (rows == 0) return;
  const UnfusedBackwardLayout l = unfused_backward_layout(sizeof(T), rows, vocab);
  SEQBENCH_REQUIRE(workspace != nullptr, op << ": workspace is null, " << l.total << " bytes are needed");
  SEQBENCH_REQUIRE(workspace_bytes >= l.total,
                   op << ": workspace has " << workspace_bytes << " bytes, " << l.total << " are needed");
  SEQBENCH_REQUIRE(reinterpret_cast<std::uintptr_t>(workspace) % kUnfusedAlign == 0,
                   op << ": workspace is not aligned to " << kUnfusedAlign << " bytes");
  const std::size_t mb = matrix_bytes(rows, vocab, sizeof(T));
  require_no_overlap(op, {{"dlogits", dlogits, mb}, {"workspace", workspace, l.total}},
                     {{"logp", logp, mb},
                      {"targets", targets, row_bytes(rows, sizeof(std::int32_t))},
                      {"grad_loss", grad_loss, row_bytes(rows, sizeof(float))}});
  auto* base = static_cast<unsigned char*>(workspace);
  T* dlogp = reinterpret_cast<T*>(base + l.dlogp);
  T* coef_target = reinterpret_cast<T*>(base + l.coef_target);
  T* coef_other = reinterpret_cast<T*>(base + l.coef_other);
  const int v = static_cast<int>(vocab);
  const auto per_row_grid = static_cast<unsigned>((rows + kUnfusedRowThreads - 1) / kUnfusedRowThreads);
  const auto row_grid = static_cast<unsigned>(rows);
  unfused_grad_coefficients_kernel<T><<<per_row_grid, kUnfusedRowThreads, 0, stream>>>(
      coef_target, coef_other, grad_loss, targets, rows, v, config.ignore_index.has_value(),
      config.ignore_index.value_or(0), static_cast<float>(w.target - w.other), static_cast<float>(w.other));
  SEQBENCH_CUDA_CHECK_LAUNCH();
  // gather's backward, zeros_like + scatter_add_, built in dlogits: it is dead until the last
  // kernel overwrites it (eager's caching allocator hands this block to log_softmax_backward's
  // output the same way). All-zero bytes are +0 in every T.
  SEQBENCH_CUDA_CHECK(cudaMemsetAsync(dlogits, 0, mb, stream));
  unfused_scatter_add_kernel<T>
      <<<per_row_grid, kUnfusedRowThreads, 0, stream>>>(dlogits, coef_target, targets, rows, v);
  SEQBENCH_CUDA_CHECK_LAUNCH();
  eager::launch_map<T, 1>("cross_entropy_backward_unfused", dlogp, dlogits, nullptr, rows * v, v,
                          AddRowScalar<T>{coef_other}, stream);
  unfused_log_softmax_backward_kernel<T>
      <<<row_grid, kUnfusedRowThreads, 0, stream>>>(dlogits, dlogp, logp, v);
  SEQBENCH_CUDA_CHECK_LAUNCH();
}

// ---------------------------------------------------------------------------------------------
// Explicit instantiations: the one place the three element types are named.

#define SEQBENCH_CROSS_ENTROPY_INSTANTIATE(T)                                                            \
  template void launch_cross_entropy_forward<T>(float*, float*, float*, CrossEntropyTotals*, const T*,   \
                                                const std::int32_t*, std::int64_t, std::int64_t,         \
                                                const CrossEntropyConfig&, cudaStream_t);                \
  template void launch_cross_entropy_backward<T>(T*, const T*, const std::int32_t*, const float*,        \
                                                 const float*, std::int64_t, std::int64_t,               \
                                                 const CrossEntropyConfig&, cudaStream_t);               \
  template void launch_cross_entropy_backward_scalar<T>(T*, const T*, const std::int32_t*, const float*, \
                                                        float, std::int64_t, std::int64_t,               \
                                                        const CrossEntropyConfig&, cudaStream_t);        \
  template void launch_cross_entropy_forward_unfused<T>(                                                 \
      float*, float*, CrossEntropyTotals*, T*, std::size_t, const T*, const std::int32_t*, std::int64_t, \
      std::int64_t, const CrossEntropyConfig&, cudaStream_t);                                            \
  template void launch_cross_entropy_backward_unfused<T>(                                                \
      T*, const T*, const std::int32_t*, const float*, std::int64_t, std::int64_t,                       \
      const CrossEntropyConfig&, void*, std::size_t, cudaStream_t);

SEQBENCH_CROSS_ENTROPY_INSTANTIATE(float)
SEQBENCH_CROSS_ENTROPY_INSTANTIATE(__half)
SEQBENCH_CROSS_ENTROPY_INSTANTIATE(__nv_bfloat16)

#undef SEQBENCH_CROSS_ENTROPY_INSTANTIATE

}  // namespace seqbench::kernels
