// The dropout family on the CPU: the bit-packed mask's byte arithmetic and layout (host
// emulation against reference/dropout.h), the keep-bit helpers the kernels use (host-callable),
// and every launcher's argument validation. Launchers validate before any CUDA call, so fake
// non-null pointers are enough; each expectation checks the message, because on a machine
// without a GPU an argument that slipped through would still throw (the launch fails).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>

#include "core/error.h"
#include "core/philox.h"
#include "kernels/dropout.h"
#include "kernels/dropout_mask.h"
#include "reference/dropout.h"
#include "tests/common/expect_error.h"

namespace seqbench::kernels {
namespace {

using namespace dropout_detail;

using seqbench::testing::expect_error;

// Distinct 16-byte aligned fake device addresses, never dereferenced.
template <class T>
T* fake(std::uintptr_t slot) {
  return reinterpret_cast<T*>(slot << 32);
}

TEST(DropoutMaskBytes, AreWholeWordsOfOneBitPerElement) {
  EXPECT_EQ(dropout_mask_bytes(0), 0u);
  EXPECT_EQ(dropout_mask_bytes(1), 4u);
  EXPECT_EQ(dropout_mask_bytes(31), 4u);
  EXPECT_EQ(dropout_mask_bytes(32), 4u);
  EXPECT_EQ(dropout_mask_bytes(33), 8u);
  EXPECT_EQ(dropout_mask_bytes(1'000'000), 125'000u);
  EXPECT_EQ(dropout_mask_bytes(100'000'000), 12'500'000u);  // vs 100 MB for a uint8 mask
  // 1/8 byte per element plus at most 3 bytes of padding, for every n.
  for (std::size_t n = 0; n < 1000; ++n) {
    EXPECT_GE(dropout_mask_bytes(n) * 8, n);
    EXPECT_LT(dropout_mask_bytes(n), n / 8 + 4 + 1);
    EXPECT_EQ(dropout_mask_bytes(n) % 4, 0u);
  }
  // No overflow at the top of the range.
  const std::size_t big = std::numeric_limits<std::size_t>::max() - 3;
  EXPECT_EQ(dropout_mask_bytes(big), (big / 32 + 1) * 4);
}

TEST(DropoutKeepScale, IsOneOverOneMinusPAndZeroAtOne) {
  EXPECT_EQ(dropout_keep_scale(0.0f), 1.0f);
  EXPECT_EQ(dropout_keep_scale(0.5f), 2.0f);
  EXPECT_EQ(dropout_keep_scale(0.75f), 4.0f);
  EXPECT_EQ(dropout_keep_scale(1.0f), 0.0f);
  EXPECT_FALSE(std::isnan(dropout_keep_scale(1.0f)));
}

// The kernels' keep-bit helpers are host-callable: they must equal philox_keep element by
// element, for spans that start anywhere and straddle Philox groups.
TEST(DropoutKeepBits, EqualPhiloxKeepForAnySpan) {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 2000; ++trial) {
    const std::uint64_t seed = rng(), offset = rng() % 100, first = rng() % (std::uint64_t{1} << 40);
    const int count = 1 + static_cast<int>(rng() % 32);
    const float p = static_cast<float>(rng() % 1001) / 1000.0f;
    const std::uint32_t bits = dropout_keep_bits(seed, offset, first, count, draw_threshold(p));
    for (int j = 0; j < 32; ++j) {
      const bool want = j < count && philox_keep(seed, offset, first + static_cast<std::uint64_t>(j), p);
      ASSERT_EQ(((bits >> j) & 1u) != 0, want) << "first=" << first << " count=" << count << " j=" << j;
    }
  }
}

// K = 4 at any multiple of 4 (either half of a Philox group), K = 8, 16, 32 at multiples of 8.
TEST(DropoutKeepBits, AlignedFastPathEqualsTheGeneralOne) {
  std::mt19937_64 rng(8);
  for (int trial = 0; trial < 2000; ++trial) {
    const std::uint64_t seed = rng(), offset = rng() % 100, first4 = (rng() % (std::uint64_t{1} << 40)) * 4;
    const std::uint64_t first8 = first4 & ~std::uint64_t{7};
    const float p = static_cast<float>(rng() % 1001) / 1000.0f;
    EXPECT_EQ(dropout_keep_bits_aligned<4>(seed, offset, first4, draw_threshold(p)),
              dropout_keep_bits(seed, offset, first4, 4, draw_threshold(p)));
    EXPECT_EQ(dropout_keep_bits_aligned<8>(seed, offset, first8, draw_threshold(p)),
              dropout_keep_bits(seed, offset, first8, 8, draw_threshold(p)));
    EXPECT_EQ(dropout_keep_bits_aligned<16>(seed, offset, first8, draw_threshold(p)),
              dropout_keep_bits(seed, offset, first8, 16, draw_threshold(p)));
    EXPECT_EQ(dropout_keep_bits_aligned<32>(seed, offset, first8, draw_threshold(p)),
              dropout_keep_bits(seed, offset, first8, 32, draw_threshold(p)));
  }
}

// A vector path that broke the alignment would read another element's draws on the device; the
// host build (simt included) refuses it.
TEST(DropoutKeepBitsDeathTest, AlignedFastPathRefusesAMisalignedFirst) {
  EXPECT_DEATH(dropout_keep_bits_aligned<8>(1, 2, 4, draw_threshold(0.5f)),
               "first = 4 is not a multiple of 8");
  EXPECT_DEATH(dropout_keep_bits_aligned<32>(1, 2, 12, draw_threshold(0.5f)),
               "first = 12 is not a multiple of 8");
  EXPECT_DEATH(dropout_keep_bits_aligned<4>(1, 2, 6, draw_threshold(0.5f)),
               "first = 6 is not a multiple of 4");
}

// Host emulation of the packed layout: bit i%8 of byte i/8 is reference mask element i, the
// padding bits are 0, and 32-bit little-endian words hold elements 32w .. 32w+31 (what the
// kernels store and read).
TEST(DropoutPackedMask, HoldsTheReferenceMaskBitByBit) {
  for (const ref::Index n : {1, 7, 31, 32, 33, 1000, 4097}) {
    const ref::KeepMask keep = ref::make_dropout_mask(1, n, 0.3, 99, 4);
    const std::vector<std::uint8_t> packed = pack_dropout_mask(keep.data(), static_cast<std::size_t>(n));
    ASSERT_EQ(packed.size(), dropout_mask_bytes(static_cast<std::size_t>(n)));
    for (std::size_t i = 0; i < packed.size() * 8; ++i) {
      const bool want = i < static_cast<std::size_t>(n) && keep(0, static_cast<ref::Index>(i)) != 0;
      ASSERT_EQ(dropout_mask_bit(packed.data(), i), want) << "n=" << n << " bit " << i;
    }
    for (std::size_t w = 0; w < packed.size() / 4; ++w) {
      std::uint32_t word = 0;
      for (int b = 0; b < 4; ++b) word |= static_cast<std::uint32_t>(packed[4 * w + b]) << (8 * b);
      const std::size_t first = 32 * w;
      const int count = static_cast<int>(std::min<std::size_t>(32, static_cast<std::size_t>(n) - first));
      EXPECT_EQ(word, dropout_keep_bits(99, 4, first, count, draw_threshold(0.3f))) << "word " << w;
    }
  }
}

// The host emulation of the kernel's per-lane word assembly: lane l of a group of 32/K lanes
// contributes its K bits at shift l·K; OR-ing the group gives the word the layout prescribes.
TEST(DropoutPackedMask, LaneAssemblyGivesTheLayoutsWords) {
  for (const int K : {4, 8}) {
    const std::uint64_t seed = 5, offset = 6;
    const float p = 0.45f;
    for (std::uint64_t word_index = 0; word_index < 64; ++word_index) {
      std::uint32_t word = 0;
      for (int lane = 0; lane < 32 / K; ++lane) {
        const std::uint64_t first = 32 * word_index + static_cast<std::uint64_t>(lane * K);
        const std::uint32_t bits = K == 4
                                       ? dropout_keep_bits_aligned<4>(seed, offset, first, draw_threshold(p))
                                       : dropout_keep_bits_aligned<8>(seed, offset, first, draw_threshold(p));
        word |= bits << (lane * K);
      }
      EXPECT_EQ(word, dropout_keep_bits(seed, offset, 32 * word_index, 32, draw_threshold(p))) << "K=" << K;
    }
  }
}

// A CPU estimate of the generator's keep rate (the GPU check does the same on the kernel's mask).
TEST(DropoutKeepRate, PhiloxKeepRateIsWithinFourSigma) {
  const std::size_t n = 1 << 20;
  for (const float p : {0.1f, 0.5f, 0.9f}) {
    std::size_t kept = 0;
    for (std::size_t i = 0; i < n; i += 32) {
      const std::uint32_t bits = dropout_keep_bits_aligned<32>(123, 0, i, draw_threshold(p));
      kept += static_cast<std::size_t>(__builtin_popcount(bits));
    }
    const double rate = static_cast<double>(kept) / n;
    const double q = dropout_drop_probability(p);  // p on the 2^-16 grid (core/philox.h)
    const double sigma = std::sqrt(q * (1.0 - q) / n);
    EXPECT_LE(std::fabs(rate - (1.0 - q)), 4 * sigma) << "p=" << p;
  }
}

TEST(DropoutLaunchers, RejectProbabilitiesOutsideZeroOne) {
  float* y = fake<float>(1);
  const float* x = fake<float>(2);
  for (const float p :
       {-0.1f, 1.5f, std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    expect_error(
        [&] {
          launch_dropout_fwd<float>(y, x, 10, {p, 1, 2}, nullptr, 0, nullptr);
        },
        "dropout_fwd: dropout probability p = ");
    expect_error([&] { launch_dropout_bwd<float>(y, x, 10, p, fake<void>(3), 64, nullptr); },
                 "dropout_bwd: dropout probability");
    expect_error(
        [&] {
          launch_dropout_bwd_regenerate<float>(y, x, 10, {p, 1, 2}, nullptr);
        },
        "dropout_bwd_regenerate: dropout probability");
    expect_error(
        [&] {
          launch_dropout_mask_u8(fake<std::uint8_t>(3), 10, {p, 1, 2}, nullptr);
        },
        "dropout_mask_u8: dropout probability");
    expect_error([&] { launch_dropout_apply_u8<float>(y, x, fake<std::uint8_t>(3), 10, p, nullptr); },
                 "dropout_apply_u8: dropout probability");
  }
  // Even with nothing to do, a bad p is an error, not silence.
  expect_error(
      [&] {
        launch_dropout_fwd<float>(y, x, 0, {2.0f, 1, 2}, nullptr, 0, nullptr);
      },
      "outside [0, 1]");
}

TEST(DropoutLaunchers, EmptyTensorsLaunchNothing) {
  // n = 0 with null pointers is valid and returns before any CUDA call (this machine may have
  // no GPU: a launch would throw).
  EXPECT_NO_THROW(launch_dropout_fwd<float>(nullptr, nullptr, 0, {0.1f, 1, 2}, nullptr, 0, nullptr));
  EXPECT_NO_THROW(launch_dropout_bwd<__half>(nullptr, nullptr, 0, 0.1f, nullptr, 0, nullptr));
  EXPECT_NO_THROW(launch_dropout_bwd_regenerate<__nv_bfloat16>(nullptr, nullptr, 0, {0.1f, 1, 2}, nullptr));
  EXPECT_NO_THROW(launch_dropout_mask_u8(nullptr, 0, {0.1f, 1, 2}, nullptr));
  EXPECT_NO_THROW(launch_dropout_apply_u8<float>(nullptr, nullptr, nullptr, 0, 0.1f, nullptr));
}

TEST(DropoutLaunchers, RejectNullPointers) {
  float* y = fake<float>(1);
  const float* x = fake<float>(2);
  expect_error(
      [&] {
        launch_dropout_fwd<float>(nullptr, x, 10, {0.1f, 1, 2}, nullptr, 0, nullptr);
      },
      "dropout_fwd: y is null");
  expect_error(
      [&] {
        launch_dropout_fwd<float>(y, nullptr, 10, {0.1f, 1, 2}, nullptr, 0, nullptr);
      },
      "dropout_fwd: x is null");
  expect_error([&] { launch_dropout_bwd<float>(y, x, 10, 0.1f, nullptr, 64, nullptr); },
               "dropout_bwd: mask is null");
  expect_error([&] { launch_dropout_bwd<float>(nullptr, x, 10, 0.1f, fake<void>(3), 64, nullptr); },
               "dropout_bwd: dx is null");
  expect_error(
      [&] {
        launch_dropout_bwd_regenerate<float>(y, nullptr, 10, {0.1f, 1, 2}, nullptr);
      },
      "dropout_bwd_regenerate: dy is null");
  expect_error(
      [&] {
        launch_dropout_mask_u8(nullptr, 10, {0.1f, 1, 2}, nullptr);
      },
      "dropout_mask_u8: mask is null");
  expect_error([&] { launch_dropout_apply_u8<float>(y, x, nullptr, 10, 0.1f, nullptr); },
               "dropout_apply_u8: mask is null");
}

TEST(DropoutLaunchers, RejectSmallOrMisalignedMasks) {
  float* y = fake<float>(1);
  const float* x = fake<float>(2);
  auto* mask = fake<unsigned char>(3);
  expect_error(
      [&] {
        launch_dropout_fwd<float>(y, x, 33, {0.1f, 1, 2}, mask, 4, nullptr);
      },
      "mask buffer of 4 bytes, needs dropout_mask_bytes(33) = 8");
  expect_error(
      [&] {
        launch_dropout_fwd<float>(y, x, 33, {0.1f, 1, 2}, mask + 2, 8, nullptr);
      },
      "mask is not 4-byte aligned");
  expect_error([&] { launch_dropout_bwd<float>(y, x, 100, 0.1f, mask, 12, nullptr); },
               "mask buffer of 12 bytes, needs dropout_mask_bytes(100) = 16");
  expect_error([&] { launch_dropout_bwd<float>(y, x, 100, 0.1f, mask + 1, 16, nullptr); },
               "mask is not 4-byte aligned");
}

TEST(DropoutLaunchers, RejectOverlappingOutputs) {
  float* buffer = fake<float>(1);
  expect_error(
      [&] {
        launch_dropout_fwd<float>(buffer, buffer, 10, {0.1f, 1, 2}, nullptr, 0, nullptr);
      },
      "output y overlaps input x");
  expect_error(
      [&] {
        launch_dropout_fwd<float>(buffer + 5, buffer, 10, {0.1f, 1, 2}, nullptr, 0, nullptr);
      },
      "output y overlaps input x");
  expect_error(
      [&] {
        launch_dropout_fwd<float>(buffer, buffer + 100, 10, {0.1f, 1, 2}, buffer + 102, 64, nullptr);
      },
      "output mask overlaps input x");
  expect_error([&] { launch_dropout_bwd<float>(buffer, buffer, 10, 0.1f, buffer + 96, 64, nullptr); },
               "dropout_bwd: output dx overlaps input dy (in-place is not supported)");
  expect_error([&] { launch_dropout_bwd<float>(buffer, buffer + 100, 100, 0.1f, buffer + 96, 64, nullptr); },
               "output dx overlaps input mask");
  // The regenerating backward runs in place (dx == dy), but refuses a partial overlap.
  for (float* dy : {buffer + 1, buffer + 9, buffer - 9}) {
    expect_error(
        [&] {
          launch_dropout_bwd_regenerate<float>(buffer, dy, 10, {0.1f, 1, 2}, nullptr);
        },
        "dropout_bwd_regenerate: output dx overlaps input dy without being it (in place means dx == dy)");
  }
  expect_error(
      [&] {
        launch_dropout_apply_u8<float>(buffer, buffer + 100,
                                       reinterpret_cast<const std::uint8_t*>(buffer + 8), 10, 0.1f, nullptr);
      },
      "output y overlaps input mask");
}

TEST(DropoutLaunchers, RejectSizesBeyondOneGrid) {
  expect_error(
      [&] {
        launch_dropout_fwd<float>(fake<float>(1), fake<float>(2), std::size_t{1} << 62, {0.1f, 1, 2}, nullptr,
                                  0, nullptr);
      },
      "dropout_fwd: n = ");
}

}  // namespace
}  // namespace seqbench::kernels
