#include "suites/runner.h"

#include <benchmark/benchmark.h>

#include <fstream>
#include <map>
#include <memory>
#include <ostream>
#include <regex>

#include "core/device_info.h"
#include "core/error.h"
#include "core/nvtx.h"
#include "suites/gpu_timer.h"
#include "suites/meta.h"
#include "suites/report.h"
#include "suites/runner_detail.h"
#include "suites/sample_stats.h"
#include "suites/suite_device.h"

namespace seqbench {
namespace {

std::regex compile_filter(const std::string& filter) {
  try {
    return std::regex(filter.empty() ? std::string(".*") : filter, std::regex::ECMAScript);
  } catch (const std::regex_error& e) {
    SEQBENCH_FAIL("invalid --filter regex '" << filter << "': " << e.what());
  }
}

std::vector<const SuiteSpec*> select_suites(const std::vector<SuiteSpec>& all,
                                            const std::vector<std::string>& names) {
  std::vector<const SuiteSpec*> selected;
  if (names.empty()) {
    for (const SuiteSpec& s : all) selected.push_back(&s);
    return selected;
  }
  for (const std::string& name : names) {
    const SuiteSpec* suite = &find_suite(all, name);
    bool seen = false;
    for (const SuiteSpec* s : selected) seen = seen || s == suite;
    if (!seen) selected.push_back(suite);
  }
  return selected;
}

// Creates the folder and proves it writable now, rather than after an hour of measuring.
void prepare_out_dir(const std::filesystem::path& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  SEQBENCH_REQUIRE(!ec && std::filesystem::is_directory(dir),
                   "cannot create output folder '" << dir.string()
                                                   << "': " << (ec ? ec.message() : "a file is in the way"));
  const std::filesystem::path probe = dir / ".seqbench-write-probe";
  {
    std::ofstream out(probe);
    SEQBENCH_REQUIRE(out.good(), "output folder '" << dir.string() << "' is not writable");
  }
  std::filesystem::remove(probe, ec);
}

bool matches(const std::regex& re, const std::string& name) {
  return std::regex_search(name, re);
}

std::vector<CheckResult> filtered(std::vector<CheckResult> checks, const std::regex& re) {
  std::vector<CheckResult> kept;
  for (CheckResult& c : checks)
    if (matches(re, c.name)) kept.push_back(std::move(c));
  return kept;
}

std::string escape_regex(const std::string& text) {
  static const std::string special = R"(\^$.|?*+()[]{})";
  std::string out;
  for (const char c : text) {
    if (special.find(c) != std::string::npos) out += '\\';
    out += c;
  }
  return out;
}

// Prints one progress line per finished benchmark; the numbers come from our own samples.
class ProgressReporter : public benchmark::BenchmarkReporter {
 public:
  ProgressReporter(std::ostream& log, const std::map<std::string, std::vector<double>>& samples,
                   std::size_t total)
      : log_(log), samples_(samples), total_(total) {}
  bool ReportContext(const Context&) override { return true; }
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& run : runs) {
      if (run.run_type != Run::RT_Iteration) continue;
      // The registered name: run_name.str() appends "/iterations:1/repeats:N/manual_time", which
      // matches no key of samples_.
      const std::string name = run.run_name.function_name;
      log_ << "  [" << ++done_ << "/" << total_ << "] " << name;
      if (run.error_occurred) {
        log_ << ": ERROR " << run.error_message << "\n";
        continue;
      }
      const auto it = samples_.find(name);
      if (it != samples_.end() && !it->second.empty()) {
        const SampleStats stats = summarize_samples(it->second);
        log_ << ": median " << stats.median << " ms (p20 " << stats.p20 << ", p80 " << stats.p80 << ", "
             << stats.samples << " samples)";
      }
      log_ << "\n" << std::flush;
    }
  }
  void Finalize() override {}

 private:
  std::ostream& log_;
  const std::map<std::string, std::vector<double>>& samples_;
  std::size_t total_;
  std::size_t done_ = 0;
};

// One call of variant `v` per call of the returned work, rotating over the copies in order: any
// copies.size() consecutive calls run each copy once (what GpuTimer's samples of that many calls
// rely on).
Work rotating_work(const std::vector<PreparedExperiment>& copies, std::size_t v) {
  if (copies.size() == 1) return copies.front().variants[v];
  std::vector<Work> calls;
  for (const PreparedExperiment& copy : copies) calls.push_back(copy.variants[v]);
  auto next = std::make_shared<std::size_t>(0);
  return [calls = std::move(calls), next](cudaStream_t stream) {
    const Work& call = calls[*next % calls.size()];
    ++*next;
    call(stream);
  };
}

// Prepares an experiment on first use (calls_per_sample copies of it) and frees its buffers after
// its last variant ran, so one experiment's inputs are resident at a time.
struct ExperimentRun {
  const ExperimentSpec* spec;
  std::size_t remaining;                   // variant x repetition runs still to come
  std::vector<PreparedExperiment> copies;  // empty until prepared
  std::vector<Work> works;                 // per variant: rotating_work over the copies
  nlohmann::json notes;                    // the first copy's notes(), taken before the buffers are freed

  const Work& work(std::size_t v) {
    if (copies.empty()) {
      SEQBENCH_REQUIRE(spec->calls_per_sample >= 1 && spec->calls_per_sample <= kMaxCallsPerSample,
                       "experiment " << spec->name << ": calls_per_sample " << spec->calls_per_sample
                                     << " is outside 1.." << kMaxCallsPerSample);
      // Kept only once all are checked: a mis-sized one kept here would be indexed out of range by
      // the next variant instead of failing it.
      std::vector<PreparedExperiment> fresh;
      for (int c = 0; c < spec->calls_per_sample; ++c) {
        fresh.push_back(spec->prepare());
        SEQBENCH_REQUIRE(fresh.back().variants.size() == spec->variants.size(),
                         "experiment " << spec->name << " prepared " << fresh.back().variants.size()
                                       << " variants, declared " << spec->variants.size());
      }
      std::vector<Work> rotating;
      for (std::size_t i = 0; i < spec->variants.size(); ++i) rotating.push_back(rotating_work(fresh, i));
      copies = std::move(fresh);
      works = std::move(rotating);
    }
    return works.at(v);
  }
  void finished_one() {
    if (remaining > 0 && --remaining == 0) {
      // Called outside the benchmark's try block, and nothing may leave a benchmark function (it
      // would skip ClearRegisteredBenchmarks and lose the suite's report): notes are informative,
      // so an error in them is recorded there.
      if (!copies.empty() && copies.front().notes) {
        try {
          notes = copies.front().notes();
        } catch (const std::exception& e) {
          notes = {{"error", std::string("notes() failed: ") + e.what()}};
        }
      }
      works.clear();
      copies.clear();
    }
  }
};

void initialize_benchmark_library() {
  static const bool initialized = [] {
    static char program[] = "seqbench";
    static char* argv[] = {program, nullptr};
    int argc = 1;
    benchmark::Initialize(&argc, argv);
    return true;
  }();
  (void)initialized;
}

}  // namespace

namespace runner_detail {

nlohmann::json time_experiments(const SuiteSpec& suite, const std::vector<const ExperimentSpec*>& experiments,
                                const Sampler& sample, std::optional<double> copy_gbps, int repetitions,
                                std::ostream& log, std::vector<CheckResult>& failures) {
  initialize_benchmark_library();
  std::map<std::string, std::vector<double>> samples;
  std::map<std::string, std::pair<int, int>> graphed;  // repetitions that replayed a CUDA graph, of all
  std::map<std::string, std::string> notes;            // the first note the sampler gave
  std::map<std::string, std::string> errors;
  std::vector<std::unique_ptr<ExperimentRun>> runs;
  std::string spec_alternatives;
  std::size_t total = 0;
  // The benchmarks registered below capture this frame's locals: they are unregistered when it
  // ends, however it ends, so that a later call never runs one with dangling references.
  struct Unregister {
    ~Unregister() { benchmark::ClearRegisteredBenchmarks(); }
  } unregister;

  for (const ExperimentSpec* e : experiments) {
    runs.push_back(std::make_unique<ExperimentRun>(
        ExperimentRun{e, e->variants.size() * static_cast<std::size_t>(repetitions), {}, {}, {}}));
    ExperimentRun* run = runs.back().get();
    const std::string prefix = suite.name + "/" + e->name;
    spec_alternatives += (spec_alternatives.empty() ? "" : "|") + escape_regex(prefix);
    for (std::size_t v = 0; v < e->variants.size(); ++v) {
      const std::string name = prefix + "/" + e->variants[v].name;
      benchmark::RegisterBenchmark(
          name.c_str(),
          [run, v, name, &sample, &samples, &graphed, &notes, &errors](benchmark::State& state) {
            for (auto _ : state) {
              try {
                NvtxDynamicRange range(name);
                const TimedSamples t =
                    sample(run->work(v), run->spec->cuda_graph, run->spec->calls_per_sample);
                const auto& ms = t.ms;
                samples[name].insert(samples[name].end(), ms.begin(), ms.end());
                auto& [graph_runs, runs] = graphed[name];
                graph_runs += t.cuda_graph ? 1 : 0;
                ++runs;
                if (!t.note.empty()) notes.emplace(name, t.note);
                state.SetIterationTime(summarize_samples(ms).median * 1e-3);
              } catch (const std::exception& ex) {
                errors[name] = ex.what();
                state.SkipWithError(errors[name].c_str());
                break;
              }
            }
            run->finished_one();
          })
          ->UseManualTime()
          ->Iterations(1)
          ->Repetitions(repetitions)
          ->Unit(benchmark::kMillisecond);
      total += static_cast<std::size_t>(repetitions);
    }
  }

  ProgressReporter reporter(log, samples, total);
  // Google Benchmark does the selection: exactly the variants of the experiments chosen above.
  benchmark::RunSpecifiedBenchmarks(&reporter, "^(" + spec_alternatives + ")/");
  benchmark::ClearRegisteredBenchmarks();
  for (const auto& [name, message] : errors) {
    CheckResult failure;
    failure.name = "run/" + name;
    failure.passed = false;
    failure.detail = "not measured: " + message;
    failures.push_back(std::move(failure));
  }

  nlohmann::json out = nlohmann::json::array();
  for (std::size_t i = 0; i < experiments.size(); ++i) {
    const ExperimentSpec* e = experiments[i];
    bool failed = false;
    for (const VariantSpec& v : e->variants)
      failed = failed || errors.count(suite.name + "/" + e->name + "/" + v.name) > 0;
    if (failed) continue;
    nlohmann::json entry = {{"name", e->name}, {"params", e->params}, {"baseline", e->baseline}};
    if (runs[i]->notes.is_object()) entry["notes"] = runs[i]->notes;
    nlohmann::json variants = nlohmann::json::array();
    for (const VariantSpec& v : e->variants) {
      const std::string name = suite.name + "/" + e->name + "/" + v.name;
      nlohmann::json variant =
          make_variant(v.name, summarize_samples(samples.at(name)), v.bytes, v.flops, copy_gbps);
      const auto [graph_runs, runs] = graphed.at(name);
      variant["cuda_graph"] = graph_runs == runs;
      variant["calls_per_sample"] = e->calls_per_sample;
      std::string note = notes.count(name) > 0 ? notes.at(name) : "";
      if (graph_runs > 0 && graph_runs < runs)
        note += (note.empty() ? "" : "; ") + std::to_string(graph_runs) + " of " + std::to_string(runs) +
                " repetitions replayed a CUDA graph, the others launched directly; their samples are pooled";
      if (!note.empty()) variant["note"] = note;
      variants.push_back(std::move(variant));
    }
    entry["variants"] = std::move(variants);
    finalize_speedups(entry);
    out.push_back(std::move(entry));
  }
  return out;
}

}  // namespace runner_detail

namespace {

std::vector<CheckResult> suite_checks(const SuiteSpec& suite, bool gpu, std::uint64_t seed,
                                      const std::regex& re) {
  std::vector<CheckResult> checks;
  if (suite.cpu_checks) checks = suite.cpu_checks(seed);
  if (gpu && suite.gpu_checks) {
    auto more = suite.gpu_checks(seed);
    checks.insert(checks.end(), more.begin(), more.end());
  }
  return filtered(std::move(checks), re);
}

}  // namespace

RunResult run_suites(const RunOptions& options, std::ostream& log) {
  SEQBENCH_REQUIRE(options.repetitions >= 1 && options.repetitions <= 1000,
                   "--repetitions " << options.repetitions << " is outside 1..1000");
  const std::vector<SuiteSpec> all = all_suites(SuiteOptions{options.quick});
  const std::vector<const SuiteSpec*> selected = select_suites(all, options.suites);
  const std::regex re = compile_filter(options.filter);
  prepare_out_dir(options.out_dir);

  const DeviceProbe probe = probe_device(0);
  const bool gpu = probe.info.has_value();
  log << "seqbench run: " << (gpu ? "device " + probe.info->name : "no GPU (" + probe.reason + ")") << "\n";

  RunResult result;
  for (const SuiteSpec* suite : selected)
    if (suite->needs_gpu && !gpu) result.skipped.push_back({suite->name, "needs a GPU: " + probe.reason});

  std::unique_ptr<GpuTimer> timer;
  std::optional<double> copy_gbps;
  if (gpu) {
    timer = std::make_unique<GpuTimer>(options.quick ? TimerPolicy::quick() : TimerPolicy{});
    log << "measuring the device's copy bandwidth ..." << std::flush;
    // 1 GiB in quick runs too (the quick policy already cuts the samples): every sample starts
    // after the L2 flush memset, whose ~L2-sized dirty lines are written back inside the timed copy.
    // Against 2 x 256 MiB that is up to ~50 MB more traffic (up to ~9% low on an H100, every pct_copy_bw
    // that much high); against 2 x 1 GiB at most ~2.4%.
    copy_gbps = measure_copy_gbps(*timer);
    log << " " << *copy_gbps << " GB/s\n";
  }

  for (const SuiteSpec* suite : selected) {
    if (suite->needs_gpu && !gpu) {
      log << "skipped suite '" << suite->name << "': needs a GPU (" << probe.reason << ")\n";
      continue;
    }
    std::vector<const ExperimentSpec*> experiments;
    for (const ExperimentSpec& e : suite->experiments) {
      bool any = false;
      for (const VariantSpec& v : e.variants)
        any = any || matches(re, suite->name + "/" + e.name + "/" + v.name);
      if (any) experiments.push_back(&e);
    }
    log << "suite '" << suite->name << "': " << experiments.size() << " experiment(s), checks ...\n"
        << std::flush;
    std::vector<CheckResult> checks = suite_checks(*suite, gpu, options.seed, re);
    std::size_t failed = 0;
    for (const CheckResult& c : checks) failed += !c.passed;
    log << "  checks: " << checks.size() - failed << " passed, " << failed << " failed\n";

    nlohmann::json experiments_json = nlohmann::json::array();
    if (!experiments.empty()) {
      SEQBENCH_REQUIRE(gpu, "suite '" << suite->name << "' has timed experiments but no GPU is present");
      std::vector<CheckResult> failures;
      experiments_json = runner_detail::time_experiments(
          *suite, experiments,
          [&](const Work& work, bool cuda_graph, int calls_per_sample) {
            return timer->sample(work, cuda_graph, calls_per_sample);
          },
          copy_gbps, options.repetitions, log, failures);
      for (const CheckResult& f : failures) log << "  FAILED " << f.name << ": " << f.detail << "\n";
      failed += failures.size();
      checks.insert(checks.end(), failures.begin(), failures.end());
    }
    const nlohmann::json accounting = suite->accounting ? suite->accounting() : nlohmann::json();
    if (experiments.empty() && checks.empty() && accounting.empty()) {
      log << "  nothing in suite '" << suite->name << "' matches the filter; no report\n";
      continue;
    }

    nlohmann::json report = {{"schema", kReportSchema},
                             {"suite", suite->name},
                             {"meta", collect_meta(options.seed, probe, copy_gbps)},
                             {"experiments", std::move(experiments_json)},
                             {"checks", nlohmann::json::array()},
                             {"skipped", nlohmann::json::array()}};
    for (const CheckResult& c : checks) report["checks"].push_back(check_to_json(c));
    if (!accounting.empty()) report["accounting"] = accounting;
    for (const SkippedSuite& s : result.skipped)
      report["skipped"].push_back({{"suite", s.suite}, {"reason", s.reason}});
    require_valid_report(report, "internal: the report of suite '" + suite->name + "'");
    const std::filesystem::path path = options.out_dir / (suite->name + ".json");
    write_json_atomic(path, report);
    log << "  wrote " << path.string() << "\n";
    result.reports.push_back(path);
    result.checks += checks.size();
    result.failed_checks += failed;
  }
  return result;
}

std::vector<CheckResult> run_checks(const CheckOptions& options, std::ostream& log,
                                    std::vector<SkippedSuite>* skipped) {
  const std::vector<SuiteSpec> all = all_suites(SuiteOptions{});
  const std::vector<const SuiteSpec*> selected = select_suites(all, options.suites);
  const std::regex re = compile_filter(options.filter);
  const DeviceProbe probe = probe_device(0);
  const bool gpu = probe.info.has_value();
  std::vector<CheckResult> checks;
  for (const SuiteSpec* suite : selected) {
    if (!gpu && suite->gpu_checks) {
      log << "suite '" << suite->name << "': GPU checks skipped (" << probe.reason << ")\n";
      if (skipped) skipped->push_back({suite->name, "GPU checks need a GPU: " + probe.reason});
    }
    auto more = suite_checks(*suite, gpu, options.seed, re);
    checks.insert(checks.end(), more.begin(), more.end());
  }
  return checks;
}

}  // namespace seqbench
