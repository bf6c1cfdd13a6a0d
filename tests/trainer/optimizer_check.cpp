#include "tests/trainer/optimizer_check.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "reference/optimizers.h"

namespace seqbench::trainer::testing {

double subnormal_half_spacing(DType dtype) {
  switch (dtype) {
    case DType::f16:
      return std::ldexp(1.0, -25);
    case DType::bf16:
      return std::ldexp(1.0, -134);
    case DType::f32:
      break;
  }
  return std::ldexp(1.0, -150);
}

ReferenceStep reference_step(const OptimizerConfig& config, PrecisionMode mode, DType dtype, double lr,
                             std::int64_t step_before, const std::vector<double>& p,
                             const std::vector<double>& grad, double multiplier,
                             const std::vector<double>& s0, const std::vector<double>& s1,
                             bool output_dtype_rounding) {
  const double u = std::ldexp(1.0, -24);
  const double ut = unit_roundoff(dtype);
  const bool sr = mode == PrecisionMode::stochastic_rounding;
  const double rounding = output_dtype_rounding ? (sr ? 2.0 * ut : ut) : 0.0;
  const double floor = output_dtype_rounding ? (sr ? 2.0 : 1.0) * subnormal_half_spacing(dtype)
                                             : subnormal_half_spacing(DType::f32);
  const std::size_t n = p.size();
  ref::Vector param(static_cast<ref::Index>(n)), g(static_cast<ref::Index>(n));
  for (std::size_t i = 0; i < n; ++i) {
    param(static_cast<ref::Index>(i)) = p[i];
    g(static_cast<ref::Index>(i)) = grad[i] * multiplier;
  }
  auto to_eigen = [](const std::vector<double>& v) {
    ref::Vector out(static_cast<ref::Index>(v.size()));
    for (std::size_t i = 0; i < v.size(); ++i) out(static_cast<ref::Index>(i)) = v[i];
    return out;
  };
  auto to_std = [](const ref::Vector& v) { return std::vector<double>(v.data(), v.data() + v.size()); };

  ReferenceStep r;
  r.tol_p.resize(n);
  const double wd = config.weight_decay;
  if (config.kind == OptimizerKind::sgd) {
    ref::SgdState state;
    state.step = step_before;
    if (config.momentum != 0.0 && step_before > 0) state.momentum_buffer = to_eigen(s0);
    const ref::SgdConfig c{lr, config.momentum, config.dampening, wd, config.nesterov};
    ref::sgd_step(param, g, state, c);
    r.p = to_std(param);
    if (config.momentum != 0.0) r.s0 = to_std(state.momentum_buffer);
    r.tol_s0.assign(r.s0.size(), 0.0);
    for (std::size_t i = 0; i < n; ++i) {
      const double g_mag = std::abs(g(static_cast<ref::Index>(i))) + wd * std::abs(p[i]);
      double step_mag = g_mag;
      if (config.momentum != 0.0) {
        const double buf_mag =
            step_before == 0 ? g_mag : config.momentum * std::abs(s0[i]) + (1.0 - config.dampening) * g_mag;
        r.tol_s0[i] = 16.0 * u * buf_mag + subnormal_half_spacing(DType::f32);
        step_mag = config.nesterov ? g_mag + config.momentum * buf_mag : buf_mag;
      }
      const double tol_f =
          32.0 * u * lr * step_mag + u * std::abs(r.p[i]) + subnormal_half_spacing(DType::f32);
      r.tol_p[i] = tol_f + rounding * (std::abs(r.p[i]) + tol_f) + floor;
    }
    return r;
  }

  ref::AdamState state;
  state.step = step_before;
  state.m = to_eigen(s0);
  state.v = to_eigen(s1);
  const ref::AdamConfig c{lr, config.beta1, config.beta2, config.eps, wd};
  if (config.kind == OptimizerKind::adamw) {
    ref::adamw_step(param, g, state, c);
  } else {
    ref::adam_step(param, g, state, c);
  }
  r.p = to_std(param);
  r.s0 = to_std(state.m);
  r.s1 = to_std(state.v);
  r.tol_s0.resize(n);
  r.tol_s1.resize(n);
  const double t = static_cast<double>(step_before + 1);
  const double bc1 = 1.0 - std::pow(config.beta1, t), bc2 = 1.0 - std::pow(config.beta2, t);
  const double l2 = config.kind == OptimizerKind::adamw ? 0.0 : wd;
  const double decay = config.kind == OptimizerKind::adamw ? 1.0 - lr * wd : 1.0;
  for (std::size_t i = 0; i < n; ++i) {
    const double g_mag = std::abs(g(static_cast<ref::Index>(i))) + l2 * std::abs(p[i]);
    const double m_mag = config.beta1 * std::abs(s0[i]) + (1.0 - config.beta1) * g_mag;
    const double v_mag = config.beta2 * s1[i] + (1.0 - config.beta2) * g_mag * g_mag;
    const double denom = std::sqrt(r.s1[i] / bc2) + config.eps;
    const double delta_mag = (lr / bc1) * m_mag / denom;
    r.tol_s0[i] = 16.0 * u * m_mag + subnormal_half_spacing(DType::f32);
    r.tol_s1[i] = 16.0 * u * v_mag + subnormal_half_spacing(DType::f32);
    const double tol_f = 32.0 * u * delta_mag + 2.0 * u * std::abs(p[i] * decay) + u * std::abs(r.p[i]) +
                         subnormal_half_spacing(DType::f32);
    r.tol_p[i] = tol_f + rounding * (std::abs(r.p[i]) + tol_f) + floor;
  }
  return r;
}

std::string first_violation(const char* what, const std::vector<double>& got, const std::vector<double>& want,
                            const std::vector<double>& tol) {
  if (got.size() != want.size() || tol.size() != want.size()) {
    std::ostringstream os;
    os << what << ": sizes " << got.size() << " / " << want.size() << " / " << tol.size();
    return os.str();
  }
  std::size_t bad = 0, worst = 0;
  double worst_ratio = 0.0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double err = std::abs(got[i] - want[i]);
    const bool ok = err <= tol[i];  // false for NaN
    if (!ok) ++bad;
    const double ratio = ok ? (tol[i] > 0 ? err / tol[i] : 0.0) : (std::isnan(err) ? INFINITY : err / tol[i]);
    if (!ok && (bad == 1 || ratio > worst_ratio)) {
      worst_ratio = ratio;
      worst = i;
    }
  }
  if (bad == 0) return "";
  std::ostringstream os;
  os.precision(9);
  os << what << ": " << bad << " of " << got.size() << " elements outside tolerance; worst #" << worst
     << " got " << got[worst] << " want " << want[worst] << " err " << std::abs(got[worst] - want[worst])
     << " tol " << tol[worst];
  return os.str();
}

}  // namespace seqbench::trainer::testing
