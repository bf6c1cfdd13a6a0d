// The eager-like baselines' sub-layers (layers/baseline_encoder_layer.h, baseline_decoder_layer.h):
// the attention sub-layer (self-attention, or cross-attention over an encoder output with its own
// K/V projection) and the FFN sub-layer, run the way PyTorch eager runs fairseq's layers: one op
// per kernel with the kernels' unfused baselines, every tensor allocated through the caller's
// DeviceAllocator (a CachingAllocator in practice) when produced and freed when autograd would
// free it, uint8 dropout masks stored. The math is layers/attention_sublayer.h's and
// layers/ffn_sublayer.h's (the managed layers' shared sub-layers), with the same parameter views
// (AttentionTensors, FfnTensors), the same dropout streams (SublayerDropout: `first` the
// probabilities [B·N·L, Lk] or the activation [T, ffn], `hidden` the output [T, H], flat element
// index) and the same 1/√d as the scores GEMM's alpha, so that a baseline and its managed layer
// match the reference and each other up to rounding.
//
// Attention, pre-LN (post-LN moves the LayerNorm after the residual add and keeps the residual
// sum for its backward instead of the LayerNorm input):
//   self   ln(4 kernels) → qkv GEMM [T, 3H] → bias_add → 3 strided copies (Q, K, V heads)
//   cross  ln → q GEMM [T, H] → bias_add → 1 strided copy (Q heads); kv GEMM [B·Lk, 2H] on the
//          encoder output → bias_add → 2 strided copies (K, V heads [B, N, Lk, d])
//   then   scores GEMM (alpha 1/√d) → softmax(≤5) → [mask_u8 → apply_u8] → context GEMM → merge
//          copy → out GEMM → bias_add → [mask_u8 → apply_u8] → residual_add
//   backward  apply_u8 → column_sum → out dX, dW → split copy → dV, dP GEMMs → apply_u8 →
//          softmax_bwd(4) → dQ, dK GEMMs → self: 3 merge copies → column_sum → qkv dX, dW;
//          cross: 2 merge copies (dK, dV) → column_sum → kv dX (into d_kv_source), dW, then 1
//          merge copy (dQ) → column_sum → q dX, dW → ln_bwd → residual_add
// FFN: ln → fc1 GEMM → bias_add → activation → [mask_u8 → apply_u8] → fc2 GEMM → bias_add →
//   [mask_u8 → apply_u8] → residual_add; backward apply_u8 → column_sum → fc2 dX, dW → apply_u8 →
//   activation_bwd → column_sum → fc1 dX, dW → ln_bwd(7) → residual_add.
// A dropout of p = 0 is skipped (ATen's dropout returns its input for p = 0).
//
// Host code (kernel launches on one stream); instantiated for float, __half and __nv_bfloat16 in
// baseline_sublayers.cu. Internal to the baseline layers.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>

#include "kernels/qkv_reshape.h"
#include "kernels/softmax.h"
#include "layers/attention_sublayer.h"
#include "layers/config.h"
#include "layers/device_allocator.h"
#include "layers/eager_tensor.h"
#include "layers/ffn_sublayer.h"
#include "layers/gemm.h"

namespace seqbench::layers::baseline {

// What the attention sub-layer's backward reads (kept from its forward).
struct AttentionSaved {
  EagerTensor ln_out;            // pre-LN: the normalized input (the Q/QKV GEMM's input)
  EagerTensor ln_mean, ln_rstd;  // the LayerNorm statistics
  EagerTensor residual;          // post-LN: the LayerNorm's input x + dropout(attention)
  EagerTensor q;                 // [B, N, L, d]
  EagerTensor k, v;              // [B, N, Lk, d] each (Lk = L for self-attention)
  EagerTensor probs;             // softmax output [B, N, L, Lk]
  EagerTensor probs_mask;        // uint8 [B·N·L·Lk] (attn_dropout > 0)
  EagerTensor probs_dropped;     // the context GEMM's input (attn_dropout > 0)
  EagerTensor ctx;               // merged context [T, H], the out GEMM's input
  EagerTensor out_mask;          // uint8 [T, H] (hidden_dropout > 0)
  std::size_t bytes() const {
    return ln_out.bytes() + ln_mean.bytes() + ln_rstd.bytes() + residual.bytes() + q.bytes() + k.bytes() +
           v.bytes() + probs.bytes() + probs_mask.bytes() + probs_dropped.bytes() + ctx.bytes() +
           out_mask.bytes();
  }
};

// What the FFN sub-layer's backward reads.
struct FfnSaved {
  EagerTensor ln_out, ln_mean, ln_rstd;  // as above
  EagerTensor residual;                  // post-LN
  EagerTensor fc1_out;                   // fc1(x) + bias: the activation's input [T, ffn]
  EagerTensor act_mask;                  // uint8 [T, ffn] (activation_dropout > 0)
  EagerTensor act_out;                   // the fc2 GEMM's input: dropout(act(.)), or act(.) for p = 0
  EagerTensor out_mask;                  // uint8 [T, H] (hidden_dropout > 0)
  std::size_t bytes() const {
    return ln_out.bytes() + ln_mean.bytes() + ln_rstd.bytes() + residual.bytes() + fc1_out.bytes() +
           act_mask.bytes() + act_out.bytes() + out_mask.bytes();
  }
};

// The eager execution of one forward or backward for dtype T on B sentences of L tokens (the
// query side; an attention's key length Lk is an argument: L for self-attention, the encoder
// output's length for cross-attention).
template <class T>
struct Eager {
  const LayerConfig& c;
  DeviceAllocator& alloc;
  Gemm& gemm;
  cudaStream_t stream;
  std::int64_t B, L, T_, H, F, N, d;  // T_ = B·L rows
  float scale, eps;
  bool free_saved;  // false: the backward keeps the saved tensors (retain_graph)

  // The run's sizes from the config (d = H / N, scale = 1/√d, eps = layer_norm_eps).
  static Eager make(const LayerConfig& config, DeviceAllocator& allocator, Gemm& gemm, cudaStream_t stream,
                    std::size_t batch, std::size_t len, bool free_saved);

  // Frees a saved tensor after its last reader in the backward (autograd's release), unless the
  // graph is retained.
  void drop(EagerTensor& saved) const {
    if (free_saved) saved.reset();
  }
  EagerTensor tensor(std::int64_t elements) const {
    return EagerTensor(alloc, static_cast<std::size_t>(elements) * sizeof(T));
  }

  // out = x + dropout_h(attention(LN(x), kv)) (pre) or LN(x + dropout_h(attention(x, kv))) (post).
  // kv_source: null (self-attention: K and V from the fused QKV projection of the input, kv_len
  // must be L) or the encoder output [B·kv_len, H] (cross-attention: w.q_weight is the Q-only
  // [H, H], w.kv_weight the K/V [2H, H]).
  void attention_forward(AttentionSaved& s, T* out, const T* x, const T* kv_source, std::int64_t kv_len,
                         const AttentionTensors<const void*>& w, const kernels::SoftmaxMask& mask,
                         const SublayerDropout& dropouts) const;
  // d_x (and, for cross-attention, d_kv_source [B·kv_len, H], written) from d_out; every
  // attention parameter gradient written. kv_source and kv_len as in the forward.
  void attention_backward(AttentionSaved& s, T* d_x, T* d_kv_source, const T* d_out, const T* x,
                          const T* kv_source, std::int64_t kv_len, const AttentionTensors<const void*>& w,
                          const AttentionTensors<void*>& g, const SublayerDropout& dropouts) const;

  // out = x + dropout_h(fc2(dropout_a(act(fc1(LN(x)))))) (pre), or LN of the sum (post).
  void ffn_forward(FfnSaved& s, T* out, const T* x, const FfnTensors<const void*>& w,
                   const SublayerDropout& dropouts) const;
  void ffn_backward(FfnSaved& s, T* d_x, const T* d_out, const T* x, const FfnTensors<const void*>& w,
                    const FfnTensors<void*>& g, const SublayerDropout& dropouts) const;

 private:
  EagerTensor bytes(std::size_t n) const { return EagerTensor(alloc, n); }
  EagerTensor stats() const { return EagerTensor(alloc, static_cast<std::size_t>(T_) * sizeof(float)); }
  kernels::HeadsShape heads(std::int64_t len, std::int64_t projections) const;
  kernels::SoftmaxShape softmax_shape(std::int64_t kv_len) const;
  EagerTensor linear(const T* in, const void* w, const void* bias, std::int64_t rows, std::int64_t out_f,
                     std::int64_t in_f) const;
  EagerTensor linear_bwd(const T* dy, const T* in, const void* w, void* dw, void* dbias, std::int64_t rows,
                         std::int64_t out_f, std::int64_t in_f, T* dx_into = nullptr) const;
  void layernorm(T* y, EagerTensor& mean, EagerTensor& rstd, const T* x, const void* gamma,
                 const void* beta) const;
  EagerTensor layernorm_bwd(const T* dy, const T* x, const void* gamma, void* dgamma, void* dbeta,
                            EagerTensor& mean, EagerTensor& rstd) const;
  const T* dropout(EagerTensor& out, EagerTensor& mask, const T* in, std::int64_t n,
                   const kernels::DropoutConfig& cfg) const;
  const T* dropout_bwd(EagerTensor& out, EagerTensor& mask, const T* dy, std::int64_t n, float p) const;
  void residual_tail(T* out, EagerTensor& residual, EagerTensor& mean, EagerTensor& rstd,
                     EagerTensor& out_mask, const T* in, const void* w, const void* bias, std::int64_t in_f,
                     const T* x, const void* gamma, const void* beta,
                     const kernels::DropoutConfig& cfg) const;
  const T* residual_tail_bwd(EagerTensor& d_res_buf, EagerTensor& d_o_buf, const T* d_out,
                             EagerTensor& residual, EagerTensor& mean, EagerTensor& rstd,
                             EagerTensor& out_mask, const void* gamma, void* dgamma, void* dbeta, float p,
                             const T** d_res) const;
  void input_grad(T* d_x, EagerTensor& d_in, const T* d_out, const T* d_res, const T* x, const void* gamma,
                  void* dgamma, void* dbeta, EagerTensor& mean, EagerTensor& rstd) const;
};

// The state the baseline Transformer layers share (BaselineEncoderLayer, BaselineDecoderLayer
// derive their Impl from it and add their saved tensors): the allocator, the GEMM workspace
// (allocated once, at construction, through the same allocator) and its Gemm (created by the
// first forward) unless the caller shares its Gemm (then no workspace is allocated: one cuBLAS
// workspace for a whole eager model, as PyTorch keeps one per handle and stream), and the last
// forward's shape and dropout stream.
struct LayerState {
  DeviceAllocator& allocator;
  Gemm* shared_gemm = nullptr;
  EagerTensor gemm_workspace;
  std::unique_ptr<Gemm> gemm;
  bool have_forward = false;
  std::size_t batch = 0, len = 0;  // len: the query side's (target) length
  std::uint64_t seed = 0, base_offset = 0;

  LayerState(DeviceAllocator& a, std::size_t gemm_workspace_bytes, Gemm* shared = nullptr)
      : allocator(a),
        shared_gemm(shared),
        gemm_workspace(shared != nullptr ? EagerTensor() : EagerTensor(a, gemm_workspace_bytes)) {}

  // A validated forward's start (after the previous graph is released): the Gemm on first use,
  // the shape and the dropout stream recorded.
  void begin_forward(std::size_t batch_size, std::size_t seq_len, std::uint64_t seed_, std::uint64_t base) {
    if (!gemm && shared_gemm == nullptr)
      gemm = std::make_unique<Gemm>(gemm_workspace.get(), gemm_workspace.bytes());
    batch = batch_size;
    len = seq_len;
    seed = seed_;
    base_offset = base;
  }

  template <class T>
  Eager<T> eager(const LayerConfig& c, cudaStream_t stream, bool free_saved) const {
    return Eager<T>::make(c, allocator, shared_gemm != nullptr ? *shared_gemm : *gemm, stream, batch, len,
                          free_saved);
  }

  // One sub-layer's dropout streams: base_offset + first for its first dropout (probability
  // p_first: the probabilities' or the activation's), base_offset + first + 1 for its output's
  // (p_hidden).
  SublayerDropout dropouts(double p_first, double p_hidden, std::uint64_t first) const {
    return {{static_cast<float>(p_first), seed, base_offset + first},
            {static_cast<float>(p_hidden), seed, base_offset + first + 1}};
  }
};

}  // namespace seqbench::layers::baseline
