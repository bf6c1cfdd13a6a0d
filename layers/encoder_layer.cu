#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/nvtx.h"
#include "kernels/bias_act_dropout.h"
#include "kernels/bias_dropout_residual.h"
#include "kernels/dropout.h"
#include "kernels/layernorm.h"
#include "kernels/qkv_reshape.h"
#include "kernels/softmax.h"
#include "layers/encoder_layer.h"

namespace seqbench::layers {

namespace {

constexpr std::size_t kNone = static_cast<std::size_t>(-1);

// The ids of every planned tensor (kNone where the config does not use it). Filled by the dry
// run; indices into the MemoryManager's tensors, which are the recorder's lifetimes in order.
struct EncoderIds {
  TensorId x = kNone, y = kNone, dy = kNone, dx = kNone;
  TensorId gemm_ws = kNone;
  // Attention forward.
  TensorId attn_ln_out = kNone, attn_ln_mean = kNone, attn_ln_rstd = kNone;
  TensorId qkv_raw = kNone, qkv_heads = kNone, probs = kNone, probs_dropped = kNone;
  TensorId ctx_heads = kNone, ctx = kNone, out_raw = kNone, attn_residual = kNone, attn_out = kNone;
  // FFN forward.
  TensorId ffn_ln_out = kNone, ffn_ln_mean = kNone, ffn_ln_rstd = kNone;
  TensorId ff1_raw = kNone, act_out = kNone, ff2_raw = kNone, ffn_residual = kNone;
  // FFN backward.
  TensorId ffn_d_residual = kNone, ffn_ln_ws = kNone, d_ff2_raw = kNone, ffn_bdr_ws = kNone;
  TensorId d_act = kNone, d_ff1 = kNone, bad_ws = kNone, d_ff1_in = kNone, ffn_d_ln_in = kNone;
  TensorId d_attn_out = kNone;
  // Attention backward.
  TensorId attn_d_residual = kNone, attn_ln_ws = kNone, d_out_raw = kNone, attn_bdr_ws = kNone;
  TensorId d_ctx = kNone, d_ctx_heads = kNone, d_qkv_heads = kNone, d_probs_dropped = kNone;
  TensorId d_probs = kNone, d_qkv = kNone, qkv_ws = kNone, d_qkv_in = kNone, attn_d_ln_in = kNone;
};

// max over rows in [1, max_rows] of f(rows): the workspace functions are not monotone in rows
// (their row tiles and chunks are rounded), so the plan takes the largest any batch can need.
template <class Fn>
std::size_t max_over_rows(std::int64_t max_rows, Fn&& f) {
  std::size_t most = 0;
  for (std::int64_t r = 1; r <= max_rows; ++r) most = std::max(most, f(r));
  return most;
}

struct Recorded {
  EncoderIds ids;
  int forward_steps = 0;
  std::vector<TensorLifetime> lifetimes;
  std::vector<std::string> ops;
};

// The dry run. Every op here is one step; forward() and backward() execute exactly these ops in
// this order (each announces its name, checked against ops[step]).
Recorded record_encoder_layer(const LayerConfig& c, const EncoderLayerOptions& o) {
  c.validate();
  LifetimeRecorder rec;
  EncoderIds id;
  const std::string& p = o.prefix;
  const std::string a = p + "attn.";
  const std::string f = p + "ffn.";
  const std::size_t e = dtype_size(c.dtype);
  const std::int64_t tm = c.max_batch_tokens;
  const std::size_t T = static_cast<std::size_t>(c.max_batch_tokens);
  const std::size_t H = static_cast<std::size_t>(c.hidden);
  const std::size_t F = static_cast<std::size_t>(c.ffn);
  const std::size_t S = encoder_layer_max_score_elements(c) * static_cast<std::size_t>(c.heads);
  const bool pre = c.pre_layer_norm;
  const bool attn_drop = c.attn_dropout > 0.0;
  const auto act = [&](const std::string& name, std::size_t elements) {
    return rec.tensor(name, elements * e);
  };
  const auto stat = [&](const std::string& name) { return rec.tensor(name, T * sizeof(float)); };
  const auto with_ws = [&](std::vector<TensorId> ids) {
    if (id.gemm_ws != kNone) ids.push_back(id.gemm_ws);
    return ids;
  };

  id.x = rec.external("x");
  id.y = rec.external("y");
  id.dy = rec.external("dy");
  id.dx = rec.external("dx");
  if (o.gemm == nullptr) id.gemm_ws = rec.tensor(p + "gemm_workspace", o.gemm_workspace_bytes);

  const std::size_t ln_ws = max_over_rows(
      tm, [&](std::int64_t r) { return kernels::layernorm_backward_workspace_bytes(r, c.hidden); });
  const std::size_t bdr_ws = max_over_rows(
      tm, [&](std::int64_t r) { return kernels::bias_dropout_residual_bwd_workspace_bytes(r, c.hidden); });
  const std::size_t bad_ws = max_over_rows(
      tm, [&](std::int64_t r) { return kernels::bias_act_dropout_bwd_workspace_bytes(r, c.ffn); });
  const std::size_t qkv_ws = max_over_rows(tm, [&](std::int64_t r) {
    kernels::HeadsShape s;
    s.batch = r;  // the workspace depends on rows = batch·len and the columns only
    s.len = 1;
    s.heads = c.heads;
    s.hidden = c.hidden;
    s.projections = 3;
    return kernels::qkv_bias_split_bwd_workspace_bytes(s);
  });

  // ---- forward: attention
  TensorId attn_in = id.x;
  id.attn_ln_mean = stat(a + "ln_mean");
  id.attn_ln_rstd = stat(a + "ln_rstd");
  if (pre) {
    id.attn_ln_out = act(a + "ln_out", T * H);
    rec.op(a + "ln", {id.x}, {id.attn_ln_out, id.attn_ln_mean, id.attn_ln_rstd});
    attn_in = id.attn_ln_out;
  }
  id.qkv_raw = act(a + "qkv_raw", T * 3 * H);
  rec.op(a + "qkv_gemm", {attn_in}, with_ws({id.qkv_raw}));
  id.qkv_heads = act(a + "qkv_heads", 3 * T * H);
  rec.op(a + "qkv_bias_split", {id.qkv_raw}, {id.qkv_heads});
  id.probs = act(a + "probs", S);
  rec.op(a + "scores_gemm", {id.qkv_heads}, with_ws({id.probs}));
  rec.op(a + "softmax", {id.probs}, {id.probs});
  TensorId context_probs = id.probs;
  if (attn_drop) {
    id.probs_dropped = act(a + "probs_dropped", S);
    rec.op(a + "probs_dropout", {id.probs}, {id.probs_dropped});
    context_probs = id.probs_dropped;
  }
  id.ctx_heads = act(a + "ctx_heads", T * H);
  rec.op(a + "context_gemm", {context_probs, id.qkv_heads}, with_ws({id.ctx_heads}));
  id.ctx = act(a + "ctx", T * H);
  rec.op(a + "merge_heads", {id.ctx_heads}, {id.ctx});
  id.out_raw = act(a + "out_raw", T * H);
  rec.op(a + "out_gemm", {id.ctx}, with_ws({id.out_raw}));
  id.attn_out = act(p + "attn_out", T * H);
  if (pre) {
    rec.op(a + "bias_dropout_residual", {id.out_raw, id.x}, {id.attn_out});
  } else {
    id.attn_residual = act(a + "residual", T * H);
    rec.op(a + "bias_dropout_residual", {id.out_raw, id.x}, {id.attn_residual});
    rec.op(a + "ln", {id.attn_residual}, {id.attn_out, id.attn_ln_mean, id.attn_ln_rstd});
  }

  // ---- forward: FFN
  TensorId ffn_in = id.attn_out;
  id.ffn_ln_mean = stat(f + "ln_mean");
  id.ffn_ln_rstd = stat(f + "ln_rstd");
  if (pre) {
    id.ffn_ln_out = act(f + "ln_out", T * H);
    rec.op(f + "ln", {id.attn_out}, {id.ffn_ln_out, id.ffn_ln_mean, id.ffn_ln_rstd});
    ffn_in = id.ffn_ln_out;
  }
  id.ff1_raw = act(f + "ff1_raw", T * F);
  rec.op(f + "ff1_gemm", {ffn_in}, with_ws({id.ff1_raw}));
  id.act_out = act(f + "act_out", T * F);
  rec.op(f + "bias_act_dropout", {id.ff1_raw}, {id.act_out});
  id.ff2_raw = act(f + "ff2_raw", T * H);
  rec.op(f + "ff2_gemm", {id.act_out}, with_ws({id.ff2_raw}));
  if (pre) {
    rec.op(f + "bias_dropout_residual", {id.ff2_raw, id.attn_out}, {id.y});
  } else {
    id.ffn_residual = act(f + "residual", T * H);
    rec.op(f + "bias_dropout_residual", {id.ff2_raw, id.attn_out}, {id.ffn_residual});
    rec.op(f + "ln", {id.ffn_residual}, {id.y, id.ffn_ln_mean, id.ffn_ln_rstd});
  }
  const int forward_steps = rec.steps();

  // ---- backward: FFN
  TensorId ffn_d_sub = id.dy;
  if (!pre) {
    id.ffn_d_residual = act(f + "d_residual", T * H);
    id.ffn_ln_ws = rec.tensor(f + "ln_bwd_ws", ln_ws);
    rec.op(f + "ln_bwd", {id.dy, id.ffn_residual, id.ffn_ln_mean, id.ffn_ln_rstd},
           {id.ffn_d_residual, id.ffn_ln_ws});
    ffn_d_sub = id.ffn_d_residual;
  }
  id.d_ff2_raw = act(f + "d_ff2_raw", T * H);
  id.ffn_bdr_ws = rec.tensor(f + "bias_dropout_residual_bwd_ws", bdr_ws);
  rec.op(f + "bias_dropout_residual_bwd", {ffn_d_sub}, {id.d_ff2_raw, id.ffn_bdr_ws});
  id.d_act = act(f + "d_act", T * F);
  rec.op(f + "ff2_gemm_bwd", {id.d_ff2_raw, id.act_out}, with_ws({id.d_act}));
  id.d_ff1 = act(f + "d_ff1", T * F);
  id.bad_ws = rec.tensor(f + "bias_act_dropout_bwd_ws", bad_ws);
  rec.op(f + "bias_act_dropout_bwd", {id.d_act, id.ff1_raw}, {id.d_ff1, id.bad_ws});
  id.d_ff1_in = act(f + "d_ff1_in", T * H);
  rec.op(f + "ff1_gemm_bwd", {id.d_ff1, ffn_in}, with_ws({id.d_ff1_in}));
  id.d_attn_out = act(p + "d_attn_out", T * H);
  if (pre) {
    id.ffn_d_ln_in = act(f + "d_ln_in", T * H);
    id.ffn_ln_ws = rec.tensor(f + "ln_bwd_ws", ln_ws);
    rec.op(f + "ln_bwd", {id.d_ff1_in, id.attn_out, id.ffn_ln_mean, id.ffn_ln_rstd},
           {id.ffn_d_ln_in, id.ffn_ln_ws});
    rec.op(f + "residual_add_bwd", {id.ffn_d_ln_in, id.dy}, {id.d_attn_out});
  } else {
    rec.op(f + "residual_add_bwd", {id.d_ff1_in, id.ffn_d_residual}, {id.d_attn_out});
  }

  // ---- backward: attention
  TensorId attn_d_sub = id.d_attn_out;
  if (!pre) {
    id.attn_d_residual = act(a + "d_residual", T * H);
    id.attn_ln_ws = rec.tensor(a + "ln_bwd_ws", ln_ws);
    rec.op(a + "ln_bwd", {id.d_attn_out, id.attn_residual, id.attn_ln_mean, id.attn_ln_rstd},
           {id.attn_d_residual, id.attn_ln_ws});
    attn_d_sub = id.attn_d_residual;
  }
  id.d_out_raw = act(a + "d_out_raw", T * H);
  id.attn_bdr_ws = rec.tensor(a + "bias_dropout_residual_bwd_ws", bdr_ws);
  rec.op(a + "bias_dropout_residual_bwd", {attn_d_sub}, {id.d_out_raw, id.attn_bdr_ws});
  id.d_ctx = act(a + "d_ctx", T * H);
  rec.op(a + "out_gemm_bwd", {id.d_out_raw, id.ctx}, with_ws({id.d_ctx}));
  id.d_ctx_heads = act(a + "d_ctx_heads", T * H);
  rec.op(a + "ctx_split_bwd", {id.d_ctx}, {id.d_ctx_heads});
  id.d_qkv_heads = act(a + "d_qkv_heads", 3 * T * H);  // dQ, dK, dV written in place per head
  id.d_probs = act(a + "d_probs", S);
  if (attn_drop) {
    id.d_probs_dropped = act(a + "d_probs_dropped", S);
    rec.op(a + "context_gemm_bwd", {id.d_ctx_heads, context_probs, id.qkv_heads},
           with_ws({id.d_qkv_heads, id.d_probs_dropped}));
    rec.op(a + "probs_dropout_bwd", {id.d_probs_dropped}, {id.d_probs});
  } else {
    rec.op(a + "context_gemm_bwd", {id.d_ctx_heads, context_probs, id.qkv_heads},
           with_ws({id.d_qkv_heads, id.d_probs}));
  }
  rec.op(a + "softmax_bwd", {id.d_probs, id.probs}, {id.d_probs});
  rec.op(a + "scores_gemm_bwd", {id.d_probs, id.qkv_heads}, with_ws({id.d_qkv_heads}));
  id.d_qkv = act(a + "d_qkv", T * 3 * H);
  id.qkv_ws = rec.tensor(a + "qkv_bias_split_bwd_ws", qkv_ws);
  rec.op(a + "qkv_bias_split_bwd", {id.d_qkv_heads}, {id.d_qkv, id.qkv_ws});
  id.d_qkv_in = act(a + "d_qkv_in", T * H);
  rec.op(a + "qkv_gemm_bwd", {id.d_qkv, attn_in}, with_ws({id.d_qkv_in}));
  if (pre) {
    id.attn_d_ln_in = act(a + "d_ln_in", T * H);
    id.attn_ln_ws = rec.tensor(a + "ln_bwd_ws", ln_ws);
    rec.op(a + "ln_bwd", {id.d_qkv_in, id.x, id.attn_ln_mean, id.attn_ln_rstd},
           {id.attn_d_ln_in, id.attn_ln_ws});
    rec.op(a + "residual_add_bwd", {id.attn_d_ln_in, id.d_attn_out}, {id.dx});
  } else {
    rec.op(a + "residual_add_bwd", {id.d_qkv_in, id.attn_d_residual}, {id.dx});
  }

  Recorded r;
  r.ids = id;
  r.forward_steps = forward_steps;
  r.lifetimes = rec.lifetimes();
  r.ops = rec.ops();
  return r;
}

kernels::Activation kernel_activation(Activation a) {
  switch (a) {
    case Activation::relu:
      return kernels::Activation::relu;
    case Activation::gelu:
      return kernels::Activation::gelu_erf;
    case Activation::gelu_tanh:
      break;
  }
  return kernels::Activation::gelu_tanh;
}

// Row-major nn.Linear products (W [out, in]):
//   forward  out[rows, out_f] = in[rows, in_f] · Wᵀ
//   dX       dx[rows, in_f]   = dy[rows, out_f] · W
//   dW       dw[out_f, in_f]  = dyᵀ · in
GemmProblem linear_forward(const void* in, const void* w, void* out, std::int64_t rows, std::int64_t out_f,
                           std::int64_t in_f) {
  GemmProblem g;
  g.op_a = GemmOp::none;
  g.op_b = GemmOp::transpose;
  g.m = rows;
  g.n = out_f;
  g.k = in_f;
  g.a = in;
  g.lda = in_f;
  g.b = w;
  g.ldb = in_f;
  g.d = out;
  g.ldc = out_f;
  return g;
}

GemmProblem linear_dx(const void* dy, const void* w, void* dx, std::int64_t rows, std::int64_t out_f,
                      std::int64_t in_f) {
  GemmProblem g;
  g.m = rows;
  g.n = in_f;
  g.k = out_f;
  g.a = dy;
  g.lda = out_f;
  g.b = w;
  g.ldb = in_f;
  g.d = dx;
  g.ldc = in_f;
  return g;
}

GemmProblem linear_dw(const void* dy, const void* in, void* dw, std::int64_t rows, std::int64_t out_f,
                      std::int64_t in_f) {
  GemmProblem g;
  g.op_a = GemmOp::transpose;  // dy stored [rows, out_f] = [k, m]
  g.m = out_f;
  g.n = in_f;
  g.k = rows;
  g.a = dy;
  g.lda = out_f;
  g.b = in;
  g.ldb = in_f;
  g.d = dw;
  g.ldc = in_f;
  return g;
}

// One product per (batch, head): D_i = alpha · op(A_i) · op(B_i), i < count, with every operand a
// packed [rows, cols] matrix per head (stride rows·cols).
GemmProblem per_head(GemmOp op_a, const void* a, std::int64_t a_rows, std::int64_t a_cols, GemmOp op_b,
                     const void* b, std::int64_t b_rows, std::int64_t b_cols, void* d, std::int64_t count,
                     float alpha) {
  GemmProblem g;
  g.op_a = op_a;
  g.op_b = op_b;
  g.m = op_a == GemmOp::none ? a_rows : a_cols;
  g.k = op_a == GemmOp::none ? a_cols : a_rows;
  g.n = op_b == GemmOp::none ? b_cols : b_rows;
  g.a = a;
  g.lda = a_cols;
  g.b = b;
  g.ldb = b_cols;
  g.d = d;
  g.ldc = g.n;
  g.alpha = alpha;
  g.batch_count = count;
  g.stride_a = a_rows * a_cols;
  g.stride_b = b_rows * b_cols;
  g.stride_c = g.m * g.n;
  return g;
}

bool overlap(const void* a, std::size_t a_bytes, const void* b, std::size_t b_bytes) {
  if (a == nullptr || b == nullptr || a_bytes == 0 || b_bytes == 0) return false;
  const auto pa = reinterpret_cast<std::uintptr_t>(a);
  const auto pb = reinterpret_cast<std::uintptr_t>(b);
  return pa < pb + b_bytes && pb < pa + a_bytes;
}

}  // namespace

std::size_t encoder_layer_max_score_elements(const LayerConfig& config) {
  config.validate();
  const std::size_t tm = static_cast<std::size_t>(config.max_batch_tokens);
  const std::size_t lm = static_cast<std::size_t>(config.max_seq_len);
  std::size_t most = 0;
  for (std::size_t len = 1; len <= lm; ++len) most = std::max(most, (tm / len) * len * len);
  return most;
}

std::vector<EncoderTensorShape> encoder_layer_parameter_shapes(const LayerConfig& config) {
  config.validate();
  const std::size_t H = static_cast<std::size_t>(config.hidden);
  const std::size_t F = static_cast<std::size_t>(config.ffn);
  return {{"attn_ln_gamma", 1, H}, {"attn_ln_beta", 1, H}, {"qkv_weight", 3 * H, H}, {"qkv_bias", 1, 3 * H},
          {"out_weight", H, H},    {"out_bias", 1, H},     {"ffn_ln_gamma", 1, H},   {"ffn_ln_beta", 1, H},
          {"fc1_weight", F, H},    {"fc1_bias", 1, F},     {"fc2_weight", H, F},     {"fc2_bias", 1, H}};
}

std::vector<TensorLifetime> encoder_layer_lifetimes(const LayerConfig& config,
                                                    const EncoderLayerOptions& options,
                                                    std::vector<std::string>* ops, int* forward_ops) {
  Recorded r = record_encoder_layer(config, options);
  if (ops != nullptr) *ops = r.ops;
  if (forward_ops != nullptr) *forward_ops = r.forward_steps;
  return std::move(r.lifetimes);
}

// ---------------------------------------------------------------------------------------------

struct EncoderLayer::Impl {
  EncoderIds ids;
  int forward_steps = 0;
  std::vector<std::string> ops;
  int step = 0;
  void* gemm_workspace = nullptr;
  std::size_t gemm_workspace_bytes = 0;
  std::unique_ptr<Gemm> own_gemm;
  // The last forward, which backward() differentiates.
  bool have_forward = false;
  std::size_t batch = 0, len = 0;
  const void* x = nullptr;
  std::uint64_t seed = 0, base_offset = 0;
};

EncoderLayer::EncoderLayer(const LayerConfig& config, const EncoderLayerWeights& weights,
                           const EncoderLayerGrads& grads, DeviceAllocator& allocator,
                           EncoderLayerOptions options)
    : config_(config), options_(std::move(options)), weights_(weights), grads_(grads) {
  config_.validate();
  std::string missing;
  for_each_encoder_tensor(weights_, [&](const char* name, const void* ptr) {
    if (ptr == nullptr) missing += std::string(missing.empty() ? "" : ", ") + "weights." + name;
  });
  for_each_encoder_tensor(grads_, [&](const char* name, void* ptr) {
    if (ptr == nullptr) missing += std::string(missing.empty() ? "" : ", ") + "grads." + name;
  });
  SEQBENCH_REQUIRE(missing.empty(), "EncoderLayer: null parameter pointer(s): " << missing);
  SEQBENCH_REQUIRE(!options_.prefix.empty(),
                   "EncoderLayer: options.prefix is empty (the planned tensors' names)");
  Recorded r = record_encoder_layer(config_, options_);  // host only
  impl_ = std::make_unique<Impl>();
  impl_->ids = r.ids;
  impl_->forward_steps = r.forward_steps;
  impl_->ops = std::move(r.ops);
  memory_ = std::make_unique<MemoryManager>(std::move(r.lifetimes), allocator);  // the one allocation
  if (impl_->ids.gemm_ws != kNone) {
    impl_->gemm_workspace_bytes = options_.gemm_workspace_bytes;
    impl_->gemm_workspace = memory_->get(impl_->ids.gemm_ws, impl_->gemm_workspace_bytes);
  }
}

EncoderLayer::~EncoderLayer() = default;

Gemm& EncoderLayer::ensure_gemm() {
  if (options_.gemm != nullptr) return *options_.gemm;
  if (!impl_->own_gemm)
    impl_->own_gemm = std::make_unique<Gemm>(impl_->gemm_workspace, impl_->gemm_workspace_bytes);
  return *impl_->own_gemm;
}

std::size_t EncoderLayer::block_bytes() const {
  return memory_->block_bytes();
}

namespace {

// The execution of the dry run's ops for one dtype. Each op() call names the op it starts; the
// name must be the dry run's at that step, and the MemoryManager then refuses tensors outside
// their lifetimes.
template <class T>
class EncoderRun {
 public:
  EncoderRun(const LayerConfig& c, const EncoderLayerOptions& o, const EncoderLayerWeights& w,
             const EncoderLayerGrads& g, MemoryManager& mem, const EncoderIds& ids,
             const std::vector<std::string>& ops, int first_step, Gemm& gemm, std::size_t batch,
             std::size_t len, std::uint64_t seed, std::uint64_t base, cudaStream_t stream)
      : c_(c),
        o_(o),
        w_(w),
        g_(g),
        mem_(mem),
        id_(ids),
        ops_(ops),
        step_(first_step),
        gemm_(gemm),
        B_(static_cast<std::int64_t>(batch)),
        L_(static_cast<std::int64_t>(len)),
        stream_(stream) {
    rows_ = B_ * L_;
    H_ = c.hidden;
    Hi_ = c.hidden;
    F_ = c.ffn;
    N_ = c.heads;
    d_ = H_ / N_;
    S_ = B_ * N_ * L_ * L_;
    scale_ = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d_)));
    eps_ = static_cast<float>(c.layer_norm_eps);
    const float p_attn = static_cast<float>(c.attn_dropout);
    const float p_hidden = static_cast<float>(c.hidden_dropout);
    const float p_act = static_cast<float>(c.activation_dropout);
    drop_probs_ = {p_attn, seed, base + 0};
    drop_attn_ = {p_hidden, seed, base + 1};
    drop_act_ = {p_act, seed, base + 2};
    drop_ffn_ = {p_hidden, seed, base + 3};
  }

  void forward(T* y, const T* x, const std::int32_t* key_lengths) {
    const bool pre = c_.pre_layer_norm;
    const T* attn_in = x;
    if (pre) {
      op("attn.ln");
      T* ln_out = act(id_.attn_ln_out, rows_ * H_);
      kernels::launch_layernorm_forward<T>(ln_out, stat(id_.attn_ln_mean), stat(id_.attn_ln_rstd), x,
                                           w<T>(w_.attn_ln_gamma), w<T>(w_.attn_ln_beta), rows_, Hi_, eps_,
                                           stream_);
      attn_in = ln_out;
    }
    op("attn.qkv_gemm");
    T* qkv_raw = act(id_.qkv_raw, rows_ * 3 * H_);
    run(linear_forward(attn_in, w_.qkv_weight, qkv_raw, rows_, 3 * H_, H_));
    op("attn.qkv_bias_split");
    T* qkv_heads = act(id_.qkv_heads, 3 * rows_ * H_);
    kernels::launch_qkv_bias_split_fwd<T>(qkv_heads, qkv_raw, w<T>(w_.qkv_bias), heads_shape(3), stream_);
    const T* q = qkv_heads;
    const T* k = qkv_heads + rows_ * H_;
    const T* v = qkv_heads + 2 * rows_ * H_;
    op("attn.scores_gemm");
    T* probs = act(id_.probs, S_);
    run(per_head(GemmOp::none, q, L_, d_, GemmOp::transpose, k, L_, d_, probs, B_ * N_, scale_));
    op("attn.softmax");
    kernels::SoftmaxMask mask;
    mask.causal = o_.causal;
    mask.key_lengths = key_lengths;
    kernels::launch_softmax_forward<T>(probs, probs, softmax_shape(), 1.0f, mask, stream_);
    const T* context_probs = probs;
    if (c_.attn_dropout > 0.0) {
      op("attn.probs_dropout");
      T* dropped = act(id_.probs_dropped, S_);
      kernels::launch_dropout_fwd<T>(dropped, probs, static_cast<std::size_t>(S_), drop_probs_, nullptr, 0,
                                     stream_);
      context_probs = dropped;
    }
    op("attn.context_gemm");
    T* ctx_heads = act(id_.ctx_heads, rows_ * H_);
    run(per_head(GemmOp::none, context_probs, L_, L_, GemmOp::none, v, L_, d_, ctx_heads, B_ * N_, 1.0f));
    op("attn.merge_heads");
    T* ctx = act(id_.ctx, rows_ * H_);
    kernels::launch_merge_heads<T>(ctx, ctx_heads, heads_shape(1), stream_);
    op("attn.out_gemm");
    T* out_raw = act(id_.out_raw, rows_ * H_);
    run(linear_forward(ctx, w_.out_weight, out_raw, rows_, H_, H_));
    op("attn.bias_dropout_residual");
    T* attn_out = nullptr;
    if (pre) {
      attn_out = act(id_.attn_out, rows_ * H_);
      kernels::launch_bias_dropout_residual_fwd<T>(attn_out, out_raw, w<T>(w_.out_bias), x, rows_, H_,
                                                   drop_attn_, stream_);
    } else {
      T* residual = act(id_.attn_residual, rows_ * H_);
      kernels::launch_bias_dropout_residual_fwd<T>(residual, out_raw, w<T>(w_.out_bias), x, rows_, H_,
                                                   drop_attn_, stream_);
      op("attn.ln");
      attn_out = act(id_.attn_out, rows_ * H_);
      kernels::launch_layernorm_forward<T>(attn_out, stat(id_.attn_ln_mean), stat(id_.attn_ln_rstd), residual,
                                           w<T>(w_.attn_ln_gamma), w<T>(w_.attn_ln_beta), rows_, Hi_, eps_,
                                           stream_);
    }

    const T* ffn_in = attn_out;
    if (pre) {
      op("ffn.ln");
      T* ln_out = act(id_.ffn_ln_out, rows_ * H_);
      kernels::launch_layernorm_forward<T>(ln_out, stat(id_.ffn_ln_mean), stat(id_.ffn_ln_rstd), attn_out,
                                           w<T>(w_.ffn_ln_gamma), w<T>(w_.ffn_ln_beta), rows_, Hi_, eps_,
                                           stream_);
      ffn_in = ln_out;
    }
    op("ffn.ff1_gemm");
    T* ff1_raw = act(id_.ff1_raw, rows_ * F_);
    run(linear_forward(ffn_in, w_.fc1_weight, ff1_raw, rows_, F_, H_));
    op("ffn.bias_act_dropout");
    T* act_out = act(id_.act_out, rows_ * F_);
    kernels::launch_bias_act_dropout_fwd<T>(act_out, ff1_raw, w<T>(w_.fc1_bias), rows_, F_,
                                            kernel_activation(c_.activation), drop_act_, stream_);
    op("ffn.ff2_gemm");
    T* ff2_raw = act(id_.ff2_raw, rows_ * H_);
    run(linear_forward(act_out, w_.fc2_weight, ff2_raw, rows_, H_, F_));
    op("ffn.bias_dropout_residual");
    if (pre) {
      kernels::launch_bias_dropout_residual_fwd<T>(y, ff2_raw, w<T>(w_.fc2_bias), attn_out, rows_, H_,
                                                   drop_ffn_, stream_);
    } else {
      T* residual = act(id_.ffn_residual, rows_ * H_);
      kernels::launch_bias_dropout_residual_fwd<T>(residual, ff2_raw, w<T>(w_.fc2_bias), attn_out, rows_, H_,
                                                   drop_ffn_, stream_);
      op("ffn.ln");
      kernels::launch_layernorm_forward<T>(y, stat(id_.ffn_ln_mean), stat(id_.ffn_ln_rstd), residual,
                                           w<T>(w_.ffn_ln_gamma), w<T>(w_.ffn_ln_beta), rows_, Hi_, eps_,
                                           stream_);
    }
  }

  void backward(T* dx, const T* dy, const T* x) {
    const bool pre = c_.pre_layer_norm;
    // ---- FFN
    const T* ffn_d_sub = dy;
    T* ffn_d_residual = nullptr;
    if (!pre) {
      op("ffn.ln_bwd");
      ffn_d_residual = act(id_.ffn_d_residual, rows_ * H_);
      const std::size_t need = kernels::layernorm_backward_workspace_bytes(rows_, Hi_);
      kernels::launch_layernorm_backward<T>(ffn_d_residual, g<T>(g_.ffn_ln_gamma), g<T>(g_.ffn_ln_beta), dy,
                                            act(id_.ffn_residual, rows_ * H_), w<T>(w_.ffn_ln_gamma),
                                            stat(id_.ffn_ln_mean), stat(id_.ffn_ln_rstd), rows_, Hi_,
                                            mem_.get(id_.ffn_ln_ws, need), need, stream_);
      ffn_d_sub = ffn_d_residual;
    }
    op("ffn.bias_dropout_residual_bwd");
    T* d_ff2 = act(id_.d_ff2_raw, rows_ * H_);
    {
      const std::size_t need = kernels::bias_dropout_residual_bwd_workspace_bytes(rows_, H_);
      kernels::launch_bias_dropout_residual_bwd<T>(d_ff2, g<T>(g_.fc2_bias), ffn_d_sub, rows_, H_, drop_ffn_,
                                                   mem_.get(id_.ffn_bdr_ws, need), need, stream_);
    }
    op("ffn.ff2_gemm_bwd");
    T* d_act = act(id_.d_act, rows_ * F_);
    run(linear_dx(d_ff2, w_.fc2_weight, d_act, rows_, H_, F_));
    run(linear_dw(d_ff2, act(id_.act_out, rows_ * F_), g_.fc2_weight, rows_, H_, F_));
    op("ffn.bias_act_dropout_bwd");
    T* d_ff1 = act(id_.d_ff1, rows_ * F_);
    {
      const std::size_t need = kernels::bias_act_dropout_bwd_workspace_bytes(rows_, F_);
      kernels::launch_bias_act_dropout_bwd<T>(d_ff1, g<T>(g_.fc1_bias), d_act, act(id_.ff1_raw, rows_ * F_),
                                              w<T>(w_.fc1_bias), rows_, F_, kernel_activation(c_.activation),
                                              drop_act_, mem_.get(id_.bad_ws, need), need, stream_);
    }
    op("ffn.ff1_gemm_bwd");
    T* d_ff1_in = act(id_.d_ff1_in, rows_ * H_);
    const T* ffn_in = act(pre ? id_.ffn_ln_out : id_.attn_out, rows_ * H_);
    run(linear_dx(d_ff1, w_.fc1_weight, d_ff1_in, rows_, F_, H_));
    run(linear_dw(d_ff1, ffn_in, g_.fc1_weight, rows_, F_, H_));
    T* d_attn_out = nullptr;
    if (pre) {
      op("ffn.ln_bwd");
      T* d_ln = act(id_.ffn_d_ln_in, rows_ * H_);
      const std::size_t need = kernels::layernorm_backward_workspace_bytes(rows_, Hi_);
      kernels::launch_layernorm_backward<T>(d_ln, g<T>(g_.ffn_ln_gamma), g<T>(g_.ffn_ln_beta), d_ff1_in,
                                            act(id_.attn_out, rows_ * H_), w<T>(w_.ffn_ln_gamma),
                                            stat(id_.ffn_ln_mean), stat(id_.ffn_ln_rstd), rows_, Hi_,
                                            mem_.get(id_.ffn_ln_ws, need), need, stream_);
      op("ffn.residual_add_bwd");
      d_attn_out = act(id_.d_attn_out, rows_ * H_);
      kernels::launch_residual_add<T>(d_attn_out, d_ln, dy, rows_, H_, stream_);
    } else {
      op("ffn.residual_add_bwd");
      d_attn_out = act(id_.d_attn_out, rows_ * H_);
      kernels::launch_residual_add<T>(d_attn_out, d_ff1_in, ffn_d_residual, rows_, H_, stream_);
    }

    // ---- attention
    const T* attn_d_sub = d_attn_out;
    T* attn_d_residual = nullptr;
    if (!pre) {
      op("attn.ln_bwd");
      attn_d_residual = act(id_.attn_d_residual, rows_ * H_);
      const std::size_t need = kernels::layernorm_backward_workspace_bytes(rows_, Hi_);
      kernels::launch_layernorm_backward<T>(
          attn_d_residual, g<T>(g_.attn_ln_gamma), g<T>(g_.attn_ln_beta), d_attn_out,
          act(id_.attn_residual, rows_ * H_), w<T>(w_.attn_ln_gamma), stat(id_.attn_ln_mean),
          stat(id_.attn_ln_rstd), rows_, Hi_, mem_.get(id_.attn_ln_ws, need), need, stream_);
      attn_d_sub = attn_d_residual;
    }
    op("attn.bias_dropout_residual_bwd");
    T* d_out_raw = act(id_.d_out_raw, rows_ * H_);
    {
      const std::size_t need = kernels::bias_dropout_residual_bwd_workspace_bytes(rows_, H_);
      kernels::launch_bias_dropout_residual_bwd<T>(d_out_raw, g<T>(g_.out_bias), attn_d_sub, rows_, H_,
                                                   drop_attn_, mem_.get(id_.attn_bdr_ws, need), need,
                                                   stream_);
    }
    op("attn.out_gemm_bwd");
    T* d_ctx = act(id_.d_ctx, rows_ * H_);
    run(linear_dx(d_out_raw, w_.out_weight, d_ctx, rows_, H_, H_));
    run(linear_dw(d_out_raw, act(id_.ctx, rows_ * H_), g_.out_weight, rows_, H_, H_));
    op("attn.ctx_split_bwd");
    T* d_ctx_heads = act(id_.d_ctx_heads, rows_ * H_);
    kernels::launch_split_heads<T>(d_ctx_heads, d_ctx, heads_shape(1), stream_);
    op("attn.context_gemm_bwd");
    const T* qkv_heads = act(id_.qkv_heads, 3 * rows_ * H_);
    const T* q = qkv_heads;
    const T* k = qkv_heads + rows_ * H_;
    const T* v = qkv_heads + 2 * rows_ * H_;
    T* d_qkv_heads = act(id_.d_qkv_heads, 3 * rows_ * H_);
    T* dq = d_qkv_heads;
    T* dk = d_qkv_heads + rows_ * H_;
    T* dv = d_qkv_heads + 2 * rows_ * H_;
    const bool attn_drop = c_.attn_dropout > 0.0;
    const T* context_probs = act(attn_drop ? id_.probs_dropped : id_.probs, S_);
    T* d_probs_first = act(attn_drop ? id_.d_probs_dropped : id_.d_probs, S_);
    // dV = P_dropᵀ · dC and dP_drop = dC · Vᵀ, per (batch, head).
    run(per_head(GemmOp::transpose, context_probs, L_, L_, GemmOp::none, d_ctx_heads, L_, d_, dv, B_ * N_,
                 1.0f));
    run(per_head(GemmOp::none, d_ctx_heads, L_, d_, GemmOp::transpose, v, L_, d_, d_probs_first, B_ * N_,
                 1.0f));
    T* d_probs = d_probs_first;
    if (attn_drop) {
      op("attn.probs_dropout_bwd");
      d_probs = act(id_.d_probs, S_);
      kernels::launch_dropout_bwd_regenerate<T>(d_probs, d_probs_first, static_cast<std::size_t>(S_),
                                                drop_probs_, stream_);
    }
    op("attn.softmax_bwd");
    // dS' = softmax'(d_probs) with scale 1 (the scale lives in the GEMMs' alpha), in place.
    kernels::launch_softmax_backward<T>(d_probs, d_probs, act(id_.probs, S_), softmax_shape(), 1.0f, stream_);
    op("attn.scores_gemm_bwd");
    // scores = scale · Q Kᵀ: dQ = scale · dS' K, dK = scale · dS'ᵀ Q.
    run(per_head(GemmOp::none, d_probs, L_, L_, GemmOp::none, k, L_, d_, dq, B_ * N_, scale_));
    run(per_head(GemmOp::transpose, d_probs, L_, L_, GemmOp::none, q, L_, d_, dk, B_ * N_, scale_));
    op("attn.qkv_bias_split_bwd");
    T* d_qkv = act(id_.d_qkv, rows_ * 3 * H_);
    {
      const kernels::HeadsShape shape = heads_shape(3);
      const std::size_t need = kernels::qkv_bias_split_bwd_workspace_bytes(shape);
      kernels::launch_qkv_bias_split_bwd<T>(d_qkv, g<T>(g_.qkv_bias), d_qkv_heads, shape,
                                            mem_.get(id_.qkv_ws, need), need, stream_);
    }
    op("attn.qkv_gemm_bwd");
    T* d_qkv_in = act(id_.d_qkv_in, rows_ * H_);
    const T* attn_in = pre ? act(id_.attn_ln_out, rows_ * H_) : x;
    run(linear_dx(d_qkv, w_.qkv_weight, d_qkv_in, rows_, 3 * H_, H_));
    run(linear_dw(d_qkv, attn_in, g_.qkv_weight, rows_, 3 * H_, H_));
    if (pre) {
      op("attn.ln_bwd");
      T* d_ln = act(id_.attn_d_ln_in, rows_ * H_);
      const std::size_t need = kernels::layernorm_backward_workspace_bytes(rows_, Hi_);
      kernels::launch_layernorm_backward<T>(d_ln, g<T>(g_.attn_ln_gamma), g<T>(g_.attn_ln_beta), d_qkv_in, x,
                                            w<T>(w_.attn_ln_gamma), stat(id_.attn_ln_mean),
                                            stat(id_.attn_ln_rstd), rows_, Hi_,
                                            mem_.get(id_.attn_ln_ws, need), need, stream_);
      op("attn.residual_add_bwd");
      kernels::launch_residual_add<T>(dx, d_ln, d_attn_out, rows_, H_, stream_);
    } else {
      op("attn.residual_add_bwd");
      kernels::launch_residual_add<T>(dx, d_qkv_in, attn_d_residual, rows_, H_, stream_);
    }
    mem_.set_step(-1);
  }

  int step() const { return step_; }

 private:
  void op(const char* name) {
    const std::string want = o_.prefix + name;
    SEQBENCH_REQUIRE(step_ >= 0 && static_cast<std::size_t>(step_) < ops_.size() && ops_[step_] == want,
                     "EncoderLayer: op '"
                         << want << "' at step " << step_ << " is not the dry run's ("
                         << (static_cast<std::size_t>(step_) < ops_.size() ? ops_[step_] : "end")
                         << "): the run differs from the plan");
    mem_.set_step(step_);
    ++step_;
  }
  // A planned tensor of the current shape; the MemoryManager checks the size and that the current
  // step is inside the tensor's lifetime. A pointer taken in one op and used in a later one is
  // listed among that later op's reads or writes in the dry run too.
  T* act(TensorId id, std::int64_t elements) {
    return mem_.get_as<T>(id, static_cast<std::size_t>(elements));
  }
  float* stat(TensorId id) { return mem_.get_as<float>(id, static_cast<std::size_t>(rows_)); }
  template <class U>
  static const U* w(const void* p) {
    return static_cast<const U*>(p);
  }
  template <class U>
  static U* g(void* p) {
    return static_cast<U*>(p);
  }
  void run(const GemmProblem& problem) { gemm_.run<T>(problem, stream_); }
  kernels::HeadsShape heads_shape(std::int64_t projections) const {
    kernels::HeadsShape s;
    s.batch = B_;
    s.len = L_;
    s.heads = N_;
    s.hidden = H_;
    s.projections = projections;
    return s;
  }
  kernels::SoftmaxShape softmax_shape() const {
    kernels::SoftmaxShape s;
    s.batch = B_;
    s.heads = N_;
    s.q_len = L_;
    s.k_len = L_;
    return s;
  }

  const LayerConfig& c_;
  const EncoderLayerOptions& o_;
  const EncoderLayerWeights& w_;
  const EncoderLayerGrads& g_;
  MemoryManager& mem_;
  const EncoderIds& id_;
  const std::vector<std::string>& ops_;
  int step_;
  Gemm& gemm_;
  std::int64_t B_, L_, rows_ = 0, H_ = 0, F_ = 0, N_ = 0, d_ = 0, S_ = 0;
  int Hi_ = 0;  // H_ as the LayerNorm launchers take it
  float scale_ = 1.0f, eps_ = 1e-5f;
  kernels::DropoutConfig drop_probs_, drop_attn_, drop_act_, drop_ffn_;
  cudaStream_t stream_;
};

}  // namespace

void EncoderLayer::forward(void* y, const void* x, std::size_t batch_size, std::size_t seq_len,
                           const std::int32_t* key_lengths, std::uint64_t seed, std::uint64_t base_offset,
                           cudaStream_t stream) {
  SEQBENCH_NVTX_RANGE("encoder_layer_fwd");
  config_.check_batch(batch_size, seq_len);
  SEQBENCH_REQUIRE(x != nullptr, "EncoderLayer::forward: x is null");
  SEQBENCH_REQUIRE(y != nullptr, "EncoderLayer::forward: y is null");
  const std::size_t bytes =
      batch_size * seq_len * static_cast<std::size_t>(config_.hidden) * dtype_size(config_.dtype);
  SEQBENCH_REQUIRE(!overlap(x, bytes, y, bytes), "EncoderLayer::forward: y overlaps x ("
                                                     << bytes << " bytes each); backward needs x unchanged");
  SEQBENCH_REQUIRE(!overlap(x, bytes, memory_->block(), memory_->block_bytes()) &&
                       !overlap(y, bytes, memory_->block(), memory_->block_bytes()),
                   "EncoderLayer::forward: x or y overlaps the layer's planned block");
  SEQBENCH_REQUIRE(base_offset <= UINT64_MAX - kEncoderLayerDropoutOffsets,
                   "EncoderLayer::forward: base_offset " << base_offset << " leaves no room for the "
                                                         << kEncoderLayerDropoutOffsets
                                                         << " dropout streams");
  impl_->have_forward = false;
  Gemm& gemm = ensure_gemm();
  dispatch_dtype(config_.dtype, [&](auto tag) {
    using T = decltype(tag);
    EncoderRun<T> run(config_, options_, weights_, grads_, *memory_, impl_->ids, impl_->ops, 0, gemm,
                      batch_size, seq_len, seed, base_offset, stream);
    run.forward(static_cast<T*>(y), static_cast<const T*>(x), key_lengths);
    SEQBENCH_REQUIRE(run.step() == impl_->forward_steps, "EncoderLayer: the forward ran "
                                                             << run.step() << " ops, the dry run has "
                                                             << impl_->forward_steps);
  });
  memory_->set_step(-1);
  impl_->have_forward = true;
  impl_->batch = batch_size;
  impl_->len = seq_len;
  impl_->x = x;
  impl_->seed = seed;
  impl_->base_offset = base_offset;
}

void EncoderLayer::backward(void* dx, const void* dy, const void* x, cudaStream_t stream) {
  SEQBENCH_NVTX_RANGE("encoder_layer_bwd");
  SEQBENCH_REQUIRE(impl_->have_forward,
                   "EncoderLayer::backward: no forward() to differentiate (call forward first)");
  SEQBENCH_REQUIRE(dx != nullptr, "EncoderLayer::backward: dx is null");
  SEQBENCH_REQUIRE(dy != nullptr, "EncoderLayer::backward: dy is null");
  SEQBENCH_REQUIRE(x == impl_->x, "EncoderLayer::backward: x is not the last forward's input (got "
                                      << x << ", the forward ran on " << impl_->x << ")");
  const std::size_t bytes =
      impl_->batch * impl_->len * static_cast<std::size_t>(config_.hidden) * dtype_size(config_.dtype);
  SEQBENCH_REQUIRE(!overlap(dx, bytes, memory_->block(), memory_->block_bytes()) &&
                       !overlap(dy, bytes, memory_->block(), memory_->block_bytes()),
                   "EncoderLayer::backward: dx or dy overlaps the layer's planned block");
  Gemm& gemm = ensure_gemm();
  dispatch_dtype(config_.dtype, [&](auto tag) {
    using T = decltype(tag);
    EncoderRun<T> run(config_, options_, weights_, grads_, *memory_, impl_->ids, impl_->ops,
                      impl_->forward_steps, gemm, impl_->batch, impl_->len, impl_->seed, impl_->base_offset,
                      stream);
    run.backward(static_cast<T*>(dx), static_cast<const T*>(dy), static_cast<const T*>(x));
    SEQBENCH_REQUIRE(static_cast<std::size_t>(run.step()) == impl_->ops.size(),
                     "EncoderLayer: the backward ended at step " << run.step() << ", the dry run has "
                                                                 << impl_->ops.size());
  });
  memory_->set_step(-1);
}

}  // namespace seqbench::layers
