#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>

#include "kernels/bias_dropout_residual.h"
#include "kernels/layernorm.h"
#include "kernels/qkv_reshape.h"
#include "layers/attention_sublayer.h"
#include "layers/gemm_shapes.h"
#include "layers/residual_wrapper.h"

namespace seqbench::layers {

namespace {

bool is_cross(AttentionKind kind) {
  return kind == AttentionKind::cross;
}
// The query-side projections' stem: the fused QKV (self) or a lone Q (cross).
std::string q_stem(AttentionKind kind) {
  return is_cross(kind) ? "q" : "qkv";
}
std::int64_t q_projections(AttentionKind kind) {
  return is_cross(kind) ? 1 : 3;
}

}  // namespace

AttentionIds record_attention_forward(PlanBuilder& plan, AttentionKind kind, const std::string& name,
                                      TensorId x, TensorId kv_source, TensorId out, bool external_kv) {
  SEQBENCH_REQUIRE(is_cross(kind) == (kv_source != kNoTensor),
                   "record_attention_forward: cross-attention needs the encoder output, self-attention none");
  SEQBENCH_REQUIRE(!external_kv || is_cross(kind),
                   "record_attention_forward: external K/V heads are for cross-attention only");
  AttentionIds id;
  id.kind = kind;
  id.external_kv = external_kv;
  id.name = name;
  id.x = x;
  id.out = out;
  id.kv_source = kv_source;
  const std::string& a = name;
  const std::string qs = q_stem(kind);
  const std::size_t T = plan.tokens();
  const std::size_t H = plan.hidden();
  const std::size_t P = static_cast<std::size_t>(q_projections(kind));
  const bool pre = plan.config().pre_layer_norm;

  TensorId in = x;
  id.ln_mean = plan.stat(a + "ln_mean");
  id.ln_rstd = plan.stat(a + "ln_rstd");
  if (pre) {
    id.ln_out = plan.act(a + "ln_out", T * H);
    plan.op(a + "ln", {x}, {id.ln_out, id.ln_mean, id.ln_rstd});
    in = id.ln_out;
  }
  id.q_raw = plan.act(a + qs + "_raw", T * P * H);
  plan.gemm_op(a + qs + "_gemm", {in}, {id.q_raw});
  id.q_heads = plan.act(a + qs + "_heads", P * T * H);
  plan.op(a + qs + "_bias_split", {id.q_raw}, {id.q_heads});
  std::vector<TensorId> heads = {id.q_heads};
  if (external_kv) {
    id.kv_heads = kv_source;  // the caller's [2, B, N, S, d]
    heads.push_back(id.kv_heads);
  } else if (is_cross(kind)) {
    id.kv_raw = plan.act(a + "kv_raw", T * 2 * H);
    plan.gemm_op(a + "kv_gemm", {kv_source}, {id.kv_raw});
    id.kv_heads = plan.act(a + "kv_heads", 2 * T * H);
    plan.op(a + "kv_bias_split", {id.kv_raw}, {id.kv_heads});
    heads.push_back(id.kv_heads);
  }
  id.probs = plan.act(a + "probs", plan.scores());
  plan.gemm_op(a + "scores_gemm", heads, {id.probs});
  plan.op(a + "softmax", {id.probs}, {id.probs});
  TensorId context_probs = id.probs;
  if (plan.config().attn_dropout > 0.0) {
    id.probs_dropped = plan.act(a + "probs_dropped", plan.scores());
    plan.op(a + "probs_dropout", {id.probs}, {id.probs_dropped});
    context_probs = id.probs_dropped;
  }
  id.ctx_heads = plan.act(a + "ctx_heads", T * H);
  std::vector<TensorId> context_reads = heads;
  context_reads.insert(context_reads.begin(), context_probs);
  plan.gemm_op(a + "context_gemm", context_reads, {id.ctx_heads});
  id.ctx = plan.act(a + "ctx", T * H);
  plan.op(a + "merge_heads", {id.ctx_heads}, {id.ctx});
  id.out_raw = plan.act(a + "out_raw", T * H);
  plan.gemm_op(a + "out_gemm", {id.ctx}, {id.out_raw});
  if (pre) {
    plan.op(a + "bias_dropout_residual", {id.out_raw, x}, {out});
  } else {
    id.residual = plan.act(a + "residual", T * H);
    plan.op(a + "bias_dropout_residual", {id.out_raw, x}, {id.residual});
    plan.op(a + "ln", {id.residual}, {out, id.ln_mean, id.ln_rstd});
  }
  return id;
}

void record_attention_backward(PlanBuilder& plan, AttentionIds& id, TensorId d_out, TensorId d_x,
                               TensorId d_kv_source) {
  const bool cross = is_cross(id.kind);
  SEQBENCH_REQUIRE(cross == (d_kv_source != kNoTensor),
                   "record_attention_backward: cross-attention needs the encoder output's gradient, "
                   "self-attention none");
  const std::string& a = id.name;
  const std::string qs = q_stem(id.kind);
  const std::size_t T = plan.tokens();
  const std::size_t H = plan.hidden();
  const std::size_t P = static_cast<std::size_t>(q_projections(id.kind));
  const bool pre = plan.config().pre_layer_norm;
  const bool attn_drop = plan.config().attn_dropout > 0.0;

  const TensorId d_sub = plan_residual_sum_grad(plan, a, id, d_out, pre);
  id.d_out_raw = plan.act(a + "d_out_raw", T * H);
  id.bdr_ws = plan.bytes(a + "bias_dropout_residual_bwd_ws", plan.bias_dropout_residual_bwd_ws());
  plan.op(a + "bias_dropout_residual_bwd", {d_sub}, {id.d_out_raw, id.bdr_ws});
  id.d_ctx = plan.act(a + "d_ctx", T * H);
  plan.gemm_op(a + "out_gemm_bwd", {id.d_out_raw, id.ctx}, {id.d_ctx});
  id.d_ctx_heads = plan.act(a + "d_ctx_heads", T * H);
  plan.op(a + "ctx_split_bwd", {id.d_ctx}, {id.d_ctx_heads});
  // Self: dQ, dK, dV written in place per head into one [3, B, N, L, d]; cross: dQ alone, and
  // dK, dV into [2, B, N, S, d].
  id.d_q_heads = plan.act(a + "d_" + qs + "_heads", P * T * H);
  if (cross) id.d_kv_heads = id.external_kv ? d_kv_source : plan.act(a + "d_kv_heads", 2 * T * H);
  id.d_probs = plan.act(a + "d_probs", plan.scores());
  TensorId context_probs = attn_drop ? id.probs_dropped : id.probs;
  if (attn_drop && plan.recompute() == Recompute::pointwise) {
    id.probs_redropped = plan.act(a + "probs_redropped", plan.scores());
    plan.op(a + "probs_dropout_recompute", {id.probs}, {id.probs_redropped});
    context_probs = id.probs_redropped;
  }
  std::vector<TensorId> heads = {id.q_heads};
  if (cross) heads.push_back(id.kv_heads);
  const TensorId dv_heads = cross ? id.d_kv_heads : id.d_q_heads;
  // The context GEMM's two backward GEMMs as two ops, dV first: the probabilities it reads die
  // there, before dP (as large) is written, so the two need not be live at once.
  plan.gemm_op(a + "context_gemm_bwd_dv", {id.d_ctx_heads, context_probs}, {dv_heads});
  std::vector<TensorId> dp_reads = {id.d_ctx_heads};
  dp_reads.insert(dp_reads.end(), heads.begin(), heads.end());
  plan.gemm_op(a + "context_gemm_bwd_dp", dp_reads, {id.d_probs});
  if (attn_drop) {
    // In place: the gradient of the dropped probabilities becomes that of the probabilities in
    // its own buffer (the regenerating dropout backward allows dx == dy), so the attention
    // backward's peak holds two score-sized tensors (probs, kept, and this one), not three.
    id.d_probs_dropped = id.d_probs;
    plan.op(a + "probs_dropout_bwd", {id.d_probs}, {id.d_probs});
  }
  plan.op(a + "softmax_bwd", {id.d_probs, id.probs}, {id.d_probs});
  std::vector<TensorId> scores_reads = {id.d_probs};
  scores_reads.insert(scores_reads.end(), heads.begin(), heads.end());
  std::vector<TensorId> scores_writes = {id.d_q_heads};
  if (cross) scores_writes.push_back(id.d_kv_heads);
  plan.gemm_op(a + "scores_gemm_bwd", scores_reads, scores_writes);
  if (cross && !id.external_kv) {
    id.d_kv = plan.act(a + "d_kv", T * 2 * H);
    id.kv_ws = plan.bytes(a + "kv_bias_split_bwd_ws", plan.qkv_bias_split_bwd_ws(2));
    plan.op(a + "kv_bias_split_bwd", {id.d_kv_heads}, {id.d_kv, id.kv_ws});
    plan.gemm_op(a + "kv_gemm_bwd", {id.d_kv, id.kv_source}, {d_kv_source});
  }
  id.d_q = plan.act(a + "d_" + qs, T * P * H);
  id.q_ws =
      plan.bytes(a + qs + "_bias_split_bwd_ws", plan.qkv_bias_split_bwd_ws(static_cast<std::int64_t>(P)));
  plan.op(a + qs + "_bias_split_bwd", {id.d_q_heads}, {id.d_q, id.q_ws});
  id.d_q_in = plan.act(a + "d_" + qs + "_in", T * H);
  const TensorId in = pre ? id.ln_out : id.x;
  plan.gemm_op(a + qs + "_gemm_bwd", {id.d_q, in}, {id.d_q_in});
  plan_input_grad(plan, a, id, id.d_q_in, d_out, d_x, pre);
}

namespace {

// The per-run sizes of one attention sub-layer.
struct Sizes {
  std::int64_t B, Lq, Lk, rows, kv_rows, H, N, d, P, S;
  int Hi;  // H as the LayerNorm launchers take it
  float scale, eps;
  bool pre, cross, attn_drop;

  kernels::HeadsShape heads(std::int64_t len, std::int64_t projections) const {
    return attention_heads_shape(B, len, N, H, projections);
  }
  kernels::SoftmaxShape softmax() const { return attention_softmax_shape(B, N, Lq, Lk); }
};

Sizes sizes_of(const LayerConfig& c, const AttentionIds& ids, const AttentionDims& dims) {
  Sizes s{};
  s.B = dims.batch;
  s.Lq = dims.q_len;
  s.cross = is_cross(ids.kind);
  s.Lk = s.cross ? dims.kv_len : dims.q_len;
  s.rows = s.B * s.Lq;
  s.kv_rows = s.B * s.Lk;
  s.H = c.hidden;
  s.Hi = c.hidden;
  s.N = c.heads;
  s.d = s.H / s.N;
  s.P = q_projections(ids.kind);
  s.S = s.B * s.N * s.Lq * s.Lk;
  s.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(s.d)));
  s.eps = static_cast<float>(c.layer_norm_eps);
  s.pre = c.pre_layer_norm;
  s.attn_drop = c.attn_dropout > 0.0;
  return s;
}

}  // namespace

template <class T>
void AttentionSublayer<T>::forward(LayerRun<T>& r, T* out, const T* x, const T* kv_source,
                                   const kernels::SoftmaxMask& mask) const {
  const Sizes s = sizes_of(config, ids, dims);
  const AttentionTensors<const void*>& w = weights;
  const std::string& n = ids.name;
  const std::string qs = q_stem(ids.kind);
  cudaStream_t stream = r.stream();
  const T* in = x;
  if (s.pre) {
    r.op(n + "ln");
    T* ln_out = r.act(ids.ln_out, s.rows * s.H);
    kernels::launch_layernorm_forward<T>(ln_out, r.stat(ids.ln_mean, s.rows), r.stat(ids.ln_rstd, s.rows), x,
                                         as<T>(w.ln_gamma), as<T>(w.ln_beta), s.rows, s.Hi, s.eps, stream);
    in = ln_out;
  }
  r.op(n + qs + "_gemm");
  T* q_raw = r.act(ids.q_raw, s.rows * s.P * s.H);
  r.gemm(linear_forward(in, w.q_weight, q_raw, s.rows, s.P * s.H, s.H));
  r.op(n + qs + "_bias_split");
  T* q_heads = r.act(ids.q_heads, s.P * s.rows * s.H);
  kernels::launch_qkv_bias_split_fwd<T>(q_heads, q_raw, as<T>(w.q_bias), s.heads(s.Lq, s.P), stream);
  const T* q = q_heads;
  // Self-attention: K and V follow Q in the [3, B, N, L, d] block. Cross-attention's q_heads holds
  // Q alone (P = 1), so its K and V are set below, never formed past q_heads' end.
  const T* k = s.cross ? nullptr : q_heads + s.rows * s.H;
  const T* v = s.cross ? nullptr : q_heads + 2 * s.rows * s.H;
  if (s.cross && ids.external_kv) {
    k = kv_source;  // the caller's K/V heads [2, B, N, S, d]
    v = kv_source + s.kv_rows * s.H;
  } else if (s.cross) {
    r.op(n + "kv_gemm");
    T* kv_raw = r.act(ids.kv_raw, s.kv_rows * 2 * s.H);
    r.gemm(linear_forward(kv_source, w.kv_weight, kv_raw, s.kv_rows, 2 * s.H, s.H));
    r.op(n + "kv_bias_split");
    T* kv_heads = r.act(ids.kv_heads, 2 * s.kv_rows * s.H);
    kernels::launch_qkv_bias_split_fwd<T>(kv_heads, kv_raw, as<T>(w.kv_bias), s.heads(s.Lk, 2), stream);
    k = kv_heads;
    v = kv_heads + s.kv_rows * s.H;
  }
  r.op(n + "scores_gemm");
  T* probs = r.act(ids.probs, s.S);
  r.gemm(per_head(GemmOp::none, q, s.Lq, s.d, GemmOp::transpose, k, s.Lk, s.d, probs, s.B * s.N, s.scale));
  r.op(n + "softmax");
  kernels::launch_softmax_forward<T>(probs, probs, s.softmax(), 1.0f, mask, stream);
  const T* context_probs = probs;
  if (s.attn_drop) {
    r.op(n + "probs_dropout");
    T* dropped = r.act(ids.probs_dropped, s.S);
    kernels::launch_dropout_fwd<T>(dropped, probs, static_cast<std::size_t>(s.S), dropout.first, nullptr, 0,
                                   stream);
    context_probs = dropped;
  }
  r.op(n + "context_gemm");
  T* ctx_heads = r.act(ids.ctx_heads, s.rows * s.H);
  r.gemm(per_head(GemmOp::none, context_probs, s.Lq, s.Lk, GemmOp::none, v, s.Lk, s.d, ctx_heads, s.B * s.N,
                  1.0f));
  r.op(n + "merge_heads");
  T* ctx = r.act(ids.ctx, s.rows * s.H);
  kernels::launch_merge_heads<T>(ctx, ctx_heads, s.heads(s.Lq, 1), stream);
  r.op(n + "out_gemm");
  T* out_raw = r.act(ids.out_raw, s.rows * s.H);
  r.gemm(linear_forward(ctx, w.out_weight, out_raw, s.rows, s.H, s.H));
  r.op(n + "bias_dropout_residual");
  if (s.pre) {
    kernels::launch_bias_dropout_residual_fwd<T>(out, out_raw, as<T>(w.out_bias), x, s.rows, s.H,
                                                 dropout.hidden, stream);
  } else {
    T* residual = r.act(ids.residual, s.rows * s.H);
    kernels::launch_bias_dropout_residual_fwd<T>(residual, out_raw, as<T>(w.out_bias), x, s.rows, s.H,
                                                 dropout.hidden, stream);
    r.op(n + "ln");
    kernels::launch_layernorm_forward<T>(out, r.stat(ids.ln_mean, s.rows), r.stat(ids.ln_rstd, s.rows),
                                         residual, as<T>(w.ln_gamma), as<T>(w.ln_beta), s.rows, s.Hi, s.eps,
                                         stream);
  }
}

template <class T>
void AttentionSublayer<T>::backward(LayerRun<T>& r, T* d_x, T* d_kv_source, const T* d_out, const T* x,
                                    const T* kv_source) const {
  const Sizes s = sizes_of(config, ids, dims);
  const AttentionTensors<const void*>& w = weights;
  const AttentionTensors<void*>& g = grads;
  const std::string& n = ids.name;
  const std::string qs = q_stem(ids.kind);
  cudaStream_t stream = r.stream();
  const WrapperNorm norm{w.ln_gamma, g.ln_gamma, g.ln_beta};
  const T* d_sub = run_residual_sum_grad<T>(r, ids, norm, d_out, s.rows, s.Hi, s.pre);
  r.op(n + "bias_dropout_residual_bwd");
  T* d_out_raw = r.act(ids.d_out_raw, s.rows * s.H);
  {
    const std::size_t need = kernels::bias_dropout_residual_bwd_workspace_bytes(s.rows, s.H);
    kernels::launch_bias_dropout_residual_bwd<T>(d_out_raw, as<T>(g.out_bias), d_sub, s.rows, s.H,
                                                 dropout.hidden, r.workspace(ids.bdr_ws, need), need, stream);
  }
  r.op(n + "out_gemm_bwd");
  T* d_ctx = r.act(ids.d_ctx, s.rows * s.H);
  r.gemm(linear_dx(d_out_raw, w.out_weight, d_ctx, s.rows, s.H, s.H));
  r.gemm(linear_dw(d_out_raw, r.act(ids.ctx, s.rows * s.H), g.out_weight, s.rows, s.H, s.H));
  r.op(n + "ctx_split_bwd");
  T* d_ctx_heads = r.act(ids.d_ctx_heads, s.rows * s.H);
  kernels::launch_split_heads<T>(d_ctx_heads, d_ctx, s.heads(s.Lq, 1), stream);
  if (ids.probs_redropped != kNoTensor) {
    // Recompute::pointwise: the forward's dropped probabilities, redrawn bitwise (same kernel,
    // input and Philox stream as its probs_dropout).
    r.op(n + "probs_dropout_recompute");
    kernels::launch_dropout_fwd<T>(r.act(ids.probs_redropped, s.S), r.act(ids.probs, s.S),
                                   static_cast<std::size_t>(s.S), dropout.first, nullptr, 0, stream);
  }
  r.op(n + "context_gemm_bwd_dv");
  const T* q_heads = r.act(ids.q_heads, s.P * s.rows * s.H);
  const T* q = q_heads;
  const T* k = s.cross ? nullptr : q_heads + s.rows * s.H;  // cross: set below (q_heads is Q alone)
  const T* v = s.cross ? nullptr : q_heads + 2 * s.rows * s.H;
  // Self: d_q_heads [3, B, N, L, d] holds dQ, dK, dV. Cross: dK, dV go to d_kv_heads
  // [2, B, N, S, d] and d_q_heads (dQ alone) is first written by the scores backward.
  T* d_q_heads = nullptr;
  T* d_kv_heads = nullptr;
  T* dk = nullptr;
  T* dv = nullptr;
  if (s.cross) {
    // With external K/V the heads and their gradient are the caller's (kv_source, d_kv_source).
    const T* kv_heads = ids.external_kv ? kv_source : r.act(ids.kv_heads, 2 * s.kv_rows * s.H);
    k = kv_heads;
    v = kv_heads + s.kv_rows * s.H;
    d_kv_heads = ids.external_kv ? d_kv_source : r.act(ids.d_kv_heads, 2 * s.kv_rows * s.H);
    dk = d_kv_heads;
    dv = d_kv_heads + s.kv_rows * s.H;
  } else {
    d_q_heads = r.act(ids.d_q_heads, s.P * s.rows * s.H);
    dk = d_q_heads + s.rows * s.H;
    dv = d_q_heads + 2 * s.rows * s.H;
  }
  const TensorId context_probs_id =
      ids.probs_redropped != kNoTensor ? ids.probs_redropped : (s.attn_drop ? ids.probs_dropped : ids.probs);
  // dV = P_dropᵀ · dC, then (its own op, so that P_drop may die first) dP_drop = dC · Vᵀ, per
  // (batch, head).
  r.gemm(per_head(GemmOp::transpose, r.act(context_probs_id, s.S), s.Lq, s.Lk, GemmOp::none, d_ctx_heads,
                  s.Lq, s.d, dv, s.B * s.N, 1.0f));
  r.op(n + "context_gemm_bwd_dp");
  T* d_probs = r.act(ids.d_probs, s.S);
  r.gemm(per_head(GemmOp::none, d_ctx_heads, s.Lq, s.d, GemmOp::transpose, v, s.Lk, s.d, d_probs, s.B * s.N,
                  1.0f));
  if (s.attn_drop) {
    r.op(n + "probs_dropout_bwd");
    // In place (record_attention_backward): d_probs_dropped is d_probs.
    kernels::launch_dropout_bwd_regenerate<T>(d_probs, d_probs, static_cast<std::size_t>(s.S), dropout.first,
                                              stream);
  }
  r.op(n + "softmax_bwd");
  // dS' = softmax'(d_probs) with scale 1 (the scale lives in the GEMMs' alpha), in place.
  kernels::launch_softmax_backward<T>(d_probs, d_probs, r.act(ids.probs, s.S), s.softmax(), 1.0f, stream);
  r.op(n + "scores_gemm_bwd");
  if (s.cross) d_q_heads = r.act(ids.d_q_heads, s.P * s.rows * s.H);
  // scores = scale · Q Kᵀ: dQ = scale · dS' K, dK = scale · dS'ᵀ Q.
  r.gemm(
      per_head(GemmOp::none, d_probs, s.Lq, s.Lk, GemmOp::none, k, s.Lk, s.d, d_q_heads, s.B * s.N, s.scale));
  r.gemm(
      per_head(GemmOp::transpose, d_probs, s.Lq, s.Lk, GemmOp::none, q, s.Lq, s.d, dk, s.B * s.N, s.scale));
  if (s.cross && !ids.external_kv) {
    r.op(n + "kv_bias_split_bwd");
    T* d_kv = r.act(ids.d_kv, s.kv_rows * 2 * s.H);
    {
      const kernels::HeadsShape shape = s.heads(s.Lk, 2);
      const std::size_t need = kernels::qkv_bias_split_bwd_workspace_bytes(shape);
      kernels::launch_qkv_bias_split_bwd<T>(d_kv, as<T>(g.kv_bias), d_kv_heads, shape,
                                            r.workspace(ids.kv_ws, need), need, stream);
    }
    r.op(n + "kv_gemm_bwd");
    r.gemm(linear_dx(d_kv, w.kv_weight, d_kv_source, s.kv_rows, 2 * s.H, s.H));
    r.gemm(linear_dw(d_kv, kv_source, g.kv_weight, s.kv_rows, 2 * s.H, s.H));
  }
  r.op(n + qs + "_bias_split_bwd");
  T* d_q = r.act(ids.d_q, s.rows * s.P * s.H);
  {
    const kernels::HeadsShape shape = s.heads(s.Lq, s.P);
    const std::size_t need = kernels::qkv_bias_split_bwd_workspace_bytes(shape);
    kernels::launch_qkv_bias_split_bwd<T>(d_q, as<T>(g.q_bias), d_q_heads, shape, r.workspace(ids.q_ws, need),
                                          need, stream);
  }
  r.op(n + qs + "_gemm_bwd");
  T* d_q_in = r.act(ids.d_q_in, s.rows * s.H);
  const T* in = s.pre ? r.act(ids.ln_out, s.rows * s.H) : x;
  r.gemm(linear_dx(d_q, w.q_weight, d_q_in, s.rows, s.P * s.H, s.H));
  r.gemm(linear_dw(d_q, in, g.q_weight, s.rows, s.P * s.H, s.H));
  run_input_grad<T>(r, ids, norm, d_x, d_q_in, d_out, d_sub, x, s.rows, s.Hi, s.pre);
}

#define SEQBENCH_ATTENTION_SUBLAYER(T) template struct AttentionSublayer<T>;
SEQBENCH_ATTENTION_SUBLAYER(float)
SEQBENCH_ATTENTION_SUBLAYER(__half)
SEQBENCH_ATTENTION_SUBLAYER(__nv_bfloat16)
#undef SEQBENCH_ATTENTION_SUBLAYER

}  // namespace seqbench::layers
