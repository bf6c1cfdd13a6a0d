// What cuBLASLt's heuristic answer means for a GEMM plan (layers/gemm.cpp).
//
// cublasLtMatmulAlgoGetHeuristic says "no algorithm for this problem" in more than one way:
//   - CUBLAS_STATUS_NOT_SUPPORTED (the documented answer);
//   - CUBLAS_STATUS_SUCCESS with no result, or with no result whose `state` is success
//     (cublasLt.h: on success, "inspect heuristicResultsArray[0 to (returnAlgoCount - 1)].state");
//   - CUBLAS_STATUS_INVALID_VALUE for some problems that are valid: PyTorch's Blas.cpp avoids the
//     cuBLASLt bias epilogue when an operand has one row or column for that reason.
// Each of these is a refusal: Gemm::has_algorithm() answers false (a layer then uses its separate
// kernels) and Gemm::run() raises an error naming the problem and this reason. Every problem
// reaches the heuristic only after validate_gemm() accepted it, so an INVALID_VALUE there is
// cuBLASLt's verdict on the problem, not a malformed call. Any other status (not initialized, an
// allocation or internal failure, an architecture mismatch) is an error: it says nothing about the
// problem.
#pragma once

#include <cublasLt.h>

#include <string>

namespace seqbench::layers {

// How many algorithms the plan asks the heuristic for: the first usable one is taken (the heuristic
// lists them fastest first), so a first result with a failed state does not cost the problem.
inline constexpr int kHeuristicResults = 4;

// The heuristic's answer, read: `index` >= 0 names the result to use; otherwise `refusal` says why
// cuBLASLt has no algorithm for the problem.
struct HeuristicChoice {
  int index = -1;
  std::string refusal;
};

// The first of results[0, found) whose state is success, or the refusal naming the heuristic's
// answer; throws seqbench::Error for a status that is not a refusal. `results` is read only when
// status is success.
HeuristicChoice choose_algorithm(cublasStatus_t status, const cublasLtMatmulHeuristicResult_t* results,
                                 int found);

}  // namespace seqbench::layers
