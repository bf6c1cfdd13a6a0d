#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "core/byte_range.h"
#include "core/cuda_check.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/nvtx.h"
#include "kernels/embedding.h"
#include "layers/baseline_criterion_layer.h"
#include "layers/eager_tensor.h"
#include "layers/layer_run.h"

namespace seqbench::layers {

namespace {

void require_element_aligned(const void* p, std::size_t alignment, const char* where, const char* what) {
  require_criterion_pointer("BaselineCriterionLayer", p, alignment, where, what);
}

}  // namespace

struct BaselineCriterionLayer::Impl {
  DeviceAllocator& allocator;
  EagerTensor ones;               // fp32 [max_batch_tokens] of 1 (the scalar backward's stand-in)
  EagerTensor loss, nll, totals;  // the last forward's outputs
  EagerTensor logp;               // T [rows, vocab], saved for the backward
  bool have_forward = false;      // and its graph (logp) not yet consumed
  std::int64_t rows = 0, vocab = 0;
  const void* logits = nullptr;
  const std::int32_t* targets = nullptr;

  explicit Impl(DeviceAllocator& a) : allocator(a) {}
  void release() {
    logp.reset();
    have_forward = false;
  }
};

BaselineCriterionLayer::BaselineCriterionLayer(const CriterionLayerConfig& config, DeviceAllocator& allocator)
    : config_(config) {
  config_.validate();
  kernel_config_ = config_.kernel_config();
  impl_ = std::make_unique<Impl>(allocator);
}

BaselineCriterionLayer::~BaselineCriterionLayer() {
  if (impl_) {
    impl_->release();
    impl_->totals.reset();
    impl_->nll.reset();
    impl_->loss.reset();
  }
}

void BaselineCriterionLayer::release() {
  impl_->release();
}

std::size_t BaselineCriterionLayer::saved_bytes() const {
  return impl_->logp.bytes();
}

CriterionOutputs BaselineCriterionLayer::forward(const void* logits, const std::int32_t* targets,
                                                 std::int64_t rows, std::int64_t vocab, cudaStream_t stream) {
  SEQBENCH_NVTX_RANGE("baseline_criterion_layer_fwd");
  require_criterion_forward("BaselineCriterionLayer", config_, kernel_config_, logits, targets, rows, vocab);

  Impl& m = *impl_;
  // The previous forward's graph and outputs are dropped before this one's are made.
  m.release();
  m.totals.reset();
  m.nll.reset();
  m.loss.reset();
  DeviceAllocator& a = m.allocator;
  const auto n = static_cast<std::size_t>(rows);
  if (m.ones.get() == nullptr) {
    const std::vector<float> ones(static_cast<std::size_t>(config_.max_batch_tokens), 1.0f);
    EagerTensor t(a, ones.size() * sizeof(float));
    SEQBENCH_CUDA_CHECK(
        cudaMemcpyAsync(t.get(), ones.data(), ones.size() * sizeof(float), cudaMemcpyHostToDevice, stream));
    m.ones = std::move(t);
  }
  m.loss = EagerTensor(a, n * sizeof(float));
  m.nll = EagerTensor(a, n * sizeof(float));
  m.totals = EagerTensor(a, sizeof(kernels::CrossEntropyTotals));
  const std::size_t logp_bytes = kernels::cross_entropy_unfused_logp_bytes(config_.dtype, rows, vocab);
  m.logp = EagerTensor(a, logp_bytes);
  dispatch_dtype(config_.dtype, [&](auto tag) {
    using T = decltype(tag);
    kernels::launch_cross_entropy_forward_unfused<T>(
        m.loss.as<float>(), m.nll.as<float>(), m.totals.as<kernels::CrossEntropyTotals>(), m.logp.as<T>(),
        logp_bytes, static_cast<const T*>(logits), targets, rows, vocab, kernel_config_, stream);
  });
  m.have_forward = true;
  m.rows = rows;
  m.vocab = vocab;
  m.logits = logits;
  m.targets = targets;
  CriterionOutputs out;
  out.loss = m.loss.as<float>();
  out.nll = m.nll.as<float>();
  out.lse = nullptr;
  out.totals = m.totals.as<kernels::CrossEntropyTotals>();
  out.rows = rows;
  return out;
}

void BaselineCriterionLayer::check_backward(const void* dlogits, const void* logits,
                                            const std::int32_t* targets) const {
  SEQBENCH_REQUIRE(impl_->have_forward,
                   "BaselineCriterionLayer::backward: no forward() to differentiate (call forward first; a "
                   "backward without retain_graph consumes its forward)");
  SEQBENCH_REQUIRE(logits == impl_->logits && targets == impl_->targets,
                   "BaselineCriterionLayer::backward: logits/targets ("
                       << logits << ", " << static_cast<const void*>(targets)
                       << ") are not the last forward's (" << impl_->logits << ", "
                       << static_cast<const void*>(impl_->targets) << ")");
  const std::size_t elem = dtype_size(config_.dtype);
  require_element_aligned(dlogits, elem, "backward", "dlogits");
  const auto bytes = static_cast<std::size_t>(impl_->rows) * static_cast<std::size_t>(impl_->vocab) * elem;
  SEQBENCH_REQUIRE(
      !bytes_overlap(dlogits, bytes, logits, bytes),
      "BaselineCriterionLayer::backward: dlogits overlaps logits (" << bytes << " bytes each): no in-place");
  // The scalar form launches its upstream-gradient fill before the backward's own launcher checks:
  // what that launcher would refuse is refused here first.
  const auto target_bytes = static_cast<std::size_t>(impl_->rows) * sizeof(std::int32_t);
  SEQBENCH_REQUIRE(!bytes_overlap(dlogits, bytes, targets, target_bytes),
                   "BaselineCriterionLayer::backward: dlogits (" << bytes << " bytes) overlaps targets");
  SEQBENCH_REQUIRE(!bytes_overlap(dlogits, bytes, impl_->logp.get(), impl_->logp.bytes()),
                   "BaselineCriterionLayer::backward: dlogits overlaps the layer's saved logp");
}

void BaselineCriterionLayer::run_backward(void* dlogits, const float* grad_loss, cudaStream_t stream,
                                          bool retain_graph) {
  Impl& m = *impl_;
  const std::size_t need =
      kernels::cross_entropy_unfused_backward_workspace_bytes(config_.dtype, m.rows, m.vocab);
  {
    EagerTensor ws(m.allocator, need);
    dispatch_dtype(config_.dtype, [&](auto tag) {
      using T = decltype(tag);
      kernels::launch_cross_entropy_backward_unfused<T>(static_cast<T*>(dlogits), m.logp.as<T>(), m.targets,
                                                        grad_loss, m.rows, m.vocab, kernel_config_, ws.get(),
                                                        need, stream);
    });
  }
  if (!retain_graph) m.release();
}

void BaselineCriterionLayer::backward(void* dlogits, const void* logits, const std::int32_t* targets,
                                      float grad_loss_sum, cudaStream_t stream, bool retain_graph) {
  SEQBENCH_NVTX_RANGE("baseline_criterion_layer_bwd");
  check_backward(dlogits, logits, targets);
  SEQBENCH_REQUIRE(std::isfinite(grad_loss_sum),
                   "BaselineCriterionLayer::backward: grad_loss_sum " << grad_loss_sum << " is not finite");
  Impl& m = *impl_;
  const auto n = static_cast<std::size_t>(m.rows);
  EagerTensor grad(m.allocator, n * sizeof(float));
  kernels::launch_scale<float>(grad.as<float>(), m.ones.as<float>(), n, grad_loss_sum, stream);
  run_backward(dlogits, grad.as<float>(), stream, retain_graph);
}

void BaselineCriterionLayer::backward(void* dlogits, const void* logits, const std::int32_t* targets,
                                      const float* grad_loss, cudaStream_t stream, bool retain_graph) {
  SEQBENCH_NVTX_RANGE("baseline_criterion_layer_bwd");
  check_backward(dlogits, logits, targets);
  require_element_aligned(grad_loss, sizeof(float), "backward", "grad_loss");
  run_backward(dlogits, grad_loss, stream, retain_graph);
}

}  // namespace seqbench::layers
