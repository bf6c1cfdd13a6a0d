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

// K elements to float: one K-element Packed load when `whole`, else `count` scalar loads (the rest
// 0). No __restrict__ here: whether a load may take the read-only path is the calling kernel's
// choice, made by how it declares the pointer (row_tile_kernel's in-place instance must not).
// Host-and-device, so that CPU tests can run a kernel's per-thread body on host memory.
template <class T, int K>
SEQBENCH_HD inline void load_floats(const T* src, float (&v)[K], int count, bool whole) {
  if (whole) {
    const Packed<T, K> packed = Packed<T, K>::load(src);
    SEQBENCH_DEVICE_UNROLL
    for (int k = 0; k < K; ++k) v[k] = to_float(packed.v[k]);
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
