#include <cstdint>
#include <memory>
#include <string>

#include "core/byte_range.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/nvtx.h"
#include "kernels/softmax.h"
#include "layers/attention_sublayer.h"
#include "layers/baseline_encoder_layer.h"
#include "layers/baseline_sublayers.h"
#include "layers/ffn_sublayer.h"
#include "layers/layer_run.h"
#include "layers/parameter_ranges.h"

namespace seqbench::layers {

namespace {

using baseline::AttentionSaved;
using baseline::Eager;
using baseline::FfnSaved;

}  // namespace

struct BaselineEncoderLayer::Impl : baseline::LayerState {
  ParameterRanges ranges{"BaselineEncoderLayer"};
  // The last forward's input and what its backward reads.
  const void* x = nullptr;
  AttentionSaved attn;
  EagerTensor x1;  // the attention sub-layer's output, the FFN's input [T, H]
  FfnSaved ffn;

  using LayerState::LayerState;

  void release() {
    attn = AttentionSaved{};
    ffn = FfnSaved{};
    x1.reset();
    have_forward = false;
  }

  // Dropout streams: base+0 probabilities, base+1 attention output, base+2 FFN activation, base+3
  // FFN output (EncoderLayer's and ref::encoder_layer_dropout_masks' order).
  SublayerDropout attention_dropout(const LayerConfig& c) const {
    return dropouts(c.attn_dropout, c.hidden_dropout, 0);
  }
  SublayerDropout ffn_dropout(const LayerConfig& c) const {
    return dropouts(c.activation_dropout, c.hidden_dropout, 2);
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
  ParameterRanges ranges("BaselineEncoderLayer");
  add_encoder_parameter_ranges(ranges, config_, weights_, grads_);
  ranges.require_gradients_disjoint();
  impl_ = std::make_unique<Impl>(allocator, options_.gemm_workspace_bytes, options_.gemm);
  impl_->ranges = std::move(ranges);
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
  impl_->ranges.require_read_clear("forward", "x", x, bytes);
  impl_->ranges.require_written_clear("forward", "y", y, bytes);
  impl_->ranges.require_read_clear("forward", "key_lengths", key_lengths, batch_size * sizeof(std::int32_t));
  SEQBENCH_REQUIRE(base_offset <= UINT64_MAX - kEncoderLayerDropoutOffsets,
                   "BaselineEncoderLayer::forward: base_offset " << base_offset << " leaves no room for the "
                                                                 << kEncoderLayerDropoutOffsets
                                                                 << " dropout streams");
  Impl& m = *impl_;
  m.release();  // the previous graph is dropped before this one is built
  m.begin_forward(batch_size, seq_len, seed, base_offset);
  kernels::SoftmaxMask mask;
  mask.causal = options_.causal;
  mask.key_lengths = key_lengths;
  dispatch_dtype(config_.dtype, [&](auto tag) {
    using T = decltype(tag);
    const Eager<T> e = m.template eager<T>(config_, stream, true);
    m.x1 = e.tensor(e.T_ * e.H);
    e.attention_forward(m.attn, m.x1.template as<T>(), static_cast<const T*>(x), nullptr, e.L,
                        encoder_attention_tensors_of(weights_), mask, m.attention_dropout(config_));
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
  {
    const std::size_t bytes =
        m.batch * m.len * static_cast<std::size_t>(config_.hidden) * dtype_size(config_.dtype);
    m.ranges.require_written_clear("backward", "dx", dx, bytes);
    m.ranges.require_read_clear("backward", "dy", dy, bytes);
    SEQBENCH_REQUIRE(!bytes_overlap(dx, bytes, x, bytes),
                     "BaselineEncoderLayer::backward: dx overlaps x ("
                         << bytes
                         << " bytes each); x must stay unchanged while its forward can be differentiated");
  }
  // Cleared for the run (its eager frees may drop saved tensors part-way, a throw included) and set
  // again only once it completes with the graph retained.
  m.have_forward = false;
  dispatch_dtype(config_.dtype, [&](auto tag) {
    using T = decltype(tag);
    const Eager<T> e = m.template eager<T>(config_, stream, !retain_graph);
    EagerTensor d_x1 = e.tensor(e.T_ * e.H);
    e.ffn_backward(m.ffn, d_x1.template as<T>(), static_cast<const T*>(dy), m.x1.template as<T>(),
                   ffn_tensors_of(weights_), ffn_tensors_of(grads_), m.ffn_dropout(config_));
    e.drop(m.x1);  // the FFN's input: nothing in the attention's backward reads it
    e.attention_backward(m.attn, static_cast<T*>(dx), nullptr, d_x1.template as<T>(),
                         static_cast<const T*>(x), nullptr, e.L, encoder_attention_tensors_of(weights_),
                         encoder_attention_tensors_of(grads_), m.attention_dropout(config_));
  });
  if (retain_graph) {
    m.have_forward = true;
  } else {
    m.release();
  }
}

}  // namespace seqbench::layers
