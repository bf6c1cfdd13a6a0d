#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <utility>

#include "kernels/bias_act_dropout.h"
#include "kernels/bias_dropout_residual.h"
#include "kernels/dropout.h"
#include "kernels/layernorm.h"
#include "layers/baseline_sublayers.h"
#include "layers/gemm_shapes.h"
#include "layers/layer_run.h"

namespace seqbench::layers::baseline {

template <class T>
Eager<T> Eager<T>::make(const LayerConfig& config, DeviceAllocator& allocator, Gemm& gemm,
                        cudaStream_t stream, std::size_t batch, std::size_t len, bool free_saved) {
  const std::int64_t B = static_cast<std::int64_t>(batch), L = static_cast<std::int64_t>(len);
  const std::int64_t H = config.hidden, N = config.heads, d = H / N;
  return Eager<T>{config,
                  allocator,
                  gemm,
                  stream,
                  B,
                  L,
                  B * L,
                  H,
                  config.ffn,
                  N,
                  d,
                  static_cast<float>(1.0 / std::sqrt(static_cast<double>(d))),
                  static_cast<float>(config.layer_norm_eps),
                  free_saved};
}

template <class T>
kernels::HeadsShape Eager<T>::heads(std::int64_t len, std::int64_t projections) const {
  return attention_heads_shape(B, len, N, H, projections);
}

template <class T>
kernels::SoftmaxShape Eager<T>::softmax_shape(std::int64_t kv_len) const {
  return attention_softmax_shape(B, N, L, kv_len);
}

// nn.Linear without a fused bias: GEMM into a temporary, then the bias add into a new tensor.
template <class T>
EagerTensor Eager<T>::linear(const T* in, const void* w, const void* bias, std::int64_t rows,
                             std::int64_t out_f, std::int64_t in_f) const {
  EagerTensor raw = tensor(rows * out_f);
  gemm.run<T>(linear_forward(in, w, raw.get(), rows, out_f, in_f), stream);
  EagerTensor z = tensor(rows * out_f);
  kernels::launch_bias_add<T>(z.as<T>(), raw.as<T>(), as<T>(bias), rows, out_f, stream);
  return z;  // raw is freed here: nothing reads it again
}

// dX (into a new tensor, or into dx_into when given: then the returned tensor is empty) and dW
// (into the gradient) of an nn.Linear, and its bias gradient.
template <class T>
EagerTensor Eager<T>::linear_bwd(const T* dy, const T* in, const void* w, void* dw, void* dbias,
                                 std::int64_t rows, std::int64_t out_f, std::int64_t in_f, T* dx_into) const {
  {
    const std::size_t need = kernels::column_sum_workspace_bytes(rows, out_f);
    EagerTensor ws = bytes(need);
    kernels::launch_column_sum<T>(as<T>(dbias), dy, rows, out_f, ws.get(), need, stream);
  }
  EagerTensor dx;
  T* dx_ptr = dx_into;
  if (dx_ptr == nullptr) {
    dx = tensor(rows * in_f);
    dx_ptr = dx.as<T>();
  }
  gemm.run<T>(linear_dx(dy, w, dx_ptr, rows, out_f, in_f), stream);
  gemm.run<T>(linear_dw(dy, in, dw, rows, out_f, in_f), stream);
  return dx;
}

// y = LayerNorm(x) into `y`, the statistics into mean/rstd (allocated here).
template <class T>
void Eager<T>::layernorm(T* y, EagerTensor& mean, EagerTensor& rstd, const T* x, const void* gamma,
                         const void* beta) const {
  mean = stats();
  rstd = stats();
  const std::size_t need = kernels::layernorm_unfused_forward_workspace_bytes(c.dtype, T_, c.hidden);
  EagerTensor ws = bytes(need);
  kernels::launch_layernorm_forward_unfused<T>(y, mean.as<float>(), rstd.as<float>(), x, as<T>(gamma),
                                               as<T>(beta), T_, c.hidden, eps, ws.get(), need, stream);
}

// dx of a LayerNorm (new tensor), its parameter gradients written; frees the statistics.
template <class T>
EagerTensor Eager<T>::layernorm_bwd(const T* dy, const T* x, const void* gamma, void* dgamma, void* dbeta,
                                    EagerTensor& mean, EagerTensor& rstd) const {
  EagerTensor dx = tensor(T_ * H);
  {
    const std::size_t need = kernels::layernorm_unfused_backward_workspace_bytes(c.dtype, T_, c.hidden);
    EagerTensor ws = bytes(need);
    kernels::launch_layernorm_backward_unfused<T>(dx.as<T>(), as<T>(dgamma), as<T>(dbeta), dy, x,
                                                  as<T>(gamma), mean.as<float>(), rstd.as<float>(), T_,
                                                  c.hidden, ws.get(), need, stream);
  }
  drop(mean);
  drop(rstd);
  return dx;
}

// Eager dropout of n elements: for p > 0 the uint8 mask and the output are new tensors (mask kept
// in `mask`, output in `out`) and the output pointer is returned; for p = 0 nothing runs and `in`
// is returned (ATen's identity for p = 0).
template <class T>
const T* Eager<T>::dropout(EagerTensor& out, EagerTensor& mask, const T* in, std::int64_t n,
                           const kernels::DropoutConfig& cfg) const {
  if (cfg.p == 0.0f) return in;
  const std::size_t count = static_cast<std::size_t>(n);
  mask = bytes(count);
  kernels::launch_dropout_mask_u8(mask.as<std::uint8_t>(), count, cfg, stream);
  out = tensor(n);
  kernels::launch_dropout_apply_u8<T>(out.as<T>(), in, mask.as<std::uint8_t>(), count, cfg.p, stream);
  return out.as<T>();
}

// Its backward: dx = dy · mask / (1 - p) (new tensor in `out`, returned), or dy for p = 0. Frees
// the (saved) mask.
template <class T>
const T* Eager<T>::dropout_bwd(EagerTensor& out, EagerTensor& mask, const T* dy, std::int64_t n,
                               float p) const {
  if (p == 0.0f) return dy;
  out = tensor(n);
  kernels::launch_dropout_apply_u8<T>(out.as<T>(), dy, mask.as<std::uint8_t>(), static_cast<std::size_t>(n),
                                      p, stream);
  drop(mask);
  return out.as<T>();
}

// The sub-layers' common tail: o = in·Wᵀ + b; out = x + dropout(o) (pre), or
// out = LN(residual = x + dropout(o)) (post, residual and statistics kept).
template <class T>
void Eager<T>::residual_tail(T* out, EagerTensor& residual, EagerTensor& mean, EagerTensor& rstd,
                             EagerTensor& out_mask, const T* in, const void* w, const void* bias,
                             std::int64_t in_f, const T* x, const void* gamma, const void* beta,
                             const kernels::DropoutConfig& cfg) const {
  EagerTensor o = linear(in, w, bias, T_, H, in_f);
  EagerTensor dropped;
  const T* od = dropout(dropped, out_mask, o.as<T>(), T_ * H, cfg);
  if (c.pre_layer_norm) {
    kernels::launch_residual_add<T>(out, od, x, T_, H, stream);
  } else {
    residual = tensor(T_ * H);
    kernels::launch_residual_add<T>(residual.as<T>(), od, x, T_, H, stream);
    o.reset();
    dropped.reset();
    layernorm(out, mean, rstd, residual.as<T>(), gamma, beta);
  }
}

// The tail's backward: the gradient of o (returned in `d_o_buf` or aliasing) and of the residual
// path (`d_res`: d_out itself for pre-LN, a new tensor for post-LN).
template <class T>
const T* Eager<T>::residual_tail_bwd(EagerTensor& d_res_buf, EagerTensor& d_o_buf, const T* d_out,
                                     EagerTensor& residual, EagerTensor& mean, EagerTensor& rstd,
                                     EagerTensor& out_mask, const void* gamma, void* dgamma, void* dbeta,
                                     float p, const T** d_res) const {
  *d_res = d_out;
  if (!c.pre_layer_norm) {
    d_res_buf = layernorm_bwd(d_out, residual.as<T>(), gamma, dgamma, dbeta, mean, rstd);
    drop(residual);
    *d_res = d_res_buf.as<T>();
  }
  return dropout_bwd(d_o_buf, out_mask, *d_res, T_ * H, p);
}

// The sub-layers' input gradient from d_in (the gradient of the sub-layer's first GEMM input):
// pre-LN d_x = LN_bwd(d_in) + d_out; post-LN d_x = d_in + d_res. Frees d_in.
template <class T>
void Eager<T>::input_grad(T* d_x, EagerTensor& d_in, const T* d_out, const T* d_res, const T* x,
                          const void* gamma, void* dgamma, void* dbeta, EagerTensor& mean,
                          EagerTensor& rstd) const {
  if (c.pre_layer_norm) {
    EagerTensor d_ln = layernorm_bwd(d_in.as<T>(), x, gamma, dgamma, dbeta, mean, rstd);
    d_in.reset();
    kernels::launch_residual_add<T>(d_x, d_ln.as<T>(), d_out, T_, H, stream);
  } else {
    kernels::launch_residual_add<T>(d_x, d_in.as<T>(), d_res, T_, H, stream);
  }
}

// --- attention --------------------------------------------------------------------------------

template <class T>
void Eager<T>::attention_forward(AttentionSaved& s, T* out, const T* x, const T* kv_source,
                                 std::int64_t kv_len, const AttentionTensors<const void*>& w,
                                 const kernels::SoftmaxMask& mask, const SublayerDropout& dropouts) const {
  const bool cross = kv_source != nullptr;
  const std::int64_t Lk = kv_len, kv_rows = B * kv_len, S = B * N * L * kv_len;
  const T* in = x;
  if (c.pre_layer_norm) {
    s.ln_out = tensor(T_ * H);
    layernorm(s.ln_out.as<T>(), s.ln_mean, s.ln_rstd, x, w.ln_gamma, w.ln_beta);
    in = s.ln_out.as<T>();
  }
  if (!cross) {
    EagerTensor qkv = linear(in, w.q_weight, w.q_bias, T_, 3 * H, H);  // [T, 3H]
    const kernels::StridedCopy4 copy = kernels::heads_strided_copy(heads(L, 3), true);
    EagerTensor* dst[3] = {&s.q, &s.k, &s.v};
    for (int p = 0; p < 3; ++p) {
      *dst[p] = tensor(T_ * H);
      kernels::launch_strided_copy<T>(dst[p]->template as<T>(), qkv.as<T>() + p * H, copy, stream);
    }
  } else {
    {
      EagerTensor q = linear(in, w.q_weight, w.q_bias, T_, H, H);  // [T, H]
      s.q = tensor(T_ * H);
      kernels::launch_strided_copy<T>(s.q.as<T>(), q.as<T>(), kernels::heads_strided_copy(heads(L, 1), true),
                                      stream);
    }
    EagerTensor kv = linear(kv_source, w.kv_weight, w.kv_bias, kv_rows, 2 * H, H);  // [B·Lk, 2H]
    const kernels::StridedCopy4 copy = kernels::heads_strided_copy(heads(Lk, 2), true);
    EagerTensor* dst[2] = {&s.k, &s.v};
    for (int p = 0; p < 2; ++p) {
      *dst[p] = tensor(kv_rows * H);
      kernels::launch_strided_copy<T>(dst[p]->template as<T>(), kv.as<T>() + p * H, copy, stream);
    }
  }
  {
    EagerTensor scores = tensor(S);
    gemm.run<T>(per_head(GemmOp::none, s.q.get(), L, d, GemmOp::transpose, s.k.get(), Lk, d, scores.get(),
                         B * N, scale),
                stream);
    s.probs = tensor(S);
    const std::size_t need = kernels::softmax_unfused_forward_workspace_bytes(c.dtype, softmax_shape(Lk));
    EagerTensor ws = bytes(need);
    kernels::launch_softmax_forward_unfused<T>(s.probs.as<T>(), scores.as<T>(), softmax_shape(Lk), 1.0f, mask,
                                               ws.get(), need, stream);
  }
  const T* context_probs = dropout(s.probs_dropped, s.probs_mask, s.probs.as<T>(), S, dropouts.first);
  {
    EagerTensor ctx_heads = tensor(T_ * H);
    gemm.run<T>(per_head(GemmOp::none, context_probs, L, Lk, GemmOp::none, s.v.get(), Lk, d, ctx_heads.get(),
                         B * N, 1.0f),
                stream);
    s.ctx = tensor(T_ * H);
    kernels::launch_strided_copy<T>(s.ctx.as<T>(), ctx_heads.as<T>(),
                                    kernels::heads_strided_copy(heads(L, 1), false), stream);
  }
  residual_tail(out, s.residual, s.ln_mean, s.ln_rstd, s.out_mask, s.ctx.as<T>(), w.out_weight, w.out_bias, H,
                x, w.ln_gamma, w.ln_beta, dropouts.hidden);
}

template <class T>
void Eager<T>::attention_backward(AttentionSaved& s, T* d_x, T* d_kv_source, const T* d_out, const T* x,
                                  const T* kv_source, std::int64_t kv_len,
                                  const AttentionTensors<const void*>& w, const AttentionTensors<void*>& g,
                                  const SublayerDropout& dropouts) const {
  const bool cross = kv_source != nullptr;
  const std::int64_t Lk = kv_len, kv_rows = B * kv_len, S = B * N * L * kv_len;
  EagerTensor d_res_buf, d_o_buf;
  const T* d_res = nullptr;
  const T* d_o = residual_tail_bwd(d_res_buf, d_o_buf, d_out, s.residual, s.ln_mean, s.ln_rstd, s.out_mask,
                                   w.ln_gamma, g.ln_gamma, g.ln_beta, dropouts.hidden.p, &d_res);
  EagerTensor d_ctx_heads = tensor(T_ * H);
  {
    EagerTensor d_ctx = linear_bwd(d_o, s.ctx.as<T>(), w.out_weight, g.out_weight, g.out_bias, T_, H, H);
    d_o_buf.reset();
    drop(s.ctx);
    kernels::launch_strided_copy<T>(d_ctx_heads.as<T>(), d_ctx.as<T>(),
                                    kernels::heads_strided_copy(heads(L, 1), true), stream);
  }
  const bool attn_drop = dropouts.first.p != 0.0f;
  const T* context_probs = attn_drop ? s.probs_dropped.as<T>() : s.probs.as<T>();
  // dV = P_dropᵀ · dC [Lk, d], dP_drop = dC · Vᵀ [L, Lk] per (batch, head).
  EagerTensor dv = tensor(kv_rows * H);
  gemm.run<T>(per_head(GemmOp::transpose, context_probs, L, Lk, GemmOp::none, d_ctx_heads.get(), L, d,
                       dv.get(), B * N, 1.0f),
              stream);
  EagerTensor d_probs_dropped = tensor(S);
  gemm.run<T>(per_head(GemmOp::none, d_ctx_heads.get(), L, d, GemmOp::transpose, s.v.get(), Lk, d,
                       d_probs_dropped.get(), B * N, 1.0f),
              stream);
  d_ctx_heads.reset();
  drop(s.v);
  drop(s.probs_dropped);
  EagerTensor d_probs_buf;
  const T* d_probs = dropout_bwd(d_probs_buf, s.probs_mask, d_probs_dropped.as<T>(), S, dropouts.first.p);
  // Autograd releases the dropout node's incoming gradient when the node returns, before the
  // softmax backward allocates; with p = 0 there is no node and d_probs is that gradient.
  if (attn_drop) d_probs_dropped.reset();
  EagerTensor d_scores = tensor(S);
  {
    const std::size_t need = kernels::softmax_unfused_backward_workspace_bytes(c.dtype, softmax_shape(Lk));
    EagerTensor ws = bytes(need);
    kernels::launch_softmax_backward_unfused<T>(d_scores.as<T>(), d_probs, s.probs.as<T>(), softmax_shape(Lk),
                                                1.0f, ws.get(), need, stream);
  }
  d_probs_buf.reset();
  d_probs_dropped.reset();
  drop(s.probs);
  // scores = scale · Q Kᵀ: dQ = scale · dS K [L, d], dK = scale · dSᵀ Q [Lk, d].
  EagerTensor dq = tensor(T_ * H), dk = tensor(kv_rows * H);
  gemm.run<T>(
      per_head(GemmOp::none, d_scores.get(), L, Lk, GemmOp::none, s.k.get(), Lk, d, dq.get(), B * N, scale),
      stream);
  gemm.run<T>(per_head(GemmOp::transpose, d_scores.get(), L, Lk, GemmOp::none, s.q.get(), L, d, dk.get(),
                       B * N, scale),
              stream);
  d_scores.reset();
  drop(s.q);
  drop(s.k);
  const T* in = c.pre_layer_norm ? s.ln_out.as<T>() : x;
  EagerTensor d_in;
  if (!cross) {
    EagerTensor d_qkv = tensor(T_ * 3 * H);  // [T, 3H]: the three merges into their column blocks
    {
      const kernels::StridedCopy4 copy = kernels::heads_strided_copy(heads(L, 3), false);
      const EagerTensor* src[3] = {&dq, &dk, &dv};
      for (int p = 0; p < 3; ++p)
        kernels::launch_strided_copy<T>(d_qkv.as<T>() + p * H, src[p]->template as<T>(), copy, stream);
    }
    dq.reset();
    dk.reset();
    dv.reset();
    d_in = linear_bwd(d_qkv.as<T>(), in, w.q_weight, g.q_weight, g.q_bias, T_, 3 * H, H);
  } else {
    {
      EagerTensor d_kv = tensor(kv_rows * 2 * H);  // [B·Lk, 2H]: dK, dV merged into their column blocks
      const kernels::StridedCopy4 copy = kernels::heads_strided_copy(heads(Lk, 2), false);
      const EagerTensor* src[2] = {&dk, &dv};
      for (int p = 0; p < 2; ++p)
        kernels::launch_strided_copy<T>(d_kv.as<T>() + p * H, src[p]->template as<T>(), copy, stream);
      dk.reset();
      dv.reset();
      // The encoder output's gradient is the K/V projection's dX, written into the caller's tensor.
      linear_bwd(d_kv.as<T>(), kv_source, w.kv_weight, g.kv_weight, g.kv_bias, kv_rows, 2 * H, H,
                 d_kv_source);
    }
    EagerTensor d_q = tensor(T_ * H);
    kernels::launch_strided_copy<T>(d_q.as<T>(), dq.as<T>(), kernels::heads_strided_copy(heads(L, 1), false),
                                    stream);
    dq.reset();
    d_in = linear_bwd(d_q.as<T>(), in, w.q_weight, g.q_weight, g.q_bias, T_, H, H);
  }
  drop(s.ln_out);
  input_grad(d_x, d_in, d_out, d_res, x, w.ln_gamma, g.ln_gamma, g.ln_beta, s.ln_mean, s.ln_rstd);
}

// --- FFN ----------------------------------------------------------------------------------------

template <class T>
void Eager<T>::ffn_forward(FfnSaved& s, T* out, const T* x, const FfnTensors<const void*>& w,
                           const SublayerDropout& dropouts) const {
  const T* in = x;
  if (c.pre_layer_norm) {
    s.ln_out = tensor(T_ * H);
    layernorm(s.ln_out.as<T>(), s.ln_mean, s.ln_rstd, x, w.ln_gamma, w.ln_beta);
    in = s.ln_out.as<T>();
  }
  s.fc1_out = linear(in, w.fc1_weight, w.fc1_bias, T_, F, H);
  {
    EagerTensor a = tensor(T_ * F);
    kernels::launch_activation_fwd<T>(a.as<T>(), s.fc1_out.as<T>(), T_, F, kernel_activation(c.activation),
                                      stream);
    EagerTensor dropped;
    dropout(dropped, s.act_mask, a.as<T>(), T_ * F, dropouts.first);
    s.act_out = dropouts.first.p != 0.0f ? std::move(dropped) : std::move(a);
  }
  residual_tail(out, s.residual, s.ln_mean, s.ln_rstd, s.out_mask, s.act_out.as<T>(), w.fc2_weight,
                w.fc2_bias, F, x, w.ln_gamma, w.ln_beta, dropouts.hidden);
}

template <class T>
void Eager<T>::ffn_backward(FfnSaved& s, T* d_x, const T* d_out, const T* x, const FfnTensors<const void*>& w,
                            const FfnTensors<void*>& g, const SublayerDropout& dropouts) const {
  EagerTensor d_res_buf, d_o_buf;
  const T* d_res = nullptr;
  const T* d_o = residual_tail_bwd(d_res_buf, d_o_buf, d_out, s.residual, s.ln_mean, s.ln_rstd, s.out_mask,
                                   w.ln_gamma, g.ln_gamma, g.ln_beta, dropouts.hidden.p, &d_res);
  EagerTensor d_act_dropped =
      linear_bwd(d_o, s.act_out.as<T>(), w.fc2_weight, g.fc2_weight, g.fc2_bias, T_, H, F);
  d_o_buf.reset();
  drop(s.act_out);
  EagerTensor d_act_buf;
  const T* d_act = dropout_bwd(d_act_buf, s.act_mask, d_act_dropped.as<T>(), T_ * F, dropouts.first.p);
  // As in the attention backward: autograd frees the dropout node's incoming gradient before the
  // activation backward allocates (with p = 0, d_act is that gradient and stays).
  if (dropouts.first.p != 0.0f) d_act_dropped.reset();
  EagerTensor d_fc1 = tensor(T_ * F);
  kernels::launch_activation_bwd<T>(d_fc1.as<T>(), d_act, s.fc1_out.as<T>(), T_, F,
                                    kernel_activation(c.activation), stream);
  d_act_buf.reset();
  d_act_dropped.reset();
  drop(s.fc1_out);
  const T* in = c.pre_layer_norm ? s.ln_out.as<T>() : x;
  EagerTensor d_in = linear_bwd(d_fc1.as<T>(), in, w.fc1_weight, g.fc1_weight, g.fc1_bias, T_, F, H);
  d_fc1.reset();
  drop(s.ln_out);
  input_grad(d_x, d_in, d_out, d_res, x, w.ln_gamma, g.ln_gamma, g.ln_beta, s.ln_mean, s.ln_rstd);
}

#define SEQBENCH_BASELINE_SUBLAYERS(T) template struct Eager<T>;
SEQBENCH_BASELINE_SUBLAYERS(float)
SEQBENCH_BASELINE_SUBLAYERS(__half)
SEQBENCH_BASELINE_SUBLAYERS(__nv_bfloat16)
#undef SEQBENCH_BASELINE_SUBLAYERS

}  // namespace seqbench::layers::baseline
