// Building blocks of the optimizer update kernels, shared by the fused whole-workspace kernel
// (fused_optimizer.cu) and the apex-style multi-tensor baseline (multi_tensor_apply.cu): both run
// exactly update_element() on exactly the same loads and stores, so their results are bitwise
// equal and only their launch structure differs.
//
// Everything here is __host__ __device__ and takes the thread's position as arguments (first
// index, stride) instead of reading threadIdx/blockIdx, so that a CPU test
// (tests/trainer/kernel_simulation_test.cu) can run each kernel's per-thread work for every thread
// of a grid on the host and compare with the host emulation: the index arithmetic, the vector
// path, the tails and the Philox word mapping are then checked without a GPU. Include from .cu
// files (nvcc) only.
#pragma once

#include <cstdint>

#include "core/dtype.h"  // SEQBENCH_DEVICE_UNROLL
#include "core/philox.h"
#include "kernels/packed.h"
#include "trainer/update_rule.h"

namespace seqbench::trainer::detail {

// Whether `ptr` may be accessed with 16-byte vectors (null counts as aligned: an unused buffer).
SEQBENCH_HD inline bool aligned16(const void* ptr) {
  return reinterpret_cast<std::uintptr_t>(ptr) % kernels::kVectorBytes == 0;
}

// Typed device pointers of one contiguous range; element i of each array is the same parameter.
template <class T>
struct UpdateArgs {
  T* params;
  const T* grads;
  float* master;             // master_fp32 mode only
  float* state0;             // m / momentum buffer, when used
  float* state1;             // v (Adam, AdamW)
  std::uint64_t index_base;  // global index of element 0 (stochastic-rounding key)
};

// What every thread of a step needs, loaded once from the device StepControl.
struct StepContext {
  StepCoefficients c;
  float multiplier;
  std::uint64_t step;
  std::uint64_t seed;
  bool use_state0;
};

template <OptimizerKind K>
SEQBENCH_HD __forceinline__ StepContext load_step_context(const StepControl* control, std::uint64_t seed,
                                                          bool grads_prescaled) {
  StepContext ctx;
  ctx.c = control->coefficients;
  ctx.multiplier = grads_prescaled ? 1.0f : control->grad_multiplier;
  ctx.step = static_cast<std::uint64_t>(control->step);
  ctx.seed = seed;
  // SGD keeps a momentum buffer only with momentum; Adam and AdamW always keep m.
  ctx.use_state0 = K != OptimizerKind::sgd || ctx.c.momentum != 0.0f;
  return ctx;
}

template <int N>
SEQBENCH_HD __forceinline__ void load_floats(const float* src, float (&dst)[N]) {
  static_assert(N % 4 == 0, "fp32 state moves in 16-byte vectors");
  SEQBENCH_DEVICE_UNROLL
  for (int q = 0; q < N / 4; ++q) {
    const auto pack = kernels::Packed<float, 4>::load(src + 4 * q);
    SEQBENCH_DEVICE_UNROLL
    for (int k = 0; k < 4; ++k) dst[4 * q + k] = pack.v[k];
  }
}

template <int N>
SEQBENCH_HD __forceinline__ void store_floats(float* dst, const float (&src)[N]) {
  SEQBENCH_DEVICE_UNROLL
  for (int q = 0; q < N / 4; ++q) {
    kernels::Packed<float, 4> pack;
    SEQBENCH_DEVICE_UNROLL
    for (int k = 0; k < 4; ++k) pack.v[k] = src[4 * q + k];
    pack.store(dst + 4 * q);
  }
}

// Elements per vector: one 16-byte Packed<T> of parameters (and of gradients).
template <class T>
inline constexpr int kUpdateVector = kernels::kVectorBytes / static_cast<int>(sizeof(T));

// Updates elements i .. i + kUpdateVector<T> - 1. Requires every used pointer + i to be 16-byte
// aligned and (stochastic rounding) (index_base + i) % 4 == 0.
template <class T, OptimizerKind K, PrecisionMode M>
SEQBENCH_HD __forceinline__ void update_vector(const UpdateArgs<T>& a, const StepContext& ctx,
                                               std::size_t i) {
  constexpr int V = kUpdateVector<T>;
  using P = kernels::Packed<T>;
  constexpr bool kMaster = M == PrecisionMode::master_fp32;
  constexpr bool kState1 = K != OptimizerKind::sgd;
  P param{};
  if constexpr (!kMaster) param = P::load(a.params + i);  // master mode: the parameters are write-only
  const P grad = P::load(a.grads + i);
  float master[V] = {}, s0[V] = {}, s1[V] = {};
  if constexpr (kMaster) load_floats(a.master + i, master);
  if (ctx.use_state0) load_floats(a.state0 + i, s0);
  if constexpr (kState1) load_floats(a.state1 + i, s1);
  P out;
  // Stochastic rounding: one Philox group per 4 elements, drawn just before they are needed so
  // that only 4 words are live at a time.
  SEQBENCH_DEVICE_UNROLL
  for (int q = 0; q < V / 4; ++q) {
    PhiloxWords words{};
    if constexpr (M == PrecisionMode::stochastic_rounding)
      words = philox_group(ctx.seed, ctx.step, (a.index_base + i) / 4 + q);
    SEQBENCH_DEVICE_UNROLL
    for (int k = 4 * q; k < 4 * q + 4; ++k) {
      out.v[k] = param.v[k];
      update_element<T, K, M>(out.v[k], master[k], grad.v[k], s0[k], s1[k], ctx.c, ctx.multiplier,
                              words.w[k - 4 * q]);
    }
  }
  out.store(a.params + i);
  if constexpr (kMaster) store_floats(a.master + i, master);
  if (ctx.use_state0) store_floats(a.state0 + i, s0);
  if constexpr (kState1) store_floats(a.state1 + i, s1);
}

// Updates element i alone (any alignment).
template <class T, OptimizerKind K, PrecisionMode M>
SEQBENCH_HD __forceinline__ void update_scalar(const UpdateArgs<T>& a, const StepContext& ctx,
                                               std::size_t i) {
  constexpr bool kMaster = M == PrecisionMode::master_fp32;
  constexpr bool kState1 = K != OptimizerKind::sgd;
  T param{};
  if constexpr (!kMaster) param = a.params[i];
  float master = 0.0f, s0 = 0.0f, s1 = 0.0f;
  // master is non-null in master_fp32 mode and state0 whenever ctx.use_state0 (the launchers'
  // validate_update_buffers); the analyzer follows a table entry it cannot see filled.
  if constexpr (kMaster) master = a.master[i];  // NOLINT(clang-analyzer-core.NullDereference)
  if (ctx.use_state0) s0 = a.state0[i];         // NOLINT(clang-analyzer-core.NullDereference)
  if constexpr (kState1) s1 = a.state1[i];
  std::uint32_t bits = 0;
  if constexpr (M == PrecisionMode::stochastic_rounding) {
    const std::uint64_t index = a.index_base + i;  // = philox_bits(seed, step, index), in registers
    bits = philox_word(philox_group(ctx.seed, ctx.step, index >> 2), static_cast<unsigned>(index & 3));
  }
  update_element<T, K, M>(param, master, a.grads[i], s0, s1, ctx.c, ctx.multiplier, bits);
  a.params[i] = param;
  if constexpr (kMaster) a.master[i] = master;
  if (ctx.use_state0) a.state0[i] = s0;
  if constexpr (kState1) a.state1[i] = s1;
}

// Whether a range may take the vector path: every pointer it uses 16-byte aligned and, for
// stochastic rounding, whole Philox groups per vector ((index_base + i) % 4 == 0 for every vector
// start i, a multiple of kUpdateVector >= 4).
template <class T>
SEQBENCH_HD inline bool can_vectorize(const UpdateArgs<T>& a, PrecisionMode mode) {
  return aligned16(a.params) && aligned16(a.grads) && aligned16(a.master) && aligned16(a.state0) &&
         aligned16(a.state1) && (mode != PrecisionMode::stochastic_rounding || a.index_base % 4 == 0);
}

// One thread's share of a range of `count` elements: vectors first, vector index first, first +
// stride, ... (when `vectorized`), then the elements after the last whole vector (or all of
// them), element index first + vectors * V, + stride, ... With first = global thread index and
// stride = threads in the grid this is the fused kernel; with the thread index in a block and the
// block size it is a multi-tensor block's chunk.
template <class T, OptimizerKind K, PrecisionMode M>
SEQBENCH_HD __forceinline__ void update_range_thread(const UpdateArgs<T>& a, const StepContext& ctx,
                                                     std::size_t count, bool vectorized, std::size_t first,
                                                     std::size_t stride) {
  constexpr int V = kUpdateVector<T>;
  const std::size_t vectors = vectorized ? count / V : 0;
  for (std::size_t v = first; v < vectors; v += stride) update_vector<T, K, M>(a, ctx, v * V);
  for (std::size_t i = vectors * V + first; i < count; i += stride) update_scalar<T, K, M>(a, ctx, i);
}

// One thread's share of the gradient statistics (launch_grad_stats) with the same traversal:
// adds the squares of the unscaled gradients to `sum` and ORs "saw an inf/NaN" into `nonfinite`.
template <class T>
SEQBENCH_HD __forceinline__ void grad_stats_thread(const T* grads, std::size_t count, bool vectorized,
                                                   float inv_scale, std::size_t first, std::size_t stride,
                                                   float& sum, int& nonfinite) {
  constexpr int V = kUpdateVector<T>;
  using P = kernels::Packed<T>;
  const std::size_t vectors = vectorized ? count / V : 0;
  for (std::size_t v = first; v < vectors; v += stride) {
    const P g = P::load(grads + v * V);
    float local = 0.0f;  // a short sum per vector, then one add: less rounding in long runs
    SEQBENCH_DEVICE_UNROLL
    for (int k = 0; k < V; ++k) {
      const float x = rn::mul(to_float<T>(g.v[k]), inv_scale);
      nonfinite |= !is_finite_float(x);
      local += x * x;
    }
    sum += local;
  }
  for (std::size_t i = vectors * V + first; i < count; i += stride) {
    const float x = rn::mul(to_float<T>(grads[i]), inv_scale);
    nonfinite |= !is_finite_float(x);
    sum += x * x;
  }
}

// Calls fn(std::integral_constant<OptimizerKind>, std::integral_constant<PrecisionMode>) for the
// runtime pair; stochastic rounding only with bf16 (the launchers have checked).
template <class T, class Fn>
void dispatch_kind_mode(OptimizerKind kind, PrecisionMode mode, Fn&& fn) {
  auto with_kind = [&](auto kind_tag) {
    switch (mode) {
      case PrecisionMode::master_fp32:
        return fn(kind_tag, std::integral_constant<PrecisionMode, PrecisionMode::master_fp32>{});
      case PrecisionMode::stochastic_rounding:
        if constexpr (std::is_same_v<T, __nv_bfloat16>) {
          return fn(kind_tag, std::integral_constant<PrecisionMode, PrecisionMode::stochastic_rounding>{});
        }
        break;
      case PrecisionMode::no_master:
        break;
    }
    return fn(kind_tag, std::integral_constant<PrecisionMode, PrecisionMode::no_master>{});
  };
  switch (kind) {
    case OptimizerKind::adamw:
      return with_kind(std::integral_constant<OptimizerKind, OptimizerKind::adamw>{});
    case OptimizerKind::sgd:
      return with_kind(std::integral_constant<OptimizerKind, OptimizerKind::sgd>{});
    case OptimizerKind::adam:
      break;
  }
  return with_kind(std::integral_constant<OptimizerKind, OptimizerKind::adam>{});
}

}  // namespace seqbench::trainer::detail
