// seqbench targets: the issues' acceptance targets judged from reports. The reports here are
// synthetic (numbers chosen to sit on each side of each limit), never measurements.
#include "suites/targets.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <sstream>
#include <tuple>

#include "suites/cli.h"
#include "suites/experiment.h"
#include "suites/layers/layer_experiments.h"
#include "suites/report.h"
#include "suites_test_util.h"
#include "tests/common/gpu_test.h"

namespace seqbench {
namespace {

using nlohmann::json;
using testing::contains;
using testing::error_message;
using testing::failed_check;

constexpr double kCopyGbps = 3000.0;

// A variant with a given % of copy bandwidth and speedup: median and rates consistent with them.
json variant(const std::string& name, double pct_copy, double speedup, double bytes = 1e9) {
  const double gbps = pct_copy / 100.0 * kCopyGbps;
  const double ms = bytes / gbps / 1e6;
  return {{"name", name}, {"samples", 10},     {"median_ms", ms},         {"p20_ms", ms},
          {"p80_ms", ms}, {"cv", 0.01},        {"bytes", bytes},          {"flops", 0},
          {"gbps", gbps}, {"tflops", nullptr}, {"pct_copy_bw", pct_copy}, {"speedup", speedup}};
}

json experiment(const std::string& name, json params, const std::string& baseline,
                std::vector<json> variants) {
  return {{"name", name},
          {"params", std::move(params)},
          {"baseline", baseline},
          {"variants", std::move(variants)}};
}

json report(const std::string& suite, const std::string& device = "NVIDIA H100 80GB HBM3") {
  json r = testing::valid_report();
  r["suite"] = suite;
  r["meta"]["device"]["name"] = device;
  r["meta"]["device"]["copy_gbps"] = kCopyGbps;
  r["meta"]["quick"] = false;
  r["experiments"] = json::array();
  r["checks"] = json::array();
  r["not_run"] = json::array();
  return r;
}

constexpr double k16M = 16.0 * 1024 * 1024;

// One large operator experiment (every variant counted by both #3 targets) and one small one (only
// by the speedup target: its 40 % of copy must not count).
json operators_report() {
  json r = report("operators");
  r["experiments"].push_back(experiment("layernorm_fwd/bf16/big", {{"elements", k16M}}, "unfused",
                                        {variant("unfused", 30, 1.0), variant("fused", 85, 2.8)}));
  r["experiments"].push_back(experiment(
      "dropout_bwd/bf16/small", {{"elements", 1000}}, "unfused",
      {variant("unfused", 20, 1.0), variant("fused_bitmask", 40, 2.0), variant("fused_regen", 41, 2.05)}));
  return r;
}

// Adam at 124M (both #4 targets) and at 61M (the speedup target only), SGD (neither).
json trainer_report() {
  json r = report("trainer");
  for (const auto& [model, params, pct] :
       {std::tuple{"gpt2-small", 124.4e6, 86.0}, std::tuple{"transformer-base", 60.9e6, 70.0}})
    r["experiments"].push_back(experiment(
        std::string("adam/") + model, {{"optimizer", "adam"}, {"parameters", params}}, "per_tensor",
        {variant("per_tensor", 35, 1.0), variant("fused", pct, 2.4), variant("fused_master", 60, 1.9)}));
  r["experiments"].push_back(experiment("sgd/gpt2-small", {{"optimizer", "sgd"}, {"parameters", 124.4e6}},
                                        "per_tensor",
                                        {variant("per_tensor", 35, 1.0), variant("fused", 50, 1.5)}));
  return r;
}

// Layer experiments (params.layer) and a GEMM-epilogue one, which no target counts; every memory
// check the suite writes, passing.
json layers_report() {
  json r = report("layers");
  r["experiments"].push_back(experiment("encoder_fwd/bf16/L=32", {{"layer", "encoder"}}, "baseline",
                                        {variant("baseline", 10, 1.0), variant("managed", 14, 1.4)}));
  r["experiments"].push_back(experiment(
      "encoder_bwd/bf16/L=32", {{"layer", "encoder"}}, "baseline",
      {variant("baseline", 10, 1.0), variant("managed", 13, 1.3), variant("managed_keep", 12, 1.2)}));
  r["experiments"].push_back(experiment("gemm_epilogue/bias_gelu/x", {{"op", "gemm"}}, "separate",
                                        {variant("separate", 10, 1.0), variant("epilogue", 9, 0.9)}));
  for (const std::string& name : layer_experiments::memory_check_names()) {
    const bool ratio = name.find("peak_ratio") != std::string::npos;
    r["checks"].push_back({{"name", name},
                           {"passed", true},
                           {"max_abs_err", ratio ? 1e9 : 0.0},
                           {"max_rel_err", ratio ? 0.55 : 0.0},
                           {"tolerance", ratio ? 0.7 : 0.0}});
  }
  return r;
}

// PyTorch's report of the experiments of `of`, with eager and torch.compile, as suites/pytorch
// writes it: `unmapped` instead of `not_run`, and the GEMM-epilogue experiments unmapped ("skipped:
// no torch equivalent"), which no target counts.
json torch_report(const json& of) {
  json r = report(of.at("suite").get<std::string>());
  r["meta"]["runner"] = "pytorch";
  r.erase("not_run");
  r["unmapped"] = json::array();
  for (const json& e : of.at("experiments")) {
    const std::string name = e.at("name").get<std::string>();
    if (name.rfind("gemm_epilogue/", 0) == 0) {
      r["unmapped"].push_back(
          {{"experiment", name}, {"reason", "skipped: no torch equivalent for family 'gemm_epilogue'"}});
      continue;
    }
    r["experiments"].push_back(
        experiment(name, e.at("params"), "torch_eager",
                   {variant("torch_eager", 20, 1.0), variant("torch_compile", 30, 1.5)}));
  }
  return r;
}

struct Inputs {
  std::vector<json> reports;
  std::vector<std::string> names;
  void add(json r, std::string name) {
    reports.push_back(std::move(r));
    names.push_back(std::move(name));
  }
};

// Every report every target needs, all of them met.
Inputs all_met() {
  Inputs in;
  const json ops = operators_report(), trainer = trainer_report(), layers = layers_report();
  in.add(ops, "operators.json");
  in.add(trainer, "trainer.json");
  in.add(layers, "layers.json");
  in.add(torch_report(ops), "pytorch-operators.json");
  in.add(torch_report(trainer), "pytorch-trainer.json");
  in.add(torch_report(layers), "pytorch-layers.json");
  return in;
}

const TargetResult& target(const TargetsEvaluation& e, const std::string& id, std::size_t device = 0) {
  const auto& targets = e.devices.at(device).targets;
  const auto it =
      std::find_if(targets.begin(), targets.end(), [&](const TargetResult& t) { return t.id == id; });
  if (it == targets.end()) throw std::runtime_error("no target " + id);
  return *it;
}

std::string gaps(const TargetResult& t) {
  std::string all;
  for (const std::string& g : t.gaps) all += g + "\n";
  return all;
}

TEST(Targets, EveryTargetMetWhenEveryCaseIsWithinItsLimit) {
  const Inputs in = all_met();
  const TargetsEvaluation e = evaluate_targets(in.reports, in.names);
  ASSERT_EQ(e.devices.size(), 1u);
  EXPECT_EQ(e.devices[0].device, "NVIDIA H100 80GB HBM3");
  EXPECT_TRUE(e.devices[0].notes.empty());
  ASSERT_EQ(e.devices[0].targets.size(), 8u);
  for (const TargetResult& t : e.devices[0].targets) {
    EXPECT_EQ(t.verdict, TargetVerdict::met) << t.id << ": " << gaps(t);
    EXPECT_EQ(t.passed, t.total) << t.id;
  }
  // What each target counted: the small operator's 40 % and the 61M-parameter Adam's 70 % are below
  // their copy limits and must not be counted; the GEMM epilogue's 0.9× is not a layer; SGD is not Adam.
  EXPECT_EQ(target(e, "operators.copy_bw").total, 1);
  EXPECT_EQ(target(e, "operators.faster").total, 3);
  EXPECT_EQ(target(e, "trainer.adam_copy_bw").total, 1);
  EXPECT_EQ(target(e, "trainer.adam_vs_per_tensor").total, 2);
  EXPECT_EQ(target(e, "layers.faster").total, 3);
  const auto memory = static_cast<std::int64_t>(layer_experiments::memory_check_names().size());
  EXPECT_EQ(target(e, "layers.memory_ratio").total + target(e, "layers.steady_allocations").total, memory);
  EXPECT_EQ(target(e, "pytorch.columns").total, 2 + 3 + 2);  // not the GEMM epilogue
  EXPECT_TRUE(contains(target(e, "operators.copy_bw").worst, "85.0 % of copy (limit 80.0 %)"));
  EXPECT_TRUE(contains(target(e, "trainer.adam_vs_per_tensor").worst, "2.40×"));
  EXPECT_EQ(targets_exit_code(e), 0);
}

TEST(Targets, LimitsAreInclusiveWhereTheIssueSaysAtLeastAndStrictForFaster) {
  Inputs in = all_met();
  in.reports[0]["experiments"][0]["variants"][1] =
      variant("fused", 80.0, 1.0);  // at 80 %: met; 1.0×: not faster
  in.reports[1]["experiments"][0]["variants"][1] =
      variant("fused", 85.0, 2.0);  // both exactly at the limit: met
  const TargetsEvaluation e = evaluate_targets(in.reports, in.names);
  EXPECT_EQ(target(e, "operators.copy_bw").verdict, TargetVerdict::met);
  EXPECT_EQ(target(e, "trainer.adam_copy_bw").verdict, TargetVerdict::met);
  EXPECT_EQ(target(e, "trainer.adam_vs_per_tensor").verdict, TargetVerdict::met);
  const TargetResult& faster = target(e, "operators.faster");
  EXPECT_EQ(faster.verdict, TargetVerdict::missed);
  ASSERT_EQ(faster.misses.size(), 1u);
  EXPECT_TRUE(contains(faster.misses[0], "layernorm_fwd/bf16/big `fused`: 1.00× over `unfused`"));
  EXPECT_EQ(targets_exit_code(e), 1);
}

// A component variant (component_of: a stage left out) is no result: no target counts it, even
// below every limit.
TEST(Targets, AComponentVariantIsNeverACase) {
  Inputs in = all_met();
  json part = variant("fused_part", 10.0, 0.5);
  part["component_of"] = "fused";
  in.reports[0]["experiments"][0]["variants"].push_back(part);  // operators, large
  part["component_of"] = "managed";
  in.reports[2]["experiments"][0]["variants"].push_back(part);  // layers
  const TargetsEvaluation e = evaluate_targets(in.reports, in.names);
  EXPECT_EQ(target(e, "operators.copy_bw").verdict, TargetVerdict::met);
  EXPECT_EQ(target(e, "operators.copy_bw").total, 1);
  EXPECT_EQ(target(e, "operators.faster").total, 3);
  EXPECT_EQ(target(e, "layers.faster").verdict, TargetVerdict::met);
  EXPECT_EQ(target(e, "layers.faster").total, 3);
}

TEST(Targets, AMissNeverPrintsAsItsLimit) {
  // 79.96 % rounds to "80.0 %" and 0.996× to "1.00×": a miss that read as exactly its limit.
  Inputs in = all_met();
  in.reports[0]["experiments"][0]["variants"][1] = variant("fused", 79.96, 1.5);
  in.reports[1]["experiments"][0]["variants"][1] = variant("fused", 84.9999, 1.9996);
  in.reports[2]["experiments"][1]["variants"][2] = variant("managed_keep", 9, 0.9996);
  const TargetsEvaluation e = evaluate_targets(in.reports, in.names);
  const auto miss = [&](const std::string& id, const std::string& text) {
    const TargetResult& t = target(e, id);
    EXPECT_EQ(t.verdict, TargetVerdict::missed) << id;
    ASSERT_EQ(t.misses.size(), 1u) << id;
    EXPECT_TRUE(contains(t.misses[0], text)) << id << ": " << t.misses[0];
  };
  miss("operators.copy_bw", "layernorm_fwd/bf16/big `fused`: 79.96 % of copy (limit 80.0 %)");
  miss("trainer.adam_copy_bw", "adam/gpt2-small `fused`: 84.9999 % of copy (limit 85.0 %)");
  miss("trainer.adam_vs_per_tensor", "adam/gpt2-small `fused`: 1.9996× over `per_tensor` (limit 2.00×)");
  miss("layers.faster", "encoder_bwd/bf16/L=32 `managed_keep`: 0.9996× over `baseline` (needs > 1×)");
}

TEST(Targets, EveryMissIsListedWithItsValueAndTheLimit) {
  Inputs in = all_met();
  in.reports[0]["experiments"][0]["variants"][1] = variant("fused", 79.9, 1.5);
  in.reports[1]["experiments"][0]["variants"][1] = variant("fused", 84.9, 1.99);
  in.reports[2]["experiments"][1]["variants"][2] = variant("managed_keep", 9, 0.95);  // the strictest reading
  for (json& check : in.reports[2]["checks"]) {
    const std::string name = check.at("name");
    if (name.find("encoder_stack/bf16/peak_ratio") != std::string::npos) {
      check["passed"] = false;
      check["max_rel_err"] = 0.74;
    }
    if (name.find("decoder/f16/steady_state_allocations") != std::string::npos) {
      check["passed"] = false;
      check["max_abs_err"] = 3;
    }
  }
  // PyTorch's torch.compile failed on one experiment.
  in.reports[3]["experiments"][1]["variants"].erase(1);
  in.reports[3]["unmapped"].push_back({{"experiment", "dropout_bwd/bf16/small"},
                                       {"variant", "torch_compile"},
                                       {"reason", "failed: BackendCompilerFailed: x"}});
  const TargetsEvaluation e = evaluate_targets(in.reports, in.names);
  const auto only_miss = [&](const std::string& id, const std::string& text) {
    const TargetResult& t = target(e, id);
    EXPECT_EQ(t.verdict, TargetVerdict::missed) << id;
    ASSERT_EQ(t.misses.size(), 1u) << id;
    EXPECT_TRUE(contains(t.misses[0], text)) << id;
    EXPECT_EQ(t.worst, t.misses[0]) << id << ": the worst case of a missed target is a miss";
  };
  only_miss("operators.copy_bw", "layernorm_fwd/bf16/big `fused`: 79.9 % of copy (limit 80.0 %)");
  only_miss("trainer.adam_copy_bw", "adam/gpt2-small `fused`: 84.9 % of copy (limit 85.0 %)");
  only_miss("trainer.adam_vs_per_tensor", "adam/gpt2-small `fused`: 1.99× over `per_tensor` (limit 2.00×)");
  only_miss("layers.faster", "encoder_bwd/bf16/L=32 `managed_keep`: 0.95× over `baseline` (needs > 1×)");
  only_miss("layers.memory_ratio",
            "layers/memory/encoder_stack/bf16/peak_ratio: managed / baseline peak 0.740 (limit 0.70)");
  only_miss("layers.steady_allocations",
            "layers/memory/decoder/f16/steady_state_allocations: allocations in the loop: 3");
  const TargetResult& columns = target(e, "pytorch.columns");
  EXPECT_EQ(columns.verdict, TargetVerdict::missed);
  ASSERT_EQ(columns.misses.size(), 1u);
  EXPECT_TRUE(contains(columns.misses[0],
                       "operators/dropout_bwd/bf16/small: torch_compile failed: BackendCompilerFailed: x"));
  EXPECT_EQ(columns.worst, columns.misses[0]);
  EXPECT_EQ(target(e, "operators.faster").verdict, TargetVerdict::met);
  EXPECT_EQ(targets_exit_code(e), 1);

  const std::string md = render_targets(e);
  EXPECT_TRUE(
      contains(md,
               "| #3 | every fused operator kernel reaches 80.0 % of the measured copy bandwidth at 16M "
               "elements and above (`operators.copy_bw`) | **missed** | 0 / 1 |"));
  EXPECT_TRUE(contains(md, "- missed: layers/memory/decoder/f16/steady_state_allocations"));
}

TEST(Targets, WhatIsMissingMakesATargetNotMeasuredNeverMet) {
  const auto verdict_with = [](auto&& change, const std::string& id, const std::string& gap) {
    Inputs in = all_met();
    change(in);
    const TargetsEvaluation e = evaluate_targets(in.reports, in.names);
    const TargetResult& t = target(e, id);
    EXPECT_EQ(t.verdict, TargetVerdict::not_measured) << id << " after a change that should leave: " << gap;
    EXPECT_TRUE(contains(gaps(t), gap)) << id;
    EXPECT_EQ(targets_exit_code(e), 3);
  };
  verdict_with(
      [](Inputs& in) {
        in.reports[0]["not_run"].push_back(
            {{"experiment", "softmax_fwd/x"}, {"reason", "not started: time budget"}});
      },
      "operators.faster",
      "1 operators experiment(s) not run (first: softmax_fwd/x: not started: time budget)");
  verdict_with(
      [](Inputs& in) {
        in.reports[0]["checks"].push_back(failed_check("run/operators/softmax_fwd/x/fused"));
      },
      "operators.copy_bw", "1 operators variant(s) failed to run (first: run/operators/softmax_fwd/x/fused)");
  verdict_with(
      [](Inputs& in) {
        in.reports[1]["meta"]["parts"] = json::array({{{"filter", "adam"}}, {{"filter", "sgd"}}});
      },
      "trainer.adam_copy_bw", "trainer holds filtered runs only (first filter `adam`)");
  verdict_with([](Inputs& in) { in.reports[0]["experiments"][0]["params"].erase("elements"); },
               "operators.copy_bw", "1 operators experiment(s) without params.elements");
  // A run that did not measure the copy bandwidth has no % of it anywhere (the schema's null rule).
  verdict_with(
      [](Inputs& in) {
        in.reports[0]["meta"]["device"]["copy_gbps"] = nullptr;
        for (json& e : in.reports[0]["experiments"])
          for (json& v : e["variants"]) v["pct_copy_bw"] = nullptr;
      },
      "operators.copy_bw",
      "layernorm_fwd/bf16/big `fused` has no % of copy bandwidth (the copy was not measured)");
  verdict_with([](Inputs& in) { in.reports[2]["checks"].erase(0); }, "layers.memory_ratio",
               "1 expected check(s) absent (first: " + layer_experiments::memory_check_names()[0] + ")");
  verdict_with(
      [](Inputs& in) {
        in.reports.erase(in.reports.begin() + 5);
        in.names.erase(in.names.begin() + 5);
      },
      "pytorch.columns", "no PyTorch report of layers on this device");
  verdict_with(
      [](Inputs& in) {
        in.reports.erase(in.reports.begin() + 1);
        in.names.erase(in.names.begin() + 1);
      },
      "trainer.adam_vs_per_tensor", "no trainer report");
  // A large experiment nowhere: nothing to count is not a pass.
  verdict_with([](Inputs& in) { in.reports[0]["experiments"].erase(0); }, "operators.copy_bw",
               "no case to count");
  verdict_with([](Inputs& in) { in.reports[1]["meta"]["filter"] = "adam/gpt2"; },
               "trainer.adam_vs_per_tensor", "trainer holds filtered runs only (first filter `adam/gpt2`)");
  // A fast kernel whose checks fail is no evidence; the failure of a whole check family neither.
  verdict_with(
      [](Inputs& in) {
        in.reports[0]["checks"].push_back(failed_check("operators/softmax/fwd/bf16 vs reference", 1.0, 0.01));
      },
      "operators.faster",
      "1 failed check(s) in operators (first: operators/softmax/fwd/bf16 vs reference): its timings do not "
      "count");
  verdict_with(
      [](Inputs& in) { in.reports[2]["checks"].push_back(failed_check("checks/layers/gpu/encoder_memory")); },
      "layers.faster", "1 failed check(s) in layers (first: checks/layers/gpu/encoder_memory)");
  verdict_with([](Inputs& in) { in.reports[1]["experiments"][0]["variants"].erase(1); },
               "trainer.adam_vs_per_tensor",
               "adam/gpt2-small has no `fused` against a `per_tensor` baseline");
  verdict_with([](Inputs& in) { in.reports[1]["experiments"][0]["variants"].erase(1); },
               "trainer.adam_copy_bw", "adam/gpt2-small has no `fused` variant");
  // PyTorch: a variant the budget left unstarted, an experiment outside a filter, a --quick run,
  // and a report of another build are absences, not misses.
  verdict_with(
      [](Inputs& in) {
        in.reports[4]["experiments"][0]["variants"].erase(1);
        in.reports[4]["unmapped"].push_back({{"experiment", "adam/gpt2-small"},
                                             {"variant", "torch_compile"},
                                             {"reason", "not started: time budget"}});
      },
      "pytorch.columns",
      "PyTorch has no full-shape torch_compile of trainer/adam/gpt2-small: not started: time budget");
  verdict_with(
      [](Inputs& in) { in.reports[5]["experiments"].erase(0); }, "pytorch.columns",
      "PyTorch has no full-shape torch_eager of layers/encoder_fwd/bf16/L=32 (not run, or outside a filter)");
  verdict_with(
      [](Inputs& in) { in.reports[3]["meta"]["quick"] = true; }, "pytorch.columns",
      "PyTorch has no full-shape torch_eager of operators/layernorm_fwd/bf16/big (its run was --quick, or "
      "does not say)");
  verdict_with([](Inputs& in) { in.reports[3]["meta"]["git_sha"] = std::string(40, 'a'); }, "pytorch.columns",
               "PyTorch's operators report is of git aaaaaaa, seqbench's of git 3f5c2a9: not one run");
}

TEST(Targets, AnUnfilteredPartMakesAReportCompleteAndAMemoryCheckIsHeldToTheIssuesLimit) {
  Inputs in = all_met();
  in.reports[1]["meta"]["parts"] = json::array({{{"filter", nullptr}}, {{"filter", "adam"}}});
  // A check that passed against a looser tolerance than the issue's 0.7 does not meet the target.
  for (json& check : in.reports[2]["checks"])
    if (check.at("name") == layer_experiments::memory_check_names()[0]) {
      check["max_rel_err"] = 0.75;
      check["tolerance"] = 0.8;
    }
  // The runner's own record of an experiment without a torch equivalent fails #6 where the
  // experiment is one the tables compare.
  in.reports[3]["experiments"].erase(1);
  in.reports[3]["unmapped"].push_back(
      {{"experiment", "dropout_bwd/bf16/small"}, {"reason", "skipped: params.p = 1 is outside [0, 1)"}});
  const TargetsEvaluation e = evaluate_targets(in.reports, in.names);
  EXPECT_EQ(target(e, "trainer.adam_copy_bw").verdict, TargetVerdict::met)
      << gaps(target(e, "trainer.adam_copy_bw"));
  const TargetResult& ratio = target(e, "layers.memory_ratio");
  EXPECT_EQ(ratio.verdict, TargetVerdict::missed);
  ASSERT_EQ(ratio.misses.size(), 1u);
  EXPECT_TRUE(contains(ratio.misses[0], "managed / baseline peak 0.750 (limit 0.70)"));
  const TargetResult& columns = target(e, "pytorch.columns");
  ASSERT_EQ(columns.misses.size(), 1u);
  EXPECT_TRUE(contains(columns.misses[0],
                       "operators/dropout_bwd/bf16/small: PyTorch skipped: params.p = 1 is outside [0, 1)"));
}

// The operator suite writes params.elements, which operators.copy_bw reads: here recomputed from
// each family's own shape params, for the full and the quick shapes, so that a family that counted
// another tensor (or forgot the key) fails.
TEST(Targets, EveryOperatorExperimentCountsTheElementsOfItsMainTensor) {
  for (const bool quick : {false, true}) {
    SuiteOptions options;
    options.quick = quick;
    const auto suites = all_suites(options);
    const SuiteSpec& ops = find_suite(suites, "operators");
    ASSERT_FALSE(ops.experiments.empty());
    std::map<std::string, int> families;
    for (const ExperimentSpec& e : ops.experiments) {
      const json& p = e.params;
      ASSERT_TRUE(p.contains("elements") && p.at("elements").is_number_integer()) << e.name;
      const std::string family = e.name.substr(0, e.name.find('/'));
      const auto i = [&](const char* key) { return p.at(key).get<std::int64_t>(); };
      std::int64_t want = -1;
      if (family == "layernorm_fwd" || family == "layernorm_bwd" || family == "embedding_fwd" ||
          family == "embedding_bwd") {
        want = i("tokens") * i("hidden");
      } else if (family == "softmax_fwd" || family == "softmax_bwd") {
        want = i("batch") * i("heads") * i("q_len") * i("k_len");
      } else if (family == "dropout_fwd" || family == "dropout_bwd") {
        want = i("elements");
      } else if (family.rfind("bias_", 0) == 0) {
        want = i("rows") * i("cols");
      } else if (family == "cross_entropy_fwd" || family == "cross_entropy_bwd") {
        want = i("rows") * i("vocab");
      } else if (family == "qkv_split_fwd" || family == "qkv_split_bwd" || family == "merge_heads") {
        want = i("tokens") * i("projections") * i("hidden");
      }
      ASSERT_NE(want, -1) << "a family this test does not know: " << family;
      EXPECT_EQ(i("elements"), want) << e.name;
      EXPECT_GT(want, 0) << e.name;
      ++families[family];
    }
    EXPECT_EQ(families.size(), 17u) << "quick " << quick;
  }
}

TEST(Targets, CpuAndQuickReportsAreLeftOutAndSaidSo) {
  json cpu = report("memory");
  cpu["meta"]["device"] = nullptr;
  json quick = operators_report();
  quick["meta"]["quick"] = true;
  json unsaid = trainer_report();  // an older report: neither meta.quick nor parts
  unsaid["meta"].erase("quick");
  const TargetsEvaluation e =
      evaluate_targets({cpu, quick, unsaid}, {"cpu/memory.json", "quick/operators.json", "old/trainer.json"});
  EXPECT_TRUE(e.devices.empty());
  ASSERT_EQ(e.ignored.size(), 3u);
  EXPECT_TRUE(contains(e.ignored[0], "cpu/memory.json: no GPU"));
  EXPECT_TRUE(contains(e.ignored[1], "quick/operators.json: a --quick run"));
  EXPECT_TRUE(contains(e.ignored[2], "old/trainer.json: does not say whether its shapes are --quick"));
  EXPECT_EQ(targets_exit_code(e), 3);
  EXPECT_TRUE(contains(render_targets(e), "No report of a GPU run among the inputs"));
}

TEST(Targets, DevicesAreJudgedApartAndAnotherGpuIsNoted) {
  Inputs in = all_met();
  json a100 = operators_report();
  a100["meta"]["device"]["name"] = "NVIDIA A100-SXM4-80GB";
  a100["experiments"][0]["variants"][1] = variant("fused", 60, 2.0);
  in.add(a100, "a100/operators.json");
  const TargetsEvaluation e = evaluate_targets(in.reports, in.names);
  ASSERT_EQ(e.devices.size(), 2u);
  EXPECT_EQ(target(e, "operators.copy_bw", 0).verdict, TargetVerdict::met);
  EXPECT_EQ(target(e, "operators.copy_bw", 1).verdict, TargetVerdict::missed);
  EXPECT_EQ(target(e, "trainer.adam_copy_bw", 1).verdict, TargetVerdict::not_measured);
  ASSERT_EQ(e.devices[1].notes.size(), 1u);
  EXPECT_TRUE(contains(e.devices[1].notes[0],
                       "measured on NVIDIA A100-SXM4-80GB: the issues ask for an H100 or H200"));
  // Every case of it passed, but on another GPU: not the issues' evidence.
  const TargetResult& faster = target(e, "operators.faster", 1);
  EXPECT_EQ(faster.passed, faster.total);
  EXPECT_EQ(faster.verdict, TargetVerdict::not_measured);
  EXPECT_TRUE(contains(gaps(faster), "the issues ask for an H100 or H200"));
  EXPECT_EQ(targets_exit_code(e), 1);
}

TEST(Targets, TwoReportsOfOneSuiteOnOneDeviceAreAnError) {
  Inputs in = all_met();
  in.add(operators_report(), "old/operators.json");
  EXPECT_TRUE(contains(error_message([&] { evaluate_targets(in.reports, in.names); }),
                       "two reports of suite 'operators' on NVIDIA H100 80GB HBM3: 'operators.json' and "
                       "'old/operators.json'; give one"));
  in = all_met();
  in.add(torch_report(layers_report()), "again/pytorch-layers.json");
  EXPECT_TRUE(contains(error_message([&] { evaluate_targets(in.reports, in.names); }),
                       "two PyTorch reports of suite 'layers'"));
  json invalid = operators_report();
  invalid["experiments"][0]["variants"][0].erase("median_ms");
  EXPECT_TRUE(contains(error_message([&] { evaluate_targets({invalid}, {"bad.json"}); }),
                       "report 'bad.json' does not match seqbench.report/1"));
}

// run_cli's exit code, standard output and standard error.
std::tuple<int, std::string, std::string> cli(const std::vector<std::string>& args) {
  std::vector<const char*> argv;
  for (const auto& s : args) argv.push_back(s.c_str());
  std::ostringstream out, err;
  const int code = run_cli(static_cast<int>(argv.size()), argv.data(), out, err);
  return std::tuple{code, out.str(), err.str()};
}

// Writes every report of `in` into `dir`; returns their paths.
std::vector<std::string> write_inputs(const Inputs& in, const std::filesystem::path& dir) {
  std::filesystem::create_directories(dir);
  std::vector<std::string> paths;
  for (std::size_t i = 0; i < in.reports.size(); ++i) {
    write_json_atomic(dir / in.names[i], in.reports[i]);
    paths.push_back((dir / in.names[i]).string());
  }
  return paths;
}

TEST(Targets, TheCommandWritesTheFileAtomicallyAndExitsWithTheVerdict) {
  testing::ScratchDir dir;
  std::vector<std::string> args = {"seqbench", "targets"};
  for (const std::string& p : write_inputs(all_met(), dir.path())) args.push_back(p);
  auto [code, out, err] = cli(args);
  EXPECT_EQ(code, 0) << err;
  EXPECT_TRUE(contains(out, "## NVIDIA H100 80GB HBM3"));

  args.push_back("--output");
  args.push_back((dir.path() / "TARGETS.md").string());
  std::tie(code, out, err) = cli(args);
  EXPECT_EQ(code, 0) << err;
  EXPECT_TRUE(contains(out, "targets: 8 met, 0 missed, 0 not measured, over 1 device(s)"));
  EXPECT_TRUE(contains(testing::read_file(dir.path() / "TARGETS.md"), "| #6 |"));

  // Bad input exits 2, apart from 1 (a target missed) and 3 (not measured).
  std::tie(code, out, err) = cli({"seqbench", "targets", (dir.path() / "missing.json").string()});
  EXPECT_EQ(code, 2);
  EXPECT_TRUE(contains(err, "seqbench: error: report '")) << err;
  EXPECT_TRUE(contains(err, "missing.json' not found")) << err;
}

// `seqbench run` writes TARGETS.md beside TABLES.md from the reports in its folder, and without a GPU
// committed-targets.md from the committed ones; a folder with no GPU report gets none, and loses the
// one an earlier run left.
TEST(Targets, RunJudgesTheReportsInItsFolderAndTheCommittedOnes) {
  testing::ScratchDir dir;
  const auto out_dir = dir.path() / "out";
  const auto none = (dir.path() / "none").string();
  const std::vector<std::string> run = {"seqbench",       "run",           "--suite", "reference", "--out",
                                        out_dir.string(), "--reports-dir", none};
  write_inputs(all_met(), out_dir);
  auto [code, out, err] = cli(run);
  ASSERT_EQ(code, 0) << out << err;
  EXPECT_TRUE(contains(out, "targets of the report(s) in " + out_dir.string() +
                                ": 8 met, 0 missed, 0 not measured, over 1 device(s)"))
      << out;
  const std::string targets = testing::read_file(out_dir / "TARGETS.md");
  EXPECT_TRUE(contains(targets, "## NVIDIA H100 80GB HBM3")) << targets;
  EXPECT_TRUE(contains(targets, "reference.json")) << targets;  // the CPU report, named and left out

  // Two reports of one suite: no verdict, and no TARGETS.md left from the run before.
  write_json_atomic(out_dir / "operators-again.json", operators_report());
  std::tie(code, out, err) = cli(run);
  EXPECT_EQ(code, 0) << out << err;  // the run itself succeeded
  EXPECT_TRUE(contains(out, "targets not written: ")) << out;
  EXPECT_TRUE(contains(out, "removed the stale " + (out_dir / "TARGETS.md").string())) << out;
  EXPECT_FALSE(std::filesystem::exists(out_dir / "TARGETS.md"));

  // Only CPU reports: nothing to judge, so no file.
  const auto cpu_dir = dir.path() / "cpu";
  std::tie(code, out, err) =
      cli({"seqbench", "run", "--suite", "reference", "--out", cpu_dir.string(), "--reports-dir", none});
  EXPECT_EQ(code, 0) << out << err;
  EXPECT_FALSE(std::filesystem::exists(cpu_dir / "TARGETS.md")) << out;
  EXPECT_FALSE(contains(out, "targets of")) << out;

  if (!testing::gpu_absence_reason().empty()) {
    // No GPU: the committed reports (here one device's folder of them) are judged too.
    const auto committed = dir.path() / "reports";
    write_inputs(all_met(), committed / "h100");
    std::tie(code, out, err) = cli({"seqbench", "run", "--suite", "reference", "--out", cpu_dir.string(),
                                    "--reports-dir", committed.string()});
    EXPECT_EQ(code, 0) << out << err;
    EXPECT_TRUE(contains(out, "targets of the committed report(s) under " + committed.string() + ": 8 met"))
        << out;
    EXPECT_TRUE(contains(testing::read_file(cpu_dir / "committed-targets.md"), "| #6 |"));
  }
}

}  // namespace
}  // namespace seqbench
