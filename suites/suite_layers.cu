#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
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
#include "suites/operators/check_util.h"
#include "suites/suite_layers.h"

namespace seqbench {

using layers::LayerConfig;

LayerConfig layers_suite_config(DType dtype, int max_batch_tokens, int max_seq_len) {
  LayerConfig c = layers::preset("transformer-big").layer;
  c.max_batch_tokens = max_batch_tokens;
  c.max_seq_len = max_seq_len;
  c.dtype = dtype;
  c.validate();
  return c;
}

std::vector<int> layers_suite_lengths(bool quick) {
  if (quick) return {64, 128};
  return {32, 64, 128, 256};
}

int layers_suite_tokens(bool quick) {
  return quick ? 4096 : 8192;
}

double encoder_layer_gemm_flops(const LayerConfig& config, std::int64_t batch, std::int64_t len,
                                bool backward) {
  const double T = static_cast<double>(batch) * static_cast<double>(len);
  const double H = config.hidden, F = config.ffn;
  const double forward = 2.0 * T * H * (4.0 * H + 2.0 * F) + 4.0 * static_cast<double>(batch) *
                                                                 static_cast<double>(len) *
                                                                 static_cast<double>(len) * H;
  return backward ? 2.0 * forward : forward;
}

std::vector<std::pair<std::int64_t, std::int64_t>> memory_loop_shapes(std::uint64_t seed, int steps,
                                                                      int tokens, int max_seq_len) {
  SEQBENCH_REQUIRE(steps >= 1 && max_seq_len >= 8 && tokens >= max_seq_len,
                   "memory_loop_shapes: steps " << steps << " (>= 1), max_seq_len " << max_seq_len
                                                << " (>= 8), tokens " << tokens << " (>= max_seq_len)");
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> length(8, max_seq_len);
  std::vector<std::pair<std::int64_t, std::int64_t>> shapes;
  for (int i = 0; i < steps; ++i) {
    const int L = i == 0 ? max_seq_len : length(rng);
    shapes.emplace_back(tokens / L, L);
  }
  return shapes;
}

namespace {

constexpr std::uint64_t kParamSeed = 0x1a7e5, kInputSeed = 0x1a7e6, kDropoutSeed = 0xd50;

// Device parameters, gradients and activations of one encoder layer, and the views into them.
template <class T>
struct LayerData {
  DeviceBuffer<T> params, grads, x, y, dy, dx;
  layers::EncoderLayerWeights weights;
  layers::EncoderLayerGrads grad_views;

  LayerData(const LayerConfig& c, std::size_t rows) {
    const std::vector<layers::EncoderTensorShape> shapes = layers::encoder_layer_parameter_shapes(c);
    std::size_t total = 0;
    for (const auto& s : shapes) total += s.elements();
    params = DeviceBuffer<T>(total);
    grads = DeviceBuffer<T>(total);
    grads.fill_bytes(0);
    // Weights U(-1/√in, 1/√in) (unit-gain projections), LayerNorm gamma 1 ± 0.5, biases and beta
    // small: realistic activations, no overflow in f16.
    std::size_t offset = 0, i = 0;
    std::vector<std::size_t> offsets;
    for (const auto& s : shapes) {
      offsets.push_back(offset);
      const bool gamma = s.name.find("gamma") != std::string::npos;
      const float r = s.rows > 1 ? static_cast<float>(1.0 / std::sqrt(static_cast<double>(s.cols))) : 0.05f;
      const std::vector<T> host = operators::check_util::random_values<T>(
          s.elements(), kParamSeed + i++, gamma ? 0.5f : -r, gamma ? 1.5f : r);
      SEQBENCH_CUDA_CHECK(
          cudaMemcpy(params.data() + offset, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
      offset += s.elements();
    }
    i = 0;
    layers::for_each_encoder_tensor(weights,
                                    [&](const char*, const void*& p) { p = params.data() + offsets[i++]; });
    i = 0;
    layers::for_each_encoder_tensor(grad_views,
                                    [&](const char*, void*& p) { p = grads.data() + offsets[i++]; });
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

SuiteSpec layers_suite(const SuiteOptions& options) {
  SuiteSpec suite;
  suite.name = "layers";
  suite.description =
      "LightSeq2 Fig. 19/20: the Transformer-Big encoder layer, forward and backward, eager-like baseline "
      "(unfused kernels, caching allocator, uint8 masks) against the managed fused layer over sequence "
      "lengths; GPU checks: peak device memory and allocation counts over a variable-length training loop";
  suite.needs_gpu = true;
  const int tokens = layers_suite_tokens(options.quick);
  const std::vector<int> lengths = layers_suite_lengths(options.quick);
  for (const DType dtype : {DType::f16, DType::bf16})
    for (const bool backward : {false, true})
      for (const int L : lengths)
        suite.experiments.push_back(timing_experiment(dtype, tokens, lengths.back(), L, backward));
  const bool quick = options.quick;
  suite.gpu_checks = [quick](std::uint64_t seed) {
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
  };
  return suite;
}

}  // namespace seqbench
