#include "reference/bias_dropout_residual.h"

#include "core/error.h"
#include "reference/dropout.h"

namespace seqbench::ref {

Matrix bias_dropout_residual_forward(const Matrix& x, const Vector& bias, const Matrix& residual,
                                     const KeepMask& keep, double p) {
  SEQBENCH_REQUIRE(bias.size() == x.cols(), "bias_dropout_residual_forward: bias has "
                                                << bias.size() << " elements, expected hidden " << x.cols());
  SEQBENCH_REQUIRE(residual.rows() == x.rows() && residual.cols() == x.cols(),
                   "bias_dropout_residual_forward: residual is " << residual.rows() << "x" << residual.cols()
                                                                 << ", x is " << x.rows() << "x" << x.cols());
  return residual + dropout_forward(x.rowwise() + bias.transpose(), keep, p);
}

BiasDropoutResidualGrads bias_dropout_residual_backward(const Matrix& dy, const KeepMask& keep, double p) {
  BiasDropoutResidualGrads grads;
  grads.dx = dropout_backward(dy, keep, p);
  grads.dbias = grads.dx.colwise().sum().transpose();
  grads.dresidual = dy;
  return grads;
}

}  // namespace seqbench::ref
