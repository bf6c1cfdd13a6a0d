// The apex-style multi-tensor-apply launch plan (host only): every chunk exactly once, the table
// limits respected, split tensors carried over as slot 0, empty tensors skipped.
#include <gtest/gtest.h>

#include <map>
#include <random>

#include "trainer/multi_tensor_apply.h"

namespace seqbench::trainer {
namespace {

void check_plan(const std::vector<std::size_t>& counts, std::size_t chunk, int max_tensors, int max_blocks) {
  const auto plan = plan_multi_tensor_apply(counts, chunk, max_tensors, max_blocks);
  std::map<std::pair<std::size_t, std::size_t>, int> seen;
  for (std::size_t l = 0; l < plan.size(); ++l) {
    const MtaLaunch& launch = plan[l];
    ASSERT_FALSE(launch.blocks.empty()) << "launch " << l << " has no blocks";
    ASSERT_LE(static_cast<int>(launch.tensors.size()), max_tensors);
    ASSERT_LE(static_cast<int>(launch.blocks.size()), max_blocks);
    for (const MtaBlock& b : launch.blocks) {
      ASSERT_GE(b.slot, 0);
      ASSERT_LT(static_cast<std::size_t>(b.slot), launch.tensors.size());
      const std::size_t t = launch.tensors[static_cast<std::size_t>(b.slot)];
      ASSERT_LT(b.chunk * chunk, counts[t]) << "chunk beyond the tensor";
      ++seen[{t, b.chunk}];
    }
    // A tensor continued from the previous launch sits in slot 0.
    if (l > 0 && !plan[l - 1].tensors.empty() && plan[l - 1].tensors.back() == launch.tensors.front()) {
      EXPECT_EQ(launch.blocks.front().slot, 0);
    }
  }
  std::size_t expected = 0;
  for (std::size_t t = 0; t < counts.size(); ++t) {
    const std::size_t chunks = (counts[t] + chunk - 1) / chunk;
    expected += chunks;
    for (std::size_t c = 0; c < chunks; ++c) ASSERT_EQ((seen[{t, c}]), 1) << "tensor " << t << " chunk " << c;
  }
  EXPECT_EQ(seen.size(), expected);
}

TEST(MultiTensorPlan, SmallCases) {
  EXPECT_TRUE(plan_multi_tensor_apply({}).empty());
  EXPECT_TRUE(plan_multi_tensor_apply({0, 0}).empty());
  const auto one = plan_multi_tensor_apply({1});
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].blocks.size(), 1u);
  // Trailing empty tensors must not swallow the pending launch.
  const auto trailing = plan_multi_tensor_apply({5, 0, 0});
  ASSERT_EQ(trailing.size(), 1u);
  EXPECT_EQ(trailing[0].tensors, std::vector<std::size_t>{0});
}

TEST(MultiTensorPlan, TensorTableFullTriggersALaunch) {
  const std::vector<std::size_t> counts(31, 10);  // 31 one-chunk tensors, 30 per table
  const auto plan = plan_multi_tensor_apply(counts);
  ASSERT_EQ(plan.size(), 2u);
  EXPECT_EQ(plan[0].tensors.size(), 30u);
  EXPECT_EQ(plan[1].tensors.size(), 1u);
  check_plan(counts, kMtaChunkElements, kMtaMaxTensors, kMtaMaxBlocks);
}

TEST(MultiTensorPlan, BigTensorSplitsAcrossLaunches) {
  const std::vector<std::size_t> counts = {3, kMtaChunkElements * 700 + 1, 9};
  const auto plan = plan_multi_tensor_apply(counts);
  ASSERT_EQ(plan.size(), 3u);  // 1 + 701 + 1 = 703 blocks in tables of 320
  EXPECT_EQ(plan[1].tensors.front(), 1u);
  check_plan(counts, kMtaChunkElements, kMtaMaxTensors, kMtaMaxBlocks);
}

TEST(MultiTensorPlan, RandomListsCoverEveryChunkOnce) {
  std::mt19937_64 rng(17);
  for (int trial = 0; trial < 300; ++trial) {
    std::vector<std::size_t> counts(rng() % 80);
    for (auto& c : counts) c = rng() % 5 == 0 ? 0 : rng() % 20000;
    const int max_tensors = 1 + static_cast<int>(rng() % 8);
    const int max_blocks = 1 + static_cast<int>(rng() % 12);
    check_plan(counts, 1000, max_tensors, max_blocks);
  }
}

}  // namespace
}  // namespace seqbench::trainer
