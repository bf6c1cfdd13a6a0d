#include "trainer/drift_study.h"

#include <cmath>
#include <numbers>
#include <sstream>
#include <string>

#include "core/error.h"
#include "core/philox.h"
#include "reference/optimizers.h"
#include "reference/tensor.h"
#include "trainer/host_emulation.h"

namespace seqbench::trainer {
namespace {

// Standard normal draw #index of stream (seed, offset) by Box-Muller on two Philox uniforms.
double philox_normal(std::uint64_t seed, std::uint64_t offset, std::uint64_t index) {
  const double u1 = 1.0 - philox_uniform(seed, offset, 2 * index);  // (0, 1]: log stays finite
  const double u2 = philox_uniform(seed, offset, 2 * index + 1);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

struct Problem {
  ref::Matrix x;
  ref::Vector y;
  ref::Vector w0;  // before rounding to the dtype
};

Problem make_problem(const DriftStudyOptions& o) {
  Problem p;
  const auto m = static_cast<ref::Index>(o.samples), n = static_cast<ref::Index>(o.params);
  p.x.resize(m, n);
  ref::Vector w_star(n);
  p.w0.resize(n);
  for (ref::Index i = 0; i < m; ++i)
    for (ref::Index j = 0; j < n; ++j)
      p.x(i, j) = philox_normal(o.seed, 0, static_cast<std::uint64_t>(i * n + j));
  for (ref::Index j = 0; j < n; ++j) {
    w_star(j) = philox_normal(o.seed, 1, static_cast<std::uint64_t>(j));
    p.w0(j) = 0.5 * philox_normal(o.seed, 2, static_cast<std::uint64_t>(j));
  }
  p.y = p.x * w_star;
  return p;
}

double loss_of(const Problem& p, const ref::Vector& w) {
  return (p.x * w - p.y).squaredNorm() / (2.0 * static_cast<double>(p.x.rows()));
}

ref::Vector gradient_of(const Problem& p, const ref::Vector& w) {
  return p.x.transpose() * (p.x * w - p.y) / static_cast<double>(p.x.rows());
}

// The fp64 trajectory from `start` with the reference optimizer (PyTorch semantics).
ref::Vector reference_run(const DriftStudyOptions& o, const Problem& p, const ref::Vector& start) {
  ref::Vector w = start;
  const OptimizerConfig& c = o.config;
  ref::AdamState adam;
  ref::SgdState sgd;
  const ref::AdamConfig adam_config{o.lr, c.beta1, c.beta2, c.eps, c.weight_decay};
  const ref::SgdConfig sgd_config{o.lr, c.momentum, c.dampening, c.weight_decay, c.nesterov};
  for (int s = 0; s < o.steps; ++s) {
    const ref::Vector g = gradient_of(p, w);
    switch (c.kind) {
      case OptimizerKind::adam:
        ref::adam_step(w, g, adam, adam_config);
        break;
      case OptimizerKind::adamw:
        ref::adamw_step(w, g, adam, adam_config);
        break;
      case OptimizerKind::sgd:
        ref::sgd_step(w, g, sgd, sgd_config);
        break;
    }
  }
  return w;
}

template <class T>
ref::Vector as_double(const std::vector<T>& values) {
  ref::Vector out(static_cast<ref::Index>(values.size()));
  for (std::size_t i = 0; i < values.size(); ++i) out(static_cast<ref::Index>(i)) = to_float<T>(values[i]);
  return out;
}

template <class T>
DriftResult run_typed(const DriftStudyOptions& o, const Problem& p, PrecisionMode mode) {
  const auto n = static_cast<std::size_t>(o.params);
  HostTrainingState<T> state(n, o.config, mode);
  for (std::size_t j = 0; j < n; ++j)
    state.params[j] = from_float<T>(static_cast<float>(p.w0(static_cast<ref::Index>(j))));
  if (mode == PrecisionMode::master_fp32)
    for (std::size_t j = 0; j < n; ++j) state.master[j] = to_float<T>(state.params[j]);
  const ref::Vector start = as_double(state.params);

  const StepOptions step_options{o.lr, 0.0};
  for (int s = 0; s < o.steps; ++s) {
    const ref::Vector g = gradient_of(p, as_double(state.params));
    for (std::size_t j = 0; j < n; ++j)
      state.grads[j] = from_float<T>(static_cast<float>(g(static_cast<ref::Index>(j)) * o.loss_scale));
    const StepControl control =
        emulate_step(state.buffers(), o.config, mode, step_options, o.loss_scale, o.seed, state.step);
    SEQBENCH_REQUIRE(!control.found_inf, "drift study: step " << s << " overflowed in "
                                                              << DTypeTraits<T>::name << "/"
                                                              << precision_mode_name(mode));
  }

  const ref::Vector reference = reference_run(o, p, start);
  const ref::Vector w = as_double(state.params);
  DriftResult r;
  r.dtype = DTypeTraits<T>::dtype;
  r.mode = mode;
  r.param_drift = (w - reference).norm() / (reference - start).norm();
  r.max_abs_drift = (w - reference).cwiseAbs().maxCoeff();
  r.loss = loss_of(p, w);
  r.reference_loss = loss_of(p, reference);
  r.initial_loss = loss_of(p, start);
  return r;
}

}  // namespace

DriftResult run_drift_case(const DriftStudyOptions& options, DType dtype, PrecisionMode mode) {
  SEQBENCH_REQUIRE(options.params >= 1 && options.samples >= 1 && options.steps >= 1,
                   "drift study: params " << options.params << ", samples " << options.samples << ", steps "
                                          << options.steps << " must all be >= 1");
  validate_optimizer_config(options.config);
  validate_step_values(options.lr, 0.0);
  SEQBENCH_REQUIRE(mode != PrecisionMode::stochastic_rounding || dtype == DType::bf16,
                   "drift study: stochastic_rounding needs bf16, got " << dtype_name(dtype));
  const Problem problem = make_problem(options);
  return dispatch_dtype(dtype, [&](auto tag) { return run_typed<decltype(tag)>(options, problem, mode); });
}

std::vector<DriftResult> run_drift_study(const DriftStudyOptions& options) {
  const std::pair<DType, PrecisionMode> cases[] = {
      {DType::f32, PrecisionMode::no_master},    {DType::f16, PrecisionMode::no_master},
      {DType::f16, PrecisionMode::master_fp32},  {DType::bf16, PrecisionMode::no_master},
      {DType::bf16, PrecisionMode::master_fp32}, {DType::bf16, PrecisionMode::stochastic_rounding},
  };
  std::vector<DriftResult> results;
  for (const auto& [dtype, mode] : cases) results.push_back(run_drift_case(options, dtype, mode));
  return results;
}

namespace {

const DriftResult& find_case(const std::vector<DriftResult>& results, DType dtype, PrecisionMode mode) {
  for (const DriftResult& r : results)
    if (r.dtype == dtype && r.mode == mode) return r;
  SEQBENCH_FAIL("drift_study_checks: no result for " << dtype_name(dtype) << " " << precision_mode_name(mode)
                                                     << " among " << results.size() << " results");
}

}  // namespace

std::vector<CheckResult> drift_study_checks(const std::vector<DriftResult>& results,
                                            const DriftStudyOptions& options) {
  const auto& f32 = find_case(results, DType::f32, PrecisionMode::no_master);
  const auto& f16 = find_case(results, DType::f16, PrecisionMode::no_master);
  const auto& f16m = find_case(results, DType::f16, PrecisionMode::master_fp32);
  const auto& bf16 = find_case(results, DType::bf16, PrecisionMode::no_master);
  const auto& bf16m = find_case(results, DType::bf16, PrecisionMode::master_fp32);
  const auto& bf16sr = find_case(results, DType::bf16, PrecisionMode::stochastic_rounding);

  std::vector<CheckResult> checks;
  // One check: `passed` from the case's conditions; `measure` (max_rel_err) what `bound`
  // (tolerance) holds from above, `rule` how: the case's own drift, or, where the case is the worse
  // mode of a pair, the better mode's drift over its own (so the printed error and tolerance read
  // as every other check's, measure <= bound).
  const auto add = [&](const DriftResult& r, bool passed, double measure, double bound,
                       const std::string& rule) {
    std::ostringstream d;
    d << "Adam, lr " << options.lr << ", " << options.steps << " steps, least squares of " << options.params
      << " parameters over " << options.samples << " samples, seed " << options.seed
      << " (trainer/NOTES.md): drift " << r.param_drift
      << " (|w - w_fp64| / |w_fp64 - w0|), max |w - w_fp64| " << r.max_abs_drift << ", loss " << r.loss
      << " (fp64 " << r.reference_loss << ", start " << r.initial_loss << "); held to: " << rule
      << "; max_rel_err " << measure << ", tolerance " << bound;
    CheckResult c;
    c.name =
        "trainer/drift/" + std::string(dtype_name(r.dtype)) + "/" + std::string(precision_mode_name(r.mode));
    c.passed = passed && std::isfinite(r.param_drift) && std::isfinite(r.loss);
    c.max_abs_err = r.max_abs_drift;
    c.max_rel_err = measure;
    c.tolerance = bound;
    c.detail = d.str();
    checks.push_back(std::move(c));
  };
  // better.drift / worse.drift: at most 1/k when the better mode drifts k times less.
  const auto ratio = [](const DriftResult& better, const DriftResult& worse) {
    return worse.param_drift > 0.0 ? better.param_drift / worse.param_drift : INFINITY;
  };
  add(f32, f32.param_drift < 1e-5, f32.param_drift, 1e-5, "drift < 1e-5 (max_rel_err: the drift)");
  add(f16, ratio(f16m, f16) < 1.0 / 50, ratio(f16m, f16), 1.0 / 50,
      "f16 master_fp32's drift < 1/50 of this one (what the master copy saves; max_rel_err: that ratio)");
  add(f16m, f16m.param_drift < 1e-3, f16m.param_drift, 1e-3, "drift < 1e-3 (max_rel_err: the drift)");
  add(bf16, ratio(bf16sr, bf16) < 1.0 / 5 && bf16.loss > 50 * bf16.reference_loss, ratio(bf16sr, bf16),
      1.0 / 5,
      "bf16 stochastic_rounding's drift < 1/5 of this one (max_rel_err: that ratio), and loss > 50 x fp64's "
      "(the stall without a master copy)");
  add(bf16m, bf16m.param_drift < 0.01 && bf16m.loss < 1.01 * bf16m.reference_loss, bf16m.param_drift, 0.01,
      "drift < 0.01 (max_rel_err: the drift) and loss < 1.01 x fp64's");
  add(bf16sr, ratio(bf16m, bf16sr) < 1.0 / 10 && bf16sr.loss < 1.1 * bf16sr.reference_loss,
      ratio(bf16m, bf16sr), 1.0 / 10,
      "bf16 master_fp32's drift < 1/10 of this one (max_rel_err: that ratio), and loss < 1.1 x fp64's");
  return checks;
}

}  // namespace seqbench::trainer
