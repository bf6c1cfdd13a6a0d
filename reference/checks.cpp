#include "reference/checks.h"

#include <array>
#include <cmath>
#include <initializer_list>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <utility>

#include "core/philox.h"
#include "reference/reference.h"

namespace seqbench::ref {

namespace {

constexpr double kUnitRoundoff = std::numeric_limits<double>::epsilon() / 2.0;

// γ_n-type rounding bound for a length-n reduction whose terms are each a few roundings deep:
// n·u, with a margin of 8 for those roundings and the final division/normalization.
double reduction_tolerance(Index n) {
  return 8.0 * static_cast<double>(n + 1) * kUnitRoundoff;
}

// Seeded draws for one group of checks: sizes from small odd lists, Gaussian tensors, masks.
class Random {
 public:
  explicit Random(std::uint64_t seed) : engine_(seed) {}

  Index pick(std::initializer_list<Index> sizes) {
    std::uniform_int_distribution<std::size_t> index(0, sizes.size() - 1);
    return *(sizes.begin() + index(engine_));
  }
  double uniform(double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(engine_); }
  bool coin(double p_true = 0.5) { return std::bernoulli_distribution(p_true)(engine_); }
  std::int32_t integer(std::int32_t lo, std::int32_t hi) {  // inclusive
    return std::uniform_int_distribution<std::int32_t>(lo, hi)(engine_);
  }
  Matrix normal(Index rows, Index cols, double stddev = 1.0, double mean = 0.0) {
    std::normal_distribution<double> normal(mean, stddev);
    Matrix m(rows, cols);
    for (Index i = 0; i < m.size(); ++i) m.data()[i] = normal(engine_);
    return m;
  }
  Vector normal_vector(Index n, double stddev = 1.0) { return normal(n, 1, stddev); }
  // A Philox mask under a fresh (seed, offset), exactly as a kernel would draw it.
  KeepMask keep_mask(Index rows, Index cols, double p) {
    const std::uint64_t seed = engine_();  // two statements: argument evaluation order is unspecified
    const std::uint64_t offset = engine_();
    return make_dropout_mask(rows, cols, p, seed, offset);
  }

 private:
  std::mt19937_64 engine_;
};

Matrix as_matrix(const std::vector<double>& flat, Index rows, Index cols) {
  return Eigen::Map<const Matrix>(flat.data(), rows, cols);
}

std::string describe(std::initializer_list<std::pair<const char*, double>> fields) {
  std::ostringstream os;
  bool first = true;
  for (const auto& [key, value] : fields) {
    os << (first ? "" : ", ") << key << " " << value;
    first = false;
  }
  return os.str();
}

// Compares element-wise with the mixed criterion |a - e| <= tolerance · (1 + |e|).
CheckResult compare(std::string name, std::span<const double> actual, std::span<const double> expected,
                    double tolerance, const std::string& detail) {
  CheckResult result;
  result.name = std::move(name);
  result.tolerance = tolerance;
  if (actual.size() != expected.size()) {
    result.detail = detail + "; FAILED: " + std::to_string(actual.size()) + " values vs " +
                    std::to_string(expected.size()) + " expected";
    return result;
  }
  if (actual.empty()) {
    result.detail = detail + "; FAILED: nothing was compared (the drawn case is degenerate)";
    return result;
  }
  std::size_t worst = 0;
  bool finite = true;
  for (std::size_t i = 0; i < actual.size(); ++i) {
    const double err = std::abs(actual[i] - expected[i]);
    finite = finite && std::isfinite(actual[i]) && std::isfinite(expected[i]);
    result.max_abs_err = std::max(result.max_abs_err, err);
    const double mixed = err / (1.0 + std::abs(expected[i]));
    if (mixed > result.max_rel_err) {
      result.max_rel_err = mixed;
      worst = i;
    }
  }
  result.passed = finite && result.max_rel_err <= tolerance;
  std::ostringstream os;
  os << detail << "; " << actual.size() << " values, pass iff |a-e| <= " << tolerance << "*(1+|e|)";
  if (!result.passed) {
    os.precision(17);
    os << "; FAILED at " << worst << ": actual " << actual[worst] << ", expected " << expected[worst]
       << (finite ? "" : " (non-finite value)");
  }
  result.detail = os.str();
  return result;
}

template <class A, class B>
CheckResult compare(std::string name, const Eigen::PlainObjectBase<A>& actual,
                    const Eigen::PlainObjectBase<B>& expected, double tolerance, const std::string& detail) {
  return compare(
      std::move(name), std::span<const double>(actual.data(), static_cast<std::size_t>(actual.size())),
      std::span<const double>(expected.data(), static_cast<std::size_t>(expected.size())), tolerance, detail);
}

// For properties that are a yes/no fact (a mask-induced difference exists, a failure is reported).
CheckResult verdict(std::string name, bool passed, const std::string& detail) {
  CheckResult result;
  result.name = std::move(name);
  result.passed = passed;
  result.detail = passed ? detail : detail + "; FAILED";
  return result;
}

// ---------------------------------------------------------------------------------------------
// LayerNorm

// A LayerNorm problem whose rows have a standard deviation of at least 0.25: near-constant rows
// make x̂ vary on the scale of sqrt(var + eps) ≈ 3e-3, where the finite difference's truncation
// error is no longer negligible (see gradcheck.h).
struct LayerNormCase {
  Index rows, hidden;
  double eps = 1e-5;
  Matrix x;
  Vector gamma, beta;

  // hidden >= 2: with H = 1, x̂ = 0 and the gradient with respect to x vanishes identically.
  explicit LayerNormCase(Random& rng) : rows(rng.pick({1, 3, 7, 13})), hidden(rng.pick({2, 3, 7, 13, 33})) {
    x = rng.normal(rows, hidden, 2.0, 1.0);
    for (Index r = 0; r < rows; ++r) {
      while (std::sqrt((x.row(r).array() - x.row(r).mean()).square().mean()) < 0.25) {
        x.row(r) = rng.normal(1, hidden, 2.0, 1.0);
      }
    }
    gamma = rng.normal_vector(hidden);
    beta = rng.normal_vector(hidden);
  }

  std::string description() const {
    return describe({{"rows", double(rows)}, {"hidden", double(hidden)}, {"eps", eps}});
  }

  std::vector<std::vector<double>> grads(const std::vector<double>& upstream) const {
    const LayerNormForward fwd = layernorm_forward(x, gamma, beta, eps);
    const LayerNormGrads g =
        layernorm_backward(as_matrix(upstream, rows, hidden), x, gamma, fwd.mean, fwd.rstd);
    return {flatten(g.dx), flatten(g.dgamma), flatten(g.dbeta)};
  }

  // The problem refers to this case's tensors: keep the case alive and in place while it is used.
  GradcheckProblem problem(std::string name) {
    GradcheckProblem p;
    p.name = std::move(name);
    p.description = description();
    p.inputs = {{"x", flat_span(x)}, {"gamma", flat_span(gamma)}, {"beta", flat_span(beta)}};
    p.forward = [this] { return flatten(layernorm_forward(x, gamma, beta, eps).y); };
    p.backward = [this](const std::vector<double>& w) { return grads(w); };
    return p;
  }
};

std::vector<CheckResult> layernorm_checks(std::uint64_t seed) {
  Random rng(seed);
  LayerNormCase c(rng);
  std::vector<CheckResult> results{gradcheck(c.problem("reference/layernorm/gradcheck"), seed)};

  // gamma = 1, beta = 0: each row of y has mean 0 and (biased) variance var/(var + eps), which is 1
  // up to the eps term. The mean's error is the reduction bound times the size of x̂ (|x̂| <= sqrt(H)).
  const Vector ones = Vector::Ones(c.hidden);
  const LayerNormForward fwd = layernorm_forward(c.x, ones, Vector::Zero(c.hidden), c.eps);
  Vector moments(2 * c.rows), expected(2 * c.rows);
  for (Index r = 0; r < c.rows; ++r) {
    const double mean_x = c.x.row(r).mean();
    const double var_x = (c.x.row(r).array() - mean_x).square().mean();
    moments[2 * r] = fwd.y.row(r).mean();
    moments[2 * r + 1] = fwd.y.row(r).array().square().mean() - moments[2 * r] * moments[2 * r];
    expected[2 * r] = 0.0;
    expected[2 * r + 1] = var_x / (var_x + c.eps);
  }
  results.push_back(compare("reference/layernorm/normalized_moments", moments, expected,
                            reduction_tolerance(c.hidden) * (1.0 + std::sqrt(double(c.hidden))),
                            c.description() + "; per row mean(y) = 0, var(y) = var(x)/(var(x)+eps)"));
  return results;
}

// ---------------------------------------------------------------------------------------------
// Softmax

AttentionShape random_attention_shape(Random& rng) {
  // k_len >= 3: with a single key the softmax is constant and its gradient check would be vacuous.
  return {rng.pick({1, 2, 3}), rng.pick({1, 3}), rng.pick({1, 3, 7, 13}), rng.pick({3, 7, 13})};
}

// Causal or not (with the decoding-style offset k_len - q_len when q_len <= k_len), random key
// lengths with one batch element fully padded (fully-masked rows) when there are several, and
// sparse boolean padding on keys other than key 0. Every other batch element keeps key 0 visible
// to every query, so the checks always have unmasked rows to test.
AttentionMask random_attention_mask(Random& rng, const AttentionShape& shape) {
  AttentionMask mask;
  mask.causal = rng.coin();
  mask.causal_offset = std::max<Index>(0, shape.k_len - shape.q_len);
  const auto empty_batch = static_cast<Index>(rng.integer(0, static_cast<std::int32_t>(shape.batch) - 1));
  for (Index b = 0; b < shape.batch; ++b) {
    const bool empty = shape.batch > 1 && b == empty_batch;
    mask.key_lengths.push_back(empty ? 0
                                     : rng.integer(static_cast<std::int32_t>((shape.k_len + 1) / 2),
                                                   static_cast<std::int32_t>(shape.k_len)));
  }
  for (Index i = 0; i < shape.batch * shape.k_len; ++i) {
    mask.key_padding.push_back(i % shape.k_len != 0 && rng.coin(0.15) ? 1 : 0);
  }
  return mask;
}

std::string describe_attention(const AttentionShape& s, const AttentionMask& m, double scale) {
  std::ostringstream os;
  os << "[B " << s.batch << ", heads " << s.heads << ", Lq " << s.q_len << ", Lk " << s.k_len << "], scale "
     << scale << ", causal " << m.causal << " offset " << m.causal_offset << ", key_lengths";
  for (Index len : m.key_lengths) os << " " << len;
  return os.str();
}

std::vector<CheckResult> softmax_checks(std::uint64_t seed) {
  Random rng(seed);
  const AttentionShape shape = random_attention_shape(rng);
  const AttentionMask mask = random_attention_mask(rng, shape);
  const double scale = rng.uniform(0.3, 1.5);
  const std::string description = describe_attention(shape, mask, scale);
  std::vector<CheckResult> results;

  Matrix x = rng.normal(shape.rows(), shape.k_len, 2.0);
  GradcheckProblem p;
  p.name = "reference/softmax/gradcheck";
  p.description = description;
  p.inputs = {{"x", flat_span(x)}};
  p.forward = [&] { return flatten(attention_softmax_forward(x, shape, scale, mask)); };
  p.backward = [&](const std::vector<double>& w) -> std::vector<std::vector<double>> {
    const Matrix y = attention_softmax_forward(x, shape, scale, mask);
    return {flatten(attention_softmax_backward(as_matrix(w, shape.rows(), shape.k_len), y, scale))};
  };
  results.push_back(gradcheck(p, seed));

  // Large scores (std 30, so exp would overflow without the max shift): every row with a visible
  // key sums to 1; masked entries and fully-masked rows are exactly 0. A case of its own, with two
  // or more batch elements (so one is fully padded) and a causal mask, so all three kinds of row
  // occur whatever the seed.
  const AttentionShape closed{rng.pick({2, 3}), rng.pick({1, 3}), rng.pick({1, 3, 7, 13}),
                              rng.pick({3, 7, 13})};
  AttentionMask closed_mask = random_attention_mask(rng, closed);
  closed_mask.causal = true;
  const std::string closed_description = describe_attention(closed, closed_mask, 1.0);
  const Matrix big = rng.normal(closed.rows(), closed.k_len, 30.0);
  const Matrix y = attention_softmax_forward(big, closed, 1.0, closed_mask);
  std::vector<double> sums, expected_sums, masked_values;
  Index fully_masked_rows = 0;
  for (Index r = 0; r < closed.rows(); ++r) {
    const Index b = r / (closed.heads * closed.q_len);
    const Index i = r % closed.q_len;
    bool any_visible = false;
    for (Index j = 0; j < closed.k_len; ++j) {
      if (closed_mask.masked(b, i, j, closed.k_len)) {
        masked_values.push_back(y(r, j));
      } else {
        any_visible = true;
      }
    }
    if (any_visible) {
      sums.push_back(y.row(r).sum());
      expected_sums.push_back(1.0);
    } else {
      ++fully_masked_rows;
    }
  }
  results.push_back(compare("reference/softmax/rows_sum_to_one", sums, expected_sums,
                            reduction_tolerance(closed.k_len), closed_description + "; scores ~ N(0, 30²)"));
  results.push_back(compare(
      "reference/softmax/masked_exactly_zero", masked_values, std::vector<double>(masked_values.size(), 0.0),
      0.0, closed_description + "; " + std::to_string(fully_masked_rows) + " fully-masked rows"));

  // log_softmax (the cross-entropy's) agrees with the attention softmax on an unmasked row set.
  const Matrix logits = rng.normal(shape.rows(), shape.k_len, 3.0);
  const Matrix q_from_log = log_softmax(logits).array().exp();
  const Matrix q_direct = attention_softmax_forward(logits, {shape.rows(), 1, 1, shape.k_len}, 1.0, {});
  results.push_back(compare("reference/softmax/log_softmax_consistent", q_from_log, q_direct,
                            reduction_tolerance(shape.k_len),
                            description + "; exp(log_softmax(x)) = softmax(x)"));
  return results;
}

// ---------------------------------------------------------------------------------------------
// Dropout

std::vector<CheckResult> dropout_checks(std::uint64_t seed) {
  Random rng(seed);
  const Index rows = rng.pick({1, 3, 7, 13});
  const Index cols = rng.pick({1, 3, 8, 13});
  const double p = rng.pick({1, 3, 5}) / 10.0;
  const KeepMask keep = rng.keep_mask(rows, cols, p);
  const std::string description = describe({{"rows", double(rows)}, {"cols", double(cols)}, {"p", p}});
  std::vector<CheckResult> results;

  Matrix x = rng.normal(rows, cols);
  GradcheckProblem problem;
  problem.name = "reference/dropout/gradcheck";
  problem.description = description + " (mask held fixed)";
  problem.inputs = {{"x", flat_span(x)}};
  problem.forward = [&] { return flatten(dropout_forward(x, keep, p)); };
  problem.backward = [&](const std::vector<double>& w) -> std::vector<std::vector<double>> {
    return {flatten(dropout_backward(as_matrix(w, rows, cols), keep, p))};
  };
  results.push_back(gradcheck(problem, seed));

  // p = 0 keeps every element and scales by exactly 1; p = 1 drops everything (0, not NaN).
  const KeepMask all = rng.keep_mask(rows, cols, 0.0);
  results.push_back(
      compare("reference/dropout/p0_identity", dropout_forward(x, all, 0.0), x, 0.0, description));
  const KeepMask none = rng.keep_mask(rows, cols, 1.0);
  results.push_back(compare("reference/dropout/p1_zero", dropout_forward(x, none, 1.0),
                            Matrix(Matrix::Zero(rows, cols)), 0.0, description));

  // The Philox keep rate: over n = 64·64 draws with p = 0.3 the kept fraction is within 5 standard
  // deviations sqrt(q(1-q)/n) ≈ 0.007 of 1 - q, q = dropout_drop_probability(0.3) the drop
  // probability of the 16-bit draws (core/philox.h; a false alarm has probability below 1e-6).
  // Compared as the standardized deviation z against 0 with tolerance 5.
  const KeepMask large = rng.keep_mask(64, 64, 0.3);
  const double kept = large.cast<double>().mean();
  const double q = dropout_drop_probability(0.3f);
  const double z = (kept - (1.0 - q)) / std::sqrt(q * (1.0 - q) / (64.0 * 64.0));
  results.push_back(
      compare("reference/dropout/keep_rate", std::vector<double>{z}, std::vector<double>{0.0}, 5.0,
              "64x64 mask, p 0.3; z = (kept fraction - (1 - q))/sigma, q = ceil(p 2^16)/2^16, |z| <= 5"));
  return results;
}

// ---------------------------------------------------------------------------------------------
// Bias + activation + dropout

std::vector<CheckResult> bias_act_dropout_checks(std::uint64_t seed) {
  Random rng(seed);
  std::vector<CheckResult> results;
  for (const Activation act : {Activation::relu, Activation::gelu_erf, Activation::gelu_tanh}) {
    const Index rows = rng.pick({1, 3, 7});
    const Index hidden = rng.pick({1, 3, 8, 13});
    const double p = rng.pick({0, 1, 3}) / 10.0;
    const KeepMask keep = rng.keep_mask(rows, hidden, p);
    Matrix x = rng.normal(rows, hidden, 1.5);
    Vector bias = rng.normal_vector(hidden, 0.5);
    if (act == Activation::relu) {
      // Keep z = x + bias at least 0.01 from ReLU's kink, far beyond the FD step (2h ≈ 2.4e-4).
      for (Index r = 0; r < rows; ++r) {
        for (Index c = 0; c < hidden; ++c) {
          const double z = x(r, c) + bias[c];
          if (std::abs(z) < 0.01) x(r, c) += z >= 0.0 ? 0.02 : -0.02;
        }
      }
    }
    GradcheckProblem problem;
    problem.name = std::string("reference/bias_act_dropout/gradcheck_") + activation_name(act);
    problem.description = describe({{"rows", double(rows)}, {"hidden", double(hidden)}, {"p", p}});
    problem.inputs = {{"x", flat_span(x)}, {"bias", flat_span(bias)}};
    problem.forward = [&] { return flatten(bias_act_dropout_forward(x, bias, keep, p, act)); };
    problem.backward = [&](const std::vector<double>& w) -> std::vector<std::vector<double>> {
      const BiasActDropoutGrads g =
          bias_act_dropout_backward(as_matrix(w, rows, hidden), x, bias, keep, p, act);
      return {flatten(g.dx), flatten(g.dbias)};
    };
    results.push_back(gradcheck(problem, seed));
  }

  // Known values: GELU(±1) = ±Φ(±1) with Φ(1) = 0.8413447460685429 (the normal CDF), the tanh
  // form's 0.5·(1 + tanh(√(2/π)·1.044715)) = 0.8411919906082768, ReLU(-1) = 0, all at 0 = 0.
  const std::vector<double> actual{activate(1.0, Activation::gelu_erf),  activate(-1.0, Activation::gelu_erf),
                                   activate(1.0, Activation::gelu_tanh), activate(0.0, Activation::gelu_tanh),
                                   activate(-1.0, Activation::relu),     activate(2.5, Activation::relu)};
  const std::vector<double> expected{
      0.8413447460685429, -0.15865525393145707, 0.8411919906082768, 0.0, 0.0, 2.5};
  results.push_back(
      compare("reference/bias_act_dropout/activation_values", actual, expected, 8.0 * kUnitRoundoff,
              "gelu_erf(±1), gelu_tanh(1), gelu_tanh(0), relu(-1), relu(2.5) against 17-digit values"));
  return results;
}

// ---------------------------------------------------------------------------------------------
// Bias + dropout + residual

std::vector<CheckResult> bias_dropout_residual_checks(std::uint64_t seed) {
  Random rng(seed);
  const Index rows = rng.pick({1, 3, 7});
  const Index hidden = rng.pick({1, 3, 8, 13});
  const double p = rng.pick({1, 3}) / 10.0;
  const KeepMask keep = rng.keep_mask(rows, hidden, p);
  Matrix x = rng.normal(rows, hidden);
  Vector bias = rng.normal_vector(hidden);
  Matrix residual = rng.normal(rows, hidden);
  const std::string description = describe({{"rows", double(rows)}, {"hidden", double(hidden)}, {"p", p}});
  std::vector<CheckResult> results;

  GradcheckProblem problem;
  problem.name = "reference/bias_dropout_residual/gradcheck";
  problem.description = description;
  problem.inputs = {{"x", flat_span(x)}, {"bias", flat_span(bias)}, {"residual", flat_span(residual)}};
  problem.forward = [&] { return flatten(bias_dropout_residual_forward(x, bias, residual, keep, p)); };
  problem.backward = [&](const std::vector<double>& w) -> std::vector<std::vector<double>> {
    const BiasDropoutResidualGrads g = bias_dropout_residual_backward(as_matrix(w, rows, hidden), keep, p);
    return {flatten(g.dx), flatten(g.dbias), flatten(g.dresidual)};
  };
  results.push_back(gradcheck(problem, seed));

  // p = 0: y = residual + x + bias, two additions, so within 2 roundings.
  const Matrix y = bias_dropout_residual_forward(x, bias, residual, rng.keep_mask(rows, hidden, 0.0), 0.0);
  const Matrix expected = residual + (x.rowwise() + bias.transpose());
  results.push_back(compare("reference/bias_dropout_residual/p0_sum", y, expected, 2.0 * kUnitRoundoff * 4.0,
                            description + "; p = 0 gives residual + x + bias"));
  return results;
}

// ---------------------------------------------------------------------------------------------
// Embedding

std::vector<CheckResult> embedding_checks(std::uint64_t seed) {
  Random rng(seed);
  std::vector<CheckResult> results;
  for (const PositionEncoding positions : {PositionEncoding::sinusoidal, PositionEncoding::learned}) {
    const bool learned = positions == PositionEncoding::learned;
    const Index batch = rng.pick({1, 2, 3});
    const Index len = rng.pick({2, 3, 7});
    const Index vocab = rng.pick({3, 7, 13});
    const Index hidden = rng.pick({2, 3, 4, 8});
    EmbeddingConfig config;
    config.scale = std::sqrt(static_cast<double>(hidden));
    config.padding_idx = 1;  // fairseq's <pad>
    config.positions = positions;
    config.indexing = rng.coin() ? PositionIndexing::slot : PositionIndexing::nonpad_count;
    config.position_offset = rng.pick({0, 2});
    config.dropout_p = rng.pick({0, 2}) / 10.0;
    TokenMatrix tokens(batch, len);
    for (Index i = 0; i < tokens.size(); ++i) {
      tokens.data()[i] =
          rng.coin(0.25) ? config.padding_idx : rng.integer(0, static_cast<std::int32_t>(vocab) - 1);
    }
    tokens(0, len - 1) = config.padding_idx;  // at least one padding token
    tokens(0, 0) = 0;                         // and at least one real one
    const KeepMask keep = rng.keep_mask(batch * len, hidden, config.dropout_p);
    Matrix token_table = rng.normal(vocab, hidden);
    Matrix position_table = learned ? rng.normal(len + config.position_offset + 2, hidden) : Matrix();
    const std::string description = describe({{"batch", double(batch)},
                                              {"len", double(len)},
                                              {"vocab", double(vocab)},
                                              {"hidden", double(hidden)},
                                              {"position_offset", double(config.position_offset)},
                                              {"p", config.dropout_p}}) +
                                    (learned ? ", learned" : ", sinusoidal") +
                                    (config.indexing == PositionIndexing::slot ? " slot" : " nonpad_count") +
                                    " positions, padding_idx 1";

    GradcheckProblem problem;
    problem.name = std::string("reference/embedding/gradcheck_") + (learned ? "learned" : "sinusoidal");
    problem.description = description;
    problem.inputs = {{"token_table", flat_span(token_table)}};
    if (learned) problem.inputs.push_back({"position_table", flat_span(position_table)});
    problem.forward = [&] {
      return flatten(embedding_forward(tokens, token_table, position_table, config, keep));
    };
    problem.backward = [&](const std::vector<double>& w) {
      const EmbeddingGrads g = embedding_backward(as_matrix(w, batch * len, hidden), tokens, token_table,
                                                  position_table, config, keep);
      std::vector<std::vector<double>> grads{flatten(g.d_token_table)};
      if (learned) grads.push_back(flatten(g.d_position_table));
      return grads;
    };
    results.push_back(gradcheck(problem, seed));

    // Padding tokens give exactly-zero output rows, and the padding row of the token table gets an
    // exactly-zero gradient, whatever the upstream gradient (padding row of the table is nonzero).
    const Matrix y = embedding_forward(tokens, token_table, position_table, config, keep);
    const EmbeddingGrads g = embedding_backward(rng.normal(batch * len, hidden), tokens, token_table,
                                                position_table, config, keep);
    std::vector<double> must_be_zero = flatten(Matrix(g.d_token_table.row(config.padding_idx)));
    for (Index i = 0; i < tokens.size(); ++i) {
      if (tokens.data()[i] == config.padding_idx) {
        for (Index c = 0; c < hidden; ++c) must_be_zero.push_back(y(i, c));
      }
    }
    results.push_back(
        compare(std::string("reference/embedding/padding_zero_") + (learned ? "learned" : "sinusoidal"),
                must_be_zero, std::vector<double>(must_be_zero.size(), 0.0), 0.0,
                description + "; padding output rows and the padding gradient row"));
  }

  // Sinusoidal table against the formula written with pow instead of exp/log: position 0 gives
  // sin 0 = 0 and cos 0 = 1; frequency k is 10000^(-k/(half-1)); odd hidden leaves a zero column.
  const Index hidden = rng.pick({7, 8});
  const Index positions = 11;
  const Index half = hidden / 2;
  const Matrix table = sinusoidal_positions(positions, hidden);
  Matrix expected = Matrix::Zero(positions, hidden);
  for (Index pos = 0; pos < positions; ++pos) {
    for (Index k = 0; k < half; ++k) {
      const double angle = double(pos) * std::pow(10000.0, -double(k) / double(half - 1));
      expected(pos, k) = std::sin(angle);
      expected(pos, half + k) = std::cos(angle);
    }
  }
  // The angle carries a few roundings relative to its size (<= positions), and sin/cos pass that on.
  results.push_back(compare("reference/embedding/sinusoidal_values", table, expected,
                            16.0 * kUnitRoundoff * double(positions),
                            describe({{"positions", double(positions)}, {"hidden", double(hidden)}})));
  return results;
}

// ---------------------------------------------------------------------------------------------
// Cross-entropy

struct CrossEntropyCase {
  Index rows, vocab;
  Matrix logits;
  TargetVector targets;
  CrossEntropyConfig config;

  CrossEntropyCase(Random& rng, SmoothingConvention convention, double smoothing)
      : rows(rng.pick({2, 3, 7, 13})), vocab(rng.pick({2, 3, 7, 13, 33})) {
    logits = rng.normal(rows, vocab, 2.0);
    config.convention = convention;
    config.smoothing = smoothing;
    config.ignore_index = 1;  // fairseq's <pad>
    targets.resize(rows);
    for (Index r = 0; r < rows; ++r) {
      targets[r] = rng.coin(0.25) ? 1 : rng.integer(0, static_cast<std::int32_t>(vocab) - 1);
    }
    targets[0] = 1;         // at least one ignored row
    targets[rows - 1] = 0;  // and at least one counted one
  }

  std::string description() const {
    return describe({{"rows", double(rows)}, {"vocab", double(vocab)}, {"smoothing", config.smoothing}}) +
           ", " + smoothing_convention_name(config.convention) + " convention, ignore_index 1";
  }
};

std::vector<CheckResult> cross_entropy_checks(std::uint64_t seed) {
  Random rng(seed);
  std::vector<CheckResult> results;
  for (const SmoothingConvention convention : {SmoothingConvention::paper, SmoothingConvention::fairseq}) {
    CrossEntropyCase c(rng, convention, rng.uniform(0.05, 0.3));
    GradcheckProblem problem;
    problem.name = std::string("reference/cross_entropy/gradcheck_") + smoothing_convention_name(convention);
    problem.description = c.description();
    problem.inputs = {{"logits", flat_span(c.logits)}};
    problem.forward = [&] { return flatten(cross_entropy_forward(c.logits, c.targets, c.config).loss); };
    problem.backward = [&](const std::vector<double>& w) -> std::vector<std::vector<double>> {
      const Vector upstream = Eigen::Map<const Vector>(w.data(), c.rows);
      return {flatten(cross_entropy_backward(c.logits, c.targets, c.config, upstream))};
    };
    results.push_back(gradcheck(problem, seed));

    // Ignored rows: exactly zero loss, nll and gradient.
    const CrossEntropyForward fwd = cross_entropy_forward(c.logits, c.targets, c.config);
    const Matrix dlogits = cross_entropy_backward(c.logits, c.targets, c.config, 1.0);
    std::vector<double> ignored;
    for (Index r = 0; r < c.rows; ++r) {
      if (c.targets[r] != *c.config.ignore_index) continue;
      ignored.push_back(fwd.loss[r]);
      ignored.push_back(fwd.nll[r]);
      for (Index j = 0; j < c.vocab; ++j) ignored.push_back(dlogits(r, j));
    }
    results.push_back(
        compare(std::string("reference/cross_entropy/ignore_index_") + smoothing_convention_name(convention),
                ignored, std::vector<double>(ignored.size(), 0.0), 0.0, c.description()));

    // Smoothing 0: the loss is the NLL -log q_t = log Σ exp(x) - x_t, computed here without the
    // max shift (logits are N(0, 2²), far from overflow).
    CrossEntropyCase plain(rng, convention, 0.0);
    const CrossEntropyForward plain_fwd = cross_entropy_forward(plain.logits, plain.targets, plain.config);
    Vector expected_nll = Vector::Zero(plain.rows);
    for (Index r = 0; r < plain.rows; ++r) {
      if (plain.targets[r] == *plain.config.ignore_index) continue;
      expected_nll[r] = std::log(plain.logits.row(r).array().exp().sum()) - plain.logits(r, plain.targets[r]);
    }
    results.push_back(compare(
        std::string("reference/cross_entropy/no_smoothing_is_nll_") + smoothing_convention_name(convention),
        plain_fwd.loss, expected_nll, reduction_tolerance(plain.vocab) * 8.0,
        plain.description() + "; the logits reach |x| ~ 8, hence the extra factor 8"));

    // Uniform logits: q = 1/V, and both smoothed distributions sum to 1, so the loss is log V.
    const Index vocab = rng.pick({2, 3, 7, 13});
    const Matrix uniform = Matrix::Constant(3, vocab, rng.uniform(-2.0, 2.0));
    CrossEntropyConfig smoothed{0.1, convention, std::nullopt};
    const TargetVector targets = TargetVector::Constant(3, static_cast<std::int32_t>(vocab - 1));
    const Vector loss = cross_entropy_forward(uniform, targets, smoothed).loss;
    results.push_back(compare(
        std::string("reference/cross_entropy/uniform_logits_") + smoothing_convention_name(convention), loss,
        Vector(Vector::Constant(3, std::log(double(vocab)))), reduction_tolerance(vocab) * 4.0,
        describe({{"vocab", double(vocab)}, {"smoothing", 0.1}}) + "; loss = log V"));
  }

  // The two conventions on the same logits and targets (no ignored rows):
  //  * the same ε gives different losses, paper - fairseq = ε/(V-1) · (nll - smooth/V);
  //  * fairseq with ε equals paper with α = ε·V/(V-1).
  const Index rows = rng.pick({3, 7});
  const Index vocab = rng.pick({3, 7, 13});
  const Matrix logits = rng.normal(rows, vocab, 2.0);
  TargetVector targets(rows);
  for (Index r = 0; r < rows; ++r) targets[r] = rng.integer(0, static_cast<std::int32_t>(vocab) - 1);
  const double eps = 0.1;
  const double v = double(vocab);
  const CrossEntropyForward paper =
      cross_entropy_forward(logits, targets, {eps, SmoothingConvention::paper, {}});
  const CrossEntropyForward fairseq =
      cross_entropy_forward(logits, targets, {eps, SmoothingConvention::fairseq, {}});
  const CrossEntropyForward paper_mapped =
      cross_entropy_forward(logits, targets, {eps * v / (v - 1.0), SmoothingConvention::paper, {}});
  const Matrix log_q = log_softmax(logits);
  Vector expected_gap(rows);
  for (Index r = 0; r < rows; ++r) {
    const double smooth = -log_q.row(r).sum();
    expected_gap[r] = eps / (v - 1.0) * (paper.nll[r] - smooth / v);
  }
  const std::string description =
      describe({{"rows", double(rows)}, {"vocab", double(vocab)}, {"eps", eps}}) + ", logits ~ N(0, 2²)";
  const double tol = reduction_tolerance(vocab) * 8.0;
  results.push_back(compare("reference/cross_entropy/conventions_gap", Vector(paper.loss - fairseq.loss),
                            expected_gap, tol,
                            description + "; paper - fairseq = eps/(V-1)·(nll - smooth/V)"));
  results.push_back(compare("reference/cross_entropy/conventions_equivalent", paper_mapped.loss, fairseq.loss,
                            tol, description + "; paper(alpha = eps·V/(V-1)) = fairseq(eps)"));
  results.push_back(verdict("reference/cross_entropy/conventions_differ",
                            (paper.loss - fairseq.loss).cwiseAbs().maxCoeff() > 1e3 * tol,
                            description + "; the same eps must give different losses"));

  // ANCHORS.md's paper-convention gradient: q - α/V - 1 + α at the target, q - α/V elsewhere.
  const Matrix dlogits = cross_entropy_backward(logits, targets, {eps, SmoothingConvention::paper, {}}, 1.0);
  Matrix expected_grad = log_q.array().exp() - eps / v;
  for (Index r = 0; r < rows; ++r) expected_grad(r, targets[r]) += -1.0 + eps;
  results.push_back(compare("reference/cross_entropy/paper_gradient_formula", dlogits, expected_grad,
                            reduction_tolerance(vocab) * 8.0, description + "; ANCHORS.md formula"));
  return results;
}

// ---------------------------------------------------------------------------------------------
// Attention

std::vector<CheckResult> attention_checks(std::uint64_t seed) {
  Random rng(seed);
  std::vector<CheckResult> results;
  {
    const AttentionShape shape = random_attention_shape(rng);
    const Index head_dim = rng.pick({1, 3, 8});
    const Index value_dim = rng.pick({1, 2, 5});
    AttentionConfig config;
    config.scale = 1.0 / std::sqrt(double(head_dim));
    config.mask = random_attention_mask(rng, shape);
    config.dropout_p = rng.pick({0, 2}) / 10.0;
    const KeepMask keep = rng.keep_mask(shape.rows(), shape.k_len, config.dropout_p);
    const Index bh = shape.batch * shape.heads;
    Matrix q = rng.normal(bh * shape.q_len, head_dim);
    Matrix k = rng.normal(bh * shape.k_len, head_dim);
    Matrix v = rng.normal(bh * shape.k_len, value_dim);
    GradcheckProblem problem;
    problem.name = "reference/attention/gradcheck";
    problem.description =
        describe_attention(shape, config.mask, config.scale) + ", " +
        describe({{"d", double(head_dim)}, {"dv", double(value_dim)}, {"p", config.dropout_p}});
    problem.inputs = {{"q", flat_span(q)}, {"k", flat_span(k)}, {"v", flat_span(v)}};
    problem.forward = [&] { return flatten(attention_forward(q, k, v, shape, config, &keep).out); };
    problem.backward = [&](const std::vector<double>& w) -> std::vector<std::vector<double>> {
      const AttentionForward fwd = attention_forward(q, k, v, shape, config, &keep);
      const AttentionGrads g =
          attention_backward(as_matrix(w, shape.rows(), value_dim), q, k, v, shape, config, fwd.probs, &keep);
      return {flatten(g.dq), flatten(g.dk), flatten(g.dv)};
    };
    results.push_back(gradcheck(problem, seed));

    // q = 0 makes every visible key equally likely: each output row is the mean of the visible
    // value rows, and a query that sees no key outputs 0.
    const AttentionForward fwd =
        attention_forward(Matrix::Zero(q.rows(), q.cols()), k, v, shape, {config.scale, config.mask, 0.0});
    Matrix expected = Matrix::Zero(shape.rows(), value_dim);
    for (Index r = 0; r < shape.rows(); ++r) {
      const Index b = r / (shape.heads * shape.q_len);
      const Index i = r % shape.q_len;
      const Index block = r / shape.q_len;
      Index visible = 0;
      for (Index j = 0; j < shape.k_len; ++j) {
        if (config.mask.masked(b, i, j, shape.k_len)) continue;
        expected.row(r) += v.row(block * shape.k_len + j);
        ++visible;
      }
      if (visible > 0) expected.row(r) /= double(visible);
    }
    results.push_back(compare("reference/attention/uniform_average", fwd.out, expected,
                              reduction_tolerance(shape.k_len) * 4.0,
                              problem.description + "; q = 0 averages the visible values (|v| ~ 4 at most)"));
  }
  {
    // Full multi-head attention with projections, cross-attention shaped (Lq != Lk in general).
    MhaShape shape{rng.pick({1, 2}), rng.pick({1, 3, 5}), rng.pick({1, 3, 7}), rng.pick({1, 2, 3})};
    const Index head_dim = rng.pick({1, 2, 4});
    const Index hidden = shape.heads * head_dim;
    MhaConfig config;
    const AttentionShape attn_shape{shape.batch, shape.heads, shape.q_len, shape.k_len};
    config.mask = random_attention_mask(rng, attn_shape);
    config.dropout_p = rng.pick({0, 2}) / 10.0;
    const KeepMask keep = rng.keep_mask(attn_shape.rows(), shape.k_len, config.dropout_p);
    const double init = 1.0 / std::sqrt(double(hidden));
    MhaParams params;
    for (Linear* proj : {&params.q_proj, &params.k_proj, &params.v_proj, &params.out_proj}) {
      proj->weight = rng.normal(hidden, hidden, init);
      proj->bias = rng.normal_vector(hidden, 0.1);
    }
    Matrix query = rng.normal(shape.batch * shape.q_len, hidden);
    Matrix key_value = rng.normal(shape.batch * shape.k_len, hidden);
    GradcheckProblem problem;
    problem.name = "reference/attention/gradcheck_mha";
    problem.description = describe_attention(attn_shape, config.mask, 1.0 / std::sqrt(double(head_dim))) +
                          ", " + describe({{"hidden", double(hidden)}, {"p", config.dropout_p}});
    problem.inputs = {{"query", flat_span(query)}, {"key_value", flat_span(key_value)}};
    const std::array<std::pair<const char*, Linear*>, 4> projections{{{"q_proj", &params.q_proj},
                                                                      {"k_proj", &params.k_proj},
                                                                      {"v_proj", &params.v_proj},
                                                                      {"out_proj", &params.out_proj}}};
    for (const auto& [name, proj] : projections) {
      problem.inputs.push_back({std::string(name) + ".weight", flat_span(proj->weight)});
      problem.inputs.push_back({std::string(name) + ".bias", flat_span(proj->bias)});
    }
    problem.forward = [&] {
      return flatten(mha_forward(query, key_value, params, shape, config, &keep).out);
    };
    problem.backward = [&](const std::vector<double>& w) {
      const MhaForward fwd = mha_forward(query, key_value, params, shape, config, &keep);
      const MhaGrads g = mha_backward(as_matrix(w, query.rows(), hidden), query, key_value, params, shape,
                                      config, fwd, &keep);
      std::vector<std::vector<double>> grads{flatten(g.d_query), flatten(g.d_key_value)};
      for (const Linear* d :
           {&g.d_params.q_proj, &g.d_params.k_proj, &g.d_params.v_proj, &g.d_params.out_proj}) {
        grads.push_back(flatten(d->weight));
        grads.push_back(flatten(d->bias));
      }
      return grads;
    };
    results.push_back(gradcheck(problem, seed));

    // Heads split and merge back without change.
    const Matrix roundtrip = merge_heads(split_heads(query, shape.batch, shape.q_len, shape.heads),
                                         shape.batch, shape.q_len, shape.heads);
    results.push_back(
        compare("reference/attention/split_merge_roundtrip", roundtrip, query, 0.0, problem.description));
  }
  return results;
}

// ---------------------------------------------------------------------------------------------
// Optimizers

std::vector<CheckResult> optimizer_checks(std::uint64_t seed) {
  Random rng(seed);
  std::vector<CheckResult> results;
  const Index n = rng.pick({1, 3, 7, 13});
  const Vector theta0 = rng.normal_vector(n);
  Vector g1 = rng.normal_vector(n);
  for (Index i = 0; i < n; ++i) g1[i] += g1[i] >= 0.0 ? 0.1 : -0.1;  // |g| >= 0.1
  const Vector g2 = rng.normal_vector(n);
  const std::string size = "n " + std::to_string(n);

  // Adam's first step: after bias correction m̂ = g and v̂ = g², so Δθ = -lr·g/(|g| + eps): with
  // eps = 0 exactly -lr·sign(g), whatever β1 and β2 (without the correction it would be
  // -lr·(1-β1)/sqrt(1-β2)·sign(g), 0.89x here and 3.16x at the default betas). A handful of
  // roundings, hence 16u.
  {
    const AdamConfig config{1e-2, 0.8, 0.95, 0.0, 0.0};
    AdamState state;
    Vector theta = theta0;
    adam_step(theta, g1, state, config);
    const Vector expected = theta0 - config.lr * g1.cwiseSign();
    results.push_back(compare("reference/optimizers/adam_first_step_sign", theta, expected,
                              16.0 * kUnitRoundoff,
                              size + "; lr 1e-2, betas (0.8, 0.95), eps 0: Δθ = -lr·sign(g)"));
  }

  // Two steps of Adam (L2) and AdamW (decoupled), element by element from the scalar recurrences.
  for (const bool decoupled : {false, true}) {
    const AdamConfig config{1e-2, 0.9, 0.99, 1e-8, 0.05};
    AdamState state;
    Vector theta = theta0;
    (decoupled ? adamw_step : adam_step)(theta, g1, state, config);
    (decoupled ? adamw_step : adam_step)(theta, g2, state, config);
    Vector expected(n);
    for (Index i = 0; i < n; ++i) {
      double th = theta0[i], m = 0.0, v = 0.0;
      for (int t = 1; t <= 2; ++t) {
        double g = (t == 1 ? g1 : g2)[i];
        if (decoupled) {
          th -= config.lr * config.weight_decay * th;
        } else {
          g += config.weight_decay * th;
        }
        m = config.beta1 * m + (1.0 - config.beta1) * g;
        v = config.beta2 * v + (1.0 - config.beta2) * g * g;
        const double m_hat = m / (1.0 - std::pow(config.beta1, t));
        const double v_hat = v / (1.0 - std::pow(config.beta2, t));
        th -= config.lr * m_hat / (std::sqrt(v_hat) + config.eps);
      }
      expected[i] = th;
    }
    results.push_back(compare(
        decoupled ? "reference/optimizers/adamw_two_steps" : "reference/optimizers/adam_two_steps", theta,
        expected, 64.0 * kUnitRoundoff, size + "; lr 1e-2, betas (0.9, 0.99), weight_decay 0.05"));
  }

  // SGD with momentum, by hand: θ0 = (1, -2), g1 = (0.5, 0), g2 = (-0.25, 1), lr 0.1, μ 0.9, wd 0.01.
  //  dampening 0.1:  step 1  g = (0.51, -0.02), buf = g, θ1 = (0.949, -1.998)
  //                  step 2  g = (-0.24051, 0.98002), buf = 0.9·buf + 0.9·g = (0.242541, 0.864018),
  //                          θ2 = (0.9247459, -2.0844018)
  //  nesterov:       step 1  buf = (0.51, -0.02), g + 0.9·buf = (0.969, -0.038), θ1 = (0.9031, -1.9962)
  //                  step 2  g = (-0.240969, 0.980038), buf = (0.218031, 0.962038),
  //                          g + 0.9·buf = (-0.0447411, 1.8458722), θ2 = (0.90757411, -2.18078722)
  for (const bool nesterov : {false, true}) {
    const SgdConfig config{0.1, 0.9, nesterov ? 0.0 : 0.1, 0.01, nesterov};
    SgdState state;
    Vector theta{{1.0, -2.0}};
    sgd_step(theta, Vector{{0.5, 0.0}}, state, config);
    sgd_step(theta, Vector{{-0.25, 1.0}}, state, config);
    const Vector expected = nesterov ? Vector{{0.90757411, -2.18078722}} : Vector{{0.9247459, -2.0844018}};
    results.push_back(compare(nesterov ? "reference/optimizers/sgd_nesterov_two_steps"
                                       : "reference/optimizers/sgd_momentum_two_steps",
                              theta, expected, 32.0 * kUnitRoundoff,
                              "hand-computed, lr 0.1, momentum 0.9, weight_decay 0.01"));
  }
  return results;
}

// ---------------------------------------------------------------------------------------------
// The checker itself: it passes a derivative known in closed form and fails wrong backwards.

std::vector<CheckResult> gradcheck_checks(std::uint64_t seed) {
  Random rng(seed);
  std::vector<CheckResult> results;

  // f(x) = exp(x) ⊙ sin(x), f' = exp(x) ⊙ (sin x + cos x).
  const Index rows = rng.pick({1, 3, 7});
  const Index cols = rng.pick({1, 3, 13});
  Matrix x = rng.normal(rows, cols);
  GradcheckProblem known;
  known.name = "reference/gradcheck/known_derivative";
  known.description = "f = exp(x)·sin(x), " + std::to_string(x.rows()) + "x" + std::to_string(x.cols());
  known.inputs = {{"x", flat_span(x)}};
  known.forward = [&] { return flatten(Matrix(x.array().exp() * x.array().sin())); };
  known.backward = [&](const std::vector<double>& w) -> std::vector<std::vector<double>> {
    const Matrix df = x.array().exp() * (x.array().sin() + x.array().cos());
    return {flatten(Matrix(as_matrix(w, x.rows(), x.cols()).cwiseProduct(df)))};
  };
  results.push_back(gradcheck(known, seed));

  // Negative tests on LayerNorm: the checker must report passed = false for
  //  (a) one gradient element off by 1e-4·(1 + |g|), 100x the tolerance;
  //  (b) the backward without the x̂·mean(g ⊙ x̂) term (a plausible derivation mistake).
  LayerNormCase c(rng);

  GradcheckProblem perturbed = c.problem("perturbed");
  const Index target = rng.integer(0, static_cast<std::int32_t>(c.x.size()) - 1);
  perturbed.backward = [&c, target](const std::vector<double>& w) {
    std::vector<std::vector<double>> grads = c.grads(w);
    double& g = grads[0][static_cast<std::size_t>(target)];
    g += 1e-4 * (1.0 + std::abs(g));
    return grads;
  };
  const CheckResult caught_perturbed = gradcheck(perturbed, seed);
  results.push_back(verdict("reference/gradcheck/detects_perturbed_gradient", !caught_perturbed.passed,
                            c.description() + "; inner check: " + caught_perturbed.detail));

  GradcheckProblem missing = c.problem("missing_term");
  missing.backward = [&c](const std::vector<double>& w) {
    std::vector<std::vector<double>> grads = c.grads(w);
    const LayerNormForward fwd = layernorm_forward(c.x, c.gamma, c.beta, c.eps);
    const Matrix g = as_matrix(w, c.rows, c.hidden).array().rowwise() * c.gamma.transpose().array();
    const Matrix wrong_dx = (g.colwise() - Vector(g.rowwise().mean())).array().colwise() * fwd.rstd.array();
    grads[0] = flatten(wrong_dx);
    return grads;
  };
  const CheckResult caught_missing = gradcheck(missing, seed);
  results.push_back(verdict("reference/gradcheck/detects_missing_term", !caught_missing.passed,
                            c.description() + "; inner check: " + caught_missing.detail));
  return results;
}

constexpr std::array<ReferenceCheckGroup, 11> kGroups{{
    {"layernorm", &layernorm_checks},
    {"softmax", &softmax_checks},
    {"dropout", &dropout_checks},
    {"bias_act_dropout", &bias_act_dropout_checks},
    {"bias_dropout_residual", &bias_dropout_residual_checks},
    {"embedding", &embedding_checks},
    {"cross_entropy", &cross_entropy_checks},
    {"attention", &attention_checks},
    {"transformer_layer", &transformer_layer_checks},
    {"optimizers", &optimizer_checks},
    {"gradcheck", &gradcheck_checks},
}};

}  // namespace

std::span<const ReferenceCheckGroup> reference_check_groups() {
  return kGroups;
}

std::vector<CheckResult> run_reference_checks(std::uint64_t seed) {
  std::vector<CheckResult> all;
  for (const ReferenceCheckGroup& group : kGroups) {
    std::vector<CheckResult> results = group.run(seed);
    all.insert(all.end(), std::make_move_iterator(results.begin()), std::make_move_iterator(results.end()));
  }
  return all;
}

}  // namespace seqbench::ref
