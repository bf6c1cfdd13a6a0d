// Checks for CUDA runtime and cuBLAS status codes; each failure becomes a seqbench::Error that
// names the call, the status and the file:line of the caller.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "core/error.h"

namespace seqbench {

const char* cublas_status_name(cublasStatus_t status);

}  // namespace seqbench

#define SEQBENCH_CUDA_CHECK(expr)                                                   \
  do {                                                                              \
    const cudaError_t seqbench_err_ = (expr);                                       \
    if (seqbench_err_ != cudaSuccess)                                               \
      SEQBENCH_FAIL(#expr << " failed: " << cudaGetErrorName(seqbench_err_) << " (" \
                          << cudaGetErrorString(seqbench_err_) << ")");             \
  } while (0)

// After a kernel launch: catches bad launch configurations without synchronizing.
#define SEQBENCH_CUDA_CHECK_LAUNCH() SEQBENCH_CUDA_CHECK(cudaGetLastError())

#define SEQBENCH_CUBLAS_CHECK(expr)                                                        \
  do {                                                                                     \
    const cublasStatus_t seqbench_st_ = (expr);                                            \
    if (seqbench_st_ != CUBLAS_STATUS_SUCCESS)                                             \
      SEQBENCH_FAIL(#expr << " failed: " << ::seqbench::cublas_status_name(seqbench_st_)); \
  } while (0)
