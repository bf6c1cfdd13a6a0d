// What a suite is: named experiments, each a set of variants timed on the same inputs, plus the
// correctness checks that belong to the suite. Suites only describe; runner.cpp times (through
// GpuTimer), and report.cpp writes.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/check_result.h"
#include "suites/dump.h"

namespace seqbench {

// One way of computing the experiment's result. `bytes` is the minimal traffic (each input read
// once, each output written once) and `flops` the arithmetic; both feed GB/s and TFLOP/s.
struct VariantSpec {
  std::string name;
  double bytes = 0;
  double flops = 0;
  // Non-empty: this variant times a part of the variant of that name (a stage left out, so that the
  // difference places the time), not the whole operation. Tables never call it the best, and never
  // set it against PyTorch.
  std::string component_of = {};
};

using Work = std::function<void(cudaStream_t)>;

// The result of preparing an experiment: inputs allocated and filled, one callable per variant
// in the order of ExperimentSpec::variants. `state` owns the buffers the callables use. The runner
// may prepare an experiment several times at once (ExperimentSpec::calls_per_sample): one
// preparation's buffers must not be shared with another's.
struct PreparedExperiment {
  std::vector<Work> variants;
  std::shared_ptr<void> state;
  // Optional, for `seqbench dump` (suites/dump.h): host copies of the inputs and of the outputs
  // that ExperimentSpec::dump_variant wrote; called after that variant ran once.
  std::function<std::vector<DumpArray>()> dump;
  // Optional: what the experiment decided while it ran (e.g. the configuration the softmax tuner
  // chose, with every candidate's time), called once after its last variant ran; the report
  // records it as the experiment's `notes` object.
  std::function<nlohmann::json()> notes;
};

struct ExperimentSpec {
  std::string name;                                  // unique within the suite: "copy/1GiB"
  nlohmann::json params = nlohmann::json::object();  // the shape: {"bytes": 1073741824}
  std::string baseline;                              // the variant every speedup is measured against
  std::vector<VariantSpec> variants;
  // What an outside runner (suites/pytorch/) needs to rebuild the same inputs beyond `params`, e.g.
  // the trainer's per-tensor element counts. Only `seqbench list --json` prints it (as "inputs"):
  // it can be long, so reports and tables leave it out. Empty object: params say everything.
  nlohmann::json inputs = nlohmann::json::object();
  // The variant whose outputs `seqbench dump` writes (its prepare() then sets
  // PreparedExperiment::dump); empty: the experiment does not dump, and dump skips it unprepared.
  std::string dump_variant;
  // Added to `params` in the dump's manifest only (not in reports or tables): what the dump ran
  // that the timing did not, e.g. the layers suite's parity instance (its shape, dropout 0).
  nlohmann::json dump_params = nlohmann::json::object();
  // Optional: a dump that needs neither the timing's inputs nor a run of dump_variant (the layers'
  // separate parity instances, suites/layers/dump.cu). `seqbench dump` then calls it instead of
  // preparing the experiment and running the variant at the timed shape, whose outputs it would
  // not write. dump_variant still names the variant the arrays are of. It may add to the manifest's
  // params what only the run finds out (the layers' ReLU margins), through its argument.
  std::function<std::vector<DumpArray>(nlohmann::json& manifest_params)> dump_standalone;
  std::function<PreparedExperiment()> prepare;  // called only where a GPU is present
  // Time each variant through a CUDA graph (suites/gpu_timer.h, rule 5): for single small ops, whose
  // host-side launch cost must not decide the result (suites/pytorch graphs torch's the same way).
  // Layers and optimizers are timed directly: their launch count is part of what they cost.
  bool cuda_graph = false;
  // Calls per timed sample (graph_calls_per_sample in suites/gpu_timer.h: more than one only for
  // graphed experiments moving under kGraphSampleBytes a call). The runner then calls `prepare` this
  // many times and rotates over the copies, one call of each per sample, so that no call finds its
  // inputs in L2; every copy must be independent (its own buffers) and give the same results.
  int calls_per_sample = 1;
};

struct SuiteSpec {
  std::string name;
  std::string description;
  bool needs_gpu = true;
  std::vector<ExperimentSpec> experiments;
  // Correctness checks; `cpu_checks` run everywhere, `gpu_checks` only with a device.
  std::function<std::vector<CheckResult>(std::uint64_t seed)> cpu_checks;
  std::function<std::vector<CheckResult>(std::uint64_t seed)> gpu_checks;
  // Byte accounting that needs no timing (the report's optional "accounting" list), CPU only.
  std::function<nlohmann::json()> accounting;
};

struct SuiteOptions {
  bool quick = false;  // smaller shapes, for smoke runs
  // Shapes small enough for the suites' timing paths to run where kernels are slow, under
  // tests/simt's CPU emulation: the operator suite's smallest shapes at two calls a sample, the
  // trainer suite's one synthetic model of odd-sized tensors, the layers suite's small layer (see
  // each suite). Not a measurement, and not offered by the command line.
  bool tiny = false;
};

// `run()` (one family of a suite's checks), or, when it throws, one failed check "checks/<family>"
// carrying the message: one family's CUDA error, refused launch or missing cuBLASLt algorithm costs
// that family, not the suite's other checks and measurements (suites/runner.cpp).
std::vector<CheckResult> checks_or_failure(const std::string& family,
                                           const std::function<std::vector<CheckResult>()>& run);

// Throws seqbench::Error naming the suite and the name unless every experiment's name is non-empty
// and unique within the suite, and every variant's is unique within its experiment and made of
// letters, digits and '_'. Reports, merges, tables and the runner's sample maps key on experiment
// names (two of one name pooled their samples into one wrong median); run/<suite>/<experiment>/
// <variant> failures are split at the last '/'.
void require_unique_names(const SuiteSpec& suite);

// Every suite, in a fixed order (suites/suites.cpp), each through require_unique_names. Describing a
// suite touches no GPU.
std::vector<SuiteSpec> all_suites(const SuiteOptions& options);

// Fails with the list of known names when `name` is not one of them.
const SuiteSpec& find_suite(const std::vector<SuiteSpec>& suites, const std::string& name);

// The suites `names` ask for, in the order first asked and each once (`--suite x --suite x` runs x
// once); every suite, in order, when `names` is empty. Fails as find_suite for an unknown name.
std::vector<const SuiteSpec*> select_suites(const std::vector<SuiteSpec>& all,
                                            const std::vector<std::string>& names);

}  // namespace seqbench
