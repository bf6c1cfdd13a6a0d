#include "suites/report.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cmath>
#include <cstdint>
#include <fstream>
#include <limits>

#include "suites_test_util.h"

namespace seqbench {
namespace {

using nlohmann::json;
using testing::contains;
using testing::error_message;
using testing::read_file;
using testing::ScratchDir;
using testing::valid_report;
using Problems = std::vector<std::string>;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// The problems of valid_report() after `change`.
template <typename Change>
Problems problems_after(Change change) {
  json report = valid_report();
  change(report);
  return validate_report(report);
}

json& variant(json& report, int experiment, int index) {
  return report["experiments"][experiment]["variants"][index];
}

// ---------------------------------------------------------------------------------------------
// validate_report: valid documents
// ---------------------------------------------------------------------------------------------

TEST(ValidateReport, AcceptsAFullReport) {
  EXPECT_EQ(validate_report(valid_report()), Problems{});
}

TEST(ValidateReport, AcceptsNoDeviceWithNullCopyShares) {
  EXPECT_EQ(problems_after([](json& r) {
              r["meta"]["device"] = nullptr;
              for (json& v : r["experiments"][0]["variants"]) v["pct_copy_bw"] = nullptr;
            }),
            Problems{});
}

TEST(ValidateReport, AcceptsUnmeasuredCopyBandwidth) {
  EXPECT_EQ(problems_after([](json& r) {
              r["meta"]["device"]["copy_gbps"] = nullptr;
              for (json& v : r["experiments"][0]["variants"]) v["pct_copy_bw"] = nullptr;
            }),
            Problems{});
}

TEST(ValidateReport, AcceptsUnknownFieldsEverywhere) {
  // Forward compatibility: a newer writer's extra members are ignored.
  EXPECT_EQ(problems_after([](json& r) {
              r["future"] = {1, 2};
              r["meta"]["versions"] = {{"nvcc", "13.0"}};
              r["meta"]["build"]["cxx_compiler"] = "g++ 12";
              r["meta"]["device"]["memory_bus_bits"] = 5120;
              variant(r, 0, 0)["mean_ms"] = 0.0252;
              r["checks"][0]["seed"] = 7;
            }),
            Problems{});
}

TEST(ValidateReport, AcceptsOptionalMembersWhenPresent) {
  EXPECT_EQ(problems_after([](json& r) {
              r["meta"]["device"]["clocks"]["sm_mhz"] = 1755;
              r["meta"]["device"]["clocks"]["memory_mhz"] = nullptr;
              r["meta"]["device"]["clocks"]["clock_event_reasons"] = "sw_power_cap";
              r["skipped"] = {{{"suite", "decoding"}, {"reason", "no CUDA device"}}};
              r["experiments"].push_back(r["experiments"][0]);  // params may repeat; names may not
              r["experiments"].back()["name"] = "layernorm_fwd/again";
              r["meta"]["git_sha"] = "unknown";
              r["meta"]["build"]["flags"] = "";
              r["experiments"][0]["notes"] = {{"tuner", {{"entries", json::array()}}}};
            }),
            Problems{});
}

TEST(ValidateReport, RunControlMembersAreChecked) {
  // What `seqbench run` records of how it ran, and what it did not run (review B, F).
  EXPECT_EQ(problems_after([](json& r) {
              r["meta"]["quick"] = false;
              r["meta"]["filter"] = nullptr;
              r["meta"]["repetitions"] = 3;
              r["meta"]["timer_policy"] = {{"name", "default"}};
              r["meta"]["parts"] = json::array({{{"filter", "x"}}});
              r["not_run"] = {{{"experiment", "softmax_fwd"}, {"reason", "not started: time budget"}}};
            }),
            Problems{});
  EXPECT_EQ(problems_after([](json& r) {
              r["meta"]["quick"] = "yes";
              r["meta"]["repetitions"] = 0;
              r["not_run"] = {{{"experiment", "softmax_fwd"}}};
            }),
            (Problems{"meta.quick: expected boolean, got string", "meta.repetitions: must be > 0, got 0",
                      "not_run[0].reason: missing"}));
}

TEST(ValidateReport, PartsMembersHaveTheirTypes) {
  // merge_reports and the quick flag read these by type: a string part, or git_dirty "no", threw a
  // library type_error after the whole run had been measured.
  EXPECT_EQ(problems_after([](json& r) {
              r["meta"]["parts"] = json::array({{{"timestamp", "2026-11-22T10:00:00Z"},
                                                 {"host", "h"},
                                                 {"git_dirty", false},
                                                 {"source_hash", nullptr},
                                                 {"filter", nullptr},
                                                 {"quick", nullptr},
                                                 {"checks_run", true},
                                                 {"copy_gbps", 2950.0},
                                                 {"id", "pytorch's own"}}});
            }),
            Problems{});
  EXPECT_EQ(problems_after([](json& r) {
              r["meta"]["parts"] = json::array({"p1",
                                                {{"git_dirty", "no"},
                                                 {"filter", ""},
                                                 {"quick", 1},
                                                 {"checks_run", nullptr},
                                                 {"copy_gbps", 0.0}}});
            }),
            (Problems{"meta.parts[0]: expected object, got string",
                      "meta.parts[1].git_dirty: expected boolean, got string",
                      "meta.parts[1].filter: must not be empty",
                      "meta.parts[1].quick: expected boolean or null, got integer",
                      "meta.parts[1].checks_run: expected boolean, got null",
                      "meta.parts[1].copy_gbps: must be > 0, got 0.0"}));
}

TEST(ValidateReport, RejectsExperimentsThatShareAName) {
  // The runner's sample maps, merges, tables and targets key on the name.
  EXPECT_EQ(problems_after([](json& r) {
              r["experiments"].push_back(r["experiments"][0]);
              r["experiments"].back()["params"]["other"] = 1;
            }),
            Problems{"experiments[" + std::to_string(valid_report()["experiments"].size()) + "].name: \"" +
                     valid_report()["experiments"][0]["name"].get<std::string>() +
                     "\" is also experiments[0]'s name"});
}

TEST(ValidateReport, AcceptsEmptyExperimentsAndChecks) {
  EXPECT_EQ(problems_after([](json& r) {
              r["experiments"] = json::array();
              r["checks"] = json::array();
            }),
            Problems{});
}

TEST(ValidateReport, AcceptsTheLargestSeed) {
  EXPECT_EQ(problems_after([](json& r) { r["meta"]["seed"] = std::numeric_limits<std::uint64_t>::max(); }),
            Problems{});
  // Parsed, not built: nlohmann keeps it unsigned.
  EXPECT_EQ(problems_after([](json& r) { r["meta"]["seed"] = json::parse("18446744073709551615"); }),
            Problems{});
}

TEST(ValidateReport, AcceptsTimestampForms) {
  for (const char* ts : {"2026-11-22T10:00:00Z", "2026-11-22T11:00:00+01:00", "2026-11-22T04:30:00-05:30",
                         "2024-02-29T23:59:60.123456Z"}) {
    EXPECT_EQ(problems_after([&](json& r) { r["meta"]["timestamp"] = ts; }), Problems{}) << ts;
  }
}

TEST(ValidateReport, AcceptsNullRelativeErrorOnAPassingCheck) {
  // Infinite relative error where the reference is 0, while the absolute error is within bounds.
  EXPECT_EQ(problems_after([](json& r) { r["checks"][0]["max_rel_err"] = nullptr; }), Problems{});
}

TEST(ValidateReport, AcceptsNullErrorsOnAFailingCheck) {
  EXPECT_EQ(problems_after([](json& r) {
              r["checks"][1]["max_abs_err"] = nullptr;
              r["checks"][1]["max_rel_err"] = nullptr;
              r["checks"][1]["tolerance"] = nullptr;
            }),
            Problems{});
}

// ---------------------------------------------------------------------------------------------
// validate_report: each violation, with its exact path
// ---------------------------------------------------------------------------------------------

TEST(ValidateReport, RejectsANonObject) {
  EXPECT_EQ(validate_report(json::array()), Problems{"(root): expected object, got array"});
}

TEST(ValidateReport, RejectsAnotherSchemaAloneWithoutFurtherNoise) {
  EXPECT_EQ(problems_after([](json& r) {
              r["schema"] = "seqbench.report/2";
              r.erase("meta");
            }),
            Problems{R"(schema: expected "seqbench.report/1", got "seqbench.report/2")"});
}

TEST(ValidateReport, RejectsMissingOrMistypedSchema) {
  EXPECT_EQ(problems_after([](json& r) { r.erase("schema"); }), Problems{"schema: missing"});
  EXPECT_EQ(problems_after([](json& r) { r["schema"] = 1; }),
            Problems{"schema: expected string, got integer"});
}

TEST(ValidateReport, RejectsMissingFields) {
  EXPECT_EQ(problems_after([](json& r) { variant(r, 0, 1).erase("median_ms"); }),
            Problems{"experiments[0].variants[1].median_ms: missing"});
  EXPECT_EQ(problems_after([](json& r) { r["meta"].erase("host"); }), Problems{"meta.host: missing"});
  EXPECT_EQ(problems_after([](json& r) { r["meta"]["device"].erase("copy_gbps"); }),
            Problems{"meta.device.copy_gbps: missing"});
  EXPECT_EQ(problems_after([](json& r) { r["meta"]["device"]["clocks"].erase("sm_max_mhz"); }),
            Problems{"meta.device.clocks.sm_max_mhz: missing"});
  EXPECT_EQ(problems_after([](json& r) { r["meta"].erase("device"); }), Problems{"meta.device: missing"});
  EXPECT_EQ(problems_after([](json& r) { variant(r, 0, 0).erase("gbps"); }),
            Problems{"experiments[0].variants[0].gbps: missing"});
  EXPECT_EQ(problems_after([](json& r) { r.erase("checks"); }), Problems{"checks: missing"});
  EXPECT_EQ(problems_after([](json& r) { r["checks"][1].erase("tolerance"); }),
            Problems{"checks[1].tolerance: missing"});
}

TEST(ValidateReport, RejectsWrongTypes) {
  EXPECT_EQ(problems_after([](json& r) { r["meta"]["device"]["sm_count"] = "132"; }),
            Problems{"meta.device.sm_count: expected integer, got string"});
  EXPECT_EQ(problems_after([](json& r) { variant(r, 0, 0)["samples"] = 2.5; }),
            Problems{"experiments[0].variants[0].samples: expected integer, got number"});
  EXPECT_EQ(problems_after([](json& r) { r["meta"]["git_dirty"] = "no"; }),
            Problems{"meta.git_dirty: expected boolean, got string"});
  EXPECT_EQ(problems_after([](json& r) { r["meta"]["device"] = "H100"; }),
            Problems{"meta.device: expected object or null, got string"});
  EXPECT_EQ(problems_after([](json& r) { r["experiments"] = json::object(); }),
            Problems{"experiments: expected array, got object"});
  EXPECT_EQ(problems_after([](json& r) { variant(r, 0, 1) = "fused"; }),
            Problems{"experiments[0].variants[1]: expected object, got string"});
  EXPECT_EQ(problems_after([](json& r) { r["experiments"][0]["params"] = json::array(); }),
            Problems{"experiments[0].params: expected object, got array"});
  EXPECT_EQ(problems_after([](json& r) { r["meta"]["device"]["clocks"]["sm_mhz"] = "1755"; }),
            Problems{"meta.device.clocks.sm_mhz: expected integer or null, got string"});
  EXPECT_EQ(problems_after([](json& r) { r["checks"][0]["detail"] = 3; }),
            Problems{"checks[0].detail: expected string, got integer"});
  EXPECT_EQ(problems_after([](json& r) { r["experiments"][0]["notes"] = "tuned"; }),
            Problems{"experiments[0].notes: expected object, got string"});
}

TEST(ValidateReport, RejectsEmptyNames) {
  EXPECT_EQ(problems_after([](json& r) { r["suite"] = ""; }), Problems{"suite: must not be empty"});
}

TEST(ValidateReport, RejectsOutOfRangeNumbers) {
  EXPECT_EQ(problems_after([](json& r) { r["meta"]["seed"] = -1; }),
            Problems{"meta.seed: must be >= 0, got -1"});
  EXPECT_EQ(problems_after([](json& r) { r["meta"]["device"]["sm_count"] = 0; }),
            Problems{"meta.device.sm_count: must be > 0, got 0"});
  EXPECT_EQ(problems_after([](json& r) { r["meta"]["device"]["copy_gbps"] = 0.0; }),
            Problems{"meta.device.copy_gbps: must be > 0, got 0.0"});
  EXPECT_EQ(problems_after([](json& r) { variant(r, 0, 0)["samples"] = 0; }),
            Problems{"experiments[0].variants[0].samples: must be > 0, got 0"});
  EXPECT_EQ(problems_after([](json& r) { variant(r, 0, 0)["cv"] = -0.5; }),
            Problems{"experiments[0].variants[0].cv: must be >= 0, got -0.5"});
  EXPECT_EQ(problems_after([](json& r) { r["checks"][0]["max_abs_err"] = -1e-3; }),
            Problems{"checks[0].max_abs_err: must be >= 0, got -0.001"});
}

TEST(ValidateReport, RejectsNonFiniteNumbersBuiltInMemory) {
  // dump() would silently turn these into null; validation must catch them first.
  EXPECT_EQ(problems_after([](json& r) { variant(r, 0, 1)["median_ms"] = kNaN; }),
            Problems{"experiments[0].variants[1].median_ms: must be finite, got nan"});
  EXPECT_EQ(problems_after([](json& r) { variant(r, 0, 1)["gbps"] = kInf; }),
            Problems{"experiments[0].variants[1].gbps: must be finite, got inf"});
}

TEST(ValidateReport, RejectsABaselineThatIsNotAVariant) {
  EXPECT_EQ(problems_after([](json& r) { r["experiments"][0]["baseline"] = "torch"; }),
            Problems{R"(experiments[0].baseline: "torch" is not the name of any variant)"});
}

TEST(ValidateReport, RejectsEmptyOrDuplicateVariants) {
  EXPECT_EQ(problems_after([](json& r) { r["experiments"][0]["variants"] = json::array(); }),
            Problems{"experiments[0].variants: must not be empty"});
  EXPECT_EQ(
      problems_after([](json& r) { variant(r, 0, 1)["name"] = "eager"; }),
      // Now both are "the baseline", so the second's speedup of 4.048 is wrong too.
      (Problems{R"(experiments[0].variants[1].name: duplicate "eager" (also variants[0]))",
                "experiments[0].variants[1].speedup: the baseline's own speedup must be 1, got 4.048"}));
}

// A component (component_of) names a whole, measured variant of its own experiment.
TEST(ValidateReport, AComponentNamesAWholeVariantOfItsExperiment) {
  const auto with_part = [](const json& of) {
    return [of](json& r) {
      json part = variant(r, 0, 1);
      part["name"] = "fused_part";
      part["component_of"] = of;
      r["experiments"][0]["variants"].push_back(part);
    };
  };
  EXPECT_EQ(problems_after(with_part("fused")), Problems{});
  EXPECT_EQ(problems_after(with_part("nope")),
            Problems{R"(experiments[0].variants[2].component_of: "nope" is not the name of any variant)"});
  EXPECT_EQ(problems_after(with_part("fused_part")),
            Problems{"experiments[0].variants[2].component_of: a variant cannot be a component of itself"});
  EXPECT_EQ(
      problems_after(with_part("eager")),
      Problems{
          R"(experiments[0].variants[2].component_of: "eager" is the baseline; a component is of a measured whole)"});
  EXPECT_EQ(problems_after(with_part("")),
            Problems{"experiments[0].variants[2].component_of: must not be empty"});
  EXPECT_EQ(problems_after(with_part(3)),
            Problems{"experiments[0].variants[2].component_of: expected string, got integer"});
  // A component of a component, and a baseline that calls itself a component.
  EXPECT_EQ(problems_after([&](json& r) {
              with_part("fused")(r);
              json deeper = variant(r, 0, 2);
              deeper["name"] = "fused_part_part";
              deeper["component_of"] = "fused_part";
              r["experiments"][0]["variants"].push_back(deeper);
            }),
            Problems{R"(experiments[0].variants[3].component_of: "fused_part" is itself a component)"});
  EXPECT_EQ(problems_after([](json& r) { variant(r, 0, 0)["component_of"] = "fused"; }),
            Problems{"experiments[0].variants[0].component_of: the baseline cannot be a component"});
}

TEST(ValidateReport, RejectsPercentilesOutOfOrder) {
  EXPECT_EQ(problems_after([](json& r) { variant(r, 0, 0)["p20_ms"] = 0.03; }),
            Problems{"experiments[0].variants[0].p20_ms: must be <= median_ms (0.0251), got 0.03"});
  EXPECT_EQ(problems_after([](json& r) { variant(r, 0, 1)["p80_ms"] = 0.006; }),
            Problems{"experiments[0].variants[1].p80_ms: must be >= median_ms (0.0062), got 0.006"});
}

TEST(ValidateReport, RejectsABaselineSpeedupOtherThanOne) {
  EXPECT_EQ(problems_after([](json& r) { variant(r, 0, 0)["speedup"] = 1.01; }),
            Problems{"experiments[0].variants[0].speedup: the baseline's own speedup must be 1, got 1.01"});
  EXPECT_EQ(problems_after([](json& r) { variant(r, 0, 1)["speedup"] = nullptr; }),
            Problems{"experiments[0].variants[1].speedup: expected number, got null"});
}

TEST(ValidateReport, RejectsRatesInconsistentWithTheirAmounts) {
  EXPECT_EQ(
      problems_after([](json& r) { variant(r, 0, 0)["gbps"] = nullptr; }),
      // and with gbps gone, a copy share can no longer exist
      (Problems{"experiments[0].variants[0].gbps: expected number because bytes > 0, got null",
                "experiments[0].variants[0].pct_copy_bw: must be null because gbps or meta.device.copy_gbps "
                "is null, got 22.66"}));
  EXPECT_EQ(problems_after([](json& r) { variant(r, 0, 0)["tflops"] = 1.5; }),
            Problems{"experiments[0].variants[0].tflops: must be null because flops is 0, got 1.5"});
}

TEST(ValidateReport, RejectsCopySharesWithoutACopyBandwidth) {
  EXPECT_EQ(
      problems_after([](json& r) {
        r["meta"]["device"] = nullptr;
        variant(r, 0, 1)["pct_copy_bw"] = nullptr;
      }),
      Problems{"experiments[0].variants[0].pct_copy_bw: must be null because gbps or meta.device.copy_gbps "
               "is null, got 22.66"});
  EXPECT_EQ(problems_after([](json& r) { variant(r, 0, 1)["pct_copy_bw"] = nullptr; }),
            Problems{"experiments[0].variants[1].pct_copy_bw: expected number because gbps and "
                     "meta.device.copy_gbps are known, got null"});
}

TEST(ValidateReport, RejectsAPassingCheckWithNonFiniteErrorOrTolerance) {
  EXPECT_EQ(problems_after([](json& r) { r["checks"][0]["max_abs_err"] = nullptr; }),
            Problems{"checks[0].passed: true, but max_abs_err is null (NaN or infinite)"});
  EXPECT_EQ(problems_after([](json& r) { r["checks"][0]["tolerance"] = nullptr; }),
            Problems{"checks[0].passed: true, but tolerance is null (NaN or infinite)"});
}

TEST(ValidateReport, RejectsBadTimestamps) {
  for (const char* ts :
       {"2026-11-22 10:00:00Z", "2026-11-22T10:00:00", "2026-11-22T10:00Z", "2026-02-29T10:00:00Z",
        "2026-11-31T10:00:00Z", "2026-13-01T10:00:00Z", "2026-11-22T24:00:00Z", "2026-11-22T10:00:00+1:00",
        "2026-11-22T10:00:00.Z", "2026-11-22T10:00:00Zjunk", "yesterday"}) {
    EXPECT_EQ(
        problems_after([&](json& r) { r["meta"]["timestamp"] = ts; }),
        Problems{"meta.timestamp: expected ISO 8601 like \"2026-11-22T10:00:00Z\" or \"...+01:00\", got \"" +
                 std::string(ts) + "\""});
  }
}

TEST(ValidateReport, RejectsBadGitShaAndComputeCapability) {
  EXPECT_EQ(problems_after([](json& r) { r["meta"]["git_sha"] = "3f5c2a9"; }),
            Problems{R"(meta.git_sha: expected 40 hex digits or "unknown", got "3f5c2a9")"});
  EXPECT_EQ(problems_after([](json& r) { r["meta"]["device"]["compute_capability"] = "90"; }),
            Problems{R"(meta.device.compute_capability: expected "major.minor" like "9.0", got "90")"});
}

TEST(ValidateReport, RejectsIncompleteSkippedEntries) {
  EXPECT_EQ(problems_after([](json& r) {
              r["skipped"] = {{{"suite", "decoding"}}, 3};
            }),
            (Problems{"skipped[0].reason: missing", "skipped[1]: expected object, got integer"}));
}

TEST(ValidateReport, ReportsEveryProblemNotJustTheFirst) {
  EXPECT_EQ(problems_after([](json& r) {
              r.erase("suite");
              r["meta"]["host"] = 1;
              r["checks"][1]["passed"] = nullptr;
            }),
            (Problems{"suite: missing", "meta.host: expected string, got integer",
                      "checks[1].passed: expected boolean, got null"}));
}

TEST(ValidateReport, CutsLongValuesShortInMessages) {
  const Problems problems = problems_after([](json& r) { r["meta"]["git_sha"] = std::string(500, 'x'); });
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_LT(problems[0].size(), 120u);
  EXPECT_TRUE(contains(problems[0], "...")) << problems[0];
}

TEST(RequireValidReport, SummarizesTheFirstThreeProblemsOnOneLine) {
  json report = valid_report();
  for (const char* key : {"suite", "meta", "experiments", "checks", "schema"}) report.erase(key);
  EXPECT_EQ(
      error_message([&] { require_valid_report(report, "report 'x.json'"); }),
      "report 'x.json' does not match seqbench.report/1: schema: missing; suite: missing; meta: missing "
      "(and 2 more)");
  EXPECT_NO_THROW(require_valid_report(valid_report(), "report 'x.json'"));
}

TEST(ReportsReadme, EveryJsonExampleIsValid) {
  // The schema page shows example documents; keep them true to the code.
  const std::string text = read_file(SEQBENCH_REPORTS_README);
  ASSERT_FALSE(text.empty()) << "cannot read " << SEQBENCH_REPORTS_README;
  int examples = 0;
  for (std::size_t start = text.find("```json\n"); start != std::string::npos;
       start = text.find("```json\n", start + 1)) {
    const std::size_t body = start + 8;
    const std::size_t end = text.find("\n```", body);
    ASSERT_NE(end, std::string::npos);
    const json doc = json::parse(text.substr(body, end - body));
    EXPECT_EQ(validate_report(doc), Problems{}) << "example " << examples;
    ++examples;
  }
  EXPECT_EQ(examples, 2);
}

// ---------------------------------------------------------------------------------------------
// Builders
// ---------------------------------------------------------------------------------------------

SampleStats stats_with_median(double median) {
  SampleStats s;
  s.samples = 10;
  s.median = median;
  s.p20 = 0.9 * median;
  s.p80 = 1.1 * median;
  s.mean = median;
  s.stddev = 0.05 * median;
  s.cv = 0.05;
  return s;
}

TEST(MakeVariant, ComputesRatesFromTheMedian) {
  const json v = make_variant("fused", stats_with_median(2.0), 4e9, 1e12, 2500.0);
  EXPECT_EQ(v["name"], "fused");
  EXPECT_EQ(v["samples"], 10);
  EXPECT_DOUBLE_EQ(v["median_ms"].get<double>(), 2.0);
  EXPECT_DOUBLE_EQ(v["p20_ms"].get<double>(), 1.8);
  EXPECT_DOUBLE_EQ(v["p80_ms"].get<double>(), 2.2);
  EXPECT_DOUBLE_EQ(v["cv"].get<double>(), 0.05);
  EXPECT_DOUBLE_EQ(v["gbps"].get<double>(), 2000.0);       // 4e9 B / 2 ms
  EXPECT_DOUBLE_EQ(v["tflops"].get<double>(), 500.0);      // 1e12 / 2 ms
  EXPECT_DOUBLE_EQ(v["pct_copy_bw"].get<double>(), 80.0);  // 2000 / 2500
  EXPECT_TRUE(v["speedup"].is_null());                     // until finalize_speedups
}

TEST(MakeVariant, ZeroAmountsAndUnknownCopyBandwidthGiveNulls) {
  const json v = make_variant("eager", stats_with_median(1.0), 0.0, 0.0, 2500.0);
  EXPECT_TRUE(v["gbps"].is_null());
  EXPECT_TRUE(v["tflops"].is_null());
  EXPECT_TRUE(v["pct_copy_bw"].is_null());
  const json w = make_variant("eager", stats_with_median(1.0), 1e6, 0.0, std::nullopt);
  EXPECT_DOUBLE_EQ(w["gbps"].get<double>(), 1.0);
  EXPECT_TRUE(w["pct_copy_bw"].is_null());
}

TEST(MakeVariant, RejectsUnusableInput) {
  EXPECT_EQ(error_message([] { make_variant("v", stats_with_median(0.0), 1, 1, std::nullopt); }),
            "variant 'v': times 0 / 0 / 0 ms (p20/median/p80) are not all positive and finite");
  EXPECT_EQ(error_message([] { make_variant("v", stats_with_median(1.0), -1, 1, std::nullopt); }),
            "variant 'v': bytes -1 is not >= 0");
  EXPECT_EQ(error_message([] { make_variant("v", stats_with_median(1.0), 1, kNaN, std::nullopt); }),
            "variant 'v': flops nan is not >= 0");
  EXPECT_EQ(error_message([] { make_variant("v", stats_with_median(1.0), 1, 1, 0.0); }),
            "variant 'v': copy bandwidth 0 GB/s is not > 0");
  EXPECT_EQ(error_message([] { make_variant("", stats_with_median(1.0), 1, 1, std::nullopt); }),
            "a variant needs a name");
  EXPECT_EQ(error_message([] { make_variant("v", SampleStats{}, 1, 1, std::nullopt); }),
            "variant 'v' has no samples");
}

json experiment_of(const std::string& baseline) {
  return {{"name", "softmax"},
          {"params", {{"rows", 8}}},
          {"baseline", baseline},
          {"variants",
           {make_variant("eager", stats_with_median(4.0), 8e6, 0, 3000.0),
            make_variant("fused", stats_with_median(1.0), 8e6, 0, 3000.0),
            make_variant("slow", stats_with_median(8.0), 8e6, 0, 3000.0)}}};
}

TEST(FinalizeSpeedups, DividesTheBaselineMedianByEachMedian) {
  json e = experiment_of("eager");
  finalize_speedups(e);
  EXPECT_EQ(e["variants"][0]["speedup"].get<double>(), 1.0);
  EXPECT_DOUBLE_EQ(e["variants"][1]["speedup"].get<double>(), 4.0);
  EXPECT_DOUBLE_EQ(e["variants"][2]["speedup"].get<double>(), 0.5);

  // What the builders make is a valid report.
  json report = valid_report();
  report["experiments"] = {e};
  EXPECT_EQ(validate_report(report), Problems{});
}

TEST(FinalizeSpeedups, RejectsAMissingBaseline) {
  json e = experiment_of("torch");
  EXPECT_EQ(error_message([&] { finalize_speedups(e); }),
            "experiment 'softmax': baseline 'torch' is not among its variants");
  e.erase("baseline");
  EXPECT_EQ(error_message([&] { finalize_speedups(e); }), "experiment 'softmax' names no baseline variant");
}

TEST(FinalizeSpeedups, RejectsAVariantWithoutAMedian) {
  json e = experiment_of("eager");
  e["variants"][2].erase("median_ms");
  EXPECT_EQ(error_message([&] { finalize_speedups(e); }),
            "experiment 'softmax': variant 'slow' has no positive median_ms");
}

TEST(CheckToJson, WritesNonFiniteValuesAsNull) {
  const json c = check_to_json({"softmax vs reference", false, kNaN, kInf, 1e-3, "", {}});
  EXPECT_EQ(c, json::parse(R"({"name": "softmax vs reference", "passed": false, "max_abs_err": null,
                               "max_rel_err": null, "tolerance": 0.001})"));
  const json d = check_to_json({"ok", true, 1e-4, 2e-4, 1e-3, "seed 7", {}});
  EXPECT_EQ(d, json::parse(R"({"name": "ok", "passed": true, "max_abs_err": 0.0001, "max_rel_err": 0.0002,
                               "tolerance": 0.001, "detail": "seed 7"})"));
}

TEST(CheckToJson, WritesNamedValuesWithNonFiniteOnesAsNull) {
  CheckResult check{"trainer/drift/bf16/no_master", true, 1.25, 0.086, 0.2, "", {}};
  check.values = {{"drift", 0.80}, {"loss", kInf}, {"start_loss", -3.0}};
  const json c = check_to_json(check);
  EXPECT_EQ(c.at("values"), json::parse(R"({"drift": 0.8, "loss": null, "start_loss": -3.0})"));
  json report = valid_report();
  report["checks"] = {c};
  EXPECT_EQ(validate_report(report), Problems{});
  // A name given twice would silently keep one value: refused, naming the check.
  check.values.push_back({"drift", 0.5});
  EXPECT_NE(error_message([&] { check_to_json(check); }).find("'drift' is empty or repeated"),
            std::string::npos);
  check.values = {{"", 1.0}};
  EXPECT_THROW(check_to_json(check), Error);
}

TEST(ValidateReport, RejectsCheckValuesThatAreNotNamedNumbers) {
  EXPECT_EQ(problems_after([](json& r) { r["checks"][0]["values"] = json::array({1.0}); }),
            Problems{"checks[0].values: expected object, got array"});
  EXPECT_EQ(problems_after([](json& r) {
              r["checks"][0]["values"] = {{"drift", "0.8"}, {"loss", 2.6}};
            }),
            Problems{"checks[0].values.drift: expected number or null, got string"});
  EXPECT_EQ(problems_after([](json& r) {
              r["checks"][0]["values"] = {{"", 1}};
            }),
            Problems{"checks[0].values: a value's name must not be empty"});
  EXPECT_EQ(problems_after([](json& r) {
              r["checks"][0]["values"] = {{"drift", kNaN}};
            }),
            Problems{"checks[0].values.drift: must be finite, got nan"});
  EXPECT_EQ(problems_after([](json& r) {
              r["checks"][0]["values"] = {{"drift", nullptr}, {"n", -4}};
            }),
            Problems{});
}

TEST(CheckToJson, ANaNCheckClaimingToPassIsCaughtByValidation) {
  json report = valid_report();
  report["checks"] = {check_to_json({"bad", true, kNaN, 0.0, 1e-3, "", {}})};
  EXPECT_EQ(validate_report(report),
            Problems{"checks[0].passed: true, but max_abs_err is null (NaN or infinite)"});
}

// ---------------------------------------------------------------------------------------------
// write_json_atomic / write_file_atomic
// ---------------------------------------------------------------------------------------------

TEST(WriteJsonAtomic, WritesExactlyTheDocumentAndNothingElse) {
  ScratchDir dir;
  const auto path = dir.path() / "layernorm.json";
  write_json_atomic(path, valid_report());
  EXPECT_EQ(read_file(path), valid_report().dump(2) + "\n");
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"layernorm.json"});
}

TEST(WriteJsonAtomic, GivesTheFileOrdinaryPermissions) {
  ScratchDir dir;
  const auto path = dir.path() / "r.json";
  const mode_t old_mask = ::umask(022);
  write_json_atomic(path, json::object());
  ::umask(old_mask);
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0644u);  // not mkstemp's 0600
}

TEST(WriteJsonAtomic, ReplacesAnExistingFileWhole) {
  ScratchDir dir;
  const auto path = dir.path() / "r.json";
  std::ofstream(path) << std::string(10000, 'x');  // longer than what replaces it
  write_json_atomic(path, json{{"a", 1}});
  EXPECT_EQ(read_file(path), "{\n  \"a\": 1\n}\n");
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"r.json"});
}

TEST(WriteJsonAtomic, FailsInAMissingFolderAndCreatesNothing) {
  ScratchDir dir;
  const auto path = dir.path() / "no-such-dir" / "r.json";
  EXPECT_EQ(error_message([&] { write_json_atomic(path, json::object()); }),
            "cannot write '" + path.string() + "': cannot create a temporary file in '" +
                (dir.path() / "no-such-dir").string() + "': No such file or directory");
  EXPECT_EQ(dir.entries(), std::vector<std::string>{});
}

TEST(WriteJsonAtomic, FailsWhenTheParentIsAFileAndLeavesNoTemporary) {
  // chmod cannot stop root, and tests may run as root: a regular file as the "folder" fails for
  // everyone.
  ScratchDir dir;
  std::ofstream(dir.path() / "plain") << "data";
  const auto path = dir.path() / "plain" / "r.json";
  const std::string message = error_message([&] { write_json_atomic(path, json::object()); });
  EXPECT_TRUE(contains(message, "cannot write '" + path.string() + "'"));
  EXPECT_TRUE(contains(message, "Not a directory"));
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"plain"});
  EXPECT_EQ(read_file(dir.path() / "plain"), "data");
}

TEST(WriteJsonAtomic, RemovesTheTemporaryWhenTheRenameFails) {
  // The temporary is written completely, then the rename onto a non-empty folder fails: the
  // failure after the write must still leave no temporary behind.
  ScratchDir dir;
  const auto path = dir.path() / "r.json";
  std::filesystem::create_directory(path);
  std::ofstream(path / "keep") << "x";
  const std::string message = error_message([&] { write_json_atomic(path, valid_report()); });
  EXPECT_TRUE(contains(message, "cannot write '" + path.string() + "': rename failed: ")) << message;
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"r.json"});
  EXPECT_EQ(read_file(path / "keep"), "x");
}

TEST(WriteJsonAtomic, WritesInTheCurrentFolderForABareName) {
  ScratchDir dir;
  const auto cwd = std::filesystem::current_path();
  std::filesystem::current_path(dir.path());
  write_json_atomic("bare.json", json{{"k", "v"}});
  std::filesystem::current_path(cwd);
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"bare.json"});
}

TEST(WriteJsonAtomic, RejectsAPathWithoutAFileName) {
  ScratchDir dir;
  const auto path = dir.path() / "";
  EXPECT_EQ(error_message([&] { write_json_atomic(path, json::object()); }),
            "cannot write '" + path.string() + "': the path names no file");
}

TEST(WriteFileAtomic, WritesTextVerbatim) {
  ScratchDir dir;
  const std::string text = std::string("a,b\r\n\"c\"\n") + '\0' + "tail";
  write_file_atomic(dir.path() / "t.csv", text);
  EXPECT_EQ(read_file(dir.path() / "t.csv"), text);
}

// ---------------------------------------------------------------------------------------------
// read_report
// ---------------------------------------------------------------------------------------------

TEST(ReadReport, RoundTripsWhatWasWritten) {
  ScratchDir dir;
  write_json_atomic(dir.path() / "r.json", valid_report());
  EXPECT_EQ(read_report(dir.path() / "r.json"), valid_report());
}

TEST(ReadReport, MissingFile) {
  ScratchDir dir;
  const auto path = dir.path() / "x.json";
  EXPECT_EQ(error_message([&] { read_report(path); }), "report '" + path.string() + "' not found");
}

TEST(ReadReport, Folder) {
  ScratchDir dir;
  EXPECT_EQ(error_message([&] { read_report(dir.path()); }),
            "cannot read report '" + dir.path().string() + "': it is a directory");
}

TEST(ReadReport, MalformedJsonNamesTheByteOnOneLine) {
  ScratchDir dir;
  const auto path = dir.path() / "bad.json";
  std::ofstream(path) << "{\"schema\":\n x}";
  const std::string message = error_message([&] { read_report(path); });
  EXPECT_TRUE(
      contains(message, "report '" + path.string() + "' is not valid JSON at byte 13: parse error at line 2"))
      << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  EXPECT_EQ(message.find("[json.exception"), std::string::npos) << message;
}

TEST(ReadReport, EmptyFileIsMalformed) {
  ScratchDir dir;
  std::ofstream(dir.path() / "empty.json");
  EXPECT_TRUE(contains(error_message([&] { read_report(dir.path() / "empty.json"); }),
                       "is not valid JSON at byte 1"));
}

TEST(ReadReport, ANumberBeyondDoubleIsMalformedNotARawLibraryError) {
  // nlohmann throws out_of_range (not parse_error) for these: it escaped as a bare library error.
  ScratchDir dir;
  for (const std::string& number : std::vector<std::string>{"1e400", "-1e400", std::string(400, '9')}) {
    const auto path = dir.path() / "big.json";
    std::ofstream(path) << "{\"median_ms\": " << number << "}";
    const std::string message = error_message([&] { read_report(path); });
    EXPECT_TRUE(contains(message, "report '" + path.string() + "' is not valid JSON: number overflow"))
        << message;
    EXPECT_EQ(message.find("[json.exception"), std::string::npos) << message;
  }
}

TEST(ReadReport, NestingBeyondTheLimitIsRefusedBeforeAnythingRecurses) {
  // 100000 levels in 200 KB crashed `seqbench table` (dump() recurses); the limit is 64.
  ScratchDir dir;
  const auto path = dir.path() / "deep.json";
  const auto nested = [](std::size_t levels) {
    std::string text;
    for (std::size_t i = 0; i < levels; ++i) text += "[";
    for (std::size_t i = 0; i < levels; ++i) text += "]";
    return text;
  };
  json report = valid_report();
  std::string text = report.dump();
  // The root and "experiments" and its object and "params" are 4 levels; x adds the rest.
  const auto with_x = [&](std::size_t levels) {
    std::string t = text;
    const std::string key = "\"params\":{";
    const auto at = t.find(key);
    return t.insert(at + key.size(), "\"x\":" + nested(levels) + ",");
  };
  std::ofstream(path) << with_x(kMaxReportDepth - 4);
  EXPECT_NO_THROW(read_report(path));
  std::ofstream(path) << with_x(kMaxReportDepth - 3);
  EXPECT_EQ(error_message([&] { read_report(path); }),
            "report '" + path.string() +
                "' does not match seqbench.report/1: (root): nested 65 arrays/objects deep, more than the "
                "limit of 64");
  std::ofstream(path) << with_x(100000);
  EXPECT_TRUE(contains(error_message([&] { read_report(path); }), "nested 100004 arrays/objects deep"));
}

TEST(ReadReport, SchemaViolationsListTheProblems) {
  ScratchDir dir;
  const auto path = dir.path() / "r.json";
  json report = valid_report();
  report["meta"]["device"]["sm_count"] = "132";
  write_json_atomic(path, report);
  EXPECT_EQ(error_message([&] { read_report(path); }),
            "report '" + path.string() +
                "' does not match seqbench.report/1: meta.device.sm_count: expected integer, got string");
}

}  // namespace
}  // namespace seqbench

namespace seqbench {
namespace {

// The optional "accounting" list (the memory suite's Fig. 8 numbers).
TEST(ValidateReport, AccountingEntriesAreCheckedWhenPresent) {
  json report = valid_report();
  report["accounting"] = json::array({{{"name", "attention_backward"},
                                       {"params", {{"preset", "transformer-big"}}},
                                       {"naive_bytes", 419430400},
                                       {"managed_bytes", 318767104},
                                       {"ratio", 0.76}}});
  EXPECT_EQ(validate_report(report), std::vector<std::string>{});
  report["accounting"][0]["managed_bytes"] = -1;
  report["accounting"][0].erase("params");
  EXPECT_EQ(validate_report(report),
            (std::vector<std::string>{"accounting[0].params: missing",
                                      "accounting[0].managed_bytes: must be >= 0, got -1"}));
}

// suites/pytorch/ marks its reports with meta.runner and records its frameworks' versions.
TEST(ValidateReport, RunnerAndFrameworksAreCheckedWhenPresent) {
  json report = valid_report();
  report["meta"]["runner"] = "pytorch";
  report["meta"]["frameworks"] = {{"torch", "2.11.0"}, {"cudnn", nullptr}};
  EXPECT_EQ(validate_report(report), std::vector<std::string>{});
  report["meta"]["runner"] = "";
  report["meta"]["frameworks"]["triton"] = 3;
  EXPECT_EQ(validate_report(report), (std::vector<std::string>{"meta.runner: must not be empty",
                                                               "meta.frameworks.triton: expected string or "
                                                               "null, got integer"}));
  report["meta"]["runner"] = 1;
  report["meta"]["frameworks"] = "2.11";
  EXPECT_EQ(validate_report(report),
            (std::vector<std::string>{"meta.runner: expected string, got integer",
                                      "meta.frameworks: expected object, got string"}));
}

}  // namespace
}  // namespace seqbench
