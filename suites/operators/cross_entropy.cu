// Operator-suite experiments and GPU checks for the label-smoothed cross-entropy family
// (kernels/cross_entropy.h, LightSeq2's criterion).
//
// Experiments: N batch tokens x V vocabulary, V in {32000 (Transformer-big BPE), 50257 (GPT-2, odd:
// rows are not 16-byte aligned)}, N in {4096, 8192} (quick: 1024), fp32 and bf16 (quick: bf16),
// forward and backward; baseline "unfused" (eager PyTorch, kernels/cross_entropy.h: log_softmax
// writing logp in T, NLL + smoothing sum, totals; backward the five launches of autograd from logp),
// variant "fused". fairseq convention, ε = 0.1, ignore_index = 1 (fairseq's padding index); targets
// are drawn from [2, V) and about 5% of the rows (each row independently with probability 1/20,
// deterministic from the seed) hold the padding index, as a padded batch does.
// Minimal bytes (both variants: the minimal traffic of the operation, so the speedup shows the
// baseline's extra traffic): only the bytes the operation needs. An ignored row's loss is 0
// whatever its logits are, so its logits (and, in the backward, its lse and grad_loss) need not be
// read; the fused kernels indeed read nothing of them. With C counted rows:
//   forward  C·V·sizeof(T) logits + 4N targets read, 12N (loss, nll, lse) + 16 (totals) written;
//   backward C·V·sizeof(T) logits + 4N targets + 8C (lse, grad_loss) read, N·V·sizeof(T) dlogits
//            written (ignored rows are written as zeros).
// Every shape of the full and quick grids has >= 16M elements (not the simt-only tiny shapes).
//
// Checks: fused forward (loss, nll, lse), totals, fused backward (per-row and scalar upstream
// gradient), unfused forward and backward, against reference/cross_entropy.h in double; the
// out-of-range-target signal; rows with -inf logits (masked vocabulary entries); bitwise
// repeatability of the fused kernels. >= 50 shapes x 3 dtypes, outputs poisoned, guards after every
// output.

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "core/cuda_check.h"
#include "core/device_buffer.h"
#include "core/dtype.h"
#include "kernels/cross_entropy.h"
#include "reference/cross_entropy.h"
#include "suites/operators/check_util.h"
#include "suites/operators/operators.h"

namespace seqbench::operators {
namespace {

using namespace check_util;
using kernels::CrossEntropyConfig;
using kernels::CrossEntropySmoothing;
using kernels::CrossEntropyTotals;

constexpr float kBenchSmoothing = 0.1f;
constexpr std::int32_t kBenchPad = 1;
constexpr std::uint64_t kBenchSeed = 20240923;

// ---------------------------------------------------------------------------------------------
// Experiments

std::vector<std::int32_t> random_targets(std::size_t n, std::uint64_t seed, std::int32_t lo,
                                         std::int32_t hi) {
  std::vector<std::int32_t> t(n);
  std::uint64_t state = seed;
  for (auto& v : t)
    v = lo + static_cast<std::int32_t>(splitmix64(state) % static_cast<std::uint64_t>(hi - lo));
  return t;
}

// The experiments' targets: uniform in [2, V), about 5% of rows (probability 1/20 each) set to the
// padding index. Deterministic from the seed.
constexpr std::uint64_t kBenchPadOneIn = 20;
std::vector<std::int32_t> bench_targets(std::int64_t rows, std::int64_t vocab) {
  std::vector<std::int32_t> t = random_targets(static_cast<std::size_t>(rows), kBenchSeed + 1, kBenchPad + 1,
                                               static_cast<std::int32_t>(vocab));
  std::uint64_t state = kBenchSeed + 4;
  for (auto& v : t)
    if (splitmix64(state) % kBenchPadOneIn == 0) v = kBenchPad;
  return t;
}

CrossEntropyConfig bench_config() {
  CrossEntropyConfig c;
  c.smoothing = kBenchSmoothing;
  c.convention = CrossEntropySmoothing::fairseq;
  c.ignore_index = kBenchPad;
  return c;
}

template <class T>
struct BenchState {
  std::int64_t rows, vocab;
  DeviceBuffer<T> logits, dlogits, logp;
  DeviceBuffer<unsigned char> workspace;  // the unfused backward's
  DeviceBuffer<std::int32_t> targets;
  DeviceBuffer<float> loss, nll, lse, grad;
  DeviceBuffer<CrossEntropyTotals> totals;
  BenchState(std::int64_t n, std::int64_t v, bool backward)
      : rows(n),
        vocab(v),
        logits(static_cast<std::size_t>(n * v)),
        dlogits(backward ? static_cast<std::size_t>(n * v) : 0),
        logp(static_cast<std::size_t>(n * v)),
        workspace(backward
                      ? kernels::cross_entropy_unfused_backward_workspace_bytes(DTypeTraits<T>::dtype, n, v)
                      : 0),
        targets(bench_targets(n, v)),
        loss(static_cast<std::size_t>(n)),
        nll(static_cast<std::size_t>(n)),
        lse(static_cast<std::size_t>(n)),
        grad(static_cast<std::size_t>(n)),
        totals(1) {
    fill(logits, kBenchSeed + 2, -8.0f, 8.0f);
    fill(grad, kBenchSeed + 3, 0.0f, 1.0f);
  }
};

template <class T>
ExperimentSpec cross_entropy_experiment(std::int64_t rows, std::int64_t vocab, bool backward) {
  const std::string dtype = DTypeTraits<T>::name;
  const std::vector<std::int32_t> targets = bench_targets(rows, vocab);
  const auto ignored = static_cast<std::int64_t>(std::count(targets.begin(), targets.end(), kBenchPad));
  ExperimentSpec e;
  e.name = std::string(backward ? "cross_entropy_bwd/" : "cross_entropy_fwd/") + dtype +
           "/N=" + std::to_string(rows) + ",V=" + std::to_string(vocab);
  e.params = {{"op", "label_smoothed_cross_entropy"},
              {"direction", backward ? "bwd" : "fwd"},
              {"dtype", dtype},
              {"rows", rows},
              {"vocab", vocab},
              {"elements", rows * vocab},
              {"convention", "fairseq"},
              {"smoothing", std::round(kBenchSmoothing * 1e6) / 1e6},
              {"ignore_index", kBenchPad},
              {"ignored_rows", ignored},
              {"figure", "LightSeq2 criterion"}};
  e.baseline = "unfused";
  // Minimal bytes (see the top of this file): ignored rows' logits, lse and grad_loss are not needed.
  const double s = sizeof(T), n = static_cast<double>(rows), v = static_cast<double>(vocab), nv = n * v;
  const double counted = static_cast<double>(rows - ignored);
  const double bytes =
      backward ? counted * v * s + 4.0 * n + 8.0 * counted + nv * s : counted * v * s + 16.0 * n + 16.0;
  // Per element of a counted row: forward max, fma, exp2, two adds = 5; backward fma, exp2,
  // subtract, multiply = 4 (ignored rows: none).
  const double flops = counted * v * (backward ? 4.0 : 5.0);
  e.variants = {{"unfused", bytes, flops}, {"fused", bytes, flops}};
  e.dump_variant = "fused";
  e.prepare = [rows, vocab, backward] {
    auto st = std::make_shared<BenchState<T>>(rows, vocab, backward);
    const CrossEntropyConfig config = bench_config();
    PreparedExperiment p;
    if (!backward) {
      p.variants.push_back([st, config](cudaStream_t stream) {
        kernels::launch_cross_entropy_forward_unfused<T>(
            st->loss.data(), st->nll.data(), st->totals.data(), st->logp.data(), st->logp.bytes(),
            st->logits.data(), st->targets.data(), st->rows, st->vocab, config, stream);
      });
      p.variants.push_back([st, config](cudaStream_t stream) {
        kernels::launch_cross_entropy_forward<T>(st->loss.data(), st->nll.data(), st->lse.data(),
                                                 st->totals.data(), st->logits.data(), st->targets.data(),
                                                 st->rows, st->vocab, config, stream);
      });
    } else {
      // What each backward reads: the fused forward's lse, the unfused forward's logp.
      kernels::launch_cross_entropy_forward<T>(st->loss.data(), st->nll.data(), st->lse.data(), nullptr,
                                               st->logits.data(), st->targets.data(), rows, vocab, config,
                                               nullptr);
      kernels::launch_cross_entropy_forward_unfused<T>(st->loss.data(), st->nll.data(), nullptr,
                                                       st->logp.data(), st->logp.bytes(), st->logits.data(),
                                                       st->targets.data(), rows, vocab, config, nullptr);
      SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
      p.variants.push_back([st, config](cudaStream_t stream) {
        kernels::launch_cross_entropy_backward_unfused<T>(
            st->dlogits.data(), st->logp.data(), st->targets.data(), st->grad.data(), st->rows, st->vocab,
            config, st->workspace.data(), st->workspace.bytes(), stream);
      });
      p.variants.push_back([st, config](cudaStream_t stream) {
        kernels::launch_cross_entropy_backward<T>(st->dlogits.data(), st->logits.data(), st->targets.data(),
                                                  st->lse.data(), st->grad.data(), st->rows, st->vocab,
                                                  config, stream);
      });
    }
    // For `seqbench dump`: the inputs and what the fused variant wrote (suites/pytorch's parity);
    // the convention, smoothing and ignore_index are in params. The backward's lse is the fused
    // forward's (as the fused backward reads it), its upstream gradient grad_loss fp32 [N].
    p.dump = [st, backward] {
      const std::vector<std::int64_t> matrix = {st->rows, st->vocab}, rows = {st->rows};
      std::vector<DumpArray> a;
      a.push_back(dump_array("logits", "input", st->logits, matrix));
      a.push_back(dump_array("targets", "input", st->targets, rows));
      if (!backward) {
        a.push_back(dump_array("loss", "output", st->loss, rows));
        a.push_back(dump_array("nll", "output", st->nll, rows));
        a.push_back(dump_array("lse", "output", st->lse, rows));
      } else {
        a.push_back(dump_array("lse", "input", st->lse, rows));
        a.push_back(dump_array("grad_loss", "input", st->grad, rows));
        a.push_back(dump_array("dlogits", "output", st->dlogits, matrix));
      }
      return a;
    };
    p.state = st;
    return p;
  };
  return e;
}

// ---------------------------------------------------------------------------------------------
// Tolerances. Inputs are T values, exact in double, so the reference sees exactly what the kernel
// reads. u = 2^-24 (one fp32 operation); u_T, η_T = unit_roundoff(T), underflow_error(T) (one
// rounding of dlogits / logp to T). exp2f has <= 2 ulp (4u relative), log2f/logf <= 1 ulp, expf
// <= 2 ulp (CUDA Math API, no fast-math). Per counted row, from the reference in double:
// Z = max x - min x (the row's range), X = max |x|, A = Σ|x|, lse, nll, smooth = V·lse - Σx, and from
// cross_entropy_plan: n = the most elements one thread adds, R = the most times its max rises,
// 10 >= the shuffle-tree depth (log2 512 = 9, + 1).
//
// Fused forward. The thread sums s = Σ 2^(fl(x·L - m2)) with L = fl(log2 e), m2 = fl(m·L) used
//   consistently, so m2's rounding cancels in lse = ln2·(m2 + log2 S); what does not cancel:
//   every exponent argument is rounded once (the fma: u|x - m| <= uZ relative in the term), the
//   rescale arguments m2_old - m2_new telescope over a thread's rescales (<= uZ) plus the final
//   rescale to the team max (<= uZ), every exp2f 4u, every rescale multiply u (R + 1 of them, each
//   with its exp2f: 6u counting slack), the sums n + 10 additions. So
//     δS <= u·(3Z + 6(R + 1) + n + 16)
//   and lse = ln2_c·(m2 + log2f S): log2f 2u|ln S| <= 2u·ln V (1 <= S <= V), the addition and the
//   multiply by ln2 2u|lse|, L and ln2 rounded (u|lse| + uX, the first-order change of lse when
//   every x is scaled by 1 + u, Σ q_j x_j <= X):
//     B_lse  = δS + u·(4|lse| + X + 2 ln V)
//     B_nll  = B_lse + u·nll                                   (lse - x_t)
//     B_smth = V·B_lse + (n + 10)·u·A + u·smooth               (fma(V, lse, -Σx), Σx of n + 10 adds)
//     B_loss = |w_d|·B_nll + w_o·B_smth + u(|w_d|·nll + 2w_o·smooth) + u·loss
//   (w_d = w_t - w_o and w_o rounded to float once each, the fma and product once each.)
//   Ignored rows: exactly 0 (loss, nll, lse).
// Totals: the fixed-order sum of ceil(N/1024) + 10 additions: B = Σ_r B_loss,r + (ceil(N/1024) +
// 10)·u·Σ|loss_r|
//   + u|sum| (likewise nll); tokens and invalid_targets exact.
// Fused backward (from the fused forward's lse_k, |lse_k - lse| = e_lse measured): q_j = 2^(fl(x_j·L -
// fl(lse_k·L)))
//   has relative error δq_j = expm1(e_lse + u·(2|x_j - lse| + |lse| + 5)) (the fma, L, lse·L rounded, exp2f
//   4u, slack u); d_j = g·(q_j - p_j) rounds twice, then once to T:
//     B_d = (1 + u_T)·(|g|·(q_j·δq_j + u·p_j + u|q_j - p_j|) + u|d_j|) + u_T|d_j| + η_T.
//   Ignored rows: exactly 0. The scalar upstream gradient is the same formula with g = grad_loss_sum.
// Unfused forward: lse_u = m + logf(Σ expf(x - m)) (scalar loop: n_u = ceil(V/256) adds per thread):
//   B_lse_u = u·(2Z + 4 + n_u + 10 + |lse| + 2 ln V + 2); logp_j = fl_T(fl(x_j - lse_u)):
//   B_logp_j = B_lse_u + (u + u_T)|logp_j| + η_T; nll = -logp_t, smooth = -Σ logp (Σ|logp| = smooth):
//     B_nll_u  = B_lse_u + (u + u_T)·nll + η_T
//     B_smth_u = V·(B_lse_u + η_T) + (u + u_T + (n_u + 10)·u)·smooth
//     B_loss_u = |w_d|·B_nll_u + w_o·B_smth_u + u(|w_d|·nll + 2w_o·smooth) + u·loss
// Unfused backward (kernels/cross_entropy.h: five launches, every intermediate rounded to T), per
//   counted row with upstream g and the reference's exact d_j = g·(q_j - p_j):
//   c_o = -fl_T(fl(g·fl(w_o))), c_t likewise with w_d (negation exact; fl(w) u, the product u,
//   the rounding to T u_T + η_T; (1 + 4u) covers the second-order products):
//     b_o = (1 + 4u)(2u + u_T)|g|w_o + η_T,   b_t = (1 + 4u)(2u + u_T)|g||w_d| + η_T;
//   dlogp_j: off the target fl_T(c_o + 0) = c_o exactly; at the target the scatter gives
//   fl_T(0 + c_t) = c_t exactly and the add fl_T(fl(c_o + c_t)), |c_o + c_t| <= |g|w_t + b_t + b_o:
//     β_j = b_o (j != t),   β_t = b_t + b_o + (1 + u)(u + u_T)(|g|w_t + b_t + b_o) + η_T;
//   S = Σ_j dlogp_j, exactly -g·(w_t + (V-1)w_o) = -g (to a double rounding, covered by u|g|), with
//   n_u + 10 fp32 additions per term (ceil(V/256) per thread, then the shuffle trees):
//     B_S = Σ_j β_j + (n_u + 10)·u·(|g| + Σ_j β_j) + u|g|;
//   e_j = expf(logp_j) against q_j: |e_j - q_j| <= q_j·δe_j, δe_j = expm1(B_logp_j + 5u) (expf 4u,
//   slack u); dlogits_j = fl_T(fma(-e_j, S, dlogp_j)) against d_j = dlogp_j - q_j·S (exact values):
//     E_j = β_j + q_j·δe_j·(|g| + B_S) + q_j·B_S        (before the fma's rounding)
//     E'_j = E_j + u(|d_j| + E_j)                       (the fma)
//     B_d_u = E'_j + u_T(|d_j| + E'_j) + η_T            (the rounding to T)
//   Ignored rows: c = 0, so dlogp and dlogits are exactly 0.
const char* kRule =
    "per-element bounds derived in suites/operators/cross_entropy.cu from u = 2^-24 per fp32 op, "
    "u_T + eta_T per rounding to T, exp2f/expf 4u, log2f 2u, the row's range Z, max|x|, sum|x|, lse, "
    "and the plan's per-thread element and rescale counts; ignored rows exact";

struct Tallies {
  Tally fwd, totals, bwd, bwd_scalar, determinism, invalid, masked, unfused_fwd, unfused_bwd;
  explicit Tallies(const std::string& dt)
      : fwd(name("fwd", dt), kRule),
        totals(name("totals", dt), kRule),
        bwd(name("bwd", dt), kRule),
        bwd_scalar(name("bwd_scalar", dt), kRule),
        determinism(name("determinism", dt),
                    "bitwise: a second fused forward, totals and backward on the same inputs reproduce every "
                    "output"),
        invalid(name("invalid_target", dt),
                "targets outside [0, V) (not ignore_index): NaN loss/nll/lse and dlogits row, counted in "
                "invalid_targets, no other row affected, nothing written outside the outputs"),
        masked(name("masked_logits", dt),
               "rows with -inf logits (masked vocabulary entries) in the scalar head, a whole first vector, "
               "the tail, spread, or all but the target: lse, nll and dlogits (fused and unfused) within the "
               "bounds above taken over the finite logits; loss within them without smoothing, exactly +inf "
               "with it; totals count every row, loss_sum +inf exactly when a row's loss is"),
        unfused_fwd(name("unfused_fwd", dt), kRule),
        unfused_bwd(name("unfused_bwd", dt), kRule) {}
  static std::string name(const std::string& kernel, const std::string& dt) {
    return "operators/cross_entropy/" + kernel + "/" + dt;
  }
  std::vector<CheckResult> results() const {
    return {fwd.result(),        totals.result(),      bwd.result(),
            bwd_scalar.result(), determinism.result(), invalid.result(),
            masked.result(),     unfused_fwd.result(), unfused_bwd.result()};
  }
};

struct CeCase {
  std::int64_t rows = 0, vocab = 0;
  CrossEntropyConfig config;
  double amp = 4.0, shift = 0.0;
  std::size_t off_x = 0, off_d = 0;  // element offsets of logits and dlogits (phases differ: scalar backward)
  std::uint64_t seed = 0;
  std::string describe() const {
    std::ostringstream os;
    os << "N=" << rows << " V=" << vocab << " " << kernels::cross_entropy_smoothing_name(config.convention)
       << " smoothing=" << config.smoothing << " ignore_index="
       << (config.ignore_index ? std::to_string(*config.ignore_index) : std::string("none")) << " logits in "
       << shift << "+-" << amp << " offsets x/d=" << off_x << "/" << off_d << " seed=" << seed;
    return os.str();
  }
};

std::vector<CeCase> make_cases(std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::int64_t> vocabs = {1, 2,  3,  127, 1000, 1023, 4097, 50257,
                                      8, 31, 33, 256, 257,  2048, 2049, 32000};
  while (vocabs.size() < 56) {
    vocabs.push_back(static_cast<std::int64_t>(
        std::exp(std::uniform_real_distribution<double>(0.0, std::log(70000.0))(rng))));
  }
  std::vector<CeCase> cases;
  for (std::size_t i = 0; i < vocabs.size(); ++i) {
    CeCase c;
    c.vocab = std::max<std::int64_t>(1, vocabs[i]);
    const std::int64_t max_rows = std::max<std::int64_t>(1, 200000 / c.vocab);
    c.rows = 1 + static_cast<std::int64_t>(rng() %
                                           static_cast<std::uint64_t>(std::min<std::int64_t>(max_rows, 77)));
    if (i % 3 == 0) c.rows |= 1;  // odd N
    c.config.convention = i % 2 == 0 ? CrossEntropySmoothing::paper : CrossEntropySmoothing::fairseq;
    const float smoothings[] = {0.0f, 0.1f, static_cast<float>(rng() % 1000) / 1000.0f, 1.0f};
    c.config.smoothing = smoothings[(i / 2) % 4];
    if (c.config.convention == CrossEntropySmoothing::fairseq && c.vocab < 2) c.config.smoothing = 0.0f;
    switch (i % 3) {
      case 0:
        break;  // no ignore_index
      case 1:
        c.config.ignore_index = -100;  // PyTorch's default, outside [0, V)
        break;
      default:
        c.config.ignore_index =
            static_cast<std::int32_t>(std::min<std::int64_t>(1, c.vocab - 1));  // fairseq pad
        break;
    }
    const double amps[] = {1.0, 4.0, 8.0, 16.0};
    c.amp = amps[rng() % 4];
    c.shift = rng() % 5 == 0 ? 40.0 : 0.0;
    if (rng() % 2 == 1) {
      c.off_x = rng() % 9;
      c.off_d = rng() % 9;
    }
    c.seed = rng();
    cases.push_back(c);
  }
  return cases;
}

struct RowStats {
  double lse = 0, range = 0, max_abs = 0, abs_sum = 0, smooth = 0;
};

// A row's statistics from the reference inputs. Z, max|x| and Σ|x| are taken over the finite
// logits: a -inf logit (a masked vocabulary entry) adds exactly 0 (exp2f(-inf) = expf(-inf) = 0)
// to every sum of exponentials and never raises a max, so it brings no rounding error into lse;
// its infinite share of smooth = V·lse - Σx reaches the loss only through w_o.
RowStats row_stats(const ref::Matrix& xm, ref::Index r) {
  double mx = -INFINITY, mn = INFINITY, xa = 0, as = 0, sx = 0;
  for (ref::Index j = 0; j < xm.cols(); ++j) {
    const double x = xm(r, j);
    sx += x;
    if (!std::isfinite(x)) continue;
    mx = std::max(mx, x);
    mn = std::min(mn, x);
    xa = std::max(xa, std::fabs(x));
    as += std::fabs(x);
  }
  double s = 0;
  for (ref::Index j = 0; j < xm.cols(); ++j) s += std::exp(xm(r, j) - mx);
  RowStats st{mx + std::log(s), mx - mn, xa, as, 0.0};
  st.smooth = static_cast<double>(xm.cols()) * st.lse - sx;
  return st;
}

// The constants of one case's bounds (the derivation above).
struct BoundTerms {
  double u = 0, ut = 0, eta = 0;   // one fp32 operation, one rounding to T, T's underflow error
  double nt = 0, R = 0, logv = 0;  // the fused plan's most elements and rescales per thread, ln V
  double nu = 0, V = 0;            // the unfused per-thread additions ceil(V/256), V
  double wd = 0, wo = 0, wt = 0;   // w_t - w_o, w_o, w_t as the kernels round them
};

// w·term where the term may be infinite (a -inf logit makes smooth infinite): 0 when w = 0, as the
// kernels and the reference take it (0 · log 0 = 0, the limit of p log q), not 0 · inf = NaN.
double weighted(double w, double term) {
  return w == 0.0 ? 0.0 : w * term;
}

struct ForwardBounds {
  double lse = 0, nll = 0, loss = 0;
};

ForwardBounds fused_forward_bounds(const BoundTerms& k, const RowStats& s, double want_nll,
                                   double want_loss) {
  ForwardBounds b;
  const double dS = k.u * (3 * s.range + 6 * (k.R + 1) + k.nt + 16);
  b.lse = dS + k.u * (4 * std::fabs(s.lse) + s.max_abs + 2 * k.logv);
  b.nll = b.lse + k.u * want_nll;
  const double b_smooth = k.V * b.lse + (k.nt + 10) * k.u * s.abs_sum + k.u * s.smooth;
  b.loss = std::fabs(k.wd) * b.nll + weighted(k.wo, b_smooth) +
           k.u * (std::fabs(k.wd) * want_nll + weighted(2 * k.wo, s.smooth)) + k.u * std::fabs(want_loss);
  return b;
}

ForwardBounds unfused_forward_bounds(const BoundTerms& k, const RowStats& s, double want_nll,
                                     double want_loss) {
  ForwardBounds b;
  b.lse = k.u * (2 * s.range + 4 + k.nu + 10 + std::fabs(s.lse) + 2 * k.logv + 2);
  b.nll = b.lse + (k.u + k.ut) * want_nll + k.eta;
  const double b_smooth = k.V * (b.lse + k.eta) + (k.u + k.ut + (k.nu + 10) * k.u) * s.smooth;
  b.loss = std::fabs(k.wd) * b.nll + weighted(k.wo, b_smooth) +
           k.u * (std::fabs(k.wd) * want_nll + weighted(2 * k.wo, s.smooth)) + k.u * std::fabs(want_loss);
  return b;
}

// One fused dlogit's bound: x the logit, p its smoothed target weight, g the upstream gradient,
// e_lse = |lse_k - lse| measured. A -inf logit has q = 0 exactly (its δq is infinite, its q·δq 0).
double fused_dlogit_bound(const BoundTerms& k, const RowStats& s, double e_lse, double x, double p, double g,
                          double want) {
  const double q = std::exp(x - s.lse);
  const double dq = std::expm1(e_lse + k.u * (2 * std::fabs(x - s.lse) + std::fabs(s.lse) + 5));
  const double q_dq = q == 0.0 ? 0.0 : q * dq;
  return (1 + k.ut) * (std::fabs(g) * (q_dq + k.u * p + k.u * std::fabs(q - p)) + k.u * std::fabs(want)) +
         k.ut * std::fabs(want) + k.eta;
}

// The unfused backward's per-row terms: b_co, β_t and B_S of the derivation, for upstream g.
struct UnfusedBackwardRow {
  double b_co = 0, beta_t = 0, b_S = 0;
};

UnfusedBackwardRow unfused_backward_row(const BoundTerms& k, double g) {
  UnfusedBackwardRow b;
  const double ag = std::fabs(g);
  b.b_co = (1 + 4 * k.u) * (2 * k.u + k.ut) * ag * k.wo + k.eta;
  const double b_ct = (1 + 4 * k.u) * (2 * k.u + k.ut) * ag * std::fabs(k.wd) + k.eta;
  b.beta_t = b_ct + b.b_co + (1 + k.u) * (k.u + k.ut) * (ag * k.wt + b_ct + b.b_co) + k.eta;
  const double sum_beta = (k.V - 1) * b.b_co + b.beta_t;
  b.b_S = sum_beta + (k.nu + 10) * k.u * (ag + sum_beta) + k.u * ag;
  return b;
}

// One unfused dlogit's bound, from the row's terms and the unfused B_lse_u.
double unfused_dlogit_bound(const BoundTerms& k, const UnfusedBackwardRow& row, const RowStats& s,
                            double b_lse_u, double x, bool is_target, double g, double want) {
  const double q = std::exp(x - s.lse);
  const double de = std::expm1(b_lse_u + (k.u + k.ut) * std::fabs(x - s.lse) + k.eta + 5 * k.u);
  const double q_de = q == 0.0 ? 0.0 : q * de;
  const double beta = is_target ? row.beta_t : row.b_co;
  const double ad = std::fabs(want);
  const double e0 = beta + q_de * (std::fabs(g) + row.b_S) + q * row.b_S;
  const double e1 = e0 + k.u * (ad + e0);
  return e1 + k.ut * (ad + e1) + k.eta;
}

template <class T>
BoundTerms bound_terms(std::int64_t vocab, const kernels::CrossEntropyWeights& w) {
  const DType dt = DTypeTraits<T>::dtype;
  const kernels::CrossEntropyPlan plan = kernels::cross_entropy_plan(dt, vocab);
  BoundTerms k;
  k.u = kU32;
  k.ut = unit_roundoff(dt);
  k.eta = underflow_error(dt);
  k.nt = static_cast<double>(plan.max_thread_elements(vocab));
  k.R = static_cast<double>(plan.max_thread_rescales(vocab));
  k.V = static_cast<double>(vocab);
  k.logv = std::log(k.V);
  k.nu = std::ceil(k.V / 256.0);
  k.wd = static_cast<double>(w.target) - static_cast<double>(w.other);
  k.wo = w.other;
  k.wt = w.target;
  return k;
}

template <class T>
void check_case(const CeCase& c, Tallies& t) {
  const DType dt = DTypeTraits<T>::dtype;
  const double u = kU32;
  const std::string where = c.describe();
  const auto N = static_cast<std::size_t>(c.rows), V = static_cast<std::size_t>(c.vocab), n = N * V;

  // Inputs.
  const std::vector<T> logits = random_values<T>(n, c.seed + 1, static_cast<float>(c.shift - c.amp),
                                                 static_cast<float>(c.shift + c.amp));
  std::vector<std::int32_t> targets = random_targets(N, c.seed + 2, 0, static_cast<std::int32_t>(c.vocab));
  if (c.config.ignore_index) {
    std::uint64_t state = c.seed + 3;
    for (auto& v : targets)
      if (splitmix64(state) % 5 == 0) v = *c.config.ignore_index;
  }
  const std::vector<float> grad = random_values<float>(N, c.seed + 4, -1.0f, 1.0f);
  const float grad_sum = 0.75f;

  ref::CrossEntropyConfig rc;
  rc.smoothing = static_cast<double>(c.config.smoothing);
  rc.convention = c.config.convention == CrossEntropySmoothing::paper ? ref::SmoothingConvention::paper
                                                                      : ref::SmoothingConvention::fairseq;
  rc.ignore_index = c.config.ignore_index;
  const ref::Matrix xm = to_matrix(logits, c.rows, c.vocab);
  ref::TargetVector tv(c.rows);
  for (std::size_t r = 0; r < N; ++r) tv(static_cast<ref::Index>(r)) = targets[r];
  const ref::CrossEntropyForward want = ref::cross_entropy_forward(xm, tv, rc);
  const ref::Vector gv = to_vector(grad);
  const ref::Matrix want_d = ref::cross_entropy_backward(xm, tv, rc, gv);
  const ref::Matrix want_ds = ref::cross_entropy_backward(xm, tv, rc, static_cast<double>(grad_sum));
  const kernels::CrossEntropyWeights w = kernels::cross_entropy_weights(c.config, c.vocab);
  const BoundTerms k = bound_terms<T>(c.vocab, w);
  const auto counted = [&](std::size_t r) {
    return !(c.config.ignore_index && targets[r] == *c.config.ignore_index);
  };

  std::vector<RowStats> st(N);
  for (std::size_t r = 0; r < N; ++r) st[r] = row_stats(xm, static_cast<ref::Index>(r));

  Guarded<T> x_d(n, c.off_x);
  x_d.upload(logits);
  DeviceBuffer<std::int32_t> tg(targets);
  DeviceBuffer<float> g_d(grad);

  // Fused: forward (+ totals) and both backwards, twice.
  std::vector<float> loss1, nll1, lse1;
  std::vector<CrossEntropyTotals> tot1;
  std::vector<T> d1, ds1;
  for (int run = 0; run < 2; ++run) {
    Guarded<float> loss(N, 1), nll(N, 2), lse(N, 3);
    Guarded<CrossEntropyTotals> totals(1, 0);
    Guarded<T> d(n, c.off_d), ds(n, c.off_d);
    kernels::launch_cross_entropy_forward<T>(loss.data(), nll.data(), lse.data(), totals.data(), x_d.data(),
                                             tg.data(), c.rows, c.vocab, c.config, nullptr);
    kernels::launch_cross_entropy_backward<T>(d.data(), x_d.data(), tg.data(), lse.data(), g_d.data(), c.rows,
                                              c.vocab, c.config, nullptr);
    kernels::launch_cross_entropy_backward_scalar<T>(ds.data(), x_d.data(), tg.data(), lse.data(), grad_sum,
                                                     c.rows, c.vocab, c.config, nullptr);
    SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
    Tally& fg = run == 0 ? t.fwd : t.determinism;
    auto l = loss.download(fg, where), nl = nll.download(fg, where), ls = lse.download(fg, where);
    auto tt = totals.download(run == 0 ? t.totals : t.determinism, where);
    auto dd = d.download(run == 0 ? t.bwd : t.determinism, where);
    auto dds = ds.download(run == 0 ? t.bwd_scalar : t.determinism, where);
    if (run == 0) {
      loss1 = l, nll1 = nl, lse1 = ls, tot1 = tt, d1 = dd, ds1 = dds;
    } else {
      t.determinism.add_exact(same_bits(l, loss1) && same_bits(nl, nll1) && same_bits(ls, lse1), where,
                              "second forward differs bitwise");
      t.determinism.add_exact(same_bits(tt, tot1), where, "second totals differ bitwise");
      t.determinism.add_exact(same_bits(dd, d1) && same_bits(dds, ds1), where,
                              "second backward differs bitwise");
    }
  }

  // Unfused.
  DeviceBuffer<T> logp(n);
  DeviceBuffer<unsigned char> uws(
      kernels::cross_entropy_unfused_backward_workspace_bytes(dt, c.rows, c.vocab));
  uws.fill_bytes(0xFF);  // NaN in every T: a workspace element read before it is written shows
  Guarded<float> uloss(N, 1), unll(N, 2);
  Guarded<CrossEntropyTotals> utot(1, 0);
  Guarded<T> ud(n, c.off_d);
  kernels::launch_cross_entropy_forward_unfused<T>(uloss.data(), unll.data(), utot.data(), logp.data(),
                                                   logp.bytes(), x_d.data(), tg.data(), c.rows, c.vocab,
                                                   c.config, nullptr);
  kernels::launch_cross_entropy_backward_unfused<T>(ud.data(), logp.data(), tg.data(), g_d.data(), c.rows,
                                                    c.vocab, c.config, uws.data(), uws.bytes(), nullptr);
  SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
  const auto ul = uloss.download(t.unfused_fwd, where), un = unll.download(t.unfused_fwd, where);
  const auto ut_tot = utot.download(t.unfused_fwd, where);
  const auto udd = ud.download(t.unfused_bwd, where);

  double sum_bound = 0, nll_sum_bound = 0, abs_loss = 0, abs_nll = 0;
  double usum_bound = 0, unll_sum_bound = 0;
  std::int32_t tokens = 0;
  for (std::size_t r = 0; r < N; ++r) {
    const auto ri = static_cast<ref::Index>(r);
    const double wl = want.loss(ri), wn = want.nll(ri);
    if (!counted(r)) {
      t.fwd.add(loss1[r], 0.0, 0.0, where + " loss (ignored row)", r);
      t.fwd.add(nll1[r], 0.0, 0.0, where + " nll (ignored row)", r);
      t.fwd.add(lse1[r], 0.0, 0.0, where + " lse (ignored row)", r);
      t.unfused_fwd.add(ul[r], 0.0, 0.0, where + " loss (ignored row)", r);
      t.unfused_fwd.add(un[r], 0.0, 0.0, where + " nll (ignored row)", r);
      for (std::size_t j = 0; j < V; ++j) {
        t.bwd.add(as_double(d1[r * V + j]), 0.0, 0.0, where + " dlogits (ignored row)", r * V + j);
        t.bwd_scalar.add(as_double(ds1[r * V + j]), 0.0, 0.0, where + " dlogits (ignored row)", r * V + j);
        t.unfused_bwd.add(as_double(udd[r * V + j]), 0.0, 0.0, where + " dlogits (ignored row)", r * V + j);
      }
      continue;
    }
    ++tokens;
    const RowStats& s = st[r];
    const ForwardBounds fb = fused_forward_bounds(k, s, wn, wl);
    t.fwd.add(lse1[r], s.lse, fb.lse, where + " lse", r);
    t.fwd.add(nll1[r], wn, fb.nll, where + " nll", r);
    t.fwd.add(loss1[r], wl, fb.loss, where + " loss", r);
    sum_bound += fb.loss;
    nll_sum_bound += fb.nll;
    abs_loss += std::fabs(wl);
    abs_nll += std::fabs(wn);
    const ForwardBounds ub = unfused_forward_bounds(k, s, wn, wl);
    t.unfused_fwd.add(un[r], wn, ub.nll, where + " nll", r);
    t.unfused_fwd.add(ul[r], wl, ub.loss, where + " loss", r);
    usum_bound += ub.loss;
    unll_sum_bound += ub.nll;
    // Backwards.
    const double e_lse = std::fabs(static_cast<double>(lse1[r]) - s.lse);
    const double g = grad[r];
    const UnfusedBackwardRow urow = unfused_backward_row(k, g);
    for (std::size_t j = 0; j < V; ++j) {
      const auto ji = static_cast<ref::Index>(j);
      const double x = xm(ri, ji);
      const bool is_target = static_cast<int>(j) == targets[r];
      const double p = is_target ? w.target : w.other;
      t.bwd.add(as_double(d1[r * V + j]), want_d(ri, ji),
                fused_dlogit_bound(k, s, e_lse, x, p, g, want_d(ri, ji)), where + " dlogits", r * V + j);
      t.bwd_scalar.add(as_double(ds1[r * V + j]), want_ds(ri, ji),
                       fused_dlogit_bound(k, s, e_lse, x, p, grad_sum, want_ds(ri, ji)), where + " dlogits",
                       r * V + j);
      t.unfused_bwd.add(as_double(udd[r * V + j]), want_d(ri, ji),
                        unfused_dlogit_bound(k, urow, s, ub.lse, x, is_target, g, want_d(ri, ji)),
                        where + " dlogits", r * V + j);
    }
  }
  const double depth = std::ceil(static_cast<double>(N) / kernels::kCrossEntropyTotalsThreads) + 10;
  const auto check_totals = [&](Tally& tally, const CrossEntropyTotals& got, double lb, double nb) {
    tally.add(got.loss_sum, want.loss_sum, lb + depth * u * abs_loss + u * std::fabs(want.loss_sum),
              where + " loss_sum", 0);
    tally.add(got.nll_sum, want.nll_sum, nb + depth * u * abs_nll + u * std::fabs(want.nll_sum),
              where + " nll_sum", 0);
    tally.add_exact(got.tokens == tokens, where,
                    "tokens " + std::to_string(got.tokens) + ", want " + std::to_string(tokens));
    tally.add_exact(got.invalid_targets == 0, where,
                    "invalid_targets " + std::to_string(got.invalid_targets));
  };
  check_totals(t.totals, tot1[0], sum_bound, nll_sum_bound);
  check_totals(t.unfused_fwd, ut_tot[0], usum_bound, unll_sum_bound);
}

// Targets outside [0, V): the row's outputs are NaN, the row is counted as invalid, the other rows
// (one ignored, one valid) are unaffected, and no byte outside the outputs is written.
template <class T>
void check_invalid_targets(std::int64_t vocab, Tally& t) {
  const std::int64_t rows = 5;
  const auto N = static_cast<std::size_t>(rows), V = static_cast<std::size_t>(vocab), n = N * V;
  CrossEntropyConfig config;
  config.smoothing = 0.1f;
  config.convention = CrossEntropySmoothing::paper;
  config.ignore_index = -100;
  const std::vector<std::int32_t> targets = {static_cast<std::int32_t>(vocab), -100, 0, -1,
                                             std::numeric_limits<std::int32_t>::max()};
  const std::vector<bool> invalid = {true, false, false, true, true};
  const std::string where = "V=" + std::to_string(vocab);
  Guarded<T> x(n, 1);
  x.upload(random_values<T>(n, 99, -3.0f, 3.0f));
  DeviceBuffer<std::int32_t> tg(targets);
  DeviceBuffer<float> grad(std::vector<float>(N, 1.0f));
  for (const bool unfused : {false, true}) {
    Guarded<float> loss(N, 0), nll(N, 0), lse(N, 0);
    Guarded<CrossEntropyTotals> totals(1, 0);
    Guarded<T> d(n, 1);
    DeviceBuffer<T> logp(n);
    if (unfused) {
      kernels::launch_cross_entropy_forward_unfused<T>(loss.data(), nll.data(), totals.data(), logp.data(),
                                                       logp.bytes(), x.data(), tg.data(), rows, vocab, config,
                                                       nullptr);
      DeviceBuffer<unsigned char> ws(
          kernels::cross_entropy_unfused_backward_workspace_bytes(DTypeTraits<T>::dtype, rows, vocab));
      kernels::launch_cross_entropy_backward_unfused<T>(d.data(), logp.data(), tg.data(), grad.data(), rows,
                                                        vocab, config, ws.data(), ws.bytes(), nullptr);
    } else {
      kernels::launch_cross_entropy_forward<T>(loss.data(), nll.data(), lse.data(), totals.data(), x.data(),
                                               tg.data(), rows, vocab, config, nullptr);
      kernels::launch_cross_entropy_backward<T>(d.data(), x.data(), tg.data(), lse.data(), grad.data(), rows,
                                                vocab, config, nullptr);
    }
    SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
    const std::string w = where + (unfused ? " unfused" : " fused");
    const auto l = loss.download(t, w), nl = nll.download(t, w);
    const auto tt = totals.download(t, w);
    const auto dd = d.download(t, w);
    const auto ls = lse.download(t, w);
    for (std::size_t r = 0; r < N; ++r) {
      const std::string row = w + " row " + std::to_string(r);
      if (invalid[r]) {
        t.add_exact(std::isnan(l[r]) && std::isnan(nl[r]) && (unfused || std::isnan(ls[r])), row,
                    "loss/nll/lse not NaN");
      } else {
        t.add_exact(std::isfinite(l[r]) && std::isfinite(nl[r]), row, "loss/nll not finite");
      }
      bool all_nan = true, all_finite = true, all_zero = true;
      for (std::size_t j = 0; j < V; ++j) {
        const float v = to_float(dd[r * V + j]);
        all_nan = all_nan && std::isnan(v);
        all_finite = all_finite && std::isfinite(v);
        all_zero = all_zero && v == 0.0f;
      }
      if (invalid[r])
        t.add_exact(all_nan, row, "dlogits row not all NaN");
      else if (targets[r] == -100)
        t.add_exact(all_zero, row, "ignored dlogits row not all 0");
      else
        t.add_exact(all_finite, row, "valid dlogits row not finite");
    }
    t.add_exact(tt[0].invalid_targets == 3 && tt[0].tokens == 1 && std::isnan(tt[0].loss_sum), w,
                "totals: invalid_targets " + std::to_string(tt[0].invalid_targets) + " (want 3), tokens " +
                    std::to_string(tt[0].tokens) + " (want 1), loss_sum should be NaN");
  }
}

// Rows with -inf logits, as a model that masks vocabulary entries (special or padding tokens)
// produces: the -inf entries contribute exactly 0 to every sum, so lse, nll and the gradient are
// finite and within the bounds taken over the finite logits; the smoothed loss -Σ p_j log q_j is +inf
// whenever a smoothed weight lands on a -inf logit, and finite without smoothing. The masks put -inf
// where each thread absorbs its first value: the scalar head (moved by the logits' offset), a whole
// first vector, the tail, spread through the row, and all but the target.
template <class T>
void check_masked_logits(std::int64_t vocab, std::size_t offset, float smoothing, Tally& t) {
  const std::int64_t rows = 6;
  const auto N = static_cast<std::size_t>(rows), V = static_cast<std::size_t>(vocab), n = N * V;
  CrossEntropyConfig config;
  config.smoothing = smoothing;
  config.convention = CrossEntropySmoothing::fairseq;
  const auto target = static_cast<std::int32_t>(vocab / 2);
  const std::vector<std::int32_t> targets(N, target);
  std::vector<T> logits = random_values<T>(n, 0x1AF + V + offset, -6.0f, 6.0f);
  std::vector<bool> masked_row(N, false);
  const auto mask = [&](std::size_t r, std::size_t j) {
    if (static_cast<std::int32_t>(j) == target) return;
    logits[r * V + j] = from_float<T>(-INFINITY);
    masked_row[r] = true;
  };
  mask(0, 0);
  for (std::size_t j = 0; j < std::min<std::size_t>(8, V); ++j) mask(1, j);
  for (std::size_t j = V - std::min<std::size_t>(3, V); j < V; ++j) mask(2, j);
  for (std::size_t j = 3; j < V; j += 7) mask(3, j);
  // row 4: no -inf (the control)
  for (std::size_t j = 0; j < V; ++j) mask(5, j);

  const std::string where = "V=" + std::to_string(vocab) + " offset " + std::to_string(offset) +
                            " smoothing " + std::to_string(smoothing);
  ref::CrossEntropyConfig rc;
  rc.smoothing = static_cast<double>(smoothing);
  rc.convention = ref::SmoothingConvention::fairseq;
  const ref::Matrix xm = to_matrix(logits, rows, vocab);
  const ref::TargetVector tv = ref::TargetVector::Constant(rows, target);
  const std::vector<float> grad = random_values<float>(N, 0x2AF + V, -1.0f, 1.0f);
  const ref::CrossEntropyForward want = ref::cross_entropy_forward(xm, tv, rc);
  const ref::Matrix want_d = ref::cross_entropy_backward(xm, tv, rc, to_vector(grad));
  const kernels::CrossEntropyWeights w = kernels::cross_entropy_weights(config, vocab);
  const BoundTerms k = bound_terms<T>(vocab, w);

  Guarded<T> x(n, offset);
  x.upload(logits);
  DeviceBuffer<std::int32_t> tg(targets);
  DeviceBuffer<float> g_d(grad);
  Guarded<float> loss(N, 1), nll(N, 2), lse(N, 3), uloss(N, 1), unll(N, 2);
  Guarded<T> d(n, offset), ud(n, offset);
  DeviceBuffer<T> logp(n);
  DeviceBuffer<unsigned char> uws(
      kernels::cross_entropy_unfused_backward_workspace_bytes(DTypeTraits<T>::dtype, rows, vocab));
  uws.fill_bytes(0xFF);  // NaN in every T: a workspace element read before it is written shows
  Guarded<CrossEntropyTotals> totals(1, 0);
  kernels::launch_cross_entropy_forward<T>(loss.data(), nll.data(), lse.data(), totals.data(), x.data(),
                                           tg.data(), rows, vocab, config, nullptr);
  kernels::launch_cross_entropy_backward<T>(d.data(), x.data(), tg.data(), lse.data(), g_d.data(), rows,
                                            vocab, config, nullptr);
  kernels::launch_cross_entropy_forward_unfused<T>(uloss.data(), unll.data(), nullptr, logp.data(),
                                                   logp.bytes(), x.data(), tg.data(), rows, vocab, config,
                                                   nullptr);
  kernels::launch_cross_entropy_backward_unfused<T>(ud.data(), logp.data(), tg.data(), g_d.data(), rows,
                                                    vocab, config, uws.data(), uws.bytes(), nullptr);
  SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
  const auto l = loss.download(t, where), nl = nll.download(t, where), ls = lse.download(t, where);
  const auto ul = uloss.download(t, where), un = unll.download(t, where);
  const auto dd = d.download(t, where), udd = ud.download(t, where);
  const auto tt = totals.download(t, where);
  // Every row counts; the summed loss is +inf as soon as one row's is (smoothing), finite otherwise.
  const bool any_infinite = std::isinf(want.loss_sum);
  t.add_exact(tt[0].tokens == rows && tt[0].invalid_targets == 0 &&
                  (any_infinite ? tt[0].loss_sum == INFINITY : std::isfinite(tt[0].loss_sum)) &&
                  std::isfinite(tt[0].nll_sum),
              where,
              "totals: tokens " + std::to_string(tt[0].tokens) + ", loss_sum " +
                  std::to_string(tt[0].loss_sum) + ", nll_sum " + std::to_string(tt[0].nll_sum));

  for (std::size_t r = 0; r < N; ++r) {
    const auto ri = static_cast<ref::Index>(r);
    const std::string row = where + " row " + std::to_string(r);
    const RowStats st = row_stats(xm, ri);
    const double wn = want.nll(ri), wl = want.loss(ri);
    const ForwardBounds fb = fused_forward_bounds(k, st, wn, wl);
    const ForwardBounds ub = unfused_forward_bounds(k, st, wn, wl);
    t.add(ls[r], st.lse, fb.lse, row + " lse", r);
    t.add(nl[r], wn, fb.nll, row + " nll", r);
    t.add(un[r], wn, ub.nll, row + " unfused nll", r);
    if (std::isinf(wl)) {  // smoothing weight on a -inf logit
      t.add_exact(masked_row[r] && w.other > 0.0f && wl > 0, row, "reference loss is infinite unexpectedly");
      t.add_exact(l[r] == INFINITY && ul[r] == INFINITY, row,
                  "loss " + std::to_string(l[r]) + " / unfused " + std::to_string(ul[r]) + ", want +inf");
    } else {
      t.add(l[r], wl, fb.loss, row + " loss", r);
      t.add(ul[r], wl, ub.loss, row + " unfused loss", r);
    }
    const double e_lse = std::fabs(static_cast<double>(ls[r]) - st.lse);
    const UnfusedBackwardRow urow = unfused_backward_row(k, grad[r]);
    for (std::size_t j = 0; j < V; ++j) {
      const auto ji = static_cast<ref::Index>(j);
      const double xv = xm(ri, ji), wd_j = want_d(ri, ji);
      const bool is_target = static_cast<std::int32_t>(j) == target;
      const double p = is_target ? w.target : w.other;
      t.add(as_double(dd[r * V + j]), wd_j, fused_dlogit_bound(k, st, e_lse, xv, p, grad[r], wd_j),
            row + " dlogits", j);
      t.add(as_double(udd[r * V + j]), wd_j,
            unfused_dlogit_bound(k, urow, st, ub.lse, xv, is_target, grad[r], wd_j), row + " unfused dlogits",
            j);
    }
  }
}

template <class T>
std::vector<CheckResult> checks_for(std::uint64_t seed) {
  Tallies t(DTypeTraits<T>::name);
  for (const CeCase& c : make_cases(seed ^ (0xCE00ull + static_cast<std::uint64_t>(DTypeTraits<T>::dtype))))
    check_case<T>(c, t);
  for (const std::int64_t v : {1, 3, 1000, 50257}) check_invalid_targets<T>(v, t.invalid);
  for (const std::int64_t v : {2, 13, 1000, 50257})
    for (const std::size_t offset : {0, 1, 3})
      for (const float smoothing : {0.0f, 0.1f}) check_masked_logits<T>(v, offset, smoothing, t.masked);
  return t.results();
}

}  // namespace

void add_cross_entropy_experiments(SuiteSpec& suite, const SuiteOptions& options) {
  const std::vector<std::int64_t> rows = shapes<std::int64_t>(options, {8}, {1024}, {4096, 8192});
  const std::vector<std::int64_t> vocabs = {32000, 50257};
  const std::vector<DType> dtypes =
      shapes<DType>(options, {DType::bf16}, {DType::bf16}, {DType::bf16, DType::f32});
  for (const bool backward : {false, true}) {
    for (const DType dtype : dtypes) {
      for (const std::int64_t n : rows) {
        for (const std::int64_t v : vocabs) {
          suite.experiments.push_back(dispatch_dtype(
              dtype, [&](auto tag) { return cross_entropy_experiment<decltype(tag)>(n, v, backward); }));
        }
      }
    }
  }
}

std::vector<CheckResult> cross_entropy_gpu_checks(std::uint64_t seed) {
  return checks_for_all_dtypes([&](auto tag) { return checks_for<decltype(tag)>(seed); });
}

}  // namespace seqbench::operators
