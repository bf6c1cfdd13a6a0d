#include "layers/layer_temporaries.h"

#include <algorithm>

#include "core/error.h"

namespace seqbench::layers {

namespace {

constexpr std::size_t kStatsBytesPerToken = 2 * sizeof(float);  // LayerNorm mean and rstd, fp32

std::vector<TensorId> with(std::vector<TensorId> ids, const std::optional<TensorId>& extra) {
  if (extra) ids.push_back(*extra);
  return ids;
}

}  // namespace

LayerDescriber::LayerDescriber(LifetimeRecorder& recorder, const LayerConfig& config, BatchShape shape,
                               TemporaryOptions options)
    : rec_(recorder), config_(config), options_(options), element_bytes_(dtype_size(config.dtype)) {
  config_.validate();
  config_.check_batch(shape.batch_size, shape.seq_len);
  B_ = shape.batch_size;
  L_ = shape.seq_len;
  T_ = shape.tokens();
  H_ = static_cast<std::size_t>(config_.hidden);
  F_ = static_cast<std::size_t>(config_.ffn);
  N_ = static_cast<std::size_t>(config_.heads);
}

TensorId LayerDescriber::act(const std::string& name, std::size_t elements) {
  return rec_.tensor(name, elements * element_bytes_);
}

std::optional<TensorId> LayerDescriber::mask(const std::string& name, double ratio, std::size_t elements) {
  if (!options_.store_dropout_masks || ratio <= 0.0) return std::nullopt;
  return rec_.tensor(name, elements);  // one byte per element, as LightSeq2's uint8 masks
}

TensorId LayerDescriber::stats(const std::string& name) {
  return rec_.tensor(name, T_ * kStatsBytesPerToken);
}

// ---------------------------------------------------------------------------------------------
// Self-attention.

SublayerSaved LayerDescriber::begin_sublayer(const std::string& prefix, TensorId input, TensorId output) {
  const std::string& p = prefix;
  SublayerSaved s;
  s.prefix = prefix;
  s.input = input;
  s.output = output;
  s.ln_stats = stats(p + "ln_stats");
  if (config_.pre_layer_norm) {
    s.ln_out = act(p + "ln_out", T_ * H_);
    rec_.op(p + "ln", {input}, {*s.ln_out, s.ln_stats});
    s.gemm_input = *s.ln_out;
  } else {
    s.gemm_input = input;
  }
  return s;
}

void LayerDescriber::attention_probs(SublayerSaved& s, std::size_t scores,
                                     const std::vector<TensorId>& gemm_inputs) {
  const std::string& p = s.prefix;
  s.probs = act(p + "probs", scores);
  rec_.op(p + "scores_gemm", gemm_inputs, {s.probs});
  rec_.op(p + "softmax", {s.probs}, {s.probs});  // in place: the backward needs only its output
  s.context_probs = s.probs;
  if (config_.attn_dropout > 0.0) {
    s.context_probs = act(p + "probs_dropped", scores);
    s.probs_mask = mask(p + "probs_mask", config_.attn_dropout, scores);
    rec_.op(p + "probs_dropout", {s.probs}, with({s.context_probs}, s.probs_mask));
  }
}

void LayerDescriber::attention_output(SublayerSaved& s, TensorId value_heads) {
  const std::string& p = s.prefix;
  const TensorId ctx_heads = act(p + "ctx_heads", T_ * H_);
  rec_.op(p + "context_gemm", {s.context_probs, value_heads}, {ctx_heads});
  s.ctx = act(p + "ctx", T_ * H_);
  rec_.op(p + "ctx_transform", {ctx_heads}, {s.ctx});
  const TensorId out_raw = act(p + "out_raw", T_ * H_);
  rec_.op(p + "out_gemm", {s.ctx}, {out_raw});
  s.hidden_mask = mask(p + "hidden_mask", config_.hidden_dropout, T_ * H_);
  if (config_.pre_layer_norm) {
    rec_.op(p + "bias_dropout_residual", {out_raw, s.input}, with({s.output}, s.hidden_mask));
  } else {
    const TensorId residual = act(p + "residual", T_ * H_);
    rec_.op(p + "bias_dropout_residual", {out_raw, s.input}, with({residual}, s.hidden_mask));
    // The backward works from the LN output and the saved statistics, so the residual sum dies here.
    rec_.op(p + "ln", {residual}, {s.output, s.ln_stats});
  }
}

SublayerSaved LayerDescriber::self_attention_forward(const std::string& prefix, TensorId input,
                                                     TensorId output) {
  SublayerSaved s = begin_sublayer(prefix, input, output);
  const std::string& p = prefix;
  const TensorId qkv_raw = act(p + "qkv_raw", 3 * T_ * H_);
  rec_.op(p + "qkv_gemm", {s.gemm_input}, {qkv_raw});
  s.q_heads = act(p + "qkv_heads", 3 * T_ * H_);  // [3,B,N,L,d]: Q, K and V per head
  rec_.op(p + "qkv_bias_transform", {qkv_raw}, {s.q_heads});
  const std::size_t scores = B_ * N_ * L_ * L_;
  attention_probs(s, scores, {s.q_heads});
  attention_output(s, s.q_heads);
  return s;
}

TensorId LayerDescriber::self_attention_core_backward(const std::string& p, TensorId d_out_raw, TensorId ctx,
                                                      TensorId context_probs, TensorId probs,
                                                      std::optional<TensorId> probs_mask, TensorId qkv_heads,
                                                      TensorId gemm_input) {
  const std::size_t scores = B_ * N_ * L_ * L_;
  const TensorId d_ctx = act(p + "d_ctx", T_ * H_);
  rec_.op(p + "out_gemm_bwd", {d_out_raw, ctx}, {d_ctx});  // dX, and dW from ctx
  const TensorId d_ctx_heads = act(p + "d_ctx_heads", T_ * H_);
  rec_.op(p + "ctx_transform_bwd", {d_ctx}, {d_ctx_heads});
  // dV = P_droppedᵀ·dC and dP = dC·Vᵀ: the two GEMMs of the context backward.
  const TensorId d_v = act(p + "d_v", T_ * H_);
  const TensorId d_probs = act(p + "d_probs", scores);
  rec_.op(p + "context_gemm_bwd", {d_ctx_heads, context_probs, qkv_heads}, {d_v, d_probs});
  // Dropout and softmax backward, fused and in place.
  rec_.op(p + "softmax_dropout_bwd", with({d_probs, probs}, probs_mask), {d_probs});
  const TensorId d_q = act(p + "d_q", T_ * H_);
  const TensorId d_k = act(p + "d_k", T_ * H_);
  rec_.op(p + "scores_gemm_bwd", {d_probs, qkv_heads}, {d_q, d_k});
  const TensorId d_qkv = act(p + "d_qkv", 3 * T_ * H_);
  rec_.op(p + "qkv_transform_bwd", {d_q, d_k, d_v}, {d_qkv});  // [3,B,N,L,d] → [T,3H]
  const TensorId d_qkv_in = act(p + "d_qkv_in", T_ * H_);
  rec_.op(p + "qkv_gemm_bwd", {d_qkv, gemm_input}, {d_qkv_in});  // dX, and dW, dbias
  return d_qkv_in;
}

std::optional<TensorId> LayerDescriber::output_backward(const SublayerSaved& s, TensorId d_output,
                                                        TensorId d_raw) {
  const std::string& p = s.prefix;
  if (config_.pre_layer_norm) {
    rec_.op(p + "bias_dropout_residual_bwd", with({d_output}, s.hidden_mask), {d_raw});
    return std::nullopt;
  }
  const TensorId d_residual = act(p + "d_residual", T_ * H_);
  rec_.op(p + "ln_bwd", {d_output, s.output, s.ln_stats}, {d_residual});
  rec_.op(p + "bias_dropout_bwd", with({d_residual}, s.hidden_mask), {d_raw});
  return d_residual;
}

void LayerDescriber::self_attention_backward(const SublayerSaved& s, TensorId d_output, TensorId d_input) {
  const std::string& p = s.prefix;
  const TensorId d_out_raw = act(p + "d_out_raw", T_ * H_);
  const std::optional<TensorId> d_residual = output_backward(s, d_output, d_out_raw);
  const TensorId d_gemm_in = self_attention_core_backward(p, d_out_raw, s.ctx, s.context_probs, s.probs,
                                                          s.probs_mask, s.q_heads, s.gemm_input);
  if (config_.pre_layer_norm) {
    // LN backward plus the residual's gradient, d_output, in one kernel.
    rec_.op(p + "ln_bwd", {d_gemm_in, s.input, s.ln_stats, d_output}, {d_input});
  } else {
    rec_.op(p + "residual_add_bwd", {d_gemm_in, *d_residual}, {d_input});
  }
}

// ---------------------------------------------------------------------------------------------
// Cross-attention: Q from the decoder, K and V from the encoder output (computed outside).

SublayerSaved LayerDescriber::cross_attention_forward(const std::string& prefix, TensorId input,
                                                      TensorId output, TensorId kv_heads,
                                                      std::size_t kv_len) {
  config_.check_batch(B_, kv_len);
  SublayerSaved s = begin_sublayer(prefix, input, output);
  const std::string& p = prefix;
  s.kv_heads = kv_heads;
  s.kv_len = kv_len;
  const TensorId q_raw = act(p + "q_raw", T_ * H_);
  rec_.op(p + "q_gemm", {s.gemm_input}, {q_raw});
  s.q_heads = act(p + "q_heads", T_ * H_);
  rec_.op(p + "q_bias_transform", {q_raw}, {s.q_heads});
  const std::size_t scores = B_ * N_ * L_ * kv_len;
  attention_probs(s, scores, {s.q_heads, kv_heads});
  attention_output(s, kv_heads);
  return s;
}

void LayerDescriber::cross_attention_backward(const SublayerSaved& s, TensorId d_output, TensorId d_input,
                                              TensorId d_kv_raw) {
  const std::string& p = s.prefix;
  const std::size_t kv_tokens = B_ * s.kv_len;
  const std::size_t scores = B_ * N_ * L_ * s.kv_len;
  const TensorId d_out_raw = act(p + "d_out_raw", T_ * H_);
  const std::optional<TensorId> d_residual = output_backward(s, d_output, d_out_raw);
  const TensorId d_ctx = act(p + "d_ctx", T_ * H_);
  rec_.op(p + "out_gemm_bwd", {d_out_raw, s.ctx}, {d_ctx});
  const TensorId d_ctx_heads = act(p + "d_ctx_heads", T_ * H_);
  rec_.op(p + "ctx_transform_bwd", {d_ctx}, {d_ctx_heads});
  const TensorId d_v = act(p + "d_v", kv_tokens * H_);
  const TensorId d_probs = act(p + "d_probs", scores);
  rec_.op(p + "context_gemm_bwd", {d_ctx_heads, s.context_probs, *s.kv_heads}, {d_v, d_probs});
  rec_.op(p + "softmax_dropout_bwd", with({d_probs, s.probs}, s.probs_mask), {d_probs});
  const TensorId d_q = act(p + "d_q", T_ * H_);
  const TensorId d_k = act(p + "d_k", kv_tokens * H_);
  rec_.op(p + "scores_gemm_bwd", {d_probs, s.q_heads, *s.kv_heads}, {d_q, d_k});
  rec_.op(p + "kv_transform_bwd", {d_k, d_v}, {d_kv_raw});  // [2,B,N,Ls,d] → this layer's [Ts,2H]
  const TensorId d_q_raw = act(p + "d_q_raw", T_ * H_);
  rec_.op(p + "q_transform_bwd", {d_q}, {d_q_raw});
  const TensorId d_gemm_in = act(p + "d_q_in", T_ * H_);
  rec_.op(p + "q_gemm_bwd", {d_q_raw, s.gemm_input}, {d_gemm_in});
  if (config_.pre_layer_norm) {
    rec_.op(p + "ln_bwd", {d_gemm_in, s.input, s.ln_stats, d_output}, {d_input});
  } else {
    rec_.op(p + "residual_add_bwd", {d_gemm_in, *d_residual}, {d_input});
  }
}

// ---------------------------------------------------------------------------------------------
// FFN: GEMM, fused bias + activation + dropout, GEMM, fused bias + dropout + residual.

SublayerSaved LayerDescriber::ffn_forward(const std::string& prefix, TensorId input, TensorId output) {
  SublayerSaved s = begin_sublayer(prefix, input, output);
  const std::string& p = prefix;
  // Kept: the fused backward recomputes act'(ff1_raw + bias) from it instead of storing act'.
  s.ff1_raw = act(p + "ff1_raw", T_ * F_);
  rec_.op(p + "ff1_gemm", {s.gemm_input}, {s.ff1_raw});
  s.act_out = act(p + "act_out", T_ * F_);
  s.act_mask = mask(p + "act_mask", config_.activation_dropout, T_ * F_);
  rec_.op(p + "bias_act_dropout", {s.ff1_raw}, with({s.act_out}, s.act_mask));
  const TensorId ff2_raw = act(p + "ff2_raw", T_ * H_);
  rec_.op(p + "ff2_gemm", {s.act_out}, {ff2_raw});
  s.hidden_mask = mask(p + "hidden_mask", config_.hidden_dropout, T_ * H_);
  if (config_.pre_layer_norm) {
    rec_.op(p + "bias_dropout_residual", {ff2_raw, input}, with({output}, s.hidden_mask));
  } else {
    const TensorId residual = act(p + "residual", T_ * H_);
    rec_.op(p + "bias_dropout_residual", {ff2_raw, input}, with({residual}, s.hidden_mask));
    rec_.op(p + "ln", {residual}, {output, s.ln_stats});
  }
  return s;
}

void LayerDescriber::ffn_backward(const SublayerSaved& s, TensorId d_output, TensorId d_input) {
  const std::string& p = s.prefix;
  const TensorId d_ff2 = act(p + "d_ff2_raw", T_ * H_);
  const std::optional<TensorId> d_residual = output_backward(s, d_output, d_ff2);
  const TensorId d_act = act(p + "d_act", T_ * F_);
  rec_.op(p + "ff2_gemm_bwd", {d_ff2, s.act_out}, {d_act});
  // In place: d(ff1_raw) = d_act ⊙ keep/(1-p) ⊙ act'(ff1_raw + bias), with the bias gradient.
  rec_.op(p + "bias_act_dropout_bwd", with({d_act, s.ff1_raw}, s.act_mask), {d_act});
  const TensorId d_gemm_in = act(p + "d_ff1_in", T_ * H_);
  rec_.op(p + "ff1_gemm_bwd", {d_act, s.gemm_input}, {d_gemm_in});
  if (config_.pre_layer_norm) {
    rec_.op(p + "ln_bwd", {d_gemm_in, s.input, s.ln_stats, d_output}, {d_input});
  } else {
    rec_.op(p + "residual_add_bwd", {d_gemm_in, *d_residual}, {d_input});
  }
}

// ---------------------------------------------------------------------------------------------
// Whole layers.

LayerDescriber::LayerSaved LayerDescriber::encoder_forward(const std::string& prefix, TensorId input,
                                                           TensorId output) {
  LayerSaved saved;
  saved.prefix = prefix;
  const TensorId h = act(prefix + "attn_out", T_ * H_);
  saved.hidden = {h};
  saved.sublayers.push_back(self_attention_forward(prefix + "attn.", input, h));
  saved.sublayers.push_back(ffn_forward(prefix + "ffn.", h, output));
  return saved;
}

void LayerDescriber::encoder_backward(const LayerSaved& saved, TensorId d_output, TensorId d_input) {
  const TensorId d_h = act(saved.prefix + "d_attn_out", T_ * H_);
  ffn_backward(saved.sublayers.at(1), d_output, d_h);
  self_attention_backward(saved.sublayers.at(0), d_h, d_input);
}

LayerDescriber::LayerSaved LayerDescriber::decoder_forward(const std::string& prefix, TensorId input,
                                                           TensorId output, TensorId kv_heads,
                                                           std::size_t kv_len) {
  LayerSaved saved;
  saved.prefix = prefix;
  const TensorId h1 = act(prefix + "self_out", T_ * H_);
  const TensorId h2 = act(prefix + "cross_out", T_ * H_);
  saved.hidden = {h1, h2};
  saved.sublayers.push_back(self_attention_forward(prefix + "self.", input, h1));
  saved.sublayers.push_back(cross_attention_forward(prefix + "cross.", h1, h2, kv_heads, kv_len));
  saved.sublayers.push_back(ffn_forward(prefix + "ffn.", h2, output));
  return saved;
}

void LayerDescriber::decoder_backward(const LayerSaved& saved, TensorId d_output, TensorId d_input,
                                      TensorId d_kv_raw) {
  const TensorId d_h2 = act(saved.prefix + "d_cross_out", T_ * H_);
  const TensorId d_h1 = act(saved.prefix + "d_self_out", T_ * H_);
  ffn_backward(saved.sublayers.at(2), d_output, d_h2);
  cross_attention_backward(saved.sublayers.at(1), d_h2, d_h1, d_kv_raw);
  self_attention_backward(saved.sublayers.at(0), d_h1, d_input);
}

// ---------------------------------------------------------------------------------------------
// The accounting entry points.

std::vector<TensorLifetime> attention_backward_temporaries(const LayerConfig& config, BatchShape shape) {
  LifetimeRecorder rec;
  LayerDescriber d(rec, config, shape);
  const TensorId d_out_raw = rec.external("d_out_raw");
  const TensorId ctx = rec.external("ctx");
  const TensorId probs_dropped = rec.external("probs_dropped");
  const TensorId probs = rec.external("probs");
  const TensorId qkv_heads = rec.external("qkv_heads");
  const TensorId gemm_input = rec.external("qkv_in");
  const TensorId d_input = rec.external("d_input");
  const TensorId d_qkv_in = d.self_attention_core_backward("attn.", d_out_raw, ctx, probs_dropped, probs,
                                                           std::nullopt, qkv_heads, gemm_input);
  // Its consumer (the LayerNorm or residual backward) ends d_qkv_in's life.
  rec.op("attn.input_grad", {d_qkv_in}, {d_input});
  return rec.lifetimes();
}

AttentionBackwardFormula attention_backward_formula(const LayerConfig& config, BatchShape shape,
                                                    std::size_t alignment) {
  config.validate();
  config.check_batch(shape.batch_size, shape.seq_len);
  const std::size_t e = dtype_size(config.dtype);
  const std::size_t blh = shape.tokens() * static_cast<std::size_t>(config.hidden) * e;
  const std::size_t bl2n =
      shape.batch_size * shape.seq_len * shape.seq_len * static_cast<std::size_t>(config.heads) * e;
  const auto a = [alignment](std::size_t bytes) { return align_up(bytes, alignment); };
  AttentionBackwardFormula f;
  // d_ctx, d_ctx_heads, d_v, d_q, d_k and d_qkv_in are B·L·H each; d_qkv is 3·B·L·H; d_probs B·L²·N.
  f.naive_bytes = 6 * a(blh) + a(3 * blh) + a(bl2n);
  f.managed_bytes = 3 * a(blh) + std::max(a(3 * blh), a(bl2n));
  return f;
}

std::vector<TensorLifetime> encoder_layer_temporaries(const LayerConfig& config, BatchShape shape,
                                                      TemporaryOptions options) {
  LifetimeRecorder rec;
  LayerDescriber d(rec, config, shape, options);
  const TensorId x = rec.external("x");
  const TensorId y = rec.external("y");
  const TensorId dy = rec.external("dy");
  const TensorId dx = rec.external("dx");
  const LayerDescriber::LayerSaved saved = d.encoder_forward("enc0.", x, y);
  d.encoder_backward(saved, dy, dx);
  return rec.lifetimes();
}

std::vector<TensorLifetime> decoder_layer_temporaries(const LayerConfig& config, BatchShape shape,
                                                      std::size_t src_len, TemporaryOptions options) {
  LifetimeRecorder rec;
  LayerDescriber d(rec, config, shape, options);
  config.check_batch(shape.batch_size, src_len);
  const std::size_t kv = shape.batch_size * src_len * 2 * static_cast<std::size_t>(config.hidden);
  const TensorId x = rec.external("x");
  const TensorId enc_out = rec.external("encoder_out");
  const TensorId y = rec.external("y");
  const TensorId dy = rec.external("dy");
  const TensorId dx = rec.external("dx");
  const TensorId d_enc_out = rec.external("d_encoder_out");
  const TensorId kv_raw = rec.tensor("dec0.kv_raw", d.activation_bytes(kv));
  const TensorId kv_heads = rec.tensor("dec0.kv_heads", d.activation_bytes(kv));
  const TensorId d_kv_raw = rec.tensor("dec0.d_kv_raw", d.activation_bytes(kv));
  rec.op("dec0.kv_gemm", {enc_out}, {kv_raw});
  rec.op("dec0.kv_bias_transform", {kv_raw}, {kv_heads});
  const LayerDescriber::LayerSaved saved = d.decoder_forward("dec0.", x, y, kv_heads, src_len);
  d.decoder_backward(saved, dy, dx, d_kv_raw);
  rec.op("dec0.kv_gemm_bwd", {d_kv_raw, enc_out}, {d_enc_out});
  return rec.lifetimes();
}

std::vector<TensorLifetime> model_temporaries(const ModelPreset& preset, BatchShape shape,
                                              TemporaryOptions options) {
  const LayerConfig& config = preset.layer;
  SEQBENCH_REQUIRE(preset.encoder_layers >= 0 && preset.decoder_layers >= 0 &&
                       preset.encoder_layers + preset.decoder_layers > 0,
                   "model preset '" << preset.name << "' has " << preset.encoder_layers << " encoder and "
                                    << preset.decoder_layers << " decoder layers: at least one is needed");
  LifetimeRecorder rec;
  LayerDescriber d(rec, config, shape, options);
  const std::size_t th = shape.tokens() * static_cast<std::size_t>(config.hidden);
  const int ne = preset.encoder_layers;
  const int nd = preset.decoder_layers;
  const std::string enc_prefix = "enc";
  const std::string dec_prefix = "dec";

  // Encoder stack: h[0] is the embedding's output; h[ne] its top, which the decoder's K/V GEMM
  // reads (internal) or the caller does (external, encoder-only models).
  std::vector<TensorId> h(static_cast<std::size_t>(ne) + 1);
  std::vector<TensorId> dh(static_cast<std::size_t>(ne) + 1);
  if (ne > 0) {
    h[0] = rec.external("src_embedding_out");
    dh[0] = rec.external("d_src_embedding_out");
    for (int i = 1; i < ne; ++i) {
      h[i] = rec.tensor(enc_prefix + std::to_string(i) + ".input", d.activation_bytes(th));
      dh[i] = rec.tensor(enc_prefix + std::to_string(i) + ".d_input", d.activation_bytes(th));
    }
    if (nd > 0) {
      h[ne] = rec.tensor("encoder_out", d.activation_bytes(th));
      dh[ne] = rec.tensor("d_encoder_out", d.activation_bytes(th));
    } else {
      h[ne] = rec.external("encoder_out");
      dh[ne] = rec.external("d_encoder_out");
    }
  }
  std::vector<LayerDescriber::LayerSaved> enc_saved;
  for (int i = 0; i < ne; ++i)
    enc_saved.push_back(d.encoder_forward(enc_prefix + std::to_string(i) + ".", h[i], h[i + 1]));

  // Decoder stack with the layer-batched K/V: one GEMM [Ts,H]·[H, nd·2H] for every layer.
  std::vector<TensorId> g(static_cast<std::size_t>(nd) + 1);
  std::vector<TensorId> dg(static_cast<std::size_t>(nd) + 1);
  std::vector<LayerDescriber::LayerSaved> dec_saved;
  std::optional<TensorId> d_kv_all;
  if (nd > 0) {
    SEQBENCH_REQUIRE(ne > 0, "model preset '" << preset.name << "' has decoder layers but no encoder");
    const std::size_t kv_all =
        shape.tokens() * 2 * static_cast<std::size_t>(config.hidden) * static_cast<std::size_t>(nd);
    const TensorId kv_raw = rec.tensor("dec.kv_raw_all", d.activation_bytes(kv_all));
    const TensorId kv_heads = rec.tensor("dec.kv_heads_all", d.activation_bytes(kv_all));
    d_kv_all = rec.tensor("dec.d_kv_raw_all", d.activation_bytes(kv_all));
    rec.op("dec.kv_gemm_all", {h[ne]}, {kv_raw});
    rec.op("dec.kv_bias_transform_all", {kv_raw}, {kv_heads});
    g[0] = rec.external("tgt_embedding_out");
    dg[0] = rec.external("d_tgt_embedding_out");
    for (int i = 1; i < nd; ++i) {
      g[i] = rec.tensor(dec_prefix + std::to_string(i) + ".input", d.activation_bytes(th));
      dg[i] = rec.tensor(dec_prefix + std::to_string(i) + ".d_input", d.activation_bytes(th));
    }
    g[nd] = rec.external("decoder_out");
    dg[nd] = rec.external("d_decoder_out");
    for (int i = 0; i < nd; ++i)
      dec_saved.push_back(
          d.decoder_forward(dec_prefix + std::to_string(i) + ".", g[i], g[i + 1], kv_heads, shape.seq_len));
    for (int i = nd - 1; i >= 0; --i) d.decoder_backward(dec_saved[i], dg[i + 1], dg[i], *d_kv_all);
    // After decoder layer 0's backward: one GEMM backward forms the encoder output's gradient.
    rec.op("dec.kv_gemm_all_bwd", {*d_kv_all, h[ne]}, {dh[ne]});
  }
  for (int i = ne - 1; i >= 0; --i) d.encoder_backward(enc_saved[i], dh[i + 1], dh[i]);
  return rec.lifetimes();
}

}  // namespace seqbench::layers
