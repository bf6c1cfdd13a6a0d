// kernels/fast_divmod.h on the CPU (the same code the strided copy runs on the device): the
// multiply-high quotient and remainder equal the / and % operators for every dividend below 2^31,
// checked exhaustively near each divisor's multiples and at random elsewhere.
#include "kernels/fast_divmod.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"

namespace seqbench::kernels {
namespace {

constexpr std::uint32_t kMaxDividend = 0x7fffffffu;  // 2^31 - 1

// Divisors at the edges of the method: 1, every power of two and its neighbours, the largest.
std::vector<std::uint32_t> edge_divisors() {
  std::vector<std::uint32_t> d{1, 3, 5, 6, 7, 10, 12, 64 * 3, 1000, 1023, 50257, kMaxDividend};
  for (int s = 1; s <= 30; ++s) {
    const std::uint32_t p = std::uint32_t{1} << s;
    d.insert(d.end(), {p - 1, p, p + 1});
  }
  d.push_back(kMaxDividend - 1);
  return d;
}

// Dividends where a quotient changes (q·d - 1, q·d, q·d + d - 1) for small and large q, the range
// ends, and random ones.
void expect_exact(const FastDivmod& f, std::mt19937& rng) {
  const std::uint32_t d = f.divisor();
  std::vector<std::uint32_t> n{0, 1, d - 1, kMaxDividend, kMaxDividend - 1};
  const std::uint32_t max_q = kMaxDividend / d;
  for (std::uint32_t q :
       {std::uint32_t{1}, std::uint32_t{2}, std::uint32_t{3}, max_q / 2, max_q - 1, max_q}) {
    if (q == 0 || q > max_q) continue;
    const std::uint64_t base = std::uint64_t{q} * d;
    for (const std::uint64_t v : {base - 1, base, base + d - 1}) {
      if (v <= kMaxDividend) n.push_back(static_cast<std::uint32_t>(v));
    }
  }
  std::uniform_int_distribution<std::uint32_t> any(0, kMaxDividend);
  for (int i = 0; i < 2000; ++i) n.push_back(any(rng));
  for (const std::uint32_t x : n) {
    if (x > kMaxDividend) continue;
    std::uint32_t q = 0, r = 0;
    f.divmod(x, q, r);
    ASSERT_EQ(q, x / d) << x << " / " << d;
    ASSERT_EQ(r, x % d) << x << " % " << d;
  }
}

TEST(FastDivmod, EqualsTheDivideOperatorOnEveryEdgeDivisor) {
  std::mt19937 rng(20261124);
  for (const std::uint32_t d : edge_divisors()) expect_exact(FastDivmod(d), rng);
}

TEST(FastDivmod, EqualsTheDivideOperatorOnRandomDivisors) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<std::uint32_t> small(1, 5000), any(1, kMaxDividend);
  for (int i = 0; i < 300; ++i) expect_exact(FastDivmod(small(rng)), rng);
  for (int i = 0; i < 300; ++i) expect_exact(FastDivmod(any(rng)), rng);
}

TEST(FastDivmod, EveryDividendForSmallDivisors) {
  // Exhaustive over [0, 2^20) for the divisors a head split uses most (d = 64, N = 16, L = 127 ...).
  for (const std::uint32_t d : {1u, 2u, 3u, 7u, 16u, 64u, 127u, 1000u}) {
    const FastDivmod f(d);
    for (std::uint32_t x = 0; x < (1u << 20); ++x) ASSERT_EQ(f.div(x), x / d) << x << " / " << d;
  }
}

TEST(FastDivmod, RefusesDivisorsOutsideItsRange) {
  for (const std::int64_t d : {std::int64_t{0}, std::int64_t{-3}, std::int64_t{1} << 31}) {
    try {
      FastDivmod f(d);
      ADD_FAILURE() << "divisor " << d << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("divisor " + std::to_string(d) + " is outside [1, 2^31 - 1]"),
                std::string::npos)
          << e.what();
    }
  }
}

}  // namespace
}  // namespace seqbench::kernels
