// The layers suite's description (CPU, no GPU touched): the experiment names and params, the
// baseline, the GEMM FLOP formulas, the Fig. 20 loop's shapes, the suite's place in all_suites;
// the embedding and criterion experiments' params, minimal bytes and deterministic inputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "suites/experiment.h"
#include "suites/layers/layer_experiments.h"
#include "suites/suite_layers.h"

namespace seqbench {
namespace {

// The suite's experiments of one layer (params.layer), in suite order.
std::vector<const ExperimentSpec*> of_layer(const SuiteSpec& s, const std::string& layer) {
  std::vector<const ExperimentSpec*> out;
  for (const ExperimentSpec& e : s.experiments)
    if (e.params.value("layer", std::string()) == layer) out.push_back(&e);
  return out;
}

// Every <layer>_<dir>/<dtype>/B=<b>,L=<l> name once, and nothing else of that layer.
void expect_layer_names_at(const SuiteSpec& s, const std::string& layer, const LayersSuiteShapes& shapes) {
  const std::vector<int> lengths = shapes.lengths;
  const int tokens = shapes.tokens;
  std::set<std::string> names;
  for (const ExperimentSpec* e : of_layer(s, layer)) EXPECT_TRUE(names.insert(e->name).second) << e->name;
  EXPECT_EQ(names.size(), 2u * 2u * lengths.size()) << layer;
  for (const char* dtype : {"f16", "bf16"})
    for (const char* dir : {"fwd", "bwd"})
      for (const int L : lengths) {
        const std::string name =
            layer + "_" + dir + "/" + dtype + "/B=" + std::to_string(tokens / L) + ",L=" + std::to_string(L);
        EXPECT_EQ(names.count(name), 1u) << name;
      }
}

void expect_layer_names(const SuiteSpec& s, const std::string& layer, bool quick) {
  expect_layer_names_at(s, layer, layers_suite_shapes(SuiteOptions{quick}));
}

TEST(LayersSuite, NamesParamsAndVariants) {
  for (const bool quick : {false, true}) {
    const SuiteSpec s = layers_suite(SuiteOptions{quick});
    EXPECT_EQ(s.name, "layers");
    EXPECT_TRUE(s.needs_gpu);
    EXPECT_TRUE(static_cast<bool>(s.gpu_checks));
    const std::vector<int> lengths = layers_suite_shapes(SuiteOptions{quick}).lengths;
    const int tokens = layers_suite_shapes(SuiteOptions{quick}).tokens;
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
        const layers::LayerConfig c =
            layers_suite_config(layers_suite_shapes(SuiteOptions{}), DType::f16, tokens, lengths.back());
        EXPECT_EQ(e.params.at("pre_layer_norm").get<bool>(), c.pre_layer_norm) << e.name;
        EXPECT_EQ(e.params.at("activation").get<std::string>(), layers::activation_name(c.activation))
            << e.name;
        EXPECT_EQ(e.params.at("attn_dropout").get<double>(), c.attn_dropout) << e.name;
        EXPECT_EQ(e.params.at("activation_dropout").get<double>(), c.activation_dropout) << e.name;
        EXPECT_EQ(e.params.at("hidden_dropout").get<double>(), c.hidden_dropout) << e.name;
        EXPECT_EQ(e.params.at("max_batch_tokens").get<int>(), tokens) << e.name;
      }
      EXPECT_EQ(e.baseline, "baseline") << e.name;
      // Backward experiments also time the managed layer that keeps what the default recomputes.
      const bool backward = e.params.at("direction").get<std::string>() == "bwd";
      ASSERT_EQ(e.variants.size(), backward ? 3u : 2u) << e.name;
      EXPECT_EQ(e.variants[0].name, "baseline");
      EXPECT_EQ(e.variants[1].name, "managed");
      if (backward) {
        EXPECT_EQ(e.variants[2].name, "managed_keep");
      }
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
  const layers::LayerConfig c =
      layers_suite_config(layers_suite_shapes(SuiteOptions{}), DType::f16, 8192, 256);
  const double T = 8192, H = 1024, F = 4096;
  const double fwd = 2 * T * H * (4 * H + 2 * F) + 4 * 64.0 * 128 * 128 * H;
  EXPECT_DOUBLE_EQ(encoder_layer_gemm_flops(c, 64, 128, false), fwd);
  EXPECT_DOUBLE_EQ(encoder_layer_gemm_flops(c, 64, 128, true), 2 * fwd);
  // 206158430208 + 4294967296 = 210453397504 (≈ 0.21 TFLOP a forward).
  EXPECT_DOUBLE_EQ(fwd, 210453397504.0);
  const SuiteSpec s = layers_suite(SuiteOptions{false});
  for (const ExperimentSpec* ep : of_layer(s, "encoder")) {
    const ExperimentSpec& e = *ep;
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
  const layers::LayerConfig c =
      layers_suite_config(layers_suite_shapes(SuiteOptions{}), DType::f16, 8192, 256);
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
  const layers::LayerConfig c =
      layers_suite_config(layers_suite_shapes(SuiteOptions{}), DType::bf16, 4096, 128);
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

// Fig. 20's check names (computable without a GPU): the encoder's as before the decoder's were
// added, the decoder's under layers/memory/decoder/, the encoder stack's under
// layers/memory/encoder_stack/, both dtypes, both checks, all distinct.
TEST(LayersSuite, MemoryCheckNamesForEveryLoop) {
  using layer_experiments::memory_check_names;
  using layer_experiments::memory_check_prefix;
  EXPECT_EQ(layer_experiments::memory_loop_layers(),
            (std::vector<std::string>{"encoder", "decoder", "encoder_stack"}));
  EXPECT_EQ(memory_check_prefix("encoder", DType::f16), "layers/memory/f16/");
  EXPECT_EQ(memory_check_prefix("decoder", DType::bf16), "layers/memory/decoder/bf16/");
  const std::vector<std::string> want = {"layers/memory/f16/peak_ratio",
                                         "layers/memory/f16/steady_state_allocations",
                                         "layers/memory/bf16/peak_ratio",
                                         "layers/memory/bf16/steady_state_allocations",
                                         "layers/memory/decoder/f16/peak_ratio",
                                         "layers/memory/decoder/f16/steady_state_allocations",
                                         "layers/memory/decoder/bf16/peak_ratio",
                                         "layers/memory/decoder/bf16/steady_state_allocations",
                                         "layers/memory/encoder_stack/f16/peak_ratio",
                                         "layers/memory/encoder_stack/f16/steady_state_allocations",
                                         "layers/memory/encoder_stack/bf16/peak_ratio",
                                         "layers/memory/encoder_stack/bf16/steady_state_allocations"};
  EXPECT_EQ(memory_check_names(), want);
  EXPECT_EQ(std::set<std::string>(want.begin(), want.end()).size(), want.size());
}

// The checks built from a loop's measurements: names from memory_check_prefix, the 0.7 target on
// managed / baseline peak allocated, zero steady-state allocations, the numbers in the details.
TEST(LayersSuite, MemoryLoopChecksFromStats) {
  using layer_experiments::LoopStats;
  using layer_experiments::memory_loop_checks;
  const auto shapes = memory_loop_shapes(3, kMemoryStepsQuick, 4096, 128);
  const std::size_t MiB = std::size_t{1} << 20;
  LoopStats eager;
  eager.peak_bytes = 1000 * MiB;
  eager.peak_reserved_bytes = 1200 * MiB;
  eager.setup_allocations = 1;
  eager.loop_allocations = 40;
  eager.late_allocations = 3;
  eager.late_device_bytes = 3 * static_cast<std::int64_t>(MiB);
  for (const std::string layer : {"encoder", "decoder"})
    for (const DType dtype : {DType::f16, DType::bf16}) {
      LoopStats managed;
      managed.peak_bytes = 700 * MiB;  // exactly at the target: passes
      managed.peak_reserved_bytes = managed.peak_bytes;
      managed.setup_allocations = 1;
      std::vector<CheckResult> r =
          memory_loop_checks("transformer-big", layer, dtype, 3, 4096, 128, shapes, managed, eager);
      ASSERT_EQ(r.size(), 2u);
      const std::string prefix = layer_experiments::memory_check_prefix(layer, dtype);
      EXPECT_EQ(r[0].name, prefix + "peak_ratio");
      EXPECT_EQ(r[1].name, prefix + "steady_state_allocations");
      EXPECT_TRUE(r[0].passed) << r[0].detail;
      EXPECT_DOUBLE_EQ(r[0].max_rel_err, 0.7);
      EXPECT_EQ(r[0].tolerance, kMemoryRatioTarget);
      EXPECT_TRUE(r[1].passed) << r[1].detail;
      EXPECT_NE(r[0].detail.find("transformer-big " + layer + " layer"), std::string::npos) << r[0].detail;
      EXPECT_NE(r[0].detail.find("700.0 MiB"), std::string::npos) << r[0].detail;
      EXPECT_NE(r[0].detail.find("1200.0 MiB"), std::string::npos) << r[0].detail;
      EXPECT_NE(r[1].detail.find(std::to_string(shapes[0].first) + "x" + std::to_string(shapes[0].second)),
                std::string::npos)
          << r[1].detail;
      EXPECT_EQ(r[0].detail.find("Recompute::none"), std::string::npos) << r[0].detail;
      // Device memory taken in the loop's second half (cudaMemGetInfo) is reported, not checked.
      EXPECT_NE(r[1].detail.find("not checked): managed 0.0 MiB, baseline 3.0 MiB"), std::string::npos)
          << r[1].detail;
      const std::vector<std::pair<std::string, double>> device_bytes = {
          {"managed_late_device_bytes", 0.0}, {"baseline_late_device_bytes", 3.0 * static_cast<double>(MiB)}};
      EXPECT_EQ(r[1].values, device_bytes);
      LoopStats returned = managed;  // memory given back in the second half: a negative amount
      returned.late_device_bytes = -2 * static_cast<std::int64_t>(MiB);
      EXPECT_NE(memory_loop_checks("transformer-big", layer, dtype, 3, 4096, 128, shapes, returned, eager)[1]
                    .detail.find("managed -2.0 MiB"),
                std::string::npos);
      // The keep-everything managed layer's peak is reported, not checked.
      LoopStats kept = managed;
      kept.peak_bytes = 900 * MiB;
      const std::vector<CheckResult> with_kept =
          memory_loop_checks("transformer-big", layer, dtype, 3, 4096, 128, shapes, managed, eager, &kept);
      EXPECT_TRUE(with_kept[0].passed) << with_kept[0].detail;
      EXPECT_NE(with_kept[0].detail.find("Recompute::none"), std::string::npos) << with_kept[0].detail;
      EXPECT_NE(with_kept[0].detail.find("peak 900.0 MiB, ratio 0.9"), std::string::npos)
          << with_kept[0].detail;

      managed.peak_bytes = 701 * MiB;  // above the target
      managed.loop_allocations = 1;    // one allocation in the loop
      r = memory_loop_checks("transformer-big", layer, dtype, 3, 4096, 128, shapes, managed, eager);
      EXPECT_FALSE(r[0].passed);
      EXPECT_FALSE(r[1].passed);
      EXPECT_EQ(r[1].max_abs_err, 1.0);

      LoopStats empty;  // a baseline that allocated nothing cannot pass the ratio
      r = memory_loop_checks("transformer-big", layer, dtype, 3, 4096, 128, shapes, LoopStats{}, empty);
      EXPECT_FALSE(r[0].passed);
      EXPECT_TRUE(r[1].passed);
    }
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

// The params every layer experiment carries (suites/layers/README.md), the variants, and the inputs'
// sentence lengths, which must agree with the counts the bytes are computed from.
void expect_common(const ExperimentSpec& e, const std::string& layer, bool quick) {
  const int tokens = layers_suite_shapes(SuiteOptions{quick}).tokens;
  EXPECT_EQ(e.params.at("layer").get<std::string>(), layer) << e.name;
  const std::string dir = e.params.at("direction").get<std::string>();
  EXPECT_TRUE(dir == "fwd" || dir == "bwd") << e.name;
  const std::string dtype = e.params.at("dtype").get<std::string>();
  EXPECT_TRUE(dtype == "f16" || dtype == "bf16") << e.name;
  const auto B = e.params.at("batch").get<std::int64_t>(), L = e.params.at("seq_len").get<std::int64_t>();
  EXPECT_EQ(e.params.at("tokens").get<std::int64_t>(), B * L);
  EXPECT_EQ(B * L, tokens);
  EXPECT_EQ(e.name, layer + "_" + dir + "/" + dtype + "/B=" + std::to_string(B) + ",L=" + std::to_string(L));
  EXPECT_EQ(e.params.at("vocab").get<int>(), 32000);
  EXPECT_EQ(e.params.at("padding_idx").get<int>(), 1);
  EXPECT_EQ(e.baseline, "baseline");
  ASSERT_EQ(e.variants.size(), 2u);
  EXPECT_EQ(e.variants[0].name, "baseline");
  EXPECT_EQ(e.variants[1].name, "managed");
  EXPECT_TRUE(e.prepare) << e.name;
  for (const VariantSpec& v : e.variants) {
    EXPECT_EQ(v.flops, 0.0) << e.name;  // memory-bound: GB/s is the figure of merit
    EXPECT_GT(v.bytes, 0.0) << e.name;
    EXPECT_EQ(v.bytes, e.variants[0].bytes) << e.name;  // the operation's minimal bytes, not the variant's
  }
  const auto lengths = e.inputs.at("sentence_lengths").get<std::vector<std::int64_t>>();
  ASSERT_EQ(lengths.size(), static_cast<std::size_t>(B));
  for (const std::int64_t k : lengths) {
    EXPECT_GE(k, 1);
    EXPECT_LE(k, L);
  }
  const double kept = static_cast<double>(std::accumulate(lengths.begin(), lengths.end(), std::int64_t{0}));
  const double pad = e.params.at("pad_fraction").get<double>();
  EXPECT_NEAR(pad, 1.0 - kept / static_cast<double>(B * L), 1e-6) << e.name;
  // About 0.1 of the batch (the mean of uniform [0, 0.2·L] pads; 32+ sentences per batch).
  EXPECT_GT(pad, 0.05) << e.name;
  EXPECT_LT(pad, 0.15) << e.name;
}

TEST(LayersSuite, EmbeddingExperiments) {
  for (const bool quick : {false, true}) {
    const SuiteSpec s = layers_suite(SuiteOptions{quick});
    expect_layer_names(s, "embedding", quick);
    for (const ExperimentSpec* ep : of_layer(s, "embedding")) {
      const ExperimentSpec& e = *ep;
      expect_common(e, "embedding", quick);
      const nlohmann::json& p = e.params;
      EXPECT_EQ(p.at("hidden").get<int>(), 1024);
      EXPECT_EQ(p.at("positions").get<std::string>(), "sinusoidal");
      EXPECT_EQ(p.at("indexing").get<std::string>(), "nonpad_count");
      EXPECT_EQ(p.at("position_offset").get<int>(), 2);
      EXPECT_DOUBLE_EQ(p.at("scale").get<double>(), 32.0);
      EXPECT_DOUBLE_EQ(
          p.at("dropout").get<double>(),
          layers_suite_config(layers_suite_shapes(SuiteOptions{}), DType::f16, 4096, 128).hidden_dropout);
      EXPECT_TRUE(p.at("deterministic_backward").get<bool>());
      EXPECT_EQ(p.at("max_seq_len").get<int>(), layers_suite_shapes(SuiteOptions{quick}).lengths.back());
      // Minimal bytes, by hand (suites/layers/embedding.cu): N = tokens, C non-padding, D distinct.
      const double n = p.at("tokens").get<double>(), H = 1024, V = 32000;
      const double C = p.at("nonpad_tokens").get<double>(), D = p.at("distinct_token_rows").get<double>();
      const auto lengths = e.inputs.at("sentence_lengths").get<std::vector<std::int64_t>>();
      EXPECT_EQ(C, static_cast<double>(std::accumulate(lengths.begin(), lengths.end(), std::int64_t{0})));
      EXPECT_LE(D, C);
      EXPECT_GT(D, 0.5 * C);  // uniform over 32000 ids: few repeats at 4096-8192 tokens
      const double sz = 2;    // f16 and bf16
      if (p.at("direction").get<std::string>() == "fwd") {
        EXPECT_DOUBLE_EQ(e.variants[0].bytes, 4 * n + D * H * sz + n * H * sz) << e.name;
        EXPECT_DOUBLE_EQ(p.at("zero_fill_bytes").get<double>(), 0.0);
      } else {
        EXPECT_DOUBLE_EQ(e.variants[0].bytes, 4 * n + C * H * sz + V * H * sz) << e.name;
        EXPECT_DOUBLE_EQ(p.at("zero_fill_bytes").get<double>(), (V - D) * H * sz);
      }
    }
  }
}

TEST(LayersSuite, CriterionExperiments) {
  for (const bool quick : {false, true}) {
    const SuiteSpec s = layers_suite(SuiteOptions{quick});
    expect_layer_names(s, "criterion", quick);
    for (const ExperimentSpec* ep : of_layer(s, "criterion")) {
      const ExperimentSpec& e = *ep;
      expect_common(e, "criterion", quick);
      const nlohmann::json& p = e.params;
      EXPECT_DOUBLE_EQ(p.at("epsilon").get<double>(), 0.1);
      EXPECT_EQ(p.at("convention").get<std::string>(), "fairseq");
      EXPECT_DOUBLE_EQ(p.at("grad_loss_sum").get<double>(), 1.0);
      // Minimal bytes, by hand (suites/layers/criterion.cu): N rows, C counted, V = 32000, T 2 bytes.
      const double n = p.at("tokens").get<double>(), V = 32000, C = p.at("counted_tokens").get<double>();
      const auto lengths = e.inputs.at("sentence_lengths").get<std::vector<std::int64_t>>();
      EXPECT_EQ(C, static_cast<double>(std::accumulate(lengths.begin(), lengths.end(), std::int64_t{0})));
      if (p.at("direction").get<std::string>() == "fwd") {
        EXPECT_DOUBLE_EQ(e.variants[0].bytes, C * V * 2 + 4 * n + 8 * n + 16) << e.name;
      } else {
        EXPECT_DOUBLE_EQ(e.variants[0].bytes, C * V * 2 + 4 * n + 4 * C + n * V * 2) << e.name;
      }
    }
  }
}

// The shared inputs: deterministic, ids in [2, vocab), padding exactly at the sentence tails.
TEST(LayersSuite, TokensArePaddedAtSentenceTails) {
  using namespace layer_experiments;
  const auto lengths = layers_suite_sentence_lengths(64, 128, 5);
  EXPECT_EQ(lengths, layers_suite_sentence_lengths(64, 128, 5));
  EXPECT_NE(lengths, layers_suite_sentence_lengths(64, 128, 6));
  for (const std::int64_t k : lengths) {
    EXPECT_GE(k, 128 - 25);  // at most floor(0.2·128) = 25 pads
    EXPECT_LE(k, 128);
  }
  EXPECT_EQ(layers_suite_sentence_lengths(3, 1, 5), (std::vector<std::int64_t>{1, 1, 1}));  // >= 1 kept
  const auto tokens = layers_suite_tokens_with_padding(lengths, 128, kLayersSuiteVocab, 9);
  EXPECT_EQ(tokens, layers_suite_tokens_with_padding(lengths, 128, kLayersSuiteVocab, 9));
  ASSERT_EQ(tokens.size(), 64u * 128u);
  for (std::size_t b = 0; b < 64; ++b)
    for (std::int64_t l = 0; l < 128; ++l) {
      const std::int32_t t = tokens[b * 128 + static_cast<std::size_t>(l)];
      if (l < lengths[b]) {
        EXPECT_GE(t, 2);
        EXPECT_LT(t, kLayersSuiteVocab);
      } else {
        EXPECT_EQ(t, kLayersSuitePaddingIdx);
      }
    }
  const layers::EmbeddingLayerConfig ec =
      layers_suite_embedding_config(layers_suite_shapes(SuiteOptions{}), DType::f16, 8192, 256);
  EXPECT_EQ(ec.position_offset, ec.padding_idx + 1);
  EXPECT_DOUBLE_EQ(ec.effective_scale(), 32.0);
  const layers::CriterionLayerConfig cc = layers_suite_criterion_config(DType::bf16, 8192);
  EXPECT_EQ(cc.padding_idx, std::optional<std::int32_t>(1));
}

// SuiteOptions::tiny (tests/simt's QuickSuitesGpu): every experiment of the full suite's kinds, at
// the small layer of suites/suite_layers.h, with no dumps (their parity instances are
// transformer-big's) and the memory checks still there.
TEST(LayersSuite, TinyShapesKeepEveryExperimentKindAtTheSmallLayer) {
  const LayersSuiteShapes sh = layers_suite_shapes(SuiteOptions{.quick = true, .tiny = true});
  EXPECT_EQ(sh.model, "tiny");
  EXPECT_EQ(sh.tokens, 96);
  EXPECT_EQ(sh.lengths, (std::vector<int>{13, 24}));
  EXPECT_EQ(sh.memory_steps, kMemoryStepsTiny);
  EXPECT_FALSE(sh.dumps);
  EXPECT_EQ(sh.hidden % sh.heads, 0);
  const SuiteSpec tiny = layers_suite(SuiteOptions{.quick = true, .tiny = true});
  const SuiteSpec quick = layers_suite(SuiteOptions{true});
  ASSERT_EQ(tiny.experiments.size(), quick.experiments.size());
  EXPECT_TRUE(static_cast<bool>(tiny.gpu_checks));
  for (const char* layer : {"encoder", "decoder", "embedding", "criterion"})
    expect_layer_names_at(tiny, layer, sh);
  for (const ExperimentSpec& e : tiny.experiments) {
    EXPECT_TRUE(e.dump_variant.empty()) << e.name;
    const std::string layer = e.params.value("layer", std::string());
    if (layer == "encoder" || layer == "decoder") {
      EXPECT_EQ(e.params.at("model").get<std::string>(), "tiny") << e.name;
      EXPECT_EQ(e.params.at("hidden").get<int>(), 36) << e.name;
      EXPECT_EQ(e.params.at("ffn").get<int>(), 68) << e.name;
      EXPECT_EQ(e.params.at("heads").get<int>(), 4) << e.name;
    } else if (layer == "embedding" || layer == "criterion") {
      EXPECT_EQ(e.params.at("vocab").get<int>(), 1003) << e.name;
    } else {  // the GEMM epilogues: M = tokens, and N or K the layer's hidden or ffn
      EXPECT_EQ(e.params.at("model").get<std::string>(), "tiny") << e.name;
      EXPECT_EQ(e.params.at("tokens").get<int>(), 96) << e.name;
      for (const char* dim : {"n", "k"}) {
        const int d = e.params.at(dim).get<int>();
        EXPECT_TRUE(d == 36 || d == 68 || d == 96) << e.name << " " << dim << " " << d;
      }
    }
  }
}

}  // namespace
}  // namespace seqbench
