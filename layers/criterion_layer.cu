#include <cmath>
#include <cstdint>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "core/byte_range.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/nvtx.h"
#include "layers/criterion_layer.h"
#include "layers/layer_run.h"

namespace seqbench::layers {

void CriterionLayerConfig::validate() const {
  std::ostringstream os;
  int problems = 0;
  const auto problem = [&]() -> std::ostream& {
    if (problems++ > 0) os << "; ";
    return os;
  };
  if (max_batch_tokens <= 0) problem() << "max_batch_tokens (" << max_batch_tokens << ") must be positive";
  if (!(std::isfinite(epsilon) && epsilon >= 0.0 && epsilon <= 1.0)) {
    problem() << "epsilon (" << epsilon << ") must be finite in [0, 1]";
  }
  if (convention != "fairseq" && convention != "paper") {
    problem() << "convention ('" << convention << "') must be 'fairseq' or 'paper'";
  }
  if (dtype != DType::f32 && dtype != DType::f16 && dtype != DType::bf16) {
    problem() << "dtype (" << static_cast<int>(dtype) << ") is not f32, f16 or bf16";
  }
  SEQBENCH_REQUIRE(problems == 0, "invalid CriterionLayerConfig: " << os.str());
}

kernels::CrossEntropyConfig CriterionLayerConfig::kernel_config() const {
  kernels::CrossEntropyConfig c;
  c.smoothing = static_cast<float>(epsilon);
  c.convention = kernels::parse_cross_entropy_smoothing(convention);
  c.ignore_index = padding_idx;
  return c;
}

namespace {

constexpr int kForwardStep = 0;
constexpr int kBackwardStep = 1;

struct CriterionIds {
  TensorId loss = 0, nll = 0, lse = 0, totals = 0;
};

std::vector<TensorLifetime> record(const CriterionLayerConfig& config, const std::string& prefix,
                                   CriterionIds* ids) {
  config.validate();
  const auto rows = static_cast<std::size_t>(config.max_batch_tokens);
  LifetimeRecorder rec;
  CriterionIds id;
  id.loss = rec.tensor(prefix + "loss", rows * sizeof(float));
  id.nll = rec.tensor(prefix + "nll", rows * sizeof(float));
  id.lse = rec.tensor(prefix + "lse", rows * sizeof(float));
  id.totals = rec.tensor(prefix + "totals", sizeof(kernels::CrossEntropyTotals));
  rec.op(prefix + "forward", {}, {id.loss, id.nll, id.lse, id.totals});
  // The outputs stay the caller's to read until the next forward: they live through the backward.
  rec.op(prefix + "backward", {id.lse, id.loss, id.nll, id.totals}, {});
  if (ids != nullptr) *ids = id;
  return rec.lifetimes();
}

}  // namespace

std::vector<TensorLifetime> criterion_layer_lifetimes(const CriterionLayerConfig& config,
                                                      const std::string& prefix) {
  return record(config, prefix, nullptr);
}

struct CriterionLayer::Impl {
  CriterionIds ids;
  std::unique_ptr<MemoryManager> memory;
  // The last forward, which backward() differentiates.
  bool have_forward = false;
  std::int64_t rows = 0, vocab = 0;
  const void* logits = nullptr;
  const std::int32_t* targets = nullptr;

  void require_outside_block(const char* where, const char* what, const void* p, std::size_t bytes) const {
    SEQBENCH_REQUIRE(!bytes_overlap(p, bytes, memory->block(), memory->block_bytes()),
                     "CriterionLayer::" << where << ": " << what << " overlaps the layer's planned block");
  }
};

CriterionLayer::CriterionLayer(const CriterionLayerConfig& config, DeviceAllocator& allocator,
                               std::string prefix)
    : config_(config), prefix_(std::move(prefix)) {
  config_.validate();
  SEQBENCH_REQUIRE(!prefix_.empty(), "CriterionLayer: the prefix is empty (the planned tensors' names)");
  kernel_config_ = config_.kernel_config();
  impl_ = std::make_unique<Impl>();
  std::vector<TensorLifetime> lifetimes = record(config_, prefix_, &impl_->ids);
  impl_->memory = std::make_unique<MemoryManager>(std::move(lifetimes), allocator);
}

CriterionLayer::~CriterionLayer() = default;

const MemoryManager& CriterionLayer::memory() const {
  return *impl_->memory;
}

std::size_t CriterionLayer::block_bytes() const {
  return memory().block_bytes();
}

void require_criterion_pointer(const char* layer, const void* p, std::size_t alignment, const char* where,
                               const char* what) {
  SEQBENCH_REQUIRE(p != nullptr, layer << "::" << where << ": " << what << " is null");
  SEQBENCH_REQUIRE(reinterpret_cast<std::uintptr_t>(p) % alignment == 0,
                   layer << "::" << where << ": " << what << " (" << p << ") is not aligned to its "
                         << alignment << "-byte element");
}

void require_criterion_forward(const char* layer, const CriterionLayerConfig& config,
                               const kernels::CrossEntropyConfig& kernel_config, const void* logits,
                               const std::int32_t* targets, std::int64_t rows, std::int64_t vocab) {
  SEQBENCH_REQUIRE(rows >= 1 && rows <= config.max_batch_tokens,
                   layer << "::forward: rows " << rows << " outside [1, max_batch_tokens "
                         << config.max_batch_tokens << "] (the rows the layer's storage was planned for)");
  SEQBENCH_REQUIRE(
      vocab >= 1 && vocab <= kernels::kCrossEntropyMaxVocab,
      layer << "::forward: vocab " << vocab << " outside [1, " << kernels::kCrossEntropyMaxVocab << "]");
  (void)kernels::cross_entropy_weights(kernel_config, vocab);  // the convention's limits on V
  const std::size_t elem = dtype_size(config.dtype);
  require_criterion_pointer(layer, logits, elem, "forward", "logits");
  require_criterion_pointer(layer, targets, sizeof(std::int32_t), "forward", "targets");
}

namespace {

void require_element_aligned(const void* p, std::size_t alignment, const char* where, const char* what) {
  require_criterion_pointer("CriterionLayer", p, alignment, where, what);
}

}  // namespace

CriterionOutputs CriterionLayer::forward(const void* logits, const std::int32_t* targets, std::int64_t rows,
                                         std::int64_t vocab, cudaStream_t stream) {
  SEQBENCH_NVTX_RANGE("criterion_layer_fwd");
  require_criterion_forward("CriterionLayer", config_, kernel_config_, logits, targets, rows, vocab);
  const std::size_t elem = dtype_size(config_.dtype);
  const auto logit_bytes = static_cast<std::size_t>(rows) * static_cast<std::size_t>(vocab) * elem;
  const auto target_bytes = static_cast<std::size_t>(rows) * sizeof(std::int32_t);
  impl_->require_outside_block("forward", "logits", logits, logit_bytes);
  impl_->require_outside_block("forward", "targets", targets, target_bytes);

  MemoryManager& m = *impl_->memory;
  m.set_step(kForwardStep);
  const auto n = static_cast<std::size_t>(rows);
  CriterionOutputs out;
  float* loss = m.get_as<float>(impl_->ids.loss, n);
  float* nll = m.get_as<float>(impl_->ids.nll, n);
  float* lse = m.get_as<float>(impl_->ids.lse, n);
  auto* totals = m.get_as<kernels::CrossEntropyTotals>(impl_->ids.totals, 1);
  m.set_step(-1);
  impl_->have_forward = false;
  dispatch_dtype(config_.dtype, [&](auto tag) {
    using T = decltype(tag);
    kernels::launch_cross_entropy_forward<T>(loss, nll, lse, totals, static_cast<const T*>(logits), targets,
                                             rows, vocab, kernel_config_, stream);
  });
  impl_->have_forward = true;
  impl_->rows = rows;
  impl_->vocab = vocab;
  impl_->logits = logits;
  impl_->targets = targets;
  out.loss = loss;
  out.nll = nll;
  out.lse = lse;
  out.totals = totals;
  out.rows = rows;
  return out;
}

void CriterionLayer::check_backward(const void* dlogits, const void* logits,
                                    const std::int32_t* targets) const {
  SEQBENCH_REQUIRE(impl_->have_forward,
                   "CriterionLayer::backward: no forward() to differentiate (call forward first)");
  SEQBENCH_REQUIRE(logits == impl_->logits && targets == impl_->targets,
                   "CriterionLayer::backward: logits/targets ("
                       << logits << ", " << static_cast<const void*>(targets)
                       << ") are not the last forward's (" << impl_->logits << ", "
                       << static_cast<const void*>(impl_->targets) << ")");
  const std::size_t elem = dtype_size(config_.dtype);
  require_element_aligned(dlogits, elem, "backward", "dlogits");
  const auto bytes = static_cast<std::size_t>(impl_->rows) * static_cast<std::size_t>(impl_->vocab) * elem;
  impl_->require_outside_block("backward", "dlogits", dlogits, bytes);
  SEQBENCH_REQUIRE(
      !bytes_overlap(dlogits, bytes, logits, bytes),
      "CriterionLayer::backward: dlogits overlaps logits (" << bytes << " bytes each): no in-place");
}

void CriterionLayer::backward(void* dlogits, const void* logits, const std::int32_t* targets,
                              float grad_loss_sum, cudaStream_t stream) {
  SEQBENCH_NVTX_RANGE("criterion_layer_bwd");
  check_backward(dlogits, logits, targets);
  SEQBENCH_REQUIRE(std::isfinite(grad_loss_sum),
                   "CriterionLayer::backward: grad_loss_sum " << grad_loss_sum << " is not finite");
  MemoryManager& m = *impl_->memory;
  m.set_step(kBackwardStep);
  const float* lse = m.get_as<float>(impl_->ids.lse, static_cast<std::size_t>(impl_->rows));
  m.set_step(-1);
  dispatch_dtype(config_.dtype, [&](auto tag) {
    using T = decltype(tag);
    kernels::launch_cross_entropy_backward_scalar<T>(static_cast<T*>(dlogits), static_cast<const T*>(logits),
                                                     targets, lse, grad_loss_sum, impl_->rows, impl_->vocab,
                                                     kernel_config_, stream);
  });
}

void CriterionLayer::backward(void* dlogits, const void* logits, const std::int32_t* targets,
                              const float* grad_loss, cudaStream_t stream) {
  SEQBENCH_NVTX_RANGE("criterion_layer_bwd");
  check_backward(dlogits, logits, targets);
  require_element_aligned(grad_loss, sizeof(float), "backward", "grad_loss");
  MemoryManager& m = *impl_->memory;
  m.set_step(kBackwardStep);
  const float* lse = m.get_as<float>(impl_->ids.lse, static_cast<std::size_t>(impl_->rows));
  m.set_step(-1);
  dispatch_dtype(config_.dtype, [&](auto tag) {
    using T = decltype(tag);
    kernels::launch_cross_entropy_backward<T>(static_cast<T*>(dlogits), static_cast<const T*>(logits),
                                              targets, lse, grad_loss, impl_->rows, impl_->vocab,
                                              kernel_config_, stream);
  });
}

}  // namespace seqbench::layers
