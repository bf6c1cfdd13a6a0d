#include "layers/layer_run.h"

#include <utility>

#include "core/byte_range.h"
#include "kernels/bias_dropout_residual.h"
#include "kernels/layernorm.h"
#include "kernels/qkv_reshape.h"

namespace seqbench::layers {

namespace {

// max over rows in [1, max_rows] of f(rows): the workspace functions are not monotone in rows
// (their row tiles and chunks are rounded), so the plan takes the largest any batch can need.
template <class Fn>
std::size_t max_over_rows(std::int64_t max_rows, Fn&& f) {
  std::size_t most = 0;
  for (std::int64_t r = 1; r <= max_rows; ++r) most = std::max(most, f(r));
  return most;
}

}  // namespace

std::size_t max_score_elements(const LayerConfig& config) {
  config.validate();
  const std::size_t tm = static_cast<std::size_t>(config.max_batch_tokens);
  const std::size_t lm = static_cast<std::size_t>(config.max_seq_len);
  std::size_t most = 0;
  for (std::size_t len = 1; len <= lm; ++len) most = std::max(most, (tm / len) * len * len);
  return most;
}

kernels::Activation kernel_activation(Activation a) {
  switch (a) {
    case Activation::relu:
      return kernels::Activation::relu;
    case Activation::gelu:
      return kernels::Activation::gelu_erf;
    case Activation::gelu_tanh:
      break;
  }
  return kernels::Activation::gelu_tanh;
}

const char* recompute_name(Recompute recompute) {
  return recompute == Recompute::pointwise ? "pointwise" : "none";
}

PlanBuilder::PlanBuilder(const LayerConfig& config, std::string prefix, Recompute recompute)
    : config_(config), prefix_(std::move(prefix)), recompute_(recompute) {
  config_.validate();
  const LayerConfig& c = config_;
  elem_ = dtype_size(c.dtype);
  tokens_ = static_cast<std::size_t>(c.max_batch_tokens);
  scores_ = max_score_elements(c) * static_cast<std::size_t>(c.heads);
  const std::int64_t tm = c.max_batch_tokens;
  ln_ws_ = max_over_rows(
      tm, [&](std::int64_t r) { return kernels::layernorm_backward_workspace_bytes(r, c.hidden); });
  bdr_ws_ = max_over_rows(
      tm, [&](std::int64_t r) { return kernels::bias_dropout_residual_bwd_workspace_bytes(r, c.hidden); });
  bad_ws_ = max_over_rows(
      tm, [&](std::int64_t r) { return kernels::bias_act_dropout_bwd_workspace_bytes(r, c.ffn); });
}

std::size_t PlanBuilder::qkv_bias_split_bwd_ws(std::int64_t projections) const {
  return max_over_rows(config_.max_batch_tokens, [&](std::int64_t r) {
    kernels::HeadsShape s;
    s.batch = r;  // the workspace depends on rows = batch·len and the columns only
    s.len = 1;
    s.heads = config_.heads;
    s.hidden = config_.hidden;
    s.projections = projections;
    return kernels::qkv_bias_split_bwd_workspace_bytes(s);
  });
}

TensorId PlanBuilder::act(const std::string& name, std::size_t elements) {
  return rec_.tensor(prefix_ + name, elements * elem_);
}

TensorId PlanBuilder::stat(const std::string& name) {
  return rec_.tensor(prefix_ + name, tokens_ * sizeof(float));
}

TensorId PlanBuilder::bytes(const std::string& name, std::size_t bytes) {
  return rec_.tensor(prefix_ + name, bytes);
}

void PlanBuilder::plan_gemm_workspace(std::size_t bytes) {
  gemm_ws_ = rec_.tensor(prefix_ + "gemm_workspace", bytes);
}

void PlanBuilder::op(const std::string& name, const std::vector<TensorId>& reads,
                     const std::vector<TensorId>& writes) {
  rec_.op(prefix_ + name, reads, writes);
}

void PlanBuilder::gemm_op(const std::string& name, const std::vector<TensorId>& reads,
                          std::vector<TensorId> writes) {
  if (gemm_ws_ != kNoTensor) writes.push_back(gemm_ws_);
  rec_.op(prefix_ + name, reads, writes);
}

std::vector<TensorLifetime> planned_lifetimes(PlanBuilder& plan, int forward_steps, bool retain_forward) {
  return retain_forward ? plan.recorder().lifetimes_retaining_forward(forward_steps)
                        : plan.recorder().lifetimes();
}

PlannedLayer::PlannedLayer(const char* layer, PlanBuilder& plan, int forward_steps,
                           DeviceAllocator& allocator, Gemm* shared_gemm, std::size_t gemm_workspace_bytes,
                           bool retain_forward)
    : layer_(layer),
      ops_(plan.recorder().ops()),
      forward_steps_(forward_steps),
      retain_forward_(retain_forward),
      shared_gemm_(shared_gemm) {
  // The one allocation.
  memory_ =
      std::make_unique<MemoryManager>(planned_lifetimes(plan, forward_steps, retain_forward), allocator);
  if (shared_gemm_ == nullptr) {
    SEQBENCH_REQUIRE(plan.gemm_workspace() != kNoTensor, layer_ << ": no Gemm and no planned GEMM workspace");
    gemm_workspace_bytes_ = gemm_workspace_bytes;
    gemm_workspace_ = memory_->get(plan.gemm_workspace(), gemm_workspace_bytes_);
  }
}

PlannedLayer::~PlannedLayer() = default;

Gemm& PlannedLayer::gemm() {
  if (shared_gemm_ != nullptr) return *shared_gemm_;
  if (!own_gemm_) own_gemm_ = std::make_unique<Gemm>(gemm_workspace_, gemm_workspace_bytes_);
  return *own_gemm_;
}

void PlannedLayer::require_outside_block(const char* where, const char* what, const void* p,
                                         std::size_t bytes) const {
  SEQBENCH_REQUIRE(!bytes_overlap(p, bytes, memory_->block(), memory_->block_bytes()),
                   layer_ << "::" << where << ": " << what << " overlaps the layer's planned block");
}

void PlannedLayer::require_ran(const char* where, int first_step, int end_step) const {
  const int want = first_step == 0 ? forward_steps_ : static_cast<int>(ops_.size());
  SEQBENCH_REQUIRE(end_step == want, layer_ << ": the " << where << " ended at step " << end_step
                                            << ", the dry run has " << want);
}

}  // namespace seqbench::layers
