// The host side of layer_timing.h: the timing pattern, an experiment's common description, and the
// memory loop's check names and results.
#include "suites/layers/layer_timing.h"

#include <cmath>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "core/cuda_check.h"

namespace seqbench::layer_experiments {

PreparedExperiment time_pair(const PairWork& work, bool backward) {
  PreparedExperiment p;
  if (!backward) {
    p.variants = {work.baseline_forward, work.managed_forward};
  } else {
    // The forward each backward differentiates runs once here; the baseline keeps its graph
    // (retain_graph) so that every timed backward does the same work.
    work.baseline_forward(nullptr);
    work.managed_forward(nullptr);
    p.variants = {[f = work.baseline_backward](cudaStream_t stream) { f(stream, true); },
                  work.managed_backward};
    if (work.managed_keep_backward) {
      work.managed_keep_forward(nullptr);
      p.variants.push_back(work.managed_keep_backward);
    }
  }
  // One run of each before timing (GEMM plans, the caching allocator's first blocks).
  for (const Work& w : p.variants) w(nullptr);
  SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
  return p;
}

ExperimentSpec layer_experiment(const std::string& layer, DType dtype, std::int64_t batch, std::int64_t len,
                                bool backward, double bytes, double flops, bool keep_variant) {
  ExperimentSpec e;
  e.name = layer + (backward ? "_bwd/" : "_fwd/") + std::string(dtype_name(dtype)) +
           "/B=" + std::to_string(batch) + ",L=" + std::to_string(len);
  e.params = {{"layer", layer},
              {"direction", backward ? "bwd" : "fwd"},
              {"dtype", std::string(dtype_name(dtype))},
              {"batch", batch},
              {"seq_len", len},
              {"tokens", batch * len}};
  e.baseline = "baseline";
  e.variants = {{"baseline", bytes, flops}, {"managed", bytes, flops}};
  if (backward && keep_variant) e.variants.push_back({"managed_keep", bytes, flops});
  return e;
}

void add_gemm_layer_params(nlohmann::json& params, const std::string& model, const layers::LayerConfig& c,
                           double gemm_flops) {
  params["model"] = model;
  params["hidden"] = c.hidden;
  params["ffn"] = c.ffn;
  params["heads"] = c.heads;
  params["pre_layer_norm"] = c.pre_layer_norm;
  params["activation"] = std::string(layers::activation_name(c.activation));
  params["attn_dropout"] = c.attn_dropout;
  params["activation_dropout"] = c.activation_dropout;
  params["hidden_dropout"] = c.hidden_dropout;
  params["layer_norm_eps"] = c.layer_norm_eps;
  params["max_batch_tokens"] = c.max_batch_tokens;
  params["max_seq_len"] = c.max_seq_len;
  params["gemm_flops"] = gemm_flops;
}

std::vector<std::string> memory_loop_layers() {
  return {"encoder", "decoder", "encoder_stack"};
}

std::string memory_check_prefix(const std::string& layer, DType dtype) {
  const std::string d(dtype_name(dtype));
  return layer == "encoder" ? "layers/memory/" + d + "/" : "layers/memory/" + layer + "/" + d + "/";
}

std::vector<std::string> memory_check_names() {
  std::vector<std::string> names;
  for (const std::string& layer : memory_loop_layers())
    for (const DType dtype : kLayerDTypes)
      for (const char* check : {"peak_ratio", "steady_state_allocations"})
        names.push_back(memory_check_prefix(layer, dtype) + check);
  return names;
}

namespace {

std::string mib(std::size_t bytes) {
  std::ostringstream os;
  os.precision(1);
  os << std::fixed << static_cast<double>(bytes) / (1024.0 * 1024.0) << " MiB";
  return os.str();
}

std::string signed_mib(std::int64_t bytes) {
  std::ostringstream os;
  if (bytes < 0) os << '-';
  os << mib(static_cast<std::size_t>(bytes < 0 ? -bytes : bytes));
  return os.str();
}

}  // namespace

std::vector<CheckResult> memory_loop_checks(const std::string& model, const std::string& layer, DType dtype,
                                            std::uint64_t seed, int tokens, int max_len,
                                            const std::vector<std::pair<std::int64_t, std::int64_t>>& shapes,
                                            const LoopStats& managed, const LoopStats& eager,
                                            const LoopStats* kept) {
  std::ostringstream shape_list;
  for (std::size_t i = 0; i < shapes.size(); ++i)
    shape_list << (i ? " " : "") << shapes[i].first << "x" << shapes[i].second;
  const std::string prefix = memory_check_prefix(layer, dtype);
  std::ostringstream common;
  common << model << " "
         << (layer == "encoder_stack" ? "encoder stack of " + std::to_string(kEncoderStackLayers) + " layers"
                                      : layer + " layer")
         << (layer == "decoder" ? " (encoder_out of the step's target length)" : "") << ", " << shapes.size()
         << " fwd+bwd steps (seed " << seed << ", batch x length: " << shape_list.str()
         << "), max_batch_tokens " << tokens << ", max_seq_len " << max_len << "; managed: peak "
         << mib(managed.peak_bytes) << " (" << managed.setup_allocations
         << " device allocations at construction, " << managed.loop_allocations
         << " in the loop); baseline: peak allocated " << mib(eager.peak_bytes) << ", peak reserved "
         << mib(eager.peak_reserved_bytes) << " (" << eager.setup_allocations << " at construction, "
         << eager.loop_allocations << " in the loop, " << eager.late_allocations << " in its second half)"
         << "; device memory taken in the loop's second half (cudaMemGetInfo: every allocator, cuBLASLt's "
            "and CUDA's lazy module loading included; not checked): managed "
         << signed_mib(managed.late_device_bytes) << ", baseline " << signed_mib(eager.late_device_bytes);

  std::vector<CheckResult> out;
  CheckResult ratio;
  ratio.name = prefix + "peak_ratio";
  const double r = eager.peak_bytes > 0
                       ? static_cast<double>(managed.peak_bytes) / static_cast<double>(eager.peak_bytes)
                       : INFINITY;
  ratio.passed = r <= kMemoryRatioTarget;
  ratio.max_abs_err = static_cast<double>(managed.peak_bytes);
  ratio.max_rel_err = r;
  ratio.tolerance = kMemoryRatioTarget;
  ratio.detail = "managed peak / baseline peak allocated = " + std::to_string(r) +
                 " (target <= " + std::to_string(kMemoryRatioTarget) + "); " + common.str();
  if (kept != nullptr) {
    const double kr = eager.peak_bytes > 0
                          ? static_cast<double>(kept->peak_bytes) / static_cast<double>(eager.peak_bytes)
                          : INFINITY;
    ratio.detail +=
        "; not checked: managed with Recompute::none (keeps the dropped probabilities and "
        "the FFN activation, as LightSeq2): peak " +
        mib(kept->peak_bytes) + ", ratio " + std::to_string(kr) + ", " +
        std::to_string(kept->loop_allocations) + " allocations in the loop";
  }
  out.push_back(ratio);

  CheckResult steady;
  steady.name = prefix + "steady_state_allocations";
  steady.passed = managed.loop_allocations == 0;
  steady.max_abs_err = static_cast<double>(managed.loop_allocations);
  steady.tolerance = 0.0;
  steady.detail = "device allocations of the managed layer during the loop (want 0); " + common.str();
  steady.values = {{"managed_late_device_bytes", static_cast<double>(managed.late_device_bytes)},
                   {"baseline_late_device_bytes", static_cast<double>(eager.late_device_bytes)}};
  out.push_back(steady);
  return out;
}

}  // namespace seqbench::layer_experiments
