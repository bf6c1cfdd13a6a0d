// The feed-forward sub-layer of the Transformer layers (reference/transformer_layer.cpp's
// ffn_forward / ffn_backward), shared by EncoderLayer and DecoderLayer:
//
//   pre-LN   out = x + dropout_h(fc2(dropout_a(act(fc1(LN(x))))))
//   post-LN  out = LN(x + dropout_h(fc2(dropout_a(act(fc1(x))))))
//
// Forward: [layernorm] → fc1 GEMM [T, H]·[ffn, H]ᵀ → bias_act_dropout (fc1's bias, the activation
// and its dropout in one kernel) → fc2 GEMM → bias_dropout_residual (+ x) → [layernorm]. The
// backward mirrors it with the kernels' deterministic bias gradients; every parameter gradient is
// written. Dropout: `first` is the activation's stream ([T, ffn]), `hidden` the output's ([T, H]).
//
// Ops (after "<prefix><name>", name "ffn."):
//   forward  [ln] ff1_gemm bias_act_dropout ff2_gemm bias_dropout_residual [ln]
//   backward [ln_bwd] bias_dropout_residual_bwd [bias_act_dropout_recompute] ff2_gemm_bwd_dw
//            ff2_gemm_bwd_dx bias_act_dropout_bwd ff1_gemm_bwd [ln_bwd] residual_add_bwd
// fc2's backward is two ops, the weight gradient first, so that the activation it reads dies
// before the activation's gradient (as large) is written; bias_act_dropout_bwd then turns that
// gradient into fc1's output gradient in place. The backward's peak holds two [T, ffn] tensors
// (fc1's output, kept, and the gradient), where the eager baseline holds three and its byte
// mask (layers/baseline_sublayers.cu).
// bias_act_dropout_recompute is there under Recompute::pointwise (layers/layer_run.h): the
// forward's act_out then dies at ff2_gemm, and the backward recomputes it from ff1_raw (the same
// kernel, bias and Philox stream) into act_recomputed for fc2's weight gradient.
#pragma once

#include <cstdint>
#include <string>

#include "layers/attention_sublayer.h"
#include "layers/layer_run.h"

namespace seqbench::layers {

// The parameters (P = const void*) or gradients (P = void*) of one FFN sub-layer.
template <class P>
struct FfnTensors {
  P ln_gamma{}, ln_beta{};     // [H]
  P fc1_weight{}, fc1_bias{};  // [ffn, H], [ffn]
  P fc2_weight{}, fc2_bias{};  // [H, ffn], [H]
};

// The FFN views of a layer's tensor struct (EncoderLayerTensors, DecoderLayerTensors: the same
// field names).
template <class P, template <class> class LayerTensors>
FfnTensors<P> ffn_tensors_of(const LayerTensors<P>& t) {
  return {t.ffn_ln_gamma, t.ffn_ln_beta, t.fc1_weight, t.fc1_bias, t.fc2_weight, t.fc2_bias};
}

struct FfnIds {
  std::string name;  // "ffn."
  TensorId x = kNoTensor, out = kNoTensor;
  TensorId ln_out = kNoTensor, ln_mean = kNoTensor, ln_rstd = kNoTensor;
  TensorId ff1_raw = kNoTensor, act_out = kNoTensor, ff2_raw = kNoTensor, residual = kNoTensor;
  // Backward.
  TensorId d_residual = kNoTensor, ln_ws = kNoTensor, d_ff2_raw = kNoTensor, bdr_ws = kNoTensor;
  // d_ff1 (fc1's output gradient) is d_act: bias_act_dropout_bwd writes it in place.
  TensorId d_act = kNoTensor, d_ff1 = kNoTensor, bad_ws = kNoTensor, d_ff1_in = kNoTensor,
           d_ln_in = kNoTensor;
  // Recompute::pointwise: the backward's copy of act_out, recomputed from ff1_raw (op
  // bias_act_dropout_recompute, before ff2_gemm_bwd_dw); kNoTensor otherwise, and then the backward
  // reads the forward's act_out.
  TensorId act_recomputed = kNoTensor;
};

// The dry runs; x, out, d_out and d_x are declared by the caller.
FfnIds record_ffn_forward(PlanBuilder& plan, const std::string& name, TensorId x, TensorId out);
void record_ffn_backward(PlanBuilder& plan, FfnIds& ids, TensorId d_out, TensorId d_x);

// The execution, for T ∈ {float, __half, __nv_bfloat16} (instantiated in ffn_sublayer.cu).
template <class T>
struct FfnSublayer {
  const LayerConfig& config;
  const FfnIds& ids;
  const FfnTensors<const void*>& weights;
  const FfnTensors<void*>& grads;
  std::int64_t rows = 0;  // B·L tokens
  SublayerDropout dropout;

  void forward(LayerRun<T>& run, T* out, const T* x) const;
  void backward(LayerRun<T>& run, T* d_x, const T* d_out, const T* x) const;
};

}  // namespace seqbench::layers
