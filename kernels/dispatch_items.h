// dispatch_items: turns a run-time "items per thread" (a power of two) into a compile-time
// constant, so register-resident row kernels (LayerNorm, softmax) keep their per-thread arrays
// indexed by constants only, and so in registers rather than local memory.
#pragma once

#include <type_traits>

#include "core/error.h"

namespace seqbench::kernels {

// Calls fn(std::integral_constant<int, kItems>) for kItems == items, one of 1, 2, 4, …, 32, when
// kItems * kVec <= kMaxElems; only those instantiations are compiled. Any other count is a
// planning bug and throws, naming `family`.
template <int kVec, int kMaxElems, class Fn>
void dispatch_items(int items, const char* family, Fn&& fn) {
  switch (items) {
    case 1:
      if constexpr (kVec <= kMaxElems) return fn(std::integral_constant<int, 1>{});
      break;
    case 2:
      if constexpr (2 * kVec <= kMaxElems) return fn(std::integral_constant<int, 2>{});
      break;
    case 4:
      if constexpr (4 * kVec <= kMaxElems) return fn(std::integral_constant<int, 4>{});
      break;
    case 8:
      if constexpr (8 * kVec <= kMaxElems) return fn(std::integral_constant<int, 8>{});
      break;
    case 16:
      if constexpr (16 * kVec <= kMaxElems) return fn(std::integral_constant<int, 16>{});
      break;
    case 32:
      if constexpr (32 * kVec <= kMaxElems) return fn(std::integral_constant<int, 32>{});
      break;
    default:
      break;
  }
  SEQBENCH_FAIL(family << ": no kernel for " << items << " vectors of " << kVec << " per thread");
}

}  // namespace seqbench::kernels
