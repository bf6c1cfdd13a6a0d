#include "core/cuda_check.h"
#include "core/nvtx.h"
#include "kernels/bias_dropout_residual.h"
#include "kernels/dropout_mask.h"

namespace seqbench::kernels {

using namespace dropout_detail;

namespace {

// Element functions for the row-tiled skeleton: fn(in0, in1, bias, keep). The dropout factor
// multiplies (not selects) so that non-finite values propagate as in the reference.
struct FusedForward {
  float scale;
  __device__ float operator()(float x, float residual, float bias, bool keep) const {
    return residual + (x + bias) * (keep ? scale : 0.0f);
  }
};

struct FusedBackward {
  float scale;
  __device__ float operator()(float dy, float, float, bool keep) const { return dy * (keep ? scale : 0.0f); }
};

struct Add {
  __device__ float operator()(float a, float residual, float, bool) const { return a + residual; }
};

template <class T>
std::size_t matrix_bytes(std::int64_t rows, std::int64_t cols) {
  return static_cast<std::size_t>(rows) * static_cast<std::size_t>(cols) * sizeof(T);
}

}  // namespace

std::size_t bias_dropout_residual_bwd_workspace_bytes(std::int64_t rows, std::int64_t cols) {
  return bias_grad_workspace_bytes(rows, cols);
}

template <class T>
void launch_bias_dropout_residual_fwd(T* y, const T* x, const T* bias, const T* residual, std::int64_t rows,
                                      std::int64_t cols, const DropoutConfig& dropout, cudaStream_t stream) {
  SEQBENCH_NVTX_RANGE("bias_dropout_residual_fwd");
  constexpr const char* op = "bias_dropout_residual_fwd";
  require_dropout_probability(dropout.p, op);
  require_matrix_shape(rows, cols, op);
  if (rows == 0 || cols == 0) return;
  const std::size_t bytes = matrix_bytes<T>(rows, cols);
  require_non_null(y, op, "y");
  require_non_null(x, op, "x");
  require_non_null(bias, op, "bias");
  require_non_null(residual, op, "residual");
  require_disjoint(y, bytes, x, bytes, op, "y", "x");
  require_disjoint(y, bytes, residual, bytes, op, "y", "residual");
  require_disjoint(y, bytes, bias, static_cast<std::size_t>(cols) * sizeof(T), op, "y", "bias");
  RowTileArgs<T> args;
  args.out = y;
  args.in0 = x;
  args.in1 = residual;
  args.bias = bias;
  args.rows = rows;
  args.cols = cols;
  args.seed = dropout.seed;
  args.offset = dropout.offset;
  launch_row_tile_dropout<T, 2, true, false>(args, dropout.p, FusedForward{dropout_keep_scale(dropout.p)},
                                             stream);
}

template <class T>
void launch_bias_dropout_residual_bwd(T* dx, T* dbias, const T* dy, std::int64_t rows, std::int64_t cols,
                                      const DropoutConfig& dropout, void* workspace,
                                      std::size_t workspace_bytes, cudaStream_t stream) {
  SEQBENCH_NVTX_RANGE("bias_dropout_residual_bwd");
  constexpr const char* op = "bias_dropout_residual_bwd";
  require_dropout_probability(dropout.p, op);
  require_matrix_shape(rows, cols, op);
  const std::size_t need = bias_dropout_residual_bwd_workspace_bytes(rows, cols);
  require_workspace(workspace, workspace_bytes, need, op);
  if (cols == 0) return;
  require_non_null(dbias, op, "dbias");
  const std::size_t bias_bytes = static_cast<std::size_t>(cols) * sizeof(T);
  if (rows > 0) {
    const std::size_t bytes = matrix_bytes<T>(rows, cols);
    require_non_null(dx, op, "dx");
    require_non_null(dy, op, "dy");
    require_disjoint(dx, bytes, dy, bytes, op, "dx", "dy");
    require_disjoint(dx, bytes, workspace, need, op, "dx", "workspace");
    require_disjoint(dbias, bias_bytes, dx, bytes, op, "dbias", "dx");
    require_disjoint(dbias, bias_bytes, dy, bytes, op, "dbias", "dy");
    require_disjoint(dbias, bias_bytes, workspace, need, op, "dbias", "workspace");
    // The partials are written while other blocks still read dy.
    require_disjoint(workspace, need, dy, bytes, op, "workspace", "dy");
    RowTileArgs<T> args;
    args.out = dx;
    args.in0 = dy;
    args.partials = static_cast<float*>(workspace);
    args.rows = rows;
    args.cols = cols;
    args.seed = dropout.seed;
    args.offset = dropout.offset;
    launch_row_tile_dropout<T, 1, false, true>(args, dropout.p, FusedBackward{dropout_keep_scale(dropout.p)},
                                               stream);
  }
  launch_bias_grad_reduce<T>(dbias, static_cast<const float*>(workspace), rows, cols, stream);
}

template <class T>
void launch_residual_add(T* y, const T* a, const T* residual, std::int64_t rows, std::int64_t cols,
                         cudaStream_t stream) {
  SEQBENCH_NVTX_RANGE("residual_add");
  constexpr const char* op = "residual_add";
  require_matrix_shape(rows, cols, op);
  if (rows == 0 || cols == 0) return;
  const std::size_t bytes = matrix_bytes<T>(rows, cols);
  require_non_null(y, op, "y");
  require_non_null(a, op, "a");
  require_non_null(residual, op, "residual");
  require_disjoint(y, bytes, a, bytes, op, "y", "a");
  require_disjoint(y, bytes, residual, bytes, op, "y", "residual");
  RowTileArgs<T> args;
  args.out = y;
  args.in0 = a;
  args.in1 = residual;
  args.rows = rows;
  args.cols = cols;
  launch_row_tile<T, 2, false, false, false>(args, Add{}, stream);
}

// The explicit instantiations, in one place.
#define SEQBENCH_BIAS_DROPOUT_RESIDUAL_INSTANTIATE(T)                                                        \
  template void launch_bias_dropout_residual_fwd<T>(T*, const T*, const T*, const T*, std::int64_t,          \
                                                    std::int64_t, const DropoutConfig&, cudaStream_t);       \
  template void launch_bias_dropout_residual_bwd<T>(T*, T*, const T*, std::int64_t, std::int64_t,            \
                                                    const DropoutConfig&, void*, std::size_t, cudaStream_t); \
  template void launch_residual_add<T>(T*, const T*, const T*, std::int64_t, std::int64_t, cudaStream_t);

SEQBENCH_BIAS_DROPOUT_RESIDUAL_INSTANTIATE(float)
SEQBENCH_BIAS_DROPOUT_RESIDUAL_INSTANTIATE(__half)
SEQBENCH_BIAS_DROPOUT_RESIDUAL_INSTANTIATE(__nv_bfloat16)

#undef SEQBENCH_BIAS_DROPOUT_RESIDUAL_INSTANTIATE

}  // namespace seqbench::kernels
