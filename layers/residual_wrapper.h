// The residual wrapper both sub-layers (attention_sublayer, ffn_sublayer) put around their body s:
//   pre-LN   out = x + s(LN(x))          post-LN   out = LN(x + s(x))
// and its backward, in two halves around the body's own backward, for the dry run (plan_*) and
// for the run (run_*), so that the two sub-layers share one definition of it:
//   residual_sum_grad   post-LN: LayerNorm backward at the residual sum x + s, giving the gradient
//                       the body's output dropout reads (pre-LN: d_out itself);
//   input_grad          the gradient d_in at the body's input (LN(x) pre, x post) back to x: pre-LN
//                       through LN(x)'s backward, then + d_out (the identity path); post-LN
//                       d_in + the residual-sum gradient.
// Ids is AttentionIds or FfnIds: the wrapper's tensors (x, residual, ln_mean, ln_rstd, d_residual,
// ln_ws, d_ln_in) have the same names in both.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/bias_dropout_residual.h"
#include "kernels/layernorm.h"
#include "layers/layer_run.h"

namespace seqbench::layers {

// (The op lists are spelled std::vector<TensorId>{...}: nvcc 13's front end rejects a plain braced
// list of a template parameter's members in these calls.)
template <class Ids>
TensorId plan_residual_sum_grad(PlanBuilder& plan, const std::string& prefix, Ids& id, TensorId d_out,
                                bool pre_layer_norm) {
  if (pre_layer_norm) return d_out;
  const std::size_t T = plan.tokens(), H = plan.hidden();
  id.d_residual = plan.act(prefix + "d_residual", T * H);
  id.ln_ws = plan.bytes(prefix + "ln_bwd_ws", plan.layernorm_bwd_ws());
  plan.op(prefix + "ln_bwd", std::vector<TensorId>{d_out, id.residual, id.ln_mean, id.ln_rstd},
          std::vector<TensorId>{id.d_residual, id.ln_ws});
  return id.d_residual;
}

template <class Ids>
void plan_input_grad(PlanBuilder& plan, const std::string& prefix, Ids& id, TensorId d_in, TensorId d_out,
                     TensorId d_x, bool pre_layer_norm) {
  if (!pre_layer_norm) {
    plan.op(prefix + "residual_add_bwd", std::vector<TensorId>{d_in, id.d_residual},
            std::vector<TensorId>{d_x});
    return;
  }
  const std::size_t T = plan.tokens(), H = plan.hidden();
  id.d_ln_in = plan.act(prefix + "d_ln_in", T * H);
  id.ln_ws = plan.bytes(prefix + "ln_bwd_ws", plan.layernorm_bwd_ws());
  plan.op(prefix + "ln_bwd", std::vector<TensorId>{d_in, id.x, id.ln_mean, id.ln_rstd},
          std::vector<TensorId>{id.d_ln_in, id.ln_ws});
  plan.op(prefix + "residual_add_bwd", std::vector<TensorId>{id.d_ln_in, d_out}, std::vector<TensorId>{d_x});
}

// The wrapper's LayerNorm parameter and its gradients (device views of the layer's dtype).
struct WrapperNorm {
  const void* gamma = nullptr;
  void* d_gamma = nullptr;
  void* d_beta = nullptr;
};

// Returns the gradient at the residual sum (post-LN: written into ids.d_residual; pre-LN: d_out).
template <class T, class Ids>
const T* run_residual_sum_grad(LayerRun<T>& r, const Ids& ids, const WrapperNorm& norm, const T* d_out,
                               std::int64_t rows, int hidden, bool pre_layer_norm) {
  if (pre_layer_norm) return d_out;
  const std::int64_t H = hidden;
  r.op(ids.name + "ln_bwd");
  T* d_residual = r.act(ids.d_residual, rows * H);
  const std::size_t need = kernels::layernorm_backward_workspace_bytes(rows, hidden);
  kernels::launch_layernorm_backward<T>(d_residual, as<T>(norm.d_gamma), as<T>(norm.d_beta), d_out,
                                        r.act(ids.residual, rows * H), as<T>(norm.gamma),
                                        r.stat(ids.ln_mean, rows), r.stat(ids.ln_rstd, rows), rows, hidden,
                                        r.workspace(ids.ln_ws, need), need, r.stream());
  return d_residual;
}

// d_x from d_in (the gradient at the body's input), d_out and, post-LN, the residual-sum gradient
// d_sum that run_residual_sum_grad returned.
template <class T, class Ids>
void run_input_grad(LayerRun<T>& r, const Ids& ids, const WrapperNorm& norm, T* d_x, const T* d_in,
                    const T* d_out, const T* d_sum, const T* x, std::int64_t rows, int hidden,
                    bool pre_layer_norm) {
  const std::int64_t H = hidden;
  if (!pre_layer_norm) {
    r.op(ids.name + "residual_add_bwd");
    kernels::launch_residual_add<T>(d_x, d_in, d_sum, rows, H, r.stream());
    return;
  }
  r.op(ids.name + "ln_bwd");
  T* d_ln = r.act(ids.d_ln_in, rows * H);
  const std::size_t need = kernels::layernorm_backward_workspace_bytes(rows, hidden);
  kernels::launch_layernorm_backward<T>(
      d_ln, as<T>(norm.d_gamma), as<T>(norm.d_beta), d_in, x, as<T>(norm.gamma), r.stat(ids.ln_mean, rows),
      r.stat(ids.ln_rstd, rows), rows, hidden, r.workspace(ids.ln_ws, need), need, r.stream());
  r.op(ids.name + "residual_add_bwd");
  kernels::launch_residual_add<T>(d_x, d_ln, d_out, rows, H, r.stream());
}

}  // namespace seqbench::layers
