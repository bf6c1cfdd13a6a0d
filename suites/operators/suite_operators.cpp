#include <algorithm>
#include <string>
#include <utility>

#include "suites/gpu_timer.h"
#include "suites/operators/operators.h"

namespace seqbench {

SuiteSpec operators_suite(const SuiteOptions& options) {
  SuiteSpec suite;
  suite.name = "operators";
  suite.description = "fused operator kernels against unfused baselines (LightSeq2 Fig. 16, 17)";
  suite.needs_gpu = true;
  operators::add_layernorm_experiments(suite, options);
  operators::add_softmax_experiments(suite, options);
  operators::add_dropout_experiments(suite, options);
  operators::add_bias_act_dropout_experiments(suite, options);
  operators::add_bias_dropout_residual_experiments(suite, options);
  operators::add_cross_entropy_experiments(suite, options);
  operators::add_embedding_experiments(suite, options);
  operators::add_qkv_reshape_experiments(suite, options);
  // Single small ops, fused and unfused alike: timed as replays of a captured CUDA graph, so that
  // host-side launch costs do not decide a few-microsecond result (suites/pytorch times torch's
  // single ops the same way, so the speedups against torch compare like with like).
  // A sample of a small op is several calls over copies of its buffers (suites/gpu_timer.h), so
  // that neither the graph launch's latency nor L2 hits decide it; the variants share the minimal
  // bytes, and the largest decides.
  for (ExperimentSpec& e : suite.experiments) {
    e.cuda_graph = true;
    double bytes = 0.0;
    for (const VariantSpec& v : e.variants) bytes = std::max(bytes, v.bytes);
    e.calls_per_sample = graph_calls_per_sample(bytes);
    // Tiny shapes check the timing path, not the time: two copies still rotate.
    if (options.tiny) e.calls_per_sample = std::min(e.calls_per_sample, 2);
  }
  // Each family on its own (checks_or_failure): one that throws is its failed check, not the suite's end.
  suite.gpu_checks = [](std::uint64_t seed) {
    using Family = std::vector<CheckResult> (*)(std::uint64_t);
    const std::pair<const char*, Family> families[] = {
        {"layernorm", operators::layernorm_gpu_checks},
        {"softmax", operators::softmax_gpu_checks},
        {"dropout", operators::dropout_gpu_checks},
        {"bias_act_dropout", operators::bias_act_dropout_gpu_checks},
        {"bias_dropout_residual", operators::bias_dropout_residual_gpu_checks},
        {"cross_entropy", operators::cross_entropy_gpu_checks},
        {"embedding", operators::embedding_gpu_checks},
        {"qkv_reshape", operators::qkv_reshape_gpu_checks}};
    std::vector<CheckResult> all;
    for (const auto& [name, family] : families) {
      auto checks = checks_or_failure(std::string("operators/gpu/") + name,
                                      [&, family = family] { return family(seed); });
      all.insert(all.end(), checks.begin(), checks.end());
    }
    return all;
  };
  return suite;
}

}  // namespace seqbench
