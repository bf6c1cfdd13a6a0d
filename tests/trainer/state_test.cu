// On the GPU: the workspace's device side (views, zeroing, master initialization), the conversion
// kernel, and saving/restoring the optimizer state, which must round-trip exactly: a restored
// optimizer continues bitwise as the original does.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <random>
#include <sstream>

#include "core/device_buffer.h"
#include "tests/common/expect_error.h"
#include "tests/common/gpu_test.h"
#include "tests/trainer/gpu_helpers.h"
#include "trainer/convert.h"
#include "trainer/optimizer.h"

namespace seqbench::trainer {
namespace {

using testing::bitwise_difference;
using testing::download;
using testing::upload;

TEST(WorkspaceGpu, ViewsPointIntoTheOneBufferAndZeroingClearsPadding) {
  SEQBENCH_REQUIRE_GPU();
  std::mt19937_64 rng(1);
  const WorkspaceLayout layout = testing::random_layout(rng);
  Workspace ws(layout, DType::f16, true);
  // Allocation zeroes everything, padding included.
  for (const auto x : download<__half>(ws.params(), ws.count())) ASSERT_EQ(to_float(x), 0.0f);
  for (const auto x : download<float>(ws.master(), ws.count())) ASSERT_EQ(x, 0.0f);
  for (const TensorSlot& slot : layout.tensors()) {
    const TensorView<__half> p = ws.param<__half>(slot.name);
    EXPECT_EQ(p.data(), static_cast<__half*>(ws.params()) + slot.offset);
    EXPECT_EQ(p.size(), slot.count);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p.data()) % 16, 0u);
    EXPECT_EQ(ws.grad<__half>(slot.name).data(), static_cast<__half*>(ws.grads()) + slot.offset);
    EXPECT_EQ(ws.master(slot.name).data(), ws.master() + slot.offset);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(ws.master(slot.name).data()) % 16, 0u);
  }
  EXPECT_THROW(ws.param<float>(layout.tensors()[0].name), Error);
  EXPECT_THROW(ws.grad<__half>("no.such.tensor"), Error);
  SEQBENCH_CUDA_CHECK(cudaMemset(ws.grads(), 0x3C, layout.bytes(DType::f16)));
  ws.zero_grads(nullptr);
  SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
  for (const auto x : download<__half>(ws.grads(), ws.count())) ASSERT_EQ(to_float(x), 0.0f);
}

template <class Dst, class Src>
void check_convert(std::size_t count, std::size_t offset, ConvertScaling scaling, int found_inf,
                   std::uint64_t seed) {
  std::ostringstream trace;
  trace << DTypeTraits<Src>::name << "->" << DTypeTraits<Dst>::name << " count " << count << " offset "
        << offset << " scaling " << static_cast<int>(scaling) << " found_inf " << found_inf;
  SCOPED_TRACE(trace.str());
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<Src> src(count + offset);
  for (auto& x : src) x = from_float<Src>(normal(rng) * 100.0f);
  DeviceBuffer<Src> d_src(src);
  DeviceBuffer<Dst> d_dst(count + offset);
  d_dst.fill_bytes(0xFF);
  StepControl control;
  control.found_inf = found_inf;
  control.grad_multiplier = 1.0f / 3.0f;
  DeviceBuffer<StepControl> d_control(std::vector<StepControl>{control});
  launch_convert(d_dst.data() + offset, DTypeTraits<Dst>::dtype, d_src.data() + offset,
                 DTypeTraits<Src>::dtype, count, d_control.data(), scaling, nullptr);
  const auto got = d_dst.copy_to_host();
  std::vector<Dst> want(count + offset);
  std::memset(static_cast<void*>(want.data()), 0xFF, want.size() * sizeof(Dst));
  const bool skip = scaling != ConvertScaling::none && found_inf;
  const float m = scaling == ConvertScaling::unscale ? control.grad_multiplier : 1.0f;
  if (!skip)
    for (std::size_t i = offset; i < count + offset; ++i)
      want[i] = from_float<Dst>(rn::mul(to_float<Src>(src[i]), m));
  EXPECT_EQ(bitwise_difference("dst", got, want), "");
}

TEST(ConvertGpu, EveryPairAnyCountAnyAlignment) {
  SEQBENCH_REQUIRE_GPU();
  std::vector<std::size_t> counts = testing::odd_sizes();
  std::mt19937_64 rng(3);
  for (int i = 0; i < 20; ++i) counts.push_back(1 + rng() % 100000);
  std::uint64_t seed = 0;
  for (const std::size_t count : counts) {
    for (const std::size_t offset : {0u, 1u}) {
      const auto scaling = static_cast<ConvertScaling>(seed % 3);
      const int found_inf = seed % 5 == 4 ? 1 : 0;
      check_convert<float, __half>(count, offset, scaling, found_inf, seed++);
      check_convert<float, __nv_bfloat16>(count, offset, scaling, found_inf, seed++);
      check_convert<__half, float>(count, offset, scaling, found_inf, seed++);
      check_convert<__nv_bfloat16, float>(count, offset, scaling, found_inf, seed++);
      check_convert<float, float>(count, offset, scaling, found_inf, seed++);
      check_convert<__half, __nv_bfloat16>(count, offset, scaling, found_inf, seed++);
    }
  }
}

template <class T>
void check_save_restore(const OptimizerConfig& config, PrecisionMode mode, std::uint64_t seed) {
  std::ostringstream trace;
  trace << dtype_name(DTypeTraits<T>::dtype) << "/" << optimizer_kind_name(config.kind) << "/"
        << precision_mode_name(mode);
  SCOPED_TRACE(trace.str());
  std::mt19937_64 rng(seed);
  const WorkspaceLayout layout = testing::random_layout(rng);
  const std::size_t n = layout.total_elements();
  const bool master = mode == PrecisionMode::master_fp32;
  Workspace a(layout, DTypeTraits<T>::dtype, master);
  upload(a.params(), testing::random_in_tensors<T>(layout, rng, 1.0f));
  if (master) a.copy_params_to_master(nullptr);
  FusedOptimizer opt_a(a, config, mode, seed);
  for (int s = 0; s < 3; ++s) {
    upload(a.grads(), testing::random_in_tensors<T>(layout, rng, 0.05f, 0.0));
    opt_a.step(a, StepOptions{1e-2, 0.0}, nullptr, nullptr);
  }
  const OptimizerStateSnapshot saved = opt_a.save_state(a);
  EXPECT_EQ(saved.step, 3);
  std::ostringstream file_name;
  file_name << "seqbench_trainer_state_" << ::getpid() << "_" << seed << ".bin";
  const std::filesystem::path path = std::filesystem::temp_directory_path() / file_name.str();
  write_optimizer_state(path, saved);
  const OptimizerStateSnapshot loaded = read_optimizer_state(path);
  std::filesystem::remove(path);
  EXPECT_EQ(bitwise_difference("state0", loaded.state0, saved.state0), "");
  EXPECT_EQ(bitwise_difference("state1", loaded.state1, saved.state1), "");
  EXPECT_EQ(bitwise_difference("master", loaded.master, saved.master), "");

  // A second workspace with the same parameters and the restored state continues exactly as the
  // first; a fresh optimizer (no restore) does not.
  Workspace b(layout, DTypeTraits<T>::dtype, master), c(layout, DTypeTraits<T>::dtype, master);
  const auto params = download<T>(a.params(), n);
  upload(b.params(), params);
  upload(c.params(), params);
  if (master) c.copy_params_to_master(nullptr);
  FusedOptimizer opt_b(b, config, mode, seed), opt_c(c, config, mode, seed);
  opt_b.load_state(b, loaded);
  EXPECT_EQ(opt_b.read_step(), 3);
  for (int s = 0; s < 2; ++s) {
    const auto grads = testing::random_in_tensors<T>(layout, rng, 0.05f, 0.0);
    for (Workspace* w : {&a, &b, &c}) upload(w->grads(), grads);
    opt_a.step(a, StepOptions{1e-2, 0.0}, nullptr, nullptr);
    opt_b.step(b, StepOptions{1e-2, 0.0}, nullptr, nullptr);
    opt_c.step(c, StepOptions{1e-2, 0.0}, nullptr, nullptr);
  }
  SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
  EXPECT_EQ(bitwise_difference("params", download<T>(b.params(), n), download<T>(a.params(), n)), "");
  const OptimizerStateSnapshot after_a = opt_a.save_state(a), after_b = opt_b.save_state(b);
  EXPECT_EQ(after_b.step, after_a.step);
  EXPECT_EQ(bitwise_difference("state0", after_b.state0, after_a.state0), "");
  EXPECT_EQ(bitwise_difference("state1", after_b.state1, after_a.state1), "");
  EXPECT_EQ(bitwise_difference("master", after_b.master, after_a.master), "");
  EXPECT_NE(bitwise_difference("params", download<T>(c.params(), n), download<T>(a.params(), n)), "")
      << "a fresh optimizer gave the restored result: the test cannot tell a restore from none";
}

TEST(OptimizerStateGpu, SaveRestoreContinuesBitwise) {
  SEQBENCH_REQUIRE_GPU();
  OptimizerConfig adam, momentum;
  momentum.kind = OptimizerKind::sgd;
  momentum.momentum = 0.9;
  check_save_restore<__half>(adam, PrecisionMode::master_fp32, 1);
  check_save_restore<__nv_bfloat16>(adam, PrecisionMode::stochastic_rounding, 2);
  check_save_restore<float>(momentum, PrecisionMode::no_master, 3);
  check_save_restore<__nv_bfloat16>(momentum, PrecisionMode::master_fp32, 4);
}

// A master_fp32 step from the master as allocated (zeros) would replace every parameter with
// about -lr·sign(g): refused, with nothing launched, until copy_params_to_master, load_state
// (SaveRestoreContinuesBitwise's workspace b) or mark_master_filled has filled it.
TEST(OptimizerStateGpu, MasterStepsAreRefusedUntilTheMasterIsFilled) {
  SEQBENCH_REQUIRE_GPU();
  std::mt19937_64 rng(7);
  const WorkspaceLayout layout = testing::random_layout(rng);
  const std::size_t n = layout.total_elements();
  Workspace ws(layout, DType::bf16, true);
  upload(ws.params(), testing::random_in_tensors<__nv_bfloat16>(layout, rng, 1.0f));
  upload(ws.grads(), testing::random_in_tensors<__nv_bfloat16>(layout, rng, 0.05f, 0.0));
  const auto params = download<__nv_bfloat16>(ws.params(), n);
  FusedOptimizer opt(ws, OptimizerConfig{}, PrecisionMode::master_fp32);
  EXPECT_FALSE(ws.master_filled());
  seqbench::testing::expect_error(
      [&] {
        opt.step(ws, StepOptions{1e-2, 0.0}, nullptr, nullptr);
      },
      "a master_fp32 step reads the fp32 master, which holds no parameters yet");
  SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
  EXPECT_EQ(bitwise_difference("params", download<__nv_bfloat16>(ws.params(), n), params), "");
  EXPECT_EQ(opt.read_step(), 0);
  ws.copy_params_to_master(nullptr);
  EXPECT_TRUE(ws.master_filled());
  opt.step(ws, StepOptions{1e-2, 0.0}, nullptr, nullptr);
  EXPECT_EQ(opt.read_step(), 1);

  Workspace by_hand(layout, DType::bf16, true);
  FusedOptimizer opt_by_hand(by_hand, OptimizerConfig{}, PrecisionMode::master_fp32);
  by_hand.mark_master_filled();  // its master is zeros, as are its parameters: a caller's choice
  opt_by_hand.step(by_hand, StepOptions{1e-2, 0.0}, nullptr, nullptr);
  EXPECT_EQ(opt_by_hand.read_step(), 1);
  Workspace no_master(layout, DType::bf16, false);
  seqbench::testing::expect_error([&] { no_master.mark_master_filled(); },
                                  "mark_master_filled: the workspace has no master buffer");
}

TEST(OptimizerStateGpu, MismatchedSnapshotsAreRejected) {
  SEQBENCH_REQUIRE_GPU();
  Workspace ws(WorkspaceLayout({{"w", 10}}), DType::f16, true);
  FusedOptimizer opt(ws, OptimizerConfig{}, PrecisionMode::master_fp32);
  OptimizerStateSnapshot s = opt.save_state(ws);
  s.kind = OptimizerKind::adamw;
  EXPECT_THROW(opt.load_state(ws, s), Error);
  s = opt.save_state(ws);
  s.master.clear();
  EXPECT_THROW(opt.load_state(ws, s), Error);
  s = opt.save_state(ws);
  s.count = 8;
  s.state0.resize(8);
  s.state1.resize(8);
  s.master.resize(8);
  EXPECT_THROW(opt.load_state(ws, s), Error);
}

}  // namespace
}  // namespace seqbench::trainer
