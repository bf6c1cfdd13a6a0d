// The memory suite (CPU): its checks pass, its accounting holds the paper's numbers, and the
// accounting's JSON has the documented shape.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "suites/suite_memory.h"

namespace seqbench {
namespace {

TEST(MemorySuite, IsACpuSuiteWithChecksOnly) {
  const SuiteSpec s = memory_suite(SuiteOptions{true});
  EXPECT_EQ(s.name, "memory");
  EXPECT_FALSE(s.needs_gpu);
  EXPECT_TRUE(s.experiments.empty());
  EXPECT_FALSE(s.gpu_checks);
  ASSERT_TRUE(s.cpu_checks);
  EXPECT_FALSE(s.description.empty());
}

void expect_all_checks_pass(bool quick) {
  const std::vector<CheckResult> checks = memory_checks(SuiteOptions{quick}, 12345);
  std::set<std::string> names;
  for (const CheckResult& c : checks) {
    EXPECT_TRUE(c.passed) << c.name << ": " << c.detail;
    EXPECT_TRUE(names.insert(c.name).second) << "duplicate check " << c.name;
    EXPECT_FALSE(c.detail.empty()) << c.name;
  }
  for (const char* preset : {"transformer-base", "transformer-big", "bert-base", "bert-large", "gpt2-small",
                             "gpt2-large", "vit-b-32", "vit-l-32"}) {
    for (const char* check : {"attention_backward_formula", "planner_no_overlap", "block_bounds"})
      EXPECT_TRUE(names.count(std::string("memory/") + preset + "/" + check)) << preset << " " << check;
  }
  for (const char* check : {"memory/planner/random_lifetimes", "memory/planner/planted_overlap_detected",
                            "memory/planner/over_limit_request_refused"})
    EXPECT_TRUE(names.count(check)) << check;
  EXPECT_EQ(checks.size(), 8u * 3u + 3u);
}

TEST(MemorySuite, EveryCheckPassesQuick) {
  expect_all_checks_pass(true);
}
TEST(MemorySuite, EveryCheckPassesFull) {
  expect_all_checks_pass(false);
}

TEST(MemorySuite, AccountingHasTheDocumentedShape) {
  const nlohmann::json a = memory_accounting(SuiteOptions{false});
  ASSERT_TRUE(a.is_array());
  std::set<std::string> kinds;
  std::set<std::string> presets;
  for (const nlohmann::json& e : a) {
    kinds.insert(e.at("name").get<std::string>());
    const nlohmann::json& p = e.at("params");
    presets.insert(p.at("preset").get<std::string>());
    for (const char* key : {"batch_tokens", "batch_size", "seq_len", "hidden", "ffn", "heads",
                            "encoder_layers", "decoder_layers", "tensors", "steps"})
      EXPECT_TRUE(p.at(key).is_number_integer()) << key;
    EXPECT_EQ(p.at("batch_tokens").get<std::size_t>(),
              p.at("batch_size").get<std::size_t>() * p.at("seq_len").get<std::size_t>());
    const auto naive = e.at("naive_bytes").get<std::size_t>();
    const auto managed = e.at("managed_bytes").get<std::size_t>();
    const auto lower = e.at("lower_bound_bytes").get<std::size_t>();
    EXPECT_LE(lower, managed) << e.dump();
    EXPECT_LT(managed, naive) << e.dump();
    EXPECT_DOUBLE_EQ(e.at("ratio").get<double>(), static_cast<double>(managed) / static_cast<double>(naive));
    EXPECT_EQ(e.contains("formula"), e.at("name") == "attention_backward");
  }
  EXPECT_EQ(kinds, (std::set<std::string>{"attention_backward", "encoder_layer", "decoder_layer", "model"}));
  EXPECT_EQ(presets.size(), 8u);
}

TEST(MemorySuite, TransformerBigAttentionBackwardMatchesThePaper) {
  // 8 x 1024 tokens, H 1024, N 16, fp16: naive 9·16 MiB + 256 MiB, managed 3·16 MiB + 256 MiB.
  const nlohmann::json a = memory_accounting(SuiteOptions{true});
  bool found = false;
  for (const nlohmann::json& e : a) {
    if (e.at("name") != "attention_backward" || e.at("params").at("preset") != "transformer-big") continue;
    if (e.at("params").at("seq_len") != 1024) continue;
    found = true;
    EXPECT_EQ(e.at("params").at("batch_size"), 8);
    EXPECT_EQ(e.at("formula").at("naive_bytes").get<std::size_t>(), std::size_t{400} << 20);
    EXPECT_EQ(e.at("formula").at("managed_bytes").get<std::size_t>(), std::size_t{304} << 20);
    EXPECT_EQ(e.at("managed_bytes").get<std::size_t>(), std::size_t{304} << 20);
    EXPECT_EQ(e.at("naive_bytes").get<std::size_t>(), std::size_t{400} << 20);
  }
  EXPECT_TRUE(found);
}

TEST(MemorySuite, QuickRunsTheMaximumPointOnly) {
  const nlohmann::json quick = memory_accounting(SuiteOptions{true});
  for (const nlohmann::json& e : quick) {
    EXPECT_EQ(e.at("params").at("batch_tokens").get<std::size_t>() /
                  e.at("params").at("seq_len").get<std::size_t>(),
              e.at("params").at("batch_size").get<std::size_t>());
  }
  EXPECT_LT(quick.size(), memory_accounting(SuiteOptions{false}).size());
}

}  // namespace
}  // namespace seqbench
