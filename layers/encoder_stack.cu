#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/byte_range.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/nvtx.h"
#include "layers/encoder_pass.h"
#include "layers/encoder_stack.h"
#include "layers/layer_run.h"
#include "layers/parameter_ranges.h"

namespace seqbench::layers {

namespace {

std::string layer_prefix(const EncoderStackOptions& o, int layer) {
  return o.prefix + std::to_string(layer) + ".";
}

// The stack's tensors and its layers' passes.
struct StackRecord {
  TensorId x = kNoTensor, y = kNoTensor, dy = kNoTensor, dx = kNoTensor;
  std::vector<TensorId> hidden;    // [layers − 1]: layer i's output, layer i+1's input
  std::vector<TensorId> d_hidden;  // [layers − 1]: their gradients
  std::vector<EncoderIds> ids;     // [layers]
  EncoderStackSteps steps;
};

void require_layers(int layers) {
  SEQBENCH_REQUIRE(layers >= 1, "EncoderStack: layers = " << layers << " (must be >= 1)");
}

// The dry run: every layer's forward from the first to the last, then every backward from the
// last to the first. forward() and backward() execute exactly these ops in this order.
StackRecord record_encoder_stack(PlanBuilder& plan, int layers, const EncoderStackOptions& o) {
  require_layers(layers);
  StackRecord r;
  const std::size_t TH = plan.tokens() * plan.hidden();
  const auto n = static_cast<std::size_t>(layers);
  r.x = plan.external("x");
  r.y = plan.external("y");
  r.dy = plan.external("dy");
  r.dx = plan.external("dx");
  if (o.gemm == nullptr) {
    plan.set_prefix(o.prefix + ".");
    plan.plan_gemm_workspace(o.gemm_workspace_bytes);
  }
  r.hidden.assign(n - 1, kNoTensor);
  r.d_hidden.assign(n - 1, kNoTensor);
  r.ids.resize(n);
  r.steps.forward_start.assign(n, 0);
  r.steps.backward_start.assign(n, 0);
  for (std::size_t i = 0; i < n; ++i) {
    plan.set_prefix(layer_prefix(o, static_cast<int>(i)));
    if (i + 1 < n) r.hidden[i] = plan.act("out", TH);
    r.steps.forward_start[i] = plan.steps();
    r.ids[i] = record_encoder_forward(plan, i == 0 ? r.x : r.hidden[i - 1], i + 1 < n ? r.hidden[i] : r.y);
  }
  r.steps.forward_steps = plan.steps();
  for (std::size_t k = n; k-- > 0;) {
    if (k > 0) {
      plan.set_prefix(layer_prefix(o, static_cast<int>(k - 1)));
      r.d_hidden[k - 1] = plan.act("d_out", TH);
    }
    plan.set_prefix(layer_prefix(o, static_cast<int>(k)));
    r.steps.backward_start[k] = plan.steps();
    record_encoder_backward(plan, r.ids[k], k + 1 < n ? r.d_hidden[k] : r.dy,
                            k > 0 ? r.d_hidden[k - 1] : r.dx);
  }
  return r;
}

// The first step after layer i's forward (backward = false) or backward.
int pass_end(const EncoderStackSteps& s, std::size_t i, bool backward, int total_steps) {
  if (!backward) return i + 1 < s.forward_start.size() ? s.forward_start[i + 1] : s.forward_steps;
  return i > 0 ? s.backward_start[i - 1] : total_steps;
}

}  // namespace

std::uint64_t encoder_stack_dropout_offsets(int layers) {
  require_layers(layers);
  return kEncoderLayerDropoutOffsets * static_cast<std::uint64_t>(layers);
}

std::vector<TensorLifetime> encoder_stack_lifetimes(const LayerConfig& config, int layers,
                                                    const EncoderStackOptions& options,
                                                    std::vector<std::string>* ops, EncoderStackSteps* steps) {
  PlanBuilder plan(config, layer_prefix(options, 0), options.recompute);
  const StackRecord r = record_encoder_stack(plan, layers, options);
  if (ops != nullptr) *ops = plan.recorder().ops();
  if (steps != nullptr) *steps = r.steps;
  return planned_lifetimes(plan, r.steps.forward_steps, options.retain_forward);
}

// ---------------------------------------------------------------------------------------------

struct EncoderStack::Impl {
  StackRecord rec;
  ParameterRanges ranges{"EncoderStack"};  // every layer's views
  std::vector<std::string> prefixes;       // LayerRun keeps a reference: they live here
  std::vector<EncoderParams> params;
  std::unique_ptr<PlannedLayer> planned;
  // The last forward, which backward() differentiates.
  bool have_forward = false;
  std::size_t batch = 0, len = 0;
  std::uint64_t seed = 0, base_offset = 0;
  const void* x = nullptr;

  EncoderPassShape shape_of(std::size_t layer) const {
    return {static_cast<std::int64_t>(batch), static_cast<std::int64_t>(len), seed,
            base_offset + kEncoderLayerDropoutOffsets * layer};
  }

  template <class T>
  void forward(const LayerConfig& c, bool causal, T* y, const T* x_in, const std::int32_t* key_lengths,
               cudaStream_t stream) {
    const std::size_t n = params.size();
    const std::int64_t TH = static_cast<std::int64_t>(batch * len) * c.hidden;
    for (std::size_t i = 0; i < n; ++i) {
      const int first = rec.steps.forward_start[i];
      LayerRun<T> r("EncoderStack", prefixes[i], planned->memory(), planned->ops(), first, planned->gemm(),
                    stream);
      const T* in = i == 0 ? x_in : r.between(rec.hidden[i - 1], TH);
      T* out = i + 1 < n ? r.between(rec.hidden[i], TH) : y;
      run_encoder_forward<T>(r, c, rec.ids[i], params[i], shape_of(i), causal, key_lengths, out, in);
      require_ran(i, false, r.step());
    }
  }

  template <class T>
  void backward(const LayerConfig& c, T* dx, const T* dy, const T* x_in, cudaStream_t stream) {
    const std::size_t n = params.size();
    const std::int64_t TH = static_cast<std::int64_t>(batch * len) * c.hidden;
    for (std::size_t i = n; i-- > 0;) {
      const int first = rec.steps.backward_start[i];
      LayerRun<T> r("EncoderStack", prefixes[i], planned->memory(), planned->ops(), first, planned->gemm(),
                    stream);
      const T* d_out = i + 1 < n ? r.between(rec.d_hidden[i], TH) : dy;
      T* d_in = i > 0 ? r.between(rec.d_hidden[i - 1], TH) : dx;
      const T* in = i > 0 ? r.between(rec.hidden[i - 1], TH) : x_in;
      run_encoder_backward<T>(r, c, rec.ids[i], params[i], shape_of(i), d_in, d_out, in);
      require_ran(i, true, r.step());
    }
  }

  void require_ran(std::size_t layer, bool backward, int end_step) const {
    const int want = pass_end(rec.steps, layer, backward, static_cast<int>(planned->ops().size()));
    SEQBENCH_REQUIRE(end_step == want, "EncoderStack: layer "
                                           << layer << "'s " << (backward ? "backward" : "forward")
                                           << " ended at step " << end_step << ", the dry run has " << want);
  }
};

EncoderStack::EncoderStack(const LayerConfig& config, std::vector<EncoderLayerWeights> weights,
                           std::vector<EncoderLayerGrads> grads, DeviceAllocator& allocator,
                           EncoderStackOptions options)
    : config_(config), options_(std::move(options)), weights_(std::move(weights)), grads_(std::move(grads)) {
  config_.validate();
  const int n = static_cast<int>(weights_.size());
  require_layers(n);
  SEQBENCH_REQUIRE(grads_.size() == weights_.size(), "EncoderStack: " << weights_.size() << " weights but "
                                                                      << grads_.size()
                                                                      << " grads entries (one per layer)");
  for (std::size_t i = 0; i < weights_.size(); ++i) {
    const std::string missing =
        null_parameters(weights_[i], grads_[i], [](auto& t, auto&& fn) { for_each_encoder_tensor(t, fn); });
    SEQBENCH_REQUIRE(missing.empty(),
                     "EncoderStack: layer " << i << ": null parameter pointer(s): " << missing);
  }
  SEQBENCH_REQUIRE(!options_.prefix.empty(),
                   "EncoderStack: options.prefix is empty (the planned tensors' names)");
  ParameterRanges ranges("EncoderStack");
  for (std::size_t i = 0; i < weights_.size(); ++i)
    add_encoder_parameter_ranges(ranges, config_, weights_[i], grads_[i], "layer " + std::to_string(i) + " ");
  ranges.require_gradients_disjoint();
  PlanBuilder plan(config_, layer_prefix(options_, 0), options_.recompute);  // host only
  impl_ = std::make_unique<Impl>();
  impl_->ranges = std::move(ranges);
  impl_->rec = record_encoder_stack(plan, n, options_);
  for (int i = 0; i < n; ++i) {
    impl_->prefixes.push_back(layer_prefix(options_, i));
    impl_->params.push_back(
        encoder_params_of(weights_[static_cast<std::size_t>(i)], grads_[static_cast<std::size_t>(i)]));
  }
  impl_->planned =
      std::make_unique<PlannedLayer>("EncoderStack", plan, impl_->rec.steps.forward_steps, allocator,
                                     options_.gemm, options_.gemm_workspace_bytes, options_.retain_forward);
}

EncoderStack::~EncoderStack() = default;

const MemoryManager& EncoderStack::memory() const {
  return impl_->planned->memory();
}

std::size_t EncoderStack::block_bytes() const {
  return memory().block_bytes();
}

void EncoderStack::forward(void* y, const void* x, std::size_t batch_size, std::size_t seq_len,
                           const std::int32_t* key_lengths, std::uint64_t seed, std::uint64_t base_offset,
                           cudaStream_t stream) {
  SEQBENCH_NVTX_RANGE("encoder_stack_fwd");
  config_.check_batch(batch_size, seq_len);
  SEQBENCH_REQUIRE(x != nullptr, "EncoderStack::forward: x is null");
  SEQBENCH_REQUIRE(y != nullptr, "EncoderStack::forward: y is null");
  const std::size_t bytes =
      batch_size * seq_len * static_cast<std::size_t>(config_.hidden) * dtype_size(config_.dtype);
  SEQBENCH_REQUIRE(!bytes_overlap(x, bytes, y, bytes), "EncoderStack::forward: y overlaps x ("
                                                           << bytes
                                                           << " bytes each); backward needs x unchanged");
  impl_->planned->require_outside_block("forward", "x", x, bytes);
  impl_->planned->require_outside_block("forward", "y", y, bytes);
  impl_->ranges.require_read_clear("forward", "x", x, bytes);
  impl_->ranges.require_written_clear("forward", "y", y, bytes);
  impl_->ranges.require_read_clear("forward", "key_lengths", key_lengths, batch_size * sizeof(std::int32_t));
  const std::uint64_t offsets = encoder_stack_dropout_offsets(layers());
  SEQBENCH_REQUIRE(base_offset <= UINT64_MAX - offsets, "EncoderStack::forward: base_offset "
                                                            << base_offset << " leaves no room for the "
                                                            << offsets << " dropout streams of " << layers()
                                                            << " layers");
  impl_->have_forward = false;
  impl_->batch = batch_size;
  impl_->len = seq_len;
  impl_->seed = seed;
  impl_->base_offset = base_offset;
  dispatch_dtype(config_.dtype, [&](auto tag) {
    using T = decltype(tag);
    impl_->forward<T>(config_, options_.causal, static_cast<T*>(y), static_cast<const T*>(x), key_lengths,
                      stream);
  });
  impl_->planned->memory().set_step(-1);
  impl_->have_forward = true;
  impl_->x = x;
}

void EncoderStack::backward(void* dx, const void* dy, const void* x, cudaStream_t stream) {
  SEQBENCH_NVTX_RANGE("encoder_stack_bwd");
  SEQBENCH_REQUIRE(impl_->have_forward,
                   "EncoderStack::backward: no forward() to differentiate (call forward first; a "
                   "backward consumes its forward unless options.retain_forward)");
  SEQBENCH_REQUIRE(dx != nullptr, "EncoderStack::backward: dx is null");
  SEQBENCH_REQUIRE(dy != nullptr, "EncoderStack::backward: dy is null");
  SEQBENCH_REQUIRE(x == impl_->x, "EncoderStack::backward: x is not the last forward's input (got "
                                      << x << ", the forward ran on " << impl_->x << ")");
  const std::size_t bytes =
      impl_->batch * impl_->len * static_cast<std::size_t>(config_.hidden) * dtype_size(config_.dtype);
  impl_->planned->require_outside_block("backward", "dx", dx, bytes);
  impl_->planned->require_outside_block("backward", "dy", dy, bytes);
  impl_->ranges.require_written_clear("backward", "dx", dx, bytes);
  impl_->ranges.require_read_clear("backward", "dy", dy, bytes);
  SEQBENCH_REQUIRE(!bytes_overlap(dx, bytes, x, bytes), "EncoderStack::backward: dx overlaps x ("
                                                            << bytes
                                                            << " bytes each); x must stay unchanged "
                                                               "while its forward can be differentiated");
  // A throw part-way (a CUDA or cuBLASLt error) may leave the forward's tensors overwritten by the
  // backward's temporaries: no retry may differentiate them. Set again only once the run completes.
  impl_->have_forward = false;
  dispatch_dtype(config_.dtype, [&](auto tag) {
    using T = decltype(tag);
    impl_->backward<T>(config_, static_cast<T*>(dx), static_cast<const T*>(dy), static_cast<const T*>(x),
                       stream);
  });
  impl_->planned->memory().set_step(-1);
  // The backward's temporaries have reused the bytes the forward kept, unless they were retained.
  impl_->have_forward = impl_->planned->retains_forward();
}

}  // namespace seqbench::layers
