// Packed<T, N>: N elements of T moved as one aligned vector access (16 bytes for the default N),
// so every kernel gets 16-byte loads and stores without float4/half2 special cases.
//
//   using P = Packed<T>;                        // 16 bytes: 4 floats or 8 halves/bfloat16s
//   P p = P::load(ptr + i);                     // ptr + i must be 16-byte aligned
//   for (int k = 0; k < P::kSize; ++k) acc += to_float(p.v[k]);
//   p.store(out + i);
//
// Launchers decide whether a row is vectorizable (pointer alignment and row length divisible by
// kSize) and otherwise use the scalar path; kernels handle the tail after the last whole vector.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "core/dtype.h"

// The simt build (tests/simt/simt.h) defines this to report a misaligned vector access, on which
// the device faults; everywhere else it is nothing.
#ifndef SEQBENCH_CHECK_VECTOR_ACCESS
#define SEQBENCH_CHECK_VECTOR_ACCESS(ptr, bytes)
#endif

namespace seqbench::kernels {

inline constexpr int kVectorBytes = 16;

template <class T, int N = kVectorBytes / static_cast<int>(sizeof(T))>
struct alignas(sizeof(T) * N) Packed {
  static constexpr int kSize = N;
  T v[N];

  SEQBENCH_HD static Packed load(const T* ptr) {
    SEQBENCH_CHECK_VECTOR_ACCESS(ptr, sizeof(Packed));
    return *reinterpret_cast<const Packed*>(ptr);
  }
  SEQBENCH_HD void store(T* ptr) const {
    SEQBENCH_CHECK_VECTOR_ACCESS(ptr, sizeof(Packed));
    *reinterpret_cast<Packed*>(ptr) = *this;
  }
};

// A Packed vector's N elements as floats. In bfloat16 a pair of elements shares a 32-bit word,
// and each conversion is only a move of 16 bits into a float's high half: the even element is
// the word shifted left by 16 and the odd one the word with its low half cleared, one
// instruction each (SASS: IMAD.SHL or SHF, LOP3). Element by element through __bfloat162float,
// nvcc 13.0 (sm_90) first extracted the odd element (PRMT) and then shifted it, so a word cost
// three instructions instead of two. The same bits either way (the conversion is exact).
template <class T, int N>
SEQBENCH_HD inline void unpack_floats(const Packed<T, N>& packed, float (&v)[N]) {
  if constexpr (std::is_same_v<T, __nv_bfloat16> && N % 2 == 0) {
    std::uint32_t words[N / 2];
    std::memcpy(words, packed.v, sizeof words);
    SEQBENCH_DEVICE_UNROLL
    for (int i = 0; i < N / 2; ++i) {
      const std::uint32_t even = words[i] << 16;
      const std::uint32_t odd = words[i] & 0xffff0000u;
      std::memcpy(&v[2 * i], &even, sizeof even);
      std::memcpy(&v[2 * i + 1], &odd, sizeof odd);
    }
  } else {
    SEQBENCH_DEVICE_UNROLL
    for (int k = 0; k < N; ++k) v[k] = to_float(packed.v[k]);
  }
}

// K elements to float: one K-element Packed load when `whole`, else `count` scalar loads (the rest
// 0). No __restrict__ here: whether a load may take the read-only path is the calling kernel's
// choice, made by how it declares the pointer (row_tile_kernel's in-place instance must not).
// Host-and-device, so that CPU tests can run a kernel's per-thread body on host memory.
template <class T, int K>
SEQBENCH_HD inline void load_floats(const T* src, float (&v)[K], int count, bool whole) {
  if (whole) {
    unpack_floats(Packed<T, K>::load(src), v);
  } else {
    SEQBENCH_DEVICE_UNROLL
    for (int k = 0; k < K; ++k) v[k] = k < count ? to_float(src[k]) : 0.0f;
  }
}

// The K floats to T: one Packed store when `whole`, else the first `count` element by element.
template <class T, int K>
SEQBENCH_HD inline void store_floats(T* dst, const float (&v)[K], int count, bool whole) {
  if (whole) {
    Packed<T, K> packed;
    SEQBENCH_DEVICE_UNROLL
    for (int k = 0; k < K; ++k) packed.v[k] = from_float<T>(v[k]);
    packed.store(dst);
  } else {
    SEQBENCH_DEVICE_UNROLL
    for (int k = 0; k < K; ++k) {
      if (k < count) dst[k] = from_float<T>(v[k]);
    }
  }
}

// True when `ptr` can be accessed as Packed<T> vectors (16-byte aligned).
inline bool is_vector_aligned(const void* ptr) {
  return reinterpret_cast<std::uintptr_t>(ptr) % kVectorBytes == 0;
}

// The same for an optional operand: an absent one (nullptr) never blocks the vector path.
inline bool is_vector_aligned_or_null(const void* ptr) {
  return ptr == nullptr || is_vector_aligned(ptr);
}

}  // namespace seqbench::kernels
