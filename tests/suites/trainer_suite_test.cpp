// The trainer suite's description (CPU, no GPU touched): every model x optimizer, the per-tensor
// baseline, the same minimal bytes for every variant, the parameter counts and the footprints.
#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <set>
#include <string>

#include "suites/suite_trainer.h"

namespace seqbench {
namespace {

// Hand-derived from the architectures (see suites/suite_trainer.cu for the sources).
const std::map<std::string, std::uint64_t>& expected_parameters() {
  static const std::map<std::string, std::uint64_t> counts = {
      {"transformer-base", 60915712}, {"transformer-big", 209911808}, {"bert-base", 109482240},
      {"bert-large", 335141888},      {"gpt2-small", 124439808},      {"gpt2-large", 774030080}};
  return counts;
}

const ExperimentSpec* find(const SuiteSpec& s, const std::string& name) {
  for (const ExperimentSpec& e : s.experiments)
    if (e.name == name) return &e;
  return nullptr;
}

TEST(TrainerSuite, DescribesEveryModelAndOptimizer) {
  const SuiteSpec s = trainer_suite(SuiteOptions{false});
  EXPECT_EQ(s.name, "trainer");
  EXPECT_TRUE(s.needs_gpu);
  EXPECT_FALSE(s.description.empty());
  ASSERT_EQ(s.experiments.size(), 12u);
  std::set<std::string> names;
  for (const ExperimentSpec& e : s.experiments) EXPECT_TRUE(names.insert(e.name).second) << e.name;
  for (const char* optimizer : {"adam", "sgd"})
    for (const auto& [model, count] : expected_parameters()) {
      const std::string name = std::string(optimizer) + "/" + model;
      const ExperimentSpec* e = find(s, name);
      ASSERT_NE(e, nullptr) << name;
      EXPECT_EQ(e->params.at("model").get<std::string>(), model);
      EXPECT_EQ(e->params.at("optimizer").get<std::string>(), optimizer);
      EXPECT_EQ(e->params.at("dtype").get<std::string>(), "f16");
      EXPECT_EQ(e->params.at("stochastic_rounding_dtype").get<std::string>(), "bf16");  // fused_bf16_sr's
      EXPECT_EQ(e->params.at("parameters").get<std::uint64_t>(), count) << name;
      EXPECT_GT(e->params.at("tensors").get<std::uint64_t>(), 100u) << name;
      EXPECT_GE(e->params.at("workspace_elements").get<std::uint64_t>(), count) << name;
      EXPECT_TRUE(e->prepare) << name;
    }
}

// suites/pytorch/ rebuilds the same parameter list from `seqbench list --json`'s "inputs".
TEST(TrainerSuite, InputsListEveryTensor) {
  const SuiteSpec s = trainer_suite(SuiteOptions{false});
  for (const ExperimentSpec& e : s.experiments) {
    const auto& elements = e.inputs.at("tensor_elements");
    ASSERT_TRUE(elements.is_array()) << e.name;
    EXPECT_EQ(elements.size(), e.params.at("tensors").get<std::size_t>()) << e.name;
    std::uint64_t sum = 0;
    for (const auto& n : elements) sum += n.get<std::uint64_t>();
    EXPECT_EQ(sum, e.params.at("parameters").get<std::uint64_t>()) << e.name;
  }
}

TEST(TrainerSuite, BaselineAndVariants) {
  const SuiteSpec s = trainer_suite(SuiteOptions{false});
  for (const ExperimentSpec& e : s.experiments) {
    EXPECT_EQ(e.baseline, "per_tensor") << e.name;
    ASSERT_EQ(e.variants.size(), 6u) << e.name;
    const char* want[] = {"per_tensor",   "multi_tensor",  "fused",
                          "fused_master", "fused_bf16_sr", "fused_update_only"};
    for (std::size_t i = 0; i < 6; ++i) EXPECT_EQ(e.variants[i].name, want[i]) << e.name;
  }
}

// Adam: 22 B/param (12 read, 10 written) without a master, 28 with one; SGD with momentum 14 / 20.
// Every variant of an experiment carries the no-master minimal bytes, so GB/s compares the same work.
TEST(TrainerSuite, MinimalBytesPerParameter) {
  const SuiteSpec s = trainer_suite(SuiteOptions{false});
  for (const ExperimentSpec& e : s.experiments) {
    const bool adam = e.params.at("optimizer").get<std::string>() == "adam";
    const double n = e.params.at("parameters").get<double>();
    EXPECT_EQ(e.params.at("bytes_per_param").get<int>(), adam ? 22 : 14) << e.name;
    EXPECT_EQ(e.params.at("bytes_per_param_master").get<int>(), adam ? 28 : 20) << e.name;
    for (const VariantSpec& v : e.variants)
      EXPECT_EQ(v.bytes, (adam ? 22.0 : 14.0) * n) << e.name << " " << v.name;
  }
}

// params + grads (2 + 2 B) + fp32 state (m, v: 8 B; momentum: 4 B) (+ 4 B master) (+ 4 B fp32 grads).
TEST(TrainerSuite, FootprintPerPrecisionMode) {
  const SuiteSpec s = trainer_suite(SuiteOptions{false});
  for (const ExperimentSpec& e : s.experiments) {
    const bool adam = e.params.at("optimizer").get<std::string>() == "adam";
    const std::uint64_t n = e.params.at("parameters").get<std::uint64_t>();
    const nlohmann::json& f = e.params.at("footprint_bytes");
    const std::uint64_t no_master = (adam ? 12u : 8u) * n;
    EXPECT_EQ(f.at("no_master").get<std::uint64_t>(), no_master) << e.name;
    EXPECT_EQ(f.at("master_fp32").get<std::uint64_t>(), no_master + 4 * n) << e.name;
    EXPECT_EQ(f.at("per_tensor_fairseq").get<std::uint64_t>(), no_master + 8 * n) << e.name;
    // bf16 parameters and gradients are 2 B too, and stochastic rounding keeps no extra state.
    EXPECT_EQ(f.at("stochastic_rounding_bf16").get<std::uint64_t>(), no_master) << e.name;
  }
}

TEST(TrainerSuite, QuickKeepsTheTwoSmallestModels) {
  const SuiteSpec quick = trainer_suite(SuiteOptions{true});
  const SuiteSpec full = trainer_suite(SuiteOptions{false});
  EXPECT_LT(quick.experiments.size(), full.experiments.size());
  ASSERT_EQ(quick.experiments.size(), 4u);
  std::set<std::string> names;
  for (const ExperimentSpec& e : quick.experiments) names.insert(e.name);
  EXPECT_EQ(names, (std::set<std::string>{"adam/transformer-base", "adam/bert-base", "sgd/transformer-base",
                                          "sgd/bert-base"}));
}

// SuiteOptions::tiny (tests/simt): one synthetic model of odd-sized tensors, hand-counted from
// fairseq's transformer at d 21, ffn 50, vocab 997, 2 + 2 layers:
//   embedding 997·21 = 20,937
//   encoder layer: 4 projections (21·21 + 21) + fc1 (21·50 + 50) + fc2 (50·21 + 21) + 2 LayerNorms
//     (2·21) = 1,848 + 1,100 + 1,071 + 84 = 4,103, in 16 tensors
//   decoder layer: 8 projections + fc1 + fc2 + 3 LayerNorms = 3,696 + 1,100 + 1,071 + 126 = 5,993,
//     in 26 tensors
//   total 20,937 + 2·4,103 + 2·5,993 = 41,129 in 1 + 32 + 52 = 85 tensors.
TEST(TrainerSuite, TinyHasOneOddSizedModel) {
  const SuiteSpec tiny = trainer_suite(SuiteOptions{.quick = true, .tiny = true});
  ASSERT_EQ(tiny.experiments.size(), 2u);
  for (const ExperimentSpec& e : tiny.experiments) {
    EXPECT_EQ(e.params.at("model").get<std::string>(), "tiny-transformer") << e.name;
    EXPECT_EQ(e.params.at("parameters").get<std::uint64_t>(), 41129u) << e.name;
    EXPECT_EQ(e.params.at("tensors").get<std::uint64_t>(), 85u) << e.name;
    EXPECT_TRUE(e.prepare) << e.name;
  }
  EXPECT_EQ(tiny.experiments[0].name, "adam/tiny-transformer");
  EXPECT_EQ(tiny.experiments[1].name, "sgd/tiny-transformer");
}

}  // namespace
}  // namespace seqbench
