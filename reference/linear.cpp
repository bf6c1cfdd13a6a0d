#include "reference/linear.h"

#include "core/error.h"

namespace seqbench::ref {

namespace {
void require_layer(const Matrix& x, const Linear& layer, const char* what) {
  SEQBENCH_REQUIRE(layer.bias.size() == layer.weight.rows(), what << ": bias has " << layer.bias.size()
                                                                  << " elements, weight has "
                                                                  << layer.weight.rows() << " output rows");
  SEQBENCH_REQUIRE(x.cols() == layer.weight.cols(),
                   what << ": input has " << x.cols() << " features, weight expects " << layer.weight.cols());
}
}  // namespace

Matrix linear_forward(const Matrix& x, const Linear& layer) {
  require_layer(x, layer, "linear_forward");
  return (x * layer.weight.transpose()).rowwise() + layer.bias.transpose();
}

LinearGrads linear_backward(const Matrix& dy, const Matrix& x, const Linear& layer) {
  require_layer(x, layer, "linear_backward");
  SEQBENCH_REQUIRE(dy.rows() == x.rows() && dy.cols() == layer.weight.rows(),
                   "linear_backward: dy is " << dy.rows() << "x" << dy.cols() << ", expected " << x.rows()
                                             << "x" << layer.weight.rows());
  LinearGrads grads;
  grads.dx = dy * layer.weight;
  grads.dlayer.weight = dy.transpose() * x;
  grads.dlayer.bias = dy.colwise().sum().transpose();
  return grads;
}

}  // namespace seqbench::ref
