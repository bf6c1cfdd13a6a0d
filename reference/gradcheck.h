// A finite-difference gradient checker in double, shared by every backward in reference/.
//
// For an op f with inputs x_1..x_k, the checker draws weights w ~ U[-1, 1] (one per output element,
// from the seed) and checks the analytic gradient of the scalar L(x) = Σ_j w_j f_j(x) — which is the
// backward called with upstream gradient w — against a numerical derivative of L, for every element
// of every input.
//
// Numerical derivative: the 5-point central stencil (Richardson extrapolation of two central
// differences D(h) = (L(x+h) - L(x-h)) / 2h):
//   fd = (4 D(h) - D(2h)) / 3 = (8 (L(x+h) - L(x-h)) - (L(x+2h) - L(x-2h))) / 12h
// with h = 2^round(log2(1e-4 · max(1, |x_i|))) (a power of two, so x ± h is formed without error
// for |x_i| >= 1, and nearly so below).
//
// Tolerance and where it comes from (u = 2^-53 ≈ 1.1e-16):
//   truncation  h⁴/30 · |∂⁵L/∂x_i⁵|  ≈ 3e-18 · |∂⁵L| at h = 1e-4: negligible unless L varies on a
//               scale below ~1e-2 in x_i. The checks keep inputs away from such places (ReLU's kink,
//               LayerNorm rows of near-zero variance) — the same caveat as torch.autograd.gradcheck.
//   rounding    each evaluation of L carries an error ≈ c·u·S with S = Σ_j |w_j f_j| and c a small
//               multiple of the computation's depth; the stencil amplifies it by (1+8+8+1)/(12h) =
//               1.5/h, so the noise is ≈ 1.5·c·u·S/h: 3e-8 for c = 16, S = 1e3. The checker
//               computes this estimate (with c = 16) and reports it.
//   criterion   |g_i - fd_i| <= tol · (1 + |g_i|) for every element, tol = 1e-6: at least 30x above
//               both error sources for the shapes used, while a wrong backward (a missing term, a
//               wrong sign or factor, a transposed index) errs by O(|g_i|), and even one element off
//               by 1e-4·(1 + |g_i|) is caught (the negative tests in checks.cpp prove it).
// The tolerance is a property of the checker, not of the op: a failing op has a wrong backward. If
// the rounding estimate ever reaches tol/10 the check fails and says the problem is too large to
// resolve, rather than passing on noise.
//
// Non-differentiable inputs (dropout masks, token ids, targets) are not GradInputs: they are
// captured by the forward and held fixed while the differentiable inputs are perturbed.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "core/check_result.h"

namespace seqbench::ref {

// One differentiable input: the checker perturbs `value` in place, one element at a time, and
// restores it exactly afterwards.
struct GradInput {
  std::string name;
  std::span<double> value;
};

struct GradcheckProblem {
  std::string name;         // the CheckResult name, e.g. "reference/layernorm/gradcheck"
  std::string description;  // shapes and settings, copied into the detail
  std::vector<GradInput> inputs;
  // f at the current input values, flattened in any fixed order.
  std::function<std::vector<double>()> forward;
  // The analytic gradient of L = Σ_j upstream_j · f_j with respect to each input, in the order of
  // `inputs`, each flattened like its input's span.
  std::function<std::vector<std::vector<double>>(const std::vector<double>& upstream)> backward;
};

struct GradcheckOptions {
  double relative_step = 1e-4;  // h before rounding to a power of two, relative to max(1, |x_i|)
  double tolerance = 1e-6;      // on |g - fd| / (1 + |g|)
};

// Runs the check; never throws for a mismatch (a throwing forward/backward propagates). The result
// reports max |g - fd| (max_abs_err), max |g - fd| / (1 + |g|) (max_rel_err, the quantity held to
// `tolerance`) and the worst element.
CheckResult gradcheck(const GradcheckProblem& problem, std::uint64_t seed,
                      const GradcheckOptions& options = {});

}  // namespace seqbench::ref
