#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/byte_range.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/nvtx.h"
#include "layers/attention_sublayer.h"
#include "layers/cross_kv.h"
#include "layers/decoder_layer.h"
#include "layers/ffn_sublayer.h"
#include "layers/parameter_ranges.h"

namespace seqbench::layers {

namespace {

struct DecoderIds {
  TensorId x = kNoTensor, y = kNoTensor, dy = kNoTensor, dx = kNoTensor;
  TensorId enc = kNoTensor, d_enc = kNoTensor;
  TensorId self_out = kNoTensor, cross_out = kNoTensor, d_self_out = kNoTensor, d_cross_out = kNoTensor;
  AttentionIds self, cross;
  FfnIds ffn;
  int forward_steps = 0;
};

// The dry run: self-attention, cross-attention, FFN; the backward in reverse.
DecoderIds record_decoder_layer(PlanBuilder& plan, const DecoderLayerOptions& o) {
  DecoderIds id;
  const std::size_t TH = plan.tokens() * plan.hidden();
  id.x = plan.external("x");
  id.y = plan.external("y");
  id.dy = plan.external("dy");
  id.dx = plan.external("dx");
  // The cross-attention's K/V source and its gradient: the encoder output, or (external_kv) the
  // caller's K/V heads [2, B, N, S, d].
  id.enc = plan.external(o.external_kv ? "kv_heads" : "encoder_out");
  id.d_enc = plan.external(o.external_kv ? "d_kv_heads" : "d_encoder_out");
  if (o.gemm == nullptr) plan.plan_gemm_workspace(o.gemm_workspace_bytes);
  id.self_out = plan.act("self_out", TH);
  id.self = record_attention_forward(plan, AttentionKind::self, "self.", id.x, kNoTensor, id.self_out);
  id.cross_out = plan.act("cross_out", TH);
  id.cross = record_attention_forward(plan, AttentionKind::cross, "cross.", id.self_out, id.enc, id.cross_out,
                                      o.external_kv);
  id.ffn = record_ffn_forward(plan, "ffn.", id.cross_out, id.y);
  id.forward_steps = plan.steps();
  id.d_cross_out = plan.act("d_cross_out", TH);
  record_ffn_backward(plan, id.ffn, id.dy, id.d_cross_out);
  id.d_self_out = plan.act("d_self_out", TH);
  record_attention_backward(plan, id.cross, id.d_cross_out, id.d_self_out, id.d_enc);
  record_attention_backward(plan, id.self, id.d_self_out, id.dx, kNoTensor);
  return id;
}

}  // namespace

std::vector<DecoderTensorShape> decoder_layer_parameter_shapes(const LayerConfig& config) {
  config.validate();
  const std::size_t H = static_cast<std::size_t>(config.hidden);
  const std::size_t F = static_cast<std::size_t>(config.ffn);
  return {{"self_ln_gamma", 1, H},       {"self_ln_beta", 1, H},
          {"self_qkv_weight", 3 * H, H}, {"self_qkv_bias", 1, 3 * H},
          {"self_out_weight", H, H},     {"self_out_bias", 1, H},
          {"cross_ln_gamma", 1, H},      {"cross_ln_beta", 1, H},
          {"cross_q_weight", H, H},      {"cross_q_bias", 1, H},
          {"cross_kv_weight", 2 * H, H}, {"cross_kv_bias", 1, 2 * H},
          {"cross_out_weight", H, H},    {"cross_out_bias", 1, H},
          {"ffn_ln_gamma", 1, H},        {"ffn_ln_beta", 1, H},
          {"fc1_weight", F, H},          {"fc1_bias", 1, F},
          {"fc2_weight", H, F},          {"fc2_bias", 1, H}};
}

std::vector<TensorLifetime> decoder_layer_lifetimes(const LayerConfig& config,
                                                    const DecoderLayerOptions& options,
                                                    std::vector<std::string>* ops, int* forward_ops) {
  PlanBuilder plan(config, options.prefix, options.recompute);
  const DecoderIds ids = record_decoder_layer(plan, options);
  if (ops != nullptr) *ops = plan.recorder().ops();
  if (forward_ops != nullptr) *forward_ops = ids.forward_steps;
  return planned_lifetimes(plan, ids.forward_steps, options.retain_forward);
}

void add_decoder_parameter_ranges(ParameterRanges& ranges, const LayerConfig& config,
                                  const DecoderLayerWeights& weights, const DecoderLayerGrads& grads) {
  ranges.add_layer(decoder_layer_parameter_shapes(config), dtype_size(config.dtype), weights, grads,
                   [](auto& t, auto&& fn) { for_each_decoder_tensor(t, fn); });
}

// ---------------------------------------------------------------------------------------------

struct DecoderLayer::Impl {
  DecoderIds ids;
  ParameterRanges ranges{"DecoderLayer"};
  AttentionTensors<const void*> self_w, cross_w;
  AttentionTensors<void*> self_g, cross_g;
  FfnTensors<const void*> ffn_w;
  FfnTensors<void*> ffn_g;
  std::unique_ptr<PlannedLayer> planned;
  // The last forward, which backward() differentiates.
  bool have_forward = false;
  std::size_t batch = 0, len = 0, src_len = 0;
  const void* x = nullptr;
  const void* enc = nullptr;
  std::uint64_t seed = 0, base = 0;
  // A forward_kv from a CrossAttentionKV: the object, its layer and its forward_count() then.
  const CrossAttentionKV* kv_object = nullptr;
  int kv_layer = -1;
  std::uint64_t kv_forward = 0;

  std::size_t bytes(const LayerConfig& c, std::size_t positions) const {
    return batch * positions * static_cast<std::size_t>(c.hidden) * dtype_size(c.dtype);
  }

  template <class T>
  void forward(const LayerConfig& c, const std::string& prefix, T* y, const T* x_in, const T* enc_in,
               const std::int32_t* target_lengths, const std::int32_t* source_lengths, cudaStream_t stream) {
    LayerRun<T> r("DecoderLayer", prefix, planned->memory(), planned->ops(), 0, planned->gemm(), stream);
    const Sublayers<T> s = sublayers<T>(c);
    const std::int64_t TH = static_cast<std::int64_t>(batch * len) * c.hidden;
    kernels::SoftmaxMask self_mask;
    self_mask.causal = true;
    self_mask.key_lengths = target_lengths;
    kernels::SoftmaxMask cross_mask;
    cross_mask.key_lengths = source_lengths;
    T* self_out = r.between(ids.self_out, TH);
    s.self.forward(r, self_out, x_in, nullptr, self_mask);
    T* cross_out = r.between(ids.cross_out, TH);
    s.cross.forward(r, cross_out, self_out, enc_in, cross_mask);
    s.ffn.forward(r, y, cross_out);
    planned->require_ran("forward", 0, r.step());
  }

  template <class T>
  void backward(const LayerConfig& c, const std::string& prefix, T* dx, T* d_enc, const T* dy,
                cudaStream_t stream) {
    const int first = planned->forward_steps();
    LayerRun<T> r("DecoderLayer", prefix, planned->memory(), planned->ops(), first, planned->gemm(), stream);
    const Sublayers<T> s = sublayers<T>(c);
    const std::int64_t TH = static_cast<std::int64_t>(batch * len) * c.hidden;
    T* d_cross_out = r.between(ids.d_cross_out, TH);
    s.ffn.backward(r, d_cross_out, dy, r.between(ids.cross_out, TH));
    T* d_self_out = r.between(ids.d_self_out, TH);
    const T* self_out = r.between(ids.self_out, TH);
    s.cross.backward(r, d_self_out, d_enc, d_cross_out, self_out, static_cast<const T*>(enc));
    s.self.backward(r, dx, nullptr, d_self_out, static_cast<const T*>(x), nullptr);
    planned->require_ran("backward", first, r.step());
  }

 private:
  template <class T>
  struct Sublayers {
    AttentionSublayer<T> self, cross;
    FfnSublayer<T> ffn;
  };
  // Dropout streams base+0..5 in ref::decoder_layer_dropout_masks' order.
  template <class T>
  Sublayers<T> sublayers(const LayerConfig& c) const {
    const std::int64_t B = static_cast<std::int64_t>(batch), L = static_cast<std::int64_t>(len),
                       S = static_cast<std::int64_t>(src_len);
    const float pa = static_cast<float>(c.attn_dropout), ph = static_cast<float>(c.hidden_dropout),
                pf = static_cast<float>(c.activation_dropout);
    return {{c, ids.self, self_w, self_g, {B, L, L}, {{pa, seed, base + 0}, {ph, seed, base + 1}}},
            {c, ids.cross, cross_w, cross_g, {B, L, S}, {{pa, seed, base + 2}, {ph, seed, base + 3}}},
            {c, ids.ffn, ffn_w, ffn_g, B * L, {{pf, seed, base + 4}, {ph, seed, base + 5}}}};
  }
};

DecoderLayer::DecoderLayer(const LayerConfig& config, const DecoderLayerWeights& weights,
                           const DecoderLayerGrads& grads, DeviceAllocator& allocator,
                           DecoderLayerOptions options)
    : config_(config), options_(std::move(options)), weights_(weights), grads_(grads) {
  config_.validate();
  const bool ext = options_.external_kv;
  SEQBENCH_REQUIRE(
      !ext || (weights_.cross_kv_weight == nullptr && weights_.cross_kv_bias == nullptr &&
               grads_.cross_kv_weight == nullptr && grads_.cross_kv_bias == nullptr),
      "DecoderLayer: options.external_kv: weights and grads cross_kv_weight and cross_kv_bias must "
      "be null (the K/V projection is the caller's, e.g. CrossAttentionKV)");
  // With external K/V the four cross_kv pointers are null by the check above; every other
  // parameter and gradient must be given.
  const std::string missing = null_parameters(weights_, grads_, [ext](auto& t, auto&& fn) {
    for_each_decoder_tensor(t, [&](const char* name, auto& ptr) {
      const std::string n(name);
      if (ext && (n == "cross_kv_weight" || n == "cross_kv_bias")) return;
      fn(name, ptr);
    });
  });
  SEQBENCH_REQUIRE(missing.empty(), "DecoderLayer: null parameter pointer(s): " << missing);
  SEQBENCH_REQUIRE(!options_.prefix.empty(),
                   "DecoderLayer: options.prefix is empty (the planned tensors' names)");
  ParameterRanges ranges("DecoderLayer");
  add_decoder_parameter_ranges(ranges, config_, weights_, grads_);
  ranges.require_gradients_disjoint();
  PlanBuilder plan(config_, options_.prefix, options_.recompute);  // host only
  impl_ = std::make_unique<Impl>();
  impl_->ranges = std::move(ranges);
  impl_->ids = record_decoder_layer(plan, options_);
  impl_->self_w = self_attention_tensors_of(weights_);
  impl_->self_g = self_attention_tensors_of(grads_);
  impl_->cross_w = cross_attention_tensors_of(weights_);
  impl_->cross_g = cross_attention_tensors_of(grads_);
  impl_->ffn_w = ffn_tensors_of(weights_);
  impl_->ffn_g = ffn_tensors_of(grads_);
  impl_->planned =
      std::make_unique<PlannedLayer>("DecoderLayer", plan, impl_->ids.forward_steps, allocator, options_.gemm,
                                     options_.gemm_workspace_bytes, options_.retain_forward);
}

DecoderLayer::~DecoderLayer() = default;

const MemoryManager& DecoderLayer::memory() const {
  return impl_->planned->memory();
}

std::size_t DecoderLayer::block_bytes() const {
  return memory().block_bytes();
}

void DecoderLayer::forward(void* y, const void* x, const void* encoder_out, std::size_t batch_size,
                           std::size_t target_len, std::size_t source_len, const std::int32_t* target_lengths,
                           const std::int32_t* source_lengths, std::uint64_t seed, std::uint64_t base_offset,
                           cudaStream_t stream) {
  SEQBENCH_NVTX_RANGE("decoder_layer_fwd");
  SEQBENCH_REQUIRE(!options_.external_kv,
                   "DecoderLayer::forward: the layer takes external K/V heads (options.external_kv): call "
                   "forward_kv");
  run_forward("forward", y, x, encoder_out, batch_size, target_len, source_len, target_lengths,
              source_lengths, seed, base_offset, stream);
}

void DecoderLayer::forward_kv(void* y, const void* x, const void* kv_heads, std::size_t batch_size,
                              std::size_t target_len, std::size_t source_len,
                              const std::int32_t* target_lengths, const std::int32_t* source_lengths,
                              std::uint64_t seed, std::uint64_t base_offset, cudaStream_t stream) {
  SEQBENCH_NVTX_RANGE("decoder_layer_fwd");
  SEQBENCH_REQUIRE(
      options_.external_kv,
      "DecoderLayer::forward_kv: the layer projects the encoder output itself (options.external_kv "
      "is false): call forward");
  impl_->kv_object = nullptr;
  run_forward("forward_kv", y, x, kv_heads, batch_size, target_len, source_len, target_lengths,
              source_lengths, seed, base_offset, stream);
}

void DecoderLayer::forward_kv(void* y, const void* x, const CrossAttentionKV& kv, int layer,
                              std::size_t target_len, const std::int32_t* target_lengths,
                              const std::int32_t* source_lengths, std::uint64_t seed,
                              std::uint64_t base_offset, cudaStream_t stream) {
  SEQBENCH_NVTX_RANGE("decoder_layer_fwd");
  SEQBENCH_REQUIRE(
      options_.external_kv,
      "DecoderLayer::forward_kv: the layer projects the encoder output itself (options.external_kv "
      "is false): call forward");
  const LayerConfig& kc = kv.config();
  SEQBENCH_REQUIRE(kc.hidden == config_.hidden && kc.heads == config_.heads && kc.dtype == config_.dtype,
                   "DecoderLayer::forward_kv: the CrossAttentionKV's heads are laid out for hidden "
                       << kc.hidden << ", heads " << kc.heads << ", dtype " << dtype_name(kc.dtype)
                       << " but this layer has hidden " << config_.hidden << ", heads " << config_.heads
                       << ", dtype " << dtype_name(config_.dtype));
  const void* heads = kv.kv_heads(layer);  // checks the layer index and that the heads are live
  Impl& m = *impl_;
  m.kv_object = nullptr;  // until the forward has run
  run_forward("forward_kv", y, x, heads, kv.batch_size(), target_len, kv.source_len(), target_lengths,
              source_lengths, seed, base_offset, stream);
  m.kv_object = &kv;
  m.kv_layer = layer;
  m.kv_forward = kv.forward_count();
}

void DecoderLayer::run_forward(const char* where, void* y, const void* x, const void* kv_source,
                               std::size_t batch_size, std::size_t target_len, std::size_t source_len,
                               const std::int32_t* target_lengths, const std::int32_t* source_lengths,
                               std::uint64_t seed, std::uint64_t base_offset, cudaStream_t stream) {
  // kv_source: the encoder output [B·S, H], or (external_kv) the K/V heads [2, B, N, S, d].
  const bool ext = options_.external_kv;
  const char* kv_name = ext ? "kv_heads" : "encoder_out";
  config_.check_batch(batch_size, target_len);
  config_.check_batch(batch_size, source_len);
  SEQBENCH_REQUIRE(x != nullptr, "DecoderLayer::" << where << ": x is null");
  SEQBENCH_REQUIRE(kv_source != nullptr, "DecoderLayer::" << where << ": " << kv_name << " is null");
  SEQBENCH_REQUIRE(y != nullptr, "DecoderLayer::" << where << ": y is null");
  Impl& m = *impl_;
  m.have_forward = false;
  m.batch = batch_size;
  m.len = target_len;
  m.src_len = source_len;
  const std::size_t tb = m.bytes(config_, target_len), sb = (ext ? 2 : 1) * m.bytes(config_, source_len);
  SEQBENCH_REQUIRE(
      !bytes_overlap(y, tb, x, tb) && !bytes_overlap(y, tb, kv_source, sb),
      "DecoderLayer::" << where << ": y overlaps x or " << kv_name << "; backward needs both unchanged");
  m.planned->require_outside_block(where, "x", x, tb);
  m.planned->require_outside_block(where, "y", y, tb);
  m.planned->require_outside_block(where, kv_name, kv_source, sb);
  m.ranges.require_read_clear(where, "x", x, tb);
  m.ranges.require_read_clear(where, kv_name, kv_source, sb);
  m.ranges.require_written_clear(where, "y", y, tb);
  m.ranges.require_read_clear(where, "target_lengths", target_lengths, batch_size * sizeof(std::int32_t));
  m.ranges.require_read_clear(where, "source_lengths", source_lengths, batch_size * sizeof(std::int32_t));
  SEQBENCH_REQUIRE(base_offset <= UINT64_MAX - kDecoderLayerDropoutOffsets,
                   "DecoderLayer::" << where << ": base_offset " << base_offset << " leaves no room for the "
                                    << kDecoderLayerDropoutOffsets << " dropout streams");
  m.seed = seed;
  m.base = base_offset;
  dispatch_dtype(config_.dtype, [&](auto tag) {
    using T = decltype(tag);
    m.forward<T>(config_, options_.prefix, static_cast<T*>(y), static_cast<const T*>(x),
                 static_cast<const T*>(kv_source), target_lengths, source_lengths, stream);
  });
  m.planned->memory().set_step(-1);
  m.have_forward = true;
  m.x = x;
  m.enc = kv_source;
}

void DecoderLayer::backward(void* dx, void* d_encoder_out, const void* dy, const void* x,
                            const void* encoder_out, cudaStream_t stream) {
  SEQBENCH_NVTX_RANGE("decoder_layer_bwd");
  SEQBENCH_REQUIRE(!options_.external_kv,
                   "DecoderLayer::backward: the layer takes external K/V heads (options.external_kv): call "
                   "backward_kv");
  run_backward("backward", dx, d_encoder_out, dy, x, encoder_out, stream);
}

void DecoderLayer::backward_kv(void* dx, void* d_kv_heads, const void* dy, const void* x,
                               const void* kv_heads, cudaStream_t stream) {
  SEQBENCH_NVTX_RANGE("decoder_layer_bwd");
  SEQBENCH_REQUIRE(options_.external_kv,
                   "DecoderLayer::backward_kv: the layer projects the encoder output itself "
                   "(options.external_kv is false): call backward");
  SEQBENCH_REQUIRE(impl_->kv_object == nullptr,
                   "DecoderLayer::backward_kv: the last forward_kv took its heads from a CrossAttentionKV; "
                   "differentiate it with backward_kv(dx, kv, layer, dy, x, stream), which marks the "
                   "gradient written");
  run_backward("backward_kv", dx, d_kv_heads, dy, x, kv_heads, stream);
}

void DecoderLayer::backward_kv(void* dx, CrossAttentionKV& kv, int layer, const void* dy, const void* x,
                               cudaStream_t stream) {
  SEQBENCH_NVTX_RANGE("decoder_layer_bwd");
  SEQBENCH_REQUIRE(options_.external_kv,
                   "DecoderLayer::backward_kv: the layer projects the encoder output itself "
                   "(options.external_kv is false): call backward");
  const Impl& m = *impl_;
  SEQBENCH_REQUIRE(m.kv_object == &kv && m.kv_layer == layer,
                   "DecoderLayer::backward_kv: the last forward_kv did not read layer "
                       << layer << " of this CrossAttentionKV ("
                       << (m.kv_object == nullptr ? std::string("it took raw heads, or none ran")
                                                  : "it read layer " + std::to_string(m.kv_layer) +
                                                        (m.kv_object == &kv ? "" : " of another object"))
                       << ")");
  SEQBENCH_REQUIRE(
      kv.forward_count() == m.kv_forward,
      "DecoderLayer::backward_kv: the CrossAttentionKV has run forward() again since this layer's "
      "forward_kv, so the heads it read are gone (run forward_kv again)");
  const void* heads = kv.kv_heads(layer);  // refused once kv.backward() has consumed them
  run_backward("backward_kv", dx, kv.d_kv_heads(layer), dy, x, heads, stream);
  kv.mark_d_kv_heads_written(layer);
}

void DecoderLayer::run_backward(const char* where, void* dx, void* d_kv_source, const void* dy, const void* x,
                                const void* kv_source, cudaStream_t stream) {
  const bool ext = options_.external_kv;
  const char* kv_name = ext ? "kv_heads" : "encoder_out";
  const char* d_kv_name = ext ? "d_kv_heads" : "d_encoder_out";
  Impl& m = *impl_;
  SEQBENCH_REQUIRE(m.have_forward,
                   "DecoderLayer::" << where << ": no " << (ext ? "forward_kv()" : "forward()")
                                    << " to differentiate (call " << (ext ? "forward_kv" : "forward")
                                    << " first; a backward consumes its forward unless "
                                       "options.retain_forward)");
  SEQBENCH_REQUIRE(dx != nullptr && dy != nullptr && d_kv_source != nullptr,
                   "DecoderLayer::" << where << ": dx, dy or " << d_kv_name << " is null");
  SEQBENCH_REQUIRE(x == m.x && kv_source == m.enc,
                   "DecoderLayer::" << where << ": x or " << kv_name << " is not the last forward's (got "
                                    << x << ", " << kv_source << "; the forward ran on " << m.x << ", "
                                    << m.enc << ")");
  const std::size_t tb = m.bytes(config_, m.len), sb = (ext ? 2 : 1) * m.bytes(config_, m.src_len);
  SEQBENCH_REQUIRE(!bytes_overlap(d_kv_source, sb, dx, tb) && !bytes_overlap(d_kv_source, sb, dy, tb) &&
                       !bytes_overlap(d_kv_source, sb, x, tb) &&
                       !bytes_overlap(d_kv_source, sb, kv_source, sb),
                   "DecoderLayer::" << where << ": " << d_kv_name << " overlaps dx, dy, x or " << kv_name);
  m.planned->require_outside_block(where, "dx", dx, tb);
  m.planned->require_outside_block(where, "dy", dy, tb);
  m.planned->require_outside_block(where, d_kv_name, d_kv_source, sb);
  m.ranges.require_written_clear(where, "dx", dx, tb);
  m.ranges.require_written_clear(where, d_kv_name, d_kv_source, sb);
  m.ranges.require_read_clear(where, "dy", dy, tb);
  SEQBENCH_REQUIRE(
      !bytes_overlap(dx, tb, x, tb) && !bytes_overlap(dx, tb, kv_source, sb),
      "DecoderLayer::" << where << ": dx overlaps x or " << kv_name
                       << "; both must stay unchanged while their forward can be differentiated");
  // A throw part-way (a CUDA or cuBLASLt error) may leave the forward's tensors overwritten by the
  // backward's temporaries: no retry may differentiate them. Set again only once the run completes.
  m.have_forward = false;
  dispatch_dtype(config_.dtype, [&](auto tag) {
    using T = decltype(tag);
    m.backward<T>(config_, options_.prefix, static_cast<T*>(dx), static_cast<T*>(d_kv_source),
                  static_cast<const T*>(dy), stream);
  });
  m.planned->memory().set_step(-1);
  // The backward's temporaries have reused the bytes the forward kept, unless they were retained.
  m.have_forward = m.planned->retains_forward();
}

}  // namespace seqbench::layers
