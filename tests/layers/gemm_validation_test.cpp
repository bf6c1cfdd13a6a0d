// layers/gemm on the CPU: validate_gemm's rules (each error names the value and the limit) and the
// extents, with fake pointers: validation runs before any CUDA call; and which of the heuristic's
// answers mean "no algorithm" (gemm_heuristic.h).
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "core/cuda_check.h"
#include "layers/gemm.h"
#include "layers/gemm_heuristic.h"
#include "tests/common/expect_error.h"

namespace seqbench::layers {
namespace {

using seqbench::testing::expect_error;

void* fake(std::uintptr_t slot) {
  return reinterpret_cast<void*>(slot << 32);
}

// y[rows, out] = x[rows, in] · W[out, in]ᵀ + bias: nn.Linear's forward.
GemmProblem linear(std::int64_t rows, std::int64_t in, std::int64_t out) {
  GemmProblem p;
  p.op_a = GemmOp::none;
  p.op_b = GemmOp::transpose;
  p.m = rows;
  p.n = out;
  p.k = in;
  p.a = fake(1);
  p.lda = in;
  p.b = fake(2);
  p.ldb = in;
  p.d = fake(3);
  p.ldc = out;
  p.epilogue = GemmEpilogue::bias;
  p.bias = fake(4);
  return p;
}

TEST(GemmValidation, AcceptsLinearAndAttentionShapes) {
  EXPECT_NO_THROW(validate_gemm(linear(4097, 1023, 3), DType::bf16));
  GemmProblem scores;  // S = Q·Kᵀ per (batch, head): [L, d]·[L, d]ᵀ
  scores.op_b = GemmOp::transpose;
  scores.m = 127;
  scores.n = 127;
  scores.k = 65;
  scores.a = fake(1);
  scores.lda = 65;
  scores.b = fake(2);
  scores.ldb = 65;
  scores.d = fake(3);
  scores.ldc = 127;
  scores.batch_count = 48;
  scores.stride_a = 127 * 65;
  scores.stride_b = 127 * 65;
  scores.stride_c = 127 * 127;
  EXPECT_NO_THROW(validate_gemm(scores, DType::f16));
}

TEST(GemmValidation, EmptyOutputNeedsNothing) {
  GemmProblem p = linear(0, 16, 16);
  p.a = p.b = nullptr;
  p.d = nullptr;
  p.bias = nullptr;
  EXPECT_NO_THROW(validate_gemm(p, DType::f32));
}

TEST(GemmValidation, RejectsBadShapesAndLeadingDimensions) {
  GemmProblem p = linear(8, 16, 32);
  p.m = -1;
  expect_error([&] { validate_gemm(p, DType::f32); }, "shape m=-1 n=32 k=16 is negative");
  p = linear(8, 16, 32);
  p.k = 0;
  p.lda = p.ldb = 1;
  expect_error([&] { validate_gemm(p, DType::f32); }, "k = 0 with a non-empty 8x32 output");
  p = linear(8, 16, 32);
  p.lda = 15;
  expect_error([&] { validate_gemm(p, DType::f32); }, "lda 15 is below A's row length 16 (A stored 8x16)");
  p = linear(8, 16, 32);
  p.ldb = 8;
  expect_error([&] { validate_gemm(p, DType::f32); }, "ldb 8 is below B's row length 16 (B stored 32x16)");
  p = linear(8, 16, 32);
  p.ldc = 31;
  expect_error([&] { validate_gemm(p, DType::f32); }, "ldc 31 is below D's row length n=32");
  p = linear(8, 16, std::int64_t{1} << 31);
  p.ldc = p.n;
  expect_error([&] { validate_gemm(p, DType::f32); }, "has a dimension above 2147483647");
}

TEST(GemmValidation, RejectsMissingPointers) {
  GemmProblem p = linear(8, 16, 32);
  p.a = nullptr;
  expect_error([&] { validate_gemm(p, DType::f16); }, "gemm: a is null");
  p = linear(8, 16, 32);
  p.bias = nullptr;
  expect_error([&] { validate_gemm(p, DType::f16); }, "epilogue bias needs a bias pointer");
  p = linear(8, 16, 32);
  p.beta = 1.0f;
  expect_error([&] { validate_gemm(p, DType::f16); }, "c is null with beta = 1");
}

TEST(GemmValidation, AuxFollowsCublasLtsRule) {
  GemmProblem p = linear(8, 16, 36);
  p.epilogue = GemmEpilogue::bias_gelu_tanh_aux;
  p.aux = fake(5);
  p.aux_ld = 36;
  expect_error([&] { validate_gemm(p, DType::bf16); }, "aux_ld 36 must be a multiple of 8 and >= n=36");
  p.aux_ld = 40;
  EXPECT_NO_THROW(validate_gemm(p, DType::bf16));
  p.aux = nullptr;
  expect_error([&] { validate_gemm(p, DType::bf16); }, "epilogue bias_gelu_tanh_aux needs aux");
}

TEST(GemmValidation, BatchesMustNotOverlapAndKeepSimpleEpilogues) {
  GemmProblem p = linear(8, 16, 32);
  p.batch_count = 2;
  p.stride_c = 8 * 32 - 1;
  expect_error([&] { validate_gemm(p, DType::f32); }, "stride_c 255 < one batch of D (256 elements)");
  p.stride_c = 256;
  EXPECT_NO_THROW(validate_gemm(p, DType::f32));
  p.epilogue = GemmEpilogue::bgrad_a;
  expect_error([&] { validate_gemm(p, DType::f32); }, "epilogue bgrad_a supports batch_count 1 only");
  p.batch_count = 0;
  expect_error([&] { validate_gemm(p, DType::f32); }, "batch_count 0 is outside [1, 2147483647]");
}

TEST(GemmValidation, RejectsOverlaps) {
  GemmProblem p = linear(8, 16, 32);
  p.d = static_cast<char*>(const_cast<void*>(p.a)) + 4;  // inside A
  expect_error([&] { validate_gemm(p, DType::f32); }, "output d overlaps input a");
  p = linear(8, 16, 32);
  p.beta = 1.0f;
  p.c = static_cast<char*>(p.d) + 4;
  expect_error([&] { validate_gemm(p, DType::f32); }, "output d overlaps input c without being c");
  p.c = p.d;  // in-place accumulation
  EXPECT_NO_THROW(validate_gemm(p, DType::f32));
  p = linear(8, 16, 32);
  p.bias = static_cast<char*>(p.d) + 64;
  expect_error([&] { validate_gemm(p, DType::f32); }, "bias overlaps output d");
  p = linear(8, 16, 32);
  p.epilogue = GemmEpilogue::bgrad_a;
  p.bias = static_cast<char*>(const_cast<void*>(p.b)) + 8;
  expect_error([&] { validate_gemm(p, DType::f32); }, "bias gradient overlaps input a or b");
}

TEST(GemmValidation, EmptyGradientEpiloguesStillOweTheirBias) {
  GemmProblem p = linear(8, 16, 0);  // n = 0
  p.ldc = 1;
  p.epilogue = GemmEpilogue::bgrad_a;
  expect_error([&] { validate_gemm(p, DType::f32); },
               "bgrad_a with n = 0 still has a bias gradient of 8 sums");
  p = linear(0, 16, 32);  // m = 0: dgelu_tanh_bgrad writes bias[n] = 0
  p.epilogue = GemmEpilogue::dgelu_tanh_bgrad;
  p.bias = nullptr;
  expect_error([&] { validate_gemm(p, DType::f32); }, "dgelu_tanh_bgrad needs a bias pointer");
}

TEST(GemmExtents, FollowTheStoredShapes) {
  GemmProblem p = linear(5, 7, 3);
  p.lda = 9;
  p.ldb = 8;
  p.ldc = 4;
  EXPECT_EQ(gemm_a_extent(p), 4 * 9 + 7);  // A stored [5, 7] with ld 9
  EXPECT_EQ(gemm_b_extent(p), 2 * 8 + 7);  // B stored [3, 7] (transposed) with ld 8
  EXPECT_EQ(gemm_d_extent(p), 4 * 4 + 3);
  p.op_a = GemmOp::transpose;  // A stored [7, 5]
  p.lda = 5;
  EXPECT_EQ(gemm_a_extent(p), 6 * 5 + 5);
}

TEST(GemmEpilogueNames, AreStable) {
  EXPECT_EQ(gemm_epilogue_name(GemmEpilogue::dgelu_tanh_bgrad), "dgelu_tanh_bgrad");
  EXPECT_EQ(gemm_epilogue_name(GemmEpilogue::bgrad_a), "bgrad_a");
}

// cuBLASLt's ways of saying "none for this problem" are refusals that name the answer; the first
// result whose state is success is taken; every other status is an error, never a silent "no
// algorithm".
TEST(GemmHeuristic, TakesTheFirstUsableResultAndNamesRefusals) {
  cublasLtMatmulHeuristicResult_t results[kHeuristicResults] = {};
  for (auto& r : results) r.state = CUBLAS_STATUS_SUCCESS;
  EXPECT_EQ(choose_algorithm(CUBLAS_STATUS_SUCCESS, results, 1).index, 0);
  EXPECT_EQ(choose_algorithm(CUBLAS_STATUS_SUCCESS, results, 3).index, 0);
  results[0].state = CUBLAS_STATUS_NOT_SUPPORTED;
  results[1].state = CUBLAS_STATUS_INVALID_VALUE;
  EXPECT_EQ(choose_algorithm(CUBLAS_STATUS_SUCCESS, results, 3).index, 2);
  // Only the results the heuristic returned are read: result 2 is usable but not among them.
  const HeuristicChoice none_usable = choose_algorithm(CUBLAS_STATUS_SUCCESS, results, 2);
  EXPECT_EQ(none_usable.index, -1);
  EXPECT_NE(none_usable.refusal.find("none of the heuristic's 2 algorithms has state success (the first: "
                                     "CUBLAS_STATUS_NOT_SUPPORTED)"),
            std::string::npos)
      << none_usable.refusal;
  const HeuristicChoice empty = choose_algorithm(CUBLAS_STATUS_SUCCESS, results, 0);
  EXPECT_EQ(empty.index, -1);
  EXPECT_NE(empty.refusal.find("found no algorithm"), std::string::npos) << empty.refusal;
  for (const cublasStatus_t refused : {CUBLAS_STATUS_NOT_SUPPORTED, CUBLAS_STATUS_INVALID_VALUE}) {
    const HeuristicChoice choice = choose_algorithm(refused, nullptr, 0);
    EXPECT_EQ(choice.index, -1);
    EXPECT_NE(choice.refusal.find(cublas_status_name(refused)), std::string::npos) << choice.refusal;
  }
  for (const cublasStatus_t failed :
       {CUBLAS_STATUS_NOT_INITIALIZED, CUBLAS_STATUS_ALLOC_FAILED, CUBLAS_STATUS_ARCH_MISMATCH,
        CUBLAS_STATUS_INTERNAL_ERROR, CUBLAS_STATUS_EXECUTION_FAILED}) {
    expect_error([&] { (void)choose_algorithm(failed, results, 1); }, cublas_status_name(failed));
  }
}

}  // namespace
}  // namespace seqbench::layers
