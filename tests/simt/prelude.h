// The CUDA language on the host, for the simt build (tests/simt/simt.h): force-included (-include)
// before every source of a simt target, after the CUDA headers, so that the kernels compile as C++.
//
// Execution-space qualifiers vanish, `__shared__` becomes `static` (one block runs at a time, so a
// function-local static is exactly one block's shared variable), the built-in variables read the
// running fiber's state, and the intrinsics the kernels use are written here with the device's
// semantics (barriers and warp collectives through the scheduler). An intrinsic that is missing
// here fails the simt build by name, which is where to add it.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "tests/simt/simt.h"

// kernels/packed.h's hook: a misaligned vector access faults, as on the device.
#define SEQBENCH_CHECK_VECTOR_ACCESS(ptr, bytes) ::simt::check_vector_access(ptr, bytes)

// Our own sources say __CUDACC__ where they mean "compiled as device code"; rewrite.py renames it.
#define SEQBENCH_SIMT_CUDACC 1

#undef __global__
#undef __device__
#undef __host__
#undef __shared__
#undef __constant__
#undef __forceinline__
#undef __noinline__
#undef __launch_bounds__
#undef __maxnreg__
#undef __grid_constant__
#define __global__
#define __device__
#define __host__
#define __shared__ static
#define __constant__
#define __forceinline__ inline
#define __noinline__
#define __launch_bounds__(...)
#define __maxnreg__(...)
#define __grid_constant__

#define threadIdx (::simt::detail::g_thread->thread_idx)
#define blockIdx (::simt::detail::g_launch->block_idx)
#define blockDim (::simt::detail::g_launch->block_dim)
#define gridDim (::simt::detail::g_launch->grid_dim)
#define warpSize 32

namespace simt::prelude_detail {
inline unsigned lane() {
  return ::simt::detail::g_thread->lane;
}
inline void check_width(int width) {
  if (width <= 0 || width > 32 || (width & (width - 1)) != 0)
    ::simt::detail::fault("shuffle width " + std::to_string(width) + " is not a power of two in [1, 32]");
}
}  // namespace simt::prelude_detail

// Barriers and warp collectives.
inline void __syncthreads() {
  ::simt::detail::block_barrier(0);
}
inline int __syncthreads_or(int predicate) {
  return ::simt::detail::block_barrier(predicate) != 0;
}
inline int __syncthreads_count(int predicate) {
  return static_cast<int>(::simt::detail::block_barrier(predicate));
}
inline void __syncwarp(unsigned mask = 0xffffffffu) {
  ::simt::detail::warp_exchange(mask, &mask, sizeof mask, 0, nullptr);
}
inline unsigned __ballot_sync(unsigned mask, int predicate) {
  return ::simt::detail::warp_ballot(mask, predicate);
}
inline int __all_sync(unsigned mask, int predicate) {
  return ::simt::detail::warp_ballot(mask, predicate) == mask;
}
inline int __any_sync(unsigned mask, int predicate) {
  return ::simt::detail::warp_ballot(mask, predicate) != 0;
}
inline unsigned __activemask() {
  return 0xffffffffu;  // every fiber of a warp runs the same code between barriers
}
template <class T>
T __shfl_sync(unsigned mask, T value, int src_lane, int width = 32) {
  simt::prelude_detail::check_width(width);
  return ::simt::shuffle(mask, value, ::simt::shfl_source_idx(simt::prelude_detail::lane(), src_lane, width));
}
template <class T>
T __shfl_xor_sync(unsigned mask, T value, int lane_mask, int width = 32) {
  simt::prelude_detail::check_width(width);
  return ::simt::shuffle(mask, value,
                         ::simt::shfl_source_xor(simt::prelude_detail::lane(), lane_mask, width));
}
template <class T>
T __shfl_down_sync(unsigned mask, T value, unsigned delta, int width = 32) {
  simt::prelude_detail::check_width(width);
  return ::simt::shuffle(mask, value, ::simt::shfl_source_down(simt::prelude_detail::lane(), delta, width));
}
template <class T>
T __shfl_up_sync(unsigned mask, T value, unsigned delta, int width = 32) {
  simt::prelude_detail::check_width(width);
  return ::simt::shuffle(mask, value, ::simt::shfl_source_up(simt::prelude_detail::lane(), delta, width));
}

// The device's integer and floating min/max, as CUDA's overloads: mixed integer operands meet in
// their common type (int and unsigned give unsigned), float and double take fmin/fmax's NaN rule.
template <class A, class B>
requires std::is_arithmetic_v<A> && std::is_arithmetic_v<B>
auto min(A a, B b) {
  using C = std::common_type_t<A, B>;
  if constexpr (std::is_floating_point_v<C>) {
    return std::fmin(static_cast<C>(a), static_cast<C>(b));
  } else {
    return static_cast<C>(a) < static_cast<C>(b) ? static_cast<C>(a) : static_cast<C>(b);
  }
}
template <class A, class B>
requires std::is_arithmetic_v<A> && std::is_arithmetic_v<B>
auto max(A a, B b) {
  using C = std::common_type_t<A, B>;
  if constexpr (std::is_floating_point_v<C>) {
    return std::fmax(static_cast<C>(a), static_cast<C>(b));
  } else {
    return static_cast<C>(a) < static_cast<C>(b) ? static_cast<C>(b) : static_cast<C>(a);
  }
}

// Memory fences order nothing here: one host thread runs every fiber.
inline void __threadfence() {}
inline void __threadfence_block() {}

// Atomics (the overloads the kernels use): fibers never interleave inside an expression, so a
// plain read-modify-write is atomic. The 16-bit ones add in float and round once, as the
// hardware's red.add.f16/bf16 do; the paired ones need their natural alignment, as on the device.
template <class T>
requires std::is_arithmetic_v<T> T atomicAdd(T* address, T value) {
  const T old = *address;
  *address = old + value;
  return old;
}
namespace simt::prelude_detail {
template <class H>
H add_rounded_once(H a, H b) {
  return H(static_cast<float>(a) + static_cast<float>(b));
}
template <class H>
H atomic_add_16(H* address, H value) {
  const H old = *address;
  *address = add_rounded_once(old, value);
  return old;
}
template <class H2>
H2 atomic_add_pair(H2* address, H2 value) {
  ::simt::check_vector_access(address, sizeof(H2));
  const H2 old = *address;
  address->x = add_rounded_once(old.x, value.x);
  address->y = add_rounded_once(old.y, value.y);
  return old;
}
}  // namespace simt::prelude_detail
template <class T>
requires std::is_integral_v<T> T atomicOr(T* address, T value) {
  const T old = *address;
  *address = old | value;
  return old;
}
inline __half atomicAdd(__half* a, __half v) {
  return simt::prelude_detail::atomic_add_16(a, v);
}
inline __nv_bfloat16 atomicAdd(__nv_bfloat16* a, __nv_bfloat16 v) {
  return simt::prelude_detail::atomic_add_16(a, v);
}
inline __half2 atomicAdd(__half2* a, __half2 v) {
  return simt::prelude_detail::atomic_add_pair(a, v);
}
inline __nv_bfloat162 atomicAdd(__nv_bfloat162* a, __nv_bfloat162 v) {
  return simt::prelude_detail::atomic_add_pair(a, v);
}

// Loads through the read-only and streaming paths are plain loads.
template <class T>
T __ldg(const T* p) {
  return *p;
}
template <class T>
T __ldcs(const T* p) {
  return *p;
}
template <class T>
T __ldcg(const T* p) {
  return *p;
}
template <class T>
void __stcs(T* p, T v) {
  *p = v;
}
template <class T>
void __stcg(T* p, T v) {
  *p = v;
}

// Arithmetic intrinsics: the correctly rounded ones are the host's IEEE operations (the simt build
// compiles with -ffp-contract=off), the fast approximations are the host's accurate functions.
inline float __fadd_rn(float a, float b) {
  return a + b;
}
inline float __fsub_rn(float a, float b) {
  return a - b;
}
inline float __fmul_rn(float a, float b) {
  return a * b;
}
inline float __fdiv_rn(float a, float b) {
  return a / b;
}
inline float __fsqrt_rn(float a) {
  return std::sqrt(a);
}
inline float __frcp_rn(float a) {
  return 1.0f / a;
}
inline float __fmaf_rn(float a, float b, float c) {
  return std::fma(a, b, c);
}
inline double __dadd_rn(double a, double b) {
  return a + b;
}
inline double __dmul_rn(double a, double b) {
  return a * b;
}
inline float __fdividef(float a, float b) {
  return a / b;
}
inline float __expf(float a) {
  return std::exp(a);
}
inline float __exp10f(float a) {
  return std::pow(10.0f, a);
}
inline float __logf(float a) {
  return std::log(a);
}
inline float __log2f(float a) {
  return std::log2(a);
}
inline float __powf(float a, float b) {
  return std::pow(a, b);
}
inline float __tanhf(float a) {
  return std::tanh(a);
}
inline float __sinf(float a) {
  return std::sin(a);
}
inline float __cosf(float a) {
  return std::cos(a);
}
inline float __saturatef(float a) {
  return std::isnan(a) ? 0.0f : a < 0.0f ? 0.0f : a > 1.0f ? 1.0f : a;
}
inline float rsqrtf(float a) {
  return 1.0f / std::sqrt(a);
}
inline double rsqrt(double a) {
  return 1.0 / std::sqrt(a);
}
inline float __int_as_float(int v) {
  return std::bit_cast<float>(v);
}
inline int __float_as_int(float v) {
  return std::bit_cast<int>(v);
}
inline float __uint_as_float(unsigned v) {
  return std::bit_cast<float>(v);
}
inline unsigned __float_as_uint(float v) {
  return std::bit_cast<unsigned>(v);
}
inline long long __double_as_longlong(double v) {
  return std::bit_cast<long long>(v);
}
inline double __longlong_as_double(long long v) {
  return std::bit_cast<double>(v);
}
inline int __popc(unsigned v) {
  return std::popcount(v);
}
inline int __popcll(unsigned long long v) {
  return std::popcount(v);
}
inline int __clz(int v) {
  return std::countl_zero(static_cast<unsigned>(v));
}
inline int __clzll(long long v) {
  return std::countl_zero(static_cast<unsigned long long>(v));
}
inline int __ffs(int v) {
  return v == 0 ? 0 : std::countr_zero(static_cast<unsigned>(v)) + 1;
}
inline unsigned __brev(unsigned v) {
  unsigned r = 0;
  for (int i = 0; i < 32; ++i) r |= ((v >> i) & 1u) << (31 - i);
  return r;
}
inline unsigned __umulhi(unsigned a, unsigned b) {
  return static_cast<unsigned>((static_cast<unsigned long long>(a) * b) >> 32);
}
inline unsigned long long __umul64hi(unsigned long long a, unsigned long long b) {
  return static_cast<unsigned long long>((static_cast<unsigned __int128>(a) * b) >> 64);
}
inline int __float2int_rn(float v) {
  return static_cast<int>(std::nearbyint(v));
}
inline int __float2int_rz(float v) {
  return static_cast<int>(v);
}
inline unsigned __float2uint_rn(float v) {
  return static_cast<unsigned>(std::nearbyint(v));
}
inline unsigned __float2uint_rz(float v) {
  return static_cast<unsigned>(v);
}
