// The self-checks of reference/transformer_layer.h: a finite-difference gradient check of the whole
// encoder and decoder layer (every parameter and input), in both LayerNorm placements and with
// padding, causal masks and dropout drawn from the seed; a closed-form identity; and a negative test
// proving the check catches a backward that forgets the residual path.
#include <cmath>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "reference/gradcheck.h"
#include "reference/transformer_layer.h"

namespace seqbench::ref {

namespace {

class Draw {
 public:
  explicit Draw(std::uint64_t seed) : engine_(seed) {}
  Index pick(std::initializer_list<Index> values) {
    return *(values.begin() + std::uniform_int_distribution<std::size_t>(0, values.size() - 1)(engine_));
  }
  bool coin() { return std::bernoulli_distribution(0.5)(engine_); }
  Matrix normal(Index rows, Index cols, double stddev) {
    std::normal_distribution<double> d(0.0, stddev);
    Matrix m(rows, cols);
    for (Index i = 0; i < m.size(); ++i) m.data()[i] = d(engine_);
    return m;
  }
  Vector normal_vector(Index n, double stddev) { return normal(n, 1, stddev); }
  Matrix uniform(Index rows, Index cols, double lo, double hi) {
    std::uniform_real_distribution<double> d(lo, hi);
    Matrix m(rows, cols);
    for (Index i = 0; i < m.size(); ++i) m.data()[i] = d(engine_);
    return m;
  }
  std::vector<Index> lengths(Index batch, Index len) {  // some rows padded; every row keeps >= 1 token
    std::vector<Index> out(static_cast<std::size_t>(batch));
    for (auto& l : out)
      l = coin() ? len : 1 + static_cast<Index>(engine_() % static_cast<std::uint64_t>(len));
    return out;
  }
  std::uint64_t seed() { return engine_(); }

 private:
  std::mt19937_64 engine_;
};

LayerNormParams draw_norm(Draw& d, Index hidden) {
  return {(Vector::Ones(hidden) + d.normal_vector(hidden, 0.3)).eval(), d.normal_vector(hidden, 0.3)};
}

AttentionBlockParams draw_attention(Draw& d, Index hidden) {
  AttentionBlockParams p;
  p.norm = draw_norm(d, hidden);
  const double init = 1.0 / std::sqrt(static_cast<double>(hidden));
  for (Linear* proj :
       {&p.attention.q_proj, &p.attention.k_proj, &p.attention.v_proj, &p.attention.out_proj}) {
    proj->weight = d.normal(hidden, hidden, init);
    proj->bias = d.normal_vector(hidden, 0.1);
  }
  return p;
}

// For ReLU the FFN's pre-activations must stay away from the kink (gradcheck.h: a finite difference
// across it measures a jump, not a derivative): fc1's bias is drawn with |b| in [2, 3] and its
// weights in ±0.05, so |x·W1ᵀ| <= 0.05·H·max|LN(x)| stays below 2 for the sizes used here.
FfnParams draw_ffn(Draw& d, Index hidden, Index ffn, Activation act) {
  FfnParams p;
  p.norm = draw_norm(d, hidden);
  if (act == Activation::relu) {
    p.fc1.weight = d.uniform(ffn, hidden, -0.05, 0.05);
    p.fc1.bias = d.uniform(ffn, 1, 2.0, 3.0);
    for (Index i = 0; i < ffn; ++i) p.fc1.bias(i) *= d.coin() ? 1.0 : -1.0;
  } else {
    p.fc1.weight = d.normal(ffn, hidden, 1.0 / std::sqrt(static_cast<double>(hidden)));
    p.fc1.bias = d.normal_vector(ffn, 0.1);
  }
  p.fc2.weight = d.normal(hidden, ffn, 1.0 / std::sqrt(static_cast<double>(ffn)));
  p.fc2.bias = d.normal_vector(hidden, 0.1);
  return p;
}

TransformerLayerConfig draw_config(Draw& d, Index heads, Activation act) {
  TransformerLayerConfig c;
  c.heads = heads;
  c.pre_layer_norm = d.coin();
  c.activation = act;
  c.attn_dropout = d.pick({0, 2}) / 10.0;
  c.activation_dropout = d.pick({0, 2}) / 10.0;
  c.hidden_dropout = d.pick({0, 2}) / 10.0;
  return c;
}

std::string describe_config(const TransformerLayerConfig& c, Index batch, Index len, Index hidden,
                            Index ffn) {
  std::ostringstream os;
  os << "B=" << batch << " L=" << len << " H=" << hidden << " ffn=" << ffn << " heads=" << c.heads
     << (c.pre_layer_norm ? " pre-LN" : " post-LN") << " act=" << activation_name(c.activation)
     << " p_attn=" << c.attn_dropout << " p_act=" << c.activation_dropout << " p_hidden=" << c.hidden_dropout;
  return os.str();
}

void add_norm(GradcheckProblem& p, const std::string& prefix, LayerNormParams& n) {
  p.inputs.push_back({prefix + ".gamma", flat_span(n.gamma)});
  p.inputs.push_back({prefix + ".beta", flat_span(n.beta)});
}
void add_linear(GradcheckProblem& p, const std::string& prefix, Linear& l) {
  p.inputs.push_back({prefix + ".weight", flat_span(l.weight)});
  p.inputs.push_back({prefix + ".bias", flat_span(l.bias)});
}
void add_attention(GradcheckProblem& p, const std::string& prefix, AttentionBlockParams& a) {
  add_norm(p, prefix + ".norm", a.norm);
  add_linear(p, prefix + ".q_proj", a.attention.q_proj);
  add_linear(p, prefix + ".k_proj", a.attention.k_proj);
  add_linear(p, prefix + ".v_proj", a.attention.v_proj);
  add_linear(p, prefix + ".out_proj", a.attention.out_proj);
}
void add_ffn(GradcheckProblem& p, const std::string& prefix, FfnParams& f) {
  add_norm(p, prefix + ".norm", f.norm);
  add_linear(p, prefix + ".fc1", f.fc1);
  add_linear(p, prefix + ".fc2", f.fc2);
}

// Gradients in the order add_* pushed the inputs.
void push_norm(std::vector<std::vector<double>>& g, const LayerNormParams& n) {
  g.push_back(flatten(n.gamma));
  g.push_back(flatten(n.beta));
}
void push_linear(std::vector<std::vector<double>>& g, const Linear& l) {
  g.push_back(flatten(l.weight));
  g.push_back(flatten(l.bias));
}
void push_attention(std::vector<std::vector<double>>& g, const AttentionBlockParams& a) {
  push_norm(g, a.norm);
  for (const Linear* l :
       {&a.attention.q_proj, &a.attention.k_proj, &a.attention.v_proj, &a.attention.out_proj})
    push_linear(g, *l);
}
void push_ffn(std::vector<std::vector<double>>& g, const FfnParams& f) {
  push_norm(g, f.norm);
  push_linear(g, f.fc1);
  push_linear(g, f.fc2);
}

struct EncoderCase {
  Index batch, len, hidden, ffn;
  TransformerLayerConfig config;
  SequenceMask mask;
  EncoderLayerParams params;
  EncoderLayerMasks masks;
  Matrix x;

  EncoderCase(Draw& d, Activation act)
      : batch(d.pick({1, 2})), len(d.pick({1, 3})), hidden(d.pick({4, 6})), ffn(d.pick({3, 5})) {
    config = draw_config(d, d.pick({1, 2}), act);
    mask.causal = d.coin();
    if (d.coin()) mask.lengths = d.lengths(batch, len);
    params.self_attention = draw_attention(d, hidden);
    params.ffn = draw_ffn(d, hidden, ffn, act);
    masks = encoder_layer_dropout_masks(batch, len, hidden, ffn, config, d.seed());
    x = d.normal(batch * len, hidden, 2.0);
  }

  std::string description() const {
    std::ostringstream os;
    os << describe_config(config, batch, len, hidden, ffn) << (mask.causal ? " causal" : "")
       << (mask.lengths.empty() ? "" : " padded");
    return os.str();
  }

  GradcheckProblem problem(std::string name) {
    GradcheckProblem p;
    p.name = std::move(name);
    p.description = description();
    p.inputs = {{"x", flat_span(x)}};
    add_attention(p, "self_attention", params.self_attention);
    add_ffn(p, "ffn", params.ffn);
    p.forward = [this] { return flatten(encoder_layer_forward(x, batch, params, config, mask, masks).y); };
    p.backward = [this](const std::vector<double>& w) {
      const Matrix dy = Eigen::Map<const Matrix>(w.data(), x.rows(), x.cols());
      const EncoderLayerGrads g = encoder_layer_backward(dy, x, batch, params, config, mask, masks);
      std::vector<std::vector<double>> grads{flatten(g.dx)};
      push_attention(grads, g.dparams.self_attention);
      push_ffn(grads, g.dparams.ffn);
      return grads;
    };
    return p;
  }
};

struct DecoderCase {
  Index batch, len, source_len, hidden, ffn;
  TransformerLayerConfig config;
  std::vector<Index> target_lengths, source_lengths;
  DecoderLayerParams params;
  DecoderLayerMasks masks;
  Matrix x, encoder_out;

  DecoderCase(Draw& d, Activation act)
      : batch(d.pick({1, 2})),
        len(d.pick({1, 3})),
        source_len(d.pick({2, 3})),
        hidden(d.pick({4, 6})),
        ffn(d.pick({3, 5})) {
    config = draw_config(d, d.pick({1, 2}), act);
    if (d.coin()) target_lengths = d.lengths(batch, len);
    if (d.coin()) source_lengths = d.lengths(batch, source_len);
    params.self_attention = draw_attention(d, hidden);
    params.cross_attention = draw_attention(d, hidden);
    params.ffn = draw_ffn(d, hidden, ffn, act);
    masks = decoder_layer_dropout_masks(batch, len, source_len, hidden, ffn, config, d.seed());
    x = d.normal(batch * len, hidden, 2.0);
    encoder_out = d.normal(batch * source_len, hidden, 1.0);
  }

  std::string description() const {
    std::ostringstream os;
    os << describe_config(config, batch, len, hidden, ffn) << " S=" << source_len
       << (target_lengths.empty() ? "" : " target padded")
       << (source_lengths.empty() ? "" : " source padded");
    return os.str();
  }

  GradcheckProblem problem(std::string name) {
    GradcheckProblem p;
    p.name = std::move(name);
    p.description = description();
    p.inputs = {{"x", flat_span(x)}, {"encoder_out", flat_span(encoder_out)}};
    add_attention(p, "self_attention", params.self_attention);
    add_attention(p, "cross_attention", params.cross_attention);
    add_ffn(p, "ffn", params.ffn);
    p.forward = [this] {
      return flatten(
          decoder_layer_forward(x, encoder_out, batch, params, config, target_lengths, source_lengths, masks)
              .y);
    };
    p.backward = [this](const std::vector<double>& w) {
      const Matrix dy = Eigen::Map<const Matrix>(w.data(), x.rows(), x.cols());
      const DecoderLayerGrads g = decoder_layer_backward(dy, x, encoder_out, batch, params, config,
                                                         target_lengths, source_lengths, masks);
      std::vector<std::vector<double>> grads{flatten(g.dx), flatten(g.d_encoder_out)};
      push_attention(grads, g.dparams.self_attention);
      push_attention(grads, g.dparams.cross_attention);
      push_ffn(grads, g.dparams.ffn);
      return grads;
    };
    return p;
  }
};

CheckResult verdict(std::string name, bool passed, std::string detail) {
  CheckResult r;
  r.name = std::move(name);
  r.passed = passed;
  r.detail = passed ? std::move(detail) : detail + "; FAILED";
  return r;
}

}  // namespace

std::vector<CheckResult> transformer_layer_checks(std::uint64_t seed) {
  Draw d(seed);
  std::vector<CheckResult> results;
  const Activation acts[] = {Activation::relu, Activation::gelu_erf, Activation::gelu_tanh};
  {
    EncoderCase c(d, acts[seed % 3]);
    results.push_back(gradcheck(c.problem("reference/transformer_layer/gradcheck_encoder"), seed));

    // A backward that forgets the attention sub-layer's residual path must fail the same check.
    GradcheckProblem broken = c.problem("missing_residual");
    broken.backward = [&c](const std::vector<double>& w) {
      const Matrix dy = Eigen::Map<const Matrix>(w.data(), c.x.rows(), c.x.cols());
      EncoderLayerGrads g = encoder_layer_backward(dy, c.x, c.batch, c.params, c.config, c.mask, c.masks);
      // dx without the identity path's dy contribution (exactly dy in pre-LN with no FFN effect;
      // any large error suffices for the negative test).
      g.dx -= dy;
      std::vector<std::vector<double>> grads{flatten(g.dx)};
      push_attention(grads, g.dparams.self_attention);
      push_ffn(grads, g.dparams.ffn);
      return grads;
    };
    const CheckResult caught = gradcheck(broken, seed);
    results.push_back(verdict("reference/transformer_layer/gradcheck_detects_missing_residual",
                              !caught.passed, c.description() + "; inner check: " + caught.detail));

    // Pre-LN with zero output projections and no dropout is the identity: both sub-layers add
    // exactly zero to the residual stream.
    EncoderCase z(d, Activation::gelu_erf);
    z.config.pre_layer_norm = true;
    z.config.attn_dropout = z.config.activation_dropout = z.config.hidden_dropout = 0.0;
    z.masks = encoder_layer_dropout_masks(z.batch, z.len, z.hidden, z.ffn, z.config, 1);
    for (Linear* l : {&z.params.self_attention.attention.out_proj, &z.params.ffn.fc2}) {
      l->weight.setZero();
      l->bias.setZero();
    }
    const Matrix y = encoder_layer_forward(z.x, z.batch, z.params, z.config, z.mask, z.masks).y;
    results.push_back(verdict("reference/transformer_layer/pre_ln_zero_sublayers_is_identity", y == z.x,
                              z.description() + "; zero out_proj and fc2: y must equal x exactly"));
  }
  {
    DecoderCase c(d, acts[(seed + 1) % 3]);
    results.push_back(gradcheck(c.problem("reference/transformer_layer/gradcheck_decoder"), seed));
  }
  return results;
}

}  // namespace seqbench::ref
