// Byte ranges of host or device memory: the overlap test every launcher and layer uses to refuse
// aliased arguments.
#pragma once

#include <cstddef>
#include <cstdint>

namespace seqbench {

// Whether [a, a + a_bytes) and [b, b + b_bytes) share a byte; false when either is null or empty.
inline bool bytes_overlap(const void* a, std::size_t a_bytes, const void* b, std::size_t b_bytes) {
  if (a == nullptr || b == nullptr || a_bytes == 0 || b_bytes == 0) return false;
  const auto pa = reinterpret_cast<std::uintptr_t>(a), pb = reinterpret_cast<std::uintptr_t>(b);
  return pa < pb + b_bytes && pb < pa + a_bytes;
}

}  // namespace seqbench
