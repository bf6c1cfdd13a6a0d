// The embedding kernels on the GPU: every launcher (fused, both backwards, unfused) against
// reference/embedding.h through the suite's checks (which `seqbench check` also runs), plus the
// documented behaviour for token ids outside [0, vocab): a NaN output row, no gradient, and the
// other rows exactly as if the token were padding (slot indexing).

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "core/device_buffer.h"
#include "core/stream_fork.h"
#include "kernels/embedding.h"
#include "suites/operators/check_util.h"
#include "suites/operators/operators.h"
#include "tests/common/gpu_test.h"

namespace seqbench {
namespace {

using kernels::EmbeddingConfig;
using kernels::EmbeddingShape;
using operators::check_util::random_values;

constexpr std::uint64_t kSeed = 20240919;

TEST(EmbeddingGpu, EveryLauncherMatchesTheReference) {
  SEQBENCH_REQUIRE_GPU();
  const std::vector<CheckResult> results = operators::embedding_gpu_checks(kSeed);
  std::set<std::string> names;
  for (const CheckResult& r : results) {
    names.insert(r.name);
    EXPECT_TRUE(r.passed) << r.name << ": " << r.detail;
  }
  EXPECT_EQ(results.size(), 3u * 6u);
  for (const std::string dtype : {"f32", "f16", "bf16"}) {
    for (const std::string kernel :
         {"fwd", "bwd_sorted", "bwd_atomic", "determinism", "unfused_fwd", "unfused_bwd"}) {
      EXPECT_EQ(names.count("operators/embedding/" + kernel + "/" + dtype), 1u) << kernel << "/" << dtype;
    }
  }
}

template <class T>
void expect_invalid_tokens_give_nan_rows(std::int64_t hidden) {
  const EmbeddingShape shape{2, 9, hidden, 5, 12};
  EmbeddingConfig config;
  config.positions = kernels::PositionEncoding::learned;
  config.padding_idx = 0;
  config.position_offset = 2;
  config.dropout = {0.2f, 7, 3};
  const std::vector<std::int32_t> bad = {1, 2, -1, 3, 0, 5, 4, 1, 1, 2, 2, 70000, 0, 3, 4, 4, 1, -7};
  std::vector<std::int32_t> padded = bad;
  for (auto& t : padded) t = t < 0 || t >= shape.vocab ? config.padding_idx : t;
  const auto n = static_cast<std::size_t>(shape.tokens()), h = static_cast<std::size_t>(hidden);
  DeviceBuffer<T> table(random_values<T>(5 * h, 1, -1.0f, 1.0f)),
      pos(random_values<T>(12 * h, 2, -1.0f, 1.0f));
  DeviceBuffer<T> dy(random_values<T>(n * h, 3, -1.0f, 1.0f));
  DeviceBuffer<std::int32_t> bad_d(bad), padded_d(padded);
  const std::size_t ws_bytes = kernels::embedding_bwd_sorted_workspace_bytes(shape, config);
  const std::size_t forked_ws_bytes = kernels::embedding_bwd_atomic_workspace_bytes(shape, config, true);
  DeviceBuffer<unsigned char> ws(ws_bytes), forked_ws(forked_ws_bytes);
  const OwnedStreamFork fork;
  std::vector<std::vector<T>> out[2];
  for (int run = 0; run < 2; ++run) {
    const std::int32_t* tokens = run == 0 ? bad_d.data() : padded_d.data();
    DeviceBuffer<T> y(n * h), dt(5 * h), dp(12 * h), dta(5 * h), dpa(12 * h), dtf(5 * h), dpf(12 * h);
    for (auto* b : {&y, &dt, &dp, &dta, &dpa, &dtf, &dpf}) b->fill_bytes(0xFF);
    forked_ws.fill_bytes(0xFF);
    kernels::launch_embedding_fwd<T>(y.data(), tokens, table.data(), pos.data(), shape, config, nullptr, 0,
                                     nullptr);
    kernels::launch_embedding_bwd_sorted<T>(dt.data(), dp.data(), dy.data(), tokens, shape, config, ws.data(),
                                            ws_bytes, nullptr);
    kernels::launch_embedding_bwd_atomic<T>(dta.data(), dpa.data(), dy.data(), tokens, shape, config, nullptr,
                                            0, nullptr);
    // Forked: invalid ids must mark nothing (a mark past the bitmap would land outside it).
    kernels::launch_embedding_bwd_atomic<T>(dtf.data(), dpf.data(), dy.data(), tokens, shape, config,
                                            forked_ws.data(), forked_ws_bytes, nullptr, &fork.get());
    SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
    out[run] = {y.copy_to_host(),   dt.copy_to_host(),  dp.copy_to_host(), dta.copy_to_host(),
                dpa.copy_to_host(), dtf.copy_to_host(), dpf.copy_to_host()};
  }
  for (std::size_t i = 0; i < n; ++i) {
    const bool invalid = bad[i] < 0 || bad[i] >= shape.vocab;
    for (std::size_t c = 0; c < h; ++c) {
      const float got = to_float(out[0][0][i * h + c]), as_pad = to_float(out[1][0][i * h + c]);
      if (invalid) {
        ASSERT_TRUE(std::isnan(got)) << "token " << i << " col " << c;
        ASSERT_EQ(as_pad, 0.0f);
      } else {
        ASSERT_EQ(got, as_pad) << "token " << i << " col " << c;
      }
    }
  }
  // Gradients: invalid tokens send nothing, and slot indexing does not move the other positions.
  for (int k = 1; k < 7; ++k) {
    for (std::size_t e = 0; e < out[0][static_cast<std::size_t>(k)].size(); ++e) {
      const float a = to_float(out[0][static_cast<std::size_t>(k)][e]);
      const float b = to_float(out[1][static_cast<std::size_t>(k)][e]);
      if (k <= 2) {
        ASSERT_EQ(a, b) << "sorted gradient " << k << " element " << e;  // deterministic: bitwise
      } else {
        ASSERT_NEAR(a, b, 5e-2f * (1.0f + std::fabs(b))) << "atomic gradient " << k << " element " << e;
      }
    }
  }
}

TEST(EmbeddingGpu, InvalidTokensGiveNanRowsAndNoGradient) {
  SEQBENCH_REQUIRE_GPU();
  expect_invalid_tokens_give_nan_rows<float>(64);
  expect_invalid_tokens_give_nan_rows<float>(33);
  expect_invalid_tokens_give_nan_rows<__half>(1000);
  expect_invalid_tokens_give_nan_rows<__nv_bfloat16>(3);
}

// The sinusoid table (B >= 2) holds the very floats the computed path (B = 1) forms per element,
// so each sentence of a batch comes out bitwise as it does alone. No dropout, so that sentence b
// alone draws the same (all-keep) mask; both paths share the dropout code.
template <class T>
void expect_table_path_is_the_computed_one(std::int64_t batch, std::int64_t len, std::int64_t hidden,
                                           kernels::PositionIndexing indexing, std::int64_t offset) {
  const EmbeddingShape shape{batch, len, hidden, 50, 0};
  EmbeddingConfig config;
  config.scale = 1.7f;
  config.padding_idx = 3;
  config.indexing = indexing;
  config.position_offset = offset;
  ASSERT_TRUE(kernels::embedding_fwd_uses_sinusoid_table(shape, config));
  const EmbeddingShape one{1, len, hidden, 50, 0};
  ASSERT_FALSE(kernels::embedding_fwd_uses_sinusoid_table(one, config));
  const auto n = static_cast<std::size_t>(shape.tokens()), h = static_cast<std::size_t>(hidden);
  std::vector<std::int32_t> tokens(n);
  for (std::size_t i = 0; i < n; ++i) tokens[i] = static_cast<std::int32_t>((i * 7 + i / 5) % 50);  // some 3s
  DeviceBuffer<T> table(random_values<T>(50 * h, 11, -1.0f, 1.0f));
  DeviceBuffer<std::int32_t> tokens_d(tokens);
  // The workspace at a 16-byte boundary (vector loads of the table) and 8 bytes past one (the
  // launcher's minimum: the lookup then takes the element-by-element path, every tensor included).
  std::vector<T> batched_at[2];
  for (int misaligned = 0; misaligned < 2; ++misaligned) {
    DeviceBuffer<T> y(n * h);
    y.fill_bytes(0xFF);
    const std::size_t ws_bytes = kernels::embedding_fwd_workspace_bytes(shape, config);
    DeviceBuffer<unsigned char> ws(ws_bytes + 8);
    ws.fill_bytes(0xFF);  // a stale table would show
    kernels::launch_embedding_fwd<T>(y.data(), tokens_d.data(), table.data(), nullptr, shape, config,
                                     ws.data() + 8 * misaligned, ws_bytes, nullptr);
    SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
    batched_at[misaligned] = y.copy_to_host();
  }
  const std::vector<T>& batched = batched_at[0];
  ASSERT_EQ(std::memcmp(batched_at[0].data(), batched_at[1].data(), n * h * sizeof(T)), 0)
      << "the element path (8-byte aligned workspace) differs from the vector one";
  const auto row = static_cast<std::size_t>(len) * h;
  DeviceBuffer<T> y1(row);
  DeviceBuffer<unsigned char> ws1(
      std::max<std::size_t>(1, kernels::embedding_fwd_workspace_bytes(one, config)));
  for (std::int64_t b = 0; b < batch; ++b) {
    y1.fill_bytes(0xFF);
    kernels::launch_embedding_fwd<T>(y1.data(), tokens_d.data() + b * len, table.data(), nullptr, one, config,
                                     ws1.data(), ws1.size(), nullptr);
    SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<T> alone = y1.copy_to_host();
    for (std::size_t e = 0; e < row; ++e) {
      const T got = batched[static_cast<std::size_t>(b) * row + e];
      ASSERT_EQ(std::memcmp(&got, &alone[e], sizeof(T)), 0)
          << "B " << batch << " L " << len << " H " << hidden << " sentence " << b << " element " << e << ": "
          << to_float(got) << " batched, " << to_float(alone[e]) << " alone";
    }
  }
}

TEST(EmbeddingGpu, SinusoidTableIsBitwiseTheComputedPath) {
  SEQBENCH_REQUIRE_GPU();
  using kernels::PositionIndexing;
  expect_table_path_is_the_computed_one<float>(3, 17, 64, PositionIndexing::slot, 0);
  expect_table_path_is_the_computed_one<float>(2, 5, 33, PositionIndexing::nonpad_count, 1000);
  expect_table_path_is_the_computed_one<__half>(4, 9, 1000, PositionIndexing::slot, 7);
  expect_table_path_is_the_computed_one<__nv_bfloat16>(3, 31, 1024, PositionIndexing::nonpad_count, 2);
  expect_table_path_is_the_computed_one<__nv_bfloat16>(2, 3, 2, PositionIndexing::slot, (1 << 24) - 3);
}

TEST(EmbeddingGpu, EmptyBatchZeroesTheGradientTables) {
  SEQBENCH_REQUIRE_GPU();
  const EmbeddingShape shape{0, 6, 1023, 7, 9};
  EmbeddingConfig config;
  config.positions = kernels::PositionEncoding::learned;
  DeviceBuffer<__half> dt(7 * 1023), dp(9 * 1023);
  const OwnedStreamFork fork;
  for (int variant = 0; variant < 3; ++variant) {  // atomic, sorted, sorted with a fork
    dt.fill_bytes(0xFF);
    dp.fill_bytes(0xFF);
    if (variant == 0) {
      kernels::launch_embedding_bwd_atomic<__half>(dt.data(), dp.data(), nullptr, nullptr, shape, config,
                                                   nullptr, 0, nullptr);
    } else {
      kernels::launch_embedding_bwd_sorted<__half>(dt.data(), dp.data(), nullptr, nullptr, shape, config,
                                                   nullptr, 0, nullptr, variant == 2 ? &fork.get() : nullptr);
    }
    SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
    for (const auto v : dt.copy_to_host()) ASSERT_EQ(to_float(v), 0.0f) << variant;
    for (const auto v : dp.copy_to_host()) ASSERT_EQ(to_float(v), 0.0f) << variant;
  }
}

}  // namespace
}  // namespace seqbench
