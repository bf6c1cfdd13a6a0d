#include "core/dtype.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "core/error.h"

namespace seqbench {
namespace {

TEST(DType, NamesSizesAndRoundoff) {
  EXPECT_EQ(dtype_name(DType::f32), "f32");
  EXPECT_EQ(dtype_name(DType::f16), "f16");
  EXPECT_EQ(dtype_name(DType::bf16), "bf16");
  EXPECT_EQ(dtype_size(DType::f32), 4u);
  EXPECT_EQ(dtype_size(DType::f16), 2u);
  EXPECT_EQ(dtype_size(DType::bf16), 2u);
  EXPECT_EQ(unit_roundoff(DType::f32), std::ldexp(1.0, -24));
  EXPECT_EQ(unit_roundoff(DType::f16), std::ldexp(1.0, -11));
  EXPECT_EQ(unit_roundoff(DType::bf16), std::ldexp(1.0, -8));
}

TEST(DType, ParseAcceptsSpellingsAndNamesTheBadValue) {
  EXPECT_EQ(parse_dtype("fp16"), DType::f16);
  EXPECT_EQ(parse_dtype("bfloat16"), DType::bf16);
  EXPECT_EQ(parse_dtype("float32"), DType::f32);
  try {
    parse_dtype("int8");
    FAIL() << "parse_dtype accepted int8";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'int8'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("f32, f16, bf16"), std::string::npos) << e.what();
  }
}

// Every conversion must round to nearest, ties to even, and the relative error of one rounding
// must stay within unit_roundoff() over the normal range.
template <class T>
void check_rounding(DType dtype) {
  const double u = unit_roundoff(dtype);
  for (double x = 1e-3; x < 1e3; x *= 1.0137) {
    for (const double v : {x, -x}) {
      const float f = static_cast<float>(v);
      const double back = to_float(from_float<T>(f));
      EXPECT_LE(std::abs(back - f), u * std::abs(f)) << dtype_name(dtype) << " at " << f;
    }
  }
}

TEST(DType, RoundTripErrorWithinUnitRoundoff) {
  check_rounding<float>(DType::f32);
  check_rounding<__half>(DType::f16);
  check_rounding<__nv_bfloat16>(DType::bf16);
}

TEST(DType, TiesRoundToEven) {
  // 1 + 2^-11 lies halfway between fp16 neighbours 1 and 1 + 2^-10: even is 1.
  EXPECT_EQ(to_float(from_float<__half>(1.0f + std::ldexp(1.0f, -11))), 1.0f);
  // 1 + 3*2^-11 lies halfway between 1 + 2^-10 and 1 + 2^-9: even is 1 + 2^-9.
  EXPECT_EQ(to_float(from_float<__half>(1.0f + 3 * std::ldexp(1.0f, -11))), 1.0f + std::ldexp(1.0f, -9));
  EXPECT_EQ(to_float(from_float<__nv_bfloat16>(1.0f + std::ldexp(1.0f, -8))), 1.0f);
}

TEST(DType, SpecialValuesSurvive) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(to_float(from_float<__half>(inf)), inf);
  EXPECT_EQ(to_float(from_float<__nv_bfloat16>(-inf)), -inf);
  EXPECT_TRUE(std::isnan(to_float(from_float<__half>(std::nanf("")))));
  EXPECT_TRUE(std::isnan(to_float(from_float<__nv_bfloat16>(std::nanf("")))));
  EXPECT_EQ(to_float(from_float<__half>(70000.0f)), inf) << "fp16 overflows past 65504";
}

// The boundary is the midpoint between FLT_MAX and 2^128: the largest double below it rounds to
// FLT_MAX (so the cast is defined and finite); the midpoint itself rounds to even, which is 2^128,
// an overflow to inf.
TEST(DType, RoundsToFiniteFloatStopsAtTheMidpointAboveFltMax) {
  constexpr double kMidpoint = 0x1.ffffffp+127;
  static_assert(rounds_to_finite_float(std::numeric_limits<float>::max()));
  static_assert(!rounds_to_finite_float(kMidpoint));
  const double below = std::nextafter(kMidpoint, 0.0);
  EXPECT_TRUE(rounds_to_finite_float(below));
  EXPECT_EQ(static_cast<float>(below), std::numeric_limits<float>::max());
  EXPECT_TRUE(rounds_to_finite_float(-below));
  EXPECT_EQ(static_cast<float>(-below), -std::numeric_limits<float>::max());
  EXPECT_FALSE(rounds_to_finite_float(-kMidpoint));
  EXPECT_FALSE(rounds_to_finite_float(std::numeric_limits<double>::infinity()));
  EXPECT_FALSE(rounds_to_finite_float(std::numeric_limits<double>::quiet_NaN()));
  EXPECT_TRUE(rounds_to_finite_float(0.0));
  EXPECT_TRUE(rounds_to_finite_float(std::numeric_limits<double>::denorm_min()));  // rounds to 0
}

TEST(DType, DispatchCallsTheMatchingType) {
  EXPECT_EQ(dispatch_dtype(DType::f16, [](auto tag) { return sizeof(tag); }), 2u);
  EXPECT_EQ(dispatch_dtype(DType::f32, [](auto tag) { return DTypeTraits<decltype(tag)>::dtype; }),
            DType::f32);
  EXPECT_EQ(dispatch_dtype(DType::bf16, [](auto tag) { return DTypeTraits<decltype(tag)>::dtype; }),
            DType::bf16);
}

}  // namespace
}  // namespace seqbench
