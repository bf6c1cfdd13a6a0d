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

namespace seqbench::kernels {

inline constexpr int kVectorBytes = 16;

template <class T, int N = kVectorBytes / static_cast<int>(sizeof(T))>
struct alignas(sizeof(T) * N) Packed {
  static constexpr int kSize = N;
  T v[N];

  SEQBENCH_HD static Packed load(const T* ptr) { return *reinterpret_cast<const Packed*>(ptr); }
  SEQBENCH_HD void store(T* ptr) const { *reinterpret_cast<Packed*>(ptr) = *this; }
};

// True when `ptr` can be accessed as Packed<T> vectors.
template <class T>
inline bool is_vector_aligned(const T* ptr) {
  return reinterpret_cast<std::uintptr_t>(ptr) % kVectorBytes == 0;
}

}  // namespace seqbench::kernels
