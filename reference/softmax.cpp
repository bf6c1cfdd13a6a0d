#include "reference/softmax.h"

#include <cmath>
#include <limits>

#include "core/error.h"

namespace seqbench::ref {

bool AttentionMask::masked(Index b, Index i, Index j, Index k_len) const {
  if (causal && j > i + causal_offset) return true;
  if (!key_lengths.empty() && j >= key_lengths[static_cast<std::size_t>(b)]) return true;
  if (!key_padding.empty() && key_padding[static_cast<std::size_t>(b * k_len + j)] != 0) return true;
  return false;
}

void validate_attention_mask(const AttentionMask& mask, const AttentionShape& shape) {
  SEQBENCH_REQUIRE(shape.batch >= 0 && shape.heads >= 0 && shape.q_len >= 0 && shape.k_len >= 0,
                   "attention shape [" << shape.batch << ", " << shape.heads << ", " << shape.q_len << ", "
                                       << shape.k_len << "] has a negative extent");
  if (!mask.key_lengths.empty()) {
    SEQBENCH_REQUIRE(
        static_cast<Index>(mask.key_lengths.size()) == shape.batch,
        "key_lengths has " << mask.key_lengths.size() << " entries, expected batch " << shape.batch);
    for (std::size_t b = 0; b < mask.key_lengths.size(); ++b) {
      SEQBENCH_REQUIRE(mask.key_lengths[b] >= 0 && mask.key_lengths[b] <= shape.k_len,
                       "key_lengths[" << b << "] = " << mask.key_lengths[b] << " outside [0, k_len "
                                      << shape.k_len << "]");
    }
  }
  if (!mask.key_padding.empty()) {
    SEQBENCH_REQUIRE(static_cast<Index>(mask.key_padding.size()) == shape.batch * shape.k_len,
                     "key_padding has " << mask.key_padding.size() << " entries, expected batch*k_len "
                                        << shape.batch * shape.k_len);
  }
}

Matrix attention_softmax_forward(const Matrix& scores, const AttentionShape& shape, double scale,
                                 const AttentionMask& mask) {
  validate_attention_mask(mask, shape);
  SEQBENCH_REQUIRE(scores.rows() == shape.rows() && scores.cols() == shape.k_len,
                   "attention scores are " << scores.rows() << "x" << scores.cols() << ", expected "
                                           << shape.rows() << "x" << shape.k_len
                                           << " for [batch, heads, q_len, k_len]");
  constexpr double kMinusInf = -std::numeric_limits<double>::infinity();
  Matrix y(scores.rows(), scores.cols());
  for (Index r = 0; r < scores.rows(); ++r) {
    const Index b = r / (shape.heads * shape.q_len);
    const Index i = r % shape.q_len;
    Eigen::RowVectorXd z(shape.k_len);
    for (Index j = 0; j < shape.k_len; ++j)
      z[j] = mask.masked(b, i, j, shape.k_len) ? kMinusInf : scale * scores(r, j);
    const double row_max = shape.k_len > 0 ? z.maxCoeff() : kMinusInf;
    if (row_max == kMinusInf) {  // fully masked (or no keys): defined as zeros, see the header
      y.row(r).setZero();
      continue;
    }
    // std::exp, not Eigen's vectorized .exp(): the latter clamps its argument and returns a
    // denormal (~5e-309) for -inf, where IEEE exp(-inf) is exactly 0.
    const Eigen::RowVectorXd e = (z.array() - row_max).unaryExpr([](double t) { return std::exp(t); });
    y.row(r) = e / e.sum();
    // Masked keys are 0 even when a NaN among the valid scores makes the sum NaN (0 / NaN would be
    // NaN there): the kernels never read masked keys and write zeros (kernels/softmax.h).
    for (Index j = 0; j < shape.k_len; ++j)
      if (mask.masked(b, i, j, shape.k_len)) y(r, j) = 0.0;
  }
  return y;
}

Matrix attention_softmax_backward(const Matrix& dy, const Matrix& y, double scale) {
  SEQBENCH_REQUIRE(dy.rows() == y.rows() && dy.cols() == y.cols(),
                   "attention_softmax_backward: dy is " << dy.rows() << "x" << dy.cols() << ", y is "
                                                        << y.rows() << "x" << y.cols());
  const Vector dot = dy.cwiseProduct(y).rowwise().sum();
  return scale * y.cwiseProduct(Matrix(dy.colwise() - dot));
}

Matrix log_softmax(const Matrix& x) {
  SEQBENCH_REQUIRE(x.cols() >= 1, "log_softmax: " << x.cols() << " columns, need at least 1");
  const Vector row_max = x.rowwise().maxCoeff();
  const Matrix shifted = x.colwise() - row_max;
  // std::exp/std::log (libm, correctly handled at the extremes) rather than Eigen's vectorized
  // approximations, for the same reason as in attention_softmax_forward.
  const Vector log_sum =
      shifted.unaryExpr([](double t) { return std::exp(t); }).rowwise().sum().unaryExpr([](double s) {
        return std::log(s);
      });
  return shifted.colwise() - log_sum;
}

}  // namespace seqbench::ref
