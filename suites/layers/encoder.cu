// The encoder layer's experiments (Fig. 19: forward and backward, baseline vs managed, over
// sequence lengths) and Fig. 20's memory loop (see suites/suite_layers.h for both contracts).
#include <cmath>
#include <memory>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/cuda_check.h"
#include "core/device_buffer.h"
#include "core/dtype.h"
#include "core/error.h"
#include "layers/baseline_encoder_layer.h"
#include "layers/caching_allocator.h"
#include "layers/device_allocator.h"
#include "layers/encoder_layer.h"
#include "suites/layers/layer_experiments.h"
#include "suites/layers/parameter_block.h"
#include "suites/operators/check_util.h"
#include "suites/suite_layers.h"

namespace seqbench::layer_experiments {

using layers::LayerConfig;

namespace {

// Device parameters, gradients and activations of one encoder layer, and the views into them.
template <class T>
struct LayerData {
  ParameterBlock<T> block;
  DeviceBuffer<T> x, y, dy, dx;
  layers::EncoderLayerWeights weights;
  layers::EncoderLayerGrads grad_views;

  LayerData(const LayerConfig& c, std::size_t rows)
      : block(layers::encoder_layer_parameter_shapes(c), kParamSeed) {
    std::size_t i = 0;
    layers::for_each_encoder_tensor(weights, [&](const char*, const void*& p) { p = block.param(i++); });
    i = 0;
    layers::for_each_encoder_tensor(grad_views, [&](const char*, void*& p) { p = block.grad(i++); });
    const std::size_t n = rows * static_cast<std::size_t>(c.hidden);
    x = DeviceBuffer<T>(n);
    dy = DeviceBuffer<T>(n);
    y = DeviceBuffer<T>(n);
    dx = DeviceBuffer<T>(n);
    operators::check_util::fill(x, kInputSeed, -1.0f, 1.0f);
    operators::check_util::fill(dy, kInputSeed + 1, -1.0f, 1.0f);
    SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
  }
};

// One timing experiment's state: the data, both layers and their allocators.
template <class T>
struct TimingState {
  LayerData<T> data;
  layers::CudaAllocator cuda;
  layers::CountingAllocator managed_counter{cuda}, baseline_counter{cuda};
  layers::CachingAllocator cache{baseline_counter};
  std::unique_ptr<layers::EncoderLayer> managed;
  std::unique_ptr<layers::BaselineEncoderLayer> baseline;

  TimingState(const LayerConfig& c, std::size_t rows) : data(c, rows) {
    managed = std::make_unique<layers::EncoderLayer>(c, data.weights, data.grad_views, managed_counter);
    baseline = std::make_unique<layers::BaselineEncoderLayer>(c, data.weights, data.grad_views, cache);
  }
};

template <class T>
PreparedExperiment prepare_timing(const LayerConfig& c, std::int64_t B, std::int64_t L, bool backward) {
  const std::size_t rows = static_cast<std::size_t>(B * L);
  auto state = std::make_shared<TimingState<T>>(c, rows);
  TimingState<T>* s = state.get();
  const auto fwd_managed = [s, B, L](cudaStream_t stream) {
    s->managed->forward(s->data.y.data(), s->data.x.data(), static_cast<std::size_t>(B),
                        static_cast<std::size_t>(L), nullptr, kDropoutSeed, 0, stream);
  };
  const auto fwd_baseline = [s, B, L](cudaStream_t stream) {
    s->baseline->forward(s->data.y.data(), s->data.x.data(), static_cast<std::size_t>(B),
                         static_cast<std::size_t>(L), nullptr, kDropoutSeed, 0, stream);
  };
  PreparedExperiment p;
  if (!backward) {
    p.variants = {fwd_baseline, fwd_managed};
  } else {
    // The forward each backward differentiates runs once here; the baseline keeps its graph
    // (retain_graph) so that every timed backward does the same work.
    fwd_baseline(nullptr);
    fwd_managed(nullptr);
    p.variants = {[s](cudaStream_t stream) {
                    s->baseline->backward(s->data.dx.data(), s->data.dy.data(), s->data.x.data(), stream,
                                          true);
                  },
                  [s](cudaStream_t stream) {
                    s->managed->backward(s->data.dx.data(), s->data.dy.data(), s->data.x.data(), stream);
                  }};
  }
  // One run of each before timing (GEMM plans, the caching allocator's first blocks).
  for (const Work& w : p.variants) w(nullptr);
  SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
  p.state = state;
  return p;
}

ExperimentSpec timing_experiment(DType dtype, int tokens, int max_len, int L, bool backward) {
  const LayerConfig c = layers_suite_config(dtype, tokens, max_len);
  const std::int64_t B = tokens / L;
  const double flops = encoder_layer_gemm_flops(c, B, L, backward);
  ExperimentSpec e;
  e.name = std::string(backward ? "encoder_bwd/" : "encoder_fwd/") + std::string(dtype_name(dtype)) +
           "/B=" + std::to_string(B) + ",L=" + std::to_string(L);
  e.params = {{"layer", "encoder"},
              {"model", "transformer-big"},
              {"direction", backward ? "bwd" : "fwd"},
              {"dtype", std::string(dtype_name(dtype))},
              {"batch", B},
              {"seq_len", L},
              {"tokens", B * L},
              {"hidden", c.hidden},
              {"ffn", c.ffn},
              {"heads", c.heads},
              {"pre_layer_norm", c.pre_layer_norm},
              {"activation", std::string(layers::activation_name(c.activation))},
              {"attn_dropout", c.attn_dropout},
              {"activation_dropout", c.activation_dropout},
              {"hidden_dropout", c.hidden_dropout},
              {"max_batch_tokens", c.max_batch_tokens},
              {"max_seq_len", c.max_seq_len},
              {"gemm_flops", flops}};
  e.baseline = "baseline";
  // bytes 0: the layer is GEMM-bound; TFLOP/s from the GEMM FLOPs is its figure of merit.
  e.variants = {{"baseline", 0.0, flops}, {"managed", 0.0, flops}};
  e.prepare = [c, B, L, backward] {
    return dispatch_dtype(c.dtype,
                          [&](auto tag) { return prepare_timing<decltype(tag)>(c, B, L, backward); });
  };
  enable_layer_dump(e);  // suites/layers/dump.cu: a dropout-free parity instance, for `seqbench dump`
  return e;
}

// --- Fig. 20: the memory loop ------------------------------------------------------------------

struct LoopStats {
  std::size_t peak_bytes = 0;           // managed: the counter's peak; baseline: peak allocated
  std::size_t peak_reserved_bytes = 0;  // device bytes held at the peak (the counter's peak)
  std::uint64_t setup_allocations = 0;  // device allocations before the loop (construction)
  std::uint64_t loop_allocations = 0;   // device allocations during the loop
  std::uint64_t late_allocations = 0;   // ... during its second half
};

template <class T>
LoopStats run_loop(const LayerConfig& c, LayerData<T>& data, bool baseline,
                   const std::vector<std::pair<std::int64_t, std::int64_t>>& shapes) {
  layers::CudaAllocator cuda;
  layers::CountingAllocator counter(cuda);
  LoopStats st;
  {
    layers::CachingAllocator cache(counter);
    std::unique_ptr<layers::EncoderLayer> managed;
    std::unique_ptr<layers::BaselineEncoderLayer> eager;
    if (baseline)
      eager = std::make_unique<layers::BaselineEncoderLayer>(c, data.weights, data.grad_views, cache);
    else
      managed = std::make_unique<layers::EncoderLayer>(c, data.weights, data.grad_views, counter);
    st.setup_allocations = counter.stats().allocations;
    Stream stream;
    std::uint64_t half = 0;
    for (std::size_t i = 0; i < shapes.size(); ++i) {
      if (i == shapes.size() / 2) half = counter.stats().allocations;
      const std::size_t B = static_cast<std::size_t>(shapes[i].first),
                        L = static_cast<std::size_t>(shapes[i].second);
      const std::uint64_t offset = i * layers::kEncoderLayerDropoutOffsets;
      if (baseline) {
        eager->forward(data.y.data(), data.x.data(), B, L, nullptr, kDropoutSeed, offset, stream.get());
        eager->backward(data.dx.data(), data.dy.data(), data.x.data(), stream.get());
      } else {
        managed->forward(data.y.data(), data.x.data(), B, L, nullptr, kDropoutSeed, offset, stream.get());
        managed->backward(data.dx.data(), data.dy.data(), data.x.data(), stream.get());
      }
    }
    stream.synchronize();
    const layers::AllocationStats s = counter.stats();
    st.loop_allocations = s.allocations - st.setup_allocations;
    st.late_allocations = s.allocations - half;
    st.peak_reserved_bytes = s.peak_live_bytes;
    st.peak_bytes = baseline ? cache.stats().peak_allocated_bytes : s.peak_live_bytes;
  }
  return st;
}

std::string mib(std::size_t bytes) {
  std::ostringstream os;
  os.precision(1);
  os << std::fixed << static_cast<double>(bytes) / (1024.0 * 1024.0) << " MiB";
  return os.str();
}

template <class T>
std::vector<CheckResult> memory_checks(bool quick, std::uint64_t seed) {
  const DType dtype = DTypeTraits<T>::dtype;
  const int tokens = layers_suite_tokens(quick);
  const std::vector<int> lengths = layers_suite_lengths(quick);
  const int max_len = lengths.back();
  const LayerConfig c = layers_suite_config(dtype, tokens, max_len);
  const auto shapes = memory_loop_shapes(seed, quick ? kMemoryStepsQuick : kMemorySteps, tokens, max_len);
  LayerData<T> data(c, static_cast<std::size_t>(tokens));
  const LoopStats managed = run_loop<T>(c, data, false, shapes);
  const LoopStats eager = run_loop<T>(c, data, true, shapes);

  std::ostringstream shape_list;
  for (std::size_t i = 0; i < shapes.size(); ++i)
    shape_list << (i ? " " : "") << shapes[i].first << "x" << shapes[i].second;
  const std::string prefix = "layers/memory/" + std::string(dtype_name(dtype)) + "/";
  std::ostringstream common;
  common << "transformer-big encoder layer, " << shapes.size() << " fwd+bwd steps (seed " << seed
         << ", batch x length: " << shape_list.str() << "), max_batch_tokens " << tokens << ", max_seq_len "
         << max_len << "; managed: peak " << mib(managed.peak_bytes) << " (" << managed.setup_allocations
         << " device allocations at construction, " << managed.loop_allocations
         << " in the loop); baseline: peak allocated " << mib(eager.peak_bytes) << ", peak reserved "
         << mib(eager.peak_reserved_bytes) << " (" << eager.setup_allocations << " at construction, "
         << eager.loop_allocations << " in the loop, " << eager.late_allocations << " in its second half)";

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
  out.push_back(ratio);

  CheckResult steady;
  steady.name = prefix + "steady_state_allocations";
  steady.passed = managed.loop_allocations == 0;
  steady.max_abs_err = static_cast<double>(managed.loop_allocations);
  steady.tolerance = 0.0;
  steady.detail = "device allocations of the managed layer during the loop (want 0); " + common.str();
  out.push_back(steady);
  return out;
}

}  // namespace

void add_encoder_experiments(SuiteSpec& suite, const SuiteOptions& options) {
  const int tokens = layers_suite_tokens(options.quick);
  const std::vector<int> lengths = layers_suite_lengths(options.quick);
  for (const DType dtype : {DType::f16, DType::bf16})
    for (const bool backward : {false, true})
      for (const int L : lengths)
        suite.experiments.push_back(timing_experiment(dtype, tokens, lengths.back(), L, backward));
}

std::vector<CheckResult> encoder_memory_checks(bool quick, std::uint64_t seed) {
  std::vector<CheckResult> all;
  for (const DType dtype : {DType::f16, DType::bf16}) {
    auto some = dispatch_dtype(dtype, [&](auto tag) -> std::vector<CheckResult> {
      using T = decltype(tag);
      if constexpr (std::is_same_v<T, float>)
        return {};
      else
        return memory_checks<T>(quick, seed);
    });
    all.insert(all.end(), some.begin(), some.end());
  }
  return all;
}

}  // namespace seqbench::layer_experiments
