// kernels/packed.h on the host: unpack_floats gives, bit for bit, the floats that to_float gives
// element by element, for every bfloat16 and fp16 bit pattern (the bfloat16 path unpacks pairs of
// elements as 32-bit words, the others convert one element at a time).
#include "kernels/packed.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>

namespace seqbench::kernels {
namespace {

template <class T, int N>
void expect_every_pattern_unpacks_as_to_float() {
  static_assert(sizeof(T) == 2);
  for (std::uint32_t first = 0; first < 65536; first += N) {
    Packed<T, N> packed;
    for (int k = 0; k < N; ++k) {
      // Neighbouring elements differ (the pattern walks forward), so a swap of the even and odd
      // element of a word shows.
      const auto bits =
          static_cast<std::uint16_t>((first + static_cast<std::uint32_t>(k) * 40503u) & 0xffffu);
      std::memcpy(static_cast<void*>(&packed.v[k]), &bits, sizeof bits);  // the raw 16 bits
    }
    float got[N];
    unpack_floats(packed, got);
    for (int k = 0; k < N; ++k) {
      const float want = to_float(packed.v[k]);
      ASSERT_EQ(std::memcmp(&got[k], &want, sizeof want), 0) << "pattern " << first << " element " << k;
    }
  }
}

TEST(PackedHost, UnpackFloatsEqualsToFloatForEveryBfloat16Pattern) {
  expect_every_pattern_unpacks_as_to_float<__nv_bfloat16, 8>();
  expect_every_pattern_unpacks_as_to_float<__nv_bfloat16, 2>();
}

TEST(PackedHost, UnpackFloatsEqualsToFloatForEveryHalfPattern) {
  expect_every_pattern_unpacks_as_to_float<__half, 8>();
}

TEST(PackedHost, UnpackFloatsPassesFloatsThrough) {
  Packed<float, 4> packed{{1.5f, -0.0f, 3.0e-39f, -7.25f}};
  float got[4];
  unpack_floats(packed, got);
  for (int k = 0; k < 4; ++k) EXPECT_EQ(std::memcmp(&got[k], &packed.v[k], sizeof(float)), 0) << k;
}

}  // namespace
}  // namespace seqbench::kernels
