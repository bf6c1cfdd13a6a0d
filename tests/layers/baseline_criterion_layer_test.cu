// BaselineCriterionLayer on the GPU against reference/cross_entropy.h, and beside the managed
// CriterionLayer on the same inputs: random shapes (V from 2 to 50257, odd N, padded targets
// ignored, both conventions, several ε, rows at and below max_batch_tokens) in all three dtypes;
// dlogits guarded and poisoned before each step; loss, nll and totals read from the device (lse is
// null: eager keeps logp); the eager allocation pattern (the caching allocator reaches the device
// only in the first step; after a non-retaining backward only the outputs and the ones buffer are
// held; retain_graph keeps logp and a second backward gives the same bounds).
//
// Tolerances: the baseline runs kernels/cross_entropy.h's unfused launches, so its bounds are the
// ones derived for them in suites/operators/cross_entropy.cu ("Unfused forward", "Unfused
// backward", "Totals"), with u = 2^-24 (fp32), u_T = unit_roundoff(T), η = underflow_error(T),
// n_u = ceil(V/256) scalar additions per thread, per counted row with range Z, lse, smooth,
// weights w_d = w_t - w_o and w_o:
//   B_lse_u  = u·(2Z + 4 + n_u + 10 + |lse| + 2 ln V + 2)
//   B_nll_u  = B_lse_u + (u + u_T)·nll + η
//   B_smth_u = V·(B_lse_u + η) + (u + u_T + (n_u + 10)·u)·smooth
//   B_loss_u = |w_d|·B_nll_u + w_o·B_smth_u + u(|w_d|·nll + 2w_o·smooth) + u·|loss|
//   totals   : Σ_r B_r + (ceil(N/1024) + 10)·u·Σ|loss_r| + u|sum| (likewise nll); tokens exact
//   dlogits  : E'_j + u_T(|d_j| + E'_j) + η with E_j = β_j + q_j·δe_j·(|g| + B_S) + q_j·B_S,
//              E'_j = E_j + u(|d_j| + E_j), β, B_S and δe_j as derived there.
// The scalar form feeds g = fl(1·grad_loss_sum) = grad_loss_sum exactly (launch_scale<float> of
// ones), so its bound is the same with g = grad_loss_sum. Ignored rows: exactly 0 (loss, nll,
// dlogits) -- and exactly 0 in the managed layer too.

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
#include "kernels/cross_entropy.h"
#include "layers/baseline_criterion_layer.h"
#include "layers/caching_allocator.h"
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
  std::vector<std::int64_t> vocabs = {2, 3, 127, 1023, 4097, 50257, 32000, 8, 257};
  while (vocabs.size() < 16) vocabs.push_back(2 + static_cast<std::int64_t>(rng() % 60000));
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
    if (i % 3 == 0 && k.rows > 1) k.rows = std::min<std::int64_t>(k.rows | 1, k.config.max_batch_tokens);
    k.config.convention = i % 2 == 0 ? "fairseq" : "paper";
    const double eps[] = {0.0, 0.1, static_cast<double>(rng() % 1000) / 1000.0};
    k.config.epsilon = eps[(i / 2) % 3];
    if (i % 3 != 0) k.config.padding_idx = i % 3 == 1 ? 1 : -100;  // fairseq's pad, PyTorch's ignore_index
    k.pad_share = k.config.padding_idx ? static_cast<double>(rng() % 5) / 8.0 : 0.0;
    const double amps[] = {1.0, 4.0, 16.0};
    k.amp = amps[rng() % 3];
    k.seed = rng();
    cases.push_back(k);
  }
  return cases;
}

struct Tallies {
  Tally fwd, totals, bwd, bwd_scalar, retained, managed_zeros, allocations;
  explicit Tallies(const std::string& dt)
      : fwd("layers/baseline_criterion/fwd/" + dt, kRule),
        totals("layers/baseline_criterion/totals/" + dt, kRule),
        bwd("layers/baseline_criterion/bwd/" + dt, kRule),
        bwd_scalar("layers/baseline_criterion/bwd_scalar/" + dt, kRule),
        retained("layers/baseline_criterion/retain_graph/" + dt,
                 "a second backward of a retained graph within the same bounds; logp kept"),
        managed_zeros("layers/baseline_criterion/managed_zeros/" + dt,
                      "the managed layer is exactly 0 on ignored rows, as the baseline"),
        allocations("layers/baseline_criterion/allocations/" + dt,
                    "device allocations only in the first step; after a non-retaining backward only the "
                    "outputs and the ones buffer held") {}
  static constexpr const char* kRule =
      "the unfused bounds of suites/operators/cross_entropy.cu (forward, totals, backward); ignored rows "
      "exact";
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

  DeviceBuffer<T> x_d(logits);
  DeviceBuffer<std::int32_t> tg(targets);
  DeviceBuffer<float> g_d(grad);
  Guarded<T> d(n, 0), ds(n, 0), dr(n, 0), dm(n, 0);
  CudaAllocator cuda;
  CountingAllocator counter(cuda), managed_counter(cuda);
  std::vector<float> loss1(N), nll1(N);
  kernels::CrossEntropyTotals tot1;
  std::vector<T> d1, ds1, dr1;
  std::uint64_t first_step = 0;
  {
    CachingAllocator cache(counter);
    BaselineCriterionLayer layer(c, cache);
    CriterionLayer managed(c, managed_counter);
    for (int step = 0; step < 3; ++step) {
      d.poison();
      ds.poison();
      const CriterionOutputs out = layer.forward(x_d.data(), tg.data(), k.rows, k.vocab, nullptr);
      t.fwd.add_exact(out.lse == nullptr && out.rows == k.rows, where,
                      "outputs.lse is not null or rows wrong");
      if (step < 2) {
        layer.backward(d.data(), x_d.data(), tg.data(), g_d.data(), nullptr, true);
        layer.backward(ds.data(), x_d.data(), tg.data(), grad_sum, nullptr);
        SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
        const std::size_t held = cache.stats().allocated_bytes;
        const std::size_t want_held =
            2 * CachingAllocator::round_size(N * sizeof(float)) +
            CachingAllocator::round_size(sizeof(kernels::CrossEntropyTotals)) +
            CachingAllocator::round_size(static_cast<std::size_t>(c.max_batch_tokens) * 4);
        t.allocations.add_exact(
            layer.saved_bytes() == 0 && held == want_held, where,
            std::to_string(held) + " bytes held after a backward, want " + std::to_string(want_held));
      } else {
        // retain_graph: two backwards of one forward.
        layer.backward(dr.data(), x_d.data(), tg.data(), g_d.data(), nullptr, true);
        t.retained.add_exact(layer.saved_bytes() > 0, where, "retain_graph dropped logp");
        dr.poison();
        layer.backward(dr.data(), x_d.data(), tg.data(), g_d.data(), nullptr, true);
        SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
        dr1 = dr.download(t.retained, where);
      }
      if (step == 0) {
        first_step = counter.stats().allocations;
        SEQBENCH_CUDA_CHECK(cudaMemcpy(loss1.data(), out.loss, N * sizeof(float), cudaMemcpyDeviceToHost));
        SEQBENCH_CUDA_CHECK(cudaMemcpy(nll1.data(), out.nll, N * sizeof(float), cudaMemcpyDeviceToHost));
        SEQBENCH_CUDA_CHECK(cudaMemcpy(&tot1, out.totals, sizeof(tot1), cudaMemcpyDeviceToHost));
        d1 = d.download(t.bwd, where);
        ds1 = ds.download(t.bwd_scalar, where);
      }
    }
    t.allocations.add_exact(counter.stats().allocations == first_step, where,
                            "later steps reached the device (" + std::to_string(counter.stats().allocations) +
                                " allocations, " + std::to_string(first_step) + " in the first step)");
    (void)managed.forward(x_d.data(), tg.data(), k.rows, k.vocab, nullptr);
    managed.backward(dm.data(), x_d.data(), tg.data(), g_d.data(), nullptr);
    SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
  }
  const std::vector<T> dm1 = dm.download(t.managed_zeros, where);

  const double nu = std::ceil(static_cast<double>(V) / 256.0), logv = std::log(static_cast<double>(V));
  const double Vd = static_cast<double>(V);
  double sum_bound = 0, nll_sum_bound = 0, abs_loss = 0, abs_nll = 0;
  std::int32_t tokens = 0;
  for (std::size_t r = 0; r < N; ++r) {
    const auto ri = static_cast<ref::Index>(r);
    if (!counted(r)) {
      t.fwd.add(loss1[r], 0.0, 0.0, where + " loss (ignored row)", r);
      t.fwd.add(nll1[r], 0.0, 0.0, where + " nll (ignored row)", r);
      for (std::size_t j = 0; j < V; ++j) {
        t.bwd.add(as_double(d1[r * V + j]), 0.0, 0.0, where + " dlogits (ignored row)", r * V + j);
        t.bwd_scalar.add(as_double(ds1[r * V + j]), 0.0, 0.0, where + " dlogits (ignored row)", r * V + j);
        t.retained.add(as_double(dr1[r * V + j]), 0.0, 0.0, where + " dlogits (ignored row)", r * V + j);
        t.managed_zeros.add(as_double(dm1[r * V + j]), 0.0, 0.0, where + " dlogits (ignored row)", r * V + j);
      }
      continue;
    }
    ++tokens;
    double mx = -INFINITY, mn = INFINITY, sx = 0;
    for (std::size_t j = 0; j < V; ++j) {
      const double x = xm(ri, static_cast<ref::Index>(j));
      mx = std::max(mx, x);
      mn = std::min(mn, x);
      sx += x;
    }
    double se = 0;
    for (std::size_t j = 0; j < V; ++j) se += std::exp(xm(ri, static_cast<ref::Index>(j)) - mx);
    const double lse = mx + std::log(se), smooth = Vd * lse - sx, range = mx - mn;
    const double wl = want.loss(ri), wn = want.nll(ri);
    // Unfused forward.
    const double ub_lse = u * (2 * range + 4 + nu + 10 + std::fabs(lse) + 2 * logv + 2);
    const double ub_nll = ub_lse + (u + ut) * wn + eta;
    const double ub_smooth = Vd * (ub_lse + eta) + (u + ut + (nu + 10) * u) * smooth;
    const double ub_loss = std::fabs(wd) * ub_nll + wo * ub_smooth +
                           u * (std::fabs(wd) * wn + 2 * wo * smooth) + u * std::fabs(wl);
    t.fwd.add(nll1[r], wn, ub_nll, where + " nll", r);
    t.fwd.add(loss1[r], wl, ub_loss, where + " loss", r);
    sum_bound += ub_loss;
    nll_sum_bound += ub_nll;
    abs_loss += std::fabs(wl);
    abs_nll += std::fabs(wn);
    // Unfused backward, per-row and scalar upstream gradients.
    const auto check_row = [&](Tally& tally, const std::vector<T>& got, const ref::Matrix& want_m, double g) {
      const double ag = std::fabs(g);
      const double b_co = (1 + 4 * u) * (2 * u + ut) * ag * wo + eta;
      const double b_ct = (1 + 4 * u) * (2 * u + ut) * ag * std::fabs(wd) + eta;
      const double beta_t = b_ct + b_co + (1 + u) * (u + ut) * (ag * w.target + b_ct + b_co) + eta;
      const double sum_beta = (Vd - 1) * b_co + beta_t;
      const double b_S = sum_beta + (nu + 10) * u * (ag + sum_beta) + u * ag;
      for (std::size_t j = 0; j < V; ++j) {
        const auto ji = static_cast<ref::Index>(j);
        const double x = xm(ri, ji), q = std::exp(x - lse);
        const double de = std::expm1(ub_lse + (u + ut) * std::fabs(x - lse) + eta + 5 * u);
        const double beta = static_cast<std::int32_t>(j) == targets[r] ? beta_t : b_co;
        const double ad = std::fabs(want_m(ri, ji));
        const double e0 = beta + q * de * (ag + b_S) + q * b_S;
        const double e1 = e0 + u * (ad + e0);
        tally.add(as_double(got[r * V + j]), want_m(ri, ji), e1 + ut * (ad + e1) + eta, where + " dlogits",
                  r * V + j);
      }
    };
    check_row(t.bwd, d1, want_d, grad[r]);
    check_row(t.bwd_scalar, ds1, want_ds, grad_sum);
    check_row(t.retained, dr1, want_d, grad[r]);
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
  for (const Case& k : make_cases(seed ^ (static_cast<std::uint64_t>(DTypeTraits<T>::dtype) + 19)))
    check_case<T>(k, t);
  for (const Tally* tally :
       {&t.fwd, &t.totals, &t.bwd, &t.bwd_scalar, &t.retained, &t.managed_zeros, &t.allocations}) {
    const CheckResult r = tally->result();
    EXPECT_TRUE(r.passed) << r.name << ": " << r.detail;
  }
}

TEST(BaselineCriterionLayerGpu, MatchesTheReferenceInEveryDtype) {
  SEQBENCH_REQUIRE_GPU();
  run_all<float>(20261124);
  run_all<__half>(20261124);
  run_all<__nv_bfloat16>(20261124);
}

}  // namespace
}  // namespace seqbench::layers
