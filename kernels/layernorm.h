// LayerNorm over the last axis (LightSeq2 §IV-A), fused forward and backward, and the unfused
// "PyTorch eager" baseline: one op per kernel.
//
// Semantics are those of reference/layernorm.h (PyTorch nn.LayerNorm): biased variance, eps inside
// the square root. Every launcher is a template over T in {float, __half, __nv_bfloat16} (explicit
// instantiations in layernorm.cu) and accumulates in fp32. x, y, dy, dx are [rows, hidden]
// row-major; gamma, beta, dgamma, dbeta are [hidden] in T; mean and rstd are [rows] in fp32.
//
// How a row is mapped onto threads (one plan for every launcher, see layernorm_forward_plan):
//   * warp path (hidden <= 256): a "team" of 32 threads (one warp) owns a row; a block holds
//     kLayerNormWarpsPerBlock teams, i.e. that many rows at a time. Row reductions are warp
//     shuffles only.
//   * block path (256 < hidden <= 8192; backward: <= 4096): the team is hidden / E threads rounded
//     up to a warp (at most 1024, backward 512); row reductions are a warp shuffle plus one exchange
//     through shared memory.
//   In both register paths every thread holds E <= kLayerNormMaxElemsPerThread elements of its row
//   in registers (`items` vectors of `vector` elements, vector j of the thread being
//   lane + j * team_threads), so x (and dy) are read from memory exactly once.
//   * multipass path (hidden > 8192, backward > 4096, no cap): one block of kLayerNormMultipassThreads per
//     row walks the row in global memory once per pass (statistics, then output); the re-reads of
//     one row are served by L2.
// Vectorization: Packed<T> (16-byte) loads/stores when hidden % Packed<T>::kSize == 0 and every
// row tensor pointer is 16-byte aligned; otherwise the same kernels run with scalar accesses.
//
// Limits (checked, seqbench::Error names the value and the limit): 1 <= hidden <= kLayerNormMaxHidden,
// 0 <= rows <= kLayerNormMaxRows, eps > 0 and finite, pointers non-null when rows > 0, the
// backward workspace as documented at layernorm_backward_workspace_bytes. Tensors of one call must
// not overlap: each launcher checks every output (the workspace included) against every other
// output and every input, and names the pair.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

namespace seqbench::kernels {

inline constexpr int kLayerNormMaxHidden = 1 << 30;            // int column indices keep headroom
inline constexpr std::int64_t kLayerNormMaxRows = 0x7fffffff;  // rows become grid.x
inline constexpr int kLayerNormMaxElemsPerThread = 8;          // the register budget of one thread
inline constexpr int kLayerNormWarpsPerBlock = 4;              // rows per block on the warp path
inline constexpr int kLayerNormBackwardWarpsPerBlock = 8;      // ... of the backward
inline constexpr int kLayerNormBackwardTeamThreads = 512;      // backward block path: 512/team teams
inline constexpr int kLayerNormMaxBlockThreads = 1024;
inline constexpr int kLayerNormMultipassThreads = 512;
// Beyond this the row no longer fits the registers of one block: 1024 threads x 8 elements.
inline constexpr int kLayerNormMaxRegisterHidden = kLayerNormMaxBlockThreads * kLayerNormMaxElemsPerThread;
// The backward holds x̂, g, gamma and two sums per element: its blocks stay at <= 512 threads so
// that a thread may use 128 registers (at 1024 threads the 64-register cap made it spill).
inline constexpr int kLayerNormBackwardMaxRegisterHidden =
    kLayerNormBackwardTeamThreads * kLayerNormMaxElemsPerThread;

// How the forward computes mean and variance.
//   welford:    each thread runs Welford's update over its elements; threads are merged with Chan
//               et al.'s pairwise formula (the lower lane always first, so that every lane of a
//               butterfly gets the same bits). var = M2 / hidden.
//   two_moment: LightSeq2's form: Σx and Σx² reduced in parallel, var = Σx²/H - mean², clamped
//               at 0. One fused reduction, but it cancels catastrophically when |mean| >> std.
// The default is welford: the accuracy study (tests/kernels/layernorm_validation_test.cpp,
// kernels/NOTES-layernorm-softmax.md) measured two_moment's variance error at x = 1000 + N(0,1)
// in fp16 and bf16 to be orders of magnitude larger, at no measurable cost for a memory-bound kernel.
enum class LayerNormStats { welford, two_moment };
inline constexpr LayerNormStats kDefaultLayerNormStats = LayerNormStats::welford;
const char* layernorm_stats_name(LayerNormStats stats);

enum class LayerNormPath { warp, block, multipass };
const char* layernorm_path_name(LayerNormPath path);

// The thread mapping a launcher will use for one row (host-side, no GPU needed).
struct LayerNormPlan {
  LayerNormPath path = LayerNormPath::warp;
  int team_threads = 32;    // threads that share one row (32 on the warp path)
  int teams_per_block = 1;  // rows a block works on at the same time
  int vector = 1;           // elements per access: Packed<T>::kSize or 1 (scalar)
  int items = 1;            // vectors per thread held in registers; 0 on the multipass path
  int elems_per_thread() const { return vector * items; }
};

// `vectorizable`: hidden % Packed<T>::kSize == 0 and the row tensors are 16-byte aligned.
// Throws for hidden outside [1, kLayerNormMaxHidden]. The backward maps a row like the forward but
// puts more teams in a block (its grid is the fixed chunk count, not the rows): 8 warps on the warp
// path, max(1, 512 / team_threads) teams on the block path.
LayerNormPlan layernorm_plan(DType dtype, int hidden, bool vectorizable, bool backward = false);

// --- forward ----------------------------------------------------------------------------------
// y[r,c]  = (x[r,c] - mean_r) * rstd_r * gamma[c] + beta[c]
// mean_r  = (1/H) Σ_c x[r,c];  rstd_r = 1 / sqrt(var_r + eps), var_r = (1/H) Σ_c (x[r,c] - mean_r)²
// mean and rstd (fp32, [rows]) are what the backward needs; either may be null (inference).
// y must not overlap x (not even y == x): the launcher rejects it, and the kernels read x through
// __restrict__ pointers.
// Minimal traffic: x read + y written (rows*hidden*sizeof(T) each) + gamma, beta + 8*rows bytes.
template <class T>
void launch_layernorm_forward(T* y, float* mean, float* rstd, const T* x, const T* gamma, const T* beta,
                              std::int64_t rows, int hidden, float eps, cudaStream_t stream,
                              LayerNormStats stats = kDefaultLayerNormStats);

// --- backward ---------------------------------------------------------------------------------
// With x̂ = (x - mean)·rstd and g = dy ⊙ gamma, per row (LightSeq2's rearranged form; the two row
// reductions Σg and Σg·x̂ run in parallel, in one exchange):
//   dx     = rstd · (g - mean_c(g) - x̂ · mean_c(g ⊙ x̂))
//   dgamma = Σ_r dy ⊙ x̂,  dbeta = Σ_r dy
// dgamma/dbeta are bitwise deterministic, with no atomics: the rows are cut into `chunks` fixed
// chunks (layernorm_backward_partition, a function of rows and hidden only, never of the device or
// dtype), and block p owns chunk p. Bitwise equal results need the same dtype, shape and
// vectorizability (every pointer 16-byte aligned, hidden a multiple of the vector width): that
// choice sets the team size and so which rows each team sums and in what order the team sums are
// added (dx's row reductions too). Repeated calls on the same buffers always agree.
// Thread mapping, warp/block paths: the block holds several row teams (layernorm_plan with
// backward = true: 8 warps, or max(1, 512 / team_threads) block teams); team t takes rows
// first + t, first + t + teams, ... of the chunk, keeps its row (x̂ and g) in registers to compute
// dx after one two-value reduction, and accumulates dgamma/dbeta for its columns in registers
// across its rows. The teams' sums are added in shared memory in team order and the block writes
// one fp32 partial row per plane into the workspace; a 32 x 32-thread column kernel then adds each
// column's partials in chunk order and writes dgamma/dbeta in T.
// Multipass path (hidden > 4096): [row sums Σg, Σg·x̂ -> workspace, one block per row] + [dx and
// partials: 2-D grid of 256-thread column slices x chunks, a thread owns one vector of columns and
// walks the chunk's rows] + [column reduce].
// dx is deterministic too. mean and rstd are the forward's outputs.
struct LayerNormBackwardPartition {
  std::int64_t rows_per_chunk = 0;
  std::int64_t chunks = 0;
};
inline constexpr std::int64_t kLayerNormMinRowsPerChunk = 16;  // keeps partial traffic <= ~1/8
inline constexpr std::int64_t kLayerNormMaxChunks = 1024;      // enough blocks for any GPU
inline constexpr std::size_t kLayerNormPartialBudgetBytes = std::size_t{64} << 20;  // caps the workspace
LayerNormBackwardPartition layernorm_backward_partition(std::int64_t rows, int hidden);

// Bytes of fp32 workspace the backward needs (0 when rows == 0): 2 planes [chunks, hidden] of
// partial sums (dgamma, dbeta), plus [rows, 2] row sums on the multipass path (hidden > 4096).
// The workspace must be 16-byte aligned; its contents on entry do not matter (it is fully
// overwritten before it is read).
std::size_t layernorm_backward_workspace_bytes(std::int64_t rows, int hidden);

template <class T>
void launch_layernorm_backward(T* dx, T* dgamma, T* dbeta, const T* dy, const T* x, const T* gamma,
                               const float* mean, const float* rstd, std::int64_t rows, int hidden,
                               void* workspace, std::size_t workspace_bytes, cudaStream_t stream);

// --- the unfused baseline ---------------------------------------------------------------------
// What PyTorch eager does for a decomposed LayerNorm: every op its own kernel, intermediates
// stored in T, the elementwise ops moving 16-byte vectors as eager's vectorized elementwise kernel
// does (kernels/eager_map.h). The workspace (caller-provided, 256-byte aligned, at least the size below)
// holds the intermediates; nothing is allocated. Forward, 4 kernels: mean (row reduce) -> var and rstd (row
// reduce, two-pass around the stored mean) -> x̂ = (x - mean)·rstd (elementwise, stored in T) -> y = x̂·gamma +
// beta (elementwise). Backward, 7 kernels: x̂ (elementwise) -> dbeta partials of dy and dgamma partials of
// dy·x̂ (column reduce, 2-D grid, same partition as the fused backward) -> their fixed-order column sum
// -> g = dy·gamma (elementwise, stored in T) -> row sums Σg, Σg·x̂ (row reduce) -> dx (elementwise).
// Outputs as the fused launchers (mean and rstd are required here).
std::size_t layernorm_unfused_forward_workspace_bytes(DType dtype, std::int64_t rows, int hidden);
std::size_t layernorm_unfused_backward_workspace_bytes(DType dtype, std::int64_t rows, int hidden);

template <class T>
void launch_layernorm_forward_unfused(T* y, float* mean, float* rstd, const T* x, const T* gamma,
                                      const T* beta, std::int64_t rows, int hidden, float eps,
                                      void* workspace, std::size_t workspace_bytes, cudaStream_t stream);
template <class T>
void launch_layernorm_backward_unfused(T* dx, T* dgamma, T* dbeta, const T* dy, const T* x, const T* gamma,
                                       const float* mean, const float* rstd, std::int64_t rows, int hidden,
                                       void* workspace, std::size_t workspace_bytes, cudaStream_t stream);

// --- host emulation of the forward statistics (for the accuracy study) ------------------------
// Replays, on the host and in float, exactly the arithmetic the forward kernels perform for one
// row: the same per-thread element order under `plan`, the same warp butterflies, the same
// cross-warp exchange, the same update and merge functions (compiled from the same source, with
// every fused multiply-add written out as fmaf so that host and device round alike). `x` holds the
// row's values after rounding to the kernel's input type. Returns the mean and the variance the
// kernel would feed into rsqrt.
struct LayerNormRowStats {
  float mean = 0.0f;
  float var = 0.0f;
};
LayerNormRowStats layernorm_emulate_row_stats(const float* x, int hidden, LayerNormStats stats,
                                              const LayerNormPlan& plan);

}  // namespace seqbench::kernels
