#include "reference/layernorm.h"

#include <cmath>

#include "core/error.h"

namespace seqbench::ref {

namespace {
void require_params(const Matrix& x, const Vector& gamma, const char* what) {
  SEQBENCH_REQUIRE(x.cols() > 0, what << ": hidden size " << x.cols() << " must be at least 1");
  SEQBENCH_REQUIRE(gamma.size() == x.cols(),
                   what << ": gamma has " << gamma.size() << " elements, expected hidden " << x.cols());
}

// x̂ = (x - mean) · rstd, row by row.
Matrix normalized(const Matrix& x, const Vector& mean, const Vector& rstd) {
  return (x.colwise() - mean).array().colwise() * rstd.array();
}
}  // namespace

LayerNormForward layernorm_forward(const Matrix& x, const Vector& gamma, const Vector& beta, double eps) {
  require_params(x, gamma, "layernorm_forward");
  SEQBENCH_REQUIRE(beta.size() == x.cols(), "layernorm_forward: beta has "
                                                << beta.size() << " elements, expected hidden " << x.cols());
  SEQBENCH_REQUIRE(eps > 0.0, "layernorm_forward: eps " << eps << " must be > 0");
  LayerNormForward out;
  out.mean = x.rowwise().mean();
  // Two-pass variance: subtracting the mean first avoids the cancellation of E[x²] - E[x]².
  const Vector var = (x.colwise() - out.mean).array().square().rowwise().mean();
  out.rstd = (var.array() + eps).rsqrt();
  const Matrix xhat = normalized(x, out.mean, out.rstd);
  out.y = (xhat.array().rowwise() * gamma.transpose().array()).rowwise() + beta.transpose().array();
  return out;
}

LayerNormGrads layernorm_backward(const Matrix& dy, const Matrix& x, const Vector& gamma, const Vector& mean,
                                  const Vector& rstd) {
  require_params(x, gamma, "layernorm_backward");
  SEQBENCH_REQUIRE(dy.rows() == x.rows() && dy.cols() == x.cols(),
                   "layernorm_backward: dy is " << dy.rows() << "x" << dy.cols() << ", x is " << x.rows()
                                                << "x" << x.cols());
  SEQBENCH_REQUIRE(mean.size() == x.rows() && rstd.size() == x.rows(),
                   "layernorm_backward: mean/rstd have " << mean.size() << "/" << rstd.size()
                                                         << " elements, expected rows " << x.rows());
  const Matrix xhat = normalized(x, mean, rstd);
  LayerNormGrads grads;
  grads.dgamma = dy.cwiseProduct(xhat).colwise().sum().transpose();
  grads.dbeta = dy.colwise().sum().transpose();
  const Matrix g = dy.array().rowwise() * gamma.transpose().array();
  const Vector mean_g = g.rowwise().mean();
  const Vector mean_gx = g.cwiseProduct(xhat).rowwise().mean();
  const Matrix centered = (g.colwise() - mean_g) - Matrix(xhat.array().colwise() * mean_gx.array());
  grads.dx = centered.array().colwise() * rstd.array();
  return grads;
}

}  // namespace seqbench::ref
