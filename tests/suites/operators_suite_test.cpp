// The operator suite's description (CPU, no GPU touched): the embedding experiments' minimal bytes,
// recomputed by hand from their params (suites/operators/embedding.cu), for the full and the quick
// shapes. The count is the layers suite's: inputs read once (a repeated token's row comes from L2;
// padded slots read and send nothing), outputs written once (the gradient tables whole).
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "suites/experiment.h"

namespace seqbench {
namespace {

TEST(OperatorsSuite, EmbeddingMinimalBytesCountDistinctRowsReadAndWholeTablesWritten) {
  for (const bool quick : {false, true}) {
    SuiteOptions options;
    options.quick = quick;
    const auto suites = all_suites(options);
    const SuiteSpec& ops = find_suite(suites, "operators");
    int fwd = 0, bwd = 0, zipf = 0;
    for (const ExperimentSpec& e : ops.experiments) {
      const std::string family = e.name.substr(0, e.name.find('/'));
      if (family != "embedding_fwd" && family != "embedding_bwd") continue;
      const nlohmann::json& p = e.params;
      const auto num = [&](const char* key) { return p.at(key).get<double>(); };
      const double n = num("tokens"), H = num("hidden"), V = num("vocab"), P = num("num_positions");
      const double C = num("nonpad_tokens"), D = num("distinct_token_rows"),
                   Dp = num("distinct_position_rows");
      const double s = p.at("dtype").get<std::string>() == "f32" ? 4.0 : 2.0;
      const bool learned = p.at("positions").get<std::string>().rfind("learned", 0) == 0;
      const bool zipfian = p.at("token_distribution").get<std::string>() != "uniform";
      // The token draw: 10 % padding; uniform ids over 32000+ rarely repeat at <= 16384 tokens, Zipf ids do.
      EXPECT_NEAR(C / n, 0.9, 0.02) << e.name;
      EXPECT_LE(D, C) << e.name;
      if (zipfian) {
        EXPECT_LT(D, 0.5 * C) << e.name;
        ++zipf;
      } else {
        EXPECT_GT(D, 0.6 * C) << e.name;
      }
      // Learned positions are slots of 512-token sentences, every one of them used at >= 4096 tokens.
      EXPECT_DOUBLE_EQ(Dp, learned ? P : 0.0) << e.name;
      EXPECT_DOUBLE_EQ(P, learned ? 512.0 : 0.0) << e.name;
      double want = 0.0, zero_fill = 0.0;
      if (family == "embedding_fwd") {
        want = 4 * n + (D + Dp) * H * s + n * H * s;
        ++fwd;
      } else {
        want = 4 * n + C * H * s + (V + P) * H * s;
        zero_fill = (V + P - D - Dp) * H * s;
        ++bwd;
      }
      ASSERT_FALSE(e.variants.empty()) << e.name;
      for (const VariantSpec& v : e.variants) EXPECT_DOUBLE_EQ(v.bytes, want) << e.name << " " << v.name;
      EXPECT_DOUBLE_EQ(num("zero_fill_bytes"), zero_fill) << e.name;
    }
    EXPECT_GT(fwd, 0) << "quick " << quick;
    EXPECT_GT(bwd, 0) << "quick " << quick;
    if (!quick) {
      EXPECT_GT(zipf, 0);
    }
  }
}

}  // namespace
}  // namespace seqbench
