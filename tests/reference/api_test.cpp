// The reference API's documented semantics at its edges (fully-masked rows, padding, ignore index,
// Philox masks, position conventions) and its argument validation.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "core/error.h"
#include "core/philox.h"
#include "reference/reference.h"
#include "tests/common/expect_error.h"

namespace seqbench::ref {
namespace {

using seqbench::testing::expect_error;

Matrix iota(Index rows, Index cols, double step = 0.25) {
  Matrix m(rows, cols);
  for (Index i = 0; i < m.size(); ++i) m.data()[i] = step * static_cast<double>(i % 11) - 1.0;
  return m;
}

TEST(ReferenceDropout, MaskIsPhiloxKeepAtTheFlatIndex) {
  const KeepMask keep = make_dropout_mask(5, 7, 0.4, 1234, 9);
  for (Index r = 0; r < 5; ++r) {
    for (Index c = 0; c < 7; ++c) {
      const bool expected = dropout_uniform(1234, 9, static_cast<std::uint64_t>(r * 7 + c)) >= 0.4f;
      EXPECT_EQ(keep(r, c) != 0, expected) << "element (" << r << ", " << c << ")";
    }
  }
}

TEST(ReferenceDropout, ScalesKeptElementsAndValidates) {
  const Matrix x = iota(2, 3);
  KeepMask keep = KeepMask::Ones(2, 3);
  keep(1, 2) = 0;
  const Matrix y = dropout_forward(x, keep, 0.2);
  EXPECT_DOUBLE_EQ(y(0, 0), x(0, 0) / 0.8);
  EXPECT_EQ(y(1, 2), 0.0);
  expect_error([&] { dropout_forward(x, KeepMask::Ones(3, 2), 0.2); }, "dropout mask is 3x2, expected 2x3");
  expect_error([&] { dropout_forward(x, keep, 1.5); }, "dropout probability 1.5");
}

TEST(ReferenceLayerNorm, ValidatesParameterSizes) {
  const Matrix x = iota(2, 4);
  expect_error([&] { layernorm_forward(x, Vector::Ones(3), Vector::Zero(4), 1e-5); },
               "gamma has 3 elements, expected hidden 4");
  expect_error([&] { layernorm_forward(x, Vector::Ones(4), Vector::Zero(4), 0.0); }, "eps 0");
}

TEST(ReferenceLayerNorm, HiddenOneGivesBetaAndNoInputGradient) {
  // With a single feature x - mean = 0 exactly: y = beta, dx = 0, dgamma = 0, dbeta = Σ dy.
  const Matrix x = iota(3, 1);
  const LayerNormForward fwd = layernorm_forward(x, Vector::Constant(1, 2.0), Vector::Constant(1, 0.5), 1e-5);
  EXPECT_TRUE(fwd.y.isApproxToConstant(0.5, 0.0)) << fwd.y;
  const LayerNormGrads g =
      layernorm_backward(Matrix::Ones(3, 1), x, Vector::Constant(1, 2.0), fwd.mean, fwd.rstd);
  EXPECT_TRUE(g.dx.isZero(0.0)) << g.dx;
  EXPECT_EQ(g.dgamma[0], 0.0);
  EXPECT_EQ(g.dbeta[0], 3.0);
}

TEST(ReferenceSoftmax, FullyMaskedRowIsZeroWithZeroGradient) {
  const AttentionShape shape{2, 1, 2, 3};
  AttentionMask mask;
  mask.key_lengths = {0, 3};  // batch 0 sees no key
  const Matrix x = iota(shape.rows(), shape.k_len);
  const Matrix y = attention_softmax_forward(x, shape, 0.5, mask);
  EXPECT_TRUE(y.topRows(2).isZero(0.0)) << y;
  EXPECT_NEAR(y.row(2).sum(), 1.0, 1e-15);
  const Matrix dx = attention_softmax_backward(iota(shape.rows(), shape.k_len, 0.5), y, 0.5);
  EXPECT_TRUE(dx.topRows(2).isZero(0.0)) << dx;
  EXPECT_TRUE(dx.allFinite());
}

TEST(ReferenceSoftmax, MaskedKeysGetExactlyZeroEvenForHugeScores) {
  const AttentionShape shape{1, 1, 1, 4};
  AttentionMask mask;
  mask.key_padding = {0, 1, 0, 1};
  Matrix x(1, 4);
  x << 1e8, 3e8, -1e8, 1e300;
  const Matrix y = attention_softmax_forward(x, shape, 1.0, mask);
  EXPECT_EQ(y(0, 1), 0.0);
  EXPECT_EQ(y(0, 3), 0.0);
  EXPECT_EQ(y(0, 0), 1.0);
  // A NaN among the valid scores makes the valid keys NaN and leaves the masked ones 0, as the
  // kernels write them (kernels/softmax.h); 0 / NaN had made them NaN too.
  x(0, 2) = std::numeric_limits<double>::quiet_NaN();
  const Matrix with_nan = attention_softmax_forward(x, shape, 1.0, mask);
  EXPECT_TRUE(std::isnan(with_nan(0, 0)));
  EXPECT_TRUE(std::isnan(with_nan(0, 2)));
  EXPECT_EQ(with_nan(0, 1), 0.0);
  EXPECT_EQ(with_nan(0, 3), 0.0);
}

TEST(ReferenceSoftmax, CausalOffsetForIncrementalDecoding) {
  // One new query over 5 cached keys: offset k_len - q_len = 4 lets it see every key.
  const AttentionShape shape{1, 1, 1, 5};
  AttentionMask mask;
  mask.causal = true;
  mask.causal_offset = 4;
  const Matrix y = attention_softmax_forward(Matrix::Zero(1, 5), shape, 1.0, mask);
  EXPECT_TRUE(y.isApproxToConstant(0.2, 1e-15)) << y;
  mask.causal_offset = 0;  // training-style: query 0 sees key 0 only
  const Matrix y0 = attention_softmax_forward(Matrix::Zero(1, 5), shape, 1.0, mask);
  EXPECT_EQ(y0(0, 0), 1.0);
  EXPECT_EQ(y0.rightCols(4).sum(), 0.0);
}

TEST(ReferenceSoftmax, ValidatesMaskAndShape) {
  const AttentionShape shape{2, 1, 1, 3};
  AttentionMask mask;
  mask.key_lengths = {1, 4};
  expect_error([&] { attention_softmax_forward(Matrix::Zero(2, 3), shape, 1.0, mask); },
               "key_lengths[1] = 4 outside [0, k_len 3]");
  expect_error([&] { attention_softmax_forward(Matrix::Zero(3, 3), shape, 1.0, {}); },
               "attention scores are 3x3, expected 2x3");
}

TEST(ReferenceActivation, ReluDerivativeAtZeroIsZero) {
  EXPECT_EQ(activation_derivative(0.0, Activation::relu), 0.0);
  EXPECT_EQ(activation_derivative(1e-300, Activation::relu), 1.0);
  // NaN as PyTorch: relu(NaN) is NaN (clamp_min), and threshold_backward passes the gradient on.
  const double nan = std::numeric_limits<double>::quiet_NaN();
  EXPECT_TRUE(std::isnan(activate(nan, Activation::relu)));
  EXPECT_EQ(activation_derivative(nan, Activation::relu), 1.0);
  EXPECT_EQ(activate(-0.0, Activation::relu), 0.0);
  EXPECT_NEAR(activation_derivative(0.0, Activation::gelu_erf), 0.5, 1e-16);
  EXPECT_NEAR(activation_derivative(0.0, Activation::gelu_tanh), 0.5, 1e-16);
}

TEST(ReferenceCrossEntropy, ScalarAndPerRowBackwardAgree) {
  const Matrix logits = iota(3, 5);
  const TargetVector targets{{4, 1, 0}};
  const CrossEntropyConfig config{0.1, SmoothingConvention::fairseq, 1};
  const Matrix a = cross_entropy_backward(logits, targets, config, 2.5);
  const Matrix b = cross_entropy_backward(logits, targets, config, Vector(Vector::Constant(3, 2.5)));
  EXPECT_TRUE(a.isApprox(b, 0.0)) << a << "\n" << b;
  EXPECT_TRUE(a.row(1).isZero(0.0)) << "row 1 targets the ignore index";
  // Counted rows' gradients sum to zero: q and p are both distributions.
  EXPECT_NEAR(a.row(0).sum(), 0.0, 1e-15);
}

// A -inf logit (a masked vocabulary entry) has probability 0: without smoothing the loss is the
// finite nll of the other entries (0 · log 0 = 0, not 0 · inf = NaN); with smoothing some weight
// lands on it and the loss is +inf; the gradient stays finite either way (q = 0 there).
TEST(ReferenceCrossEntropy, MaskedLogitsHaveProbabilityZero) {
  Matrix logits = iota(1, 4);
  logits(0, 0) = -std::numeric_limits<double>::infinity();
  const TargetVector targets{{2}};
  const Matrix finite = logits.rightCols(3);
  const double want_nll = std::log(finite.array().exp().sum()) - logits(0, 2);
  const CrossEntropyForward plain =
      cross_entropy_forward(logits, targets, {0.0, SmoothingConvention::fairseq, {}});
  EXPECT_NEAR(plain.nll[0], want_nll, 1e-15);
  EXPECT_NEAR(plain.loss[0], want_nll, 1e-15);
  const CrossEntropyForward smoothed =
      cross_entropy_forward(logits, targets, {0.1, SmoothingConvention::fairseq, {}});
  EXPECT_NEAR(smoothed.nll[0], want_nll, 1e-15);
  EXPECT_EQ(smoothed.loss[0], std::numeric_limits<double>::infinity());
  for (const double eps : {0.0, 0.1}) {
    const Matrix d = cross_entropy_backward(logits, targets, {eps, SmoothingConvention::fairseq, {}}, 1.0);
    EXPECT_TRUE(d.allFinite()) << d;
    EXPECT_NEAR(d.sum(), 0.0, 1e-15);
  }
}

TEST(ReferenceActivation, GeluErfKeepsItsRelativeAccuracyInTheNegativeTail) {
  // z Φ(z) with Φ(z) = erfc(-z/√2)/2: through 1 + erf(z/√2) the value at -8 was 1.8 % off, and 0
  // below about -8.3. Φ(-8) = 6.22096057427178e-16 (erfc(8/√2)/2, 15 digits).
  EXPECT_NEAR(activate(-8.0, Activation::gelu_erf) / (-8.0 * 6.22096057427178e-16), 1.0, 1e-12);
  EXPECT_LT(activate(-10.0, Activation::gelu_erf), 0.0);
  // The derivative Φ(z) + z φ(z) in the tail: φ(-8) = 5.05227108353689e-15.
  EXPECT_NEAR(
      activation_derivative(-8.0, Activation::gelu_erf) / (6.22096057427178e-16 - 8.0 * 5.05227108353689e-15),
      1.0, 1e-10);
}

// A uniform target (fairseq eps = (V-1)/V gives every entry weight 1/V) and a -inf target logit: the
// loss is +inf, not 0 · inf + inf = NaN; and the backward's q is exactly 0 at a -inf logit.
TEST(ReferenceCrossEntropy, UniformTargetAndMinusInfLogits) {
  Matrix logits = iota(1, 4);
  logits(0, 2) = -std::numeric_limits<double>::infinity();
  const CrossEntropyConfig uniform{3.0 / 4.0, SmoothingConvention::fairseq, {}};
  EXPECT_EQ(cross_entropy_forward(logits, TargetVector{{2}}, uniform).loss[0],
            std::numeric_limits<double>::infinity());
  const Matrix d =
      cross_entropy_backward(logits, TargetVector{{1}}, {0.0, SmoothingConvention::fairseq, {}}, 1.0);
  EXPECT_EQ(d(0, 2), 0.0) << d;  // was 5.6e-309 through Eigen's clamped exp
}

TEST(ReferenceCrossEntropy, ValidatesTargetsAndVocabulary) {
  const Matrix logits = iota(2, 3);
  expect_error(
      [&] {
        cross_entropy_forward(logits, TargetVector{{0, 3}}, {});
      },
      "target 3 of row 1 outside [0, vocab 3)");
  // An ignore index outside the vocabulary (PyTorch's -100) is fine.
  const CrossEntropyForward fwd = cross_entropy_forward(logits, TargetVector{{-100, 2}}, {0.0, {}, -100});
  EXPECT_EQ(fwd.loss[0], 0.0);
  expect_error(
      [&] {
        cross_entropy_forward(Matrix::Zero(1, 1), TargetVector{{0}}, {0.1, SmoothingConvention::fairseq, {}});
      },
      "needs vocabulary >= 2");
}

TEST(ReferenceEmbedding, NonpadCountReproducesFairseqMakePositions) {
  // fairseq make_positions: cumsum(non-pad) · non-pad + padding_idx, so a left-padded row
  // [pad, pad, 5, 3] numbers its tokens padding_idx + 1 and padding_idx + 2.
  const std::int32_t pad = 1;
  TokenMatrix tokens(1, 4);
  tokens << pad, pad, 5, 3;
  EmbeddingConfig config;
  config.padding_idx = pad;
  config.indexing = PositionIndexing::nonpad_count;
  config.position_offset = pad + 1;
  const PositionMatrix positions = embedding_positions(tokens, config);
  EXPECT_EQ(positions(0, 2), 2);
  EXPECT_EQ(positions(0, 3), 3);
  config.indexing = PositionIndexing::slot;  // slot indexing would count the padding
  EXPECT_EQ(embedding_positions(tokens, config)(0, 2), 4);
}

TEST(ReferenceEmbedding, SlotPositionsScaleAndPadding) {
  const std::int32_t pad = 1;
  TokenMatrix tokens(1, 4);
  tokens << 5, 3, pad, pad;
  const Matrix token_table = iota(6, 2);
  const Matrix position_table = iota(8, 2, 0.5);
  EmbeddingConfig config;
  config.scale = 2.0;
  config.padding_idx = pad;
  config.positions = PositionEncoding::learned;
  config.position_offset = pad + 1;
  const Matrix y = embedding_forward(tokens, token_table, position_table, config, KeepMask::Ones(4, 2));
  EXPECT_TRUE(y.row(0).isApprox(2.0 * token_table.row(5) + position_table.row(2)));
  EXPECT_TRUE(y.row(1).isApprox(2.0 * token_table.row(3) + position_table.row(3)));
  EXPECT_TRUE(y.bottomRows(2).isZero(0.0));
  config.position_offset = 7;  // token [0, 1] sits at 1 + 7 = 8 >= 8 positions
  expect_error([&] { embedding_forward(tokens, token_table, position_table, config, KeepMask::Ones(4, 2)); },
               "position 8 of token [0, 1] >= num_positions 8");
  tokens(0, 0) = 6;
  expect_error([&] { embedding_forward(tokens, token_table, position_table, config, KeepMask::Ones(4, 2)); },
               "token 6 at [0, 0] outside [0, vocab 6)");
}

TEST(ReferenceEmbedding, SinusoidalFirstHalfSinSecondHalfCos) {
  const Matrix table = sinusoidal_positions(3, 5);  // half 2, last column zero
  EXPECT_DOUBLE_EQ(table(2, 0), std::sin(2.0));
  EXPECT_DOUBLE_EQ(table(2, 2), std::cos(2.0));
  EXPECT_NEAR(table(2, 1), std::sin(2.0 * 1e-4), 1e-18);
  EXPECT_TRUE(table.col(4).isZero(0.0));
}

TEST(ReferenceAttention, SplitHeadsLayout) {
  const Index batch = 2, len = 3, heads = 2, d = 2;
  const Matrix x = iota(batch * len, heads * d);
  const Matrix split = split_heads(x, batch, len, heads);
  // element (b, l, h·d + e) lands on row (b·heads + h)·len + l, column e
  EXPECT_EQ(split((1 * heads + 1) * len + 2, 1), x(1 * len + 2, 1 * d + 1));
  EXPECT_EQ(split((0 * heads + 1) * len + 0, 0), x(0, d));
  expect_error([&] { split_heads(iota(6, 5), batch, len, heads); }, "hidden 5 is not a multiple of heads 2");
}

TEST(ReferenceAttention, DropoutNeedsAMask) {
  const AttentionShape shape{1, 1, 2, 2};
  const Matrix q = iota(2, 3), k = iota(2, 3), v = iota(2, 3);
  AttentionConfig config;
  config.dropout_p = 0.1;
  expect_error([&] { attention_forward(q, k, v, shape, config); }, "needs a probability keep mask");
}

TEST(ReferenceOptimizers, AdamWDecaysWithZeroGradientAndSgdValidates) {
  Vector theta = Vector::Constant(3, 2.0);
  AdamState state;
  adamw_step(theta, Vector::Zero(3), state, {0.1, 0.9, 0.999, 1e-8, 0.5});
  EXPECT_TRUE(theta.isApproxToConstant(2.0 * (1.0 - 0.05), 1e-15)) << theta;
  EXPECT_EQ(state.step, 1);
  expect_error([&] { adam_step(theta, Vector::Zero(2), state, {}); }, "gradient has 2 elements, parameter 3");
  SgdState sgd;
  expect_error(
      [&] {
        sgd_step(theta, Vector::Zero(3), sgd, {0.1, 0.9, 0.1, 0.0, true});
      },
      "nesterov needs momentum > 0 and dampening 0");
}

TEST(ReferenceGradcheck, ReportsMalformedProblemsAsFailures) {
  Matrix x = iota(2, 2);
  GradcheckProblem problem;
  problem.name = "malformed";
  problem.inputs = {{"x", flat_span(x)}};
  problem.forward = [&] { return flatten(x); };
  problem.backward = [](const std::vector<double>&) { return std::vector<std::vector<double>>{}; };
  const CheckResult result = gradcheck(problem, 1);
  EXPECT_FALSE(result.passed);
  EXPECT_NE(result.detail.find("backward returned 0 gradients for 1 inputs"), std::string::npos)
      << result.detail;
}

// The centered bias keeps every pre-activation at least `margin` (relative) from 0, with rows on
// both sides of 0 in each column, on random data with near-ties planted at 0; the margin is what
// the biases achieve (recomputed here), and a rounding that moves the bias is taken into account
// when the bias is chosen.
TEST(ReferenceReluCentering, KeepsBothSignsAndReportsTheMarginAchieved) {
  std::uint64_t state = 12345;
  const auto uniform = [&] {  // a small LCG: enough for a shape test, and the same on every run
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<double>(state >> 11) * 0x1p-53 * 2.0 - 1.0;
  };
  for (const Index rows : {1, 2, 7, 64}) {
    Matrix in(rows, 5), w(9, 5);
    for (Index i = 0; i < in.size(); ++i) in.data()[i] = uniform();
    for (Index i = 0; i < w.size(); ++i) w.data()[i] = uniform();
    const auto coarse = [](double b) { return std::ldexp(std::round(std::ldexp(b, 6)), -6); };
    for (const bool round : {false, true}) {
      const ReluBiasCentering c =
          round ? center_relu_bias(in, w, coarse) : center_relu_bias(in, w, [](double b) { return b; });
      ASSERT_EQ(c.bias.size(), 9);
      const Matrix h = (in * w.transpose()).rowwise() + c.bias.transpose();
      double margin = INFINITY;
      for (Index j = 0; j < h.cols(); ++j) {
        if (round) {
          EXPECT_EQ(c.bias(j), coarse(c.bias(j))) << j;
        }
        const double scale = (in * w.transpose()).col(j).cwiseAbs().maxCoeff() + std::fabs(c.bias(j));
        margin = std::min(margin, h.col(j).cwiseAbs().minCoeff() / scale);
        if (rows == 1) {
          EXPECT_GT(h(0, j), 0.0) << "a lone row stays active";
        } else {  // rounded or not, the zero lies strictly between the column's extremes
          EXPECT_GT(h.col(j).maxCoeff(), 0.0) << rows << " rows, column " << j;
          EXPECT_LT(h.col(j).minCoeff(), 0.0) << rows << " rows, column " << j;
        }
      }
      EXPECT_DOUBLE_EQ(c.margin, margin) << rows << " rows, rounded " << round;
      if (!round) {
        EXPECT_GT(c.margin, 0.0) << rows << " rows: no pre-activation at 0";
      }
    }
  }
  // Scored after rounding: with biases rounded to quarters, the widest middle gap (0.25, 0.55)
  // proposes -0.4, stored as -0.5, whose zero lies 0.05 from 0.55; the gap (-0.1, 0.1) proposes 0,
  // stored exactly, 0.1 from both neighbours. The bias is the second, the margin 0.1 / 3.
  {
    Matrix in(8, 1), w(1, 1);
    in.col(0) << -3.0, -0.2, -0.1, 0.1, 0.25, 0.55, 0.6, 3.0;
    w(0, 0) = 1.0;
    const ReluBiasCentering c = center_relu_bias(in, w, [](double b) { return std::round(b * 4.0) / 4.0; });
    EXPECT_EQ(c.bias(0), 0.0);
    EXPECT_DOUBLE_EQ(c.margin, 0.1 / 3.0);
  }
  expect_error([] { center_relu_bias(Matrix(2, 3), Matrix(4, 5), [](double b) { return b; }); },
               "fc1_input has 3 columns, fc1_weight 5");
  expect_error([] { center_relu_bias(Matrix(0, 3), Matrix(4, 3), [](double b) { return b; }); },
               "fc1_input has no rows");
}

}  // namespace
}  // namespace seqbench::ref
