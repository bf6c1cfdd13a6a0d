// The two GELUs and their derivatives in float, in few instructions, for the bias + activation
// kernels (kernels/bias_act_dropout.cu). Semantics: reference/bias_act_dropout.h (double).
//
// Why not erff/tanhf/expf: a 16-bit bias_act_dropout element affords about 31 issued
// instructions on an H200 at its copy rate (kernels/NOTES-dropout-bias.md, "Instruction issue"),
// and the library functions spent 28-31 on the erf GELU alone (two coefficient sets chosen by
// FSEL per element, plus their constants re-materialized in a register-bound loop) and 40+ on
// its derivative. These forms use straight-line FFMA chains with immediate coefficients and two
// or three MUFU operations (rcp.approx, ex2.approx). SASS (nvcc 13.0, sm_90, bf16 with dropout,
// tools/issue_budget.py), instructions an element of the fused kernels before -> after: erf
// forward 50.2 -> 36.8, erf backward 66.2 -> 42.9, tanh forward 43.9 -> 25.4, tanh backward
// 55.8 -> 36.0 (ReLU: 19.3 and 23.6).
//
//   tanh GELU   0.5 z (1 + tanh u) = z / (1 + e^(-2u)),  u = √(2/π)(z + 0.044715 z³)
//               (the same function, rewritten: no cancellation in 1 + tanh u for z < 0);
//               d/dz = σ + z σ (1 - σ) v',  σ = 1 / (1 + e^(-v)), v = 2u, 1 - σ = e^(-v) σ.
//   erf GELU    z Φ(z), Φ(z) = 1 - h (z >= 0) or h (z < 0), h = Φ(-|z|) = erfc(t)/2, t = |z|/√2,
//               h = τ 2^(P(τ) - s²), τ = 1 / (1 + κ t), s² = t² log2 e, P a degree-8
//               polynomial fitted by tools/fit_gelu_erf.py (its --check compares this file);
//               d/dz = Φ + z φ(z), φ(z) = 2^(log2(1/√(2π)) - s²).
//
// Accuracy (tests/kernels/gelu_test.cpp: every 2048th float in [-16, 16], rcp and ex2 exact or
// off by up to their documented errors, 1 and 2 ulp, in every combination, also with successive
// ex2 calls off in opposite directions; the worst figures here are from a denser run, every 97th
// float): both forwards within 2.5 u_f32 (1 + |z|), both derivatives within 7.5 u_f32 (1 + |z|)²;
// the test holds them to 4 and 10, against the operator checks' 16 and 32
// (suites/operators/bias_act_dropout.cu). The library forms measure about 1.3 u (1 + |z|) forward:
// in absolute terms the same class. In the erf GELU's tail (z < 0) the relative error stays
// within (16 + 2 z²) u_f32 (held to 20 + 2 z²) down to z = -12.95, where h leaves the normal
// floats; the 2 z² is the rounding of s = |z| kErfS and of s², which e^(-z²/2) amplifies by z².
// erff's form, 0.5 z (1 + erff(z/√2)), cancels there: 4 % off at z = -5, 57 % at -5.5, exactly
// 0 below -5.54 (host erff).
//
// Non-finite inputs give the reference's values: NaN -> NaN; +inf -> +inf forward, NaN
// derivative; -inf -> NaN forward (-inf · 0) and NaN derivative. Finite z of any size give finite
// results (the tails underflow to 0 or saturate to z, as the reference's do).
#pragma once

#include <cmath>

#include "core/dtype.h"  // SEQBENCH_HD

namespace seqbench::kernels {

// The approximate MUFU operations: one instruction each on the device. The host versions (the
// simt build, the cpu tests) are the exact functions; the tests bound the difference.
struct HardwareApprox {
  SEQBENCH_HD static float rcp(float x) {
#if defined(__CUDA_ARCH__)
    float r;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
    return r;
#else
    return 1.0f / x;
#endif
  }
  SEQBENCH_HD static float exp2(float x) {
#if defined(__CUDA_ARCH__)
    float r;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
    return r;
#else
    return std::exp2(x);
#endif
  }
};

namespace gelu_detail {
constexpr double kLog2E = 1.4426950408889634074;
constexpr double kSqrt2OverPi = 0.79788456080286535588;  // √(2/π)
constexpr double kTanhCoeff = 0.044715;
// tanh form, in log2 units: e^(-v) = 2^(z (kTanhA1 + kTanhA3 z²)).
constexpr float kTanhA1 = static_cast<float>(-2.0 * kSqrt2OverPi * kLog2E);
constexpr float kTanhA3 = static_cast<float>(-2.0 * kSqrt2OverPi * kTanhCoeff * kLog2E);
// v'(z) = kTanhV1 + kTanhV3 z².
constexpr float kTanhV1 = static_cast<float>(2.0 * kSqrt2OverPi);
constexpr float kTanhV3 = static_cast<float>(2.0 * kSqrt2OverPi * 3.0 * kTanhCoeff);
// erf form: s = |z| kErfS (s² = z²/2 log2 e), 1 + κ t = 1 + s kErfKappaS.
constexpr double kSqrtLog2E = 1.2011224087864498;                             // √(log2 e)
constexpr float kErfS = static_cast<float>(kSqrtLog2E / 1.4142135623730951);  // √(log2(e) / 2)
constexpr double kGeluErfKappa = 0.38;                                        // κ, the fit's
constexpr float kErfKappaS = static_cast<float>(kGeluErfKappa / kSqrtLog2E);  // κ / √(log2 e)
constexpr float kLog2InvSqrt2Pi = -1.3257480647361593991f;                    // log2(1/√(2π))
// P(τ) = Σ kGeluErfP<k> τ^k, tools/fit_gelu_erf.py: κ 0.38, t in [0, 9.3]; 0.73 u_f32 relative
// in h in exact arithmetic, 4.0 u as evaluated here in float Horner steps. Scalars, not an array:
// a constexpr array is not usable in device code.
constexpr float kGeluErfP0 = -3.222281218e+00f;
constexpr float kGeluErfP1 = 1.454885364e+00f;
constexpr float kGeluErfP2 = 5.120019913e-01f;
constexpr float kGeluErfP3 = 7.801306248e-01f;
constexpr float kGeluErfP4 = -1.431580067e+00f;
constexpr float kGeluErfP5 = 2.712655544e+00f;
constexpr float kGeluErfP6 = -3.179814339e+00f;
constexpr float kGeluErfP7 = 1.728101969e+00f;
constexpr float kGeluErfP8 = -3.540998101e-01f;

// h = Φ(-|z|) and the shared s, in the erf form. The exponent P - s² is formed as -(s² + (-P)),
// with -P from negated immediates (exact): ptxas puts that negation on the MUFU.EX2 operand,
// where for fmaf(s, -s, P) it spent an FMUL an element on -s (seen in the SASS). Same below.
template <class Approx>
SEQBENCH_HD inline float normal_tail(float z, float& s) {
  s = fabsf(z) * kErfS;
  const float tau = Approx::rcp(fmaf(s, kErfKappaS, 1.0f));
  float p = -kGeluErfP8;
  p = fmaf(p, tau, -kGeluErfP7);
  p = fmaf(p, tau, -kGeluErfP6);
  p = fmaf(p, tau, -kGeluErfP5);
  p = fmaf(p, tau, -kGeluErfP4);
  p = fmaf(p, tau, -kGeluErfP3);
  p = fmaf(p, tau, -kGeluErfP2);
  p = fmaf(p, tau, -kGeluErfP1);
  p = fmaf(p, tau, -kGeluErfP0);
  return tau * Approx::exp2(-fmaf(s, s, p));
}

// Φ(z) from h: 1 - h for z >= 0, h otherwise (NaN z gives h, which is NaN).
SEQBENCH_HD inline float normal_cdf_from_tail(float z, float h) {
  return z >= 0.0f ? 1.0f - h : h;
}
}  // namespace gelu_detail

// 0.5 z (1 + erf(z/√2)) = z Φ(z).
template <class Approx = HardwareApprox>
SEQBENCH_HD inline float gelu_erf(float z) {
  float s;
  const float h = gelu_detail::normal_tail<Approx>(z, s);
  return z * gelu_detail::normal_cdf_from_tail(z, h);
}

// d/dz z Φ(z) = Φ(z) + z φ(z).
template <class Approx = HardwareApprox>
SEQBENCH_HD inline float gelu_erf_grad(float z) {
  float s;
  const float h = gelu_detail::normal_tail<Approx>(z, s);
  const float pdf = Approx::exp2(-fmaf(s, s, -gelu_detail::kLog2InvSqrt2Pi));
  return fmaf(z, pdf, gelu_detail::normal_cdf_from_tail(z, h));
}

// 0.5 z (1 + tanh(√(2/π)(z + 0.044715 z³))) = z σ(v).
template <class Approx = HardwareApprox>
SEQBENCH_HD inline float gelu_tanh(float z) {
  using namespace gelu_detail;
  const float e = Approx::exp2(z * fmaf(z * z, kTanhA3, kTanhA1));  // e^(-v)
  return z * Approx::rcp(1.0f + e);
}

// σ + z v'(z) w, w = σ (1 - σ) = σ min(e^(-v) σ, 1). The clamp: where e^(-v) overflows (z below
// about -10.07) σ is 0 and e^(-v) σ is inf · 0, whose limit is 1, so w = 0. The product is
// z (v' w), not (z v') w: w is exactly 0 wherever z v' can overflow, and v' itself is kept
// finite by capping z² at 2^64 (v' grows like z², z v' overflows above |z| of about 1e13). So a
// finite z of any size gives a finite derivative (0 or 1 in the tails, as the reference's), and
// ±inf give NaN (inf · 0), as the reference's formula does.
template <class Approx = HardwareApprox>
SEQBENCH_HD inline float gelu_tanh_grad(float z) {
  using namespace gelu_detail;
  const float z2 = z * z;
  const float e = Approx::exp2(z * fmaf(z2, kTanhA3, kTanhA1));
  const float sigma = Approx::rcp(1.0f + e);
  const float w = fminf(e * sigma, 1.0f) * sigma;
  const float dv = fmaf(fminf(z2, 0x1p64f), kTanhV3, kTanhV1);
  return fmaf(z, dv * w, sigma);
}

}  // namespace seqbench::kernels
