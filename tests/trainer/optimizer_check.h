// One optimizer step in double (reference/optimizers.h) from a given pre-step state, with a
// per-element tolerance derived from the float arithmetic of update_rule.h and the rounding to the
// parameter dtype. Shared by the CPU test (host emulation vs reference) and the GPU tests (device
// vs reference), so the tolerance is exercised on every machine.
//
// Tolerance derivation (u = 2^-24, the fp32 unit roundoff; uT = unit_roundoff(dtype)):
//   The rule evaluates, per element, a chain of correctly rounded float operations, each adding a
//   relative error <= u to its result. Bounding every intermediate by its "magnitude" (the same
//   expression on absolute values, so no cancellation hides an error):
//     g      = float(grad) * multiplier (+ wd*p):              <= 4u   of |g| + wd|p|
//     m      = b1*m + (1-b1)*g   (3 ops, on top of g's error):  <= 7u   of m_mag = b1|m| + (1-b1)g_mag
//     v      = b2*v + (1-b2)*g*g (4 ops + 2x g's error):        <= 12u  of v_mag
//     denom  = sqrt(v)/sqrt(bc2) + eps: sqrt halves v's error, +1 rounding each for sqrt, the
//              division, the rounded coefficient sqrt(bc2), the addition:       <= 10u relative
//     delta  = step_size * m / denom: + division, product, rounded step_size:  <= 7u + 10u + 3u = 20u
//              of delta_mag = step_size * m_mag / denom
//     p_new  = p*decay - delta: the decay product with a rounded decay factor (2u of |p|), the
//              subtraction (u of |p_new|)
//   SGD is the same shape with lr*g: g (4u), buf = mu*buf + (1-d)*g (<= 7u of its magnitude),
//   nesterov g + mu*buf (<= 10u), lr*g (2u more): <= 12u of lr * magnitude.
//   We allow 32u on delta_mag and 16u on m_mag / v_mag / buf_mag (about 1.6x the first-order
//   bounds, for the second-order terms), 2u|p| + u|p_new| for the decay and the final subtraction,
//   then one rounding to the parameter dtype: uT of the result for round-to-nearest, 2uT (less
//   than one ulp either way) for stochastic rounding, plus half the dtype's smallest subnormal
//   spacing (twice that for stochastic rounding) where |p_new| is subnormal in the dtype.
//   The gradient multiplier (1/scale times the clip coefficient) is taken as the float the step
//   used (StepControl::grad_multiplier): the norm it came from is checked on its own.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "trainer/update_rule.h"

namespace seqbench::trainer::testing {

struct ReferenceStep {
  std::vector<double> p, s0, s1;              // expected after the step (p: the parameter's value)
  std::vector<double> tol_p, tol_s0, tol_s1;  // allowed |got - expected|
};

// Half the spacing of the smallest subnormals of `dtype`: the absolute error of rounding to
// nearest there.
double subnormal_half_spacing(DType dtype);

// p: the value the step starts from (the master in master_fp32 mode, the parameter otherwise);
// grad: the gradient as stored (scaled, in the dtype, as double); s0/s1: the state before (empty
// when unused); step_before: t - 1. `output_dtype_rounding` false compares the fp32 value (master).
// (Implemented in optimizer_check.cpp, compiled by the host compiler: Eigen stays out of .cu files.)
ReferenceStep reference_step(const OptimizerConfig& config, PrecisionMode mode, DType dtype, double lr,
                             std::int64_t step_before, const std::vector<double>& p,
                             const std::vector<double>& grad, double multiplier,
                             const std::vector<double>& s0, const std::vector<double>& s1,
                             bool output_dtype_rounding = true);

// The worst element of |got - want| against tol: "" when all are within, else a description.
std::string first_violation(const char* what, const std::vector<double>& got, const std::vector<double>& want,
                            const std::vector<double>& tol);

}  // namespace seqbench::trainer::testing
