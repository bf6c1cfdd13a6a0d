#include "suites/cli.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <iomanip>
#include <limits>
#include <map>
#include <ostream>
#include <sstream>
#include <utility>

#include "core/build_info.h"
#include "core/device_info.h"
#include "core/error.h"
#include "suites/dump.h"
#include "suites/experiment.h"
#include "suites/meta.h"
#include "suites/report.h"
#include "suites/runner.h"
#include "suites/table.h"
#include "suites/targets.h"

namespace seqbench {
namespace {

constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;
// `seqbench run`: nothing failed, but the time budget (or a signal) left something unstarted.
constexpr int kExitIncomplete = 3;

// The suites' registry (their names), built once for every validator that needs it.
const std::vector<SuiteSpec>& registered_suites() {
  static const std::vector<SuiteSpec> suites = all_suites(SuiteOptions{});
  return suites;
}

// Option values that name nothing (a suite, a table format) or do not parse (a regex, a number)
// are usage errors, as CLI11's own are: exit 2, one line naming the option, the value and what is
// accepted, checked at parse time, before anything runs or is written. The library functions that
// take these values (find_suite, compile_filter, parse_table_format) check them again for their
// other callers; `refusing` makes a validator of one: the seqbench::Error it throws is the refusal.
template <class Check>
CLI::Validator refusing(Check check, std::string description) {
  return CLI::Validator(
      [check](std::string& value) -> std::string {
        try {
          check(value);
          return "";
        } catch (const Error& e) {
          return e.message();
        }
      },
      std::move(description));
}

CLI::Validator suite_name() {
  std::string names;
  for (const SuiteSpec& suite : registered_suites()) names += (names.empty() ? "" : ", ") + suite.name;
  return refusing([](const std::string& name) { find_suite(registered_suites(), name); },
                  "SUITE in {" + names + "}");
}

CLI::Validator ecmascript_regex() {
  return refusing([](const std::string& pattern) { (void)compile_filter(pattern); }, "REGEX");
}

CLI::Validator table_format_name() {
  return refusing([](const std::string& name) { parse_table_format(name); }, "FORMAT");
}

// A number of seconds above 0, written as a plain decimal (std::from_chars' general format: no
// sign, space or hex). CLI11's PositiveNumber would print its range up to DBL_MAX in all 309
// digits.
CLI::Validator positive_seconds() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        double seconds = 0.0;
        const char* end = text.data() + text.size();
        const auto [stop, error] = std::from_chars(text.data(), end, seconds);
        if (error != std::errc() || stop != end || !std::isfinite(seconds) || seconds <= 0.0)
          return "'" + text + "' is not a number of seconds above 0";
        return "";
      },
      "SECONDS > 0");
}

// CLI11 2.1 reads integers with strto(u)ll in base 0: "-1" and 2^64 both become 2^64 - 1 in a
// uint64_t, "010" is 8 and "0x10" 16. An integer option takes a plain decimal in [lo, hi], without
// leading zeros, and is refused otherwise with that range.
CLI::Validator decimal_integer(std::uint64_t lo, std::uint64_t hi) {
  return CLI::Validator(
      [lo, hi](std::string& text) -> std::string {
        const std::string max_text = std::to_string(std::numeric_limits<std::uint64_t>::max());
        const bool decimal =
            !text.empty() && (text == "0" || text[0] != '0') &&
            std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
        // without leading zeros, equal lengths compare as the numbers do
        const bool fits = decimal && (text.size() < max_text.size() ||
                                      (text.size() == max_text.size() && text <= max_text));
        if (!fits || std::stoull(text) < lo || std::stoull(text) > hi)
          return "'" + text + "' is not an integer from " + std::to_string(lo) + " to " + std::to_string(hi) +
                 " (decimal, no leading zeros)";
        return "";
      },
      "INT in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
}

std::filesystem::path default_reports_dir() {
  return std::filesystem::path(SEQBENCH_SOURCE_DIR) / "reports";
}

int cmd_info(bool as_json, std::ostream& out) {
  const DeviceProbe probe = probe_device(0);
  if (as_json) {
    out << nlohmann::json{{"seqbench_version", build_info().version},
                          {"git_sha", build_info().git_sha},
                          {"git_dirty", build_info().git_dirty},
                          {"source_hash", build_info().source_hash.empty()
                                              ? nlohmann::json(nullptr)
                                              : nlohmann::json(build_info().source_hash)},
                          {"build", build_json()},
                          {"device", device_json(probe, std::nullopt)},
                          {"no_device_reason",
                           probe.info ? nlohmann::json(nullptr) : nlohmann::json(probe.reason)}}
               .dump(2)
        << "\n";
    return 0;
  }
  const BuildInfo b = build_info();
  out << "seqbench " << b.version << " (" << b.git_sha.substr(0, 12) << (b.git_dirty ? ", dirty" : "")
      << ")\n"
      << "build: " << b.build_type << ", CUDA architectures " << b.cuda_architectures << ", nvcc "
      << b.cuda_compiler_version << ", " << b.cxx_compiler << "\n"
      << "cuBLAS " << cublas_version() << ", CUDA runtime (built) " << cuda_runtime_build_version() << "\n";
  if (!probe.info) {
    out << "device: none (" << probe.reason << ")\n";
    return 0;
  }
  const DeviceInfo& d = *probe.info;
  out << "device: " << d.name << ", sm_" << d.cc_major << d.cc_minor << ", " << d.sm_count << " SMs, L2 "
      << (d.l2_bytes >> 20) << " MiB, memory " << (d.memory_bytes >> 20) << " MiB, SM clock max "
      << d.sm_clock_max_mhz << " MHz, driver " << d.driver << ", runtime " << d.runtime << "\n";
  return 0;
}

int cmd_list(bool as_json, bool quick, std::ostream& out) {
  const auto suites = all_suites(SuiteOptions{quick});
  nlohmann::json doc = {{"schema", "seqbench.list/1"}, {"quick", quick}, {"suites", nlohmann::json::array()}};
  for (const SuiteSpec& s : suites) {
    nlohmann::json suite = {{"name", s.name},
                            {"description", s.description},
                            {"needs_gpu", s.needs_gpu},
                            {"has_cpu_checks", static_cast<bool>(s.cpu_checks)},
                            {"has_gpu_checks", static_cast<bool>(s.gpu_checks)},
                            {"experiments", nlohmann::json::array()}};
    for (const ExperimentSpec& e : s.experiments) {
      nlohmann::json variants = nlohmann::json::array();
      for (const VariantSpec& v : e.variants)
        variants.push_back({{"name", v.name},
                            {"bytes", v.bytes},
                            {"flops", v.flops},
                            {"component_of", v.component_of.empty() ? nlohmann::json(nullptr)
                                                                    : nlohmann::json(v.component_of)}});
      suite["experiments"].push_back(
          {{"name", e.name},
           {"params", e.params},
           {"inputs", e.inputs},
           {"baseline", e.baseline},
           {"variants", variants},
           // The variant `seqbench dump` writes; null: the experiment does not dump.
           {"dump_variant",
            e.dump_variant.empty() ? nlohmann::json(nullptr) : nlohmann::json(e.dump_variant)},
           // Whether `seqbench run` times the variants as CUDA graph replays (suites/gpu_timer.h),
           // and how many calls, over as many copies of the buffers, a sample holds.
           {"cuda_graph", e.cuda_graph},
           {"calls_per_sample", e.calls_per_sample}});
    }
    doc["suites"].push_back(std::move(suite));
  }
  if (as_json) {
    out << doc.dump(2) << "\n";
    return 0;
  }
  for (const auto& s : doc["suites"]) {
    out << s["name"].get<std::string>() << (s["needs_gpu"].get<bool>() ? " [gpu]" : " [cpu]") << ": "
        << s["description"].get<std::string>() << "\n";
    for (const auto& e : s["experiments"]) {
      out << "  " << e["name"].get<std::string>() << "  variants:";
      for (const auto& v : e["variants"]) out << " " << v["name"].get<std::string>();
      out << "  (baseline " << e["baseline"].get<std::string>() << ")\n";
    }
  }
  return 0;
}

void print_checks(const std::vector<CheckResult>& checks, std::ostream& out) {
  for (const CheckResult& c : checks) {
    out << (c.passed ? "PASS " : "FAIL ") << c.name << "  max_abs_err " << std::setprecision(3)
        << c.max_abs_err << "  max_rel_err " << c.max_rel_err << "  tolerance " << c.tolerance;
    if (!c.passed && !c.detail.empty()) out << "  (" << c.detail << ")";
    out << "\n";
  }
}

nlohmann::json checks_report(const std::string& suite, std::uint64_t seed,
                             const std::vector<CheckResult>& checks,
                             const std::vector<SkippedSuite>& skipped) {
  nlohmann::json report = {{"schema", kReportSchema},
                           {"suite", suite},
                           {"meta", collect_meta(seed, probe_device(0), std::nullopt)},
                           {"experiments", nlohmann::json::array()},
                           {"checks", nlohmann::json::array()},
                           {"skipped", nlohmann::json::array()}};
  for (const CheckResult& c : checks) report["checks"].push_back(check_to_json(c));
  for (const SkippedSuite& s : skipped)
    report["skipped"].push_back({{"suite", s.suite}, {"reason", s.reason}});
  return report;
}

int cmd_check(const CheckOptions& options, const std::string& out_file, std::ostream& out) {
  std::vector<SkippedSuite> skipped;
  const auto checks = run_checks(options, out, &skipped);
  print_checks(checks, out);
  const auto failed =
      std::count_if(checks.begin(), checks.end(), [](const CheckResult& c) { return !c.passed; });
  out << checks.size() - static_cast<std::size_t>(failed) << " passed, " << failed << " failed\n";
  if (!out_file.empty()) {
    write_json_atomic(out_file, checks_report("check", options.seed, checks, skipped));
    out << "wrote " << out_file << "\n";
  }
  return failed == 0 && !checks.empty() ? 0 : kExitFailure;
}

// "N met, N missed, N not measured, over N device(s)": the one-line count of an evaluation.
std::string targets_counts(const TargetsEvaluation& evaluation) {
  std::map<std::string, int> counts;
  for (const DeviceTargets& d : evaluation.devices)
    for (const TargetResult& t : d.targets) ++counts[target_verdict_name(t.verdict)];
  std::ostringstream s;
  s << counts["met"] << " met, " << counts["missed"] << " missed, " << counts["not measured"]
    << " not measured, over " << evaluation.devices.size() << " device(s)";
  return s.str();
}

// The issues' targets judged from `reports` into `path` (seqbench targets), when at least one of
// them is of a GPU run; `what` names the reports in the messages. A CPU-only set writes nothing (no
// target can be judged), and removes a `path` an earlier run left, which would judge reports that are
// no longer beside it; so does an evaluation that fails (two reports of one suite on one device).
void write_targets(const std::vector<nlohmann::json>& reports, const std::vector<std::string>& names,
                   const std::filesystem::path& path, const std::string& what, std::ostream& out) {
  std::error_code ec;
  try {
    const TargetsEvaluation evaluation = evaluate_targets(reports, names);
    if (!evaluation.devices.empty()) {
      write_file_atomic(path, render_targets(evaluation));
      out << "targets of " << what << ": " << targets_counts(evaluation) << ": " << path.string() << "\n";
      return;
    }
  } catch (const Error& e) {
    out << "targets not written: " << e.message() << "\n";
  }
  if (std::filesystem::remove(path, ec)) out << "removed the stale " << path.string() << "\n";
}

// Every report committed under `dir`, sorted by path; an invalid one is an error, not skipped.
// `names`, when given, receives each report's path.
std::vector<nlohmann::json> committed_reports(const std::filesystem::path& dir,
                                              std::vector<std::string>* names) {
  std::vector<std::filesystem::path> paths;
  std::error_code ec;
  if (std::filesystem::is_directory(dir, ec)) {
    for (const auto& entry : std::filesystem::recursive_directory_iterator(dir)) {
      const auto& p = entry.path();
      if (entry.is_regular_file() && p.extension() == ".json" && p.parent_path().filename() != "examples")
        paths.push_back(p);
    }
  }
  std::sort(paths.begin(), paths.end());
  std::vector<nlohmann::json> reports;
  for (const auto& p : paths) {
    reports.push_back(read_report(p));
    if (names) names->push_back(p.string());
  }
  return reports;
}

int cmd_run(const RunOptions& options, const std::filesystem::path& reports_dir, std::ostream& out) {
  // run_suites probes the device (and picks the default folder) inside its SIGTERM/SIGINT scope: a
  // signal during the slow first CUDA call then still ends the run with its reports written.
  const RunResult result = run_suites(options, out);

  // The tables of every report now in the folder (this run's and earlier suites'), not of this
  // run's alone: one process per suite (tools/gpu.sh) must not leave a file naming only the last.
  std::vector<nlohmann::json> present;
  std::vector<std::string> present_names;
  std::error_code ec;
  std::vector<std::filesystem::path> paths;
  for (const auto& entry : std::filesystem::directory_iterator(result.out_dir, ec))
    if (entry.is_regular_file() && entry.path().extension() == ".json") paths.push_back(entry.path());
  std::sort(paths.begin(), paths.end());
  for (const auto& p : paths) {
    try {
      present.push_back(read_report(p));
      present_names.push_back(p.string());
    } catch (const Error& e) {
      out << "tables: left out " << p.string() << " (" << e.message() << ")\n";
    }
  }
  if (!present.empty()) {
    const auto tables = result.out_dir / "TABLES.md";
    try {
      write_file_atomic(tables, render_tables(present, TableFormat::markdown));
      out << "tables of the " << present.size() << " report(s) in " << result.out_dir.string() << ": "
          << tables.string() << "\n";
    } catch (const Error& e) {
      out << "tables not written: " << e.message() << "\n";
    }
  }
  // Beside the tables, the verdicts on the issues' targets from the same reports.
  write_targets(present, present_names, result.out_dir / "TARGETS.md",
                "the report(s) in " + result.out_dir.string(), out);
  if (!result.gpu) {
    // Without a GPU the measured numbers can only come from committed reports: regenerate them.
    std::vector<std::string> committed_names;
    const auto committed = committed_reports(reports_dir, &committed_names);
    if (committed.empty()) {
      out << "no committed GPU reports under " << reports_dir.string() << " to regenerate tables from\n";
    } else {
      const auto tables = result.out_dir / "committed-tables.md";
      write_file_atomic(tables, render_tables(committed, TableFormat::markdown));
      out << "tables regenerated from " << committed.size() << " committed report(s) under "
          << reports_dir.string() << ": " << tables.string() << "\n";
    }
    write_targets(committed, committed_names, result.out_dir / "committed-targets.md",
                  "the committed report(s) under " + reports_dir.string(), out);
  }
  for (const SkippedSuite& s : result.skipped) out << "skipped: " << s.suite << " (" << s.reason << ")\n";
  for (const std::string& n : result.not_run) out << "not run: " << n << "\n";
  out << "reports: " << result.reports.size() << " written to " << result.out_dir.string()
      << "; checks: " << result.checks - result.failed_checks << " passed, " << result.failed_checks
      << " failed"
      << (result.kept_checks > 0 ? " (" + std::to_string(result.kept_checks) +
                                       " report(s) kept their earlier checks: --keep-checks)"
                                 : std::string())
      << "\n";
  if (!result.device_lost.empty()) out << "device lost " << result.device_lost << "\n";
  if (!result.stopped_by.empty()) out << "incomplete: " << result.stopped_by << "\n";
  if (result.not_started > 0)
    out << "incomplete: the time budget left " << result.not_started << " unstarted\n";
  out << std::flush;
  if (result.failed_checks > 0 || !result.device_lost.empty() || !result.stopped_by.empty())
    return kExitFailure;
  return result.not_started > 0 ? kExitIncomplete : 0;
}

int cmd_table(const std::vector<std::string>& inputs, const std::string& format, const std::string& output,
              std::ostream& out) {
  const TableFormat fmt = parse_table_format(format);
  std::vector<nlohmann::json> reports;
  for (const auto& path : inputs) reports.push_back(read_report(path));
  const std::string text = render_tables(reports, fmt);
  if (output.empty()) {
    out << text;
  } else {
    write_file_atomic(output, text);
  }
  return 0;
}

int cmd_targets(const std::vector<std::string>& inputs, const std::string& output, std::ostream& out) {
  std::vector<nlohmann::json> reports;
  for (const auto& path : inputs) reports.push_back(read_report(path));
  const TargetsEvaluation evaluation = evaluate_targets(reports, inputs);
  const std::string text = render_targets(evaluation);
  if (output.empty()) {
    out << text;
  } else {
    write_file_atomic(output, text);
    out << "targets: " << targets_counts(evaluation) << "; written to " << output << "\n";
  }
  return targets_exit_code(evaluation);
}

}  // namespace

int run_cli(int argc, const char* const* argv, std::ostream& out, std::ostream& err) {
  CLI::App app{"seqbench: fast Transformer training and generation kernels on NVIDIA GPUs, measured",
               "seqbench"};
  app.require_subcommand(1);
  app.set_version_flag("--version", build_info().version);

  bool json = false;
  auto* info = app.add_subcommand("info", "the build and the device");
  info->add_flag("--json", json, "machine-readable output");

  bool quick = false;
  auto* list = app.add_subcommand("list", "the suites and their experiments");
  list->add_flag("--json", json, "machine-readable output (for suites/pytorch and other tools)");
  list->add_flag("--quick", quick, "the --quick shapes");

  CheckOptions check_options;
  std::string check_out;
  auto* check =
      app.add_subcommand("check", "correctness: references' gradient checks; GPU kernels against them");
  check->add_option("--suite", check_options.suites, "only these suites (repeatable)")->check(suite_name());
  check->add_option("--filter", check_options.filter, "ECMAScript regex over check names")
      ->check(ecmascript_regex());
  check->add_option("--seed", check_options.seed, "seed of every random draw")
      ->check(decimal_integer(0, std::numeric_limits<std::uint64_t>::max()));
  check->add_option("--out", check_out, "also write the checks as a schema-v1 report to this file");

  RunOptions run_options;
  std::string run_out;
  std::string reports_dir = default_reports_dir().string();
  auto* run = app.add_subcommand("run", "run suites and write one schema-v1 report per suite");
  run->add_option("--suite", run_options.suites, "only these suites (repeatable); default: all")
      ->check(suite_name());
  auto* run_filter = run->add_option("--filter", run_options.filter,
                                     "ECMAScript regex over suite/experiment/variant and check names")
                         ->check(ecmascript_regex());
  run->add_option("--out", run_out, "output folder (default: seqbench-out/<device>)");
  run->add_flag("--quick", run_options.quick, "smaller shapes and fewer samples");
  run->add_option("--seed", run_options.seed, "seed of every random draw")
      ->check(decimal_integer(0, std::numeric_limits<std::uint64_t>::max()));
  run->add_option("--repetitions", run_options.repetitions, "Google Benchmark repetitions per variant")
      ->check(decimal_integer(1, 1000));
  run->add_option(
         "--budget-seconds", run_options.budget_seconds,
         "start no experiment once fewer seconds than the longest one so far (at least 10) are left of "
         "N from the start; what was not started is listed in the report's not_run (exit 3)")
      ->check(positive_seconds());
  run->add_option("--reports-dir", reports_dir, "committed reports, for tables when no GPU is present");
  run->add_flag("--keep-checks", run_options.keep_checks,
                "a suite whose report (merged into) holds complete checks of this build keeps them "
                "instead of running them again; the others run theirs (resuming an incomplete suite)")
      ->needs(run_filter);

  std::vector<std::string> table_inputs;
  std::string table_format = "md";
  std::string table_output;
  auto* table = app.add_subcommand("table", "paper-style speedup tables from reports");
  table->add_option("reports", table_inputs, "report files")->required();
  table->add_option("--format", table_format, "md or csv")->check(table_format_name());
  table->add_option("--output", table_output, "write to this file (atomically) instead of stdout");

  std::vector<std::string> targets_inputs;
  std::string targets_output;
  auto* targets = app.add_subcommand("targets",
                                     "the issues' acceptance targets judged from reports: exit 0 all met, 1 "
                                     "one missed, 3 not measured, 2 bad input");
  targets->add_option("reports", targets_inputs, "report files (seqbench's and PyTorch's)")->required();
  targets->add_option("--output", targets_output,
                      "write the Markdown to this file (atomically) instead of stdout");

  DumpOptions dump_options;
  std::string dump_out;
  auto* dump = app.add_subcommand(
      "dump", "GPU: each experiment's inputs and fused outputs as .npy, for suites/pytorch's parity check");
  dump->add_option("--suite", dump_options.suites, "only these suites (repeatable); default: all")
      ->check(suite_name());
  dump->add_option("--filter", dump_options.filter, "ECMAScript regex over suite/experiment names")
      ->check(ecmascript_regex());
  dump->add_option("--out", dump_out, "output folder")->required();
  dump->add_flag("--quick", dump_options.quick, "the --quick shapes");

  // CLI11 would answer a misspelt command with "A subcommand is required"; name it instead.
  if (argc > 1 && argv[1][0] != '-') {
    std::string known;
    bool found = false;
    for (const CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) {
      found = found || sub->get_name() == argv[1];
      known += (known.empty() ? "" : ", ") + sub->get_name();
    }
    if (!found) {
      err << "seqbench: error: unknown command '" << argv[1] << "': expected one of " << known
          << " (see 'seqbench --help')\n";
      return kExitUsage;
    }
  }
  try {
    std::vector<std::string> args;
    for (int i = argc - 1; i >= 1; --i) args.emplace_back(argv[i]);  // CLI11 wants them reversed
    app.parse(args);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e, out, err);  // prints the help of the subcommand that asked
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e, out, err);
  } catch (const CLI::CallForVersion&) {
    out << build_info().version << "\n";
    return 0;
  } catch (const CLI::ParseError& e) {
    std::string what = e.what();
    std::replace(what.begin(), what.end(), '\n', ' ');
    err << "seqbench: error: " << what << " (see 'seqbench --help')\n";
    return kExitUsage;
  }
  // What CLI11 cannot see (an empty --filter meets --keep-checks' needs()) run_suites refuses; it
  // is usage all the same.
  if (*run) {
    try {
      require_valid_run_options(run_options);
    } catch (const Error& e) {
      err << "seqbench: error: " << e.message() << " (see 'seqbench --help')\n";
      return kExitUsage;
    }
  }

  try {
    if (*info) return cmd_info(json, out);
    if (*list) return cmd_list(json, quick, out);
    if (*check) return cmd_check(check_options, check_out, out);
    if (*run) {
      run_options.out_dir = run_out;
      return cmd_run(run_options, reports_dir, out);
    }
    if (*table) return cmd_table(table_inputs, table_format, table_output, out);
    if (*targets) {
      // Its exit status is the verdict (0 met, 1 missed, 3 not measured): bad input is a 2, as usage.
      try {
        return cmd_targets(targets_inputs, targets_output, out);
      } catch (const Error& e) {
        err << "seqbench: error: " << e.message() << "\n";
        return kExitUsage;
      }
    }
    if (*dump) {
      dump_options.out_dir = dump_out;
      const DumpResult r = dump_experiments(dump_options, out);
      out << r.dumped << " experiment(s) dumped (" << r.files << " .npy files) to " << dump_out << "; "
          << r.no_dump << " selected experiment(s) have no dump yet; " << r.failed.size() << " failed\n";
      for (const std::string& f : r.failed) err << "seqbench: error: dump " << f << "\n";
      return r.dumped > 0 && r.failed.empty() ? 0 : kExitFailure;
    }
  } catch (const Error& e) {
    err << "seqbench: error: " << e.message() << "\n";
    return kExitFailure;
  } catch (const std::exception& e) {
    err << "seqbench: error: " << e.what() << "\n";
    return kExitFailure;
  }
  return kExitUsage;
}

}  // namespace seqbench
