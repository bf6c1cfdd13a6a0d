// Label-smoothed cross-entropy fused with log-softmax (LightSeq2's criterion, issue #3), forward
// and backward, and the unfused "PyTorch eager" baseline. Semantics are exactly those of
// reference/cross_entropy.h:
//   logits [N, V] row-major in T, targets int32 [N]; q = softmax(logits[r]), t = targets[r],
//   nll = lse - x_t with lse = log Σ_j exp(x_j), smooth = Σ_j -log q_j = V·lse - Σ_j x_j, and
//   loss = (w_t - w_o)·nll + w_o·smooth for the smoothed target distribution p (p_t = w_t, p_j = w_o
//   elsewhere) of one of two conventions (cross_entropy_weights):
//     paper   (Szegedy et al., the LightSeq2 paper): w_t = 1 - α + α/V, w_o = α/V
//     fairseq (label_smoothed_cross_entropy):       w_t = 1 - ε,       w_o = ε/(V-1)  (0 for V = 1)
//   dloss/dlogits = q - p, so dlogits[r] = g_r·(q - p) for an upstream gradient g_r of loss[r].
//   Rows whose target equals ignore_index give zero loss, zero nll, zero lse and a zero gradient
//   row; their logits are never read.
//   A -inf logit (a masked vocabulary entry) has q_j = 0: lse, nll and dlogits stay finite (its
//   gradient is -g_r·w_o); without smoothing (w_o = 0) the loss is the finite (w_t - w_o)·nll
//   (0·log 0 = 0), with smoothing it is +inf (some weight lies on an impossible entry). A -inf
//   target gives nll = +inf; a row of nothing but -inf gives NaN.
// Types: T ∈ {float, __half, __nv_bfloat16}; every computation in fp32; loss, nll, lse, grad_loss
// and the totals are fp32 whatever T is (a criterion's output); dlogits is T.
//
// Out-of-range targets. A target outside [0, V) that is not ignore_index is a caller error that the
// launcher cannot see without a device round trip. The kernels never read logits[r, t] then; they
// turn the row into an error signal instead: loss, nll and lse are NaN (so loss_sum and nll_sum
// are NaN), totals.invalid_targets counts such rows, and the backward writes a NaN row of dlogits
// (which an overflow-skipping optimizer step then skips).
//
// Algorithm and thread mapping (cross_entropy_plan; a function of (dtype, V) only, so the order of
// every float sum, and with it the bitwise result, does not depend on the device):
//   A "team" owns one row: a warp (8 rows per 256-thread block) when the row has <= 256 16-byte
//   vectors, else a whole block of 64..512 threads (about 8+ vectors per thread). The forward
//   streams the row ONCE: each thread keeps an online (max m, Σ 2^((x-m)·log2 e), Σ x) over its
//   vectors, rescaling its sum only when a vector raises its max (at most once per vector); then the
//   team reduces the max, rescales, and reduces the two sums (warp shuffles, plus one shared-memory
//   exchange for block teams); lane 0, which loaded x_t (one scalar load) before the row's stream,
//   forms lse, nll, smooth and loss.
//   The probabilities are never materialized. 16-byte alignment: row r starts at element r·V, so
//   for odd V a row is not 16-byte aligned: each row peels a scalar head (up to the first aligned
//   element) and a scalar tail; the body is Packed<T> loads, 4 in flight per thread. The forward
//   therefore vectorizes for any V and any element-aligned logits pointer.
//   The backward is elementwise given the forward's lse: q_j = 2^(x_j·log2 e - lse·log2 e), one read
//   of logits, one write of dlogits per element, same team mapping and head/tail peeling; Packed<T>
//   when logits and dlogits have the same 16-byte phase (scalar accesses otherwise).
//   exp2f/log2f (CUDA Math API: 2 ulp / 1 ulp) are used with the log2 e factor folded into one fma;
//   the error analysis is in suites/operators/cross_entropy.cu.
//   Totals: a second kernel (one block of 1024 threads) sums loss[] and nll[] in a fixed order
//   (thread i takes rows i, i+1024, ... in order, then a shuffle tree) and counts the tokens
//   (rows that count) and invalid targets: deterministic, no atomics. It runs only when totals is
//   requested.
//   Not fused: forward and backward into one launch (the backward needs lse first, i.e. a second
//   pass over the row; LightSeq2 also runs them as separate kernels).
//
// Traffic (minimal bytes), C the rows not ignored (ignored rows read nothing): forward C·V·sizeof(T)
// logits read + 4N targets + 12N (loss, nll, lse) written; backward C·V·sizeof(T) read +
// N·V·sizeof(T) written + 8-12N (targets, lse, grad). FLOPs per element: forward ~5 (max, fma,
// exp2, add, add), backward ~4 (fma, exp2, subtract, multiply).
//
// Limits (checked; seqbench::Error names the value and the limit): 0 <= N <= kCrossEntropyMaxRows,
// 1 <= V <= kCrossEntropyMaxVocab, V >= 2 for the fairseq convention with ε > 0, smoothing finite
// in [0, 1], tensor pointers non-null and aligned to their element type when N > 0, no output
// overlapping an input or another output (no in-place), the unfused workspace as documented.
// Non-finite logits give non-finite results (as in the reference), never a fault.
//
// Range (finite logits of large magnitude). The fused forward carries a row's max m as
// m2 = fl(m·log2 e); its rounding r (up to half an ulp of m2) scales every term alike and cancels
// in lse while 2^r stays finite and normal: for |m| < 2^31 / log2 e, about 1.49e9 (beyond fp16's
// range; fp32 and bf16 reach it). Beyond that a row's lse, nll and loss come out +-inf or NaN
// while the reference stays finite: loud, and the accumulator's test (tests/kernels/
// online_lse_test.cpp) finds no finite lse outside the forward's bound there. The backward's
// q_j = 2^(x_j·log2 e - fl(lse·log2 e)) has no such cancellation: its relative error grows as
// about 2u·|lse|, u = 2^-24 (the rounding of lse·log2 e, and that of the fp32 lse the forward
// stored, which LightSeq2's interface shares): 1e-5 at |lse| = 100, 0.4 % at 3e4, a factor of 3 at
// 1e7. The tolerances of suites/operators/cross_entropy.cu carry it (u·|lse| and the measured lse
// error in δq_j). Keeping the row max beside lse - max would remove it; logits that large mean a
// diverged model.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include "core/dtype.h"

namespace seqbench::kernels {

inline constexpr std::int64_t kCrossEntropyMaxRows = 0x7fffffff;              // int32 counts, grid.x
inline constexpr std::int64_t kCrossEntropyMaxVocab = std::int64_t{1} << 30;  // int column indices
inline constexpr int kCrossEntropyWarpTeamMaxVectors = 256;  // rows up to this many vectors: warp teams
inline constexpr int kCrossEntropyWarpRowsPerBlock = 8;
inline constexpr int kCrossEntropyMinBlockTeam = 64;
inline constexpr int kCrossEntropyMaxBlockTeam = 512;
inline constexpr int kCrossEntropyVectorsPerThread = 8;  // block team size: vectors / this, pow2-clamped
inline constexpr int kCrossEntropyTotalsThreads = 1024;

// Mirrors ref::SmoothingConvention (kernels never include reference/); the names are the same.
enum class CrossEntropySmoothing { paper, fairseq };
const char* cross_entropy_smoothing_name(CrossEntropySmoothing convention);
// "paper" or "fairseq"; throws naming the value and the accepted names otherwise.
CrossEntropySmoothing parse_cross_entropy_smoothing(std::string_view name);

struct CrossEntropyConfig {
  float smoothing = 0.0f;  // α (paper) or ε (fairseq), in [0, 1]
  CrossEntropySmoothing convention = CrossEntropySmoothing::fairseq;
  std::optional<std::int32_t> ignore_index;  // none: every row counts
};

// The smoothed target distribution of a row, in double: p_t = target, p_j = other (j != t).
struct CrossEntropyWeights {
  double target = 1.0;
  double other = 0.0;
};
// Validates smoothing and V for the convention (as the launchers do) and returns the weights.
CrossEntropyWeights cross_entropy_weights(const CrossEntropyConfig& config, std::int64_t vocab);

// The thread mapping of one row (host-side; see the header comment).
struct CrossEntropyPlan {
  int team_threads = 32;  // threads sharing one row
  int rows_per_block = 1;
  int vector = 1;  // elements per 16-byte vector of T
  int block_threads() const { return team_threads * rows_per_block; }
  // Upper bounds on what one thread of the forward does to a row of V elements, for error
  // analysis: elements it adds into its sums (body vectors + one head and one tail element), and
  // how often its running max can rise (once per vector or scalar it absorbs).
  std::int64_t max_thread_elements(std::int64_t vocab) const;
  std::int64_t max_thread_rescales(std::int64_t vocab) const;
};
CrossEntropyPlan cross_entropy_plan(DType dtype, std::int64_t vocab);

// Device output of the totals kernel: fixed-order fp32 sums over all rows and int32 counts.
struct CrossEntropyTotals {
  float loss_sum = 0.0f;
  float nll_sum = 0.0f;
  std::int32_t tokens = 0;           // rows whose target is in [0, V) and not ignore_index
  std::int32_t invalid_targets = 0;  // rows whose target is outside [0, V) and not ignore_index
};

// --- fused launchers -----------------------------------------------------------------------------
// launch_cross_entropy_forward<T>(loss, nll, lse, totals, logits, targets, N, V, config, stream)
//   loss [N] (required), nll [N], lse [N] (the log-sum-exp the backward needs; 0 on ignored rows)
//   and totals (one struct) may be null when not wanted, except that totals needs nll.
template <class T>
void launch_cross_entropy_forward(float* loss, float* nll, float* lse, CrossEntropyTotals* totals,
                                  const T* logits, const std::int32_t* targets, std::int64_t rows,
                                  std::int64_t vocab, const CrossEntropyConfig& config, cudaStream_t stream);

// launch_cross_entropy_backward<T>(dlogits, logits, targets, lse, grad_loss, N, V, config, stream)
//   dlogits[r] = grad_loss[r]·(q - p); grad_loss: device fp32 [N], the upstream gradient of loss[r];
//   lse: the forward's output for the same logits and config.
template <class T>
void launch_cross_entropy_backward(T* dlogits, const T* logits, const std::int32_t* targets, const float* lse,
                                   const float* grad_loss, std::int64_t rows, std::int64_t vocab,
                                   const CrossEntropyConfig& config, cudaStream_t stream);

// The usual objective loss_sum (or a scaled mean): dlogits[r] = grad_loss_sum·(q - p); a host
// scalar, finite.
template <class T>
void launch_cross_entropy_backward_scalar(T* dlogits, const T* logits, const std::int32_t* targets,
                                          const float* lse, float grad_loss_sum, std::int64_t rows,
                                          std::int64_t vocab, const CrossEntropyConfig& config,
                                          cudaStream_t stream);

// --- the unfused baseline ------------------------------------------------------------------------
// Eager PyTorch running fairseq's label_smoothed_nll_loss on lprobs = log_softmax(logits) and its
// autograd backward, one op per kernel, every intermediate a T tensor:
//   forward: log_softmax (one block per row: max, sum-exp, then logp = x - lse written as T [N, V])
//   -> NLL + smoothing sum (one block per row reads logp: nll = -logp_t, smooth = -Σ logp, loss)
//   -> the totals kernel above (when totals is requested; .sum() in eager).
//   backward, from the saved logp (loss = w_d·nll + w_o·smooth, w_d = w_t - w_o: fairseq's
//   1 - ε - eps_i and eps_i), 5 launches:
//     1. the [N]-sized autograd steps of both branches (Mul, MaskedFill, Neg backward; six tiny
//        launches in eager, folded into one here, which favours the baseline by ~5 launches):
//        c_t = -(g·w_d), c_o = -(g·w_o) in T [N]; 0 on ignored rows, NaN for invalid targets;
//     2. gather's backward, zeros_like(logp): a memset of dlogits (used as this scratch: dead
//        until step 5 overwrites it, as eager's caching allocator reuses the block);
//     3. its scatter_add_: d[r, t_r] += c_t[r] (one thread per row; targets outside [0, V) skipped);
//     4. autograd's accumulation of the two gradients of logp, out of place (the smooth branch's
//        expanded view arrives first, so it cannot be accumulated into in place):
//        dlogp[r, j] = c_o[r] + d[r, j]; the expand of SumBackward is a view, never materialized
//        (the neg of `-lprobs.sum(-1)` acts on the [N, 1] sum); 16-byte vectors, as eager's
//        vectorized elementwise kernel (kernels/eager_map.h);
//     5. log_softmax_backward_data: dlogits = dlogp - exp(logp)·Σ_j dlogp_j (one block per row: the
//        row sum, then a second pass over dlogp and logp).
//   Result g·(q - p) as the fused backward's, with the eager rounding of every intermediate to T.
//   Ignored rows: c = 0, so dlogp rows are +0 and dlogits rows exactly 0 (for finite logp).
//   Traffic of the backward (N·V·s = one [N, V] tensor of T): write (memset) + read + write (add)
//   + 3 reads + write (log_softmax backward) = 7 N·V·s, vs 2 N·V·s for the fused backward.
// logp is the saved activation: cross_entropy_unfused_logp_bytes(dtype, N, V) bytes, 256-byte aligned,
// written by the forward, read by the backward. The backward's workspace (dlogp, c_t, c_o):
// cross_entropy_unfused_backward_workspace_bytes(dtype, N, V) bytes, 256-byte aligned, contents on
// entry irrelevant, overlapping no argument. Out-of-range targets are the same NaN signal.
std::size_t cross_entropy_unfused_logp_bytes(DType dtype, std::int64_t rows, std::int64_t vocab);

template <class T>
void launch_cross_entropy_forward_unfused(float* loss, float* nll, CrossEntropyTotals* totals, T* logp,
                                          std::size_t logp_bytes, const T* logits,
                                          const std::int32_t* targets, std::int64_t rows, std::int64_t vocab,
                                          const CrossEntropyConfig& config, cudaStream_t stream);

std::size_t cross_entropy_unfused_backward_workspace_bytes(DType dtype, std::int64_t rows,
                                                           std::int64_t vocab);

template <class T>
void launch_cross_entropy_backward_unfused(T* dlogits, const T* logp, const std::int32_t* targets,
                                           const float* grad_loss, std::int64_t rows, std::int64_t vocab,
                                           const CrossEntropyConfig& config, void* workspace,
                                           std::size_t workspace_bytes, cudaStream_t stream);

}  // namespace seqbench::kernels
