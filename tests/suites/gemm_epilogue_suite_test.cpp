// The layers suite's GEMM-epilogue experiments (suites/layers/gemm_epilogue.cu), described on the
// CPU (no GPU touched): names, params, the GEMM shape of every op, variants, FLOPs, the position
// after the encoder's experiments.
#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <string>

#include "suites/experiment.h"
#include "suites/suite_layers.h"

namespace seqbench {
namespace {

struct Expected {
  const char* direction;
  const char* epilogue;
  const char* activation;
  bool dropout;
  char m, n, k;  // 'M' tokens, 'H' hidden, 'F' ffn
};

// Every op, by hand from the doc block's tables (transformer-big: H = 1024, F = 4096).
const std::map<std::string, Expected>& expected_ops() {
  static const std::map<std::string, Expected> ops = {
      {"fc1_fwd_bias_relu", {"fwd", "bias_relu", "relu", false, 'M', 'F', 'H'}},
      {"fc1_fwd_bias_gelu_tanh", {"fwd", "bias_gelu_tanh", "gelu_tanh", false, 'M', 'F', 'H'}},
      {"fc1_fwd_bias_gelu_tanh_aux", {"fwd", "bias_gelu_tanh_aux", "gelu_tanh", false, 'M', 'F', 'H'}},
      {"fc1_fwd_bias_relu_dropout", {"fwd", "bias_relu", "relu", true, 'M', 'F', 'H'}},
      {"fc1_fwd_bias_gelu_tanh_aux_dropout", {"fwd", "bias_gelu_tanh_aux", "gelu_tanh", true, 'M', 'F', 'H'}},
      {"fc2_fwd_bias", {"fwd", "bias", "none", false, 'M', 'H', 'F'}},
      {"proj_fwd_bias", {"fwd", "bias", "none", false, 'M', 'H', 'H'}},
      {"fc2_fwd_bias_residual", {"fwd", "bias", "none", false, 'M', 'H', 'F'}},
      {"proj_fwd_bias_residual", {"fwd", "bias", "none", false, 'M', 'H', 'H'}},
      {"fc1_bwd_dgelu_tanh_bgrad", {"bwd", "dgelu_tanh_bgrad", "gelu_tanh", false, 'M', 'F', 'H'}},
      {"fc2_bwd_bgrad", {"bwd", "bgrad_a", "none", false, 'H', 'F', 'M'}},
      {"proj_bwd_bgrad", {"bwd", "bgrad_a", "none", false, 'H', 'H', 'M'}},
  };
  return ops;
}

bool is_epilogue(const ExperimentSpec& e) {
  return e.name.rfind("gemm_epilogue/", 0) == 0;
}

TEST(GemmEpilogueExperiments, NamesParamsShapesAndFlops) {
  for (const bool quick : {false, true}) {
    const SuiteSpec s = layers_suite(SuiteOptions{quick});
    const std::int64_t M = quick ? 4096 : 8192, H = 1024, F = 4096;
    EXPECT_EQ(layers_suite_shapes(SuiteOptions{quick}).tokens, M);
    const auto size = [&](char c) { return c == 'M' ? M : c == 'H' ? H : F; };
    std::map<std::string, int> seen;  // name -> count
    for (const ExperimentSpec& e : s.experiments) {
      if (!is_epilogue(e)) continue;
      ++seen[e.name];
      const std::string op = e.params.at("op").get<std::string>();
      const std::string dtype = e.params.at("dtype").get<std::string>();
      ASSERT_EQ(expected_ops().count(op), 1u) << e.name;
      const Expected& x = expected_ops().at(op);
      const std::int64_t m = size(x.m), n = size(x.n), k = size(x.k);
      EXPECT_EQ(e.name, "gemm_epilogue/" + op + "/" + dtype + "/m=" + std::to_string(m) +
                            ",n=" + std::to_string(n) + ",k=" + std::to_string(k));
      EXPECT_TRUE(dtype == "f16" || dtype == "bf16") << e.name;
      EXPECT_EQ(e.params.at("direction").get<std::string>(), x.direction) << e.name;
      EXPECT_EQ(e.params.at("m").get<std::int64_t>(), m) << e.name;
      EXPECT_EQ(e.params.at("n").get<std::int64_t>(), n) << e.name;
      EXPECT_EQ(e.params.at("k").get<std::int64_t>(), k) << e.name;
      EXPECT_EQ(e.params.at("epilogue").get<std::string>(), x.epilogue) << e.name;
      EXPECT_EQ(e.params.at("activation").get<std::string>(), x.activation) << e.name;
      // transformer-big's activation_dropout is 0.1.
      EXPECT_DOUBLE_EQ(e.params.at("dropout_p").get<double>(), x.dropout ? 0.1 : 0.0) << e.name;
      EXPECT_EQ(e.params.at("model").get<std::string>(), "transformer-big") << e.name;
      EXPECT_EQ(e.params.at("tokens").get<std::int64_t>(), M) << e.name;
      const double flops = 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
      EXPECT_DOUBLE_EQ(e.params.at("gemm_flops").get<double>(), flops) << e.name;
      EXPECT_EQ(e.baseline, "separate") << e.name;
      ASSERT_EQ(e.variants.size(), 2u) << e.name;
      EXPECT_EQ(e.variants[0].name, "separate");
      EXPECT_EQ(e.variants[1].name, "epilogue");
      for (const VariantSpec& v : e.variants) {
        EXPECT_DOUBLE_EQ(v.flops, flops) << e.name << " " << v.name;
        EXPECT_EQ(v.bytes, 0.0) << e.name << " " << v.name;
      }
      EXPECT_TRUE(static_cast<bool>(e.prepare)) << e.name;
      EXPECT_TRUE(e.dump_variant.empty()) << e.name;
    }
    // Every op in both dtypes, each once.
    EXPECT_EQ(seen.size(), 2 * expected_ops().size());
    for (const auto& [name, count] : seen) EXPECT_EQ(count, 1) << name;
    for (const char* dtype : {"f16", "bf16"})
      for (const auto& [op, x] : expected_ops()) {
        const std::string name = "gemm_epilogue/" + op + "/" + dtype + "/m=" + std::to_string(size(x.m)) +
                                 ",n=" + std::to_string(size(x.n)) + ",k=" + std::to_string(size(x.k));
        EXPECT_EQ(seen.count(name), 1u) << name;
      }
  }
}

// 2·m·n·k by hand at the full shapes: fc1 forward 2·8192·4096·1024 = 68719476736, the output
// projection's forward and dW 2·8192·1024·1024 = 17179869184.
TEST(GemmEpilogueExperiments, FlopsByHand) {
  const SuiteSpec s = layers_suite(SuiteOptions{false});
  std::map<std::string, double> flops;
  for (const ExperimentSpec& e : s.experiments)
    if (is_epilogue(e)) flops[e.name] = e.variants.at(1).flops;
  EXPECT_DOUBLE_EQ(flops.at("gemm_epilogue/fc1_fwd_bias_relu/f16/m=8192,n=4096,k=1024"), 68719476736.0);
  EXPECT_DOUBLE_EQ(flops.at("gemm_epilogue/fc2_bwd_bgrad/bf16/m=1024,n=4096,k=8192"), 68719476736.0);
  EXPECT_DOUBLE_EQ(flops.at("gemm_epilogue/proj_fwd_bias/bf16/m=8192,n=1024,k=1024"), 17179869184.0);
  EXPECT_DOUBLE_EQ(flops.at("gemm_epilogue/proj_bwd_bgrad/f16/m=1024,n=1024,k=8192"), 17179869184.0);
}

// The epilogue experiments come after every encoder experiment (suite_layers.cpp's order).
TEST(GemmEpilogueExperiments, FollowTheEncoder) {
  const SuiteSpec s = layers_suite(SuiteOptions{true});
  std::size_t last_encoder = 0, first_epilogue = s.experiments.size();
  for (std::size_t i = 0; i < s.experiments.size(); ++i) {
    if (s.experiments[i].name.rfind("encoder_", 0) == 0) last_encoder = i;
    if (is_epilogue(s.experiments[i]) && first_epilogue == s.experiments.size()) first_epilogue = i;
  }
  ASSERT_LT(first_epilogue, s.experiments.size());
  EXPECT_LT(last_encoder, first_epilogue);
}

}  // namespace
}  // namespace seqbench
