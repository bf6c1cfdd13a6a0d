#include "suites/runner.h"

#include <benchmark/benchmark.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <iomanip>
#include <map>
#include <memory>
#include <ostream>
#include <regex>
#include <set>
#include <sstream>

#include "core/device_info.h"
#include "core/error.h"
#include "core/nvtx.h"
#include "suites/gpu_timer.h"
#include "suites/meta.h"
#include "suites/report.h"
#include "suites/runner_detail.h"
#include "suites/sample_stats.h"
#include "suites/suite_device.h"
#include "suites/text_format.h"

namespace seqbench {

// libstdc++'s std::regex compiles recursively: a pattern of 100K characters, or groups nested
// 20000 deep, overflowed the stack here (a segfault), where 64K characters of any form tried and
// 5000 nested groups compiled. The longest filter seqbench itself writes (tools/resume_filter.py,
// the whole operators suite) is about 14K characters and 2 groups deep.
constexpr std::size_t kMaxFilterLength = 65536;
constexpr int kMaxFilterNesting = 256;

std::regex compile_filter(const std::string& filter) {
  SEQBENCH_REQUIRE(filter.size() <= kMaxFilterLength,
                   "invalid --filter regex: it is " << filter.size() << " characters long, the limit is "
                                                    << kMaxFilterLength);
  int depth = 0, deepest = 0;
  bool in_class = false;
  for (std::size_t i = 0; i < filter.size(); ++i) {
    const char c = filter[i];
    if (c == '\\') {
      ++i;  // an escaped character is itself
    } else if (in_class) {
      in_class = c != ']';
    } else if (c == '[') {
      in_class = true;
    } else if (c == '(') {
      deepest = std::max(deepest, ++depth);
    } else if (c == ')') {
      --depth;
    }
  }
  SEQBENCH_REQUIRE(deepest <= kMaxFilterNesting, "invalid --filter regex: its groups nest "
                                                     << deepest << " deep, the limit is "
                                                     << kMaxFilterNesting);
  try {
    return std::regex(filter.empty() ? std::string(".*") : filter, std::regex::ECMAScript);
  } catch (const std::regex_error& e) {
    SEQBENCH_FAIL("invalid --filter regex '" << filter << "': " << e.what());
  }
}

namespace {

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

// Prints one progress line per finished benchmark; the numbers come from our own samples, and
// the seconds the run took (wall clock, prepare included) from `seconds`.
class ProgressReporter : public benchmark::BenchmarkReporter {
 public:
  ProgressReporter(std::ostream& log, const std::map<std::string, std::vector<double>>& samples,
                   const std::map<std::string, double>& seconds, std::size_t total)
      : log_(log), samples_(samples), seconds_(seconds), total_(total) {}
  bool ReportContext(const Context&) override { return true; }
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& run : runs) {
      if (run.run_type != Run::RT_Iteration) continue;
      // The registered name: run_name.str() appends "/iterations:1/repeats:N/manual_time", which
      // matches no key of samples_.
      const std::string name = run.run_name.function_name;
      log_ << "  [" << ++done_ << "/" << total_ << "] " << name;
      const auto took = seconds_.find(name);
      const std::string elapsed =
          took == seconds_.end() ? std::string() : " (" + seconds_text(took->second) + " s)";
      if (run.error_occurred) {
        log_ << ": ERROR " << run.error_message << elapsed << "\n" << std::flush;
        continue;
      }
      const auto it = samples_.find(name);
      if (it != samples_.end() && !it->second.empty()) {
        const SampleStats stats = summarize_samples(it->second);
        log_ << ": median " << stats.median << " ms (p20 " << stats.p20 << ", p80 " << stats.p80 << ", "
             << stats.samples << " samples)";
      }
      log_ << elapsed << "\n" << std::flush;
    }
  }
  void Finalize() override {}

 private:
  static std::string seconds_text(double s) {
    std::ostringstream text;
    text << std::fixed << std::setprecision(2) << s;
    return text.str();
  }
  std::ostream& log_;
  const std::map<std::string, std::vector<double>>& samples_;
  const std::map<std::string, double>& seconds_;
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
  std::string prepare_error;               // non-empty: prepare failed; the other variants fail alike

  const Work& work(std::size_t v) {
    if (!prepare_error.empty()) SEQBENCH_FAIL(prepare_error << " (prepare failed earlier; not retried)");
    if (copies.empty()) {
      try {
        prepare_all();
      } catch (const std::exception& e) {
        prepare_error = e.what();
        throw;
      }
    }
    return works.at(v);
  }
  void prepare_all() {
    {
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

namespace {

// The report entry of a measured experiment.
nlohmann::json experiment_entry(const SuiteSpec& suite, const ExperimentSpec& e, const ExperimentRun& run,
                                const std::map<std::string, std::vector<double>>& samples,
                                const std::map<std::string, std::pair<int, int>>& graphed,
                                const std::map<std::string, std::string>& notes,
                                std::optional<double> copy_gbps) {
  nlohmann::json entry = {{"name", e.name}, {"params", e.params}, {"baseline", e.baseline}};
  if (run.notes.is_object()) entry["notes"] = run.notes;
  nlohmann::json variants = nlohmann::json::array();
  for (const VariantSpec& v : e.variants) {
    const std::string name = suite.name + "/" + e.name + "/" + v.name;
    nlohmann::json variant =
        make_variant(v.name, summarize_samples(samples.at(name)), v.bytes, v.flops, copy_gbps);
    const auto [graph_runs, runs] = graphed.at(name);
    variant["cuda_graph"] = graph_runs == runs;
    variant["calls_per_sample"] = e.calls_per_sample;
    if (!v.component_of.empty()) variant["component_of"] = v.component_of;
    std::string note = notes.count(name) > 0 ? notes.at(name) : "";
    if (graph_runs > 0 && graph_runs < runs)
      note += (note.empty() ? "" : "; ") + std::to_string(graph_runs) + " of " + std::to_string(runs) +
              " repetitions replayed a CUDA graph, the others launched directly; their samples are pooled";
    if (!note.empty()) variant["note"] = note;
    variants.push_back(std::move(variant));
  }
  entry["variants"] = std::move(variants);
  finalize_speedups(entry);
  return entry;
}

}  // namespace

nlohmann::json time_experiments(const SuiteSpec& suite, const std::vector<const ExperimentSpec*>& experiments,
                                const Sampler& sample, std::optional<double> copy_gbps, int repetitions,
                                std::ostream& log, std::vector<CheckResult>& failures) {
  TimingOutcome outcome =
      time_experiments_controlled(suite, experiments, sample, copy_gbps, repetitions, log, TimingHooks{});
  failures.insert(failures.end(), outcome.failures.begin(), outcome.failures.end());
  return std::move(outcome.experiments);
}

TimingOutcome time_experiments_controlled(const SuiteSpec& suite,
                                          const std::vector<const ExperimentSpec*>& experiments,
                                          const Sampler& sample, std::optional<double> copy_gbps,
                                          int repetitions, std::ostream& log, const TimingHooks& hooks) {
  initialize_benchmark_library();
  TimingOutcome outcome;
  std::map<std::string, std::vector<double>> samples;
  std::map<std::string, std::pair<int, int>> graphed;  // repetitions that replayed a CUDA graph, of all
  std::map<std::string, std::string> notes;            // the first note the sampler gave
  std::map<std::string, std::string> errors;
  std::map<std::string, double> seconds;  // the last run's wall-clock seconds, prepare included
  std::set<std::string> halted;           // variants not run: a stop request or a lost device
  // The benchmarks registered below capture this frame's locals: they are unregistered when it
  // ends, however it ends, so that a later call never runs one with dangling references.
  struct Unregister {
    ~Unregister() { benchmark::ClearRegisteredBenchmarks(); }
  } unregister;
  std::size_t total = 0;
  for (const ExperimentSpec* e : experiments)
    total += e->variants.size() * static_cast<std::size_t>(repetitions);
  ProgressReporter reporter(log, samples, seconds, total);
  const auto stop_requested = [&hooks] { return hooks.stop_requested && hooks.stop_requested(); };

  for (std::size_t i = 0; i < experiments.size(); ++i) {
    const ExperimentSpec* e = experiments[i];
    const std::string prefix = suite.name + "/" + e->name;
    const std::vector<const ExperimentSpec*> pending(experiments.begin() + static_cast<std::ptrdiff_t>(i) + 1,
                                                     experiments.end());
    const auto not_run = [&](const std::string& reason) {
      outcome.not_run.push_back({{"experiment", e->name}, {"reason", reason}});
      log << "  " << prefix << ": " << reason << "\n" << std::flush;
    };
    if (!outcome.device_lost.empty()) {
      not_run("not run: device lost " + outcome.device_lost);
    } else if (stop_requested()) {
      outcome.stopped = true;
      not_run("not run: " + hooks.stop_reason);
    } else if (const std::string why = hooks.may_not_start ? hooks.may_not_start() : ""; !why.empty()) {
      ++outcome.not_started_budget;
      not_run("not started: " + why);
    } else {
      ExperimentRun run{e, e->variants.size() * static_cast<std::size_t>(repetitions), {}, {}, {}, {}};
      for (std::size_t v = 0; v < e->variants.size(); ++v) {
        const std::string name = prefix + "/" + e->variants[v].name;
        benchmark::RegisterBenchmark(
            name.c_str(),
            [&, v, name](benchmark::State& state) {
              if (!outcome.device_lost.empty() || stop_requested()) {
                halted.insert(name);
                state.SkipWithError("not run");
                run.finished_one();
                return;
              }
              log << "  start " << name << "\n" << std::flush;
              const auto started = std::chrono::steady_clock::now();
              for (auto _ : state) {
                try {
                  NvtxDynamicRange range(name);
                  const TimedSamples t =
                      sample(run.work(v), run.spec->cuda_graph, run.spec->calls_per_sample);
                  const auto& ms = t.ms;
                  samples[name].insert(samples[name].end(), ms.begin(), ms.end());
                  auto& [graph_runs, runs] = graphed[name];
                  graph_runs += t.cuda_graph ? 1 : 0;
                  ++runs;
                  if (!t.note.empty()) notes.emplace(name, t.note);
                  state.SetIterationTime(summarize_samples(ms).median * 1e-3);
                } catch (const std::exception& ex) {
                  errors[name] = ex.what();
                  // A sticky error breaks the context for everything after it: say so once.
                  if (hooks.sticky_error && outcome.device_lost.empty()) {
                    const std::string sticky = hooks.sticky_error();
                    if (!sticky.empty()) outcome.device_lost = "after " + name + ": " + sticky;
                  }
                  state.SkipWithError(errors[name].c_str());
                  break;
                }
              }
              seconds[name] =
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
              run.finished_one();
            })
            ->UseManualTime()
            ->Iterations(1)
            ->Repetitions(repetitions)
            ->Unit(benchmark::kMillisecond);
      }
      // Google Benchmark does the selection: exactly this experiment's variants.
      benchmark::RunSpecifiedBenchmarks(&reporter, "^" + escape_regex(prefix) + "/");
      benchmark::ClearRegisteredBenchmarks();
      bool failed = false, incomplete = false;
      for (const VariantSpec& v : e->variants) {
        const std::string name = prefix + "/" + v.name;
        if (const auto it = errors.find(name); it != errors.end()) {
          failed = true;
          CheckResult failure;
          failure.name = "run/" + name;
          failure.passed = false;
          failure.detail = "not measured: " + it->second;
          log << "  FAILED " << failure.name << ": " << failure.detail << "\n" << std::flush;
          outcome.failures.push_back(std::move(failure));
        } else if (halted.count(name) > 0 || samples.count(name) == 0) {
          incomplete = true;
        }
      }
      if (!failed && !incomplete) {
        // Summarizing can refuse what was measured (a p20 of 0 ms: a variant whose calls enqueue
        // nothing, or under the events' resolution): that is this experiment's failure, as a
        // sampling error would be, not the end of the run.
        try {
          outcome.experiments.push_back(experiment_entry(suite, *e, run, samples, graphed, notes, copy_gbps));
        } catch (const std::exception& ex) {
          CheckResult failure;
          failure.name = "run/" + prefix + "/" + kSummaryFailure;
          failure.passed = false;
          failure.detail = std::string("not reported: ") + ex.what();
          log << "  FAILED " << failure.name << ": " << failure.detail << "\n" << std::flush;
          outcome.failures.push_back(std::move(failure));
        }
      } else if (!failed) {
        if (!outcome.device_lost.empty()) {
          not_run("not run: device lost " + outcome.device_lost);
        } else {
          outcome.stopped = true;
          not_run("not run: " + hooks.stop_reason);
        }
      }
    }
    if (hooks.after_experiment) hooks.after_experiment(outcome, pending);
  }
  return outcome;
}

}  // namespace runner_detail

std::vector<CheckResult> checks_or_failure(const std::string& family,
                                           const std::function<std::vector<CheckResult>()>& run) {
  try {
    return run();
  } catch (const std::exception& e) {
    CheckResult failure;
    failure.name = "checks/" + family;
    failure.passed = false;
    failure.detail = std::string("the check family threw before it finished: ") + e.what();
    return {failure};
  }
}

namespace {

bool env_expects_gpu() {
  const char* value = std::getenv("SEQBENCH_EXPECT_GPU");
  return value != nullptr && std::string(value) != "" && std::string(value) != "0";
}

// Whether the context still works after a failure: a sticky error (an illegal address, a
// device-side assert) makes every later call fail, cudaDeviceSynchronize included, twice in a row;
// a non-sticky one (a failed allocation) is cleared by cudaGetLastError. Empty: the device works.
std::string sticky_cuda_error() {
  (void)cudaGetLastError();
  if (cudaDeviceSynchronize() == cudaSuccess) return "";
  (void)cudaGetLastError();
  const cudaError_t again = cudaDeviceSynchronize();
  if (again == cudaSuccess) return "";
  return std::string(cudaGetErrorName(again)) + ": " + cudaGetErrorString(again);
}

// The suite's checks under the filter: each family (CPU, GPU) runs on its own, and one that throws
// is a failed check "checks/<suite>/<cpu|gpu>" carrying the message, not the end of the run; a
// family's own parts report theirs as "checks/<suite>/gpu/<part>" (checks_or_failure in the
// operators and layers suites). Those failures are kept whatever the filter. `threw` is set when
// there was one; `ran` gets the families that ran ("cpu", "gpu").
std::vector<CheckResult> suite_checks(const SuiteSpec& suite, bool gpu, std::uint64_t seed,
                                      const std::regex& re, bool* threw = nullptr,
                                      std::vector<std::string>* ran = nullptr) {
  std::vector<CheckResult> checks, failures;
  const std::string failure_prefix = "checks/" + suite.name + "/";
  const auto family = [&](const char* kind,
                          const std::function<std::vector<CheckResult>(std::uint64_t)>& fn) {
    if (ran) ran->push_back(kind);
    for (CheckResult& c : checks_or_failure(suite.name + "/" + kind, [&] { return fn(seed); })) {
      if (!c.passed && c.name.rfind(failure_prefix, 0) == 0) {
        if (threw) *threw = true;
        failures.push_back(std::move(c));
      } else {
        checks.push_back(std::move(c));
      }
    }
  };
  if (suite.cpu_checks) family("cpu", suite.cpu_checks);
  if (gpu && suite.gpu_checks) family("gpu", suite.gpu_checks);
  checks = filtered(std::move(checks), re);
  checks.insert(checks.end(), failures.begin(), failures.end());
  return checks;
}

// A signal may land on any thread (the CUDA runtime's included), so the flag is a lock-free atomic,
// not a volatile sig_atomic_t (which orders nothing across threads).
std::atomic<int> g_stop_signal{0};
static_assert(std::atomic<int>::is_always_lock_free, "the stop flag is written from a signal handler");

extern "C" void on_stop_signal(int signo) {
  g_stop_signal = signo;
  std::signal(signo, SIG_DFL);
}

std::string stop_reason() {
  return std::string("stopped by ") + (g_stop_signal == SIGINT ? "SIGINT" : "SIGTERM");
}

std::string meta_text(const nlohmann::json& meta, const char* key) {
  const auto it = meta.find(key);
  if (it == meta.end() || it->is_null()) return "(none)";
  return it->is_string() ? it->get<std::string>() : it->dump();
}

std::string device_name_of(const nlohmann::json& meta) {
  const auto it = meta.find("device");
  if (it == meta.end() || !it->is_object() || !it->contains("name")) return "(no GPU)";
  return it->at("name").get<std::string>();
}

std::string file_stamp() {
  std::string stamp = utc_timestamp();
  stamp.erase(std::remove(stamp.begin(), stamp.end(), ':'), stamp.end());
  stamp.erase(std::remove(stamp.begin(), stamp.end(), '-'), stamp.end());
  return stamp;
}

// Moves `path` to "<path>.<what>-<UTC time>" (never over another file); the new path.
std::filesystem::path move_aside(const std::filesystem::path& path, const std::string& what) {
  const std::string base = path.string() + "." + what + "-" + file_stamp();
  std::filesystem::path target = base;
  for (int n = 2; std::filesystem::exists(target); ++n) target = base + "." + std::to_string(n);
  std::error_code ec;
  std::filesystem::rename(path, target, ec);
  SEQBENCH_REQUIRE(
      !ec, "cannot move '" << path.string() << "' aside to '" << target.string() << "': " << ec.message());
  return target;
}

}  // namespace

namespace runner_detail {

StopSignalScope::StopSignalScope() {
  g_stop_signal = 0;
  term_ = std::signal(SIGTERM, on_stop_signal);
  interrupt_ = std::signal(SIGINT, on_stop_signal);
}

StopSignalScope::~StopSignalScope() {
  std::signal(SIGTERM, term_ == SIG_ERR ? SIG_DFL : term_);
  std::signal(SIGINT, interrupt_ == SIG_ERR ? SIG_DFL : interrupt_);
}

int StopSignalScope::received() {
  return g_stop_signal;
}

void require_mergeable(const nlohmann::json& old, const nlohmann::json& meta, const std::string& suite,
                       const std::string& what) {
  const nlohmann::json& old_meta = old.at("meta");
  const auto refuse = [&](const std::string& why) {
    SEQBENCH_FAIL("cannot merge this filtered run into "
                  << what << ": " << why << " (move the old file away to start a new report)");
  };
  if (old.at("suite") != suite)
    refuse("it holds suite '" + old.at("suite").get<std::string>() + "', this run '" + suite + "'");
  if (device_name_of(old_meta) != device_name_of(meta))
    refuse("it was measured on " + device_name_of(old_meta) + ", this run on " + device_name_of(meta));
  const std::string old_sha = meta_text(old_meta, "git_sha"), sha = meta_text(meta, "git_sha");
  if (old_sha == "unknown" || sha == "unknown")
    refuse(
        "git sha 'unknown' (a build without .git or BUILD_STAMP: run tools/stamp.sh before the device call); "
        "it holds " +
        old_sha + ", this run " + sha);
  if (old_sha != sha) refuse("it holds git sha " + old_sha + ", this run " + sha);
  // One commit is not one build: the parts of a suite are often measured from an uncommitted tree.
  // Where both say which sources they were built from, those must agree; where either does not,
  // neither may be dirty (the sha then names the sources).
  const auto hash_of = [](const nlohmann::json& m) {
    const auto it = m.find("source_hash");
    return it != m.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  const std::string old_hash = hash_of(old_meta), hash = hash_of(meta);
  if (!old_hash.empty() && !hash.empty()) {
    if (old_hash != hash)
      refuse("it was built from other sources (source hash " + old_hash.substr(0, 12) + ", this run " +
             hash.substr(0, 12) + ") of git sha " + sha);
  } else if (old_meta.value("git_dirty", false) || meta.value("git_dirty", false)) {
    refuse(std::string("a part is dirty (uncommitted source changes) and ") +
           (old_hash.empty() ? "it" : "this run") +
           " records no source hash, so the sources cannot be compared");
  }
  const auto quick = old_meta.find("quick");
  if (quick == old_meta.end() || !quick->is_boolean())
    refuse("it records no quick flag (written before meta.quick existed)");
  if (*quick != meta.at("quick"))
    refuse(std::string("it holds a ") + (quick->get<bool>() ? "--quick" : "full") + " run, this run is " +
           (meta.at("quick").get<bool>() ? "--quick" : "full"));
}

std::string checks_not_keepable(const nlohmann::json& old) {
  const std::string family_prefix = "checks/" + old.at("suite").get<std::string>() + "/";
  for (const auto& c : old.at("checks")) {
    const std::string name = c.at("name").get<std::string>();
    if (!c.at("passed").get<bool>() && name.rfind(family_prefix, 0) == 0)
      return "a check family failed (" + name + ")";
  }
  const nlohmann::json& meta = old.at("meta");
  const nlohmann::json parts = meta.value("parts", nlohmann::json::array({meta}));
  for (const auto& part : parts) {
    const auto filter = part.find("filter");
    const auto ran = part.find("checks_run");
    if ((filter == part.end() || filter->is_null()) && (ran == part.end() || *ran != false)) return "";
  }
  return "no part of the report ran them unfiltered";
}

nlohmann::json merge_reports(const nlohmann::json& old, const nlohmann::json& fresh) {
  nlohmann::json doc = fresh;
  // Experiments this run attempted (measured or failed) replace the old ones of that name.
  std::set<std::string> attempted, measured;
  for (const auto& e : fresh.at("experiments")) attempted.insert(e.at("name").get<std::string>());
  const std::string suite = fresh.at("suite").get<std::string>();
  const std::string run_prefix = "run/" + suite + "/";
  for (const auto& c : fresh.at("checks")) {
    const std::string name = c.at("name").get<std::string>();
    if (name.rfind(run_prefix, 0) == 0) {
      const std::string rest = name.substr(run_prefix.size());
      attempted.insert(rest.substr(0, rest.rfind('/')));
    }
  }
  nlohmann::json experiments = nlohmann::json::array();
  for (const auto& e : old.at("experiments"))
    if (attempted.count(e.at("name").get<std::string>()) == 0) experiments.push_back(e);
  for (const auto& e : fresh.at("experiments")) experiments.push_back(e);
  for (const auto& e : experiments) measured.insert(e.at("name").get<std::string>());
  doc["experiments"] = experiments;
  // Checks by name: this run's replace the old ones; an old run/ failure of an attempted experiment goes.
  std::set<std::string> fresh_checks;
  for (const auto& c : fresh.at("checks")) fresh_checks.insert(c.at("name").get<std::string>());
  nlohmann::json checks = nlohmann::json::array();
  for (const auto& c : old.at("checks")) {
    const std::string name = c.at("name").get<std::string>();
    bool superseded = fresh_checks.count(name) > 0;
    // An old family failure ("checks/<suite>/<cpu|gpu>[/<part>]") goes when this run ran that family.
    for (const auto& kind : fresh.at("meta").value("check_families", nlohmann::json::array()))
      superseded = superseded || name == "checks/" + suite + "/" + kind.get<std::string>() ||
                   name.rfind("checks/" + suite + "/" + kind.get<std::string>() + "/", 0) == 0;
    if (name.rfind(run_prefix, 0) == 0) {
      const std::string rest = name.substr(run_prefix.size());
      superseded = superseded || attempted.count(rest.substr(0, rest.rfind('/'))) > 0;
    }
    if (!superseded) checks.push_back(c);
  }
  for (const auto& c : fresh.at("checks")) checks.push_back(c);
  doc["checks"] = checks;
  // Absences: this run's, then the old ones of experiments it did not list; none for a measured one.
  std::set<std::string> listed;
  nlohmann::json not_run = nlohmann::json::array();
  for (const auto& n : fresh.value("not_run", nlohmann::json::array())) {
    listed.insert(n.at("experiment").get<std::string>());
    if (measured.count(n.at("experiment").get<std::string>()) == 0) not_run.push_back(n);
  }
  for (const auto& n : old.value("not_run", nlohmann::json::array())) {
    const std::string name = n.at("experiment").get<std::string>();
    if (listed.count(name) == 0 && measured.count(name) == 0 && attempted.count(name) == 0)
      not_run.push_back(n);
  }
  doc["not_run"] = not_run;
  if (!doc.contains("accounting") && old.contains("accounting")) doc["accounting"] = old["accounting"];
  // meta is this run's; meta.parts lists every run whose numbers the file may still hold.
  nlohmann::json parts = old.at("meta").value("parts", nlohmann::json::array());
  if (parts.empty()) {
    const nlohmann::json& m = old.at("meta");
    parts.push_back({{"timestamp", m.value("timestamp", "")},
                     {"host", m.value("host", "")},
                     {"git_dirty", m.value("git_dirty", false)},
                     {"source_hash", m.contains("source_hash") ? m["source_hash"] : nlohmann::json(nullptr)},
                     {"filter", m.contains("filter") ? m["filter"] : nlohmann::json(nullptr)},
                     {"quick", m.contains("quick") ? m["quick"] : nlohmann::json(nullptr)}});
  }
  bool dirty = fresh.at("meta").value("git_dirty", false);
  for (const auto& part : parts) dirty = dirty || part.value("git_dirty", false);
  parts.push_back(fresh.at("meta").at("parts").back());
  doc["meta"]["parts"] = parts;
  doc["meta"]["git_dirty"] = dirty;
  return doc;
}

}  // namespace runner_detail

namespace {

constexpr double kBudgetFloorSeconds = 10.0;

// The time budget (--budget-seconds): an experiment starts only while what is left covers the
// longest experiment so far, and at least kBudgetFloorSeconds.
struct Budget {
  std::optional<double> seconds;
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  double longest = 0;
  std::optional<std::chrono::steady_clock::time_point> experiment_start;
  double left() const {
    return *seconds - std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  std::string may_not_start() {
    if (seconds && left() < std::max(kBudgetFloorSeconds, longest)) return "time budget";
    experiment_start = std::chrono::steady_clock::now();
    return "";
  }
  void finished() {
    if (!experiment_start) return;
    longest = std::max(
        longest, std::chrono::duration<double>(std::chrono::steady_clock::now() - *experiment_start).count());
    experiment_start.reset();
  }
};

// The report of one suite as the run goes: rewritten whole, atomically, after the checks and
// after every experiment, merged into `existing` (a filtered run's earlier parts) when there is one.
// (NOLINT: the check traces nlohmann::json's noexcept destructor, whose non-recursive teardown
// reserves a vector, to its implicit one.)
struct SuiteReport {  // NOLINT(bugprone-exception-escape)
  std::filesystem::path path;
  nlohmann::json base;                     // schema, suite, meta, checks, skipped, accounting
  std::optional<nlohmann::json> existing;  // what a filtered run merges into

  nlohmann::json document(const runner_detail::TimingOutcome& outcome,
                          const std::vector<const ExperimentSpec*>& pending,
                          const std::string& pending_reason) const {
    nlohmann::json doc = base;
    doc["experiments"] = outcome.experiments;
    for (const CheckResult& c : outcome.failures) doc["checks"].push_back(check_to_json(c));
    doc["not_run"] = outcome.not_run;
    for (const ExperimentSpec* e : pending)
      doc["not_run"].push_back({{"experiment", e->name}, {"reason", pending_reason}});
    require_valid_report(doc, "internal: the report of suite '" + doc.at("suite").get<std::string>() + "'");
    if (!existing) return doc;
    nlohmann::json merged = runner_detail::merge_reports(*existing, doc);
    require_valid_report(merged,
                         "internal: the merged report of suite '" + doc.at("suite").get<std::string>() + "'");
    return merged;
  }
  void write(const runner_detail::TimingOutcome& outcome, const std::vector<const ExperimentSpec*>& pending,
             const std::string& pending_reason = "not run: the run ended before it") const {
    write_json_atomic(path, document(outcome, pending, pending_reason));
  }
};

}  // namespace

void require_valid_run_options(const RunOptions& options) {
  SEQBENCH_REQUIRE(options.repetitions >= 1 && options.repetitions <= 1000,
                   "--repetitions " << options.repetitions << " is outside 1..1000");
  SEQBENCH_REQUIRE(!options.budget_seconds || *options.budget_seconds > 0,
                   "--budget-seconds " << *options.budget_seconds << " is not a positive number of seconds");
  SEQBENCH_REQUIRE(!options.keep_checks || !options.filter.empty(),
                   "--keep-checks needs a non-empty --filter: a run without one replaces the suite's report, "
                   "so there are no checks to keep");
}

RunResult run_suites(const RunOptions& options, std::ostream& log) {
  // From here on a SIGTERM ends the run with its reports written (the CUDA probe can take seconds).
  const runner_detail::StopSignalScope signals;
  require_valid_run_options(options);
  Budget budget;
  budget.seconds = options.budget_seconds;
  const std::vector<SuiteSpec> all = all_suites(SuiteOptions{options.quick});
  const std::vector<const SuiteSpec*> selected = select_suites(all, options.suites);
  const std::regex re = compile_filter(options.filter);
  RunResult result;
  result.out_dir = options.out_dir;
  if (!result.out_dir.empty()) prepare_out_dir(result.out_dir);  // before the (slow) probe

  const DeviceProbe probe = probe_device(0);
  const bool gpu = probe.info.has_value();
  result.gpu = gpu;
  if (result.out_dir.empty()) {
    result.out_dir = std::filesystem::path("seqbench-out") / device_slug(probe);
    prepare_out_dir(result.out_dir);
  }
  log << "seqbench run: " << (gpu ? "device " + probe.info->name : "no GPU (" + probe.reason + ")") << "\n"
      << std::flush;
  if (!gpu && env_expects_gpu()) {
    for (const SuiteSpec* suite : selected)
      SEQBENCH_REQUIRE(!suite->needs_gpu && !suite->gpu_checks,
                       "SEQBENCH_EXPECT_GPU is set but no GPU is visible (" << probe.reason << "): suite '"
                                                                            << suite->name << "' needs one");
  }

  for (const SuiteSpec* suite : selected)
    if (suite->needs_gpu && !gpu) result.skipped.push_back({suite->name, "needs a GPU: " + probe.reason});

  // The meta every report of this run carries (its timestamp is the run's start).
  const TimerPolicy policy = options.quick ? TimerPolicy::quick() : TimerPolicy{};
  const auto run_meta = [&](std::optional<double> copy_gbps) {
    nlohmann::json meta = collect_meta(options.seed, probe, copy_gbps);
    meta["quick"] = options.quick;
    meta["filter"] = options.filter.empty() ? nlohmann::json(nullptr) : nlohmann::json(options.filter);
    meta["repetitions"] = options.repetitions;
    meta["timer_policy"] = {
        {"name", options.quick ? "quick" : "default"}, {"warmup_runs", policy.warmup_runs},
        {"min_samples", policy.min_samples},           {"max_samples", policy.max_samples},
        {"budget_seconds", policy.budget_seconds},     {"flush_l2", policy.flush_l2}};
    meta["parts"] =
        nlohmann::json::array({{{"timestamp", meta["timestamp"]},
                                {"host", meta["host"]},
                                {"git_dirty", meta["git_dirty"]},
                                {"source_hash", meta["source_hash"]},
                                {"filter", meta["filter"]},
                                {"quick", options.quick},
                                {"copy_gbps", copy_gbps ? nlohmann::json(*copy_gbps) : nullptr}}});
    return meta;
  };

  // Before anything is measured: a filtered run merges into the report already there, which must
  // be of the same suite, device, git sha and quick flag; an unreadable one is moved aside; an
  // unfiltered run replaces it (moving aside one of the other quick setting, not losing it).
  std::map<std::string, std::optional<nlohmann::json>> existing;
  {
    const nlohmann::json probe_meta = run_meta(std::nullopt);
    for (const SuiteSpec* suite : selected) {
      if (suite->needs_gpu && !gpu) continue;
      const std::filesystem::path path = result.out_dir / (suite->name + ".json");
      if (!std::filesystem::exists(path)) continue;
      nlohmann::json old;
      try {
        old = read_report(path);
      } catch (const Error& e) {
        const auto aside = move_aside(path, "unreadable");
        log << "  " << path.string() << " is not a readable report (" << e.message() << "); moved aside to "
            << aside.string() << "\n";
        continue;
      }
      if (!options.filter.empty()) {
        runner_detail::require_mergeable(old, probe_meta, suite->name, "'" + path.string() + "'");
        existing[suite->name] = std::move(old);
      } else if (const auto q = old.at("meta").find("quick");
                 q != old.at("meta").end() && q->is_boolean() && q->get<bool>() != options.quick) {
        // A report that does not say (older ones) is replaced as before.
        const auto aside = move_aside(path, q->get<bool>() ? "quick" : "full");
        log << "  " << path.string() << " holds a run of the other --quick setting; moved aside to "
            << aside.string() << "\n";
      }
    }
  }

  std::unique_ptr<GpuTimer> timer;
  std::optional<double> copy_gbps;
  if (gpu) {
    timer = std::make_unique<GpuTimer>(policy);
    log << "measuring the device's copy bandwidth ..." << std::flush;
    // 1 GiB in quick runs too (the quick policy already cuts the samples), so the copy's rate is
    // a DRAM rate whatever the L2 (the flush before each sample is a read: suites/l2_flush.h).
    copy_gbps = measure_copy_gbps(*timer);
    log << " " << *copy_gbps << " GB/s\n" << std::flush;
  }

  std::string device_lost;    // the sticky error that ended the device for this process
  bool stop_skipped = false;  // a signal kept something from running (listed in not_run)
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
    if (g_stop_signal != 0 || (options.budget_seconds && budget.left() < kBudgetFloorSeconds)) {
      // Nothing of this suite starts; its report (if any) stays as it was.
      const std::string why = g_stop_signal != 0 ? "not run: " + stop_reason() : "not started: time budget";
      log << "suite '" << suite->name << "': " << why << "\n" << std::flush;
      result.not_run.push_back(suite->name + ": " + why);
      if (g_stop_signal == 0) result.not_started += std::max<std::size_t>(1, experiments.size());
      stop_skipped = stop_skipped || g_stop_signal != 0;
      continue;
    }
    // After an earlier suite lost the device, this one's GPU work cannot run: its GPU check family
    // is a failed check and its experiments are listed not run; a report already there (measured
    // before) stays as it was, as when a signal stops the run.
    const bool gpu_usable = gpu && device_lost.empty();
    const bool lost_here = gpu && !gpu_usable && (suite->gpu_checks || !experiments.empty());
    const std::string lost_why = "not run: device lost " + device_lost;
    if (lost_here && std::filesystem::exists(result.out_dir / (suite->name + ".json"))) {
      log << "suite '" << suite->name << "': " << lost_why << "; its report stays as it was\n";
      if (suite->gpu_checks) {
        log << "  FAILED checks/" << suite->name << "/gpu: " << lost_why << "\n";
        ++result.checks;
        ++result.failed_checks;
      }
      for (const ExperimentSpec* e : experiments)
        result.not_run.push_back(suite->name + "/" + e->name + ": " + lost_why);
      if (experiments.empty()) result.not_run.push_back(suite->name + ": " + lost_why);
      log << std::flush;
      continue;
    }
    // --keep-checks: only checks that are the whole of this build's (the merge guarantees the build).
    std::string keep_refused;
    if (options.keep_checks) {
      const auto it = existing.find(suite->name);
      keep_refused = it == existing.end() || !it->second ? "no report to keep them from"
                                                         : runner_detail::checks_not_keepable(*it->second);
    }
    const bool keep = options.keep_checks && keep_refused.empty();
    log << "suite '" << suite->name << "': " << experiments.size() << " experiment(s), checks "
        << (keep                  ? "kept from the report (--keep-checks)"
            : options.keep_checks ? "... (not kept: " + keep_refused + ")"
                                  : std::string("..."))
        << "\n"
        << std::flush;
    result.kept_checks += keep;
    bool checks_threw = false;
    std::vector<std::string> families_ran;
    const auto checks_start = std::chrono::steady_clock::now();
    std::vector<CheckResult> checks;
    if (!keep) checks = suite_checks(*suite, gpu_usable, options.seed, re, &checks_threw, &families_ran);
    if (lost_here && suite->gpu_checks) {
      CheckResult lost;
      lost.name = "checks/" + suite->name + "/gpu";
      lost.passed = false;
      lost.detail = lost_why;
      checks.push_back(std::move(lost));
    }
    if (gpu_usable && checks_threw && device_lost.empty()) {
      const std::string sticky = sticky_cuda_error();
      if (!sticky.empty()) device_lost = "after the checks of suite '" + suite->name + "': " + sticky;
    }
    std::size_t failed = 0;
    for (const CheckResult& c : checks) {
      failed += !c.passed;
      if (!c.passed && c.name.rfind("checks/", 0) == 0)
        log << "  FAILED " << c.name << ": " << c.detail << "\n";
    }
    if (!keep)
      log << "  checks: " << checks.size() - failed << " passed, " << failed << " failed in "
          << fixed_decimals(
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - checks_start).count(), 1)
          << " s\n"
          << std::flush;

    const nlohmann::json accounting = suite->accounting ? suite->accounting() : nlohmann::json();
    if (experiments.empty() && checks.empty() && accounting.empty()) {
      log << "  nothing in suite '" << suite->name << "' matches the filter; no report\n" << std::flush;
      continue;
    }
    SuiteReport report;
    report.path = result.out_dir / (suite->name + ".json");
    report.base = {{"schema", kReportSchema},           {"suite", suite->name},
                   {"meta", run_meta(copy_gbps)},       {"experiments", nlohmann::json::array()},
                   {"checks", nlohmann::json::array()}, {"skipped", nlohmann::json::array()}};
    for (const CheckResult& c : checks) report.base["checks"].push_back(check_to_json(c));
    report.base["meta"]["check_families"] = families_ran;  // what a merge may supersede "checks/" failures of
    report.base["meta"]["checks_run"] = !keep;
    report.base["meta"]["parts"].back()["checks_run"] = !keep;
    if (!accounting.empty()) report.base["accounting"] = accounting;
    for (const SkippedSuite& s : result.skipped)
      report.base["skipped"].push_back({{"suite", s.suite}, {"reason", s.reason}});
    if (const auto it = existing.find(suite->name); it != existing.end()) report.existing = it->second;

    runner_detail::TimingOutcome outcome;
    if (!experiments.empty() && !gpu) {
      SEQBENCH_FAIL("suite '" << suite->name << "' has timed experiments but no GPU is present");
    } else if (!experiments.empty() && !device_lost.empty()) {
      for (const ExperimentSpec* e : experiments)
        outcome.not_run.push_back(
            {{"experiment", e->name}, {"reason", "not run: device lost " + device_lost}});
      outcome.device_lost = device_lost;
    } else if (!experiments.empty()) {
      report.write(outcome, experiments);  // the checks, and every experiment listed as not run yet
      runner_detail::TimingHooks hooks;
      hooks.may_not_start = [&budget] { return budget.may_not_start(); };
      hooks.stop_requested = [] { return g_stop_signal != 0; };
      hooks.stop_reason = "stopped by a signal (SIGTERM or SIGINT)";
      hooks.sticky_error = sticky_cuda_error;
      hooks.after_experiment = [&](const runner_detail::TimingOutcome& so_far,
                                   const std::vector<const ExperimentSpec*>& pending) {
        budget.finished();
        report.write(so_far, pending);
      };
      outcome = runner_detail::time_experiments_controlled(
          *suite, experiments,
          [&](const Work& work, bool cuda_graph, int calls_per_sample) {
            return timer->sample(work, cuda_graph, calls_per_sample);
          },
          copy_gbps, options.repetitions, log, hooks);
      if (device_lost.empty()) device_lost = outcome.device_lost;
      stop_skipped = stop_skipped || outcome.stopped;
    }
    report.write(outcome, {});
    failed += outcome.failures.size();
    log << "  wrote " << report.path.string() << "\n" << std::flush;
    result.reports.push_back(report.path);
    result.checks += checks.size() + outcome.failures.size();
    result.failed_checks += failed;
    result.not_started += outcome.not_started_budget;
    for (const auto& n : outcome.not_run)
      result.not_run.push_back(suite->name + "/" + n["experiment"].get<std::string>() + ": " +
                               n["reason"].get<std::string>());
  }
  result.device_lost = device_lost;
  // A signal that came after the last experiment stopped nothing: the run is complete.
  if (stop_skipped) result.stopped_by = stop_reason();
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
