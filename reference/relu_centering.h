// Inputs for comparing ReLU layers: an fc1 bias that keeps every pre-activation away from ReLU's
// kink, so that two correct implementations cannot disagree there by more than rounding.
//
// Why. ReLU's derivative jumps at 0. A pre-activation h = in·W1ᵀ + b1 that lies within two
// implementations' rounding of 0 can take opposite signs in them (one adds the bias to a product
// already rounded to T, another rounds the sum; `in` carries the error of every sub-layer before
// the FFN), and that one element then moves fc1's gradients, and every gradient upstream of them,
// by |d_act|: an O(1) change that no rounding model bounds. With 1024 random rows and 4096 columns
// such elements are not rare: a bf16/f16 transformer-big layer drew tens of thousands of
// pre-activations within 4 u_T of 0, and the normwise error of d_fc1_weight against PyTorch came
// to 0.77 of its rounding bound from such flips alone.
//
// What. For each column j of the products P = in·W1ᵀ ([rows, ffn]), each gap between neighbouring
// sorted values of that column, among the middle half (so that both signs stay: each column keeps
// rows on both sides and the per-element mask is still exercised), proposes the bias that puts 0
// at its middle, rounded as the layer stores it (round_bias); b_j is the proposal whose rounded
// zero lies farthest from the column's values relative to its scale. Scoring after rounding
// matters where rounding is coarse: a bf16 bias moves by up to 2^-9 of itself, more than most
// gaps, so the widest gap is not always the best one. A single row keeps its lone value positive.
// The margin is the smallest |P_rj + b_j| / (max_r |P_rj| + |b_j|) over all columns: the relative
// distance from the kink that the comparison may rely on.
//
// Where the margin falls short of what a comparison needs (which grows with the rounding depth
// before the FFN; tests/layers/layer_check.h relu_margin_needed), flips remain possible, only far
// fewer; callers say so rather than hide it.
#pragma once

#include <functional>

#include "reference/tensor.h"

namespace seqbench::ref {

struct ReluBiasCentering {
  Vector bias;    // [ffn], each already rounded by round_bias
  double margin;  // min over columns of the nearest |P_rj + b_j| relative to the column's scale
};

// fc1_input: the rows fc1 sees [rows, H] (after the FFN's LayerNorm in a pre-LN layer);
// fc1_weight: [ffn, H]; round_bias: the rounding of the layer's stored bias (identity for double).
// Throws seqbench::Error when the inner dimensions differ or there are no rows.
ReluBiasCentering center_relu_bias(const Matrix& fc1_input, const Matrix& fc1_weight,
                                   const std::function<double(double)>& round_bias);

}  // namespace seqbench::ref
