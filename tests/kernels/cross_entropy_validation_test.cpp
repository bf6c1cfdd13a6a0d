// kernels/cross_entropy on the CPU: convention names and weights (against reference/cross_entropy.h),
// the thread plan, and launcher argument validation with fake device pointers (every launcher
// validates before its first CUDA call).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "kernels/cross_entropy.h"
#include "reference/cross_entropy.h"
#include "tests/common/expect_error.h"

namespace seqbench::kernels {
namespace {

using seqbench::testing::expect_error;
using bf16 = __nv_bfloat16;

template <class T>
T* fake(std::uintptr_t slot, std::uintptr_t offset = 0) {
  return reinterpret_cast<T*>((slot << 28) + offset);
}

TEST(CrossEntropyConfig, ConventionNamesMirrorTheReference) {
  EXPECT_STREQ(cross_entropy_smoothing_name(CrossEntropySmoothing::paper),
               ref::smoothing_convention_name(ref::SmoothingConvention::paper));
  EXPECT_STREQ(cross_entropy_smoothing_name(CrossEntropySmoothing::fairseq),
               ref::smoothing_convention_name(ref::SmoothingConvention::fairseq));
  EXPECT_EQ(parse_cross_entropy_smoothing("paper"), CrossEntropySmoothing::paper);
  EXPECT_EQ(parse_cross_entropy_smoothing("fairseq"), CrossEntropySmoothing::fairseq);
  expect_error([] { parse_cross_entropy_smoothing("szegedy"); },
               "unknown smoothing convention \"szegedy\" (accepted: paper, fairseq)");
  // The default is the reference's default.
  EXPECT_EQ(CrossEntropyConfig{}.convention == CrossEntropySmoothing::fairseq,
            ref::CrossEntropyConfig{}.convention == ref::SmoothingConvention::fairseq);
}

// loss = (w_t - w_o)·nll + w_o·smooth with the kernels' weights is the reference's loss, in double.
TEST(CrossEntropyConfig, WeightsReproduceTheReferenceLoss) {
  std::mt19937_64 rng(5);
  std::uniform_real_distribution<double> uni(-4.0, 4.0);
  for (const auto convention : {CrossEntropySmoothing::paper, CrossEntropySmoothing::fairseq}) {
    for (const float smoothing : {0.0f, 0.1f, 0.37f, 1.0f}) {
      for (const std::int64_t vocab : {1, 2, 3, 17, 1000}) {
        if (convention == CrossEntropySmoothing::fairseq && vocab < 2 && smoothing > 0.0f) continue;
        SCOPED_TRACE(std::string(cross_entropy_smoothing_name(convention)) +
                     " s=" + std::to_string(smoothing) + " V=" + std::to_string(vocab));
        CrossEntropyConfig c;
        c.convention = convention;
        c.smoothing = smoothing;
        const CrossEntropyWeights w = cross_entropy_weights(c, vocab);
        EXPECT_NEAR(w.target + static_cast<double>(vocab - 1) * w.other, 1.0, 1e-12);  // p sums to 1
        ref::CrossEntropyConfig rc;
        rc.convention = convention == CrossEntropySmoothing::paper ? ref::SmoothingConvention::paper
                                                                   : ref::SmoothingConvention::fairseq;
        rc.smoothing = smoothing;
        const ref::Index rows = 4;
        ref::Matrix x(rows, vocab);
        for (ref::Index i = 0; i < x.size(); ++i) x.data()[i] = uni(rng);
        ref::TargetVector t(rows);
        for (ref::Index r = 0; r < rows; ++r)
          t(r) = static_cast<std::int32_t>(rng() % static_cast<std::uint64_t>(vocab));
        const ref::CrossEntropyForward want = ref::cross_entropy_forward(x, t, rc);
        for (ref::Index r = 0; r < rows; ++r) {
          const double m = x.row(r).maxCoeff();
          const double lse = m + std::log((x.row(r).array() - m).exp().sum());
          const double nll = lse - x(r, t(r));
          const double smooth = static_cast<double>(vocab) * lse - x.row(r).sum();
          EXPECT_NEAR((w.target - w.other) * nll + w.other * smooth, want.loss(r),
                      1e-9 * (1.0 + std::fabs(want.loss(r))));
          EXPECT_NEAR(nll, want.nll(r), 1e-9 * (1.0 + nll));
        }
      }
    }
  }
}

TEST(CrossEntropyConfig, WeightsValidateSmoothingAndVocabulary) {
  CrossEntropyConfig c;
  c.smoothing = -0.1f;
  expect_error([&] { cross_entropy_weights(c, 10); }, "smoothing -0.1 must be finite and in [0, 1]");
  c.smoothing = 1.5f;
  expect_error([&] { cross_entropy_weights(c, 10); }, "smoothing 1.5 must be finite and in [0, 1]");
  c.smoothing = std::numeric_limits<float>::quiet_NaN();
  expect_error([&] { cross_entropy_weights(c, 10); }, "must be finite and in [0, 1]");
  c.smoothing = 0.1f;
  c.convention = CrossEntropySmoothing::fairseq;
  expect_error([&] { cross_entropy_weights(c, 1); }, "needs vocabulary >= 2, got 1");
  c.smoothing = 0.0f;
  EXPECT_NO_THROW(cross_entropy_weights(c, 1));  // V = 1 with ε = 0 is legal, as in the reference
  c.convention = CrossEntropySmoothing::paper;
  c.smoothing = 0.5f;
  EXPECT_NO_THROW(cross_entropy_weights(c, 1));
  expect_error([&] { cross_entropy_weights(c, 0); }, "vocabulary size (V) 0 outside [1, 1073741824]");
  expect_error([&] { cross_entropy_weights(c, kCrossEntropyMaxVocab + 1); }, "outside [1, 1073741824]");
  c.convention = static_cast<CrossEntropySmoothing>(7);
  expect_error([&] { cross_entropy_weights(c, 10); }, "unknown smoothing convention 7");
}

TEST(CrossEntropyPlan, WarpTeamsForShortRowsBlockTeamsForLongOnes) {
  const CrossEntropyPlan a = cross_entropy_plan(DType::bf16, 1000);
  EXPECT_EQ(a.vector, 8);
  EXPECT_EQ(a.team_threads, 32);
  EXPECT_EQ(a.rows_per_block, kCrossEntropyWarpRowsPerBlock);
  EXPECT_EQ(cross_entropy_plan(DType::bf16, 2048).team_threads, 32);  // 256 vectors
  EXPECT_EQ(cross_entropy_plan(DType::bf16, 2049).team_threads, 64);  // 257 vectors
  EXPECT_EQ(cross_entropy_plan(DType::f32, 1024).team_threads, 32);
  EXPECT_EQ(cross_entropy_plan(DType::f32, 1025).team_threads, 64);
  const CrossEntropyPlan g = cross_entropy_plan(DType::bf16, 50257);
  EXPECT_EQ(g.team_threads, 512);
  EXPECT_EQ(g.rows_per_block, 1);
  EXPECT_EQ(cross_entropy_plan(DType::f32, 32000).team_threads, 512);
  EXPECT_EQ(cross_entropy_plan(DType::f16, 4097).team_threads, 128);  // 513 vectors > 64 x 8
  EXPECT_EQ(cross_entropy_plan(DType::f32, 1).vector, 4);
  // The per-thread bounds of the error analysis cover the real work: 50257 bf16 elements over 512
  // threads are 6282 body vectors (13 per thread at most) plus one head and one tail element.
  EXPECT_EQ(g.max_thread_elements(50257), 13 * 8 + 2);
  EXPECT_EQ(g.max_thread_rescales(50257), 13 + 2);
  for (const DType dt : {DType::f32, DType::f16, DType::bf16}) {
    for (const std::int64_t v : {1, 2, 3, 127, 1000, 1023, 4097, 50257, 1 << 20}) {
      const CrossEntropyPlan p = cross_entropy_plan(dt, v);
      EXPECT_EQ(p.block_threads() % 32, 0);
      EXPECT_LE(p.block_threads(), kCrossEntropyMaxBlockTeam);
      EXPECT_GE(p.max_thread_elements(v) * p.team_threads, v);
    }
  }
  expect_error([] { cross_entropy_plan(DType::f32, 0); }, "vocabulary size (V) 0");
}

TEST(CrossEntropyValidation, ForwardRejectsBadArguments) {
  float *loss = fake<float>(1), *nll = fake<float>(2), *lse = fake<float>(3);
  auto* totals = fake<CrossEntropyTotals>(4);
  const bf16* x = fake<bf16>(5);
  const std::int32_t* t = fake<std::int32_t>(6);
  CrossEntropyConfig c;
  c.smoothing = 0.1f;
  const auto fwd = [&](float* l, float* n, float* s, CrossEntropyTotals* tot, const bf16* xx,
                       const std::int32_t* tt, std::int64_t rows, std::int64_t vocab) {
    launch_cross_entropy_forward<bf16>(l, n, s, tot, xx, tt, rows, vocab, c, nullptr);
  };
  expect_error([&] { fwd(loss, nll, lse, totals, x, t, -1, 10); },
               "cross_entropy_forward: rows (N) -1 outside");
  expect_error([&] { fwd(loss, nll, lse, totals, x, t, kCrossEntropyMaxRows + 1, 10); },
               "outside [0, 2147483647]");
  expect_error([&] { fwd(loss, nll, lse, totals, x, t, 4, 0); },
               "vocabulary size (V) 0 outside [1, 1073741824]");
  expect_error([&] { fwd(loss, nll, lse, totals, x, t, 4, 1); }, "needs vocabulary >= 2, got 1");
  expect_error([&] { fwd(nullptr, nll, lse, totals, x, t, 4, 10); }, "cross_entropy_forward: loss is null");
  expect_error([&] { fwd(loss, nll, lse, totals, nullptr, t, 4, 10); }, "logits is null");
  expect_error([&] { fwd(loss, nll, lse, totals, x, nullptr, 4, 10); }, "targets is null");
  expect_error([&] { fwd(loss, nullptr, lse, totals, x, t, 4, 10); }, "totals needs nll");
  expect_error([&] { fwd(loss, nll, lse, totals, fake<bf16>(5, 1), t, 4, 10); },
               "logits (0x50000001) is not aligned to 2");
  expect_error([&] { fwd(fake<float>(1, 2), nll, lse, totals, x, t, 4, 10); },
               "loss (0x10000002) is not aligned to 4");
  expect_error([&] { fwd(loss, nll, lse, fake<CrossEntropyTotals>(4, 2), x, t, 4, 10); }, "totals");
  // Overlaps: an output inside an input, and two outputs on each other.
  expect_error([&] { fwd(reinterpret_cast<float*>(fake<bf16>(5, 16)), nll, lse, totals, x, t, 4, 10); },
               "output loss overlaps input logits");
  expect_error([&] { fwd(loss, nll, loss + 2, totals, x, t, 4, 10); }, "outputs loss and lse overlap");
  expect_error([&] { fwd(loss, nll, lse, reinterpret_cast<CrossEntropyTotals*>(nll + 1), x, t, 4, 10); },
               "outputs nll and totals overlap");
  expect_error([&] { fwd(loss, nll, lse, totals, x, reinterpret_cast<const std::int32_t*>(lse), 4, 10); },
               "output lse overlaps input targets");
  // Optional outputs may be null; N = 0 needs no pointer at all.
  c.smoothing = 2.0f;
  expect_error([&] { fwd(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 0, 10); }, "smoothing 2");
  c.smoothing = 0.1f;
  EXPECT_NO_THROW(fwd(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 0, 10));
}

TEST(CrossEntropyValidation, BackwardRejectsBadArguments) {
  bf16* d = fake<bf16>(1);
  const bf16* x = fake<bf16>(2);
  const std::int32_t* t = fake<std::int32_t>(3);
  const float *lse = fake<float>(4), *g = fake<float>(5);
  CrossEntropyConfig c;
  const auto bwd = [&](bf16* dd, const bf16* xx, const std::int32_t* tt, const float* ll, const float* gg,
                       std::int64_t rows, std::int64_t vocab) {
    launch_cross_entropy_backward<bf16>(dd, xx, tt, ll, gg, rows, vocab, c, nullptr);
  };
  expect_error([&] { bwd(d, x, t, lse, g, -2, 10); }, "cross_entropy_backward: rows (N) -2");
  expect_error([&] { bwd(nullptr, x, t, lse, g, 4, 10); }, "dlogits is null");
  expect_error([&] { bwd(d, nullptr, t, lse, g, 4, 10); }, "logits is null");
  expect_error([&] { bwd(d, x, nullptr, lse, g, 4, 10); }, "targets is null");
  expect_error([&] { bwd(d, x, t, nullptr, g, 4, 10); }, "lse is null");
  expect_error([&] { bwd(d, x, t, lse, nullptr, 4, 10); }, "grad_loss is null");
  expect_error([&] { bwd(d, x, t, fake<float>(4, 1), g, 4, 10); }, "lse (0x40000001) is not aligned to 4");
  expect_error([&] { bwd(d, d + 3, t, lse, g, 4, 10); }, "output dlogits overlaps input logits");
  expect_error([&] { bwd(d, x, t, reinterpret_cast<const float*>(d + 8), g, 4, 10); },
               "output dlogits overlaps input lse");
  expect_error([&] { bwd(d, x, t, lse, reinterpret_cast<const float*>(d), 4, 10); },
               "output dlogits overlaps input grad_loss");
  EXPECT_NO_THROW(bwd(nullptr, nullptr, nullptr, nullptr, nullptr, 0, 10));

  expect_error(
      [&] {
        launch_cross_entropy_backward_scalar<bf16>(d, x, t, lse, std::numeric_limits<float>::infinity(), 4,
                                                   10, c, nullptr);
      },
      "cross_entropy_backward_scalar: grad_loss_sum inf must be finite");
  expect_error([&] { launch_cross_entropy_backward_scalar<bf16>(d, x, t, nullptr, 1.0f, 4, 10, c, nullptr); },
               "lse is null");
  EXPECT_NO_THROW(launch_cross_entropy_backward_scalar<bf16>(nullptr, nullptr, nullptr, nullptr, 1.0f, 0, 10,
                                                             c, nullptr));
}

TEST(CrossEntropyValidation, UnfusedLaunchersCheckTheLogpWorkspace) {
  EXPECT_EQ(cross_entropy_unfused_logp_bytes(DType::bf16, 3, 50257), 3u * 50257u * 2u);
  EXPECT_EQ(cross_entropy_unfused_logp_bytes(DType::f32, 0, 7), 0u);
  expect_error([] { cross_entropy_unfused_logp_bytes(DType::f32, -1, 7); }, "rows (N) -1");
  float *loss = fake<float>(1), *nll = fake<float>(2);
  bf16* logp = fake<bf16>(3);
  const bf16* x = fake<bf16>(4);
  const std::int32_t* t = fake<std::int32_t>(5);
  const CrossEntropyConfig c;
  const std::size_t need = cross_entropy_unfused_logp_bytes(DType::bf16, 4, 10);
  const auto fwd = [&](bf16* lp, std::size_t bytes, const bf16* xx) {
    launch_cross_entropy_forward_unfused<bf16>(loss, nll, nullptr, lp, bytes, xx, t, 4, 10, c, nullptr);
  };
  expect_error([&] { fwd(nullptr, need, x); }, "logp workspace is null, 80 bytes are needed");
  expect_error([&] { fwd(logp, need - 1, x); }, "logp workspace has 79 bytes, 80 are needed");
  expect_error([&] { fwd(fake<bf16>(3, 16), need, x); }, "logp workspace is not aligned to 256 bytes");
  expect_error([&] { fwd(logp, need, logp + 4); }, "output logp overlaps input logits");
}

TEST(CrossEntropyValidation, UnfusedBackwardChecksItsWorkspace) {
  // dlogp [N, V] then c_t [N] and c_o [N], each segment rounded up to 256 bytes.
  EXPECT_EQ(cross_entropy_unfused_backward_workspace_bytes(DType::bf16, 4, 10), 256u + 256u + 256u);
  EXPECT_EQ(cross_entropy_unfused_backward_workspace_bytes(DType::f32, 3, 50257),
            603136u + 256u + 256u);  // 3·50257·4 = 603084 -> 603136
  EXPECT_EQ(cross_entropy_unfused_backward_workspace_bytes(DType::f16, 200, 1), 512u + 512u + 512u);
  EXPECT_EQ(cross_entropy_unfused_backward_workspace_bytes(DType::f32, 0, 7), 0u);
  expect_error([] { cross_entropy_unfused_backward_workspace_bytes(DType::f32, -1, 7); }, "rows (N) -1");
  expect_error([] { cross_entropy_unfused_backward_workspace_bytes(DType::f32, 2, 0); },
               "vocabulary size (V) 0");

  bf16* d = fake<bf16>(1);
  const bf16* logp = fake<bf16>(2);
  const std::int32_t* t = fake<std::int32_t>(3);
  const float* g = fake<float>(4);
  void* ws = fake<unsigned char>(5);
  const std::size_t need = cross_entropy_unfused_backward_workspace_bytes(DType::bf16, 4, 10);
  CrossEntropyConfig c;
  c.smoothing = 0.1f;
  const auto bwd = [&](bf16* dd, const bf16* lp, const float* gg, void* w, std::size_t bytes,
                       std::int64_t rows, std::int64_t vocab) {
    launch_cross_entropy_backward_unfused<bf16>(dd, lp, t, gg, rows, vocab, c, w, bytes, nullptr);
  };
  expect_error([&] { bwd(d, logp, g, ws, need, -1, 10); }, "cross_entropy_backward_unfused: rows (N) -1");
  expect_error([&] { bwd(d, logp, g, ws, need, 4, 1); }, "needs vocabulary >= 2, got 1");
  expect_error([&] { bwd(d, logp, nullptr, ws, need, 4, 10); }, "grad_loss is null");
  expect_error([&] { bwd(nullptr, logp, g, ws, need, 4, 10); }, "dlogits is null");
  expect_error([&] { bwd(d, nullptr, g, ws, need, 4, 10); }, "logp is null");
  expect_error([&] { bwd(d, d + 8, g, ws, need, 4, 10); },
               "cross_entropy_backward_unfused: output dlogits overlaps input logp");
  expect_error([&] { bwd(d, logp, g, nullptr, need, 4, 10); }, "workspace is null, 768 bytes are needed");
  expect_error([&] { bwd(d, logp, g, ws, need - 1, 4, 10); }, "workspace has 767 bytes, 768 are needed");
  expect_error([&] { bwd(d, logp, g, fake<unsigned char>(5, 16), need, 4, 10); },
               "workspace is not aligned to 256 bytes");
  // The workspace is written: it may overlap neither an input nor dlogits.
  expect_error([&] { bwd(d, logp, g, fake<unsigned char>(2), need, 4, 10); },
               "output workspace overlaps input logp");
  expect_error([&] { bwd(d, logp, g, fake<unsigned char>(1), need, 4, 10); },
               "outputs dlogits and workspace overlap");
  expect_error(
      [&] { bwd(d, logp, reinterpret_cast<const float*>(fake<unsigned char>(5, 512)), ws, need, 4, 10); },
      "output workspace overlaps input grad_loss");
  // N = 0 needs no pointer and no workspace.
  EXPECT_NO_THROW(bwd(nullptr, nullptr, nullptr, nullptr, 0, 0, 10));
}

}  // namespace
}  // namespace seqbench::kernels
