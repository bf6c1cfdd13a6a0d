// The per-element optimizer update, written once for the host and the device.
//
// The fused kernel, both baselines, the host emulation (tests) and the CPU drift study all call
// update_element() below, so "the GPU computes what the host emulation computes" is a bitwise
// statement, not a tolerance. To make it one, every float operation of the rule goes through the
// rn:: helpers: on the device they are the IEEE round-to-nearest intrinsics (__fmul_rn, ...), which
// nvcc never contracts into FMAs; on the host they are plain operators, and the trainer library is
// compiled with -ffp-contract=off so that GCC does not contract them either. sqrt and division are
// correctly rounded on both sides (nvcc's defaults -prec-sqrt/-prec-div are kept), denormals are
// kept (no -ftz), and the float <-> half/bf16 conversions round to nearest even on both sides.
//
// Formulas (PyTorch semantics, as reference/optimizers.h; t = step count after this step, >= 1):
//   g = to_float(grad) * multiplier                  multiplier = (1 / loss_scale) * clip coefficient
//   Adam:   g += wd * p;  m = b1*m + (1-b1)*g;  v = b2*v + (1-b2)*g*g
//           p -= (lr / (1-b1^t)) * m / (sqrt(v) / sqrt(1-b2^t) + eps)
//   AdamW:  p *= 1 - lr*wd; then Adam with g unchanged (no L2 term)
//   SGD:    g += wd * p;  if momentum: buf = (t == 1 ? g : mu*buf + (1-dampening)*g);
//                                     g = nesterov ? g + mu*buf : buf
//           p -= lr * g
// Precision modes: where p comes from and how it is stored back.
//   no_master           p = to_float(param); param = round_to_nearest<T>(p')       (the paper)
//   master_fp32         p = master;         master = p'; param = round_to_nearest<T>(p')   (AMP)
//   stochastic_rounding p = to_float(param); param = stochastic_round<bf16>(p', Philox bits)
#pragma once

#include <cstdint>
#include <cstring>
#include <string_view>
#include <type_traits>

#include "core/dtype.h"

#if !defined(__CUDA_ARCH__)
#include <cmath>
#endif

namespace seqbench::trainer {

enum class OptimizerKind : std::uint8_t { adam, adamw, sgd };
enum class PrecisionMode : std::uint8_t { no_master, master_fp32, stochastic_rounding };

std::string_view optimizer_kind_name(OptimizerKind kind);  // "adam", "adamw", "sgd"
std::string_view precision_mode_name(
    PrecisionMode mode);  // "no_master", "master_fp32", "stochastic_rounding"
OptimizerKind parse_optimizer_kind(std::string_view text);  // throws seqbench::Error naming the value
PrecisionMode parse_precision_mode(std::string_view text);  // throws seqbench::Error naming the value

// The constant hyper-parameters of an optimizer (the learning rate is given per step). Doubles, as
// in reference/optimizers.h; they are rounded to float once per step by make_step_coefficients().
struct OptimizerConfig {
  OptimizerKind kind = OptimizerKind::adam;
  double beta1 = 0.9;  // Adam, AdamW
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;  // L2 for Adam and SGD, decoupled for AdamW
  double momentum = 0.0;      // SGD
  double dampening = 0.0;
  bool nesterov = false;  // needs momentum > 0 and dampening 0, as PyTorch requires
};

// Throws seqbench::Error naming the offending value and its limit (the same rules as
// reference/optimizers.cpp, plus lr and max_grad_norm finite). The rule runs in float, so each
// value must also keep its meaning as one: eps > 0, beta1 and beta2 < 1, Nesterov's momentum > 0,
// weight_decay, momentum and lr <= FLT_MAX, and the first step's coefficients (lr / (1 - beta1),
// AdamW's 1 - lr*wd) finite.
void validate_optimizer_config(const OptimizerConfig& config);
void validate_step_values(const OptimizerConfig& config, double lr, double max_grad_norm);

// Whether the kind keeps fp32 state buffer 0 (Adam m, SGD momentum buffer) and buffer 1 (Adam v).
inline bool uses_state0(const OptimizerConfig& config) {
  return config.kind != OptimizerKind::sgd || config.momentum != 0.0;
}
inline bool uses_state1(const OptimizerConfig& config) {
  return config.kind != OptimizerKind::sgd;
}

// Correctly rounded float/double arithmetic that no compiler contracts into FMAs (see above).
namespace rn {
#if defined(__CUDA_ARCH__)
__device__ inline float mul(float a, float b) {
  return __fmul_rn(a, b);
}
__device__ inline float add(float a, float b) {
  return __fadd_rn(a, b);
}
__device__ inline float sub(float a, float b) {
  return __fsub_rn(a, b);
}
__device__ inline float div(float a, float b) {
  return __fdiv_rn(a, b);
}
__device__ inline float sqrt(float a) {
  return __fsqrt_rn(a);
}
__device__ inline double dmul(double a, double b) {
  return __dmul_rn(a, b);
}
__device__ inline double dadd(double a, double b) {
  return __dadd_rn(a, b);
}
__device__ inline double dsub(double a, double b) {
  return __dsub_rn(a, b);
}
__device__ inline double ddiv(double a, double b) {
  return __ddiv_rn(a, b);
}
__device__ inline double dsqrt(double a) {
  return __dsqrt_rn(a);
}
__device__ inline std::uint32_t float_bits(float x) {
  return __float_as_uint(x);
}
#else
inline float mul(float a, float b) {
  return a * b;
}
inline float add(float a, float b) {
  return a + b;
}
inline float sub(float a, float b) {
  return a - b;
}
inline float div(float a, float b) {
  return a / b;
}
inline float sqrt(float a) {
  return std::sqrt(a);
}
inline double dmul(double a, double b) {
  return a * b;
}
inline double dadd(double a, double b) {
  return a + b;
}
inline double dsub(double a, double b) {
  return a - b;
}
inline double ddiv(double a, double b) {
  return a / b;
}
inline double dsqrt(double a) {
  return std::sqrt(a);
}
inline std::uint32_t float_bits(float x) {
  std::uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  return bits;
}
#endif
}  // namespace rn

SEQBENCH_HD inline bool is_finite_float(float x) {
  return (rn::float_bits(x) & 0x7f800000u) != 0x7f800000u;
}

// base^exponent by binary exponentiation in correctly rounded double multiplies: the same bits on
// host and device (a library pow() may differ by an ulp between the two). exponent >= 0.
SEQBENCH_HD inline double pow_int(double base, std::int64_t exponent) {
  double result = 1.0;
  while (exponent > 0) {
    if (exponent & 1) result = rn::dmul(result, base);
    base = rn::dmul(base, base);
    exponent >>= 1;
  }
  return result;
}

// The float scalars the per-element rule uses, computed once per step (on the device by the
// prepare kernel, on the host by the emulation) from the config, the learning rate and t.
struct StepCoefficients {
  float lr = 0.0f;
  float weight_decay = 0.0f;  // L2 term (Adam, SGD)
  float decay_factor = 1.0f;  // AdamW: 1 - lr*wd
  float beta1 = 0.0f, one_minus_beta1 = 0.0f;
  float beta2 = 0.0f, one_minus_beta2 = 0.0f;
  float eps = 0.0f;
  float step_size = 0.0f;              // lr / (1 - beta1^t)
  float bias_correction2_sqrt = 1.0f;  // sqrt(1 - beta2^t)
  float momentum = 0.0f, one_minus_dampening = 1.0f;
  int nesterov = 0;
  int first_step = 0;  // t == 1: SGD's momentum buffer starts as g
};

// Everything in double (correctly rounded, so host and device agree bit for bit), rounded to float
// once at the end. step >= 1.
SEQBENCH_HD inline StepCoefficients make_step_coefficients(const OptimizerConfig& config, double lr,
                                                           std::int64_t step) {
  StepCoefficients c;
  c.lr = static_cast<float>(lr);
  c.weight_decay = config.kind == OptimizerKind::adamw ? 0.0f : static_cast<float>(config.weight_decay);
  c.decay_factor = config.kind == OptimizerKind::adamw
                       ? static_cast<float>(rn::dsub(1.0, rn::dmul(lr, config.weight_decay)))
                       : 1.0f;
  c.beta1 = static_cast<float>(config.beta1);
  c.one_minus_beta1 = static_cast<float>(rn::dsub(1.0, config.beta1));
  c.beta2 = static_cast<float>(config.beta2);
  c.one_minus_beta2 = static_cast<float>(rn::dsub(1.0, config.beta2));
  c.eps = static_cast<float>(config.eps);
  if (config.kind != OptimizerKind::sgd) {
    const double bias_correction1 = rn::dsub(1.0, pow_int(config.beta1, step));
    const double bias_correction2 = rn::dsub(1.0, pow_int(config.beta2, step));
    c.step_size = static_cast<float>(rn::ddiv(lr, bias_correction1));
    c.bias_correction2_sqrt = static_cast<float>(rn::dsqrt(bias_correction2));
  }
  c.momentum = static_cast<float>(config.momentum);
  c.one_minus_dampening = static_cast<float>(rn::dsub(1.0, config.dampening));
  c.nesterov = config.nesterov ? 1 : 0;
  c.first_step = step == 1 ? 1 : 0;
  return c;
}

// 1 / loss_scale, rounded once to float (as torch.cuda.amp.GradScaler: reciprocal in double).
SEQBENCH_HD inline float inverse_loss_scale(float loss_scale) {
  return static_cast<float>(rn::ddiv(1.0, static_cast<double>(loss_scale)));
}

// torch.nn.utils.clip_grad_norm_: min(1, max_norm / (norm + 1e-6)); 1 when clipping is off
// (max_norm <= 0) or the norm is NaN (some gradient was inf/NaN: the step is then skipped anyway).
// A norm of +inf from finite gradients whose squares overflow the float sum (norms above ~1.8e19)
// gives 0, as in torch (error_if_nonfinite=False): that step is taken with zero gradients, so only
// weight decay and the decay of the moments move anything, and the step count advances.
SEQBENCH_HD inline float clip_coefficient(float grad_norm, double max_grad_norm) {
  if (!(max_grad_norm > 0.0)) return 1.0f;
  const double coefficient = rn::ddiv(max_grad_norm, rn::dadd(static_cast<double>(grad_norm), 1e-6));
  return coefficient < 1.0 ? static_cast<float>(coefficient) : 1.0f;
}

// What one step does, decided once on the device from the gradient statistics (or on the host by
// the emulation) and read by every update thread. Lives in device memory: the host never needs it.
// (Fields ordered so that the struct has no padding: tests compare two of them with memcmp.)
struct StepControl {
  std::int64_t step = 0;         // t: the step count after this step (not advanced when skipped)
  int found_inf = 0;             // 1: some unscaled gradient was inf/NaN; the update leaves everything as is
  float inv_scale = 1.0f;        // 1 / loss scale
  float grad_norm = 0.0f;        // L2 norm of the unscaled gradients (not finite when found_inf)
  float clip = 1.0f;             // clip coefficient, 1 without clipping
  float grad_multiplier = 1.0f;  // inv_scale * clip: what the update multiplies each gradient by
  StepCoefficients coefficients;
  int unused = 0;  // explicit, zeroed padding to a multiple of 8 bytes
};
static_assert(sizeof(StepCoefficients) == 14 * 4, "StepCoefficients must have no padding");
static_assert(sizeof(StepControl) == 8 + 5 * 4 + sizeof(StepCoefficients) + 4,
              "StepControl must have no padding");

// The decision itself, shared by the prepare kernel and the host emulation. `sum_squares` is the
// sum of the squared unscaled gradients; `nonfinite` whether any of them was inf/NaN; `prev_step`
// the step count before this step.
SEQBENCH_HD inline StepControl make_step_control(bool nonfinite, float sum_squares, float loss_scale,
                                                 const OptimizerConfig& config, double lr,
                                                 double max_grad_norm, std::int64_t prev_step) {
  StepControl control;
  control.found_inf = nonfinite ? 1 : 0;
  control.inv_scale = inverse_loss_scale(loss_scale);
  control.grad_norm = rn::sqrt(sum_squares);
  control.clip = clip_coefficient(control.grad_norm, max_grad_norm);
  control.grad_multiplier = rn::mul(control.inv_scale, control.clip);
  control.step = nonfinite ? prev_step : prev_step + 1;
  if (!nonfinite) control.coefficients = make_step_coefficients(config, lr, control.step);
  return control;
}

// Rounds x to bf16 up or down with probabilities proportional to its distance to the two
// neighbours (unbiased: E[result] = x). The low 16 bits of `random_bits` are a uniform draw; adding
// them to the 16 bits that bf16 drops carries into the kept part with exactly that probability,
// because the magnitude of a float is monotonic in its bit pattern (subnormals included). Values
// within one bf16 ulp of FLT_MAX may round up to inf, as they would with probability > 0 in any
// unbiased scheme; inf and NaN are converted as is.
SEQBENCH_HD inline __nv_bfloat16 stochastic_round_bf16(float x, std::uint32_t random_bits) {
  std::uint32_t bits = rn::float_bits(x);
  if ((bits & 0x7f800000u) == 0x7f800000u) return from_float<__nv_bfloat16>(x);
  bits += random_bits & 0xffffu;
  __nv_bfloat16_raw raw;
  raw.x = static_cast<unsigned short>(bits >> 16);
  return __nv_bfloat16(raw);
}

// The optimizer rule on one fp32 parameter value p with unscaled gradient g; updates the state
// in place and returns the new parameter value. s0 = m or momentum buffer, s1 = v.
template <OptimizerKind K>
SEQBENCH_HD inline float apply_rule(float p, float g, float& s0, float& s1, const StepCoefficients& c) {
  if constexpr (K == OptimizerKind::sgd) {
    if (c.weight_decay != 0.0f) g = rn::add(g, rn::mul(c.weight_decay, p));
    if (c.momentum != 0.0f) {
      s0 = c.first_step ? g : rn::add(rn::mul(c.momentum, s0), rn::mul(c.one_minus_dampening, g));
      g = c.nesterov ? rn::add(g, rn::mul(c.momentum, s0)) : s0;
    }
    (void)s1;
    return rn::sub(p, rn::mul(c.lr, g));
  } else {
    if constexpr (K == OptimizerKind::adamw) {
      p = rn::mul(p, c.decay_factor);
    } else {
      if (c.weight_decay != 0.0f) g = rn::add(g, rn::mul(c.weight_decay, p));
    }
    s0 = rn::add(rn::mul(c.beta1, s0), rn::mul(c.one_minus_beta1, g));
    s1 = rn::add(rn::mul(c.beta2, s1), rn::mul(c.one_minus_beta2, rn::mul(g, g)));
    const float denom = rn::add(rn::div(rn::sqrt(s1), c.bias_correction2_sqrt), c.eps);
    return rn::sub(p, rn::mul(c.step_size, rn::div(s0, denom)));
  }
}

// One element, end to end: conversion in, unscale, rule, conversion out (see the modes above).
// `master`, `s0`, `s1` are only touched when the mode/kind uses them; `random_bits` only in
// stochastic_rounding mode (T must then be bf16).
template <class T, OptimizerKind K, PrecisionMode M>
SEQBENCH_HD inline void update_element(T& param, float& master, T grad, float& s0, float& s1,
                                       const StepCoefficients& c, float grad_multiplier,
                                       std::uint32_t random_bits) {
  const float g = rn::mul(to_float<T>(grad), grad_multiplier);
  float p;
  if constexpr (M == PrecisionMode::master_fp32) {
    p = master;
  } else {
    p = to_float<T>(param);
  }
  p = apply_rule<K>(p, g, s0, s1, c);
  if constexpr (M == PrecisionMode::master_fp32) master = p;
  if constexpr (M == PrecisionMode::stochastic_rounding) {
    static_assert(std::is_same_v<T, __nv_bfloat16>, "stochastic rounding is implemented for bf16 parameters");
    param = stochastic_round_bf16(p, random_bits);
  } else {
    (void)random_bits;
    param = from_float<T>(p);
  }
}

}  // namespace seqbench::trainer
