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
    std::set<std::string> names;
    for (const ExperimentSpec& e : s.experiments) EXPECT_TRUE(names.insert(e.name).second) << e.name;
    // Each of the encoder and decoder layers: exactly its fwd/bwd × dtype × length set by name
    // (other layers' experiments may sit beside them).
    for (const std::string layer : {"encoder", "decoder"}) {
      std::set<std::string> want;
      for (const char* dtype : {"f16", "bf16"})
        for (const char* dir : {"fwd", "bwd"})
          for (const int L : lengths)
            want.insert(layer + "_" + dir + "/" + dtype + "/B=" + std::to_string(tokens / L) +
                        ",L=" + std::to_string(L));
      std::set<std::string> have;
      for (const std::string& n : names)
        if (n.rfind(layer + "_", 0) == 0) have.insert(n);
      EXPECT_EQ(have, want) << layer;
    }
    for (const ExperimentSpec& e : s.experiments) {
      const std::string layer = e.params.value("layer", std::string());
      if (layer != "encoder" && layer != "decoder") continue;
      EXPECT_EQ(e.name.rfind(layer + "_", 0), 0u) << e.name;
      if (layer == "decoder") {
        EXPECT_EQ(e.params.at("src_len").get<int>(), e.params.at("seq_len").get<int>()) << e.name;
        // The suite's layer config (transformer-big's preset), as the encoder's.
        const layers::LayerConfig c = layers_suite_config(DType::f16, tokens, lengths.back());
        EXPECT_EQ(e.params.at("pre_layer_norm").get<bool>(), c.pre_layer_norm) << e.name;
        EXPECT_EQ(e.params.at("activation").get<std::string>(), layers::activation_name(c.activation))
            << e.name;
        EXPECT_EQ(e.params.at("attn_dropout").get<double>(), c.attn_dropout) << e.name;
        EXPECT_EQ(e.params.at("activation_dropout").get<double>(), c.activation_dropout) << e.name;
        EXPECT_EQ(e.params.at("hidden_dropout").get<double>(), c.hidden_dropout) << e.name;
        EXPECT_EQ(e.params.at("max_batch_tokens").get<int>(), tokens) << e.name;
      }
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

// 2·T·H·4H + 2·T·H·2H + 2·B·S·H·2H + 2·T·H·2·ffn + 4·B·L²·H + 4·B·L·S·H forward, twice that
// backward, by hand for B = 64, L = S = 128 and for S != L.
TEST(LayersSuite, DecoderGemmFlops) {
  const layers::LayerConfig c = layers_suite_config(DType::f16, 8192, 256);
  const double B = 64, L = 128, S = 128, T = B * L, H = 1024, F = 4096;
  const double fwd = 2 * T * H * 4 * H + 2 * T * H * 2 * H + 2 * B * S * H * 2 * H + 2 * T * H * 2 * F +
                     4 * B * L * L * H + 4 * B * L * S * H;
  EXPECT_DOUBLE_EQ(decoder_layer_gemm_flops(c, 64, 128, 128, false), fwd);
  EXPECT_DOUBLE_EQ(decoder_layer_gemm_flops(c, 64, 128, 128, true), 2 * fwd);
  // 68719476736 + 2·34359738368 + 137438953472 + 2·4294967296 (≈ 0.28 TFLOP a forward).
  EXPECT_DOUBLE_EQ(fwd, 283467841536.0);
  // B = 2, L = 3, S = 5: the K/V projection and the cross scores follow S, the rest T = 6.
  EXPECT_DOUBLE_EQ(decoder_layer_gemm_flops(c, 2, 3, 5, false), 218300416.0);
  EXPECT_DOUBLE_EQ(decoder_layer_gemm_flops(c, 2, 3, 5, true), 2 * 218300416.0);
  const SuiteSpec s = layers_suite(SuiteOptions{false});
  int decoders = 0;
  for (const ExperimentSpec& e : s.experiments) {
    if (e.params.value("layer", std::string()) != "decoder") continue;
    ++decoders;
    const bool bwd = e.params.at("direction").get<std::string>() == "bwd";
    const double want = decoder_layer_gemm_flops(c, e.params.at("batch").get<std::int64_t>(),
                                                 e.params.at("seq_len").get<std::int64_t>(),
                                                 e.params.at("src_len").get<std::int64_t>(), bwd);
    EXPECT_DOUBLE_EQ(e.params.at("gemm_flops").get<double>(), want) << e.name;
    for (const VariantSpec& v : e.variants) EXPECT_DOUBLE_EQ(v.flops, want) << e.name;
  }
  EXPECT_EQ(decoders, 16);
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
