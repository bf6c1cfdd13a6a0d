// Warp and block reductions in float, and the "team" abstraction, shared by the row-wise kernels
// (LayerNorm, softmax, cross-entropy). Device-only: include from .cu files.
//
// block_reduce_* require every thread of the block to call them (they use __syncthreads) and a
// block size that is a multiple of 32, at most 1024. The result is returned to every thread.
#pragma once

#include <cuda_runtime.h>

#include <cmath>

namespace seqbench::kernels {

__device__ __forceinline__ float warp_reduce_sum(float value) {
  for (int offset = 16; offset > 0; offset >>= 1) value += __shfl_xor_sync(0xffffffffu, value, offset);
  return value;
}

// max(a, b) that returns NaN when either is NaN. fmaxf returns the other operand instead, so a
// row max taken with it skips NaN: a softmax row whose scores are all NaN would pass for fully
// masked (max -inf) and come out as zeros, hiding the NaN. For finite and infinite operands it
// equals fmaxf exactly.
__device__ __forceinline__ float max_propagate_nan(float a, float b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  float r;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
#else
  return isnan(a) ? a : isnan(b) ? b : fmaxf(a, b);
#endif
}

// The max over the warp's values; NaN if any is NaN.
__device__ __forceinline__ float warp_reduce_max(float value) {
  for (int offset = 16; offset > 0; offset >>= 1)
    value = max_propagate_nan(value, __shfl_xor_sync(0xffffffffu, value, offset));
  return value;
}

namespace reduce_detail {
template <class Op>
__device__ __forceinline__ float block_reduce(float value, float identity, Op warp_op) {
  __shared__ float partial[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  value = warp_op(value);
  __syncthreads();  // `partial` may still be read by a previous call
  if (lane == 0) partial[warp] = value;
  __syncthreads();
  const int warps = static_cast<int>(blockDim.x + 31) / 32;
  value = lane < warps ? partial[lane] : identity;
  return warp_op(value);
}
}  // namespace reduce_detail

__device__ __forceinline__ float block_reduce_sum(float value) {
  return reduce_detail::block_reduce(value, 0.0f, [](float v) { return warp_reduce_sum(v); });
}

// NaN if any thread's value is NaN (warp_reduce_max).
__device__ __forceinline__ float block_reduce_max(float value) {
  return reduce_detail::block_reduce(value, -INFINITY, [](float v) { return warp_reduce_max(v); });
}

// Teams: the threads that share one row. A warp team is one warp (a block holds several rows); a
// block team is the whole block (one row). Warp teams reduce with shuffles only (no barrier: a
// warp may leave early); block teams add one shared-memory exchange (every thread of the block
// must call).
inline constexpr int kWarp = 32;

template <bool kWarpTeam>
struct Team {
  __device__ static int size() { return kWarpTeam ? kWarp : static_cast<int>(blockDim.x); }
  __device__ static int lane() {
    return kWarpTeam ? static_cast<int>(threadIdx.x) % kWarp : static_cast<int>(threadIdx.x);
  }
  __device__ static int index() { return kWarpTeam ? static_cast<int>(threadIdx.x) / kWarp : 0; }
  __device__ static int per_block() { return kWarpTeam ? static_cast<int>(blockDim.x) / kWarp : 1; }
};

template <bool kWarpTeam>
__device__ __forceinline__ float team_max(float v) {
  if constexpr (kWarpTeam)
    return warp_reduce_max(v);
  else
    return block_reduce_max(v);
}

template <bool kWarpTeam>
__device__ __forceinline__ float team_sum(float v) {
  if constexpr (kWarpTeam)
    return warp_reduce_sum(v);
  else
    return block_reduce_sum(v);
}

}  // namespace seqbench::kernels
