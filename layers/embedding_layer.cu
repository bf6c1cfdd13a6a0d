#include <cmath>
#include <cstdint>
#include <iomanip>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "core/byte_range.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/nvtx.h"
#include "core/stream_fork.h"
#include "layers/config.h"
#include "layers/embedding_layer.h"
#include "layers/parameter_ranges.h"

namespace seqbench::layers {

double EmbeddingLayerConfig::effective_scale() const {
  return scale.has_value() ? *scale : std::sqrt(static_cast<double>(embedding_dim));
}

std::int64_t EmbeddingLayerConfig::num_positions() const {
  return static_cast<std::int64_t>(max_seq_len) + position_offset;
}

void EmbeddingLayerConfig::validate() const {
  std::ostringstream os;
  int problems = 0;
  const auto problem = [&]() -> std::ostream& {
    if (problems++ > 0) os << "; ";
    return os;
  };
  if (vocab_size <= 0) problem() << "vocab_size (" << vocab_size << ") must be positive";
  if (embedding_dim <= 0) problem() << "embedding_dim (" << embedding_dim << ") must be positive";
  if (max_batch_tokens <= 0) problem() << "max_batch_tokens (" << max_batch_tokens << ") must be positive";
  if (max_seq_len <= 0) problem() << "max_seq_len (" << max_seq_len << ") must be positive";
  if (max_seq_len > 0 && max_batch_tokens > 0 && max_seq_len > max_batch_tokens) {
    problem() << "max_seq_len (" << max_seq_len << ") must not exceed max_batch_tokens (" << max_batch_tokens
              << "): no batch could hold one full-length sentence";
  }
  if (padding_idx != -1 && (padding_idx < 0 || (vocab_size > 0 && padding_idx >= vocab_size))) {
    problem() << "padding_idx (" << padding_idx << ") must be -1 (none) or in [0, vocab_size " << vocab_size
              << ")";
  }
  // The kernels take the ratio as a float: one that rounds to 1.0f would drop every element. (The
  // double is compared first: casting one above FLT_MAX to float is undefined.)
  if (!(std::isfinite(dropout) && dropout >= 0.0 && dropout < 1.0 && static_cast<float>(dropout) < 1.0f)) {
    if (dropout >= 0.0 && dropout < 1.0) {
      problem() << "dropout (" << std::setprecision(17) << dropout << std::setprecision(6)
                << ") rounds to 1 as the kernels' float: a ratio of 1 would drop every element";
    } else {
      problem() << "dropout (" << dropout << ") must be in [0, 1): a ratio of 1 would drop every element";
    }
  }
  const double s = effective_scale();
  if (!std::isfinite(s) || std::fabs(s) > static_cast<double>(std::numeric_limits<float>::max())) {
    problem() << "scale (" << s << ") must be finite in float";
  }
  if (position_offset < 0) problem() << "position_offset (" << position_offset << ") must not be negative";
  if (positions != kernels::PositionEncoding::sinusoidal && positions != kernels::PositionEncoding::learned) {
    problem() << "positions (" << static_cast<int>(positions) << ") is not sinusoidal or learned";
  }
  if (indexing != kernels::PositionIndexing::slot && indexing != kernels::PositionIndexing::nonpad_count) {
    problem() << "indexing (" << static_cast<int>(indexing) << ") is not slot or nonpad_count";
  }
  if (dtype != DType::f32 && dtype != DType::f16 && dtype != DType::bf16) {
    problem() << "dtype (" << static_cast<int>(dtype) << ") is not f32, f16 or bf16";
  }
  SEQBENCH_REQUIRE(problems == 0, "invalid EmbeddingLayerConfig: " << os.str());
  // The kernels' own limits at the maxima (vocab and position table sizes, sinusoid positions < 2^24):
  // the longest sentence, and the most tokens (as one-token sentences).
  const kernels::EmbeddingConfig k = kernel_config(0, 0);
  kernels::require_embedding_args(kernel_shape(1, max_seq_len), k, "EmbeddingLayerConfig");
  kernels::require_embedding_args(kernel_shape(max_batch_tokens, 1), k, "EmbeddingLayerConfig");
}

void EmbeddingLayerConfig::check_batch(std::size_t batch_size, std::size_t seq_len) const {
  check_batch_maxima(batch_size, seq_len, max_batch_tokens, max_seq_len);
}

kernels::EmbeddingShape EmbeddingLayerConfig::kernel_shape(std::int64_t batch, std::int64_t len) const {
  kernels::EmbeddingShape s;
  s.batch = batch;
  s.len = len;
  s.hidden = embedding_dim;
  s.vocab = vocab_size;
  s.num_positions = learned() ? num_positions() : 0;
  return s;
}

kernels::EmbeddingConfig EmbeddingLayerConfig::kernel_config(std::uint64_t seed, std::uint64_t offset) const {
  kernels::EmbeddingConfig c;
  c.scale = static_cast<float>(effective_scale());
  c.padding_idx = padding_idx;
  c.positions = positions;
  c.indexing = indexing;
  c.position_offset = position_offset;
  c.dropout = {static_cast<float>(dropout), seed, offset};
  return c;
}

std::vector<ParameterShape> embedding_layer_parameter_shapes(const EmbeddingLayerConfig& config) {
  config.validate();
  const auto H = static_cast<std::size_t>(config.embedding_dim);
  std::vector<ParameterShape> shapes = {{"token_table", static_cast<std::size_t>(config.vocab_size), H}};
  if (config.learned())
    shapes.push_back({"position_table", static_cast<std::size_t>(config.num_positions()), H});
  return shapes;
}

std::vector<TensorLifetime> embedding_layer_lifetimes(const EmbeddingLayerConfig& config,
                                                      const EmbeddingLayerOptions& options) {
  config.validate();
  // The backward workspaces depend on the tokens B·L only (not on B and L apart): size them at
  // max_batch_tokens one-token sentences, a shape the config always admits. The forward's also
  // holds the sinusoid table of L·H floats when B >= 2: its bound over every admitted shape.
  const kernels::EmbeddingShape shape = config.kernel_shape(config.max_batch_tokens, 1);
  const kernels::EmbeddingConfig k = config.kernel_config(0, 0);
  const std::size_t fwd =
      kernels::embedding_fwd_workspace_bytes_upto(config.max_batch_tokens, config.max_seq_len, shape, k);
  const std::size_t bwd = options.deterministic_backward
                              ? kernels::embedding_bwd_sorted_workspace_bytes(shape, k)
                              : kernels::embedding_bwd_atomic_workspace_bytes(shape, k, /*forked=*/true);
  LifetimeRecorder rec;
  const TensorId f = rec.tensor(options.prefix + "fwd_workspace", fwd);
  const TensorId b = rec.tensor(options.prefix + "bwd_workspace", bwd);
  rec.op(options.prefix + "forward", {}, {f});
  rec.op(options.prefix + "backward", {}, {b});
  return rec.lifetimes();
}

// ---------------------------------------------------------------------------------------------

namespace {

constexpr int kForwardStep = 0;
constexpr int kBackwardStep = 1;

void require_aligned(const void* p, std::size_t alignment, const char* where, const char* what) {
  require_embedding_aligned("EmbeddingLayer", p, alignment, where, what);
}

}  // namespace

void require_embedding_aligned(const char* layer, const void* p, std::size_t alignment, const char* where,
                               const char* what) {
  SEQBENCH_REQUIRE(reinterpret_cast<std::uintptr_t>(p) % alignment == 0,
                   layer << "::" << where << ": " << what << " (" << p << ") is not aligned to its "
                         << alignment << "-byte element");
}

void require_embedding_parameters(const char* layer, const EmbeddingLayerConfig& config,
                                  const EmbeddingLayerWeights& weights, const EmbeddingLayerGrads& grads) {
  std::string missing;
  const auto need = [&](bool ok, const char* name) {
    if (!ok) missing += std::string(missing.empty() ? "" : ", ") + name;
  };
  need(weights.token_table != nullptr, "weights.token_table");
  need(grads.token_table != nullptr, "grads.token_table");
  if (config.learned()) {
    need(weights.position_table != nullptr, "weights.position_table");
    need(grads.position_table != nullptr, "grads.position_table");
  }
  SEQBENCH_REQUIRE(missing.empty(), layer << ": null parameter pointer(s): " << missing);
  SEQBENCH_REQUIRE(config.learned() || (weights.position_table == nullptr && grads.position_table == nullptr),
                   layer << ": a position table was given, but sinusoidal positions have none (it would "
                            "be neither read nor written)");
  const std::size_t elem = dtype_size(config.dtype);
  require_embedding_aligned(layer, weights.token_table, elem, layer, "weights.token_table");
  require_embedding_aligned(layer, grads.token_table, elem, layer, "grads.token_table");
  if (config.learned()) {
    require_embedding_aligned(layer, weights.position_table, elem, layer, "weights.position_table");
    require_embedding_aligned(layer, grads.position_table, elem, layer, "grads.position_table");
  }
  // The backward zeroes both gradient tables and then scatters into them: two that share bytes
  // (or one on a weight) would give silently wrong gradients, which no launcher can see.
  const std::size_t row = static_cast<std::size_t>(config.embedding_dim) * elem;
  const std::size_t token_bytes = static_cast<std::size_t>(config.vocab_size) * row;
  const std::size_t position_bytes =
      config.learned() ? static_cast<std::size_t>(config.num_positions()) * row : 0;
  ParameterRanges ranges(layer);
  ranges.add("weights.token_table", weights.token_table, token_bytes, false);
  ranges.add("weights.position_table", weights.position_table, position_bytes, false);
  ranges.add("grads.token_table", grads.token_table, token_bytes, true);
  ranges.add("grads.position_table", grads.position_table, position_bytes, true);
  ranges.require_gradients_disjoint();
}

EmbeddingForwardBytes require_embedding_forward(const char* layer, const EmbeddingLayerConfig& config,
                                                const void* y, const std::int32_t* tokens,
                                                std::size_t batch_size, std::size_t seq_len,
                                                std::uint64_t offset) {
  config.check_batch(batch_size, seq_len);
  SEQBENCH_REQUIRE(y != nullptr, layer << "::forward: y is null");
  SEQBENCH_REQUIRE(tokens != nullptr, layer << "::forward: tokens is null");
  const std::size_t elem = dtype_size(config.dtype);
  require_embedding_aligned(layer, y, elem, "forward", "y");
  require_embedding_aligned(layer, tokens, sizeof(std::int32_t), "forward", "tokens");
  const std::size_t n = batch_size * seq_len;
  EmbeddingForwardBytes b;
  b.y = n * static_cast<std::size_t>(config.embedding_dim) * elem;
  b.tokens = n * sizeof(std::int32_t);
  SEQBENCH_REQUIRE(!bytes_overlap(y, b.y, tokens, b.tokens),
                   layer << "::forward: y (" << b.y << " bytes) overlaps tokens (" << b.tokens
                         << " bytes); backward needs the tokens unchanged");
  SEQBENCH_REQUIRE(offset <= UINT64_MAX - kEmbeddingLayerDropoutOffsets,
                   layer << "::forward: offset " << offset << " leaves no room for the "
                         << kEmbeddingLayerDropoutOffsets << " dropout stream");
  return b;
}

struct EmbeddingLayer::Impl {
  std::unique_ptr<MemoryManager> memory;
  // Either backward's side stream and events (its zero fill runs beside its sort or its adds),
  // created by the first backward(): reserve() stays host-only for the atomic backward.
  std::optional<OwnedStreamFork> fork;
  TensorId fwd_ws = 0, bwd_ws = 1;
  // The last forward, which backward() differentiates.
  bool have_forward = false;
  std::int64_t batch = 0, len = 0;
  const std::int32_t* tokens = nullptr;
  std::uint64_t seed = 0, offset = 0;

  void require_outside_block(const char* where, const char* what, const void* p, std::size_t bytes) const {
    if (!memory) return;
    SEQBENCH_REQUIRE(!bytes_overlap(p, bytes, memory->block(), memory->block_bytes()),
                     "EmbeddingLayer::" << where << ": " << what << " overlaps the layer's planned block");
  }
  // The planned tensor's memory and its planned size (the kernels re-check it at the call's shape).
  std::pair<void*, std::size_t> workspace(TensorId id, int step) const {
    memory->set_step(step);
    const std::size_t bytes = memory->tensors()[id].bytes;
    return {memory->get(id, bytes), bytes};
  }
};

EmbeddingLayer::EmbeddingLayer(const EmbeddingLayerConfig& config, const EmbeddingLayerWeights& weights,
                               const EmbeddingLayerGrads& grads, DeviceAllocator& allocator,
                               EmbeddingLayerOptions options)
    : config_(config), options_(std::move(options)), weights_(weights), grads_(grads), allocator_(allocator) {
  config_.validate();
  SEQBENCH_REQUIRE(!options_.prefix.empty(),
                   "EmbeddingLayer: options.prefix is empty (the planned tensors' names)");
  require_embedding_parameters("EmbeddingLayer", config_, weights_, grads_);
  impl_ = std::make_unique<Impl>();
}

EmbeddingLayer::~EmbeddingLayer() = default;

void EmbeddingLayer::reserve() {
  if (impl_->memory) return;
  std::vector<TensorLifetime> lifetimes = embedding_layer_lifetimes(config_, options_);
  impl_->memory = std::make_unique<MemoryManager>(std::move(lifetimes), allocator_);
  impl_->fwd_ws = impl_->memory->id(options_.prefix + "fwd_workspace");
  impl_->bwd_ws = impl_->memory->id(options_.prefix + "bwd_workspace");
}

bool EmbeddingLayer::reserved() const {
  return impl_->memory != nullptr;
}

const MemoryManager& EmbeddingLayer::memory() const {
  SEQBENCH_REQUIRE(impl_->memory != nullptr,
                   "EmbeddingLayer: no planned block yet (reserve() or the first forward() allocates it)");
  return *impl_->memory;
}

std::size_t EmbeddingLayer::block_bytes() const {
  return memory().block_bytes();
}

void EmbeddingLayer::forward(void* y, const std::int32_t* tokens, std::size_t batch_size, std::size_t seq_len,
                             std::uint64_t seed, std::uint64_t offset, cudaStream_t stream) {
  SEQBENCH_NVTX_RANGE("embedding_layer_fwd");
  const EmbeddingForwardBytes fb =
      require_embedding_forward("EmbeddingLayer", config_, y, tokens, batch_size, seq_len, offset);
  const std::size_t y_bytes = fb.y, tok_bytes = fb.tokens;
  impl_->require_outside_block("forward", "y", y, y_bytes);
  impl_->require_outside_block("forward", "tokens", tokens, tok_bytes);
  reserve();  // the first forward: CUB sizes the sorted backward's storage on the device
  impl_->require_outside_block("forward", "y", y, y_bytes);
  impl_->require_outside_block("forward", "tokens", tokens, tok_bytes);

  const auto B = static_cast<std::int64_t>(batch_size), L = static_cast<std::int64_t>(seq_len);
  const kernels::EmbeddingShape shape = config_.kernel_shape(B, L);
  const kernels::EmbeddingConfig kc = config_.kernel_config(seed, offset);
  impl_->have_forward = false;
  const std::pair<void*, std::size_t> ws = impl_->workspace(impl_->fwd_ws, kForwardStep);
  dispatch_dtype(config_.dtype, [&](auto tag) {
    using T = decltype(tag);
    kernels::launch_embedding_fwd<T>(static_cast<T*>(y), tokens, static_cast<const T*>(weights_.token_table),
                                     static_cast<const T*>(weights_.position_table), shape, kc, ws.first,
                                     ws.second, stream);
  });
  impl_->memory->set_step(-1);
  impl_->have_forward = true;
  impl_->batch = B;
  impl_->len = L;
  impl_->tokens = tokens;
  impl_->seed = seed;
  impl_->offset = offset;
}

void EmbeddingLayer::backward(const void* dy, const std::int32_t* tokens, cudaStream_t stream) {
  SEQBENCH_NVTX_RANGE("embedding_layer_bwd");
  SEQBENCH_REQUIRE(impl_->have_forward,
                   "EmbeddingLayer::backward: no forward() to differentiate (call forward first)");
  SEQBENCH_REQUIRE(dy != nullptr, "EmbeddingLayer::backward: dy is null");
  SEQBENCH_REQUIRE(tokens == impl_->tokens, "EmbeddingLayer::backward: tokens is not the last forward's (got "
                                                << static_cast<const void*>(tokens) << ", the forward ran on "
                                                << static_cast<const void*>(impl_->tokens) << ")");
  const std::size_t elem = dtype_size(config_.dtype);
  require_aligned(dy, elem, "backward", "dy");
  const auto n = static_cast<std::size_t>(impl_->batch * impl_->len);
  impl_->require_outside_block("backward", "dy", dy,
                               n * static_cast<std::size_t>(config_.embedding_dim) * elem);
  const kernels::EmbeddingShape shape = config_.kernel_shape(impl_->batch, impl_->len);
  const kernels::EmbeddingConfig kc = config_.kernel_config(impl_->seed, impl_->offset);
  if (!impl_->fork) impl_->fork.emplace();  // once: a stream and two events, no device memory
  const std::pair<void*, std::size_t> ws = impl_->workspace(impl_->bwd_ws, kBackwardStep);
  dispatch_dtype(config_.dtype, [&](auto tag) {
    using T = decltype(tag);
    T* d_tok = static_cast<T*>(grads_.token_table);
    T* d_pos = static_cast<T*>(grads_.position_table);
    if (options_.deterministic_backward) {
      kernels::launch_embedding_bwd_sorted<T>(d_tok, d_pos, static_cast<const T*>(dy), tokens, shape, kc,
                                              ws.first, ws.second, stream, &impl_->fork->get());
    } else {
      kernels::launch_embedding_bwd_atomic<T>(d_tok, d_pos, static_cast<const T*>(dy), tokens, shape, kc,
                                              ws.first, ws.second, stream, &impl_->fork->get());
    }
  });
  impl_->memory->set_step(-1);
}

}  // namespace seqbench::layers
