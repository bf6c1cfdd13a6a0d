#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kernels/bias_act_dropout.h"
#include "kernels/bias_dropout_residual.h"
#include "kernels/layernorm.h"
#include "layers/ffn_sublayer.h"
#include "layers/gemm_shapes.h"
#include "layers/residual_wrapper.h"

namespace seqbench::layers {

FfnIds record_ffn_forward(PlanBuilder& plan, const std::string& name, TensorId x, TensorId out) {
  FfnIds id;
  id.name = name;
  id.x = x;
  id.out = out;
  const std::string& f = name;
  const std::size_t T = plan.tokens();
  const std::size_t H = plan.hidden();
  const std::size_t F = plan.ffn();
  const bool pre = plan.config().pre_layer_norm;
  TensorId in = x;
  id.ln_mean = plan.stat(f + "ln_mean");
  id.ln_rstd = plan.stat(f + "ln_rstd");
  if (pre) {
    id.ln_out = plan.act(f + "ln_out", T * H);
    plan.op(f + "ln", {x}, {id.ln_out, id.ln_mean, id.ln_rstd});
    in = id.ln_out;
  }
  id.ff1_raw = plan.act(f + "ff1_raw", T * F);
  plan.gemm_op(f + "ff1_gemm", {in}, {id.ff1_raw});
  id.act_out = plan.act(f + "act_out", T * F);
  plan.op(f + "bias_act_dropout", {id.ff1_raw}, {id.act_out});
  id.ff2_raw = plan.act(f + "ff2_raw", T * H);
  plan.gemm_op(f + "ff2_gemm", {id.act_out}, {id.ff2_raw});
  if (pre) {
    plan.op(f + "bias_dropout_residual", {id.ff2_raw, x}, {out});
  } else {
    id.residual = plan.act(f + "residual", T * H);
    plan.op(f + "bias_dropout_residual", {id.ff2_raw, x}, {id.residual});
    plan.op(f + "ln", {id.residual}, {out, id.ln_mean, id.ln_rstd});
  }
  return id;
}

void record_ffn_backward(PlanBuilder& plan, FfnIds& id, TensorId d_out, TensorId d_x) {
  const std::string& f = id.name;
  const std::size_t T = plan.tokens();
  const std::size_t H = plan.hidden();
  const std::size_t F = plan.ffn();
  const bool pre = plan.config().pre_layer_norm;
  const TensorId d_sub = plan_residual_sum_grad(plan, f, id, d_out, pre);
  id.d_ff2_raw = plan.act(f + "d_ff2_raw", T * H);
  id.bdr_ws = plan.bytes(f + "bias_dropout_residual_bwd_ws", plan.bias_dropout_residual_bwd_ws());
  plan.op(f + "bias_dropout_residual_bwd", {d_sub}, {id.d_ff2_raw, id.bdr_ws});
  TensorId act_out = id.act_out;
  if (plan.recompute() == Recompute::pointwise) {
    id.act_recomputed = plan.act(f + "act_recomputed", T * F);
    plan.op(f + "bias_act_dropout_recompute", {id.ff1_raw}, {id.act_recomputed});
    act_out = id.act_recomputed;
  }
  // fc2's weight gradient first, its input gradient second, as two ops: the activation it reads
  // dies before d_act (as large) is written, so the two need not be live at once.
  plan.gemm_op(f + "ff2_gemm_bwd_dw", {id.d_ff2_raw, act_out}, {});
  id.d_act = plan.act(f + "d_act", T * F);
  plan.gemm_op(f + "ff2_gemm_bwd_dx", {id.d_ff2_raw}, {id.d_act});
  // In place: fc1's output gradient overwrites the activation's (the kernel allows dx == dy), so
  // the FFN backward holds two [T, F] tensors at its peak (ff1_raw and this one), not three.
  id.d_ff1 = id.d_act;
  id.bad_ws = plan.bytes(f + "bias_act_dropout_bwd_ws", plan.bias_act_dropout_bwd_ws());
  plan.op(f + "bias_act_dropout_bwd", {id.d_act, id.ff1_raw}, {id.d_ff1, id.bad_ws});
  id.d_ff1_in = plan.act(f + "d_ff1_in", T * H);
  plan.gemm_op(f + "ff1_gemm_bwd", {id.d_ff1, pre ? id.ln_out : id.x}, {id.d_ff1_in});
  plan_input_grad(plan, f, id, id.d_ff1_in, d_out, d_x, pre);
}

template <class T>
void FfnSublayer<T>::forward(LayerRun<T>& r, T* out, const T* x) const {
  const FfnTensors<const void*>& w = weights;
  const std::string& n = ids.name;
  const std::int64_t H = config.hidden, F = config.ffn;
  const int Hi = config.hidden;
  const float eps = static_cast<float>(config.layer_norm_eps);
  cudaStream_t stream = r.stream();
  const T* in = x;
  if (config.pre_layer_norm) {
    r.op(n + "ln");
    T* ln_out = r.act(ids.ln_out, rows * H);
    kernels::launch_layernorm_forward<T>(ln_out, r.stat(ids.ln_mean, rows), r.stat(ids.ln_rstd, rows), x,
                                         as<T>(w.ln_gamma), as<T>(w.ln_beta), rows, Hi, eps, stream);
    in = ln_out;
  }
  r.op(n + "ff1_gemm");
  T* ff1_raw = r.act(ids.ff1_raw, rows * F);
  r.gemm(linear_forward(in, w.fc1_weight, ff1_raw, rows, F, H));
  r.op(n + "bias_act_dropout");
  T* act_out = r.act(ids.act_out, rows * F);
  kernels::launch_bias_act_dropout_fwd<T>(act_out, ff1_raw, as<T>(w.fc1_bias), rows, F,
                                          kernel_activation(config.activation), dropout.first, stream);
  r.op(n + "ff2_gemm");
  T* ff2_raw = r.act(ids.ff2_raw, rows * H);
  r.gemm(linear_forward(act_out, w.fc2_weight, ff2_raw, rows, H, F));
  r.op(n + "bias_dropout_residual");
  if (config.pre_layer_norm) {
    kernels::launch_bias_dropout_residual_fwd<T>(out, ff2_raw, as<T>(w.fc2_bias), x, rows, H, dropout.hidden,
                                                 stream);
  } else {
    T* residual = r.act(ids.residual, rows * H);
    kernels::launch_bias_dropout_residual_fwd<T>(residual, ff2_raw, as<T>(w.fc2_bias), x, rows, H,
                                                 dropout.hidden, stream);
    r.op(n + "ln");
    kernels::launch_layernorm_forward<T>(out, r.stat(ids.ln_mean, rows), r.stat(ids.ln_rstd, rows), residual,
                                         as<T>(w.ln_gamma), as<T>(w.ln_beta), rows, Hi, eps, stream);
  }
}

template <class T>
void FfnSublayer<T>::backward(LayerRun<T>& r, T* d_x, const T* d_out, const T* x) const {
  const FfnTensors<const void*>& w = weights;
  const FfnTensors<void*>& g = grads;
  const std::string& n = ids.name;
  const std::int64_t H = config.hidden, F = config.ffn;
  const int Hi = config.hidden;
  const bool pre = config.pre_layer_norm;
  cudaStream_t stream = r.stream();
  const WrapperNorm norm{w.ln_gamma, g.ln_gamma, g.ln_beta};
  const T* d_sub = run_residual_sum_grad<T>(r, ids, norm, d_out, rows, Hi, pre);
  r.op(n + "bias_dropout_residual_bwd");
  T* d_ff2 = r.act(ids.d_ff2_raw, rows * H);
  {
    const std::size_t need = kernels::bias_dropout_residual_bwd_workspace_bytes(rows, H);
    kernels::launch_bias_dropout_residual_bwd<T>(d_ff2, as<T>(g.fc2_bias), d_sub, rows, H, dropout.hidden,
                                                 r.workspace(ids.bdr_ws, need), need, stream);
  }
  if (ids.act_recomputed != kNoTensor) {
    // Recompute::pointwise: the forward's act_out, recomputed bitwise (same kernel, input, bias
    // and Philox stream as its bias_act_dropout).
    r.op(n + "bias_act_dropout_recompute");
    kernels::launch_bias_act_dropout_fwd<T>(r.act(ids.act_recomputed, rows * F), r.act(ids.ff1_raw, rows * F),
                                            as<T>(w.fc1_bias), rows, F, kernel_activation(config.activation),
                                            dropout.first, stream);
  }
  r.op(n + "ff2_gemm_bwd_dw");
  const TensorId act_out = ids.act_recomputed != kNoTensor ? ids.act_recomputed : ids.act_out;
  r.gemm(linear_dw(d_ff2, r.act(act_out, rows * F), g.fc2_weight, rows, H, F));
  r.op(n + "ff2_gemm_bwd_dx");
  T* d_act = r.act(ids.d_act, rows * F);
  r.gemm(linear_dx(d_ff2, w.fc2_weight, d_act, rows, H, F));
  r.op(n + "bias_act_dropout_bwd");
  T* d_ff1 = r.act(ids.d_ff1, rows * F);  // d_act itself: in place (record_ffn_backward)
  {
    const std::size_t need = kernels::bias_act_dropout_bwd_workspace_bytes(rows, F);
    kernels::launch_bias_act_dropout_bwd<T>(d_ff1, as<T>(g.fc1_bias), d_act, r.act(ids.ff1_raw, rows * F),
                                            as<T>(w.fc1_bias), rows, F, kernel_activation(config.activation),
                                            dropout.first, r.workspace(ids.bad_ws, need), need, stream);
  }
  r.op(n + "ff1_gemm_bwd");
  T* d_ff1_in = r.act(ids.d_ff1_in, rows * H);
  const T* in = pre ? r.act(ids.ln_out, rows * H) : x;
  r.gemm(linear_dx(d_ff1, w.fc1_weight, d_ff1_in, rows, F, H));
  r.gemm(linear_dw(d_ff1, in, g.fc1_weight, rows, F, H));
  run_input_grad<T>(r, ids, norm, d_x, d_ff1_in, d_out, d_sub, x, rows, Hi, pre);
}

#define SEQBENCH_FFN_SUBLAYER(T) template struct FfnSublayer<T>;
SEQBENCH_FFN_SUBLAYER(float)
SEQBENCH_FFN_SUBLAYER(__half)
SEQBENCH_FFN_SUBLAYER(__nv_bfloat16)
#undef SEQBENCH_FFN_SUBLAYER

}  // namespace seqbench::layers
