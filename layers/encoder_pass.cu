#include "core/dtype.h"
#include "layers/encoder_pass.h"

namespace seqbench::layers {

EncoderIds record_encoder_forward(PlanBuilder& plan, TensorId x, TensorId y) {
  EncoderIds id;
  id.x = x;
  id.y = y;
  id.attn_out = plan.act("attn_out", plan.tokens() * plan.hidden());
  id.attn = record_attention_forward(plan, AttentionKind::self, "attn.", id.x, kNoTensor, id.attn_out);
  id.ffn = record_ffn_forward(plan, "ffn.", id.attn_out, id.y);
  return id;
}

void record_encoder_backward(PlanBuilder& plan, EncoderIds& id, TensorId dy, TensorId dx) {
  id.d_attn_out = plan.act("d_attn_out", plan.tokens() * plan.hidden());
  record_ffn_backward(plan, id.ffn, dy, id.d_attn_out);
  record_attention_backward(plan, id.attn, id.d_attn_out, dx, kNoTensor);
}

EncoderParams encoder_params_of(const EncoderLayerWeights& weights, const EncoderLayerGrads& grads) {
  return {encoder_attention_tensors_of(weights), encoder_attention_tensors_of(grads), ffn_tensors_of(weights),
          ffn_tensors_of(grads)};
}

namespace {

// Dropout streams: base+0 probabilities, base+1 attention output, base+2 FFN activation, base+3
// FFN output (ref::encoder_layer_dropout_masks' order).
template <class T>
AttentionSublayer<T> attention_of(const LayerConfig& c, const EncoderIds& ids, const EncoderParams& p,
                                  const EncoderPassShape& s) {
  return {c,
          ids.attn,
          p.attn_w,
          p.attn_g,
          {s.batch, s.len, s.len},
          {{static_cast<float>(c.attn_dropout), s.seed, s.base_offset + 0},
           {static_cast<float>(c.hidden_dropout), s.seed, s.base_offset + 1}}};
}

template <class T>
FfnSublayer<T> ffn_of(const LayerConfig& c, const EncoderIds& ids, const EncoderParams& p,
                      const EncoderPassShape& s) {
  return {c,
          ids.ffn,
          p.ffn_w,
          p.ffn_g,
          s.batch * s.len,
          {{static_cast<float>(c.activation_dropout), s.seed, s.base_offset + 2},
           {static_cast<float>(c.hidden_dropout), s.seed, s.base_offset + 3}}};
}

}  // namespace

template <class T>
void run_encoder_forward(LayerRun<T>& run, const LayerConfig& config, const EncoderIds& ids,
                         const EncoderParams& params, const EncoderPassShape& shape, bool causal,
                         const std::int32_t* key_lengths, T* y, const T* x) {
  T* attn_out = run.between(ids.attn_out, shape.batch * shape.len * config.hidden);
  kernels::SoftmaxMask mask;
  mask.causal = causal;
  mask.key_lengths = key_lengths;
  attention_of<T>(config, ids, params, shape).forward(run, attn_out, x, nullptr, mask);
  ffn_of<T>(config, ids, params, shape).forward(run, y, attn_out);
}

template <class T>
void run_encoder_backward(LayerRun<T>& run, const LayerConfig& config, const EncoderIds& ids,
                          const EncoderParams& params, const EncoderPassShape& shape, T* dx, const T* dy,
                          const T* x) {
  const std::int64_t TH = shape.batch * shape.len * config.hidden;
  T* d_attn_out = run.between(ids.d_attn_out, TH);
  ffn_of<T>(config, ids, params, shape).backward(run, d_attn_out, dy, run.between(ids.attn_out, TH));
  attention_of<T>(config, ids, params, shape).backward(run, dx, nullptr, d_attn_out, x, nullptr);
}

#define SEQBENCH_INSTANTIATE_ENCODER_PASS(T)                                                         \
  template void run_encoder_forward<T>(LayerRun<T>&, const LayerConfig&, const EncoderIds&,          \
                                       const EncoderParams&, const EncoderPassShape&, bool,          \
                                       const std::int32_t*, T*, const T*);                           \
  template void run_encoder_backward<T>(LayerRun<T>&, const LayerConfig&, const EncoderIds&,         \
                                        const EncoderParams&, const EncoderPassShape&, T*, const T*, \
                                        const T*);
SEQBENCH_INSTANTIATE_ENCODER_PASS(float)
SEQBENCH_INSTANTIATE_ENCODER_PASS(__half)
SEQBENCH_INSTANTIATE_ENCODER_PASS(__nv_bfloat16)
#undef SEQBENCH_INSTANTIATE_ENCODER_PASS

}  // namespace seqbench::layers
