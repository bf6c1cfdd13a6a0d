#include "trainer/host_emulation.h"

#include <cmath>

#include "core/error.h"
#include "core/philox.h"

namespace seqbench::trainer {
namespace {

template <class T, OptimizerKind K, PrecisionMode M>
void update_all(const HostUpdateBuffers<T>& b, const StepCoefficients& c, float multiplier,
                std::uint64_t seed, std::uint64_t step) {
  const bool use_state0 = K != OptimizerKind::sgd || c.momentum != 0.0f;  // as load_step_context
  for (std::size_t i = 0; i < b.count; ++i) {
    float master = M == PrecisionMode::master_fp32 ? b.master[i] : 0.0f;
    float s0 = use_state0 ? b.state0[i] : 0.0f;
    float s1 = K != OptimizerKind::sgd ? b.state1[i] : 0.0f;
    const std::uint32_t bits =
        M == PrecisionMode::stochastic_rounding ? philox_bits(seed, step, b.index_base + i) : 0u;
    T param = b.params[i];
    update_element<T, K, M>(param, master, b.grads[i], s0, s1, c, multiplier, bits);
    b.params[i] = param;
    if (M == PrecisionMode::master_fp32) b.master[i] = master;
    if (use_state0) b.state0[i] = s0;
    if (K != OptimizerKind::sgd) b.state1[i] = s1;
  }
}

template <class T, OptimizerKind K>
void update_mode(const HostUpdateBuffers<T>& b, PrecisionMode mode, const StepCoefficients& c,
                 float multiplier, std::uint64_t seed, std::uint64_t step) {
  switch (mode) {
    case PrecisionMode::master_fp32:
      return update_all<T, K, PrecisionMode::master_fp32>(b, c, multiplier, seed, step);
    case PrecisionMode::stochastic_rounding:
      if constexpr (std::is_same_v<T, __nv_bfloat16>) {
        return update_all<T, K, PrecisionMode::stochastic_rounding>(b, c, multiplier, seed, step);
      } else {
        SEQBENCH_FAIL("emulate_update: stochastic_rounding needs bf16, got " << DTypeTraits<T>::name);
      }
    case PrecisionMode::no_master:
      break;
  }
  update_all<T, K, PrecisionMode::no_master>(b, c, multiplier, seed, step);
}

// The buffers the step reads and writes, as update_all uses them.
template <class T>
void require_host_buffers(const HostUpdateBuffers<T>& b, OptimizerKind kind, PrecisionMode mode,
                          bool use_state0, const char* what) {
  if (b.count == 0) return;
  const struct {
    const char* name;
    const void* ptr;
    bool needed;
  } buffers[] = {{"params", b.params, true},
                 {"grads", b.grads, true},
                 {"master", b.master, mode == PrecisionMode::master_fp32},
                 {"state0", b.state0, use_state0},
                 {"state1", b.state1, kind != OptimizerKind::sgd}};
  for (const auto& buffer : buffers)
    SEQBENCH_REQUIRE(!buffer.needed || buffer.ptr != nullptr,
                     what << ": " << buffer.name << " is null but " << optimizer_kind_name(kind) << " in "
                          << precision_mode_name(mode) << " mode needs it (" << b.count << " elements)");
}

}  // namespace

template <class T>
HostGradStats emulate_grad_stats(const T* grads, std::size_t count, float loss_scale) {
  SEQBENCH_REQUIRE(count == 0 || grads != nullptr,
                   "emulate_grad_stats: grads is null for " << count << " elements");
  const float inv_scale = inverse_loss_scale(loss_scale);
  double sum = 0.0;
  bool nonfinite = false;
  for (std::size_t i = 0; i < count; ++i) {
    const float x = rn::mul(to_float<T>(grads[i]), inv_scale);
    nonfinite = nonfinite || !is_finite_float(x);
    sum += static_cast<double>(x) * x;
  }
  return HostGradStats{static_cast<float>(sum), nonfinite};
}

template <class T>
void emulate_update(const HostUpdateBuffers<T>& b, OptimizerKind kind, PrecisionMode mode,
                    const StepControl& control, std::uint64_t seed, bool grads_prescaled) {
  optimizer_kind_name(kind);  // rejects an out-of-range kind or mode
  precision_mode_name(mode);
  require_host_buffers(b, kind, mode, kind != OptimizerKind::sgd || control.coefficients.momentum != 0.0f,
                       "emulate_update");
  if (control.found_inf) return;
  const float multiplier = grads_prescaled ? 1.0f : control.grad_multiplier;
  const auto step = static_cast<std::uint64_t>(control.step);
  switch (kind) {
    case OptimizerKind::adamw:
      return update_mode<T, OptimizerKind::adamw>(b, mode, control.coefficients, multiplier, seed, step);
    case OptimizerKind::sgd:
      return update_mode<T, OptimizerKind::sgd>(b, mode, control.coefficients, multiplier, seed, step);
    case OptimizerKind::adam:
      break;
  }
  update_mode<T, OptimizerKind::adam>(b, mode, control.coefficients, multiplier, seed, step);
}

template <class T>
StepControl emulate_step(const HostUpdateBuffers<T>& b, const OptimizerConfig& config, PrecisionMode mode,
                         const StepOptions& options, float loss_scale, std::uint64_t seed,
                         std::int64_t& step) {
  validate_optimizer_config(config);
  validate_step_values(config, options.lr, options.max_grad_norm);
  precision_mode_name(mode);
  require_host_buffers(b, config.kind, mode, uses_state0(config), "emulate_step");  // before the step moves
  const HostGradStats stats = emulate_grad_stats(b.grads, b.count, loss_scale);
  const StepControl control = make_step_control(stats.nonfinite, stats.sum_squares, loss_scale, config,
                                                options.lr, options.max_grad_norm, step);
  step = control.step;
  emulate_update(b, config.kind, mode, control, seed);
  return control;
}

template <class T>
HostTrainingState<T>::HostTrainingState(std::size_t count, const OptimizerConfig& config, PrecisionMode mode)
    : params(count), grads(count) {
  if (mode == PrecisionMode::master_fp32) master.assign(count, 0.0f);
  if (uses_state0(config)) state0.assign(count, 0.0f);
  if (uses_state1(config)) state1.assign(count, 0.0f);
  for (auto& p : params) p = from_float<T>(0.0f);
  for (auto& g : grads) g = from_float<T>(0.0f);
}

template <class T>
HostUpdateBuffers<T> HostTrainingState<T>::buffers() {
  auto data = [](std::vector<float>& v) { return v.empty() ? nullptr : v.data(); };
  return HostUpdateBuffers<T>{
      params.data(), grads.data(), data(master), data(state0), data(state1), params.size(), 0};
}

// The one place the host emulation is instantiated, for the three element types.
#define SEQBENCH_TRAINER_INSTANTIATE(T)                                                                    \
  template HostGradStats emulate_grad_stats<T>(const T*, std::size_t, float);                              \
  template void emulate_update<T>(const HostUpdateBuffers<T>&, OptimizerKind, PrecisionMode,               \
                                  const StepControl&, std::uint64_t, bool);                                \
  template StepControl emulate_step<T>(const HostUpdateBuffers<T>&, const OptimizerConfig&, PrecisionMode, \
                                       const StepOptions&, float, std::uint64_t, std::int64_t&);           \
  template struct HostTrainingState<T>;
SEQBENCH_TRAINER_INSTANTIATE(float)
SEQBENCH_TRAINER_INSTANTIATE(__half)
SEQBENCH_TRAINER_INSTANTIATE(__nv_bfloat16)
#undef SEQBENCH_TRAINER_INSTANTIATE

}  // namespace seqbench::trainer
