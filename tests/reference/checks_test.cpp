// Runs reference/checks.h group by group over several seeds (so that the seed-drawn shapes cover
// one row, one key, fully-masked rows, odd hidden sizes), and fails on any result that did not pass.
#include "reference/checks.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <ostream>
#include <set>
#include <string>

namespace seqbench::ref {

// Names the group in gtest output (found by argument-dependent lookup) instead of a byte dump.
void PrintTo(const ReferenceCheckGroup& group, std::ostream* os) {
  *os << group.op;
}

namespace {

// Seeds 1..kSeeds; each draws different shapes and masks.
constexpr std::uint64_t kSeeds = 8;

class ReferenceChecks : public ::testing::TestWithParam<ReferenceCheckGroup> {};

TEST_P(ReferenceChecks, AllPassOverSeeds) {
  const ReferenceCheckGroup& group = GetParam();
  for (std::uint64_t seed = 1; seed <= kSeeds; ++seed) {
    const std::vector<CheckResult> results = group.run(seed);
    ASSERT_FALSE(results.empty()) << group.op << " produced no checks";
    for (const CheckResult& result : results) {
      EXPECT_TRUE(result.passed) << result.name << " (seed " << seed << "): max_abs_err "
                                 << result.max_abs_err << ", max_rel_err " << result.max_rel_err
                                 << ", tolerance " << result.tolerance << "\n  " << result.detail;
      EXPECT_EQ(result.name.rfind(std::string("reference/") + group.op + "/", 0), 0u)
          << result.name << " is not under reference/" << group.op << "/";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Groups, ReferenceChecks, ::testing::ValuesIn(reference_check_groups()),
                         [](const ::testing::TestParamInfo<ReferenceCheckGroup>& info) {
                           return std::string(info.param.op);
                         });

TEST(ReferenceChecksSummary, EveryBackwardIsGradcheckedAndNamesAreUnique) {
  const std::vector<CheckResult> results = run_reference_checks(2024);
  std::set<std::string> names;
  for (const CheckResult& result : results) {
    EXPECT_TRUE(names.insert(result.name).second) << "duplicate check name " << result.name;
    EXPECT_FALSE(result.detail.empty()) << result.name << " has no detail";
  }
  for (const char* expected :
       {"reference/layernorm/gradcheck", "reference/softmax/gradcheck", "reference/dropout/gradcheck",
        "reference/bias_act_dropout/gradcheck_relu", "reference/bias_act_dropout/gradcheck_gelu_erf",
        "reference/bias_act_dropout/gradcheck_gelu_tanh", "reference/bias_dropout_residual/gradcheck",
        "reference/embedding/gradcheck_sinusoidal", "reference/embedding/gradcheck_learned",
        "reference/cross_entropy/gradcheck_paper", "reference/cross_entropy/gradcheck_fairseq",
        "reference/attention/gradcheck", "reference/attention/gradcheck_mha",
        "reference/transformer_layer/gradcheck_encoder", "reference/transformer_layer/gradcheck_decoder",
        "reference/transformer_layer/gradcheck_detects_missing_residual",
        "reference/transformer_layer/pre_ln_zero_sublayers_is_identity",
        "reference/gradcheck/detects_perturbed_gradient", "reference/gradcheck/detects_missing_term"}) {
    EXPECT_TRUE(names.count(expected)) << "missing check " << expected;
  }
}

TEST(ReferenceChecksSummary, SameSeedSameResults) {
  const std::vector<CheckResult> a = run_reference_checks(7);
  const std::vector<CheckResult> b = run_reference_checks(7);
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].name, b[i].name);
    EXPECT_EQ(a[i].detail, b[i].detail) << a[i].name;
    EXPECT_EQ(a[i].max_abs_err, b[i].max_abs_err) << a[i].name;
  }
}

}  // namespace
}  // namespace seqbench::ref
