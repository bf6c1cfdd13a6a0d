#include "layers/gemm_heuristic.h"

#include <string>

#include "core/cuda_check.h"
#include "core/error.h"

namespace seqbench::layers {

HeuristicChoice choose_algorithm(cublasStatus_t status, const cublasLtMatmulHeuristicResult_t* results,
                                 int found) {
  HeuristicChoice choice;
  switch (status) {
    case CUBLAS_STATUS_SUCCESS:
      if (found < 1) {
        choice.refusal = "the heuristic found no algorithm";
        return choice;
      }
      for (int i = 0; i < found; ++i) {
        if (results[i].state == CUBLAS_STATUS_SUCCESS) {
          choice.index = i;
          return choice;
        }
      }
      choice.refusal = "none of the heuristic's " + std::to_string(found) +
                       " algorithms has state success (the first: " + cublas_status_name(results[0].state) +
                       ")";
      return choice;
    case CUBLAS_STATUS_NOT_SUPPORTED:
    case CUBLAS_STATUS_INVALID_VALUE:
      choice.refusal = std::string("the heuristic answered ") + cublas_status_name(status);
      return choice;
    default:
      SEQBENCH_FAIL("gemm: cublasLtMatmulAlgoGetHeuristic failed: " << cublas_status_name(status));
  }
}

}  // namespace seqbench::layers
