#include "reference/relu_centering.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

#include "core/error.h"

namespace seqbench::ref {

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
    double zero_at = v.front() - 1.0;  // one row: below it (the lone value stays positive)
    if (rows > 1) {
      const std::size_t n = v.size(), first = (n - 1) / 4;
      const std::size_t last = std::max(first + 1, n - 1 - (n - 1) / 4);
      std::size_t widest = first;
      for (std::size_t i = first; i < last; ++i)
        if (v[i + 1] - v[i] > v[widest + 1] - v[widest]) widest = i;
      zero_at = 0.5 * (v[widest] + v[widest + 1]);
    }
    const double b = round_bias(-zero_at);
    out.bias(j) = b;
    double closest = INFINITY;
    for (const double p : v) closest = std::min(closest, std::fabs(p + b));
    out.margin = std::min(out.margin, closest / (scale + std::fabs(b)));
  }
  return out;
}

}  // namespace seqbench::ref
