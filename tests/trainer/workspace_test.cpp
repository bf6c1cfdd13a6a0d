// WorkspaceLayout: offsets, alignment, totals, lookup and the errors a user can cause (host only).
#include "trainer/workspace.h"

#include <gtest/gtest.h>

#include <limits>
#include <random>
#include <string>

#include "core/error.h"
#include "tests/common/expect_error.h"
#include "trainer/optimizer.h"

namespace seqbench::trainer {
namespace {

using seqbench::testing::error_of;

TEST(WorkspaceLayout, OffsetsArePaddedToSixteenBytesInOrder) {
  const WorkspaceLayout layout(
      {{"embed", 1000}, {"ln.gamma", 3}, {"ln.beta", 3}, {"empty", 0}, {"w", 8}, {"b", 1}});
  ASSERT_EQ(layout.tensor_count(), 6u);
  const std::vector<std::size_t> want_offsets = {0, 1000, 1008, 1016, 1016, 1024};
  for (std::size_t i = 0; i < want_offsets.size(); ++i) {
    EXPECT_EQ(layout.tensors()[i].offset, want_offsets[i]) << layout.tensors()[i].name;
  }
  EXPECT_EQ(layout.total_elements(), 1032u);
  EXPECT_EQ(layout.parameter_count(), 1015u);
  EXPECT_EQ(layout.bytes(DType::bf16), 1032u * 2);
  EXPECT_EQ(layout.bytes(DType::f32), 1032u * 4);
  EXPECT_EQ(layout.find("ln.beta").offset, 1008u);
  EXPECT_EQ(layout.find("ln.beta").count, 3u);
  EXPECT_TRUE(layout.contains("w"));
  EXPECT_FALSE(layout.contains("W"));
}

TEST(WorkspaceLayout, RandomLayoutsAreAlignedDisjointAndTight) {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<TensorSpec> specs;
    const int tensors = 1 + static_cast<int>(rng() % 60);
    for (int t = 0; t < tensors; ++t) {
      const std::size_t sizes[] = {0, 1, 3, 7, 8, 9, 127, 1000, 1023, 4097};
      const std::size_t count = rng() % 3 == 0 ? rng() % 100000 : sizes[rng() % 10];
      std::string name = "t";  // appended, not "t" + ...: GCC 12 -O3 warns falsely (-Wrestrict) on that
      name += std::to_string(t);
      specs.push_back({name, count});
    }
    const WorkspaceLayout layout(specs);
    std::size_t end = 0, params = 0;
    for (std::size_t i = 0; i < specs.size(); ++i) {
      const TensorSlot& slot = layout.tensors()[i];
      EXPECT_EQ(slot.name, specs[i].name);
      EXPECT_EQ(slot.count, specs[i].count);
      // 16-byte aligned in every element type the buffers use (2 and 4 bytes).
      EXPECT_EQ(slot.offset % WorkspaceLayout::kAlignElements, 0u);
      EXPECT_EQ(slot.offset * 2 % 16, 0u);
      EXPECT_EQ(slot.offset * 4 % 16, 0u);
      EXPECT_GE(slot.offset, end) << "tensor " << i << " overlaps the previous one";
      EXPECT_LT(slot.offset - end, WorkspaceLayout::kAlignElements) << "more padding than alignment needs";
      end = slot.offset + slot.count;
      params += slot.count;
      EXPECT_EQ(&layout.find(slot.name), &slot);
    }
    EXPECT_GE(layout.total_elements(), end);
    EXPECT_LT(layout.total_elements() - end, WorkspaceLayout::kAlignElements);
    EXPECT_EQ(layout.total_elements() % WorkspaceLayout::kAlignElements, 0u);
    EXPECT_EQ(layout.parameter_count(), params);
  }
}

TEST(WorkspaceLayout, EmptyLayoutHasNothing) {
  const WorkspaceLayout layout(std::vector<TensorSpec>{});
  EXPECT_EQ(layout.total_elements(), 0u);
  EXPECT_EQ(layout.parameter_count(), 0u);
  EXPECT_EQ(layout.bytes(DType::f16), 0u);
}

TEST(WorkspaceLayout, UnknownNameIsAnErrorNamingIt) {
  const WorkspaceLayout layout({{"encoder.0.attn.qkv", 12}});
  const std::string message = error_of([&] { layout.find("encoder.0.attn.out"); });
  EXPECT_NE(message.find("'encoder.0.attn.out'"), std::string::npos) << message;
  EXPECT_NE(message.find("1 tensors"), std::string::npos) << message;
}

TEST(WorkspaceLayout, DuplicateAndEmptyNamesAreRejected) {
  const std::string dup = error_of([] { WorkspaceLayout({{"a", 1}, {"b", 2}, {"a", 3}}); });
  EXPECT_NE(dup.find("duplicate tensor name 'a'"), std::string::npos) << dup;
  EXPECT_NE(dup.find("#2"), std::string::npos) << dup;
  const std::string empty = error_of([] { WorkspaceLayout({{"a", 1}, {"", 2}}); });
  EXPECT_NE(empty.find("tensor #1 has an empty name"), std::string::npos) << empty;
}

TEST(WorkspaceLayout, TotalsThatCannotBeAddressedAreRejected) {
  const std::size_t huge = std::numeric_limits<std::size_t>::max() / 8;
  const std::string one = error_of([&] { WorkspaceLayout({{"a", huge + 1}}); });
  EXPECT_NE(one.find("tensor 'a'"), std::string::npos) << one;
  const std::string sum = error_of([&] { WorkspaceLayout({{"a", huge / 2}, {"b", huge / 2 + 64}}); });
  EXPECT_NE(sum.find("tensor 'b'"), std::string::npos) << sum;
}

TEST(OptimizerFootprint, MinimalBytesAndMemoryPerMode) {
  OptimizerConfig adam, sgd, momentum;
  sgd.kind = OptimizerKind::sgd;
  momentum.kind = OptimizerKind::sgd;
  momentum.momentum = 0.9;
  // ANCHORS.md: fp16/bf16 Adam without a master copy moves 22 bytes per parameter.
  EXPECT_EQ(minimal_update_bytes(1, DType::bf16, adam, PrecisionMode::no_master), 22u);
  EXPECT_EQ(minimal_update_bytes(1, DType::bf16, adam, PrecisionMode::stochastic_rounding), 22u);
  EXPECT_EQ(minimal_update_bytes(1, DType::f16, adam, PrecisionMode::master_fp32), 28u);
  EXPECT_EQ(minimal_update_bytes(1, DType::f32, adam, PrecisionMode::no_master),
            28u);  // 16 read + 12 written
  EXPECT_EQ(minimal_update_bytes(1, DType::f16, momentum, PrecisionMode::no_master), 14u);
  EXPECT_EQ(minimal_update_bytes(1, DType::f16, momentum, PrecisionMode::master_fp32), 20u);
  EXPECT_EQ(minimal_update_bytes(1, DType::f16, sgd, PrecisionMode::no_master), 6u);
  EXPECT_EQ(minimal_update_bytes(1000, DType::f16, sgd, PrecisionMode::master_fp32), 12000u);
  const MemoryFootprint a = memory_footprint(100, DType::bf16, adam, PrecisionMode::no_master);
  EXPECT_EQ(a.params, 200u);
  EXPECT_EQ(a.grads, 200u);
  EXPECT_EQ(a.master, 0u);
  EXPECT_EQ(a.state, 800u);
  EXPECT_EQ(a.total(), 1200u);
  EXPECT_EQ(memory_footprint(100, DType::bf16, adam, PrecisionMode::master_fp32).total(), 1600u);
  EXPECT_EQ(memory_footprint(100, DType::f16, sgd, PrecisionMode::no_master).total(), 400u);
}

}  // namespace
}  // namespace seqbench::trainer
