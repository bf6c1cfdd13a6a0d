// atomic_add_vector: adds one 16-byte vector of values into global memory, atomically element by
// element (each element's read-modify-write is atomic, as atomicAdd's; the vector as a whole is
// not, and nothing here promises more). Device-only: include from .cu files.
//
//   float v[Packed<T>::kSize] = ...;        // 4 floats, or 8 values bound for halves/bfloat16s
//   atomic_add_vector<T>(dst, v);           // dst: global memory, 16-byte aligned
//
// Why: on sm_90 one red.global.add.v4 instruction a lane does the whole vector (SASS, nvcc 13.0:
// REDG.E.ADD.F32x4, .F16x8, .BF16x8), where atomicAdd on __half2 / __nv_bfloat162 pairs gives
// four ATOM.E.ADD.*x2 a vector, each followed by a branch on the address space (a generic address
// may be shared memory, which these pair atomics emulate with a CAS loop), and atomicAdd on float
// gives four REDs. A warp's vector reduction covers 512 contiguous bytes in one L2 request stream
// instead of four interleaved ones of 4 bytes a lane.
//
// The values are rounded to T as atomicAdd's operands are (round to nearest even), and the
// addition rounds as atomicAdd's does: .noftz for the 16-bit types, flush-to-zero for float (the
// scalar float red on global memory flushes as well). Below sm_90, and in the simt build, the same
// adds run as the pair (16-bit) or scalar (float) atomicAdds; the simt build still reports a
// misaligned vector, on which the device faults.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/packed.h"

namespace seqbench::kernels {

namespace vector_atomic_detail {
// Two values rounded to T's pair type (__half2 or __nv_bfloat162), round to nearest even.
template <class T>
__device__ __forceinline__ auto to_pair(float lo, float hi) {
  if constexpr (std::is_same_v<T, __half>) {
    return __floats2half2_rn(lo, hi);
  } else {
    return __floats2bfloat162_rn(lo, hi);
  }
}

// The same pair as the bits of one 32-bit register (the operand of the PTX vector reduction).
template <class T>
__device__ __forceinline__ std::uint32_t pair_bits(float lo, float hi) {
  const auto pair = to_pair<T>(lo, hi);
  std::uint32_t bits;
  memcpy(&bits, &pair, sizeof bits);
  return bits;
}
}  // namespace vector_atomic_detail

template <class T>
__device__ __forceinline__ void atomic_add_vector(T* dst, const float (&v)[Packed<T>::kSize]) {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>,
                "atomic_add_vector: float, __half or __nv_bfloat16");
  SEQBENCH_CHECK_VECTOR_ACCESS(dst, kVectorBytes);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if constexpr (std::is_same_v<T, float>) {
    atomicAdd(reinterpret_cast<float4*>(dst), make_float4(v[0], v[1], v[2], v[3]));
  } else {
    using vector_atomic_detail::pair_bits;
    const std::uint32_t w0 = pair_bits<T>(v[0], v[1]), w1 = pair_bits<T>(v[2], v[3]);
    const std::uint32_t w2 = pair_bits<T>(v[4], v[5]), w3 = pair_bits<T>(v[6], v[7]);
    const auto address = __cvta_generic_to_global(dst);
    if constexpr (std::is_same_v<T, __half>) {
      asm volatile("red.global.add.noftz.v4.f16x2 [%0], {%1, %2, %3, %4};" ::"l"(address), "r"(w0), "r"(w1),
                   "r"(w2), "r"(w3)
                   : "memory");
    } else {
      asm volatile("red.global.add.noftz.v4.bf16x2 [%0], {%1, %2, %3, %4};" ::"l"(address), "r"(w0), "r"(w1),
                   "r"(w2), "r"(w3)
                   : "memory");
    }
  }
#else
  if constexpr (std::is_same_v<T, float>) {
#pragma unroll
    for (int k = 0; k < 4; ++k) atomicAdd(dst + k, v[k]);
  } else {
    using Pair = decltype(vector_atomic_detail::to_pair<T>(0.0f, 0.0f));
    auto* pairs = reinterpret_cast<Pair*>(dst);
#pragma unroll
    for (int k = 0; k < 4; ++k)
      atomicAdd(pairs + k, vector_atomic_detail::to_pair<T>(v[2 * k], v[2 * k + 1]));
  }
#endif
}

}  // namespace seqbench::kernels
