// The self-checks of the CPU reference: a finite-difference gradient check of every backward in
// reference/, plus closed-form tests of the forwards (softmax rows sum to one, LayerNorm moments,
// smoothing conventions, padding and ignore semantics, optimizer steps computed by hand), plus
// negative tests proving that the gradient checker does fail on a wrong backward.
//
// Shapes are drawn from the seed among small, odd sizes (1, 3, 7, 13, ...), so that different seeds
// cover different edge cases (one row, one key, a fully-masked row, an odd hidden size).
// `seqbench check` and the reports call run_reference_checks(); the gtest suite runs every group
// over several seeds and fails on any result with passed == false.
//
// Closed-form tests compare with the same mixed criterion as the gradient checker,
// |actual - expected| <= tolerance · (1 + |expected|), where the tolerance is a rounding bound of the
// computation (a γ_n-type bound n·u for a length-n reduction, Higham, "Accuracy and Stability of
// Numerical Algorithms" §3.1, with a stated margin), or 0 for values that must be exact (masked
// probabilities, padding rows, ignored rows).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/check_result.h"

namespace seqbench::ref {

// One op's checks; `op` is the middle component of the result names ("reference/<op>/...").
struct ReferenceCheckGroup {
  const char* op;
  std::vector<CheckResult> (*run)(std::uint64_t seed);
};

// Every group, in a fixed order: layernorm, softmax, dropout, bias_act_dropout,
// bias_dropout_residual, embedding, cross_entropy, attention, transformer_layer, optimizers,
// gradcheck.
std::span<const ReferenceCheckGroup> reference_check_groups();

// All groups' results for one seed, in group order. Takes well under a second in a Release build.
std::vector<CheckResult> run_reference_checks(std::uint64_t seed);

}  // namespace seqbench::ref
