#include <memory>
#include <string>

#include "core/byte_range.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/nvtx.h"
#include "layers/baseline_encoder_stack.h"
#include "layers/eager_tensor.h"
#include "layers/gemm.h"
#include "layers/layer_run.h"
#include "layers/parameter_ranges.h"

namespace seqbench::layers {

struct BaselineEncoderStack::Impl {
  DeviceAllocator* allocator = nullptr;
  ParameterRanges ranges{"BaselineEncoderStack"};  // every layer's views
  EagerTensor gemm_workspace;
  std::unique_ptr<Gemm> gemm;
  std::vector<EagerTensor> hidden;  // [layers − 1]: layer i's output, kept for layer i+1's backward
  bool have_forward = false;
  std::size_t bytes = 0;  // one hidden state of the last forward
  const void* x = nullptr;
};

BaselineEncoderStack::BaselineEncoderStack(const LayerConfig& config,
                                           const std::vector<EncoderLayerWeights>& weights,
                                           const std::vector<EncoderLayerGrads>& grads,
                                           DeviceAllocator& allocator, BaselineEncoderLayerOptions options)
    : config_(config) {
  config_.validate();
  SEQBENCH_REQUIRE(!weights.empty(), "BaselineEncoderStack: layers = 0 (must be >= 1)");
  SEQBENCH_REQUIRE(grads.size() == weights.size(),
                   "BaselineEncoderStack: " << weights.size() << " weights but " << grads.size()
                                            << " grads entries (one per layer)");
  for (std::size_t i = 0; i < weights.size(); ++i) {
    const std::string missing =
        null_parameters(weights[i], grads[i], [](auto& t, auto&& fn) { for_each_encoder_tensor(t, fn); });
    SEQBENCH_REQUIRE(missing.empty(),
                     "BaselineEncoderStack: layer " << i << ": null parameter pointer(s): " << missing);
  }
  ParameterRanges ranges("BaselineEncoderStack");
  for (std::size_t i = 0; i < weights.size(); ++i)
    add_encoder_parameter_ranges(ranges, config_, weights[i], grads[i], "layer " + std::to_string(i) + " ");
  ranges.require_gradients_disjoint();
  impl_ = std::make_unique<Impl>();
  impl_->ranges = std::move(ranges);
  impl_->allocator = &allocator;
  if (options.gemm == nullptr) {  // one workspace and one Gemm (a cuBLASLt handle) for every layer
    impl_->gemm_workspace = EagerTensor(allocator, options.gemm_workspace_bytes);
    impl_->gemm = std::make_unique<Gemm>(impl_->gemm_workspace.get(), impl_->gemm_workspace.bytes());
    options.gemm = impl_->gemm.get();
  }
  for (std::size_t i = 0; i < weights.size(); ++i)
    layers_.push_back(
        std::make_unique<BaselineEncoderLayer>(config_, weights[i], grads[i], allocator, options));
}

BaselineEncoderStack::~BaselineEncoderStack() = default;

void BaselineEncoderStack::forward(void* y, const void* x, std::size_t batch_size, std::size_t seq_len,
                                   const std::int32_t* key_lengths, std::uint64_t seed,
                                   std::uint64_t base_offset, cudaStream_t stream) {
  SEQBENCH_NVTX_RANGE("baseline_encoder_stack_fwd");
  config_.check_batch(batch_size, seq_len);
  SEQBENCH_REQUIRE(x != nullptr, "BaselineEncoderStack::forward: x is null");
  SEQBENCH_REQUIRE(y != nullptr, "BaselineEncoderStack::forward: y is null");
  const std::size_t n = layers_.size();
  const std::uint64_t offsets = kEncoderLayerDropoutOffsets * n;
  SEQBENCH_REQUIRE(base_offset <= UINT64_MAX - offsets, "BaselineEncoderStack::forward: base_offset "
                                                            << base_offset << " leaves no room for the "
                                                            << offsets << " dropout streams of " << n
                                                            << " layers");
  const std::size_t bytes =
      batch_size * seq_len * static_cast<std::size_t>(config_.hidden) * dtype_size(config_.dtype);
  // Each layer checks its own views; a layer's output must also stay clear of the others'.
  impl_->ranges.require_read_clear("forward", "x", x, bytes);
  impl_->ranges.require_written_clear("forward", "y", y, bytes);
  impl_->ranges.require_read_clear("forward", "key_lengths", key_lengths, batch_size * sizeof(std::int32_t));
  // A new forward drops the last graph, as a new autograd graph would.
  impl_->have_forward = false;
  impl_->hidden.clear();
  impl_->bytes = bytes;
  const void* in = x;
  for (std::size_t i = 0; i < n; ++i) {
    void* out = y;
    if (i + 1 < n) {
      impl_->hidden.emplace_back(*impl_->allocator, impl_->bytes);
      out = impl_->hidden.back().get();
    }
    layers_[i]->forward(out, in, batch_size, seq_len, key_lengths, seed,
                        base_offset + kEncoderLayerDropoutOffsets * i, stream);
    in = out;
  }
  impl_->have_forward = true;
  impl_->x = x;
}

void BaselineEncoderStack::backward(void* dx, const void* dy, const void* x, cudaStream_t stream,
                                    bool retain_graph) {
  SEQBENCH_NVTX_RANGE("baseline_encoder_stack_bwd");
  SEQBENCH_REQUIRE(impl_->have_forward,
                   "BaselineEncoderStack::backward: no forward() to differentiate (call forward first)");
  SEQBENCH_REQUIRE(dx != nullptr, "BaselineEncoderStack::backward: dx is null");
  SEQBENCH_REQUIRE(dy != nullptr, "BaselineEncoderStack::backward: dy is null");
  SEQBENCH_REQUIRE(x == impl_->x, "BaselineEncoderStack::backward: x is not the last forward's input (got "
                                      << x << ", the forward ran on " << impl_->x << ")");
  impl_->ranges.require_written_clear("backward", "dx", dx, impl_->bytes);
  impl_->ranges.require_read_clear("backward", "dy", dy, impl_->bytes);
  SEQBENCH_REQUIRE(!bytes_overlap(dx, impl_->bytes, x, impl_->bytes),
                   "BaselineEncoderStack::backward: dx overlaps x ("
                       << impl_->bytes
                       << " bytes each); x must stay unchanged while its forward can be differentiated");
  // Cleared for the run (its eager frees may drop saved tensors part-way, a throw included) and set
  // again only once it completes with the graph retained.
  impl_->have_forward = false;
  const std::size_t n = layers_.size();
  EagerTensor d_out;  // the gradient of layer i's output: dy, or the layer above's d_in
  for (std::size_t i = n; i-- > 0;) {
    EagerTensor d_in;
    if (i > 0) d_in = EagerTensor(*impl_->allocator, impl_->bytes);
    const void* layer_x = i > 0 ? impl_->hidden[i - 1].get() : x;
    layers_[i]->backward(i > 0 ? d_in.get() : dx, i + 1 < n ? d_out.get() : dy, layer_x, stream,
                         retain_graph);
    // Autograd frees the consumed gradient, and (without retain_graph) the layer's input, which
    // only this layer's graph kept.
    d_out = std::move(d_in);
    if (!retain_graph && i > 0) impl_->hidden[i - 1].reset();
  }
  if (retain_graph) {
    impl_->have_forward = true;
  } else {
    impl_->hidden.clear();
  }
}

std::size_t BaselineEncoderStack::saved_bytes() const {
  std::size_t bytes = 0;
  for (const auto& l : layers_) bytes += l->saved_bytes();
  for (const EagerTensor& h : impl_->hidden) bytes += h.bytes();
  return bytes;
}

}  // namespace seqbench::layers
