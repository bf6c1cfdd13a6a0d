// The two baselines against the fused optimizer, on the GPU: the Fairseq-style per-tensor step
// (fp32 master, per-tensor copy/update/copy-back) equals the fused master_fp32 step bitwise, and
// the apex-style multi-tensor-apply update equals the fused update bitwise in every mode, over
// several steps including a skipped (overflow) one, on layouts that force the multi-tensor table
// to split (more than 30 tensors, a tensor of more than 320 chunks).
#include <gtest/gtest.h>

#include <random>
#include <sstream>

#include "core/device_buffer.h"
#include "tests/common/gpu_test.h"
#include "tests/trainer/gpu_helpers.h"
#include "trainer/multi_tensor_apply.h"
#include "trainer/optimizer.h"
#include "trainer/per_tensor_baseline.h"

namespace seqbench::trainer {
namespace {

using testing::bitwise_difference;
using testing::download;
using testing::upload;

// The fused side and a baseline side with identical initial contents.
struct Twin {
  Workspace ws;
  FusedOptimizer opt;
  Twin(const WorkspaceLayout& layout, DType dtype, bool master, const OptimizerConfig& config,
       PrecisionMode mode, std::uint64_t seed)
      : ws(layout, dtype, master), opt(ws, config, mode, seed) {}
};

WorkspaceLayout layout_for(std::mt19937_64& rng, bool huge) {
  std::vector<TensorSpec> specs;
  const WorkspaceLayout base = testing::random_layout(rng, true);
  for (const TensorSlot& slot : base.tensors()) specs.push_back({slot.name, slot.count});
  // A second batch of small tensors pushes the count past the 30-tensor table.
  for (int i = 0; i < 12; ++i) {
    std::ostringstream name;
    name << "extra" << i;
    specs.push_back({name.str(), 1 + rng() % 300});
  }
  // More than 320 chunks of 65536 in one tensor: the block table fills mid-tensor.
  if (huge) specs.push_back({"huge", 320u * 65536u + 12345u});
  return WorkspaceLayout(specs);
}

template <class T>
void compare_sides(Twin& fused, Twin& base, bool master, const OptimizerConfig& config,
                   const std::string& where) {
  const std::size_t n = fused.ws.count();
  SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
  EXPECT_EQ(bitwise_difference("params", download<T>(base.ws.params(), n), download<T>(fused.ws.params(), n)),
            "")
      << where;
  if (master) {
    EXPECT_EQ(bitwise_difference("master", download<float>(base.ws.master(), n),
                                 download<float>(fused.ws.master(), n)),
              "")
        << where;
  }
  if (uses_state0(config)) {
    EXPECT_EQ(bitwise_difference("state0", download<float>(base.opt.state0(), n),
                                 download<float>(fused.opt.state0(), n)),
              "")
        << where;
  }
  if (uses_state1(config)) {
    EXPECT_EQ(bitwise_difference("state1", download<float>(base.opt.state1(), n),
                                 download<float>(fused.opt.state1(), n)),
              "")
        << where;
  }
  EXPECT_EQ(base.opt.read_step(), fused.opt.read_step()) << where;
}

enum class Baseline { per_tensor, multi_tensor };

template <class T>
void check_baseline(Baseline baseline, const OptimizerConfig& config, PrecisionMode mode, bool huge,
                    std::uint64_t seed) {
  std::ostringstream trace;
  trace << (baseline == Baseline::per_tensor ? "per_tensor" : "multi_tensor") << "/"
        << dtype_name(DTypeTraits<T>::dtype) << "/" << optimizer_kind_name(config.kind) << "/"
        << precision_mode_name(mode) << (huge ? " huge" : "");
  SCOPED_TRACE(trace.str());
  std::mt19937_64 rng(seed);
  const WorkspaceLayout layout = layout_for(rng, huge);
  const std::size_t n = layout.total_elements();
  const DType dtype = DTypeTraits<T>::dtype;
  const bool master = mode == PrecisionMode::master_fp32;
  Twin fused(layout, dtype, master, config, mode, seed), base(layout, dtype, master, config, mode, seed);
  const auto params = testing::random_in_tensors<T>(layout, rng, 1.0f);
  upload(fused.ws.params(), params);
  upload(base.ws.params(), params);
  if (master) {
    fused.ws.copy_params_to_master(nullptr);
    base.ws.copy_params_to_master(nullptr);
  }
  DeviceBuffer<float> grads_fp32(baseline == Baseline::per_tensor ? n : 0);
  const float loss_scale = 128.0f;
  DeviceBuffer<float> scale(std::vector<float>{loss_scale});
  for (int step = 0; step < 4; ++step) {
    auto grads = testing::random_in_tensors<T>(layout, rng, 0.02f * loss_scale, 0.05);
    if (step == 2) grads[layout.tensors().back().offset] = from_float<T>(INFINITY);  // a skipped step
    upload(fused.ws.grads(), grads);
    upload(base.ws.grads(), grads);
    const StepOptions options{1e-2, step % 2 ? 0.5 : 0.0};
    fused.opt.step(fused.ws, options, scale.data(), nullptr);
    if (baseline == Baseline::per_tensor) {
      const UpdateBuffers b = base.opt.buffers(base.ws);
      const PerTensorBuffers pt{b.dtype, b.params, b.grads, b.master, grads_fp32.data(), b.state0, b.state1};
      launch_per_tensor_step(layout, pt, config, options, scale.data(), base.opt.scratch(), nullptr);
    } else {
      launch_multi_tensor_step(layout, base.opt.buffers(base.ws), config, mode, options, seed, scale.data(),
                               base.opt.scratch(), nullptr);
    }
    compare_sides<T>(fused, base, master, config, "after step " + std::to_string(step));
    EXPECT_EQ(base.opt.read_control().found_inf, step == 2 ? 1 : 0);
  }
}

std::vector<OptimizerConfig> configs() {
  OptimizerConfig adam, adamw, sgd, nesterov;
  adamw.kind = OptimizerKind::adamw;
  adamw.weight_decay = 0.05;
  sgd.kind = OptimizerKind::sgd;
  nesterov.kind = OptimizerKind::sgd;
  nesterov.momentum = 0.9;
  nesterov.nesterov = true;
  nesterov.weight_decay = 1e-3;
  return {adam, adamw, sgd, nesterov};
}

TEST(BaselinesGpu, PerTensorEqualsFusedMasterModeBitwise) {
  SEQBENCH_REQUIRE_GPU();
  std::uint64_t seed = 500;
  for (const OptimizerConfig& c : configs()) {
    check_baseline<__half>(Baseline::per_tensor, c, PrecisionMode::master_fp32, false, seed++);
    check_baseline<__nv_bfloat16>(Baseline::per_tensor, c, PrecisionMode::master_fp32, false, seed++);
    check_baseline<float>(Baseline::per_tensor, c, PrecisionMode::master_fp32, false, seed++);
  }
}

TEST(BaselinesGpu, MultiTensorApplyEqualsFusedBitwiseInEveryMode) {
  SEQBENCH_REQUIRE_GPU();
  std::uint64_t seed = 600;
  for (const OptimizerConfig& c : configs()) {
    for (const PrecisionMode mode : {PrecisionMode::no_master, PrecisionMode::master_fp32}) {
      check_baseline<__half>(Baseline::multi_tensor, c, mode, false, seed++);
      check_baseline<float>(Baseline::multi_tensor, c, mode, false, seed++);
    }
    for (const PrecisionMode mode :
         {PrecisionMode::no_master, PrecisionMode::master_fp32, PrecisionMode::stochastic_rounding})
      check_baseline<__nv_bfloat16>(Baseline::multi_tensor, c, mode, false, seed++);
  }
}

TEST(BaselinesGpu, MultiTensorApplySplitsHugeTensorsAcrossLaunches) {
  SEQBENCH_REQUIRE_GPU();
  OptimizerConfig adam;
  check_baseline<__nv_bfloat16>(Baseline::multi_tensor, adam, PrecisionMode::stochastic_rounding, true, 700);
  check_baseline<__half>(Baseline::per_tensor, adam, PrecisionMode::master_fp32, true, 701);
}

}  // namespace
}  // namespace seqbench::trainer
