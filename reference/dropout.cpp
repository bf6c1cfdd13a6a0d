#include "reference/dropout.h"

#include "core/error.h"
#include "core/philox.h"

namespace seqbench::ref {

namespace {
void require_probability(double p) {
  SEQBENCH_REQUIRE(p >= 0.0 && p <= 1.0, "dropout probability " << p << " outside [0, 1]");
}
}  // namespace

KeepMask make_dropout_mask(Index rows, Index cols, double p, std::uint64_t seed, std::uint64_t offset) {
  SEQBENCH_REQUIRE(rows >= 0 && cols >= 0, "dropout mask shape " << rows << "x" << cols << " is negative");
  require_probability(p);
  KeepMask keep(rows, cols);
  const float p_float = static_cast<float>(p);
  for (Index r = 0; r < rows; ++r) {
    for (Index c = 0; c < cols; ++c) {
      const auto index = static_cast<std::uint64_t>(r * cols + c);
      keep(r, c) = philox_keep(seed, offset, index, p_float) ? 1 : 0;
    }
  }
  return keep;
}

double dropout_scale(double p) {
  require_probability(p);
  return p < 1.0 ? 1.0 / (1.0 - p) : 0.0;
}

void require_dropout_args(const KeepMask& keep, Index rows, Index cols, double p, const char* what) {
  require_probability(p);
  SEQBENCH_REQUIRE(keep.rows() == rows && keep.cols() == cols, what << ": dropout mask is " << keep.rows()
                                                                    << "x" << keep.cols() << ", expected "
                                                                    << rows << "x" << cols);
}

namespace {
// Forward and backward are the same linear map (a diagonal one), so they share this.
Matrix apply_keep_mask(const Matrix& x, const KeepMask& keep, double p, const char* what) {
  require_dropout_args(keep, x.rows(), x.cols(), p, what);
  return x.cwiseProduct(keep.cast<double>()) * dropout_scale(p);
}
}  // namespace

Matrix dropout_forward(const Matrix& x, const KeepMask& keep, double p) {
  return apply_keep_mask(x, keep, p, "dropout_forward");
}

Matrix dropout_backward(const Matrix& dy, const KeepMask& keep, double p) {
  return apply_keep_mask(dy, keep, p, "dropout_backward");
}

}  // namespace seqbench::ref
