// The tensor types of the CPU reference and the layout convention every reference function uses.
//
// Everything is double precision: the reference is the yardstick that float/half/bf16 kernels are
// measured against, so its own rounding must be negligible next to theirs.
//
// Layout: a logical tensor [d0, d1, ..., dk-1, dk] is an Eigen row-major Matrix with
// d0·d1·…·dk-1 rows and dk columns, rows ordered with the last leading index fastest. Because the
// matrix is row-major, its data() is exactly the flat C-order buffer a CUDA kernel sees, and the
// flat element index (used for dropout masks) is row * cols + col. Concretely:
//   activations   [tokens, hidden]            rows = tokens (batch-major: row = b * len + l)
//   attention q/k/v/out [B, heads, L, d]      rows = (b * heads + h) * L + l, cols = d
//   attention scores/probs [B, heads, Lq, Lk] rows = (b * heads + h) * Lq + i, cols = Lk
//   logits        [N, V]                      rows = N predictions
// Per-feature parameters (gamma, beta, bias) are column vectors of length `hidden`; flat optimizer
// parameters are Vectors too. Token ids and targets are int32, as on the GPU.
#pragma once

#include <Eigen/Core>
#include <cstdint>
#include <span>
#include <vector>

namespace seqbench::ref {

using Index = Eigen::Index;
using Matrix = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Vector = Eigen::VectorXd;
// Dropout keep mask: 1 = kept, 0 = dropped; same shape as the tensor it masks.
using KeepMask = Eigen::Matrix<std::uint8_t, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
// Token ids [batch, len].
using TokenMatrix = Eigen::Matrix<std::int32_t, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
// One target id per logits row.
using TargetVector = Eigen::Matrix<std::int32_t, Eigen::Dynamic, 1>;

// The storage of a Matrix or Vector as one flat span (C order for Matrix), for the gradcheck
// driver, which perturbs inputs element by element without knowing their shapes.
template <class Derived>
std::span<double> flat_span(Eigen::PlainObjectBase<Derived>& tensor) {
  return {tensor.data(), static_cast<std::size_t>(tensor.size())};
}

template <class Derived>
std::vector<double> flatten(const Eigen::PlainObjectBase<Derived>& tensor) {
  return {tensor.data(), tensor.data() + tensor.size()};
}

}  // namespace seqbench::ref
