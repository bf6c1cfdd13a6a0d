// `seqbench dump` for the layers suite, its host parts (CPU, no GPU touched): which experiments
// dump and with what manifest params (the parity instance: dropout 0, <= 1024 tokens, the
// experiment's dtype and f32), and each layer's array list (names, roles, dtypes, shapes) from
// layer_parity_layout, which the GPU dump fills in this order (suites/layers/dump.cu). The parity
// run itself (building the layers, copying their buffers) needs a GPU and has no CPU test.
#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "layers/decoder_layer.h"
#include "layers/encoder_layer.h"
#include "suites/experiment.h"
#include "suites/layers/layer_experiments.h"
#include "suites/suite_layers.h"
#include "suites_test_util.h"

namespace seqbench {
namespace {

using layer_experiments::layer_parity_layout;
using layer_experiments::layers_parity_batch;
using Shape = std::vector<std::int64_t>;

// name -> (role, manifest dtype, shape) of a layout.
struct Entry {
  std::string role, dtype;
  Shape shape;
};
std::map<std::string, Entry> by_name(const std::vector<DumpArray>& arrays) {
  std::map<std::string, Entry> out;
  for (const DumpArray& a : arrays) {
    EXPECT_TRUE(a.bytes.empty()) << a.name;
    EXPECT_TRUE(out.emplace(a.name, Entry{a.role, dump_dtype_name(a), a.shape}).second) << a.name << " twice";
  }
  return out;
}

nlohmann::json params_of(const std::string& layer, const std::string& direction, const std::string& dtype,
                         int L) {
  return {{"layer", layer}, {"direction", direction}, {"dtype", dtype}, {"seq_len", L}};
}

Shape dims(const layers::ParameterShape& s) {
  if (s.rows == 1) return {static_cast<std::int64_t>(s.cols)};
  return {static_cast<std::int64_t>(s.rows), static_cast<std::int64_t>(s.cols)};
}

TEST(LayersDump, ParityBatch) {
  EXPECT_EQ(layers_parity_batch(32), 32);
  EXPECT_EQ(layers_parity_batch(256), 4);
  EXPECT_EQ(layers_parity_batch(1000), 1);
  EXPECT_EQ(layers_parity_batch(4096), 1);  // one sentence, longer than 1024 tokens
}

TEST(LayersDump, EveryLayerExperimentDumpsTheManagedParityInstance) {
  for (const bool quick : {false, true}) {
    const SuiteSpec s = layers_suite(SuiteOptions{quick});
    std::size_t dumping = 0;
    for (const ExperimentSpec& e : s.experiments) {
      const std::string layer = e.params.value("layer", std::string());
      if (layer.empty()) {  // the GEMM-epilogue experiments have no torch equivalent
        EXPECT_TRUE(e.dump_variant.empty()) << e.name;
        continue;
      }
      ++dumping;
      EXPECT_EQ(e.dump_variant, "managed") << e.name;
      // The parity instance is dumped on its own: the timed experiment is not prepared for it.
      EXPECT_TRUE(static_cast<bool>(e.dump_standalone)) << e.name;
      const auto L = e.params.at("seq_len").get<std::int64_t>();
      const std::string dtype = e.params.at("dtype").get<std::string>();
      const nlohmann::json& d = e.dump_params;
      EXPECT_EQ(d.at("parity_dropout").get<double>(), 0.0) << e.name;
      EXPECT_EQ(d.at("parity_seq_len").get<std::int64_t>(), L) << e.name;
      EXPECT_EQ(d.at("parity_batch").get<std::int64_t>(), layers_parity_batch(L)) << e.name;
      EXPECT_EQ(d.at("parity_tokens").get<std::int64_t>(), layers_parity_batch(L) * L) << e.name;
      EXPECT_LE(d.at("parity_tokens").get<std::int64_t>(), 1024) << e.name;
      EXPECT_EQ(d.at("parity_dtypes"), nlohmann::json::array({dtype, "f32"})) << e.name;
      EXPECT_EQ(d.contains("parity_src_len"), layer == "decoder") << e.name;
      if (layer == "decoder") {
        EXPECT_EQ(d.at("parity_src_len").get<std::int64_t>(), L) << e.name;
      }
      // The manifest's params are the experiment's plus these; none of the experiment's is overwritten.
      for (const auto& [key, value] : d.items()) EXPECT_FALSE(e.params.contains(key)) << e.name << " " << key;
      // The layout exists for every dumping experiment, in both dtypes.
      const auto arrays = by_name(layer_parity_layout(e.params));
      EXPECT_TRUE(arrays.count(dtype + ".y") || arrays.count(dtype + ".loss")) << e.name;
      EXPECT_TRUE(arrays.count("f32.y") || arrays.count("f32.loss")) << e.name;
    }
    EXPECT_EQ(dumping, 4u * 2u * 2u * layers_suite_shapes(SuiteOptions{quick}).lengths.size());
  }
}

TEST(LayersDump, EncoderArrays) {
  const layers::LayerConfig c =
      layers_suite_config(layers_suite_shapes(SuiteOptions{}), DType::bf16, 1024, 256);
  const auto shapes = layers::encoder_layer_parameter_shapes(c);
  ASSERT_EQ(shapes.size(), 12u);
  for (const bool backward : {false, true}) {
    const auto a = by_name(layer_parity_layout(params_of("encoder", backward ? "bwd" : "fwd", "bf16", 256)));
    EXPECT_EQ(a.size(), 2u * (backward ? 2u + 12u + 2u + 12u : 1u + 12u + 1u));
    for (const char* d : {"bf16", "f32"}) {
      const std::string p = std::string(d) + ".";
      const Shape act = {4, 256, 1024};
      EXPECT_EQ(a.at(p + "x").shape, act);
      EXPECT_EQ(a.at(p + "x").role, "input");
      EXPECT_EQ(a.at(p + "x").dtype, d);
      EXPECT_EQ(a.at(p + "y").shape, act);
      EXPECT_EQ(a.at(p + "y").role, "output");
      for (const auto& s : shapes) {
        EXPECT_EQ(a.at(p + s.name).shape, dims(s)) << s.name;
        EXPECT_EQ(a.at(p + s.name).role, "input") << s.name;
        EXPECT_EQ(a.count(p + "d_" + s.name), backward ? 1u : 0u) << s.name;
        if (backward) {
          EXPECT_EQ(a.at(p + "d_" + s.name).shape, dims(s)) << s.name;
        }
      }
      EXPECT_EQ(a.at(p + "qkv_weight").shape, (Shape{3072, 1024}));
      EXPECT_EQ(a.at(p + "qkv_bias").shape, (Shape{3072}));
      EXPECT_EQ(a.at(p + "fc1_weight").shape, (Shape{4096, 1024}));
      EXPECT_EQ(a.count(p + "dy"), backward ? 1u : 0u);
      EXPECT_EQ(a.count(p + "dx"), backward ? 1u : 0u);
      if (backward) {
        EXPECT_EQ(a.at(p + "dx").role, "output");
      }
    }
  }
  // Inputs come first, then outputs (the order the GPU dump fills and writes them in).
  const auto list = layer_parity_layout(params_of("encoder", "bwd", "f16", 64));
  EXPECT_EQ(list.front().name, "f16.x");
  EXPECT_EQ(list.back().name, "f32.d_fc2_bias");
  EXPECT_EQ(list.front().shape, (Shape{16, 64, 1024}));
}

TEST(LayersDump, DecoderArrays) {
  const layers::LayerConfig c =
      layers_suite_config(layers_suite_shapes(SuiteOptions{}), DType::f16, 1024, 128);
  const auto shapes = layers::decoder_layer_parameter_shapes(c);
  ASSERT_EQ(shapes.size(), 20u);
  const auto fwd = by_name(layer_parity_layout(params_of("decoder", "fwd", "f16", 128)));
  EXPECT_EQ(fwd.size(), 2u * (2u + 20u + 1u));
  const auto a = by_name(layer_parity_layout(params_of("decoder", "bwd", "f16", 128)));
  EXPECT_EQ(a.size(), 2u * (3u + 20u + 3u + 20u));
  for (const char* d : {"f16", "f32"}) {
    const std::string p = std::string(d) + ".";
    EXPECT_EQ(a.at(p + "encoder_out").shape, (Shape{8, 128, 1024}));  // S = L
    EXPECT_EQ(a.at(p + "d_encoder_out").role, "output");
    EXPECT_EQ(a.at(p + "cross_kv_weight").shape, (Shape{2048, 1024}));
    EXPECT_EQ(a.at(p + "d_cross_kv_bias").shape, (Shape{2048}));
    for (const auto& s : shapes) EXPECT_EQ(a.at(p + "d_" + s.name).shape, dims(s)) << s.name;
  }
}

TEST(LayersDump, EmbeddingArrays) {
  const auto fwd = by_name(layer_parity_layout(params_of("embedding", "fwd", "bf16", 32)));
  EXPECT_EQ(fwd.size(), 2u * 3u);
  const auto a = by_name(layer_parity_layout(params_of("embedding", "bwd", "bf16", 32)));
  EXPECT_EQ(a.size(), 2u * 5u);
  EXPECT_EQ(a.at("bf16.tokens").dtype, "i32");
  EXPECT_EQ(a.at("bf16.tokens").shape, (Shape{32, 32}));
  EXPECT_EQ(a.at("f32.tokens").dtype, "i32");
  EXPECT_EQ(a.at("bf16.token_table").shape, (Shape{32000, 1024}));
  EXPECT_EQ(a.at("bf16.dy").shape, (Shape{32, 32, 1024}));
  EXPECT_EQ(a.at("f32.y").dtype, "f32");
  EXPECT_EQ(a.at("f32.d_token_table").role, "output");
  EXPECT_EQ(a.at("f32.d_token_table").shape, (Shape{32000, 1024}));
}

TEST(LayersDump, CriterionArrays) {
  const auto fwd = by_name(layer_parity_layout(params_of("criterion", "fwd", "f16", 128)));
  EXPECT_EQ(fwd.size(), 2u * 8u);
  const auto a = by_name(layer_parity_layout(params_of("criterion", "bwd", "f16", 128)));
  EXPECT_EQ(a.size(), 2u * 9u);
  EXPECT_EQ(a.at("f16.logits").shape, (Shape{1024, 32000}));
  EXPECT_EQ(a.at("f16.logits").dtype, "f16");
  EXPECT_EQ(a.at("f16.targets").dtype, "i32");
  for (const char* name : {"loss", "nll", "lse"}) {
    EXPECT_EQ(a.at(std::string("f16.") + name).dtype, "f32") << name;  // fp32 whatever the logits
    EXPECT_EQ(a.at(std::string("f16.") + name).shape, (Shape{1024})) << name;
  }
  EXPECT_EQ(a.at("f16.loss_sum").shape, (Shape{1}));
  EXPECT_EQ(a.at("f16.counted_tokens").dtype, "i32");
  EXPECT_EQ(a.at("f16.dlogits").dtype, "f16");
  EXPECT_EQ(a.at("f32.dlogits").dtype, "f32");
  EXPECT_EQ(fwd.count("f16.dlogits"), 0u);
}

TEST(LayersDump, Errors) {
  EXPECT_EQ(testing::error_message([] { layer_parity_layout(params_of("gemm", "fwd", "f16", 8)); }),
            "layers dump: params.layer 'gemm' is not one of encoder, decoder, embedding, criterion");
  EXPECT_EQ(testing::error_message([] { layer_parity_layout(params_of("encoder", "up", "f16", 8)); }),
            "layers dump: params.direction 'up' is not fwd or bwd");
  EXPECT_EQ(testing::error_message([] { layers_parity_batch(0); }),
            "layers_parity_batch: seq_len 0 is not positive");
}

}  // namespace
}  // namespace seqbench
