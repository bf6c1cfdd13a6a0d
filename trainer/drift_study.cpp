#include "trainer/drift_study.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <numbers>
#include <sstream>
#include <string>

#include "core/cuda_check.h"
#include "core/device_buffer.h"
#include "core/error.h"
#include "core/philox.h"
#include "reference/optimizers.h"
#include "reference/tensor.h"
#include "trainer/host_emulation.h"
#include "trainer/optimizer.h"
#include "trainer/workspace.h"

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

// One optimizer step per call on the host emulation: the kernels' rule on the CPU.
template <class T>
class HostStepper {
 public:
  static constexpr DriftBackend kBackend = DriftBackend::host_emulation;
  HostStepper(const DriftStudyOptions& o, PrecisionMode mode, const std::vector<T>& w0)
      : options_(o), mode_(mode), state_(w0.size(), o.config, mode) {
    state_.params = w0;
    if (mode == PrecisionMode::master_fp32)
      for (std::size_t j = 0; j < w0.size(); ++j) state_.master[j] = to_float<T>(w0[j]);
  }
  const std::vector<T>& params() { return state_.params; }
  // Returns whether the step overflowed (and was skipped).
  bool step(const std::vector<T>& grads) {
    state_.grads = grads;
    const StepControl control = emulate_step(state_.buffers(), options_.config, mode_, {options_.lr, 0.0},
                                             options_.loss_scale, options_.seed, state_.step);
    return control.found_inf != 0;
  }

 private:
  const DriftStudyOptions& options_;
  PrecisionMode mode_;
  HostTrainingState<T> state_;
};

// The same on the current device: FusedOptimizer over a one-tensor Workspace, on the default
// stream, with the loss scale in device memory as a LossScaler would hold it. Each step uploads
// the gradients and reads back the parameters and the decision: a study, not a hot path.
template <class T>
class DeviceStepper {
 public:
  static constexpr DriftBackend kBackend = DriftBackend::device;
  DeviceStepper(const DriftStudyOptions& o, PrecisionMode mode, const std::vector<T>& w0)
      : options_(o),
        count_(w0.size()),
        workspace_(WorkspaceLayout({{"w", w0.size()}}), DTypeTraits<T>::dtype,
                   mode == PrecisionMode::master_fp32),
        optimizer_(workspace_, o.config, mode, o.seed),
        loss_scale_(std::vector<float>{o.loss_scale}),
        params_(w0) {
    SEQBENCH_CUDA_CHECK(
        cudaMemcpy(workspace_.params(), w0.data(), count_ * sizeof(T), cudaMemcpyHostToDevice));
    if (mode == PrecisionMode::master_fp32) workspace_.copy_params_to_master(nullptr);
    SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
  }
  const std::vector<T>& params() {
    SEQBENCH_CUDA_CHECK(
        cudaMemcpy(params_.data(), workspace_.params(), count_ * sizeof(T), cudaMemcpyDeviceToHost));
    return params_;
  }
  bool step(const std::vector<T>& grads) {
    SEQBENCH_CUDA_CHECK(
        cudaMemcpy(workspace_.grads(), grads.data(), count_ * sizeof(T), cudaMemcpyHostToDevice));
    optimizer_.step(workspace_, {options_.lr, 0.0}, loss_scale_.data(), nullptr);
    SEQBENCH_CUDA_CHECK_LAUNCH();
    return optimizer_.read_control().found_inf != 0;  // synchronizes
  }

 private:
  const DriftStudyOptions& options_;
  std::size_t count_;
  Workspace workspace_;
  FusedOptimizer optimizer_;
  DeviceBuffer<float> loss_scale_;
  std::vector<T> params_;
};

template <class T, class Stepper>
DriftResult run_typed(const DriftStudyOptions& o, const Problem& p, PrecisionMode mode) {
  constexpr DriftBackend backend = Stepper::kBackend;
  const auto n = static_cast<std::size_t>(o.params);
  std::vector<T> w0(n), grads(n);
  for (std::size_t j = 0; j < n; ++j)
    w0[j] = from_float<T>(static_cast<float>(p.w0(static_cast<ref::Index>(j))));
  const ref::Vector start = as_double(w0);
  Stepper stepper(o, mode, w0);
  for (int s = 0; s < o.steps; ++s) {
    const ref::Vector g = gradient_of(p, as_double(stepper.params()));
    for (std::size_t j = 0; j < n; ++j)
      grads[j] = from_float<T>(static_cast<float>(g(static_cast<ref::Index>(j)) * o.loss_scale));
    SEQBENCH_REQUIRE(!stepper.step(grads), "drift study (" << drift_backend_name(backend) << "): step " << s
                                                           << " overflowed in " << DTypeTraits<T>::name << "/"
                                                           << precision_mode_name(mode));
  }

  const ref::Vector reference = reference_run(o, p, start);
  const std::vector<T>& stored = stepper.params();
  const ref::Vector w = as_double(stored);
  DriftResult r;
  r.dtype = DTypeTraits<T>::dtype;
  r.mode = mode;
  r.backend = backend;
  r.steps = o.steps;
  r.params.resize(n);
  for (std::size_t j = 0; j < n; ++j) r.params[j] = to_float<T>(stored[j]);
  r.param_drift = (w - reference).norm() / (reference - start).norm();
  r.max_abs_drift = (w - reference).cwiseAbs().maxCoeff();
  r.loss = loss_of(p, w);
  r.reference_loss = loss_of(p, reference);
  r.initial_loss = loss_of(p, start);
  return r;
}

}  // namespace

DriftResult run_drift_case(const DriftStudyOptions& options, DType dtype, PrecisionMode mode,
                           DriftBackend backend) {
  SEQBENCH_REQUIRE(options.params >= 1 && options.samples >= 1 && options.steps >= 1,
                   "drift study: params " << options.params << ", samples " << options.samples << ", steps "
                                          << options.steps << " must all be >= 1");
  validate_optimizer_config(options.config);
  validate_step_values(options.config, options.lr, 0.0);
  // The drift is relative to how far the reference moved: lr = 0 moves nothing (0 / 0).
  SEQBENCH_REQUIRE(options.lr > 0.0, "drift study: lr " << options.lr
                                                        << " must be > 0 (the drift is relative to the "
                                                           "reference's movement, which lr 0 makes 0)");
  SEQBENCH_REQUIRE(std::isfinite(options.loss_scale) && options.loss_scale > 0.0f,
                   "drift study: loss_scale " << options.loss_scale << " must be finite and > 0");
  SEQBENCH_REQUIRE(mode != PrecisionMode::stochastic_rounding || dtype == DType::bf16,
                   "drift study: stochastic_rounding needs bf16, got " << dtype_name(dtype));
  const Problem problem = make_problem(options);
  return dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    return backend == DriftBackend::device ? run_typed<T, DeviceStepper<T>>(options, problem, mode)
                                           : run_typed<T, HostStepper<T>>(options, problem, mode);
  });
}

const char* drift_backend_name(DriftBackend backend) {
  return backend == DriftBackend::device ? "device" : "host_emulation";
}

std::vector<DriftResult> run_drift_study(const DriftStudyOptions& options, DriftBackend backend) {
  const std::pair<DType, PrecisionMode> cases[] = {
      {DType::f32, PrecisionMode::no_master},    {DType::f16, PrecisionMode::no_master},
      {DType::f16, PrecisionMode::master_fp32},  {DType::bf16, PrecisionMode::no_master},
      {DType::bf16, PrecisionMode::master_fp32}, {DType::bf16, PrecisionMode::stochastic_rounding},
  };
  std::vector<DriftResult> results;
  for (const auto& [dtype, mode] : cases) results.push_back(run_drift_case(options, dtype, mode, backend));
  return results;
}

namespace {

// "trainer/drift/<dtype>/<mode>": the name of a case's check (its device check adds "/device").
std::string drift_check_name(const DriftResult& r) {
  return "trainer/drift/" + std::string(dtype_name(r.dtype)) + "/" + std::string(precision_mode_name(r.mode));
}

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
    c.name = drift_check_name(r);
    c.passed = passed && std::isfinite(r.param_drift) && std::isfinite(r.loss);
    c.max_abs_err = r.max_abs_drift;
    c.max_rel_err = measure;
    c.tolerance = bound;
    c.detail = d.str();
    c.values = {{"drift", r.param_drift},
                {"max_abs_drift", r.max_abs_drift},
                {"loss", r.loss},
                {"fp64_loss", r.reference_loss},
                {"start_loss", r.initial_loss}};
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

std::vector<CheckResult> drift_device_checks(const std::vector<DriftResult>& host,
                                             const std::vector<DriftResult>& device) {
  std::vector<CheckResult> checks;
  for (const DriftResult& d : device) {
    SEQBENCH_REQUIRE(d.backend == DriftBackend::device,
                     "drift_device_checks: a " << dtype_name(d.dtype) << " " << precision_mode_name(d.mode)
                                               << " result of backend " << drift_backend_name(d.backend)
                                               << " among the device results");
    const DriftResult& h = find_case(host, d.dtype, d.mode);
    SEQBENCH_REQUIRE(h.backend == DriftBackend::host_emulation,
                     "drift_device_checks: the host result for "
                         << dtype_name(d.dtype) << " " << precision_mode_name(d.mode) << " is of backend "
                         << drift_backend_name(h.backend));
    CheckResult c;
    c.name = drift_check_name(d) + "/device";
    std::ostringstream detail;
    if (h.params.size() != d.params.size() || h.steps != d.steps) {
      c.passed = false;
      c.max_abs_err = INFINITY;
      c.max_rel_err = 1.0;
      detail << "the runs differ in shape: host " << h.params.size() << " parameters over " << h.steps
             << " steps, device " << d.params.size() << " over " << d.steps;
    } else {
      std::size_t differing = 0;
      double max_abs = 0.0;
      for (std::size_t j = 0; j < d.params.size(); ++j) {
        // Bitwise: the stored values widen exactly, so equal bits are equal floats (a NaN differs).
        if (std::bit_cast<std::uint32_t>(d.params[j]) != std::bit_cast<std::uint32_t>(h.params[j])) {
          ++differing;
          const double diff = std::fabs(static_cast<double>(d.params[j]) - static_cast<double>(h.params[j]));
          max_abs = std::isnan(diff) ? INFINITY : std::max(max_abs, diff);
        }
      }
      c.passed = differing == 0 && !d.params.empty();
      c.values = {
          {"drift", d.param_drift}, {"loss", d.loss}, {"differing_params", static_cast<double>(differing)}};
      c.max_abs_err = max_abs;
      c.max_rel_err =
          d.params.empty() ? 1.0 : static_cast<double>(differing) / static_cast<double>(d.params.size());
      detail
          << "the fused kernels on the device against the host emulation, after " << d.steps
          << " steps: " << differing << " of " << d.params.size()
          << " final parameters differ in their bits (max_rel_err: that fraction, tolerance 0); device drift "
          << d.param_drift << " (host " << h.param_drift << "), loss " << d.loss << " (host " << h.loss
          << ", fp64 " << d.reference_loss << ")";
    }
    c.tolerance = 0.0;
    c.detail = detail.str();
    checks.push_back(std::move(c));
  }
  return checks;
}

}  // namespace seqbench::trainer
