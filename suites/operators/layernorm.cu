// Operator-suite experiments (LightSeq2 Fig. 16: LayerNorm over batch tokens x hidden size,
// forward and backward) and the GPU checks of the LayerNorm kernels against reference/.

// The reference is host-only Eigen code; without this nvcc would compile Eigen's functions for the
// device too (and reject the constexpr host calls inside them).

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "core/cuda_check.h"
#include "core/device_buffer.h"
#include "core/dtype.h"
#include "core/philox.h"
#include "kernels/layernorm.h"
#include "reference/layernorm.h"
#include "suites/operators/check_util.h"
#include "suites/operators/operators.h"

namespace seqbench::operators {
namespace {

using check_util::fill;
using check_util::kU32;
using check_util::ScaledTally;
using kernels::LayerNormStats;
// Guard elements on both sides of every tensor; an odd element offset forces the scalar path.
template <class T>
using Guarded = check_util::Guarded<T, check_util::GuardAt::both_ends>;

// ---------------------------------------------------------------------------------------------
// Experiments

// Per element, as the fused kernels compute them (an fma counts 2, a division or rsqrt 1):
// forward with Welford 7 for the statistics + 4 for the output; backward 14.
constexpr double kForwardFlopsPerElement = 11.0;
constexpr double kBackwardFlopsPerElement = 14.0;
// The experiments' epsilon (nn.LayerNorm's default), recorded in params as "eps" so that an outside
// oracle (suites/pytorch) uses the same value; the kernels take it as float.
constexpr double kBenchEps = 1e-5;
constexpr float kEps = static_cast<float>(kBenchEps);

template <class T>
struct LayerNormState {
  DeviceBuffer<T> x, gamma, beta, y, dy, dx, dgamma, dbeta;
  DeviceBuffer<float> mean, rstd;
  DeviceBuffer<unsigned char> fused_ws, unfused_ws;
};

template <class T>
ExperimentSpec layernorm_experiment(bool backward, std::int64_t tokens, int hidden) {
  const double n = static_cast<double>(tokens) * hidden, h = hidden, s = sizeof(T),
               rows = static_cast<double>(tokens);
  const std::string dtype(DTypeTraits<T>::name);
  ExperimentSpec e;
  e.name = std::string(backward ? "layernorm_bwd/" : "layernorm_fwd/") + dtype +
           "/tokens=" + std::to_string(tokens) + ",hidden=" + std::to_string(hidden);
  e.params = {{"op", "layernorm"},
              {"direction", backward ? "bwd" : "fwd"},
              {"dtype", dtype},
              {"tokens", tokens},
              {"hidden", hidden},
              {"elements", tokens * hidden},
              {"eps", kBenchEps},
              {"stats", kernels::layernorm_stats_name(kernels::kDefaultLayerNormStats)},
              {"figure", "LightSeq2 Fig. 16"}};
  e.baseline = "unfused";
  // Minimal traffic: forward reads x, gamma, beta and writes y, mean, rstd (fp32); backward reads
  // dy, x, gamma, mean, rstd and writes dx, dgamma, dbeta. Workspaces are not counted.
  const double bytes = backward ? 3 * n * s + 3 * h * s + 8 * rows : 2 * n * s + 2 * h * s + 8 * rows;
  const double flops = n * (backward ? kBackwardFlopsPerElement : kForwardFlopsPerElement);
  e.variants = {{"unfused", bytes, flops}, {"fused", bytes, flops}};
  e.dump_variant = "fused";
  e.prepare = [backward, tokens, hidden] {
    const auto count = static_cast<std::size_t>(tokens) * static_cast<std::size_t>(hidden);
    const auto hcount = static_cast<std::size_t>(hidden), rcount = static_cast<std::size_t>(tokens);
    auto st = std::make_shared<LayerNormState<T>>();
    st->x = DeviceBuffer<T>(count);
    st->gamma = DeviceBuffer<T>(hcount);
    st->beta = DeviceBuffer<T>(hcount);
    st->mean = DeviceBuffer<float>(rcount);
    st->rstd = DeviceBuffer<float>(rcount);
    fill(st->x, 11, -2.0f, 2.0f);
    fill(st->gamma, 12, 0.5f, 1.5f);
    fill(st->beta, 13, -0.5f, 0.5f);
    if (!backward) {
      st->y = DeviceBuffer<T>(count);
      st->unfused_ws = DeviceBuffer<unsigned char>(
          kernels::layernorm_unfused_forward_workspace_bytes(DTypeTraits<T>::dtype, tokens, hidden));
    } else {
      st->dy = DeviceBuffer<T>(count);
      st->dx = DeviceBuffer<T>(count);
      st->dgamma = DeviceBuffer<T>(hcount);
      st->dbeta = DeviceBuffer<T>(hcount);
      fill(st->dy, 14, -1.0f, 1.0f);
      st->fused_ws = DeviceBuffer<unsigned char>(kernels::layernorm_backward_workspace_bytes(tokens, hidden));
      st->unfused_ws = DeviceBuffer<unsigned char>(
          kernels::layernorm_unfused_backward_workspace_bytes(DTypeTraits<T>::dtype, tokens, hidden));
      // The backward consumes the forward's statistics; y is not needed, dx stands in for it.
      kernels::launch_layernorm_forward<T>(st->dx.data(), st->mean.data(), st->rstd.data(), st->x.data(),
                                           st->gamma.data(), st->beta.data(), tokens, hidden, kEps, nullptr);
    }
    SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
    PreparedExperiment p;
    if (!backward) {
      p.variants.push_back([st, tokens, hidden](cudaStream_t stream) {
        kernels::launch_layernorm_forward_unfused<T>(
            st->y.data(), st->mean.data(), st->rstd.data(), st->x.data(), st->gamma.data(), st->beta.data(),
            tokens, hidden, kEps, st->unfused_ws.data(), st->unfused_ws.size(), stream);
      });
      p.variants.push_back([st, tokens, hidden](cudaStream_t stream) {
        kernels::launch_layernorm_forward<T>(st->y.data(), st->mean.data(), st->rstd.data(), st->x.data(),
                                             st->gamma.data(), st->beta.data(), tokens, hidden, kEps, stream);
      });
    } else {
      p.variants.push_back([st, tokens, hidden](cudaStream_t stream) {
        kernels::launch_layernorm_backward_unfused<T>(st->dx.data(), st->dgamma.data(), st->dbeta.data(),
                                                      st->dy.data(), st->x.data(), st->gamma.data(),
                                                      st->mean.data(), st->rstd.data(), tokens, hidden,
                                                      st->unfused_ws.data(), st->unfused_ws.size(), stream);
      });
      p.variants.push_back([st, tokens, hidden](cudaStream_t stream) {
        kernels::launch_layernorm_backward<T>(st->dx.data(), st->dgamma.data(), st->dbeta.data(),
                                              st->dy.data(), st->x.data(), st->gamma.data(), st->mean.data(),
                                              st->rstd.data(), tokens, hidden, st->fused_ws.data(),
                                              st->fused_ws.size(), stream);
      });
    }
    // For `seqbench dump`: the inputs and what the fused variant wrote (suites/pytorch's parity).
    p.dump = [st, backward, tokens, hidden] {
      const std::vector<std::int64_t> matrix = {tokens, hidden}, vector = {hidden}, rows = {tokens};
      std::vector<DumpArray> a;
      a.push_back(dump_array("x", "input", st->x, matrix));
      a.push_back(dump_array("gamma", "input", st->gamma, vector));
      a.push_back(dump_array("beta", "input", st->beta, vector));
      const char* stats_role = backward ? "input" : "output";
      if (backward) a.push_back(dump_array("dy", "input", st->dy, matrix));
      a.push_back(dump_array("mean", stats_role, st->mean, rows));
      a.push_back(dump_array("rstd", stats_role, st->rstd, rows));
      if (!backward) {
        a.push_back(dump_array("y", "output", st->y, matrix));
      } else {
        a.push_back(dump_array("dx", "output", st->dx, matrix));
        a.push_back(dump_array("dgamma", "output", st->dgamma, vector));
        a.push_back(dump_array("dbeta", "output", st->dbeta, vector));
      }
      return a;
    };
    p.state = st;
    return p;
  };
  return e;
}

// ---------------------------------------------------------------------------------------------
// Checks against reference/layernorm.h
//
// Every comparison is |got - ref| <= tol · s_j, where s_j is an element's magnitude scale from
// the error analysis below and tol is derived from the dtype's unit roundoff u_T (one rounding to
// T) and u = 2^-24 (one fp32 operation). Inputs are exact T values (the reference sees the same
// rounded values in double), so only the kernels' arithmetic and the final rounding count.
// Notation: H hidden, d = ceil(H/32) + 10 the longest chain of fp32 additions any term goes through
// in a row reduction (at most ceil(H/32) sequential adds in a thread - every team has >= 32 threads
// - then 5 warp and 5 cross-warp butterfly levels); a sum of n terms computed along chains of at
// most d additions is off by at most d·u·Σ|terms| (first order).
//
// Forward, per row with mean m, var v, rstd r = 1/sqrt(v + eps) (reference, double):
//   κ² = 1 + (m² + v)/(v + eps): the conditioning of the variance. Two-moment's error in v is
//     <= d·u·(m² + v), so relatively <= d·u·κ² of (v + eps); Welford's is smaller (Chan, Golub &
//     LeVeque 1983) and obeys the same bound.
//   mean: error <= (d + 2)·u·max_c|x_c|                    -> s = max|x|, tol = (d + 2)·u
//   rstd: rel. error <= ½(d + 4)·u·κ² (var) + 2 ulp (rsqrtf) -> s = r·κ², tol = (d + 8)·u
//   y_c = x̂_c·γ_c + β_c with x̂ = (x - m̃)·r̃: the mean error shifts x̂ by <= (d + 2)·u·M, M =
//     max|x|·r, the rstd error scales it by <= (d + 8)·u·κ², the fma and the product add 2u:
//     s_c = |γ_c|·(M + |x̂_c|·κ²) + |β_c| (>= |y_c|), tol = (1 + u_T)(1 + (d + 10)·u) - 1
//     (the final rounding to T on top of the fp32 error).
// Backward, per row, with the forward's m and r as fp32 inputs (the reference gets the same
// floats), g = dy·γ, G1 = mean|g|, G2 = mean|g·x̂|:
//   dx_c = r·(g_c - mean g - x̂_c·mean(g x̂)): x̂ carries 2u, g u, the two means (sum, then times
//     fl(1/H)) (d + 3)·u·G1 and (d + 5)·u·G2, the subtraction, the fma and the product by r 3u:
//     s_c = r·(|g_c| + G1 + |x̂_c|·G2) (>= |dx_c|), tol = (1 + u_T)(1 + (d + 10)·u) - 1.
//   dgamma_c = Σ_r dy·x̂, dbeta_c = Σ_r dy: the column chains are at most D = R + 16 + ceil(P/32) + 32
//     additions (at most R rows per chunk in one thread, up to 16 teams of a block combined, P chunk
//     partials in 32 slices, then the 32 slices), x̂ adds 2u: s_c = Σ_r|dy·x̂| (resp. Σ_r|dy|),
//     tol = (1 + u_T)(1 + (D + 4)·u) - 1.
// Unfused baseline: x̂ and g are stored in T (one more u_T each), so x̂ has u_T, and dx sees u_T in
// g_c, in x̂_c and in each mean (through the stored terms):
//   forward y: tol = (1 + u_T)²(1 + (d + 10)·u) - 1; mean and rstd as fused (two-pass in fp32).
//   backward dx: tol = (1 + u_T)⁴(1 + (d + 10)·u) - 1; dgamma (x̂ in T): (1 + u_T)²(1 + (D + 4)·u) - 1;
//   dbeta as fused.

double tol_of(double u_t, int t_roundings, double fp32_ops) {
  return std::pow(1.0 + u_t, t_roundings) * (1.0 + fp32_ops * kU32) - 1.0;
}

struct Shape {
  std::int64_t rows;
  int hidden;
};

std::vector<Shape> check_shapes(std::mt19937_64& rng) {
  std::vector<Shape> shapes;
  const auto rows_for = [&](int hidden) {
    const std::int64_t cap = std::max<std::int64_t>(1, std::min<std::int64_t>(48, 600000 / hidden));
    return static_cast<std::int64_t>(1 + rng() % static_cast<std::uint64_t>(cap));
  };
  // The odd sizes the issue names, the path boundaries (256 | 257, 8192 | 8193) and a few typical ones.
  for (const int h :
       {1, 2, 3, 8, 31, 33, 127, 255, 256, 257, 768, 1000, 1023, 1024, 4096, 4097, 8192, 8193, 16385, 65536})
    shapes.push_back({rows_for(h), h});
  // Many rows: several chunks, and more than kLayerNormMaxChunks x 16 rows (rows per chunk > 16).
  shapes.push_back({3000, 24});
  shapes.push_back({20000, 3});
  shapes.push_back({1000, 768});
  while (shapes.size() < 56) {
    const int h =
        static_cast<int>(std::exp(std::uniform_real_distribution<double>(0.0, std::log(20000.0))(rng)));
    shapes.push_back({rows_for(std::max(h, 1)), std::max(h, 1)});
  }
  return shapes;
}

template <class T>
std::vector<T> to_device_type(const std::vector<double>& v, std::vector<double>& rounded) {
  std::vector<T> out(v.size());
  rounded.resize(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) {
    out[i] = from_float<T>(static_cast<float>(v[i]));
    rounded[i] = to_float(out[i]);
  }
  return out;
}

ref::Matrix as_matrix(const std::vector<double>& v, std::int64_t rows, int cols) {
  ref::Matrix m(rows, cols);
  std::copy(v.begin(), v.end(), m.data());
  return m;
}

ref::Vector as_vector(const std::vector<double>& v) {
  ref::Vector out(static_cast<ref::Index>(v.size()));
  std::copy(v.begin(), v.end(), out.data());
  return out;
}

template <class T>
std::vector<CheckResult> checks_for_dtype(std::uint64_t seed) {
  const std::string dt(DTypeTraits<T>::name);
  const double ut = unit_roundoff(DTypeTraits<T>::dtype);
  const char* kUnit = "random shapes";
  ScaledTally fwd{"operators/layernorm/forward/" + dt, kUnit},
      fwd2{"operators/layernorm/forward_two_moment/" + dt, kUnit},
      bwd{"operators/layernorm/backward/" + dt, kUnit},
      ufwd{"operators/layernorm/forward_unfused/" + dt, kUnit},
      ubwd{"operators/layernorm/backward_unfused/" + dt, kUnit};
  fwd.rule = fwd2.rule =
      "y: s=|gamma|(max|x| rstd + |xhat| k2)+|beta|, tol=(1+u_T)(1+(d+10)u)-1; mean: s=max|x|, tol=(d+2)u; "
      "rstd: s=rstd k2, tol=(d+8)u; d=ceil(H/32)+10, k2=1+(m^2+v)/(v+eps), u=2^-24";
  bwd.rule =
      "dx: s=rstd(|g|+mean|g|+|xhat| mean|g xhat|), tol=(1+u_T)(1+(d+10)u)-1; dgamma/dbeta: s=sum|dy xhat| / "
      "sum|dy|, tol=(1+u_T)(1+(D+4)u)-1, D=R+16+ceil(P/32)+32";
  ufwd.rule = "as forward with (1+u_T)^2 for y (xhat stored in T)";
  ubwd.rule = "as backward with (1+u_T)^4 for dx, (1+u_T)^2 for dgamma (xhat, g stored in T)";

  std::mt19937_64 rng(seed ^ (0x4C4Eull + static_cast<std::uint64_t>(DTypeTraits<T>::dtype)));
  const std::vector<Shape> shapes = check_shapes(rng);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::uniform_real_distribution<double> uni(0.0, 1.0);

  for (std::size_t ci = 0; ci < shapes.size(); ++ci) {
    const std::int64_t rows = shapes[ci].rows;
    const int hidden = shapes[ci].hidden;
    const auto n = static_cast<std::size_t>(rows) * static_cast<std::size_t>(hidden);
    const auto hn = static_cast<std::size_t>(hidden), rn = static_cast<std::size_t>(rows);
    const std::size_t off = uni(rng) < 0.3 ? 1 : 0;  // an odd offset forces the scalar path
    const float eps = std::array<float, 3>{1e-5f, 1e-6f, 1e-3f}[rng() % 3];
    std::ostringstream where;
    where << "rows=" << rows << ",hidden=" << hidden << (off ? ",offset=1" : "") << ",eps=" << eps
          << ",seed=" << seed << ",case=" << ci;

    // Inputs: per-row mean in [-2, 2] and std in [0.5, 2]; gamma of both signs; dy ~ N(0, 1).
    std::vector<double> xd(n), gd(hn), bd(hn), dyd(n);
    for (std::size_t r = 0; r < rn; ++r) {
      const double mu = 4.0 * uni(rng) - 2.0, sigma = 0.5 + 1.5 * uni(rng);
      for (std::size_t c = 0; c < hn; ++c) xd[r * hn + c] = mu + sigma * normal(rng);
    }
    for (std::size_t c = 0; c < hn; ++c) {
      gd[c] = (0.5 + uni(rng)) * (uni(rng) < 0.2 ? -1.0 : 1.0);
      bd[c] = 2.0 * uni(rng) - 1.0;
    }
    for (double& v : dyd) v = normal(rng);
    std::vector<double> x, g, b, dy;
    const std::vector<T> xh = to_device_type<T>(xd, x), gh = to_device_type<T>(gd, g),
                         bh = to_device_type<T>(bd, b), dyh = to_device_type<T>(dyd, dy);

    // Reference forward, and the per-row quantities of the error analysis.
    const ref::LayerNormForward rf =
        ref::layernorm_forward(as_matrix(x, rows, hidden), as_vector(g), as_vector(b), eps);
    const double d = std::ceil(hidden / 32.0) + 10.0;
    std::vector<double> kappa2(rn), max_abs(rn), xhat(n);
    for (std::size_t r = 0; r < rn; ++r) {
      double v = 0.0, mx = 0.0;
      for (std::size_t c = 0; c < hn; ++c) {
        const double t = x[r * hn + c] - rf.mean[static_cast<ref::Index>(r)];
        v += t * t;
        mx = std::max(mx, std::abs(x[r * hn + c]));
      }
      v /= hidden;
      const double m = rf.mean[static_cast<ref::Index>(r)];
      kappa2[r] = 1.0 + (m * m + v) / (v + eps);
      max_abs[r] = mx;
      for (std::size_t c = 0; c < hn; ++c)
        xhat[r * hn + c] = (x[r * hn + c] - m) * rf.rstd[static_cast<ref::Index>(r)];
    }
    std::vector<double> y_ref(rf.y.data(), rf.y.data() + n), y_s(n), mean_ref(rn), mean_s(rn), rstd_ref(rn),
        rstd_s(rn);
    for (std::size_t r = 0; r < rn; ++r) {
      const double rs = rf.rstd[static_cast<ref::Index>(r)];
      mean_ref[r] = rf.mean[static_cast<ref::Index>(r)];
      mean_s[r] = std::max(max_abs[r], std::numeric_limits<double>::min());
      rstd_ref[r] = rs;
      rstd_s[r] = rs * kappa2[r];
      for (std::size_t c = 0; c < hn; ++c)
        y_s[r * hn + c] = std::abs(g[c]) * (max_abs[r] * rs + std::abs(xhat[r * hn + c]) * kappa2[r]) +
                          std::abs(b[c]) + std::numeric_limits<double>::min();
    }

    // Device buffers.
    Guarded<T> dx_x(n, off), dx_g(hn, off), dx_b(hn, off), dx_y(n, off), dx_dy(n, off), dx_dx(n, off),
        dx_dg(hn, off), dx_db(hn, off);
    Guarded<float> dx_mean(rn, 0), dx_rstd(rn, 0);
    dx_x.upload(xh);
    dx_g.upload(gh);
    dx_b.upload(bh);
    dx_dy.upload(dyh);

    const auto run_forward = [&](ScaledTally& t, bool unfused, LayerNormStats stats) {
      dx_y.poison();
      dx_mean.poison();
      dx_rstd.poison();
      if (unfused) {
        DeviceBuffer<unsigned char> ws(
            kernels::layernorm_unfused_forward_workspace_bytes(DTypeTraits<T>::dtype, rows, hidden));
        kernels::launch_layernorm_forward_unfused<T>(dx_y.data(), dx_mean.data(), dx_rstd.data(), dx_x.data(),
                                                     dx_g.data(), dx_b.data(), rows, hidden, eps, ws.data(),
                                                     ws.size(), nullptr);
        SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
      } else {
        kernels::launch_layernorm_forward<T>(dx_y.data(), dx_mean.data(), dx_rstd.data(), dx_x.data(),
                                             dx_g.data(), dx_b.data(), rows, hidden, eps, nullptr, stats);
        SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
      }
      std::size_t guard = 0;
      const auto y = dx_y.download(guard), mean = dx_mean.download(guard), rstd = dx_rstd.download(guard);
      t.add(y, y_ref, y_s, tol_of(ut, unfused ? 2 : 1, d + 10), "y " + where.str());
      t.add(mean, mean_ref, mean_s, (d + 2) * kU32, "mean " + where.str());
      t.add(rstd, rstd_ref, rstd_s, (d + 8) * kU32, "rstd " + where.str());
      t.guard(guard, where.str());
      ++t.cases;
    };
    run_forward(fwd, false, LayerNormStats::welford);
    run_forward(fwd2, false, LayerNormStats::two_moment);
    run_forward(ufwd, true, LayerNormStats::welford);

    // Backward from the reference statistics rounded to fp32 (the reference gets the same floats).
    std::vector<float> meanf(rn), rstdf(rn);
    ref::Vector mean_in(static_cast<ref::Index>(rn)), rstd_in(static_cast<ref::Index>(rn));
    for (std::size_t r = 0; r < rn; ++r) {
      meanf[r] = static_cast<float>(mean_ref[r]);
      rstdf[r] = static_cast<float>(rstd_ref[r]);
      mean_in[static_cast<ref::Index>(r)] = meanf[r];
      rstd_in[static_cast<ref::Index>(r)] = rstdf[r];
    }
    dx_mean.upload(meanf);
    dx_rstd.upload(rstdf);
    const ref::LayerNormGrads rg = ref::layernorm_backward(
        as_matrix(dy, rows, hidden), as_matrix(x, rows, hidden), as_vector(g), mean_in, rstd_in);
    std::vector<double> dx_ref(rg.dx.data(), rg.dx.data() + n), dx_s(n), dg_ref(hn), dg_s(hn, 0.0),
        db_ref(hn), db_s(hn, 0.0);
    for (std::size_t r = 0; r < rn; ++r) {
      double g1 = 0.0, g2 = 0.0;
      for (std::size_t c = 0; c < hn; ++c) {
        const double xh_rc = (x[r * hn + c] - meanf[r]) * static_cast<double>(rstdf[r]);
        const double gg = dy[r * hn + c] * g[c];
        g1 += std::abs(gg);
        g2 += std::abs(gg * xh_rc);
        dg_s[c] += std::abs(dy[r * hn + c] * xh_rc);
        db_s[c] += std::abs(dy[r * hn + c]);
      }
      g1 /= hidden;
      g2 /= hidden;
      for (std::size_t c = 0; c < hn; ++c) {
        const double xh_rc = (x[r * hn + c] - meanf[r]) * static_cast<double>(rstdf[r]);
        dx_s[r * hn + c] = rstdf[r] * (std::abs(dy[r * hn + c] * g[c]) + g1 + std::abs(xh_rc) * g2) +
                           std::numeric_limits<double>::min();
      }
    }
    for (std::size_t c = 0; c < hn; ++c) {
      dg_ref[c] = rg.dgamma[static_cast<ref::Index>(c)];
      db_ref[c] = rg.dbeta[static_cast<ref::Index>(c)];
      dg_s[c] += std::numeric_limits<double>::min();
      db_s[c] += std::numeric_limits<double>::min();
    }
    const kernels::LayerNormBackwardPartition part = kernels::layernorm_backward_partition(rows, hidden);
    const double dcols =
        static_cast<double>(part.rows_per_chunk) + 16.0 + std::ceil(part.chunks / 32.0) + 32.0;

    const auto run_backward = [&](ScaledTally& t, bool unfused) {
      dx_dx.poison();
      dx_dg.poison();
      dx_db.poison();
      const std::size_t bytes =
          unfused ? kernels::layernorm_unfused_backward_workspace_bytes(DTypeTraits<T>::dtype, rows, hidden)
                  : kernels::layernorm_backward_workspace_bytes(rows, hidden);
      DeviceBuffer<unsigned char> ws(bytes);
      ws.fill_bytes(0xFF);  // the workspace's contents on entry must not matter
      if (unfused)
        kernels::launch_layernorm_backward_unfused<T>(
            dx_dx.data(), dx_dg.data(), dx_db.data(), dx_dy.data(), dx_x.data(), dx_g.data(), dx_mean.data(),
            dx_rstd.data(), rows, hidden, ws.data(), ws.size(), nullptr);
      else
        kernels::launch_layernorm_backward<T>(dx_dx.data(), dx_dg.data(), dx_db.data(), dx_dy.data(),
                                              dx_x.data(), dx_g.data(), dx_mean.data(), dx_rstd.data(), rows,
                                              hidden, ws.data(), ws.size(), nullptr);
      SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
      std::size_t guard = 0;
      const auto dxv = dx_dx.download(guard), dgv = dx_dg.download(guard), dbv = dx_db.download(guard);
      t.add(dxv, dx_ref, dx_s, tol_of(ut, unfused ? 4 : 1, d + 10), "dx " + where.str());
      t.add(dgv, dg_ref, dg_s, tol_of(ut, unfused ? 2 : 1, dcols + 4), "dgamma " + where.str());
      t.add(dbv, db_ref, db_s, tol_of(ut, 1, dcols + 4), "dbeta " + where.str());
      t.guard(guard, where.str());
      ++t.cases;
    };
    run_backward(bwd, false);
    run_backward(ubwd, true);
  }
  return {fwd.result(), fwd2.result(), bwd.result(), ufwd.result(), ubwd.result()};
}

}  // namespace

void add_layernorm_experiments(SuiteSpec& suite, const SuiteOptions& options) {
  // LightSeq2 Fig. 16: batch tokens x hidden size, forward and backward, bf16 and fp32.
  const std::vector<std::int64_t> tokens =
      shapes<std::int64_t>(options, {67}, {4096, 16384}, {1024, 4096, 16384, 65536});
  const std::vector<int> hiddens = shapes<int>(options, {1024}, {1024}, {256, 768, 1024, 4096});
  for (const bool backward : {false, true}) {
    for (const DType dtype :
         shapes<DType>(options, {DType::bf16}, {DType::bf16}, {DType::bf16, DType::f32})) {
      for (const int hidden : hiddens) {
        for (const std::int64_t t : tokens) {
          suite.experiments.push_back(dispatch_dtype(
              dtype, [&](auto tag) { return layernorm_experiment<decltype(tag)>(backward, t, hidden); }));
        }
      }
    }
  }
}

std::vector<CheckResult> layernorm_gpu_checks(std::uint64_t seed) {
  return check_util::checks_for_all_dtypes([&](auto tag) { return checks_for_dtype<decltype(tag)>(seed); });
}

}  // namespace seqbench::operators
