// The `seqbench` command driven in-process: every bad input gets one line on stderr, a non-zero
// exit and no partial file; `run` without a GPU writes a valid report and names what it skipped.
#include "suites/cli.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "core/build_info.h"
#include "core/device_info.h"
#include "suites/gpu_timer.h"
#include "suites/report.h"
#include "suites_test_util.h"
#include "tests/common/gpu_test.h"

namespace seqbench {
namespace {

namespace fs = std::filesystem;

struct CliResult {
  int code;
  std::string out, err;
};

CliResult cli(std::vector<std::string> args) {
  args.insert(args.begin(), "seqbench");
  std::vector<const char*> argv;
  for (const auto& a : args) argv.push_back(a.c_str());
  std::ostringstream out, err;
  const int code = run_cli(static_cast<int>(argv.size()), argv.data(), out, err);
  return {code, out.str(), err.str()};
}

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("seqbench-cli-" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Asserts the shape every error must have: non-zero exit, exactly one line, the prefix, and
  // `needle` somewhere in it.
  static void expect_one_line_error(const CliResult& r, int code, const std::string& needle) {
    EXPECT_EQ(r.code, code) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_EQ(r.err.rfind("seqbench: error: ", 0), 0u) << r.err;
    EXPECT_NE(r.err.find(needle), std::string::npos) << "missing '" << needle << "' in: " << r.err;
  }
  std::size_t files_in(const fs::path& d) const {
    std::size_t n = 0;
    if (fs::exists(d))
      for ([[maybe_unused]] const auto& e : fs::recursive_directory_iterator(d)) ++n;
    return n;
  }
  void write(const fs::path& p, const std::string& text) { std::ofstream(p) << text; }

  fs::path dir_;
};

// An option value that names nothing is bad usage (exit 2), refused at parse time by every
// command that takes the option, before anything runs or is written.
TEST_F(CliTest, UnknownSuiteNamesTheValueAndTheKnownOnes) {
  const auto r = cli({"run", "--suite", "nope", "--out", (dir_ / "out").string()});
  expect_one_line_error(r, 2, "--suite: unknown suite 'nope'");
  EXPECT_NE(r.err.find("reference"), std::string::npos);
  EXPECT_EQ(files_in(dir_), 0u) << "an unknown suite must fail before anything is written";
  // the second of two is checked too, and check and dump refuse it the same way
  expect_one_line_error(
      cli({"run", "--suite", "reference", "--suite", "nope2", "--out", (dir_ / "out").string()}), 2,
      "unknown suite 'nope2'");
  expect_one_line_error(cli({"check", "--suite", "nope"}), 2, "unknown suite 'nope'");
  expect_one_line_error(cli({"dump", "--suite", "nope", "--out", (dir_ / "dump").string()}), 2,
                        "unknown suite 'nope'");
  EXPECT_EQ(files_in(dir_), 0u);
}

TEST_F(CliTest, UnknownOptionIsAUsageError) {
  expect_one_line_error(cli({"run", "--bogus"}), 2, "--bogus");
  expect_one_line_error(cli({"frobnicate"}), 2, "frobnicate");
  expect_one_line_error(cli({}), 2, "subcommand");
  expect_one_line_error(cli({"run", "--repetitions", "0"}), 2, "repetitions");
  for (const char* bad : {"0", "1001", "010", "-1", "0x10", "2.5", "18446744073709551617"})
    expect_one_line_error(cli({"run", "--repetitions", bad}), 2,
                          std::string("--repetitions: '") + bad + "' is not an integer from 1 to 1000");
}

TEST_F(CliTest, BadRegexIsRejectedBeforeRunning) {
  const auto r = cli({"run", "--filter", "(", "--out", (dir_ / "out").string()});
  expect_one_line_error(r, 2, "--filter: invalid --filter regex '('");
  expect_one_line_error(cli({"check", "--filter", "["}), 2, "--filter: invalid --filter regex '['");
  expect_one_line_error(cli({"dump", "--filter", "a{2", "--out", (dir_ / "dump").string()}), 2,
                        "--filter: invalid --filter regex 'a{2'");
  // Patterns std::regex's recursive compiler would overflow the stack on (a crash, not a message):
  // refused by length and by nesting, each at its limit + 1.
  const auto nested = [](int n) { return std::string(n, '(') + "a" + std::string(n, ')'); };
  expect_one_line_error(cli({"check", "--filter", std::string(65537, 'a')}), 2,
                        "it is 65537 characters long, the limit is 65536");
  expect_one_line_error(cli({"check", "--filter", nested(257)}), 2,
                        "its groups nest 257 deep, the limit is 256");
  // at the limits they are taken; escaped and bracketed parentheses are not groups
  for (const std::string& good : {std::string(65536, 'a'), nested(256), "\\(" + nested(256) + "\\)",
                                  "[(]" + nested(256), std::string(300, '[') + "]"}) {
    const auto r = cli({"check", "--suite", "memory", "--filter", good});
    EXPECT_NE(r.code, 2) << good.substr(0, 40) << "...: " << r.err;
  }
  EXPECT_EQ(files_in(dir_), 0u);
}

TEST_F(CliTest, BadNumbersNameTheValueAndWhatIsAccepted) {
  for (const char* bad :
       {"abc", "-1", "0", "-0", "1e999", "nan", "inf", "5s", "", " 5", "5 ", "+5", "0x10", "1,5"}) {
    const auto r = cli({"run", "--budget-seconds", bad, "--out", (dir_ / "out").string()});
    expect_one_line_error(r, 2,
                          std::string("--budget-seconds: '") + bad + "' is not a number of seconds above 0");
    EXPECT_LT(r.err.size(), 200u) << "CLI11's range message prints DBL_MAX in full: " << r.err;
  }
  // taken (a budget under 10 s starts nothing: exit 3, "incomplete")
  for (const char* good : {"1", "0.5", "2.5e1", "1e-3"}) {
    const auto r =
        cli({"run", "--suite", "reference", "--budget-seconds", good, "--filter", "^no-such-thing$", "--out",
             (dir_ / "good").string(), "--reports-dir", (dir_ / "none").string()});
    EXPECT_NE(r.code, 2) << good << ": " << r.err;
    EXPECT_TRUE(r.err.empty()) << good << ": " << r.err;
  }
  fs::remove_all(dir_ / "good");
  // CLI11 itself reads -1 and 2^64 as 2^64 - 1, and 010 as 8, without a word
  for (const char* bad : {"-1", "+3", "1e3", "0x10", "010", "00", " 7", "", "18446744073709551616",
                          "99999999999999999999", "184467440737095516150"}) {
    expect_one_line_error(
        cli({"check", "--suite", "memory", "--seed", bad}), 2,
        std::string("--seed: '") + bad + "' is not an integer from 0 to 18446744073709551615");
    expect_one_line_error(cli({"run", "--seed", bad, "--out", (dir_ / "out").string()}), 2, "--seed");
  }
  EXPECT_EQ(files_in(dir_), 0u);
  // the ends of the range are seeds
  for (const char* good : {"0", "7", "18446744073709551615"}) {
    const auto out = dir_ / "checks.json";
    const auto r = cli({"check", "--suite", "memory", "--seed", good, "--filter", "planner/over_limit",
                        "--out", out.string()});
    ASSERT_EQ(r.code, 0) << good << ": " << r.err;
    EXPECT_EQ(read_report(out)["meta"]["seed"].get<std::uint64_t>(), std::stoull(good)) << good;
  }
}

TEST_F(CliTest, UnwritableOutputFolder) {
  write(dir_ / "file", "x");
  const auto r = cli({"run", "--suite", "reference", "--out", (dir_ / "file" / "out").string()});
  expect_one_line_error(r, 1, "cannot create output folder");
  EXPECT_EQ(files_in(dir_), 1u);
}

TEST_F(CliTest, UnwritableTableOutput) {
  const auto out = dir_ / "out";
  ASSERT_EQ(
      cli({"run", "--suite", "reference", "--out", out.string(), "--reports-dir", (dir_ / "none").string()})
          .code,
      0);
  write(dir_ / "file", "x");
  const auto r =
      cli({"table", (out / "reference.json").string(), "--output", (dir_ / "file" / "t.md").string()});
  expect_one_line_error(r, 1, "t.md");
  EXPECT_FALSE(fs::exists(dir_ / "file" / "t.md"));
}

TEST_F(CliTest, MissingReport) {
  expect_one_line_error(cli({"table", (dir_ / "absent.json").string()}), 1, "not found");
}

TEST_F(CliTest, MalformedAndInvalidReportsLeaveNoOutput) {
  write(dir_ / "bad.json", "{\"schema\": ");
  const auto out = dir_ / "t.md";
  expect_one_line_error(cli({"table", (dir_ / "bad.json").string(), "--output", out.string()}), 1,
                        "bad.json");
  write(dir_ / "other.json", R"({"schema": "seqbench.report/1", "suite": "x"})");
  expect_one_line_error(cli({"table", (dir_ / "other.json").string(), "--output", out.string()}), 1, "meta");
  EXPECT_FALSE(fs::exists(out));
}

TEST_F(CliTest, BadTableFormat) {
  for (const char* good : {"md", "markdown", "csv"})
    EXPECT_NE(cli({"table", "x.json", "--format", good}).err.find("not found"), std::string::npos) << good;
  expect_one_line_error(cli({"table", "x.json", "--format", "xlsx"}), 2,
                        "--format: unknown table format 'xlsx' (accepted: md, markdown, csv)");
}

TEST_F(CliTest, RunReferenceWritesAValidReportAndTables) {
  const auto out = dir_ / "out";
  const auto r =
      cli({"run", "--suite", "reference", "--out", out.string(), "--reports-dir", (dir_ / "none").string()});
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  const auto report = read_report(out / "reference.json");  // throws if invalid
  EXPECT_EQ(report["suite"], "reference");
  EXPECT_FALSE(report["checks"].empty());
  for (const auto& c : report["checks"]) EXPECT_TRUE(c["passed"].get<bool>()) << c.dump();
  EXPECT_TRUE(fs::exists(out / "TABLES.md"));
  for (const auto& e : fs::directory_iterator(out))
    EXPECT_EQ(e.path().filename().string().find(".tmp"), std::string::npos) << "stray " << e.path();

  const auto md = cli({"table", (out / "reference.json").string(), "--format", "md"});
  EXPECT_EQ(md.code, 0) << md.err;
  EXPECT_NE(md.out.find("## reference"), std::string::npos) << md.out;
  const auto csv = cli({"table", (out / "reference.json").string(), "--format", "csv"});
  EXPECT_EQ(csv.code, 0) << csv.err;
  EXPECT_EQ(csv.out.rfind("suite,device,experiment,", 0), 0u) << csv.out;
}

TEST_F(CliTest, RunWithoutGpuSaysWhatItSkipped) {
  if (::seqbench::testing::gpu_absence_reason().empty())
    GTEST_SKIP() << "a GPU is present: the skip message needs none";
  const auto out = dir_ / "out";
  const auto r = cli({"run", "--suite", "reference", "--suite", "device", "--out", out.string(),
                      "--reports-dir", (dir_ / "none").string()});
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("skipped suite 'device'"), std::string::npos) << r.out;
  const auto report = read_report(out / "reference.json");
  ASSERT_EQ(report["skipped"].size(), 1u);
  EXPECT_EQ(report["skipped"][0]["suite"], "device");
  EXPECT_TRUE(report["meta"]["device"].is_null());
}

TEST_F(CliTest, ListJsonDescribesEverySuite) {
  const auto r = cli({"list", "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto doc = nlohmann::json::parse(r.out);
  std::vector<std::string> names;
  for (const auto& s : doc["suites"]) names.push_back(s["name"]);
  EXPECT_NE(std::find(names.begin(), names.end(), "reference"), names.end());
  EXPECT_NE(std::find(names.begin(), names.end(), "device"), names.end());
  int rotated = 0, capped = 0, components = 0;
  for (const auto& s : doc["suites"])
    for (const auto& e : s["experiments"]) {
      EXPECT_TRUE(e["params"].is_object());
      EXPECT_TRUE(e["inputs"].is_object()) << e.dump();
      bool baseline_listed = false;
      for (const auto& v : e["variants"]) baseline_listed = baseline_listed || v["name"] == e["baseline"];
      EXPECT_TRUE(baseline_listed) << e.dump();
      // dump_variant: null, or one of the experiment's variants.
      bool dump_listed = e["dump_variant"].is_null();
      for (const auto& v : e["variants"]) dump_listed = dump_listed || v["name"] == e["dump_variant"];
      EXPECT_TRUE(dump_listed) << e.dump();
      // Graph replays for the operators' single small ops; layers and optimizers directly.
      ASSERT_TRUE(e["cuda_graph"].is_boolean()) << e.dump();
      EXPECT_EQ(e["cuda_graph"].get<bool>(), s["name"] == "operators") << s["name"] << ": " << e["name"];
      // Several calls a sample (over copies of the buffers) only for graphed small ops, by their bytes.
      ASSERT_TRUE(e["calls_per_sample"].is_number_integer()) << e.dump();
      double bytes = 0.0;
      for (const auto& v : e["variants"]) bytes = std::max(bytes, v["bytes"].get<double>());
      EXPECT_EQ(e["calls_per_sample"].get<int>(),
                e["cuda_graph"].get<bool>() ? graph_calls_per_sample(bytes) : 1)
          << e.dump();
      rotated += e["calls_per_sample"].get<int>() > 1;
      capped += e["calls_per_sample"].get<int>() == kMaxCallsPerSample;
      // component_of: null for a whole variant, else a whole variant of the same experiment.
      for (const auto& v : e["variants"]) {
        ASSERT_TRUE(v.contains("component_of")) << e.dump();
        if (v["component_of"].is_null()) continue;
        ++components;
        bool whole_listed = false;
        for (const auto& w : e["variants"])
          whole_listed = whole_listed || (w["name"] == v["component_of"] && w["component_of"].is_null());
        EXPECT_TRUE(whole_listed) << e.dump();
      }
    }
  // The full operator suite has small ops of both kinds: a few calls, and the cap.
  EXPECT_GT(rotated, capped);
  EXPECT_GT(capped, 0);
  EXPECT_GT(components, 0);  // the trainer suite's fused_update_only
}

TEST_F(CliTest, DumpNeedsAGpuAndWritesNothingWithoutOne) {
  if (probe_device(0).info) GTEST_SKIP() << "a GPU is present: the GPU path is the gpu tests' business";
  const auto out = dir_ / "dump";
  expect_one_line_error(cli({"dump", "--suite", "operators", "--out", out.string()}), 1,
                        "seqbench dump needs a GPU");
  EXPECT_FALSE(std::filesystem::exists(out));
  expect_one_line_error(cli({"dump"}), 2, "--out");
}

TEST_F(CliTest, InfoJsonAndHelp) {
  const auto info = cli({"info", "--json"});
  ASSERT_EQ(info.code, 0) << info.err;
  const auto doc = nlohmann::json::parse(info.out);
  EXPECT_TRUE(doc["device"].is_null() != doc["no_device_reason"].is_null());
  const auto help = cli({"--help"});
  EXPECT_EQ(help.code, 0);
  EXPECT_NE(help.out.find("run"), std::string::npos);
  EXPECT_EQ(cli({"run", "--help"}).code, 0);
}

TEST_F(CliTest, CheckPassesAndWritesAReport) {
  const auto out = dir_ / "check.json";
  const auto r = cli({"check", "--suite", "reference", "--out", out.string()});
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find(" 0 failed"), std::string::npos) << r.out;
  EXPECT_EQ(read_report(out)["suite"], "check");
}

TEST_F(CliTest, CheckWithAFilterMatchingNothingFails) {
  // Zero checks must not read as success. The reference suite only: the filter applies after a
  // suite's checks have run, so on a GPU machine every suite would run all its GPU checks here.
  const auto r = cli({"check", "--suite", "reference", "--filter", "^no-such-check$"});
  EXPECT_EQ(r.code, 1);
}

// --- Run control of `seqbench run` (review B, E, F, G, I), on the reference suite (CPU checks only). ---

nlohmann::json read_json(const fs::path& p) {
  std::ifstream in(p);
  return nlohmann::json::parse(in);
}

TEST_F(CliTest, RunRecordsQuickFilterRepetitionsAndTimerPolicy) {
  const auto out = dir_ / "out";
  const auto r = cli({"run", "--suite", "reference", "--filter", "softmax", "--repetitions", "3", "--quick",
                      "--out", out.string(), "--reports-dir", (dir_ / "none").string()});
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  const auto meta = read_report(out / "reference.json")["meta"];
  EXPECT_EQ(meta["quick"], true);
  EXPECT_EQ(meta["filter"], "softmax");
  EXPECT_EQ(meta["repetitions"], 3);
  EXPECT_EQ(meta["timer_policy"]["name"], "quick");
  ASSERT_EQ(meta["parts"].size(), 1u);
}

TEST_F(CliTest, FilteredRunMergesIntoTheSuiteReport) {
  if (build_info().git_sha == "unknown")
    GTEST_SKIP() << "this build's git sha is 'unknown' (no .git and no valid BUILD_STAMP: tools/stamp.sh), "
                    "and no merge accepts it";
  const auto out = dir_ / "out";
  const std::vector<std::string> common = {"--suite",    "reference",     "--out",
                                           out.string(), "--reports-dir", (dir_ / "none").string()};
  auto args = common;
  args.insert(args.begin(), "run");
  ASSERT_EQ(cli(args).code, 0);
  const auto full = read_report(out / "reference.json");
  args.insert(args.end(), {"--filter", "reference/softmax/"});
  const auto r = cli(args);
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  const auto merged = read_report(out / "reference.json");
  EXPECT_EQ(merged["checks"].size(), full["checks"].size());  // not cut down to the filtered few
  ASSERT_EQ(merged["meta"]["parts"].size(), 2u);
  EXPECT_EQ(merged["meta"]["parts"][1]["filter"], "reference/softmax/");
  EXPECT_EQ(merged["meta"]["filter"], "reference/softmax/");
}

TEST_F(CliTest, FilteredRunRefusesAReportOfAnotherBuildAndLeavesItAlone) {
  if (build_info().git_sha == "unknown")
    GTEST_SKIP() << "this build's git sha is 'unknown' (no .git and no valid BUILD_STAMP: tools/stamp.sh), "
                    "and no merge accepts it";
  const auto out = dir_ / "out";
  ASSERT_EQ(
      cli({"run", "--suite", "reference", "--out", out.string(), "--reports-dir", (dir_ / "none").string()})
          .code,
      0);
  auto doc = read_json(out / "reference.json");
  doc["meta"]["git_sha"] = "0123456789abcdef0123456789abcdef01234567";
  write_json_atomic(out / "reference.json", doc);
  const std::string before = ::seqbench::testing::read_file(out / "reference.json");
  const auto r = cli({"run", "--suite", "reference", "--filter", "softmax", "--out", out.string(),
                      "--reports-dir", (dir_ / "none").string()});
  expect_one_line_error(r, 1, "cannot merge this filtered run into");
  EXPECT_NE(r.err.find("it holds git sha 0123456789abcdef"), std::string::npos) << r.err;
  EXPECT_EQ(::seqbench::testing::read_file(out / "reference.json"), before);
  // A --quick part may not join a full report either.
  doc["meta"]["git_sha"] = build_info().git_sha;
  write_json_atomic(out / "reference.json", doc);
  if (build_info().git_sha != "unknown")
    expect_one_line_error(cli({"run", "--suite", "reference", "--filter", "softmax", "--quick", "--out",
                               out.string(), "--reports-dir", (dir_ / "none").string()}),
                          1, "it holds a full run, this run is --quick");
}

// --keep-checks (tools/gpu.sh's RUN_RESUME): a filtered run keeps the report's checks when they are
// whole (an unfiltered part ran them, no family failed), and runs them otherwise.
TEST_F(CliTest, KeepChecksNeedsANonEmptyFilter) {
  const std::vector<std::string> base = {"run",           "--suite",
                                         "reference",     "--keep-checks",
                                         "--out",         (dir_ / "out").string(),
                                         "--reports-dir", (dir_ / "none").string()};
  expect_one_line_error(cli(base), 2, "--keep-checks");  // CLI11: it needs --filter
  auto empty_filter = base;
  empty_filter.insert(empty_filter.end(), {"--filter", ""});
  expect_one_line_error(cli(empty_filter), 2, "--keep-checks needs a non-empty --filter");
  EXPECT_EQ(files_in(dir_ / "out"), 0u);  // refused before anything ran
}

TEST_F(CliTest, KeepChecksKeepsWholeChecksAndRunsThemWhereTheyAreNot) {
  if (build_info().git_sha == "unknown")
    GTEST_SKIP() << "this build's git sha is 'unknown' (no .git and no valid BUILD_STAMP: tools/stamp.sh), "
                    "and no merge accepts it";
  const auto out = dir_ / "out";
  // The memory suite: CPU checks and an accounting, so a run that keeps its checks still writes.
  const std::vector<std::string> base = {"run",   "--suite",    "memory",        "--quick",
                                         "--out", out.string(), "--reports-dir", (dir_ / "none").string()};
  auto keep = base;
  keep.insert(keep.end(), {"--filter", "^memory/", "--keep-checks"});

  // No report: nothing to keep, so the checks run (and say how long they took).
  const auto fresh = cli(keep);
  ASSERT_EQ(fresh.code, 0) << fresh.out << fresh.err;
  EXPECT_NE(fresh.out.find("(not kept: no report to keep them from)"), std::string::npos) << fresh.out;
  EXPECT_NE(fresh.out.find(" failed in "), std::string::npos) << fresh.out;
  EXPECT_EQ(read_report(out / "memory.json")["meta"]["checks_run"], true);
  // Its only part was filtered: its checks are not the whole, so they run again.
  const auto filtered_only = cli(keep);
  ASSERT_EQ(filtered_only.code, 0) << filtered_only.out << filtered_only.err;
  EXPECT_NE(filtered_only.out.find("(not kept: no part of the report ran them unfiltered)"),
            std::string::npos)
      << filtered_only.out;

  // After an unfiltered run they are kept: the same checks, none run, and the part says so.
  ASSERT_EQ(cli(base).code, 0);
  const auto full = read_report(out / "memory.json");
  ASSERT_FALSE(full["checks"].empty());
  const auto kept = cli(keep);
  ASSERT_EQ(kept.code, 0) << kept.out << kept.err;
  EXPECT_NE(kept.out.find("checks kept from the report (--keep-checks)"), std::string::npos) << kept.out;
  EXPECT_EQ(kept.out.find(" failed in "), std::string::npos) << kept.out;
  EXPECT_NE(kept.out.find("0 failed (1 report(s) kept their earlier checks: --keep-checks)"),
            std::string::npos)
      << kept.out;
  const auto merged = read_report(out / "memory.json");
  EXPECT_EQ(merged["checks"], full["checks"]);
  EXPECT_EQ(merged["meta"]["checks_run"], false);
  ASSERT_EQ(merged["meta"]["parts"].size(), 2u);
  EXPECT_EQ(merged["meta"]["parts"][0]["checks_run"], true);
  EXPECT_EQ(merged["meta"]["parts"][1]["checks_run"], false);
  EXPECT_EQ(merged["meta"]["check_families"], nlohmann::json::array());

  // A failed family (one that threw: it reported none of its checks) is not kept: the checks run
  // again, and the family's fresh run supersedes the failure.
  auto doc = read_json(out / "memory.json");
  nlohmann::json family_failure = ::seqbench::testing::failed_check("checks/memory/cpu");
  family_failure["detail"] = "threw: out of memory";
  doc["checks"].push_back(family_failure);
  write_json_atomic(out / "memory.json", doc);
  const auto after_failure = cli(keep);
  ASSERT_EQ(after_failure.code, 0) << after_failure.out << after_failure.err;
  EXPECT_NE(after_failure.out.find("(not kept: a check family failed (checks/memory/cpu))"),
            std::string::npos)
      << after_failure.out;
  const auto rechecked = read_report(out / "memory.json");
  EXPECT_EQ(rechecked["checks"], full["checks"]);
  EXPECT_EQ(rechecked["meta"]["checks_run"], true);
}

TEST_F(CliTest, AnUnreadableReportIsMovedAsideNotMergedOrLost) {
  const auto out = dir_ / "out";
  fs::create_directories(out);
  write(out / "reference.json", "{ not json");
  const auto r = cli({"run", "--suite", "reference", "--filter", "softmax", "--out", out.string(),
                      "--reports-dir", (dir_ / "none").string()});
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("moved aside to"), std::string::npos) << r.out;
  bool aside = false;
  for (const auto& e : fs::directory_iterator(out))
    if (e.path().filename().string().rfind("reference.json.unreadable-", 0) == 0)
      aside = ::seqbench::testing::read_file(e.path()) == "{ not json";
  EXPECT_TRUE(aside);
  EXPECT_NO_THROW(read_report(out / "reference.json"));
}

TEST_F(CliTest, AnUnfilteredRunOfTheOtherQuickSettingMovesTheOldReportAside) {
  const auto out = dir_ / "out";
  const std::vector<std::string> base = {
      "run", "--suite", "reference", "--out", out.string(), "--reports-dir", (dir_ / "none").string()};
  ASSERT_EQ(cli(base).code, 0);
  auto quick = base;
  quick.push_back("--quick");
  const auto r = cli(quick);
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  std::size_t aside = 0;
  for (const auto& e : fs::directory_iterator(out))
    aside += e.path().filename().string().rfind("reference.json.full-", 0) == 0;
  EXPECT_EQ(aside, 1u) << r.out;
  EXPECT_EQ(read_report(out / "reference.json")["meta"]["quick"], true);
  // A report that does not say which it is (older ones) is replaced, not moved aside.
  auto doc = read_json(out / "reference.json");
  doc["meta"].erase("quick");
  write_json_atomic(out / "reference.json", doc);
  ASSERT_EQ(cli(base).code, 0);
  std::size_t files = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(out)) ++files;
  EXPECT_EQ(files, 3u);  // reference.json, its one full- copy, TABLES.md
}

TEST_F(CliTest, BudgetTooSmallToStartIsIncompleteNotFailed) {
  const auto out = dir_ / "out";
  const auto r = cli({"run", "--suite", "reference", "--budget-seconds", "1", "--out", out.string(),
                      "--reports-dir", (dir_ / "none").string()});
  EXPECT_EQ(r.code, 3) << r.out << r.err;
  EXPECT_NE(r.out.find("not run: reference: not started: time budget"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("incomplete: the time budget left"), std::string::npos) << r.out;
  EXPECT_EQ(cli({"run", "--suite", "reference", "--budget-seconds", "0", "--out", out.string()}).code, 2);
  const auto ample = cli({"run", "--suite", "reference", "--budget-seconds", "600", "--out", out.string(),
                          "--reports-dir", (dir_ / "none").string()});
  EXPECT_EQ(ample.code, 0) << ample.out << ample.err;
}

TEST_F(CliTest, ExpectedGpuMissingFailsAGpuSuite) {
  if (::seqbench::testing::gpu_absence_reason().empty()) GTEST_SKIP() << "a GPU is present";
  const char* previous = std::getenv("SEQBENCH_EXPECT_GPU");
  const std::string saved = previous ? previous : "";
  setenv("SEQBENCH_EXPECT_GPU", "1", 1);
  const auto out = dir_ / "out";
  const auto r = cli({"run", "--suite", "device", "--out", out.string()});
  const auto cpu_only =
      cli({"run", "--suite", "reference", "--out", out.string(), "--reports-dir", (dir_ / "none").string()});
  if (previous) {
    setenv("SEQBENCH_EXPECT_GPU", saved.c_str(), 1);
  } else {
    unsetenv("SEQBENCH_EXPECT_GPU");
  }
  expect_one_line_error(r, 1, "SEQBENCH_EXPECT_GPU is set but no GPU is visible");
  EXPECT_FALSE(fs::exists(out / "device.json"));
  EXPECT_EQ(cpu_only.code, 0) << cpu_only.out << cpu_only.err;  // a CPU suite needs none
}

TEST_F(CliTest, TablesFileCoversEveryReportInTheFolder) {
  const auto out = dir_ / "out";
  fs::create_directories(out);
  write_json_atomic(out / "layernorm.json", ::seqbench::testing::valid_report());
  const auto r =
      cli({"run", "--suite", "reference", "--out", out.string(), "--reports-dir", (dir_ / "none").string()});
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  const std::string tables = ::seqbench::testing::read_file(out / "TABLES.md");
  EXPECT_NE(tables.find("## reference"), std::string::npos) << tables;
  EXPECT_NE(tables.find("layernorm"), std::string::npos) << tables;
}

}  // namespace
}  // namespace seqbench
