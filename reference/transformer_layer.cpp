#include "reference/transformer_layer.h"

#include <cmath>

#include "core/error.h"
#include "reference/dropout.h"

namespace seqbench::ref {

void validate_transformer_layer_config(const TransformerLayerConfig& config, Index hidden) {
  SEQBENCH_REQUIRE(config.heads >= 1, "transformer layer: heads " << config.heads << " < 1");
  SEQBENCH_REQUIRE(
      hidden >= 1 && hidden % config.heads == 0,
      "transformer layer: hidden " << hidden << " is not a positive multiple of heads " << config.heads);
  SEQBENCH_REQUIRE(
      config.layer_norm_eps > 0.0 && std::isfinite(config.layer_norm_eps),
      "transformer layer: layer_norm_eps " << config.layer_norm_eps << " is not positive and finite");
  for (const auto& [name, p] : {std::pair{"attn_dropout", config.attn_dropout},
                                std::pair{"activation_dropout", config.activation_dropout},
                                std::pair{"hidden_dropout", config.hidden_dropout}}) {
    SEQBENCH_REQUIRE(p >= 0.0 && p <= 1.0, "transformer layer: " << name << " " << p << " is outside [0, 1]");
  }
}

namespace {

// ---------------------------------------------------------------------------------------------
// The residual wrapper both sub-layers share: pre-LN out = x + s(LN(x)), post-LN out = LN(x + s(x)).
// Its backward in two halves around the sub-layer's own backward.

// The gradient at the residual sum x + s (post-LN: through the LayerNorm, whose parameter
// gradients go to dnorm; pre-LN: dout itself).
Matrix residual_sum_grad(const Matrix& dout, const LayerNormParams& norm, const Matrix& norm_input,
                         const LayerNormForward& norm_fwd, bool pre_layer_norm, LayerNormParams& dnorm) {
  if (pre_layer_norm) return dout;
  const LayerNormGrads ln = layernorm_backward(dout, norm_input, norm.gamma, norm_fwd.mean, norm_fwd.rstd);
  dnorm = {ln.dgamma, ln.dbeta};
  return ln.dx;
}

// dx: the residual path's d_sum plus the sub-layer input's gradient d_input (pre-LN: through the
// LayerNorm of x, whose parameter gradients go to dnorm).
Matrix wrapper_input_grad(const Matrix& d_sum, const Matrix& d_input, const Matrix& x,
                          const LayerNormParams& norm, const LayerNormForward& norm_fwd, bool pre_layer_norm,
                          LayerNormParams& dnorm) {
  if (!pre_layer_norm) return d_sum + d_input;
  const LayerNormGrads ln = layernorm_backward(d_input, x, norm.gamma, norm_fwd.mean, norm_fwd.rstd);
  dnorm = {ln.dgamma, ln.dbeta};
  return d_sum + ln.dx;
}

// ---------------------------------------------------------------------------------------------
// One attention sub-layer: pre-LN  out = x + dropout_h(mha(LN(x), kv))
//                          post-LN out = LN(x + dropout_h(mha(x, kv)))
// kv is the normalized (pre-LN) or raw (post-LN) x itself for self-attention, the encoder output
// for cross-attention.

struct AttentionBlockForward {
  Matrix query;     // the attention's query input: LN(x) (pre) or x (post)
  Matrix residual;  // pre: x; post: z = x + dropout_h(attention), the LayerNorm's input
  LayerNormForward norm;
  MhaForward mha;
  Matrix out;
};

MhaConfig mha_config(const TransformerLayerConfig& config, const AttentionMask& mask) {
  MhaConfig c;
  c.mask = mask;
  c.dropout_p = config.attn_dropout;
  return c;
}

AttentionBlockForward attention_block_forward(const Matrix& x, const Matrix* encoder_out,
                                              const MhaShape& shape, const AttentionBlockParams& params,
                                              const TransformerLayerConfig& config, const AttentionMask& mask,
                                              const AttentionBlockMasks& masks) {
  AttentionBlockForward f;
  const MhaConfig mha = mha_config(config, mask);
  if (config.pre_layer_norm) {
    f.norm = layernorm_forward(x, params.norm.gamma, params.norm.beta, config.layer_norm_eps);
    f.query = f.norm.y;
    f.mha = mha_forward(f.query, encoder_out != nullptr ? *encoder_out : f.query, params.attention, shape,
                        mha, &masks.probs);
    f.residual = x;
    f.out = x + dropout_forward(f.mha.out, masks.hidden, config.hidden_dropout);
  } else {
    f.query = x;
    f.mha =
        mha_forward(x, encoder_out != nullptr ? *encoder_out : x, params.attention, shape, mha, &masks.probs);
    f.residual = x + dropout_forward(f.mha.out, masks.hidden, config.hidden_dropout);
    f.norm = layernorm_forward(f.residual, params.norm.gamma, params.norm.beta, config.layer_norm_eps);
    f.out = f.norm.y;
  }
  return f;
}

struct AttentionBlockGrads {
  Matrix dx;
  Matrix d_encoder_out;  // cross-attention only
  AttentionBlockParams dparams;
};

AttentionBlockGrads attention_block_backward(const Matrix& dout, const Matrix& x, const Matrix* encoder_out,
                                             const MhaShape& shape, const AttentionBlockParams& params,
                                             const TransformerLayerConfig& config, const AttentionMask& mask,
                                             const AttentionBlockMasks& masks,
                                             const AttentionBlockForward& f) {
  AttentionBlockGrads g;
  const MhaConfig mha = mha_config(config, mask);
  const Matrix& kv = encoder_out != nullptr ? *encoder_out : f.query;
  const Matrix d_sublayer =
      residual_sum_grad(dout, params.norm, f.residual, f.norm, config.pre_layer_norm, g.dparams.norm);
  const Matrix d_attn_out = dropout_backward(d_sublayer, masks.hidden, config.hidden_dropout);
  MhaGrads m = mha_backward(d_attn_out, f.query, kv, params.attention, shape, mha, f.mha, &masks.probs);
  g.dparams.attention = std::move(m.d_params);
  Matrix d_query = std::move(m.d_query);
  if (encoder_out != nullptr) {
    g.d_encoder_out = std::move(m.d_key_value);
  } else {
    d_query += m.d_key_value;  // self-attention: the query and key/value paths share their input
  }
  g.dx =
      wrapper_input_grad(d_sublayer, d_query, x, params.norm, f.norm, config.pre_layer_norm, g.dparams.norm);
  return g;
}

// ---------------------------------------------------------------------------------------------
// The FFN sub-layer: pre-LN  out = x + dropout_h(fc2(dropout_a(act(fc1(LN(x))))))
//                    post-LN out = LN(x + dropout_h(fc2(dropout_a(act(fc1(x))))))
// fc1's bias is applied by bias_act_dropout (as the fused GPU epilogue does), fc2's by linear.

struct FfnForward {
  Matrix input;     // LN(x) (pre) or x (post)
  Matrix h;         // input · fc1ᵀ, before the bias
  Matrix a;         // dropout_a(act(h + b1))
  Matrix residual;  // pre: x; post: the LayerNorm's input
  LayerNormForward norm;
  Matrix out;
};

FfnForward ffn_forward(const Matrix& x, const FfnParams& params, const TransformerLayerConfig& config,
                       const FfnMasks& masks) {
  FfnForward f;
  if (config.pre_layer_norm) {
    f.norm = layernorm_forward(x, params.norm.gamma, params.norm.beta, config.layer_norm_eps);
    f.input = f.norm.y;
  } else {
    f.input = x;
  }
  f.h = f.input * params.fc1.weight.transpose();
  f.a = bias_act_dropout_forward(f.h, params.fc1.bias, masks.activation, config.activation_dropout,
                                 config.activation);
  const Matrix o = linear_forward(f.a, params.fc2);
  if (config.pre_layer_norm) {
    f.residual = x;
    f.out = x + dropout_forward(o, masks.hidden, config.hidden_dropout);
  } else {
    f.residual = x + dropout_forward(o, masks.hidden, config.hidden_dropout);
    f.norm = layernorm_forward(f.residual, params.norm.gamma, params.norm.beta, config.layer_norm_eps);
    f.out = f.norm.y;
  }
  return f;
}

struct FfnGrads {
  Matrix dx;
  FfnParams dparams;
};

FfnGrads ffn_backward(const Matrix& dout, const Matrix& x, const FfnParams& params,
                      const TransformerLayerConfig& config, const FfnMasks& masks, const FfnForward& f) {
  FfnGrads g;
  const Matrix d_sublayer =
      residual_sum_grad(dout, params.norm, f.residual, f.norm, config.pre_layer_norm, g.dparams.norm);
  const Matrix d_o = dropout_backward(d_sublayer, masks.hidden, config.hidden_dropout);
  LinearGrads fc2 = linear_backward(d_o, f.a, params.fc2);
  g.dparams.fc2 = std::move(fc2.dlayer);
  const BiasActDropoutGrads act = bias_act_dropout_backward(fc2.dx, f.h, params.fc1.bias, masks.activation,
                                                            config.activation_dropout, config.activation);
  g.dparams.fc1.weight = act.dx.transpose() * f.input;
  g.dparams.fc1.bias = act.dbias;
  const Matrix d_input = act.dx * params.fc1.weight;
  g.dx =
      wrapper_input_grad(d_sublayer, d_input, x, params.norm, f.norm, config.pre_layer_norm, g.dparams.norm);
  return g;
}

// ---------------------------------------------------------------------------------------------

Index sequence_len(const Matrix& x, Index batch, const char* what) {
  SEQBENCH_REQUIRE(batch >= 1 && x.rows() % batch == 0,
                   what << ": " << x.rows() << " token rows are not a multiple of batch " << batch);
  return x.rows() / batch;
}

AttentionMask attention_mask(const std::vector<Index>& lengths, bool causal) {
  AttentionMask mask;
  mask.key_lengths = lengths;
  mask.causal = causal;
  return mask;
}

struct EncoderPass {
  MhaShape shape;
  AttentionMask mask;
  AttentionBlockForward attention;
  FfnForward ffn;
};

EncoderPass encoder_pass(const Matrix& x, Index batch, const EncoderLayerParams& params,
                         const TransformerLayerConfig& config, const SequenceMask& mask,
                         const EncoderLayerMasks& masks) {
  validate_transformer_layer_config(config, x.cols());
  const Index len = sequence_len(x, batch, "encoder layer");
  EncoderPass p;
  p.shape = {batch, len, len, config.heads};
  p.mask = attention_mask(mask.lengths, mask.causal);
  p.attention = attention_block_forward(x, nullptr, p.shape, params.self_attention, config, p.mask,
                                        masks.self_attention);
  p.ffn = ffn_forward(p.attention.out, params.ffn, config, masks.ffn);
  return p;
}

struct DecoderPass {
  MhaShape self_shape, cross_shape;
  AttentionMask self_mask, cross_mask;
  AttentionBlockForward self_attention, cross_attention;
  FfnForward ffn;
};

DecoderPass decoder_pass(const Matrix& x, const Matrix& encoder_out, Index batch,
                         const DecoderLayerParams& params, const TransformerLayerConfig& config,
                         const std::vector<Index>& target_lengths, const std::vector<Index>& source_lengths,
                         const DecoderLayerMasks& masks) {
  validate_transformer_layer_config(config, x.cols());
  SEQBENCH_REQUIRE(encoder_out.cols() == x.cols(), "decoder layer: encoder output has " << encoder_out.cols()
                                                                                        << " columns, x has "
                                                                                        << x.cols());
  const Index len = sequence_len(x, batch, "decoder layer");
  const Index source_len = sequence_len(encoder_out, batch, "decoder layer (encoder output)");
  DecoderPass p;
  p.self_shape = {batch, len, len, config.heads};
  p.cross_shape = {batch, len, source_len, config.heads};
  p.self_mask = attention_mask(target_lengths, true);
  p.cross_mask = attention_mask(source_lengths, false);
  p.self_attention = attention_block_forward(x, nullptr, p.self_shape, params.self_attention, config,
                                             p.self_mask, masks.self_attention);
  p.cross_attention =
      attention_block_forward(p.self_attention.out, &encoder_out, p.cross_shape, params.cross_attention,
                              config, p.cross_mask, masks.cross_attention);
  p.ffn = ffn_forward(p.cross_attention.out, params.ffn, config, masks.ffn);
  return p;
}

AttentionBlockMasks attention_block_masks(Index q_rows, Index probs_rows, Index k_len, Index hidden,
                                          const TransformerLayerConfig& config, std::uint64_t seed,
                                          std::uint64_t& offset) {
  AttentionBlockMasks m;
  m.probs = make_dropout_mask(probs_rows, k_len, config.attn_dropout, seed, offset++);
  m.hidden = make_dropout_mask(q_rows, hidden, config.hidden_dropout, seed, offset++);
  return m;
}

FfnMasks ffn_masks(Index rows, Index hidden, Index ffn, const TransformerLayerConfig& config,
                   std::uint64_t seed, std::uint64_t& offset) {
  FfnMasks m;
  m.activation = make_dropout_mask(rows, ffn, config.activation_dropout, seed, offset++);
  m.hidden = make_dropout_mask(rows, hidden, config.hidden_dropout, seed, offset++);
  return m;
}

}  // namespace

EncoderLayerForward encoder_layer_forward(const Matrix& x, Index batch, const EncoderLayerParams& params,
                                          const TransformerLayerConfig& config, const SequenceMask& mask,
                                          const EncoderLayerMasks& masks) {
  EncoderPass p = encoder_pass(x, batch, params, config, mask, masks);
  return {std::move(p.attention.out), std::move(p.ffn.out)};
}

EncoderLayerGrads encoder_layer_backward(const Matrix& dy, const Matrix& x, Index batch,
                                         const EncoderLayerParams& params,
                                         const TransformerLayerConfig& config, const SequenceMask& mask,
                                         const EncoderLayerMasks& masks) {
  const EncoderPass p = encoder_pass(x, batch, params, config, mask, masks);
  FfnGrads ffn = ffn_backward(dy, p.attention.out, params.ffn, config, masks.ffn, p.ffn);
  AttentionBlockGrads attn = attention_block_backward(ffn.dx, x, nullptr, p.shape, params.self_attention,
                                                      config, p.mask, masks.self_attention, p.attention);
  EncoderLayerGrads g;
  g.dx = std::move(attn.dx);
  g.dparams.self_attention = std::move(attn.dparams);
  g.dparams.ffn = std::move(ffn.dparams);
  return g;
}

DecoderLayerForward decoder_layer_forward(const Matrix& x, const Matrix& encoder_out, Index batch,
                                          const DecoderLayerParams& params,
                                          const TransformerLayerConfig& config,
                                          const std::vector<Index>& target_lengths,
                                          const std::vector<Index>& source_lengths,
                                          const DecoderLayerMasks& masks) {
  DecoderPass p = decoder_pass(x, encoder_out, batch, params, config, target_lengths, source_lengths, masks);
  return {std::move(p.self_attention.out), std::move(p.cross_attention.out), std::move(p.ffn.out)};
}

DecoderLayerGrads decoder_layer_backward(const Matrix& dy, const Matrix& x, const Matrix& encoder_out,
                                         Index batch, const DecoderLayerParams& params,
                                         const TransformerLayerConfig& config,
                                         const std::vector<Index>& target_lengths,
                                         const std::vector<Index>& source_lengths,
                                         const DecoderLayerMasks& masks) {
  const DecoderPass p =
      decoder_pass(x, encoder_out, batch, params, config, target_lengths, source_lengths, masks);
  FfnGrads ffn = ffn_backward(dy, p.cross_attention.out, params.ffn, config, masks.ffn, p.ffn);
  AttentionBlockGrads cross = attention_block_backward(
      ffn.dx, p.self_attention.out, &encoder_out, p.cross_shape, params.cross_attention, config, p.cross_mask,
      masks.cross_attention, p.cross_attention);
  AttentionBlockGrads self =
      attention_block_backward(cross.dx, x, nullptr, p.self_shape, params.self_attention, config, p.self_mask,
                               masks.self_attention, p.self_attention);
  DecoderLayerGrads g;
  g.dx = std::move(self.dx);
  g.d_encoder_out = std::move(cross.d_encoder_out);
  g.dparams.self_attention = std::move(self.dparams);
  g.dparams.cross_attention = std::move(cross.dparams);
  g.dparams.ffn = std::move(ffn.dparams);
  return g;
}

EncoderLayerMasks encoder_layer_dropout_masks(Index batch, Index len, Index hidden, Index ffn,
                                              const TransformerLayerConfig& config, std::uint64_t seed) {
  std::uint64_t offset = 0;
  EncoderLayerMasks m;
  m.self_attention =
      attention_block_masks(batch * len, batch * config.heads * len, len, hidden, config, seed, offset);
  m.ffn = ffn_masks(batch * len, hidden, ffn, config, seed, offset);
  return m;
}

DecoderLayerMasks decoder_layer_dropout_masks(Index batch, Index len, Index source_len, Index hidden,
                                              Index ffn, const TransformerLayerConfig& config,
                                              std::uint64_t seed) {
  std::uint64_t offset = 0;
  DecoderLayerMasks m;
  m.self_attention =
      attention_block_masks(batch * len, batch * config.heads * len, len, hidden, config, seed, offset);
  m.cross_attention = attention_block_masks(batch * len, batch * config.heads * len, source_len, hidden,
                                            config, seed, offset);
  m.ffn = ffn_masks(batch * len, hidden, ffn, config, seed, offset);
  return m;
}

}  // namespace seqbench::ref
