// CriterionLayer without a GPU: configuration and argument validation (every check runs before any
// CUDA call), the one planned allocation (through a host-memory fake allocator) and its tensors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "core/error.h"
#include "kernels/cross_entropy.h"
#include "layers/criterion_layer.h"
#include "layers/memory_planner.h"
#include "tests/common/expect_error.h"
#include "tests/layers/fake_allocators.h"
#include "tests/layers/layer_test_support.h"

namespace seqbench::layers {
namespace {

using testing::expect_error;
using testing::expect_error_all;

using layer_test::HostBackend;
using layer_test::small_criterion;

TEST(CriterionLayerValidation, ConfigRulesAreAllNamed) {
  CriterionLayerConfig c = small_criterion();
  c.max_batch_tokens = 0;
  c.epsilon = std::nan("");
  c.convention = "szegedy";
  expect_error_all([&] { c.validate(); },
                   {"max_batch_tokens (0) must be positive", "epsilon (nan)", "'fairseq' or 'paper'"});
  EXPECT_EQ(CriterionLayerConfig{}.convention, "fairseq");
  c = small_criterion();
  c.convention = "paper";
  EXPECT_EQ(c.kernel_config().convention, kernels::CrossEntropySmoothing::paper);
  EXPECT_EQ(c.kernel_config().ignore_index, std::optional<std::int32_t>(1));
  EXPECT_FLOAT_EQ(c.kernel_config().smoothing, 0.1f);
  HostBackend backend;
  CountingAllocator counter(backend);
  c.epsilon = 1.5;
  expect_error([&] { CriterionLayer layer(c, counter); }, "epsilon (1.5)");
  EXPECT_EQ(counter.stats().allocations, 0u);
}

TEST(CriterionLayerValidation, OneAllocationOfThePlannedStorage) {
  HostBackend backend;
  CountingAllocator counter(backend);
  {
    CriterionLayer layer(small_criterion(), counter);
    EXPECT_EQ(counter.stats().allocations, 1u);
    EXPECT_EQ(counter.stats().bytes_allocated, layer.block_bytes());
    const std::vector<TensorLifetime>& tensors = layer.memory().tensors();
    for (const char* name : {"criterion.loss", "criterion.nll", "criterion.lse"})
      EXPECT_EQ(tensors[layer.memory().id(name)].bytes, 64u * sizeof(float)) << name;
    EXPECT_EQ(tensors[layer.memory().id("criterion.totals")].bytes, sizeof(kernels::CrossEntropyTotals));
    EXPECT_TRUE(find_plan_violations(tensors, layer.memory().plan()).empty());
  }
  EXPECT_EQ(counter.stats().live_bytes, 0u);
}

TEST(CriterionLayerValidation, ForwardAndBackwardArgumentsAreCheckedBeforeAnyCudaCall) {
  HostBackend backend;
  CountingAllocator counter(backend);
  CriterionLayer layer(small_criterion(), counter);
  alignas(16) static char host[1 << 14];
  const void* logits = host;
  const auto* targets = reinterpret_cast<const std::int32_t*>(host + 8192);
  expect_error_all([&] { layer.forward(logits, targets, 65, 7, nullptr); },
                   {"rows 65", "max_batch_tokens 64"});
  expect_error([&] { layer.forward(logits, targets, 0, 7, nullptr); }, "rows 0");
  expect_error([&] { layer.forward(logits, targets, 4, 0, nullptr); }, "vocab 0");
  // fairseq with ε > 0 needs V >= 2 (ε/(V-1)).
  expect_error([&] { layer.forward(logits, targets, 4, 1, nullptr); }, "needs vocabulary >= 2, got 1");
  expect_error([&] { layer.forward(nullptr, targets, 4, 7, nullptr); }, "logits is null");
  expect_error([&] { layer.forward(logits, nullptr, 4, 7, nullptr); }, "targets is null");
  expect_error([&] { layer.forward(host + 1, targets, 4, 7, nullptr); }, "logits (");
  expect_error([&] { layer.forward(layer.memory().block(), targets, 4, 7, nullptr); },
               "overlaps the layer's planned block");
  void* dlogits = host + 4096;
  expect_error([&] { layer.backward(dlogits, logits, targets, 1.0f, nullptr); },
               "no forward() to differentiate");
  expect_error([&] { layer.backward(dlogits, logits, targets, static_cast<const float*>(nullptr), nullptr); },
               "no forward() to differentiate");
  EXPECT_EQ(counter.stats().allocations, 1u);
}

}  // namespace
}  // namespace seqbench::layers
