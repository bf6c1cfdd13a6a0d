// The fused cross-entropy forward's per-thread accumulator (kernels/online_lse.h) on the CPU: the
// same code the kernel runs. A -inf value (a masked vocabulary entry) contributes exactly 0 wherever
// it falls; a thread whose first values were -inf used to turn its sum into NaN (-inf - (-inf) in
// the exponent), and with it the row's lse, loss and gradient.
#include "kernels/online_lse.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace seqbench::kernels {
namespace {

constexpr double kU = 0x1p-24;  // one fp32 rounding

bool same_bits(float a, float b) {
  return std::memcmp(&a, &b, sizeof a) == 0;
}

// The forward's bound on |lse - exact| (suites/operators/cross_entropy.cu) for n values absorbed
// with at most R rescales, Z the range and X the largest magnitude of the finite values:
//   u·(3Z + 6(R + 1) + n + 16) + u·(4|lse| + X + 2 ln n).
double forward_lse_bound(double range, int rescales, double n, double lse, double max_abs) {
  return kU * (3 * range + 6 * (rescales + 1) + n + 16) +
         kU * (4 * std::fabs(lse) + max_abs + 2 * std::log(n));
}

template <int K>
using Chunk = std::vector<float>;  // K values

template <int K>
std::vector<Chunk<K>> random_chunks(int count, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> value(-8.0f, 8.0f);
  std::vector<Chunk<K>> chunks(static_cast<std::size_t>(count), Chunk<K>(K));
  for (auto& c : chunks)
    for (float& x : c) x = value(rng);
  return chunks;
}

template <int K>
OnlineLse absorb_all(const std::vector<Chunk<K>>& chunks) {
  OnlineLse st;
  for (const auto& c : chunks) {
    float v[K];
    for (int k = 0; k < K; ++k) v[k] = c[static_cast<std::size_t>(k)];
    st.absorb(v);
  }
  return st;
}

// All--inf chunks before, between and after the finite ones leave m, m2 and s bitwise as they are
// without them: each adds 2^(-inf) = 0 exactly and raises no max. sx becomes -inf (Σx is -inf).
template <int K>
void expect_masked_chunks_change_nothing(unsigned seed) {
  const std::vector<Chunk<K>> finite = random_chunks<K>(9, seed);
  const Chunk<K> masked(K, -INFINITY);
  std::vector<Chunk<K>> with = {masked, masked};
  for (std::size_t i = 0; i < finite.size(); ++i) {
    with.push_back(finite[i]);
    if (i % 3 == 1) with.push_back(masked);
  }
  with.push_back(masked);
  const OnlineLse a = absorb_all<K>(with), b = absorb_all<K>(finite);
  EXPECT_TRUE(same_bits(a.m, b.m)) << "K=" << K << ": m " << a.m << " vs " << b.m;
  EXPECT_TRUE(same_bits(a.m2, b.m2)) << "K=" << K;
  EXPECT_TRUE(same_bits(a.s, b.s)) << "K=" << K << ": s " << a.s << " vs " << b.s;
  EXPECT_TRUE(std::isfinite(b.s));
  EXPECT_EQ(a.sx, -INFINITY);
}

TEST(OnlineLse, MaskedValuesFirstBetweenAndLastContributeExactlyZero) {
  for (unsigned seed = 1; seed <= 20; ++seed) {
    expect_masked_chunks_change_nothing<1>(seed);  // one value at a time: -inf anywhere in a row
    expect_masked_chunks_change_nothing<4>(seed);  // an fp32 vector
    expect_masked_chunks_change_nothing<8>(seed);  // a 16-bit vector
  }
}

// Chunks that mix -inf and finite values (a vector straddling a masked range), the first of them
// included: lse against the log-sum-exp in double over the finite values, within the forward's
// bound of suites/operators/cross_entropy.cu with n values absorbed, R <= chunks rescales, Z the
// range and X the largest magnitude of the finite values, V = n:
//   u·(3Z + 6(R + 1) + n + 16) + u·(4|lse| + X + 2 ln V).
TEST(OnlineLse, MixedChunksGiveTheLogSumExpOfTheFiniteValues) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> value(-8.0f, 8.0f);
  for (int trial = 0; trial < 200; ++trial) {
    constexpr int K = 8;
    const int chunks = 1 + trial % 13;
    std::vector<Chunk<K>> row(static_cast<std::size_t>(chunks), Chunk<K>(K));
    for (auto& c : row)
      for (float& x : c) x = rng() % 3 == 0 ? -INFINITY : value(rng);
    row[0].assign(K, -INFINITY);  // the first chunk masked, but for its last value on odd trials
    if (trial % 2 == 1) row[0][K - 1] = 0.5f;
    double mx = -INFINITY, mn = INFINITY, xa = 0;
    int finite = 0;
    for (const auto& c : row) {
      for (const float x : c) {
        if (std::isinf(x)) continue;
        ++finite;
        mx = std::max<double>(mx, x);
        mn = std::min<double>(mn, x);
        xa = std::max<double>(xa, std::fabs(x));
      }
    }
    if (finite == 0) continue;
    double sum = 0;
    for (const auto& c : row)
      for (float x : c) sum += std::exp(static_cast<double>(x) - mx);
    const double want = mx + std::log(sum);
    const double n = K * chunks;
    const double bound = forward_lse_bound(mx - mn, chunks, n, want, xa);
    const OnlineLse st = absorb_all<K>(row);
    ASSERT_TRUE(std::isfinite(st.s)) << "trial " << trial;
    EXPECT_NEAR(st.lse(), want, bound) << "trial " << trial;
  }
}

// Nothing but -inf: s = 0 and lse = -inf (log 0), never NaN; the kernel then gives the row NaN
// (its team merge subtracts -inf from -inf), as the reference's log-softmax does.
TEST(OnlineLse, OnlyMaskedValuesGiveAnEmptySum) {
  const float v[8] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY};
  OnlineLse st;
  st.absorb(v);
  st.absorb(v);
  EXPECT_EQ(st.s, 0.0f);
  EXPECT_EQ(st.m, -INFINITY);
  EXPECT_EQ(st.lse(), -INFINITY);
}

// The accumulator's range (kernels/cross_entropy.h, "Range"). m2 = fl(m·log2 e) is off from
// m·log2 e by up to half its ulp, r; every term carries the same 2^r, which cancels in lse, so long
// as 2^r and the sum stay finite and normal: |m2| < 2^31 gives |r| <= 64, i.e. |m| < 2^31 / log2 e
// (about 1.4885e9). Beyond that r reaches +-128 and more: s overflows (lse +inf) or underflows
// (lse -inf), or both (NaN). Such a row is loud, never finite and wrong: every lse this draws is
// either within the forward's bound (u·(4|lse| + X + ...), here with n = 4, Z <= 2|m|) or not finite.
TEST(OnlineLse, WithinTheRangeLseIsFiniteAndBeyondItNeverFiniteAndWrong) {
  const double limit = 0x1p31 / static_cast<double>(kLog2e);
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> log10_magnitude(3.0, 38.5);
  int beyond = 0, beyond_not_finite = 0;
  for (int trial = 0; trial < 4000; ++trial) {
    const double draw = std::pow(10.0, log10_magnitude(rng));
    const float m = static_cast<float>(std::min<double>(draw, std::numeric_limits<float>::max())) *
                    (trial % 2 == 0 ? 1.0f : -1.0f);
    // Two equal maxima, one value an ulp below, and one far below (a term that underflows to 0).
    const float row[4] = {m, std::nextafter(m, -INFINITY), m, m < 0 ? 2.0f * m : -m};
    double sum = 0.0;
    for (const float x : row) sum += std::exp(static_cast<double>(x) - m);
    const double want = m + std::log(sum);
    OnlineLse st;
    st.absorb(row);
    const float got = st.lse();
    const double bound = forward_lse_bound(2.0 * std::fabs(m), 1, 4, want, std::fabs(2.0 * m));
    if (std::fabs(m) < limit) {
      ASSERT_TRUE(std::isfinite(got)) << "m = " << m << " (within the range): lse " << got;
    } else {
      ++beyond;
      if (!std::isfinite(got)) {
        ++beyond_not_finite;
        continue;
      }
    }
    EXPECT_NEAR(got, want, bound) << "m = " << m << ": finite but outside the forward's bound";
  }
  // The limit is real: beyond it most draws are not finite (not the odd one by chance).
  EXPECT_GT(beyond, 1000);
  EXPECT_GT(beyond_not_finite, beyond / 4) << beyond_not_finite << " of " << beyond;
}

}  // namespace
}  // namespace seqbench::kernels
