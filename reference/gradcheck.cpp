#include "reference/gradcheck.h"

#include <cmath>
#include <limits>
#include <random>
#include <sstream>

#include "core/error.h"

namespace seqbench::ref {

namespace {
constexpr double kUnitRoundoff = std::numeric_limits<double>::epsilon() / 2.0;
// The depth factor c of the rounding estimate 1.5·c·u·S/h (see the header).
constexpr double kRoundingDepth = 16.0;

// Σ_j w_j f_j accumulated in long double, so the reduction adds nothing to the FD noise.
double weighted_sum(const std::vector<double>& weights, const std::vector<double>& values) {
  long double sum = 0.0L;
  for (std::size_t j = 0; j < values.size(); ++j) sum += static_cast<long double>(weights[j]) * values[j];
  return static_cast<double>(sum);
}

double power_of_two_step(double relative_step, double x) {
  return std::exp2(std::round(std::log2(relative_step * std::max(1.0, std::abs(x)))));
}

std::string format_double(double value) {
  std::ostringstream os;
  os.precision(3);
  os << std::scientific << value;
  return os.str();
}
}  // namespace

CheckResult gradcheck(const GradcheckProblem& problem, std::uint64_t seed, const GradcheckOptions& options) {
  CheckResult result;
  result.name = problem.name;
  result.tolerance = options.tolerance;
  std::ostringstream detail;
  detail << problem.description << "; seed " << seed << "; inputs";
  std::size_t total_elements = 0;
  for (const GradInput& input : problem.inputs) {
    detail << " " << input.name << "[" << input.value.size() << "]";
    total_elements += input.value.size();
  }

  const std::vector<double> f0 = problem.forward();
  const auto fail = [&](const std::string& why) {
    result.passed = false;
    result.detail = detail.str() + "; FAILED: " + why;
    return result;
  };
  if (f0.empty() || total_elements == 0) return fail("nothing to check (no outputs or no inputs)");

  std::mt19937_64 engine(seed);
  std::uniform_real_distribution<double> uniform(-1.0, 1.0);
  std::vector<double> weights(f0.size());
  for (double& w : weights) w = uniform(engine);

  const std::vector<std::vector<double>> grads = problem.backward(weights);
  if (grads.size() != problem.inputs.size()) {
    return fail("backward returned " + std::to_string(grads.size()) + " gradients for " +
                std::to_string(problem.inputs.size()) + " inputs");
  }

  double loss_scale = 0.0;  // S = Σ |w_j f_j|
  for (std::size_t j = 0; j < f0.size(); ++j) loss_scale += std::abs(weights[j] * f0[j]);
  if (!std::isfinite(loss_scale)) return fail("forward output is not finite");

  double max_abs = 0.0;
  double max_mixed = 0.0;
  double max_noise = 0.0;
  std::string worst;  // the element with the largest mixed error
  for (std::size_t k = 0; k < problem.inputs.size(); ++k) {
    const GradInput& input = problem.inputs[k];
    if (grads[k].size() != input.value.size()) {
      return fail("gradient of " + input.name + " has " + std::to_string(grads[k].size()) +
                  " elements, input " + std::to_string(input.value.size()));
    }
    for (std::size_t i = 0; i < input.value.size(); ++i) {
      const double x = input.value[i];
      const double h = power_of_two_step(options.relative_step, x);
      const auto loss_at = [&](double xi) {
        input.value[i] = xi;
        const std::vector<double> f = problem.forward();
        SEQBENCH_REQUIRE(f.size() == f0.size(),
                         problem.name << ": forward returned " << f.size() << " outputs after " << f0.size());
        return weighted_sum(weights, f);
      };
      const double plus1 = loss_at(x + h);
      const double minus1 = loss_at(x - h);
      const double plus2 = loss_at(x + 2.0 * h);
      const double minus2 = loss_at(x - 2.0 * h);
      input.value[i] = x;  // restore exactly
      const double fd = (8.0 * (plus1 - minus1) - (plus2 - minus2)) / (12.0 * h);
      const double g = grads[k][i];
      const double abs_err = std::abs(g - fd);
      const double mixed = abs_err / (1.0 + std::abs(g));
      max_noise = std::max(max_noise, 1.5 * kRoundingDepth * kUnitRoundoff * (loss_scale + 1.0) / h);
      if (!std::isfinite(g) || !std::isfinite(fd)) {
        return fail(input.name + "[" + std::to_string(i) + "]: analytic " + format_double(g) +
                    ", numerical " + format_double(fd) + " not finite");
      }
      max_abs = std::max(max_abs, abs_err);
      if (worst.empty() || mixed > max_mixed) {
        max_mixed = mixed;
        worst = input.name + "[" + std::to_string(i) + "] analytic " + format_double(g) + " numerical " +
                format_double(fd);
      }
    }
  }
  result.max_abs_err = max_abs;
  result.max_rel_err = max_mixed;
  detail << "; " << total_elements << " elements; 5-point central difference, h = 2^round(log2("
         << options.relative_step << "*max(1,|x|))); pass iff |g-fd| <= " << options.tolerance
         << "*(1+|g|); FD rounding-noise estimate " << format_double(max_noise) << "; worst " << worst;
  if (max_noise > options.tolerance / 10.0) {
    return fail("the FD rounding-noise estimate " + format_double(max_noise) +
                " exceeds tolerance/10; shrink the problem");
  }
  result.passed = max_mixed <= options.tolerance;
  result.detail = detail.str();
  if (!result.passed) result.detail += "; FAILED: the analytic gradient disagrees with the numerical one";
  return result;
}

}  // namespace seqbench::ref
