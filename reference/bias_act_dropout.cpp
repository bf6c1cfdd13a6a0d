#include "reference/bias_act_dropout.h"

#include <cmath>
#include <numbers>

#include "core/error.h"
#include "reference/dropout.h"

namespace seqbench::ref {

namespace {
constexpr double kGeluTanhCoeff = 0.044715;
const double kSqrt2OverPi = std::sqrt(2.0 / std::numbers::pi);

void require_bias(const Matrix& x, const Vector& bias, const char* what) {
  SEQBENCH_REQUIRE(bias.size() == x.cols(),
                   what << ": bias has " << bias.size() << " elements, expected hidden " << x.cols());
}

Matrix add_bias(const Matrix& x, const Vector& bias) {
  return x.rowwise() + bias.transpose();
}
}  // namespace

const char* activation_name(Activation act) {
  switch (act) {
    case Activation::relu:
      return "relu";
    case Activation::gelu_erf:
      return "gelu_erf";
    case Activation::gelu_tanh:
      return "gelu_tanh";
  }
  return "?";
}

double activate(double z, Activation act) {
  switch (act) {
    case Activation::relu:
      return z <= 0.0 ? 0.0 : z;  // NaN stays NaN, as PyTorch's relu
    case Activation::gelu_erf:
      // Φ(z) as erfc(-z/√2)/2: 1 + erf(z/√2) cancels for negative z (1.8 % off at z = -8, and
      // exactly 0 below about -8.3), where the float kernels are still accurate.
      return 0.5 * z * std::erfc(-z * std::numbers::sqrt2 / 2.0);
    case Activation::gelu_tanh:
      return 0.5 * z * (1.0 + std::tanh(kSqrt2OverPi * (z + kGeluTanhCoeff * z * z * z)));
  }
  SEQBENCH_FAIL("unknown activation " << static_cast<int>(act));
}

double activation_derivative(double z, Activation act) {
  switch (act) {
    case Activation::relu:
      return z <= 0.0 ? 0.0 : 1.0;  // 0 at 0, 1 at NaN: PyTorch's threshold_backward
    case Activation::gelu_erf: {
      // d/dz [z Φ(z)] = Φ(z) + z φ(z)
      const double cdf = 0.5 * std::erfc(-z * std::numbers::sqrt2 / 2.0);
      const double pdf = std::exp(-0.5 * z * z) * std::numbers::inv_sqrtpi / std::numbers::sqrt2;
      return cdf + z * pdf;
    }
    case Activation::gelu_tanh: {
      // With u = √(2/π)(z + c z³) and t = tanh u: d/dz = 0.5 (1 + t) + 0.5 z (1 - t²) u'(z).
      const double t = std::tanh(kSqrt2OverPi * (z + kGeluTanhCoeff * z * z * z));
      const double du = kSqrt2OverPi * (1.0 + 3.0 * kGeluTanhCoeff * z * z);
      return 0.5 * (1.0 + t) + 0.5 * z * (1.0 - t * t) * du;
    }
  }
  SEQBENCH_FAIL("unknown activation " << static_cast<int>(act));
}

Matrix bias_act_dropout_forward(const Matrix& x, const Vector& bias, const KeepMask& keep, double p,
                                Activation act) {
  require_bias(x, bias, "bias_act_dropout_forward");
  const Matrix activated = add_bias(x, bias).unaryExpr([act](double z) { return activate(z, act); });
  return dropout_forward(activated, keep, p);
}

BiasActDropoutGrads bias_act_dropout_backward(const Matrix& dy, const Matrix& x, const Vector& bias,
                                              const KeepMask& keep, double p, Activation act) {
  require_bias(x, bias, "bias_act_dropout_backward");
  SEQBENCH_REQUIRE(dy.rows() == x.rows() && dy.cols() == x.cols(),
                   "bias_act_dropout_backward: dy is " << dy.rows() << "x" << dy.cols() << ", x is "
                                                       << x.rows() << "x" << x.cols());
  const Matrix slope = add_bias(x, bias).unaryExpr([act](double z) { return activation_derivative(z, act); });
  BiasActDropoutGrads grads;
  grads.dx = dropout_backward(dy, keep, p).cwiseProduct(slope);
  grads.dbias = grads.dx.colwise().sum().transpose();
  return grads;
}

}  // namespace seqbench::ref
