// The kernels' per-thread work replayed on the host (no GPU needed, label cpu): for grids of many
// shapes, every thread's share of the fused update (update_range_thread with the global thread
// index and grid size), of a multi-tensor block (the same with the block's chunk), and of the
// gradient statistics. The union over threads must equal the host emulation BITWISE: an element
// updated twice, skipped, or given the wrong Philox word fails. This checks the index arithmetic,
// the vector path and the tails on any machine; the GPU tests then check the launches themselves.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <sstream>

#include "tests/trainer/gpu_helpers.h"
#include "trainer/host_emulation.h"
#include "trainer/multi_tensor_kernel.cuh"

namespace seqbench::trainer {
namespace {

using testing::bitwise_difference;

template <class T>
struct HostBuffers {
  std::vector<T> params, grads;
  std::vector<float> master, s0, s1;
  HostBuffers(std::size_t n, std::mt19937_64& rng) : params(n), grads(n), master(n), s0(n), s1(n) {
    std::normal_distribution<float> normal;
    for (std::size_t i = 0; i < n; ++i) {
      params[i] = from_float<T>(normal(rng));
      grads[i] = from_float<T>(normal(rng) * 0.1f);
      master[i] = normal(rng);
      s0[i] = normal(rng) * 0.01f;
      s1[i] = std::abs(normal(rng)) * 1e-4f;
    }
  }
};

template <class T>
void expect_same(const HostBuffers<T>& got, const HostBuffers<T>& want, const std::string& where) {
  EXPECT_EQ(bitwise_difference("params", got.params, want.params), "") << where;
  EXPECT_EQ(bitwise_difference("master", got.master, want.master), "") << where;
  EXPECT_EQ(bitwise_difference("state0", got.s0, want.s0), "") << where;
  EXPECT_EQ(bitwise_difference("state1", got.s1, want.s1), "") << where;
}

template <class T, OptimizerKind K, PrecisionMode M>
void simulate_fused(const OptimizerConfig& config, std::size_t count, std::size_t offset,
                    std::uint64_t index_base, std::size_t threads, std::uint64_t seed) {
  std::ostringstream where;
  where << DTypeTraits<T>::name << "/" << optimizer_kind_name(K) << "/" << precision_mode_name(M) << " count "
        << count << " offset " << offset << " index_base " << index_base << " threads " << threads;
  std::mt19937_64 rng(seed);
  const std::size_t total = count + offset + 16;
  HostBuffers<T> device_side(total, rng);
  HostBuffers<T> host_side = device_side;
  const StepControl control = make_step_control(false, 4.0f, 2.0f, config, 1e-2, 1.0, 4);

  detail::UpdateArgs<T> args{device_side.params.data() + offset,
                             device_side.grads.data() + offset,
                             M == PrecisionMode::master_fp32 ? device_side.master.data() + offset : nullptr,
                             uses_state0(config) ? device_side.s0.data() + offset : nullptr,
                             uses_state1(config) ? device_side.s1.data() + offset : nullptr,
                             index_base};
  const bool vectorized = detail::can_vectorize(args, M);
  if (offset % 8 == 0 && index_base % 4 == 0)
    ASSERT_TRUE(vectorized) << where.str() << ": an aligned case must exercise the vector path";
  const detail::StepContext ctx = detail::load_step_context<K>(&control, seed, false);
  for (std::size_t t = 0; t < threads; ++t)
    detail::update_range_thread<T, K, M>(args, ctx, count, vectorized, t, threads);

  HostUpdateBuffers<T> host{host_side.params.data() + offset,
                            host_side.grads.data() + offset,
                            host_side.master.data() + offset,
                            host_side.s0.data() + offset,
                            host_side.s1.data() + offset,
                            count,
                            index_base};
  emulate_update(host, K, M, control, seed);
  expect_same(device_side, host_side, where.str() + (vectorized ? " (vector path)" : " (scalar path)"));
}

template <class T, OptimizerKind K, PrecisionMode M>
void simulate_fused_shapes(const OptimizerConfig& config) {
  // The host vectors are allocated by std::vector (16-byte aligned on every mainstream ABI), so
  // offset 0 takes the vector path and odd offsets the scalar one; the test says which it ran.
  std::vector<std::size_t> counts = testing::odd_sizes();
  counts.push_back(65537);
  std::mt19937_64 rng(11);
  for (int i = 0; i < 6; ++i) counts.push_back(1 + rng() % 30000);
  std::uint64_t seed = 0;
  for (const std::size_t count : counts) {
    for (const std::size_t offset : {0u, 1u, 8u}) {
      for (const std::size_t threads :
           {std::size_t{1}, std::size_t{7}, std::size_t{256}, std::size_t{256 * 5 + 32}, count / 3 + 1}) {
        const std::uint64_t index_base = seed % 3 == 0 ? 0 : seed % 3 == 1 ? 5 : 4096;
        simulate_fused<T, K, M>(config, count, offset, index_base, threads, seed++);
      }
    }
  }
}

TEST(KernelSimulation, FusedGridCoversEveryElementOnceF32) {
  OptimizerConfig adam, nesterov;
  nesterov.kind = OptimizerKind::sgd;
  nesterov.momentum = 0.9;
  nesterov.nesterov = true;
  simulate_fused_shapes<float, OptimizerKind::adam, PrecisionMode::no_master>(adam);
  simulate_fused_shapes<float, OptimizerKind::sgd, PrecisionMode::master_fp32>(nesterov);
}

TEST(KernelSimulation, FusedGridCoversEveryElementOnceF16) {
  OptimizerConfig adamw, sgd;
  adamw.kind = OptimizerKind::adamw;
  adamw.weight_decay = 0.1;
  sgd.kind = OptimizerKind::sgd;
  simulate_fused_shapes<__half, OptimizerKind::adamw, PrecisionMode::master_fp32>(adamw);
  simulate_fused_shapes<__half, OptimizerKind::sgd, PrecisionMode::no_master>(sgd);
}

TEST(KernelSimulation, FusedGridCoversEveryElementOnceBf16) {
  OptimizerConfig adam, momentum;
  momentum.kind = OptimizerKind::sgd;
  momentum.momentum = 0.5;
  simulate_fused_shapes<__nv_bfloat16, OptimizerKind::adam, PrecisionMode::stochastic_rounding>(adam);
  simulate_fused_shapes<__nv_bfloat16, OptimizerKind::sgd, PrecisionMode::stochastic_rounding>(momentum);
  simulate_fused_shapes<__nv_bfloat16, OptimizerKind::adam, PrecisionMode::no_master>(adam);
}

// Every launch of the multi-tensor plan, every block of it, every one of its 512 threads.
template <class T, OptimizerKind K, PrecisionMode M>
void simulate_multi_tensor(const OptimizerConfig& config, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<TensorSpec> specs;
  const int tensors = 35 + static_cast<int>(rng() % 10);  // > 30: the tensor table splits
  for (int t = 0; t < tensors; ++t) {
    std::ostringstream name;
    name << "t" << t;
    specs.push_back({name.str(), t == 3 ? 0 : t == 7 ? 2 * kMtaChunkElements + 3 : 1 + rng() % 3000});
  }
  const WorkspaceLayout layout(specs);
  const std::size_t n = layout.total_elements();
  HostBuffers<T> device_side(n, rng);
  // The workspace's padding holds zeros (the fused kernel keeps them; a multi-tensor launch never
  // touches them).
  std::vector<bool> in_tensor(n, false);
  for (const TensorSlot& slot : layout.tensors())
    for (std::size_t i = slot.offset; i < slot.offset + slot.count; ++i) in_tensor[i] = true;
  for (std::size_t i = 0; i < n; ++i) {
    if (in_tensor[i]) continue;
    device_side.params[i] = device_side.grads[i] = from_float<T>(0.0f);
    device_side.master[i] = device_side.s0[i] = device_side.s1[i] = 0.0f;
  }
  HostBuffers<T> host_side = device_side;
  const StepControl control = make_step_control(false, 4.0f, 2.0f, config, 1e-2, 1.0, 0);
  const UpdateBuffers whole{DTypeTraits<T>::dtype,
                            device_side.params.data(),
                            device_side.grads.data(),
                            device_side.master.data(),
                            device_side.s0.data(),
                            device_side.s1.data(),
                            n,
                            0};
  const std::vector<UpdateBuffers> slices = slice_update_buffers(layout, whole);
  std::vector<std::size_t> counts;
  for (const auto& s : slices) counts.push_back(s.count);
  const auto plan = plan_multi_tensor_apply(counts);
  ASSERT_GE(plan.size(), 2u);
  const detail::StepContext ctx = detail::load_step_context<K>(&control, seed, false);
  detail::MtaTable table;
  for (const MtaLaunch& launch : plan) {
    detail::fill_mta_table(table, launch, slices, config, M);
    for (unsigned block = 0; block < launch.blocks.size(); ++block) {
      const detail::MtaChunk<T> chunk = detail::mta_chunk<T>(table, block);
      const bool vectorized = detail::can_vectorize(chunk.args, M);
      for (std::size_t t = 0; t < 512; ++t)
        detail::update_range_thread<T, K, M>(chunk.args, ctx, chunk.count, vectorized, t, 512);
    }
  }
  HostUpdateBuffers<T> host{host_side.params.data(),
                            host_side.grads.data(),
                            host_side.master.data(),
                            host_side.s0.data(),
                            host_side.s1.data(),
                            n,
                            0};
  emulate_update(host, K, M, control, seed);
  std::ostringstream where;
  where << DTypeTraits<T>::name << "/" << optimizer_kind_name(K) << "/" << precision_mode_name(M) << " seed "
        << seed;
  expect_same(device_side, host_side, where.str());
}

TEST(KernelSimulation, MultiTensorBlocksCoverEveryTensorElementOnce) {
  OptimizerConfig adam, momentum;
  momentum.kind = OptimizerKind::sgd;
  momentum.momentum = 0.9;
  simulate_multi_tensor<__half, OptimizerKind::adam, PrecisionMode::master_fp32>(adam, 1);
  simulate_multi_tensor<__nv_bfloat16, OptimizerKind::adam, PrecisionMode::stochastic_rounding>(adam, 2);
  simulate_multi_tensor<float, OptimizerKind::sgd, PrecisionMode::no_master>(momentum, 3);
}

// The statistics pass: over all threads, every element counted once (the sum equals the double
// sum within float rounding) and an inf anywhere is seen.
template <class T>
void simulate_stats(std::size_t count, std::size_t offset, std::size_t threads) {
  std::mt19937_64 rng(count * 31 + offset);
  std::normal_distribution<float> normal;
  std::vector<T> grads(count + offset);
  double want = 0.0;
  for (std::size_t i = 0; i < grads.size(); ++i) {
    grads[i] = from_float<T>(1.0f + std::abs(normal(rng)));
    if (i >= offset) want += static_cast<double>(to_float<T>(grads[i])) * to_float<T>(grads[i]) / 4.0;
  }
  const T* g = grads.data() + offset;
  const bool vectorized = detail::aligned16(g);
  double sum = 0.0;
  int nonfinite = 0;
  for (std::size_t t = 0; t < threads; ++t) {
    float thread_sum = 0.0f;
    detail::grad_stats_thread(g, count, vectorized, 0.5f, t, threads, thread_sum, nonfinite);
    sum += thread_sum;
  }
  EXPECT_EQ(nonfinite, 0);
  // Each thread's float sum of at most count terms: relative error <= count * 2^-24 (every term
  // is >= 1/4, so a missing or doubled term, >= 1/(4 * 5 count) of the total, is far larger).
  EXPECT_NEAR(sum, want, want * (static_cast<double>(count) + 4) * std::ldexp(1.0, -24))
      << DTypeTraits<T>::name << " count " << count << " offset " << offset << " threads " << threads;
  for (const std::size_t at : {std::size_t{0}, count / 2, count - 1}) {
    std::vector<T> poisoned(grads);
    poisoned[offset + at] = from_float<T>(NAN);
    int seen = 0;
    for (std::size_t t = 0; t < threads; ++t) {
      float thread_sum = 0.0f;
      detail::grad_stats_thread(poisoned.data() + offset, count, vectorized, 0.5f, t, threads, thread_sum,
                                seen);
    }
    EXPECT_EQ(seen, 1) << "NaN at " << at << " of " << count << " missed";
  }
}

TEST(KernelSimulation, StatsThreadsCountEveryGradientOnce) {
  std::vector<std::size_t> counts = testing::odd_sizes();
  counts.push_back(70001);
  for (const std::size_t count : counts) {
    for (const std::size_t offset : {0u, 1u}) {
      for (const std::size_t threads : {std::size_t{1}, std::size_t{256}, std::size_t{1000}}) {
        simulate_stats<float>(count, offset, threads);
        simulate_stats<__half>(count, offset, threads);
        simulate_stats<__nv_bfloat16>(count, offset, threads);
      }
    }
  }
}

}  // namespace
}  // namespace seqbench::trainer
