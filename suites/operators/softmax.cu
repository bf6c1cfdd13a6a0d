// Operator-suite experiments (LightSeq2 Fig. 17: attention softmax over batch x sequence length,
// forward and backward) and the GPU checks of the softmax kernels against reference/.

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
#include "kernels/softmax.h"
#include "reference/softmax.h"
#include "suites/operators/check_util.h"
#include "suites/operators/operators.h"

namespace seqbench::operators {
namespace {

using check_util::fill;
using check_util::kU32;
using check_util::ScaledTally;
using kernels::SoftmaxConfig;
using kernels::SoftmaxMask;
using kernels::SoftmaxShape;
// Guard elements on both sides of every tensor; an odd element offset forces the scalar path.
template <class T>
using Guarded = check_util::Guarded<T, check_util::GuardAt::both_ends>;

// ---------------------------------------------------------------------------------------------
// Experiments

// Per element (fma = 2): forward scale, max, subtract, exp, sum, normalize = 6; backward the dot
// product's fma, subtract, two multiplies = 5.
constexpr double kForwardFlopsPerElement = 6.0;
constexpr double kBackwardFlopsPerElement = 5.0;
// A [batch, heads, len, len] tensor of 16384-long rows would not fit (2^32 elements at 64x16 heads);
// q_len is reduced so that one tensor holds at most 2^26 elements (128 MiB in bf16: far past L2,
// above the issue's 16M-element threshold). The rows stay k_len = len long, which is what selects
// the kernels' paths; params record q_len.
constexpr std::int64_t kMaxElements = std::int64_t{1} << 26;
constexpr float kScale = 0.125f;  // 1/sqrt(64), head dimension 64

template <class T>
struct SoftmaxState {
  DeviceBuffer<T> x, y, dy, dx;
  DeviceBuffer<unsigned char> unfused_ws;
  // One tuner per experiment, shared by every copy the runner prepares (calls_per_sample): it tunes
  // in the first prepare() and the others find its choice cached, so every copy runs the same
  // configuration and the experiment's notes show the one tuning.
  std::shared_ptr<kernels::SoftmaxTuner> tuner;
};

template <class T>
ExperimentSpec softmax_experiment(bool backward, std::int64_t batch, std::int64_t heads, std::int64_t len) {
  const std::int64_t q_len = std::min(len, std::max<std::int64_t>(1, kMaxElements / (batch * heads * len)));
  const SoftmaxShape shape{batch, heads, q_len, len};
  const double n = static_cast<double>(shape.rows()) * static_cast<double>(len), s = sizeof(T);
  const std::string dtype(DTypeTraits<T>::name);
  ExperimentSpec e;
  e.name = std::string(backward ? "softmax_bwd/" : "softmax_fwd/") + dtype + "/bh=" + std::to_string(batch) +
           "x" + std::to_string(heads) + ",len=" + std::to_string(len) +
           (q_len < len ? ",q=" + std::to_string(q_len) : "");
  e.params = {{"op", "attention_softmax"},
              {"direction", backward ? "bwd" : "fwd"},
              {"dtype", dtype},
              {"batch", batch},
              {"heads", heads},
              {"q_len", q_len},
              {"k_len", len},
              {"elements", shape.rows() * len},
              {"scale", kScale},
              {"mask", "none"},
              {"figure", "LightSeq2 Fig. 17"}};
  e.baseline = "unfused";
  // Minimal traffic: forward reads x, writes y; backward reads y and dy, writes dx.
  const double bytes = (backward ? 3.0 : 2.0) * n * s;
  const double flops = n * (backward ? kBackwardFlopsPerElement : kForwardFlopsPerElement);
  // "fused": the configuration SoftmaxTuner picked (tuned once, in prepare, outside the timing);
  // "fused_heuristic": softmax_default_config, to show what tuning is worth.
  e.variants = {{"unfused", bytes, flops}, {"fused", bytes, flops}, {"fused_heuristic", bytes, flops}};
  e.dump_variant = "fused";
  e.prepare = [backward, shape, tuner = std::make_shared<kernels::SoftmaxTuner>()] {
    const auto count = static_cast<std::size_t>(shape.rows()) * static_cast<std::size_t>(shape.k_len);
    auto st = std::make_shared<SoftmaxState<T>>();
    st->tuner = tuner;
    const SoftmaxMask none{};
    st->y = DeviceBuffer<T>(count);
    if (!backward) {
      st->x = DeviceBuffer<T>(count);
      fill(st->x, 21, -8.0f, 8.0f);
      st->unfused_ws = DeviceBuffer<unsigned char>(
          kernels::softmax_unfused_forward_workspace_bytes(DTypeTraits<T>::dtype, shape));
      st->tuner->template forward<T>(st->y.data(), st->x.data(), shape, kScale, none, nullptr);
    } else {
      // y is a real softmax output (of random scores), as the backward always sees.
      st->dx = DeviceBuffer<T>(count);
      st->dy = DeviceBuffer<T>(count);
      fill(st->dx, 22, -8.0f, 8.0f);
      kernels::launch_softmax_forward<T>(st->y.data(), st->dx.data(), shape, kScale, none, nullptr);
      fill(st->dy, 23, -1.0f, 1.0f);
      st->unfused_ws = DeviceBuffer<unsigned char>(
          kernels::softmax_unfused_backward_workspace_bytes(DTypeTraits<T>::dtype, shape));
      st->tuner->template backward<T>(st->dx.data(), st->dy.data(), st->y.data(), shape, kScale, nullptr);
    }
    SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
    PreparedExperiment p;
    if (!backward) {
      p.variants.push_back([st, shape, none](cudaStream_t stream) {
        kernels::launch_softmax_forward_unfused<T>(st->y.data(), st->x.data(), shape, kScale, none,
                                                   st->unfused_ws.data(), st->unfused_ws.size(), stream);
      });
      p.variants.push_back([st, shape, none](cudaStream_t stream) {
        st->tuner->template forward<T>(st->y.data(), st->x.data(), shape, kScale, none, stream);
      });
      p.variants.push_back([st, shape, none](cudaStream_t stream) {
        kernels::launch_softmax_forward<T>(st->y.data(), st->x.data(), shape, kScale, none, stream);
      });
    } else {
      p.variants.push_back([st, shape](cudaStream_t stream) {
        kernels::launch_softmax_backward_unfused<T>(st->dx.data(), st->dy.data(), st->y.data(), shape, kScale,
                                                    st->unfused_ws.data(), st->unfused_ws.size(), stream);
      });
      p.variants.push_back([st, shape](cudaStream_t stream) {
        st->tuner->template backward<T>(st->dx.data(), st->dy.data(), st->y.data(), shape, kScale, stream);
      });
      p.variants.push_back([st, shape](cudaStream_t stream) {
        kernels::launch_softmax_backward<T>(st->dx.data(), st->dy.data(), st->y.data(), shape, kScale,
                                            stream);
      });
    }
    // The tuner ran once in prepare(): its choice (and every candidate's time) goes to the report.
    p.notes = [st] { return nlohmann::json{{"tuner", nlohmann::json::parse(st->tuner->to_json())}}; };
    // For `seqbench dump`: the inputs and what the fused variant wrote (suites/pytorch's parity).
    // The experiments use no mask (params.mask "none"), so there is no key_lengths array.
    p.dump = [st, backward, shape] {
      const std::vector<std::int64_t> scores = {shape.batch, shape.heads, shape.q_len, shape.k_len};
      std::vector<DumpArray> a;
      if (!backward) {
        a.push_back(dump_array("x", "input", st->x, scores));
        a.push_back(dump_array("y", "output", st->y, scores));
      } else {
        a.push_back(dump_array("y", "input", st->y, scores));
        a.push_back(dump_array("dy", "input", st->dy, scores));
        a.push_back(dump_array("dx", "output", st->dx, scores));
      }
      return a;
    };
    p.state = st;
    return p;
  };
  return e;
}

// ---------------------------------------------------------------------------------------------
// Checks against reference/softmax.h
//
// Every comparison is |got - ref| <= tol · s_j with s_j an element's magnitude scale and tol
// derived from u_T (one rounding to T) and u = 2^-24 (one fp32 operation); inputs are exact T
// values, the reference sees the same values in double. d = ceil(k_len/32) + 10 bounds the chain
// of fp32 additions in a row sum (at most ceil(k_len/32) sequential adds per thread, every team
// having >= 32 threads, then 5 + 5 butterfly levels). Z = max |scale·x| over the case.
// Forward: y_j = e_j/S with e_j = exp(z_j - m). The shift m cancels between e_j and S, so only the
//   rounding of z_j = scale·x_j (u|z_j|) and of z_j - m (u|z_j - m| <= 2uZ) matter: <= 3uZ in the
//   exponent; expf adds 2 ulp (4u); S adds d·u; the reciprocal and the product 2u. Relative:
//   (6Z + d + 10)·u, then the rounding to T: s_j = max(y_j, min normal of T) (below it T's spacing is
//   absolute), tol = (1 + u_T)(1 + (6Z + d + 10)·u) - 1. Masked keys must be exactly 0 (tol·s_j is
//   ~1e-40 there) and fully-masked rows all zeros.
// Backward: dx_j = scale·(y_j·(dy_j - dot)), dot = Σ y_k dy_k with d·u·Σ|y dy| (fma chain) + the
//   subtraction and two products 3u: s_j = max(|scale|·|y_j|·(|dy_j| + Σ_k|y_k dy_k|), min normal),
//   tol = (1 + u_T)(1 + (d + 4)·u) - 1.
// Unfused forward: z and e are stored in T: z's rounding moves each exponent by u_T|z_j| <= u_T·Z,
//   which changes y_j by a factor within exp(±2u_T·Z); e_j and y_j are rounded to T:
//   tol = (1 + u_T)³·exp(2u_T·Z)·(1 + (6Z + d + 10)·u) - 1.
// Unfused backward: t = dy·y, dx = y·(dy - dot) and scale·dx are each rounded to T:
//   tol = (1 + u_T)³(1 + (d + 4)·u) - 1, and s_j grows by the underflow of the first two, which
//   the scale multiplies: |scale|·η_T·(1 + |y_j|·#{k: |t_k| < min normal}) / tol (η_T = u_T·min
//   normal). Without it, f16 rows with scale 2.5 failed by up to 1.17x (found by the simt build).

double min_normal(DType dtype) {
  return dtype == DType::f16 ? std::ldexp(1.0, -14) : std::ldexp(1.0, -126);
}

// One random problem: shape, mask, scale, inputs (as T and as the doubles the reference sees).
template <class T>
struct Case {
  SoftmaxShape shape;
  float scale = 1.0f;
  bool causal = false;
  std::int64_t causal_offset = 0;
  std::vector<std::int32_t> key_lengths;  // empty: none
  std::size_t offset = 0;                 // element offset of every tensor
  std::vector<T> x, dy;
  std::vector<double> xd, dyd;
  std::string where;

  ref::AttentionMask ref_mask() const {
    ref::AttentionMask m;
    m.causal = causal;
    m.causal_offset = causal_offset;
    for (const std::int32_t l : key_lengths) m.key_lengths.push_back(l);
    return m;
  }
  ref::AttentionShape ref_shape() const { return {shape.batch, shape.heads, shape.q_len, shape.k_len}; }
};

template <class T>
Case<T> make_case(std::mt19937_64& rng, std::int64_t k_len, std::int64_t max_rows, std::uint64_t seed,
                  int index) {
  std::uniform_real_distribution<double> uni(0.0, 1.0);
  Case<T> c;
  const auto pick = [&](std::int64_t lo, std::int64_t hi) {
    return lo + static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(hi - lo + 1));
  };
  c.shape.batch = pick(1, 3);
  c.shape.heads = pick(1, 3);
  c.shape.q_len = std::max<std::int64_t>(
      1, std::min<std::int64_t>(pick(1, 9), max_rows / (c.shape.batch * c.shape.heads)));
  c.shape.k_len = k_len;
  const double scales[] = {1.0, 0.125, 1.0 / std::sqrt(static_cast<double>(k_len)), 2.5};
  c.scale = static_cast<float>(scales[rng() % 4]);
  const int mask_kind = static_cast<int>(rng() % 4);  // none, causal, key lengths, both
  c.causal = mask_kind == 1 || mask_kind == 3;
  if (c.causal) c.causal_offset = pick(-2, std::max<std::int64_t>(0, k_len - c.shape.q_len) + 2);
  if (mask_kind >= 2) {
    for (std::int64_t b = 0; b < c.shape.batch; ++b) {
      // Sometimes 0 (a fully-masked batch element), sometimes all keys.
      const double u = uni(rng);
      c.key_lengths.push_back(static_cast<std::int32_t>(u < 0.15 ? 0 : u > 0.85 ? k_len : pick(0, k_len)));
    }
  }
  c.offset = uni(rng) < 0.3 ? 1 : 0;
  const double amp = std::array<double, 3>{1.0, 4.0, 8.0}[rng() % 3];
  const auto n = static_cast<std::size_t>(c.shape.rows() * k_len);
  c.x.resize(n);
  c.xd.resize(n);
  c.dy.resize(n);
  c.dyd.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    c.x[i] = from_float<T>(static_cast<float>(amp * (2.0 * uni(rng) - 1.0)));
    c.xd[i] = to_float(c.x[i]);
    c.dy[i] = from_float<T>(static_cast<float>(2.0 * uni(rng) - 1.0));
    c.dyd[i] = to_float(c.dy[i]);
  }
  std::ostringstream os;
  os << "shape=[" << c.shape.batch << "," << c.shape.heads << "," << c.shape.q_len << "," << k_len
     << "],scale=" << c.scale
     << (c.causal ? ",causal_offset=" + std::to_string(c.causal_offset) : std::string())
     << (c.key_lengths.empty() ? "" : ",key_lengths") << (c.offset ? ",offset=1" : "") << ",seed=" << seed
     << ",case=" << index;
  c.where = os.str();
  return c;
}

// Runs forward and backward of one case (fused with `config`, or unfused) and adds the comparisons
// to the two tallies.
template <class T>
void run_case(const Case<T>& c, bool unfused, const SoftmaxConfig* config, ScaledTally& fwd, ScaledTally& bwd,
              const std::string& label) {
  const DType dt = DTypeTraits<T>::dtype;
  const double ut = unit_roundoff(dt), floor = min_normal(dt);
  const auto n = static_cast<std::size_t>(c.shape.rows() * c.shape.k_len);
  const double d = std::ceil(static_cast<double>(c.shape.k_len) / 32.0) + 10.0;
  double z_max = 0.0;
  for (const double v : c.xd) z_max = std::max(z_max, std::abs(c.scale * v));

  // Forward.
  Guarded<T> x(n, c.offset), y(n, c.offset), dy(n, c.offset), dx(n, c.offset);
  DeviceBuffer<std::int32_t> lengths(c.key_lengths.size());
  if (!c.key_lengths.empty()) lengths.copy_from_host(c.key_lengths);
  SoftmaxMask mask;
  mask.causal = c.causal;
  mask.causal_offset = c.causal_offset;
  mask.key_lengths = c.key_lengths.empty() ? nullptr : lengths.data();
  x.upload(c.x);
  y.poison();
  if (unfused) {
    DeviceBuffer<unsigned char> ws(kernels::softmax_unfused_forward_workspace_bytes(dt, c.shape));
    kernels::launch_softmax_forward_unfused<T>(y.data(), x.data(), c.shape, c.scale, mask, ws.data(),
                                               ws.size(), nullptr);
    SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
  } else {
    kernels::launch_softmax_forward<T>(y.data(), x.data(), c.shape, c.scale, mask, nullptr, config);
  }
  SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
  const ref::Matrix scores = Eigen::Map<const ref::Matrix>(c.xd.data(), c.shape.rows(), c.shape.k_len);
  const ref::Matrix yr = ref::attention_softmax_forward(scores, c.ref_shape(), c.scale, c.ref_mask());
  std::size_t guard = 0;
  const std::vector<double> yg = y.download(guard);
  std::vector<double> y_ref(yr.data(), yr.data() + n), y_s(n);
  for (std::size_t i = 0; i < n; ++i) y_s[i] = std::max(y_ref[i], floor);
  const double fp32 = (6.0 * z_max + d + 10.0) * kU32;
  const double tol_f = unfused ? std::pow(1.0 + ut, 3) * std::exp(2.0 * ut * z_max) * (1.0 + fp32) - 1.0
                               : (1.0 + ut) * (1.0 + fp32) - 1.0;
  fwd.add(yg, y_ref, y_s, tol_f, label + "y " + c.where);
  fwd.guard(guard, label + c.where);
  ++fwd.cases;

  // Backward, from the reference probabilities rounded to T (exact zeros where masked).
  std::vector<T> yt(n);
  std::vector<double> ytd(n);
  for (std::size_t i = 0; i < n; ++i) {
    yt[i] = from_float<T>(static_cast<float>(y_ref[i]));
    ytd[i] = to_float(yt[i]);
  }
  y.upload(yt);
  dy.upload(c.dy);
  dx.poison();
  if (unfused) {
    DeviceBuffer<unsigned char> ws(kernels::softmax_unfused_backward_workspace_bytes(dt, c.shape));
    kernels::launch_softmax_backward_unfused<T>(dx.data(), dy.data(), y.data(), c.shape, c.scale, ws.data(),
                                                ws.size(), nullptr);
    SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
  } else {
    kernels::launch_softmax_backward<T>(dx.data(), dy.data(), y.data(), c.shape, c.scale, nullptr, config);
  }
  SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
  const auto rows = static_cast<std::size_t>(c.shape.rows()), k = static_cast<std::size_t>(c.shape.k_len);
  const ref::Matrix dxr = ref::attention_softmax_backward(
      Eigen::Map<const ref::Matrix>(c.dyd.data(), c.shape.rows(), c.shape.k_len),
      Eigen::Map<const ref::Matrix>(ytd.data(), c.shape.rows(), c.shape.k_len), c.scale);
  guard = 0;
  const std::vector<double> dxg = dx.download(guard);
  std::vector<double> dx_ref(dxr.data(), dxr.data() + n), dx_s(n);
  const double tol_b = std::pow(1.0 + ut, unfused ? 3 : 1) * (1.0 + (d + 4.0) * kU32) - 1.0;
  // The unfused intermediates t_k = dy_k·y_k and p_j = y_j·(dy_j - dot) are rounded to T before the
  // scale, so their underflow errors (at most eta = u_T·min normal each, absolute) reach dx times
  // |scale|: |scale|·eta·(1 + |y_j|·(number of subnormal t_k)). The floor covers only the final
  // rounding's eta; folded into s as eta_terms/tol_b, so that tol_b·s adds them.
  const double eta = ut * floor;
  for (std::size_t r = 0; r < rows; ++r) {
    double dot_abs = 0.0, subnormal_t = 0.0;
    for (std::size_t j = 0; j < k; ++j) {
      const double t = std::abs(ytd[r * k + j] * c.dyd[r * k + j]);
      dot_abs += t;
      subnormal_t += t < floor ? 1.0 : 0.0;
    }
    for (std::size_t j = 0; j < k; ++j) {
      const std::size_t i = r * k + j;
      dx_s[i] = std::max(std::abs(c.scale) * std::abs(ytd[i]) * (std::abs(c.dyd[i]) + dot_abs), floor);
      if (unfused) dx_s[i] += std::abs(c.scale) * eta * (1.0 + std::abs(ytd[i]) * subnormal_t) / tol_b;
    }
  }
  bwd.add(dxg, dx_ref, dx_s, tol_b, label + "dx " + c.where);
  bwd.guard(guard, label + c.where);
  ++bwd.cases;
}

template <class T>
std::vector<CheckResult> checks_for_dtype(std::uint64_t seed) {
  const std::string dt(DTypeTraits<T>::name);
  const char* kUnit = "runs";
  ScaledTally fwd("operators/softmax/forward/" + dt, kUnit), bwd("operators/softmax/backward/" + dt, kUnit),
      ufwd("operators/softmax/forward_unfused/" + dt, kUnit),
      ubwd("operators/softmax/backward_unfused/" + dt, kUnit),
      cand("operators/softmax/tuner_candidates/" + dt, kUnit);
  fwd.rule =
      "y: s=max(y, min normal of T), tol=(1+u_T)(1+(6Z+d+10)u)-1; d=ceil(k/32)+10, Z=max|scale x|, u=2^-24";
  bwd.rule = "dx: s=max(|scale| y (|dy|+sum|y dy|), min normal), tol=(1+u_T)(1+(d+4)u)-1";
  ufwd.rule = "as forward with (1+u_T)^3 exp(2 u_T Z) (z, e stored in T)";
  ubwd.rule =
      "as backward with (1+u_T)^3 (dy*y, y(dy-dot) stored in T), plus their underflow times |scale|: "
      "|scale| eta_T (1 + |y_j| #subnormal dy*y)";
  cand.rule = "every configuration the tuner may pick, forward and backward, with the fused rules";

  std::mt19937_64 rng(seed ^ (0x534Dull + static_cast<std::uint64_t>(DTypeTraits<T>::dtype)));
  // Row lengths: the odd sizes the issue names, the path boundaries (1024 | 1025, 16384 | 16385)
  // and random ones; rows are few for long rows to keep the double reference quick.
  std::vector<std::int64_t> lengths = {1,   2,    3,    7,    8,    31,   32,   33,   64,    127,   129,
                                       500, 1000, 1023, 1024, 1025, 2048, 4097, 8192, 16384, 16385, 40000};
  while (lengths.size() < 56)
    lengths.push_back(static_cast<std::int64_t>(
        std::exp(std::uniform_real_distribution<double>(0.0, std::log(20000.0))(rng))));
  for (std::size_t i = 0; i < lengths.size(); ++i) {
    const std::int64_t k = std::max<std::int64_t>(1, lengths[i]);
    const Case<T> c = make_case<T>(rng, k, std::max<std::int64_t>(1, 400000 / k), seed, static_cast<int>(i));
    run_case(c, false, nullptr, fwd, bwd, "");
    run_case(c, true, nullptr, ufwd, ubwd, "");
  }
  // Every candidate configuration of the tuner, on a few lengths per path, aligned and not.
  for (const std::int64_t k : {1, 3, 100, 127, 1000, 1023, 1024, 2000, 4097, 8192, 16385, 100000}) {
    for (const std::size_t offset : {std::size_t{0}, std::size_t{1}}) {
      Case<T> c =
          make_case<T>(rng, k, std::max<std::int64_t>(1, 60000 / k), seed, 1000 + static_cast<int>(k));
      c.offset = offset;
      const bool vec = offset == 0 && kernels::softmax_vectorizable(DTypeTraits<T>::dtype, k, {});
      for (const SoftmaxConfig& config : kernels::softmax_candidate_configs(DTypeTraits<T>::dtype, k, vec))
        run_case(c, false, &config, cand, cand, config.to_string() + " ");
    }
  }
  return {fwd.result(), bwd.result(), ufwd.result(), ubwd.result(), cand.result()};
}

}  // namespace

void add_softmax_experiments(SuiteSpec& suite, const SuiteOptions& options) {
  // LightSeq2 Fig. 17 (softmax): batch·heads x sequence length, forward and backward.
  const std::vector<std::int64_t> batches = shapes<std::int64_t>(options, {1}, {16}, {16, 64});
  const std::vector<std::int64_t> lens =
      shapes<std::int64_t>(options, {128}, {128, 2048}, {64, 128, 256, 512, 1024, 2048, 4096, 16384});
  const std::vector<DType> dtypes =
      shapes<DType>(options, {DType::bf16}, {DType::bf16}, {DType::bf16, DType::f32});
  for (const bool backward : {false, true}) {
    for (const DType dtype : dtypes) {
      for (const std::int64_t batch : batches) {
        for (const std::int64_t len : lens) {
          suite.experiments.push_back(dispatch_dtype(
              dtype, [&](auto tag) { return softmax_experiment<decltype(tag)>(backward, batch, 16, len); }));
        }
      }
    }
  }
  // Rows longer than one block holds (the multipass path: k_len > 16384, kernels/softmax.h), at the
  // lengths of shared/ANCHORS.md's long-row comparisons (QuACK's fp32 N = 262k at 3.01 TB/s on an
  // H100; Liger's drop past 32k), one head of rows, q_len capped at kMaxElements as above. Full
  // tier only: the quick shapes are for smoke runs.
  const std::vector<std::int64_t> long_lens = shapes<std::int64_t>(options, {}, {}, {32768, 262144});
  for (const bool backward : {false, true})
    for (const DType dtype : dtypes)
      for (const std::int64_t len : long_lens)
        suite.experiments.push_back(dispatch_dtype(
            dtype, [&](auto tag) { return softmax_experiment<decltype(tag)>(backward, 1, 1, len); }));
}

std::vector<CheckResult> softmax_gpu_checks(std::uint64_t seed) {
  return check_util::checks_for_all_dtypes([&](auto tag) { return checks_for_dtype<decltype(tag)>(seed); });
}

}  // namespace seqbench::operators
