// The attention sub-layer of the Transformer layers (reference/transformer_layer.cpp's
// attention_block_forward / attention_block_backward), shared by EncoderLayer (self-attention)
// and DecoderLayer (causal self-attention, then cross-attention over the encoder output):
//
//   pre-LN   out = x + dropout_h(attention(LN(x), kv))
//   post-LN  out = LN(x + dropout_h(attention(x, kv)))
//
// with attention = mha_forward of reference/attention.h (projections, scaled scores, masked
// softmax, probability dropout, context, output projection with its bias).
//
// Self-attention (kind self): one fused QKV GEMM [T, H]·[3H, H]ᵀ on the (normalized) input, split
// into [3, B, N, L, d] with the bias (qkv_bias_split, projections = 3). Cross-attention (kind
// cross): a Q-only GEMM [T, H]·[H, H]ᵀ on the (normalized) input split with projections = 1, and a
// K/V GEMM [B·S, H]·[2H, H]ᵀ on the encoder output split with projections = 2 (K rows first).
// Then, per (batch, head): scores = (1/√d)·Q·Kᵀ [L, Lk] (the scale is the GEMM's alpha, LightSeq's
// choice: stored scores are already scaled), softmax in place (key lengths, optional causal mask)
// → dropout on the probabilities (attn_dropout > 0) → context = P·V → merge heads → output GEMM →
// bias_dropout_residual (+ x) → LayerNorm (post-LN). The backward mirrors it; with a cross
// sub-layer it also writes the gradient of the encoder output, d_kv_source = d_kv · W_kv, and
// dW_kv, dbias_kv. Every parameter gradient is written (beta = 0, kernels overwrite).
//
// External K/V (cross only; DecoderLayerOptions::external_kv, LightSeq2 §IV-A's layer-batched K/V
// of layers/cross_kv.h): the sub-layer is recorded and run WITHOUT kv_gemm, kv_bias_split and
// their backward ops; the K/V heads [2, B, N, S, d] come from the caller (the `kv_source`
// argument of forward/backward is then those heads, not the encoder output) and the backward
// WRITES dK/dV into the caller's `d_kv_source`, [2, B, N, S, d] too; kv_weight/kv_bias and their
// gradients are not used.
//
// Dropout: `first` is the probabilities' stream ([B·N·L, Lk] flat index), `hidden` the output's
// ([T, H]); the backward redraws both.
//
// Ops (their names after "<prefix><name>", `name` being "attn.", "self." or "cross."; q is "qkv"
// for self and "q" for cross):
//   forward  [ln] q_gemm q_bias_split [kv_gemm kv_bias_split] scores_gemm softmax
//            [probs_dropout] context_gemm merge_heads out_gemm bias_dropout_residual [ln]
//   backward [ln_bwd] bias_dropout_residual_bwd out_gemm_bwd ctx_split_bwd
//            [probs_dropout_recompute] context_gemm_bwd_dv context_gemm_bwd_dp [probs_dropout_bwd]
//            softmax_bwd scores_gemm_bwd q_bias_split_bwd q_gemm_bwd [kv_bias_split_bwd
//            kv_gemm_bwd] [ln_bwd] residual_add_bwd
// The context GEMM's backward is two ops, dV = P_dropᵀ·dC then dP_drop = dC·Vᵀ, so that the
// probabilities dV reads die before dP_drop (as large) is written. dP_drop is written into
// d_probs, and the dropout and softmax backwards then run in place in it: the backward's peak
// holds two score-sized tensors (probs and d_probs), as LightSeq2's Fig. 8 accounting has it.
// probs_dropout_recompute is there with attention dropout under Recompute::pointwise
// (layers/layer_run.h): the forward's probs_dropped then dies at context_gemm, and the backward
// redraws it (the same kernel on the same probs and stream) into probs_redropped.
#pragma once

#include <cstdint>
#include <string>

#include "kernels/dropout.h"
#include "kernels/qkv_reshape.h"
#include "kernels/softmax.h"
#include "layers/layer_run.h"

namespace seqbench::layers {

enum class AttentionKind { self, cross };

// The parameters (P = const void*) or gradients (P = void*) of one attention sub-layer.
template <class P>
struct AttentionTensors {
  P ln_gamma{}, ln_beta{};     // [H]
  P q_weight{}, q_bias{};      // self: the fused QKV [3H, H], [3H]; cross: Q [H, H], [H]
  P kv_weight{}, kv_bias{};    // cross only: [2H, H], [2H] (K rows first); null for self
  P out_weight{}, out_bias{};  // [H, H], [H]
};

// The attention views of a layer's tensor struct, shared by the managed and the baseline layers:
// the encoder's one (EncoderLayerTensors: attn_ln_*, the fused qkv_* as q_*, out_*; no K/V
// projection) and the decoder's two (DecoderLayerTensors: self_* with the fused self_qkv_* as
// q_*; cross_* with its Q-only and K/V projections).
template <class P, template <class> class LayerTensors>
AttentionTensors<P> encoder_attention_tensors_of(const LayerTensors<P>& t) {
  return {t.attn_ln_gamma, t.attn_ln_beta, t.qkv_weight, t.qkv_bias, P{}, P{}, t.out_weight, t.out_bias};
}
template <class P, template <class> class LayerTensors>
AttentionTensors<P> self_attention_tensors_of(const LayerTensors<P>& t) {
  return {t.self_ln_gamma,   t.self_ln_beta, t.self_qkv_weight, t.self_qkv_bias, P{}, P{},
          t.self_out_weight, t.self_out_bias};
}
template <class P, template <class> class LayerTensors>
AttentionTensors<P> cross_attention_tensors_of(const LayerTensors<P>& t) {
  return {t.cross_ln_gamma,  t.cross_ln_beta, t.cross_q_weight,   t.cross_q_bias,
          t.cross_kv_weight, t.cross_kv_bias, t.cross_out_weight, t.cross_out_bias};
}

// The planned tensors of one attention sub-layer (kNoTensor where the config does not use them).
struct AttentionIds {
  AttentionKind kind = AttentionKind::self;
  bool external_kv = false;  // cross only: K/V heads (and their gradient) are the caller's
  std::string name;          // "attn.", "self.", "cross."
  TensorId x = kNoTensor, out = kNoTensor, kv_source = kNoTensor;
  TensorId ln_out = kNoTensor, ln_mean = kNoTensor, ln_rstd = kNoTensor;
  TensorId q_raw = kNoTensor, q_heads = kNoTensor, kv_raw = kNoTensor, kv_heads = kNoTensor;
  TensorId probs = kNoTensor, probs_dropped = kNoTensor;
  TensorId ctx_heads = kNoTensor, ctx = kNoTensor, out_raw = kNoTensor, residual = kNoTensor;
  // Backward.
  TensorId d_residual = kNoTensor, ln_ws = kNoTensor, d_out_raw = kNoTensor, bdr_ws = kNoTensor;
  TensorId d_ctx = kNoTensor, d_ctx_heads = kNoTensor, d_q_heads = kNoTensor, d_kv_heads = kNoTensor;
  // d_probs_dropped (with attention dropout) is d_probs: probs_dropout_bwd runs in place.
  TensorId d_probs_dropped = kNoTensor, d_probs = kNoTensor, d_q = kNoTensor, q_ws = kNoTensor;
  // Recompute::pointwise with attention dropout: the backward's copy of probs_dropped, redrawn
  // from probs (op probs_dropout_recompute, before context_gemm_bwd_dv); kNoTensor otherwise, and
  // then the backward reads the forward's probs_dropped.
  TensorId probs_redropped = kNoTensor;
  TensorId d_q_in = kNoTensor, d_kv = kNoTensor, kv_ws = kNoTensor, d_ln_in = kNoTensor;
};

// The dry run of the forward: x is the sub-layer's input, out its output (both declared by the
// caller), kv_source the encoder output [B·S, H] (cross) or kNoTensor (self); with external_kv
// (cross only) kv_source is instead the caller's K/V heads [2, B, N, S, d].
AttentionIds record_attention_forward(PlanBuilder& plan, AttentionKind kind, const std::string& name,
                                      TensorId x, TensorId kv_source, TensorId out, bool external_kv = false);
// The dry run of the backward: d_out the gradient of out, d_x that of x (declared by the caller),
// d_kv_source that of the encoder output (cross only), or of the K/V heads with external_kv.
void record_attention_backward(PlanBuilder& plan, AttentionIds& ids, TensorId d_out, TensorId d_x,
                               TensorId d_kv_source);

// The shape of one run: B sentences of q_len query positions and kv_len key positions (kv_len =
// q_len for self-attention).
struct AttentionDims {
  std::int64_t batch = 0, q_len = 0, kv_len = 0;
};

// The kernels' shapes of one attention run, shared by AttentionSublayer and the baseline
// sub-layers: the heads of `batch` sentences of `len` positions (`heads` heads of hidden / heads,
// `projections` stacked), and the scores [batch, heads, q_len, k_len].
inline kernels::HeadsShape attention_heads_shape(std::int64_t batch, std::int64_t len, std::int64_t heads,
                                                 std::int64_t hidden, std::int64_t projections) {
  kernels::HeadsShape s;
  s.batch = batch;
  s.len = len;
  s.heads = heads;
  s.hidden = hidden;
  s.projections = projections;
  return s;
}
inline kernels::SoftmaxShape attention_softmax_shape(std::int64_t batch, std::int64_t heads,
                                                     std::int64_t q_len, std::int64_t k_len) {
  kernels::SoftmaxShape s;
  s.batch = batch;
  s.heads = heads;
  s.q_len = q_len;
  s.k_len = k_len;
  return s;
}

struct SublayerDropout {
  kernels::DropoutConfig first;   // the attention probabilities (attention) or activation (FFN)
  kernels::DropoutConfig hidden;  // the sub-layer's output, before the residual add
};

// The execution, for T ∈ {float, __half, __nv_bfloat16} (instantiated in attention_sublayer.cu).
template <class T>
struct AttentionSublayer {
  const LayerConfig& config;
  const AttentionIds& ids;
  const AttentionTensors<const void*>& weights;
  const AttentionTensors<void*>& grads;
  AttentionDims dims;
  SublayerDropout dropout;

  // out = sublayer(x, kv_source); kv_source [B·kv_len, H] (cross), the K/V heads
  // [2, B, N, kv_len, d] (cross with ids.external_kv) or null (self).
  void forward(LayerRun<T>& run, T* out, const T* x, const T* kv_source,
               const kernels::SoftmaxMask& mask) const;
  // d_x (and d_kv_source for cross: [B·kv_len, H], or dK/dV [2, B, N, kv_len, d] with
  // ids.external_kv) and every parameter gradient from d_out, for the forward on the same x and
  // kv_source (with external_kv, kv_source is the K/V heads, which the backward reads as K and V).
  void backward(LayerRun<T>& run, T* d_x, T* d_kv_source, const T* d_out, const T* x,
                const T* kv_source) const;
};

}  // namespace seqbench::layers
