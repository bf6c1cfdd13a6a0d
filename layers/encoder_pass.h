// One encoder layer's forward and backward as ops of a dry run (PlanBuilder) and as their
// execution (LayerRun), shared by EncoderLayer, which plans one layer alone, and EncoderStack,
// which plans a whole stack of them into one block. The math and the op sequence are those of
// layers/encoder_layer.h; the caller declares the layer's input and output (and their gradients),
// so that in a stack one layer's output is the next one's input.
#pragma once

#include <cstdint>
#include <string>

#include "layers/attention_sublayer.h"
#include "layers/encoder_layer.h"
#include "layers/ffn_sublayer.h"
#include "layers/layer_run.h"

namespace seqbench::layers {

// The planned tensors of one encoder layer (its sub-layers keep theirs in their ids).
struct EncoderIds {
  TensorId x = kNoTensor, y = kNoTensor;  // the input and output (declared by the caller)
  TensorId attn_out = kNoTensor;          // the attention sub-layer's output, the FFN's input
  TensorId d_attn_out = kNoTensor;        // its gradient (declared by the backward)
  AttentionIds attn;
  FfnIds ffn;
};

// The forward's dry run under the builder's current prefix: attention then FFN, x → y.
EncoderIds record_encoder_forward(PlanBuilder& plan, TensorId x, TensorId y);
// The backward's dry run: dy → dx and every parameter gradient, after record_encoder_forward.
void record_encoder_backward(PlanBuilder& plan, EncoderIds& ids, TensorId dy, TensorId dx);

// The views of one layer's parameters and gradients, split by sub-layer.
struct EncoderParams {
  AttentionTensors<const void*> attn_w;
  AttentionTensors<void*> attn_g;
  FfnTensors<const void*> ffn_w;
  FfnTensors<void*> ffn_g;
};
EncoderParams encoder_params_of(const EncoderLayerWeights& weights, const EncoderLayerGrads& grads);

// One pass's batch and dropout: B sentences of L positions; streams base+0 .. base+3 under seed
// (encoder_layer.h, "Dropout").
struct EncoderPassShape {
  std::int64_t batch = 0, len = 0;
  std::uint64_t seed = 0, base_offset = 0;
};

// The execution for T ∈ {float, __half, __nv_bfloat16} (instantiated in encoder_pass.cu). The run
// must stand at the step where record_encoder_forward (backward) began its ops; it ends after
// them. y and x are [B·L, H]; key_lengths is null or device int32 [B].
template <class T>
void run_encoder_forward(LayerRun<T>& run, const LayerConfig& config, const EncoderIds& ids,
                         const EncoderParams& params, const EncoderPassShape& shape, bool causal,
                         const std::int32_t* key_lengths, T* y, const T* x);
// dx (may alias dy) and every parameter gradient, for the forward with this shape on x.
template <class T>
void run_encoder_backward(LayerRun<T>& run, const LayerConfig& config, const EncoderIds& ids,
                          const EncoderParams& params, const EncoderPassShape& shape, T* dx, const T* dy,
                          const T* x);

}  // namespace seqbench::layers
