// CriterionLayer on the GPU against reference/cross_entropy.h: random shapes (V from 1 to 50257,
// odd N, padded targets, both conventions selected by name, several ε, rows at and below
// max_batch_tokens) in all three dtypes. The layer's block is poisoned before each forward and
// dlogits is a guarded buffer; bounds are those of the kernels' own checks (derived in
// suites/operators/cross_entropy.cu, "Tolerances": the same formulas here, not loosened); totals
// (loss_sum, nll_sum, tokens) read from the device; bitwise determinism over repeated steps; and the
// steady state: one allocation at construction, none in later steps.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "core/cuda_check.h"
#include "core/device_buffer.h"
#include "core/dtype.h"
#include "core/error.h"
#include "kernels/cross_entropy.h"
#include "layers/criterion_layer.h"
#include "layers/device_allocator.h"
#include "reference/cross_entropy.h"
#include "suites/operators/check_util.h"
#include "tests/common/gpu_test.h"

namespace seqbench::layers {
namespace {

using namespace operators::check_util;

constexpr double kU32 = 0x1p-24;

struct Case {
  CriterionLayerConfig config;
  std::int64_t rows = 0, vocab = 0;
  double pad_share = 0.0, amp = 4.0;
  std::uint64_t seed = 0;
  std::string describe() const {
    std::ostringstream os;
    os << "N=" << rows << " V=" << vocab << " max_batch_tokens=" << config.max_batch_tokens << " "
       << config.convention << " epsilon=" << config.epsilon
       << " padding_idx=" << (config.padding_idx ? std::to_string(*config.padding_idx) : std::string("none"))
       << " share=" << pad_share << " amp=" << amp << " seed=" << seed;
    return os.str();
  }
};

std::vector<Case> make_cases(std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::int64_t> vocabs = {1, 2, 3, 127, 1023, 4097, 50257, 32000, 8, 257};
  while (vocabs.size() < 16) vocabs.push_back(1 + static_cast<std::int64_t>(rng() % 60000));
  std::vector<Case> cases;
  for (std::size_t i = 0; i < vocabs.size(); ++i) {
    Case k;
    k.vocab = vocabs[i];
    const std::int64_t cap = std::max<std::int64_t>(1, std::min<std::int64_t>(64, 300'000 / k.vocab));
    k.config.max_batch_tokens = static_cast<int>(1 + rng() % static_cast<std::uint64_t>(cap));
    k.rows =
        i % 2 == 0
            ? k.config.max_batch_tokens
            : 1 + static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(k.config.max_batch_tokens));
    if (i % 3 == 0 && k.rows > 1) k.rows |= 1;  // odd N
    k.rows = std::min<std::int64_t>(k.rows, k.config.max_batch_tokens);
    k.config.convention = i % 2 == 0 ? "fairseq" : "paper";
    const double eps[] = {0.0, 0.1, static_cast<double>(rng() % 1000) / 1000.0};
    k.config.epsilon = eps[(i / 2) % 3];
    if (k.config.convention == "fairseq" && k.vocab < 2) k.config.epsilon = 0.0;
    switch (i % 3) {
      case 0:
        break;  // every row counts
      case 1:
        k.config.padding_idx =
            static_cast<std::int32_t>(std::min<std::int64_t>(1, k.vocab - 1));  // fairseq pad
        break;
      default:
        k.config.padding_idx = -100;  // PyTorch's ignore_index
        break;
    }
    k.pad_share = k.config.padding_idx ? static_cast<double>(rng() % 5) / 8.0 : 0.0;
    const double amps[] = {1.0, 4.0, 16.0};
    k.amp = amps[rng() % 3];
    k.seed = rng();
    cases.push_back(k);
  }
  return cases;
}

struct Tallies {
  Tally fwd, totals, bwd, bwd_scalar, determinism, steady;
  explicit Tallies(const std::string& dt)
      : fwd("layers/criterion/fwd/" + dt, kRule),
        totals("layers/criterion/totals/" + dt, kRule),
        bwd("layers/criterion/bwd/" + dt, kRule),
        bwd_scalar("layers/criterion/bwd_scalar/" + dt, kRule),
        determinism("layers/criterion/determinism/" + dt, "bitwise: later steps reproduce every output"),
        steady("layers/criterion/steady_state/" + dt, "one allocation at construction; none in later steps") {
  }
  static constexpr const char* kRule =
      "the per-element bounds of suites/operators/cross_entropy.cu (fused forward, totals, fused backward); "
      "ignored rows exact";
};

template <class T>
void check_case(const Case& k, Tallies& t) {
  const DType dt = DTypeTraits<T>::dtype;
  const double u = kU32, ut = unit_roundoff(dt), eta = underflow_error(dt);
  const std::string where = k.describe();
  CriterionLayerConfig c = k.config;
  c.dtype = dt;
  const kernels::CrossEntropyConfig kc = c.kernel_config();
  const auto N = static_cast<std::size_t>(k.rows), V = static_cast<std::size_t>(k.vocab), n = N * V;

  const std::vector<T> logits =
      random_values<T>(n, k.seed + 1, static_cast<float>(-k.amp), static_cast<float>(k.amp));
  std::vector<std::int32_t> targets(N);
  {
    std::mt19937_64 rng(k.seed + 2);
    for (auto& v : targets) {
      const bool pad = c.padding_idx && static_cast<double>(rng() % 1000) < 1000.0 * k.pad_share;
      v = pad ? *c.padding_idx : static_cast<std::int32_t>(rng() % V);
    }
  }
  const std::vector<float> grad = random_values<float>(N, k.seed + 4, -1.0f, 1.0f);
  const float grad_sum = 0.75f;

  ref::CrossEntropyConfig rc;
  rc.smoothing = static_cast<double>(kc.smoothing);
  rc.convention = kc.convention == kernels::CrossEntropySmoothing::paper ? ref::SmoothingConvention::paper
                                                                         : ref::SmoothingConvention::fairseq;
  rc.ignore_index = kc.ignore_index;
  const ref::Matrix xm = to_matrix(logits, k.rows, k.vocab);
  ref::TargetVector tv(k.rows);
  for (std::size_t r = 0; r < N; ++r) tv(static_cast<ref::Index>(r)) = targets[r];
  const ref::CrossEntropyForward want = ref::cross_entropy_forward(xm, tv, rc);
  const ref::Matrix want_d = ref::cross_entropy_backward(xm, tv, rc, to_vector(grad));
  const ref::Matrix want_ds = ref::cross_entropy_backward(xm, tv, rc, static_cast<double>(grad_sum));
  const kernels::CrossEntropyWeights w = kernels::cross_entropy_weights(kc, k.vocab);
  const double wd = w.target - w.other, wo = w.other;
  const auto counted = [&](std::size_t r) { return !(kc.ignore_index && targets[r] == *kc.ignore_index); };

  CudaAllocator cuda;
  CountingAllocator counter(cuda);
  CriterionLayer layer(c, counter);
  DeviceBuffer<T> x_d(logits);
  DeviceBuffer<std::int32_t> tg(targets);
  DeviceBuffer<float> g_d(grad);
  Guarded<T> d(n, 0), ds(n, 0);

  std::vector<float> loss1, nll1, lse1;
  kernels::CrossEntropyTotals tot1;
  std::vector<T> d1, ds1;
  for (int step = 0; step < 3; ++step) {
    SEQBENCH_CUDA_CHECK(cudaMemset(layer.memory().block(), 0xFF, layer.block_bytes()));
    d.poison();
    ds.poison();
    const CriterionOutputs out = layer.forward(x_d.data(), tg.data(), k.rows, k.vocab, nullptr);
    layer.backward(d.data(), x_d.data(), tg.data(), g_d.data(), nullptr);
    layer.backward(ds.data(), x_d.data(), tg.data(), grad_sum, nullptr);
    SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<float> l(N), nl(N), ls(N);
    kernels::CrossEntropyTotals tot;
    SEQBENCH_CUDA_CHECK(cudaMemcpy(l.data(), out.loss, N * sizeof(float), cudaMemcpyDeviceToHost));
    SEQBENCH_CUDA_CHECK(cudaMemcpy(nl.data(), out.nll, N * sizeof(float), cudaMemcpyDeviceToHost));
    SEQBENCH_CUDA_CHECK(cudaMemcpy(ls.data(), out.lse, N * sizeof(float), cudaMemcpyDeviceToHost));
    SEQBENCH_CUDA_CHECK(cudaMemcpy(&tot, out.totals, sizeof(tot), cudaMemcpyDeviceToHost));
    Tally& bt = step == 0 ? t.bwd : t.determinism;
    std::vector<T> dd = d.download(bt, where),
                   dds = ds.download(step == 0 ? t.bwd_scalar : t.determinism, where);
    if (step == 0) {
      loss1 = l, nll1 = nl, lse1 = ls, tot1 = tot, d1 = dd, ds1 = dds;
      t.steady.add_exact(out.rows == k.rows, where, "outputs.rows");
    } else {
      t.determinism.add_exact(same_bits(l, loss1) && same_bits(nl, nll1) && same_bits(ls, lse1) &&
                                  same_bits(std::vector<kernels::CrossEntropyTotals>{tot},
                                            std::vector<kernels::CrossEntropyTotals>{tot1}),
                              where, "forward of step " + std::to_string(step) + " differs bitwise");
      t.determinism.add_exact(same_bits(dd, d1) && same_bits(dds, ds1), where,
                              "backward of step " + std::to_string(step) + " differs bitwise");
    }
  }
  t.steady.add_exact(counter.stats().allocations == 1, where,
                     std::to_string(counter.stats().allocations) + " allocations in three steps");

  // Row statistics and the bounds of suites/operators/cross_entropy.cu ("Fused forward", "Totals",
  // "Fused backward"), with the plan's per-thread counts.
  const kernels::CrossEntropyPlan plan = kernels::cross_entropy_plan(dt, k.vocab);
  const double nt = static_cast<double>(plan.max_thread_elements(k.vocab));
  const double R = static_cast<double>(plan.max_thread_rescales(k.vocab));
  const double logv = std::log(static_cast<double>(V)), Vd = static_cast<double>(V);
  double sum_bound = 0, nll_sum_bound = 0, abs_loss = 0, abs_nll = 0;
  std::int32_t tokens = 0;
  for (std::size_t r = 0; r < N; ++r) {
    const auto ri = static_cast<ref::Index>(r);
    if (!counted(r)) {
      t.fwd.add(loss1[r], 0.0, 0.0, where + " loss (ignored row)", r);
      t.fwd.add(nll1[r], 0.0, 0.0, where + " nll (ignored row)", r);
      t.fwd.add(lse1[r], 0.0, 0.0, where + " lse (ignored row)", r);
      for (std::size_t j = 0; j < V; ++j) {
        t.bwd.add(as_double(d1[r * V + j]), 0.0, 0.0, where + " dlogits (ignored row)", r * V + j);
        t.bwd_scalar.add(as_double(ds1[r * V + j]), 0.0, 0.0, where + " dlogits (ignored row)", r * V + j);
      }
      continue;
    }
    ++tokens;
    double mx = -INFINITY, mn = INFINITY, xa = 0, as = 0, sx = 0;
    for (std::size_t j = 0; j < V; ++j) {
      const double x = xm(ri, static_cast<ref::Index>(j));
      mx = std::max(mx, x);
      mn = std::min(mn, x);
      xa = std::max(xa, std::fabs(x));
      as += std::fabs(x);
      sx += x;
    }
    double se = 0;
    for (std::size_t j = 0; j < V; ++j) se += std::exp(xm(ri, static_cast<ref::Index>(j)) - mx);
    const double lse = mx + std::log(se), smooth = Vd * lse - sx;
    const double wl = want.loss(ri), wn = want.nll(ri);
    const double dS = u * (3 * (mx - mn) + 6 * (R + 1) + nt + 16);
    const double b_lse = dS + u * (4 * std::fabs(lse) + xa + 2 * logv);
    const double b_nll = b_lse + u * wn;
    const double b_smooth = Vd * b_lse + (nt + 10) * u * as + u * smooth;
    const double b_loss = std::fabs(wd) * b_nll + wo * b_smooth + u * (std::fabs(wd) * wn + 2 * wo * smooth) +
                          u * std::fabs(wl);
    t.fwd.add(lse1[r], lse, b_lse, where + " lse", r);
    t.fwd.add(nll1[r], wn, b_nll, where + " nll", r);
    t.fwd.add(loss1[r], wl, b_loss, where + " loss", r);
    sum_bound += b_loss;
    nll_sum_bound += b_nll;
    abs_loss += std::fabs(wl);
    abs_nll += std::fabs(wn);
    const double e_lse = std::fabs(static_cast<double>(lse1[r]) - lse);
    for (std::size_t j = 0; j < V; ++j) {
      const auto ji = static_cast<ref::Index>(j);
      const double x = xm(ri, ji), q = std::exp(x - lse);
      const double p = static_cast<std::int32_t>(j) == targets[r] ? w.target : w.other;
      const double dq = std::expm1(e_lse + u * (2 * std::fabs(x - lse) + std::fabs(lse) + 5));
      const auto bound_d = [&](double gg, double want_v) {
        return (1 + ut) * (std::fabs(gg) * (q * dq + u * p + u * std::fabs(q - p)) + u * std::fabs(want_v)) +
               ut * std::fabs(want_v) + eta;
      };
      t.bwd.add(as_double(d1[r * V + j]), want_d(ri, ji), bound_d(grad[r], want_d(ri, ji)),
                where + " dlogits", r * V + j);
      t.bwd_scalar.add(as_double(ds1[r * V + j]), want_ds(ri, ji), bound_d(grad_sum, want_ds(ri, ji)),
                       where + " dlogits", r * V + j);
    }
  }
  const double depth = std::ceil(static_cast<double>(N) / kernels::kCrossEntropyTotalsThreads) + 10;
  t.totals.add(tot1.loss_sum, want.loss_sum, sum_bound + depth * u * abs_loss + u * std::fabs(want.loss_sum),
               where + " loss_sum", 0);
  t.totals.add(tot1.nll_sum, want.nll_sum, nll_sum_bound + depth * u * abs_nll + u * std::fabs(want.nll_sum),
               where + " nll_sum", 0);
  t.totals.add_exact(tot1.tokens == tokens, where,
                     "tokens " + std::to_string(tot1.tokens) + ", want " + std::to_string(tokens));
  t.totals.add_exact(tot1.invalid_targets == 0, where,
                     "invalid_targets " + std::to_string(tot1.invalid_targets));
}

template <class T>
void run_all(std::uint64_t seed) {
  Tallies t(DTypeTraits<T>::name);
  for (const Case& k : make_cases(seed ^ (static_cast<std::uint64_t>(DTypeTraits<T>::dtype) + 7)))
    check_case<T>(k, t);
  for (const Tally* tally : {&t.fwd, &t.totals, &t.bwd, &t.bwd_scalar, &t.determinism, &t.steady}) {
    const CheckResult r = tally->result();
    EXPECT_TRUE(r.passed) << r.name << ": " << r.detail;
  }
}

TEST(CriterionLayerGpu, MatchesTheReferenceInEveryDtype) {
  SEQBENCH_REQUIRE_GPU();
  run_all<float>(20261123);
  run_all<__half>(20261123);
  run_all<__nv_bfloat16>(20261123);
}

TEST(CriterionLayerGpu, RowsAboveTheMaximumAreRefusedWithBothNumbers) {
  SEQBENCH_REQUIRE_GPU();
  CriterionLayerConfig c;
  c.max_batch_tokens = 16;
  c.dtype = DType::f32;
  CudaAllocator cuda;
  CountingAllocator counter(cuda);
  CriterionLayer layer(c, counter);
  DeviceBuffer<float> logits(17 * 5);
  DeviceBuffer<std::int32_t> targets(17);
  try {
    (void)layer.forward(logits.data(), targets.data(), 17, 5, nullptr);
    ADD_FAILURE() << "17 rows ran on a layer planned for 16";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("rows 17"), std::string::npos) << what;
    EXPECT_NE(what.find("max_batch_tokens 16"), std::string::npos) << what;
  }
  EXPECT_EQ(counter.stats().allocations, 1u);
}

}  // namespace
}  // namespace seqbench::layers
