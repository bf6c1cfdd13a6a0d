// A fully connected layer with PyTorch nn.Linear's parameter layout: weight [out, in], bias [out],
// y = x · weightᵀ + bias. The layout matches PyTorch (and fairseq checkpoints) so that parameters
// can be compared with the PyTorch runner without transposes.
#pragma once

#include "reference/tensor.h"

namespace seqbench::ref {

struct Linear {
  Matrix weight;  // [out, in]
  Vector bias;    // [out]
};

// x: [rows, in] -> [rows, out].
Matrix linear_forward(const Matrix& x, const Linear& layer);

struct LinearGrads {
  Matrix dx;      // [rows, in] = dy · weight
  Linear dlayer;  // dweight [out, in] = dyᵀ · x, dbias [out] = Σ_rows dy
};

LinearGrads linear_backward(const Matrix& dy, const Matrix& x, const Linear& layer);

}  // namespace seqbench::ref
