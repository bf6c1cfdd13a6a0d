#include "core/philox.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace seqbench {
namespace {

void expect_words(PhiloxWords got, std::uint32_t a, std::uint32_t b, std::uint32_t c, std::uint32_t d) {
  EXPECT_EQ(got.w[0], a);
  EXPECT_EQ(got.w[1], b);
  EXPECT_EQ(got.w[2], c);
  EXPECT_EQ(got.w[3], d);
}

// The known-answer vectors published with Random123 (Salmon et al., SC'11), kat_vectors file.
TEST(Philox, MatchesRandom123KnownAnswers) {
  expect_words(philox4x32_10(PhiloxWords{{0, 0, 0, 0}}, 0, 0), 0x6627e8d5, 0xe169c58d, 0xbc57ac4c,
               0x9b00dbd8);
  expect_words(
      philox4x32_10(PhiloxWords{{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}}, 0xffffffff, 0xffffffff),
      0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd);
  expect_words(
      philox4x32_10(PhiloxWords{{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}}, 0xa4093822, 0x299f31d0),
      0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1);
}

TEST(Philox, StreamConventionPacksSeedOffsetAndIndex) {
  const std::uint64_t seed = 0x299f31d0a4093822ull;
  const std::uint64_t offset = 0x0370734413198a2eull;
  // The index is 4*group + lane in 64 bits, so groups reach 2^62: keep the top two bits clear.
  const std::uint64_t group = 0x05a308d3243f6a88ull;
  const PhiloxWords expected =
      philox4x32_10(PhiloxWords{{0x243f6a88, 0x05a308d3, 0x13198a2e, 0x03707344}}, 0xa4093822, 0x299f31d0);
  for (int lane = 0; lane < 4; ++lane)
    EXPECT_EQ(philox_bits(seed, offset, group * 4 + lane), expected.w[lane]) << "lane " << lane;
}

TEST(Philox, DifferentOffsetsAndSeedsGiveDifferentStreams) {
  int same_offset = 0, same_seed = 0;
  for (std::uint64_t i = 0; i < 1000; ++i) {
    same_offset += philox_bits(7, 0, i) == philox_bits(7, 1, i);
    same_seed += philox_bits(7, 0, i) == philox_bits(8, 0, i);
  }
  // A 32-bit collision has probability 2^-32 per draw: any match here means the streams alias.
  EXPECT_EQ(same_offset, 0);
  EXPECT_EQ(same_seed, 0);
}

TEST(Philox, UniformIsInUnitIntervalWithCorrectMoments) {
  const int n = 1 << 20;
  double sum = 0.0, sum_sq = 0.0;
  float lo = 1.0f, hi = 0.0f;
  for (int i = 0; i < n; ++i) {
    const float u = philox_uniform(42, 3, static_cast<std::uint64_t>(i));
    lo = std::min(lo, u);
    hi = std::max(hi, u);
    sum += u;
    sum_sq += static_cast<double>(u) * u;
  }
  EXPECT_GE(lo, 0.0f);
  EXPECT_LT(hi, 1.0f);
  const double mean = sum / n;
  const double var = sum_sq / n - mean * mean;
  // U(0,1): mean 1/2 with standard error sqrt(1/12/n) ~ 2.8e-4; allow 5 sigma.
  EXPECT_NEAR(mean, 0.5, 5 * std::sqrt(1.0 / 12 / n));
  EXPECT_NEAR(var, 1.0 / 12, 1e-3);
}

TEST(Philox, BitsToUnitFloatEndpoints) {
  EXPECT_EQ(bits_to_unit_float(0u), 0.0f);
  EXPECT_LT(bits_to_unit_float(0xffffffffu), 1.0f);
  EXPECT_EQ(bits_to_unit_float(0xffffffffu), 1.0f - std::ldexp(1.0f, -24));
}

// Dropout's 16-bit draws: draw #(8g + j) is the low (j even) or high (j odd) half of word j/2 of
// group g of the 32-bit stream, for any seed, offset and group (the top bits of the index included).
TEST(Philox, DropoutDrawsAreTheHalvesOfAGroupsWords) {
  std::mt19937_64 rng(20261203);
  for (int trial = 0; trial < 200; ++trial) {
    const std::uint64_t seed = rng(), offset = rng();
    const std::uint64_t group = trial == 0 ? (std::uint64_t{1} << 61) - 1 : rng() >> 3;  // index < 2^64
    for (int j = 0; j < 8; ++j) {
      const std::uint32_t word = philox_bits(seed, offset, group * 4 + static_cast<std::uint64_t>(j / 2));
      const std::uint32_t want = j % 2 == 0 ? word & 0xffffu : word >> 16;
      ASSERT_EQ(philox_dropout_draw(seed, offset, group * 8 + static_cast<std::uint64_t>(j)), want)
          << "group " << group << " j " << j;
      ASSERT_EQ(dropout_draw(philox_group(seed, offset, group), static_cast<unsigned>(j)), want);
      ASSERT_EQ(dropout_uniform(seed, offset, group * 8 + static_cast<std::uint64_t>(j)),
                static_cast<float>(want) / 65536.0f);
    }
  }
}

// The kernels decide keep with draw_threshold / draw_passes (one integer compare a draw); the reference, with
// dropout_uniform >= p, i.e. draw · 2^-16 >= p in float. Both are monotone in the draw, so they agree
// everywhere when they agree at the threshold and on either side of it: probed there for random p (random
// float bit patterns below 1, so every exponent is drawn), and over every draw for edge, subnormal,
// ulp-neighbour, out-of-range and grid p.
TEST(Philox, IntegerThresholdDecidesAsTheFloatTest) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> special = {0.0f,
                                      -0.0f,
                                      -1.0f,
                                      -inf,
                                      inf,
                                      std::nanf(""),
                                      2.0f,
                                      1.0f,
                                      std::nextafter(1.0f, 2.0f),
                                      std::nextafter(1.0f, 0.0f),
                                      0.5f,
                                      std::nextafter(0.5f, 0.0f),
                                      std::nextafter(0.5f, 1.0f),
                                      0.1f,
                                      1.0f / 3.0f,
                                      std::numeric_limits<float>::denorm_min(),
                                      std::numeric_limits<float>::min(),
                                      std::ldexp(1.0f, -16),
                                      std::ldexp(1.0f, -17),
                                      std::nextafter(std::ldexp(1.0f, -16), 0.0f),
                                      std::nextafter(std::ldexp(1.0f, -16), 1.0f),
                                      1.0f - std::ldexp(1.0f, -16),
                                      std::nextafter(1.0f - std::ldexp(1.0f, -16), 1.0f)};
  const auto uniform = [](std::uint32_t draw) { return static_cast<float>(draw) * (1.0f / 65536.0f); };
  constexpr std::int64_t kTop = 0xffff;  // the largest draw
  for (const float p : special) {
    const DrawThreshold threshold = draw_threshold(p);
    ASSERT_LE(threshold.min_draw, std::uint32_t{1} << 16) << "p=" << p;
    for (std::uint32_t draw = 0; draw <= kTop; ++draw) {
      ASSERT_EQ(draw_passes(draw, threshold), uniform(draw) >= p)
          << "p=" << p << " (" << std::hexfloat << p << std::defaultfloat << ") draw=" << draw;
    }
  }
  std::mt19937_64 rng(20261202);
  for (int i = 0; i < 20000; ++i) {
    const auto pattern = static_cast<std::uint32_t>(rng() % 0x3f800000u);  // the floats in [0, 1)
    float p;
    std::memcpy(&p, &pattern, sizeof p);
    const DrawThreshold threshold = draw_threshold(p);
    const std::uint32_t t = threshold.min_draw;
    ASSERT_LE(t, std::uint32_t{1} << 16) << "p=" << p;
    std::vector<std::int64_t> probes = {0, kTop, static_cast<std::int64_t>(rng() % (kTop + 1))};
    for (std::int64_t d = -2; d <= 2; ++d) probes.push_back(static_cast<std::int64_t>(t) + d);
    for (const std::int64_t m : probes) {
      if (m < 0 || m > kTop) continue;
      const auto draw = static_cast<std::uint32_t>(m);
      ASSERT_EQ(draw_passes(draw, threshold), uniform(draw) >= p)
          << "p=" << p << " (" << std::hexfloat << p << std::defaultfloat << ") threshold=" << t
          << " draw=" << draw;
    }
  }
}

// dropout_drop_probability(p) = ceil(p 2^16) / 2^16: p itself on the 2^-16 grid, else the next grid
// point above it, and 0 and 1 at the ends.
TEST(Philox, DropProbabilityIsPRoundedUpToTheSixteenBitGrid) {
  EXPECT_EQ(dropout_drop_probability(0.0f), 0.0);
  EXPECT_EQ(dropout_drop_probability(1.0f), 1.0);
  EXPECT_EQ(dropout_drop_probability(0.5f), 0.5);
  EXPECT_EQ(dropout_drop_probability(std::ldexp(1.0f, -16)), std::ldexp(1.0, -16));
  EXPECT_EQ(dropout_drop_probability(std::ldexp(1.0f, -20)), std::ldexp(1.0, -16));
  EXPECT_EQ(dropout_drop_probability(0.1f), 6554.0 / 65536.0);
  std::mt19937_64 rng(3);
  for (int i = 0; i < 10000; ++i) {
    const float p = static_cast<float>(rng() % 1000001) / 1e6f;
    const double q = dropout_drop_probability(p);
    ASSERT_GE(q, static_cast<double>(p)) << "p=" << p;
    ASSERT_LT(q, static_cast<double>(p) + std::ldexp(1.0, -16)) << "p=" << p;
  }
}

TEST(Philox, KeepRateWithinFourSigma) {
  for (const float p : {0.0f, 0.1f, 0.5f, 0.9f, 1.0f}) {
    const int n = 200000;
    int kept = 0;
    for (int i = 0; i < n; ++i) kept += philox_keep(123, 9, static_cast<std::uint64_t>(i), p);
    const double q = dropout_drop_probability(p);  // p on the 2^-16 grid
    const double expected = (1.0 - q) * n;
    const double sigma = std::sqrt(n * q * (1.0 - q));
    EXPECT_LE(std::abs(kept - expected), 4 * sigma + 1e-9) << "p=" << p;
  }
}

}  // namespace
}  // namespace seqbench
