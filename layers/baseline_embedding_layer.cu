#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "core/byte_range.h"
#include "core/cuda_check.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/nvtx.h"
#include "kernels/bias_dropout_residual.h"
#include "kernels/dropout.h"
#include "kernels/embedding.h"
#include "layers/baseline_embedding_layer.h"
#include "layers/eager_tensor.h"
#include "layers/layer_run.h"

namespace seqbench::layers {

namespace {

void require_aligned(const void* p, std::size_t alignment, const char* where, const char* what) {
  require_embedding_aligned("BaselineEmbeddingLayer", p, alignment, where, what);
}

// fairseq's SinusoidalPositionalEmbedding table, [rows, hidden] (all sines, then all cosines; odd
// hidden leaves the last column 0; half = 1 has the single frequency 1), in double as
// ref::sinusoidal_positions, rounded to float and then to T (the operator suite's unfused table).
template <class T>
std::vector<T> sinusoid_table(std::int64_t rows, std::int64_t hidden) {
  const std::int64_t half = hidden / 2;
  const double log_step = half > 1 ? std::log(10000.0) / static_cast<double>(half - 1) : 0.0;
  std::vector<T> table(static_cast<std::size_t>(rows * hidden), from_float<T>(0.0f));
  for (std::int64_t pos = 0; pos < rows; ++pos) {
    for (std::int64_t k = 0; k < half; ++k) {
      const double angle = static_cast<double>(pos) * std::exp(-static_cast<double>(k) * log_step);
      table[static_cast<std::size_t>(pos * hidden + k)] = from_float<T>(static_cast<float>(std::sin(angle)));
      table[static_cast<std::size_t>(pos * hidden + half + k)] =
          from_float<T>(static_cast<float>(std::cos(angle)));
    }
  }
  return table;
}

}  // namespace

struct BaselineEmbeddingLayer::Impl {
  DeviceAllocator& allocator;
  EagerTensor sinusoids;  // the module's buffer [num_positions, H] (sinusoidal positions)
  // The last forward and what its backward reads.
  bool have_forward = false;
  std::int64_t batch = 0, len = 0;
  const std::int32_t* tokens = nullptr;
  std::uint64_t seed = 0, offset = 0;
  EagerTensor mask;       // uint8 [B·L·H] (dropout > 0)
  EagerTensor positions;  // int32 [B·L] (learned positions)

  explicit Impl(DeviceAllocator& a) : allocator(a) {}
  void release() {
    mask.reset();
    positions.reset();
    have_forward = false;
  }
};

BaselineEmbeddingLayer::BaselineEmbeddingLayer(const EmbeddingLayerConfig& config,
                                               const EmbeddingLayerWeights& weights,
                                               const EmbeddingLayerGrads& grads, DeviceAllocator& allocator)
    : config_(config), weights_(weights), grads_(grads) {
  config_.validate();
  require_embedding_parameters("BaselineEmbeddingLayer", config_, weights_, grads_);
  impl_ = std::make_unique<Impl>(allocator);
}

BaselineEmbeddingLayer::~BaselineEmbeddingLayer() {
  if (impl_) impl_->release();
}

void BaselineEmbeddingLayer::release() {
  impl_->release();
}

std::size_t BaselineEmbeddingLayer::saved_bytes() const {
  return impl_->mask.bytes() + impl_->positions.bytes();
}

std::size_t BaselineEmbeddingLayer::buffer_bytes() const {
  return impl_->sinusoids.bytes();
}

void BaselineEmbeddingLayer::forward(void* y, const std::int32_t* tokens, std::size_t batch_size,
                                     std::size_t seq_len, std::uint64_t seed, std::uint64_t offset,
                                     cudaStream_t stream) {
  SEQBENCH_NVTX_RANGE("baseline_embedding_layer_fwd");
  const std::size_t y_bytes =
      require_embedding_forward("BaselineEmbeddingLayer", config_, y, tokens, batch_size, seq_len, offset).y;
  const std::size_t elem = dtype_size(config_.dtype);
  // The fused kernel refuses a y overlapping its inputs before it runs; the eager sequence writes y
  // only in its last op, after the tables were read, so the same rule is checked here up front.
  const std::size_t table_bytes =
      static_cast<std::size_t>(config_.vocab_size) * static_cast<std::size_t>(config_.embedding_dim) * elem;
  const std::size_t position_bytes = config_.learned()
                                         ? static_cast<std::size_t>(config_.num_positions()) *
                                               static_cast<std::size_t>(config_.embedding_dim) * elem
                                         : 0;
  SEQBENCH_REQUIRE(!bytes_overlap(y, y_bytes, weights_.token_table, table_bytes) &&
                       !bytes_overlap(y, y_bytes, weights_.position_table, position_bytes),
                   "BaselineEmbeddingLayer::forward: y (" << y_bytes << " bytes) overlaps a weight table");
  Impl& m = *impl_;
  m.release();  // the previous graph is dropped before this one is built
  const auto B = static_cast<std::int64_t>(batch_size), L = static_cast<std::int64_t>(seq_len);
  const std::int64_t N = B * L, H = config_.embedding_dim, NH = N * H;
  const kernels::EmbeddingShape shape = config_.kernel_shape(B, L);
  const kernels::EmbeddingConfig kc = config_.kernel_config(seed, offset);
  const bool learned = config_.learned();
  const bool masked_fill = kc.padding_idx >= 0;
  const bool dropout = kc.dropout.p > 0.0f;
  const std::int64_t pos_rows = config_.num_positions();
  dispatch_dtype(config_.dtype, [&](auto tag) {
    using T = decltype(tag);
    DeviceAllocator& a = m.allocator;
    const auto tensor = [&](std::int64_t elements) {
      return EagerTensor(a, static_cast<std::size_t>(elements) * sizeof(T));
    };
    if (!learned && m.sinusoids.get() == nullptr) {
      // The module's buffer, once (as fairseq moves its table to the device at the first call).
      const std::vector<T> table = sinusoid_table<T>(pos_rows, H);
      EagerTensor t(a, table.size() * sizeof(T));
      SEQBENCH_CUDA_CHECK(
          cudaMemcpyAsync(t.get(), table.data(), table.size() * sizeof(T), cudaMemcpyHostToDevice, stream));
      m.sinusoids = std::move(t);
    }
    const T* position_table = learned ? static_cast<const T*>(weights_.position_table) : m.sinusoids.as<T>();
    EagerTensor positions(a, static_cast<std::size_t>(N) * sizeof(std::int32_t));
    kernels::launch_embedding_positions(positions.as<std::int32_t>(), tokens, shape, kc, stream);
    EagerTensor scaled;
    {
      EagerTensor gathered = tensor(NH);
      kernels::launch_gather_rows<T>(gathered.as<T>(), static_cast<const T*>(weights_.token_table),
                                     config_.vocab_size, tokens, N, H, stream);
      scaled = tensor(NH);
      kernels::launch_scale<T>(scaled.as<T>(), gathered.as<T>(), static_cast<std::size_t>(NH), kc.scale,
                               stream);
    }  // the gathered rows are freed: only the scale read them
    EagerTensor pos = tensor(NH);
    kernels::launch_gather_rows<T>(pos.as<T>(), position_table, pos_rows, positions.as<std::int32_t>(), N, H,
                                   stream);
    if (learned) {
      m.positions = std::move(positions);  // the position table's index_add_ reads them
    } else {
      positions.reset();
    }
    // The remaining ops: add, [masked_fill], [dropout]; the last one writes y.
    EagerTensor sum;
    T* sum_out = static_cast<T*>(y);
    if (masked_fill || dropout) {
      sum = tensor(NH);
      sum_out = sum.as<T>();
    }
    kernels::launch_residual_add<T>(sum_out, scaled.as<T>(), pos.as<T>(), N, H, stream);
    scaled.reset();
    pos.reset();
    const T* x = sum_out;
    EagerTensor filled;
    if (masked_fill) {
      T* out = static_cast<T*>(y);
      if (dropout) {
        filled = tensor(NH);
        out = filled.as<T>();
      }
      kernels::launch_zero_padding_rows<T>(out, x, tokens, N, H, kc.padding_idx, stream);
      sum.reset();
      x = out;
    }
    if (dropout) {
      const auto count = static_cast<std::size_t>(NH);
      m.mask = EagerTensor(a, count);
      kernels::launch_dropout_mask_u8(m.mask.as<std::uint8_t>(), count, kc.dropout, stream);
      kernels::launch_dropout_apply_u8<T>(static_cast<T*>(y), x, m.mask.as<std::uint8_t>(), count,
                                          kc.dropout.p, stream);
    }
  });
  m.have_forward = true;
  m.batch = B;
  m.len = L;
  m.tokens = tokens;
  m.seed = seed;
  m.offset = offset;
}

void BaselineEmbeddingLayer::backward(const void* dy, const std::int32_t* tokens, cudaStream_t stream,
                                      bool retain_graph) {
  SEQBENCH_NVTX_RANGE("baseline_embedding_layer_bwd");
  Impl& m = *impl_;
  SEQBENCH_REQUIRE(m.have_forward,
                   "BaselineEmbeddingLayer::backward: no forward() to differentiate (call forward first; a "
                   "backward without retain_graph consumes its forward)");
  SEQBENCH_REQUIRE(dy != nullptr, "BaselineEmbeddingLayer::backward: dy is null");
  SEQBENCH_REQUIRE(tokens == m.tokens,
                   "BaselineEmbeddingLayer::backward: tokens is not the last forward's (got "
                       << static_cast<const void*>(tokens) << ", the forward ran on "
                       << static_cast<const void*>(m.tokens) << ")");
  const std::size_t elem = dtype_size(config_.dtype);
  require_aligned(dy, elem, "backward", "dy");
  const std::int64_t N = m.batch * m.len, H = config_.embedding_dim, NH = N * H;
  // The tables are zeroed before the scatters read dy (p = 0), the tokens and the positions: an
  // overlap would corrupt an input before a launcher could see it, so it is refused here.
  {
    const std::size_t dy_bytes = static_cast<std::size_t>(NH) * elem;
    const std::size_t tok_bytes = static_cast<std::size_t>(N) * sizeof(std::int32_t);
    const std::size_t table_bytes =
        static_cast<std::size_t>(config_.vocab_size) * static_cast<std::size_t>(H) * elem;
    const std::size_t position_bytes = config_.learned() ? static_cast<std::size_t>(config_.num_positions()) *
                                                               static_cast<std::size_t>(H) * elem
                                                         : 0;
    for (const auto& [grad, bytes, name] :
         {std::tuple<const void*, std::size_t, const char*>{grads_.token_table, table_bytes,
                                                            "grads.token_table"},
          std::tuple<const void*, std::size_t, const char*>{grads_.position_table, position_bytes,
                                                            "grads.position_table"}}) {
      SEQBENCH_REQUIRE(
          !bytes_overlap(grad, bytes, dy, dy_bytes) && !bytes_overlap(grad, bytes, tokens, tok_bytes),
          "BaselineEmbeddingLayer::backward: " << name << " (" << bytes << " bytes) overlaps dy or tokens");
    }
  }
  const kernels::EmbeddingConfig kc = config_.kernel_config(m.seed, m.offset);
  const bool learned = config_.learned();
  dispatch_dtype(config_.dtype, [&](auto tag) {
    using T = decltype(tag);
    DeviceAllocator& a = m.allocator;
    const auto count = static_cast<std::size_t>(NH);
    // Dropout's backward (a new tensor), or dy itself for p = 0.
    EagerTensor g_buf;
    const T* g = static_cast<const T*>(dy);
    if (kc.dropout.p > 0.0f) {
      g_buf = EagerTensor(a, count * sizeof(T));
      kernels::launch_dropout_apply_u8<T>(g_buf.as<T>(), g, m.mask.as<std::uint8_t>(), count, kc.dropout.p,
                                          stream);
      g = g_buf.as<T>();
      if (!retain_graph) m.mask.reset();
    }
    {
      EagerTensor sg(a, count * sizeof(T));
      kernels::launch_scale<T>(sg.as<T>(), g, count, kc.scale, stream);
      const auto table_bytes =
          static_cast<std::size_t>(config_.vocab_size) * static_cast<std::size_t>(H) * sizeof(T);
      SEQBENCH_CUDA_CHECK(cudaMemsetAsync(grads_.token_table, 0, table_bytes, stream));
      kernels::launch_scatter_add_rows<T>(static_cast<T*>(grads_.token_table), config_.vocab_size, sg.as<T>(),
                                          tokens, tokens, kc.padding_idx, N, H, stream);
    }
    if (learned) {
      const std::int64_t rows = config_.num_positions();
      const auto table_bytes = static_cast<std::size_t>(rows) * static_cast<std::size_t>(H) * sizeof(T);
      SEQBENCH_CUDA_CHECK(cudaMemsetAsync(grads_.position_table, 0, table_bytes, stream));
      kernels::launch_scatter_add_rows<T>(static_cast<T*>(grads_.position_table), rows, g,
                                          m.positions.as<std::int32_t>(), tokens, kc.padding_idx, N, H,
                                          stream);
      if (!retain_graph) m.positions.reset();
    }
  });
  if (!retain_graph) m.release();
}

}  // namespace seqbench::layers
