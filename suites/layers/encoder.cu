// The encoder layer's experiments (Fig. 19: forward and backward, baseline vs managed, over
// sequence lengths) and Fig. 20's memory loop over it (see suites/suite_layers.h for both
// contracts); the timing pattern and the loop are layer_timing.h's.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/cuda_check.h"
#include "core/device_buffer.h"
#include "core/dtype.h"
#include "layers/baseline_encoder_layer.h"
#include "layers/encoder_layer.h"
#include "suites/layers/layer_experiments.h"
#include "suites/layers/layer_timing.h"
#include "suites/layers/parameter_block.h"
#include "suites/operators/check_util.h"
#include "suites/suite_layers.h"

namespace seqbench::layer_experiments {

using layers::LayerConfig;

namespace {

// Device parameters, gradients and activations of one encoder layer, and the views into them.
template <class T>
struct LayerData : LayerActivations<T> {
  ParameterBlock<T> block;
  layers::EncoderLayerWeights weights;
  layers::EncoderLayerGrads grad_views;

  LayerData(const LayerConfig& c, std::size_t rows)
      : LayerActivations<T>(rows, c.hidden), block(layers::encoder_layer_parameter_shapes(c), kParamSeed) {
    block.bind(weights, grad_views, kEncoderTensors);
  }
};

// The encoder pair (layer_timing.h's Pair): EncoderLayer against BaselineEncoderLayer on x
// [B·L, H], no padding.
template <class T>
struct EncoderPair {
  using Value = T;
  using Managed = layers::EncoderLayer;
  using Baseline = layers::BaselineEncoderLayer;
  using ManagedOptions = layers::EncoderLayerOptions;
  using Data = LayerData<T>;
  static const char* layer() { return "encoder"; }
  static constexpr std::uint64_t dropout_offsets() { return layers::kEncoderLayerDropoutOffsets; }

  template <class Layer>
  static void forward(Layer& layer, Data& d, std::size_t B, std::size_t L, std::uint64_t offset,
                      cudaStream_t stream) {
    layer.forward(d.y.data(), d.x.data(), B, L, nullptr, kDropoutSeed, offset, stream);
  }
  static void backward(Managed& layer, Data& d, cudaStream_t stream) {
    layer.backward(d.dx.data(), d.dy.data(), d.x.data(), stream);
  }
  static void backward(Baseline& layer, Data& d, cudaStream_t stream, bool retain_graph) {
    layer.backward(d.dx.data(), d.dy.data(), d.x.data(), stream, retain_graph);
  }
};

template <class T>
PreparedExperiment prepare_timing(const LayerConfig& c, std::int64_t B, std::int64_t L, bool backward) {
  auto state =
      std::make_shared<PairTimingState<EncoderPair<T>>>(c, static_cast<std::size_t>(B * L), backward);
  PreparedExperiment p = time_pair(pair_work(*state, B, L), backward);
  p.state = state;
  return p;
}

ExperimentSpec timing_experiment(const LayersSuiteShapes& shapes, DType dtype, int L, bool backward) {
  const LayerConfig c = layers_suite_config(shapes, dtype, shapes.tokens, shapes.lengths.back());
  const std::int64_t B = shapes.tokens / L;
  const double flops = encoder_layer_gemm_flops(c, B, L, backward);
  // bytes 0: the layer is GEMM-bound; TFLOP/s from the GEMM FLOPs is its figure of merit.
  ExperimentSpec e = layer_experiment("encoder", dtype, B, L, backward, 0.0, flops, /*keep_variant=*/true);
  add_gemm_layer_params(e.params, shapes.model, c, flops);
  e.prepare = [c, B, L, backward] {
    return dispatch_dtype(c.dtype,
                          [&](auto tag) { return prepare_timing<decltype(tag)>(c, B, L, backward); });
  };
  if (shapes.dumps) enable_layer_dump(e);  // dump.cu: a dropout-free parity instance, for `seqbench dump`
  return e;
}

}  // namespace

void add_encoder_experiments(SuiteSpec& suite, const SuiteOptions& options) {
  add_layer_sweep(suite, options, timing_experiment);
}

std::vector<CheckResult> encoder_memory_checks(const LayersSuiteShapes& shapes, std::uint64_t seed) {
  return layer_memory_checks<EncoderPair>(shapes, seed);
}

}  // namespace seqbench::layer_experiments
