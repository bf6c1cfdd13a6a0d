// One thread's online log-sum-exp, the accumulator of the fused cross-entropy forward
// (kernels/cross_entropy.cu). Host-and-device, so that the CPU tests run the very code the kernel
// runs (tests/kernels/online_lse_test.cpp).
#pragma once

#include <cmath>

#include "core/dtype.h"  // SEQBENCH_HD, SEQBENCH_DEVICE_UNROLL

namespace seqbench::kernels {

inline constexpr float kLog2e = 1.4426950408889634f;
inline constexpr float kLn2 = 0.6931471805599453f;

// Over the values absorbed so far: m = max, m2 = fl(m·log2 e), s = Σ 2^(x·log2 e - m2), sx = Σ x;
// then lse = (m2 + log2 s)·ln 2. A chunk that raises the max rescales s once (2^(-inf) = 0
// rescales the empty start). While the max is still -inf (every value so far -inf, e.g. masked
// vocabulary entries) each term is 2^(-inf) = 0: the exponent is then taken against 0, since
// -inf - (-inf) would be NaN and would poison s for the rest of the row.
// lse = (m2 + log2 s)·ln 2 from a state's m2 = fl(m·log2 e) and s = Σ 2^(x·log2 e - m2).
SEQBENCH_HD inline float online_lse_value(float m2, float s) {
  return (m2 + log2f(s)) * kLn2;
}

struct OnlineLse {
  float m = -INFINITY;
  float m2 = -INFINITY;
  float s = 0.0f;
  float sx = 0.0f;

  template <int K>
  SEQBENCH_HD void absorb(const float (&v)[K]) {
    float cm = m;
    SEQBENCH_DEVICE_UNROLL
    for (int k = 0; k < K; ++k) cm = fmaxf(cm, v[k]);
    if (cm > m) {
      const float cm2 = cm * kLog2e;
      s *= exp2f(m2 - cm2);
      m = cm;
      m2 = cm2;
    }
    const float ref = m2 == -INFINITY ? 0.0f : m2;
    SEQBENCH_DEVICE_UNROLL
    for (int k = 0; k < K; ++k) {
      s += exp2f(fmaf(v[k], kLog2e, -ref));
      sx += v[k];
    }
  }

  // The log-sum-exp of what was absorbed (online_lse_value, as the kernel forms it from a team's
  // merged state).
  SEQBENCH_HD float lse() const;
};

SEQBENCH_HD inline float OnlineLse::lse() const {
  return online_lse_value(m2, s);
}

}  // namespace seqbench::kernels
