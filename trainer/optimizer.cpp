#include "trainer/optimizer.h"

#include "core/cuda_check.h"

namespace seqbench::trainer {

MemoryFootprint memory_footprint(std::size_t count, DType dtype, const OptimizerConfig& config,
                                 PrecisionMode mode) {
  MemoryFootprint f;
  f.params = count * dtype_size(dtype);
  f.grads = count * dtype_size(dtype);
  f.master = mode == PrecisionMode::master_fp32 ? count * sizeof(float) : 0;
  f.state = ((uses_state0(config) ? 1 : 0) + (uses_state1(config) ? 1 : 0)) * count * sizeof(float);
  return f;
}

std::size_t minimal_update_bytes(std::size_t count, DType dtype, const OptimizerConfig& config,
                                 PrecisionMode mode) {
  const std::size_t element = dtype_size(dtype);
  const bool master = mode == PrecisionMode::master_fp32;
  const std::size_t state = ((uses_state0(config) ? 1 : 0) + (uses_state1(config) ? 1 : 0)) * sizeof(float);
  const std::size_t read = (master ? 0 : element) + element + (master ? sizeof(float) : 0) + state;
  const std::size_t written = element + (master ? sizeof(float) : 0) + state;
  return count * (read + written);
}

FusedOptimizer::FusedOptimizer(const Workspace& workspace, const OptimizerConfig& config, PrecisionMode mode,
                               std::uint64_t seed)
    : config_(config), mode_(mode), seed_(seed), count_(workspace.count()), dtype_(workspace.dtype()) {
  validate_optimizer_config(config_);
  precision_mode_name(mode_);
  SEQBENCH_REQUIRE(mode_ != PrecisionMode::stochastic_rounding || dtype_ == DType::bf16,
                   "optimizer: stochastic_rounding needs a bf16 workspace, got " << dtype_name(dtype_));
  SEQBENCH_REQUIRE(mode_ != PrecisionMode::master_fp32 || workspace.has_master(),
                   "optimizer: master_fp32 mode needs a workspace with a master buffer");
  if (uses_state0(config_)) state0_ = DeviceBuffer<float>(count_);
  if (uses_state1(config_)) state1_ = DeviceBuffer<float>(count_);
  stats_ = DeviceBuffer<GradStatsScratch>(1);
  control_ = DeviceBuffer<StepControl>(1);
  step_ = DeviceBuffer<std::int64_t>(1);
  state0_.fill_bytes(0);
  state1_.fill_bytes(0);
  stats_.fill_bytes(0);
  control_.copy_from_host({StepControl{}});
  step_.copy_from_host({0});
  // fill_bytes and pageable copies may still be in flight on the legacy stream, which work on a
  // non-blocking stream does not wait for.
  SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
}

void FusedOptimizer::check_workspace(const Workspace& workspace, const char* what) const {
  SEQBENCH_REQUIRE(workspace.count() == count_ && workspace.dtype() == dtype_,
                   what << ": workspace has " << workspace.count() << " " << dtype_name(workspace.dtype())
                        << " elements, the optimizer was built for " << count_ << " " << dtype_name(dtype_));
  SEQBENCH_REQUIRE(mode_ != PrecisionMode::master_fp32 || workspace.has_master(),
                   what << ": master_fp32 mode needs a workspace with a master buffer");
}

UpdateBuffers FusedOptimizer::buffers(Workspace& workspace) {
  check_workspace(workspace, "optimizer");
  UpdateBuffers b;
  b.dtype = dtype_;
  b.params = workspace.params();
  b.grads = workspace.grads();
  b.master = mode_ == PrecisionMode::master_fp32 ? workspace.master() : nullptr;
  b.state0 = state0_.data();
  b.state1 = state1_.data();
  b.count = count_;
  return b;
}

OptimizerScratch FusedOptimizer::scratch() {
  return OptimizerScratch{stats_.data(), control_.data(), step_.data()};
}

void FusedOptimizer::step(Workspace& workspace, const StepOptions& options, const float* loss_scale,
                          cudaStream_t stream) {
  check_workspace(workspace, "optimizer");
  SEQBENCH_REQUIRE(mode_ != PrecisionMode::master_fp32 || count_ == 0 || workspace.master_filled(),
                   "optimizer: a master_fp32 step reads the fp32 master, which holds no parameters yet: "
                   "call Workspace::copy_params_to_master (or load_state) first, or mark_master_filled() "
                   "after writing it yourself");
  launch_fused_optimizer_step(buffers(workspace), config_, mode_, options, seed_, loss_scale, scratch(),
                              stream);
}

void FusedOptimizer::step(Workspace& workspace, const StepOptions& options, LossScaler& scaler,
                          cudaStream_t stream) {
  step(workspace, options, scaler.scale(), stream);
  scaler.update(found_inf(), stream);
}

// Steps may be queued on any stream (including non-blocking ones, which a plain cudaMemcpy does
// not wait for): synchronize the device first. Test and logging paths only.
StepControl FusedOptimizer::read_control() const {
  SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
  return control_.copy_to_host().at(0);
}

std::int64_t FusedOptimizer::read_step() const {
  SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
  return step_.copy_to_host().at(0);
}

OptimizerStateSnapshot FusedOptimizer::save_state(const Workspace& workspace) const {
  check_workspace(workspace, "save_state");
  SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());  // steps enqueued on other streams must have landed
  OptimizerStateSnapshot s;
  s.kind = config_.kind;
  s.mode = mode_;
  s.count = count_;
  s.step = read_step();
  s.state0 = state0_.copy_to_host();
  s.state1 = state1_.copy_to_host();
  if (mode_ == PrecisionMode::master_fp32) {
    s.master.resize(count_);
    if (count_ > 0)
      SEQBENCH_CUDA_CHECK(
          cudaMemcpy(s.master.data(), workspace.master(), count_ * sizeof(float), cudaMemcpyDeviceToHost));
  }
  return s;
}

void FusedOptimizer::load_state(Workspace& workspace, const OptimizerStateSnapshot& s) {
  check_workspace(workspace, "load_state");
  validate_snapshot(s);
  SEQBENCH_REQUIRE(s.kind == config_.kind && s.mode == mode_,
                   "load_state: snapshot of " << optimizer_kind_name(s.kind) << "/"
                                              << precision_mode_name(s.mode) << ", optimizer is "
                                              << optimizer_kind_name(config_.kind) << "/"
                                              << precision_mode_name(mode_));
  SEQBENCH_REQUIRE(s.count == count_,
                   "load_state: snapshot has " << s.count << " elements, optimizer " << count_);
  SEQBENCH_REQUIRE(s.state0.size() == state0_.size() && s.state1.size() == state1_.size(),
                   "load_state: snapshot state sizes " << s.state0.size() << "/" << s.state1.size()
                                                       << ", optimizer " << state0_.size() << "/"
                                                       << state1_.size());
  SEQBENCH_REQUIRE(
      mode_ != PrecisionMode::master_fp32 || s.master.size() == count_,
      "load_state: master_fp32 snapshot has " << s.master.size() << " master elements, expected " << count_);
  SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
  state0_.copy_from_host(s.state0);
  state1_.copy_from_host(s.state1);
  step_.copy_from_host({s.step});
  if (mode_ == PrecisionMode::master_fp32 && count_ > 0)
    SEQBENCH_CUDA_CHECK(
        cudaMemcpy(workspace.master(), s.master.data(), count_ * sizeof(float), cudaMemcpyHostToDevice));
  if (mode_ == PrecisionMode::master_fp32) workspace.mark_master_filled();
  // Pageable host-to-device copies may return before the data lands (see read_control).
  SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
}

}  // namespace seqbench::trainer
