// Launcher argument validation, with fake device pointers: every launcher must check its
// arguments before its first CUDA call, so these run (and must pass) on a machine without a GPU.
// Each test checks the message, so an error from CUDA itself cannot pass for a validation error.
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/error.h"
#include "tests/common/expect_error.h"
#include "trainer/convert.h"
#include "trainer/fused_optimizer.h"
#include "trainer/loss_scaler.h"
#include "trainer/multi_tensor_apply.h"
#include "trainer/per_tensor_baseline.h"

namespace seqbench::trainer {
namespace {

template <class P>
P* fake(std::uintptr_t address) {
  return reinterpret_cast<P*>(address);
}

std::string error_of(const std::function<void()>& fn) {
  return seqbench::testing::error_of(fn, "(no error)");
}

#define EXPECT_ERROR_CONTAINS(statement, text)                          \
  do {                                                                  \
    const std::string seqbench_message_ = error_of([&] { statement; }); \
    EXPECT_NE(seqbench_message_.find(text), std::string::npos)          \
        << "expected \"" << (text) << "\" in: " << seqbench_message_;   \
  } while (0)

// Disjoint fake buffers of 100 elements each.
UpdateBuffers fake_buffers(DType dtype) {
  UpdateBuffers b;
  b.dtype = dtype;
  b.params = fake<void>(0x100000);
  b.grads = fake<const void>(0x200000);
  b.master = fake<float>(0x300000);
  b.state0 = fake<float>(0x400000);
  b.state1 = fake<float>(0x500000);
  b.count = 100;
  return b;
}

const StepControl* fake_control() {
  return fake<const StepControl>(0x600000);
}

OptimizerScratch fake_scratch() {
  return OptimizerScratch{fake<GradStatsScratch>(0x700000), fake<StepControl>(0x710000),
                          fake<std::int64_t>(0x720000)};
}

TEST(TrainerValidation, FusedUpdateNamesTheMissingOrBadBuffer) {
  const OptimizerConfig adam;
  UpdateBuffers b = fake_buffers(DType::f16);
  b.params = nullptr;
  EXPECT_ERROR_CONTAINS(
      launch_fused_update(b, adam, PrecisionMode::no_master, 0, fake_control(), false, nullptr),
      "params is null");
  b = fake_buffers(DType::f16);
  b.state1 = nullptr;
  EXPECT_ERROR_CONTAINS(
      launch_fused_update(b, adam, PrecisionMode::no_master, 0, fake_control(), false, nullptr),
      "state1 is null but adam");
  b = fake_buffers(DType::f16);
  b.master = nullptr;
  EXPECT_ERROR_CONTAINS(
      launch_fused_update(b, adam, PrecisionMode::master_fp32, 0, fake_control(), false, nullptr),
      "master is null");
  b = fake_buffers(DType::f16);
  EXPECT_ERROR_CONTAINS(
      launch_fused_update(b, adam, PrecisionMode::stochastic_rounding, 0, fake_control(), false, nullptr),
      "stochastic_rounding needs bf16 parameters, got f16");
  b = fake_buffers(DType::f32);
  b.grads = fake<const void>(0x100000 + 4 * 99);  // the last param element
  EXPECT_ERROR_CONTAINS(
      launch_fused_update(b, adam, PrecisionMode::no_master, 0, fake_control(), false, nullptr),
      "params [0x100000, +400) overlaps grads");
  b = fake_buffers(DType::f32);
  b.state0 = fake<float>(0x400002);
  EXPECT_ERROR_CONTAINS(
      launch_fused_update(b, adam, PrecisionMode::no_master, 0, fake_control(), false, nullptr),
      "state0 0x400002 is not aligned to its 4-byte elements");
  b = fake_buffers(DType::bf16);
  EXPECT_ERROR_CONTAINS(launch_fused_update(b, adam, PrecisionMode::no_master, 0, nullptr, false, nullptr),
                        "StepControl pointer is null");
}

TEST(TrainerValidation, UnusedBuffersMayBeNullOrOverlap) {
  OptimizerConfig sgd;
  sgd.kind = OptimizerKind::sgd;  // no momentum: no state at all
  UpdateBuffers b = fake_buffers(DType::bf16);
  b.state0 = nullptr;
  b.state1 = static_cast<float*>(b.params);  // unused, so its overlap does not matter
  b.master = nullptr;
  EXPECT_NO_THROW(validate_update_buffers(b, sgd, PrecisionMode::no_master, "t"));
  b.count = 0;
  b.params = nullptr;
  b.grads = nullptr;
  // count 0 returns before any CUDA call
  EXPECT_NO_THROW(launch_fused_update(b, sgd, PrecisionMode::no_master, 0, fake_control(), false, nullptr));
}

TEST(TrainerValidation, ConfigurationErrorsNameTheValue) {
  const UpdateBuffers b = fake_buffers(DType::f32);
  OptimizerConfig c;
  c.beta1 = 1.0;
  EXPECT_ERROR_CONTAINS(
      launch_fused_update(b, c, PrecisionMode::no_master, 0, fake_control(), false, nullptr),
      "beta1 1 outside [0, 1)");
  c = OptimizerConfig{};
  c.eps = 0.0;
  EXPECT_ERROR_CONTAINS(
      launch_fused_update(b, c, PrecisionMode::no_master, 0, fake_control(), false, nullptr),
      "eps 0 must be finite and > 0");
  c = OptimizerConfig{};
  c.kind = OptimizerKind::sgd;
  c.nesterov = true;
  EXPECT_ERROR_CONTAINS(
      launch_fused_update(b, c, PrecisionMode::no_master, 0, fake_control(), false, nullptr),
      "nesterov needs momentum > 0 and dampening 0");
  c.momentum = 0.9;
  c.dampening = 0.1;
  EXPECT_ERROR_CONTAINS(
      launch_fused_update(b, c, PrecisionMode::no_master, 0, fake_control(), false, nullptr),
      "dampening 0.1");
  c = OptimizerConfig{};
  c.weight_decay = -1;
  EXPECT_ERROR_CONTAINS(
      launch_fused_update(b, c, PrecisionMode::no_master, 0, fake_control(), false, nullptr),
      "weight_decay -1");
}

// The rule runs in float: doubles that pass the range checks but are 0, 1 or inf as floats are
// refused, with the value (an eps of 1e-46 is 0.0f and turned every parameter with a zero gradient
// into NaN; lr = 1e39 is inf and turned every one into NaN).
TEST(TrainerValidation, HyperParametersMustKeepTheirMeaningAsFloats) {
  const UpdateBuffers b = fake_buffers(DType::f32);
  const auto update = [&](const OptimizerConfig& c) {
    launch_fused_update(b, c, PrecisionMode::no_master, 0, fake_control(), false, nullptr);
  };
  OptimizerConfig c;
  c.eps = 1e-46;
  EXPECT_ERROR_CONTAINS(update(c),
                        "adam: eps 1e-46 is 0 as a float (the smallest float above 0 is 1.4013e-45)");
  c.eps = 1e39;
  EXPECT_ERROR_CONTAINS(update(c), "adam: eps 1e+39 is beyond float (> 3.40282e+38)");
  c.eps = 1.5e-45;  // rounds to the smallest subnormal: a float > 0
  EXPECT_NO_THROW(validate_optimizer_config(c));
  c = OptimizerConfig{};
  c.beta2 = 0.99999999;
  EXPECT_ERROR_CONTAINS(
      update(c),
      "adam: beta2 0.99999999 rounds to 1 as a float (the largest float below 1 is 0.99999994039535522)");
  c.beta2 = 0.99999994;  // the largest float below 1
  EXPECT_NO_THROW(validate_optimizer_config(c));
  c = OptimizerConfig{};
  c.kind = OptimizerKind::adamw;
  c.weight_decay = 1e39;
  EXPECT_ERROR_CONTAINS(update(c), "adamw: weight_decay 1e+39 is beyond float");
  c = OptimizerConfig{};
  c.kind = OptimizerKind::sgd;
  c.momentum = 1e39;
  EXPECT_ERROR_CONTAINS(update(c), "sgd: momentum 1e+39 is beyond float");
  c.momentum = 1e-50;
  c.nesterov = true;
  EXPECT_ERROR_CONTAINS(update(c), "sgd: nesterov needs momentum > 0, and momentum 1e-50 is 0 as a float");

  const auto step = [&](const OptimizerConfig& config, double lr) {
    launch_fused_optimizer_step(b, config, PrecisionMode::no_master, StepOptions{lr, 0.0}, 0, nullptr,
                                fake_scratch(), nullptr);
  };
  OptimizerConfig sgd;
  sgd.kind = OptimizerKind::sgd;
  EXPECT_ERROR_CONTAINS(step(sgd, 1e39), "lr 1e+39 is beyond float (> 3.40282e+38)");
  // The first step's coefficients: lr / (1 - beta1) and AdamW's 1 - lr*wd.
  OptimizerConfig adam;
  adam.beta1 = 0.99;
  EXPECT_ERROR_CONTAINS(step(adam, 1e37), "adam: lr 1e+37 / (1 - beta1 0.99) = 1e+39, the first step's size");
  OptimizerConfig adamw;
  adamw.kind = OptimizerKind::adamw;
  adamw.weight_decay = 1e30;
  EXPECT_ERROR_CONTAINS(step(adamw, 1e10),
                        "adamw: 1 - lr 1e+10 * weight_decay 1e+30 = -1e+40 is beyond float");
  EXPECT_NO_THROW(validate_step_values(adamw, 1e-3, 0.0));
  EXPECT_NO_THROW(validate_step_values(adam, 1e36, 0.0));  // 1e38: a float
}

TEST(TrainerValidation, WholeStepChecksEverythingBeforeTheFirstLaunch) {
  const OptimizerConfig adam;
  const UpdateBuffers b = fake_buffers(DType::bf16);
  EXPECT_ERROR_CONTAINS(launch_fused_optimizer_step(b, adam, PrecisionMode::no_master, StepOptions{-1.0, 0.0},
                                                    0, nullptr, fake_scratch(), nullptr),
                        "lr -1 must be finite and >= 0");
  EXPECT_ERROR_CONTAINS(launch_fused_optimizer_step(b, adam, PrecisionMode::no_master, StepOptions{1e-3, NAN},
                                                    0, nullptr, fake_scratch(), nullptr),
                        "max_grad_norm nan");
  OptimizerScratch s = fake_scratch();
  s.control = nullptr;
  EXPECT_ERROR_CONTAINS(
      launch_fused_optimizer_step(b, adam, PrecisionMode::no_master, StepOptions{}, 0, nullptr, s, nullptr),
      "prepare_step: null device pointer");
  s = fake_scratch();
  s.stats = nullptr;
  EXPECT_ERROR_CONTAINS(
      launch_fused_optimizer_step(b, adam, PrecisionMode::no_master, StepOptions{}, 0, nullptr, s, nullptr),
      "GradStatsScratch pointer is null");
  UpdateBuffers late = b;
  late.state1 = nullptr;  // a problem only the update pass would meet: still caught first
  EXPECT_ERROR_CONTAINS(launch_fused_optimizer_step(late, adam, PrecisionMode::no_master, StepOptions{}, 0,
                                                    nullptr, fake_scratch(), nullptr),
                        "state1 is null");
}

TEST(TrainerValidation, StatsPrepareConvertScaler) {
  EXPECT_ERROR_CONTAINS(
      launch_grad_stats(DType::f16, nullptr, 10, nullptr, fake<GradStatsScratch>(0x1000), nullptr),
      "grads is null for 10 elements");
  EXPECT_ERROR_CONTAINS(
      launch_grad_stats(DType::f16, fake<const void>(0x1000), 10, nullptr, nullptr, nullptr),
      "GradStatsScratch pointer is null");
  EXPECT_ERROR_CONTAINS(launch_grad_stats(DType::f32, fake<const void>(0x1002), 10, nullptr,
                                          fake<GradStatsScratch>(0x8000), nullptr),
                        "not aligned to its 4-byte elements");
  EXPECT_ERROR_CONTAINS(launch_prepare_step(fake<const GradStatsScratch>(0x1000), nullptr, OptimizerConfig{},
                                            StepOptions{}, fake<std::int64_t>(0x2000), nullptr, nullptr),
                        "null device pointer");
  EXPECT_ERROR_CONTAINS(launch_convert(fake<void>(0x1000), DType::f32, fake<const void>(0x1008), DType::f16,
                                       100, nullptr, ConvertScaling::none, nullptr),
                        "overlaps source");
  EXPECT_ERROR_CONTAINS(launch_convert(fake<void>(0x1000), DType::f32, fake<const void>(0x9000), DType::f16,
                                       100, nullptr, ConvertScaling::unscale, nullptr),
                        "needs the device StepControl");
  EXPECT_ERROR_CONTAINS(launch_convert(nullptr, DType::f32, fake<const void>(0x9000), DType::f16, 100,
                                       nullptr, ConvertScaling::none, nullptr),
                        "null pointer");
  EXPECT_NO_THROW(
      launch_convert(nullptr, DType::f32, nullptr, DType::f16, 0, nullptr, ConvertScaling::none, nullptr));
  // Misaligned elements (a fault on the device, which poisons the context) are refused, each end.
  EXPECT_ERROR_CONTAINS(launch_convert(fake<void>(0x100001), DType::f16, fake<const void>(0x9000), DType::f32,
                                       100, nullptr, ConvertScaling::none, nullptr),
                        "convert: dst 0x100001 is not aligned to its 2-byte f16 elements");
  EXPECT_ERROR_CONTAINS(launch_convert(fake<void>(0x100000), DType::f16, fake<const void>(0x9002), DType::f32,
                                       100, nullptr, ConvertScaling::none, nullptr),
                        "convert: src 0x9002 is not aligned to its 4-byte f32 elements");
  EXPECT_ERROR_CONTAINS(
      launch_loss_scaler_update(nullptr, fake<const int>(0x1000), LossScalerConfig{}, nullptr),
      "null pointer");
  EXPECT_ERROR_CONTAINS(launch_loss_scaler_update(fake<LossScalerState>(0x1000), fake<const int>(0x2000),
                                                  LossScalerConfig{1.0f, 2.0f, 0.5f, 0}, nullptr),
                        "growth_interval 0");
}

TEST(TrainerValidation, Baselines) {
  const WorkspaceLayout layout({{"a", 50}, {"b", 43}});  // 56 + 48 = 104 elements
  const OptimizerConfig adam;
  PerTensorBuffers p;
  p.dtype = DType::f16;
  p.params = fake<void>(0x100000);
  p.grads = fake<const void>(0x200000);
  p.master = fake<float>(0x300000);
  p.state0 = fake<float>(0x400000);
  p.state1 = fake<float>(0x500000);
  EXPECT_ERROR_CONTAINS(
      launch_per_tensor_step(layout, p, adam, StepOptions{}, nullptr, fake_scratch(), nullptr),
      "grads_fp32 is null for 104 elements");
  p.grads_fp32 = fake<float>(0x500000 + 64);
  EXPECT_ERROR_CONTAINS(
      launch_per_tensor_step(layout, p, adam, StepOptions{}, nullptr, fake_scratch(), nullptr),
      "grads_fp32 overlaps state1");
  p.master = nullptr;
  EXPECT_ERROR_CONTAINS(
      launch_per_tensor_step(layout, p, adam, StepOptions{}, nullptr, fake_scratch(), nullptr),
      "master is null");

  UpdateBuffers b = fake_buffers(DType::f16);
  EXPECT_ERROR_CONTAINS(launch_multi_tensor_update({b}, adam, PrecisionMode::no_master, 0, nullptr, nullptr),
                        "StepControl pointer is null");
  UpdateBuffers other = fake_buffers(DType::bf16);
  other.params = fake<void>(0x900000);
  EXPECT_ERROR_CONTAINS(
      launch_multi_tensor_update({b, other}, adam, PrecisionMode::no_master, 0, fake_control(), nullptr),
      "tensor dtypes differ");
  b.count = 104;
  EXPECT_ERROR_CONTAINS(
      launch_multi_tensor_step(WorkspaceLayout({{"a", 8}}), b, adam, PrecisionMode::no_master, StepOptions{},
                               0, nullptr, fake_scratch(), nullptr),
      "buffers have 104 elements, layout 8");
}

// The entries of one multi-tensor launch are updated by different blocks at once: any byte two of
// them share is refused, naming both (the same entry twice; one entry's grads on another's
// params; one's state at the end of another's master). (A passing case would launch a kernel on
// these fake addresses where a GPU is present, so none is run here; the gpu tests launch real ones.)
TEST(TrainerValidation, MultiTensorEntriesMustNotShareBytes) {
  const OptimizerConfig adam;
  const auto update = [&](const std::vector<UpdateBuffers>& tensors, PrecisionMode mode) {
    launch_multi_tensor_update(tensors, adam, mode, 0, fake_control(), nullptr);
  };
  const UpdateBuffers a = fake_buffers(DType::f16);  // params [0x100000, +200), grads [0x200000, +200), ...
  UpdateBuffers b = a;
  for (void** p : {&b.params, reinterpret_cast<void**>(&b.master), reinterpret_cast<void**>(&b.state0),
                   reinterpret_cast<void**>(&b.state1)})
    *p = static_cast<char*>(*p) + 0x1000;
  b.grads = static_cast<const char*>(b.grads) + 0x1000;
  EXPECT_ERROR_CONTAINS(update({a, a}, PrecisionMode::no_master),
                        "multi_tensor_update: tensor 1's params [0x100000, +200) overlaps tensor 0's params");
  UpdateBuffers c = b;
  c.grads = static_cast<const char*>(a.params) + 198;  // the last element of a's params
  EXPECT_ERROR_CONTAINS(update({a, c}, PrecisionMode::no_master),
                        "tensor 1's grads [0x1000c6, +200) overlaps tensor 0's params [0x100000, +200)");
  c = b;
  c.state0 = a.master + 99;  // a's master is used only in master_fp32 mode
  EXPECT_ERROR_CONTAINS(update({a, c}, PrecisionMode::master_fp32), "tensor 0's master [0x300000, +400)");
}

}  // namespace
}  // namespace seqbench::trainer
