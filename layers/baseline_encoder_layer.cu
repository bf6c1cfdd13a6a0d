#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <utility>

#include "core/dtype.h"
#include "core/error.h"
#include "core/nvtx.h"
#include "kernels/bias_act_dropout.h"
#include "kernels/bias_dropout_residual.h"
#include "kernels/dropout.h"
#include "kernels/layernorm.h"
#include "kernels/qkv_reshape.h"
#include "kernels/softmax.h"
#include "layers/attention_sublayer.h"
#include "layers/baseline_encoder_layer.h"
#include "layers/gemm_shapes.h"
#include "layers/layer_run.h"

namespace seqbench::layers {

namespace {

// One eager tensor: allocated through the layer's allocator when produced, freed by reset() (or
// its destructor) when autograd would drop it.
class Buf {
 public:
  Buf() = default;
  Buf(DeviceAllocator& allocator, std::size_t bytes)
      : allocator_(&allocator), ptr_(allocator.allocate(bytes)), bytes_(bytes) {}
  Buf(Buf&& o) noexcept
      : allocator_(o.allocator_), ptr_(std::exchange(o.ptr_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  Buf& operator=(Buf&& o) noexcept {
    if (this != &o) {
      reset();
      allocator_ = o.allocator_;
      ptr_ = std::exchange(o.ptr_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
    }
    return *this;
  }
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
  ~Buf() { reset(); }

  void reset() noexcept {
    if (ptr_ != nullptr) allocator_->deallocate(ptr_);
    ptr_ = nullptr;
    bytes_ = 0;
  }
  template <class U>
  U* as() const {
    return static_cast<U*>(ptr_);
  }
  void* get() const { return ptr_; }
  std::size_t bytes() const { return ptr_ != nullptr ? bytes_ : 0; }

 private:
  DeviceAllocator* allocator_ = nullptr;
  void* ptr_ = nullptr;
  std::size_t bytes_ = 0;
};

// What the attention sub-layer's backward reads (kept from its forward).
struct AttentionSaved {
  Buf ln_out;            // pre-LN: the normalized input (the QKV GEMM's input)
  Buf ln_mean, ln_rstd;  // the LayerNorm statistics
  Buf residual;          // post-LN: the LayerNorm's input x + dropout(attention)
  Buf q, k, v;           // [B, N, L, d] each
  Buf probs;             // softmax output [B, N, L, L]
  Buf probs_mask;        // uint8 [B·N·L·L] (attn_dropout > 0)
  Buf probs_dropped;     // the context GEMM's input (attn_dropout > 0)
  Buf ctx;               // merged context [T, H], the out GEMM's input
  Buf out_mask;          // uint8 [T, H] (hidden_dropout > 0)
  std::size_t bytes() const {
    return ln_out.bytes() + ln_mean.bytes() + ln_rstd.bytes() + residual.bytes() + q.bytes() + k.bytes() +
           v.bytes() + probs.bytes() + probs_mask.bytes() + probs_dropped.bytes() + ctx.bytes() +
           out_mask.bytes();
  }
};

// What the FFN sub-layer's backward reads.
struct FfnSaved {
  Buf ln_out, ln_mean, ln_rstd;  // as above
  Buf residual;                  // post-LN
  Buf fc1_out;                   // fc1(x) + bias: the activation's input [T, ffn]
  Buf act_mask;                  // uint8 [T, ffn] (activation_dropout > 0)
  Buf act_out;                   // the fc2 GEMM's input: dropout(act(.)), or act(.) for p = 0
  Buf out_mask;                  // uint8 [T, H] (hidden_dropout > 0)
  std::size_t bytes() const {
    return ln_out.bytes() + ln_mean.bytes() + ln_rstd.bytes() + residual.bytes() + fc1_out.bytes() +
           act_mask.bytes() + act_out.bytes() + out_mask.bytes();
  }
};

// The eager execution of one forward or backward for dtype T.
template <class T>
struct Eager {
  const LayerConfig& c;
  DeviceAllocator& alloc;
  Gemm& gemm;
  cudaStream_t stream;
  std::int64_t B, L, T_, H, F, N, d, S;  // T_ = B·L rows, S = B·N·L·L
  float scale, eps;
  bool free_saved;  // false: the backward keeps the saved tensors (retain_graph)

  // Frees a saved tensor after its last reader in the backward (autograd's release), unless the
  // graph is retained.
  void drop(Buf& saved) const {
    if (free_saved) saved.reset();
  }

  Buf tensor(std::int64_t elements) const {
    return Buf(alloc, static_cast<std::size_t>(elements) * sizeof(T));
  }
  Buf bytes(std::size_t n) const { return Buf(alloc, n); }
  Buf stats() const { return Buf(alloc, static_cast<std::size_t>(T_) * sizeof(float)); }

  kernels::HeadsShape heads(std::int64_t projections) const {
    kernels::HeadsShape s;
    s.batch = B;
    s.len = L;
    s.heads = N;
    s.hidden = H;
    s.projections = projections;
    return s;
  }
  kernels::SoftmaxShape softmax_shape() const {
    kernels::SoftmaxShape s;
    s.batch = B;
    s.heads = N;
    s.q_len = L;
    s.k_len = L;
    return s;
  }

  // nn.Linear without a fused bias: GEMM into a temporary, then the bias add into a new tensor.
  Buf linear(const T* in, const void* w, const void* bias, std::int64_t out_f, std::int64_t in_f) const {
    Buf raw = tensor(T_ * out_f);
    gemm.run<T>(linear_forward(in, w, raw.get(), T_, out_f, in_f), stream);
    Buf z = tensor(T_ * out_f);
    kernels::launch_bias_add<T>(z.as<T>(), raw.as<T>(), as<T>(bias), T_, out_f, stream);
    return z;  // raw is freed here: nothing reads it again
  }
  // dX (into a new tensor) and dW (into the gradient) of an nn.Linear, and its bias gradient.
  Buf linear_bwd(const T* dy, const T* in, const void* w, void* dw, void* dbias, std::int64_t out_f,
                 std::int64_t in_f) const {
    {
      const std::size_t need = kernels::column_sum_workspace_bytes(T_, out_f);
      Buf ws = bytes(need);
      kernels::launch_column_sum<T>(as<T>(dbias), dy, T_, out_f, ws.get(), need, stream);
    }
    Buf dx = tensor(T_ * in_f);
    gemm.run<T>(linear_dx(dy, w, dx.get(), T_, out_f, in_f), stream);
    gemm.run<T>(linear_dw(dy, in, dw, T_, out_f, in_f), stream);
    return dx;
  }
  // y = LayerNorm(x) into `y`, the statistics into mean/rstd (allocated here).
  void layernorm(T* y, Buf& mean, Buf& rstd, const T* x, const void* gamma, const void* beta) const {
    mean = stats();
    rstd = stats();
    const std::size_t need = kernels::layernorm_unfused_forward_workspace_bytes(c.dtype, T_, c.hidden);
    Buf ws = bytes(need);
    kernels::launch_layernorm_forward_unfused<T>(y, mean.as<float>(), rstd.as<float>(), x, as<T>(gamma),
                                                 as<T>(beta), T_, c.hidden, eps, ws.get(), need, stream);
  }
  // dx of a LayerNorm (new tensor), its parameter gradients written; frees the statistics.
  Buf layernorm_bwd(const T* dy, const T* x, const void* gamma, void* dgamma, void* dbeta, Buf& mean,
                    Buf& rstd) const {
    Buf dx = tensor(T_ * H);
    {
      const std::size_t need = kernels::layernorm_unfused_backward_workspace_bytes(c.dtype, T_, c.hidden);
      Buf ws = bytes(need);
      kernels::launch_layernorm_backward_unfused<T>(dx.as<T>(), as<T>(dgamma), as<T>(dbeta), dy, x,
                                                    as<T>(gamma), mean.as<float>(), rstd.as<float>(), T_,
                                                    c.hidden, ws.get(), need, stream);
    }
    drop(mean);
    drop(rstd);
    return dx;
  }
  // Eager dropout of n elements: for p > 0 the uint8 mask and the output are new tensors (mask
  // kept in `mask`, output in `out`) and the output pointer is returned; for p = 0 nothing runs
  // and `in` is returned (ATen's identity for p = 0).
  const T* dropout(Buf& out, Buf& mask, const T* in, std::int64_t n,
                   const kernels::DropoutConfig& cfg) const {
    if (cfg.p == 0.0f) return in;
    const std::size_t count = static_cast<std::size_t>(n);
    mask = bytes(count);
    kernels::launch_dropout_mask_u8(mask.as<std::uint8_t>(), count, cfg, stream);
    out = tensor(n);
    kernels::launch_dropout_apply_u8<T>(out.as<T>(), in, mask.as<std::uint8_t>(), count, cfg.p, stream);
    return out.as<T>();
  }
  // Its backward: dx = dy · mask / (1 - p) (new tensor in `out`, returned), or dy for p = 0.
  // Frees the (saved) mask.
  const T* dropout_bwd(Buf& out, Buf& mask, const T* dy, std::int64_t n, float p) const {
    if (p == 0.0f) return dy;
    out = tensor(n);
    kernels::launch_dropout_apply_u8<T>(out.as<T>(), dy, mask.as<std::uint8_t>(), static_cast<std::size_t>(n),
                                        p, stream);
    drop(mask);
    return out.as<T>();
  }

  // --- attention ------------------------------------------------------------------------------
  // out = x + dropout_h(attention(LN(x))) (pre) or LN(x + dropout_h(attention(x))) (post).
  void attention_forward(AttentionSaved& s, T* out, const T* x, const EncoderLayerWeights& w,
                         const kernels::SoftmaxMask& mask, const SublayerDropout& dropouts) const {
    const T* in = x;
    if (c.pre_layer_norm) {
      s.ln_out = tensor(T_ * H);
      layernorm(s.ln_out.as<T>(), s.ln_mean, s.ln_rstd, x, w.attn_ln_gamma, w.attn_ln_beta);
      in = s.ln_out.as<T>();
    }
    {
      Buf qkv = linear(in, w.qkv_weight, w.qkv_bias, 3 * H, H);  // [T, 3H]
      const kernels::StridedCopy4 copy = kernels::heads_strided_copy(heads(3), true);
      Buf* dst[3] = {&s.q, &s.k, &s.v};
      for (int p = 0; p < 3; ++p) {
        *dst[p] = tensor(T_ * H);
        kernels::launch_strided_copy<T>(dst[p]->template as<T>(), qkv.as<T>() + p * H, copy, stream);
      }
    }
    {
      Buf scores = tensor(S);
      gemm.run<T>(per_head(GemmOp::none, s.q.get(), L, d, GemmOp::transpose, s.k.get(), L, d, scores.get(),
                           B * N, scale),
                  stream);
      s.probs = tensor(S);
      const std::size_t need = kernels::softmax_unfused_forward_workspace_bytes(c.dtype, softmax_shape());
      Buf ws = bytes(need);
      kernels::launch_softmax_forward_unfused<T>(s.probs.as<T>(), scores.as<T>(), softmax_shape(), 1.0f, mask,
                                                 ws.get(), need, stream);
    }
    const T* context_probs = dropout(s.probs_dropped, s.probs_mask, s.probs.as<T>(), S, dropouts.first);
    {
      Buf ctx_heads = tensor(T_ * H);
      gemm.run<T>(per_head(GemmOp::none, context_probs, L, L, GemmOp::none, s.v.get(), L, d, ctx_heads.get(),
                           B * N, 1.0f),
                  stream);
      s.ctx = tensor(T_ * H);
      kernels::launch_strided_copy<T>(s.ctx.as<T>(), ctx_heads.as<T>(),
                                      kernels::heads_strided_copy(heads(1), false), stream);
    }
    residual_tail(out, s.residual, s.ln_mean, s.ln_rstd, s.out_mask, s.ctx.as<T>(), w.out_weight, w.out_bias,
                  H, x, w.attn_ln_gamma, w.attn_ln_beta, dropouts.hidden);
  }

  // The sub-layers' common tail: o = in·Wᵀ + b; out = x + dropout(o) (pre), or
  // out = LN(residual = x + dropout(o)) (post, residual and statistics kept).
  void residual_tail(T* out, Buf& residual, Buf& mean, Buf& rstd, Buf& out_mask, const T* in, const void* w,
                     const void* bias, std::int64_t in_f, const T* x, const void* gamma, const void* beta,
                     const kernels::DropoutConfig& cfg) const {
    Buf o = linear(in, w, bias, H, in_f);
    Buf dropped;
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
  const T* residual_tail_bwd(Buf& d_res_buf, Buf& d_o_buf, const T* d_out, Buf& residual, Buf& mean,
                             Buf& rstd, Buf& out_mask, const void* gamma, void* dgamma, void* dbeta, float p,
                             const T** d_res) const {
    *d_res = d_out;
    if (!c.pre_layer_norm) {
      d_res_buf = layernorm_bwd(d_out, residual.as<T>(), gamma, dgamma, dbeta, mean, rstd);
      drop(residual);
      *d_res = d_res_buf.as<T>();
    }
    return dropout_bwd(d_o_buf, out_mask, *d_res, T_ * H, p);
  }

  // d_x of the attention sub-layer from d_out; every attention parameter gradient written.
  void attention_backward(AttentionSaved& s, T* d_x, const T* d_out, const T* x, const EncoderLayerWeights& w,
                          const EncoderLayerGrads& g, const SublayerDropout& dropouts) const {
    Buf d_res_buf, d_o_buf;
    const T* d_res = nullptr;
    const T* d_o =
        residual_tail_bwd(d_res_buf, d_o_buf, d_out, s.residual, s.ln_mean, s.ln_rstd, s.out_mask,
                          w.attn_ln_gamma, g.attn_ln_gamma, g.attn_ln_beta, dropouts.hidden.p, &d_res);
    Buf d_ctx_heads = tensor(T_ * H);
    {
      Buf d_ctx = linear_bwd(d_o, s.ctx.as<T>(), w.out_weight, g.out_weight, g.out_bias, H, H);
      d_o_buf.reset();
      drop(s.ctx);
      kernels::launch_strided_copy<T>(d_ctx_heads.as<T>(), d_ctx.as<T>(),
                                      kernels::heads_strided_copy(heads(1), true), stream);
    }
    const bool attn_drop = dropouts.first.p != 0.0f;
    const T* context_probs = attn_drop ? s.probs_dropped.as<T>() : s.probs.as<T>();
    // dV = P_dropᵀ · dC, dP_drop = dC · Vᵀ per (batch, head).
    Buf dv = tensor(T_ * H);
    gemm.run<T>(per_head(GemmOp::transpose, context_probs, L, L, GemmOp::none, d_ctx_heads.get(), L, d,
                         dv.get(), B * N, 1.0f),
                stream);
    Buf d_probs_dropped = tensor(S);
    gemm.run<T>(per_head(GemmOp::none, d_ctx_heads.get(), L, d, GemmOp::transpose, s.v.get(), L, d,
                         d_probs_dropped.get(), B * N, 1.0f),
                stream);
    d_ctx_heads.reset();
    drop(s.v);
    drop(s.probs_dropped);
    Buf d_probs_buf;
    const T* d_probs = dropout_bwd(d_probs_buf, s.probs_mask, d_probs_dropped.as<T>(), S, dropouts.first.p);
    Buf d_scores = tensor(S);
    {
      const std::size_t need = kernels::softmax_unfused_backward_workspace_bytes(c.dtype, softmax_shape());
      Buf ws = bytes(need);
      kernels::launch_softmax_backward_unfused<T>(d_scores.as<T>(), d_probs, s.probs.as<T>(), softmax_shape(),
                                                  1.0f, ws.get(), need, stream);
    }
    d_probs_buf.reset();
    d_probs_dropped.reset();
    drop(s.probs);
    // scores = scale · Q Kᵀ: dQ = scale · dS K, dK = scale · dSᵀ Q.
    Buf dq = tensor(T_ * H), dk = tensor(T_ * H);
    gemm.run<T>(
        per_head(GemmOp::none, d_scores.get(), L, L, GemmOp::none, s.k.get(), L, d, dq.get(), B * N, scale),
        stream);
    gemm.run<T>(per_head(GemmOp::transpose, d_scores.get(), L, L, GemmOp::none, s.q.get(), L, d, dk.get(),
                         B * N, scale),
                stream);
    d_scores.reset();
    drop(s.q);
    drop(s.k);
    Buf d_qkv = tensor(T_ * 3 * H);  // [T, 3H]: the three merges into their column blocks
    {
      const kernels::StridedCopy4 copy = kernels::heads_strided_copy(heads(3), false);
      const Buf* src[3] = {&dq, &dk, &dv};
      for (int p = 0; p < 3; ++p)
        kernels::launch_strided_copy<T>(d_qkv.as<T>() + p * H, src[p]->template as<T>(), copy, stream);
    }
    dq.reset();
    dk.reset();
    dv.reset();
    const T* in = c.pre_layer_norm ? s.ln_out.as<T>() : x;
    Buf d_in = linear_bwd(d_qkv.as<T>(), in, w.qkv_weight, g.qkv_weight, g.qkv_bias, 3 * H, H);
    d_qkv.reset();
    drop(s.ln_out);
    if (c.pre_layer_norm) {
      Buf d_ln = layernorm_bwd(d_in.as<T>(), x, w.attn_ln_gamma, g.attn_ln_gamma, g.attn_ln_beta, s.ln_mean,
                               s.ln_rstd);
      d_in.reset();
      kernels::launch_residual_add<T>(d_x, d_ln.as<T>(), d_out, T_, H, stream);
    } else {
      kernels::launch_residual_add<T>(d_x, d_in.as<T>(), d_res, T_, H, stream);
    }
  }

  // --- FFN ------------------------------------------------------------------------------------
  void ffn_forward(FfnSaved& s, T* out, const T* x, const EncoderLayerWeights& w,
                   const SublayerDropout& dropouts) const {
    const T* in = x;
    if (c.pre_layer_norm) {
      s.ln_out = tensor(T_ * H);
      layernorm(s.ln_out.as<T>(), s.ln_mean, s.ln_rstd, x, w.ffn_ln_gamma, w.ffn_ln_beta);
      in = s.ln_out.as<T>();
    }
    s.fc1_out = linear(in, w.fc1_weight, w.fc1_bias, F, H);
    {
      Buf a = tensor(T_ * F);
      kernels::launch_activation_fwd<T>(a.as<T>(), s.fc1_out.as<T>(), T_, F, kernel_activation(c.activation),
                                        stream);
      Buf dropped;
      dropout(dropped, s.act_mask, a.as<T>(), T_ * F, dropouts.first);
      s.act_out = dropouts.first.p != 0.0f ? std::move(dropped) : std::move(a);
    }
    residual_tail(out, s.residual, s.ln_mean, s.ln_rstd, s.out_mask, s.act_out.as<T>(), w.fc2_weight,
                  w.fc2_bias, F, x, w.ffn_ln_gamma, w.ffn_ln_beta, dropouts.hidden);
  }

  void ffn_backward(FfnSaved& s, T* d_x, const T* d_out, const T* x, const EncoderLayerWeights& w,
                    const EncoderLayerGrads& g, const SublayerDropout& dropouts) const {
    Buf d_res_buf, d_o_buf;
    const T* d_res = nullptr;
    const T* d_o =
        residual_tail_bwd(d_res_buf, d_o_buf, d_out, s.residual, s.ln_mean, s.ln_rstd, s.out_mask,
                          w.ffn_ln_gamma, g.ffn_ln_gamma, g.ffn_ln_beta, dropouts.hidden.p, &d_res);
    Buf d_act_dropped = linear_bwd(d_o, s.act_out.as<T>(), w.fc2_weight, g.fc2_weight, g.fc2_bias, H, F);
    d_o_buf.reset();
    drop(s.act_out);
    Buf d_act_buf;
    const T* d_act = dropout_bwd(d_act_buf, s.act_mask, d_act_dropped.as<T>(), T_ * F, dropouts.first.p);
    Buf d_fc1 = tensor(T_ * F);
    kernels::launch_activation_bwd<T>(d_fc1.as<T>(), d_act, s.fc1_out.as<T>(), T_, F,
                                      kernel_activation(c.activation), stream);
    d_act_buf.reset();
    d_act_dropped.reset();
    drop(s.fc1_out);
    const T* in = c.pre_layer_norm ? s.ln_out.as<T>() : x;
    Buf d_in = linear_bwd(d_fc1.as<T>(), in, w.fc1_weight, g.fc1_weight, g.fc1_bias, F, H);
    d_fc1.reset();
    drop(s.ln_out);
    if (c.pre_layer_norm) {
      Buf d_ln =
          layernorm_bwd(d_in.as<T>(), x, w.ffn_ln_gamma, g.ffn_ln_gamma, g.ffn_ln_beta, s.ln_mean, s.ln_rstd);
      d_in.reset();
      kernels::launch_residual_add<T>(d_x, d_ln.as<T>(), d_out, T_, H, stream);
    } else {
      kernels::launch_residual_add<T>(d_x, d_in.as<T>(), d_res, T_, H, stream);
    }
  }
};

}  // namespace

struct BaselineEncoderLayer::Impl {
  DeviceAllocator& allocator;
  Buf gemm_workspace;
  std::unique_ptr<Gemm> gemm;
  // The last forward and what its backward reads.
  bool have_forward = false;
  std::size_t batch = 0, len = 0;
  const void* x = nullptr;
  std::uint64_t seed = 0, base_offset = 0;
  AttentionSaved attn;
  Buf x1;  // the attention sub-layer's output, the FFN's input [T, H]
  FfnSaved ffn;

  explicit Impl(DeviceAllocator& a) : allocator(a) {}

  void release() {
    attn = AttentionSaved{};
    ffn = FfnSaved{};
    x1.reset();
    have_forward = false;
  }

  template <class T>
  Eager<T> eager(const LayerConfig& c, cudaStream_t stream, bool free_saved) const {
    const std::int64_t B = static_cast<std::int64_t>(batch), L = static_cast<std::int64_t>(len);
    const std::int64_t H = c.hidden, N = c.heads, d = H / N;
    return Eager<T>{c,
                    allocator,
                    *gemm,
                    stream,
                    B,
                    L,
                    B * L,
                    H,
                    c.ffn,
                    N,
                    d,
                    B * N * L * L,
                    static_cast<float>(1.0 / std::sqrt(static_cast<double>(d))),
                    static_cast<float>(c.layer_norm_eps),
                    free_saved};
  }

  // Dropout streams: base+0 probabilities, base+1 attention output, base+2 FFN activation, base+3
  // FFN output (EncoderLayer's and ref::encoder_layer_dropout_masks' order).
  SublayerDropout attention_dropout(const LayerConfig& c) const {
    return {{static_cast<float>(c.attn_dropout), seed, base_offset + 0},
            {static_cast<float>(c.hidden_dropout), seed, base_offset + 1}};
  }
  SublayerDropout ffn_dropout(const LayerConfig& c) const {
    return {{static_cast<float>(c.activation_dropout), seed, base_offset + 2},
            {static_cast<float>(c.hidden_dropout), seed, base_offset + 3}};
  }
};

BaselineEncoderLayer::BaselineEncoderLayer(const LayerConfig& config, const EncoderLayerWeights& weights,
                                           const EncoderLayerGrads& grads, DeviceAllocator& allocator,
                                           BaselineEncoderLayerOptions options)
    : config_(config), options_(options), weights_(weights), grads_(grads) {
  config_.validate();
  const std::string missing =
      null_parameters(weights_, grads_, [](auto& t, auto&& fn) { for_each_encoder_tensor(t, fn); });
  SEQBENCH_REQUIRE(missing.empty(), "BaselineEncoderLayer: null parameter pointer(s): " << missing);
  impl_ = std::make_unique<Impl>(allocator);
  impl_->gemm_workspace = Buf(allocator, options_.gemm_workspace_bytes);
}

BaselineEncoderLayer::~BaselineEncoderLayer() {
  if (impl_) impl_->release();  // saved tensors before the workspace, as Impl's members would anyway
}

void BaselineEncoderLayer::release() {
  impl_->release();
}

std::size_t BaselineEncoderLayer::saved_bytes() const {
  return impl_->attn.bytes() + impl_->x1.bytes() + impl_->ffn.bytes();
}

void BaselineEncoderLayer::forward(void* y, const void* x, std::size_t batch_size, std::size_t seq_len,
                                   const std::int32_t* key_lengths, std::uint64_t seed,
                                   std::uint64_t base_offset, cudaStream_t stream) {
  SEQBENCH_NVTX_RANGE("baseline_encoder_layer_fwd");
  config_.check_batch(batch_size, seq_len);
  SEQBENCH_REQUIRE(x != nullptr, "BaselineEncoderLayer::forward: x is null");
  SEQBENCH_REQUIRE(y != nullptr, "BaselineEncoderLayer::forward: y is null");
  const std::size_t bytes =
      batch_size * seq_len * static_cast<std::size_t>(config_.hidden) * dtype_size(config_.dtype);
  SEQBENCH_REQUIRE(!bytes_overlap(x, bytes, y, bytes), "BaselineEncoderLayer::forward: y overlaps x ("
                                                           << bytes
                                                           << " bytes each); backward needs x unchanged");
  SEQBENCH_REQUIRE(base_offset <= UINT64_MAX - kEncoderLayerDropoutOffsets,
                   "BaselineEncoderLayer::forward: base_offset " << base_offset << " leaves no room for the "
                                                                 << kEncoderLayerDropoutOffsets
                                                                 << " dropout streams");
  Impl& m = *impl_;
  m.release();  // the previous graph is dropped before this one is built
  if (!m.gemm) m.gemm = std::make_unique<Gemm>(m.gemm_workspace.get(), m.gemm_workspace.bytes());
  m.batch = batch_size;
  m.len = seq_len;
  m.seed = seed;
  m.base_offset = base_offset;
  kernels::SoftmaxMask mask;
  mask.causal = options_.causal;
  mask.key_lengths = key_lengths;
  dispatch_dtype(config_.dtype, [&](auto tag) {
    using T = decltype(tag);
    const Eager<T> e = m.template eager<T>(config_, stream, true);
    m.x1 = e.tensor(e.T_ * e.H);
    e.attention_forward(m.attn, m.x1.template as<T>(), static_cast<const T*>(x), weights_, mask,
                        m.attention_dropout(config_));
    e.ffn_forward(m.ffn, static_cast<T*>(y), m.x1.template as<T>(), weights_, m.ffn_dropout(config_));
  });
  m.have_forward = true;
  m.x = x;
}

void BaselineEncoderLayer::backward(void* dx, const void* dy, const void* x, cudaStream_t stream,
                                    bool retain_graph) {
  SEQBENCH_NVTX_RANGE("baseline_encoder_layer_bwd");
  Impl& m = *impl_;
  SEQBENCH_REQUIRE(m.have_forward,
                   "BaselineEncoderLayer::backward: no forward() to differentiate (call forward "
                   "first; a backward without retain_graph consumes its forward)");
  SEQBENCH_REQUIRE(dx != nullptr, "BaselineEncoderLayer::backward: dx is null");
  SEQBENCH_REQUIRE(dy != nullptr, "BaselineEncoderLayer::backward: dy is null");
  SEQBENCH_REQUIRE(x == m.x, "BaselineEncoderLayer::backward: x is not the last forward's input (got "
                                 << x << ", the forward ran on " << m.x << ")");
  dispatch_dtype(config_.dtype, [&](auto tag) {
    using T = decltype(tag);
    const Eager<T> e = m.template eager<T>(config_, stream, !retain_graph);
    Buf d_x1 = e.tensor(e.T_ * e.H);
    e.ffn_backward(m.ffn, d_x1.template as<T>(), static_cast<const T*>(dy), m.x1.template as<T>(), weights_,
                   grads_, m.ffn_dropout(config_));
    e.drop(m.x1);  // the FFN's input: nothing in the attention's backward reads it
    e.attention_backward(m.attn, static_cast<T*>(dx), d_x1.template as<T>(), static_cast<const T*>(x),
                         weights_, grads_, m.attention_dropout(config_));
  });
  if (!retain_graph) m.release();
}

}  // namespace seqbench::layers
