// Gemm: every matrix product of the layers, through cuBLASLt, in row-major terms.
//
//   D[b] = alpha · op(A[b]) · op(B[b]) + beta · C[b]  (then the epilogue)     b < batch_count
//
// All matrices are row-major (the layout of every tensor in seqbench and PyTorch): A is stored
// [m, k] (op none) or [k, m] (op transpose), B is [k, n] or [n, k], C and D are [m, n]. A leading
// dimension is the distance between rows in elements. cuBLASLt is column-major, so the plan swaps
// the operands: row-major D = op(A)·op(B) is column-major Dᵀ = op(B)ᵀ·op(A)ᵀ, i.e. cuBLASLt's
// A is our B and its m is our n. The epilogues are named here in row-major terms:
//
//   epilogue             what it adds                                     needs
//   none                 -
//   bias                 D[i, j] += bias[j]                               bias [n]
//   bias_relu            relu(D + bias)                                   bias [n]
//   bias_gelu_tanh       gelu_tanh(D + bias)                              bias [n]
//   bias_gelu_tanh_aux   as bias_gelu_tanh, and aux = D + bias (the GELU  bias [n], aux [m, aux_ld]
//                        input, saved for the backward)
//   dgelu_tanh_bgrad     D = gelu_tanh'(aux) ⊙ (op(A)·op(B)), and         aux [m, aux_ld],
//                        bias[j] = Σ_i D[i, j] (the FFN's first bias       bias [n] (written)
//                        gradient, fused into the backward GEMM)
//   bgrad_a              bias[i] = Σ_k op(A)[i, k] (dbias = Σ_rows dy in   bias [m] (written)
//                        the weight-gradient GEMM dW = dyᵀ·x)
//
// cuBLASLt's GELU is the tanh approximation (Hugging Face "gelu_new", GPT-2), so these epilogues
// serve Activation::gelu_tanh only; the exact (erf) GELU goes through the fused kernels of
// kernels/bias_act_dropout.h. A layer with activation dropout cannot use the GELU epilogues
// either: the dropout sits between the activation and the next GEMM. Whether an epilogue beats a
// separate kernel is measured, not assumed (layers suite).
//
// Types: A, B, C and D share T ∈ {float, __half, __nv_bfloat16}; bias and aux are T too; the
// products accumulate in fp32 (CUBLAS_COMPUTE_32F: no TF32 for fp32 inputs, so fp32 results
// compare with the double reference at fp32 accuracy); alpha and beta are float.
//
// Plans: a Gemm owns one cuBLASLt handle and caches, per problem (shape, ops, leading dimensions,
// strides, dtype, epilogue and the alignment of every pointer), the descriptors and the algorithm
// the heuristic picked for the caller's workspace. The first call of a problem does the host work
// (descriptor creation, heuristic query); later calls only set the pointers and launch. Nothing is
// allocated on the device: the workspace comes from the caller. A Gemm is not thread-safe; use
// one per host thread, and one stream at a time: every call uses the one workspace, so products
// enqueued on two streams that may overlap need two Gemm objects (two workspaces). The plan cache
// keeps every problem it has seen; a layer's problems are a small fixed set per (batch, length)
// shape, so steady-state training makes no new plans.
//
// Empty products: with m = 0 or n = 0 nothing is computed, except that the gradient epilogues
// still write their bias: dgelu_tanh_bgrad with m = 0 writes bias[n] = 0 (an empty sum), and
// bgrad_a with n = 0 is refused (its bias[m] = Σ_k op(A) is not empty: compute it with a column
// sum instead). k = 0 with a non-empty output is refused (see Limits).
//
// Limits (checked before any CUDA call, each error naming the value and the limit): m, n >= 0,
// k >= 1 when m·n > 0, every dimension and leading dimension < 2^31 (cuBLASLt's int64 layouts are
// fine, but the heuristic's kernels index in 32 bits); lda/ldb/ldc at least the row length of their
// stored matrix; batch_count >= 1 with strides large enough that batches do not overlap in D;
// aux_ld a multiple of 8 and >= n (cuBLASLt's rule for the GELU input matrix); D overlapping no
// input unless it is C itself (D == C with equal ldc is allowed: beta accumulates in place).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "core/dtype.h"

namespace seqbench::layers {

enum class GemmOp { none, transpose };

enum class GemmEpilogue {
  none,
  bias,
  bias_relu,
  bias_gelu_tanh,
  bias_gelu_tanh_aux,
  dgelu_tanh_bgrad,
  bgrad_a
};

std::string_view gemm_epilogue_name(GemmEpilogue epilogue);

// What a GEMM computes and on what. Pointers are device pointers to T (the dtype of the call).
struct GemmProblem {
  GemmOp op_a = GemmOp::none;
  GemmOp op_b = GemmOp::none;
  std::int64_t m = 0, n = 0, k = 0;
  const void* a = nullptr;
  std::int64_t lda = 0;
  const void* b = nullptr;
  std::int64_t ldb = 0;
  const void* c = nullptr;  // read when beta != 0 (may equal d)
  void* d = nullptr;
  std::int64_t ldc = 0;  // for C and D alike
  float alpha = 1.0f;
  float beta = 0.0f;
  // Strided batches (attention: one GEMM per batch·head). Strides in elements; 0 broadcasts an
  // operand (A or B only).
  std::int64_t batch_count = 1;
  std::int64_t stride_a = 0, stride_b = 0, stride_c = 0;
  GemmEpilogue epilogue = GemmEpilogue::none;
  void* bias = nullptr;  // read (bias epilogues) or written (gradient epilogues); length per the table
  void* aux = nullptr;   // [m, aux_ld] row-major: written by *_aux, read by dgelu_tanh_bgrad
  std::int64_t aux_ld = 0;
};

// The recommended workspace: cuBLAS's guidance for Hopper is 32 MiB (less limits the algorithms
// the heuristic may choose; none is also valid).
inline constexpr std::size_t kGemmWorkspaceBytes = std::size_t{32} << 20;

// Throws seqbench::Error naming the first broken rule (see the header comment). Host only: a
// CPU test calls it with fake pointers.
void validate_gemm(const GemmProblem& problem, DType dtype);

// Elements of one batch's stored A, B and D (the extent a pointer must cover).
std::int64_t gemm_a_extent(const GemmProblem& problem);
std::int64_t gemm_b_extent(const GemmProblem& problem);
std::int64_t gemm_d_extent(const GemmProblem& problem);

class Gemm {
 public:
  // `workspace` (may be null with workspace_bytes 0) stays the caller's, for every call.
  Gemm(void* workspace, std::size_t workspace_bytes);
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  // Validates, finds or makes the plan, and enqueues the product on `stream`.
  void run(const GemmProblem& problem, DType dtype, cudaStream_t stream);

  template <class T>
  void run(const GemmProblem& problem, cudaStream_t stream) {
    run(problem, DTypeTraits<T>::dtype, stream);
  }

  // Whether cuBLASLt has an algorithm for this problem (for its shapes, alignments, epilogue and
  // the workspace), so that a layer can fall back to a separate kernel where an epilogue is not
  // available. Makes and caches the plan; validates like run(). Does not launch anything. Which
  // heuristic answers count as "none" is layers/gemm_heuristic.h's rule.
  bool has_algorithm(const GemmProblem& problem, DType dtype);

  // Plans made so far (one per distinct problem): steady-state steps make none.
  std::size_t plans() const;
  // The algorithm chosen for a problem, for reports: "algo=<id> tile=<id> stages=<id> ...";
  // "no algorithm: <why>" when cuBLASLt has none (layers/gemm_heuristic.h); empty if the problem
  // has not been planned.
  std::string describe_plan(const GemmProblem& problem, DType dtype) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace seqbench::layers
