// The decoder layer's experiments (Fig. 19 for the decoder: forward and backward, baseline vs
// managed, over sequence lengths) and Fig. 20's memory loop over it (see suites/suite_layers.h for
// the contract); the timing pattern and the loop are layer_timing.h's.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/cuda_check.h"
#include "core/device_buffer.h"
#include "core/dtype.h"
#include "layers/baseline_decoder_layer.h"
#include "layers/decoder_layer.h"
#include "suites/layers/layer_experiments.h"
#include "suites/layers/layer_timing.h"
#include "suites/layers/parameter_block.h"
#include "suites/operators/check_util.h"
#include "suites/suite_layers.h"

namespace seqbench::layer_experiments {

using layers::LayerConfig;

namespace {

// Device parameters, gradients and activations of one decoder layer for up to `rows` target tokens
// (x [rows, H]) over an encoder output of as many rows (enc [rows, H]: the suite's S = L), and the
// views into them.
template <class T>
struct DecoderData : LayerActivations<T> {
  ParameterBlock<T> block;
  DeviceBuffer<T> enc, denc;
  layers::DecoderLayerWeights weights;
  layers::DecoderLayerGrads grad_views;

  DecoderData(const LayerConfig& c, std::size_t rows)
      : LayerActivations<T>(rows, c.hidden),
        block(layers::decoder_layer_parameter_shapes(c), kParamSeed),
        enc(rows * static_cast<std::size_t>(c.hidden)),
        denc(rows * static_cast<std::size_t>(c.hidden)) {
    block.bind(weights, grad_views, kDecoderTensors);
    operators::check_util::fill(enc, kInputSeed + 2, -1.0f, 1.0f);
    SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
  }
};

// The decoder pair (layer_timing.h's Pair): DecoderLayer against BaselineDecoderLayer on x [B·L, H]
// and encoder_out [B·S, H] with S = L (the encoder output as long as the step's target), no
// padding; the backward writes dx, d_encoder_out and every parameter gradient.
template <class T>
struct DecoderPair {
  using Value = T;
  using Managed = layers::DecoderLayer;
  using Baseline = layers::BaselineDecoderLayer;
  using ManagedOptions = layers::DecoderLayerOptions;
  using Data = DecoderData<T>;
  static const char* layer() { return "decoder"; }
  static constexpr std::uint64_t dropout_offsets() { return layers::kDecoderLayerDropoutOffsets; }

  template <class Layer>
  static void forward(Layer& layer, Data& d, std::size_t B, std::size_t L, std::uint64_t offset,
                      cudaStream_t stream) {
    layer.forward(d.y.data(), d.x.data(), d.enc.data(), B, L, L, nullptr, nullptr, kDropoutSeed, offset,
                  stream);
  }
  static void backward(Managed& layer, Data& d, cudaStream_t stream) {
    layer.backward(d.dx.data(), d.denc.data(), d.dy.data(), d.x.data(), d.enc.data(), stream);
  }
  static void backward(Baseline& layer, Data& d, cudaStream_t stream, bool retain_graph) {
    layer.backward(d.dx.data(), d.denc.data(), d.dy.data(), d.x.data(), d.enc.data(), stream, retain_graph);
  }
};

template <class T>
PreparedExperiment prepare_decoder_timing(const LayerConfig& c, std::int64_t B, std::int64_t L,
                                          bool backward) {
  auto state =
      std::make_shared<PairTimingState<DecoderPair<T>>>(c, static_cast<std::size_t>(B * L), backward);
  PreparedExperiment p = time_pair(pair_work(*state, B, L), backward);
  p.state = state;
  return p;
}

ExperimentSpec decoder_timing_experiment(const LayersSuiteShapes& shapes, DType dtype, int L, bool backward) {
  const LayerConfig c = layers_suite_config(shapes, dtype, shapes.tokens, shapes.lengths.back());
  const std::int64_t B = shapes.tokens / L;
  const std::int64_t S = L;  // the encoder output's length: the contract's S = L (DecoderPair)
  const double flops = decoder_layer_gemm_flops(c, B, L, S, backward);
  // bytes 0: the layer is GEMM-bound; TFLOP/s from the GEMM FLOPs is its figure of merit.
  ExperimentSpec e = layer_experiment("decoder", dtype, B, L, backward, 0.0, flops, /*keep_variant=*/true);
  add_gemm_layer_params(e.params, shapes.model, c, flops);
  e.params["src_len"] = S;
  e.prepare = [c, B, L, backward] {
    return dispatch_dtype(c.dtype,
                          [&](auto tag) { return prepare_decoder_timing<decltype(tag)>(c, B, L, backward); });
  };
  if (shapes.dumps) enable_layer_dump(e);  // dump.cu: a dropout-free parity instance, for `seqbench dump`
  return e;
}

}  // namespace

void add_decoder_experiments(SuiteSpec& suite, const SuiteOptions& options) {
  add_layer_sweep(suite, options, decoder_timing_experiment);
}

std::vector<CheckResult> decoder_memory_checks(const LayersSuiteShapes& shapes, std::uint64_t seed) {
  return layer_memory_checks<DecoderPair>(shapes, seed);
}

}  // namespace seqbench::layer_experiments
