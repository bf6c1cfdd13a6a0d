#include <cstdint>
#include <memory>
#include <string>

#include "core/byte_range.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/nvtx.h"
#include "kernels/softmax.h"
#include "layers/attention_sublayer.h"
#include "layers/baseline_decoder_layer.h"
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

struct BaselineDecoderLayer::Impl : baseline::LayerState {
  ParameterRanges ranges{"BaselineDecoderLayer"};
  // The last forward's source length and inputs, and what its backward reads.
  std::size_t src_len = 0;
  const void* x = nullptr;
  const void* enc = nullptr;
  AttentionSaved self;
  EagerTensor x1;  // the self-attention sub-layer's output, the cross-attention's input [T, H]
  AttentionSaved cross;
  EagerTensor x2;  // the cross-attention sub-layer's output, the FFN's input [T, H]
  FfnSaved ffn;

  using LayerState::LayerState;

  void release() {
    self = AttentionSaved{};
    cross = AttentionSaved{};
    ffn = FfnSaved{};
    x1.reset();
    x2.reset();
    have_forward = false;
  }

  std::size_t bytes(const LayerConfig& c, std::size_t positions) const {
    return batch * positions * static_cast<std::size_t>(c.hidden) * dtype_size(c.dtype);
  }

  // Dropout streams base+0..5 in DecoderLayer's and ref::decoder_layer_dropout_masks' order.
  SublayerDropout self_dropout(const LayerConfig& c) const {
    return dropouts(c.attn_dropout, c.hidden_dropout, 0);
  }
  SublayerDropout cross_dropout(const LayerConfig& c) const {
    return dropouts(c.attn_dropout, c.hidden_dropout, 2);
  }
  SublayerDropout ffn_dropout(const LayerConfig& c) const {
    return dropouts(c.activation_dropout, c.hidden_dropout, 4);
  }
};

BaselineDecoderLayer::BaselineDecoderLayer(const LayerConfig& config, const DecoderLayerWeights& weights,
                                           const DecoderLayerGrads& grads, DeviceAllocator& allocator,
                                           BaselineDecoderLayerOptions options)
    : config_(config), options_(options), weights_(weights), grads_(grads) {
  config_.validate();
  const std::string missing =
      null_parameters(weights_, grads_, [](auto& t, auto&& fn) { for_each_decoder_tensor(t, fn); });
  SEQBENCH_REQUIRE(missing.empty(), "BaselineDecoderLayer: null parameter pointer(s): " << missing);
  ParameterRanges ranges("BaselineDecoderLayer");
  add_decoder_parameter_ranges(ranges, config_, weights_, grads_);
  ranges.require_gradients_disjoint();
  impl_ = std::make_unique<Impl>(allocator, options_.gemm_workspace_bytes);
  impl_->ranges = std::move(ranges);
}

BaselineDecoderLayer::~BaselineDecoderLayer() {
  if (impl_) impl_->release();  // saved tensors before the workspace, as Impl's members would anyway
}

void BaselineDecoderLayer::release() {
  impl_->release();
}

std::size_t BaselineDecoderLayer::saved_bytes() const {
  const Impl& m = *impl_;
  return m.self.bytes() + m.x1.bytes() + m.cross.bytes() + m.x2.bytes() + m.ffn.bytes();
}

void BaselineDecoderLayer::forward(void* y, const void* x, const void* encoder_out, std::size_t batch_size,
                                   std::size_t target_len, std::size_t source_len,
                                   const std::int32_t* target_lengths, const std::int32_t* source_lengths,
                                   std::uint64_t seed, std::uint64_t base_offset, cudaStream_t stream) {
  SEQBENCH_NVTX_RANGE("baseline_decoder_layer_fwd");
  config_.check_batch(batch_size, target_len);
  config_.check_batch(batch_size, source_len);
  SEQBENCH_REQUIRE(x != nullptr, "BaselineDecoderLayer::forward: x is null");
  SEQBENCH_REQUIRE(encoder_out != nullptr, "BaselineDecoderLayer::forward: encoder_out is null");
  SEQBENCH_REQUIRE(y != nullptr, "BaselineDecoderLayer::forward: y is null");
  Impl& m = *impl_;
  const std::size_t unit = static_cast<std::size_t>(config_.hidden) * dtype_size(config_.dtype);
  const std::size_t tb = batch_size * target_len * unit, sb = batch_size * source_len * unit;
  SEQBENCH_REQUIRE(!bytes_overlap(y, tb, x, tb) && !bytes_overlap(y, tb, encoder_out, sb),
                   "BaselineDecoderLayer::forward: y overlaps x or encoder_out (y, x "
                       << tb << " bytes, encoder_out " << sb << " bytes); backward needs both unchanged");
  m.ranges.require_read_clear("forward", "x", x, tb);
  m.ranges.require_read_clear("forward", "encoder_out", encoder_out, sb);
  m.ranges.require_written_clear("forward", "y", y, tb);
  m.ranges.require_read_clear("forward", "target_lengths", target_lengths, batch_size * sizeof(std::int32_t));
  m.ranges.require_read_clear("forward", "source_lengths", source_lengths, batch_size * sizeof(std::int32_t));
  SEQBENCH_REQUIRE(base_offset <= UINT64_MAX - kDecoderLayerDropoutOffsets,
                   "BaselineDecoderLayer::forward: base_offset " << base_offset << " leaves no room for the "
                                                                 << kDecoderLayerDropoutOffsets
                                                                 << " dropout streams");
  m.release();  // the previous graph is dropped before this one is built
  m.begin_forward(batch_size, target_len, seed, base_offset);
  m.src_len = source_len;
  kernels::SoftmaxMask self_mask;
  self_mask.causal = true;
  self_mask.key_lengths = target_lengths;
  kernels::SoftmaxMask cross_mask;
  cross_mask.key_lengths = source_lengths;
  const std::int64_t S = static_cast<std::int64_t>(source_len);
  dispatch_dtype(config_.dtype, [&](auto tag) {
    using T = decltype(tag);
    const Eager<T> e = m.template eager<T>(config_, stream, true);
    m.x1 = e.tensor(e.T_ * e.H);
    e.attention_forward(m.self, m.x1.template as<T>(), static_cast<const T*>(x), nullptr, e.L,
                        self_attention_tensors_of(weights_), self_mask, m.self_dropout(config_));
    m.x2 = e.tensor(e.T_ * e.H);
    e.attention_forward(m.cross, m.x2.template as<T>(), m.x1.template as<T>(),
                        static_cast<const T*>(encoder_out), S, cross_attention_tensors_of(weights_),
                        cross_mask, m.cross_dropout(config_));
    e.ffn_forward(m.ffn, static_cast<T*>(y), m.x2.template as<T>(), ffn_tensors_of(weights_),
                  m.ffn_dropout(config_));
  });
  m.have_forward = true;
  m.x = x;
  m.enc = encoder_out;
}

void BaselineDecoderLayer::backward(void* dx, void* d_encoder_out, const void* dy, const void* x,
                                    const void* encoder_out, cudaStream_t stream, bool retain_graph) {
  SEQBENCH_NVTX_RANGE("baseline_decoder_layer_bwd");
  Impl& m = *impl_;
  SEQBENCH_REQUIRE(m.have_forward,
                   "BaselineDecoderLayer::backward: no forward() to differentiate (call forward "
                   "first; a backward without retain_graph consumes its forward)");
  SEQBENCH_REQUIRE(dx != nullptr && dy != nullptr && d_encoder_out != nullptr,
                   "BaselineDecoderLayer::backward: dx, dy or d_encoder_out is null");
  SEQBENCH_REQUIRE(x == m.x && encoder_out == m.enc,
                   "BaselineDecoderLayer::backward: x or encoder_out is not the last forward's (got "
                       << x << ", " << encoder_out << "; the forward ran on " << m.x << ", " << m.enc << ")");
  const std::size_t tb = m.bytes(config_, m.len), sb = m.bytes(config_, m.src_len);
  SEQBENCH_REQUIRE(!bytes_overlap(d_encoder_out, sb, dx, tb) && !bytes_overlap(d_encoder_out, sb, dy, tb) &&
                       !bytes_overlap(d_encoder_out, sb, x, tb) &&
                       !bytes_overlap(d_encoder_out, sb, encoder_out, sb),
                   "BaselineDecoderLayer::backward: d_encoder_out overlaps dx, dy, x or encoder_out");
  m.ranges.require_written_clear("backward", "dx", dx, tb);
  m.ranges.require_written_clear("backward", "d_encoder_out", d_encoder_out, sb);
  m.ranges.require_read_clear("backward", "dy", dy, tb);
  SEQBENCH_REQUIRE(!bytes_overlap(dx, tb, x, tb) && !bytes_overlap(dx, tb, encoder_out, sb),
                   "BaselineDecoderLayer::backward: dx overlaps x or encoder_out; both must stay unchanged "
                   "while their forward can be differentiated");
  const std::int64_t S = static_cast<std::int64_t>(m.src_len);
  // Cleared for the run (its eager frees may drop saved tensors part-way, a throw included) and set
  // again only once it completes with the graph retained.
  m.have_forward = false;
  dispatch_dtype(config_.dtype, [&](auto tag) {
    using T = decltype(tag);
    const Eager<T> e = m.template eager<T>(config_, stream, !retain_graph);
    EagerTensor d_x2 = e.tensor(e.T_ * e.H);
    e.ffn_backward(m.ffn, d_x2.template as<T>(), static_cast<const T*>(dy), m.x2.template as<T>(),
                   ffn_tensors_of(weights_), ffn_tensors_of(grads_), m.ffn_dropout(config_));
    e.drop(m.x2);  // the FFN's input: nothing in the attentions' backward reads it
    EagerTensor d_x1 = e.tensor(e.T_ * e.H);
    e.attention_backward(m.cross, d_x1.template as<T>(), static_cast<T*>(d_encoder_out),
                         d_x2.template as<T>(), m.x1.template as<T>(), static_cast<const T*>(encoder_out), S,
                         cross_attention_tensors_of(weights_), cross_attention_tensors_of(grads_),
                         m.cross_dropout(config_));
    d_x2.reset();
    e.drop(m.x1);  // the cross-attention's input: the self-attention's backward does not read it
    e.attention_backward(m.self, static_cast<T*>(dx), nullptr, d_x1.template as<T>(),
                         static_cast<const T*>(x), nullptr, e.L, self_attention_tensors_of(weights_),
                         self_attention_tensors_of(grads_), m.self_dropout(config_));
  });
  if (retain_graph) {
    m.have_forward = true;
  } else {
    m.release();
  }
}

}  // namespace seqbench::layers
