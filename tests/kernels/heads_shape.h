// The QKV reshape tests' (CPU and GPU) shorthand for a packed kernels::HeadsShape:
// shape(batch, len, heads, hidden, projections), projected_ld left 0.
#pragma once

#include <cstdint>

#include "kernels/qkv_reshape.h"

namespace seqbench::kernels::qkv_test {

inline HeadsShape shape(std::int64_t batch, std::int64_t len, std::int64_t heads, std::int64_t hidden,
                        std::int64_t projections) {
  HeadsShape s;
  s.batch = batch;
  s.len = len;
  s.heads = heads;
  s.hidden = hidden;
  s.projections = projections;
  return s;
}

}  // namespace seqbench::kernels::qkv_test
