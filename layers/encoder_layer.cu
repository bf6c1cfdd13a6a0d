#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/byte_range.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/nvtx.h"
#include "layers/encoder_layer.h"
#include "layers/encoder_pass.h"
#include "layers/parameter_ranges.h"

namespace seqbench::layers {

namespace {

// The layer's externals (its input, output and their gradients) and its passes.
struct Recorded {
  TensorId x = kNoTensor, y = kNoTensor, dy = kNoTensor, dx = kNoTensor;
  EncoderIds ids;
  int forward_steps = 0;
};

// The dry run. Every op here is one step; forward() and backward() execute exactly these ops in
// this order (each announces its name, checked against the dry run's at that step).
Recorded record_encoder_layer(PlanBuilder& plan, const EncoderLayerOptions& o) {
  Recorded r;
  r.x = plan.external("x");
  r.y = plan.external("y");
  r.dy = plan.external("dy");
  r.dx = plan.external("dx");
  if (o.gemm == nullptr) plan.plan_gemm_workspace(o.gemm_workspace_bytes);
  r.ids = record_encoder_forward(plan, r.x, r.y);
  r.forward_steps = plan.steps();
  record_encoder_backward(plan, r.ids, r.dy, r.dx);
  return r;
}

}  // namespace

std::size_t encoder_layer_max_score_elements(const LayerConfig& config) {
  return max_score_elements(config);
}

std::vector<EncoderTensorShape> encoder_layer_parameter_shapes(const LayerConfig& config) {
  config.validate();
  const std::size_t H = static_cast<std::size_t>(config.hidden);
  const std::size_t F = static_cast<std::size_t>(config.ffn);
  return {{"attn_ln_gamma", 1, H}, {"attn_ln_beta", 1, H}, {"qkv_weight", 3 * H, H}, {"qkv_bias", 1, 3 * H},
          {"out_weight", H, H},    {"out_bias", 1, H},     {"ffn_ln_gamma", 1, H},   {"ffn_ln_beta", 1, H},
          {"fc1_weight", F, H},    {"fc1_bias", 1, F},     {"fc2_weight", H, F},     {"fc2_bias", 1, H}};
}

std::vector<TensorLifetime> encoder_layer_lifetimes(const LayerConfig& config,
                                                    const EncoderLayerOptions& options,
                                                    std::vector<std::string>* ops, int* forward_ops) {
  PlanBuilder plan(config, options.prefix, options.recompute);
  const Recorded r = record_encoder_layer(plan, options);
  if (ops != nullptr) *ops = plan.recorder().ops();
  if (forward_ops != nullptr) *forward_ops = r.forward_steps;
  return planned_lifetimes(plan, r.forward_steps, options.retain_forward);
}

void add_encoder_parameter_ranges(ParameterRanges& ranges, const LayerConfig& config,
                                  const EncoderLayerWeights& weights, const EncoderLayerGrads& grads,
                                  const std::string& label) {
  ranges.add_layer(
      encoder_layer_parameter_shapes(config), dtype_size(config.dtype), weights, grads,
      [](auto& t, auto&& fn) { for_each_encoder_tensor(t, fn); }, label);
}

// ---------------------------------------------------------------------------------------------

struct EncoderLayer::Impl {
  EncoderIds ids;
  ParameterRanges ranges{"EncoderLayer"};
  EncoderParams params;
  std::unique_ptr<PlannedLayer> planned;
  // The last forward, which backward() differentiates.
  bool have_forward = false;
  EncoderPassShape shape;
  const void* x = nullptr;

  // Runs the layer's forward (backward = false) or backward for dtype T.
  template <class T>
  void run(const LayerConfig& c, const std::string& prefix, bool causal, bool backward, void* out,
           const void* in, const void* x_in, const std::int32_t* key_lengths, cudaStream_t stream) {
    const int first = backward ? planned->forward_steps() : 0;
    LayerRun<T> r("EncoderLayer", prefix, planned->memory(), planned->ops(), first, planned->gemm(), stream);
    if (!backward) {
      run_encoder_forward<T>(r, c, ids, params, shape, causal, key_lengths, static_cast<T*>(out),
                             static_cast<const T*>(in));
    } else {
      run_encoder_backward<T>(r, c, ids, params, shape, static_cast<T*>(out), static_cast<const T*>(in),
                              static_cast<const T*>(x_in));
    }
    planned->require_ran(backward ? "backward" : "forward", first, r.step());
  }
};

EncoderLayer::EncoderLayer(const LayerConfig& config, const EncoderLayerWeights& weights,
                           const EncoderLayerGrads& grads, DeviceAllocator& allocator,
                           EncoderLayerOptions options)
    : config_(config), options_(std::move(options)), weights_(weights), grads_(grads) {
  config_.validate();
  const std::string missing =
      null_parameters(weights_, grads_, [](auto& t, auto&& fn) { for_each_encoder_tensor(t, fn); });
  SEQBENCH_REQUIRE(missing.empty(), "EncoderLayer: null parameter pointer(s): " << missing);
  SEQBENCH_REQUIRE(!options_.prefix.empty(),
                   "EncoderLayer: options.prefix is empty (the planned tensors' names)");
  ParameterRanges ranges("EncoderLayer");
  add_encoder_parameter_ranges(ranges, config_, weights_, grads_);
  ranges.require_gradients_disjoint();
  PlanBuilder plan(config_, options_.prefix, options_.recompute);  // host only
  const Recorded r = record_encoder_layer(plan, options_);
  impl_ = std::make_unique<Impl>();
  impl_->ranges = std::move(ranges);
  impl_->ids = r.ids;
  impl_->params = encoder_params_of(weights_, grads_);
  impl_->planned =
      std::make_unique<PlannedLayer>("EncoderLayer", plan, r.forward_steps, allocator, options_.gemm,
                                     options_.gemm_workspace_bytes, options_.retain_forward);
}

EncoderLayer::~EncoderLayer() = default;

const MemoryManager& EncoderLayer::memory() const {
  return impl_->planned->memory();
}

std::size_t EncoderLayer::block_bytes() const {
  return memory().block_bytes();
}

void EncoderLayer::forward(void* y, const void* x, std::size_t batch_size, std::size_t seq_len,
                           const std::int32_t* key_lengths, std::uint64_t seed, std::uint64_t base_offset,
                           cudaStream_t stream) {
  SEQBENCH_NVTX_RANGE("encoder_layer_fwd");
  config_.check_batch(batch_size, seq_len);
  SEQBENCH_REQUIRE(x != nullptr, "EncoderLayer::forward: x is null");
  SEQBENCH_REQUIRE(y != nullptr, "EncoderLayer::forward: y is null");
  const std::size_t bytes =
      batch_size * seq_len * static_cast<std::size_t>(config_.hidden) * dtype_size(config_.dtype);
  SEQBENCH_REQUIRE(!bytes_overlap(x, bytes, y, bytes), "EncoderLayer::forward: y overlaps x ("
                                                           << bytes
                                                           << " bytes each); backward needs x unchanged");
  impl_->planned->require_outside_block("forward", "x", x, bytes);
  impl_->planned->require_outside_block("forward", "y", y, bytes);
  impl_->ranges.require_read_clear("forward", "x", x, bytes);
  impl_->ranges.require_written_clear("forward", "y", y, bytes);
  impl_->ranges.require_read_clear("forward", "key_lengths", key_lengths, batch_size * sizeof(std::int32_t));
  SEQBENCH_REQUIRE(base_offset <= UINT64_MAX - kEncoderLayerDropoutOffsets,
                   "EncoderLayer::forward: base_offset " << base_offset << " leaves no room for the "
                                                         << kEncoderLayerDropoutOffsets
                                                         << " dropout streams");
  impl_->have_forward = false;
  impl_->shape = {static_cast<std::int64_t>(batch_size), static_cast<std::int64_t>(seq_len), seed,
                  base_offset};
  dispatch_dtype(config_.dtype, [&](auto tag) {
    impl_->run<decltype(tag)>(config_, options_.prefix, options_.causal, false, y, x, x, key_lengths, stream);
  });
  impl_->planned->memory().set_step(-1);
  impl_->have_forward = true;
  impl_->x = x;
}

void EncoderLayer::backward(void* dx, const void* dy, const void* x, cudaStream_t stream) {
  SEQBENCH_NVTX_RANGE("encoder_layer_bwd");
  SEQBENCH_REQUIRE(impl_->have_forward,
                   "EncoderLayer::backward: no forward() to differentiate (call forward first; a "
                   "backward consumes its forward unless options.retain_forward)");
  SEQBENCH_REQUIRE(dx != nullptr, "EncoderLayer::backward: dx is null");
  SEQBENCH_REQUIRE(dy != nullptr, "EncoderLayer::backward: dy is null");
  SEQBENCH_REQUIRE(x == impl_->x, "EncoderLayer::backward: x is not the last forward's input (got "
                                      << x << ", the forward ran on " << impl_->x << ")");
  const std::size_t bytes = static_cast<std::size_t>(impl_->shape.batch * impl_->shape.len) *
                            static_cast<std::size_t>(config_.hidden) * dtype_size(config_.dtype);
  impl_->planned->require_outside_block("backward", "dx", dx, bytes);
  impl_->planned->require_outside_block("backward", "dy", dy, bytes);
  impl_->ranges.require_written_clear("backward", "dx", dx, bytes);
  impl_->ranges.require_read_clear("backward", "dy", dy, bytes);
  SEQBENCH_REQUIRE(!bytes_overlap(dx, bytes, x, bytes), "EncoderLayer::backward: dx overlaps x ("
                                                            << bytes
                                                            << " bytes each); x must stay unchanged "
                                                               "while its forward can be differentiated");
  // A throw part-way (a CUDA or cuBLASLt error) may leave the forward's tensors overwritten by the
  // backward's temporaries: no retry may differentiate them. Set again only once the run completes.
  impl_->have_forward = false;
  dispatch_dtype(config_.dtype, [&](auto tag) {
    impl_->run<decltype(tag)>(config_, options_.prefix, options_.causal, true, dx, dy, x, nullptr, stream);
  });
  impl_->planned->memory().set_step(-1);
  // The backward's temporaries have reused the bytes the forward kept, unless they were retained.
  impl_->have_forward = impl_->planned->retains_forward();
}

}  // namespace seqbench::layers
