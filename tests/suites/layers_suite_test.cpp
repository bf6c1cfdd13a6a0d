// The layers suite's description (CPU, no GPU touched): the experiment names and params, the
// baseline, the GEMM FLOP formulas, the Fig. 20 loop's shapes, the suite's place in all_suites.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <set>
#include <string>

#include "suites/experiment.h"
#include "suites/suite_layers.h"

namespace seqbench {
namespace {

bool is_encoder(const ExperimentSpec& e) {
  return e.name.rfind("encoder_", 0) == 0;
}

TEST(LayersSuite, NamesParamsAndVariants) {
  for (const bool quick : {false, true}) {
    const SuiteSpec s = layers_suite(SuiteOptions{quick});
    EXPECT_EQ(s.name, "layers");
    EXPECT_TRUE(s.needs_gpu);
    EXPECT_TRUE(static_cast<bool>(s.gpu_checks));
    const std::vector<int> lengths = layers_suite_lengths(quick);
    const int tokens = layers_suite_tokens(quick);
    EXPECT_EQ(tokens, quick ? 4096 : 8192);
    // Other layers' experiments (decoder, GEMM epilogues, ...) have their own tests: the counts and
    // the baseline/managed pair below are the encoder's.
    std::set<std::string> names, encoder;
    for (const ExperimentSpec& e : s.experiments) {
      EXPECT_TRUE(names.insert(e.name).second) << e.name;
      if (is_encoder(e)) encoder.insert(e.name);
    }
    ASSERT_EQ(encoder.size(), 2u * 2u * lengths.size());
    for (const char* dtype : {"f16", "bf16"})
      for (const char* dir : {"fwd", "bwd"})
        for (const int L : lengths) {
          const int B = tokens / L;
          const std::string name = std::string("encoder_") + dir + "/" + dtype + "/B=" + std::to_string(B) +
                                   ",L=" + std::to_string(L);
          ASSERT_EQ(encoder.count(name), 1u) << name;
        }
    for (const ExperimentSpec& e : s.experiments) {
      if (!is_encoder(e)) continue;
      EXPECT_EQ(e.baseline, "baseline") << e.name;
      ASSERT_EQ(e.variants.size(), 2u);
      EXPECT_EQ(e.variants[0].name, "baseline");
      EXPECT_EQ(e.variants[1].name, "managed");
      EXPECT_EQ(e.params.at("hidden").get<int>(), 1024);
      EXPECT_EQ(e.params.at("ffn").get<int>(), 4096);
      EXPECT_EQ(e.params.at("heads").get<int>(), 16);
      EXPECT_EQ(e.params.at("model").get<std::string>(), "transformer-big");
      EXPECT_EQ(e.params.at("tokens").get<int>(), tokens);
      EXPECT_EQ(e.params.at("batch").get<int>() * e.params.at("seq_len").get<int>(), tokens);
      EXPECT_EQ(e.params.at("max_seq_len").get<int>(), lengths.back());
      EXPECT_TRUE(e.prepare) << e.name;
      for (const VariantSpec& v : e.variants) {
        EXPECT_EQ(v.bytes, 0.0);
        EXPECT_EQ(v.flops, e.params.at("gemm_flops").get<double>());
      }
    }
  }
}

// 2·T·H·(4H + 2·ffn) + 4·B·L²·H forward, twice that backward, by hand for B = 64, L = 128.
TEST(LayersSuite, GemmFlops) {
  const layers::LayerConfig c = layers_suite_config(DType::f16, 8192, 256);
  const double T = 8192, H = 1024, F = 4096;
  const double fwd = 2 * T * H * (4 * H + 2 * F) + 4 * 64.0 * 128 * 128 * H;
  EXPECT_DOUBLE_EQ(encoder_layer_gemm_flops(c, 64, 128, false), fwd);
  EXPECT_DOUBLE_EQ(encoder_layer_gemm_flops(c, 64, 128, true), 2 * fwd);
  // 206158430208 + 4294967296 = 210453397504 (≈ 0.21 TFLOP a forward).
  EXPECT_DOUBLE_EQ(fwd, 210453397504.0);
  const SuiteSpec s = layers_suite(SuiteOptions{false});
  for (const ExperimentSpec& e : s.experiments) {
    if (!is_encoder(e)) continue;
    const bool bwd = e.params.at("direction").get<std::string>() == "bwd";
    EXPECT_DOUBLE_EQ(e.variants[0].flops,
                     encoder_layer_gemm_flops(c, e.params.at("batch").get<std::int64_t>(),
                                              e.params.at("seq_len").get<std::int64_t>(), bwd))
        << e.name;
  }
}

TEST(LayersSuite, ConfigIsTransformerBig) {
  const layers::LayerConfig c = layers_suite_config(DType::bf16, 4096, 128);
  EXPECT_EQ(c.hidden, 1024);
  EXPECT_EQ(c.ffn, 4096);
  EXPECT_EQ(c.heads, 16);
  EXPECT_TRUE(c.pre_layer_norm);
  EXPECT_EQ(c.max_batch_tokens, 4096);
  EXPECT_EQ(c.max_seq_len, 128);
  EXPECT_EQ(c.dtype, DType::bf16);
}

TEST(LayersSuite, MemoryLoopShapesAreDeterministicAndInRange) {
  const auto a = memory_loop_shapes(7, kMemorySteps, 8192, 256);
  const auto b = memory_loop_shapes(7, kMemorySteps, 8192, 256);
  const auto other = memory_loop_shapes(8, kMemorySteps, 8192, 256);
  ASSERT_EQ(a.size(), static_cast<std::size_t>(kMemorySteps));
  EXPECT_EQ(a, b);
  EXPECT_NE(a, other);
  EXPECT_EQ(a[0].second, 256);  // the first step is the largest shape
  std::set<std::int64_t> distinct;
  for (const auto& [batch, len] : a) {
    EXPECT_GE(len, 8);
    EXPECT_LE(len, 256);
    EXPECT_EQ(batch, 8192 / len);
    EXPECT_LE(batch * len, 8192);
    distinct.insert(len);
  }
  EXPECT_GT(distinct.size(), 4u);  // variable lengths
  EXPECT_THROW(memory_loop_shapes(1, 0, 8192, 256), std::exception);
}

TEST(LayersSuite, RegisteredAfterTrainer) {
  const std::vector<SuiteSpec> all = all_suites(SuiteOptions{true});
  std::vector<std::string> names;
  for (const SuiteSpec& s : all) names.push_back(s.name);
  const auto trainer = std::find(names.begin(), names.end(), "trainer");
  ASSERT_NE(trainer, names.end());
  ASSERT_NE(trainer + 1, names.end());
  EXPECT_EQ(*(trainer + 1), "layers");
}

}  // namespace
}  // namespace seqbench
