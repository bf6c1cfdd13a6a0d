#include "reference/relu_centering.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

#include "core/error.h"

namespace seqbench::ref {
namespace {

// The distance from z to the nearest of the sorted values v (not empty).
double nearest_distance(const std::vector<double>& v, double z) {
  const auto above = std::lower_bound(v.begin(), v.end(), z);
  double d = INFINITY;
  if (above != v.end()) d = *above - z;
  if (above != v.begin()) d = std::min(d, z - *(above - 1));
  return d;
}

}  // namespace

ReluBiasCentering center_relu_bias(const Matrix& fc1_input, const Matrix& fc1_weight,
                                   const std::function<double(double)>& round_bias) {
  SEQBENCH_REQUIRE(fc1_input.cols() == fc1_weight.cols(), "center_relu_bias: fc1_input has "
                                                              << fc1_input.cols() << " columns, fc1_weight "
                                                              << fc1_weight.cols() << " (both must be H)");
  SEQBENCH_REQUIRE(fc1_input.rows() >= 1, "center_relu_bias: fc1_input has no rows");
  const Matrix product = fc1_input * fc1_weight.transpose();  // [rows, ffn]
  const Index rows = product.rows();
  ReluBiasCentering out{Vector(product.cols()), INFINITY};
  std::vector<double> v(static_cast<std::size_t>(rows));
  for (Index j = 0; j < product.cols(); ++j) {
    for (Index r = 0; r < rows; ++r) v[static_cast<std::size_t>(r)] = product(r, j);
    std::sort(v.begin(), v.end());
    double scale = 0.0;
    for (const double p : v) scale = std::max(scale, std::fabs(p));
    // One row: the zero goes below it, so that the lone value stays positive.
    double best_bias = round_bias(-(v.front() - 1.0));
    double best_closest = nearest_distance(v, -best_bias);
    if (rows > 1) {
      // Each gap of the middle half proposes its midpoint; the bias is scored after round_bias,
      // since it is the rounded bias the layer adds. Where rounding is coarse (bf16: a relative
      // 2^-9 of |b|) a narrow gap near 0 can beat a wide one far from it, whose rounded zero may
      // land next to a value or outside the gap. A candidate must leave a value on each side.
      const std::size_t n = v.size(), first = (n - 1) / 4;
      const std::size_t last = std::max(first + 1, n - 1 - (n - 1) / 4);
      double best_score = -1.0;
      for (std::size_t i = first; i < last; ++i) {
        const double b = round_bias(-0.5 * (v[i] + v[i + 1]));
        if (!(v.front() < -b && -b < v.back())) continue;
        const double closest = nearest_distance(v, -b);
        const double score = closest / (scale + std::fabs(b));
        if (score > best_score) {
          best_score = score;
          best_bias = b;
          best_closest = closest;
        }
      }
    }
    out.bias(j) = best_bias;
    out.margin = std::min(out.margin, best_closest / (scale + std::fabs(best_bias)));
  }
  return out;
}

}  // namespace seqbench::ref
