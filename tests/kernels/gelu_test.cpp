// kernels/gelu.h on the host: the four float GELU functions against double references over every
// 2048th float in [-16, 16] (all magnitudes, subnormals included), with the two approximate
// operations exact, or off by their documented errors: rcp by -1, 0 or +1 ulp and ex2 by -2, 0 or
// +2 (the PTX ISA: rcp.approx.f32 within 1 ulp, ex2.approx.f32 within 2 ulp of the correctly
// rounded result), each combination with every call off the same way, and then with successive
// ex2 calls off in opposite directions (the erf derivative's two exponentials). The rest is IEEE
// float arithmetic, the same on the host and the device (the build has --fmad=false and the
// fused multiply-adds are explicit). This does not run the PTX: the operator checks do, on a GPU.
// The bounds in u = u_f32 = 2^-24:
//   forward     |error| <= 4 u (1 + |z|)        (the operator checks allow 16 u (1 + |z|))
//   derivative  |error| <= 10 u (1 + |z|)^2     (the operator checks allow 32 u (1 + |z|)^2)
//   erf forward, z < 0, h normal: relative error <= (20 + 2 z^2) u
// and the non-finite and huge inputs give the reference's values.
#include "kernels/gelu.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numbers>
#include <string>

namespace seqbench::kernels {
namespace {

constexpr double kU = 0x1p-24;
// The worst seen with every 97th float instead of every 2048th: 2.5, 7.5 and 0.88 of (16 + 2 z^2).
constexpr double kFwdBound = 4, kGradBound = 10, kTailBound = 20;

// The device's rcp.approx.ftz and ex2.approx.ftz: the exact result moved by k ulps (results here
// are positive, +0 or +inf; 0 and inf stay put), and flushed to +0 below 2^-126, as .ftz does.
float approx_result(float exact, int k) {
  if (!(exact >= 0x1p-126f) || std::isinf(exact))
    return exact >= 0x1p-126f || std::isnan(exact) ? exact : 0.0f;
  const auto bits = static_cast<std::int64_t>(std::bit_cast<std::uint32_t>(exact)) + k;
  const float moved = std::bit_cast<float>(static_cast<std::uint32_t>(bits));
  return moved >= 0x1p-126f ? moved : 0.0f;
}

template <int R, int E>
struct Perturbed {
  static float rcp(float x) { return approx_result(1.0f / x, R); }
  static float exp2(float x) { return approx_result(std::exp2(x), E); }
};

// ex2 off by +E and -E on alternate calls: within a gelu_erf_grad call its two exponentials (the
// tail's and the density's) are always off in opposite directions, in either order as the sweep
// goes on (each z makes an odd number of ex2 calls).
template <int R, int E>
struct AlternatingExp2 {
  static inline unsigned calls = 0;
  static float rcp(float x) { return approx_result(1.0f / x, R); }
  static float exp2(float x) { return approx_result(std::exp2(x), (calls++ & 1u) != 0 ? -E : E); }
};

// The references in double, in forms without cancellation: Φ(z) = erfc(-z/√2)/2.
double phi_cdf(double z) {
  return 0.5 * std::erfc(-z / std::numbers::sqrt2);
}
double ref_gelu_erf(double z) {
  return z * phi_cdf(z);
}
double ref_gelu_erf_grad(double z) {
  return phi_cdf(z) + z * std::exp(-0.5 * z * z) / std::sqrt(2.0 * std::numbers::pi);
}
constexpr double kSqrt2OverPi = 0.79788456080286535588;
double tanh_v(double z) {
  return 2.0 * kSqrt2OverPi * (z + 0.044715 * z * z * z);
}
double sigmoid(double v) {
  return 1.0 / (1.0 + std::exp(-v));
}
double ref_gelu_tanh(double z) {
  return z * sigmoid(tanh_v(z));
}
double ref_gelu_tanh_grad(double z) {
  const double s = sigmoid(tanh_v(z)), dv = 2.0 * kSqrt2OverPi * (1.0 + 3.0 * 0.044715 * z * z);
  return s + z * s * (1.0 - s) * dv;
}

struct Worst {
  double ratio = 0.0;  // error / bound
  float at = 0.0f;
};

// Every 2048th bit pattern of [-16, 16], both signs, plus ±0.
template <class Fn>
void for_each_sample(Fn&& fn) {
  const std::uint32_t top = std::bit_cast<std::uint32_t>(16.0f);
  for (std::uint32_t bits = 0; bits <= top; bits += 2048) {
    const float z = std::bit_cast<float>(bits);
    fn(z);
    fn(-z);
  }
}

template <class Approx>
void expect_within_bounds(const std::string& where) {
  Worst fwd_erf, grad_erf, fwd_tanh, grad_tanh, tail_erf;
  const auto track = [](Worst& w, double err, double bound, float z) {
    if (!(err <= w.ratio * bound)) {  // also catches NaN errors
      w.ratio = std::isnan(err) ? std::numeric_limits<double>::infinity() : err / bound;
      w.at = z;
    }
  };
  for_each_sample([&](float z) {
    const double zd = z, a = 1.0 + std::fabs(zd);
    track(fwd_erf, std::fabs(gelu_erf<Approx>(z) - ref_gelu_erf(zd)), kFwdBound * kU * a, z);
    track(grad_erf, std::fabs(gelu_erf_grad<Approx>(z) - ref_gelu_erf_grad(zd)), kGradBound * kU * a * a, z);
    track(fwd_tanh, std::fabs(gelu_tanh<Approx>(z) - ref_gelu_tanh(zd)), kFwdBound * kU * a, z);
    track(grad_tanh, std::fabs(gelu_tanh_grad<Approx>(z) - ref_gelu_tanh_grad(zd)), kGradBound * kU * a * a,
          z);
    const double want = ref_gelu_erf(zd);
    if (z < 0.0f && std::fabs(want) >= 0x1p-126 && phi_cdf(zd) >= 0x1p-126)
      track(tail_erf, std::fabs(gelu_erf<Approx>(z) - want) / std::fabs(want),
            (kTailBound + 2 * zd * zd) * kU, z);
  });
  EXPECT_LE(fwd_erf.ratio, 1.0) << where << " gelu_erf, worst at z = " << fwd_erf.at;
  EXPECT_LE(grad_erf.ratio, 1.0) << where << " gelu_erf_grad, worst at z = " << grad_erf.at;
  EXPECT_LE(fwd_tanh.ratio, 1.0) << where << " gelu_tanh, worst at z = " << fwd_tanh.at;
  EXPECT_LE(grad_tanh.ratio, 1.0) << where << " gelu_tanh_grad, worst at z = " << grad_tanh.at;
  EXPECT_LE(tail_erf.ratio, 1.0) << where << " gelu_erf relative in the tail, worst at z = " << tail_erf.at;
  // The sweep's worst, as a fraction of each bound, for the record.
  std::printf("%s: worst/bound  erf fwd %.2f  erf grad %.2f  tanh fwd %.2f  tanh grad %.2f  erf tail %.2f\n",
              where.c_str(), fwd_erf.ratio, grad_erf.ratio, fwd_tanh.ratio, grad_tanh.ratio, tail_erf.ratio);
}

TEST(Gelu, WithinBoundsWithExactApproximations) {
  expect_within_bounds<Perturbed<0, 0>>("rcp +0, ex2 +0");
}

TEST(Gelu, WithinBoundsWithTheApproximationsAtTheirDocumentedErrors) {
  expect_within_bounds<Perturbed<-1, -2>>("rcp -1, ex2 -2");
  expect_within_bounds<Perturbed<-1, 0>>("rcp -1, ex2 +0");
  expect_within_bounds<Perturbed<-1, 2>>("rcp -1, ex2 +2");
  expect_within_bounds<Perturbed<0, -2>>("rcp +0, ex2 -2");
  expect_within_bounds<Perturbed<0, 2>>("rcp +0, ex2 +2");
  expect_within_bounds<Perturbed<1, -2>>("rcp +1, ex2 -2");
  expect_within_bounds<Perturbed<1, 0>>("rcp +1, ex2 +0");
  expect_within_bounds<Perturbed<1, 2>>("rcp +1, ex2 +2");
  expect_within_bounds<AlternatingExp2<-1, 2>>("rcp -1, ex2 +2 then -2");
  expect_within_bounds<AlternatingExp2<1, 2>>("rcp +1, ex2 +2 then -2");
  expect_within_bounds<AlternatingExp2<-1, -2>>("rcp -1, ex2 -2 then +2");
  expect_within_bounds<AlternatingExp2<1, -2>>("rcp +1, ex2 -2 then +2");
}

// The reference's values where the formulas meet infinities: 0.5 z (1 + erf) at ±inf is +inf and
// -inf · 0 = NaN, its derivative Φ + z φ is inf · 0 = NaN at both; the same for the tanh form.
TEST(Gelu, NonFiniteInputsGiveTheReferencesValues) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  for (const auto& [name, fwd, grad] :
       {std::tuple{"erf", &gelu_erf<HardwareApprox>, &gelu_erf_grad<HardwareApprox>},
        std::tuple{"tanh", &gelu_tanh<HardwareApprox>, &gelu_tanh_grad<HardwareApprox>}}) {
    EXPECT_TRUE(std::isnan(fwd(nan))) << name;
    EXPECT_TRUE(std::isnan(grad(nan))) << name;
    EXPECT_EQ(fwd(inf), inf) << name;
    EXPECT_TRUE(std::isnan(fwd(-inf))) << name;
    EXPECT_TRUE(std::isnan(grad(inf))) << name;
    EXPECT_TRUE(std::isnan(grad(-inf))) << name;
    // Huge finite inputs saturate: GELU(z) = z above, 0 below; the derivative 1 and 0.
    for (const float z : {30.0f, 1e10f, 3e38f}) {
      EXPECT_EQ(fwd(z), z) << name << " at " << z;
      EXPECT_EQ(grad(z), 1.0f) << name << " at " << z;
      EXPECT_EQ(fwd(-z), 0.0f) << name << " at " << -z;
      EXPECT_EQ(grad(-z), 0.0f) << name << " at " << -z;
    }
  }
}

// Where erff's form cancels (0.5 z (1 + erff(z/√2)) is 0 below z = -5.54 in float), the tail
// form keeps its relative accuracy: spot values against the double reference.
TEST(Gelu, ErfTailKeepsRelativeAccuracy) {
  for (const float z : {-5.0f, -6.0f, -8.0f, -10.0f, -12.0f}) {
    const double want = ref_gelu_erf(z);
    const double got = gelu_erf<HardwareApprox>(z);
    EXPECT_LE(std::fabs(got - want), (kTailBound + 2.0 * z * z) * kU * std::fabs(want)) << "z = " << z;
  }
}

}  // namespace
}  // namespace seqbench::kernels
