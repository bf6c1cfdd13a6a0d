// The decoder layer's experiments (Fig. 19 for the decoder: forward and backward, baseline vs
// managed, over sequence lengths; see suites/suite_layers.h for the contract).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/cuda_check.h"
#include "core/device_buffer.h"
#include "core/dtype.h"
#include "layers/baseline_decoder_layer.h"
#include "layers/caching_allocator.h"
#include "layers/decoder_layer.h"
#include "layers/device_allocator.h"
#include "suites/layers/layer_experiments.h"
#include "suites/layers/parameter_block.h"
#include "suites/operators/check_util.h"
#include "suites/suite_layers.h"

namespace seqbench::layer_experiments {

using layers::LayerConfig;

namespace {

// Device parameters, gradients and activations of one decoder layer (target x [B·L, H], encoder
// output [B·S, H]), and the views into them.
template <class T>
struct DecoderData {
  ParameterBlock<T> block;
  DeviceBuffer<T> x, enc, y, dy, dx, denc;
  layers::DecoderLayerWeights weights;
  layers::DecoderLayerGrads grad_views;

  DecoderData(const LayerConfig& c, std::size_t rows, std::size_t src_rows)
      : block(layers::decoder_layer_parameter_shapes(c), kParamSeed) {
    std::size_t i = 0;
    layers::for_each_decoder_tensor(weights, [&](const char*, const void*& p) { p = block.param(i++); });
    i = 0;
    layers::for_each_decoder_tensor(grad_views, [&](const char*, void*& p) { p = block.grad(i++); });
    const std::size_t H = static_cast<std::size_t>(c.hidden);
    x = DeviceBuffer<T>(rows * H);
    dy = DeviceBuffer<T>(rows * H);
    y = DeviceBuffer<T>(rows * H);
    dx = DeviceBuffer<T>(rows * H);
    enc = DeviceBuffer<T>(src_rows * H);
    denc = DeviceBuffer<T>(src_rows * H);
    operators::check_util::fill(x, kInputSeed, -1.0f, 1.0f);
    operators::check_util::fill(dy, kInputSeed + 1, -1.0f, 1.0f);
    operators::check_util::fill(enc, kInputSeed + 2, -1.0f, 1.0f);
    SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
  }
};

// One timing experiment's state: the data, both layers and their allocators.
template <class T>
struct DecoderTimingState {
  DecoderData<T> data;
  layers::CudaAllocator cuda;
  layers::CountingAllocator managed_counter{cuda}, baseline_counter{cuda};
  layers::CachingAllocator cache{baseline_counter};
  std::unique_ptr<layers::DecoderLayer> managed;
  std::unique_ptr<layers::BaselineDecoderLayer> baseline;

  DecoderTimingState(const LayerConfig& c, std::size_t rows, std::size_t src_rows) : data(c, rows, src_rows) {
    managed = std::make_unique<layers::DecoderLayer>(c, data.weights, data.grad_views, managed_counter);
    baseline = std::make_unique<layers::BaselineDecoderLayer>(c, data.weights, data.grad_views, cache);
  }
};

template <class T>
PreparedExperiment prepare_decoder_timing(const LayerConfig& c, std::int64_t B, std::int64_t L,
                                          std::int64_t S, bool backward) {
  auto state = std::make_shared<DecoderTimingState<T>>(c, static_cast<std::size_t>(B * L),
                                                       static_cast<std::size_t>(B * S));
  DecoderTimingState<T>* s = state.get();
  const std::size_t b = static_cast<std::size_t>(B), l = static_cast<std::size_t>(L),
                    sl = static_cast<std::size_t>(S);
  const auto fwd_managed = [s, b, l, sl](cudaStream_t stream) {
    s->managed->forward(s->data.y.data(), s->data.x.data(), s->data.enc.data(), b, l, sl, nullptr, nullptr,
                        kDropoutSeed, 0, stream);
  };
  const auto fwd_baseline = [s, b, l, sl](cudaStream_t stream) {
    s->baseline->forward(s->data.y.data(), s->data.x.data(), s->data.enc.data(), b, l, sl, nullptr, nullptr,
                         kDropoutSeed, 0, stream);
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
                    s->baseline->backward(s->data.dx.data(), s->data.denc.data(), s->data.dy.data(),
                                          s->data.x.data(), s->data.enc.data(), stream, true);
                  },
                  [s](cudaStream_t stream) {
                    s->managed->backward(s->data.dx.data(), s->data.denc.data(), s->data.dy.data(),
                                         s->data.x.data(), s->data.enc.data(), stream);
                  }};
  }
  // One run of each before timing (GEMM plans, the caching allocator's first blocks).
  for (const Work& w : p.variants) w(nullptr);
  SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
  p.state = state;
  return p;
}

ExperimentSpec decoder_timing_experiment(DType dtype, int tokens, int max_len, int L, bool backward) {
  const LayerConfig c = layers_suite_config(dtype, tokens, max_len);
  const std::int64_t B = tokens / L;
  const std::int64_t S = L;  // the encoder output's length: the contract's S = L
  const double flops = decoder_layer_gemm_flops(c, B, L, S, backward);
  ExperimentSpec e;
  e.name = std::string(backward ? "decoder_bwd/" : "decoder_fwd/") + std::string(dtype_name(dtype)) +
           "/B=" + std::to_string(B) + ",L=" + std::to_string(L);
  e.params = {{"layer", "decoder"},
              {"model", "transformer-big"},
              {"direction", backward ? "bwd" : "fwd"},
              {"dtype", std::string(dtype_name(dtype))},
              {"batch", B},
              {"seq_len", L},
              {"src_len", S},
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
  e.prepare = [c, B, L, S, backward] {
    return dispatch_dtype(
        c.dtype, [&](auto tag) { return prepare_decoder_timing<decltype(tag)>(c, B, L, S, backward); });
  };
  enable_layer_dump(e);  // suites/layers/dump.cu: a dropout-free parity instance, for `seqbench dump`
  return e;
}

}  // namespace

void add_decoder_experiments(SuiteSpec& suite, const SuiteOptions& options) {
  const int tokens = layers_suite_tokens(options.quick);
  const std::vector<int> lengths = layers_suite_lengths(options.quick);
  for (const DType dtype : {DType::f16, DType::bf16})
    for (const bool backward : {false, true})
      for (const int L : lengths)
        suite.experiments.push_back(decoder_timing_experiment(dtype, tokens, lengths.back(), L, backward));
}

}  // namespace seqbench::layer_experiments
