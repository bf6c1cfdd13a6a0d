#include <cstdint>
#include <memory>
#include <string>

#include "core/dtype.h"
#include "core/error.h"
#include "core/nvtx.h"
#include "kernels/softmax.h"
#include "layers/attention_sublayer.h"
#include "layers/baseline_encoder_layer.h"
#include "layers/baseline_sublayers.h"
#include "layers/ffn_sublayer.h"
#include "layers/layer_run.h"

namespace seqbench::layers {

namespace {

using baseline::AttentionSaved;
using baseline::Buf;
using baseline::Eager;
using baseline::FfnSaved;

// The encoder's attention sub-layer in the shared sub-layer's terms (the fused QKV as q_weight,
// no K/V projection).
template <class P>
AttentionTensors<P> attention_view(const EncoderLayerTensors<P>& t) {
  AttentionTensors<P> a;
  a.ln_gamma = t.attn_ln_gamma;
  a.ln_beta = t.attn_ln_beta;
  a.q_weight = t.qkv_weight;
  a.q_bias = t.qkv_bias;
  a.out_weight = t.out_weight;
  a.out_bias = t.out_bias;
  return a;
}

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
    return Eager<T>::make(c, allocator, *gemm, stream, batch, len, free_saved);
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
    e.attention_forward(m.attn, m.x1.template as<T>(), static_cast<const T*>(x), nullptr, e.L,
                        attention_view(weights_), mask, m.attention_dropout(config_));
    e.ffn_forward(m.ffn, static_cast<T*>(y), m.x1.template as<T>(), ffn_tensors_of(weights_),
                  m.ffn_dropout(config_));
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
    e.ffn_backward(m.ffn, d_x1.template as<T>(), static_cast<const T*>(dy), m.x1.template as<T>(),
                   ffn_tensors_of(weights_), ffn_tensors_of(grads_), m.ffn_dropout(config_));
    e.drop(m.x1);  // the FFN's input: nothing in the attention's backward reads it
    e.attention_backward(m.attn, static_cast<T*>(dx), nullptr, d_x1.template as<T>(),
                         static_cast<const T*>(x), nullptr, e.L, attention_view(weights_),
                         attention_view(grads_), m.attention_dropout(config_));
  });
  if (!retain_graph) m.release();
}

}  // namespace seqbench::layers
