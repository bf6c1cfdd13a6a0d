// The three element types seqbench computes in, their traits, and host/device conversions.
//
// Kernels are written once as templates over T in {float, __half, __nv_bfloat16} and always
// accumulate in float: load with to_float<T>(), compute, store with from_float<T>().
// unit_roundoff() is the value tests derive their tolerances from: 2^-(p) for a format with p
// significand bits (23+1 for fp32, 10+1 for fp16, 7+1 for bf16), i.e. half an ulp at 1.0.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstddef>
#include <string>
#include <string_view>
#include <type_traits>

#if defined(__CUDACC__)
#define SEQBENCH_HD __host__ __device__
#else
#define SEQBENCH_HD
#endif

// `#pragma unroll` for the device pass only: SEQBENCH_HD functions are also compiled for the
// host, whose compiler does not know the pragma (and -Wall warns about it).
#if defined(__CUDA_ARCH__)
#define SEQBENCH_DEVICE_UNROLL _Pragma("unroll")
#else
#define SEQBENCH_DEVICE_UNROLL
#endif

namespace seqbench {

enum class DType { f32, f16, bf16 };

template <class T>
struct DTypeTraits;

template <>
struct DTypeTraits<float> {
  static constexpr DType dtype = DType::f32;
  static constexpr const char* name = "f32";
  static constexpr int significand_bits = 24;  // including the implicit bit
};
template <>
struct DTypeTraits<__half> {
  static constexpr DType dtype = DType::f16;
  static constexpr const char* name = "f16";
  static constexpr int significand_bits = 11;
};
template <>
struct DTypeTraits<__nv_bfloat16> {
  static constexpr DType dtype = DType::bf16;
  static constexpr const char* name = "bf16";
  static constexpr int significand_bits = 8;
};

// Whether a double stays finite when it is rounded to float: a double rounds to +-inf as a float
// from the midpoint (2 - 2^-24)·2^127 between FLT_MAX and 2^128 on (ties to even). Test before a
// cast, which is undefined beyond float's range. NaN is not finite.
SEQBENCH_HD constexpr bool rounds_to_finite_float(double x) {
  return x < 0x1.ffffffp+127 && x > -0x1.ffffffp+127;
}

std::string_view dtype_name(DType dtype);
std::size_t dtype_size(DType dtype);
int dtype_significand_bits(DType dtype);
// Half an ulp at 1.0: the relative error of one rounding to this format.
double unit_roundoff(DType dtype);
// Parses "f32"/"fp32"/"float32", "f16"/"fp16"/"half", "bf16"/"bfloat16"; throws seqbench::Error
// naming the value and the accepted spellings otherwise.
DType parse_dtype(std::string_view text);

template <class T>
SEQBENCH_HD inline float to_float(T value);
template <>
SEQBENCH_HD inline float to_float<float>(float value) {
  return value;
}
template <>
SEQBENCH_HD inline float to_float<__half>(__half value) {
  return __half2float(value);
}
template <>
SEQBENCH_HD inline float to_float<__nv_bfloat16>(__nv_bfloat16 value) {
  return __bfloat162float(value);
}

// Round to nearest even, as the hardware conversion instructions do.
template <class T>
SEQBENCH_HD inline T from_float(float value);
template <>
SEQBENCH_HD inline float from_float<float>(float value) {
  return value;
}
template <>
SEQBENCH_HD inline __half from_float<__half>(float value) {
  return __float2half_rn(value);
}
template <>
SEQBENCH_HD inline __nv_bfloat16 from_float<__nv_bfloat16>(float value) {
  return __float2bfloat16_rn(value);
}

// Calls fn(T{}) with T the C++ type of `dtype`, so that one generic lambda serves all three.
template <class Fn>
decltype(auto) dispatch_dtype(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::f16:
      return fn(__half{});
    case DType::bf16:
      return fn(__nv_bfloat16{});
    case DType::f32:
      break;
  }
  return fn(float{});
}

}  // namespace seqbench
