#include <type_traits>

#include "core/cuda_check.h"
#include "core/nvtx.h"
#include "kernels/bias_act_dropout.h"
#include "kernels/dropout_mask.h"
#include "kernels/gelu.h"

namespace seqbench::kernels {

using namespace dropout_detail;

namespace {

// The activations in float (kernels/gelu.h: the GELUs in straight-line FFMA chains and MUFU
// operations, well inside the operator checks' bounds). ReLU as PyTorch's: NaN stays NaN
// (clamp_min), and the derivative is 0 where z <= 0, so 0 at 0 and 1 at NaN (threshold_backward
// passes the gradient on); `z > 0 ? z : 0` turned a NaN pre-activation into 0, hiding it.
template <Activation A>
__device__ __forceinline__ float activate(float z) {
  if constexpr (A == Activation::relu) {
    return z <= 0.0f ? 0.0f : z;
  } else if constexpr (A == Activation::gelu_erf) {
    return gelu_erf(z);
  } else {
    return gelu_tanh(z);
  }
}

template <Activation A>
__device__ __forceinline__ float activate_grad(float z) {
  if constexpr (A == Activation::relu) {
    return z <= 0.0f ? 0.0f : 1.0f;
  } else if constexpr (A == Activation::gelu_erf) {
    return gelu_erf_grad(z);
  } else {
    return gelu_tanh_grad(z);
  }
}

// Element functions for the row-tiled skeleton: fn(in0, in1, bias, keep). `scale` is 1/(1-p);
// the dropout factor multiplies (not selects) so that non-finite values propagate as in the
// reference's x ⊙ keep / (1-p).
template <Activation A>
struct FusedForward {
  float scale;
  __device__ float operator()(float x, float, float bias, bool keep) const {
    return activate<A>(x + bias) * (keep ? scale : 0.0f);
  }
};

template <Activation A>
struct FusedBackward {
  float scale;
  __device__ float operator()(float dy, float x, float bias, bool keep) const {
    return dy * (keep ? scale : 0.0f) * activate_grad<A>(x + bias);
  }
};

struct BiasAdd {
  __device__ float operator()(float x, float, float bias, bool) const { return x + bias; }
};

template <Activation A>
struct ActivationForward {
  __device__ float operator()(float z, float, float, bool) const { return activate<A>(z); }
};

template <Activation A>
struct ActivationBackward {
  __device__ float operator()(float da, float z, float, bool) const { return da * activate_grad<A>(z); }
};

struct Identity {
  __device__ float operator()(float x, float, float, bool) const { return x; }
};

void require_activation(Activation act, const char* op) {
  SEQBENCH_REQUIRE(
      act == Activation::relu || act == Activation::gelu_erf || act == Activation::gelu_tanh,
      op << ": unknown activation " << static_cast<int>(act) << " (expected relu, gelu_erf or gelu_tanh)");
}

// Calls fn(std::integral_constant<Activation, A>{}) for the runtime `act`, so that each
// activation is its own kernel instantiation (no per-element switch).
template <class Fn>
void dispatch_activation(Activation act, Fn&& fn) {
  switch (act) {
    case Activation::relu:
      fn(std::integral_constant<Activation, Activation::relu>{});
      return;
    case Activation::gelu_erf:
      fn(std::integral_constant<Activation, Activation::gelu_erf>{});
      return;
    case Activation::gelu_tanh:
      fn(std::integral_constant<Activation, Activation::gelu_tanh>{});
      return;
  }
  SEQBENCH_FAIL("unknown activation " << static_cast<int>(act));
}

template <class T>
std::size_t matrix_bytes(std::int64_t rows, std::int64_t cols) {
  return static_cast<std::size_t>(rows) * static_cast<std::size_t>(cols) * sizeof(T);
}

template <class T>
RowTileArgs<T> make_args(std::int64_t rows, std::int64_t cols) {
  RowTileArgs<T> args;
  args.rows = rows;
  args.cols = cols;
  return args;
}

// Checks out = f(in0[, in1][, bias]) over [rows, cols]: non-null and disjoint; with
// `out_may_be_in0`, out may also be in0 itself (in place), but not overlap it otherwise.
template <class T>
void require_elementwise(const char* op, T* out, const char* out_name, const T* in0, const char* in0_name,
                         const T* in1, const char* in1_name, const T* bias, std::int64_t rows,
                         std::int64_t cols, bool out_may_be_in0 = false) {
  const std::size_t bytes = matrix_bytes<T>(rows, cols);
  require_non_null(out, op, out_name);
  require_non_null(in0, op, in0_name);
  if (out_may_be_in0)
    require_same_or_disjoint(out, in0, bytes, op, out_name, in0_name);
  else
    require_disjoint(out, bytes, in0, bytes, op, out_name, in0_name);
  if (in1_name != nullptr) {
    require_non_null(in1, op, in1_name);
    require_disjoint(out, bytes, in1, bytes, op, out_name, in1_name);
  }
  // A bias, where the op has one, is checked non-null by the caller; here only for overlap.
  if (bias != nullptr) {
    require_disjoint(out, bytes, bias, static_cast<std::size_t>(cols) * sizeof(T), op, out_name, "bias");
  }
}

}  // namespace

const char* activation_name(Activation act) {
  switch (act) {
    case Activation::relu:
      return "relu";
    case Activation::gelu_erf:
      return "gelu_erf";
    case Activation::gelu_tanh:
      return "gelu_tanh";
  }
  return "?";
}

std::size_t bias_act_dropout_bwd_workspace_bytes(std::int64_t rows, std::int64_t cols) {
  return bias_grad_workspace_bytes(rows, cols);
}

std::size_t column_sum_workspace_bytes(std::int64_t rows, std::int64_t cols) {
  return bias_grad_workspace_bytes(rows, cols);
}

template <class T>
void launch_bias_act_dropout_fwd(T* y, const T* x, const T* bias, std::int64_t rows, std::int64_t cols,
                                 Activation act, const DropoutConfig& dropout, cudaStream_t stream) {
  SEQBENCH_NVTX_RANGE("bias_act_dropout_fwd");
  constexpr const char* op = "bias_act_dropout_fwd";
  require_activation(act, op);
  require_dropout_probability(dropout.p, op);
  require_matrix_shape(rows, cols, op);
  if (rows == 0 || cols == 0) return;
  require_non_null(bias, op, "bias");
  require_elementwise<T>(op, y, "y", x, "x", nullptr, nullptr, bias, rows, cols);
  RowTileArgs<T> args = make_args<T>(rows, cols);
  args.out = y;
  args.in0 = x;
  args.bias = bias;
  args.seed = dropout.seed;
  args.offset = dropout.offset;
  const float scale = dropout_keep_scale(dropout.p);
  dispatch_activation(act, [&](auto tag) {
    launch_row_tile_dropout<T, 1, true, false>(args, dropout.p, FusedForward<decltype(tag)::value>{scale},
                                               stream);
  });
}

template <class T>
void launch_bias_act_dropout_bwd(T* dx, T* dbias, const T* dy, const T* x, const T* bias, std::int64_t rows,
                                 std::int64_t cols, Activation act, const DropoutConfig& dropout,
                                 void* workspace, std::size_t workspace_bytes, cudaStream_t stream) {
  SEQBENCH_NVTX_RANGE("bias_act_dropout_bwd");
  constexpr const char* op = "bias_act_dropout_bwd";
  require_activation(act, op);
  require_dropout_probability(dropout.p, op);
  require_matrix_shape(rows, cols, op);
  const std::size_t need = bias_act_dropout_bwd_workspace_bytes(rows, cols);
  require_workspace(workspace, workspace_bytes, need, op);
  if (cols == 0) return;
  require_non_null(dbias, op, "dbias");
  const std::size_t bias_bytes = static_cast<std::size_t>(cols) * sizeof(T);
  if (rows > 0) {
    require_non_null(bias, op, "bias");
    // dx may be dy itself: each element is read, then written, by the one thread that owns it.
    const bool in_place = dx != nullptr && dx == dy;
    require_elementwise<T>(op, dx, "dx", dy, "dy", x, "x", bias, rows, cols, /*out_may_be_in0=*/true);
    require_disjoint(dx, matrix_bytes<T>(rows, cols), workspace, need, op, "dx", "workspace");
    require_disjoint(dbias, bias_bytes, dx, matrix_bytes<T>(rows, cols), op, "dbias", "dx");
    require_disjoint(dbias, bias_bytes, dy, matrix_bytes<T>(rows, cols), op, "dbias", "dy");
    require_disjoint(dbias, bias_bytes, x, matrix_bytes<T>(rows, cols), op, "dbias", "x");
    require_disjoint(dbias, bias_bytes, bias, bias_bytes, op, "dbias", "bias");
    require_disjoint(dbias, bias_bytes, workspace, need, op, "dbias", "workspace");
    // The partials are written while other blocks still read dy, x and bias.
    require_disjoint(workspace, need, dy, matrix_bytes<T>(rows, cols), op, "workspace", "dy");
    require_disjoint(workspace, need, x, matrix_bytes<T>(rows, cols), op, "workspace", "x");
    require_disjoint(workspace, need, bias, bias_bytes, op, "workspace", "bias");
    RowTileArgs<T> args = make_args<T>(rows, cols);
    args.out = dx;
    args.in0 = dy;
    args.in1 = x;
    args.bias = bias;
    args.partials = static_cast<float*>(workspace);
    args.seed = dropout.seed;
    args.offset = dropout.offset;
    const float scale = dropout_keep_scale(dropout.p);
    dispatch_activation(act, [&](auto tag) {
      using Fn = FusedBackward<decltype(tag)::value>;
      if (in_place)
        launch_row_tile_dropout<T, 2, true, true, true>(args, dropout.p, Fn{scale}, stream);
      else
        launch_row_tile_dropout<T, 2, true, true, false>(args, dropout.p, Fn{scale}, stream);
    });
  }
  launch_bias_grad_reduce<T>(dbias, static_cast<const float*>(workspace), rows, cols, stream);
}

template <class T>
void launch_bias_add(T* z, const T* x, const T* bias, std::int64_t rows, std::int64_t cols,
                     cudaStream_t stream) {
  SEQBENCH_NVTX_RANGE("bias_add");
  constexpr const char* op = "bias_add";
  require_matrix_shape(rows, cols, op);
  if (rows == 0 || cols == 0) return;
  require_non_null(bias, op, "bias");
  require_elementwise<T>(op, z, "z", x, "x", nullptr, nullptr, bias, rows, cols);
  RowTileArgs<T> args = make_args<T>(rows, cols);
  args.out = z;
  args.in0 = x;
  args.bias = bias;
  launch_row_tile<T, 1, true, false, false>(args, BiasAdd{}, stream);
}

template <class T>
void launch_activation_fwd(T* a, const T* z, std::int64_t rows, std::int64_t cols, Activation act,
                           cudaStream_t stream) {
  SEQBENCH_NVTX_RANGE("activation_fwd");
  constexpr const char* op = "activation_fwd";
  require_activation(act, op);
  require_matrix_shape(rows, cols, op);
  if (rows == 0 || cols == 0) return;
  require_elementwise<T>(op, a, "a", z, "z", nullptr, nullptr, nullptr, rows, cols);
  RowTileArgs<T> args = make_args<T>(rows, cols);
  args.out = a;
  args.in0 = z;
  dispatch_activation(act, [&](auto tag) {
    launch_row_tile<T, 1, false, false, false>(args, ActivationForward<decltype(tag)::value>{}, stream);
  });
}

template <class T>
void launch_activation_bwd(T* dz, const T* da, const T* z, std::int64_t rows, std::int64_t cols,
                           Activation act, cudaStream_t stream) {
  SEQBENCH_NVTX_RANGE("activation_bwd");
  constexpr const char* op = "activation_bwd";
  require_activation(act, op);
  require_matrix_shape(rows, cols, op);
  if (rows == 0 || cols == 0) return;
  require_elementwise<T>(op, dz, "dz", da, "da", z, "z", nullptr, rows, cols);
  RowTileArgs<T> args = make_args<T>(rows, cols);
  args.out = dz;
  args.in0 = da;
  args.in1 = z;
  dispatch_activation(act, [&](auto tag) {
    launch_row_tile<T, 2, false, false, false>(args, ActivationBackward<decltype(tag)::value>{}, stream);
  });
}

template <class T>
void launch_column_sum(T* sum, const T* x, std::int64_t rows, std::int64_t cols, void* workspace,
                       std::size_t workspace_bytes, cudaStream_t stream) {
  SEQBENCH_NVTX_RANGE("column_sum");
  constexpr const char* op = "column_sum";
  require_matrix_shape(rows, cols, op);
  const std::size_t need = column_sum_workspace_bytes(rows, cols);
  require_workspace(workspace, workspace_bytes, need, op);
  if (cols == 0) return;
  require_non_null(sum, op, "sum");
  if (rows > 0) {
    require_non_null(x, op, "x");
    const std::size_t sum_bytes = static_cast<std::size_t>(cols) * sizeof(T);
    require_disjoint(sum, sum_bytes, x, matrix_bytes<T>(rows, cols), op, "sum", "x");
    require_disjoint(sum, sum_bytes, workspace, need, op, "sum", "workspace");
    require_disjoint(workspace, need, x, matrix_bytes<T>(rows, cols), op, "workspace", "x");
    RowTileArgs<T> args = make_args<T>(rows, cols);
    args.in0 = x;
    args.partials = static_cast<float*>(workspace);
    launch_row_tile<T, 1, false, false, true>(args, Identity{}, stream);
  }
  launch_bias_grad_reduce<T>(sum, static_cast<const float*>(workspace), rows, cols, stream);
}

// The explicit instantiations, in one place.
#define SEQBENCH_BIAS_ACT_DROPOUT_INSTANTIATE(T)                                                         \
  template void launch_bias_act_dropout_fwd<T>(T*, const T*, const T*, std::int64_t, std::int64_t,       \
                                               Activation, const DropoutConfig&, cudaStream_t);          \
  template void launch_bias_act_dropout_bwd<T>(T*, T*, const T*, const T*, const T*, std::int64_t,       \
                                               std::int64_t, Activation, const DropoutConfig&, void*,    \
                                               std::size_t, cudaStream_t);                               \
  template void launch_bias_add<T>(T*, const T*, const T*, std::int64_t, std::int64_t, cudaStream_t);    \
  template void launch_activation_fwd<T>(T*, const T*, std::int64_t, std::int64_t, Activation,           \
                                         cudaStream_t);                                                  \
  template void launch_activation_bwd<T>(T*, const T*, const T*, std::int64_t, std::int64_t, Activation, \
                                         cudaStream_t);                                                  \
  template void launch_column_sum<T>(T*, const T*, std::int64_t, std::int64_t, void*, std::size_t,       \
                                     cudaStream_t);

SEQBENCH_BIAS_ACT_DROPOUT_INSTANTIATE(float)
SEQBENCH_BIAS_ACT_DROPOUT_INSTANTIATE(__half)
SEQBENCH_BIAS_ACT_DROPOUT_INSTANTIATE(__nv_bfloat16)

#undef SEQBENCH_BIAS_ACT_DROPOUT_INSTANTIATE

}  // namespace seqbench::kernels
