// Division by a run-time constant without a divide instruction: the index arithmetic of PyTorch
// eager's non-contiguous elementwise path (its OffsetCalculator divides the linear index by each
// dimension through a precomputed multiplier), which the unfused baselines' strided copy mirrors
// (kernels/qkv_reshape.h). A 32-bit integer division is some 20 instructions on the GPU; this is
// one multiply-high, one add and one shift.
//
// Method (round-up multiplier, Granlund and Montgomery 1994): for a divisor d >= 1 take
// s = ceil(log2 d) and m = floor(2^32·(2^s - d) / d) + 1. Then for every 0 <= n < 2^31
//   floor(n / d) = (umulhi(n, m) + n) >> s,   umulhi(n, m) = floor(n·m / 2^32).
// Why: M = 2^32 + m = floor(2^(32+s) / d) + 1 = 2^(32+s) / d + δ with 0 < δ <= 1, and
// (umulhi(n, m) + n) >> s = floor(n·M / 2^(32+s)) = floor(n/d + ε) with 0 <= ε = n·δ / 2^(32+s)
// < 2^31 / 2^(32+s) <= 1 / (2d) (as 2^s >= d). Writing n = q·d + r with 0 <= r <= d - 1, the
// fractional part r/d + ε < (d - 1)/d + 1/d = 1, so the floor is q. m fits 32 bits: 2^s < 2d
// gives 2^s - d <= d - 1, so m <= floor(2^32·(d - 1)/d) + 1 <= 2^32 - 1 (2^32/d > 1 as d < 2^31).
// umulhi(n, m) + n < 2n < 2^32, so nothing overflows 32 bits. d = 1 gives s = 0 and m = 1.
// tests/kernels/fast_divmod_test.cpp checks the identity against the / operator on the divisor
// edges (powers of two and their neighbours, 2^31 - 1) and on random pairs.
//
// Limits (checked on the host by FastDivmod's constructor): 1 <= d <= 2^31 - 1; the caller keeps
// every dividend below 2^31 (the 32-bit index path of the strided copy only runs when the element
// count and every offset are at most 2^31 - 1).
#pragma once

#include <cstdint>

#include "core/dtype.h"  // SEQBENCH_HD
#include "core/error.h"

namespace seqbench::kernels {

SEQBENCH_HD inline std::uint32_t umulhi32(std::uint32_t a, std::uint32_t b) {
#if defined(__CUDA_ARCH__)
  return __umulhi(a, b);
#else
  return static_cast<std::uint32_t>((static_cast<std::uint64_t>(a) * b) >> 32);
#endif
}

class FastDivmod {
 public:
  FastDivmod() = default;  // divides by 1

  // Host only (it may throw): d in [1, 2^31 - 1].
  explicit FastDivmod(std::int64_t d) {
    SEQBENCH_REQUIRE(d >= 1 && d <= 0x7fffffff, "FastDivmod: divisor " << d << " is outside [1, 2^31 - 1]");
    divisor_ = static_cast<std::uint32_t>(d);
    while ((std::uint64_t{1} << shift_) < divisor_) ++shift_;
    const std::uint64_t two_s = std::uint64_t{1} << shift_;
    multiplier_ = static_cast<std::uint32_t>(((two_s - divisor_) << 32) / divisor_ + 1);
  }

  std::uint32_t divisor() const { return divisor_; }

  // n in [0, 2^31).
  SEQBENCH_HD std::uint32_t div(std::uint32_t n) const { return (umulhi32(n, multiplier_) + n) >> shift_; }

  // quotient = n / d, remainder = n - quotient·d.
  SEQBENCH_HD void divmod(std::uint32_t n, std::uint32_t& quotient, std::uint32_t& remainder) const {
    quotient = div(n);
    remainder = n - quotient * divisor_;
  }

 private:
  std::uint32_t divisor_ = 1;
  std::uint32_t multiplier_ = 1;
  std::uint32_t shift_ = 0;
};

}  // namespace seqbench::kernels
